/* rlx-roster-view.c — the roster as a GtkColumnView (see the header) */
#include "rlx-config.h"
#include "rlx-roster-view.h"
#include "rlx-figure.h"
#include "core/rlx-coordinator.h"

#include <glib/gi18n.h>
#include <math.h>
#include <string.h>

struct _RlxRosterView
{
  GtkWidget      parent_instance;

  GtkColumnView *column_view;
  GtkColumnViewColumn *speed_column;
  GtkColumnViewColumn *fallback_column;
  GtkColumnViewColumn *precision_column, *state_column, *sent_column, *received_column;
  GtkColumnViewColumn *link_column;
  GtkScrolledWindow *scroller;
  GtkLabel      *banner_label;
  GtkLabel      *summary;
  GListModel    *model;

  char          *shared_reason;    /* every row's fallback, when they all agree */
  GPtrArray     *fallback_labels;  /* the bound fallback cells (GtkLabel) */
  guint          widths_id;
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

/* @v to two significant digits, without an exponent: 123456 → "120000" */
static char *
two_digits (double v)
{
  double e = floor (log10 (v));
  double unit = pow (10, e - 1);
  double r = round (v / unit) * unit;

  return g_strdup_printf ("%.*f", e >= 1 ? 0 : (int) (1 - e), r);
}

char *
rlx_roster_format_speed (double samples_per_s)
{
  if (!(samples_per_s > 0))
    /* Translators: samples/s not measured yet */
    return g_strdup (_("—"));
  /* two significant digits: the speed is remeasured every few steps, and a
   * label that changes less often redraws less often */
  if (samples_per_s >= 1e6)
    {
      g_autofree char *m = two_digits (samples_per_s / 1e6);
      return g_strdup_printf ("%s M", m);
    }
  if (samples_per_s >= 1e3)
    {
      g_autofree char *k = two_digits (samples_per_s / 1e3);
      return g_strdup_printf ("%s k", k);
    }
  return two_digits (samples_per_s);
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

char *
rlx_roster_format_fallback_tag (const char *fallback)
{
  static const char *const cuts[] = { " (", " — ", ", ", "; " };
  const char *end;
  g_autofree char *head = NULL;

  if (fallback == NULL || *fallback == '\0')
    return rlx_roster_format_fallback (fallback);
  end = fallback + strlen (fallback);
  for (guint i = 0; i < G_N_ELEMENTS (cuts); i++)
    {
      const char *c = strstr (fallback, cuts[i]);
      if (c && c > fallback && c < end)
        end = c;
    }
  head = g_strndup (fallback, (gsize) (end - fallback));
  if (g_utf8_strlen (head, -1) > RLX_ROSTER_TAG_CHARS)
    {
      g_autofree char *cut = g_utf8_substring (head, 0, RLX_ROSTER_TAG_CHARS - 1);
      return g_strconcat (g_strchomp (cut), "…", NULL);
    }
  return g_steal_pointer (&head);
}

char *
rlx_roster_format_row_name (RlxRosterEntry *entry)
{
  g_autofree char *speed = rlx_roster_format_speed (rlx_roster_entry_get_speed (entry));

  /* Translators: a roster row as a screen reader says it: rank, host,
   * backend, state, samples per second */
  return g_strdup_printf (_("Rank %u, %s, %s, %s, %s samples/s"), rlx_roster_entry_get_rank (entry),
                          rlx_roster_entry_get_host (entry), rlx_roster_entry_get_backend (entry),
                          rlx_roster_entry_get_state (entry), speed);
}

/* GTK 4.8 gives a column view's rows no name of their own (the row widget
 * is internal, announced as "GtkListItemWidget"): the speed cell, which is
 * refreshed about once a second anyway, names its row. */
static void
name_row (RlxRosterEntry *entry, GtkWidget *cell_child)
{
  GtkWidget *cell = gtk_widget_get_parent (cell_child);
  GtkWidget *row = cell ? gtk_widget_get_parent (cell) : NULL;
  g_autofree char *name = NULL;

  if (row == NULL || GTK_IS_COLUMN_VIEW (row))
    return;
  name = rlx_roster_format_row_name (entry);
  gtk_accessible_update_property (GTK_ACCESSIBLE (row), GTK_ACCESSIBLE_PROPERTY_LABEL, name, -1);
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

/* The speed is remeasured every few steps (20 times a second in a fast
 * cohort) and is noisy. A bound label would be set, laid out and redrawn at
 * every measurement, so this column shows a new figure at most once a second
 * and only when its text changes. */
#define SPEED_EVERY_US G_USEC_PER_SEC

static void
update_speed_label (RlxRosterEntry *entry, GParamSpec *pspec, GtkInscription *label)
{
  gint64 now = g_get_monotonic_time ();
  gint64 last = GPOINTER_TO_SIZE (g_object_get_data (G_OBJECT (label), "rlx-shown-at"));
  g_autofree char *text = NULL;

  if (pspec != NULL && now - last < SPEED_EVERY_US)
    return;
  g_object_set_data (G_OBJECT (label), "rlx-shown-at", GSIZE_TO_POINTER ((gsize) now));
  text = rlx_roster_format_speed (rlx_roster_entry_get_speed (entry));
  rlx_figure_set_text (label, text);
  name_row (entry, GTK_WIDGET (label));
}

static void
speed_setup (GtkSignalListItemFactory *factory, GtkListItem *item, gpointer user_data)
{
  /* a figure: its new text redraws the cell without a relayout of the list */
  GtkWidget *label = rlx_figure_new (5, 8, 0);

  gtk_list_item_set_child (item, label);
}

static void
speed_bind (GtkSignalListItemFactory *factory, GtkListItem *item, gpointer user_data)
{
  RlxRosterEntry *entry = gtk_list_item_get_item (item);
  GtkWidget *label = gtk_list_item_get_child (item);

  update_speed_label (entry, NULL, GTK_INSCRIPTION (label));
  g_signal_connect_object (entry, "notify::speed", G_CALLBACK (update_speed_label), label, 0);
}

static void
speed_unbind (GtkSignalListItemFactory *factory, GtkListItem *item, gpointer user_data)
{
  RlxRosterEntry *entry = gtk_list_item_get_item (item);

  if (entry)
    g_signal_handlers_disconnect_by_func (entry, update_speed_label, gtk_list_item_get_child (item));
}

static char *
format_bytes_cb (GObject *item, guint64 bytes)
{
  return rlx_roster_format_bytes (bytes);
}

/* The fallback column: the reason in full, or, when every rank shares it
 * (said once in the banner above), a short tag with the full text in its
 * tooltip. Rows stay one line tall, so more of them fit. */
static void
update_fallback_label (RlxRosterView *self, GtkLabel *label)
{
  RlxRosterEntry *entry = g_object_get_data (G_OBJECT (label), "rlx-entry");
  const char *fallback = entry ? rlx_roster_entry_get_fallback (entry) : NULL;
  g_autofree char *text = NULL;
  gboolean shared = self->shared_reason != NULL;

  text = shared ? rlx_roster_format_fallback_tag (fallback) : rlx_roster_format_fallback (fallback);
  if (g_strcmp0 (gtk_label_get_label (label), text) != 0)
    gtk_label_set_label (label, text);
  gtk_label_set_wrap (label, !shared);
  gtk_label_set_ellipsize (label, shared ? PANGO_ELLIPSIZE_END : PANGO_ELLIPSIZE_NONE);
  gtk_widget_set_tooltip_text (GTK_WIDGET (label), shared && fallback && *fallback ? fallback : NULL);
}

static void update_shared_reason (RlxRosterView *self);

static void
on_fallback_changed (RlxRosterEntry *entry, GParamSpec *pspec, RlxRosterView *self)
{
  update_shared_reason (self);
}

static void
fallback_setup (GtkSignalListItemFactory *factory, GtkListItem *item, RlxRosterView *self)
{
  GtkWidget *label = gtk_label_new (NULL);

  gtk_label_set_xalign (GTK_LABEL (label), 0);
  gtk_label_set_wrap_mode (GTK_LABEL (label), PANGO_WRAP_WORD_CHAR);
  gtk_label_set_max_width_chars (GTK_LABEL (label), 34);
  gtk_label_set_width_chars (GTK_LABEL (label), RLX_ROSTER_TAG_CHARS);
  gtk_list_item_set_child (item, label);
}

static void
fallback_bind (GtkSignalListItemFactory *factory, GtkListItem *item, RlxRosterView *self)
{
  GtkWidget *label = gtk_list_item_get_child (item);

  g_object_set_data_full (G_OBJECT (label), "rlx-entry", g_object_ref (gtk_list_item_get_item (item)),
                          g_object_unref);
  g_ptr_array_add (self->fallback_labels, label);
  update_fallback_label (self, GTK_LABEL (label));
}

static void
fallback_unbind (GtkSignalListItemFactory *factory, GtkListItem *item, RlxRosterView *self)
{
  GtkWidget *label = gtk_list_item_get_child (item);

  if (self->fallback_labels)
    g_ptr_array_remove_fast (self->fallback_labels, label);
  g_object_set_data (G_OBJECT (label), "rlx-entry", NULL);
}

/* Every row's fallback, when there are two rows or more and they agree. */
static void
update_shared_reason (RlxRosterView *self)
{
  guint n = self->model ? g_list_model_get_n_items (self->model) : 0;
  g_autofree char *shared = NULL;

  for (guint i = 0; i < n; i++)
    {
      g_autoptr(RlxRosterEntry) entry = g_list_model_get_item (self->model, i);
      const char *fallback = rlx_roster_entry_get_fallback (entry);

      if (g_signal_handler_find (entry, G_SIGNAL_MATCH_FUNC | G_SIGNAL_MATCH_DATA, 0, 0, NULL,
                                 on_fallback_changed, self) == 0)
        g_signal_connect_object (entry, "notify::fallback", G_CALLBACK (on_fallback_changed),
                                 self, 0);
      if (fallback == NULL || *fallback == '\0' || (i > 0 && g_strcmp0 (shared, fallback) != 0))
        {
          g_clear_pointer (&shared, g_free);
          break;
        }
      if (i == 0)
        shared = g_strdup (fallback);
    }
  if (n < 2)
    g_clear_pointer (&shared, g_free);
  if (g_strcmp0 (shared, self->shared_reason) == 0)
    return;
  g_free (self->shared_reason);
  self->shared_reason = g_steal_pointer (&shared);
  if (self->shared_reason)
    {
      /* Translators: the roster's banner, when every rank passed over a
       * faster backend for the same reason; %s is the reason */
      g_autofree char *text = g_strdup_printf (_("Every rank passed over a faster backend for the same reason: %s"),
                                               self->shared_reason);
      gtk_label_set_label (self->banner_label, text);
    }
  gtk_widget_set_visible (GTK_WIDGET (self->banner_label), self->shared_reason != NULL);
  for (guint i = 0; i < self->fallback_labels->len; i++)
    update_fallback_label (self, self->fallback_labels->pdata[i]);
}

const char *
rlx_roster_view_get_shared_reason (RlxRosterView *self)
{
  g_return_val_if_fail (RLX_IS_ROSTER_VIEW (self), NULL);
  return self->shared_reason;
}

/* Columns give way at narrow widths, least needed first (the bytes are in
 * the wire counters too); nothing then scrolls sideways at 800 px. Applied
 * after the allocation that measured the width (hiding a column during it
 * would leave rows to draw unallocated). */
static gboolean
apply_widths (gpointer user_data)
{
  RlxRosterView *self = user_data;
  double w = gtk_adjustment_get_page_size (gtk_scrolled_window_get_hadjustment (self->scroller));

  self->widths_id = 0;
  if (w <= 0)
    return G_SOURCE_REMOVE;
  /* the measured link (--sync auto) before the byte counts, which the wire
   * panel totals anyway */
  gtk_column_view_column_set_visible (self->link_column, w >= 900);
  gtk_column_view_column_set_visible (self->received_column, w >= 1000);
  gtk_column_view_column_set_visible (self->sent_column, w >= 920);
  gtk_column_view_column_set_visible (self->precision_column, w >= 840);
  gtk_column_view_column_set_visible (self->state_column, w >= 700);
  return G_SOURCE_REMOVE;
}

static void
on_width_changed (GtkAdjustment *hadj, GParamSpec *pspec, RlxRosterView *self)
{
  if (self->widths_id == 0)
    self->widths_id = g_idle_add (apply_widths, self);
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
  update_shared_reason (self);
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
  update_shared_reason (self);
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
  g_clear_pointer (&self->shared_reason, g_free);
  g_clear_handle_id (&self->widths_id, g_source_remove);
  gtk_widget_dispose_template (GTK_WIDGET (self), RLX_TYPE_ROSTER_VIEW);
  {
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child (GTK_WIDGET (self))))
      gtk_widget_unparent (child);
  }
  G_OBJECT_CLASS (rlx_roster_view_parent_class)->dispose (object);
}

static void
rlx_roster_view_finalize (GObject *object)
{
  RlxRosterView *self = RLX_ROSTER_VIEW (object);

  g_clear_pointer (&self->fallback_labels, g_ptr_array_unref);
  G_OBJECT_CLASS (rlx_roster_view_parent_class)->finalize (object);
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
  object_class->finalize = rlx_roster_view_finalize;
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
  gtk_widget_class_bind_template_child (widget_class, RlxRosterView, speed_column);
  gtk_widget_class_bind_template_child (widget_class, RlxRosterView, fallback_column);
  gtk_widget_class_bind_template_child (widget_class, RlxRosterView, precision_column);
  gtk_widget_class_bind_template_child (widget_class, RlxRosterView, state_column);
  gtk_widget_class_bind_template_child (widget_class, RlxRosterView, link_column);
  gtk_widget_class_bind_template_child (widget_class, RlxRosterView, sent_column);
  gtk_widget_class_bind_template_child (widget_class, RlxRosterView, received_column);
  gtk_widget_class_bind_template_child (widget_class, RlxRosterView, scroller);
  gtk_widget_class_bind_template_child (widget_class, RlxRosterView, banner_label);
  gtk_widget_class_bind_template_callback (widget_class, format_bytes_cb);
  gtk_widget_class_set_layout_manager_type (widget_class, GTK_TYPE_BOX_LAYOUT);
  gtk_widget_class_set_css_name (widget_class, "rosterview");
}

static void
rlx_roster_view_init (RlxRosterView *self)
{
  g_autoptr(GtkListItemFactory) speed = gtk_signal_list_item_factory_new ();
  g_autoptr(GtkListItemFactory) fallback = gtk_signal_list_item_factory_new ();

  gtk_widget_init_template (GTK_WIDGET (self));
  g_signal_connect (speed, "setup", G_CALLBACK (speed_setup), NULL);
  g_signal_connect (speed, "bind", G_CALLBACK (speed_bind), NULL);
  g_signal_connect (speed, "unbind", G_CALLBACK (speed_unbind), NULL);
  gtk_column_view_column_set_factory (self->speed_column, speed);
  self->fallback_labels = g_ptr_array_new ();
  g_signal_connect (fallback, "setup", G_CALLBACK (fallback_setup), self);
  g_signal_connect (fallback, "bind", G_CALLBACK (fallback_bind), self);
  g_signal_connect (fallback, "unbind", G_CALLBACK (fallback_unbind), self);
  gtk_column_view_column_set_factory (self->fallback_column, fallback);
  g_signal_connect_object (gtk_scrolled_window_get_hadjustment (self->scroller), "notify::page-size",
                           G_CALLBACK (on_width_changed), self, 0);
  gtk_orientable_set_orientation (GTK_ORIENTABLE (gtk_widget_get_layout_manager (GTK_WIDGET (self))),
                                  GTK_ORIENTATION_VERTICAL);
  update_summary (self);
}
