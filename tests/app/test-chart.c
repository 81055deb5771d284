/* test-chart.c — the loss chart: its data (series, smoothing, decimation)
 * and its widget (redraws on new points, reuses the plot for the readout,
 * draws the line where the values say) */
#include "node-test-utils.h"
#include "rlx-loss-chart.h"
#include "rlx-chart-axis.h"
#include "rlx-chart-export.h"
#include "rlx-chart-raster.h"

#include <adwaita.h>
#include <math.h>
#include <glib/gstdio.h>
#include <string.h>

#define TIMEOUT_MS 20000

/* ── the series ────────────────────────────────────────────────────────── */

static void
test_decimate_100k (void)
{
  g_autoptr(RlxChartSeries) s = rlx_chart_series_new (0.9);
  g_autoptr(GRand) rand = g_rand_new_with_seed (7);
  RlxChartColumn cols[500];
  guint visited, total = 0, spike_col, dip_col;

  for (guint i = 0; i < 100000; i++)
    {
      double y = 1.0 + 0.1 * g_rand_double (rand);
      if (i == 54321)
        y = 50;
      if (i == 77777)
        y = -3;
      rlx_chart_series_append (s, i, y, i);
    }
  g_assert_cmpuint (rlx_chart_series_get_n_points (s), ==, 100000);
  visited = rlx_chart_series_decimate (s, 0, 99999, 500, cols);
  g_assert_cmpuint (visited, ==, 100000);
  for (guint c = 0; c < 500; c++)
    {
      g_assert_cmpuint (cols[c].n, >, 0);
      g_assert_cmpfloat (cols[c].y_min, <=, cols[c].y_first);
      g_assert_cmpfloat (cols[c].y_max, >=, cols[c].y_last);
      g_assert_true (isfinite (cols[c].smooth));
      total += cols[c].n;
    }
  g_assert_cmpuint (total, ==, 100000);
  /* one point in 100,000 still shows in its column */
  spike_col = (guint) (54321 / (99999.0 / 500));
  dip_col = (guint) (77777 / (99999.0 / 500));
  g_assert_cmpfloat (cols[spike_col].y_max, ==, 50.0f);
  g_assert_cmpfloat (cols[dip_col].y_min, ==, -3.0f);
  for (guint c = 0; c < 500; c++)
    if (c != spike_col && c != dip_col)
      {
        g_assert_cmpfloat (cols[c].y_max, <=, 1.1f);
        g_assert_cmpfloat (cols[c].y_min, >=, 1.0f);
      }

  /* a window into the middle visits only the points inside it */
  visited = rlx_chart_series_decimate (s, 1000, 1999, 100, cols);
  g_assert_cmpuint (visited, ==, 1000);
}

/* The columns as the plain per-point walk makes them. */
static guint
decimate_reference (RlxChartSeries *s, double k0, double k1, gboolean by_time, guint n_cols,
                    RlxChartColumn *cols)
{
  double per_col = (k1 - k0) / n_cols;
  guint n = rlx_chart_series_get_n_points (s), visited = 0;

  memset (cols, 0, sizeof (RlxChartColumn) * n_cols);
  for (guint i = 0; i < n; i++)
    {
      double x, y, smooth, k;
      gint64 t;
      RlxChartColumn *col;
      guint c;

      rlx_chart_series_get_point (s, i, &x, &y, &smooth, &t);
      k = by_time ? (double) t : x;
      if (k < k0 || k > k1)
        continue;
      c = per_col > 0 ? (guint) ((k - k0) / per_col) : 0;
      col = &cols[MIN (c, n_cols - 1)];
      if (col->n == 0)
        col->y_min = col->y_max = col->y_first = (float) y;
      col->y_min = MIN (col->y_min, (float) y);
      col->y_max = MAX (col->y_max, (float) y);
      col->y_last = (float) y;
      col->smooth = (float) smooth;
      col->n++;
      visited++;
    }
  return visited;
}

static void
assert_same_columns (const RlxChartColumn *a, const RlxChartColumn *b, guint n_cols)
{
  for (guint c = 0; c < n_cols; c++)
    {
      g_assert_cmpuint (a[c].n, ==, b[c].n);
      if (a[c].n == 0)
        continue;
      g_assert_cmpfloat (a[c].y_min, ==, b[c].y_min);
      g_assert_cmpfloat (a[c].y_max, ==, b[c].y_max);
      g_assert_cmpfloat (a[c].y_first, ==, b[c].y_first);
      g_assert_cmpfloat (a[c].y_last, ==, b[c].y_last);
      g_assert_cmpfloat (a[c].smooth, ==, b[c].smooth);
    }
}

/* Decimation adds runs of points at once from their summaries: the columns
 * are exactly those of the point-by-point walk, for any window and width,
 * by step and by time, after history is rewritten and after the smoothing
 * changes. */
