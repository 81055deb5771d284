/* test-lineage.c — which history a node's steps belong to across merges
 * (core/cohort/rlx-lineage.h): the term base, the yield, and the "merged"
 * event's range of discarded steps, from the hashes and without them.
 */
#include "rlx-config.h"
#include "core/cohort/rlx-lineage.h"

static void
check_merged (RlxEvent *e, gint64 discarded, gint64 from, gint64 to, gboolean exact,
              const char *rule)
{
  g_assert_nonnull (e);
  g_assert_cmpint (e->kind, ==, RLX_EVENT_MERGED);
  g_assert_cmpstr (e->u.merged.node, ==, "L");
  g_assert_cmpint (e->u.merged.discarded, ==, discarded);
  g_assert_cmpint (e->u.merged.from_step, ==, from);
  g_assert_cmpint (e->u.merged.to_step, ==, to);
  g_assert_cmpint (e->u.merged.exact, ==, exact);
  g_assert_cmpstr (e->u.merged.rule, ==, rule);
  rlx_event_unref (e);
}

static void
test_term_base (void)
{
  RlxLineage *l = rlx_lineage_new ();

  rlx_lineage_term_began (l, 4);
  g_assert_cmpuint (rlx_lineage_term_base (l), ==, 4);
  /* the other side's term starts no base: what we did since ours began is
   * what the merge discards */
  rlx_lineage_change (l);
  g_assert_true (rlx_lineage_is_changing (l));
  rlx_lineage_term_began (l, 9);
  g_assert_cmpuint (rlx_lineage_term_base (l), ==, 4);
  rlx_lineage_free (l);
}

/* A founding makes a new fork (of the checkpoint's lineage, or a new one)
 * that begins at its step; a node takes the identity and the term base of
 * the snapshot it adopts: the sender's, where its term began (chaos.py
 * --cuts seed 75: a node that joined a group late reported only from where
 * its own hashes began when the group yielded). */
static void
test_identity (void)
{
  RlxLineage *l = rlx_lineage_new ();
  RlxMsgSnapshot s = { 0 };
  RlxMsgLineage first;
  RlxEvent *e;

  g_assert_cmpuint (rlx_lineage_id (l)->lin, ==, 0);
  g_assert_false (rlx_lineage_same_fork (l, rlx_lineage_id (l)));
  rlx_lineage_found (l, 0, 0);
  first = *rlx_lineage_id (l);
  g_assert_cmpuint (first.lin, !=, 0);
  g_assert_cmpuint (first.fork, !=, 0);
  g_assert_cmpuint (first.base, ==, 0);
  g_assert_true (rlx_lineage_same_fork (l, &first));
  /* a resume of that lineage's checkpoint: the lineage goes on, a new fork
   * at the checkpoint's step */
  rlx_lineage_found (l, first.lin, 300);
  g_assert_cmpuint (rlx_lineage_id (l)->lin, ==, first.lin);
  g_assert_cmpuint (rlx_lineage_id (l)->fork, !=, first.fork);
  g_assert_cmpuint (rlx_lineage_id (l)->base, ==, 300);
  g_assert_cmpuint (rlx_lineage_term_base (l), ==, 300);
  g_assert_false (rlx_lineage_same_fork (l, &first));
  /* leading on with the state held: the fork stays */
  rlx_lineage_lead_on (l, 420);
  g_assert_cmpuint (rlx_lineage_id (l)->base, ==, 300);
  g_assert_cmpuint (rlx_lineage_term_base (l), ==, 420);

  /* a snapshot of the first fork, whose sender's term began at 120 */
  s.step = 500;
  s.lineage = first;
  s.tbase = 120;
  e = rlx_lineage_adopted (l, "L", &s, 0, -1, -1, 0, 0, 500);
  g_assert_null (e);
  g_assert_true (rlx_lineage_same_fork (l, &first));
  g_assert_cmpuint (rlx_lineage_term_base (l), ==, 120);
  rlx_lineage_free (l);
}

