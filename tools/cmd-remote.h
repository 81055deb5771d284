/* cmd-remote.h — the options for the remote side of `rlx-rank join`
 *
 *   rlx-rank join --host [ADDR:]PORT [--cohort NAME]   found a cohort others
 *                                   can reach: serve signalling on PORT and
 *                                   print the invite (with --json an "invite"
 *                                   event with an "invite" field)
 *   rlx-rank join INVITE            join it from another machine
 *   --stun HOST[:PORT] --turn HOST[:PORT] --turn-user U --turn-password P
 *
 * cmd-join.c adds the option group and hands over its positional
 * arguments; the result goes into its RlxNodeConfig, and the node's remote
 * side (core/rlx-node-remote.h) does the rest.
 */
#pragma once

#include <glib.h>
#include "core/rlx-node.h"

G_BEGIN_DECLS

typedef struct _RlxJoinRemote RlxJoinRemote;

RlxJoinRemote *rlx_join_remote_new     (void);
void           rlx_join_remote_free    (RlxJoinRemote *self);
/* The options above; they fill @self when the context is parsed. */
GOptionGroup  *rlx_join_remote_options (RlxJoinRemote *self);
/* After parsing: take an INVITE from the positional arguments (argv[1..]),
 * check the options agree, set *@cohort (from the invite, or the default
 * name for --host) and the remote fields of @config (pointing into @self,
 * which must outlive the node). FALSE with a usage message in @error. */
gboolean       rlx_join_remote_configure (RlxJoinRemote *self, int argc, char **argv,
                                          char **cohort, RlxNodeConfig *config,
                                          GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxJoinRemote, rlx_join_remote_free)

G_END_DECLS
