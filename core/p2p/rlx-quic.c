/* rlx-quic.c — a QUIC connection (ngtcp2 0.12 + its GnuTLS helper) over datagrams
 *
 * See rlx-quic.h. The shape of it:
 *
 *   receive  → ngtcp2_conn_read_pkt; stream data goes through one
 *              RlxFrameReader per incoming stream, whole frames go to the
 *              owner; flow-control credit is returned as the owner takes the
 *              frames: once its frame callback says its inbox is full, the
 *              credit of every byte received waits for rlx_quic_resume_rx,
 *              so a peer that outruns the consumer stalls on flow control
 *              instead of growing this process's memory.
 *   service  (one GSource, driven by its ready time) → expiry handling, then
 *              the write loop: CONTROL's queue first, then BULK's, packets
 *              batched and handed to the path, at most one send quantum per
 *              dispatch so reads and timers get their turn (pacing).
 *   frames stay referenced until their bytes are acknowledged (ngtcp2 does
 *              not copy stream data).
 *
 * Failures found inside ngtcp2 callbacks are only recorded; they are acted
 * on (CONNECTION_CLOSE, ::closed) when the library call returns, never from
 * inside it.
 *
 * Over 1,000 lines: TLS, ngtcp2's callbacks, closing, writing and the
 * service source are one connection's state, and the callbacks reach all
 * of it from inside the library.
 */
#define G_LOG_DOMAIN "rlx-quic"
#include "rlx-config.h"
#include "rlx-quic.h"
#include "rlx-frame-reader.h"
#include "rlx-frame-clock.h"
#include "rlx-link.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <gio/gio.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

G_DEFINE_QUARK (rlx-remote-error-quark, rlx_remote_error)

#define DEFAULT_MAX_FRAME    ((gsize) 64 << 20)
#define DEFAULT_PAYLOAD      NGTCP2_MAX_PMTUD_UDP_PAYLOAD_SIZE
#define BATCH                64
#define MAX_VECS             16
#define SCID_LEN             16
/* Flow control is the connection's alone: a bucket of a few MB must fit in
 * flight at 100 ms RTT; the window is INITIAL_MAX_DATA and stays so
 * (MAX_WINDOW, ngtcp2's auto-tuning, is the same), since it bounds what a
 * peer makes this process hold beyond a full inbox: data out of order, or
 * whose credit is held, waits within it. ngtcp2 grew it up to the 96 MiB
 * this allowed before for a peer that spends its window within two round
 * trips — and a peer sets the round trip we measure by when it
 * acknowledges: 72 MiB held against 25 MiB (/remote/quic/pinned-memory,
 * docs/RELIABILITY.md). 16 MiB in flight is 1.3 Gbit/s at 100 ms, 3.4
 * at 40 ms, for one link. The streams' own windows are the
 * most QUIC allows and are never extended, so no MAX_STREAM_DATA is ever
 * sent: ngtcp2 0.12 (Debian 12's) raises a stream's receive limit only
 * once its MAX_STREAM_DATA frame fits in the packet being written; when
 * the packet is full (of retransmitted data, say) the frame goes out in a
 * later one while the limit stays behind, and the peer's data past it
 * fails the connection with ERR_FLOW_CONTROL (fixed in ngtcp2 0.19,
 * 2da36d2f "Update strm->rx.max_offset before writing a frame to
 * packet"). 2 of 6 two-rank mnist-mlp-xl cohorts between two network
 * namespaces lost their link so, both ways busy with 7.5 MB buckets over
 * a lossy 200 Mbit/s path. MAX_DATA has no such fault: its limit moves
 * when the frame is made. */
#define INITIAL_MAX_DATA     ((guint64) 16 << 20)
#define MAX_WINDOW           INITIAL_MAX_DATA
#define STREAM_WINDOW        ((guint64) NGTCP2_MAX_VARINT)
#define ALPN                 "rlx/1"
/* A server's handshake in progress gives way to another client's Initial
 * only once its own client has sent nothing it could read for this long. */
#define HANDSHAKE_QUIET_US   ((gint64) 1000 * 1000)
#define PRIORITY \
  "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:" \
  "+CHACHA20-POLY1305:-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:+GROUP-SECP384R1:" \
  "%DISABLE_TLS13_COMPAT_MODE"
/* While a batch is read, an ACK every this many datagrams (and one when the
 * batch is done). Each ACK costs the receiver a send and the sender a
 * receive and its bookkeeping; 64 instead of 16 took ~15 % off the
 * receiver's CPU per MB at no cost in throughput (BENCHMARKS.md). */
#define ACK_EVERY            64
#define APP_ERROR_CLOSE      0x0
#define APP_ERROR_PROTOCOL   0x1

const char *
rlx_remote_error_code_name (int code)
{
  switch ((RlxRemoteError) code)
    {
    case RLX_REMOTE_ERROR_ICE_FAILED:   return "ice-failed";
    case RLX_REMOTE_ERROR_PIN_MISMATCH: return "pin-mismatch";
    case RLX_REMOTE_ERROR_KEY_REFUSED:  return "key-refused";
    case RLX_REMOTE_ERROR_TIMEOUT:      return "timeout";
    case RLX_REMOTE_ERROR_TLS:          return "tls";
    case RLX_REMOTE_ERROR_PROTOCOL:     return "protocol";
    case RLX_REMOTE_ERROR_CLOSED:       return "closed";
    case RLX_REMOTE_ERROR_SIGNALLING:   return "signalling";
    case RLX_REMOTE_ERROR_INVALID:      return "invalid";
    default:                            return "unknown";
    }
}

typedef struct {
  GBytes       *bytes;
  const guint8 *data;
  gsize         len;
  guint64       start;        /* stream offset of the prefix */
  guint8        prefix[4];
} OutFrame;

typedef struct {
  gint64   id;                /* -1 until opened */
  GQueue   frames;            /* OutFrame*, oldest first, until acked */
  GList   *cursor;            /* first frame not completely written */
  guint64  written;           /* stream offset handed to ngtcp2 */
  guint64  end;               /* stream offset after the last queued frame */
  guint64  acked;
  gboolean blocked;           /* stream flow control: wait for credit */
} OutStream;

struct _RlxQuic
{
  gboolean            is_client;
  RlxIdentity        *identity;
  char               *pin;
  char               *peer_name;
  gsize               max_frame;
  gsize               max_payload;
  RlxQuicCc           cc;
  guint               handshake_timeout_ms;
  guint               idle_timeout_ms;
  guint               keepalive_ms;
  RlxQuicCallbacks    cb;
  gpointer            user_data;

  GMainContext       *context;
  GSource            *service;
  int                 timerfd;          /* sub-millisecond wake-ups (pacing) */
  gpointer            timer_tag;
  ngtcp2_conn        *conn;
  gnutls_session_t    session;
  ngtcp2_crypto_conn_ref conn_ref;
  struct sockaddr_in  local_addr;
  struct sockaddr_in  remote_addr;
  ngtcp2_path         path;
  ngtcp2_cid          client_dcid;     /* server: the Initial's DCID it accepted */
  ngtcp2_cid          server_scid;     /* server: the connection ID it chose */
  gint64              conn_rx_at;      /* server, handshaking: last datagram its conn took */

  OutStream           out[RLX_QUIC_N_STREAMS];
  RlxFrameReader     *in[RLX_QUIC_N_STREAMS];
  gint64              in_id[RLX_QUIC_N_STREAMS];
  guint64             credit_held;      /* bytes whose credit waits */
  gboolean            consumer_full;    /* ::frame said no room: hold the credit */
  gboolean            resumed;          /* held since the last frame tick */
  GSource            *frame_tick;       /* while a frame is in progress */
  RlxFrameClock       clocks[RLX_QUIC_N_STREAMS];

