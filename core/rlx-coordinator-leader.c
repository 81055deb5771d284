/* rlx-coordinator-leader.c — the leader's flow: assigning and collecting
 * rounds, publishing commits and reporting them once acknowledged,
 * admitting members, sending snapshots (see rlx-coordinator-private.h) */
#include "rlx-config.h"
#include "core/rlx-sources.h"
#include "rlx-coordinator-private.h"
#include "core/p2p/rlx-trace.h"

#include <math.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static void leader_finalize (RlxCoordinator *self);

typedef struct {
  RlxCoordinator *self;
  RlxMsg          header;
  char           *to;
  char           *reason;
  guint8         *buf;          /* the frame's payload, with room for its header in front */
  GBytes         *frame;
  gboolean        counted;      /* in self->snapshots_out */
} SnapshotJob;

/* Room in front of a snapshot's parameters for its header: the member list
 * and the hash history at their longest, with room to spare. */
#define SNAPSHOT_HEADROOM (16384 + RLX_MSG_MAX_MEMBERS * (RLX_MSG_MAX_ID + 8) + \
                           RLX_MSG_MAX_HASHES * 24)

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
  count = (guint)MIN (global, (guint64)(rlx_replica_get_n_train (self->replica) - self->round_pos));
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
  m->u.step.contributors
      = str_array_copy (commit ? rlx_round_get_contributors (self->round) : NULL);
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

/* Drop the round in flight: its contributions are forgotten by the backend
 * before the next round's first, and its finish, if queued and not started,
 * does not run. */
void
rlx_coordinator_round_abandon (RlxCoordinator *self)
{
  rlx_round_cancel (self->round);
  rlx_compute_queue_abandon_round (self->queue);
  self->finishing_round = FALSE;
  self->finish_prequeued = 0;
  self->own_prequeued = 0;
  self->round_waiting = FALSE;
  g_clear_pointer (&self->next_slots, g_array_unref);
}

void
rlx_coordinator_commit_free (Commit *c)
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

void
rlx_coordinator_member_state_free (gpointer p)
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
  rlx_coordinator_commits_check (self);
}

/* Report the oldest commits that every member has acknowledged (and the
 * leader has applied), in order. */
void
rlx_coordinator_commits_check (RlxCoordinator *self)
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
          rlx_coordinator_event_emit (self, o);
        }
      rlx_coordinator_emit_step (self, c->step, c->hash, c->loss, c->samples, c->contributors,
                                 c->late, c->rejected, c->members);
      if (c->final)
        {
          self->finish_after_checkpoint = TRUE;
          rlx_coordinator_maybe_checkpoint (self, TRUE);
        }
      else
        rlx_coordinator_maybe_checkpoint (self, FALSE);
      rlx_coordinator_commit_free (c);
      if (self->finished)
        return;
    }
}

/* Members' buckets held until our hash of the state they were computed at
 * was known: judge them now. */
static void
judge_held (RlxCoordinator *self)
{
  GHashTableIter it;
  gpointer key, value;
  g_autoptr(GPtrArray) ready = g_ptr_array_new_with_free_func (g_free);

  g_hash_table_iter_init (&it, self->members_state);
  while (g_hash_table_iter_next (&it, &key, &value))
    if (((MemberState *) value)->has_held)
      g_ptr_array_add (ready, g_strdup (key));
  for (guint i = 0; i < ready->len && rlx_leadership_is_leader (self->lead); i++)
    {
      MemberState *ms = g_hash_table_lookup (self->members_state, g_ptr_array_index (ready, i));
      RlxPeer *p = rlx_peer_set_lookup (self->peers, g_ptr_array_index (ready, i));
      RlxMsg m;

      if (ms == NULL || !ms->has_held)
        continue;
      ms->has_held = FALSE;
      rlx_msg_steal (&m, &ms->held);
      if (p)
        rlx_coordinator_leader_on_grad (self, p, &m);
      rlx_msg_clear (&m);
    }
}

