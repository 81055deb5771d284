/* rlx-follower.c — the member's flow: step frames (commit, assignment),
 * the gradient to the leader, snapshots received (rlx-follower.h) */
#include "rlx-config.h"
#include "rlx-follower.h"
#include "rlx-sample-log.h"
#include "core/cohort/rlx-lineage.h"
#include "core/cohort/rlx-split.h"
#include "core/p2p/rlx-trace.h"

#include <string.h>

#define INBOX_MAX 16

struct _RlxFollower {
  RlxCohortContext *ctx;
  GQueue           inbox;           /* RlxMsg* step frames waiting for the replica */
  guint            inbox_early;     /* how many at its head came before our snapshot */
  guint64          ahead_sent_term;
  guint64          steps_term;      /* term of the last step frame followed */
  guint            unlisted;        /* step frames in a row that left us out */
  guint64          expect_commit;   /* commit being applied (0: none) */
  RlxMsg          *corrupting;      /* the step frame whose report waits for the hash
                                     * fault's corruption (rlx_replica_corrupt) */
};

/* A snapshot being loaded. */
typedef struct {
  RlxFollower    *self;
  RlxMsg          msg;
  gint64          common;
  guint64         had;
  guint64         term_base;
  guint64         history_from; /* the first step our hash history holds */
  gint64          sparse_common; /* the newest of the snapshot's sparse steps whose hash
                                  * is ours too (-1: none) */
} Loading;

/* Main-loop time of the follower's handlers (per round, for "done"). */
#define BUSY_BEGIN gint64 busy_t0 = rlx_round_stats_now ()
#define BUSY_END rlx_round_stats_add_busy (self->ctx->stats, rlx_round_stats_now () - busy_t0)

/* What the owner does for us (RlxCohortOps). */
#define OWNER(op, ...) self->ctx->ops->op (self->ctx->owner, __VA_ARGS__)

static void inbox_drain (RlxFollower *self);

static void
msg_free (gpointer p)
{
  rlx_msg_clear (p);
  g_free (p);
}

static RlxRole
role (RlxFollower *self)
{
  return rlx_leadership_get_role (self->ctx->lead);
}

static void
emit_error (RlxFollower *self, const char *message)
{
  rlx_cohort_emit_error (self->ctx, message);
}

static void
request_snapshot (RlxFollower *self, const char *reason)
{
  OWNER (request_snapshot, reason);
}

static void
transition (RlxFollower *self, RlxRole to, const char *leader, guint64 term, const char *reason)
{
  OWNER (transition, to, leader, term, reason);
}

void
rlx_follower_send_ack (RlxFollower *self)
{
  RlxCohortContext *ctx = self->ctx;
  RlxPeer *lp = rlx_peer_set_lookup (ctx->peers, rlx_leadership_get_leader (ctx->lead));
  RlxMsg m;

  if (lp == NULL || role (self) != RLX_ROLE_MEMBER)
    return;
  rlx_msg_init (&m, RLX_MSG_ACK, ctx->node_id);
  m.u.ack.term = rlx_leadership_get_term (ctx->lead);
  m.u.ack.step = rlx_cohort_applied (ctx);
  m.u.ack.hash = rlx_replica_get_hash (ctx->replica);
  {
    /* after an outer round: θ and the momentum too (the leader checks it) */
    guint h;
    if (!rlx_sync_state_commit_info (ctx->sync, m.u.ack.step, &h, &m.u.ack.ohash))
      m.u.ack.ohash = 0;
  }
  OWNER (send_msg, lp, &m);
  rlx_msg_clear (&m);
}

/* The commit of @m is applied and acknowledged: report it. */
static void
report_step (RlxFollower *self, RlxMsg *m)
{
  RlxMsgStep *s = &m->u.step;
  RlxCohortContext *ctx = self->ctx;
  gint64 now = g_get_monotonic_time ();

  /* how often the cohort commits, as this member sees it: if it takes
   * over, its first rounds' deadline (rlx_leader_take_over) */
  /* (a gap past the heartbeat timeout is a failover or a stall, not a
   * round) */
  if (ctx->member_commit_at > 0 && now > ctx->member_commit_at &&
      now - ctx->member_commit_at < (gint64) rlx_peer_set_get_timeout (ctx->peers) * 1000)
    {
      double us = (double) (now - ctx->member_commit_at);
      ctx->member_round_us = ctx->member_round_us > 0 ? 0.8 * ctx->member_round_us + 0.2 * us : us;
    }
  ctx->member_commit_at = now;
  OWNER (committed, s->commit, rlx_replica_get_hash (self->ctx->replica), s->loss, s->samples,
         s->contributors, s->late, s->rejected, rlx_cohort_members (self->ctx)->len, 0);
  if (rlx_cohort_at_last_step (self->ctx, s->commit))
    OWNER (finish, TRUE, "all steps committed");
}

