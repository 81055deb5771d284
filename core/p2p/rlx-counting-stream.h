/* rlx-counting-stream.h — an output stream that counts what reached its base
 *
 * SoupWebsocketConnection queues outgoing frames without a limit and says
 * nothing of how many bytes wait. The signalling server puts this filter
 * under each connection: bytes queued = bytes it sent − bytes written here,
 * so a client that stops reading is seen, and dropped, long before its queue
 * costs memory. Pollable whenever the base stream is (libsoup needs that).
 *
 * Threads: the thread that owns the connection it sits under.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

#define RLX_TYPE_COUNTING_OUTPUT_STREAM (rlx_counting_output_stream_get_type ())
G_DECLARE_FINAL_TYPE (RlxCountingOutputStream, rlx_counting_output_stream, RLX,
                      COUNTING_OUTPUT_STREAM, GFilterOutputStream)

GOutputStream *rlx_counting_output_stream_new         (GOutputStream *base);
/* Bytes the base stream has taken so far. */
guint64        rlx_counting_output_stream_get_written (RlxCountingOutputStream *self);

G_END_DECLS
