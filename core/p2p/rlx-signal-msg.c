/* rlx-signal-msg.c — signalling envelopes and sealed messages
 *
 * See rlx-signal-msg.h. Every string read from the network is checked for
 * size, depth and type before anything uses it; json-glib only ever sees
 * text of bounded size and nesting.
 */
#include "rlx-config.h"
#include "rlx-signal-msg.h"

#include <string.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

G_DEFINE_QUARK (rlx-signal-error-quark, rlx_signal_error)

#define MAX_DEPTH        8
#define MAX_NAME         64
#define MAX_TEXT         1024
#define MAX_PEERS        256
#define MAX_SENDERS      1024
#define MAX_RETIRED      8
#define NONCE_LEN        12
#define TAG_LEN          16
#define SID_HEX_LEN      16

gboolean
rlx_signal_name_is_valid (const char *name)
{
  gsize n;

  if (name == NULL)
    return FALSE;
  n = strlen (name);
  if (n == 0 || n > MAX_NAME || strcmp (name, ".") == 0 || strcmp (name, "..") == 0)
    return FALSE;
  for (gsize i = 0; i < n; i++)
    if (!g_ascii_isalnum (name[i]) && name[i] != '.' && name[i] != '_' && name[i] != '-')
      return FALSE;
  return TRUE;
}

/* Nesting depth of JSON text, strings skipped; -1 if a string is not closed
 * or a NUL byte is inside. */
static int
json_depth (const char *text, gsize len)
{
  int depth = 0, max = 0;
  gboolean in_string = FALSE, escaped = FALSE;

  for (gsize i = 0; i < len; i++)
    {
      char c = text[i];
      if (c == '\0')
        return -1;
      if (in_string)
        {
          if (escaped)
            escaped = FALSE;
          else if (c == '\\')
            escaped = TRUE;
          else if (c == '"')
            in_string = FALSE;
          continue;
        }
      if (c == '"')
        in_string = TRUE;
      else if (c == '{' || c == '[')
        max = MAX (max, ++depth);
      else if (c == '}' || c == ']')
        depth--;
    }
  return in_string ? -1 : max;
}

static JsonObject *
parse_object (const char *text, gsize len, const char *what, GError **error)
{
  g_autoptr(JsonParser) parser = NULL;
  g_autoptr(GError) local = NULL;
  JsonNode *root;
  int depth;

  if (len > RLX_SIGNAL_MAX_MESSAGE)
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                   "%s of %" G_GSIZE_FORMAT " bytes is over the cap of %d", what, len,
                   RLX_SIGNAL_MAX_MESSAGE);
      return NULL;
    }
  depth = json_depth (text, len);
  if (depth < 0 || depth > MAX_DEPTH)
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                   "%s is not JSON of this protocol (%s)", what,
                   depth < 0 ? "unterminated string or NUL byte" : "nested too deep");
      return NULL;
    }
  if (!g_utf8_validate (text, (gssize) len, NULL))
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                   "%s is not UTF-8 text", what);
      return NULL;
    }
  parser = json_parser_new_immutable ();
  if (!json_parser_load_from_data (parser, text, (gssize) len, &local))
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                   "%s is not JSON: %s", what, local->message);
      return NULL;
    }
  root = json_parser_get_root (parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                   "%s is not a JSON object", what);
      return NULL;
    }
  return json_object_ref (json_node_get_object (root));
}

/* A string member, or NULL (absent or another type). */
static const char *
get_str (JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member (o, key);

  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    return NULL;
  return json_node_get_string (n);
}

static gboolean
get_int (JsonObject *o, const char *key, gint64 *out)
{
  JsonNode *n = json_object_get_member (o, key);

  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_INT64)
    return FALSE;
  *out = json_node_get_int (n);
  return TRUE;
}

static gboolean
want_name (JsonObject *o, const char *key, gboolean star_ok, char **out, GError **error)
{
  const char *s = get_str (o, key);

  if (s == NULL || !(rlx_signal_name_is_valid (s) || (star_ok && strcmp (s, "*") == 0)))
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                   "signalling message: \"%s\" must be a name of 1 to 64 of A-Z a-z 0-9 . _ -%s",
                   key, star_ok ? " or \"*\"" : "");
      return FALSE;
    }
  *out = g_strdup (s);
  return TRUE;
}

