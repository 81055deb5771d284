/* test-window.c — the window with a real node: the wire precision dropdown
 * seen from a second node, and Leave stopping the local ranks
 *
 * The app's window joins a local cohort; a second node (in this process, on
 * the same real local bus) watches every frame the window's node sends it.
 * Choosing "f8 E4M3" in the dropdown must change the format of the frames
 * that node encodes from then on: every bulk frame about a step that began
 * after the change carries f8e4m3, and one arrives. The window's node runs
 * on its own thread (RlxNodeThread); the test reads it only through what
 * that thread mirrors to this one (its steps, its roster). Leave stops the
 * local ranks and clears the rate card (the totals stay).
 */
#include "rlx-config.h"
#include "node-test-utils.h"
#include "rlx-window-private.h"
#include "rlx-preferences-window.h"
#include "rlx-wire-panel.h"
#include "core/rlx-node.h"
#include "core/rlx-node-thread.h"
#include "core/wire/rlx-wire.h"

#include <adwaita.h>

#define TIMEOUT_MS 90000

typedef struct {
  gint64       step;
  RlxPrecision precision;
} Seen;

typedef struct {
  RlxWindow *window;
  RlxNode   *watcher;
  char      *watched_id;     /* the window's node */
  GArray    *seen;           /* Seen: bulk frames from the window's node */
  guint      bad_frames;
  gboolean   started;
} Fixture;

static void
on_frame (RlxLink *link, GBytes *frame, Fixture *f)
{
  const char *peer = g_object_get_data (G_OBJECT (link), "test-peer-id");

  g_autoptr(JsonObject) header = NULL;
  g_autoptr(GError) error = NULL;
  RlxWireInfo info;
  Seen s;

  if (f->watched_id == NULL || g_strcmp0 (peer, f->watched_id) != 0)
    return;
  if (!rlx_wire_decode_full (frame, NULL, &info, &header, NULL, &error))
    {
      f->bad_frames++;
      return;
    }
  if (!info.has_values || info.n == 0)
    return;   /* control messages carry no array */
  s.step = json_object_get_int_member_with_default (header, "step", -1);
  s.precision = info.precision;
  g_array_append_val (f->seen, s);
}

static void
on_link_added (RlxNode *node, RlxLink *link, const char *peer_id, Fixture *f)
{
  g_object_set_data_full (G_OBJECT (link), "test-peer-id", g_strdup (peer_id), g_free);
  g_signal_connect (link, "frame", G_CALLBACK (on_frame), f);
}

static void
on_started (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Fixture *f = user_data;
  g_autoptr(GError) error = NULL;

  f->started = rlx_node_start_finish (RLX_NODE (source), result, &error);
  g_assert_no_error (error);
}

static gboolean
watcher_started (gpointer data)
{
  return ((Fixture *) data)->started;
}

static gboolean
window_joined (gpointer data)
{
  return g_str_equal (rlx_window_get_state (((Fixture *) data)->window), "joined");
}

static gboolean
window_joined_cb (gpointer data)
{
  return g_str_equal (rlx_window_get_state (data), "joined");
}

static gboolean
window_idle (gpointer data)
{
  return g_str_equal (rlx_window_get_state (((Fixture *) data)->window), "idle");
}

typedef struct { Fixture *f; RlxPrecision p; gint64 min_step; guint count; } SeenWait;

static guint
count_seen (Fixture *f, RlxPrecision p, gint64 min_step)
{
  guint n = 0;

  for (guint i = 0; i < f->seen->len; i++)
    {
      Seen *s = &g_array_index (f->seen, Seen, i);
      if (s->precision == p && s->step >= min_step)
        n++;
    }
  return n;
}

/* Frames about a step can be encoded before the step is reported: a member
 * computes the next gradient with the update it applies, and the leader
 * queues the next round's finish (and a finish chained behind it) ahead.
 * Those keep the precision they were queued with; anything encoded after a
 * change has the new one. */
#define PIPELINE_STEPS 4