static void
test_decimate_blocks (void)
{
  g_autoptr(RlxChartSeries) s = rlx_chart_series_new (0.9);
  g_autoptr(GRand) rand = g_rand_new_with_seed (11);
  RlxChartColumn got[700], want[700];
  gint64 t = 0;

  for (guint i = 0; i < 20000; i++)
    {
      /* irregular steps and times; spikes anywhere */
      t += 1 + g_rand_int_range (rand, 0, 3000);
      rlx_chart_series_append (s, i * 2 + g_rand_int_range (rand, 0, 2),
                               g_rand_double (rand) < 0.001 ? 40.0 : g_rand_double (rand), t);
    }
  for (guint round = 0; round < 3; round++)
    {
      double x_lo, x_hi;
      gint64 t_lo, t_hi;

      if (round == 1)   /* a merge throws the last steps away, then more arrive */
        {
          rlx_chart_series_append (s, 31337, 5.0, t);
          for (guint i = 0; i < 777; i++)
            rlx_chart_series_append (s, 31338 + i, g_rand_double (rand), t += 100);
        }
      if (round == 2)
        rlx_chart_series_set_smoothing (s, 0.6);
      g_assert_true (rlx_chart_series_get_bounds (s, &x_lo, &x_hi, NULL, NULL, NULL));
      g_assert_true (rlx_chart_series_get_time_bounds (s, &t_lo, &t_hi));
      for (guint k = 0; k < 40; k++)
        {
          guint n_cols = 1 + g_rand_int_range (rand, 0, 700);
          double a = g_rand_double_range (rand, x_lo - 50, x_hi);
          double b = k == 0 ? x_hi : g_rand_double_range (rand, a, x_hi + 50);
          gint64 ta = t_lo + (gint64) (g_rand_double (rand) * (t_hi - t_lo));
          gint64 tb = k == 0 ? t_hi : ta + (gint64) (g_rand_double (rand) * (t_hi - ta));
          guint n_got, n_want;

          if (k == 0)
            a = x_lo, ta = t_lo;
          n_got = rlx_chart_series_decimate (s, a, b, n_cols, got);
          n_want = decimate_reference (s, a, b, FALSE, n_cols, want);
          g_assert_cmpuint (n_got, ==, n_want);
          assert_same_columns (got, want, n_cols);

          n_got = rlx_chart_series_decimate_time (s, ta, tb, n_cols, got);
          n_want = decimate_reference (s, (double) ta, (double) tb, TRUE, n_cols, want);
          g_assert_cmpuint (n_got, ==, n_want);
          assert_same_columns (got, want, n_cols);
        }
    }
}

/* ── the rasteriser ────────────────────────────────────────────────────── */

#define RW 40
#define RH 40

static guint32 raster_px[RW * RH];

static RlxRasterImage
raster_image (guint32 fill)
{
  RlxRasterImage img = { (guint8 *) raster_px, RW * 4, RW, RH };

  for (guint i = 0; i < RW * RH; i++)
    raster_px[i] = fill;
  return img;
}

#define ALPHA(x, y) (raster_px[(y) * RW + (x)] >> 24)

