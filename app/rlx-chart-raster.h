/* rlx-chart-raster.h — polylines drawn straight into an ARGB32 image
 *
 * The loss chart's curves have one vertex per pixel column, about a
 * thousand segments a line. Cairo's stroker (a polygon, then its scan
 * conversion) spent ~1.4 ms of a 100,000-point plot rebuild on the two
 * loss lines; this rasteriser covers each pixel by its distance to the
 * nearest segment (round joins and caps, the union taken as the largest
 * coverage, so a pixel is blended once) in ~0.1 ms.
 *
 * And an image shown as a render node: GTK 4.8's cairo renderer downloads a
 * GdkMemoryTexture into a new image at every render, converting each pixel
 * to float and back (gdk_memory_convert has no same-format path), so there
 * the image is painted from a cairo node instead; a texture elsewhere.
 *
 * Threads: plain functions on caller-owned memory, any thread (the node,
 * like every render node, is then used on one thread at a time).
 */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

typedef struct {
  guint8 *data;         /* cairo ARGB32: premultiplied, native-endian 32-bit pixels */
  int     stride;       /* bytes per row */
  int     width, height;
} RlxRasterImage;

/* Draw the polyline through (@xs[i], @ys[i]) (in device pixels, i < @n)
 * with @line_width (device pixels) in @color (straight alpha), over what
 * @img holds, inside @clip (device pixels; clipped to the image too).
 * @antialias FALSE: a pixel is in or out by its centre (cairo's
 * CAIRO_ANTIALIAS_NONE). Vertices whose y is not finite break the line. */
void rlx_raster_polyline (const RlxRasterImage *img, const cairo_rectangle_int_t *clip,
                          const double *xs, const double *ys, guint n, double line_width,
                          gboolean antialias, const GdkRGBA *color);

/* A node of @width × @height units showing @surface (an ARGB32 image of
 * @scale device pixels per unit): a cairo node when @as_cairo (the cairo
 * renderer), else a texture node. Either keeps a reference to @surface for
 * as long as it lives (so a reference count of 1 says no node shows it),
 * and neither copies it: draw into it again only once no node holds it. */
GskRenderNode *rlx_raster_image_node (cairo_surface_t *surface, int width, int height, int scale,
                                      gboolean as_cairo);

G_END_DECLS
