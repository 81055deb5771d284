/* rlx-chart-series.c — points, smoothing and decimation (see the header) */
#include "rlx-config.h"
#include "rlx-chart-series.h"

#include <math.h>
#include <string.h>

typedef struct {
  double x;
  gint64 time_us;
  double ema;      /* biased moving average after this point */
  float  y;
  float  smooth;   /* ema with the start-up bias removed */
} Point;

/* Points 16k..16k+15 summed up, so decimation adds a run of points that
 * falls in one pixel column at once (100,000 points in 1,100 columns: about
 * 6,300 blocks and 9,000 points visited one by one instead of 100,000).
 * Only whole blocks are kept. */
#define BLOCK_SHIFT 4
#define BLOCK       (1u << BLOCK_SHIFT)

typedef struct {
  double x_first, x_last;
  gint64 t_first, t_last;
  float  y_min, y_max, y_first, y_last;
  float  smooth_last;
} Block;

struct _RlxChartSeries
{
  GObject  parent_instance;

  GArray  *points;        /* Point */
  GArray  *blocks;        /* Block: one per BLOCK whole points */
  double   smoothing;
  double   y_min, y_max, y_min_positive;
  guint64  generation;
  guint    n_rejected;
};

G_DEFINE_FINAL_TYPE (RlxChartSeries, rlx_chart_series, G_TYPE_OBJECT)

enum { SIG_CHANGED, N_SIGNALS };
static guint signals[N_SIGNALS];

static void
rlx_chart_series_finalize (GObject *object)
{
  RlxChartSeries *self = RLX_CHART_SERIES (object);

  g_array_unref (self->points);
  g_array_unref (self->blocks);
  G_OBJECT_CLASS (rlx_chart_series_parent_class)->finalize (object);
}

static void
rlx_chart_series_class_init (RlxChartSeriesClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = rlx_chart_series_finalize;
  signals[SIG_CHANGED] = g_signal_new ("changed", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                       0, NULL, NULL, NULL, G_TYPE_NONE, 0);
}

static void
reset_bounds (RlxChartSeries *self)
{
  self->y_min = INFINITY;
  self->y_max = -INFINITY;
  self->y_min_positive = INFINITY;
}

static void
rlx_chart_series_init (RlxChartSeries *self)
{
  self->points = g_array_new (FALSE, FALSE, sizeof (Point));
  self->blocks = g_array_new (FALSE, FALSE, sizeof (Block));
  reset_bounds (self);
}

RlxChartSeries *
rlx_chart_series_new (double smoothing)
{
  RlxChartSeries *self = g_object_new (RLX_TYPE_CHART_SERIES, NULL);

  self->smoothing = CLAMP (smoothing, 0.0, 0.999);
  return self;
}

static void
include_bounds (RlxChartSeries *self, double y)
{
  self->y_min = MIN (self->y_min, y);
  self->y_max = MAX (self->y_max, y);
  if (y > 0)
    self->y_min_positive = MIN (self->y_min_positive, y);
}

/* Sum up block @k from its points. */
static void
fill_block (RlxChartSeries *self, Block *b, guint k)
{
  const Point *p = &g_array_index (self->points, Point, k << BLOCK_SHIFT);

  b->x_first = p[0].x;
  b->x_last = p[BLOCK - 1].x;
  b->t_first = p[0].time_us;
  b->t_last = p[BLOCK - 1].time_us;
  b->y_first = b->y_min = b->y_max = p[0].y;
  b->y_last = p[BLOCK - 1].y;
  b->smooth_last = p[BLOCK - 1].smooth;
  for (guint i = 1; i < BLOCK; i++)
    {
      b->y_min = MIN (b->y_min, p[i].y);
      b->y_max = MAX (b->y_max, p[i].y);
    }
}

/* Keep one block per BLOCK whole points (after points were added or dropped). */
static void
sync_blocks (RlxChartSeries *self)
{
  guint want = self->points->len >> BLOCK_SHIFT;

  if (self->blocks->len > want)
    g_array_set_size (self->blocks, want);
  while (self->blocks->len < want)
    {
      Block b;
      fill_block (self, &b, self->blocks->len);
      g_array_append_val (self->blocks, b);
    }
}

/* Drop every point with x >= @x (history rewritten). */
static void
truncate_from (RlxChartSeries *self, double x)
{
  guint lo = 0, hi = self->points->len;

  while (lo < hi)
    {
      guint mid = lo + (hi - lo) / 2;
      if (g_array_index (self->points, Point, mid).x < x)
        lo = mid + 1;
      else
        hi = mid;
    }
  g_array_set_size (self->points, lo);
  sync_blocks (self);
  reset_bounds (self);
  for (guint i = 0; i < self->points->len; i++)
    include_bounds (self, g_array_index (self->points, Point, i).y);
}

