/* rlx-event.c — typed events, and the one JSON writer and reader (see the
 * header)
 *
 * Each kind is a row of a table: its name and its fields, in the order they
 * are written, with each field's JSON type and place in the kind's struct.
 * Writing, reading and freeing walk that table, so a kind is described
 * once. */
#include "rlx-config.h"
#include "rlx-event.h"

#include <stddef.h>
#include <string.h>

typedef enum {
  T_STR,    /* char *: NULL → null, or left out with OPT */
  T_U64,    /* guint64: a JSON integer */
  T_I64,    /* gint64 */
  T_DBL,    /* double */
  T_BOOL,   /* gboolean */
  T_HASH,   /* guint64: 16 hex digits */
} FieldType;

enum { OPT = 1 };   /* a NULL string is left out */

typedef struct {
  const char *name;
  guint8      type;
  guint8      flags;
  guint16     offset;   /* in the union */
  gint16      cond;     /* offset of the gboolean that says it is there; -1: always */
} Field;

typedef struct {
  const char  *name;
  const Field *fields;
  guint        n_fields;
} Kind;

#define F(ty, st, f, fl, c) { #f, ty, fl, offsetof (st, f), c }
#define STR(st, f)      F (T_STR, st, f, 0, -1)
#define OSTR(st, f)     F (T_STR, st, f, OPT, -1)
#define U64(st, f)      F (T_U64, st, f, 0, -1)
#define I64(st, f)      F (T_I64, st, f, 0, -1)
#define DBL(st, f)      F (T_DBL, st, f, 0, -1)
#define BOOL(st, f)     F (T_BOOL, st, f, 0, -1)
#define HASH(st, f)     F (T_HASH, st, f, 0, -1)
#define IF(st, c)       (gint16) offsetof (st, c)

static const Field joined_f[] = {
  STR (RlxEventJoined, node), STR (RlxEventJoined, cohort), STR (RlxEventJoined, role),
  U64 (RlxEventJoined, step), HASH (RlxEventJoined, hash), STR (RlxEventJoined, backend),
  STR (RlxEventJoined, device), STR (RlxEventJoined, fallback), STR (RlxEventJoined, precision),
  OSTR (RlxEventJoined, sync),
  F (T_U64, RlxEventJoined, train, 0, IF (RlxEventJoined, has_data)),
  F (T_U64, RlxEventJoined, epoch, 0, IF (RlxEventJoined, has_data)),
  F (T_U64, RlxEventJoined, pos, 0, IF (RlxEventJoined, has_data)),
  F (T_U64, RlxEventJoined, steps, 0, IF (RlxEventJoined, has_data)),
};

static const Field leader_f[] = {
  STR (RlxEventLeader, node), U64 (RlxEventLeader, term), U64 (RlxEventLeader, step),
};

#define PEER(f) F (T_STR, RlxEventMember, f, 0, IF (RlxEventMember, has_peer))
static const Field member_f[] = {
  STR (RlxEventMember, node), OSTR (RlxEventMember, reason),
  PEER (host), PEER (backend), PEER (device), PEER (fallback), PEER (precision),
  U64 (RlxEventMember, step),
};

static const Field step_f[] = {
  U64 (RlxEventStep, step), DBL (RlxEventStep, loss), STR (RlxEventStep, leader),
  U64 (RlxEventStep, term), U64 (RlxEventStep, members), U64 (RlxEventStep, samples),
  U64 (RlxEventStep, assigned), HASH (RlxEventStep, hash), U64 (RlxEventStep, bytes_tx),
  U64 (RlxEventStep, bytes_rx), U64 (RlxEventStep, bytes_f32), BOOL (RlxEventStep, contributed),
  U64 (RlxEventStep, contributors), U64 (RlxEventStep, late), U64 (RlxEventStep, rejected),
  I64 (RlxEventStep, time_us),
  F (T_STR, RlxEventStep, sync, 0, IF (RlxEventStep, has_outer)),
  F (T_U64, RlxEventStep, h, 0, IF (RlxEventStep, has_outer)),
  F (T_HASH, RlxEventStep, outer_hash, 0, IF (RlxEventStep, has_outer)),
  F (T_U64, RlxEventStep, round_bytes, 0, IF (RlxEventStep, has_outer)),
  F (T_U64, RlxEventStep, agree, 0, IF (RlxEventStep, has_agree)),
};