/* Test fault (die_at): the commit reaches every member but the one
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
        rlx_coordinator_send_frame (self, p, RLX_SEND_STEP, frame, self->n, self->precision);
    }
  rlx_peer_set_stop (self->peers);
  rlx_timeout_add (1, on_die_poll, self);
}

/* Step @step is the last the cohort was asked for, or past it. */
static gboolean
at_last_step (RlxCoordinator *self, guint64 step)
{
  return self->steps > 0 && step >= self->steps;
}

/* The own slice of the round @ahead rounds after this one (1: the next)
 * when they are ours alone, as leader_assign will make them: (epoch, start)
 * moved on by each round's count, the global batch (ours) from there. A
 * copy (the permutation it comes from is the replica's, for one epoch at a
 * time), or NULL. */
static guint32 *
predicted_own (RlxCoordinator *self, guint ahead, guint *n)
{
  guint epoch = self->round_epoch, pos = self->round_pos, count = self->round_count;
  guint n_train = rlx_replica_get_n_train (self->replica);

  for (guint i = 0; i < ahead; i++)
    {
      rlx_replica_advance (self->replica, &epoch, &pos, count);
      count = MIN (self->batch, n_train - pos);
      count = MIN (count, rlx_backend_max_batch (rlx_worker_backend (self->worker)));
    }
  *n = count;
  return count > 0 ? g_memdup2 (rlx_replica_permutation (self->replica, epoch) + pos,
                                count * sizeof (guint32))
                   : NULL;
}

/* Our own gradient of @step's slice @indices, into the backend's round. */
static void
queue_own (RlxCoordinator *self, guint64 step, const guint32 *indices, guint n)
{
  rlx_compute_queue_own (self->queue, step, indices, n,
                         rlx_fault_plan_gradient (&self->faults, step),
                         rlx_fault_plan_stall_us (&self->faults, step));
}

/* The finish of round @step. @header (nullable: no frame, nobody to send
 * it to) is taken; @next: our slice of the next round; @after: and of the
 * round after it (both expected to be ours alone). */
static void
queue_finish (RlxCoordinator *self, guint64 step, RlxMsg *header, const guint32 *next,
              guint next_n, const guint32 *after, guint after_n)
{
  RlxFinishJob job = {
    .step = step,
    .header = header,
    .next = next,
    .next_n = next_n,
    .after = after,
    .after_n = after_n,
    .lr = self->lr,
    /* The wire precision is the wire's: an update nobody receives (no
     * frame: nobody else in the cohort) is applied as it is, at f32, with
     * nothing quantised and the update residual left for when there is a
     * wire again (a rank that joins gets a snapshot, not this update) */
    .precision = header != NULL ? self->precision : RLX_PRECISION_F32,
    .feedback = self->error_feedback,
    .prequeued = self->finish_prequeued == step,
    /* no frame (nobody else in the cohort) and a next slice of ours: the
     * next round is most likely ours alone too */
    .next_alone = header == NULL && members (self)->len == 1,
  };

  rlx_compute_queue_finish (self->queue, &job);
}

/* Begin collecting round_step with @slots (the members were told by the
 * frame that carried them) and queue our own slice, unless it is queued
 * already. A round that is ours alone, with nobody else in the cohort,
 * queues its finish right behind the own gradient (unless the last round's
 * publish queued both already): nothing else can join it, so the worker
 * goes on without waiting for the main loop. */
