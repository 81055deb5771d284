/* test-signal.c — signalling: sealed messages, envelopes, the server and
 * its client, over real WebSockets on loopback.
 *
 * Sealing: round trip; a wrong key, a tampered body, a message moved to
 * another room, a replay, an older session, a stale or future timestamp,
 * someone else's message — each refused with its own error.
 * Server: rooms, unicast and broadcast, peer-joined/left, a full room, the
 * join deadline, garbage HTTP, binary frames, unparseable messages, the
 * message rate, an endless fragmented message, a client that stops
 * answering pings; the client reconnects by itself when the server comes
 * back.
 */
#include "rlx-config.h"
#include "remote-test.h"
#include "core/p2p/rlx-signal-msg.h"
#include "core/p2p/rlx-signal-server.h"
#include "core/p2p/rlx-signal-client.h"

#include <string.h>
#include <gio/gio.h>

static const guint8 key1[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
static const guint8 key2[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17 };

static gint64 fake_now = 1700000000000;

static gint64
fake_clock (gpointer user_data)
{
  return fake_now + GPOINTER_TO_INT (user_data);
}

static JsonObject *
fields_fp (const char *fp)
{
  JsonObject *o = json_object_new ();
  json_object_set_string_member (o, "fp", fp);
  return o;
}

/* ── sealed messages ────────────────────────────────────────────────────── */

static void
test_seal_open (void)
{
  g_autoptr(RlxSignalAuth) a = rlx_signal_auth_new (key1, "demo", "alice");
  g_autoptr(RlxSignalAuth) b = rlx_signal_auth_new (key1, "demo", "bob");
  g_autoptr(JsonObject) f = fields_fp ("abcd");
  g_autoptr(JsonNode) s1 = rlx_signal_auth_seal (a, "bob", "hello", f);
  g_autoptr(JsonNode) s2 = rlx_signal_auth_seal (a, "*", "bye", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonObject) o1 = rlx_signal_auth_open (b, s1, &error);
  g_autoptr(JsonObject) o2 = NULL;

  g_assert_no_error (error);
  g_assert_cmpstr (json_object_get_string_member (o1, "from"), ==, "alice");
  g_assert_cmpstr (json_object_get_string_member (o1, "type"), ==, "hello");
  g_assert_cmpstr (json_object_get_string_member (o1, "fp"), ==, "abcd");
  g_assert_cmpstr (json_object_get_string_member (o1, "sid"), ==, rlx_signal_auth_get_session (a));
  o2 = rlx_signal_auth_open (b, s2, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (json_object_get_string_member (o2, "to"), ==, "*");
}

static void
test_wrong_key (void)
{
  g_autoptr(RlxSignalAuth) a = rlx_signal_auth_new (key2, "demo", "mallory");
  g_autoptr(RlxSignalAuth) b = rlx_signal_auth_new (key1, "demo", "bob");
  g_autoptr(JsonNode) s = rlx_signal_auth_seal (a, "*", "hello", NULL);
  g_autoptr(GError) error = NULL;

  g_assert_null (rlx_signal_auth_open (b, s, &error));
  g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_BAD_MAC);
  g_assert_nonnull (strstr (error->message, "cohort key"));
}

/* One byte of the sealed box at @at (negative: from the end) flipped. */
static void
flip_box_byte (JsonObject *so, gssize at)
{
  gsize n;
  g_autofree guint8 *box = g_base64_decode (json_object_get_string_member (so, "c"), &n);
  g_autofree char *again = NULL;

  box[at < 0 ? (gssize) n + at : at] ^= 0x01;
  again = g_base64_encode (box, n);
  json_object_set_string_member (so, "c", again);
}

static void
test_tampered (void)
{
  g_autoptr(RlxSignalAuth) a = rlx_signal_auth_new (key1, "demo", "alice");
  g_autoptr(RlxSignalAuth) b = rlx_signal_auth_new (key1, "demo", "bob");
  g_autoptr(RlxSignalAuth) other_room = rlx_signal_auth_new (key1, "other", "bob");
  g_autoptr(JsonObject) f = fields_fp ("0000");
  g_autoptr(JsonNode) s = rlx_signal_auth_seal (a, "bob", "offer", f);
  g_autoptr(GError) error = NULL;
  JsonObject *so = json_node_get_object (s);
  g_autofree char *orig = g_strdup (json_object_get_string_member (so, "c"));

  /* Moved to another cohort's room: the room is in the tag. */
  g_assert_null (rlx_signal_auth_open (other_room, s, &error));
  g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_BAD_MAC);
  g_clear_error (&error);

  /* The nonce, one byte of the body, the tag: each changed. */
  for (guint k = 0; k < 3; k++)
    {
      gssize at[] = { 0, 20, -1 };
      json_object_set_string_member (so, "c", orig);
      flip_box_byte (so, at[k]);
      g_assert_null (rlx_signal_auth_open (b, s, &error));
      g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_BAD_MAC);
      /* a reason a person can act on */
      g_assert_nonnull (strstr (error->message, "altered on the way"));
      g_clear_error (&error);
    }

  /* Not base64, too short, or no box at all. */
  json_object_set_string_member (so, "c", "not base64!");
  g_assert_null (rlx_signal_auth_open (b, s, &error));
  g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED);
  g_clear_error (&error);
  json_object_set_string_member (so, "c", "AAAA");
  g_assert_null (rlx_signal_auth_open (b, s, &error));
  g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED);
  g_clear_error (&error);
  json_object_remove_member (so, "c");
  g_assert_null (rlx_signal_auth_open (b, s, &error));
  g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED);
  g_clear_error (&error);

  /* Untouched, it still opens. */
  json_object_set_string_member (so, "c", orig);
  {
    g_autoptr(JsonObject) o = rlx_signal_auth_open (b, s, &error);
    g_assert_no_error (error);
    g_assert_cmpstr (json_object_get_string_member (o, "fp"), ==, "0000");
  }
}

