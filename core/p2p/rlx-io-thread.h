/* rlx-io-thread.h — a thread that runs a GMainContext of its own, for link I/O
 *
 * Links keep their sockets' sources on such a context so the main loop never
 * copies a byte into or out of a socket (rlx-unix-link.h). Either every link
 * has its own thread (rlx_io_thread_new) or all links of the process share
 * one (rlx_io_thread_get_shared); which is the default is a measured choice
 * (BENCHMARKS.md, "Local bus: I/O off the main loop").
 *
 * Reference counted, from any thread. When the last reference goes the loop
 * stops and the thread ends by itself (it is never joined, so dropping the
 * last reference never waits, on any thread). Sources still attached to the
 * context then never run again: owners destroy theirs first.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct _RlxIoThread RlxIoThread;

/* A new GMainContext for I/O, or NULL and @error where GLib would abort
 * making one (no descriptor for its wakeup). */
GMainContext *rlx_io_context_try_new    (GError **error);
/* A new thread named @name (as the kernel shows it, at most 15 bytes);
 * NULL and @error when it cannot be started (no descriptor for its
 * context's wakeup, no thread). */
RlxIoThread  *rlx_io_thread_try_new     (const char *name, GError **error);
/* The same, aborting where it cannot (for tests). */
RlxIoThread  *rlx_io_thread_new         (const char *name);
/* The thread every caller shares (started on first use, lives as long as
 * the process; a first use that cannot start it fails as try_new does,
 * and a later one tries again). Transfer full. */
RlxIoThread  *rlx_io_thread_get_shared  (GError **error);
RlxIoThread  *rlx_io_thread_ref         (RlxIoThread *self);
void          rlx_io_thread_unref       (RlxIoThread *self);
GMainContext *rlx_io_thread_get_context (RlxIoThread *self);
/* TRUE on the thread itself (for assertions). */
gboolean      rlx_io_thread_is_current  (RlxIoThread *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxIoThread, rlx_io_thread_unref)

G_END_DECLS
