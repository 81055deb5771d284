/* test-quic.c — RlxQuic between two endpoints in one process
 *
 * The datagram path is an in-memory queue delivered from an idle source (so
 * no call re-enters the other side), with optional deterministic loss. What
 * is checked: the TLS handshake with pinned self-signed certificates both
 * ways (and its refusal when either pin is wrong), frames whole and in order
 * per stream in both directions, a transfer over a lossy path, a control
 * frame overtaking queued bulk data, a congestion window that holds a
 * bucket on a microsecond path, a clean close that delivers what was
 * queued, the idle timeout, and garbage datagrams that get no answer.
 */
#include "rlx-config.h"
#include "core/p2p/rlx-quic.h"
#include "core/p2p/rlx-link.h"

#include <malloc.h>
#include <string.h>
#include <gio/gio.h>
#include "core/p2p/rlx-link-mailbox.h"

typedef struct _Side Side;
struct _Side {
  const char *name;
  RlxQuic    *q;
  Side       *other;
  GQueue      inbox;          /* GBytes* datagrams to deliver to q */
  guint       deliver_id;
  guint       sent;           /* datagrams handed to the path */
  guint       drop_every;     /* drop every Nth datagram this side sends; 0: none */
  gboolean    cut;            /* drop everything this side sends */
  gboolean    established;
  GError     *closed;
  GPtrArray  *frames[RLX_QUIC_N_STREAMS];   /* GBytes* */
  guint64     rx_bytes[RLX_QUIC_N_STREAMS];
  /* index into frames[BULK] when the first CONTROL frame arrived */
  gint        bulk_seen_at_control;
  guint64     inbox_cap;      /* ::frame says full once rx_bytes reach it; 0: never */
  GQueue     *capture;        /* set: what this side sends goes here, not to other */
  guint8      watch_dcid[20]; /* count datagrams sent to this connection ID */
  gsize       watch_len;
  guint       watched;
  guint       discard;        /* bulk frames to take and drop before keeping any */
  guint       delay_ms;       /* > 0: what this side sends arrives this much later */
  GQueue      delayed;        /* Delayed*, oldest first */
  guint       delay_id;
  guint       pace_ms;        /* > 0: what this side sends goes one datagram per pace_ms */
  GQueue      held;           /* paced datagrams not yet on the path */
  guint       pace_id;
};

static gboolean
deliver_cb (gpointer user_data)
{
  Side *s = user_data;
  GBytes *d;

  s->deliver_id = 0;
  while ((d = g_queue_pop_head (&s->inbox)) != NULL)
    {
      gsize len;
      const guint8 *p = g_bytes_get_data (d, &len);
      if (s->q)
        rlx_quic_receive (s->q, p, len);
      g_bytes_unref (d);
    }
  return G_SOURCE_REMOVE;
}

typedef struct {
  gint64  at;                 /* monotonic µs it is delivered */
  GBytes *d;
} Delayed;

/* Delayed datagrams whose time has come onto the path. */
static gboolean
delay_cb (gpointer user_data)
{
  Side *s = user_data;
  gint64 now = g_get_monotonic_time ();
  Delayed *x;

  while ((x = g_queue_peek_head (&s->delayed)) != NULL && x->at <= now)
    {
      g_queue_pop_head (&s->delayed);
      g_queue_push_tail (&s->other->inbox, x->d);
      g_free (x);
    }
  if (s->other->deliver_id == 0 && !g_queue_is_empty (&s->other->inbox))
    s->other->deliver_id = g_idle_add (deliver_cb, s->other);
  return G_SOURCE_CONTINUE;
}

static void
delayed_free (gpointer data)
{
  Delayed *x = data;

  g_bytes_unref (x->d);
  g_free (x);
}

/* One paced datagram onto the path. */
static gboolean
pace_cb (gpointer user_data)
{
  Side *s = user_data;
  GBytes *d = g_queue_pop_head (&s->held);

  if (d != NULL)
    {
      g_queue_push_tail (&s->other->inbox, d);
      if (s->other->deliver_id == 0)
        s->other->deliver_id = g_idle_add (deliver_cb, s->other);
    }
  return G_SOURCE_CONTINUE;
}

static guint
send_cb (const RlxDatagram *d, guint n, gpointer user_data)
{
  Side *s = user_data;

  for (guint i = 0; i < n; i++)
    {
      s->sent++;
      if (s->watch_len > 0)
        {
          /* long header: the DCID's length at 5; short: the DCID at 1 */
          gsize at = (d[i].data[0] & 0x80) ? 6 : 1;
          if (d[i].len >= at + s->watch_len &&
              (at == 1 || d[i].data[5] == s->watch_len) &&
              memcmp (d[i].data + at, s->watch_dcid, s->watch_len) == 0)
            s->watched++;
        }
      if (s->capture)
        {
          g_queue_push_tail (s->capture, g_bytes_new (d[i].data, d[i].len));
          continue;
        }
      if (s->cut || (s->drop_every && s->sent % s->drop_every == 0))
        continue;
      if (s->delay_ms > 0)
        {
          Delayed *x = g_new (Delayed, 1);

          x->at = g_get_monotonic_time () + (gint64) s->delay_ms * 1000;
          x->d = g_bytes_new (d[i].data, d[i].len);
          g_queue_push_tail (&s->delayed, x);
          if (s->delay_id == 0)
            s->delay_id = g_timeout_add (1, delay_cb, s);
          continue;
        }
      if (s->pace_ms > 0)
        {
          g_queue_push_tail (&s->held, g_bytes_new (d[i].data, d[i].len));
          if (s->pace_id == 0)
            s->pace_id = g_timeout_add (s->pace_ms, pace_cb, s);
          continue;
        }
      g_queue_push_tail (&s->other->inbox, g_bytes_new (d[i].data, d[i].len));
    }
  if (s->other->deliver_id == 0 && !s->capture)
    s->other->deliver_id = g_idle_add (deliver_cb, s->other);
  return n;
}

