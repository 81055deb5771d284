/* test-faults.c — the cohort protocol under faults, with real processes
 *
 * Each case starts `rlx-rank join --local --json` nodes (cohort-harness.h)
 * and provokes one fault through a test switch of rlx-rank join (hidden
 * options, see `rlx-rank join --help-all`): a parameter bit flipped, a
 * gradient that stalls past the collect deadline, ±Inf at f8, a leader that
 * dies after committing to only some members, a network split and its
 * healing (--fault-partition), a slow network (RLX_LINK_SHAPE). Every wait
 * has a timeout; no case depends on how fast the machine is.
 */
#include "rlx-config.h"
#include "cohort-harness.h"
#include "core/cohort/rlx-leader.h"
#include "core/vision/rlx-model.h"

#include <glib/gstdio.h>
#include <math.h>
#include <signal.h>
#include <string.h>

#define LONG_RUN "100000"
#define T 60000

#define same_hashes harness_same_hashes

/* The first event named @event from index @from whose string @key contains
 * @word, or -1. */
static int
find_with (Node *n, const char *event, guint from, const char *key, const char *word)
{
  for (guint i = from; i < n->events->len; i++)
    {
      JsonObject *o = node_ev (n, i);
      if (g_strcmp0 (ev_str (o, "event"), event) == 0 && ev_str (o, key) &&
          strstr (ev_str (o, key), word))
        return (int) i;
    }
  return -1;
}

/* A member @n saw leave other than with a bye (a timeout, a closed link),
 * or -1. */
static int
member_lost (Node *n)
{
  for (guint e = 0; e < n->events->len; e++)
    if (g_strcmp0 (ev_str (node_ev (n, e), "event"), "member-left") == 0 &&
        !g_str_has_prefix (ev_str (node_ev (n, e), "reason"), "bye"))
      return (int) e;
  return -1;
}

static void
stop_all (Harness *h)
{
  for (guint i = 0; i < h->nodes->len; i++)
    {
      Node *n = g_ptr_array_index (h->nodes, i);
      if (!n->exited)
        node_kill (n, SIGTERM);
    }
  for (guint i = 0; i < h->nodes->len; i++)
    harness_assert_exit_ok (h, g_ptr_array_index (h->nodes, i), 20000);
}

/* A member's parameters drift by one bit after step 8 (--fault-hash): its
 * acknowledgement says so, the leader refuses the bucket it computes there
 * ("hash differs"), the member sees the next commit's base differ from its
 * own hash and asks for a snapshot, and from then on the hashes agree. */
