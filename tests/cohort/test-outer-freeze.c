/* test-outer-freeze.c — a frozen (SIGSTOP) and thawed (SIGCONT) member of
 * an outer-mode cohort (`--sync outer:H`) rejoins (issue 28, "A frozen and
 * thawed member rejoins"), with real `rlx-rank join` processes on the local
 * bus (cohort-harness.h)
 *
 * What docs/PROTOCOL.md promises for the outer mode's elasticity: the
 * leader times the frozen member out by its heartbeats and the cohort goes
 * on without it (it loses only its own contribution); thawed, the member
 * says it was cut off, enters again at an outer boundary through a
 * snapshot from the leader that carries the outer state, and from there
 * holds the cohort's θ and outer momentum at every round (equal hash and
 * outer_hash) and contributes again. Nobody takes over.
 */
#include "rlx-config.h"
#include "cohort-harness.h"

#include <signal.h>
#include <string.h>

#define LONG_RUN "100000"

static void
test_frozen_member_rejoins (void)
{
  Harness *h = harness_new ();
  Node *n[3], *leader, *victim = NULL, *other = NULL;
  gint64 k, last;
  guint checked = 0, contributed = 0;

  for (guint j = 0; j < 3; j++)
    {
      g_autofree char *label = g_strdup_printf ("node%u", j);
      /* heartbeats as test-cohort's frozen-member test sets them (3 s: a
       * healthy rank starved on a loaded 2-core machine is not timed out) */
      n[j] = harness_join (h, label, "--cohort", "ofreeze", "--batch", "8", "--steps", LONG_RUN,
                           "--wait-members", "3", "--sync", "outer:4",
                           "--fault-slow-ms", "20", "--heartbeat-timeout-ms", "3000", NULL);
    }
  for (guint j = 0; j < 3; j++)
    harness_wait_event (h, n[j], "joined", NULL, 0, 30000);
  leader = harness_leader (h, n, 3);
  harness_others (n, leader, &victim, &other);
  harness_wait_event (h, leader, "step", "step", 4, 60000);
  /* frozen until the leader times it out, then thawed: it rejoins through
   * a snapshot from the leader */
  k = harness_freeze_thaw (h, leader, victim, other, 20000);
  harness_wait_event (h, victim, "step", "step", k + 8, 60000);
  g_assert_false (victim->exited);
  g_assert_cmpint (node_wait_event (leader, "member-joined", NULL, 0, 0, 1000), >=, 0);
  /* nobody took over */
  harness_assert_led_by (n, 3, leader, 1);

  node_kill (leader, SIGTERM);
  node_kill (other, SIGTERM);
  node_kill (victim, SIGTERM);
  harness_assert_exit_ok (h, leader, 30000);
  harness_assert_exit_ok (h, other, 30000);
  harness_assert_exit_ok (h, victim, 30000);

  /* Every round the leader committed, with two members or three, was an
   * outer round. */
  for (int e = node_find_event (leader, "step", 0); e >= 0;
       e = node_find_event (leader, "step", (guint) e + 1))
    if (g_strcmp0 (ev_str (node_ev (leader, e), "sync"), "outer") != 0)
      {
        harness_dump (h);
        g_error ("round %" G_GINT64_FORMAT " is not an outer round",
                 ev_int (node_ev (leader, e), "step"));
      }
  /* After the snapshot: every round both report is an outer round with the
   * same θ and the same momentum, and the rejoined member is in them. */
  last = MIN (node_max_step (victim), node_max_step (leader));
  for (gint64 s = k + 1; s <= last; s++)
    {
      int iv = node_step (victim, s), il = node_step (leader, s);
      JsonObject *v, *l;

      if (iv < 0 || il < 0)
        continue;
      v = node_ev (victim, iv);
      l = node_ev (leader, il);
      if (ev_str (l, "outer_hash") == NULL)
        {
          harness_dump (h);
          g_error ("round %" G_GINT64_FORMAT " after the rejoin is not an outer round", s);
        }
      if (g_strcmp0 (ev_str (l, "hash"), ev_str (v, "hash")) != 0 ||
          g_strcmp0 (ev_str (l, "outer_hash"), ev_str (v, "outer_hash")) != 0)
        {
          harness_dump (h);
          g_error ("round %" G_GINT64_FORMAT ": the rejoined member has %s / outer %s, the "
                   "leader %s / %s", s, ev_str (v, "hash"), ev_str (v, "outer_hash"),
                   ev_str (l, "hash"), ev_str (l, "outer_hash"));
        }
      checked++;
      if (ev_int (v, "contributed"))
        contributed++;
    }
  g_assert_cmpuint (checked, >=, 6);
  g_assert_cmpuint (contributed, >=, 4);
  harness_free (h);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/outer-freeze/frozen-member-rejoins", test_frozen_member_rejoins);
  return g_test_run ();
}