/* The window's node switched from @from to @to around @switch_step, as
 * the watcher saw it: frames arrive in the order they were encoded, so
 * after the first frame at @to none at @from may follow; and none at @from
 * is about a step begun past what was already queued at the change. */
static void
assert_switched (Fixture *f, RlxPrecision from, RlxPrecision to, gint64 switch_step)
{
  guint first = f->seen->len;

  for (guint i = 0; i < f->seen->len && first == f->seen->len; i++)
    if (g_array_index (f->seen, Seen, i).precision == to)
      first = i;
  g_assert_cmpuint (first, <, f->seen->len);
  for (guint i = first; i < f->seen->len; i++)
    g_assert_cmpint (g_array_index (f->seen, Seen, i).precision, !=, from);
  g_assert_cmpuint (count_seen (f, from, switch_step + PIPELINE_STEPS), ==, 0);
}

/* The precision the window node's own roster row shows (mirrored from its
 * thread), or NULL. */
static const char *
self_precision (RlxNodeThread *node)
{
  GListModel *roster = rlx_node_thread_get_roster (node);

  for (guint i = 0; i < g_list_model_get_n_items (roster); i++)
    {
      g_autoptr(RlxRosterEntry) e = g_list_model_get_item (roster, i);
      if (rlx_roster_entry_get_is_self (e))
        return rlx_roster_entry_get_precision (e);
    }
  return NULL;
}

typedef struct { RlxNodeThread *node; const char *precision; } RowWait;

static gboolean
self_row_says (gpointer data)
{
  RowWait *w = data;
  return g_strcmp0 (self_precision (w->node), w->precision) == 0;
}

static gboolean
seen_enough (gpointer data)
{
  SeenWait *w = data;
  return count_seen (w->f, w->p, w->min_step) >= w->count;
}

