/* rlx-shaped-link.c — delay, rate cap and stalls around any link (see
 * rlx-shaped-link.h)
 *
 * The pipe is simulated in virtual time that never runs ahead of the real
 * clock: the next piece is chosen at the virtual moment the previous one
 * leaves the pipe (pipe_free), among the frames that had arrived by then, so
 * a choice is only made once real time has reached that moment. Pieces and
 * whole frames then wait in FIFOs for the moment they become visible (leave
 * time + delay). One source with a µs ready time wakes the link for the
 * earliest of: the next choice, the next visible piece, the next frame.
 */
#include "rlx-config.h"
#include "rlx-shaped-link.h"

#include <gio/gio.h>
#include <math.h>
#include <string.h>

/* ── shape specs ────────────────────────────────────────────────────────── */

static gboolean
parse_number (const char *s, double *value, const char **rest)
{
  char *end = NULL;
  double v = g_ascii_strtod (s, &end);

  if (end == s || !isfinite (v) || v < 0)
    return FALSE;
  *value = v;
  *rest = end;
  return TRUE;
}

static gboolean
parse_duration (const char *s, gint64 *us)
{
  static const struct { const char *unit; double scale; } units[] = {
    { "us", 1 }, { "µs", 1 }, { "ms", 1e3 }, { "s", 1e6 }, { "min", 60e6 },
  };
  const char *rest;
  double v;

  if (!parse_number (s, &v, &rest))
    return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS (units); i++)
    if (strcmp (rest, units[i].unit) == 0 && v * units[i].scale < 1e15)
      {
        *us = (gint64) llround (v * units[i].scale);
        return TRUE;
      }
  return FALSE;
}

static gboolean
parse_bytes (const char *s, const char *suffix, double *bytes)
{
  static const struct { const char *unit; double scale; } units[] = {
    { "B", 1 }, { "kB", 1e3 }, { "KB", 1e3 }, { "MB", 1e6 }, { "GB", 1e9 },
    { "KiB", 1024.0 }, { "MiB", 1048576.0 }, { "GiB", 1073741824.0 },
    { "bit", 1 / 8.0 }, { "kbit", 1e3 / 8 }, { "Mbit", 1e6 / 8 }, { "Gbit", 1e9 / 8 },
  };
  const char *rest;
  double v;
  gsize sl = strlen (suffix);

  if (!parse_number (s, &v, &rest))
    return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS (units); i++)
    {
      gsize ul = strlen (units[i].unit);

      if (strlen (rest) == ul + sl && strncmp (rest, units[i].unit, ul) == 0 &&
          strcmp (rest + ul, suffix) == 0 && v * units[i].scale < 1e18)
        {
          *bytes = v * units[i].scale;
          return TRUE;
        }
    }
  return FALSE;
}

static gboolean
parse_stall (const char *s, RlxLinkStall *stall)
{
  g_auto(GStrv) every = g_strsplit (s, "/", 2);
  g_auto(GStrv) parts = g_strsplit (every[0], "+", 2);

  memset (stall, 0, sizeof *stall);
  if (parts[0] == NULL || parts[1] == NULL ||
      !parse_duration (parts[0], &stall->at_us) || !parse_duration (parts[1], &stall->length_us) ||
      stall->length_us <= 0)
    return FALSE;
  if (every[1] != NULL &&
      (!parse_duration (every[1], &stall->every_us) || stall->every_us <= stall->length_us))
    return FALSE;
  return TRUE;
}

