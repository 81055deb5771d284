/* rlx-chart-series.h — the data behind a chart line: points, smoothing,
 * ranges and per-pixel-column decimation
 *
 * A series is points (x, y, time) with x non-decreasing (a step number).
 * Appending a point whose x is below the last one rewrites history: every
 * point at or after that x is dropped first (a cohort that merged threw
 * those steps away). Non-finite y values are kept out (they would poison
 * the ranges) and counted.
 *
 * The smoothed value is an exponential moving average with the start-up
 * bias removed (the first points are not pulled towards zero).
 *
 * Decimation walks only the points inside [x0, x1] and reduces them to one
 * RlxChartColumn per pixel column, so drawing costs O(width) whatever the
 * number of points; a run of 16 points that falls in one column is added at
 * once from its summary, kept as points arrive (same result, ~6× fewer
 * visits at 100,000 points).
 *
 * Threads: one owner thread (the UI thread in the app); rlx_chart_csv_new
 * copies on it, and the copy may be written on any thread.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct {
  float    y_min, y_max;    /* extremes of the raw values in the column */
  float    y_first, y_last;
  float    smooth;          /* smoothed value at the column's last point */
  guint    n;               /* points in the column (0: empty) */
} RlxChartColumn;

#define RLX_TYPE_CHART_SERIES (rlx_chart_series_get_type ())
G_DECLARE_FINAL_TYPE (RlxChartSeries, rlx_chart_series, RLX, CHART_SERIES, GObject)

/* Signals:
 *   ::changed ()   points were appended, dropped or cleared */

/* @smoothing in [0, 1): weight of the past in the moving average. */
RlxChartSeries *rlx_chart_series_new       (double smoothing);

void     rlx_chart_series_append     (RlxChartSeries *self, double x, double y, gint64 time_us);
void     rlx_chart_series_clear      (RlxChartSeries *self);
guint    rlx_chart_series_get_n_points (RlxChartSeries *self);
/* Bumps whenever the points change (for caches). */
guint64  rlx_chart_series_get_generation (RlxChartSeries *self);
guint    rlx_chart_series_get_n_rejected (RlxChartSeries *self);

/* Point @i: any of the outputs may be NULL. FALSE if @i is out of range. */
gboolean rlx_chart_series_get_point  (RlxChartSeries *self, guint i, double *x, double *y,
                                      double *smooth, gint64 *time_us);
/* x of the first/last point and extremes of y (all FALSE when empty).
 * @y_min_positive: the smallest y > 0 (for log axes), or 0 if none. */
gboolean rlx_chart_series_get_bounds (RlxChartSeries *self, double *x_min, double *x_max,
                                      double *y_min, double *y_max, double *y_min_positive);
/* Index of the point whose x is nearest to @x (-1 when empty). */
int      rlx_chart_series_find_nearest (RlxChartSeries *self, double x);

/* Reduce the points with x in [@x0, @x1] to @n_cols columns of equal width
 * (@cols[0..n_cols)); returns the number of points in that window. */
guint    rlx_chart_series_decimate   (RlxChartSeries *self, double x0, double x1,
                                      guint n_cols, RlxChartColumn *cols);

/* The same against the points' times (a wall-clock axis; times do not
 * decrease along a series), and the time bounds and nearest point. */
guint    rlx_chart_series_decimate_time (RlxChartSeries *self, gint64 t0_us, gint64 t1_us,
                                         guint n_cols, RlxChartColumn *cols);
gboolean rlx_chart_series_get_time_bounds (RlxChartSeries *self, gint64 *t0_us, gint64 *t1_us);
int      rlx_chart_series_find_nearest_time (RlxChartSeries *self, gint64 t_us);

/* The smoothing weight (as in rlx_chart_series_new); changing it smooths
 * every point again, TensorBoard's way: ema_k = w·ema_(k-1) + (1-w)·y_k,
 * shown as ema_k / (1 - w^k) so the first points are not pulled to zero. */
void     rlx_chart_series_set_smoothing (RlxChartSeries *self, double smoothing);
double   rlx_chart_series_get_smoothing (RlxChartSeries *self);

/* CSV export: a copy of a loss and an accuracy series taken on the owner's
 * thread (cheap), written out anywhere — step,time,loss,smoothed,accuracy,
 * one row per step, the time as Unix seconds (@mono_to_real_us turns the
 * points' monotonic times into wall-clock ones). */
typedef struct _RlxChartCsv RlxChartCsv;
RlxChartCsv *rlx_chart_csv_new     (RlxChartSeries *loss, RlxChartSeries *accuracy,
                                    gint64 mono_to_real_us);
void         rlx_chart_csv_free    (RlxChartCsv *csv);
GBytes      *rlx_chart_csv_format  (RlxChartCsv *csv);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxChartCsv, rlx_chart_csv_free)

G_END_DECLS