static gboolean
want_text (JsonObject *o, const char *key, char **out, GError **error)
{
  const char *s = get_str (o, key);

  if (s == NULL || strlen (s) > MAX_TEXT)
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                   "signalling message: \"%s\" must be a string of at most %d bytes", key,
                   MAX_TEXT);
      return FALSE;
    }
  *out = g_strdup (s);
  return TRUE;
}

static gboolean
want_sealed (JsonObject *o, JsonNode **out, GError **error)
{
  JsonNode *n = json_object_get_member (o, "data");

  if (n == NULL || !JSON_NODE_HOLDS_OBJECT (n))
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                   "signalling message: \"data\" must be an object");
      return FALSE;
    }
  *out = json_node_copy (n);
  return TRUE;
}

static const struct {
  const char     *name;
  RlxSignalOpKind kind;
  gboolean        client;   /* legal from a client */
  gboolean        server;   /* legal from a server */
} ops[] = {
  { "join",        RLX_SIGNAL_OP_JOIN,        TRUE,  FALSE },
  { "send",        RLX_SIGNAL_OP_SEND,        TRUE,  FALSE },
  { "notice",      RLX_SIGNAL_OP_NOTICE,      TRUE,  TRUE  },
  { "ping",        RLX_SIGNAL_OP_PING,        TRUE,  TRUE  },
  { "pong",        RLX_SIGNAL_OP_PONG,        TRUE,  TRUE  },
  { "welcome",     RLX_SIGNAL_OP_WELCOME,     FALSE, TRUE  },
  { "msg",         RLX_SIGNAL_OP_MSG,         FALSE, TRUE  },
  { "peer-joined", RLX_SIGNAL_OP_PEER_JOINED, FALSE, TRUE  },
  { "peer-left",   RLX_SIGNAL_OP_PEER_LEFT,   FALSE, TRUE  },
  { "error",       RLX_SIGNAL_OP_ERROR,       FALSE, TRUE  },
};

void
rlx_signal_op_free (RlxSignalOp *op)
{
  if (op == NULL)
    return;
  g_free (op->room);
  g_free (op->node);
  g_free (op->to);
  g_free (op->from);
  g_free (op->notice);
  g_free (op->reason);
  g_strfreev (op->peers);
  g_clear_pointer (&op->data, json_node_unref);
  g_free (op);
}

