/* test-link.c — RlxLink over Unix sockets: order, large frames, counters,
 * close once, frame cap both ways, truncated streams, flush on close, uid.
 */
#include "rlx-config.h"
#include "core/p2p/rlx-link.h"
#include "core/p2p/rlx-unix-link.h"
#include "core/p2p/rlx-link-stream.h"
#include "core/p2p/rlx-link-mailbox.h"
#include "core/p2p/rlx-frame-clock.h"
#include "core/util/rlx-par-copy.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gio/gunixsocketaddress.h>

typedef struct {
  GPtrArray *frames;      /* GBytes* */
  guint      closed;
  GError    *close_error;
} Sink;

static void
on_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  Sink *sink = user_data;

  g_ptr_array_add (sink->frames, g_bytes_ref (frame));
}

static void
on_closed (RlxLink *link, const GError *error, gpointer user_data)
{
  Sink *sink = user_data;

  sink->closed++;
  g_clear_error (&sink->close_error);
  sink->close_error = g_error_copy (error);
}

static void
sink_init (Sink *sink, RlxLink *link)
{
  sink->frames = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  sink->closed = 0;
  sink->close_error = NULL;
  g_signal_connect (link, "frame", G_CALLBACK (on_frame), sink);
  g_signal_connect (link, "closed", G_CALLBACK (on_closed), sink);
}

static void
sink_clear (Sink *sink)
{
  g_ptr_array_unref (sink->frames);
  g_clear_error (&sink->close_error);
}

static gboolean
on_timeout (gpointer user_data)
{
  gboolean *expired = user_data;

  *expired = TRUE;
  return G_SOURCE_REMOVE;
}

/* Iterate the default context until *@flag (a guint) reaches @want or 10 s. */
static void
wait_for (guint *counter, guint want)
{
  gboolean expired = FALSE;
  guint id = g_timeout_add (10000, on_timeout, &expired);

  while (*counter < want && !expired)
    g_main_context_iteration (NULL, TRUE);
  g_assert_false (expired);
  g_source_remove (id);
}

static void
spin (guint ms)
{
  gboolean expired = FALSE;

  g_timeout_add (ms, on_timeout, &expired);
  while (!expired)
    g_main_context_iteration (NULL, TRUE);
}

/* A link's counters follow its I/O thread (the peer may hold a frame before
 * bytes-tx counts it): wait until @link has written @tx bytes in all and has
 * nothing pending. */
static void
wait_for_written (RlxLink *link, guint64 tx)
{
  gboolean expired = FALSE;
  guint id = g_timeout_add (10000, on_timeout, &expired);

  while ((rlx_link_get_bytes_tx (link) < tx || rlx_link_pending_bytes (link) > 0) && !expired)
    g_main_context_iteration (NULL, TRUE);
  g_assert_false (expired);
  g_source_remove (id);
}

static GBytes *
pattern_frame (gsize len, guint seed)
{
  guint8 *data = g_malloc (len > 0 ? len : 1);

  for (gsize i = 0; i < len; i++)
    data[i] = (guint8) ((i * 31 + seed * 7 + (i >> 8)) & 0xff);
  return g_bytes_new_take (data, len);
}

/* Bytes a frame of @len takes on the stream: record headers included; a
 * memfd frame is one header plus its size. */
static guint64
stream_bytes (gsize len, gsize shm_min)
{
  gsize records = (shm_min > 0 && len >= shm_min) ? 1
                  : MAX ((len + RLX_UNIX_LINK_PIECE - 1) / RLX_UNIX_LINK_PIECE, 1);

  return len + 4 * records;
}

static void
order_and_large (gsize shm_min)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) sent = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  gsize sizes[] = { 1, 0, 17, 4 << 20, 3, 65536, 65537, 200000, 4, (4 << 20) + 5, 9 };
  guint64 payload = 0;
  Sink sa, sb;

  g_assert_true (rlx_unix_link_new_pair (0, &a, &b, &error));
  g_assert_no_error (error);
  rlx_unix_link_set_shm_min (RLX_UNIX_LINK (a), shm_min);
  rlx_unix_link_set_shm_min (RLX_UNIX_LINK (b), shm_min);
  /* the socket and memfds only (ring-order covers the ring) */
  rlx_unix_link_set_ring_min (RLX_UNIX_LINK (a), 0);
  rlx_unix_link_set_ring_min (RLX_UNIX_LINK (b), 0);
  sink_init (&sa, a);
  sink_init (&sb, b);

  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      GBytes *f = pattern_frame (sizes[i], i);

      g_assert_true (rlx_link_send (a, f, &error));
      g_assert_no_error (error);
      g_ptr_array_add (sent, f);
      payload += stream_bytes (sizes[i], shm_min);
    }
  /* and one the other way, interleaved */
  {
    g_autoptr(GBytes) back = pattern_frame (4 << 20, 99);
    g_assert_true (rlx_link_send (b, back, &error));
    wait_for (&sb.frames->len, sent->len);
    wait_for (&sa.frames->len, 1);
    g_assert_true (g_bytes_equal (sa.frames->pdata[0], back));
  }

  for (guint i = 0; i < sent->len; i++)
    g_assert_true (g_bytes_equal (sent->pdata[i], sb.frames->pdata[i]));

  /* Counters include the 4-byte header of every record. */
  wait_for_written (a, payload);
  g_assert_cmpuint (rlx_link_get_bytes_tx (a), ==, payload);
  g_assert_cmpuint (rlx_link_get_bytes_rx (b), ==, payload);
  g_assert_cmpuint (rlx_link_get_bytes_rx (a), ==, stream_bytes (4 << 20, shm_min));
  g_assert_cmpuint (rlx_link_pending_bytes (a), ==, 0);
  g_assert_cmpuint (sa.closed + sb.closed, ==, 0);
  /* Moving 8+ MB through the kernel takes measurable time on both ends. */
  g_assert_cmpuint (rlx_link_get_io_us (a), >, 0);
  g_assert_cmpuint (rlx_link_get_io_us (b), >, 0);

  rlx_link_close (a);
  rlx_link_close (b);
  sink_clear (&sa);
  sink_clear (&sb);
}

static void
test_order_and_large (void)
{
  order_and_large (0);
}

static void
test_order_and_large_shm (void)
{
  order_and_large (1 << 20);
}

static void
test_close_once (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) f = g_bytes_new_static ("x", 1);
  Sink sa, sb;

  g_assert_true (rlx_unix_link_new_pair (0, &a, &b, &error));
  sink_init (&sa, a);
  sink_init (&sb, b);

  rlx_link_close (a);
  g_assert_cmpuint (sa.closed, ==, 1);
  g_assert_error (sa.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED);
  g_assert_true (rlx_link_is_closed (a));
  rlx_link_close (a);      /* twice: nothing more */
  g_assert_cmpuint (sa.closed, ==, 1);

  /* The peer sees EOF: closed, once, CLOSED. */
  wait_for (&sb.closed, 1);
  g_assert_error (sb.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED);
  spin (50);
  g_assert_cmpuint (sb.closed, ==, 1);
  rlx_link_close (b);
  g_assert_cmpuint (sb.closed, ==, 1);

  g_assert_false (rlx_link_send (a, f, &error));
  g_assert_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED);
  g_clear_error (&error);
  g_assert_false (rlx_link_send (b, f, &error));
  g_assert_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED);

  sink_clear (&sa);
  sink_clear (&sb);
}

/* One end is a raw socket we write arbitrary bytes to. */
static RlxLink *
link_with_raw_peer (gsize max_frame, int *raw_fd)
{
  int fds[2];
  g_autoptr(GSocket) socket = NULL;
  g_autoptr(GSocketConnection) connection = NULL;
  g_autoptr(GError) error = NULL;
  RlxLink *link;

  g_assert_cmpint (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), ==, 0);
  socket = g_socket_new_from_fd (fds[0], &error);
  g_assert_no_error (error);
  connection = g_socket_connection_factory_create_connection (socket);
  link = rlx_unix_link_new (connection, "raw peer", max_frame, &error);
  g_assert_no_error (error);
  *raw_fd = fds[1];
  return link;
}

/* The raw end of link_with_raw_peer made a link in its turn (it starts
 * reading only now). */
static RlxLink *
link_from_raw (int raw_fd, const char *name)
{
  g_autoptr(GSocket) socket = NULL;
  g_autoptr(GSocketConnection) connection = NULL;
  g_autoptr(GError) error = NULL;
  RlxLink *link;

  socket = g_socket_new_from_fd (raw_fd, &error);
  g_assert_no_error (error);
  connection = g_socket_connection_factory_create_connection (socket);
  link = rlx_unix_link_new (connection, name, 0, &error);
  g_assert_no_error (error);
  return link;
}

/* Frames queued just before close still reach the peer (a bye), also after
 * the link's last reference is gone. The peer starts reading only after the
 * close, so the frames are still queued then (deterministic). */
