/* rlx-progress.c — steps/s, the epoch, the time left, the checkpoint and
 * the links' paths (see the header) */
#include "rlx-config.h"
#include "rlx-progress.h"
#include "rlx-roster-view.h"
#include "core/rlx-coordinator.h"

#include <glib/gi18n.h>
#include <inttypes.h>
#include <string.h>

/* The rate is measured over the ring: a point every POINT_US at most, so
 * RING points span about four seconds however fast the cohort steps. */
#define RING      16
#define POINT_US  (G_USEC_PER_SEC / 4)

typedef struct {
  gint64  t;
  guint64 step, samples;
} Point;

struct _RlxProgress
{
  Point       ring[RING];
  guint       n, head;         /* points in the ring; the oldest's index */
  Point       last;            /* the newest step */
  gboolean    stepped;
  guint64     samples;         /* every step's, since the first */

  gboolean    has_data;        /* from "joined" */
  guint64     train, epoch, pos, goal;

  gboolean    has_checkpoint;
  gboolean    resumed;
  guint64     checkpoint_step;
  gint64      checkpoint_at;

  GHashTable *paths;           /* node id → path in words (static) */
  GHashTable *timings;         /* node id → Timing ("timing", on the leader) */
};

typedef struct {
  guint64 compute_us, round_us;
} Timing;

RlxProgress *
rlx_progress_new (void)
{
  RlxProgress *self = g_new0 (RlxProgress, 1);

  self->paths = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  self->timings = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  return self;
}

void
rlx_progress_free (RlxProgress *self)
{
  if (self == NULL)
    return;
  g_hash_table_unref (self->paths);
  g_hash_table_unref (self->timings);
  g_free (self);
}

void
rlx_progress_clear (RlxProgress *self)
{
  GHashTable *paths = self->paths, *timings = self->timings;

  g_hash_table_remove_all (paths);
  g_hash_table_remove_all (timings);
  memset (self, 0, sizeof *self);
  self->paths = paths;
  self->timings = timings;
}

/* A selected pair's words: "relay/host 10.0.0.2:5000" is a TURN relay when
 * either side is relayed; anything else went straight, over QUIC. */
static const char *
path_words (const char *path)
{
  if (path == NULL || *path == '\0')
    return _("direct QUIC");
  if (strstr (path, "relay") != NULL)
    return _("TURN relay");
  return _("direct QUIC");
}

static void
add_step (RlxProgress *self, const RlxEventStep *s, gint64 now_us)
{
  Point p = { s->time_us ? s->time_us : now_us, s->step, 0 };

  self->samples += s->samples;
  p.samples = self->samples;
  if (self->has_data && self->train > 0)
    {
      self->pos += s->samples;
      while (self->pos >= self->train)
        {
          self->pos -= self->train;
          self->epoch++;
        }
    }
  self->last = p;
  self->stepped = TRUE;
  if (self->n > 0)
    {
      const Point *newest = &self->ring[(self->head + self->n - 1) % RING];
      if (p.t - newest->t < POINT_US && p.t >= newest->t)
        return;
    }
  if (self->n == RING)
    {
      self->ring[self->head] = p;
      self->head = (self->head + 1) % RING;
    }
  else
    self->ring[(self->head + self->n++) % RING] = p;
}

