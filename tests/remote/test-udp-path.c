/* test-udp-path.c — RlxUdpPath on real UDP sockets over loopback
 *
 * A "peer" socket sends to a socket that an RlxUdpPath reads (as the remote
 * link reads the selected ICE pair's socket). What is checked: STUN is told
 * from QUIC as libnice does (greased QUIC bits included); GRO trains are cut
 * back into the datagrams that were sent, in order, contents intact; a GSO
 * send from the path arrives as the datagrams it was given; a STUN request,
 * or a datagram from another address, is dropped and reported (the owner
 * gives reading back to libnice) while the QUIC datagrams around it still
 * arrive; a keepalive indication is dropped silently; while the path reads,
 * a lower-priority source on the same socket (libnice's) never gets a
 * datagram; stopping delivers what waits and turns GRO off.
 */
#include "rlx-config.h"
#include "core/p2p/rlx-udp-path.h"
#include "remote-test.h"

#include <errno.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <arpa/inet.h>
#include <glib-unix.h>
#include <poll.h>
#include <unistd.h>

#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* ── classification and cutting ─────────────────────────────────────────── */

static gsize
stun_message (guint8 *buf, guint16 type, gsize attr_len)
{
  memset (buf, 0xAB, 20 + attr_len);
  buf[0] = (guint8) (type >> 8);
  buf[1] = (guint8) type;
  buf[2] = (guint8) (attr_len >> 8);
  buf[3] = (guint8) attr_len;
  buf[4] = 0x21;
  buf[5] = 0x12;
  buf[6] = 0xA4;
  buf[7] = 0x42;
  return 20 + attr_len;
}

static void
test_classify (void)
{
  guint8 b[128];
  gsize n;

  /* Binding request, success response, error response: libnice's. */
  n = stun_message (b, 0x0001, 24);
  g_assert_cmpint (rlx_udp_datagram_classify (b, n), ==, RLX_UDP_DATAGRAM_STUN);
  n = stun_message (b, 0x0101, 12);
  g_assert_cmpint (rlx_udp_datagram_classify (b, n), ==, RLX_UDP_DATAGRAM_STUN);
  n = stun_message (b, 0x0111, 8);
  g_assert_cmpint (rlx_udp_datagram_classify (b, n), ==, RLX_UDP_DATAGRAM_STUN);
  /* Binding indication: a keepalive. */
  n = stun_message (b, 0x0011, 8);
  g_assert_cmpint (rlx_udp_datagram_classify (b, n), ==, RLX_UDP_DATAGRAM_STUN_INDICATION);
  /* Not STUN: wrong cookie, a length that does not cover the rest, too
   * short — all QUIC's to judge, like a greased short header (0x12…) and a
   * long header. */
  n = stun_message (b, 0x0001, 24);
  b[6] = 0;
  g_assert_cmpint (rlx_udp_datagram_classify (b, n), ==, RLX_UDP_DATAGRAM_QUIC);
  n = stun_message (b, 0x0001, 24);
  g_assert_cmpint (rlx_udp_datagram_classify (b, n + 4), ==, RLX_UDP_DATAGRAM_QUIC);
  g_assert_cmpint (rlx_udp_datagram_classify (b, 12), ==, RLX_UDP_DATAGRAM_QUIC);
  memset (b, 0x12, sizeof b);
  g_assert_cmpint (rlx_udp_datagram_classify (b, 100), ==, RLX_UDP_DATAGRAM_QUIC);
  b[0] = 0xC3;
  g_assert_cmpint (rlx_udp_datagram_classify (b, 100), ==, RLX_UDP_DATAGRAM_QUIC);
  g_assert_cmpint (rlx_udp_datagram_classify (b, 0), ==, RLX_UDP_DATAGRAM_JUNK);
}

