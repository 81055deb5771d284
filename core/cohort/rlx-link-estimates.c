/* rlx-link-estimates.c — see rlx-link-estimates.h */
#include "rlx-config.h"
#include "rlx-link-estimates.h"

#include <math.h>
#include <string.h>

#include "core/p2p/rlx-remote-link.h"
#include "core/p2p/rlx-unix-link.h"

typedef struct {
  gint64  t;
  guint64 b;
} Point;

typedef struct {
  RlxLinkEstimate pub;
  /* progress points, a ring (oldest at head) */
  Point   ring[RLX_LINK_ESTIMATES_RING];
  guint   head, n;
  /* the last timed frames */
  double  win_bytes[RLX_LINK_ESTIMATES_RATE_WINDOW];
  double  win_us[RLX_LINK_ESTIMATES_RATE_WINDOW];
  guint   win_next, win_n;
  /* the last round trips of the current source; the estimate is their least */
  double  rtts[RLX_LINK_ESTIMATES_RTT_WINDOW];
  guint   rtt_next, rtt_n;
  /* what rlx_link_estimates_mark noted */
  double  mark_rtt_ms, mark_rate;
  /* a watched link */
  RlxLink *link;
  gulong   notify_id, frame_id;
} Entry;

struct _RlxLinkEstimates
{
  GPtrArray *entries;          /* Entry*, in the order added */
  gboolean   changed;          /* a link came or went since the mark */
};

static void
entry_unwatch (Entry *e)
{
  if (e->link == NULL)
    return;
  g_clear_signal_handler (&e->notify_id, e->link);
  g_clear_signal_handler (&e->frame_id, e->link);
  g_clear_object (&e->link);
}

static void
entry_free (gpointer p)
{
  Entry *e = p;

  entry_unwatch (e);
  g_free (e->pub.id);
  g_free (e);
}

RlxLinkEstimates *
rlx_link_estimates_new (void)
{
  RlxLinkEstimates *self = g_new0 (RlxLinkEstimates, 1);

  self->entries = g_ptr_array_new_with_free_func (entry_free);
  return self;
}

void
rlx_link_estimates_free (RlxLinkEstimates *self)
{
  if (self == NULL)
    return;
  g_ptr_array_unref (self->entries);
  g_free (self);
}

static const RlxLinkEstimate *
at (RlxLinkEstimates *self, guint i)
{
  return &((Entry *) g_ptr_array_index (self->entries, i))->pub;
}

static Entry *
find (RlxLinkEstimates *self, const char *id, guint *index)
{
  if (id == NULL)
    return NULL;
  for (guint i = 0; i < self->entries->len; i++)
    {
      Entry *e = g_ptr_array_index (self->entries, i);

      if (strcmp (e->pub.id, id) == 0)
        {
          if (index)
            *index = i;
          return e;
        }
    }
  return NULL;
}

gboolean
rlx_link_estimates_add (RlxLinkEstimates *self, const char *id, gboolean local)
{
  Entry *e;

  g_return_val_if_fail (self != NULL && id != NULL, FALSE);
  if ((e = find (self, id, NULL)) != NULL)
    {
      RlxLink *link = e->link ? g_object_ref (e->link) : NULL;

      rlx_link_estimates_remove (self, id);
      rlx_link_estimates_add (self, id, local);
      if (link)
        rlx_link_estimates_watch (self, id, link);
      g_clear_object (&link);
      return TRUE;
    }
  if (self->entries->len >= RLX_LINK_ESTIMATES_MAX_LINKS)
    return FALSE;
  e = g_new0 (Entry, 1);
  e->pub.id = g_strdup (id);
  e->pub.local = local;
  g_ptr_array_add (self->entries, e);
  self->changed = TRUE;
  return TRUE;
}

void
rlx_link_estimates_remove (RlxLinkEstimates *self, const char *id)
{
  guint i;

  g_return_if_fail (self != NULL);
  if (find (self, id, &i) != NULL)
    {
      g_ptr_array_remove_index (self->entries, i);
      self->changed = TRUE;
    }
}