static void
test_flush_on_close (void)
{
  int raw;
  g_autoptr(RlxLink) a = link_with_raw_peer (0, &raw);
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) big = pattern_frame (16 << 20, 5);
  g_autoptr(GBytes) bye = g_bytes_new_static ("bye", 3);
  Sink sb;

  /* through the socket (a memfd would leave at once) */
  rlx_unix_link_set_shm_min (RLX_UNIX_LINK (a), 0);
  rlx_unix_link_set_ring_min (RLX_UNIX_LINK (a), 0);
  g_assert_true (rlx_link_send (a, big, &error));
  g_assert_true (rlx_link_send (a, bye, &error));
  g_assert_cmpuint (rlx_link_pending_bytes (a), >, 0);  /* 16 MB cannot go at once */
  rlx_link_close (a);
  g_clear_object (&a);     /* the I/O side flushes on without the link */

  b = link_from_raw (raw, "late reader");
  sink_init (&sb, b);
  wait_for (&sb.closed, 1);
  g_assert_cmpuint (sb.frames->len, ==, 2);
  g_assert_true (g_bytes_equal (sb.frames->pdata[0], big));
  g_assert_true (g_bytes_equal (sb.frames->pdata[1], bye));
  g_assert_error (sb.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED);
  sink_clear (&sb);
}

static void
test_send_too_large (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) big = pattern_frame (1025, 1);
  g_autoptr(GBytes) ok = pattern_frame (1024, 2);
  Sink sb;

  g_assert_true (rlx_unix_link_new_pair (1024, &a, &b, &error));
  g_assert_cmpuint (rlx_unix_link_get_max_frame (RLX_UNIX_LINK (a)), ==, 1024);
  sink_init (&sb, b);
  g_assert_false (rlx_link_send (a, big, &error));
  g_assert_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE);
  g_assert_nonnull (strstr (error->message, "1025"));
  g_assert_false (rlx_link_is_closed (a));
  g_clear_error (&error);
  g_assert_true (rlx_link_send (a, ok, &error));
  wait_for (&sb.frames->len, 1);
  g_assert_true (g_bytes_equal (sb.frames->pdata[0], ok));
  rlx_link_close (a);
  rlx_link_close (b);
  sink_clear (&sb);
}

static void
test_receive_too_large (void)
{
  int raw;
  g_autoptr(RlxLink) link = link_with_raw_peer (1 << 20, &raw);
  /* A good 2-byte frame, then a prefix announcing 1 MiB + 1 bytes. */
  guint8 bytes[] = { 2, 0, 0, 0, 'o', 'k', 0x01, 0x00, 0x10, 0x00 };
  Sink sink;

  sink_init (&sink, link);
  g_assert_cmpint (write (raw, bytes, sizeof bytes), ==, sizeof bytes);
  wait_for (&sink.closed, 1);
  g_assert_cmpuint (sink.frames->len, ==, 1);
  g_assert_cmpmem (g_bytes_get_data (sink.frames->pdata[0], NULL), 2, "ok", 2);
  g_assert_error (sink.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE);
  g_assert_nonnull (strstr (sink.close_error->message, "1048577"));
  g_assert_true (rlx_link_is_closed (link));
  close (raw);
  sink_clear (&sink);
}

static void
test_huge_prefix_default_cap (void)
{
  int raw;
  g_autoptr(RlxLink) link = link_with_raw_peer (0, &raw);
  /* bulk lane, 512 MiB - 1 announced: over the 64 MiB cap, never allocated */
  guint8 bytes[] = { 0xff, 0xff, 0xff, 0x5f };
  Sink sink;

  sink_init (&sink, link);
  g_assert_cmpint (write (raw, bytes, sizeof bytes), ==, sizeof bytes);
  wait_for (&sink.closed, 1);
  g_assert_error (sink.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE);
  close (raw);
  sink_clear (&sink);
}

static void
test_truncated_frame (void)
{
  int raw;
  g_autoptr(RlxLink) link = link_with_raw_peer (0, &raw);
  guint8 bytes[] = { 100, 0, 0, 0, 'a', 'b', 'c' };
  Sink sink;

  sink_init (&sink, link);
  g_assert_cmpint (write (raw, bytes, sizeof bytes), ==, sizeof bytes);
  close (raw);
  wait_for (&sink.closed, 1);
  g_assert_cmpuint (sink.frames->len, ==, 0);
  g_assert_error (sink.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL);
  g_assert_cmpuint (rlx_link_get_bytes_rx (link), ==, sizeof bytes);
  sink_clear (&sink);
}

/* Closing the link from inside a ::frame handler stops delivery at once. */
static void
on_frame_close (RlxLink *link, GBytes *frame, gpointer user_data)
{
  guint *count = user_data;

  (*count)++;
  rlx_link_close (link);
}

static void
test_close_in_handler (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GError) error = NULL;
  guint count = 0;
  Sink sb;

  g_assert_true (rlx_unix_link_new_pair (0, &a, &b, &error));
  sink_init (&sb, b);
  g_signal_connect (b, "frame", G_CALLBACK (on_frame_close), &count);
  for (guint i = 0; i < 5; i++)
    {
      g_autoptr(GBytes) f = pattern_frame (10, i);
      g_assert_true (rlx_link_send (a, f, NULL));
    }
  wait_for (&sb.closed, 1);
  spin (50);
  g_assert_cmpuint (count, ==, 1);
  g_assert_cmpuint (sb.frames->len, ==, 1);
  g_assert_cmpuint (sb.closed, ==, 1);
  rlx_link_close (a);
  sink_clear (&sb);
}

/* ── growth, lanes, shared memory ─────────────────────────────────────── */

/* Heap bytes in use (malloc'ed and mmap'ed by malloc) and the process's
 * virtual size: what a 64 MiB allocation would show, touched or not. */
static void
memory_now (gsize *heap, gsize *vsize)
{
  struct mallinfo2 mi = mallinfo2 ();
  FILE *f = fopen ("/proc/self/statm", "r");
  unsigned long pages = 0;

  *heap = mi.uordblks + mi.hblkhd;
  g_assert_nonnull (f);
  g_assert_cmpint (fscanf (f, "%lu", &pages), ==, 1);
  fclose (f);
  *vsize = pages * (gsize) sysconf (_SC_PAGESIZE);
}

/* FALSE if the link hung up first (it reads on its own thread, so it may cut
 * a hostile writer off before the writer is done). */
static gboolean
try_write_all (int fd, const void *data, gsize len)
{
  const guint8 *p = data;

  while (len > 0)
    {
      gssize n = write (fd, p, len);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
        return FALSE;
      g_assert_cmpint (n, >, 0);
      p += n;
      len -= n;
    }
  return TRUE;
}

static void
write_all (int fd, const void *data, gsize len)
{
  g_assert_true (try_write_all (fd, data, len));
}

static gboolean
try_write_record (int fd, RlxLinkLane lane, const void *body, gsize len, gboolean more)
{
  guint8 hdr[4];

  rlx_link_stream_put_word (hdr, lane, len, more, FALSE);
  return try_write_all (fd, hdr, 4) && (len == 0 || try_write_all (fd, body, len));
}

static void
write_record (int fd, RlxLinkLane lane, const void *body, gsize len, gboolean more)
{
  g_assert_true (try_write_record (fd, lane, body, len, more));
}

/* A peer announcing 64 MiB then sending 10 bytes costs a 64 KiB buffer, not
 * 64 MiB: measured as heap in use and virtual size before and after. */
static void
test_announced_size_not_allocated (void)
{
  int raw;
  g_autoptr(RlxLink) link = link_with_raw_peer (0, &raw);
  guint8 hdr[4];
  gsize heap0, vsize0, heap1, vsize1;
  Sink sink;

  sink_init (&sink, link);
  /* One small frame first: the link's I/O thread has allocated from its
   * malloc arena before (a new arena reserves 64 MiB of address space). */
  write_record (raw, RLX_LINK_LANE_BULK, "warm", 4, FALSE);
  wait_for (&sink.frames->len, 1);
  memory_now (&heap0, &vsize0);
  rlx_link_stream_put_word (hdr, RLX_LINK_LANE_BULK, 64u << 20, FALSE, FALSE);
  write_all (raw, hdr, 4);
  write_all (raw, "0123456789", 10);
  /* wait until the link has read them */
  while (rlx_link_get_bytes_rx (link) < 8 + 14)
    g_main_context_iteration (NULL, TRUE);
  memory_now (&heap1, &vsize1);
  g_test_message ("heap +%" G_GSIZE_FORMAT " B, virtual +%" G_GSIZE_FORMAT " B",
                  heap1 - MIN (heap0, heap1), vsize1 - MIN (vsize0, vsize1));
  g_assert_cmpuint (heap1, <, heap0 + (1u << 20));
  g_assert_cmpuint (vsize1, <, vsize0 + (32u << 20));
  g_assert_cmpuint (sink.frames->len, ==, 1);
  g_assert_cmpuint (sink.closed, ==, 0);
  close (raw);
  wait_for (&sink.closed, 1);
  g_assert_error (sink.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL);
  sink_clear (&sink);
}

/* Records of one frame that add up past the cap are cut off, although each
 * is under it. */
static void
test_chunked_over_cap (void)
{
  int raw;
  g_autoptr(RlxLink) link = link_with_raw_peer (100000, &raw);
  g_autofree guint8 *piece = g_malloc0 (60000);
  Sink sink;

  sink_init (&sink, link);
  write_record (raw, RLX_LINK_LANE_BULK, piece, 60000, TRUE);
  /* the link may hang up while this one is still being written */
  (void) try_write_record (raw, RLX_LINK_LANE_BULK, piece, 60000, FALSE);
  wait_for (&sink.closed, 1);
  g_assert_error (sink.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE);
  g_assert_nonnull (strstr (sink.close_error->message, "120000"));
  g_assert_cmpuint (sink.frames->len, ==, 0);
  close (raw);
  sink_clear (&sink);
}

