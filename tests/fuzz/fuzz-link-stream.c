/* fuzz-link-stream.c — libFuzzer target for the Unix link's stream reader
 *
 * The input's first byte picks how the rest is cut into reads; the rest is
 * the byte stream a peer sends. The reader must end in an error or not,
 * never crash, and:
 *   - fed the whole stream at once, fed in the cut pieces, and fed through
 *     the zero-copy path (body_space / body_got, as the link reads large
 *     bodies) it produces the same events: the same frames with the same
 *     lanes and bytes, the same SHM records and ring operations (each
 *     of a known kind, a frame within the cap), the same error or none;
 *   - no lane buffer ever holds more than twice what arrived plus 64 KiB
 *     (a peer's announced sizes are never allocated up front);
 *   - fed through a receive-buffer pool (frames released as they come, as
 *     the link's consumers do), the events are the same again, a buffer
 *     taken from the pool is never larger than one a released frame had,
 *     and the pool never holds more than its limit;
 *   - no frame is over its lane's cap: each input is read with the control
 *     lane's cap at the bulk lane's (256 KiB, under
 *     RLX_LINK_MAX_CONTROL_FRAME) and at 4 KiB (the link's 1 MiB scaled
 *     down, so that a corpus input can cross it).
 * Built with clang -fsanitize=fuzzer,address,undefined under -Dfuzzing=true;
 * fuzz-replay.c replays the corpus under gcc in CI. */
#include "rlx-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/p2p/rlx-link-stream.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

#define POOL_MAX  2

#define MAX_FRAME (256 * 1024)

/* The control lane's cap in the run in progress. */
static gsize max_control;

/* Largest frame released so far (a pooled buffer is never larger). */
static gsize pool_cap_seen;

static void
check (gboolean ok, const char *what)
{
  if (!ok)
    {
      g_printerr ("fuzz-link-stream: invariant broken: %s\n", what);
      abort ();
    }
}

/* Events as text: "F<lane>:<len>:<xxh>" per frame, "S<size>" per SHM,
 * "R<kind>:<ring>:<a>:<b>" per ring operation. */
typedef struct {
  GString *log;
  gsize    received;
} Events;

static gboolean
on_frame (gpointer user_data, RlxLinkLane lane, GBytes *frame)
{
  Events *e = user_data;
  gsize len;
  const guint8 *p = g_bytes_get_data (frame, &len);
  guint32 h = 2166136261u;

  check (len <= MAX_FRAME, "frame over the cap");
  check (lane == RLX_LINK_LANE_BULK || len <= max_control,
         "control frame over the control lane's cap");
  for (gsize i = 0; i < len; i++)
    h = (h ^ p[i]) * 16777619u;
  /* the frame is released when this returns; with a pool its buffer goes
   * back there (its capacity is at least its length) */
  pool_cap_seen = MAX (pool_cap_seen, len);
  g_string_append_printf (e->log, "F%d:%zu:%08x ", (int) lane, len, h);
  return TRUE;
}

static gboolean
on_shm (gpointer user_data, gsize size)
{
  Events *e = user_data;

  check (size <= MAX_FRAME, "shm frame over the cap");
  g_string_append_printf (e->log, "S%zu ", size);
  return TRUE;
}

static gboolean
on_ring (gpointer user_data, const RlxLinkRingOp *op)
{
  Events *e = user_data;

  check (op->kind >= RLX_LINK_RING_ATTACH && op->kind <= RLX_LINK_RING_DETACH,
         "ring operation of an unknown kind");
  check (op->kind != RLX_LINK_RING_FRAME || op->b <= MAX_FRAME, "ring frame over the cap");
  g_string_append_printf (e->log, "R%d:%u:%" G_GUINT64_FORMAT ":%" G_GUINT64_FORMAT " ",
                          (int) op->kind, op->ring, op->a, op->b);
  return TRUE;
}

static const RlxLinkStreamSink sink = { on_frame, on_shm, on_ring };

/* What the frame deadline reads (rlx-frame-clock.h): a frame in progress
 * holds no more than its lane's cap and what arrived, frames are counted
 * as they begin, and a stream between records has none in progress. */
static void
check_in_progress (RlxLinkStreamReader *r, gsize received, guint64 seq_before[RLX_LINK_N_LANES])
{
  gboolean any = FALSE;

  for (guint i = 0; i < RLX_LINK_N_LANES; i++)
    {
      gsize bytes;
      guint64 seq;
      gboolean open = rlx_link_stream_reader_in_progress (r, i, &bytes, &seq);

      check (seq >= seq_before[i], "frames begun went back");
      check (!open || seq > 0, "a frame in progress that never began");
      check (bytes <= (i == RLX_LINK_LANE_CONTROL ? max_control : MAX_FRAME) && bytes <= received,
             "a frame in progress holds more than its cap or what arrived");
      check (open || bytes == 0, "bytes held with no frame in progress");
      seq_before[i] = seq;
      any |= open;
    }
  if (rlx_link_stream_reader_at_boundary (r))
    check (!any, "a frame in progress between records");
}

