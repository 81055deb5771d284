/* remote-bench.c — one remote link's throughput and latency, for BENCHMARKS.md
 *
 *   remote-bench recv|send --dir D --name N --peer P [--mode quic|nice]
 *                [--mib M] [--frame-mib F] [--pings K] [--via IP:PORT]
 *                [--payload BYTES] [--cc bbr2|cubic|bbr|reno] [--timeout S]
 *
 * Two processes (in two network namespaces) exchange ICE credentials,
 * candidates and certificate fingerprints through files in the shared
 * folder D (D/N.ice, written once gathering is done) — the data path is
 * what is measured, not signalling. Then:
 *   quic  RlxRemoteLink (ICE + QUIC + TLS, what the cohort uses): the sender
 *         queues M MiB in F MiB frames on the bulk stream; the receiver
 *         answers one frame when all arrived. Then K ping-pongs of a 200-byte
 *         frame on the control stream.
 *   nice  libnice's reliable mode (pseudo-TCP over the same ICE): the same
 *         bytes as a stream, the same answer, the same pings.
 * --via IP:PORT replaces the peer's candidates by that one address (a UDP
 * delay relay in the path). The sender prints one JSON line: mode, bytes,
 * seconds, MB/s (10^6 bytes), the median ping RTT in µs; both sides add
 * what the transfer cost them from the link being up to the last byte: CPU
 * seconds of the process (user, system) and the namespace's UDP counters
 * (datagrams in and out, datagrams dropped for a full receive buffer). The
 * receiver prints its own line ("side":"recv") when the last byte arrived.
 */
#include "rlx-config.h"
#include "core/p2p/rlx-remote-link.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <nice/agent.h>

/* What the transfer cost this side: CPU of the whole process and the UDP
 * counters of its network namespace (/proc/net/snmp is per namespace). */
typedef struct {
  double  user, sys;
  guint64 udp_in, udp_out, rcvbuf_errors;
} Usage;

typedef struct {
  const char    *dir, *name, *peer, *mode, *via, *wait_file;
  gboolean       sender;
  guint64        total;
  gsize          frame;
  guint          pings;
  gsize          payload;
  RlxQuicCc      cc;
  guint          timeout_s;

  GMainLoop     *loop;
  RlxIdentity   *identity;
  GPtrArray     *cands;
  char          *ufrag, *pwd;
  gboolean       gathered;
  gboolean       ready;
  gboolean       failed;
  char          *fail_reason;

  /* quic */
  RlxRemoteLink *link;
  /* nice */
  NiceAgent     *agent;
  guint          stream;
  gboolean       writable;
  guint64        sent;

  guint64        received;
  gint64         t0, t1;
  Usage          u0, u1;
  guint          pings_done;
  GArray        *rtts;
  gint64         ping_at;
  gboolean       done;
} Bench;

static Bench b;

/* /proc/net/snmp: "Udp: InDatagrams NoPorts …" then "Udp: 12 0 …". */
static void
add_udp4 (Usage *u, const char *text)
{
  g_auto(GStrv) lines = g_strsplit (text, "\n", -1);

  for (guint i = 0; lines[i] && lines[i + 1]; i++)
    if (g_str_has_prefix (lines[i], "Udp: ") && g_str_has_prefix (lines[i + 1], "Udp: "))
      {
        g_auto(GStrv) k = g_strsplit (lines[i] + 5, " ", -1);
        g_auto(GStrv) v = g_strsplit (lines[i + 1] + 5, " ", -1);
        for (guint j = 0; k[j] && v[j]; j++)
          {
            guint64 x = g_ascii_strtoull (v[j], NULL, 10);
            if (g_str_equal (k[j], "InDatagrams"))
              u->udp_in += x;
            else if (g_str_equal (k[j], "OutDatagrams"))
              u->udp_out += x;
            else if (g_str_equal (k[j], "RcvbufErrors"))
              u->rcvbuf_errors += x;
          }
        return;
      }
}