static void
established_cb (gpointer user_data)
{
  Side *s = user_data;

  s->established = TRUE;
}

static gboolean
frame_cb (RlxQuicStream stream, GBytes *frame, gpointer user_data)
{
  Side *s = user_data;

  if (stream == RLX_QUIC_STREAM_BULK && s->discard > 0)
    {
      s->discard--;
      return TRUE;
    }
  if (stream == RLX_QUIC_STREAM_CONTROL && s->bulk_seen_at_control < 0)
    s->bulk_seen_at_control = (gint) s->frames[RLX_QUIC_STREAM_BULK]->len;
  g_ptr_array_add (s->frames[stream], g_bytes_ref (frame));
  s->rx_bytes[stream] += g_bytes_get_size (frame);
  return s->inbox_cap == 0 ||
         s->rx_bytes[RLX_QUIC_STREAM_CONTROL] + s->rx_bytes[RLX_QUIC_STREAM_BULK] < s->inbox_cap;
}

static void
closed_cb (const GError *error, gpointer user_data)
{
  Side *s = user_data;

  g_assert_null (s->closed);
  s->closed = g_error_copy (error);
}

static const RlxQuicCallbacks callbacks = {
  .send = send_cb,
  .established = established_cb,
  .frame = frame_cb,
  .closed = closed_cb,
};

typedef struct {
  RlxIdentity *id_a, *id_b;
  Side a, b;
} Pair;

static void
side_init (Side *s, const char *name, Side *other)
{
  memset (s, 0, sizeof *s);
  s->name = name;
  s->other = other;
  g_queue_init (&s->inbox);
  g_queue_init (&s->held);
  g_queue_init (&s->delayed);
  s->bulk_seen_at_control = -1;
  for (guint i = 0; i < RLX_QUIC_N_STREAMS; i++)
    s->frames[i] = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
}

static void
side_clear (Side *s)
{
  g_clear_handle_id (&s->deliver_id, g_source_remove);
  g_clear_handle_id (&s->pace_id, g_source_remove);
  g_clear_handle_id (&s->delay_id, g_source_remove);
  g_queue_clear_full (&s->delayed, delayed_free);
  g_clear_pointer (&s->q, rlx_quic_free);
  g_queue_clear_full (&s->inbox, (GDestroyNotify) g_bytes_unref);
  g_queue_clear_full (&s->held, (GDestroyNotify) g_bytes_unref);
  for (guint i = 0; i < RLX_QUIC_N_STREAMS; i++)
    g_ptr_array_unref (s->frames[i]);
  g_clear_error (&s->closed);
}

/* Client a pins @pin_of_b (NULL: b's real fingerprint), server b pins a's. */
static void
pair_init (Pair *p, const char *pin_of_b, const char *pin_of_a, guint idle_ms)
{
  g_autoptr(GError) error = NULL;
  RlxQuicConfig ca = { 0 }, cb = { 0 };

  p->id_a = rlx_identity_new_ephemeral (&error);
  g_assert_no_error (error);
  p->id_b = rlx_identity_new_ephemeral (&error);
  g_assert_no_error (error);
  side_init (&p->a, "a", &p->b);
  side_init (&p->b, "b", &p->a);

  ca.is_client = TRUE;
  ca.identity = p->id_a;
  ca.peer_fingerprint = pin_of_b ? pin_of_b : rlx_identity_get_fingerprint (p->id_b);
  ca.peer_name = "b";
  ca.idle_timeout_ms = idle_ms;
  cb.is_client = FALSE;
  cb.identity = p->id_b;
  cb.peer_fingerprint = pin_of_a ? pin_of_a : rlx_identity_get_fingerprint (p->id_a);
  cb.peer_name = "a";
  cb.idle_timeout_ms = idle_ms;
  p->a.q = rlx_quic_new (&ca, &callbacks, &p->a, &error);
  g_assert_no_error (error);
  p->b.q = rlx_quic_new (&cb, &callbacks, &p->b, &error);
  g_assert_no_error (error);
}

static void
pair_clear (Pair *p)
{
  side_clear (&p->a);
  side_clear (&p->b);
  g_clear_object (&p->id_a);
  g_clear_object (&p->id_b);
}

static gboolean
on_expired (gpointer user_data)
{
  *(gboolean *) user_data = TRUE;
  return G_SOURCE_REMOVE;
}

typedef gboolean (*Cond) (Pair *p);

static void
run_until (Pair *p, Cond cond, guint timeout_ms)
{
  gboolean expired = FALSE;
  guint id = g_timeout_add (timeout_ms, on_expired, &expired);

  while (!cond (p) && !expired)
    g_main_context_iteration (NULL, TRUE);
  if (expired)
    g_error ("timed out after %u ms (a: est=%d closed=%s; b: est=%d closed=%s)", timeout_ms,
             p->a.established, p->a.closed ? p->a.closed->message : "no",
             p->b.established, p->b.closed ? p->b.closed->message : "no");
  g_source_remove (id);
}

