/* rlx-sender.c — backpressure in front of one link (see rlx-sender.h)
 *
 * One FIFO of queued frames (class + bytes) with per-class counts, and a FIFO
 * of the sizes of frames in flight. A frame in flight has drained once the
 * link's pending_bytes is no larger than the bytes handed to the link after
 * it; the link's notify::bytes-tx tells us when to look.
 */
#include "rlx-config.h"
#include "rlx-sender.h"

G_DEFINE_QUARK (rlx-sender-error-quark, rlx_sender_error)

typedef struct {
  RlxSendClass klass;
  GBytes      *frame;
} Item;

struct _RlxSender
{
  GObject   parent_instance;

  RlxLink  *link;
  gulong    notify_id;
  gulong    closed_id;

  guint     max_in_flight;
  guint     max_control;
  guint     max_bulk;

  GQueue    queue;            /* Item*, oldest first */
  guint     queued[3];
  guint64   dropped[3];

  GQueue    in_flight;        /* GSIZE_TO_POINTER (frame size), oldest first */
  gsize     in_flight_bytes;

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

static guint
depth (RlxSender *self)
{
  return g_queue_get_length (&self->queue) + g_queue_get_length (&self->in_flight);
}

static void
notify_changes (RlxSender *self)
{
  guint d = depth (self);
  guint f = g_queue_get_length (&self->in_flight);

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

static void
report_drop (RlxSender *self, RlxSendClass klass, const char *reason)
{
  self->dropped[klass]++;
  g_debug ("sender for %s: dropped a %s frame (%" G_GUINT64_FORMAT " so far): %s",
           rlx_link_get_peer (self->link), class_names[klass], self->dropped[klass], reason);
  g_signal_emit (self, signals[SIGNAL_DROPPED], 0, (guint) klass, self->dropped[klass], reason);
}

/* Retire frames the link has written out. */
static void
check_drained (RlxSender *self)
{
  gsize pending = rlx_link_pending_bytes (self->link);

  while (!g_queue_is_empty (&self->in_flight))
    {
      gsize head = GPOINTER_TO_SIZE (g_queue_peek_head (&self->in_flight));

      if (pending > self->in_flight_bytes - head)
        break;
      g_queue_pop_head (&self->in_flight);
      self->in_flight_bytes -= head;
    }
}

static void
clear_all (RlxSender *self)
{
  g_queue_clear_full (&self->queue, item_free);
  g_queue_clear (&self->in_flight);
  self->in_flight_bytes = 0;
  for (guint i = 0; i < G_N_ELEMENTS (self->queued); i++)
    self->queued[i] = 0;
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
      check_drained (self);
      while (!self->closed &&
             g_queue_get_length (&self->in_flight) < self->max_in_flight &&
             !g_queue_is_empty (&self->queue))
        {
          Item *item = g_queue_pop_head (&self->queue);
          gsize size = g_bytes_get_size (item->frame);
          g_autoptr(GError) error = NULL;

          self->queued[item->klass]--;
          g_queue_push_tail (&self->in_flight, GSIZE_TO_POINTER (size));
          self->in_flight_bytes += size;
          /* The link may write it (and notify bytes-tx) right inside send. */
          if (!rlx_link_send (self->link, item->frame, &error))
            {
              /* Undo: it never went out. */
              g_queue_pop_tail (&self->in_flight);
              self->in_flight_bytes -= size;
              if (!g_error_matches (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED))
                {
                  g_autofree char *reason = g_strdup_printf ("the link refused it: %s",
                                                             error->message);
                  /* Bulk is "never dropped" only as far as the link allows. */
                  report_drop (self, item->klass, reason);
                }
            }
          item_free (item);
          check_drained (self);
        }
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

  self->closed = TRUE;
  clear_all (self);
  notify_changes (self);
}

gboolean
rlx_sender_send (RlxSender *self, RlxSendClass klass, GBytes *frame, GError **error)
{
  Item *item;

  g_return_val_if_fail (RLX_IS_SENDER (self), FALSE);
  g_return_val_if_fail (klass <= RLX_SEND_BULK, FALSE);
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
      for (GList *l = self->queue.head; l != NULL; l = l->next)
        {
          Item *old = l->data;

          if (old->klass == RLX_SEND_STEP)
            {
              g_queue_delete_link (&self->queue, l);
              item_free (old);
              self->queued[RLX_SEND_STEP]--;
              report_drop (self, RLX_SEND_STEP, "superseded a queued step");
              break;
            }
        }
      break;

    case RLX_SEND_CONTROL:
    default:
      if (self->queued[RLX_SEND_CONTROL] >= self->max_control)
        for (GList *l = self->queue.head; l != NULL; l = l->next)
          {
            Item *old = l->data;

            if (old->klass == RLX_SEND_CONTROL)
              {
                g_queue_delete_link (&self->queue, l);
                item_free (old);
                self->queued[RLX_SEND_CONTROL]--;
                report_drop (self, RLX_SEND_CONTROL,
                             "outbound queue full, dropped the oldest control message");
                break;
              }
          }
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
  item->frame = g_bytes_ref (frame);
  g_queue_push_tail (&self->queue, item);
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
  return g_queue_get_length (&self->in_flight);
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
      g_value_set_uint (value, g_queue_get_length (&self->in_flight));
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
                  0, NULL, NULL, NULL, G_TYPE_NONE, 3,
                  G_TYPE_UINT, G_TYPE_UINT64, G_TYPE_STRING);
}

static void
rlx_sender_init (RlxSender *self)
{
  g_queue_init (&self->queue);
  g_queue_init (&self->in_flight);
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
  self->notify_id = g_signal_connect (link, "notify::bytes-tx",
                                      G_CALLBACK (on_link_progress), self);
  self->closed_id = g_signal_connect (link, "closed", G_CALLBACK (on_link_closed), self);
  return self;
}