static void
test_raster (void)
{
  cairo_rectangle_int_t all = { 0, 0, RW, RH }, left = { 0, 0, 20, RH };
  GdkRGBA black = { 0, 0, 0, 1 }, half = { 0, 0, 0, 0.5 }, blue = { 0, 0, 1, 1 };
  double xs[3] = { 5, 35, 5 }, ys[3] = { 20, 20, 20 };
  RlxRasterImage img;

  /* a 2-pixel line on a pixel edge covers the two rows beside it, fully */
  img = raster_image (0);
  rlx_raster_polyline (&img, &all, xs, ys, 2, 2.0, TRUE, &black);
  g_assert_cmpuint (ALPHA (20, 19), ==, 255);
  g_assert_cmpuint (ALPHA (20, 20), ==, 255);
  g_assert_cmpuint (ALPHA (20, 18), ==, 0);
  g_assert_cmpuint (ALPHA (20, 21), ==, 0);
  /* round caps half a width past the ends, nothing further */
  g_assert_cmpuint (ALPHA (35, 20), >, 0);
  g_assert_cmpuint (ALPHA (37, 20), ==, 0);

  /* a quarter pixel lower: its edges cover their rows in part */
  ys[0] = ys[1] = 20.25;
  img = raster_image (0);
  rlx_raster_polyline (&img, &all, xs, ys, 2, 2.0, TRUE, &black);
  g_assert_cmpuint (ALPHA (20, 19), >=, 185);
  g_assert_cmpuint (ALPHA (20, 19), <=, 197);
  g_assert_cmpuint (ALPHA (20, 20), ==, 255);
  g_assert_cmpuint (ALPHA (20, 21), >=, 58);
  g_assert_cmpuint (ALPHA (20, 21), <=, 70);

  /* without antialiasing: in or out by the pixel's centre, one row */
  ys[0] = ys[1] = 20.3;
  img = raster_image (0);
  rlx_raster_polyline (&img, &all, xs, ys, 2, 1.0, FALSE, &black);
  g_assert_cmpuint (ALPHA (20, 20), ==, 255);
  g_assert_cmpuint (ALPHA (20, 19), ==, 0);
  g_assert_cmpuint (ALPHA (20, 21), ==, 0);

  /* a line that goes back over itself is blended once (as a stroke is),
   * its edges too */
  img = raster_image (0);
  rlx_raster_polyline (&img, &all, xs, ys, 3, 1.0, FALSE, &half);
  g_assert_cmpuint (ALPHA (20, 20), ==, 128);
  ys[0] = ys[1] = ys[2] = 20.25;
  img = raster_image (0);
  rlx_raster_polyline (&img, &all, xs, ys, 3, 2.0, TRUE, &black);
  g_assert_cmpuint (ALPHA (20, 21), >=, 58);
  g_assert_cmpuint (ALPHA (20, 21), <=, 70);
  ys[0] = ys[1] = ys[2] = 20.3;

  /* over what is there: half black over opaque white is mid grey; blue
   * stays blue (premultiplied, native-endian ARGB) */
  img = raster_image (0xffffffff);
  rlx_raster_polyline (&img, &all, xs, ys, 2, 1.0, FALSE, &half);
  g_assert_cmphex (raster_px[20 * RW + 20], ==, 0xff808080);
  img = raster_image (0);
  rlx_raster_polyline (&img, &all, xs, ys, 2, 1.0, FALSE, &blue);
  g_assert_cmphex (raster_px[20 * RW + 20], ==, 0xff0000ff);

  /* nothing outside the clip; a non-finite vertex breaks the line */
  img = raster_image (0);
  rlx_raster_polyline (&img, &left, xs, ys, 2, 1.0, FALSE, &black);
  g_assert_cmpuint (ALPHA (19, 20), ==, 255);
  g_assert_cmpuint (ALPHA (20, 20), ==, 0);
  ys[1] = NAN;
  img = raster_image (0);
  rlx_raster_polyline (&img, &all, xs, ys, 2, 1.0, FALSE, &black);
  for (guint i = 0; i < RW * RH; i++)
    g_assert_cmphex (raster_px[i], ==, 0);
}

static void
test_rewind (void)
{
  g_autoptr(RlxChartSeries) s = rlx_chart_series_new (0.5);
  double x_max, y_max, y;

  for (guint i = 0; i < 100; i++)
    rlx_chart_series_append (s, i, i == 70 ? 9.0 : 1.0, i);
  g_assert_true (rlx_chart_series_get_bounds (s, NULL, &x_max, NULL, &y_max, NULL));
  g_assert_cmpfloat (y_max, ==, 9.0);
  /* a merge threw steps 50.. away: history is rewritten from there */
  rlx_chart_series_append (s, 50, 2.0, 1000);
  g_assert_cmpuint (rlx_chart_series_get_n_points (s), ==, 51);
  g_assert_true (rlx_chart_series_get_bounds (s, NULL, &x_max, NULL, &y_max, NULL));
  g_assert_cmpfloat (x_max, ==, 50);
  g_assert_cmpfloat (y_max, ==, 2.0);
  g_assert_true (rlx_chart_series_get_point (s, 50, NULL, &y, NULL, NULL));
  g_assert_cmpfloat (y, ==, 2.0);
  g_assert_cmpint (rlx_chart_series_find_nearest (s, 49.4), ==, 49);
  g_assert_cmpint (rlx_chart_series_find_nearest (s, 1e9), ==, 50);
}

static void
test_nonfinite_and_smoothing (void)
{
  g_autoptr(RlxChartSeries) s = rlx_chart_series_new (0.95);
  double smooth, y_min, y_max;

  rlx_chart_series_append (s, 0, NAN, 0);
  rlx_chart_series_append (s, 1, INFINITY, 0);
  g_assert_cmpuint (rlx_chart_series_get_n_points (s), ==, 0);
  g_assert_cmpuint (rlx_chart_series_get_n_rejected (s), ==, 2);
  g_assert_false (rlx_chart_series_get_bounds (s, NULL, NULL, NULL, NULL, NULL));

  /* a constant is its own smoothed value from the first point on */
  for (guint i = 0; i < 10; i++)
    {
      rlx_chart_series_append (s, i, 2.5, i);
      g_assert_true (rlx_chart_series_get_point (s, i, NULL, NULL, &smooth, NULL));
      g_assert_cmpfloat_with_epsilon (smooth, 2.5, 1e-6);
    }
  /* and it follows a step down, lagging */
  for (guint i = 10; i < 200; i++)
    rlx_chart_series_append (s, i, 0.5, i);
  g_assert_true (rlx_chart_series_get_point (s, 11, NULL, NULL, &smooth, NULL));
  g_assert_cmpfloat (smooth, >, 1.5);
  g_assert_true (rlx_chart_series_get_point (s, 199, NULL, NULL, &smooth, NULL));
  g_assert_cmpfloat_with_epsilon (smooth, 0.5, 1e-3);
  g_assert_true (rlx_chart_series_get_bounds (s, NULL, NULL, &y_min, &y_max, NULL));
  g_assert_cmpfloat (y_min, ==, 0.5);
  g_assert_cmpfloat (y_max, ==, 2.5);
}

