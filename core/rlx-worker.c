/* rlx-worker.c — the compute worker thread of one rank (see rlx-worker.h)
 *
 * One GThread owns the backend. Work goes in through a GAsyncQueue and runs
 * in order. Results go into one queue that a single source on the
 * creating thread's main context drains, so they are delivered in the order
 * the work ran, however many are waiting. A small refcounted "shared" block
 * outlives the worker so a drain still queued on the main context when the
 * worker is freed finds it marked dead and calls nobody.
 */
#include "rlx-config.h"
#include "rlx-worker.h"
#include "core/p2p/rlx-busy-poll.h"

#include <string.h>
#include "core/util/rlx-fp-mode.h"

G_DEFINE_QUARK (rlx-worker-error-quark, rlx_worker_error)

typedef struct {
  gatomicrefcount refcount;
  RlxWorker      *worker;      /* valid while !dead */
  gboolean        dead;        /* owner thread only */
  GMutex          lock;        /* results, drain_queued */
  GQueue          results;     /* Delivery* */
  gboolean        drain_queued;
} Shared;

struct _RlxWorker {
  RlxBackend   *backend;
  GThread      *thread;
  GThread      *owner;         /* the creating thread */
  GAsyncQueue  *jobs;
  GMainContext *context;
  Shared       *shared;
  guint64       next_id;
  guint         in_flight;     /* handed over, not yet delivered (owner thread) */
  gint          extra_delay_us; /* test switch; atomic (set by the owner, read by the thread) */
  gint          inner_delay_us; /* test switch; atomic, the same */
  gint          pace_us;       /* atomic, the same (rlx_worker_set_pace_us) */
  gint64        paced_at;      /* the thread's: when the last paced gradient ended */
  gsize         wait_us;       /* atomic: written by the thread, read by anyone */
};

typedef enum { JOB_PLAIN, JOB_OP, JOB_STOP } JobKind;

typedef struct {
  JobKind            kind;
  guint64            id;
  /* plain */
  float             *params;
  guint32           *indices;
  guint              n;
  RlxWorkerDoneFunc  done;
  /* op */
  RlxWorkerOpFunc    run;
  RlxWorkerOpDone    op_done;
  gpointer           data;
  GDestroyNotify     free_data;
  gpointer           user_data;
} Job;

typedef struct {
  Job           *job;
  RlxGradResult  result;
  GError        *error;
} Delivery;

static Shared *
shared_ref (Shared *shared)
{
  g_atomic_ref_count_inc (&shared->refcount);
  return shared;
}

static void
job_free (Job *job)
{
  g_free (job->params);
  g_free (job->indices);
  if (job->free_data)
    job->free_data (job->data);
  g_free (job);
}

static void
delivery_free (Delivery *d)
{
  g_free (d->result.grads);
  g_clear_error (&d->error);
  job_free (d->job);
  g_free (d);
}

static void
shared_unref (Shared *shared)
{
  if (!g_atomic_ref_count_dec (&shared->refcount))
    return;
  g_queue_clear_full (&shared->results, (GDestroyNotify) delivery_free);
  g_mutex_clear (&shared->lock);
  g_free (shared);
}

static void
deliver (RlxWorker *worker, Delivery *d)
{
  Job *job = d->job;

  worker->in_flight--;
  /* The callback may queue more work or free the worker. */
  if (job->kind == JOB_PLAIN)
    job->done (worker, d->error ? NULL : &d->result, d->error, job->user_data);
  else if (job->op_done)
    job->op_done (worker, job->data, d->error, job->user_data);
}

/* Main context of the creating thread: every result waiting, in order. */
static gboolean
drain_cb (gpointer data)
{
  Shared *shared = data;
  GQueue batch;
  Delivery *d;

  g_mutex_lock (&shared->lock);
  batch = shared->results;
  g_queue_init (&shared->results);
  shared->drain_queued = FALSE;
  g_mutex_unlock (&shared->lock);

  while ((d = g_queue_pop_head (&batch)))
    {
      if (!shared->dead)
        {
          g_assert (g_thread_self () == shared->worker->owner);
          deliver (shared->worker, d);
        }
      delivery_free (d);
    }
  return G_SOURCE_REMOVE;
}