static void
test_dropdown_changes_wire (void)
{
  g_autoptr(GSettings) settings = g_settings_new (RLX_APP_ID);
  g_autoptr(GError) error = NULL;
  RlxNodeConfig cfg = { 0 };
  RlxNodeThread *node;
  gint64 switch_step;
  SeenWait w;
  RowWait row;
  Fixture f = { 0 };

  g_settings_set_string (settings, "dataset", "synthetic");
  g_settings_set_string (settings, "backend", "cpu");
  g_settings_set_uint (settings, "batch", 8);
  g_settings_set_uint (settings, "evaluate-every", 0);
  g_settings_set_string (settings, "precision", "f32");
  f.seen = g_array_new (FALSE, FALSE, sizeof (Seen));

  f.window = rlx_window_new (NULL, "precision-test");
  gtk_window_present (GTK_WINDOW (f.window));
  g_assert_cmpuint (gtk_drop_down_get_selected (rlx_window_get_precision_dropdown (f.window)), ==, 0);
  rlx_window_join (f.window);
  g_assert_true (node_test_wait (window_joined, &f, TIMEOUT_MS));
  node = rlx_window_get_node (f.window);
  f.watched_id = g_strdup (rlx_node_thread_get_node_id (node));

  /* the second node */
  cfg.cohort = rlx_window_get_cohort (f.window);
  cfg.dataset = "synthetic";
  cfg.backend = "cpu";
  cfg.batch = 8;
  cfg.threads = 1;
  f.watcher = rlx_node_new (&cfg, &error);
  g_assert_no_error (error);
  g_signal_connect (f.watcher, "link-added", G_CALLBACK (on_link_added), &f);
  rlx_node_start_async (f.watcher, NULL, on_started, &f);
  g_assert_true (node_test_wait (watcher_started, &f, TIMEOUT_MS));

  /* f32 frames flow first */
  w = (SeenWait) { &f, RLX_PRECISION_F32, 0, 3 };
  g_assert_true (node_test_wait (seen_enough, &w, TIMEOUT_MS));
  g_assert_cmpuint (count_seen (&f, RLX_PRECISION_F8E4M3, 0), ==, 0);

  /* a person picks "f8 E4M3"; the node's thread applies it, and its roster
   * row says so: every step event from before that has arrived by then, so
   * the step seen then is at least the node's step when the change landed */
  gtk_drop_down_set_selected (rlx_window_get_precision_dropdown (f.window), 2);
  g_assert_cmpint (rlx_node_thread_get_precision (node), ==, RLX_PRECISION_F8E4M3);
  row = (RowWait) { node, "f8e4m3" };
  g_assert_true (node_test_wait (self_row_says, &row, TIMEOUT_MS));
  switch_step = (gint64) rlx_node_thread_get_step (node);
  {
    g_autofree char *saved = g_settings_get_string (settings, "precision");
    g_assert_cmpstr (saved, ==, "f8e4m3");
  }

  /* frames about steps begun after the change: f8e4m3, all of them */
  w = (SeenWait) { &f, RLX_PRECISION_F8E4M3, switch_step + PIPELINE_STEPS, 3 };
  g_assert_true (node_test_wait (seen_enough, &w, TIMEOUT_MS));
  assert_switched (&f, RLX_PRECISION_F32, RLX_PRECISION_F8E4M3, switch_step);
  g_assert_cmpuint (f.bad_frames, ==, 0);

  /* and the window's own roster row still says so */
  g_assert_cmpstr (self_precision (node), ==, "f8e4m3");

  /* back to f16 mid-run works the same way */
  gtk_drop_down_set_selected (rlx_window_get_precision_dropdown (f.window), 1);
  row = (RowWait) { node, "f16" };
  g_assert_true (node_test_wait (self_row_says, &row, TIMEOUT_MS));
  switch_step = (gint64) rlx_node_thread_get_step (node);
  w = (SeenWait) { &f, RLX_PRECISION_F16, switch_step + PIPELINE_STEPS, 2 };
  g_assert_true (node_test_wait (seen_enough, &w, TIMEOUT_MS));
  assert_switched (&f, RLX_PRECISION_F8E4M3, RLX_PRECISION_F16, switch_step);

  rlx_window_leave (f.window);
  g_assert_true (node_test_wait (window_idle, &f, TIMEOUT_MS));
  gtk_window_destroy (GTK_WINDOW (f.window));
  g_clear_object (&f.watcher);
  g_array_unref (f.seen);
  g_free (f.watched_id);
}

static gboolean
two_members (gpointer data)
{
  RlxWindow *window = data;
  RlxNodeThread *node = rlx_window_get_node (window);

  return node && g_list_model_get_n_items (rlx_node_thread_get_roster (node)) == 2;
}

static gboolean
state_idle (gpointer data)
{
  return g_str_equal (rlx_window_get_state (data), "idle");
}

static gboolean
pid_gone (gpointer data)
{
  g_autofree char *path = g_strdup_printf ("/proc/%d", GPOINTER_TO_INT (data));
  return !g_file_test (path, G_FILE_TEST_EXISTS);
}

/* Leave stops the local ranks the window started, and the window can join
 * again afterwards. */
static gboolean
rate_shown (gpointer data)
{
  return g_str_has_prefix (rlx_wire_panel_get_rate_text (rlx_window_get_wire_panel (data)), "↑");
}

