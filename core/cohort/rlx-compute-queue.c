/* rlx-compute-queue.c — the cohort's work on the rank's compute worker
 * (rlx-compute-queue.h)
 *
 * The functions named *_run run on the worker thread. They read their job
 * and the queue's `w` part (the worker-side state, touched by no other
 * thread) and the atomic generations; nothing else. The rest of the queue
 * is the owner's thread's.
 */
#include "rlx-config.h"
#include "rlx-compute-queue.h"
#include "core/p2p/rlx-trace.h"
#include "core/rlx-backend-faults.h"

#include <math.h>
#include <string.h>

/* Room in front of a frame's array for its header: the array is written
 * once, where the frame will carry it. A grad frame's header is short; a
 * step frame's lists every member up to three times. */
#define HEADROOM 4096
#define STEP_HEADROOM(members) (HEADROOM + 3 * (gsize) (members) * (RLX_MSG_MAX_ID + 64))

/* Whether the queue still lives, for urgent results on their way to its
 * owner (each holds a reference). */
typedef struct {
  gint     ref;
  gboolean live;       /* the owner's thread's */
} Alive;

struct _RlxComputeQueue {
  RlxWorker               *worker;
  RlxComputeQueueCallbacks cb;
  gpointer                 user_data;

  /* shared with the worker thread (atomic) */
  struct {
    gint                   assign_gen;   /* bumped when queued assignments are replaced */
    gint                   abandon_gen;  /* bumped when a round is abandoned (its finish
                                          * must not run) */
  } shared;

  /* the worker thread's alone */
  struct {
    guint64                round_gen;    /* the round the backend's sum belongs to */
    gint64                 ahead_since;  /* the next own gradient began then */
    gboolean               chain_broken; /* the last finish did not apply its update */
    RlxOuterEngine        *outer;        /* the outer mode's (made at its first job) */
  } w;

  /* The overlapped outer mode's urgent leader operations (adds and
   * finishes): run between two inner steps of whatever job the worker is
   * running, or by a job of their own if none is; their results come back
   * as soon as they ran. */
  GMutex                   urgent_lock;
  GQueue                   urgent;          /* RlxLeaderOp*, under urgent_lock */
  GMainContext            *context;         /* the owner's */
  Alive                   *alive;           /* shared with urgent deliveries */

  /* the owner's thread's */
  guint                    member_steps;    /* queued, not yet done */
  guint                    member_applying; /* of which apply a commit */
  guint64                  member_gen;      /* bumped when queued member steps become stale */
  guint64                  round_gen;       /* bumped when a round begins or is abandoned */
  guint                    finishes;        /* queued, not yet done */
};

static void leader_op_free_any (gpointer p);
static void drain_urgent (gpointer data);

static void
alive_unref (Alive *alive)
{
  if (g_atomic_int_dec_and_test (&alive->ref))
    g_free (alive);
}

RlxComputeQueue *
rlx_compute_queue_new (RlxWorker *worker, const RlxComputeQueueCallbacks *callbacks,
                       gpointer user_data)
{
  RlxComputeQueue *self = g_new0 (RlxComputeQueue, 1);

  self->worker = worker;
  self->cb = *callbacks;
  self->user_data = user_data;
  g_mutex_init (&self->urgent_lock);
  self->context = g_main_context_ref_thread_default ();
  self->alive = g_new (Alive, 1);
  self->alive->ref = 1;
  self->alive->live = TRUE;
  return self;
}

void
rlx_compute_queue_free (RlxComputeQueue *self)
{
  if (self == NULL)
    return;
  /* No callback after this; the job the worker may be running reads the
   * queue (its worker-side state) until the thread has been joined. */
  rlx_worker_free (self->worker);
  self->worker = NULL;
  rlx_outer_engine_free (self->w.outer);
  g_queue_clear_full (&self->urgent, leader_op_free_any);
  g_mutex_clear (&self->urgent_lock);
  g_main_context_unref (self->context);
  self->alive->live = FALSE;
  alive_unref (self->alive);
  g_free (self);
}