static void
test_hash_divergence_resync (void)
{
  Harness *h = harness_new ();
  Node *a, *b;
  int i, snap;
  g_autoptr(GHashTable) ha = NULL, hb = NULL;
  gint64 k;

  a = harness_join (h, "a", "--cohort", "div", "--batch", "8", "--steps", LONG_RUN,
                    "--wait-members", "2", "--deadline-floor-ms", "20000", NULL);
  harness_wait_event (h, a, "joined", NULL, 0, T);
  b = harness_join (h, "b", "--cohort", "div", "--batch", "8", "--steps", LONG_RUN,
                    "--fault-hash", "8", NULL);
  /* the leader refuses the bucket built on the drifted parameters */
  i = harness_wait_event (h, a, "rejected", "step", 9, T);
  g_assert_cmpstr (ev_str (node_ev (a, i), "node"), ==, node_id (b));
  g_assert_nonnull (strstr (ev_str (node_ev (a, i), "reason"), "hash differs"));
  /* the member resyncs through a snapshot, asked for because of the hash */
  snap = harness_wait_event (h, b, "snapshot", "step", 9, T);
  g_assert_cmpstr (ev_str (node_ev (b, snap), "from"), ==, node_id (a));
  /* the leader's own report of it (its line may be read after b's) */
  harness_wait_event (h, a, "snapshot", "step", 9, T);
  i = find_with (a, "snapshot", 0, "reason", "hash differs");
  if (i < 0)
    {
      harness_dump (h);
      g_error ("the leader sent no snapshot because of a hash difference");
    }
  /* both say where the parameters parted ("diverged"): the leader of b's
   * acknowledgement of step 8, b of its own state against the leader's */
  i = harness_wait_event (h, a, "diverged", "step", 8, T);
  g_assert_cmpstr (ev_str (node_ev (a, i), "node"), ==, node_id (b));
  g_assert_cmpint (ev_int (node_ev (a, i), "step"), ==, 8);
  g_assert_cmpstr (ev_str (node_ev (a, i), "hash"), !=, ev_str (node_ev (a, i), "expected"));
  i = harness_wait_event (h, b, "diverged", "step", 8, T);
  g_assert_cmpstr (ev_str (node_ev (b, i), "node"), ==, node_id (b));
  k = ev_int (node_ev (b, snap), "step");
  harness_wait_event (h, b, "step", "step", k + 10, T);
  stop_all (h);
  /* the leader's step 8 counts itself alone as agreeing; later ones both */
  for (guint e = 0; e < a->events->len; e++)
    {
      JsonObject *o = node_ev (a, e);
      if (g_strcmp0 (ev_str (o, "event"), "step") != 0)
        continue;
      if (ev_int (o, "step") == 8)
        g_assert_cmpint (ev_int (o, "agree"), ==, 1);
      else if (ev_int (o, "step") == k + 5)
        g_assert_cmpint (ev_int (o, "agree"), ==, 2);
    }

  /* b's own hash at step 8 was not the cohort's; after the snapshot all are. */
  ha = node_step_hashes (a);
  hb = node_step_hashes (b);
  g_assert_cmpstr (g_hash_table_lookup (ha, &(gint64) { 8 }), !=,
                   g_hash_table_lookup (hb, &(gint64) { 8 }));
  g_assert_cmpuint (same_hashes (h, a, b, k + 1), >=, 8);
  harness_free (h);
}

/* A member whose gradient of step 20 takes 3 s (--fault-stall) misses the
 * collect deadline: the leader reports it "late", commits step 20 without
 * it, and the member takes part again from the next steps with the same
 * hashes (its late bucket leaves no residual behind: it was never taken). */
static void
test_member_late (void)
{
  Harness *h = harness_new ();
  Node *a, *b;
  int i, e;

  a = harness_join (h, "a", "--cohort", "late", "--batch", "8", "--steps", LONG_RUN,
                    "--wait-members", "2", "--deadline-floor-ms", "300",
                    "--precision", "f8e4m3", NULL);
  harness_wait_event (h, a, "joined", NULL, 0, T);
  b = harness_join (h, "b", "--cohort", "late", "--batch", "8", "--steps", LONG_RUN,
                    "--precision", "f8e4m3", "--fault-stall", "20:3000", NULL);
  i = harness_wait_event (h, a, "late", "step", 20, T);
  g_assert_cmpstr (ev_str (node_ev (a, i), "node"), ==, node_id (b));
  g_assert_cmpint (ev_int (node_ev (a, i), "step"), ==, 20);
  e = harness_wait_event (h, a, "step", "step", 20, T);
  g_assert_cmpint (ev_int (node_ev (a, e), "step"), ==, 20);
  g_assert_cmpint (ev_int (node_ev (a, e), "contributors"), ==, 1);
  g_assert_cmpint (ev_int (node_ev (a, e), "late"), ==, 1);
  /* b comes back: a step after 25 with its gradient in it */
  e = harness_wait_event (h, b, "step", "step", 26, T);
  while (e >= 0 && !ev_int (node_ev (b, e), "contributed"))
    e = node_wait_event (b, "step", NULL, 0, (guint) e + 1, T);
  g_assert_cmpint (e, >=, 0);
  /* (while b's compute hung, a trained on without it: b may have skipped
   * those commits through a snapshot, so the common hashes are counted
   * over the steps after it is back) */
  harness_wait_event (h, b, "step", "step", ev_int (node_ev (b, e), "step") + 30, T);
  stop_all (h);
  g_assert_cmpuint (same_hashes (h, a, b, 1), >=, 25);
  /* the member was never removed (it leaves with a bye at the end) */
  g_assert_cmpint (member_lost (a), <, 0);
  harness_free (h);
}

