/* rlx-coordinator.c — the cohort protocol of one node (DESIGN.md)
 *
 * Messages are wire frames (core/wire): a JSON header whose "t" names the
 * kind, and at most one float array.
 *
 *   hello     {v, node, cohort, model, dataset, backend, device, fallback, host,
 *              precision, batch, max_batch, since, role, leader, term, step}
 *             first frame each way on every link.
 *   refuse    {node, reason}            the hello did not match (version, cohort,
 *                                       model, dataset); both sides report it.
 *   leader    {node, term, step}        this node now leads (founding, failover).
 *   join      {node, reason}            ask the leader for admission, or for a
 *                                       fresh snapshot (hash or commit mismatch).
 *   snapshot  {term, leader, step, hash, seed, members} + "params" at f32:
 *                                       the full parameters after `step` commits.
 *   step      {term, leader, step, commit, base, loss, samples, contributors,
 *              late, rejected, lr, epoch, pos, count, members,
 *              assign {node: [start, count]}, final} + "avg" (the update)
 *   grad      {term, step, node, samples, loss, hash, compute_us} + "g"
 *   reject    {step, node, reason}      the leader threw a bucket away.
 *   heartbeat {node, term, step}        every 500 ms on every link.
 *   bye       {node, reason}            leaving cleanly.
 *
 * Decision: the update travels inside the next `step`. A round is one frame
 * from the leader: `step` carries the commit of step s (the update, quantised
 * at the leader's wire precision with error feedback, as "avg") and the
 * assignment of step s+1 (member → contiguous slice of the epoch's seeded
 * permutation). One frame per round halves the leader's sends, and a commit
 * can never arrive without the assignment that follows from it. The leader
 * decodes the very frame it sends and applies those floats, so every replica —
 * the leader included — applies bit-identical f32 updates (params -= update).
 *
 * Hashes, off the critical path: `base` in a step is the hash of the
 * parameters the carried commit applies to; a member whose own hash differs,
 * or that missed a commit (commit != applied + 1), does not apply it and asks
 * for a snapshot (`join` with a reason). A `grad` carries the hash of the
 * parameters it was computed at; the leader rejects a bucket whose hash is not
 * its own. Each node hashes its new parameters while its worker computes the
 * next gradient, so no hash is ever waited for.
 *
 * Leader: the oldest member of the cohort — the `members` list in every step
 * is in seniority order (founder first, then by admission); when the leader
 * is gone (bye, closed link, heartbeat silence) the first surviving member
 * takes over with term + 1 and restarts the uncommitted step at the same
 * dataset position, so no committed step is lost and none is skipped:
 *   - the leader reports a commit (its `step` event) only once the frame
 *     carrying it is written to every member's socket, which delivers it even
 *     if the leader dies the next instant;
 *   - a member that holds a commit the new leader missed answers the new
 *     leader's first step with a snapshot of its state, which the leader
 *     adopts before it goes on.
 * Messages from an older term are ignored (and answered with who leads now,
 * so a stale leader steps down). Before a cohort exists, nodes found one by
 * seniority of start time (ties by node id); a leader or member answers the
 * hello of a node still looking with who leads. A node whose own loop stood
 * still past the heartbeat timeout (stopped, starved) and that the cohort
 * then closed on stops with a message instead of taking over — the cohort
 * went on without it, and two leaders would split it.
 *
 * Collect: the leader waits for every assigned slice or a deadline derived
 * from recent round times (10 × the running mean, at least the floor);
 * later gradients are dropped and counted. NaN/Inf, wrong length, wrong
 * sample count or wrong hash buckets are rejected and reported. The mean is
 * weighted by sample count (accumulated in f32: a few buckets weighted by
 * small counts), then SGD. Each member's
 * measured speed (samples per second of compute) sets its share of the next
 * global batch, which is the sum of the members' --batch.
 */
#include "rlx-config.h"
#include "rlx-coordinator.h"
#include "rlx-coordinator-private.h"
#include "rlx-safetensors.h"
#include "core/vision/rlx-cpu.h"
#include "core/p2p/rlx-sender.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

G_DEFINE_QUARK (rlx-coordinator-error-quark, rlx_coordinator_error)

#define DISCOVERY_MS        250
#define FOUND_RETRY_MS      700
#define JOIN_RETRY_MS       1000
#define HEARTBEAT_MS        500
#define FIRST_DEADLINE_MS   10000
#define MAX_DEADLINE_MS     30000

typedef enum {
  ROLE_ALONE,
  ROLE_JOINING,
  ROLE_MEMBER,
  ROLE_LEADER,
  ROLE_STOPPED,
} Role;

static const char *const role_names[] = { "alone", "joining", "member", "leader", "stopped" };

static Role
role_from_string (const char *s)
{
  for (guint i = 0; i < G_N_ELEMENTS (role_names); i++)
    if (g_strcmp0 (s, role_names[i]) == 0)
      return (Role) i;
  return ROLE_ALONE;
}

/* ── roster entries ─────────────────────────────────────────────────────── */

struct _RlxRosterEntry {
  GObject  parent_instance;
  char    *node_id, *host, *backend, *device, *fallback, *precision, *state;
  double   speed;
  guint    rank;
  guint64  bytes_tx, bytes_rx;
  gboolean is_leader, is_self;
};

G_DEFINE_FINAL_TYPE (RlxRosterEntry, rlx_roster_entry, G_TYPE_OBJECT)

enum {
  RE_PROP_0, RE_PROP_NODE_ID, RE_PROP_HOST, RE_PROP_BACKEND, RE_PROP_DEVICE,
  RE_PROP_FALLBACK, RE_PROP_PRECISION, RE_PROP_SPEED, RE_PROP_IS_LEADER,
  RE_PROP_IS_SELF, RE_PROP_RANK, RE_PROP_STATE, RE_PROP_BYTES_TX, RE_PROP_BYTES_RX, RE_N_PROPS
};
static GParamSpec *re_props[RE_N_PROPS];

static void
rlx_roster_entry_finalize (GObject *object)
{
  RlxRosterEntry *self = RLX_ROSTER_ENTRY (object);

  g_free (self->node_id);
  g_free (self->host);
  g_free (self->backend);
  g_free (self->device);
  g_free (self->fallback);
  g_free (self->precision);
  g_free (self->state);
  G_OBJECT_CLASS (rlx_roster_entry_parent_class)->finalize (object);
}

static void
rlx_roster_entry_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  RlxRosterEntry *self = RLX_ROSTER_ENTRY (object);

  switch (id)
    {
    case RE_PROP_NODE_ID: g_value_set_string (value, self->node_id); break;
    case RE_PROP_HOST: g_value_set_string (value, self->host); break;
    case RE_PROP_BACKEND: g_value_set_string (value, self->backend); break;
    case RE_PROP_DEVICE: g_value_set_string (value, self->device); break;
    case RE_PROP_FALLBACK: g_value_set_string (value, self->fallback); break;
    case RE_PROP_PRECISION: g_value_set_string (value, self->precision); break;
    case RE_PROP_SPEED: g_value_set_double (value, self->speed); break;
    case RE_PROP_IS_LEADER: g_value_set_boolean (value, self->is_leader); break;
    case RE_PROP_IS_SELF: g_value_set_boolean (value, self->is_self); break;
    case RE_PROP_RANK: g_value_set_uint (value, self->rank); break;
    case RE_PROP_STATE: g_value_set_string (value, self->state); break;
    case RE_PROP_BYTES_TX: g_value_set_uint64 (value, self->bytes_tx); break;
    case RE_PROP_BYTES_RX: g_value_set_uint64 (value, self->bytes_rx); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_roster_entry_class_init (RlxRosterEntryClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags f = G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;

  object_class->finalize = rlx_roster_entry_finalize;
  object_class->get_property = rlx_roster_entry_get_property;
  re_props[RE_PROP_NODE_ID] = g_param_spec_string ("node-id", NULL, NULL, NULL, f);
  re_props[RE_PROP_HOST] = g_param_spec_string ("host", NULL, NULL, NULL, f);
  re_props[RE_PROP_BACKEND] = g_param_spec_string ("backend", NULL, NULL, NULL, f);
  re_props[RE_PROP_DEVICE] = g_param_spec_string ("device", NULL, NULL, NULL, f);
  re_props[RE_PROP_FALLBACK] = g_param_spec_string ("fallback", NULL, NULL, NULL, f);
  re_props[RE_PROP_PRECISION] = g_param_spec_string ("precision", NULL, NULL, NULL, f);
  re_props[RE_PROP_SPEED] = g_param_spec_double ("speed", NULL, NULL, 0, G_MAXDOUBLE, 0, f);
  re_props[RE_PROP_IS_LEADER] = g_param_spec_boolean ("is-leader", NULL, NULL, FALSE, f);
  re_props[RE_PROP_IS_SELF] = g_param_spec_boolean ("is-self", NULL, NULL, FALSE, f);
  re_props[RE_PROP_RANK] = g_param_spec_uint ("rank", NULL, NULL, 0, G_MAXUINT, 0, f);
  re_props[RE_PROP_STATE] = g_param_spec_string ("state", NULL, NULL, NULL, f);
  re_props[RE_PROP_BYTES_TX] = g_param_spec_uint64 ("bytes-tx", NULL, NULL, 0, G_MAXUINT64, 0, f);
  re_props[RE_PROP_BYTES_RX] = g_param_spec_uint64 ("bytes-rx", NULL, NULL, 0, G_MAXUINT64, 0, f);
  g_object_class_install_properties (object_class, RE_N_PROPS, re_props);
}

static void
rlx_roster_entry_init (RlxRosterEntry *self)
{
}

const char *rlx_roster_entry_get_node_id (RlxRosterEntry *self) { return self->node_id; }
const char *rlx_roster_entry_get_host (RlxRosterEntry *self) { return self->host; }
const char *rlx_roster_entry_get_backend (RlxRosterEntry *self) { return self->backend; }
const char *rlx_roster_entry_get_device (RlxRosterEntry *self) { return self->device; }
const char *rlx_roster_entry_get_fallback (RlxRosterEntry *self) { return self->fallback; }
const char *rlx_roster_entry_get_precision (RlxRosterEntry *self) { return self->precision; }
double rlx_roster_entry_get_speed (RlxRosterEntry *self) { return self->speed; }
gboolean rlx_roster_entry_get_is_leader (RlxRosterEntry *self) { return self->is_leader; }
gboolean rlx_roster_entry_get_is_self (RlxRosterEntry *self) { return self->is_self; }
guint rlx_roster_entry_get_rank (RlxRosterEntry *self) { return self->rank; }
const char *rlx_roster_entry_get_state (RlxRosterEntry *self) { return self->state; }
guint64 rlx_roster_entry_get_bytes_tx (RlxRosterEntry *self) { return self->bytes_tx; }
guint64 rlx_roster_entry_get_bytes_rx (RlxRosterEntry *self) { return self->bytes_rx; }

/* ── state ──────────────────────────────────────────────────────────────── */

typedef struct {
  RlxCoordinator  *self;
  RlxLink         *link;
  RlxSender       *sender;
  char            *id;            /* from hello */
  gboolean         hello;         /* a valid hello arrived */
  gboolean         refused;
  char            *host, *backend, *device, *fallback;
  RlxPrecision     precision;
  guint            batch, max_batch;
  gint64           since;
  Role             role;          /* what it last told us */
  char            *leader;
  guint64          term;
  gint64           last_rx;       /* monotonic µs */
  double           speed;         /* samples/s, measured by us as leader */
  char            *close_reason;
  gulong           frame_id, closed_id;
  RlxWireCounters  counters;
} Peer;

typedef struct {
  char    *id;
  guint    start, count;
  gboolean pending;
} Slot;

typedef struct {
  gboolean   pending;
  guint64    step, hash, samples;
  double     loss;
  GPtrArray *contributors;
  guint      late, rejected;
  gint64     deadline;
  guint      poll_id;
} CommitEvent;

struct _RlxCoordinator {
  GObject          parent_instance;

  /* configuration */
  char            *cohort, *node_id, *host;
  RlxPrecision     precision;
  gboolean         error_feedback;
  guint            batch;
  double           lr;
  guint64          seed;
  guint64          steps;
  guint            checkpoint_every;
  char            *checkpoint_dir, *checkpoint_path;
  guint            wait_members;
  guint            deadline_floor_ms, heartbeat_timeout_ms;
  guint64          fault_nan_from;

  RlxWorker       *worker;
  const RlxModel  *model;
  RlxDataset      *dataset;
  gsize            n;              /* parameters */
  guint            n_train;
  gint64           since;

  /* the checkpoint found at start, used if this node founds the cohort */
  float           *resume_params;
  GError          *checkpoint_error;
  guint64          resume_step;
  guint            resume_epoch, resume_pos;

  /* replica */
  Role             role;
  guint64          term;
  char            *leader;
  GPtrArray       *members;        /* char*, seniority order */
  float           *params;
  guint64          applied;        /* committed steps in params */
  guint64          hash;           /* of params */
  double           loss;
  guint            round_epoch, round_pos;  /* where the uncommitted step's batch starts */
  gboolean         joined_reported;

  GPtrArray       *peers;          /* Peer* */

  /* permutation cache */
  guint32         *perm;
  guint            perm_epoch;
  gboolean         perm_valid;

  /* compute */
  gboolean         job_running;
  guint64          job_term, job_step;
  guint64          job_hash;
  gboolean         task_pending;   /* an assignment waiting for the worker */
  guint64          task_term, task_step, task_hash;
  guint            task_epoch, task_pos, task_count;
  RlxWireFeedback *grad_fb;
  float           *scratch;        /* n floats */
  float           *rx_buf;         /* n floats: arrays of received frames */
  float           *update_buf;     /* n floats: the update the leader applies */

  /* leader */
  gboolean         round_active;
  guint64          round_step;
  guint            round_count;
  GArray          *slots;          /* Slot */
  float           *sum;            /* sample-weighted sum of the round's buckets */
  guint64          round_samples;
  double           round_loss;
  GPtrArray       *contributors;
  guint            round_late, round_rejected, round_dropped;
  gint64           round_started;
  gint64           round_max_compute;
  guint            deadline_id;
  double           round_ema_us;
  guint            rounds_measured;
  float           *residual;       /* leader's update error feedback */
  double           self_speed;
  guint64          late_total, rejected_total;
  CommitEvent      commit_event;
  /* This node's sample count in the assignment of recent steps (step % 4),
   * for the "assigned" member of the step event. */
  guint64          assigned_step[4];
  guint            assigned_count[4];
  guint64          ahead_sent_term;

  /* overhead statistics (leader) */
  guint64          stat_rounds;
  double           stat_round_us, stat_compute_us, stat_busy_us, stat_send_us;
  gint64           busy_us_round, send_us_round;
  gint64           prof_us[8];      /* leader phases, summed (see finish) */

  /* timers */
  guint            found_id, join_id, heartbeat_id;
  guint            found_waits;
  gint64           last_tick, stalled_at;   /* heartbeat timer, monotonic µs */
  GCancellable    *cancellable;
  gboolean         checkpoint_busy, checkpoint_again;
  gboolean         rounds_started;  /* wait_members only holds the first round */
  guint64          checkpoint_step;
  gboolean         finish_after_checkpoint;
  gboolean         finished;
  gboolean         finish_success;
  char            *finish_message;

  /* leave */
  GCallback        leave_cb;
  gpointer         leave_data;
  guint            leave_id;
  gint64           leave_deadline;

  RlxWireCounters  totals;
  GListStore      *roster;
};

G_DEFINE_FINAL_TYPE (RlxCoordinator, rlx_coordinator, G_TYPE_OBJECT)

enum {
  PROP_0, PROP_NODE_ID, PROP_ROLE, PROP_LEADER, PROP_TERM, PROP_STEP, PROP_LOSS,
  PROP_MEMBERS, PROP_BYTES_TX, PROP_BYTES_RX, PROP_BYTES_F32, PROP_ROSTER, PROP_COHORT,
  PROP_PRECISION, N_PROPS
};
static GParamSpec *props[N_PROPS];

enum { SIG_EVENT, SIG_FINISHED, N_SIGNALS };
static guint signals[N_SIGNALS];

static void leader_publish (RlxCoordinator *self, gboolean commit);
static void leader_finalize (RlxCoordinator *self);
static void become_leader (RlxCoordinator *self, guint64 term, gboolean founding);
static void request_snapshot (RlxCoordinator *self, const char *reason);
static void check_round_complete (RlxCoordinator *self);
static void submit_task (RlxCoordinator *self);
static void finish (RlxCoordinator *self, gboolean success, const char *message);
static void roster_rebuild (RlxCoordinator *self);
static void checkpoint_now (RlxCoordinator *self);
static void send_snapshot (RlxCoordinator *self, Peer *p, const char *reason);
static void leader_adopt (RlxCoordinator *self, Peer *p, JsonObject *h, const float *values, gsize n);

/* ── small helpers ──────────────────────────────────────────────────────── */

static char *
hash_hex (guint64 h)
{
  return g_strdup_printf ("%016" G_GINT64_MODIFIER "x", h);
}

static gboolean
parse_hash (const char *s, guint64 *out)
{
  char *end = NULL;

  if (s == NULL || strlen (s) != 16)
    return FALSE;
  *out = g_ascii_strtoull (s, &end, 16);
  return end != NULL && *end == '\0';
}

static const char *
j_str (JsonObject *o, const char *name)
{
  JsonNode *n = json_object_get_member (o, name);

  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    return NULL;
  return json_node_get_string (n);
}

static gboolean
j_int (JsonObject *o, const char *name, gint64 *out)
{
  JsonNode *n = json_object_get_member (o, name);

  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_INT64)
    return FALSE;
  *out = json_node_get_int (n);
  return TRUE;
}

