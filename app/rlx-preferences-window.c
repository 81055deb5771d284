/* rlx-preferences-window.c — training settings (see the header) */
#include "rlx-config.h"
#include "rlx-preferences-window.h"

#include <glib/gi18n.h>

struct _RlxPreferencesWindow
{
  AdwPreferencesWindow parent_instance;

  GSettings            *settings;
  gboolean              locked;

  AdwActionRow         *lock_row;
  AdwPreferencesGroup  *steps_group;
  AdwComboRow          *model_row;
  AdwComboRow          *dataset_row;
  AdwComboRow          *backend_row;
  GtkStringList        *backend_list;
  GtkSpinButton        *batch_spin;
  GtkSpinButton        *lr_spin;
  GtkSpinButton        *seed_spin;
  GtkSpinButton        *evaluate_spin;
  AdwPreferencesGroup  *sync_group;
  AdwComboRow          *sync_row;
  AdwActionRow         *sync_h_row;
  GtkSpinButton        *sync_h_spin;
  GtkSwitch            *log_switch;
  GtkSwitch            *local_ranks_switch;
  AdwPreferencesGroup  *network_group;
  GtkSwitch            *host_switch;
  GtkSpinButton        *port_spin;
};

G_DEFINE_FINAL_TYPE (RlxPreferencesWindow, rlx_preferences_window, ADW_TYPE_PREFERENCES_WINDOW)

enum { PROP_0, PROP_LOCKED, N_PROPS };
static GParamSpec *props[N_PROPS];

/* the settings' values, in the combo rows' order */
static const char *const models[] = { "mnist-mlp", "mnist-mlp-xl", "mnist-cnn", NULL };
static const char *const datasets[] = { "fashion-mnist", "synthetic", NULL };
static const char *const backends[] = { "auto", "cpu", "vulkan", NULL };
static const char *const syncs[] = { "auto", "step", "outer", NULL };

static guint
index_of (const char *const *values, const char *value)
{
  for (guint i = 0; values[i]; i++)
    if (g_strcmp0 (values[i], value) == 0)
      return i;
  return G_MAXUINT;
}

/* "selected" ↔ a string key, through a table */
static gboolean
get_selected (GValue *value, GVariant *variant, gpointer user_data)
{
  const char *const *values = user_data;
  guint i = index_of (values, g_variant_get_string (variant, NULL));

  g_value_set_uint (value, i == G_MAXUINT ? 0 : i);
  return TRUE;
}

static GVariant *
set_selected (const GValue *value, const GVariantType *type, gpointer user_data)
{
  const char *const *values = user_data;
  guint i = g_value_get_uint (value);

  if (i >= g_strv_length ((char **) values))
    return NULL;
  return g_variant_new_string (values[i]);
}

/* Backend requests outside the three choices ("vulkan:NAME") show as a
 * fourth entry with their own text. */
static gboolean
get_backend (GValue *value, GVariant *variant, gpointer user_data)
{
  RlxPreferencesWindow *self = user_data;
  const char *request = g_variant_get_string (variant, NULL);
  guint i = index_of (backends, request);

  if (i == G_MAXUINT)
    {
      if (g_list_model_get_n_items (G_LIST_MODEL (self->backend_list)) == 3)
        gtk_string_list_append (self->backend_list, request);
      i = 3;
    }
  g_value_set_uint (value, i);
  return TRUE;
}

static GVariant *
set_backend (const GValue *value, const GVariantType *type, gpointer user_data)
{
  RlxPreferencesWindow *self = user_data;
  guint i = g_value_get_uint (value);

  if (i < 3)
    return g_variant_new_string (backends[i]);
  return g_variant_new_string (gtk_string_list_get_string (self->backend_list, i));
}