/* A member whose compute hangs (the gradient of step 20 takes 12 s,
 * --fault-stall) while its link lives — heartbeats on time — misses
 * RLX_SILENT_ROUNDS deadlines in a row over four heartbeat timeouts: the
 * leader takes it out of the group, saying why, and trains on alone at its
 * own pace; once the compute runs again the member rejoins through a
 * snapshot and contributes, with the leader's hashes. Before, it stayed in
 * the group and every round waited for its deadline until it came back
 * (and a leader counted such members in the merge rule's claims: issue 29,
 * item 13). */
static void
test_member_silent_dropped (void)
{
  Harness *h = harness_new ();
  Node *a, *b;
  int left = -1, e;
  guint late = 0, after_late = 0;
  gint64 at;

  a = harness_join (h, "a", "--cohort", "silent", "--batch", "8", "--steps", LONG_RUN,
                    "--wait-members", "2", "--deadline-floor-ms", "300",
                    "--heartbeat-timeout-ms", "1000", NULL);
  harness_wait_event (h, a, "joined", NULL, 0, T);
  b = harness_join (h, "b", "--cohort", "silent", "--batch", "8", "--steps", LONG_RUN,
                    "--heartbeat-timeout-ms", "1000", "--fault-stall", "20:12000", NULL);
  harness_wait_event (h, a, "late", "step", 20, T);
  for (gint64 waited = 0; left < 0; waited += 100)
    {
      for (e = node_find_event (a, "member-left", 0); e >= 0 && left < 0;
           e = node_find_event (a, "member-left", (guint) e + 1))
        if (g_strcmp0 (ev_str (node_ev (a, e), "node"), node_id (b)) == 0)
          left = e;
      if (left < 0 && waited > 11000)
        {
          harness_dump (h);
          g_error ("the leader kept a member that sent no gradient for 11 s");
        }
      harness_pause (100);
    }
  if (!strstr (ev_str (node_ev (a, left), "reason"), "sent no gradient"))
    g_error ("member-left for the silent member: \"%s\"", ev_str (node_ev (a, left), "reason"));
  for (e = node_find_event (a, "late", 0); e >= 0 && e < left; e = node_find_event (a, "late", (guint) e + 1))
    late++;
  g_assert_cmpuint (late, >=, RLX_SILENT_ROUNDS);
  /* alone, at its own pace: 40 steps with nobody late, well inside the
   * 12 s the member stays stuck (at a 300 ms deadline each they took 12 s) */
  at = node_max_step (a);
  harness_wait_event (h, a, "step", "step", at + 40, 6000);
  for (e = node_find_event (a, "late", (guint) left); e >= 0; e = node_find_event (a, "late", (guint) e + 1))
    if (ev_int (node_ev (a, e), "step") <= at + 40)
      after_late++;
  g_assert_cmpuint (after_late, ==, 0);
  /* it rejoins once its compute runs again, and contributes */
  e = node_wait_event (a, "member-joined", NULL, 0, (guint) left, T);
  g_assert_cmpint (e, >=, 0);
  at = node_max_step (a);
  e = harness_wait_event (h, b, "step", "step", at + 5, T);
  while (e >= 0 && !ev_int (node_ev (b, e), "contributed"))
    e = node_wait_event (b, "step", NULL, 0, (guint) e + 1, T);
  g_assert_cmpint (e, >=, 0);
  stop_all (h);
  g_assert_cmpuint (same_hashes (h, a, b, at), >=, 5);
  harness_free (h);
}

