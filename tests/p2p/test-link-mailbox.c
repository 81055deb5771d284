/* test-link-mailbox.c — RlxLinkMailbox between a real I/O thread and the main
 * context: frames cross in order and uncopied, the end comes after them,
 * counters and pending bytes, progress without a frame, the bounded inbox,
 * detaching, the end of the I/O side.
 *
 * The link is a minimal RlxLink subclass (the mailbox's only view of a link
 * is the base class); the I/O side's calls run on a real RlxIoThread.
 */
#include "rlx-config.h"
#include "core/p2p/rlx-io-thread.h"
#include "core/p2p/rlx-link-mailbox.h"

#include <string.h>

/* ── a link that is only its base class ──────────────────────────────── */

#define TEST_TYPE_LINK (test_link_get_type ())
G_DECLARE_FINAL_TYPE (TestLink, test_link, TEST, LINK, RlxLink)

struct _TestLink
{
  RlxLink parent_instance;
};

G_DEFINE_FINAL_TYPE (TestLink, test_link, RLX_TYPE_LINK)

static gboolean
test_link_send (RlxLink *link, GBytes *frame, GError **error)
{
  return TRUE;
}

static void
test_link_class_init (TestLinkClass *klass)
{
  RLX_LINK_CLASS (klass)->send = test_link_send;
}

static void
test_link_init (TestLink *self)
{
}

/* ── fixture ─────────────────────────────────────────────────────────── */

typedef struct {
  RlxIoThread    *thread;
  RlxLink        *link;
  RlxLinkMailbox *mb;
  /* seen on the main context */
  GPtrArray      *frames;     /* GBytes* */
  GArray         *lanes;      /* RlxLinkLane */
  guint           closed;
  GError         *close_error;
  guint           frames_at_close;
  guint           tx_notifies;
  /* seen on the I/O thread, under lock */
  GMutex          lock;
  GCond           cond;
  guint           io_calls;
  gboolean        io_on_wrong_thread;
} Fixture;

static void
on_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  Fixture *fx = user_data;
  RlxLinkLane lane = rlx_link_get_rx_lane (link);

  g_ptr_array_add (fx->frames, g_bytes_ref (frame));
  g_array_append_val (fx->lanes, lane);
}

static void
on_closed (RlxLink *link, const GError *error, gpointer user_data)
{
  Fixture *fx = user_data;

  fx->closed++;
  fx->frames_at_close = fx->frames->len;
  g_clear_error (&fx->close_error);
  fx->close_error = error ? g_error_copy (error) : NULL;
}

static void
on_tx (GObject *object, GParamSpec *pspec, gpointer user_data)
{
  ((Fixture *) user_data)->tx_notifies++;
}

static void
io_func (gpointer data)
{
  Fixture *fx = data;

  g_mutex_lock (&fx->lock);
  fx->io_calls++;
  if (!rlx_io_thread_is_current (fx->thread))
    fx->io_on_wrong_thread = TRUE;
  g_cond_signal (&fx->cond);
  g_mutex_unlock (&fx->lock);
}

static void
fixture_set_up (Fixture *fx, gconstpointer data)
{
  fx->thread = rlx_io_thread_new ("test-link-io");
  fx->link = g_object_new (TEST_TYPE_LINK, NULL);
  rlx_link_set_peer (fx->link, "test peer");
  fx->frames = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  fx->lanes = g_array_new (FALSE, FALSE, sizeof (RlxLinkLane));
  g_mutex_init (&fx->lock);
  g_cond_init (&fx->cond);
  g_signal_connect (fx->link, "frame", G_CALLBACK (on_frame), fx);
  g_signal_connect (fx->link, "closed", G_CALLBACK (on_closed), fx);
  g_signal_connect (fx->link, "notify::bytes-tx", G_CALLBACK (on_tx), fx);
  fx->mb = rlx_link_mailbox_new (fx->link, rlx_io_thread_get_context (fx->thread), io_func, fx,
                                 NULL);
  g_assert_nonnull (fx->mb);
}

/* Run @func (fx) on the I/O thread and wait until it has returned. */
typedef struct {
  void   (*func) (Fixture *fx);
  Fixture *fx;
  GMutex   lock;
  GCond    cond;
  gboolean done;
} OnIo;

