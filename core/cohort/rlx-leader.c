/* rlx-leader.c — the leader's flow: assigning and collecting rounds,
 * publishing commits and reporting them once acknowledged, admitting
 * members, adopting a member's state (rlx-leader.h)
 *
 * Over 1,000 lines: the rounds of both sync modes (the outer mode's
 * overlapped ones too) share one round state; admission and adopting a
 * member's state are the part to move out first.
 */
#include "rlx-config.h"
#include "rlx-leader.h"
#include "rlx-sample-log.h"
#include "core/cohort/rlx-commits.h"
#include "core/cohort/rlx-norm-guard.h"
#include "core/cohort/rlx-outer.h"
#include "core/cohort/rlx-round.h"
#include "core/cohort/rlx-split.h"
#include "core/p2p/rlx-trace.h"
#include "core/rlx-sources.h"

#include <math.h>
#include <string.h>

/* A member's snapshot being adopted (a new leader behind a member). */
typedef struct {
  RlxLeader      *self;
  RlxMsg          msg;
} Adopting;

/* Steps whose assignment times the leader keeps (a ring by step). */
#define ASSIGNED_RING 8

struct _RlxLeader {
  RlxCohortContext *ctx;
  RlxRound        *round;
  guint64          round_step;
  guint            round_epoch, round_pos, round_count;
  gboolean         rounds_started;
  gboolean         finishing_round; /* the update of the round is being made */
  gboolean         round_waiting;   /* complete, waiting for our replica's hash */
  GArray          *next_slots;      /* RlxMsgSlot: the next round's assignment, while
                                     * this round's update is being made */
  guint64          last_commit;     /* the newest commit we published */
  gboolean         publish_waiting; /* a restart of the round waits for it to be applied */
  RlxCommits      *commits;         /* published, not yet acknowledged by every member; and
                                     * what each member acknowledged */
  double           round_ema_us;
  gint64           timing_at;       /* when the last "timing" events went out */
  /* when the assignment of each of the last steps was made, and how long
   * after it the round's first bucket came: a member's speed is measured
   * from there (rlx_leader_on_grad) */
  guint64          assigned_step[ASSIGNED_RING];
  gint64           assigned_us[ASSIGNED_RING];
  gint64           assigned_first[ASSIGNED_RING];
  guint            rounds_measured;
  double           takeover_round_us; /* after a failover: the cohort's round time as we saw
                                       * it as a member (0: none; founded) */
  guint64          finish_prequeued; /* the step whose finish is queued already, before its
                                      * round was complete (0: none) */
  guint64          own_prequeued;   /* the step whose own gradient is queued already (0: none) */
  gboolean         params_dirty;    /* the backend took an update the replica does not know */
  /* the sync mode of the round being collected, of the one that starts
   * after it, and of the one the last assignment made (the cohort's choice
   * when it was assigned: rlx-sync-state.h) */
  RlxOuterSettings round_outer, next_outer, assigned_outer;
  /* Overlap (the outer mode's lag 1): the round after the next one, which
   * the members already know and compute (docs/PROTOCOL.md, "Overlap") */
  struct {
    guint64          step;            /* 0: none */
    guint            epoch, pos, count;
    GArray          *slots;
    RlxOuterSettings outer;
  } ahead;
  guint64          restart_at;      /* the applied step the last restart built on */
  GPtrArray       *held_own;        /* HeldOwn: our own results of rounds not begun yet */
  RlxNormGuard     norms;           /* the members' recent bucket norms: a bucket far
                                     * outside them is refused (rlx-norm-guard.h) */
};

/* Our own contribution's result, kept until its round begins (overlap). */
typedef struct _HeldOwn {
  guint64 step;
  guint   n;
  float   loss;
  gint64  compute_us, run_us;
  char   *refused;
  gint64  inner_us;
} HeldOwn;

static void
held_own_free (HeldOwn *h)
{
  g_free (h->refused);
  g_free (h);
}

/* Main-loop time of the leader's handlers (per round, for "done"). */
#define BUSY_BEGIN gint64 busy_t0 = rlx_round_stats_now ()
#define BUSY_END rlx_round_stats_add_busy (self->ctx->stats, rlx_round_stats_now () - busy_t0)

/* What the owner does for us (RlxCohortOps). */
#define OWNER(op, ...) self->ctx->ops->op (self->ctx->owner, __VA_ARGS__)

static void leader_finalize (RlxLeader *self);
static void send_reject (RlxLeader *self, const char *id, guint64 step, const char *reason);
static void own_result (RlxLeader *self, const HeldOwn *h);
static void drop_silent (RlxLeader *self);
static void publish_overlapped (RlxLeader *self, guint64 c, gboolean final);

static void
emit (RlxLeader *self, RlxEvent *e)
{
  OWNER (emit, e);
}

static guint
own_max_batch (RlxLeader *self)
{
  RlxWorker *worker = rlx_compute_queue_get_worker (self->ctx->queue);

  return rlx_backend_max_batch (rlx_worker_backend (worker));
}

static gboolean
finished (RlxLeader *self)
{
  return self->ctx->ops->finished (self->ctx->owner);
}

/* A round's slots (rlx_split_assign) from @pos, in the sync mode in force
 * (an outer round of H inner steps takes H times the global batch); its
 * settings into assigned_outer, its sample count into *@count. */
static GArray *
assign_at (RlxLeader *self, guint pos, guint *count)
{
  GArray *slots;

  rlx_sync_state_settings (self->ctx->sync, self->ctx->lr, &self->assigned_outer);
  slots = rlx_split_assign_rounds (self->ctx, pos, MAX (1u, self->assigned_outer.h), count);
  if (self->assigned_outer.h > 0 && !self->ctx->lr_fixed)
    self->assigned_outer.inner_lr = rlx_outer_inner_lr (self->ctx->lr, rlx_split_ranks (slots));
  if (rlx_sync_state_note_inner_lr (self->ctx->sync, &self->assigned_outer))
    OWNER (emit, rlx_sync_state_event (self->ctx->sync));
  return slots;
}

/* The next round's slots, from round_pos on. */
static GArray *
leader_assign (RlxLeader *self)
{
  GArray *slots = assign_at (self, self->round_pos, &self->round_count);

  self->next_outer = self->assigned_outer;
  return slots;
}

/* Whether rounds overlap (the outer mode's lag): the assignment in force
 * says. */
static gboolean
overlapped (RlxLeader *self)
{
  return self->assigned_outer.h > 0 && self->assigned_outer.lag > 0;
}

static void
ahead_clear (RlxLeader *self)
{
  self->ahead.step = 0;
  g_clear_pointer (&self->ahead.slots, g_array_unref);
}

/* The step a bucket of @step was computed from: the last commit the
 * member had applied when its round began (with overlap one further back,
 * but not before the restart its rounds began from). */
static guint64
bucket_base (RlxLeader *self, guint64 step)
{
  if (!overlapped (self) || step < 2)
    return step - 1;
  return MAX (step - 2, MIN (self->restart_at, step - 1));
}

static guint
deadline_ms (RlxLeader *self)
{
  double us;

  /* A leader's first rounds wait long (the ranks are warming up) — unless
   * it took over a cohort that was running: then its members are warm,
   * and it knows their round time from the commits it applied as one of
   * them. A member frozen at the failover otherwise held each of the new
   * leader's first rounds for 10 s, or until the heartbeat dropped it
   * (chaos.py seed 62: 9 s without a commit, members frozen in turn). */
  if (self->rounds_measured < 3 && self->takeover_round_us <= 0)
    return rlx_round_deadline_ms (0, self->ctx->deadline_floor_ms, self->round_outer.h);
  us = self->rounds_measured == 0 ? self->takeover_round_us
     : self->rounds_measured < 3 ? MAX (self->takeover_round_us, self->round_ema_us)
                                 : self->round_ema_us;
  /* (measured: never the unmeasured rule, even for a round under 1 µs) */
  return rlx_round_deadline_ms (MAX (us, 1.0), self->ctx->deadline_floor_ms, self->round_outer.h);
}