gboolean
rlx_link_shape_parse (const char *spec, RlxLinkShape *shape, GError **error)
{
  g_auto(GStrv) items = NULL;

  g_return_val_if_fail (shape != NULL, FALSE);

  memset (shape, 0, sizeof *shape);
  if (spec == NULL)
    return TRUE;
  items = g_strsplit (spec, ",", -1);
  for (guint i = 0; items[i] != NULL; i++)
    {
      g_autofree char *item = g_strstrip (g_strdup (items[i]));
      char *eq = strchr (item, '=');
      const char *key, *value;
      gboolean ok = FALSE;
      const char *expect = "";

      if (*item == '\0')
        continue;
      if (eq == NULL)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "link shape: \"%s\" is not key=value (keys: delay, rate, chunk, stall)",
                       item);
          return FALSE;
        }
      *eq = '\0';
      key = item;
      value = eq + 1;
      if (strcmp (key, "delay") == 0)
        {
          ok = parse_duration (value, &shape->delay_us);
          expect = "a duration such as 25ms, 1.5s or 800us";
        }
      else if (strcmp (key, "rate") == 0)
        {
          double r = 0;

          ok = strcmp (value, "0") == 0 || (parse_bytes (value, "/s", &r) && r >= 1);
          shape->rate = (guint64) llround (r);
          expect = "a rate such as 50MB/s, 1.5GiB/s or 100Mbit/s (0: no cap)";
        }
      else if (strcmp (key, "chunk") == 0)
        {
          double c = 0;

          ok = parse_bytes (value, "", &c) && c >= 1024 && c <= 64.0 * 1048576;
          shape->chunk = (gsize) c;
          expect = "a size from 1KiB to 64MiB, such as 64KiB";
        }
      else if (strcmp (key, "stall") == 0)
        {
          if (shape->n_stalls >= RLX_LINK_SHAPE_MAX_STALLS)
            {
              g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                           "link shape: more than %d stalls", RLX_LINK_SHAPE_MAX_STALLS);
              return FALSE;
            }
          ok = parse_stall (value, &shape->stalls[shape->n_stalls]);
          if (ok)
            shape->n_stalls++;
          expect = "AT+LENGTH or AT+LENGTH/EVERY, such as 3s+2s or 1s+100ms/5s "
                   "(EVERY longer than LENGTH)";
        }
      else
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "link shape: unknown key \"%s\" (keys: delay, rate, chunk, stall)", key);
          return FALSE;
        }
      if (!ok)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "link shape: %s=\"%s\" is not valid: expected %s", key, value, expect);
          return FALSE;
        }
    }
  return TRUE;
}

gboolean
rlx_link_shape_from_env (RlxLinkShape *shape)
{
  const char *env = g_getenv ("RLX_LINK_SHAPE");
  g_autoptr(GError) error = NULL;

  g_return_val_if_fail (shape != NULL, FALSE);

  memset (shape, 0, sizeof *shape);
  if (env == NULL || *env == '\0')
    return FALSE;
  if (!rlx_link_shape_parse (env, shape, &error))
    {
      g_warning ("RLX_LINK_SHAPE ignored, links are not shaped: %s", error->message);
      memset (shape, 0, sizeof *shape);
      return FALSE;
    }
  return TRUE;
}

char *
rlx_link_shape_to_string (const RlxLinkShape *shape)
{
  GString *s = g_string_new (NULL);

  g_return_val_if_fail (shape != NULL, NULL);

  g_string_append_printf (s, "delay=%" G_GINT64_FORMAT "us,rate=%" G_GUINT64_FORMAT
                          "B/s,chunk=%" G_GSIZE_FORMAT "B", shape->delay_us, shape->rate,
                          shape->chunk ? shape->chunk : RLX_LINK_SHAPE_DEFAULT_CHUNK);
  for (guint i = 0; i < shape->n_stalls; i++)
    {
      g_string_append_printf (s, ",stall=%" G_GINT64_FORMAT "us+%" G_GINT64_FORMAT "us",
                              shape->stalls[i].at_us, shape->stalls[i].length_us);
      if (shape->stalls[i].every_us)
        g_string_append_printf (s, "/%" G_GINT64_FORMAT "us", shape->stalls[i].every_us);
    }
  return g_string_free (s, FALSE);
}

/* ── the link ───────────────────────────────────────────────────────────── */

typedef struct {
  GBytes     *frame;      /* NULL: the close marker */
  RlxLinkLane lane;
  gint64      arrived;
  gsize       size;
  gsize       sent;       /* bytes through the pipe */
  gint64      visible;
} Item;

typedef struct {
  gint64 visible;
  gsize  bytes;
} Piece;

struct _RlxShapedLink
{
  RlxLink       parent_instance;

  RlxLink      *inner;
  gulong        frame_id, closed_id, tx_id;
  guint64       inner_tx;
  RlxLinkShape  shape;
  gint64        t0;
  GMainContext *context;
  GSource      *timer;

  GQueue        waiting[RLX_LINK_N_LANES];   /* Item*, not through the pipe yet */
  GQueue        pieces;                       /* Piece*, through, not visible yet */
  GQueue        delivering;                   /* Item*, through, not visible yet */
  gint64        pipe_free;                    /* virtual: the pipe is busy until then */
  gboolean      pumping;

  Item         *close_marker;                 /* inner closed; not yet in the pipe */
  GError       *close_error;

