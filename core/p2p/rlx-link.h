/* rlx-link.h — one reliable, framed, bidirectional channel to a peer, with
 * two priority lanes
 *
 * The coordinator talks to every peer through this interface and does not
 * know which transport is underneath (a Unix socket of the local bus, or an
 * ICE/QUIC link to another machine). Frames are whole wire messages (see
 * core/wire).
 *
 * Lanes. Every frame is sent on one of two lanes:
 *   RLX_LINK_LANE_CONTROL  small messages that must not wait (heartbeats, step
 *                          commits, acknowledgements, leader changes);
 *   RLX_LINK_LANE_BULK     large frames (gradient buckets, updates, snapshots).
 * Contract: a link delivers every frame whole and in send order *within its
 * lane*, or closes. Across lanes there is no order: a control frame sent after
 * a bulk frame may arrive first, and on a link that carries bulk frames in
 * pieces (the Unix link; a QUIC stream per lane) it does not wait for more
 * than one piece of a bulk frame already on its way. rlx_link_send () is the
 * bulk lane, so code that never names a lane keeps one total order. A link
 * type without lanes (send_lane not implemented) carries both in one order,
 * which also meets the contract.
 *
 * Liveness: "last-rx" is the monotonic time (g_get_monotonic_time) at which
 * the link last received any bytes — a piece of a frame counts — so a peer
 * that sends a large bucket slowly is seen alive before the frame completes.
 *
 * Threads: a link lives on the main context it was created on; signals are
 * emitted there, and its methods are called from there.
 */
#pragma once

#include <glib-object.h>

G_BEGIN_DECLS

#define RLX_LINK_ERROR (rlx_link_error_quark ())
GQuark rlx_link_error_quark (void);
typedef enum {
  RLX_LINK_ERROR_CLOSED,       /* closed by us or by the peer (bye, EOF) */
  RLX_LINK_ERROR_FAILED,       /* I/O error, reset */
  RLX_LINK_ERROR_TOO_LARGE,    /* a frame over the link's cap */
  RLX_LINK_ERROR_PROTOCOL,     /* bytes that are not a frame */
  RLX_LINK_ERROR_PERMISSION,   /* peer uid differs from ours */
  RLX_LINK_ERROR_TOO_SLOW,     /* a frame kept half-sent (rlx-frame-clock.h) */
} RlxLinkError;

typedef enum {
  RLX_LINK_LANE_CONTROL = 0,
  RLX_LINK_LANE_BULK    = 1,
} RlxLinkLane;

#define RLX_LINK_N_LANES 2

/* The largest frame the control lane carries, either way, on every link:
 * 1 MiB. Control frames are the cohort's messages without a float array
 * (hello, refuse, leader, join, ack, reject, heartbeat, bye, a refused
 * grad) and the local bus's handshake; such a wire frame is its 4-byte
 * length and a JSON header, which the wire refuses over
 * RLX_WIRE_DEFAULT_MAX_HEADER (64 KiB): the largest hello (every member at
 * its bound, each byte of its texts one JSON escapes as \u00XX) is 38,412
 * bytes (/cohort/msg/largest-control-fits). 1 MiB is 16 times the header
 * cap, so no legitimate message comes near it, and it
 * bounds what a peer can make this process hold for a control frame it
 * keeps half-sent (64 MiB, the bulk lane's cap, before it existed). Arrays
 * (buckets, commits, snapshots) travel on the bulk lane. A link refuses to
 * send a larger control frame (RLX_LINK_ERROR_TOO_LARGE, the link stays)
 * and closes when it receives one, before allocating it. */
#define RLX_LINK_MAX_CONTROL_FRAME ((gsize) 1 << 20)

#define RLX_TYPE_LINK (rlx_link_get_type ())
G_DECLARE_DERIVABLE_TYPE (RlxLink, rlx_link, RLX, LINK, GObject)

struct _RlxLinkClass
{
  GObjectClass parent_class;