static void
test_leave_stops_ranks (void)
{
  g_autoptr(GSettings) settings = g_settings_new (RLX_APP_ID);
  g_autoptr(GArray) pids = NULL;
  RlxWindow *window;
  int pid;

  g_settings_set_string (settings, "dataset", "synthetic");
  g_settings_set_string (settings, "backend", "cpu");
  g_settings_set_uint (settings, "batch", 8);
  window = rlx_window_new (NULL, "leave-test");
  gtk_window_present (GTK_WINDOW (window));
  rlx_window_join (window);
  g_assert_true (node_test_wait ((NodeTestPred) window_joined_cb, window, TIMEOUT_MS));
  rlx_window_add_local_rank (window);
  g_assert_true (node_test_wait (two_members, window, TIMEOUT_MS));
  pids = rlx_local_ranks_dup_pids (rlx_window_get_local_ranks (window));
  g_assert_cmpuint (pids->len, ==, 1);
  pid = g_array_index (pids, int, 0);
  g_assert_true (node_test_wait (rate_shown, window, TIMEOUT_MS));

  rlx_window_leave (window);
  g_assert_cmpstr (rlx_window_get_state (window), ==, "leaving");
  g_assert_true (node_test_wait (state_idle, window, TIMEOUT_MS));
  g_assert_cmpuint (rlx_local_ranks_get_n_running (rlx_window_get_local_ranks (window)), ==, 0);
  g_assert_true (node_test_wait (pid_gone, GINT_TO_POINTER (pid), TIMEOUT_MS));
  g_assert_null (rlx_window_get_node (window));
  /* the totals stay, the rate (of now) does not */
  g_assert_cmpstr (rlx_wire_panel_get_rate_text (rlx_window_get_wire_panel (window)), ==, "—");

  /* and joins again */
  rlx_window_join (window);
  g_assert_true (node_test_wait ((NodeTestPred) window_joined_cb, window, TIMEOUT_MS));
  rlx_window_leave (window);
  g_assert_true (node_test_wait (state_idle, window, TIMEOUT_MS));
  gtk_window_destroy (GTK_WINDOW (window));
}

/* The preferences show and write the settings, and lock while joined. */
static void
test_preferences (void)
{
  g_autoptr(GSettings) settings = g_settings_new (RLX_APP_ID);
  GtkWidget *prefs;
  AdwComboRow *model_row, *dataset_row, *backend_row;
  GtkSpinButton *batch;
  g_autofree char *model = NULL, *backend = NULL, *summary = NULL;

  g_settings_set_string (settings, "model", "mnist-cnn");
  g_settings_set_string (settings, "dataset", "synthetic");
  g_settings_set_string (settings, "backend", "vulkan:llvmpipe");
  g_settings_set_uint (settings, "batch", 48);
  prefs = rlx_preferences_window_new (settings, FALSE);
  model_row = ADW_COMBO_ROW (gtk_widget_get_template_child (prefs, RLX_TYPE_PREFERENCES_WINDOW, "model_row"));
  dataset_row = ADW_COMBO_ROW (gtk_widget_get_template_child (prefs, RLX_TYPE_PREFERENCES_WINDOW, "dataset_row"));
  backend_row = ADW_COMBO_ROW (gtk_widget_get_template_child (prefs, RLX_TYPE_PREFERENCES_WINDOW, "backend_row"));
  batch = GTK_SPIN_BUTTON (gtk_widget_get_template_child (prefs, RLX_TYPE_PREFERENCES_WINDOW, "batch_spin"));

  /* settings → widgets */
  g_assert_cmpuint (adw_combo_row_get_selected (model_row), ==, 2);
  g_assert_cmpuint (adw_combo_row_get_selected (dataset_row), ==, 1);
  g_assert_cmpuint (adw_combo_row_get_selected (backend_row), ==, 3);   /* its own entry */
  g_assert_cmpint (gtk_spin_button_get_value_as_int (batch), ==, 48);
  summary = rlx_preferences_describe_setup (settings);
  g_assert_nonnull (strstr (summary, "CNN"));
  g_assert_nonnull (strstr (summary, "batch 48"));
  g_assert_nonnull (strstr (summary, "vulkan:llvmpipe"));

  /* widgets → settings */
  adw_combo_row_set_selected (model_row, 1);
  adw_combo_row_set_selected (backend_row, 1);
  model = g_settings_get_string (settings, "model");
  backend = g_settings_get_string (settings, "backend");
  g_assert_cmpstr (model, ==, "mnist-mlp-xl");
  g_assert_cmpstr (backend, ==, "cpu");

  /* joined: what every rank must agree on is locked */
  g_assert_true (gtk_widget_get_sensitive (GTK_WIDGET (model_row)));
  rlx_preferences_window_set_locked (RLX_PREFERENCES_WINDOW (prefs), TRUE);
  g_assert_false (gtk_widget_get_sensitive (GTK_WIDGET (model_row)));
  g_assert_false (gtk_widget_is_sensitive (GTK_WIDGET (batch)));
  rlx_preferences_window_set_locked (RLX_PREFERENCES_WINDOW (prefs), FALSE);
  g_assert_true (gtk_widget_is_sensitive (GTK_WIDGET (batch)));
  gtk_window_destroy (GTK_WINDOW (prefs));
  g_settings_reset (settings, "model");
  g_settings_reset (settings, "backend");
  g_settings_reset (settings, "batch");
}

