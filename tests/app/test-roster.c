/* test-roster.c — the roster view follows the cohort: a real node in this
 * process, real `rlx-rank join` processes beside it (started the way "Add
 * local rank" starts them), rows that appear when a rank joins and go when it
 * leaves, and a refused rank that never gets a row. The node runs on its own
 * thread as the app's does (RlxNodeThread), and the view shows the roster
 * mirrored to this thread, the model the app shows. */
#include "node-test-utils.h"
#include "rlx-event-log.h"
#include "rlx-local-ranks.h"
#include "rlx-roster-view.h"
#include "core/rlx-node-thread.h"
#include "core/cohort/rlx-roster.h"

#include <adwaita.h>

#define TIMEOUT_MS 90000

typedef struct {
  RlxNodeThread *node;
  RlxEventLog   *log;
  RlxLocalRanks *ranks;
  RlxRosterView *view;
  GtkWindow     *window;
  gboolean       started;
  GError        *error;
  GPtrArray     *exits;      /* char*: "ID|expected|message" */
  gboolean       left;
} Fixture;

static void
on_event (RlxNodeThread *node, RlxEvent *event, Fixture *f)
{
  rlx_event_log_add_event (f->log, event, rlx_node_thread_get_node_id (node), NULL);
}

static void
on_exited (RlxLocalRanks *ranks, const char *id, gboolean expected, const char *message,
           Fixture *f)
{
  g_ptr_array_add (f->exits, g_strdup_printf ("%s|%d|%s", id, expected, message));
}

static void
on_started (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Fixture *f = user_data;

  f->started = rlx_node_thread_start_finish (RLX_NODE_THREAD (source), result, &f->error);
  g_assert_no_error (f->error);
}

static gboolean
started (gpointer data)
{
  return ((Fixture *) data)->started;
}

static void
fixture_setup (Fixture *f, const char *tag)
{
  g_autofree char *cohort = node_test_cohort_name (tag);
  g_autofree char *log_dir = NULL;
  RlxNodeConfig cfg = { 0 };
  g_autoptr(GError) error = NULL;

  memset (f, 0, sizeof *f);
  cfg.cohort = cohort;
  cfg.dataset = "synthetic";
  cfg.backend = "cpu";
  cfg.batch = 8;
  cfg.threads = 1;
  f->node = rlx_node_thread_new (&cfg, &error);
  g_assert_no_error (error);
  f->log = rlx_event_log_new ();
  f->exits = g_ptr_array_new_with_free_func (g_free);
  log_dir = g_build_filename (g_get_user_state_dir (), "rlx-cluster", cohort, "ranks", NULL);
  f->ranks = rlx_local_ranks_new (g_getenv ("RLX_RANK"), log_dir);
  g_signal_connect (f->node, "event", G_CALLBACK (on_event), f);
  g_signal_connect (f->ranks, "exited", G_CALLBACK (on_exited), f);

  rlx_node_thread_start_async (f->node, NULL, on_started, f);
  g_assert_true (node_test_wait (started, f, TIMEOUT_MS));

  f->window = GTK_WINDOW (gtk_window_new ());
  gtk_window_set_default_size (f->window, 1200, 500);
  f->view = RLX_ROSTER_VIEW (rlx_roster_view_new ());
  gtk_window_set_child (f->window, GTK_WIDGET (f->view));
  rlx_roster_view_set_model (f->view, rlx_node_thread_get_roster (f->node));
  gtk_window_present (f->window);
}

static void
on_left (GObject *source, GAsyncResult *result, gpointer user_data)
{
  ((Fixture *) user_data)->left = TRUE;
}

static gboolean
left (gpointer data)
{
  return ((Fixture *) data)->left;
}

static gboolean
ranks_stopped (gpointer data)
{
  return rlx_local_ranks_get_n_running (((Fixture *) data)->ranks) == 0;
}

