/* hop-probe.c — how long one hand-off between threads or processes takes
 * on this machine, the way the engine hands work over.
 *
 * A round of a cohort crosses about ten of these hand-offs (worker → main
 * loop → link I/O thread → socket → the peer's I/O thread → its main loop
 * → its worker, and back), so what one costs on a host bounds how fast a
 * round can be there. Each figure is a ping-pong: the median, 10th and
 * 90th percentile of one round trip, halved (one hop), over N rounds:
 *
 *   queue      two threads, a GAsyncQueue each way (the worker's job queue)
 *   queue-spin the same, the receiver polling the queue for up to 200 µs
 *              before it sleeps
 *   context    two threads, each running a GMainLoop; g_main_context_invoke
 *              each way (how results reach the main loop)
 *   socket     two processes, a blocking socketpair, 64 bytes each way
 *   spin       two threads, one atomic each way, never sleeping (the floor)
 *
 *   hop-probe [ROUNDS]     (default 20000)
 */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static guint rounds = 20000;

static int
cmp_i64 (const void *a, const void *b)
{
  gint64 x = *(const gint64 *) a, y = *(const gint64 *) b;
  return x < y ? -1 : x > y;
}

static void
report (const char *name, gint64 *ns, guint n)
{
  qsort (ns, n, sizeof *ns, cmp_i64);
  printf ("{\"probe\": \"%s\", \"rounds\": %u, \"hop_us_median\": %.2f, \"hop_us_p10\": %.2f, "
          "\"hop_us_p90\": %.2f}\n",
          name, n, ns[n / 2] / 2000.0, ns[n / 10] / 2000.0, ns[n * 9 / 10] / 2000.0);
  fflush (stdout);
}

