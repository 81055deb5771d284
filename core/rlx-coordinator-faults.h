/* rlx-coordinator-faults.h — giving a coordinator its test faults
 *
 * Private to core/ and its tests: the public RlxCoordinatorConfig carries
 * no test switch. rlx-node.c hands the plan from RlxNodeTestSwitches
 * (core/rlx-node-faults.h) over here; a test that builds a coordinator
 * itself may do the same.
 *
 * Threads: the coordinator's (before rlx_coordinator_start).
 */
#pragma once

#include "core/rlx-coordinator.h"
#include "core/cohort/rlx-fault-plan.h"

G_BEGIN_DECLS

/* @plan is copied; NULL clears it. */
void rlx_coordinator_set_fault_plan (RlxCoordinator *self, const RlxFaultPlan *plan);

/* How many test-accuracy evaluations (evaluate_every) run on their threads
 * now: a leave completes only once none does. */
guint rlx_coordinator_get_evaluations (RlxCoordinator *self);

G_END_DECLS
