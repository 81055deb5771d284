/* rlx-window.c — the main window (see the header)
 *
 * States: idle → joining → joined → leaving → idle. Joining starts the
 * node (its backend resolves on a worker thread); leaving stops the node and
 * every local rank this window started, in parallel, and only then goes back
 * to idle and the empty page, where another invite can be entered (or
 * closes the window, when that is why it left).
 *
 * (Over 1,000 lines: the join flow's empty and joining pages live here
 * with the rest of the window's states; the toasts and those pages are
 * the parts to move into objects of their own when it grows again.)
 *
 * Joining by invite stays "joining" (the joining page: a spinner, the
 * invite's host, the last attempt's trouble, Cancel) until the node says it
 * joined the cohort; if the node gives up instead (no member reachable: it
 * founds nothing), the window goes back to the empty page with the reason.
 *
 * The node runs on a thread of its own (RlxNodeThread): the coordinator's
 * handlers and the links' frames never run on the UI thread, which gets
 * the node's events, roster and counters in batches, at most twenty times
 * a second. Nothing here calls into the coordinator.
 *
 * Per step the window does little: it keeps the point and marks the
 * header's status stale. A 100 ms UI tick then moves the points into the
 * chart's series and rewrites the labels (and, every half second, the wire
 * figures), so all of it lands in one frame. The roster's cells follow
 * their entries' properties.
 */
#include "rlx-config.h"
#include "rlx-window-private.h"
#include "rlx-figure.h"
#include "rlx-preferences-window.h"
#include "core/cohort/rlx-sync-policy.h"
#include "rlx-chart-export.h"
#include "core/wire/rlx-wire.h"
#include "core/p2p/rlx-invite.h"

#include <glib/gi18n.h>
#include <stdio.h>

/* One UI tick: points, labels and the wire figures change together, in one
 * frame, ten times a second however fast the cohort steps. */
#define UI_TICK_MS         100
#define WIRE_EVERY_TICKS   5
#define RANK_STOP_GRACE_MS 5000

typedef enum {
  STATE_IDLE,
  STATE_JOINING,
  STATE_JOINED,
  STATE_LEAVING,
} WindowState;

static const char *const state_names[] = { "idle", "joining", "joined", "leaving" };

#define N_TOAST_KINDS (RLX_LOG_ERROR + 2)
#define TOAST_APP     (RLX_LOG_ERROR + 1)

struct _RlxWindow
{
  AdwApplicationWindow  parent_instance;

  /* template */
  AdwToastOverlay      *toast_overlay;
  GtkScale             *smoothing_scale;
  AdwViewSwitcherTitle *switcher_title;
  AdwViewStack         *view_stack;
  AdwViewStackPage     *events_page;
  GtkStack             *training_stack;
  GtkStack             *events_stack;
  RlxEventsView        *events_view;
  RlxCohortPanel       *cohort_panel;
  RlxTimeline          *timeline;                /* joins, leaders, the hash light */
  RlxProgress          *progress;                /* steps/s, epoch, checkpoint, links */
  GtkButton            *join_button;
  GtkButton            *leave_button;
  GtkButton            *add_rank_button;
  GtkButton            *copy_invite_button;
  GtkDropDown          *precision_dropdown;
  AdwEntryRow          *invite_row;
  GtkLabel             *invite_error_label;
  GtkLabel             *join_error_label;
  AdwStatusPage        *joining_page;
  GtkSpinner           *joining_spinner;
  AdwActionRow         *setup_row;
  RlxWirePanel      *counters;
  RlxSyncPanel      *sync_panel;
  RlxLossChart         *chart;
  RlxRosterView        *roster_view;
  GtkInscription       *loss_summary;   /* a figure: new text, no relayout */

  GSettings            *settings;
  char                 *cohort;
  gboolean              log_scale;

  WindowState           state;
  RlxNodeThread        *node;
  RlxLocalRanks        *ranks;
  RlxEventLog          *log;
  GCancellable         *cancellable;
  guint                 pending_leave;     /* parts of a leave still running */
  gboolean              invite_valid;      /* the entry holds nothing or a well-formed invite */
  char                 *joining_host;      /* rlx://HOST:PORT while joining by invite */
  gboolean              node_started;      /* this join's node runs (start finished) */
  gboolean              cohort_reached;    /* this join's node said "joined" */
  char                 *join_failure;      /* why the last join ended by itself */
  gboolean              close_after_leave;

  guint                 tick_id;
  guint                 ticks;
  gboolean              status_dirty;
  GArray               *pending;                 /* Point: steps not yet in the chart */
  guint64               step;
  double                loss;
  AdwToast             *toasts[N_TOAST_KINDS];   /* shown now, per kind */
  FILE                 *event_log;               /* $RLX_CLUSTER_EVENT_LOG (debugging) */
  guint                 unseen;                  /* events since the list was seen */
  GHashTable           *toasted_fallbacks;       /* reasons already shown in a toast */
};

G_DEFINE_FINAL_TYPE (RlxWindow, rlx_window, ADW_TYPE_APPLICATION_WINDOW)

enum { PROP_0, PROP_COHORT, PROP_STATE, PROP_LOG_SCALE, N_PROPS };
static GParamSpec *props[N_PROPS];

static void update_actions (RlxWindow *self);

/* ── small helpers ─────────────────────────────────────────────────────── */

static void
set_state (RlxWindow *self, WindowState state)
{
  if (self->state == state)
    return;
  self->state = state;
  update_actions (self);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_STATE]);
}

/* The cohort joined (an invite names its own), else the window's. */
static const char *
cohort_name (RlxWindow *self)
{
  return self->node ? rlx_node_thread_get_cohort (self->node) : self->cohort;
}

static void
on_toast_dismissed (AdwToast *toast, RlxWindow *self)
{
  for (guint i = 0; i < N_TOAST_KINDS; i++)
    if (self->toasts[i] == toast)
      self->toasts[i] = NULL;
}