static const Field diverged_f[] = {
  STR (RlxEventDiverged, node), U64 (RlxEventDiverged, step), HASH (RlxEventDiverged, hash),
  HASH (RlxEventDiverged, expected),
  F (T_BOOL, RlxEventDiverged, outer, 0, IF (RlxEventDiverged, outer)),
};

#define OUTER(ty, f) F (ty, RlxEventSync, f, 0, IF (RlxEventSync, has_outer))
static const Field sync_f[] = {
  STR (RlxEventSync, mode), U64 (RlxEventSync, h), STR (RlxEventSync, requested),
  OUTER (T_DBL, outer_lr), OUTER (T_DBL, outer_momentum), OUTER (T_DBL, inner_lr),
  OUTER (T_U64, fragments),
  STR (RlxEventSync, reason),
};

static const Field links_f[] = {
  STR (RlxEventLinks, text), U64 (RlxEventLinks, remote), U64 (RlxEventLinks, local),
};

static const Field timing_f[] = {
  STR (RlxEventTiming, node), U64 (RlxEventTiming, step), U64 (RlxEventTiming, compute_us),
  U64 (RlxEventTiming, round_us),
};

static const Field evaluated_f[] = {
  U64 (RlxEventEvaluated, step), DBL (RlxEventEvaluated, accuracy),
  DBL (RlxEventEvaluated, test_loss),
};

static const Field checkpoint_f[] = {
  U64 (RlxEventCheckpoint, step), STR (RlxEventCheckpoint, path),
};

static const Field resumed_f[] = {
  U64 (RlxEventResumed, step), HASH (RlxEventResumed, hash), STR (RlxEventResumed, path),
  F (T_HASH, RlxEventResumed, outer_hash, 0, IF (RlxEventResumed, has_outer)),
};

static const Field snapshot_f[] = {
  OSTR (RlxEventSnapshot, from), OSTR (RlxEventSnapshot, to), U64 (RlxEventSnapshot, step),
  HASH (RlxEventSnapshot, hash), OSTR (RlxEventSnapshot, reason),
};

static const Field precision_f[] = {
  STR (RlxEventPrecision, node), STR (RlxEventPrecision, precision),
};

static const Field merged_f[] = {
  STR (RlxEventMerged, node), U64 (RlxEventMerged, discarded), U64 (RlxEventMerged, from_step),
  U64 (RlxEventMerged, to_step), BOOL (RlxEventMerged, exact), STR (RlxEventMerged, rule),
};

static const Field refused_f[] = {
  STR (RlxEventRefused, node), STR (RlxEventRefused, reason), STR (RlxEventRefused, by),
};

static const Field rejected_f[] = {
  STR (RlxEventRejected, node),
  F (T_U64, RlxEventRejected, step, 0, IF (RlxEventRejected, has_step)),
  STR (RlxEventRejected, reason), OSTR (RlxEventRejected, by),
};

static const Field node_step_f[] = {
  STR (RlxEventNodeStep, node), U64 (RlxEventNodeStep, step), OSTR (RlxEventNodeStep, reason),
};

static const Field dropped_f[] = {
  STR (RlxEventDropped, node), STR (RlxEventDropped, class), U64 (RlxEventDropped, total),
  STR (RlxEventDropped, reason),
};

static const Field note_f[] = {
  OSTR (RlxEventNote, node), OSTR (RlxEventNote, reason), OSTR (RlxEventNote, server),
};

