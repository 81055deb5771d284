/* test-founding.c — founding and leaving under faults, with real processes
 * (issue 29, item 13, as scripts/chaos.py found it)
 *
 *   /cohort/founding/not-over-frozen-peers   a rank started while every
 *       node of a cohort is stopped (SIGSTOP) does not found a cohort of its
 *       own over them: it waits ("waiting"), and joins them once they run.
 *   /cohort/founding/leave-writes-checkpoint   a leader that leaves
 *       (SIGTERM) writes the state it ends at, consistent with its hash: a
 *       new rank resumes every step it committed, not the last periodic
 *       checkpoint (repeated: a round in flight as it leaves is the case
 *       that once wrote parameters and a hash of different steps).
 *   /cohort/founding/founder-reads-newest-checkpoint   a node that waited to
 *       found resumes the newest checkpoint on disk, not the one it read
 *       when it started.
 *   /cohort/founding/leader-leads-on-over-cut-member   a leader whose
 *       member b was dropped and cut off (b waits for it as a silent peer),
 *       and which is then frozen and cut off itself, leads on within one
 *       heartbeat timeout of thawing although b is still cut: b
 *       acknowledged its commits and holds none it lacks. A rank started
 *       meanwhile joins it, and b, once its cut ends, rejoins it instead
 *       of founding (issue 29, the 30-minute chaos run's 9.1 s stall: the
 *       leader waited for its cut member until the cut ended, up to ten
 *       timeouts).
 *   /cohort/founding/new-leader-leads-on-over-old-leader   b takes over
 *       from a, frozen, with c, and commits with it; then b is frozen, c
 *       dies, and b thaws cut off, a still frozen: b leads on within one
 *       heartbeat timeout of thawing (every member a had followed b, so a
 *       can have committed on only alone, a branch b's term outranks), and
 *       a, thawed, rejoins it (issue 29, a 300 s chaos run's 7.54 s stall:
 *       the new leader waited ten timeouts for its old one).
 */
#include "rlx-config.h"
#include "cohort-harness.h"

#include <glib/gstdio.h>
#include <signal.h>
#include <string.h>

#define T 60000
/* leader-leads-on-over-cut-member's heartbeat timeout */
#define HB_MS 4000

static gboolean
never (gpointer data)
{
  return FALSE;
}

static void
test_not_over_frozen_peers (void)
{
  Harness *h = harness_new ();
  Node *a, *b, *c;
  int i, j;
  gint64 held;

  a = harness_join (h, "a", "--cohort", "frozen", "--batch", "8", "--steps", "100000",
                    "--wait-members", "2", NULL);
  harness_wait_event (h, a, "joined", NULL, 0, T);
  b = harness_join (h, "b", "--cohort", "frozen", "--batch", "8", "--steps", "100000", NULL);
  harness_wait_event (h, b, "step", "step", 30, T);
  node_kill (a, SIGSTOP);
  node_kill (b, SIGSTOP);
  held = MAX (node_max_step (a), node_max_step (b));
  c = harness_join (h, "c", "--cohort", "frozen", "--batch", "8", "--steps", "100000", NULL);
  /* It sees the two sockets and their processes, and no answer. */
  i = harness_wait_event (h, c, "waiting", NULL, 0, T);
  g_assert_nonnull (strstr (ev_str (node_ev (c, i), "reason"), "not answering"));
  /* Long enough for a discovery window or three: it founds nothing. */
  harness_wait (never, NULL, 2500);
  if (node_find_event (c, "joined", 0) >= 0)
    {
      harness_dump (h);
      g_error ("c founded or joined while every node of the cohort was stopped");
    }
  node_kill (a, SIGCONT);
  node_kill (b, SIGCONT);
  /* It joins the cohort as a member, at the state the cohort held. */
  j = harness_wait_event (h, c, "joined", NULL, 0, T);
  g_assert_cmpstr (ev_str (node_ev (c, j), "role"), ==, "member");
  g_assert_cmpint (ev_int (node_ev (c, j), "step"), >=, held);
  g_assert_cmpint (node_find_event (c, "resumed", 0), <, 0);
  harness_wait_event (h, c, "step", "step", held + 20, T);
  for (guint k = 0; k < h->nodes->len; k++)
    node_kill (g_ptr_array_index (h->nodes, k), SIGTERM);
  for (guint k = 0; k < h->nodes->len; k++)
    harness_assert_exit_ok (h, g_ptr_array_index (h->nodes, k), 20000);
  harness_free (h);
}