void
rlx_progress_add_event (RlxProgress *self, const RlxEvent *e, const char *self_id,
                        gint64 now_us)
{
  g_return_if_fail (self != NULL && e != NULL);
  switch (e->kind)
    {
    case RLX_EVENT_STEP:
      add_step (self, &e->u.step, now_us);
      break;
    case RLX_EVENT_JOINED:
      if (e->u.joined.has_data && g_strcmp0 (e->u.joined.node, self_id) == 0)
        {
          self->has_data = TRUE;
          self->train = e->u.joined.train;
          self->epoch = e->u.joined.epoch;
          self->pos = e->u.joined.pos;
          self->goal = e->u.joined.steps;
        }
      break;
    case RLX_EVENT_CHECKPOINT:
      self->has_checkpoint = TRUE;
      self->resumed = FALSE;
      self->checkpoint_step = e->u.checkpoint.step;
      self->checkpoint_at = now_us;
      break;
    case RLX_EVENT_RESUMED:
      self->has_checkpoint = TRUE;
      self->resumed = TRUE;
      self->checkpoint_step = e->u.resumed.step;
      self->checkpoint_at = now_us;
      break;
    case RLX_EVENT_LINK_UP:
      if (e->u.link_up.node)
        g_hash_table_insert (self->paths, g_strdup (e->u.link_up.node),
                             (gpointer) path_words (e->u.link_up.path));
      break;
    case RLX_EVENT_TIMING:
      if (e->u.timing.node)
        {
          Timing *t = g_hash_table_lookup (self->timings, e->u.timing.node);
          if (t == NULL)
            {
              t = g_new0 (Timing, 1);   /* once per rank */
              g_hash_table_insert (self->timings, g_strdup (e->u.timing.node), t);
            }
          t->compute_us = e->u.timing.compute_us;
          t->round_us = e->u.timing.round_us;
        }
      break;
    case RLX_EVENT_MEMBER_LEFT:
      if (e->u.member.node)
        g_hash_table_remove (self->timings, e->u.member.node);
      break;
    case RLX_EVENT_LINK_DOWN:
    case RLX_EVENT_LINK_FAILED:
      if (e->u.link_lost.node)
        g_hash_table_remove (self->paths, e->u.link_lost.node);
      break;
    default:
      break;
    }
}

static double
rate (RlxProgress *self, gboolean samples)
{
  const Point *old;
  double dt;

  if (self->n == 0 || !self->stepped)
    return 0;
  old = &self->ring[self->head];
  dt = (double) (self->last.t - old->t) / G_USEC_PER_SEC;
  if (dt <= 0 || self->last.step < old->step)
    return 0;
  return samples ? (double) (self->last.samples - old->samples) / dt
                 : (double) (self->last.step - old->step) / dt;
}

double
rlx_progress_get_steps_per_s (RlxProgress *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return rate (self, FALSE);
}

double
rlx_progress_get_samples_per_s (RlxProgress *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return rate (self, TRUE);
}

double
rlx_progress_get_seconds_left (RlxProgress *self)
{
  double sps, smps;

  g_return_val_if_fail (self != NULL, -1);
  sps = rate (self, FALSE);
  smps = rate (self, TRUE);
  if (self->has_data && self->goal > 0)
    {
      if (self->last.step >= self->goal)
        return 0;
      return sps > 0 ? (double) (self->goal - self->last.step) / sps : -1;
    }
  if (self->has_data && self->train > 0 && smps > 0)
    return (double) (self->train - self->pos) / smps;
  return -1;
}

char *
rlx_progress_format_duration (double seconds)
{
  guint64 s = seconds > 0 ? (guint64) (seconds + 0.5) : 0;

  if (s >= 3600)
    /* Translators: hours and minutes */
    return g_strdup_printf (_("%" PRIu64 " h %" PRIu64 " min"), s / 3600, (s % 3600) / 60);
  if (s >= 60)
    /* Translators: minutes and seconds */
    return g_strdup_printf (_("%" PRIu64 " min %" PRIu64 " s"), s / 60, s % 60);
  /* Translators: seconds */
  return g_strdup_printf (_("%" PRIu64 " s"), s);
}

char *
rlx_progress_dup_text (RlxProgress *self)
{
  GString *out;
  double sps, left;

  g_return_val_if_fail (self != NULL, NULL);
  if (!self->stepped)
    return NULL;
  out = g_string_new (NULL);
  sps = rate (self, FALSE);
  if (sps > 0)
    g_string_append_printf (out, sps >= 100 ? _("%.0f steps/s") : _("%.1f steps/s"), sps);
  else
    g_string_append (out, _("Measuring steps/s"));
  if (self->has_data && self->train > 0)
    {
      guint pct = (guint) (100.0 * (double) self->pos / (double) self->train);
      g_string_append (out, " · ");
      /* Translators: the epoch (from 1) and how far into it */
      g_string_append_printf (out, _("epoch %" PRIu64 ", %u%%"), self->epoch + 1, pct);
    }
  left = rlx_progress_get_seconds_left (self);
  if (left >= 0)
    {
      g_autofree char *d = rlx_progress_format_duration (left);
      g_string_append (out, " · ");
      if (self->goal > 0)
        /* Translators: %s is a duration, then the step and the run's last */
        g_string_append_printf (out, _("%s left (step %" PRIu64 " of %" PRIu64 ")"), d,
                                self->last.step, self->goal);
      else
        /* Translators: %s is a duration */
        g_string_append_printf (out, _("%s left in the epoch"), d);
    }
  return g_string_free (out, FALSE);
}

