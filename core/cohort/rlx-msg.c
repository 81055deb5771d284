/* rlx-msg.c — the cohort protocol's messages (see rlx-msg.h, docs/PROTOCOL.md)
 *
 * Parsing reads the header once through the wire codec's strict decoder,
 * then pulls each member a kind needs with a checked getter that names the
 * kind and the member in its error. Building writes the members of a kind
 * in one fixed order, so a message survives parse → build → parse unchanged
 * (the fuzz target checks exactly that).
 */
#include "rlx-config.h"
#include "rlx-msg.h"

#include <math.h>
#include <string.h>

G_DEFINE_QUARK (rlx-msg-error-quark, rlx_msg_error)

static const char *const kind_names[RLX_MSG_N_KINDS] = {
  "hello", "refuse", "leader", "join", "snapshot", "step", "grad", "ack", "reject",
  "heartbeat", "bye",
};

static const char *const role_names[RLX_ROLE_N] = {
  "alone", "joining", "member", "leader", "stopped",
};

/* The array member of each kind, NULL when it carries none. */
static const char *const array_names[RLX_MSG_N_KINDS] = {
  [RLX_MSG_SNAPSHOT] = "params", [RLX_MSG_STEP] = "avg", [RLX_MSG_GRAD] = "g",
};

const char *
rlx_msg_kind_name (RlxMsgKind kind)
{
  return kind < RLX_MSG_N_KINDS ? kind_names[kind] : "?";
}

const char *
rlx_role_name (RlxRole role)
{
  return role < RLX_ROLE_N ? role_names[role] : "?";
}

/* ── hashes ─────────────────────────────────────────────────────────────── */

char *
rlx_msg_hash_to_string (guint64 hash)
{
  return g_strdup_printf ("%016" G_GINT64_MODIFIER "x", hash);
}

gboolean
rlx_msg_hash_parse (const char *s, guint64 *out)
{
  guint64 v = 0;

  if (s == NULL || strlen (s) != 16)
    return FALSE;
  for (guint i = 0; i < 16; i++)
    {
      int d = g_ascii_xdigit_value (s[i]);
      if (d < 0 || g_ascii_isupper (s[i]))
        return FALSE;
      v = (v << 4) | (guint64) d;
    }
  *out = v;
  return TRUE;
}

/* ── arrays ─────────────────────────────────────────────────────────────── */

void
rlx_msg_array_decode (const RlxMsgArray *a, float *out)
{
  g_return_if_fail (a != NULL);
  rlx_wire_dequantize (a->codes, a->n, a->precision, a->scale, out);
}

const float *
rlx_msg_array_f32 (const RlxMsgArray *a)
{
  if (a->frame == NULL || a->precision != RLX_PRECISION_F32 || G_BYTE_ORDER != G_LITTLE_ENDIAN ||
      ((guintptr) a->codes % G_ALIGNOF (float)) != 0)
    return NULL;
  return a->codes;
}

void
rlx_msg_array_clear (RlxMsgArray *a)
{
  g_clear_pointer (&a->frame, g_bytes_unref);
  memset (a, 0, sizeof *a);
}

void
rlx_msg_array_copy (RlxMsgArray *dst, const RlxMsgArray *src)
{
  if (dst == src)
    return;
  rlx_msg_array_clear (dst);
  *dst = *src;
  if (dst->frame)
    g_bytes_ref (dst->frame);
}

/* ── parsing ────────────────────────────────────────────────────────────── */

typedef struct {
  JsonObject *o;
  const char *kind;
  GError    **error;
  gboolean    failed;
} Reader;

static gboolean G_GNUC_PRINTF (3, 4)
fail (Reader *r, const char *member, const char *fmt, ...)
{
  g_autofree char *what = NULL;
  va_list ap;

  if (r->failed)
    return FALSE;
  r->failed = TRUE;
  va_start (ap, fmt);
  what = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error (r->error, RLX_MSG_ERROR, RLX_MSG_ERROR_FIELD, "%s message: member \"%s\" %s",
               r->kind, member, what);
  return FALSE;
}

static JsonNode *
value_node (Reader *r, const char *name, gboolean required)
{
  JsonNode *n = json_object_get_member (r->o, name);

  if (n == NULL || JSON_NODE_HOLDS_NULL (n))
    {
      if (required)
        fail (r, name, "is missing");
      return NULL;
    }
  return n;
}

static gboolean
text_ok (const char *s, gsize max)
{
  return s != NULL && strlen (s) <= max && g_utf8_validate (s, -1, NULL);
}

/* A string of at most @max bytes; NULL when absent (and not @required). */
static char *
get_str (Reader *r, const char *name, gsize max, gboolean required)
{
  JsonNode *n = value_node (r, name, required);
  const char *s;

  if (n == NULL)
    return NULL;
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    {
      fail (r, name, "is not a string");
      return NULL;
    }
  s = json_node_get_string (n);
  if (!text_ok (s, max))
    {
      fail (r, name, "is longer than %" G_GSIZE_FORMAT " bytes or not UTF-8", max);
      return NULL;
    }
  return g_strdup (s);
}

