/* rlx-signal-client.c — a reconnecting WebSocket client of the signalling server
 *
 * The HTTP upgrade is written by hand (a GET with the WebSocket headers, the
 * response read up to its blank line, at most 8 KiB, checked with
 * soup_headers_parse_response and the Sec-WebSocket-Accept digest) so that
 * the connection can be handed to SoupWebsocketConnection through an
 * RlxCappedInputStream; libsoup does all the WebSocket framing.
 */
#include "rlx-config.h"
#include "rlx-signal-client.h"
#include "rlx-signal-msg.h"
#include "rlx-capped-stream.h"

#include <string.h>
#include <libsoup/soup.h>

#define MAX_RESPONSE     8192
#define RETRY_MIN_MS     250
#define RETRY_MAX_MS     5000
#define REFUSED_RETRY_MS 30000
#define TICK_MS          500
#define UNFINISHED_CAP   (4 * RLX_SIGNAL_MAX_MESSAGE)
#define WS_GUID          "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

struct _RlxSignalClient
{
  GObject                  parent_instance;

  char                    *host;
  guint16                  port;
  char                    *room;
  char                    *node;
  guint                    ping_ms;
  guint                    timeout_ms;
  GMainContext            *context;

  /* one connection attempt */
  GCancellable            *cancel;
  GSocketConnection       *sock;
  GByteArray              *resp;
  guint8                   buf[1024];
  char                    *accept;
  SoupWebsocketConnection *ws;
  RlxCappedInputStream    *capped;
  gint64                   attempt_at;
  char                    *last_error;

  gboolean                 started;
  gboolean                 joined;
  gboolean                 hosted;
  guint                    retry_ms;
  GSource                 *retry;
  GSource                 *tick;
  gint64                   last_heard;
  gint64                   ping_n;
  gint64                   ping_sent_at;
};

G_DEFINE_FINAL_TYPE (RlxSignalClient, rlx_signal_client, G_TYPE_OBJECT)

enum {
  SIGNAL_JOINED,
  SIGNAL_MESSAGE,
  SIGNAL_NOTICE,
  SIGNAL_PEER_JOINED,
  SIGNAL_PEER_LEFT,
  SIGNAL_LOST,
  SIGNAL_REFUSED,
  N_SIGNALS
};
static guint signals[N_SIGNALS];

static void connect_now (RlxSignalClient *self);

static void
teardown (RlxSignalClient *self)
{
  if (self->cancel)
    {
      g_cancellable_cancel (self->cancel);
      g_clear_object (&self->cancel);
    }
  if (self->ws)
    {
      g_signal_handlers_disconnect_by_data (self->ws, self);
      if (soup_websocket_connection_get_state (self->ws) == SOUP_WEBSOCKET_STATE_OPEN)
        soup_websocket_connection_close (self->ws, SOUP_WEBSOCKET_CLOSE_NORMAL, NULL);
      g_clear_object (&self->ws);
    }
  g_clear_object (&self->capped);
  if (self->sock)
    {
      g_io_stream_close (G_IO_STREAM (self->sock), NULL, NULL);
      g_clear_object (&self->sock);
    }
  g_clear_pointer (&self->resp, g_byte_array_unref);
  g_clear_pointer (&self->accept, g_free);
  self->joined = FALSE;
  self->ping_sent_at = 0;
}

static gboolean
on_retry (gpointer user_data)
{
  RlxSignalClient *self = user_data;

  g_clear_pointer (&self->retry, g_source_unref);
  connect_now (self);
  return G_SOURCE_REMOVE;
}

static void
schedule_retry (RlxSignalClient *self, guint delay_ms)
{
  if (!self->started || self->retry)
    return;
  self->retry = g_timeout_source_new (delay_ms);
  g_source_set_callback (self->retry, on_retry, self, NULL);
  g_source_attach (self->retry, self->context);
}

