/* rlx-io-thread.c — a thread running its own GMainContext (see rlx-io-thread.h) */
#include "rlx-config.h"
#include "rlx-io-thread.h"
#include "rlx-busy-poll.h"

struct _RlxIoThread
{
  gatomicrefcount ref;
  GMainContext   *context;
  GMainLoop      *loop;
  GThread        *thread;
};

static gpointer
io_thread_main (gpointer data)
{
  RlxIoThread *self = data;

  g_main_context_push_thread_default (self->context);
  g_main_loop_run (self->loop);
  g_main_context_pop_thread_default (self->context);
  /* The last reference is gone (that is what quit the loop): the thread
   * owns what is left. */
  g_main_loop_unref (self->loop);
  g_main_context_unref (self->context);
  g_free (self);
  return NULL;
}

RlxIoThread *
rlx_io_thread_new (const char *name)
{
  RlxIoThread *self = g_new0 (RlxIoThread, 1);

  g_return_val_if_fail (name != NULL, NULL);
  g_atomic_ref_count_init (&self->ref);
  self->context = g_main_context_new ();
  self->loop = g_main_loop_new (self->context, FALSE);
  rlx_busy_poll_attach (self->context);
  self->thread = g_thread_new (name, io_thread_main, self);
  return self;
}

RlxIoThread *
rlx_io_thread_get_shared (void)
{
  static RlxIoThread *shared;

  if (g_once_init_enter (&shared))
    g_once_init_leave (&shared, rlx_io_thread_new ("rlx-link-io"));
  return rlx_io_thread_ref (shared);
}

RlxIoThread *
rlx_io_thread_ref (RlxIoThread *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_atomic_ref_count_inc (&self->ref);
  return self;
}

void
rlx_io_thread_unref (RlxIoThread *self)
{
  GThread *thread;
  GMainLoop *loop;

  g_return_if_fail (self != NULL);
  if (!g_atomic_ref_count_dec (&self->ref))
    return;
  /* Never joined: the thread frees self once its loop has returned, so
   * nothing of self may be touched after the quit (our own reference keeps
   * the loop and its context valid until quit has returned). */
  thread = self->thread;
  loop = g_main_loop_ref (self->loop);
  g_main_loop_quit (loop);
  g_main_loop_unref (loop);
  g_thread_unref (thread);
}

GMainContext *
rlx_io_thread_get_context (RlxIoThread *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->context;
}

gboolean
rlx_io_thread_is_current (RlxIoThread *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return g_thread_self () == self->thread;
}
