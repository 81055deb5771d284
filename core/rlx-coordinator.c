/* rlx-coordinator.c — one node of a cohort: the façade over core/cohort/
 *
 * The protocol is docs/PROTOCOL.md; the pieces it is made of:
 *
 *   RlxPeerSet     links, hello, liveness, heartbeats     (cohort/rlx-peer-set)
 *   RlxMsg         typed messages, parsed once            (cohort/rlx-msg)
 *   RlxLeadership  role, term, leader, members, the rules (cohort/rlx-leadership)
 *   RlxRound       the leader's round and its update      (cohort/rlx-round)
 *   RlxReplica     parameters, apply, hash, history       (cohort/rlx-replica)
 *   RlxCheckpointer the checkpoint file                   (cohort/rlx-checkpointer)
 *   RlxRoster      the roster the GUI shows               (cohort/rlx-roster)
 *   RlxWorker      the rank's compute thread              (rlx-worker)
 *
 * This file only routes messages and makes the protocol's decisions; every
 * pass over a parameter-sized buffer happens on a worker thread (the round,
 * the replica, the compute worker). Role changes go through one function,
 * transition (), which does everything that leaving one role and entering
 * another implies.
 *
 * Per round, as a member: a `step` frame arrives (the commit of step c and
 * the assignment of c+1); the replica applies the update and hashes the
 * result on one thread (then: `ack` to the leader, the "step" event) while
 * the compute worker applies the same update to its resident parameters and
 * computes the gradient of its slice on another (then: `grad`, a frame the
 * worker built at this node's precision). As the leader: the round folds the
 * buckets as they come; when it is complete it builds the next `step` frame
 * (update quantised straight into it) on a thread; the leader sends it,
 * applies it like everyone else, and reports step c once every member has
 * acknowledged it.
 */
#include "rlx-config.h"
#include "rlx-coordinator.h"
#include "rlx-coordinator-private.h"
#include "rlx-safetensors.h"
#include "core/cohort/rlx-checkpointer.h"
#include "core/cohort/rlx-leadership.h"
#include "core/cohort/rlx-msg.h"
#include "core/cohort/rlx-peer-set.h"
#include "core/cohort/rlx-replica.h"
#include "core/cohort/rlx-roster.h"
#include "core/cohort/rlx-round.h"
#include "core/vision/rlx-cpu.h"

#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

G_DEFINE_QUARK (rlx-coordinator-error-quark, rlx_coordinator_error)

G_STATIC_ASSERT (RLX_PROTOCOL_VERSION == RLX_MSG_PROTOCOL_VERSION);

#define DISCOVERY_MS        250
#define FOUND_RETRY_MS      700
#define JOIN_RETRY_MS       1000
#define FIRST_DEADLINE_MS   10000
#define MAX_DEADLINE_MS     30000
/* Commits waiting for acknowledgements, at most; the oldest is reported
 * without the missing ones beyond that. */
#define MAX_PENDING_COMMITS 64

/* One unit of work for the compute worker, in order: load parameters and/or
 * apply an update, then (if assigned) the gradient of a slice. */
typedef struct {
  RlxMsgArray update;
  RlxMsgArray load;
  float      *load_floats;
  guint64     term, step;          /* the assignment; step 0: none */
  guint       epoch, start, count;
  gboolean    accepted_prev;
} Work;

/* A commit the leader published and has not reported yet. */
typedef struct {
  guint64    step, hash;
  gboolean   hash_known;
  double     loss;
  guint64    samples;
  GPtrArray *contributors;
  guint      late, rejected;
  GPtrArray *waiting;              /* members that have not acknowledged it */
  guint      members;              /* the cohort's size when it was published */
  gint64     published;
  gboolean   final;
} Commit;

/* What the leader knows about a member's state. */
typedef struct {
  guint64  step, hash;             /* its last acknowledgement */
  gboolean known;
  RlxMsg   held;                   /* a grad waiting for the ack it builds on */
  gboolean has_held;
} MemberState;

struct _RlxCoordinator {
  GObject          parent_instance;

  /* configuration */
  char            *cohort, *node_id, *host;
  RlxPrecision     precision;
  gboolean         error_feedback;
  guint            batch;
  double           lr;
  guint64          steps;
  guint            checkpoint_every;
  guint            wait_members;
  guint            deadline_floor_ms;
  gboolean         join_only;
  guint64          fault_nan_from, fault_inf_from, fault_hash_at;
  guint64          fault_stall_step, fault_die_at;
  guint            fault_stall_ms;
  guint            evaluate_every;

  RlxWorker       *worker;
  const RlxModel  *model;
  RlxDataset      *dataset;
  gsize            n;

  /* the pieces */
  RlxPeerSet      *peers;
  RlxLeadership   *lead;
  RlxReplica      *replica;
  RlxRound        *round;
  RlxCheckpointer *ckpt;
  RlxRoster       *roster;

  /* the checkpoint found at start, for founding */
  RlxCheckpoint    resume;
  GError          *checkpoint_error;

  /* compute */
  GQueue           work;            /* Work* */
  gboolean         job_running;
  guint64          job_term, job_step;
  gboolean         job_assigned;
  gboolean         worker_loaded;
  guint64          assigned_step[4];  /* this node's share of recent steps (step % 4) */
  guint            assigned_count[4];

  /* member */
  GQueue           inbox;           /* RlxMsg* step frames waiting for the replica */
  guint            inbox_early;     /* how many at its head came before our snapshot */
  gboolean         loading;         /* a snapshot is being loaded */
  guint64          ahead_sent_term;
  guint64          steps_term;      /* term of the last step frame followed */
  guint            unlisted;        /* step frames in a row that left us out */
  guint64          expect_commit;   /* commit being applied (0: none) */
  gboolean         lineage_change;  /* following a leader from outside our cohort */
  GPtrArray       *former_members;  /* ours when we yielded in a merge: told who leads */
  guint64          merge_from_step; /* applied when we yielded */
  guint64          term_base;       /* our step when the current term began */
  char            *merge_rule;

  /* leader */
  guint64          round_step;
  guint            round_epoch, round_pos, round_count;
  gboolean         rounds_started;
  gboolean         finishing_round; /* the update of the round is being made */
  gboolean         round_waiting;   /* complete, waiting for our replica's hash */
  guint            snapshots_out;   /* snapshots being made for members (leader) */
  guint64          last_commit;     /* the newest commit we published (leader) */
  gboolean         publish_waiting; /* a restart of the round waits for it to be applied */
  GPtrArray       *admit_pending;   /* ids admitted while an update was being made */
  GQueue           commits;         /* Commit* */
  GHashTable      *members_state;   /* id → MemberState* */
  double           round_ema_us;
  guint            rounds_measured;
  double           self_speed;
  guint64          late_total, rejected_total;
  char            *merged_reported;

  /* statistics (leader, per round after the first 5) */
  guint64          stat_rounds;
  double           stat_round_us, stat_compute_us, stat_busy_us, stat_send_us;
  guint64          stat_samples;
  gint64           stat_cpu0_us;     /* process CPU time when measuring began */
  gint64           busy_us, send_us;   /* of the round in progress */

  /* timers */
  guint            found_id, join_id;
  guint            found_waits;
  gboolean         waiting_reported;
  gint64           rejoin_until;    /* cut off: no founding before (monotonic µs) */
  GCancellable    *cancellable;
  gboolean         joined_reported;
  gboolean         finish_after_checkpoint;
  gboolean         finished;
  char            *finish_message;
  gboolean         started;

  /* leave */
  GCallback        leave_cb;
  gpointer         leave_data;
  guint            leave_id;
  gint64           leave_deadline;
};

G_DEFINE_FINAL_TYPE (RlxCoordinator, rlx_coordinator, G_TYPE_OBJECT)

enum {
  PROP_0, PROP_NODE_ID, PROP_ROLE, PROP_LEADER, PROP_TERM, PROP_STEP, PROP_LOSS,
  PROP_MEMBERS, PROP_BYTES_TX, PROP_BYTES_RX, PROP_BYTES_F32, PROP_ROSTER, PROP_COHORT,
  PROP_PRECISION, N_PROPS
};
static GParamSpec *props[N_PROPS];

enum { SIG_EVENT, SIG_FINISHED, SIG_DISCOVER, N_SIGNALS };
static guint signals[N_SIGNALS];

static void transition (RlxCoordinator *self, RlxRole role, const char *leader, guint64 term,
                        const char *reason);
static void finish (RlxCoordinator *self, gboolean success, const char *message);
static void leader_publish (RlxCoordinator *self, gboolean commit);
static void work_submit (RlxCoordinator *self);
static void inbox_drain (RlxCoordinator *self);
static void send_snapshot (RlxCoordinator *self, RlxPeer *p, const char *reason);
static void roster_sync (RlxCoordinator *self);
static void maybe_evaluate (RlxCoordinator *self, guint64 step);
static void commits_check (RlxCoordinator *self);
static void maybe_checkpoint (RlxCoordinator *self, gboolean force);
static void send_reject (RlxCoordinator *self, const char *id, guint64 step, const char *reason);

