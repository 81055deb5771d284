/* rlx-window.h — the main window: one node of a cohort, shown live
 *
 * The window is the node's face: Join cohort / Leave, Add local rank, the
 * wire precision, and three views of the cohort — the wire counters, the
 * loss chart and the roster — plus an event list. It owns the node, which
 * runs on a thread of its own (core/rlx-node-thread.h: the UI thread only
 * gets its results, batched), and the local ranks it started; closing it
 * leaves the cohort and stops those ranks first.
 *
 * Actions: win.join, win.leave, win.add-local-rank, win.copy-invite,
 * win.show-training, win.show-events, win.log-scale.
 *
 * Threads: the UI thread; the node it owns runs on its own thread.
 */
#pragma once

#include <adwaita.h>

G_BEGIN_DECLS

#define RLX_TYPE_WINDOW (rlx_window_get_type ())
G_DECLARE_FINAL_TYPE (RlxWindow, rlx_window, RLX, WINDOW, AdwApplicationWindow)

/* Property "state" (string, read-only): "idle", "joining", "joined",
 * "leaving". */
RlxWindow  *rlx_window_new        (AdwApplication *application, const char *cohort);
const char *rlx_window_get_state  (RlxWindow *self);
const char *rlx_window_get_cohort (RlxWindow *self);
/* What the buttons do. */
void        rlx_window_join            (RlxWindow *self);
void        rlx_window_leave           (RlxWindow *self);
void        rlx_window_add_local_rank  (RlxWindow *self);

G_END_DECLS
