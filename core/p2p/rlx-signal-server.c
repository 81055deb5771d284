/* rlx-signal-server.c — rooms of WebSocket clients, routing sealed messages
 *
 * See rlx-signal-server.h. The WebSocket upgrade is done by hand on top of
 * SoupServer's handler (libsoup's own websocket handler would not let us put
 * RlxCappedInputStream under the connection), then SoupWebsocketConnection
 * does the framing. One second-granularity tick enforces join deadlines,
 * sends pings and drops clients whose pongs stopped.
 */
#include "rlx-config.h"
#include "rlx-signal-server.h"
#include "rlx-signal-msg.h"
#include "rlx-capped-stream.h"

#include <string.h>
#include <libsoup/soup.h>

#define TICK_MS          1000
#define MAX_STRIKES      8
/* Bytes a connection may send without completing a message: a message at
 * the cap plus framing, and some slack for control frames. */
#define UNFINISHED_CAP   (4 * RLX_SIGNAL_MAX_MESSAGE)

typedef struct _Client Client;

typedef struct {
  char      *name;
  GPtrArray *members;    /* Client* (not owned) */
} Room;

struct _Client
{
  RlxSignalServer         *server;
  SoupWebsocketConnection *ws;
  GIOStream               *raw;      /* the socket connection under ws */
  RlxCappedInputStream    *capped;
  char                    *remote;
  Room                    *room;
  char                    *node;
  gint64                   connected_at;   /* monotonic µs */
  gint64                   last_heard;
  gint64                   ping_sent_at;
  gint64                   ping_n;
  double                   tokens;
  gint64                   tokens_at;
  guint                    strikes;
  gboolean                 rate_warned;
  gboolean                 gone;
};

struct _RlxSignalServer
{
  GObject                parent_instance;

  RlxSignalServerLimits  lim;
  SoupServer            *soup;
  GPtrArray             *clients;   /* Client* (owned) */
  GHashTable            *rooms;     /* name → Room* (owned) */
  GSource               *tick;
  guint16                port;
  gboolean               hosted;    /* a founding node serves us: say so in welcomes */
};

G_DEFINE_FINAL_TYPE (RlxSignalServer, rlx_signal_server, G_TYPE_OBJECT)

enum { SIGNAL_EVENT, N_SIGNALS };
static guint signals[N_SIGNALS];

static void
room_free (gpointer data)
{
  Room *r = data;

  g_free (r->name);
  g_ptr_array_unref (r->members);
  g_free (r);
}

static void
emit_event (RlxSignalServer *self, const char *what, Client *c, const char *detail)
{
  g_signal_emit (self, signals[SIGNAL_EVENT], 0, what, c && c->room ? c->room->name : "",
                 c && c->node ? c->node : (c ? c->remote : ""), detail ? detail : "");
}

static void
send_op (Client *c, const RlxSignalOp *op)
{
  g_autofree char *text = NULL;

  if (c->gone || soup_websocket_connection_get_state (c->ws) != SOUP_WEBSOCKET_STATE_OPEN)
    return;
  text = rlx_signal_op_to_string (op);
  soup_websocket_connection_send_text (c->ws, text);
}

static void
send_error (Client *c, const char *reason, gboolean fatal)
{
  RlxSignalOp op = { .kind = RLX_SIGNAL_OP_ERROR, .reason = (char *) reason, .fatal = fatal };

  send_op (c, &op);
}

