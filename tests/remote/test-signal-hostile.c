/* test-signal-hostile.c — keyless attacks on a real signalling server
 *
 * Issue 29, items 1–4, each against a real RlxSignalServer (or a real
 * `rlx-rank signal` process) over real sockets on 127.0.0.0/8. Attackers
 * connect from 127.0.0.2 and up (every 127/8 address is loopback on Linux),
 * the legitimate client from 127.0.0.1, so per-address caps are what they
 * are on a network. Every attack is bounded in count and time, and every
 * wait has a deadline.
 *   - idle connections before the upgrade are capped (per address and in
 *     all), and the legitimate client still joins;
 *   - an accept that fails for want of descriptors is retried, in process
 *     (the soft limit lowered under the server) and in an `rlx-rank signal`
 *     child whose limit was lowered with setrlimit, the finding's case;
 *   - slowloris: headers trickled line by line, and silence, are cut at the
 *     header deadline;
 *   - clients that never read are dropped once their queue passes the cap,
 *     and the test process's memory stays bounded;
 *   - a node id is kept by a live holder (a second join is refused) and
 *     taken over only from a holder that does not answer;
 *   - rooms and members flooded from one address leave room for others.
 */
#include "rlx-config.h"
#include "remote-test.h"
#include "core/p2p/rlx-signal-msg.h"
#include "core/p2p/rlx-signal-server.h"
#include "core/p2p/rlx-signal-client.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <gio/gio.h>

/* ── helpers ────────────────────────────────────────────────────────────── */

static gboolean
tick_cb (gpointer user_data)
{
  return G_SOURCE_CONTINUE;
}

/* Like WAIT_FOR, with a wake-up every 20 ms for conditions on our own
 * sockets, which the main loop does not watch. */
#define POLL_FOR(cond, timeout_ms, what) \
  G_STMT_START { \
    guint wake_ = g_timeout_add (20, tick_cb, NULL); \
    WAIT_FOR (cond, timeout_ms, what); \
    g_source_remove (wake_); \
  } G_STMT_END

/* Spin the main loop for @ms. */
static void
spin (guint ms)
{
  gboolean expired = FALSE;

  g_timeout_add (ms, remote_test_expired_cb, &expired);
  while (!expired)
    g_main_context_iteration (NULL, TRUE);
}

static guint64
rss_bytes (GPid pid)
{
  g_autofree char *path = pid ? g_strdup_printf ("/proc/%d/statm", pid) : g_strdup ("/proc/self/statm");
  g_autofree char *text = NULL;
  guint64 size = 0, resident = 0;

  if (!g_file_get_contents (path, &text, NULL, NULL) ||
      sscanf (text, "%" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT, &size, &resident) != 2)
    return 0;
  return resident * (guint64) sysconf (_SC_PAGESIZE);
}

/* A TCP connection from @from (an address of 127/8) to the server, made
 * while the main loop turns (the server may be in this process). Returns a
 * non-blocking socket, or NULL if the connect failed. */
static GSocket *
tcp_socket (const char *from, gint rcvbuf)
{
  g_autoptr(GSocket) s = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                       G_SOCKET_PROTOCOL_TCP, NULL);
  g_autoptr(GInetAddress) la = g_inet_address_new_from_string (from);
  g_autoptr(GSocketAddress) local = g_inet_socket_address_new (la, 0);

  g_assert_nonnull (s);
  if (rcvbuf > 0)
    g_socket_set_option (s, SOL_SOCKET, SO_RCVBUF, rcvbuf, NULL);
  g_assert_true (g_socket_bind (s, local, FALSE, NULL));
  g_socket_set_blocking (s, FALSE);
  return g_steal_pointer (&s);
}