/* The commit of @m is applied (its hash is the replica's): tell the leader
 * and report it. */
static void
report_commit (RlxFollower *self, RlxMsg *m)
{
  rlx_follower_send_ack (self);
  report_step (self, m);
}

static void
on_corrupted (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  RlxFollower *self = user_data;
  RlxMsg *m = g_steal_pointer (&self->corrupting);
  BUSY_BEGIN;

  if (m && (role (self) == RLX_ROLE_MEMBER || role (self) == RLX_ROLE_LEADER) &&
      rlx_replica_get_step (replica) == m->u.step.commit)
    report_commit (self, m);
  g_clear_pointer (&m, msg_free);
  inbox_drain (self);
  BUSY_END;
}

/* The compute worker applied a commit and/or computed our gradient
 * (queue_step): the ack and the "step" event, then the bucket to the
 * leader. */
void
rlx_follower_stepped (RlxFollower *self, RlxMemberStep *ms, const GError *error)
{
  RlxCohortContext *ctx = self->ctx;
  gboolean current = ms->current;
  gboolean report_after = FALSE;

  if (role (self) == RLX_ROLE_STOPPED)
    goto out;
  if (error != NULL)
    {
      g_autofree char *msg = g_strdup_printf ("step %" G_GUINT64_FORMAT " failed: %s",
                                              ms->n > 0 ? ms->step : ms->commit, error->message);
      emit_error (self, msg);
      if (g_error_matches (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_DEVICE_LOST))
        OWNER (finish, FALSE, msg);
      else if (current && ms->update.frame != NULL && !ms->applied &&
               role (self) == RLX_ROLE_MEMBER)
        /* the update was refused (or could not be applied): our
         * parameters are the cohort's no more */
        request_snapshot (self, "the commit's update could not be applied");
      goto out;
    }
  if (!current)
    goto out;   /* a snapshot replaced the state it worked on */

  if (ms->applied)
    {
      RlxMsgStep *s = &ms->msg->u.step;

      self->expect_commit = 0;
      ctx->ops->training (ctx->owner);
      rlx_round_stats_backend (ctx->stats, ms->host_bytes, 0, 0,
                               rlx_worker_wait_us (rlx_compute_queue_get_worker (ctx->queue)));
      rlx_replica_commit (ctx->replica, s->commit, ms->hash, ms->epoch, ms->pos);
      rlx_sync_state_note_commit (ctx->sync, s->commit, ms->commit_outer.h, ms->outer_hash);
      rlx_replica_set_loss (ctx->replica, s->loss);
      if (role (self) == RLX_ROLE_MEMBER || role (self) == RLX_ROLE_LEADER)
        {
          if (rlx_fault_plan_take_hash (&ctx->faults, s->commit))
            {
              /* Test fault: diverge by one bit, then carry on as if
               * nothing happened (the leader and the next base check must
               * notice). */
              g_clear_pointer (&self->corrupting, msg_free);
              self->corrupting = g_steal_pointer (&ms->msg);
              rlx_replica_corrupt (ctx->replica, on_corrupted, self);
            }
          else
            {
              /* the ack now, the report once the bucket is on its way:
               * the leader waits for both, nobody for the report */
              rlx_follower_send_ack (self);
              report_after = TRUE;
            }
        }
    }
  if (ms->computed && role (self) == RLX_ROLE_MEMBER &&
      ms->term == rlx_leadership_get_term (ctx->lead))
    {
      RlxPeer *lp = rlx_peer_set_lookup (ctx->peers, rlx_leadership_get_leader (ctx->lead));

      rlx_cohort_note_self_speed (ctx, ms->n, ms->compute_us);
      /* (M.send before the hand-off, M.sent after: the leader may receive
       * the bucket in between) */
      rlx_trace ("M.send", ms->step);
      /* (who sends it: the leader's L.rx.node of it says the same) */
      rlx_trace ("M.node", g_str_hash (ctx->node_id));
      if (lp)
        OWNER (send_frame, lp, ms->refused ? RLX_SEND_CONTROL : RLX_SEND_BULK, ms->frame,
               ms->refused ? 0 : ctx->n, ms->precision);
      rlx_trace ("M.sent", ms->step);
      if (ms->refused)
        {
          g_autofree char *msg = g_strdup_printf ("step %" G_GUINT64_FORMAT ": %s", ms->step,
                                                  ms->refused);
          emit_error (self, msg);
        }
    }
  if (report_after)
    report_step (self, ms->msg);
out:
  inbox_drain (self);
}