static gboolean
both_established (Pair *p)
{
  return p->a.established && p->b.established;
}

static gboolean
both_closed (Pair *p)
{
  return p->a.closed != NULL && p->b.closed != NULL;
}

static GBytes *
pattern (gsize len, guint seed)
{
  guint8 *d = g_malloc (len ? len : 1);

  for (gsize i = 0; i < len; i++)
    d[i] = (guint8) ((i * 131u + seed * 7u + (i >> 11)) & 0xff);
  return g_bytes_new_take (d, len);
}

static void
test_handshake_and_frames (void)
{
  Pair p;
  g_autoptr(GError) error = NULL;
  const gsize sizes[] = { 0, 1, 3, 4, 1200, 1452, 65536, 1000003 };
  guint n = G_N_ELEMENTS (sizes);

  pair_init (&p, NULL, NULL, 0);
  /* Queued before the handshake: sent once it is done. */
  for (guint i = 0; i < n; i++)
    {
      g_autoptr(GBytes) f = pattern (sizes[i], i);
      g_assert_true (rlx_quic_send (p.a.q, i % 2 ? RLX_QUIC_STREAM_BULK : RLX_QUIC_STREAM_CONTROL,
                                    f, &error));
      g_assert_no_error (error);
    }
  rlx_quic_start (p.a.q);
  rlx_quic_start (p.b.q);
  run_until (&p, both_established, 10000);
  for (guint i = 0; i < n; i++)
    {
      g_autoptr(GBytes) f = pattern (sizes[i], 100 + i);
      g_assert_true (rlx_quic_send (p.b.q, i % 2 ? RLX_QUIC_STREAM_CONTROL : RLX_QUIC_STREAM_BULK,
                                    f, &error));
    }
  while (p.b.frames[0]->len + p.b.frames[1]->len < n ||
         p.a.frames[0]->len + p.a.frames[1]->len < n)
    g_main_context_iteration (NULL, TRUE);

  /* Per stream, whole and in order. */
  for (guint st = 0; st < 2; st++)
    {
      guint ib = 0, ia = 0;
      for (guint i = 0; i < n; i++)
        {
          if ((i % 2 ? RLX_QUIC_STREAM_BULK : RLX_QUIC_STREAM_CONTROL) == st)
            {
              g_autoptr(GBytes) want = pattern (sizes[i], i);
              g_assert_true (g_bytes_equal (want, p.b.frames[st]->pdata[ib++]));
            }
          if ((i % 2 ? RLX_QUIC_STREAM_CONTROL : RLX_QUIC_STREAM_BULK) == st)
            {
              g_autoptr(GBytes) want = pattern (sizes[i], 100 + i);
              g_assert_true (g_bytes_equal (want, p.a.frames[st]->pdata[ia++]));
            }
        }
      g_assert_cmpuint (ib, ==, p.b.frames[st]->len);
      g_assert_cmpuint (ia, ==, p.a.frames[st]->len);
    }
  g_assert_null (p.a.closed);
  g_assert_null (p.b.closed);
  g_assert_cmpuint (rlx_quic_get_rtt_us (p.a.q), >, 0);
  pair_clear (&p);
}

static void
check_pin_refused (gboolean client_pins_wrong)
{
  Pair p;
  const char *wrong = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

  pair_init (&p, client_pins_wrong ? wrong : NULL, client_pins_wrong ? NULL : wrong, 0);
  rlx_quic_start (p.a.q);
  rlx_quic_start (p.b.q);
  run_until (&p, both_closed, 10000);
  g_test_message ("a: %s", p.a.closed->message);
  g_test_message ("b: %s", p.b.closed->message);
  g_assert_error (p.a.closed, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PIN_MISMATCH);
  g_assert_error (p.b.closed, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PIN_MISMATCH);
  g_assert_false (p.a.established);
  g_assert_false (p.b.established);
  /* The side whose pin failed names what it saw and what it expected. */
  g_assert_nonnull (strstr ((client_pins_wrong ? p.a : p.b).closed->message, "0011223344556677"));
  pair_clear (&p);
}

static void
test_pin_mismatch_client (void)
{
  check_pin_refused (TRUE);
}

static void
test_pin_mismatch_server (void)
{
  check_pin_refused (FALSE);
}

static gboolean
b_has_all_bulk (Pair *p)
{
  return p->b.rx_bytes[RLX_QUIC_STREAM_BULK] >= (16u << 20) || p->b.closed || p->a.closed;
}

static void
test_lossy_transfer (void)
{
  Pair p;
  g_autoptr(GError) error = NULL;

  pair_init (&p, NULL, NULL, 0);
  p.a.drop_every = 13;
  p.b.drop_every = 17;
  rlx_quic_start (p.a.q);
  rlx_quic_start (p.b.q);
  run_until (&p, both_established, 10000);
  for (guint i = 0; i < 4; i++)
    {
      g_autoptr(GBytes) f = pattern (4u << 20, i);
      g_assert_true (rlx_quic_send (p.a.q, RLX_QUIC_STREAM_BULK, f, &error));
    }
  run_until (&p, b_has_all_bulk, 60000);
  g_assert_null (p.b.closed);
  g_assert_cmpuint (p.b.frames[RLX_QUIC_STREAM_BULK]->len, ==, 4);
  for (guint i = 0; i < 4; i++)
    {
      g_autoptr(GBytes) want = pattern (4u << 20, i);
      g_assert_true (g_bytes_equal (want, p.b.frames[RLX_QUIC_STREAM_BULK]->pdata[i]));
    }
  pair_clear (&p);
}

