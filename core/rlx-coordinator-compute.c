/* rlx-coordinator-compute.c — the rank's compute worker: the queue of work
 * (load, apply, gradient) handed to it one job at a time
 * (see rlx-coordinator-private.h) */
#include "rlx-config.h"
#include "rlx-coordinator-private.h"

static void
work_free (Work *w)
{
  rlx_msg_array_clear (&w->update);
  rlx_msg_array_clear (&w->load);
  g_free (w->load_floats);
  g_free (w);
}

void
rlx_coordinator_work_clear (RlxCoordinator *self)
{
  Work *w;

  while ((w = g_queue_pop_head (&self->work)))
    work_free (w);
}

/* Queue @w; a new assignment replaces the queued ones (their updates stay:
 * every commit is applied, in order). */
void
rlx_coordinator_work_push (RlxCoordinator *self, Work *w)
{
  if (w->step > 0)
    for (GList *l = self->work.head; l; l = l->next)
      ((Work *) l->data)->step = 0;
  g_queue_push_tail (&self->work, w);
  rlx_coordinator_work_submit (self);
}

void
rlx_coordinator_work_assign (RlxCoordinator *self, Work *w, guint64 step, guint epoch, guint start,
                             guint count)
{
  w->term = rlx_leadership_get_term (self->lead);
  w->step = step;
  w->epoch = epoch;
  w->start = start;
  w->count = count;
  rlx_coordinator_note_assigned (self, step, count);
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
      rlx_coordinator_emit_error (self, msg);
      if (rlx_leadership_is_leader (self->lead) && assigned)
        rlx_round_close_slot (self->round, self->node_id);
      if (g_error_matches (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_DEVICE_LOST))
        rlx_coordinator_finish (self, FALSE, msg);
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
          rlx_coordinator_send_reject (self, self->node_id, step, result->refused);
        }
      else if (rlx_round_offer (self->round, self->node_id, step, result->n_samples, result->loss,
                                result->compute_us, result->grads, NULL, &reason)
               == RLX_ROUND_REJECTED)
        rlx_coordinator_send_reject (self, self->node_id, step, reason);
    }
  else if (role (self) == RLX_ROLE_MEMBER && result->frame)
    {
      RlxPeer *lp = rlx_peer_set_lookup (self->peers, rlx_leadership_get_leader (self->lead));
      if (lp)
        rlx_coordinator_send_frame (self, lp, result->refused ? RLX_SEND_CONTROL : RLX_SEND_BULK,
                                    result->frame, result->refused ? 0 : self->n, self->precision);
      if (result->refused)
        {
          g_autofree char *msg = g_strdup_printf ("step %" G_GUINT64_FORMAT ": %s", step,
                                                  result->refused);
          rlx_coordinator_emit_error (self, msg);
        }
    }
out:
  rlx_coordinator_work_submit (self);
  BUSY_END;
}

/* Hand the next unit of work to the worker, if it is free. */
void
rlx_coordinator_work_submit (RlxCoordinator *self)
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
      rlx_coordinator_work_submit (self);
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
        rlx_coordinator_emit_error (self, error->message);
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
void
rlx_coordinator_work_load_from_replica (RlxCoordinator *self)
{
  Work *w = g_new0 (Work, 1);

  w->load_floats = g_memdup2 (rlx_replica_get_params (self->replica), self->n * sizeof (float));
  rlx_coordinator_work_push (self, w);
}