  guint8             *txbuf;
  RlxDatagram         batch[BATCH];
  guint               batch_n;
  guint               batch_sent;
  gboolean            path_blocked;

  gboolean            started;
  gboolean            established;
  gboolean            closing;          /* rlx_quic_close: waiting for acks */
  gint64              linger_until;     /* monotonic µs */
  gboolean            dead;             /* ::closed reported (or about to be) */
  GError             *pending_error;    /* recorded inside a callback */
  gboolean            pin_mismatch;
  char               *seen_fingerprint;
  guint64             unsent;
  guint64             tx_frame_bytes;
  guint64             tx_stream_frame_bytes[RLX_QUIC_N_STREAMS];
  guint64             rx_frame_bytes;
  guint64             reported_tx;
  gboolean            in_callback;
  guint               wakes;
  guint               rx_since_write;
  ngtcp2_tstamp       last_log;
};

/* The controllers by name; DEFAULT is BBRv2, for the window it keeps on a
 * LAN (rlx-quic.h). */
static const struct {
  const char     *name;
  RlxQuicCc       cc;
  ngtcp2_cc_algo  algo;
} cc_table[] = {
  { "bbr2",  RLX_QUIC_CC_BBR2,  NGTCP2_CC_ALGO_BBR2 },
  { "cubic", RLX_QUIC_CC_CUBIC, NGTCP2_CC_ALGO_CUBIC },
  { "bbr",   RLX_QUIC_CC_BBR,   NGTCP2_CC_ALGO_BBR },
  { "reno",  RLX_QUIC_CC_RENO,  NGTCP2_CC_ALGO_RENO },
};

/* The row of @cc (DEFAULT and anything unknown: BBRv2's). */
static guint
cc_row (RlxQuicCc cc)
{
  for (guint i = 0; i < G_N_ELEMENTS (cc_table); i++)
    if (cc_table[i].cc == cc)
      return i;
  return 0;
}

static void schedule_now (RlxQuic *self);
static void reschedule (RlxQuic *self);
static void write_loop (RlxQuic *self);
static void arm_timer (RlxQuic *self, gint64 at_us);

static ngtcp2_tstamp
now_ns (void)
{
  return (ngtcp2_tstamp) g_get_monotonic_time () * NGTCP2_MICROSECONDS;
}

static const char *
peer (RlxQuic *self)
{
  return self->peer_name ? self->peer_name : "peer";
}

static void
out_frame_free (gpointer data)
{
  OutFrame *f = data;

  g_bytes_unref (f->bytes);
  g_free (f);
}

/* Record the first failure; acted on when control is back at top level. */
static void
record_error (RlxQuic *self, GError *error)
{
  if (self->pending_error == NULL && !self->dead)
    self->pending_error = error;
  else
    g_error_free (error);
}

/* ── TLS ─────────────────────────────────────────────────────────────────── */

static int
verify_peer_cb (gnutls_session_t session)
{
  ngtcp2_crypto_conn_ref *ref = gnutls_session_get_ptr (session);
  RlxQuic *self = ref->user_data;
  const gnutls_datum_t *certs;
  unsigned int n = 0;

  certs = gnutls_certificate_get_peers (session, &n);
  if (certs == NULL || n == 0)
    {
      self->pin_mismatch = TRUE;
      g_free (self->seen_fingerprint);
      self->seen_fingerprint = g_strdup ("(no certificate)");
      return GNUTLS_E_CERTIFICATE_ERROR;
    }
  g_free (self->seen_fingerprint);
  self->seen_fingerprint = rlx_fingerprint_of_der (certs[0].data, certs[0].size);
  if (!rlx_fingerprint_equal (self->seen_fingerprint, self->pin))
    {
      self->pin_mismatch = TRUE;
      return GNUTLS_E_CERTIFICATE_ERROR;
    }
  return 0;
}

static ngtcp2_conn *
get_conn_cb (ngtcp2_crypto_conn_ref *ref)
{
  RlxQuic *self = ref->user_data;
  return self->conn;
}

static gboolean
setup_tls (RlxQuic *self, GError **error)
{
  gnutls_datum_t alpn = { (unsigned char *) ALPN, sizeof ALPN - 1 };
  int rv;

  rv = gnutls_init (&self->session, self->is_client ? GNUTLS_CLIENT : GNUTLS_SERVER);
  if (rv == 0)
    rv = self->is_client ? ngtcp2_crypto_gnutls_configure_client_session (self->session)
                         : ngtcp2_crypto_gnutls_configure_server_session (self->session);
  if (rv == 0)
    rv = gnutls_priority_set_direct (self->session, PRIORITY, NULL);
  if (rv == 0)
    rv = gnutls_credentials_set (self->session, GNUTLS_CRD_CERTIFICATE,
                                 rlx_identity_get_credentials (self->identity));
  if (rv == 0)
    rv = gnutls_alpn_set_protocols (self->session, &alpn, 1, GNUTLS_ALPN_MANDATORY);
  if (rv != 0)
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_TLS,
                   "cannot set up TLS for the link to %s: %s", peer (self),
                   rv < 0 ? gnutls_strerror (rv) : "ngtcp2's GnuTLS helper refused the session");
      return FALSE;
    }
  if (!self->is_client)
    gnutls_certificate_server_set_request (self->session, GNUTLS_CERT_REQUIRE);
  gnutls_session_set_verify_function (self->session, verify_peer_cb);
  self->conn_ref.get_conn = get_conn_cb;
  self->conn_ref.user_data = self;
  gnutls_session_set_ptr (self->session, &self->conn_ref);
  return TRUE;
}

/* ── ngtcp2 callbacks ────────────────────────────────────────────────────── */

static void
rand_cb (uint8_t *dest, size_t destlen, const ngtcp2_rand_ctx *rand_ctx)
{
  (void) gnutls_rnd (GNUTLS_RND_RANDOM, dest, destlen);
}

static int
get_new_connection_id_cb (ngtcp2_conn *conn, ngtcp2_cid *cid, uint8_t *token,
                          size_t cidlen, void *user_data)
{
  if (gnutls_rnd (GNUTLS_RND_RANDOM, cid->data, cidlen) != 0 ||
      gnutls_rnd (GNUTLS_RND_RANDOM, token, NGTCP2_STATELESS_RESET_TOKENLEN) != 0)
    return NGTCP2_ERR_CALLBACK_FAILURE;
  cid->datalen = cidlen;
  return 0;
}

static int
open_streams (RlxQuic *self)
{
  for (guint s = 0; s < RLX_QUIC_N_STREAMS; s++)
    {
      int64_t id;
      int rv;

      if (self->out[s].id >= 0)
        continue;
      rv = ngtcp2_conn_open_uni_stream (self->conn, &id, NULL);
      if (rv == NGTCP2_ERR_STREAM_ID_BLOCKED)
        return 0;   /* extend_max_local_streams_uni comes back */
      if (rv != 0)
        {
          record_error (self, g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                                           "cannot open a stream to %s: %s", peer (self),
                                           ngtcp2_strerror (rv)));
          return 0;
        }
      self->out[s].id = id;
    }
  return 0;
}

static void
became_established (RlxQuic *self)
{
  if (self->established || self->pending_error)
    return;
  self->established = TRUE;
  g_debug ("QUIC to %s: established, %s, congestion control %s", peer (self),
           gnutls_cipher_get_name (gnutls_cipher_get (self->session)),
           cc_table[cc_row (self->cc)].name);
  open_streams (self);
  schedule_now (self);
  if (self->cb.established)
    self->cb.established (self->user_data);
}