/* ── the widget ────────────────────────────────────────────────────────── */

typedef struct {
  RlxLossChart *chart;
  guint         draws;
  guint         plots;
} DrawWait;

static gboolean
drawn_more (gpointer data)
{
  DrawWait *w = data;
  RlxLossChartStats st;

  rlx_loss_chart_get_stats (w->chart, &st);
  return st.n_draws > w->draws;
}

static GtkWindow *
show_chart (RlxLossChart **chart_out)
{
  GtkWindow *window = GTK_WINDOW (gtk_window_new ());
  GtkWidget *chart = rlx_loss_chart_new ();

  gtk_window_set_default_size (window, 640, 360);
  gtk_window_set_child (window, chart);
  gtk_window_present (window);
  *chart_out = RLX_LOSS_CHART (chart);
  return window;
}

static void
test_redraws (void)
{
  RlxLossChart *chart;
  GtkWindow *window = show_chart (&chart);
  RlxLossChartStats st;
  DrawWait w = { chart, 0, 0 };

  g_assert_true (node_test_wait (drawn_more, &w, TIMEOUT_MS));   /* first frame */
  rlx_loss_chart_get_stats (chart, &st);
  g_assert_cmpuint (st.n_columns, ==, 0);                       /* nothing to plot yet */

  /* new points: a new frame rebuilds the plot */
  for (guint i = 0; i < 1000; i++)
    rlx_chart_series_append (rlx_loss_chart_get_loss (chart), i, 2.0 / (1 + i * 0.01), i * 1000);
  w.draws = st.n_draws;
  g_assert_true (node_test_wait (drawn_more, &w, TIMEOUT_MS));
  rlx_loss_chart_get_stats (chart, &st);
  g_assert_cmpuint (st.n_visited, ==, 1000);
  g_assert_cmpuint (st.n_columns, >, 100);
  w.plots = st.n_plots;

  /* moving the readout redraws */
  w.draws = st.n_draws;
  rlx_loss_chart_set_readout (chart, 500);
  g_assert_true (node_test_wait (drawn_more, &w, TIMEOUT_MS));
  {
    g_autofree char *text = rlx_loss_chart_dup_readout_text (chart);
    g_assert_nonnull (text);
    g_assert_nonnull (strstr (text, "Step 500"));
    g_assert_nonnull (strstr (text, "loss 0.3333"));   /* 2 / (1 + 5) */
    g_assert_nonnull (strstr (text, "0.5 s"));    /* 500 ms after the first point */
  }
  rlx_loss_chart_get_stats (chart, &st);
  w.plots = st.n_plots;

  /* one more point: the plot is rebuilt */
  w.draws = st.n_draws;
  rlx_chart_series_append (rlx_loss_chart_get_loss (chart), 1000, 0.1, 1000000);
  g_assert_true (node_test_wait (drawn_more, &w, TIMEOUT_MS));
  rlx_loss_chart_get_stats (chart, &st);
  g_assert_cmpuint (st.n_plots, >, w.plots);
  g_assert_cmpuint (st.n_visited, ==, 1001);

  gtk_window_destroy (window);
}

/* A frame that only moves the readout reuses the plot; new data, another
 * size or the log scale rebuild it. (Drawn directly: a shown window may
 * also be resized or restyled by the display server at any time.) */
static void
test_plot_cache (void)
{
  RlxLossChart *chart = RLX_LOSS_CHART (g_object_ref_sink (rlx_loss_chart_new ()));
  RlxLossChartStats st;

  for (guint i = 0; i < 5000; i++)
    rlx_chart_series_append (rlx_loss_chart_get_loss (chart), i, 1.0 + (i % 7) * 0.1, i);

#define DRAW(w, h) G_STMT_START {                                         \
    g_autoptr(GtkSnapshot) s_ = gtk_snapshot_new ();                      \
    g_autoptr(GskRenderNode) n_ = NULL;                                   \
    rlx_loss_chart_draw (chart, s_, (w), (h));                            \
    n_ = gtk_snapshot_free_to_node (g_steal_pointer (&s_));               \
    g_assert_nonnull (n_);                                                \
  } G_STMT_END

  DRAW (600, 300);
  rlx_loss_chart_get_stats (chart, &st);
  g_assert_cmpuint (st.n_plots, ==, 1);
  rlx_loss_chart_set_readout (chart, 1234);
  DRAW (600, 300);
  rlx_loss_chart_set_readout (chart, 4321);
  DRAW (600, 300);
  rlx_loss_chart_get_stats (chart, &st);
  g_assert_cmpuint (st.n_draws, ==, 3);
  g_assert_cmpuint (st.n_plots, ==, 1);
  rlx_chart_series_append (rlx_loss_chart_get_loss (chart), 5000, 0.5, 5000);
  DRAW (600, 300);
  rlx_loss_chart_get_stats (chart, &st);
  g_assert_cmpuint (st.n_plots, ==, 2);
  DRAW (700, 300);
  rlx_loss_chart_get_stats (chart, &st);
  g_assert_cmpuint (st.n_plots, ==, 3);
  rlx_loss_chart_set_log_scale (chart, TRUE);
  DRAW (700, 300);
  rlx_loss_chart_get_stats (chart, &st);
  g_assert_cmpuint (st.n_plots, ==, 4);