static gboolean
tcp_connect (GSocket *s, guint16 port)
{
  g_autoptr(GInetAddress) ra = g_inet_address_new_from_string ("127.0.0.1");
  g_autoptr(GSocketAddress) remote = g_inet_socket_address_new (ra, port);
  g_autoptr(GError) error = NULL;

  if (!g_socket_connect (s, remote, NULL, &error))
    {
      if (!g_error_matches (error, G_IO_ERROR, G_IO_ERROR_PENDING))
        return FALSE;
      /* A server that stopped accepting leaves connects hanging: give up
       * on this one after a while (the caller sees NULL). */
      gint64 until = g_get_monotonic_time () + 2 * G_USEC_PER_SEC;
      while (!g_socket_condition_check (s, G_IO_OUT | G_IO_ERR | G_IO_HUP) &&
             g_get_monotonic_time () < until)
        {
          if (!g_main_context_iteration (NULL, FALSE))
            g_usleep (1000);
        }
      if (!g_socket_condition_check (s, G_IO_OUT | G_IO_ERR | G_IO_HUP) ||
          !g_socket_check_connect_result (s, NULL))
        return FALSE;
    }
  return TRUE;
}

/* A TCP connection from @from (an address of 127/8) to the server, made
 * while the main loop turns (the server may be in this process). Returns a
 * non-blocking socket, or NULL if the connect failed. */
static GSocket *
tcp_from (const char *from, guint16 port, gint rcvbuf)
{
  g_autoptr(GSocket) s = tcp_socket (from, rcvbuf);

  return tcp_connect (s, port) ? g_steal_pointer (&s) : NULL;
}

/* Whether the server closed @s: read what there is (and drop it); EOF or a
 * reset means closed. */