static int
handshake_completed_cb (ngtcp2_conn *conn, void *user_data)
{
  RlxQuic *self = user_data;

  /* The server has now checked the client's certificate; the client waits
   * for HANDSHAKE_DONE (confirmed), which the server sends only after that. */
  if (!self->is_client)
    became_established (self);
  return 0;
}

static int
handshake_confirmed_cb (ngtcp2_conn *conn, void *user_data)
{
  RlxQuic *self = user_data;

  if (self->is_client)
    became_established (self);
  return 0;
}

static int
extend_max_local_streams_uni_cb (ngtcp2_conn *conn, uint64_t max_streams, void *user_data)
{
  RlxQuic *self = user_data;

  if (self->established)
    open_streams (self);
  return 0;
}

/* Which of our two incoming streams @id is, or -1. The peer may open two
 * unidirectional streams (initial_max_streams_uni = 2, bidi = 0), so ngtcp2
 * refuses anything else before we see it; check anyway. */
static int
incoming_index (RlxQuic *self, int64_t id)
{
  int64_t want_low_bits = self->is_client ? 0x3 : 0x2;
  int64_t index = id >> 2;

  if ((id & 0x3) != want_low_bits || index < 0 || index >= RLX_QUIC_N_STREAMS)
    return -1;
  return (int) index;
}

/* The flow-control credit held so far goes back to the peer (it reaches
 * it with the next packet written): the connection's only (the streams'
 * windows are never extended, see STREAM_WINDOW). */
static void
return_credit (RlxQuic *self)
{
  if (self->conn == NULL || self->credit_held == 0)
    return;
  ngtcp2_conn_extend_max_offset (self->conn, self->credit_held);
  self->credit_held = 0;
}

static void fail_with (RlxQuic *self, GError *error);

static gboolean
stream_in_progress (gpointer reader, guint stream, gsize *bytes, guint64 *seq)
{
  return rlx_frame_reader_in_progress (((RlxFrameReader **) reader)[stream], bytes, seq);
}

/* Every RLX_FRAME_CLOCK_TICK_MS while a frame is in progress: a frame kept
 * half-sent past its deadline ends the connection (rlx-frame-clock.h). Time
 * counts only while the credit flows (a consumer that is full holds the
 * peer back). */
static gboolean
on_frame_tick (gpointer user_data)
{
  RlxQuic *self = user_data;
  g_autofree char *why = NULL;
  gboolean any;
  gboolean ok = rlx_frame_clocks_tick (self->clocks, g_get_monotonic_time (),
                                       !self->consumer_full && !self->resumed,
                                       stream_in_progress, self->in, peer (self), &any, &why);

  self->resumed = FALSE;
  if (ok && any && !self->dead)
    return G_SOURCE_CONTINUE;
  g_clear_pointer (&self->frame_tick, g_source_unref);
  if (!ok && !self->dead)
    fail_with (self, g_error_new_literal (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL, why));
  return G_SOURCE_REMOVE;
}

/* Stream data came: time the frame in progress, if any. */
static void
ensure_frame_tick (RlxQuic *self, int index)
{
  gsize bytes;
  guint64 seq;

  if (self->frame_tick != NULL || self->dead ||
      !rlx_frame_reader_in_progress (self->in[index], &bytes, &seq))
    return;
  for (guint s = 0; s < RLX_QUIC_N_STREAMS; s++)
    rlx_frame_clock_tick (&self->clocks[s], g_get_monotonic_time (), FALSE, 0, 0, TRUE);
  self->frame_tick = g_timeout_source_new (RLX_FRAME_CLOCK_TICK_MS);
  g_source_set_callback (self->frame_tick, on_frame_tick, self, NULL);
  g_source_set_static_name (self->frame_tick, "rlx-quic frame deadline");
  g_source_attach (self->frame_tick, self->context);
}

static int
recv_stream_data_cb (ngtcp2_conn *conn, uint32_t flags, int64_t stream_id, uint64_t offset,
                     const uint8_t *data, size_t datalen, void *user_data,
                     void *stream_user_data)
{
  RlxQuic *self = user_data;
  int index = incoming_index (self, stream_id);
  g_autoptr(GError) error = NULL;

  if (index < 0)
    {
      record_error (self, g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                                       "%s sent data on stream %" G_GINT64_FORMAT
                                       ", which it may not open", peer (self), (gint64) stream_id));
      return 0;
    }
  if (flags & NGTCP2_STREAM_DATA_FLAG_FIN)
    {
      record_error (self, g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                                       "%s ended its %s stream; the link cannot go on",
                                       peer (self), index == 0 ? "control" : "bulk"));
    }
  self->in_id[index] = stream_id;
  self->rx_frame_bytes += datalen;
  if (!self->pending_error &&
      !rlx_frame_reader_push (self->in[index], data, datalen, &error) && error != NULL)
    record_error (self, g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                                     "%s broke the framing on its %s stream: %s",
                                     peer (self), index == 0 ? "control" : "bulk",
                                     error->message));
  /* The credit of these bytes comes back when the owner has room for them
   * (at once, unless a frame callback said its inbox is full). */
  self->credit_held += datalen;
  if (!self->consumer_full)
    return_credit (self);
  ensure_frame_tick (self, index);
  return 0;
}

static void
out_stream_advance (RlxQuic *self, OutStream *s, gsize n)
{
  s->written += n;
  self->unsent -= MIN (self->unsent, n);
  while (s->cursor != NULL)
    {
      OutFrame *f = s->cursor->data;
      if (f->start + 4 + f->len > s->written)
        break;
      self->tx_frame_bytes += f->len;
      self->tx_stream_frame_bytes[s - self->out] += f->len;
      s->cursor = s->cursor->next;
    }
}

static OutStream *
out_stream_by_id (RlxQuic *self, int64_t id)
{
  for (guint s = 0; s < RLX_QUIC_N_STREAMS; s++)
    if (self->out[s].id == id)
      return &self->out[s];
  return NULL;
}

static int
acked_stream_data_offset_cb (ngtcp2_conn *conn, int64_t stream_id, uint64_t offset,
                             uint64_t datalen, void *user_data, void *stream_user_data)
{
  RlxQuic *self = user_data;
  OutStream *s = out_stream_by_id (self, stream_id);

  if (s == NULL)
    return 0;
  s->acked = MAX (s->acked, offset + datalen);
  while (!g_queue_is_empty (&s->frames))
    {
      OutFrame *f = g_queue_peek_head (&s->frames);
      if (f->start + 4 + f->len > s->acked)
        break;
      g_assert (s->cursor == NULL || s->cursor->data != f);
      out_frame_free (g_queue_pop_head (&s->frames));
    }
  return 0;
}

static int
extend_max_stream_data_cb (ngtcp2_conn *conn, int64_t stream_id, uint64_t max_data,
                           void *user_data, void *stream_user_data)
{
  RlxQuic *self = user_data;
  OutStream *s = out_stream_by_id (self, stream_id);

  if (s != NULL)
    s->blocked = FALSE;
  return 0;
}

static int
stream_close_cb (ngtcp2_conn *conn, uint32_t flags, int64_t stream_id, uint64_t app_error_code,
                 void *user_data, void *stream_user_data)
{
  RlxQuic *self = user_data;

  if (!self->closing && !self->dead)
    record_error (self, g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                                     "%s closed stream %" G_GINT64_FORMAT " (code %" G_GUINT64_FORMAT
                                     "); the link cannot go on", peer (self), (gint64) stream_id,
                                     (guint64) app_error_code));
  return 0;
}

static int
stream_reset_cb (ngtcp2_conn *conn, int64_t stream_id, uint64_t final_size,
                 uint64_t app_error_code, void *user_data, void *stream_user_data)
{
  RlxQuic *self = user_data;

  record_error (self, g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                                   "%s reset stream %" G_GINT64_FORMAT "; the link cannot go on",
                                   peer (self), (gint64) stream_id));
  return 0;
}