/* One toast per kind at a time: a burst of the same kind updates the one
 * shown instead of queueing more. */
static void
show_toast (RlxWindow *self, guint kind, const char *title, const char *detail)
{
  g_autofree char *text = NULL;
  AdwToast *toast;

  if (detail && *detail)
    {
      g_autofree char *short_detail = g_utf8_strlen (detail, -1) > 160
                                        ? g_strdup_printf ("%.*s…", (int) (g_utf8_offset_to_pointer (detail, 159) - detail), detail)
                                        : g_strdup (detail);
      text = g_strdup_printf ("%s: %s", title, short_detail);
    }
  else
    text = g_strdup (title);
  /* toasts take Pango markup */
  {
    g_autofree char *escaped = g_markup_escape_text (text, -1);
    g_free (text);
    text = g_steal_pointer (&escaped);
  }
  if (self->toasts[kind])
    {
      adw_toast_set_title (self->toasts[kind], text);
      return;
    }
  toast = adw_toast_new (text);
  adw_toast_set_timeout (toast, 6);
  if (kind != TOAST_APP)
    {
      adw_toast_set_button_label (toast, _("_Details"));
      adw_toast_set_action_name (toast, "win.show-events");
    }
  g_signal_connect_object (toast, "dismissed", G_CALLBACK (on_toast_dismissed), self, 0);
  self->toasts[kind] = toast;
  adw_toast_overlay_add_toast (self->toast_overlay, toast);
}

/* @n items were logged: the list shows; the badge counts the warnings and
 * errors among them (a join is no news to hurry to). */
static void
events_added (RlxWindow *self, RlxEventItem **items, guint n)
{
  guint warnings = 0;

  if (n == 0)
    return;
  gtk_stack_set_visible_child_name (self->events_stack, "list");
  for (guint i = 0; i < n; i++)
    warnings += rlx_event_item_is_warning (items[i]);
  if (warnings > 0 &&
      g_strcmp0 (adw_view_stack_get_visible_child_name (self->view_stack), "events") != 0)
    {
      self->unseen += warnings;
      adw_view_stack_page_set_needs_attention (self->events_page, TRUE);
      adw_view_stack_page_set_badge_number (self->events_page, self->unseen);
    }
}

/* Something the app itself has to say: logged, and toasted if urgent. */
static void
report (RlxWindow *self, RlxLogKind kind, gboolean urgent, const char *title,
        const char *detail)
{
  RlxEventItem *item = rlx_event_log_add (self->log, kind, urgent, title, detail);

  events_added (self, &item, 1);
  if (urgent)
    show_toast (self, TOAST_APP, title, detail);
}

/* ── the header's status ───────────────────────────────────────────────── */

static void
update_status (RlxWindow *self)
{
  g_autofree char *subtitle = NULL;
  g_autofree char *loss = NULL;

  self->status_dirty = FALSE;
  switch (self->state)
    {
    case STATE_IDLE:
      subtitle = g_strdup_printf (_("Not in a cohort"));
      break;
    case STATE_JOINING:
      if (self->joining_host)
        /* Translators: %s is rlx://HOST:PORT */
        subtitle = g_strdup_printf (_("Joining %s…"), self->joining_host);
      else
        /* Translators: %s is a cohort name */
        subtitle = g_strdup_printf (_("Joining “%s”…"), cohort_name (self));
      break;
    case STATE_LEAVING:
      subtitle = g_strdup (_("Leaving…"));
      break;
    case STATE_JOINED:
      if (self->node)
        {
          guint members = rlx_node_thread_get_members (self->node);
          const char *role = rlx_node_thread_get_role (self->node);
          /* Translators: cohort name · the node's role · how many ranks */
          subtitle = g_strdup_printf (ngettext ("“%s” · %s · %u rank", "“%s” · %s · %u ranks",
                                                members),
                                      cohort_name (self), role, members);
        }
      break;
    default:
      g_assert_not_reached ();
    }
  if (subtitle)
    adw_view_switcher_title_set_subtitle (self->switcher_title, subtitle);
  if (self->step > 0)
    /* Translators: the latest committed step and its loss */
    loss = g_strdup_printf (_("step %lu · loss %.4f"), (gulong) self->step, self->loss);
  else
    loss = g_strdup ("");
  rlx_figure_set_text (self->loss_summary, loss);
}

typedef struct {
  double x, y;
  gint64 t;
} Point;

/* The timeline's marks go on the loss chart too. */
static void
on_marks_changed (GListModel *marks, guint pos, guint removed, guint added, RlxWindow *self)
{
  guint n = g_list_model_get_n_items (marks);
  g_autofree double *steps = g_new (double, MAX (n, 1));

  for (guint i = 0; i < n; i++)
    {
      g_autoptr(RlxTimelineMark) m = g_list_model_get_item (marks, i);
      steps[i] = (double) rlx_timeline_mark_get_step (m);
    }
  rlx_loss_chart_set_marks (self->chart, steps, n);
}

static gboolean
on_ui_tick (gpointer user_data)
{
  RlxWindow *self = user_data;
  RlxChartSeries *loss = rlx_loss_chart_get_loss (self->chart);

  for (guint i = 0; i < self->pending->len; i++)
    {
      Point *p = &g_array_index (self->pending, Point, i);
      rlx_chart_series_append (loss, p->x, p->y, p->t);
    }
  g_array_set_size (self->pending, 0);
  if (self->status_dirty)
    {
      update_status (self);
      rlx_cohort_panel_refresh (self->cohort_panel);
    }
  if (++self->ticks % WIRE_EVERY_TICKS == 0)
    {
      rlx_wire_panel_refresh (self->counters);
      rlx_sync_panel_tick (self->sync_panel, g_get_monotonic_time ());
    }
  /* the ranks' sparklines: one value a second */
  if (self->ticks % (1000 / UI_TICK_MS) == 0)
    rlx_cohort_panel_sample (self->cohort_panel);
  return G_SOURCE_CONTINUE;
}

