/* rlx-link-stream.c — records of the Unix link's byte stream (see
 * rlx-link-stream.h)
 */
#include "rlx-config.h"
#include "rlx-link-stream.h"

#include <string.h>

/* A lane's buffer grows by at least this much (and at most doubles). */
#define GROW_MIN      ((gsize) 64 * 1024)

/* ── the pool ────────────────────────────────────────────────────────── */

typedef struct {
  guint8 *buf;
  gsize   cap;
} PoolBuf;

struct _RlxLinkStreamPool
{
  gatomicrefcount ref;
  GMutex          lock;
  guint           max;
  gsize           max_bytes;
  gsize           bytes;
  gboolean        closed;
  GArray         *bufs;     /* PoolBuf */
};

/* What a pooled frame's GBytes frees: its buffer goes back to the pool. */
typedef struct {
  RlxLinkStreamPool *pool;
  PoolBuf            b;
} PoolReturn;

RlxLinkStreamPool *
rlx_link_stream_pool_new (guint max_buffers, gsize max_bytes)
{
  RlxLinkStreamPool *pool = g_new0 (RlxLinkStreamPool, 1);

  g_atomic_ref_count_init (&pool->ref);
  g_mutex_init (&pool->lock);
  pool->max = max_buffers;
  pool->max_bytes = max_bytes;
  pool->bufs = g_array_new (FALSE, FALSE, sizeof (PoolBuf));
  return pool;
}

RlxLinkStreamPool *
rlx_link_stream_pool_ref (RlxLinkStreamPool *pool)
{
  g_atomic_ref_count_inc (&pool->ref);
  return pool;
}

static void
pool_free_bufs (RlxLinkStreamPool *pool)
{
  for (guint i = 0; i < pool->bufs->len; i++)
    g_free (g_array_index (pool->bufs, PoolBuf, i).buf);
  g_array_set_size (pool->bufs, 0);
  pool->bytes = 0;
}

void
rlx_link_stream_pool_unref (RlxLinkStreamPool *pool)
{
  if (pool == NULL || !g_atomic_ref_count_dec (&pool->ref))
    return;
  pool_free_bufs (pool);
  g_array_unref (pool->bufs);
  g_mutex_clear (&pool->lock);
  g_free (pool);
}

void
rlx_link_stream_pool_close (RlxLinkStreamPool *pool)
{
  g_mutex_lock (&pool->lock);
  pool->closed = TRUE;
  pool_free_bufs (pool);
  g_mutex_unlock (&pool->lock);
}

guint
rlx_link_stream_pool_count (RlxLinkStreamPool *pool, gsize *bytes)
{
  guint n;

  g_mutex_lock (&pool->lock);
  n = pool->bufs->len;
  if (bytes != NULL)
    {
      *bytes = 0;
      for (guint i = 0; i < n; i++)
        *bytes += g_array_index (pool->bufs, PoolBuf, i).cap;
    }
  g_mutex_unlock (&pool->lock);
  return n;
}

/* The largest buffer held, or FALSE. */
static gboolean
pool_take (RlxLinkStreamPool *pool, PoolBuf *out)
{
  guint best = G_MAXUINT;

  g_mutex_lock (&pool->lock);
  for (guint i = 0; i < pool->bufs->len; i++)
    if (best == G_MAXUINT ||
        g_array_index (pool->bufs, PoolBuf, i).cap > g_array_index (pool->bufs, PoolBuf, best).cap)
      best = i;
  if (best != G_MAXUINT)
    {
      *out = g_array_index (pool->bufs, PoolBuf, best);
      g_array_remove_index_fast (pool->bufs, best);
      pool->bytes -= out->cap;
    }
  g_mutex_unlock (&pool->lock);
  return best != G_MAXUINT;
}

/* A pooled frame was released (on any thread): keep its buffer if there is
 * room, else in place of a smaller one if that makes room. */