RlxWorker *
rlx_compute_queue_get_worker (RlxComputeQueue *self)
{
  return self->worker;
}

/* The test fault: the backend's next gradient gets a bad value or two. */
static void
inject_fault (RlxBackend *backend, RlxFault fault)
{
  if (fault == RLX_FAULT_NAN)
    rlx_backend_poison_gradient (backend, 0, NAN);
  else if (fault == RLX_FAULT_INF)
    rlx_backend_poison_gradient (backend, 0, INFINITY);
  else if (fault == RLX_FAULT_HUGE)
    rlx_backend_poison_gradient (backend, 0, 1e20f);
}

/* Worker thread: the outer engine, made at the first outer job. */
static RlxOuterEngine *
outer_engine (RlxComputeQueue *self, RlxBackend *backend)
{
  if (self->w.outer == NULL)
    self->w.outer = rlx_outer_engine_new (rlx_backend_model (backend)->n_params);
  return self->w.outer;
}

/* What the inner steps' between-callback needs. */
typedef struct {
  RlxComputeQueue *self;
  RlxBackend      *backend;
} Between;

/* Worker thread, between two inner steps of an outer round: the test
 * switch's delay (rlx_worker_inner_delay), then the urgent operations. */
static void
between_inner (gpointer data)
{
  Between *b = data;

  rlx_worker_inner_delay (b->self->worker);
  drain_urgent (data);
}

/* Worker thread: an outer round's pseudo-gradient at @p into @out (the
 * grads_wire of the outer mode). */
static gboolean
outer_local_wire (RlxComputeQueue *self, RlxBackend *backend, RlxMemberStep *ms, void *out,
                  double *scale, GError **error)
{
  RlxOuterEngine *e = outer_engine (self, backend);
  Between b = { self, backend };

  if (!rlx_outer_engine_local (e, backend, ms->step, ms->indices, ms->n, &ms->outer,
                               between_inner, &b, &ms->loss, error))
    return FALSE;
  rlx_outer_engine_delta_wire (e, ms->precision, ms->feedback, out, scale);
  ms->inner_us = (gint64) rlx_outer_engine_inner_us (e);
  return TRUE;
}

/* ── a member's step ────────────────────────────────────────────────────── */

RlxMemberStep *
rlx_member_step_new (void)
{
  return g_new0 (RlxMemberStep, 1);
}

void
rlx_member_step_free (RlxMemberStep *ms)
{
  if (ms->msg != NULL)
    {
      rlx_msg_clear (ms->msg);
      g_free (ms->msg);
    }
  rlx_msg_array_clear (&ms->update);
  g_free (ms->indices);
  rlx_msg_clear (&ms->header);
  g_clear_pointer (&ms->frame, g_bytes_unref);
  g_free (ms->refused);
  g_free (ms);
}

