/* rlx-coordinator-compute.c — what the rank's compute worker runs for the
 * cohort (see rlx-coordinator-private.h)
 *
 * Every operation on the backend goes through the worker's queue
 * (rlx_worker_queue), so they run in the order the protocol asks for them
 * and their results come back in that order:
 *
 *   a member's step   apply the commit's update, compute the gradient of
 *                     the assigned slice at the rank's wire precision with
 *                     error feedback (the codes land where the grad frame
 *                     carries them), then the parameters' hash for the ack
 *   the leader's      round_own (its own slice), round_add (each member's
 *   round             bucket as it arrives), round_finish (the update's
 *                     codes straight into the step frame, its scale and the
 *                     parameters' hash), with the next own slice named so
 *                     that a GPU computes it right behind the finish
 *
 * The functions named *_run run on the worker thread and touch nothing of
 * the coordinator but the fields marked "worker thread" in its struct and
 * the atomic generations; everything else they need travels in the
 * operation. Their results are handled on the main context by the member's
 * and the leader's flows (rlx_coordinator_member_stepped,
 * rlx_coordinator_leader_done).
 */
#include "rlx-config.h"
#include "rlx-coordinator-private.h"
#include "core/p2p/rlx-trace.h"
#include "rlx-backend-private.h"

#include <math.h>
#include <string.h>

/* Room in front of a frame's array for its header: the array is written
 * once, where the frame will carry it. A grad frame's header is short; a
 * step frame's lists every member up to three times. */
#define HEADROOM 4096
#define STEP_HEADROOM(members) (HEADROOM + 3 * (gsize) (members) * (RLX_MSG_MAX_ID + 64))

/* The test switch: the backend's next gradient gets a bad value or two. */
static void
inject_fault (RlxBackend *backend, RlxFault fault)
{
  if (fault == RLX_FAULT_NAN)
    rlx_backend_poison_gradient (backend, 0, NAN);
  else if (fault == RLX_FAULT_INF)
    rlx_backend_poison_gradient (backend, 0, INFINITY);
}

/* ── a member's step ────────────────────────────────────────────────────── */

void
rlx_coordinator_member_step_free (MemberStep *ms)
{
  if (ms->msg != NULL)
    msg_free (ms->msg);
  rlx_msg_array_clear (&ms->update);
  g_free (ms->indices);
  rlx_msg_clear (&ms->header);
  g_clear_pointer (&ms->frame, g_bytes_unref);
  g_free (ms->refused);
  g_free (ms);
}

/* Worker thread. */
static gboolean
member_step_run_untraced (RlxBackend *backend, gpointer data, GError **error)
{
  MemberStep *ms = data;
  RlxCoordinator *self = ms->self;
  gsize n = rlx_backend_model (backend)->n_params;
  RlxPrecision p = ms->precision;
  g_autoptr(GError) local = NULL;
  double scale = 1.0;
  guint8 *buf;
  gint64 t0;

  if (ms->accept_prev)
    rlx_backend_accept_feedback (backend);
  if (ms->update.frame != NULL)
    {
      if (!rlx_backend_apply_update (backend, ms->update.codes, ms->update.n,
                                     ms->update.precision, ms->update.scale, error))
        return FALSE;
      ms->applied = TRUE;
    }
  /* an assignment that a newer one (or a role change) replaced is skipped */
  if (ms->n > 0 && ms->gen == g_atomic_int_get (&self->assign_gen))
    {
      buf = g_malloc (HEADROOM + n * rlx_precision_element_size (p));
      inject_fault (backend, ms->fault);
      t0 = g_get_monotonic_time ();
      if (!rlx_backend_grads_wire (backend, ms->indices, ms->n, p, ms->feedback, &ms->loss,
                                   buf + HEADROOM, &scale, &local))
        {
          g_free (buf);
          if (!g_error_matches (local, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE))
            {
              g_propagate_error (error, g_steal_pointer (&local));
              return FALSE;
            }
          /* never quantised: the frame says why it carries no bucket */
          ms->refused = g_strdup_printf ("%s (refused before quantising)", local->message);
          ms->header.u.grad.samples = ms->n;
          ms->header.u.grad.loss = NAN;
          ms->header.u.grad.refused = g_strdup (ms->refused);
          ms->frame = rlx_msg_build (&ms->header, NULL, 0, RLX_PRECISION_F32, error);
          if (ms->frame == NULL)
            return FALSE;
        }
      else
        {
          rlx_worker_extra_delay (self->worker);
          if (ms->stall_us > 0)
            g_usleep ((gulong) ms->stall_us);
          ms->compute_us = g_get_monotonic_time () - t0;
          ms->header.u.grad.samples = ms->n;
          ms->header.u.grad.loss = ms->loss;
          ms->header.u.grad.compute_us = ms->compute_us;
          ms->frame = rlx_msg_frame_wrap (&ms->header, n, p, scale, buf, HEADROOM, error);
          if (ms->frame == NULL)
            return FALSE;
        }
      ms->computed = TRUE;
    }
  /* the hash of what the commit made, for the ack (on a GPU it was computed
   * in the gradient's submission) */
  if (ms->applied && !rlx_backend_params_hash (backend, &ms->hash, error))
    return FALSE;
  ms->host_bytes = rlx_backend_host_bytes (backend);
  return TRUE;
}

