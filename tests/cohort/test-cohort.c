/* test-cohort.c — the elastic cohort with real processes and real sockets
 *
 * Each case starts `rlx-rank join --local --json` processes in a private
 * XDG_RUNTIME_DIR / XDG_DATA_HOME and checks what they print. The synthetic
 * dataset, mnist-mlp and small batches keep every case to a few seconds on
 * two cores; every wait has a timeout.
 */
#include "rlx-config.h"
#include "cohort-harness.h"
#include "core/vision/rlx-model.h"
#include "core/rlx-coordinator.h"

#include <math.h>
#include <signal.h>
#include <string.h>

#define LONG_RUN "100000"
/* Where a test counts contributors exactly, a loaded CI machine must not turn
 * a slow gradient into a late one: a generous collect deadline. */
#define SLOW_OK "5000"

/* Three processes form one cohort and train; every node reports the same
 * hash at every step — with a different wire precision on each node (mixed
 * precisions interoperate). */
static void
test_three_nodes_same_hash (void)
{
  Harness *h = harness_new ();
  Node *n[3];
  GHashTable *hashes[3] = { NULL };
  static const char *const precision[3] = { "f32", "f16", "f8e4m3" };

  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *label = g_strdup_printf ("node%u-%s", i, precision[i]);
      n[i] = harness_join (h, label, "--cohort", "three", "--batch", "8", "--steps", "25",
                           "--wait-members", "3", "--precision", precision[i],
                           "--deadline-floor-ms", SLOW_OK, NULL);
    }
  for (guint i = 0; i < 3; i++)
    harness_assert_exit_ok (h, n[i], 60000);
  for (guint i = 0; i < 3; i++)
    hashes[i] = node_step_hashes (n[i]);

  for (gint64 s = 1; s <= 25; s++)
    {
      const char *ref = g_hash_table_lookup (hashes[0], &s);
      int e = node_step (n[0], s);
      if (ref == NULL)
        {
          harness_dump (h);
          g_error ("node0 did not report step %" G_GINT64_FORMAT, s);
        }
      for (guint i = 1; i < 3; i++)
        {
          const char *hi = g_hash_table_lookup (hashes[i], &s);
          if (g_strcmp0 (hi, ref) != 0)
            {
              harness_dump (h);
              g_error ("step %" G_GINT64_FORMAT ": node%u hash %s, node0 %s", s, i, hi, ref);
            }
        }
      g_assert_cmpint (ev_int (node_ev (n[0], e), "members"), ==, 3);
      g_assert_cmpint (ev_int (node_ev (n[0], e), "contributors"), ==, 3);
      g_assert_cmpint (ev_int (node_ev (n[0], e), "samples"), ==, 24);
      g_assert_true (isfinite (ev_num (node_ev (n[0], e), "loss")));
      g_assert_cmpint (ev_int (node_ev (n[0], e), "bytes_tx"), >, 0);
    }
  /* The f8 node's traffic is smaller than it would be at f32. */
  {
    JsonObject *last = node_ev (n[2], node_step (n[2], 25));
    g_assert_cmpint (ev_int (last, "bytes_f32"), >, ev_int (last, "bytes_tx") + ev_int (last, "bytes_rx"));
  }
  /* Training: the loss falls. */
  g_assert_cmpfloat (ev_num (node_ev (n[0], node_step (n[0], 25)), "loss"), <,
                     ev_num (node_ev (n[0], node_step (n[0], 1)), "loss"));
  for (guint i = 0; i < 3; i++)
    g_hash_table_unref (hashes[i]);
  harness_free (h);
}

/* RLX_BUSY_POLL=1 on two CPU ranks (the switch that a GPU host turns on by
 * itself): they train to the same hashes, and each says in its "done"
 * event that it polled. RLX_TRACE writes each process's timeline, and the
 * two line up: for every round, the leader sends the step frame before the
 * member receives it, the member computes after that and sends its bucket,
 * and the leader receives that bucket after it was sent and adds it before
 * its finish. Without the switch (auto, on the CPU) nobody polls. */