  gint64        rx_arrived, rx_visible;       /* of the frame being delivered */
};

G_DEFINE_FINAL_TYPE (RlxShapedLink, rlx_shaped_link, RLX_TYPE_LINK)

static void
item_free (gpointer data)
{
  Item *item = data;

  g_clear_pointer (&item->frame, g_bytes_unref);
  g_free (item);
}

/* The first moment at or after @t when the pipe is not stalled. */
static gint64
after_stalls (RlxShapedLink *self, gint64 t)
{
  gboolean moved = TRUE;

  /* Stalls may overlap or touch: repeat until none covers t. */
  for (guint rounds = 0; moved && rounds < 64; rounds++)
    {
      moved = FALSE;
      for (guint i = 0; i < self->shape.n_stalls; i++)
        {
          const RlxLinkStall *st = &self->shape.stalls[i];
          gint64 rel = t - self->t0 - st->at_us;

          if (rel < 0)
            continue;
          if (st->every_us > 0)
            rel %= st->every_us;
          if (rel < st->length_us)
            {
              t += st->length_us - rel;
              moved = TRUE;
            }
        }
    }
  return t;
}

static gint64
piece_time (RlxShapedLink *self, gsize bytes)
{
  if (self->shape.rate == 0)
    return 0;
  return (gint64) ceil ((double) bytes * 1e6 / (double) self->shape.rate);
}

/* Move pieces through the pipe while the choice of the next one is already
 * decided (its start is not in the future). Returns the virtual time of the
 * next choice, or G_MAXINT64 when nothing waits. */
static gint64
run_pipe (RlxShapedLink *self, gint64 now)
{
  gsize chunk = self->shape.chunk ? self->shape.chunk : RLX_LINK_SHAPE_DEFAULT_CHUNK;

  for (;;)
    {
      Item *c = g_queue_peek_head (&self->waiting[RLX_LINK_LANE_CONTROL]);
      Item *b = g_queue_peek_head (&self->waiting[RLX_LINK_LANE_BULK]);
      Item *item;
      gint64 start, end;
      gsize n;

      if (c == NULL && b == NULL)
        {
          /* Everything that came before the close is through: the close
           * follows it down the pipe. */
          if (self->close_marker != NULL)
            {
              Item *m = g_steal_pointer (&self->close_marker);

              m->visible = MAX (self->pipe_free, m->arrived) + self->shape.delay_us;
              g_queue_push_tail (&self->delivering, m);
            }
          return G_MAXINT64;
        }
      start = MAX (self->pipe_free, MIN (c ? c->arrived : G_MAXINT64, b ? b->arrived : G_MAXINT64));
      start = after_stalls (self, start);
      if (start > now)
        return start;
      /* Control first, among what had arrived when the pipe came free. */
      item = (c != NULL && c->arrived <= start) ? c : (b != NULL && b->arrived <= start) ? b : c;
      n = MIN (chunk, item->size - item->sent);
      end = start + piece_time (self, n);
      self->pipe_free = end;
      item->sent += n;
      if (n > 0)
        {
          Piece *p = g_new (Piece, 1);

          p->visible = end + self->shape.delay_us;
          p->bytes = n;
          g_queue_push_tail (&self->pieces, p);
        }
      if (item->sent == item->size)
        {
          g_queue_pop_head (&self->waiting[item->lane]);
          item->visible = end + self->shape.delay_us;
          g_queue_push_tail (&self->delivering, item);
        }
    }
}

static gboolean on_timer (gpointer user_data);

/* A source that fires at its ready time (µs), nothing else. */
static gboolean
timer_dispatch (GSource *source, GSourceFunc callback, gpointer user_data)
{
  return callback (user_data);
}

static GSourceFuncs timer_funcs = { NULL, NULL, timer_dispatch, NULL, NULL, NULL };

static void
arm_timer (RlxShapedLink *self, gint64 when)
{
  if (self->timer == NULL)
    {
      self->timer = g_source_new (&timer_funcs, sizeof (GSource));
      g_source_set_callback (self->timer, on_timer, self, NULL);
      g_source_set_static_name (self->timer, "rlx-shaped-link pipe");
      g_source_attach (self->timer, self->context);
    }
  g_source_set_ready_time (self->timer, when == G_MAXINT64 ? -1 : when);
}