/* Worker thread: hand @d to the owner's main context. */
static void
post (RlxWorker *self, Delivery *d)
{
  gboolean schedule;

  g_mutex_lock (&self->shared->lock);
  g_queue_push_tail (&self->shared->results, d);
  schedule = !self->shared->drain_queued;
  self->shared->drain_queued = TRUE;
  g_mutex_unlock (&self->shared->lock);
  if (schedule)
    g_main_context_invoke_full (self->context, G_PRIORITY_DEFAULT, drain_cb,
                                shared_ref (self->shared), (GDestroyNotify) shared_unref);
}

void
rlx_worker_extra_delay (RlxWorker *self)
{
  /* The slow-rank test switch: on this thread, never the main loop. */
  gint extra = g_atomic_int_get (&self->extra_delay_us);
  gint pace = g_atomic_int_get (&self->pace_us);

  if (extra > 0)
    g_usleep ((gulong) extra);
  if (pace > 0)
    {
      gint64 now = g_get_monotonic_time ();

      if (self->paced_at > 0 && now - self->paced_at < pace)
        g_usleep ((gulong) (pace - (now - self->paced_at)));
      self->paced_at = g_get_monotonic_time ();
    }
  else
    self->paced_at = 0;
}

void
rlx_worker_inner_delay (RlxWorker *self)
{
  gint extra = g_atomic_int_get (&self->inner_delay_us);

  if (extra > 0)
    g_usleep ((gulong) extra);
}

void
rlx_worker_set_inner_delay_us (RlxWorker *self, guint64 us)
{
  g_return_if_fail (self != NULL);
  g_atomic_int_set (&self->inner_delay_us, (gint) MIN (us, (guint64) G_MAXINT));
}

/* A plain job: the gradient at the job's own parameters, in a new buffer. */
static void
run_plain (RlxWorker *self, Job *job, Delivery *d)
{
  const RlxModel *model = rlx_backend_model (self->backend);
  gint64 t0 = g_get_monotonic_time ();

  d->result.job_id = job->id;
  d->result.n_samples = job->n;
  d->result.n_grads = model->n_params;
  d->result.grads = g_try_new (float, model->n_params);
  if (d->result.grads == NULL)
    g_set_error (&d->error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_OUT_OF_MEMORY,
                 "out of memory for a gradient of %" G_GSIZE_FORMAT " floats", model->n_params);
  else if (!rlx_backend_grads (self->backend, job->params, job->indices, job->n,
                               &d->result.loss, d->result.grads, &d->error))
    g_clear_pointer (&d->result.grads, g_free);
  if (d->error == NULL)
    rlx_worker_extra_delay (self);
  d->result.compute_us = g_get_monotonic_time () - t0;
}