static void
test_split (void)
{
  guint8 b[100] = { 0 };
  RlxDatagram d[8];

  g_assert_cmpuint (rlx_udp_split (b, 100, 30, d, 8), ==, 4);
  g_assert_true (d[0].data == b && d[0].len == 30);
  g_assert_true (d[3].data == b + 90 && d[3].len == 10);
  g_assert_cmpuint (rlx_udp_split (b, 90, 30, d, 8), ==, 3);
  g_assert_cmpuint (d[2].len, ==, 30);
  g_assert_cmpuint (rlx_udp_split (b, 100, 0, d, 8), ==, 1);
  g_assert_cmpuint (d[0].len, ==, 100);
  g_assert_cmpuint (rlx_udp_split (b, 100, 500, d, 8), ==, 1);
  g_assert_cmpuint (rlx_udp_split (b, 100, 10, d, 4), ==, 4);
  g_assert_cmpuint (rlx_udp_split (b, 0, 10, d, 4), ==, 0);
}

/* ── on sockets ─────────────────────────────────────────────────────────── */

typedef struct {
  int           rx;          /* the socket the path reads (libnice's, in the link) */
  int           peer;        /* the selected remote */
  int           other;       /* another address */
  struct sockaddr_in rx_addr, peer_addr;
  RlxUdpPath   *path;
  GPtrArray    *got;         /* GBytes* */
  guint         batches;
  gsize         bytes;
  GPtrArray    *strays;      /* char* */
  gboolean      stop_on_stray;
  guint         rival_reads; /* datagrams the lower-priority source read */
} Fixture;