#undef DRAW
  g_object_unref (chart);
}

/* Render @chart at @w × @h into an image. */
static cairo_surface_t *
render (RlxLossChart *chart, int w, int h)
{
  g_autoptr(GtkSnapshot) snapshot = gtk_snapshot_new ();
  g_autoptr(GskRenderNode) node = NULL;
  cairo_surface_t *surface = cairo_image_surface_create (CAIRO_FORMAT_ARGB32, w, h);
  cairo_t *cr = cairo_create (surface);

  cairo_set_source_rgb (cr, 1, 1, 1);
  cairo_paint (cr);
  rlx_loss_chart_draw (chart, snapshot, w, h);
  node = gtk_snapshot_free_to_node (g_steal_pointer (&snapshot));
  g_assert_nonnull (node);
  gsk_render_node_draw (node, cr);
  cairo_destroy (cr);
  cairo_surface_flush (surface);
  return surface;
}

/* Is there a clearly blue pixel (the smoothed line) within ±@tol rows of
 * (@x, @y)? */
static gboolean
blue_near (cairo_surface_t *s, int x, double y, int tol)
{
  const guint8 *data = cairo_image_surface_get_data (s);
  int stride = cairo_image_surface_get_stride (s);
  int h = cairo_image_surface_get_height (s);

  for (int yy = (int) y - tol; yy <= (int) y + tol; yy++)
    {
      const guint8 *p;
      if (yy < 0 || yy >= h)
        continue;
      p = data + yy * stride + x * 4;       /* BGRA, premultiplied */
      if (p[0] > p[2] + 80 && p[0] > 120)
        return TRUE;
    }
  return FALSE;
}

static double
value_to_row (const graphene_rect_t *a, const RlxLossChartStats *st, double v)
{
  return a->origin.y + (1 - (v - st->y_lo) / (st->y_hi - st->y_lo)) * a->size.height;
}

/* 100,000 points, a level 2 then a level 1: the smoothed line is drawn at
 * those heights, from one column per pixel. */
static void
check_pixels (RlxLossChart *chart, gboolean want_cairo)
{
  cairo_surface_t *surface;
  RlxLossChartStats st;
  graphene_rect_t a;
  int x_left, x_right;

  adw_style_manager_set_color_scheme (adw_style_manager_get_default (),
                                      ADW_COLOR_SCHEME_FORCE_LIGHT);
  for (guint i = 0; i < 100000; i++)
    rlx_chart_series_append (rlx_loss_chart_get_loss (chart), i, i < 50000 ? 2.0 : 1.0, i);
  surface = render (chart, 800, 400);
  rlx_loss_chart_get_stats (chart, &st);
  rlx_loss_chart_get_plot_area (chart, &a);
  g_assert_cmpuint (st.n_visited, ==, 100000);
  g_assert_cmpuint (st.n_columns, ==, (guint) a.size.width);
  g_assert_cmpint (st.plot_cairo, ==, want_cairo);
  g_assert_cmpfloat (st.y_lo, <=, 1.0);
  g_assert_cmpfloat (st.y_hi, >=, 2.0);

  x_left = (int) (a.origin.x + a.size.width * 0.25);
  x_right = (int) (a.origin.x + a.size.width * 0.90);
  g_assert_true (blue_near (surface, x_left, value_to_row (&a, &st, 2.0), 3));
  g_assert_false (blue_near (surface, x_left, value_to_row (&a, &st, 1.0), 3));
  g_assert_true (blue_near (surface, x_right, value_to_row (&a, &st, 1.0), 3));
  g_assert_false (blue_near (surface, x_right, value_to_row (&a, &st, 2.0), 3));
  cairo_surface_destroy (surface);

  /* log scale: the axis spans the data in decades */
  rlx_loss_chart_set_log_scale (chart, TRUE);
  rlx_chart_series_append (rlx_loss_chart_get_loss (chart), 100000, 0.01, 100000);
  surface = render (chart, 800, 400);
  rlx_loss_chart_get_stats (chart, &st);
  g_assert_cmpfloat (st.y_lo, <=, 0.01);
  g_assert_cmpfloat (st.y_lo, >, 0.001);
  g_assert_cmpfloat (st.y_hi, >=, 2.0);
  g_assert_cmpfloat (st.y_hi, <, 20.0);
  cairo_surface_destroy (surface);
}

