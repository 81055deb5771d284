/* rlx-loss-chart.c — the loss chart widget (see the header)
 *
 * A frame is two layers: the plot (grid, tick labels, curves, legend),
 * rebuilt only when the data, the size, the scale or the style changed and
 * kept as a GskRenderNode otherwise; and the readout (a line, a dot and a
 * label), drawn on top every frame it is shown, with the timeline's marks
 * (a thin line per membership or leader change).
 *
 * (Just over 1,000 lines: the plot's cache, the readout and the marks share
 * the axis state kept here; the axes' arithmetic is rlx-chart-axis.c, the
 * data rlx-chart-series.c, the CSV export rlx-chart-export.c.)
 */
#include "rlx-config.h"
#include "rlx-loss-chart.h"
#include "rlx-chart-axis.h"
#include "rlx-chart-raster.h"

#include <adwaita.h>
#include <glib/gi18n.h>
#include <math.h>

#define MAX_COLUMNS     4096
#define MARGIN_TOP      28.0    /* room for the legend */
#define MARGIN_BOTTOM   42.0    /* tick labels and the axis title */
#define MARGIN_LEFT     58.0
#define MARGIN_RIGHT    46.0
#define A11Y_INTERVAL_US G_USEC_PER_SEC

struct _RlxLossChart
{
  GtkWidget       parent_instance;

  RlxChartSeries *loss;
  RlxChartSeries *accuracy;
  gboolean        log_scale;
  gboolean        time_axis;                /* x: wall-clock time, not steps */
  guint           min_redraw_ms;

  /* the plot, kept between frames: an image, shown by a cairo node under
   * GTK's cairo renderer and by a texture otherwise */
  GskRenderNode  *plot;
  cairo_surface_t *plot_surface;            /* the image self->plot shows */
  cairo_surface_t *spare_surface;           /* the one before, drawn into again when
                                             * no node holds it any more */
  gboolean        plot_cairo;               /* self->plot is a cairo node */
  int             plot_width, plot_height;
  guint64         plot_loss_gen, plot_acc_gen;
  gboolean        plot_log, plot_dark, plot_time;
  GdkRGBA         plot_fg;                  /* the style's colour it was drawn with */
  double          x_lo, x_hi, y_lo, y_hi;   /* axis ranges (y in log10 when log; x in
                                             * monotonic seconds on a time axis) */
  gint64          mono_to_real_us;          /* wall clock = monotonic + this */
  graphene_rect_t area;                     /* the plot area inside the widget */
  RlxChartColumn *cols;

  /* redraw throttling */
  gint64          last_draw_us;
  guint           redraw_id;
  guint           a11y_id;
  gint64          last_a11y_us;

  int             readout;                  /* loss point index, -1: none */

  RlxLossChartStats stats;
  double         *line_x, *line_y;          /* the curves' vertices, per column */
  GHashTable     *texts;                    /* text → PangoLayout: the plot's labels,
                                             * shaped once (they recur from one
                                             * rebuild to the next) */
  GArray           *marks;                  /* double: steps of membership changes */
};

G_DEFINE_FINAL_TYPE (RlxLossChart, rlx_loss_chart, GTK_TYPE_WIDGET)

enum { PROP_0, PROP_LOG_SCALE, PROP_MIN_REDRAW_MS, PROP_SMOOTHING, PROP_TIME_AXIS, N_PROPS };
static GParamSpec *props[N_PROPS];

/* ── colours ───────────────────────────────────────────────────────────── */

typedef struct {
  GdkRGBA fg, grid, raw, smooth, accuracy, dim, readout_bg;
} Palette;

static void
get_palette (RlxLossChart *self, Palette *p)
{
  gboolean dark = adw_style_manager_get_dark (adw_style_manager_get_default ());
  GdkRGBA fg;

  G_GNUC_BEGIN_IGNORE_DEPRECATIONS
  gtk_style_context_get_color (gtk_widget_get_style_context (GTK_WIDGET (self)), &fg);
  G_GNUC_END_IGNORE_DEPRECATIONS
  p->fg = fg;
  p->grid = fg;
  p->grid.alpha = 0.12f;
  p->dim = fg;
  p->dim.alpha = 0.6f;
  p->raw = fg;
  p->raw.alpha = 0.28f;
  gdk_rgba_parse (&p->smooth, dark ? "#78aeed" : "#1c71d8");
  gdk_rgba_parse (&p->accuracy, dark ? "#8ff0a4" : "#26a269");
  gdk_rgba_parse (&p->readout_bg, dark ? "rgba(36,36,36,0.94)" : "rgba(255,255,255,0.95)");
}

static void
cairo_set_rgba (cairo_t *cr, const GdkRGBA *c)
{
  cairo_set_source_rgba (cr, c->red, c->green, c->blue, c->alpha);
}

/* ── axes ──────────────────────────────────────────────────────────────── */

static char *
format_elapsed (double seconds)
{
  if (seconds < 60)
    /* Translators: elapsed time in seconds, e.g. "12.5 s" */
    return g_strdup_printf (_("%.1f s"), seconds);
  if (seconds < 3600)
    /* Translators: elapsed time, e.g. "3 min 05 s" */
    return g_strdup_printf (_("%d min %02d s"), (int) seconds / 60, (int) seconds % 60);
  /* Translators: elapsed time, e.g. "2 h 05 min" */
  return g_strdup_printf (_("%d h %02d min"), (int) seconds / 3600, ((int) seconds / 60) % 60);
}

static double
map_x (RlxLossChart *self, double x)
{
  double span = self->x_hi - self->x_lo;
  return self->area.origin.x + (span > 0 ? (x - self->x_lo) / span : 0.5) * self->area.size.width;
}

