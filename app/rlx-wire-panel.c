/* rlx-wire-panel.c — wire bytes, rates and the f32 comparison (see the header) */
#include "rlx-config.h"
#include "rlx-wire-panel.h"
#include "rlx-figure.h"

#include <glib/gi18n.h>

#define WINDOW_US   (3 * G_USEC_PER_SEC)
/* the saving against f32 is over the last half minute, so it says what the
 * precision chosen now saves (since the start, a switch to f8 an hour in
 * would hardly show) */
#define SAVING_WINDOW_S 30
#define SAVING_WINDOW_US (SAVING_WINDOW_S * G_USEC_PER_SEC)
#define MAX_SAMPLES 80    /* two a second, and some */

typedef struct {
  gint64  t;
  guint64 tx, rx, f32;
} Sample;

struct _RlxWirePanel
{
  GtkWidget       parent_instance;

  GtkInscription *sent;       /* figures: new text, no relayout */
  GtkInscription *received;
  GtkInscription *rate;
  GtkLabel       *saving;
  GtkLabel       *f32;

  RlxNodeThread  *node;
  Sample          samples[MAX_SAMPLES];   /* a ring, newest at head - 1 */
  guint           head, count;
};

G_DEFINE_FINAL_TYPE (RlxWirePanel, rlx_wire_panel, GTK_TYPE_WIDGET)

static void
set_label (GtkLabel *label, const char *text)
{
  /* unchanged text costs no relayout */
  if (g_strcmp0 (gtk_label_get_label (label), text) != 0)
    gtk_label_set_label (label, text);
}

void
rlx_wire_panel_sample (RlxWirePanel *self, guint64 tx, guint64 rx, guint64 f32,
                          gint64 now_us)
{
  g_autofree char *sent = NULL, *received = NULL, *rate = NULL, *saving = NULL, *at_f32 = NULL;
  const Sample *oldest = NULL, *oldest_saving = NULL;
  guint64 wire = tx + rx;

  g_return_if_fail (RLX_IS_WIRE_PANEL (self));

  self->samples[self->head] = (Sample) { now_us, tx, rx, f32 };
  self->head = (self->head + 1) % MAX_SAMPLES;
  self->count = MIN (self->count + 1, MAX_SAMPLES);
  /* the oldest samples inside each window (but not the newest itself) */
  for (guint k = self->count; k >= 2; k--)
    {
      const Sample *s = &self->samples[(self->head + MAX_SAMPLES - k) % MAX_SAMPLES];
      if (oldest_saving == NULL && now_us - s->t <= SAVING_WINDOW_US && s->t < now_us &&
          f32 > s->f32 && tx >= s->tx && rx >= s->rx)
        oldest_saving = s;
      if (now_us - s->t <= WINDOW_US && s->t < now_us)
        {
          oldest = s;
          break;
        }
    }

  sent = g_format_size (tx);
  received = g_format_size (rx);
  if (oldest && tx >= oldest->tx && rx >= oldest->rx)
    {
      double dt = (now_us - oldest->t) / 1e6;
      g_autofree char *up = g_format_size ((guint64) ((tx - oldest->tx) / dt));
      g_autofree char *down = g_format_size ((guint64) ((rx - oldest->rx) / dt));
      /* Translators: bytes per second sent (↑) and received (↓) */
      rate = g_strdup_printf (_("↑ %s/s  ↓ %s/s"), up, down);
    }
  else
    rate = g_strdup (_("—"));
  if (oldest_saving)
    {
      guint64 d_wire = wire - (oldest_saving->tx + oldest_saving->rx);
      guint64 d_f32 = f32 - oldest_saving->f32;
      g_autofree char *size = g_format_size (d_f32);
      saving = g_strdup_printf (_("%.0f%%"),
                                d_wire >= d_f32 ? 0.0 : 100.0 * (1.0 - (double) d_wire / (double) d_f32));
      /* Translators: %s is a size, %d seconds; what the traffic of that
       * last while would be at f32 */
      at_f32 = g_strdup_printf (_("of %s at f32, last %d s"), size, SAVING_WINDOW_S);
    }
  else if (f32 > 0 && wire <= f32)
    {
      g_autofree char *size = g_format_size (f32);
      /* Translators: the share of bytes saved, in percent */
      saving = g_strdup_printf (_("%.0f%%"), 100.0 * (1.0 - (double) wire / (double) f32));
      /* Translators: %s is a size; what the same traffic would be at f32 */
      at_f32 = g_strdup_printf (_("of %s at f32"), size);
    }
  else if (f32 > 0)
    {
      g_autofree char *size = g_format_size (f32);
      saving = g_strdup ("0%");
      at_f32 = g_strdup_printf (_("of %s at f32"), size);
    }
  else
    {
      saving = g_strdup (_("—"));
      at_f32 = g_strdup ("");
    }
  rlx_figure_set_text (self->sent, sent);
  rlx_figure_set_text (self->received, received);
  rlx_figure_set_text (self->rate, rate);
  set_label (self->saving, saving);
  set_label (self->f32, at_f32);
}

