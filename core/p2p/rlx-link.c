/* rlx-link.c — the RlxLink base class: signals, properties, byte counters,
 * lanes, liveness
 *
 * Subclasses (rlx-unix-link.c, rlx-shaped-link.c, the ICE link) implement
 * send, close and pending_bytes (and send_lane / pending_bytes_lane when they
 * keep the lanes apart) and report through rlx_link_emit_frame[_lane] /
 * _emit_closed / _add_bytes_tx / _add_bytes_rx. The base class guarantees
 * ::closed is emitted once and that nothing is sent on a closed link.
 */
#include "rlx-config.h"
#include "rlx-link.h"

G_DEFINE_QUARK (rlx-link-error-quark, rlx_link_error)

typedef struct {
  char    *peer;
  guint64  bytes_tx;
  guint64  bytes_rx;
  guint64  io_us;
  gint64   last_rx;
  gint64   last_rx_notified;
  RlxLinkLane rx_lane;
  gboolean closed;
} RlxLinkPrivate;

G_DEFINE_ABSTRACT_TYPE_WITH_PRIVATE (RlxLink, rlx_link, G_TYPE_OBJECT)

enum {
  PROP_0,
  PROP_PEER,
  PROP_BYTES_TX,
  PROP_BYTES_RX,
  PROP_LAST_RX,
  PROP_CLOSED,
  N_PROPS
};

enum {
  SIGNAL_FRAME,
  SIGNAL_CLOSED,
  N_SIGNALS
};

static GParamSpec *properties[N_PROPS];
static guint signals[N_SIGNALS];

static void
rlx_link_finalize (GObject *object)
{
  RlxLinkPrivate *priv = rlx_link_get_instance_private (RLX_LINK (object));

  g_clear_pointer (&priv->peer, g_free);
  G_OBJECT_CLASS (rlx_link_parent_class)->finalize (object);
}

