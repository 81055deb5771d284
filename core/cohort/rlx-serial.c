/* rlx-serial.c — see rlx-serial.h */
#include "rlx-config.h"
#include "rlx-serial.h"

#include <gio/gio.h>

typedef struct {
  RlxSerial         *serial;
  guint64            generation;
  RlxSerialRunFunc   run;
  RlxSerialDoneFunc  done;
  gpointer           data;
  GDestroyNotify     free_data;
  gpointer           user_data;
} Job;

struct _RlxSerial {
  gatomicrefcount refcount;   /* the owner's and the running job's */
  GQueue          queue;      /* Job*, waiting */
  Job            *running;
  guint64         generation;
  gboolean        freed;
  GMainContext   *context;
  GMutex          lock;       /* guards thread_busy */
  GCond           cond;
  gboolean        thread_busy; /* a job's run () is executing */
};

static void
serial_unref (RlxSerial *self)
{
  if (g_atomic_ref_count_dec (&self->refcount))
    {
      g_main_context_unref (self->context);
      g_mutex_clear (&self->lock);
      g_cond_clear (&self->cond);
      g_free (self);
    }
}

static void
job_free (Job *job)
{
  if (job->free_data)
    job->free_data (job->data);
  g_free (job);
}

static void start_next (RlxSerial *self);

static void
run_in_thread (GTask *task, gpointer source, gpointer task_data, GCancellable *cancellable)
{
  Job *job = task_data;
  RlxSerial *self = job->serial;

  job->run (job->data);
  g_mutex_lock (&self->lock);
  self->thread_busy = FALSE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  g_task_return_boolean (task, TRUE);
}

static void
on_job_done (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Job *job = g_task_get_task_data (G_TASK (result));
  RlxSerial *self = job->serial;

  g_assert (self->running == job);
  self->running = NULL;
  if (!self->freed && job->generation == self->generation && job->done)
    job->done (job->data, job->user_data);
  job_free (job);
  if (!self->freed)
    start_next (self);
  serial_unref (self);
}

static void
start_next (RlxSerial *self)
{
  g_autoptr(GTask) task = NULL;
  Job *job;

  if (self->running != NULL || g_queue_is_empty (&self->queue))
    return;
  job = g_queue_pop_head (&self->queue);
  self->running = job;
  g_atomic_ref_count_inc (&self->refcount);
  g_mutex_lock (&self->lock);
  self->thread_busy = TRUE;
  g_mutex_unlock (&self->lock);
  g_main_context_push_thread_default (self->context);
  task = g_task_new (NULL, NULL, on_job_done, NULL);
  g_main_context_pop_thread_default (self->context);
  g_task_set_task_data (task, job, NULL);
  g_task_run_in_thread (task, run_in_thread);
}

RlxSerial *
rlx_serial_new (void)
{
  RlxSerial *self = g_new0 (RlxSerial, 1);

  g_atomic_ref_count_init (&self->refcount);
  g_queue_init (&self->queue);
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  self->context = g_main_context_ref_thread_default ();
  return self;
}

void
rlx_serial_push (RlxSerial *self, RlxSerialRunFunc run, RlxSerialDoneFunc done, gpointer data,
                 GDestroyNotify free_data, gpointer user_data)
{
  Job *job;

  g_return_if_fail (self != NULL && !self->freed);
  g_return_if_fail (run != NULL);

  job = g_new0 (Job, 1);
  job->serial = self;
  job->generation = self->generation;
  job->run = run;
  job->done = done;
  job->data = data;
  job->free_data = free_data;
  job->user_data = user_data;
  g_queue_push_tail (&self->queue, job);
  start_next (self);
}

gboolean
rlx_serial_busy (RlxSerial *self)
{
  return self->running != NULL || !g_queue_is_empty (&self->queue);
}

guint
rlx_serial_queued (RlxSerial *self)
{
  return g_queue_get_length (&self->queue) + (self->running ? 1 : 0);
}

void
rlx_serial_cancel (RlxSerial *self)
{
  Job *job;

  g_return_if_fail (self != NULL);
  self->generation++;
  while ((job = g_queue_pop_head (&self->queue)))
    job_free (job);
}

void
rlx_serial_drain (RlxSerial *self)
{
  g_return_if_fail (self != NULL);
  rlx_serial_cancel (self);
  g_mutex_lock (&self->lock);
  while (self->thread_busy)
    g_cond_wait (&self->cond, &self->lock);
  g_mutex_unlock (&self->lock);
}

void
rlx_serial_free (RlxSerial *self)
{
  if (self == NULL)
    return;
  /* The owner frees the buffers the running job works on right after
   * this: wait for its run () to return (its done never runs). */
  rlx_serial_drain (self);
  self->freed = TRUE;
  serial_unref (self);
}