static void
pool_return (gpointer data)
{
  PoolReturn *ret = data;
  RlxLinkStreamPool *pool = ret->pool;
  guint8 *drop = ret->b.buf;

  g_mutex_lock (&pool->lock);
  if (!pool->closed)
    {
      if (pool->bufs->len < pool->max && pool->bytes + ret->b.cap <= pool->max_bytes)
        {
          g_array_append_val (pool->bufs, ret->b);
          pool->bytes += ret->b.cap;
          drop = NULL;
        }
      else
        for (guint i = 0; i < pool->bufs->len; i++)
          {
            PoolBuf *b = &g_array_index (pool->bufs, PoolBuf, i);

            if (b->cap < ret->b.cap && pool->bytes - b->cap + ret->b.cap <= pool->max_bytes)
              {
                drop = b->buf;
                pool->bytes += ret->b.cap - b->cap;
                *b = ret->b;
                break;
              }
          }
    }
  g_mutex_unlock (&pool->lock);
  g_free (drop);
  rlx_link_stream_pool_unref (pool);
  g_free (ret);
}

/* ── the reader ──────────────────────────────────────────────────────── */

void
rlx_link_stream_put_word (guint8 out[4], RlxLinkLane lane, gsize len, gboolean more,
                          gboolean shm)
{
  guint32 w;

  g_return_if_fail (len <= RLX_LINK_STREAM_LEN_MASK);
  w = (guint32) len | (more ? RLX_LINK_STREAM_MORE : 0) |
      (lane == RLX_LINK_LANE_BULK ? RLX_LINK_STREAM_BULK : 0) | (shm ? RLX_LINK_STREAM_SHM : 0);
  out[0] = w & 0xff;
  out[1] = (w >> 8) & 0xff;
  out[2] = (w >> 16) & 0xff;
  out[3] = (w >> 24) & 0xff;
}

static void
put_u32 (guint8 *out, guint32 v)
{
  for (guint i = 0; i < 4; i++)
    out[i] = (v >> (8 * i)) & 0xff;
}

static void
put_u64 (guint8 *out, guint64 v)
{
  for (guint i = 0; i < 8; i++)
    out[i] = (v >> (8 * i)) & 0xff;
}

static guint64
get_le (const guint8 *p, guint n)
{
  guint64 v = 0;

  for (guint i = 0; i < n; i++)
    v |= (guint64) p[i] << (8 * i);
  return v;
}

static RlxLinkLane
ring_op_lane (RlxLinkRingKind kind)
{
  return kind == RLX_LINK_RING_FRAME ? RLX_LINK_LANE_BULK : RLX_LINK_LANE_CONTROL;
}

void
rlx_link_stream_put_ring_op (guint8 out[4 + RLX_LINK_STREAM_RING_OP_LEN], const RlxLinkRingOp *op)
{
  rlx_link_stream_put_word (out, ring_op_lane (op->kind), RLX_LINK_STREAM_RING_OP_LEN, TRUE,
                            TRUE);
  put_u32 (out + 4, op->kind);
  put_u32 (out + 8, op->ring);
  put_u64 (out + 12, op->a);
  put_u64 (out + 20, op->b);
}

/* A RING record's body is complete: check it and hand it out. */
static gboolean
end_ring (RlxLinkStreamReader *r, const RlxLinkStreamSink *sink, gpointer user_data,
          GError **error)
{
  RlxLinkRingOp op;
  guint32 kind = get_le (r->ring_body, 4);
  const char *bad = NULL;

  r->in_ring = FALSE;
  r->ring_got = 0;
  op.kind = kind;
  op.ring = get_le (r->ring_body + 4, 4);
  op.a = get_le (r->ring_body + 8, 8);
  op.b = get_le (r->ring_body + 16, 8);
  if (kind < RLX_LINK_RING_ATTACH || kind > RLX_LINK_RING_DETACH)
    bad = "of an unknown kind";
  else if (r->rec_lane != ring_op_lane (kind))
    bad = "on the wrong lane";
  else if ((kind != RLX_LINK_RING_FRAME && op.b != 0) ||
           (kind == RLX_LINK_RING_DETACH && op.a != 0))
    bad = "with nonzero reserved members";
  else if (kind == RLX_LINK_RING_FRAME && r->lanes[RLX_LINK_LANE_BULK].open)
    bad = "in the middle of a chunked frame";
  if (bad != NULL)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                   "%s sent a shared-ring record %s (kind %u); link closed", r->peer, bad, kind);
      return FALSE;
    }
  if (kind == RLX_LINK_RING_FRAME && op.b > r->max_frame)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE,
                   "%s sent a shared-ring frame of %" G_GUINT64_FORMAT " bytes, over this link's "
                   "cap of %" G_GSIZE_FORMAT " bytes; link closed", r->peer, op.b, r->max_frame);
      return FALSE;
    }
  return sink->ring (user_data, &op);
}