static void
update_actions (RlxWindow *self)
{
  gboolean on_empty = g_strcmp0 (gtk_stack_get_visible_child_name (self->training_stack),
                                 "empty") == 0;
  g_autofree char *invite = self->node ? rlx_node_thread_dup_invite (self->node) : NULL;
  GtkWidget *widget = GTK_WIDGET (self);

  gtk_widget_action_set_enabled (widget, "win.join", self->state == STATE_IDLE &&
                                                     !self->close_after_leave &&
                                                     self->invite_valid);
  gtk_widget_action_set_enabled (widget, "win.leave", self->state == STATE_JOINING ||
                                                      self->state == STATE_JOINED);
  gtk_widget_action_set_enabled (widget, "win.add-local-rank", self->state == STATE_JOINED);
  gtk_widget_action_set_enabled (widget, "win.copy-invite",
                                 self->state == STATE_JOINED && invite != NULL);
  gtk_widget_set_visible (GTK_WIDGET (self->join_button),
                          self->state == STATE_IDLE && !on_empty);
  gtk_widget_set_visible (GTK_WIDGET (self->leave_button), self->state != STATE_IDLE);
  gtk_widget_set_visible (GTK_WIDGET (self->copy_invite_button),
                          self->state == STATE_JOINED && invite != NULL);
  update_status (self);
}

/* ── the empty and joining pages ────────────────────────────────────────── */

/* Idle: the invite entry, with why the last join ended if it did. */
static void
show_empty_page (RlxWindow *self)
{
  gtk_spinner_stop (self->joining_spinner);
  if (self->join_failure)
    {
      /* Translators: %s says why (from the node) */
      g_autofree char *text = g_strdup_printf (_("Could not join: %s"), self->join_failure);
      gtk_label_set_label (self->join_error_label, text);
    }
  gtk_widget_set_visible (GTK_WIDGET (self->join_error_label), self->join_failure != NULL);
  gtk_stack_set_visible_child_name (self->training_stack, "empty");
}

static void
show_joining_page (RlxWindow *self, const char *trouble)
{
  /* Translators: %s is rlx://HOST:PORT */
  g_autofree char *title = g_strdup_printf (_("Joining %s…"), self->joining_host);
  g_autofree char *description = NULL;

  if (trouble && *trouble)
    /* Translators: %s is what went wrong with the last attempt */
    description = g_strdup_printf (_("No member of the cohort answers yet (%s). Trying again "
                                     "for 30 seconds; nothing is founded if none answers."),
                                   trouble);
  else
    description = g_strdup (_("Waiting for a member of the cohort to answer. If none answers "
                              "within 30 seconds, nothing is founded and you can try again."));
  adw_status_page_set_title (self->joining_page, title);
  adw_status_page_set_description (self->joining_page, description);
  gtk_spinner_start (self->joining_spinner);
  gtk_stack_set_visible_child_name (self->training_stack, "joining");
}

static RlxPrecision selected_precision (RlxWindow *self);

/* Joined once the node runs and, joining by invite, has reached the
 * cohort (its "joined" event): only then the dashboard. */
static void
finish_join (RlxWindow *self)
{
  if (self->state != STATE_JOINING || !self->node_started ||
      (self->joining_host && !self->cohort_reached))
    return;
  g_clear_pointer (&self->joining_host, g_free);
  gtk_spinner_stop (self->joining_spinner);
  rlx_roster_view_set_model (self->roster_view, rlx_node_thread_get_roster (self->node));
  rlx_cohort_panel_set_roster (self->cohort_panel, rlx_node_thread_get_roster (self->node));
  rlx_wire_panel_set_node (self->counters, self->node);
  /* the dropdown may have moved while the backend resolved */
  rlx_node_thread_set_precision (self->node, selected_precision (self));
  gtk_stack_set_visible_child_name (self->training_stack, "cohort");
  set_state (self, STATE_JOINED);
}

/* ── node events ───────────────────────────────────────────────────────── */

static void
on_node_event (RlxNodeThread *node, RlxEvent *event, RlxWindow *self)
{
  g_autoptr(GPtrArray) added = NULL;

  if (self->event_log)
    {
      /* a debugging switch: this node's events as rlx-rank join --json prints them */
      g_autofree char *line = rlx_event_to_json_line (event);
      fprintf (self->event_log, "%s\n", line);
    }

  rlx_timeline_add_event (self->timeline, event, rlx_node_thread_get_node_id (node));
  rlx_progress_add_event (self->progress, event, rlx_node_thread_get_node_id (node),
                          g_get_monotonic_time ());
  rlx_sync_panel_add_event (self->sync_panel, event, g_get_monotonic_time ());
  switch (event->kind)
    {
    case RLX_EVENT_STEP:
      {
        Point p;
        self->step = event->u.step.step;
        self->loss = event->u.step.loss;
        p.x = (double) self->step;
        p.y = self->loss;
        p.t = event->u.step.time_us ? event->u.step.time_us : g_get_monotonic_time ();
        g_array_append_val (self->pending, p);
        self->status_dirty = TRUE;
        return;
      }
    case RLX_EVENT_EVALUATED:
      rlx_chart_series_append (rlx_loss_chart_get_accuracy (self->chart),
                               (double) event->u.evaluated.step, event->u.evaluated.accuracy,
                               g_get_monotonic_time ());
      break;
    case RLX_EVENT_MEMBER_JOINED:
    case RLX_EVENT_MEMBER_LEFT:
    case RLX_EVENT_LEADER:
      self->status_dirty = TRUE;
      break;
    case RLX_EVENT_JOINED:
      self->status_dirty = TRUE;
      if (g_strcmp0 (event->u.joined.node, rlx_node_thread_get_node_id (node)) == 0)
        {
          self->cohort_reached = TRUE;
          finish_join (self);
        }
      break;
    case RLX_EVENT_SIGNALLING:
      if (self->joining_host && self->state == STATE_JOINING)
        show_joining_page (self, event->u.signalling.reason ? event->u.signalling.reason : "");
      break;
    default:
      break;
    }

  rlx_event_log_add_event (self->log, event, rlx_node_thread_get_node_id (node), &added);
  for (guint i = 0; i < added->len; i++)
    {
      RlxEventItem *item = g_ptr_array_index (added, i);
      if (!rlx_event_item_get_urgent (item))
        continue;
      /* every rank of one machine tends to fall back for the same reason:
       * say it once, the event list keeps the rest */
      if (rlx_event_item_get_kind (item) == RLX_LOG_FALLBACK &&
          !g_hash_table_add (self->toasted_fallbacks, g_strdup (rlx_event_item_get_detail (item))))
        continue;
      show_toast (self, rlx_event_item_get_kind (item), rlx_event_item_get_title (item),
                  rlx_event_item_get_detail (item));
    }
  events_added (self, (RlxEventItem **) added->pdata, added->len);
}