/* The callbacks both roles share; the role adds its own first-flight ones. */
static void
fill_callbacks (ngtcp2_callbacks *cb, gboolean is_client)
{
  memset (cb, 0, sizeof *cb);
  if (is_client)
    {
      cb->client_initial = ngtcp2_crypto_client_initial_cb;
      cb->recv_retry = ngtcp2_crypto_recv_retry_cb;
    }
  else
    cb->recv_client_initial = ngtcp2_crypto_recv_client_initial_cb;
  cb->recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
  cb->handshake_completed = handshake_completed_cb;
  cb->handshake_confirmed = handshake_confirmed_cb;
  cb->encrypt = ngtcp2_crypto_encrypt_cb;
  cb->decrypt = ngtcp2_crypto_decrypt_cb;
  cb->hp_mask = ngtcp2_crypto_hp_mask_cb;
  cb->recv_stream_data = recv_stream_data_cb;
  cb->acked_stream_data_offset = acked_stream_data_offset_cb;
  cb->stream_close = stream_close_cb;
  cb->stream_reset = stream_reset_cb;
  cb->extend_max_local_streams_uni = extend_max_local_streams_uni_cb;
  cb->extend_max_stream_data = extend_max_stream_data_cb;
  cb->rand = rand_cb;
  cb->get_new_connection_id = get_new_connection_id_cb;
  cb->update_key = ngtcp2_crypto_update_key_cb;
  cb->delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
  cb->delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
  cb->get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
  cb->version_negotiation = ngtcp2_crypto_version_negotiation_cb;
}

static void
log_cb (void *user_data, const char *format, ...)
{
  va_list ap;

  va_start (ap, format);
  g_logv (G_LOG_DOMAIN, G_LOG_LEVEL_DEBUG, format, ap);
  va_end (ap);
}

gboolean
rlx_quic_cc_from_name (const char *name, RlxQuicCc *cc)
{
  g_return_val_if_fail (cc != NULL, FALSE);
  for (guint i = 0; name != NULL && i < G_N_ELEMENTS (cc_table); i++)
    if (g_str_equal (cc_table[i].name, name))
      {
        *cc = cc_table[i].cc;
        return TRUE;
      }
  return FALSE;
}

static void
fill_settings (RlxQuic *self, ngtcp2_settings *settings, ngtcp2_transport_params *params)
{
  ngtcp2_settings_default (settings);
  settings->initial_ts = now_ns ();
  settings->cc_algo = cc_table[cc_row (self->cc)].algo;
  settings->max_window = MAX_WINDOW;
  settings->max_stream_window = 0;   /* never extended (STREAM_WINDOW) */
  settings->handshake_timeout = (ngtcp2_duration) self->handshake_timeout_ms * NGTCP2_MILLISECONDS;
  settings->max_tx_udp_payload_size = self->max_payload;
  if (self->max_payload > NGTCP2_MAX_PMTUD_UDP_PAYLOAD_SIZE)
    {
      /* Larger than PMTUD ever probes: the operator says the path carries it. */
      settings->no_tx_udp_payload_size_shaping = 1;
      settings->no_pmtud = 1;
    }
  if (g_getenv ("RLX_QUIC_DEBUG") != NULL)
    settings->log_printf = log_cb;

  ngtcp2_transport_params_default (params);
  params->initial_max_streams_bidi = 0;
  params->initial_max_streams_uni = RLX_QUIC_N_STREAMS;
  params->initial_max_stream_data_uni = STREAM_WINDOW;
  params->initial_max_data = INITIAL_MAX_DATA;
  params->max_idle_timeout = (ngtcp2_duration) self->idle_timeout_ms * NGTCP2_MILLISECONDS;
  params->max_udp_payload_size = MAX (self->max_payload, NGTCP2_MAX_PMTUD_UDP_PAYLOAD_SIZE);
  params->active_connection_id_limit = 2;
  /* The socket is shared with ICE's STUN (RFC 9443): the peer must keep the
   * QUIC bit set, so packets stay apart from STUN by their first byte. */
  params->grease_quic_bit = 0;
}

static gboolean
create_conn (RlxQuic *self, const ngtcp2_pkt_hd *client_hd, GError **error)
{
  ngtcp2_settings settings;
  ngtcp2_transport_params params;
  ngtcp2_callbacks callbacks;
  ngtcp2_cid scid;
  int rv;

  fill_settings (self, &settings, &params);
  fill_callbacks (&callbacks, self->is_client);
  scid.datalen = SCID_LEN;
  (void) gnutls_rnd (GNUTLS_RND_RANDOM, scid.data, scid.datalen);

  if (self->is_client)
    {
      ngtcp2_cid dcid;
      dcid.datalen = NGTCP2_MIN_INITIAL_DCIDLEN + 2;
      (void) gnutls_rnd (GNUTLS_RND_RANDOM, dcid.data, dcid.datalen);
      rv = ngtcp2_conn_client_new (&self->conn, &dcid, &scid, &self->path, NGTCP2_PROTO_VER_V1,
                                   &callbacks, &settings, &params, NULL, self);
    }
  else
    {
      params.original_dcid = client_hd->dcid;
      params.stateless_reset_token_present = 1;
      (void) gnutls_rnd (GNUTLS_RND_RANDOM, params.stateless_reset_token,
                         sizeof params.stateless_reset_token);
      rv = ngtcp2_conn_server_new (&self->conn, &client_hd->scid, &scid, &self->path,
                                   client_hd->version, &callbacks, &settings, &params,
                                   NULL, self);
      self->client_dcid = client_hd->dcid;
      self->server_scid = scid;
    }
  if (rv != 0)
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_TLS,
                   "cannot create the QUIC connection to %s: %s", peer (self),
                   ngtcp2_strerror (rv));
      return FALSE;
    }
  if (!setup_tls (self, error))
    {
      ngtcp2_conn_del (self->conn);
      self->conn = NULL;
      return FALSE;
    }
  ngtcp2_conn_set_tls_native_handle (self->conn, self->session);
  ngtcp2_conn_set_keep_alive_timeout (self->conn,
                                      (ngtcp2_duration) self->keepalive_ms * NGTCP2_MILLISECONDS);
  return TRUE;
}

static void
drop_conn (RlxQuic *self)
{
  if (self->conn)
    {
      ngtcp2_conn_del (self->conn);
      self->conn = NULL;
    }
  if (self->session)
    {
      gnutls_deinit (self->session);
      self->session = NULL;
    }
}

/* ── closing ─────────────────────────────────────────────────────────────── */

static guint
flush_batch (RlxQuic *self)
{
  while (self->batch_sent < self->batch_n)
    {
      guint n = self->cb.send (self->batch + self->batch_sent, self->batch_n - self->batch_sent,
                               self->user_data);
      if (n == 0)
        {
          self->path_blocked = TRUE;
          return self->batch_n - self->batch_sent;
        }
      self->batch_sent += MIN (n, self->batch_n - self->batch_sent);
    }
  self->batch_n = self->batch_sent = 0;
  self->path_blocked = FALSE;
  return 0;
}

