/* rlx-link-ring.h — the Unix link's shared rings (private to core/p2p)
 *
 * Bulk frames between two processes of one host can travel through a ring:
 * a memfd the sender made, which both sides map once and keep for the
 * link's life. The sender copies a frame into it once and sends only a
 * FRAME record {ring, offset, length} (rlx-link-stream.h, RING records);
 * the receiver's frame is its read-only view of those bytes, no copy, and
 * freeing it (any thread) sends RELEASE back, after which the sender may
 * reuse them. A frame that finds no room (the receiver holds the ring's
 * earlier frames) goes another way: nothing ever waits for ring space.
 *
 * This file has no socket: RlxRingTx says what to send and RlxRingRx what
 * arrived; rlx-unix-link.c moves the records. Both are used on the link's
 * I/O thread only, except that frames handed out by RlxRingRx may be freed
 * on any thread and outlive it.
 *
 * The receiver trusts nothing: an attached fd must be a regular file sealed
 * against shrinking and growing (so its mapping never faults), of the
 * announced size, at most four rings at once; a frame must lie inside a
 * ring it has; a release must name a block the sender placed. The ring is
 * not sealed against writing (it is reused): both ends are one user's (the
 * link checks the peer's uid), and what a sender could do by rewriting a
 * frame it has sent, it could do by sending other bytes — a replica that
 * diverged is caught by the cohort's hashes (docs/PROTOCOL.md).
 */
#pragma once

#include <glib.h>
#include "core/p2p/rlx-link-stream.h"

G_BEGIN_DECLS

/* A ring is sized for this many frames of the size that made it (a round's
 * bucket or update held while the next arrives, one in the inbox), a power
 * of two in [RLX_RING_MIN_SIZE, RLX_RING_MAX_SIZE]; a frame larger than the
 * largest ring holds that many of goes another way. */
#define RLX_RING_FRAMES    3
#define RLX_RING_MIN_SIZE  ((gsize) 4 << 20)
#define RLX_RING_MAX_SIZE  ((gsize) 256 << 20)
/* Rings a side keeps: its current one plus retired ones whose frames the
 * peer still holds (sending), or mapped from the peer (receiving). */
#define RLX_RING_MAX_RINGS 4

/* An operation to send, with the fd that goes on its first byte (ATTACH;
 * -1 otherwise; the sender of the record closes it once sent). */
typedef struct {
  RlxLinkRingOp op;
  int           fd;
} RlxRingOut;

/* The sending side: our rings. */
typedef struct _RlxRingTx RlxRingTx;

RlxRingTx *rlx_ring_tx_new     (void);
void       rlx_ring_tx_free    (RlxRingTx *tx);
/* Copy @len bytes of @data into a ring (in pieces when large,
 * rlx-par-copy.h): TRUE, with what to send appended to @out (RlxRingOut), in
 * order — a DETACH of a ring too small, an ATTACH of its replacement, the
 * FRAME last. FALSE when there is no room (or no ring: the kernel refused
 * one, and it is never tried again); what @out gained then (a DETACH, an
 * ATTACH for the next frames) must be sent all the same. @peer: for logs. */
gboolean   rlx_ring_tx_place   (RlxRingTx *tx, const void *data, gsize len, const char *peer,
                                GArray *out);
/* The peer released the frame at @off of our ring @ring. FALSE with
 * RLX_LINK_ERROR_PROTOCOL when we placed no such frame. */
gboolean   rlx_ring_tx_release (RlxRingTx *tx, guint32 ring, guint64 off, const char *peer,
                                GError **error);

/* The receiving side: the peer's rings, mapped read-only. */
typedef struct _RlxRingRx RlxRingRx;

/* Frames freed (on any thread) are released in batches: @func runs on
 * @context with the RELEASE operations to send. */
typedef void (*RlxRingReleaseFunc) (gpointer data, const RlxLinkRingOp *ops, guint n_ops);

RlxRingRx *rlx_ring_rx_new    (GMainContext *context, RlxRingReleaseFunc func, gpointer data);
/* The link ended: @rx goes; each ring is unmapped once its last frame is
 * freed, and @func is never called again. */
void       rlx_ring_rx_end    (RlxRingRx *rx);
/* ATTACH, with the fd that came with it (-1: none); the fd is closed. */
gboolean   rlx_ring_rx_attach (RlxRingRx *rx, const RlxLinkRingOp *op, int fd,
                               const char *peer, GError **error);
gboolean   rlx_ring_rx_detach (RlxRingRx *rx, const RlxLinkRingOp *op, const char *peer,
                               GError **error);
/* FRAME: the frame, over the ring's mapping. */
GBytes    *rlx_ring_rx_frame  (RlxRingRx *rx, const RlxLinkRingOp *op, const char *peer,
                               GError **error);

G_END_DECLS