RlxSignalOp *
rlx_signal_op_parse (const char *text, gsize len, gboolean from_server, GError **error)
{
  g_autoptr(JsonObject) o = NULL;
  g_autoptr(RlxSignalOp) op = NULL;
  const char *name;
  guint i;

  g_return_val_if_fail (text != NULL || len == 0, NULL);
  o = parse_object (text ? text : "", len, "signalling message", error);
  if (o == NULL)
    return NULL;
  name = get_str (o, "op");
  for (i = 0; name && i < G_N_ELEMENTS (ops); i++)
    if (strcmp (ops[i].name, name) == 0)
      break;
  if (name == NULL || i == G_N_ELEMENTS (ops) || !(from_server ? ops[i].server : ops[i].client))
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                   "signalling message: \"op\" is missing or not one a %s may send",
                   from_server ? "server" : "client");
      return NULL;
    }
  op = g_new0 (RlxSignalOp, 1);
  op->kind = ops[i].kind;
  switch (op->kind)
    {
    case RLX_SIGNAL_OP_JOIN:
      {
        gint64 v = 0;
        if (!get_int (o, "v", &v) || v != RLX_SIGNAL_VERSION)
          {
            g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                         "signalling protocol version %" G_GINT64_FORMAT " is not %d: "
                         "update rlx-cluster on one side", v, RLX_SIGNAL_VERSION);
            return NULL;
          }
        if (!want_name (o, "room", FALSE, &op->room, error) ||
            !want_name (o, "node", FALSE, &op->node, error))
          return NULL;
        break;
      }
    case RLX_SIGNAL_OP_SEND:
      if (!want_name (o, "to", TRUE, &op->to, error) || !want_sealed (o, &op->data, error))
        return NULL;
      break;
    case RLX_SIGNAL_OP_MSG:
      if (!want_name (o, "from", FALSE, &op->from, error) || !want_sealed (o, &op->data, error))
        return NULL;
      break;
    case RLX_SIGNAL_OP_NOTICE:
      if (!want_name (o, from_server ? "from" : "to", FALSE, from_server ? &op->from : &op->to,
                      error) ||
          !want_name (o, "notice", FALSE, &op->notice, error))
        return NULL;
      break;
    case RLX_SIGNAL_OP_PING:
    case RLX_SIGNAL_OP_PONG:
      if (!get_int (o, "n", &op->n))
        {
          g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                       "signalling message: \"n\" must be an integer");
          return NULL;
        }
      break;
    case RLX_SIGNAL_OP_WELCOME:
      {
        JsonNode *pn = json_object_get_member (o, "peers");
        JsonArray *a;
        GStrvBuilder *b;

        if (!want_name (o, "room", FALSE, &op->room, error))
          return NULL;
        if (pn == NULL || !JSON_NODE_HOLDS_ARRAY (pn) ||
            json_array_get_length ((a = json_node_get_array (pn))) > MAX_PEERS)
          {
            g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                         "signalling message: \"peers\" must be an array of at most %d names",
                         MAX_PEERS);
            return NULL;
          }
        b = g_strv_builder_new ();
        for (guint k = 0; k < json_array_get_length (a); k++)
          {
            JsonNode *e = json_array_get_element (a, k);
            if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_STRING ||
                !rlx_signal_name_is_valid (json_node_get_string (e)))
              {
                g_strv_builder_unref (b);
                g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                             "signalling message: a peer in \"peers\" is not a node name");
                return NULL;
              }
            g_strv_builder_add (b, json_node_get_string (e));
          }
        op->peers = g_strv_builder_end (b);
        g_strv_builder_unref (b);
        {
          JsonNode *h = json_object_get_member (o, "hosted");
          op->hosted = h && JSON_NODE_HOLDS_VALUE (h) &&
                       json_node_get_value_type (h) == G_TYPE_BOOLEAN && json_node_get_boolean (h);
        }
        break;
      }
    case RLX_SIGNAL_OP_PEER_JOINED:
    case RLX_SIGNAL_OP_PEER_LEFT:
      if (!want_name (o, "node", FALSE, &op->node, error))
        return NULL;
      break;
    case RLX_SIGNAL_OP_ERROR:
      {
        JsonNode *f = json_object_get_member (o, "fatal");
        if (!want_text (o, "reason", &op->reason, error))
          return NULL;
        op->fatal = f && JSON_NODE_HOLDS_VALUE (f) &&
                    json_node_get_value_type (f) == G_TYPE_BOOLEAN && json_node_get_boolean (f);
        break;
      }
    default:
      g_assert_not_reached ();
    }
  return g_steal_pointer (&op);
}

char *
rlx_signal_op_to_string (const RlxSignalOp *op)
{
  g_autoptr(JsonBuilder) b = json_builder_new_immutable ();
  g_autoptr(JsonNode) root = NULL;
  const char *name = NULL;

  g_return_val_if_fail (op != NULL, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (ops); i++)
    if (ops[i].kind == op->kind)
      name = ops[i].name;
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "op");
  json_builder_add_string_value (b, name);
#define STR(field, key) \
  if (op->field) { json_builder_set_member_name (b, key); json_builder_add_string_value (b, op->field); }
  STR (room, "room");
  STR (node, "node");
  STR (to, "to");
  STR (from, "from");
  STR (notice, "notice");
  STR (reason, "reason");