static void
test_busy_poll_and_trace (void)
{
  Harness *h = harness_new ();
  g_autofree char *dir = g_build_filename (h->dir, "trace", NULL);
  g_autoptr(GDir) d = NULL;
  GHashTable *tr[2] = { NULL };
  Node *n[2], *q[2], *leader, *member;
  const char *name;
  guint k = 0;

  g_assert_cmpint (g_mkdir_with_parents (dir, 0700), ==, 0);
  harness_setenv (h, "RLX_BUSY_POLL", "1");
  harness_setenv (h, "RLX_TRACE", dir);
  n[0] = harness_join (h, "a", "--cohort", "busy", "--batch", "8", "--steps", "30",
                       "--wait-members", "2", "--deadline-floor-ms", SLOW_OK, NULL);
  /* b (which waits for no members) only once a has formed the cohort:
   * started together, b could get there first under load, train alone and
   * leave a to join late (no trace of the first rounds) or never */
  harness_wait_event (h, n[0], "joined", NULL, 0, 60000);
  n[1] = harness_join (h, "b", "--cohort", "busy", "--batch", "8", "--steps", "30",
                       "--deadline-floor-ms", SLOW_OK, NULL);
  for (guint i = 0; i < 2; i++)
    harness_assert_exit_ok (h, n[i], 60000);
  for (guint i = 0; i < 2; i++)
    {
      JsonObject *done = node_ev (n[i], harness_wait_event (h, n[i], "done", NULL, 0, 1000));
      g_assert_true (json_object_get_boolean_member (done, "busy_poll"));
      g_assert_cmpstr (ev_str (done, "hash"), ==,
                       ev_str (node_ev (n[0], node_find_event (n[0], "done", 0)), "hash"));
    }
  leader = harness_leader (h, n, 2);
  member = leader == n[0] ? n[1] : n[0];

  /* one trace file per process */
  d = g_dir_open (dir, 0, NULL);
  g_assert_nonnull (d);
  while ((name = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *path = g_build_filename (dir, name, NULL);
      GHashTable *t = harness_read_trace (path);
      g_assert_cmpuint (k, <, 2);
      tr[k++] = t;
    }
  g_assert_cmpuint (k, ==, 2);
  {
    GHashTable *lt = g_hash_table_contains (tr[0], "L.finish 10") ? tr[0] : tr[1];
    GHashTable *mt = lt == tr[0] ? tr[1] : tr[0];

    g_assert_true (g_hash_table_contains (lt, "L.finish 10"));
    for (gint64 s = 5; s < 29; s++)
      {
        g_assert_cmpint (harness_trace_at (lt, "L.finish", s), <, harness_trace_at (lt, "L.finish.end", s));
        g_assert_cmpint (harness_trace_at (lt, "L.finish.end", s), <, harness_trace_at (lt, "L.send", s));
        g_assert_cmpint (harness_trace_at (lt, "L.send", s), <, harness_trace_at (lt, "L.sent", s));
        /* across processes, from before the hand-off to the link (L.send,
         * M.send): the peer can receive a frame before the sender's thread
         * gets to its "sent" mark (seen under AddressSanitizer, 5 ms) */
        g_assert_cmpint (harness_trace_at (lt, "L.send", s), <, harness_trace_at (mt, "M.rx", s + 1));
        g_assert_cmpint (harness_trace_at (mt, "M.rx", s + 1), <, harness_trace_at (mt, "M.run", s + 1));
        g_assert_cmpint (harness_trace_at (mt, "M.run", s + 1), <, harness_trace_at (mt, "M.run.end", s + 1));
        g_assert_cmpint (harness_trace_at (mt, "M.run.end", s + 1), <, harness_trace_at (mt, "M.send", s + 1));
        g_assert_cmpint (harness_trace_at (mt, "M.send", s + 1), <, harness_trace_at (mt, "M.sent", s + 1));
        g_assert_cmpint (harness_trace_at (mt, "M.send", s + 1), <, harness_trace_at (lt, "L.rx", s + 1));
        g_assert_cmpint (harness_trace_at (lt, "L.rx", s + 1), <, harness_trace_at (lt, "L.add", s + 1));
        g_assert_cmpint (harness_trace_at (lt, "L.add.end", s + 1), <, harness_trace_at (lt, "L.finish", s + 1));
      }
  }
  (void) member;
  for (guint i = 0; i < 2; i++)
    g_hash_table_unref (tr[i]);

  /* auto, on the CPU: nobody polls */
  harness_setenv (h, "RLX_BUSY_POLL", NULL);
  harness_setenv (h, "RLX_TRACE", NULL);
  q[0] = harness_join (h, "c", "--cohort", "quiet", "--batch", "8", "--steps", "5",
                       "--wait-members", "2", NULL);
  /* (d once c leads: d alone would train its 5 steps and leave c waiting) */
  harness_wait_event (h, q[0], "joined", NULL, 0, 60000);
  q[1] = harness_join (h, "d", "--cohort", "quiet", "--batch", "8", "--steps", "5", NULL);
  for (guint i = 0; i < 2; i++)
    {
      harness_assert_exit_ok (h, q[i], 60000);
      g_assert_false (json_object_get_boolean_member (
          node_ev (q[i], harness_wait_event (h, q[i], "done", NULL, 0, 1000)), "busy_poll"));
    }
  harness_free (h);
}

/* At f32, two ranks at batch 32 follow the loss trajectory of one rank at
 * batch 64 (relative difference <= 1e-4 per step over 20 steps). */
static void
test_equivalence (void)
{
  Harness *h = harness_new ();
  Node *a0 = harness_join (h, "pair0", "--cohort", "pair", "--batch", "32", "--steps", "20",
                           "--wait-members", "2", "--precision", "f32",
                           "--deadline-floor-ms", SLOW_OK, NULL);
  Node *a1 = harness_join (h, "pair1", "--cohort", "pair", "--batch", "32", "--steps", "20",
                           "--wait-members", "2", "--precision", "f32",
                           "--deadline-floor-ms", SLOW_OK, NULL);
  Node *b = harness_join (h, "solo", "--cohort", "solo", "--batch", "64", "--steps", "20",
                          "--precision", "f32", "--deadline-floor-ms", SLOW_OK, NULL);
  double worst = 0;

  harness_assert_exit_ok (h, a0, 60000);
  harness_assert_exit_ok (h, a1, 60000);
  harness_assert_exit_ok (h, b, 60000);

  for (gint64 s = 1; s <= 20; s++)
    {
      int ia = node_step (a0, s), ib = node_step (b, s);
      double la, lb, rel;

      g_assert_cmpint (ia, >=, 0);
      g_assert_cmpint (ib, >=, 0);
      g_assert_cmpint (ev_int (node_ev (a0, ia), "samples"), ==, 64);
      g_assert_cmpint (ev_int (node_ev (a0, ia), "contributors"), ==, 2);
      g_assert_cmpint (ev_int (node_ev (b, ib), "samples"), ==, 64);
      la = ev_num (node_ev (a0, ia), "loss");
      lb = ev_num (node_ev (b, ib), "loss");
      rel = fabs (la - lb) / fabs (lb);
      worst = MAX (worst, rel);
      if (rel > 1e-4)
        {
          harness_dump (h);
          g_error ("step %" G_GINT64_FORMAT ": 2x32 loss %.9g, 1x64 loss %.9g (relative %.3g)",
                   s, la, lb, rel);
        }
    }
  g_test_message ("worst relative loss difference over 20 steps: %.3g", worst);
  harness_free (h);
}

/* The wire precision is the wire's: a rank alone, with nobody to send its
 * updates to, applies them unquantised, so one at f8e4m3 follows one at f32
 * bit for bit (its hash at every step) and sends nothing. */
static void
test_lone_precision (void)
{
  Harness *h = harness_new ();
  Node *f8 = harness_join (h, "solo-f8", "--cohort", "solo-f8", "--batch", "16", "--steps", "15",
                           "--precision", "f8e4m3", NULL);
  Node *f32 = harness_join (h, "solo-f32", "--cohort", "solo-f32", "--batch", "16", "--steps",
                            "15", "--precision", "f32", NULL);
  g_autoptr(GHashTable) h8 = NULL, h32 = NULL;

  harness_assert_exit_ok (h, f8, 60000);
  harness_assert_exit_ok (h, f32, 60000);
  h8 = node_step_hashes (f8);
  h32 = node_step_hashes (f32);
  for (gint64 s = 1; s <= 15; s++)
    {
      const char *a = g_hash_table_lookup (h8, &s), *b = g_hash_table_lookup (h32, &s);

      if (a == NULL || g_strcmp0 (a, b) != 0)
        {
          harness_dump (h);
          g_error ("step %" G_GINT64_FORMAT ": alone at f8e4m3 hash %s, at f32 %s", s, a, b);
        }
    }
  g_assert_cmpint (ev_int (node_ev (f8, node_step (f8, 15)), "bytes_tx"), ==, 0);
  harness_free (h);
}

/* A node joining at step 10 contributes from its next step, with the
 * cohort's hash. */
static void
test_join_late (void)
{
  Harness *h = harness_new ();
  Node *a = harness_join (h, "a", "--cohort", "late", "--batch", "8", "--steps", LONG_RUN,
                          "--wait-members", "2", "--deadline-floor-ms", SLOW_OK, NULL);
  Node *b, *c;
  g_autoptr(GHashTable) ha = NULL;
  int snap, checked = 0;
  gint64 k, last;

  /* b once a leads (b does not wait for members: first, it would train alone). */
  harness_wait_event (h, a, "joined", NULL, 0, 30000);
  b = harness_join (h, "b", "--cohort", "late", "--batch", "8", "--steps", LONG_RUN, NULL);
  harness_wait_event (h, a, "step", "step", 10, 30000);
  c = harness_join (h, "c", "--cohort", "late", "--batch", "8", "--steps", LONG_RUN, NULL);
  snap = harness_wait_event (h, c, "snapshot", NULL, 0, 30000);
  k = ev_int (node_ev (c, snap), "step");
  g_assert_cmpint (k, >=, 10);
  /* Its first contributions, and a few more. */
  harness_wait_event (h, c, "step", "step", k + 8, 30000);

  node_kill (a, SIGTERM);
  node_kill (b, SIGTERM);
  node_kill (c, SIGTERM);
  harness_assert_exit_ok (h, a, 20000);
  harness_assert_exit_ok (h, b, 20000);
  harness_assert_exit_ok (h, c, 20000);

  ha = node_step_hashes (a);
  last = node_max_step (c);
  for (gint64 s = k + 1; s <= last; s++)
    {
      int ic = node_step (c, s);
      const char *ref = g_hash_table_lookup (ha, &s);
      if (ic < 0 || ref == NULL)
        continue;   /* a node may stop a step earlier than another */
      if (g_strcmp0 (ref, ev_str (node_ev (c, ic), "hash")) != 0)
        {
          harness_dump (h);
          g_error ("step %" G_GINT64_FORMAT ": late joiner's hash differs", s);
        }
      /* The step being computed while the snapshot travelled is the
       * cohort's; from the next one the joiner contributes. */
      if (s >= k + 2 && ev_int (node_ev (c, ic), "contributed") != 1)
        {
          harness_dump (h);
          g_error ("step %" G_GINT64_FORMAT ": the joiner (snapshot at %" G_GINT64_FORMAT
                   ") did not contribute", s, k);
        }
      checked++;
    }
  g_assert_cmpint (checked, >=, 6);
  g_assert_cmpint (node_step (c, k + 1), >=, 0);
  harness_free (h);
}

/* The leader's "timing" events of @id, from event @from: the index of the
 * next, or -1. */
static int
timing_of (Node *n, const char *id, guint from)
{
  for (guint i = from; i < n->events->len; i++)
    {
      JsonObject *o = n->events->pdata[i];
      if (g_strcmp0 (ev_str (o, "event"), "timing") == 0 && g_strcmp0 (ev_str (o, "node"), id) == 0)
        return (int) i;
    }
  return -1;
}

typedef struct { Node *leader; const char *ids[2]; } TimingWait;

static gboolean
both_timed (gpointer data)
{
  TimingWait *w = data;
  return timing_of (w->leader, w->ids[0], 0) >= 0 && timing_of (w->leader, w->ids[1], 0) >= 0;
}

/* The leader splits each rank's step into compute and wait ("timing",
 * about once a second): one for itself and one for the member, each with
 * a compute time and the round's; the member reports none (it does not
 * measure the others). */
static void
test_timing (void)
{
  Harness *h = harness_new ();
  Node *n[2], *leader, *member;
  TimingWait w;
  gboolean leading = FALSE;

  for (guint k = 0; k < 2; k++)
    n[k] = harness_join (h, k ? "b" : "a", "--cohort", "timing", "--batch", "8", "--steps",
                         LONG_RUN, "--wait-members", "2", "--deadline-floor-ms", SLOW_OK, NULL);
  harness_wait_event (h, n[0], "step", "step", 1, 30000);
  harness_wait_event (h, n[1], "step", "step", 1, 30000);
  leader = harness_leader (h, n, 2);
  member = leader == n[0] ? n[1] : n[0];
  w.leader = leader;
  w.ids[0] = node_id (leader);
  w.ids[1] = node_id (member);
  if (!harness_wait (both_timed, &w, 30000))
    {
      harness_dump (h);
      g_error ("the leader reported no timing for both ranks");
    }
  for (guint k = 0; k < 2; k++)
    {
      JsonObject *o = node_ev (leader, timing_of (leader, w.ids[k], 0));
      g_assert_cmpint (ev_int (o, "compute_us"), >, 0);
      g_assert_cmpint (ev_int (o, "round_us"), >, 0);
      g_assert_cmpint (ev_int (o, "step"), >=, 1);
    }
  node_kill (n[0], SIGTERM);
  node_kill (n[1], SIGTERM);
  harness_assert_exit_ok (h, n[0], 20000);
  harness_assert_exit_ok (h, n[1], 20000);
  /* No timing from the member while it is one. It may lead for a while
   * (starved past the heartbeat timeout under load, the leader is replaced;
   * or it reads the leader's bye before its own SIGTERM), and a leader
   * measures: what it reports then is a leader's. */
  for (guint e = 0; e < member->events->len; e++)
    {
      JsonObject *o = node_ev (member, e);

      if (g_strcmp0 (ev_str (o, "event"), "leader") == 0)
        leading = g_strcmp0 (ev_str (o, "node"), w.ids[1]) == 0;
      else if (g_strcmp0 (ev_str (o, "event"), "timing") == 0 && !leading)
        {
          harness_dump (h);
          g_error ("the member reported timing (its event %u) while it did not lead", e);
        }
    }
  harness_free (h);
}

/* kill -9 of a member mid-step: the cohort continues within 2 s. */
static void
test_kill_member (void)
{
  Harness *h = harness_new ();
  Node *n[3], *leader, *victim = NULL, *other = NULL;
  int last, next;
  gint64 t_kill, dt;

  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *label = g_strdup_printf ("node%u", i);
      n[i] = harness_join (h, label, "--cohort", "km", "--batch", "8", "--steps", LONG_RUN,
                           "--wait-members", "3", NULL);
    }
  for (guint i = 0; i < 3; i++)
    harness_wait_event (h, n[i], "joined", NULL, 0, 30000);
  leader = harness_leader (h, n, 3);
  for (guint i = 0; i < 3; i++)
    if (n[i] != leader)
      {
        if (victim == NULL)
          victim = n[i];
        else
          other = n[i];
      }
  last = harness_wait_event (h, leader, "step", "step", 10, 30000);
  last = (int) leader->events->len - 1;

  t_kill = g_get_monotonic_time ();
  node_kill (victim, SIGKILL);
  /* The next step committed without the dead member. */
  next = node_wait_event (leader, "step", "members", 0, (guint) last + 1, 10000);
  while (next >= 0 && ev_int (node_ev (leader, next), "members") != 2)
    next = node_wait_event (leader, "step", "members", 0, (guint) next + 1, 10000);
  if (next < 0)
    {
      harness_dump (h);
      g_error ("the cohort did not continue after a member was killed");
    }
  /* when the leader committed it (its monotonic clock is ours), not when
   * this process, as starved as any under load, read the line */
  dt = ev_int (node_ev (leader, next), "time_us") - t_kill;
  g_test_message ("first step without the killed member after %.3f s", dt / 1e6);
  g_assert_cmpint (dt, <=, 2000000);
  g_assert_cmpint (node_find_event (leader, "member-left", 0), >=, 0);

  /* And keeps going, with the survivor in agreement. */
  harness_wait_event (h, other, "step", "step", ev_int (node_ev (leader, next), "step") + 5, 20000);
  node_kill (leader, SIGTERM);
  node_kill (other, SIGTERM);
  harness_assert_exit_ok (h, leader, 20000);
  harness_assert_exit_ok (h, other, 20000);
  g_assert_true (victim->signaled);
  harness_free (h);
}

