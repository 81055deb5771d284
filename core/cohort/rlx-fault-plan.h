/* rlx-fault-plan.h — the test faults a node injects into its own cohort work
 *
 * Private to core/ (and to tests of it): not part of any public config.
 * A node gets its plan from `rlx-rank join`'s hidden options (through
 * RlxNodeTestSwitches, core/rlx-node-faults.h) and hands it to its
 * coordinator with rlx_coordinator_set_fault_plan
 * (core/rlx-coordinator-faults.h) before rlx_coordinator_start. Every field zero: no fault (the default).
 *
 * Threads: a plain value, read and written on the coordinator's thread; the
 * compute worker only sees what a queued job copied out of it.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef enum {
  RLX_FAULT_NONE,
  RLX_FAULT_NAN,      /* every gradient value NaN */
  RLX_FAULT_INF,      /* values 0 and 1 +Inf and −Inf */
  RLX_FAULT_HUGE,     /* value 0 is 1e20: finite, and an absurd norm */
} RlxFault;

typedef struct {
  guint64 nan_from;     /* NaN gradients from this step; 0: off */
  guint64 inf_from;     /* ±Inf in the gradient from this step; 0: off */
  guint64 huge_from;    /* a gradient of absurd norm (one value 1e20) from this step; 0: off */
  guint64 hash_at;      /* after committing this step, this node's parameters differ
                         * from the cohort's (one bit); 0: off */
  guint64 momentum_at;  /* in the outer mode, after committing this step, this node's
                         * outer momentum differs from the cohort's (its first value
                         * raised by 1); θ does not; 0: off */
  guint64 stall_step;   /* the gradient of this step takes stall_ms longer (on the
                         * compute thread); 0: off */
  guint   stall_ms;
  guint64 die_at;       /* as the leader, send the commit of this step to every member
                         * but the next in seniority, wait until it is written, and die
                         * (SIGKILL); 0: off */
  gboolean claim_fast;  /* every gradient says it took 1 µs (compute_us): a member
                         * lying about its speed to take most of each round */
  guint    eval_ms;     /* every evaluation of the test split (evaluate_every, and
                         * the node's evaluate_at_end) passes over it again and again
                         * until it ran this long, inside BLAS as a real one is; a
                         * leave still stops it: the test of leaving while an
                         * evaluation runs; 0: off */
  guint    claim_members;  /* as a leader, every hello claims this many members; 0: off */
  guint64  claim_step;     /* ... and this committed step; 0: off (a leader lying to win
                            * the merge rule, issue 29 item 9) */
  char     claim_follows[65]; /* as a member, every heartbeat (and hello) says it
                               * follows this node; "": off (a member counted by a
                               * leader it does not follow, issue 29 item 13) */
  guint64  refuse_finish_at; /* as the leader, the finish of this step applies nothing,
                              * once, as one whose update is not finite: the round is
                              * abandoned and runs again; 0: off */
} RlxFaultPlan;

/* The fault the gradient of @step gets (NaN wins over Inf, Inf over huge). */
RlxFault rlx_fault_plan_gradient (const RlxFaultPlan *plan, guint64 step);
/* How much longer the gradient of @step takes, µs (0: no stall). */
guint64  rlx_fault_plan_stall_us (const RlxFaultPlan *plan, guint64 step);
/* TRUE once, when @step is the one whose committed parameters diverge
 * (the fault is used up: the node carries on as if nothing happened). */
gboolean rlx_fault_plan_take_hash (RlxFaultPlan *plan, guint64 step);
/* TRUE once, when @step is the one whose committed momentum diverges. */
gboolean rlx_fault_plan_take_momentum (RlxFaultPlan *plan, guint64 step);
/* TRUE once, when @step is the one whose finish applies nothing. */
gboolean rlx_fault_plan_take_finish (RlxFaultPlan *plan, guint64 step);

G_END_DECLS
