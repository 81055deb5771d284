/* rlx-udp-path.c — GSO sends and GRO/recvmmsg receives on the selected pair's socket
 *
 * See rlx-udp-path.h.
 */
#define G_LOG_DOMAIN "rlx-remote"
#include "rlx-config.h"
#include "rlx-udp-path.h"

#include <errno.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <glib-unix.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* One recvmmsg: up to RX_MSGS messages of up to 64 KiB (a GRO train of ~45
 * datagrams at MTU 1500). */
#define RX_MSGS        8
#define RX_BUF         65536
/* Datagrams handed over per batch. */
#define RX_BATCH       256
/* recvmmsg calls per dispatch before other sources get their turn. */
#define RX_ROUNDS      4
/* At most this many datagrams in one GSO send (the kernel's limit is 64). */
#define TX_SEGMENTS    64
#define TX_MAX_BYTES   65000

struct _RlxUdpPath
{
  int                     fd;
  struct sockaddr_storage peer;
  socklen_t               peer_len;
  gboolean                gso_refused;

  GSource                *source;
  gboolean                gro;
  RlxUdpPathCallbacks     cb;
  gpointer                user_data;
  const char             *stray;      /* what was dropped for libnice, to report */
  guint8                 *bufs;       /* RX_MSGS × RX_BUF */
  struct mmsghdr          msgs[RX_MSGS];
  struct iovec            iov[RX_MSGS];
  struct sockaddr_storage from[RX_MSGS];
  union {
    char                  buf[CMSG_SPACE (sizeof (int))];
    struct cmsghdr        align;
  }                       ctl[RX_MSGS];
  RlxDatagram             batch[RX_BATCH];

  /* for the debug log */
  guint64                 rx_calls, rx_msgs, rx_datagrams, rx_dropped;
};

RlxUdpDatagramKind
rlx_udp_datagram_classify (const guint8 *data, gsize len)
{
  guint16 type, length;

  if (len == 0)
    return RLX_UDP_DATAGRAM_JUNK;
  /* STUN (RFC 5389) as libnice tells it from data: a type with the top two
   * bits clear, a length that covers exactly the rest, the magic cookie.
   * Everything else is QUIC's to judge (a peer that greases the QUIC bit,
   * RFC 9287, sends short headers with a first byte below 64). */
  if (len < 20 || (data[0] & 0xC0) != 0)
    return RLX_UDP_DATAGRAM_QUIC;
  type = (guint16) ((data[0] << 8) | data[1]);
  length = (guint16) ((data[2] << 8) | data[3]);
  if ((gsize) length + 20 != len || (length & 3) != 0 ||
      data[4] != 0x21 || data[5] != 0x12 || data[6] != 0xA4 || data[7] != 0x42)
    return RLX_UDP_DATAGRAM_QUIC;
  /* Class bits C1 (0x0100) and C0 (0x0010): 01 is an indication. */
  if ((type & 0x0110) == 0x0010)
    return RLX_UDP_DATAGRAM_STUN_INDICATION;
  return RLX_UDP_DATAGRAM_STUN;
}

guint
rlx_udp_split (const guint8 *data, gsize len, gsize segment, RlxDatagram *out, guint max)
{
  guint n = 0;

  if (segment == 0 || segment > len)
    segment = len;
  for (gsize off = 0; off < len && n < max; off += segment)
    {
      out[n].data = data + off;
      out[n].len = MIN (segment, len - off);
      n++;
    }
  return n;
}

RlxUdpPath *
rlx_udp_path_new (int fd, const struct sockaddr *peer, socklen_t peer_len)
{
  RlxUdpPath *self;

  g_return_val_if_fail (fd >= 0, NULL);
  g_return_val_if_fail (peer != NULL && peer_len <= sizeof (struct sockaddr_storage), NULL);

  self = g_new0 (RlxUdpPath, 1);
  self->fd = fd;
  memcpy (&self->peer, peer, peer_len);
  self->peer_len = peer_len;
  return self;
}

int
rlx_udp_path_get_fd (RlxUdpPath *self)
{
  g_return_val_if_fail (self != NULL, -1);
  return self->fd;
}