static void
close_client (Client *c, gushort code, const char *reason)
{
  if (c->gone)
    return;
  if (soup_websocket_connection_get_state (c->ws) == SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_close (c->ws, code, reason);
}

static void
leave_room (Client *c)
{
  Room *r = c->room;
  RlxSignalServer *self = c->server;

  if (r == NULL)
    return;
  g_ptr_array_remove (r->members, c);
  c->room = NULL;
  for (guint i = 0; i < r->members->len; i++)
    {
      RlxSignalOp op = { .kind = RLX_SIGNAL_OP_PEER_LEFT, .node = c->node };
      send_op (r->members->pdata[i], &op);
    }
  if (r->members->len == 0)
    g_hash_table_remove (self->rooms, r->name);
}

static void
client_free (Client *c)
{
  g_signal_handlers_disconnect_by_data (c->ws, c);
  g_object_unref (c->ws);
  if (c->raw)
    g_io_stream_close (c->raw, NULL, NULL);
  g_clear_object (&c->raw);
  g_clear_object (&c->capped);
  g_free (c->remote);
  g_free (c->node);
  g_free (c);
}

static void
on_ws_closed (SoupWebsocketConnection *ws, gpointer user_data)
{
  Client *c = user_data;
  RlxSignalServer *self = c->server;

  if (c->gone)
    return;
  c->gone = TRUE;
  if (c->room)
    emit_event (self, "left", c, NULL);
  leave_room (c);
  g_ptr_array_remove (self->clients, c);   /* frees c */
}

static void
on_ws_error (SoupWebsocketConnection *ws, GError *error, gpointer user_data)
{
  Client *c = user_data;

  emit_event (c->server, "dropped", c, error->message);
}

static void
strike (Client *c, const char *reason)
{
  c->strikes++;
  emit_event (c->server, "dropped", c, reason);
  if (c->strikes >= MAX_STRIKES)
    close_client (c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION, "too many bad messages");
  else
    send_error (c, reason, FALSE);
}

static gboolean
take_token (Client *c)
{
  RlxSignalServer *self = c->server;
  gint64 now = g_get_monotonic_time ();

  c->tokens = MIN ((double) self->lim.burst,
                   c->tokens + (now - c->tokens_at) * 1e-6 * self->lim.rate_per_s);
  c->tokens_at = now;
  if (c->tokens < 1.0)
    return FALSE;
  c->tokens -= 1.0;
  c->rate_warned = FALSE;
  return TRUE;
}

static Client *
find_member (Room *r, const char *node)
{
  for (guint i = 0; i < r->members->len; i++)
    {
      Client *m = r->members->pdata[i];
      if (strcmp (m->node, node) == 0)
        return m;
    }
  return NULL;
}

static void
handle_join (Client *c, RlxSignalOp *op)
{
  RlxSignalServer *self = c->server;
  Room *r;
  Client *old;
  RlxSignalOp welcome = { .kind = RLX_SIGNAL_OP_WELCOME };
  GStrvBuilder *b;

  if (c->room != NULL)
    {
      strike (c, "already joined a room");
      return;
    }
  r = g_hash_table_lookup (self->rooms, op->room);
  if (r == NULL)
    {
      if (g_hash_table_size (self->rooms) >= self->lim.max_rooms)
        {
          emit_event (self, "refused", c, "too many rooms");
          send_error (c, "this signalling server holds its maximum number of rooms; "
                         "try again later or run your own (rlx-rank signal)", TRUE);
          close_client (c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION, "too many rooms");
          return;
        }
      r = g_new0 (Room, 1);
      r->name = g_strdup (op->room);
      r->members = g_ptr_array_new ();
      g_hash_table_insert (self->rooms, r->name, r);
    }
  old = find_member (r, op->node);
  if (old != NULL)
    {
      /* The same node again (it reconnected before we noticed it was gone):
       * the newer connection wins. */
      g_ptr_array_remove (r->members, old);
      old->room = NULL;
      send_error (old, "replaced by a newer connection of the same node", TRUE);
      close_client (old, SOUP_WEBSOCKET_CLOSE_NORMAL, "replaced");
    }
  else if (r->members->len >= self->lim.max_members)
    {
      emit_event (self, "refused", c, "room full");
      send_error (c, "the cohort's room is full on this signalling server", TRUE);
      close_client (c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION, "room full");
      if (r->members->len == 0)
        g_hash_table_remove (self->rooms, r->name);
      return;
    }
  c->node = g_strdup (op->node);
  c->room = r;
  b = g_strv_builder_new ();
  for (guint i = 0; i < r->members->len; i++)
    {
      Client *m = r->members->pdata[i];
      RlxSignalOp joined = { .kind = RLX_SIGNAL_OP_PEER_JOINED, .node = c->node };
      g_strv_builder_add (b, m->node);
      send_op (m, &joined);
    }
  g_ptr_array_add (r->members, c);
  welcome.room = r->name;
  welcome.hosted = self->hosted;
  welcome.peers = g_strv_builder_end (b);
  g_strv_builder_unref (b);
  send_op (c, &welcome);
  g_strfreev (welcome.peers);
  emit_event (self, "joined", c, NULL);
}

static void
handle_send (Client *c, RlxSignalOp *op)
{
  RlxSignalOp out = { .kind = op->kind == RLX_SIGNAL_OP_SEND ? RLX_SIGNAL_OP_MSG : RLX_SIGNAL_OP_NOTICE,
                      .from = c->node, .data = op->data, .notice = op->notice };
  Room *r = c->room;

  if (r == NULL)
    {
      strike (c, "join a room first");
      return;
    }
  if (strcmp (op->to, "*") == 0)
    {
      for (guint i = 0; i < r->members->len; i++)
        if (r->members->pdata[i] != c)
          send_op (r->members->pdata[i], &out);
    }
  else
    {
      Client *t = find_member (r, op->to);
      if (t == NULL || t == c)
        {
          g_autofree char *why = g_strdup_printf ("no node %s in this room", op->to);
          send_error (c, why, FALSE);
          return;
        }
      send_op (t, &out);
    }
}

static void
on_ws_message (SoupWebsocketConnection *ws, gint type, GBytes *message, gpointer user_data)
{
  Client *c = user_data;
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxSignalOp) op = NULL;
  gsize len;
  const char *text = g_bytes_get_data (message, &len);

  rlx_capped_input_stream_reset (c->capped);
  if (c->gone)
    return;
  c->last_heard = g_get_monotonic_time ();
  if (type != SOUP_WEBSOCKET_DATA_TEXT)
    {
      emit_event (c->server, "dropped", c, "binary message");
      close_client (c, SOUP_WEBSOCKET_CLOSE_UNSUPPORTED_DATA, "text messages only");
      return;
    }
  if (!take_token (c))
    {
      if (!c->rate_warned)
        {
          c->rate_warned = TRUE;
          strike (c, "too many messages: slow down (messages dropped)");
        }
      return;
    }
  op = rlx_signal_op_parse (text, len, FALSE, &error);
  if (op == NULL)
    {
      strike (c, error->message);
      return;
    }
  switch (op->kind)
    {
    case RLX_SIGNAL_OP_JOIN:
      handle_join (c, op);
      break;
    case RLX_SIGNAL_OP_SEND:
    case RLX_SIGNAL_OP_NOTICE:
      handle_send (c, op);
      break;
    case RLX_SIGNAL_OP_PING:
      {
        RlxSignalOp pong = { .kind = RLX_SIGNAL_OP_PONG, .n = op->n };
        send_op (c, &pong);
        break;
      }
    case RLX_SIGNAL_OP_PONG:
      if (op->n == c->ping_n)
        c->ping_sent_at = 0;
      break;
    default:
      strike (c, "that op is not one a client may send");
      break;
    }
}