/* Queue @ms (taken) on the compute worker, with what this node's
 * configuration and faults say about its gradient. */
static void
queue_step (RlxFollower *self, RlxMemberStep *ms)
{
  RlxCohortContext *ctx = self->ctx;

  if (ms->n > 0)
    {
      rlx_msg_init (&ms->header, RLX_MSG_GRAD, ctx->node_id);
      ms->header.u.grad.term = ms->term;
      ms->header.u.grad.step = ms->step;
      ms->precision = ctx->precision;
      ms->fault = rlx_fault_plan_gradient (&ctx->faults, ms->step);
      ms->stall_us = rlx_fault_plan_stall_us (&ctx->faults, ms->step);
      ms->claim_fast = ctx->faults.claim_fast;
    }
  ms->feedback = ctx->error_feedback;
  rlx_compute_queue_member_step (ctx->queue, ms);
}

/* Whether every slot of ours in step frame @s is one we take
 * (rlx_split_slot_fits: within the epoch for a step; for an outer round at
 * most H times our max_batch or an epoch, and never more than
 * RLX_SPLIT_MAX_SLOT), so a frame cannot make us hold more indices than
 * that. FALSE: the frame is refused, with the reason logged. */
static gboolean
slots_fit (RlxFollower *self, const RlxMsgStep *s)
{
  RlxCohortContext *ctx = self->ctx;
  RlxWorker *worker = rlx_compute_queue_get_worker (ctx->queue);

  for (guint i = 0; s->assign && i < s->assign->len; i++)
    {
      const RlxMsgSlot *slot = &g_array_index (s->assign, RlxMsgSlot, i);
      g_autoptr(GError) error = NULL;

      if (!rlx_cohort_is_self (ctx, slot->node) ||
          rlx_split_slot_fits (slot->start, slot->count, s->h,
                               rlx_replica_get_n_train (ctx->replica),
                               rlx_backend_max_batch (rlx_worker_backend (worker)), &error))
        continue;
      {
        g_autofree char *msg = g_strdup_printf ("step %" G_GUINT64_FORMAT "'s frame (term %"
                                                G_GUINT64_FORMAT ") refused: %s",
                                                s->step, s->term, error->message);
        emit_error (self, msg);
      }
      return FALSE;
    }
  return TRUE;
}

/* One step frame, with no commit being applied (the replica's hash is of
 * the last commit). */
