/* rlx-chart-axis.h — where a chart's ticks go and what they say
 *
 * Pure functions (any thread), used by the loss chart and its tests:
 *  - linear ticks at a "nice" step (1, 2 or 5 × 10^k), labelled in one
 *    format for the whole axis ("8k, 10k", never "8000, 10.0k");
 *  - log ticks: every m × 10^d (m = 1..9) as a grid line, labelled as
 *    densely as the height allows (decades, then 2 and 5, then all);
 *  - wall-clock ticks at 1, 2, 5, 10, 15, 30 s, 1, 2, 5, 10, 15, 30 min,
 *    1, 2, 3, 6, 12 h, labelled as a clock ("14:05", "14:05:30").
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define RLX_AXIS_MAX_TICKS 128

typedef struct {
  double   value;      /* in data units (log axes: the value, not its log) */
  gboolean major;      /* a labelled tick (minor ones are grid lines only) */
  char     label[32];  /* "" when not labelled */
} RlxAxisTick;

/* Ticks of [@lo, @hi] at most @max_ticks apart; returns how many. */
guint  rlx_axis_linear_ticks  (double lo, double hi, int max_ticks, RlxAxisTick *ticks);
/* The same for step numbers: whole numbers only, "k" and "M" forms
 * shared by every label. */
guint  rlx_axis_step_ticks    (double lo, double hi, int max_ticks, RlxAxisTick *ticks);
/* Ticks of a log axis spanning log10 values [@lo10, @hi10], drawn
 * @pixels tall: labels kept at least @min_gap_px apart. */
guint  rlx_axis_log_ticks     (double lo10, double hi10, double pixels, double min_gap_px,
                               RlxAxisTick *ticks);
/* Ticks of a wall-clock axis between the Unix times @lo_s and @hi_s
 * (seconds), in local time. */
guint  rlx_axis_clock_ticks   (double lo_s, double hi_s, int max_ticks, RlxAxisTick *ticks);

/* A value as a tick label: "0", "0.5", "2e-04". */
void   rlx_axis_format_value  (double v, char *buf, gsize size);

G_END_DECLS