static gboolean
on_tick (gpointer user_data)
{
  RlxSignalServer *self = user_data;
  gint64 now = g_get_monotonic_time ();
  g_autoptr(GPtrArray) snapshot = g_ptr_array_new ();

  for (guint i = 0; i < self->clients->len; i++)
    g_ptr_array_add (snapshot, self->clients->pdata[i]);
  for (guint i = 0; i < snapshot->len; i++)
    {
      Client *c = snapshot->pdata[i];

      if (c->gone)
        continue;
      if (c->room == NULL && now - c->connected_at > (gint64) self->lim.join_timeout_ms * 1000)
        {
          emit_event (self, "dropped", c, "no join in time");
          close_client (c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION, "join first");
          continue;
        }
      if (c->ping_sent_at && now - c->ping_sent_at > (gint64) self->lim.pong_timeout_ms * 1000)
        {
          emit_event (self, "dropped", c, "no pong");
          close_client (c, SOUP_WEBSOCKET_CLOSE_GOING_AWAY, "no pong");
          continue;
        }
      if (c->ping_sent_at == 0 && now - c->last_heard > (gint64) self->lim.ping_interval_ms * 1000)
        {
          RlxSignalOp ping = { .kind = RLX_SIGNAL_OP_PING, .n = ++c->ping_n };
          c->ping_sent_at = now;
          send_op (c, &ping);
        }
    }
  return G_SOURCE_CONTINUE;
}