static void
rlx_link_get_property (GObject *object, guint prop_id, GValue *value,
                       GParamSpec *pspec)
{
  RlxLinkPrivate *priv = rlx_link_get_instance_private (RLX_LINK (object));

  switch (prop_id)
    {
    case PROP_PEER:
      g_value_set_string (value, priv->peer);
      break;
    case PROP_BYTES_TX:
      g_value_set_uint64 (value, priv->bytes_tx);
      break;
    case PROP_BYTES_RX:
      g_value_set_uint64 (value, priv->bytes_rx);
      break;
    case PROP_LAST_RX:
      g_value_set_int64 (value, priv->last_rx);
      break;
    case PROP_CLOSED:
      g_value_set_boolean (value, priv->closed);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static gsize
rlx_link_real_pending_bytes (RlxLink *self)
{
  return 0;
}

static void
rlx_link_class_init (RlxLinkClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = rlx_link_finalize;
  object_class->get_property = rlx_link_get_property;
  klass->pending_bytes = rlx_link_real_pending_bytes;

  properties[PROP_PEER] =
    g_param_spec_string ("peer", NULL, NULL, NULL,
                         G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  properties[PROP_BYTES_TX] =
    g_param_spec_uint64 ("bytes-tx", NULL, NULL, 0, G_MAXUINT64, 0,
                         G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  properties[PROP_BYTES_RX] =
    g_param_spec_uint64 ("bytes-rx", NULL, NULL, 0, G_MAXUINT64, 0,
                         G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  properties[PROP_LAST_RX] =
    g_param_spec_int64 ("last-rx", NULL, NULL, 0, G_MAXINT64, 0,
                        G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  properties[PROP_CLOSED] =
    g_param_spec_boolean ("closed", NULL, NULL, FALSE,
                          G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);

  signals[SIGNAL_FRAME] =
    g_signal_new ("frame", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                  0, NULL, NULL, NULL, G_TYPE_NONE, 1, G_TYPE_BYTES);
  signals[SIGNAL_CLOSED] =
    g_signal_new ("closed", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                  0, NULL, NULL, NULL, G_TYPE_NONE, 1,
                  G_TYPE_ERROR | G_SIGNAL_TYPE_STATIC_SCOPE);
}

static void
rlx_link_init (RlxLink *self)
{
  RlxLinkPrivate *priv = rlx_link_get_instance_private (self);

  priv->rx_lane = RLX_LINK_LANE_BULK;
}

gboolean
rlx_link_send (RlxLink *self, GBytes *frame, GError **error)
{
  return rlx_link_send_lane (self, RLX_LINK_LANE_BULK, frame, error);
}

gboolean
rlx_link_send_lane (RlxLink *self, RlxLinkLane lane, GBytes *frame, GError **error)
{
  RlxLinkPrivate *priv;
  RlxLinkClass *klass;

  g_return_val_if_fail (RLX_IS_LINK (self), FALSE);
  g_return_val_if_fail (lane == RLX_LINK_LANE_CONTROL || lane == RLX_LINK_LANE_BULK, FALSE);
  g_return_val_if_fail (frame != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  priv = rlx_link_get_instance_private (self);
  if (priv->closed)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED,
                   "link to %s is closed", priv->peer ? priv->peer : "peer");
      return FALSE;
    }
  if (lane == RLX_LINK_LANE_CONTROL && g_bytes_get_size (frame) > RLX_LINK_MAX_CONTROL_FRAME)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE,
                   "a control frame of %" G_GSIZE_FORMAT " bytes is over the control lane's cap "
                   "of %" G_GSIZE_FORMAT " bytes (the link to %s refuses it; send large frames "
                   "on the bulk lane)", g_bytes_get_size (frame), RLX_LINK_MAX_CONTROL_FRAME,
                   priv->peer ? priv->peer : "peer");
      return FALSE;
    }
  klass = RLX_LINK_GET_CLASS (self);
  if (klass->send_lane != NULL)
    return klass->send_lane (self, lane, frame, error);
  g_return_val_if_fail (klass->send != NULL, FALSE);
  return klass->send (self, frame, error);
}

gboolean
rlx_link_has_lanes (RlxLink *self)
{
  g_return_val_if_fail (RLX_IS_LINK (self), FALSE);
  return RLX_LINK_GET_CLASS (self)->send_lane != NULL;
}

void
rlx_link_close (RlxLink *self)
{
  RlxLinkPrivate *priv;

  g_return_if_fail (RLX_IS_LINK (self));

  priv = rlx_link_get_instance_private (self);
  if (priv->closed)
    return;
  /* ::closed handlers may drop the last reference their owner held. */
  g_object_ref (self);
  if (RLX_LINK_GET_CLASS (self)->close != NULL)
    RLX_LINK_GET_CLASS (self)->close (self);
  /* A subclass that forgot to report still ends up closed, once. */
  if (!priv->closed)
    {
      g_autoptr(GError) error = g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED,
                                             "link closed");
      rlx_link_emit_closed (self, error);
    }
  g_object_unref (self);
}

gsize
rlx_link_pending_bytes (RlxLink *self)
{
  g_return_val_if_fail (RLX_IS_LINK (self), 0);
  return RLX_LINK_GET_CLASS (self)->pending_bytes (self);
}

gsize
rlx_link_pending_bytes_lane (RlxLink *self, RlxLinkLane lane)
{
  RlxLinkClass *klass;

  g_return_val_if_fail (RLX_IS_LINK (self), 0);
  g_return_val_if_fail (lane == RLX_LINK_LANE_CONTROL || lane == RLX_LINK_LANE_BULK, 0);
  klass = RLX_LINK_GET_CLASS (self);
  /* One order for all: a lane has drained only when everything has. */
  if (klass->pending_bytes_lane == NULL)
    return klass->pending_bytes (self);
  return klass->pending_bytes_lane (self, lane);
}

const char *
rlx_link_get_peer (RlxLink *self)
{
  RlxLinkPrivate *priv;

  g_return_val_if_fail (RLX_IS_LINK (self), NULL);
  priv = rlx_link_get_instance_private (self);
  return priv->peer;
}

guint64
rlx_link_get_bytes_tx (RlxLink *self)
{
  RlxLinkPrivate *priv;

  g_return_val_if_fail (RLX_IS_LINK (self), 0);
  priv = rlx_link_get_instance_private (self);
  return priv->bytes_tx;
}

guint64
rlx_link_get_bytes_rx (RlxLink *self)
{
  RlxLinkPrivate *priv;

  g_return_val_if_fail (RLX_IS_LINK (self), 0);
  priv = rlx_link_get_instance_private (self);
  return priv->bytes_rx;
}

gboolean
rlx_link_is_closed (RlxLink *self)
{
  RlxLinkPrivate *priv;

  g_return_val_if_fail (RLX_IS_LINK (self), TRUE);
  priv = rlx_link_get_instance_private (self);
  return priv->closed;
}

void
rlx_link_set_peer (RlxLink *self, const char *peer)
{
  RlxLinkPrivate *priv;

  g_return_if_fail (RLX_IS_LINK (self));
  priv = rlx_link_get_instance_private (self);
  if (g_strcmp0 (priv->peer, peer) == 0)
    return;
  g_free (priv->peer);
  priv->peer = g_strdup (peer);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_PEER]);
}

