/* rlx-quic.h — one QUIC connection (ngtcp2 + GnuTLS) over a datagram path
 *
 * The remote link feeds it the datagrams of a non-reliable libnice
 * component and gives it a function that sends datagrams back on that
 * component; the connection does everything else: TLS 1.3 with mutual
 * authentication, congestion control (BBRv2 unless configured), pacing,
 * flow control, loss recovery. No home-made reliability or crypto.
 *
 * Identity: both sides present their self-signed certificate (RlxIdentity)
 * and accept exactly one certificate from the peer: the one whose SHA-256
 * fingerprint came through the authenticated signalling (pinning). Anything
 * else fails the handshake with RLX_REMOTE_ERROR_PIN_MISMATCH.
 *
 * Streams: each side opens two unidirectional streams once the handshake is
 * done — CONTROL first, then BULK. Frames ([u32 LE length][body], at most
 * max_frame; received on CONTROL at most RLX_LINK_MAX_CONTROL_FRAME, a
 * larger one ends the connection with RLX_REMOTE_ERROR_PROTOCOL) go whole and in order on the stream they are sent on; when
 * both have data, CONTROL goes first at packet granularity, so a heartbeat
 * or a commit never waits behind a multi-megabyte bucket. Order between the
 * two streams is not kept.
 *
 * Closing: rlx_quic_close lets queued frames reach the peer (until acked, at
 * most the linger time) and then closes the connection; the peer sees a
 * clean close (RLX_REMOTE_ERROR_CLOSED). Every other end reports why:
 * handshake/idle timeout (TIMEOUT), pin mismatch on either side
 * (PIN_MISMATCH), a TLS failure (TLS), a peer that breaks the rules
 * (PROTOCOL).
 *
 * Threads: create it on the thread that will use it, with that thread's
 * thread-default main context running; callbacks run there. Not
 * thread-safe.
 */
#pragma once

#include <glib.h>
#include "core/p2p/rlx-identity.h"
#include "core/p2p/rlx-remote-error.h"

G_BEGIN_DECLS

typedef enum {
  RLX_QUIC_STREAM_CONTROL = 0,
  RLX_QUIC_STREAM_BULK    = 1,
  RLX_QUIC_N_STREAMS      = 2,
} RlxQuicStream;

/* The congestion controller. DEFAULT is BBRv2: ngtcp2 0.12's CUBIC and Reno
 * stop growing the window at 2.89 × (the highest delivery rate × the lowest
 * RTT), at least 2.89 initial windows: ~42 KB on a LAN, whose RTT is tens of
 * microseconds. A cohort's buckets (100 KB and more) then took three round
 * trips each way where BBRv2's window (its bandwidth-delay product plus a
 * budget of three send quanta) takes one; over a 50 ms WAN the two are even
 * (BENCHMARKS.md, "Remote peers"). */
typedef enum {
  RLX_QUIC_CC_DEFAULT,
  RLX_QUIC_CC_CUBIC,
  RLX_QUIC_CC_BBR,
  RLX_QUIC_CC_BBR2,
  RLX_QUIC_CC_RENO,
} RlxQuicCc;

typedef struct {
  const guint8 *data;
  gsize         len;
} RlxDatagram;

typedef struct {
  /* Send @n datagrams on the path; return how many were taken (the rest are
   * offered again shortly). Required. */
  guint    (*send)        (const RlxDatagram *datagrams, guint n, gpointer user_data);
  /* The handshake finished and the peer's certificate matched the pin. */
  void     (*established) (gpointer user_data);
  /* A whole frame arrived on @stream. Return TRUE while the consumer has
   * room for more; FALSE (its inbox is full): the flow-control credit of
   * everything received from then on is held until rlx_quic_resume_rx, so
   * the peer stalls once its window is spent. Memory held for a consumer
   * that stopped is then at most its inbox, the frame that filled it, the
   * connection's window (the only flow control: 16 MiB, never grown) and
   * a frame in progress on each stream (its
   * bytes' credit goes back as they arrive: up to max_frame on BULK,
   * RLX_LINK_MAX_CONTROL_FRAME on CONTROL). */
  gboolean (*frame)       (RlxQuicStream stream, GBytes *frame, gpointer user_data);
  /* Frames were written into packets: @written[stream] is the total of
   * their lengths (prefixes excluded) since the start, per stream. */
  void     (*progress)    (const guint64 written[RLX_QUIC_N_STREAMS], gpointer user_data);
  /* The connection is gone, once; @error says why. The connection must not
   * be used afterwards except to free it. */
  void     (*closed)      (const GError *error, gpointer user_data);
} RlxQuicCallbacks;

