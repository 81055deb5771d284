/* test-dashboard.c — the cohort dashboard's widgets fed the core's typed
 * events (core/event/rlx-event.h), as a node thread hands them over: the
 * events page (newest first, its filter, the one evaluation row), the
 * membership and leader timeline, and the hash light.
 */
#include "rlx-config.h"
#include "node-test-utils.h"
#include "rlx-events-view.h"
#include "rlx-cohort-panel.h"
#include "rlx-sparkline.h"
#include "core/cohort/rlx-roster.h"

#include <adwaita.h>
#include <string.h>

static RlxEvent *
member (RlxEventKind kind, const char *node, const char *reason)
{
  RlxEvent *e = rlx_event_new (kind);

  e->u.member.node = g_strdup (node);
  e->u.member.reason = g_strdup (reason);
  if (reason == NULL)
    {
      e->u.member.has_peer = TRUE;
      e->u.member.host = g_strdup ("box");
      e->u.member.backend = g_strdup ("cpu");
    }
  return e;
}

static void
log_take (RlxEventLog *log, RlxEvent *e)
{
  rlx_event_log_add_event (log, e, "me", NULL);
  rlx_event_unref (e);
}

static const char *
shown_title (RlxEventsView *view, guint i)
{
  g_autoptr(RlxEventItem) item = g_list_model_get_item (rlx_events_view_get_shown (view), i);

  g_assert_nonnull (item);
  return rlx_event_item_get_title (item);   /* the log holds the item */
}

typedef struct { guint pos, removed, added; } Change;

static void
on_changed (GListModel *model, guint pos, guint removed, guint added, Change *c)
{
  *c = (Change) { pos, removed, added };
}

static void
test_events_view (void)
{
  g_autoptr(RlxEventLog) log = rlx_event_log_new ();
  RlxEventsView *view = RLX_EVENTS_VIEW (g_object_ref_sink (rlx_events_view_new ()));
  GtkWidget *window = gtk_window_new ();
  GListModel *shown = rlx_events_view_get_shown (view);
  RlxEvent *e;

  gtk_window_set_child (GTK_WINDOW (window), GTK_WIDGET (view));
  gtk_window_present (GTK_WINDOW (window));
  rlx_events_view_set_log (view, log);
  log_take (log, member (RLX_EVENT_MEMBER_JOINED, "n2", NULL));
  e = rlx_event_new (RLX_EVENT_REJECTED);
  e->u.rejected.node = g_strdup ("n2");
  e->u.rejected.has_step = TRUE;
  e->u.rejected.step = 7;
  e->u.rejected.reason = g_strdup ("not finite");
  log_take (log, e);
  e = rlx_event_new (RLX_EVENT_INVITE);
  e->u.invite.invite = g_strdup ("rlx://h:1/c#key");
  e->u.invite.port = 1;
  log_take (log, e);
  log_take (log, member (RLX_EVENT_MEMBER_LEFT, "n2", "interrupted"));

  /* newest first */
  g_assert_cmpuint (g_list_model_get_n_items (shown), ==, 4);
  g_assert_nonnull (strstr (shown_title (view, 0), "n2 left"));
  g_assert_nonnull (strstr (shown_title (view, 3), "n2 joined"));

  /* membership: the join and the departure, newest first */
  rlx_events_view_set_filter (view, RLX_LOG_FILTER_MEMBERSHIP);
  g_assert_cmpuint (g_list_model_get_n_items (shown), ==, 2);
  g_assert_nonnull (strstr (shown_title (view, 0), "left"));
  g_assert_nonnull (strstr (shown_title (view, 1), "joined"));
  /* an event that arrives under the filter is filtered too */
  log_take (log, member (RLX_EVENT_MEMBER_JOINED, "n3", NULL));
  e = rlx_event_note_new (RLX_EVENT_ERROR, "me", "disk full");
  log_take (log, e);
  g_assert_cmpuint (g_list_model_get_n_items (shown), ==, 3);
  g_assert_nonnull (strstr (shown_title (view, 0), "n3 joined"));

  /* warnings: the rejection and the error */
  rlx_events_view_set_filter (view, RLX_LOG_FILTER_WARNINGS);
  g_assert_cmpuint (g_list_model_get_n_items (shown), ==, 2);
  g_assert_nonnull (strstr (shown_title (view, 0), "Error"));
  g_assert_nonnull (strstr (shown_title (view, 1), "rejected"));

  rlx_events_view_set_filter (view, RLX_LOG_FILTER_ALL);
  g_assert_cmpuint (g_list_model_get_n_items (shown), ==, 6);
  g_assert_cmpint (rlx_events_view_get_filter (view), ==, RLX_LOG_FILTER_ALL);

  /* the cap drops the oldest: the reversed list drops its last */
  for (guint i = 0; i < RLX_EVENT_LOG_MAX; i++)
    rlx_event_log_add (log, RLX_LOG_INFO, FALSE, "filler", NULL);
  g_assert_cmpuint (g_list_model_get_n_items (shown), ==, RLX_EVENT_LOG_MAX);
  g_assert_cmpstr (shown_title (view, RLX_EVENT_LOG_MAX - 1), ==, "filler");
  /* a view is told where: the newest comes in at the top, the oldest goes
   * at the bottom */
  {
    Change c = { 99, 99, 99 };
    gulong id = g_signal_connect (shown, "items-changed", G_CALLBACK (on_changed), &c);
    rlx_event_log_add (log, RLX_LOG_INFO, FALSE, "newest", NULL);
    g_assert_cmpuint (c.pos, ==, 0);
    g_assert_cmpuint (c.added, ==, 1);
    g_assert_cmpstr (shown_title (view, 0), ==, "newest");
    g_signal_handler_disconnect (shown, id);
  }
  rlx_event_log_clear (log);
  g_assert_cmpuint (g_list_model_get_n_items (shown), ==, 0);

  gtk_window_destroy (GTK_WINDOW (window));
  g_object_unref (view);
}