/* Worker thread. */
static gboolean
member_step_run_untraced (RlxBackend *backend, RlxMemberStep *ms, GError **error)
{
  RlxComputeQueue *self = ms->queue;
  gsize n = rlx_backend_model (backend)->n_params;
  RlxPrecision p = ms->precision;
  g_autoptr(GError) local = NULL;
  double scale = 1.0;
  guint8 *buf;
  gint64 t0;

  if (ms->accept_prev)
    {
      rlx_backend_accept_feedback (backend);
      if (self->w.outer != NULL)
        rlx_outer_engine_accept_feedback (self->w.outer);
    }
  if (ms->update.frame != NULL)
    {
      if (ms->commit_outer.h > 0
          ? !rlx_outer_engine_apply (outer_engine (self, backend), backend, ms->update.codes,
                                     ms->update.n, ms->update.precision, ms->update.scale,
                                     &ms->commit_outer, error)
          : !rlx_backend_apply_update (backend, ms->update.codes, ms->update.n,
                                       ms->update.precision, ms->update.scale, error))
        return FALSE;
      ms->applied = TRUE;
    }
  /* an assignment that a newer one (or a role change) replaced is skipped */
  if (ms->n > 0 && ms->gen == g_atomic_int_get (&self->shared.assign_gen))
    {
      buf = g_malloc (HEADROOM + n * rlx_precision_element_size (p));
      inject_fault (backend, ms->fault);
      t0 = g_get_monotonic_time ();
      if (ms->outer.h > 0
          ? !outer_local_wire (self, backend, ms, buf + HEADROOM, &scale, &local)
          : !rlx_backend_grads_wire (backend, ms->indices, ms->n, p, ms->feedback, &ms->loss,
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
          ms->header.u.grad.compute_us = ms->claim_fast ? 1 : ms->compute_us;
          ms->header.u.grad.inner_us = ms->claim_fast ? 1 : ms->inner_us;
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
  if (ms->applied && ms->commit_outer.h > 0 && ms->perturb_momentum)
    rlx_outer_engine_perturb_momentum (outer_engine (self, backend));
  if (ms->applied && ms->commit_outer.h > 0)
    ms->outer_hash = rlx_outer_engine_hash_with (outer_engine (self, backend), ms->hash);
  ms->host_bytes = rlx_backend_host_bytes (backend);
  return TRUE;
}

/* Worker thread. */
static gboolean
member_step_run (RlxBackend *backend, gpointer data, GError **error)
{
  RlxMemberStep *ms = data;
  guint64 step = ms->n > 0 ? ms->step : ms->commit;
  gboolean ok;

  rlx_trace ("M.run", step);
  ok = member_step_run_untraced (backend, ms, error);
  rlx_trace ("M.run.end", step);
  return ok;
}

static void
member_step_done (RlxWorker *worker, gpointer data, const GError *error, gpointer user_data)
{
  RlxMemberStep *ms = data;
  RlxComputeQueue *self = ms->queue;

  ms->current = ms->member_gen == self->member_gen;
  self->member_steps--;
  if (ms->update.frame != NULL)
    self->member_applying--;
  self->cb.member_done (ms, error, self->user_data);
}

void
rlx_compute_queue_member_step (RlxComputeQueue *self, RlxMemberStep *ms)
{
  ms->queue = self;
  /* (overlap: the next assignment comes while this one is still to run;
   * both are computed) */
  if (ms->n > 0)
    {
      /* this assignment replaces any queued one */
      if (ms->outer.lag == 0)
        g_atomic_int_inc (&self->shared.assign_gen);
      ms->gen = g_atomic_int_get (&self->shared.assign_gen);
    }
  ms->accept_prev = ms->accept_prev && ms->feedback;
  ms->member_gen = self->member_gen;
  self->member_steps++;
  if (ms->update.frame != NULL)
    self->member_applying++;
  rlx_worker_queue (self->worker, member_step_run, member_step_done, ms,
                    (GDestroyNotify) rlx_member_step_free, NULL);
}

void
rlx_compute_queue_drop_assignments (RlxComputeQueue *self)
{
  g_atomic_int_inc (&self->shared.assign_gen);
}

void
rlx_compute_queue_forget_member_steps (RlxComputeQueue *self)
{
  self->member_gen++;
}

guint
rlx_compute_queue_member_steps (RlxComputeQueue *self)
{
  return self->member_steps;
}

guint
rlx_compute_queue_member_applying (RlxComputeQueue *self)
{
  return self->member_applying;
}

/* ── the leader's round ─────────────────────────────────────────────────── */

static void
leader_op_free (gpointer p)
{
  RlxLeaderOp *op = p;

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
round_of (RlxComputeQueue *self, RlxBackend *backend, guint64 gen)
{
  if (self->w.round_gen != gen)
    {
      if (rlx_backend_round_size (backend) > 0)
        rlx_backend_round_cancel (backend);
      if (self->w.outer != NULL)
        rlx_outer_engine_round_cancel (self->w.outer);
      self->w.round_gen = gen;
    }
}

/* Worker thread: a finish that did not make its update. A refusal (a
 * round with nothing in it, or an update that is not finite) is its result
 * (op->refused); any other error fails the job. Takes *@local. */
static gboolean
finish_refused (RlxLeaderOp *op, GError **local, GError **error)
{
  if (!g_error_matches (*local, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE) &&
      !g_error_matches (*local, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED))
    {
      g_propagate_error (error, g_steal_pointer (local));
      return FALSE;
    }
  op->refused = g_strdup ((*local)->message);
  g_clear_error (local);
  return TRUE;
}

/* Worker thread: an outer round's finish (finish_run's, the outer step
 * instead of the SGD update). */
static gboolean
outer_finish_run (RlxComputeQueue *self, RlxBackend *backend, RlxLeaderOp *op, GError **error)
{
  RlxOuterEngine *e = outer_engine (self, backend);
  g_autoptr(GError) local = NULL;
  gsize n = rlx_backend_model (backend)->n_params;
  gsize room = 0, bytes = n * rlx_precision_element_size (op->precision);
  g_autofree guint8 *buf = NULL;

  if (op->has_header)
    {
      room = STEP_HEADROOM (op->header.u.step.members->len);
      buf = g_malloc (room + bytes);
    }
  if (!rlx_outer_engine_round_finish (e, backend, op->step, (guint) op->abandon_gen, &op->outer,
                                      op->precision, op->feedback,
                                      buf ? buf + room : NULL, &op->scale, &op->hash, &local))
    return finish_refused (op, &local, error);
  op->outer_hash = rlx_outer_engine_hash_with (e, op->hash);   /* θ's hash: the finish's */
  op->ok = TRUE;
  op->host_bytes = rlx_backend_host_bytes (backend);
  self->w.ahead_since = 0;
  if (op->has_header)
    {
      op->frame = rlx_msg_frame_wrap (&op->header, n, op->precision, op->scale,
                                      g_steal_pointer (&buf), room, error);
      if (op->frame == NULL)
        return FALSE;
    }
  return TRUE;
}

/* Worker thread: the round's update, made and applied (op->ok), or why not
 * (op->refused). */
static gboolean
finish_run (RlxComputeQueue *self, RlxBackend *backend, RlxLeaderOp *op, GError **error)
{
  g_autoptr(GError) local = NULL;
  gsize n = rlx_backend_model (backend)->n_params;
  gsize room = 0, bytes = n * rlx_precision_element_size (op->precision);
  g_autofree guint8 *buf = NULL;
  gboolean ok;

  if (op->chained && self->w.chain_broken)
    {
      /* queued behind a finish that applied nothing: its own gradient was
       * computed at parameters no commit holds */
      op->refused = g_strdup ("the round before it was not committed");
      return TRUE;
    }
  if (op->refuse)
    {
      op->refused = g_strdup ("test switch: this finish applies nothing");
      return TRUE;
    }
  if ((op->outer.lag == 0 && self->w.round_gen != op->round_gen) ||
      op->abandon_gen != g_atomic_int_get (&self->shared.abandon_gen))
    {
      /* nothing of this round reached the backend, or it was given up */
      op->refused = g_strdup ("the round was abandoned");
      return TRUE;
    }
  if (op->outer.h > 0)
    return outer_finish_run (self, backend, op, error);
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
    return finish_refused (op, &local, error);
  op->ok = TRUE;
  op->host_bytes = rlx_backend_host_bytes (backend);
  op->ahead_taken = rlx_backend_ahead_taken (backend);
  op->update_ahead = rlx_backend_updates_ahead (backend);
  self->w.ahead_since = op->indices != NULL ? g_get_monotonic_time () : 0;
  if (op->has_header)
    {
      op->frame = rlx_msg_frame_wrap (&op->header, n, op->precision, op->scale,
                                      g_steal_pointer (&buf), room, error);
      if (op->frame == NULL)
        return FALSE;
    }
  return TRUE;
}

/* Worker thread: the leader's own local steps join its outer round. */
static gboolean
outer_own (RlxComputeQueue *self, RlxBackend *backend, RlxLeaderOp *op, GError **error)
{
  RlxOuterEngine *e = outer_engine (self, backend);
  Between b = { self, backend };

  if (!rlx_outer_engine_local (e, backend, op->step, op->indices, op->n, &op->outer,
                               between_inner, &b, &op->loss, error))
    return FALSE;
  rlx_outer_engine_round_own (e, op->step, (guint) op->abandon_gen, op->n);
  op->inner_us = (gint64) rlx_outer_engine_inner_us (e);
  return TRUE;
}

/* Worker thread. A refused contribution is no failure: the round goes on
 * without it (op->refused says why). */
static gboolean
leader_op_run_timed (RlxBackend *backend, RlxLeaderOp *op, GError **error)
{
  RlxComputeQueue *self = op->queue;
  g_autoptr(GError) local = NULL;
  gint64 t0 = g_get_monotonic_time ();

  switch (op->kind)
    {
    case RLX_LEADER_OWN:
      if (op->outer.lag == 0)
        round_of (self, backend, op->round_gen);
      inject_fault (backend, op->fault);
      if (op->outer.h > 0
          ? !outer_own (self, backend, op, &local)
          : !rlx_backend_round_own (backend, op->indices, op->n, &op->loss, &local))
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
      op->compute_us = g_get_monotonic_time () - MAX (t0, self->w.ahead_since);
      self->w.ahead_since = 0;
      return TRUE;
    case RLX_LEADER_ADD:
      if (op->outer.lag > 0 && op->abandon_gen != g_atomic_int_get (&self->shared.abandon_gen))
        {
          op->refused = g_strdup ("the round was abandoned");
          return TRUE;
        }
      if (op->outer.lag == 0)
        round_of (self, backend, op->round_gen);
      /* Its size, judged before it joins (rlx-norm-guard.h); a bucket that
       * is not finite is left to the add's own check. */
      op->norm = rlx_wire_codes_norm (op->bucket.codes, op->bucket.n, op->bucket.precision,
                                      op->bucket.scale);
      if (op->max_norm > 0 && isfinite (op->norm) && op->norm > op->max_norm)
        {
          op->refused = g_strdup_printf ("gradient bucket refused: its norm %.4g is over %.4g, "
                                         "the limit (--max-grad-norm-ratio × the median of the "
                                         "cohort's recent ones)", op->norm, op->max_norm);
          return TRUE;
        }
      if (op->outer.h > 0
          ? !rlx_outer_engine_round_add (outer_engine (self, backend), op->step,
                                         (guint) op->abandon_gen, op->bucket.codes,
                                         op->bucket.n, op->bucket.precision, op->bucket.scale,
                                         op->samples, &local)
          : !rlx_backend_round_add (backend, op->bucket.codes, op->bucket.n,
                                    op->bucket.precision, op->bucket.scale, op->samples, &local))
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
    case RLX_LEADER_FINISH:
      {
        gboolean ok = finish_run (self, backend, op, error);

        self->w.chain_broken = !ok || !op->ok;
        return ok;
      }
    case RLX_LEADER_RESET:
      rlx_backend_reset_feedback (backend);
      if (self->w.outer != NULL)
        rlx_outer_engine_reset_feedback (self->w.outer);
      return TRUE;
    default:
      g_assert_not_reached ();
    }
}

/* Worker thread: the run, timed for the leader's path in "done". */
static gboolean
leader_op_run (RlxBackend *backend, gpointer data, GError **error)
{
  RlxLeaderOp *op = data;
  gint64 t0 = g_get_monotonic_time ();
  static const char *const start[] = { [RLX_LEADER_OWN] = "L.own", [RLX_LEADER_ADD] = "L.add",
                                       [RLX_LEADER_FINISH] = "L.finish",
                                       [RLX_LEADER_RESET] = "L.reset" };
  static const char *const end[] = { [RLX_LEADER_OWN] = "L.own.end",
                                     [RLX_LEADER_ADD] = "L.add.end",
                                     [RLX_LEADER_FINISH] = "L.finish.end",
                                     [RLX_LEADER_RESET] = "L.reset.end" };
  gboolean ok;

  rlx_trace (start[op->kind], op->step);
  ok = leader_op_run_timed (backend, op, error);
  rlx_trace (end[op->kind], op->step);

  op->ran_at = g_get_monotonic_time ();
  op->run_us = op->ran_at - t0;
  if (op->kind == RLX_LEADER_FINISH)
    rlx_backend_device_round_us (backend, &op->dev_finish_us, &op->dev_grad_us);
  return ok;
}

static void
leader_op_done (RlxWorker *worker, gpointer data, const GError *error, gpointer user_data)
{
  RlxLeaderOp *op = data;
  RlxComputeQueue *self = op->queue;

  if (op->kind == RLX_LEADER_RESET)
    return;
  /* a finish belongs to a round until it is abandoned (the next round's
   * own gradient, queued behind it, already has the next round's number) */
  op->current = op->kind == RLX_LEADER_FINISH
                    ? op->abandon_gen == g_atomic_int_get (&self->shared.abandon_gen)
                    : op->round_gen == self->round_gen;
  if (op->kind == RLX_LEADER_FINISH)
    self->finishes--;
  self->cb.leader_done (op, error, self->user_data);
}

static void
leader_op_free_any (gpointer p)
{
  leader_op_free (p);
}

/* An urgent operation's result on its way to the owner. */
typedef struct {
  RlxLeaderOp *op;
  GError      *error;
  Alive       *alive;
} UrgentDone;

static gboolean
urgent_deliver (gpointer data)
{
  UrgentDone *u = data;

  if (u->alive->live)
    leader_op_done (NULL, u->op, u->error, NULL);
  return G_SOURCE_REMOVE;
}

static void
urgent_done_free (gpointer data)
{
  UrgentDone *u = data;

  leader_op_free (u->op);
  g_clear_error (&u->error);
  alive_unref (u->alive);
  g_free (u);
}

/* Worker thread: run the urgent operations queued so far, in order, each
 * result sent to the owner as soon as it ran. */
static void
drain_urgent (gpointer data)
{
  Between *b = data;
  RlxComputeQueue *self = b->self;

  for (;;)
    {
      UrgentDone *u;
      RlxLeaderOp *op;

      g_mutex_lock (&self->urgent_lock);
      op = g_queue_pop_head (&self->urgent);
      g_mutex_unlock (&self->urgent_lock);
      if (op == NULL)
        return;
      u = g_new0 (UrgentDone, 1);
      u->op = op;
      leader_op_run (b->backend, op, &u->error);
      g_atomic_int_inc (&self->alive->ref);
      u->alive = self->alive;
      g_main_context_invoke_full (self->context, G_PRIORITY_DEFAULT, urgent_deliver, u,
                                  urgent_done_free);
    }
}

/* Worker thread: the job an urgent operation also queues, in case no
 * inner steps run it first. */
static gboolean
urgent_run (RlxBackend *backend, gpointer data, GError **error)
{
  Between b = { data, backend };

  drain_urgent (&b);
  return TRUE;
}

static RlxLeaderOp *
leader_op_new (RlxComputeQueue *self, RlxLeaderOpKind kind, guint64 step)
{
  RlxLeaderOp *op = g_new0 (RlxLeaderOp, 1);

  op->queue = self;
  op->kind = kind;
  op->step = step;
  op->round_gen = self->round_gen;
  op->abandon_gen = g_atomic_int_get (&self->shared.abandon_gen);
  return op;
}

static void
leader_op_push (RlxComputeQueue *self, RlxLeaderOp *op)
{
  static const char *const queued[] = { [RLX_LEADER_OWN] = "L.q.own",
                                        [RLX_LEADER_ADD] = "L.q.add",
                                        [RLX_LEADER_FINISH] = "L.q.finish",
                                        [RLX_LEADER_RESET] = "L.q.reset" };

  rlx_trace (queued[op->kind], op->step);
  if (op->outer.lag > 0 && (op->kind == RLX_LEADER_ADD || op->kind == RLX_LEADER_FINISH))
    {
      /* between the inner steps of the job running now, or by a job of its
       * own behind it if none runs */
      g_mutex_lock (&self->urgent_lock);
      g_queue_push_tail (&self->urgent, op);
      g_mutex_unlock (&self->urgent_lock);
      rlx_worker_queue (self->worker, urgent_run, NULL, self, NULL, NULL);
      return;
    }
  rlx_worker_queue (self->worker, leader_op_run, leader_op_done, op, leader_op_free, NULL);
}

void
rlx_compute_queue_begin_round (RlxComputeQueue *self)
{
  self->round_gen++;
}

void
rlx_compute_queue_abandon_round (RlxComputeQueue *self)
{
  self->round_gen++;
  g_atomic_int_inc (&self->shared.abandon_gen);
}

void
rlx_compute_queue_own (RlxComputeQueue *self, guint64 step, const guint32 *indices, guint n,
                       RlxFault fault, guint64 stall_us, const RlxOuterSettings *outer)
{
  RlxLeaderOp *op = leader_op_new (self, RLX_LEADER_OWN, step);

  if (outer != NULL)
    op->outer = *outer;
  op->indices = g_memdup2 (indices, n * sizeof (guint32));
  op->n = n;
  op->fault = fault;
  op->stall_us = stall_us;
  leader_op_push (self, op);
}

void
rlx_compute_queue_add (RlxComputeQueue *self, const char *node, guint64 step, guint samples,
                       const RlxMsgArray *bucket, gboolean outer, gboolean urgent,
                       double max_norm)
{
  RlxLeaderOp *op = leader_op_new (self, RLX_LEADER_ADD, step);

  op->max_norm = max_norm;
  op->norm = -1;
  op->outer.h = outer ? 1 : 0;   /* only whether: the add needs no settings */
  /* With overlap the worker is computing the leader's own part of the
   * next round while this round's buckets come in: the add runs between
   * two of those inner steps (an urgent job, as the finish), not behind
   * them, so the round completes as soon as its last bucket is in. */
  op->outer.lag = outer && urgent ? 1 : 0;
  op->node = g_strdup (node);
  op->samples = samples;
  rlx_msg_array_copy (&op->bucket, bucket);
  leader_op_push (self, op);
}

void
rlx_compute_queue_finish (RlxComputeQueue *self, RlxFinishJob *job)
{
  RlxLeaderOp *op = leader_op_new (self, RLX_LEADER_FINISH, job->step);

  if (job->header != NULL)
    {
      rlx_msg_steal (&op->header, job->header);
      op->has_header = TRUE;
      job->header = NULL;
    }
  if (job->next != NULL && job->next_n > 0)
    {
      op->indices = g_memdup2 (job->next, job->next_n * sizeof (guint32));
      op->n = job->next_n;
    }
  if (job->after != NULL && job->after_n > 0)
    {
      op->after = g_memdup2 (job->after, job->after_n * sizeof (guint32));
      op->after_n = job->after_n;
    }
  op->lr = job->lr;
  op->outer = job->outer;
  op->precision = job->precision;
  op->feedback = job->feedback;
  op->prequeued = job->prequeued;
  op->next_alone = job->next_alone && op->indices != NULL;
  op->refuse = job->refuse;
  /* behind a finish still to come: it runs only if that one commits */
  op->chained = self->finishes > 0;
  self->finishes++;
  leader_op_push (self, op);
}

void
rlx_compute_queue_reset_feedback (RlxComputeQueue *self)
{
  leader_op_push (self, leader_op_new (self, RLX_LEADER_RESET, 0));
}

guint
rlx_compute_queue_finishes (RlxComputeQueue *self)
{
  return self->finishes;
}

/* ── the outer mode's state beside the replica ──────────────────────────── */

const float *
rlx_compute_queue_momentum_w (RlxComputeQueue *self)
{
  return self->w.outer != NULL ? rlx_outer_engine_momentum (self->w.outer) : NULL;
}

typedef struct {
  RlxComputeQueue *queue;
  RlxMsgArray      array;     /* or floats */
  float           *floats;
  guint64          hash;
  RlxMomentumLoaded done;
  gpointer         done_data;
  gboolean         has;            /* out: the worker holds a momentum after it */
  guint64          loaded;         /* out: its hash */
} MomentumLoad;

static void
momentum_load_free (gpointer p)
{
  MomentumLoad *ml = p;

  rlx_msg_array_clear (&ml->array);
  g_free (ml->floats);
  g_free (ml);
}

/* Worker thread. */
static gboolean
momentum_load_run (RlxBackend *backend, gpointer data, GError **error)
{
  MomentumLoad *ml = data;
  RlxComputeQueue *self = ml->queue;
  gsize n = rlx_backend_model (backend)->n_params;
  g_autofree float *decoded = NULL;
  const float *m = ml->floats;

  if (m == NULL && ml->array.frame != NULL && ml->array.n == n)
    {
      decoded = g_new (float, n);
      rlx_msg_array_decode (&ml->array, decoded);
      if (rlx_params_hash (decoded, n) == ml->hash)
        m = decoded;
      else
        g_warning ("a snapshot's outer momentum does not match its hash: starting from zero");
    }
  if (m == NULL && self->w.outer == NULL)
    return TRUE;   /* nothing to forget */
  if (m == NULL)
    rlx_outer_engine_reset (outer_engine (self, backend));
  else
    rlx_outer_engine_load_momentum (outer_engine (self, backend), m);
  ml->has = TRUE;
  ml->loaded = rlx_params_hash (rlx_outer_engine_momentum (self->w.outer), n);
  return TRUE;
}

static void
momentum_load_done (RlxWorker *worker, gpointer data, const GError *error, gpointer user_data)
{
  MomentumLoad *ml = data;

  if (ml->done != NULL)
    ml->done (ml->has && error == NULL, ml->loaded, ml->done_data);
}

void
rlx_compute_queue_load_momentum (RlxComputeQueue *self, const RlxMsgArray *momentum,
                                 guint64 hash)
{
  MomentumLoad *ml = g_new0 (MomentumLoad, 1);

  ml->queue = self;
  if (momentum != NULL)
    rlx_msg_array_copy (&ml->array, momentum);
  ml->hash = hash;
  rlx_worker_queue (self->worker, momentum_load_run, NULL, ml, momentum_load_free, NULL);
}

void
rlx_compute_queue_load_momentum_floats (RlxComputeQueue *self, float *momentum,
                                        RlxMomentumLoaded done, gpointer user_data)
{
  MomentumLoad *ml = g_new0 (MomentumLoad, 1);

  ml->queue = self;
  ml->floats = momentum;
  ml->done = done;
  ml->done_data = user_data;
  rlx_worker_queue (self->worker, momentum_load_run, momentum_load_done, ml,
                    momentum_load_free, NULL);
}
