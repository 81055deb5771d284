/* rlx-chart-raster.c — polylines drawn straight into an ARGB32 image (see the header) */
#include "rlx-config.h"
#include "rlx-chart-raster.h"

#include <math.h>

typedef struct {
  guint8 *mask;         /* coverage 0..255, column-major: mask[x * h + y] */
  int    *lo, *hi;      /* per column: the rows touched, lo > hi when none */
  int     x0, y0, w, h; /* the clip, in image pixels */
} Mask;

/* Cover the pixels near segment (ax, ay)–(bx, by) with radius @r. */
static void
cover_segment (Mask *m, double ax, double ay, double bx, double by, double r, gboolean antialias)
{
  double dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy;
  double reach = antialias ? r + 0.5 : r;    /* farthest centre that gets any cover */
  double reach2 = reach * reach;
  int px0 = (int) floor (MIN (ax, bx) - reach - 0.5), px1 = (int) ceil (MAX (ax, bx) + reach);

  px0 = MAX (px0, m->x0);
  px1 = MIN (px1, m->x0 + m->w - 1);
  for (int px = px0; px <= px1; px++)
    {
      guint8 *col = m->mask + (gsize) (px - m->x0) * m->h - m->y0;
      double cx = px + 0.5 - ax;
      double t0 = 0, t1 = 1, ya, yb;
      int lo = G_MAXINT, hi = G_MININT, py0, py1;

      /* only the part of the segment within reach of this column's centres */
      if (dx != 0)
        {
          double u = (cx - reach) / dx, v = (cx + reach) / dx;
          t0 = MAX (0.0, MIN (u, v));
          t1 = MIN (1.0, MAX (u, v));
          if (t0 > t1)
            continue;
        }
      else if (fabs (cx) > reach)
        continue;
      ya = t0 * dy;
      yb = t1 * dy;
      py0 = MAX ((int) floor (ay + MIN (ya, yb) - reach - 0.5), m->y0);
      py1 = MIN ((int) ceil (ay + MAX (ya, yb) + reach), m->y0 + m->h - 1);

      for (int py = py0; py <= py1; py++)
        {
          double cy = py + 0.5 - ay;
          double t = len2 > 0 ? (cx * dx + cy * dy) / len2 : 0;
          double ex, ey, d2;
          guint8 cov;

          t = CLAMP (t, 0.0, 1.0);
          ex = cx - t * dx;
          ey = cy - t * dy;
          d2 = ex * ex + ey * ey;
          if (d2 > reach2)
            continue;
          if (!antialias || (r >= 0.5 && d2 <= (r - 0.5) * (r - 0.5)))
            cov = 255;   /* (without antialiasing, reach is r) */
          else
            {
              double c = r + 0.5 - sqrt (d2);
              if (c <= 0)
                continue;
              cov = c >= 1 ? 255 : (guint8) (c * 255 + 0.5);
            }
          if (cov > col[py])
            col[py] = cov;
          lo = MIN (lo, py);
          hi = MAX (hi, py);
        }
      if (lo <= hi)
        {
          int i = px - m->x0;
          m->lo[i] = MIN (m->lo[i], lo);
          m->hi[i] = MAX (m->hi[i], hi);
        }
    }
}