static gpointer
worker_thread (gpointer data)
{
  RlxWorker *self = data;
  /* A thread-default context of our own: g_main_context_invoke_full would
   * otherwise run the callback right here on this thread whenever the
   * creator's context is the global default one and happens to be free. */
  GMainContext *own = g_main_context_new ();

  /* the rank's training arithmetic: fast (rlx-fp-mode.h) */
  rlx_fp_mode_enter_fast ();
  g_main_context_push_thread_default (own);
  for (;;)
    {
      Job *job = g_async_queue_try_pop (self->jobs);
      Delivery *d;

      if (job == NULL)
        {
          gint64 t0 = g_get_monotonic_time ();
          gint64 spin = rlx_busy_poll_spin_us ();

          /* a GPU cohort's next operation comes within a round: poll for
           * it rather than sleep (rlx-busy-poll.h) */
          while (spin > 0 && job == NULL && g_get_monotonic_time () - t0 < spin)
            {
              g_thread_yield ();
              job = g_async_queue_try_pop (self->jobs);
            }
          if (job == NULL)
            job = g_async_queue_pop (self->jobs);
          g_atomic_pointer_add (&self->wait_us, (gssize) (g_get_monotonic_time () - t0));
        }

      if (job->kind == JOB_STOP)
        {
          job_free (job);
          break;
        }
      d = g_new0 (Delivery, 1);
      d->job = job;
      if (job->kind == JOB_PLAIN)
        run_plain (self, job, d);
      else if (!job->run (self->backend, job->data, &d->error) && d->error == NULL)
        g_set_error (&d->error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED,
                     "an operation on the backend failed without saying why");
      post (self, d);
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
  g_mutex_init (&self->shared->lock);
  g_queue_init (&self->shared->results);
  self->shared->worker = self;
  self->next_id = 1;
  self->thread = g_thread_new ("rlx-worker", worker_thread, self);
  return self;
}

void
rlx_worker_free (RlxWorker *self)
{
  Job *stop, *job;

  if (self == NULL)
    return;
  g_return_if_fail (g_thread_self () == self->owner);

  /* From here on no callback runs: the drain checks this flag on this very
   * thread before calling back. */
  self->shared->dead = TRUE;
  self->shared->worker = NULL;

  /* Work not started is dropped (its data freed), then the thread stops
   * after the job in flight. */
  while ((job = g_async_queue_try_pop (self->jobs)))
    job_free (job);
  stop = g_new0 (Job, 1);
  stop->kind = JOB_STOP;
  g_async_queue_push (self->jobs, stop);
  g_thread_join (self->thread);

  g_async_queue_unref (self->jobs);
  g_main_context_unref (self->context);
  rlx_backend_free (self->backend);
  shared_unref (self->shared);
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
  return self->in_flight > 0;
}

guint
rlx_worker_pending (RlxWorker *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->in_flight;
}

guint64
rlx_worker_wait_us (RlxWorker *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return (guint64) g_atomic_pointer_get (&self->wait_us);
}

void
rlx_worker_set_extra_delay_us (RlxWorker *self, guint64 us)
{
  g_return_if_fail (self != NULL);
  g_atomic_int_set (&self->extra_delay_us, (gint) MIN (us, (guint64) G_MAXINT));
}

void
rlx_worker_set_pace_us (RlxWorker *self, guint64 us)
{
  g_return_if_fail (self != NULL);
  g_atomic_int_set (&self->pace_us, (gint) MIN (us, (guint64) G_MAXINT));
}

static void
push (RlxWorker *self, Job *job)
{
  self->in_flight++;
  /* The worker thread owns (and frees) the job from the moment it is queued. */
  g_async_queue_push (self->jobs, job);
}

guint64
rlx_worker_submit (RlxWorker *self, const float *params,
                   const guint32 *indices, guint n,
                   RlxWorkerDoneFunc done, gpointer user_data,
                   GError **error)
{
  const RlxModel *model;
  guint64 id;
  Job *job;

  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (params != NULL, 0);
  g_return_val_if_fail (indices != NULL || n == 0, 0);
  g_return_val_if_fail (done != NULL, 0);
  g_return_val_if_fail (error == NULL || *error == NULL, 0);
  g_return_val_if_fail (g_thread_self () == self->owner, 0);

  if (self->shared->dead)
    {
      g_set_error (error, RLX_WORKER_ERROR, RLX_WORKER_ERROR_CLOSED,
                   "the compute worker is shutting down");
      return 0;
    }
  if (self->in_flight > 0)
    {
      g_set_error (error, RLX_WORKER_ERROR, RLX_WORKER_ERROR_BUSY,
                   "the compute worker is still busy with job %" G_GUINT64_FORMAT
                   "; wait for its result before submitting another", self->next_id - 1);
      return 0;
    }
  model = rlx_backend_model (self->backend);
  job = g_new0 (Job, 1);
  job->kind = JOB_PLAIN;
  job->id = self->next_id++;
  job->params = g_memdup2 (params, model->n_params * sizeof (float));
  job->indices = g_new0 (guint32, MAX (n, 1));
  if (n > 0)
    memcpy (job->indices, indices, (gsize) n * sizeof (guint32));
  job->n = n;
  job->done = done;
  job->user_data = user_data;
  id = job->id;
  push (self, job);
  return id;
}

void
rlx_worker_queue (RlxWorker *self, RlxWorkerOpFunc run, RlxWorkerOpDone done, gpointer data,
                  GDestroyNotify free_data, gpointer user_data)
{
  Job *job;

  g_return_if_fail (self != NULL && run != NULL);
  g_return_if_fail (g_thread_self () == self->owner);

  job = g_new0 (Job, 1);
  job->kind = JOB_OP;
  job->id = self->next_id++;
  job->run = run;
  job->op_done = done;
  job->data = data;
  job->free_data = free_data;
  job->user_data = user_data;
  push (self, job);
}
