/* rlx-signal-server.c — rooms of WebSocket clients, routing sealed messages
 *
 * See rlx-signal-server.h. RlxSignalListener owns every connection until
 * its upgrade and hands it over here; SoupWebsocketConnection does the
 * framing over an RlxCappedInputStream (bytes of an unfinished message) and
 * an RlxCountingOutputStream (what left the queue). One second-granularity
 * tick enforces join deadlines, sends pings and drops clients whose pongs
 * stopped; a name probe has its own timeout.
 */
#include "rlx-config.h"
#include "rlx-signal-server.h"
#include "rlx-signal-listener.h"
#include "rlx-signal-msg.h"
#include "rlx-capped-stream.h"
#include "rlx-counting-stream.h"

#include <string.h>
#include <libsoup/soup.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define TICK_MS          1000
#define MAX_STRIKES      8
/* Bytes a connection may send without completing a message: a message at
 * the cap plus framing, and some slack for control frames. */
#define UNFINISHED_CAP   (4 * RLX_SIGNAL_MAX_MESSAGE)
/* Past this much queued towards one client, check the total as well. */
#define QUEUE_CHECK_TOTAL (64 * 1024)
/* What may wait behind a close frame. */
#define QUEUE_SMALL       (4 * 1024)
#define CLOSE_GRACE_US    (1 * G_USEC_PER_SEC)
#define TRIM_QUIET_MS     500

typedef struct _Client Client;

typedef struct {
  char      *name;
  GPtrArray *members;    /* Client* (not owned) */
} Room;

struct _Client
{
  RlxSignalServer         *server;
  SoupWebsocketConnection *ws;
  GSocketConnection       *conn;
  RlxCappedInputStream    *capped;
  RlxCountingOutputStream *counting;
  guint64                  sent;           /* bytes of frames we queued */
  char                    *remote;         /* per-address key */
  Room                    *room;
  char                    *node;
  gint64                   connected_at;   /* monotonic µs */
  gint64                   closing_at;     /* we sent a close frame */
  gint64                   pong_at;        /* last right pong (or the connect) */
  gint64                   ping_sent_at;
  gint64                   ping_n;         /* random nonce of the ping out */
  double                   tokens;
  gint64                   tokens_at;
  guint                    strikes;
  gboolean                 rate_warned;
  gboolean                 gone;
  /* a name probe: this client holds a node id another connection claims */
  Client                  *probed_by;
  gint64                   probe_n;
  /* … or this client claims one that another holds */
  Client                  *claiming;
  char                    *claim_room;
  GSource                 *claim_timeout;
};

struct _RlxSignalServer
{
  GObject                parent_instance;

  RlxSignalServerLimits  lim;
  RlxSignalListener     *listener;
  GPtrArray             *clients;   /* Client* (owned) */
  GHashTable            *rooms;     /* name → Room* (owned) */
  GSource               *tick;
  GUri                  *uri;
  GSource               *trim;
  gboolean               hosted;    /* a founding node serves us: say so in welcomes */
};

G_DEFINE_FINAL_TYPE (RlxSignalServer, rlx_signal_server, G_TYPE_OBJECT)

enum { SIGNAL_EVENT, N_SIGNALS };
static guint signals[N_SIGNALS];

static void     join_room (Client *c, const char *room, const char *node);
static gboolean send_text (Client *c, const char *text);

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

/* A 52-bit random nonce (exact in any JSON number). */
static gint64
random_nonce (void)
{
  return (((gint64) g_random_int () << 20) ^ (gint64) g_random_int ()) & ((G_GINT64_CONSTANT (1) << 52) - 1);
}

/* Whether @c (from a copy of a list) is still a client: a send can drop a
 * slow reader, whose leaving can drop others in turn. */
static gboolean
is_live (RlxSignalServer *self, Client *c)
{
  return g_ptr_array_find (self->clients, c, NULL) && !c->gone;
}

static guint64
queued (Client *c)
{
  guint64 w = rlx_counting_output_stream_get_written (c->counting);

  /* libsoup's own frames (pongs, the close) count as written, not sent. */
  return c->sent > w ? c->sent - w : 0;
}

static guint64
queued_total (RlxSignalServer *self)
{
  guint64 sum = 0;

  for (guint i = 0; i < self->clients->len; i++)
    sum += queued (self->clients->pdata[i]);
  return sum;
}

