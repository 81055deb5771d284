/* rlx-sync-panel.c — the sync mode, the links and the outer round (see the header) */
#include "rlx-config.h"
#include "rlx-sync-panel.h"

#include <glib/gi18n.h>
#include <inttypes.h>

#define COMMITS 8

struct _RlxSyncPanel
{
  GtkWidget       parent_instance;

  GtkWidget      *box;
  GtkLabel       *mode;
  GtkLabel       *reason;
  GtkLabel       *links;
  GtkLabel       *bytes;
  GtkProgressBar *round;

  gboolean        outer;
  guint           h;
  double          inner_lr;      /* the round's inner SGD rate (0: not said) */
  /* the last commits: their wire bytes so far and samples */
  guint64         wire[COMMITS], samples[COMMITS];
  guint           next, n;
  gint64          last_commit_us, round_us;
  guint64         last_step;
  gboolean        bytes_dirty;   /* a commit since the label was last written */
};

G_DEFINE_FINAL_TYPE (RlxSyncPanel, rlx_sync_panel, GTK_TYPE_WIDGET)

static void
set_label (GtkLabel *label, const char *text)
{
  if (g_strcmp0 (gtk_label_get_label (label), text) != 0)
    gtk_label_set_label (label, text);
}

static void
show_round (RlxSyncPanel *self, gint64 now_us)
{
  double f = 0.0;
  g_autofree char *text = NULL;

  gtk_widget_set_visible (GTK_WIDGET (self->round), self->outer);
  if (!self->outer)
    return;
  if (self->round_us > 0 && self->last_commit_us > 0)
    f = CLAMP ((double) (now_us - self->last_commit_us) / (double) self->round_us, 0.0, 1.0);
  if (self->inner_lr > 0)
    /* Translators: the outer round under way, its inner steps and their
     * learning rate */
    text = g_strdup_printf (_("Outer round %" PRIu64 " · %u inner steps at lr %.3g"),
                            self->last_step + 1, self->h, self->inner_lr);
  else
    /* Translators: the outer round under way, and its inner steps */
    text = g_strdup_printf (_("Outer round %" PRIu64 " · %u inner steps"),
                            self->last_step + 1, self->h);
  gtk_progress_bar_set_fraction (self->round, f);
  gtk_progress_bar_set_text (self->round, text);
}

static void
on_sync (RlxSyncPanel *self, const RlxEventSync *e)
{
  const char *reason = e->reason;
  gboolean automatic = g_strcmp0 (e->requested, "auto") == 0;
  g_autofree char *text = NULL;

  gboolean was_outer = self->outer;
  guint was_h = self->h;

  self->outer = g_strcmp0 (e->mode, "outer") == 0;
  self->h = self->outer ? (guint) e->h : 0;
  self->inner_lr = self->outer && e->has_outer ? e->inner_lr : 0;
  if (self->outer)
    /* Translators: the sync mode; %u is H, the inner steps between averages */
    text = g_strdup_printf (automatic ? _("Automatic: outer every %u steps")
                                      : _("Outer every %u steps"), self->h);
  else
    text = g_strdup (automatic ? _("Automatic: every step") : _("Every step"));
  set_label (self->mode, text);
  set_label (self->reason, reason ? reason : "");
  /* one line on the page (it must fit 800×600); the whole reason on hover */
  gtk_widget_set_tooltip_text (GTK_WIDGET (self->reason), reason);
  gtk_widget_set_visible (GTK_WIDGET (self->reason), reason && *reason);
  gtk_widget_set_visible (GTK_WIDGET (self), TRUE);
  /* a new mode or H: the last round's time says nothing about the next
   * (a new inner rate alone, as ranks come and go, keeps it) */
  if (self->outer != was_outer || self->h != was_h)
    self->round_us = 0;
}

static void
on_links (RlxSyncPanel *self, const RlxEventLinks *e)
{
  const char *text = e->text;
  g_autofree char *shown = NULL;

  if (text == NULL || *text == '\0')
    return;
  /* Translators: each link's measured throughput and round trip follow */
  shown = g_strdup_printf (_("Links: %s"), text);
  set_label (self->links, shown);
  gtk_widget_set_tooltip_text (GTK_WIDGET (self->links), shown);
  gtk_widget_set_visible (GTK_WIDGET (self->links), TRUE);
}