static void
lane_reset (RlxLinkStreamLane *l)
{
  g_free (l->buf);
  memset (l, 0, sizeof *l);
}

/* A frame of several records starts on @l: into a buffer from the pool. */
static void
lane_start_from_pool (RlxLinkStreamReader *r, RlxLinkStreamLane *l)
{
  PoolBuf b;

  if (r->pool == NULL || l->buf != NULL || !pool_take (r->pool, &b))
    return;
  l->buf = b.buf;
  l->cap = b.cap;
  l->pooled = TRUE;
}

void
rlx_link_stream_reader_init (RlxLinkStreamReader *r, gsize max_frame, const char *peer)
{
  memset (r, 0, sizeof *r);
  r->max_frame = MIN (max_frame, (gsize) G_MAXUINT32);
  r->max_control = MIN (r->max_frame, RLX_LINK_MAX_CONTROL_FRAME);
  rlx_link_stream_reader_set_peer (r, peer);
}

void
rlx_link_stream_reader_set_max_control (RlxLinkStreamReader *r, gsize max_control)
{
  r->max_control = MIN (max_control, r->max_frame);
}

void
rlx_link_stream_reader_set_peer (RlxLinkStreamReader *r, const char *peer)
{
  g_free (r->peer);
  r->peer = g_strdup (peer ? peer : "peer");
}

void
rlx_link_stream_reader_free_name (RlxLinkStreamReader *r)
{
  g_clear_pointer (&r->peer, g_free);
  g_clear_pointer (&r->pool, rlx_link_stream_pool_unref);
}

void
rlx_link_stream_reader_set_pool (RlxLinkStreamReader *r, RlxLinkStreamPool *pool)
{
  if (pool != NULL)
    rlx_link_stream_pool_ref (pool);
  g_clear_pointer (&r->pool, rlx_link_stream_pool_unref);
  r->pool = pool;
}

void
rlx_link_stream_reader_clear (RlxLinkStreamReader *r)
{
  for (guint i = 0; i < RLX_LINK_N_LANES; i++)
    lane_reset (&r->lanes[i]);
  r->in_body = FALSE;
  r->in_ring = FALSE;
  r->ring_got = 0;
  r->hdr_got = 0;
}

gboolean
rlx_link_stream_reader_at_boundary (RlxLinkStreamReader *r)
{
  return !r->in_body && !r->in_ring && r->hdr_got == 0 && !r->lanes[0].open &&
         !r->lanes[1].open;
}

gboolean
rlx_link_stream_reader_in_progress (RlxLinkStreamReader *r, RlxLinkLane lane, gsize *bytes,
                                    guint64 *seq)
{
  *bytes = r->lanes[lane].len;
  *seq = r->begun[lane];
  return r->lanes[lane].open || (r->in_body && r->rec_lane == lane);
}

/* Make room for @n more bytes in lane @l, where the current record still
 * announces @left (≥ n) and the buffer may at most double. */