static void
find_descendants (GtkWidget *w, GType type, GPtrArray *out)
{
  for (GtkWidget *c = gtk_widget_get_first_child (w); c; c = gtk_widget_get_next_sibling (c))
    {
      if (G_TYPE_CHECK_INSTANCE_TYPE (c, type))
        g_ptr_array_add (out, c);
      find_descendants (c, type, out);
    }
}

static gboolean
prefs_settled (gpointer window)
{
  return gtk_widget_get_mapped (window) && gtk_window_get_focus (window) != NULL;
}

/* Opened while joined, the preferences show their top: the note that says
 * to leave the cohort is on screen and focused (before: the first control
 * still sensitive, at the bottom, took the focus and scrolled the page
 * there), and no label of the Backend row is cut ("Aut…"). */
static void
test_preferences_layout (void)
{
  g_autoptr(GSettings) settings = g_settings_new (RLX_APP_ID);
  g_autoptr(GPtrArray) scrollers = g_ptr_array_new ();
  g_autoptr(GPtrArray) labels = g_ptr_array_new ();
  GtkWidget *prefs, *lock_row, *backend_row, *scroller = NULL;
  graphene_rect_t bounds;
  GtkAdjustment *vadj;
  guint n_shown = 0;

  g_settings_set_string (settings, "backend", "auto");
  prefs = rlx_preferences_window_new (settings, TRUE);
  lock_row = GTK_WIDGET (gtk_widget_get_template_child (prefs, RLX_TYPE_PREFERENCES_WINDOW, "lock_row"));
  backend_row = GTK_WIDGET (gtk_widget_get_template_child (prefs, RLX_TYPE_PREFERENCES_WINDOW, "backend_row"));
  gtk_window_present (GTK_WINDOW (prefs));
  g_assert_true (node_test_wait (prefs_settled, prefs, TIMEOUT_MS));
  for (int i = 0; i < 20; i++)   /* a few frames: allocation, then scroll-to-focus */
    g_main_context_iteration (NULL, FALSE), g_usleep (5000);

  find_descendants (prefs, GTK_TYPE_SCROLLED_WINDOW, scrollers);
  for (guint i = 0; i < scrollers->len; i++)
    if (gtk_widget_get_mapped (scrollers->pdata[i]))
      scroller = scrollers->pdata[i];
  g_assert_nonnull (scroller);
  vadj = gtk_scrolled_window_get_vadjustment (GTK_SCROLLED_WINDOW (scroller));
  g_assert_cmpfloat (gtk_adjustment_get_value (vadj), ==, gtk_adjustment_get_lower (vadj));
  g_assert_true (gtk_widget_get_mapped (lock_row));
  g_assert_true (gtk_widget_compute_bounds (lock_row, scroller, &bounds));
  g_assert_cmpfloat (bounds.origin.y, >=, 0);
  g_assert_cmpfloat (bounds.origin.y + bounds.size.height, <=, gtk_widget_get_height (scroller));
  g_assert_true (gtk_window_get_focus (GTK_WINDOW (prefs)) == lock_row ||
                 gtk_widget_is_ancestor (gtk_window_get_focus (GTK_WINDOW (prefs)), lock_row));

  /* idle: the note hides, Backend says its choice in full */
  rlx_preferences_window_set_locked (RLX_PREFERENCES_WINDOW (prefs), FALSE);
  for (int i = 0; i < 20; i++)
    g_main_context_iteration (NULL, FALSE), g_usleep (5000);
  g_assert_false (gtk_widget_get_visible (lock_row));
  find_descendants (backend_row, GTK_TYPE_LABEL, labels);
  for (guint i = 0; i < labels->len; i++)
    {
      GtkLabel *label = labels->pdata[i];
      if (!gtk_widget_get_mapped (GTK_WIDGET (label)) || *gtk_label_get_text (label) == '\0')
        continue;
      n_shown++;
      if (pango_layout_is_ellipsized (gtk_label_get_layout (label)))
        g_error ("the Backend row cuts \"%s\"", gtk_label_get_text (label));
    }
  g_assert_cmpuint (n_shown, >=, 2);   /* its title and its choice */
  gtk_window_destroy (GTK_WINDOW (prefs));
  g_settings_reset (settings, "backend");
}