static void
test_pixels (void)
{
  RlxLossChart *chart = RLX_LOSS_CHART (g_object_ref_sink (rlx_loss_chart_new ()));

  check_pixels (chart, FALSE);
  g_object_unref (chart);
}

/* The same under GTK's cairo renderer, where the plot is shown from a cairo
 * node (GTK 4.8 converts a texture pixel by pixel at every render there). */
static void
test_pixels_cairo_renderer (void)
{
  GtkWindow *window = GTK_WINDOW (gtk_window_new ());
  GtkWidget *chart = rlx_loss_chart_new ();
  GskRenderer *renderer;

  gtk_window_set_child (window, chart);
  gtk_window_present (window);
  renderer = gtk_native_get_renderer (GTK_NATIVE (window));
  if (!GSK_IS_CAIRO_RENDERER (renderer))
    {
      g_test_skip ("not GTK's cairo renderer (GSK_RENDERER=cairo)");
      gtk_window_destroy (window);
      return;
    }
  check_pixels (RLX_LOSS_CHART (chart), TRUE);
  gtk_window_destroy (window);
}

static gboolean
style_pending (gpointer data)
{
  return FALSE;
}

/* Dark pixels left of the plot area: the y axis's tick labels. */
static guint
label_ink (cairo_surface_t *s, const graphene_rect_t *a)
{
  const guint8 *data = cairo_image_surface_get_data (s);
  int stride = cairo_image_surface_get_stride (s);
  guint n = 0;

  for (int y = (int) a->origin.y; y < (int) (a->origin.y + a->size.height); y++)
    for (int x = 0; x < (int) a->origin.x - 4; x++)
      if (data[y * stride + x * 4 + 2] < 200)
        n++;
  return n;
}

/* The plot's labels are shaped once and kept; a change of font still
 * shows at the next rebuild (the kept layouts follow the widget's Pango
 * context, which GTK updates). */
static void
test_labels_follow_font (void)
{
  GtkWindow *window = GTK_WINDOW (gtk_window_new ());
  RlxLossChart *chart = RLX_LOSS_CHART (rlx_loss_chart_new ());
  g_autoptr(GtkCssProvider) css = gtk_css_provider_new ();
  cairo_surface_t *surface;
  graphene_rect_t a;
  guint small, large;

  adw_style_manager_set_color_scheme (adw_style_manager_get_default (),
                                      ADW_COLOR_SCHEME_FORCE_LIGHT);
  gtk_window_set_child (window, GTK_WIDGET (chart));
  gtk_window_present (window);
  for (guint i = 0; i < 1000; i++)
    rlx_chart_series_append (rlx_loss_chart_get_loss (chart), i, 3.0 - i * 0.002, i);
  surface = render (chart, 600, 300);
  rlx_loss_chart_get_plot_area (chart, &a);
  small = label_ink (surface, &a);
  cairo_surface_destroy (surface);
  g_assert_cmpuint (small, >, 20);

  gtk_css_provider_load_from_data (css, "* { font-size: 22px; }", -1);
  gtk_style_context_add_provider_for_display (gdk_display_get_default (), GTK_STYLE_PROVIDER (css),
                                              GTK_STYLE_PROVIDER_PRIORITY_USER);
  node_test_wait (style_pending, NULL, 300);   /* the style applies */
  rlx_chart_series_append (rlx_loss_chart_get_loss (chart), 1000, 1.0, 1000);
  surface = render (chart, 600, 300);
  large = label_ink (surface, &a);
  cairo_surface_destroy (surface);
  g_test_message ("ink %u -> %u", small, large);
  g_assert_cmpuint (large, >, small * 3 / 2);

  gtk_style_context_remove_provider_for_display (gdk_display_get_default (),
                                                 GTK_STYLE_PROVIDER (css));
  gtk_window_destroy (window);
}

/* Accuracy goes on its own 0–100 % axis without moving the loss axis. */
static void
test_accuracy_axis (void)
{
  RlxLossChart *chart = RLX_LOSS_CHART (g_object_ref_sink (rlx_loss_chart_new ()));
  cairo_surface_t *surface;
  RlxLossChartStats st;

  for (guint i = 0; i < 100; i++)
    rlx_chart_series_append (rlx_loss_chart_get_loss (chart), i, 3.0 - i * 0.01, i);
  rlx_chart_series_append (rlx_loss_chart_get_accuracy (chart), 50, 0.97, 50);
  surface = render (chart, 600, 300);
  rlx_loss_chart_get_stats (chart, &st);
  g_assert_cmpfloat (st.y_hi, <, 3.5);
  g_assert_cmpfloat (st.y_lo, >, 1.5);
  cairo_surface_destroy (surface);
  g_object_unref (chart);
}

