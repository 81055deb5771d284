/* rlx-remote-link.h — an RlxLink to another machine: ICE (libnice) + QUIC
 *
 * The coordinator sees an RlxLink like the Unix link: whole frames, in
 * order, both ways; ::closed once, with the reason. Underneath:
 *
 *   ICE     a libnice agent in full mode with trickle, one stream, one
 *           component, UDP, non-reliable (datagrams). STUN and TURN servers
 *           from the configuration. A read is attached to the component
 *           before gathering starts (libnice only answers connectivity
 *           checks while something reads).
 *   QUIC    RlxQuic over that component: the controlling side is the QUIC
 *           client. TLS 1.3, both certificates pinned to the fingerprints
 *           exchanged through authenticated signalling.
 *
 * The caller (RlxRemoteNode) does the signalling: it sends our ICE
 * credentials (rlx_remote_link_get_local_credentials) and every
 * ::local-candidate to the peer, and hands the peer's credentials and
 * candidates to the link. The link is usable once ::ready is emitted;
 * frames sent before are queued. If it is not ready within the connect
 * timeout, or ICE fails, or the handshake fails, ::closed reports why
 * (RLX_REMOTE_ERROR_ICE_FAILED, _PIN_MISMATCH, _TIMEOUT, _TLS).
 *
 * Lanes (rlx-link.h) are QUIC streams: RLX_LINK_LANE_BULK (and plain
 * rlx_link_send) on one, RLX_LINK_LANE_CONTROL on the other, which overtakes
 * queued bulk data at packet granularity; order is kept within each lane,
 * not across them. "last-rx" moves with every datagram received (QUIC's
 * ACKs and keep-alives included), at most SYNC_MS late.
 *
 * rlx_link_close emits ::closed at once (RLX_LINK_ERROR_CLOSED) and lets
 * QUIC deliver what was queued for up to a second before it closes the
 * connection cleanly (the peer sees RLX_REMOTE_ERROR_CLOSED).
 *
 * Bulk speed: once ICE has concluded on a plain UDP pair, the link reads
 * and writes that pair's socket itself (UDP GRO and GSO, recvmmsg: a system
 * call per train of datagrams instead of one per datagram) and leaves it to
 * libnice again whenever ICE traffic needs libnice (rlx-udp-path.h).
 *
 * Threads: create and use it on one thread whose thread-default main
 * context runs (the main loop); signals are emitted there. The libnice
 * socket I/O, QUIC and its encryption run on the link's own I/O thread.
 */
#pragma once

#include <glib-object.h>
#include "core/p2p/rlx-link.h"
#include "core/p2p/rlx-identity.h"
#include "core/p2p/rlx-quic.h"
#include "core/p2p/rlx-remote-error.h"

G_BEGIN_DECLS

typedef struct {
  gboolean     controlling;        /* ICE controlling and QUIC client */
  RlxIdentity *identity;
  const char  *peer_id;            /* the peer's node id, for names */
  const char  *peer_fingerprint;   /* 64 hex digits, from signalling */
  const char  *stun_ip;            /* numeric; NULL: none */
  guint16      stun_port;
  const char  *turn_ip;            /* numeric; NULL: none */
  guint16      turn_port;
  const char  *turn_user;
  const char  *turn_password;
  gboolean     relay_only;         /* use TURN relayed candidates only */
  gsize        max_frame;          /* 0: 64 MiB */
  gsize        max_udp_payload;    /* 0: RlxQuic's default */
  RlxQuicCc    cc;
  guint        connect_timeout_ms; /* ICE + handshake; 0: 20000 */
  guint        idle_timeout_ms;    /* QUIC idle timeout; 0: 10000 */
} RlxRemoteLinkConfig;

#define RLX_TYPE_REMOTE_LINK (rlx_remote_link_get_type ())
G_DECLARE_FINAL_TYPE (RlxRemoteLink, rlx_remote_link, RLX, REMOTE_LINK, RlxLink)

/* Signals (on the creating thread's main context):
 *   ::local-candidate (const char *candidate)   an "a=candidate:…" line to
 *                                                send to the peer
 *   ::gathering-done  ()                         no more local candidates
 *   ::ready           ()                         ICE and QUIC are up, the
 *                                                peer's certificate matched
 * plus RlxLink's ::frame and ::closed. */

RlxRemoteLink *rlx_remote_link_new (const RlxRemoteLinkConfig *config, GError **error);

/* Our ICE username fragment and password (valid from creation). */
void     rlx_remote_link_get_local_credentials (RlxRemoteLink *self, char **ufrag, char **pwd);
/* The peer's; call once, before or after start. FALSE if they are not
 * ICE credentials. */
gboolean rlx_remote_link_set_remote_credentials (RlxRemoteLink *self, const char *ufrag,
                                                 const char *pwd, GError **error);
/* One trickled "a=candidate:…" (or "candidate:…") line from the peer. */
gboolean rlx_remote_link_add_remote_candidate (RlxRemoteLink *self, const char *candidate,
                                               GError **error);
/* The peer sent its last candidate. */
void     rlx_remote_link_remote_gathering_done (RlxRemoteLink *self);
/* Gather candidates and start checking. Connect the signals first. */
void     rlx_remote_link_start (RlxRemoteLink *self);

gboolean rlx_remote_link_is_ready (RlxRemoteLink *self);
/* rlx_link_send_lane (link, RLX_LINK_LANE_CONTROL, …). */
gboolean rlx_remote_link_send_control (RlxRemoteLink *self, GBytes *frame, GError **error);
/* "host", "srflx", "prflx" or "relay": the kinds of the selected local and
 * remote candidates ("host/host"), or NULL before a pair is selected. */
char    *rlx_remote_link_dup_path (RlxRemoteLink *self);
/* Our local candidates' transport addresses ("IP:PORT"), for tests. */
char   **rlx_remote_link_dup_local_addresses (RlxRemoteLink *self);
/* Smoothed round-trip time in µs (0 before the first sample). */
guint64  rlx_remote_link_get_rtt_us (RlxRemoteLink *self);
/* QUIC's delivery rate of our sends, bytes/s (0 before a sample). */
guint64  rlx_remote_link_get_delivery_rate (RlxRemoteLink *self);
/* Whether the link reads the selected pair's socket itself now (GRO and
 * batched reads, see rlx-udp-path.h) rather than through libnice: once ICE
 * is READY on a plain UDP pair with QUIC up, except for 2 s after ICE
 * traffic or a stranger's datagram showed up on that socket. */
gboolean rlx_remote_link_reads_directly (RlxRemoteLink *self);
const char *rlx_remote_link_get_peer_id (RlxRemoteLink *self);
/* Whether the link's I/O thread has ended and been joined: some time after
 * ::closed, once the ICE stream is gone and every socket is closed. What the
 * peer still sends through signalling (a late candidate) is dropped then. */
gboolean rlx_remote_link_is_finished (RlxRemoteLink *self);

G_END_DECLS