static void
check_buffers (RlxLinkStreamReader *r, gsize received)
{
  for (guint i = 0; i < RLX_LINK_N_LANES; i++)
    {
      RlxLinkStreamLane *l = &r->lanes[i];

      /* a pooled buffer is memory a frame that did arrive had; it grows
       * from there like any other */
      if (l->pooled)
        check (l->cap <= MAX (pool_cap_seen, 2 * received + 64 * 1024),
               "pooled buffer larger than any released frame's");
      else
        check (l->cap <= 2 * received + 64 * 1024, "buffer larger than what arrived");
    }
  if (r->pool != NULL)
    {
      gsize bytes;

      check (rlx_link_stream_pool_count (r->pool, &bytes) <= POOL_MAX, "pool over its limit");
      check (bytes <= POOL_MAX * MAX (pool_cap_seen, 1), "pool holds more than it was given");
    }
}

/* Feed @data in pieces of sizes drawn from @seed (all at once when 0);
 * with @pool, through a receive-buffer pool. */
static char *
run (const guint8 *data, gsize size, guint seed, gboolean zero_copy, gboolean pool)
{
  RlxLinkStreamReader r;
  Events e = { g_string_new (NULL), 0 };
  g_autoptr(GError) error = NULL;
  gsize pos = 0;
  guint32 rng = seed * 2654435761u + 1;
  gboolean ok = TRUE;
  guint64 begun[RLX_LINK_N_LANES] = { 0, 0 };

  rlx_link_stream_reader_init (&r, MAX_FRAME, "fuzz");
  rlx_link_stream_reader_set_max_control (&r, max_control);
  pool_cap_seen = 0;
  if (pool)
    {
      RlxLinkStreamPool *p = rlx_link_stream_pool_new (POOL_MAX, 4 * MAX_FRAME);

      rlx_link_stream_reader_set_pool (&r, p);
      rlx_link_stream_pool_unref (p);
    }
  while (ok && pos < size)
    {
      gsize piece = size - pos;
      guint8 *buf;
      gsize room;

      if (seed != 0)
        {
          rng = rng * 1103515245u + 12345u;
          piece = MIN (piece, 1 + (rng >> 16) % 4099);
        }
      if (zero_copy && rlx_link_stream_reader_body_space (&r, &buf, &room, &error))
        {
          gsize n = MIN (piece, room);

          memcpy (buf, data + pos, n);
          pos += n;
          e.received += n;
          ok = rlx_link_stream_reader_body_got (&r, n, &sink, &e, &error);
        }
      else if (error != NULL)
        ok = FALSE;
      else
        {
          pos += piece;
          e.received += piece;
          ok = rlx_link_stream_reader_feed (&r, data + pos - piece, piece, &sink, &e, &error);
        }
      check_buffers (&r, e.received);
      if (ok)
        check_in_progress (&r, e.received, begun);
    }
  if (!ok)
    {
      check (error != NULL, "stopped without an error");
      check (error->domain == RLX_LINK_ERROR, "error of another domain");
      g_string_append_printf (e.log, "E%d", error->code);
    }
  else
    g_string_append_printf (e.log, "end%s", rlx_link_stream_reader_at_boundary (&r) ? "" : "-mid");
  if (r.pool != NULL)
    rlx_link_stream_pool_close (r.pool);
  rlx_link_stream_reader_clear (&r);
  rlx_link_stream_reader_free_name (&r);
  return g_string_free (e.log, FALSE);
}

/* Every way of feeding the stream gives the same events. */
static void
run_all (const guint8 *data, gsize size, guint seed)
{
  g_autofree char *whole = NULL;
  g_autofree char *pieces = NULL;
  g_autofree char *zero_copy = NULL;
  g_autofree char *pooled = NULL;

  whole = run (data, size, 0, FALSE, FALSE);
  pieces = run (data, size, seed, FALSE, FALSE);
  zero_copy = run (data, size, seed, TRUE, FALSE);
  pooled = run (data, size, seed, TRUE, TRUE);
  check (strcmp (whole, pieces) == 0, "pieces differ from the whole");
  check (strcmp (whole, zero_copy) == 0, "zero-copy path differs from the whole");
  check (strcmp (whole, pooled) == 0, "the pooled path differs from the whole");
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  guint seed;

  if (size < 1)
    return 0;
  seed = data[0] + 1;
  data++;
  size--;

  max_control = MAX_FRAME;
  run_all (data, size, seed);
  max_control = 4096;
  run_all (data, size, seed);
  return 0;
}