/* /proc/net/snmp6: "Udp6InDatagrams  12" lines (ICE may pick an IPv6 pair). */
static void
add_udp6 (Usage *u, const char *text)
{
  g_auto(GStrv) lines = g_strsplit (text, "\n", -1);

  for (guint i = 0; lines[i]; i++)
    {
      g_auto(GStrv) kv = g_strsplit_set (lines[i], " \t", -1);
      const char *val = NULL;

      for (guint j = 1; kv[0] && kv[j]; j++)
        if (*kv[j])
          val = kv[j];
      if (val == NULL)
        continue;
      if (g_str_equal (kv[0], "Udp6InDatagrams"))
        u->udp_in += g_ascii_strtoull (val, NULL, 10);
      else if (g_str_equal (kv[0], "Udp6OutDatagrams"))
        u->udp_out += g_ascii_strtoull (val, NULL, 10);
      else if (g_str_equal (kv[0], "Udp6RcvbufErrors"))
        u->rcvbuf_errors += g_ascii_strtoull (val, NULL, 10);
    }
}

static void
usage_now (Usage *u)
{
  struct rusage ru;
  g_autofree char *snmp = NULL, *snmp6 = NULL;

  memset (u, 0, sizeof *u);
  if (getrusage (RUSAGE_SELF, &ru) == 0)
    {
      u->user = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
      u->sys = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    }
  if (g_file_get_contents ("/proc/net/snmp", &snmp, NULL, NULL))
    add_udp4 (u, snmp);
  if (g_file_get_contents ("/proc/net/snmp6", &snmp6, NULL, NULL))
    add_udp6 (u, snmp6);
}

static void
print_usage_fields (void)
{
  printf (",\"cpu_user\":%.3f,\"cpu_sys\":%.3f,\"udp_in\":%" G_GUINT64_FORMAT
          ",\"udp_out\":%" G_GUINT64_FORMAT ",\"rcvbuf_errors\":%" G_GUINT64_FORMAT,
          b.u1.user - b.u0.user, b.u1.sys - b.u0.sys, b.u1.udp_in - b.u0.udp_in,
          b.u1.udp_out - b.u0.udp_out, b.u1.rcvbuf_errors - b.u0.rcvbuf_errors);
}

/* The receiver's line, once the last byte is in. */
static void
print_recv_usage (void)
{
  usage_now (&b.u1);
  printf ("{\"side\":\"recv\",\"mode\":\"%s\",\"bytes\":%" G_GUINT64_FORMAT, b.mode, b.total);
  print_usage_fields ();
  printf ("}\n");
  fflush (stdout);
}

static void
finish_fail (const char *why)
{
  if (b.failed)
    return;
  b.failed = TRUE;
  b.fail_reason = g_strdup (why);
  g_main_loop_quit (b.loop);
}

/* ── the file exchange ──────────────────────────────────────────────────── */

static void
write_ice (void)
{
  g_autoptr(GString) s = g_string_new (NULL);
  g_autofree char *path = g_strdup_printf ("%s/%s.ice", b.dir, b.name);

  g_string_append_printf (s, "%s %s\n%s\n", b.ufrag, b.pwd,
                          rlx_identity_get_fingerprint (b.identity));
  for (guint i = 0; i < b.cands->len; i++)
    g_string_append_printf (s, "%s\n", (char *) b.cands->pdata[i]);
  g_file_set_contents (path, s->str, (gssize) s->len, NULL);
}

/* Poll for the peer's file (a benchmark, not a test: a 20 ms poll is fine). */
static gchar **
read_peer_ice (void)
{
  g_autofree char *path = g_strdup_printf ("%s/%s.ice", b.dir, b.peer);
  gint64 deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  g_autofree char *text = NULL;

  /* A relay may have to be set up from our peer's candidates first. */
  while (b.wait_file && !g_file_test (b.wait_file, G_FILE_TEST_EXISTS))
    {
      if (g_get_monotonic_time () > deadline)
        return NULL;
      g_usleep (20000);
    }
  while (!g_file_get_contents (path, &text, NULL, NULL))
    {
      if (g_get_monotonic_time () > deadline)
        return NULL;
      g_usleep (20000);
    }
  return g_strsplit (g_strchomp (text), "\n", -1);
}

/* "a=candidate:F C udp PRIO IP PORT typ host …" with IP PORT replaced. */
static char *
rewrite_candidate (const char *line, const char *via)
{
  g_auto(GStrv) f = g_strsplit (line, " ", -1);
  g_autofree char *ip = NULL;
  const char *colon = strrchr (via, ':');

  if (g_strv_length (f) < 8 || colon == NULL)
    return g_strdup (line);
  ip = g_strndup (via, (gsize) (colon - via));
  g_free (f[4]);
  f[4] = g_strdup (ip);
  g_free (f[5]);
  f[5] = g_strdup (colon + 1);
  g_free (f[7]);
  f[7] = g_strdup ("host");
  return g_strjoinv (" ", f);
}