/* CPU time of the whole process (every thread), µs. */
static gint64
process_cpu_us (void)
{
  struct rusage ru;

  if (getrusage (RUSAGE_SELF, &ru) != 0)
    return 0;
  return (gint64) (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
         ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

static void
msg_free (gpointer p)
{
  rlx_msg_clear (p);
  g_free (p);
}

/* CPU time of the calling thread, µs: the main loop's time in a handler,
 * which preemption by other processes on a loaded machine does not
 * inflate (wall time would). */
static gint64
thread_cpu_us (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_THREAD_CPUTIME_ID, &ts);
  return (gint64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Main-loop time of the coordinator's handlers (per round, for "done"). */
#define BUSY_BEGIN gint64 busy_t0 = thread_cpu_us ()
#define BUSY_END (self->busy_us += thread_cpu_us () - busy_t0)

/* ── small helpers ──────────────────────────────────────────────────────── */

static RlxRole
role (RlxCoordinator *self)
{
  return rlx_leadership_get_role (self->lead);
}

static GPtrArray *
members (RlxCoordinator *self)
{
  return rlx_leadership_get_members (self->lead);
}

static gboolean
is_self (RlxCoordinator *self, const char *id)
{
  return g_strcmp0 (id, self->node_id) == 0;
}

static gboolean
is_alive (const char *id, gpointer user_data)
{
  RlxCoordinator *self = user_data;

  return is_self (self, id) || rlx_peer_set_lookup (self->peers, id) != NULL;
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

static GPtrArray *
str_array_copy (GPtrArray *a)
{
  GPtrArray *out = g_ptr_array_new_with_free_func (g_free);

  for (guint i = 0; a && i < a->len; i++)
    g_ptr_array_add (out, g_strdup (g_ptr_array_index (a, i)));
  return out;
}

static guint64
applied (RlxCoordinator *self)
{
  return rlx_replica_get_step (self->replica);
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
set_hash_member (JsonObject *o, const char *name, guint64 hash)
{
  g_autofree char *h = rlx_msg_hash_to_string (hash);
  json_object_set_string_member (o, name, h);
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
  RlxBackend *b = rlx_worker_backend (self->worker);
  JsonObject *o;

  if (self->joined_reported)
    return;
  self->joined_reported = TRUE;
  o = event_new ("joined");
  json_object_set_string_member (o, "node", self->node_id);
  json_object_set_string_member (o, "cohort", self->cohort);
  json_object_set_string_member (o, "role", rlx_role_name (role (self)));
  json_object_set_int_member (o, "step", (gint64) applied (self));
  set_hash_member (o, "hash", rlx_replica_get_hash (self->replica));
  json_object_set_string_member (o, "backend", rlx_backend_name (b));
  json_object_set_string_member (o, "device", rlx_backend_device (b));
  json_object_set_string_member (o, "fallback", rlx_backend_fallback (b));
  json_object_set_string_member (o, "precision", rlx_precision_to_string (self->precision));
  event_emit (self, o);
}

static void
emit_leader (RlxCoordinator *self)
{
  JsonObject *o = event_new ("leader");

  json_object_set_string_member (o, "node", rlx_leadership_get_leader (self->lead));
  json_object_set_int_member (o, "term", (gint64) rlx_leadership_get_term (self->lead));
  json_object_set_int_member (o, "step", (gint64) applied (self));
  event_emit (self, o);
}

static void
emit_member (RlxCoordinator *self, const char *name, const char *id, const char *reason)
{
  JsonObject *o = event_new (name);
  RlxPeer *p = rlx_peer_set_lookup (self->peers, id);

  json_object_set_string_member (o, "node", id);
  if (reason)
    json_object_set_string_member (o, "reason", reason);
  else if (p)
    {
      json_object_set_string_member (o, "host", p->host);
      json_object_set_string_member (o, "backend", p->backend);
      json_object_set_string_member (o, "device", p->device);
      json_object_set_string_member (o, "fallback", p->fallback);
      json_object_set_string_member (o, "precision", rlx_precision_to_string (p->precision));
    }
  json_object_set_int_member (o, "step", (gint64) applied (self));
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
note_assigned (RlxCoordinator *self, guint64 step, guint count)
{
  self->assigned_step[step % 4] = step;
  self->assigned_count[step % 4] = count;
}

static void
emit_step (RlxCoordinator *self, guint64 step, guint64 hash, double loss, guint64 samples,
           GPtrArray *contributors, guint late, guint rejected, guint n_members)
{
  const RlxWireCounters *t = rlx_peer_set_get_totals (self->peers);
  JsonObject *o = event_new ("step");

  json_object_set_int_member (o, "step", (gint64) step);
  json_object_set_double_member (o, "loss", loss);
  json_object_set_string_member (o, "leader", rlx_leadership_get_leader (self->lead));
  json_object_set_int_member (o, "term", (gint64) rlx_leadership_get_term (self->lead));
  json_object_set_int_member (o, "members", n_members);
  json_object_set_int_member (o, "samples", (gint64) samples);
  json_object_set_int_member (o, "assigned",
                              self->assigned_step[step % 4] == step ? self->assigned_count[step % 4] : 0);
  set_hash_member (o, "hash", hash);
  json_object_set_int_member (o, "bytes_tx", (gint64) t->tx_bytes);
  json_object_set_int_member (o, "bytes_rx", (gint64) t->rx_bytes);
  json_object_set_int_member (o, "bytes_f32", (gint64) (t->tx_f32_bytes + t->rx_f32_bytes));
  json_object_set_boolean_member (o, "contributed", str_array_contains (contributors, self->node_id));
  json_object_set_int_member (o, "contributors", contributors ? contributors->len : 0);
  json_object_set_int_member (o, "late", late);
  json_object_set_int_member (o, "rejected", rejected);
  json_object_set_int_member (o, "time_us", g_get_monotonic_time ());
  event_emit (self, o);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_STEP]);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_LOSS]);
  notify_bytes (self);
  if (step % 16 == 0)
    roster_sync (self);
  maybe_evaluate (self, step);
}

/* ── sending ────────────────────────────────────────────────────────────── */

static gboolean
send_msg (RlxCoordinator *self, RlxPeer *p, const RlxMsg *m)
{
  gint64 t0 = thread_cpu_us ();
  gboolean ok = rlx_peer_set_send_msg (self->peers, p, RLX_SEND_CONTROL, m);

  self->send_us += thread_cpu_us () - t0;
  return ok;
}

static gboolean
send_frame (RlxCoordinator *self, RlxPeer *p, RlxSendClass klass, GBytes *frame, gsize n,
            RlxPrecision precision)
{
  gint64 t0 = thread_cpu_us ();
  gboolean ok = rlx_peer_set_send_frame (self->peers, p, klass, frame, n, precision);

  self->send_us += thread_cpu_us () - t0;
  return ok;
}

static void
send_leader_msg (RlxCoordinator *self, RlxPeer *p)
{
  RlxMsg m;

  rlx_msg_init (&m, RLX_MSG_LEADER, self->node_id);
  m.u.leader.leader = g_strdup (rlx_leadership_get_leader (self->lead));
  m.u.leader.term = rlx_leadership_get_term (self->lead);
  m.u.leader.step = applied (self);
  if (p)
    send_msg (self, p, &m);
  else
    rlx_peer_set_broadcast (self->peers, &m);
  rlx_msg_clear (&m);
}

static void
send_join (RlxCoordinator *self, const char *reason)
{
  RlxPeer *lp = rlx_peer_set_lookup (self->peers, rlx_leadership_get_leader (self->lead));
  RlxMsg m;

  if (lp == NULL)
    return;
  rlx_msg_init (&m, RLX_MSG_JOIN, self->node_id);
  m.u.join.reason = g_strdup (reason);
  m.u.join.step = applied (self);
  m.u.join.hash = rlx_replica_get_hash (self->replica);
  m.u.join.merge = self->lineage_change;
  send_msg (self, lp, &m);
  rlx_msg_clear (&m);
}

/* Tell the leader where this node is (after a commit, a snapshot, or when
 * it starts following a new leader). */
static void
send_ack (RlxCoordinator *self)
{
  RlxPeer *lp = rlx_peer_set_lookup (self->peers, rlx_leadership_get_leader (self->lead));
  RlxMsg m;

  if (lp == NULL || role (self) != RLX_ROLE_MEMBER)
    return;
  rlx_msg_init (&m, RLX_MSG_ACK, self->node_id);
  m.u.ack.term = rlx_leadership_get_term (self->lead);
  m.u.ack.step = applied (self);
  m.u.ack.hash = rlx_replica_get_hash (self->replica);
  send_msg (self, lp, &m);
  rlx_msg_clear (&m);
}

/* ── roster ─────────────────────────────────────────────────────────────── */

/* A peer's frames now come at another precision. */
static void
note_precision (RlxCoordinator *self, RlxPeer *p, RlxPrecision precision)
{
  JsonObject *o;

  if (p->precision == precision)
    return;
  p->precision = precision;
  o = event_new ("precision");
  json_object_set_string_member (o, "node", p->id);
  json_object_set_string_member (o, "precision", rlx_precision_to_string (precision));
  event_emit (self, o);
  roster_sync (self);
}

static void
roster_sync (RlxCoordinator *self)
{
  GPtrArray *ids = members (self);
  g_autofree RlxRosterRow *rows = g_new0 (RlxRosterRow, MAX (ids->len, 1));
  RlxBackend *b = rlx_worker_backend (self->worker);
  const RlxWireCounters *t = rlx_peer_set_get_totals (self->peers);
  const char *leader = rlx_leadership_get_leader (self->lead);
  RlxRole r = role (self);

  for (guint i = 0; i < ids->len; i++)
    {
      const char *id = g_ptr_array_index (ids, i);
      RlxRosterRow *row = &rows[i];
      RlxPeer *p = rlx_peer_set_lookup (self->peers, id);

      row->node_id = id;
      row->is_self = is_self (self, id);
      row->is_leader = g_strcmp0 (id, leader) == 0;
      row->state = "computing";
      if (row->is_self)
        {
          row->host = self->host;
          row->backend = rlx_backend_name (b);
          row->device = rlx_backend_device (b);
          row->fallback = rlx_backend_fallback (b);
          row->precision = rlx_precision_to_string (self->precision);
          row->speed = self->self_speed;
          row->bytes_tx = t->tx_bytes;
          row->bytes_rx = t->rx_bytes;
          if (r == RLX_ROLE_JOINING || r == RLX_ROLE_ALONE)
            row->state = "rejoining";
          else if (r == RLX_ROLE_STOPPED)
            row->state = "leaving";
          else if (!self->job_running)
            row->state = "waiting";
        }
      else if (p)
        {
          gint64 silent = g_get_monotonic_time () - p->last_rx;
          row->host = p->host;
          row->backend = p->backend;
          row->device = p->device;
          row->fallback = p->fallback;
          row->precision = rlx_precision_to_string (p->precision);
          row->speed = p->speed;
          /* what the rank sent and received on its link with this node */
          row->bytes_tx = p->counters.rx_bytes;
          row->bytes_rx = p->counters.tx_bytes;
          if (silent > (gint64) rlx_peer_set_timeout_for (self->peers, p) * 500)
            row->state = "stalled";
          else if (p->role == RLX_ROLE_JOINING)
            row->state = "rejoining";
        }
      else
        row->state = "stalled";
    }
  rlx_roster_sync (self->roster, rows, ids->len);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_MEMBERS]);
}

/* Replace the member list with @next (taken), reporting the difference. */
static void
members_replace (RlxCoordinator *self, GPtrArray *next)
{
  GPtrArray *cur = members (self);

  for (guint i = 0; i < cur->len; i++)
    {
      const char *id = g_ptr_array_index (cur, i);
      if (!str_array_contains (next, id) && !is_self (self, id))
        emit_member (self, "member-left", id, "removed by the leader");
    }
  for (guint i = 0; i < next->len; i++)
    {
      const char *id = g_ptr_array_index (next, i);
      if (!str_array_contains (cur, id) && !is_self (self, id))
        emit_member (self, "member-joined", id, NULL);
    }
  rlx_leadership_set_members (self->lead, next);
  roster_sync (self);
}

/* ── compute ────────────────────────────────────────────────────────────── */

static void
work_free (Work *w)
{
  rlx_msg_array_clear (&w->update);
  rlx_msg_array_clear (&w->load);
  g_free (w->load_floats);
  g_free (w);
}

static void
work_clear (RlxCoordinator *self)
{
  Work *w;

  while ((w = g_queue_pop_head (&self->work)))
    work_free (w);
}

/* Queue @w; a new assignment replaces the queued ones (their updates stay:
 * every commit is applied, in order). */
static void
work_push (RlxCoordinator *self, Work *w)
{
  if (w->step > 0)
    for (GList *l = self->work.head; l; l = l->next)
      ((Work *) l->data)->step = 0;
  g_queue_push_tail (&self->work, w);
  work_submit (self);
}

static void
work_assign (RlxCoordinator *self, Work *w, guint64 step, guint epoch, guint start, guint count)
{
  w->term = rlx_leadership_get_term (self->lead);
  w->step = step;
  w->epoch = epoch;
  w->start = start;
  w->count = count;
  note_assigned (self, step, count);
}

static RlxWorkerFault
fault_for (RlxCoordinator *self, guint64 step)
{
  if (self->fault_nan_from > 0 && step >= self->fault_nan_from)
    return RLX_WORKER_FAULT_NAN;
  if (self->fault_inf_from > 0 && step >= self->fault_inf_from)
    return RLX_WORKER_FAULT_INF;
  return RLX_WORKER_FAULT_NONE;
}

static void
on_job_done (RlxWorker *worker, const RlxGradResult *result, const GError *error,
             gpointer user_data)
{
  RlxCoordinator *self = user_data;
  guint64 term = self->job_term, step = self->job_step;
  gboolean assigned = self->job_assigned;
  BUSY_BEGIN;

  self->job_running = FALSE;
  if (role (self) == RLX_ROLE_STOPPED)
    goto out;

  if (error != NULL)
    {
      g_autofree char *msg = g_strdup_printf ("gradient of step %" G_GUINT64_FORMAT " failed: %s",
                                              step, error->message);
      emit_error (self, msg);
      if (rlx_leadership_is_leader (self->lead) && assigned)
        rlx_round_close_slot (self->round, self->node_id);
      if (g_error_matches (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_DEVICE_LOST))
        finish (self, FALSE, msg);
      goto out;
    }
  /* A result for a term or step that is no longer current is stale. */
  if (!assigned || term != rlx_leadership_get_term (self->lead))
    goto out;
  if (result->compute_us > 0)
    {
      double sp = result->n_samples * 1e6 / result->compute_us;
      self->self_speed = self->self_speed > 0 ? 0.7 * self->self_speed + 0.3 * sp : sp;
    }

  if (rlx_leadership_is_leader (self->lead))
    {
      g_autofree char *reason = NULL;
      if (result->refused)
        {
          rlx_round_reject_slot (self->round, self->node_id);
          send_reject (self, self->node_id, step, result->refused);
        }
      else if (rlx_round_offer (self->round, self->node_id, step, result->n_samples, result->loss,
                                result->compute_us, result->grads, NULL, &reason)
               == RLX_ROUND_REJECTED)
        send_reject (self, self->node_id, step, reason);
    }
  else if (role (self) == RLX_ROLE_MEMBER && result->frame)
    {
      RlxPeer *lp = rlx_peer_set_lookup (self->peers, rlx_leadership_get_leader (self->lead));
      if (lp)
        send_frame (self, lp, result->refused ? RLX_SEND_CONTROL : RLX_SEND_BULK, result->frame,
                    result->refused ? 0 : self->n, self->precision);
      if (result->refused)
        {
          g_autofree char *msg = g_strdup_printf ("step %" G_GUINT64_FORMAT ": %s", step,
                                                  result->refused);
          emit_error (self, msg);
        }
    }
out:
  work_submit (self);
  BUSY_END;
}

/* Hand the next unit of work to the worker, if it is free. */
static void
work_submit (RlxCoordinator *self)
{
  g_autoptr(GError) error = NULL;
  RlxWorkerStep job = { 0 };
  RlxMsg header;
  Work *w;
  const guint32 *perm = NULL;
  guint64 term;

  if (self->job_running || role (self) == RLX_ROLE_STOPPED)
    return;
  w = g_queue_pop_head (&self->work);
  if (w == NULL)
    return;
  term = rlx_leadership_get_term (self->lead);
  /* An assignment of another term, or that no longer fits, is dropped; its
   * parameters part still runs. */
  if (w->step > 0 && (w->term != term ||
                      (guint64) w->start + w->count > rlx_replica_get_n_train (self->replica)))
    w->step = 0;
  if (w->step > 0)
    perm = rlx_replica_permutation (self->replica, w->epoch);
  if (w->step == 0 && w->update.frame == NULL && w->load.frame == NULL && w->load_floats == NULL)
    {
      work_free (w);
      work_submit (self);
      return;
    }

  rlx_msg_init (&header, RLX_MSG_GRAD, self->node_id);
  header.u.grad.term = w->term;
  header.u.grad.step = w->step;
  job.load = w->load_floats;
  job.load_array = w->load.frame ? &w->load : NULL;
  job.update = w->update.frame ? &w->update : NULL;
  job.indices = perm ? perm + w->start : NULL;
  job.n = perm ? w->count : 0;
  job.header = rlx_leadership_is_leader (self->lead) ? NULL : &header;
  job.precision = self->precision;
  job.feedback = self->error_feedback;
  job.accepted_prev = w->accepted_prev;
  job.fault = fault_for (self, w->step);
  if (self->fault_stall_step > 0 && w->step == self->fault_stall_step)
    job.stall_us = (guint64) self->fault_stall_ms * 1000;
  if (rlx_worker_submit_step (self->worker, &job, on_job_done, self, &error) == 0)
    {
      if (!g_error_matches (error, RLX_WORKER_ERROR, RLX_WORKER_ERROR_BUSY))
        emit_error (self, error->message);
      else
        g_queue_push_head (&self->work, g_steal_pointer (&w));
      rlx_msg_clear (&header);
      if (w)
        work_free (w);
      return;
    }
  rlx_msg_clear (&header);
  if (w->load_floats || w->load.frame)
    self->worker_loaded = TRUE;
  self->job_running = TRUE;
  self->job_term = w->term;
  self->job_step = w->step;
  self->job_assigned = perm != NULL;
  work_free (w);
}

/* The worker's parameters become the replica's (founding, adopting). */
static void
work_load_from_replica (RlxCoordinator *self)
{
  Work *w = g_new0 (Work, 1);

  w->load_floats = g_memdup2 (rlx_replica_get_params (self->replica), self->n * sizeof (float));
  work_push (self, w);
}

/* ── leader: rounds ─────────────────────────────────────────────────────── */