static void
leader_start_round (RlxCoordinator *self, GArray *slots)
{
  guint64 step = self->round_step;
  const RlxMsgSlot *own = NULL;
  gboolean alone;

  rlx_coordinator_note_assigned (self, step, 0);
  for (guint i = 0; i < slots->len; i++)
    if (is_self (self, g_array_index (slots, RlxMsgSlot, i).node))
      own = &g_array_index (slots, RlxMsgSlot, i);
  alone = own != NULL && slots->len == 1 && members (self)->len == 1;
  if (self->own_prequeued != step)
    {
      rlx_compute_queue_begin_round (self->queue);
      if (own != NULL)
        queue_own (self, step,
                   rlx_replica_permutation (self->replica, self->round_epoch) + own->start,
                   own->count);
    }
  self->own_prequeued = 0;
  if (own != NULL)
    rlx_coordinator_note_assigned (self, step, own->count);
  if (slots->len == 0)
    return;
  /* (a round whose finish is queued was planned for us alone) */
  rlx_round_begin (self->round, step, slots,
                   alone || self->finish_prequeued == step ? 0 : deadline_ms (self));
  if (alone && self->finish_prequeued != step)
    {
      g_autofree guint32 *next = NULL, *after = NULL;
      guint next_n = 0, after_n = 0;

      if (!at_last_step (self, step))
        next = predicted_own (self, 1, &next_n);
      if (!at_last_step (self, step + 1))
        after = predicted_own (self, 2, &after_n);
      self->finish_prequeued = step;
      queue_finish (self, step, NULL, next, next_n, after, after_n);
    }
}

/* The round's update was made and applied by the backend (op->ok): publish
 * it and go on with the next round. */
static void
on_finished (RlxCoordinator *self, RlxLeaderOp *op)
{
  guint64 commit = op->step;
  GPtrArray *ids = members (self);
  gboolean final = at_last_step (self, commit);
  GArray *slots;
  Commit *c;

  rlx_trace ("L.fin", commit);
  rlx_coordinator_busy_poll_begin (self);
  if (self->faults.die_at > 0 && commit == self->faults.die_at && op->frame != NULL)
    {
      die_after_partial_commit (self, op->frame);
      return;
    }
  rlx_coordinator_note_backend (self, op->host_bytes, op->ahead_taken, op->update_ahead);
  rlx_round_stats_finish_path (self->stats, op->run_us, op->ran_at, op->dev_finish_us,
                               op->dev_grad_us);
  /* To every member (they apply exactly these codes, as the backend did). */
  for (guint i = 0; op->frame != NULL && i < ids->len; i++)
    {
      RlxPeer *p = rlx_peer_set_lookup (self->peers, g_ptr_array_index (ids, i));
      if (p)
        rlx_coordinator_send_frame (self, p, RLX_SEND_STEP, op->frame, self->n, op->precision);
    }
  rlx_trace ("L.sent", commit);
  /* (round_epoch, round_pos) already are where the next step starts. */
  rlx_replica_commit (self->replica, commit, op->hash, self->round_epoch, self->round_pos);
  rlx_replica_set_loss (self->replica, rlx_round_get_loss (self->round));
  self->last_commit = commit;
  c = g_new0 (Commit, 1);
  c->step = commit;
  c->hash = op->hash;
  c->hash_known = TRUE;
  c->loss = rlx_round_get_loss (self->round);
  c->samples = rlx_round_get_samples (self->round);
  c->contributors = str_array_copy (rlx_round_get_contributors (self->round));
  c->late = rlx_round_get_late (self->round);
  c->rejected = rlx_round_get_rejected (self->round);
  c->waiting = g_ptr_array_new_with_free_func (g_free);
  c->published = g_get_monotonic_time ();
  c->final = final;
  c->members = ids->len;
  /* Members that never got this commit's frame are not waited for (there
   * was none when the round was ours alone: a member admitted meanwhile
   * gets the commit in its snapshot). */
  for (guint i = 0; op->frame != NULL && i < ids->len; i++)
    if (!is_self (self, g_ptr_array_index (ids, i)))
      g_ptr_array_add (c->waiting, g_strdup (g_ptr_array_index (ids, i)));
  g_queue_push_tail (&self->commits, c);

  /* The next round first (the worker is already computing our slice of
   * it), then the reporting. A round planned for us alone is not started
   * when someone joined meanwhile (they got no frame): it restarts with
   * them once their snapshot is out (on_snapshot_built) — unless its finish
   * is queued already (a member admitted since gets its snapshot after that
   * finish, as one admitted during this round did after this one). */
  slots = g_steal_pointer (&self->next_slots);
  if (slots != NULL && !final &&
      (op->frame != NULL || members (self)->len == 1 || self->finish_prequeued == commit + 1))
    leader_start_round (self, slots);
  else if (slots != NULL && !final)
    rlx_coordinator_round_abandon (self);   /* and the own slice queued for it */
  g_clear_pointer (&slots, g_array_unref);
  rlx_coordinator_notify (self, PROP_STEP);
  judge_held (self);
  rlx_coordinator_commits_check (self);
  if (rlx_leadership_is_leader (self->lead) && !self->finished && !final &&
      !rlx_round_is_active (self->round) && !self->finishing_round &&
      self->snapshots_out == 0)
    rlx_coordinator_leader_publish (self, FALSE);
}

