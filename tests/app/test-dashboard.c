/* test-dashboard.c — the cohort dashboard's widgets fed the core's typed
 * events (core/event/rlx-event.h), as a node thread hands them over: the
 * events page (newest first, its filter, the one evaluation row), the
 * membership and leader timeline, the hash light, the progress (steps/s,
 * epoch, time left), the checkpoint, each link's path, each rank's
 * compute and wait, and the window at
 * 800×600 with its roster's rows in sight.
 */
#include "rlx-config.h"
#include "node-test-utils.h"
#include "rlx-events-view.h"
#include "rlx-cohort-panel.h"
#include "rlx-progress.h"
#include "rlx-roster-view.h"
#include "rlx-window.h"
#include "rlx-sparkline.h"
#include "rlx-sync-panel.h"
#include "rlx-figure.h"
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

typedef struct {
  guint painted;   /* frames painted since the wait began */
} Frames;

static void
on_after_paint (GdkFrameClock *clock, Frames *f)
{
  /* one more frame, even if nothing else asks for it */
  if (++f->painted < 2)
    gdk_frame_clock_request_phase (clock, GDK_FRAME_CLOCK_PHASE_PAINT);
}

static gboolean
two_frames_painted (gpointer data)
{
  return ((Frames *) data)->painted >= 2;
}

/* Wait until @widget's window laid out and painted two frames from now:
 * whatever was changed before is allocated then (layout runs before paint
 * in a frame; the second frame covers a change queued during the first).
 * Under load a frame can take far longer than a fixed sleep allowed. */
static void
wait_frames (GtkWidget *widget)
{
  GdkFrameClock *clock = gtk_widget_get_frame_clock (widget);
  Frames f = { 0 };
  gulong id;

  g_assert_nonnull (clock);
  id = g_signal_connect (clock, "after-paint", G_CALLBACK (on_after_paint), &f);
  gdk_frame_clock_request_phase (clock, GDK_FRAME_CLOCK_PHASE_PAINT);
  g_assert_true (node_test_wait (two_frames_painted, &f, 30000));
  g_signal_handler_disconnect (clock, id);
}

static gboolean
scrollable (gpointer data)
{
  GtkAdjustment *adj = data;

  return gtk_adjustment_get_upper (adj) > gtk_adjustment_get_page_size (adj);
}

/* The newest stays in sight: a list at its top stays at its top as events
 * come in (GtkListView alone keeps the row it showed and the newest scroll
 * away above it); one scrolled down by its reader stays where it is. Every
 * wait is for frames laid out, not for time. */
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
  /* mapped and laid out: 40 rows are more than 300 px */
  g_assert_true (node_test_wait (scrollable, adj, 30000));
  wait_frames (window);
  g_assert_cmpfloat (gtk_adjustment_get_value (adj), <, 1);
  for (guint i = 0; i < 5; i++)
    {
      rlx_event_log_add (log, RLX_LOG_INFO, FALSE, "late", NULL);
      wait_frames (window);
      g_assert_cmpfloat (gtk_adjustment_get_value (adj), <, 1);
    }

  /* a reader further down */
  gtk_adjustment_set_value (adj, 200);
  wait_frames (window);
  g_assert_cmpfloat (gtk_adjustment_get_value (adj), >=, 150);
  rlx_event_log_add (log, RLX_LOG_INFO, FALSE, "later", NULL);
  wait_frames (window);
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


static RlxEvent *
joined_at (guint64 train, guint64 epoch, guint64 pos, guint64 steps)
{
  RlxEvent *e = rlx_event_new (RLX_EVENT_JOINED);

  e->u.joined.node = g_strdup ("me");
  e->u.joined.has_data = TRUE;
  e->u.joined.train = train;
  e->u.joined.epoch = epoch;
  e->u.joined.pos = pos;
  e->u.joined.steps = steps;
  return e;
}

static void
progress_take (RlxProgress *p, RlxEvent *e, gint64 now)
{
  rlx_progress_add_event (p, e, "me", now);
  rlx_event_unref (e);
}

static RlxEvent *
step_at (guint64 step, guint64 samples, gint64 time_us)
{
  RlxEvent *e = rlx_event_new (RLX_EVENT_STEP);

  e->u.step.step = step;
  e->u.step.samples = samples;
  e->u.step.time_us = time_us;
  return e;
}