double
rlx_leader_round_us (RlxLeader *self)
{
  return self->rounds_measured > 0 ? self->round_ema_us : self->takeover_round_us;
}

/* The step message of a round (everything but the update): step @step
 * assigned with @slots from (@epoch, @pos), @count samples. */
static void
step_header_for (RlxLeader *self, RlxMsg *m, guint64 commit, guint64 step, guint epoch,
                 guint pos, guint count, GArray *slots, gboolean final)
{
  rlx_msg_init (m, RLX_MSG_STEP, self->ctx->node_id);
  m->u.step.term = rlx_leadership_get_term (self->ctx->lead);
  m->u.step.step = step;
  if (self->assigned_step[step % ASSIGNED_RING] != step)
    {
      self->assigned_step[step % ASSIGNED_RING] = step;
      self->assigned_us[step % ASSIGNED_RING] = g_get_monotonic_time ();
      self->assigned_first[step % ASSIGNED_RING] = 0;
    }
  m->u.step.commit = commit;
  m->u.step.base = rlx_replica_get_hash (self->ctx->replica);
  m->u.step.loss = commit ? rlx_round_get_loss (self->round) : 0.0;
  m->u.step.samples = commit ? rlx_round_get_samples (self->round) : 0;
  m->u.step.contributors
      = rlx_cohort_str_array_copy (commit ? rlx_round_get_contributors (self->round) : NULL);
  m->u.step.late = commit ? rlx_round_get_late (self->round) : 0;
  m->u.step.rejected = commit ? rlx_round_get_rejected (self->round) : 0;
  /* (the outer round's inner lr, which grows with its ranks: what every
   * rank of the round it assigns trains at) */
  m->u.step.lr = self->assigned_outer.h > 0 ? self->assigned_outer.inner_lr : self->ctx->lr;
  m->u.step.epoch = epoch;
  m->u.step.pos = pos;
  m->u.step.count = count;
  /* A commit's frame that names a step other than the one after it
   * (overlap: the round after the next) also says where that one begins:
   * what every replica holds after the commit, as ours does (round_epoch,
   * round_pos moved there when the round was published). A member that
   * entered by snapshot never saw the frame that named it. */
  if (commit > 0 && step != commit + 1)
    {
      m->u.step.cepoch = self->round_epoch;
      m->u.step.cpos = self->round_pos;
    }
  m->u.step.members = rlx_cohort_str_array_copy (rlx_cohort_members (self->ctx));
  m->u.step.final = final;
  /* the assignment's mode (assigned_outer: the slots were made in it), and
   * the commit's (the round being finished) */
  rlx_sync_state_announce (&self->assigned_outer, commit ? self->round_outer.h : 0,
                           &m->u.step);
  /* a frame that assigns the next step (the step mode's publish, when the
   * cohort switches to overlapped rounds) assigns it at lag 0: the
   * overlap begins with the restart that follows */
  if (commit > 0 && step == commit + 1)
    m->u.step.lag = 0;
  /* A frame that commits the round right before the one it assigns is not
   * overlapped, whatever the mode now says: the first frame into the
   * overlapped outer mode (auto switched at this round; the next commit's
   * frame, publish_overlapped, assigns two rounds on). Announced with lag 1
   * it broke the frame's rule (commit + 1 + lag = step) and the member
   * refused it, missed the round and took a snapshot. */
  if (commit != 0 && commit + 1 == step && m->u.step.lag > 0)
    m->u.step.lag = 0;
  m->u.step.assign = rlx_msg_slots_new ();
  for (guint i = 0; slots && i < slots->len; i++)
    {
      RlxMsgSlot s = g_array_index (slots, RlxMsgSlot, i);
      s.node = g_strdup (s.node);
      g_array_append_val (m->u.step.assign, s);
    }
}

/* The step message of the next round (everything but the update). */
static void
step_header (RlxLeader *self, RlxMsg *m, guint64 commit, GArray *slots, gboolean final)
{
  step_header_for (self, m, commit, (commit ? commit : rlx_cohort_applied (self->ctx)) + 1,
                   self->round_epoch, self->round_pos, self->round_count, slots, final);
}

/* Drop the round in flight: its contributions are forgotten by the backend
 * before the next round's first, and its finish, if queued and not started,
 * does not run. */
void
rlx_leader_abandon_round (RlxLeader *self)
{
  rlx_round_cancel (self->round);
  rlx_compute_queue_abandon_round (self->ctx->queue);
  self->finishing_round = FALSE;
  self->finish_prequeued = 0;
  self->own_prequeued = 0;
  self->round_waiting = FALSE;
  g_clear_pointer (&self->next_slots, g_array_unref);
  ahead_clear (self);
  g_ptr_array_set_size (self->held_own, 0);
}

/* @id has @step (acknowledged, or sent to it in a snapshot). */
static void
member_acked (RlxLeader *self, const char *id, guint64 step, guint64 hash,
              guint64 outer_hash)
{
  rlx_commits_member_acked (self->commits, id, step, hash, outer_hash);
  rlx_commits_check (self->commits);
}

/* Members' buckets held until our hash of the state they were computed at
 * was known: judge them now. */
static void
judge_held (RlxLeader *self)
{
  g_autoptr(GPtrArray) ready = rlx_commits_members_holding (self->commits);

  for (guint i = 0; i < ready->len && rlx_leadership_is_leader (self->ctx->lead); i++)
    {
      RlxMemberAcks *ms = rlx_commits_member (self->commits, g_ptr_array_index (ready, i));
      RlxPeer *p = rlx_peer_set_lookup (self->ctx->peers, g_ptr_array_index (ready, i));
      RlxMsg m;

      if (!ms->has_held)
        continue;
      ms->has_held = FALSE;
      rlx_msg_steal (&m, &ms->held);
      if (p)
        rlx_leader_on_grad (self, p, &m);
      rlx_msg_clear (&m);
    }
}

/* The indices of @slot of a round assigned from @epoch (a new array): the
 * sample stream from its start, on into the next epochs when it runs over
 * its epoch's end (an outer round's may; rlx_replica_indices). */
static guint32 *
slot_indices (RlxLeader *self, guint epoch, const RlxMsgSlot *slot)
{
  return rlx_replica_indices (self->ctx->replica, epoch, slot->start, slot->count);
}

/* The own slice of the round @ahead rounds after this one (1: the next)
 * when they are ours alone, as leader_assign will make them: (epoch, start)
 * moved on by each round's count, the global batch (ours) from there, in
 * the step mode (a step ends with its epoch). A copy, or NULL. */
static guint32 *
predicted_own (RlxLeader *self, guint ahead, guint *n)
{
  guint epoch = self->round_epoch, pos = self->round_pos, count = self->round_count;
  guint n_train = rlx_replica_get_n_train (self->ctx->replica);

  for (guint i = 0; i < ahead; i++)
    {
      rlx_replica_advance (self->ctx->replica, &epoch, &pos, count);
      count = MIN (self->ctx->batch, n_train - pos);
      count = MIN (count, own_max_batch (self));
    }
  *n = count;
  return count > 0 ? rlx_replica_indices (self->ctx->replica, epoch, pos, count) : NULL;
}

/* Our own gradient of @step's slice @indices (an outer round's local steps
 * when @outer says h > 0), into the backend's round. */
static void
queue_own (RlxLeader *self, guint64 step, const guint32 *indices, guint n,
           const RlxOuterSettings *outer)
{
  rlx_compute_queue_own (self->ctx->queue, step, indices, n,
                         rlx_fault_plan_gradient (&self->ctx->faults, step),
                         rlx_fault_plan_stall_us (&self->ctx->faults, step), outer);
}

/* Our own @slot of @step, assigned from @epoch: its indices (noted for the
 * tests: rlx-sample-log.h) into queue_own. */