char *
rlx_preferences_describe_setup (GSettings *settings)
{
  g_autofree char *model = g_settings_get_string (settings, "model");
  g_autofree char *dataset = g_settings_get_string (settings, "dataset");
  g_autofree char *backend = g_settings_get_string (settings, "backend");
  const char *model_name, *dataset_name, *backend_name;
  g_autofree char *lr = g_strdup_printf ("%g", g_settings_get_double (settings, "learning-rate"));

  model_name = g_str_equal (model, "mnist-mlp-xl") ? _("Large MLP")
             : g_str_equal (model, "mnist-cnn") ? _("CNN") : _("MLP");
  dataset_name = g_str_equal (dataset, "synthetic") ? _("synthetic data") : _("Fashion-MNIST");
  backend_name = g_str_equal (backend, "auto") ? _("automatic backend")
               : g_str_equal (backend, "cpu") ? _("CPU") : backend;
  /* Translators: model on dataset · batch · learning rate · backend */
  return g_strdup_printf (_("%s on %s · batch %u · learning rate %s · %s"), model_name,
                          dataset_name, g_settings_get_uint (settings, "batch"), lr, backend_name);
}

void
rlx_preferences_window_set_locked (RlxPreferencesWindow *self, gboolean locked)
{
  g_return_if_fail (RLX_IS_PREFERENCES_WINDOW (self));

  locked = !!locked;
  self->locked = locked;
  gtk_widget_set_sensitive (GTK_WIDGET (self->model_row), !locked);
  gtk_widget_set_sensitive (GTK_WIDGET (self->dataset_row), !locked);
  gtk_widget_set_sensitive (GTK_WIDGET (self->backend_row), !locked);
  gtk_widget_set_sensitive (GTK_WIDGET (self->steps_group), !locked);
  gtk_widget_set_sensitive (GTK_WIDGET (self->network_group), !locked);
  gtk_widget_set_visible (GTK_WIDGET (self->lock_row), locked);
  gtk_widget_set_sensitive (GTK_WIDGET (self->sync_group), !locked);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_LOCKED]);
}

/* H means something only in the outer mode */
static void
on_sync_selected (RlxPreferencesWindow *self)
{
  gtk_widget_set_sensitive (GTK_WIDGET (self->sync_h_row),
                            adw_combo_row_get_selected (self->sync_row) == 2);
}

char *
rlx_preferences_sync_request (GSettings *settings)
{
  g_autofree char *mode = g_settings_get_string (settings, "sync");

  if (g_str_equal (mode, "outer"))
    return g_strdup_printf ("outer:%u", g_settings_get_uint (settings, "sync-h"));
  return g_steal_pointer (&mode);
}

GtkWidget *
rlx_preferences_window_new (GSettings *settings, gboolean locked)
{
  RlxPreferencesWindow *self;

  g_return_val_if_fail (G_IS_SETTINGS (settings), NULL);

  self = g_object_new (RLX_TYPE_PREFERENCES_WINDOW, NULL);
  self->settings = g_object_ref (settings);
  g_settings_bind_with_mapping (settings, "model", self->model_row, "selected",
                                G_SETTINGS_BIND_DEFAULT, get_selected, set_selected,
                                (gpointer) models, NULL);
  g_settings_bind_with_mapping (settings, "dataset", self->dataset_row, "selected",
                                G_SETTINGS_BIND_DEFAULT, get_selected, set_selected,
                                (gpointer) datasets, NULL);
  g_settings_bind_with_mapping (settings, "backend", self->backend_row, "selected",
                                G_SETTINGS_BIND_DEFAULT, get_backend, set_backend, self, NULL);
  g_settings_bind (settings, "batch", self->batch_spin, "value", G_SETTINGS_BIND_DEFAULT);
  g_settings_bind (settings, "learning-rate", self->lr_spin, "value", G_SETTINGS_BIND_DEFAULT);
  g_settings_bind (settings, "seed", self->seed_spin, "value", G_SETTINGS_BIND_DEFAULT);
  g_settings_bind (settings, "evaluate-every", self->evaluate_spin, "value",
                   G_SETTINGS_BIND_DEFAULT);
  g_settings_bind_with_mapping (settings, "sync", self->sync_row, "selected",
                                G_SETTINGS_BIND_DEFAULT, get_selected, set_selected,
                                (gpointer) syncs, NULL);
  g_settings_bind (settings, "sync-h", self->sync_h_spin, "value", G_SETTINGS_BIND_DEFAULT);
  g_signal_connect_object (self->sync_row, "notify::selected", G_CALLBACK (on_sync_selected),
                           self, G_CONNECT_SWAPPED);
  on_sync_selected (self);
  g_settings_bind (settings, "log-scale", self->log_switch, "active", G_SETTINGS_BIND_DEFAULT);
  g_settings_bind (settings, "precision-local-ranks", self->local_ranks_switch, "active",
                   G_SETTINGS_BIND_DEFAULT);
  g_settings_bind (settings, "host", self->host_switch, "active", G_SETTINGS_BIND_DEFAULT);
  g_settings_bind (settings, "host-port", self->port_spin, "value", G_SETTINGS_BIND_DEFAULT);
  g_object_bind_property (self->host_switch, "active", self->port_spin, "sensitive",
                          G_BINDING_SYNC_CREATE);
  rlx_preferences_window_set_locked (self, locked);
  return GTK_WIDGET (self);
}

