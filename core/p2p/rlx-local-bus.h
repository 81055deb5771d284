/* rlx-local-bus.h — the same-machine mesh of one cohort (Unix sockets)
 *
 * The native counterpart of the seed's BroadcastChannel: every node of cohort
 * NAME on this machine listens on
 *
 *     $XDG_RUNTIME_DIR/rlx-cluster/NAME/NODEID.sock
 *
 * (g_get_user_runtime_dir () when XDG_RUNTIME_DIR is unset), and holds one
 * RlxLink to every other node listening there. Both directories are created
 * mode 0700; a directory that is not a real directory, not owned by us, or
 * not mode 0700 is refused (RLX_LOCAL_BUS_ERROR_DIRECTORY) — never used, never
 * "fixed". Every accepted or made connection has its peer uid checked
 * (g_socket_get_credentials); another uid is refused.
 *
 * Start: the node removes a stale NODEID.sock of its own (one that refuses
 * connection: a dead process's), fails with RLX_LOCAL_BUS_ERROR_IN_USE if a
 * live process already listens on it, listens, then connects to every other
 * *.sock in the directory; sockets that refuse connection (ECONNREFUSED) are
 * stale and removed. Later arrivals connect to us (each node binds before it
 * lists the directory, so of two nodes starting together at least one sees
 * the other).
 *
 * Handshake: the first frame on every connection is a bus handshake (node id
 * of the connecting side; the accepting side answers accept or decline), so
 * the coordinator only ever sees links whose peer node id is known. When two
 * nodes connect to each other at the same moment, the connection made by the
 * node with the lower node id (strcmp) is kept, on both sides; the other is
 * closed before either side reports it. Hence:
 *
 *   ::link-added (RlxLink *link, const char *peer_id)
 *       exactly once per live peer connection, on both sides. The link is
 *       ready: connect to its ::frame and ::closed signals *inside the
 *       handler* — frames the peer sent right after the handshake are
 *       delivered as soon as the handler returns. The bus holds a reference
 *       until the link closes; take your own (g_object_ref) to keep it.
 *   ::link-removed (RlxLink *link, const char *peer_id)
 *       the link closed (bye, EOF, error, rlx_local_bus_stop); emitted after
 *       the link's own ::closed. A node that reconnects later (same id, new
 *       process) gets a new ::link-added.
 *
 * Frames are whole wire messages (core/wire), at most max_frame bytes each
 * (RLX_UNIX_LINK_DEFAULT_MAX_FRAME unless set before start).
 *
 * Stop (rlx_local_bus_stop, or dispose) closes every link (each emits
 * ::closed and the bus ::link-removed), stops listening and removes our
 * socket file. The directory itself is left (other nodes may be in it).
 *
 * Threads: create, start, use and stop on one thread; all signals are emitted
 * on the thread-default main context current at rlx_local_bus_new; that
 * context must be running (a GMainLoop) for anything to happen.
 */
#pragma once

#include <glib-object.h>
#include "core/p2p/rlx-link.h"
#include "core/p2p/rlx-shaped-link.h"

G_BEGIN_DECLS

#define RLX_LOCAL_BUS_ERROR (rlx_local_bus_error_quark ())
GQuark rlx_local_bus_error_quark (void);
typedef enum {
  RLX_LOCAL_BUS_ERROR_NAME,        /* cohort name or node id not [A-Za-z0-9._-]{1,64},
                                    * or "." / ".."; or the socket path too long */
  RLX_LOCAL_BUS_ERROR_DIRECTORY,   /* cannot create, not ours, not 0700, symlink */
  RLX_LOCAL_BUS_ERROR_IN_USE,      /* a live process listens on NODEID.sock */
  RLX_LOCAL_BUS_ERROR_FAILED,      /* socket/bind/listen failed (message says why) */
} RlxLocalBusError;

#define RLX_TYPE_LOCAL_BUS (rlx_local_bus_get_type ())
G_DECLARE_FINAL_TYPE (RlxLocalBus, rlx_local_bus, RLX, LOCAL_BUS, GObject)

/* TRUE if @name is usable as a cohort name or node id: 1..64 characters of
 * [A-Za-z0-9._-], and not "." or "..". */