static void
fixture_teardown (Fixture *f)
{
  rlx_local_ranks_stop_async (f->ranks, 5000, NULL, NULL);
  g_assert_true (node_test_wait (ranks_stopped, f, TIMEOUT_MS));
  rlx_node_thread_leave_async (f->node, "test over", on_left, f);
  g_assert_true (node_test_wait (left, f, TIMEOUT_MS));
  gtk_window_destroy (f->window);
  g_clear_object (&f->ranks);
  g_clear_object (&f->node);
  g_clear_object (&f->log);
  g_ptr_array_unref (f->exits);
}

/* every label's text under @w (and every figure's, a GtkInscription) */
static void
collect_labels (GtkWidget *w, GPtrArray *out)
{
  if (GTK_IS_LABEL (w) && gtk_widget_get_mapped (w))
    g_ptr_array_add (out, g_strdup (gtk_label_get_label (GTK_LABEL (w))));
  if (GTK_IS_INSCRIPTION (w) && gtk_widget_get_mapped (w))
    g_ptr_array_add (out, g_strdup (gtk_inscription_get_text (GTK_INSCRIPTION (w))));
  for (GtkWidget *c = gtk_widget_get_first_child (w); c; c = gtk_widget_get_next_sibling (c))
    collect_labels (c, out);
}

static gboolean
view_shows (RlxRosterView *view, const char *text)
{
  g_autoptr(GPtrArray) labels = g_ptr_array_new_with_free_func (g_free);

  collect_labels (GTK_WIDGET (view), labels);
  for (guint i = 0; i < labels->len; i++)
    if (g_strcmp0 (g_ptr_array_index (labels, i), text) == 0)
      return TRUE;
  return FALSE;
}

static GtkWidget *
find_label (GtkWidget *w, const char *text)
{
  if (GTK_IS_LABEL (w) && gtk_widget_get_mapped (w) &&
      g_strcmp0 (gtk_label_get_label (GTK_LABEL (w)), text) == 0)
    return w;
  for (GtkWidget *c = gtk_widget_get_first_child (w); c; c = gtk_widget_get_next_sibling (c))
    {
      GtkWidget *found = find_label (c, text);
      if (found)
        return found;
    }
  return NULL;
}

/* The labels of the row that shows @text (a "row" widget holds one
 * cell per column), in column order. */
static GPtrArray *
row_labels (RlxRosterView *view, const char *text)
{
  GPtrArray *labels = g_ptr_array_new_with_free_func (g_free);
  GtkWidget *w = find_label (GTK_WIDGET (view), text);

  while (w && g_strcmp0 (gtk_widget_get_css_name (w), "row") != 0)
    w = gtk_widget_get_parent (w);
  g_assert_nonnull (w);
  collect_labels (w, labels);
  return labels;
}

static gboolean
contains (GPtrArray *labels, const char *text)
{
  for (guint i = 0; i < labels->len; i++)
    if (g_strcmp0 (g_ptr_array_index (labels, i), text) == 0)
      return TRUE;
  return FALSE;
}

typedef struct { Fixture *f; const char *summary; const char *shown; const char *hidden; } ViewWait;

static gboolean
view_matches (gpointer data)
{
  ViewWait *w = data;

  if (g_strcmp0 (rlx_roster_view_get_summary (w->f->view), w->summary) != 0)
    return FALSE;
  if (w->shown && !view_shows (w->f->view, w->shown))
    return FALSE;
  if (w->hidden && view_shows (w->f->view, w->hidden))
    return FALSE;
  return TRUE;
}

/* The child's own "joined" event, from its log file. */
static JsonObject *
child_joined_event (Fixture *f, const char *node_id)
{
  g_autofree char *path = g_strdup_printf ("%s/%s.jsonl", rlx_local_ranks_get_log_dir (f->ranks),
                                           node_id);

  return node_test_log_find (path, "joined", 0);
}

