/* test-fault-plan.c — the test faults a node injects, out of the public
 * config (core/cohort/rlx-fault-plan.h, core/rlx-coordinator-faults.h)
 */
#include "rlx-config.h"
#include "core/cohort/rlx-fault-plan.h"

static void
test_off (void)
{
  RlxFaultPlan plan = { 0 };

  for (guint64 step = 0; step < 100; step++)
    {
      g_assert_cmpint (rlx_fault_plan_gradient (&plan, step), ==, RLX_FAULT_NONE);
      g_assert_cmpuint (rlx_fault_plan_stall_us (&plan, step), ==, 0);
      g_assert_false (rlx_fault_plan_take_hash (&plan, step));
    }
}

static void
test_gradient (void)
{
  RlxFaultPlan plan = { .nan_from = 7, .inf_from = 3 };

  g_assert_cmpint (rlx_fault_plan_gradient (&plan, 2), ==, RLX_FAULT_NONE);
  g_assert_cmpint (rlx_fault_plan_gradient (&plan, 3), ==, RLX_FAULT_INF);
  g_assert_cmpint (rlx_fault_plan_gradient (&plan, 6), ==, RLX_FAULT_INF);
  /* from nan_from on, every gradient is NaN (NaN wins) */
  g_assert_cmpint (rlx_fault_plan_gradient (&plan, 7), ==, RLX_FAULT_NAN);
  g_assert_cmpint (rlx_fault_plan_gradient (&plan, 1000), ==, RLX_FAULT_NAN);
}

static void
test_stall (void)
{
  RlxFaultPlan plan = { .stall_step = 5, .stall_ms = 40 };

  g_assert_cmpuint (rlx_fault_plan_stall_us (&plan, 4), ==, 0);
  g_assert_cmpuint (rlx_fault_plan_stall_us (&plan, 5), ==, 40000);
  g_assert_cmpuint (rlx_fault_plan_stall_us (&plan, 6), ==, 0);
}

static void
test_hash_once (void)
{
  RlxFaultPlan plan = { .hash_at = 9 };

  g_assert_false (rlx_fault_plan_take_hash (&plan, 8));
  g_assert_true (rlx_fault_plan_take_hash (&plan, 9));
  /* used up: the node carries on as if nothing happened */
  g_assert_false (rlx_fault_plan_take_hash (&plan, 9));
  g_assert_cmpuint (plan.hash_at, ==, 0);
}

static void
test_momentum_once (void)
{
  RlxFaultPlan plan = { .momentum_at = 4 };

  g_assert_false (rlx_fault_plan_take_momentum (&plan, 3));
  g_assert_false (rlx_fault_plan_take_hash (&plan, 4));
  g_assert_true (rlx_fault_plan_take_momentum (&plan, 4));
  g_assert_false (rlx_fault_plan_take_momentum (&plan, 4));
  g_assert_cmpuint (plan.momentum_at, ==, 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cohort/fault-plan/off", test_off);
  g_test_add_func ("/cohort/fault-plan/gradient", test_gradient);
  g_test_add_func ("/cohort/fault-plan/stall", test_stall);
  g_test_add_func ("/cohort/fault-plan/hash-once", test_hash_once);
  g_test_add_func ("/cohort/fault-plan/momentum-once", test_momentum_once);
  return g_test_run ();
}
