/* rlx-msg-build.c — the cohort protocol's messages as frames (see rlx-msg.h)
 *
 * One writer walks a kind's field table (rlx-msg-fields.c) and writes its
 * members in the order rlx-msg.c reads them, so a message survives
 * parse → build → parse unchanged (the fuzz target checks exactly that).
 */
#include "rlx-config.h"
#include "rlx-msg-private.h"

#include <math.h>
#include <string.h>

/* ── building ───────────────────────────────────────────────────────────── */

static void
set_u64 (JsonObject *o, const char *name, guint64 v)
{
  json_object_set_int_member (o, name, (gint64) MIN (v, RLX_MSG_MAX_STEP));
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

static gboolean
is_set (const RlxMsg *m, const RlxMsgField *f)
{
  gconstpointer at = (const guint8 *) m + f->offset;

  switch (f->type)
    {
    case F_STR:
    case F_ID:
      return *(char *const *) at != NULL || f->dflt_str != NULL;
    case F_BOOL:
      return *(const gboolean *) at;
    case F_INT:
      return *(const gint64 *) at >= 0;
    case F_NONNEG:
      /* (W_IF_SET: a time that is 0 means "not measured") */
      return *(const gint64 *) at > 0;
    case F_UINT:
      /* (W_IF_SET: a count that is 0 means "none") */
      return f->size == sizeof (guint32) ? *(const guint32 *) at != 0
                                         : *(const guint64 *) at != 0;
    case F_NUM:
      return *(const double *) at != 0.0;
    case F_HASHES:
      return *(GArray *const *) at != NULL && (*(GArray *const *) at)->len > 0;
    case F_HASH:
      /* (W_IF_SET: hash 0 means "none") */
      return *(const guint64 *) at != 0;
    case F_ROLE:
      /* (W_IF_SET: RLX_ROLE_N means "not said") */
      return *(const RlxRole *) at < RLX_ROLE_N;
    default:
      return TRUE;
    }
}

/* Whether member @f of @m goes into its header. */
static gboolean
written (const RlxMsg *m, const RlxMsgField *f)
{
  if (f->with != NULL)
    {
      guint n;
      const RlxMsgField *fields = rlx_msg_fields (m->kind, &n);

      for (guint i = 0; i < n; i++)
        if (g_str_equal (fields[i].name, f->with))
          return written (m, &fields[i]);
      g_assert_not_reached ();
    }
  return !(f->write & W_IF_SET) || is_set (m, f);
}

static void
write_field (JsonObject *o, const RlxMsg *m, const RlxMsgField *f)
{
  gconstpointer at = (const guint8 *) m + f->offset;

  if (!written (m, f))
    return;
  switch (f->type)
    {
    case F_STR:
    case F_ID:
      set_str (o, f->name, *(char *const *) at ? *(char *const *) at : f->dflt_str);
      break;
    case F_UINT:
      set_u64 (o, f->name, f->size == sizeof (guint32) ? *(const guint32 *) at
                                                       : *(const guint64 *) at);
      break;
    case F_NONNEG:
      json_object_set_int_member (o, f->name, MAX (0, *(const gint64 *) at));
      break;
    case F_INT:
      json_object_set_int_member (o, f->name, *(const gint64 *) at);
      break;
    case F_NUM:
      {
        double v = *(const double *) at;
        json_object_set_double_member (o, f->name, (f->write & W_FINITE) && !isfinite (v) ? 0.0 : v);
        break;
      }
    case F_BOOL:
      json_object_set_boolean_member (o, f->name, *(const gboolean *) at);
      break;
    case F_NAN_UNLESS:
      json_object_set_boolean_member (o, f->name, isfinite (*(const double *) at));
      break;
    case F_HASH:
      set_hash (o, f->name, *(const guint64 *) at);
      break;
    case F_IDS:
      json_object_set_array_member (o, f->name, id_array (*(GPtrArray *const *) at));
      break;
    case F_HASHES:
      {
        GArray *hashes = *(GArray *const *) at;
        JsonArray *a = json_array_new ();

        for (guint i = 0; hashes && i < hashes->len; i++)
          {
            g_autofree char *hx = rlx_msg_hash_to_string (g_array_index (hashes, guint64, i));
            json_array_add_string_element (a, hx);
          }
        json_object_set_array_member (o, f->name, a);
        break;
      }
    case F_ASSIGN:
      {
        GArray *assign = *(GArray *const *) at;
        JsonObject *slots = json_object_new ();

        for (guint i = 0; assign && i < assign->len; i++)
          {
            const RlxMsgSlot *slot = &g_array_index (assign, RlxMsgSlot, i);
            JsonArray *a = json_array_new ();
            json_array_add_int_element (a, slot->start);
            json_array_add_int_element (a, slot->count);
            json_object_set_array_member (slots, slot->node, a);
          }
        json_object_set_object_member (o, f->name, slots);
        break;
      }
    case F_PRECISION:
      set_str (o, f->name, rlx_precision_to_string (*(const RlxPrecision *) at));
      break;
    case F_ROLE:
      set_str (o, f->name, rlx_role_name (*(const RlxRole *) at));
      break;
    default:
      g_assert_not_reached ();
    }
}

/* "t", "node", then every member of the kind in table order. */
static JsonObject *
header_of (const RlxMsg *m)
{
  JsonObject *o = json_object_new ();
  guint n;
  const RlxMsgField *fields = rlx_msg_fields (m->kind, &n);

  json_object_set_string_member (o, "t", rlx_msg_kind_name (m->kind));
  write_field (o, m, &rlx_msg_node_field);
  for (guint i = 0; i < n; i++)
    write_field (o, m, &fields[i]);
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
  g_return_val_if_fail (values == NULL || rlx_msg_array_name (msg->kind) != NULL, NULL);

  h = header_of (msg);
  return rlx_wire_encode (h, values, values ? n : 0, precision,
                          values ? rlx_msg_array_name (msg->kind) : NULL, error);
}

/* The header JSON of @msg with the wire's own members for an array of @n
 * elements at @precision and @scale (as rlx_wire_encode writes them, last
 * and in its order: the frame is byte-identical to an encoded one). */
static char *
array_header_json (const RlxMsg *msg, gsize n, RlxPrecision precision, double scale,
                   GError **error)
{
  g_autoptr(JsonObject) h = header_of (msg);

  json_object_set_string_member (h, "_f32", rlx_msg_array_name (msg->kind));
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
  g_return_val_if_fail (rlx_msg_array_name (msg->kind) != NULL, NULL);
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
  g_return_val_if_fail (rlx_msg_array_name (msg->kind) != NULL, NULL);
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