static guint
member_batch (RlxCoordinator *self, const char *id, guint *max_batch, double *speed)
{
  RlxPeer *p;

  if (is_self (self, id))
    {
      *max_batch = rlx_backend_max_batch (rlx_worker_backend (self->worker));
      *speed = self->self_speed;
      return self->batch;
    }
  p = rlx_peer_set_lookup (self->peers, id);
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

/* This round's slots: the global batch (the sum of the members' --batch)
 * split in proportion to measured speed (to --batch until every speed is
 * measured). Starts are absolute positions in the epoch's permutation. */
static GArray *
leader_assign (RlxCoordinator *self)
{
  GPtrArray *ids = members (self);
  guint k = ids->len;
  g_autofree guint *maxb = g_new0 (guint, MAX (k, 1));
  g_autofree double *w = g_new0 (double, MAX (k, 1));
  g_autofree guint *c = g_new0 (guint, MAX (k, 1));
  GArray *slots = rlx_msg_slots_new ();
  gboolean all_measured = TRUE;
  guint64 global = 0;
  guint count, start = self->round_pos;

  for (guint i = 0; i < k; i++)
    {
      double speed;
      guint b = member_batch (self, g_ptr_array_index (ids, i), &maxb[i], &speed);
      global += b;
      w[i] = speed;
      if (speed <= 0)
        all_measured = FALSE;
    }
  if (!all_measured)
    for (guint i = 0; i < k; i++)
      {
        double speed;
        w[i] = member_batch (self, g_ptr_array_index (ids, i), &maxb[i], &speed);
      }
  count = (guint) MIN (global, (guint64) (rlx_replica_get_n_train (self->replica) - self->round_pos));
  rlx_coordinator_split_batch (count, w, maxb, k, c);
  for (guint i = 0; i < k; i++)
    {
      RlxMsgSlot s = { 0 };
      if (c[i] == 0)
        continue;
      s.node = g_strdup (g_ptr_array_index (ids, i));
      s.start = start;
      s.count = c[i];
      start += c[i];
      g_array_append_val (slots, s);
    }
  self->round_count = start - self->round_pos;
  return slots;
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

/* The step message of the next round (everything but the update). */
static void
step_header (RlxCoordinator *self, RlxMsg *m, guint64 commit, GArray *slots, gboolean final)
{
  rlx_msg_init (m, RLX_MSG_STEP, self->node_id);
  m->u.step.term = rlx_leadership_get_term (self->lead);
  m->u.step.step = (commit ? commit : applied (self)) + 1;
  m->u.step.commit = commit;
  m->u.step.base = rlx_replica_get_hash (self->replica);
  m->u.step.loss = commit ? rlx_round_get_loss (self->round) : 0.0;
  m->u.step.samples = commit ? rlx_round_get_samples (self->round) : 0;
  m->u.step.contributors = str_array_copy (commit ? rlx_round_get_contributors (self->round) : NULL);
  m->u.step.late = commit ? rlx_round_get_late (self->round) : 0;
  m->u.step.rejected = commit ? rlx_round_get_rejected (self->round) : 0;
  m->u.step.lr = self->lr;
  m->u.step.epoch = self->round_epoch;
  m->u.step.pos = self->round_pos;
  m->u.step.count = self->round_count;
  m->u.step.members = str_array_copy (members (self));
  m->u.step.final = final;
  m->u.step.assign = rlx_msg_slots_new ();
  for (guint i = 0; slots && i < slots->len; i++)
    {
      RlxMsgSlot s = g_array_index (slots, RlxMsgSlot, i);
      s.node = g_strdup (s.node);
      g_array_append_val (m->u.step.assign, s);
    }
}

/* Drop the round in flight (and the update being made of it). */
static void
round_abandon (RlxCoordinator *self)
{
  rlx_round_cancel (self->round);
  self->finishing_round = FALSE;
  self->round_waiting = FALSE;
  g_object_set_data (G_OBJECT (self->round), "next-slots", NULL);
}

static void
commit_free (Commit *c)
{
  g_clear_pointer (&c->contributors, g_ptr_array_unref);
  g_clear_pointer (&c->waiting, g_ptr_array_unref);
  g_free (c);
}

static MemberState *
member_state (RlxCoordinator *self, const char *id)
{
  MemberState *ms = g_hash_table_lookup (self->members_state, id);

  if (ms == NULL)
    {
      ms = g_new0 (MemberState, 1);
      g_hash_table_insert (self->members_state, g_strdup (id), ms);
    }
  return ms;
}

static void
member_state_free (gpointer p)
{
  MemberState *ms = p;

  rlx_msg_clear (&ms->held);
  g_free (ms);
}

/* @id has @step (acknowledged, or sent to it in a snapshot). */
static void
member_acked (RlxCoordinator *self, const char *id, guint64 step, guint64 hash)
{
  MemberState *ms = member_state (self, id);

  ms->step = step;
  ms->hash = hash;
  ms->known = TRUE;
  for (GList *l = self->commits.head; l; l = l->next)
    {
      Commit *c = l->data;
      if (c->step <= step)
        str_array_remove (c->waiting, id);
    }
  commits_check (self);
}

/* Report the oldest commits that every member has acknowledged (and the
 * leader has applied), in order. */
static void
commits_check (RlxCoordinator *self)
{
  Commit *c;

  while ((c = g_queue_peek_head (&self->commits)))
    {
      gboolean forced = FALSE;

      /* A member that left is not waited for. */
      for (guint i = c->waiting->len; i > 0; i--)
        if (!rlx_leadership_has_member (self->lead, g_ptr_array_index (c->waiting, i - 1)))
          g_ptr_array_remove_index (c->waiting, i - 1);
      if (!c->hash_known)
        return;
      if (c->waiting->len > 0)
        {
          gint64 limit = 2 * (gint64) rlx_peer_set_get_timeout (self->peers) * 1000;
          if (g_queue_get_length (&self->commits) <= MAX_PENDING_COMMITS &&
              g_get_monotonic_time () - c->published < limit)
            return;
          forced = TRUE;
        }
      g_queue_pop_head (&self->commits);
      for (guint i = 0; forced && i < c->waiting->len; i++)
        {
          JsonObject *o = event_new ("ack-timeout");
          json_object_set_string_member (o, "node", g_ptr_array_index (c->waiting, i));
          json_object_set_int_member (o, "step", (gint64) c->step);
          event_emit (self, o);
        }
      emit_step (self, c->step, c->hash, c->loss, c->samples, c->contributors, c->late,
                 c->rejected, c->members);
      if (c->final)
        {
          self->finish_after_checkpoint = TRUE;
          maybe_checkpoint (self, TRUE);
        }
      else
        maybe_checkpoint (self, FALSE);
      commit_free (c);
      if (self->finished)
        return;
    }
}

static void leader_on_grad (RlxCoordinator *self, RlxPeer *p, RlxMsg *m);
static void leader_finalize (RlxCoordinator *self);

static void
on_leader_replica_applied (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  guint64 step = rlx_replica_get_step (replica);
  BUSY_BEGIN;

  for (GList *l = self->commits.head; l; l = l->next)
    {
      Commit *c = l->data;
      if (c->step == step)
        {
          c->hash = rlx_replica_get_hash (replica);
          c->hash_known = TRUE;
        }
    }
  commits_check (self);
  if (!rlx_leadership_is_leader (self->lead))
    goto out;
  /* Grads held for this hash can be judged now. */
  {
    GHashTableIter it;
    gpointer key, value;
    g_autoptr(GPtrArray) ready = g_ptr_array_new_with_free_func (g_free);

    g_hash_table_iter_init (&it, self->members_state);
    while (g_hash_table_iter_next (&it, &key, &value))
      if (((MemberState *) value)->has_held)
        g_ptr_array_add (ready, g_strdup (key));
    for (guint i = 0; i < ready->len; i++)
      {
        MemberState *ms = g_hash_table_lookup (self->members_state, g_ptr_array_index (ready, i));
        RlxPeer *p = rlx_peer_set_lookup (self->peers, g_ptr_array_index (ready, i));
        RlxMsg m;

        if (ms == NULL || !ms->has_held)
          continue;
        ms->has_held = FALSE;
        rlx_msg_steal (&m, &ms->held);
        if (p)
          leader_on_grad (self, p, &m);
        rlx_msg_clear (&m);
      }
  }
  if (self->round_waiting && applied (self) + 1 == rlx_round_get_step (self->round))
    leader_finalize (self);
  else if (self->publish_waiting && applied (self) >= self->last_commit)
    leader_publish (self, FALSE);
out:
  BUSY_END;
}

static void leader_start_round (RlxCoordinator *self, GArray *slots);
static void admit_flush (RlxCoordinator *self);

/* Test switch (fault_die_at): the commit reaches every member but the one
 * that takes over, then the leader dies — so the new leader is behind a
 * member, deterministically. */
static gboolean
on_die_poll (gpointer user_data)
{
  RlxCoordinator *self = user_data;

  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    if (!rlx_peer_set_is_flushed (self->peers, rlx_peer_set_nth (self->peers, i)))
      return G_SOURCE_CONTINUE;
  kill (getpid (), SIGKILL);
  return G_SOURCE_REMOVE;
}

static void
die_after_partial_commit (RlxCoordinator *self, GBytes *frame)
{
  GPtrArray *ids = members (self);
  const char *successor = NULL;

  for (guint i = 0; i < ids->len && successor == NULL; i++)
    if (!is_self (self, g_ptr_array_index (ids, i)))
      successor = g_ptr_array_index (ids, i);
  for (guint i = 0; i < ids->len; i++)
    {
      const char *id = g_ptr_array_index (ids, i);
      RlxPeer *p = rlx_peer_set_lookup (self->peers, id);
      if (p && g_strcmp0 (id, successor) != 0)
        send_frame (self, p, RLX_SEND_STEP, frame, self->n, self->precision);
    }
  rlx_peer_set_stop (self->peers);
  g_timeout_add (1, on_die_poll, self);
}

static void
on_update_made (RlxRound *round, GBytes *frame, const RlxMsgArray *update, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  guint64 commit = rlx_round_get_step (round);
  GPtrArray *ids = members (self);
  gboolean final;
  Commit *c;
  Work *w;
  BUSY_BEGIN;

  self->finishing_round = FALSE;
  if (!rlx_leadership_is_leader (self->lead) || self->finished)
    goto out;
  if (frame == NULL)
    {
      admit_flush (self);
      /* A bucket turned out bad while the update was made: the totals
       * changed, so the frame is made again (or the step re-run). */
      if (rlx_round_get_samples (round) > 0)
        leader_publish (self, TRUE);
      else
        leader_publish (self, FALSE);
      goto out;
    }
  final = self->steps > 0 && commit >= self->steps;
  if (self->fault_die_at > 0 && commit == self->fault_die_at)
    {
      die_after_partial_commit (self, frame);
      goto out;
    }

  /* To every member; then this node applies exactly what they decode. */
  for (guint i = 0; i < ids->len; i++)
    {
      RlxPeer *p = rlx_peer_set_lookup (self->peers, g_ptr_array_index (ids, i));
      if (p)
        send_frame (self, p, RLX_SEND_STEP, frame, self->n, self->precision);
    }
  rlx_replica_set_loss (self->replica, rlx_round_get_loss (round));
  /* (round_epoch, round_pos) already are where the next step starts. */
  rlx_replica_apply (self->replica, commit, update, self->round_epoch, self->round_pos,
                     on_leader_replica_applied, self);
  admit_flush (self);
  self->last_commit = commit;
  c = g_new0 (Commit, 1);
  c->step = commit;
  c->loss = rlx_round_get_loss (round);
  c->samples = rlx_round_get_samples (round);
  c->contributors = str_array_copy (rlx_round_get_contributors (round));
  c->late = rlx_round_get_late (round);
  c->rejected = rlx_round_get_rejected (round);
  c->waiting = g_ptr_array_new_with_free_func (g_free);
  c->published = g_get_monotonic_time ();
  c->final = final;
  c->members = ids->len;
  for (guint i = 0; i < ids->len; i++)
    if (!is_self (self, g_ptr_array_index (ids, i)))
      g_ptr_array_add (c->waiting, g_strdup (g_ptr_array_index (ids, i)));
  g_queue_push_tail (&self->commits, c);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_STEP]);

  /* Our own worker applies it too, then computes our slice of the next
   * step (assigned below). */
  w = g_new0 (Work, 1);
  rlx_msg_array_copy (&w->update, update);
  g_queue_push_tail (&self->work, w);
  {
    GArray *slots = g_object_steal_data (G_OBJECT (round), "next-slots");
    if (slots && !final)
      leader_start_round (self, slots);
    else
      work_submit (self);
    if (slots)
      g_array_unref (slots);
  }
out:
  BUSY_END;
}

/* Begin collecting round_step with @slots (the members were told by the
 * frame that carried them) and queue our own slice. */
static void
leader_start_round (RlxCoordinator *self, GArray *slots)
{
  guint64 step = self->round_step;

  note_assigned (self, step, 0);
  for (guint i = 0; i < slots->len; i++)
    {
      RlxMsgSlot *s = &g_array_index (slots, RlxMsgSlot, i);
      if (is_self (self, s->node))
        {
          Work *w = g_new0 (Work, 1);
          work_assign (self, w, step, self->round_epoch, s->start, s->count);
          work_push (self, w);
        }
    }
  if (slots->len > 0)
    rlx_round_begin (self->round, step, slots, deadline_ms (self));
  else
    work_submit (self);
}

static void
leader_publish (RlxCoordinator *self, gboolean commit)
{
  g_autoptr(GError) error = NULL;
  GArray *slots;
  RlxMsg m;

  if (!rlx_leadership_is_leader (self->lead) || self->finished)
    return;
  if (commit)
    {
      /* The update of the round just collected, made on a thread; its frame
       * also assigns the next step (on_update_made). */
      gint64 round_us = g_get_monotonic_time () - rlx_round_get_started (self->round);
      guint64 c = rlx_round_get_step (self->round);
      gboolean final = self->steps > 0 && c >= self->steps;

      self->round_ema_us = self->rounds_measured == 0 ? round_us
                         : 0.8 * self->round_ema_us + 0.2 * round_us;
      self->rounds_measured++;
      if (self->rounds_measured == 5)
        self->stat_cpu0_us = process_cpu_us ();
      if (self->rounds_measured > 5)
        {
          self->stat_rounds++;
          self->stat_samples += rlx_round_get_samples (self->round);
          self->stat_round_us += round_us;
          self->stat_compute_us += rlx_round_get_max_compute (self->round);
          self->stat_busy_us += self->busy_us;
          self->stat_send_us += self->send_us;
        }
      self->busy_us = self->send_us = 0;
      /* The next round starts where this one ended. */
      rlx_replica_advance (self->replica, &self->round_epoch, &self->round_pos, self->round_count);
      self->round_count = 0;
      self->round_step = c + 1;
      slots = final ? rlx_msg_slots_new () : leader_assign (self);
      step_header (self, &m, c, slots, final);
      self->finishing_round = TRUE;
      g_object_set_data_full (G_OBJECT (self->round), "next-slots", slots, (GDestroyNotify) g_array_unref);
      rlx_round_finish (self->round, &m, self->lr, self->precision, self->error_feedback,
                        on_update_made, self);
      rlx_msg_clear (&m);
      return;
    }

  /* No commit: (re)start the step after the last applied one — once our
   * replica holds the last commit we published (its hash is the base). */
  if (!self->rounds_started && members (self)->len < self->wait_members)
    return;
  if (applied (self) < self->last_commit)
    {
      self->publish_waiting = TRUE;
      return;
    }
  self->publish_waiting = FALSE;
  self->round_waiting = FALSE;
  self->rounds_started = TRUE;
  self->round_step = applied (self) + 1;
  g_object_set_data (G_OBJECT (self->round), "next-slots", NULL);
  {
    g_autoptr(GBytes) frame = NULL;
    GPtrArray *ids = members (self);

    slots = leader_assign (self);
    step_header (self, &m, 0, slots, FALSE);
    frame = rlx_msg_build (&m, NULL, 0, RLX_PRECISION_F32, &error);
    rlx_msg_clear (&m);
    if (frame == NULL)
      {
        g_autofree char *msg = g_strdup_printf ("could not build the step: %s", error->message);
        g_array_unref (slots);
        finish (self, FALSE, msg);
        return;
      }
    for (guint i = 0; i < ids->len; i++)
      {
        RlxPeer *p = rlx_peer_set_lookup (self->peers, g_ptr_array_index (ids, i));
        if (p)
          send_frame (self, p, RLX_SEND_STEP, frame, 0, RLX_PRECISION_F32);
      }
  }
  leader_start_round (self, slots);
  g_array_unref (slots);
}