static gboolean
on_io_cb (gpointer data)
{
  OnIo *c = data;

  c->func (c->fx);
  g_mutex_lock (&c->lock);
  c->done = TRUE;
  g_cond_signal (&c->cond);
  g_mutex_unlock (&c->lock);
  return G_SOURCE_REMOVE;
}

static void
run_on_io (Fixture *fx, void (*func) (Fixture *fx))
{
  OnIo c = { func, fx };
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  g_mutex_init (&c.lock);
  g_cond_init (&c.cond);
  g_main_context_invoke (rlx_io_thread_get_context (fx->thread), on_io_cb, &c);
  g_mutex_lock (&c.lock);
  while (!c.done)
    g_assert_true (g_cond_wait_until (&c.cond, &c.lock, deadline));
  g_mutex_unlock (&c.lock);
  g_mutex_clear (&c.lock);
  g_cond_clear (&c.cond);
}

static void
io_end (Fixture *fx)
{
  rlx_link_mailbox_io_done (fx->mb);
}

static void
fixture_tear_down (Fixture *fx, gconstpointer data)
{
  run_on_io (fx, io_end);
  rlx_link_mailbox_detach (fx->mb);
  rlx_link_mailbox_unref (fx->mb);
  g_object_unref (fx->link);
  rlx_io_thread_unref (fx->thread);
  g_ptr_array_unref (fx->frames);
  g_array_unref (fx->lanes);
  g_clear_error (&fx->close_error);
  g_mutex_clear (&fx->lock);
  g_cond_clear (&fx->cond);
}

static gboolean
on_timeout (gpointer user_data)
{
  *(gboolean *) user_data = TRUE;
  return G_SOURCE_REMOVE;
}

/* Iterate the main context until @cond (fx) or 10 s. */
static void
wait_until (Fixture *fx, gboolean (*cond) (Fixture *fx))
{
  gboolean expired = FALSE;
  guint id = g_timeout_add (10000, on_timeout, &expired);

  while (!cond (fx) && !expired)
    g_main_context_iteration (NULL, TRUE);
  g_assert_false (expired);
  g_source_remove (id);
}

/* ── frames in order, uncopied, the end after them ───────────────────── */

#define N_FRAMES 50
static GBytes *pushed[N_FRAMES];

static void
io_push_frames_and_end (Fixture *fx)
{
  for (guint i = 0; i < N_FRAMES; i++)
    {
      g_autofree char *text = g_strdup_printf ("frame %u", i);

      pushed[i] = g_bytes_new (text, strlen (text));
      rlx_link_mailbox_add_rx (fx->mb, g_bytes_get_size (pushed[i]), g_get_monotonic_time ());
      g_assert_true (rlx_link_mailbox_push_frame (fx->mb, i % 3 ? RLX_LINK_LANE_BULK
                                                                 : RLX_LINK_LANE_CONTROL,
                                                  g_bytes_ref (pushed[i])));
    }
  rlx_link_mailbox_push_closed (fx->mb, g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                                                     "the peer sent garbage"));
  /* after the end nothing more arrives */
  rlx_link_mailbox_push_frame (fx->mb, RLX_LINK_LANE_BULK, g_bytes_new_static ("late", 4));
}

static gboolean
is_closed (Fixture *fx)
{
  return fx->closed > 0;
}

static void
test_frames_then_end (Fixture *fx, gconstpointer data)
{
  guint64 rx = 0;

  run_on_io (fx, io_push_frames_and_end);
  wait_until (fx, is_closed);
  g_assert_cmpuint (fx->frames->len, ==, N_FRAMES);
  g_assert_cmpuint (fx->frames_at_close, ==, N_FRAMES);
  for (guint i = 0; i < N_FRAMES; i++)
    {
      /* the very GBytes the I/O side pushed: moved, not copied */
      g_assert_true (fx->frames->pdata[i] == (gpointer) pushed[i]);
      g_assert_cmpuint (g_array_index (fx->lanes, RlxLinkLane, i), ==,
                        i % 3 ? RLX_LINK_LANE_BULK : RLX_LINK_LANE_CONTROL);
      rx += g_bytes_get_size (pushed[i]);
      g_bytes_unref (pushed[i]);
    }
  g_assert_error (fx->close_error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL);
  g_assert_cmpuint (rlx_link_get_bytes_rx (fx->link), ==, rx);
  g_assert_cmpint (rlx_link_get_last_rx (fx->link), >, 0);
  g_assert_true (rlx_link_is_closed (fx->link));
  /* the I/O side reported the end: sends are refused */
  g_assert_true (rlx_link_mailbox_is_ended (fx->mb));
  g_assert_false (rlx_link_mailbox_send (fx->mb, RLX_LINK_LANE_BULK,
                                         g_bytes_new_static ("x", 1), NULL));
}