/* A point's x on the current axis: its step, or its time in seconds. */
static double
point_x (RlxLossChart *self, double step, gint64 time_us)
{
  return self->time_axis ? time_us / 1e6 : step;
}

static double
map_y (RlxLossChart *self, double y)
{
  double span = self->y_hi - self->y_lo, v;

  if (self->log_scale)
    y = y > 0 ? log10 (y) : self->y_lo;
  v = span > 0 ? (y - self->y_lo) / span : 0.5;
  return self->area.origin.y + (1 - v) * self->area.size.height;
}

static double
map_accuracy (RlxLossChart *self, double a)
{
  return self->area.origin.y + (1 - CLAMP (a, 0, 1)) * self->area.size.height;
}

static void
append_text (GtkSnapshot *snapshot, PangoLayout *layout, const char *text, double x, double y,
             double x_align, double y_align, const GdkRGBA *color)
{
  int w, h;

  pango_layout_set_text (layout, text, -1);
  pango_layout_get_pixel_size (layout, &w, &h);
  gtk_snapshot_save (snapshot);
  gtk_snapshot_translate (snapshot, &GRAPHENE_POINT_INIT (floor (x - x_align * w),
                                                          floor (y - y_align * h)));
  gtk_snapshot_append_layout (snapshot, layout, color);
  gtk_snapshot_restore (snapshot);
}

/* ── the plot ──────────────────────────────────────────────────────────── */
/*
 * The plot is rasterised once into an image (cairo, and the loss curves by
 * rlx-chart-raster.c), then shown as is: a frame that only moves the readout
 * blits it instead of re-stroking a few thousand path segments.
 *
 * How it is shown depends on the renderer (rlx_raster_image_node): a
 * texture suits the GL renderer (uploaded once); under GTK 4.8's cairo
 * renderer a texture cost 30% of the UI thread while watching a cohort (a
 * float conversion of every pixel at every render), so there it is a cairo
 * node.
 * Two images take turns, so a rebuild draws into memory already mapped
 * (a new 2 MB image faulted in its pages every time).
 */

/* The layout of @text, kept: made on the widget's own Pango context, which
 * GTK updates on a change of font or scale, and a layout notices its
 * context's changes by itself. The tick labels change as the axes grow, so
 * the cache starts again once it holds many. */
static PangoLayout *
text_layout (RlxLossChart *self, const char *text)
{
  PangoLayout *layout = g_hash_table_lookup (self->texts, text);

  if (layout == NULL)
    {
      if (g_hash_table_size (self->texts) >= 256)
        g_hash_table_remove_all (self->texts);
      layout = pango_layout_new (gtk_widget_get_pango_context (GTK_WIDGET (self)));
      pango_layout_set_text (layout, text, -1);
      g_hash_table_insert (self->texts, g_strdup (text), layout);
    }
  return layout;
}

static void
cr_text (RlxLossChart *self, cairo_t *cr, const char *text, double x, double y,
         double x_align, double y_align, const GdkRGBA *color)
{
  PangoLayout *layout = text_layout (self, text);
  int w, h;

  pango_layout_get_pixel_size (layout, &w, &h);
  cairo_move_to (cr, floor (x - x_align * w), floor (y - y_align * h));
  cairo_set_rgba (cr, color);
  pango_cairo_show_layout (cr, layout);
}

static void
cr_rect (cairo_t *cr, double x, double y, double w, double h, const GdkRGBA *color)
{
  cairo_set_rgba (cr, color);
  cairo_rectangle (cr, x, y, w, h);
  cairo_fill (cr);
}

static void
cr_hline (cairo_t *cr, const graphene_rect_t *area, double y, const GdkRGBA *c)
{
  cr_rect (cr, area->origin.x, floor (y), area->size.width, 1, c);
}

/* Axis ranges from the data (called with the plot area set). */
static void
compute_ranges (RlxLossChart *self, guint n_cols)
{
  double x0, x1, y0, y1, y_pos;

  if (!rlx_chart_series_get_bounds (self->loss, &x0, &x1, &y0, &y1, &y_pos))
    {
      x0 = 0, x1 = 1, y0 = 0, y1 = 1, y_pos = 0.1;
    }
  if (self->time_axis)
    {
      gint64 t0 = 0, t1 = 0;
      rlx_chart_series_get_time_bounds (self->loss, &t0, &t1);
      x0 = t0 / 1e6;
      x1 = MAX (t1 / 1e6, x0 + 1);
    }
  if (x1 - x0 < 1)
    x1 = x0 + 1;
  self->x_lo = x0;
  self->x_hi = x1;

  if (self->log_scale)
    {
      double lo = y_pos > 0 ? log10 (y_pos) : -1, hi = y1 > 0 ? log10 (y1) : lo + 1;
      double pad;
      if (hi - lo < 0.1)
        {
          lo -= 0.05;
          hi += 0.05;
        }
      pad = 0.04 * (hi - lo);
      self->y_lo = lo - pad;
      self->y_hi = hi + pad;
    }
  else
    {
      double pad;
      if (y1 - y0 < 1e-6)
        {
          y0 -= 0.5 * MAX (fabs (y0) * 0.1, 1e-3);
          y1 += 0.5 * MAX (fabs (y1) * 0.1, 1e-3);
        }
      pad = 0.05 * (y1 - y0);
      self->y_lo = y0 >= 0 ? MAX (0, y0 - pad) : y0 - pad;
      self->y_hi = y1 + pad;
    }
}