/* ── quic ───────────────────────────────────────────────────────────────── */

static void send_ping (void);

static void
on_local_candidate (RlxRemoteLink *link, const char *cand, gpointer user_data)
{
  g_ptr_array_add (b.cands, g_strdup (cand));
}

static void
apply_peer_quic (gchar **lines)
{
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) cred = g_strsplit (lines[0], " ", 2);
  gboolean viaed = FALSE;

  if (!rlx_remote_link_set_remote_credentials (b.link, cred[0], cred[1], &error))
    finish_fail (error->message);
  for (guint i = 2; lines[i]; i++)
    {
      g_autofree char *c = NULL;
      if (!g_str_has_prefix (lines[i], "a=candidate"))
        continue;
      if (b.via)
        {
          if (viaed || strcasestr (lines[i], " udp ") == NULL || strchr (lines[i] + 12, ':'))
            continue;
          c = rewrite_candidate (lines[i], b.via);
          viaed = TRUE;
        }
      else
        c = g_strdup (lines[i]);
      if (!rlx_remote_link_add_remote_candidate (b.link, c, &error))
        g_clear_error (&error);
    }
  rlx_remote_link_remote_gathering_done (b.link);
}

static void
on_gathering_done (RlxRemoteLink *link, gpointer user_data)
{
  g_auto(GStrv) peer = NULL;

  write_ice ();
  peer = read_peer_ice ();
  if (peer == NULL)
    {
      finish_fail ("the peer's ICE file never appeared");
      return;
    }
  apply_peer_quic (peer);
}

static void
quic_send_bytes (GBytes *f, gboolean control)
{
  g_autoptr(GError) error = NULL;

  if (!(control ? rlx_remote_link_send_control (b.link, f, &error)
                : rlx_link_send (RLX_LINK (b.link), f, &error)))
    finish_fail (error->message);
}

static void
quic_send_frame (gsize len, gboolean control)
{
  g_autoptr(GBytes) f = g_bytes_new_take (g_malloc0 (MAX (len, 1)), len);

  quic_send_bytes (f, control);
}

/* The bulk frames, made and written before the clock starts (a cohort's
 * buckets are data in memory, not fresh zero pages). */
static GPtrArray *bulk;

static void
make_bulk (void)
{
  bulk = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  for (guint64 s = 0; s < b.total; s += b.frame)
    {
      gsize len = (gsize) MIN (b.frame, b.total - s);
      guint8 *p = g_malloc (len);

      for (gsize i = 0; i < len; i++)
        p[i] = (guint8) (i * 7 + s);
      g_ptr_array_add (bulk, g_bytes_new_take (p, len));
    }
}

static void
on_ready (RlxRemoteLink *link, gpointer user_data)
{
  b.ready = TRUE;
  usage_now (&b.u0);
  if (!b.sender)
    return;
  b.t0 = g_get_monotonic_time ();
  for (guint i = 0; i < bulk->len; i++)
    quic_send_bytes (bulk->pdata[i], FALSE);
  g_clear_pointer (&bulk, g_ptr_array_unref);   /* the link holds them until sent */
}

static void
on_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  gsize len = g_bytes_get_size (frame);

  if (b.sender)
    {
      if (len == 8 && b.t1 == 0)
        {
          b.t1 = g_get_monotonic_time ();
          usage_now (&b.u1);
          send_ping ();
        }
      else if (len == 200)
        {
          gint64 rtt = g_get_monotonic_time () - b.ping_at;
          g_array_append_val (b.rtts, rtt);
          send_ping ();
        }
      return;
    }
  if (len == 200)
    {
      quic_send_frame (200, TRUE);   /* pong */
      return;
    }
  b.received += len;
  if (b.received >= b.total && !b.done)
    {
      b.done = TRUE;
      quic_send_frame (8, TRUE);
      print_recv_usage ();
    }
}

static void
on_closed (RlxLink *link, const GError *error, gpointer user_data)
{
  if (!b.sender && b.done)
    g_main_loop_quit (b.loop);
  else if (!(b.sender && b.pings_done >= b.pings && b.t1))
    finish_fail (error->message);
}

