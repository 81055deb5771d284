/* rlx-worker.c — the compute worker thread of one rank (see rlx-worker.h)
 *
 * One GThread owns the backend. Jobs go in through a GAsyncQueue; each
 * result goes back to the creating thread's main context with
 * g_main_context_invoke_full. A small refcounted "shared" block outlives the
 * worker so a result still queued on the main context when the worker is
 * freed finds it marked dead and is dropped without calling back.
 *
 * Step jobs use the backend's resident parameters (rlx-backend.h): loaded
 * once, then changed only by the committed updates at wire precision, on
 * the device for a GPU rank; the gradient leaves the backend once, as wire
 * codes written straight where the grad frame carries them, with the
 * backend's error feedback (accepted or rolled back per bucket).
 */
#include "rlx-config.h"
#include "rlx-worker.h"
#include "rlx-backend-private.h"

#include <math.h>
#include <string.h>

G_DEFINE_QUARK (rlx-worker-error-quark, rlx_worker_error)

typedef struct {
  gatomicrefcount refcount;
  gboolean        dead;        /* main thread only */
} Shared;

/* Worker-thread state of step jobs. */
typedef struct {
  gboolean loaded;             /* the backend's replica holds parameters */
  float   *grads;              /* the leader's gradient buffer (floats out) */
  float   *scratch;            /* snapshot parameters decoded before a load */
  gint     reset;              /* atomic: forget the residual before the next job */
} Resident;

struct _RlxWorker {
  RlxBackend   *backend;
  GThread      *thread;
  GThread      *owner;         /* the creating thread */
  GAsyncQueue  *jobs;
  GMainContext *context;
  Shared       *shared;
  guint64       next_id;
  gboolean      busy;          /* a job submitted and its result not yet delivered */
  gint          extra_delay_us; /* test switch; atomic (set by the owner, read by the thread) */
  Resident      res;           /* worker thread only (reset: atomic) */
};

typedef struct {
  guint64            id;
  gboolean           stop;     /* the sentinel that ends the thread */
  gboolean           step;     /* a step job (else: params copied in) */
  float             *params;   /* plain: the parameters; step: parameters to load */
  RlxMsgArray        update;
  RlxMsgArray        load;
  guint32           *indices;
  guint              n;
  RlxMsg             header;   /* step, frames: kind GRAD (kind N_KINDS: floats) */
  RlxPrecision       precision;
  gboolean           feedback, accepted_prev;
  RlxWorkerFault     fault;
  guint64            stall_us;
  RlxWorkerDoneFunc  done;
  gpointer           user_data;
} Job;

typedef struct {
  RlxWorker         *worker;   /* valid only while !shared->dead */
  Shared            *shared;
  RlxWorkerDoneFunc  done;
  gpointer           user_data;
  RlxGradResult      result;
  gboolean           owns_grads;
  char              *refused;
  GError            *error;
} Delivery;

static Shared *
shared_ref (Shared *shared)
{
  g_atomic_ref_count_inc (&shared->refcount);
  return shared;
}

static void
shared_unref (Shared *shared)
{
  if (g_atomic_ref_count_dec (&shared->refcount))
    g_free (shared);
}

static void
job_free (Job *job)
{
  g_free (job->params);
  g_free (job->indices);
  rlx_msg_array_clear (&job->update);
  rlx_msg_array_clear (&job->load);
  rlx_msg_clear (&job->header);
  g_free (job);
}

static void
delivery_free (gpointer data)
{
  Delivery *d = data;

  if (d->owns_grads)
    g_free (d->result.grads);
  g_clear_pointer (&d->result.frame, g_bytes_unref);
  g_free (d->refused);
  g_clear_error (&d->error);
  shared_unref (d->shared);
  g_free (d);
}

/* Main context of the creating thread. */
static gboolean
deliver_cb (gpointer data)
{
  Delivery *d = data;
  RlxWorker *worker = d->worker;

  if (d->shared->dead)
    return G_SOURCE_REMOVE;
  g_assert (g_thread_self () == worker->owner);

  worker->busy = FALSE;
  d->result.refused = d->refused;
  /* The callback may submit the next job or free the worker: touch nothing
   * of the worker after it. */
  d->done (worker, d->error ? NULL : &d->result, d->error, d->user_data);
  return G_SOURCE_REMOVE;
}