static void
leader_finalize (RlxCoordinator *self)
{
  if (!rlx_leadership_is_leader (self->lead) || self->finishing_round)
    return;
  if (rlx_round_get_samples (self->round) == 0)
    {
      /* Nothing usable came back: the step is not committed; run it again
       * with whoever is still here (same dataset position). */
      leader_publish (self, FALSE);
      return;
    }
  /* The leader's own replica must hold the last commit: the step frame
   * carries its hash as the base of this one. */
  if (applied (self) + 1 != rlx_round_get_step (self->round))
    {
      self->round_waiting = TRUE;   /* on_leader_replica_applied goes on */
      return;
    }
  self->round_waiting = FALSE;
  leader_publish (self, TRUE);
}

static void
on_round_complete (RlxRound *round, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  BUSY_BEGIN;

  leader_finalize (self);
  BUSY_END;
}

static void
send_reject (RlxCoordinator *self, const char *id, guint64 step, const char *reason)
{
  RlxPeer *p = rlx_peer_set_lookup (self->peers, id);
  JsonObject *o = event_new ("rejected");

  json_object_set_string_member (o, "node", id);
  json_object_set_int_member (o, "step", (gint64) step);
  json_object_set_string_member (o, "reason", reason);
  event_emit (self, o);
  self->rejected_total++;
  if (p)
    {
      RlxMsg m;
      rlx_msg_init (&m, RLX_MSG_REJECT, self->node_id);
      m.u.reject.step = step;
      m.u.reject.reason = g_strdup (reason);
      send_msg (self, p, &m);
      rlx_msg_clear (&m);
    }
}

static void
on_round_rejected (RlxRound *round, const char *node, guint64 step, const char *reason,
                   gpointer user_data)
{
  RlxCoordinator *self = user_data;

  /* The round counted it; report and tell the member. */
  send_reject (self, node, step, reason);
}

static void
on_round_late (RlxRound *round, const char *node, guint64 step, const char *reason,
               gpointer user_data)
{
  RlxCoordinator *self = user_data;
  JsonObject *o = event_new ("late");

  self->late_total++;
  json_object_set_string_member (o, "node", node);
  json_object_set_int_member (o, "step", (gint64) step);
  json_object_set_string_member (o, "reason", reason);
  event_emit (self, o);
}

/* A member's bucket (or refusal) for a step: judged once the member's
 * acknowledgement of the state it was computed at is in. */
static void
leader_on_grad (RlxCoordinator *self, RlxPeer *p, RlxMsg *m)
{
  RlxMsgGrad *g = &m->u.grad;
  MemberState *ms = member_state (self, p->id);
  g_autofree char *reason = NULL;
  guint64 mine;

  if (g->term != rlx_leadership_get_term (self->lead))
    return;
  if (!rlx_round_slot_pending (self->round, p->id) || g->step != rlx_round_get_step (self->round))
    {
      self->late_total++;
      return;
    }
  if (g->refused)
    {
      rlx_round_reject_slot (self->round, p->id);
      send_reject (self, p->id, g->step, g->refused);
      return;
    }
  /* Judged against the member's acknowledgement of step - 1 and our own
   * hash of it; either may not be in yet (then the bucket waits). */
  if (ms->known && ms->step >= g->step)
    {
      self->late_total++;
      return;
    }
  if (!ms->known || ms->step + 1 < g->step ||
      !rlx_replica_hash_at (self->replica, g->step - 1, &mine))
    {
      rlx_msg_clear (&ms->held);
      rlx_msg_steal (&ms->held, m);
      ms->has_held = TRUE;
      return;
    }
  if (ms->hash != mine)
    {
      rlx_round_reject_slot (self->round, p->id);
      send_reject (self, p->id, g->step, "gradient computed at other parameters (hash differs)");
      return;
    }
  if (g->grads.frame)
    note_precision (self, p, g->grads.precision);
  switch (rlx_round_offer (self->round, p->id, g->step, g->samples, g->loss, g->compute_us, NULL,
                           &g->grads, &reason))
    {
    case RLX_ROUND_ACCEPTED:
      if (g->compute_us > 0)
        {
          double sp = g->samples * 1e6 / g->compute_us;
          p->speed = p->speed > 0 ? 0.7 * p->speed + 0.3 * sp : sp;
        }
      break;
    case RLX_ROUND_REJECTED:
      send_reject (self, p->id, g->step, reason);
      break;
    case RLX_ROUND_LATE:
    default:
      self->late_total++;
      break;
    }
}

static void leader_admit (RlxCoordinator *self, RlxPeer *p, RlxMsgJoin *join);

static void
leader_on_ack (RlxCoordinator *self, RlxPeer *p, RlxMsgAck *a)
{
  MemberState *ms;

  if (a->term != rlx_leadership_get_term (self->lead))
    return;
  if (!rlx_leadership_has_member (self->lead, p->id))
    {
      /* It follows us but is not a member (we lost sight of it while it
       * still saw us, e.g. across a split): an acknowledgement from a node
       * that is not a member asks to be one. */
      RlxMsgJoin join = { (char *) "rejoin", a->step, a->hash, FALSE };
      leader_admit (self, p, &join);
      return;
    }
  member_acked (self, p->id, a->step, a->hash);
  ms = member_state (self, p->id);
  if (ms->has_held)
    {
      RlxMsg m;
      ms->has_held = FALSE;
      rlx_msg_steal (&m, &ms->held);
      leader_on_grad (self, p, &m);
      rlx_msg_clear (&m);
    }
}

/* ── snapshots ──────────────────────────────────────────────────────────── */

typedef struct {
  RlxCoordinator *self;
  RlxMsg          header;
  char           *to;
  char           *reason;
  GBytes         *frame;
  gboolean        counted;      /* in self->snapshots_out */
} SnapshotJob;

static void
snapshot_job_free (gpointer p)
{
  SnapshotJob *j = p;

  if (j->counted)
    j->self->snapshots_out--;
  g_object_unref (j->self);
  rlx_msg_clear (&j->header);
  g_free (j->to);
  g_free (j->reason);
  g_clear_pointer (&j->frame, g_bytes_unref);
  g_free (j);
}

/* On the replica's thread: the frame, with the state as it is now. */
static void
snapshot_build (const float *params, gsize n, gpointer data)
{
  SnapshotJob *j = data;
  RlxReplica *replica = j->self->replica;
  RlxMsgSnapshot *s = &j->header.u.snapshot;

  s->step = rlx_replica_get_step (replica);
  s->hash = rlx_replica_get_hash (replica);
  s->seed = g_strdup_printf ("%" G_GUINT64_FORMAT, rlx_replica_get_seed (replica));
  s->epoch = rlx_replica_get_epoch (replica);
  s->pos = rlx_replica_get_pos (replica);
  s->loss = rlx_replica_get_loss (replica);
  s->hashes = rlx_replica_history (replica, &s->hashes_from);
  j->frame = rlx_msg_build (&j->header, params, n, RLX_PRECISION_F32, NULL);
}

static void
on_snapshot_built (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  SnapshotJob *j = user_data;
  RlxCoordinator *self = j->self;
  RlxPeer *p = rlx_peer_set_lookup (self->peers, j->to);
  JsonObject *o;
  BUSY_BEGIN;

  self->snapshots_out--;
  j->counted = FALSE;
  if (p == NULL || j->frame == NULL || role (self) == RLX_ROLE_STOPPED)
    goto out;
  send_frame (self, p, RLX_SEND_BULK, j->frame, self->n, RLX_PRECISION_F32);
  if (rlx_leadership_is_leader (self->lead))
    member_acked (self, j->to, j->header.u.snapshot.step, j->header.u.snapshot.hash);
  o = event_new ("snapshot");
  json_object_set_string_member (o, "to", j->to);
  json_object_set_int_member (o, "step", (gint64) j->header.u.snapshot.step);
  set_hash_member (o, "hash", j->header.u.snapshot.hash);
  json_object_set_string_member (o, "reason", j->reason);
  event_emit (self, o);
  if (rlx_leadership_is_leader (self->lead) && !self->finished && self->snapshots_out == 0 &&
      !rlx_round_is_active (self->round) && !self->finishing_round && !self->round_waiting &&
      (self->rounds_started || members (self)->len >= self->wait_members))
    leader_publish (self, FALSE);
out:
  BUSY_END;
}

/* Our full-precision state to @p, once the replica's pending operations are
 * done (built on its thread). */
static void
send_snapshot (RlxCoordinator *self, RlxPeer *p, const char *reason)
{
  SnapshotJob *j = g_new0 (SnapshotJob, 1);

  j->self = g_object_ref (self);
  j->to = g_strdup (p->id);
  j->reason = g_strdup (reason);
  rlx_msg_init (&j->header, RLX_MSG_SNAPSHOT, self->node_id);
  j->header.u.snapshot.term = rlx_leadership_get_term (self->lead);
  j->header.u.snapshot.leader = g_strdup (rlx_leadership_get_leader (self->lead)
                                          ? rlx_leadership_get_leader (self->lead) : self->node_id);
  j->header.u.snapshot.members = str_array_copy (members (self));
  self->snapshots_out++;
  j->counted = TRUE;
  rlx_replica_read (self->replica, snapshot_build, j, snapshot_job_free, on_snapshot_built, j);
}

/* Admit @p (or send it a fresh snapshot). */
static void
leader_admit (RlxCoordinator *self, RlxPeer *p, RlxMsgJoin *join)
{
  MemberState *ms;

  /* A repeated plain join from a member in step with us (its snapshot
   * crossed its retry) changes nothing: ignore it, or its slice of the round
   * in flight would be written off. */
  if (g_strcmp0 (join->reason, "join") == 0 && rlx_leadership_has_member (self->lead, p->id) &&
      join->step == applied (self) && join->hash == rlx_replica_get_hash (self->replica))
    return;
  if (rlx_leadership_add_member (self->lead, p->id))
    {
      emit_member (self, "member-joined", p->id, NULL);
      roster_sync (self);
    }
  ms = member_state (self, p->id);
  ms->known = FALSE;
  if (ms->has_held)
    {
      rlx_msg_clear (&ms->held);
      ms->has_held = FALSE;
    }
  /* A pending slice of a member that needs a snapshot will not come. The
   * snapshot goes out once the replica's pending work is done; a round
   * that waits for this member starts after it (on_snapshot_built), so the
   * member gets its snapshot before the step that counts on it. While the
   * update of a round is being made, the snapshot waits for it to be
   * applied: the next frame is the first to assign this member a slice,
   * and the snapshot is then exactly what that frame builds on. */
  rlx_round_close_slot (self->round, p->id);
  if (self->finishing_round)
    {
      if (!str_array_contains (self->admit_pending, p->id))
        g_ptr_array_add (self->admit_pending, g_strdup (p->id));
      return;
    }
  send_snapshot (self, p, join->reason);
}

static void
admit_flush (RlxCoordinator *self)
{
  g_autoptr(GPtrArray) ids = g_steal_pointer (&self->admit_pending);

  self->admit_pending = g_ptr_array_new_with_free_func (g_free);
  for (guint i = 0; i < ids->len; i++)
    {
      RlxPeer *p = rlx_peer_set_lookup (self->peers, g_ptr_array_index (ids, i));
      if (p && rlx_leadership_has_member (self->lead, p->id))
        send_snapshot (self, p, "join");
    }
}

/* ── leadership ─────────────────────────────────────────────────────────── */

static gboolean on_found_timer (gpointer user_data);
static gboolean on_join_retry (gpointer user_data);

static void
start_found_timer (RlxCoordinator *self, guint ms)
{
  if (self->found_id == 0 && !self->finished)
    self->found_id = g_timeout_add (ms, on_found_timer, self);
}