static gint64
j_int0 (JsonObject *o, const char *name)
{
  gint64 v = 0;

  return j_int (o, name, &v) ? v : 0;
}

static gboolean
j_num (JsonObject *o, const char *name, double *out)
{
  JsonNode *n = json_object_get_member (o, name);

  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n))
    return FALSE;
  if (json_node_get_value_type (n) == G_TYPE_DOUBLE)
    *out = json_node_get_double (n);
  else if (json_node_get_value_type (n) == G_TYPE_INT64)
    *out = (double) json_node_get_int (n);
  else
    return FALSE;
  return TRUE;
}

static gboolean
j_bool (JsonObject *o, const char *name)
{
  JsonNode *n = json_object_get_member (o, name);

  return n != NULL && JSON_NODE_HOLDS_VALUE (n) &&
         json_node_get_value_type (n) == G_TYPE_BOOLEAN && json_node_get_boolean (n);
}

/* A JSON array of strings → new GPtrArray of char*, or NULL if malformed. */
static GPtrArray *
j_str_array (JsonObject *o, const char *name, guint max)
{
  JsonNode *n = json_object_get_member (o, name);
  g_autoptr(GPtrArray) out = g_ptr_array_new_with_free_func (g_free);
  JsonArray *a;

  if (n == NULL || !JSON_NODE_HOLDS_ARRAY (n))
    return NULL;
  a = json_node_get_array (n);
  if (json_array_get_length (a) > max)
    return NULL;
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonNode *e = json_array_get_element (a, i);
      if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_STRING)
        return NULL;
      g_ptr_array_add (out, g_strdup (json_node_get_string (e)));
    }
  return g_steal_pointer (&out);
}

static gboolean
str_array_contains (GPtrArray *a, const char *s)
{
  for (guint i = 0; a && i < a->len; i++)
    if (g_strcmp0 (g_ptr_array_index (a, i), s) == 0)
      return TRUE;
  return FALSE;
}

static gboolean
str_array_remove (GPtrArray *a, const char *s)
{
  for (guint i = 0; a && i < a->len; i++)
    if (g_strcmp0 (g_ptr_array_index (a, i), s) == 0)
      {
        g_ptr_array_remove_index (a, i);
        return TRUE;
      }
  return FALSE;
}

static JsonArray *
str_array_to_json (GPtrArray *a)
{
  JsonArray *arr = json_array_new ();

  for (guint i = 0; a && i < a->len; i++)
    json_array_add_string_element (arr, g_ptr_array_index (a, i));
  return arr;
}

static Peer *
peer_by_id (RlxCoordinator *self, const char *id)
{
  if (id == NULL)
    return NULL;
  for (guint i = 0; i < self->peers->len; i++)
    {
      Peer *p = g_ptr_array_index (self->peers, i);
      if (p->id && p->hello && !p->refused && strcmp (p->id, id) == 0)
        return p;
    }
  return NULL;
}

static Peer *
peer_by_link (RlxCoordinator *self, RlxLink *link)
{
  for (guint i = 0; i < self->peers->len; i++)
    {
      Peer *p = g_ptr_array_index (self->peers, i);
      if (p->link == link)
        return p;
    }
  return NULL;
}

static gboolean
is_self (RlxCoordinator *self, const char *id)
{
  return g_strcmp0 (id, self->node_id) == 0;
}

/* A member we can still reach (ourselves, or a peer with an open link). */
static gboolean
is_alive (RlxCoordinator *self, const char *id)
{
  return is_self (self, id) || peer_by_id (self, id) != NULL;
}

static void
set_role (RlxCoordinator *self, Role role)
{
  if (self->role == role)
    return;
  self->role = role;
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_ROLE]);
}

static void
set_leader (RlxCoordinator *self, const char *leader, guint64 term)
{
  gboolean changed = g_strcmp0 (self->leader, leader) != 0;

  if (changed)
    {
      g_free (self->leader);
      self->leader = g_strdup (leader);
      g_object_notify_by_pspec (G_OBJECT (self), props[PROP_LEADER]);
    }
  if (self->term != term)
    {
      self->term = term;
      g_object_notify_by_pspec (G_OBJECT (self), props[PROP_TERM]);
    }
}

/* ── events ─────────────────────────────────────────────────────────────── */

static JsonObject *
event_new (const char *name)
{
  JsonObject *o = json_object_new ();

  json_object_set_string_member (o, "event", name);
  return o;
}

static void
event_emit (RlxCoordinator *self, JsonObject *o)
{
  g_signal_emit (self, signals[SIG_EVENT], 0, o);
  json_object_unref (o);
}

static void
emit_simple (RlxCoordinator *self, const char *name, const char *node, const char *reason)
{
  JsonObject *o = event_new (name);

  if (node)
    json_object_set_string_member (o, "node", node);
  if (reason)
    json_object_set_string_member (o, "reason", reason);
  event_emit (self, o);
}

static void
emit_error (RlxCoordinator *self, const char *message)
{
  emit_simple (self, "error", self->node_id, message);
}

static void
emit_joined (RlxCoordinator *self)
{
  JsonObject *o;
  g_autofree char *h = hash_hex (self->hash);

  if (self->joined_reported)
    return;
  self->joined_reported = TRUE;
  o = event_new ("joined");
  json_object_set_string_member (o, "node", self->node_id);
  json_object_set_string_member (o, "cohort", self->cohort);
  json_object_set_string_member (o, "role", role_names[self->role]);
  json_object_set_int_member (o, "step", (gint64) self->applied);
  json_object_set_string_member (o, "hash", h);
  json_object_set_string_member (o, "backend", rlx_backend_name (rlx_worker_backend (self->worker)));
  json_object_set_string_member (o, "fallback", rlx_backend_fallback (rlx_worker_backend (self->worker)));
  json_object_set_string_member (o, "precision", rlx_precision_to_string (self->precision));
  event_emit (self, o);
}

static void
emit_leader (RlxCoordinator *self)
{
  JsonObject *o = event_new ("leader");

  json_object_set_string_member (o, "node", self->leader);
  json_object_set_int_member (o, "term", (gint64) self->term);
  json_object_set_int_member (o, "step", (gint64) self->applied);
  event_emit (self, o);
}

static void
emit_member_joined (RlxCoordinator *self, const char *id)
{
  JsonObject *o = event_new ("member-joined");
  Peer *p = peer_by_id (self, id);

  json_object_set_string_member (o, "node", id);
  if (p)
    {
      json_object_set_string_member (o, "host", p->host);
      json_object_set_string_member (o, "backend", p->backend);
      json_object_set_string_member (o, "fallback", p->fallback);
      json_object_set_string_member (o, "precision", rlx_precision_to_string (p->precision));
    }
  json_object_set_int_member (o, "step", (gint64) self->applied);
  event_emit (self, o);
}

static void
emit_member_left (RlxCoordinator *self, const char *id, const char *reason)
{
  JsonObject *o = event_new ("member-left");

  json_object_set_string_member (o, "node", id);
  json_object_set_string_member (o, "reason", reason ? reason : "left");
  json_object_set_int_member (o, "step", (gint64) self->applied);
  event_emit (self, o);
}

static void
notify_bytes (RlxCoordinator *self)
{
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_BYTES_TX]);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_BYTES_RX]);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_BYTES_F32]);
}

static void
emit_step_full (RlxCoordinator *self, guint64 step, guint64 hash, double loss, guint64 samples,
                GPtrArray *contributors, guint late, guint rejected)
{
  JsonObject *o = event_new ("step");
  g_autofree char *h = hash_hex (hash);

  json_object_set_int_member (o, "step", (gint64) step);
  json_object_set_double_member (o, "loss", loss);
  json_object_set_string_member (o, "leader", self->leader);
  json_object_set_int_member (o, "term", (gint64) self->term);
  json_object_set_int_member (o, "members", self->members->len);
  json_object_set_int_member (o, "samples", (gint64) samples);
  json_object_set_int_member (o, "assigned",
                              self->assigned_step[step % 4] == step ? self->assigned_count[step % 4] : 0);
  json_object_set_string_member (o, "hash", h);
  json_object_set_int_member (o, "bytes_tx", (gint64) self->totals.tx_bytes);
  json_object_set_int_member (o, "bytes_rx", (gint64) self->totals.rx_bytes);
  json_object_set_int_member (o, "bytes_f32",
                              (gint64) (self->totals.tx_f32_bytes + self->totals.rx_f32_bytes));
  json_object_set_boolean_member (o, "contributed", str_array_contains (contributors, self->node_id));
  json_object_set_int_member (o, "contributors", contributors ? contributors->len : 0);
  json_object_set_int_member (o, "late", late);
  json_object_set_int_member (o, "rejected", rejected);
  event_emit (self, o);

  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_STEP]);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_LOSS]);
  notify_bytes (self);
}

static void
emit_step (RlxCoordinator *self, guint64 samples, GPtrArray *contributors,
           guint late, guint rejected)
{
  emit_step_full (self, self->applied, self->hash, self->loss, samples, contributors,
                  late, rejected);
}

/* The leader reports a commit once its frame is written to every member's
 * socket (what is written there reaches the member even if we die next):
 * a step the leader reported is never lost by a failover. */
static gboolean
members_flushed (RlxCoordinator *self)
{
  for (guint i = 0; i < self->members->len; i++)
    {
      Peer *p = peer_by_id (self, g_ptr_array_index (self->members, i));
      if (p && (rlx_sender_get_depth (p->sender) > 0 || rlx_link_pending_bytes (p->link) > 0))
        return FALSE;
    }
  return TRUE;
}

static void
commit_event_flush (RlxCoordinator *self)
{
  CommitEvent *ev = &self->commit_event;

  g_clear_handle_id (&ev->poll_id, g_source_remove);
  if (!ev->pending)
    return;
  ev->pending = FALSE;
  emit_step_full (self, ev->step, ev->hash, ev->loss, ev->samples, ev->contributors,
                  ev->late, ev->rejected);
  g_clear_pointer (&ev->contributors, g_ptr_array_unref);
}

static gboolean
on_commit_poll (gpointer user_data)
{
  RlxCoordinator *self = user_data;
  CommitEvent *ev = &self->commit_event;

  if (members_flushed (self) || g_get_monotonic_time () > ev->deadline)
    {
      ev->poll_id = 0;
      commit_event_flush (self);
      return G_SOURCE_REMOVE;
    }
  return G_SOURCE_CONTINUE;
}

static void
commit_event_queue (RlxCoordinator *self, guint64 samples, GPtrArray *contributors,
                    guint late, guint rejected)
{
  CommitEvent *ev = &self->commit_event;

  commit_event_flush (self);
  ev->pending = TRUE;
  ev->step = self->applied;
  ev->hash = self->hash;
  ev->loss = self->loss;
  ev->samples = samples;
  ev->contributors = g_ptr_array_ref (contributors);
  ev->late = late;
  ev->rejected = rejected;
  ev->deadline = g_get_monotonic_time () + 500000;
  if (members_flushed (self))
    commit_event_flush (self);
  else
    ev->poll_id = g_timeout_add (1, on_commit_poll, self);
}

/* ── sending ────────────────────────────────────────────────────────────── */

static gboolean
peer_send (RlxCoordinator *self, Peer *p, RlxSendClass klass, GBytes *frame,
           gsize n_values, RlxPrecision prec)
{
  g_autoptr(GError) error = NULL;
  gsize len = g_bytes_get_size (frame);
  gint64 t0 = g_get_monotonic_time ();
  gboolean ok;

  ok = rlx_sender_send (p->sender, klass, frame, &error);
  self->send_us_round += g_get_monotonic_time () - t0;
  if (!ok)
    {
      if (!g_error_matches (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED))
        g_debug ("send to %s failed: %s", p->id ? p->id : "?", error->message);
      return FALSE;
    }
  rlx_wire_counters_add_tx (&p->counters, &self->totals, len,
                            rlx_wire_f32_equivalent (len, n_values, prec));
  return TRUE;
}

/* Encode @header (+ optional @values at @prec) and send to @p. */
static gboolean
send_msg (RlxCoordinator *self, Peer *p, RlxSendClass klass, JsonObject *header,
          const float *values, gsize n, RlxPrecision prec, const char *field)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) frame = rlx_wire_encode (header, values, n, prec, field, &error);

  if (frame == NULL)
    {
      g_warning ("could not encode a frame: %s", error->message);
      return FALSE;
    }
  return peer_send (self, p, klass, frame, n, prec);
}