static int
udp_socket (struct sockaddr_in *addr)
{
  int fd = socket (AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  socklen_t len = sizeof *addr;
  int size = 4 << 20;

  g_assert_cmpint (fd, >=, 0);
  memset (addr, 0, sizeof *addr);
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl (INADDR_LOOPBACK);
  g_assert_cmpint (bind (fd, (struct sockaddr *) addr, sizeof *addr), ==, 0);
  g_assert_cmpint (getsockname (fd, (struct sockaddr *) addr, &len), ==, 0);
  (void) setsockopt (fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  return fd;
}

static void
fixture_init (Fixture *f)
{
  struct sockaddr_in other_addr;

  memset (f, 0, sizeof *f);
  f->rx = udp_socket (&f->rx_addr);
  f->peer = udp_socket (&f->peer_addr);
  f->other = udp_socket (&other_addr);
  f->path = rlx_udp_path_new (f->rx, (struct sockaddr *) &f->peer_addr, sizeof f->peer_addr);
  f->got = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  f->strays = g_ptr_array_new_with_free_func (g_free);
}

static void
fixture_clear (Fixture *f)
{
  g_clear_pointer (&f->path, rlx_udp_path_free);
  close (f->rx);
  close (f->peer);
  close (f->other);
  g_ptr_array_unref (f->got);
  g_ptr_array_unref (f->strays);
}

static void
on_datagrams (const RlxDatagram *d, guint n, gsize bytes, gpointer user_data)
{
  Fixture *f = user_data;

  for (guint i = 0; i < n; i++)
    g_ptr_array_add (f->got, g_bytes_new (d[i].data, d[i].len));
  f->batches++;
  f->bytes += bytes;
}

static void
on_stray (const char *what, gpointer user_data)
{
  Fixture *f = user_data;

  g_ptr_array_add (f->strays, g_strdup (what));
  if (f->stop_on_stray)
    rlx_udp_path_stop_receive (f->path, TRUE);
}

static const RlxUdpPathCallbacks callbacks = {
  .datagrams = on_datagrams,
  .stray = on_stray,
};

/* Datagram i: length len, bytes i, i+1, … from a QUIC-looking first byte. */
static void
fill (guint8 *buf, gsize len, guint i)
{
  buf[0] = 0x40 | (i & 0x3F);
  for (gsize k = 1; k < len; k++)
    buf[k] = (guint8) (i + k);
}

static void
check_datagram (Fixture *f, guint index, gsize len, guint i)
{
  g_autofree guint8 *want = g_malloc (len);
  gsize got_len;
  const guint8 *got;

  g_assert_cmpuint (index, <, f->got->len);
  got = g_bytes_get_data (f->got->pdata[index], &got_len);
  fill (want, len, i);
  g_assert_cmpuint (got_len, ==, len);
  g_assert_true (memcmp (got, want, len) == 0);
}

static void
send_from (int fd, Fixture *f, const guint8 *buf, gsize len)
{
  g_assert_cmpint (sendto (fd, buf, len, 0, (struct sockaddr *) &f->rx_addr, sizeof f->rx_addr),
                   ==, (gssize) len);
}

static void
test_gso_to_gro (void)
{
  Fixture f;
  g_autoptr(RlxUdpPath) out = NULL;
  guint8 bufs[12][1400];
  RlxDatagram d[12];
  guint sent = 0;

  fixture_init (&f);
  /* The peer sends with an RlxUdpPath of its own: 11 full datagrams and a
   * short one, which GSO sends as one train. */
  out = rlx_udp_path_new (f.peer, (struct sockaddr *) &f.rx_addr, sizeof f.rx_addr);
  for (guint i = 0; i < 12; i++)
    {
      fill (bufs[i], i == 11 ? 300 : 1400, i);
      d[i].data = bufs[i];
      d[i].len = i == 11 ? 300 : 1400;
    }
  rlx_udp_path_start_receive (f.path, NULL, G_PRIORITY_DEFAULT, &callbacks, &f);
  g_assert_true (rlx_udp_path_is_receiving (f.path));
  while (sent < 12)
    {
      gint n = rlx_udp_path_send (out, d + sent, 12 - sent);
      if (n < 0)
        {
          g_test_skip ("the kernel refuses UDP GSO on loopback");
          fixture_clear (&f);
          return;
        }
      g_assert_cmpint (n, >, 0);
      sent += (guint) n;
    }
  WAIT_FOR (f.got->len >= 12, 5000, "12 datagrams");
  g_assert_cmpuint (f.got->len, ==, 12);
  for (guint i = 0; i < 12; i++)
    check_datagram (&f, i, i == 11 ? 300 : 1400, i);
  g_assert_cmpuint (f.bytes, ==, 11 * 1400 + 300);
  g_assert_cmpuint (f.strays->len, ==, 0);
  if (rlx_udp_path_has_gro (f.path))
    g_assert_cmpuint (f.batches, <, 12);   /* the train came in one read */
  fixture_clear (&f);
}

static void
test_stun_and_strangers (void)
{
  Fixture f;
  guint8 buf[1400];
  gsize n;

  fixture_init (&f);
  rlx_udp_path_start_receive (f.path, NULL, G_PRIORITY_DEFAULT, &callbacks, &f);

  /* A keepalive indication between two datagrams: dropped, nothing said. */
  fill (buf, 1000, 1);
  send_from (f.peer, &f, buf, 1000);
  n = stun_message (buf, 0x0011, 8);
  send_from (f.peer, &f, buf, n);
  fill (buf, 1000, 2);
  send_from (f.peer, &f, buf, 1000);
  WAIT_FOR (f.got->len >= 2, 5000, "the datagrams around a keepalive");
  check_datagram (&f, 0, 1000, 1);
  check_datagram (&f, 1, 1000, 2);
  g_assert_cmpuint (f.strays->len, ==, 0);

  /* A datagram from another address: dropped and reported. */
  fill (buf, 900, 3);
  send_from (f.other, &f, buf, 900);
  WAIT_FOR (f.strays->len >= 1, 5000, "a datagram from another address reported");
  g_assert_cmpstr (f.strays->pdata[0], ==, "a datagram from another address");
  g_assert_cmpuint (f.got->len, ==, 2);

  /* A binding request from the peer: dropped and reported; the datagrams
   * before and after it are delivered (the owner stops at the report, and
   * stopping delivers what waits). */
  f.stop_on_stray = TRUE;
  fill (buf, 700, 4);
  send_from (f.peer, &f, buf, 700);
  n = stun_message (buf, 0x0001, 24);
  send_from (f.peer, &f, buf, n);
  fill (buf, 700, 5);
  send_from (f.peer, &f, buf, 700);
  WAIT_FOR (f.strays->len >= 2, 5000, "a STUN request reported");
  g_assert_cmpstr (f.strays->pdata[1], ==, "a STUN request or response");
  WAIT_FOR (f.got->len >= 4, 5000, "the datagrams around the STUN request");
  check_datagram (&f, 2, 700, 4);
  check_datagram (&f, 3, 700, 5);
  g_assert_false (rlx_udp_path_is_receiving (f.path));
  fixture_clear (&f);
}

static gboolean
on_rival_readable (gint fd, GIOCondition condition, gpointer user_data)
{
  Fixture *f = user_data;
  guint8 buf[65536];

  while (recv (fd, buf, sizeof buf, MSG_DONTWAIT) >= 0)
    f->rival_reads++;
  return G_SOURCE_CONTINUE;
}

static void
wait_readable (int fd)
{
  struct pollfd p = { fd, POLLIN, 0 };

  g_assert_cmpint (poll (&p, 1, 5000), ==, 1);
}

static void
test_priority_and_stop (void)
{
  Fixture f;
  GSource *rival;
  guint8 buf[1200];
  guint before;
  int gro = -1;
  socklen_t len = sizeof gro;

  fixture_init (&f);
  /* libnice's source: the same socket, default priority, attached first. */
  rival = g_unix_fd_source_new (f.rx, G_IO_IN);
  g_source_set_callback (rival, G_SOURCE_FUNC (on_rival_readable), &f, NULL);
  g_source_attach (rival, NULL);
  rlx_udp_path_start_receive (f.path, NULL, G_PRIORITY_DEFAULT - 10, &callbacks, &f);
  for (guint i = 0; i < 2000; i++)
    {
      fill (buf, sizeof buf, i);
      send_from (f.peer, &f, buf, sizeof buf);
      if (i % 100 == 99)
        g_main_context_iteration (NULL, FALSE);
    }
  WAIT_FOR (f.got->len >= 2000, 10000, "2000 datagrams");
  g_assert_cmpuint (f.got->len, ==, 2000);
  g_assert_cmpuint (f.rival_reads, ==, 0);
  for (guint i = 0; i < 2000; i += 199)
    check_datagram (&f, i, sizeof buf, i);

  /* Stopping delivers what waits (at least the datagram poll saw), turns
   * GRO off, and leaves the socket to the other reader. */
  for (guint i = 0; i < 5; i++)
    {
      fill (buf, sizeof buf, 2000 + i);
      send_from (f.peer, &f, buf, sizeof buf);
    }
  wait_readable (f.rx);
  before = f.got->len;
  rlx_udp_path_stop_receive (f.path, TRUE);
  g_assert_cmpuint (f.got->len, >, before);
  g_assert_false (rlx_udp_path_is_receiving (f.path));
  g_assert_cmpint (getsockopt (f.rx, SOL_UDP, UDP_GRO, &gro, &len), ==, 0);
  g_assert_cmpint (gro, ==, 0);
  for (guint i = 2000; i < f.got->len; i++)
    check_datagram (&f, i, sizeof buf, i);
  fill (buf, sizeof buf, 3000);
  send_from (f.peer, &f, buf, sizeof buf);
  /* Every datagram is read once, by one reader or the other. */
  WAIT_FOR (f.got->len + f.rival_reads == 2006, 5000, "the other reader to read again");
  g_assert_cmpuint (f.rival_reads, >=, 1);
  g_source_destroy (rival);
  g_source_unref (rival);
  fixture_clear (&f);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/udp-path/classify", test_classify);
  g_test_add_func ("/udp-path/split", test_split);
  g_test_add_func ("/udp-path/gso-to-gro", test_gso_to_gro);
  g_test_add_func ("/udp-path/stun-and-strangers", test_stun_and_strangers);
  g_test_add_func ("/udp-path/priority-and-stop", test_priority_and_stop);
  return g_test_run ();
}