static void
queue_own_slot (RlxLeader *self, guint64 step, guint epoch, const RlxMsgSlot *slot,
                const RlxOuterSettings *outer)
{
  g_autofree guint32 *indices = slot_indices (self, epoch, slot);

  if (indices == NULL)
    {
      g_autofree char *msg = g_strdup_printf ("no memory for our slot of %u samples of step %"
                                              G_GUINT64_FORMAT, slot->count, step);
      OWNER (finish, FALSE, msg);
      return;
    }
  rlx_sample_log (self->ctx->node_id, rlx_leadership_get_term (self->ctx->lead), step, epoch,
                  slot->start, slot->count, indices);
  queue_own (self, step, indices, slot->count, outer);
}

/* The finish of round @step. @header (nullable: no frame, nobody to send
 * it to) is taken; @next: our slice of the next round; @after: and of the
 * round after it (both expected to be ours alone). */
static void
queue_finish (RlxLeader *self, guint64 step, RlxMsg *header, const guint32 *next,
              guint next_n, const guint32 *after, guint after_n, const RlxOuterSettings *outer)
{
  RlxFinishJob job = {
    .outer = *outer,
    .step = step,
    .header = header,
    .next = next,
    .next_n = next_n,
    .after = after,
    .after_n = after_n,
    .lr = self->ctx->lr,
    /* The wire precision is the wire's: an update nobody receives (no
     * frame: nobody else in the cohort) is applied as it is, at f32, with
     * nothing quantised and the update residual left for when there is a
     * wire again (a rank that joins gets a snapshot, not this update) */
    .precision = header != NULL ? self->ctx->precision : RLX_PRECISION_F32,
    .feedback = self->ctx->error_feedback,
    .prequeued = self->finish_prequeued == step,
    /* no frame (nobody else in the cohort) and a next slice of ours: the
     * next round is most likely ours alone too */
    .next_alone = header == NULL && rlx_cohort_members (self->ctx)->len == 1,
    .refuse = rlx_fault_plan_take_finish (&self->ctx->faults, step),
  };

  rlx_compute_queue_finish (self->ctx->queue, &job);
}

/* Begin collecting round_step with @slots (the members were told by the
 * frame that carried them) and queue our own slice, unless it is queued
 * already. A round that is ours alone, with nobody else in the cohort,
 * queues its finish right behind the own gradient (unless the last round's
 * publish queued both already): nothing else can join it, so the worker
 * goes on without waiting for the main loop. */
static void
leader_start_round (RlxLeader *self, GArray *slots)
{
  guint64 step = self->round_step;
  const RlxMsgSlot *own = NULL;
  gboolean alone;

  OWNER (assigned, step, 0);
  for (guint i = 0; i < slots->len; i++)
    if (rlx_cohort_is_self (self->ctx, g_array_index (slots, RlxMsgSlot, i).node))
      own = &g_array_index (slots, RlxMsgSlot, i);
  /* (an outer round goes through the round even alone: its finish is the
   * outer step, not a shortcut) */
  alone = own != NULL && slots->len == 1 && rlx_cohort_members (self->ctx)->len == 1 &&
          self->round_outer.h == 0;
  if (self->own_prequeued != step)
    {
      rlx_compute_queue_begin_round (self->ctx->queue);
      if (own != NULL)
        queue_own_slot (self, step, self->round_epoch, own, &self->round_outer);
    }
  self->own_prequeued = 0;
  if (own != NULL)
    OWNER (assigned, step, own->count);
  if (slots->len == 0)
    return;
  /* (a round whose finish is queued was planned for us alone) */
  rlx_round_begin (self->round, step, slots,
                   alone || self->finish_prequeued == step ? 0 : deadline_ms (self));
  /* overlap: our own contribution may have come in while the round before
   * was being finished */
  for (guint i = self->held_own->len; i > 0; i--)
    {
      HeldOwn *h = g_ptr_array_index (self->held_own, i - 1);

      if (h->step == step)
        own_result (self, h);
      if (h->step <= step)
        g_ptr_array_remove_index (self->held_own, i - 1);
    }
  if (alone && self->finish_prequeued != step)
    {
      g_autofree guint32 *next = NULL, *after = NULL;
      guint next_n = 0, after_n = 0;

      if (!rlx_cohort_at_last_step (self->ctx, step))
        next = predicted_own (self, 1, &next_n);
      if (!rlx_cohort_at_last_step (self->ctx, step + 1))
        after = predicted_own (self, 2, &after_n);
      self->finish_prequeued = step;
      queue_finish (self, step, NULL, next, next_n, after, after_n, &self->round_outer);
    }
}

/* The round's update was made and applied by the backend (op->ok): publish
 * it and go on with the next round. */
static void
on_finished (RlxLeader *self, RlxLeaderOp *op)
{
  guint64 commit = op->step;
  GPtrArray *ids = rlx_cohort_members (self->ctx);
  gboolean final = rlx_cohort_at_last_step (self->ctx, commit);
  GArray *slots;
  GPtrArray *waiting;
  gboolean outer = op->outer.h > 0;

  rlx_trace ("L.fin", commit);
  self->ctx->ops->training (self->ctx->owner);
  if (self->ctx->faults.die_at > 0 && commit == self->ctx->faults.die_at && op->frame != NULL)
    {
      rlx_cohort_die_after_partial_commit (self->ctx, op->frame);
      return;
    }
  rlx_round_stats_backend (self->ctx->stats, op->host_bytes, op->ahead_taken, op->update_ahead,
                           rlx_worker_wait_us (rlx_compute_queue_get_worker (self->ctx->queue)));
  rlx_round_stats_finish_path (self->ctx->stats, op->run_us, op->ran_at, op->dev_finish_us,
                               op->dev_grad_us);
  /* To every member (they apply exactly these codes, as the backend did).
   * L.send before the hand-off and L.sent after it: a member may receive
   * the frame before this thread gets to L.sent. */
  rlx_trace ("L.send", commit);
  for (guint i = 0; op->frame != NULL && i < ids->len; i++)
    {
      RlxPeer *p = rlx_peer_set_lookup (self->ctx->peers, g_ptr_array_index (ids, i));
      if (p)
        OWNER (send_frame, p, RLX_SEND_STEP, op->frame, self->ctx->n, op->precision);
    }
  rlx_trace ("L.sent", commit);
  /* (round_epoch, round_pos) already are where the next step starts. */
  rlx_replica_commit (self->ctx->replica, commit, op->hash, self->round_epoch, self->round_pos);
  rlx_sync_state_note_commit (self->ctx->sync, commit, op->outer.h, op->outer_hash);
  rlx_replica_set_loss (self->ctx->replica, rlx_round_get_loss (self->round));
  self->last_commit = commit;
  waiting = g_ptr_array_new_with_free_func (g_free);
  /* Members that never got this commit's frame are not waited for (there
   * was none when the round was ours alone: a member admitted meanwhile
   * gets the commit in its snapshot). */
  for (guint i = 0; op->frame != NULL && i < ids->len; i++)
    if (!rlx_cohort_is_self (self->ctx, g_ptr_array_index (ids, i)))
      g_ptr_array_add (waiting, g_strdup (g_ptr_array_index (ids, i)));
  rlx_commits_publish (self->commits, commit, op->hash, op->outer.h > 0 ? op->outer_hash : 0,
                       self->round, ids->len, final, waiting);

  /* The next round first (the worker is already computing our slice of
   * it), then the reporting. A round planned for us alone is not started
   * when someone joined meanwhile (they got no frame): it restarts with
   * them once their snapshot is out (on_snapshot_built) — unless its finish
   * is queued already (a member admitted since gets its snapshot after that
   * finish, as one admitted during this round did after this one). */
  slots = g_steal_pointer (&self->next_slots);
  if (slots != NULL)
    self->round_outer = self->next_outer;
  if (slots != NULL && !final &&
      (outer || op->frame != NULL || rlx_cohort_members (self->ctx)->len == 1 ||
       self->finish_prequeued == commit + 1))
    leader_start_round (self, slots);
  else if (slots != NULL && !final)
    rlx_leader_abandon_round (self);   /* and the own slice queued for it */
  g_clear_pointer (&slots, g_array_unref);
  self->ctx->ops->step_changed (self->ctx->owner);
  judge_held (self);
  rlx_commits_check (self->commits);
  if (rlx_leadership_is_leader (self->ctx->lead) && !finished (self) && !final &&
      !rlx_round_is_active (self->round) && !self->finishing_round &&
      rlx_snapshots_pending (self->ctx->snapshots) == 0)
    rlx_leader_publish (self, FALSE);
}