void
rlx_raster_polyline (const RlxRasterImage *img, const cairo_rectangle_int_t *clip,
                     const double *xs, const double *ys, guint n, double line_width,
                     gboolean antialias, const GdkRGBA *color)
{
  Mask m;
  double r = MAX (line_width, 0) / 2;
  double a = CLAMP (color->alpha, 0, 1);
  /* the colour premultiplied, 0..255 */
  double sr = CLAMP (color->red, 0, 1) * a * 255, sg = CLAMP (color->green, 0, 1) * a * 255,
         sb = CLAMP (color->blue, 0, 1) * a * 255, sa = a * 255;

  g_return_if_fail (img != NULL && img->data != NULL && clip != NULL);
  g_return_if_fail (n == 0 || (xs != NULL && ys != NULL));

  m.x0 = MAX (clip->x, 0);
  m.y0 = MAX (clip->y, 0);
  m.w = MIN (clip->x + clip->width, img->width) - m.x0;
  m.h = MIN (clip->y + clip->height, img->height) - m.y0;
  if (n < 2 || m.w <= 0 || m.h <= 0 || r <= 0 || a <= 0)
    return;
  m.mask = g_malloc0 ((gsize) m.w * m.h);
  m.lo = g_new (int, m.w);
  m.hi = g_new (int, m.w);
  for (int i = 0; i < m.w; i++)
    {
      m.lo[i] = G_MAXINT;
      m.hi[i] = G_MININT;
    }

  for (guint i = 1; i < n; i++)
    if (isfinite (xs[i - 1]) && isfinite (ys[i - 1]) && isfinite (xs[i]) && isfinite (ys[i]))
      cover_segment (&m, xs[i - 1], ys[i - 1], xs[i], ys[i], r, antialias);

  /* blend each covered pixel once: colour × coverage OVER the image */
  for (int i = 0; i < m.w; i++)
    {
      const guint8 *col = m.mask + (gsize) i * m.h - m.y0;
      for (int y = m.lo[i]; y <= m.hi[i]; y++)
        {
          guint32 *p;
          double f, keep;
          guint32 d;

          if (col[y] == 0)
            continue;
          f = col[y] / 255.0;
          keep = 1 - f * a;
          p = (guint32 *) (gpointer) (img->data + (gsize) y * img->stride) + m.x0 + i;
          d = *p;
          *p = ((guint32) (sa * f + ((d >> 24) & 0xff) * keep + 0.5) << 24) |
               ((guint32) (sr * f + ((d >> 16) & 0xff) * keep + 0.5) << 16) |
               ((guint32) (sg * f + ((d >> 8) & 0xff) * keep + 0.5) << 8) |
               ((guint32) (sb * f + (d & 0xff) * keep + 0.5));
        }
    }
  g_free (m.mask);
  g_free (m.lo);
  g_free (m.hi);
}

/* The cairo node paints the image through a raster source: a surface
 * pattern would be snapshotted by the node's recording, and cairo copies a
 * snapshotted image before it is drawn into again (an image reused). The
 * recording keeps a reference to the image for as long as it lives. */
static cairo_surface_t *
on_image_acquire (cairo_pattern_t *pattern, void *image, cairo_surface_t *target,
                 const cairo_rectangle_int_t *extents)
{
  return cairo_surface_reference (image);
}

static void
on_image_release (cairo_pattern_t *pattern, void *image, cairo_surface_t *surface)
{
  cairo_surface_destroy (surface);
}

static const cairo_user_data_key_t image_key;

GskRenderNode *
rlx_raster_image_node (cairo_surface_t *surface, int width, int height, int scale,
                       gboolean as_cairo)
{
  graphene_rect_t bounds = GRAPHENE_RECT_INIT (0, 0, width, height);
  g_autoptr(GBytes) bytes = NULL;
  g_autoptr(GdkTexture) texture = NULL;
  int w = cairo_image_surface_get_width (surface), h = cairo_image_surface_get_height (surface);
  int stride = cairo_image_surface_get_stride (surface);

  if (as_cairo)
    {
      GskRenderNode *node = gsk_cairo_node_new (&bounds);
      cairo_t *cr = gsk_cairo_node_get_draw_context (node);
      cairo_pattern_t *pattern = cairo_pattern_create_raster_source (surface,
                                                                     CAIRO_CONTENT_COLOR_ALPHA,
                                                                     w, h);
      cairo_matrix_t m;

      cairo_surface_set_user_data (cairo_get_target (cr), &image_key,
                                   cairo_surface_reference (surface),
                                   (cairo_destroy_func_t) cairo_surface_destroy);
      cairo_raster_source_pattern_set_acquire (pattern, on_image_acquire, on_image_release);
      cairo_matrix_init_scale (&m, scale, scale);
      cairo_pattern_set_matrix (pattern, &m);
      cairo_set_source (cr, pattern);
      cairo_paint (cr);
      cairo_pattern_destroy (pattern);
      cairo_destroy (cr);
      return node;
    }
  /* cairo's ARGB32 is premultiplied BGRA on little-endian machines, which is
   * GDK_MEMORY_DEFAULT; the texture keeps the surface alive */
  bytes = g_bytes_new_with_free_func (cairo_image_surface_get_data (surface), (gsize) stride * h,
                                      (GDestroyNotify) cairo_surface_destroy,
                                      cairo_surface_reference (surface));
  texture = gdk_memory_texture_new (w, h, GDK_MEMORY_DEFAULT, bytes, stride);
  return gsk_texture_node_new (texture, &bounds);
}
