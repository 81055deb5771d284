/* test-sender.c — the backpressure sender over mock links whose transport
 * the test drains by hand: in-flight cap, step coalescing, control order and
 * drop-oldest with a report, bulk never dropped (FULL instead), depth, every
 * loss reported with the peer and a reason, lanes that do not wait on each
 * other; and over a real socket.
 */
#include "rlx-config.h"
#include "core/p2p/rlx-link.h"
#include "core/p2p/rlx-sender.h"
#include "core/p2p/rlx-unix-link.h"

#include <string.h>

/* ── a link whose "transport" is a list the test drains ──────────────── */

#define MOCK_TYPE_LINK (mock_link_get_type ())
G_DECLARE_FINAL_TYPE (MockLink, mock_link, MOCK, LINK, RlxLink)

struct _MockLink
{
  RlxLink    parent_instance;
  GQueue     wire;      /* GBytes* handed to send(), not yet "written" */
  gsize      pending;
  GPtrArray *written;   /* GBytes* the transport has taken, in order */
};

G_DEFINE_FINAL_TYPE (MockLink, mock_link, RLX_TYPE_LINK)

static gboolean
mock_send (RlxLink *link, GBytes *frame, GError **error)
{
  MockLink *self = MOCK_LINK (link);

  g_queue_push_tail (&self->wire, g_bytes_ref (frame));
  self->pending += g_bytes_get_size (frame);
  return TRUE;
}

static void
mock_close (RlxLink *link)
{
  rlx_link_emit_closed (link, NULL);
}

static gsize
mock_pending (RlxLink *link)
{
  return MOCK_LINK (link)->pending;
}

static void
mock_finalize (GObject *object)
{
  MockLink *self = MOCK_LINK (object);

  g_queue_clear_full (&self->wire, (GDestroyNotify) g_bytes_unref);
  g_ptr_array_unref (self->written);
  G_OBJECT_CLASS (mock_link_parent_class)->finalize (object);
}

static void
mock_link_class_init (MockLinkClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = mock_finalize;
  RLX_LINK_CLASS (klass)->send = mock_send;
  RLX_LINK_CLASS (klass)->close = mock_close;
  RLX_LINK_CLASS (klass)->pending_bytes = mock_pending;
}

static void
mock_link_init (MockLink *self)
{
  g_queue_init (&self->wire);
  self->written = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  rlx_link_set_peer (RLX_LINK (self), "mock");
}

/* The transport takes the oldest frame. FALSE if there was none. */
static gboolean
mock_drain_one (MockLink *self)
{
  GBytes *f = g_queue_pop_head (&self->wire);

  if (f == NULL)
    return FALSE;
  self->pending -= g_bytes_get_size (f);
  g_ptr_array_add (self->written, f);
  rlx_link_add_bytes_tx (RLX_LINK (self), g_bytes_get_size (f));
  return TRUE;
}

/* Half of the oldest frame: not drained yet. */
static void
mock_drain_half (MockLink *self)
{
  GBytes *f = g_queue_peek_head (&self->wire);
  gsize half = g_bytes_get_size (f) / 2;

  /* pending counts whole frames here; only bytes-tx moves */
  rlx_link_add_bytes_tx (RLX_LINK (self), half);
}

static GBytes *
text (const char *s)
{
  return g_bytes_new (s, strlen (s));
}

static char *
as_string (GBytes *b)
{
  gsize len;
  const char *data = g_bytes_get_data (b, &len);

  return g_strndup (data, len);
}

/* Everything the transport wrote, joined by ",". */
static char *
written (MockLink *link)
{
  GString *s = g_string_new (NULL);

  for (guint i = 0; i < link->written->len; i++)
    {
      g_autofree char *one = as_string (link->written->pdata[i]);
      if (i > 0)
        g_string_append_c (s, ',');
      g_string_append (s, one);
    }
  return g_string_free (s, FALSE);
}

static void
drain_all (MockLink *link)
{
  while (mock_drain_one (link))
    ;
}

