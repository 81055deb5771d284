/* rlx-remote-node.h — the remote side of one node: signalling, pairing, links
 *
 * The counterpart of RlxLocalBus for other machines. It joins the room its
 * cohort key names (rlx-signal-msg.h) on the signalling server named by
 * the invite (and, for the node that founds the cohort, serves that
 * signalling itself), announces itself, and pairs up with every other node
 * in the room:
 *
 *   hello   {fp, host, ch?, echo?}     broadcast on every (re)join with a
 *                                      fresh challenge ch; a node that hears
 *                                      a broadcast hello answers with a hello
 *                                      addressed to the sender
 *   offer   {att, ufrag, pwd, fp}      from the node with the lower id (ICE
 *                                      controlling, QUIC client) to the other
 *   answer  {att, ufrag, pwd, fp}      back
 *   cand    {att, c}  /  eoc {att}     trickled ICE candidates, both ways
 *   bye     {}                         leaving for good
 *
 * all sealed (encrypted and authenticated) with keys derived from the
 * cohort key; the fingerprints in them are what each link's TLS handshake
 * pins. A session (a sender's process) is trusted only once it answered a
 * challenge: its hello echoes (echo) a challenge this node drew — the one
 * of its broadcast hello, or one sent to it in a hello of ours (ch). Until
 * then its hellos only get a challenge back and its other messages are
 * rejected, so a recorded session replayed to a node that never saw it
 * opens nothing. A link that comes up is reported by ::link-added — exactly
 * like the local bus, so the caller hands it to the coordinator — and its
 * end by ::link-removed. A pairing that fails says why in an "link-failed"
 * event, and the controlling side tries again with a growing delay (1 s
 * doubling to 10 s; sooner on rlx_remote_node_rescan) while the peer is in
 * the room; a node that drops off
 * (link down, signalling lost) and comes back pairs again by itself.
 *
 * Nothing unauthenticated ends a join: notices from the room are logged and
 * ignored, and who else is in the room proves nothing. A joining node that
 * has authenticated nothing within the deadline (auth_deadline_ms) on the
 * founding node's own server ("hosted": its founder is always in the
 * cohort's room) is refused (::refused with RLX_REMOTE_ERROR_KEY_REFUSED,
 * saying the key is probably wrong). On a standalone server (`rlx-rank
 * signal`) an empty room is a cohort to found, so there a wrong key founds
 * a cohort of its own, alone: nothing can tell it from the first member.
 *
 * Events (::event, a typed RlxEvent, core/event/rlx-event.h), for the
 * JSON-lines stream:
 *   signalling   state ("joined" | "lost" | "unreachable" | "refused"), reason,
 *                server, peers (how many other nodes were in the room when it
 *                joined), hosted (the server is the founding node's own);
 *                "unreachable": not joined yet (it retries), "lost": joined once
 *   link-up      node, path (e.g. "host/host 10.0.0.2:41234"), rtt_us
 *   link-down    node, reason, code
 *   link-failed  node, reason, code  (code: ice-failed, pin-mismatch,
 *                                      timeout, tls, protocol, …)
 *   rejected     node, reason        (a signalling message refused)
 *
 * Threads: create and use on one thread whose thread-default main context
 * runs; signals are emitted there.
 */
#pragma once

#include <glib-object.h>
#include <json-glib/json-glib.h>
#include "core/p2p/rlx-link.h"
#include "core/event/rlx-event.h"
#include "core/p2p/rlx-identity.h"
#include "core/p2p/rlx-invite.h"
#include "core/p2p/rlx-quic.h"
#include "core/p2p/rlx-remote-error.h"

G_BEGIN_DECLS

typedef struct {
  const RlxInvite *invite;            /* where signalling is, the cohort, the key */
  const char      *node_id;           /* a valid name; unique in the cohort */
  const char      *host_name;         /* announced; NULL: g_get_host_name () */
  RlxIdentity     *identity;
  gboolean         serve;             /* found the cohort: serve signalling */
  const char      *listen_address;    /* serve on this numeric address; NULL: all */
  const char      *stun;              /* "HOST[:PORT]" or NULL */
  const char      *turn;              /* "HOST[:PORT]" or NULL */
  const char      *turn_user;
  const char      *turn_password;
  gboolean         relay_only;        /* TURN-relayed candidates only */
  gsize            max_udp_payload;   /* 0: RlxQuic's default */
  RlxQuicCc        cc;
  guint            connect_timeout_ms;   /* per pairing; 0: 20000 */
  guint            idle_timeout_ms;      /* QUIC idle timeout; 0: 10000 */
  guint            auth_deadline_ms;     /* a joiner that authenticates nothing in
                                          * this time is refused; 0: 10000 */
  gsize            max_frame;            /* largest frame of each link's bulk lane;
                                          * 0: RlxRemoteLink's default (64 MiB) */
} RlxRemoteNodeConfig;

/* TRUE if the node should not pair with @peer_id (e.g. it is already
 * linked over the local bus). */
typedef gboolean (*RlxRemoteSkipFunc) (const char *peer_id, gpointer user_data);

#define RLX_TYPE_REMOTE_NODE (rlx_remote_node_get_type ())
G_DECLARE_FINAL_TYPE (RlxRemoteNode, rlx_remote_node, RLX, REMOTE_NODE, GObject)

/* Signals:
 *   ::link-added   (RlxLink *link, const char *peer_id)
 *   ::link-removed (RlxLink *link, const char *peer_id)
 *   ::event        (RlxEvent *event)   read-only
 *   ::refused      (const GError *error)   fatal: this node cannot join */

RlxRemoteNode *rlx_remote_node_new   (const RlxRemoteNodeConfig *config, GError **error);
void           rlx_remote_node_set_skip_func (RlxRemoteNode *self, RlxRemoteSkipFunc func,
                                              gpointer user_data);
/* Serve signalling (if asked; fails at once if the port is taken), resolve
 * the STUN/TURN servers, then join the room (asynchronously). */
gboolean       rlx_remote_node_start (RlxRemoteNode *self, GError **error);
/* Say bye, close every link (each emits ::link-removed), leave the room,
 * stop serving. Idempotent. */
void           rlx_remote_node_stop  (RlxRemoteNode *self);
/* The port signalling is served on (0 when not serving). */
guint16        rlx_remote_node_get_port (RlxRemoteNode *self);
/* Node ids of the peers with a live link, sorted; free with g_strfreev. */
char         **rlx_remote_node_dup_peer_ids (RlxRemoteNode *self);
RlxLink       *rlx_remote_node_get_link (RlxRemoteNode *self, const char *peer_id);
/* Drop the link or pairing with @peer_id (if any) without retrying until
 * the peer says hello again; used when a local link to it appears. */
void           rlx_remote_node_forget_peer (RlxRemoteNode *self, const char *peer_id);
/* Look now for every node of the room this one knows, has no link to and
 * would try again later (its retry is pending): what that retry does — an
 * attempt, or after MAX_FAILED_ATTEMPTS failed ones a challenge — now
 * instead of after the backoff (which stays). The node calls it on its
 * coordinator's ::discover, every 2 s while a leader has nodes it has no
 * link to, so two groups on two hosts meet on the cadence they do on one. */
void           rlx_remote_node_rescan (RlxRemoteNode *self);

G_END_DECLS
