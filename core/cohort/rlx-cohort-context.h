/* rlx-cohort-context.h — what the cohort's role objects work over
 *
 * The coordinator (core/rlx-coordinator.c) is a façade: it routes messages,
 * peer events and compute results to the object of the role that handles
 * them (the leader, core/cohort/rlx-leader.h; the follower,
 * core/cohort/rlx-follower.h). Those objects never call each other or the
 * coordinator's internals; they see only this context:
 *
 *   settings    this node's id and configuration (the wire precision
 *               changes at run time: read it here each time)
 *   pieces      the peer set, the leadership state, the lineage, the
 *               replica, the compute queue, the round statistics, the
 *               snapshots out, the sync mode (owned by the coordinator; the
 *               pointers never change while it runs)
 *   shared      the few facts more than one role writes: this node's
 *               measured speed, whether a snapshot is being loaded
 *   ops         what only the owner can do: emit an event, send, report a
 *               commit, change the role, checkpoint, finish, ask for a
 *               snapshot, …
 *
 * Threads: the coordinator's (its thread-default main context), like
 * everything it points at.
 */
#pragma once

#include <json-glib/json-glib.h>
#include "core/event/rlx-event.h"
#include "core/cohort/rlx-compute-queue.h"
#include "core/cohort/rlx-fault-plan.h"
#include "core/cohort/rlx-leadership.h"
#include "core/cohort/rlx-lineage.h"
#include "core/cohort/rlx-msg.h"
#include "core/cohort/rlx-peer-set.h"
#include "core/cohort/rlx-replica.h"
#include "core/cohort/rlx-round-stats.h"
#include "core/cohort/rlx-sync-state.h"

G_BEGIN_DECLS

typedef struct _RlxSnapshots RlxSnapshots;

/* What only the owner can do. @owner is RlxCohortContext.owner. */
typedef struct {
  /* one event (taken) */
  void     (*emit)          (gpointer owner, RlxEvent *event);
  gboolean (*send_msg)      (gpointer owner, RlxPeer *p, const RlxMsg *m);
  gboolean (*send_frame)    (gpointer owner, RlxPeer *p, RlxSendClass klass, GBytes *frame,
                             gsize n, RlxPrecision precision);
  /* a step is committed here: the "step" event, properties, roster,
   * evaluation; @agree: the ranks whose hash after it agreed (0: not known
   * here, on a member) */
  void     (*committed)     (gpointer owner, guint64 step, guint64 hash, double loss,
                             guint64 samples, GPtrArray *contributors, guint late,
                             guint rejected, guint n_members, guint agree);
  /* the committed step changed (a snapshot adopted, a commit applied) */
  void     (*step_changed)  (gpointer owner);
  /* this node's share of @step (the "step" event's "assigned") */
  void     (*assigned)      (gpointer owner, guint64 step, guint count);
  /* a member joined (RLX_EVENT_MEMBER_JOINED) or left; @reason NULL for a join */
  void     (*member_event)  (gpointer owner, RlxEventKind kind, const char *id,
                             const char *reason);
  /* a peer's frames come at another precision now */
  void     (*peer_precision) (gpointer owner, RlxPeer *p, RlxPrecision precision);
  /* the commit of @step was reported: checkpoint if it is time (every K
   * reported steps; the last, @final: always, then finish) */
  void     (*checkpoint)    (gpointer owner, guint64 step, gboolean final);
  /* training has begun here (busy polling may start) */
  void     (*training)      (gpointer owner);
  void     (*finish)        (gpointer owner, gboolean success, const char *message);
  gboolean (*finished)      (gpointer owner);
  /* leave the cohort's state and rejoin through a snapshot */
  void     (*request_snapshot) (gpointer owner, const char *reason);
  /* the one place the role changes (leader, term; @reason: the join's, or
   * why this node rejoins) */
  void     (*transition)    (gpointer owner, RlxRole to, const char *leader, guint64 term,
                             const char *reason);
  /* the leader's member list (taken): the difference reported, the roster */
  void     (*replace_members) (gpointer owner, GPtrArray *members);
  /* this node is in the cohort now: "leader" and "joined", once */
  void     (*joined)        (gpointer owner);
  /* the leader is about to assign rounds with no commit before them (the
   * first, or a restart): a sync choice may be made now (nullable) */
  void     (*rounds_begin)  (gpointer owner, guint n_members);
  /* the leader takes @id out of its group (@reason, for member-left) */
  void     (*drop_member)   (gpointer owner, const char *id, const char *reason);
} RlxCohortOps;