typedef struct {
  guint   calls;
  guint   klass;
  guint   why;
  guint64 total;
  char   *peer;
  char   *reason;
} Drops;

static void
on_dropped (RlxSender *sender, guint klass, guint why, const char *peer, const char *reason,
            guint64 total, gpointer user_data)
{
  Drops *d = user_data;

  d->calls++;
  d->klass = klass;
  d->why = why;
  d->total = total;
  g_free (d->peer);
  d->peer = g_strdup (peer);
  g_free (d->reason);
  d->reason = g_strdup (reason);
}

static void
drops_clear (Drops *d)
{
  g_free (d->peer);
  g_free (d->reason);
}

static void
send_ok (RlxSender *sender, RlxSendClass klass, const char *s)
{
  g_autoptr(GBytes) f = text (s);
  g_autoptr(GError) error = NULL;

  g_assert_true (rlx_sender_send (sender, klass, f, &error));
  g_assert_no_error (error);
}

static void
test_in_flight_cap (void)
{
  g_autoptr(MockLink) link = g_object_new (MOCK_TYPE_LINK, NULL);
  g_autoptr(RlxSender) sender = rlx_sender_new (RLX_LINK (link), 2, 0, 0);

  send_ok (sender, RLX_SEND_CONTROL, "a");
  send_ok (sender, RLX_SEND_CONTROL, "b");
  send_ok (sender, RLX_SEND_CONTROL, "c");
  send_ok (sender, RLX_SEND_CONTROL, "d");
  /* Two handed to the link, two waiting. */
  g_assert_cmpuint (g_queue_get_length (&link->wire), ==, 2);
  g_assert_cmpuint (rlx_sender_get_in_flight (sender), ==, 2);
  g_assert_cmpuint (rlx_sender_get_queued (sender, RLX_SEND_CONTROL), ==, 2);
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 4);

  /* A partly written frame is still in flight. */
  mock_drain_half (link);
  g_assert_cmpuint (rlx_sender_get_in_flight (sender), ==, 2);
  g_assert_cmpuint (g_queue_get_length (&link->wire), ==, 2);

  g_assert_true (mock_drain_one (link));
  /* "a" left the transport: "c" goes in. */
  g_assert_cmpuint (g_queue_get_length (&link->wire), ==, 2);
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 3);
  drain_all (link);
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 0);
  {
    g_autofree char *w = written (link);
    g_assert_cmpstr (w, ==, "a,b,c,d");
  }
}

static void
test_step_coalesce (void)
{
  g_autoptr(MockLink) link = g_object_new (MOCK_TYPE_LINK, NULL);
  g_autoptr(RlxSender) sender = rlx_sender_new (RLX_LINK (link), 1, 0, 0);
  Drops drops = { 0 };

  g_signal_connect (sender, "dropped", G_CALLBACK (on_dropped), &drops);

  send_ok (sender, RLX_SEND_STEP, "step1");      /* in flight at once */
  send_ok (sender, RLX_SEND_STEP, "step2");      /* queued */
  send_ok (sender, RLX_SEND_CONTROL, "hb");
  send_ok (sender, RLX_SEND_STEP, "step3");      /* replaces step2, goes behind hb */
  send_ok (sender, RLX_SEND_STEP, "step4");      /* replaces step3 */
  g_assert_cmpuint (rlx_sender_get_queued (sender, RLX_SEND_STEP), ==, 1);
  g_assert_cmpuint (rlx_sender_get_dropped (sender, RLX_SEND_STEP), ==, 2);
  g_assert_cmpuint (drops.calls, ==, 2);
  g_assert_cmpuint (drops.klass, ==, RLX_SEND_STEP);
  g_assert_cmpuint (drops.why, ==, RLX_SEND_DROP_SUPERSEDED);
  g_assert_cmpstr (drops.peer, ==, "mock");
  g_assert_cmpuint (drops.total, ==, 2);
  g_assert_nonnull (strstr (drops.reason, "superseded"));
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 3);   /* step1 + hb + step4 */

  drain_all (link);
  {
    g_autofree char *w = written (link);
    g_assert_cmpstr (w, ==, "step1,hb,step4");
  }
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 0);
  drops_clear (&drops);
}