#undef STR
  if (op->kind == RLX_SIGNAL_OP_JOIN)
    {
      json_builder_set_member_name (b, "v");
      json_builder_add_int_value (b, RLX_SIGNAL_VERSION);
    }
  if (op->kind == RLX_SIGNAL_OP_ERROR)
    {
      json_builder_set_member_name (b, "fatal");
      json_builder_add_boolean_value (b, op->fatal);
    }
  if (op->kind == RLX_SIGNAL_OP_PING || op->kind == RLX_SIGNAL_OP_PONG)
    {
      json_builder_set_member_name (b, "n");
      json_builder_add_int_value (b, op->n);
    }
  if (op->kind == RLX_SIGNAL_OP_WELCOME)
    {
      json_builder_set_member_name (b, "peers");
      json_builder_begin_array (b);
      for (guint i = 0; op->peers && op->peers[i]; i++)
        json_builder_add_string_value (b, op->peers[i]);
      json_builder_end_array (b);
      if (op->hosted)
        {
          json_builder_set_member_name (b, "hosted");
          json_builder_add_boolean_value (b, TRUE);
        }
    }
  if (op->data)
    {
      json_builder_set_member_name (b, "data");
      json_builder_add_value (b, json_node_copy (op->data));
    }
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  return json_to_string (root, FALSE);
}

/* ── sealed messages ────────────────────────────────────────────────────── */

typedef struct {
  char    *sid;
  guint64  last_seq;
  gint64   first_ts;
} Session;

typedef struct {
  GPtrArray *sessions;  /* Session*; [0] is the settled one */
  GQueue     retired;   /* char* sids of sessions refused from now on */
} Sender;

struct _RlxSignalAuth
{
  gnutls_aead_cipher_hd_t aead;
  char            room[RLX_SIGNAL_ROOM_LEN + 1];
  char           *cohort;
  char           *node;
  char            sid[SID_HEX_LEN + 1];
  guint64         seq;
  GHashTable     *senders;    /* node id → Sender* */
  RlxSignalClock  clock;
  gpointer        clock_data;
  gint64          window_ms;
};

static void
session_free (gpointer data)
{
  Session *x = data;

  g_free (x->sid);
  g_free (x);
}

static void
sender_free (gpointer data)
{
  Sender *s = data;

  g_ptr_array_unref (s->sessions);
  g_queue_clear_full (&s->retired, g_free);
  g_free (s);
}

static void
retire (Sender *s, guint i)
{
  Session *x = g_ptr_array_index (s->sessions, i);

  g_queue_push_tail (&s->retired, g_steal_pointer (&x->sid));
  while (g_queue_get_length (&s->retired) > MAX_RETIRED)
    g_free (g_queue_pop_head (&s->retired));
  g_ptr_array_remove_index (s->sessions, i);
}

static Session *
session_new (const char *sid, gint64 ts)
{
  Session *x = g_new0 (Session, 1);

  x->sid = g_strdup (sid);
  x->first_ts = ts;
  return x;
}

void
rlx_signal_auth_settle (RlxSignalAuth *self, const char *from, const char *sid)
{
  Sender *s;

  g_return_if_fail (self != NULL);
  s = from ? g_hash_table_lookup (self->senders, from) : NULL;
  if (s == NULL || sid == NULL)
    return;
  for (guint i = s->sessions->len; i-- > 0;)
    {
      Session *x = g_ptr_array_index (s->sessions, i);
      if (strcmp (x->sid, sid) == 0)
        {
          /* settled: first, and the only one */
          g_ptr_array_steal_index (s->sessions, i);
          while (s->sessions->len > 0)
            retire (s, s->sessions->len - 1);
          g_ptr_array_add (s->sessions, x);
          return;
        }
    }
}

static gint64
real_clock (gpointer user_data)
{
  return g_get_real_time () / 1000;
}

/* HKDF-SHA256 (RFC 5869): PRK = Extract (salt "rlx-signal/2", cohort key),
 * then one Expand per use, each with its own label. */
static void
derive (const guint8 key[16], const char *info, gsize info_len, guint8 *out, gsize out_len)
{
  static const char salt[] = RLX_SIGNAL_LABEL;
  guint8 prk[32];
  gnutls_datum_t k = { (unsigned char *) key, 16 };
  gnutls_datum_t s = { (unsigned char *) salt, sizeof salt - 1 };
  gnutls_datum_t p = { prk, sizeof prk };
  gnutls_datum_t i = { (unsigned char *) info, (unsigned int) info_len };

  g_assert (gnutls_hkdf_extract (GNUTLS_MAC_SHA256, &k, &s, prk) == 0);
  g_assert (gnutls_hkdf_expand (GNUTLS_MAC_SHA256, &p, &i, out, out_len) == 0);
  gnutls_memset (prk, 0, sizeof prk);
}