/* The one place where this node's role changes. */
static void
transition (RlxCoordinator *self, RlxRole to, const char *leader, guint64 term, const char *reason)
{
  RlxRole from = role (self);
  g_autofree char *old_leader = g_strdup (rlx_leadership_get_leader (self->lead));
  guint64 old_term = rlx_leadership_get_term (self->lead);
  guint changed;

  if (from == RLX_ROLE_STOPPED)
    return;
  changed = rlx_leadership_set (self->lead, to, leader, term);
  if (changed & 4)
    self->term_base = applied (self);

  /* Leaving the lead: the round in flight and the commits not reported are
   * abandoned (none was acknowledged by everyone, so none is lost). */
  if (from == RLX_ROLE_LEADER && to != RLX_ROLE_LEADER)
    {
      round_abandon (self);
      self->publish_waiting = FALSE;
      g_ptr_array_set_size (self->admit_pending, 0);
      g_queue_clear_full (&self->commits, (GDestroyNotify) commit_free);
      g_queue_init (&self->commits);
      g_hash_table_remove_all (self->members_state);
    }
  /* Not computing for anyone: drop queued assignments (updates still run). */
  if (to != RLX_ROLE_MEMBER && to != RLX_ROLE_LEADER)
    for (GList *l = self->work.head; l; l = l->next)
      ((Work *) l->data)->step = 0;

  switch (to)
    {
    case RLX_ROLE_ALONE:
      g_clear_handle_id (&self->join_id, g_source_remove);
      self->joined_reported = FALSE;
      g_queue_clear_full (&self->inbox, msg_free);
      g_queue_init (&self->inbox);
      self->inbox_early = 0;
      if (reason)
        emit_simple (self, "rejoining", self->node_id, reason);
      /* Look for peers from the main loop's next turn (the link that just
       * closed is still being torn down under us). */
      start_found_timer (self, 50);
      break;
    case RLX_ROLE_JOINING:
      g_clear_handle_id (&self->found_id, g_source_remove);
      /* Once per leader and reason; the retry timer repeats it. */
      if (from != RLX_ROLE_JOINING || (changed & 2) || reason)
        send_join (self, reason ? reason : "join");
      if (self->join_id == 0)
        self->join_id = g_timeout_add (JOIN_RETRY_MS, on_join_retry, self);
      break;
    case RLX_ROLE_MEMBER:
    case RLX_ROLE_LEADER:
      g_clear_handle_id (&self->found_id, g_source_remove);
      g_clear_handle_id (&self->join_id, g_source_remove);
      self->waiting_reported = FALSE;
      break;
    case RLX_ROLE_STOPPED:
    case RLX_ROLE_N:
    default:
      g_clear_handle_id (&self->found_id, g_source_remove);
      g_clear_handle_id (&self->join_id, g_source_remove);
      break;
    }

  if (changed & 1)
    g_object_notify_by_pspec (G_OBJECT (self), props[PROP_ROLE]);
  if (changed & 2)
    g_object_notify_by_pspec (G_OBJECT (self), props[PROP_LEADER]);
  if (changed & 4)
    g_object_notify_by_pspec (G_OBJECT (self), props[PROP_TERM]);
  if ((to == RLX_ROLE_MEMBER || to == RLX_ROLE_LEADER) &&
      (g_strcmp0 (old_leader, leader) != 0 || old_term != term ||
       (from != RLX_ROLE_MEMBER && from != RLX_ROLE_LEADER)) && self->joined_reported)
    emit_leader (self);
  if (changed)
    roster_sync (self);
}

static void
become_leader (RlxCoordinator *self, guint64 term, gboolean founding)
{
  if (founding)
    {
      GPtrArray *only = g_ptr_array_new_with_free_func (g_free);
      g_ptr_array_add (only, g_strdup (self->node_id));
      rlx_leadership_set_members (self->lead, only);
    }
  else
    {
      /* Failover or merge: keep the members we can still reach. */
      GPtrArray *cur = members (self);
      for (guint i = cur->len; i > 0; i--)
        if (!is_alive (g_ptr_array_index (cur, i - 1), self))
          g_ptr_array_remove_index (cur, i - 1);
      if (!rlx_leadership_has_member (self->lead, self->node_id))
        g_ptr_array_insert (cur, 0, g_strdup (self->node_id));
      self->rounds_started = TRUE;
    }
  transition (self, RLX_ROLE_LEADER, self->node_id, term, NULL);
  rlx_round_reset_residual (self->round);
  self->rounds_measured = 0;
  /* A commit our replica is still applying (we were a member a moment
   * ago) is the one the first round builds on. */
  self->last_commit = MAX (applied (self), self->expect_commit);
  self->publish_waiting = FALSE;
  self->round_epoch = rlx_replica_get_epoch (self->replica);
  self->round_pos = rlx_replica_get_pos (self->replica);
  if (!self->worker_loaded)
    work_load_from_replica (self);
  if (!self->joined_reported)
    {
      emit_leader (self);
      emit_joined (self);
    }

  send_leader_msg (self, NULL);

  if (self->steps > 0 && applied (self) >= self->steps)
    {
      finish (self, TRUE, "all steps committed");
      return;
    }
  /* A new leader after a failover checkpoints what it holds. */
  if (!founding && applied (self) > 0)
    maybe_checkpoint (self, TRUE);
  leader_publish (self, FALSE);
}

static void
on_resume_loaded (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  JsonObject *o = event_new ("resumed");

  json_object_set_int_member (o, "step", (gint64) rlx_replica_get_step (replica));
  set_hash_member (o, "hash", rlx_replica_get_hash (replica));
  json_object_set_string_member (o, "path", rlx_checkpointer_get_path (self->ckpt));
  event_emit (self, o);
  work_load_from_replica (self);
  become_leader (self, 1, TRUE);
}

static void
found (RlxCoordinator *self)
{
  if (self->checkpoint_error)
    {
      finish (self, FALSE, self->checkpoint_error->message);
      return;
    }
  if (self->resume.params)
    {
      rlx_replica_set_seed (self->replica, self->resume.seed);
      rlx_replica_load_floats (self->replica, self->resume.step,
                               g_steal_pointer (&self->resume.params), self->resume.epoch,
                               self->resume.pos, on_resume_loaded, self);
      self->worker_loaded = TRUE;   /* loaded by on_resume_loaded */
      return;
    }
  become_leader (self, 1, TRUE);
}

/* A peer in a cohort (leader or member) tells who leads it. */
static const char *
peer_leader (RlxPeer *p)
{
  if (p->role == RLX_ROLE_LEADER)
    return p->id;
  if (p->role == RLX_ROLE_MEMBER)
    return p->leader;
  return NULL;
}

static gboolean
on_found_timer (gpointer user_data)
{
  RlxCoordinator *self = user_data;
  g_autofree RlxFounderCandidate *c = NULL;
  guint k = 0;
  int pick;

  self->found_id = 0;
  if (role (self) != RLX_ROLE_ALONE || self->finished)
    return G_SOURCE_REMOVE;
  g_signal_emit (self, signals[SIG_DISCOVER], 0);
  c = g_new0 (RlxFounderCandidate, rlx_peer_set_size (self->peers) + 1);
  c[k].id = self->node_id;
  c[k].checkpoint = self->resume.params ? self->resume.step : 0;
  /* A node that was cut off looks for its cohort for a while before it
   * would carry on alone (it may be the only one left). */
  c[k++].join_only = self->join_only || self->checkpoint_error != NULL ||
                     g_get_monotonic_time () < self->rejoin_until;
  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *p = rlx_peer_set_nth (self->peers, i);
      if (!p->ready || p->refused)
        continue;
      if (peer_leader (p) && rlx_peer_set_lookup (self->peers, peer_leader (p)))
        {
          transition (self, RLX_ROLE_JOINING, peer_leader (p), p->term, NULL);
          return G_SOURCE_REMOVE;
        }
      if (p->role == RLX_ROLE_ALONE)
        {
          c[k].id = p->id;
          c[k].checkpoint = p->checkpoint;
          c[k++].join_only = p->join_only;
        }
    }
  pick = rlx_leadership_pick_founder (c, k);
  if (pick == 0)
    {
      found (self);
      return G_SOURCE_REMOVE;
    }
  if (pick < 0 && self->checkpoint_error && !self->join_only &&
      g_get_monotonic_time () >= self->rejoin_until)
    {
      finish (self, FALSE, self->checkpoint_error->message);
      return G_SOURCE_REMOVE;
    }
  if (pick < 0 && !self->waiting_reported && self->join_only)
    {
      self->waiting_reported = TRUE;
      emit_simple (self, "waiting", self->node_id,
                   "no cohort reachable yet; this node only joins one (it was given peers to "
                   "join), so it waits and keeps looking");
    }
  /* Someone else founds (or a stale view of it): say hello again now and
   * then (the answers refresh what we know), and look for more peers. */
  if (++self->found_waits % 4 == 0)
    for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
      {
        RlxPeer *p = rlx_peer_set_nth (self->peers, i);
        if (p->ready && !p->refused)
          rlx_peer_set_say_hello (self->peers, p);
      }
  start_found_timer (self, g_get_monotonic_time () < self->rejoin_until ? 200 : FOUND_RETRY_MS);
  return G_SOURCE_REMOVE;
}

static gboolean
on_join_retry (gpointer user_data)
{
  RlxCoordinator *self = user_data;
  RlxPeer *lp;

  if (role (self) != RLX_ROLE_JOINING)
    {
      self->join_id = 0;
      return G_SOURCE_REMOVE;
    }
  lp = rlx_peer_set_lookup (self->peers, rlx_leadership_get_leader (self->lead));
  if (lp == NULL || (lp->role != RLX_ROLE_LEADER && lp->role != RLX_ROLE_MEMBER))
    {
      /* The leader we were joining is gone (or no longer leads): look again. */
      self->join_id = 0;
      transition (self, RLX_ROLE_ALONE, NULL, rlx_leadership_get_term (self->lead), NULL);
      return G_SOURCE_REMOVE;
    }
  if (!self->loading)
    send_join (self, applied (self) > 0 || self->joined_reported ? "resync" : "join");
  return G_SOURCE_CONTINUE;
}

static void
request_snapshot (RlxCoordinator *self, const char *reason)
{
  g_queue_clear_full (&self->inbox, msg_free);
  g_queue_init (&self->inbox);
  self->inbox_early = 0;
  transition (self, RLX_ROLE_JOINING, rlx_leadership_get_leader (self->lead),
              rlx_leadership_get_term (self->lead), reason);
}

/* This node was cut off (its loop stood still and the cohort went on
 * without it): it rejoins through a snapshot, never founds over it. */
static void
cut_off (RlxCoordinator *self, const char *why)
{
  g_autofree char *reason = g_strdup_printf ("%s; this node stood still longer than the heartbeat "
                                             "timeout (%u ms) and rejoins the cohort",
                                             why, rlx_peer_set_get_timeout (self->peers));
  self->rejoin_until = g_get_monotonic_time () +
                       MAX (3 * (gint64) rlx_peer_set_get_timeout (self->peers), 3000) * 1000;
  transition (self, RLX_ROLE_ALONE, NULL, rlx_leadership_get_term (self->lead), reason);
}

/* The leader is gone: the most senior reachable member takes over. */
static void
leader_lost (RlxCoordinator *self, const char *old, const char *reason)
{
  const char *next;

  if (role (self) == RLX_ROLE_JOINING || role (self) == RLX_ROLE_ALONE)
    {
      transition (self, RLX_ROLE_ALONE, NULL, rlx_leadership_get_term (self->lead), NULL);
      return;
    }
  if (role (self) != RLX_ROLE_MEMBER)
    return;
  if (rlx_leadership_remove_member (self->lead, old))
    emit_member (self, "member-left", old, reason);
  next = rlx_leadership_successor (self->lead, is_alive, self);
  if (next == NULL || is_self (self, next))
    become_leader (self, rlx_leadership_get_term (self->lead) + 1, FALSE);
  else
    {
      /* Wait for it to announce itself (term + 1); its silence is caught
       * by the heartbeat like anyone's. */
      g_autofree char *n = g_strdup (next);
      transition (self, RLX_ROLE_MEMBER, n, rlx_leadership_get_term (self->lead), NULL);
    }
}

/* ── member: the steps ──────────────────────────────────────────────────── */

static void
on_member_applied (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  RlxMsg *m = g_object_get_data (G_OBJECT (replica), "applying");
  BUSY_BEGIN;

  self->expect_commit = 0;
  if (m && (role (self) == RLX_ROLE_MEMBER || role (self) == RLX_ROLE_LEADER) &&
      rlx_replica_get_step (replica) == m->u.step.commit)
    {
      RlxMsgStep *s = &m->u.step;
      if (self->fault_hash_at > 0 && s->commit == self->fault_hash_at)
        {
          /* Test switch: diverge by one bit, then carry on as if nothing
           * happened (the leader and the next base check must notice). */
          self->fault_hash_at = 0;
          rlx_replica_corrupt (self->replica, on_member_applied, self);
          goto out;
        }
      send_ack (self);
      emit_step (self, s->commit, rlx_replica_get_hash (replica), s->loss, s->samples,
                 s->contributors, s->late, s->rejected, members (self)->len);
      if (self->steps > 0 && s->commit >= self->steps)
        finish (self, TRUE, "all steps committed");
    }
  g_object_set_data (G_OBJECT (replica), "applying", NULL);
  inbox_drain (self);
  /* Taken over while this commit was being applied: the first round
   * waited for it. */
  if (rlx_leadership_is_leader (self->lead) && self->publish_waiting &&
      applied (self) >= self->last_commit)
    {
      self->round_epoch = rlx_replica_get_epoch (replica);
      self->round_pos = rlx_replica_get_pos (replica);
      leader_publish (self, FALSE);
    }
out:
  BUSY_END;
}

/* One step frame, with the replica idle (its hash is of the last commit). */
static void
member_on_step (RlxCoordinator *self, RlxPeer *p, RlxMsg *m, gboolean early)
{
  RlxMsgStep *s = &m->u.step;
  guint64 have = applied (self);
  gboolean committed = FALSE, accepted_prev = FALSE, listed = TRUE;
  Work *w = NULL;

  if (s->commit > 0)
    {
      if (s->commit == have + 1)
        {
          if (s->base != rlx_replica_get_hash (self->replica))
            {
              request_snapshot (self, "parameter hash differs from the leader's");
              return;
            }
          if (s->update.n != self->n)
            {
              request_snapshot (self, "commit without a whole update");
              return;
            }
          committed = TRUE;
          accepted_prev = str_array_contains (s->contributors, self->node_id);
        }
      else if (s->commit > have + 1)
        {
          request_snapshot (self, "missed a commit");
          return;
        }
    }
  if (s->step <= have && !committed && !s->final)
    {
      /* A new leader that missed the last commit we have: hand it our
       * state, so no step we committed is lost (it adopts it). A frame of
       * the leader we follow that is older than our state (it overtook our
       * snapshot) is simply stale. */
      if (self->steps_term != s->term && self->ahead_sent_term != s->term)
        {
          self->ahead_sent_term = s->term;
          send_snapshot (self, p, "a member is ahead of the new leader");
        }
      return;
    }
  self->steps_term = s->term;
  if (s->step != have + (committed ? 1 : 0) + 1 && !s->final)
    {
      request_snapshot (self, "step out of sequence");
      return;
    }
  /* A frame made before the leader admitted us (its update was being
   * computed while our snapshot travelled) does not list us yet: its commit
   * is ours too, its assignment is not. Only a leader that keeps leaving us
   * out has really dropped us. */
  if (!str_array_contains (s->members, self->node_id))
    {
      if (!early && ++self->unlisted >= 3)
        {
          request_snapshot (self, "not in the member list");
          return;
        }
      listed = FALSE;
    }
  else
    {
      self->unlisted = 0;
      members_replace (self, g_steal_pointer (&s->members));
      s->members = g_ptr_array_new_with_free_func (g_free);
    }

  if (committed)
    {
      RlxMsg *keep = g_new0 (RlxMsg, 1);
      w = g_new0 (Work, 1);
      rlx_msg_array_copy (&w->update, &s->update);
      w->accepted_prev = accepted_prev;
      rlx_replica_set_loss (self->replica, s->loss);
      self->expect_commit = s->commit;
      rlx_msg_steal (keep, m);
      g_object_set_data_full (G_OBJECT (self->replica), "applying", keep, msg_free);
      s = &keep->u.step;
      rlx_replica_apply (self->replica, s->commit, &s->update, s->epoch, s->pos,
                         on_member_applied, self);
    }
  note_assigned (self, s->step, 0);
  for (guint i = 0; listed && s->assign && i < s->assign->len; i++)
    {
      RlxMsgSlot *slot = &g_array_index (s->assign, RlxMsgSlot, i);
      if (is_self (self, slot->node) &&
          (guint64) slot->start + slot->count <= rlx_replica_get_n_train (self->replica))
        {
          if (w == NULL)
            w = g_new0 (Work, 1);
          work_assign (self, w, s->step, s->epoch, slot->start, slot->count);
        }
    }
  if (w)
    work_push (self, w);
}