static void
send_close (RlxQuic *self, gboolean app, guint64 code, const char *reason)
{
  ngtcp2_connection_close_error ccerr;
  ngtcp2_ssize n;

  if (self->conn == NULL || ngtcp2_conn_is_in_closing_period (self->conn) ||
      ngtcp2_conn_is_in_draining_period (self->conn))
    return;
  ngtcp2_connection_close_error_default (&ccerr);
  if (app)
    ngtcp2_connection_close_error_set_application_error (&ccerr, code, (const uint8_t *) reason,
                                                         reason ? strlen (reason) : 0);
  else
    ngtcp2_connection_close_error_set_transport_error (&ccerr, code, (const uint8_t *) reason,
                                                       reason ? strlen (reason) : 0);
  self->batch_n = self->batch_sent = 0;
  n = ngtcp2_conn_write_connection_close (self->conn, NULL, NULL, self->txbuf, self->max_payload,
                                          &ccerr, now_ns ());
  if (n > 0)
    {
      RlxDatagram d = { self->txbuf, (gsize) n };
      self->cb.send (&d, 1, self->user_data);
    }
}

/* Report the end, once: stop the timer, keep the object for the owner to free. */
static void
finish (RlxQuic *self, GError *error)
{
  if (self->dead)
    {
      g_error_free (error);
      return;
    }
  self->dead = TRUE;
  g_clear_pointer (&self->pending_error, g_error_free);
  if (self->frame_tick)
    {
      g_source_destroy (self->frame_tick);
      g_clear_pointer (&self->frame_tick, g_source_unref);
    }
  if (self->service)
    {
      g_source_set_ready_time (self->service, -1);
      arm_timer (self, 0);
    }
  if (self->cb.closed)
    self->cb.closed (error, self->user_data);
  g_error_free (error);
}

static void
fail_with (RlxQuic *self, GError *error)
{
  gboolean app = error->code == RLX_REMOTE_ERROR_PROTOCOL || error->code == RLX_REMOTE_ERROR_CLOSED;

  if (!self->dead)
    send_close (self, app, app ? APP_ERROR_PROTOCOL : NGTCP2_INTERNAL_ERROR,
                error->code == RLX_REMOTE_ERROR_PROTOCOL ? "protocol violation" : NULL);
  finish (self, error);
}

static void
act_on_pending_error (RlxQuic *self)
{
  if (self->pending_error && !self->dead)
    fail_with (self, g_steal_pointer (&self->pending_error));
}

/* Turn a library error from read/expiry into our error. */
static GError *
error_from_liberr (RlxQuic *self, int rv)
{
  if (rv == NGTCP2_ERR_HANDSHAKE_TIMEOUT)
    return g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_TIMEOUT,
                        "the QUIC/TLS handshake with %s did not finish within %u ms "
                        "(packets lost, or the peer is not running)",
                        peer (self), self->handshake_timeout_ms);
  if (rv == NGTCP2_ERR_IDLE_CLOSE)
    return g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_TIMEOUT,
                        "nothing heard from %s for %u ms (idle timeout): the path is down "
                        "or the peer stopped", peer (self), self->idle_timeout_ms);
  if (rv == NGTCP2_ERR_CRYPTO || rv == NGTCP2_ERR_CALLBACK_FAILURE)
    {
      if (self->pin_mismatch)
        return g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PIN_MISMATCH,
                            "%s presented a certificate with fingerprint %.16s…, not the "
                            "%.16s… its signalling announced: refused (someone in the path, "
                            "or a stale announcement)", peer (self),
                            self->seen_fingerprint ? self->seen_fingerprint : "?", self->pin);
      return g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_TLS,
                          "the TLS handshake with %s failed (alert %u)", peer (self),
                          self->conn ? ngtcp2_conn_get_tls_alert (self->conn) : 0);
    }
  return g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                      "the QUIC connection to %s failed: %s", peer (self), ngtcp2_strerror (rv));
}

/* The peer closed (we are draining): say how. */
static GError *
error_from_peer_close (RlxQuic *self)
{
  ngtcp2_connection_close_error ccerr;

  ngtcp2_conn_get_connection_close_error (self->conn, &ccerr);
  if (ccerr.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION &&
      ccerr.error_code == APP_ERROR_CLOSE)
    return g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_CLOSED, "%s closed the link",
                        peer (self));
  if (ccerr.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT &&
      ccerr.error_code >= NGTCP2_CRYPTO_ERROR && ccerr.error_code < NGTCP2_CRYPTO_ERROR + 0x100)
    {
      guint alert = (guint) (ccerr.error_code - NGTCP2_CRYPTO_ERROR);
      if (alert == GNUTLS_A_BAD_CERTIFICATE || alert == GNUTLS_A_CERTIFICATE_UNKNOWN ||
          alert == GNUTLS_A_UNSUPPORTED_CERTIFICATE)
        return g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PIN_MISMATCH,
                            "%s refused our certificate (TLS alert %u): the fingerprint it "
                            "was told for us is not ours", peer (self), alert);
      return g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_TLS,
                          "%s ended the TLS handshake (alert %u)", peer (self), alert);
    }
  if (ccerr.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT_IDLE_CLOSE)
    return g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_TIMEOUT,
                        "the link to %s timed out", peer (self));
  return g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                      "%s closed the link with error 0x%" G_GINT64_MODIFIER "x%s%.*s",
                      peer (self), (guint64) ccerr.error_code, ccerr.reasonlen ? ": " : "",
                      (int) MIN (ccerr.reasonlen, 200), ccerr.reason ? (const char *) ccerr.reason : "");
}

static gboolean
all_acked (RlxQuic *self)
{
  for (guint s = 0; s < RLX_QUIC_N_STREAMS; s++)
    if (!g_queue_is_empty (&self->out[s].frames))
      return FALSE;
  return TRUE;
}

static void
finish_close (RlxQuic *self)
{
  send_close (self, TRUE, APP_ERROR_CLOSE, NULL);
  finish (self, g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_CLOSED,
                             "link to %s closed", peer (self)));
}

/* ── writing ─────────────────────────────────────────────────────────────── */

static OutStream *
pick_stream (RlxQuic *self)
{
  for (guint s = 0; s < RLX_QUIC_N_STREAMS; s++)
    {
      OutStream *o = &self->out[s];
      if (o->id >= 0 && o->cursor != NULL && !o->blocked)
        return o;
    }
  return NULL;
}

static guint
fill_vecs (OutStream *o, ngtcp2_vec *vecs)
{
  guint n = 0;
  guint64 pos = o->written;

  for (GList *l = o->cursor; l != NULL && n + 2 <= MAX_VECS; l = l->next)
    {
      OutFrame *f = l->data;
      guint64 in = pos - f->start;     /* bytes of this frame already written */

      if (in < 4)
        {
          vecs[n].base = f->prefix + in;
          vecs[n].len = (size_t) (4 - in);
          n++;
          in = 4;
        }
      if (f->len > in - 4)
        {
          vecs[n].base = (uint8_t *) f->data + (in - 4);
          vecs[n].len = (size_t) (f->len - (in - 4));
          n++;
        }
      pos = f->start + 4 + f->len;
    }
  return n;
}

