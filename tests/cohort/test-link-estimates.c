/* test-link-estimates.c — what `--sync auto` measures of each link
 * (core/cohort/rlx-link-estimates.h): throughput from frames' progress (the
 * sender's idle time left out), the round trip's sources, the window, the
 * drift that makes `auto` choose again, the choice it feeds; and over a real
 * Unix link shaped as a slow network (RLX_LINK_SHAPE's wrapper), the rate it
 * measures against the rate the wrapper imposes. */
#include "rlx-config.h"

#include <math.h>
#include <string.h>

#include "core/cohort/rlx-link-estimates.h"
#include "core/p2p/rlx-shaped-link.h"
#include "core/p2p/rlx-unix-link.h"

#define PIECE ((gsize) 64 * 1024)

/* Feed one frame of @n pieces at @rate bytes/s starting at *@t (µs) with the
 * counter at *@b; both advance. */
static void
feed_frame (RlxLinkEstimates *e, const char *id, guint n, double rate, gint64 *t, guint64 *b)
{
  gint64 step = (gint64) llround ((double) PIECE / rate * 1e6);

  for (guint i = 0; i < n; i++)
    {
      *b += PIECE;
      if (i + 1 < n)
        rlx_link_estimates_rx (e, id, *b, *t);
      else
        rlx_link_estimates_frame (e, id, (gsize) n * PIECE, *b, *t);
      if (i + 1 < n)
        *t += step;
    }
}

static void
test_rate_leaves_idle_out (void)
{
  g_autoptr(RlxLinkEstimates) e = rlx_link_estimates_new ();
  const RlxLinkEstimate *l;
  gint64 t = 1000000;
  guint64 b = 0;

  g_assert_true (rlx_link_estimates_add (e, "b", FALSE));
  /* a heartbeat's bytes, then a second of nothing, then a 1 MiB frame at 25 MB/s */
  rlx_link_estimates_rx (e, "b", 60, t);
  b = 60;
  t += 1000000;
  feed_frame (e, "b", 16, 25e6, &t, &b);
  l = rlx_link_estimates_get (e, "b");
  g_assert_nonnull (l);
  g_assert_cmpuint (l->rate_samples, ==, 1);
  /* the idle second would give under 1 MB/s */
  g_assert_cmpfloat_with_epsilon (l->bytes_per_s, 25e6, 25e6 * 0.01);
  g_assert_cmpfloat (l->measured_bytes_per_s, ==, l->bytes_per_s);

  /* a control frame in between, and a frame that came in one piece: no sample */
  t += 500000;
  b += 200;
  rlx_link_estimates_frame (e, "b", 200, b, t);
  t += 500000;
  b += PIECE * 4;
  rlx_link_estimates_frame (e, "b", PIECE * 4, b, t);
  g_assert_cmpuint (l->rate_samples, ==, 1);
  /* nor one whose pieces came too close together to time */
  t += 500000;
  {
    gint64 t0 = t;

    feed_frame (e, "b", 2, (double) PIECE / (RLX_LINK_ESTIMATES_MIN_SPAN_US / 2) * 1e6, &t, &b);
    g_assert_cmpint (t - t0, <, RLX_LINK_ESTIMATES_MIN_SPAN_US);
  }
  g_assert_cmpuint (l->rate_samples, ==, 1);
  /* unknown ids are ignored */
  rlx_link_estimates_frame (e, "nobody", PIECE * 4, b, t);
  g_assert_null (rlx_link_estimates_get (e, "nobody"));
}

static void
test_rate_window_and_ring (void)
{
  g_autoptr(RlxLinkEstimates) e = rlx_link_estimates_new ();
  const RlxLinkEstimate *l;
  gint64 t = 0;
  guint64 b = 0;

  rlx_link_estimates_add (e, "b", FALSE);
  /* a frame longer than the ring: the part it covers is timed */
  feed_frame (e, "b", RLX_LINK_ESTIMATES_RING * 3, 6.25e6, &t, &b);
  l = rlx_link_estimates_get (e, "b");
  g_assert_cmpuint (l->rate_samples, ==, 1);
  g_assert_cmpfloat_with_epsilon (l->bytes_per_s, 6.25e6, 6.25e6 * 0.01);

  /* one slower frame: the window's bytes over its time, not the last alone */
  t += 300000;
  feed_frame (e, "b", 8, 1.25e6, &t, &b);
  {
    double covered = RLX_LINK_ESTIMATES_RING - 1, later = 7;
    double want = (covered + later) * PIECE /
                  (covered * PIECE / 6.25e6 + later * PIECE / 1.25e6);

    g_assert_cmpfloat_with_epsilon (l->bytes_per_s, want, want * 0.01);
  }

  /* the link slows to a fifth: after a window of frames, only the new rate */
  for (guint i = 2; i < RLX_LINK_ESTIMATES_RATE_WINDOW; i++)
    {
      t += 300000;
      feed_frame (e, "b", 8, 1.25e6, &t, &b);
    }
  g_assert_cmpfloat (l->bytes_per_s, >, 1.25e6 * 1.01);   /* the first still counts */
  t += 300000;
  feed_frame (e, "b", 8, 1.25e6, &t, &b);
  g_assert_cmpuint (l->rate_samples, ==, 1 + RLX_LINK_ESTIMATES_RATE_WINDOW);
  g_assert_cmpfloat_with_epsilon (l->bytes_per_s, 1.25e6, 1.25e6 * 0.01);
}