typedef struct { Fixture *f; const char *id; JsonObject *event; } JoinedWait;

static gboolean
child_has_joined (gpointer data)
{
  JoinedWait *w = data;

  if (w->event == NULL)
    w->event = child_joined_event (w->f, w->id);
  return w->event != NULL;
}

static const char *const child_options[] = {
  "--model", "mnist-mlp", "--dataset", "synthetic", "--backend", "cpu", "--batch", "8",
  "--threads", "1", NULL
};

typedef struct { Fixture *f; const char *node; } LeftWait;

/* The event list says @node left. */
static gboolean
left_logged (gpointer data)
{
  LeftWait *w = data;
  guint n = g_list_model_get_n_items (G_LIST_MODEL (w->f->log));

  for (guint i = 0; i < n; i++)
    {
      g_autoptr(RlxEventItem) item = g_list_model_get_item (G_LIST_MODEL (w->f->log), i);
      if (rlx_event_item_get_kind (item) == RLX_LOG_LEFT &&
          strstr (rlx_event_item_get_title (item), w->node) != NULL)
        return TRUE;
    }
  return FALSE;
}

static void
test_join_leave (void)
{
  Fixture f;
  g_autofree char *child = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonObject) joined = NULL;
  ViewWait w;

  fixture_setup (&f, "rows");
  w = (ViewWait) { &f, "1 rank", rlx_node_thread_get_node_id (f.node), NULL };
  g_assert_true (node_test_wait (view_matches, &w, TIMEOUT_MS));

  child = rlx_local_ranks_spawn (f.ranks, rlx_node_thread_get_cohort (f.node), child_options, &error);
  g_assert_no_error (error);
  w = (ViewWait) { &f, "2 ranks", child, NULL };
  if (!node_test_wait (view_matches, &w, TIMEOUT_MS))
    g_error ("the roster did not show %s: summary “%s”", child, rlx_roster_view_get_summary (f.view));
  /* its row says what the rank itself reported */
  {
    /* the rank writes its own "joined" once it has its snapshot */
    JoinedWait jw = { &f, child, NULL };
    g_assert_true (node_test_wait (child_has_joined, &jw, TIMEOUT_MS));
    joined = jw.event;
  }
  {
    g_autoptr(GPtrArray) row = row_labels (f.view, child);
    const char *fb = json_object_get_string_member (joined, "fallback");
    g_autofree char *shown = rlx_roster_format_fallback (fb);
    g_assert_true (contains (row, json_object_get_string_member (joined, "backend")));
    g_assert_true (contains (row, shown));
    g_assert_true (contains (row, "f32"));
    g_assert_false (contains (row, rlx_node_thread_get_node_id (f.node)));
  }

  /* it leaves: its row goes, and the log says why */
  rlx_local_ranks_stop_async (f.ranks, 5000, NULL, NULL);
  w = (ViewWait) { &f, "1 rank", NULL, child };
  g_assert_true (node_test_wait (view_matches, &w, TIMEOUT_MS));
  /* the roster and the events come in the node thread's batches, in the
   * order they happened: the departure's event may be in the next one */
  {
    LeftWait lw = { &f, child };
    g_assert_true (node_test_wait (left_logged, &lw, TIMEOUT_MS));
  }
  g_assert_true (node_test_wait (ranks_stopped, &f, TIMEOUT_MS));
  fixture_teardown (&f);
}

static gboolean
one_exit (gpointer data)
{
  return ((Fixture *) data)->exits->len > 0;
}

/* The node's event list has a refusal whose reason names the model. */
static gboolean
refusal_logged (gpointer data)
{
  Fixture *f = data;

  for (guint i = 0; i < g_list_model_get_n_items (G_LIST_MODEL (f->log)); i++)
    {
      g_autoptr(RlxEventItem) item = g_list_model_get_item (G_LIST_MODEL (f->log), i);
      if (rlx_event_item_get_kind (item) == RLX_LOG_REFUSED &&
          strstr (rlx_event_item_get_detail (item), "model") != NULL)
        return TRUE;
    }
  return FALSE;
}