static JsonObject *
msg_new (RlxCoordinator *self, const char *t)
{
  JsonObject *o = json_object_new ();

  json_object_set_string_member (o, "t", t);
  json_object_set_string_member (o, "node", self->node_id);
  return o;
}

static void
send_control (RlxCoordinator *self, Peer *p, JsonObject *msg)
{
  send_msg (self, p, RLX_SEND_CONTROL, msg, NULL, 0, RLX_PRECISION_F32, NULL);
}

static void
broadcast_control (RlxCoordinator *self, JsonObject *msg)
{
  for (guint i = 0; i < self->peers->len; i++)
    {
      Peer *p = g_ptr_array_index (self->peers, i);
      if (p->hello && !p->refused)
        send_control (self, p, msg);
    }
}

static void
send_hello (RlxCoordinator *self, Peer *p)
{
  g_autoptr(JsonObject) m = msg_new (self, "hello");
  RlxBackend *b = rlx_worker_backend (self->worker);

  g_autofree char *seed = g_strdup_printf ("%" G_GUINT64_FORMAT, self->seed);

  json_object_set_int_member (m, "v", RLX_PROTOCOL_VERSION);
  json_object_set_string_member (m, "cohort", self->cohort);
  json_object_set_string_member (m, "seed", seed);
  json_object_set_string_member (m, "model", self->model->slug);
  json_object_set_string_member (m, "dataset", rlx_dataset_slug (self->dataset));
  json_object_set_string_member (m, "backend", rlx_backend_name (b));
  json_object_set_string_member (m, "device", rlx_backend_device (b));
  json_object_set_string_member (m, "fallback", rlx_backend_fallback (b));
  json_object_set_string_member (m, "host", self->host);
  json_object_set_string_member (m, "precision", rlx_precision_to_string (self->precision));
  json_object_set_int_member (m, "batch", self->batch);
  json_object_set_int_member (m, "max_batch", rlx_backend_max_batch (b));
  json_object_set_int_member (m, "since", self->since);
  json_object_set_string_member (m, "role", role_names[self->role]);
  if (self->leader)
    json_object_set_string_member (m, "leader", self->leader);
  json_object_set_int_member (m, "term", (gint64) self->term);
  json_object_set_int_member (m, "step", (gint64) self->applied);
  json_object_set_int_member (m, "members", self->role == ROLE_LEADER || self->role == ROLE_MEMBER
                                            ? self->members->len : 0);
  send_control (self, p, m);
}

static void
send_join (RlxCoordinator *self, const char *reason)
{
  Peer *lp = peer_by_id (self, self->leader);
  g_autoptr(JsonObject) m = NULL;

  if (lp == NULL)
    return;
  m = msg_new (self, "join");
  json_object_set_string_member (m, "reason", reason);
  json_object_set_int_member (m, "step", (gint64) self->applied);
  send_control (self, lp, m);
}

/* ── roster ─────────────────────────────────────────────────────────────── */

static void
roster_rebuild (RlxCoordinator *self)
{
  g_autoptr(GPtrArray) entries = g_ptr_array_new_with_free_func (g_object_unref);
  RlxBackend *b = rlx_worker_backend (self->worker);

  for (guint i = 0; i < self->members->len; i++)
    {
      const char *id = g_ptr_array_index (self->members, i);
      RlxRosterEntry *e = g_object_new (RLX_TYPE_ROSTER_ENTRY, NULL);
      Peer *p = peer_by_id (self, id);

      e->node_id = g_strdup (id);
      e->rank = i;
      e->state = g_strdup (self->role == ROLE_JOINING ? "rejoining" : "computing");
      e->is_self = is_self (self, id);
      e->is_leader = g_strcmp0 (id, self->leader) == 0;
      if (e->is_self)
        {
          e->host = g_strdup (self->host);
          e->backend = g_strdup (rlx_backend_name (b));
          e->device = g_strdup (rlx_backend_device (b));
          e->fallback = g_strdup (rlx_backend_fallback (b));
          e->precision = g_strdup (rlx_precision_to_string (self->precision));
          e->speed = self->self_speed;
          e->bytes_tx = self->totals.tx_bytes;
          e->bytes_rx = self->totals.rx_bytes;
        }
      else if (p)
        {
          e->host = g_strdup (p->host);
          e->backend = g_strdup (p->backend);
          e->device = g_strdup (p->device);
          e->fallback = g_strdup (p->fallback);
          e->precision = g_strdup (rlx_precision_to_string (p->precision));
          e->speed = p->speed;
          /* what this node exchanged with it */
          e->bytes_tx = p->counters.rx_bytes;
          e->bytes_rx = p->counters.tx_bytes;
        }
      g_ptr_array_add (entries, e);
    }
  g_list_store_splice (self->roster, 0, g_list_model_get_n_items (G_LIST_MODEL (self->roster)),
                       entries->pdata, entries->len);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_MEMBERS]);
}

/* Measured speeds change every round; refresh them in place now and then. */
static void
roster_update_speeds (RlxCoordinator *self)
{
  guint n = g_list_model_get_n_items (G_LIST_MODEL (self->roster));

  for (guint i = 0; i < n; i++)
    {
      g_autoptr(RlxRosterEntry) e = g_list_model_get_item (G_LIST_MODEL (self->roster), i);
      Peer *p = peer_by_id (self, e->node_id);
      double speed = e->is_self ? self->self_speed : p ? p->speed : 0;

      if (speed != e->speed)
        {
          e->speed = speed;
          g_object_notify_by_pspec (G_OBJECT (e), re_props[RE_PROP_SPEED]);
        }
    }
}

/* Replace the member list with @next (owned), reporting the difference. */
static void
members_replace (RlxCoordinator *self, GPtrArray *next)
{
  for (guint i = 0; i < self->members->len; i++)
    {
      const char *id = g_ptr_array_index (self->members, i);
      if (!str_array_contains (next, id) && !is_self (self, id))
        emit_member_left (self, id, "removed by the leader");
    }
  for (guint i = 0; i < next->len; i++)
    {
      const char *id = g_ptr_array_index (next, i);
      if (!str_array_contains (self->members, id) && !is_self (self, id))
        emit_member_joined (self, id);
    }
  g_ptr_array_unref (self->members);
  self->members = next;
  roster_rebuild (self);
}

/* ── params ─────────────────────────────────────────────────────────────── */


static void
rehash (RlxCoordinator *self)
{
  self->hash = rlx_params_hash (self->params, self->n);
}

static const guint32 *
permutation (RlxCoordinator *self, guint epoch)
{
  if (!self->perm_valid || self->perm_epoch != epoch)
    {
      rlx_dataset_permutation (self->n_train, self->seed, epoch, self->perm);
      self->perm_epoch = epoch;
      self->perm_valid = TRUE;
    }
  return self->perm;
}

/* Next batch position after @count samples from (@epoch, @pos). */
static void
advance_position (RlxCoordinator *self, guint *epoch, guint *pos, guint count)
{
  *pos += count;
  if (*pos >= self->n_train)
    {
      *pos = 0;
      *epoch += 1;
    }
}

/* ── compute ────────────────────────────────────────────────────────────── */

static void accept_grad (RlxCoordinator *self, const char *id, guint64 step,
                         guint samples, double loss, guint64 hash,
                         gint64 compute_us, const float *g, gsize n);

static void
on_job_done (RlxWorker *worker, const RlxGradResult *result, const GError *error,
             gpointer user_data)
{
  RlxCoordinator *self = user_data;
  gint64 t0 = g_get_monotonic_time ();
  guint64 term = self->job_term, step = self->job_step, hash = self->job_hash;

  self->job_running = FALSE;
  if (self->role == ROLE_STOPPED)
    return;

  if (error != NULL)
    {
      g_autofree char *msg = g_strdup_printf ("gradient of step %" G_GUINT64_FORMAT " failed: %s",
                                              step, error->message);
      emit_error (self, msg);
      if (self->role == ROLE_LEADER && self->round_active && step == self->round_step)
        {
          for (guint i = 0; i < self->slots->len; i++)
            {
              Slot *s = &g_array_index (self->slots, Slot, i);
              if (is_self (self, s->id))
                s->pending = FALSE;
            }
          check_round_complete (self);
        }
      if (error->domain == RLX_BACKEND_ERROR && error->code == RLX_BACKEND_ERROR_DEVICE_LOST)
        finish (self, FALSE, msg);
      goto out;
    }

  /* A result for a term or step that is no longer current is stale. */
  if (term != self->term || (self->task_pending && self->task_step != step))
    goto out;

  if (self->fault_nan_from > 0 && step >= self->fault_nan_from)
    for (gsize i = 0; i < result->n_grads; i++)
      result->grads[i] = NAN;

  if (self->role == ROLE_LEADER)
    {
      double sp = result->compute_us > 0 ? result->n_samples * 1e6 / result->compute_us : 0;
      self->self_speed = self->self_speed > 0 ? 0.7 * self->self_speed + 0.3 * sp : sp;
      accept_grad (self, self->node_id, step, result->n_samples, result->loss, hash,
                   result->compute_us, result->grads, result->n_grads);
    }
  else if (self->role == ROLE_MEMBER)
    {
      Peer *lp = peer_by_id (self, self->leader);
      g_autoptr(JsonObject) m = NULL;
      g_autoptr(GBytes) frame = NULL;
      g_autoptr(GError) local = NULL;
      g_autofree char *h = hash_hex (hash);

      if (lp == NULL)
        goto out;
      m = msg_new (self, "grad");
      json_object_set_int_member (m, "term", (gint64) term);
      json_object_set_int_member (m, "step", (gint64) step);
      json_object_set_int_member (m, "samples", result->n_samples);
      json_object_set_double_member (m, "loss", isfinite (result->loss) ? result->loss : 0.0);
      json_object_set_boolean_member (m, "loss_finite", isfinite (result->loss));
      json_object_set_string_member (m, "hash", h);
      json_object_set_int_member (m, "compute_us", result->compute_us);
      if (self->error_feedback && self->precision != RLX_PRECISION_F32)
        frame = rlx_wire_feedback_encode (self->grad_fb, m, result->grads, result->n_grads,
                                          self->precision, "g", NULL, &local);
      else
        frame = rlx_wire_encode (m, result->grads, result->n_grads, self->precision, "g", &local);
      if (frame == NULL)
        {
          g_autofree char *msg = g_strdup_printf ("could not encode gradient: %s", local->message);
          emit_error (self, msg);
        }
      else
        peer_send (self, lp, RLX_SEND_BULK, frame, result->n_grads, self->precision);
    }

out:
  self->busy_us_round += g_get_monotonic_time () - t0;
  if (self->task_pending && !self->job_running)
    submit_task (self);
}

/* Hand the pending assignment to the worker, if it is free. */
static void
submit_task (RlxCoordinator *self)
{
  g_autoptr(GError) error = NULL;
  const guint32 *perm;

  if (!self->task_pending || self->job_running || self->role == ROLE_STOPPED)
    return;
  if (self->task_term != self->term)
    {
      self->task_pending = FALSE;
      return;
    }
  perm = permutation (self, self->task_epoch);
  if ((guint64) self->task_pos + self->task_count > self->n_train)
    {
      self->task_pending = FALSE;
      return;
    }
  if (rlx_worker_submit (self->worker, self->params, perm + self->task_pos, self->task_count,
                         on_job_done, self, &error) == 0)
    {
      if (!g_error_matches (error, RLX_WORKER_ERROR, RLX_WORKER_ERROR_BUSY))
        {
          emit_error (self, error->message);
          self->task_pending = FALSE;
        }
      return;
    }
  self->task_pending = FALSE;
  self->job_running = TRUE;
  self->job_term = self->task_term;
  self->job_step = self->task_step;
  self->job_hash = self->task_hash;
}

/* The params were hashed after the task for @step was handed out. */
static void
fix_task_hash (RlxCoordinator *self, guint64 step)
{
  if (self->task_pending && self->task_step == step)
    self->task_hash = self->hash;
  if (self->job_running && self->job_step == step && self->job_term == self->term)
    self->job_hash = self->hash;
}

static void
note_assigned (RlxCoordinator *self, guint64 step, guint count)
{
  self->assigned_step[step % 4] = step;
  self->assigned_count[step % 4] = count;
}

/* Queue our slice of step @step (hash fixed up by fix_task_hash). */
static void
assign_task (RlxCoordinator *self, guint64 step, guint epoch, guint pos, guint count)
{
  note_assigned (self, step, count);
  self->task_pending = TRUE;
  self->task_term = self->term;
  self->task_step = step;
  self->task_epoch = epoch;
  self->task_pos = pos;
  self->task_count = count;
  self->task_hash = self->hash;   /* fixed up by the caller after rehash */
  submit_task (self);
}

/* ── leader: rounds ─────────────────────────────────────────────────────── */

/* The hot loops of a round, vectorised whatever the build's -O level. */
#define HOT __attribute__ ((optimize ("O3")))

/* In f32: a handful of buckets weighted by small sample counts loses
 * nothing that matters (the 2×32 vs 1×64 test holds to ~1e-7), and half the
 * memory traffic of f64 is most of this loop's cost. */
static void HOT
accumulate (float *restrict sum, const float *restrict g, gsize n, float w, gboolean first)
{
  if (first)
    for (gsize i = 0; i < n; i++)
      sum[i] = w * g[i];
  else
    for (gsize i = 0; i < n; i++)
      sum[i] += w * g[i];
}

/* out = lr · (sum / samples) (+ residual) */
static void HOT
mean_update (float *restrict out, const float *restrict sum, const float *restrict residual,
             gsize n, double inv, float lr)
{
  float s = (float) inv;

  if (residual)
    for (gsize i = 0; i < n; i++)
      out[i] = lr * (sum[i] * s) + residual[i];
  else
    for (gsize i = 0; i < n; i++)
      out[i] = lr * (sum[i] * s);
}

/* params -= update, element-wise in f32: the one operation every replica
 * applies (exactly rlx_sgd_step with lr 1, vectorised). */
static void HOT
apply_update (float *restrict params, const float *restrict update, gsize n)
{
  for (gsize i = 0; i < n; i++)
    params[i] -= update[i];
}


static guint
member_batch (RlxCoordinator *self, const char *id, guint *max_batch, double *speed)
{
  Peer *p;

  if (is_self (self, id))
    {
      *max_batch = rlx_backend_max_batch (rlx_worker_backend (self->worker));
      *speed = self->self_speed;
      return self->batch;
    }
  p = peer_by_id (self, id);
  if (p == NULL)
    {
      *max_batch = 0;
      *speed = 0;
      return 0;
    }
  *max_batch = p->max_batch;
  *speed = p->speed;
  return p->batch;
}