static void
test_control_drop_oldest (void)
{
  g_autoptr(MockLink) link = g_object_new (MOCK_TYPE_LINK, NULL);
  g_autoptr(RlxSender) sender = rlx_sender_new (RLX_LINK (link), 1, 3, 0);
  Drops drops = { 0 };

  g_signal_connect (sender, "dropped", G_CALLBACK (on_dropped), &drops);

  send_ok (sender, RLX_SEND_CONTROL, "c0");      /* in flight */
  send_ok (sender, RLX_SEND_CONTROL, "c1");
  send_ok (sender, RLX_SEND_BULK, "g1");
  send_ok (sender, RLX_SEND_CONTROL, "c2");
  send_ok (sender, RLX_SEND_CONTROL, "c3");      /* 3 control queued: full */
  g_assert_cmpuint (drops.calls, ==, 0);
  send_ok (sender, RLX_SEND_CONTROL, "c4");      /* drops c1, the oldest queued */
  g_assert_cmpuint (drops.calls, ==, 1);
  g_assert_cmpuint (drops.klass, ==, RLX_SEND_CONTROL);
  g_assert_cmpuint (drops.why, ==, RLX_SEND_DROP_QUEUE_FULL);
  g_assert_cmpstr (drops.peer, ==, "mock");
  g_assert_cmpuint (drops.total, ==, 1);
  g_assert_nonnull (strstr (drops.reason, "oldest"));
  send_ok (sender, RLX_SEND_CONTROL, "c5");      /* drops c2 */
  g_assert_cmpuint (drops.total, ==, 2);
  g_assert_cmpuint (rlx_sender_get_dropped (sender, RLX_SEND_CONTROL), ==, 2);
  g_assert_cmpuint (rlx_sender_get_dropped (sender, RLX_SEND_BULK), ==, 0);
  g_assert_cmpuint (rlx_sender_get_queued (sender, RLX_SEND_CONTROL), ==, 3);
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 5);   /* c0 + g1 c3 c4 c5 */

  drain_all (link);
  {
    g_autofree char *w = written (link);
    /* order kept among what was sent; the bulk frame never dropped */
    g_assert_cmpstr (w, ==, "c0,g1,c3,c4,c5");
  }
  drops_clear (&drops);
}

static void
on_notify_count (GObject *object, GParamSpec *pspec, gpointer user_data)
{
  (*(guint *) user_data)++;
}

static void
test_bulk_backpressure (void)
{
  g_autoptr(MockLink) link = g_object_new (MOCK_TYPE_LINK, NULL);
  g_autoptr(RlxSender) sender = rlx_sender_new (RLX_LINK (link), 1, 0, 2);
  g_autoptr(GBytes) extra = text ("g3");
  g_autoptr(GError) error = NULL;
  guint depth_notifies = 0;
  Drops drops = { 0 };

  g_signal_connect (sender, "dropped", G_CALLBACK (on_dropped), &drops);

  send_ok (sender, RLX_SEND_BULK, "g0");         /* in flight */
  send_ok (sender, RLX_SEND_BULK, "g1");
  send_ok (sender, RLX_SEND_BULK, "g2");         /* 2 queued: full */
  g_assert_false (rlx_sender_can_send_bulk (sender));
  g_assert_false (rlx_sender_send (sender, RLX_SEND_BULK, extra, &error));
  g_assert_error (error, RLX_SENDER_ERROR, RLX_SENDER_ERROR_FULL);
  g_clear_error (&error);
  g_assert_cmpuint (drops.calls, ==, 0);
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 3);

  /* Control still goes (it is small and keeps order). */
  send_ok (sender, RLX_SEND_CONTROL, "hb");

  /* The depth property tells the caller when to retry. */
  {
    gulong id = g_signal_connect (sender, "notify::depth",
                                  G_CALLBACK (on_notify_count), &depth_notifies);
    g_assert_true (mock_drain_one (link));       /* g0 out, g1 in flight */
    g_assert_cmpuint (depth_notifies, ==, 1);
    g_signal_handler_disconnect (sender, id);
  }
  g_assert_true (rlx_sender_can_send_bulk (sender));
  g_assert_true (rlx_sender_send (sender, RLX_SEND_BULK, extra, &error));
  g_assert_no_error (error);

  drain_all (link);
  {
    g_autofree char *w = written (link);
    g_assert_cmpstr (w, ==, "g0,g1,g2,hb,g3");
  }
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 0);
  drops_clear (&drops);
}

