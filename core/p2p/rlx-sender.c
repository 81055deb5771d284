/* rlx-sender.c — backpressure in front of one link (see rlx-sender.h)
 *
 * Per lane: a FIFO of queued frames (class + bytes) and a FIFO of the sizes
 * of frames in flight; per class, counts. A frame in flight on a lane has
 * drained once the link's pending bytes of that lane are no more than the
 * bytes handed to the lane after it; the link's notify::bytes-tx tells us
 * when to look.
 */
#include "rlx-config.h"
#include "rlx-sender.h"

G_DEFINE_QUARK (rlx-sender-error-quark, rlx_sender_error)

typedef struct {
  RlxSendClass klass;
  RlxLinkLane  lane;
  guint64      seq;       /* send order, across lanes */
  GBytes      *frame;
} Item;

typedef struct {
  GQueue queue;           /* Item*, oldest first */
  GQueue in_flight;       /* GSIZE_TO_POINTER (frame size), oldest first */
  gsize  in_flight_bytes;
} Lane;

struct _RlxSender
{
  GObject   parent_instance;

  RlxLink  *link;
  gulong    notify_id;
  gulong    closed_id;

  guint     max_in_flight;
  guint     max_control;
  guint     max_bulk;

  gboolean  lanes;            /* the link keeps lanes apart */
  Lane      lane[RLX_LINK_N_LANES];
  guint64   seq;
  guint     queued[3];
  guint64   dropped[3];

  gboolean  pumping;
  gboolean  again;
  gboolean  closed;
  guint     notified_depth;
  guint     notified_in_flight;
};

G_DEFINE_FINAL_TYPE (RlxSender, rlx_sender, G_TYPE_OBJECT)

enum {
  PROP_0,
  PROP_LINK,
  PROP_DEPTH,
  PROP_IN_FLIGHT,
  N_PROPS
};

enum {
  SIGNAL_DROPPED,
  N_SIGNALS
};

static GParamSpec *properties[N_PROPS];
static guint signals[N_SIGNALS];

static const char *const class_names[] = { "control", "step", "bulk" };

static void
item_free (gpointer data)
{
  Item *item = data;

  g_bytes_unref (item->frame);
  g_free (item);
}

static gint
item_by_seq (gconstpointer a, gconstpointer b, gpointer user_data)
{
  guint64 x = ((const Item *) a)->seq, y = ((const Item *) b)->seq;

  return x < y ? -1 : x > y;
}

static guint
n_in_flight (RlxSender *self)
{
  return g_queue_get_length (&self->lane[0].in_flight) +
         g_queue_get_length (&self->lane[1].in_flight);
}

static guint
depth (RlxSender *self)
{
  return g_queue_get_length (&self->lane[0].queue) + g_queue_get_length (&self->lane[1].queue) +
         n_in_flight (self);
}

static void
notify_changes (RlxSender *self)
{
  guint d = depth (self);
  guint f = n_in_flight (self);

  g_object_freeze_notify (G_OBJECT (self));
  if (f != self->notified_in_flight)
    {
      self->notified_in_flight = f;
      g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_IN_FLIGHT]);
    }
  if (d != self->notified_depth)
    {
      self->notified_depth = d;
      g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_DEPTH]);
    }
  g_object_thaw_notify (G_OBJECT (self));
}

static const char *const drop_names[] = {
  "superseded", "queue full", "refused by the link", "link closed",
};

static void
report_drop (RlxSender *self, RlxSendClass klass, RlxSendDrop why, const char *reason)
{
  const char *peer = rlx_link_get_peer (self->link);

  self->dropped[klass]++;
  g_debug ("sender for %s: dropped a %s frame (%s; %" G_GUINT64_FORMAT " so far): %s",
           peer, class_names[klass], drop_names[why], self->dropped[klass], reason);
  g_signal_emit (self, signals[SIGNAL_DROPPED], 0, (guint) klass, (guint) why,
                 peer ? peer : "peer", reason, self->dropped[klass]);
}