static void
extra_delay (RlxWorker *self)
{
  /* The slow-rank test switch: on this thread, never the main loop. */
  gint extra = g_atomic_int_get (&self->extra_delay_us);

  if (extra > 0)
    g_usleep ((gulong) extra);
}

/* A plain job: the gradient at the job's own parameters, in a new buffer. */
static void
run_plain (RlxWorker *self, Job *job, Delivery *d)
{
  const RlxModel *model = rlx_backend_model (self->backend);

  d->owns_grads = TRUE;
  d->result.grads = g_try_new (float, model->n_params);
  if (d->result.grads == NULL)
    g_set_error (&d->error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_OUT_OF_MEMORY,
                 "out of memory for a gradient of %" G_GSIZE_FORMAT " floats", model->n_params);
  else if (!rlx_backend_grads (self->backend, job->params, job->indices, job->n,
                               &d->result.loss, d->result.grads, &d->error))
    g_clear_pointer (&d->result.grads, g_free);
  if (d->error == NULL)
    extra_delay (self);
}

/* Room in front of a grad frame's codes for its header: the codes are
 * written once, by the backend, where the frame will carry them. */
#define GRAD_HEADROOM 4096

/* The test switch: the backend's next gradient gets a bad value or two. */
static void
inject_fault (RlxBackend *backend, RlxWorkerFault fault)
{
  if (fault == RLX_WORKER_FAULT_NAN)
    rlx_backend_poison_gradient (backend, 0, NAN);
  else if (fault == RLX_WORKER_FAULT_INF)
    rlx_backend_poison_gradient (backend, 0, INFINITY);
}

/* The gradient at the backend's replica: floats into res->grads (the
 * leader's own bucket), or codes at the rank's precision straight into a
 * new grad frame (with error feedback in the backend). A non-finite
 * gradient is never quantised: the frame then says why it carries no
 * bucket, and the residual stays as it was. */
static void
step_gradient (RlxWorker *self, Job *job, Delivery *d)
{
  Resident *res = &self->res;
  gsize n = rlx_backend_model (self->backend)->n_params;
  gboolean frame = job->header.kind == RLX_MSG_GRAD;
  RlxPrecision p = frame ? job->precision : RLX_PRECISION_F32;
  gboolean fb = frame && job->feedback;
  g_autoptr(GError) error = NULL;
  double scale = 1.0;
  guint8 *buf = NULL;
  gint64 t0;

  if (fb && job->accepted_prev)
    rlx_backend_accept_feedback (self->backend);
  if (frame)
    buf = g_malloc (GRAD_HEADROOM + n * rlx_precision_element_size (p));
  else if (res->grads == NULL)
    res->grads = g_new (float, n);
  inject_fault (self->backend, job->fault);
  t0 = g_get_monotonic_time ();
  if (!rlx_backend_grads_wire (self->backend, job->indices, job->n, p, fb, &d->result.loss,
                               frame ? (void *) (buf + GRAD_HEADROOM) : (void *) res->grads,
                               &scale, &error))
    {
      g_free (buf);
      if (!g_error_matches (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE))
        {
          g_propagate_error (&d->error, g_steal_pointer (&error));
          return;
        }
      d->refused = g_strdup_printf ("%s (refused before quantising)", error->message);
      if (frame)
        {
          job->header.u.grad.samples = job->n;
          job->header.u.grad.loss = NAN;
          job->header.u.grad.refused = g_strdup (d->refused);
          d->result.frame = rlx_msg_build (&job->header, NULL, 0, RLX_PRECISION_F32, &d->error);
        }
      return;
    }
  extra_delay (self);
  if (job->stall_us > 0)
    g_usleep ((gulong) job->stall_us);
  d->result.compute_us = g_get_monotonic_time () - t0;
  d->result.n_grads = n;
  if (!frame)
    {
      d->result.grads = res->grads;
      return;
    }
  job->header.u.grad.samples = job->n;
  job->header.u.grad.loss = d->result.loss;
  job->header.u.grad.compute_us = d->result.compute_us;
  d->result.frame = rlx_msg_frame_wrap (&job->header, n, p, scale, buf, GRAD_HEADROOM, &d->error);
}