/* The control lane takes frames up to RLX_LINK_MAX_CONTROL_FRAME from a
 * peer, in one record or several, and closes the link on the first record
 * that would take a control frame past it, before reading (or allocating)
 * its body; the bulk lane still takes the link's max_frame. */
static void
test_control_cap_from_peer (void)
{
  const gsize cap = RLX_LINK_MAX_CONTROL_FRAME;
  int raw;
  g_autoptr(RlxLink) link = link_with_raw_peer (0, &raw);
  g_autoptr(GBytes) bulk = pattern_frame (cap + 1, 1);
  g_autoptr(GBytes) most = pattern_frame (cap, 2);
  g_autofree guint8 *piece = g_malloc0 (600000);
  Sink sink;

  g_assert_cmpuint (cap, <, RLX_UNIX_LINK_DEFAULT_MAX_FRAME);
  sink_init (&sink, link);
  write_record (raw, RLX_LINK_LANE_BULK, g_bytes_get_data (bulk, NULL), cap + 1, FALSE);
  write_record (raw, RLX_LINK_LANE_CONTROL, g_bytes_get_data (most, NULL), cap, FALSE);
  wait_for (&sink.frames->len, 2);
  g_assert_true (g_bytes_equal (sink.frames->pdata[0], bulk));
  g_assert_true (g_bytes_equal (sink.frames->pdata[1], most));
  g_assert_false (rlx_link_is_closed (link));

  /* one record announcing a byte more: refused at its header */
  {
    guint8 hdr[4];

    rlx_link_stream_put_word (hdr, RLX_LINK_LANE_CONTROL, cap + 1, FALSE, FALSE);
    write_all (raw, hdr, 4);
  }
  wait_for (&sink.closed, 1);
  g_assert_error (sink.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE);
  g_assert_nonnull (strstr (sink.close_error->message, "control frame of at least 1048577"));
  g_assert_nonnull (strstr (sink.close_error->message, "cap of 1048576"));
  g_assert_cmpuint (sink.frames->len, ==, 2);
  close (raw);
  sink_clear (&sink);

  /* two pieces that add up to more than the cap */
  {
    g_autoptr(RlxLink) l2 = link_with_raw_peer (0, &raw);

    sink_init (&sink, l2);
    write_record (raw, RLX_LINK_LANE_CONTROL, piece, 600000, TRUE);
    (void) try_write_record (raw, RLX_LINK_LANE_CONTROL, piece, 600000, FALSE);
    wait_for (&sink.closed, 1);
    g_assert_error (sink.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE);
    g_assert_nonnull (strstr (sink.close_error->message, "control frame of at least 1200000"));
    g_assert_cmpuint (sink.frames->len, ==, 0);
    close (raw);
    sink_clear (&sink);
  }
}

/* A control frame over the cap is refused by the sender (the link stays,
 * and the same bytes go on the bulk lane); one of exactly the cap reaches
 * the peer whole, on its lane. */
static void
test_control_cap_send (void)
{
  const gsize cap = RLX_LINK_MAX_CONTROL_FRAME;
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) over = pattern_frame (cap + 1, 3);
  g_autoptr(GBytes) most = pattern_frame (cap, 4);
  Sink sb;

  g_assert_true (rlx_unix_link_new_pair (0, &a, &b, &error));
  sink_init (&sb, b);
  g_assert_false (rlx_link_send_lane (a, RLX_LINK_LANE_CONTROL, over, &error));
  g_assert_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE);
  g_assert_nonnull (strstr (error->message, "1048577"));
  g_clear_error (&error);
  g_assert_false (rlx_link_is_closed (a));
  g_assert_cmpuint (rlx_link_pending_bytes (a), ==, 0);
  g_assert_true (rlx_link_send_lane (a, RLX_LINK_LANE_CONTROL, most, &error));
  g_assert_true (rlx_link_send_lane (a, RLX_LINK_LANE_BULK, over, &error));
  wait_for (&sb.frames->len, 2);
  {
    gboolean first_is_most = g_bytes_equal (sb.frames->pdata[0], most);

    g_assert_true (g_bytes_equal (sb.frames->pdata[first_is_most ? 0 : 1], most));
    g_assert_true (g_bytes_equal (sb.frames->pdata[first_is_most ? 1 : 0], over));
  }
  g_assert_cmpuint (sb.closed, ==, 0);
  rlx_link_close (a);
  rlx_link_close (b);
  sink_clear (&sb);
}

typedef struct {
  GPtrArray *frames;
  GArray    *lanes;
} LaneSink;

static void
on_lane_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  LaneSink *ls = user_data;
  RlxLinkLane lane = rlx_link_get_rx_lane (link);

  g_ptr_array_add (ls->frames, g_bytes_ref (frame));
  g_array_append_val (ls->lanes, lane);
}

/* The reader reassembles a chunked bulk frame around a control frame that
 * came between its pieces, and hands the control frame out first. */
static void
test_lanes_interleaved_from_peer (void)
{
  int raw;
  g_autoptr(RlxLink) link = link_with_raw_peer (0, &raw);
  LaneSink ls = { g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref),
                  g_array_new (FALSE, FALSE, sizeof (RlxLinkLane)) };

  g_signal_connect (link, "frame", G_CALLBACK (on_lane_frame), &ls);
  write_record (raw, RLX_LINK_LANE_BULK, "hello ", 6, TRUE);
  write_record (raw, RLX_LINK_LANE_CONTROL, "ping", 4, FALSE);
  write_record (raw, RLX_LINK_LANE_BULK, "big ", 4, TRUE);
  write_record (raw, RLX_LINK_LANE_CONTROL, "", 0, FALSE);
  write_record (raw, RLX_LINK_LANE_BULK, "world", 5, FALSE);
  wait_for (&ls.frames->len, 3);
  g_assert_cmpuint (g_array_index (ls.lanes, RlxLinkLane, 0), ==, RLX_LINK_LANE_CONTROL);
  g_assert_cmpmem (g_bytes_get_data (ls.frames->pdata[0], NULL), 4, "ping", 4);
  g_assert_cmpuint (g_array_index (ls.lanes, RlxLinkLane, 1), ==, RLX_LINK_LANE_CONTROL);
  g_assert_cmpuint (g_bytes_get_size (ls.frames->pdata[1]), ==, 0);
  g_assert_cmpuint (g_array_index (ls.lanes, RlxLinkLane, 2), ==, RLX_LINK_LANE_BULK);
  g_assert_cmpmem (g_bytes_get_data (ls.frames->pdata[2], NULL), 15, "hello big world", 15);
  close (raw);
  g_ptr_array_unref (ls.frames);
  g_array_unref (ls.lanes);
}

/* On a real link: a control frame sent after a 32 MB bulk frame (more than
 * the socket buffers hold) arrives before the bulk frame is complete, and
 * each lane keeps its order. Deterministic: an order, not a time (the
 * receiving end starts reading only once all four frames are queued). */
static void
test_control_overtakes_bulk (void)
{
  int raw;
  g_autoptr(RlxLink) a = link_with_raw_peer (0, &raw);
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GBytes) bulk1 = pattern_frame (32u << 20, 1);
  g_autoptr(GBytes) bulk2 = pattern_frame (1000, 2);
  g_autoptr(GBytes) c1 = pattern_frame (40, 3);
  g_autoptr(GBytes) c2 = pattern_frame (50, 4);
  LaneSink ls = { g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref),
                  g_array_new (FALSE, FALSE, sizeof (RlxLinkLane)) };

  rlx_unix_link_set_shm_min (RLX_UNIX_LINK (a), 0);

  rlx_unix_link_set_ring_min (RLX_UNIX_LINK (a), 0);
  g_assert_true (rlx_link_send_lane (a, RLX_LINK_LANE_BULK, bulk1, NULL));
  g_assert_true (rlx_link_send_lane (a, RLX_LINK_LANE_BULK, bulk2, NULL));
  g_assert_cmpuint (rlx_link_pending_bytes_lane (a, RLX_LINK_LANE_BULK), >, 0);
  g_assert_true (rlx_link_send_lane (a, RLX_LINK_LANE_CONTROL, c1, NULL));
  g_assert_true (rlx_link_send_lane (a, RLX_LINK_LANE_CONTROL, c2, NULL));
  b = link_from_raw (raw, "late reader");
  g_signal_connect (b, "frame", G_CALLBACK (on_lane_frame), &ls);
  wait_for (&ls.frames->len, 4);
  g_assert_true (g_bytes_equal (ls.frames->pdata[0], c1));
  g_assert_true (g_bytes_equal (ls.frames->pdata[1], c2));
  g_assert_true (g_bytes_equal (ls.frames->pdata[2], bulk1));
  g_assert_true (g_bytes_equal (ls.frames->pdata[3], bulk2));
  wait_for_written (a, 0);
  g_assert_cmpuint (rlx_link_pending_bytes (a), ==, 0);
  rlx_link_close (a);
  rlx_link_close (b);
  g_ptr_array_unref (ls.frames);
  g_array_unref (ls.lanes);
}