static void
setup_quic (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *peer_fp = NULL;
  RlxRemoteLinkConfig c = { 0 };

  /* The peer's fingerprint comes with its file; the link needs it at
   * creation, so read the peer's file first (it writes its fingerprint
   * before gathering: a separate .fp file). */
  {
    g_autofree char *mine = g_strdup_printf ("%s/%s.fp", b.dir, b.name);
    g_autofree char *theirs = g_strdup_printf ("%s/%s.fp", b.dir, b.peer);
    gint64 deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
    g_file_set_contents (mine, rlx_identity_get_fingerprint (b.identity), -1, NULL);
    while (!g_file_get_contents (theirs, &peer_fp, NULL, NULL))
      {
        if (g_get_monotonic_time () > deadline)
          {
            finish_fail ("the peer's fingerprint file never appeared");
            return;
          }
        g_usleep (20000);
      }
  }
  c.controlling = b.sender;
  c.identity = b.identity;
  c.peer_id = b.peer;
  c.peer_fingerprint = peer_fp;
  c.max_udp_payload = b.payload;
  c.cc = b.cc;
  c.connect_timeout_ms = 30000;
  b.link = rlx_remote_link_new (&c, &error);
  if (b.link == NULL)
    {
      finish_fail (error->message);
      return;
    }
  rlx_remote_link_get_local_credentials (b.link, &b.ufrag, &b.pwd);
  g_signal_connect (b.link, "local-candidate", G_CALLBACK (on_local_candidate), NULL);
  g_signal_connect (b.link, "gathering-done", G_CALLBACK (on_gathering_done), NULL);
  g_signal_connect (b.link, "ready", G_CALLBACK (on_ready), NULL);
  g_signal_connect (b.link, "frame", G_CALLBACK (on_frame), NULL);
  g_signal_connect (b.link, "closed", G_CALLBACK (on_closed), NULL);
  rlx_remote_link_start (b.link);
}

/* ── nice (reliable) ────────────────────────────────────────────────────── */

static guint8 chunk[64 * 1024];

static gboolean
quit_cb (gpointer user_data)
{
  g_main_loop_quit (b.loop);
  return G_SOURCE_REMOVE;
}

static void
nice_pump (void)
{
  while (b.sender && b.ready && b.sent < b.total)
    {
      guint n = (guint) MIN (sizeof chunk, b.total - b.sent);
      gint r = nice_agent_send (b.agent, b.stream, 1, n, (const gchar *) chunk);
      if (r <= 0)
        return;   /* wait for reliable-transport-writable */
      b.sent += (guint64) r;
    }
}

static void
on_nice_writable (NiceAgent *agent, guint stream, guint component, gpointer user_data)
{
  nice_pump ();
}

static void
on_nice_candidate (NiceAgent *agent, NiceCandidate *cand, gpointer user_data)
{
  g_ptr_array_add (b.cands, nice_agent_generate_local_candidate_sdp (agent, cand));
}

static void
on_nice_gathered (NiceAgent *agent, guint stream, gpointer user_data)
{
  g_auto(GStrv) peer = NULL;
  g_auto(GStrv) cred = NULL;
  GSList *list = NULL;
  gboolean viaed = FALSE;

  write_ice ();
  peer = read_peer_ice ();
  if (peer == NULL)
    {
      finish_fail ("the peer's ICE file never appeared");
      return;
    }
  cred = g_strsplit (peer[0], " ", 2);
  nice_agent_set_remote_credentials (agent, stream, cred[0], cred[1]);
  for (guint i = 2; peer[i]; i++)
    {
      g_autofree char *line = NULL;
      NiceCandidate *c;
      if (!g_str_has_prefix (peer[i], "a=candidate"))
        continue;
      if (b.via)
        {
          if (viaed || strchr (peer[i] + 12, ':'))
            continue;
          line = rewrite_candidate (peer[i], b.via);
          viaed = TRUE;
        }
      else
        line = g_strdup (peer[i]);
      c = nice_agent_parse_remote_candidate_sdp (agent, stream, line);
      if (c)
        list = g_slist_append (list, c);
    }
  nice_agent_set_remote_candidates (agent, stream, 1, list);
  g_slist_free_full (list, (GDestroyNotify) nice_candidate_free);
  nice_agent_peer_candidate_gathering_done (agent, stream);
}

