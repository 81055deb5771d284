/* rlx-sender.h — backpressure in front of one link (the seed's proxyHost)
 *
 * A leader that publishes a round per iteration can outrun a link; a link
 * queue that grows without bound only delivers stale parameters late. The
 * sender sits between the coordinator and one RlxLink and keeps at most
 * @max_in_flight frames in flight on it. "In flight" = handed to
 * rlx_link_send but not yet written to the transport (the link's
 * pending_bytes has not drained past it; the sender watches the link's
 * notify::bytes-tx). Frames wait in the sender until a slot frees.
 *
 * Lanes. Every frame goes on a link lane (rlx-link.h): rlx_sender_send puts
 * all frames on the bulk lane (one order for everything, as before lanes);
 * rlx_sender_send_lane names the lane, so heartbeats, commits,
 * acknowledgements and leader changes can go on the control lane and never
 * wait behind a bucket — neither in the link nor here: each lane has its own
 * queue and its own @max_in_flight. Order is kept per lane. (On a link
 * without lanes everything shares the bulk lane's queue.)
 *
 * Three classes of frame, whatever their lane; each lane's queue keeps the
 * order of the sends, except that:
 *
 *   RLX_SEND_STEP     rounds (`step`). At most one is queued: a new one
 *                     replaces a queued one (the newest wins — a newer round
 *                     carries everything the older one did, so sending both
 *                     only delivers stale work late). The new frame takes
 *                     its place at the back of its lane's queue. Each
 *                     replacement is reported by ::dropped (class STEP,
 *                     RLX_SEND_DROP_SUPERSEDED). So a STEP frame must not
 *                     depend on an older one arriving: if it carries only
 *                     the latest commit, the receiver has to notice the gap
 *                     (step number, parameter hash) and resync.
 *   RLX_SEND_CONTROL  small control messages (hello, bye, heartbeat, member
 *                     lists, refuse). At most @max_control queued (both lanes
 *                     together): one more drops the OLDEST queued control
 *                     frame and reports it (RLX_SEND_DROP_QUEUE_FULL).
 *   RLX_SEND_BULK     frames that must not be dropped (grads, snapshots,
 *                     resync). At most @max_bulk queued. A bulk send while
 *                     @max_bulk are queued is REFUSED with
 *                     RLX_SENDER_ERROR_FULL (the frame is not taken, nothing
 *                     is dropped): the caller keeps it and retries when
 *                     notify::depth shows room (rlx_sender_can_send_bulk).
 *
 * Frames already in flight are never dropped or replaced.
 *
 * Losses are always reported. Every frame the sender accepted and then did
 * not hand to the link emits ::dropped with its class, why, the peer and a
 * sentence: superseded (STEP), pushed out of a full queue (CONTROL), refused
 * by the link (e.g. over its frame cap — any class, BULK included), or still
 * queued when the link closed. A send refused synchronously (FALSE from
 * rlx_sender_send: the link is closed, or FULL) is the caller's to report:
 * the frame was never taken.
 *
 * depth = queued frames (all classes, both lanes) + frames in flight; the
 * "depth" property notifies on every change, so a leader can pace itself on
 * it.
 *
 * When the link closes, every later send fails with RLX_LINK_ERROR_CLOSED.
 * The sender holds a reference on its link. Use one sender per link and send
 * every frame of that link through it (frames written to the link directly
 * would count as the sender's in-flight bytes).
 *
 * Threads: the link's thread (main context) only.
 */
#pragma once

#include <glib-object.h>
#include "core/p2p/rlx-link.h"

G_BEGIN_DECLS

typedef enum {
  RLX_SEND_CONTROL,
  RLX_SEND_STEP,
  RLX_SEND_BULK,
} RlxSendClass;

#define RLX_SENDER_ERROR (rlx_sender_error_quark ())
GQuark rlx_sender_error_quark (void);
typedef enum {
  RLX_SENDER_ERROR_FULL,   /* bulk queue at max_bulk: retry when depth drops */
} RlxSenderError;

/* Why a frame was dropped (::dropped). */
typedef enum {
  RLX_SEND_DROP_SUPERSEDED,     /* a newer STEP replaced it in the queue */
  RLX_SEND_DROP_QUEUE_FULL,     /* the oldest queued CONTROL frame, pushed out */
  RLX_SEND_DROP_LINK_REFUSED,   /* the link would not take it (message says why) */
  RLX_SEND_DROP_LINK_CLOSED,    /* still queued when the link closed */
} RlxSendDrop;

/* The seed's defaults: one in flight, 32 queued control frames. */
#define RLX_SENDER_DEFAULT_MAX_IN_FLIGHT 1
#define RLX_SENDER_DEFAULT_MAX_CONTROL   32
#define RLX_SENDER_DEFAULT_MAX_BULK      8

#define RLX_TYPE_SENDER (rlx_sender_get_type ())
G_DECLARE_FINAL_TYPE (RlxSender, rlx_sender, RLX, SENDER, GObject)

/* Signals:
 *   ::dropped (RlxSender *sender, RlxSendClass klass, RlxSendDrop why,
 *              const char *peer, const char *reason, guint64 total)
 *       a frame of class @klass that the sender had accepted will never be
 *       sent; @peer is the link's peer name, @reason a sentence for a person,
 *       @total how many of that class this sender has dropped so far.
 * Properties (read-only, notify on change):
 *   "link"       RlxLink
 *   "depth"      uint   queued + in flight
 *   "in-flight"  uint
 */

/* 0 for any limit means its default. */
RlxSender *rlx_sender_new          (RlxLink *link, guint max_in_flight,
                                    guint max_control, guint max_bulk);

/* Queue @frame (a reference is taken) on the bulk lane and start sending if
 * a slot is free. FALSE with RLX_LINK_ERROR_CLOSED once the link is closed,
 * or RLX_SENDER_ERROR_FULL for BULK at max_bulk (see above). CONTROL and STEP
 * are always accepted while the link is open. */
gboolean   rlx_sender_send         (RlxSender *self, RlxSendClass klass,
                                    GBytes *frame, GError **error);
/* The same on @lane. */
gboolean   rlx_sender_send_lane    (RlxSender *self, RlxSendClass klass,
                                    RlxLinkLane lane, GBytes *frame,
                                    GError **error);

RlxLink   *rlx_sender_get_link     (RlxSender *self);
guint      rlx_sender_get_depth    (RlxSender *self);
guint      rlx_sender_get_in_flight (RlxSender *self);
/* Frames of @klass waiting in the queue (not in flight). */
guint      rlx_sender_get_queued   (RlxSender *self, RlxSendClass klass);
/* Frames of @klass dropped so far (BULK only when the link refused one or
 * closed with it queued). */
guint64    rlx_sender_get_dropped  (RlxSender *self, RlxSendClass klass);
/* TRUE if a BULK send would be accepted now. */
gboolean   rlx_sender_can_send_bulk (RlxSender *self);

G_END_DECLS