/* Frames still queued when the link closes are reported, oldest first. */
static void
test_closed_link (void)
{
  g_autoptr(MockLink) link = g_object_new (MOCK_TYPE_LINK, NULL);
  g_autoptr(RlxSender) sender = rlx_sender_new (RLX_LINK (link), 1, 0, 0);
  g_autoptr(GBytes) f = text ("late");
  g_autoptr(GError) error = NULL;
  Drops drops = { 0 };

  g_signal_connect (sender, "dropped", G_CALLBACK (on_dropped), &drops);
  send_ok (sender, RLX_SEND_CONTROL, "a");       /* in flight: the link's now */
  send_ok (sender, RLX_SEND_STEP, "s");
  send_ok (sender, RLX_SEND_BULK, "g");
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 3);
  rlx_link_close (RLX_LINK (link));
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 0);
  g_assert_cmpuint (drops.calls, ==, 2);
  g_assert_cmpuint (drops.klass, ==, RLX_SEND_BULK);     /* the last reported: g */
  g_assert_cmpuint (drops.why, ==, RLX_SEND_DROP_LINK_CLOSED);
  g_assert_cmpuint (rlx_sender_get_dropped (sender, RLX_SEND_STEP), ==, 1);
  g_assert_cmpuint (rlx_sender_get_dropped (sender, RLX_SEND_BULK), ==, 1);
  g_assert_cmpstr (drops.peer, ==, "mock");
  g_assert_nonnull (strstr (drops.reason, "closed"));
  g_assert_false (rlx_sender_send (sender, RLX_SEND_CONTROL, f, &error));
  g_assert_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED);
  g_assert_false (rlx_sender_can_send_bulk (sender));
  drops_clear (&drops);
}

/* A frame the link refuses (over its cap) is a reported drop, bulk too. */
static void
test_link_refuses (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(RlxSender) sender = NULL;
  g_autoptr(GBytes) big = g_bytes_new_take (g_malloc0 (2000), 2000);
  Drops drops = { 0 };

  g_assert_true (rlx_unix_link_new_pair (1000, &a, &b, NULL));
  sender = rlx_sender_new (a, 1, 0, 0);
  g_signal_connect (sender, "dropped", G_CALLBACK (on_dropped), &drops);
  g_assert_true (rlx_sender_send (sender, RLX_SEND_BULK, big, NULL));
  g_assert_cmpuint (drops.calls, ==, 1);
  g_assert_cmpuint (drops.klass, ==, RLX_SEND_BULK);
  g_assert_cmpuint (drops.why, ==, RLX_SEND_DROP_LINK_REFUSED);
  g_assert_cmpstr (drops.peer, ==, "socketpair end a");
  g_assert_nonnull (strstr (drops.reason, "2000"));
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 0);
  rlx_link_close (a);
  rlx_link_close (b);
  drops_clear (&drops);
}

/* ── lanes ──────────────────────────────────────────────────────────── */

/* A mock link with lanes: two wires the test drains by hand. */
#define MOCK_TYPE_LANE_LINK (mock_lane_link_get_type ())
G_DECLARE_FINAL_TYPE (MockLaneLink, mock_lane_link, MOCK, LANE_LINK, RlxLink)

