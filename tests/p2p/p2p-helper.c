/* p2p-helper.c — a second process on the local bus, for tests and the bench
 *
 *   p2p-helper node DIR ID     join the bus in DIR as ID; print one line per
 *                              event ("ready", "added PEER", "removed PEER");
 *                              echo every frame back to its sender; exit
 *                              cleanly (removing the socket) on stdin EOF.
 *   p2p-helper sink DIR ID     join; count frames per link; a frame "end"
 *                              is answered with "got FRAMES BYTES".
 *   p2p-helper sink-read DIR ID  the same, and reads every byte of every
 *                              frame (as a receiver that decodes would).
 *   p2p-helper bench [FRAMES [MIB [RUNS]]]
 *                              local-bus throughput between two processes
 *                              (this one and a spawned sink), against a raw
 *                              blocking Unix socketpair between two processes
 *                              measured in the same run; prints medians.
 *   p2p-helper shm-bench [RUNS [--json]]
 *                              bulk frames of 64 KiB … 8 MiB to a spawned
 *                              sink-read through the socket and as memfds,
 *                              alternating in one run: MB/s and µs per frame
 *                              streaming, and one frame's round trip.
 */
#include "rlx-config.h"
#include "core/p2p/rlx-local-bus.h"
#include "core/p2p/rlx-unix-link.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <gio/gunixinputstream.h>

#define PING_COUNT 2000
#define PING_SIZE  200

static GMainLoop *loop;

static void
say (const char *fmt, ...) G_GNUC_PRINTF (1, 2);

static void
say (const char *fmt, ...)
{
  va_list args;

  va_start (args, fmt);
  vprintf (fmt, args);
  va_end (args);
  putchar ('\n');
  fflush (stdout);
}

/* ── node ────────────────────────────────────────────────────────────── */

static void
on_echo_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  rlx_link_send (link, frame, NULL);
}

static void
on_node_added (RlxLocalBus *bus, RlxLink *link, const char *peer, gpointer user_data)
{
  say ("added %s", peer);
  g_signal_connect (link, "frame", G_CALLBACK (on_echo_frame), NULL);
}

static void
on_removed (RlxLocalBus *bus, RlxLink *link, const char *peer, gpointer user_data)
{
  say ("removed %s", peer);
}

static gboolean
on_stdin (GIOChannel *channel, GIOCondition condition, gpointer user_data)
{
  char buf[256];
  gssize n = read (0, buf, sizeof buf);

  if (n <= 0)
    {
      g_main_loop_quit (loop);
      return G_SOURCE_REMOVE;
    }
  return G_SOURCE_CONTINUE;
}

/* ── sink ────────────────────────────────────────────────────────────── */

typedef struct {
  guint64 frames;
  guint64 bytes;
  gboolean read;
  guint64 sum;
} Count;

/* Touch every byte, as a receiver that decodes the frame would. */
static guint64
read_all (GBytes *frame)
{
  gsize len;
  const guint8 *p = g_bytes_get_data (frame, &len);
  guint64 s = 0;
  gsize i = 0;

  for (; i + 8 <= len; i += 8)
    {
      guint64 w;
      memcpy (&w, p + i, 8);
      s += w;
    }
  for (; i < len; i++)
    s += p[i];
  return s;
}

static void
on_sink_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  Count *count = user_data;
  gsize len = g_bytes_get_size (frame);

  if (len >= 4 && memcmp (g_bytes_get_data (frame, NULL), "ping", 4) == 0)
    {
      rlx_link_send (link, frame, NULL);   /* round-trip probe: echo */
      return;
    }
  if (len == 3 && memcmp (g_bytes_get_data (frame, NULL), "end", 3) == 0)
    {
      struct timespec ts;
      g_autofree char *reply = NULL;

      /* and this process's CPU time so far, for the benches' CPU figures */
      clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &ts);
      reply = g_strdup_printf ("got %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT " cpu %" G_GINT64_FORMAT,
                               count->frames, count->bytes,
                               (gint64) ts.tv_sec * 1000000000 + ts.tv_nsec);
      g_autoptr(GBytes) b = g_bytes_new (reply, strlen (reply));

      rlx_link_send (link, b, NULL);
      count->frames = count->bytes = 0;
      return;
    }
  count->frames++;
  count->bytes += len;
  if (count->read)
    count->sum += read_all (frame);
}

static void
on_sink_added (RlxLocalBus *bus, RlxLink *link, const char *peer, gpointer user_data)
{
  Count *count = g_new0 (Count, 1);

  count->read = GPOINTER_TO_INT (user_data);
  g_object_set_data_full (G_OBJECT (link), "count", count, g_free);
  g_signal_connect (link, "frame", G_CALLBACK (on_sink_frame), count);
}