#define T0 ((gint64) 1000 * G_USEC_PER_SEC)

/* Steps/s and samples/s from the steps' commit times, the epoch from
 * "joined" and the samples since, the time left to the epoch's end or to
 * the run's last step. */
static void
test_progress (void)
{
  g_autoptr(RlxProgress) p = rlx_progress_new ();
  RlxCohortPanel *panel = RLX_COHORT_PANEL (g_object_ref_sink (rlx_cohort_panel_new ()));
  g_autofree char *text = NULL, *text2 = NULL, *text3 = NULL;

  rlx_cohort_panel_set_progress (panel, p);
  g_assert_null (rlx_progress_dup_text (p));
  g_assert_null (rlx_cohort_panel_get_progress_text (panel));
  progress_take (p, joined_at (1000, 0, 100, 0), T0);
  /* 11 steps 100 ms apart, 50 samples each: 10 steps in 1 s */
  for (guint i = 0; i <= 10; i++)
    progress_take (p, step_at (1 + i, 50, T0 + i * G_USEC_PER_SEC / 10), T0);
  g_assert_cmpfloat_with_epsilon (rlx_progress_get_steps_per_s (p), 10, 1e-9);
  g_assert_cmpfloat_with_epsilon (rlx_progress_get_samples_per_s (p), 500, 1e-9);
  /* at 100 + 550 of 1000: 350 samples left at 500/s */
  g_assert_cmpfloat_with_epsilon (rlx_progress_get_seconds_left (p), 0.7, 1e-9);
  text = rlx_progress_dup_text (p);
  g_assert_cmpstr (text, ==, "10.0 steps/s · epoch 1, 65% · 1 s left in the epoch");
  rlx_cohort_panel_sample (panel);
  g_assert_cmpstr (rlx_cohort_panel_get_progress_text (panel), ==, text);

  /* into the next epoch: 8 steps more, 400 samples (650 + 400 = 1050) */
  for (guint i = 11; i <= 18; i++)
    progress_take (p, step_at (1 + i, 50, T0 + i * G_USEC_PER_SEC / 10), T0);
  text2 = rlx_progress_dup_text (p);
  g_assert_nonnull (strstr (text2, "epoch 2, 5%"));

  /* a run that ends at step 619: 600 steps at 10/s */
  progress_take (p, joined_at (1000, 1, 50, 619), T0);
  g_assert_cmpfloat_with_epsilon (rlx_progress_get_seconds_left (p), 60, 1e-9);
  text3 = rlx_progress_dup_text (p);
  g_assert_cmpstr (text3, ==, "10.0 steps/s · epoch 2, 5% · 1 min 0 s left (step 19 of 619)");

  /* the rate covers the last seconds only: 20 steps in the next 10 s */
  for (guint i = 1; i <= 20; i++)
    progress_take (p, step_at (19 + i, 50, T0 + G_USEC_PER_SEC * 18 / 10 + i * G_USEC_PER_SEC / 2), T0);
  g_assert_cmpfloat_with_epsilon (rlx_progress_get_steps_per_s (p), 2, 1e-9);

  rlx_progress_clear (p);
  g_assert_null (rlx_progress_dup_text (p));
  g_assert_cmpfloat (rlx_progress_get_seconds_left (p), ==, -1);
  rlx_cohort_panel_set_progress (panel, NULL);
  g_object_unref (panel);
}