static gboolean
sock_closed (GSocket *s)
{
  char buf[4096];

  for (;;)
    {
      g_autoptr(GError) error = NULL;
      gssize n = g_socket_receive (s, buf, sizeof buf, NULL, &error);
      if (n > 0)
        continue;
      if (n < 0 && g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
        return FALSE;
      return TRUE;
    }
}

static guint
count_closed (GPtrArray *socks)
{
  guint n = 0;

  for (guint i = 0; i < socks->len; i++)
    n += sock_closed (socks->pdata[i]);
  return n;
}

static void
send_now (GSocket *s, const void *data, gsize len)
{
  const char *p = data;

  while (len > 0)
    {
      g_autoptr(GError) error = NULL;
      gssize n = g_socket_send (s, p, len, NULL, &error);
      if (n < 0 && g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
        {
          g_main_context_iteration (NULL, FALSE);
          continue;
        }
      if (n <= 0)
        return;
      p += n;
      len -= (gsize) n;
    }
}

static const char upgrade_req[] =
  "GET " RLX_SIGNAL_PATH " HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
  "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
  "Sec-WebSocket-Version: 13\r\n\r\n";

/* A masked client text frame. */
static GBytes *
ws_text (const char *text)
{
  GByteArray *f = g_byte_array_new ();
  gsize len = strlen (text);
  guint8 h[4] = { 0x81, 0x80 };
  guint8 mask[4] = { 9, 8, 7, 6 };

  if (len < 126)
    {
      h[1] |= (guint8) len;
      g_byte_array_append (f, h, 2);
    }
  else
    {
      h[1] |= 126;
      h[2] = (guint8) (len >> 8);
      h[3] = (guint8) len;
      g_byte_array_append (f, h, 4);
    }
  g_byte_array_append (f, mask, 4);
  for (gsize i = 0; i < len; i++)
    {
      guint8 b = (guint8) text[i] ^ mask[i % 4];
      g_byte_array_append (f, &b, 1);
    }
  return g_byte_array_free_to_bytes (f);
}

/* A WebSocket client from @from that joins @room as @node and then never
 * reads a byte (nor answers a ping). */
static GSocket *
raw_join (const char *from, guint16 port, const char *room, const char *node, gint rcvbuf)
{
  GSocket *s = tcp_from (from, port, rcvbuf);
  g_autofree char *join = g_strdup_printf ("{\"op\":\"join\",\"v\":%d,\"room\":\"%s\","
                                           "\"node\":\"%s\"}", RLX_SIGNAL_VERSION, room, node);
  g_autoptr(GBytes) f = ws_text (join);

  g_assert_nonnull (s);
  send_now (s, upgrade_req, strlen (upgrade_req));
  send_now (s, g_bytes_get_data (f, NULL), g_bytes_get_size (f));
  return s;
}

static RlxSignalServer *
start_server (const RlxSignalServerLimits *lim)
{
  g_autoptr(GError) error = NULL;
  RlxSignalServer *s = rlx_signal_server_new (lim);

  g_assert_true (rlx_signal_server_listen (s, "127.0.0.1", 0, &error));
  g_assert_no_error (error);
  return s;
}

/* The legitimate joiner: a real RlxSignalClient from 127.0.0.1. */
typedef struct {
  RlxSignalClient *client;
  gboolean         joined;
  guint            messages;
  char            *refused;
} Joiner;

static void
on_j_joined (RlxSignalClient *c, GStrv peers, gpointer user_data)
{
  ((Joiner *) user_data)->joined = TRUE;
}

static void
on_j_message (RlxSignalClient *c, const char *from, JsonNode *sealed, gpointer user_data)
{
  ((Joiner *) user_data)->messages++;
}

static void
on_j_refused (RlxSignalClient *c, const char *reason, gpointer user_data)
{
  Joiner *j = user_data;

  g_free (j->refused);
  j->refused = g_strdup (reason);
}

static void
on_j_lost (RlxSignalClient *c, const GError *error, gpointer user_data)
{
  ((Joiner *) user_data)->joined = FALSE;
}

static void
joiner_start (Joiner *j, guint16 port, const char *room, const char *node)
{
  memset (j, 0, sizeof *j);
  j->client = rlx_signal_client_new ("127.0.0.1", port, room, node);
  rlx_signal_client_set_timing (j->client, 300, 3000);
  g_signal_connect (j->client, "joined", G_CALLBACK (on_j_joined), j);
  g_signal_connect (j->client, "message", G_CALLBACK (on_j_message), j);
  g_signal_connect (j->client, "refused", G_CALLBACK (on_j_refused), j);
  g_signal_connect (j->client, "lost", G_CALLBACK (on_j_lost), j);
  rlx_signal_client_start (j->client);
}

static void
joiner_stop (Joiner *j)
{
  rlx_signal_client_stop (j->client);
  g_signal_handlers_disconnect_by_data (j->client, j);
  g_clear_object (&j->client);
  g_clear_pointer (&j->refused, g_free);
}

/* A legitimate client joins within 3 s (the bound). */
static void
check_joins (guint16 port, const char *room, const char *node)
{
  Joiner j;
  gint64 t0 = g_get_monotonic_time ();

  joiner_start (&j, port, room, node);
  WAIT_FOR (j.joined || j.refused, 3000, "the legitimate client to join");
  if (j.refused)
    g_error ("the legitimate client was refused: %s", j.refused);
  g_test_message ("the legitimate client joined in %.0f ms",
                  (g_get_monotonic_time () - t0) / 1000.0);
  joiner_stop (&j);
}

static char *
attacker_address (guint i)
{
  return g_strdup_printf ("127.0.%u.%u", 1 + i / 250, 2 + i % 250);
}

/* ── item 1: connections before the upgrade ─────────────────────────────── */

static void
test_idle_connections_capped (void)
{
  RlxSignalServerLimits lim = { .max_pending = 24, .max_pending_per_addr = 8,
                                .header_timeout_ms = 20000 };
  g_autoptr(RlxSignalServer) server = start_server (&lim);
  guint16 port = rlx_signal_server_get_port (server);
  g_autoptr(GPtrArray) one = g_ptr_array_new_with_free_func (g_object_unref);
  g_autoptr(GPtrArray) many = g_ptr_array_new_with_free_func (g_object_unref);

  /* 40 idle connections from one address: 8 are held, the rest closed. */
  for (guint i = 0; i < 40; i++)
    {
      GSocket *s = tcp_from ("127.0.0.2", port, 0);
      if (s)
        g_ptr_array_add (one, s);
      g_main_context_iteration (NULL, FALSE);
    }
  POLL_FOR (count_closed (one) >= 32, 5000, "idle connections past the per-address cap to be closed");
  g_assert_cmpuint (rlx_signal_server_get_n_pending (server), <=, 8);
  /* 60 more from 20 addresses: the total cap holds. */
  for (guint i = 0; i < 60; i++)
    {
      g_autofree char *from = attacker_address (1 + i % 20);
      GSocket *s = tcp_from (from, port, 0);
      if (s)
        g_ptr_array_add (many, s);
      g_main_context_iteration (NULL, FALSE);
    }
  spin (200);
  g_test_message ("%u connections pending at the server", rlx_signal_server_get_n_pending (server));
  g_assert_cmpuint (rlx_signal_server_get_n_pending (server), <=, 24);
  /* A legitimate client from its own address still gets in, at once. */
  check_joins (port, "demo", "real");
  /* Once the attack stops, nothing is left behind. */
  g_ptr_array_set_size (one, 0);
  g_ptr_array_set_size (many, 0);
  POLL_FOR (rlx_signal_server_get_n_pending (server) == 0, 5000, "the pending table to empty");
  check_joins (port, "demo", "after");
}

static void
on_event_log (RlxSignalServer *s, const char *what, const char *room, const char *node,
              const char *detail, gpointer user_data)
{
  GPtrArray *events = user_data;

  g_ptr_array_add (events, g_strdup_printf ("%s %s", what, detail));
}

static gboolean
has_event (GPtrArray *events, const char *prefix)
{
  for (guint i = 0; i < events->len; i++)
    if (g_str_has_prefix (events->pdata[i], prefix))
      return TRUE;
  return FALSE;
}

/* accept() fails with EMFILE: the listener must back off and accept again
 * once descriptors are free (SoupServer's stopped for good). */
static void
test_accept_recovers_from_emfile (void)
{
  g_autoptr(RlxSignalServer) server = start_server (NULL);
  guint16 port = rlx_signal_server_get_port (server);
  g_autoptr(GPtrArray) events = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GSocket) s = NULL;
  struct rlimit saved, low;
  int probe;

  g_signal_connect (server, "event", G_CALLBACK (on_event_log), events);
  /* The client's socket first; then leave the process no descriptor for
   * the accept, and connect. */
  s = tcp_socket ("127.0.0.2", 0);
  spin (200);   /* what earlier cases left closes now, not under the low limit */
  g_assert_cmpint (getrlimit (RLIMIT_NOFILE, &saved), ==, 0);
  probe = dup (0);
  g_assert_cmpint (probe, >=, 0);
  close (probe);
  low = saved;
  low.rlim_cur = (rlim_t) probe;   /* the lowest free descriptor is past the limit */
  g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &low), ==, 0);
  g_assert_true (tcp_connect (s, port));
  WAIT_FOR (has_event (events, "accept-failed"), 5000, "the accept to fail");
  spin (100);
  g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &saved), ==, 0);
  check_joins (port, "demo", "real");
  for (guint i = 0; i < events->len; i++)
    g_test_message ("event: %s", (char *) events->pdata[i]);
  g_assert_true (has_event (events, "accepting"));
}