/* The leader publishes its updates at f16, then (another cohort) at f8e4m3,
 * to members at f32 and f8e5m2: one hash everywhere, the loss falls, and
 * the leader's frames are smaller than at f32. */
static void
test_leader_precisions (void)
{
  static const char *const leader_precision[] = { "f16", "f8e4m3" };

  for (guint c = 0; c < G_N_ELEMENTS (leader_precision); c++)
    {
      Harness *h = harness_new ();
      Node *a, *b, *d;
      int first, last;

      a = harness_join (h, "lead", "--cohort", "prec", "--batch", "16", "--steps", "30",
                        "--wait-members", "3", "--precision", leader_precision[c],
                        "--deadline-floor-ms", "20000", NULL);
      harness_wait_event (h, a, "joined", NULL, 0, T);
      b = harness_join (h, "f32", "--cohort", "prec", "--batch", "16", "--steps", "30",
                        "--precision", "f32", NULL);
      d = harness_join (h, "e5m2", "--cohort", "prec", "--batch", "16", "--steps", "30",
                        "--precision", "f8e5m2", NULL);
      harness_assert_exit_ok (h, a, T);
      harness_assert_exit_ok (h, b, T);
      harness_assert_exit_ok (h, d, T);
      g_assert_cmpuint (same_hashes (h, a, b, 1), ==, 30);
      g_assert_cmpuint (same_hashes (h, a, d, 1), ==, 30);
      first = node_step (a, 1);
      last = node_step (a, 30);
      g_assert_cmpfloat (ev_num (node_ev (a, last), "loss"), <, ev_num (node_ev (a, first), "loss"));
      /* what the leader sent is a fraction of what f32 would have cost */
      {
        int done = node_find_event (a, "done", 0);
        JsonObject *o = node_ev (a, done);
        g_assert_cmpint (ev_int (o, "bytes_tx"), <,
                         (c == 0 ? 0.6 : 0.35) * (double) ev_int (o, "bytes_f32"));
      }
      g_assert_cmpint (ev_int (node_ev (a, last), "contributors"), ==, 3);
      harness_free (h);
    }
}

/* ±Inf in a member's gradient at f8e4m3 (--fault-inf): E4M3 has no
 * infinity, a quantiser would saturate it to ±448·scale — a plausible,
 * wrong bucket. The member refuses to quantise it; the leader reports the
 * refusal with the reason, never applies it; parameters stay finite and
 * equal. */
static void
test_inf_refused_at_f8 (void)
{
  Harness *h = harness_new ();
  Node *a, *b;
  int i, rejected = 0;

  a = harness_join (h, "a", "--cohort", "inf", "--batch", "8", "--steps", "20",
                    "--wait-members", "2", "--precision", "f8e4m3", NULL);
  harness_wait_event (h, a, "joined", NULL, 0, T);
  b = harness_join (h, "b", "--cohort", "inf", "--batch", "8", "--steps", "20",
                    "--precision", "f8e4m3", "--fault-inf", "5", NULL);
  harness_assert_exit_ok (h, a, T);
  harness_assert_exit_ok (h, b, T);
  for (i = 0; i < (int) a->events->len; i++)
    {
      JsonObject *o = node_ev (a, i);
      if (g_strcmp0 (ev_str (o, "event"), "rejected") == 0)
        {
          g_assert_cmpstr (ev_str (o, "node"), ==, node_id (b));
          g_assert_nonnull (strstr (ev_str (o, "reason"), "Inf"));
          g_assert_nonnull (strstr (ev_str (o, "reason"), "not sent"));
          g_assert_cmpint (ev_int (o, "step"), >=, 5);
          rejected++;
        }
      if (g_strcmp0 (ev_str (o, "event"), "step") == 0 && ev_int (o, "step") >= 6)
        g_assert_cmpint (ev_int (o, "contributors"), ==, 1);
    }
  g_assert_cmpint (rejected, >=, 14);
  g_assert_cmpint (node_find_event (b, "rejected", 0), >=, 0);
  g_assert_cmpuint (same_hashes (h, a, b, 1), ==, 20);
  /* the final parameters are finite */
  harness_assert_checkpoint_finite (h, "inf", rlx_model_get (RLX_MODEL_MNIST_MLP)->n_params);
  harness_free (h);
}

