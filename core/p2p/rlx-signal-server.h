/* rlx-signal-server.h — the signalling server (libsoup 3 WebSocket)
 *
 * Served by the node that founds a cohort (on the invite's port) and by
 * `rlx-rank signal --port P` for long-lived deployments. Clients connect a
 * WebSocket to ws://HOST:PORT/rlx/signal, join a room (one per cohort) and
 * exchange envelopes (rlx-signal-msg.h); the server routes them within the
 * room and adds peer-joined / peer-left. It never sees the cohort key and
 * is never trusted: every message between nodes is sealed end to end.
 *
 * It protects itself: a message cap (RLX_SIGNAL_MAX_MESSAGE, also across
 * WebSocket fragments), a per-client message rate (token bucket), caps on
 * clients, rooms and members per room, a join deadline, application-level
 * pings with a pong deadline, and a connection that keeps sending garbage
 * is closed. Anything that is not a WebSocket upgrade on /rlx/signal gets a
 * plain HTTP error. Nothing it receives can crash it.
 *
 * Threads: create and use on one thread whose thread-default main context
 * runs; all I/O is asynchronous on it.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct {
  guint max_clients;          /* 0: 1024 */
  guint max_rooms;            /* 0: 256 */
  guint max_members;          /* per room; 0: 64 */
  guint rate_per_s;           /* messages per second per client; 0: 50 */
  guint burst;                /* 0: 200 */
  guint join_timeout_ms;      /* 0: 10000 */
  guint ping_interval_ms;     /* 0: 5000 */
  guint pong_timeout_ms;      /* 0: 15000 */
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
/* The founding node of a cohort serves this server (not `rlx-rank signal`):
 * every welcome says "hosted", so a joiner that finds its room empty knows
 * its key is not the cohort's (the founder is always in the cohort's room).
 * It says nothing about any room; the room ids stay opaque names. */
void             rlx_signal_server_set_hosted    (RlxSignalServer *self, gboolean hosted);

G_END_DECLS
