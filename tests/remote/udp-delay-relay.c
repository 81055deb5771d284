/* udp-delay-relay.c — a user-space UDP relay that adds a fixed delay
 *
 *   udp-delay-relay --a IP:PORT --b IP:PORT --to IP:PORT --delay-ms D
 *
 * This kernel has no netem, so round-trip time for the 50 ms benchmark is
 * added here. Datagrams arriving on A are sent, D ms later, from B to TO;
 * datagrams arriving on B from TO are sent, D ms later, from A to whoever
 * last sent to A. So the two ends see each other through the relay (ICE
 * learns the B side as a peer-reflexive candidate), each direction delayed
 * by D. Packets keep their order; the queue holds at most 64 MiB per
 * direction (more is dropped, like a full router buffer).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_QUEUE (64u << 20)

typedef struct Pkt {
  struct Pkt *next;
  int64_t     due_us;
  size_t      len;
  unsigned char data[];
} Pkt;

typedef struct {
  Pkt   *head, *tail;
  size_t bytes;
} Queue;

static int64_t
now_us (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int
parse (const char *s, struct sockaddr_in *a)
{
  char ip[64];
  const char *c = strrchr (s, ':');
  if (!c || (size_t) (c - s) >= sizeof ip)
    return -1;
  memcpy (ip, s, (size_t) (c - s));
  ip[c - s] = 0;
  memset (a, 0, sizeof *a);
  a->sin_family = AF_INET;
  a->sin_port = htons ((uint16_t) atoi (c + 1));
  return inet_pton (AF_INET, ip, &a->sin_addr) == 1 ? 0 : -1;
}

static int
bind_udp (struct sockaddr_in *a)
{
  int fd = socket (AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  int sz = 8 << 20;
  setsockopt (fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
  setsockopt (fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  if (fd < 0 || bind (fd, (struct sockaddr *) a, sizeof *a) < 0)
    {
      perror ("bind");
      exit (1);
    }
  return fd;
}

static void
push (Queue *q, const unsigned char *d, size_t n, int64_t due)
{
  Pkt *p;
  if (q->bytes + n > MAX_QUEUE)
    return;
  p = malloc (sizeof *p + n);
  p->next = NULL;
  p->due_us = due;
  p->len = n;
  memcpy (p->data, d, n);
  if (q->tail)
    q->tail->next = p;
  else
    q->head = p;
  q->tail = p;
  q->bytes += n;
}

/* Send everything due; returns ms until the next packet is due (-1: none). */
static int
flush (Queue *q, int fd, struct sockaddr_in *to, int have_to)
{
  int64_t now = now_us ();
  while (q->head && q->head->due_us <= now)
    {
      Pkt *p = q->head;
      if (have_to && sendto (fd, p->data, p->len, 0, (struct sockaddr *) to, sizeof *to) < 0 &&
          errno == EAGAIN)
        return 0;   /* retry as soon as poll says */
      q->head = p->next;
      if (!q->head)
        q->tail = NULL;
      q->bytes -= p->len;
      free (p);
    }
  if (!q->head)
    return -1;
  return (int) ((q->head->due_us - now + 999) / 1000);
}

int
main (int argc, char **argv)
{
  struct sockaddr_in a, b, to, last_a;
  int have_a = 0, delay_ms = 25, fa, fb;
  Queue qa = { 0 }, qb = { 0 };   /* qa: to be sent from B to TO; qb: from A to last_a */
  static unsigned char buf[65536];

  signal (SIGPIPE, SIG_IGN);
  for (int i = 1; i + 1 < argc; i += 2)
    {
      if (!strcmp (argv[i], "--a") && parse (argv[i + 1], &a) == 0)
        continue;
      if (!strcmp (argv[i], "--b") && parse (argv[i + 1], &b) == 0)
        continue;
      if (!strcmp (argv[i], "--to") && parse (argv[i + 1], &to) == 0)
        continue;
      if (!strcmp (argv[i], "--delay-ms"))
        {
          delay_ms = atoi (argv[i + 1]);
          continue;
        }
      fprintf (stderr, "usage: udp-delay-relay --a IP:PORT --b IP:PORT --to IP:PORT --delay-ms D\n");
      return 2;
    }
  fa = bind_udp (&a);
  fb = bind_udp (&b);
  printf ("relay ready\n");
  fflush (stdout);
  for (;;)
    {
      struct pollfd p[2] = { { fa, POLLIN, 0 }, { fb, POLLIN, 0 } };
      int ta = flush (&qa, fb, &to, 1);
      int tb = flush (&qb, fa, &last_a, have_a);
      int t = ta < 0 ? tb : tb < 0 ? ta : (ta < tb ? ta : tb);
      if (poll (p, 2, t) < 0 && errno != EINTR)
        return 1;
      for (;;)
        {
          struct sockaddr_in from;
          socklen_t fl = sizeof from;
          ssize_t n = recvfrom (fa, buf, sizeof buf, 0, (struct sockaddr *) &from, &fl);
          if (n < 0)
            break;
          last_a = from;
          have_a = 1;
          push (&qa, buf, (size_t) n, now_us () + (int64_t) delay_ms * 1000);
        }
      for (;;)
        {
          struct sockaddr_in from;
          socklen_t fl = sizeof from;
          ssize_t n = recvfrom (fb, buf, sizeof buf, 0, (struct sockaddr *) &from, &fl);
          if (n < 0)
            break;
          if (from.sin_addr.s_addr != to.sin_addr.s_addr || from.sin_port != to.sin_port)
            continue;
          push (&qb, buf, (size_t) n, now_us () + (int64_t) delay_ms * 1000);
        }
    }
}