typedef struct {
  /* settings */
  const char      *node_id;
  gsize            n;                 /* parameters */
  RlxPrecision     precision;         /* this node's wire precision, now */
  gboolean         error_feedback;
  guint            batch;
  double           lr;
  gboolean         lr_fixed;          /* outer mode: the inner lr stays lr (no √members) */
  guint64          steps;             /* done once committed; 0: never */
  guint            wait_members;
  guint            deadline_floor_ms;
  double           max_norm_ratio;    /* a member's bucket over this × the median of the
                                       * recent ones is refused; ≤ 0: never */
  RlxFaultPlan     faults;            /* test faults (rlx-fault-plan.h) */
  /* pieces */
  RlxPeerSet      *peers;
  RlxLeadership   *lead;
  RlxLineage      *lineage;
  RlxReplica      *replica;
  RlxComputeQueue *queue;
  RlxRoundStats   *stats;
  RlxSnapshots    *snapshots;
  RlxSyncState    *sync;              /* the cohort's sync mode (the leader's choice) */
  /* shared */
  double           self_speed;        /* samples/s of this node's compute, measured */
  double           self_compute_us;   /* µs its share of a step took, smoothed */
  double           self_inner_us;     /* outer rounds: µs of one of its inner steps, smoothed
                                       * (rlx_outer_engine_inner_us; 0: none yet) */
  gboolean         loading;           /* a snapshot is being loaded into the replica */
  double           member_round_us;   /* as a member: µs between the commits it applied,
                                       * smoothed (0: none yet); a new leader's first
                                       * collect deadline after a failover */
  gint64           member_commit_at;  /* monotonic µs of the last one (0: none) */
  /* ops */
  const RlxCohortOps *ops;
  gpointer         owner;             /* a GObject: work in flight holds a reference */
} RlxCohortContext;

/* ── helpers for the role objects ── */

static inline gboolean
rlx_cohort_is_self (const RlxCohortContext *ctx, const char *id)
{
  return g_strcmp0 (id, ctx->node_id) == 0;
}

static inline guint64
rlx_cohort_applied (const RlxCohortContext *ctx)
{
  return rlx_replica_get_step (ctx->replica);
}

static inline GPtrArray *
rlx_cohort_members (const RlxCohortContext *ctx)
{
  return rlx_leadership_get_members (ctx->lead);
}

/* Step @step is the last the cohort was asked for, or past it. */
static inline gboolean
rlx_cohort_at_last_step (const RlxCohortContext *ctx, guint64 step)
{
  return ctx->steps > 0 && step >= ctx->steps;
}

static inline gboolean
rlx_cohort_str_array_contains (GPtrArray *a, const char *s)
{
  for (guint i = 0; a && i < a->len; i++)
    if (g_strcmp0 (g_ptr_array_index (a, i), s) == 0)
      return TRUE;
  return FALSE;
}

static inline gboolean
rlx_cohort_str_array_remove (GPtrArray *a, const char *s)
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
rlx_cohort_str_array_copy (GPtrArray *a)
{
  GPtrArray *out = g_ptr_array_new_with_free_func (g_free);

  for (guint i = 0; a && i < a->len; i++)
    g_ptr_array_add (out, g_strdup (g_ptr_array_index (a, i)));
  return out;
}

/* "error" with this node's id. */
void        rlx_cohort_emit_error (RlxCohortContext *ctx, const char *message);
/* "snapshot" from @from (loaded here). */
void        rlx_cohort_emit_snapshot_from (RlxCohortContext *ctx, const char *from, guint64 step,
                                           guint64 hash, const char *reason);
/* "leader" (who leads, the term, our step) to @p, or to every peer. */
void        rlx_cohort_send_leader (RlxCohortContext *ctx, RlxPeer *p);
/* The die_at test fault (rlx-fault-plan.h): send the commit @frame to
 * every member but the next in seniority, then die once it is written. */
void        rlx_cohort_die_after_partial_commit (RlxCohortContext *ctx, GBytes *frame);
/* Fold a measured speed into ctx->self_speed. */
void        rlx_cohort_note_self_speed (RlxCohortContext *ctx, guint samples, gint64 compute_us);
/* Fold a measured compute time of one inner step (µs, outer rounds) into
 * *@smoothed (ctx->self_inner_us, a peer's inner_us); ≤ 0 is ignored. */
void        rlx_cohort_note_inner      (double *smoothed, double inner_us);

/* ── snapshots out ──
 * Our full-precision state to a peer, read from the backend after
 * everything queued on the worker before it, and sent on the bulk lane.
 * @sent runs (on the owner's context) after each one went out, with the
 * state it carried and its "snapshot" event (taken: @sent emits it, after
 * noting the state the peer now has). */
typedef void (*RlxSnapshotSentFunc) (const char *to, guint64 step, guint64 hash,
                                     RlxEvent *event, gpointer user_data);
RlxSnapshots *rlx_snapshots_new     (RlxCohortContext *ctx, RlxSnapshotSentFunc sent,
                                     gpointer user_data);
void          rlx_snapshots_free    (RlxSnapshots *self);
void          rlx_snapshots_send    (RlxSnapshots *self, RlxPeer *p, const char *reason);
/* The same for a joiner at step @around (its join's): the snapshot's hashes
 * end there if it is behind, so it finds where it parted (0: the newest). */
void          rlx_snapshots_send_around (RlxSnapshots *self, RlxPeer *p, const char *reason,
                                         guint64 around);
/* Snapshots being made, not yet sent. */
guint         rlx_snapshots_pending (RlxSnapshots *self);

G_END_DECLS
