/* rlx-msg.c — the cohort protocol's messages (see rlx-msg.h, docs/PROTOCOL.md)
 *
 * Parsing reads the header once through the wire codec's strict decoder,
 * then reads the members of the kind's field table (rlx-msg-fields.c: name,
 * type, where the value goes, required or not, bounds) in order, each
 * through the checked getter of its type, which names the kind and the
 * member in its error. Building is rlx-msg-build.c, over the same tables.
 */
#include "rlx-config.h"
#include "rlx-msg-private.h"
#include "core/cohort/rlx-outer.h"

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
rlx_msg_array_name (RlxMsgKind kind)
{
  return kind < RLX_MSG_N_KINDS ? array_names[kind] : NULL;
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
get_hash (Reader *r, const char *name, gboolean required)
{
  g_autofree char *s = get_str (r, name, 16, required);
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

/* Rules across members of one kind, checked once every member is read. */
static void
check_step (Reader *r, RlxMsg *m)
{
  const RlxMsgStep *s = &m->u.step;

  if (s->step == 0)
    fail (r, "step", "is 0 (steps count from 1)");
  else if (s->lag > 0 && s->h == 0)
    fail (r, "lag", "= %u without an outer round (h)", s->lag);
  else if (s->commit != 0 && s->commit + 1 + s->lag != s->step && !s->final)
    fail (r, "commit", "= %" G_GUINT64_FORMAT " does not precede step %" G_GUINT64_FORMAT,
          s->commit, s->step);
  else if (s->ch > 0 && s->commit == 0)
    fail (r, "ch", "names an outer commit in a frame without one");
  else if (s->cepoch < -1 || s->cepoch > G_MAXINT32)
    fail (r, "cepoch", "= %" G_GINT64_FORMAT " is outside 0..%d", s->cepoch, G_MAXINT32);
  else if (s->cpos < -1 || s->cpos > G_MAXINT32)
    fail (r, "cpos", "= %" G_GINT64_FORMAT " is outside 0..%d", s->cpos, G_MAXINT32);
  else if ((s->cepoch < 0) != (s->cpos < 0))
    fail (r, s->cepoch < 0 ? "cepoch" : "cpos", "is missing (cepoch and cpos go together)");
  else if (s->cepoch >= 0 && (s->commit == 0 || s->step == s->commit + 1))
    fail (r, "cepoch", "is set in a frame whose step is the one after its commit, or without one");
  else if (s->cepoch < 0 && s->commit > 0 && s->step != s->commit + 1)
    fail (r, "cepoch", "is missing (the frame names a step other than the one after its commit)");
  else if ((s->h > 0 || s->ch > 0) && !rlx_outer_check_settings (s->olr, s->omom, NULL))
    fail (r, "olr", "= %g with omom = %g is not an outer optimizer's setting", s->olr, s->omom);
}

static void
store_uint (gpointer at, gsize size, guint64 v)
{
  if (size == sizeof (guint32))
    *(guint32 *) at = (guint32) v;
  else
    {
      g_assert (size == sizeof (guint64));
      *(guint64 *) at = v;
    }
}

/* Read member @f of the header into @m; FALSE once the reader has failed. */
static gboolean
read_field (Reader *r, RlxMsg *m, const RlxMsgField *f)
{
  gpointer at = (guint8 *) m + f->offset;

  switch (f->type)
    {
    case F_STR:
      *(char **) at = get_str (r, f->name, f->max, f->required);
      if (*(char **) at == NULL && f->dflt_str != NULL && !r->failed)
        *(char **) at = g_strdup (f->dflt_str);
      break;
    case F_ID:
      *(char **) at = get_id (r, f->name, f->required);
      break;
    case F_UINT:
    case F_NONNEG:
      store_uint (at, f->size, get_uint (r, f->name, f->max, f->required, 0));
      break;
    case F_INT:
      *(gint64 *) at = get_int (r, f->name, f->required, f->dflt);
      break;
    case F_NUM:
      *(double *) at = get_num (r, f->name, f->required, 0);
      break;
    case F_BOOL:
      *(gboolean *) at = get_bool (r, f->name);
      break;
    case F_NAN_UNLESS:
      /* a member that is there (null too) and not true */
      if (json_object_has_member (r->o, f->name) && !get_bool (r, f->name))
        *(double *) at = NAN;
      break;
    case F_HASH:
      *(guint64 *) at = get_hash (r, f->name, f->required);
      break;
    case F_IDS:
      *(GPtrArray **) at = get_id_array (r, f->name, (guint) f->max);
      break;
    case F_HASHES:
      *(GArray **) at = get_hashes (r, f->name);
      break;
    case F_ASSIGN:
      *(GArray **) at = get_assign (r, f->name);
      break;
    case F_PRECISION:
      *(RlxPrecision *) at = get_precision (r, f->name);
      break;
    case F_ROLE:
      /* (an optional role that is not there: RLX_ROLE_N, "not said") */
      *(RlxRole *) at = !f->required && !json_object_has_member (r->o, f->name)
                            ? RLX_ROLE_N : get_role (r, f->name);
      break;
    default:
      g_assert_not_reached ();
    }
  return !r->failed;
}

/* Every member of @m's kind, in table order, then the kind's own rules. */
static void
parse_body (Reader *r, RlxMsg *m)
{
  guint n;
  const RlxMsgField *fields = rlx_msg_fields (m->kind, &n);

  for (guint i = 0; i < n; i++)
    if (!read_field (r, m, &fields[i]))
      return;
  if (m->kind == RLX_MSG_STEP)
    check_step (r, m);
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
  if (read_field (&r, msg, &rlx_msg_node_field))
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
      else if (msg->kind == RLX_MSG_SNAPSHOT && msg->u.snapshot.outer && arr->n % 2 != 0)
        {
          g_set_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_ARRAY,
                       "snapshot message with the outer state holds %" G_GSIZE_FORMAT
                       " values, not θ and the momentum of one size", arr->n);
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
  if (msg->kind == RLX_MSG_SNAPSHOT && msg->u.snapshot.outer)
    {
      /* θ, then the momentum: two views of the one frame */
      RlxMsgArray *m = &msg->u.snapshot.momentum;

      rlx_msg_array_copy (m, arr);
      arr->n /= 2;
      m->n = arr->n;
      m->codes = (const float *) arr->codes + arr->n;
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
    {
      msg->u.heartbeat.t = msg->u.heartbeat.echo = -1;
      msg->u.heartbeat.role = RLX_ROLE_N;
    }
  if (kind == RLX_MSG_STEP)
    msg->u.step.cepoch = msg->u.step.cpos = -1;
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
      g_clear_pointer (&msg->u.snapshot.sparse, g_array_unref);
      rlx_msg_array_clear (&msg->u.snapshot.momentum);
      break;
    case RLX_MSG_STEP:
      g_clear_pointer (&msg->u.step.contributors, g_ptr_array_unref);
      g_clear_pointer (&msg->u.step.members, g_ptr_array_unref);
      g_clear_pointer (&msg->u.step.assign, g_array_unref);
      break;
    case RLX_MSG_GRAD: g_free (msg->u.grad.refused); break;
    case RLX_MSG_REJECT: g_free (msg->u.reject.reason); break;
    case RLX_MSG_BYE: g_free (msg->u.bye.reason); break;
    case RLX_MSG_HEARTBEAT: g_free (msg->u.heartbeat.leader); break;
    case RLX_MSG_ACK:
    case RLX_MSG_N_KINDS:
    default:
      break;
    }
  memset (msg, 0, sizeof *msg);
}

gboolean
rlx_msg_lineage_same_fork (const RlxMsgLineage *a, const RlxMsgLineage *b)
{
  return a->lin != 0 && a->lin == b->lin && a->fork == b->fork && a->base == b->base;
}
