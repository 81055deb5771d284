/* test-shaped-link.c — the slow-link wrapper: spec parsing, delay, rate,
 * control before bulk, liveness while a bulk frame trickles in, stalls,
 * close after data, order per lane.
 *
 * Timing assertions are made on the wrapper's virtual schedule (when a
 * frame arrived, when the pipe made it visible: exact arithmetic, whatever
 * the load), and in real time only as lower bounds (a frame never arrives
 * before its delay) or as orders (control before bulk) — never as "fast
 * enough", which a loaded 2-core machine could break.
 */
#include "rlx-config.h"
#include "core/p2p/rlx-shaped-link.h"
#include "core/p2p/rlx-unix-link.h"

#include <gio/gio.h>
#include <string.h>

typedef struct {
  GBytes     *frame;
  RlxLinkLane lane;
  gint64      arrived, visible, real;
} Got;

typedef struct {
  GArray *got;        /* Got */
  guint   closed;
  GError *close_error;
  guint   last_rx_notifies;
  gint64  last_rx_before_bulk;   /* last-rx seen while the bulk frame was still coming */
} Sink;

static void
on_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  Sink *sink = user_data;
  Got g = { g_bytes_ref (frame), rlx_link_get_rx_lane (link), 0, 0, g_get_monotonic_time () };

  rlx_shaped_link_get_rx_times (RLX_SHAPED_LINK (link), &g.arrived, &g.visible);
  g_array_append_val (sink->got, g);
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
on_last_rx (GObject *object, GParamSpec *pspec, gpointer user_data)
{
  Sink *sink = user_data;

  sink->last_rx_notifies++;
  if (sink->got->len == 0)
    sink->last_rx_before_bulk = rlx_link_get_last_rx (RLX_LINK (object));
}

static void
got_clear (gpointer data)
{
  g_bytes_unref (((Got *) data)->frame);
}

static void
sink_init (Sink *sink, RlxLink *link)
{
  memset (sink, 0, sizeof *sink);
  sink->got = g_array_new (FALSE, TRUE, sizeof (Got));
  g_array_set_clear_func (sink->got, got_clear);
  g_signal_connect (link, "frame", G_CALLBACK (on_frame), sink);
  g_signal_connect (link, "closed", G_CALLBACK (on_closed), sink);
  g_signal_connect (link, "notify::last-rx", G_CALLBACK (on_last_rx), sink);
}

static void
sink_clear (Sink *sink)
{
  g_array_unref (sink->got);
  g_clear_error (&sink->close_error);
}

static gboolean
on_timeout (gpointer user_data)
{
  *(gboolean *) user_data = TRUE;
  return G_SOURCE_REMOVE;
}

/* Iterate until *@counter reaches @want (30 s at most). */
static void
wait_for (guint *counter, guint want)
{
  gboolean expired = FALSE;
  guint id = g_timeout_add_seconds (30, on_timeout, &expired);

  while (*counter < want && !expired)
    g_main_context_iteration (NULL, TRUE);
  g_assert_false (expired);
  g_source_remove (id);
}

static GBytes *
frame_of (gsize size, guint8 tag)
{
  guint8 *data = g_malloc (size ? size : 1);

  memset (data, tag, size);
  return g_bytes_new_take (data, size);
}

/* A socketpair; @b (the receiving end) wrapped with @spec. */
static void
make_pair (const char *spec, RlxLink **a, RlxLink **b)
{
  RlxLinkShape shape;
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxLink) inner = NULL;

  g_assert_true (rlx_link_shape_parse (spec, &shape, &error));
  g_assert_no_error (error);
  g_assert_true (rlx_unix_link_new_pair (0, a, &inner, &error));
  g_assert_no_error (error);
  *b = rlx_shaped_link_new (inner, &shape);
}

/* ── spec ───────────────────────────────────────────────────────────────── */