static void
test_leave_writes_checkpoint (void)
{
  for (guint round = 0; round < 4; round++)
    {
      Harness *h = harness_new ();
      Node *a, *r;
      int done, res, ck;
      gint64 step;
      g_autofree char *until = NULL;

      a = harness_join (h, "a", "--cohort", "leave", "--batch", "8", "--checkpoint-every", "100",
                        NULL);
      harness_wait_event (h, a, "step", "step", 150 + 37 * round, T);
      node_kill (a, SIGTERM);
      harness_assert_exit_ok (h, a, 20000);
      done = node_find_event (a, "done", 0);
      g_assert_cmpint (done, >=, 0);
      step = ev_int (node_ev (a, done), "step");
      /* Its last checkpoint is where it ended, not the periodic one. */
      ck = -1;
      for (guint e = 0; e < a->events->len; e++)
        if (g_strcmp0 (ev_str (node_ev (a, (int) e), "event"), "checkpoint") == 0)
          ck = (int) e;
      g_assert_cmpint (ck, >=, 0);
      g_assert_cmpint (ev_int (node_ev (a, ck), "step"), ==, step);
      /* A new rank resumes it (the file's hash matches its parameters). */
      until = g_strdup_printf ("%" G_GINT64_FORMAT, step + 3);
      r = harness_join (h, "r", "--cohort", "leave", "--batch", "8", "--steps", until, NULL);
      harness_assert_exit_ok (h, r, T);
      res = node_find_event (r, "resumed", 0);
      if (res < 0)
        {
          harness_dump (h);
          g_error ("round %u: the checkpoint of the leader that left did not resume", round);
        }
      g_assert_cmpint (ev_int (node_ev (r, res), "step"), ==, step);
      g_assert_cmpstr (ev_str (node_ev (r, res), "hash"), ==,
                       ev_str (node_ev (a, done), "hash"));
      harness_free (h);
    }
}

/* A node that waited to found (for a silent peer) resumes the checkpoint
 * on disk when it founds, not the one it read when it started: another
 * node may have written a newer one meanwhile. The test writes it: a
 * checkpoint of step 100 replaces one of step 30 while the founder waits. */
