/* rlx-cohort-panel.c — the hash light and the timeline (see the header) */
#include "rlx-config.h"
#include "rlx-cohort-panel.h"
#include "rlx-events-view.h"

#include <glib/gi18n.h>

struct _RlxCohortPanel
{
  GtkWidget    parent_instance;
  GtkWidget   *light;
  GtkImage    *light_icon;
  GtkLabel    *light_label;
  GtkLabel    *ranks_label;
  GtkListView *marks;
  GtkWidget   *marks_empty;
  RlxTimeline *timeline;
  gboolean     alarm;
};

G_DEFINE_FINAL_TYPE (RlxCohortPanel, rlx_cohort_panel, GTK_TYPE_WIDGET)

void
rlx_cohort_panel_refresh (RlxCohortPanel *self)
{
  g_autofree char *ranks = NULL;
  const char *text;
  gboolean alarm;

  g_return_if_fail (RLX_IS_COHORT_PANEL (self));
  ranks = self->timeline ? rlx_timeline_dup_ranks_text (self->timeline) : NULL;
  gtk_widget_set_visible (GTK_WIDGET (self->ranks_label), ranks != NULL);
  if (g_strcmp0 (gtk_label_get_label (self->ranks_label), ranks ? ranks : "") != 0)
    gtk_label_set_label (self->ranks_label, ranks ? ranks : "");
  text = self->timeline ? rlx_timeline_get_hash_text (self->timeline) : NULL;
  alarm = self->timeline && rlx_timeline_get_hash_alarm (self->timeline);
  if (text == NULL)
    text = _("No step committed yet");
  if (g_strcmp0 (gtk_label_get_label (self->light_label), text) != 0)
    {
      gtk_label_set_label (self->light_label, text);
      gtk_accessible_update_property (GTK_ACCESSIBLE (self->light),
                                      GTK_ACCESSIBLE_PROPERTY_DESCRIPTION, text, -1);
    }
  if (alarm != self->alarm)
    {
      self->alarm = alarm;
      gtk_image_set_from_icon_name (self->light_icon,
                                    alarm ? "dialog-warning-symbolic" : "emblem-ok-symbolic");
      if (alarm)
        {
          gtk_widget_add_css_class (self->light, "error");
          gtk_widget_remove_css_class (self->light, "success");
        }
      else
        {
          gtk_widget_remove_css_class (self->light, "error");
          gtk_widget_add_css_class (self->light, "success");
        }
    }
}

static void
on_alarm (RlxTimeline *timeline, GParamSpec *pspec, RlxCohortPanel *self)
{
  rlx_cohort_panel_refresh (self);
}

static void
on_marks_changed (GListModel *model, guint pos, guint removed, guint added, RlxCohortPanel *self)
{
  gtk_widget_set_visible (self->marks_empty, g_list_model_get_n_items (model) == 0);
}

void
rlx_cohort_panel_set_timeline (RlxCohortPanel *self, RlxTimeline *timeline)
{
  g_autoptr(GtkNoSelection) selection = NULL;

  g_return_if_fail (RLX_IS_COHORT_PANEL (self));
  if (self->timeline)
    g_signal_handlers_disconnect_by_data (self->timeline, self);
  g_set_object (&self->timeline, timeline);
  if (timeline)
    {
      g_signal_connect (timeline, "notify::hash-alarm", G_CALLBACK (on_alarm), self);
      g_signal_connect (timeline, "notify::hash-text", G_CALLBACK (on_alarm), self);
      g_signal_connect (timeline, "items-changed", G_CALLBACK (on_marks_changed), self);
      selection = gtk_no_selection_new (g_object_ref (G_LIST_MODEL (timeline)));
    }
  gtk_list_view_set_model (self->marks, GTK_SELECTION_MODEL (selection));
  if (selection)
    rlx_list_keep_newest_visible (self->marks, G_LIST_MODEL (selection));
  gtk_widget_set_visible (self->marks_empty,
                          timeline == NULL || g_list_model_get_n_items (G_LIST_MODEL (timeline)) == 0);
  rlx_cohort_panel_refresh (self);
}

const char *
rlx_cohort_panel_get_ranks_text (RlxCohortPanel *self)
{
  g_return_val_if_fail (RLX_IS_COHORT_PANEL (self), NULL);
  return gtk_widget_get_visible (GTK_WIDGET (self->ranks_label))
           ? gtk_label_get_label (self->ranks_label) : NULL;
}

const char *
rlx_cohort_panel_get_light_text (RlxCohortPanel *self)
{
  g_return_val_if_fail (RLX_IS_COHORT_PANEL (self), NULL);
  return gtk_label_get_label (self->light_label);
}

gboolean
rlx_cohort_panel_get_alarm (RlxCohortPanel *self)
{
  g_return_val_if_fail (RLX_IS_COHORT_PANEL (self), FALSE);
  return self->alarm;
}

GtkWidget *
rlx_cohort_panel_new (void)
{
  return g_object_new (RLX_TYPE_COHORT_PANEL, NULL);
}

static void
rlx_cohort_panel_dispose (GObject *object)
{
  RlxCohortPanel *self = RLX_COHORT_PANEL (object);
  GtkWidget *child;

  if (self->timeline)
    g_signal_handlers_disconnect_by_data (self->timeline, self);
  g_clear_object (&self->timeline);
  gtk_widget_dispose_template (GTK_WIDGET (self), RLX_TYPE_COHORT_PANEL);
  /* GTK 4.8 unparents only the bound children */
  while ((child = gtk_widget_get_first_child (GTK_WIDGET (self))))
    gtk_widget_unparent (child);
  G_OBJECT_CLASS (rlx_cohort_panel_parent_class)->dispose (object);
}

static void
rlx_cohort_panel_class_init (RlxCohortPanelClass *klass)
{
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  G_OBJECT_CLASS (klass)->dispose = rlx_cohort_panel_dispose;
  g_type_ensure (RLX_TYPE_TIMELINE_MARK);
  gtk_widget_class_set_template_from_resource (widget_class,
                                               "/io/github/rlx/Cluster/ui/rlx-cohort-panel.ui");
  gtk_widget_class_bind_template_child (widget_class, RlxCohortPanel, light);
  gtk_widget_class_bind_template_child (widget_class, RlxCohortPanel, light_icon);
  gtk_widget_class_bind_template_child (widget_class, RlxCohortPanel, light_label);
  gtk_widget_class_bind_template_child (widget_class, RlxCohortPanel, ranks_label);
  gtk_widget_class_bind_template_child (widget_class, RlxCohortPanel, marks);
  gtk_widget_class_bind_template_child (widget_class, RlxCohortPanel, marks_empty);
  gtk_widget_class_set_layout_manager_type (widget_class, GTK_TYPE_BOX_LAYOUT);
  gtk_widget_class_set_css_name (widget_class, "rlx-cohort-panel");
}

static void
rlx_cohort_panel_init (RlxCohortPanel *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  gtk_orientable_set_orientation (GTK_ORIENTABLE (gtk_widget_get_layout_manager (GTK_WIDGET (self))),
                                  GTK_ORIENTATION_VERTICAL);
  gtk_widget_add_css_class (self->light, "success");
  rlx_cohort_panel_refresh (self);
}
