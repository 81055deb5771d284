/* cmd-remote.h — the options for the remote side of `rlx-rank join`
 *
 *   rlx-rank join --host [ADDR:]PORT [--cohort NAME]   found a cohort others
 *                                   can reach: serve signalling on PORT and
 *                                   print the invite (with --json an "invite"
 *                                   event with an "invite" field)
 *   rlx-rank join --invite-file FILE | --invite - | RLX_INVITE=…
 *                                   join it from another machine, the key
 *                                   out of the arguments (a file only this
 *                                   user may read, standard input, the
 *                                   environment); `rlx-rank join INVITE`
 *                                   still works, with a warning
 *   --stun HOST[:PORT] --turn HOST[:PORT] --turn-user U --turn-password-file F
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
/* After parsing: take the invite (INVITE in argv[1], --invite, --invite-file
 * or RLX_INVITE unless @local), check the options agree, set *@cohort (from
 * the invite, or the default name for --host) and the remote fields of
 * @config (pointing into @self, which must outlive the node). FALSE with a
 * usage message in @error. */
gboolean       rlx_join_remote_configure (RlxJoinRemote *self, int argc, char **argv,
                                          gboolean local, char **cohort,
                                          RlxNodeConfig *config, GError **error);
/* Write @invite to @path, mode 0600 (for --invite-file on another machine). */
gboolean       rlx_write_invite_file     (const char *path, const char *invite, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxJoinRemote, rlx_join_remote_free)

G_END_DECLS