/* Silence past the heartbeat timeout removes a member (a stopped process
 * keeps its socket open: only the heartbeat can tell); when it wakes up it
 * learns that it was cut off and rejoins by itself through a snapshot — it
 * neither exits, nor takes over, nor splits the cohort. */
static void
test_frozen_member_rejoins (void)
{
  Harness *h = harness_new ();
  Node *n[3], *leader, *victim = NULL, *other = NULL;
  g_autoptr(GHashTable) hl = NULL;
  int checked = 0;
  gint64 k, last;

  for (guint j = 0; j < 3; j++)
    {
      g_autofree char *label = g_strdup_printf ("node%u", j);
      /* 3 s, the default: 6 heartbeats of 500 ms. At 1 s (2 heartbeats) a
       * healthy leader starved on a loaded 2-core machine was timed out too. */
      n[j] = harness_join (h, label, "--cohort", "hb", "--batch", "8", "--steps", LONG_RUN,
                           "--wait-members", "3", "--heartbeat-timeout-ms", "3000", NULL);
    }
  for (guint j = 0; j < 3; j++)
    harness_wait_event (h, n[j], "joined", NULL, 0, 30000);
  leader = harness_leader (h, n, 3);
  harness_others (n, leader, &victim, &other);
  harness_wait_event (h, leader, "step", "step", 5, 30000);
  k = harness_freeze_thaw (h, leader, victim, other, 10000);
  harness_wait_event (h, victim, "step", "step", k + 8, 30000);
  g_assert_false (victim->exited);
  /* It is a member again (the leader admitted it), and nobody took over. */
  g_assert_cmpint (node_wait_event (leader, "member-joined", NULL, 0, 0, 1000), >=, 0);
  harness_assert_led_by (n, 3, leader, 1);

  node_kill (leader, SIGTERM);
  node_kill (other, SIGTERM);
  node_kill (victim, SIGTERM);
  harness_assert_exit_ok (h, leader, 20000);
  harness_assert_exit_ok (h, other, 20000);
  harness_assert_exit_ok (h, victim, 20000);

  /* The same hash at every step both report after the snapshot. */
  hl = node_step_hashes (leader);
  last = node_max_step (victim);
  for (gint64 s = k + 1; s <= last; s++)
    {
      int iv = node_step (victim, s);
      const char *ref = g_hash_table_lookup (hl, &s);
      if (iv < 0 || ref == NULL)
        continue;
      if (g_strcmp0 (ref, ev_str (node_ev (victim, iv), "hash")) != 0)
        {
          harness_dump (h);
          g_error ("step %" G_GINT64_FORMAT ": the rejoined node's hash differs", s);
        }
      checked++;
    }
  g_assert_cmpint (checked, >=, 6);
  harness_free (h);
}

