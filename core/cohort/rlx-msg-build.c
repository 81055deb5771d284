/* rlx-msg-build.c — the cohort protocol's messages as frames (see rlx-msg.h)
 *
 * Building writes the members of a kind in one fixed order (the order
 * rlx-msg.c's field table reads them), so a message survives
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

static JsonObject *
header_of (const RlxMsg *m)
{
  JsonObject *o = json_object_new ();

  json_object_set_string_member (o, "t", rlx_msg_kind_name (m->kind));
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