/* The last checkpoint's step and age; a resume says so. */
static void
test_checkpoint_status (void)
{
  g_autoptr(RlxProgress) p = rlx_progress_new ();
  RlxCohortPanel *panel = RLX_COHORT_PANEL (g_object_ref_sink (rlx_cohort_panel_new ()));
  g_autofree char *none = NULL, *ago = NULL, *resumed = NULL;
  gint64 now = g_get_monotonic_time ();
  RlxEvent *e;

  g_assert_null (rlx_progress_dup_checkpoint_text (p, now));
  progress_take (p, step_at (1, 8, now), now);
  none = rlx_progress_dup_checkpoint_text (p, now);
  g_assert_cmpstr (none, ==, "No checkpoint yet");

  e = rlx_event_new (RLX_EVENT_CHECKPOINT);
  e->u.checkpoint.step = 400;
  e->u.checkpoint.path = g_strdup ("/tmp/x");
  progress_take (p, e, now - 12 * G_USEC_PER_SEC);
  ago = rlx_progress_dup_checkpoint_text (p, now + 65 * G_USEC_PER_SEC);
  g_assert_cmpstr (ago, ==, "Checkpoint at step 400, 1 min 17 s ago");
  rlx_cohort_panel_set_progress (panel, p);
  g_assert_nonnull (rlx_cohort_panel_get_checkpoint_text (panel));
  g_assert_cmpstr (rlx_cohort_panel_get_checkpoint_text (panel), ==,
                   "Checkpoint at step 400, 12 s ago");

  e = rlx_event_new (RLX_EVENT_RESUMED);
  e->u.resumed.step = 300;
  progress_take (p, e, now);
  resumed = rlx_progress_dup_checkpoint_text (p, now + 3 * G_USEC_PER_SEC);
  g_assert_cmpstr (resumed, ==, "Resumed from the checkpoint at step 300, 3 s ago");
  rlx_cohort_panel_set_progress (panel, NULL);
  g_assert_null (rlx_cohort_panel_get_checkpoint_text (panel));
  g_object_unref (panel);
}

static RlxEvent *
link_up (const char *node, const char *path)
{
  RlxEvent *e = rlx_event_new (RLX_EVENT_LINK_UP);

  e->u.link_up.node = g_strdup (node);
  e->u.link_up.path = g_strdup (path);
  return e;
}

/* Each link's path from its selected ICE pair (or the local bus on this
 * host) and its bytes at the rank's precision. */
static void
test_link_paths (void)
{
  g_autoptr(RlxProgress) p = rlx_progress_new ();
  g_autoptr(RlxRoster) roster = rlx_roster_new ();
  RlxCohortPanel *panel = RLX_COHORT_PANEL (g_object_ref_sink (rlx_cohort_panel_new ()));
  RlxRosterRow rows[] = {
    { .node_id = "me", .host = "h", .state = "computing", .precision = "f32", .is_self = TRUE },
    { .node_id = "n2", .host = "h2", .state = "computing", .precision = "int8",
      .bytes_tx = 600, .bytes_rx = 400 },
    { .node_id = "n3", .host = "h3", .state = "computing", .precision = "f8e4m3",
      .bytes_tx = 2000000 },
    { .node_id = "n4", .host = "h", .state = "computing", .precision = "f32", .bytes_rx = 3000 },
    { .node_id = "n5", .host = "h5", .state = "computing", .precision = "f32" },
  };
  g_autofree char *text = NULL, *after = NULL;
  RlxEvent *e;

  rlx_roster_sync (roster, rows, G_N_ELEMENTS (rows));
  progress_take (p, link_up ("n2", "host/srflx 10.0.0.2:5000"), 0);
  progress_take (p, link_up ("n3", "host/relay 192.0.2.7:3478"), 0);
  g_assert_cmpstr (rlx_progress_get_link_path (p, "n2"), ==, "direct QUIC");
  g_assert_cmpstr (rlx_progress_get_link_path (p, "n3"), ==, "TURN relay");
  g_assert_null (rlx_progress_get_link_path (p, "n4"));
  text = rlx_progress_dup_links_text (p, G_LIST_MODEL (roster));
  g_assert_cmpstr (text, ==, "n2: direct QUIC, 1.0\u00a0kB at int8; n3: TURN relay, 2.0\u00a0MB at f8 E4M3; "
                             "n4: local bus, 3.0\u00a0kB at f32");
  rlx_cohort_panel_set_progress (panel, p);
  rlx_cohort_panel_set_roster (panel, G_LIST_MODEL (roster));
  g_assert_cmpstr (rlx_cohort_panel_get_links_text (panel), ==, text);

  /* the link to n2 went down: no path of ours to it */
  e = rlx_event_new (RLX_EVENT_LINK_DOWN);
  e->u.link_lost.node = g_strdup ("n2");
  progress_take (p, e, 0);
  after = rlx_progress_dup_links_text (p, G_LIST_MODEL (roster));
  g_assert_null (strstr (after, "n2"));
  rlx_cohort_panel_set_roster (panel, NULL);
  rlx_cohort_panel_set_progress (panel, NULL);
  g_object_unref (panel);
}