/* The finding itself: `rlx-rank signal` with its descriptor limit lowered;
 * idle connections past it, all closed, and then a client must get in. */
static void
limit_fds_cb (gpointer user_data)
{
  struct rlimit rl = { 96, 96 };

  setrlimit (RLIMIT_NOFILE, &rl);
  prctl (PR_SET_PDEATHSIG, SIGKILL);   /* never outlive a failed test */
}

static guint16
free_port (void)
{
  g_autoptr(GSocket) s = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                       G_SOCKET_PROTOCOL_TCP, NULL);
  g_autoptr(GInetAddress) la = g_inet_address_new_from_string ("127.0.0.1");
  g_autoptr(GSocketAddress) sa = g_inet_socket_address_new (la, 0);
  g_autoptr(GSocketAddress) bound = NULL;

  g_assert_true (g_socket_bind (s, sa, TRUE, NULL));
  bound = g_socket_get_local_address (s, NULL);
  return g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
}

static void
test_rank_signal_fd_limit (void)
{
  const char *rank = g_getenv ("RLX_RANK");
  guint16 port = free_port ();
  g_autofree char *port_s = g_strdup_printf ("%u", port);
  const char *argv[] = { rank, "signal", "--port", port_s, "--address", "127.0.0.1", NULL };
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) socks = g_ptr_array_new_with_free_func (g_object_unref);
  GPid pid;
  gint out_fd;

  if (rank == NULL)
    {
      g_test_skip ("RLX_RANK is not set: run through meson test");
      return;
    }
  g_assert_true (g_spawn_async_with_pipes (NULL, (char **) argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                           limit_fds_cb, NULL, &pid, NULL, &out_fd, NULL, &error));
  g_assert_no_error (error);
  {
    /* Wait until it serves (it prints one line). */
    gint64 until = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
    char c;
    while (read (out_fd, &c, 1) == 1 && c != '\n' && g_get_monotonic_time () < until)
      ;
  }
  /* 200 idle connections (2 per address, 100 addresses): more than the 96
   * descriptors the server has. */
  for (guint i = 0, failed = 0; i < 200 && failed < 3; i++)
    {
      g_autofree char *from = attacker_address (i / 2);
      GSocket *s = tcp_from (from, port, 0);
      if (s)
        g_ptr_array_add (socks, s);
      else
        failed++;   /* its backlog is full: it stopped accepting */
    }
  g_usleep (500 * 1000);
  g_test_message ("%u of 200 connections closed by the server while the attack lasted",
                  count_closed (socks));
  g_ptr_array_set_size (socks, 0);
  /* The finding: the port never accepted again. */
  check_joins (port, "demo", "real");
  kill (pid, SIGTERM);
  {
    int status;
    waitpid (pid, &status, 0);
  }
  g_spawn_close_pid (pid);
  close (out_fd);
}