static gboolean
never (gpointer data)
{
  return FALSE;
}

/* The newest stays in sight: a list at its top stays at its top as events
 * come in (GtkListView alone keeps the row it showed and the newest scroll
 * away above it); one scrolled down by its reader stays where it is. */
static void
test_newest_visible (void)
{
  g_autoptr(RlxEventLog) log = rlx_event_log_new ();
  RlxEventsView *view = RLX_EVENTS_VIEW (rlx_events_view_new ());
  GtkWidget *window = gtk_window_new ();
  GtkAdjustment *adj;

  gtk_window_set_default_size (GTK_WINDOW (window), 400, 300);
  gtk_window_set_child (GTK_WINDOW (window), GTK_WIDGET (view));
  rlx_events_view_set_log (view, log);
  gtk_window_present (GTK_WINDOW (window));
  adj = gtk_scrolled_window_get_vadjustment (
      GTK_SCROLLED_WINDOW (gtk_widget_get_last_child (GTK_WIDGET (view))));
  for (guint i = 0; i < 40; i++)
    {
      g_autofree char *title = g_strdup_printf ("early %u", i);
      rlx_event_log_add (log, RLX_LOG_INFO, FALSE, title, NULL);
    }
  node_test_wait (never, NULL, 300);
  g_assert_cmpfloat (gtk_adjustment_get_upper (adj), >, gtk_adjustment_get_page_size (adj));
  for (guint i = 0; i < 5; i++)
    {
      rlx_event_log_add (log, RLX_LOG_INFO, FALSE, "late", NULL);
      node_test_wait (never, NULL, 100);
    }
  g_assert_cmpfloat (gtk_adjustment_get_value (adj), <, 1);

  /* a reader further down */
  gtk_adjustment_set_value (adj, 200);
  node_test_wait (never, NULL, 100);
  rlx_event_log_add (log, RLX_LOG_INFO, FALSE, "later", NULL);
  node_test_wait (never, NULL, 200);
  g_assert_cmpfloat (gtk_adjustment_get_value (adj), >=, 150);
  gtk_window_destroy (GTK_WINDOW (window));
}

