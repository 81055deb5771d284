/* rlx-sources.h — timeouts on the calling thread's own main context
 *
 * g_timeout_add and g_source_remove always use the global default main
 * context, whichever thread calls them. Code that lives on a thread with a
 * thread-default context of its own (the app's node runs on one: see
 * rlx-node-thread.h) must put its timers there, or they fire on the main
 * thread. These two do what g_timeout_add and g_source_remove do, on the
 * caller's thread-default context (the global default when it has none), so
 * a headless node on the main thread behaves exactly as before.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* A timeout on the thread-default main context; returns its id there. */
guint    rlx_timeout_add   (guint interval_ms, GSourceFunc function, gpointer data);
/* Destroy the source @id of the thread-default main context (call from the
 * thread that added it). FALSE, with a critical, if there is none. */
gboolean rlx_source_remove (guint id);

G_END_DECLS