static gboolean
is_peer (RlxUdpPath *self, const struct sockaddr_storage *a, socklen_t len)
{
  if (a->ss_family != self->peer.ss_family)
    return FALSE;
  if (a->ss_family == AF_INET)
    {
      const struct sockaddr_in *x = (const void *) a, *y = (const void *) &self->peer;
      return len >= sizeof *x && x->sin_port == y->sin_port &&
             x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
  if (a->ss_family == AF_INET6)
    {
      const struct sockaddr_in6 *x = (const void *) a, *y = (const void *) &self->peer;
      return len >= sizeof *x && x->sin6_port == y->sin6_port &&
             memcmp (&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
    }
  return FALSE;
}

/* ── send ────────────────────────────────────────────────────────────────── */

static gint
send_result (RlxUdpPath *self, ssize_t rv, guint k)
{
  if (rv >= 0)
    return (gint) k;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS || errno == EINTR)
    return 0;
  /* The path is down for now (a cable pulled, a route gone): like any UDP
   * send, the datagrams are lost and QUIC recovers or times out. */
  if (errno == ENETUNREACH || errno == EHOSTUNREACH || errno == ECONNREFUSED ||
      errno == ENETDOWN || errno == EPERM || errno == EMSGSIZE)
    return (gint) k;
  return -1;
}

gint
rlx_udp_path_send (RlxUdpPath *self, const RlxDatagram *d, guint n)
{
  struct iovec iov[TX_SEGMENTS];
  union { char buf[CMSG_SPACE (sizeof (guint16))]; struct cmsghdr align; } ctl;
  struct msghdr msg = { 0 };
  struct cmsghdr *cm;
  guint16 seg;
  gsize total = 0;
  guint k = 0;
  gint rv;

  g_return_val_if_fail (self != NULL, -1);
  if (n == 0)
    return 0;
  if (self->gso_refused)
    return -1;
  msg.msg_name = &self->peer;
  msg.msg_namelen = self->peer_len;
  msg.msg_iov = iov;
  seg = (guint16) MIN (d[0].len, G_MAXUINT16);
  /* Segments of length seg, the last one possibly shorter. */
  while (k < n && k < TX_SEGMENTS && d[k].len <= seg && total + d[k].len <= TX_MAX_BYTES)
    {
      iov[k].iov_base = (void *) d[k].data;
      iov[k].iov_len = d[k].len;
      total += d[k].len;
      if (d[k++].len < seg)
        break;
    }
  if (k <= 1)
    {
      iov[0].iov_base = (void *) d[0].data;
      iov[0].iov_len = d[0].len;
      msg.msg_iovlen = 1;
      return send_result (self, sendmsg (self->fd, &msg, MSG_DONTWAIT), 1);
    }
  msg.msg_iovlen = k;
  msg.msg_control = ctl.buf;
  msg.msg_controllen = sizeof ctl.buf;
  cm = CMSG_FIRSTHDR (&msg);
  cm->cmsg_level = SOL_UDP;
  cm->cmsg_type = UDP_SEGMENT;
  cm->cmsg_len = CMSG_LEN (sizeof (guint16));
  memcpy (CMSG_DATA (cm), &seg, sizeof seg);
  rv = send_result (self, sendmsg (self->fd, &msg, MSG_DONTWAIT), k);
  if (rv < 0)
    {
      /* No GSO here (an old kernel, a device without it). */
      g_debug ("UDP GSO refused (%s); sending through libnice", g_strerror (errno));
      self->gso_refused = TRUE;
    }
  return rv;
}

/* ── receive ─────────────────────────────────────────────────────────────── */

static void
flush (RlxUdpPath *self, guint *n, gsize *bytes)
{
  if (*n > 0 || *bytes > 0)
    self->cb.datagrams (self->batch, *n, *bytes, self->user_data);
  self->rx_datagrams += *n;
  *n = 0;
  *bytes = 0;
}

/* One recvmmsg, delivered. Returns how many messages it read (0: none
 * waiting). */
static gint
read_once (RlxUdpPath *self)
{
  guint n = 0;
  gsize bytes = 0;
  int got;

  for (guint i = 0; i < RX_MSGS; i++)
    {
      struct msghdr *h = &self->msgs[i].msg_hdr;

      self->iov[i].iov_base = self->bufs + (gsize) i * RX_BUF;
      self->iov[i].iov_len = RX_BUF;
      h->msg_name = &self->from[i];
      h->msg_namelen = sizeof self->from[i];
      h->msg_iov = &self->iov[i];
      h->msg_iovlen = 1;
      h->msg_control = self->ctl[i].buf;
      h->msg_controllen = sizeof self->ctl[i].buf;
      h->msg_flags = 0;
    }
  got = recvmmsg (self->fd, self->msgs, RX_MSGS, MSG_DONTWAIT, NULL);
  self->rx_calls++;
  if (got < 0)
    {
      if (errno == EINTR)
        return 1;
      /* EAGAIN: nothing waiting. An ICMP error (ECONNREFUSED …) is reported
       * once and cleared; the next read goes on. */
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        g_debug ("reading the selected pair's socket: %s", g_strerror (errno));
      return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : 1;
    }
  self->rx_msgs += (guint) got;
  for (int i = 0; i < got; i++)
    {
      struct msghdr *h = &self->msgs[i].msg_hdr;
      const guint8 *data = self->iov[i].iov_base;
      gsize len = self->msgs[i].msg_len;
      gsize segment = 0;

      if (!is_peer (self, &self->from[i], h->msg_namelen))
        {
          self->stray = "a datagram from another address";
          self->rx_dropped++;
          continue;
        }
      bytes += len;
      if (h->msg_flags & MSG_TRUNC)
        {
          self->rx_dropped++;
          continue;
        }
      for (struct cmsghdr *c = CMSG_FIRSTHDR (h); c != NULL; c = CMSG_NXTHDR (h, c))
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
            c->cmsg_len >= CMSG_LEN (sizeof (int)))
          {
            int s;
            memcpy (&s, CMSG_DATA (c), sizeof s);
            segment = s > 0 ? (gsize) s : 0;
          }
      for (gsize off = 0; off < len;)
        {
          RlxDatagram *d;
          guint k;

          if (n == RX_BATCH)
            flush (self, &n, &bytes);
          d = &self->batch[n];
          k = rlx_udp_split (data + off, len - off, segment, d, 1);
          g_assert (k == 1);
          off += d->len;
          switch (rlx_udp_datagram_classify (d->data, d->len))
            {
            case RLX_UDP_DATAGRAM_QUIC:
              n++;
              break;
            case RLX_UDP_DATAGRAM_STUN:
              self->stray = "a STUN request or response";
              self->rx_dropped++;
              break;
            case RLX_UDP_DATAGRAM_STUN_INDICATION:
            case RLX_UDP_DATAGRAM_JUNK:
            default:
              self->rx_dropped++;
              break;
            }
        }
    }
  flush (self, &n, &bytes);
  return got;
}