/* Evaluations: one row above the list that updates, none in it. */
static void
test_accuracy_row (void)
{
  g_autoptr(RlxEventLog) log = rlx_event_log_new ();
  RlxEventsView *view = RLX_EVENTS_VIEW (g_object_ref_sink (rlx_events_view_new ()));
  RlxEvent *e;
  GtkWidget *row;

  rlx_events_view_set_log (view, log);
  row = gtk_widget_get_next_sibling (gtk_widget_get_first_child (GTK_WIDGET (view)));
  g_assert_false (gtk_widget_get_visible (row));
  for (guint s = 100; s <= 3000; s += 100)
    {
      e = rlx_event_new (RLX_EVENT_EVALUATED);
      e->u.evaluated.step = s;
      e->u.evaluated.accuracy = s / 4000.0;
      log_take (log, e);
    }
  g_assert_true (gtk_widget_get_visible (row));
  g_assert_cmpuint (g_list_model_get_n_items (rlx_events_view_get_shown (view)), ==, 0);
  g_assert_nonnull (strstr (rlx_event_log_get_accuracy_title (log), "75.0% at step 3000"));
  rlx_event_log_clear (log);
  g_assert_false (gtk_widget_get_visible (row));
  g_object_unref (view);
}

static RlxEvent *
leader (const char *node, guint64 term, guint64 step)
{
  RlxEvent *e = rlx_event_new (RLX_EVENT_LEADER);

  e->u.leader.node = g_strdup (node);
  e->u.leader.term = term;
  e->u.leader.step = step;
  return e;
}

static gboolean
timeline_take (RlxTimeline *t, RlxEvent *e)
{
  gboolean marked = rlx_timeline_add_event (t, e, "me");

  rlx_event_unref (e);
  return marked;
}

static RlxTimelineMark *
mark_at (RlxTimeline *t, guint i)
{
  RlxTimelineMark *m = g_list_model_get_item (G_LIST_MODEL (t), i);

  g_assert_nonnull (m);
  g_object_unref (m);   /* the timeline holds it */
  return m;
}