static void
test_rtt_and_quic (void)
{
  g_autoptr(RlxLinkEstimates) e = rlx_link_estimates_new ();
  const RlxLinkEstimate *l;
  gint64 t = 0;
  guint64 b = 0;

  rlx_link_estimates_add (e, "r", FALSE);
  l = rlx_link_estimates_get (e, "r");
  g_assert_false (rlx_link_estimates_ready (e, 1));
  rlx_link_estimates_rtt (e, "r", 52000, RLX_LINK_RTT_HEARTBEAT);
  g_assert_cmpfloat (l->rtt_ms, ==, 52.0);
  rlx_link_estimates_rtt (e, "r", 50500, RLX_LINK_RTT_QUIC);
  rlx_link_estimates_rtt (e, "r", 70000, RLX_LINK_RTT_HEARTBEAT);   /* QUIC's stays */
  rlx_link_estimates_rtt (e, "r", NAN, RLX_LINK_RTT_QUIC);
  rlx_link_estimates_rtt (e, "r", -3, RLX_LINK_RTT_QUIC);
  g_assert_cmpfloat (l->rtt_ms, ==, 50.5);
  g_assert_cmpint (l->rtt_source, ==, RLX_LINK_RTT_QUIC);
  /* queueing behind bulk data inflates a round trip for a while: the least
   * of the window stands until the window has only the larger ones */
  for (guint i = 0; i + 1 < RLX_LINK_ESTIMATES_RTT_WINDOW; i++)
    rlx_link_estimates_rtt (e, "r", 80000, RLX_LINK_RTT_QUIC);
  g_assert_cmpfloat (l->rtt_ms, ==, 50.5);
  rlx_link_estimates_rtt (e, "r", 80000, RLX_LINK_RTT_QUIC);
  g_assert_cmpfloat (l->rtt_ms, ==, 80.0);
  rlx_link_estimates_rtt (e, "r", 50500, RLX_LINK_RTT_QUIC);
  g_assert_cmpfloat (l->rtt_ms, ==, 50.5);
  g_assert_false (rlx_link_estimates_ready (e, 1));

  /* QUIC's delivery rate alone makes it ready and is the estimate until a
   * frame is timed; then the frames alone are: a delivery-rate sample read
   * as a frame arrives (of what this side sent last, a few control
   * packets) read 52–75 MB/s over a 25 MB/s path, above or below the
   * frames' rate it never counts again */
  rlx_link_estimates_quic_rate (e, "r", 20e6);
  g_assert_true (rlx_link_estimates_ready (e, 1));
  g_assert_cmpfloat (l->bytes_per_s, ==, 20e6);
  g_assert_cmpfloat (l->measured_bytes_per_s, ==, 0.0);
  feed_frame (e, "r", 16, 24e6, &t, &b);
  g_assert_cmpfloat_with_epsilon (l->bytes_per_s, 24e6, 24e6 * 0.01);
  rlx_link_estimates_quic_rate (e, "r", 75e6);
  g_assert_cmpfloat_with_epsilon (l->bytes_per_s, 24e6, 24e6 * 0.01);
  g_assert_cmpfloat (l->quic_bytes_per_s, ==, 75e6);
  rlx_link_estimates_quic_rate (e, "r", 2e6);
  g_assert_cmpfloat_with_epsilon (l->bytes_per_s, 24e6, 24e6 * 0.01);
  g_assert_cmpfloat_with_epsilon (l->measured_bytes_per_s, 24e6, 24e6 * 0.01);

  /* a local link needs nothing measured */
  rlx_link_estimates_add (e, "l", TRUE);
  g_assert_true (rlx_link_estimates_ready (e, 1));
}