static gint64
now_ns (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (gint64) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ── GAsyncQueue ping-pong ── */

typedef struct {
  GAsyncQueue *to, *from;
  gboolean     spin;
} QPair;

static gpointer
q_pop (GAsyncQueue *q, gboolean spin)
{
  if (spin)
    {
      gint64 until = now_ns () + 200000;
      do
        {
          gpointer p = g_async_queue_try_pop (q);
          if (p != NULL)
            return p;
        }
      while (now_ns () < until);
    }
  return g_async_queue_pop (q);
}

static gpointer
q_echo (gpointer data)
{
  QPair *p = data;
  for (;;)
    {
      gpointer m = q_pop (p->to, p->spin);
      g_async_queue_push (p->from, m);
      if (GPOINTER_TO_UINT (m) == 2)
        return NULL;
    }
}

static void
probe_queue (gboolean spin)
{
  QPair p = { g_async_queue_new (), g_async_queue_new (), spin };
  GThread *t = g_thread_new ("echo", q_echo, &p);
  gint64 *ns = g_new (gint64, rounds);

  for (guint i = 0; i < rounds; i++)
    {
      gint64 t0 = now_ns ();
      g_async_queue_push (p.to, GUINT_TO_POINTER (1));
      q_pop (p.from, spin);
      ns[i] = now_ns () - t0;
    }
  g_async_queue_push (p.to, GUINT_TO_POINTER (2));
  q_pop (p.from, spin);
  g_thread_join (t);
  report (spin ? "queue-spin" : "queue", ns, rounds);
  g_free (ns);
  g_async_queue_unref (p.to);
  g_async_queue_unref (p.from);
}

/* ── GMainContext ping-pong ── */

typedef struct {
  GMainContext *a, *b;
  GMainLoop    *la, *lb;
  guint         i;
  gint64        t0;
  gint64       *ns;
} CPair;

static gboolean on_a (gpointer data);

static gboolean
on_b (gpointer data)
{
  CPair *p = data;
  g_main_context_invoke (p->a, on_a, p);
  return G_SOURCE_REMOVE;
}

static gboolean
on_a (gpointer data)
{
  CPair *p = data;
  gint64 t = now_ns ();

  if (p->t0 != 0)
    p->ns[p->i++] = t - p->t0;
  if (p->i == rounds)
    {
      g_main_loop_quit (p->la);
      g_main_loop_quit (p->lb);
      return G_SOURCE_REMOVE;
    }
  p->t0 = now_ns ();
  g_main_context_invoke (p->b, on_b, p);
  return G_SOURCE_REMOVE;
}

static gpointer
run_b (gpointer data)
{
  CPair *p = data;
  g_main_context_push_thread_default (p->b);
  g_main_loop_run (p->lb);
  g_main_context_pop_thread_default (p->b);
  return NULL;
}

static void
probe_context (void)
{
  CPair p = { 0 };
  GThread *t;

  p.a = g_main_context_new ();
  p.b = g_main_context_new ();
  p.la = g_main_loop_new (p.a, FALSE);
  p.lb = g_main_loop_new (p.b, FALSE);
  p.ns = g_new (gint64, rounds);
  t = g_thread_new ("ctx-b", run_b, &p);
  g_main_context_push_thread_default (p.a);
  g_main_context_invoke (p.a, on_a, &p);
  g_main_loop_run (p.la);
  g_main_context_pop_thread_default (p.a);
  g_thread_join (t);
  report ("context", p.ns, rounds);
  g_free (p.ns);
  g_main_loop_unref (p.la);
  g_main_loop_unref (p.lb);
  g_main_context_unref (p.a);
  g_main_context_unref (p.b);
}

/* ── socketpair between two processes ── */

static void
probe_socket (void)
{
  int sv[2];
  char buf[64] = { 0 };
  gint64 *ns = g_new (gint64, rounds);
  pid_t pid;

  if (socketpair (AF_UNIX, SOCK_STREAM, 0, sv) != 0)
    {
      perror ("socketpair");
      return;
    }
  pid = fork ();
  if (pid == 0)
    {
      close (sv[0]);
      for (;;)
        {
          ssize_t got = 0, r;
          while (got < 64 && (r = read (sv[1], buf + got, 64 - got)) > 0)
            got += r;
          if (got < 64 || write (sv[1], buf, 64) != 64)
            _exit (0);
        }
    }
  close (sv[1]);
  for (guint i = 0; i < rounds; i++)
    {
      gint64 t0 = now_ns ();
      ssize_t got = 0, r;
      if (write (sv[0], buf, 64) != 64)
        break;
      while (got < 64 && (r = read (sv[0], buf + got, 64 - got)) > 0)
        got += r;
      ns[i] = now_ns () - t0;
    }
  close (sv[0]);
  waitpid (pid, NULL, 0);
  report ("socket", ns, rounds);
  g_free (ns);
}

/* ── the floor: two spinning threads ── */

static gint ping, pong;

static gpointer
spin_echo (gpointer data)
{
  for (guint i = 1; i <= rounds; i++)
    {
      while (g_atomic_int_get (&ping) != (gint) i)
        ;
      g_atomic_int_set (&pong, (gint) i);
    }
  return NULL;
}

static void
probe_spin (void)
{
  gint64 *ns = g_new (gint64, rounds);
  GThread *t = g_thread_new ("spin", spin_echo, NULL);

  for (guint i = 1; i <= rounds; i++)
    {
      gint64 t0 = now_ns ();
      g_atomic_int_set (&ping, (gint) i);
      while (g_atomic_int_get (&pong) != (gint) i)
        ;
      ns[i - 1] = now_ns () - t0;
    }
  g_thread_join (t);
  report ("spin", ns, rounds);
  g_free (ns);
}

int
main (int argc, char **argv)
{
  if (argc > 1)
    rounds = (guint) CLAMP (atoi (argv[1]), 100, 10000000);
  probe_spin ();
  probe_queue (FALSE);
  probe_queue (TRUE);
  probe_context ();
  probe_socket ();
  return 0;
}