/* kill -9 of the leader: a new leader continues from the last committed
 * step; step numbers have no gap, no committed step is lost, all hashes
 * agree. */
static void
test_kill_leader (void)
{
  Harness *h = harness_new ();
  Node *n[3], *leader, *rest[2];
  GHashTable *hashes[3];
  gint64 maxs = 0;
  const gint64 steps = 120;
  g_autofree char *steps_s = g_strdup_printf ("%" G_GINT64_FORMAT, steps);

  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *label = g_strdup_printf ("node%u", i);
      n[i] = harness_join (h, label, "--cohort", "kl", "--batch", "8", "--steps", steps_s,
                           "--wait-members", "3", NULL);
    }
  leader = harness_kill_leader_at (h, n, 15, 30000, 60000, rest);

  /* A new leader, with a newer term. */
  for (guint i = 0; i < 2; i++)
    {
      gboolean seen = FALSE;
      for (guint j = 0; j < rest[i]->events->len; j++)
        if (g_strcmp0 (ev_str (node_ev (rest[i], j), "event"), "leader") == 0 &&
            ev_int (node_ev (rest[i], j), "term") >= 2)
          seen = TRUE;
      if (!seen)
        {
          harness_dump (h);
          g_error ("%s never saw a new leader", rest[i]->label);
        }
      g_assert_cmpint (node_max_step (rest[i]), ==, steps);
    }

  hashes[0] = node_step_hashes (leader);
  hashes[1] = node_step_hashes (rest[0]);
  hashes[2] = node_step_hashes (rest[1]);
  for (guint i = 0; i < 3; i++)
    maxs = MAX (maxs, node_max_step (g_ptr_array_index (h->nodes, i)));
  g_assert_cmpint (maxs, ==, steps);
  for (gint64 s = 1; s <= steps; s++)
    {
      const char *ref = NULL;
      for (guint i = 0; i < 3; i++)
        {
          const char *hs = g_hash_table_lookup (hashes[i], &s);
          if (hs == NULL)
            continue;
          if (ref == NULL)
            ref = hs;
          else if (strcmp (ref, hs) != 0)
            {
              harness_dump (h);
              g_error ("step %" G_GINT64_FORMAT ": hashes disagree (%s vs %s)", s, ref, hs);
            }
        }
      if (ref == NULL)
        {
          harness_dump (h);
          g_error ("step %" G_GINT64_FORMAT " was never committed (a gap)", s);
        }
    }
  /* Every step the dead leader reported is one the survivors hold. */
  {
    gint64 dead_last = node_max_step (leader);
    g_autoptr(GHashTable) hr = node_step_hashes (rest[0]);
    g_test_message ("the leader was killed after reporting step %" G_GINT64_FORMAT, dead_last);
    g_assert_nonnull (g_hash_table_lookup (hr, &dead_last));
  }
  for (guint i = 0; i < 3; i++)
    g_hash_table_unref (hashes[i]);
  harness_free (h);
}

