/* rlx-io-thread.c — a thread running its own GMainContext (see rlx-io-thread.h) */
#include "rlx-config.h"
#include "rlx-io-thread.h"
#include "rlx-busy-poll.h"

#include <gio/gio.h>
#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

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

/* A GMainContext needs a descriptor for its wakeup, and GLib aborts the
 * process when it cannot get one (g_wakeup_new); so does g_thread_new when
 * no thread can be made. Out of descriptors, a new link must be refused,
 * not crash the rank: an eventfd is made first, the way GLib makes its
 * own, and closed just before the context takes its place. (Another thread
 * that takes the last descriptor in between still loses the race: the
 * window is those few instructions, not the whole set-up.) */
GMainContext *
rlx_io_context_try_new (GError **error)
{
  int probe;

  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  probe = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (probe < 0)
    {
      int e = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (e),
                   "no eventfd for an I/O thread's main context (%s); is the process out of "
                   "file descriptors? Raise the limit (ulimit -n) or close some",
                   g_strerror (e));
      return NULL;
    }
  close (probe);
  return g_main_context_new ();
}

RlxIoThread *
rlx_io_thread_try_new (const char *name, GError **error)
{
  RlxIoThread *self;
  GMainContext *context;
  GThread *thread;

  g_return_val_if_fail (name != NULL, NULL);
  context = rlx_io_context_try_new (error);
  if (context == NULL)
    return NULL;
  self = g_new0 (RlxIoThread, 1);
  g_atomic_ref_count_init (&self->ref);
  self->context = context;
  self->loop = g_main_loop_new (self->context, FALSE);
  rlx_busy_poll_attach (self->context);
  thread = g_thread_try_new (name, io_thread_main, self, error);
  if (thread == NULL)
    {
      g_prefix_error (error, "cannot start an I/O thread: ");
      g_main_loop_unref (self->loop);
      g_main_context_unref (self->context);
      g_free (self);
      return NULL;
    }
  self->thread = thread;
  return self;
}

RlxIoThread *
rlx_io_thread_new (const char *name)
{
  g_autoptr(GError) error = NULL;
  RlxIoThread *self = rlx_io_thread_try_new (name, &error);

  if (self == NULL)
    g_error ("%s", error->message);
  return self;
}

RlxIoThread *
rlx_io_thread_get_shared (GError **error)
{
  static GMutex lock;
  static RlxIoThread *shared;
  RlxIoThread *self;

  g_mutex_lock (&lock);
  if (shared == NULL)
    shared = rlx_io_thread_try_new ("rlx-link-io", error);
  self = shared != NULL ? rlx_io_thread_ref (shared) : NULL;
  g_mutex_unlock (&lock);
  return self;
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