guint
rlx_coordinator_split_batch (guint count, const double *weights, const guint *max_batch,
                             guint k, guint *out)
{
  g_autofree double *w = NULL;
  g_autofree double *frac = NULL;
  double wsum = 0;
  guint given = 0;

  g_return_val_if_fail (k == 0 || (weights != NULL && max_batch != NULL && out != NULL), 0);

  if (k == 0)
    return 0;
  w = g_new0 (double, k);
  frac = g_new0 (double, k);
  for (guint i = 0; i < k; i++)
    {
      out[i] = 0;
      w[i] = max_batch[i] == 0 || !(weights[i] > 0) ? 0 : weights[i];
      wsum += w[i];
    }
  if (wsum <= 0)
    count = 0;
  for (guint i = 0; i < k && count > 0; i++)
    {
      double raw = count * w[i] / wsum;
      out[i] = (guint) floor (raw);
      frac[i] = raw - out[i];
      given += out[i];
    }
  /* The remainder to the largest fractions. */
  while (given < count)
    {
      guint best = 0;
      for (guint i = 1; i < k; i++)
        if (w[i] > 0 && (frac[i] > frac[best] || w[best] <= 0))
          best = i;
      out[best]++;
      frac[best] = -1;
      given++;
    }
  /* Everyone able gets at least one sample when there are enough. */
  if (count >= k)
    for (guint i = 0; i < k; i++)
      if (out[i] == 0 && w[i] > 0)
        {
          guint big = 0;
          for (guint j = 1; j < k; j++)
            if (out[j] > out[big])
              big = j;
          if (out[big] > 1)
            {
              out[big]--;
              out[i]++;
            }
        }
  /* No more than a member's backend takes; the excess to those with room. */
  for (guint pass = 0; pass < 4; pass++)
    {
      guint excess = 0;
      for (guint i = 0; i < k; i++)
        if (out[i] > max_batch[i])
          {
            excess += out[i] - max_batch[i];
            out[i] = max_batch[i];
          }
      for (guint i = 0; i < k && excess > 0; i++)
        while (out[i] < max_batch[i] && excess > 0 && w[i] > 0)
          {
            out[i]++;
            excess--;
          }
      count -= excess;
      if (excess == 0)
        break;
    }
  return count;
}

/* Split this round's batch over the members in proportion to their speed
 * (to their --batch until every speed is measured). */
static void
leader_assign (RlxCoordinator *self)
{
  guint k = self->members->len;
  g_autofree guint *maxb = g_new0 (guint, k);
  g_autofree double *w = g_new0 (double, k);
  g_autofree guint *c = g_new0 (guint, k);
  gboolean all_measured = TRUE;
  guint64 global = 0;
  guint count, start = 0;

  for (guint i = 0; i < k; i++)
    {
      double speed;
      guint b = member_batch (self, g_ptr_array_index (self->members, i), &maxb[i], &speed);
      global += b;
      w[i] = speed;
      if (speed <= 0)
        all_measured = FALSE;
    }
  if (!all_measured)
    for (guint i = 0; i < k; i++)
      {
        double speed;
        w[i] = member_batch (self, g_ptr_array_index (self->members, i), &maxb[i], &speed);
      }
  count = (guint) MIN (global, (guint64) (self->n_train - self->round_pos));
  rlx_coordinator_split_batch (count, w, maxb, k, c);

  g_array_set_size (self->slots, 0);
  for (guint i = 0; i < k; i++)
    {
      Slot s = { 0 };
      if (c[i] == 0)
        continue;
      s.id = g_strdup (g_ptr_array_index (self->members, i));
      s.start = start;
      s.count = c[i];
      s.pending = TRUE;
      start += c[i];
      g_array_append_val (self->slots, s);
    }
  self->round_count = start;
}

static guint
deadline_ms (RlxCoordinator *self)
{
  double ms;

  if (self->rounds_measured < 3)
    return MAX (FIRST_DEADLINE_MS, self->deadline_floor_ms);
  ms = 10.0 * self->round_ema_us / 1000.0;
  return (guint) CLAMP (ms, (double) self->deadline_floor_ms, (double) MAX_DEADLINE_MS);
}

static gboolean
on_deadline (gpointer user_data)
{
  RlxCoordinator *self = user_data;

  self->deadline_id = 0;
  if (self->role != ROLE_LEADER || !self->round_active)
    return G_SOURCE_REMOVE;
  for (guint i = 0; i < self->slots->len; i++)
    {
      Slot *s = &g_array_index (self->slots, Slot, i);
      if (s->pending)
        {
          s->pending = FALSE;
          self->round_dropped++;
          self->late_total++;
          emit_simple (self, "late", s->id, "missed the collect deadline");
        }
    }
  leader_finalize (self);
  return G_SOURCE_REMOVE;
}

static void
slot_clear (gpointer p)
{
  Slot *s = p;
  g_free (s->id);
}

/* Publish the next step (and, with @commit, the update of the step just
 * collected, already in self->scratch as the pre-quantisation values). */
/* Where the leader's time goes, per phase (reported in "done"). */
#define PROF(k) G_STMT_START { gint64 prof_now = g_get_monotonic_time (); \
  self->prof_us[k] += prof_now - prof_t; prof_t = prof_now; } G_STMT_END

static void
leader_publish (RlxCoordinator *self, gboolean commit)
{
  gint64 prof_t;
  g_autoptr(JsonObject) m = msg_new (self, "step");
  g_autoptr(JsonObject) assign = json_object_new ();
  g_autoptr(GBytes) frame = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *base = hash_hex (self->hash);
  guint64 commit_step = commit ? self->round_step : 0;
  guint64 samples = self->round_samples;
  g_autoptr(GPtrArray) contributors = self->contributors;
  guint late = self->round_late + self->round_dropped, rejected = self->round_rejected;
  gboolean final = commit && self->steps > 0 && commit_step >= self->steps;
  guint64 next_step = commit ? commit_step + 1 : self->applied + 1;
  gint64 now = g_get_monotonic_time ();

  if (commit)
    {
      /* Statistics of the round just closed (warm-up rounds excluded). */
      gint64 round_us = now - self->round_started;
      self->round_ema_us = self->rounds_measured == 0 ? round_us
                         : 0.8 * self->round_ema_us + 0.2 * round_us;
      self->rounds_measured++;
      if (self->rounds_measured > 5)
        {
          self->stat_rounds++;
          self->stat_round_us += round_us;
          self->stat_compute_us += self->round_max_compute;
          self->stat_busy_us += self->busy_us_round;
          self->stat_send_us += self->send_us_round;
        }
      advance_position (self, &self->round_epoch, &self->round_pos, self->round_count);
    }
  self->busy_us_round = 0;
  self->send_us_round = 0;

  /* The next round's assignment. */
  g_clear_handle_id (&self->deadline_id, g_source_remove);
  g_array_set_size (self->slots, 0);
  self->round_active = FALSE;
  self->round_count = 0;
  if (!final)
    {
      if (self->rounds_started || self->members->len >= self->wait_members)
        {
          self->rounds_started = TRUE;
          leader_assign (self);
        }
      for (guint i = 0; i < self->slots->len; i++)
        {
          Slot *s = &g_array_index (self->slots, Slot, i);
          JsonArray *a = json_array_new ();
          json_array_add_int_element (a, self->round_pos + s->start);
          json_array_add_int_element (a, s->count);
          json_object_set_array_member (assign, s->id, a);
        }
    }

  json_object_set_int_member (m, "term", (gint64) self->term);
  json_object_set_string_member (m, "leader", self->node_id);
  json_object_set_int_member (m, "step", (gint64) next_step);
  json_object_set_int_member (m, "commit", (gint64) commit_step);
  json_object_set_string_member (m, "base", base);
  json_object_set_double_member (m, "loss", commit ? self->loss : 0.0);
  json_object_set_int_member (m, "samples", (gint64) samples);
  json_object_set_array_member (m, "contributors", str_array_to_json (contributors));
  json_object_set_int_member (m, "late", late);
  json_object_set_int_member (m, "rejected", rejected);
  json_object_set_double_member (m, "lr", self->lr);
  json_object_set_int_member (m, "epoch", self->round_epoch);
  json_object_set_int_member (m, "pos", self->round_pos);
  json_object_set_int_member (m, "count", self->round_count);
  json_object_set_array_member (m, "members", str_array_to_json (self->members));
  json_object_set_object_member (m, "assign", json_object_ref (assign));
  json_object_set_boolean_member (m, "final", final);

  prof_t = g_get_monotonic_time ();
  frame = rlx_wire_encode (m, commit ? self->scratch : NULL, commit ? self->n : 0,
                           self->precision, "avg", &error);
  PROF (3);
  if (frame == NULL)
    {
      g_autofree char *msg = g_strdup_printf ("could not encode the step: %s", error->message);
      finish (self, FALSE, msg);
      return;
    }

  if (commit)
    {
      commit_event_flush (self);
      /* Apply exactly what every member will decode from this frame. */
      const float *update = self->scratch;   /* f32 travels as is */
      if (self->precision != RLX_PRECISION_F32)
        update = self->update_buf;
      if (self->precision != RLX_PRECISION_F32 &&
          !rlx_wire_decode_into (frame, NULL, NULL, NULL, self->update_buf, self->n, &error))
        {
          g_autofree char *msg = g_strdup_printf ("own step frame does not decode: %s", error->message);
          finish (self, FALSE, msg);
          return;
        }
      if (self->residual)
        for (gsize i = 0; i < self->n; i++)
          {
            float r = self->scratch[i] - update[i];
            self->residual[i] = isfinite (r) ? r : 0.0f;
          }
      apply_update (self->params, update, self->n);
      self->applied = commit_step;
    }
  PROF (4);

  for (guint i = 0; i < self->members->len; i++)
    {
      Peer *p = peer_by_id (self, g_ptr_array_index (self->members, i));
      if (p)
        peer_send (self, p, RLX_SEND_STEP, frame, commit ? self->n : 0, self->precision);
    }
  PROF (5);

  /* Our own slice, then hash while the worker computes. */
  self->round_step = next_step;
  self->round_started = g_get_monotonic_time ();
  self->round_samples = 0;
  self->round_loss = 0;
  self->round_late = self->round_rejected = self->round_dropped = 0;
  self->round_max_compute = 0;
  self->contributors = g_ptr_array_new_with_free_func (g_free);
  note_assigned (self, next_step, 0);
  if (self->slots->len > 0)
    {
      /* self->sum is overwritten by the first gradient (round_samples == 0). */
      self->round_active = TRUE;
      for (guint i = 0; i < self->slots->len; i++)
        {
          Slot *s = &g_array_index (self->slots, Slot, i);
          if (is_self (self, s->id))
            assign_task (self, next_step, self->round_epoch, self->round_pos + s->start, s->count);
        }
      self->deadline_id = g_timeout_add (deadline_ms (self), on_deadline, self);
    }
  PROF (6);
  if (commit)
    {
      rehash (self);
      commit_event_queue (self, samples, contributors, late, rejected);
      if (self->applied % 16 == 0)
        roster_update_speeds (self);
    }
  PROF (7);
  fix_task_hash (self, next_step);

  if (commit)
    {
      gboolean due = self->checkpoint_every > 0 && self->applied % self->checkpoint_every == 0;
      if (final)
        {
          self->finish_after_checkpoint = TRUE;
          due = TRUE;
        }
      if (due)
        checkpoint_now (self);
      else if (final)
        finish (self, TRUE, "all steps committed");
    }
}

static void
leader_finalize (RlxCoordinator *self)
{
  g_clear_handle_id (&self->deadline_id, g_source_remove);
  if (!self->round_active)
    return;
  self->round_active = FALSE;

  if (self->round_samples == 0)
    {
      /* Nothing usable came back: the step is not committed; run it again
       * with whoever is still here (same dataset position). */
      leader_publish (self, FALSE);
      return;
    }

  /* u = lr · (sample-weighted mean), plus the carried residual. */
  {
    gint64 prof_t = g_get_monotonic_time ();
    mean_update (self->scratch, self->sum, self->residual, self->n,
                 1.0 / (double) self->round_samples, (float) self->lr);
    PROF (2);
  }
  self->loss = self->round_loss / (double) self->round_samples;
  leader_publish (self, TRUE);
}

static void
check_round_complete (RlxCoordinator *self)
{
  if (self->role != ROLE_LEADER || !self->round_active)
    return;
  for (guint i = 0; i < self->slots->len; i++)
    if (g_array_index (self->slots, Slot, i).pending)
      return;
  leader_finalize (self);
}

static void
reject_bucket (RlxCoordinator *self, Slot *slot, const char *id, guint64 step, const char *reason)
{
  JsonObject *o = event_new ("rejected");
  Peer *p = peer_by_id (self, id);

  json_object_set_string_member (o, "node", id);
  json_object_set_int_member (o, "step", (gint64) step);
  json_object_set_string_member (o, "reason", reason);
  event_emit (self, o);
  self->round_rejected++;
  self->rejected_total++;
  if (slot)
    slot->pending = FALSE;
  if (p)
    {
      g_autoptr(JsonObject) m = msg_new (self, "reject");
      json_object_set_int_member (m, "step", (gint64) step);
      json_object_set_string_member (m, "reason", reason);
      send_control (self, p, m);
    }
}

/* No NaN or Inf in @g: an exponent-bits test the compiler vectorises. */
static gboolean HOT
all_finite (const float *g, gsize n)
{
  const guint32 *b = (const guint32 *) g;
  guint32 bad = 0;

  for (gsize i = 0; i < n; i++)
    bad |= (guint32) ((b[i] & 0x7f800000u) == 0x7f800000u);
  return bad == 0;
}

static void
accept_grad (RlxCoordinator *self, const char *id, guint64 step, guint samples, double loss,
             guint64 hash, gint64 compute_us, const float *g, gsize n)
{
  Slot *slot = NULL;
  g_autofree char *reason = NULL;

  if (!self->round_active || step != self->round_step)
    {
      self->late_total++;
      if (self->round_active)
        self->round_late++;
      return;
    }
  for (guint i = 0; i < self->slots->len; i++)
    {
      Slot *s = &g_array_index (self->slots, Slot, i);
      if (strcmp (s->id, id) == 0)
        slot = s;
    }
  if (slot == NULL || !slot->pending)
    {
      self->round_late++;
      self->late_total++;
      return;
    }

  if (g == NULL || n != self->n)
    reason = g_strdup_printf ("gradient bucket of %zu values, the model has %zu", g ? n : 0, self->n);
  else if (samples != slot->count)
    reason = g_strdup_printf ("gradient over %u samples, %u were assigned", samples, slot->count);
  else if (hash != self->hash)
    reason = g_strdup ("gradient computed at other parameters (hash differs)");
  else if (!isfinite (loss))
    reason = g_strdup ("loss is not finite");
  else if (!all_finite (g, n))
    {
      for (gsize i = 0; i < n; i++)
        if (!isfinite (g[i]))
          {
            reason = g_strdup_printf ("gradient value %zu is %s", i, isnan (g[i]) ? "NaN" : "infinite");
            break;
          }
    }
  if (reason)
    {
      reject_bucket (self, slot, id, step, reason);
      check_round_complete (self);
      return;
    }

  {
    float w = (float) samples;
    float *sum = self->sum;
    gint64 prof_t = g_get_monotonic_time ();
    accumulate (sum, g, n, w, self->round_samples == 0);
    PROF (1);
  }
  self->round_samples += samples;
  self->round_loss += loss * samples;
  self->round_max_compute = MAX (self->round_max_compute, compute_us);
  g_ptr_array_add (self->contributors, g_strdup (id));
  slot->pending = FALSE;
  if (!is_self (self, id) && compute_us > 0)
    {
      Peer *p = peer_by_id (self, id);
      double sp = samples * 1e6 / compute_us;
      if (p)
        p->speed = p->speed > 0 ? 0.7 * p->speed + 0.3 * sp : sp;
    }
  check_round_complete (self);
}

