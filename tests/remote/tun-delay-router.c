/* tun-delay-router.c — a router that delays every IP packet it forwards
 *
 *   tun-delay-router --dev NAME --delay-ms D
 *
 * This kernel has no netem. udp-delay-relay delays one UDP flow between two
 * endpoints that were told its address (the remote benchmark rewrites the
 * candidates); `rlx-rank join` ranks find each other through ICE, so for a
 * cohort between namespaces the delay must sit on the route instead. Run in
 * a router namespace with policy routing that sends what arrives from the
 * hosts' links into tun device NAME (scripts/netns-outer-bench.py sets it
 * up): each packet read from NAME is written back into it D ms later, and
 * the kernel forwards it on by its destination. Packets keep their order;
 * at most 64 MiB waits (more is dropped, like a full router buffer).
 * Prints "router ready" once the device is up.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define MAX_QUEUE (64u << 20)

typedef struct Pkt {
  struct Pkt *next;
  int64_t     due_us;
  size_t      len;
  unsigned char data[];
} Pkt;

static int64_t
now_us (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int
main (int argc, char **argv)
{
  const char *dev = NULL;
  int delay_ms = -1, fd;
  struct ifreq ifr;
  Pkt *head = NULL, *tail = NULL;
  size_t queued = 0;
  static unsigned char buf[65536];

  for (int i = 1; i + 1 < argc; i += 2)
    {
      if (!strcmp (argv[i], "--dev"))
        dev = argv[i + 1];
      else if (!strcmp (argv[i], "--delay-ms"))
        delay_ms = atoi (argv[i + 1]);
      else
        dev = NULL, i = argc;
    }
  if (dev == NULL || strlen (dev) >= IFNAMSIZ || delay_ms < 0 || delay_ms > 10000)
    {
      fprintf (stderr, "usage: tun-delay-router --dev NAME --delay-ms D (0-10000)\n");
      return 2;
    }
  fd = open ("/dev/net/tun", O_RDWR | O_NONBLOCK);
  if (fd < 0)
    {
      perror ("/dev/net/tun");
      return 1;
    }
  memset (&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  strcpy (ifr.ifr_name, dev);
  if (ioctl (fd, TUNSETIFF, &ifr) < 0)
    {
      perror ("TUNSETIFF");
      return 1;
    }
  printf ("router ready\n");
  fflush (stdout);
  for (;;)
    {
      int64_t now = now_us ();
      int t = -1;
      struct pollfd p = { fd, POLLIN, 0 };

      while (head && head->due_us <= now)
        {
          Pkt *q = head;
          if (write (fd, q->data, q->len) < 0 && errno == EAGAIN)
            break;
          head = q->next;
          if (!head)
            tail = NULL;
          queued -= q->len;
          free (q);
        }
      if (head)
        t = head->due_us <= now ? 0 : (int) ((head->due_us - now + 999) / 1000);
      if (poll (&p, 1, t) < 0 && errno != EINTR)
        return 1;
      for (;;)
        {
          ssize_t n = read (fd, buf, sizeof buf);
          Pkt *q;
          if (n <= 0)
            break;
          if (queued + (size_t) n > MAX_QUEUE)
            continue;
          q = malloc (sizeof *q + (size_t) n);
          if (q == NULL)
            continue;
          q->next = NULL;
          q->due_us = now_us () + (int64_t) delay_ms * 1000;
          q->len = (size_t) n;
          memcpy (q->data, buf, (size_t) n);
          if (tail)
            tail->next = q;
          else
            head = q;
          tail = q;
          queued += (size_t) n;
        }
    }
}
