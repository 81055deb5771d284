/* rlx-udp-path.h — the selected ICE pair's UDP socket, used directly for bulk
 *
 * libnice owns the socket of the pair ICE selected and reads it one datagram
 * per recvmsg; at hundreds of MB/s that is most of a core. Once a pair is
 * selected and it is a plain UDP socket of ours (not a TURN relay, not TCP),
 * the remote link moves its QUIC datagrams over that same socket itself:
 *
 *   send     runs of equal-sized datagrams leave in one sendmsg with
 *            UDP_SEGMENT (GSO), a single one in a plain sendmsg.
 *   receive  (optional, while the owner says so) UDP_GRO on the socket and
 *            recvmmsg: one system call returns several messages, each a
 *            train of datagrams the kernel kept together (cmsg UDP_GRO gives
 *            the segment size); the trains are cut back into datagrams and
 *            handed over in one batch.
 *
 * The receive side must win every read of that socket from libnice, whose
 * own source polls the same file descriptor: the owner attaches it at a
 * higher priority than libnice's sources (G_PRIORITY_DEFAULT) and raises its
 * own sources to the same priority, so only libnice's wait while bulk flows.
 *
 * ICE traffic still arrives on that socket (told apart as libnice does: a
 * valid STUN header, RFC 7983): keepalive indications are dropped (they need
 * no answer); anything else libnice must see — a STUN request or response, a
 * datagram from another address — is dropped too, and ::stray tells the
 * owner to give reading back to libnice for a while (STUN retransmits what
 * was lost).
 *
 * Not thread-safe: use it on the thread that runs @context.
 */
#pragma once

#include <glib.h>
#include <sys/socket.h>
#include "core/p2p/rlx-quic.h"

G_BEGIN_DECLS

typedef enum {
  RLX_UDP_DATAGRAM_QUIC,            /* anything that is not STUN */
  RLX_UDP_DATAGRAM_STUN_INDICATION, /* a keepalive: nobody answers it */
  RLX_UDP_DATAGRAM_STUN,            /* request or response: libnice's */
  RLX_UDP_DATAGRAM_JUNK,            /* empty */
} RlxUdpDatagramKind;

RlxUdpDatagramKind rlx_udp_datagram_classify (const guint8 *data, gsize len);

/* Cut a received message of @len bytes into datagrams: @segment is the
 * UDP_GRO segment size (0: the message is one datagram). Writes at most
 * @max entries and returns how many; 0 for an empty message. */
guint rlx_udp_split (const guint8 *data, gsize len, gsize segment, RlxDatagram *out, guint max);

typedef struct {
  /* @n datagrams from the peer (all but STUN), in arrival order; @bytes:
   * what the peer's address sent, STUN included. */
  void (*datagrams) (const RlxDatagram *datagrams, guint n, gsize bytes, gpointer user_data);
  /* Something for libnice arrived and was dropped (@what says which);
   * called last in a dispatch, so the owner may stop receiving here (but
   * not free the path). */
  void (*stray)     (const char *what, gpointer user_data);
} RlxUdpPathCallbacks;

typedef struct _RlxUdpPath RlxUdpPath;

/* @fd stays owned by libnice; @peer is the selected remote address. */
RlxUdpPath *rlx_udp_path_new   (int fd, const struct sockaddr *peer, socklen_t peer_len);
int         rlx_udp_path_get_fd (RlxUdpPath *self);
/* Send datagrams [d, d+n): how many went out (the first run of equal sizes
 * in one GSO call, or one), 0 if the socket is full for now, -1 if the
 * kernel refuses GSO here (the owner sends another way from now on). A path
 * that is down (no route, interface down) counts as sent: lost, like any
 * UDP datagram, and QUIC recovers. */
gint        rlx_udp_path_send  (RlxUdpPath *self, const RlxDatagram *d, guint n);
/* Read the socket from @context at @priority until stopped. */
void        rlx_udp_path_start_receive (RlxUdpPath *self, GMainContext *context, gint priority,
                                        const RlxUdpPathCallbacks *callbacks, gpointer user_data);
/* Stop reading: libnice reads again. With @deliver_queued, what waits in
 * the socket is delivered first (GRO trains libnice could not cut), then GRO
 * is turned off; without it (the owner is going away, or is inside QUIC), it
 * is left to libnice. */
void        rlx_udp_path_stop_receive  (RlxUdpPath *self, gboolean deliver_queued);
gboolean    rlx_udp_path_is_receiving  (RlxUdpPath *self);
/* Whether the kernel coalesces datagrams for us (UDP_GRO accepted). */
gboolean    rlx_udp_path_has_gro       (RlxUdpPath *self);
void        rlx_udp_path_free  (RlxUdpPath *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxUdpPath, rlx_udp_path_free)

G_END_DECLS