static gboolean
on_readable (gint fd, GIOCondition condition, gpointer user_data)
{
  RlxUdpPath *self = user_data;
  const char *stray;

  for (guint round = 0; round < RX_ROUNDS && self->source != NULL; round++)
    if (read_once (self) < RX_MSGS)
      break;
  /* Last: the owner may stop us from here. */
  stray = g_steal_pointer (&self->stray);
  if (stray != NULL && self->cb.stray != NULL)
    self->cb.stray (stray, self->user_data);
  return G_SOURCE_CONTINUE;
}

static void
set_gro (RlxUdpPath *self, gboolean on)
{
  int v = on ? 1 : 0;

  self->gro = setsockopt (self->fd, SOL_UDP, UDP_GRO, &v, sizeof v) == 0 && on;
}

void
rlx_udp_path_start_receive (RlxUdpPath *self, GMainContext *context, gint priority,
                            const RlxUdpPathCallbacks *callbacks, gpointer user_data)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (callbacks != NULL && callbacks->datagrams != NULL);
  if (self->source != NULL)
    return;
  self->cb = *callbacks;
  self->user_data = user_data;
  self->stray = NULL;
  if (self->bufs == NULL)
    self->bufs = g_malloc ((gsize) RX_MSGS * RX_BUF);
  set_gro (self, TRUE);
  self->source = g_unix_fd_source_new (self->fd, G_IO_IN);
  g_source_set_priority (self->source, priority);
  g_source_set_callback (self->source, G_SOURCE_FUNC (on_readable), self, NULL);
  g_source_set_static_name (self->source, "rlx-udp-path receive");
  g_source_attach (self->source, context);
  g_debug ("reading the selected pair's socket directly (UDP GRO %s)", self->gro ? "on" : "refused");
}

void
rlx_udp_path_stop_receive (RlxUdpPath *self, gboolean deliver_queued)
{
  g_return_if_fail (self != NULL);
  if (self->source == NULL)
    return;
  /* What waits may be GRO trains libnice could not cut: take it first, then
   * turn GRO off, then take what was coalesced meanwhile. */
  for (guint i = 0; deliver_queued && i < 64 && read_once (self) > 0; i++)
    ;
  set_gro (self, FALSE);
  for (guint i = 0; deliver_queued && i < 64 && read_once (self) > 0; i++)
    ;
  self->stray = NULL;
  g_source_destroy (self->source);
  g_clear_pointer (&self->source, g_source_unref);
  g_debug ("the selected pair's socket is libnice's again (%" G_GUINT64_FORMAT " reads, %"
           G_GUINT64_FORMAT " messages, %" G_GUINT64_FORMAT " datagrams, %" G_GUINT64_FORMAT
           " dropped)", self->rx_calls, self->rx_msgs, self->rx_datagrams, self->rx_dropped);
}

gboolean
rlx_udp_path_is_receiving (RlxUdpPath *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->source != NULL;
}

gboolean
rlx_udp_path_has_gro (RlxUdpPath *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->source != NULL && self->gro;
}

void
rlx_udp_path_free (RlxUdpPath *self)
{
  if (self == NULL)
    return;
  if (self->source)
    {
      g_source_destroy (self->source);
      g_source_unref (self->source);
      set_gro (self, FALSE);
    }
  g_free (self->bufs);
  g_free (self);
}