/* Liveness: bytes of a frame still on its way move last-rx. */
static void
test_last_rx_counts_partial_frames (void)
{
  int raw;
  g_autoptr(RlxLink) link = link_with_raw_peer (0, &raw);
  guint8 hdr[4];
  gint64 t1, t2;

  g_assert_cmpint (rlx_link_get_last_rx (link), ==, 0);
  rlx_link_stream_put_word (hdr, RLX_LINK_LANE_BULK, 1000, FALSE, FALSE);
  write_all (raw, hdr, 4);
  write_all (raw, "abc", 3);
  while (rlx_link_get_bytes_rx (link) < 7)
    g_main_context_iteration (NULL, TRUE);
  t1 = rlx_link_get_last_rx (link);
  g_assert_cmpint (t1, >, 0);
  spin (5);
  write_all (raw, "def", 3);
  while (rlx_link_get_bytes_rx (link) < 10)
    g_main_context_iteration (NULL, TRUE);
  t2 = rlx_link_get_last_rx (link);
  g_assert_cmpint (t2, >, t1);
  close (raw);
}

/* A frame in progress must come at RLX_FRAME_CLOCK_MIN_RATE, at most a
 * grace behind (rlx-frame-clock.h), however alive the link is otherwise: a
 * peer that sends a bulk frame's first MiB at once, then a byte of it and a
 * whole control frame every 200 ms, is cut off a grace (1 s here) later,
 * with the reason — not after the 16 s its first MiB would be worth at the
 * rate; a frame that takes twice the grace at three times the rate arrives
 * whole. */
static void
test_half_sent_frame_deadline (void)
{
  g_autofree guint8 *first = g_malloc0 (1 << 20);
  g_autoptr(GBytes) slow = pattern_frame (400 * 1000, 5);
  const guint8 *slow_data = g_bytes_get_data (slow, NULL);
  RlxLink *link;
  gint64 t0, took;
  Sink sink;
  int raw;

  g_setenv ("RLX_LINK_FRAME_GRACE_MS", "1000", TRUE);
  link = link_with_raw_peer (0, &raw);
  g_unsetenv ("RLX_LINK_FRAME_GRACE_MS");
  sink_init (&sink, link);
  t0 = g_get_monotonic_time ();
  write_record (raw, RLX_LINK_LANE_BULK, first, 1 << 20, TRUE);
  while (sink.closed == 0 && g_get_monotonic_time () - t0 < 8 * G_USEC_PER_SEC)
    {
      if (!try_write_record (raw, RLX_LINK_LANE_BULK, "x", 1, TRUE) ||
          !try_write_record (raw, RLX_LINK_LANE_CONTROL, "heartbeat", 9, FALSE))
        break;
      spin (200);
    }
  wait_for (&sink.closed, 1);
  took = g_get_monotonic_time () - t0;
  g_test_message ("closed after %.2f s: %s", took / 1e6, sink.close_error->message);
  g_assert_error (sink.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_SLOW);
  g_assert_nonnull (strstr (sink.close_error->message, "raw peer kept a bulk frame half-sent"));
  g_assert_nonnull (strstr (sink.close_error->message, "65536 bytes/s"));
  /* the grace, and no more than a few ticks late */
  g_assert_cmpint (took, >=, 1000 * 1000);
  g_assert_cmpint (took, <, 4 * G_USEC_PER_SEC);
  g_assert_cmpuint (sink.frames->len, >=, 5);   /* the control frames came */
  close (raw);
  sink_clear (&sink);
  g_object_unref (link);

  g_setenv ("RLX_LINK_FRAME_GRACE_MS", "1000", TRUE);
  link = link_with_raw_peer (0, &raw);
  g_unsetenv ("RLX_LINK_FRAME_GRACE_MS");
  sink_init (&sink, link);
  t0 = g_get_monotonic_time ();
  for (gsize off = 0; off < g_bytes_get_size (slow); off += 20 * 1000)
    {
      write_record (raw, RLX_LINK_LANE_BULK, slow_data + off, 20 * 1000,
                    off + 20 * 1000 < g_bytes_get_size (slow));
      spin (100);
    }
  wait_for (&sink.frames->len, 1);
  g_test_message ("400 kB in 20 kB pieces took %.2f s", (g_get_monotonic_time () - t0) / 1e6);
  g_assert_cmpint (g_get_monotonic_time () - t0, >, 1500 * 1000);
  g_assert_true (g_bytes_equal (sink.frames->pdata[0], slow));
  g_assert_cmpuint (sink.closed, ==, 0);
  close (raw);
  wait_for (&sink.closed, 1);
  sink_clear (&sink);
  g_object_unref (link);
}

/* The deadline's rules on their own (rlx-frame-clock.h), with a 2 s grace
 * (128 KiB in hand at 64 KiB/s): time while the link does not read costs
 * nothing, a tick late by a stall counts as two ticks, what is in hand
 * never passes a grace's worth, a new frame starts afresh, and a frame
 * that comes at the rate lives. */
static void
test_frame_clock_rules (void)
{
  const gint64 tick = RLX_FRAME_CLOCK_TICK_MS * 1000;
  RlxFrameClock c;
  gint64 t = 1000 * G_USEC_PER_SEC;
  gsize bytes = 0;

  rlx_frame_clock_init (&c, 2 * G_USEC_PER_SEC);
  g_assert_true (rlx_frame_clock_tick (&c, t, TRUE, 1, 0, TRUE));   /* starts */
  /* 10 s of not reading (the inbox full): nothing spent */
  for (guint i = 0; i < 20; i++)
    g_assert_true (rlx_frame_clock_tick (&c, t += tick, TRUE, 1, 0, FALSE));
  /* a 60 s stall of our own: one late tick, two ticks' worth */
  g_assert_true (rlx_frame_clock_tick (&c, t += 60 * G_USEC_PER_SEC, TRUE, 1, 0, TRUE));
  g_assert_cmpint (c.age_us, ==, 2 * tick);
  /* a MiB at once earns no more than a grace's worth: 2 s from the tick
   * that saw it, then (a byte is not the rate) the link goes */
  bytes = 1 << 20;
  g_assert_true (rlx_frame_clock_tick (&c, t += tick, TRUE, 1, bytes, TRUE));
  g_assert_true (rlx_frame_clock_tick (&c, t += tick, TRUE, 1, bytes, TRUE));
  g_assert_true (rlx_frame_clock_tick (&c, t += tick, TRUE, 1, bytes, TRUE));
  g_assert_true (rlx_frame_clock_tick (&c, t += tick, TRUE, 1, bytes, TRUE));
  g_assert_false (rlx_frame_clock_tick (&c, t += tick, TRUE, 1, bytes + 1, TRUE));
  /* another frame: a fresh grace; at the rate it lives */
  g_assert_true (rlx_frame_clock_tick (&c, t += tick, TRUE, 2, 0, TRUE));
  for (guint i = 0; i < 100; i++)
    {
      bytes = (i + 1) * (RLX_FRAME_CLOCK_MIN_RATE / 2);
      g_assert_true (rlx_frame_clock_tick (&c, t += tick, TRUE, 2, bytes, TRUE));
    }
  /* none in progress, then one: timed from then */
  g_assert_true (rlx_frame_clock_tick (&c, t += 10 * G_USEC_PER_SEC, FALSE, 2, 0, TRUE));
  g_assert_true (rlx_frame_clock_tick (&c, t += tick, TRUE, 3, 0, TRUE));
  g_assert_cmpint (c.age_us, ==, 0);
}

/* ── I/O off the main loop ────────────────────────────────────────────── */

typedef struct {
  GPtrArray *frames;
} RawSink;

static gboolean
raw_sink_frame (gpointer user_data, RlxLinkLane lane, GBytes *frame)
{
  RawSink *rs = user_data;

  g_ptr_array_add (rs->frames, g_bytes_ref (frame));
  return TRUE;
}

static gboolean
raw_sink_shm (gpointer user_data, gsize size)
{
  g_assert_not_reached ();
  return FALSE;
}

static const RlxLinkStreamSink raw_stream_sink = { raw_sink_frame, raw_sink_shm };

static void
wait_fd (int fd, short events)
{
  struct pollfd p = { .fd = fd, .events = events };
  int r;

  do
    r = poll (&p, 1, 10000);
  while (r < 0 && errno == EINTR);
  g_assert_cmpint (r, ==, 1);   /* 0: nothing moved for 10 s */
}

/* The link moves a 32 MB frame each way — far more than the socket buffers
 * hold — while this thread never runs the main context: the socket I/O is
 * the I/O thread's, and the main loop only hands the frame over and gets
 * the other one back whole. (With I/O on the main loop this waits for
 * ever: nobody would write the rest or read.) */
