/* rlx-cohort-panel.c — the hash light, progress, links and the timeline
 * (see the header) */
#include "rlx-config.h"
#include "rlx-cohort-panel.h"
#include "rlx-events-view.h"
#include "rlx-figure.h"
#include "rlx-sparkline.h"
#include "core/rlx-coordinator.h"

#include <glib/gi18n.h>

struct _RlxCohortPanel
{
  GtkWidget    parent_instance;
  GtkWidget   *light;
  GtkImage    *light_icon;
  GtkInscription *light_label;   /* figures: new text, no relayout */
  GtkLabel    *ranks_label;
  GtkLabel    *progress_label;
  GtkLabel    *checkpoint_label;
  GtkLabel    *links_label;
  GtkExpander *details;
  RlxProgress *progress;     /* not owned */
  GtkGrid     *rates;
  GListModel  *roster;
  GHashTable  *lines;        /* node id → RateLine* */
  guint        next_row;
  GtkListView *marks;
  GtkWidget   *marks_empty;
  RlxTimeline *timeline;
  gboolean     alarm;
};

G_DEFINE_FINAL_TYPE (RlxCohortPanel, rlx_cohort_panel, GTK_TYPE_WIDGET)

/* One rank's row in the rates grid. */
typedef struct {
  GtkWidget *name, *line, *value, *split;
  gboolean   seen;
} RateLine;

static void
rate_line_free (gpointer p)
{
  g_free (p);
}

static char *
rate_text (double v)
{
  if (v >= 1e6)
    return g_strdup_printf ("%.1f M/s", v / 1e6);
  if (v >= 1e3)
    return g_strdup_printf ("%.0f k/s", v / 1e3);
  return g_strdup_printf ("%.0f /s", v);
}

/* @text (taken) in @label, hidden when NULL; only a change is written */
static void
show_text (GtkLabel *label, char *text)
{
  gtk_widget_set_visible (GTK_WIDGET (label), text != NULL);
  if (text && g_strcmp0 (gtk_label_get_label (label), text) != 0)
    {
      gtk_label_set_label (label, text);
      gtk_widget_set_tooltip_text (GTK_WIDGET (label), text);
    }
  g_free (text);
}

/* The figures that age with the clock, and the rates over the last
 * seconds: once a second (a label whose text changes costs a relayout; the
 * steps/s figure would change on every tick) */
static void
sample_progress (RlxCohortPanel *self)
{
  show_text (self->progress_label, self->progress ? rlx_progress_dup_text (self->progress) : NULL);
  show_text (self->checkpoint_label,
             self->progress ? rlx_progress_dup_checkpoint_text (self->progress,
                                                                g_get_monotonic_time ())
                            : NULL);
  show_text (self->links_label,
             self->progress && self->roster
               ? rlx_progress_dup_links_text (self->progress, self->roster) : NULL);
}

void
rlx_cohort_panel_sample (RlxCohortPanel *self)
{
  GHashTableIter it;
  gpointer key, value;
  guint n;

  g_return_if_fail (RLX_IS_COHORT_PANEL (self));
  sample_progress (self);
  n = self->roster ? g_list_model_get_n_items (self->roster) : 0;
  g_hash_table_iter_init (&it, self->lines);
  while (g_hash_table_iter_next (&it, &key, &value))
    ((RateLine *) value)->seen = FALSE;
  for (guint i = 0; i < n; i++)
    {
      g_autoptr(RlxRosterEntry) e = g_list_model_get_item (self->roster, i);
      const char *id = rlx_roster_entry_get_node_id (e);
      double speed = rlx_roster_entry_get_speed (e);
      g_autofree char *text = rate_text (speed);
      RateLine *l = g_hash_table_lookup (self->lines, id);

      if (l == NULL)
        {
          l = g_new0 (RateLine, 1);
          l->name = gtk_label_new (id);
          gtk_label_set_xalign (GTK_LABEL (l->name), 0);
          gtk_label_set_ellipsize (GTK_LABEL (l->name), PANGO_ELLIPSIZE_END);
          gtk_label_set_max_width_chars (GTK_LABEL (l->name), 18);
          l->line = rlx_sparkline_new ();
          gtk_widget_set_hexpand (l->line, TRUE);
          gtk_accessible_update_property (GTK_ACCESSIBLE (l->line), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                          id, -1);
          l->value = rlx_figure_new (9, 9, 1);
          gtk_grid_attach (self->rates, l->name, 0, self->next_row, 1, 1);
          gtk_grid_attach (self->rates, l->line, 1, self->next_row, 1, 1);
          gtk_grid_attach (self->rates, l->value, 2, self->next_row, 1, 1);
          l->split = gtk_label_new (NULL);
          gtk_label_set_xalign (GTK_LABEL (l->split), 0);
          gtk_widget_add_css_class (l->split, "numeric");
          gtk_widget_add_css_class (l->split, "dim-label");
          gtk_grid_attach (self->rates, l->split, 3, self->next_row, 1, 1);
          self->next_row++;
          g_hash_table_insert (self->lines, g_strdup (id), l);
        }
      l->seen = TRUE;
      rlx_sparkline_push (RLX_SPARKLINE (l->line), speed);
      rlx_figure_set_text (GTK_INSCRIPTION (l->value), text);
      show_text (GTK_LABEL (l->split),
                 self->progress ? rlx_progress_dup_timing_text (self->progress, id) : NULL);
    }
  /* ranks that left: their rows go */
  g_hash_table_iter_init (&it, self->lines);
  while (g_hash_table_iter_next (&it, &key, &value))
    {
      RateLine *l = value;
      if (l->seen)
        continue;
      gtk_grid_remove (self->rates, l->name);
      gtk_grid_remove (self->rates, l->line);
      gtk_grid_remove (self->rates, l->value);
      gtk_grid_remove (self->rates, l->split);
      g_hash_table_iter_remove (&it);
    }
  gtk_widget_set_visible (GTK_WIDGET (self->rates), g_hash_table_size (self->lines) > 0);
}

