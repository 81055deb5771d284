/* rlx-loss-chart.h — the loss chart: loss per step, a smoothed line and
 * test accuracy, with axes, a linear or log y axis, and a readout
 *
 * The data lives in two RlxChartSeries (loss: x = step, y = loss; accuracy:
 * x = step, y in [0, 1]); the widget only draws them. Drawing decimates per
 * pixel column, so a frame costs O(width) whatever the number of points, and
 * the finished plot is kept as a render node until the data, the size or the
 * style change — moving the readout redraws only the readout. New points
 * redraw at most every "min-redraw-ms" so a fast cohort cannot keep the
 * frame clock busy.
 *
 * Hover (pointer) or Left/Right/Home/End (keyboard focus) moves a readout of
 * step, loss, smoothed loss and time. The chart is an image to assistive
 * technology; its description says the latest values (updated at most once
 * a second) and the readout when one is shown.
 *
 * Threads: the UI thread; the CSV copy (rlx-chart-series.h) may be written
 * on any thread.
 */
#pragma once

#include <gtk/gtk.h>
#include "rlx-chart-series.h"

G_BEGIN_DECLS

#define RLX_TYPE_LOSS_CHART (rlx_loss_chart_get_type ())
G_DECLARE_FINAL_TYPE (RlxLossChart, rlx_loss_chart, RLX, LOSS_CHART, GtkWidget)

/* Properties:
 *   "log-scale"      boolean  y axis on a log scale
 *   "min-redraw-ms"  uint     shortest interval between redraws for new data
 *                             (default 50; 0: every change)
 *   "smoothing"      double   weight of the past in the smoothed line, 0 (none)
 *                             to 0.999 (default 0.95)
 *   "time-axis"      boolean  x is the wall clock, not the step
 */
GtkWidget      *rlx_loss_chart_new            (void);
RlxChartSeries *rlx_loss_chart_get_loss       (RlxLossChart *self);
RlxChartSeries *rlx_loss_chart_get_accuracy   (RlxLossChart *self);
void            rlx_loss_chart_set_log_scale  (RlxLossChart *self, gboolean log_scale);
gboolean        rlx_loss_chart_get_log_scale  (RlxLossChart *self);
void            rlx_loss_chart_set_min_redraw_ms (RlxLossChart *self, guint ms);
void            rlx_loss_chart_set_smoothing  (RlxLossChart *self, double smoothing);
double          rlx_loss_chart_get_smoothing  (RlxLossChart *self);
void            rlx_loss_chart_set_time_axis  (RlxLossChart *self, gboolean time_axis);
gboolean        rlx_loss_chart_get_time_axis  (RlxLossChart *self);
/* Both series, copied for rlx_chart_csv_format on any thread. */
RlxChartCsv    *rlx_loss_chart_dup_csv        (RlxLossChart *self);
/* Forget every point (a new cohort). */
void            rlx_loss_chart_clear          (RlxLossChart *self);
/* Steps to mark with a line (membership and leader changes; copied). */
void            rlx_loss_chart_set_marks      (RlxLossChart *self, const double *steps,
                                               guint n);

/* The readout: point @index of the loss series, -1 for none. */
void            rlx_loss_chart_set_readout    (RlxLossChart *self, int index);
int             rlx_loss_chart_get_readout    (RlxLossChart *self);
/* Its text ("Step 120 · loss 0.4312 · smoothed 0.4408 · 12.5 s"), NULL for none. */
char           *rlx_loss_chart_dup_readout_text (RlxLossChart *self);

/* What the last draw did (tests and benchmarks). */
typedef struct {
  guint   n_draws;         /* snapshots so far */
  guint   n_plots;         /* of which rebuilt the plot (the rest reused it) */
  guint   n_columns;       /* pixel columns the last plot reduced to */
  guint   n_visited;       /* points its decimation visited */
  double  y_lo, y_hi;      /* its y axis range (data units) */
  gint64  plot_us;         /* time the last plot took to build */
  gboolean plot_cairo;     /* shown from a cairo node (GTK's cairo renderer), not a texture */
} RlxLossChartStats;
void            rlx_loss_chart_get_stats      (RlxLossChart *self, RlxLossChartStats *stats);
/* Where the last plot put its data area, in widget coordinates. */
void            rlx_loss_chart_get_plot_area  (RlxLossChart *self, graphene_rect_t *area);
/* Draw into @snapshot at @width × @height as a frame would (benchmarks and
 * tests; the widget need not be shown). */
void            rlx_loss_chart_draw           (RlxLossChart *self, GtkSnapshot *snapshot,
                                               int width, int height);

G_END_DECLS
