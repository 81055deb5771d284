/* rlx-benchmark.h — the app measuring itself (rlx-cluster --benchmark…)
 *
 * UI: once the window has joined and its local ranks train, SECONDS of
 * "watch" (nobody touches the window) and then SECONDS of "hover":
 *   - frame time: the frame clock's before-paint to after-paint signals
 *     (update, layout, paint and the render), for every frame drawn;
 *     "hover": a tick callback keeps the frame clock running and moves the
 *     chart's readout every frame (a person moving the pointer over the
 *     chart); without it ("watch") frames come only when something changed;
 *   - the interval between consecutive frames;
 *   - CPU time of the UI (main) thread, from CLOCK_THREAD_CPUTIME_ID: the
 *     GTK work and the window's handling of the node's batched results; the
 *     node's protocol work runs on the node's own thread (rlx-node-thread.h)
 *     and is reported apart ("node_thread_cpu_percent"); the rank's compute
 *     and the links' I/O threads are in neither;
 *   - the process's CPU time and the cohort's steps per second, for context.
 * Chart: 100,000 points in the loss chart at 1200 × 400, then (a) the plot
 * rebuilt into a snapshot 200 times, each after one more point, and (b) 200
 * real frames, each after one more point (frame start to end of paint).
 * Both print one JSON object on stdout and quit the app.
 */
#pragma once

#include "rlx-window.h"

G_BEGIN_DECLS

/* Start measuring once @window has joined and @ranks local ranks train. */
void rlx_benchmark_ui    (RlxWindow *window, guint seconds, guint ranks);
/* Fill @window's chart and time its redraws. */
void rlx_benchmark_chart (RlxWindow *window);
/* TRUE when a benchmark could not measure (the app then exits with 1). */
gboolean rlx_benchmark_failed (void);

G_END_DECLS