/* TensorBoard's smoothing, written out here as its scalar dashboard does
 * it: last = last·w + (1 - w)·y, shown as last / (1 - w^k). */
static double
tensorboard_smoothed (const double *y, guint k, double w)
{
  double last = 0;

  for (guint i = 0; i <= k; i++)
    last = last * w + (1 - w) * y[i];
  return w > 0 ? last / (1 - pow (w, k + 1)) : last;
}

/* The smoothing control smooths every point again, TensorBoard's way, and
 * the drawn line follows: right after a drop, heavy smoothing keeps the
 * line high, none puts it on the raw values. */
static void
test_smoothing_control (void)
{
  RlxLossChart *chart = RLX_LOSS_CHART (g_object_ref_sink (rlx_loss_chart_new ()));
  RlxChartSeries *loss = rlx_loss_chart_get_loss (chart);
  const double weights[] = { 0.6, 0.0, 0.9, 0.99 };
  double y[400], smooth;
  cairo_surface_t *surface;
  RlxLossChartStats st;
  graphene_rect_t a;
  guint64 gen;
  int x_after;

  for (guint i = 0; i < G_N_ELEMENTS (y); i++)
    {
      y[i] = (i < 200 ? 2.0 : 1.0) + 0.25 * sin (i * 0.7);
      rlx_chart_series_append (loss, i, y[i], i * 1000);
    }
  for (guint w = 0; w < G_N_ELEMENTS (weights); w++)
    {
      gen = rlx_chart_series_get_generation (loss);
      g_object_set (chart, "smoothing", weights[w], NULL);
      g_assert_cmpfloat (rlx_loss_chart_get_smoothing (chart), ==, weights[w]);
      g_assert_cmpuint (rlx_chart_series_get_generation (loss), >, gen);   /* redrawn */
      for (guint k = 0; k < G_N_ELEMENTS (y); k++)
        {
          g_assert_true (rlx_chart_series_get_point (loss, k, NULL, NULL, &smooth, NULL));
          g_assert_cmpfloat_with_epsilon (smooth, tensorboard_smoothed (y, k, weights[w]), 1e-4);
        }
    }
  /* a point appended later is smoothed with the weight in force */
  rlx_chart_series_append (loss, 400, 1.0, 400000);
  g_assert_true (rlx_chart_series_get_point (loss, 400, NULL, NULL, &smooth, NULL));
  {
    double prev;
    rlx_chart_series_get_point (loss, 399, NULL, NULL, &prev, NULL);
    /* debiased: s_k = (w·(1 - w^k)·s_(k-1) + (1 - w)·y_k) / (1 - w^(k+1)) */
    g_assert_cmpfloat_with_epsilon (smooth, (0.99 * (1 - pow (0.99, 400)) * prev + 0.01 * 1.0)
                                            / (1 - pow (0.99, 401)), 1e-4);
  }

  /* drawn: just after the drop, 0.99 keeps the line near 2, 0 puts it at 1 */
  adw_style_manager_set_color_scheme (adw_style_manager_get_default (),
                                      ADW_COLOR_SCHEME_FORCE_LIGHT);
  surface = render (chart, 800, 400);
  rlx_loss_chart_get_stats (chart, &st);
  rlx_loss_chart_get_plot_area (chart, &a);
  x_after = (int) (a.origin.x + a.size.width * 205 / 400.0);
  g_assert_cmpuint (st.n_plots, ==, 1);
  g_assert_false (blue_near (surface, x_after, value_to_row (&a, &st, 1.0 + 0.25 * sin (205 * 0.7)), 2));
  cairo_surface_destroy (surface);
  rlx_loss_chart_set_smoothing (chart, 0);
  surface = render (chart, 800, 400);
  rlx_loss_chart_get_stats (chart, &st);
  g_assert_cmpuint (st.n_plots, ==, 2);
  g_assert_true (blue_near (surface, x_after, value_to_row (&a, &st, 1.0 + 0.25 * sin (205 * 0.7)), 3));
  cairo_surface_destroy (surface);
  g_object_unref (chart);
}

/* Axis ticks: one label form per step axis (never "8000, 10.0k"), minor
 * ticks and enough labels on a log axis, a clock on a time axis. */