static void
member_on_step (RlxFollower *self, RlxPeer *p, RlxMsg *m, gboolean early)
{
  RlxCohortContext *ctx = self->ctx;
  RlxMsgStep *s = &m->u.step;
  guint64 have = rlx_cohort_applied (ctx);
  gboolean committed = FALSE, accepted_prev = FALSE, listed = TRUE, foreign;
  RlxMemberStep *ms;

  if (!slots_fit (self, s))
    return;
  if (s->commit > 0)
    {
      if (s->commit == have + 1)
        {
          if (s->base != rlx_replica_get_hash (ctx->replica))
            {
              RlxEvent *e = rlx_event_new (RLX_EVENT_DIVERGED);
              e->u.diverged.node = g_strdup (ctx->node_id);
              e->u.diverged.step = have;
              e->u.diverged.hash = rlx_replica_get_hash (ctx->replica);
              e->u.diverged.expected = s->base;
              OWNER (emit, e);
              request_snapshot (self, "parameter hash differs from the leader's");
              return;
            }
          if (s->update.n != ctx->n)
            {
              request_snapshot (self, "commit without a whole update");
              return;
            }
          committed = TRUE;
          accepted_prev = rlx_cohort_str_array_contains (s->contributors, ctx->node_id);
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
          rlx_snapshots_send (ctx->snapshots, p, "a member is ahead of the new leader");
        }
      return;
    }
  self->steps_term = s->term;
  /* (overlap, lag 1: a commit's frame assigns the round after the next,
   * and a restart assigns its first two rounds in two frames) */
  if (s->step != have + (committed ? 1 + s->lag : 0) + 1 &&
      !(s->lag > 0 && !committed && s->step == have + 2) && !s->final)
    {
      request_snapshot (self, "step out of sequence");
      return;
    }
  /* A frame made before the leader admitted us (its update was being
   * computed while our snapshot travelled) does not list us yet: its commit
   * is ours too, its assignment is not. Only a leader that keeps leaving us
   * out has really dropped us. */
  if (!rlx_cohort_str_array_contains (s->members, ctx->node_id))
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
      OWNER (replace_members, g_steal_pointer (&s->members));
      s->members = g_ptr_array_new_with_free_func (g_free);
    }

  /* An overlapped frame without a commit (a restart's) assigns from the
   * state its base names: one made at another state than ours assigns us
   * nothing. A new leader one commit behind us restarts from its own state
   * before it adopts ours; its second frame names the step after ours, and
   * its slots begin where that leader thought — a bucket of it would be
   * taken for the same step assigned again after the adoption. */
  foreign = s->commit == 0 && s->lag > 0 && s->base != rlx_replica_get_hash (ctx->replica);
  ms = rlx_member_step_new ();
  /* the cohort's sync mode is the leader's: each frame says it */
  if (rlx_sync_state_follow (ctx->sync, s, &ms->outer, &ms->commit_outer))
    OWNER (emit, rlx_sync_state_event (ctx->sync));
  if (committed)
    {
      rlx_msg_array_copy (&ms->update, &s->update);
      ms->commit = s->commit;
      ms->perturb_momentum = rlx_fault_plan_take_momentum (&ctx->faults, s->commit);
      /* the replica holds where the round after the commit begins (the
       * frame's own step, or the one it names with overlap) */
      ms->epoch = s->cepoch >= 0 ? (guint) s->cepoch : s->epoch;
      ms->pos = s->cpos >= 0 ? (guint) s->cpos : s->pos;
      ms->accept_prev = accepted_prev;
      self->expect_commit = s->commit;
    }
  OWNER (assigned, s->step, 0);
  for (guint i = 0; listed && !foreign && s->assign && i < s->assign->len; i++)
    {
      RlxMsgSlot *slot = &g_array_index (s->assign, RlxMsgSlot, i);
      if (rlx_cohort_is_self (ctx, slot->node))
        {
          guint32 *indices = rlx_replica_indices (ctx->replica, s->epoch, slot->start,
                                                  slot->count);

          if (indices == NULL)
            {
              g_autofree char *msg = g_strdup_printf ("step %" G_GUINT64_FORMAT ": no memory "
                                                      "for a slot of %u samples; not taken",
                                                      s->step, slot->count);
              emit_error (self, msg);
              continue;
            }
          ms->term = s->term;
          ms->step = s->step;
          g_free (ms->indices);
          ms->indices = indices;
          rlx_sample_log (ctx->node_id, s->term, s->step, s->epoch, slot->start, slot->count,
                          ms->indices);
          ms->n = slot->count;
          OWNER (assigned, s->step, slot->count);
        }
    }
  if (!committed && ms->n == 0)
    {
      rlx_member_step_free (ms);
      return;
    }
  /* Parameters on the host: the commit first, on its own, so its ack goes
   * out before the gradient is computed (the apply hashes in the pass that
   * applies). On a GPU both are one submission — the apply runs in front of
   * the gradient and the hash beside it — and the ack goes out with the
   * bucket. */
  if (committed && ms->n > 0 &&
      !rlx_backend_params_on_device (rlx_worker_backend (rlx_compute_queue_get_worker (ctx->queue))))
    {
      RlxMemberStep *grad = rlx_member_step_new ();

      grad->term = ms->term;
      grad->step = ms->step;
      grad->outer = ms->outer;
      grad->indices = g_steal_pointer (&ms->indices);
      grad->n = ms->n;
      ms->n = 0;
      ms->msg = g_new0 (RlxMsg, 1);
      rlx_msg_steal (ms->msg, m);
      queue_step (self, ms);
      queue_step (self, grad);
      return;
    }
  ms->msg = g_new0 (RlxMsg, 1);
  rlx_msg_steal (ms->msg, m);
  queue_step (self, ms);
}