#define ROUNDS(ty, f) F (ty, RlxEventDone, f, 0, IF (RlxEventDone, has_rounds))
#define BACKEND(ty, f) F (ty, RlxEventDone, f, 0, IF (RlxEventDone, has_backend))
static const Field done_f[] = {
  STR (RlxEventDone, node), BOOL (RlxEventDone, success), STR (RlxEventDone, message),
  U64 (RlxEventDone, step), HASH (RlxEventDone, hash), DBL (RlxEventDone, loss),
  U64 (RlxEventDone, late), U64 (RlxEventDone, rejected), BOOL (RlxEventDone, busy_poll),
  ROUNDS (T_U64, rounds_measured), ROUNDS (T_DBL, round_ms), ROUNDS (T_DBL, compute_ms),
  ROUNDS (T_DBL, coordinator_ms), ROUNDS (T_DBL, send_ms),
  F (T_DBL, RlxEventDone, cpu_ms, 0, IF (RlxEventDone, has_cpu)),
  F (T_DBL, RlxEventDone, samples_per_cpu_second, 0, IF (RlxEventDone, has_cpu_rate)),
  BACKEND (T_U64, steps_measured), BACKEND (T_DBL, host_bytes_per_step),
  BACKEND (T_DBL, own_ahead), BACKEND (T_DBL, update_ahead), BACKEND (T_DBL, worker_wait_ms),
  BACKEND (T_DBL, own_run_ms), BACKEND (T_DBL, finish_run_ms), BACKEND (T_DBL, finish_hop_ms),
  BACKEND (T_DBL, device_finish_ms), BACKEND (T_DBL, device_grad_ms),
  U64 (RlxEventDone, bytes_tx), U64 (RlxEventDone, bytes_rx), U64 (RlxEventDone, bytes_f32),
};

static const Field invite_f[] = {
  STR (RlxEventInvite, invite), STR (RlxEventInvite, cohort), U64 (RlxEventInvite, port),
  STR (RlxEventInvite, fingerprint),
};

#define ROOM(ty, f) F (ty, RlxEventSignalling, f, 0, IF (RlxEventSignalling, has_room))
static const Field signalling_f[] = {
  STR (RlxEventSignalling, state), OSTR (RlxEventSignalling, reason),
  OSTR (RlxEventSignalling, server), ROOM (T_U64, peers), ROOM (T_BOOL, hosted),
};

static const Field link_up_f[] = {
  STR (RlxEventLinkUp, node), STR (RlxEventLinkUp, host), STR (RlxEventLinkUp, path),
  U64 (RlxEventLinkUp, rtt_us),
};

static const Field link_lost_f[] = {
  STR (RlxEventLinkLost, node), STR (RlxEventLinkLost, reason), STR (RlxEventLinkLost, code),
};

#define K(e, n, f) [e] = { n, f, G_N_ELEMENTS (f) }
static const Kind kinds[RLX_EVENT_N_KINDS] = {
  K (RLX_EVENT_JOINED, "joined", joined_f),
  K (RLX_EVENT_LEADER, "leader", leader_f),
  K (RLX_EVENT_MEMBER_JOINED, "member-joined", member_f),
  K (RLX_EVENT_MEMBER_LEFT, "member-left", member_f),
  K (RLX_EVENT_STEP, "step", step_f),
  K (RLX_EVENT_EVALUATED, "evaluated", evaluated_f),
  K (RLX_EVENT_CHECKPOINT, "checkpoint", checkpoint_f),
  K (RLX_EVENT_RESUMED, "resumed", resumed_f),
  K (RLX_EVENT_SNAPSHOT, "snapshot", snapshot_f),
  K (RLX_EVENT_PRECISION, "precision", precision_f),
  K (RLX_EVENT_MERGED, "merged", merged_f),
  K (RLX_EVENT_REFUSED, "refused", refused_f),
  K (RLX_EVENT_REJECTED, "rejected", rejected_f),
  K (RLX_EVENT_LATE, "late", node_step_f),
  K (RLX_EVENT_ACK_TIMEOUT, "ack-timeout", node_step_f),
  K (RLX_EVENT_DROPPED, "dropped", dropped_f),
  K (RLX_EVENT_SEND_FAILED, "send-failed", note_f),
  K (RLX_EVENT_REJOINING, "rejoining", note_f),
  K (RLX_EVENT_WAITING, "waiting", note_f),
  K (RLX_EVENT_ERROR, "error", note_f),
  K (RLX_EVENT_DONE, "done", done_f),
  K (RLX_EVENT_INVITE, "invite", invite_f),
  K (RLX_EVENT_SIGNALLING, "signalling", signalling_f),
  K (RLX_EVENT_LINK_UP, "link-up", link_up_f),
  K (RLX_EVENT_LINK_DOWN, "link-down", link_lost_f),
  K (RLX_EVENT_LINK_FAILED, "link-failed", link_lost_f),
  K (RLX_EVENT_SYNC, "sync", sync_f),
  K (RLX_EVENT_DIVERGED, "diverged", diverged_f),
  K (RLX_EVENT_LINKS, "links", links_f),
  K (RLX_EVENT_TIMING, "timing", timing_f),
};