/* Joins, departures and leader changes, newest first, each at its step. */
static void
test_timeline (void)
{
  g_autoptr(RlxTimeline) t = rlx_timeline_new ();
  RlxCohortPanel *panel = RLX_COHORT_PANEL (g_object_ref_sink (rlx_cohort_panel_new ()));
  GtkWidget *window = gtk_window_new ();
  RlxEvent *e;

  gtk_window_set_child (GTK_WINDOW (window), GTK_WIDGET (panel));
  gtk_window_present (GTK_WINDOW (window));
  rlx_cohort_panel_set_timeline (panel, t);
  g_assert_true (timeline_take (t, leader ("me", 1, 0)));
  g_assert_false (timeline_take (t, leader ("me", 1, 0)));   /* the same term: no change */
  e = member (RLX_EVENT_MEMBER_JOINED, "n2", NULL);
  e->u.member.step = 12;
  g_assert_true (timeline_take (t, e));
  e = member (RLX_EVENT_MEMBER_JOINED, "n3", NULL);
  e->u.member.step = 40;
  timeline_take (t, e);
  e = member (RLX_EVENT_MEMBER_LEFT, "me", "interrupted");
  e->u.member.step = 90;
  timeline_take (t, e);
  g_assert_true (timeline_take (t, leader ("n2", 2, 91)));
  e = rlx_event_new (RLX_EVENT_STEP);   /* routine: no mark */
  e->u.step.step = 92;
  g_assert_false (timeline_take (t, e));

  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (t)), ==, 5);
  g_assert_cmpint (rlx_timeline_mark_get_kind (mark_at (t, 0)), ==, RLX_MARK_LEADER);
  g_assert_cmpuint (rlx_timeline_mark_get_step (mark_at (t, 0)), ==, 91);
  g_assert_nonnull (strstr (rlx_timeline_mark_get_title (mark_at (t, 0)), "Term 2: n2 leads"));
  g_assert_cmpint (rlx_timeline_mark_get_kind (mark_at (t, 1)), ==, RLX_MARK_LEAVE);
  g_assert_nonnull (strstr (rlx_timeline_mark_get_title (mark_at (t, 1)), "this node left"));
  g_assert_cmpuint (rlx_timeline_mark_get_step (mark_at (t, 2)), ==, 40);
  g_assert_cmpint (rlx_timeline_mark_get_kind (mark_at (t, 3)), ==, RLX_MARK_JOIN);
  g_assert_nonnull (strstr (rlx_timeline_mark_get_title (mark_at (t, 3)), "n2 joined"));
  g_assert_nonnull (strstr (rlx_timeline_mark_get_title (mark_at (t, 4)), "Term 1: this node leads"));

  /* the cap keeps the newest */
  for (guint i = 0; i < RLX_TIMELINE_MAX; i++)
    timeline_take (t, leader (i % 2 ? "a" : "b", 10 + i, 100 + i));
  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (t)), ==, RLX_TIMELINE_MAX);
  g_assert_cmpuint (rlx_timeline_mark_get_step (mark_at (t, 0)), ==, 100 + RLX_TIMELINE_MAX - 1);
  rlx_timeline_clear (t);
  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (t)), ==, 0);
  gtk_window_destroy (GTK_WINDOW (window));
  g_object_unref (panel);
}

static RlxEvent *
step_agree (guint64 step, guint64 members, guint64 agree)
{
  RlxEvent *e = rlx_event_new (RLX_EVENT_STEP);

  e->u.step.step = step;
  e->u.step.members = members;
  e->u.step.has_agree = TRUE;
  e->u.step.agree = agree;
  return e;
}

/* "3 of 3 agree at step N"; a divergence turns the alarm on; every rank
 * agreeing again turns it off (the divergence still said). */
static void
test_hash_light (void)
{
  g_autoptr(RlxTimeline) t = rlx_timeline_new ();
  RlxCohortPanel *panel = RLX_COHORT_PANEL (g_object_ref_sink (rlx_cohort_panel_new ()));
  RlxEvent *e;

  rlx_cohort_panel_set_timeline (panel, t);
  g_assert_nonnull (strstr (rlx_cohort_panel_get_light_text (panel), "No step"));
  timeline_take (t, step_agree (7, 3, 3));
  rlx_cohort_panel_refresh (panel);
  g_assert_cmpstr (rlx_cohort_panel_get_light_text (panel), ==, "3 of 3 agree at step 7");
  g_assert_false (rlx_cohort_panel_get_alarm (panel));
  g_assert_false (gtk_widget_has_css_class (gtk_widget_get_first_child (GTK_WIDGET (panel)),
                                            "error"));

  e = rlx_event_new (RLX_EVENT_DIVERGED);
  e->u.diverged.node = g_strdup ("n2");
  e->u.diverged.step = 8;
  e->u.diverged.hash = 1;
  e->u.diverged.expected = 2;
  timeline_take (t, e);
  /* the alarm is notified: no refresh needed */
  g_assert_true (rlx_cohort_panel_get_alarm (panel));
  g_assert_cmpstr (rlx_cohort_panel_get_light_text (panel), ==, "n2 diverged at step 8");
  g_assert_true (gtk_widget_has_css_class (gtk_widget_get_first_child (GTK_WIDGET (panel)),
                                           "error"));
  /* the step of the divergence, and a later one short of a rank: still on */
  timeline_take (t, step_agree (8, 3, 2));
  timeline_take (t, step_agree (9, 3, 2));
  rlx_cohort_panel_refresh (panel);
  g_assert_true (rlx_cohort_panel_get_alarm (panel));
  /* all agree again (the member took a snapshot) */
  timeline_take (t, step_agree (10, 3, 3));
  rlx_cohort_panel_refresh (panel);
  g_assert_false (rlx_cohort_panel_get_alarm (panel));
  g_assert_cmpstr (rlx_cohort_panel_get_light_text (panel), ==,
                   "3 of 3 agree at step 10 (n2 diverged at step 8)");

  /* on a member: its own state against the leader's */
  rlx_timeline_clear (t);
  e = rlx_event_new (RLX_EVENT_STEP);
  e->u.step.step = 5;
  timeline_take (t, e);
  rlx_cohort_panel_refresh (panel);
  g_assert_cmpstr (rlx_cohort_panel_get_light_text (panel), ==, "Agrees with the leader at step 5");
  g_object_unref (panel);
}