/* Each rank's step split into compute and wait ("timing"), about once a
 * second: what the dashboard shows per rank. */
static void
maybe_emit_timing (RlxLeader *self, guint64 step)
{
  GPtrArray *ids = rlx_cohort_members (self->ctx);
  gint64 now = g_get_monotonic_time ();

  if (now - self->timing_at < G_USEC_PER_SEC || self->round_ema_us <= 0)
    return;
  self->timing_at = now;
  for (guint i = 0; i < ids->len; i++)
    {
      const char *id = g_ptr_array_index (ids, i);
      double compute;
      RlxEvent *e;

      if (rlx_cohort_is_self (self->ctx, id))
        compute = self->ctx->self_compute_us;
      else
        {
          RlxPeer *p = rlx_peer_set_lookup (self->ctx->peers, id);
          compute = p ? p->compute_us : 0;
        }
      if (compute <= 0)
        continue;
      e = rlx_event_new (RLX_EVENT_TIMING);
      e->u.timing.node = g_strdup (id);
      e->u.timing.step = step;
      e->u.timing.compute_us = (guint64) compute;
      e->u.timing.round_us = (guint64) self->round_ema_us;
      emit (self, e);
    }
}

/* Our own contribution to the round collected. */
static void
own_result (RlxLeader *self, const HeldOwn *h)
{
  g_autofree char *reason = NULL;

  rlx_round_stats_own_path (self->ctx->stats, h->run_us);
  rlx_cohort_note_self_speed (self->ctx, h->n, h->compute_us);
  rlx_cohort_note_inner (&self->ctx->self_inner_us, (double) h->inner_us);
  if (h->refused)
    {
      rlx_round_reject_slot (self->round, self->ctx->node_id);
      send_reject (self, self->ctx->node_id, h->step, h->refused);
      return;
    }
  switch (rlx_round_offer (self->round, self->ctx->node_id, h->step, h->n, h->loss,
                           h->compute_us, self->ctx->n, &reason))
    {
    case RLX_ROUND_ACCEPTED:
      rlx_round_added (self->round, self->ctx->node_id, TRUE, NULL);
      break;
    case RLX_ROUND_REJECTED:
      send_reject (self, self->ctx->node_id, h->step, reason);
      break;
    case RLX_ROUND_LATE:
    default:
      rlx_round_stats_late (self->ctx->stats);
      break;
    }
}

void
rlx_leader_op_done (RlxLeader *self, RlxLeaderOp *op, const GError *error)
{
  gboolean current = op->current;
  BUSY_BEGIN;

  if (rlx_leadership_get_role (self->ctx->lead) == RLX_ROLE_STOPPED || finished (self))
    {
      /* A node that stopped (left) while the backend applied an update
       * keeps it as its state: the checkpoint it writes as it leaves, and
       * its "done", are read behind this update and must say so. */
      if (error == NULL && op->kind == RLX_LEADER_FINISH && op->ok)
        rlx_replica_commit (self->ctx->replica, op->step, op->hash, self->round_epoch,
                            self->round_pos);
      goto out;
    }
  if (error != NULL)
    {
      g_autofree char *msg = g_strdup_printf ("%s of step %" G_GUINT64_FORMAT " failed: %s",
                                              op->kind == RLX_LEADER_OWN ? "the own gradient"
                                              : op->kind == RLX_LEADER_ADD ? "adding a bucket"
                                              : "finishing the round",
                                              op->step, error->message);
      rlx_cohort_emit_error (self->ctx, msg);
      if (g_error_matches (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_DEVICE_LOST))
        {
          OWNER (finish, FALSE, msg);
          goto out;
        }
      if (!current || !rlx_leadership_is_leader (self->ctx->lead))
        goto out;
      if (op->kind == RLX_LEADER_OWN)
        rlx_round_close_slot (self->round, self->ctx->node_id);
      else if (op->kind == RLX_LEADER_ADD)
        rlx_round_added (self->round, op->node, FALSE, msg);
      else
        {
          rlx_leader_abandon_round (self);
          rlx_leader_publish (self, FALSE);
        }
      goto out;
    }

  switch (op->kind)
    {
    case RLX_LEADER_OWN:
      {
        HeldOwn h = { op->step, op->n, op->loss, op->compute_us, op->run_us, op->refused,
                      op->inner_us };

        if (!current || !rlx_leadership_is_leader (self->ctx->lead))
          break;
        if (op->outer.lag > 0 && op->step >= self->round_step &&
            (self->finishing_round || !rlx_round_is_active (self->round) ||
             rlx_round_get_step (self->round) != op->step))
          {
            /* overlap: a round not being collected yet (the one before is
             * still being finished, or this is the one after); it waits */
            HeldOwn *keep = g_memdup2 (&h, sizeof h);

            keep->refused = g_strdup (op->refused);
            if (self->held_own->len >= 4)
              g_ptr_array_remove_index (self->held_own, 0);
            g_ptr_array_add (self->held_own, keep);
            break;
          }
        own_result (self, &h);
        break;
      }
    case RLX_LEADER_ADD:
      if (current && rlx_leadership_is_leader (self->ctx->lead))
        {
          if (op->refused == NULL)
            rlx_norm_guard_note (&self->norms, op->outer.h, op->norm);
          rlx_round_added (self->round, op->node, op->refused == NULL, op->refused);
        }
      break;
    case RLX_LEADER_FINISH:
      if (!rlx_leadership_is_leader (self->ctx->lead))
        {
          /* We stepped down while the backend applied it: our parameters
           * hold an update the cohort never saw. */
          if (op->ok)
            {
              self->params_dirty = TRUE;
              if (rlx_leadership_get_role (self->ctx->lead) == RLX_ROLE_MEMBER)
                OWNER (request_snapshot, "this node's parameters took an update "
                                                  "of a round it gave up leading");
            }
          break;
        }
      if (!current)
        {
          /* A round given up (a merge) whose update was applied all the
           * same: it is this leader's state now, and the members follow it
           * through a snapshot. */
          if (op->ok)
            {
              rlx_replica_commit (self->ctx->replica, op->step, op->hash, self->round_epoch,
                                  self->round_pos);
              self->last_commit = op->step;
            }
        }
      else if (!op->ok)
        {
          /* Not committed (the update overflowed, or nothing joined the
           * round): the step runs again. */
          if (!op->prequeued || rlx_round_get_samples (self->round) > 0)
            {
              g_autofree char *msg = g_strdup_printf ("step %" G_GUINT64_FORMAT " was not "
                                                      "committed: %s", op->step, op->refused);
              rlx_cohort_emit_error (self->ctx, msg);
            }
          rlx_leader_abandon_round (self);
        }
      else
        {
          self->finishing_round = FALSE;
          on_finished (self, op);
          break;
        }
      if (self->publish_waiting ||
          (!rlx_round_is_active (self->round) && !self->finishing_round &&
           rlx_compute_queue_finishes (self->ctx->queue) == 0))
        rlx_leader_publish (self, FALSE);
      break;
    case RLX_LEADER_RESET:
    default:
      break;
    }
out:
  BUSY_END;
}

/* Our slot among @slots, or NULL. */
static const RlxMsgSlot *
own_slot (RlxLeader *self, GArray *slots)
{
  for (guint i = 0; slots && i < slots->len; i++)
    if (rlx_cohort_is_self (self->ctx, g_array_index (slots, RlxMsgSlot, i).node))
      return &g_array_index (slots, RlxMsgSlot, i);
  return NULL;
}