/* Bytes per sample, from the commits kept: on the UI tick, not per step
 * event — a label rewritten on every step batch asks GTK for a frame each
 * time (the watching frame rate doubled with it). */
static void
update_bytes (RlxSyncPanel *self)
{
  guint oldest;
  guint64 wire;

  if (!self->bytes_dirty || self->n < 2)
    return;
  self->bytes_dirty = FALSE;
  wire = self->wire[(self->next + COMMITS - 1) % COMMITS];
  /* the bytes since the oldest commit kept, over the samples after it */
  oldest = (self->next + COMMITS - self->n) % COMMITS;
  if (self->n >= 2 && wire >= self->wire[oldest])
    {
      guint64 s = 0;
      g_autofree char *text = NULL;

      for (guint k = 1; k < self->n; k++)
        s += self->samples[(oldest + k) % COMMITS];
      if (s > 0)
        {
          /* Translators: wire bytes (sent and received) per training sample */
          text = g_strdup_printf (_("%.0f bytes per sample"),
                                  (double) (wire - self->wire[oldest]) / (double) s);
          set_label (self->bytes, text);
        }
    }
}

static void
on_step (RlxSyncPanel *self, const RlxEventStep *e, gint64 now_us)
{
  guint64 wire = e->bytes_tx + e->bytes_rx;
  guint64 samples = e->samples;

  if (e->has_outer)
    {
      self->outer = TRUE;
      self->h = (guint) e->h;
      if (self->last_commit_us > 0 && now_us > self->last_commit_us)
        self->round_us = now_us - self->last_commit_us;
      self->last_commit_us = now_us;
    }
  self->last_step = e->step;
  self->wire[self->next] = wire;
  self->samples[self->next] = samples;
  self->next = (self->next + 1) % COMMITS;
  self->n = MIN (self->n + 1, COMMITS);
  self->bytes_dirty = TRUE;
}

void
rlx_sync_panel_add_event (RlxSyncPanel *self, const RlxEvent *event, gint64 now_us)
{
  g_return_if_fail (RLX_IS_SYNC_PANEL (self));
  g_return_if_fail (event != NULL);
  switch (event->kind)
    {
    case RLX_EVENT_SYNC:
      on_sync (self, &event->u.sync);
      show_round (self, now_us);
      break;
    case RLX_EVENT_LINKS:
      on_links (self, &event->u.links);
      break;
    case RLX_EVENT_STEP:
      on_step (self, &event->u.step, now_us);
      break;
    default:
      break;
    }
}

void
rlx_sync_panel_tick (RlxSyncPanel *self, gint64 now_us)
{
  g_return_if_fail (RLX_IS_SYNC_PANEL (self));
  update_bytes (self);
  show_round (self, now_us);
}

void
rlx_sync_panel_reset (RlxSyncPanel *self)
{
  g_return_if_fail (RLX_IS_SYNC_PANEL (self));
  self->outer = FALSE;
  self->h = 0;
  self->inner_lr = 0;
  self->next = self->n = 0;
  self->last_commit_us = self->round_us = 0;
  self->last_step = 0;
  set_label (self->mode, _("Every step"));
  set_label (self->reason, "");
  set_label (self->links, "");
  set_label (self->bytes, _("—"));
  gtk_widget_set_visible (GTK_WIDGET (self->reason), FALSE);
  gtk_widget_set_visible (GTK_WIDGET (self->links), FALSE);
  /* nothing to say until the node says how it synchronises */
  gtk_widget_set_visible (GTK_WIDGET (self), FALSE);
  show_round (self, 0);
}

const char *
rlx_sync_panel_get_mode_text (RlxSyncPanel *self)
{
  return gtk_label_get_label (self->mode);
}

const char *
rlx_sync_panel_get_reason_text (RlxSyncPanel *self)
{
  return gtk_label_get_label (self->reason);
}

const char *
rlx_sync_panel_get_links_text (RlxSyncPanel *self)
{
  return gtk_label_get_label (self->links);
}

const char *
rlx_sync_panel_get_bytes_text (RlxSyncPanel *self)
{
  return gtk_label_get_label (self->bytes);
}

const char *
rlx_sync_panel_get_round_text (RlxSyncPanel *self)
{
  return gtk_progress_bar_get_text (self->round);
}