/* An identifier: 1..RLX_MSG_MAX_ID bytes, no control characters. */
static char *
get_id (Reader *r, const char *name, gboolean required)
{
  g_autofree char *s = get_str (r, name, RLX_MSG_MAX_ID, required);

  if (s == NULL)
    return NULL;
  if (*s == '\0')
    {
      fail (r, name, "is empty");
      return NULL;
    }
  for (const char *c = s; *c; c++)
    if ((guchar) *c < 0x20 || *c == 0x7f)
      {
        fail (r, name, "holds a control character");
        return NULL;
      }
  return g_steal_pointer (&s);
}

static guint64
get_uint (Reader *r, const char *name, guint64 max, gboolean required, guint64 dflt)
{
  JsonNode *n = value_node (r, name, required);
  gint64 v;

  if (n == NULL)
    return dflt;
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_INT64)
    {
      fail (r, name, "is not an integer");
      return dflt;
    }
  v = json_node_get_int (n);
  if (v < 0 || (guint64) v > max)
    {
      fail (r, name, "= %" G_GINT64_FORMAT " is outside 0..%" G_GUINT64_FORMAT, v, max);
      return dflt;
    }
  return (guint64) v;
}

static gint64
get_int (Reader *r, const char *name, gboolean required, gint64 dflt)
{
  JsonNode *n = value_node (r, name, required);

  if (n == NULL)
    return dflt;
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_INT64)
    {
      fail (r, name, "is not an integer");
      return dflt;
    }
  return json_node_get_int (n);
}

static double
get_num (Reader *r, const char *name, gboolean required, double dflt)
{
  JsonNode *n = value_node (r, name, required);
  double v;

  if (n == NULL)
    return dflt;
  if (JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_DOUBLE)
    v = json_node_get_double (n);
  else if (JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_INT64)
    v = (double) json_node_get_int (n);
  else
    {
      fail (r, name, "is not a number");
      return dflt;
    }
  if (!isfinite (v))
    {
      fail (r, name, "is not finite");
      return dflt;
    }
  return v;
}

static gboolean
get_bool (Reader *r, const char *name)
{
  JsonNode *n = value_node (r, name, FALSE);

  if (n == NULL)
    return FALSE;
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_BOOLEAN)
    return fail (r, name, "is not true or false");
  return json_node_get_boolean (n);
}

static guint64
get_hash (Reader *r, const char *name)
{
  g_autofree char *s = get_str (r, name, 16, TRUE);
  guint64 h = 0;

  if (s != NULL && !rlx_msg_hash_parse (s, &h))
    fail (r, name, "is not 16 lowercase hex digits");
  return h;
}

static GPtrArray *
get_id_array (Reader *r, const char *name, guint max)
{
  JsonNode *n = value_node (r, name, TRUE);
  g_autoptr(GPtrArray) out = g_ptr_array_new_with_free_func (g_free);
  JsonArray *a;

  if (n == NULL)
    return NULL;
  if (!JSON_NODE_HOLDS_ARRAY (n))
    {
      fail (r, name, "is not an array");
      return NULL;
    }
  a = json_node_get_array (n);
  if (json_array_get_length (a) > max)
    {
      fail (r, name, "lists more than %u entries", max);
      return NULL;
    }
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonNode *e = json_array_get_element (a, i);
      const char *s;

      if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_STRING)
        {
          fail (r, name, "entry %u is not a string", i);
          return NULL;
        }
      s = json_node_get_string (e);
      if (!text_ok (s, RLX_MSG_MAX_ID) || *s == '\0')
        {
          fail (r, name, "entry %u is not a node id", i);
          return NULL;
        }
      for (guint j = 0; j < out->len; j++)
        if (strcmp (g_ptr_array_index (out, j), s) == 0)
          {
            fail (r, name, "names %s twice", s);
            return NULL;
          }
      g_ptr_array_add (out, g_strdup (s));
    }
  return g_steal_pointer (&out);
}

static RlxPrecision
get_precision (Reader *r, const char *name)
{
  g_autofree char *s = get_str (r, name, 16, TRUE);
  RlxPrecision p = RLX_PRECISION_F32;

  if (s != NULL && !rlx_precision_from_string (s, &p, NULL))
    fail (r, name, "= \"%s\" is not a wire precision (f32, f16, f8e4m3, f8e5m2)", s);
  return p;
}

static RlxRole
get_role (Reader *r, const char *name)
{
  g_autofree char *s = get_str (r, name, 16, TRUE);

  for (guint i = 0; s && i < RLX_ROLE_N; i++)
    if (strcmp (s, role_names[i]) == 0)
      return (RlxRole) i;
  if (s)
    fail (r, name, "= \"%s\" is not a role", s);
  return RLX_ROLE_ALONE;
}