/* A rank of another model is refused: no row, and the reason on both sides. */
static void
test_refused (void)
{
  const char *const cnn[] = {
    "--model", "mnist-cnn", "--dataset", "synthetic", "--backend", "cpu", "--batch", "8",
    "--threads", "1", NULL
  };
  Fixture f;
  g_autofree char *child = NULL;
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) parts = NULL;
  ViewWait w;

  fixture_setup (&f, "refuse");
  child = rlx_local_ranks_spawn (f.ranks, rlx_node_thread_get_cohort (f.node), cnn, &error);
  g_assert_no_error (error);
  g_assert_true (node_test_wait (one_exit, &f, TIMEOUT_MS));
  parts = g_strsplit (g_ptr_array_index (f.exits, 0), "|", 3);
  g_assert_cmpstr (parts[0], ==, child);
  g_assert_cmpstr (parts[1], ==, "0");              /* not expected */
  g_assert_nonnull (strstr (parts[2], "model"));    /* the rank's own reason */
  /* The node's state comes from its thread in batches (at most every
   * 50 ms): the exit, seen here directly, can come before the batch that
   * says the node founded, so the roster is waited for, not looked at once. */
  w = (ViewWait) { &f, "1 rank", rlx_node_thread_get_node_id (f.node), child };
  if (!node_test_wait (view_matches, &w, TIMEOUT_MS))
    g_error ("the roster did not settle on the node alone: summary “%s”",
             rlx_roster_view_get_summary (f.view));
  /* the refusal may land a moment after the rank's exit was seen here */
  g_assert_true (node_test_wait (refusal_logged, &f, TIMEOUT_MS));
  g_assert_false (view_shows (f.view, child));
  fixture_teardown (&f);
}

static void
test_formats (void)
{
  g_autofree char *a = rlx_roster_format_rank (0, TRUE, TRUE);
  g_autofree char *b = rlx_roster_format_rank (2, FALSE, FALSE);
  g_autofree char *c = rlx_roster_format_precision ("f8e4m3");
  g_autofree char *d = rlx_roster_format_speed (0);
  g_autofree char *e = rlx_roster_format_speed (123456);
  g_autofree char *g = rlx_roster_format_fallback ("");
  g_autofree char *h = rlx_roster_format_speed (1234567);
  g_autofree char *i = rlx_roster_format_speed (1240);
  g_autofree char *j = rlx_roster_format_speed (57.4);

  g_assert_nonnull (strstr (a, "leader"));
  g_assert_nonnull (strstr (a, "you"));
  g_assert_cmpstr (b, ==, "2");
  g_assert_cmpstr (c, ==, "f8 E4M3");
  g_assert_cmpstr (d, ==, "—");
  g_assert_cmpstr (e, ==, "120 k");
  g_assert_cmpstr (h, ==, "1.2 M");
  g_assert_cmpstr (i, ==, "1.2 k");
  g_assert_cmpstr (j, ==, "57");
  g_assert_cmpstr (g, ==, "none");
}

#define SHARED "vulkan: the only device is llvmpipe (LLVM 15.0.6, 256 bits), a software " \
               "rasterizer — cpu is faster (ask for it by name: --backend vulkan:llvmpipe)"

static void
sync_rows (RlxRoster *roster, const char *last_fallback)
{
  RlxRosterRow rows[3] = {
    { "n1", "alpha", "cpu", "CPU", SHARED, "f32", "computing", 1000, 0, 0, TRUE, TRUE },
    { "n2", "beta", "cpu", "CPU", SHARED, "f32", "computing", 1000, 0, 0, FALSE, FALSE },
    { "n3", "gamma", "cpu", "CPU", last_fallback, "f32", "computing", 1000, 0, 0, FALSE, FALSE },
  };
  rlx_roster_sync (roster, rows, 3);
}