/* Retire frames the link has written out. */
static void
check_drained (RlxSender *self, RlxLinkLane lane)
{
  Lane *l = &self->lane[lane];
  gsize pending = rlx_link_pending_bytes_lane (self->link, lane);

  while (!g_queue_is_empty (&l->in_flight))
    {
      gsize head = GPOINTER_TO_SIZE (g_queue_peek_head (&l->in_flight));

      if (pending > l->in_flight_bytes - head)
        break;
      g_queue_pop_head (&l->in_flight);
      l->in_flight_bytes -= head;
    }
}

static void
clear_all (RlxSender *self)
{
  for (guint i = 0; i < RLX_LINK_N_LANES; i++)
    {
      g_queue_clear_full (&self->lane[i].queue, item_free);
      g_queue_clear (&self->lane[i].in_flight);
      self->lane[i].in_flight_bytes = 0;
    }
  for (guint i = 0; i < G_N_ELEMENTS (self->queued); i++)
    self->queued[i] = 0;
}

/* Hand queued frames of @lane to the link while it has a free slot. */
static void
pump_lane (RlxSender *self, RlxLinkLane lane)
{
  Lane *l = &self->lane[lane];

  check_drained (self, lane);
  while (!self->closed && g_queue_get_length (&l->in_flight) < self->max_in_flight &&
         !g_queue_is_empty (&l->queue))
    {
      Item *item = g_queue_pop_head (&l->queue);
      gsize size = g_bytes_get_size (item->frame);
      g_autoptr(GError) error = NULL;

      self->queued[item->klass]--;
      g_queue_push_tail (&l->in_flight, GSIZE_TO_POINTER (size));
      l->in_flight_bytes += size;
      /* The link may write it (and notify bytes-tx) right inside send. */
      if (!rlx_link_send_lane (self->link, item->lane, item->frame, &error))
        {
          /* Undo: it never went out. */
          g_queue_pop_tail (&l->in_flight);
          l->in_flight_bytes -= size;
          if (g_error_matches (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED))
            report_drop (self, item->klass, RLX_SEND_DROP_LINK_CLOSED,
                         "the link closed before it was sent");
          else
            {
              g_autofree char *reason = g_strdup_printf ("the link refused it: %s",
                                                         error->message);
              /* Bulk is "never dropped" only as far as the link allows. */
              report_drop (self, item->klass, RLX_SEND_DROP_LINK_REFUSED, reason);
            }
        }
      item_free (item);
      check_drained (self, lane);
    }
}

static void
pump (RlxSender *self)
{
  if (self->pumping)
    {
      self->again = TRUE;
      return;
    }
  self->pumping = TRUE;
  g_object_ref (self);

  do
    {
      self->again = FALSE;
      if (self->closed)
        break;
      pump_lane (self, RLX_LINK_LANE_CONTROL);
      pump_lane (self, RLX_LINK_LANE_BULK);
    }
  while (self->again);

  self->pumping = FALSE;
  notify_changes (self);
  g_object_unref (self);
}

static void
on_link_progress (GObject *object, GParamSpec *pspec, gpointer user_data)
{
  pump (RLX_SENDER (user_data));
}

static void
on_link_closed (RlxLink *link, const GError *error, gpointer user_data)
{
  RlxSender *self = user_data;
  g_autofree char *reason = NULL;
  GQueue lost = G_QUEUE_INIT;

  if (self->closed)
    return;
  self->closed = TRUE;
  g_object_ref (self);
  /* Everything still queued is lost: report each, oldest first. */
  for (guint i = 0; i < RLX_LINK_N_LANES; i++)
    while (!g_queue_is_empty (&self->lane[i].queue))
      g_queue_insert_sorted (&lost, g_queue_pop_head (&self->lane[i].queue), item_by_seq, NULL);
  clear_all (self);
  notify_changes (self);
  reason = g_strdup_printf ("the link closed before it was sent (%s)",
                            error ? error->message : "closed");
  for (GList *l = lost.head; l != NULL; l = l->next)
    report_drop (self, ((Item *) l->data)->klass, RLX_SEND_DROP_LINK_CLOSED, reason);
  g_queue_clear_full (&lost, item_free);
  g_object_unref (self);
}