static void
rlx_preferences_window_dispose (GObject *object)
{
  RlxPreferencesWindow *self = RLX_PREFERENCES_WINDOW (object);

  /* a destroyed window no longer follows the settings (the backend's
   * mapping reads the list disposed below) */
  if (self->settings)
    {
      g_settings_unbind (self->model_row, "selected");
      g_settings_unbind (self->dataset_row, "selected");
      g_settings_unbind (self->backend_row, "selected");
      g_settings_unbind (self->batch_spin, "value");
      g_settings_unbind (self->lr_spin, "value");
      g_settings_unbind (self->seed_spin, "value");
      g_settings_unbind (self->evaluate_spin, "value");
      g_settings_unbind (self->log_switch, "active");
      g_settings_unbind (self->local_ranks_switch, "active");
      g_settings_unbind (self->host_switch, "active");
      g_settings_unbind (self->port_spin, "value");
    }
  g_clear_object (&self->settings);
  gtk_widget_dispose_template (GTK_WIDGET (self), RLX_TYPE_PREFERENCES_WINDOW);
  G_OBJECT_CLASS (rlx_preferences_window_parent_class)->dispose (object);
}

static void
rlx_preferences_window_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  switch (id)
    {
    case PROP_LOCKED: g_value_set_boolean (value, RLX_PREFERENCES_WINDOW (object)->locked); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_preferences_window_set_property (GObject *object, guint id, const GValue *value,
                                     GParamSpec *pspec)
{
  switch (id)
    {
    case PROP_LOCKED:
      rlx_preferences_window_set_locked (RLX_PREFERENCES_WINDOW (object), g_value_get_boolean (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_preferences_window_class_init (RlxPreferencesWindowClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  object_class->dispose = rlx_preferences_window_dispose;
  object_class->get_property = rlx_preferences_window_get_property;
  object_class->set_property = rlx_preferences_window_set_property;
  props[PROP_LOCKED] = g_param_spec_boolean ("locked", NULL, NULL, FALSE,
                                             G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY |
                                             G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, props);

  gtk_widget_class_set_template_from_resource (widget_class,
                                               "/io/github/rlx/Cluster/ui/rlx-preferences-window.ui");
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, lock_row);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, steps_group);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, model_row);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, dataset_row);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, backend_row);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, backend_list);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, batch_spin);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, lr_spin);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, seed_spin);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, evaluate_spin);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, sync_group);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, sync_row);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, sync_h_row);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, sync_h_spin);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, log_switch);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, local_ranks_switch);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, network_group);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, host_switch);
  gtk_widget_class_bind_template_child (widget_class, RlxPreferencesWindow, port_spin);
}

/* Shown while joined, the page starts at its top, on the note that says
 * why most rows are dimmed: the first control still sensitive sits at the
 * bottom, and taking the focus there would scroll the note away. */
static void
on_map (GtkWidget *widget, gpointer user_data)
{
  RlxPreferencesWindow *self = RLX_PREFERENCES_WINDOW (widget);

  if (self->locked)
    gtk_widget_grab_focus (GTK_WIDGET (self->lock_row));
}

static void
rlx_preferences_window_init (RlxPreferencesWindow *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  g_signal_connect (self, "map", G_CALLBACK (on_map), NULL);
}