/* "Saved against f32" says what the last 30 s saved: a minute at f32, then
 * 40 s at f16 (half the bytes) reads 50 %, not the 20 % since the start. */
static void
test_saving_window (void)
{
  RlxWirePanel *panel = RLX_WIRE_PANEL (g_object_ref_sink (rlx_wire_panel_new ()));
  guint64 wire = 0, f32 = 0;
  gint64 t = 1000 * G_USEC_PER_SEC;

  for (int half_s = 0; half_s < 200; half_s++, t += G_USEC_PER_SEC / 2)
    {
      f32 += 1000000;
      wire += half_s < 120 ? 1000000 : 500000;
      rlx_wire_panel_sample (panel, wire / 2, wire - wire / 2, f32, t);
      if (half_s == 119)
        g_assert_cmpstr (rlx_wire_panel_get_saving_text (panel), ==, "0%");
    }
  g_assert_cmpstr (rlx_wire_panel_get_saving_text (panel), ==, "50%");
  g_assert_nonnull (strstr (rlx_wire_panel_get_f32_text (panel), "last 30 s"));
  g_object_unref (panel);
}

/* the precision the roster shows for the rank that is not this node */
static char *
other_precision (RlxNodeThread *node)
{
  GListModel *roster = rlx_node_thread_get_roster (node);

  for (guint i = 0; roster && i < g_list_model_get_n_items (roster); i++)
    {
      g_autoptr(RlxRosterEntry) e = g_list_model_get_item (roster, i);
      if (!rlx_roster_entry_get_is_self (e))
        return g_strdup (rlx_roster_entry_get_precision (e));
    }
  return NULL;
}

static gboolean
other_row_says (gpointer data)
{
  RowWait *w = data;
  g_autofree char *p = other_precision (w->node);
  return g_strcmp0 (p, w->precision) == 0;
}

/* The Wire dropdown changes this machine's local ranks too (while
 * Preferences says so, the default), and only this node once it does not;
 * its tooltip says which. */