/* Process queued step frames while the replica is idle. */
static void
inbox_drain (RlxCoordinator *self)
{
  RlxMsg *m;

  if (role (self) != RLX_ROLE_MEMBER)
    return;   /* kept for after the snapshot */
  while (!rlx_replica_busy (self->replica) && !self->loading &&
         (m = g_queue_pop_head (&self->inbox)))
    {
      RlxPeer *p = rlx_peer_set_lookup (self->peers, m->node);
      gboolean early = self->inbox_early > 0;

      if (early)
        self->inbox_early--;
      if (p && role (self) == RLX_ROLE_MEMBER &&
          g_strcmp0 (m->node, rlx_leadership_get_leader (self->lead)) == 0 &&
          m->u.step.term == rlx_leadership_get_term (self->lead))
        member_on_step (self, p, m, early);
      msg_free (m);
    }
}

static void
on_step_msg (RlxCoordinator *self, RlxPeer *p, RlxMsg *m)
{
  RlxMsgStep *s = &m->u.step;
  guint64 term = rlx_leadership_get_term (self->lead);
  RlxMsg *keep;

  if (s->term < term)
    {
      /* A leader of an older term that missed the change (it was cut off):
       * tell it who leads now, so it steps down. */
      if (rlx_leadership_get_leader (self->lead) &&
          (role (self) == RLX_ROLE_MEMBER || role (self) == RLX_ROLE_LEADER))
        send_leader_msg (self, p);
      return;
    }
  if (rlx_leadership_is_leader (self->lead))
    {
      if (s->term == term && strcmp (p->id, self->node_id) > 0)
        return;
      /* A leader of a newer term (or a more senior one of ours). */
      transition (self, RLX_ROLE_JOINING, p->id, s->term, "another leader took over");
      return;
    }
  if (role (self) == RLX_ROLE_MEMBER &&
      (s->term > term || g_strcmp0 (rlx_leadership_get_leader (self->lead), p->id) != 0))
    {
      if (!rlx_leadership_has_member (self->lead, p->id))
        {
          /* A leader from outside our cohort (a merge): join it. */
          self->lineage_change = TRUE;
          transition (self, RLX_ROLE_JOINING, p->id, s->term, "merge");
          return;
        }
      transition (self, RLX_ROLE_MEMBER, p->id, s->term, NULL);
      send_ack (self);
    }
  /* Not admitted yet: the leader's frames are kept until its snapshot is
   * loaded (one may overtake it: the snapshot is made after the replica's
   * pending work), then those older than the snapshot are skipped. */
  if (role (self) != RLX_ROLE_MEMBER &&
      !(role (self) == RLX_ROLE_JOINING &&
        g_strcmp0 (rlx_leadership_get_leader (self->lead), p->id) == 0))
    return;
  if (g_queue_get_length (&self->inbox) >= 16)
    {
      msg_free (g_queue_pop_head (&self->inbox));
      if (self->inbox_early > 0)
        self->inbox_early--;
    }
  if (role (self) != RLX_ROLE_MEMBER)
    self->inbox_early++;
  if (s->commit > 0 && s->update.frame)
    note_precision (self, p, s->update.precision);
  keep = g_new0 (RlxMsg, 1);
  rlx_msg_steal (keep, m);
  g_queue_push_tail (&self->inbox, keep);
  inbox_drain (self);
}

/* ── snapshots received ─────────────────────────────────────────────────── */

typedef struct {
  RlxCoordinator *self;
  RlxMsg          msg;
  gint64          common;
  guint64         had;
  guint64         term_base;
} Loading;

static void
loading_free (Loading *l)
{
  rlx_msg_clear (&l->msg);
  g_free (l);
}

static void
emit_snapshot_from (RlxCoordinator *self, const char *from, guint64 step, guint64 hash,
                    const char *reason)
{
  JsonObject *o = event_new ("snapshot");

  json_object_set_string_member (o, "from", from);
  json_object_set_int_member (o, "step", (gint64) step);
  set_hash_member (o, "hash", hash);
  if (reason)
    json_object_set_string_member (o, "reason", reason);
  event_emit (self, o);
}

static void
on_snapshot_loaded (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  Loading *l = user_data;
  RlxCoordinator *self = l->self;
  RlxMsgSnapshot *s = &l->msg.u.snapshot;
  RlxPeer *p = rlx_peer_set_lookup (self->peers, l->msg.node);
  Work *w;
  BUSY_BEGIN;

  self->loading = FALSE;
  if (!ok)
    {
      emit_error (self, "snapshot does not match its hash; asking again");
      goto out;
    }
  if (p == NULL || role (self) == RLX_ROLE_STOPPED)
    goto out;
  transition (self, RLX_ROLE_MEMBER, p->id, s->term, NULL);
  self->steps_term = s->term;
  members_replace (self, g_steal_pointer (&s->members));
  rlx_worker_reset_feedback (self->worker);
  w = g_new0 (Work, 1);
  rlx_msg_array_copy (&w->load, &s->params);
  work_push (self, w);
  self->worker_loaded = TRUE;
  emit_snapshot_from (self, p->id, s->step, s->hash, NULL);
  if (!self->joined_reported)
    {
      emit_leader (self);
      emit_joined (self);
    }
  /* After a split: the steps this node had that the cohort does not. */
  if (self->lineage_change || l->had > (guint64) MAX (l->common, 0))
    {
      gboolean diverged = l->common >= 0 && (guint64) l->common < l->had;
      if (self->lineage_change || diverged)
        {
          /* Where the histories part: from the hashes when they overlap
           * there, else the step at which our side's term began (the
           * split, for the side that had to elect a leader of its own). */
          guint64 common = l->common >= 0 ? (guint64) l->common
                                          : MIN (l->had, MIN (l->term_base, s->step));
          JsonObject *o = event_new ("merged");
          json_object_set_string_member (o, "node", p->id);
          json_object_set_int_member (o, "discarded", (gint64) (l->had - MIN (common, l->had)));
          json_object_set_int_member (o, "from_step", (gint64) common + 1);
          json_object_set_int_member (o, "to_step", (gint64) l->had);
          json_object_set_boolean_member (o, "exact", l->common >= 0);
          json_object_set_string_member (o, "rule", self->merge_rule ? self->merge_rule
                                         : "the cohort this node was cut off from is kept");
          event_emit (self, o);
        }
    }
  self->lineage_change = FALSE;
  g_clear_pointer (&self->merge_rule, g_free);
  send_ack (self);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_STEP]);
  if (self->steps > 0 && applied (self) >= self->steps)
    finish (self, TRUE, "all steps committed");
out:
  loading_free (l);
  inbox_drain (self);
  BUSY_END;
}

/* A member committed a step we (the new leader) never received: take its
 * state and restart the round after it. */
static void
on_adopted (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  Loading *l = user_data;
  RlxCoordinator *self = l->self;
  BUSY_BEGIN;

  self->loading = FALSE;
  if (!ok)
    emit_error (self, "a member's snapshot does not match its hash");
  else if (rlx_leadership_is_leader (self->lead) && !self->finished)
    {
      Work *w = g_new0 (Work, 1);
      rlx_msg_array_copy (&w->load, &l->msg.u.snapshot.params);
      work_push (self, w);
      rlx_round_reset_residual (self->round);
      self->last_commit = rlx_replica_get_step (replica);
      self->round_epoch = rlx_replica_get_epoch (replica);
      self->round_pos = rlx_replica_get_pos (replica);
      emit_snapshot_from (self, l->msg.node, rlx_replica_get_step (replica),
                          rlx_replica_get_hash (replica), "a member was ahead of the new leader");
      g_object_notify_by_pspec (G_OBJECT (self), props[PROP_STEP]);
      admit_flush (self);
      if (self->steps > 0 && applied (self) >= self->steps)
        finish (self, TRUE, "all steps committed");
      else
        leader_publish (self, FALSE);
    }
  loading_free (l);
  BUSY_END;
}

static void
on_snapshot (RlxCoordinator *self, RlxPeer *p, RlxMsg *m)
{
  RlxMsgSnapshot *s = &m->u.snapshot;
  Loading *l;
  guint64 seed;

  if (s->term < rlx_leadership_get_term (self->lead) || s->params.n != self->n)
    return;
  if (!g_ascii_string_to_unsigned (s->seed, 10, 0, G_MAXUINT64, &seed, NULL))
    return;
  if (rlx_leadership_is_leader (self->lead))
    {
          if (s->term != rlx_leadership_get_term (self->lead) || s->step <= applied (self) ||
          !rlx_leadership_has_member (self->lead, p->id) || self->loading)
        return;
      round_abandon (self);
      l = g_new0 (Loading, 1);
      l->self = self;
      rlx_msg_steal (&l->msg, m);
      self->loading = TRUE;
      rlx_replica_load (self->replica, l->msg.u.snapshot.step, &l->msg.u.snapshot.params,
                        l->msg.u.snapshot.hash, l->msg.u.snapshot.epoch, l->msg.u.snapshot.pos,
                        on_adopted, l);
      return;
    }
  if (g_strcmp0 (s->leader, p->id) != 0)
    return;   /* only the leader's own snapshot admits */
  /* The replica's queued work is for the state we leave (the frames kept
   * in the inbox are judged against the snapshot's state after it). */
  rlx_replica_cancel (self->replica);
  g_object_set_data (G_OBJECT (self->replica), "applying", NULL);
  self->expect_commit = 0;
  for (GList *li = self->work.head; li; li = li->next)
    ((Work *) li->data)->step = 0;
  rlx_replica_set_seed (self->replica, seed);
  l = g_new0 (Loading, 1);
  l->self = self;
  l->had = applied (self);
  l->term_base = self->term_base;
  l->common = s->hashes ? rlx_replica_common_step (self->replica, s->hashes_from, s->hashes) : -1;
  rlx_replica_set_loss (self->replica, s->loss);
  rlx_msg_steal (&l->msg, m);
  self->loading = TRUE;
  rlx_replica_load (self->replica, l->msg.u.snapshot.step, &l->msg.u.snapshot.params,
                    l->msg.u.snapshot.hash, l->msg.u.snapshot.epoch, l->msg.u.snapshot.pos,
                    on_snapshot_loaded, l);
}

/* ── messages ───────────────────────────────────────────────────────────── */

static void
merge_with (RlxCoordinator *self, RlxPeer *p, guint sent_members, guint64 sent_step)
{
  RlxGroupInfo mine = { self->node_id, sent_members, sent_step };
  RlxGroupInfo theirs = { p->id, p->members, p->step };
  const char *why = rlx_leadership_merge_reason (&mine, &theirs);

  if (rlx_leadership_merge_compare (&mine, &theirs) > 0)
    {
      /* We are kept: a new term above both, so every node of the other
       * group follows us. */
      guint64 term = MAX (rlx_leadership_get_term (self->lead), p->term) + 1;
      transition (self, RLX_ROLE_LEADER, self->node_id, term, NULL);
      send_leader_msg (self, NULL);
      /* The round in flight goes on under the new term. */
      round_abandon (self);
      admit_flush (self);
      leader_publish (self, FALSE);
    }
  else
    {
      g_free (self->merge_rule);
      self->merge_rule = g_strdup_printf ("two groups of cohort %s met; the one with %s "
                                          "(led by %s) is kept", self->cohort, why, p->id);
      self->lineage_change = TRUE;
      self->merge_from_step = applied (self);
      g_clear_pointer (&self->former_members, g_ptr_array_unref);
      self->former_members = str_array_copy (members (self));
      str_array_remove (self->former_members, self->node_id);
      transition (self, RLX_ROLE_JOINING, p->id, MAX (p->term, rlx_leadership_get_term (self->lead)),
                  "merge");
    }
}

static void
on_peer_ready (RlxPeerSet *set, RlxPeer *p, RlxMsg *hello, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  RlxRole r = role (self);
  BUSY_BEGIN;

  if ((r == RLX_ROLE_LEADER || r == RLX_ROLE_MEMBER) &&
      (p->role == RLX_ROLE_ALONE || p->role == RLX_ROLE_JOINING))
    /* It may have said hello before we founded or joined: tell it who
     * leads, so it asks to join. */
    send_leader_msg (self, p);
  if (r == RLX_ROLE_ALONE && peer_leader (p) &&
      (p->role == RLX_ROLE_LEADER || rlx_peer_set_lookup (self->peers, peer_leader (p))))
    transition (self, RLX_ROLE_JOINING, peer_leader (p), p->term, NULL);
  else if (r == RLX_ROLE_LEADER && p->role == RLX_ROLE_LEADER)
    {
      /* Two groups of one cohort met (founded apart, or a split healed).
       * Both sides judge with the hellos they exchanged, so they agree. */
      guint sent_members = GPOINTER_TO_UINT (g_object_get_data (G_OBJECT (p->link), "rlx-sent-members"));
      guint64 *sent_step = g_object_get_data (G_OBJECT (p->link), "rlx-sent-step");
      merge_with (self, p, sent_members ? sent_members : members (self)->len,
                  sent_step ? *sent_step : applied (self));
    }
  else if (r == RLX_ROLE_JOINING && g_strcmp0 (rlx_leadership_get_leader (self->lead), p->id) == 0)
    send_join (self, "join");
  if (rlx_leadership_has_member (self->lead, p->id))
    roster_sync (self);
  BUSY_END;
}

