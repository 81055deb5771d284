/* test-link.c — RlxLink over Unix sockets: order, large frames, counters,
 * close once, frame cap both ways, truncated streams, flush on close, uid.
 */
#include "rlx-config.h"
#include "core/p2p/rlx-link.h"
#include "core/p2p/rlx-unix-link.h"

#include <errno.h>
#include <string.h>
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

static GBytes *
pattern_frame (gsize len, guint seed)
{
  guint8 *data = g_malloc (len > 0 ? len : 1);

  for (gsize i = 0; i < len; i++)
    data[i] = (guint8) ((i * 31 + seed * 7 + (i >> 8)) & 0xff);
  return g_bytes_new_take (data, len);
}

static void
test_order_and_large (void)
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
  sink_init (&sa, a);
  sink_init (&sb, b);

  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      GBytes *f = pattern_frame (sizes[i], i);

      g_assert_true (rlx_link_send (a, f, &error));
      g_assert_no_error (error);
      g_ptr_array_add (sent, f);
      payload += sizes[i];
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

  /* Counters include the 4-byte prefix of every frame. */
  g_assert_cmpuint (rlx_link_get_bytes_tx (a), ==, payload + 4 * sent->len);
  g_assert_cmpuint (rlx_link_get_bytes_rx (b), ==, payload + 4 * sent->len);
  g_assert_cmpuint (rlx_link_get_bytes_rx (a), ==, (4 << 20) + 4);
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

/* Frames queued just before close still reach the peer (a bye). */
static void
test_flush_on_close (void)
{
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) big = pattern_frame (8 << 20, 5);
  g_autoptr(GBytes) bye = g_bytes_new_static ("bye", 3);
  Sink sb;

  g_assert_true (rlx_unix_link_new_pair (0, &a, &b, &error));
  sink_init (&sb, b);
  g_assert_true (rlx_link_send (a, big, &error));
  g_assert_true (rlx_link_send (a, bye, &error));
  g_assert_cmpuint (rlx_link_pending_bytes (a), >, 0);  /* 8 MB cannot go at once */
  rlx_link_close (a);
  g_clear_object (&a);     /* the link keeps itself alive while flushing */

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
  guint8 bytes[] = { 0xff, 0xff, 0xff, 0xff };   /* 4 GiB - 1: never allocated */
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
  g_test_add_func ("/p2p/link/close-once", test_close_once);
  g_test_add_func ("/p2p/link/flush-on-close", test_flush_on_close);
  g_test_add_func ("/p2p/link/send-too-large", test_send_too_large);
  g_test_add_func ("/p2p/link/receive-too-large", test_receive_too_large);
  g_test_add_func ("/p2p/link/huge-prefix", test_huge_prefix_default_cap);
  g_test_add_func ("/p2p/link/truncated-frame", test_truncated_frame);
  g_test_add_func ("/p2p/link/close-in-handler", test_close_in_handler);
  g_test_add_func ("/p2p/link/peer-uid", test_peer_uid);

  return g_test_run ();
}