static void
test_founder_reads_newest_checkpoint (void)
{
  Harness *h = harness_new ();
  g_autofree char *path = g_build_filename (h->data_dir, "rlx-cluster", "newest",
                                            "checkpoint.safetensors", NULL);
  g_autofree char *tmp = g_strconcat (path, ".newer", NULL);
  g_autofree char *newer = NULL, *older = NULL;
  gsize newer_len = 0, older_len = 0;
  Node *a, *p, *b;
  int r;

  a = harness_join (h, "a100", "--cohort", "newest", "--batch", "8", "--steps", "100",
                    "--checkpoint-every", "0", NULL);
  harness_assert_exit_ok (h, a, T);
  g_assert_true (g_file_get_contents (path, &newer, &newer_len, NULL));
  g_assert_cmpint (g_unlink (path), ==, 0);
  a = harness_join (h, "a30", "--cohort", "newest", "--batch", "8", "--steps", "30",
                    "--checkpoint-every", "0", NULL);
  harness_assert_exit_ok (h, a, T);
  g_assert_true (g_file_get_contents (path, &older, &older_len, NULL));

  /* p founds (resuming 30) and stops answering; b reads 30 and waits. */
  p = harness_join (h, "p", "--cohort", "newest", "--batch", "8", "--checkpoint-every", "0",
                    NULL);
  harness_wait_event (h, p, "joined", NULL, 0, T);
  node_kill (p, SIGSTOP);
  b = harness_join (h, "b", "--cohort", "newest", "--batch", "8", "--steps", "105",
                    "--checkpoint-every", "0", NULL);
  harness_wait_event (h, b, "waiting", NULL, 0, T);
  /* meanwhile the folder gets the checkpoint of step 100 (atomically) */
  g_assert_true (g_file_set_contents (tmp, newer, (gssize) newer_len, NULL));
  g_assert_cmpint (g_rename (tmp, path), ==, 0);
  node_kill (p, SIGKILL);
  node_kill (p, SIGCONT);
  harness_assert_exit_ok (h, b, T);
  r = node_find_event (b, "resumed", 0);
  g_assert_cmpint (r, >=, 0);
  g_assert_cmpint (ev_int (node_ev (b, r), "step"), ==, 100);
  harness_free (h);
}

/* The first event of @n from @from on that names @event and whose string
 * @key is @val, or -1. */
static int
find_named (Node *n, const char *event, const char *key, const char *val, guint from)
{
  for (guint e = from; e < n->events->len; e++)
    if (g_strcmp0 (ev_str (node_ev (n, (int) e), "event"), event) == 0 &&
        g_strcmp0 (ev_str (node_ev (n, (int) e), key), val) == 0)
      return (int) e;
  return -1;
}

/* A named node of @cohort with the heartbeat timeout @hb (ms, as text). */
#define JOIN_HB(h, cohort, id, hb, ...)                                                    \
  harness_join ((h), (id), "--cohort", (cohort), "--node", (id), "--batch", "8", "--steps", \
                "100000000", "--checkpoint-every", "0", "--heartbeat-timeout-ms", (hb),     \
                __VA_ARGS__)

/* find_named, waiting for it up to T; -1 if it never came. */
static int
wait_named (Node *n, const char *event, const char *key, const char *val, guint from)
{
  int i;

  for (gint64 waited = 0; (i = find_named (n, event, key, val, from)) < 0 && waited < T;
       waited += 100)
    harness_pause (100);
  return i;
}

/* SIGTERM each of @nodes in turn; each leaves cleanly. */
static void
leave_in_order (Harness *h, Node **nodes, guint k)
{
  for (guint i = 0; i < k; i++)
    {
      node_kill (nodes[i], SIGTERM);
      harness_assert_exit_ok (h, nodes[i], 20000);
    }
}