/* ── leave ─────────────────────────────────────────────────────────────── */

static void
leave_part_done (RlxWindow *self)
{
  g_assert (self->pending_leave > 0);
  if (--self->pending_leave > 0)
    return;
  if (self->node)
    g_signal_handlers_disconnect_by_data (self->node, self);
  g_clear_object (&self->node);
  g_clear_pointer (&self->joining_host, g_free);
  set_state (self, STATE_IDLE);
  if (self->close_after_leave)
    {
      gtk_window_destroy (GTK_WINDOW (self));
      return;
    }
  show_empty_page (self);
}

static void
on_node_left (GObject *source, GAsyncResult *result, gpointer user_data)
{
  g_autoptr(RlxWindow) self = user_data;

  rlx_node_thread_leave_finish (RLX_NODE_THREAD (source), result, NULL);
  leave_part_done (self);
}

static void
on_ranks_stopped (GObject *source, GAsyncResult *result, gpointer user_data)
{
  g_autoptr(RlxWindow) self = user_data;

  rlx_local_ranks_stop_finish (RLX_LOCAL_RANKS (source), result, NULL);
  leave_part_done (self);
}

static void
begin_leave (RlxWindow *self, const char *reason)
{
  if (self->state != STATE_JOINING && self->state != STATE_JOINED)
    return;
  set_state (self, STATE_LEAVING);
  self->pending_leave = 1;
  if (self->ranks)
    {
      self->pending_leave++;
      rlx_local_ranks_stop_async (self->ranks, RANK_STOP_GRACE_MS, on_ranks_stopped,
                                  g_object_ref (self));
    }
  rlx_node_thread_leave_async (self->node, reason, on_node_left, g_object_ref (self));
}

void
rlx_window_leave (RlxWindow *self)
{
  g_return_if_fail (RLX_IS_WINDOW (self));
  begin_leave (self, "left");
}

/* The node stopped: after a leave, or by itself (refused, failure). */
static void
on_node_finished (RlxNodeThread *node, gboolean success, const char *message, RlxWindow *self)
{
  rlx_roster_view_set_model (self->roster_view, NULL);
  rlx_wire_panel_set_node (self->counters, NULL);
  /* gave up joining by invite (it founds nothing): back to the invite, with
   * the reason there; a start that failed is on_node_started's */
  if (self->state == STATE_JOINING && self->node_started)
    {
      g_free (self->join_failure);
      self->join_failure = g_strdup (message);
      report (self, RLX_LOG_ERROR, FALSE, _("Could not join the cohort"), message);
      begin_leave (self, message);
      return;
    }
  if (!success)
    report (self, RLX_LOG_ERROR, TRUE, _("This node left the cohort"), message);
  /* stopped by itself: stop the local ranks too */
  if (self->state == STATE_JOINED)
    begin_leave (self, message);
  else
    update_status (self);
}

/* ── join ──────────────────────────────────────────────────────────────── */

static RlxPrecision
selected_precision (RlxWindow *self)
{
  guint i = gtk_drop_down_get_selected (self->precision_dropdown);

  return i < RLX_PRECISION_COUNT ? (RlxPrecision) i : RLX_PRECISION_F32;
}

static void
on_node_started (GObject *source, GAsyncResult *result, gpointer user_data)
{
  g_autoptr(RlxWindow) self = user_data;
  g_autoptr(GError) error = NULL;

  if (!rlx_node_thread_start_finish (RLX_NODE_THREAD (source), result, &error))
    {
      /* a leave during joining finishes through on_node_left */
      if (self->state == STATE_JOINING)
        {
          report (self, RLX_LOG_ERROR, FALSE, _("Could not join the cohort"),
                  error->message);
          g_signal_handlers_disconnect_by_data (self->node, self);
          g_clear_object (&self->node);
          g_clear_pointer (&self->joining_host, g_free);
          g_free (self->join_failure);
          self->join_failure = g_strdup (error->message);
          set_state (self, STATE_IDLE);
          show_empty_page (self);
        }
      return;
    }
  self->node_started = TRUE;
  finish_join (self);
}