static int
run_node (const char *dir, const char *id, gboolean sink, gboolean read)
{
  g_autoptr(RlxLocalBus) bus = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GIOChannel) in = g_io_channel_unix_new (0);

  loop = g_main_loop_new (NULL, FALSE);
  bus = rlx_local_bus_new_for_dir (dir, id, &error);
  if (bus == NULL)
    {
      say ("error %s", error->message);
      return 1;
    }
  g_signal_connect (bus, "link-added",
                    sink ? G_CALLBACK (on_sink_added) : G_CALLBACK (on_node_added),
                    GINT_TO_POINTER (read));
  g_signal_connect (bus, "link-removed", G_CALLBACK (on_removed), NULL);
  if (!rlx_local_bus_start (bus, &error))
    {
      say ("error %s", error->message);
      return 1;
    }
  say ("ready");
  g_io_add_watch (in, G_IO_IN | G_IO_HUP | G_IO_ERR, on_stdin, NULL);
  g_main_loop_run (loop);
  rlx_local_bus_stop (bus);
  g_main_loop_unref (loop);
  return 0;
}

/* ── bench ───────────────────────────────────────────────────────────── */

static int
compare_doubles (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;

  return x < y ? -1 : x > y;
}

/* Blocking write/read of @frames × @size over a socketpair to a forked
 * child: the ceiling for the machine. Runs before GLib starts any thread. */
static double
raw_reference (guint frames, gsize size)
{
  int fds[2];
  pid_t pid;
  guint8 *buf = g_malloc (size);
  gint64 t0, t1;
  char ack;

  memset (buf, 0x5a, size);
  if (socketpair (AF_UNIX, SOCK_STREAM, 0, fds) != 0)
    g_error ("socketpair: %s", g_strerror (errno));
  pid = fork ();
  if (pid == 0)
    {
      guint64 want = (guint64) frames * (size + 4), got = 0;

      close (fds[0]);
      while (got < want)
        {
          gsize chunk = MIN (size, want - got);
          gssize n = read (fds[1], buf, chunk);
          if (n <= 0)
            _exit (1);
          got += n;
        }
      if (write (fds[1], "k", 1) != 1)
        _exit (1);
      _exit (0);
    }
  close (fds[1]);
  t0 = g_get_monotonic_time ();
  for (guint i = 0; i < frames; i++)
    {
      guint32 prefix = GUINT32_TO_LE ((guint32) size);
      gsize off = 0;

      if (write (fds[0], &prefix, 4) != 4)
        g_error ("write: %s", g_strerror (errno));
      while (off < size)
        {
          gssize n = write (fds[0], buf + off, size - off);
          if (n <= 0)
            g_error ("write: %s", g_strerror (errno));
          off += n;
        }
    }
  if (read (fds[0], &ack, 1) != 1)
    g_error ("raw reference child failed");
  t1 = g_get_monotonic_time ();
  close (fds[0]);
  waitpid (pid, NULL, 0);
  g_free (buf);
  return (double) frames * size / ((t1 - t0) / 1e6) / 1e9;
}

/* Blocking ping-pong of @size-byte framed messages with a forked child:
 * the median round trip in µs of @n. */
static double
raw_ping_reference (guint n, gsize size)
{
  int fds[2];
  pid_t pid;
  guint8 *buf = g_malloc0 (size + 4);
  g_autofree double *rtt = g_new (double, n);

  if (socketpair (AF_UNIX, SOCK_STREAM, 0, fds) != 0)
    g_error ("socketpair: %s", g_strerror (errno));
  pid = fork ();
  if (pid == 0)
    {
      close (fds[0]);
      for (guint i = 0; i < n; i++)
        {
          gsize got = 0;
          while (got < size + 4)
            {
              gssize r = read (fds[1], buf + got, size + 4 - got);
              if (r <= 0)
                _exit (1);
              got += r;
            }
          if (write (fds[1], buf, size + 4) != (gssize) (size + 4))
            _exit (1);
        }
      _exit (0);
    }
  close (fds[1]);
  for (guint i = 0; i < n; i++)
    {
      gint64 t0 = g_get_monotonic_time ();
      gsize got = 0;

      if (write (fds[0], buf, size + 4) != (gssize) (size + 4))
        g_error ("write: %s", g_strerror (errno));
      while (got < size + 4)
        {
          gssize r = read (fds[0], buf + got, size + 4 - got);
          if (r <= 0)
            g_error ("raw ping child failed");
          got += r;
        }
      rtt[i] = g_get_monotonic_time () - t0;
    }
  close (fds[0]);
  waitpid (pid, NULL, 0);
  g_free (buf);
  qsort (rtt, n, sizeof (double), compare_doubles);
  return rtt[n / 2];
}