/* ── held until the owner is ready ───────────────────────────────────── */

static void
io_push_three (Fixture *fx)
{
  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *text = g_strdup_printf ("early %u", i);

      rlx_link_mailbox_add_rx (fx->mb, strlen (text), g_get_monotonic_time ());
      g_assert_true (rlx_link_mailbox_push_frame (fx->mb, RLX_LINK_LANE_CONTROL,
                                                  g_bytes_new (text, strlen (text))));
    }
}

static void
io_push_end (Fixture *fx)
{
  rlx_link_mailbox_push_frame (fx->mb, RLX_LINK_LANE_BULK, g_bytes_new_static ("last", 4));
  rlx_link_mailbox_push_closed (fx->mb, NULL);
}

static gboolean
has_three (Fixture *fx)
{
  return fx->frames->len >= 3;
}

/* A remote link's peer may send its first frame the moment it sees the link
 * up, before this side's ::ready handlers connected to ::frame: while held,
 * nothing is delivered (and so nothing lost); released, all of it, in
 * order. The end is delivered even while held, after what came before. */
static void
test_hold_main (Fixture *fx, gconstpointer data)
{
  rlx_link_mailbox_hold_main (fx->mb);
  run_on_io (fx, io_push_three);
  /* the main source was signalled: dispatch whatever is ready, repeatedly */
  for (guint i = 0; i < 100; i++)
    g_main_context_iteration (NULL, FALSE);
  g_assert_cmpuint (fx->frames->len, ==, 0);
  g_assert_cmpuint (rlx_link_get_bytes_rx (fx->link), ==, 0);

  rlx_link_mailbox_release_main (fx->mb);
  wait_until (fx, has_three);
  g_assert_cmpuint (fx->frames->len, ==, 3);
  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *want = g_strdup_printf ("early %u", i);
      gsize n;
      const char *got = g_bytes_get_data (fx->frames->pdata[i], &n);

      g_assert_cmpmem (got, n, want, strlen (want));
    }
  g_assert_cmpuint (rlx_link_get_bytes_rx (fx->link), ==, 3 * strlen ("early 0"));

  rlx_link_mailbox_hold_main (fx->mb);
  run_on_io (fx, io_push_end);
  wait_until (fx, is_closed);
  g_assert_cmpuint (fx->frames->len, ==, 4);
  g_assert_cmpuint (fx->frames_at_close, ==, 4);
}

/* ── sends, pending bytes, write progress ────────────────────────────── */

static GQueue taken[RLX_LINK_N_LANES];

static void
io_take (Fixture *fx)
{
  rlx_link_mailbox_take (fx->mb, taken);
}

static void
io_write_part (Fixture *fx)
{
  /* 1000 of the bulk frame's 5000 bytes (and 4 bytes of framing) */
  rlx_link_mailbox_add_io_us (fx->mb, 7);
  rlx_link_mailbox_add_tx (fx->mb, RLX_LINK_LANE_BULK, 1000, 1004, 0);
}

static void
io_write_rest (Fixture *fx)
{
  rlx_link_mailbox_add_tx (fx->mb, RLX_LINK_LANE_BULK, 4000, 4008, 1);
  rlx_link_mailbox_add_tx (fx->mb, RLX_LINK_LANE_CONTROL, 10, 14, 1);
}

/* The I/O side's io_func ran (it runs on the I/O thread: wait on a
 * condition, not on the main context). */
static void
wait_io_called (Fixture *fx)
{
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  g_mutex_lock (&fx->lock);
  while (fx->io_calls == 0)
    g_assert_true (g_cond_wait_until (&fx->cond, &fx->lock, deadline));
  g_mutex_unlock (&fx->lock);
}