/* The connection failed or dropped: report, clean up, try again later. */
static void
lost (RlxSignalClient *self, GError *error)
{
  g_autoptr(GError) owned = error;

  teardown (self);
  if (!self->started)
    return;
  g_signal_emit (self, signals[SIGNAL_LOST], 0, owned);
  schedule_retry (self, self->retry_ms);
  self->retry_ms = MIN (self->retry_ms * 2, RETRY_MAX_MS);
}

static void
lost_printf (RlxSignalClient *self, const char *format, ...) G_GNUC_PRINTF (2, 3);

static void
lost_printf (RlxSignalClient *self, const char *format, ...)
{
  va_list ap;
  g_autofree char *msg = NULL;

  va_start (ap, format);
  msg = g_strdup_vprintf (format, ap);
  va_end (ap);
  lost (self, g_error_new (RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_UNREACHABLE,
                           "signalling server %s:%u: %s", self->host, self->port, msg));
}

static void
send_op (RlxSignalClient *self, const RlxSignalOp *op)
{
  g_autofree char *text = NULL;

  if (self->ws == NULL || soup_websocket_connection_get_state (self->ws) != SOUP_WEBSOCKET_STATE_OPEN)
    return;
  text = rlx_signal_op_to_string (op);
  soup_websocket_connection_send_text (self->ws, text);
}

/* ── the WebSocket ──────────────────────────────────────────────────────── */

static void
on_ws_message (SoupWebsocketConnection *ws, gint type, GBytes *message, gpointer user_data)
{
  RlxSignalClient *self = user_data;
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxSignalOp) op = NULL;
  gsize len;
  const char *text = g_bytes_get_data (message, &len);

  rlx_capped_input_stream_reset (self->capped);
  self->last_heard = g_get_monotonic_time ();
  if (type != SOUP_WEBSOCKET_DATA_TEXT)
    return;
  op = rlx_signal_op_parse (text, len, TRUE, &error);
  if (op == NULL)
    {
      g_debug ("signalling: ignoring a message from the server: %s", error->message);
      return;
    }
  g_object_ref (self);
  switch (op->kind)
    {
    case RLX_SIGNAL_OP_WELCOME:
      if (!self->joined)
        {
          self->joined = TRUE;
          self->hosted = op->hosted;
          self->retry_ms = RETRY_MIN_MS;
          g_signal_emit (self, signals[SIGNAL_JOINED], 0, op->peers);
        }
      break;
    case RLX_SIGNAL_OP_MSG:
      if (self->joined)
        g_signal_emit (self, signals[SIGNAL_MESSAGE], 0, op->from, op->data);
      break;
    case RLX_SIGNAL_OP_NOTICE:
      if (self->joined)
        g_signal_emit (self, signals[SIGNAL_NOTICE], 0, op->from, op->notice);
      break;
    case RLX_SIGNAL_OP_PEER_JOINED:
      g_signal_emit (self, signals[SIGNAL_PEER_JOINED], 0, op->node);
      break;
    case RLX_SIGNAL_OP_PEER_LEFT:
      g_signal_emit (self, signals[SIGNAL_PEER_LEFT], 0, op->node);
      break;
    case RLX_SIGNAL_OP_ERROR:
      if (op->fatal)
        {
          g_autofree char *reason = g_strdup (op->reason);
          teardown (self);
          g_signal_emit (self, signals[SIGNAL_REFUSED], 0, reason);
          schedule_retry (self, REFUSED_RETRY_MS);
        }
      else
        g_debug ("signalling server says: %s", op->reason);
      break;
    case RLX_SIGNAL_OP_PING:
      {
        RlxSignalOp pong = { .kind = RLX_SIGNAL_OP_PONG, .n = op->n };
        send_op (self, &pong);
        break;
      }
    case RLX_SIGNAL_OP_PONG:
      if (op->n == self->ping_n)
        self->ping_sent_at = 0;
      break;
    default:
      break;
    }
  g_object_unref (self);
}

static void
on_ws_error (SoupWebsocketConnection *ws, GError *error, gpointer user_data)
{
  RlxSignalClient *self = user_data;

  g_free (self->last_error);
  self->last_error = g_strdup (error->message);
}