void
rlx_window_join (RlxWindow *self)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *model = NULL, *dataset = NULL, *backend = NULL;
  g_autofree char *invite = NULL, *sync = NULL;
  RlxNodeConfig cfg = { 0 };

  g_return_if_fail (RLX_IS_WINDOW (self));
  if (self->state != STATE_IDLE || self->close_after_leave)
    return;

  invite = g_strstrip (g_strdup (gtk_editable_get_text (GTK_EDITABLE (self->invite_row))));
  g_clear_pointer (&self->join_failure, g_free);
  gtk_widget_set_visible (GTK_WIDGET (self->join_error_label), FALSE);
  if (*invite)
    {
      g_autoptr(RlxInvite) parsed = rlx_invite_parse (invite, &error);
      g_autofree char *authority = NULL;
      if (parsed == NULL)
        {
          /* the entry says so too (on_invite_changed) */
          gtk_widget_add_css_class (GTK_WIDGET (self->invite_row), "error");
          report (self, RLX_LOG_ERROR, FALSE, _("Could not join the cohort"),
                  error->message);
          return;
        }
      authority = rlx_invite_dup_authority (parsed);
      g_free (self->joining_host);
      self->joining_host = g_strconcat ("rlx://", authority, NULL);
    }
  model = g_settings_get_string (self->settings, "model");
  dataset = g_settings_get_string (self->settings, "dataset");
  backend = g_settings_get_string (self->settings, "backend");
  /* an invite names its cohort; an empty one is this machine's, which
   * other machines may join when the settings say so */
  if (*invite)
    cfg.invite = invite;
  else
    {
      cfg.cohort = self->cohort;
      if (g_settings_get_boolean (self->settings, "host"))
        cfg.host_port = (guint16) g_settings_get_uint (self->settings, "host-port");
    }
  cfg.model = model;
  cfg.dataset = dataset;
  cfg.backend = backend;
  cfg.precision = selected_precision (self);
  cfg.batch = g_settings_get_uint (self->settings, "batch");
  cfg.lr = g_settings_get_double (self->settings, "learning-rate");
  cfg.seed = g_settings_get_uint64 (self->settings, "seed");
  cfg.evaluate_every = g_settings_get_uint (self->settings, "evaluate-every");
  /* Preferences → Synchronisation (the cohort runs its leader's) */
  sync = rlx_preferences_sync_request (self->settings);
  if (!rlx_sync_parse (sync, &cfg.sync, &error))
    {
      report (self, RLX_LOG_ERROR, TRUE, _("Could not join the cohort"), error->message);
      return;
    }
  cfg.checkpoint_every = 100;

  self->node = rlx_node_thread_new (&cfg, &error);
  if (self->node == NULL)
    {
      if (*invite)
        gtk_widget_add_css_class (GTK_WIDGET (self->invite_row), "error");
      g_clear_pointer (&self->joining_host, g_free);
      report (self, RLX_LOG_ERROR, TRUE, _("Could not join the cohort"), error->message);
      return;
    }

  rlx_loss_chart_clear (self->chart);
  rlx_timeline_clear (self->timeline);
  rlx_progress_clear (self->progress);
  rlx_cohort_panel_set_roster (self->cohort_panel, NULL);
  g_array_set_size (self->pending, 0);
  rlx_wire_panel_reset (self->counters);
  rlx_sync_panel_reset (self->sync_panel);
  self->step = 0;
  self->loss = 0;
  self->node_started = FALSE;
  self->cohort_reached = FALSE;
  if (self->joining_host)
    show_joining_page (self, NULL);
  else
    gtk_stack_set_visible_child_name (self->training_stack, "cohort");
  g_signal_connect (self->node, "event", G_CALLBACK (on_node_event), self);
  g_signal_connect (self->node, "finished", G_CALLBACK (on_node_finished), self);
  set_state (self, STATE_JOINING);
  rlx_node_thread_start_async (self->node, self->cancellable, on_node_started,
                               g_object_ref (self));
}

/* ── local ranks ───────────────────────────────────────────────────────── */

static void
on_rank_exited (RlxLocalRanks *ranks, const char *node_id, gboolean expected,
                const char *message, RlxWindow *self)
{
  g_autofree char *title = NULL;

  if (expected)
    return;
  /* Translators: %s is a node id */
  title = g_strdup_printf (_("Local rank %s stopped"), node_id);
  report (self, RLX_LOG_ERROR, TRUE, title, message);
}

static RlxLocalRanks *
local_ranks (RlxWindow *self)
{
  if (self->ranks == NULL)
    {
      g_autofree char *rlx_rank = rlx_local_ranks_find_rlx_rank ();
      g_autofree char *log_dir = g_build_filename (g_get_user_state_dir (), "rlx-cluster",
                                                   self->cohort, "ranks", NULL);
      self->ranks = rlx_local_ranks_new (rlx_rank, log_dir);
      g_signal_connect (self->ranks, "exited", G_CALLBACK (on_rank_exited), self);
    }
  return self->ranks;
}

void
rlx_window_add_local_rank (RlxWindow *self)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *model = NULL, *dataset = NULL, *backend = NULL, *batch = NULL;
  g_autofree char *seed = NULL, *node_id = NULL, *invite = NULL, *sync = NULL;
  char lr[G_ASCII_DTOSTR_BUF_SIZE];
  const char *options[32];
  guint n = 0;

  g_return_if_fail (RLX_IS_WINDOW (self));
  if (self->state != STATE_JOINED)
    return;

  model = g_settings_get_string (self->settings, "model");
  dataset = g_settings_get_string (self->settings, "dataset");
  backend = g_settings_get_string (self->settings, "backend");
  batch = g_strdup_printf ("%u", g_settings_get_uint (self->settings, "batch"));
  seed = g_strdup_printf ("%" G_GUINT64_FORMAT, g_settings_get_uint64 (self->settings, "seed"));
  g_ascii_formatd (lr, sizeof lr, "%.9g", g_settings_get_double (self->settings, "learning-rate"));
  options[n++] = "--model";
  options[n++] = model;
  options[n++] = "--dataset";
  options[n++] = dataset;
  options[n++] = "--backend";
  options[n++] = backend;
  options[n++] = "--batch";
  options[n++] = batch;
  options[n++] = "--lr";
  options[n++] = lr;
  options[n++] = "--seed";
  options[n++] = seed;
  options[n++] = "--precision";
  options[n++] = rlx_precision_to_string (selected_precision (self));
  /* several ranks share this machine's cores: one BLAS thread each */
  options[n++] = "--threads";
  options[n++] = "1";
  /* what it asks for if it ever leads (Preferences → Synchronisation) */
  sync = rlx_preferences_sync_request (self->settings);
  options[n++] = "--sync";
  options[n++] = sync;
  options[n] = NULL;

  /* a cohort across machines: the ranks join it too (the invite through a
   * pipe, never in their arguments) */
  invite = self->node ? rlx_node_thread_dup_invite (self->node) : NULL;
  node_id = rlx_local_ranks_spawn_with_invite (local_ranks (self), cohort_name (self), invite,
                                               options, &error);
  if (node_id == NULL)
    {
      report (self, RLX_LOG_ERROR, TRUE, _("Could not add a local rank"), error->message);
      return;
    }
  {
    /* Translators: %s is a node id */
    g_autofree char *title = g_strdup_printf (_("Started local rank %s"), node_id);
    g_autofree char *log = g_build_filename (rlx_local_ranks_get_log_dir (self->ranks), node_id,
                                             NULL);
    /* Translators: %s is a file path */
    g_autofree char *detail = g_strdup_printf (_("Its events go to %s.jsonl"), log);
    report (self, RLX_LOG_INFO, FALSE, title, detail);
  }
}