typedef struct {
  Node       *n;
  const char *word;
} RefusedWait;

static gboolean
pred_refused_with (gpointer data)
{
  RefusedWait *w = data;

  for (guint i = 0; i < w->n->events->len; i++)
    if (g_strcmp0 (ev_str (node_ev (w->n, i), "event"), "refused") == 0 &&
        strstr (ev_str (node_ev (w->n, i), "reason"), w->word))
      return TRUE;
  return FALSE;
}

static gboolean
wait_refused_with (Node *n, const char *word, guint timeout_ms)
{
  RefusedWait w = { n, word };

  return harness_wait (pred_refused_with, &w, timeout_ms);
}

/* A node with another model or dataset is refused; both sides say why. */
static void
test_refused (void)
{
  Harness *h = harness_new ();
  Node *a = harness_join (h, "a", "--cohort", "rf", "--batch", "8", "--steps", LONG_RUN, NULL);
  Node *b;
  int i;

  harness_wait_event (h, a, "step", "step", 2, 30000);
  b = harness_join (h, "cnn", "--cohort", "rf", "--model", "mnist-cnn", "--batch", "8",
                    "--steps", "5", NULL);
  g_assert_true (node_wait_exit (b, 30000));
  g_assert_false (b->signaled);
  g_assert_cmpint (b->exit_code, ==, 1);
  g_assert_cmpint (node_find_event (b, "joined", 0), <, 0);
  i = node_find_event (b, "refused", 0);
  g_assert_cmpint (i, >=, 0);
  g_assert_nonnull (strstr (ev_str (node_ev (b, i), "reason"), "model differs"));
  g_assert_true (wait_refused_with (a, "model differs", 10000));
  g_assert_true (wait_refused_with (a, "trains mnist-cnn", 10000));

  if (g_file_test ("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", G_FILE_TEST_EXISTS))
    {
      Node *c = harness_join (h, "fashion", "--cohort", "rf", "--dataset", "fashion-mnist",
                              "--batch", "8", "--steps", "5", NULL);
      g_assert_true (node_wait_exit (c, 30000));
      g_assert_cmpint (c->exit_code, ==, 1);
      i = node_find_event (c, "refused", 0);
      g_assert_cmpint (i, >=, 0);
      g_assert_nonnull (strstr (ev_str (node_ev (c, i), "reason"), "dataset differs"));
      g_assert_true (wait_refused_with (a, "uses fashion-mnist", 10000));
    }
  else
    g_test_message ("dataset-fashion-mnist is not installed: the dataset refusal is not exercised");

  node_kill (a, SIGTERM);
  harness_assert_exit_ok (h, a, 20000);
  harness_free (h);
}

