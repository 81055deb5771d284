/* rlx-trace.h — a timeline of one process's hand-offs, for finding where a
 * round's time goes between processes on one host.
 *
 * With RLX_TRACE=DIR in the environment, rlx_trace() records (monotonic
 * nanoseconds, thread, @what, @arg) in memory — a fixed array of 1 Mi
 * entries, later ones dropped — and the process writes them to
 * DIR/trace-PID.tsv when it exits. CLOCK_MONOTONIC is one clock for every
 * process of a host, so the files of a cohort's ranks line up:
 * scripts/device/round-trace.py reads them. Without RLX_TRACE a call is one
 * test of a flag.
 *
 * @what must be a string that lives for ever (a literal); @arg is the step,
 * or for the links a frame's length.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

extern gint rlx_trace_state;   /* 0: not decided yet, 1: off, 2: on */

void rlx_trace_slow (const char *what, guint64 arg);

static inline void
rlx_trace (const char *what, guint64 arg)
{
  if (G_UNLIKELY (g_atomic_int_get (&rlx_trace_state) != 1))
    rlx_trace_slow (what, arg);
}

G_END_DECLS