struct _MockLaneLink
{
  RlxLink    parent_instance;
  GQueue     wire[RLX_LINK_N_LANES];
  gsize      pending[RLX_LINK_N_LANES];
  GPtrArray *written;
};

G_DEFINE_FINAL_TYPE (MockLaneLink, mock_lane_link, RLX_TYPE_LINK)

static gboolean
mock_lane_send_lane (RlxLink *link, RlxLinkLane lane, GBytes *frame, GError **error)
{
  MockLaneLink *self = MOCK_LANE_LINK (link);

  g_queue_push_tail (&self->wire[lane], g_bytes_ref (frame));
  self->pending[lane] += g_bytes_get_size (frame);
  return TRUE;
}

static gboolean
mock_lane_send (RlxLink *link, GBytes *frame, GError **error)
{
  return mock_lane_send_lane (link, RLX_LINK_LANE_BULK, frame, error);
}

static gsize
mock_lane_pending_lane (RlxLink *link, RlxLinkLane lane)
{
  return MOCK_LANE_LINK (link)->pending[lane];
}

static gsize
mock_lane_pending (RlxLink *link)
{
  return MOCK_LANE_LINK (link)->pending[0] + MOCK_LANE_LINK (link)->pending[1];
}

static void
mock_lane_finalize (GObject *object)
{
  MockLaneLink *self = MOCK_LANE_LINK (object);

  for (guint i = 0; i < RLX_LINK_N_LANES; i++)
    g_queue_clear_full (&self->wire[i], (GDestroyNotify) g_bytes_unref);
  g_ptr_array_unref (self->written);
  G_OBJECT_CLASS (mock_lane_link_parent_class)->finalize (object);
}

static void
mock_lane_link_class_init (MockLaneLinkClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = mock_lane_finalize;
  RLX_LINK_CLASS (klass)->send = mock_lane_send;
  RLX_LINK_CLASS (klass)->send_lane = mock_lane_send_lane;
  RLX_LINK_CLASS (klass)->close = mock_close;
  RLX_LINK_CLASS (klass)->pending_bytes = mock_lane_pending;
  RLX_LINK_CLASS (klass)->pending_bytes_lane = mock_lane_pending_lane;
}

static void
mock_lane_link_init (MockLaneLink *self)
{
  for (guint i = 0; i < RLX_LINK_N_LANES; i++)
    g_queue_init (&self->wire[i]);
  self->written = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  rlx_link_set_peer (RLX_LINK (self), "lanes");
}

static gboolean
mock_lane_drain_one (MockLaneLink *self, RlxLinkLane lane)
{
  GBytes *f = g_queue_pop_head (&self->wire[lane]);

  if (f == NULL)
    return FALSE;
  self->pending[lane] -= g_bytes_get_size (f);
  g_ptr_array_add (self->written, f);
  rlx_link_add_bytes_tx (RLX_LINK (self), g_bytes_get_size (f));
  return TRUE;
}

/* A control-lane frame is not held behind a bulk frame in flight, in the
 * sender; each lane keeps its order and its own in-flight cap. */