void
rlx_signal_room_for (const guint8 key[16], const char *cohort, char out[RLX_SIGNAL_ROOM_LEN + 1])
{
  g_autofree char *info = g_strconcat (RLX_SIGNAL_LABEL " room\n", cohort, NULL);
  guint8 id[RLX_SIGNAL_ROOM_LEN / 2];

  g_return_if_fail (key != NULL && cohort != NULL);
  derive (key, info, strlen (info), id, sizeof id);
  for (guint i = 0; i < sizeof id; i++)
    g_snprintf (out + 2 * i, 3, "%02x", id[i]);
}

RlxSignalAuth *
rlx_signal_auth_new (const guint8 key[16], const char *cohort, const char *node_id)
{
  static const char label[] = RLX_SIGNAL_LABEL " aead";
  RlxSignalAuth *self;
  guint8 r[SID_HEX_LEN / 2], k[32];
  gnutls_datum_t kd = { k, sizeof k };

  g_return_val_if_fail (key != NULL, NULL);
  g_return_val_if_fail (rlx_signal_name_is_valid (cohort), NULL);
  g_return_val_if_fail (rlx_signal_name_is_valid (node_id), NULL);

  self = g_new0 (RlxSignalAuth, 1);
  derive (key, label, sizeof label - 1, k, sizeof k);
  g_assert (gnutls_aead_cipher_init (&self->aead, GNUTLS_CIPHER_AES_256_GCM, &kd) == 0);
  gnutls_memset (k, 0, sizeof k);
  rlx_signal_room_for (key, cohort, self->room);
  self->cohort = g_strdup (cohort);
  self->node = g_strdup (node_id);
  (void) gnutls_rnd (GNUTLS_RND_NONCE, r, sizeof r);
  for (guint i = 0; i < sizeof r; i++)
    g_snprintf (self->sid + 2 * i, 3, "%02x", r[i]);
  self->senders = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, sender_free);
  self->clock = real_clock;
  self->window_ms = RLX_SIGNAL_WINDOW_MS;
  return self;
}

void
rlx_signal_auth_free (RlxSignalAuth *self)
{
  if (self == NULL)
    return;
  gnutls_aead_cipher_deinit (self->aead);
  g_free (self->cohort);
  g_free (self->node);
  g_hash_table_unref (self->senders);
  g_free (self);
}

void
rlx_signal_auth_set_clock (RlxSignalAuth *self, RlxSignalClock clock, gpointer user_data)
{
  self->clock = clock ? clock : real_clock;
  self->clock_data = user_data;
}

void
rlx_signal_auth_set_window (RlxSignalAuth *self, gint64 window_ms)
{
  self->window_ms = window_ms;
}

const char *
rlx_signal_auth_get_session (RlxSignalAuth *self)
{
  return self->sid;
}

const char *
rlx_signal_auth_get_room (RlxSignalAuth *self)
{
  return self->room;
}

/* What the tag also covers: the protocol and the room, so a message cannot
 * be moved to another cohort's room (or another version) unnoticed. */
static char *
aad_of (RlxSignalAuth *self)
{
  return g_strconcat (RLX_SIGNAL_LABEL "\n", self->room, NULL);
}

static const char *reserved[] = { "from", "to", "type", "sid", "seq", "ts" };