/* The leader commits step 15 to one member only and dies (--fault-die-at):
 * the member next in seniority takes over one step behind the other. The
 * one ahead hands it its state ("a member was ahead of the new leader"),
 * the new leader adopts it and goes on from there: step 15 as the ahead
 * member committed it is kept, no step is lost or repeated, hashes agree.
 * The new leader checkpoints on taking over. */
static void
test_member_ahead_of_new_leader (void)
{
  Harness *h = harness_new ();
  Node *a, *b, *c;
  int i;
  g_autoptr(GHashTable) hb = NULL, hc = NULL;

  a = harness_join (h, "a", "--cohort", "ahead", "--batch", "8", "--steps", "40",
                    "--wait-members", "3", "--fault-die-at", "15",
                    "--deadline-floor-ms", "20000", NULL);
  harness_wait_event (h, a, "joined", NULL, 0, T);
  /* b is admitted before c: b takes over */
  b = harness_join (h, "b", "--cohort", "ahead", "--batch", "8", "--steps", "40", NULL);
  harness_wait_event (h, b, "joined", NULL, 0, T);
  c = harness_join (h, "c", "--cohort", "ahead", "--batch", "8", "--steps", "40", NULL);
  harness_assert_exit_ok (h, b, T);
  harness_assert_exit_ok (h, c, T);
  g_assert_true (node_wait_exit (a, 5000));
  g_assert_true (a->signaled);

  /* c committed 15 from the old leader; b never received it */
  g_assert_cmpint (node_step (c, 15), >=, 0);
  g_assert_cmpint (node_step (b, 14), >=, 0);
  i = find_with (b, "snapshot", 0, "reason", "a member was ahead of the new leader");
  if (i < 0)
    {
      harness_dump (h);
      g_error ("the new leader did not adopt the state of the member ahead of it");
    }
  g_assert_cmpstr (ev_str (node_ev (b, i), "from"), ==, node_id (c));
  g_assert_cmpint (ev_int (node_ev (b, i), "step"), ==, 15);
  g_assert_cmpstr (ev_str (node_ev (b, i), "hash"), ==,
                   ev_str (node_ev (c, node_step (c, 15)), "hash"));
  /* a new term, the new leader checkpoints, and no gap */
  i = harness_wait_event (h, b, "leader", "term", 2, 1000);
  g_assert_cmpstr (ev_str (node_ev (b, i), "node"), ==, node_id (b));
  g_assert_cmpint (node_find_event (b, "checkpoint", i), >=, 0);
  hb = node_step_hashes (b);
  hc = node_step_hashes (c);
  for (gint64 s = 1; s <= 40; s++)
    if (!g_hash_table_contains (hb, &s) && !g_hash_table_contains (hc, &s))
      {
        harness_dump (h);
        g_error ("step %" G_GINT64_FORMAT " was committed by nobody (a gap)", s);
      }
  g_assert_cmpuint (same_hashes (h, b, c, 1), >=, 35);
  harness_free (h);
}

/* Four nodes; the network between {a, b} and {c, d} is cut
 * (--fault-partition): {c, d} elect a leader of their own and both halves
 * train on. When the cut heals, the two leaders meet, the documented rule
 * keeps one group (more members, then more committed steps, then the
 * smaller leader id) and the other yields: each of its nodes reports
 * "merged" with the steps it discarded, takes a snapshot of the kept
 * group's state, and from then on all four have one hash. */