/* Process queued step frames while no commit is being applied. */
static void
inbox_drain (RlxFollower *self)
{
  RlxCohortContext *ctx = self->ctx;
  RlxMsg *m;

  if (role (self) != RLX_ROLE_MEMBER)
    return;   /* kept for after the snapshot */
  while (rlx_compute_queue_member_applying (ctx->queue) == 0 &&
         !rlx_replica_busy (ctx->replica) && !ctx->loading &&
         (m = g_queue_pop_head (&self->inbox)))
    {
      RlxPeer *p = rlx_peer_set_lookup (ctx->peers, m->node);
      gboolean early = self->inbox_early > 0;

      if (early)
        self->inbox_early--;
      if (p && role (self) == RLX_ROLE_MEMBER &&
          g_strcmp0 (m->node, rlx_leadership_get_leader (ctx->lead)) == 0 &&
          m->u.step.term == rlx_leadership_get_term (ctx->lead))
        member_on_step (self, p, m, early);
      msg_free (m);
    }
}

void
rlx_follower_on_step (RlxFollower *self, RlxPeer *p, RlxMsg *m)
{
  RlxCohortContext *ctx = self->ctx;
  RlxMsgStep *s = &m->u.step;
  guint64 term = rlx_leadership_get_term (ctx->lead);
  /* Its term compares with ours only within one fork (step frames carry
   * none: the sender's, as its hello and announcements said). */
  gboolean ours = g_strcmp0 (rlx_leadership_get_leader (ctx->lead), p->id) == 0 ||
                  rlx_lineage_same_fork (ctx->lineage, &p->lineage);
  gboolean outside = !ours || !rlx_leadership_has_member (ctx->lead, p->id);
  RlxMsg *keep;

  rlx_trace ("M.rx", s->step);
  if (s->commit > 0)
    rlx_trace ("M.rx.commit", s->commit);
  if (s->term < term && ours)
    {
      /* A leader of an older term that missed the change (it was cut off):
       * tell it who leads now, so it steps down. */
      if (rlx_leadership_get_leader (ctx->lead) &&
          (role (self) == RLX_ROLE_MEMBER || role (self) == RLX_ROLE_LEADER))
        rlx_cohort_send_leader (ctx, p);
      return;
    }
  if (rlx_leadership_is_leader (ctx->lead))
    {
      if (s->term == term && strcmp (p->id, ctx->node_id) > 0)
        return;
      /* A leader from outside our group (or fork): only the merge rule,
       * with its claim checked, makes us yield (rlx_coordinator_merge_with),
       * never a step frame (issue 29, item 9). */
      if (outside)
        return;
      /* A leader of a newer term (or a more senior one of ours). */
      transition (self, RLX_ROLE_JOINING, p->id, s->term, "another leader took over");
      return;
    }
  if (role (self) == RLX_ROLE_MEMBER &&
      (s->term > term || g_strcmp0 (rlx_leadership_get_leader (ctx->lead), p->id) != 0))
    {
      if (outside && rlx_peer_set_lookup (ctx->peers, rlx_leadership_get_leader (ctx->lead)))
        return;   /* from outside our cohort while our leader is in reach: it judges merges */
      if (outside)
        {
          /* A leader from outside our cohort (a merge), ours gone: join it. */
          rlx_lineage_change (ctx->lineage);
          transition (self, RLX_ROLE_JOINING, p->id, s->term, "merge");
          return;
        }
      transition (self, RLX_ROLE_MEMBER, p->id, s->term, NULL);
      rlx_follower_send_ack (self);
    }
  /* Not admitted yet: the leader's frames are kept until its snapshot is
   * loaded (one may overtake it: the snapshot is made after the replica's
   * pending work), then those older than the snapshot are skipped. */
  if (role (self) != RLX_ROLE_MEMBER &&
      !(role (self) == RLX_ROLE_JOINING &&
        g_strcmp0 (rlx_leadership_get_leader (ctx->lead), p->id) == 0))
    return;
  if (g_queue_get_length (&self->inbox) >= INBOX_MAX)
    {
      msg_free (g_queue_pop_head (&self->inbox));
      if (self->inbox_early > 0)
        self->inbox_early--;
    }
  if (role (self) != RLX_ROLE_MEMBER)
    self->inbox_early++;
  if (s->commit > 0 && s->update.frame)
    OWNER (peer_precision, p, s->update.precision);
  keep = g_new0 (RlxMsg, 1);
  rlx_msg_steal (keep, m);
  g_queue_push_tail (&self->inbox, keep);
  inbox_drain (self);
}

static void
loading_free (Loading *l)
{
  rlx_msg_clear (&l->msg);
  g_free (l);
}