static void
client_free (Client *c)
{
  g_signal_handlers_disconnect_by_data (c->ws, c);
  g_object_unref (c->ws);
  if (c->claim_timeout)
    g_source_destroy (c->claim_timeout);
  g_clear_pointer (&c->claim_timeout, g_source_unref);
  g_clear_object (&c->conn);
  g_clear_object (&c->capped);
  g_clear_object (&c->counting);
  rlx_signal_listener_release (c->server->listener, c->remote);
  g_free (c->remote);
  g_free (c->node);
  g_free (c->claim_room);
  g_free (c);
}

static void
leave_room (Client *c)
{
  Room *r = c->room;
  RlxSignalServer *self = c->server;
  g_autofree char *text = NULL;
  g_autoptr(GPtrArray) members = NULL;

  if (r == NULL)
    return;
  g_ptr_array_remove (r->members, c);
  c->room = NULL;
  if (r->members->len == 0)
    {
      g_hash_table_remove (self->rooms, r->name);
      return;
    }
  {
    RlxSignalOp op = { .kind = RLX_SIGNAL_OP_PEER_LEFT, .node = c->node };
    text = rlx_signal_op_to_string (&op);
  }
  /* Sending may drop a slow reader, which leaves (and may free) the room
   * in turn: send to a copy, and stop if the room went. */
  members = g_ptr_array_copy (r->members, NULL, NULL);
  for (guint i = 0; i < members->len; i++)
    {
      Client *m = members->pdata[i];
      if (is_live (self, m) && m->room != NULL)
        send_text (m, text);
    }
}

/* @c is going: undo what others wait on it for. */
static void
unlink_probes (Client *c)
{
  Client *claimant = c->probed_by;
  Client *holder = c->claiming;

  if (holder)
    {
      holder->probed_by = NULL;
      c->claiming = NULL;
    }
  if (c->claim_timeout)
    g_source_destroy (c->claim_timeout);
  g_clear_pointer (&c->claim_timeout, g_source_unref);
  if (claimant)
    {
      /* The holder left while its id was claimed: the claimant gets it. */
      g_autofree char *room = g_steal_pointer (&claimant->claim_room);
      c->probed_by = NULL;
      claimant->claiming = NULL;
      if (claimant->claim_timeout)
        g_source_destroy (claimant->claim_timeout);
      g_clear_pointer (&claimant->claim_timeout, g_source_unref);
      if (!claimant->gone)
        join_room (claimant, room, claimant->node);
    }
}

/* Forget @c now (its WebSocket may still be closing: libsoup holds its own
 * reference until then, and the socket closes with the last one). */
static void
client_end (Client *c)
{
  RlxSignalServer *self = c->server;

  if (c->gone)
    return;
  c->gone = TRUE;
  if (c->room)
    emit_event (self, "left", c, NULL);
  leave_room (c);
  unlink_probes (c);
  g_ptr_array_remove (self->clients, c);   /* frees c */
}

/* A close frame with the reason; a client that does not answer it within
 * CLOSE_GRACE_US is cut by the tick (libsoup alone would wait longer). */