void
rlx_link_emit_frame (RlxLink *self, GBytes *frame)
{
  rlx_link_emit_frame_lane (self, RLX_LINK_LANE_BULK, frame);
}

void
rlx_link_emit_frame_lane (RlxLink *self, RlxLinkLane lane, GBytes *frame)
{
  RlxLinkPrivate *priv;
  RlxLinkLane outer;

  g_return_if_fail (RLX_IS_LINK (self));
  g_return_if_fail (frame != NULL);
  priv = rlx_link_get_instance_private (self);
  if (priv->closed)
    return;
  /* A handler may run the main loop's other sources, which deliver frames
   * of their own: restore the lane of the outer delivery afterwards. */
  outer = priv->rx_lane;
  priv->rx_lane = lane;
  g_signal_emit (self, signals[SIGNAL_FRAME], 0, frame);
  priv->rx_lane = outer;
}

RlxLinkLane
rlx_link_get_rx_lane (RlxLink *self)
{
  RlxLinkPrivate *priv;

  g_return_val_if_fail (RLX_IS_LINK (self), RLX_LINK_LANE_BULK);
  priv = rlx_link_get_instance_private (self);
  return priv->rx_lane;
}

void
rlx_link_emit_closed (RlxLink *self, const GError *error)
{
  RlxLinkPrivate *priv;
  g_autoptr(GError) fallback = NULL;

  g_return_if_fail (RLX_IS_LINK (self));
  priv = rlx_link_get_instance_private (self);
  if (priv->closed)
    return;
  priv->closed = TRUE;
  if (error == NULL)
    error = fallback = g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED, "link closed");
  /* A peer that broke the rules (a frame over a lane's cap, bytes that are
   * not frames, a frame kept half-sent) is said in the log, whoever listens
   * to ::closed (the remote link says its own: RLX_REMOTE_ERROR_PROTOCOL). */
  if (g_error_matches (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE) ||
      g_error_matches (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL) ||
      g_error_matches (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_SLOW))
    g_message ("link to %s closed: %s", priv->peer ? priv->peer : "peer", error->message);

  g_object_ref (self);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_CLOSED]);
  g_signal_emit (self, signals[SIGNAL_CLOSED], 0, error);
  g_object_unref (self);
}

void
rlx_link_add_bytes_tx (RlxLink *self, guint64 n)
{
  RlxLinkPrivate *priv;

  g_return_if_fail (RLX_IS_LINK (self));
  if (n == 0)
    return;
  priv = rlx_link_get_instance_private (self);
  priv->bytes_tx += n;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_BYTES_TX]);
}

void
rlx_link_add_bytes_rx (RlxLink *self, guint64 n)
{
  rlx_link_add_bytes_rx_at (self, n, g_get_monotonic_time ());
}

void
rlx_link_add_bytes_rx_at (RlxLink *self, guint64 n, gint64 when)
{
  RlxLinkPrivate *priv;

  g_return_if_fail (RLX_IS_LINK (self));
  if (n == 0)
    return;
  priv = rlx_link_get_instance_private (self);
  priv->bytes_rx += n;
  priv->last_rx = MAX (priv->last_rx, when);
  g_object_freeze_notify (G_OBJECT (self));
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_BYTES_RX]);
  if (priv->last_rx - priv->last_rx_notified >= RLX_LINK_LAST_RX_NOTIFY_US)
    {
      priv->last_rx_notified = priv->last_rx;
      g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_LAST_RX]);
    }
  g_object_thaw_notify (G_OBJECT (self));
}

gint64
rlx_link_get_last_rx (RlxLink *self)
{
  RlxLinkPrivate *priv;

  g_return_val_if_fail (RLX_IS_LINK (self), 0);
  priv = rlx_link_get_instance_private (self);
  return priv->last_rx;
}

guint64
rlx_link_get_io_us (RlxLink *self)
{
  RlxLinkPrivate *priv;

  g_return_val_if_fail (RLX_IS_LINK (self), 0);
  priv = rlx_link_get_instance_private (self);
  return priv->io_us;
}

void
rlx_link_add_io_us (RlxLink *self, guint64 us)
{
  RlxLinkPrivate *priv;

  g_return_if_fail (RLX_IS_LINK (self));
  priv = rlx_link_get_instance_private (self);
  priv->io_us += us;
}