static void
test_replay (void)
{
  g_autoptr(RlxSignalAuth) a = rlx_signal_auth_new (key1, "demo", "alice");
  g_autoptr(RlxSignalAuth) b = rlx_signal_auth_new (key1, "demo", "bob");
  g_autoptr(JsonNode) s1 = rlx_signal_auth_seal (a, "bob", "cand", NULL);
  g_autoptr(JsonNode) s2 = rlx_signal_auth_seal (a, "bob", "cand", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonObject) o = NULL;

  o = rlx_signal_auth_open (b, s2, &error);
  g_assert_no_error (error);
  g_clear_pointer (&o, json_object_unref);
  /* The same again, and an older one: both replays. */
  g_assert_null (rlx_signal_auth_open (b, s2, &error));
  g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_REPLAY);
  g_assert_nonnull (strstr (error->message, "already seen"));
  g_assert_nonnull (strstr (error->message, "alice"));
  g_clear_error (&error);
  g_assert_null (rlx_signal_auth_open (b, s1, &error));
  g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_REPLAY);
  g_assert_nonnull (strstr (error->message, "a replay"));
}

static void
test_sessions (void)
{
  g_autoptr(RlxSignalAuth) a1 = rlx_signal_auth_new (key1, "demo", "alice");
  g_autoptr(RlxSignalAuth) a2 = rlx_signal_auth_new (key1, "demo", "alice");
  g_autoptr(RlxSignalAuth) b = rlx_signal_auth_new (key1, "demo", "bob");
  g_autoptr(JsonNode) old1 = NULL, old2 = NULL, old3 = NULL, new1 = NULL;
  g_autoptr(GError) error = NULL;
  JsonObject *o;

  rlx_signal_auth_set_clock (a1, fake_clock, GINT_TO_POINTER (0));
  rlx_signal_auth_set_clock (a2, fake_clock, GINT_TO_POINTER (1000));
  rlx_signal_auth_set_clock (b, fake_clock, GINT_TO_POINTER (1000));
  old1 = rlx_signal_auth_seal (a1, "*", "hello", NULL);
  old2 = rlx_signal_auth_seal (a1, "*", "hello", NULL);
  old3 = rlx_signal_auth_seal (a1, "*", "hello", NULL);
  new1 = rlx_signal_auth_seal (a2, "*", "hello", NULL);
  o = rlx_signal_auth_open (b, old1, &error);
  g_assert_no_error (error);
  json_object_unref (o);
  /* alice restarted (or anyone with the key says so): her new session is
   * taken beside the old one, which is not shut out by it … */
  o = rlx_signal_auth_open (b, new1, &error);
  g_assert_no_error (error);
  json_object_unref (o);
  o = rlx_signal_auth_open (b, old2, &error);
  g_assert_no_error (error);
  json_object_unref (o);
  /* … until bob settles on the new one: the old session's messages are
   * refused from then on. */
  rlx_signal_auth_settle (b, "alice", rlx_signal_auth_get_session (a2));
  g_assert_null (rlx_signal_auth_open (b, old3, &error));
  g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_REPLAY);
}

static void
test_window (void)
{
  g_autoptr(RlxSignalAuth) a = rlx_signal_auth_new (key1, "demo", "alice");
  g_autoptr(RlxSignalAuth) b = rlx_signal_auth_new (key1, "demo", "bob");
  g_autoptr(JsonNode) past = NULL, future = NULL, fine = NULL;
  g_autoptr(GError) error = NULL;
  JsonObject *o;

  rlx_signal_auth_set_clock (b, fake_clock, GINT_TO_POINTER (0));
  rlx_signal_auth_set_clock (a, fake_clock, GINT_TO_POINTER (-(RLX_SIGNAL_WINDOW_MS + 1000)));
  past = rlx_signal_auth_seal (a, "bob", "hello", NULL);
  rlx_signal_auth_set_clock (a, fake_clock, GINT_TO_POINTER (RLX_SIGNAL_WINDOW_MS + 1000));
  future = rlx_signal_auth_seal (a, "bob", "hello", NULL);
  rlx_signal_auth_set_clock (a, fake_clock, GINT_TO_POINTER (-(RLX_SIGNAL_WINDOW_MS - 1000)));
  fine = rlx_signal_auth_seal (a, "bob", "hello", NULL);
  g_assert_null (rlx_signal_auth_open (b, past, &error));
  g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_STALE);
  g_assert_nonnull (strstr (error->message, "clock"));
  g_clear_error (&error);
  g_assert_null (rlx_signal_auth_open (b, future, &error));
  g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_STALE);
  g_clear_error (&error);
  o = rlx_signal_auth_open (b, fine, &error);
  g_assert_no_error (error);
  json_object_unref (o);
}