static void
test_parse (void)
{
  RlxLinkShape s;
  g_autoptr(GError) error = NULL;
  struct { const char *spec; const char *want_in_error; } bad[] = {
    { "delay", "not key=value" },
    { "delay=25", "delay=\"25\" is not valid" },
    { "delay=-5ms", "delay=\"-5ms\"" },
    { "rate=fast", "rate=\"fast\"" },
    { "rate=50MB", "rate=\"50MB\"" },
    { "chunk=10B", "chunk=\"10B\"" },
    { "stall=3s", "stall=\"3s\"" },
    { "stall=1s+2s/1s", "EVERY longer than LENGTH" },
    { "latency=5ms", "unknown key \"latency\"" },
  };

  g_assert_true (rlx_link_shape_parse ("delay=25ms,rate=50MB/s", &s, &error));
  g_assert_no_error (error);
  g_assert_cmpint (s.delay_us, ==, 25000);
  g_assert_cmpuint (s.rate, ==, 50000000);
  g_assert_cmpuint (s.chunk, ==, 0);
  g_assert_cmpuint (s.n_stalls, ==, 0);

  g_assert_true (rlx_link_shape_parse (" delay=1.5s , rate=2MiB/s,chunk=16KiB,stall=3s+250ms,"
                                       "stall=10s+1s/5s", &s, &error));
  g_assert_cmpint (s.delay_us, ==, 1500000);
  g_assert_cmpuint (s.rate, ==, 2 * 1048576);
  g_assert_cmpuint (s.chunk, ==, 16384);
  g_assert_cmpuint (s.n_stalls, ==, 2);
  g_assert_cmpint (s.stalls[0].at_us, ==, 3000000);
  g_assert_cmpint (s.stalls[0].length_us, ==, 250000);
  g_assert_cmpint (s.stalls[0].every_us, ==, 0);
  g_assert_cmpint (s.stalls[1].every_us, ==, 5000000);

  g_assert_true (rlx_link_shape_parse ("rate=100Mbit/s,delay=800us", &s, &error));
  g_assert_cmpuint (s.rate, ==, 12500000);
  g_assert_cmpint (s.delay_us, ==, 800);
  g_assert_true (rlx_link_shape_parse ("", &s, &error));
  g_assert_true (rlx_link_shape_parse ("rate=0", &s, &error));
  g_assert_cmpuint (s.rate, ==, 0);

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_assert_false (rlx_link_shape_parse (bad[i].spec, &s, &error));
      g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT);
      if (strstr (error->message, bad[i].want_in_error) == NULL)
        g_error ("spec \"%s\": message \"%s\" lacks \"%s\"", bad[i].spec, error->message,
                 bad[i].want_in_error);
      g_clear_error (&error);
    }
}

/* ── timing ─────────────────────────────────────────────────────────────── */

static void
test_delay (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GBytes) f = frame_of (100, 1);
  Sink sink;
  gint64 t0;

  make_pair ("delay=40ms", &a, &b);
  sink_init (&sink, b);
  t0 = g_get_monotonic_time ();
  g_assert_true (rlx_link_send (a, f, NULL));
  wait_for (&sink.got->len, 1);

  Got *g = &g_array_index (sink.got, Got, 0);
  g_assert_true (g_bytes_equal (g->frame, f));
  /* no rate cap: exactly the delay, virtually; never less in real time */
  g_assert_cmpint (g->visible - g->arrived, ==, 40000);
  g_assert_cmpint (g->real - t0, >=, 40000);
  g_assert_cmpint (g->real, >=, g->visible);
  g_assert_cmpint (rlx_link_get_last_rx (b), ==, g->visible);
  g_assert_cmpuint (rlx_link_get_bytes_rx (b), ==, 100);
  sink_clear (&sink);
}