void
rlx_chart_series_append (RlxChartSeries *self, double x, double y, gint64 time_us)
{
  Point p = { 0 };
  double prev_ema = 0, bias;
  guint k;

  g_return_if_fail (RLX_IS_CHART_SERIES (self));

  if (!isfinite (x) || !isfinite (y))
    {
      self->n_rejected++;
      return;
    }
  if (self->points->len > 0 && x < g_array_index (self->points, Point, self->points->len - 1).x)
    truncate_from (self, x);
  k = self->points->len;
  if (k > 0)
    prev_ema = g_array_index (self->points, Point, k - 1).ema;
  p.x = x;
  p.y = (float) y;
  p.time_us = time_us;
  p.ema = self->smoothing * prev_ema + (1.0 - self->smoothing) * y;
  bias = 1.0 - pow (self->smoothing, (double) (k + 1));
  p.smooth = (float) (bias > 0 ? p.ema / bias : y);
  g_array_append_val (self->points, p);
  if ((self->points->len & (BLOCK - 1)) == 0)
    sync_blocks (self);
  include_bounds (self, y);
  self->generation++;
  g_signal_emit (self, signals[SIG_CHANGED], 0);
}

void
rlx_chart_series_clear (RlxChartSeries *self)
{
  g_return_if_fail (RLX_IS_CHART_SERIES (self));

  g_array_set_size (self->points, 0);
  g_array_set_size (self->blocks, 0);
  reset_bounds (self);
  self->n_rejected = 0;
  self->generation++;
  g_signal_emit (self, signals[SIG_CHANGED], 0);
}

guint
rlx_chart_series_get_n_points (RlxChartSeries *self)
{
  g_return_val_if_fail (RLX_IS_CHART_SERIES (self), 0);
  return self->points->len;
}

guint64
rlx_chart_series_get_generation (RlxChartSeries *self)
{
  g_return_val_if_fail (RLX_IS_CHART_SERIES (self), 0);
  return self->generation;
}

guint
rlx_chart_series_get_n_rejected (RlxChartSeries *self)
{
  g_return_val_if_fail (RLX_IS_CHART_SERIES (self), 0);
  return self->n_rejected;
}

gboolean
rlx_chart_series_get_point (RlxChartSeries *self, guint i, double *x, double *y, double *smooth,
                            gint64 *time_us)
{
  const Point *p;

  g_return_val_if_fail (RLX_IS_CHART_SERIES (self), FALSE);
  if (i >= self->points->len)
    return FALSE;
  p = &g_array_index (self->points, Point, i);
  if (x)
    *x = p->x;
  if (y)
    *y = p->y;
  if (smooth)
    *smooth = p->smooth;
  if (time_us)
    *time_us = p->time_us;
  return TRUE;
}

gboolean
rlx_chart_series_get_bounds (RlxChartSeries *self, double *x_min, double *x_max, double *y_min,
                             double *y_max, double *y_min_positive)
{
  guint n;

  g_return_val_if_fail (RLX_IS_CHART_SERIES (self), FALSE);
  n = self->points->len;
  if (n == 0)
    return FALSE;
  if (x_min)
    *x_min = g_array_index (self->points, Point, 0).x;
  if (x_max)
    *x_max = g_array_index (self->points, Point, n - 1).x;
  if (y_min)
    *y_min = self->y_min;
  if (y_max)
    *y_max = self->y_max;
  if (y_min_positive)
    *y_min_positive = isfinite (self->y_min_positive) ? self->y_min_positive : 0;
  return TRUE;
}

/* A point's key along an axis: its x, or its time. */
static inline double
key_of (const Point *p, gboolean by_time)
{
  return by_time ? (double) p->time_us : p->x;
}

/* First index whose key is >= @v. */
static guint
lower_bound_by (RlxChartSeries *self, double v, gboolean by_time)
{
  guint lo = 0, hi = self->points->len;

  while (lo < hi)
    {
      guint mid = lo + (hi - lo) / 2;
      if (key_of (&g_array_index (self->points, Point, mid), by_time) < v)
        lo = mid + 1;
      else
        hi = mid;
    }
  return lo;
}

static int
find_nearest_by (RlxChartSeries *self, double v, gboolean by_time)
{
  guint n = self->points->len, i;

  if (n == 0)
    return -1;
  i = lower_bound_by (self, v, by_time);
  if (i >= n)
    return (int) n - 1;
  if (i > 0 && v - key_of (&g_array_index (self->points, Point, i - 1), by_time)
                 <= key_of (&g_array_index (self->points, Point, i), by_time) - v)
    return (int) i - 1;
  return (int) i;
}