static void
on_nice_state (NiceAgent *agent, guint stream, guint component, guint state, gpointer user_data)
{
  if ((state == NICE_COMPONENT_STATE_READY || state == NICE_COMPONENT_STATE_CONNECTED) && !b.ready)
    {
      b.ready = TRUE;
      usage_now (&b.u0);
      if (b.sender)
        {
          b.t0 = g_get_monotonic_time ();
          nice_pump ();
        }
    }
  else if (state == NICE_COMPONENT_STATE_FAILED)
    finish_fail ("ICE failed");
}

static void
nice_send_small (gsize len)
{
  static const char buf[256];

  if (nice_agent_send (b.agent, b.stream, 1, (guint) len, buf) != (gint) len)
    g_printerr ("remote-bench: a small send did not go out whole\n");
}

static void
on_nice_recv (NiceAgent *agent, guint stream, guint component, guint len, gchar *buf,
              gpointer user_data)
{
  if (b.sender)
    {
      /* The receiver's answer (8 bytes) then pongs (200 bytes each). */
      b.received += len;
      if (b.t1 == 0 && b.received >= 8)
        {
          b.t1 = g_get_monotonic_time ();
          usage_now (&b.u1);
          b.received -= 8;
          send_ping ();
        }
      while (b.t1 && b.received >= 200)
        {
          gint64 rtt = g_get_monotonic_time () - b.ping_at;
          b.received -= 200;
          g_array_append_val (b.rtts, rtt);
          send_ping ();
        }
      return;
    }
  if (!b.done)
    {
      guint64 take = MIN ((guint64) len, b.total - b.received);
      b.received += take;
      len -= (guint) take;
      if (b.received >= b.total)
        {
          b.done = TRUE;
          nice_send_small (8);
          print_recv_usage ();
        }
    }
  /* Ping bytes after the bulk: answer every 200 with 200. */
  b.sent += len;
  while (b.sent >= 200)
    {
      b.sent -= 200;
      nice_send_small (200);
      if (++b.pings_done == b.pings)
        g_timeout_add (500, quit_cb, NULL);
    }
}

static void
setup_nice (void)
{
  b.agent = nice_agent_new_full (NULL, NICE_COMPATIBILITY_RFC5245,
                                 NICE_AGENT_OPTION_RELIABLE | NICE_AGENT_OPTION_ICE_TRICKLE);
  g_object_set (b.agent, "controlling-mode", b.sender, "ice-tcp", FALSE, "upnp", FALSE, NULL);
  b.stream = nice_agent_add_stream (b.agent, 1);
  nice_agent_get_local_credentials (b.agent, b.stream, &b.ufrag, &b.pwd);
  g_signal_connect (b.agent, "new-candidate-full", G_CALLBACK (on_nice_candidate), NULL);
  g_signal_connect (b.agent, "candidate-gathering-done", G_CALLBACK (on_nice_gathered), NULL);
  g_signal_connect (b.agent, "component-state-changed", G_CALLBACK (on_nice_state), NULL);
  g_signal_connect (b.agent, "reliable-transport-writable", G_CALLBACK (on_nice_writable), NULL);
  nice_agent_attach_recv (b.agent, b.stream, 1, NULL, on_nice_recv, NULL);
  nice_agent_gather_candidates (b.agent, b.stream);
}

/* ── pings (both modes) ─────────────────────────────────────────────────── */

static void
send_ping (void)
{
  if (b.pings_done >= b.pings)
    {
      g_main_loop_quit (b.loop);
      return;
    }
  b.pings_done++;
  b.ping_at = g_get_monotonic_time ();
  if (g_str_equal (b.mode, "quic"))
    quic_send_frame (200, TRUE);
  else
    nice_send_small (200);
}

static gboolean
on_timeout (gpointer user_data)
{
  finish_fail ("timed out");
  return G_SOURCE_REMOVE;
}

static int
cmp_i64 (gconstpointer a, gconstpointer c)
{
  gint64 x = *(const gint64 *) a, y = *(const gint64 *) c;
  return x < y ? -1 : x > y;
}