static gboolean
member_step_run (RlxBackend *backend, gpointer data, GError **error)
{
  MemberStep *ms = data;
  guint64 step = ms->n > 0 ? ms->step : ms->commit;
  gboolean ok;

  rlx_trace ("M.run", step);
  ok = member_step_run_untraced (backend, data, error);
  rlx_trace ("M.run.end", step);
  return ok;
}

static void
member_step_done (RlxWorker *worker, gpointer data, const GError *error, gpointer user_data)
{
  MemberStep *ms = data;

  rlx_coordinator_member_stepped (ms->self, ms, error);
}

void
rlx_coordinator_queue_member_step (RlxCoordinator *self, MemberStep *ms)
{
  ms->self = self;
  if (ms->n > 0)
    {
      /* this assignment replaces any queued one */
      g_atomic_int_inc (&self->assign_gen);
      ms->gen = g_atomic_int_get (&self->assign_gen);
      rlx_msg_init (&ms->header, RLX_MSG_GRAD, self->node_id);
      ms->header.u.grad.term = ms->term;
      ms->header.u.grad.step = ms->step;
      ms->precision = self->precision;
      ms->feedback = self->error_feedback;
      ms->fault = rlx_fault_plan_gradient (&self->faults, ms->step);
      ms->stall_us = rlx_fault_plan_stall_us (&self->faults, ms->step);
    }
  ms->accept_prev = ms->accept_prev && self->error_feedback;
  ms->member_gen = self->member_gen;
  self->member_steps++;
  if (ms->update.frame != NULL)
    self->member_applying++;
  rlx_worker_queue (self->worker, member_step_run, member_step_done, ms,
                    (GDestroyNotify) rlx_coordinator_member_step_free, NULL);
}

void
rlx_coordinator_drop_assignments (RlxCoordinator *self)
{
  g_atomic_int_inc (&self->assign_gen);
}

/* ── the leader's round ─────────────────────────────────────────────────── */

static void
leader_op_free (gpointer p)
{
  LeaderOp *op = p;

  g_free (op->indices);
  g_free (op->after);
  g_free (op->node);
  rlx_msg_array_clear (&op->bucket);
  if (op->has_header)
    rlx_msg_clear (&op->header);
  g_clear_pointer (&op->frame, g_bytes_unref);
  g_free (op->refused);
  g_free (op);
}

/* Worker thread: the backend's round belongs to round @gen (a contribution
 * of an abandoned round is dropped before the first of a new one). */
static void
round_of (RlxCoordinator *self, RlxBackend *backend, guint64 gen)
{
  if (self->w_round_gen != gen)
    {
      if (rlx_backend_round_size (backend) > 0)
        rlx_backend_round_cancel (backend);
      self->w_round_gen = gen;
    }
}

/* Worker thread: the round's update, made and applied (op->ok), or why not
 * (op->refused). */