static void
test_split_and_merge (void)
{
  Harness *h = harness_new ();
  g_autofree char *cut = g_build_filename (h->dir, "partition", NULL);
  static const char *const ids[] = { "a", "b", "c", "d" };
  Node *n[4];
  int i;
  gint64 split_at, healed_at;
  guint healed_mark = 0, healed_mark_c = 0;
  Node *winner, *loser_leader;
  guint merged = 0;

  for (guint k = 0; k < 4; k++)
    {
      n[k] = harness_join (h, ids[k], "--cohort", "split", "--node", ids[k], "--batch", "8",
                           "--steps", LONG_RUN, "--wait-members", k == 0 ? "4" : "1",
                           "--fault-partition", cut, NULL);
      /* a founds; the others join it, in this order (seniority) */
      harness_wait_event (h, n[k], "joined", NULL, 0, T);
    }
  i = harness_wait_event (h, n[0], "step", "step", 5, T);
  g_assert_cmpint (ev_int (node_ev (n[0], i), "members"), ==, 4);

  g_assert_true (g_file_set_contents (cut, "a b\nc d\n", -1, NULL));
  /* c takes over for {c, d} (term 2); a goes on with b */
  i = harness_wait_event (h, n[2], "leader", "term", 2, T);
  g_assert_cmpstr (ev_str (node_ev (n[2], i), "node"), ==, "c");
  split_at = ev_int (node_ev (n[2], i), "step");
  harness_wait_event (h, n[3], "step", "step", split_at + 20, T);
  harness_wait_event (h, n[1], "step", "step", split_at + 20, T);
  i = harness_wait_event (h, n[0], "step", "step", split_at + 20, T);
  while (i >= 0 && ev_int (node_ev (n[0], i), "members") != 2)
    i = node_wait_event (n[0], "step", NULL, 0, (guint) i + 1, T);
  g_assert_cmpint (i, >=, 0);

  {
    guint mark[4];
    for (guint k = 0; k < 4; k++)
      mark[k] = n[k]->events->len;
    g_assert_cmpint (g_unlink (cut), ==, 0);
    healed_mark = mark[0];
    healed_mark_c = mark[2];
  }
  /* the halves meet: one yields, and everyone ends up in one cohort */
  for (guint k = 0; k < 4; k++)
    if (node_wait_event (n[k], "merged", NULL, 0, 0, 100) >= 0)
      merged++;
  {
    /* whoever reports "merged" first tells us which side yielded */
    Node *yielder = NULL;
    for (gint64 waited = 0; yielder == NULL && waited < T; waited += 200)
      for (guint k = 0; k < 4 && yielder == NULL; k++)
        if (node_wait_event (n[k], "merged", NULL, 0, 0, 50) >= 0)
          yielder = n[k];
    if (yielder == NULL)
      {
        harness_dump (h);
        g_error ("no node reported a merge after the cut healed");
      }
    winner = (yielder == n[0] || yielder == n[1]) ? n[2] : n[0];
    loser_leader = winner == n[0] ? n[2] : n[0];
  }
  /* both nodes of the yielding side report it, with what they discarded */
  for (guint k = 0; k < 4; k++)
    {
      Node *x = n[k];
      gboolean yields = (winner == n[0]) ? (k >= 2) : (k < 2);
      if (!yields)
        continue;
      i = harness_wait_event (h, x, "merged", NULL, 0, T);
      if (ev_int (node_ev (x, i), "discarded") < 1)
        harness_dump (h);
      g_assert_cmpint (ev_int (node_ev (x, i), "discarded"), >=, 1);
      g_assert_cmpint (ev_int (node_ev (x, i), "to_step"), >=, ev_int (node_ev (x, i), "from_step"));
      g_assert_nonnull (strstr (ev_str (node_ev (x, i), "rule"), "kept"));
    }
  (void) merged;
  (void) loser_leader;
  /* one cohort of four again, one hash */
  i = node_wait_event (winner, "step", "members", 4, winner == n[0] ? healed_mark : healed_mark_c, T);
  if (i < 0)
    {
      harness_dump (h);
      g_error ("the cohort did not become one of four again");
    }
  healed_at = ev_int (node_ev (winner, i), "step");
  for (guint k = 0; k < 4; k++)
    harness_wait_event (h, n[k], "step", "step", healed_at + 10, T);
  stop_all (h);
  for (guint k = 1; k < 4; k++)
    g_assert_cmpuint (same_hashes (h, n[0], n[k], healed_at), >=, 8);
  harness_free (h);
}