void
rlx_link_estimates_rtt (RlxLinkEstimates *self, const char *id, double rtt_us,
                        RlxLinkRttSource source)
{
  Entry *e;

  g_return_if_fail (self != NULL);
  if ((e = find (self, id, NULL)) == NULL || !isfinite (rtt_us) || rtt_us <= 0.0)
    return;
  if (source == RLX_LINK_RTT_HEARTBEAT && e->pub.rtt_source == RLX_LINK_RTT_QUIC)
    return;
  if (source != e->pub.rtt_source)
    e->rtt_n = e->rtt_next = 0;
  e->rtts[e->rtt_next] = rtt_us / 1000.0;
  e->rtt_next = (e->rtt_next + 1) % RLX_LINK_ESTIMATES_RTT_WINDOW;
  e->rtt_n = MIN (e->rtt_n + 1, RLX_LINK_ESTIMATES_RTT_WINDOW);
  e->pub.rtt_ms = e->rtts[0];
  for (guint i = 1; i < e->rtt_n; i++)
    e->pub.rtt_ms = MIN (e->pub.rtt_ms, e->rtts[i]);
  e->pub.rtt_source = source;
}

static void
update_rate (Entry *e)
{
  double measured = 0.0, bytes = 0.0, us = 0.0;

  for (guint i = 0; i < e->win_n; i++)
    bytes += e->win_bytes[i], us += e->win_us[i];
  if (us > 0.0)
    measured = bytes / (us / 1e6);
  e->pub.measured_bytes_per_s = measured;
  /* QUIC's figure only until frames are timed (rlx-link-estimates.h) */
  e->pub.bytes_per_s = e->win_n > 0 ? measured : e->pub.quic_bytes_per_s;
}

static void
note_point (Entry *e, guint64 bytes_total, gint64 when_us)
{
  Point *last = e->n ? &e->ring[(e->head + e->n - 1) % RLX_LINK_ESTIMATES_RING] : NULL;

  if (last != NULL && (bytes_total < last->b || when_us < last->t))
    {
      /* a counter that went back (a new link under the same id): start over */
      e->n = 0;
      last = NULL;
    }
  if (last != NULL && bytes_total == last->b)
    return;
  if (last != NULL && when_us - last->t < RLX_LINK_ESTIMATES_COALESCE_US && e->n > 1)
    {
      /* merge with the last point — unless that one is alone, as the first
       * piece after a pause must stay (it starts a frame's timing) */
      Point *before = &e->ring[(e->head + e->n - 2) % RLX_LINK_ESTIMATES_RING];

      if (last->t - before->t < RLX_LINK_ESTIMATES_COALESCE_US)
        {
          last->t = when_us;
          last->b = bytes_total;
          return;
        }
    }
  if (e->n == RLX_LINK_ESTIMATES_RING)
    {
      e->head = (e->head + 1) % RLX_LINK_ESTIMATES_RING;
      e->n--;
    }
  e->ring[(e->head + e->n) % RLX_LINK_ESTIMATES_RING] = (Point) { when_us, bytes_total };
  e->n++;
}

void
rlx_link_estimates_rx (RlxLinkEstimates *self, const char *id, guint64 bytes_total,
                       gint64 when_us)
{
  Entry *e;

  g_return_if_fail (self != NULL);
  if ((e = find (self, id, NULL)) != NULL)
    note_point (e, bytes_total, when_us);
}

void
rlx_link_estimates_frame (RlxLinkEstimates *self, const char *id, gsize frame_bytes,
                          guint64 bytes_total, gint64 when_us)
{
  Entry *e;
  guint64 start;
  const Point *first = NULL;
  double bytes, us;

  g_return_if_fail (self != NULL);
  if ((e = find (self, id, NULL)) == NULL)
    return;
  note_point (e, bytes_total, when_us);
  if (frame_bytes < RLX_LINK_ESTIMATES_MIN_FRAME)
    return;
  start = bytes_total > frame_bytes ? bytes_total - frame_bytes : 0;
  /* the earliest point inside the frame (the oldest kept when the ring
   * does not reach back to its start: the part it covers is timed) */
  for (guint i = 0; i < e->n; i++)
    {
      const Point *p = &e->ring[(e->head + i) % RLX_LINK_ESTIMATES_RING];

      if (p->b > start)
        {
          first = p;
          break;
        }
    }
  if (first == NULL || first->b >= bytes_total)
    return;
  bytes = (double) (bytes_total - first->b);
  us = (double) (when_us - first->t);
  if (us < RLX_LINK_ESTIMATES_MIN_SPAN_US || bytes < RLX_LINK_ESTIMATES_MIN_FRAME / 2)
    return;
  e->win_bytes[e->win_next] = bytes;
  e->win_us[e->win_next] = us;
  e->win_next = (e->win_next + 1) % RLX_LINK_ESTIMATES_RATE_WINDOW;
  e->win_n = MIN (e->win_n + 1, RLX_LINK_ESTIMATES_RATE_WINDOW);
  e->pub.rate_samples++;
  update_rate (e);
}