static gboolean
finish_run (RlxCoordinator *self, RlxBackend *backend, LeaderOp *op, GError **error)
{
  g_autoptr(GError) local = NULL;
  gsize n = rlx_backend_model (backend)->n_params;
  gsize room = 0, bytes = n * rlx_precision_element_size (op->precision);
  g_autofree guint8 *buf = NULL;
  gboolean ok;

  if (op->chained && self->w_chain_broken)
    {
      /* queued behind a finish that applied nothing: its own gradient was
       * computed at parameters no commit holds */
      op->refused = g_strdup ("the round before it was not committed");
      return TRUE;
    }
  if (self->w_round_gen != op->round_gen ||
      op->abandon_gen != g_atomic_int_get (&self->abandon_gen))
    {
      /* nothing of this round reached the backend, or it was given up */
      op->refused = g_strdup ("the round was abandoned");
      return TRUE;
    }
  rlx_backend_round_expect_alone (backend, op->next_alone);
  rlx_backend_round_after (backend, op->next_alone ? op->after : NULL, op->after_n);
  if (op->has_header)
    {
      /* the update's codes, once, where the frame carries them */
      room = STEP_HEADROOM (op->header.u.step.members->len);
      buf = g_malloc (room + bytes);
      ok = rlx_backend_round_finish_into (backend, op->lr, op->precision, op->feedback,
                                          op->indices, op->n, buf + room, &op->scale,
                                          &op->hash, &local);
    }
  else
    ok = rlx_backend_round_finish (backend, op->lr, op->precision, op->feedback,
                                   op->indices, op->n, NULL, &op->scale, &op->hash,
                                   &local);
  if (!ok)
    {
      if (!g_error_matches (local, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE) &&
          !g_error_matches (local, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED))
        {
          g_propagate_error (error, g_steal_pointer (&local));
          return FALSE;
        }
      op->refused = g_strdup (local->message);
      return TRUE;
    }
  op->ok = TRUE;
  op->host_bytes = rlx_backend_host_bytes (backend);
  op->ahead_taken = rlx_backend_ahead_taken (backend);
  op->update_ahead = rlx_backend_updates_ahead (backend);
  self->w_ahead_since = op->indices != NULL ? g_get_monotonic_time () : 0;
  if (op->has_header)
    {
      op->frame = rlx_msg_frame_wrap (&op->header, n, op->precision, op->scale,
                                      g_steal_pointer (&buf), room, error);
      if (op->frame == NULL)
        return FALSE;
    }
  return TRUE;
}

/* Worker thread. A refused contribution is no failure: the round goes on
 * without it (op->refused says why). */
static gboolean
leader_op_run_timed (RlxBackend *backend, gpointer data, GError **error)
{
  LeaderOp *op = data;
  RlxCoordinator *self = op->self;
  g_autoptr(GError) local = NULL;
  gint64 t0 = g_get_monotonic_time ();

  switch (op->kind)
    {
    case LEADER_OWN:
      round_of (self, backend, op->round_gen);
      inject_fault (backend, op->fault);
      if (!rlx_backend_round_own (backend, op->indices, op->n, &op->loss, &local))
        {
          if (!g_error_matches (local, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE))
            {
              g_propagate_error (error, g_steal_pointer (&local));
              return FALSE;
            }
          op->refused = g_strdup_printf ("%s (refused before it joined the round)",
                                         local->message);
          return TRUE;
        }
      rlx_worker_extra_delay (self->worker);
      if (op->stall_us > 0)
        g_usleep ((gulong) op->stall_us);
      /* computed right behind the last finish (a GPU that was told the
       * slice): it began when that finish ended */
      op->compute_us = g_get_monotonic_time () - MAX (t0, self->w_ahead_since);
      self->w_ahead_since = 0;
      return TRUE;
    case LEADER_ADD:
      round_of (self, backend, op->round_gen);
      if (!rlx_backend_round_add (backend, op->bucket.codes, op->bucket.n, op->bucket.precision,
                                  op->bucket.scale, op->samples, &local))
        {
          if (local->domain != RLX_BACKEND_ERROR ||
              (local->code != RLX_BACKEND_ERROR_NOT_FINITE &&
               local->code != RLX_BACKEND_ERROR_FAILED))
            {
              g_propagate_error (error, g_steal_pointer (&local));
              return FALSE;
            }
          op->refused = g_strdup_printf ("gradient bucket refused: %s", local->message);
        }
      return TRUE;
    case LEADER_FINISH:
      {
        gboolean ok = finish_run (self, backend, op, error);

        self->w_chain_broken = !ok || !op->ok;
        return ok;
      }
    case LEADER_RESET:
      rlx_backend_reset_feedback (backend);
      return TRUE;
    default:
      g_assert_not_reached ();
    }
}

/* Worker thread: the run, timed for the leader's path in "done". */
static gboolean
leader_op_run (RlxBackend *backend, gpointer data, GError **error)
{
  LeaderOp *op = data;
  gint64 t0 = g_get_monotonic_time ();
  static const char *const start[] = { [LEADER_OWN] = "L.own", [LEADER_ADD] = "L.add",
                                       [LEADER_FINISH] = "L.finish", [LEADER_RESET] = "L.reset" };
  static const char *const end[] = { [LEADER_OWN] = "L.own.end", [LEADER_ADD] = "L.add.end",
                                     [LEADER_FINISH] = "L.finish.end",
                                     [LEADER_RESET] = "L.reset.end" };
  gboolean ok;

  rlx_trace (start[op->kind], op->step);
  ok = leader_op_run_timed (backend, data, error);
  rlx_trace (end[op->kind], op->step);

  op->ran_at = g_get_monotonic_time ();
  op->run_us = op->ran_at - t0;
  if (op->kind == LEADER_FINISH)
    rlx_backend_device_round_us (backend, &op->dev_finish_us, &op->dev_grad_us);
  return ok;
}