static void
test_rate (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  /* 1 MB at 10 MB/s in 64 KiB pieces: 16 pieces of 6554 µs (rounded up)
   * minus the short last one, plus 5 ms delay */
  g_autoptr(GBytes) f = frame_of (1000000, 2);
  Sink sink;
  gint64 t0, want = 5000;

  for (gsize left = 1000000; left > 0; left -= MIN (left, 65536))
    want += (MIN (left, 65536) * 1000000 + 10000000 - 1) / 10000000;

  make_pair ("delay=5ms,rate=10MB/s", &a, &b);
  sink_init (&sink, b);
  t0 = g_get_monotonic_time ();
  g_assert_true (rlx_link_send (a, f, NULL));
  wait_for (&sink.got->len, 1);

  Got *g = &g_array_index (sink.got, Got, 0);
  g_assert_true (g_bytes_equal (g->frame, f));
  g_assert_cmpint (g->visible - g->arrived, ==, want);
  g_assert_cmpint (g->real - t0, >=, want);
  /* liveness: bytes were seen arriving before the frame was whole */
  g_assert_cmpuint (sink.last_rx_notifies, >=, 2);
  g_assert_cmpint (sink.last_rx_before_bulk, >, 0);
  g_assert_cmpint (sink.last_rx_before_bulk, <, g->visible);
  sink_clear (&sink);
}

/* 16 MB bulk at 50 MB/s (320 ms), then a control frame: the control frame
 * waits for at most the piece in the pipe when it arrived. */
static void
test_control_before_bulk (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GBytes) bulk = frame_of (16u << 20, 3);
  g_autoptr(GBytes) ctrl = frame_of (200, 4);
  Sink sink;
  gint64 piece = (G_GINT64_CONSTANT (65536) * 1000000 + 50000000 - 1) / 50000000;   /* 1311 µs */
  gint64 ctrl_time = (200 * 1000000 + 50000000 - 1) / 50000000;

  make_pair ("delay=25ms,rate=50MB/s", &a, &b);
  sink_init (&sink, b);
  g_assert_true (rlx_link_send_lane (a, RLX_LINK_LANE_BULK, bulk, NULL));
  /* let the bulk frame start through the pipe */
  while (rlx_link_get_last_rx (b) == 0)
    g_main_context_iteration (NULL, TRUE);
  g_assert_true (rlx_link_send_lane (a, RLX_LINK_LANE_CONTROL, ctrl, NULL));
  wait_for (&sink.got->len, 2);

  Got *c = &g_array_index (sink.got, Got, 0);
  Got *k = &g_array_index (sink.got, Got, 1);
  g_assert_cmpuint (c->lane, ==, RLX_LINK_LANE_CONTROL);
  g_assert_true (g_bytes_equal (c->frame, ctrl));
  g_assert_cmpuint (k->lane, ==, RLX_LINK_LANE_BULK);
  g_assert_true (g_bytes_equal (k->frame, bulk));
  /* at most one piece's time behind the bulk frame, plus its own time */
  g_assert_cmpint (c->visible - c->arrived, <=, 25000 + piece + ctrl_time);
  g_assert_cmpint (c->visible - c->arrived, >=, 25000);
  /* and the bulk frame took its full time (16 MiB / 50 MB/s ≈ 336 ms) */
  g_assert_cmpint (k->visible - k->arrived, >=, 25000 + (gint64) (16u << 20) / 50);
  sink_clear (&sink);
}

static void
test_stall (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GBytes) f = frame_of (10, 5);
  g_autoptr(GBytes) late = frame_of (10, 6);
  Sink sink;
  gint64 t_before = g_get_monotonic_time ();
  Got *g;

  /* nothing moves from 0 to 150 ms after the link was made, and again from
   * 300 ms for 100 ms */
  make_pair ("delay=1ms,stall=0s+150ms,stall=300ms+100ms", &a, &b);
  sink_init (&sink, b);
  g_assert_true (rlx_link_send (a, f, NULL));
  wait_for (&sink.got->len, 1);
  g = &g_array_index (sink.got, Got, 0);
  g_assert_true (g_bytes_equal (g->frame, f));
  g_assert_cmpint (g->visible - t_before, >=, 151000);
  g_assert_cmpint (g->real, >=, g->visible);

  /* wait into the second stall, then send: held until it ends */
  {
    gboolean reached = FALSE;
    gint64 wait_ms = MAX (0, (320000 - (g_get_monotonic_time () - t_before)) / 1000);
    guint id = g_timeout_add ((guint) wait_ms, on_timeout, &reached);

    while (!reached)
      g_main_context_iteration (NULL, TRUE);
    (void) id;
  }
  g_assert_true (rlx_link_send (a, late, NULL));
  wait_for (&sink.got->len, 2);
  g = &g_array_index (sink.got, Got, 1);
  g_assert_true (g_bytes_equal (g->frame, late));
  if (g->arrived - t_before < 400000)
    g_assert_cmpint (g->visible - t_before, >=, 401000);
  sink_clear (&sink);
}