int
main (int argc, char **argv)
{
  g_autofree char *mode = NULL, *dir = NULL, *name = NULL, *peer = NULL, *via = NULL, *cc = NULL;
  g_autofree char *wait_file = NULL;
  gint mib = 256, frame_mib = 4, pings = 200, payload = 0, timeout_s = 120;
  GOptionEntry entries[] = {
    { "mode", 0, 0, G_OPTION_ARG_STRING, &mode, "quic (default) or nice", "M" },
    { "dir", 0, 0, G_OPTION_ARG_FILENAME, &dir, "exchange folder", "D" },
    { "name", 0, 0, G_OPTION_ARG_STRING, &name, "this side's name", "N" },
    { "peer", 0, 0, G_OPTION_ARG_STRING, &peer, "the other side's name", "P" },
    { "via", 0, 0, G_OPTION_ARG_STRING, &via, "reach the peer through this relay address", "IP:PORT" },
    { "wait-file", 0, 0, G_OPTION_ARG_FILENAME, &wait_file, "read the peer's candidates only once this file exists", "PATH" },
    { "mib", 0, 0, G_OPTION_ARG_INT, &mib, "MiB to move", "M" },
    { "frame-mib", 0, 0, G_OPTION_ARG_INT, &frame_mib, "frame size in MiB", "F" },
    { "pings", 0, 0, G_OPTION_ARG_INT, &pings, "ping-pongs after the transfer", "K" },
    { "payload", 0, 0, G_OPTION_ARG_INT, &payload, "QUIC UDP payload", "BYTES" },
    { "cc", 0, 0, G_OPTION_ARG_STRING, &cc, RLX_QUIC_CC_NAMES, "CC" },
    { "timeout", 0, 0, G_OPTION_ARG_INT, &timeout_s, "give up after S seconds", "S" },
    { NULL }
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("recv|send");
  g_autoptr(GError) error = NULL;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error) || argc != 2 || !dir || !name || !peer)
    {
      g_printerr ("usage: remote-bench recv|send --dir D --name N --peer P [...]\n");
      return 2;
    }
  b.sender = g_str_equal (argv[1], "send");
  b.mode = mode ? mode : "quic";
  b.dir = dir;
  b.name = name;
  b.peer = peer;
  b.via = via;
  b.wait_file = wait_file;
  b.total = (guint64) mib << 20;
  b.frame = (gsize) frame_mib << 20;
  b.pings = (guint) pings;
  b.payload = (gsize) payload;
  b.cc = RLX_QUIC_CC_DEFAULT;
  if (cc != NULL && !rlx_quic_cc_from_name (cc, &b.cc))
    {
      g_printerr ("remote-bench: --cc: '%s' is not " RLX_QUIC_CC_NAMES "\n", cc);
      return 2;
    }
  b.loop = g_main_loop_new (NULL, FALSE);
  b.cands = g_ptr_array_new_with_free_func (g_free);
  b.rtts = g_array_new (FALSE, FALSE, sizeof (gint64));
  b.identity = rlx_identity_new_ephemeral (&error);
  if (b.identity == NULL)
    {
      g_printerr ("remote-bench: %s\n", error->message);
      return 1;
    }
  g_timeout_add_seconds ((guint) timeout_s, on_timeout, NULL);
  if (g_str_equal (b.mode, "quic"))
    {
      if (b.sender)
        make_bulk ();
      setup_quic ();
    }
  else
    setup_nice ();
  if (!b.failed)
    g_main_loop_run (b.loop);
  if (b.failed)
    {
      g_printerr ("remote-bench %s: %s\n", b.name, b.fail_reason);
      return 1;
    }
  if (b.sender)
    {
      double secs = (b.t1 - b.t0) / 1e6;
      gint64 med = 0;
      g_array_sort (b.rtts, cmp_i64);
      if (b.rtts->len)
        med = g_array_index (b.rtts, gint64, b.rtts->len / 2);
      printf ("{\"mode\":\"%s\",\"bytes\":%" G_GUINT64_FORMAT ",\"seconds\":%.4f,\"mbps\":%.1f,"
              "\"ping_us\":%" G_GINT64_FORMAT ",\"pings\":%u,\"cc\":\"%s\",\"payload\":%d",
              b.mode, b.total, secs, b.total / secs / 1e6, med, b.rtts->len,
              cc ? cc : "bbr2", payload);
      print_usage_fields ();
      printf ("}\n");
      if (b.link)
        rlx_link_close (RLX_LINK (b.link));
    }
  else if (b.link)
    {
      /* Let the answer and the pongs go out (the sender closes first). */
      rlx_link_close (RLX_LINK (b.link));
    }
  fflush (stdout);
  return 0;
}