/* A started pair with four 4 MiB buckets queued from a (and from b when
 * @both_ways), then a heartbeat from a. */
static void
pair_start_buckets (Pair *p, gboolean both_ways)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) hb = pattern (64, 9);

  pair_init (p, NULL, NULL, 0);
  rlx_quic_start (p->a.q);
  rlx_quic_start (p->b.q);
  run_until (p, both_established, 10000);
  for (guint i = 0; i < 4; i++)
    {
      g_autoptr(GBytes) f = pattern (4u << 20, i);
      g_assert_true (rlx_quic_send (p->a.q, RLX_QUIC_STREAM_BULK, f, &error));
      if (both_ways)
        g_assert_true (rlx_quic_send (p->b.q, RLX_QUIC_STREAM_BULK, f, &error));
    }
  g_assert_true (rlx_quic_send (p->a.q, RLX_QUIC_STREAM_CONTROL, hb, &error));
}

/* Flow control is the connection's alone: the peer never limits a stream
 * by its own window, so neither side ever needs a MAX_STREAM_DATA frame —
 * ngtcp2 0.12 can send one without raising its own limit to it, and the
 * peer's data past the old limit then fails the connection with
 * ERR_FLOW_CONTROL (rlx-quic.c, STREAM_WINDOW). After 24 MiB, more than
 * any stream window a peer starts with, the credit is all but untouched. */
static void
test_streams_have_no_window (void)
{
  Pair p;

  pair_start_buckets (&p, TRUE);
  run_until (&p, b_has_all_bulk, 60000);
  g_assert_null (p.a.closed);
  g_assert_null (p.b.closed);
  g_assert_cmpuint (p.b.rx_bytes[RLX_QUIC_STREAM_BULK], ==, (guint64) 16 << 20);
  for (guint st = 0; st < RLX_QUIC_N_STREAMS; st++)
    {
      g_test_message ("stream %u: credit %" G_GUINT64_FORMAT, st,
                      rlx_quic_get_stream_credit (p.a.q, st));
      g_assert_cmpuint (rlx_quic_get_stream_credit (p.a.q, st), >, (guint64) 1 << 61);
    }
  pair_clear (&p);
}

static gboolean
b_has_control (Pair *p)
{
  return p->b.frames[RLX_QUIC_STREAM_CONTROL]->len > 0 || p->b.closed || p->a.closed;
}

static void
test_control_overtakes_bulk (void)
{
  Pair p;
  g_autoptr(GBytes) hb = pattern (64, 9);

  /* Four 4 MiB buckets queued, then one heartbeat. */
  pair_start_buckets (&p, FALSE);
  run_until (&p, b_has_control, 30000);
  /* The heartbeat arrived before the first bucket was complete. */
  g_assert_cmpint (p.b.bulk_seen_at_control, ==, 0);
  g_assert_true (g_bytes_equal (hb, p.b.frames[RLX_QUIC_STREAM_CONTROL]->pdata[0]));
  run_until (&p, b_has_all_bulk, 60000);
  g_assert_cmpuint (p.b.frames[RLX_QUIC_STREAM_BULK]->len, ==, 4);
  pair_clear (&p);
}

/* A cohort's round on a LAN: a bucket one way, then the next only once it
 * arrived. The default controller must let a bucket of this size go out in
 * one flight: ngtcp2 0.12's CUBIC stops growing its window at ~42 KB when
 * the RTT is microseconds (rlx-quic.h), which made each 100 KB bucket take
 * three round trips. */
#define BUCKET  (160u << 10)
#define ROUNDS  24

static guint want_bulk;

static gboolean
b_has_wanted_bulk (Pair *p)
{
  return p->b.frames[RLX_QUIC_STREAM_BULK]->len >= want_bulk || p->b.closed || p->a.closed;
}

static void
test_window_holds_a_bucket (void)
{
  Pair p;
  g_autoptr(GError) error = NULL;
  guint64 max_cwnd = 0;

  pair_init (&p, NULL, NULL, 0);
  g_assert_cmpstr (rlx_quic_get_cc_name (p.a.q), ==, "bbr2");
  rlx_quic_start (p.a.q);
  rlx_quic_start (p.b.q);
  run_until (&p, both_established, 10000);
  for (guint i = 0; i < ROUNDS; i++)
    {
      g_autoptr(GBytes) f = pattern (BUCKET, i);
      g_assert_true (rlx_quic_send (p.a.q, RLX_QUIC_STREAM_BULK, f, &error));
      g_assert_no_error (error);
      want_bulk = i + 1;
      run_until (&p, b_has_wanted_bulk, 30000);
      g_assert_null (p.b.closed);
      max_cwnd = MAX (max_cwnd, rlx_quic_get_cwnd (p.a.q));
    }
  g_test_message ("%s: largest window %" G_GUINT64_FORMAT " bytes over %u buckets of %u",
                  rlx_quic_get_cc_name (p.a.q), max_cwnd, ROUNDS, BUCKET);
  g_assert_cmpuint (max_cwnd, >=, BUCKET);
  /* what `--sync auto` takes as the link's throughput (rlx-link-estimates.h) */
  g_test_message ("delivery rate %" G_GUINT64_FORMAT " B/s", rlx_quic_get_delivery_rate (p.a.q));
  g_assert_cmpuint (rlx_quic_get_delivery_rate (p.a.q), >, 0);
  pair_clear (&p);
}