static void
draw_grid_and_labels (RlxLossChart *self, cairo_t *cr, const Palette *pal,
                      gboolean have_accuracy)
{
  const graphene_rect_t *a = &self->area;
  RlxAxisTick ticks[RLX_AXIS_MAX_TICKS];
  double offset_s = self->mono_to_real_us / 1e6;
  guint n;
  GdkRGBA minor = pal->grid;
  const char *title;

  /* y: every m × 10^d on a log axis (the minor ones fainter, labelled as
   * densely as the height allows), nice steps otherwise */
  minor.alpha *= 0.5f;
  if (self->log_scale)
    n = rlx_axis_log_ticks (self->y_lo, self->y_hi, a->size.height, 18, ticks);
  else
    n = rlx_axis_linear_ticks (self->y_lo, self->y_hi, MAX (2, (int) (a->size.height / 40)), ticks);
  for (guint i = 0; i < n; i++)
    {
      double y = map_y (self, ticks[i].value);
      cr_hline (cr, a, y, ticks[i].major ? &pal->grid : &minor);
      if (ticks[i].label[0])
        cr_text (self, cr, ticks[i].label, a->origin.x - 6, y, 1, 0.5, &pal->dim);
    }

  /* x: steps in one form ("8k, 10k"), or the clock */
  if (self->time_axis)
    {
      n = rlx_axis_clock_ticks (self->x_lo + offset_s, self->x_hi + offset_s,
                                MAX (2, (int) (a->size.width / 90)), ticks);
      for (guint i = 0; i < n; i++)
        ticks[i].value -= offset_s;
      /* Translators: the loss chart's x axis title on a wall-clock axis */
      title = _("Time");
    }
  else
    {
      n = rlx_axis_step_ticks (self->x_lo, self->x_hi, MAX (2, (int) (a->size.width / 90)), ticks);
      /* Translators: the loss chart's x axis title */
      title = _("Step");
    }
  for (guint i = 0; i < n; i++)
    {
      double x = map_x (self, ticks[i].value);
      cr_rect (cr, floor (x), a->origin.y, 1, a->size.height, &pal->grid);
      cr_text (self, cr, ticks[i].label, x, a->origin.y + a->size.height + 4, 0.5, 0, &pal->dim);
    }
  cr_text (self, cr, title, a->origin.x + a->size.width / 2, a->origin.y + a->size.height + 22,
           0.5, 0, &pal->dim);

  /* accuracy: 0–100 % on the right */
  if (have_accuracy)
    for (int pct = 0; pct <= 100; pct += 25)
      {
        g_autofree char *label = g_strdup_printf ("%d%%", pct);
        cr_text (self, cr, label, a->origin.x + a->size.width + 6,
                 map_accuracy (self, pct / 100.0), 0, 0.5, &pal->accuracy);
      }
}

static void
draw_legend (RlxLossChart *self, cairo_t *cr, const Palette *pal,
             gboolean have_accuracy)
{
  struct { const char *label; const GdkRGBA *color; } items[] = {
    { _("Loss"), &pal->raw },
    { _("Smoothed"), &pal->smooth },
    { _("Test accuracy"), &pal->accuracy },
  };
  double x = self->area.origin.x + self->area.size.width;
  guint n = have_accuracy ? 3 : 2;

  /* right to left */
  for (int i = (int) n - 1; i >= 0; i--)
    {
      int w, h;
      GdkRGBA c = *items[i].color;
      pango_layout_get_pixel_size (text_layout (self, items[i].label), &w, &h);
      x -= w;
      cr_text (self, cr, items[i].label, x, 6, 0, 0, &pal->dim);
      c.alpha = MAX (c.alpha, 0.6f);
      cr_rect (cr, x - 20, floor (6 + h / 2.0 - 1.5), 14, 3, &c);
      x -= 20 + 14;
    }
}

/* The loss curves, one vertex per non-empty pixel column, straight into
 * @img (device pixels: @scale per unit). */
static void
draw_loss_curves (RlxLossChart *self, const RlxRasterImage *img, int scale, const Palette *pal,
                  guint n_cols)
{
  const graphene_rect_t *a = &self->area;
  cairo_rectangle_int_t clip = {
    (int) floor ((a->origin.x - 2) * scale), (int) floor ((a->origin.y - 2) * scale),
    (int) ceil ((a->size.width + 4) * scale), (int) ceil ((a->size.height + 4) * scale),
  };
  guint n = 0;

  /* raw loss, thinned to one point per pixel column (its last) and faded
   * behind the smoothed line: with many points per column, the whole
   * spread drew a grey band */
  for (guint c = 0; c < n_cols; c++)
    {
      const RlxChartColumn *col = &self->cols[c];
      if (col->n == 0)
        continue;
      self->line_x[n] = (a->origin.x + c + 0.5) * scale;
      self->line_y[n] = map_y (self, col->y_last) * scale;
      n++;
    }
  rlx_raster_polyline (img, &clip, self->line_x, self->line_y, n, 1.0 * scale, FALSE, &pal->raw);

  /* smoothed loss */
  n = 0;
  for (guint c = 0; c < n_cols; c++)
    {
      const RlxChartColumn *col = &self->cols[c];
      if (col->n == 0)
        continue;
      self->line_y[n++] = map_y (self, col->smooth) * scale;
    }
  rlx_raster_polyline (img, &clip, self->line_x, self->line_y, n, 2.0 * scale, TRUE, &pal->smooth);
}