static RlxEvent *
timing (const char *node, guint64 compute_us, guint64 round_us)
{
  RlxEvent *e = rlx_event_new (RLX_EVENT_TIMING);

  e->u.timing.node = g_strdup (node);
  e->u.timing.step = 50;
  e->u.timing.compute_us = compute_us;
  e->u.timing.round_us = round_us;
  return e;
}

/* Each rank's step split into compute and wait, from the leader's
 * "timing" events, beside its sparkline; the newest measure counts; a
 * rank that computes longer than the round (its own clock) waits 0. */
static void
test_compute_wait (void)
{
  g_autoptr(RlxProgress) p = rlx_progress_new ();
  g_autoptr(RlxRoster) roster = rlx_roster_new ();
  RlxCohortPanel *panel = RLX_COHORT_PANEL (g_object_ref_sink (rlx_cohort_panel_new ()));
  RlxRosterRow rows[] = {
    { .node_id = "a", .host = "h", .backend = "cpu", .state = "computing", .is_self = TRUE },
    { .node_id = "b", .host = "h", .backend = "cpu", .state = "computing" },
    { .node_id = "c", .host = "h", .backend = "cpu", .state = "computing" },
  };
  double compute = -1, wait = -1;

  rlx_roster_sync (roster, rows, G_N_ELEMENTS (rows));
  progress_take (p, timing ("a", 9000, 10000), 0);
  progress_take (p, timing ("a", 3000, 4000), 0);
  progress_take (p, timing ("b", 12500, 40000), 0);
  progress_take (p, timing ("c", 5000, 4000), 0);
  g_assert_true (rlx_progress_get_timing (p, "a", &compute, &wait));
  g_assert_cmpfloat_with_epsilon (compute, 3, 1e-9);
  g_assert_cmpfloat_with_epsilon (wait, 1, 1e-9);
  g_assert_false (rlx_progress_get_timing (p, "nobody", NULL, NULL));
  rlx_cohort_panel_set_progress (panel, p);
  rlx_cohort_panel_set_roster (panel, G_LIST_MODEL (roster));
  g_assert_cmpstr (rlx_cohort_panel_get_timing_text (panel, "a"), ==, "compute 3.0 ms, wait 1.0 ms");
  g_assert_cmpstr (rlx_cohort_panel_get_timing_text (panel, "b"), ==, "compute 12 ms, wait 28 ms");
  g_assert_cmpstr (rlx_cohort_panel_get_timing_text (panel, "c"), ==, "compute 4.0 ms, wait 0.0 ms");
  /* c leaves: its measure goes */
  progress_take (p, member (RLX_EVENT_MEMBER_LEFT, "c", "interrupted"), 0);
  g_assert_false (rlx_progress_get_timing (p, "c", NULL, NULL));
  rlx_cohort_panel_sample (panel);
  g_assert_null (rlx_cohort_panel_get_timing_text (panel, "c"));
  rlx_cohort_panel_set_roster (panel, NULL);
  rlx_cohort_panel_set_progress (panel, NULL);
  g_object_unref (panel);
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
allocated (gpointer widget)
{
  return gtk_widget_get_mapped (widget) && gtk_widget_get_height (widget) > 0;
}

/* Roster rows wholly in sight: the labels that name a rank ("n1"…) whose
 * bounds lie inside the roster's scrolled list. */
static guint
rows_in_sight (RlxWindow *window, RlxRosterView *roster, guint n)
{
  g_autoptr(GPtrArray) scrolled = g_ptr_array_new ();
  g_autoptr(GPtrArray) labels = g_ptr_array_new ();
  graphene_rect_t view, b;
  guint count = 0;

  find_descendants (GTK_WIDGET (roster), GTK_TYPE_SCROLLED_WINDOW, scrolled);
  g_assert_cmpuint (scrolled->len, >=, 1);
  g_assert_true (gtk_widget_compute_bounds (scrolled->pdata[0], GTK_WIDGET (window), &view));
  find_descendants (GTK_WIDGET (roster), GTK_TYPE_LABEL, labels);
  for (guint i = 0; i < labels->len; i++)
    {
      const char *t = gtk_label_get_label (labels->pdata[i]);
      if (t == NULL || t[0] != 'n' || strlen (t) > 3 || !gtk_widget_get_mapped (labels->pdata[i]))
        continue;
      if (!gtk_widget_compute_bounds (labels->pdata[i], GTK_WIDGET (window), &b))
        continue;
      if (b.origin.y >= view.origin.y - 0.5 &&
          b.origin.y + b.size.height <= view.origin.y + view.size.height + 0.5 &&
          b.origin.y + b.size.height <= gtk_widget_get_height (GTK_WIDGET (window)))
        count++;
    }
  return MIN (count, n);
}

/* At 800×600 and at the default size (1100×760), with six ranks training
 * (their sparklines, the progress, the links, a straggler's line, the sync
 * panel), the roster keeps several rows in sight: three and five (before:
 * one or two, and two). */
static void
check_rows_at (int width, int height, guint want)
{
  RlxWindow *window = rlx_window_new (NULL, "rows-test");
  g_autoptr(RlxRoster) roster = rlx_roster_new ();
  g_autoptr(GPtrArray) stacks = g_ptr_array_new ();
  g_autoptr(GPtrArray) panels = g_ptr_array_new ();
  g_autoptr(GPtrArray) views = g_ptr_array_new ();
  g_autoptr(GPtrArray) syncs = g_ptr_array_new ();
  g_autoptr(RlxProgress) p = rlx_progress_new ();
  g_autoptr(RlxTimeline) t = rlx_timeline_new ();
  RlxRosterRow rows[6];
  char ids[6][4];
  RlxCohortPanel *panel;
  RlxRosterView *view;
  guint seen;

  for (guint i = 0; i < 6; i++)
    {
      g_snprintf (ids[i], sizeof ids[i], "n%u", i + 1);
      rows[i] = (RlxRosterRow) { .node_id = ids[i], .host = i < 3 ? "h" : "far", .backend = "cpu",
                                 .device = "OpenBLAS", .state = "computing", .precision = "f32",
                                 .speed = 1000 * (i + 1), .is_self = i == 0, .is_leader = i == 0 };
    }
  rlx_roster_sync (roster, rows, 6);
  find_descendants (GTK_WIDGET (window), GTK_TYPE_STACK, stacks);
  for (guint i = 0; i < stacks->len; i++)
    if (gtk_stack_get_child_by_name (stacks->pdata[i], "cohort"))
      gtk_stack_set_visible_child_name (stacks->pdata[i], "cohort");
  find_descendants (GTK_WIDGET (window), RLX_TYPE_COHORT_PANEL, panels);
  find_descendants (GTK_WIDGET (window), RLX_TYPE_ROSTER_VIEW, views);
  find_descendants (GTK_WIDGET (window), RLX_TYPE_SYNC_PANEL, syncs);
  g_assert_cmpuint (syncs->len, ==, 1);
  {
    /* the sync panel shows, as it does once a node runs */
    g_autoptr(RlxEvent) e = rlx_event_new (RLX_EVENT_SYNC);
    e->u.sync.mode = g_strdup ("step");
    e->u.sync.h = 1;
    e->u.sync.requested = g_strdup ("auto");
    e->u.sync.reason = g_strdup ("every link is local");
    rlx_sync_panel_add_event (syncs->pdata[0], e, T0);
  }
  g_assert_cmpuint (panels->len, ==, 1);
  g_assert_cmpuint (views->len, ==, 1);
  panel = panels->pdata[0];
  view = views->pdata[0];
  rlx_roster_view_set_model (view, G_LIST_MODEL (roster));
  rlx_cohort_panel_set_roster (panel, G_LIST_MODEL (roster));
  rlx_cohort_panel_set_timeline (panel, t);
  rlx_cohort_panel_set_progress (panel, p);
  progress_take (p, joined_at (60000, 0, 0, 0), T0);
  progress_take (p, step_at (1, 96, T0), T0);
  progress_take (p, step_at (20, 96, T0 + G_USEC_PER_SEC), T0);
  progress_take (p, link_up ("n4", "host/host 10.0.0.4:1"), T0);
  timeline_take (t, late ("n3", 19));
  timeline_take (t, step_agree (20, 6, 6));
  rlx_cohort_panel_refresh (panel);
  rlx_cohort_panel_sample (panel);

  gtk_window_set_default_size (GTK_WINDOW (window), width, height);
  gtk_window_present (GTK_WINDOW (window));
  g_assert_true (node_test_wait (allocated, view, 30000));
  wait_frames (GTK_WIDGET (window));   /* allocated, rows made */
  g_assert_cmpint (gtk_widget_get_height (GTK_WIDGET (window)), <=, height);
  g_assert_nonnull (rlx_cohort_panel_get_progress_text (panel));
  seen = rows_in_sight (window, view, 6);
  g_test_message ("%d×%d: %u roster rows in sight", width, height, seen);
  g_assert_cmpuint (seen, >=, want);
  rlx_cohort_panel_set_progress (panel, NULL);
  gtk_window_destroy (GTK_WINDOW (window));
}

static void
test_rows_800x600 (void)
{
  check_rows_at (800, 600, 3);
}

static void
test_rows_default (void)
{
  check_rows_at (1100, 760, 5);
}

/* ── figures ───────────────────────────────────────────────────────────── */

static void
on_layout (GdkSurface *surface, int width, int height, guint *count)
{
  (*count)++;
}

static gboolean
is_positive (gpointer data)
{
  return *(guint *) data > 0;
}

static gboolean
not_yet (gpointer data)
{
  return FALSE;
}

/* A figure's new text redraws it without a relayout of the window (a
 * label's costs one: GTK 4 takes every resize up to the window, and X11's
 * toplevel asks the server for the work area); the probe is the surface's
 * layout signal, which a label's change does fire. */
static void
test_figure_no_relayout (void)
{
  GtkWidget *window = gtk_window_new ();
  GtkWidget *box = gtk_box_new (GTK_ORIENTATION_VERTICAL, 6);
  GtkWidget *figure = rlx_figure_new (8, 30, 0);
  GtkWidget *label = gtk_label_new ("a label");
  guint layouts = 0;
  gulong id;

  gtk_box_append (GTK_BOX (box), figure);
  gtk_box_append (GTK_BOX (box), label);
  gtk_window_set_child (GTK_WINDOW (window), box);
  gtk_window_present (GTK_WINDOW (window));
  id = g_signal_connect (gtk_native_get_surface (GTK_NATIVE (window)), "layout",
                         G_CALLBACK (on_layout), &layouts);
  g_assert_true (node_test_wait (is_positive, &layouts, 20000));   /* shown, laid out */
  node_test_wait (not_yet, NULL, 300);

  layouts = 0;
  for (guint i = 0; i < 5; i++)
    {
      g_autofree char *text = g_strdup_printf ("step %u · loss 0.%04u", 1000 + i, 4321 + i);
      rlx_figure_set_text (GTK_INSCRIPTION (figure), text);
      g_assert_cmpstr (gtk_inscription_get_text (GTK_INSCRIPTION (figure)), ==, text);
      node_test_wait (not_yet, NULL, 100);
    }
  g_assert_cmpuint (layouts, ==, 0);

  /* the probe sees a label's change */
  gtk_label_set_label (GTK_LABEL (label), "a label, longer now");
  g_assert_true (node_test_wait (is_positive, &layouts, 20000));

  /* no text, and the same text again, are fine */
  rlx_figure_set_text (GTK_INSCRIPTION (figure), NULL);
  g_assert_null (gtk_inscription_get_text (GTK_INSCRIPTION (figure)));
  g_signal_handler_disconnect (gtk_native_get_surface (GTK_NATIVE (window)), id);
  gtk_window_destroy (GTK_WINDOW (window));
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
  g_test_add_func ("/app/dashboard/figure-no-relayout", test_figure_no_relayout);
  g_test_add_func ("/app/dashboard/timeline", test_timeline);
  g_test_add_func ("/app/dashboard/hash-light", test_hash_light);
  g_test_add_func ("/app/dashboard/stragglers", test_stragglers);
  g_test_add_func ("/app/dashboard/sparklines", test_sparklines);
  g_test_add_func ("/app/dashboard/progress", test_progress);
  g_test_add_func ("/app/dashboard/checkpoint", test_checkpoint_status);
  g_test_add_func ("/app/dashboard/link-paths", test_link_paths);
  g_test_add_func ("/app/dashboard/compute-wait", test_compute_wait);
  g_test_add_func ("/app/dashboard/rows-800x600", test_rows_800x600);
  g_test_add_func ("/app/dashboard/rows-default", test_rows_default);
  status = g_test_run ();
  node_test_cleanup ();
  return status;
}