static void
on_wrote_informational (SoupServerMessage *msg, gpointer user_data)
{
  RlxSignalServer *self = user_data;
  g_autoptr(GIOStream) raw = NULL;
  g_autoptr(GIOStream) wrapped = NULL;
  g_autoptr(GInputStream) in = NULL;
  Client *c;

  g_signal_handlers_disconnect_by_func (msg, on_wrote_informational, self);
  raw = soup_server_message_steal_connection (msg);
  if (raw == NULL)
    return;
  in = rlx_capped_input_stream_new (g_io_stream_get_input_stream (raw), UNFINISHED_CAP, NULL);
  wrapped = g_simple_io_stream_new (in, g_io_stream_get_output_stream (raw));
  /* Keep the raw stream alive as long as the wrapper (it owns the socket). */
  g_object_set_data_full (G_OBJECT (wrapped), "rlx-raw", g_object_ref (raw), g_object_unref);

  c = g_new0 (Client, 1);
  c->server = self;
  c->capped = g_object_ref (RLX_CAPPED_INPUT_STREAM (in));
  c->raw = g_object_ref (raw);
  c->remote = g_strdup (soup_server_message_get_remote_host (msg));
  c->connected_at = c->last_heard = c->tokens_at = g_get_monotonic_time ();
  c->tokens = self->lim.burst;
  c->ws = soup_websocket_connection_new (wrapped, soup_server_message_get_uri (msg),
                                         SOUP_WEBSOCKET_CONNECTION_SERVER, NULL, NULL, NULL);
  soup_websocket_connection_set_max_incoming_payload_size (c->ws, RLX_SIGNAL_MAX_MESSAGE);
  soup_websocket_connection_set_keepalive_interval (c->ws, 0);
  g_signal_connect (c->ws, "message", G_CALLBACK (on_ws_message), c);
  g_signal_connect (c->ws, "closed", G_CALLBACK (on_ws_closed), c);
  g_signal_connect (c->ws, "error", G_CALLBACK (on_ws_error), c);
  g_ptr_array_add (self->clients, c);
}

static void
on_request (SoupServer *soup, SoupServerMessage *msg, const char *path, GHashTable *query,
            gpointer user_data)
{
  RlxSignalServer *self = user_data;
  static const char not_here[] =
    "rlx-cluster signalling: connect a WebSocket to " RLX_SIGNAL_PATH "\n";
  g_autoptr(GError) error = NULL;

  if (strcmp (path, RLX_SIGNAL_PATH) != 0)
    {
      soup_server_message_set_status (msg, SOUP_STATUS_NOT_FOUND, NULL);
      soup_server_message_set_response (msg, "text/plain", SOUP_MEMORY_STATIC, not_here,
                                        sizeof not_here - 1);
      return;
    }
  if (!soup_websocket_server_check_handshake (msg, NULL, NULL, NULL, &error))
    {
      soup_server_message_set_status (msg, SOUP_STATUS_BAD_REQUEST, NULL);
      soup_server_message_set_response (msg, "text/plain", SOUP_MEMORY_STATIC, not_here,
                                        sizeof not_here - 1);
      return;
    }
  if (self->clients->len >= self->lim.max_clients)
    {
      soup_server_message_set_status (msg, SOUP_STATUS_SERVICE_UNAVAILABLE, NULL);
      return;
    }
  if (soup_websocket_server_process_handshake (msg, NULL, NULL, NULL, NULL))
    g_signal_connect (msg, "wrote-informational", G_CALLBACK (on_wrote_informational), self);
}

static void
rlx_signal_server_dispose (GObject *object)
{
  rlx_signal_server_stop (RLX_SIGNAL_SERVER (object));
  G_OBJECT_CLASS (rlx_signal_server_parent_class)->dispose (object);
}

static void
rlx_signal_server_finalize (GObject *object)
{
  RlxSignalServer *self = RLX_SIGNAL_SERVER (object);

  g_ptr_array_unref (self->clients);
  g_hash_table_unref (self->rooms);
  G_OBJECT_CLASS (rlx_signal_server_parent_class)->finalize (object);
}

static void
rlx_signal_server_class_init (RlxSignalServerClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = rlx_signal_server_dispose;
  object_class->finalize = rlx_signal_server_finalize;
  signals[SIGNAL_EVENT] =
    g_signal_new ("event", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                  G_TYPE_NONE, 4, G_TYPE_STRING, G_TYPE_STRING, G_TYPE_STRING, G_TYPE_STRING);
}