/* Overlap: our own part of the round ahead (assign_ahead), on the worker.
 * Queued after anything that must run before it — a finish: the round's
 * sum shares its slot with the one two rounds before. */
static void
queue_own_ahead (RlxLeader *self)
{
  const RlxMsgSlot *own = self->ahead.step > 0 ? own_slot (self, self->ahead.slots) : NULL;

  if (own != NULL)
    queue_own_slot (self, self->ahead.step, self->ahead.epoch, own, &self->ahead.outer);
}

/* Overlap: assign the round after @step (whose slots are out) from where
 * @step's round ends and remember it as ahead (queue_own_ahead queues our
 * part); its step message into @m. FALSE when nothing is assigned (past
 * the last step). */
static gboolean
assign_ahead (RlxLeader *self, guint64 commit, guint64 step, guint epoch, guint pos,
              guint count, gboolean final, gboolean nothing, RlxMsg *m)
{
  GArray *slots;
  guint n = 0;
  /* where @step begins: a frame's (epoch, pos) is where the step it names
   * begins (a member records it as that step's start, rlx-follower.c) */
  guint step_epoch = epoch, step_pos = pos;

  rlx_replica_advance (self->ctx->replica, &epoch, &pos, count);
  if (final || nothing || rlx_cohort_at_last_step (self->ctx, step))
    {
      /* nothing assigned: the frame's step follows its commit at the lag
       * the mode in force announces */
      guint64 names = commit > 0 ? commit + 1 + (overlapped (self) ? 1 : 0) : step + 1;

      step_header_for (self, m, commit, names, names == step ? step_epoch : epoch,
                       names == step ? step_pos : pos, 0, NULL, final);
      ahead_clear (self);
      return FALSE;
    }
  slots = assign_at (self, pos, &n);
  if (commit > 0 && (self->assigned_outer.h == 0 || self->assigned_outer.lag == 0))
    {
      /* The cohort's mode changed away from overlapped rounds (auto chose
       * again): nothing is assigned ahead; the frame only commits (its
       * step is the next one, at lag 0, so its (epoch, pos) are where that
       * one begins, not where the round after it would), and rounds begin
       * again in the new mode once the one in flight is in (on_finished
       * finds no slots). */
      g_array_unref (slots);
      step_header_for (self, m, commit, commit + 1, step_epoch, step_pos, 0, NULL, final);
      ahead_clear (self);
      return FALSE;
    }
  step_header_for (self, m, commit, step + 1, epoch, pos, n, slots, final);
  ahead_clear (self);
  self->ahead.step = step + 1;
  self->ahead.epoch = epoch;
  self->ahead.pos = pos;
  self->ahead.count = n;
  self->ahead.slots = slots;
  self->ahead.outer = self->assigned_outer;
  return TRUE;
}

/* Overlap (docs/PROTOCOL.md, "Overlap"): round @c is complete. Its finish
 * runs between our inner steps (the members compute round c + 1 all the
 * while: they have its slots since the last frame); the frame it fills
 * commits c and assigns c + 2. Round c + 1 is collected once the finish is
 * in (on_finished). */
static void
publish_overlapped (RlxLeader *self, guint64 c, gboolean final)
{
  RlxMsg m;
  gboolean have_next = self->ahead.step == c + 1;

  rlx_replica_advance (self->ctx->replica, &self->round_epoch, &self->round_pos,
                       self->round_count);
  self->round_step = c + 1;
  self->round_count = have_next ? self->ahead.count : 0;
  g_clear_pointer (&self->next_slots, g_array_unref);
  self->next_slots = have_next ? g_steal_pointer (&self->ahead.slots) : rlx_msg_slots_new ();
  self->next_outer = have_next ? self->ahead.outer : self->round_outer;
  ahead_clear (self);
  self->finishing_round = TRUE;
  assign_ahead (self, c, c + 1, self->round_epoch, self->round_pos, self->round_count, final,
                !have_next, &m);
  queue_finish (self, c, &m, NULL, 0, NULL, 0, &self->round_outer);
  queue_own_ahead (self);
  /* (our part of c + 1 was queued with the frame that assigned it) */
  self->own_prequeued = c + 1;
}