static void
test_clean_close (void)
{
  Pair p;
  g_autoptr(GError) error = NULL;

  pair_init (&p, NULL, NULL, 0);
  rlx_quic_start (p.a.q);
  rlx_quic_start (p.b.q);
  run_until (&p, both_established, 10000);
  for (guint i = 0; i < 3; i++)
    {
      g_autoptr(GBytes) f = pattern (1u << 20, i);
      g_assert_true (rlx_quic_send (p.a.q, RLX_QUIC_STREAM_BULK, f, &error));
    }
  rlx_quic_close (p.a.q, 5000);
  /* Closing: nothing more is taken. */
  {
    g_autoptr(GBytes) f = pattern (10, 0);
    g_assert_false (rlx_quic_send (p.a.q, RLX_QUIC_STREAM_BULK, f, &error));
    g_assert_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_CLOSED);
    g_clear_error (&error);
  }
  run_until (&p, both_closed, 10000);
  g_assert_error (p.a.closed, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_CLOSED);
  g_assert_error (p.b.closed, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_CLOSED);
  g_assert_cmpuint (p.b.frames[RLX_QUIC_STREAM_BULK]->len, ==, 3);
  pair_clear (&p);
}

static void
test_idle_timeout (void)
{
  Pair p;

  pair_init (&p, NULL, NULL, 400);
  rlx_quic_start (p.a.q);
  rlx_quic_start (p.b.q);
  run_until (&p, both_established, 10000);
  p.a.cut = p.b.cut = TRUE;
  run_until (&p, both_closed, 10000);
  g_assert_error (p.a.closed, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_TIMEOUT);
  g_assert_error (p.b.closed, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_TIMEOUT);
  pair_clear (&p);
}

#define STALL_FRAMES 96
#define STALL_FRAME  ((gsize) 1 << 20)

/* Iterate for @ms of wall time. */
static void
run_for (guint ms)
{
  gboolean expired = FALSE;

  g_timeout_add (ms, on_expired, &expired);
  while (!expired)
    g_main_context_iteration (NULL, TRUE);
}

static gboolean
b_has_all_stalled (Pair *p)
{
  return p->b.rx_bytes[RLX_QUIC_STREAM_BULK] >= STALL_FRAMES * STALL_FRAME ||
         p->b.closed || p->a.closed;
}

/* A consumer that stops taking frames (its ::frame says the inbox is full)
 * stalls the sender on flow control: what the receiver holds stays near
 * its inbox cap plus the windows, far below what the sender queued; once
 * the consumer resumes, everything arrives. */
static void
test_stalled_reader_stalls_sender (void)
{
  Pair p;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) f = pattern (STALL_FRAME, 3);
  guint64 before, held;

  pair_init (&p, NULL, NULL, 0);
  rlx_quic_start (p.a.q);
  rlx_quic_start (p.b.q);
  run_until (&p, both_established, 10000);
  p.b.inbox_cap = 4 << 20;
  for (guint i = 0; i < STALL_FRAMES; i++)
    g_assert_true (rlx_quic_send (p.a.q, RLX_QUIC_STREAM_BULK, f, &error));
  /* until the receiver gets nothing more for a second (at most 60 s) */
  do
    {
      before = p.b.rx_bytes[RLX_QUIC_STREAM_BULK];
      run_for (1000);
    }
  while ((before == 0 || p.b.rx_bytes[RLX_QUIC_STREAM_BULK] != before) &&
         p.b.frames[RLX_QUIC_STREAM_BULK]->len < STALL_FRAMES && !p.b.closed);
  held = p.b.rx_bytes[RLX_QUIC_STREAM_BULK];
  g_test_message ("stalled reader holds %" G_GUINT64_FORMAT " bytes of %" G_GSIZE_FORMAT
                  " sent; %" G_GUINT64_FORMAT " unsent", held,
                  STALL_FRAMES * STALL_FRAME, rlx_quic_get_unsent (p.a.q));
  g_assert_null (p.a.closed);
  g_assert_null (p.b.closed);
  g_assert_true (rlx_quic_is_rx_held (p.b.q));
  /* cap 4 MiB + the 16 MiB connection window + the frame that filled it */
  g_assert_cmpuint (held, <=, (guint64) 24 << 20);
  g_assert_cmpuint (rlx_quic_get_unsent (p.a.q), >=, (guint64) 64 << 20);

  /* The consumer takes its frames: the rest follows. */
  g_ptr_array_set_size (p.b.frames[RLX_QUIC_STREAM_BULK], 0);
  p.b.inbox_cap = 0;
  rlx_quic_resume_rx (p.b.q);
  g_assert_false (rlx_quic_is_rx_held (p.b.q));
  run_until (&p, b_has_all_stalled, 60000);
  g_assert_null (p.b.closed);
  g_assert_cmpuint (p.b.rx_bytes[RLX_QUIC_STREAM_BULK], ==, STALL_FRAMES * STALL_FRAME);
  pair_clear (&p);
}

/* A third client's Initial, as anyone who can reach the server's port could
 * send it (the keys of an Initial derive from its DCID): captured from a
 * real RlxQuic client whose datagrams go nowhere. Its SCID, which the
 * server's answers would be addressed to, goes to @scid. */