static void
draw_accuracy (RlxLossChart *self, cairo_t *cr, const Palette *pal)
{
  const graphene_rect_t *a = &self->area;
  guint n_acc;

  cairo_save (cr);
  cairo_rectangle (cr, a->origin.x - 2, a->origin.y - 2, a->size.width + 4, a->size.height + 4);
  cairo_clip (cr);
  cairo_set_line_join (cr, CAIRO_LINE_JOIN_BEVEL);

  /* test accuracy: few points, each marked */
  n_acc = rlx_chart_series_get_n_points (self->accuracy);
  if (n_acc > 0)
    {
      double x, y;
      gint64 t;
      guint stride = MAX (1, n_acc / MAX (1, (guint) a->size.width / 4));
      for (guint i = 0; i < n_acc; i += stride)
        {
          rlx_chart_series_get_point (self->accuracy, i, &x, &y, NULL, &t);
          if (i == 0)
            cairo_move_to (cr, map_x (self, point_x (self, x, t)), map_accuracy (self, y));
          else
            cairo_line_to (cr, map_x (self, point_x (self, x, t)), map_accuracy (self, y));
        }
      cairo_set_rgba (cr, &pal->accuracy);
      cairo_set_line_width (cr, 1.5);
      cairo_stroke (cr);
      /* the dots in one fill (one each cost more than the rest of the plot) */
      if (n_acc <= 200)
        {
          for (guint i = 0; i < n_acc; i++)
            {
              rlx_chart_series_get_point (self->accuracy, i, &x, &y, NULL, &t);
              cairo_new_sub_path (cr);
              cairo_arc (cr, map_x (self, point_x (self, x, t)), map_accuracy (self, y), 2.5, 0,
                         2 * G_PI);
            }
          cairo_fill (cr);
        }
    }
  cairo_restore (cr);
}

/* An image of @w × @h device pixels to draw the plot into, cleared: the
 * spare one when nothing shows it any more (no node holds it), else new. */
static cairo_surface_t *
take_surface (RlxLossChart *self, int w, int h)
{
  cairo_surface_t *s = g_steal_pointer (&self->spare_surface);

  if (s && cairo_surface_get_reference_count (s) == 1 &&
      cairo_image_surface_get_width (s) == w && cairo_image_surface_get_height (s) == h)
    {
      cairo_t *cr = cairo_create (s);
      cairo_set_operator (cr, CAIRO_OPERATOR_CLEAR);
      cairo_paint (cr);
      cairo_destroy (cr);
      return s;
    }
  g_clear_pointer (&s, cairo_surface_destroy);
  return cairo_image_surface_create (CAIRO_FORMAT_ARGB32, w, h);
}

static gboolean
uses_cairo_renderer (RlxLossChart *self)
{
  GtkNative *native = gtk_widget_get_native (GTK_WIDGET (self));
  GskRenderer *renderer = native ? gtk_native_get_renderer (native) : NULL;

  return renderer != NULL && GSK_IS_CAIRO_RENDERER (renderer);
}

static GskRenderNode *
build_plot (RlxLossChart *self, int width, int height, gboolean as_cairo)
{
  gboolean have_accuracy = rlx_chart_series_get_n_points (self->accuracy) > 0;
  int scale = MAX (1, gtk_widget_get_scale_factor (GTK_WIDGET (self)));
  gint64 t0 = g_get_monotonic_time ();
  cairo_surface_t *surface;
  GskRenderNode *node;
  cairo_t *cr;
  Palette pal;
  guint n_cols;

  get_palette (self, &pal);
  self->area = GRAPHENE_RECT_INIT (MARGIN_LEFT, MARGIN_TOP,
                                   MAX (1, width - MARGIN_LEFT - MARGIN_RIGHT),
                                   MAX (1, height - MARGIN_TOP - MARGIN_BOTTOM));
  n_cols = MIN (MAX_COLUMNS, (guint) self->area.size.width);

  surface = take_surface (self, width * scale, height * scale);
  cairo_surface_set_device_scale (surface, scale, scale);
  cr = cairo_create (surface);
  if (rlx_chart_series_get_n_points (self->loss) == 0)
    {
      cr_text (self, cr, _("The loss appears here once the cohort commits its first step"),
               width / 2.0, height / 2.0, 0.5, 0.5, &pal.dim);
      self->stats.n_columns = 0;
      self->stats.n_visited = 0;
    }
  else
    {
      RlxRasterImage img;

      compute_ranges (self, n_cols);
      self->mono_to_real_us = g_get_real_time () - g_get_monotonic_time ();
      self->stats.n_visited = self->time_axis
        ? rlx_chart_series_decimate_time (self->loss, (gint64) (self->x_lo * 1e6),
                                          (gint64) (self->x_hi * 1e6), n_cols, self->cols)
        : rlx_chart_series_decimate (self->loss, self->x_lo, self->x_hi, n_cols, self->cols);
      self->stats.n_columns = n_cols;
      self->stats.y_lo = self->log_scale ? pow (10, self->y_lo) : self->y_lo;
      self->stats.y_hi = self->log_scale ? pow (10, self->y_hi) : self->y_hi;
      draw_grid_and_labels (self, cr, &pal, have_accuracy);
      /* the curves go straight into the pixels, between cairo's drawing */
      cairo_surface_flush (surface);
      img.data = cairo_image_surface_get_data (surface);
      img.stride = cairo_image_surface_get_stride (surface);
      img.width = width * scale;
      img.height = height * scale;
      draw_loss_curves (self, &img, scale, &pal, n_cols);
      cairo_surface_mark_dirty (surface);
      draw_accuracy (self, cr, &pal);
      draw_legend (self, cr, &pal, have_accuracy);
    }
  cairo_destroy (cr);
  cairo_surface_flush (surface);

  node = rlx_raster_image_node (surface, width, height, scale, as_cairo);
  /* the image shown until now becomes the spare */
  g_clear_pointer (&self->spare_surface, cairo_surface_destroy);
  self->spare_surface = g_steal_pointer (&self->plot_surface);
  self->plot_surface = surface;
  self->stats.plot_us = g_get_monotonic_time () - t0;
  return node;
}