static gboolean
lane_reserve (RlxLinkStreamReader *r, RlxLinkStreamLane *l, gsize n, gsize left, GError **error)
{
  gsize want, newcap;

  if (l->cap - l->len >= n)
    return TRUE;
  want = l->len + n;
  newcap = MAX (want, MIN (l->len + left, MAX (2 * l->cap, l->len + GROW_MIN)));

  /* glibc's realloc moves large (mmap'ed) blocks with mremap, and reuses
   * freed heap for the rest: measured cheaper than fresh mappings, whose
   * page faults cost more than the copies doubling makes (BENCHMARKS.md,
   * "Local bus: socket or memfd"). */
  {
    guint8 *p = g_try_realloc (l->buf, newcap);

    if (p == NULL)
      {
        g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED,
                     "out of memory for a frame of %" G_GSIZE_FORMAT "+ bytes from %s",
                     want, r->peer);
        return FALSE;
      }
    l->buf = p;
  }
  l->cap = newcap;
  return TRUE;
}

static gboolean
deliver (RlxLinkStreamReader *r, RlxLinkLane lane, const RlxLinkStreamSink *sink,
         gpointer user_data)
{
  RlxLinkStreamLane *l = &r->lanes[lane];
  g_autoptr(GBytes) frame = NULL;

  if (l->buf != NULL && r->pool != NULL &&
      (l->pooled || l->open || l->cap >= RLX_LINK_STREAM_POOL_MIN))
    {
      /* a large frame: its buffer goes back to the pool once released,
       * whoever releases it */
      PoolReturn *ret = g_new (PoolReturn, 1);

      ret->pool = rlx_link_stream_pool_ref (r->pool);
      ret->b.buf = l->buf;
      ret->b.cap = l->cap;
      frame = g_bytes_new_with_free_func (l->buf, l->len, pool_return, ret);
    }
  else if (l->buf != NULL)
    frame = g_bytes_new_take (l->buf, l->len);
  else
    frame = g_bytes_new (NULL, 0);
  memset (l, 0, sizeof *l);
  return sink->frame (user_data, lane, frame);
}

/* The current record's body is complete. */
static gboolean
end_record (RlxLinkStreamReader *r, const RlxLinkStreamSink *sink, gpointer user_data)
{
  r->in_body = FALSE;
  r->hdr_got = 0;
  if (r->rec_more)
    {
      r->lanes[r->rec_lane].open = TRUE;
      return TRUE;
    }
  return deliver (r, r->rec_lane, sink, user_data);
}

static gboolean
start_record (RlxLinkStreamReader *r, const RlxLinkStreamSink *sink, gpointer user_data,
              GError **error)
{
  guint32 w = (guint32) r->hdr[0] | ((guint32) r->hdr[1] << 8) | ((guint32) r->hdr[2] << 16) |
              ((guint32) r->hdr[3] << 24);
  gsize len = w & RLX_LINK_STREAM_LEN_MASK;
  RlxLinkLane lane = (w & RLX_LINK_STREAM_BULK) ? RLX_LINK_LANE_BULK : RLX_LINK_LANE_CONTROL;
  gboolean more = (w & RLX_LINK_STREAM_MORE) != 0;
  RlxLinkStreamLane *l = &r->lanes[lane];
  gsize cap;

  r->hdr_got = 0;
  if ((w & RLX_LINK_STREAM_SHM) && more)
    {
      if (sink->ring == NULL || len != RLX_LINK_STREAM_RING_OP_LEN)
        {
          g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                       sink->ring == NULL ?
                       "%s sent a shared-ring record, which this link does not take; link closed" :
                       "%s sent a shared-ring record of %" G_GSIZE_FORMAT " bytes (not %d); "
                       "link closed", r->peer, len, RLX_LINK_STREAM_RING_OP_LEN);
          return FALSE;
        }
      r->rec_lane = lane;
      r->in_ring = TRUE;
      r->ring_got = 0;
      return TRUE;
    }
  if (w & RLX_LINK_STREAM_SHM)
    {
      if (lane != RLX_LINK_LANE_BULK || l->open)
        {
          g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                       "%s sent a shared-memory record %s; link closed", r->peer,
                       lane != RLX_LINK_LANE_BULK ? "on the control lane" :
                       "in the middle of a chunked frame");
          return FALSE;
        }
      if (len > r->max_frame)
        {
          g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE,
                       "%s sent a shared-memory frame of %" G_GSIZE_FORMAT " bytes, over this "
                       "link's cap of %" G_GSIZE_FORMAT " bytes; link closed",
                       r->peer, len, r->max_frame);
          return FALSE;
        }
      return sink->shm (user_data, len);
    }
  cap = lane == RLX_LINK_LANE_CONTROL ? r->max_control : r->max_frame;
  if (len > cap || l->len > cap - len)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE,
                   "%s sent a %s frame of at least %" G_GSIZE_FORMAT " bytes, over this link's "
                   "cap of %" G_GSIZE_FORMAT " bytes for that lane; link closed", r->peer,
                   lane == RLX_LINK_LANE_CONTROL ? "control" : "bulk", l->len + len, cap);
      return FALSE;
    }
  if (!l->open)
    r->begun[lane]++;
  if (!l->open && (more || len >= RLX_LINK_STREAM_POOL_MIN))
    lane_start_from_pool (r, l);
  r->rec_lane = lane;
  r->rec_more = more;
  r->rec_left = len;
  r->in_body = TRUE;
  if (len == 0)
    return end_record (r, sink, user_data);
  return TRUE;
}