static GBytes *
forged_initial (Pair *p, guint8 scid[20], gsize *scid_len)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxIdentity) id = rlx_identity_new_ephemeral (&error);
  GQueue captured = G_QUEUE_INIT;
  RlxQuicConfig cc = { 0 };
  Side c, sink;
  GBytes *initial;
  const guint8 *d;
  gsize len, dlen;

  side_init (&c, "forger", &sink);
  side_init (&sink, "sink", &c);
  c.capture = &captured;
  cc.is_client = TRUE;
  cc.identity = id;
  cc.peer_fingerprint = rlx_identity_get_fingerprint (p->id_b);
  c.q = rlx_quic_new (&cc, &callbacks, &c, &error);
  g_assert_no_error (error);
  rlx_quic_start (c.q);
  while (g_queue_is_empty (&captured))
    g_main_context_iteration (NULL, TRUE);
  initial = g_queue_pop_head (&captured);
  d = g_bytes_get_data (initial, &len);
  g_assert_cmpuint (len, >=, 1200);
  g_assert_cmpuint (d[0] & 0xf0, ==, 0xc0);     /* long header, Initial */
  dlen = d[5];
  *scid_len = d[6 + dlen];
  g_assert_cmpuint (*scid_len, <=, 20);
  memcpy (scid, d + 7 + dlen, *scid_len);
  g_queue_clear_full (&captured, (GDestroyNotify) g_bytes_unref);
  side_clear (&c);
  side_clear (&sink);
  return initial;
}

static gboolean
b_has_answered (Pair *p)
{
  return p->b.sent > 0;
}

/* A forged client Initial that arrives while a handshake is in progress is
 * dropped unanswered and the handshake finishes; one that came first gives
 * way to the real client once it has gone quiet. */
static void
test_forged_initial_mid_handshake (void)
{
  Pair p;
  g_autoptr(GBytes) forged = NULL;
  const guint8 *d;
  gsize len;

  pair_init (&p, NULL, NULL, 0);
  forged = forged_initial (&p, p.b.watch_dcid, &p.b.watch_len);
  d = g_bytes_get_data (forged, &len);
  rlx_quic_start (p.b.q);
  rlx_quic_start (p.a.q);
  run_until (&p, b_has_answered, 10000);
  g_assert_false (both_established (&p));
  for (guint i = 0; i < 3; i++)
    rlx_quic_receive (p.b.q, d, len);
  run_until (&p, both_established, 10000);
  g_assert_cmpuint (p.b.watched, ==, 0);
  g_assert_null (p.a.closed);
  g_assert_null (p.b.closed);
  pair_clear (&p);

  /* The forged Initial first: the server answers it, but once that
   * connection is quiet the real client's Initial takes its place. */
  pair_init (&p, NULL, NULL, 0);
  g_clear_pointer (&forged, g_bytes_unref);
  forged = forged_initial (&p, p.b.watch_dcid, &p.b.watch_len);
  d = g_bytes_get_data (forged, &len);
  rlx_quic_start (p.b.q);
  rlx_quic_receive (p.b.q, d, len);
  while (p.b.watched == 0)
    g_main_context_iteration (NULL, TRUE);
  run_for (1200);
  rlx_quic_start (p.a.q);
  run_until (&p, both_established, 10000);
  g_assert_null (p.a.closed);
  g_assert_null (p.b.closed);
  pair_clear (&p);
}

static void
test_garbage_gets_nothing (void)
{
  Pair p;
  g_autoptr(GRand) rand = g_rand_new_with_seed (42);
  guint8 buf[1500];

  pair_init (&p, NULL, NULL, 0);
  /* Before any connection: a server fed garbage answers nothing. */
  for (guint i = 0; i < 2000; i++)
    {
      gsize len = 1 + g_rand_int_range (rand, 0, sizeof buf);
      for (gsize j = 0; j < len; j++)
        buf[j] = (guint8) g_rand_int (rand);
      /* Half of them look like long-header packets. */
      if (i % 2)
        buf[0] |= 0xc0;
      rlx_quic_receive (p.b.q, buf, len);
    }
  while (g_main_context_iteration (NULL, FALSE))
    ;
  g_assert_cmpuint (p.b.sent, ==, 0);
  g_assert_null (p.b.closed);

  /* The real client still gets through, and garbage after the handshake
   * changes nothing. */
  rlx_quic_start (p.a.q);
  rlx_quic_start (p.b.q);
  run_until (&p, both_established, 10000);
  for (guint i = 0; i < 2000; i++)
    {
      gsize len = 1 + g_rand_int_range (rand, 0, sizeof buf);
      for (gsize j = 0; j < len; j++)
        buf[j] = (guint8) g_rand_int (rand);
      rlx_quic_receive (p.b.q, buf, len);
      rlx_quic_receive (p.a.q, buf, len);
    }
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(GBytes) f = pattern (5000, 1);
    g_assert_true (rlx_quic_send (p.a.q, RLX_QUIC_STREAM_CONTROL, f, &error));
    run_until (&p, b_has_control, 10000);
    g_assert_true (g_bytes_equal (f, p.b.frames[RLX_QUIC_STREAM_CONTROL]->pdata[0]));
  }
  g_assert_null (p.a.closed);
  g_assert_null (p.b.closed);
  pair_clear (&p);
}