static void
slot_clear (gpointer p)
{
  g_free (((RlxMsgSlot *) p)->node);
}

GArray *
rlx_msg_slots_new (void)
{
  GArray *a = g_array_new (FALSE, TRUE, sizeof (RlxMsgSlot));

  g_array_set_clear_func (a, slot_clear);
  return a;
}

static GArray *
get_assign (Reader *r, const char *name)
{
  JsonNode *n = value_node (r, name, TRUE);
  g_autoptr(GArray) out = rlx_msg_slots_new ();
  g_autoptr(GList) names = NULL;
  JsonObject *o;

  if (n == NULL)
    return NULL;
  if (!JSON_NODE_HOLDS_OBJECT (n))
    {
      fail (r, name, "is not an object");
      return NULL;
    }
  o = json_node_get_object (n);
  if (json_object_get_size (o) > RLX_MSG_MAX_MEMBERS)
    {
      fail (r, name, "assigns more than %u members", RLX_MSG_MAX_MEMBERS);
      return NULL;
    }
  names = json_object_get_members (o);
  for (GList *l = names; l; l = l->next)
    {
      JsonNode *e = json_object_get_member (o, l->data);
      JsonArray *a;
      JsonNode *s0, *s1;
      RlxMsgSlot slot = { 0 };
      gint64 start, count;

      if (!text_ok (l->data, RLX_MSG_MAX_ID) || *(const char *) l->data == '\0')
        {
          fail (r, name, "assigns to something that is not a node id");
          return NULL;
        }
      if (!JSON_NODE_HOLDS_ARRAY (e) || json_array_get_length (json_node_get_array (e)) != 2)
        {
          fail (r, name, "entry of %s is not [start, count]", (const char *) l->data);
          return NULL;
        }
      a = json_node_get_array (e);
      s0 = json_array_get_element (a, 0);
      s1 = json_array_get_element (a, 1);
      if (!JSON_NODE_HOLDS_VALUE (s0) || json_node_get_value_type (s0) != G_TYPE_INT64 ||
          !JSON_NODE_HOLDS_VALUE (s1) || json_node_get_value_type (s1) != G_TYPE_INT64)
        {
          fail (r, name, "entry of %s is not two integers", (const char *) l->data);
          return NULL;
        }
      start = json_node_get_int (s0);
      count = json_node_get_int (s1);
      if (start < 0 || count <= 0 || start > G_MAXINT32 || count > G_MAXINT32 - start)
        {
          fail (r, name, "entry of %s = [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
                "] is not a slice", (const char *) l->data, start, count);
          return NULL;
        }
      slot.node = g_strdup (l->data);
      slot.start = (guint) start;
      slot.count = (guint) count;
      g_array_append_val (out, slot);
    }
  return g_steal_pointer (&out);
}

static GArray *
get_hashes (Reader *r, const char *name)
{
  JsonNode *n = value_node (r, name, FALSE);
  g_autoptr(GArray) out = g_array_new (FALSE, FALSE, sizeof (guint64));
  JsonArray *a;

  if (n == NULL)
    return g_steal_pointer (&out);
  if (!JSON_NODE_HOLDS_ARRAY (n))
    {
      fail (r, name, "is not an array");
      return NULL;
    }
  a = json_node_get_array (n);
  if (json_array_get_length (a) > RLX_MSG_MAX_HASHES)
    {
      fail (r, name, "holds more than %u hashes", RLX_MSG_MAX_HASHES);
      return NULL;
    }
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonNode *e = json_array_get_element (a, i);
      guint64 h;

      if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_STRING ||
          !rlx_msg_hash_parse (json_node_get_string (e), &h))
        {
          fail (r, name, "entry %u is not a hash", i);
          return NULL;
        }
      g_array_append_val (out, h);
    }
  return g_steal_pointer (&out);
}

#define MAX_STEP ((guint64) G_MAXINT64)
#define MAX_U32  ((guint64) G_MAXINT32)