void
rlx_cohort_panel_set_roster (RlxCohortPanel *self, GListModel *roster)
{
  g_return_if_fail (RLX_IS_COHORT_PANEL (self));
  g_set_object (&self->roster, roster);
  rlx_cohort_panel_sample (self);
}

GtkWidget *
rlx_cohort_panel_get_sparkline (RlxCohortPanel *self, const char *node_id)
{
  RateLine *l;

  g_return_val_if_fail (RLX_IS_COHORT_PANEL (self), NULL);
  l = g_hash_table_lookup (self->lines, node_id);
  return l ? l->line : NULL;
}

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
  if (g_strcmp0 (gtk_inscription_get_text (self->light_label), text) != 0)
    {
      rlx_figure_set_text (self->light_label, text);
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

void
rlx_cohort_panel_set_progress (RlxCohortPanel *self, RlxProgress *progress)
{
  g_return_if_fail (RLX_IS_COHORT_PANEL (self));
  self->progress = progress;
  rlx_cohort_panel_refresh (self);
  sample_progress (self);
}

static const char *
shown (GtkLabel *label)
{
  return gtk_widget_get_visible (GTK_WIDGET (label)) ? gtk_label_get_label (label) : NULL;
}

const char *
rlx_cohort_panel_get_progress_text (RlxCohortPanel *self)
{
  g_return_val_if_fail (RLX_IS_COHORT_PANEL (self), NULL);
  return shown (self->progress_label);
}

const char *
rlx_cohort_panel_get_checkpoint_text (RlxCohortPanel *self)
{
  g_return_val_if_fail (RLX_IS_COHORT_PANEL (self), NULL);
  return shown (self->checkpoint_label);
}

const char *
rlx_cohort_panel_get_links_text (RlxCohortPanel *self)
{
  g_return_val_if_fail (RLX_IS_COHORT_PANEL (self), NULL);
  return shown (self->links_label);
}

GtkExpander *
rlx_cohort_panel_get_details (RlxCohortPanel *self)
{
  g_return_val_if_fail (RLX_IS_COHORT_PANEL (self), NULL);
  return self->details;
}

const char *
rlx_cohort_panel_get_timing_text (RlxCohortPanel *self, const char *node_id)
{
  RateLine *l;

  g_return_val_if_fail (RLX_IS_COHORT_PANEL (self), NULL);
  l = g_hash_table_lookup (self->lines, node_id);
  return l ? shown (GTK_LABEL (l->split)) : NULL;
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
  return gtk_inscription_get_text (self->light_label);
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
  g_clear_object (&self->roster);
  g_clear_pointer (&self->lines, g_hash_table_unref);
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
  gtk_widget_class_bind_template_child (widget_class, RlxCohortPanel, rates);
  gtk_widget_class_bind_template_child (widget_class, RlxCohortPanel, progress_label);
  gtk_widget_class_bind_template_child (widget_class, RlxCohortPanel, checkpoint_label);
  gtk_widget_class_bind_template_child (widget_class, RlxCohortPanel, links_label);
  gtk_widget_class_bind_template_child (widget_class, RlxCohortPanel, details);
  gtk_widget_class_bind_template_child (widget_class, RlxCohortPanel, marks);
  gtk_widget_class_bind_template_child (widget_class, RlxCohortPanel, marks_empty);
  gtk_widget_class_set_layout_manager_type (widget_class, GTK_TYPE_BOX_LAYOUT);
  gtk_widget_class_set_css_name (widget_class, "rlx-cohort-panel");
}

static void
rlx_cohort_panel_init (RlxCohortPanel *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  self->lines = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, rate_line_free);
  gtk_widget_set_visible (GTK_WIDGET (self->rates), FALSE);
  gtk_orientable_set_orientation (GTK_ORIENTABLE (gtk_widget_get_layout_manager (GTK_WIDGET (self))),
                                  GTK_ORIENTATION_VERTICAL);
  gtk_widget_add_css_class (self->light, "success");
  rlx_cohort_panel_refresh (self);
}