static void
test_precision_local_ranks (void)
{
  g_autoptr(GSettings) settings = g_settings_new (RLX_APP_ID);
  GtkDropDown *dropdown;
  RlxNodeThread *node;
  RlxWindow *window;
  RowWait row;

  g_settings_set_string (settings, "dataset", "synthetic");
  g_settings_set_string (settings, "backend", "cpu");
  g_settings_set_uint (settings, "batch", 8);
  g_settings_set_string (settings, "precision", "f32");
  window = rlx_window_new (NULL, "precision-ranks-test");
  dropdown = rlx_window_get_precision_dropdown (window);
  gtk_window_present (GTK_WINDOW (window));
  g_assert_nonnull (strstr (gtk_widget_get_tooltip_text (GTK_WIDGET (dropdown)), "local ranks it started"));
  rlx_window_join (window);
  g_assert_true (node_test_wait ((NodeTestPred) window_joined_cb, window, TIMEOUT_MS));
  rlx_window_add_local_rank (window);
  g_assert_true (node_test_wait (two_members, window, TIMEOUT_MS));
  node = rlx_window_get_node (window);
  row = (RowWait) { node, "f32" };
  g_assert_true (node_test_wait (other_row_says, &row, TIMEOUT_MS));

  /* f16: this node and the local rank */
  gtk_drop_down_set_selected (dropdown, 1);
  row = (RowWait) { node, "f16" };
  g_assert_true (node_test_wait (self_row_says, &row, TIMEOUT_MS));
  g_assert_true (node_test_wait (other_row_says, &row, TIMEOUT_MS));

  /* only this node: f8 E5M2 here, the rank stays at f16 */
  g_settings_set_boolean (settings, "precision-local-ranks", FALSE);
  g_assert_nonnull (strstr (gtk_widget_get_tooltip_text (GTK_WIDGET (dropdown)), "this node only"));
  gtk_drop_down_set_selected (dropdown, 3);
  row = (RowWait) { node, "f8e5m2" };
  g_assert_true (node_test_wait (self_row_says, &row, TIMEOUT_MS));
  node_test_spin (1500);   /* the rank would have said so by now */
  {
    g_autofree char *p = other_precision (node);
    g_assert_cmpstr (p, ==, "f16");
  }

  rlx_window_leave (window);
  g_assert_true (node_test_wait (state_idle, window, TIMEOUT_MS));
  gtk_window_destroy (GTK_WINDOW (window));
  g_settings_reset (settings, "precision-local-ranks");
  g_settings_reset (settings, "precision");
}

static gboolean
mapped (gpointer widget)
{
  return gtk_widget_get_mapped (widget);
}

/* At 800×600 the empty page's Join Cohort button is on screen, whole
 * (the full-size status page pushed it off the bottom). */
static void
test_small_window (void)
{
  RlxWindow *window = rlx_window_new (NULL, "small-test");
  g_autoptr(GPtrArray) buttons = g_ptr_array_new ();
  GtkWidget *button = NULL;
  graphene_rect_t b;

  /* the empty page's Join Cohort: the pill-shaped one */
  find_descendants (GTK_WIDGET (window), GTK_TYPE_BUTTON, buttons);
  for (guint i = 0; i < buttons->len; i++)
    if (gtk_widget_has_css_class (buttons->pdata[i], "pill") &&
        g_strcmp0 (gtk_actionable_get_action_name (buttons->pdata[i]), "win.join") == 0)
      button = buttons->pdata[i];
  g_assert_nonnull (button);

  gtk_window_set_default_size (GTK_WINDOW (window), 800, 600);
  gtk_window_present (GTK_WINDOW (window));
  g_assert_true (node_test_wait (mapped, button, TIMEOUT_MS));
  node_test_spin (300);   /* allocated */
  g_assert_cmpint (gtk_widget_get_height (GTK_WIDGET (window)), <=, 600);
  g_assert_true (gtk_widget_compute_bounds (button, GTK_WIDGET (window), &b));
  g_assert_cmpfloat (b.origin.y, >=, 0);
  g_assert_cmpfloat (b.origin.y + b.size.height, <=, gtk_widget_get_height (GTK_WIDGET (window)));
  gtk_window_destroy (GTK_WINDOW (window));
}

int
main (int argc, char **argv)
{
  int status;

  node_test_init ();
  gtk_test_init (&argc, &argv, NULL);
  adw_init ();
  g_test_add_func ("/app/precision/dropdown-changes-wire", test_dropdown_changes_wire);
  g_test_add_func ("/app/window/leave-stops-ranks", test_leave_stops_ranks);
  g_test_add_func ("/app/precision/local-ranks-follow", test_precision_local_ranks);
  g_test_add_func ("/app/window/800x600", test_small_window);
  g_test_add_func ("/app/preferences/binds-settings", test_preferences);
  g_test_add_func ("/app/preferences/opens-at-top", test_preferences_layout);
  g_test_add_func ("/app/wire/saving-recent-window", test_saving_window);
  status = g_test_run ();
  node_test_cleanup ();
  return status;
}
