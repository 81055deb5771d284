/* rlx-coordinator-private.h — internals of the cohort engine
 *
 * Not part of the API: only core/ and tests/cohort include it.
 *
 * The coordinator is one GObject whose code is split by flow, all sharing
 * the instance struct below:
 *
 *   rlx-coordinator.c          the façade: GObject, public API, properties
 *                              and signals, dispatch of messages and peer
 *                              events, finishing and leaving
 *   rlx-coordinator-events.c   events, sending, the roster, checkpoints,
 *                              evaluation
 *   rlx-coordinator-roles.c    the one transition function, founding,
 *                              joining, failover, cutting off, merging
 *   cohort/rlx-compute-queue.c the rank's compute worker: its queue of work
 *   rlx-coordinator-leader.c   the leader's flow: rounds, commits and
 *                              acknowledgements, admission, snapshots out
 *   rlx-coordinator-member.c   the member's flow: step frames, snapshots in
 *
 * The batch split lives in core/cohort/rlx-split.c.
 */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>
#include <time.h>
#include "rlx-coordinator.h"
#include "rlx-coordinator-faults.h"
#include "core/cohort/rlx-checkpointer.h"
#include "core/cohort/rlx-compute-queue.h"
#include "core/cohort/rlx-leadership.h"
#include "core/cohort/rlx-msg.h"
#include "core/cohort/rlx-peer-set.h"
#include "core/cohort/rlx-replica.h"
#include "core/cohort/rlx-roster.h"
#include "core/cohort/rlx-round.h"
#include "core/cohort/rlx-round-stats.h"

G_BEGIN_DECLS

/* Split @count samples over @k members in proportion to @weights (samples
 * per second, or --batch until every speed is measured): floor of each
 * share, the remainder one by one to the largest fractions; when @count >= @k
 * every member able (weight > 0, max_batch > 0) gets at least one; nobody gets
 * more than its @max_batch, the excess going to members with room. A member
 * with max_batch 0 counts as weight 0. Writes @out[0..k) and returns the sum,
 * which is @count unless the caps leave too little room (then less), or 0
 * when no member is able. */
guint rlx_coordinator_split_batch (guint         count,
                                   const double *weights,
                                   const guint  *max_batch,
                                   guint         k,
                                   guint        *out);

#define DISCOVERY_MS        250
#define FOUND_RETRY_MS      700
#define JOIN_RETRY_MS       1000
#define FIRST_DEADLINE_MS   10000
#define MAX_DEADLINE_MS     30000
/* Commits waiting for acknowledgements, at most; the oldest is reported
 * without the missing ones beyond that. */
#define MAX_PENDING_COMMITS 64

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
  RlxFaultPlan     faults;          /* test faults (rlx-coordinator-faults.h) */
  guint            evaluate_every;

  RlxComputeQueue *queue;          /* the rank's work on its compute worker; owns it */
  RlxWorker       *worker;          /* the queue's (for the backend's facts, the replica) */
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
  gint64           roster_synced_at; /* monotonic µs of the last sync */

  /* the checkpoint found at start, for founding */
  RlxCheckpoint    resume;
  GError          *checkpoint_error;

  /* compute */
  guint64          finish_prequeued; /* the step whose finish is queued already, before its
                                      * round was complete (0: none) */
  guint64          own_prequeued;   /* the step whose own gradient is queued already (0: none) */
  gboolean         params_dirty;    /* the backend took an update the replica does not know */
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
  RlxMsg          *corrupting;      /* the step frame whose report waits for the hash
                                     * fault's corruption (rlx_replica_corrupt) */
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
  GArray          *next_slots;      /* RlxMsgSlot: the next round's assignment, while
                                     * this round's update is being made */
  guint            snapshots_out;   /* snapshots being made for members (leader) */
  guint64          last_commit;     /* the newest commit we published (leader) */
  gboolean         publish_waiting; /* a restart of the round waits for it to be applied */
  GQueue           commits;         /* Commit* */
  GHashTable      *members_state;   /* id → MemberState* */
  double           round_ema_us;
  guint            rounds_measured;
  double           self_speed;
  char            *merged_reported;

  /* what "done" says about the rounds (core/cohort/rlx-round-stats.h) */
  RlxRoundStats   *stats;

  /* timers */
  guint            found_id, join_id;
  guint            found_waits;
  gboolean         waiting_reported;
  gint64           rejoin_until;    /* cut off: no founding before (monotonic µs) */
  /* a member whose leader was lost waits for the successor to announce
   * itself (rlx_coordinator_leader_lost); bounded by successor_id */
  gboolean         awaiting_successor;
  guint            successor_id;
  GCancellable    *cancellable;
  gboolean         joined_reported;
  gboolean         finish_after_checkpoint;
  gboolean         finished;
  int              busy_poll;      /* -1: never, 1: may (a hardware GPU, cores to spare) */
  gboolean         busy_poll_held; /* rlx_busy_poll_hold is ours (training on such a GPU) */
  gboolean         busy_poll_used; /* it was, at some time (the "done" event says so) */
  gboolean         finish_success;
  gboolean         finish_reading;  /* "done" waits for the parameters to be read */
  char            *finish_message;
  gboolean         started;

  /* leave */
  GCallback        leave_cb;
  gpointer         leave_data;
  guint            leave_id;
  gint64           leave_deadline;
};

