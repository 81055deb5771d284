/* rlx-capped-stream.h — an input stream that refuses to feed an endless message
 *
 * libsoup 3.2 caps each WebSocket frame (max-incoming-payload-size) but not
 * a message built from continuation frames, nor a stream of control frames:
 * a hostile peer could make it buffer without end. This filter sits under
 * the SoupWebsocketConnection and counts the bytes read since the owner last
 * called rlx_capped_input_stream_reset (on every whole message); past the
 * cap, reads fail with G_IO_ERROR_MESSAGE_TOO_LARGE and libsoup closes the
 * connection. It is pollable whenever the base stream is.
 *
 * It can also hand out some @prefix bytes before the base stream's (bytes a
 * hand-made HTTP upgrade read past the end of the response headers).
 *
 * Threads: as any GInputStream, one thread at a time: the one whose context
 * runs the WebSocket connection above it (the node's).
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

#define RLX_TYPE_CAPPED_INPUT_STREAM (rlx_capped_input_stream_get_type ())
G_DECLARE_FINAL_TYPE (RlxCappedInputStream, rlx_capped_input_stream, RLX, CAPPED_INPUT_STREAM,
                      GFilterInputStream)

GInputStream *rlx_capped_input_stream_new   (GInputStream *base, gsize cap, GBytes *prefix);
/* A whole message arrived: start counting again. */
void          rlx_capped_input_stream_reset (RlxCappedInputStream *self);
/* Bytes read since the last reset. */
gsize         rlx_capped_input_stream_get_count (RlxCappedInputStream *self);

G_END_DECLS