/* ── the readout ───────────────────────────────────────────────────────── */

char *
rlx_loss_chart_dup_readout_text (RlxLossChart *self)
{
  double x, y, smooth;
  gint64 t, t0;

  g_return_val_if_fail (RLX_IS_LOSS_CHART (self), NULL);
  if (self->readout < 0 ||
      !rlx_chart_series_get_point (self->loss, (guint) self->readout, &x, &y, &smooth, &t) ||
      !rlx_chart_series_get_point (self->loss, 0, NULL, NULL, NULL, &t0))
    return NULL;
  {
    g_autofree char *elapsed = format_elapsed ((t - t0) / 1e6);
    /* Translators: the chart's readout: step, loss, smoothed loss, time since the first step */
    return g_strdup_printf (_("Step %.0f · loss %.4f · smoothed %.4f · %s"), x, y, smooth,
                            elapsed);
  }
}

static void
draw_readout (RlxLossChart *self, GtkSnapshot *snapshot, int width, int height)
{
  g_autoptr(PangoLayout) layout = NULL;
  g_autofree char *text = rlx_loss_chart_dup_readout_text (self);
  double x, y, smooth, px, py, bx, by;
  gint64 t;
  int w, h;
  Palette pal;

  if (text == NULL || self->plot == NULL)
    return;
  rlx_chart_series_get_point (self->loss, (guint) self->readout, &x, &y, &smooth, &t);
  get_palette (self, &pal);
  px = map_x (self, point_x (self, x, t));
  py = map_y (self, smooth);
  gtk_snapshot_append_color (snapshot, &pal.dim,
                             &GRAPHENE_RECT_INIT (floor (px), self->area.origin.y, 1,
                                                  self->area.size.height));
  {
    GskRoundedRect dot;
    gsk_rounded_rect_init_from_rect (&dot, &GRAPHENE_RECT_INIT (px - 4, py - 4, 8, 8), 4);
    gtk_snapshot_push_rounded_clip (snapshot, &dot);
    gtk_snapshot_append_color (snapshot, &pal.smooth, &dot.bounds);
    gtk_snapshot_pop (snapshot);
  }

  layout = gtk_widget_create_pango_layout (GTK_WIDGET (self), text);
  pango_layout_get_pixel_size (layout, &w, &h);
  bx = px + 10;
  if (bx + w + 12 > width)
    bx = px - 10 - w - 12;
  bx = MAX (0, bx);
  by = CLAMP (py - h - 18, 0, MAX (0, height - h - 8));
  {
    GskRoundedRect box;
    GdkRGBA border = pal.fg;
    border.alpha = 0.15f;
    gsk_rounded_rect_init_from_rect (&box, &GRAPHENE_RECT_INIT (bx, by, w + 12, h + 8), 6);
    gtk_snapshot_push_rounded_clip (snapshot, &box);
    gtk_snapshot_append_color (snapshot, &pal.readout_bg, &box.bounds);
    gtk_snapshot_pop (snapshot);
    gtk_snapshot_append_border (snapshot, &box, (float[4]) { 1, 1, 1, 1 },
                                (GdkRGBA[4]) { border, border, border, border });
  }
  append_text (snapshot, layout, text, bx + 6, by + 4, 0, 0, &pal.fg);
}

/* ── drawing ───────────────────────────────────────────────────────────── */

void
rlx_loss_chart_draw (RlxLossChart *self, GtkSnapshot *snapshot, int width, int height)
{
  gboolean dark = adw_style_manager_get_dark (adw_style_manager_get_default ());
  Palette pal;

  g_return_if_fail (RLX_IS_LOSS_CHART (self));

  /* only a change of colour matters (not of focus or backdrop) */
  get_palette (self, &pal);

  self->stats.n_draws++;
  self->last_draw_us = g_get_monotonic_time ();
  if (width <= 0 || height <= 0)
    return;
  gboolean as_cairo = uses_cairo_renderer (self);

  if (self->plot == NULL || self->plot_width != width || self->plot_height != height ||
      self->plot_cairo != as_cairo ||
      self->plot_loss_gen != rlx_chart_series_get_generation (self->loss) ||
      self->plot_acc_gen != rlx_chart_series_get_generation (self->accuracy) ||
      self->plot_log != self->log_scale || self->plot_time != self->time_axis ||
      self->plot_dark != dark ||
      !gdk_rgba_equal (&self->plot_fg, &pal.fg))
    {
      g_clear_pointer (&self->plot, gsk_render_node_unref);
      self->plot = build_plot (self, width, height, as_cairo);
      self->plot_cairo = as_cairo;
      self->stats.plot_cairo = as_cairo;
      self->plot_width = width;
      self->plot_height = height;
      self->plot_loss_gen = rlx_chart_series_get_generation (self->loss);
      self->plot_acc_gen = rlx_chart_series_get_generation (self->accuracy);
      self->plot_log = self->log_scale;
      self->plot_time = self->time_axis;
      self->plot_dark = dark;
      self->plot_fg = pal.fg;
      self->stats.n_plots++;
    }
  if (self->plot)
    gtk_snapshot_append_node (snapshot, self->plot);
  /* membership and leader changes: a thin line each, over the cached plot
   * (a few hundred at most, so no cost worth caching) */
  for (guint i = 0; self->marks && !self->time_axis &&
                    rlx_chart_series_get_n_points (self->loss) > 0 && i < self->marks->len; i++)
    {
      double m = g_array_index (self->marks, double, i);
      if (m >= self->x_lo && m <= self->x_hi)
        gtk_snapshot_append_color (snapshot, &pal.accuracy,
                                   &GRAPHENE_RECT_INIT (floor (map_x (self, m)), self->area.origin.y,
                                                        1, self->area.size.height));
    }
  draw_readout (self, snapshot, width, height);
}