static void
run_step (RlxWorker *self, Job *job, Delivery *d)
{
  Resident *res = &self->res;
  gsize n = rlx_backend_model (self->backend)->n_params;

  if (g_atomic_int_compare_and_exchange (&res->reset, 1, 0))
    rlx_backend_reset_feedback (self->backend);
  if (job->params || (job->load.frame && job->load.n == n))
    {
      const float *params = job->params;
      if (params == NULL)
        {
          if (res->scratch == NULL)
            res->scratch = g_new (float, n);
          rlx_msg_array_decode (&job->load, res->scratch);
          params = res->scratch;
        }
      if (!rlx_backend_load_params (self->backend, params, &d->error))
        return;
      res->loaded = TRUE;
    }
  if (job->update.frame)
    {
      if (!rlx_backend_apply_update (self->backend, job->update.codes, job->update.n,
                                     job->update.precision, job->update.scale, &d->error))
        return;
    }
  if (job->n == 0)
    return;
  if (!res->loaded)
    {
      g_set_error (&d->error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED,
                   "a gradient was asked for before any parameters were loaded");
      return;
    }
  step_gradient (self, job, d);
}

static gpointer
worker_thread (gpointer data)
{
  RlxWorker *self = data;
  /* A thread-default context of our own: g_main_context_invoke_full would
   * otherwise run the callback right here on this thread whenever the
   * creator's context is the global default one and happens to be free. */
  GMainContext *own = g_main_context_new ();

  g_main_context_push_thread_default (own);
  for (;;)
    {
      Job *job = g_async_queue_pop (self->jobs);
      Delivery *d;
      gint64 t0;

      if (job->stop)
        {
          job_free (job);
          break;
        }

      d = g_new0 (Delivery, 1);
      d->worker = self;
      d->shared = shared_ref (self->shared);
      d->done = job->done;
      d->user_data = job->user_data;
      d->result.job_id = job->id;
      d->result.n_samples = job->n;

      t0 = g_get_monotonic_time ();
      if (job->step)
        run_step (self, job, d);
      else
        {
          d->result.n_grads = rlx_backend_model (self->backend)->n_params;
          run_plain (self, job, d);
          d->result.compute_us = g_get_monotonic_time () - t0;
        }
      job_free (job);

      g_main_context_invoke_full (self->context, G_PRIORITY_DEFAULT,
                                  deliver_cb, d, delivery_free);
    }
  g_main_context_pop_thread_default (own);
  g_main_context_unref (own);
  return NULL;
}

RlxWorker *
rlx_worker_new (RlxBackend *backend)
{
  RlxWorker *self;

  g_return_val_if_fail (backend != NULL, NULL);

  self = g_new0 (RlxWorker, 1);
  self->backend = backend;
  self->owner = g_thread_self ();
  self->context = g_main_context_ref_thread_default ();
  self->jobs = g_async_queue_new ();
  self->shared = g_new0 (Shared, 1);
  g_atomic_ref_count_init (&self->shared->refcount);
  self->next_id = 1;
  self->thread = g_thread_new ("rlx-worker", worker_thread, self);
  return self;
}

void
rlx_worker_free (RlxWorker *self)
{
  Job *stop;

  if (self == NULL)
    return;
  g_return_if_fail (g_thread_self () == self->owner);

  /* From here on no callback runs: deliveries check this flag on this very
   * thread before calling back. */
  self->shared->dead = TRUE;

  stop = g_new0 (Job, 1);
  stop->stop = TRUE;
  g_async_queue_push (self->jobs, stop);
  g_thread_join (self->thread);   /* after the job in flight, if any */

  g_async_queue_unref (self->jobs);
  g_main_context_unref (self->context);
  rlx_backend_free (self->backend);
  shared_unref (self->shared);
  g_free (self->res.grads);
  g_free (self->res.scratch);
  g_free (self);
}

RlxBackend *
rlx_worker_backend (RlxWorker *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->backend;
}