static void
on_snapshot_loaded (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  Loading *l = user_data;
  RlxFollower *self = l->self;
  RlxCohortContext *ctx = self->ctx;
  RlxMsgSnapshot *s = &l->msg.u.snapshot;
  RlxPeer *p = rlx_peer_set_lookup (ctx->peers, l->msg.node);
  RlxEvent *merged;
  BUSY_BEGIN;

  ctx->loading = FALSE;
  if (!ok)
    {
      emit_error (self, "snapshot does not match its hash; asking again");
      goto out;
    }
  if (p == NULL || role (self) == RLX_ROLE_STOPPED)
    goto out;
  transition (self, RLX_ROLE_MEMBER, p->id, s->term, NULL);
  /* It led when it sent this: what its heartbeats said before the load is
   * older news, and one that says it is alone now is a change
   * (rlx-coordinator.c, on_peer_state). */
  rlx_peer_note_leads (p, &s->lineage, s->term);
  /* Taken back: a link that closes from now on is not about our stall. */
  rlx_peer_set_forget_stall (ctx->peers);
  self->steps_term = s->term;
  OWNER (replace_members, g_steal_pointer (&s->members));
  rlx_cohort_emit_snapshot_from (ctx, p->id, s->step, s->hash, NULL);
  ctx->ops->joined (ctx->owner);
  /* After a split: the steps this node had that the cohort does not. */
  merged = rlx_lineage_adopted (ctx->lineage, p->id, s, l->had, l->common, l->sparse_common,
                                l->term_base,
                                l->history_from, rlx_cohort_applied (ctx));
  if (merged)
    OWNER (emit, merged);
  rlx_follower_send_ack (self);
  ctx->ops->step_changed (ctx->owner);
  if (rlx_cohort_at_last_step (ctx, rlx_cohort_applied (ctx)))
    OWNER (finish, TRUE, "all steps committed");
out:
  loading_free (l);
  inbox_drain (self);
  BUSY_END;
}

void
rlx_follower_on_snapshot (RlxFollower *self, RlxPeer *p, RlxMsg *m, guint64 seed)
{
  RlxCohortContext *ctx = self->ctx;
  RlxMsgSnapshot *s = &m->u.snapshot;
  Loading *l;

  if (g_strcmp0 (s->leader, p->id) != 0)
    return;   /* only the leader's own snapshot admits */
  /* The replica's queued work is for the state we leave (the frames kept
   * in the inbox are judged against the snapshot's state after it). */
  rlx_replica_cancel (ctx->replica);
  g_clear_pointer (&self->corrupting, msg_free);
  self->expect_commit = 0;
  rlx_compute_queue_forget_member_steps (ctx->queue);
  rlx_compute_queue_drop_assignments (ctx->queue);
  rlx_replica_set_seed (ctx->replica, seed);
  l = g_new0 (Loading, 1);
  l->self = self;
  l->had = rlx_cohort_applied (ctx);
  l->term_base = rlx_lineage_term_base (ctx->lineage);
  l->common = rlx_replica_agrees_until (ctx->replica, s, &l->sparse_common);
  l->history_from = rlx_replica_history_start (ctx->replica);
  rlx_replica_set_loss (ctx->replica, s->loss);
  rlx_msg_steal (&l->msg, m);
  ctx->loading = TRUE;
  /* our hashes go on where the snapshot's history is ours (a state of our
   * own lineage: when it yields later, the merge reports from the split) */
  rlx_replica_load_snapshot (ctx->replica, &l->msg.u.snapshot,
                             l->common >= 0 ? l->common : l->sparse_common,
                             on_snapshot_loaded, l);
  /* the outer momentum of the same state (zero when it has none) */
  rlx_compute_queue_load_momentum (ctx->queue, l->msg.u.snapshot.outer
                                               ? &l->msg.u.snapshot.momentum : NULL,
                                   l->msg.u.snapshot.mhash);
}

void
rlx_follower_forget_frames (RlxFollower *self)
{
  g_queue_clear_full (&self->inbox, msg_free);
  g_queue_init (&self->inbox);
  self->inbox_early = 0;
}

guint64
rlx_follower_applying (RlxFollower *self)
{
  return self->expect_commit;
}

/* ── life cycle ─────────────────────────────────────────────────────────── */

RlxFollower *
rlx_follower_new (RlxCohortContext *ctx)
{
  RlxFollower *self = g_new0 (RlxFollower, 1);

  self->ctx = ctx;
  g_queue_init (&self->inbox);
  return self;
}

void
rlx_follower_free (RlxFollower *self)
{
  if (self == NULL)
    return;
  g_queue_clear_full (&self->inbox, msg_free);
  g_clear_pointer (&self->corrupting, msg_free);
  g_free (self);
}