void
rlx_leader_publish (RlxLeader *self, gboolean commit)
{
  g_autoptr(GError) error = NULL;
  GArray *slots;
  RlxMsg m;

  if (!rlx_leadership_is_leader (self->ctx->lead) || finished (self))
    return;
  if (commit)
    {
      /* The round just collected is finished by the backend, which writes
       * the update's codes into the step frame (on_finished); the frame
       * also assigns the next step. */
      gint64 round_us = g_get_monotonic_time () - rlx_round_get_started (self->round);
      guint64 c = rlx_round_get_step (self->round);
      gboolean final = rlx_cohort_at_last_step (self->ctx, c);
      gboolean others = rlx_cohort_members (self->ctx)->len > 1 || self->ctx->faults.die_at > 0;
      const RlxMsgSlot *own = NULL;

      /* The deadline follows the round time of the buckets that came: a
       * round the deadline closed counts up to its last bucket, not the
       * wait for those that never came. Counting that wait fed the
       * deadline into itself (10 × the mean, 2.8× longer each late round:
       * 4 ms rounds, then deadlines of 1, 3, 10 s while one member was
       * frozen; chaos.py seed 61). */
      gint64 collect_us = rlx_round_get_late (self->round) > 0
                        ? rlx_round_get_collect_us (self->round) : round_us;
      if (collect_us <= 0)
        collect_us = round_us;
      self->round_ema_us = self->rounds_measured == 0 ? collect_us
                         : 0.8 * self->round_ema_us + 0.2 * collect_us;
      self->rounds_measured++;
      maybe_emit_timing (self, c);
      rlx_round_stats_round (self->ctx->stats, self->rounds_measured, round_us,
                             rlx_round_get_samples (self->round),
                             rlx_round_get_max_compute (self->round));
      if (self->round_outer.h > 0 && self->round_outer.lag > 0)
        {
          publish_overlapped (self, c, final);
          return;
        }
      /* The next round starts where this one ended. */
      rlx_replica_advance (self->ctx->replica, &self->round_epoch, &self->round_pos,
                           self->round_count);
      self->round_count = 0;
      self->round_step = c + 1;
      slots = final ? rlx_msg_slots_new () : leader_assign (self);
      for (guint i = 0; i < slots->len; i++)
        if (rlx_cohort_is_self (self->ctx, g_array_index (slots, RlxMsgSlot, i).node))
          own = &g_array_index (slots, RlxMsgSlot, i);
      self->finishing_round = TRUE;
      g_clear_pointer (&self->next_slots, g_array_unref);
      self->next_slots = slots;
      if (self->finish_prequeued == c)
        self->finish_prequeued = 0;   /* on its way, without a frame: nobody to send it to */
      else
        {
          g_autofree guint32 *after = NULL, *next = NULL;
          guint after_n = 0;
          const RlxMsgSlot *own_next = own;

          /* a frame only when someone is there to receive it; with nobody,
           * the round after the next is named too */
          if (others)
            step_header (self, &m, c, slots, final);
          else if (own != NULL && slots->len == 1 && !rlx_cohort_at_last_step (self->ctx, c + 1))
            after = predicted_own (self, 1, &after_n);
          /* the next own slice is named to the finish only in the same
           * mode (a GPU computes it behind the finish, as this round's
           * kind): when auto switches, the next round is another kind of
           * job (queued below, with its own settings) */
          if (self->next_outer.h != self->round_outer.h)
            own_next = NULL;
          next = own_next ? slot_indices (self, self->round_epoch, own_next) : NULL;
          queue_finish (self, c, others ? &m : NULL, next, own_next ? own_next->count : 0, after,
                        after_n, &self->round_outer);
        }
      /* Our slice of the next round right behind the finish: the worker
       * goes on with it without waiting for us. */
      if (own != NULL)
        {
          rlx_compute_queue_begin_round (self->ctx->queue);
          self->own_prequeued = c + 1;
          queue_own_slot (self, c + 1, self->round_epoch, own, &self->next_outer);
        }
      /* A next round that is ours alone gets its finish queued now too (it
       * runs only if this round's commits): two rounds on the worker, so
       * it never waits for this main loop between them. */
      if (own != NULL && slots->len == 1 && !others)
        {
          g_autofree guint32 *next = NULL, *after = NULL;
          guint next_n = 0, after_n = 0;

          if (!rlx_cohort_at_last_step (self->ctx, c + 1))
            next = predicted_own (self, 1, &next_n);
          if (!rlx_cohort_at_last_step (self->ctx, c + 2))
            after = predicted_own (self, 2, &after_n);
          self->finish_prequeued = c + 1;
          queue_finish (self, c + 1, NULL, next, next_n, after, after_n, &self->next_outer);
        }
      return;
    }

  /* No commit: (re)start the step after the last applied one — once our
   * replica holds the last commit we published (its hash is the base) and
   * no update is still being made or applied. */
  if (!self->rounds_started && rlx_cohort_members (self->ctx)->len < self->ctx->wait_members)
    return;
  if (rlx_cohort_applied (self->ctx) < self->last_commit ||
      rlx_compute_queue_finishes (self->ctx->queue) > 0 ||
      rlx_compute_queue_member_applying (self->ctx->queue) > 0)
    {
      self->publish_waiting = TRUE;
      return;
    }
  rlx_leader_abandon_round (self);
  self->publish_waiting = FALSE;
  self->rounds_started = TRUE;
  self->round_step = rlx_cohort_applied (self->ctx) + 1;
  /* from where that step begins, which the replica holds: a round whose
   * finish failed (or committed nothing) had moved round_epoch/round_pos
   * on to the round after it, and runs again on its own slice */
  self->round_epoch = rlx_replica_get_epoch (self->ctx->replica);
  self->round_pos = rlx_replica_get_pos (self->ctx->replica);
  {
    g_autoptr(GBytes) frame = NULL;
    GPtrArray *ids = rlx_cohort_members (self->ctx);

    if (self->ctx->ops->rounds_begin != NULL)
      OWNER (rounds_begin, ids->len);
    slots = leader_assign (self);
    self->round_outer = self->next_outer;
    self->restart_at = rlx_cohort_applied (self->ctx);
    if (ids->len > 1 || self->round_outer.h > 0)
      {
        step_header (self, &m, 0, slots, FALSE);
        frame = rlx_msg_build (&m, NULL, 0, RLX_PRECISION_F32, &error);
        rlx_msg_clear (&m);
        if (frame == NULL)
          {
            g_autofree char *msg = g_strdup_printf ("could not build the step: %s",
                                                    error->message);
            g_array_unref (slots);
            OWNER (finish, FALSE, msg);
            return;
          }
      }
    for (guint i = 0; frame != NULL && i < ids->len; i++)
      {
        RlxPeer *p = rlx_peer_set_lookup (self->ctx->peers, g_ptr_array_index (ids, i));
        if (p)
          OWNER (send_frame, p, RLX_SEND_STEP, frame, 0, RLX_PRECISION_F32);
      }
  }
  leader_start_round (self, slots);
  g_array_unref (slots);
  /* Overlap: the members compute the round after this one as soon as
   * theirs is done, so it is assigned now too. */
  if (self->round_outer.h > 0 && self->round_outer.lag > 0)
    {
      g_autoptr(GBytes) frame = NULL;
      GPtrArray *ids = rlx_cohort_members (self->ctx);

      if (assign_ahead (self, 0, self->round_step, self->round_epoch, self->round_pos,
                        self->round_count, FALSE, FALSE, &m))
        {
          frame = rlx_msg_build (&m, NULL, 0, RLX_PRECISION_F32, &error);
          queue_own_ahead (self);
        }
      rlx_msg_clear (&m);
      for (guint i = 0; frame != NULL && i < ids->len; i++)
        {
          RlxPeer *p = rlx_peer_set_lookup (self->ctx->peers, g_ptr_array_index (ids, i));
          if (p)
            OWNER (send_frame, p, RLX_SEND_STEP, frame, 0, RLX_PRECISION_F32);
        }
    }
}

static void
leader_finalize (RlxLeader *self)
{
  if (!rlx_leadership_is_leader (self->ctx->lead) || self->finishing_round)
    return;
  if (rlx_round_get_samples (self->round) == 0)
    {
      /* Nothing usable came back: the step is not committed; run it again
       * with whoever is still here (same dataset position). */
      rlx_leader_publish (self, FALSE);
      return;
    }
  /* The leader's own replica must hold the last commit (the step frame
   * carries its hash as the base of this one): a round only begins once
   * that commit is in. */
  if (rlx_cohort_applied (self->ctx) + 1 != rlx_round_get_step (self->round))
    {
      g_warning ("round %" G_GUINT64_FORMAT " complete at step %" G_GUINT64_FORMAT
                 ": run again", rlx_round_get_step (self->round), rlx_cohort_applied (self->ctx));
      rlx_leader_publish (self, FALSE);
      return;
    }
  rlx_leader_publish (self, TRUE);
}

static void
on_round_complete (RlxRound *round, gpointer user_data)
{
  RlxLeader *self = user_data;
  BUSY_BEGIN;

  drop_silent (self);
  leader_finalize (self);
  BUSY_END;
}

static void
send_reject (RlxLeader *self, const char *id, guint64 step, const char *reason)
{
  RlxPeer *p = rlx_peer_set_lookup (self->ctx->peers, id);
  RlxEvent *e = rlx_event_new (RLX_EVENT_REJECTED);

  e->u.rejected.node = g_strdup (id);
  e->u.rejected.has_step = TRUE;
  e->u.rejected.step = step;
  e->u.rejected.reason = g_strdup (reason);
  emit (self, e);
  rlx_round_stats_rejected (self->ctx->stats);
  if (p)
    {
      RlxMsg m;
      rlx_msg_init (&m, RLX_MSG_REJECT, self->ctx->node_id);
      m.u.reject.step = step;
      m.u.reject.reason = g_strdup (reason);
      OWNER (send_msg, p, &m);
      rlx_msg_clear (&m);
    }
}

static void
on_round_rejected (RlxRound *round, const char *node, guint64 step, const char *reason,
                   gpointer user_data)
{
  RlxLeader *self = user_data;

  /* The round counted it; report and tell the member. */
  send_reject (self, node, step, reason);
}

static void
on_round_late (RlxRound *round, const char *node, guint64 step, const char *reason,
               gpointer user_data)
{
  RlxLeader *self = user_data;
  RlxEvent *e = rlx_event_new (RLX_EVENT_LATE);
  RlxPeer *p = rlx_peer_set_lookup (self->ctx->peers, node);

  rlx_round_stats_late (self->ctx->stats);
  e->u.node_step.node = g_strdup (node);
  e->u.node_step.step = step;
  e->u.node_step.reason = g_strdup (reason);
  emit (self, e);
  if (p != NULL && !rlx_cohort_is_self (self->ctx, node))
    rlx_peer_set_note_missed (self->ctx->peers, p, rlx_round_get_started (round));
  /* (counted within one term — a count from an earlier leadership of
   * ours is no evidence now — and not while the member still loads its
   * snapshot: it acknowledged no state of ours yet) */
  if (p == NULL || rlx_cohort_is_self (self->ctx, node) ||
      !rlx_commits_member (self->commits, node)->known)
    return;
  if (p->late_term != rlx_leadership_get_term (self->ctx->lead))
    {
      p->late_term = rlx_leadership_get_term (self->ctx->lead);
      p->late_run = 0;
    }
  if (p->late_run++ == 0)
    p->late_since = g_get_monotonic_time ();
}