typedef struct {
  RlxLink *link;
  gboolean got_reply;
  char    *reply;
  gint64   peer_cpu_ns;   /* the sink's CPU time at its last count */
} BenchState;

static gint64
cpu_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (gint64) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
on_bench_added (RlxLocalBus *bus, RlxLink *link, const char *peer, gpointer user_data)
{
  BenchState *st = user_data;

  st->link = g_object_ref (link);
}

static void
on_bench_reply (RlxLink *link, GBytes *frame, gpointer user_data)
{
  BenchState *st = user_data;
  gsize len;
  const char *data = g_bytes_get_data (frame, &len);

  g_free (st->reply);
  st->reply = g_strndup (data, len);
  st->got_reply = TRUE;
}

/* Spawn a sink of @mode ("sink", "sink-read") in a fresh bus directory and
 * link to it; returns the µs from bus start to ::link-added. */
static gint64
bench_connect (const char *mode, BenchState *st, char **dir_out, RlxLocalBus **bus_out,
               GPid *child, gint *child_stdin)
{
  g_autoptr(GError) error = NULL;
  char *argv[] = { NULL, (char *) mode, NULL, (char *) "sink", NULL };
  g_autofree char *exe = g_file_read_link ("/proc/self/exe", NULL);
  g_autofree char *sink_sock = NULL;
  RlxLocalBus *bus;
  gint64 deadline, setup_t0;
  char *dir;

  dir = g_dir_make_tmp ("rlx-bench-XXXXXX", &error);
  g_assert_no_error (error);
  argv[0] = exe;
  argv[2] = dir;
  if (!g_spawn_async_with_pipes (NULL, argv, NULL,
                                 G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDOUT_TO_DEV_NULL, NULL,
                                 NULL, child, child_stdin, NULL, NULL, &error))
    g_error ("spawn sink: %s", error->message);

  /* Wait for the sink to listen, so that the set-up time below is ours:
   * start → connect → handshake → ::link-added. */
  sink_sock = g_build_filename (dir, "sink.sock", NULL);
  deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (!g_file_test (sink_sock, G_FILE_TEST_EXISTS) && g_get_monotonic_time () < deadline)
    g_usleep (1000);
  bus = rlx_local_bus_new_for_dir (dir, "bench", &error);
  g_signal_connect (bus, "link-added", G_CALLBACK (on_bench_added), st);
  setup_t0 = g_get_monotonic_time ();
  if (!rlx_local_bus_start (bus, &error))
    g_error ("%s", error->message);
  deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (st->link == NULL && g_get_monotonic_time () < deadline)
    g_main_context_iteration (NULL, TRUE);
  if (st->link == NULL)
    g_error ("the sink never linked");
  g_signal_connect (st->link, "frame", G_CALLBACK (on_bench_reply), st);
  *dir_out = dir;
  *bus_out = bus;
  return g_get_monotonic_time () - setup_t0;
}

/* Send @frames × @frame then "end"; wait for the sink's count. µs. The
 * sink's CPU time lands in st->peer_cpu_ns. */
static gint64
bench_burst (BenchState *st, GBytes *frame, guint frames)
{
  g_autoptr(GBytes) end = g_bytes_new_static ("end", 3);
  g_autofree char *want = g_strdup_printf ("got %u %" G_GSIZE_FORMAT, frames,
                                           (gsize) frames * g_bytes_get_size (frame));
  gint64 t0 = g_get_monotonic_time ();

  st->got_reply = FALSE;
  for (guint i = 0; i < frames; i++)
    rlx_link_send (st->link, frame, NULL);
  rlx_link_send (st->link, end, NULL);
  while (!st->got_reply)
    g_main_context_iteration (NULL, TRUE);
  if (!g_str_has_prefix (st->reply, want) || strstr (st->reply, " cpu ") != st->reply + strlen (want))
    g_error ("sink answered '%s', expected '%s cpu …'", st->reply, want);
  st->peer_cpu_ns = g_ascii_strtoll (st->reply + strlen (want) + 5, NULL, 10);
  return g_get_monotonic_time () - t0;
}