/* Our full-precision state to @p. */
static void
send_snapshot (RlxCoordinator *self, Peer *p, const char *reason)
{
  g_autoptr(JsonObject) m = msg_new (self, "snapshot");
  g_autofree char *h = hash_hex (self->hash);
  g_autofree char *seed = g_strdup_printf ("%" G_GUINT64_FORMAT, self->seed);
  JsonObject *o;

  json_object_set_int_member (m, "term", (gint64) self->term);
  json_object_set_string_member (m, "leader", self->leader ? self->leader : self->node_id);
  json_object_set_int_member (m, "step", (gint64) self->applied);
  json_object_set_string_member (m, "hash", h);
  json_object_set_string_member (m, "seed", seed);
  json_object_set_int_member (m, "epoch", self->round_epoch);
  json_object_set_int_member (m, "pos", self->round_pos);
  json_object_set_double_member (m, "loss", self->loss);
  json_object_set_array_member (m, "members", str_array_to_json (self->members));
  send_msg (self, p, RLX_SEND_BULK, m, self->params, self->n, RLX_PRECISION_F32, "params");

  o = event_new ("snapshot");
  json_object_set_string_member (o, "to", p->id);
  json_object_set_int_member (o, "step", (gint64) self->applied);
  json_object_set_string_member (o, "hash", h);
  json_object_set_string_member (o, "reason", reason);
  event_emit (self, o);
}

/* Admit @id (or re-send it a snapshot). */
static void
leader_admit (RlxCoordinator *self, Peer *p, const char *reason)
{

  if (!str_array_contains (self->members, p->id))
    {
      g_ptr_array_add (self->members, g_strdup (p->id));
      emit_member_joined (self, p->id);
      roster_rebuild (self);
    }
  /* A pending slice of a member that needs a snapshot will not come. */
  for (guint i = 0; self->round_active && i < self->slots->len; i++)
    {
      Slot *s = &g_array_index (self->slots, Slot, i);
      if (s->pending && strcmp (s->id, p->id) == 0)
        s->pending = FALSE;
    }

  send_snapshot (self, p, reason ? reason : "join");

  if (self->round_active)
    check_round_complete (self);
  else if (self->role == ROLE_LEADER && !self->finished &&
           (self->rounds_started || self->members->len >= self->wait_members))
    leader_publish (self, FALSE);
}

/* ── leadership ─────────────────────────────────────────────────────────── */

static void
become_leader (RlxCoordinator *self, guint64 term, gboolean founding)
{
  g_autoptr(JsonObject) m = NULL;

  g_clear_handle_id (&self->found_id, g_source_remove);
  g_clear_handle_id (&self->join_id, g_source_remove);
  set_leader (self, self->node_id, term);
  set_role (self, ROLE_LEADER);
  if (founding)
    {
      g_ptr_array_set_size (self->members, 0);
      g_ptr_array_add (self->members, g_strdup (self->node_id));
      if (self->resume_params)
        {
          JsonObject *o;
          g_autofree char *h = NULL;

          memcpy (self->params, self->resume_params, self->n * sizeof (float));
          self->applied = self->resume_step;
          self->round_epoch = self->resume_epoch;
          self->round_pos = self->resume_pos;
          rehash (self);
          h = hash_hex (self->hash);
          o = event_new ("resumed");
          json_object_set_int_member (o, "step", (gint64) self->applied);
          json_object_set_string_member (o, "hash", h);
          json_object_set_string_member (o, "path", self->checkpoint_path);
          event_emit (self, o);
        }
    }
  else
    {
      /* Failover: keep the members we can still reach. */
      for (guint i = self->members->len; i > 0; i--)
        if (!is_alive (self, g_ptr_array_index (self->members, i - 1)))
          g_ptr_array_remove_index (self->members, i - 1);
      if (!str_array_contains (self->members, self->node_id))
        g_ptr_array_insert (self->members, 0, g_strdup (self->node_id));
    }
  if (self->residual)
    memset (self->residual, 0, self->n * sizeof (float));
  self->rounds_measured = 0;
  roster_rebuild (self);
  emit_leader (self);
  emit_joined (self);

  m = msg_new (self, "leader");
  json_object_set_int_member (m, "term", (gint64) term);
  json_object_set_int_member (m, "step", (gint64) self->applied);
  broadcast_control (self, m);

  if (self->steps > 0 && self->applied >= self->steps)
    {
      finish (self, TRUE, "all steps committed");
      return;
    }
  if (!founding)
    self->rounds_started = TRUE;
  if (self->rounds_started || self->members->len >= self->wait_members)
    leader_publish (self, FALSE);
}

/* Seniority before a cohort exists: earlier start, then smaller id. */
static gboolean
older_than (gint64 since_a, const char *id_a, gint64 since_b, const char *id_b)
{
  if (since_a != since_b)
    return since_a < since_b;
  return strcmp (id_a, id_b) < 0;
}

static gboolean on_join_retry (gpointer user_data);

static void
start_joining (RlxCoordinator *self, const char *leader, guint64 term)
{
  gboolean asked = self->role == ROLE_JOINING && g_strcmp0 (self->leader, leader) == 0;

  g_clear_handle_id (&self->found_id, g_source_remove);
  set_leader (self, leader, MAX (term, self->term));
  set_role (self, ROLE_JOINING);
  /* Once per leader; the retry timer repeats it if nothing comes back. */
  if (!asked)
    send_join (self, "join");
  if (self->join_id == 0)
    self->join_id = g_timeout_add (JOIN_RETRY_MS, on_join_retry, self);
}

static gboolean on_found_timer (gpointer user_data);

static gboolean
on_join_retry (gpointer user_data)
{
  RlxCoordinator *self = user_data;

  if (self->role != ROLE_JOINING)
    {
      self->join_id = 0;
      return G_SOURCE_REMOVE;
    }
  if (peer_by_id (self, self->leader) == NULL)
    {
      /* The leader we were joining is gone: look again. */
      self->join_id = 0;
      set_role (self, ROLE_ALONE);
      if (self->found_id == 0)
        self->found_id = g_timeout_add (FOUND_RETRY_MS, on_found_timer, self);
      return G_SOURCE_REMOVE;
    }
  send_join (self, self->applied > 0 || self->joined_reported ? "resync" : "join");
  return G_SOURCE_CONTINUE;
}

static gboolean
on_found_timer (gpointer user_data)
{
  RlxCoordinator *self = user_data;
  gboolean senior = TRUE;

  self->found_id = 0;
  if (self->role != ROLE_ALONE)
    return G_SOURCE_REMOVE;
  for (guint i = 0; i < self->peers->len; i++)
    {
      Peer *p = g_ptr_array_index (self->peers, i);
      if (!p->hello || p->refused)
        continue;
      if ((p->role == ROLE_LEADER || p->role == ROLE_MEMBER) && p->leader)
        {
          start_joining (self, p->role == ROLE_LEADER ? p->id : p->leader, p->term);
          return G_SOURCE_REMOVE;
        }
      if (p->role == ROLE_ALONE && older_than (p->since, p->id, self->since, self->node_id))
        senior = FALSE;
    }
  if (senior && self->checkpoint_error)
    finish (self, FALSE, self->checkpoint_error->message);
  else if (senior)
    become_leader (self, 1, TRUE);
  else
    {
      /* An older node has not founded yet, or we hold a stale view of it:
       * say hello again (its answer refreshes what we know). */
      if (++self->found_waits % 4 == 0)
        for (guint i = 0; i < self->peers->len; i++)
          {
            Peer *p = g_ptr_array_index (self->peers, i);
            if (p->hello && !p->refused)
              send_hello (self, p);
          }
      self->found_id = g_timeout_add (FOUND_RETRY_MS, on_found_timer, self);
    }
  return G_SOURCE_REMOVE;
}

/* The leader is gone: the first surviving member takes over. */
static void
leader_lost (RlxCoordinator *self, const char *reason)
{
  g_autofree char *old = g_strdup (self->leader);
  const char *next = NULL;

  if (self->role == ROLE_JOINING || self->role == ROLE_ALONE)
    {
      set_role (self, ROLE_ALONE);
      if (self->found_id == 0)
        self->found_id = g_timeout_add (FOUND_RETRY_MS, on_found_timer, self);
      return;
    }
  if (self->role != ROLE_MEMBER)
    return;
  if (str_array_remove (self->members, old))
    emit_member_left (self, old, reason);
  for (guint i = 0; i < self->members->len; i++)
    if (is_alive (self, g_ptr_array_index (self->members, i)))
      {
        next = g_ptr_array_index (self->members, i);
        break;
      }
  if (next == NULL || is_self (self, next))
    become_leader (self, self->term + 1, FALSE);
  else
    {
      /* Wait for it to announce itself (term + 1); its silence is caught
       * by the heartbeat like anyone's. */
      set_leader (self, next, self->term);
      roster_rebuild (self);
    }
}

/* ── receiving ──────────────────────────────────────────────────────────── */

static void
peer_refuse (RlxCoordinator *self, Peer *p, const char *peer_id, const char *reason)
{
  g_autoptr(JsonObject) m = msg_new (self, "refuse");
  JsonObject *o = event_new ("refused");

  json_object_set_string_member (m, "reason", reason);
  send_control (self, p, m);
  p->refused = TRUE;
  json_object_set_string_member (o, "node", peer_id ? peer_id : "?");
  json_object_set_string_member (o, "reason", reason);
  json_object_set_string_member (o, "by", self->node_id);
  event_emit (self, o);
}

static void
on_hello (RlxCoordinator *self, Peer *p, JsonObject *h)
{
  const char *id = j_str (h, "node");
  const char *cohort = j_str (h, "cohort"), *model = j_str (h, "model");
  const char *dataset = j_str (h, "dataset");
  gint64 v = j_int0 (h, "v");
  Role prole = role_from_string (j_str (h, "role"));
  g_autofree char *reason = NULL;
  RlxPrecision prec = RLX_PRECISION_F32;
  g_autofree char *my_seed = g_strdup_printf ("%" G_GUINT64_FORMAT, self->seed);

  if (id == NULL || !g_utf8_validate (id, -1, NULL) || strlen (id) > 64 || is_self (self, id))
    reason = g_strdup ("hello without a usable node id");
  else if (v != RLX_PROTOCOL_VERSION)
    reason = g_strdup_printf ("protocol version %" G_GINT64_FORMAT " differs from this cohort's %d",
                              v, RLX_PROTOCOL_VERSION);
  else if (g_strcmp0 (cohort, self->cohort) != 0)
    reason = g_strdup_printf ("cohort '%s' differs from '%s'", cohort ? cohort : "?", self->cohort);
  else if (g_strcmp0 (model, self->model->slug) != 0)
    reason = g_strdup_printf ("model differs: %s trains %s, %s trains %s", id,
                              model ? model : "nothing", self->node_id, self->model->slug);
  else if (g_strcmp0 (dataset, rlx_dataset_slug (self->dataset)) != 0)
    reason = g_strdup_printf ("dataset differs: %s uses %s, %s uses %s", id,
                              dataset ? dataset : "nothing", self->node_id,
                              rlx_dataset_slug (self->dataset));
  else if (g_strcmp0 (j_str (h, "seed"), my_seed) != 0)
    reason = g_strdup_printf ("seed %s differs from this cohort's %s (the synthetic data and the "
                              "sample order depend on it)", j_str (h, "seed") ? j_str (h, "seed") : "?",
                              my_seed);
  else if (!rlx_precision_from_string (j_str (h, "precision"), &prec, NULL))
    reason = g_strdup ("unknown wire precision in hello");
  else if (peer_by_id (self, id) != NULL && peer_by_id (self, id) != p)
    reason = g_strdup_printf ("node id %s is already in use", id);

  if (reason)
    {
      peer_refuse (self, p, id, reason);
      /* Refused by a cohort that exists: this node cannot take part. */
      if ((prole == ROLE_LEADER || prole == ROLE_MEMBER) &&
          (self->role == ROLE_ALONE || self->role == ROLE_JOINING))
        {
          g_autofree char *msg = g_strdup_printf ("cannot join cohort %s: %s", self->cohort, reason);
          finish (self, FALSE, msg);
        }
      rlx_link_close (p->link);
      return;
    }

  g_free (p->id);
  p->id = g_strdup (id);
  p->hello = TRUE;
  g_free (p->host);
  p->host = g_strdup (j_str (h, "host") ? j_str (h, "host") : "");
  g_free (p->backend);
  p->backend = g_strdup (j_str (h, "backend") ? j_str (h, "backend") : "");
  g_free (p->device);
  p->device = g_strdup (j_str (h, "device") ? j_str (h, "device") : "");
  g_free (p->fallback);
  p->fallback = g_strdup (j_str (h, "fallback") ? j_str (h, "fallback") : "");
  p->precision = prec;
  p->batch = (guint) CLAMP (j_int0 (h, "batch"), 0, 1 << 20);
  p->max_batch = (guint) CLAMP (j_int0 (h, "max_batch"), 0, 1 << 20);
  p->since = j_int0 (h, "since");
  p->role = prole;
  g_free (p->leader);
  p->leader = g_strdup (j_str (h, "leader"));
  p->term = (guint64) MAX (0, j_int0 (h, "term"));

  if ((self->role == ROLE_LEADER || self->role == ROLE_MEMBER) && self->leader &&
      (prole == ROLE_ALONE || prole == ROLE_JOINING))
    {
      /* It may have said hello before we founded or joined (and so holds a
       * stale view of us): tell it who leads, so it asks to join. */
      g_autoptr(JsonObject) m = msg_new (self, "leader");
      json_object_set_string_member (m, "node", self->leader);
      json_object_set_int_member (m, "term", (gint64) self->term);
      json_object_set_int_member (m, "step", (gint64) self->applied);
      send_control (self, p, m);
    }
  if (self->role == ROLE_ALONE && (prole == ROLE_LEADER || prole == ROLE_MEMBER) && p->leader)
    start_joining (self, prole == ROLE_LEADER ? p->id : p->leader, p->term);
  else if (self->role == ROLE_LEADER && prole == ROLE_LEADER)
    {
      /* Two cohorts of one name met (nodes that founded before they saw
       * each other): the smaller one, then the younger leader, yields. */
      gint64 their = j_int0 (h, "members");
      if (their > self->members->len ||
          (their == self->members->len && older_than (p->since, p->id, self->since, self->node_id)))
        {
          self->round_active = FALSE;
          g_clear_handle_id (&self->deadline_id, g_source_remove);
          set_role (self, ROLE_ALONE);
          self->joined_reported = FALSE;
          start_joining (self, p->id, p->term);
        }
    }
  else if (self->role == ROLE_JOINING && g_strcmp0 (self->leader, p->id) == 0)
    send_join (self, "join");
  if (str_array_contains (self->members, p->id))
    roster_rebuild (self);
}