static void
on_ws_closed (SoupWebsocketConnection *ws, gpointer user_data)
{
  RlxSignalClient *self = user_data;
  const char *data = soup_websocket_connection_get_close_data (ws);

  lost_printf (self, "the connection closed (code %u%s%s%s%s)",
               soup_websocket_connection_get_close_code (ws), data && *data ? ": " : "",
               data ? data : "", self->last_error ? "; " : "",
               self->last_error ? self->last_error : "");
}

static gboolean
on_tick (gpointer user_data)
{
  RlxSignalClient *self = user_data;
  gint64 now = g_get_monotonic_time ();

  if (self->ws == NULL)
    {
      /* Connecting: the whole upgrade + join has a deadline. */
      if (self->cancel && now - self->attempt_at > (gint64) self->timeout_ms * 1000)
        lost_printf (self, "no answer within %u ms", self->timeout_ms);
      return G_SOURCE_CONTINUE;
    }
  if (!self->joined && now - self->attempt_at > (gint64) self->timeout_ms * 1000)
    {
      lost_printf (self, "joined no room within %u ms", self->timeout_ms);
      return G_SOURCE_CONTINUE;
    }
  if (self->ping_sent_at && now - self->ping_sent_at > (gint64) self->timeout_ms * 1000)
    {
      lost_printf (self, "no pong within %u ms: the server or the path is down", self->timeout_ms);
      return G_SOURCE_CONTINUE;
    }
  if (self->ping_sent_at == 0 && now - self->last_heard > (gint64) self->ping_ms * 1000)
    {
      RlxSignalOp ping = { .kind = RLX_SIGNAL_OP_PING, .n = ++self->ping_n };
      self->ping_sent_at = now;
      send_op (self, &ping);
    }
  return G_SOURCE_CONTINUE;
}

static void
start_websocket (RlxSignalClient *self, GBytes *leftover)
{
  g_autoptr(GInputStream) in = NULL;
  g_autoptr(GIOStream) wrapped = NULL;
  g_autoptr(GUri) uri = NULL;
  g_autofree char *s = NULL;
  RlxSignalOp join = { .kind = RLX_SIGNAL_OP_JOIN, .room = self->room, .node = self->node };

  in = rlx_capped_input_stream_new (g_io_stream_get_input_stream (G_IO_STREAM (self->sock)),
                                    UNFINISHED_CAP, leftover);
  self->capped = g_object_ref (RLX_CAPPED_INPUT_STREAM (in));
  wrapped = g_simple_io_stream_new (in, g_io_stream_get_output_stream (G_IO_STREAM (self->sock)));
  g_object_set_data_full (G_OBJECT (wrapped), "rlx-raw", g_object_ref (self->sock), g_object_unref);
  s = g_strdup_printf (strchr (self->host, ':') ? "ws://[%s]:%u" RLX_SIGNAL_PATH
                                                : "ws://%s:%u" RLX_SIGNAL_PATH,
                       self->host, self->port);
  uri = g_uri_parse (s, G_URI_FLAGS_NONE, NULL);
  self->ws = soup_websocket_connection_new (wrapped, uri, SOUP_WEBSOCKET_CONNECTION_CLIENT,
                                            NULL, NULL, NULL);
  soup_websocket_connection_set_max_incoming_payload_size (self->ws, RLX_SIGNAL_MAX_MESSAGE);
  soup_websocket_connection_set_keepalive_interval (self->ws, 0);
  g_signal_connect (self->ws, "message", G_CALLBACK (on_ws_message), self);
  g_signal_connect (self->ws, "error", G_CALLBACK (on_ws_error), self);
  g_signal_connect (self->ws, "closed", G_CALLBACK (on_ws_closed), self);
  self->last_heard = g_get_monotonic_time ();
  send_op (self, &join);
}

/* ── the HTTP upgrade ───────────────────────────────────────────────────── */

static gssize
find_header_end (const guint8 *data, gsize len)
{
  for (gsize i = 3; i < len; i++)
    if (data[i - 3] == '\r' && data[i - 2] == '\n' && data[i - 1] == '\r' && data[i] == '\n')
      return (gssize) i + 1;
  return -1;
}