G_DEFINE_QUARK (rlx-event-read-error-quark, rlx_event_read_error)
G_DEFINE_BOXED_TYPE (RlxEvent, rlx_event, rlx_event_ref, rlx_event_unref)

#define AT(ev, f, type) ((type *) (void *) ((char *) &(ev)->u + (f)->offset))

static gboolean
present (const RlxEvent *ev, const Field *f)
{
  return f->cond < 0 || *(const gboolean *) ((const char *) &ev->u + f->cond);
}

RlxEvent *
rlx_event_new (RlxEventKind kind)
{
  RlxEvent *ev;

  /* a kind that is not one is a bug in the caller, not bad input */
  g_assert ((guint) kind < RLX_EVENT_N_KINDS);
  ev = g_atomic_rc_box_new0 (RlxEvent);
  ev->kind = kind;
  return ev;
}

RlxEvent *
rlx_event_note_new (RlxEventKind kind, const char *node, const char *reason)
{
  RlxEvent *ev;

  g_assert ((guint) kind < RLX_EVENT_N_KINDS && kinds[kind].fields == note_f);
  ev = rlx_event_new (kind);
  ev->u.note.node = g_strdup (node);
  ev->u.note.reason = g_strdup (reason);
  return ev;
}

RlxEvent *
rlx_event_ref (RlxEvent *event)
{
  g_return_val_if_fail (event != NULL, NULL);
  return g_atomic_rc_box_acquire (event);
}

static void
event_clear (gpointer data)
{
  RlxEvent *ev = data;
  const Kind *k = &kinds[ev->kind];

  for (guint i = 0; i < k->n_fields; i++)
    if (k->fields[i].type == T_STR)
      g_free (*AT (ev, &k->fields[i], char *));
}

void
rlx_event_unref (RlxEvent *event)
{
  g_return_if_fail (event != NULL);
  g_atomic_rc_box_release_full (event, event_clear);
}

const char *
rlx_event_kind_name (RlxEventKind kind)
{
  return (guint) kind < RLX_EVENT_N_KINDS ? kinds[kind].name : NULL;
}

gboolean
rlx_event_kind_from_name (const char *name, RlxEventKind *kind)
{
  for (guint i = 0; name && i < RLX_EVENT_N_KINDS; i++)
    if (strcmp (kinds[i].name, name) == 0)
      {
        if (kind)
          *kind = i;
        return TRUE;
      }
  return FALSE;
}

/* ── the writer ─────────────────────────────────────────────────────────── */

JsonObject *
rlx_event_to_json (const RlxEvent *ev)
{
  const Kind *k;
  JsonObject *o;

  g_return_val_if_fail (ev != NULL && (guint) ev->kind < RLX_EVENT_N_KINDS, NULL);
  k = &kinds[ev->kind];
  o = json_object_new ();
  json_object_set_string_member (o, "event", k->name);
  for (guint i = 0; i < k->n_fields; i++)
    {
      const Field *f = &k->fields[i];

      if (!present (ev, f))
        continue;
      switch (f->type)
        {
        case T_STR:
          {
            const char *s = *AT (ev, f, char *);
            if (s != NULL)
              json_object_set_string_member (o, f->name, s);
            else if (!(f->flags & OPT))
              json_object_set_null_member (o, f->name);
            break;
          }
        case T_U64:
          json_object_set_int_member (o, f->name, (gint64) *AT (ev, f, guint64));
          break;
        case T_I64:
          json_object_set_int_member (o, f->name, *AT (ev, f, gint64));
          break;
        case T_DBL:
          json_object_set_double_member (o, f->name, *AT (ev, f, double));
          break;
        case T_BOOL:
          json_object_set_boolean_member (o, f->name, *AT (ev, f, gboolean));
          break;
        case T_HASH:
          {
            char h[17];
            g_snprintf (h, sizeof h, "%016" G_GINT64_MODIFIER "x", *AT (ev, f, guint64));
            json_object_set_string_member (o, f->name, h);
            break;
          }
        default:
          g_assert_not_reached ();
        }
    }
  return o;
}