/* ── item 2: slowloris ──────────────────────────────────────────────────── */

typedef struct {
  GPtrArray *socks;
  guint      line;
} Trickle;

static gboolean
trickle_cb (gpointer user_data)
{
  Trickle *t = user_data;
  static const char *lines[] = { "GET " RLX_SIGNAL_PATH " HTTP/1.1\r\n", "Host: x\r\n",
                                 "Upgrade: websocket\r\n", "X-Slow: 1\r\n" };
  const char *l = lines[MIN (t->line, G_N_ELEMENTS (lines) - 1)];

  t->line++;
  for (guint i = 0; i < t->socks->len; i++)
    g_socket_send (t->socks->pdata[i], l, strlen (l), NULL, NULL);
  return G_SOURCE_CONTINUE;
}

static void
test_slowloris (void)
{
  RlxSignalServerLimits lim = { .header_timeout_ms = 600 };
  g_autoptr(RlxSignalServer) server = start_server (&lim);
  guint16 port = rlx_signal_server_get_port (server);
  g_autoptr(GPtrArray) slow = g_ptr_array_new_with_free_func (g_object_unref);
  g_autoptr(GPtrArray) silent = g_ptr_array_new_with_free_func (g_object_unref);
  Trickle t = { slow, 0 };
  gint64 t0;
  guint id;

  for (guint i = 0; i < 12; i++)
    {
      g_autofree char *from = attacker_address (i % 4);
      g_ptr_array_add (slow, tcp_from (from, port, 0));
      g_ptr_array_add (silent, tcp_from (from, port, 0));
    }
  t0 = g_get_monotonic_time ();
  /* One header line every 150 ms: never a blank line. */
  id = g_timeout_add (150, trickle_cb, &t);
  POLL_FOR (count_closed (slow) == slow->len && count_closed (silent) == silent->len, 5000,
            "slowloris and silent connections to be closed at the header deadline");
  g_source_remove (id);
  g_test_message ("all closed after %.0f ms (deadline 600 ms)", (g_get_monotonic_time () - t0) / 1000.0);
  g_assert_cmpuint (rlx_signal_server_get_n_pending (server), ==, 0);
  check_joins (port, "demo", "real");
}

/* ── item 3: clients that never read ───────────────────────────────────── */