static void read_response (RlxSignalClient *self);

static void
on_response_read (GObject *source, GAsyncResult *res, gpointer user_data)
{
  RlxSignalClient *self = user_data;
  g_autoptr(GError) error = NULL;
  gssize n = g_input_stream_read_finish (G_INPUT_STREAM (source), res, &error);
  gssize end;
  g_autoptr(SoupMessageHeaders) headers = NULL;
  guint status = 0;
  const char *accept, *upgrade;
  g_autoptr(GBytes) leftover = NULL;

  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    {
      g_object_unref (self);
      return;
    }
  if (n <= 0)
    {
      lost_printf (self, "the connection ended during the WebSocket upgrade%s%s",
                   error ? ": " : "", error ? error->message : "");
      g_object_unref (self);
      return;
    }
  g_byte_array_append (self->resp, self->buf, (guint) n);
  end = find_header_end (self->resp->data, self->resp->len);
  if (end < 0)
    {
      if (self->resp->len > MAX_RESPONSE)
        lost_printf (self, "the HTTP response is over %d bytes: not a signalling server",
                     MAX_RESPONSE);
      else
        read_response (self);
      g_object_unref (self);
      return;
    }
  headers = soup_message_headers_new (SOUP_MESSAGE_HEADERS_RESPONSE);
  if (!soup_headers_parse_response ((const char *) self->resp->data, (int) end, headers, NULL,
                                    &status, NULL))
    {
      lost_printf (self, "the answer is not HTTP: not a signalling server");
      g_object_unref (self);
      return;
    }
  accept = soup_message_headers_get_one (headers, "Sec-WebSocket-Accept");
  upgrade = soup_message_headers_get_one (headers, "Upgrade");
  if (status != 101 || accept == NULL || strcmp (accept, self->accept) != 0 ||
      upgrade == NULL || g_ascii_strcasecmp (upgrade, "websocket") != 0)
    {
      lost_printf (self, "HTTP status %u instead of a WebSocket upgrade (is this an rlx "
                   "signalling server, at this port?)", status);
      g_object_unref (self);
      return;
    }
  leftover = g_bytes_new (self->resp->data + end, self->resp->len - (gsize) end);
  g_clear_pointer (&self->resp, g_byte_array_unref);
  start_websocket (self, leftover);
  g_object_unref (self);
}

static void
read_response (RlxSignalClient *self)
{
  g_input_stream_read_async (g_io_stream_get_input_stream (G_IO_STREAM (self->sock)),
                             self->buf, sizeof self->buf, G_PRIORITY_DEFAULT, self->cancel,
                             on_response_read, g_object_ref (self));
}

