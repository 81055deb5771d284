/* rlx-sparkline.c — a small line of recent values (see the header) */
#include "rlx-config.h"
#include "rlx-sparkline.h"

#include <glib/gi18n.h>
#include <math.h>

struct _RlxSparkline
{
  GtkWidget parent_instance;
  double    values[RLX_SPARKLINE_MAX];   /* a ring */
  guint     first, n;
};

G_DEFINE_FINAL_TYPE (RlxSparkline, rlx_sparkline, GTK_TYPE_WIDGET)

double
rlx_sparkline_get (RlxSparkline *self, guint i)
{
  g_return_val_if_fail (RLX_IS_SPARKLINE (self) && i < self->n, 0);
  return self->values[(self->first + i) % RLX_SPARKLINE_MAX];
}

guint
rlx_sparkline_get_n (RlxSparkline *self)
{
  g_return_val_if_fail (RLX_IS_SPARKLINE (self), 0);
  return self->n;
}

void
rlx_sparkline_push (RlxSparkline *self, double value)
{
  g_autofree char *text = NULL;

  g_return_if_fail (RLX_IS_SPARKLINE (self));
  if (!isfinite (value) || value < 0)
    value = 0;
  if (self->n < RLX_SPARKLINE_MAX)
    self->values[(self->first + self->n++) % RLX_SPARKLINE_MAX] = value;
  else
    {
      self->values[self->first] = value;
      self->first = (self->first + 1) % RLX_SPARKLINE_MAX;
    }
  /* Translators: a rank's speed now, for a screen reader */
  text = g_strdup_printf (_("%.0f samples/s"), value);
  gtk_accessible_update_property (GTK_ACCESSIBLE (self), GTK_ACCESSIBLE_PROPERTY_DESCRIPTION,
                                  text, -1);
  gtk_widget_queue_draw (GTK_WIDGET (self));
}

static void
rlx_sparkline_snapshot (GtkWidget *widget, GtkSnapshot *snapshot)
{
  RlxSparkline *self = RLX_SPARKLINE (widget);
  int w = gtk_widget_get_width (widget), h = gtk_widget_get_height (widget);
  double hi = 0;
  GdkRGBA color;
  cairo_t *cr;

  if (self->n < 2 || w <= 0 || h <= 2)
    return;
  for (guint i = 0; i < self->n; i++)
    hi = MAX (hi, rlx_sparkline_get (self, i));
  if (hi <= 0)
    hi = 1;
  gtk_style_context_get_color (gtk_widget_get_style_context (widget), &color);
  cr = gtk_snapshot_append_cairo (snapshot, &GRAPHENE_RECT_INIT (0, 0, w, h));
  cairo_set_source_rgba (cr, color.red, color.green, color.blue, 0.8);
  cairo_set_line_width (cr, 1.5);
  for (guint i = 0; i < self->n; i++)
    {
      double x = (double) i * (w - 1) / (RLX_SPARKLINE_MAX - 1);
      double y = 1 + (h - 2) * (1 - rlx_sparkline_get (self, i) / hi);
      if (i == 0)
        cairo_move_to (cr, x, y);
      else
        cairo_line_to (cr, x, y);
    }
  cairo_stroke (cr);
  cairo_destroy (cr);
}

static void
rlx_sparkline_measure (GtkWidget *widget, GtkOrientation orientation, int for_size, int *min,
                       int *nat, int *min_base, int *nat_base)
{
  *min = orientation == GTK_ORIENTATION_HORIZONTAL ? 60 : 16;
  *nat = orientation == GTK_ORIENTATION_HORIZONTAL ? 120 : 16;
}

GtkWidget *
rlx_sparkline_new (void)
{
  return g_object_new (RLX_TYPE_SPARKLINE, NULL);
}

static void
rlx_sparkline_class_init (RlxSparklineClass *klass)
{
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  widget_class->snapshot = rlx_sparkline_snapshot;
  widget_class->measure = rlx_sparkline_measure;
  gtk_widget_class_set_accessible_role (widget_class, GTK_ACCESSIBLE_ROLE_IMG);
  gtk_widget_class_set_css_name (widget_class, "rlx-sparkline");
}

static void
rlx_sparkline_init (RlxSparkline *self)
{
}
