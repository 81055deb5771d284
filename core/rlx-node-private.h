/* rlx-node-private.h — RlxNode's hooks for rlx-rank join's test switches
 *
 * Not for the app: --fault-partition closes links as if the network between
 * groups of nodes were cut, and needs the node's local bus for it.
 */
#pragma once

#include "core/rlx-node.h"
#include "core/p2p/rlx-local-bus.h"

G_BEGIN_DECLS

/* FALSE: close this local link instead of handing it to the coordinator. */
typedef gboolean (*RlxNodeLinkFilter) (const char *peer_id, gpointer user_data);

/* Set before start. */
void         rlx_node_set_link_filter (RlxNode *self, RlxNodeLinkFilter filter,
                                       gpointer user_data);
/* The local bus while the node runs, else NULL. Transfer none. */
RlxLocalBus *rlx_node_get_local_bus   (RlxNode *self);

G_END_DECLS