static void
write_loop (RlxQuic *self)
{
  ngtcp2_tstamp ts = now_ns ();

  self->rx_since_write = 0;
  gsize payload = self->max_payload;
  gsize quantum = ngtcp2_conn_get_send_quantum (self->conn);
  guint max_pkts = (guint) MAX (1, MIN (quantum / MAX (payload, 1), 4 * BATCH));
  guint pkts = 0;
  gboolean more = FALSE;

  if (flush_batch (self) > 0)
    return;
  for (;;)
    {
      OutStream *o = pick_stream (self);
      ngtcp2_vec vecs[MAX_VECS];
      guint nvec = o ? fill_vecs (o, vecs) : 0;
      ngtcp2_ssize ndatalen = -1;
      guint8 *buf = self->txbuf + (gsize) self->batch_n * self->max_payload;
      ngtcp2_ssize n;

      n = ngtcp2_conn_writev_stream (self->conn, NULL, NULL, buf, payload, &ndatalen,
                                     NGTCP2_WRITE_STREAM_FLAG_MORE, o ? o->id : -1,
                                     nvec ? vecs : NULL, nvec, ts);
      if (n < 0)
        {
          if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED && o)
            {
              o->blocked = TRUE;
              continue;
            }
          if (n == NGTCP2_ERR_WRITE_MORE)
            {
              if (o && ndatalen > 0)
                out_stream_advance (self, o, (gsize) ndatalen);
              continue;
            }
          record_error (self, error_from_liberr (self, (int) n));
          break;
        }
      if (o && ndatalen > 0)
        out_stream_advance (self, o, (gsize) ndatalen);
      if (n == 0)
        {
          /* Nothing more now: congestion- or pacing-limited, or done. */
          ngtcp2_conn_update_pkt_tx_time (self->conn, ts);
          break;
        }
      self->batch[self->batch_n].data = buf;
      self->batch[self->batch_n].len = (gsize) n;
      self->batch_n++;
      if (self->batch_n == BATCH && flush_batch (self) > 0)
        {
          ngtcp2_conn_update_pkt_tx_time (self->conn, ts);
          break;
        }
      if (++pkts >= max_pkts)
        {
          ngtcp2_conn_update_pkt_tx_time (self->conn, ts);
          more = TRUE;
          break;
        }
    }
  flush_batch (self);
  if (more && !self->path_blocked)
    schedule_now (self);
}

static void
report_progress (RlxQuic *self)
{
  if (self->cb.progress && self->tx_frame_bytes != self->reported_tx)
    {
      self->reported_tx = self->tx_frame_bytes;
      self->cb.progress (self->tx_stream_frame_bytes, self->user_data);
    }
}

/* ── the service source ─────────────────────────────────────────────────── */

/* G_MESSAGES_DEBUG=rlx-quic: the congestion controller's view, for tuning. */
static void
log_stats (RlxQuic *self, const char *when)
{
  ngtcp2_conn_stat st;

  if (self->conn == NULL)
    return;
  ngtcp2_conn_get_conn_stat (self->conn, &st);
  g_debug ("QUIC to %s %s: srtt %" G_GUINT64_FORMAT " µs, min rtt %" G_GUINT64_FORMAT
           " µs, cwnd %" G_GUINT64_FORMAT ", in flight %" G_GUINT64_FORMAT ", ssthresh %"
           G_GUINT64_FORMAT ", pacing %.0f B/ms, quantum %zu, payload %zu, delivery %"
           G_GUINT64_FORMAT " B/s, %" G_GUINT64_FORMAT " frame bytes written, %u wakes",
           peer (self), when, (guint64) st.smoothed_rtt / 1000, (guint64) st.min_rtt / 1000,
           (guint64) st.cwnd, (guint64) st.bytes_in_flight, (guint64) st.ssthresh,
           st.pacing_rate * 1e6, st.send_quantum, st.max_tx_udp_payload_size,
           (guint64) st.delivery_rate_sec, self->tx_frame_bytes, self->wakes);
}

static void
service (RlxQuic *self)
{
  ngtcp2_tstamp ts;

  if (self->dead || self->conn == NULL)
    return;
  self->wakes++;
  ts = now_ns ();
  if (ts - self->last_log > NGTCP2_SECONDS && g_log_writer_default_would_drop (G_LOG_LEVEL_DEBUG, G_LOG_DOMAIN) == FALSE)
    {
      self->last_log = ts;
      log_stats (self, "now");
    }
  if (ngtcp2_conn_get_expiry (self->conn) <= ts)
    {
      int rv = ngtcp2_conn_handle_expiry (self->conn, ts);
      if (rv != 0)
        {
          finish (self, error_from_liberr (self, rv));
          return;
        }
    }
  act_on_pending_error (self);
  if (self->dead)
    return;
  if (self->closing && (all_acked (self) || g_get_monotonic_time () >= self->linger_until))
    {
      finish_close (self);
      return;
    }
  write_loop (self);
  act_on_pending_error (self);
  if (self->dead)
    return;
  report_progress (self);
  reschedule (self);
}

/* The service source wakes for two reasons: its ready time (0 = now, for
 * work queued by us) and a timerfd armed at ngtcp2's expiry. GLib's own
 * timeouts have millisecond granularity, and pacing at hundreds of MB/s
 * needs wake-ups every few tens of microseconds. */
static gboolean
service_dispatch (GSource *source, GSourceFunc callback, gpointer user_data)
{
  RlxQuic *self = user_data;
  guint64 expirations;

  g_source_set_ready_time (source, -1);
  if (g_source_query_unix_fd (source, self->timer_tag) & G_IO_IN)
    while (read (self->timerfd, &expirations, sizeof expirations) > 0)
      ;
  service (self);
  return G_SOURCE_CONTINUE;
}

static GSourceFuncs service_funcs = {
  .dispatch = service_dispatch,
};

static void
schedule_now (RlxQuic *self)
{
  if (self->service && !self->dead)
    g_source_set_ready_time (self->service, 0);
}