static void
test_leader_leads_on_over_cut_member (void)
{
  Harness *h = harness_new ();
  g_autofree char *pa = g_build_filename (h->dir, "part-a", NULL);
  g_autofree char *pb = g_build_filename (h->dir, "part-b", NULL);
  g_autofree char *hb = g_strdup_printf ("%d", HB_MS);
  Node *a, *b, *c, *x;
  gint64 thawed, at, took;
  guint mark_b;
  int i;

#define JOIN(id, ...) JOIN_HB (h, "cutmember", (id), hb, __VA_ARGS__)
  a = JOIN ("a", "--wait-members", "1", "--fault-partition", pa, NULL);
  harness_wait_event (h, a, "joined", NULL, 0, T);
  b = JOIN ("b", "--fault-partition", pb, NULL);
  harness_wait_event (h, b, "joined", NULL, 0, T);
  c = JOIN ("c", NULL);
  harness_wait_event (h, c, "joined", NULL, 0, T);
  harness_wait_event (h, c, "step", "step", node_max_step (c) + 30, T);
  /* b stands still until a drops it, and thaws cut off: alone, it waits
   * for a and c, which it cannot reach */
  node_kill (b, SIGSTOP);
  i = harness_wait_event (h, a, "member-left", NULL, 0, T);
  g_assert_cmpstr (ev_str (node_ev (a, i), "node"), ==, "b");
  g_assert_true (g_file_set_contents (pb, "b\n", -1, NULL));
  node_kill (b, SIGCONT);
  harness_wait_event (h, b, "rejoining", NULL, 0, T);
  harness_wait_event (h, b, "waiting", NULL, 0, T);
  at = node_max_step (a);
  harness_wait_event (h, a, "step", "step", at + 20, T);
  /* a is frozen and cut off; c dies meanwhile, and x starts: x waits
   * for a (frozen) and b (cut) */
  node_kill (a, SIGSTOP);
  node_kill (c, SIGKILL);
  g_assert_true (g_file_set_contents (pa, "a\n", -1, NULL));
  x = JOIN ("x", NULL);
  harness_wait_event (h, x, "waiting", NULL, 0, T);
  harness_pause (HB_MS + 1000);
  /* a thaws cut off (its links closed while it stood still), and its cut
   * ends; b is still cut: the cohort is a, and it commits again within a
   * heartbeat timeout + 2 s */
  at = node_max_step (a);
  mark_b = b->events->len;
  node_kill (a, SIGCONT);
  thawed = g_get_monotonic_time ();
  harness_wait_event (h, a, "rejoining", NULL, 0, T);
  harness_pause (500);
  g_assert_cmpint (g_unlink (pa), ==, 0);
  /* (a commit of term 1 in flight as it froze may still be reported) */
  i = node_wait_event (a, "step", "term", 2, 0,
                       (guint) MAX (0, HB_MS + 2000 - (g_get_monotonic_time () - thawed) / 1000));
  took = (g_get_monotonic_time () - thawed) / 1000;
  if (i < 0)
    {
      harness_dump (h);
      g_error ("a, thawed with every committed step b can hold, committed nothing in %"
               G_GINT64_FORMAT " ms (%d ms timeout + 2 s): it waited for the cut b", took,
               HB_MS);
    }
  took = (g_array_index (a->times, gint64, i) - thawed) / 1000;
  g_test_message ("a committed step %" G_GINT64_FORMAT " %" G_GINT64_FORMAT " ms after it thawed",
                  ev_int (node_ev (a, i), "step"), took);
  g_assert_cmpint (ev_int (node_ev (a, i), "step"), >, at);
  g_assert_cmpstr (ev_str (node_ev (a, i), "leader"), ==, "a");
  /* x joins a */
  i = harness_wait_event (h, x, "leader", NULL, 0, T);
  g_assert_cmpstr (ev_str (node_ev (x, i), "node"), ==, "a");
  /* b's cut ends: it rejoins a, never leads */
  g_assert_cmpint (g_unlink (pb), ==, 0);
  if (wait_named (b, "leader", "node", "a", mark_b) < 0 ||
      find_named (b, "leader", "node", "b", 0) >= 0)
    {
      harness_dump (h);
      g_error ("b, its cut over, did not rejoin a's cohort (or led one of its own)");
    }
  at = node_max_step (a);
  harness_wait_event (h, b, "step", "step", at + 10, T);
  g_assert_cmpuint (harness_same_hashes (h, a, b, at), >=, 10);
  {
    Node *order[] = { x, b, a };

    leave_in_order (h, order, G_N_ELEMENTS (order));
  }
  harness_free (h);
#undef JOIN
}

/* How long after @since @n committed a step of @term led by @leader (its
 * index in *@i, -1 if none within @limit_ms). */
static gint64
committed_within (Node *n, guint64 term, const char *leader, gint64 since, guint limit_ms, int *i)
{
  *i = node_wait_event (n, "step", "term", (gint64) term, 0, limit_ms);
  if (*i < 0)
    return -1;
  g_assert_cmpstr (ev_str (node_ev (n, *i), "leader"), ==, leader);
  return (g_array_index (n->times, gint64, *i) - since) / 1000;
}

