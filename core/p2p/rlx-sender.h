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
 * Three classes of frame, all in ONE queue that keeps the order of
 * rlx_sender_send calls, except that:
 *
 *   RLX_SEND_STEP     rounds (`step`). At most one is queued: a new one
 *                     replaces a queued one (the newest wins — a newer round
 *                     carries everything the older one did, so sending both
 *                     only delivers stale work late). The new frame takes
 *                     its place at the back of the queue. Each replacement
 *                     is counted and reported by ::dropped (class STEP,
 *                     reason "superseded a queued step"). So a STEP frame
 *                     must not depend on an older one arriving: if it
 *                     carries only the latest commit, the receiver has to
 *                     notice the gap (step number, parameter hash) and
 *                     resync. With the Unix link this is rare (frames leave
 *                     within microseconds); it matters on slow links.
 *   RLX_SEND_CONTROL  small control messages (hello, bye, heartbeat, member
 *                     lists, refuse). Ordered; at most @max_control queued:
 *                     one more drops the OLDEST queued control frame and
 *                     reports it by ::dropped (class CONTROL).
 *   RLX_SEND_BULK     frames that must not be dropped (grads, snapshots,
 *                     resync). Ordered; at most @max_bulk queued. A bulk
 *                     send while @max_bulk are queued is REFUSED with
 *                     RLX_SENDER_ERROR_FULL (the frame is not taken, nothing
 *                     is dropped): the caller keeps it and retries when
 *                     notify::depth shows room (rlx_sender_can_send_bulk).
 *
 * Frames already in flight are never dropped or replaced.
 *
 * depth = queued frames (all classes) + frames in flight; the "depth"
 * property notifies on every change, so a leader can pace itself on it.
 *
 * When the link closes, the queue is cleared (not reported as drops) and
 * every later send fails with RLX_LINK_ERROR_CLOSED. The sender holds a
 * reference on its link. Use one sender per link and send every frame of
 * that link through it (frames written to the link directly would count as
 * the sender's in-flight bytes).
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

/* The seed's defaults: one in flight, 32 queued control frames. */
#define RLX_SENDER_DEFAULT_MAX_IN_FLIGHT 1
#define RLX_SENDER_DEFAULT_MAX_CONTROL   32
#define RLX_SENDER_DEFAULT_MAX_BULK      8

#define RLX_TYPE_SENDER (rlx_sender_get_type ())
G_DECLARE_FINAL_TYPE (RlxSender, rlx_sender, RLX, SENDER, GObject)

/* Signals:
 *   ::dropped (RlxSender *sender, RlxSendClass klass, guint64 total,
 *              const char *reason)
 *       a queued frame of class @klass was discarded (a CONTROL frame pushed
 *       out by a full queue, or a STEP frame superseded by a newer one);
 *       @total is how many of that class this sender has discarded so far.
 * Properties (read-only, notify on change):
 *   "link"       RlxLink
 *   "depth"      uint   queued + in flight
 *   "in-flight"  uint
 */

/* 0 for any limit means its default. */
RlxSender *rlx_sender_new          (RlxLink *link, guint max_in_flight,
                                    guint max_control, guint max_bulk);

/* Queue @frame (a reference is taken) and start sending if a slot is free.
 * FALSE with RLX_LINK_ERROR_CLOSED once the link is closed, or
 * RLX_SENDER_ERROR_FULL for BULK at max_bulk (see above). CONTROL and STEP
 * are always accepted while the link is open. */
gboolean   rlx_sender_send         (RlxSender *self, RlxSendClass klass,
                                    GBytes *frame, GError **error);

RlxLink   *rlx_sender_get_link     (RlxSender *self);
guint      rlx_sender_get_depth    (RlxSender *self);
guint      rlx_sender_get_in_flight (RlxSender *self);
/* Frames of @klass waiting in the queue (not in flight). */
guint      rlx_sender_get_queued   (RlxSender *self, RlxSendClass klass);
/* Frames of @klass discarded so far (always 0 for BULK). */
guint64    rlx_sender_get_dropped  (RlxSender *self, RlxSendClass klass);
/* TRUE if a BULK send would be accepted now. */
gboolean   rlx_sender_can_send_bulk (RlxSender *self);

G_END_DECLS