/* ── actions ───────────────────────────────────────────────────────────── */

static void
join_action (GtkWidget *widget, const char *name, GVariant *param)
{
  rlx_window_join (RLX_WINDOW (widget));
}

static void
leave_action (GtkWidget *widget, const char *name, GVariant *param)
{
  rlx_window_leave (RLX_WINDOW (widget));
}

static void
add_local_rank_action (GtkWidget *widget, const char *name, GVariant *param)
{
  rlx_window_add_local_rank (RLX_WINDOW (widget));
}

static void
copy_invite_action (GtkWidget *widget, const char *name, GVariant *param)
{
  RlxWindow *self = RLX_WINDOW (widget);
  g_autofree char *invite = self->node ? rlx_node_thread_dup_invite (self->node) : NULL;

  if (invite == NULL)
    return;
  gdk_clipboard_set_text (gtk_widget_get_clipboard (widget), invite);
  show_toast (self, TOAST_APP, _("Invite copied"), NULL);
}

static void
show_events_action (GtkWidget *widget, const char *name, GVariant *param)
{
  adw_view_stack_set_visible_child_name (RLX_WINDOW (widget)->view_stack, "events");
}

static void
show_training_action (GtkWidget *widget, const char *name, GVariant *param)
{
  adw_view_stack_set_visible_child_name (RLX_WINDOW (widget)->view_stack, "training");
}

/* ── template callbacks and signals ────────────────────────────────────── */

/* As you type: a malformed invite is said under the entry, and Join waits
 * for a well-formed one (or none: this machine's cohort). */
static void
on_invite_changed (AdwEntryRow *row, RlxWindow *self)
{
  g_autofree char *text = g_strstrip (g_strdup (gtk_editable_get_text (GTK_EDITABLE (row))));
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxInvite) invite = *text ? rlx_invite_parse (text, &error) : NULL;

  self->invite_valid = *text == '\0' || invite != NULL;
  if (self->invite_valid)
    gtk_widget_remove_css_class (GTK_WIDGET (row), "error");
  else
    {
      gtk_widget_add_css_class (GTK_WIDGET (row), "error");
      gtk_label_set_label (self->invite_error_label, error->message);
    }
  gtk_widget_set_visible (GTK_WIDGET (self->invite_error_label), !self->invite_valid);
  update_actions (self);
}

static void
on_invite_activated (AdwEntryRow *row, RlxWindow *self)
{
  rlx_window_join (self);
}

static void
on_visible_page (AdwViewStack *stack, GParamSpec *pspec, RlxWindow *self)
{
  if (g_strcmp0 (adw_view_stack_get_visible_child_name (stack), "events") == 0)
    {
      self->unseen = 0;
      adw_view_stack_page_set_needs_attention (self->events_page, FALSE);
      adw_view_stack_page_set_badge_number (self->events_page, 0);
    }
}

static void
on_training_page (GtkStack *stack, GParamSpec *pspec, RlxWindow *self)
{
  update_actions (self);
}

/* The dropdown says whom it applies to: this node, and (Preferences, on by
 * default) the local ranks it started. */
static void
update_precision_scope (RlxWindow *self)
{
  gboolean ranks_too = g_settings_get_boolean (self->settings, "precision-local-ranks");

  gtk_widget_set_tooltip_text (GTK_WIDGET (self->precision_dropdown), ranks_too
    ? _("Wire precision of this node and of the local ranks it started: what they send "
        "gradients and updates at, from their next message")
    : _("Wire precision of this node only: what it sends gradients and updates at, from its "
        "next message (the local ranks keep theirs; Preferences)"));
}

static void
on_precision_selected (GtkDropDown *dropdown, GParamSpec *pspec, RlxWindow *self)
{
  if (self->node && self->state == STATE_JOINED)
    rlx_node_thread_set_precision (self->node, selected_precision (self));
  if (self->ranks && g_settings_get_boolean (self->settings, "precision-local-ranks"))
    rlx_local_ranks_set_precision (self->ranks, rlx_precision_to_string (selected_precision (self)));
}

static gboolean
get_precision_index (GValue *value, GVariant *variant, gpointer user_data)
{
  RlxPrecision p;

  if (!rlx_precision_from_string (g_variant_get_string (variant, NULL), &p, NULL))
    p = RLX_PRECISION_F32;
  g_value_set_uint (value, (guint) p);
  return TRUE;
}

static GVariant *
set_precision_index (const GValue *value, const GVariantType *type, gpointer user_data)
{
  guint i = g_value_get_uint (value);

  if (i >= RLX_PRECISION_COUNT)
    return NULL;
  return g_variant_new_string (rlx_precision_to_string ((RlxPrecision) i));
}