/* The oldest queued item of @klass, in either lane. */
static GList *
oldest_of_class (RlxSender *self, RlxSendClass klass, Lane **lane_out)
{
  GList *best = NULL;

  for (guint i = 0; i < RLX_LINK_N_LANES; i++)
    for (GList *l = self->lane[i].queue.head; l != NULL; l = l->next)
      if (((Item *) l->data)->klass == klass)
        {
          if (best == NULL || ((Item *) l->data)->seq < ((Item *) best->data)->seq)
            {
              best = l;
              *lane_out = &self->lane[i];
            }
          break;
        }
  return best;
}

static void
drop_queued (RlxSender *self, RlxSendClass klass, RlxSendDrop why, const char *reason)
{
  Lane *lane = NULL;
  GList *l = oldest_of_class (self, klass, &lane);

  if (l == NULL)
    return;
  item_free (l->data);
  g_queue_delete_link (&lane->queue, l);
  self->queued[klass]--;
  report_drop (self, klass, why, reason);
}

gboolean
rlx_sender_send (RlxSender *self, RlxSendClass klass, GBytes *frame, GError **error)
{
  return rlx_sender_send_lane (self, klass, RLX_LINK_LANE_BULK, frame, error);
}

gboolean
rlx_sender_send_lane (RlxSender *self, RlxSendClass klass, RlxLinkLane lane, GBytes *frame,
                      GError **error)
{
  Item *item;

  g_return_val_if_fail (RLX_IS_SENDER (self), FALSE);
  g_return_val_if_fail (klass <= RLX_SEND_BULK, FALSE);
  g_return_val_if_fail (lane == RLX_LINK_LANE_CONTROL || lane == RLX_LINK_LANE_BULK, FALSE);
  g_return_val_if_fail (frame != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (self->closed || rlx_link_is_closed (self->link))
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED,
                   "link to %s is closed", rlx_link_get_peer (self->link));
      return FALSE;
    }

  switch (klass)
    {
    case RLX_SEND_BULK:
      if (self->queued[RLX_SEND_BULK] >= self->max_bulk)
        {
          g_set_error (error, RLX_SENDER_ERROR, RLX_SENDER_ERROR_FULL,
                       "%u bulk frames already wait for the link to %s; "
                       "retry when the sender's depth drops",
                       self->queued[RLX_SEND_BULK], rlx_link_get_peer (self->link));
          return FALSE;
        }
      break;

    case RLX_SEND_STEP:
      drop_queued (self, RLX_SEND_STEP, RLX_SEND_DROP_SUPERSEDED, "superseded a queued step");
      break;

    case RLX_SEND_CONTROL:
    default:
      if (self->queued[RLX_SEND_CONTROL] >= self->max_control)
        drop_queued (self, RLX_SEND_CONTROL, RLX_SEND_DROP_QUEUE_FULL,
                     "outbound queue full, dropped the oldest control message");
      break;
    }

  /* A ::dropped handler may have closed the link. */
  if (self->closed)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED,
                   "link to %s is closed", rlx_link_get_peer (self->link));
      return FALSE;
    }

  item = g_new0 (Item, 1);
  item->klass = klass;
  /* A link without lanes keeps one order: one queue. */
  item->lane = self->lanes ? lane : RLX_LINK_LANE_BULK;
  item->seq = self->seq++;
  item->frame = g_bytes_ref (frame);
  g_queue_push_tail (&self->lane[item->lane].queue, item);
  self->queued[klass]++;
  pump (self);
  return TRUE;
}

RlxLink *
rlx_sender_get_link (RlxSender *self)
{
  g_return_val_if_fail (RLX_IS_SENDER (self), NULL);
  return self->link;
}