/* A rank that returns NaN gradients is rejected and reported; the cohort's
 * parameters stay finite. */
static void
test_nan_rejected (void)
{
  Harness *h = harness_new ();
  Node *a = harness_join (h, "a", "--cohort", "nan", "--batch", "8", "--steps", "30",
                          "--wait-members", "2", NULL);
  Node *b;
  int i, rejected = 0;
  g_autoptr(GHashTable) ha = NULL, hb = NULL;

  harness_wait_event (h, a, "joined", NULL, 0, 30000);
  b = harness_join (h, "faulty", "--cohort", "nan", "--batch", "8", "--steps", "30",
                    "--fault-nan", "5", NULL);
  harness_assert_exit_ok (h, a, 60000);
  harness_assert_exit_ok (h, b, 60000);

  for (i = 0; i < (int) a->events->len; i++)
    {
      JsonObject *o = node_ev (a, i);
      if (g_strcmp0 (ev_str (o, "event"), "rejected") == 0)
        {
          g_assert_cmpstr (ev_str (o, "node"), ==, node_id (b));
          g_assert_nonnull (strstr (ev_str (o, "reason"), "NaN"));
          g_assert_cmpint (ev_int (o, "step"), >=, 5);
          rejected++;
        }
      if (g_strcmp0 (ev_str (o, "event"), "step") == 0)
        {
          g_assert_true (isfinite (ev_num (o, "loss")));
          if (ev_int (o, "step") >= 6)
            g_assert_cmpint (ev_int (o, "contributors"), ==, 1);
        }
    }
  g_assert_cmpint (rejected, >=, 20);
  /* The faulty rank hears about it too. */
  g_assert_cmpint (node_find_event (b, "rejected", 0), >=, 0);
  /* Same parameters everywhere, and finite (the hash is of finite values:
   * check them in the final checkpoint). */
  ha = node_step_hashes (a);
  hb = node_step_hashes (b);
  for (gint64 s = 5; s <= 30; s++)
    g_assert_cmpstr (g_hash_table_lookup (ha, &s), ==, g_hash_table_lookup (hb, &s));
  harness_assert_checkpoint_finite (h, "nan", rlx_model_get (RLX_MODEL_MNIST_MLP)->n_params);
  g_assert_cmpstr (g_hash_table_lookup (ha, &(gint64) { 30 }), !=, NULL);
  harness_free (h);
}

/* The global batch is split in proportion to measured speed: two ranks at
 * --batch 32, one made 30 ms per step slower on its compute thread
 * (--fault-slow-ms). The slow one leads (its own speed and the fast peer's
 * speed from its gradients both feed the split). Step 1, before any speed is
 * measured, splits by --batch (32/32); after a warm-up the fast rank's share
 * of the last 10 steps is at least 3× the slow one's, the global batch stays
 * 64 and the shares add up to it, and every hash agrees. */