static void
rlx_signal_server_init (RlxSignalServer *self)
{
  self->clients = g_ptr_array_new_with_free_func ((GDestroyNotify) client_free);
  self->rooms = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, room_free);
}

RlxSignalServer *
rlx_signal_server_new (const RlxSignalServerLimits *limits)
{
  RlxSignalServer *self = g_object_new (RLX_TYPE_SIGNAL_SERVER, NULL);

  if (limits)
    self->lim = *limits;
#define DEF(f, v) if (self->lim.f == 0) self->lim.f = (v)
  DEF (max_clients, 1024);
  DEF (max_rooms, 256);
  DEF (max_members, 64);
  DEF (rate_per_s, 50);
  DEF (burst, 200);
  DEF (join_timeout_ms, 10000);
  DEF (ping_interval_ms, 5000);
  DEF (pong_timeout_ms, 15000);
#undef DEF
  return self;
}

gboolean
rlx_signal_server_listen (RlxSignalServer *self, const char *address, guint16 port,
                          GError **error)
{
  GSList *uris;
  gboolean ok;

  g_return_val_if_fail (RLX_IS_SIGNAL_SERVER (self), FALSE);
  g_return_val_if_fail (self->soup == NULL, FALSE);

  self->soup = soup_server_new ("server-header", "rlx-signal", NULL);
  soup_server_add_handler (self->soup, NULL, on_request, self, NULL);
  if (address)
    {
      g_autoptr(GSocketAddress) sa = g_inet_socket_address_new_from_string (address, port);
      if (sa == NULL)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "'%s' is not a numeric IP address to listen on", address);
          g_clear_object (&self->soup);
          return FALSE;
        }
      ok = soup_server_listen (self->soup, sa, 0, error);
    }
  else
    ok = soup_server_listen_all (self->soup, port, 0, error);
  if (!ok)
    {
      g_prefix_error (error, "cannot serve signalling on %s port %u: ",
                      address ? address : "every address", port);
      g_clear_object (&self->soup);
      return FALSE;
    }
  uris = soup_server_get_uris (self->soup);
  self->port = uris ? (guint16) g_uri_get_port (uris->data) : port;
  g_slist_free_full (uris, (GDestroyNotify) g_uri_unref);
  self->tick = g_timeout_source_new (TICK_MS);
  g_source_set_callback (self->tick, on_tick, self, NULL);
  g_source_attach (self->tick, g_main_context_get_thread_default ());
  return TRUE;
}

guint16
rlx_signal_server_get_port (RlxSignalServer *self)
{
  g_return_val_if_fail (RLX_IS_SIGNAL_SERVER (self), 0);
  return self->port;
}

void
rlx_signal_server_stop (RlxSignalServer *self)
{
  g_return_if_fail (RLX_IS_SIGNAL_SERVER (self));
  if (self->tick)
    {
      g_source_destroy (self->tick);
      g_clear_pointer (&self->tick, g_source_unref);
    }
  while (self->clients->len > 0)
    {
      Client *c = self->clients->pdata[self->clients->len - 1];
      c->gone = TRUE;
      c->room = NULL;
      if (soup_websocket_connection_get_state (c->ws) == SOUP_WEBSOCKET_STATE_OPEN)
        soup_websocket_connection_close (c->ws, SOUP_WEBSOCKET_CLOSE_GOING_AWAY, "server stops");
      g_ptr_array_remove_index (self->clients, self->clients->len - 1);
    }
  g_hash_table_remove_all (self->rooms);
  if (self->soup)
    {
      soup_server_disconnect (self->soup);
      g_clear_object (&self->soup);
    }
}

guint
rlx_signal_server_get_n_clients (RlxSignalServer *self)
{
  return self->clients->len;
}

guint
rlx_signal_server_get_n_rooms (RlxSignalServer *self)
{
  return g_hash_table_size (self->rooms);
}

void
rlx_signal_server_set_hosted (RlxSignalServer *self, gboolean hosted)
{
  g_return_if_fail (RLX_IS_SIGNAL_SERVER (self));
  self->hosted = hosted;
}