static gboolean
all_written (Fixture *fx)
{
  return rlx_link_get_bytes_tx (fx->link) == 1004 + 4008 + 14;
}

static gboolean
part_written (Fixture *fx)
{
  return rlx_link_get_bytes_tx (fx->link) == 1004;
}

static void
test_send_and_pending (Fixture *fx, gconstpointer data)
{
  g_autoptr(GBytes) bulk = g_bytes_new_take (g_malloc0 (5000), 5000);
  g_autoptr(GBytes) control = g_bytes_new_take (g_malloc0 (10), 10);
  GBytes *got;

  g_assert_true (rlx_link_mailbox_send (fx->mb, RLX_LINK_LANE_BULK, bulk, NULL));
  g_assert_true (rlx_link_mailbox_send (fx->mb, RLX_LINK_LANE_CONTROL, control, NULL));
  g_assert_cmpuint (rlx_link_mailbox_pending (fx->mb, RLX_LINK_LANE_BULK), ==, 5000);
  g_assert_cmpuint (rlx_link_mailbox_pending (fx->mb, RLX_LINK_LANE_CONTROL), ==, 10);
  /* the I/O side was woken on its own thread, and takes the same GBytes */
  wait_io_called (fx);
  g_assert_false (fx->io_on_wrong_thread);
  run_on_io (fx, io_take);
  g_assert_cmpuint (taken[RLX_LINK_LANE_BULK].length, ==, 1);
  g_assert_cmpuint (taken[RLX_LINK_LANE_CONTROL].length, ==, 1);
  got = g_queue_pop_head (&taken[RLX_LINK_LANE_BULK]);
  g_assert_true (got == bulk);
  g_bytes_unref (got);
  g_bytes_unref (g_queue_pop_head (&taken[RLX_LINK_LANE_CONTROL]));

  /* part of a frame: pending drops at once; bytes-tx comes with the next
   * progress slot */
  run_on_io (fx, io_write_part);
  g_assert_cmpuint (rlx_link_mailbox_pending (fx->mb, RLX_LINK_LANE_BULK), ==, 4000);
  wait_until (fx, part_written);
  g_assert_cmpuint (rlx_link_get_io_us (fx->link), ==, 7);
  /* whole frames: counted as well (within the progress slot) */
  run_on_io (fx, io_write_rest);
  wait_until (fx, all_written);
  g_assert_cmpuint (rlx_link_mailbox_pending (fx->mb, RLX_LINK_LANE_BULK), ==, 0);
  g_assert_cmpuint (rlx_link_mailbox_pending (fx->mb, RLX_LINK_LANE_CONTROL), ==, 0);
  g_assert_cmpuint (fx->tx_notifies, >=, 2);

  /* a close request reaches the I/O side; sends stop */
  rlx_link_mailbox_close (fx->mb, RLX_LINK_MAILBOX_CLOSE_FLUSH);
  g_assert_cmpint (rlx_link_mailbox_get_close (fx->mb), ==, RLX_LINK_MAILBOX_CLOSE_FLUSH);
  rlx_link_mailbox_close (fx->mb, RLX_LINK_MAILBOX_CLOSE_ABORT);
  g_assert_cmpint (rlx_link_mailbox_get_close (fx->mb), ==, RLX_LINK_MAILBOX_CLOSE_ABORT);
  rlx_link_mailbox_close (fx->mb, RLX_LINK_MAILBOX_CLOSE_FLUSH);   /* the stronger stays */
  g_assert_cmpint (rlx_link_mailbox_get_close (fx->mb), ==, RLX_LINK_MAILBOX_CLOSE_ABORT);
  g_assert_false (rlx_link_mailbox_send (fx->mb, RLX_LINK_LANE_BULK, bulk, NULL));
}

/* ── liveness without a whole frame ──────────────────────────────────── */

static gint64 rx_at;

static void
io_read_part (Fixture *fx)
{
  rx_at = g_get_monotonic_time ();
  rlx_link_mailbox_add_rx (fx->mb, 123, rx_at);
}

static gboolean
rx_seen (Fixture *fx)
{
  return rlx_link_get_bytes_rx (fx->link) == 123;
}