static void
test_io_without_main_loop (void)
{
  int raw;
  g_autoptr(RlxLink) link = link_with_raw_peer (0, &raw);
  g_autoptr(GBytes) out = pattern_frame (32u << 20, 7);
  g_autoptr(GBytes) in = pattern_frame (32u << 20, 8);
  g_autofree guint8 *buf = g_malloc (1 << 20);
  RawSink rs = { g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref) };
  RlxLinkStreamReader reader;
  const guint8 *p;
  guint8 hdr[4];
  gsize left;
  Sink sink;

  rlx_unix_link_set_shm_min (RLX_UNIX_LINK (link), 0);

  rlx_unix_link_set_ring_min (RLX_UNIX_LINK (link), 0);
  sink_init (&sink, link);
  g_assert_cmpint (fcntl (raw, F_SETFL, fcntl (raw, F_GETFL) | O_NONBLOCK), ==, 0);

  /* out: the raw end reads it all, parsed by the link's own stream reader */
  g_assert_true (rlx_link_send (link, out, NULL));
  rlx_link_stream_reader_init (&reader, 64u << 20, "raw end");
  while (rs.frames->len == 0)
    {
      gssize n = read (raw, buf, 1 << 20);

      if (n < 0 && (errno == EAGAIN || errno == EINTR))
        {
          wait_fd (raw, POLLIN);
          continue;
        }
      g_assert_cmpint (n, >, 0);
      g_assert_true (rlx_link_stream_reader_feed (&reader, buf, n, &raw_stream_sink, &rs, NULL));
    }
  g_assert_true (g_bytes_equal (rs.frames->pdata[0], out));
  rlx_link_stream_reader_clear (&reader);
  rlx_link_stream_reader_free_name (&reader);

  /* in: one record of 32 MB, written as fast as the link reads it */
  rlx_link_stream_put_word (hdr, RLX_LINK_LANE_BULK, 32u << 20, FALSE, FALSE);
  write_all (raw, hdr, 4);   /* 4 bytes always fit into an empty socket */
  p = g_bytes_get_data (in, &left);
  while (left > 0)
    {
      gssize n = write (raw, p, left);

      if (n < 0 && (errno == EAGAIN || errno == EINTR))
        {
          wait_fd (raw, POLLOUT);
          continue;
        }
      g_assert_cmpint (n, >, 0);
      p += n;
      left -= n;
    }
  /* now the main loop: the frame is there, whole */
  g_assert_cmpuint (sink.frames->len, ==, 0);
  wait_for (&sink.frames->len, 1);
  g_assert_true (g_bytes_equal (sink.frames->pdata[0], in));
  g_assert_cmpuint (sink.closed, ==, 0);

  close (raw);
  wait_for (&sink.closed, 1);
  g_ptr_array_unref (rs.frames);
  sink_clear (&sink);
}

/* A peer that sends faster than the main loop takes frames fills the
 * socket, not this process: the link stops reading once
 * RLX_LINK_MAILBOX_INBOX_BYTES wait for the main context, and goes on when
 * they are taken. The main context does not run while the peer writes. */
static void
test_inbox_bounded (void)
{
  const gsize frame_len = 8u << 20;
  /* the inbox, a frame being parsed, one more that completed in the same
   * read, and generous socket buffers */
  const guint64 bound = RLX_LINK_MAILBOX_INBOX_BYTES + 2 * frame_len + (16u << 20);
  int raw;
  g_autoptr(RlxLink) link = link_with_raw_peer (0, &raw);
  g_autofree guint8 *body = g_malloc (frame_len);
  guint64 written = 0;
  guint frames_done;
  Sink sink;

  sink_init (&sink, link);
  memset (body, 0x5a, frame_len);
  g_assert_cmpint (fcntl (raw, F_SETFL, fcntl (raw, F_GETFL) | O_NONBLOCK), ==, 0);

  /* Write frames until the link stops taking bytes for 500 ms (or until far
   * more than the bound went in: a link that never stops). */
  while (written < 4 * bound)
    {
      guint8 hdr[4];
      gsize off = 0;
      gboolean stalled = FALSE;

      rlx_link_stream_put_word (hdr, RLX_LINK_LANE_BULK, frame_len, FALSE, FALSE);
      while (off < 4 + frame_len)
        {
          const guint8 *p = off < 4 ? hdr + off : body + (off - 4);
          gsize len = off < 4 ? 4 - off : frame_len - (off - 4);
          gssize n = write (raw, p, len);

          if (n < 0 && errno == EAGAIN)
            {
              struct pollfd pfd = { .fd = raw, .events = POLLOUT };

              if (poll (&pfd, 1, 500) == 0)
                {
                  stalled = TRUE;
                  break;
                }
              continue;
            }
          if (n < 0 && errno == EINTR)
            continue;
          g_assert_cmpint (n, >, 0);
          off += n;
          written += n;
        }
      if (stalled)
        break;
    }
  g_test_message ("the peer got %" G_GUINT64_FORMAT " MiB in before the link stopped reading",
                  written >> 20);
  g_assert_cmpuint (written, <=, bound);
  g_assert_cmpuint (sink.frames->len, ==, 0);   /* the main loop did not run */

  /* Now it runs: the frames come, the link reads again, and the rest of a
   * frame cut off above follows once written. */
  frames_done = written / (4 + frame_len);
  wait_for (&sink.frames->len, frames_done);
  {
    gsize off = written % (4 + frame_len);

    g_assert_cmpint (fcntl (raw, F_SETFL, fcntl (raw, F_GETFL) & ~O_NONBLOCK), ==, 0);
    if (off > 0)
      {
        if (off < 4)
          {
            guint8 hdr[4];

            rlx_link_stream_put_word (hdr, RLX_LINK_LANE_BULK, frame_len, FALSE, FALSE);
            write_all (raw, hdr + off, 4 - off);
            off = 4;
          }
        write_all (raw, body + (off - 4), frame_len - (off - 4));
        frames_done++;
      }
    write_record (raw, RLX_LINK_LANE_BULK, "last", 4, FALSE);
  }
  wait_for (&sink.frames->len, frames_done + 1);
  for (guint i = 0; i < frames_done; i++)
    g_assert_cmpuint (g_bytes_get_size (sink.frames->pdata[i]), ==, frame_len);
  g_assert_cmpmem (g_bytes_get_data (sink.frames->pdata[frames_done], NULL), 4, "last", 4);
  g_assert_cmpuint (sink.closed, ==, 0);
  close (raw);
  sink_clear (&sink);
}

/* Write @len bytes of @buf from the raw end in one sendmsg, passing @fd
 * (when ≥ 0) on its first byte. */