static int
run_bench (guint frames, gsize mib, guint runs)
{
  gsize size = mib << 20;
  g_autofree double *raw = g_new (double, runs);
  g_autofree double *bus_rates = g_new (double, runs);
  g_autofree char *dir = NULL;
  g_autoptr(RlxLocalBus) bus = NULL;
  g_autoptr(GBytes) frame = NULL;
  g_autoptr(GBytes) end = g_bytes_new_static ("end", 3);
  GPid child;
  gint child_stdin;
  BenchState st = { 0 };
  gint64 setup_us;
  double ping_us, raw_ping_us;

  for (guint r = 0; r < runs; r++)
    raw[r] = raw_reference (frames, size);
  raw_ping_us = raw_ping_reference (PING_COUNT, PING_SIZE);

  setup_us = bench_connect ("sink", &st, &dir, &bus, &child, &child_stdin);

  {
    guint8 *data = g_malloc (size);
    memset (data, 0xa5, size);
    frame = g_bytes_new_take (data, size);
  }

  for (guint r = 0; r < runs; r++)
    bus_rates[r] = (double) frames * size / (bench_burst (&st, frame, frames) / 1e6) / 1e9;

  /* Round trip of a small frame (a heartbeat-sized control message). */
  {
    g_autofree double *rtt = g_new (double, PING_COUNT);
    char ping[PING_SIZE];

    memset (ping, ' ', sizeof ping);
    memcpy (ping, "ping", 4);
    for (guint i = 0; i < PING_COUNT; i++)
      {
        g_autoptr(GBytes) p = g_bytes_new (ping, sizeof ping);
        gint64 t0 = g_get_monotonic_time ();

        st.got_reply = FALSE;
        rlx_link_send (st.link, p, NULL);
        while (!st.got_reply)
          g_main_context_iteration (NULL, TRUE);
        rtt[i] = g_get_monotonic_time () - t0;
      }
    qsort (rtt, PING_COUNT, sizeof (double), compare_doubles);
    ping_us = rtt[PING_COUNT / 2];
  }

  close (child_stdin);
  waitpid (child, NULL, 0);
  g_clear_object (&st.link);
  rlx_local_bus_stop (bus);
  rmdir (dir);
  (void) end;

  printf ("local-bus bench: %u frames of %" G_GSIZE_FORMAT " MiB per run, %u runs, %u CPUs\n",
          frames, mib, runs, g_get_num_processors ());
  printf ("  raw:");
  for (guint r = 0; r < runs; r++)
    printf (" %.2f", raw[r]);
  printf (" GB/s\n  bus:");
  for (guint r = 0; r < runs; r++)
    printf (" %.2f", bus_rates[r]);
  printf (" GB/s\n");
  qsort (raw, runs, sizeof (double), compare_doubles);
  qsort (bus_rates, runs, sizeof (double), compare_doubles);
  printf ("  round trip of a %d-byte frame (median of %d): local bus %.1f us, raw blocking socketpair %.1f us\n",
          PING_SIZE, PING_COUNT, ping_us, raw_ping_us);
  printf ("  link set-up (start to ::link-added, peer already listening): %.2f ms\n",
          setup_us / 1000.0);
  printf ("local bus %.2f GB/s (median), raw blocking socketpair %.2f GB/s (median), ratio %.2f\n",
          bus_rates[runs / 2], raw[runs / 2], bus_rates[runs / 2] / raw[runs / 2]);
  g_free (st.reply);
  return 0;
}

/* Socket against memfd for one bulk frame size after another, alternating
 * the two in each run so both see the same machine. */