static RlxEvent *
late (const char *node, guint64 step)
{
  RlxEvent *e = rlx_event_new (RLX_EVENT_LATE);

  e->u.node_step.node = g_strdup (node);
  e->u.node_step.step = step;
  return e;
}

/* Late and rejected gradients per rank, and the straggler mark while a
 * rank keeps missing the deadline. */
static void
test_stragglers (void)
{
  g_autoptr(RlxTimeline) t = rlx_timeline_new ();
  RlxCohortPanel *panel = RLX_COHORT_PANEL (g_object_ref_sink (rlx_cohort_panel_new ()));
  RlxEvent *e;

  rlx_cohort_panel_set_timeline (panel, t);
  g_assert_null (rlx_cohort_panel_get_ranks_text (panel));
  timeline_take (t, step_agree (10, 3, 3));
  timeline_take (t, late ("n3", 11));
  timeline_take (t, late ("n3", 12));
  timeline_take (t, late ("n2", 12));
  e = rlx_event_new (RLX_EVENT_REJECTED);
  e->u.rejected.node = g_strdup ("n2");
  e->u.rejected.has_step = TRUE;
  e->u.rejected.step = 13;
  timeline_take (t, e);
  /* a member told it was rejected, and a signalling message: not counted */
  e = rlx_event_new (RLX_EVENT_REJECTED);
  e->u.rejected.node = g_strdup ("me");
  e->u.rejected.has_step = TRUE;
  e->u.rejected.by = g_strdup ("n1");
  timeline_take (t, e);
  e = rlx_event_new (RLX_EVENT_REJECTED);
  e->u.rejected.node = g_strdup ("n4");
  timeline_take (t, e);
  timeline_take (t, step_agree (14, 3, 3));
  rlx_cohort_panel_refresh (panel);
  g_assert_cmpstr (rlx_cohort_panel_get_ranks_text (panel), ==,
                   "n2: 1 late, 1 rejected, holds rounds up; n3: 2 late, 0 rejected, holds rounds up");
  /* n3 keeps missing, n2 no more: only n3 is still a straggler */
  timeline_take (t, late ("n3", 60));
  timeline_take (t, step_agree (12 + RLX_STRAGGLER_STEPS + 1, 3, 3));
  rlx_cohort_panel_refresh (panel);
  g_assert_cmpstr (rlx_cohort_panel_get_ranks_text (panel), ==,
                   "n2: 1 late, 1 rejected; n3: 3 late, 0 rejected, holds rounds up");
  /* a rank that left is no longer listed */
  timeline_take (t, member (RLX_EVENT_MEMBER_LEFT, "n3", "interrupted"));
  rlx_cohort_panel_refresh (panel);
  g_assert_cmpstr (rlx_cohort_panel_get_ranks_text (panel), ==, "n2: 1 late, 1 rejected");
  rlx_timeline_clear (t);
  rlx_cohort_panel_refresh (panel);
  g_assert_null (rlx_cohort_panel_get_ranks_text (panel));
  g_object_unref (panel);
}