int
rlx_chart_series_find_nearest (RlxChartSeries *self, double x)
{
  g_return_val_if_fail (RLX_IS_CHART_SERIES (self), -1);
  return find_nearest_by (self, x, FALSE);
}

static inline void
add_to_column (RlxChartColumn *col, const Point *p)
{
  if (col->n == 0)
    {
      col->y_min = col->y_max = col->y_first = p->y;
    }
  else
    {
      col->y_min = MIN (col->y_min, p->y);
      col->y_max = MAX (col->y_max, p->y);
    }
  col->y_last = p->y;
  col->smooth = p->smooth;
  col->n++;
}

static inline void
add_block_to_column (RlxChartColumn *col, const Block *b)
{
  if (col->n == 0)
    {
      col->y_min = b->y_min;
      col->y_max = b->y_max;
      col->y_first = b->y_first;
    }
  else
    {
      col->y_min = MIN (col->y_min, b->y_min);
      col->y_max = MAX (col->y_max, b->y_max);
    }
  col->y_last = b->y_last;
  col->smooth = b->smooth_last;
  col->n += BLOCK;
}

/* The column of key @k: monotonic in @k, so a block whose first and last
 * points share a column has all its points there. */
static inline guint
column_of (double k, double k0, double per_col, guint n_cols)
{
  guint c = per_col > 0 ? (guint) ((k - k0) / per_col) : 0;
  return MIN (c, n_cols - 1);
}

/* The points with key in [@k0, @k1] into @n_cols columns of @per_col each;
 * returns how many. */
static guint
decimate_by (RlxChartSeries *self, double k0, double k1, double per_col, gboolean by_time,
             guint n_cols, RlxChartColumn *cols)
{
  const Point *pts = (const Point *) (gpointer) self->points->data;
  const Block *blocks = (const Block *) (gpointer) self->blocks->data;
  guint n = self->points->len, n_blocks = self->blocks->len, visited = 0;
  guint i = lower_bound_by (self, k0, by_time);

  while (i < n && key_of (&pts[i], by_time) <= k1)
    {
      if ((i & (BLOCK - 1)) == 0 && (i >> BLOCK_SHIFT) < n_blocks)
        {
          const Block *b = &blocks[i >> BLOCK_SHIFT];
          double first = by_time ? (double) b->t_first : b->x_first;
          double last = by_time ? (double) b->t_last : b->x_last;
          guint c = column_of (first, k0, per_col, n_cols);
          if (last <= k1 && column_of (last, k0, per_col, n_cols) == c)
            {
              add_block_to_column (&cols[c], b);
              i += BLOCK;
              visited += BLOCK;
              continue;
            }
        }
      add_to_column (&cols[column_of (key_of (&pts[i], by_time), k0, per_col, n_cols)], &pts[i]);
      i++;
      visited++;
    }
  return visited;
}

guint
rlx_chart_series_decimate (RlxChartSeries *self, double x0, double x1, guint n_cols,
                           RlxChartColumn *cols)
{
  g_return_val_if_fail (RLX_IS_CHART_SERIES (self), 0);
  g_return_val_if_fail (n_cols == 0 || cols != NULL, 0);

  memset (cols, 0, sizeof (RlxChartColumn) * n_cols);
  if (n_cols == 0 || !(x1 >= x0))
    return 0;
  return decimate_by (self, x0, x1, (x1 - x0) / n_cols, FALSE, n_cols, cols);
}

guint
rlx_chart_series_decimate_time (RlxChartSeries *self, gint64 t0_us, gint64 t1_us, guint n_cols,
                                RlxChartColumn *cols)
{
  g_return_val_if_fail (RLX_IS_CHART_SERIES (self), 0);
  g_return_val_if_fail (n_cols == 0 || cols != NULL, 0);

  memset (cols, 0, sizeof (RlxChartColumn) * n_cols);
  if (n_cols == 0 || t1_us < t0_us)
    return 0;
  return decimate_by (self, (double) t0_us, (double) t1_us, (double) (t1_us - t0_us) / n_cols,
                      TRUE, n_cols, cols);
}

gboolean
rlx_chart_series_get_time_bounds (RlxChartSeries *self, gint64 *t0_us, gint64 *t1_us)
{
  guint n;

  g_return_val_if_fail (RLX_IS_CHART_SERIES (self), FALSE);
  n = self->points->len;
  if (n == 0)
    return FALSE;
  if (t0_us)
    *t0_us = g_array_index (self->points, Point, 0).time_us;
  if (t1_us)
    *t1_us = g_array_index (self->points, Point, n - 1).time_us;
  return TRUE;
}