static void
test_lanes (void)
{
  g_autoptr(MockLaneLink) link = g_object_new (MOCK_TYPE_LANE_LINK, NULL);
  g_autoptr(RlxSender) sender = rlx_sender_new (RLX_LINK (link), 1, 0, 0);
  g_autoptr(GBytes) g0 = text ("g0");
  g_autoptr(GBytes) g1 = text ("g1");
  g_autoptr(GBytes) hb0 = text ("hb0");
  g_autoptr(GBytes) hb1 = text ("hb1");

  g_assert_true (rlx_sender_send_lane (sender, RLX_SEND_BULK, RLX_LINK_LANE_BULK, g0, NULL));
  g_assert_true (rlx_sender_send_lane (sender, RLX_SEND_BULK, RLX_LINK_LANE_BULK, g1, NULL));
  g_assert_true (rlx_sender_send_lane (sender, RLX_SEND_CONTROL, RLX_LINK_LANE_CONTROL, hb0, NULL));
  g_assert_true (rlx_sender_send_lane (sender, RLX_SEND_CONTROL, RLX_LINK_LANE_CONTROL, hb1, NULL));
  /* one in flight per lane: g0 and hb0 are with the link */
  g_assert_cmpuint (g_queue_get_length (&link->wire[RLX_LINK_LANE_BULK]), ==, 1);
  g_assert_cmpuint (g_queue_get_length (&link->wire[RLX_LINK_LANE_CONTROL]), ==, 1);
  g_assert_cmpuint (rlx_sender_get_in_flight (sender), ==, 2);
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 4);

  /* the control lane drains while the bulk frame is still in flight */
  g_assert_true (mock_lane_drain_one (link, RLX_LINK_LANE_CONTROL));
  g_assert_true (mock_lane_drain_one (link, RLX_LINK_LANE_CONTROL));
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 2);
  g_assert_true (mock_lane_drain_one (link, RLX_LINK_LANE_BULK));
  g_assert_true (mock_lane_drain_one (link, RLX_LINK_LANE_BULK));
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 0);
  g_assert_cmpuint (link->written->len, ==, 4);
  g_assert_true (g_bytes_equal (link->written->pdata[0], hb0));
  g_assert_true (g_bytes_equal (link->written->pdata[1], hb1));
  g_assert_true (g_bytes_equal (link->written->pdata[2], g0));
  g_assert_true (g_bytes_equal (link->written->pdata[3], g1));
}

/* Over a real socket: frames drain by themselves and all arrive in order. */
static void
on_frame_count (RlxLink *link, GBytes *frame, gpointer user_data)
{
  GPtrArray *got = user_data;

  g_ptr_array_add (got, g_bytes_ref (frame));
}

static void
test_real_link (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(RlxSender) sender = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) got = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  gint64 deadline;
  guint n = 40;

  g_assert_true (rlx_unix_link_new_pair (0, &a, &b, &error));
  g_signal_connect (b, "frame", G_CALLBACK (on_frame_count), got);
  sender = rlx_sender_new (a, 1, 0, 64);
  for (guint i = 0; i < n; i++)
    {
      guint8 *data = g_malloc (1 << 20);
      g_autoptr(GBytes) f = NULL;

      memset (data, i, 1 << 20);
      f = g_bytes_new_take (data, 1 << 20);
      g_assert_true (rlx_sender_send (sender, RLX_SEND_BULK, f, &error));
      g_assert_no_error (error);
      g_assert_cmpuint (rlx_sender_get_in_flight (sender), <=, 1);
    }
  deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (got->len < n && g_get_monotonic_time () < deadline)
    {
      g_main_context_iteration (NULL, TRUE);
      g_assert_cmpuint (rlx_sender_get_in_flight (sender), <=, 1);
    }
  g_assert_cmpuint (got->len, ==, n);
  for (guint i = 0; i < n; i++)
    g_assert_cmpuint (((const guint8 *) g_bytes_get_data (got->pdata[i], NULL))[12345], ==, i);
  g_assert_cmpuint (rlx_sender_get_depth (sender), ==, 0);
  rlx_link_close (a);
  rlx_link_close (b);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/p2p/sender/in-flight-cap", test_in_flight_cap);
  g_test_add_func ("/p2p/sender/step-coalesce", test_step_coalesce);
  g_test_add_func ("/p2p/sender/control-drop-oldest", test_control_drop_oldest);
  g_test_add_func ("/p2p/sender/bulk-backpressure", test_bulk_backpressure);
  g_test_add_func ("/p2p/sender/closed-link", test_closed_link);
  g_test_add_func ("/p2p/sender/real-link", test_real_link);
  g_test_add_func ("/p2p/sender/link-refuses", test_link_refuses);
  g_test_add_func ("/p2p/sender/lanes", test_lanes);

  return g_test_run ();
}