static void
on_settings_changed (GSettings *settings, const char *key, RlxWindow *self)
{
  g_autofree char *setup = rlx_preferences_describe_setup (settings);

  adw_action_row_set_subtitle (self->setup_row, setup);
}

static gboolean
rlx_window_close_request (GtkWindow *window)
{
  RlxWindow *self = RLX_WINDOW (window);
  int width, height;

  gtk_window_get_default_size (window, &width, &height);
  g_settings_set_int (self->settings, "window-width", width);
  g_settings_set_int (self->settings, "window-height", height);
  g_settings_set_boolean (self->settings, "window-maximized", gtk_window_is_maximized (window));

  /* Leave first (bye to the cohort, local ranks stopped), then close. */
  if (self->state != STATE_IDLE)
    {
      self->close_after_leave = TRUE;
      update_actions (self);
      begin_leave (self, "the app was closed");
      return TRUE;
    }
  return GTK_WINDOW_CLASS (rlx_window_parent_class)->close_request (window);
}

/* ── accessors ─────────────────────────────────────────────────────────── */

const char *
rlx_window_get_state (RlxWindow *self)
{
  g_return_val_if_fail (RLX_IS_WINDOW (self), NULL);
  return state_names[self->state];
}

const char *
rlx_window_get_cohort (RlxWindow *self)
{
  g_return_val_if_fail (RLX_IS_WINDOW (self), NULL);
  return self->cohort;
}

RlxNodeThread *rlx_window_get_node (RlxWindow *self) { return self->node; }
RlxLocalRanks *rlx_window_get_local_ranks (RlxWindow *self) { return local_ranks (self); }
RlxLossChart *rlx_window_get_chart (RlxWindow *self) { return self->chart; }
RlxRosterView *rlx_window_get_roster_view (RlxWindow *self) { return self->roster_view; }
RlxWirePanel *rlx_window_get_wire_panel (RlxWindow *self) { return self->counters; }
RlxEventLog *rlx_window_get_event_log (RlxWindow *self) { return self->log; }
GtkDropDown *rlx_window_get_precision_dropdown (RlxWindow *self) { return self->precision_dropdown; }

RlxWindow *
rlx_window_new (AdwApplication *application, const char *cohort)
{
  return g_object_new (RLX_TYPE_WINDOW, "application", application, "cohort", cohort, NULL);
}

/* ── GObject ───────────────────────────────────────────────────────────── */

static void
rlx_window_constructed (GObject *object)
{
  RlxWindow *self = RLX_WINDOW (object);

  G_OBJECT_CLASS (rlx_window_parent_class)->constructed (object);

  if (self->cohort == NULL)
    self->cohort = g_strdup ("default");
  gtk_window_set_default_size (GTK_WINDOW (self),
                               g_settings_get_int (self->settings, "window-width"),
                               g_settings_get_int (self->settings, "window-height"));
  if (g_settings_get_boolean (self->settings, "window-maximized"))
    gtk_window_maximize (GTK_WINDOW (self));
  g_settings_bind_with_mapping (self->settings, "precision", self->precision_dropdown, "selected",
                                G_SETTINGS_BIND_DEFAULT, get_precision_index,
                                set_precision_index, NULL, NULL);
  g_signal_connect (self->precision_dropdown, "notify::selected",
                    G_CALLBACK (on_precision_selected), self);
  g_signal_connect_swapped (self->settings, "changed::precision-local-ranks",
                            G_CALLBACK (update_precision_scope), self);
  update_precision_scope (self);
  g_settings_bind (self->settings, "log-scale", self, "log-scale", G_SETTINGS_BIND_DEFAULT);
  g_object_bind_property (self, "log-scale", self->chart, "log-scale", G_BINDING_SYNC_CREATE);
  g_settings_bind (self->settings, "smoothing", self->chart, "smoothing", G_SETTINGS_BIND_DEFAULT);
  g_object_bind_property (self->chart, "smoothing",
                          gtk_range_get_adjustment (GTK_RANGE (self->smoothing_scale)), "value",
                          G_BINDING_SYNC_CREATE | G_BINDING_BIDIRECTIONAL);
  g_settings_bind (self->settings, "chart-time-axis", self->chart, "time-axis",
                   G_SETTINGS_BIND_DEFAULT);
  rlx_chart_actions_install (GTK_APPLICATION_WINDOW (self), self->chart, self->toast_overlay);
  g_signal_connect (self->settings, "changed", G_CALLBACK (on_settings_changed), self);
  on_settings_changed (self->settings, NULL, self);

  rlx_events_view_set_log (self->events_view, self->log);
  rlx_cohort_panel_set_timeline (self->cohort_panel, self->timeline);
  rlx_cohort_panel_set_progress (self->cohort_panel, self->progress);
  g_signal_connect (self->timeline, "items-changed", G_CALLBACK (on_marks_changed), self);
  self->tick_id = g_timeout_add (UI_TICK_MS, on_ui_tick, self);
  update_actions (self);
}

static void
rlx_window_dispose (GObject *object)
{
  RlxWindow *self = RLX_WINDOW (object);

  g_cancellable_cancel (self->cancellable);
  g_clear_handle_id (&self->tick_id, g_source_remove);
  if (self->node)
    g_signal_handlers_disconnect_by_data (self->node, self);
  g_clear_object (&self->node);
  if (self->ranks)
    g_signal_handlers_disconnect_by_data (self->ranks, self);
  g_clear_object (&self->ranks);   /* SIGTERM to any rank still running */
  if (self->timeline)
    g_signal_handlers_disconnect_by_data (self->timeline, self);
  if (self->settings)
    g_signal_handlers_disconnect_by_data (self->settings, self);
  gtk_widget_dispose_template (GTK_WIDGET (self), RLX_TYPE_WINDOW);
  G_OBJECT_CLASS (rlx_window_parent_class)->dispose (object);
}

