/* rlx-frame-reader.h — cut a byte stream into [u32 LE length][body] frames
 *
 * The remote link carries frames over QUIC streams with the same framing as
 * the Unix link. Bytes arrive in pieces of any size; the reader hands out
 * each frame whole. A length over @max_frame is refused before anything is
 * allocated, and a body buffer grows with the bytes that actually arrived
 * (doubling, capped at the announced length), so a peer that announces a
 * huge frame and sends ten bytes costs ten bytes, not the announced size.
 *
 * Not thread-safe; one reader per stream.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct _RlxFrameReader RlxFrameReader;

/* Called for each whole frame; return FALSE to stop (the reader is then
 * left as it is and rlx_frame_reader_push returns FALSE without error). */
typedef gboolean (*RlxFrameFunc) (GBytes *frame, gpointer user_data);

RlxFrameReader *rlx_frame_reader_new   (gsize max_frame, RlxFrameFunc func, gpointer user_data);
void            rlx_frame_reader_free  (RlxFrameReader *self);
/* Feed @len bytes. FALSE with G_IO_ERROR_MESSAGE_TOO_LARGE if a frame is
 * announced over the cap (the reader is then unusable), or FALSE without an
 * error if the callback asked to stop. */
gboolean        rlx_frame_reader_push  (RlxFrameReader *self, const guint8 *data, gsize len,
                                        GError **error);
/* Bytes of an incomplete frame held right now (prefix included). */
gsize           rlx_frame_reader_get_buffered  (RlxFrameReader *self);
/* TRUE while a frame's body is in progress (its length prefix came, not
 * all of its body): @bytes its body bytes so far, @seq which frame (frames
 * begun so far), for a deadline (rlx-frame-clock.h). */
gboolean        rlx_frame_reader_in_progress   (RlxFrameReader *self, gsize *bytes,
                                                guint64 *seq);
/* Bytes allocated for the incomplete frame right now. */
gsize           rlx_frame_reader_get_allocated (RlxFrameReader *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxFrameReader, rlx_frame_reader_free)

G_END_DECLS