static void
test_not_for_us (void)
{
  g_autoptr(RlxSignalAuth) a = rlx_signal_auth_new (key1, "demo", "alice");
  g_autoptr(RlxSignalAuth) b = rlx_signal_auth_new (key1, "demo", "bob");
  g_autoptr(JsonNode) to_carol = rlx_signal_auth_seal (a, "carol", "offer", NULL);
  g_autoptr(JsonNode) mine = rlx_signal_auth_seal (b, "*", "hello", NULL);
  g_autoptr(GError) error = NULL;

  g_assert_null (rlx_signal_auth_open (b, to_carol, &error));
  g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_NOT_FOR_US);
  g_clear_error (&error);
  g_assert_null (rlx_signal_auth_open (b, mine, &error));
  g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_NOT_FOR_US);
}

static void
test_op_parse (void)
{
  struct { const char *text; gboolean from_server; gboolean ok; } cases[] = {
    { "{\"op\":\"join\",\"v\":2,\"room\":\"r\",\"node\":\"n\"}", FALSE, TRUE },
    { "{\"op\":\"join\",\"v\":1,\"room\":\"r\",\"node\":\"n\"}", FALSE, FALSE },
    { "{\"op\":\"join\",\"v\":2,\"room\":\"r/x\",\"node\":\"n\"}", FALSE, FALSE },
    { "{\"op\":\"join\",\"v\":2,\"room\":\"r\",\"node\":\"n\"}", TRUE, FALSE },
    { "{\"op\":\"send\",\"to\":\"*\",\"data\":{\"b\":\"x\",\"m\":\"y\"}}", FALSE, TRUE },
    { "{\"op\":\"send\",\"to\":\"*\",\"data\":\"str\"}", FALSE, FALSE },
    { "{\"op\":\"msg\",\"from\":\"a\",\"data\":{}}", TRUE, TRUE },
    { "{\"op\":\"msg\",\"from\":\"a\",\"data\":{}}", FALSE, FALSE },
    { "{\"op\":\"welcome\",\"room\":\"r\",\"peers\":[\"a\",\"b\"]}", TRUE, TRUE },
    { "{\"op\":\"welcome\",\"room\":\"r\",\"peers\":[\"a\",3]}", TRUE, FALSE },
    { "{\"op\":\"ping\",\"n\":3}", FALSE, TRUE },
    { "{\"op\":\"ping\",\"n\":\"3\"}", FALSE, FALSE },
    { "{\"op\":\"error\",\"reason\":\"x\",\"fatal\":true}", TRUE, TRUE },
    { "{\"op\":\"nope\"}", FALSE, FALSE },
    { "[1,2,3]", FALSE, FALSE },
    { "{\"op\":\"ping\",\"n\":1", FALSE, FALSE },
    { "{\"a\":[[[[[[[[[[[[1]]]]]]]]]]]]}", FALSE, FALSE },
    { "", FALSE, FALSE },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(RlxSignalOp) op = rlx_signal_op_parse (cases[i].text, strlen (cases[i].text),
                                                       cases[i].from_server, &error);
      if (cases[i].ok != (op != NULL))
        g_error ("case %u '%s': %s", i, cases[i].text, error ? error->message : "accepted");
      if (op == NULL)
        g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED);
      else
        {
          /* It serialises back to something that parses the same way. */
          g_autofree char *again = rlx_signal_op_to_string (op);
          g_autoptr(RlxSignalOp) op2 = rlx_signal_op_parse (again, strlen (again),
                                                            cases[i].from_server, &error);
          g_assert_no_error (error);
          g_assert_cmpint (op2->kind, ==, op->kind);
        }
    }
  /* Over the size cap. */
  {
    g_autoptr(GError) error = NULL;
    g_autofree char *big = g_strnfill (RLX_SIGNAL_MAX_MESSAGE + 1, ' ');
    g_assert_null (rlx_signal_op_parse (big, strlen (big), FALSE, &error));
    g_assert_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED);
  }
}

/* ── server and client ──────────────────────────────────────────────────── */