/* Three nodes over a slow network: every link shaped to 25 ms each way and
 * 50 MB/s (RLX_LINK_SHAPE, applied by each process to what it receives).
 * They train 60 steps of mnist-mlp with one hash, and no one is timed out,
 * dropped as late or left behind: the protocol does not mistake a slow link
 * for a dead peer. */
static void
test_slow_network (void)
{
  Harness *h = harness_new ();
  Node *n[3];

  harness_setenv (h, "RLX_LINK_SHAPE", "delay=25ms,rate=50MB/s");
  n[0] = harness_join (h, "a", "--cohort", "slow", "--batch", "16", "--steps", "60",
                       "--wait-members", "3", "--precision", "f16", NULL);
  harness_wait_event (h, n[0], "joined", NULL, 0, T);
  n[1] = harness_join (h, "b", "--cohort", "slow", "--batch", "16", "--steps", "60",
                       "--precision", "f32", NULL);
  n[2] = harness_join (h, "c", "--cohort", "slow", "--batch", "16", "--steps", "60",
                       "--precision", "f8e4m3", NULL);
  for (guint k = 0; k < 3; k++)
    harness_assert_exit_ok (h, n[k], 120000);
  for (guint k = 1; k < 3; k++)
    g_assert_cmpuint (same_hashes (h, n[0], n[k], 1), ==, 60);
  for (guint k = 0; k < 3; k++)
    {
      /* (at the end the nodes leave with a bye: that is no timeout) */
      if (member_lost (n[k]) >= 0)
        {
          harness_dump (h);
          g_error ("%s: a member was lost on a slow link", n[k]->label);
        }
      g_assert_cmpint (node_find_event (n[k], "late", 0), <, 0);
      g_assert_cmpint (node_find_event (n[k], "rejoining", 0), <, 0);
    }
  for (gint64 s = 1; s <= 60; s++)
    g_assert_cmpint (ev_int (node_ev (n[0], node_step (n[0], s)), "contributors"), ==, 3);
  harness_free (h);
}

/* A node given peers to join (--join-only) never founds a cohort of its
 * own, however long it waits; it says so, and joins the cohort once one
 * exists. */
static void
test_join_only_waits (void)
{
  Harness *h = harness_new ();
  Node *a, *b;
  int i;

  b = harness_join (h, "b", "--cohort", "jo", "--batch", "8", "--steps", "20", "--join-only", NULL);
  i = harness_wait_event (h, b, "waiting", NULL, 0, T);
  g_assert_nonnull (strstr (ev_str (node_ev (b, i), "reason"), "join"));
  /* it keeps waiting (several discovery rounds) without founding */
  g_assert_cmpint (node_wait_event (b, "joined", NULL, 0, 0, 2500), <, 0);
  a = harness_join (h, "a", "--cohort", "jo", "--batch", "8", "--steps", "20",
                    "--wait-members", "2", NULL);
  i = harness_wait_event (h, b, "joined", NULL, 0, T);
  g_assert_cmpstr (ev_str (node_ev (b, i), "role"), ==, "member");
  harness_assert_exit_ok (h, a, T);
  harness_assert_exit_ok (h, b, T);
  g_assert_cmpuint (same_hashes (h, a, b, 1), ==, 20);
  harness_free (h);
}

static gboolean
file_exists (gpointer path)
{
  return g_file_test (path, G_FILE_TEST_EXISTS);
}

/* Two hosts (two data folders) hold checkpoints of one cohort, one newer.
 * Restarted together, the node with the newest checkpoint founds — whatever
 * the ids say — and the cohort resumes from it. */