JsonNode *
rlx_signal_auth_seal (RlxSignalAuth *self, const char *to, const char *type, JsonObject *fields)
{
  g_autoptr(JsonObject) body = json_object_new ();
  g_autoptr(JsonNode) bn = NULL;
  g_autofree char *text = NULL;
  g_autofree char *aad = NULL;
  g_autofree guint8 *box = NULL;
  g_autofree char *b64 = NULL;
  gsize len, ct_len;
  JsonObject *sealed;
  JsonNode *out;

  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (to != NULL && (strcmp (to, "*") == 0 || rlx_signal_name_is_valid (to)), NULL);
  g_return_val_if_fail (rlx_signal_name_is_valid (type), NULL);

  json_object_set_string_member (body, "from", self->node);
  json_object_set_string_member (body, "to", to);
  json_object_set_string_member (body, "type", type);
  json_object_set_string_member (body, "sid", self->sid);
  json_object_set_int_member (body, "seq", (gint64) ++self->seq);
  json_object_set_int_member (body, "ts", self->clock (self->clock_data));
  if (fields)
    {
      JsonObjectIter it;
      const char *k;
      JsonNode *v;

      json_object_iter_init (&it, fields);
      while (json_object_iter_next (&it, &k, &v))
        {
          for (guint i = 0; i < G_N_ELEMENTS (reserved); i++)
            g_return_val_if_fail (strcmp (k, reserved[i]) != 0, NULL);
          json_object_set_member (body, k, json_node_copy (v));
        }
    }
  bn = json_node_init_object (json_node_alloc (), body);
  text = json_to_string (bn, FALSE);
  len = strlen (text);
  g_return_val_if_fail (len <= RLX_SIGNAL_MAX_BODY, NULL);
  /* nonce ‖ ciphertext ‖ tag; a fresh random 96-bit nonce per message (the
   * signalling of a cohort is a few thousand messages at most, far below
   * the 2^32 random nonces one GCM key takes). */
  box = g_malloc (NONCE_LEN + len + TAG_LEN);
  (void) gnutls_rnd (GNUTLS_RND_NONCE, box, NONCE_LEN);
  aad = aad_of (self);
  ct_len = len + TAG_LEN;
  g_assert (gnutls_aead_cipher_encrypt (self->aead, box, NONCE_LEN, aad, strlen (aad), TAG_LEN,
                                        text, len, box + NONCE_LEN, &ct_len) == 0);
  gnutls_memset (text, 0, len);
  b64 = g_base64_encode (box, NONCE_LEN + ct_len);
  sealed = json_object_new ();
  json_object_set_string_member (sealed, "c", b64);
  out = json_node_init_object (json_node_alloc (), sealed);
  json_object_unref (sealed);
  return out;
}

static gboolean
is_hex (const char *s, gsize n)
{
  if (s == NULL || strlen (s) != n)
    return FALSE;
  for (gsize i = 0; i < n; i++)
    if (!g_ascii_isxdigit (s[i]))
      return FALSE;
  return TRUE;
}

static gboolean
is_base64 (const char *s)
{
  gsize n = strlen (s);

  if (n == 0 || n % 4 != 0)
    return FALSE;
  for (gsize i = 0; i < n; i++)
    if (!g_ascii_isalnum (s[i]) && s[i] != '+' && s[i] != '/' &&
        !(s[i] == '=' && i >= n - 2 && (i == n - 1 || s[n - 1] == '=')))
      return FALSE;
  return TRUE;
}

/* The body of @sealed, decrypted and authenticated, as text; NULL with
 * _MALFORMED or _BAD_MAC. */
static char *
unseal (RlxSignalAuth *self, JsonNode *sealed, GError **error)
{
  JsonObject *so;
  const char *c;
  g_autofree guint8 *box = NULL;
  g_autofree char *aad = NULL;
  char *text;
  gsize n, len;

  if (sealed == NULL || !JSON_NODE_HOLDS_OBJECT (sealed))
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                   "a sealed signalling message must be an object");
      return NULL;
    }
  so = json_node_get_object (sealed);
  c = get_str (so, "c");
  if (c == NULL || strlen (c) > RLX_SIGNAL_MAX_MESSAGE || !is_base64 (c))
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                   "a sealed signalling message needs \"c\", its sealed body in base64");
      return NULL;
    }
  box = g_base64_decode (c, &n);
  if (n < NONCE_LEN + TAG_LEN + 2)
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                   "a sealed signalling message of %" G_GSIZE_FORMAT " bytes is too short "
                   "for a nonce, a body and a tag", n);
      return NULL;
    }
  aad = aad_of (self);
  len = n - NONCE_LEN - TAG_LEN;
  text = g_malloc (len + 1);
  if (gnutls_aead_cipher_decrypt (self->aead, box, NONCE_LEN, aad, strlen (aad), TAG_LEN,
                                  box + NONCE_LEN, n - NONCE_LEN, text, &len) != 0)
    {
      g_free (text);
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_BAD_MAC,
                   "a signalling message failed authentication: it was sealed with another "
                   "cohort key (a wrong invite) or altered on the way");
      return NULL;
    }
  text[len] = '\0';
  return text;
}