static void
arm_timer (RlxQuic *self, gint64 at_us)
{
  struct itimerspec its = { { 0, 0 }, { 0, 0 } };

  if (at_us > 0)
    {
      its.it_value.tv_sec = at_us / G_USEC_PER_SEC;
      its.it_value.tv_nsec = (at_us % G_USEC_PER_SEC) * 1000;
    }
  /* at_us <= 0 disarms. */
  timerfd_settime (self->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void
reschedule (RlxQuic *self)
{
  gint64 ready;
  ngtcp2_tstamp expiry;

  if (self->service == NULL || self->dead || self->conn == NULL)
    {
      arm_timer (self, 0);
      return;
    }
  if (g_source_get_ready_time (self->service) == 0)
    return;   /* already due */
  if (self->path_blocked)
    {
      arm_timer (self, g_get_monotonic_time () + 200);
      return;
    }
  expiry = ngtcp2_conn_get_expiry (self->conn);
  ready = expiry == UINT64_MAX ? -1 : (gint64) (expiry / NGTCP2_MICROSECONDS);
  if (self->closing)
    ready = ready < 0 ? self->linger_until : MIN (ready, self->linger_until);
  if (ready >= 0 && ready <= g_get_monotonic_time ())
    schedule_now (self);
  else
    arm_timer (self, ready < 0 ? 0 : MAX (ready, 1));
}

/* ── public ──────────────────────────────────────────────────────────────── */

static gboolean
on_frame_control (GBytes *frame, gpointer user_data)
{
  RlxQuic *self = user_data;

  if (self->cb.frame && !self->dead && !self->pending_error &&
      !self->cb.frame (RLX_QUIC_STREAM_CONTROL, frame, self->user_data))
    self->consumer_full = TRUE;
  return TRUE;
}

static gboolean
on_frame_bulk (GBytes *frame, gpointer user_data)
{
  RlxQuic *self = user_data;

  if (self->cb.frame && !self->dead && !self->pending_error &&
      !self->cb.frame (RLX_QUIC_STREAM_BULK, frame, self->user_data))
    self->consumer_full = TRUE;
  return TRUE;
}

RlxQuic *
rlx_quic_new (const RlxQuicConfig *config, const RlxQuicCallbacks *callbacks,
              gpointer user_data, GError **error)
{
  g_autoptr(RlxQuic) self = NULL;

  g_return_val_if_fail (config != NULL && callbacks != NULL, NULL);
  g_return_val_if_fail (callbacks->send != NULL, NULL);
  g_return_val_if_fail (RLX_IS_IDENTITY (config->identity), NULL);

  if (!rlx_fingerprint_is_valid (config->peer_fingerprint))
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_INVALID,
                   "the peer's certificate fingerprint '%.70s' is not 64 hex digits",
                   config->peer_fingerprint ? config->peer_fingerprint : "(none)");
      return NULL;
    }
  self = g_new0 (RlxQuic, 1);
  self->timerfd = -1;
  self->is_client = config->is_client;
  self->identity = g_object_ref (config->identity);
  self->pin = g_ascii_strdown (config->peer_fingerprint, -1);
  self->peer_name = g_strdup (config->peer_name);
  self->max_frame = config->max_frame ? config->max_frame : DEFAULT_MAX_FRAME;
  self->max_payload = config->max_udp_payload ? config->max_udp_payload : DEFAULT_PAYLOAD;
  self->max_payload = CLAMP (self->max_payload, NGTCP2_MAX_UDP_PAYLOAD_SIZE, 65527);
  self->cc = config->cc;
  self->handshake_timeout_ms = config->handshake_timeout_ms ? config->handshake_timeout_ms : 10000;
  self->idle_timeout_ms = config->idle_timeout_ms ? config->idle_timeout_ms : 10000;
  self->keepalive_ms = config->keepalive_ms ? config->keepalive_ms : 1000;
  self->cb = *callbacks;
  self->user_data = user_data;
  self->context = g_main_context_ref_thread_default ();
  self->txbuf = g_malloc ((gsize) BATCH * self->max_payload);
  for (guint s = 0; s < RLX_QUIC_N_STREAMS; s++)
    {
      self->out[s].id = -1;
      g_queue_init (&self->out[s].frames);
      self->in_id[s] = -1;
    }
  /* The control stream carries small messages only (rlx-link.h,
   * RLX_LINK_MAX_CONTROL_FRAME): a peer cannot make this side hold a bulk
   * lane's worth of a control frame it never finishes. */
  self->in[RLX_QUIC_STREAM_CONTROL] =
    rlx_frame_reader_new (MIN (self->max_frame, RLX_LINK_MAX_CONTROL_FRAME), on_frame_control,
                          self);
  self->in[RLX_QUIC_STREAM_BULK] = rlx_frame_reader_new (self->max_frame, on_frame_bulk, self);
  for (guint s = 0; s < RLX_QUIC_N_STREAMS; s++)
    rlx_frame_clock_init (&self->clocks[s], config->frame_grace_ms ?
                          (gint64) config->frame_grace_ms * 1000 :
                          rlx_frame_clock_grace_from_env ());

  /* ngtcp2 needs a path; libnice owns the real one (and may switch pairs),
   * so both ends use fixed placeholder addresses that never change. */
  self->local_addr.sin_family = AF_INET;
  self->local_addr.sin_port = g_htons (self->is_client ? 1 : 2);
  self->local_addr.sin_addr.s_addr = g_htonl (self->is_client ? 0x0a000001 : 0x0a000002);
  self->remote_addr.sin_family = AF_INET;
  self->remote_addr.sin_port = g_htons (self->is_client ? 2 : 1);
  self->remote_addr.sin_addr.s_addr = g_htonl (self->is_client ? 0x0a000002 : 0x0a000001);
  self->path.local.addr = (ngtcp2_sockaddr *) &self->local_addr;
  self->path.local.addrlen = sizeof self->local_addr;
  self->path.remote.addr = (ngtcp2_sockaddr *) &self->remote_addr;
  self->path.remote.addrlen = sizeof self->remote_addr;

  if (self->is_client && !create_conn (self, NULL, error))
    return NULL;

  self->timerfd = timerfd_create (CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (self->timerfd < 0)
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_INVALID,
                   "cannot create a timer for the QUIC connection: %s", g_strerror (errno));
      return NULL;
    }
  self->service = g_source_new (&service_funcs, sizeof (GSource));
  g_source_set_callback (self->service, NULL, self, NULL);
  g_source_set_static_name (self->service, "rlx-quic");
  g_source_set_ready_time (self->service, -1);
  self->timer_tag = g_source_add_unix_fd (self->service, self->timerfd, G_IO_IN);
  g_source_attach (self->service, self->context);
  return g_steal_pointer (&self);
}

void
rlx_quic_start (RlxQuic *self)
{
  g_return_if_fail (self != NULL);
  if (self->started)
    return;
  self->started = TRUE;
  if (self->is_client)
    schedule_now (self);
}

/* Server, before the handshake is done: a datagram that parses as a client
 * Initial either belongs to the connection we have (same original DCID, or
 * sent to the ID we chose) or starts a new one. Returns TRUE if the
 * connection was created for this very datagram. */
static gboolean
accept_initial (RlxQuic *self, const guint8 *data, gsize len, gboolean *drop)
{
  ngtcp2_pkt_hd hd;
  g_autoptr(GError) error = NULL;

  *drop = FALSE;
  if (ngtcp2_accept (&hd, data, len) != 0)
    {
      /* Not a client Initial: only useful to a connection that exists. */
      *drop = self->conn == NULL;
      return FALSE;
    }
  if (self->conn != NULL)
    {
      if (ngtcp2_cid_eq (&hd.dcid, &self->client_dcid) ||
          ngtcp2_cid_eq (&hd.dcid, &self->server_scid))
        return FALSE;
      /* Another client's Initial while a handshake is in progress: anyone
       * who can reach the port can send one (Initial keys derive from the
       * DCID), so it never ends the handshake of a client that is talking
       * to us; it is dropped unanswered. Only a connection whose client has
       * gone quiet (a forged Initial that came first) gives way to it. */
      if (g_get_monotonic_time () - self->conn_rx_at < HANDSHAKE_QUIET_US)
        {
          *drop = TRUE;
          return FALSE;
        }
      drop_conn (self);
    }
  if (!create_conn (self, &hd, &error))
    {
      g_debug ("rlx-quic: %s", error->message);
      *drop = TRUE;
      return FALSE;
    }
  self->conn_rx_at = g_get_monotonic_time ();
  return TRUE;
}

/* One datagram at @ts. Returns FALSE once the connection is gone. */
static gboolean
receive_one (RlxQuic *self, const guint8 *data, gsize len, ngtcp2_tstamp ts)
{
  ngtcp2_pkt_info pi = { 0 };
  gboolean created = FALSE;
  int rv;

  if (len == 0)
    return TRUE;
  if (!self->is_client && !self->established &&
      (self->conn == NULL || !ngtcp2_conn_get_handshake_completed (self->conn)))
    {
      gboolean drop;
      created = accept_initial (self, data, len, &drop);
      if (drop)
        return TRUE;
    }
  if (self->conn == NULL)
    return TRUE;

  rv = ngtcp2_conn_read_pkt (self->conn, &self->path, &pi, data, len, ts);
  if (rv != 0)
    {
      if (created)
        {
          /* It only looked like an Initial: forget it, answer nothing. */
          drop_conn (self);
          return TRUE;
        }
      if (rv == NGTCP2_ERR_DRAINING)
        {
          finish (self, error_from_peer_close (self));
          return FALSE;
        }
      if (rv == NGTCP2_ERR_DROP_CONN)
        {
          finish (self, g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                                     "the QUIC connection to %s was dropped", peer (self)));
          return FALSE;
        }
      if (rv == NGTCP2_ERR_CRYPTO || rv == NGTCP2_ERR_CALLBACK_FAILURE)
        {
          GError *e = error_from_liberr (self, rv);
          ngtcp2_connection_close_error ccerr;
          ngtcp2_ssize n;

          /* Tell the peer with the TLS alert, then stop. */
          ngtcp2_connection_close_error_default (&ccerr);
          ngtcp2_connection_close_error_set_transport_error_tls_alert (
            &ccerr, ngtcp2_conn_get_tls_alert (self->conn), NULL, 0);
          n = ngtcp2_conn_write_connection_close (self->conn, NULL, NULL, self->txbuf,
                                                  self->max_payload, &ccerr, now_ns ());
          if (n > 0)
            {
              RlxDatagram d = { self->txbuf, (gsize) n };
              self->cb.send (&d, 1, self->user_data);
            }
          finish (self, e);
          return FALSE;
        }
      fail_with (self, error_from_liberr (self, rv));
      return FALSE;
    }
  act_on_pending_error (self);
  if (self->dead)
    return FALSE;
  if (!self->established)
    self->conn_rx_at = g_get_monotonic_time ();
  /* Under a flood the owner may feed many datagrams before the main loop
   * comes back to us: answer (ACK) every so often, so the sender's RTT
   * samples and congestion window do not suffer from our batching. */
  if (++self->rx_since_write >= ACK_EVERY && self->conn)
    {
      self->rx_since_write = 0;
      write_loop (self);
      act_on_pending_error (self);
    }
  return !self->dead;
}

