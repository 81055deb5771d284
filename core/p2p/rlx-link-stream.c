/* rlx-link-stream.c — records of the Unix link's byte stream (see
 * rlx-link-stream.h)
 */
#include "rlx-config.h"
#include "rlx-link-stream.h"

#include <string.h>

/* A lane's buffer grows by at least this much (and at most doubles). */
#define GROW_MIN      ((gsize) 64 * 1024)

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
lane_reset (RlxLinkStreamLane *l)
{
  g_free (l->buf);
  memset (l, 0, sizeof *l);
}

void
rlx_link_stream_reader_init (RlxLinkStreamReader *r, gsize max_frame, const char *peer)
{
  memset (r, 0, sizeof *r);
  r->max_frame = MIN (max_frame, (gsize) G_MAXUINT32);
  rlx_link_stream_reader_set_peer (r, peer);
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
}

void
rlx_link_stream_reader_clear (RlxLinkStreamReader *r)
{
  for (guint i = 0; i < RLX_LINK_N_LANES; i++)
    lane_reset (&r->lanes[i]);
  r->in_body = FALSE;
  r->hdr_got = 0;
}

gboolean
rlx_link_stream_reader_at_boundary (RlxLinkStreamReader *r)
{
  return !r->in_body && r->hdr_got == 0 && !r->lanes[0].open && !r->lanes[1].open;
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

  if (l->buf != NULL)
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

  r->hdr_got = 0;
  if (w & RLX_LINK_STREAM_SHM)
    {
      if (more || lane != RLX_LINK_LANE_BULK || l->open)
        {
          g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                       "%s sent a shared-memory record %s; link closed", r->peer,
                       more ? "marked as continued" :
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
  if (len > r->max_frame || l->len > r->max_frame - len)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE,
                   "%s sent a frame of at least %" G_GSIZE_FORMAT " bytes, over this link's cap "
                   "of %" G_GSIZE_FORMAT " bytes; link closed", r->peer, l->len + len,
                   r->max_frame);
      return FALSE;
    }
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

      if (!r->in_body)
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