int
rlx_chart_series_find_nearest_time (RlxChartSeries *self, gint64 t_us)
{
  g_return_val_if_fail (RLX_IS_CHART_SERIES (self), -1);
  return find_nearest_by (self, (double) t_us, TRUE);
}

void
rlx_chart_series_set_smoothing (RlxChartSeries *self, double smoothing)
{
  double ema = 0, power = 1;

  g_return_if_fail (RLX_IS_CHART_SERIES (self));
  smoothing = CLAMP (smoothing, 0.0, 0.999);
  if (smoothing == self->smoothing)
    return;
  self->smoothing = smoothing;
  for (guint k = 0; k < self->points->len; k++)
    {
      Point *p = &g_array_index (self->points, Point, k);
      double bias;
      ema = smoothing * ema + (1.0 - smoothing) * p->y;
      power *= smoothing;
      bias = 1.0 - power;
      p->ema = ema;
      p->smooth = (float) (bias > 0 ? ema / bias : p->y);
    }
  for (guint k = 0; k < self->blocks->len; k++)
    g_array_index (self->blocks, Block, k).smooth_last =
      g_array_index (self->points, Point, ((k + 1) << BLOCK_SHIFT) - 1).smooth;
  self->generation++;
  g_signal_emit (self, signals[SIG_CHANGED], 0);
}

double
rlx_chart_series_get_smoothing (RlxChartSeries *self)
{
  g_return_val_if_fail (RLX_IS_CHART_SERIES (self), 0);
  return self->smoothing;
}

/* ── CSV ───────────────────────────────────────────────────────────────── */

struct _RlxChartCsv
{
  GArray *loss, *accuracy;   /* Point, copies */
  gint64  mono_to_real_us;
};

RlxChartCsv *
rlx_chart_csv_new (RlxChartSeries *loss, RlxChartSeries *accuracy, gint64 mono_to_real_us)
{
  RlxChartCsv *csv = g_new0 (RlxChartCsv, 1);

  g_return_val_if_fail (RLX_IS_CHART_SERIES (loss) && RLX_IS_CHART_SERIES (accuracy), NULL);
  csv->loss = g_array_copy (loss->points);
  csv->accuracy = g_array_copy (accuracy->points);
  csv->mono_to_real_us = mono_to_real_us;
  return csv;
}

void
rlx_chart_csv_free (RlxChartCsv *csv)
{
  if (csv == NULL)
    return;
  g_array_unref (csv->loss);
  g_array_unref (csv->accuracy);
  g_free (csv);
}

/* the shortest text that reads back as the same float */
static void
append_float (GString *s, float v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];

  g_string_append (s, g_ascii_formatd (buf, sizeof buf, "%.9g", v));
}

GBytes *
rlx_chart_csv_format (RlxChartCsv *csv)
{
  GString *s = g_string_sized_new (64 + 48 * (gsize) csv->loss->len);
  const Point *l = (const Point *) (gpointer) csv->loss->data;
  const Point *a = (const Point *) (gpointer) csv->accuracy->data;
  guint i = 0, j = 0, nl = csv->loss->len, na = csv->accuracy->len;
  char buf[G_ASCII_DTOSTR_BUF_SIZE];

  g_string_append (s, "step,time,loss,smoothed_loss,test_accuracy\n");
  /* one row per step: the two series merged by step */
  while (i < nl || j < na)
    {
      gboolean take_l = i < nl && (j >= na || l[i].x <= a[j].x);
      gboolean take_a = j < na && (i >= nl || a[j].x <= l[i].x);
      const Point *p = take_l ? &l[i] : &a[j];

      g_string_append (s, g_ascii_formatd (buf, sizeof buf, "%.0f", p->x));
      g_string_append_c (s, ',');
      g_string_append (s, g_ascii_formatd (buf, sizeof buf, "%.6f",
                                           (p->time_us + csv->mono_to_real_us) / 1e6));
      g_string_append_c (s, ',');
      if (take_l)
        {
          append_float (s, l[i].y);
          g_string_append_c (s, ',');
          append_float (s, l[i].smooth);
        }
      else
        g_string_append_c (s, ',');
      g_string_append_c (s, ',');
      if (take_a)
        append_float (s, a[j].y);
      g_string_append_c (s, '\n');
      i += take_l;
      j += take_a;
    }
  return g_string_free_to_bytes (s);
}
