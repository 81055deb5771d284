/* rlx-signal-client.h — one node's connection to the signalling server
 *
 * Connects a WebSocket to ws://HOST:PORT/rlx/signal, joins a room (for a
 * node: the one its cohort key names, rlx_signal_auth_get_room) under its
 * node id, and passes envelopes both ways (see
 * rlx-signal-msg.h). It keeps itself connected: a lost or refused
 * connection is reported (::lost) and retried with a growing delay (0.25 s
 * doubling to 5 s) until rlx_signal_client_stop; every (re)join is reported
 * by ::joined. Application-level pings go both ways: a server silent for
 * the pong timeout counts as lost. A fatal refusal by the server (room
 * full, …) is reported by ::refused and retried more slowly (30 s).
 *
 * The server is not trusted: what it forwards is only ever handed on as a
 * sealed message for RlxSignalAuth to check, and it cannot make the client
 * buffer without end (RlxCappedInputStream under the WebSocket, a cap on
 * the HTTP response).
 *
 * Threads: create and use on one thread whose thread-default main context
 * runs; all I/O is asynchronous on it.
 */
#pragma once

#include <gio/gio.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

#define RLX_TYPE_SIGNAL_CLIENT (rlx_signal_client_get_type ())
G_DECLARE_FINAL_TYPE (RlxSignalClient, rlx_signal_client, RLX, SIGNAL_CLIENT, GObject)

/* Signals:
 *   ::joined      (GStrv peers)                  in the room; @peers were there
 *   ::message     (const char *from, JsonNode *sealed)   unverified: open it
 *   ::notice      (const char *from, const char *notice)
 *   ::peer-joined (const char *node)   ::peer-left (const char *node)   (hints)
 *   ::lost        (const GError *error)   the connection failed or dropped;
 *                                          it retries by itself
 *   ::refused     (const char *reason)    the server refused us (fatal op) */

RlxSignalClient *rlx_signal_client_new   (const char *host, guint16 port, const char *room,
                                          const char *node_id);
/* Tests: shorter pings/timeouts (ms). */
void             rlx_signal_client_set_timing (RlxSignalClient *self, guint ping_ms,
                                               guint timeout_ms);
void             rlx_signal_client_start (RlxSignalClient *self);
void             rlx_signal_client_stop  (RlxSignalClient *self);
gboolean         rlx_signal_client_is_joined (RlxSignalClient *self);
/* The last welcome said the server is a founding node's own (see
 * rlx_signal_server_set_hosted). */
gboolean         rlx_signal_client_is_hosted (RlxSignalClient *self);
/* Send a sealed message to @to (a node id or "*"). FALSE when not joined. */
gboolean         rlx_signal_client_send  (RlxSignalClient *self, const char *to, JsonNode *sealed);
gboolean         rlx_signal_client_send_notice (RlxSignalClient *self, const char *to,
                                                const char *notice);
/* Send raw text as it is (tests of the server's defences). */
void             rlx_signal_client_send_raw (RlxSignalClient *self, const char *text);

G_END_DECLS