typedef struct { RlxRosterView *view; const char *text; gboolean present; } LabelWait;

static gboolean
label_is (gpointer data)
{
  LabelWait *w = data;
  return (find_label (GTK_WIDGET (w->view), w->text) != NULL) == w->present;
}

/* A fallback reason every rank shares is said once, in the banner: each row
 * shows a short tag, the full text in its tooltip; when one rank differs,
 * the banner goes and every row says its own reason. At narrow widths the
 * least needed columns give way. */
static void
test_shared_reason (void)
{
  g_autoptr(RlxRoster) roster = rlx_roster_new ();
  g_autofree char *tag = rlx_roster_format_fallback_tag (SHARED);
  GtkWindow *window = GTK_WINDOW (gtk_window_new ());
  RlxRosterView *view = RLX_ROSTER_VIEW (rlx_roster_view_new ());
  g_autoptr(GPtrArray) row = NULL;
  GtkWidget *cell;
  LabelWait w = { view, NULL, TRUE };

  g_assert_cmpstr (tag, ==, "vulkan: the only device is…");
  g_assert_cmpuint (g_utf8_strlen (tag, -1), <=, RLX_ROSTER_TAG_CHARS);

  sync_rows (roster, SHARED);
  rlx_roster_view_set_model (view, G_LIST_MODEL (roster));
  gtk_window_set_default_size (window, 1280, 500);
  gtk_window_set_child (window, GTK_WIDGET (view));
  gtk_window_present (window);

  w.text = tag;
  g_assert_true (node_test_wait (label_is, &w, TIMEOUT_MS));
  g_assert_cmpstr (rlx_roster_view_get_shared_reason (view), ==, SHARED);
  g_assert_nonnull (find_label (GTK_WIDGET (view), "Every rank passed over a faster backend for the same "
                                                   "reason: " SHARED));
  g_assert_null (find_label (GTK_WIDGET (view), SHARED));      /* not on any row */
  row = row_labels (view, "gamma");
  g_assert_true (contains (row, tag));
  cell = find_label (GTK_WIDGET (view), tag);
  g_assert_cmpstr (gtk_widget_get_tooltip_text (cell), ==, SHARED);
  g_assert_true (node_test_wait (label_is, &(LabelWait) { view, "Received", TRUE }, TIMEOUT_MS));

  /* one rank differs: no banner, every row its own reason */
  sync_rows (roster, "");
  w.text = SHARED;
  g_assert_true (node_test_wait (label_is, &w, TIMEOUT_MS));
  g_assert_null (rlx_roster_view_get_shared_reason (view));
  g_assert_nonnull (find_label (GTK_WIDGET (view), "none"));
  g_assert_null (find_label (GTK_WIDGET (view), tag));

  /* 760 px: the bytes and the precision give way */
  gtk_window_set_default_size (window, 760, 500);
  g_assert_true (node_test_wait (label_is, &(LabelWait) { view, "Received", FALSE }, TIMEOUT_MS));
  g_assert_null (find_label (GTK_WIDGET (view), "Sent"));
  g_assert_null (find_label (GTK_WIDGET (view), "Precision"));
  g_assert_nonnull (find_label (GTK_WIDGET (view), "Samples/s"));
  gtk_window_destroy (window);
}

int
main (int argc, char **argv)
{
  int status;

  node_test_init ();
  gtk_test_init (&argc, &argv, NULL);
  adw_init ();
  g_test_add_func ("/app/roster/formats", test_formats);
  g_test_add_func ("/app/roster/join-leave", test_join_leave);
  g_test_add_func ("/app/roster/refused", test_refused);
  g_test_add_func ("/app/roster/shared-reason", test_shared_reason);
  status = g_test_run ();
  node_test_cleanup ();
  return status;
}