static void
test_drift (void)
{
  g_autoptr(RlxLinkEstimates) e = rlx_link_estimates_new ();
  gint64 t = 0;
  guint64 b = 0;

  rlx_link_estimates_add (e, "b", FALSE);
  g_assert_true (rlx_link_estimates_drifted (e, 1.5));     /* a link came */
  rlx_link_estimates_mark (e);
  g_assert_false (rlx_link_estimates_drifted (e, 1.5));
  rlx_link_estimates_rtt (e, "b", 50000, RLX_LINK_RTT_HEARTBEAT);
  g_assert_true (rlx_link_estimates_drifted (e, 1.5));     /* measured first */
  feed_frame (e, "b", 16, 25e6, &t, &b);
  rlx_link_estimates_mark (e);
  g_assert_false (rlx_link_estimates_drifted (e, 1.5));
  rlx_link_estimates_rtt (e, "b", 60000, RLX_LINK_RTT_HEARTBEAT);   /* 1.2×: no */
  g_assert_false (rlx_link_estimates_drifted (e, 1.5));
  rlx_link_estimates_rtt (e, "b", 30000, RLX_LINK_RTT_HEARTBEAT);   /* 1/1.67: yes */
  g_assert_true (rlx_link_estimates_drifted (e, 1.5));
  rlx_link_estimates_mark (e);
  /* the rate halves */
  for (guint i = 0; i < RLX_LINK_ESTIMATES_RATE_WINDOW; i++)
    {
      t += 100000;
      feed_frame (e, "b", 8, 12.5e6, &t, &b);
    }
  g_assert_true (rlx_link_estimates_drifted (e, 1.5));
  rlx_link_estimates_mark (e);
  /* a local member comes and goes: the cohort changed */
  rlx_link_estimates_add (e, "c", TRUE);
  rlx_link_estimates_mark (e);
  rlx_link_estimates_remove (e, "c");
  g_assert_true (rlx_link_estimates_drifted (e, 1.5));
  g_assert_cmpuint (rlx_link_estimates_size (e), ==, 1);
}

/* What it feeds: issue 28's slow-link wrapper (25 ms each way, 25 MB/s) and
 * mnist-mlp-xl at f32 (7.45 MB an array, 141 ms a CPU step) → outer, with the
 * link in the reason; a local member alone → step. */
static void
test_choose (void)
{
  g_autoptr(RlxLinkEstimates) e = rlx_link_estimates_new ();
  RlxSyncChoice c = { 0 };
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;
  gint64 t = 0;
  guint64 b = 0;

  rlx_link_estimates_add (e, "host-b", TRUE);
  g_assert_true (rlx_link_estimates_choose (e, 2, 1863690u * 4u, 141.0, 0, &c, &error));
  g_assert_cmpint (c.mode, ==, RLX_SYNC_STEP);
  g_assert_nonnull (strstr (c.reason, "every link stays on this host"));
  rlx_sync_choice_clear (&c);

  rlx_link_estimates_add (e, "host-b", FALSE);   /* restarted, as remote */
  rlx_link_estimates_rtt (e, "host-b", 51000, RLX_LINK_RTT_HEARTBEAT);
  feed_frame (e, "host-b", 32, 24e6, &t, &b);
  g_assert_true (rlx_link_estimates_choose (e, 2, 1863690u * 4u, 141.0, 0, &c, &error));
  g_assert_no_error (error);
  g_assert_cmpint (c.mode, ==, RLX_SYNC_OUTER);
  g_assert_cmpuint (c.h, >, 1);
  g_assert_cmpuint (c.h, <=, RLX_SYNC_MAX_H);
  if (strstr (c.reason, "link to host-b 24 MB/s, 51 ms") == NULL)
    g_error ("reason \"%s\" does not name the measured link", c.reason);
  rlx_sync_choice_clear (&c);

  text = rlx_link_estimates_describe (e);
  g_assert_cmpstr (text, ==, "host-b 24 MB/s, 51 ms");
  rlx_link_estimates_add (e, "c", TRUE);
  rlx_link_estimates_add (e, "d", FALSE);
  g_clear_pointer (&text, g_free);
  text = rlx_link_estimates_describe (e);
  g_assert_cmpstr (text, ==, "host-b 24 MB/s, 51 ms; c local; d rate not measured yet, "
                             "round trip not measured yet");
  /* one link, as the roster's "link" shows it */
  g_clear_pointer (&text, g_free);
  text = rlx_link_estimates_describe_one (e, "host-b");
  g_assert_cmpstr (text, ==, "24 MB/s, 51 ms");
  g_clear_pointer (&text, g_free);
  text = rlx_link_estimates_describe_one (e, "c");
  g_assert_cmpstr (text, ==, "local");
  g_clear_pointer (&text, g_free);
  g_assert_null (rlx_link_estimates_describe_one (e, "nobody"));
}

/* ── over a real shaped link ──────────────────────────────────────────── */

typedef struct {
  guint frames;
} Count;

static void
on_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  ((Count *) user_data)->frames++;
}