void
rlx_coordinator_leader_done (RlxLeaderOp *op, const GError *error, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  gboolean current = op->current;
  BUSY_BEGIN;

  if (role (self) == RLX_ROLE_STOPPED || self->finished)
    goto out;
  if (error != NULL)
    {
      g_autofree char *msg = g_strdup_printf ("%s of step %" G_GUINT64_FORMAT " failed: %s",
                                              op->kind == RLX_LEADER_OWN ? "the own gradient"
                                              : op->kind == RLX_LEADER_ADD ? "adding a bucket"
                                              : "finishing the round",
                                              op->step, error->message);
      rlx_coordinator_emit_error (self, msg);
      if (g_error_matches (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_DEVICE_LOST))
        {
          rlx_coordinator_finish (self, FALSE, msg);
          goto out;
        }
      if (!current || !rlx_leadership_is_leader (self->lead))
        goto out;
      if (op->kind == RLX_LEADER_OWN)
        rlx_round_close_slot (self->round, self->node_id);
      else if (op->kind == RLX_LEADER_ADD)
        rlx_round_added (self->round, op->node, FALSE, msg);
      else
        {
          rlx_coordinator_round_abandon (self);
          rlx_coordinator_leader_publish (self, FALSE);
        }
      goto out;
    }

  switch (op->kind)
    {
    case RLX_LEADER_OWN:
      {
        g_autofree char *reason = NULL;

        if (!current || !rlx_leadership_is_leader (self->lead))
          break;
        rlx_round_stats_own_path (self->stats, op->run_us);
        if (op->compute_us > 0)
          {
            double sp = op->n * 1e6 / op->compute_us;
            self->self_speed = self->self_speed > 0 ? 0.7 * self->self_speed + 0.3 * sp : sp;
          }
        if (op->refused)
          {
            rlx_round_reject_slot (self->round, self->node_id);
            rlx_coordinator_send_reject (self, self->node_id, op->step, op->refused);
            break;
          }
        switch (rlx_round_offer (self->round, self->node_id, op->step, op->n, op->loss,
                                 op->compute_us, self->n, &reason))
          {
          case RLX_ROUND_ACCEPTED:
            rlx_round_added (self->round, self->node_id, TRUE, NULL);
            break;
          case RLX_ROUND_REJECTED:
            rlx_coordinator_send_reject (self, self->node_id, op->step, reason);
            break;
          case RLX_ROUND_LATE:
          default:
            rlx_round_stats_late (self->stats);
            break;
          }
        break;
      }
    case RLX_LEADER_ADD:
      if (current && rlx_leadership_is_leader (self->lead))
        rlx_round_added (self->round, op->node, op->refused == NULL, op->refused);
      break;
    case RLX_LEADER_FINISH:
      if (!rlx_leadership_is_leader (self->lead))
        {
          /* We stepped down while the backend applied it: our parameters
           * hold an update the cohort never saw. */
          if (op->ok)
            {
              self->params_dirty = TRUE;
              if (role (self) == RLX_ROLE_MEMBER)
                rlx_coordinator_request_snapshot (self, "this node's parameters took an update "
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
              rlx_replica_commit (self->replica, op->step, op->hash, self->round_epoch,
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
              rlx_coordinator_emit_error (self, msg);
            }
          rlx_coordinator_round_abandon (self);
        }
      else
        {
          self->finishing_round = FALSE;
          on_finished (self, op);
          break;
        }
      if (self->publish_waiting ||
          (!rlx_round_is_active (self->round) && !self->finishing_round &&
           rlx_compute_queue_finishes (self->queue) == 0))
        rlx_coordinator_leader_publish (self, FALSE);
      break;
    case RLX_LEADER_RESET:
    default:
      break;
    }
out:
  BUSY_END;
}

void
rlx_coordinator_leader_publish (RlxCoordinator *self, gboolean commit)
{
  g_autoptr(GError) error = NULL;
  GArray *slots;
  RlxMsg m;

  if (!rlx_leadership_is_leader (self->lead) || self->finished)
    return;
  if (commit)
    {
      /* The round just collected is finished by the backend, which writes
       * the update's codes into the step frame (on_finished); the frame
       * also assigns the next step. */
      gint64 round_us = g_get_monotonic_time () - rlx_round_get_started (self->round);
      guint64 c = rlx_round_get_step (self->round);
      gboolean final = at_last_step (self, c);
      gboolean others = members (self)->len > 1 || self->faults.die_at > 0;
      const RlxMsgSlot *own = NULL;

      self->round_ema_us = self->rounds_measured == 0 ? round_us
                         : 0.8 * self->round_ema_us + 0.2 * round_us;
      self->rounds_measured++;
      rlx_round_stats_round (self->stats, self->rounds_measured, round_us,
                             rlx_round_get_samples (self->round),
                             rlx_round_get_max_compute (self->round));
      /* The next round starts where this one ended. */
      rlx_replica_advance (self->replica, &self->round_epoch, &self->round_pos, self->round_count);
      self->round_count = 0;
      self->round_step = c + 1;
      slots = final ? rlx_msg_slots_new () : leader_assign (self);
      for (guint i = 0; i < slots->len; i++)
        if (is_self (self, g_array_index (slots, RlxMsgSlot, i).node))
          own = &g_array_index (slots, RlxMsgSlot, i);
      self->finishing_round = TRUE;
      g_clear_pointer (&self->next_slots, g_array_unref);
      self->next_slots = slots;
      if (self->finish_prequeued == c)
        self->finish_prequeued = 0;   /* on its way, without a frame: nobody to send it to */
      else
        {
          g_autofree guint32 *after = NULL;
          guint after_n = 0;
          const guint32 *perm;

          /* a frame only when someone is there to receive it; with nobody,
           * the round after the next is named too (before the permutation
           * of this one is taken: the replica keeps one epoch's) */
          if (others)
            step_header (self, &m, c, slots, final);
          else if (own != NULL && slots->len == 1 && !at_last_step (self, c + 1))
            after = predicted_own (self, 1, &after_n);
          perm = own ? rlx_replica_permutation (self->replica, self->round_epoch) : NULL;
          queue_finish (self, c, others ? &m : NULL, own ? perm + own->start : NULL,
                        own ? own->count : 0, after, after_n);
        }
      /* Our slice of the next round right behind the finish: the worker
       * goes on with it without waiting for us. */
      if (own != NULL)
        {
          rlx_compute_queue_begin_round (self->queue);
          self->own_prequeued = c + 1;
          queue_own (self, c + 1,
                     rlx_replica_permutation (self->replica, self->round_epoch) + own->start,
                     own->count);
        }
      /* A next round that is ours alone gets its finish queued now too (it
       * runs only if this round's commits): two rounds on the worker, so
       * it never waits for this main loop between them. */
      if (own != NULL && slots->len == 1 && !others)
        {
          g_autofree guint32 *next = NULL, *after = NULL;
          guint next_n = 0, after_n = 0;

          if (!at_last_step (self, c + 1))
            next = predicted_own (self, 1, &next_n);
          if (!at_last_step (self, c + 2))
            after = predicted_own (self, 2, &after_n);
          self->finish_prequeued = c + 1;
          queue_finish (self, c + 1, NULL, next, next_n, after, after_n);
        }
      return;
    }

  /* No commit: (re)start the step after the last applied one — once our
   * replica holds the last commit we published (its hash is the base) and
   * no update is still being made or applied. */
  if (!self->rounds_started && members (self)->len < self->wait_members)
    return;
  if (applied (self) < self->last_commit || rlx_compute_queue_finishes (self->queue) > 0 ||
      rlx_compute_queue_member_applying (self->queue) > 0)
    {
      self->publish_waiting = TRUE;
      return;
    }
  rlx_coordinator_round_abandon (self);
  self->publish_waiting = FALSE;
  self->rounds_started = TRUE;
  self->round_step = applied (self) + 1;
  {
    g_autoptr(GBytes) frame = NULL;
    GPtrArray *ids = members (self);

    slots = leader_assign (self);
    if (ids->len > 1)
      {
        step_header (self, &m, 0, slots, FALSE);
        frame = rlx_msg_build (&m, NULL, 0, RLX_PRECISION_F32, &error);
        rlx_msg_clear (&m);
        if (frame == NULL)
          {
            g_autofree char *msg = g_strdup_printf ("could not build the step: %s",
                                                    error->message);
            g_array_unref (slots);
            rlx_coordinator_finish (self, FALSE, msg);
            return;
          }
      }
    for (guint i = 0; frame != NULL && i < ids->len; i++)
      {
        RlxPeer *p = rlx_peer_set_lookup (self->peers, g_ptr_array_index (ids, i));
        if (p)
          rlx_coordinator_send_frame (self, p, RLX_SEND_STEP, frame, 0, RLX_PRECISION_F32);
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
      rlx_coordinator_leader_publish (self, FALSE);
      return;
    }
  /* The leader's own replica must hold the last commit (the step frame
   * carries its hash as the base of this one): a round only begins once
   * that commit is in. */
  if (applied (self) + 1 != rlx_round_get_step (self->round))
    {
      g_warning ("round %" G_GUINT64_FORMAT " complete at step %" G_GUINT64_FORMAT
                 ": run again", rlx_round_get_step (self->round), applied (self));
      rlx_coordinator_leader_publish (self, FALSE);
      return;
    }
  rlx_coordinator_leader_publish (self, TRUE);
}

void
rlx_coordinator_on_round_complete (RlxRound *round, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  BUSY_BEGIN;

  leader_finalize (self);
  BUSY_END;
}

void
rlx_coordinator_send_reject (RlxCoordinator *self, const char *id, guint64 step, const char *reason)
{
  RlxPeer *p = rlx_peer_set_lookup (self->peers, id);
  JsonObject *o = event_new ("rejected");

  json_object_set_string_member (o, "node", id);
  json_object_set_int_member (o, "step", (gint64) step);
  json_object_set_string_member (o, "reason", reason);
  rlx_coordinator_event_emit (self, o);
  rlx_round_stats_rejected (self->stats);
  if (p)
    {
      RlxMsg m;
      rlx_msg_init (&m, RLX_MSG_REJECT, self->node_id);
      m.u.reject.step = step;
      m.u.reject.reason = g_strdup (reason);
      rlx_coordinator_send_msg (self, p, &m);
      rlx_msg_clear (&m);
    }
}

void
rlx_coordinator_on_round_rejected (RlxRound *round, const char *node, guint64 step,
                                   const char *reason, gpointer user_data)
{
  RlxCoordinator *self = user_data;

  /* The round counted it; report and tell the member. */
  rlx_coordinator_send_reject (self, node, step, reason);
}

void
rlx_coordinator_on_round_late (RlxRound *round, const char *node, guint64 step, const char *reason,
               gpointer user_data)
{
  RlxCoordinator *self = user_data;
  JsonObject *o = event_new ("late");

  rlx_round_stats_late (self->stats);
  json_object_set_string_member (o, "node", node);
  json_object_set_int_member (o, "step", (gint64) step);
  json_object_set_string_member (o, "reason", reason);
  rlx_coordinator_event_emit (self, o);
}

/* A member's bucket (or refusal) for a step: judged once the member's
 * acknowledgement of the state it was computed at is in. */
void
rlx_coordinator_leader_on_grad (RlxCoordinator *self, RlxPeer *p, RlxMsg *m)
{
  RlxMsgGrad *g = &m->u.grad;
  MemberState *ms = member_state (self, p->id);
  g_autofree char *reason = NULL;
  guint64 mine;

  rlx_trace ("L.rx", g->step);
  if (g->term != rlx_leadership_get_term (self->lead))
    return;
  if (!rlx_round_slot_pending (self->round, p->id) || g->step != rlx_round_get_step (self->round))
    {
      rlx_round_stats_late (self->stats);
      return;
    }
  if (g->refused)
    {
      rlx_round_reject_slot (self->round, p->id);
      rlx_coordinator_send_reject (self, p->id, g->step, g->refused);
      return;
    }
  /* Judged against the member's acknowledgement of step - 1 and our own
   * hash of it; either may not be in yet (then the bucket waits). */
  if (ms->known && ms->step >= g->step)
    {
      rlx_round_stats_late (self->stats);
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
      rlx_coordinator_send_reject (self, p->id, g->step,
                                   "gradient computed at other parameters (hash differs)");
      return;
    }
  if (g->grads.frame)
    rlx_coordinator_note_precision (self, p, g->grads.precision);
  switch (rlx_round_offer (self->round, p->id, g->step, g->samples, g->loss, g->compute_us,
                           g->grads.frame ? g->grads.n : 0, &reason))
    {
    case RLX_ROUND_ACCEPTED:
      /* to the backend's sum, which checks its values on the way */
      rlx_compute_queue_add (self->queue, p->id, g->step, g->samples, &g->grads);
      if (g->compute_us > 0)
        {
          double sp = g->samples * 1e6 / g->compute_us;
          p->speed = p->speed > 0 ? 0.7 * p->speed + 0.3 * sp : sp;
        }
      break;
    case RLX_ROUND_REJECTED:
      rlx_coordinator_send_reject (self, p->id, g->step, reason);
      break;
    case RLX_ROUND_LATE:
    default:
      rlx_round_stats_late (self->stats);
      break;
    }
}

void
rlx_coordinator_leader_on_ack (RlxCoordinator *self, RlxPeer *p, RlxMsgAck *a)
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
      rlx_coordinator_leader_admit (self, p, &join);
      return;
    }
  member_acked (self, p->id, a->step, a->hash);
  ms = member_state (self, p->id);
  if (ms->has_held)
    {
      RlxMsg m;
      ms->has_held = FALSE;
      rlx_msg_steal (&m, &ms->held);
      rlx_coordinator_leader_on_grad (self, p, &m);
      rlx_msg_clear (&m);
    }
}

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
  g_free (j->buf);
  g_clear_pointer (&j->frame, g_bytes_unref);
  g_free (j);
}