static void
close_client (Client *c, gushort code, const char *reason)
{
  if (c->gone)
    return;
  if (c->closing_at == 0)
    c->closing_at = g_get_monotonic_time ();
  if (soup_websocket_connection_get_state (c->ws) == SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_close (c->ws, code, reason);
}

static gboolean
trim_cb (gpointer user_data)
{
  RlxSignalServer *self = user_data;

  g_clear_pointer (&self->trim, g_source_unref);
#ifdef __GLIBC__
  malloc_trim (0);
#endif
  return G_SOURCE_REMOVE;
}

/* Give freed queues back to the system once the drops (and libsoup's
 * closes, which free the queues) have been quiet for TRIM_QUIET_MS. */
static void
schedule_trim (RlxSignalServer *self)
{
  if (self->trim)
    g_source_destroy (self->trim);
  g_clear_pointer (&self->trim, g_source_unref);
  self->trim = g_timeout_source_new (TRIM_QUIET_MS);
  g_source_set_callback (self->trim, trim_cb, self, NULL);
  g_source_attach (self->trim, g_main_context_get_thread_default ());
}

/* A client that does not read: a close frame would wait behind its queue,
 * so cut the socket and free the queue at once. */
static void
drop_hard (Client *c, const char *why)
{
  RlxSignalServer *self = c->server;

  emit_event (self, "dropped", c, why);
  g_socket_shutdown (g_socket_connection_get_socket (c->conn), TRUE, TRUE, NULL);
  client_end (c);
  schedule_trim (self);
}

/* Not answering: a client with nothing waiting gets a close frame with the
 * reason (libsoup cuts it if it does not answer the close either); one
 * with a queue is cut at once. */
static void
drop_silent (Client *c, const char *why)
{
  if (queued (c) > QUEUE_SMALL)
    {
      drop_hard (c, why);
      return;
    }
  emit_event (c->server, "dropped", c, why);
  close_client (c, SOUP_WEBSOCKET_CLOSE_GOING_AWAY, why);
}

/* Queue @text towards @c, unless @c has let too much wait unread. Returns
 * FALSE if @c was dropped. */
static gboolean
send_text (Client *c, const char *text)
{
  RlxSignalServer *self = c->server;
  gsize len = strlen (text);
  guint64 frame = len + (len < 126 ? 2 : len < 65536 ? 4 : 10);
  guint64 q;

  if (c->gone || soup_websocket_connection_get_state (c->ws) != SOUP_WEBSOCKET_STATE_OPEN)
    return TRUE;
  q = queued (c);
  if (q + frame > self->lim.max_queued ||
      (q + frame > QUEUE_CHECK_TOTAL && queued_total (self) + frame > self->lim.max_queued_total))
    {
      g_autofree char *why =
        g_strdup_printf ("a slow reader: %" G_GUINT64_FORMAT " bytes waited unread (the cap "
                         "is %u per client, %u in all); connection closed",
                         q, self->lim.max_queued, self->lim.max_queued_total);
      drop_hard (c, why);
      return FALSE;
    }
  c->sent += frame;
  soup_websocket_connection_send_text (c->ws, text);
  return TRUE;
}

static void
send_op (Client *c, const RlxSignalOp *op)
{
  g_autofree char *text = rlx_signal_op_to_string (op);

  send_text (c, text);
}

static void
send_error (Client *c, const char *reason, gboolean fatal)
{
  RlxSignalOp op = { .kind = RLX_SIGNAL_OP_ERROR, .reason = (char *) reason, .fatal = fatal };

  send_op (c, &op);
}

static void
refuse (Client *c, const char *event, const char *reason)
{
  emit_event (c->server, "refused", c, event);
  send_error (c, reason, TRUE);
  close_client (c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION, event);
}

static void
on_ws_closed (SoupWebsocketConnection *ws, gpointer user_data)
{
  Client *c = user_data;
  GSocketConnection *conn = g_object_ref (c->conn);

  client_end (c);
  g_io_stream_close (G_IO_STREAM (conn), NULL, NULL);
  g_object_unref (conn);
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

/* Rooms that clients of @addr are in (besides @except), and members of
 * @addr in @r. */
static guint
rooms_of_address (RlxSignalServer *self, const char *addr)
{
  g_autoptr(GHashTable) seen = g_hash_table_new (NULL, NULL);

  for (guint i = 0; i < self->clients->len; i++)
    {
      Client *m = self->clients->pdata[i];
      if (m->room && strcmp (m->remote, addr) == 0)
        g_hash_table_add (seen, m->room);
    }
  return g_hash_table_size (seen);
}

static guint
members_of_address (Room *r, const char *addr)
{
  guint n = 0;

  for (guint i = 0; i < r->members->len; i++)
    n += strcmp (((Client *) r->members->pdata[i])->remote, addr) == 0;
  return n;
}

/* Put @c in @room as @node: the caps are checked here, the name was. */
static void
join_room (Client *c, const char *room, const char *node)
{
  RlxSignalServer *self = c->server;
  Room *r = g_hash_table_lookup (self->rooms, room);
  RlxSignalOp welcome = { .kind = RLX_SIGNAL_OP_WELCOME };
  RlxSignalOp joined = { .kind = RLX_SIGNAL_OP_PEER_JOINED };
  g_autofree char *joined_text = NULL;
  g_autoptr(GStrvBuilder) b = g_strv_builder_new ();
  g_autoptr(GPtrArray) members = NULL;

  if (c->node != node)
    {
      g_free (c->node);
      c->node = g_strdup (node);
    }
  if (r == NULL)
    {
      if (g_hash_table_size (self->rooms) >= self->lim.max_rooms)
        {
          refuse (c, "too many rooms", "this signalling server holds its maximum number of "
                  "rooms; try again later or run your own (rlx-rank signal)");
          return;
        }
      if (rooms_of_address (self, c->remote) >= self->lim.max_rooms_per_addr)
        {
          refuse (c, "too many rooms from one address",
                  "connections from your address are in as many rooms as this signalling "
                  "server allows one address; leave one, or run your own (rlx-rank signal)");
          return;
        }
      r = g_new0 (Room, 1);
      r->name = g_strdup (room);
      r->members = g_ptr_array_new ();
      g_hash_table_insert (self->rooms, r->name, r);
    }
  else if (r->members->len >= self->lim.max_members)
    {
      refuse (c, "room full", "the cohort's room is full on this signalling server");
      return;
    }
  else if (members_of_address (r, c->remote) >= self->lim.max_members_per_addr)
    {
      refuse (c, "too many members from one address",
              "this room already has as many members from your address as this "
              "signalling server allows one address");
      return;
    }
  /* In the room first, so that it never empties (and goes) below us. */
  members = g_ptr_array_copy (r->members, NULL, NULL);
  c->room = r;
  g_ptr_array_add (r->members, c);
  joined.node = c->node;
  joined_text = rlx_signal_op_to_string (&joined);
  for (guint i = 0; i < members->len; i++)
    if (is_live (self, members->pdata[i]))
      send_text (members->pdata[i], joined_text);
  for (guint i = 0; i < r->members->len; i++)
    if (r->members->pdata[i] != c)
      g_strv_builder_add (b, ((Client *) r->members->pdata[i])->node);
  welcome.room = r->name;
  welcome.hosted = self->hosted;
  welcome.peers = g_strv_builder_end (b);
  send_op (c, &welcome);
  g_strfreev (welcome.peers);
  emit_event (self, "joined", c, NULL);
}

static gboolean
on_claim_timeout (gpointer user_data)
{
  Client *c = user_data;
  Client *holder = c->claiming;
  g_autofree char *room = g_steal_pointer (&c->claim_room);

  g_clear_pointer (&c->claim_timeout, g_source_unref);
  c->claiming = NULL;
  if (holder)
    {
      holder->probed_by = NULL;
      /* It did not answer: it is gone, or not reading. The claimant wins. */
      emit_event (c->server, "left", holder, NULL);
      leave_room (holder);
      drop_silent (holder, "replaced: a new connection claimed its node id and this one "
                           "did not answer a ping in time");
    }
  if (!c->gone)
    {
      Room *r = g_hash_table_lookup (c->server->rooms, room);
      if (r && find_member (r, c->node))
        refuse (c, "node id in use", "that node id is in use in this room");
      else
        join_room (c, room, c->node);
    }
  return G_SOURCE_REMOVE;
}

/* The holder answered the probe: it is alive and keeps its id. */
static void
probe_answered (Client *holder)
{
  Client *c = holder->probed_by;
  g_autofree char *why = NULL;

  holder->probed_by = NULL;
  if (c == NULL)
    return;
  c->claiming = NULL;
  if (c->claim_timeout)
    g_source_destroy (c->claim_timeout);
  g_clear_pointer (&c->claim_timeout, g_source_unref);
  g_clear_pointer (&c->claim_room, g_free);
  why = g_strdup_printf ("node id %s is held in this room by a live connection; a node id "
                         "names one node: start this one with another, or wait until the "
                         "other has gone", c->node);
  refuse (c, "node id in use", why);
}

static void
handle_join (Client *c, RlxSignalOp *op)
{
  RlxSignalServer *self = c->server;
  Room *r;
  Client *old;

  if (c->room != NULL || c->claiming != NULL)
    {
      strike (c, "already joined a room");
      return;
    }
  r = g_hash_table_lookup (self->rooms, op->room);
  old = r ? find_member (r, op->node) : NULL;
  if (old == NULL)
    {
      join_room (c, op->room, op->node);
      return;
    }
  if (old->probed_by != NULL)
    {
      c->node = g_strdup (op->node);
      refuse (c, "node id in use", "that node id is in use in this room and already claimed");
      return;
    }
  /* The first holder keeps its id unless it is no longer there: ask it. */
  c->node = g_strdup (op->node);
  c->claiming = old;
  c->claim_room = g_strdup (op->room);
  old->probed_by = c;
  old->probe_n = random_nonce ();
  {
    RlxSignalOp ping = { .kind = RLX_SIGNAL_OP_PING, .n = old->probe_n };
    c->claim_timeout = g_timeout_source_new (self->lim.probe_timeout_ms);
    g_source_set_callback (c->claim_timeout, on_claim_timeout, c, NULL);
    g_source_attach (c->claim_timeout, g_main_context_get_thread_default ());
    send_op (old, &ping);   /* may drop old (a slow reader): then c joins now */
  }
}

static void
handle_send (Client *c, RlxSignalOp *op)
{
  RlxSignalOp out = { .kind = op->kind == RLX_SIGNAL_OP_SEND ? RLX_SIGNAL_OP_MSG : RLX_SIGNAL_OP_NOTICE,
                      .from = c->node, .data = op->data, .notice = op->notice };
  Room *r = c->room;
  g_autofree char *text = NULL;

  if (r == NULL)
    {
      strike (c, "join a room first");
      return;
    }
  text = rlx_signal_op_to_string (&out);
  if (strcmp (op->to, "*") == 0)
    {
      /* Sending may drop a slow reader (and change the room): use a copy. */
      g_autoptr(GPtrArray) members = g_ptr_array_copy (r->members, NULL, NULL);
      for (guint i = 0; i < members->len; i++)
        if (members->pdata[i] != c && is_live (c->server, members->pdata[i]))
          send_text (members->pdata[i], text);
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
      send_text (t, text);
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
      /* Only the nonce of a ping we sent counts: a client that does not
       * read cannot know it, so it cannot stay by sending. */
      if (c->ping_sent_at && op->n == c->ping_n)
        {
          c->ping_sent_at = 0;
          c->pong_at = g_get_monotonic_time ();
        }
      if (c->probed_by && op->n == c->probe_n)
        probe_answered (c);
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

      /* An earlier client's drop in this loop may have freed this one. */
      if (!is_live (self, c))
        continue;
      if (c->closing_at)
        {
          if (now - c->closing_at > CLOSE_GRACE_US)
            drop_hard (c, "did not answer our close frame: cut");
          continue;
        }
      if (c->room == NULL && c->claiming == NULL &&
          now - c->connected_at > (gint64) self->lim.join_timeout_ms * 1000)
        {
          emit_event (self, "dropped", c, "no join in time");
          close_client (c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION, "join first");
          continue;
        }
      if (c->ping_sent_at && now - c->ping_sent_at > (gint64) self->lim.pong_timeout_ms * 1000)
        {
          drop_silent (c, "no pong");
          continue;
        }
      /* Every interval, whatever else the client sends. */
      if (c->ping_sent_at == 0 && now - c->pong_at > (gint64) self->lim.ping_interval_ms * 1000)
        {
          RlxSignalOp ping = { .kind = RLX_SIGNAL_OP_PING, .n = random_nonce () };
          c->ping_n = ping.n;
          c->ping_sent_at = now;
          send_op (c, &ping);
        }
    }
  return G_SOURCE_CONTINUE;
}

static const char *
admit_cb (const char *addr, gpointer user_data)
{
  RlxSignalServer *self = user_data;

  if (self->clients->len >= self->lim.max_clients)
    return "this signalling server holds its maximum number of clients; try again later";
  return NULL;
}

static void
upgraded_cb (GSocketConnection *conn, GBytes *leftover, const char *addr, gpointer user_data)
{
  RlxSignalServer *self = user_data;
  g_autoptr(GIOStream) wrapped = NULL;
  g_autoptr(GInputStream) in = NULL;
  g_autoptr(GOutputStream) out = NULL;
  Client *c;

  in = rlx_capped_input_stream_new (g_io_stream_get_input_stream (G_IO_STREAM (conn)),
                                    UNFINISHED_CAP, leftover);
  out = rlx_counting_output_stream_new (g_io_stream_get_output_stream (G_IO_STREAM (conn)));
  wrapped = g_simple_io_stream_new (in, out);

  c = g_new0 (Client, 1);
  c->server = self;
  c->capped = g_object_ref (RLX_CAPPED_INPUT_STREAM (in));
  c->counting = g_object_ref (RLX_COUNTING_OUTPUT_STREAM (out));
  c->conn = g_object_ref (conn);
  c->remote = g_strdup (addr);
  c->connected_at = c->pong_at = c->tokens_at = g_get_monotonic_time ();
  c->tokens = self->lim.burst;
  c->ws = soup_websocket_connection_new (wrapped, self->uri, SOUP_WEBSOCKET_CONNECTION_SERVER,
                                         NULL, NULL, NULL);
  soup_websocket_connection_set_max_incoming_payload_size (c->ws, RLX_SIGNAL_MAX_MESSAGE);
  soup_websocket_connection_set_keepalive_interval (c->ws, 0);
  g_signal_connect (c->ws, "message", G_CALLBACK (on_ws_message), c);
  g_signal_connect (c->ws, "closed", G_CALLBACK (on_ws_closed), c);
  g_signal_connect (c->ws, "error", G_CALLBACK (on_ws_error), c);
  g_ptr_array_add (self->clients, c);
}

static void
listener_event_cb (const char *what, const char *addr, const char *detail, gpointer user_data)
{
  RlxSignalServer *self = user_data;

  g_signal_emit (self, signals[SIGNAL_EVENT], 0, what, "", addr, detail ? detail : "");
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
  g_uri_unref (self->uri);
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
  self->uri = g_uri_parse ("ws://localhost" RLX_SIGNAL_PATH, G_URI_FLAGS_NONE, NULL);
}

RlxSignalServer *
rlx_signal_server_new (const RlxSignalServerLimits *limits)
{
  RlxSignalServer *self = g_object_new (RLX_TYPE_SIGNAL_SERVER, NULL);

  if (limits)
    self->lim = *limits;
#define DEF(f, v) if (self->lim.f == 0) self->lim.f = (v)
  DEF (max_clients, 1024);
  DEF (max_rooms, 1024);
  DEF (max_members, 64);
  DEF (rate_per_s, 50);
  DEF (burst, 200);
  DEF (join_timeout_ms, 10000);
  DEF (ping_interval_ms, 5000);
  DEF (pong_timeout_ms, 15000);
  DEF (max_queued, 256 * 1024);
  DEF (max_queued_total, 32 * 1024 * 1024);
  DEF (max_rooms_per_addr, 16);
  DEF (max_members_per_addr, 16);
  DEF (probe_timeout_ms, 2000);
#undef DEF
  return self;
}

gboolean
rlx_signal_server_listen (RlxSignalServer *self, const char *address, guint16 port,
                          GError **error)
{
  RlxSignalListenerLimits ll = {
    .max_pending = self->lim.max_pending,
    .max_pending_per_addr = self->lim.max_pending_per_addr,
    .max_per_addr = self->lim.max_per_addr,
    .header_timeout_ms = self->lim.header_timeout_ms,
    .max_held = self->lim.max_clients,
  };
  static const RlxSignalListenerCallbacks cb = {
    .admit = admit_cb, .upgraded = upgraded_cb, .event = listener_event_cb,
  };

  g_return_val_if_fail (RLX_IS_SIGNAL_SERVER (self), FALSE);
  g_return_val_if_fail (self->listener == NULL, FALSE);

  self->listener = rlx_signal_listener_new (&ll, &cb, self);
  if (!rlx_signal_listener_listen (self->listener, address, port, error))
    {
      g_prefix_error (error, "cannot serve signalling on %s port %u: ",
                      address ? address : "every address", port);
      g_clear_pointer (&self->listener, rlx_signal_listener_free);
      return FALSE;
    }
  self->tick = g_timeout_source_new (TICK_MS);
  g_source_set_callback (self->tick, on_tick, self, NULL);
  g_source_attach (self->tick, g_main_context_get_thread_default ());
  return TRUE;
}

guint16
rlx_signal_server_get_port (RlxSignalServer *self)
{
  g_return_val_if_fail (RLX_IS_SIGNAL_SERVER (self), 0);
  return self->listener ? rlx_signal_listener_get_port (self->listener) : 0;
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
      c->probed_by = c->claiming = NULL;
      if (soup_websocket_connection_get_state (c->ws) == SOUP_WEBSOCKET_STATE_OPEN)
        soup_websocket_connection_close (c->ws, SOUP_WEBSOCKET_CLOSE_GOING_AWAY, "server stops");
      g_ptr_array_remove_index (self->clients, self->clients->len - 1);
    }
  g_hash_table_remove_all (self->rooms);
  g_clear_pointer (&self->listener, rlx_signal_listener_free);
  if (self->trim)
    g_source_destroy (self->trim);
  g_clear_pointer (&self->trim, g_source_unref);
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

guint
rlx_signal_server_get_n_pending (RlxSignalServer *self)
{
  return self->listener ? rlx_signal_listener_get_n_pending (self->listener) : 0;
}

void
rlx_signal_server_set_hosted (RlxSignalServer *self, gboolean hosted)
{
  g_return_if_fail (RLX_IS_SIGNAL_SERVER (self));
  self->hosted = hosted;
}