void
rlx_link_estimates_quic_rate (RlxLinkEstimates *self, const char *id, double bytes_per_s)
{
  Entry *e;

  g_return_if_fail (self != NULL);
  if ((e = find (self, id, NULL)) == NULL || !isfinite (bytes_per_s) || bytes_per_s < 0.0)
    return;
  e->pub.quic_bytes_per_s = bytes_per_s;
  update_rate (e);
}

RlxLink *
rlx_link_estimates_get_link (RlxLinkEstimates *self, const char *id)
{
  Entry *e;

  g_return_val_if_fail (self != NULL, NULL);
  e = find (self, id, NULL);
  return e ? e->link : NULL;
}

gboolean
rlx_link_estimates_link_is_local (RlxLink *link)
{
  return RLX_IS_UNIX_LINK (link);
}

/* What a watched link's handlers hold: the estimates and the id (looked up
 * at each call, so a handler never holds an entry). */
typedef struct {
  RlxLinkEstimates *self;
  char             *id;
} Watch;

static void
watch_free (gpointer data, GClosure *closure)
{
  Watch *w = data;

  g_free (w->id);
  g_free (w);
}

static Watch *
watch_new (RlxLinkEstimates *self, const char *id)
{
  Watch *w = g_new (Watch, 1);

  *w = (Watch) { self, g_strdup (id) };
  return w;
}

static void
on_notify_rx (RlxLink *link, GParamSpec *pspec, gpointer user_data)
{
  Watch *w = user_data;

  rlx_link_estimates_rx (w->self, w->id, rlx_link_get_bytes_rx (link),
                         rlx_link_get_last_rx (link));
}

static void
on_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  Watch *w = user_data;

  if (rlx_link_get_rx_lane (link) != RLX_LINK_LANE_BULK)
    return;
  if (RLX_IS_REMOTE_LINK (link))
    {
      RlxRemoteLink *r = RLX_REMOTE_LINK (link);

      rlx_link_estimates_rtt (w->self, w->id, (double) rlx_remote_link_get_rtt_us (r),
                              RLX_LINK_RTT_QUIC);
      rlx_link_estimates_quic_rate (w->self, w->id,
                                    (double) rlx_remote_link_get_delivery_rate (r));
    }
  rlx_link_estimates_frame (w->self, w->id, g_bytes_get_size (frame),
                            rlx_link_get_bytes_rx (link), rlx_link_get_last_rx (link));
}

void
rlx_link_estimates_watch (RlxLinkEstimates *self, const char *id, RlxLink *link)
{
  Entry *e;

  g_return_if_fail (self != NULL && id != NULL && RLX_IS_LINK (link));
  if ((e = find (self, id, NULL)) == NULL)
    {
      if (!rlx_link_estimates_add (self, id, rlx_link_estimates_link_is_local (link)) ||
          (e = find (self, id, NULL)) == NULL)
        return;
    }
  entry_unwatch (e);
  e->link = g_object_ref (link);
  e->notify_id = g_signal_connect_data (link, "notify::bytes-rx", G_CALLBACK (on_notify_rx),
                                        watch_new (self, id), watch_free, 0);
  e->frame_id = g_signal_connect_data (link, "frame", G_CALLBACK (on_frame),
                                       watch_new (self, id), watch_free, 0);
  note_point (e, rlx_link_get_bytes_rx (link), rlx_link_get_last_rx (link));
  if (RLX_IS_REMOTE_LINK (link))
    rlx_link_estimates_rtt (self, id, (double) rlx_remote_link_get_rtt_us (RLX_REMOTE_LINK (link)),
                            RLX_LINK_RTT_QUIC);
}

guint
rlx_link_estimates_size (RlxLinkEstimates *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->entries->len;
}

const RlxLinkEstimate *
rlx_link_estimates_nth (RlxLinkEstimates *self, guint i)
{
  g_return_val_if_fail (self != NULL, NULL);
  if (i >= self->entries->len)
    return NULL;
  return at (self, i);
}

const RlxLinkEstimate *
rlx_link_estimates_get (RlxLinkEstimates *self, const char *id)
{
  Entry *e;

  g_return_val_if_fail (self != NULL, NULL);
  e = find (self, id, NULL);
  return e ? &e->pub : NULL;
}