static void
test_newest_checkpoint_resumes (void)
{
  Harness *h = harness_new ();
  g_autofree char *old_home = g_build_filename (h->dir, "host-old", NULL);
  g_autofree char *new_home = g_build_filename (h->dir, "host-new", NULL);
  g_autofree char *sock = NULL;
  Node *x, *y, *o, *w;
  int i;

  g_assert_cmpint (g_mkdir (old_home, 0700), ==, 0);
  g_assert_cmpint (g_mkdir (new_home, 0700), ==, 0);
  /* each host trains the cohort alone: 10 steps on one, 25 on the other */
  harness_setenv (h, "XDG_DATA_HOME", old_home);
  o = harness_join (h, "old", "--cohort", "ck2", "--node", "a-old", "--batch", "8",
                    "--steps", "10", NULL);
  harness_assert_exit_ok (h, o, T);
  harness_setenv (h, "XDG_DATA_HOME", new_home);
  w = harness_join (h, "new", "--cohort", "ck2", "--node", "z-new", "--batch", "8",
                    "--steps", "25", NULL);
  harness_assert_exit_ok (h, w, T);

  /* Both restart; "a-old" sorts first but holds the older checkpoint. It
   * must hear from "z-new" before it may found, whatever the load: started
   * one after the other, "z-new" could still be starting when the other's
   * discovery window (250 ms) ended. So "z-new" starts first and is frozen
   * as soon as its socket is on the bus; "a-old" then sees a peer that
   * lives but does not answer and waits for it (it says so), and only then
   * is "z-new" thawed. */
  harness_setenv (h, "XDG_DATA_HOME", new_home);
  y = harness_join (h, "y", "--cohort", "ck2", "--node", "z-new", "--batch", "8",
                    "--steps", "40", "--wait-members", "2", NULL);
  sock = g_build_filename (h->run_dir, "rlx-cluster", "ck2", "z-new.sock", NULL);
  g_assert_true (harness_wait (file_exists, sock, T));
  node_kill (y, SIGSTOP);
  harness_setenv (h, "XDG_DATA_HOME", old_home);
  x = harness_join (h, "x", "--cohort", "ck2", "--node", "a-old", "--batch", "8",
                    "--steps", "40", "--wait-members", "2", NULL);
  harness_wait_event (h, x, "waiting", NULL, 0, T);
  node_kill (y, SIGCONT);
  harness_assert_exit_ok (h, x, T);
  harness_assert_exit_ok (h, y, T);
  i = node_find_event (y, "resumed", 0);
  if (i < 0)
    {
      harness_dump (h);
      g_error ("the node with the newest checkpoint did not found and resume");
    }
  g_assert_cmpint (ev_int (node_ev (y, i), "step"), ==, 25);
  g_assert_cmpint (node_find_event (x, "resumed", 0), <, 0);
  g_assert_cmpint (node_step (x, 26), >=, 0);
  g_assert_cmpint (node_step (x, 25), <, 0);
  g_assert_cmpuint (same_hashes (h, x, y, 26), ==, 15);
  harness_free (h);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cohort/faults/hash-divergence-resync", test_hash_divergence_resync);
  g_test_add_func ("/cohort/faults/member-late", test_member_late);
  g_test_add_func ("/cohort/faults/member-silent-dropped", test_member_silent_dropped);
  g_test_add_func ("/cohort/faults/leader-f16-f8", test_leader_precisions);
  g_test_add_func ("/cohort/faults/inf-refused-at-f8", test_inf_refused_at_f8);
  g_test_add_func ("/cohort/faults/member-ahead-of-new-leader", test_member_ahead_of_new_leader);
  g_test_add_func ("/cohort/faults/split-and-merge", test_split_and_merge);
  g_test_add_func ("/cohort/faults/slow-network", test_slow_network);
  g_test_add_func ("/cohort/faults/join-only-waits", test_join_only_waits);
  g_test_add_func ("/cohort/faults/newest-checkpoint-resumes", test_newest_checkpoint_resumes);
  return g_test_run ();
}