static void
send_with_fd (int raw, const void *buf, gsize len, int fd)
{
  struct iovec iov = { (void *) buf, len };
  union { struct cmsghdr align; char buf[CMSG_SPACE (sizeof (int))]; } control;
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

  if (fd >= 0)
    {
      struct cmsghdr *c;

      msg.msg_control = control.buf;
      msg.msg_controllen = sizeof control.buf;
      c = CMSG_FIRSTHDR (&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN (sizeof (int));
      memcpy (CMSG_DATA (c), &fd, sizeof (int));
    }
  g_assert_cmpint (sendmsg (raw, &msg, MSG_NOSIGNAL), ==, (gssize) len);
}

/* Send an SHM record for @size bytes with @fd (or none) from the raw end. */
static void
send_shm_record (int raw, gsize size, int fd, RlxLinkLane lane, gboolean more)
{
  guint8 hdr[4];

  rlx_link_stream_put_word (hdr, lane, size, more, TRUE);
  send_with_fd (raw, hdr, 4, fd);
}

static int
memfd_with (gsize size, guint seals)
{
  int fd = memfd_create ("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  g_autofree guint8 *data = g_malloc0 (size + 1);

  g_assert_cmpint (fd, >=, 0);
  for (gsize i = 0; i < size; i++)
    data[i] = (guint8) i;
  write_all (fd, data, size);
  if (seals)
    g_assert_cmpint (fcntl (fd, F_ADD_SEALS, seals), ==, 0);
  return fd;
}

/* A well-formed memfd frame from a raw peer is mapped and delivered. */
static void
test_shm_good (void)
{
  int raw;
  g_autoptr(RlxLink) link = link_with_raw_peer (0, &raw);
  int fd = memfd_with (5000, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
  Sink sink;

  sink_init (&sink, link);
  send_shm_record (raw, 5000, fd, RLX_LINK_LANE_BULK, FALSE);
  close (fd);
  write_record (raw, RLX_LINK_LANE_BULK, "after", 5, FALSE);
  wait_for (&sink.frames->len, 2);
  g_assert_cmpuint (g_bytes_get_size (sink.frames->pdata[0]), ==, 5000);
  g_assert_cmpuint (((const guint8 *) g_bytes_get_data (sink.frames->pdata[0], NULL))[4999], ==,
                    (guint8) 4999);
  g_assert_cmpmem (g_bytes_get_data (sink.frames->pdata[1], NULL), 5, "after", 5);
  g_assert_cmpuint (sink.closed, ==, 0);
  close (raw);
  sink_clear (&sink);
}

/* Hostile memfd frames: each closes the link with a message, never a crash
 * or a mapping that could fault later. */
static void
test_shm_hostile (void)
{
  enum { NO_FD, PIPE_FD, UNSEALED, WRITABLE, WRONG_SIZE, ON_CONTROL, WITH_MORE, FD_FLOOD, N_CASES };
  const char *want[N_CASES] = {
    "without its file descriptor", "not a memfd", "not sealed", "not sealed",
    "announced a shared-memory frame of 6000", "on the control lane",
    "shared-ring record of 100 bytes (not 24)",
    "more file descriptors",
  };

  for (guint c = 0; c < N_CASES; c++)
    {
      int raw;
      g_autoptr(RlxLink) link = link_with_raw_peer (0, &raw);
      Sink sink;
      int fd = -1, pipefd[2] = { -1, -1 };

      sink_init (&sink, link);
      switch (c)
        {
        case NO_FD:
          send_shm_record (raw, 100, -1, RLX_LINK_LANE_BULK, FALSE);
          break;
        case PIPE_FD:
          g_assert_cmpint (pipe (pipefd), ==, 0);
          send_shm_record (raw, 100, pipefd[0], RLX_LINK_LANE_BULK, FALSE);
          break;
        case UNSEALED:
          fd = memfd_with (100, 0);
          send_shm_record (raw, 100, fd, RLX_LINK_LANE_BULK, FALSE);
          break;
        case WRITABLE:
          fd = memfd_with (100, F_SEAL_SHRINK | F_SEAL_GROW);
          send_shm_record (raw, 100, fd, RLX_LINK_LANE_BULK, FALSE);
          break;
        case WRONG_SIZE:
          fd = memfd_with (100, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
          send_shm_record (raw, 6000, fd, RLX_LINK_LANE_BULK, FALSE);
          break;
        case ON_CONTROL:
          fd = memfd_with (100, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
          send_shm_record (raw, 100, fd, RLX_LINK_LANE_CONTROL, FALSE);
          break;
        case WITH_MORE:
          fd = memfd_with (100, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
          send_shm_record (raw, 100, fd, RLX_LINK_LANE_BULK, TRUE);
          break;
        case FD_FLOOD:
          /* fds on ordinary control records: more than any SHM record needs */
          fd = memfd_with (100, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
          for (guint i = 0; i < 20; i++)
            {
              guint8 hdr[4];
              struct iovec iov = { hdr, 4 };
              union { struct cmsghdr align; char buf[CMSG_SPACE (sizeof (int))]; } control;
              struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
                                    .msg_control = control.buf,
                                    .msg_controllen = sizeof control.buf };
              struct cmsghdr *cm = CMSG_FIRSTHDR (&msg);

              rlx_link_stream_put_word (hdr, RLX_LINK_LANE_CONTROL, 0, FALSE, FALSE);
              cm->cmsg_level = SOL_SOCKET;
              cm->cmsg_type = SCM_RIGHTS;
              cm->cmsg_len = CMSG_LEN (sizeof (int));
              memcpy (CMSG_DATA (cm), &fd, sizeof (int));
              if (sendmsg (raw, &msg, MSG_NOSIGNAL) != 4)
                break;   /* the link may already have closed */
            }
          break;
        }
      wait_for (&sink.closed, 1);
      if (strstr (sink.close_error->message, want[c]) == NULL)
        g_error ("case %u: \"%s\" lacks \"%s\"", c, sink.close_error->message, want[c]);
      g_assert_true (g_error_matches (sink.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL));
      if (fd >= 0)
        close (fd);
      if (pipefd[0] >= 0)
        {
          close (pipefd[0]);
          close (pipefd[1]);
        }
      close (raw);
      sink_clear (&sink);
    }
}

/* ── the shared ring ──────────────────────────────────────────────────── */

static GBytes *
frame_at (Sink *sink, guint i)
{
  return sink->frames->pdata[i];
}

/* Wait until @link has read @rx bytes in all. */
static void
wait_for_read (RlxLink *link, guint64 rx)
{
  gboolean expired = FALSE;
  guint id = g_timeout_add (10000, on_timeout, &expired);

  while (rlx_link_get_bytes_rx (link) < rx && !expired)
    g_main_context_iteration (NULL, TRUE);
  g_assert_false (expired);
  g_source_remove (id);
}

#define RING_REC (4 + RLX_LINK_STREAM_RING_OP_LEN)

/* Frames of every size through a ring, in order with the socket's, and
 * counted as frames: bytes-tx has each ring frame's length plus its record,
 * and the ring's ATTACH record. */
static void
test_ring_order (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) sent = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  gsize sizes[] = { 1, 0, 17, 4 << 20, 3, 65536, 65535, 200000, 4, (4 << 20) + 5, 9 };
  guint64 payload = RING_REC;   /* the ATTACH */
  guint ring_sent, ring_rx, fallbacks, want_ring = 0;
  Sink sa, sb;

  g_assert_true (rlx_unix_link_new_pair (0, &a, &b, &error));
  rlx_unix_link_set_ring_min (RLX_UNIX_LINK (a), 65536);
  rlx_unix_link_set_ring_min (RLX_UNIX_LINK (b), 0);
  g_assert_cmpuint (rlx_unix_link_get_ring_min (RLX_UNIX_LINK (a)), ==, 65536);
  sink_init (&sa, a);
  sink_init (&sb, b);
  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      GBytes *f = pattern_frame (sizes[i], i);

      g_assert_true (rlx_link_send (a, f, &error));
      g_ptr_array_add (sent, f);
      if (sizes[i] >= 65536)
        {
          payload += sizes[i] + RING_REC;
          want_ring++;
        }
      else
        payload += stream_bytes (sizes[i], 0);
    }
  wait_for (&sb.frames->len, sent->len);
  for (guint i = 0; i < sent->len; i++)
    g_assert_true (g_bytes_equal (sent->pdata[i], frame_at (&sb, i)));
  rlx_unix_link_get_ring_stats (RLX_UNIX_LINK (a), &ring_sent, NULL, &fallbacks);
  rlx_unix_link_get_ring_stats (RLX_UNIX_LINK (b), NULL, &ring_rx, NULL);
  g_assert_cmpuint (ring_sent, ==, want_ring);
  g_assert_cmpuint (ring_rx, ==, want_ring);
  g_assert_cmpuint (fallbacks, ==, 0);
  wait_for_written (a, payload);
  g_assert_cmpuint (rlx_link_get_bytes_tx (a), ==, payload);
  wait_for_read (b, payload);
  g_assert_cmpuint (rlx_link_get_bytes_rx (b), ==, payload);
  g_assert_cmpuint (sa.closed + sb.closed, ==, 0);
  rlx_link_close (a);
  rlx_link_close (b);
  sink_clear (&sa);
  sink_clear (&sb);
}

/* A ring holds what the receiver holds: once it is full the next frames go
 * through the socket (intact, in order); frames freed on the receiver are
 * released to the sender, whose ring takes frames again. A frame received in
 * a ring outlives both links. */
static void
test_ring_full_and_release (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) sent = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  g_autoptr(GBytes) kept = NULL;
  guint ring_sent, fallbacks;
  Sink sb;

  g_assert_true (rlx_unix_link_new_pair (0, &a, &b, &error));
  rlx_unix_link_set_ring_min (RLX_UNIX_LINK (a), 65536);
  sink_init (&sb, b);
  /* 1 MiB frames: a ring of 4 MiB, so four fit while the receiver holds them */
  for (guint i = 0; i < 6; i++)
    {
      GBytes *f = pattern_frame (1 << 20, i);

      g_assert_true (rlx_link_send (a, f, NULL));
      g_ptr_array_add (sent, f);
    }
  wait_for (&sb.frames->len, 6);
  for (guint i = 0; i < 6; i++)
    g_assert_true (g_bytes_equal (sent->pdata[i], frame_at (&sb, i)));
  rlx_unix_link_get_ring_stats (RLX_UNIX_LINK (a), &ring_sent, NULL, &fallbacks);
  g_assert_cmpuint (ring_sent, ==, 4);
  g_assert_cmpuint (fallbacks, ==, 2);

  /* Free all but the first: three RELEASE records go back. The ring is
   * first-in first-out and the first is its oldest block, so there is still
   * no room (the fourth ends at the ring's end, and wrapping around needs
   * the first's bytes): the next frame goes through the socket. */
  kept = g_bytes_ref (frame_at (&sb, 0));
  g_ptr_array_set_size (sb.frames, 0);
  wait_for_written (b, 3 * RING_REC);
  wait_for_read (a, 3 * RING_REC);
  g_assert_true (rlx_link_send (a, sent->pdata[5], NULL));
  wait_for (&sb.frames->len, 1);
  rlx_unix_link_get_ring_stats (RLX_UNIX_LINK (a), &ring_sent, NULL, &fallbacks);
  g_assert_cmpuint (ring_sent, ==, 4);
  g_assert_cmpuint (fallbacks, ==, 3);

  /* the oldest freed too: the ring takes four again */
  g_clear_pointer (&kept, g_bytes_unref);
  g_ptr_array_set_size (sb.frames, 0);
  wait_for_written (b, 4 * RING_REC);
  wait_for_read (a, 4 * RING_REC);
  for (guint i = 0; i < 4; i++)
    g_assert_true (rlx_link_send (a, sent->pdata[i], NULL));
  wait_for (&sb.frames->len, 4);
  for (guint i = 0; i < 4; i++)
    g_assert_true (g_bytes_equal (sent->pdata[i], frame_at (&sb, i)));
  rlx_unix_link_get_ring_stats (RLX_UNIX_LINK (a), &ring_sent, NULL, &fallbacks);
  g_assert_cmpuint (ring_sent, ==, 8);
  g_assert_cmpuint (fallbacks, ==, 3);

  /* a frame held past the end of both links keeps its bytes */
  kept = g_bytes_ref (frame_at (&sb, 3));
  rlx_link_close (a);
  rlx_link_close (b);
  sink_clear (&sb);
  g_clear_object (&a);
  g_clear_object (&b);
  spin (20);
  g_assert_true (g_bytes_equal (sent->pdata[3], kept));
}

/* Larger frames than the ring was made for: a larger ring replaces it (the
 * old one is retired, and still backs the frame the receiver holds from
 * it), and the released frame of the retired ring is accepted. */
static void
test_ring_grows (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GBytes) small = pattern_frame (1 << 20, 1);
  g_autoptr(GBytes) big = pattern_frame (3 << 20, 2);
  g_autoptr(GBytes) held = NULL;
  guint ring_sent, fallbacks;
  Sink sa, sb;

  g_assert_true (rlx_unix_link_new_pair (0, &a, &b, NULL));
  rlx_unix_link_set_ring_min (RLX_UNIX_LINK (a), 65536);
  sink_init (&sa, a);
  sink_init (&sb, b);
  g_assert_true (rlx_link_send (a, small, NULL));
  wait_for (&sb.frames->len, 1);
  held = g_bytes_ref (frame_at (&sb, 0));
  g_assert_true (rlx_link_send (a, big, NULL));
  g_assert_true (rlx_link_send (a, big, NULL));
  wait_for (&sb.frames->len, 3);
  g_assert_true (g_bytes_equal (big, frame_at (&sb, 1)));
  g_assert_true (g_bytes_equal (big, frame_at (&sb, 2)));
  /* the retired ring's frame is intact after its DETACH */
  g_assert_true (g_bytes_equal (small, held));
  rlx_unix_link_get_ring_stats (RLX_UNIX_LINK (a), &ring_sent, NULL, &fallbacks);
  g_assert_cmpuint (ring_sent, ==, 3);
  g_assert_cmpuint (fallbacks, ==, 0);
  /* its release reaches the sender, which frees the old ring: no error */
  g_clear_pointer (&held, g_bytes_unref);
  g_ptr_array_set_size (sb.frames, 0);
  wait_for_written (b, 3 * RING_REC);
  wait_for_read (a, 3 * RING_REC);
  g_assert_true (rlx_link_send (a, big, NULL));
  wait_for (&sb.frames->len, 1);
  g_assert_true (g_bytes_equal (big, frame_at (&sb, 0)));
  g_assert_cmpuint (sa.closed + sb.closed, ==, 0);
  rlx_link_close (a);
  rlx_link_close (b);
  sink_clear (&sa);
  sink_clear (&sb);
}

/* Copies in pieces cover every byte, whatever the size's remainder, and
 * nothing past it; several threads may copy at once. */
static gpointer
par_copy_thread (gpointer data)
{
  gsize n = GPOINTER_TO_SIZE (data);
  g_autofree guint8 *src = g_malloc (n);
  g_autofree guint8 *dst = g_malloc (n + 64);

  for (gsize i = 0; i < n; i++)
    src[i] = (guint8) (i * 131 + (i >> 9));
  for (guint r = 0; r < 20; r++)
    {
      memset (dst, 0xa5, n + 64);
      rlx_par_copy_from (dst, src, n, 1);
      g_assert_true (memcmp (dst, src, n) == 0);
      for (guint i = 0; i < 64; i++)
        g_assert_cmpuint (dst[n + i], ==, 0xa5);
    }
  return NULL;
}

static void
test_par_copy (void)
{
  gsize sizes[] = { 0, 1, 127, 128, 129, 4095, (4 << 20) + 5, (8 << 20) - 3 };
  GThread *threads[G_N_ELEMENTS (sizes)];

  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    threads[i] = g_thread_new ("par-copy", par_copy_thread, GSIZE_TO_POINTER (sizes[i]));
  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    g_thread_join (threads[i]);
  g_assert_cmpuint (rlx_par_copy_min_bytes (), >, 0);
}

/* Send ring operation @op from the raw end, with @fd (or none); @word_lane
 * ≥ 0 overrides its lane, @len ≠ 24 its announced length. */
static void
send_ring_op (int raw, RlxLinkRingKind kind, guint32 ring, guint64 a, guint64 b, int fd,
              int word_lane, gsize len)
{
  RlxLinkRingOp op = { kind, ring, a, b };
  guint8 rec[RING_REC];

  rlx_link_stream_put_ring_op (rec, &op);
  if (word_lane >= 0 || len != RLX_LINK_STREAM_RING_OP_LEN)
    rlx_link_stream_put_word (rec, word_lane >= 0 ? (RlxLinkLane) word_lane :
                              (kind == RLX_LINK_RING_FRAME ? RLX_LINK_LANE_BULK :
                               RLX_LINK_LANE_CONTROL), len, TRUE, TRUE);
  send_with_fd (raw, rec, MIN ((gsize) RING_REC, 4 + len), fd);
}

typedef struct {
  GArray *ops;   /* RlxLinkRingOp */
} RawRingSink;

static gboolean
raw_ring_frame (gpointer user_data, RlxLinkLane lane, GBytes *frame)
{
  return TRUE;
}

static gboolean
raw_ring_op (gpointer user_data, const RlxLinkRingOp *op)
{
  RawRingSink *rs = user_data;

  g_array_append_val (rs->ops, *op);
  return TRUE;
}

static const RlxLinkStreamSink raw_ring_sink = { raw_ring_frame, raw_sink_shm, raw_ring_op };

/* A raw peer's ring: its frame is delivered from the mapping, and freeing it
 * sends RELEASE with that ring and offset back. */
static void
test_ring_from_raw_peer (void)
{
  int raw;
  g_autoptr(RlxLink) link = link_with_raw_peer (0, &raw);
  int fd = memfd_with (65536, F_SEAL_SHRINK | F_SEAL_GROW);
  RawRingSink rs = { g_array_new (FALSE, FALSE, sizeof (RlxLinkRingOp)) };
  RlxLinkStreamReader reader;
  guint8 buf[256];
  Sink sink;

  sink_init (&sink, link);
  send_ring_op (raw, RLX_LINK_RING_ATTACH, 5, 65536, 0, fd, -1, RLX_LINK_STREAM_RING_OP_LEN);
  close (fd);
  send_ring_op (raw, RLX_LINK_RING_FRAME, 5, 1000, 3000, -1, -1, RLX_LINK_STREAM_RING_OP_LEN);
  wait_for (&sink.frames->len, 1);
  g_assert_cmpuint (g_bytes_get_size (frame_at (&sink, 0)), ==, 3000);
  g_assert_cmpuint (((const guint8 *) g_bytes_get_data (frame_at (&sink, 0), NULL))[0], ==,
                    (guint8) 1000);
  g_ptr_array_set_size (sink.frames, 0);
  rlx_link_stream_reader_init (&reader, 1 << 20, "link");
  while (rs.ops->len == 0)
    {
      gssize n;

      wait_fd (raw, POLLIN);
      n = read (raw, buf, sizeof buf);
      g_assert_cmpint (n, >, 0);
      g_assert_true (rlx_link_stream_reader_feed (&reader, buf, n, &raw_ring_sink, &rs, NULL));
    }
  g_assert_cmpint (g_array_index (rs.ops, RlxLinkRingOp, 0).kind, ==, RLX_LINK_RING_RELEASE);
  g_assert_cmpuint (g_array_index (rs.ops, RlxLinkRingOp, 0).ring, ==, 5);
  g_assert_cmpuint (g_array_index (rs.ops, RlxLinkRingOp, 0).a, ==, 1000);
  g_assert_cmpuint (sink.closed, ==, 0);
  rlx_link_stream_reader_clear (&reader);
  rlx_link_stream_reader_free_name (&reader);
  g_array_unref (rs.ops);
  close (raw);
  sink_clear (&sink);
}

/* Hostile ring records: each closes the link with a message that says what
 * was wrong, never a crash or a mapping that could fault later. */
static void
test_ring_hostile (void)
{
  enum { FRAME_UNKNOWN, NO_FD, PIPE_FD, UNSEALED, WRONG_SIZE, TOO_BIG, BEYOND, OVERFLOW,
         RELEASE_UNSENT, DETACH_UNKNOWN, BAD_KIND, WRONG_LANE, RESERVED, BAD_LEN, TWICE,
         TOO_MANY, N_CASES };
  const char *want[N_CASES] = {
    "which it never attached", "without its file descriptor", "not a memfd",
    "not sealed against resizing", "not of the announced size", "outside 1 byte to 256 MiB",
    "beyond the ring's end", "beyond the ring's end", "released a shared-ring frame it was not sent",
    "retired shared ring 3, which it never attached", "of an unknown kind", "on the wrong lane",
    "nonzero reserved", "of 10 bytes (not 24)", "already attached", "beyond the rings",
  };

  for (guint c = 0; c < N_CASES; c++)
    {
      int raw;
      g_autoptr(RlxLink) link = link_with_raw_peer (0, &raw);
      Sink sink;
      int fd = -1, pipefd[2] = { -1, -1 };
      const gsize L = RLX_LINK_STREAM_RING_OP_LEN;

      sink_init (&sink, link);
      if (c == BEYOND || c == OVERFLOW || c == TWICE || c == TOO_MANY)
        {
          for (guint i = 0; i < (c == TOO_MANY ? 5 : 1); i++)
            {
              fd = memfd_with (65536, F_SEAL_SHRINK | F_SEAL_GROW);
              send_ring_op (raw, RLX_LINK_RING_ATTACH, 1 + i, 65536, 0, fd, -1, L);
              close (fd);
            }
          fd = -1;
        }
      switch (c)
        {
        case FRAME_UNKNOWN:
          send_ring_op (raw, RLX_LINK_RING_FRAME, 7, 0, 10, -1, -1, L);
          break;
        case NO_FD:
          send_ring_op (raw, RLX_LINK_RING_ATTACH, 1, 4096, 0, -1, -1, L);
          break;
        case PIPE_FD:
          g_assert_cmpint (pipe (pipefd), ==, 0);
          send_ring_op (raw, RLX_LINK_RING_ATTACH, 1, 4096, 0, pipefd[0], -1, L);
          break;
        case UNSEALED:
          fd = memfd_with (4096, F_SEAL_GROW);
          send_ring_op (raw, RLX_LINK_RING_ATTACH, 1, 4096, 0, fd, -1, L);
          break;
        case WRONG_SIZE:
          fd = memfd_with (4096, F_SEAL_SHRINK | F_SEAL_GROW);
          send_ring_op (raw, RLX_LINK_RING_ATTACH, 1, 8192, 0, fd, -1, L);
          break;
        case TOO_BIG:
          fd = memfd_with (4096, F_SEAL_SHRINK | F_SEAL_GROW);
          send_ring_op (raw, RLX_LINK_RING_ATTACH, 1, (guint64) 1 << 30, 0, fd, -1, L);
          break;
        case BEYOND:
          send_ring_op (raw, RLX_LINK_RING_FRAME, 1, 60000, 10000, -1, -1, L);
          break;
        case OVERFLOW:
          send_ring_op (raw, RLX_LINK_RING_FRAME, 1, G_MAXUINT64 - 5, 10, -1, -1, L);
          break;
        case RELEASE_UNSENT:
          send_ring_op (raw, RLX_LINK_RING_RELEASE, 1, 0, 0, -1, -1, L);
          break;
        case DETACH_UNKNOWN:
          send_ring_op (raw, RLX_LINK_RING_DETACH, 3, 0, 0, -1, -1, L);
          break;
        case BAD_KIND:
          send_ring_op (raw, 9, 1, 0, 0, -1, RLX_LINK_LANE_CONTROL, L);
          break;
        case WRONG_LANE:
          send_ring_op (raw, RLX_LINK_RING_FRAME, 1, 0, 10, -1, RLX_LINK_LANE_CONTROL, L);
          break;
        case RESERVED:
          send_ring_op (raw, RLX_LINK_RING_RELEASE, 1, 0, 1, -1, -1, L);
          break;
        case BAD_LEN:
          send_ring_op (raw, RLX_LINK_RING_RELEASE, 1, 0, 0, -1, -1, 10);
          break;
        case TWICE:
          fd = memfd_with (65536, F_SEAL_SHRINK | F_SEAL_GROW);
          send_ring_op (raw, RLX_LINK_RING_ATTACH, 1, 65536, 0, fd, -1, L);
          break;
        case TOO_MANY:
          break;   /* the fifth ATTACH above */
        }
      wait_for (&sink.closed, 1);
      if (strstr (sink.close_error->message, want[c]) == NULL)
        g_error ("case %u: \"%s\" lacks \"%s\"", c, sink.close_error->message, want[c]);
      g_assert_true (g_error_matches (sink.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL));
      if (fd >= 0)
        close (fd);
      if (pipefd[0] >= 0)
        {
          close (pipefd[0]);
          close (pipefd[1]);
        }
      close (raw);
      sink_clear (&sink);
    }
}

/* Out of file descriptors: a link that cannot get the eventfds it needs is
 * refused with an error that says so, not a crash. (With RLX_LINK_IO=link
 * every link also starts a thread whose GMainContext needs an fd, where
 * GLib would abort: that is refused the same way, before it.) */
static void
test_no_fds (void)
{
  if (g_test_subprocess ())
    {
      g_autoptr(RlxLink) a = NULL;
      g_autoptr(RlxLink) b = NULL;
      g_autoptr(GError) error = NULL;
      struct rlimit lim;
      GArray *held = g_array_new (FALSE, FALSE, sizeof (int));
      int fd;

      /* the shared I/O thread exists before the fds run out */
      g_assert_true (rlx_unix_link_new_pair (0, &a, &b, &error));
      g_clear_object (&a);
      g_clear_object (&b);
      g_assert_cmpint (getrlimit (RLIMIT_NOFILE, &lim), ==, 0);
      lim.rlim_cur = MIN (lim.rlim_cur, 256);
      g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &lim), ==, 0);
      while ((fd = dup (0)) >= 0)
        g_array_append_val (held, fd);
      /* room for the socketpair, none for the eventfds */
      close (g_array_index (held, int, held->len - 1));
      close (g_array_index (held, int, held->len - 2));
      g_assert_false (rlx_unix_link_new_pair (0, &a, &b, &error));
      g_assert_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED);
      g_assert_nonnull (strstr (error->message, "file descriptors"));
      g_printerr ("%s\n", error->message);
      return;
    }
  g_test_trap_subprocess (NULL, 20 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*no eventfd*ulimit -n*");
}