static void
parse_body (Reader *r, RlxMsg *m)
{
  switch (m->kind)
    {
    case RLX_MSG_HELLO:
      {
        RlxMsgHello *h = &m->u.hello;
        h->version = get_int (r, "v", TRUE, 0);
        h->cohort = get_id (r, "cohort", TRUE);
        h->seed = get_str (r, "seed", 32, TRUE);
        h->model = get_id (r, "model", TRUE);
        h->dataset = get_id (r, "dataset", TRUE);
        h->backend = get_str (r, "backend", RLX_MSG_MAX_ID, TRUE);
        h->device = get_str (r, "device", RLX_MSG_MAX_TEXT, TRUE);
        h->fallback = get_str (r, "fallback", RLX_MSG_MAX_TEXT, TRUE);
        h->host = get_str (r, "host", RLX_MSG_MAX_TEXT, TRUE);
        h->precision = get_precision (r, "precision");
        h->batch = (guint) get_uint (r, "batch", 1u << 24, TRUE, 0);
        h->max_batch = (guint) get_uint (r, "max_batch", 1u << 24, TRUE, 0);
        h->role = get_role (r, "role");
        h->leader = get_id (r, "leader", FALSE);
        h->term = get_uint (r, "term", MAX_STEP, TRUE, 0);
        h->step = get_uint (r, "step", MAX_STEP, TRUE, 0);
        h->members = (guint) get_uint (r, "members", RLX_MSG_MAX_MEMBERS, TRUE, 0);
        h->checkpoint = get_uint (r, "checkpoint", MAX_STEP, FALSE, 0);
        h->join_only = get_bool (r, "join_only");
        break;
      }
    case RLX_MSG_REFUSE:
      m->u.refuse.reason = get_str (r, "reason", RLX_MSG_MAX_TEXT, TRUE);
      break;
    case RLX_MSG_LEADER:
      m->u.leader.leader = get_id (r, "leader", TRUE);
      m->u.leader.term = get_uint (r, "term", MAX_STEP, TRUE, 0);
      m->u.leader.step = get_uint (r, "step", MAX_STEP, TRUE, 0);
      break;
    case RLX_MSG_JOIN:
      m->u.join.reason = get_str (r, "reason", RLX_MSG_MAX_TEXT, TRUE);
      m->u.join.step = get_uint (r, "step", MAX_STEP, TRUE, 0);
      m->u.join.hash = get_hash (r, "hash");
      m->u.join.merge = get_bool (r, "merge");
      break;
    case RLX_MSG_SNAPSHOT:
      {
        RlxMsgSnapshot *s = &m->u.snapshot;
        s->term = get_uint (r, "term", MAX_STEP, TRUE, 0);
        s->leader = get_id (r, "leader", TRUE);
        s->step = get_uint (r, "step", MAX_STEP, TRUE, 0);
        s->hash = get_hash (r, "hash");
        s->seed = get_str (r, "seed", 32, TRUE);
        s->epoch = (guint) get_uint (r, "epoch", MAX_U32, TRUE, 0);
        s->pos = (guint) get_uint (r, "pos", MAX_U32, TRUE, 0);
        s->loss = get_num (r, "loss", TRUE, 0);
        s->members = get_id_array (r, "members", RLX_MSG_MAX_MEMBERS);
        s->hashes_from = get_uint (r, "hashes_from", MAX_STEP, FALSE, 0);
        s->hashes = get_hashes (r, "hashes");
        break;
      }
    case RLX_MSG_STEP:
      {
        RlxMsgStep *s = &m->u.step;
        s->term = get_uint (r, "term", MAX_STEP, TRUE, 0);
        s->step = get_uint (r, "step", MAX_STEP, TRUE, 0);
        s->commit = get_uint (r, "commit", MAX_STEP, TRUE, 0);
        s->base = get_hash (r, "base");
        s->loss = get_num (r, "loss", TRUE, 0);
        s->samples = get_uint (r, "samples", MAX_U32, TRUE, 0);
        s->contributors = get_id_array (r, "contributors", RLX_MSG_MAX_MEMBERS);
        s->late = (guint) get_uint (r, "late", MAX_U32, TRUE, 0);
        s->rejected = (guint) get_uint (r, "rejected", MAX_U32, TRUE, 0);
        s->lr = get_num (r, "lr", TRUE, 0);
        s->epoch = (guint) get_uint (r, "epoch", MAX_U32, TRUE, 0);
        s->pos = (guint) get_uint (r, "pos", MAX_U32, TRUE, 0);
        s->count = (guint) get_uint (r, "count", MAX_U32, TRUE, 0);
        s->members = get_id_array (r, "members", RLX_MSG_MAX_MEMBERS);
        s->assign = get_assign (r, "assign");
        s->final = get_bool (r, "final");
        if (!r->failed && s->step == 0)
          fail (r, "step", "is 0 (steps count from 1)");
        if (!r->failed && s->commit != 0 && s->commit + 1 != s->step && !s->final)
          fail (r, "commit", "= %" G_GUINT64_FORMAT " does not precede step %" G_GUINT64_FORMAT,
                s->commit, s->step);
        break;
      }
    case RLX_MSG_GRAD:
      {
        RlxMsgGrad *g = &m->u.grad;
        g->term = get_uint (r, "term", MAX_STEP, TRUE, 0);
        g->step = get_uint (r, "step", MAX_STEP, TRUE, 0);
        g->samples = (guint) get_uint (r, "samples", MAX_U32, TRUE, 0);
        g->loss = get_num (r, "loss", TRUE, 0);
        if (json_object_has_member (r->o, "loss_finite") && !get_bool (r, "loss_finite"))
          g->loss = NAN;
        g->compute_us = (gint64) get_uint (r, "compute_us", MAX_STEP, FALSE, 0);
        g->refused = get_str (r, "refused", RLX_MSG_MAX_TEXT, FALSE);
        break;
      }
    case RLX_MSG_ACK:
      m->u.ack.term = get_uint (r, "term", MAX_STEP, TRUE, 0);
      m->u.ack.step = get_uint (r, "step", MAX_STEP, TRUE, 0);
      m->u.ack.hash = get_hash (r, "hash");
      break;
    case RLX_MSG_REJECT:
      m->u.reject.step = get_uint (r, "step", MAX_STEP, TRUE, 0);
      m->u.reject.reason = get_str (r, "reason", RLX_MSG_MAX_TEXT, TRUE);
      break;
    case RLX_MSG_HEARTBEAT:
      m->u.heartbeat.term = get_uint (r, "term", MAX_STEP, TRUE, 0);
      m->u.heartbeat.step = get_uint (r, "step", MAX_STEP, TRUE, 0);
      m->u.heartbeat.t = get_int (r, "clock", FALSE, -1);
      m->u.heartbeat.echo = get_int (r, "echo", FALSE, -1);
      m->u.heartbeat.age = (gint64) get_uint (r, "age", MAX_STEP, FALSE, 0);
      break;
    case RLX_MSG_BYE:
      m->u.bye.reason = get_str (r, "reason", RLX_MSG_MAX_TEXT, FALSE);
      if (m->u.bye.reason == NULL && !r->failed)
        m->u.bye.reason = g_strdup ("left");
      break;
    case RLX_MSG_N_KINDS:
    default:
      g_assert_not_reached ();
    }
}