static void
test_progress_without_frame (Fixture *fx, gconstpointer data)
{
  run_on_io (fx, io_read_part);
  wait_until (fx, rx_seen);
  /* the time the bytes were read, not the time the main context saw them */
  g_assert_cmpint (rlx_link_get_last_rx (fx->link), ==, rx_at);
  g_assert_cmpuint (fx->frames->len, ==, 0);
}

/* ── the bounded inbox ───────────────────────────────────────────────── */

static guint accepted;
static gboolean full_after;

static void
io_flood (Fixture *fx)
{
  /* tiny frames: the frame count bounds them */
  accepted = 0;
  while (rlx_link_mailbox_push_frame (fx->mb, RLX_LINK_LANE_BULK, g_bytes_new_static ("f", 1)))
    {
      accepted++;
      g_assert_cmpuint (accepted, <=, RLX_LINK_MAILBOX_INBOX_FRAMES);
    }
  accepted++;
  full_after = rlx_link_mailbox_inbox_full (fx->mb);
  g_mutex_lock (&fx->lock);
  fx->io_calls = 0;
  g_mutex_unlock (&fx->lock);
}

static void
io_check_room (Fixture *fx)
{
  full_after = rlx_link_mailbox_inbox_full (fx->mb);
}

static gboolean
flood_delivered (Fixture *fx)
{
  return fx->frames->len == accepted;
}

static void
test_inbox_full (Fixture *fx, gconstpointer data)
{
  run_on_io (fx, io_flood);
  g_assert_cmpuint (accepted, ==, RLX_LINK_MAILBOX_INBOX_FRAMES);
  g_assert_true (full_after);
  /* the main context takes them; the I/O side is told there is room */
  wait_until (fx, flood_delivered);
  wait_io_called (fx);
  run_on_io (fx, io_check_room);
  g_assert_false (full_after);
}

/* ── detached: nothing more is delivered ─────────────────────────────── */

static void
io_push_one (Fixture *fx)
{
  rlx_link_mailbox_push_frame (fx->mb, RLX_LINK_LANE_BULK, g_bytes_new_static ("after", 5));
  rlx_link_mailbox_add_rx (fx->mb, 5, g_get_monotonic_time ());
}

static gboolean
main_context_idle (gpointer user_data)
{
  *(gboolean *) user_data = TRUE;
  return G_SOURCE_REMOVE;
}

static void
test_detach (Fixture *fx, gconstpointer data)
{
  gboolean idle = FALSE;

  rlx_link_mailbox_detach (fx->mb);
  run_on_io (fx, io_push_one);
  /* an idle of lower priority runs after any ready source of ours would */
  g_idle_add_full (G_PRIORITY_LOW, main_context_idle, &idle, NULL);
  while (!idle)
    g_main_context_iteration (NULL, TRUE);
  g_assert_cmpuint (fx->frames->len, ==, 0);
  g_assert_cmpuint (rlx_link_get_bytes_rx (fx->link), ==, 0);
}

/* ── the I/O side ends: pending drops, sends are refused ─────────────── */

static void
test_io_done (Fixture *fx, gconstpointer data)
{
  g_autoptr(GBytes) f = g_bytes_new_static ("queued", 6);
  g_autoptr(GError) error = NULL;

  g_assert_true (rlx_link_mailbox_send (fx->mb, RLX_LINK_LANE_BULK, f, NULL));
  g_assert_cmpuint (rlx_link_mailbox_pending (fx->mb, RLX_LINK_LANE_BULK), ==, 6);
  run_on_io (fx, io_end);
  g_assert_cmpuint (rlx_link_mailbox_pending (fx->mb, RLX_LINK_LANE_BULK), ==, 0);
  g_assert_false (rlx_link_mailbox_send (fx->mb, RLX_LINK_LANE_BULK, f, &error));
  g_assert_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED);
  g_assert_nonnull (strstr (error->message, "test peer"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

#define ADD(path, func) \
  g_test_add ("/p2p/mailbox/" path, Fixture, NULL, fixture_set_up, func, fixture_tear_down)
  ADD ("frames-then-end", test_frames_then_end);
  ADD ("send-and-pending", test_send_and_pending);
  ADD ("progress-without-frame", test_progress_without_frame);
  ADD ("inbox-full", test_inbox_full);
  ADD ("detach", test_detach);
  ADD ("io-done", test_io_done);
  ADD ("hold-main", test_hold_main);
#undef ADD

  return g_test_run ();
}