char *
rlx_progress_dup_checkpoint_text (RlxProgress *self, gint64 now_us)
{
  g_autofree char *ago = NULL;

  g_return_val_if_fail (self != NULL, NULL);
  if (!self->has_checkpoint)
    return self->stepped ? g_strdup (_("No checkpoint yet")) : NULL;
  ago = rlx_progress_format_duration ((double) MAX (now_us - self->checkpoint_at, 0) /
                                      G_USEC_PER_SEC);
  if (self->resumed)
    /* Translators: the step, then a duration ("12 s") */
    return g_strdup_printf (_("Resumed from the checkpoint at step %" PRIu64 ", %s ago"),
                            self->checkpoint_step, ago);
  /* Translators: the step, then a duration ("12 s") */
  return g_strdup_printf (_("Checkpoint at step %" PRIu64 ", %s ago"),
                          self->checkpoint_step, ago);
}

gboolean
rlx_progress_get_timing (RlxProgress *self, const char *node_id, double *compute_ms,
                         double *wait_ms)
{
  Timing *t;

  g_return_val_if_fail (self != NULL, FALSE);
  t = g_hash_table_lookup (self->timings, node_id);
  if (t == NULL)
    return FALSE;
  if (compute_ms)
    *compute_ms = MIN (t->compute_us, t->round_us) / 1000.0;
  if (wait_ms)
    *wait_ms = (t->round_us > t->compute_us ? t->round_us - t->compute_us : 0) / 1000.0;
  return TRUE;
}

static char *
format_ms (double ms)
{
  /* Translators: milliseconds */
  return g_strdup_printf (ms < 10 ? _("%.1f ms") : _("%.0f ms"), ms);
}

char *
rlx_progress_dup_timing_text (RlxProgress *self, const char *node_id)
{
  g_autofree char *c = NULL, *w = NULL;
  double compute, wait;

  if (!rlx_progress_get_timing (self, node_id, &compute, &wait))
    return NULL;
  c = format_ms (compute);
  w = format_ms (wait);
  /* Translators: a rank's step: the time it computes, the time it waits
   * for the round ("compute 3.1 ms, wait 0.8 ms") */
  return g_strdup_printf (_("compute %s, wait %s"), c, w);
}

const char *
rlx_progress_get_link_path (RlxProgress *self, const char *node_id)
{
  g_return_val_if_fail (self != NULL, NULL);
  return g_hash_table_lookup (self->paths, node_id);
}

char *
rlx_progress_dup_links_text (RlxProgress *self, GListModel *roster)
{
  const char *self_host = NULL;
  GString *out = NULL;
  guint n;

  g_return_val_if_fail (self != NULL, NULL);
  n = roster ? g_list_model_get_n_items (roster) : 0;
  for (guint i = 0; i < n; i++)
    {
      g_autoptr(RlxRosterEntry) e = g_list_model_get_item (roster, i);
      if (rlx_roster_entry_get_is_self (e))
        self_host = rlx_roster_entry_get_host (e);
    }
  for (guint i = 0; i < n; i++)
    {
      g_autoptr(RlxRosterEntry) e = g_list_model_get_item (roster, i);
      const char *id = rlx_roster_entry_get_node_id (e);
      const char *path;
      g_autofree char *bytes = NULL, *precision = NULL;

      if (rlx_roster_entry_get_is_self (e))
        continue;
      path = g_hash_table_lookup (self->paths, id);
      if (path == NULL && self_host && g_strcmp0 (rlx_roster_entry_get_host (e), self_host) == 0)
        path = _("local bus");
      if (path == NULL)
        continue;   /* reached through another rank: no link of ours */
      bytes = rlx_roster_format_bytes (rlx_roster_entry_get_bytes_tx (e) +
                                       rlx_roster_entry_get_bytes_rx (e));
      precision = rlx_roster_format_precision (rlx_roster_entry_get_precision (e));
      if (out == NULL)
        out = g_string_new (NULL);
      else
        g_string_append (out, "; ");
      /* Translators: a rank, its link's path, the bytes it sent and
       * received, its wire precision: "n2: direct QUIC, 3.1 MB at int8" */
      g_string_append_printf (out, _("%s: %s, %s at %s"), id, path, bytes, precision);
    }
  return out ? g_string_free (out, FALSE) : NULL;
}