static RlxMsgArray *
msg_array (RlxMsg *m)
{
  switch (m->kind)
    {
    case RLX_MSG_SNAPSHOT: return &m->u.snapshot.params;
    case RLX_MSG_STEP: return &m->u.step.update;
    case RLX_MSG_GRAD: return &m->u.grad.grads;
    default: return NULL;
    }
}

gboolean
rlx_msg_parse (GBytes *frame, const RlxWireLimits *limits, RlxMsg *msg, GError **error)
{
  g_autoptr(JsonObject) h = NULL;
  g_autoptr(GError) local = NULL;
  Reader r = { 0 };
  RlxMsgArray *arr;
  JsonNode *t;

  g_return_val_if_fail (frame != NULL, FALSE);
  g_return_val_if_fail (msg != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  memset (msg, 0, sizeof *msg);
  if (!rlx_wire_decode_full (frame, limits, &msg->info, &h, NULL, &local))
    {
      g_set_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_FRAME, "%s", local->message);
      return FALSE;
    }
  t = json_object_get_member (h, "t");
  if (t == NULL || !JSON_NODE_HOLDS_VALUE (t) || json_node_get_value_type (t) != G_TYPE_STRING)
    {
      g_set_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_KIND,
                   "message without a kind (\"t\" must name one)");
      return FALSE;
    }
  msg->kind = RLX_MSG_N_KINDS;
  for (guint i = 0; i < RLX_MSG_N_KINDS; i++)
    if (strcmp (json_node_get_string (t), kind_names[i]) == 0)
      msg->kind = (RlxMsgKind) i;
  if (msg->kind == RLX_MSG_N_KINDS)
    {
      g_set_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_KIND, "unknown message kind \"%.32s\"",
                   json_node_get_string (t));
      return FALSE;
    }

  r.o = h;
  r.kind = kind_names[msg->kind];
  r.error = error;
  msg->node = get_id (&r, "node", TRUE);
  if (!r.failed)
    parse_body (&r, msg);

  arr = msg_array (msg);
  if (!r.failed && arr == NULL && msg->info.has_values)
    {
      g_set_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_ARRAY,
                   "%s message carries an array (\"%s\"); it has none", r.kind, msg->info.field);
      r.failed = TRUE;
    }
  else if (!r.failed && arr != NULL && msg->info.has_values)
    {
      if (strcmp (msg->info.field, array_names[msg->kind]) != 0)
        {
          g_set_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_ARRAY,
                       "%s message's array is named \"%s\", expected \"%s\"", r.kind,
                       msg->info.field, array_names[msg->kind]);
          r.failed = TRUE;
        }
      else
        {
          gsize len;
          const guint8 *data = g_bytes_get_data (frame, &len);

          arr->frame = g_bytes_ref (frame);
          arr->n = msg->info.n;
          arr->precision = msg->info.precision;
          arr->scale = msg->info.scale;
          arr->codes = data + len - arr->n * rlx_precision_element_size (arr->precision);
        }
    }
  if (!r.failed)
    {
      /* What each kind promises about its array. */
      if (msg->kind == RLX_MSG_SNAPSHOT &&
          (arr->frame == NULL || arr->precision != RLX_PRECISION_F32))
        {
          g_set_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_ARRAY,
                       "snapshot message without its parameters at f32 (\"params\")");
          r.failed = TRUE;
        }
      else if (msg->kind == RLX_MSG_STEP && (msg->u.step.commit > 0) != (arr->frame != NULL))
        {
          g_set_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_ARRAY, msg->u.step.commit > 0
                       ? "step message commits step %" G_GUINT64_FORMAT " without its update (\"avg\")"
                       : "step message carries an update but commits no step (commit 0)",
                       msg->u.step.commit);
          r.failed = TRUE;
        }
      else if (msg->kind == RLX_MSG_GRAD && (msg->u.grad.refused != NULL) == (arr->frame != NULL))
        {
          g_set_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_ARRAY, msg->u.grad.refused
                       ? "grad message both refuses and carries a bucket"
                       : "grad message without a bucket (\"g\") or a reason (\"refused\")");
          r.failed = TRUE;
        }
    }
  if (r.failed)
    {
      rlx_msg_clear (msg);
      return FALSE;
    }
  return TRUE;
}

