/* rlx-events-view.c — the events page (see the header) */
#include "rlx-config.h"
#include "rlx-events-view.h"

/* ── a list model's items in the reverse order ─────────────────────────── */

#define RLX_TYPE_REVERSED (rlx_reversed_get_type ())
G_DECLARE_FINAL_TYPE (RlxReversed, rlx_reversed, RLX, REVERSED, GObject)

struct _RlxReversed
{
  GObject     parent_instance;
  GListModel *inner;
  guint       n;   /* the inner model's length, as last told */
};

static void rlx_reversed_model_init (GListModelInterface *iface);
G_DEFINE_FINAL_TYPE_WITH_CODE (RlxReversed, rlx_reversed, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (G_TYPE_LIST_MODEL, rlx_reversed_model_init))

static GType
reversed_item_type (GListModel *model)
{
  return g_list_model_get_item_type (RLX_REVERSED (model)->inner);
}

static guint
reversed_n_items (GListModel *model)
{
  return RLX_REVERSED (model)->n;
}

static gpointer
reversed_item (GListModel *model, guint position)
{
  RlxReversed *self = RLX_REVERSED (model);

  if (position >= self->n)
    return NULL;
  return g_list_model_get_item (self->inner, self->n - 1 - position);
}

static void
rlx_reversed_model_init (GListModelInterface *iface)
{
  iface->get_item_type = reversed_item_type;
  iface->get_n_items = reversed_n_items;
  iface->get_item = reversed_item;
}

/* The block [pos, pos + removed) of the old inner list is [n - pos -
 * removed, n - pos) of the old reversed one. */
static void
on_inner_changed (GListModel *inner, guint pos, guint removed, guint added, RlxReversed *self)
{
  guint at = self->n - pos - removed;

  self->n = self->n - removed + added;
  g_list_model_items_changed (G_LIST_MODEL (self), at, removed, added);
}

static void
rlx_reversed_dispose (GObject *object)
{
  RlxReversed *self = RLX_REVERSED (object);

  if (self->inner)
    g_signal_handlers_disconnect_by_data (self->inner, self);
  g_clear_object (&self->inner);
  G_OBJECT_CLASS (rlx_reversed_parent_class)->dispose (object);
}

static void
rlx_reversed_class_init (RlxReversedClass *klass)
{
  G_OBJECT_CLASS (klass)->dispose = rlx_reversed_dispose;
}

static void
rlx_reversed_init (RlxReversed *self)
{
}

static GListModel *
rlx_reversed_new (GListModel *inner)
{
  RlxReversed *self = g_object_new (RLX_TYPE_REVERSED, NULL);

  self->inner = g_object_ref (inner);
  self->n = g_list_model_get_n_items (inner);
  g_signal_connect (inner, "items-changed", G_CALLBACK (on_inner_changed), self);
  return G_LIST_MODEL (self);
}

/* ── newest visible ────────────────────────────────────────────────────── */

static void
on_newest (GListModel *model, guint pos, guint removed, guint added, GtkListView *list)
{
  GtkWidget *scroller = gtk_widget_get_parent (GTK_WIDGET (list));
  GtkAdjustment *adj;

  if (pos != 0 || added == 0 || !GTK_IS_SCROLLED_WINDOW (scroller))
    return;
  adj = gtk_scrolled_window_get_vadjustment (GTK_SCROLLED_WINDOW (scroller));
  /* someone reading further down is left where they are */
  if (gtk_adjustment_get_value (adj) < 1)
    gtk_widget_activate_action (GTK_WIDGET (list), "list.scroll-to-item", "u", 0);
}

void
rlx_list_keep_newest_visible (GtkListView *list, GListModel *model)
{
  g_signal_connect_object (model, "items-changed", G_CALLBACK (on_newest), list, 0);
}

/* ── the view ──────────────────────────────────────────────────────────── */

struct _RlxEventsView
{
  GtkWidget          parent_instance;
  GtkToggleButton   *filter_all, *filter_membership, *filter_warnings;
  GtkWidget         *accuracy_row;
  GtkLabel          *accuracy_title, *accuracy_detail;
  GtkListView       *list;
  RlxEventLog       *log;
  GtkFilterListModel *shown;
  GtkCustomFilter   *filter;
  RlxLogFilter       which;
};

G_DEFINE_FINAL_TYPE (RlxEventsView, rlx_events_view, GTK_TYPE_WIDGET)

enum { PROP_0, PROP_FILTER, N_PROPS };
static GParamSpec *props[N_PROPS];

static gboolean
match (gpointer item, gpointer user_data)
{
  return rlx_event_item_in_filter (item, ((RlxEventsView *) user_data)->which);
}

static void
show_accuracy (RlxEventsView *self)
{
  const char *title = self->log ? rlx_event_log_get_accuracy_title (self->log) : NULL;

  gtk_widget_set_visible (self->accuracy_row, title != NULL);
  gtk_label_set_label (self->accuracy_title, title ? title : "");
  gtk_label_set_label (self->accuracy_detail,
                       title ? rlx_event_log_get_accuracy_detail (self->log) : "");
}

static void
on_accuracy (RlxEventLog *log, GParamSpec *pspec, RlxEventsView *self)
{
  show_accuracy (self);
}