static void
pump (RlxShapedLink *self)
{
  gint64 next_choice;

  if (self->pumping || rlx_link_is_closed (RLX_LINK (self)))
    return;
  self->pumping = TRUE;
  g_object_ref (self);

  for (;;)
    {
      gint64 now = g_get_monotonic_time ();
      Piece *p;
      Item *item;

      next_choice = run_pipe (self, now);

      while ((p = g_queue_peek_head (&self->pieces)) != NULL && p->visible <= now)
        {
          g_queue_pop_head (&self->pieces);
          rlx_link_add_bytes_rx_at (RLX_LINK (self), p->bytes, p->visible);
          g_free (p);
        }
      item = g_queue_peek_head (&self->delivering);
      if (item == NULL || item->visible > now)
        break;
      g_queue_pop_head (&self->delivering);
      if (item->frame == NULL)
        {
          GError *error = g_steal_pointer (&self->close_error);

          item_free (item);
          /* The inner link is already gone; this ends the wrapper. */
          rlx_link_emit_closed (RLX_LINK (self), error);
          g_clear_error (&error);
          break;
        }
      self->rx_arrived = item->arrived;
      self->rx_visible = item->visible;
      rlx_link_emit_frame_lane (RLX_LINK (self), item->lane, item->frame);
      item_free (item);
      if (rlx_link_is_closed (RLX_LINK (self)))
        break;
    }

  if (!rlx_link_is_closed (RLX_LINK (self)))
    {
      gint64 next = next_choice;
      Piece *p = g_queue_peek_head (&self->pieces);
      Item *item = g_queue_peek_head (&self->delivering);

      if (p != NULL)
        next = MIN (next, p->visible);
      if (item != NULL)
        next = MIN (next, item->visible);
      arm_timer (self, next);
    }
  self->pumping = FALSE;
  g_object_unref (self);
}

static gboolean
on_timer (gpointer user_data)
{
  RlxShapedLink *self = user_data;

  /* pump () sets the next ready time; until then, never again. */
  g_source_set_ready_time (self->timer, -1);
  pump (self);
  return G_SOURCE_CONTINUE;
}

static void
on_inner_frame (RlxLink *inner, GBytes *frame, gpointer user_data)
{
  RlxShapedLink *self = user_data;
  Item *item = g_new0 (Item, 1);

  item->frame = g_bytes_ref (frame);
  item->lane = rlx_link_get_rx_lane (inner);
  item->size = g_bytes_get_size (frame);
  item->arrived = g_get_monotonic_time ();
  g_queue_push_tail (&self->waiting[item->lane], item);
  pump (self);
}

static void
on_inner_closed (RlxLink *inner, const GError *error, gpointer user_data)
{
  RlxShapedLink *self = user_data;

  if (rlx_link_is_closed (RLX_LINK (self)) || self->close_marker != NULL)
    return;
  self->close_error = error ? g_error_copy (error) : NULL;
  self->close_marker = g_new0 (Item, 1);
  self->close_marker->arrived = g_get_monotonic_time ();
  pump (self);
}

static void
on_inner_tx (GObject *object, GParamSpec *pspec, gpointer user_data)
{
  RlxShapedLink *self = user_data;
  guint64 tx = rlx_link_get_bytes_tx (self->inner);

  if (tx > self->inner_tx)
    {
      guint64 delta = tx - self->inner_tx;

      self->inner_tx = tx;
      rlx_link_add_bytes_tx (RLX_LINK (self), delta);
    }
}

static gboolean
rlx_shaped_link_send (RlxLink *link, GBytes *frame, GError **error)
{
  return rlx_link_send_lane (RLX_SHAPED_LINK (link)->inner, RLX_LINK_LANE_BULK, frame, error);
}

static gboolean
rlx_shaped_link_send_lane (RlxLink *link, RlxLinkLane lane, GBytes *frame, GError **error)
{
  return rlx_link_send_lane (RLX_SHAPED_LINK (link)->inner, lane, frame, error);
}

static gsize
rlx_shaped_link_pending_bytes (RlxLink *link)
{
  return rlx_link_pending_bytes (RLX_SHAPED_LINK (link)->inner);
}

static gsize
rlx_shaped_link_pending_bytes_lane (RlxLink *link, RlxLinkLane lane)
{
  return rlx_link_pending_bytes_lane (RLX_SHAPED_LINK (link)->inner, lane);
}

static void
drop_state (RlxShapedLink *self)
{
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    g_queue_clear_full (&self->waiting[l], item_free);
  g_queue_clear_full (&self->delivering, item_free);
  g_queue_clear_full (&self->pieces, g_free);
  g_clear_pointer (&self->close_marker, item_free);
  g_clear_error (&self->close_error);
  if (self->timer != NULL)
    {
      g_source_destroy (self->timer);
      g_clear_pointer (&self->timer, g_source_unref);
    }
}