void
rlx_loss_chart_set_marks (RlxLossChart *self, const double *steps, guint n)
{
  g_return_if_fail (RLX_IS_LOSS_CHART (self));
  if (self->marks == NULL)
    self->marks = g_array_new (FALSE, FALSE, sizeof (double));
  g_array_set_size (self->marks, 0);
  g_array_append_vals (self->marks, steps, n);
  gtk_widget_queue_draw (GTK_WIDGET (self));
}

static void
rlx_loss_chart_snapshot (GtkWidget *widget, GtkSnapshot *snapshot)
{
  rlx_loss_chart_draw (RLX_LOSS_CHART (widget), snapshot, gtk_widget_get_width (widget),
                       gtk_widget_get_height (widget));
}

static void
invalidate_plot (RlxLossChart *self)
{
  g_clear_pointer (&self->plot, gsk_render_node_unref);
  gtk_widget_queue_draw (GTK_WIDGET (self));
}

/* ── accessibility ─────────────────────────────────────────────────────── */

static void
update_description (RlxLossChart *self)
{
  g_autoptr(GString) s = g_string_new (NULL);
  g_autofree char *readout = rlx_loss_chart_dup_readout_text (self);
  guint n = rlx_chart_series_get_n_points (self->loss);
  double x, y, smooth, ax, ay;

  self->last_a11y_us = g_get_monotonic_time ();
  if (n == 0)
    g_string_append (s, _("No steps yet"));
  else
    {
      rlx_chart_series_get_point (self->loss, n - 1, &x, &y, &smooth, NULL);
      /* Translators: the loss chart described to a screen reader */
      g_string_append_printf (s, _("%u steps; at step %.0f the loss is %.4f, smoothed %.4f"),
                              n, x, y, smooth);
      n = rlx_chart_series_get_n_points (self->accuracy);
      if (n > 0 && rlx_chart_series_get_point (self->accuracy, n - 1, &ax, &ay, NULL, NULL))
        g_string_append_printf (s, _("; test accuracy %.1f%% at step %.0f"), 100 * ay, ax);
    }
  if (readout)
    g_string_append_printf (s, ". %s", readout);
  gtk_accessible_update_property (GTK_ACCESSIBLE (self), GTK_ACCESSIBLE_PROPERTY_DESCRIPTION,
                                  s->str, -1);
}

static gboolean
on_a11y_timeout (gpointer user_data)
{
  RlxLossChart *self = user_data;

  self->a11y_id = 0;
  update_description (self);
  return G_SOURCE_REMOVE;
}

static gboolean
on_redraw_timeout (gpointer user_data)
{
  RlxLossChart *self = user_data;

  self->redraw_id = 0;
  gtk_widget_queue_draw (GTK_WIDGET (self));
  return G_SOURCE_REMOVE;
}

/* New data: redraw now if the last frame is old enough, else once later;
 * the description follows at most once a second. */
static void
on_series_changed (RlxChartSeries *series, RlxLossChart *self)
{
  gint64 now = g_get_monotonic_time ();
  gint64 wait_us = (gint64) self->min_redraw_ms * 1000 - (now - self->last_draw_us);

  if (self->readout >= (int) rlx_chart_series_get_n_points (self->loss))
    self->readout = -1;
  if (self->redraw_id == 0)
    {
      if (wait_us <= 0)
        gtk_widget_queue_draw (GTK_WIDGET (self));
      else
        self->redraw_id = g_timeout_add ((guint) ((wait_us + 999) / 1000), on_redraw_timeout, self);
    }
  if (self->a11y_id == 0)
    {
      gint64 a11y_wait = A11Y_INTERVAL_US - (now - self->last_a11y_us);
      self->a11y_id = g_timeout_add (a11y_wait > 0 ? (guint) (a11y_wait / 1000) : 0,
                                     on_a11y_timeout, self);
    }
}

/* ── input ─────────────────────────────────────────────────────────────── */

void
rlx_loss_chart_set_readout (RlxLossChart *self, int index)
{
  int n;

  g_return_if_fail (RLX_IS_LOSS_CHART (self));
  n = (int) rlx_chart_series_get_n_points (self->loss);
  if (index >= n)
    index = n - 1;
  if (index < -1)
    index = -1;
  if (index == self->readout)
    return;
  self->readout = index;
  gtk_widget_queue_draw (GTK_WIDGET (self));
  update_description (self);
}

int
rlx_loss_chart_get_readout (RlxLossChart *self)
{
  g_return_val_if_fail (RLX_IS_LOSS_CHART (self), -1);
  return self->readout;
}

static void
on_motion (GtkEventControllerMotion *motion, double x, double y, RlxLossChart *self)
{
  double step;

  if (self->plot == NULL || rlx_chart_series_get_n_points (self->loss) == 0 ||
      x < self->area.origin.x || x > self->area.origin.x + self->area.size.width)
    {
      rlx_loss_chart_set_readout (self, -1);
      return;
    }
  step = self->x_lo + (x - self->area.origin.x) / self->area.size.width * (self->x_hi - self->x_lo);
  rlx_loss_chart_set_readout (self, self->time_axis
                                    ? rlx_chart_series_find_nearest_time (self->loss,
                                                                          (gint64) (step * 1e6))
                                    : rlx_chart_series_find_nearest (self->loss, step));
}