static void
test_frame_cap (void)
{
  Pair p;
  g_autoptr(GError) error = NULL;
  RlxQuicConfig c = { 0 };
  g_autoptr(RlxIdentity) id = rlx_identity_new_ephemeral (&error);
  g_autoptr(RlxQuic) q = NULL;
  g_autoptr(GBytes) big = pattern (2000, 0);

  g_assert_no_error (error);
  c.is_client = TRUE;
  c.identity = id;
  c.peer_fingerprint = rlx_identity_get_fingerprint (id);
  c.max_frame = 1000;
  pair_init (&p, NULL, NULL, 0);
  q = rlx_quic_new (&c, &callbacks, &p.a, &error);
  g_assert_no_error (error);
  g_assert_false (rlx_quic_send (q, RLX_QUIC_STREAM_BULK, big, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE);
  g_clear_error (&error);

  /* A pin that is not a fingerprint is refused up front. */
  c.peer_fingerprint = "not-hex";
  g_assert_null (rlx_quic_new (&c, &callbacks, &p.a, &error));
  g_assert_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_INVALID);
  pair_clear (&p);
}

static gboolean
b_has_two_frames (Pair *p)
{
  return p->b.frames[RLX_QUIC_STREAM_CONTROL]->len + p->b.frames[RLX_QUIC_STREAM_BULK]->len >= 2;
}

static gboolean
b_closed (Pair *p)
{
  return p->b.closed != NULL;
}

/* The receiver takes control frames up to RLX_LINK_MAX_CONTROL_FRAME and
 * ends the connection on a larger one, before reading its body; the bulk
 * stream still takes max_frame. (rlx_quic_send checks max_frame only: the
 * link above it refuses to send an over-cap control frame.) */
static void
test_control_cap (void)
{
  const gsize cap = RLX_LINK_MAX_CONTROL_FRAME;
  Pair p;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) most = pattern (cap, 1);
  g_autoptr(GBytes) over = pattern (cap + 1, 2);

  pair_init (&p, NULL, NULL, 0);
  rlx_quic_start (p.a.q);
  rlx_quic_start (p.b.q);
  run_until (&p, both_established, 10000);
  g_assert_true (rlx_quic_send (p.a.q, RLX_QUIC_STREAM_CONTROL, most, &error));
  g_assert_true (rlx_quic_send (p.a.q, RLX_QUIC_STREAM_BULK, over, &error));
  run_until (&p, b_has_two_frames, 20000);
  g_assert_true (g_bytes_equal (p.b.frames[RLX_QUIC_STREAM_CONTROL]->pdata[0], most));
  g_assert_true (g_bytes_equal (p.b.frames[RLX_QUIC_STREAM_BULK]->pdata[0], over));
  g_assert_null (p.b.closed);

  g_assert_true (rlx_quic_send (p.a.q, RLX_QUIC_STREAM_CONTROL, over, &error));
  run_until (&p, b_closed, 20000);
  g_assert_error (p.b.closed, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (p.b.closed->message, "control stream"));
  g_assert_nonnull (strstr (p.b.closed->message, "1048577"));
  g_assert_nonnull (strstr (p.b.closed->message, "cap of 1048576"));
  g_assert_cmpuint (p.b.frames[RLX_QUIC_STREAM_CONTROL]->len, ==, 1);
  /* what b took of the refused frame: at most the packets that carried its
   * first bytes, never the frame */
  g_assert_cmpuint (p.b.rx_bytes[RLX_QUIC_STREAM_CONTROL], ==, cap);
  pair_clear (&p);
}

static gboolean
b_has_bulk_frame (Pair *p)
{
  return p->b.frames[RLX_QUIC_STREAM_BULK]->len >= 1 || p->b.closed != NULL;
}

/* A frame in progress must come at RLX_FRAME_CLOCK_MIN_RATE, at most a
 * grace (1 s here) behind (rlx-frame-clock.h), even though the connection is
 * alive: a's datagrams paced to one per 100 ms (~14 kB/s) carry a 1 MB
 * bulk frame too slowly, and b ends the connection saying why; paced to
 * one per 4 ms (~360 kB/s), a 600 kB frame takes longer than the grace and
 * arrives whole. */
static void
test_half_sent_frame_deadline (void)
{
  g_autoptr(GBytes) big = pattern (1000 * 1000, 3);
  g_autoptr(GBytes) fits = pattern (600 * 1000, 4);
  g_autoptr(GError) error = NULL;
  gint64 t0;
  Pair p;

  for (guint round = 0; round < 2; round++)
    {
      g_setenv ("RLX_LINK_FRAME_GRACE_MS", "1000", TRUE);
      pair_init (&p, NULL, NULL, 30000);
      g_unsetenv ("RLX_LINK_FRAME_GRACE_MS");
      rlx_quic_start (p.a.q);
      rlx_quic_start (p.b.q);
      run_until (&p, both_established, 10000);
      p.a.pace_ms = round == 0 ? 100 : 4;
      t0 = g_get_monotonic_time ();
      g_assert_true (rlx_quic_send (p.a.q, RLX_QUIC_STREAM_BULK, round == 0 ? big : fits,
                                    &error));
      run_until (&p, b_has_bulk_frame, 20000);
      g_test_message ("pace %u ms: after %.2f s, %s", p.a.pace_ms,
                      (g_get_monotonic_time () - t0) / 1e6,
                      p.b.closed ? p.b.closed->message : "the frame came");
      if (round == 0)
        {
          g_assert_error (p.b.closed, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL);
          g_assert_nonnull (strstr (p.b.closed->message, "a kept a bulk frame half-sent"));
          g_assert_cmpuint (p.b.frames[RLX_QUIC_STREAM_BULK]->len, ==, 0);
        }
      else
        {
          g_assert_null (p.b.closed);
          g_assert_cmpint (g_get_monotonic_time () - t0, >, 1000 * 1000);
          g_assert_true (g_bytes_equal (p.b.frames[RLX_QUIC_STREAM_BULK]->pdata[0], fits));
        }
      pair_clear (&p);
    }
}