static int
run_shm_bench (guint runs, gboolean json)
{
  static const gsize sizes[] = { 64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20 };
  g_autofree char *dir = NULL;
  g_autoptr(RlxLocalBus) bus = NULL;
  BenchState st = { 0 };
  GPid child;
  gint child_stdin;

  bench_connect ("sink-read", &st, &dir, &bus, &child, &child_stdin);
  if (!json)
    {
      printf ("local bus, socket vs memfd: bulk frames to a process that reads every byte; "
              "median of %u runs, %u CPUs\n\n", runs, g_get_num_processors ());
      printf ("| frame | socket MB/s | memfd MB/s | × | socket µs/frame | memfd µs/frame | "
              "socket round trip µs | memfd round trip µs | socket CPU µs/frame | "
              "memfd CPU µs/frame |\n|---|---|---|---|---|---|---|---|---|---|\n");
    }
  for (guint s = 0; s < G_N_ELEMENTS (sizes); s++)
    {
      gsize size = sizes[s];
      /* ≥ 128 MiB a run, ≥ 16 frames */
      guint frames = MAX (16, (guint) ((128u << 20) / size));
      guint pings = MAX (20, (guint) ((32u << 20) / size));
      g_autoptr(GBytes) frame = NULL;
      double rate[2][16], rtt[2][16], cpu[2][16];

      {
        guint8 *data = g_malloc (size);
        for (gsize i = 0; i < size; i++)
          data[i] = (guint8) (i * 13);
        frame = g_bytes_new_take (data, size);
      }
      for (guint r = 0; r < MIN (runs, 16); r++)
        for (guint mode = 0; mode < 2; mode++)
          {
            g_autofree double *one = g_new (double, pings);

            /* mode 0: socket; 1: memfd for every frame of this size */
            gint64 cpu0, peer0;

            rlx_unix_link_set_shm_min (RLX_UNIX_LINK (st.link), mode ? 1 : 0);
            bench_burst (&st, frame, 2);   /* warm */
            cpu0 = cpu_ns ();
            peer0 = st.peer_cpu_ns;
            rate[mode][r] = (double) frames * size / (double) bench_burst (&st, frame, frames);
            /* CPU µs per frame, both processes: what a frame costs whatever
             * else the machine runs */
            cpu[mode][r] = (cpu_ns () - cpu0 + st.peer_cpu_ns - peer0) / 1e3 / frames;
            for (guint i = 0; i < pings; i++)
              one[i] = (double) bench_burst (&st, frame, 1);
            qsort (one, pings, sizeof (double), compare_doubles);
            rtt[mode][r] = one[pings / 2];
          }
      for (guint mode = 0; mode < 2; mode++)
        {
          qsort (rate[mode], MIN (runs, 16), sizeof (double), compare_doubles);
          qsort (rtt[mode], MIN (runs, 16), sizeof (double), compare_doubles);
          qsort (cpu[mode], MIN (runs, 16), sizeof (double), compare_doubles);
        }
      {
        guint m = MIN (runs, 16) / 2;
        double sock = rate[0][m], shm = rate[1][m];

        if (json)
          printf ("{\"size\":%" G_GSIZE_FORMAT ",\"socket_mbs\":%.1f,\"memfd_mbs\":%.1f,"
                  "\"socket_rtt_us\":%.1f,\"memfd_rtt_us\":%.1f,\"socket_cpu_us\":%.1f,"
                  "\"memfd_cpu_us\":%.1f}\n",
                  size, sock, shm, rtt[0][m], rtt[1][m], cpu[0][m], cpu[1][m]);
        else
          printf ("| %" G_GSIZE_FORMAT " KiB | %.0f | %.0f | %.2f | %.1f | %.1f | %.1f | %.1f | "
                  "%.1f | %.1f |\n",
                  size >> 10, sock, shm, shm / sock, size / sock, size / shm, rtt[0][m],
                  rtt[1][m], cpu[0][m], cpu[1][m]);
      }
    }
  close (child_stdin);
  waitpid (child, NULL, 0);
  g_clear_object (&st.link);
  rlx_local_bus_stop (bus);
  rmdir (dir);
  g_free (st.reply);
  return 0;
}

int
main (int argc, char **argv)
{
  signal (SIGPIPE, SIG_IGN);

  if (argc == 4 && strcmp (argv[1], "node") == 0)
    return run_node (argv[2], argv[3], FALSE, FALSE);
  if (argc == 4 && strcmp (argv[1], "sink") == 0)
    return run_node (argv[2], argv[3], TRUE, FALSE);
  if (argc == 4 && strcmp (argv[1], "sink-read") == 0)
    return run_node (argv[2], argv[3], TRUE, TRUE);
  if (argc >= 2 && strcmp (argv[1], "shm-bench") == 0)
    {
      guint runs = argc > 2 ? atoi (argv[2]) : 5;

      if (runs == 0 || runs > 16)
        {
          fprintf (stderr, "usage: p2p-helper shm-bench [RUNS (1-16) [--json]]\n");
          return 2;
        }
      return run_shm_bench (runs, argc > 3 && strcmp (argv[3], "--json") == 0);
    }
  if (argc >= 2 && strcmp (argv[1], "bench") == 0)
    {
      guint frames = argc > 2 ? atoi (argv[2]) : 64;
      guint mib = argc > 3 ? atoi (argv[3]) : 4;
      guint runs = argc > 4 ? atoi (argv[4]) : 5;

      if (frames == 0 || mib == 0 || mib > 60 || runs == 0)
        {
          fprintf (stderr, "usage: p2p-helper bench [FRAMES [MIB (1-60) [RUNS]]]\n");
          return 2;
        }
      return run_bench (frames, mib, runs);
    }
  fprintf (stderr, "usage: p2p-helper node|sink|sink-read DIR ID | bench [FRAMES [MIB [RUNS]]] | "
                   "shm-bench [RUNS [--json]]\n");
  return 2;
}