JsonObject *
rlx_signal_auth_open (RlxSignalAuth *self, JsonNode *sealed, GError **error)
{
  g_autofree char *b = NULL;
  const char *from, *to, *type, *sid;
  g_autoptr(JsonObject) body = NULL;
  gint64 seq, ts, now;
  Sender *s;
  Session *x;

  g_return_val_if_fail (self != NULL, NULL);
  b = unseal (self, sealed, error);
  if (b == NULL)
    return NULL;
  /* Authentic: the sender holds the key. Still check everything. */
  body = parse_object (b, strlen (b), "a sealed message's body", error);
  gnutls_memset (b, 0, strlen (b));
  if (body == NULL)
    return NULL;
  from = get_str (body, "from");
  to = get_str (body, "to");
  type = get_str (body, "type");
  sid = get_str (body, "sid");
  if (!rlx_signal_name_is_valid (from) || to == NULL ||
      !(strcmp (to, "*") == 0 || rlx_signal_name_is_valid (to)) ||
      !rlx_signal_name_is_valid (type) || !is_hex (sid, SID_HEX_LEN) ||
      !get_int (body, "seq", &seq) || seq <= 0 || !get_int (body, "ts", &ts))
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_MALFORMED,
                   "a sealed signalling message lacks from/to/type/sid/seq/ts");
      return NULL;
    }
  if (strcmp (from, self->node) == 0 || (strcmp (to, "*") != 0 && strcmp (to, self->node) != 0))
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_NOT_FOR_US,
                   "a signalling message from %s to %s is not for %s", from, to, self->node);
      return NULL;
    }
  now = self->clock (self->clock_data);
  if (ts < now - self->window_ms || ts > now + self->window_ms)
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_STALE,
                   "a signalling message from %s is %" G_GINT64_FORMAT " s %s our clock, "
                   "outside the %" G_GINT64_FORMAT " s window: a replay, or the two "
                   "machines' clocks disagree (set them right, e.g. with NTP)", from,
                   ABS (now - ts) / 1000, ts < now ? "behind" : "ahead of",
                   self->window_ms / 1000);
      return NULL;
    }
  s = g_hash_table_lookup (self->senders, from);
  if (s == NULL)
    {
      if (g_hash_table_size (self->senders) >= MAX_SENDERS)
        {
          g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_REPLAY,
                       "more than %d senders in this room; %s is not taken in", MAX_SENDERS, from);
          return NULL;
        }
      s = g_new0 (Sender, 1);
      s->sessions = g_ptr_array_new_with_free_func (session_free);
      g_queue_init (&s->retired);
      g_hash_table_insert (self->senders, g_strdup (from), s);
    }
  x = NULL;
  for (guint i = 0; i < s->sessions->len && x == NULL; i++)
    if (strcmp (((Session *) g_ptr_array_index (s->sessions, i))->sid, sid) == 0)
      x = g_ptr_array_index (s->sessions, i);
  if (x == NULL)
    {
      if (g_queue_find_custom (&s->retired, sid, (GCompareFunc) strcmp) != NULL ||
          (s->sessions->len > 0 && ts < ((Session *) g_ptr_array_index (s->sessions, 0))->first_ts))
        {
          g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_REPLAY,
                       "a signalling message from an older session of %s was replayed", from);
          return NULL;
        }
      /* A new process of the same node, or anyone with the key saying so:
       * taken beside the settled one until the receiver settles. */
      if (s->sessions->len >= RLX_SIGNAL_SESSIONS)
        retire (s, 1);   /* the oldest unsettled one */
      x = session_new (sid, ts);
      g_ptr_array_add (s->sessions, x);
    }
  if ((guint64) seq <= x->last_seq)
    {
      g_set_error (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_REPLAY,
                   "signalling message %" G_GINT64_FORMAT " from %s was already seen "
                   "(last %" G_GUINT64_FORMAT "): a replay", seq, from, x->last_seq);
      return NULL;
    }
  x->last_seq = (guint64) seq;
  return g_steal_pointer (&body);
}