static void
on_leader_msg (RlxCoordinator *self, Peer *p, JsonObject *h)
{
  guint64 term = (guint64) MAX (0, j_int0 (h, "term"));
  const char *named = j_str (h, "node");
  /* Usually the sender announces itself; a member may also relay who leads
   * now to a leader of an older term. */
  const char *lid = named && (is_self (self, named) || peer_by_id (self, named)) ? named : p->id;

  if (strcmp (lid, p->id) == 0)
    {
      p->role = ROLE_LEADER;
      g_free (p->leader);
      p->leader = g_strdup (p->id);
      p->term = term;
    }
  if (term < self->term || is_self (self, lid))
    return;
  switch (self->role)
    {
    case ROLE_ALONE:
    case ROLE_JOINING:
      start_joining (self, lid, term);
      break;
    case ROLE_MEMBER:
      if (term > self->term || g_strcmp0 (self->leader, lid) != 0)
        {
          set_leader (self, lid, term);
          emit_leader (self);
          roster_rebuild (self);
        }
      break;
    case ROLE_LEADER:
      /* Two leaders of one term: the smaller id keeps it; a newer term
       * always wins. */
      if (term > self->term ||
          (term == self->term && strcmp (lid, self->node_id) < 0))
        {
          self->round_active = FALSE;
          g_clear_handle_id (&self->deadline_id, g_source_remove);
          set_leader (self, lid, term);
          set_role (self, ROLE_MEMBER);
          emit_leader (self);
          request_snapshot (self, "another leader took over");
        }
      break;
    case ROLE_STOPPED:
    default:
      break;
    }
}

static void
request_snapshot (RlxCoordinator *self, const char *reason)
{
  set_role (self, ROLE_JOINING);
  self->task_pending = FALSE;
  send_join (self, reason);
  if (self->join_id == 0)
    self->join_id = g_timeout_add (JOIN_RETRY_MS, on_join_retry, self);
}

static void
on_step_msg (RlxCoordinator *self, Peer *p, JsonObject *h, const float *values, gsize n)
{
  guint64 term = (guint64) MAX (0, j_int0 (h, "term"));
  guint64 step = (guint64) MAX (0, j_int0 (h, "step"));
  guint64 commit = (guint64) MAX (0, j_int0 (h, "commit"));
  guint64 base = 0;
  gboolean committed = FALSE;
  JsonNode *assign_node;
  g_autoptr(GPtrArray) members = NULL;
  g_autoptr(GPtrArray) contributors = NULL;
  double loss = 0;

  if (self->role == ROLE_STOPPED)
    return;
  if (term < self->term)
    {
      /* A leader of an older term that missed the change (e.g. it was cut
       * off): tell it who leads now, so it steps down. */
      if (self->leader && (self->role == ROLE_MEMBER || self->role == ROLE_LEADER))
        {
          g_autoptr(JsonObject) m = msg_new (self, "leader");
          json_object_set_string_member (m, "node", self->leader);
          json_object_set_int_member (m, "term", (gint64) self->term);
          json_object_set_int_member (m, "step", (gint64) self->applied);
          send_control (self, p, m);
        }
      return;
    }
  if (self->role == ROLE_LEADER)
    {
      if (term == self->term && strcmp (p->id, self->node_id) > 0)
        return;
      /* A leader of a newer term (or a more senior one of ours). */
      self->round_active = FALSE;
      g_clear_handle_id (&self->deadline_id, g_source_remove);
      set_role (self, ROLE_MEMBER);
    }
  if (term > self->term || g_strcmp0 (self->leader, p->id) != 0)
    {
      set_leader (self, p->id, term);
      if (self->role == ROLE_MEMBER)
        emit_leader (self);
    }
  if (self->role != ROLE_MEMBER)
    return;   /* not admitted yet: wait for the snapshot */

  members = j_str_array (h, "members", 4096);
  contributors = j_str_array (h, "contributors", 4096);
  if (members == NULL || contributors == NULL ||
      !parse_hash (j_str (h, "base"), &base))
    {
      emit_error (self, "malformed step message from the leader");
      return;
    }

  if (commit > 0)
    {
      if (commit == self->applied + 1)
        {
          if (base != self->hash)
            {
              request_snapshot (self, "parameter hash differs from the leader's");
              return;
            }
          if (values == NULL || n != self->n)
            {
              request_snapshot (self, "commit without a whole update");
              return;
            }
          apply_update (self->params, values, self->n);
          self->applied = commit;
          j_num (h, "loss", &loss);
          self->loss = loss;
          committed = TRUE;
        }
      else if (commit > self->applied + 1)
        {
          request_snapshot (self, "missed a commit");
          return;
        }
    }
  if (step <= self->applied && !committed && !j_bool (h, "final"))
    {
      /* A new leader that missed the last commit we have: hand it our
       * state, so no step we committed is lost (it adopts the snapshot and
       * restarts from there). */
      if (self->ahead_sent_term != term)
        {
          self->ahead_sent_term = term;
          send_snapshot (self, p, "a member is ahead of the new leader");
        }
      return;
    }
  if (step != self->applied + 1 && !j_bool (h, "final"))
    {
      request_snapshot (self, "step out of sequence");
      return;
    }

  self->round_epoch = (guint) CLAMP (j_int0 (h, "epoch"), 0, G_MAXINT);
  self->round_pos = (guint) CLAMP (j_int0 (h, "pos"), 0, (gint64) self->n_train);
  members_replace (self, g_steal_pointer (&members));

  if (!str_array_contains (self->members, self->node_id))
    {
      request_snapshot (self, "not in the member list");
      return;
    }

  note_assigned (self, step, 0);
  assign_node = json_object_get_member (h, "assign");
  if (assign_node && JSON_NODE_HOLDS_OBJECT (assign_node))
    {
      JsonNode *mine = json_object_get_member (json_node_get_object (assign_node), self->node_id);
      if (mine && JSON_NODE_HOLDS_ARRAY (mine) &&
          json_array_get_length (json_node_get_array (mine)) == 2)
        {
          JsonArray *a = json_node_get_array (mine);
          JsonNode *s0 = json_array_get_element (a, 0), *s1 = json_array_get_element (a, 1);
          gint64 start = JSON_NODE_HOLDS_VALUE (s0) ? json_node_get_int (s0) : -1;
          gint64 count = JSON_NODE_HOLDS_VALUE (s1) ? json_node_get_int (s1) : -1;
          if (start >= 0 && count > 0 && start + count <= self->n_train)
            assign_task (self, step, self->round_epoch, (guint) start, (guint) count);
        }
    }

  if (committed)
    {
      rehash (self);
      fix_task_hash (self, step);
      emit_step (self, (guint64) MAX (0, j_int0 (h, "samples")), contributors,
                 (guint) MAX (0, j_int0 (h, "late")), (guint) MAX (0, j_int0 (h, "rejected")));
      if (self->steps > 0 && self->applied >= self->steps)
        finish (self, TRUE, "all steps committed");
    }
}

static void
on_snapshot (RlxCoordinator *self, Peer *p, JsonObject *h, const float *values, gsize n)
{
  guint64 term = (guint64) MAX (0, j_int0 (h, "term"));
  guint64 hash = 0, seed;
  const char *seed_s = j_str (h, "seed");
  g_autoptr(GPtrArray) members = j_str_array (h, "members", 4096);
  g_autofree char *hx = NULL;
  JsonObject *o;

  if (term < self->term || self->role == ROLE_STOPPED)
    return;
  if (self->role == ROLE_LEADER)
    {
      leader_adopt (self, p, h, values, n);
      return;
    }
  if (values == NULL || n != self->n || members == NULL || seed_s == NULL ||
      !parse_hash (j_str (h, "hash"), &hash) ||
      rlx_params_hash (values, n) != hash)
    {
      emit_error (self, "snapshot is malformed or does not match its hash; asking again");
      return;
    }
  seed = g_ascii_strtoull (seed_s, NULL, 10);
  if (seed != self->seed)
    {
      self->seed = seed;
      self->perm_valid = FALSE;
    }
  memcpy (self->params, values, n * sizeof (float));
  self->applied = (guint64) MAX (0, j_int0 (h, "step"));
  self->hash = hash;
  self->task_pending = FALSE;
  if (self->grad_fb)
    rlx_wire_feedback_reset (self->grad_fb);
  g_clear_handle_id (&self->join_id, g_source_remove);
  g_clear_handle_id (&self->found_id, g_source_remove);
  set_leader (self, p->id, term);
  set_role (self, ROLE_MEMBER);
  members_replace (self, g_steal_pointer (&members));

  hx = hash_hex (hash);
  o = event_new ("snapshot");
  json_object_set_string_member (o, "from", p->id);
  json_object_set_int_member (o, "step", (gint64) self->applied);
  json_object_set_string_member (o, "hash", hx);
  event_emit (self, o);
  if (!self->joined_reported)
    {
      emit_leader (self);
      emit_joined (self);
    }
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_STEP]);
  /* Joined a cohort already past our --steps. */
  if (self->steps > 0 && self->applied >= self->steps)
    finish (self, TRUE, "all steps committed");
}

/* A member committed a step we (the new leader) never received: take its
 * state and restart the round after it. */
static void
leader_adopt (RlxCoordinator *self, Peer *p, JsonObject *h, const float *values, gsize n)
{
  guint64 step = (guint64) MAX (0, j_int0 (h, "step")), hash = 0;
  JsonObject *o;
  g_autofree char *hx = NULL;

  if ((guint64) j_int0 (h, "term") != self->term || step <= self->applied ||
      !str_array_contains (self->members, p->id))
    return;
  if (values == NULL || n != self->n || !parse_hash (j_str (h, "hash"), &hash) ||
      rlx_params_hash (values, n) != hash)
    {
      emit_error (self, "a member's snapshot is malformed or does not match its hash");
      return;
    }
  self->round_active = FALSE;
  g_clear_handle_id (&self->deadline_id, g_source_remove);
  memcpy (self->params, values, n * sizeof (float));
  self->applied = step;
  self->hash = hash;
  j_num (h, "loss", &self->loss);
  self->round_epoch = (guint) CLAMP (j_int0 (h, "epoch"), 0, G_MAXINT);
  self->round_pos = (guint) CLAMP (j_int0 (h, "pos"), 0, (gint64) self->n_train - 1);
  if (self->residual)
    memset (self->residual, 0, self->n * sizeof (float));
  hx = hash_hex (hash);
  o = event_new ("snapshot");
  json_object_set_string_member (o, "from", p->id);
  json_object_set_int_member (o, "step", (gint64) step);
  json_object_set_string_member (o, "hash", hx);
  json_object_set_string_member (o, "reason", "a member was ahead of the new leader");
  event_emit (self, o);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_STEP]);
  if (self->steps > 0 && self->applied >= self->steps)
    finish (self, TRUE, "all steps committed");
  else
    leader_publish (self, FALSE);
}

static void
on_grad (RlxCoordinator *self, Peer *p, JsonObject *h, const float *values, gsize n)
{
  guint64 term = (guint64) MAX (0, j_int0 (h, "term"));
  guint64 step = (guint64) MAX (0, j_int0 (h, "step"));
  guint64 hash = 0;
  double loss = NAN;

  if (self->role != ROLE_LEADER || term != self->term)
    return;
  if (!parse_hash (j_str (h, "hash"), &hash))
    hash = ~self->hash;
  if (j_num (h, "loss", &loss) && json_object_has_member (h, "loss_finite") &&
      !j_bool (h, "loss_finite"))
    loss = NAN;
  accept_grad (self, p->id, step, (guint) CLAMP (j_int0 (h, "samples"), 0, G_MAXINT),
               loss, hash, j_int0 (h, "compute_us"), values, values ? n : 0);
}

static void
peer_gone (RlxCoordinator *self, Peer *p, const char *reason)
{
  g_autofree char *id = g_strdup (p->hello && !p->refused ? p->id : NULL);

  g_clear_signal_handler (&p->frame_id, p->link);
  g_clear_signal_handler (&p->closed_id, p->link);
  g_ptr_array_remove (self->peers, p);   /* frees p */
  if (id == NULL || self->role == ROLE_STOPPED)
    return;

  if (self->role == ROLE_LEADER)
    {
      if (str_array_remove (self->members, id))
        {
          emit_member_left (self, id, reason);
          roster_rebuild (self);
          for (guint i = 0; self->round_active && i < self->slots->len; i++)
            {
              Slot *s = &g_array_index (self->slots, Slot, i);
              if (s->pending && strcmp (s->id, id) == 0)
                s->pending = FALSE;
            }
          check_round_complete (self);
        }
    }
  else if (g_strcmp0 (id, self->leader) == 0)
    leader_lost (self, reason);
  else if (str_array_contains (self->members, id))
    roster_rebuild (self);
}