static void
rlx_window_finalize (GObject *object)
{
  RlxWindow *self = RLX_WINDOW (object);

  g_clear_object (&self->settings);
  g_clear_object (&self->log);
  if (self->timeline)
    g_signal_handlers_disconnect_by_data (self->timeline, self);
  g_clear_object (&self->timeline);
  g_clear_pointer (&self->progress, rlx_progress_free);
  g_clear_object (&self->cancellable);
  g_clear_pointer (&self->event_log, fclose);
  g_clear_pointer (&self->toasted_fallbacks, g_hash_table_unref);
  g_clear_pointer (&self->pending, g_array_unref);
  g_free (self->cohort);
  g_free (self->joining_host);
  g_free (self->join_failure);
  G_OBJECT_CLASS (rlx_window_parent_class)->finalize (object);
}

static void
rlx_window_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  RlxWindow *self = RLX_WINDOW (object);

  switch (id)
    {
    case PROP_COHORT: g_value_set_string (value, self->cohort); break;
    case PROP_STATE: g_value_set_string (value, state_names[self->state]); break;
    case PROP_LOG_SCALE: g_value_set_boolean (value, self->log_scale); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_window_set_property (GObject *object, guint id, const GValue *value, GParamSpec *pspec)
{
  RlxWindow *self = RLX_WINDOW (object);

  switch (id)
    {
    case PROP_COHORT:
      g_free (self->cohort);
      self->cohort = g_value_dup_string (value);
      break;
    case PROP_LOG_SCALE:
      if (self->log_scale != g_value_get_boolean (value))
        {
          self->log_scale = g_value_get_boolean (value);
          g_object_notify_by_pspec (object, pspec);
        }
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_window_class_init (RlxWindowClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  GtkWindowClass *window_class = GTK_WINDOW_CLASS (klass);

  object_class->constructed = rlx_window_constructed;
  object_class->dispose = rlx_window_dispose;
  object_class->finalize = rlx_window_finalize;
  object_class->get_property = rlx_window_get_property;
  object_class->set_property = rlx_window_set_property;
  window_class->close_request = rlx_window_close_request;

  props[PROP_COHORT] = g_param_spec_string ("cohort", NULL, NULL, NULL,
                                            G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                                            G_PARAM_STATIC_STRINGS);
  props[PROP_STATE] = g_param_spec_string ("state", NULL, NULL, "idle",
                                           G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY |
                                           G_PARAM_STATIC_STRINGS);
  props[PROP_LOG_SCALE] = g_param_spec_boolean ("log-scale", NULL, NULL, FALSE,
                                                G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY |
                                                G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, props);

  g_type_ensure (RLX_TYPE_LOSS_CHART);
  g_type_ensure (RLX_TYPE_ROSTER_VIEW);
  g_type_ensure (RLX_TYPE_WIRE_PANEL);
  g_type_ensure (RLX_TYPE_SYNC_PANEL);
  g_type_ensure (RLX_TYPE_EVENT_ITEM);
  g_type_ensure (RLX_TYPE_EVENTS_VIEW);
  g_type_ensure (RLX_TYPE_COHORT_PANEL);
  gtk_widget_class_set_template_from_resource (widget_class,
                                               "/io/github/rlx/Cluster/ui/rlx-window.ui");
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, toast_overlay);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, smoothing_scale);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, switcher_title);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, view_stack);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, events_page);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, training_stack);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, events_stack);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, events_view);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, cohort_panel);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, join_button);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, leave_button);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, add_rank_button);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, copy_invite_button);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, precision_dropdown);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, invite_row);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, invite_error_label);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, join_error_label);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, joining_page);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, joining_spinner);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, setup_row);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, counters);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, sync_panel);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, chart);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, roster_view);
  gtk_widget_class_bind_template_child (widget_class, RlxWindow, loss_summary);
  gtk_widget_class_bind_template_callback (widget_class, on_invite_changed);
  gtk_widget_class_bind_template_callback (widget_class, on_invite_activated);

  gtk_widget_class_install_action (widget_class, "win.join", NULL, join_action);
  gtk_widget_class_install_action (widget_class, "win.leave", NULL, leave_action);
  gtk_widget_class_install_action (widget_class, "win.add-local-rank", NULL,
                                   add_local_rank_action);
  gtk_widget_class_install_action (widget_class, "win.copy-invite", NULL, copy_invite_action);
  gtk_widget_class_install_action (widget_class, "win.show-events", NULL, show_events_action);
  gtk_widget_class_install_action (widget_class, "win.show-training", NULL,
                                   show_training_action);
  gtk_widget_class_install_property_action (widget_class, "win.log-scale", "log-scale");
}

static void
rlx_window_init (RlxWindow *self)
{
  self->settings = g_settings_new (RLX_APP_ID);
  self->log = rlx_event_log_new ();
  self->timeline = rlx_timeline_new ();
  self->progress = rlx_progress_new ();
  self->pending = g_array_new (FALSE, FALSE, sizeof (Point));
  self->toasted_fallbacks = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  self->cancellable = g_cancellable_new ();
  self->invite_valid = TRUE;   /* the entry starts empty: this machine's cohort */
  if (g_getenv ("RLX_CLUSTER_EVENT_LOG"))
    {
      self->event_log = fopen (g_getenv ("RLX_CLUSTER_EVENT_LOG"), "a");
      if (self->event_log)
        setvbuf (self->event_log, NULL, _IOLBF, 0);
    }
  gtk_widget_init_template (GTK_WIDGET (self));
  g_signal_connect (self->view_stack, "notify::visible-child-name",
                    G_CALLBACK (on_visible_page), self);
  g_signal_connect (self->training_stack, "notify::visible-child-name",
                    G_CALLBACK (on_training_page), self);
}