typedef struct {
  RlxSignalClient *client;
  gboolean         joined;
  guint            n_joined;
  GStrv            peers;
  GPtrArray       *messages;   /* JsonNode* sealed */
  GPtrArray       *from;       /* char* */
  GPtrArray       *events;     /* char*: "peer-joined X", "peer-left X", "lost", "refused R" */
} Peer;

static void
on_joined (RlxSignalClient *c, GStrv peers, gpointer user_data)
{
  Peer *p = user_data;

  p->joined = TRUE;
  p->n_joined++;
  g_strfreev (p->peers);
  p->peers = g_strdupv (peers);
}

static void
on_message (RlxSignalClient *c, const char *from, JsonNode *sealed, gpointer user_data)
{
  Peer *p = user_data;

  g_ptr_array_add (p->messages, json_node_copy (sealed));
  g_ptr_array_add (p->from, g_strdup (from));
}

static void
on_peer_joined (RlxSignalClient *c, const char *node, gpointer user_data)
{
  g_ptr_array_add (((Peer *) user_data)->events, g_strdup_printf ("peer-joined %s", node));
}

static void
on_peer_left (RlxSignalClient *c, const char *node, gpointer user_data)
{
  g_ptr_array_add (((Peer *) user_data)->events, g_strdup_printf ("peer-left %s", node));
}

static void
on_lost (RlxSignalClient *c, const GError *error, gpointer user_data)
{
  Peer *p = user_data;

  p->joined = FALSE;
  g_ptr_array_add (p->events, g_strdup_printf ("lost %s", error->message));
}

static void
on_refused (RlxSignalClient *c, const char *reason, gpointer user_data)
{
  Peer *p = user_data;

  p->joined = FALSE;
  g_ptr_array_add (p->events, g_strdup_printf ("refused %s", reason));
}

static void
peer_init (Peer *p, guint16 port, const char *room, const char *node)
{
  memset (p, 0, sizeof *p);
  p->client = rlx_signal_client_new ("127.0.0.1", port, room, node);
  rlx_signal_client_set_timing (p->client, 300, 3000);
  p->messages = g_ptr_array_new_with_free_func ((GDestroyNotify) json_node_unref);
  p->from = g_ptr_array_new_with_free_func (g_free);
  p->events = g_ptr_array_new_with_free_func (g_free);
  g_signal_connect (p->client, "joined", G_CALLBACK (on_joined), p);
  g_signal_connect (p->client, "message", G_CALLBACK (on_message), p);
  g_signal_connect (p->client, "peer-joined", G_CALLBACK (on_peer_joined), p);
  g_signal_connect (p->client, "peer-left", G_CALLBACK (on_peer_left), p);
  g_signal_connect (p->client, "lost", G_CALLBACK (on_lost), p);
  g_signal_connect (p->client, "refused", G_CALLBACK (on_refused), p);
  rlx_signal_client_start (p->client);
}

static void
peer_clear (Peer *p)
{
  rlx_signal_client_stop (p->client);
  g_signal_handlers_disconnect_by_data (p->client, p);
  g_clear_object (&p->client);
  g_strfreev (p->peers);
  g_ptr_array_unref (p->messages);
  g_ptr_array_unref (p->from);
  g_ptr_array_unref (p->events);
}

static gboolean
has_event (Peer *p, const char *prefix)
{
  for (guint i = 0; i < p->events->len; i++)
    if (g_str_has_prefix (p->events->pdata[i], prefix))
      return TRUE;
  return FALSE;
}

/* Iterate until *@flag or @timeout_ms (then fail, saying @what). */

