/* rlx-link-stream.h — the byte-stream format of the Unix link: records,
 * lanes, pieces; and its reader (no I/O, so it can be fuzzed)
 *
 * The stream is a sequence of records, each
 *
 *     [u32 LE word][body]
 *       word bits  0..28  body length L (< 512 MiB)
 *            bit  29      MORE: the frame continues in this lane's next record
 *            bit  30      lane: 0 control, 1 bulk
 *            bit  31      SHM: no body follows; the frame (L bytes) is a sealed
 *                         memfd passed with SCM_RIGHTS on this record's first
 *                         byte (bulk lane only, never with MORE)
 *
 * A frame is the concatenation of the bodies of consecutive records of one
 * lane, up to and including the first without MORE; records of the two lanes
 * interleave freely. Zero-length frames are one empty record.
 *
 * The reader never allocates what the peer only announces: a lane's frame
 * buffer grows with the bytes that actually arrived (at most doubling, and
 * never past the announced record or the frame cap), so "64 MiB" followed by
 * 10 bytes costs a 64 KiB buffer. Bodies are read straight into that buffer
 * and the finished frame is handed out as GBytes without a copy; growing it
 * costs at most about one copy of the frame in all (realloc, which moves
 * large blocks with mremap). A frame over @max_frame, a lane bit
 * the reader does not know, SHM with MORE or on the control lane, all end the
 * stream with an error (RLX_LINK_ERROR_TOO_LARGE / _PROTOCOL) that says what
 * the peer sent.
 */
#pragma once

#include "core/p2p/rlx-link.h"

G_BEGIN_DECLS

#define RLX_LINK_STREAM_LEN_MASK  0x1fffffffu
#define RLX_LINK_STREAM_MORE      (1u << 29)
#define RLX_LINK_STREAM_BULK      (1u << 30)
#define RLX_LINK_STREAM_SHM       (1u << 31)

/* The word of a record header, little-endian in @out[4]. */
void rlx_link_stream_put_word (guint8 out[4], RlxLinkLane lane, gsize len, gboolean more,
                               gboolean shm);

typedef struct {
  /* A whole frame arrived on @lane. FALSE stops the reader (the link went
   * away inside the handler). */
  gboolean (*frame) (gpointer user_data, RlxLinkLane lane, GBytes *frame);
  /* An SHM record for a frame of @size bytes: the caller takes the next
   * passed fd. FALSE stops the reader (the caller failed the link). */
  gboolean (*shm)   (gpointer user_data, gsize size);
} RlxLinkStreamSink;

typedef struct {
  guint8 *buf;
  gsize   len;
  gsize   cap;
  gboolean open;            /* a frame is in progress (a record with MORE came) */
} RlxLinkStreamLane;

typedef struct {
  gsize             max_frame;
  guint8            hdr[4];
  gsize             hdr_got;
  gboolean          in_body;
  RlxLinkLane       rec_lane;
  gboolean          rec_more;
  gsize             rec_left;
  RlxLinkStreamLane lanes[RLX_LINK_N_LANES];
  char             *peer;   /* for messages */
} RlxLinkStreamReader;

void     rlx_link_stream_reader_init  (RlxLinkStreamReader *r, gsize max_frame, const char *peer);
/* Drops any frame in progress and the buffers; the reader can be used again
 * (from a record boundary). _free also frees the name. */
void     rlx_link_stream_reader_clear (RlxLinkStreamReader *r);
void     rlx_link_stream_reader_free_name (RlxLinkStreamReader *r);
void     rlx_link_stream_reader_set_peer (RlxLinkStreamReader *r, const char *peer);

/* TRUE while the stream is between records (so EOF now is clean). */
gboolean rlx_link_stream_reader_at_boundary (RlxLinkStreamReader *r);

/* Parse @len bytes from the stream (copying bodies into the lanes' buffers).
 * FALSE with @error when the stream is bad (stop reading; close the link),
 * FALSE without an error when a sink callback stopped it. */
gboolean rlx_link_stream_reader_feed  (RlxLinkStreamReader *r, const guint8 *data, gsize len,
                                       const RlxLinkStreamSink *sink, gpointer user_data,
                                       GError **error);

/* Zero-copy receive of a record body: when the reader is inside a body,
 * where the next body bytes go (in the lane's frame buffer, grown as above)
 * and how many of them the current record still has (≥ 1). FALSE when the
 * reader expects a header (read into a staging buffer and _feed it), or with
 * @error when the frame would exceed the cap or memory ran out. */
gboolean rlx_link_stream_reader_body_space (RlxLinkStreamReader *r, guint8 **buf, gsize *len,
                                            GError **error);
/* @n bytes were written where body_space said; completes the record (and
 * the frame) when they were the last. Return as _feed. */
gboolean rlx_link_stream_reader_body_got   (RlxLinkStreamReader *r, gsize n,
                                            const RlxLinkStreamSink *sink, gpointer user_data,
                                            GError **error);

G_END_DECLS