static void
test_ticks (void)
{
  RlxAxisTick t[RLX_AXIS_MAX_TICKS];
  guint n, labelled = 0, minor = 0;

  n = rlx_axis_step_ticks (0, 10500, 8, t);
  g_assert_cmpuint (n, >=, 4);
  for (guint i = 0; i < n; i++)
    if (t[i].value != 0)
      {
        g_assert_true (g_str_has_suffix (t[i].label, "k"));
        g_assert_null (strchr (t[i].label, '.'));          /* 2k, 4k … 10k */
      }
  n = rlx_axis_step_ticks (10000, 12000, 5, t);          /* 10k, 10.5k, 11k … */
  for (guint i = 0; i < n; i++)
    g_assert_nonnull (strstr (t[i].label, "."));         /* the same decimals on all */
  n = rlx_axis_step_ticks (0, 900, 5, t);
  for (guint i = 0; i < n; i++)
    g_assert_cmpint (atoi (t[i].label), ==, (int) t[i].value);

  /* a loss between 0.3 and 2.3 on a 200 px log axis */
  n = rlx_axis_log_ticks (log10 (0.3), log10 (2.3), 200, 18, t);
  for (guint i = 0; i < n; i++)
    {
      labelled += t[i].label[0] != '\0';
      minor += !t[i].major;
      g_assert_cmpfloat (t[i].value, >=, 0.3 - 1e-9);
      g_assert_cmpfloat (t[i].value, <=, 2.3 + 1e-9);
    }
  g_assert_cmpuint (labelled, >=, 4);
  g_assert_cmpuint (minor, >=, 1);
  g_assert_cmpuint (n, ==, 9);                           /* 0.3, 0.4 … 0.9, 1, 2 */

  /* five minutes of wall clock: clock labels */
  n = rlx_axis_clock_ticks (1.7e9, 1.7e9 + 300, 6, t);
  g_assert_cmpuint (n, >=, 3);
  for (guint i = 0; i < n; i++)
    g_assert_true (g_regex_match_simple ("^[0-2][0-9]:[0-5][0-9]$", t[i].label, 0, 0));
}

static void
on_exported (GObject *source, GAsyncResult *result, gpointer data)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (rlx_chart_export_csv_finish (result, &error));
  g_assert_no_error (error);
  *(gboolean *) data = TRUE;
}

static gboolean
is_true (gpointer data)
{
  return *(gboolean *) data;
}

/* CSV export writes one row per step, the accuracy beside its step's loss. */
static void
test_export_csv (void)
{
  RlxLossChart *chart = RLX_LOSS_CHART (g_object_ref_sink (rlx_loss_chart_new ()));
  g_autofree char *path = g_build_filename (g_get_tmp_dir (), "rlx-test-chart.csv", NULL);
  g_autoptr(GFile) file = g_file_new_for_path (path);
  g_autofree char *text = NULL;
  g_auto(GStrv) lines = NULL;
  gboolean done = FALSE;

  for (guint i = 1; i <= 1000; i++)
    rlx_chart_series_append (rlx_loss_chart_get_loss (chart), i, 1.0 / i, 1000000 + i * 1000);
  rlx_chart_series_append (rlx_loss_chart_get_accuracy (chart), 500, 0.75, 1500000);
  rlx_chart_export_csv_async (chart, file, NULL, on_exported, &done);
  g_assert_true (node_test_wait (is_true, &done, TIMEOUT_MS));
  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  lines = g_strsplit (text, "\n", -1);
  g_assert_cmpstr (lines[0], ==, "step,time,loss,smoothed_loss,test_accuracy");
  g_assert_cmpuint (g_strv_length (lines), ==, 1 + 1000 + 1);   /* and the last newline */
  g_assert_true (g_str_has_prefix (lines[1], "1,"));
  g_assert_true (g_str_has_suffix (lines[1], ","));              /* no accuracy there */
  g_assert_true (g_str_has_prefix (lines[500], "500,"));
  g_assert_true (g_str_has_suffix (lines[500], ",0.75"));
  g_assert_nonnull (strstr (lines[4], ",0.25,"));                /* loss 1/4 */
  g_unlink (path);
  g_object_unref (chart);
}

int
main (int argc, char **argv)
{
  int status;

  node_test_init ();
  gtk_test_init (&argc, &argv, NULL);
  adw_init ();
  g_test_add_func ("/app/chart/decimate-100k", test_decimate_100k);
  g_test_add_func ("/app/chart/decimate-blocks", test_decimate_blocks);
  g_test_add_func ("/app/chart/raster", test_raster);
  g_test_add_func ("/app/chart/rewind", test_rewind);
  g_test_add_func ("/app/chart/nonfinite-and-smoothing", test_nonfinite_and_smoothing);
  g_test_add_func ("/app/chart/redraws", test_redraws);
  g_test_add_func ("/app/chart/plot-cache", test_plot_cache);
  g_test_add_func ("/app/chart/pixels", test_pixels);
  g_test_add_func ("/app/chart/pixels-cairo-renderer", test_pixels_cairo_renderer);
  g_test_add_func ("/app/chart/labels-follow-font", test_labels_follow_font);
  g_test_add_func ("/app/chart/accuracy-axis", test_accuracy_axis);
  g_test_add_func ("/app/chart/smoothing-control", test_smoothing_control);
  g_test_add_func ("/app/chart/ticks", test_ticks);
  g_test_add_func ("/app/chart/export-csv", test_export_csv);
  status = g_test_run ();
  node_test_cleanup ();
  return status;
}