static void
test_adopted (void)
{
  RlxLineage *l = rlx_lineage_new ();
  RlxMsgSnapshot s = { 0 };
  const char *fallback = "the cohort this node was cut off from is kept";

  s.step = 20;
  /* behind the cohort, on its history: nothing to say */
  g_assert_null (rlx_lineage_adopted (l, "L", &s, 6, 6, -1, 0, 1, 20));
  g_assert_null (rlx_lineage_adopted (l, "L", &s, 0, -1, -1, 0, 0, 20));
  /* ahead of where the hashes agree: steps 8..10 are discarded, exactly */
  check_merged (rlx_lineage_adopted (l, "L", &s, 10, 7, -1, 0, 1, 20), 3, 8, 10, TRUE, fallback);

  /* no merge of ours, but the snapshot's hashes hold our step and none of
   * them is ours (steps we applied that the cohort never committed): we
   * parted before the first of them, and with no sparse hash of ours
   * nothing says where — all we remember (from step 90) goes (issue 29,
   * item 13) */
  {
    g_autoptr(GArray) hashes = g_array_new (FALSE, TRUE, sizeof (guint64));
    g_array_set_size (hashes, 20);
    s.hashes = hashes;
    s.hashes_from = 100;
    check_merged (rlx_lineage_adopted (l, "L", &s, 110, -1, -1, 3, 90, 200), 21, 90, 110, FALSE,
                  fallback);
    /* a sparse hash of ours at step 96: from 97 */
    check_merged (rlx_lineage_adopted (l, "L", &s, 110, -1, 96, 3, 90, 200), 14, 97, 110, FALSE,
                  fallback);
    /* our step beyond them (and behind the snapshot's): nothing shows our
     * steps since 90 on the snapshot's history — they may be gone: from
     * the earlier of our term's base (3) and all we remember, an upper
     * bound (chaos.py --cuts seed 66) */
    s.step = 200;
    check_merged (rlx_lineage_adopted (l, "L", &s, 130, -1, -1, 3, 90, 200), 127, 4, 130, FALSE,
                  fallback);
    /* nothing of our own since the state we loaded (at 130): nothing to say */
    g_assert_null (rlx_lineage_adopted (l, "L", &s, 130, -1, -1, 3, 130, 200));
    /* ahead of the snapshot, none of its hashes ours: steps 121..130 go
     * whatever the hashes say, and where we parted is not known — from
     * our term's base, an upper bound (a leader that stepped down for a
     * newer term of another history: chaos.py seed 30, issue 29) */
    s.step = 120;
    check_merged (rlx_lineage_adopted (l, "L", &s, 130, -1, -1, 3, 90, 120), 127, 4, 130, FALSE,
                  fallback);
    s.hashes = NULL;
    s.hashes_from = 0;
    /* the same without hashes at all: all we remember */
    check_merged (rlx_lineage_adopted (l, "L", &s, 130, -1, -1, 111, 90, 120), 41, 90, 130, FALSE,
                  fallback);
    s.step = 20;
  }

  /* a merge we lost, hashes that do not overlap, no sparse hash of ours:
   * where we parted is not known, and our term's base is no bound (our
   * side may have changed leaders since the split: chaos.py --cuts seed
   * 6) — everything we remember (from step 1) goes */
  rlx_lineage_term_began (l, 5);
  rlx_lineage_yield (l, g_strdup ("the larger group is kept"),
                     g_ptr_array_new_with_free_func (g_free));
  check_merged (rlx_lineage_adopted (l, "L", &s, 9, -1, -1, 5, 0, 20), 9, 1, 9, FALSE,
                "the larger group is kept");
  /* the same with a sparse hash of ours at step 2: from step 3 (it was
   * still the same history there), though our term began at 5 */
  rlx_lineage_term_began (l, 5);
  rlx_lineage_yield (l, g_strdup ("the larger group is kept"),
                     g_ptr_array_new_with_free_func (g_free));
  s.tbase = 14;
  check_merged (rlx_lineage_adopted (l, "L", &s, 9, -1, 2, 5, 0, 20), 7, 3, 9, FALSE,
                "the larger group is kept");
  /* the adopted lineage's term, from where the sender's began; the rule
   * was for that merge */
  g_assert_false (rlx_lineage_is_changing (l));
  g_assert_cmpuint (rlx_lineage_term_base (l), ==, 14);
  s.tbase = 0;

  /* no step matched although the snapshot's hashes cover our first one
   * (step 3): we parted before it */
  s.hashes = g_array_new (FALSE, FALSE, sizeof (guint64));
  for (guint64 h = 0; h < 5; h++)
    g_array_append_val (s.hashes, h);
  s.hashes_from = 1;
  rlx_lineage_change (l);
  check_merged (rlx_lineage_adopted (l, "L", &s, 9, -1, -1, 5, 3, 20), 7, 3, 9, FALSE, fallback);
  g_array_unref (s.hashes);
  rlx_lineage_free (l);
}

static void
test_former (void)
{
  RlxLineage *l = rlx_lineage_new ();
  GPtrArray *former = g_ptr_array_new_with_free_func (g_free);
  GPtrArray *got;

  g_assert_null (rlx_lineage_take_former (l));
  g_ptr_array_add (former, g_strdup ("m1"));
  rlx_lineage_yield (l, g_strdup ("rule"), former);
  g_assert_true (rlx_lineage_is_changing (l));
  got = rlx_lineage_take_former (l);
  g_assert_true (got == former);
  g_assert_null (rlx_lineage_take_former (l));   /* told once */
  g_ptr_array_unref (got);
  rlx_lineage_free (l);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cohort/lineage/term-base", test_term_base);
  g_test_add_func ("/cohort/lineage/identity", test_identity);
  g_test_add_func ("/cohort/lineage/adopted", test_adopted);
  g_test_add_func ("/cohort/lineage/former", test_former);
  return g_test_run ();
}