static void
test_slow_readers_dropped (void)
{
  RlxSignalServerLimits lim = { .max_queued = 128 * 1024, .rate_per_s = 2000, .burst = 2000 };
  g_autoptr(RlxSignalServer) server = start_server (&lim);
  guint16 port = rlx_signal_server_get_port (server);
  g_autoptr(RlxSignalAuth) auth = rlx_signal_auth_new ((const guint8 *) "0123456789abcdef", "demo", "sender");
  g_autoptr(GPtrArray) readers = g_ptr_array_new_with_free_func (g_object_unref);
  g_autoptr(GPtrArray) events = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(JsonObject) fields = json_object_new ();
  g_autofree char *pad = g_strnfill (RLX_SIGNAL_MAX_BODY - 400, 'p');
  Joiner sender, reader;
  guint64 rss0, rss1;

  g_signal_connect (server, "event", G_CALLBACK (on_event_log), events);
  joiner_start (&sender, port, "demo", "sender");
  joiner_start (&reader, port, "demo", "reader");
  WAIT_FOR (sender.joined && reader.joined, 5000, "the sender and a reading client to join");
  for (guint i = 0; i < 8; i++)
    {
      g_autofree char *node = g_strdup_printf ("deaf%u", i);
      g_autofree char *from = attacker_address (i);
      g_ptr_array_add (readers, raw_join (from, port, "demo", node, 4096));
    }
  WAIT_FOR (rlx_signal_server_get_n_clients (server) == 10, 5000, "the deaf clients to join");
  spin (100);
  rss0 = rss_bytes (0);
  json_object_set_string_member (fields, "pad", pad);
  /* 2,000 broadcasts of 12 KB: 24 MB towards each deaf client. */
  for (guint i = 0; i < 2000; i++)
    {
      g_autoptr(JsonNode) s = rlx_signal_auth_seal (auth, "*", "cand", fields);
      rlx_signal_client_send (sender.client, "*", s);
      if (i % 20 == 0)
        g_main_context_iteration (NULL, FALSE);
    }
  POLL_FOR (rlx_signal_server_get_n_clients (server) == 2, 20000, "every deaf client to be dropped");
  g_assert_true (has_event (events, "dropped a slow reader"));
  WAIT_FOR (reader.messages >= 1500, 20000, "the reading client to get the broadcasts");
  spin (300);
  rss1 = rss_bytes (0);
  g_test_message ("RSS %.1f MB → %.1f MB; the reader got %u messages", rss0 / 1e6, rss1 / 1e6,
                  reader.messages);
  g_assert_cmpuint (rss1, <, rss0 + (20u << 20));
  g_assert_true (reader.joined && sender.joined);
  joiner_stop (&sender);
  joiner_stop (&reader);
}

/* A client that never reads but keeps sending (pongs with guessed
 * nonces, the old counter's 1, 2, 3…) must not stay: pings go out every
 * interval whatever it sends, and only the right nonce answers them. */
static void
test_deaf_talker_dropped (void)
{
  RlxSignalServerLimits lim = { .ping_interval_ms = 200, .pong_timeout_ms = 600 };
  g_autoptr(RlxSignalServer) server = start_server (&lim);
  guint16 port = rlx_signal_server_get_port (server);
  g_autoptr(GSocket) deaf = raw_join ("127.0.0.2", port, "demo", "deaf", 4096);
  gint64 t0;

  WAIT_FOR (rlx_signal_server_get_n_clients (server) == 1, 5000, "the deaf client to connect");
  t0 = g_get_monotonic_time ();
  for (guint k = 1; k <= 200 && rlx_signal_server_get_n_clients (server) > 0; k++)
    {
      g_autofree char *pong = g_strdup_printf ("{\"op\":\"pong\",\"n\":%u}", k);
      g_autoptr(GBytes) f = ws_text (pong);
      send_now (deaf, g_bytes_get_data (f, NULL), g_bytes_get_size (f));
      spin (50);
    }
  g_test_message ("dropped after %.0f ms", (g_get_monotonic_time () - t0) / 1000.0);
  g_assert_cmpuint (rlx_signal_server_get_n_clients (server), ==, 0);
}

/* ── item 4: names, rooms, members ──────────────────────────────────────── */