  /* Queue @frame for sending on the bulk lane; never blocks. FALSE once
   * closed. (A link without lanes sends every frame through this.) */
  gboolean (*send)  (RlxLink *self, GBytes *frame, GError **error);
  /* Close the link; emits ::closed once (with RLX_LINK_ERROR_CLOSED). */
  void     (*close) (RlxLink *self);
  /* Bytes handed to send() but not yet written to the transport. */
  gsize    (*pending_bytes) (RlxLink *self);
  /* Optional, for links with lanes: queue @frame on @lane; and the bytes of
   * one lane not yet written. Without them, every lane goes through send()
   * and pending_bytes() (one order for all). */
  gboolean (*send_lane) (RlxLink *self, RlxLinkLane lane, GBytes *frame, GError **error);
  gsize    (*pending_bytes_lane) (RlxLink *self, RlxLinkLane lane);

  gpointer padding[6];
};

/* Signals (emitted on the link's main context):
 *   ::frame   (RlxLink *link, GBytes *frame)        a whole frame arrived
 *             (rlx_link_get_rx_lane () inside the handler says on which lane)
 *   ::closed  (RlxLink *link, const GError *error)  the link is gone, once
 * Properties (read-only, notify on change):
 *   "peer"     string   a name for logs: socket path or remote address
 *   "bytes-tx" uint64   bytes written to the transport, framing included
 *   "bytes-rx" uint64   bytes read from the transport, framing included
 *   "last-rx"  int64    monotonic µs of the last bytes received (0: none yet);
 *                       notify at most every RLX_LINK_LAST_RX_NOTIFY_US, the
 *                       getter is always exact
 *   "closed"   boolean
 */
#define RLX_LINK_LAST_RX_NOTIFY_US 50000

/* Bulk lane (see above). */
gboolean    rlx_link_send          (RlxLink *self, GBytes *frame, GError **error);
gboolean    rlx_link_send_lane     (RlxLink *self, RlxLinkLane lane, GBytes *frame,
                                    GError **error);
void        rlx_link_close         (RlxLink *self);
/* All lanes together, and one lane. */
gsize       rlx_link_pending_bytes (RlxLink *self);
gsize       rlx_link_pending_bytes_lane (RlxLink *self, RlxLinkLane lane);
/* TRUE if the link type keeps the lanes apart (implements send_lane). */
gboolean    rlx_link_has_lanes     (RlxLink *self);
const char *rlx_link_get_peer      (RlxLink *self);
guint64     rlx_link_get_bytes_tx  (RlxLink *self);
guint64     rlx_link_get_bytes_rx  (RlxLink *self);
gint64      rlx_link_get_last_rx   (RlxLink *self);
/* The lane of the frame being delivered; valid inside a ::frame handler. */
RlxLinkLane rlx_link_get_rx_lane   (RlxLink *self);
gboolean    rlx_link_is_closed     (RlxLink *self);
/* Microseconds this link has spent inside the transport's system calls
 * (send/receive) so far, so a caller can tell its own overhead from I/O. */
guint64     rlx_link_get_io_us     (RlxLink *self);

/* For implementations: */
void        rlx_link_set_peer      (RlxLink *self, const char *peer);
void        rlx_link_emit_frame    (RlxLink *self, GBytes *frame);
void        rlx_link_emit_frame_lane (RlxLink *self, RlxLinkLane lane, GBytes *frame);
void        rlx_link_emit_closed   (RlxLink *self, const GError *error);
void        rlx_link_add_bytes_tx  (RlxLink *self, guint64 n);
/* Also marks the link alive now (last-rx). */
void        rlx_link_add_bytes_rx  (RlxLink *self, guint64 n);
/* Bytes that arrived at monotonic time @when (a wrapper that models a
 * network passes its own arrival times). */
void        rlx_link_add_bytes_rx_at (RlxLink *self, guint64 n, gint64 when);
void        rlx_link_add_io_us     (RlxLink *self, guint64 us);

G_END_DECLS