/* Heap in use right now (glibc). */
static gsize
heap_in_use (void)
{
  struct mallinfo2 mi = mallinfo2 ();

  return mi.uordblks + mi.hblkhd;
}

/* What a peer that outruns its receiver makes it hold (issue 29: pinnable
 * memory over QUIC): b takes 16 bulk frames of 4 MiB as fast as they come
 * (ngtcp2 tunes the connection's window up as it sees them consumed), then
 * keeps them like a full link's inbox (RLX_LINK_MAILBOX_INBOX_BYTES, then
 * the credit held) while a has 16 MiB frames queued. What b holds then —
 * frames delivered, the frame in progress, ngtcp2's buffers — is measured
 * as the heap's growth (a's frames are one buffer, allocated before). It
 * is bounded by the inbox, the frame that filled it and the connection's
 * window: data out of order, or whose credit is held, waits within it. */
static void
test_pinned_memory (void)
{
  g_autoptr(GBytes) small = pattern (4 << 20, 1);
  g_autoptr(GBytes) big = pattern (16 << 20, 2);
  g_autoptr(GError) error = NULL;
  gsize heap0, heap1, buffered = 0, allocated = 0;
  guint64 before;
  Pair p;

  pair_init (&p, NULL, NULL, 0);
  /* a 40 ms round trip: a window spent within two of them grows */
  p.a.delay_ms = p.b.delay_ms = 20;
  rlx_quic_start (p.a.q);
  rlx_quic_start (p.b.q);
  run_until (&p, both_established, 10000);
  p.b.discard = 16;
  p.b.inbox_cap = RLX_LINK_MAILBOX_INBOX_BYTES;
  for (guint i = 0; i < 16; i++)
    g_assert_true (rlx_quic_send (p.a.q, RLX_QUIC_STREAM_BULK, small, &error));
  malloc_trim (0);
  heap0 = heap_in_use ();
  for (guint i = 0; i < 12; i++)
    g_assert_true (rlx_quic_send (p.a.q, RLX_QUIC_STREAM_BULK, big, &error));
  do
    {
      before = p.b.rx_bytes[RLX_QUIC_STREAM_BULK];
      run_for (1000);
    }
  while ((p.b.discard > 0 || before == 0 || p.b.rx_bytes[RLX_QUIC_STREAM_BULK] != before) &&
         !p.b.closed);
  heap1 = heap_in_use ();
  g_assert_null (p.b.closed);
  g_assert_true (rlx_quic_is_rx_held (p.b.q));
  rlx_quic_get_rx_in_progress (p.b.q, &buffered, &allocated);
  g_test_message ("b holds %.1f MiB of whole frames, %.1f MiB of a frame in progress "
                  "(%.1f MiB allocated); heap +%.1f MiB",
                  p.b.rx_bytes[RLX_QUIC_STREAM_BULK] / 1048576.0, buffered / 1048576.0,
                  allocated / 1048576.0, ((gssize) heap1 - (gssize) heap0) / 1048576.0);
  /* the inbox (8 MiB, reached with the first 16 MiB frame), that frame,
   * and a 16 MiB window: 32 MiB and what allocation adds */
  g_assert_cmpuint (p.b.rx_bytes[RLX_QUIC_STREAM_BULK] + buffered, <=, (guint64) 32 << 20);
  g_assert_cmpint ((gssize) heap1 - (gssize) heap0, <=, (gssize) 40 << 20);
  pair_clear (&p);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/remote/quic/handshake-and-frames", test_handshake_and_frames);
  g_test_add_func ("/remote/quic/pin-mismatch-client", test_pin_mismatch_client);
  g_test_add_func ("/remote/quic/pin-mismatch-server", test_pin_mismatch_server);
  g_test_add_func ("/remote/quic/lossy-transfer", test_lossy_transfer);
  g_test_add_func ("/remote/quic/streams-have-no-window", test_streams_have_no_window);
  g_test_add_func ("/remote/quic/control-overtakes-bulk", test_control_overtakes_bulk);
  g_test_add_func ("/remote/quic/window-holds-a-bucket", test_window_holds_a_bucket);
  g_test_add_func ("/remote/quic/clean-close", test_clean_close);
  g_test_add_func ("/remote/quic/idle-timeout", test_idle_timeout);
  g_test_add_func ("/remote/quic/garbage-gets-nothing", test_garbage_gets_nothing);
  g_test_add_func ("/remote/quic/frame-cap", test_frame_cap);
  g_test_add_func ("/remote/quic/control-cap", test_control_cap);
  g_test_add_func ("/remote/quic/half-sent-frame-deadline", test_half_sent_frame_deadline);
  g_test_add_func ("/remote/quic/pinned-memory", test_pinned_memory);
  g_test_add_func ("/remote/quic/stalled-reader-stalls-sender", test_stalled_reader_stalls_sender);
  g_test_add_func ("/remote/quic/forged-initial-mid-handshake", test_forged_initial_mid_handshake);
  return g_test_run ();
}
