/* rlx-node-faults.h — RlxNode's test hooks: rlx-rank join's hidden options
 *
 * Not for the app, and not part of RlxNodeConfig: protocol timings for
 * tests, the coordinator's test faults (core/cohort/rlx-fault-plan.h,
 * handed over with rlx_coordinator_set_fault_plan), a slower compute
 * worker, and --fault-partition, which closes links as if the network
 * between groups of nodes were cut and needs the node's local bus for it.
 *
 * Threads: the node's, before rlx_node_start_async (the local bus: while it
 * runs).
 */
#pragma once

#include "core/rlx-node.h"
#include "core/cohort/rlx-fault-plan.h"
#include "core/p2p/rlx-local-bus.h"

G_BEGIN_DECLS

/* Zero: off / the defaults. */
typedef struct {
  guint        deadline_floor_ms;    /* shortest collect deadline */
  guint        heartbeat_timeout_ms; /* silence that removes a peer */
  guint        slow_ms;              /* every gradient takes this much longer */
  guint        inner_ms;             /* every outer round's inner step but its last, too */
  RlxFaultPlan faults;               /* the coordinator's */
} RlxNodeTestSwitches;

/* Set before start; @switches is copied. */
void         rlx_node_set_test_switches (RlxNode *self, const RlxNodeTestSwitches *switches);

/* FALSE: close this local link instead of handing it to the coordinator. */
typedef gboolean (*RlxNodeLinkFilter) (const char *peer_id, gpointer user_data);

/* Set before start. */
void         rlx_node_set_link_filter (RlxNode *self, RlxNodeLinkFilter filter,
                                       gpointer user_data);
/* The local bus while the node runs, else NULL. Transfer none. */
RlxLocalBus *rlx_node_get_local_bus   (RlxNode *self);

G_END_DECLS