/* Members whose link lives but that sent no bucket for RLX_SILENT_ROUNDS
 * rounds in a row, over four heartbeat timeouts at least, leave the group
 * (they rejoin through a snapshot if they still train): a member that
 * follows another leader, or whose compute hangs, kept every round waiting
 * for its deadline and was counted in every claim its leader made in a
 * merge (issue 29, item 13: a leader with two such members led beside the
 * real cohort to the end of a 60-minute run). */
static void
drop_silent (RlxLeader *self)
{
  GPtrArray *ids = rlx_cohort_members (self->ctx);
  gint64 now = g_get_monotonic_time ();
  gint64 least = 4 * (gint64) rlx_peer_set_get_timeout (self->ctx->peers) * 1000;
  g_autoptr(GPtrArray) silent = g_ptr_array_new_with_free_func (g_free);

  for (guint i = 0; i < ids->len; i++)
    {
      RlxPeer *p = rlx_peer_set_lookup (self->ctx->peers, g_ptr_array_index (ids, i));

      if (p && p->late_term == rlx_leadership_get_term (self->ctx->lead) &&
          p->late_run >= RLX_SILENT_ROUNDS && now - p->late_since >= least)
        g_ptr_array_add (silent, g_strdup (p->id));
    }
  for (guint i = 0; i < silent->len; i++)
    {
      RlxPeer *p = rlx_peer_set_lookup (self->ctx->peers, g_ptr_array_index (silent, i));
      g_autofree char *why = NULL;

      if (p == NULL)
        continue;
      why = g_strdup_printf (
          "sent no gradient for %u rounds in a row (%.1f s) while its link lived", p->late_run,
          (now - p->late_since) / 1e6);

      p->late_run = 0;
      OWNER (drop_member, p->id, why);
    }
}

/* A member's bucket (or refusal) for a step: judged once the member's
 * acknowledgement of the state it was computed at is in. */
void
rlx_leader_on_grad (RlxLeader *self, RlxPeer *p, RlxMsg *m)
{
  RlxMsgGrad *g = &m->u.grad;
  RlxMemberAcks *ms = rlx_commits_member (self->commits, p->id);
  g_autofree char *reason = NULL;
  guint64 mine;

  rlx_trace ("L.rx", g->step);
  /* who sent it: the member's M.node says the same hash of its id */
  rlx_trace ("L.rx.node", g_str_hash (p->id));
  if (g->term != rlx_leadership_get_term (self->ctx->lead))
    return;
  p->late_run = 0;
  if (overlapped (self) && !ms->has_held &&
      ((self->finishing_round && g->step == self->round_step) ||
       (!self->finishing_round && g->step == self->round_step + 1)))
    {
      /* overlap: a bucket of the round after this one, early; judged once
       * its round begins (judge_held) */
      rlx_msg_steal (&ms->held, m);
      ms->has_held = TRUE;
      return;
    }
  if (!rlx_round_slot_pending (self->round, p->id) || g->step != rlx_round_get_step (self->round))
    {
      rlx_round_stats_late (self->ctx->stats);
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
      rlx_round_stats_late (self->ctx->stats);
      return;
    }
  /* (with overlap the member may have acknowledged the next commit too by
   * now: its state is judged where it says it is) */
  if (!ms->known || ms->step < bucket_base (self, g->step) ||
      !rlx_replica_hash_at (self->ctx->replica, ms->step, &mine))
    {
      rlx_msg_clear (&ms->held);
      rlx_msg_steal (&ms->held, m);
      ms->has_held = TRUE;
      return;
    }
  if (ms->hash != mine)
    {
      rlx_round_reject_slot (self->round, p->id);
      send_reject (self, p->id, g->step,
                                   "gradient computed at other parameters (hash differs)");
      return;
    }
  if (g->grads.frame)
    OWNER (peer_precision, p, g->grads.precision);
  switch (rlx_round_offer (self->round, p->id, g->step, g->samples, g->loss, g->compute_us,
                           g->grads.frame ? g->grads.n : 0, &reason))
    {
    case RLX_ROUND_ACCEPTED:
      /* to the backend's sum, which checks its values on the way */
      self->norms.ratio = self->ctx->max_norm_ratio;
      rlx_compute_queue_add (self->ctx->queue, p->id, g->step, g->samples, &g->grads,
                             self->round_outer.h > 0, self->round_outer.lag > 0,
                             rlx_norm_guard_limit (&self->norms, self->round_outer.h > 0));
      /* Its speed as we see it: its bucket came `took` after we made the
       * assignment; the round's first bucket stands for what every member
       * pays (our own lag, the network). The time it computed is what it
       * reports, but never less than how much later than the first its
       * bucket came: a member that reports 1 µs to take most of every
       * round gets what it really delivers (issue 29, item 8). */
      {
        guint slot = (guint) (g->step % ASSIGNED_RING);
        gint64 took = g_get_monotonic_time () - self->assigned_us[slot];

        if (self->assigned_step[slot] == g->step && took > 0)
          {
            gint64 eff;
            double sp;

            if (self->assigned_first[slot] == 0 || took < self->assigned_first[slot])
              self->assigned_first[slot] = took;
            eff = MAX ((gint64) MAX (g->compute_us, 1), took - self->assigned_first[slot]);
            sp = g->samples * 1e6 / (double) eff;
            p->speed = p->speed > 0 ? 0.7 * p->speed + 0.3 * sp : sp;
            p->compute_us = p->compute_us > 0 ? 0.7 * p->compute_us + 0.3 * (double) eff
                                              : (double) eff;
            /* an outer round's inner step as it reports it, but never
             * more than its share took over its H inner steps */
            if (g->inner_us > 0 && self->round_outer.h > 0)
              rlx_cohort_note_inner (&p->inner_us,
                                     MIN ((double) g->inner_us,
                                          (double) eff / MAX (1u, MIN (self->round_outer.h,
                                                                       g->samples))));
          }
      }
      break;
    case RLX_ROUND_REJECTED:
      send_reject (self, p->id, g->step, reason);
      break;
    case RLX_ROUND_LATE:
    default:
      rlx_round_stats_late (self->ctx->stats);
      break;
    }
}

void
rlx_leader_on_ack (RlxLeader *self, RlxPeer *p, RlxMsgAck *a)
{
  RlxMemberAcks *ms;

  if (a->term != rlx_leadership_get_term (self->ctx->lead))
    return;
  if (!rlx_leadership_has_member (self->ctx->lead, p->id))
    {
      /* It follows us but is not a member (we lost sight of it while it
       * still saw us, e.g. across a split): an acknowledgement from a node
       * that is not a member asks to be one. */
      RlxMsgJoin join = { (char *) "rejoin", a->step, a->hash, FALSE };
      rlx_leader_admit (self, p, &join);
      return;
    }
  member_acked (self, p->id, a->step, a->hash, a->ohash);
  ms = rlx_commits_member (self->commits, p->id);
  if (ms->has_held)
    {
      RlxMsg m;
      ms->has_held = FALSE;
      rlx_msg_steal (&m, &ms->held);
      rlx_leader_on_grad (self, p, &m);
      rlx_msg_clear (&m);
    }
}

/* A snapshot went out (rlx_snapshots_send, by either role): as the leader,
 * its member has that state now, and a round that waited for it starts. */
void
rlx_leader_snapshot_sent (RlxLeader *self, const char *to, guint64 step, guint64 hash,
                          RlxEvent *event)
{
  BUSY_BEGIN;

  if (rlx_leadership_is_leader (self->ctx->lead))
    member_acked (self, to, step, hash, 0);
  emit (self, event);
  if (rlx_leadership_is_leader (self->ctx->lead) && !finished (self) &&
      rlx_snapshots_pending (self->ctx->snapshots) == 0 &&
      !rlx_round_is_active (self->round) && !self->finishing_round &&
      (self->rounds_started || rlx_cohort_members (self->ctx)->len >= self->ctx->wait_members))
    rlx_leader_publish (self, FALSE);
  BUSY_END;
}