static void
on_leave (GtkEventControllerMotion *motion, RlxLossChart *self)
{
  rlx_loss_chart_set_readout (self, -1);
}

static gboolean
on_key_pressed (GtkEventControllerKey *key, guint keyval, guint keycode, GdkModifierType state,
                RlxLossChart *self)
{
  int n = (int) rlx_chart_series_get_n_points (self->loss);
  int big = MAX (1, n / 20);
  int i = self->readout < 0 ? n - 1 : self->readout;

  if (n == 0)
    return FALSE;
  switch (keyval)
    {
    case GDK_KEY_Left: case GDK_KEY_KP_Left:
      i -= (state & GDK_SHIFT_MASK) ? big : 1;
      break;
    case GDK_KEY_Right: case GDK_KEY_KP_Right:
      i += (state & GDK_SHIFT_MASK) ? big : 1;
      break;
    case GDK_KEY_Home: case GDK_KEY_KP_Home:
      i = 0;
      break;
    case GDK_KEY_End: case GDK_KEY_KP_End:
      i = n - 1;
      break;
    case GDK_KEY_Escape:
      i = -1;
      break;
    default:
      return FALSE;
    }
  rlx_loss_chart_set_readout (self, i < 0 && keyval != GDK_KEY_Escape ? 0 : MIN (i, n - 1));
  return TRUE;
}

/* ── public ────────────────────────────────────────────────────────────── */

GtkWidget *
rlx_loss_chart_new (void)
{
  return g_object_new (RLX_TYPE_LOSS_CHART, NULL);
}

RlxChartSeries *
rlx_loss_chart_get_loss (RlxLossChart *self)
{
  g_return_val_if_fail (RLX_IS_LOSS_CHART (self), NULL);
  return self->loss;
}

RlxChartSeries *
rlx_loss_chart_get_accuracy (RlxLossChart *self)
{
  g_return_val_if_fail (RLX_IS_LOSS_CHART (self), NULL);
  return self->accuracy;
}

void
rlx_loss_chart_set_log_scale (RlxLossChart *self, gboolean log_scale)
{
  g_return_if_fail (RLX_IS_LOSS_CHART (self));

  log_scale = !!log_scale;
  if (self->log_scale == log_scale)
    return;
  self->log_scale = log_scale;
  invalidate_plot (self);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_LOG_SCALE]);
}

gboolean
rlx_loss_chart_get_log_scale (RlxLossChart *self)
{
  g_return_val_if_fail (RLX_IS_LOSS_CHART (self), FALSE);
  return self->log_scale;
}

void
rlx_loss_chart_set_smoothing (RlxLossChart *self, double smoothing)
{
  g_return_if_fail (RLX_IS_LOSS_CHART (self));

  smoothing = CLAMP (smoothing, 0.0, 0.999);
  if (rlx_chart_series_get_smoothing (self->loss) == smoothing)
    return;
  rlx_chart_series_set_smoothing (self->loss, smoothing);   /* redraws through ::changed */
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_SMOOTHING]);
}

double
rlx_loss_chart_get_smoothing (RlxLossChart *self)
{
  g_return_val_if_fail (RLX_IS_LOSS_CHART (self), 0);
  return rlx_chart_series_get_smoothing (self->loss);
}

void
rlx_loss_chart_set_time_axis (RlxLossChart *self, gboolean time_axis)
{
  g_return_if_fail (RLX_IS_LOSS_CHART (self));

  time_axis = !!time_axis;
  if (self->time_axis == time_axis)
    return;
  self->time_axis = time_axis;
  invalidate_plot (self);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_TIME_AXIS]);
}

gboolean
rlx_loss_chart_get_time_axis (RlxLossChart *self)
{
  g_return_val_if_fail (RLX_IS_LOSS_CHART (self), FALSE);
  return self->time_axis;
}

RlxChartCsv *
rlx_loss_chart_dup_csv (RlxLossChart *self)
{
  g_return_val_if_fail (RLX_IS_LOSS_CHART (self), NULL);
  return rlx_chart_csv_new (self->loss, self->accuracy,
                            g_get_real_time () - g_get_monotonic_time ());
}

void
rlx_loss_chart_set_min_redraw_ms (RlxLossChart *self, guint ms)
{
  g_return_if_fail (RLX_IS_LOSS_CHART (self));
  if (self->min_redraw_ms == ms)
    return;
  self->min_redraw_ms = ms;
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_MIN_REDRAW_MS]);
}

void
rlx_loss_chart_clear (RlxLossChart *self)
{
  g_return_if_fail (RLX_IS_LOSS_CHART (self));
  self->readout = -1;
  rlx_chart_series_clear (self->loss);
  rlx_chart_series_clear (self->accuracy);
}

void
rlx_loss_chart_get_stats (RlxLossChart *self, RlxLossChartStats *stats)
{
  g_return_if_fail (RLX_IS_LOSS_CHART (self));
  *stats = self->stats;
}

void
rlx_loss_chart_get_plot_area (RlxLossChart *self, graphene_rect_t *area)
{
  g_return_if_fail (RLX_IS_LOSS_CHART (self));
  *area = self->area;
}

/* ── GObject ───────────────────────────────────────────────────────────── */

static void
on_dark_changed (AdwStyleManager *manager, GParamSpec *pspec, RlxLossChart *self)
{
  invalidate_plot (self);
}