/* Frames sent before the peer closed arrive first, then ::closed. */
static void
test_close_after_data (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  Sink sink;

  make_pair ("delay=20ms,rate=20MB/s", &a, &b);
  sink_init (&sink, b);
  for (guint i = 0; i < 5; i++)
    {
      g_autoptr(GBytes) f = frame_of (100000, (guint8) i);
      g_assert_true (rlx_link_send (a, f, NULL));
    }
  rlx_link_close (a);
  wait_for (&sink.closed, 1);
  g_assert_cmpuint (sink.got->len, ==, 5);
  for (guint i = 0; i < 5; i++)
    g_assert_cmpuint (((const guint8 *) g_bytes_get_data (g_array_index (sink.got, Got, i).frame,
                                                           NULL))[0], ==, i);
  g_assert_true (rlx_link_is_closed (b));
  g_assert_error (sink.close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED);
  sink_clear (&sink);
}

/* Many frames on both lanes: each lane keeps its order. */
static void
test_order_per_lane (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  Sink sink;
  guint next[2] = { 0, 0 };
  guint sent[2] = { 0, 0 };

  make_pair ("delay=2ms,rate=200MB/s,chunk=4KiB", &a, &b);
  sink_init (&sink, b);
  for (guint i = 0; i < 200; i++)
    {
      RlxLinkLane lane = (i % 3 == 0) ? RLX_LINK_LANE_BULK : RLX_LINK_LANE_CONTROL;
      gsize size = lane == RLX_LINK_LANE_BULK ? 20000 + i : 8;
      guint8 *d = g_malloc0 (size);
      g_autoptr(GBytes) f = NULL;

      memcpy (d, &sent[lane], sizeof (guint));
      sent[lane]++;
      f = g_bytes_new_take (d, size);
      g_assert_true (rlx_link_send_lane (a, lane, f, NULL));
    }
  wait_for (&sink.got->len, 200);
  for (guint i = 0; i < 200; i++)
    {
      Got *g = &g_array_index (sink.got, Got, i);
      guint seq;

      memcpy (&seq, g_bytes_get_data (g->frame, NULL), sizeof seq);
      g_assert_cmpuint (seq, ==, next[g->lane]);
      next[g->lane]++;
    }
  g_assert_cmpuint (next[0], ==, sent[0]);
  g_assert_cmpuint (next[1], ==, sent[1]);
  sink_clear (&sink);
}

/* Closing the wrapper closes the inner link, once, and the peer sees it. */
static void
test_close_wrapper (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  RlxLink *inner;
  Sink sa, sb;

  make_pair ("delay=5ms", &a, &b);
  inner = rlx_shaped_link_get_inner (RLX_SHAPED_LINK (b));
  sink_init (&sa, a);
  sink_init (&sb, b);
  rlx_link_close (b);
  g_assert_cmpuint (sb.closed, ==, 1);
  g_assert_true (rlx_link_is_closed (inner));
  wait_for (&sa.closed, 1);
  {
    g_autoptr(GBytes) f = frame_of (4, 0);
    g_assert_false (rlx_link_send (b, f, NULL));
  }
  sink_clear (&sa);
  sink_clear (&sb);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/p2p/shaped/parse", test_parse);
  g_test_add_func ("/p2p/shaped/delay", test_delay);
  g_test_add_func ("/p2p/shaped/rate-and-liveness", test_rate);
  g_test_add_func ("/p2p/shaped/control-before-bulk", test_control_before_bulk);
  g_test_add_func ("/p2p/shaped/stall", test_stall);
  g_test_add_func ("/p2p/shaped/close-after-data", test_close_after_data);
  g_test_add_func ("/p2p/shaped/order-per-lane", test_order_per_lane);
  g_test_add_func ("/p2p/shaped/close-wrapper", test_close_wrapper);

  return g_test_run ();
}