static void
on_request_written (GObject *source, GAsyncResult *res, gpointer user_data)
{
  RlxSignalClient *self = user_data;
  g_autoptr(GError) error = NULL;

  if (!g_output_stream_write_all_finish (G_OUTPUT_STREAM (source), res, NULL, &error))
    {
      if (!g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
        lost_printf (self, "%s", error->message);
      g_object_unref (self);
      return;
    }
  self->resp = g_byte_array_new ();
  read_response (self);
  g_object_unref (self);
}

static void
on_connected (GObject *source, GAsyncResult *res, gpointer user_data)
{
  RlxSignalClient *self = user_data;
  g_autoptr(GError) error = NULL;
  GSocketConnection *sock = g_socket_client_connect_finish (G_SOCKET_CLIENT (source), res, &error);
  guint8 raw[16];
  g_autofree char *key = NULL;
  g_autofree char *cat = NULL;
  g_autofree char *request = NULL;
  guint8 sha1[20];
  gsize sha1_len = sizeof sha1;
  g_autoptr(GChecksum) ck = NULL;
  const char *host_fmt;

  if (sock == NULL)
    {
      if (!g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
        lost_printf (self, "cannot connect: %s", error->message);
      g_object_unref (self);
      return;
    }
  self->sock = sock;
  for (guint i = 0; i < sizeof raw; i++)
    raw[i] = (guint8) g_random_int ();
  key = g_base64_encode (raw, sizeof raw);
  cat = g_strconcat (key, WS_GUID, NULL);
  ck = g_checksum_new (G_CHECKSUM_SHA1);
  g_checksum_update (ck, (const guchar *) cat, -1);
  g_checksum_get_digest (ck, sha1, &sha1_len);
  self->accept = g_base64_encode (sha1, sha1_len);
  host_fmt = strchr (self->host, ':') ? "[%s]:%u" : "%s:%u";
  {
    g_autofree char *hostport = g_strdup_printf (host_fmt, self->host, self->port);
    request = g_strdup_printf ("GET " RLX_SIGNAL_PATH " HTTP/1.1\r\n"
                               "Host: %s\r\n"
                               "Upgrade: websocket\r\n"
                               "Connection: Upgrade\r\n"
                               "Sec-WebSocket-Key: %s\r\n"
                               "Sec-WebSocket-Version: 13\r\n"
                               "User-Agent: rlx-cluster/" RLX_VERSION "\r\n\r\n",
                               hostport, key);
  }
  g_output_stream_write_all_async (g_io_stream_get_output_stream (G_IO_STREAM (sock)),
                                   request, strlen (request), G_PRIORITY_DEFAULT, self->cancel,
                                   on_request_written, g_object_ref (self));
  /* The request text must outlive the write: keep it on the connection. */
  g_object_set_data_full (G_OBJECT (sock), "rlx-request", g_steal_pointer (&request), g_free);
  g_object_unref (self);
}

static void
connect_now (RlxSignalClient *self)
{
  g_autoptr(GSocketClient) sc = g_socket_client_new ();
  g_autoptr(GSocketConnectable) addr = g_network_address_new (self->host, self->port);

  teardown (self);
  g_clear_pointer (&self->last_error, g_free);
  self->cancel = g_cancellable_new ();
  self->attempt_at = g_get_monotonic_time ();
  g_socket_client_set_timeout (sc, (self->timeout_ms + 999) / 1000);
  g_socket_client_connect_async (sc, addr, self->cancel, on_connected, g_object_ref (self));
}

/* ── public ──────────────────────────────────────────────────────────────── */

static void
rlx_signal_client_dispose (GObject *object)
{
  rlx_signal_client_stop (RLX_SIGNAL_CLIENT (object));
  G_OBJECT_CLASS (rlx_signal_client_parent_class)->dispose (object);
}

static void
rlx_signal_client_finalize (GObject *object)
{
  RlxSignalClient *self = RLX_SIGNAL_CLIENT (object);

  g_free (self->host);
  g_free (self->room);
  g_free (self->node);
  g_free (self->last_error);
  g_main_context_unref (self->context);
  G_OBJECT_CLASS (rlx_signal_client_parent_class)->finalize (object);
}

static void
rlx_signal_client_class_init (RlxSignalClientClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GType t = G_TYPE_FROM_CLASS (klass);

  object_class->dispose = rlx_signal_client_dispose;
  object_class->finalize = rlx_signal_client_finalize;
  signals[SIGNAL_JOINED] = g_signal_new ("joined", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                         G_TYPE_NONE, 1, G_TYPE_STRV);
  signals[SIGNAL_MESSAGE] = g_signal_new ("message", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                          G_TYPE_NONE, 2, G_TYPE_STRING, JSON_TYPE_NODE);
  signals[SIGNAL_NOTICE] = g_signal_new ("notice", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                         G_TYPE_NONE, 2, G_TYPE_STRING, G_TYPE_STRING);
  signals[SIGNAL_PEER_JOINED] = g_signal_new ("peer-joined", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                                              NULL, G_TYPE_NONE, 1, G_TYPE_STRING);
  signals[SIGNAL_PEER_LEFT] = g_signal_new ("peer-left", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                                            NULL, G_TYPE_NONE, 1, G_TYPE_STRING);
  signals[SIGNAL_LOST] = g_signal_new ("lost", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                       G_TYPE_NONE, 1, G_TYPE_ERROR | G_SIGNAL_TYPE_STATIC_SCOPE);
  signals[SIGNAL_REFUSED] = g_signal_new ("refused", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                          G_TYPE_NONE, 1, G_TYPE_STRING);
}

static void
rlx_signal_client_init (RlxSignalClient *self)
{
  self->ping_ms = 5000;
  self->timeout_ms = 15000;
  self->retry_ms = RETRY_MIN_MS;
}

RlxSignalClient *
rlx_signal_client_new (const char *host, guint16 port, const char *room, const char *node_id)
{
  RlxSignalClient *self;

  g_return_val_if_fail (host != NULL && port != 0, NULL);
  g_return_val_if_fail (rlx_signal_name_is_valid (room), NULL);
  g_return_val_if_fail (rlx_signal_name_is_valid (node_id), NULL);
  self = g_object_new (RLX_TYPE_SIGNAL_CLIENT, NULL);
  self->host = g_strdup (host);
  self->port = port;
  self->room = g_strdup (room);
  self->node = g_strdup (node_id);
  self->context = g_main_context_ref_thread_default ();
  return self;
}

void
rlx_signal_client_set_timing (RlxSignalClient *self, guint ping_ms, guint timeout_ms)
{
  g_return_if_fail (RLX_IS_SIGNAL_CLIENT (self));
  self->ping_ms = ping_ms;
  self->timeout_ms = timeout_ms;
}

void
rlx_signal_client_start (RlxSignalClient *self)
{
  g_return_if_fail (RLX_IS_SIGNAL_CLIENT (self));
  if (self->started)
    return;
  self->started = TRUE;
  self->tick = g_timeout_source_new (MIN (TICK_MS, self->ping_ms / 2 + 1));
  g_source_set_callback (self->tick, on_tick, self, NULL);
  g_source_attach (self->tick, self->context);
  connect_now (self);
}

void
rlx_signal_client_stop (RlxSignalClient *self)
{
  g_return_if_fail (RLX_IS_SIGNAL_CLIENT (self));
  self->started = FALSE;
  if (self->retry)
    {
      g_source_destroy (self->retry);
      g_clear_pointer (&self->retry, g_source_unref);
    }
  if (self->tick)
    {
      g_source_destroy (self->tick);
      g_clear_pointer (&self->tick, g_source_unref);
    }
  teardown (self);
}

gboolean
rlx_signal_client_is_joined (RlxSignalClient *self)
{
  g_return_val_if_fail (RLX_IS_SIGNAL_CLIENT (self), FALSE);
  return self->joined;
}

gboolean
rlx_signal_client_is_hosted (RlxSignalClient *self)
{
  g_return_val_if_fail (RLX_IS_SIGNAL_CLIENT (self), FALSE);
  return self->hosted;
}

gboolean
rlx_signal_client_send (RlxSignalClient *self, const char *to, JsonNode *sealed)
{
  RlxSignalOp op = { .kind = RLX_SIGNAL_OP_SEND, .to = (char *) to, .data = sealed };

  g_return_val_if_fail (RLX_IS_SIGNAL_CLIENT (self), FALSE);
  if (!self->joined)
    return FALSE;
  send_op (self, &op);
  return TRUE;
}

gboolean
rlx_signal_client_send_notice (RlxSignalClient *self, const char *to, const char *notice)
{
  RlxSignalOp op = { .kind = RLX_SIGNAL_OP_NOTICE, .to = (char *) to, .notice = (char *) notice };

  g_return_val_if_fail (RLX_IS_SIGNAL_CLIENT (self), FALSE);
  if (!self->joined)
    return FALSE;
  send_op (self, &op);
  return TRUE;
}

void
rlx_signal_client_send_raw (RlxSignalClient *self, const char *text)
{
  g_return_if_fail (RLX_IS_SIGNAL_CLIENT (self));
  if (self->ws && soup_websocket_connection_get_state (self->ws) == SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_send_text (self->ws, text);
}