/* On the worker thread: the parameters where the frame will carry them. */
static void
snapshot_copy (const float *params, gsize n, gpointer data)
{
  SnapshotJob *j = data;

  j->buf = g_malloc (SNAPSHOT_HEADROOM + n * sizeof (float));
  memcpy (j->buf + SNAPSHOT_HEADROOM, params, n * sizeof (float));
}

/* The header, with the state the parameters were read at (what the replica
 * says when the read completes: the worker delivers in order). */
static void
snapshot_build (RlxCoordinator *self, SnapshotJob *j)
{
  RlxReplica *replica = self->replica;
  RlxMsgSnapshot *s = &j->header.u.snapshot;
  g_autoptr(GError) error = NULL;

  s->step = rlx_replica_get_step (replica);
  s->hash = rlx_replica_get_hash (replica);
  s->seed = g_strdup_printf ("%" G_GUINT64_FORMAT, rlx_replica_get_seed (replica));
  s->epoch = rlx_replica_get_epoch (replica);
  s->pos = rlx_replica_get_pos (replica);
  s->loss = rlx_replica_get_loss (replica);
  s->hashes = rlx_replica_history (replica, &s->hashes_from);
  j->frame = rlx_msg_frame_wrap (&j->header, self->n, RLX_PRECISION_F32, 1.0,
                                 g_steal_pointer (&j->buf), SNAPSHOT_HEADROOM, &error);
  if (j->frame == NULL)
    g_warning ("a snapshot could not be made: %s", error->message);
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
  if (ok && j->buf != NULL)
    snapshot_build (self, j);
  if (p == NULL || j->frame == NULL || role (self) == RLX_ROLE_STOPPED)
    goto out;
  rlx_coordinator_send_frame (self, p, RLX_SEND_BULK, j->frame, self->n, RLX_PRECISION_F32);
  if (rlx_leadership_is_leader (self->lead))
    member_acked (self, j->to, j->header.u.snapshot.step, j->header.u.snapshot.hash);
  o = event_new ("snapshot");
  json_object_set_string_member (o, "to", j->to);
  json_object_set_int_member (o, "step", (gint64) j->header.u.snapshot.step);
  rlx_coordinator_set_hash_member (o, "hash", j->header.u.snapshot.hash);
  json_object_set_string_member (o, "reason", j->reason);
  rlx_coordinator_event_emit (self, o);
  if (rlx_leadership_is_leader (self->lead) && !self->finished && self->snapshots_out == 0 &&
      !rlx_round_is_active (self->round) && !self->finishing_round &&
      (self->rounds_started || members (self)->len >= self->wait_members))
    rlx_coordinator_leader_publish (self, FALSE);
out:
  BUSY_END;
}

