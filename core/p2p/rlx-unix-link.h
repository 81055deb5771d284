/* rlx-unix-link.h — an RlxLink over a connected Unix stream socket
 *
 * Framing on the stream: [u32 LE length][length bytes], one per frame. A frame
 * longer than the link's max_frame is refused both ways: send() fails with
 * RLX_LINK_ERROR_TOO_LARGE (the link stays open), and a length prefix over
 * the cap from the peer closes the link with RLX_LINK_ERROR_TOO_LARGE before
 * anything is allocated. Zero-length frames are legal.
 *
 * All I/O is non-blocking on the link's main context (pollable sources): the
 * main loop never waits on the peer. Frames queued with send() are written in
 * order; pending_bytes is the frame bytes (prefix excluded) not yet written.
 *
 * rlx_link_close() stops reading at once and emits ::closed; frames already
 * queued are still flushed in the background for up to one second (so a `bye`
 * sent just before close reaches the peer), then the socket is closed.
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

G_END_DECLS