static gboolean
on_timeout (gpointer user_data)
{
  *(gboolean *) user_data = TRUE;
  return G_SOURCE_REMOVE;
}

static void
wait_frames (Count *c, guint want)
{
  gboolean expired = FALSE;
  guint id = g_timeout_add_seconds (60, on_timeout, &expired);

  while (c->frames < want && !expired)
    g_main_context_iteration (NULL, TRUE);
  g_assert_false (expired);
  g_source_remove (id);
}

/* Whether anyone but this test (whose frame counter is blocked meanwhile)
 * handles @link's ::frame, and anyone its ::notify::bytes-rx. */
static gboolean
watched_frames (RlxLink *link, Count *count)
{
  gboolean pending;

  g_signal_handlers_block_by_func (link, on_frame, count);
  pending = g_signal_has_handler_pending (link, g_signal_lookup ("frame", RLX_TYPE_LINK), 0,
                                          FALSE);
  g_signal_handlers_unblock_by_func (link, on_frame, count);
  return pending;
}

static gboolean
watched_bytes (RlxLink *link)
{
  return g_signal_has_handler_pending (link, g_signal_lookup ("notify", G_TYPE_OBJECT),
                                       g_quark_from_string ("bytes-rx"), FALSE);
}

static void
test_shaped_link (void)
{
  g_autoptr(RlxLinkEstimates) e = rlx_link_estimates_new ();
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) inner = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GError) error = NULL;
  RlxLinkShape shape;
  const RlxLinkEstimate *l;
  Count count = { 0 };

  g_assert_true (rlx_link_shape_parse ("delay=25ms,rate=25MB/s", &shape, &error));
  g_assert_true (rlx_unix_link_new_pair (0, &a, &inner, &error));
  g_assert_no_error (error);
  g_assert_true (rlx_link_estimates_link_is_local (inner));
  b = rlx_shaped_link_new (inner, &shape);
  g_assert_false (rlx_link_estimates_link_is_local (b));
  g_signal_connect (b, "frame", G_CALLBACK (on_frame), &count);
  g_assert_false (watched_frames (b, &count));
  g_assert_false (watched_bytes (b));
  rlx_link_estimates_watch (e, "a", b);
  g_assert_true (watched_frames (b, &count));
  g_assert_true (watched_bytes (b));
  l = rlx_link_estimates_get (e, "a");
  g_assert_nonnull (l);
  g_assert_false (l->local);

  /* three 2 MB frames with pauses between them (the pauses must not count) */
  for (guint i = 0; i < 3; i++)
    {
      g_autoptr(GBytes) f = g_bytes_new_take (g_malloc0 (2000000), 2000000);

      g_assert_true (rlx_link_send (a, f, NULL));
      wait_frames (&count, i + 1);
      g_usleep (150000);
    }
  g_assert_cmpuint (l->rate_samples, ==, 3);
  if (fabs (l->bytes_per_s - 25e6) > 25e6 * 0.05)
    g_error ("measured %.0f B/s over a link shaped to 25 MB/s", l->bytes_per_s);

  /* a control-lane frame is not a sample, however large */
  {
    g_autoptr(GBytes) f = g_bytes_new_take (g_malloc0 (200000), 200000);

    g_assert_true (rlx_link_send_lane (a, RLX_LINK_LANE_CONTROL, f, NULL));
    wait_frames (&count, 4);
  }
  g_assert_cmpuint (l->rate_samples, ==, 3);

  /* removing the estimate stops the watch: an estimate of that name added
   * again, not watched, learns nothing from the link */
  rlx_link_estimates_remove (e, "a");
  g_assert_null (rlx_link_estimates_get (e, "a"));
  g_assert_false (watched_frames (b, &count));
  g_assert_false (watched_bytes (b));
  rlx_link_estimates_add (e, "a", FALSE);
  l = rlx_link_estimates_get (e, "a");
  {
    g_autoptr(GBytes) f = g_bytes_new_take (g_malloc0 (2000000), 2000000);

    g_assert_true (rlx_link_send (a, f, NULL));
    wait_frames (&count, 5);
  }
  g_assert_cmpuint (l->rate_samples, ==, 0);
  rlx_link_close (a);
  rlx_link_close (b);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/link-estimates/rate-leaves-idle-out", test_rate_leaves_idle_out);
  g_test_add_func ("/link-estimates/window-and-ring", test_rate_window_and_ring);
  g_test_add_func ("/link-estimates/rtt-and-quic", test_rtt_and_quic);
  g_test_add_func ("/link-estimates/drift", test_drift);
  g_test_add_func ("/link-estimates/choose", test_choose);
  g_test_add_func ("/link-estimates/shaped-link", test_shaped_link);
  return g_test_run ();
}