static void
on_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  Peer *p = peer_by_link (self, link);
  g_autoptr(JsonObject) h = NULL;
  g_autofree float *values = NULL;
  g_autoptr(GError) error = NULL;
  RlxWireInfo info;
  const char *t;
  const float *vals = NULL;
  gint64 t0 = g_get_monotonic_time ();

  if (p == NULL || p->refused)
    return;
  p->last_rx = t0;
  /* Validate and parse the header; the array is read in place: f32 straight
   * from the frame (no copy), other formats dequantised into a reused buffer. */
  gint64 prof_t = t0;
  if (!rlx_wire_decode_full (frame, NULL, &info, &h, NULL, &error))
    {
      g_autofree char *msg = g_strdup_printf ("undecodable frame from %s: %s",
                                              p->id ? p->id : rlx_link_get_peer (link),
                                              error->message);
      emit_error (self, msg);
      return;
    }
  if (info.has_values && info.n > 0)
    {
      gsize len;
      const guint8 *data = g_bytes_get_data (frame, &len);
      const guint8 *payload = data + len - info.n * rlx_precision_element_size (info.precision);

      if (G_BYTE_ORDER == G_LITTLE_ENDIAN && info.precision == RLX_PRECISION_F32 &&
          ((guintptr) payload % G_ALIGNOF (float)) == 0)
        vals = (const float *) payload;
      else
        {
          float *dst = info.n == self->n ? self->rx_buf : (values = g_new (float, info.n));
          rlx_wire_dequantize (payload, info.n, info.precision, info.scale, dst);
          vals = dst;
        }
    }
  rlx_wire_counters_add_rx_info (&p->counters, &self->totals, &info);
  PROF (0);
  t = j_str (h, "t");
  if (t == NULL)
    return;

  if (strcmp (t, "hello") == 0)
    on_hello (self, p, h);
  else if (!p->hello)
    ;   /* nothing before hello */
  else if (strcmp (t, "step") == 0)
    on_step_msg (self, p, h, vals, info.n);
  else if (strcmp (t, "grad") == 0)
    on_grad (self, p, h, vals, info.n);
  else if (strcmp (t, "heartbeat") == 0)
    ;
  else if (strcmp (t, "snapshot") == 0)
    on_snapshot (self, p, h, vals, info.n);
  else if (strcmp (t, "join") == 0)
    {
      const char *reason = j_str (h, "reason") ? j_str (h, "reason") : "join";
      /* A repeated plain join from a member that is in step with us (its
       * snapshot crossed its retry) changes nothing: ignore it, or its
       * slice of the round in flight would be written off. */
      if (self->role == ROLE_LEADER && !self->finished &&
          !(strcmp (reason, "join") == 0 && str_array_contains (self->members, p->id) &&
            (guint64) j_int0 (h, "step") == self->applied))
        leader_admit (self, p, reason);
    }
  else if (strcmp (t, "leader") == 0)
    on_leader_msg (self, p, h);
  else if (strcmp (t, "reject") == 0)
    {
      JsonObject *o = event_new ("rejected");
      json_object_set_string_member (o, "node", self->node_id);
      json_object_set_int_member (o, "step", j_int0 (h, "step"));
      json_object_set_string_member (o, "reason", j_str (h, "reason") ? j_str (h, "reason") : "");
      json_object_set_string_member (o, "by", p->id);
      event_emit (self, o);
    }
  else if (strcmp (t, "refuse") == 0)
    {
      JsonObject *o = event_new ("refused");
      const char *reason = j_str (h, "reason") ? j_str (h, "reason") : "refused";
      json_object_set_string_member (o, "node", self->node_id);
      json_object_set_string_member (o, "reason", reason);
      json_object_set_string_member (o, "by", p->id);
      event_emit (self, o);
      p->refused = TRUE;
    }
  else if (strcmp (t, "bye") == 0)
    {
      g_free (p->close_reason);
      p->close_reason = g_strdup_printf ("bye (%s)", j_str (h, "reason") ? j_str (h, "reason") : "left");
      rlx_link_close (link);
    }
  self->busy_us_round += g_get_monotonic_time () - t0;
}

static void
on_link_closed (RlxLink *link, const GError *error, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  Peer *p = peer_by_link (self, link);
  g_autofree char *reason = NULL;

  if (p == NULL)
    return;
  /* A peer closed on us (no bye, not our heartbeat) right after our own
   * loop stood still past the heartbeat timeout: the cohort timed *us* out
   * and went on without us. Taking over (as a member) or carrying on (as
   * the leader) would split the cohort; stop and say so instead. */
  if (p->close_reason == NULL && p->hello && !p->refused &&
      (self->role == ROLE_MEMBER || self->role == ROLE_LEADER) &&
      str_array_contains (self->members, p->id))
    {
      gint64 now = g_get_monotonic_time ();
      gint64 limit = (gint64) self->heartbeat_timeout_ms * 1000;
      if (now - self->last_tick > limit ||
          (self->stalled_at > 0 && now - self->stalled_at < 2 * limit))
        {
          g_autofree char *msg = g_strdup_printf (
            "this node stood still longer than the heartbeat timeout (%u ms) and the cohort "
            "went on without it; start it again to rejoin", self->heartbeat_timeout_ms);
          finish (self, FALSE, msg);
          return;
        }
    }
  if (p->close_reason)
    reason = g_strdup (p->close_reason);
  else if (error && error->domain == RLX_LINK_ERROR && error->code == RLX_LINK_ERROR_CLOSED)
    reason = g_strdup ("link closed");
  else
    reason = g_strdup_printf ("link failed: %s", error ? error->message : "unknown");
  peer_gone (self, p, reason);
}

static void
peer_free (gpointer data)
{
  Peer *p = data;

  if (p->link)
    {
      g_clear_signal_handler (&p->frame_id, p->link);
      g_clear_signal_handler (&p->closed_id, p->link);
    }
  g_clear_object (&p->sender);
  g_clear_object (&p->link);
  g_free (p->id);
  g_free (p->host);
  g_free (p->backend);
  g_free (p->device);
  g_free (p->fallback);
  g_free (p->leader);
  g_free (p->close_reason);
  g_free (p);
}

void
rlx_coordinator_add_link (RlxCoordinator *self, RlxLink *link)
{
  Peer *p;

  g_return_if_fail (RLX_IS_COORDINATOR (self));
  g_return_if_fail (RLX_IS_LINK (link));

  if (self->role == ROLE_STOPPED || rlx_link_is_closed (link))
    return;
  p = g_new0 (Peer, 1);
  p->self = self;
  p->link = g_object_ref (link);
  p->sender = rlx_sender_new (link, 4, 0, 64);
  p->last_rx = g_get_monotonic_time ();
  g_ptr_array_add (self->peers, p);
  p->frame_id = g_signal_connect (link, "frame", G_CALLBACK (on_frame), self);
  p->closed_id = g_signal_connect (link, "closed", G_CALLBACK (on_link_closed), self);
  send_hello (self, p);
}

/* ── heartbeat ──────────────────────────────────────────────────────────── */

static gboolean
on_heartbeat (gpointer user_data)
{
  RlxCoordinator *self = user_data;
  g_autoptr(JsonObject) m = msg_new (self, "heartbeat");
  gint64 now = g_get_monotonic_time ();
  g_autoptr(GPtrArray) dead = g_ptr_array_new_with_free_func (g_object_unref);

  json_object_set_int_member (m, "term", (gint64) self->term);
  json_object_set_int_member (m, "step", (gint64) self->applied);
  /* Our own loop stood still (the process was stopped, or starved): the
   * silence we would see is ours, not the peers'. */
  if (self->last_tick > 0 && now - self->last_tick > (gint64) self->heartbeat_timeout_ms * 1000)
    {
      self->stalled_at = now;
      for (guint i = 0; i < self->peers->len; i++)
        ((Peer *) g_ptr_array_index (self->peers, i))->last_rx = now;
    }
  self->last_tick = now;
  for (guint i = 0; i < self->peers->len; i++)
    {
      Peer *p = g_ptr_array_index (self->peers, i);
      if (p->refused)
        continue;
      send_control (self, p, m);
      if (now - p->last_rx > (gint64) self->heartbeat_timeout_ms * 1000)
        {
          g_free (p->close_reason);
          p->close_reason = g_strdup_printf ("heartbeat timeout (silent for %.1f s)",
                                             (now - p->last_rx) / 1e6);
          g_ptr_array_add (dead, g_object_ref (p->link));
        }
    }
  for (guint i = 0; i < dead->len; i++)
    rlx_link_close (g_ptr_array_index (dead, i));
  notify_bytes (self);
  return G_SOURCE_CONTINUE;
}

/* ── checkpoint ─────────────────────────────────────────────────────────── */

char *
rlx_checkpoint_path_for_cohort (const char *cohort)
{
  g_return_val_if_fail (cohort != NULL, NULL);
  return g_build_filename (g_get_user_data_dir (), "rlx-cluster", cohort,
                           "checkpoint.safetensors", NULL);
}

static void
on_checkpoint_written (GObject *source, GAsyncResult *result, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  g_autoptr(GError) error = NULL;

  if (!rlx_safetensors_write_finish (result, &error))
    {
      if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
        {
          g_object_unref (self);
          return;
        }
      g_autofree char *msg = g_strdup_printf ("checkpoint not written: %s", error->message);
      emit_error (self, msg);
    }
  else
    {
      JsonObject *o = event_new ("checkpoint");
      json_object_set_int_member (o, "step", (gint64) self->checkpoint_step);
      json_object_set_string_member (o, "path", self->checkpoint_path);
      event_emit (self, o);
    }
  self->checkpoint_busy = FALSE;
  if (self->checkpoint_again)
    {
      self->checkpoint_again = FALSE;
      checkpoint_now (self);
    }
  else if (self->finish_after_checkpoint && !self->finished)
    finish (self, TRUE, "all steps committed");
  if (self->leave_id != 0)
    self->leave_deadline = MIN (self->leave_deadline, g_get_monotonic_time () + 1000000);
  g_object_unref (self);
}

static void
checkpoint_now (RlxCoordinator *self)
{
  g_autoptr(GHashTable) md = NULL;

  if (self->checkpoint_busy)
    {
      /* One write at a time; the final one is written after the current. */
      if (self->finish_after_checkpoint)
        self->checkpoint_again = TRUE;
      return;
    }
  md = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, g_free);
  g_hash_table_insert (md, "format", g_strdup ("rlx-cluster checkpoint 1"));
  g_hash_table_insert (md, "cohort", g_strdup (self->cohort));
  g_hash_table_insert (md, "model", g_strdup (self->model->slug));
  g_hash_table_insert (md, "dataset", g_strdup (rlx_dataset_slug (self->dataset)));
  g_hash_table_insert (md, "step", g_strdup_printf ("%" G_GUINT64_FORMAT, self->applied));
  g_hash_table_insert (md, "epoch", g_strdup_printf ("%u", self->round_epoch));
  g_hash_table_insert (md, "pos", g_strdup_printf ("%u", self->round_pos));
  g_hash_table_insert (md, "hash", hash_hex (self->hash));
  g_hash_table_insert (md, "seed", g_strdup_printf ("%" G_GUINT64_FORMAT, self->seed));
  g_hash_table_insert (md, "lr", g_strdup_printf ("%g", self->lr));
  self->checkpoint_busy = TRUE;
  self->checkpoint_step = self->applied;
  rlx_safetensors_write_async (self->checkpoint_path, self->model, self->params, md,
                               self->cancellable, on_checkpoint_written, g_object_ref (self));
}

static gboolean
md_uint (GHashTable *md, const char *key, guint64 max, guint64 *out)
{
  const char *s = g_hash_table_lookup (md, key);

  return s != NULL && g_ascii_string_to_unsigned (s, 10, 0, max, out, NULL);
}

/* Load the cohort's checkpoint, if any, for when this node founds. */
static gboolean
load_checkpoint (RlxCoordinator *self, GError **error)
{
  g_autoptr(GHashTable) md = NULL;
  g_autoptr(GError) local = NULL;
  g_autofree float *params = NULL;
  guint64 step, epoch, pos, hash, seed;

  params = rlx_safetensors_read (self->checkpoint_path, self->model, &md, &local);
  if (params == NULL)
    {
      if (g_error_matches (local, RLX_SAFETENSORS_ERROR, RLX_SAFETENSORS_ERROR_NOT_FOUND))
        return TRUE;
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_CHECKPOINT,
                   "the checkpoint of cohort %s cannot be resumed: %s (use another --cohort "
                   "name, or remove the file)", self->cohort, local->message);
      return FALSE;
    }
  if (g_strcmp0 (g_hash_table_lookup (md, "model"), self->model->slug) != 0 ||
      g_strcmp0 (g_hash_table_lookup (md, "dataset"), rlx_dataset_slug (self->dataset)) != 0)
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_CHECKPOINT,
                   "the checkpoint %s holds %s on %s, not %s on %s (use another --cohort name)",
                   self->checkpoint_path,
                   (char *) g_hash_table_lookup (md, "model"),
                   (char *) g_hash_table_lookup (md, "dataset"),
                   self->model->slug, rlx_dataset_slug (self->dataset));
      return FALSE;
    }
  if (!md_uint (md, "step", G_MAXUINT64, &step) ||
      !md_uint (md, "epoch", G_MAXUINT, &epoch) ||
      !md_uint (md, "pos", self->n_train, &pos) ||
      !md_uint (md, "seed", G_MAXUINT64, &seed) ||
      !parse_hash (g_hash_table_lookup (md, "hash"), &hash) ||
      rlx_params_hash (params, self->n) != hash)
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_CHECKPOINT,
                   "the checkpoint %s has missing or inconsistent metadata (step, epoch, pos, "
                   "seed, hash); remove it or use another --cohort name", self->checkpoint_path);
      return FALSE;
    }
  self->resume_params = g_steal_pointer (&params);
  self->resume_step = step;
  self->resume_epoch = (guint) epoch;
  self->resume_pos = (guint) (pos >= self->n_train ? 0 : pos);
  self->seed = seed;
  return TRUE;
}

/* ── finishing and leaving ──────────────────────────────────────────────── */

static void
finish (RlxCoordinator *self, gboolean success, const char *message)
{
  JsonObject *o;
  g_autofree char *h = NULL;

  if (self->finished)
    return;
  commit_event_flush (self);
  self->finished = TRUE;
  self->finish_success = success;
  self->finish_message = g_strdup (message);
  g_clear_handle_id (&self->deadline_id, g_source_remove);
  g_clear_handle_id (&self->found_id, g_source_remove);
  g_clear_handle_id (&self->join_id, g_source_remove);
  self->round_active = FALSE;
  self->task_pending = FALSE;

  h = hash_hex (self->hash);
  o = event_new ("done");
  json_object_set_string_member (o, "node", self->node_id);
  json_object_set_boolean_member (o, "success", success);
  json_object_set_string_member (o, "message", message);
  json_object_set_int_member (o, "step", (gint64) self->applied);
  json_object_set_string_member (o, "hash", h);
  json_object_set_double_member (o, "loss", self->loss);
  json_object_set_int_member (o, "late", (gint64) self->late_total);
  json_object_set_int_member (o, "rejected", (gint64) self->rejected_total);
  if (self->stat_rounds > 0)
    {
      double r = (double) self->stat_rounds;
      json_object_set_int_member (o, "rounds_measured", (gint64) self->stat_rounds);
      json_object_set_double_member (o, "round_ms", self->stat_round_us / r / 1000.0);
      json_object_set_double_member (o, "compute_ms", self->stat_compute_us / r / 1000.0);
      json_object_set_double_member (o, "coordinator_ms", self->stat_busy_us / r / 1000.0);
      json_object_set_double_member (o, "send_ms", self->stat_send_us / r / 1000.0);
    }
  json_object_set_int_member (o, "bytes_tx", (gint64) self->totals.tx_bytes);
  json_object_set_int_member (o, "bytes_rx", (gint64) self->totals.rx_bytes);
  json_object_set_int_member (o, "bytes_f32",
                              (gint64) (self->totals.tx_f32_bytes + self->totals.rx_f32_bytes));
  if (self->rounds_measured > 0)
    {
      /* Per round, ms: decode, accumulate, mean, encode, apply, send,
       * assign+submit, hash+report. */
      JsonArray *a = json_array_new ();
      for (guint k = 0; k < G_N_ELEMENTS (self->prof_us); k++)
        json_array_add_double_element (a, self->prof_us[k] / 1000.0 / self->rounds_measured);
      json_object_set_array_member (o, "profile_ms", a);
    }
  event_emit (self, o);
  g_signal_emit (self, signals[SIG_FINISHED], 0, success, message);
}