typedef struct {
  gboolean     is_client;          /* the ICE-controlling side is the client */
  RlxIdentity *identity;           /* our certificate and key */
  const char  *peer_fingerprint;   /* the pin: 64 hex digits */
  gsize        max_frame;          /* 0: 64 MiB */
  gsize        max_udp_payload;    /* 0: 1452 (PMTU-probed from 1200) */
  RlxQuicCc    cc;
  guint        handshake_timeout_ms;  /* 0: 10000 */
  guint        idle_timeout_ms;       /* 0: 10000 */
  guint        keepalive_ms;          /* 0: 1000 */
  /* A frame in progress must come at RLX_FRAME_CLOCK_MIN_RATE after this
   * grace, or the connection ends (RLX_REMOTE_ERROR_PROTOCOL;
   * rlx-frame-clock.h). 0: RLX_LINK_FRAME_GRACE_MS or 15000. */
  guint        frame_grace_ms;
  const char  *peer_name;          /* for messages */
} RlxQuicConfig;

typedef struct _RlxQuic RlxQuic;

RlxQuic  *rlx_quic_new      (const RlxQuicConfig *config, const RlxQuicCallbacks *callbacks,
                             gpointer user_data, GError **error);
/* Begin: the client sends its first flight; the server waits for it. */
void      rlx_quic_start    (RlxQuic *self);
/* One datagram from the path. Anything that is not QUIC for this connection
 * is dropped without an answer. */
void      rlx_quic_receive  (RlxQuic *self, const guint8 *data, gsize len);
/* @n datagrams that arrived together (a recvmmsg batch, a GRO train): the
 * same as receiving them one by one, with one clock reading for all. */
void      rlx_quic_receive_batch (RlxQuic *self, const RlxDatagram *datagrams, guint n);
/* Queue @frame on @stream. FALSE with RLX_REMOTE_ERROR_CLOSED once closing,
 * or G_IO_ERROR_MESSAGE_TOO_LARGE over max_frame (the connection stays). */
gboolean  rlx_quic_send     (RlxQuic *self, RlxQuicStream stream, GBytes *frame,
                             GError **error);
/* Close cleanly after the queued frames are acknowledged (at most
 * @linger_ms); ::closed follows with RLX_REMOTE_ERROR_CLOSED. */
void      rlx_quic_close    (RlxQuic *self, guint linger_ms);
/* Close at once with @error (reported through ::closed). */
void      rlx_quic_abort    (RlxQuic *self, const GError *error);
/* The send queue was refused by the path earlier: try again now. */
void      rlx_quic_resume   (RlxQuic *self);
/* The consumer took its inbox after ::frame said it was full: return the
 * credit held since then (a no-op when none is held). */
void      rlx_quic_resume_rx (RlxQuic *self);
/* Bytes of frames in progress on both incoming streams (prefixes
 * included), and what is allocated for them. */
void      rlx_quic_get_rx_in_progress (RlxQuic *self, gsize *buffered, gsize *allocated);
/* TRUE while the credit is held (::frame said full, no resume yet). */
gboolean  rlx_quic_is_rx_held (RlxQuic *self);
/* The priority of the connection's timer/write source on its context
 * (G_PRIORITY_DEFAULT unless set): an owner that reads the datagrams at a
 * higher priority raises it too, so sending and timers keep their turn. */
void      rlx_quic_set_priority (RlxQuic *self, gint priority);
gboolean  rlx_quic_is_established (RlxQuic *self);
/* Frame bytes queued on both streams and not yet written into packets. */
guint64   rlx_quic_get_unsent (RlxQuic *self);
/* A controller by its name (bbr2, cubic, bbr, reno: RLX_QUIC_CC_NAMES, for
 * messages); FALSE for any other name. */
#define RLX_QUIC_CC_NAMES "bbr2 (the default), cubic, bbr or reno"
gboolean  rlx_quic_cc_from_name (const char *name, RlxQuicCc *cc);
/* The congestion controller's name ("bbr2", "cubic", …) and its window in
 * bytes now (0 before the connection exists). */
const char *rlx_quic_get_cc_name (RlxQuic *self);
guint64   rlx_quic_get_cwnd (RlxQuic *self);
/* The flow-control credit the peer gives our @stream, bytes (0 before it
 * is open): a stream's own window, which RlxQuic never limits (the
 * connection's is the limit: rlx-quic.c, STREAM_WINDOW), so about 2^62
 * between two of this version. */
guint64   rlx_quic_get_stream_credit (RlxQuic *self, RlxQuicStream stream);
/* Smoothed RTT in microseconds (0 before the first sample). */
guint64   rlx_quic_get_rtt_us (RlxQuic *self);
/* The rate our sends were delivered at, bytes/s, as ngtcp2 samples it from
 * acknowledgements (delivery_rate_sec; 0 before a sample). */
guint64   rlx_quic_get_delivery_rate (RlxQuic *self);
void      rlx_quic_free     (RlxQuic *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxQuic, rlx_quic_free)

G_END_DECLS