static void
detach_inner (RlxShapedLink *self)
{
  if (self->inner == NULL)
    return;
  g_clear_signal_handler (&self->frame_id, self->inner);
  g_clear_signal_handler (&self->closed_id, self->inner);
  g_clear_signal_handler (&self->tx_id, self->inner);
}

static void
rlx_shaped_link_close (RlxLink *link)
{
  RlxShapedLink *self = RLX_SHAPED_LINK (link);
  g_autoptr(GError) error = NULL;

  detach_inner (self);
  drop_state (self);
  if (self->inner != NULL)
    rlx_link_close (self->inner);
  error = g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED, "link to %s closed by this node",
                       rlx_link_get_peer (link));
  rlx_link_emit_closed (link, error);
}

static void
rlx_shaped_link_dispose (GObject *object)
{
  RlxShapedLink *self = RLX_SHAPED_LINK (object);

  detach_inner (self);
  drop_state (self);
  if (self->inner != NULL && !rlx_link_is_closed (self->inner))
    rlx_link_close (self->inner);
  g_clear_object (&self->inner);
  G_OBJECT_CLASS (rlx_shaped_link_parent_class)->dispose (object);
}

static void
rlx_shaped_link_finalize (GObject *object)
{
  RlxShapedLink *self = RLX_SHAPED_LINK (object);

  g_clear_pointer (&self->context, g_main_context_unref);
  G_OBJECT_CLASS (rlx_shaped_link_parent_class)->finalize (object);
}

static void
rlx_shaped_link_class_init (RlxShapedLinkClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  RlxLinkClass *link_class = RLX_LINK_CLASS (klass);

  object_class->dispose = rlx_shaped_link_dispose;
  object_class->finalize = rlx_shaped_link_finalize;
  link_class->send = rlx_shaped_link_send;
  link_class->send_lane = rlx_shaped_link_send_lane;
  link_class->close = rlx_shaped_link_close;
  link_class->pending_bytes = rlx_shaped_link_pending_bytes;
  link_class->pending_bytes_lane = rlx_shaped_link_pending_bytes_lane;
}

static void
rlx_shaped_link_init (RlxShapedLink *self)
{
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    g_queue_init (&self->waiting[l]);
  g_queue_init (&self->pieces);
  g_queue_init (&self->delivering);
}

RlxLink *
rlx_shaped_link_new (RlxLink *inner, const RlxLinkShape *shape)
{
  RlxShapedLink *self;
  g_autofree char *peer = NULL;

  g_return_val_if_fail (RLX_IS_LINK (inner), NULL);
  g_return_val_if_fail (shape != NULL, NULL);

  self = g_object_new (RLX_TYPE_SHAPED_LINK, NULL);
  self->inner = g_object_ref (inner);
  self->shape = *shape;
  self->context = g_main_context_ref_thread_default ();
  self->t0 = g_get_monotonic_time ();
  self->pipe_free = self->t0;
  self->inner_tx = rlx_link_get_bytes_tx (inner);
  peer = g_strdup_printf ("%s (shaped)", rlx_link_get_peer (inner) ? rlx_link_get_peer (inner)
                                                                    : "peer");
  rlx_link_set_peer (RLX_LINK (self), peer);
  self->frame_id = g_signal_connect (inner, "frame", G_CALLBACK (on_inner_frame), self);
  self->closed_id = g_signal_connect (inner, "closed", G_CALLBACK (on_inner_closed), self);
  self->tx_id = g_signal_connect (inner, "notify::bytes-tx", G_CALLBACK (on_inner_tx), self);
  if (rlx_link_is_closed (inner))
    on_inner_closed (inner, NULL, self);
  return RLX_LINK (self);
}

RlxLink *
rlx_shaped_link_get_inner (RlxShapedLink *self)
{
  g_return_val_if_fail (RLX_IS_SHAPED_LINK (self), NULL);
  return self->inner;
}

void
rlx_shaped_link_get_rx_times (RlxShapedLink *self, gint64 *arrived, gint64 *visible)
{
  g_return_if_fail (RLX_IS_SHAPED_LINK (self));
  if (arrived)
    *arrived = self->rx_arrived;
  if (visible)
    *visible = self->rx_visible;
}