guint
rlx_sender_get_depth (RlxSender *self)
{
  g_return_val_if_fail (RLX_IS_SENDER (self), 0);
  return depth (self);
}

guint
rlx_sender_get_in_flight (RlxSender *self)
{
  g_return_val_if_fail (RLX_IS_SENDER (self), 0);
  return n_in_flight (self);
}

guint
rlx_sender_get_queued (RlxSender *self, RlxSendClass klass)
{
  g_return_val_if_fail (RLX_IS_SENDER (self), 0);
  g_return_val_if_fail (klass <= RLX_SEND_BULK, 0);
  return self->queued[klass];
}

guint64
rlx_sender_get_dropped (RlxSender *self, RlxSendClass klass)
{
  g_return_val_if_fail (RLX_IS_SENDER (self), 0);
  g_return_val_if_fail (klass <= RLX_SEND_BULK, 0);
  return self->dropped[klass];
}

gboolean
rlx_sender_can_send_bulk (RlxSender *self)
{
  g_return_val_if_fail (RLX_IS_SENDER (self), FALSE);
  return !self->closed && self->queued[RLX_SEND_BULK] < self->max_bulk;
}

static void
rlx_sender_dispose (GObject *object)
{
  RlxSender *self = RLX_SENDER (object);

  if (self->link != NULL)
    {
      g_clear_signal_handler (&self->notify_id, self->link);
      g_clear_signal_handler (&self->closed_id, self->link);
      g_clear_object (&self->link);
    }
  clear_all (self);
  G_OBJECT_CLASS (rlx_sender_parent_class)->dispose (object);
}

static void
rlx_sender_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  RlxSender *self = RLX_SENDER (object);

  switch (prop_id)
    {
    case PROP_LINK:
      g_value_set_object (value, self->link);
      break;
    case PROP_DEPTH:
      g_value_set_uint (value, depth (self));
      break;
    case PROP_IN_FLIGHT:
      g_value_set_uint (value, n_in_flight (self));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
rlx_sender_class_init (RlxSenderClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = rlx_sender_dispose;
  object_class->get_property = rlx_sender_get_property;

  properties[PROP_LINK] =
    g_param_spec_object ("link", NULL, NULL, RLX_TYPE_LINK,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  properties[PROP_DEPTH] =
    g_param_spec_uint ("depth", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  properties[PROP_IN_FLIGHT] =
    g_param_spec_uint ("in-flight", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);

  signals[SIGNAL_DROPPED] =
    g_signal_new ("dropped", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                  0, NULL, NULL, NULL, G_TYPE_NONE, 5,
                  G_TYPE_UINT, G_TYPE_UINT, G_TYPE_STRING, G_TYPE_STRING, G_TYPE_UINT64);
}

static void
rlx_sender_init (RlxSender *self)
{
  for (guint i = 0; i < RLX_LINK_N_LANES; i++)
    {
      g_queue_init (&self->lane[i].queue);
      g_queue_init (&self->lane[i].in_flight);
    }
}

RlxSender *
rlx_sender_new (RlxLink *link, guint max_in_flight, guint max_control, guint max_bulk)
{
  RlxSender *self;

  g_return_val_if_fail (RLX_IS_LINK (link), NULL);

  self = g_object_new (RLX_TYPE_SENDER, NULL);
  self->link = g_object_ref (link);
  self->max_in_flight = max_in_flight ? max_in_flight : RLX_SENDER_DEFAULT_MAX_IN_FLIGHT;
  self->max_control = max_control ? max_control : RLX_SENDER_DEFAULT_MAX_CONTROL;
  self->max_bulk = max_bulk ? max_bulk : RLX_SENDER_DEFAULT_MAX_BULK;
  self->closed = rlx_link_is_closed (link);
  self->lanes = rlx_link_has_lanes (link);
  self->notify_id = g_signal_connect (link, "notify::bytes-tx",
                                      G_CALLBACK (on_link_progress), self);
  self->closed_id = g_signal_connect (link, "closed", G_CALLBACK (on_link_closed), self);
  return self;
}
