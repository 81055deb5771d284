/* rlx-sources.c — timeouts on the calling thread's own main context (see the header) */
#include "rlx-config.h"
#include "rlx-sources.h"

guint
rlx_timeout_add (guint interval_ms, GSourceFunc function, gpointer data)
{
  g_autoptr(GSource) source = g_timeout_source_new (interval_ms);

  g_return_val_if_fail (function != NULL, 0);

  g_source_set_callback (source, function, data, NULL);
  return g_source_attach (source, g_main_context_get_thread_default ());
}

gboolean
rlx_source_remove (guint id)
{
  GSource *source;

  g_return_val_if_fail (id > 0, FALSE);

  source = g_main_context_find_source_by_id (g_main_context_get_thread_default (), id);
  if (source == NULL)
    {
      g_critical ("rlx_source_remove: no source %u on this thread's main context", id);
      return FALSE;
    }
  g_source_destroy (source);
  return TRUE;
}