void
rlx_msg_init (RlxMsg *msg, RlxMsgKind kind, const char *node)
{
  g_return_if_fail (msg != NULL);
  g_return_if_fail (kind < RLX_MSG_N_KINDS);

  memset (msg, 0, sizeof *msg);
  msg->kind = kind;
  msg->node = g_strdup (node);
  if (kind == RLX_MSG_HEARTBEAT)
    msg->u.heartbeat.t = msg->u.heartbeat.echo = -1;
}

void
rlx_msg_steal (RlxMsg *dst, RlxMsg *src)
{
  g_return_if_fail (dst != NULL && src != NULL && dst != src);
  *dst = *src;
  memset (src, 0, sizeof *src);
  src->kind = RLX_MSG_N_KINDS;
}

void
rlx_msg_clear (RlxMsg *msg)
{
  RlxMsgArray *arr;

  if (msg == NULL)
    return;
  if (msg->kind >= RLX_MSG_N_KINDS)
    {
      g_free (msg->node);
      memset (msg, 0, sizeof *msg);
      return;
    }
  arr = msg_array (msg);
  if (arr)
    rlx_msg_array_clear (arr);
  g_free (msg->node);
  switch (msg->kind)
    {
    case RLX_MSG_HELLO:
      g_free (msg->u.hello.cohort);
      g_free (msg->u.hello.seed);
      g_free (msg->u.hello.model);
      g_free (msg->u.hello.dataset);
      g_free (msg->u.hello.backend);
      g_free (msg->u.hello.device);
      g_free (msg->u.hello.fallback);
      g_free (msg->u.hello.host);
      g_free (msg->u.hello.leader);
      break;
    case RLX_MSG_REFUSE: g_free (msg->u.refuse.reason); break;
    case RLX_MSG_LEADER: g_free (msg->u.leader.leader); break;
    case RLX_MSG_JOIN: g_free (msg->u.join.reason); break;
    case RLX_MSG_SNAPSHOT:
      g_free (msg->u.snapshot.leader);
      g_free (msg->u.snapshot.seed);
      g_clear_pointer (&msg->u.snapshot.members, g_ptr_array_unref);
      g_clear_pointer (&msg->u.snapshot.hashes, g_array_unref);
      break;
    case RLX_MSG_STEP:
      g_clear_pointer (&msg->u.step.contributors, g_ptr_array_unref);
      g_clear_pointer (&msg->u.step.members, g_ptr_array_unref);
      g_clear_pointer (&msg->u.step.assign, g_array_unref);
      break;
    case RLX_MSG_GRAD: g_free (msg->u.grad.refused); break;
    case RLX_MSG_REJECT: g_free (msg->u.reject.reason); break;
    case RLX_MSG_BYE: g_free (msg->u.bye.reason); break;
    case RLX_MSG_ACK:
    case RLX_MSG_HEARTBEAT:
    case RLX_MSG_N_KINDS:
    default:
      break;
    }
  memset (msg, 0, sizeof *msg);
}

/* ── building ───────────────────────────────────────────────────────────── */

static void
set_u64 (JsonObject *o, const char *name, guint64 v)
{
  json_object_set_int_member (o, name, (gint64) MIN (v, MAX_STEP));
}

static void
set_hash (JsonObject *o, const char *name, guint64 h)
{
  g_autofree char *s = rlx_msg_hash_to_string (h);
  json_object_set_string_member (o, name, s);
}

static void
set_str (JsonObject *o, const char *name, const char *s)
{
  json_object_set_string_member (o, name, s ? s : "");
}

static JsonArray *
id_array (GPtrArray *a)
{
  JsonArray *arr = json_array_new ();

  for (guint i = 0; a && i < a->len; i++)
    json_array_add_string_element (arr, g_ptr_array_index (a, i));
  return arr;
}

