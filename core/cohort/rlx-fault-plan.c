/* rlx-fault-plan.c — the test faults a node injects (rlx-fault-plan.h) */
#include "rlx-config.h"
#include "rlx-fault-plan.h"

RlxFault
rlx_fault_plan_gradient (const RlxFaultPlan *plan, guint64 step)
{
  if (plan->nan_from > 0 && step >= plan->nan_from)
    return RLX_FAULT_NAN;
  if (plan->inf_from > 0 && step >= plan->inf_from)
    return RLX_FAULT_INF;
  if (plan->huge_from > 0 && step >= plan->huge_from)
    return RLX_FAULT_HUGE;
  return RLX_FAULT_NONE;
}

guint64
rlx_fault_plan_stall_us (const RlxFaultPlan *plan, guint64 step)
{
  if (plan->stall_step > 0 && step == plan->stall_step)
    return (guint64) plan->stall_ms * 1000;
  return 0;
}

/* A one-time fault at step *@at: TRUE once, when @step is it. */
static gboolean
take_once (guint64 *at, guint64 step)
{
  if (*at == 0 || step != *at)
    return FALSE;
  *at = 0;
  return TRUE;
}

gboolean
rlx_fault_plan_take_hash (RlxFaultPlan *plan, guint64 step)
{
  return take_once (&plan->hash_at, step);
}

gboolean
rlx_fault_plan_take_momentum (RlxFaultPlan *plan, guint64 step)
{
  return take_once (&plan->momentum_at, step);
}

gboolean
rlx_fault_plan_take_finish (RlxFaultPlan *plan, guint64 step)
{
  return take_once (&plan->refuse_finish_at, step);
}
