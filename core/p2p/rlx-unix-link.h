/* rlx-unix-link.h — an RlxLink over a connected Unix stream socket
 *
 * Framing on the stream: records (rlx-link-stream.h). Frames of each lane go
 * out in pieces, the control lane first at every piece, so a control frame
 * never waits behind more than one piece of a bulk frame (plus what the
 * kernel's socket buffer already holds, which a local peer drains at memory
 * speed). A frame longer than the link's max_frame is refused both ways:
 * send() fails with RLX_LINK_ERROR_TOO_LARGE (the link stays open), and a
 * peer whose records add up to more than the cap is cut off with
 * RLX_LINK_ERROR_TOO_LARGE. Receive buffers grow with the bytes that actually
 * arrive, never with what a peer announces. Zero-length frames are legal.
 *
 * The shared ring: bulk frames of at least ring_min bytes are copied once
 * into a memfd this side shares with the peer for the link's life (both
 * keep it mapped), and only {ring, offset, length} crosses the socket; the
 * receiver's frame is its read-only mapping of those bytes, no copy, and
 * freeing it releases them to the sender (rlx-unix-link.c, "the shared
 * ring"). A frame finds no room while the peer holds the ring's earlier
 * frames: it goes through the socket. RLX_LINK_RING=BYTES (0: off) or
 * rlx_unix_link_set_ring_min sets the size; the default is
 * RLX_UNIX_LINK_DEFAULT_RING_MIN. Receiving through a ring is always
 * possible.
 *
 * Shared memory: bulk frames of at least shm_min bytes go as a sealed memfd
 * passed with SCM_RIGHTS instead of through the socket (the receiver maps it
 * read-only; rlx-link-stream.h). Measured against the socket (BENCHMARKS.md,
 * "Local bus: socket or memfd") it lost at every size, so it is off unless
 * RLX_LINK_SHM=BYTES in the environment (or rlx_unix_link_set_shm_min) turns
 * it on for frames of at least BYTES. Receiving one is always possible. A memfd
 * frame counts its full size in bytes-tx / bytes-rx. Received
 * fds are validated (sealed memfd of the announced size) and refused
 * otherwise, closing the link.
 *
 * I/O off the main loop: every system call on the socket (sendmsg, recvmsg,
 * the memfd copy and mapping) runs on an I/O thread (rlx-io-thread.h) — one
 * shared by all links of the process, or one per link with RLX_LINK_IO=link
 * (BENCHMARKS.md, "Local bus: I/O off the main loop", has the measurement
 * behind the default). The main context only hands frames over and gets
 * whole frames back, through a mailbox (rlx-link-mailbox.h): a received
 * frame's buffer crosses as it is, never copied. What the main context sees:
 *   - ::frame and ::closed on the link's main context, frames in order per
 *     lane, every frame read before the end before ::closed;
 *   - pending_bytes: frame bytes (framing excluded) handed to send and not
 *     yet written by the I/O thread, per lane or together — exact at every
 *     call;
 *   - bytes-tx, bytes-rx, last-rx and the µs in system calls: brought over
 *     with every whole frame received, and otherwise at most
 *     RLX_LINK_MAILBOX_PROGRESS_US after the bytes moved (last-rx holds the
 *     time they were read, so a slow bucket shows as liveness); a written
 *     frame does not wake the main context by itself, so a peer may hold a
 *     frame up to that long before bytes-tx counts it.
 * Received frames the main context has not taken yet are bounded
 * (RLX_LINK_MAILBOX_INBOX_BYTES): past that the link stops reading and the
 * peer waits on the socket.
 *
 * rlx_link_close() stops reading at once and emits ::closed; frames already
 * queued are still flushed in the background for up to one second (so a `bye`
 * sent just before close reaches the peer), then the socket is closed. This
 * goes on after the link's last reference is dropped. A link dropped without
 * rlx_link_close() stops at once.
 *
 * Threads: create and use on one thread whose thread-default main context
 * runs; signals are emitted there.
 */
#pragma once

#include <gio/gio.h>
#include "core/p2p/rlx-link.h"

G_BEGIN_DECLS

/* 64 MiB: far above a full f32 snapshot of the largest model (7.5 MB). */
#define RLX_UNIX_LINK_DEFAULT_MAX_FRAME ((gsize) 64 << 20)

/* Largest record body: frames go out in pieces of this size. */
#define RLX_UNIX_LINK_PIECE ((gsize) 256 * 1024)

/* Bulk frames from this size on go as memfds (see above); 0: never, which
 * is what measured best here (a memfd per frame cost 2–3× the CPU time of
 * the socket at every size from 64 KiB to 8 MiB). */
#define RLX_UNIX_LINK_DEFAULT_SHM_MIN ((gsize) 0)

/* Bulk frames from this size on go through the shared ring (see above).
 * Measured against the socket (BENCHMARKS.md, "The shared ring"): two ranks
 * of mnist-mlp-xl at f32 1.18× on a two-core CPU and 1.18× on one H200
 * (f16 1.09× and 1.13×); mnist-mlp's 407 KB frames about even. Smaller
 * frames (mnist-cnn's 164 KB buckets, every control frame) stay on the
 * socket. */
#define RLX_UNIX_LINK_DEFAULT_RING_MIN ((gsize) 256 * 1024)

/* TRUE: all links share one I/O thread; FALSE: a thread per link. */
#define RLX_UNIX_LINK_DEFAULT_IO_SHARED TRUE

#define RLX_TYPE_UNIX_LINK (rlx_unix_link_get_type ())
G_DECLARE_FINAL_TYPE (RlxUnixLink, rlx_unix_link, RLX, UNIX_LINK, RlxLink)

/* Wrap connected Unix stream socket @connection (a reference is taken). The
 * peer's uid is checked first: another uid gives NULL with
 * RLX_LINK_ERROR_PERMISSION (and credentials that cannot be read,
 * RLX_LINK_ERROR_FAILED); the caller closes the connection. @peer names the
 * other end for logs. @max_frame 0 means RLX_UNIX_LINK_DEFAULT_MAX_FRAME.
 * Reading starts at once on the current thread-default main context. */
RlxLink *rlx_unix_link_new       (GSocketConnection *connection,
                                  const char *peer, gsize max_frame,
                                  GError **error);

/* Two links joined by a socketpair(2), for in-process tests and for wiring
 * two coordinators together without a directory. */
gboolean rlx_unix_link_new_pair  (gsize max_frame, RlxLink **a, RlxLink **b,
                                  GError **error);

gsize    rlx_unix_link_get_max_frame (RlxUnixLink *self);
/* Smallest bulk frame sent as a memfd; 0: never. Applies to the frames the
 * I/O thread takes from the queue from now on. */
void     rlx_unix_link_set_shm_min   (RlxUnixLink *self, gsize min_bytes);
gsize    rlx_unix_link_get_shm_min   (RlxUnixLink *self);
/* Smallest bulk frame sent through the shared ring; 0: never. As above. */
void     rlx_unix_link_set_ring_min  (RlxUnixLink *self, gsize min_bytes);
gsize    rlx_unix_link_get_ring_min  (RlxUnixLink *self);
/* Frames this link sent and received through shared rings, and bulk frames
 * of at least ring_min that went another way because no ring had room. */
void     rlx_unix_link_get_ring_stats (RlxUnixLink *self, guint *sent, guint *received,
                                       guint *fallbacks);

G_END_DECLS