static void
test_name_is_kept_by_live_holder (void)
{
  RlxSignalServerLimits lim = { .probe_timeout_ms = 500 };
  g_autoptr(RlxSignalServer) server = start_server (&lim);
  guint16 port = rlx_signal_server_get_port (server);
  g_autoptr(GSocket) squatter = NULL;
  g_autoptr(GSocket) dead = NULL;
  Joiner holder, other, thief, heir;

  joiner_start (&holder, port, "demo", "alice");
  joiner_start (&other, port, "demo", "bob");
  WAIT_FOR (holder.joined && other.joined, 5000, "alice and bob to join");
  /* A keyless client claims alice's id: alice answers the probe, keeps it. */
  squatter = raw_join ("127.0.0.2", port, "demo", "alice", 0);
  joiner_start (&thief, port, "demo", "alice");
  WAIT_FOR (thief.refused != NULL, 5000, "the second alice to be refused");
  g_assert_nonnull (strstr (thief.refused, "in use"));
  g_assert_false (thief.joined);
  spin (700);
  g_assert_true (holder.joined);
  g_assert_null (holder.refused);
  /* … and still gets what bob sends her. */
  {
    g_autoptr(RlxSignalAuth) auth = rlx_signal_auth_new ((const guint8 *) "0123456789abcdef", "demo", "bob");
    g_autoptr(JsonNode) s = rlx_signal_auth_seal (auth, "alice", "offer", NULL);
    rlx_signal_client_send (other.client, "alice", s);
    WAIT_FOR (holder.messages == 1, 5000, "alice to get bob's message");
  }
  /* A holder that does not answer (gone, not noticed yet) loses its id to
   * the node that comes back. */
  dead = raw_join ("127.0.0.3", port, "demo", "carol", 0);
  WAIT_FOR (rlx_signal_server_get_n_clients (server) == 3, 5000, "the mute carol to join");
  joiner_start (&heir, port, "demo", "carol");
  WAIT_FOR (heir.joined, 5000, "carol to get her id back from a mute connection");
  joiner_stop (&heir);
  joiner_stop (&thief);
  joiner_stop (&other);
  joiner_stop (&holder);
}

static void
test_room_flood (void)
{
  RlxSignalServerLimits lim = { .max_rooms = 8, .max_members = 8, .max_rooms_per_addr = 4,
                                .max_members_per_addr = 4, .max_pending_per_addr = 64 };
  g_autoptr(RlxSignalServer) server = start_server (&lim);
  guint16 port = rlx_signal_server_get_port (server);
  g_autoptr(GPtrArray) flood = g_ptr_array_new_with_free_func (g_object_unref);
  Joiner first;

  /* The cohort's first node is in its room. */
  joiner_start (&first, port, "cohort-room", "founder");
  WAIT_FOR (first.joined, 5000, "the founder to join");
  /* One address makes rooms of its own, and fills the cohort's room. */
  for (guint i = 0; i < 20; i++)
    {
      g_autofree char *room = g_strdup_printf ("junk%u", i);
      g_ptr_array_add (flood, raw_join ("127.0.0.2", port, room, "x", 0));
      spin (10);
    }
  for (guint i = 0; i < 20; i++)
    {
      g_autofree char *node = g_strdup_printf ("fake%u", i);
      g_ptr_array_add (flood, raw_join ("127.0.0.2", port, "cohort-room", node, 0));
      spin (10);
    }
  spin (500);
  g_test_message ("%u rooms after the flood", rlx_signal_server_get_n_rooms (server));
  g_assert_cmpuint (rlx_signal_server_get_n_rooms (server), <=, 1 + lim.max_rooms_per_addr);
  /* A real joiner of the cohort, and a real founder of another, get in. */
  check_joins (port, "cohort-room", "joiner");
  check_joins (port, "other-cohort", "founder2");
  joiner_stop (&first);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  signal (SIGPIPE, SIG_IGN);
  g_test_add_func ("/remote/signal-hostile/idle-connections-capped", test_idle_connections_capped);
  g_test_add_func ("/remote/signal-hostile/accept-recovers-from-emfile", test_accept_recovers_from_emfile);
  g_test_add_func ("/remote/signal-hostile/rank-signal-fd-limit", test_rank_signal_fd_limit);
  g_test_add_func ("/remote/signal-hostile/slowloris", test_slowloris);
  g_test_add_func ("/remote/signal-hostile/slow-readers-dropped", test_slow_readers_dropped);
  g_test_add_func ("/remote/signal-hostile/deaf-talker-dropped", test_deaf_talker_dropped);
  g_test_add_func ("/remote/signal-hostile/name-kept-by-live-holder", test_name_is_kept_by_live_holder);
  g_test_add_func ("/remote/signal-hostile/room-flood", test_room_flood);
  return g_test_run ();
}
