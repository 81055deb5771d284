/* rlx-signal-server.h — the signalling server (libsoup 3 WebSocket)
 *
 * Served by the node that founds a cohort (on the invite's port) and by
 * `rlx-rank signal --port P` for long-lived deployments. Clients connect a
 * WebSocket to ws://HOST:PORT/rlx/signal, join a room (one per cohort) and
 * exchange envelopes (rlx-signal-msg.h); the server routes them within the
 * room and adds peer-joined / peer-left. It never sees the cohort key and
 * is never trusted: every message between nodes is sealed end to end.
 *
 * It protects itself against clients without the key (it cannot tell them
 * from real ones, so no cap is one that such clients can use up for others):
 *   - before the upgrade (rlx-signal-listener.h): caps on connections in
 *     total and per address, a deadline for the headers, the descriptor
 *     limit raised and respected, and a listener that keeps accepting;
 *   - a message cap (RLX_SIGNAL_MAX_MESSAGE, also across WebSocket
 *     fragments), a per-client message rate (token bucket), a connection
 *     that keeps sending garbage is closed;
 *   - bytes queued towards each client, and in total: a client that does
 *     not read what it is sent is dropped (with an event) and its queue freed;
 *   - pings every ping interval whatever else the client sends, each with a
 *     random nonce that only a client reading its messages can answer, and
 *     a pong deadline (a join deadline before that);
 *   - caps on clients, rooms and members per room, and per address: rooms
 *     an address is in, members an address has in one room;
 *   - a node id in a room is held by its first connection: a second join
 *     with the same id makes the server ping the holder, which keeps the id
 *     if it answers within the probe timeout (the newcomer is refused), and
 *     loses it if not (a node that reconnects before its old connection was
 *     noticed dead gets its id back that way).
 * Anything that is not a WebSocket upgrade on /rlx/signal gets a plain HTTP
 * error. Nothing it receives can crash it.
 *
 * Threads: create and use on one thread whose thread-default main context
 * runs; all I/O is asynchronous on it.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct {
  guint max_clients;          /* upgraded connections; 0: 1024 */
  guint max_rooms;            /* 0: 1024 */
  guint max_members;          /* per room; 0: 64 */
  guint rate_per_s;           /* messages per second per client; 0: 50 */
  guint burst;                /* 0: 200 */
  guint join_timeout_ms;      /* 0: 10000 */
  guint ping_interval_ms;     /* 0: 5000 */
  guint pong_timeout_ms;      /* 0: 15000 */
  /* before the upgrade (RlxSignalListenerLimits) */
  guint max_pending;          /* 0: 256 */
  guint max_pending_per_addr; /* 0: 16 */
  guint max_per_addr;         /* all connections of one address; 0: 64 */
  guint header_timeout_ms;    /* accept → end of the upgrade request; 0: 5000 */
  /* queues, rooms, names */
  guint max_queued;           /* bytes waiting towards one client; 0: 256 KiB */
  guint max_queued_total;     /* bytes waiting towards all clients; 0: 32 MiB */
  guint max_rooms_per_addr;   /* rooms one address is in; 0: 16 */
  guint max_members_per_addr; /* members one address has in one room; 0: 16 */
  guint probe_timeout_ms;     /* a node id's holder must answer within; 0: 2000 */
} RlxSignalServerLimits;

#define RLX_TYPE_SIGNAL_SERVER (rlx_signal_server_get_type ())
G_DECLARE_FINAL_TYPE (RlxSignalServer, rlx_signal_server, RLX, SIGNAL_SERVER, GObject)

/* Signals:
 *   ::event (const char *what, const char *room, const char *node, const char *detail)
 *       for logs: "joined", "left", "refused", "dropped" (a rule broken). */

RlxSignalServer *rlx_signal_server_new    (const RlxSignalServerLimits *limits);
/* Listen on @address (numeric; NULL: every address, IPv4 and IPv6) and
 * @port (0: any free port). */
gboolean         rlx_signal_server_listen (RlxSignalServer *self, const char *address,
                                           guint16 port, GError **error);
guint16          rlx_signal_server_get_port (RlxSignalServer *self);
void             rlx_signal_server_stop   (RlxSignalServer *self);
guint            rlx_signal_server_get_n_clients (RlxSignalServer *self);
guint            rlx_signal_server_get_n_rooms   (RlxSignalServer *self);
/* Connections not yet upgraded. */
guint            rlx_signal_server_get_n_pending (RlxSignalServer *self);
/* The founding node of a cohort serves this server (not `rlx-rank signal`):
 * every welcome says "hosted", so a joiner that finds its room empty knows
 * its key is not the cohort's (the founder is always in the cohort's room).
 * It says nothing about any room; the room ids stay opaque names. */
void             rlx_signal_server_set_hosted    (RlxSignalServer *self, gboolean hosted);

G_END_DECLS
