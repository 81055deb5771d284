/* test-step-begins.c — a member's record of where the steps it was told of
 * begin (core/cohort/rlx-step-begins.h)
 *
 * After commit c a member's replica holds where round c + 1 begins, from
 * the frame that named c + 1. A record of another term — a step of the
 * same number in a lineage merged away, or before a failover — must not be
 * taken for it, and a snapshot loaded forgets every record.
 */
#include "rlx-config.h"
#include "core/cohort/rlx-step-begins.h"

static void
test_found (void)
{
  RlxStepBegins b = { 0 };
  guint epoch = 7, pos = 7;

  g_assert_false (rlx_step_begins_find (&b, 1, 1, &epoch, &pos));
  g_assert_false (rlx_step_begins_find (&b, 0, 0, &epoch, &pos));
  rlx_step_begins_note (&b, 3, 11, 2, 400);
  rlx_step_begins_note (&b, 3, 12, 2, 616);
  g_assert_true (rlx_step_begins_find (&b, 3, 11, &epoch, &pos));
  g_assert_cmpuint (epoch, ==, 2);
  g_assert_cmpuint (pos, ==, 400);
  g_assert_true (rlx_step_begins_find (&b, 3, 12, &epoch, &pos));
  g_assert_cmpuint (pos, ==, 616);
  /* a later frame naming the same step replaces its record */
  rlx_step_begins_note (&b, 3, 12, 3, 0);
  g_assert_true (rlx_step_begins_find (&b, 3, 12, &epoch, &pos));
  g_assert_cmpuint (epoch, ==, 3);
  g_assert_cmpuint (pos, ==, 0);
  /* four steps are kept: the fifth pushes the first out */
  rlx_step_begins_note (&b, 3, 13, 3, 216);
  rlx_step_begins_note (&b, 3, 14, 3, 432);
  rlx_step_begins_note (&b, 3, 15, 3, 648);
  g_assert_false (rlx_step_begins_find (&b, 3, 11, &epoch, &pos));
  g_assert_true (rlx_step_begins_find (&b, 3, 15, &epoch, &pos));
  g_assert_cmpuint (pos, ==, 648);
}

/* Step 11 of term 2 (a lineage this member followed before a merge) began
 * at 400; the leader of term 5 commits 10: its step 11 is not that one. */
static void
test_other_term (void)
{
  RlxStepBegins b = { 0 };
  guint epoch = 7, pos = 7;

  rlx_step_begins_note (&b, 2, 11, 0, 400);
  g_assert_false (rlx_step_begins_find (&b, 5, 11, &epoch, &pos));
  g_assert_cmpuint (epoch, ==, 7);
  g_assert_cmpuint (pos, ==, 7);
  g_assert_false (rlx_step_begins_find (&b, 1, 11, &epoch, &pos));
  rlx_step_begins_note (&b, 5, 11, 0, 912);
  g_assert_true (rlx_step_begins_find (&b, 5, 11, &epoch, &pos));
  g_assert_cmpuint (pos, ==, 912);
  g_assert_false (rlx_step_begins_find (&b, 2, 11, &epoch, &pos));
}

/* A snapshot loaded (of the same term, even) forgets every record. */
static void
test_cleared (void)
{
  RlxStepBegins b = { 0 };
  guint epoch = 7, pos = 7;

  for (guint64 s = 20; s < 24; s++)
    rlx_step_begins_note (&b, 4, s, 1, (guint) s * 10);
  rlx_step_begins_clear (&b);
  for (guint64 s = 20; s < 24; s++)
    g_assert_false (rlx_step_begins_find (&b, 4, s, &epoch, &pos));
  g_assert_false (rlx_step_begins_find (&b, 0, 0, &epoch, &pos));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/step-begins/found", test_found);
  g_test_add_func ("/step-begins/other-term", test_other_term);
  g_test_add_func ("/step-begins/cleared", test_cleared);
  return g_test_run ();
}
