/* rlx-node-remote.h — the remote side of a node: cohorts across machines
 *
 * A part of RlxNode (not a GObject of its own; the app and `rlx-rank join`
 * reach it through RlxNodeConfig). It holds what a node needs to take part
 * in a cohort on other machines:
 *
 *   identity    this machine's TLS certificate (rlx-identity.h)
 *   invite      the one pasted (joining), or the one made for a cohort this
 *               node founds (hosting: a key kept in
 *               $XDG_DATA_HOME/rlx-cluster/COHORT/invite-key, so a founder
 *               that restarts gives out the same invite)
 *   remote node signalling (served here when hosting), pairing, QUIC links
 *               (rlx-remote-node.h)
 *
 * The links the remote node makes go to the coordinator like the local
 * bus's — except to a peer the local bus already links: a local link to the
 * same peer wins (the caller reports local links with
 * rlx_node_remote_local_link_added before handing them over).
 *
 * A node joining by invite "holds start": its coordinator starts once a
 * member is linked (remote or local), right away if the signalling room was
 * empty (it founds the cohort: a standalone `rlx-rank signal` server's
 * first node). When no member is reached within 30 s it founds nothing: the
 * fail hook says why (the last signalling or link failure) and the node
 * leaves, its coordinator never started (no leader, no checkpoint).
 *
 * Threads: rlx_node_remote_prepare reads and writes files (identity, key)
 * and runs on a worker thread; everything else on the thread whose
 * thread-default main context runs, which also gets the hooks.
 */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>
#include "core/rlx-coordinator.h"
#include "core/p2p/rlx-invite.h"
#include "core/p2p/rlx-local-bus.h"
#include "core/p2p/rlx-quic.h"

G_BEGIN_DECLS

/* How a node reaches others when no direct path works, and QUIC's knobs;
 * all optional (zero: the defaults). */
typedef struct {
  const char *stun;                /* "HOST[:PORT]" */
  const char *turn;                /* "HOST[:PORT]" */
  const char *turn_user;
  const char *turn_password;
  gboolean    relay_only;          /* TURN-relayed candidates only (tests) */
  gsize       quic_payload;        /* largest UDP payload QUIC sends; 0: 1452 */
  RlxQuicCc   quic_cc;
  guint       connect_timeout_ms;  /* per pairing; 0: 20000 */
} RlxNodeRemoteTuning;

typedef struct {
  const char                *invite;        /* rlx://… to join, or NULL */
  guint16                    host_port;     /* found a cohort: serve signalling here; 0: no */
  const char                *host_address;  /* listen on this numeric address; NULL: all */
  const char                *advertise;     /* the host put in the invite; NULL: guessed */
  const char                *cohort;        /* the cohort to host (joining: the invite's) */
  const RlxNodeRemoteTuning *tuning;        /* NULL: defaults */
} RlxNodeRemoteConfig;

typedef struct {
  void (*event) (RlxEvent *event, gpointer user_data);   /* signalling, link-up, … */
  void (*link_added) (RlxLink *link, const char *peer_id,  /* already with the coordinator */
                      gpointer user_data);
  void (*fail)  (const char *message, gpointer user_data); /* cannot go on (wrong key,
                                                             no member reached) */
} RlxNodeRemoteHooks;

typedef struct _RlxNodeRemote RlxNodeRemote;

/* Checks @config (the invite's form, the names; nothing opened). NULL with
 * a message that says what is wrong (RLX_INVITE_ERROR_INVALID for a bad
 * invite, G_IO_ERROR_INVALID_ARGUMENT otherwise). @config is copied. */
RlxNodeRemote *rlx_node_remote_new       (const RlxNodeRemoteConfig *config, GError **error);
void           rlx_node_remote_free      (RlxNodeRemote *self);
/* Worker thread: load (or create) the identity; when hosting, the cohort
 * key and the invite. */
gboolean       rlx_node_remote_prepare   (RlxNodeRemote *self, GError **error);
/* Main thread, after prepare: start the remote node (serving signalling
 * when hosting: fails at once if the port is taken) and hand its links to
 * @coord. @bus: the node's local bus, whose links win. */
gboolean       rlx_node_remote_start     (RlxNodeRemote *self, RlxCoordinator *coord,
                                          RlxLocalBus *bus, const char *node_id,
                                          const RlxNodeRemoteHooks *hooks, gpointer user_data,
                                          GError **error);
/* The local bus linked @peer_id (before the coordinator gets the link):
 * drop a remote link or pairing to it. */
void           rlx_node_remote_local_link_added (RlxNodeRemote *self, const char *peer_id);
/* After the local link of rlx_node_remote_local_link_added is with the
 * coordinator: a node that holds its start starts now. */
void           rlx_node_remote_member_linked    (RlxNodeRemote *self);
/* Bye on signalling, every remote link closed, serving stopped. Idempotent. */
void           rlx_node_remote_stop      (RlxNodeRemote *self);
/* TRUE for a node joining by invite: it starts the coordinator itself (see
 * above); the caller must not. */
gboolean       rlx_node_remote_holds_start (RlxNodeRemote *self);
gboolean       rlx_node_remote_is_hosting  (RlxNodeRemote *self);
/* The cohort: the invite's, or the one hosted. */
const char    *rlx_node_remote_get_cohort  (RlxNodeRemote *self);
/* The invite others join with; NULL before prepare (hosting). */
char          *rlx_node_remote_dup_invite  (RlxNodeRemote *self);

/* The key of cohort @cohort kept under $XDG_DATA_HOME/rlx-cluster/COHORT
 * (drawn and written 0600 the first time). Blocking file I/O. */
gboolean       rlx_node_remote_cohort_key  (const char *cohort, guint8 key[RLX_INVITE_KEY_LEN],
                                            GError **error);
/* TRUE for NULL, 0.0.0.0 and :: (listening on every address). */
gboolean       rlx_node_remote_is_wildcard (const char *address);
/* An address others can probably reach: the first IPv4 of an interface
 * that is up and not loopback; else the host name. */
char          *rlx_node_remote_guess_host  (void);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxNodeRemote, rlx_node_remote_free)

G_END_DECLS
