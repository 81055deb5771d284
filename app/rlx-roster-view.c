/* rlx-roster-view.c — the roster as a GtkColumnView (see the header) */
#include "rlx-config.h"
#include "rlx-roster-view.h"
#include "core/rlx-coordinator.h"

#include <glib/gi18n.h>

struct _RlxRosterView
{
  GtkWidget      parent_instance;

  GtkColumnView *column_view;
  GtkLabel      *summary;
  GListModel    *model;
};

G_DEFINE_FINAL_TYPE (RlxRosterView, rlx_roster_view, GTK_TYPE_WIDGET)

enum { PROP_0, PROP_MODEL, N_PROPS };
static GParamSpec *props[N_PROPS];

/* ── cell text ─────────────────────────────────────────────────────────── */

char *
rlx_roster_format_rank (guint rank, gboolean is_leader, gboolean is_self)
{
  if (is_leader && is_self)
    /* Translators: a rank number, marked as the leader and as this node */
    return g_strdup_printf (_("%u ★ leader · you"), rank);
  if (is_leader)
    /* Translators: a rank number, marked as the leader */
    return g_strdup_printf (_("%u ★ leader"), rank);
  if (is_self)
    /* Translators: a rank number, marked as this node */
    return g_strdup_printf (_("%u · you"), rank);
  return g_strdup_printf ("%u", rank);
}

char *
rlx_roster_format_precision (const char *precision)
{
  if (g_strcmp0 (precision, "f8e4m3") == 0)
    return g_strdup ("f8 E4M3");
  if (g_strcmp0 (precision, "f8e5m2") == 0)
    return g_strdup ("f8 E5M2");
  return g_strdup (precision ? precision : "");
}

char *
rlx_roster_format_speed (double samples_per_s)
{
  if (!(samples_per_s > 0))
    /* Translators: samples/s not measured yet */
    return g_strdup (_("—"));
  if (samples_per_s >= 1e6)
    return g_strdup_printf ("%.2f M", samples_per_s / 1e6);
  if (samples_per_s >= 1e4)
    return g_strdup_printf ("%.0f k", samples_per_s / 1e3);
  return g_strdup_printf ("%.0f", samples_per_s);
}

char *
rlx_roster_format_bytes (guint64 bytes)
{
  return g_format_size (bytes);
}

char *
rlx_roster_format_fallback (const char *fallback)
{
  if (fallback == NULL || *fallback == '\0')
    /* Translators: no faster backend was passed over */
    return g_strdup (_("none"));
  return g_strdup (fallback);
}

/* closures of the cell templates */
static char *
format_rank_cb (GObject *item, guint rank, gboolean is_leader, gboolean is_self)
{
  return rlx_roster_format_rank (rank, is_leader, is_self);
}

static char *
format_precision_cb (GObject *item, const char *precision)
{
  return rlx_roster_format_precision (precision);
}

static char *
format_speed_cb (GObject *item, double speed)
{
  return rlx_roster_format_speed (speed);
}

static char *
format_bytes_cb (GObject *item, guint64 bytes)
{
  return rlx_roster_format_bytes (bytes);
}

static char *
format_fallback_cb (GObject *item, const char *fallback)
{
  return rlx_roster_format_fallback (fallback);
}

/* ── model ─────────────────────────────────────────────────────────────── */

static void
update_summary (RlxRosterView *self)
{
  guint n = self->model ? g_list_model_get_n_items (self->model) : 0;
  g_autofree char *text = NULL;

  if (self->model == NULL)
    text = g_strdup (_("not in a cohort"));
  else
    text = g_strdup_printf (ngettext ("%u rank", "%u ranks", n), n);
  gtk_label_set_label (self->summary, text);
}

static void
on_items_changed (GListModel *model, guint position, guint removed, guint added,
                  RlxRosterView *self)
{
  update_summary (self);
}