gboolean
rlx_link_estimates_ready (RlxLinkEstimates *self, guint min_rate_samples)
{
  g_return_val_if_fail (self != NULL, FALSE);
  for (guint i = 0; i < self->entries->len; i++)
    {
      const RlxLinkEstimate *l = at (self, i);

      if (l->local)
        continue;
      if (l->rtt_ms <= 0.0)
        return FALSE;
      if (l->rate_samples < min_rate_samples && l->quic_bytes_per_s <= 0.0)
        return FALSE;
    }
  return TRUE;
}

RlxSyncLink *
rlx_link_estimates_sync_links (RlxLinkEstimates *self, guint *n_links)
{
  RlxSyncLink *links;

  g_return_val_if_fail (self != NULL && n_links != NULL, NULL);
  *n_links = self->entries->len;
  links = g_new0 (RlxSyncLink, MAX (self->entries->len, 1));
  for (guint i = 0; i < self->entries->len; i++)
    {
      const RlxLinkEstimate *l = at (self, i);

      links[i] = (RlxSyncLink) { l->id, l->local, l->rtt_ms, l->bytes_per_s };
    }
  return links;
}

gboolean
rlx_link_estimates_choose (RlxLinkEstimates *self, guint n_ranks, guint64 exchange_bytes,
                           double step_ms, guint max_h, RlxSyncChoice *out, GError **error)
{
  g_autofree RlxSyncLink *links = NULL;
  RlxSyncInputs in = { 0 };
  guint n = 0;

  g_return_val_if_fail (self != NULL, FALSE);
  links = rlx_link_estimates_sync_links (self, &n);
  in.links = links;
  in.n_links = n;
  in.n_ranks = n_ranks;
  in.exchange_bytes = exchange_bytes;
  in.step_ms = step_ms;
  in.max_h = max_h;
  return rlx_sync_choose (&in, out, error);
}

static char *
describe (const RlxLinkEstimate *l)
{
  g_autofree char *rate = NULL, *rtt = NULL;

  if (l->local)
    return g_strdup ("local");
  rate = l->bytes_per_s > 0.0 ? rlx_sync_format_rate (l->bytes_per_s)
                              : g_strdup ("rate not measured yet");
  rtt = l->rtt_ms > 0.0 ? rlx_sync_format_ms (l->rtt_ms)
                        : g_strdup ("round trip not measured yet");
  return g_strdup_printf ("%s, %s", rate, rtt);
}

char *
rlx_link_estimates_describe (RlxLinkEstimates *self)
{
  GString *s = g_string_new (NULL);

  g_return_val_if_fail (self != NULL, NULL);
  for (guint i = 0; i < self->entries->len; i++)
    {
      const RlxLinkEstimate *l = at (self, i);
      g_autofree char *one = describe (l);

      g_string_append_printf (s, "%s%s %s", s->len ? "; " : "", l->id, one);
    }
  return g_string_free (s, FALSE);
}

char *
rlx_link_estimates_describe_one (RlxLinkEstimates *self, const char *id)
{
  const RlxLinkEstimate *l;

  g_return_val_if_fail (self != NULL, NULL);
  l = rlx_link_estimates_get (self, id);
  return l ? describe (l) : NULL;
}

void
rlx_link_estimates_mark (RlxLinkEstimates *self)
{
  g_return_if_fail (self != NULL);
  for (guint i = 0; i < self->entries->len; i++)
    {
      Entry *e = g_ptr_array_index (self->entries, i);

      e->mark_rtt_ms = e->pub.rtt_ms;
      e->mark_rate = e->pub.bytes_per_s;
    }
  self->changed = FALSE;
}

static gboolean
moved (double was, double now, double factor)
{
  if (was <= 0.0)
    return now > 0.0;    /* measured for the first time */
  if (now <= 0.0)
    return FALSE;
  return now > was * factor || now < was / factor;
}

gboolean
rlx_link_estimates_drifted (RlxLinkEstimates *self, double factor)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (factor > 1.0, FALSE);
  if (self->changed)
    return TRUE;
  for (guint i = 0; i < self->entries->len; i++)
    {
      Entry *e = g_ptr_array_index (self->entries, i);

      if (e->pub.local)
        continue;
      if (moved (e->mark_rtt_ms, e->pub.rtt_ms, factor) ||
          moved (e->mark_rate, e->pub.bytes_per_s, factor))
        return TRUE;
    }
  return FALSE;
}