char *
rlx_event_to_json_line (const RlxEvent *ev)
{
  g_autoptr(JsonNode) node = json_node_init_object (json_node_alloc (), NULL);

  json_node_take_object (node, rlx_event_to_json (ev));
  return json_to_string (node, FALSE);
}

/* ── the reader ─────────────────────────────────────────────────────────── */

static gboolean
parse_hash (const char *s, guint64 *out)
{
  guint64 v = 0;

  if (s == NULL || strlen (s) != 16)
    return FALSE;
  for (const char *c = s; *c; c++)
    {
      int d = g_ascii_xdigit_value (*c);
      if (d < 0)
        return FALSE;
      v = v << 4 | (guint64) d;
    }
  *out = v;
  return TRUE;
}

static gboolean
read_field (RlxEvent *ev, const Field *f, JsonNode *n)
{
  GType vt = JSON_NODE_HOLDS_VALUE (n) ? json_node_get_value_type (n) : G_TYPE_INVALID;

  switch (f->type)
    {
    case T_STR:
      if (JSON_NODE_HOLDS_NULL (n))
        return TRUE;
      if (vt != G_TYPE_STRING)
        return FALSE;
      *AT (ev, f, char *) = g_strdup (json_node_get_string (n));
      return TRUE;
    case T_U64:
      if (vt != G_TYPE_INT64 || json_node_get_int (n) < 0)
        return FALSE;
      *AT (ev, f, guint64) = (guint64) json_node_get_int (n);
      return TRUE;
    case T_I64:
      if (vt != G_TYPE_INT64)
        return FALSE;
      *AT (ev, f, gint64) = json_node_get_int (n);
      return TRUE;
    case T_DBL:
      if (vt != G_TYPE_INT64 && vt != G_TYPE_DOUBLE)
        return FALSE;
      *AT (ev, f, double) = json_node_get_double (n);
      return TRUE;
    case T_BOOL:
      if (vt != G_TYPE_BOOLEAN)
        return FALSE;
      *AT (ev, f, gboolean) = json_node_get_boolean (n);
      return TRUE;
    case T_HASH:
      return vt == G_TYPE_STRING && parse_hash (json_node_get_string (n), AT (ev, f, guint64));
    default:
      return FALSE;
    }
}

static const char *
type_word (guint8 type)
{
  switch (type)
    {
    case T_STR: return "a string";
    case T_U64: return "a non-negative integer";
    case T_I64: return "an integer";
    case T_DBL: return "a number";
    case T_BOOL: return "true or false";
    case T_HASH: return "16 hex digits";
    default: return "?";
    }
}

RlxEvent *
rlx_event_from_json (JsonObject *object, GError **error)
{
  g_autoptr(RlxEvent) ev = NULL;
  const char *name = NULL;
  JsonNode *n;
  RlxEventKind kind;
  const Kind *k;

  g_return_val_if_fail (object != NULL, NULL);
  n = json_object_get_member (object, "event");
  if (n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING)
    name = json_node_get_string (n);
  if (name == NULL)
    {
      g_set_error (error, RLX_EVENT_READ_ERROR, 0,
                   "not an event: no \"event\" member naming its kind");
      return NULL;
    }
  if (!rlx_event_kind_from_name (name, &kind))
    {
      g_set_error (error, RLX_EVENT_READ_ERROR, 0, "unknown event \"%.64s\"", name);
      return NULL;
    }
  ev = rlx_event_new (kind);
  k = &kinds[kind];
  for (guint i = 0; i < k->n_fields; i++)
    {
      const Field *f = &k->fields[i];

      n = json_object_get_member (object, f->name);
      if (n == NULL)
        continue;
      if (!read_field (ev, f, n))
        {
          g_set_error (error, RLX_EVENT_READ_ERROR, 0,
                       "event \"%s\": member \"%s\" should be %s", k->name, f->name,
                       type_word (f->type));
          return NULL;
        }
      if (f->cond >= 0)
        *(gboolean *) ((char *) &ev->u + f->cond) = TRUE;
    }
  return g_steal_pointer (&ev);
}