static RlxSignalServer *
start_server (const RlxSignalServerLimits *lim, guint16 port)
{
  g_autoptr(GError) error = NULL;
  RlxSignalServer *s = rlx_signal_server_new (lim);

  g_assert_true (rlx_signal_server_listen (s, "127.0.0.1", port, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (rlx_signal_server_get_port (s), >, 0);
  return s;
}

static void
test_rooms_and_routing (void)
{
  g_autoptr(RlxSignalServer) server = start_server (NULL, 0);
  guint16 port = rlx_signal_server_get_port (server);
  g_autoptr(RlxSignalAuth) auth_a = rlx_signal_auth_new (key1, "demo", "alice");
  g_autoptr(RlxSignalAuth) auth_b = rlx_signal_auth_new (key1, "demo", "bob");
  Peer a, b, c, x;

  peer_init (&a, port, "demo", "alice");
  WAIT_FOR (a.joined, 5000, "alice to join");
  g_assert_cmpuint (g_strv_length (a.peers), ==, 0);
  peer_init (&b, port, "demo", "bob");
  peer_init (&x, port, "elsewhere", "xavier");
  WAIT_FOR (b.joined && x.joined, 5000, "bob and xavier to join");
  g_assert_cmpuint (g_strv_length (b.peers), ==, 1);
  g_assert_cmpstr (b.peers[0], ==, "alice");
  WAIT_FOR (has_event (&a, "peer-joined bob"), 5000, "alice to hear of bob");
  g_assert_cmpuint (rlx_signal_server_get_n_rooms (server), ==, 2);

  /* Unicast and broadcast, end to end sealed; other rooms hear nothing. */
  {
    g_autoptr(JsonNode) s1 = rlx_signal_auth_seal (auth_a, "bob", "offer", NULL);
    g_autoptr(JsonNode) s2 = rlx_signal_auth_seal (auth_a, "*", "hello", NULL);
    g_autoptr(GError) error = NULL;
    g_autoptr(JsonObject) o1 = NULL, o2 = NULL;

    g_assert_true (rlx_signal_client_send (a.client, "bob", s1));
    g_assert_true (rlx_signal_client_send (a.client, "*", s2));
    WAIT_FOR (b.messages->len == 2, 5000, "bob to get two messages");
    g_assert_cmpstr (b.from->pdata[0], ==, "alice");
    o1 = rlx_signal_auth_open (auth_b, b.messages->pdata[0], &error);
    g_assert_no_error (error);
    g_assert_cmpstr (json_object_get_string_member (o1, "type"), ==, "offer");
    o2 = rlx_signal_auth_open (auth_b, b.messages->pdata[1], &error);
    g_assert_no_error (error);
    g_assert_cmpstr (json_object_get_string_member (o2, "type"), ==, "hello");
  }

  /* A third member; then bob leaves and both others hear it. */
  peer_init (&c, port, "demo", "carol");
  WAIT_FOR (c.joined, 5000, "carol to join");
  g_assert_cmpuint (g_strv_length (c.peers), ==, 2);
  peer_clear (&b);
  WAIT_FOR (has_event (&a, "peer-left bob") && has_event (&c, "peer-left bob"), 5000,
            "alice and carol to hear bob left");
  g_assert_cmpuint (x.messages->len, ==, 0);
  g_assert_false (has_event (&x, "peer-"));

  /* The same node id again is refused while its holder answers (issue 29:
   * the newest connection used to win, so anyone could evict a node). A
   * holder that does not answer is replaced: test-signal-hostile.c. */
  {
    Peer a2;
    peer_init (&a2, port, "demo", "alice");
    WAIT_FOR (has_event (&a2, "refused"), 5000, "the second alice to be refused");
    g_assert_false (a2.joined);
    g_assert_true (a.joined);
    g_assert_false (has_event (&a, "refused") || has_event (&a, "lost"));
    peer_clear (&a2);
  }
  peer_clear (&a);
  peer_clear (&c);
  peer_clear (&x);
}

static void
test_room_full (void)
{
  RlxSignalServerLimits lim = { .max_members = 2 };
  g_autoptr(RlxSignalServer) server = start_server (&lim, 0);
  guint16 port = rlx_signal_server_get_port (server);
  Peer a, b, c;

  peer_init (&a, port, "demo", "a");
  peer_init (&b, port, "demo", "b");
  WAIT_FOR (a.joined && b.joined, 5000, "two joins");
  peer_init (&c, port, "demo", "c");
  WAIT_FOR (has_event (&c, "refused"), 5000, "the third to be refused");
  g_assert_false (c.joined);
  {
    gboolean found = FALSE;
    for (guint i = 0; i < c.events->len; i++)
      found |= strstr (c.events->pdata[i], "room is full") != NULL;
    g_assert_true (found);
  }
  peer_clear (&a);
  peer_clear (&b);
  peer_clear (&c);
}

static void
test_client_reconnects (void)
{
  g_autoptr(RlxSignalServer) server = start_server (NULL, 0);
  guint16 port = rlx_signal_server_get_port (server);
  Peer a;

  peer_init (&a, port, "demo", "alice");
  WAIT_FOR (a.joined, 5000, "alice to join");
  rlx_signal_server_stop (server);
  g_clear_object (&server);
  WAIT_FOR (has_event (&a, "lost"), 5000, "alice to notice the server went away");
  g_assert_false (rlx_signal_client_is_joined (a.client));
  server = start_server (NULL, port);
  WAIT_FOR (a.n_joined == 2, 15000, "alice to join again by herself");
  peer_clear (&a);
}

/* A raw TCP client on its own thread (blocking I/O), so the server on the
 * main loop can answer it. */
typedef struct {
  guint16  port;
  GBytes  *send;        /* sent after connecting (and after the upgrade if upgrade) */
  gboolean upgrade;     /* do a WebSocket upgrade first */
  gboolean endless;     /* after the upgrade, send continuation frames forever */
  gboolean binary;      /* after the upgrade, send a binary frame */
  guint    repeat;      /* send the text message this many times */
  gboolean mute;        /* never answer the server's close frame, like a dead
                         * peer: the server gives up on us after its wait */
  char    *reply;       /* what came back (HTTP part or close reason) */
  gsize    reply_len;
  gboolean closed_by_server;
  guint64  sent_bytes;
} Raw;

static gboolean
raw_write (GOutputStream *out, const void *data, gsize len, Raw *r)
{
  gsize written = 0;
  gboolean ok = g_output_stream_write_all (out, data, len, &written, NULL, NULL);
  r->sent_bytes += written;
  return ok;
}

/* Whether @buf (what the server sent after the upgrade) holds a whole close
 * frame. Server frames are not masked. */
static gboolean
has_close_frame (const guint8 *buf, gsize len)
{
  gsize at = 0;

  while (at + 2 <= len)
    {
      guint8 opcode = buf[at] & 0x0f;
      guint64 n = buf[at + 1] & 0x7f;
      gsize head = 2;

      if (n == 126)
        {
          if (at + 4 > len)
            return FALSE;
          n = ((guint64) buf[at + 2] << 8) | buf[at + 3];
          head = 4;
        }
      else if (n == 127)
        return FALSE;    /* the server sends nothing that large here */
      if (at + head + n > len)
        return FALSE;
      if (opcode == 0x8)
        return TRUE;
      at += head + n;
    }
  return FALSE;
}

/* A masked client frame. */
static GBytes *
ws_frame (guint8 opcode, gboolean fin, const void *payload, gsize len)
{
  GByteArray *f = g_byte_array_new ();
  guint8 h[2] = { (guint8) ((fin ? 0x80 : 0) | opcode), 0x80 };
  guint8 mask[4] = { 1, 2, 3, 4 };

  if (len < 126)
    {
      h[1] |= (guint8) len;
      g_byte_array_append (f, h, 2);
    }
  else
    {
      guint8 ext[2] = { (guint8) (len >> 8), (guint8) len };
      h[1] |= 126;
      g_byte_array_append (f, h, 2);
      g_byte_array_append (f, ext, 2);
    }
  g_byte_array_append (f, mask, 4);
  for (gsize i = 0; i < len; i++)
    {
      guint8 b = ((const guint8 *) payload)[i] ^ mask[i % 4];
      g_byte_array_append (f, &b, 1);
    }
  return g_byte_array_free_to_bytes (f);
}

static gpointer
raw_thread (gpointer data)
{
  Raw *r = data;
  g_autoptr(GSocketClient) sc = g_socket_client_new ();
  g_autoptr(GSocketConnection) conn = NULL;
  GOutputStream *out;
  GInputStream *in;
  char buf[4096];
  gssize n;
  g_autoptr(GString) got = g_string_new (NULL);

  g_socket_client_set_timeout (sc, 10);
  conn = g_socket_client_connect_to_host (sc, "127.0.0.1", r->port, NULL, NULL);
  g_assert_nonnull (conn);
  out = g_io_stream_get_output_stream (G_IO_STREAM (conn));
  in = g_io_stream_get_input_stream (G_IO_STREAM (conn));
  if (r->upgrade)
    {
      const char *req = "GET " RLX_SIGNAL_PATH " HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n";
      raw_write (out, req, strlen (req), r);
      while (strstr (got->str, "\r\n\r\n") == NULL &&
             (n = g_input_stream_read (in, buf, sizeof buf, NULL, NULL)) > 0)
        g_string_append_len (got, buf, n);
      g_assert_nonnull (strstr (got->str, "101"));
      if (r->binary)
        {
          g_autoptr(GBytes) f = ws_frame (0x2, TRUE, "\x01\x02", 2);
          raw_write (out, g_bytes_get_data (f, NULL), g_bytes_get_size (f), r);
        }
      for (guint i = 0; r->send && i < MAX (r->repeat, 1); i++)
        {
          g_autoptr(GBytes) f = ws_frame (0x1, TRUE, g_bytes_get_data (r->send, NULL),
                                          g_bytes_get_size (r->send));
          if (!raw_write (out, g_bytes_get_data (f, NULL), g_bytes_get_size (f), r))
            break;
        }
      if (r->endless)
        {
          g_autofree char *chunk = g_strnfill (8000, 'x');
          g_autoptr(GBytes) first = ws_frame (0x1, FALSE, chunk, 8000);
          g_autoptr(GBytes) more = ws_frame (0x0, FALSE, chunk, 8000);
          raw_write (out, g_bytes_get_data (first, NULL), g_bytes_get_size (first), r);
          /* 64 MiB at most: the server must cut us off long before. */
          while (r->sent_bytes < (64u << 20) &&
                 raw_write (out, g_bytes_get_data (more, NULL), g_bytes_get_size (more), r))
            ;
        }
    }
  else if (r->send)
    raw_write (out, g_bytes_get_data (r->send, NULL), g_bytes_get_size (r->send), r);
  /* Read until the server closes (it must: every case here ends that way).
   * A live client answers the server's close frame, and the server closes
   * at once; a mute one makes it wait (libsoup: 5 s) and close anyway. */
  g_string_truncate (got, 0);
  gboolean answered = FALSE;
  while ((n = g_input_stream_read (in, buf, sizeof buf, NULL, NULL)) > 0)
    {
      if (got->len < 65536)
        g_string_append_len (got, buf, n);
      if (r->upgrade && !r->mute && !answered &&
          has_close_frame ((const guint8 *) got->str, got->len))
        {
          g_autoptr(GBytes) f = ws_frame (0x8, TRUE, "\x03\xe8", 2);
          answered = TRUE;
          raw_write (out, g_bytes_get_data (f, NULL), g_bytes_get_size (f), r);
        }
    }
  r->closed_by_server = TRUE;
  r->reply_len = got->len;
  r->reply = g_memdup2 (got->str, got->len + 1);
  return NULL;
}

static gboolean
reply_has (Raw *r, const char *needle)
{
  return memmem (r->reply, r->reply_len, needle, strlen (needle)) != NULL;
}

static void
run_raw (Raw *r, guint timeout_ms)
{
  GThread *t = g_thread_new ("raw", raw_thread, r);
  WAIT_FOR (r->closed_by_server, timeout_ms, "the server to close the raw connection");
  g_thread_join (t);
}

static void
check_server_still_serves (guint16 port)
{
  Peer a;

  peer_init (&a, port, "demo", "after");
  WAIT_FOR (a.joined, 5000, "a client to join after the abuse");
  peer_clear (&a);
}

static void
test_garbage_http (void)
{
  g_autoptr(RlxSignalServer) server = start_server (NULL, 0);
  guint16 port = rlx_signal_server_get_port (server);
  g_autoptr(GRand) rand = g_rand_new_with_seed (11);
  static const char *requests[] = {
    "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    "GET " RLX_SIGNAL_PATH " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    "POST " RLX_SIGNAL_PATH " HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
  };
  static const char *want[] = { "404", "400", "400" };

  for (guint k = 0; k < G_N_ELEMENTS (requests); k++)
    {
      Raw r = { .port = port };
      r.send = g_bytes_new_static (requests[k], strlen (requests[k]));
      run_raw (&r, 10000);
      g_test_message ("answer to request %u: %.60s", k, r.reply);
      g_assert_true (reply_has (&r, want[k]));
      g_assert_true (reply_has (&r, "connect a WebSocket"));
      g_bytes_unref (r.send);
      g_free (r.reply);
    }
  for (guint k = 0; k < 4; k++)
    {
      Raw r = { .port = port };
      guint8 junk[3000];
      for (guint i = 0; i < sizeof junk; i++)
        junk[i] = (guint8) g_rand_int (rand);
      junk[sizeof junk - 2] = '\n';
      junk[sizeof junk - 1] = '\n';
      r.send = g_bytes_new (junk, sizeof junk);
      run_raw (&r, 10000);
      g_assert_false (reply_has (&r, "101"));
      g_bytes_unref (r.send);
      g_free (r.reply);
    }
  check_server_still_serves (port);
}

static void
test_binary_and_bad_messages (void)
{
  g_autoptr(RlxSignalServer) server = start_server (NULL, 0);
  guint16 port = rlx_signal_server_get_port (server);
  Raw bin = { .port = port, .upgrade = TRUE, .binary = TRUE };
  Raw bad = { .port = port, .upgrade = TRUE, .repeat = 20 };

  run_raw (&bin, 10000);
  g_assert_true (reply_has (&bin, "text messages only"));
  bad.send = g_bytes_new_static ("not json at all", 15);
  run_raw (&bad, 10000);
  g_assert_true (reply_has (&bad, "too many bad messages"));
  g_bytes_unref (bad.send);
  g_free (bin.reply);
  g_free (bad.reply);
  check_server_still_serves (port);
}

static void
on_dropped (RlxSignalServer *s, const char *what, const char *room, const char *node,
            const char *detail, gpointer user_data)
{
  char **reason = user_data;

  if (g_str_equal (what, "dropped") && *reason == NULL)
    *reason = g_strdup (detail);
}

static void
test_endless_fragmented_message (void)
{
  g_autoptr(RlxSignalServer) server = start_server (NULL, 0);
  guint16 port = rlx_signal_server_get_port (server);
  Raw r = { .port = port, .upgrade = TRUE, .endless = TRUE };
  g_autofree char *reason = NULL;
  g_autofree char *cap = g_strdup_printf ("the cap is %u)", 4 * RLX_SIGNAL_MAX_MESSAGE);
  const char *n;
  guint64 counted;

  g_signal_connect (server, "event", G_CALLBACK (on_dropped), &reason);
  run_raw (&r, 30000);
  /* Cut off after well under a megabyte, not 64 MiB (what the client
   * counts includes the sockets' buffers) ... */
  g_test_message ("the server closed after %" G_GUINT64_FORMAT " bytes: %s", r.sent_bytes,
                  reason ? reason : "(no reason)");
  g_assert_cmpuint (r.sent_bytes, <, 8u << 20);
  /* ... by the capped stream, as soon as it had read past its cap of four
   * messages (not by the join deadline or libsoup) */
  g_assert_nonnull (reason);
  g_assert_nonnull (strstr (reason, "without finishing a message"));
  g_assert_nonnull (strstr (reason, cap));
  n = strstr (reason, "the peer sent ");
  g_assert_nonnull (n);
  counted = g_ascii_strtoull (n + strlen ("the peer sent "), NULL, 10);
  g_assert_cmpuint (counted, >, 4 * RLX_SIGNAL_MAX_MESSAGE);
  g_assert_cmpuint (counted, <=, 4 * RLX_SIGNAL_MAX_MESSAGE + 65536);
  g_signal_handlers_disconnect_by_data (server, &reason);
  g_free (r.reply);
  check_server_still_serves (port);
}

static void
test_join_deadline_and_pings (void)
{
  RlxSignalServerLimits lim = { .join_timeout_ms = 500, .ping_interval_ms = 200,
                                .pong_timeout_ms = 3000 };
  g_autoptr(RlxSignalServer) server = start_server (&lim, 0);
  guint16 port = rlx_signal_server_get_port (server);
  Raw never_joins = { .port = port, .upgrade = TRUE };
  Raw never_pongs = { .port = port, .upgrade = TRUE, .mute = TRUE };
  Peer good;

  /* A well-behaved client answers pings and stays. */
  peer_init (&good, port, "demo", "good");
  WAIT_FOR (good.joined, 5000, "the good client");
  run_raw (&never_joins, 10000);
  g_assert_true (reply_has (&never_joins, "join first"));
  {
    static const char join[] = "{\"op\":\"join\",\"v\":2,\"room\":\"demo\",\"node\":\"mute\"}";
    never_pongs.send = g_bytes_new_static (join, strlen (join));
  }
  run_raw (&never_pongs, 10000);
  g_assert_true (reply_has (&never_pongs, "no pong"));
  g_assert_true (good.joined);
  g_assert_false (has_event (&good, "lost"));
  g_bytes_unref (never_pongs.send);
  g_free (never_joins.reply);
  g_free (never_pongs.reply);
  peer_clear (&good);
}

static void
test_rate_limit (void)
{
  RlxSignalServerLimits lim = { .rate_per_s = 20, .burst = 40 };
  g_autoptr(RlxSignalServer) server = start_server (&lim, 0);
  guint16 port = rlx_signal_server_get_port (server);
  g_autoptr(RlxSignalAuth) auth = rlx_signal_auth_new (key1, "demo", "flood");
  Peer flood, victim;
  gint64 t0;
  guint64 allowed;

  peer_init (&victim, port, "demo", "victim");
  peer_init (&flood, port, "demo", "flood");
  WAIT_FOR (victim.joined && flood.joined, 5000, "both to join");
  t0 = g_get_monotonic_time ();
  for (guint i = 0; i < 2000; i++)
    {
      g_autoptr(JsonNode) s = rlx_signal_auth_seal (auth, "victim", "cand", NULL);
      rlx_signal_client_send (flood.client, "victim", s);
    }
  /* Let the server work through them, then count what got through. */
  {
    guint last = G_MAXUINT;
    while (last != victim.messages->len)
      {
        gboolean expired = FALSE;
        guint id = g_timeout_add (300, remote_test_expired_cb, &expired);
        last = victim.messages->len;
        while (!expired)
          g_main_context_iteration (NULL, TRUE);
        (void) id;
      }
  }
  allowed = lim.burst + (guint64) ((g_get_monotonic_time () - t0) * 1e-6 * lim.rate_per_s) + 1;
  g_test_message ("%u of 2000 messages got through (at most %" G_GUINT64_FORMAT " allowed)",
                  victim.messages->len, allowed);
  g_assert_cmpuint (victim.messages->len, <=, allowed);
  g_assert_cmpuint (victim.messages->len, >=, lim.burst / 2);
  peer_clear (&flood);
  peer_clear (&victim);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/remote/signal/seal-open", test_seal_open);
  g_test_add_func ("/remote/signal/wrong-key", test_wrong_key);
  g_test_add_func ("/remote/signal/tampered", test_tampered);
  g_test_add_func ("/remote/signal/replay", test_replay);
  g_test_add_func ("/remote/signal/sessions", test_sessions);
  g_test_add_func ("/remote/signal/window", test_window);
  g_test_add_func ("/remote/signal/not-for-us", test_not_for_us);
  g_test_add_func ("/remote/signal/op-parse", test_op_parse);
  g_test_add_func ("/remote/signal/rooms-and-routing", test_rooms_and_routing);
  g_test_add_func ("/remote/signal/room-full", test_room_full);
  g_test_add_func ("/remote/signal/client-reconnects", test_client_reconnects);
  g_test_add_func ("/remote/signal/garbage-http", test_garbage_http);
  g_test_add_func ("/remote/signal/binary-and-bad-messages", test_binary_and_bad_messages);
  g_test_add_func ("/remote/signal/endless-fragmented-message", test_endless_fragmented_message);
  g_test_add_func ("/remote/signal/join-deadline-and-pings", test_join_deadline_and_pings);
  g_test_add_func ("/remote/signal/rate-limit", test_rate_limit);
  return g_test_run ();
}