void
rlx_events_view_set_log (RlxEventsView *self, RlxEventLog *log)
{
  g_autoptr(GListModel) reversed = NULL;
  GtkNoSelection *selection;

  g_return_if_fail (RLX_IS_EVENTS_VIEW (self));
  if (self->log)
    g_signal_handlers_disconnect_by_data (self->log, self);
  g_set_object (&self->log, log);
  reversed = log ? rlx_reversed_new (G_LIST_MODEL (log)) : NULL;
  gtk_filter_list_model_set_model (self->shown, reversed);
  if (log)
    g_signal_connect (log, "notify::accuracy-title", G_CALLBACK (on_accuracy), self);
  selection = gtk_no_selection_new (g_object_ref (G_LIST_MODEL (self->shown)));
  gtk_list_view_set_model (self->list, GTK_SELECTION_MODEL (selection));
  rlx_list_keep_newest_visible (self->list, G_LIST_MODEL (selection));
  g_object_unref (selection);
  show_accuracy (self);
}

void
rlx_events_view_set_filter (RlxEventsView *self, RlxLogFilter filter)
{
  GtkToggleButton *button;

  g_return_if_fail (RLX_IS_EVENTS_VIEW (self));
  g_return_if_fail (filter <= RLX_LOG_FILTER_WARNINGS);
  button = filter == RLX_LOG_FILTER_MEMBERSHIP ? self->filter_membership
         : filter == RLX_LOG_FILTER_WARNINGS   ? self->filter_warnings
                                               : self->filter_all;
  if (!gtk_toggle_button_get_active (button))
    gtk_toggle_button_set_active (button, TRUE);   /* comes back through on_toggled */
  if (self->which == filter)
    return;
  self->which = filter;
  gtk_filter_changed (GTK_FILTER (self->filter), GTK_FILTER_CHANGE_DIFFERENT);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_FILTER]);
}

RlxLogFilter
rlx_events_view_get_filter (RlxEventsView *self)
{
  g_return_val_if_fail (RLX_IS_EVENTS_VIEW (self), RLX_LOG_FILTER_ALL);
  return self->which;
}

GListModel *
rlx_events_view_get_shown (RlxEventsView *self)
{
  g_return_val_if_fail (RLX_IS_EVENTS_VIEW (self), NULL);
  return G_LIST_MODEL (self->shown);
}

static void
on_toggled (GtkToggleButton *button, RlxEventsView *self)
{
  if (!gtk_toggle_button_get_active (button))
    return;
  rlx_events_view_set_filter (self, button == self->filter_membership ? RLX_LOG_FILTER_MEMBERSHIP
                                    : button == self->filter_warnings ? RLX_LOG_FILTER_WARNINGS
                                                                       : RLX_LOG_FILTER_ALL);
}

GtkWidget *
rlx_events_view_new (void)
{
  return g_object_new (RLX_TYPE_EVENTS_VIEW, NULL);
}

static void
rlx_events_view_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  switch (id)
    {
    case PROP_FILTER: g_value_set_int (value, RLX_EVENTS_VIEW (object)->which); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_events_view_set_property (GObject *object, guint id, const GValue *value, GParamSpec *pspec)
{
  switch (id)
    {
    case PROP_FILTER: rlx_events_view_set_filter (RLX_EVENTS_VIEW (object), g_value_get_int (value)); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_events_view_dispose (GObject *object)
{
  RlxEventsView *self = RLX_EVENTS_VIEW (object);
  GtkWidget *child;

  if (self->log)
    g_signal_handlers_disconnect_by_data (self->log, self);
  g_clear_object (&self->log);
  gtk_widget_dispose_template (GTK_WIDGET (self), RLX_TYPE_EVENTS_VIEW);
  /* GTK 4.8 unparents only the bound children */
  while ((child = gtk_widget_get_first_child (GTK_WIDGET (self))))
    gtk_widget_unparent (child);
  g_clear_object (&self->shown);
  G_OBJECT_CLASS (rlx_events_view_parent_class)->dispose (object);
}

static void
rlx_events_view_class_init (RlxEventsViewClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  object_class->dispose = rlx_events_view_dispose;
  object_class->get_property = rlx_events_view_get_property;
  object_class->set_property = rlx_events_view_set_property;
  props[PROP_FILTER] = g_param_spec_int ("filter", NULL, NULL, RLX_LOG_FILTER_ALL,
                                         RLX_LOG_FILTER_WARNINGS, RLX_LOG_FILTER_ALL,
                                         G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY |
                                         G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, props);
  gtk_widget_class_set_template_from_resource (widget_class,
                                               "/io/github/rlx/Cluster/ui/rlx-events-view.ui");
  gtk_widget_class_bind_template_child (widget_class, RlxEventsView, filter_all);
  gtk_widget_class_bind_template_child (widget_class, RlxEventsView, filter_membership);
  gtk_widget_class_bind_template_child (widget_class, RlxEventsView, filter_warnings);
  gtk_widget_class_bind_template_child (widget_class, RlxEventsView, accuracy_row);
  gtk_widget_class_bind_template_child (widget_class, RlxEventsView, accuracy_title);
  gtk_widget_class_bind_template_child (widget_class, RlxEventsView, accuracy_detail);
  gtk_widget_class_bind_template_child (widget_class, RlxEventsView, list);
  gtk_widget_class_bind_template_callback (widget_class, on_toggled);
  gtk_widget_class_set_layout_manager_type (widget_class, GTK_TYPE_BOX_LAYOUT);
  gtk_widget_class_set_css_name (widget_class, "rlx-events-view");
}

static void
rlx_events_view_init (RlxEventsView *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  gtk_orientable_set_orientation (GTK_ORIENTABLE (gtk_widget_get_layout_manager (GTK_WIDGET (self))),
                                  GTK_ORIENTATION_VERTICAL);
  self->filter = gtk_custom_filter_new (match, self, NULL);
  self->shown = gtk_filter_list_model_new (NULL, GTK_FILTER (self->filter));   /* takes the filter */
  rlx_events_view_set_log (self, NULL);
}