static gboolean
on_leave_poll (gpointer user_data)
{
  RlxCoordinator *self = user_data;
  gboolean flushed = !self->checkpoint_busy;
  GCallback cb;

  for (guint i = 0; flushed && i < self->peers->len; i++)
    {
      Peer *p = g_ptr_array_index (self->peers, i);
      if (rlx_sender_get_depth (p->sender) > 0 || rlx_link_pending_bytes (p->link) > 0)
        flushed = FALSE;
    }
  if (!flushed && g_get_monotonic_time () < self->leave_deadline)
    return G_SOURCE_CONTINUE;
  self->leave_id = 0;
  cb = self->leave_cb;
  self->leave_cb = NULL;
  if (cb)
    ((void (*) (gpointer)) cb) (self->leave_data);
  return G_SOURCE_REMOVE;
}

void
rlx_coordinator_leave (RlxCoordinator *self, const char *reason, GCallback callback,
                       gpointer user_data)
{
  g_autoptr(JsonObject) m = NULL;

  g_return_if_fail (RLX_IS_COORDINATOR (self));

  if (!self->finished)
    finish (self, TRUE, reason ? reason : "left");
  m = msg_new (self, "bye");
  json_object_set_string_member (m, "reason", reason ? reason : "left");
  broadcast_control (self, m);
  set_role (self, ROLE_STOPPED);
  g_clear_handle_id (&self->heartbeat_id, g_source_remove);
  self->leave_cb = callback;
  self->leave_data = user_data;
  /* Wait for the bye (and a final checkpoint) to reach the wire. */
  self->leave_deadline = g_get_monotonic_time () + (self->checkpoint_busy ? 10000000 : 1000000);
  if (self->leave_id == 0)
    self->leave_id = g_timeout_add (5, on_leave_poll, self);
}

/* ── GObject ────────────────────────────────────────────────────────────── */

static void
rlx_coordinator_dispose (GObject *object)
{
  RlxCoordinator *self = RLX_COORDINATOR (object);

  g_cancellable_cancel (self->cancellable);
  g_clear_handle_id (&self->deadline_id, g_source_remove);
  g_clear_handle_id (&self->found_id, g_source_remove);
  g_clear_handle_id (&self->join_id, g_source_remove);
  g_clear_handle_id (&self->heartbeat_id, g_source_remove);
  g_clear_handle_id (&self->leave_id, g_source_remove);
  g_clear_handle_id (&self->commit_event.poll_id, g_source_remove);
  g_clear_pointer (&self->commit_event.contributors, g_ptr_array_unref);
  /* No worker callback after this. */
  g_clear_pointer (&self->worker, rlx_worker_free);
  if (self->peers)
    g_ptr_array_set_size (self->peers, 0);
  g_clear_object (&self->roster);
  G_OBJECT_CLASS (rlx_coordinator_parent_class)->dispose (object);
}

static void
rlx_coordinator_finalize (GObject *object)
{
  RlxCoordinator *self = RLX_COORDINATOR (object);

  g_clear_object (&self->cancellable);
  g_clear_pointer (&self->peers, g_ptr_array_unref);
  g_clear_pointer (&self->members, g_ptr_array_unref);
  g_clear_pointer (&self->contributors, g_ptr_array_unref);
  g_clear_pointer (&self->slots, g_array_unref);
  g_clear_pointer (&self->grad_fb, rlx_wire_feedback_free);
  g_clear_pointer (&self->dataset, rlx_dataset_unref);
  g_free (self->cohort);
  g_free (self->node_id);
  g_free (self->host);
  g_free (self->checkpoint_dir);
  g_free (self->checkpoint_path);
  g_free (self->resume_params);
  g_clear_error (&self->checkpoint_error);
  g_free (self->leader);
  g_free (self->params);
  g_free (self->perm);
  g_free (self->scratch);
  g_free (self->rx_buf);
  g_free (self->update_buf);
  g_free (self->sum);
  g_free (self->residual);
  g_free (self->finish_message);
  G_OBJECT_CLASS (rlx_coordinator_parent_class)->finalize (object);
}

static void
rlx_coordinator_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  RlxCoordinator *self = RLX_COORDINATOR (object);

  switch (id)
    {
    case PROP_NODE_ID: g_value_set_string (value, self->node_id); break;
    case PROP_ROLE: g_value_set_string (value, role_names[self->role]); break;
    case PROP_LEADER: g_value_set_string (value, self->leader); break;
    case PROP_TERM: g_value_set_uint64 (value, self->term); break;
    case PROP_STEP: g_value_set_uint64 (value, self->applied); break;
    case PROP_LOSS: g_value_set_double (value, self->loss); break;
    case PROP_MEMBERS: g_value_set_uint (value, self->members->len); break;
    case PROP_BYTES_TX: g_value_set_uint64 (value, self->totals.tx_bytes); break;
    case PROP_BYTES_RX: g_value_set_uint64 (value, self->totals.rx_bytes); break;
    case PROP_BYTES_F32:
      g_value_set_uint64 (value, self->totals.tx_f32_bytes + self->totals.rx_f32_bytes);
      break;
    case PROP_ROSTER: g_value_set_object (value, self->roster); break;
    case PROP_COHORT: g_value_set_string (value, self->cohort); break;
    case PROP_PRECISION: g_value_set_string (value, rlx_precision_to_string (self->precision)); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_coordinator_set_property (GObject *object, guint id, const GValue *value, GParamSpec *pspec)
{
  RlxCoordinator *self = RLX_COORDINATOR (object);
  RlxPrecision p;

  switch (id)
    {
    case PROP_PRECISION:
      if (rlx_precision_from_string (g_value_get_string (value), &p, NULL))
        rlx_coordinator_set_precision (self, p);
      else
        g_warning ("unknown wire precision '%s'", g_value_get_string (value));
      break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_coordinator_class_init (RlxCoordinatorClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags f = G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;

  object_class->dispose = rlx_coordinator_dispose;
  object_class->finalize = rlx_coordinator_finalize;
  object_class->get_property = rlx_coordinator_get_property;
  object_class->set_property = rlx_coordinator_set_property;

  props[PROP_NODE_ID] = g_param_spec_string ("node-id", NULL, NULL, NULL, f);
  props[PROP_ROLE] = g_param_spec_string ("role", NULL, NULL, NULL, f);
  props[PROP_LEADER] = g_param_spec_string ("leader", NULL, NULL, NULL, f);
  props[PROP_TERM] = g_param_spec_uint64 ("term", NULL, NULL, 0, G_MAXUINT64, 0, f);
  props[PROP_STEP] = g_param_spec_uint64 ("step", NULL, NULL, 0, G_MAXUINT64, 0, f);
  props[PROP_LOSS] = g_param_spec_double ("loss", NULL, NULL, -G_MAXDOUBLE, G_MAXDOUBLE, 0, f);
  props[PROP_MEMBERS] = g_param_spec_uint ("members", NULL, NULL, 0, G_MAXUINT, 0, f);
  props[PROP_BYTES_TX] = g_param_spec_uint64 ("bytes-tx", NULL, NULL, 0, G_MAXUINT64, 0, f);
  props[PROP_BYTES_RX] = g_param_spec_uint64 ("bytes-rx", NULL, NULL, 0, G_MAXUINT64, 0, f);
  props[PROP_BYTES_F32] = g_param_spec_uint64 ("bytes-f32", NULL, NULL, 0, G_MAXUINT64, 0, f);
  props[PROP_ROSTER] = g_param_spec_object ("roster", NULL, NULL, G_TYPE_LIST_MODEL, f);
  props[PROP_COHORT] = g_param_spec_string ("cohort", NULL, NULL, NULL, f);
  props[PROP_PRECISION] = g_param_spec_string ("precision", NULL, NULL, "f32",
                                               G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY |
                                               G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, props);

  signals[SIG_EVENT] = g_signal_new ("event", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                     0, NULL, NULL, NULL, G_TYPE_NONE, 1,
                                     JSON_TYPE_OBJECT | G_SIGNAL_TYPE_STATIC_SCOPE);
  signals[SIG_FINISHED] = g_signal_new ("finished", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                        0, NULL, NULL, NULL, G_TYPE_NONE, 2,
                                        G_TYPE_BOOLEAN, G_TYPE_STRING);
}

static void
rlx_coordinator_init (RlxCoordinator *self)
{
  self->peers = g_ptr_array_new_with_free_func (peer_free);
  self->members = g_ptr_array_new_with_free_func (g_free);
  self->contributors = g_ptr_array_new_with_free_func (g_free);
  self->slots = g_array_new (FALSE, TRUE, sizeof (Slot));
  g_array_set_clear_func (self->slots, slot_clear);
  self->roster = g_list_store_new (RLX_TYPE_ROSTER_ENTRY);
  self->cancellable = g_cancellable_new ();
}

RlxCoordinator *
rlx_coordinator_new (const RlxCoordinatorConfig *config, RlxWorker *worker, GError **error)
{
  g_autoptr(RlxCoordinator) self = NULL;
  RlxBackend *backend;

  g_return_val_if_fail (config != NULL, NULL);
  g_return_val_if_fail (worker != NULL, NULL);

  self = g_object_new (RLX_TYPE_COORDINATOR, NULL);
  self->worker = worker;
  backend = rlx_worker_backend (worker);
  self->model = rlx_backend_model (backend);
  self->dataset = rlx_dataset_ref (rlx_backend_dataset (backend));
  self->n = self->model->n_params;
  self->n_train = rlx_dataset_size (self->dataset, RLX_SPLIT_TRAIN);

  if (config->cohort == NULL || *config->cohort == '\0')
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_INVALID,
                   "a cohort needs a name");
      return NULL;
    }
  if (config->batch == 0 || config->batch > rlx_backend_max_batch (backend))
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_INVALID,
                   "batch %u is outside 1..%u", config->batch, rlx_backend_max_batch (backend));
      return NULL;
    }
  if (!(config->lr > 0) || !isfinite (config->lr))
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_INVALID,
                   "learning rate %g is not a positive number", config->lr);
      return NULL;
    }
  self->cohort = g_strdup (config->cohort);
  self->node_id = config->node_id ? g_strdup (config->node_id)
                                  : g_strdup_printf ("n%d-%08x", (int) getpid (), g_random_int ());
  self->host = g_strdup (config->host ? config->host : g_get_host_name ());
  self->precision = config->precision;
  self->error_feedback = config->error_feedback;
  self->batch = config->batch;
  self->lr = config->lr;
  self->seed = config->seed;
  self->steps = config->steps;
  self->checkpoint_every = config->checkpoint_every;
  self->checkpoint_dir = config->checkpoint_dir
    ? g_strdup (config->checkpoint_dir)
    : g_build_filename (g_get_user_data_dir (), "rlx-cluster", self->cohort, NULL);
  self->checkpoint_path = g_build_filename (self->checkpoint_dir, "checkpoint.safetensors", NULL);
  self->wait_members = MAX (1u, config->wait_members);
  self->deadline_floor_ms = config->deadline_floor_ms ? config->deadline_floor_ms : 500;
  self->heartbeat_timeout_ms = config->heartbeat_timeout_ms ? config->heartbeat_timeout_ms : 3000;
  self->fault_nan_from = config->fault_nan_from;
  self->since = g_get_real_time ();

  self->params = g_new (float, self->n);
  self->scratch = g_new (float, self->n);
  self->rx_buf = g_new (float, self->n);
  self->update_buf = g_new (float, self->n);
  self->sum = g_new0 (float, self->n);
  self->perm = g_new (guint32, self->n_train);
  if (self->error_feedback && self->precision != RLX_PRECISION_F32)
    {
      self->residual = g_new0 (float, self->n);
      self->grad_fb = rlx_wire_feedback_new (self->n);
    }

  /* Only a founder resumes; a node that joins a running cohort does not
   * care what the folder holds, so an unusable checkpoint only stops us
   * from founding (see on_found_timer). */
  load_checkpoint (self, &self->checkpoint_error);
  rlx_model_init_params (self->model, self->seed, self->params);
  rehash (self);
  if (g_mkdir_with_parents (self->checkpoint_dir, 0700) != 0)
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_CHECKPOINT,
                   "cannot create the checkpoint folder %s: %s", self->checkpoint_dir,
                   g_strerror (errno));
      return NULL;
    }
  return g_steal_pointer (&self);
}

void
rlx_coordinator_start (RlxCoordinator *self)
{
  g_return_if_fail (RLX_IS_COORDINATOR (self));
  g_return_if_fail (self->found_id == 0 && self->heartbeat_id == 0);

  self->found_id = g_timeout_add (DISCOVERY_MS, on_found_timer, self);
  self->heartbeat_id = g_timeout_add (HEARTBEAT_MS, on_heartbeat, self);
  self->last_tick = g_get_monotonic_time ();
}

const char *rlx_coordinator_get_node_id (RlxCoordinator *self) { return self->node_id; }
const char *rlx_coordinator_get_role (RlxCoordinator *self) { return role_names[self->role]; }
const char *rlx_coordinator_get_leader (RlxCoordinator *self) { return self->leader; }
guint64 rlx_coordinator_get_term (RlxCoordinator *self) { return self->term; }
guint64 rlx_coordinator_get_step (RlxCoordinator *self) { return self->applied; }
double rlx_coordinator_get_loss (RlxCoordinator *self) { return self->loss; }
GListModel *rlx_coordinator_get_roster (RlxCoordinator *self) { return G_LIST_MODEL (self->roster); }
const char *rlx_coordinator_get_checkpoint_path (RlxCoordinator *self) { return self->checkpoint_path; }
const char *rlx_coordinator_get_cohort (RlxCoordinator *self) { return self->cohort; }
RlxPrecision rlx_coordinator_get_precision (RlxCoordinator *self) { return self->precision; }
guint64 rlx_coordinator_get_bytes_tx (RlxCoordinator *self) { return self->totals.tx_bytes; }
guint64 rlx_coordinator_get_bytes_rx (RlxCoordinator *self) { return self->totals.rx_bytes; }
guint64
rlx_coordinator_get_bytes_f32 (RlxCoordinator *self)
{
  return self->totals.tx_f32_bytes + self->totals.rx_f32_bytes;
}

void
rlx_coordinator_set_precision (RlxCoordinator *self, RlxPrecision precision)
{
  JsonObject *o;

  g_return_if_fail (RLX_IS_COORDINATOR (self));
  g_return_if_fail ((guint) precision < RLX_PRECISION_COUNT);

  if (self->precision == precision)
    return;
  self->precision = precision;
  /* Error feedback state for a quantised stream: a fresh residual. */
  if (self->error_feedback && precision != RLX_PRECISION_F32)
    {
      if (self->residual == NULL)
        self->residual = g_new0 (float, self->n);
      if (self->grad_fb == NULL)
        self->grad_fb = rlx_wire_feedback_new (self->n);
    }
  o = event_new ("precision");
  json_object_set_string_member (o, "node", self->node_id);
  json_object_set_string_member (o, "precision", rlx_precision_to_string (precision));
  event_emit (self, o);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_PRECISION]);
  roster_rebuild (self);
}

const float *
rlx_coordinator_get_params (RlxCoordinator *self, gsize *n_params)
{
  g_return_val_if_fail (RLX_IS_COORDINATOR (self), NULL);
  if (n_params)
    *n_params = self->n;
  return self->params;
}
