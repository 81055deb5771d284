/* rlx-link-mailbox.h — what crosses between a link's I/O thread and the main
 * context the link lives on
 *
 * A link whose socket work runs on an I/O thread (rlx-io-thread.h) keeps its
 * RlxLink contract on the main context through one mailbox:
 *
 *   main → I/O   frames to send, per lane, in order (the GBytes move across,
 *                no copy), and a request to close; the I/O side is woken on
 *                its own context (io_func) to take them.
 *   I/O → main   whole received frames (moved, never copied), the end of the
 *                link with its error, and progress: bytes read (with the
 *                time, for last-rx), frame and wire bytes written, µs in
 *                system calls. One source on the main context delivers them
 *                in order: counters of bytes read, then the frames, then
 *                bytes-tx, then ::closed — so a frame never arrives after
 *                ::closed, and bytes-rx already holds a frame's bytes when it
 *                is emitted.
 *
 * When the main context is woken: at once for whole received frames and the
 * end; for counters alone (bytes read without finishing a frame, bytes and
 * frames written) within RLX_LINK_MAILBOX_PROGRESS_US, unless a frame takes
 * them along before — so a 7 MB bucket arriving costs one wake-up, not one
 * per read, a slow frame still shows as liveness, and a written frame costs
 * none. pending_bytes is exact at every call: frame bytes handed to send and
 * not yet written by the I/O side.
 *
 * The inbox is bounded: once it holds RLX_LINK_MAILBOX_INBOX_BYTES (or
 * RLX_LINK_MAILBOX_INBOX_FRAMES frames) that the main context has not taken
 * yet, push_frame returns FALSE and the I/O side stops reading; io_func runs
 * again when the main context has taken them. A peer can then fill socket
 * buffers, never this process's memory.
 *
 * Threads: functions marked "main" are for the link's main context, "I/O"
 * for the I/O side's context (its single thread); ref/unref from any.
 */
#pragma once

#include "core/p2p/rlx-link.h"

G_BEGIN_DECLS

#define RLX_LINK_MAILBOX_PROGRESS_US  RLX_LINK_LAST_RX_NOTIFY_US
#define RLX_LINK_MAILBOX_INBOX_BYTES  ((gsize) 8 << 20)
#define RLX_LINK_MAILBOX_INBOX_FRAMES 1024
#define RLX_LINK_MAILBOX_HOLD_BYTES   ((gsize) 2 << 20)

typedef struct _RlxLinkMailbox RlxLinkMailbox;

typedef enum {
  RLX_LINK_MAILBOX_OPEN,
  RLX_LINK_MAILBOX_CLOSE_FLUSH,   /* closed by this node: write what was queued, then stop */
  RLX_LINK_MAILBOX_CLOSE_ABORT,   /* the link was dropped unclosed: stop now */
} RlxLinkMailboxClose;

/* Runs on the I/O context: frames were queued, a close was asked for, or a
 * full inbox was taken. */
typedef void (*RlxLinkMailboxIoFunc) (gpointer io_data);

/* main: a mailbox for @link (not referenced: the link owns the mailbox and
 * detaches it when it goes) delivering on the thread-default main context;
 * @io_func runs on @io_context until rlx_link_mailbox_io_done (never before
 * a send or a close asks for it). NULL with RLX_LINK_ERROR_FAILED when the
 * process has no file descriptor left for its two eventfds. */
RlxLinkMailbox *rlx_link_mailbox_new    (RlxLink *link, GMainContext *io_context,
                                         RlxLinkMailboxIoFunc io_func, gpointer io_data,
                                         GError **error);
RlxLinkMailbox *rlx_link_mailbox_ref    (RlxLinkMailbox *self);
void            rlx_link_mailbox_unref  (RlxLinkMailbox *self);

/* ── main ── */
/* Queue @frame (a reference is taken) on @lane. FALSE with
 * RLX_LINK_ERROR_CLOSED once the I/O side has ended. */
gboolean rlx_link_mailbox_send          (RlxLinkMailbox *self, RlxLinkLane lane, GBytes *frame,
                                         GError **error);
/* Frame bytes of @lane handed to send and not written yet (0 once the I/O
 * side has ended: nothing more will be). */
gsize    rlx_link_mailbox_pending       (RlxLinkMailbox *self, RlxLinkLane lane);
/* Hold every delivery but the end (frames, counters) until
 * _release_main: a link that announces itself on the main context through
 * another source (the remote link's ::ready) holds its frames until its
 * owner had the chance to connect to ::frame — a peer's first frame, sent
 * as soon as the peer saw the link up, is not emitted to nobody. */
void     rlx_link_mailbox_hold_main     (RlxLinkMailbox *self);
void     rlx_link_mailbox_release_main  (RlxLinkMailbox *self);
/* Ask the I/O side to stop (the stronger request wins). */
void     rlx_link_mailbox_close         (RlxLinkMailbox *self, RlxLinkMailboxClose how);
/* The link is going away: nothing more is delivered to it. */
void     rlx_link_mailbox_detach        (RlxLinkMailbox *self);
/* TRUE once the I/O side has reported the end or stopped. */
gboolean rlx_link_mailbox_is_ended      (RlxLinkMailbox *self);

/* ── I/O ── */
/* Move the frames queued since the last call to the tails of @out (GBytes*,
 * owned by the caller now). */
void     rlx_link_mailbox_take          (RlxLinkMailbox *self, GQueue out[RLX_LINK_N_LANES]);
RlxLinkMailboxClose rlx_link_mailbox_get_close (RlxLinkMailbox *self);
/* A burst of reads: between _hold and _release, bulk frames pushed wake the
 * main context once, at _release (or once RLX_LINK_MAILBOX_HOLD_BYTES of them
 * wait); control frames still wake it at once. A stream of frames then
 * costs the main context one wake-up per burst, not one per frame. */
void     rlx_link_mailbox_hold          (RlxLinkMailbox *self);
void     rlx_link_mailbox_release       (RlxLinkMailbox *self);
/* A whole frame arrived (@frame: transfer full). FALSE: the inbox is full,
 * stop reading until io_func runs and rlx_link_mailbox_inbox_full says no. */
gboolean rlx_link_mailbox_push_frame    (RlxLinkMailbox *self, RlxLinkLane lane, GBytes *frame);
gboolean rlx_link_mailbox_inbox_full    (RlxLinkMailbox *self);
/* The link failed or the peer left (@error: transfer full; NULL: closed).
 * Delivered after every frame pushed before it; later pushes are dropped. */
void     rlx_link_mailbox_push_closed   (RlxLinkMailbox *self, GError *error);
/* @n bytes read at monotonic time @when. */
void     rlx_link_mailbox_add_rx        (RlxLinkMailbox *self, guint64 n, gint64 when);
/* @frame_bytes of @lane's frames and @wire_bytes in all (framing included)
 * written; @frames_done whole frames finished with them (counted, no
 * earlier wake-up). */
void     rlx_link_mailbox_add_tx        (RlxLinkMailbox *self, RlxLinkLane lane,
                                         guint64 frame_bytes, guint64 wire_bytes,
                                         guint frames_done);
void     rlx_link_mailbox_add_io_us     (RlxLinkMailbox *self, guint64 us);
/* The priority of the source that runs io_func (a link whose own sources
 * run above others' raises it with them). */
void     rlx_link_mailbox_set_io_priority (RlxLinkMailbox *self, gint priority);
/* The I/O side has stopped: io_func never runs again, queued and later
 * sends are dropped. */
void     rlx_link_mailbox_io_done       (RlxLinkMailbox *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxLinkMailbox, rlx_link_mailbox_unref)

G_END_DECLS