void
rlx_quic_receive (RlxQuic *self, const guint8 *data, gsize len)
{
  RlxDatagram d = { data, len };

  g_return_if_fail (self != NULL);
  rlx_quic_receive_batch (self, &d, 1);
}

void
rlx_quic_receive_batch (RlxQuic *self, const RlxDatagram *datagrams, guint n)
{
  ngtcp2_tstamp ts;

  g_return_if_fail (self != NULL);
  g_return_if_fail (datagrams != NULL || n == 0);
  if (self->dead)
    return;
  /* One clock reading for the batch: they arrived together. */
  ts = now_ns ();
  for (guint i = 0; i < n; i++)
    if (!receive_one (self, datagrams[i].data, datagrams[i].len, ts))
      return;
  if (!self->dead)
    schedule_now (self);
}

gboolean
rlx_quic_send (RlxQuic *self, RlxQuicStream stream, GBytes *frame, GError **error)
{
  OutStream *o;
  OutFrame *f;
  gsize len;

  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (stream < RLX_QUIC_N_STREAMS, FALSE);
  g_return_val_if_fail (frame != NULL, FALSE);

  if (self->dead || self->closing)
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_CLOSED,
                   "link to %s is closed", peer (self));
      return FALSE;
    }
  len = g_bytes_get_size (frame);
  if (len > self->max_frame || len > G_MAXUINT32)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                   "a frame of %" G_GSIZE_FORMAT " bytes is over the link's cap of %"
                   G_GSIZE_FORMAT " bytes", len, self->max_frame);
      return FALSE;
    }
  o = &self->out[stream];
  f = g_new0 (OutFrame, 1);
  f->bytes = g_bytes_ref (frame);
  f->data = g_bytes_get_data (frame, NULL);
  f->len = len;
  f->start = o->end;
  f->prefix[0] = (guint8) len;
  f->prefix[1] = (guint8) (len >> 8);
  f->prefix[2] = (guint8) (len >> 16);
  f->prefix[3] = (guint8) (len >> 24);
  o->end += 4 + len;
  g_queue_push_tail (&o->frames, f);
  if (o->cursor == NULL)
    o->cursor = o->frames.tail;
  self->unsent += 4 + len;
  if (self->established)
    schedule_now (self);
  return TRUE;
}

void
rlx_quic_close (RlxQuic *self, guint linger_ms)
{
  g_return_if_fail (self != NULL);
  if (self->dead || self->closing)
    return;
  if (!self->established || self->conn == NULL)
    {
      finish_close (self);
      return;
    }
  self->closing = TRUE;
  self->linger_until = g_get_monotonic_time () + (gint64) linger_ms * 1000;
  schedule_now (self);
}

void
rlx_quic_abort (RlxQuic *self, const GError *error)
{
  g_return_if_fail (self != NULL);
  if (self->dead)
    return;
  send_close (self, TRUE, APP_ERROR_CLOSE, NULL);
  finish (self, g_error_copy (error));
}

void
rlx_quic_resume (RlxQuic *self)
{
  g_return_if_fail (self != NULL);
  schedule_now (self);
}

void
rlx_quic_resume_rx (RlxQuic *self)
{
  g_return_if_fail (self != NULL);
  if (!self->consumer_full)
    return;
  self->consumer_full = FALSE;
  self->resumed = TRUE;
  if (self->dead)
    return;
  return_credit (self);
  schedule_now (self);   /* the MAX_DATA frames go out */
}

void
rlx_quic_get_rx_in_progress (RlxQuic *self, gsize *buffered, gsize *allocated)
{
  g_return_if_fail (self != NULL);
  *buffered = *allocated = 0;
  for (guint s = 0; s < RLX_QUIC_N_STREAMS; s++)
    {
      *buffered += rlx_frame_reader_get_buffered (self->in[s]);
      *allocated += rlx_frame_reader_get_allocated (self->in[s]);
    }
}

gboolean
rlx_quic_is_rx_held (RlxQuic *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->consumer_full;
}

void
rlx_quic_set_priority (RlxQuic *self, gint priority)
{
  g_return_if_fail (self != NULL);
  if (self->service)
    g_source_set_priority (self->service, priority);
}

gboolean
rlx_quic_is_established (RlxQuic *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->established && !self->dead;
}

guint64
rlx_quic_get_unsent (RlxQuic *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->unsent;
}

const char *
rlx_quic_get_cc_name (RlxQuic *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return cc_table[cc_row (self->cc)].name;
}

guint64
rlx_quic_get_stream_credit (RlxQuic *self, RlxQuicStream stream)
{
  g_return_val_if_fail (self != NULL && stream < RLX_QUIC_N_STREAMS, 0);
  if (self->conn == NULL || self->out[stream].id < 0)
    return 0;
  return ngtcp2_conn_get_max_stream_data_left (self->conn, self->out[stream].id);
}

guint64
rlx_quic_get_cwnd (RlxQuic *self)
{
  ngtcp2_conn_stat cstat;

  g_return_val_if_fail (self != NULL, 0);
  if (self->conn == NULL)
    return 0;
  ngtcp2_conn_get_conn_stat (self->conn, &cstat);
  return cstat.cwnd;
}

guint64
rlx_quic_get_rtt_us (RlxQuic *self)
{
  ngtcp2_conn_stat cstat;

  g_return_val_if_fail (self != NULL, 0);
  if (self->conn == NULL)
    return 0;
  ngtcp2_conn_get_conn_stat (self->conn, &cstat);
  return cstat.smoothed_rtt / NGTCP2_MICROSECONDS;
}

guint64
rlx_quic_get_delivery_rate (RlxQuic *self)
{
  ngtcp2_conn_stat cstat;

  g_return_val_if_fail (self != NULL, 0);
  if (self->conn == NULL)
    return 0;
  ngtcp2_conn_get_conn_stat (self->conn, &cstat);
  return cstat.delivery_rate_sec;
}

void
rlx_quic_free (RlxQuic *self)
{
  if (self == NULL)
    return;
  if (self->service)
    {
      g_source_destroy (self->service);
      g_source_unref (self->service);
    }
  if (self->frame_tick)
    {
      g_source_destroy (self->frame_tick);
      g_clear_pointer (&self->frame_tick, g_source_unref);
    }
  log_stats (self, "at the end");
  drop_conn (self);
  if (self->timerfd >= 0)
    close (self->timerfd);
  for (guint s = 0; s < RLX_QUIC_N_STREAMS; s++)
    {
      g_queue_clear_full (&self->out[s].frames, out_frame_free);
      rlx_frame_reader_free (self->in[s]);
    }
  g_clear_pointer (&self->pending_error, g_error_free);
  g_clear_object (&self->identity);
  g_main_context_unref (self->context);
  g_free (self->txbuf);
  g_free (self->pin);
  g_free (self->peer_name);
  g_free (self->seen_fingerprint);
  g_free (self);
}