static JsonObject *
header_of (const RlxMsg *m)
{
  JsonObject *o = json_object_new ();

  json_object_set_string_member (o, "t", kind_names[m->kind]);
  set_str (o, "node", m->node);
  switch (m->kind)
    {
    case RLX_MSG_HELLO:
      {
        const RlxMsgHello *h = &m->u.hello;
        json_object_set_int_member (o, "v", h->version);
        set_str (o, "cohort", h->cohort);
        set_str (o, "seed", h->seed);
        set_str (o, "model", h->model);
        set_str (o, "dataset", h->dataset);
        set_str (o, "backend", h->backend);
        set_str (o, "device", h->device);
        set_str (o, "fallback", h->fallback);
        set_str (o, "host", h->host);
        set_str (o, "precision", rlx_precision_to_string (h->precision));
        set_u64 (o, "batch", h->batch);
        set_u64 (o, "max_batch", h->max_batch);
        set_str (o, "role", rlx_role_name (h->role));
        if (h->leader)
          set_str (o, "leader", h->leader);
        set_u64 (o, "term", h->term);
        set_u64 (o, "step", h->step);
        set_u64 (o, "members", h->members);
        set_u64 (o, "checkpoint", h->checkpoint);
        json_object_set_boolean_member (o, "join_only", h->join_only);
        break;
      }
    case RLX_MSG_REFUSE:
      set_str (o, "reason", m->u.refuse.reason);
      break;
    case RLX_MSG_LEADER:
      set_str (o, "leader", m->u.leader.leader);
      set_u64 (o, "term", m->u.leader.term);
      set_u64 (o, "step", m->u.leader.step);
      break;
    case RLX_MSG_JOIN:
      set_str (o, "reason", m->u.join.reason);
      set_u64 (o, "step", m->u.join.step);
      set_hash (o, "hash", m->u.join.hash);
      if (m->u.join.merge)
        json_object_set_boolean_member (o, "merge", TRUE);
      break;
    case RLX_MSG_SNAPSHOT:
      {
        const RlxMsgSnapshot *s = &m->u.snapshot;
        set_u64 (o, "term", s->term);
        set_str (o, "leader", s->leader);
        set_u64 (o, "step", s->step);
        set_hash (o, "hash", s->hash);
        set_str (o, "seed", s->seed);
        set_u64 (o, "epoch", s->epoch);
        set_u64 (o, "pos", s->pos);
        json_object_set_double_member (o, "loss", isfinite (s->loss) ? s->loss : 0.0);
        json_object_set_array_member (o, "members", id_array (s->members));
        if (s->hashes && s->hashes->len > 0)
          {
            JsonArray *a = json_array_new ();
            set_u64 (o, "hashes_from", s->hashes_from);
            for (guint i = 0; i < s->hashes->len; i++)
              {
                g_autofree char *hx = rlx_msg_hash_to_string (g_array_index (s->hashes, guint64, i));
                json_array_add_string_element (a, hx);
              }
            json_object_set_array_member (o, "hashes", a);
          }
        break;
      }
    case RLX_MSG_STEP:
      {
        const RlxMsgStep *s = &m->u.step;
        JsonObject *assign = json_object_new ();
        set_u64 (o, "term", s->term);
        set_u64 (o, "step", s->step);
        set_u64 (o, "commit", s->commit);
        set_hash (o, "base", s->base);
        json_object_set_double_member (o, "loss", isfinite (s->loss) ? s->loss : 0.0);
        set_u64 (o, "samples", s->samples);
        json_object_set_array_member (o, "contributors", id_array (s->contributors));
        set_u64 (o, "late", s->late);
        set_u64 (o, "rejected", s->rejected);
        json_object_set_double_member (o, "lr", s->lr);
        set_u64 (o, "epoch", s->epoch);
        set_u64 (o, "pos", s->pos);
        set_u64 (o, "count", s->count);
        json_object_set_array_member (o, "members", id_array (s->members));
        for (guint i = 0; s->assign && i < s->assign->len; i++)
          {
            const RlxMsgSlot *slot = &g_array_index (s->assign, RlxMsgSlot, i);
            JsonArray *a = json_array_new ();
            json_array_add_int_element (a, slot->start);
            json_array_add_int_element (a, slot->count);
            json_object_set_array_member (assign, slot->node, a);
          }
        json_object_set_object_member (o, "assign", assign);
        json_object_set_boolean_member (o, "final", s->final);
        break;
      }
    case RLX_MSG_GRAD:
      {
        const RlxMsgGrad *g = &m->u.grad;
        set_u64 (o, "term", g->term);
        set_u64 (o, "step", g->step);
        set_u64 (o, "samples", g->samples);
        json_object_set_double_member (o, "loss", isfinite (g->loss) ? g->loss : 0.0);
        json_object_set_boolean_member (o, "loss_finite", isfinite (g->loss));
        set_u64 (o, "compute_us", (guint64) MAX (0, g->compute_us));
        if (g->refused)
          set_str (o, "refused", g->refused);
        break;
      }
    case RLX_MSG_ACK:
      set_u64 (o, "term", m->u.ack.term);
      set_u64 (o, "step", m->u.ack.step);
      set_hash (o, "hash", m->u.ack.hash);
      break;
    case RLX_MSG_REJECT:
      set_u64 (o, "step", m->u.reject.step);
      set_str (o, "reason", m->u.reject.reason);
      break;
    case RLX_MSG_HEARTBEAT:
      set_u64 (o, "term", m->u.heartbeat.term);
      set_u64 (o, "step", m->u.heartbeat.step);
      if (m->u.heartbeat.t >= 0)
        json_object_set_int_member (o, "clock", m->u.heartbeat.t);
      if (m->u.heartbeat.echo >= 0)
        {
          json_object_set_int_member (o, "echo", m->u.heartbeat.echo);
          json_object_set_int_member (o, "age", MAX (0, m->u.heartbeat.age));
        }
      break;
    case RLX_MSG_BYE:
      set_str (o, "reason", m->u.bye.reason ? m->u.bye.reason : "left");
      break;
    case RLX_MSG_N_KINDS:
    default:
      g_assert_not_reached ();
    }
  return o;
}

