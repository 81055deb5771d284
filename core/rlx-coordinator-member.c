/* rlx-coordinator-member.c — the member's flow: step frames (commit,
 * assignment), snapshots received (see rlx-coordinator-private.h) */
#include "rlx-config.h"
#include "rlx-coordinator-private.h"
#include "core/p2p/rlx-trace.h"

#include <string.h>

static void inbox_drain (RlxCoordinator *self);

/* The commit of @m is applied and acknowledged: report it. */
static void
report_step (RlxCoordinator *self, RlxMsg *m)
{
  RlxMsgStep *s = &m->u.step;

  rlx_coordinator_emit_step (self, s->commit, rlx_replica_get_hash (self->replica), s->loss,
                             s->samples, s->contributors, s->late, s->rejected,
                             members (self)->len);
  if (self->ctx.steps > 0 && s->commit >= self->ctx.steps)
    rlx_coordinator_finish (self, TRUE, "all steps committed");
}

/* The commit of @m is applied (its hash is the replica's): tell the leader
 * and report it. */
static void
report_commit (RlxCoordinator *self, RlxMsg *m)
{
  rlx_coordinator_send_ack (self);
  report_step (self, m);
}

static void
on_corrupted (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  RlxCoordinator *self = user_data;
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
rlx_coordinator_member_stepped (RlxMemberStep *ms, const GError *error, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  gboolean current = ms->current;
  gboolean report_after = FALSE;
  BUSY_BEGIN;

  if (role (self) == RLX_ROLE_STOPPED)
    goto out;
  if (error != NULL)
    {
      g_autofree char *msg = g_strdup_printf ("step %" G_GUINT64_FORMAT " failed: %s",
                                              ms->n > 0 ? ms->step : ms->commit, error->message);
      rlx_coordinator_emit_error (self, msg);
      if (g_error_matches (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_DEVICE_LOST))
        rlx_coordinator_finish (self, FALSE, msg);
      else if (current && ms->update.frame != NULL && !ms->applied &&
               role (self) == RLX_ROLE_MEMBER)
        /* the update was refused (or could not be applied): our
         * parameters are the cohort's no more */
        rlx_coordinator_request_snapshot (self, "the commit's update could not be applied");
      goto out;
    }
  if (!current)
    goto out;   /* a snapshot replaced the state it worked on */

  if (ms->applied)
    {
      RlxMsgStep *s = &ms->msg->u.step;

      self->expect_commit = 0;
      rlx_coordinator_busy_poll_begin (self);
      rlx_coordinator_note_backend (self, ms->host_bytes, 0, 0);
      rlx_replica_commit (self->replica, s->commit, ms->hash, s->epoch, s->pos);
      rlx_replica_set_loss (self->replica, s->loss);
      if (role (self) == RLX_ROLE_MEMBER || role (self) == RLX_ROLE_LEADER)
        {
          if (rlx_fault_plan_take_hash (&self->ctx.faults, s->commit))
            {
              /* Test fault: diverge by one bit, then carry on as if
               * nothing happened (the leader and the next base check must
               * notice). */
              g_clear_pointer (&self->corrupting, msg_free);
              self->corrupting = g_steal_pointer (&ms->msg);
              rlx_replica_corrupt (self->replica, on_corrupted, self);
            }
          else
            {
              /* the ack now, the report once the bucket is on its way:
               * the leader waits for both, nobody for the report */
              rlx_coordinator_send_ack (self);
              report_after = TRUE;
            }
        }
    }
  if (ms->computed && role (self) == RLX_ROLE_MEMBER &&
      ms->term == rlx_leadership_get_term (self->lead))
    {
      RlxPeer *lp = rlx_peer_set_lookup (self->peers, rlx_leadership_get_leader (self->lead));

      rlx_cohort_note_self_speed (&self->ctx, ms->n, ms->compute_us);
      if (lp)
        rlx_coordinator_send_frame (self, lp, ms->refused ? RLX_SEND_CONTROL : RLX_SEND_BULK,
                                    ms->frame, ms->refused ? 0 : self->n, ms->precision);
      rlx_trace ("M.sent", ms->step);
      if (ms->refused)
        {
          g_autofree char *msg = g_strdup_printf ("step %" G_GUINT64_FORMAT ": %s", ms->step,
                                                  ms->refused);
          rlx_coordinator_emit_error (self, msg);
        }
    }
  if (report_after)
    report_step (self, ms->msg);
out:
  inbox_drain (self);
  /* Taken over while this commit was being applied: the first round
   * waited for it. */
  rlx_leader_commit_applied (self->leader);
  BUSY_END;
}

/* Queue @ms (taken) on the compute worker, with what this node's
 * configuration and faults say about its gradient. */
static void
queue_step (RlxCoordinator *self, RlxMemberStep *ms)
{
  if (ms->n > 0)
    {
      rlx_msg_init (&ms->header, RLX_MSG_GRAD, self->node_id);
      ms->header.u.grad.term = ms->term;
      ms->header.u.grad.step = ms->step;
      ms->precision = self->ctx.precision;
      ms->fault = rlx_fault_plan_gradient (&self->ctx.faults, ms->step);
      ms->stall_us = rlx_fault_plan_stall_us (&self->ctx.faults, ms->step);
    }
  ms->feedback = self->ctx.error_feedback;
  rlx_compute_queue_member_step (self->queue, ms);
}

/* One step frame, with no commit being applied (the replica's hash is of
 * the last commit). */
static void
member_on_step (RlxCoordinator *self, RlxPeer *p, RlxMsg *m, gboolean early)
{
  RlxMsgStep *s = &m->u.step;
  guint64 have = applied (self);
  gboolean committed = FALSE, accepted_prev = FALSE, listed = TRUE;
  RlxMemberStep *ms;

  if (s->commit > 0)
    {
      if (s->commit == have + 1)
        {
          if (s->base != rlx_replica_get_hash (self->replica))
            {
              rlx_coordinator_request_snapshot (self, "parameter hash differs from the leader's");
              return;
            }
          if (s->update.n != self->n)
            {
              rlx_coordinator_request_snapshot (self, "commit without a whole update");
              return;
            }
          committed = TRUE;
          accepted_prev = str_array_contains (s->contributors, self->node_id);
        }
      else if (s->commit > have + 1)
        {
          rlx_coordinator_request_snapshot (self, "missed a commit");
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
          rlx_snapshots_send (self->snapshots, p, "a member is ahead of the new leader");
        }
      return;
    }
  self->steps_term = s->term;
  if (s->step != have + (committed ? 1 : 0) + 1 && !s->final)
    {
      rlx_coordinator_request_snapshot (self, "step out of sequence");
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
          rlx_coordinator_request_snapshot (self, "not in the member list");
          return;
        }
      listed = FALSE;
    }
  else
    {
      self->unlisted = 0;
      rlx_coordinator_members_replace (self, g_steal_pointer (&s->members));
      s->members = g_ptr_array_new_with_free_func (g_free);
    }

  ms = rlx_member_step_new ();
  if (committed)
    {
      rlx_msg_array_copy (&ms->update, &s->update);
      ms->commit = s->commit;
      ms->epoch = s->epoch;
      ms->pos = s->pos;
      ms->accept_prev = accepted_prev;
      self->expect_commit = s->commit;
    }
  rlx_coordinator_note_assigned (self, s->step, 0);
  for (guint i = 0; listed && s->assign && i < s->assign->len; i++)
    {
      RlxMsgSlot *slot = &g_array_index (s->assign, RlxMsgSlot, i);
      if (is_self (self, slot->node) &&
          (guint64) slot->start + slot->count <= rlx_replica_get_n_train (self->replica))
        {
          const guint32 *perm = rlx_replica_permutation (self->replica, s->epoch);

          ms->term = s->term;
          ms->step = s->step;
          ms->indices = g_memdup2 (perm + slot->start, slot->count * sizeof (guint32));
          ms->n = slot->count;
          rlx_coordinator_note_assigned (self, s->step, slot->count);
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
      !rlx_backend_params_on_device (rlx_worker_backend (self->worker)))
    {
      RlxMemberStep *grad = rlx_member_step_new ();

      grad->term = ms->term;
      grad->step = ms->step;
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
inbox_drain (RlxCoordinator *self)
{
  RlxMsg *m;

  if (role (self) != RLX_ROLE_MEMBER)
    return;   /* kept for after the snapshot */
  while (rlx_compute_queue_member_applying (self->queue) == 0 &&
         !rlx_replica_busy (self->replica) && !self->ctx.loading &&
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

void
rlx_coordinator_on_step_msg (RlxCoordinator *self, RlxPeer *p, RlxMsg *m)
{
  RlxMsgStep *s = &m->u.step;
  guint64 term = rlx_leadership_get_term (self->lead);
  RlxMsg *keep;

  rlx_trace ("M.rx", s->step);
  if (s->term < term)
    {
      /* A leader of an older term that missed the change (it was cut off):
       * tell it who leads now, so it steps down. */
      if (rlx_leadership_get_leader (self->lead) &&
          (role (self) == RLX_ROLE_MEMBER || role (self) == RLX_ROLE_LEADER))
        rlx_coordinator_send_leader_msg (self, p);
      return;
    }
  if (rlx_leadership_is_leader (self->lead))
    {
      if (s->term == term && strcmp (p->id, self->node_id) > 0)
        return;
      /* A leader of a newer term (or a more senior one of ours). */
      rlx_coordinator_transition (self, RLX_ROLE_JOINING, p->id, s->term,
                                  "another leader took over");
      return;
    }
  if (role (self) == RLX_ROLE_MEMBER &&
      (s->term > term || g_strcmp0 (rlx_leadership_get_leader (self->lead), p->id) != 0))
    {
      if (!rlx_leadership_has_member (self->lead, p->id))
        {
          /* A leader from outside our cohort (a merge): join it. */
          self->lineage_change = TRUE;
          rlx_coordinator_transition (self, RLX_ROLE_JOINING, p->id, s->term, "merge");
          return;
        }
      rlx_coordinator_transition (self, RLX_ROLE_MEMBER, p->id, s->term, NULL);
      rlx_coordinator_send_ack (self);
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
    rlx_coordinator_note_precision (self, p, s->update.precision);
  keep = g_new0 (RlxMsg, 1);
  rlx_msg_steal (keep, m);
  g_queue_push_tail (&self->inbox, keep);
  inbox_drain (self);
}

void
rlx_coordinator_loading_free (Loading *l)
{
  rlx_msg_clear (&l->msg);
  g_free (l);
}

static void
on_snapshot_loaded (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  Loading *l = user_data;
  RlxCoordinator *self = l->self;
  RlxMsgSnapshot *s = &l->msg.u.snapshot;
  RlxPeer *p = rlx_peer_set_lookup (self->peers, l->msg.node);
  BUSY_BEGIN;

  self->ctx.loading = FALSE;
  if (!ok)
    {
      rlx_coordinator_emit_error (self, "snapshot does not match its hash; asking again");
      goto out;
    }
  if (p == NULL || role (self) == RLX_ROLE_STOPPED)
    goto out;
  rlx_coordinator_transition (self, RLX_ROLE_MEMBER, p->id, s->term, NULL);
  self->steps_term = s->term;
  rlx_coordinator_members_replace (self, g_steal_pointer (&s->members));
  rlx_cohort_emit_snapshot_from (&self->ctx, p->id, s->step, s->hash, NULL);
  if (!self->joined_reported)
    {
      rlx_coordinator_emit_leader (self);
      rlx_coordinator_emit_joined (self);
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
          /* No step matched although the snapshot's hashes cover the first
           * step of ours: we parted before it (a node that followed the
           * other side's leader from a snapshot of its lineage; its term
           * base may be as late as the leader change that ended it). */
          if (l->common < 0 && s->hashes && l->history_from > 0 &&
              s->hashes_from <= l->history_from &&
              l->history_from < s->hashes_from + s->hashes->len)
            common = MIN (common, l->history_from - 1);
          JsonObject *o = event_new ("merged");
          json_object_set_string_member (o, "node", p->id);
          json_object_set_int_member (o, "discarded", (gint64) (l->had - MIN (common, l->had)));
          json_object_set_int_member (o, "from_step", (gint64) common + 1);
          json_object_set_int_member (o, "to_step", (gint64) l->had);
          json_object_set_boolean_member (o, "exact", l->common >= 0);
          json_object_set_string_member (o, "rule", self->merge_rule ? self->merge_rule
                                         : "the cohort this node was cut off from is kept");
          rlx_coordinator_event_emit (self, o);
        }
    }
  if (self->lineage_change)
    self->term_base = applied (self);   /* the adopted lineage's term from here */
  self->lineage_change = FALSE;
  g_clear_pointer (&self->merge_rule, g_free);
  rlx_coordinator_send_ack (self);
  rlx_coordinator_notify (self, PROP_STEP);
  if (self->ctx.steps > 0 && applied (self) >= self->ctx.steps)
    rlx_coordinator_finish (self, TRUE, "all steps committed");
out:
  rlx_coordinator_loading_free (l);
  inbox_drain (self);
  BUSY_END;
}

void
rlx_coordinator_on_snapshot (RlxCoordinator *self, RlxPeer *p, RlxMsg *m)
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
      rlx_leader_on_snapshot (self->leader, p, m);
      return;
    }
  if (g_strcmp0 (s->leader, p->id) != 0)
    return;   /* only the leader's own snapshot admits */
  /* The replica's queued work is for the state we leave (the frames kept
   * in the inbox are judged against the snapshot's state after it). */
  rlx_replica_cancel (self->replica);
  g_clear_pointer (&self->corrupting, msg_free);
  self->expect_commit = 0;
  rlx_compute_queue_forget_member_steps (self->queue);
  rlx_compute_queue_drop_assignments (self->queue);
  rlx_replica_set_seed (self->replica, seed);
  l = g_new0 (Loading, 1);
  l->self = self;
  l->had = applied (self);
  l->term_base = self->term_base;
  l->common = s->hashes ? rlx_replica_common_step (self->replica, s->hashes_from, s->hashes) : -1;
  {
    g_autoptr(GArray) mine = rlx_replica_history (self->replica, &l->history_from);
  }
  rlx_replica_set_loss (self->replica, s->loss);
  rlx_msg_steal (&l->msg, m);
  self->ctx.loading = TRUE;
  rlx_replica_load (self->replica, l->msg.u.snapshot.step, &l->msg.u.snapshot.params,
                    l->msg.u.snapshot.hash, l->msg.u.snapshot.epoch, l->msg.u.snapshot.pos,
                    on_snapshot_loaded, l);
}