/* A process of another uid connecting is refused. Needs root to switch uid. */
static void
test_peer_uid (void)
{
  g_autofree char *dir = NULL;
  g_autofree char *path = NULL;
  g_autoptr(GSocket) listener = NULL;
  g_autoptr(GSocket) accepted = NULL;
  g_autoptr(GSocketAddress) address = NULL;
  g_autoptr(GSocketConnection) connection = NULL;
  g_autoptr(GError) error = NULL;
  RlxLink *link;
  pid_t pid;
  int status;

  if (getuid () != 0)
    {
      g_test_skip ("needs root to connect from another uid");
      return;
    }

  dir = g_dir_make_tmp ("rlx-uid-XXXXXX", &error);
  g_assert_no_error (error);
  g_assert_cmpint (chmod (dir, 0777), ==, 0);
  path = g_build_filename (dir, "s.sock", NULL);
  listener = g_socket_new (G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_STREAM, 0, &error);
  address = g_unix_socket_address_new (path);
  g_assert_true (g_socket_bind (listener, address, FALSE, &error));
  g_assert_true (g_socket_listen (listener, &error));
  g_assert_cmpint (chmod (path, 0777), ==, 0);

  pid = fork ();
  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    {
      struct sockaddr_un sa = { .sun_family = AF_UNIX };
      int fd;

      if (setgid (65534) != 0 || setuid (65534) != 0)
        _exit (2);
      fd = socket (AF_UNIX, SOCK_STREAM, 0);
      g_strlcpy (sa.sun_path, path, sizeof sa.sun_path);
      if (connect (fd, (struct sockaddr *) &sa, sizeof sa) != 0)
        _exit (3);
      _exit (0);
    }
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);

  accepted = g_socket_accept (listener, NULL, &error);
  g_assert_no_error (error);
  connection = g_socket_connection_factory_create_connection (accepted);
  link = rlx_unix_link_new (connection, "intruder", 0, &error);
  g_assert_null (link);
  g_assert_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PERMISSION);
  g_assert_nonnull (strstr (error->message, "65534"));

  unlink (path);
  rmdir (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/p2p/link/order-and-large", test_order_and_large);
  g_test_add_func ("/p2p/link/order-and-large-shm", test_order_and_large_shm);
  g_test_add_func ("/p2p/link/close-once", test_close_once);
  g_test_add_func ("/p2p/link/flush-on-close", test_flush_on_close);
  g_test_add_func ("/p2p/link/send-too-large", test_send_too_large);
  g_test_add_func ("/p2p/link/receive-too-large", test_receive_too_large);
  g_test_add_func ("/p2p/link/huge-prefix", test_huge_prefix_default_cap);
  g_test_add_func ("/p2p/link/truncated-frame", test_truncated_frame);
  g_test_add_func ("/p2p/link/close-in-handler", test_close_in_handler);
  g_test_add_func ("/p2p/link/announced-size-not-allocated", test_announced_size_not_allocated);
  g_test_add_func ("/p2p/link/chunked-over-cap", test_chunked_over_cap);
  g_test_add_func ("/p2p/link/control-cap-from-peer", test_control_cap_from_peer);
  g_test_add_func ("/p2p/link/control-cap-send", test_control_cap_send);
  g_test_add_func ("/p2p/link/lanes-interleaved-from-peer", test_lanes_interleaved_from_peer);
  g_test_add_func ("/p2p/link/control-overtakes-bulk", test_control_overtakes_bulk);
  g_test_add_func ("/p2p/link/last-rx-partial", test_last_rx_counts_partial_frames);
  g_test_add_func ("/p2p/link/half-sent-frame-deadline", test_half_sent_frame_deadline);
  g_test_add_func ("/p2p/link/frame-clock-rules", test_frame_clock_rules);
  g_test_add_func ("/p2p/link/io-without-main-loop", test_io_without_main_loop);
  g_test_add_func ("/p2p/link/inbox-bounded", test_inbox_bounded);
  g_test_add_func ("/p2p/link/shm-good", test_shm_good);
  g_test_add_func ("/p2p/link/shm-hostile", test_shm_hostile);
  g_test_add_func ("/p2p/link/par-copy", test_par_copy);
  g_test_add_func ("/p2p/link/ring-order", test_ring_order);
  g_test_add_func ("/p2p/link/ring-full-and-release", test_ring_full_and_release);
  g_test_add_func ("/p2p/link/ring-grows", test_ring_grows);
  g_test_add_func ("/p2p/link/ring-from-raw-peer", test_ring_from_raw_peer);
  g_test_add_func ("/p2p/link/ring-hostile", test_ring_hostile);
  g_test_add_func ("/p2p/link/no-fds", test_no_fds);
  g_test_add_func ("/p2p/link/peer-uid", test_peer_uid);

  return g_test_run ();
}