enum {
  PROP_0, PROP_NODE_ID, PROP_ROLE, PROP_LEADER, PROP_TERM, PROP_STEP, PROP_LOSS,
  PROP_MEMBERS, PROP_BYTES_TX, PROP_BYTES_RX, PROP_BYTES_F32, PROP_ROSTER, PROP_COHORT,
  PROP_PRECISION, N_PROPS
};

/* A snapshot being loaded (member) or adopted (a new leader). */
typedef struct {
  RlxCoordinator *self;
  RlxMsg          msg;
  gint64          common;
  guint64         had;
  guint64         term_base;
  guint64         history_from; /* the first step our hash history holds */
} Loading;

/* Main-loop time of the coordinator's handlers (per round, for "done"). */
#define BUSY_BEGIN gint64 busy_t0 = thread_cpu_us ()
#define BUSY_END rlx_round_stats_add_busy (self->stats, thread_cpu_us () - busy_t0)

/* ── small helpers ──────────────────────────────────────────────────────── */

static inline void
msg_free (gpointer p)
{
  rlx_msg_clear (p);
  g_free (p);
}

/* CPU time of the calling thread, µs: the main loop's time in a handler,
 * which preemption by other processes on a loaded machine does not
 * inflate (wall time would). */
static inline gint64
thread_cpu_us (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_THREAD_CPUTIME_ID, &ts);
  return (gint64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline RlxRole
role (RlxCoordinator *self)
{
  return rlx_leadership_get_role (self->lead);
}

static inline GPtrArray *
members (RlxCoordinator *self)
{
  return rlx_leadership_get_members (self->lead);
}

static inline gboolean
is_self (RlxCoordinator *self, const char *id)
{
  return g_strcmp0 (id, self->node_id) == 0;
}

static inline gboolean
is_alive (const char *id, gpointer user_data)
{
  RlxCoordinator *self = user_data;

  return is_self (self, id) || rlx_peer_set_lookup (self->peers, id) != NULL;
}

static inline gboolean
str_array_contains (GPtrArray *a, const char *s)
{
  for (guint i = 0; a && i < a->len; i++)
    if (g_strcmp0 (g_ptr_array_index (a, i), s) == 0)
      return TRUE;
  return FALSE;
}

static inline gboolean
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

static inline GPtrArray *
str_array_copy (GPtrArray *a)
{
  GPtrArray *out = g_ptr_array_new_with_free_func (g_free);

  for (guint i = 0; a && i < a->len; i++)
    g_ptr_array_add (out, g_strdup (g_ptr_array_index (a, i)));
  return out;
}

static inline guint64
applied (RlxCoordinator *self)
{
  return rlx_replica_get_step (self->replica);
}

static inline JsonObject *
event_new (const char *name)
{
  JsonObject *o = json_object_new ();

  json_object_set_string_member (o, "event", name);
  return o;
}

/* A peer in a cohort (leader or member) tells who leads it. */
static inline const char *
peer_leader (RlxPeer *p)
{
  if (p->role == RLX_ROLE_LEADER)
    return p->id;
  if (p->role == RLX_ROLE_MEMBER)
    return p->leader;
  return NULL;
}

/* ── shared between the files (see the top of this header) ──────────────── */

/* facade */
void rlx_coordinator_notify (RlxCoordinator *self, guint prop);
/* the backend's counters after a step (for "done") */
void rlx_coordinator_note_backend (RlxCoordinator *self, guint64 host_bytes, guint64 ahead,
                                   guint64 update_ahead);
void rlx_coordinator_emit_discover (RlxCoordinator *self);
void rlx_coordinator_event_emit (RlxCoordinator *self, JsonObject *o);

/* events */
void rlx_coordinator_event_emit (RlxCoordinator *self, JsonObject *o);
void rlx_coordinator_set_hash_member (JsonObject *o, const char *name, guint64 hash);
void     rlx_coordinator_emit_simple (RlxCoordinator *self, const char *name, const char *node,
                                      const char *reason);
void rlx_coordinator_emit_error (RlxCoordinator *self, const char *message);
void rlx_coordinator_emit_joined (RlxCoordinator *self);
void rlx_coordinator_emit_leader (RlxCoordinator *self);
void     rlx_coordinator_emit_member (RlxCoordinator *self, const char *name, const char *id,
                                      const char *reason);
void rlx_coordinator_note_assigned (RlxCoordinator *self, guint64 step, guint count);
void     rlx_coordinator_emit_step (RlxCoordinator *self, guint64 step, guint64 hash, double loss,
                                    guint64 samples, GPtrArray *contributors, guint late,
                                    guint rejected, guint n_members);
gboolean rlx_coordinator_send_msg (RlxCoordinator *self, RlxPeer *p, const RlxMsg *m);
gboolean rlx_coordinator_send_frame (RlxCoordinator *self, RlxPeer *p, RlxSendClass klass,
                                     GBytes *frame, gsize n, RlxPrecision precision);
void rlx_coordinator_send_leader_msg (RlxCoordinator *self, RlxPeer *p);
void rlx_coordinator_send_join (RlxCoordinator *self, const char *reason);
void rlx_coordinator_send_ack (RlxCoordinator *self);
void rlx_coordinator_note_precision (RlxCoordinator *self, RlxPeer *p, RlxPrecision precision);
void rlx_coordinator_roster_sync (RlxCoordinator *self);
void rlx_coordinator_members_replace (RlxCoordinator *self, GPtrArray *next);
void rlx_coordinator_maybe_checkpoint (RlxCoordinator *self, gboolean force);
void rlx_coordinator_on_checkpoint_written (RlxCheckpointer *ckpt, guint64 step, const char *path,
                                            gpointer user_data);
void rlx_coordinator_on_checkpoint_failed (RlxCheckpointer *ckpt, const char *message,
                                           gpointer user_data);

/* Busy polling (core/p2p/rlx-busy-poll.h) from the first committed step
 * of a rank allowed to (RLX_BUSY_POLL) until it finishes. */
void rlx_coordinator_busy_poll_begin (RlxCoordinator *self);
void rlx_coordinator_busy_poll_end   (RlxCoordinator *self);
void rlx_coordinator_finish (RlxCoordinator *self, gboolean success, const char *message);

/* leader */
void rlx_coordinator_round_abandon (RlxCoordinator *self);
void rlx_coordinator_commit_free (Commit *c);
void rlx_coordinator_member_state_free (gpointer p);
void rlx_coordinator_commits_check (RlxCoordinator *self);
void rlx_coordinator_leader_publish (RlxCoordinator *self, gboolean commit);
void rlx_coordinator_on_round_complete (RlxRound *round, gpointer user_data);
void rlx_coordinator_send_reject (RlxCoordinator *self, const char *id, guint64 step,
                                  const char *reason);
void rlx_coordinator_on_round_rejected (RlxRound *round, const char *node, guint64 step,
                                        const char *reason, gpointer user_data);
void rlx_coordinator_on_round_late (RlxRound *round, const char *node, guint64 step,
                                    const char *reason, gpointer user_data);
void rlx_coordinator_leader_on_grad (RlxCoordinator *self, RlxPeer *p, RlxMsg *m);
void rlx_coordinator_leader_on_ack (RlxCoordinator *self, RlxPeer *p, RlxMsgAck *a);
void rlx_coordinator_send_snapshot (RlxCoordinator *self, RlxPeer *p, const char *reason);
void rlx_coordinator_leader_admit (RlxCoordinator *self, RlxPeer *p, RlxMsgJoin *join);
void rlx_coordinator_on_adopted (RlxReplica *replica, gboolean ok, gpointer user_data);
/* a leader operation's result (RlxComputeQueueCallbacks) */
void rlx_coordinator_leader_done (RlxLeaderOp *op, const GError *error, gpointer user_data);

/* member */
void rlx_coordinator_on_step_msg (RlxCoordinator *self, RlxPeer *p, RlxMsg *m);
void rlx_coordinator_loading_free (Loading *l);
void rlx_coordinator_emit_snapshot_from (RlxCoordinator *self, const char *from, guint64 step,
                                         guint64 hash, const char *reason);
void rlx_coordinator_on_snapshot (RlxCoordinator *self, RlxPeer *p, RlxMsg *m);
/* a member step's result (RlxComputeQueueCallbacks) */
void rlx_coordinator_member_stepped (RlxMemberStep *ms, const GError *error, gpointer user_data);

/* roles */
void rlx_coordinator_start_found_timer (RlxCoordinator *self, guint ms);
void rlx_coordinator_transition (RlxCoordinator *self, RlxRole to, const char *leader, guint64 term,
                                 const char *reason);
void rlx_coordinator_found (RlxCoordinator *self);
void rlx_coordinator_request_snapshot (RlxCoordinator *self, const char *reason);
void rlx_coordinator_cut_off (RlxCoordinator *self, const char *why);
void rlx_coordinator_leader_lost (RlxCoordinator *self, const char *old, const char *reason);
gboolean rlx_coordinator_successor_check (RlxCoordinator *self, RlxPeer *p);
void rlx_coordinator_merge_with (RlxCoordinator *self, RlxPeer *p, guint sent_members,
                                 guint64 sent_step);
void rlx_coordinator_on_leader_msg (RlxCoordinator *self, RlxPeer *p, RlxMsgLeader *lm);

G_END_DECLS