/* Tell @ids (who followed us) that @lm's leader leads now. */
static void
relay_leader (RlxCoordinator *self, GPtrArray *ids, RlxMsgLeader *lm, RlxPeer *skip)
{
  for (guint i = 0; ids && i < ids->len; i++)
    {
      RlxPeer *mp = rlx_peer_set_lookup (self->peers, g_ptr_array_index (ids, i));
      RlxMsg m;

      if (mp == NULL || mp == skip)
        continue;
      rlx_msg_init (&m, RLX_MSG_LEADER, self->node_id);
      m.u.leader.leader = g_strdup (lm->leader);
      m.u.leader.term = lm->term;
      m.u.leader.step = lm->step;
      send_msg (self, mp, &m);
      rlx_msg_clear (&m);
    }
}

static void
on_leader_msg (RlxCoordinator *self, RlxPeer *p, RlxMsgLeader *lm)
{
  const char *lid = lm->leader;
  guint64 term = rlx_leadership_get_term (self->lead);
  RlxPeer *lp;

  if (is_self (self, lid))
    return;
  lp = rlx_peer_set_lookup (self->peers, lid);
  if (lp)
    {
      lp->role = RLX_ROLE_LEADER;
      g_free (lp->leader);
      lp->leader = g_strdup (lid);
      lp->term = MAX (lp->term, lm->term);
    }
  if (lm->term < term)
    return;
  /* We yielded in a merge: the nodes that followed us follow the new
   * leader too, once it has announced its term. */
  if (self->former_members && lm->term > term)
    {
      relay_leader (self, self->former_members, lm, lp);
      g_clear_pointer (&self->former_members, g_ptr_array_unref);
    }
  switch (role (self))
    {
    case RLX_ROLE_ALONE:
    case RLX_ROLE_JOINING:
      if (lp && (role (self) == RLX_ROLE_ALONE ||
                 g_strcmp0 (rlx_leadership_get_leader (self->lead), lid) != 0 || lm->term > term))
        transition (self, RLX_ROLE_JOINING, lid, lm->term, NULL);
      break;
    case RLX_ROLE_MEMBER:
      if (lm->term > term || g_strcmp0 (rlx_leadership_get_leader (self->lead), lid) != 0)
        {
          /* A leader from outside our cohort (a merge): its state is not
           * ours, join it through a snapshot (we may not even have a link
           * to it yet: joining looks for it). Else: a failover. */
          if (!rlx_leadership_has_member (self->lead, lid))
            {
              self->lineage_change = TRUE;
              transition (self, RLX_ROLE_JOINING, lid, lm->term, "merge");
            }
          else if (lp)
            {
              transition (self, RLX_ROLE_MEMBER, lid, lm->term, NULL);
              send_ack (self);
            }
        }
      break;
    case RLX_ROLE_LEADER:
      /* A newer term always wins; two leaders of one term: the smaller id
       * keeps it. */
      if (lp && (lm->term > term || strcmp (lid, self->node_id) < 0))
        {
          g_autoptr(GPtrArray) mine = str_array_copy (members (self));
          transition (self, RLX_ROLE_JOINING, lid, lm->term, "another leader took over");
          /* Our members follow the new leader too: tell them. */
          relay_leader (self, mine, lm, lp);
        }
      break;
    case RLX_ROLE_STOPPED:
    case RLX_ROLE_N:
    default:
      break;
    }
}

static void
on_message (RlxPeerSet *set, RlxPeer *p, RlxMsg *m, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  BUSY_BEGIN;

  if (role (self) == RLX_ROLE_STOPPED)
    goto out;
  switch (m->kind)
    {
    case RLX_MSG_STEP:
      on_step_msg (self, p, m);
      break;
    case RLX_MSG_GRAD:
      if (rlx_leadership_is_leader (self->lead))
        leader_on_grad (self, p, m);
      break;
    case RLX_MSG_ACK:
      if (rlx_leadership_is_leader (self->lead))
        leader_on_ack (self, p, &m->u.ack);
      break;
    case RLX_MSG_SNAPSHOT:
      on_snapshot (self, p, m);
      break;
    case RLX_MSG_JOIN:
      if (rlx_leadership_is_leader (self->lead) && !self->finished)
        leader_admit (self, p, &m->u.join);
      break;
    case RLX_MSG_LEADER:
      on_leader_msg (self, p, &m->u.leader);
      break;
    case RLX_MSG_REJECT:
      {
        JsonObject *o = event_new ("rejected");
        json_object_set_string_member (o, "node", self->node_id);
        json_object_set_int_member (o, "step", (gint64) m->u.reject.step);
        json_object_set_string_member (o, "reason", m->u.reject.reason);
        json_object_set_string_member (o, "by", p->id);
        event_emit (self, o);
        break;
      }
    case RLX_MSG_HELLO:
    case RLX_MSG_REFUSE:
    case RLX_MSG_HEARTBEAT:
    case RLX_MSG_BYE:
    case RLX_MSG_N_KINDS:
    default:
      break;
    }
out:
  BUSY_END;
}

static void
on_peer_lost (RlxPeerSet *set, RlxPeer *p, const char *reason, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  g_autofree char *id = g_strdup (p->id);
  gboolean member = rlx_leadership_has_member (self->lead, id);
  RlxRole r = role (self);
  BUSY_BEGIN;

  if (r == RLX_ROLE_STOPPED)
    goto out;
  /* A peer of our cohort closed on us right after our own loop stood still
   * past the heartbeat timeout: the cohort timed *us* out and went on
   * without us. Taking over or carrying on would split it: rejoin. */
  if (member && (r == RLX_ROLE_MEMBER || r == RLX_ROLE_LEADER) &&
      rlx_peer_set_stalled_recently (self->peers) && !g_str_has_prefix (reason, "bye"))
    {
      g_autofree char *why = g_strdup_printf ("%s closed its link (%s)", id, reason);
      cut_off (self, why);
      goto out;
    }
  if (r == RLX_ROLE_LEADER)
    {
      if (rlx_leadership_remove_member (self->lead, id))
        {
          emit_member (self, "member-left", id, reason);
          roster_sync (self);
          g_hash_table_remove (self->members_state, id);
          rlx_round_close_slot (self->round, id);
          commits_check (self);
        }
    }
  else if (g_strcmp0 (id, rlx_leadership_get_leader (self->lead)) == 0)
    leader_lost (self, id, reason);
  else if (member)
    roster_sync (self);
out:
  BUSY_END;
}

static void
on_refused (RlxPeerSet *set, const char *node, const char *reason, const char *by, RlxMsg *hello,
            gpointer user_data)
{
  RlxCoordinator *self = user_data;
  JsonObject *o = event_new ("refused");

  json_object_set_string_member (o, "node", node);
  json_object_set_string_member (o, "reason", reason);
  json_object_set_string_member (o, "by", by);
  event_emit (self, o);
  /* Refused by (or refusing) a cohort that exists: this node cannot take
   * part. */
  if (hello && (hello->u.hello.role == RLX_ROLE_LEADER || hello->u.hello.role == RLX_ROLE_MEMBER) &&
      (role (self) == RLX_ROLE_ALONE || role (self) == RLX_ROLE_JOINING))
    {
      g_autofree char *msg = g_strdup_printf ("cannot join cohort %s: %s", self->cohort, reason);
      finish (self, FALSE, msg);
    }
  else if (hello == NULL && (role (self) == RLX_ROLE_ALONE || role (self) == RLX_ROLE_JOINING))
    {
      RlxPeer *p = NULL;
      for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
        if (g_strcmp0 (rlx_peer_set_nth (self->peers, i)->id, by) == 0)
          p = rlx_peer_set_nth (self->peers, i);
      if (p && (p->role == RLX_ROLE_LEADER || p->role == RLX_ROLE_MEMBER))
        {
          g_autofree char *msg = g_strdup_printf ("cannot join cohort %s: %s", self->cohort, reason);
          finish (self, FALSE, msg);
        }
    }
}

static void
on_dropped (RlxPeerSet *set, RlxPeer *p, const char *klass, guint64 total, const char *reason,
            gpointer user_data)
{
  RlxCoordinator *self = user_data;
  JsonObject *o = event_new ("dropped");

  json_object_set_string_member (o, "node", p->id ? p->id : rlx_link_get_peer (p->link));
  json_object_set_string_member (o, "class", klass);
  json_object_set_int_member (o, "total", (gint64) total);
  json_object_set_string_member (o, "reason", reason);
  event_emit (self, o);
}

static void
on_send_failed (RlxPeerSet *set, RlxPeer *p, const char *reason, gpointer user_data)
{
  emit_simple (user_data, "send-failed", p->id ? p->id : rlx_link_get_peer (p->link), reason);
}

static void
on_bad_frame (RlxPeerSet *set, RlxPeer *p, const char *message, gpointer user_data)
{
  emit_simple (user_data, "error", p->id ? p->id : rlx_link_get_peer (p->link), message);
}

/* The dynamic part of our hello (and heartbeats). */
static void
fill_hello (RlxMsgHello *h, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  RlxBackend *b = rlx_worker_backend (self->worker);
  RlxRole r = role (self);

  h->backend = g_strdup (rlx_backend_name (b));
  h->device = g_strdup (rlx_backend_device (b));
  h->fallback = g_strdup (rlx_backend_fallback (b));
  h->host = g_strdup (self->host);
  h->precision = self->precision;
  h->batch = self->batch;
  h->max_batch = rlx_backend_max_batch (b);
  h->role = r;
  h->leader = g_strdup (rlx_leadership_get_leader (self->lead));
  h->term = rlx_leadership_get_term (self->lead);
  h->step = applied (self);
  h->members = (r == RLX_ROLE_LEADER || r == RLX_ROLE_MEMBER) ? members (self)->len : 0;
  h->checkpoint = self->resume.params ? self->resume.step : 0;
  h->join_only = self->join_only;
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
maybe_checkpoint (RlxCoordinator *self, gboolean force)
{
  guint64 step = applied (self);

  if (!rlx_leadership_is_leader (self->lead))
    return;
  if (force || (self->checkpoint_every > 0 && step > 0 && step % self->checkpoint_every == 0))
    rlx_checkpointer_save (self->ckpt, self->replica, self->lr);
}

static void
on_checkpoint_written (RlxCheckpointer *ckpt, guint64 step, const char *path, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  JsonObject *o = event_new ("checkpoint");

  json_object_set_int_member (o, "step", (gint64) step);
  json_object_set_string_member (o, "path", path);
  event_emit (self, o);
  if (self->finish_after_checkpoint && !self->finished && !rlx_checkpointer_busy (ckpt))
    finish (self, TRUE, "all steps committed");
  if (self->leave_id != 0)
    self->leave_deadline = MIN (self->leave_deadline, g_get_monotonic_time () + 1000000);
}

static void
on_checkpoint_failed (RlxCheckpointer *ckpt, const char *message, gpointer user_data)
{
  RlxCoordinator *self = user_data;

  emit_error (self, message);
  if (self->finish_after_checkpoint && !self->finished && !rlx_checkpointer_busy (ckpt))
    finish (self, TRUE, "all steps committed");
}

/* ── evaluation (config evaluate_every) ─────────────────────────────────── */

typedef struct {
  RlxCoordinator *self;
  float          *params;
  guint64         step;
  double          accuracy, loss;
} Eval;

static void
eval_free (gpointer p)
{
  Eval *e = p;

  g_object_unref (e->self);
  g_free (e->params);
  g_free (e);
}

static void
eval_copy (const float *params, gsize n, gpointer data)
{
  ((Eval *) data)->params = g_memdup2 (params, n * sizeof (float));
}

static void
eval_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  Eval *e = data;
  g_autoptr(RlxCpuTrainer) trainer = rlx_cpu_trainer_new (e->self->model, 1000);

  e->accuracy = rlx_cpu_evaluate (trainer, e->params, e->self->dataset, RLX_SPLIT_TEST, &e->loss);
  g_task_return_boolean (task, TRUE);
}

static void
on_evaluated (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Eval *e = g_task_get_task_data (G_TASK (result));
  RlxCoordinator *self = e->self;
  JsonObject *o;

  if (g_cancellable_is_cancelled (self->cancellable))
    return;
  o = event_new ("evaluated");
  json_object_set_int_member (o, "step", (gint64) e->step);
  json_object_set_double_member (o, "accuracy", e->accuracy);
  json_object_set_double_member (o, "test_loss", isfinite (e->loss) ? e->loss : -1);
  event_emit (self, o);
}

static void
on_eval_copied (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  Eval *e = user_data;
  g_autoptr(GTask) task = g_task_new (NULL, e->self->cancellable, on_evaluated, NULL);
  Eval *mine = g_new0 (Eval, 1);

  /* The replica frees @e after this: the task gets its own. */
  *mine = *e;
  g_object_ref (mine->self);
  e->params = NULL;
  mine->step = rlx_replica_get_step (replica);
  g_task_set_task_data (task, mine, eval_free);
  g_task_run_in_thread (task, eval_thread);
}

static void
maybe_evaluate (RlxCoordinator *self, guint64 step)
{
  Eval *e;

  if (self->evaluate_every == 0 || step == 0 || step % self->evaluate_every != 0)
    return;
  e = g_new0 (Eval, 1);
  e->self = g_object_ref (self);
  rlx_replica_read (self->replica, eval_copy, e, eval_free, on_eval_copied, e);
}

/* ── finishing and leaving ──────────────────────────────────────────────── */