void
rlx_wire_panel_reset (RlxWirePanel *self)
{
  g_return_if_fail (RLX_IS_WIRE_PANEL (self));
  self->head = self->count = 0;
  rlx_wire_panel_sample (self, 0, 0, 0, g_get_monotonic_time ());
  self->head = self->count = 0;
}

void
rlx_wire_panel_refresh (RlxWirePanel *self)
{
  g_return_if_fail (RLX_IS_WIRE_PANEL (self));

  if (self->node)
    {
      guint64 tx, rx, f32;

      rlx_node_thread_get_bytes (self->node, &tx, &rx, &f32);
      rlx_wire_panel_sample (self, tx, rx, f32, g_get_monotonic_time ());
    }
}

void
rlx_wire_panel_set_node (RlxWirePanel *self, RlxNodeThread *node)
{
  g_return_if_fail (RLX_IS_WIRE_PANEL (self));
  g_return_if_fail (node == NULL || RLX_IS_NODE_THREAD (node));

  if (self->node == node)
    return;
  rlx_wire_panel_refresh (self);   /* the last totals stay */
  g_set_object (&self->node, node);
  if (node)
    {
      rlx_wire_panel_reset (self);
      rlx_wire_panel_refresh (self);
    }
  else
    {
      /* a rate is of now, and nothing moves once the node is gone */
      self->head = self->count = 0;
      rlx_figure_set_text (self->rate, _("—"));
    }
}

const char *rlx_wire_panel_get_sent_text (RlxWirePanel *self) { return gtk_inscription_get_text (self->sent); }
const char *rlx_wire_panel_get_received_text (RlxWirePanel *self) { return gtk_inscription_get_text (self->received); }
const char *rlx_wire_panel_get_rate_text (RlxWirePanel *self) { return gtk_inscription_get_text (self->rate); }
const char *rlx_wire_panel_get_saving_text (RlxWirePanel *self) { return gtk_label_get_label (self->saving); }
const char *rlx_wire_panel_get_f32_text (RlxWirePanel *self) { return gtk_label_get_label (self->f32); }

GtkWidget *
rlx_wire_panel_new (void)
{
  return g_object_new (RLX_TYPE_WIRE_PANEL, NULL);
}

static void
rlx_wire_panel_dispose (GObject *object)
{
  RlxWirePanel *self = RLX_WIRE_PANEL (object);

  g_clear_object (&self->node);
  gtk_widget_dispose_template (GTK_WIDGET (self), RLX_TYPE_WIRE_PANEL);
  {
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child (GTK_WIDGET (self))))
      gtk_widget_unparent (child);
  }
  G_OBJECT_CLASS (rlx_wire_panel_parent_class)->dispose (object);
}

static void
rlx_wire_panel_class_init (RlxWirePanelClass *klass)
{
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  G_OBJECT_CLASS (klass)->dispose = rlx_wire_panel_dispose;
  gtk_widget_class_set_template_from_resource (widget_class,
                                               "/io/github/rlx/Cluster/ui/rlx-wire-panel.ui");
  gtk_widget_class_bind_template_child (widget_class, RlxWirePanel, sent);
  gtk_widget_class_bind_template_child (widget_class, RlxWirePanel, received);
  gtk_widget_class_bind_template_child (widget_class, RlxWirePanel, rate);
  gtk_widget_class_bind_template_child (widget_class, RlxWirePanel, saving);
  gtk_widget_class_bind_template_child (widget_class, RlxWirePanel, f32);
  gtk_widget_class_set_layout_manager_type (widget_class, GTK_TYPE_BOX_LAYOUT);
  gtk_widget_class_set_css_name (widget_class, "wirepanel");
  gtk_widget_class_set_accessible_role (widget_class, GTK_ACCESSIBLE_ROLE_GROUP);
}

static void
rlx_wire_panel_init (RlxWirePanel *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  gtk_box_layout_set_spacing (GTK_BOX_LAYOUT (gtk_widget_get_layout_manager (GTK_WIDGET (self))),
                              12);
  gtk_accessible_update_property (GTK_ACCESSIBLE (self), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                  _("Wire counters"), -1);
}