static void
test_new_leader_leads_on_over_old_leader (void)
{
  Harness *h = harness_new ();
  g_autofree char *pb = g_build_filename (h->dir, "part-b", NULL);
  g_autofree char *hb = g_strdup_printf ("%d", HB_MS);
  Node *a, *b, *c;
  gint64 thawed, took, at;
  guint mark;
  int i;

#define JOIN(id, ...) JOIN_HB (h, "oldleader", (id), hb, __VA_ARGS__)
  a = JOIN ("a", "--wait-members", "2", NULL);
  harness_wait_event (h, a, "joined", NULL, 0, T);
  b = JOIN ("b", "--fault-partition", pb, NULL);
  harness_wait_event (h, b, "joined", NULL, 0, T);
  c = JOIN ("c", NULL);
  harness_wait_event (h, c, "step", "step", 30, T);
  /* a stands still: b, next in line, takes over with c, and commits */
  node_kill (a, SIGSTOP);
  if (committed_within (b, 2, "b", g_get_monotonic_time (), 4 * HB_MS, &i) < 0)
    {
      harness_dump (h);
      g_error ("b did not take over from the frozen a");
    }
  at = ev_int (node_ev (b, i), "step");
  harness_wait_event (h, c, "step", "step", at + 20, T);
  /* b is frozen, c dies, and b thaws cut off: alone, with a alive but
   * silent */
  node_kill (b, SIGSTOP);
  node_kill (c, SIGKILL);
  g_assert_true (g_file_set_contents (pb, "b\n", -1, NULL));
  harness_pause (HB_MS + 1000);
  node_kill (b, SIGCONT);
  thawed = g_get_monotonic_time ();
  harness_wait_event (h, b, "rejoining", NULL, 0, T);
  harness_pause (500);
  g_assert_cmpint (g_unlink (pb), ==, 0);
  took = committed_within (b, 3, "b", thawed,
                           (guint) MAX (0, HB_MS + 2000 - (g_get_monotonic_time () - thawed) / 1000),
                           &i);
  if (took < 0)
    {
      harness_dump (h);
      g_error ("b, thawed with every committed step of the frozen a that survives, committed "
               "nothing within its %d ms timeout + 2 s: it waited for a", HB_MS);
    }
  g_test_message ("b committed step %" G_GINT64_FORMAT " %" G_GINT64_FORMAT " ms after it thawed",
                  ev_int (node_ev (b, i), "step"), took);
  /* a thaws: it rejoins b, and they agree */
  mark = a->events->len;
  node_kill (a, SIGCONT);
  if (wait_named (a, "leader", "node", "b", mark) < 0)
    {
      harness_dump (h);
      g_error ("a, thawed, did not rejoin b's cohort");
    }
  at = node_max_step (b);
  harness_wait_event (h, a, "step", "step", at + 10, T);
  g_assert_cmpuint (harness_same_hashes (h, a, b, at), >=, 10);
  {
    Node *order[] = { a, b };

    leave_in_order (h, order, G_N_ELEMENTS (order));
  }
  harness_free (h);
#undef JOIN
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cohort/founding/not-over-frozen-peers", test_not_over_frozen_peers);
  g_test_add_func ("/cohort/founding/leave-writes-checkpoint", test_leave_writes_checkpoint);
  g_test_add_func ("/cohort/founding/leader-leads-on-over-cut-member",
                   test_leader_leads_on_over_cut_member);
  g_test_add_func ("/cohort/founding/new-leader-leads-on-over-old-leader",
                   test_new_leader_leads_on_over_old_leader);
  g_test_add_func ("/cohort/founding/founder-reads-newest-checkpoint",
                   test_founder_reads_newest_checkpoint);
  return g_test_run ();
}