JsonObject *
rlx_msg_header (const RlxMsg *msg)
{
  g_return_val_if_fail (msg != NULL && msg->kind < RLX_MSG_N_KINDS, NULL);
  return header_of (msg);
}

GBytes *
rlx_msg_build (const RlxMsg *msg, const float *values, gsize n, RlxPrecision precision,
               GError **error)
{
  g_autoptr(JsonObject) h = NULL;

  g_return_val_if_fail (msg != NULL && msg->kind < RLX_MSG_N_KINDS, NULL);
  g_return_val_if_fail (values == NULL || array_names[msg->kind] != NULL, NULL);

  h = header_of (msg);
  return rlx_wire_encode (h, values, values ? n : 0, precision,
                          values ? array_names[msg->kind] : NULL, error);
}

/* The header JSON of @msg with the wire's own members for an array of @n
 * elements at @precision and @scale (as rlx_wire_encode writes them, last
 * and in its order: the frame is byte-identical to an encoded one). */
static char *
array_header_json (const RlxMsg *msg, gsize n, RlxPrecision precision, double scale,
                   GError **error)
{
  g_autoptr(JsonObject) h = header_of (msg);

  json_object_set_string_member (h, "_f32", array_names[msg->kind]);
  if (precision != RLX_PRECISION_F32 && n > 0)
    {
      json_object_set_string_member (h, "_fmt", rlx_precision_to_string (precision));
      json_object_set_double_member (h, "_scale", scale);
    }
  return rlx_wire_header_to_json (h, error);
}

GBytes *
rlx_msg_frame_wrap (const RlxMsg *msg, gsize n, RlxPrecision precision, double scale,
                    guint8 *buf, gsize headroom, GError **error)
{
  g_autofree char *json = NULL;
  gsize hlen, padded, es = rlx_precision_element_size (precision);
  guint8 *start;
  guint32 le;

  g_return_val_if_fail (msg != NULL && msg->kind < RLX_MSG_N_KINDS, NULL);
  g_return_val_if_fail (array_names[msg->kind] != NULL, NULL);
  g_return_val_if_fail (buf != NULL, NULL);

  json = array_header_json (msg, n, precision, scale, error);
  if (json == NULL)
    {
      g_free (buf);
      return NULL;
    }
  hlen = strlen (json);
  padded = (hlen + 3) & ~(gsize) 3;
  if (padded + 4 > headroom)
    {
      g_set_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_FIELD,
                   "%s message header of %" G_GSIZE_FORMAT " bytes does not fit in %"
                   G_GSIZE_FORMAT, rlx_msg_kind_name (msg->kind), hlen, headroom);
      g_free (buf);
      return NULL;
    }
  start = buf + headroom - padded - 4;
  le = GUINT32_TO_LE ((guint32) padded);
  memcpy (start, &le, 4);
  memcpy (start + 4, json, hlen);
  memset (start + 4 + hlen, ' ', padded - hlen);
  return g_bytes_new_with_free_func (start, 4 + padded + n * es, g_free, buf);
}

guint8 *
rlx_msg_frame_new (const RlxMsg *msg, gsize n, RlxPrecision precision, double scale,
                   gsize *len_out, guint8 **payload_out, GError **error)
{
  g_autofree char *json = NULL;
  gsize hlen, padded, es = rlx_precision_element_size (precision), total;
  guint32 le;
  guint8 *buf;

  g_return_val_if_fail (msg != NULL && msg->kind < RLX_MSG_N_KINDS, NULL);
  g_return_val_if_fail (array_names[msg->kind] != NULL, NULL);
  g_return_val_if_fail (len_out != NULL && payload_out != NULL, NULL);

  json = array_header_json (msg, n, precision, scale, error);
  if (json == NULL)
    return NULL;
  hlen = strlen (json);
  padded = (hlen + 3) & ~(gsize) 3;
  total = 4 + padded + n * es;
  buf = g_malloc (total);
  le = GUINT32_TO_LE ((guint32) padded);
  memcpy (buf, &le, 4);
  memcpy (buf + 4, json, hlen);
  memset (buf + 4 + hlen, ' ', padded - hlen);
  *payload_out = buf + 4 + padded;
  *len_out = total;
  return buf;
}