double
rlx_sync_panel_get_progress (RlxSyncPanel *self, gboolean *visible)
{
  if (visible)
    *visible = gtk_widget_get_visible (GTK_WIDGET (self->round));
  return gtk_progress_bar_get_fraction (self->round);
}

static GtkLabel *
add_label (RlxSyncPanel *self, const char *css, gboolean wrap)
{
  GtkWidget *l = gtk_label_new (NULL);

  gtk_label_set_xalign (GTK_LABEL (l), 0.0f);
  if (wrap)
    gtk_label_set_ellipsize (GTK_LABEL (l), PANGO_ELLIPSIZE_END);
  if (css)
    gtk_widget_add_css_class (l, css);
  gtk_box_append (GTK_BOX (self->box), l);
  return GTK_LABEL (l);
}

static void
rlx_sync_panel_init (RlxSyncPanel *self)
{
  GtkWidget *caption;

  self->box = gtk_box_new (GTK_ORIENTATION_VERTICAL, 4);
  gtk_widget_add_css_class (self->box, "panel");
  gtk_widget_set_hexpand (self->box, TRUE);
  gtk_widget_set_parent (self->box, GTK_WIDGET (self));
  caption = gtk_label_new (_("Synchronisation"));
  gtk_label_set_xalign (GTK_LABEL (caption), 0.0f);
  gtk_widget_add_css_class (caption, "caption-heading");
  gtk_widget_add_css_class (caption, "dim-label");
  self->mode = add_label (self, "heading", FALSE);
  /* the caption beside the mode, on one row: the roster below keeps its
   * rows at 800×600 (tests/app/test-dashboard.c) */
  {
    GtkWidget *row = gtk_box_new (GTK_ORIENTATION_HORIZONTAL, 8);

    g_object_ref (self->mode);
    gtk_box_remove (GTK_BOX (self->box), GTK_WIDGET (self->mode));
    gtk_widget_set_valign (caption, GTK_ALIGN_BASELINE);
    gtk_widget_set_valign (GTK_WIDGET (self->mode), GTK_ALIGN_BASELINE);
    gtk_box_append (GTK_BOX (row), caption);
    gtk_box_append (GTK_BOX (row), GTK_WIDGET (self->mode));
    g_object_unref (self->mode);
    gtk_box_append (GTK_BOX (self->box), row);
  }
  self->reason = add_label (self, "dim-label", TRUE);
  self->links = add_label (self, NULL, TRUE);
  self->round = GTK_PROGRESS_BAR (gtk_progress_bar_new ());
  gtk_progress_bar_set_show_text (self->round, TRUE);
  self->bytes = add_label (self, "numeric", FALSE);
  /* the round's progress beside bytes per sample, on one row */
  {
    GtkWidget *row = gtk_box_new (GTK_ORIENTATION_HORIZONTAL, 12);

    g_object_ref (self->bytes);
    gtk_box_remove (GTK_BOX (self->box), GTK_WIDGET (self->bytes));
    gtk_widget_set_hexpand (GTK_WIDGET (self->round), TRUE);
    gtk_widget_set_valign (GTK_WIDGET (self->round), GTK_ALIGN_CENTER);
    gtk_box_append (GTK_BOX (row), GTK_WIDGET (self->round));
    gtk_box_append (GTK_BOX (row), GTK_WIDGET (self->bytes));
    g_object_unref (self->bytes);
    gtk_box_append (GTK_BOX (self->box), row);
  }
  rlx_sync_panel_reset (self);
}

static void
rlx_sync_panel_dispose (GObject *object)
{
  RlxSyncPanel *self = RLX_SYNC_PANEL (object);

  g_clear_pointer (&self->box, gtk_widget_unparent);
  G_OBJECT_CLASS (rlx_sync_panel_parent_class)->dispose (object);
}

static void
rlx_sync_panel_class_init (RlxSyncPanelClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  object_class->dispose = rlx_sync_panel_dispose;
  gtk_widget_class_set_layout_manager_type (widget_class, GTK_TYPE_BIN_LAYOUT);
  gtk_widget_class_set_css_name (widget_class, "rlx-sync-panel");
}

GtkWidget *
rlx_sync_panel_new (void)
{
  return g_object_new (RLX_TYPE_SYNC_PANEL, NULL);
}
