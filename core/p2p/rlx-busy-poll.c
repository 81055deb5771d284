/* rlx-busy-poll.c — see rlx-busy-poll.h */
#include "rlx-config.h"
#include "rlx-busy-poll.h"

/* a queue polled this long before its thread sleeps: longer than a round
 * of the models that gain, short enough that a stalled cohort sleeps */
#define SPIN_US 2000

static gint holds;

static gboolean
busy_prepare (GSource *source, gint *timeout)
{
  if (g_atomic_int_get (&holds) > 0)
    {
      /* polling, but a host short of cores runs its other threads first */
      g_thread_yield ();
      *timeout = 0;
    }
  else
    *timeout = -1;
  return FALSE;
}

static gboolean
busy_dispatch (GSource *source, GSourceFunc callback, gpointer user_data)
{
  return G_SOURCE_CONTINUE;
}

static GSourceFuncs busy_funcs = { busy_prepare, NULL, busy_dispatch, NULL, NULL, NULL };

void
rlx_busy_poll_attach (GMainContext *context)
{
  GSource *source;

  g_return_if_fail (context != NULL);
  /* once per context (every coordinator of a process may share one) */
  if (g_main_context_find_source_by_funcs_user_data (context, &busy_funcs, NULL) != NULL)
    return;
  source = g_source_new (&busy_funcs, sizeof (GSource));
  g_source_set_static_name (source, "rlx-busy-poll");
  /* the lowest priority: it never stands in front of real work */
  g_source_set_priority (source, G_PRIORITY_LOW);
  g_source_set_callback (source, NULL, NULL, NULL);
  g_source_attach (source, context);
  g_source_unref (source);
}

/* A loop asleep in poll() when the hold begins starts polling at its next
 * wake-up (the next frame or result); nothing is woken here. */
void
rlx_busy_poll_hold (void)
{
  g_atomic_int_add (&holds, 1);
}

void
rlx_busy_poll_release (void)
{
  g_return_if_fail (g_atomic_int_get (&holds) > 0);
  g_atomic_int_add (&holds, -1);
}

gboolean
rlx_busy_poll_active (void)
{
  return g_atomic_int_get (&holds) > 0;
}

gint64
rlx_busy_poll_spin_us (void)
{
  return rlx_busy_poll_active () ? SPIN_US : 0;
}
