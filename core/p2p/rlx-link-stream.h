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
 *            bits 31 + 29 RING: a ring operation, a body of exactly
 *                         RLX_LINK_STREAM_RING_OP_LEN bytes (RlxLinkRingOp,
 *                         below): the sender's shared ring (a memfd both sides
 *                         keep mapped) is attached, a frame is in it, a frame
 *                         the peer sent in it is released, a ring retired
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
 * costs up to about one copy of the frame in all (realloc).
 *
 * With a pool (rlx_link_stream_reader_set_pool), a large frame (several
 * records, or a record of at least RLX_LINK_STREAM_POOL_MIN bytes) starts in
 * the buffer of a large frame received earlier and already released by
 * whoever held it (any thread): memory this process had allocated for bytes
 * that did arrive, reused — no growth copies and no fresh pages (which malloc
 * hands out again after trimming, and page faults cost more than the copy)
 * for a stream of frames of one size. The pool keeps a few buffers.
 *
 * A frame over its lane's cap (@max_frame on the bulk lane; on the control
 * lane RLX_LINK_MAX_CONTROL_FRAME, or @max_frame if smaller), a lane bit
 * the reader does not know, SHM on the control lane, a RING record of another
 * length, an unknown kind, nonzero reserved members or on the wrong lane, a
 * frame (SHM or RING) in the middle of a chunked one, all end the stream with
 * an error (RLX_LINK_ERROR_TOO_LARGE / _PROTOCOL) that says what the peer
 * sent. Whether a ring operation makes sense (the ring exists, the frame lies
 * inside it) is the link's to judge (rlx-unix-link.c).
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

/* A ring operation, the body of a RING record: u32 LE kind, u32 LE ring id,
 * u64 LE a, u64 LE b. */
#define RLX_LINK_STREAM_RING_OP_LEN 24

typedef enum {
  RLX_LINK_RING_ATTACH = 1,   /* control lane: ring @ring of a = size bytes; its
                               * memfd passed with SCM_RIGHTS on the record's
                               * first byte; b = 0 */
  RLX_LINK_RING_FRAME,        /* bulk lane: the next bulk frame is bytes
                               * [a, a + b) of ring @ring; the sender does not
                               * touch them until they are released */
  RLX_LINK_RING_RELEASE,      /* control lane: the frame at offset a of the
                               * receiver's ring @ring is released; b = 0 */
  RLX_LINK_RING_DETACH,       /* control lane: ring @ring holds no new frames
                               * from now on; a = b = 0 */
} RlxLinkRingKind;

typedef struct {
  RlxLinkRingKind kind;
  guint32         ring;
  guint64         a;
  guint64         b;
} RlxLinkRingOp;

/* The record (word and body) of @op, in @out: 4 + RLX_LINK_STREAM_RING_OP_LEN
 * bytes. The lane is the one @op's kind goes on. */
void rlx_link_stream_put_ring_op (guint8 out[4 + RLX_LINK_STREAM_RING_OP_LEN],
                                  const RlxLinkRingOp *op);

typedef struct {
  /* A whole frame arrived on @lane. FALSE stops the reader (the link went
   * away inside the handler). */
  gboolean (*frame) (gpointer user_data, RlxLinkLane lane, GBytes *frame);
  /* An SHM record for a frame of @size bytes: the caller takes the next
   * passed fd. FALSE stops the reader (the caller failed the link). */
  gboolean (*shm)   (gpointer user_data, gsize size);
  /* A well-formed ring operation (a FRAME's length is within the cap). FALSE
   * stops the reader (the caller failed the link). NULL: RING records are a
   * protocol error. */
  gboolean (*ring)  (gpointer user_data, const RlxLinkRingOp *op);
} RlxLinkStreamSink;

#define RLX_LINK_STREAM_POOL_MIN ((gsize) 64 * 1024)

/* Buffers of released frames, for the next large frames. Thread-safe. */
typedef struct _RlxLinkStreamPool RlxLinkStreamPool;

/* Keeps at most @max_buffers buffers of at most @max_bytes together. */
RlxLinkStreamPool *rlx_link_stream_pool_new   (guint max_buffers, gsize max_bytes);
RlxLinkStreamPool *rlx_link_stream_pool_ref   (RlxLinkStreamPool *pool);
void               rlx_link_stream_pool_unref (RlxLinkStreamPool *pool);
/* Frees what it holds and keeps nothing from now on (the link ended). */
void               rlx_link_stream_pool_close (RlxLinkStreamPool *pool);
/* Buffers held right now, and their bytes. */
guint              rlx_link_stream_pool_count (RlxLinkStreamPool *pool, gsize *bytes);

typedef struct {
  guint8 *buf;
  gsize   len;
  gsize   cap;
  gboolean open;            /* a frame is in progress (a record with MORE came) */
  gboolean pooled;          /* buf came from the pool */
} RlxLinkStreamLane;

typedef struct {
  gsize             max_frame;
  gsize             max_control;  /* the control lane's cap (see above) */
  guint8            hdr[4];
  gsize             hdr_got;
  gboolean          in_body;
  RlxLinkLane       rec_lane;
  gboolean          rec_more;
  gsize             rec_left;
  RlxLinkStreamLane lanes[RLX_LINK_N_LANES];
  gboolean          in_ring;  /* inside a RING record's body */
  guint8            ring_body[RLX_LINK_STREAM_RING_OP_LEN];
  gsize             ring_got;
  char             *peer;   /* for messages */
  RlxLinkStreamPool *pool;  /* NULL: none */
  guint64           begun[RLX_LINK_N_LANES];   /* frames begun per lane */
} RlxLinkStreamReader;

void     rlx_link_stream_reader_init  (RlxLinkStreamReader *r, gsize max_frame, const char *peer);
/* The control lane's cap, at most max_frame (init sets
 * RLX_LINK_MAX_CONTROL_FRAME): for the fuzz target, which cannot send 1 MiB
 * frames cheaply. */
void     rlx_link_stream_reader_set_max_control (RlxLinkStreamReader *r, gsize max_control);
/* Drops any frame in progress and the buffers; the reader can be used again
 * (from a record boundary). _free_name also frees the name and drops the
 * pool. */
void     rlx_link_stream_reader_clear (RlxLinkStreamReader *r);
void     rlx_link_stream_reader_free_name (RlxLinkStreamReader *r);
/* Take buffers for frames of several records from @pool, and give every
 * such frame's buffer back to it once the frame is released. */
void     rlx_link_stream_reader_set_pool (RlxLinkStreamReader *r, RlxLinkStreamPool *pool);
void     rlx_link_stream_reader_set_peer (RlxLinkStreamReader *r, const char *peer);

/* TRUE while a frame is in progress on @lane (its first record's header
 * came, its last record's body has not): @bytes its body bytes so far,
 * @seq which frame (frames begun on the lane so far), for a deadline
 * (rlx-frame-clock.h). */
gboolean rlx_link_stream_reader_in_progress (RlxLinkStreamReader *r, RlxLinkLane lane,
                                             gsize *bytes, guint64 *seq);

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