void
rlx_roster_view_set_model (RlxRosterView *self, GListModel *model)
{
  g_autoptr(GtkNoSelection) selection = NULL;

  g_return_if_fail (RLX_IS_ROSTER_VIEW (self));
  g_return_if_fail (model == NULL || G_IS_LIST_MODEL (model));

  if (self->model == model)
    return;
  if (self->model)
    g_signal_handlers_disconnect_by_func (self->model, on_items_changed, self);
  g_set_object (&self->model, model);
  if (model)
    {
      g_signal_connect (model, "items-changed", G_CALLBACK (on_items_changed), self);
      selection = gtk_no_selection_new (g_object_ref (model));
    }
  gtk_column_view_set_model (self->column_view, GTK_SELECTION_MODEL (selection));
  update_summary (self);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_MODEL]);
}

GListModel *
rlx_roster_view_get_model (RlxRosterView *self)
{
  g_return_val_if_fail (RLX_IS_ROSTER_VIEW (self), NULL);
  return self->model;
}

const char *
rlx_roster_view_get_summary (RlxRosterView *self)
{
  g_return_val_if_fail (RLX_IS_ROSTER_VIEW (self), NULL);
  return gtk_label_get_label (self->summary);
}

GtkWidget *
rlx_roster_view_new (void)
{
  return g_object_new (RLX_TYPE_ROSTER_VIEW, NULL);
}

/* ── GObject ───────────────────────────────────────────────────────────── */

static void
rlx_roster_view_dispose (GObject *object)
{
  RlxRosterView *self = RLX_ROSTER_VIEW (object);

  if (self->model)
    g_signal_handlers_disconnect_by_func (self->model, on_items_changed, self);
  g_clear_object (&self->model);
  gtk_widget_dispose_template (GTK_WIDGET (self), RLX_TYPE_ROSTER_VIEW);
  {
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child (GTK_WIDGET (self))))
      gtk_widget_unparent (child);
  }
  G_OBJECT_CLASS (rlx_roster_view_parent_class)->dispose (object);
}

static void
rlx_roster_view_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  RlxRosterView *self = RLX_ROSTER_VIEW (object);

  switch (id)
    {
    case PROP_MODEL: g_value_set_object (value, self->model); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_roster_view_set_property (GObject *object, guint id, const GValue *value, GParamSpec *pspec)
{
  RlxRosterView *self = RLX_ROSTER_VIEW (object);

  switch (id)
    {
    case PROP_MODEL: rlx_roster_view_set_model (self, g_value_get_object (value)); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_roster_view_class_init (RlxRosterViewClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  object_class->dispose = rlx_roster_view_dispose;
  object_class->get_property = rlx_roster_view_get_property;
  object_class->set_property = rlx_roster_view_set_property;

  props[PROP_MODEL] = g_param_spec_object ("model", NULL, NULL, G_TYPE_LIST_MODEL,
                                           G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY |
                                           G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, props);

  /* the cells look up these types by name */
  g_type_ensure (RLX_TYPE_ROSTER_ENTRY);
  gtk_widget_class_set_template_from_resource (widget_class,
                                               "/io/github/rlx/Cluster/ui/rlx-roster-view.ui");
  gtk_widget_class_bind_template_child (widget_class, RlxRosterView, column_view);
  gtk_widget_class_bind_template_child (widget_class, RlxRosterView, summary);
  gtk_widget_class_bind_template_callback (widget_class, format_rank_cb);
  gtk_widget_class_bind_template_callback (widget_class, format_precision_cb);
  gtk_widget_class_bind_template_callback (widget_class, format_speed_cb);
  gtk_widget_class_bind_template_callback (widget_class, format_bytes_cb);
  gtk_widget_class_bind_template_callback (widget_class, format_fallback_cb);
  gtk_widget_class_set_layout_manager_type (widget_class, GTK_TYPE_BOX_LAYOUT);
  gtk_widget_class_set_css_name (widget_class, "rosterview");
}

static void
rlx_roster_view_init (RlxRosterView *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  gtk_orientable_set_orientation (GTK_ORIENTABLE (gtk_widget_get_layout_manager (GTK_WIDGET (self))),
                                  GTK_ORIENTATION_VERTICAL);
  update_summary (self);
}