static void
leader_op_done (RlxWorker *worker, gpointer data, const GError *error, gpointer user_data)
{
  LeaderOp *op = data;

  if (op->kind != LEADER_RESET)
    rlx_coordinator_leader_done (op->self, op, error);
}

static LeaderOp *
leader_op_new (RlxCoordinator *self, LeaderOpKind kind)
{
  LeaderOp *op = g_new0 (LeaderOp, 1);

  op->self = self;
  op->kind = kind;
  op->round_gen = self->round_gen;
  op->abandon_gen = g_atomic_int_get (&self->abandon_gen);
  return op;
}

static void
leader_op_push (RlxCoordinator *self, LeaderOp *op)
{
  static const char *const queued[] = { [LEADER_OWN] = "L.q.own", [LEADER_ADD] = "L.q.add",
                                        [LEADER_FINISH] = "L.q.finish",
                                        [LEADER_RESET] = "L.q.reset" };

  rlx_trace (queued[op->kind], op->step);
  rlx_worker_queue (self->worker, leader_op_run, leader_op_done, op, leader_op_free, NULL);
}

void
rlx_coordinator_queue_own (RlxCoordinator *self, guint64 step, const guint32 *indices, guint n)
{
  LeaderOp *op = leader_op_new (self, LEADER_OWN);

  op->step = step;
  op->indices = g_memdup2 (indices, n * sizeof (guint32));
  op->n = n;
  op->fault = rlx_fault_plan_gradient (&self->faults, step);
  op->stall_us = rlx_fault_plan_stall_us (&self->faults, step);
  leader_op_push (self, op);
}

void
rlx_coordinator_queue_add (RlxCoordinator *self, const char *node, guint64 step, guint samples,
                           const RlxMsgArray *bucket)
{
  LeaderOp *op = leader_op_new (self, LEADER_ADD);

  op->node = g_strdup (node);
  op->step = step;
  op->samples = samples;
  rlx_msg_array_copy (&op->bucket, bucket);
  leader_op_push (self, op);
}

void
rlx_coordinator_queue_finish (RlxCoordinator *self, guint64 step, RlxMsg *header,
                              const guint32 *next, guint next_n)
{
  rlx_coordinator_queue_finish_after (self, step, header, next, next_n, NULL, 0);
}

void
rlx_coordinator_queue_finish_after (RlxCoordinator *self, guint64 step, RlxMsg *header,
                                    const guint32 *next, guint next_n, const guint32 *after,
                                    guint after_n)
{
  LeaderOp *op = leader_op_new (self, LEADER_FINISH);

  op->step = step;
  if (header != NULL)
    {
      rlx_msg_steal (&op->header, header);
      op->has_header = TRUE;
    }
  if (next != NULL && next_n > 0)
    {
      op->indices = g_memdup2 (next, next_n * sizeof (guint32));
      op->n = next_n;
    }
  if (after != NULL && after_n > 0)
    {
      op->after = g_memdup2 (after, after_n * sizeof (guint32));
      op->after_n = after_n;
    }
  op->lr = self->lr;
  /* The wire precision is the wire's: an update nobody receives (no frame:
   * nobody else in the cohort) is applied as it is, at f32, with nothing
   * quantised and the update residual left for when there is a wire again
   * (a rank that joins gets a snapshot, not this update) */
  op->precision = header != NULL ? self->precision : RLX_PRECISION_F32;
  op->feedback = self->error_feedback;
  op->prequeued = self->finish_prequeued == step;
  /* no frame (nobody else in the cohort) and a next slice of ours: the
   * next round is most likely ours alone too */
  op->next_alone = header == NULL && op->indices != NULL && members (self)->len == 1;
  /* behind a finish still to come: it runs only if that one commits */
  op->chained = self->finishes > 0;
  self->finishes++;
  leader_op_push (self, op);
}

void
rlx_coordinator_queue_reset_feedback (RlxCoordinator *self)
{
  leader_op_push (self, leader_op_new (self, LEADER_RESET));
}