#define SPLIT_STEPS 40
static void
test_split_by_speed (void)
{
  Harness *h = harness_new ();
  Node *slow, *fast;
  g_autoptr(GHashTable) hs = NULL, hf = NULL;
  gint64 fast_sum = 0, slow_sum = 0;

  slow = harness_join (h, "slow", "--cohort", "split", "--batch", "32",
                       "--steps", G_STRINGIFY (SPLIT_STEPS), "--wait-members", "2",
                       "--fault-slow-ms", "30", "--deadline-floor-ms", SLOW_OK, NULL);
  harness_wait_event (h, slow, "joined", NULL, 0, 30000);
  fast = harness_join (h, "fast", "--cohort", "split", "--batch", "32",
                       "--steps", G_STRINGIFY (SPLIT_STEPS), "--deadline-floor-ms", SLOW_OK, NULL);
  harness_assert_exit_ok (h, slow, 60000);
  harness_assert_exit_ok (h, fast, 60000);
  g_assert_true (harness_leader (h, (Node *[]) { slow, fast }, 2) == slow);

  hs = node_step_hashes (slow);
  hf = node_step_hashes (fast);
  for (gint64 s = 1; s <= SPLIT_STEPS; s++)
    {
      int es = node_step (slow, s), ef = node_step (fast, s);
      JsonObject *os, *of;

      if (es < 0 || ef < 0 || g_strcmp0 (g_hash_table_lookup (hs, &s), g_hash_table_lookup (hf, &s)) != 0)
        {
          harness_dump (h);
          g_error ("step %" G_GINT64_FORMAT ": missing or hashes differ", s);
        }
      os = node_ev (slow, es);
      of = node_ev (fast, ef);
      g_assert_cmpint (ev_int (os, "members"), ==, 2);
      g_assert_cmpint (ev_int (os, "samples"), ==, 64);
      g_assert_cmpint (ev_int (of, "samples"), ==, 64);
      g_assert_cmpint (ev_int (os, "contributors"), ==, 2);
      /* Both shares of one assignment: they cover the global batch. */
      g_assert_cmpint (ev_int (os, "assigned") + ev_int (of, "assigned"), ==, 64);
      /* Everyone able gets at least one sample. */
      g_assert_cmpint (ev_int (os, "assigned"), >=, 1);
      g_assert_cmpint (ev_int (of, "assigned"), >=, 1);
      if (s == 1)
        {
          g_assert_cmpint (ev_int (os, "assigned"), ==, 32);
          g_assert_cmpint (ev_int (of, "assigned"), ==, 32);
        }
      if (s > SPLIT_STEPS - 10)
        {
          slow_sum += ev_int (os, "assigned");
          fast_sum += ev_int (of, "assigned");
        }
    }
  g_test_message ("last 10 steps: fast rank %" G_GINT64_FORMAT " samples, slow rank %"
                  G_GINT64_FORMAT, fast_sum, slow_sum);
  if (fast_sum < 3 * slow_sum)
    {
      harness_dump (h);
      g_error ("the split does not follow speed: over the last 10 steps the fast rank got %"
               G_GINT64_FORMAT " samples, the 30 ms slower one %" G_GINT64_FORMAT,
               fast_sum, slow_sum);
    }
  harness_free (h);
}

/* Minimal safetensors reader of the test's own: header length, JSON, data. */
typedef struct {
  char   *name;
  char   *dtype;
  gint64  shape[4];
  guint   rank;
  guint64 begin, end;
} StEntry;

static GPtrArray *
read_safetensors (const char *path, GBytes **data_out)
{
  g_autofree char *data = NULL;
  gsize len;
  guint64 hlen;
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  GPtrArray *entries = g_ptr_array_new ();
  JsonObject *root;
  GList *members;

  g_assert_true (g_file_get_contents (path, &data, &len, NULL));
  g_assert_cmpuint (len, >=, 8);
  memcpy (&hlen, data, 8);
  hlen = GUINT64_FROM_LE (hlen);
  g_assert_cmpuint (8 + hlen, <=, len);
  g_assert_cmpuint ((8 + hlen) % 8, ==, 0);
  json_parser_load_from_data (parser, data + 8, (gssize) hlen, &error);
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  members = json_object_get_members (root);
  for (GList *l = members; l; l = l->next)
    {
      JsonObject *t;
      JsonArray *shape, *offs;
      StEntry *e;

      if (strcmp (l->data, "__metadata__") == 0)
        continue;
      t = json_object_get_object_member (root, l->data);
      e = g_new0 (StEntry, 1);
      e->name = g_strdup (l->data);
      e->dtype = g_strdup (json_object_get_string_member (t, "dtype"));
      shape = json_object_get_array_member (t, "shape");
      e->rank = json_array_get_length (shape);
      g_assert_cmpuint (e->rank, <=, 4);
      for (guint d = 0; d < e->rank; d++)
        e->shape[d] = json_array_get_int_element (shape, d);
      offs = json_object_get_array_member (t, "data_offsets");
      e->begin = json_array_get_int_element (offs, 0);
      e->end = json_array_get_int_element (offs, 1);
      g_assert_cmpuint (e->end, <=, len - 8 - hlen);
      g_ptr_array_add (entries, e);
    }
  g_list_free (members);
  *data_out = g_bytes_new (data + 8 + hlen, len - 8 - hlen);
  return entries;
}

/* Restart from checkpoint resumes at the saved step with the saved hash; the
 * exported safetensors file reads back with the right names, dtypes, shapes
 * and values. */