static void
rlx_loss_chart_dispose (GObject *object)
{
  RlxLossChart *self = RLX_LOSS_CHART (object);

  g_clear_handle_id (&self->redraw_id, g_source_remove);
  g_clear_handle_id (&self->a11y_id, g_source_remove);
  if (self->loss)
    g_signal_handlers_disconnect_by_data (self->loss, self);
  if (self->accuracy)
    g_signal_handlers_disconnect_by_data (self->accuracy, self);
  g_signal_handlers_disconnect_by_data (adw_style_manager_get_default (), self);
  g_clear_object (&self->loss);
  g_clear_object (&self->accuracy);
  g_clear_pointer (&self->plot, gsk_render_node_unref);
  g_clear_pointer (&self->plot_surface, cairo_surface_destroy);
  g_clear_pointer (&self->spare_surface, cairo_surface_destroy);
  G_OBJECT_CLASS (rlx_loss_chart_parent_class)->dispose (object);
}

static void
rlx_loss_chart_finalize (GObject *object)
{
  RlxLossChart *self = RLX_LOSS_CHART (object);

  g_free (self->cols);
  g_free (self->line_x);
  g_free (self->line_y);
  g_hash_table_unref (self->texts);
  g_clear_pointer (&self->marks, g_array_unref);
  G_OBJECT_CLASS (rlx_loss_chart_parent_class)->finalize (object);
}

static void
rlx_loss_chart_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  RlxLossChart *self = RLX_LOSS_CHART (object);

  switch (id)
    {
    case PROP_LOG_SCALE: g_value_set_boolean (value, self->log_scale); break;
    case PROP_MIN_REDRAW_MS: g_value_set_uint (value, self->min_redraw_ms); break;
    case PROP_SMOOTHING: g_value_set_double (value, rlx_loss_chart_get_smoothing (self)); break;
    case PROP_TIME_AXIS: g_value_set_boolean (value, self->time_axis); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_loss_chart_set_property (GObject *object, guint id, const GValue *value, GParamSpec *pspec)
{
  RlxLossChart *self = RLX_LOSS_CHART (object);

  switch (id)
    {
    case PROP_LOG_SCALE: rlx_loss_chart_set_log_scale (self, g_value_get_boolean (value)); break;
    case PROP_MIN_REDRAW_MS: rlx_loss_chart_set_min_redraw_ms (self, g_value_get_uint (value)); break;
    case PROP_SMOOTHING: rlx_loss_chart_set_smoothing (self, g_value_get_double (value)); break;
    case PROP_TIME_AXIS: rlx_loss_chart_set_time_axis (self, g_value_get_boolean (value)); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_loss_chart_class_init (RlxLossChartClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  const GParamFlags f = G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;

  object_class->dispose = rlx_loss_chart_dispose;
  object_class->finalize = rlx_loss_chart_finalize;
  object_class->get_property = rlx_loss_chart_get_property;
  object_class->set_property = rlx_loss_chart_set_property;
  widget_class->snapshot = rlx_loss_chart_snapshot;

  props[PROP_LOG_SCALE] = g_param_spec_boolean ("log-scale", NULL, NULL, FALSE, f);
  props[PROP_MIN_REDRAW_MS] = g_param_spec_uint ("min-redraw-ms", NULL, NULL, 0, 10000, 50, f);
  props[PROP_SMOOTHING] = g_param_spec_double ("smoothing", NULL, NULL, 0, 0.999, 0.95, f);
  props[PROP_TIME_AXIS] = g_param_spec_boolean ("time-axis", NULL, NULL, FALSE, f);
  g_object_class_install_properties (object_class, N_PROPS, props);

  gtk_widget_class_set_css_name (widget_class, "losschart");
  gtk_widget_class_set_accessible_role (widget_class, GTK_ACCESSIBLE_ROLE_IMG);
}

static void
rlx_loss_chart_init (RlxLossChart *self)
{
  GtkEventController *motion = gtk_event_controller_motion_new ();
  GtkEventController *key = gtk_event_controller_key_new ();

  self->loss = rlx_chart_series_new (0.95);
  self->accuracy = rlx_chart_series_new (0);
  self->min_redraw_ms = 50;
  self->readout = -1;
  self->cols = g_new0 (RlxChartColumn, MAX_COLUMNS);
  self->line_x = g_new (double, MAX_COLUMNS);
  self->line_y = g_new (double, MAX_COLUMNS);
  self->texts = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_object_unref);
  g_signal_connect (self->loss, "changed", G_CALLBACK (on_series_changed), self);
  g_signal_connect (self->accuracy, "changed", G_CALLBACK (on_series_changed), self);
  g_signal_connect (adw_style_manager_get_default (), "notify::dark",
                    G_CALLBACK (on_dark_changed), self);

  g_signal_connect (motion, "motion", G_CALLBACK (on_motion), self);
  g_signal_connect (motion, "leave", G_CALLBACK (on_leave), self);
  gtk_widget_add_controller (GTK_WIDGET (self), motion);
  g_signal_connect (key, "key-pressed", G_CALLBACK (on_key_pressed), self);
  gtk_widget_add_controller (GTK_WIDGET (self), key);

  gtk_widget_set_focusable (GTK_WIDGET (self), TRUE);
  gtk_widget_set_hexpand (GTK_WIDGET (self), TRUE);
  gtk_widget_set_vexpand (GTK_WIDGET (self), TRUE);
  gtk_widget_set_size_request (GTK_WIDGET (self), 320, 120);
  gtk_accessible_update_property (GTK_ACCESSIBLE (self),
                                  GTK_ACCESSIBLE_PROPERTY_LABEL, _("Loss chart"),
                                  GTK_ACCESSIBLE_PROPERTY_DESCRIPTION, _("No steps yet"),
                                  -1);
}