/* Remove @id's slot from @slots (NULL: none). */
static void
slots_drop (GArray *slots, const char *id)
{
  for (guint i = slots ? slots->len : 0; i > 0; i--)
    if (g_strcmp0 (g_array_index (slots, RlxMsgSlot, i - 1).node, id) == 0)
      g_array_remove_index (slots, i - 1);
}

/* @id will deliver no bucket of the rounds assigned so far (it was lost, or
 * takes a snapshot): its slot of the round being collected closes, and
 * with overlap it also holds one of the round after it (and, while a finish
 * runs, of the one after that), assigned with the last commit; those rounds
 * begin without it instead of waiting for it until their deadline. (A
 * bucket it sends for one of them all the same is late: counted and
 * dropped.) */
static void
close_slots (RlxLeader *self, const char *id)
{
  rlx_round_close_slot (self->round, id);
  slots_drop (self->next_slots, id);
  slots_drop (self->ahead.slots, id);
}

/* Admit @p (or send it a fresh snapshot). */
void
rlx_leader_admit (RlxLeader *self, RlxPeer *p, RlxMsgJoin *join)
{
  RlxMemberAcks *ms;

  /* A repeated plain join from a member in step with us (its snapshot
   * crossed its retry) changes nothing: ignore it, or its slice of the round
   * in flight would be written off. */
  if (g_strcmp0 (join->reason, "join") == 0 && rlx_leadership_has_member (self->ctx->lead, p->id) &&
      join->step == rlx_cohort_applied (self->ctx) &&
      join->hash == rlx_replica_get_hash (self->ctx->replica))
    return;
  if (rlx_leadership_add_member (self->ctx->lead, p->id))
    {
    OWNER (member_event, RLX_EVENT_MEMBER_JOINED, p->id, NULL);
    }
  p->late_run = 0;
  ms = rlx_commits_member (self->commits, p->id);
  ms->known = FALSE;
  if (ms->has_held)
    {
      rlx_msg_clear (&ms->held);
      ms->has_held = FALSE;
    }
  /* A pending slice of a member that needs a snapshot will not come. The
   * snapshot is read from the backend after everything queued there — an
   * update being made included — and stamped with the state that read
   * sees; a round that waits for this member starts after it
   * (on_snapshot_built), so the member gets its snapshot before the step
   * that counts on it. A frame made before it was admitted does not list
   * it: its commit is in the snapshot, its assignment is not the member's. */
  close_slots (self, p->id);
  rlx_snapshots_send_around (self->ctx->snapshots, p, join->reason, join->step);
}

/* A member committed a step we (the new leader) never received: take its
 * state and restart the round after it. */
static void
on_adopted (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  Adopting *l = user_data;
  RlxLeader *self = l->self;
  BUSY_BEGIN;

  self->ctx->loading = FALSE;
  if (!ok)
    rlx_cohort_emit_error (self->ctx, "a member's snapshot does not match its hash");
  else if (rlx_leadership_is_leader (self->ctx->lead) && !finished (self))
    {
      /* the load forgot the update stream's residual (and the backend
       * holds the member's parameters) */
      self->last_commit = rlx_replica_get_step (replica);
      self->round_epoch = rlx_replica_get_epoch (replica);
      self->round_pos = rlx_replica_get_pos (replica);
      rlx_cohort_emit_snapshot_from (self->ctx, l->msg.node, rlx_replica_get_step (replica),
                                          rlx_replica_get_hash (replica),
                                          "a member was ahead of the new leader");
      self->ctx->ops->step_changed (self->ctx->owner);
      if (rlx_cohort_at_last_step (self->ctx, rlx_cohort_applied (self->ctx)))
        OWNER (finish, TRUE, "all steps committed");
      else
        rlx_leader_publish (self, FALSE);
    }
  rlx_msg_clear (&l->msg);
  g_free (l);
  BUSY_END;
}

/* A member's snapshot of a newer step than ours, in our term (of our
 * fork): adopt it. */
void
rlx_leader_on_snapshot (RlxLeader *self, RlxPeer *p, RlxMsg *m)
{
  RlxMsgSnapshot *s = &m->u.snapshot;
  Adopting *l;
  gint64 common, sparse_common;

  if (s->term != rlx_leadership_get_term (self->ctx->lead) ||
      !rlx_lineage_same_fork (self->ctx->lineage, &s->lineage) ||
      s->step <= rlx_cohort_applied (self->ctx) ||
      !rlx_leadership_has_member (self->ctx->lead, p->id) || self->ctx->loading)
    return;
  rlx_leader_abandon_round (self);
  l = g_new0 (Adopting, 1);
  l->self = self;
  common = rlx_replica_agrees_until (self->ctx->replica, s, &sparse_common);
  rlx_msg_steal (&l->msg, m);
  self->ctx->loading = TRUE;
  rlx_replica_load_snapshot (self->ctx->replica, &l->msg.u.snapshot,
                             common >= 0 ? common : sparse_common, on_adopted, l);
  rlx_compute_queue_load_momentum (self->ctx->queue, l->msg.u.snapshot.outer
                                                     ? &l->msg.u.snapshot.momentum : NULL,
                                   l->msg.u.snapshot.mhash);
}

/* ── life cycle ─────────────────────────────────────────────────────────── */

RlxLeader *
rlx_leader_new (RlxCohortContext *ctx)
{
  RlxLeader *self = g_new0 (RlxLeader, 1);

  self->ctx = ctx;
  self->held_own = g_ptr_array_new_with_free_func ((GDestroyNotify) held_own_free);
  rlx_norm_guard_init (&self->norms, ctx->max_norm_ratio);
  self->commits = rlx_commits_new (ctx);
  self->round = rlx_round_new (ctx->n);
  g_signal_connect (self->round, "complete", G_CALLBACK (on_round_complete), self);
  g_signal_connect (self->round, "rejected", G_CALLBACK (on_round_rejected), self);
  g_signal_connect (self->round, "late", G_CALLBACK (on_round_late), self);
  return self;
}

void
rlx_leader_free (RlxLeader *self)
{
  if (self == NULL)
    return;
  g_signal_handlers_disconnect_by_data (self->round, self);
  rlx_round_cancel (self->round);
  g_clear_object (&self->round);
  g_clear_pointer (&self->next_slots, g_array_unref);
  ahead_clear (self);
  g_clear_pointer (&self->held_own, g_ptr_array_unref);
  g_clear_pointer (&self->commits, rlx_commits_free);
  g_free (self);
}

void
rlx_leader_take_over (RlxLeader *self, gboolean failover, guint64 last_commit)
{
  if (failover)
    self->rounds_started = TRUE;
  self->rounds_measured = 0;
  self->takeover_round_us = failover ? self->ctx->member_round_us : 0;
  self->last_commit = last_commit;
  self->publish_waiting = FALSE;
  self->round_epoch = rlx_replica_get_epoch (self->ctx->replica);
  self->round_pos = rlx_replica_get_pos (self->ctx->replica);
}

void
rlx_leader_step_down (RlxLeader *self)
{
  rlx_leader_abandon_round (self);
  self->publish_waiting = FALSE;
  rlx_commits_clear (self->commits);
}

void
rlx_leader_member_lost (RlxLeader *self, const char *id)
{
  rlx_commits_forget_member (self->commits, id);
  close_slots (self, id);
  rlx_commits_check (self->commits);
}

void
rlx_leader_commit_applied (RlxLeader *self)
{
  /* Taken over while this commit was being applied: the first round
   * waited for it. */
  if (rlx_leadership_is_leader (self->ctx->lead) && self->publish_waiting &&
      rlx_compute_queue_member_applying (self->ctx->queue) == 0 &&
      rlx_cohort_applied (self->ctx) >= self->last_commit)
    {
      self->round_epoch = rlx_replica_get_epoch (self->ctx->replica);
      self->round_pos = rlx_replica_get_pos (self->ctx->replica);
      rlx_leader_publish (self, FALSE);
    }
}