static void
test_checkpoint_restart_and_export (void)
{
  Harness *h = harness_new ();
  Node *a = harness_join (h, "a", "--cohort", "ck", "--batch", "8", "--steps", "20",
                          "--checkpoint-every", "10", "--wait-members", "2", NULL);
  Node *b, *r, *x;
  g_autoptr(GHashTable) h1 = NULL, h2 = NULL;
  const char *saved;
  int i, first_step;
  g_autofree char *out = g_build_filename (h->dir, "model.safetensors", NULL);
  g_autoptr(GPtrArray) entries = NULL;
  g_autoptr(GBytes) data = NULL;
  static const struct { const char *name; guint rank; gint64 shape[2]; } want[] = {
    { "1.weight", 2, { 128, 784 } }, { "1.bias", 1, { 128 } },
    { "3.weight", 2, { 10, 128 } }, { "3.bias", 1, { 10 } },
  };
  const RlxModel *m = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autofree float *flat = g_new (float, m->n_params);
  gsize off = 0;
  const char *final_hash;

  /* b only once a has formed the cohort: started together, b could get
   * there first, train the 20 steps alone (it does not wait for members) and
   * leave a nothing to do but resume at step 20. */
  harness_wait_event (h, a, "joined", NULL, 0, 30000);
  b = harness_join (h, "b", "--cohort", "ck", "--batch", "8", "--steps", "20", NULL);
  harness_assert_exit_ok (h, a, 60000);
  harness_assert_exit_ok (h, b, 60000);
  h1 = node_step_hashes (a);
  saved = g_hash_table_lookup (h1, &(gint64) { 20 });
  if (saved == NULL)
    {
      harness_dump (h);
      g_error ("a did not report step 20");
    }
  g_assert_cmpint (node_find_event (a, "checkpoint", 0) >= 0 || node_find_event (b, "checkpoint", 0) >= 0, ==, TRUE);

  /* The cohort restarted with the same name resumes. */
  r = harness_join (h, "restart", "--cohort", "ck", "--batch", "8", "--steps", "30", NULL);
  harness_assert_exit_ok (h, r, 60000);
  i = node_find_event (r, "resumed", 0);
  if (i < 0)
    {
      harness_dump (h);
      g_error ("the restarted node did not resume");
    }
  g_assert_cmpint (ev_int (node_ev (r, i), "step"), ==, 20);
  g_assert_cmpstr (ev_str (node_ev (r, i), "hash"), ==, saved);
  first_step = node_find_event (r, "step", 0);
  g_assert_cmpint (first_step, >, i);
  g_assert_cmpint (ev_int (node_ev (r, first_step), "step"), ==, 21);
  g_assert_cmpint (node_max_step (r), ==, 30);
  h2 = node_step_hashes (r);
  final_hash = g_hash_table_lookup (h2, &(gint64) { 30 });
  g_assert_nonnull (final_hash);

  /* Export, and read it back with our own parser. */
  x = harness_spawn (h, "export", "export", "--cohort", "ck", "--format", "safetensors",
                     "--out", out, NULL);
  harness_assert_exit_ok (h, x, 30000);
  entries = read_safetensors (out, &data);
  g_assert_cmpuint (entries->len, ==, G_N_ELEMENTS (want));
  for (guint t = 0; t < G_N_ELEMENTS (want); t++)
    {
      StEntry *e = NULL;
      gsize numel = 1;
      for (guint j = 0; j < entries->len; j++)
        if (strcmp (((StEntry *) g_ptr_array_index (entries, j))->name, want[t].name) == 0)
          e = g_ptr_array_index (entries, j);
      g_assert_nonnull (e);
      g_assert_cmpstr (e->dtype, ==, "F32");
      g_assert_cmpuint (e->rank, ==, want[t].rank);
      for (guint d = 0; d < e->rank; d++)
        {
          g_assert_cmpint (e->shape[d], ==, want[t].shape[d]);
          numel *= (gsize) e->shape[d];
        }
      g_assert_cmpuint (e->end - e->begin, ==, numel * 4);
      /* In layer order, weight then bias: the flat vector the cohort trains. */
      memcpy (flat + off, (const guint8 *) g_bytes_get_data (data, NULL) + e->begin, numel * 4);
      off += numel;
    }
  g_assert_cmpuint (off, ==, m->n_params);
  {
    g_autofree char *hx = g_strdup_printf ("%016" G_GINT64_MODIFIER "x",
                                           rlx_params_hash (flat, m->n_params));
    g_assert_cmpstr (hx, ==, final_hash);
  }
  for (gsize j = 0; j < m->n_params; j++)
    g_assert_true (isfinite (flat[j]));
  for (guint j = 0; j < entries->len; j++)
    {
      StEntry *e = g_ptr_array_index (entries, j);
      g_free (e->name);
      g_free (e->dtype);
      g_free (e);
    }
  harness_free (h);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cohort/three-nodes-same-hash", test_three_nodes_same_hash);
  g_test_add_func ("/cohort/equivalence-2x32-1x64", test_equivalence);
  g_test_add_func ("/cohort/join-late", test_join_late);
  g_test_add_func ("/cohort/timing", test_timing);
  g_test_add_func ("/cohort/lone-precision", test_lone_precision);
  g_test_add_func ("/cohort/kill-member", test_kill_member);
  g_test_add_func ("/cohort/kill-leader", test_kill_leader);
  g_test_add_func ("/cohort/frozen-member-rejoins", test_frozen_member_rejoins);
  g_test_add_func ("/cohort/refused", test_refused);
  g_test_add_func ("/cohort/nan-rejected", test_nan_rejected);
  g_test_add_func ("/cohort/split-by-speed", test_split_by_speed);
  g_test_add_func ("/cohort/checkpoint-restart-export", test_checkpoint_restart_and_export);
  g_test_add_func ("/cohort/busy-poll-and-trace", test_busy_poll_and_trace);
  return g_test_run ();
}
