/* rlx-worker.c — the compute worker thread of one rank (see rlx-worker.h)
 *
 * One GThread owns the backend. Jobs (inputs copied) go in through a
 * GAsyncQueue; each result goes back to the creating thread's main context
 * with g_main_context_invoke_full. A small refcounted "shared" block outlives
 * the worker so a result still queued on the main context when the worker is
 * freed finds it marked dead and is dropped without calling back.
 */
#include "rlx-config.h"
#include "rlx-worker.h"

#include <string.h>

G_DEFINE_QUARK (rlx-worker-error-quark, rlx_worker_error)

typedef struct {
  gatomicrefcount refcount;
  gboolean        dead;        /* main thread only */
} Shared;

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
};

typedef struct {
  guint64            id;
  gboolean           stop;     /* the sentinel that ends the thread */
  float             *params;
  guint32           *indices;
  guint              n;
  RlxWorkerDoneFunc  done;
  gpointer           user_data;
} Job;

typedef struct {
  RlxWorker         *worker;   /* valid only while !shared->dead */
  Shared            *shared;
  RlxWorkerDoneFunc  done;
  gpointer           user_data;
  RlxGradResult      result;
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
  g_free (job);
}

static void
delivery_free (gpointer data)
{
  Delivery *d = data;

  g_free (d->result.grads);
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
  /* The callback may submit the next job or free the worker: touch nothing
   * of the worker after it. */
  d->done (worker, d->error ? NULL : &d->result, d->error, d->user_data);
  return G_SOURCE_REMOVE;
}

static gpointer
worker_thread (gpointer data)
{
  RlxWorker *self = data;
  const RlxModel *model = rlx_backend_model (self->backend);
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
      d->result.n_grads = model->n_params;
      d->result.grads = g_try_new (float, model->n_params);

      t0 = g_get_monotonic_time ();
      if (d->result.grads == NULL)
        g_set_error (&d->error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_OUT_OF_MEMORY,
                     "out of memory for a gradient of %" G_GSIZE_FORMAT " floats",
                     model->n_params);
      else if (!rlx_backend_grads (self->backend, job->params, job->indices, job->n,
                                   &d->result.loss, d->result.grads, &d->error))
        g_clear_pointer (&d->result.grads, g_free);
      {
        /* The slow-rank test switch: on this thread, never the main loop. */
        gint extra = g_atomic_int_get (&self->extra_delay_us);
        if (extra > 0 && d->error == NULL)
          g_usleep ((gulong) extra);
      }
      d->result.compute_us = g_get_monotonic_time () - t0;
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

guint64
rlx_worker_submit (RlxWorker *self, const float *params,
                   const guint32 *indices, guint n,
                   RlxWorkerDoneFunc done, gpointer user_data,
                   GError **error)
{
  const RlxModel *model;
  Job *job;
  guint64 id;

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
  if (self->busy)
    {
      g_set_error (error, RLX_WORKER_ERROR, RLX_WORKER_ERROR_BUSY,
                   "the compute worker is still busy with job %" G_GUINT64_FORMAT
                   "; wait for its result before submitting another", self->next_id - 1);
      return 0;
    }

  model = rlx_backend_model (self->backend);
  job = g_new0 (Job, 1);
  job->id = self->next_id++;
  job->params = g_memdup2 (params, model->n_params * sizeof (float));
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