static void
finish (RlxCoordinator *self, gboolean success, const char *message)
{
  const RlxWireCounters *t = rlx_peer_set_get_totals (self->peers);
  JsonObject *o;

  if (self->finished)
    return;
  self->finished = TRUE;
  self->finish_message = g_strdup (message);
  g_clear_handle_id (&self->found_id, g_source_remove);
  g_clear_handle_id (&self->join_id, g_source_remove);
  rlx_round_cancel (self->round);
  work_clear (self);

  o = event_new ("done");
  json_object_set_string_member (o, "node", self->node_id);
  json_object_set_boolean_member (o, "success", success);
  json_object_set_string_member (o, "message", message);
  json_object_set_int_member (o, "step", (gint64) applied (self));
  set_hash_member (o, "hash", rlx_replica_get_hash (self->replica));
  json_object_set_double_member (o, "loss", rlx_replica_get_loss (self->replica));
  json_object_set_int_member (o, "late", (gint64) self->late_total);
  json_object_set_int_member (o, "rejected", (gint64) self->rejected_total);
  if (self->stat_rounds > 0)
    {
      double r = (double) self->stat_rounds;
      json_object_set_int_member (o, "rounds_measured", (gint64) self->stat_rounds);
      json_object_set_double_member (o, "round_ms", self->stat_round_us / r / 1000.0);
      json_object_set_double_member (o, "compute_ms", self->stat_compute_us / r / 1000.0);
      /* main-loop time of the leader's handlers per round (CPU time of the
       * main thread), socket sends included (send_ms: those alone) */
      json_object_set_double_member (o, "coordinator_ms", self->stat_busy_us / r / 1000.0);
      json_object_set_double_member (o, "send_ms", self->stat_send_us / r / 1000.0);
      /* This process's CPU time (all threads) per round and per sample: a
       * figure other load on the machine disturbs less than wall time. */
      if (self->stat_cpu0_us > 0)
        {
          gint64 cpu = process_cpu_us () - self->stat_cpu0_us;
          json_object_set_double_member (o, "cpu_ms", cpu / r / 1000.0);
          if (cpu > 0)
            json_object_set_double_member (o, "samples_per_cpu_second",
                                           self->stat_samples * 1e6 / (double) cpu);
        }
    }
  json_object_set_int_member (o, "bytes_tx", (gint64) t->tx_bytes);
  json_object_set_int_member (o, "bytes_rx", (gint64) t->rx_bytes);
  json_object_set_int_member (o, "bytes_f32", (gint64) (t->tx_f32_bytes + t->rx_f32_bytes));
  event_emit (self, o);
  g_signal_emit (self, signals[SIG_FINISHED], 0, success, message);
}

static gboolean
on_leave_poll (gpointer user_data)
{
  RlxCoordinator *self = user_data;
  gboolean flushed = !rlx_checkpointer_busy (self->ckpt) && !rlx_replica_busy (self->replica);
  GCallback cb;

  for (guint i = 0; flushed && i < rlx_peer_set_size (self->peers); i++)
    if (!rlx_peer_set_is_flushed (self->peers, rlx_peer_set_nth (self->peers, i)))
      flushed = FALSE;
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
  RlxMsg m;

  g_return_if_fail (RLX_IS_COORDINATOR (self));

  if (!self->finished)
    finish (self, TRUE, reason ? reason : "left");
  rlx_msg_init (&m, RLX_MSG_BYE, self->node_id);
  m.u.bye.reason = g_strdup (reason ? reason : "left");
  rlx_peer_set_broadcast (self->peers, &m);
  rlx_msg_clear (&m);
  transition (self, RLX_ROLE_STOPPED, rlx_leadership_get_leader (self->lead),
              rlx_leadership_get_term (self->lead), NULL);
  rlx_peer_set_stop (self->peers);
  self->leave_cb = callback;
  self->leave_data = user_data;
  /* Wait for the bye (and a final checkpoint) to reach the wire. */
  self->leave_deadline = g_get_monotonic_time () +
                         (rlx_checkpointer_busy (self->ckpt) ? 10000000 : 1000000);
  if (self->leave_id == 0)
    self->leave_id = g_timeout_add (5, on_leave_poll, self);
}

/* ── GObject ────────────────────────────────────────────────────────────── */

static void
rlx_coordinator_dispose (GObject *object)
{
  RlxCoordinator *self = RLX_COORDINATOR (object);

  g_cancellable_cancel (self->cancellable);
  g_clear_handle_id (&self->found_id, g_source_remove);
  g_clear_handle_id (&self->join_id, g_source_remove);
  g_clear_handle_id (&self->leave_id, g_source_remove);
  /* No worker callback after this. */
  g_clear_pointer (&self->worker, rlx_worker_free);
  if (self->peers)
    g_signal_handlers_disconnect_by_data (self->peers, self);
  if (self->round)
    {
      g_signal_handlers_disconnect_by_data (self->round, self);
      rlx_round_cancel (self->round);
    }
  if (self->ckpt)
    g_signal_handlers_disconnect_by_data (self->ckpt, self);
  if (self->replica)
    {
      rlx_replica_cancel (self->replica);
      g_object_set_data (G_OBJECT (self->replica), "applying", NULL);
    }
  g_clear_object (&self->peers);
  g_clear_object (&self->round);
  g_clear_object (&self->ckpt);
  g_clear_object (&self->replica);
  g_clear_object (&self->roster);
  G_OBJECT_CLASS (rlx_coordinator_parent_class)->dispose (object);
}

static void
rlx_coordinator_finalize (GObject *object)
{
  RlxCoordinator *self = RLX_COORDINATOR (object);

  work_clear (self);
  g_queue_clear_full (&self->inbox, msg_free);
  g_queue_clear_full (&self->commits, (GDestroyNotify) commit_free);
  g_clear_pointer (&self->members_state, g_hash_table_unref);
  g_clear_pointer (&self->admit_pending, g_ptr_array_unref);
  g_clear_object (&self->lead);
  g_clear_object (&self->cancellable);
  g_clear_pointer (&self->dataset, rlx_dataset_unref);
  g_free (self->resume.params);
  g_clear_error (&self->checkpoint_error);
  g_free (self->cohort);
  g_free (self->node_id);
  g_free (self->host);
  g_free (self->merge_rule);
  g_clear_pointer (&self->former_members, g_ptr_array_unref);
  g_free (self->merged_reported);
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
    case PROP_ROLE: g_value_set_string (value, rlx_coordinator_get_role (self)); break;
    case PROP_LEADER: g_value_set_string (value, rlx_coordinator_get_leader (self)); break;
    case PROP_TERM: g_value_set_uint64 (value, rlx_coordinator_get_term (self)); break;
    case PROP_STEP: g_value_set_uint64 (value, rlx_coordinator_get_step (self)); break;
    case PROP_LOSS: g_value_set_double (value, rlx_coordinator_get_loss (self)); break;
    case PROP_MEMBERS: g_value_set_uint (value, members (self)->len); break;
    case PROP_BYTES_TX: g_value_set_uint64 (value, rlx_coordinator_get_bytes_tx (self)); break;
    case PROP_BYTES_RX: g_value_set_uint64 (value, rlx_coordinator_get_bytes_rx (self)); break;
    case PROP_BYTES_F32: g_value_set_uint64 (value, rlx_coordinator_get_bytes_f32 (self)); break;
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
  signals[SIG_DISCOVER] = g_signal_new ("discover", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                        0, NULL, NULL, NULL, G_TYPE_NONE, 0);
}

static void
rlx_coordinator_init (RlxCoordinator *self)
{
  g_queue_init (&self->work);
  g_queue_init (&self->inbox);
  g_queue_init (&self->commits);
  self->members_state = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, member_state_free);
  self->admit_pending = g_ptr_array_new_with_free_func (g_free);
  self->roster = rlx_roster_new ();
  self->cancellable = g_cancellable_new ();
}

RlxCoordinator *
rlx_coordinator_new (const RlxCoordinatorConfig *config, RlxWorker *worker, GError **error)
{
  g_autoptr(RlxCoordinator) self = NULL;
  g_autofree char *seed = NULL;
  g_autofree char *dir = NULL;
  RlxPeerSetIdentity me = { 0 };
  RlxBackend *backend;

  g_return_val_if_fail (config != NULL, NULL);
  g_return_val_if_fail (worker != NULL, NULL);

  self = g_object_new (RLX_TYPE_COORDINATOR, NULL);
  self->worker = worker;
  backend = rlx_worker_backend (worker);
  self->model = rlx_backend_model (backend);
  self->dataset = rlx_dataset_ref (rlx_backend_dataset (backend));
  self->n = self->model->n_params;

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
  if (strlen (self->node_id) > RLX_MSG_MAX_ID)
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_INVALID,
                   "node id '%s' is longer than %d bytes", self->node_id, RLX_MSG_MAX_ID);
      return NULL;
    }
  self->host = g_strdup (config->host ? config->host : g_get_host_name ());
  self->precision = config->precision;
  self->error_feedback = config->error_feedback;
  self->batch = config->batch;
  self->lr = config->lr;
  self->steps = config->steps;
  self->checkpoint_every = config->checkpoint_every;
  self->wait_members = MAX (1u, config->wait_members);
  self->deadline_floor_ms = config->deadline_floor_ms ? config->deadline_floor_ms : 500;
  self->fault_nan_from = config->fault_nan_from;
  self->fault_inf_from = config->fault_inf_from;
  self->fault_hash_at = config->fault_hash_at;
  self->fault_stall_step = config->fault_stall_step;
  self->fault_stall_ms = config->fault_stall_ms;
  self->fault_die_at = config->fault_die_at;
  self->evaluate_every = config->evaluate_every;
  self->join_only = config->join_only;

  dir = config->checkpoint_dir
    ? g_strdup (config->checkpoint_dir)
    : g_build_filename (g_get_user_data_dir (), "rlx-cluster", self->cohort, NULL);
  self->ckpt = rlx_checkpointer_new (dir, self->cohort, self->model, self->dataset, error);
  if (self->ckpt == NULL)
    return NULL;
  /* Only a founder resumes; a node that joins a running cohort does not
   * care what the folder holds, so an unusable checkpoint only stops us
   * from founding (see found). */
  rlx_checkpointer_load (self->ckpt, &self->resume, &self->checkpoint_error);
  g_signal_connect (self->ckpt, "written", G_CALLBACK (on_checkpoint_written), self);
  g_signal_connect (self->ckpt, "failed", G_CALLBACK (on_checkpoint_failed), self);

  self->lead = rlx_leadership_new (self->node_id);
  self->replica = rlx_replica_new (self->model, self->dataset, config->seed);
  self->round = rlx_round_new (self->n);
  g_signal_connect (self->round, "complete", G_CALLBACK (on_round_complete), self);
  g_signal_connect (self->round, "rejected", G_CALLBACK (on_round_rejected), self);
  g_signal_connect (self->round, "late", G_CALLBACK (on_round_late), self);

  seed = g_strdup_printf ("%" G_GUINT64_FORMAT, config->seed);
  me.node_id = self->node_id;
  me.cohort = self->cohort;
  me.seed = seed;
  me.model = self->model->slug;
  me.dataset = rlx_dataset_slug (self->dataset);
  self->peers = rlx_peer_set_new (&me, fill_hello, self);
  rlx_peer_set_set_timeout (self->peers, config->heartbeat_timeout_ms ? config->heartbeat_timeout_ms
                                                                       : 3000);
  g_signal_connect (self->peers, "peer-ready", G_CALLBACK (on_peer_ready), self);
  g_signal_connect (self->peers, "message", G_CALLBACK (on_message), self);
  g_signal_connect (self->peers, "peer-lost", G_CALLBACK (on_peer_lost), self);
  g_signal_connect (self->peers, "refused", G_CALLBACK (on_refused), self);
  g_signal_connect (self->peers, "dropped", G_CALLBACK (on_dropped), self);
  g_signal_connect (self->peers, "send-failed", G_CALLBACK (on_send_failed), self);
  g_signal_connect (self->peers, "bad-frame", G_CALLBACK (on_bad_frame), self);
  return g_steal_pointer (&self);
}

void
rlx_coordinator_start (RlxCoordinator *self)
{
  g_return_if_fail (RLX_IS_COORDINATOR (self));
  g_return_if_fail (!self->started);

  self->started = TRUE;
  start_found_timer (self, DISCOVERY_MS);
  rlx_peer_set_start (self->peers);
}

void
rlx_coordinator_add_link (RlxCoordinator *self, RlxLink *link)
{
  g_return_if_fail (RLX_IS_COORDINATOR (self));
  g_return_if_fail (RLX_IS_LINK (link));

  if (role (self) == RLX_ROLE_STOPPED || rlx_link_is_closed (link))
    return;
  /* What our hello says, for the merge rule (both sides must judge with
   * the same numbers). */
  g_object_set_data (G_OBJECT (link), "rlx-sent-members",
                     GUINT_TO_POINTER (role (self) == RLX_ROLE_LEADER ? members (self)->len : 0));
  g_object_set_data_full (G_OBJECT (link), "rlx-sent-step",
                          g_memdup2 (&(guint64) { applied (self) }, sizeof (guint64)), g_free);
  rlx_peer_set_add_link (self->peers, link);
}

const char *rlx_coordinator_get_node_id (RlxCoordinator *self) { return self->node_id; }
const char *rlx_coordinator_get_role (RlxCoordinator *self) { return rlx_role_name (role (self)); }
const char *rlx_coordinator_get_leader (RlxCoordinator *self) { return rlx_leadership_get_leader (self->lead); }
guint64 rlx_coordinator_get_term (RlxCoordinator *self) { return rlx_leadership_get_term (self->lead); }
guint64 rlx_coordinator_get_step (RlxCoordinator *self) { return applied (self); }
double rlx_coordinator_get_loss (RlxCoordinator *self) { return rlx_replica_get_loss (self->replica); }
GListModel *rlx_coordinator_get_roster (RlxCoordinator *self) { return G_LIST_MODEL (self->roster); }
const char *rlx_coordinator_get_checkpoint_path (RlxCoordinator *self) { return rlx_checkpointer_get_path (self->ckpt); }
const char *rlx_coordinator_get_cohort (RlxCoordinator *self) { return self->cohort; }
RlxPrecision rlx_coordinator_get_precision (RlxCoordinator *self) { return self->precision; }

guint64
rlx_coordinator_get_bytes_tx (RlxCoordinator *self)
{
  return rlx_peer_set_get_totals (self->peers)->tx_bytes;
}

guint64
rlx_coordinator_get_bytes_rx (RlxCoordinator *self)
{
  return rlx_peer_set_get_totals (self->peers)->rx_bytes;
}

guint64
rlx_coordinator_get_bytes_f32 (RlxCoordinator *self)
{
  const RlxWireCounters *t = rlx_peer_set_get_totals (self->peers);
  return t->tx_f32_bytes + t->rx_f32_bytes;
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
  o = event_new ("precision");
  json_object_set_string_member (o, "node", self->node_id);
  json_object_set_string_member (o, "precision", rlx_precision_to_string (precision));
  event_emit (self, o);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_PRECISION]);
  roster_sync (self);
}

const float *
rlx_coordinator_get_params (RlxCoordinator *self, gsize *n_params)
{
  g_return_val_if_fail (RLX_IS_COORDINATOR (self), NULL);
  if (n_params)
    *n_params = self->n;
  return rlx_replica_get_params (self->replica);
}