/* Our full-precision state to @p, read from the backend after everything
 * queued on the worker before it. */
void
rlx_coordinator_send_snapshot (RlxCoordinator *self, RlxPeer *p, const char *reason)
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
  rlx_replica_read (self->replica, snapshot_copy, j, snapshot_job_free, on_snapshot_built, j);
}

/* Admit @p (or send it a fresh snapshot). */
void
rlx_coordinator_leader_admit (RlxCoordinator *self, RlxPeer *p, RlxMsgJoin *join)
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
      rlx_coordinator_emit_member (self, "member-joined", p->id, NULL);
      rlx_coordinator_roster_sync (self);
    }
  ms = member_state (self, p->id);
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
  rlx_round_close_slot (self->round, p->id);
  rlx_coordinator_send_snapshot (self, p, join->reason);
}

/* A member committed a step we (the new leader) never received: take its
 * state and restart the round after it. */
void
rlx_coordinator_on_adopted (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  Loading *l = user_data;
  RlxCoordinator *self = l->self;
  BUSY_BEGIN;

  self->loading = FALSE;
  if (!ok)
    rlx_coordinator_emit_error (self, "a member's snapshot does not match its hash");
  else if (rlx_leadership_is_leader (self->lead) && !self->finished)
    {
      /* the load forgot the update stream's residual (and the backend
       * holds the member's parameters) */
      self->last_commit = rlx_replica_get_step (replica);
      self->round_epoch = rlx_replica_get_epoch (replica);
      self->round_pos = rlx_replica_get_pos (replica);
      rlx_coordinator_emit_snapshot_from (self, l->msg.node, rlx_replica_get_step (replica),
                                          rlx_replica_get_hash (replica),
                                          "a member was ahead of the new leader");
      rlx_coordinator_notify (self, PROP_STEP);
      if (at_last_step (self, applied (self)))
        rlx_coordinator_finish (self, TRUE, "all steps committed");
      else
        rlx_coordinator_leader_publish (self, FALSE);
    }
  rlx_coordinator_loading_free (l);
  BUSY_END;
}