/* A sparkline per rank of the roster, one value a sample; a rank that
 * leaves loses its line; a line keeps the last minute. */
static void
test_sparklines (void)
{
  g_autoptr(RlxRoster) roster = rlx_roster_new ();
  RlxCohortPanel *panel = RLX_COHORT_PANEL (g_object_ref_sink (rlx_cohort_panel_new ()));
  RlxRosterRow rows[2] = {
    { .node_id = "a", .host = "h", .backend = "cpu", .state = "computing", .speed = 1000 },
    { .node_id = "b", .host = "h", .backend = "cpu", .state = "computing", .speed = 3000 },
  };
  GtkWidget *la, *lb;

  rlx_roster_sync (roster, rows, 2);
  rlx_cohort_panel_set_roster (panel, G_LIST_MODEL (roster));
  rlx_roster_set_speed (roster, "a", 1500);
  rlx_cohort_panel_sample (panel);
  la = rlx_cohort_panel_get_sparkline (panel, "a");
  lb = rlx_cohort_panel_get_sparkline (panel, "b");
  g_assert_nonnull (la);
  g_assert_nonnull (lb);
  g_assert_cmpuint (rlx_sparkline_get_n (RLX_SPARKLINE (la)), ==, 2);
  g_assert_cmpfloat (rlx_sparkline_get (RLX_SPARKLINE (la), 0), ==, 1000);
  g_assert_cmpfloat (rlx_sparkline_get (RLX_SPARKLINE (la), 1), ==, 1500);
  g_assert_cmpfloat (rlx_sparkline_get (RLX_SPARKLINE (lb), 1), ==, 3000);

  /* b leaves */
  rlx_roster_sync (roster, rows, 1);
  rlx_cohort_panel_sample (panel);
  g_assert_null (rlx_cohort_panel_get_sparkline (panel, "b"));
  g_assert_true (rlx_cohort_panel_get_sparkline (panel, "a") == la);

  /* the last minute */
  for (guint i = 0; i < RLX_SPARKLINE_MAX + 5; i++)
    {
      rlx_roster_set_speed (roster, "a", 100 + i);
      rlx_cohort_panel_sample (panel);
    }
  g_assert_cmpuint (rlx_sparkline_get_n (RLX_SPARKLINE (la)), ==, RLX_SPARKLINE_MAX);
  g_assert_cmpfloat (rlx_sparkline_get (RLX_SPARKLINE (la), RLX_SPARKLINE_MAX - 1), ==,
                     100 + RLX_SPARKLINE_MAX + 4);
  g_assert_cmpfloat (rlx_sparkline_get (RLX_SPARKLINE (la), 0), ==, 105);
  rlx_cohort_panel_set_roster (panel, NULL);
  g_assert_null (rlx_cohort_panel_get_sparkline (panel, "a"));
  g_object_unref (panel);
}

int
main (int argc, char **argv)
{
  int status;

  node_test_init ();
  gtk_test_init (&argc, &argv, NULL);
  adw_init ();
  g_test_add_func ("/app/dashboard/events-view", test_events_view);
  g_test_add_func ("/app/dashboard/accuracy-row", test_accuracy_row);
  g_test_add_func ("/app/dashboard/newest-visible", test_newest_visible);
  g_test_add_func ("/app/dashboard/timeline", test_timeline);
  g_test_add_func ("/app/dashboard/hash-light", test_hash_light);
  g_test_add_func ("/app/dashboard/stragglers", test_stragglers);
  g_test_add_func ("/app/dashboard/sparklines", test_sparklines);
  status = g_test_run ();
  node_test_cleanup ();
  return status;
}
