/* cmd-remote.h — the remote side of `rlx-rank join`, kept out of cmd-join.c
 *
 *   rlx-rank join --host [ADDR:]PORT [--cohort NAME]   found a cohort others
 *                                   can reach: serve signalling on PORT and
 *                                   print the invite (with --json an "invite"
 *                                   event with an "invite" field)
 *   rlx-rank join INVITE            join it from another machine
 *   --stun HOST[:PORT] --turn HOST[:PORT] --turn-user U --turn-password P
 *
 * cmd-join.c adds the option group, hands over its positional arguments,
 * and starts/stops the hook around its main loop; links the remote node
 * makes go to the coordinator like the local bus's, except to a peer the
 * local bus already links (the local link wins).
 */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>
#include "core/rlx-coordinator.h"
#include "core/p2p/rlx-local-bus.h"

G_BEGIN_DECLS

typedef struct _RlxJoinRemote RlxJoinRemote;

typedef void (*RlxJoinPrintFunc) (JsonObject *event, gpointer user_data);
/* The node cannot go on (a wrong key): leave with failure and @message. */
typedef void (*RlxJoinFailFunc)  (const char *message, gpointer user_data);

RlxJoinRemote *rlx_join_remote_new     (void);
void           rlx_join_remote_free    (RlxJoinRemote *self);
/* The options above; they fill @self when the context is parsed. */
GOptionGroup  *rlx_join_remote_options (RlxJoinRemote *self);
/* After parsing: take an INVITE from the positional arguments (argv[1..]),
 * check the options agree, and set *@cohort (from the invite, or the
 * default name for --host). FALSE with a usage message in @error. */
gboolean       rlx_join_remote_configure (RlxJoinRemote *self, int argc, char **argv,
                                          char **cohort, GError **error);
gboolean       rlx_join_remote_is_remote (RlxJoinRemote *self);
/* Identity, invite, remote node; links to @coord. FALSE with a message a
 * person can act on (a port in use, an unreadable identity, …). */
gboolean       rlx_join_remote_start   (RlxJoinRemote *self, RlxCoordinator *coord,
                                        RlxLocalBus *bus, const char *node_id,
                                        RlxJoinPrintFunc print, RlxJoinFailFunc fail,
                                        gpointer user_data, GError **error);
void           rlx_join_remote_stop    (RlxJoinRemote *self);
/* TRUE when the hook starts the coordinator itself (a node joining by
 * invite): once a member is linked (remote or local), right away if the
 * signalling room was empty, or after the join timeout (with an event
 * saying no member could be reached). cmd-join then must not. */
gboolean       rlx_join_remote_holds_start (RlxJoinRemote *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxJoinRemote, rlx_join_remote_free)

G_END_DECLS