gboolean
rlx_link_stream_reader_feed (RlxLinkStreamReader *r, const guint8 *data, gsize len,
                             const RlxLinkStreamSink *sink, gpointer user_data, GError **error)
{
  gsize pos = 0;

  while (pos < len)
    {
      gsize avail = len - pos;

      if (r->in_ring)
        {
          gsize take = MIN (avail, RLX_LINK_STREAM_RING_OP_LEN - r->ring_got);

          memcpy (r->ring_body + r->ring_got, data + pos, take);
          r->ring_got += take;
          pos += take;
          if (r->ring_got == RLX_LINK_STREAM_RING_OP_LEN &&
              !end_ring (r, sink, user_data, error))
            return FALSE;
        }
      else if (!r->in_body)
        {
          gsize take = MIN (avail, 4 - r->hdr_got);

          memcpy (r->hdr + r->hdr_got, data + pos, take);
          r->hdr_got += take;
          pos += take;
          if (r->hdr_got == 4 && !start_record (r, sink, user_data, error))
            return FALSE;
        }
      else
        {
          RlxLinkStreamLane *l = &r->lanes[r->rec_lane];
          gsize take = MIN (avail, r->rec_left);

          if (!lane_reserve (r, l, take, r->rec_left, error))
            return FALSE;
          memcpy (l->buf + l->len, data + pos, take);
          l->len += take;
          r->rec_left -= take;
          pos += take;
          if (r->rec_left == 0 && !end_record (r, sink, user_data))
            return FALSE;
        }
    }
  return TRUE;
}

gboolean
rlx_link_stream_reader_body_space (RlxLinkStreamReader *r, guint8 **buf, gsize *len,
                                   GError **error)
{
  RlxLinkStreamLane *l;
  gsize n;

  if (!r->in_body)
    return FALSE;
  g_assert (r->rec_left > 0);
  l = &r->lanes[r->rec_lane];
  if (l->cap == l->len)
    {
      /* grow: at most double what arrived, at least GROW_MIN, never past
       * the record */
      n = MIN (r->rec_left, MAX (GROW_MIN, l->len));
      if (!lane_reserve (r, l, n, r->rec_left, error))
        return FALSE;
    }
  *buf = l->buf + l->len;
  *len = MIN (l->cap - l->len, r->rec_left);
  return TRUE;
}

gboolean
rlx_link_stream_reader_body_got (RlxLinkStreamReader *r, gsize n, const RlxLinkStreamSink *sink,
                                 gpointer user_data, GError **error)
{
  RlxLinkStreamLane *l = &r->lanes[r->rec_lane];

  g_return_val_if_fail (r->in_body && n <= r->rec_left && n <= l->cap - l->len, FALSE);
  l->len += n;
  r->rec_left -= n;
  if (r->rec_left == 0)
    return end_record (r, sink, user_data);
  return TRUE;
}