gboolean
rlx_worker_busy (RlxWorker *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->busy;
}

void
rlx_worker_set_extra_delay_us (RlxWorker *self, guint64 us)
{
  g_return_if_fail (self != NULL);
  g_atomic_int_set (&self->extra_delay_us, (gint) MIN (us, (guint64) G_MAXINT));
}

void
rlx_worker_reset_feedback (RlxWorker *self)
{
  g_return_if_fail (self != NULL);
  g_atomic_int_set (&self->res.reset, 1);
}

/* Checks shared by both kinds of submit. */
static gboolean
can_submit (RlxWorker *self, RlxWorkerDoneFunc done, GError **error)
{
  g_return_val_if_fail (done != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  g_return_val_if_fail (g_thread_self () == self->owner, FALSE);

  if (self->shared->dead)
    {
      g_set_error (error, RLX_WORKER_ERROR, RLX_WORKER_ERROR_CLOSED,
                   "the compute worker is shutting down");
      return FALSE;
    }
  if (self->busy)
    {
      g_set_error (error, RLX_WORKER_ERROR, RLX_WORKER_ERROR_BUSY,
                   "the compute worker is still busy with job %" G_GUINT64_FORMAT
                   "; wait for its result before submitting another", self->next_id - 1);
      return FALSE;
    }
  return TRUE;
}

static guint64
queue_job (RlxWorker *self, Job *job, const guint32 *indices, guint n, RlxWorkerDoneFunc done,
           gpointer user_data)
{
  guint64 id;

  job->id = self->next_id++;
  job->indices = g_new0 (guint32, MAX (n, 1));
  if (n > 0)
    memcpy (job->indices, indices, (gsize) n * sizeof (guint32));
  job->n = n;
  job->done = done;
  job->user_data = user_data;
  self->busy = TRUE;
  id = job->id;
  /* The worker thread owns (and frees) the job from the moment it is queued. */
  g_async_queue_push (self->jobs, job);
  return id;
}

guint64
rlx_worker_submit (RlxWorker *self, const float *params,
                   const guint32 *indices, guint n,
                   RlxWorkerDoneFunc done, gpointer user_data,
                   GError **error)
{
  const RlxModel *model;
  Job *job;

  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (params != NULL, 0);
  g_return_val_if_fail (indices != NULL || n == 0, 0);

  if (!can_submit (self, done, error))
    return 0;
  model = rlx_backend_model (self->backend);
  job = g_new0 (Job, 1);
  job->params = g_memdup2 (params, model->n_params * sizeof (float));
  job->header.kind = RLX_MSG_N_KINDS;
  return queue_job (self, job, indices, n, done, user_data);
}

guint64
rlx_worker_submit_step (RlxWorker *self, const RlxWorkerStep *step, RlxWorkerDoneFunc done,
                        gpointer user_data, GError **error)
{
  const RlxModel *model;
  Job *job;

  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (step != NULL, 0);
  g_return_val_if_fail (step->indices != NULL || step->n == 0, 0);
  g_return_val_if_fail (step->header == NULL || step->header->kind == RLX_MSG_GRAD, 0);

  if (!can_submit (self, done, error))
    return 0;
  model = rlx_backend_model (self->backend);
  job = g_new0 (Job, 1);
  job->step = TRUE;
  if (step->load)
    job->params = g_memdup2 (step->load, model->n_params * sizeof (float));
  if (step->load_array)
    rlx_msg_array_copy (&job->load, step->load_array);
  if (step->update)
    rlx_msg_array_copy (&job->update, step->update);
  job->header.kind = RLX_MSG_N_KINDS;
  if (step->header)
    {
      rlx_msg_init (&job->header, RLX_MSG_GRAD, step->header->node);
      job->header.u.grad.term = step->header->u.grad.term;
      job->header.u.grad.step = step->header->u.grad.step;
    }
  job->precision = step->precision;
  job->feedback = step->feedback;
  job->accepted_prev = step->accepted_prev;
  job->fault = step->fault;
  job->stall_us = step->stall_us;
  return queue_job (self, job, step->indices, step->n, done, user_data);
}