gboolean     rlx_local_bus_name_is_valid (const char *name);

/* The directory of cohort @cohort: $XDG_RUNTIME_DIR/rlx-cluster/@cohort
 * (nothing is created or checked). NULL with RLX_LOCAL_BUS_ERROR_NAME if
 * @cohort is not a valid name. */
char        *rlx_local_bus_dir_for_cohort (const char *cohort, GError **error);

/* A bus for node @node_id of cohort @cohort (directory as above). Nothing
 * touches the file system until rlx_local_bus_start. NULL with
 * RLX_LOCAL_BUS_ERROR_NAME if either name is invalid. */
RlxLocalBus *rlx_local_bus_new          (const char *cohort, const char *node_id,
                                         GError **error);
/* Same, with an explicit directory (tests; "--bus-dir"). @dir is created
 * (mode 0700, parent must exist) and checked like the default one. */
RlxLocalBus *rlx_local_bus_new_for_dir  (const char *dir, const char *node_id,
                                         GError **error);

/* Largest frame accepted and sent on this bus's links; call before start.
 * 0 restores the default (RLX_UNIX_LINK_DEFAULT_MAX_FRAME). */
void         rlx_local_bus_set_max_frame (RlxLocalBus *self, gsize max_frame);

/* Make every link of this bus a slow network (rlx-shaped-link.h): links
 * added from now on are wrapped in an RlxShapedLink with @shape (copied);
 * NULL stops wrapping. The bus reads RLX_LINK_SHAPE from the environment
 * when it is made, so a multi-process test can shape a whole cohort. */
void         rlx_local_bus_set_link_shape (RlxLocalBus *self, const RlxLinkShape *shape);

/* Check/create the directory, remove stale sockets, listen, connect to the
 * nodes already there. Returns at once (connections complete on the main
 * context; watch ::link-added). FALSE with an error naming the path and what
 * to do. Calling it twice is a programming error. */
gboolean     rlx_local_bus_start        (RlxLocalBus *self, GError **error);
/* Look at the directory again and connect to every node we have no link
 * (or connection in progress) to. start does this once; call it when a peer
 * is expected but no ::link-added came (the bus also retries by itself after
 * a declined handshake). Safe at any time after start: a connection that
 * would duplicate a link is resolved by the handshake, never reported twice. */
void         rlx_local_bus_rescan       (RlxLocalBus *self);
/* Close all links, stop listening, remove our socket. Idempotent. */
void         rlx_local_bus_stop         (RlxLocalBus *self);

const char  *rlx_local_bus_get_node_id  (RlxLocalBus *self);
const char  *rlx_local_bus_get_dir      (RlxLocalBus *self);
/* Path of our NODEID.sock. */
const char  *rlx_local_bus_get_socket_path (RlxLocalBus *self);

/* Node ids of the peers we currently hold an open link to, sorted (strcmp),
 * NULL-terminated; free with g_strfreev. Never includes our own id. */
char       **rlx_local_bus_dup_peer_ids (RlxLocalBus *self);
/* Incoming connections that have not said hello yet (at most 64; one more
 * closes the oldest; each has 5 s to say it). */
guint        rlx_local_bus_get_n_pre_hello (RlxLocalBus *self);
/* The open link to @peer_id, or NULL. Transfer none. */
RlxLink     *rlx_local_bus_get_link     (RlxLocalBus *self, const char *peer_id);
/* Node ids that have a socket in the directory right now (live or not yet
 * probed; ours excluded), sorted, NULL-terminated; free with g_strfreev.
 * A cheap directory listing, for "who else is here" before links exist. */
char       **rlx_local_bus_list_nodes   (RlxLocalBus *self);
/* Node ids whose process lives but does not answer: its socket accepted
 * our connection (or its backlog was full) and no handshake came back yet,
 * or it did not come within the handshake timeout and it has not answered
 * since (a stopped or starved process). Sorted, NULL-terminated; free with
 * g_strfreev. A node must not found a cohort over such peers: they may
 * hold a cohort's newest state. */
char       **rlx_local_bus_dup_unanswered (RlxLocalBus *self);

G_END_DECLS
