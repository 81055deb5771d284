/* rlx-remote-link.c — RlxLink over ICE (libnice) and QUIC (RlxQuic)
 *
 * See rlx-remote-link.h. Two threads share the object:
 *
 *   main thread   the RlxLink API, the signals, the connect timeout, and the
 *                 libnice calls that feed remote credentials and candidates
 *                 (libnice locks the agent itself).
 *   I/O thread    its own GMainContext: the agent's sockets and timers (the
 *                 agent is created with that context), the receive callback
 *                 attached before gathering, and the RlxQuic connection with
 *                 all its crypto.
 *
 * Frames, progress and the end cross in an RlxLinkMailbox
 * (rlx-link-mailbox.h), as on the Unix link: frames to send and the close
 * request main → I/O (its source wakes the I/O thread), received frames
 * (moved, not copied), datagram and frame byte counts and the end I/O →
 * main, delivered in order by one source on the main context. The rest
 * (candidates, ready, the thread's end) is posted as idle sources, and a
 * few fields share a mutex. libnice may emit its signals on either thread
 * (host candidates come from inside nice_agent_gather_candidates on the
 * main thread, the rest from the I/O thread), so every handler only posts.
 *
 * Lifetime: the I/O thread holds a reference until it has finished; it
 * finishes when QUIC has closed (cleanly or not) or failed to start, then
 * posts one last callback that joins it.
 *
 * Over 1,000 lines: one link across two threads, its handlers on each side
 * and the posts between them sharing one struct; reading the selected
 * pair's socket directly (the I/O thread's fast path) is the part to move
 * out first.
 */
#define G_LOG_DOMAIN "rlx-remote"
#include "rlx-config.h"
#include "rlx-remote-link.h"
#include "rlx-io-thread.h"
#include "rlx-link-mailbox.h"
#include "rlx-udp-path.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <nice/agent.h>

#define DEFAULT_MAX_FRAME   ((gsize) 64 << 20)
#define LINGER_MS           1000
#define MAX_CANDIDATE_LEN   512
#define MAX_CANDIDATES      64
/* Socket buffers of the selected pair: a burst of a few MB must not be
 * dropped while the I/O thread waits for a core (drops cost QUIC its
 * congestion window). */
#define SOCKET_BUFFER       (8 * 1024 * 1024)
/* While the link reads the selected socket itself (rlx-udp-path.h), its
 * sources run above libnice's, which poll the same socket. */
#define IO_PRIORITY         (G_PRIORITY_DEFAULT - 10)
/* How long reading goes back to libnice when ICE traffic shows up. */
#define RX_HOLDOFF_MS       2000

struct _RlxRemoteLink
{
  RlxLink       parent_instance;

  /* configuration (immutable after new) */
  RlxIdentity  *identity;
  char         *peer_id;
  char         *pin;
  gboolean      controlling;
  gsize         max_frame;
  gsize         max_udp_payload;
  RlxQuicCc     cc;
  guint         connect_timeout_ms;
  guint         idle_timeout_ms;

  GMainContext *main_ctx;
  GMainContext *io_ctx;
  GMainLoop    *io_loop;
  GThread      *thread;
  NiceAgent    *agent;
  guint         stream_id;
  RlxLinkMailbox *mb;

  /* I/O thread only */
  RlxQuic      *quic;
  RlxUdpPath   *direct;         /* the selected pair's own UDP socket, or NULL */
  guint         direct_pair;    /* which selected pair it is for */
  gboolean      gso_off;        /* the kernel refused UDP_SEGMENT once */
  gboolean      direct_rx_off;  /* RLX_REMOTE_DIRECT_RX=0 */
  gint64        rx_holdoff_until;
  GSource      *rx_retry;
  gboolean      io_done;
  gboolean      closing;        /* the close request was seen */
  GQueue        waiting[RLX_LINK_N_LANES];     /* GBytes* taken before QUIC started */
  guint64       written_told[RLX_QUIC_N_STREAMS];   /* frame bytes reported to mb */

  /* shared, under lock */
  GMutex        lock;
  gboolean      io_ended;       /* no more sources on io_ctx */
  GSource      *io_update;      /* io_rx_update is due */
  gboolean      direct_rx;      /* the I/O thread reads the socket itself */
  char         *path;           /* "host/srflx" … */
  guint         pair_gen;       /* bumped when the selected pair changes */
  GPtrArray    *local_addrs;    /* char* */
  int           ice_state;      /* NiceComponentState */
  guint64       rtt_us;
  guint64       delivery_rate;    /* QUIC's, bytes/s (under lock) */

  /* The agent's stream: the I/O thread removes it when it ends, while the
   * main thread may still be handed the peer's late candidates. A call into
   * the agent about the stream runs under stream_lock and only while
   * stream_removed is FALSE (see stream_enter). */
  GMutex        stream_lock;
  gboolean      stream_removed;

  /* main thread only */
  gboolean      started;
  gboolean      ready;
  gboolean      remote_creds_set;
  guint         n_remote_candidates;
  GSource      *connect_timeout;
};

G_DEFINE_FINAL_TYPE (RlxRemoteLink, rlx_remote_link, RLX_TYPE_LINK)

enum {
  SIGNAL_LOCAL_CANDIDATE,
  SIGNAL_GATHERING_DONE,
  SIGNAL_READY,
  N_SIGNALS
};

static guint signals[N_SIGNALS];

static void io_finish (RlxRemoteLink *self);

static const char *
peer_name (RlxRemoteLink *self)
{
  return self->peer_id;
}

/* ── posting to the main context ─────────────────────────────────────────── */

typedef struct {
  RlxRemoteLink *self;
  GSourceFunc    func;   /* called with the Post* */
  char          *text;
  GError        *error;
} Post;

static void
post_free (gpointer data)
{
  Post *p = data;

  g_object_unref (p->self);
  g_free (p->text);
  g_clear_error (&p->error);
  g_free (p);
}

static gboolean
post_dispatch (gpointer data)
{
  Post *p = data;

  return p->func (p);
}

/* Always deferred (an idle source), also when called on the main thread:
 * libnice may call our handlers from inside a call we made. */
static void
post_main_full (RlxRemoteLink *self, GSourceFunc func, char *text, GError *error, gint priority)
{
  Post *p = g_new0 (Post, 1);
  GSource *s = g_idle_source_new ();

  p->self = g_object_ref (self);
  p->func = func;
  p->text = text;
  p->error = error;
  g_source_set_priority (s, priority);
  g_source_set_callback (s, post_dispatch, p, post_free);
  g_source_set_static_name (s, "rlx-remote-link post");
  g_source_attach (s, self->main_ctx);
  g_source_unref (s);
}

static void
post_main (RlxRemoteLink *self, GSourceFunc func, char *text, GError *error)
{
  post_main_full (self, func, text, error, G_PRIORITY_DEFAULT);
}

/* ── main-thread handlers of posts ──────────────────────────────────────── */

static void
stop_main_timers (RlxRemoteLink *self)
{
  if (self->connect_timeout)
    {
      g_source_destroy (self->connect_timeout);
      g_clear_pointer (&self->connect_timeout, g_source_unref);
    }
}

static void
request_io_close (RlxRemoteLink *self)
{
  rlx_link_mailbox_close (self->mb, RLX_LINK_MAILBOX_CLOSE_FLUSH);
}

static void
fail_main (RlxRemoteLink *self, GError *error)
{
  stop_main_timers (self);
  request_io_close (self);
  rlx_link_emit_closed (RLX_LINK (self), error);
  g_error_free (error);
}

static gboolean
post_local_candidate (gpointer data)
{
  Post *p = data;

  if (!rlx_link_is_closed (RLX_LINK (p->self)))
    g_signal_emit (p->self, signals[SIGNAL_LOCAL_CANDIDATE], 0, p->text);
  return G_SOURCE_REMOVE;
}

static gboolean
post_gathering_done (gpointer data)
{
  Post *p = data;

  if (!rlx_link_is_closed (RLX_LINK (p->self)))
    g_signal_emit (p->self, signals[SIGNAL_GATHERING_DONE], 0);
  return G_SOURCE_REMOVE;
}

static gboolean
post_ready (gpointer data)
{
  Post *p = data;
  RlxRemoteLink *self = p->self;
  g_autofree char *path = rlx_remote_link_dup_path (self);
  g_autofree char *name = g_strdup_printf ("%s (remote, %s)", self->peer_id, path ? path : "?");

  if (rlx_link_is_closed (RLX_LINK (self)) || self->ready)
    return G_SOURCE_REMOVE;
  self->ready = TRUE;
  if (self->connect_timeout)
    {
      g_source_destroy (self->connect_timeout);
      g_clear_pointer (&self->connect_timeout, g_source_unref);
    }
  rlx_link_set_peer (RLX_LINK (self), name);
  g_signal_emit (self, signals[SIGNAL_READY], 0);
  /* ::ready's handlers connected to ::frame: what arrived meanwhile
   * (the peer's hello) goes to them now, in order. */
  if (self->mb)
    rlx_link_mailbox_release_main (self->mb);
  return G_SOURCE_REMOVE;
}

static gboolean
post_io_finished (gpointer data)
{
  Post *p = data;
  RlxRemoteLink *self = p->self;

  if (self->thread)
    {
      g_thread_join (self->thread);
      self->thread = NULL;
    }
  return G_SOURCE_REMOVE;
}

/* ── I/O thread: QUIC callbacks ─────────────────────────────────────────── */

/* The selected pair's socket, used directly (rlx-udp-path.h) when it is a
 * plain UDP socket of ours; relayed (TURN) and TCP pairs have none and go
 * through libnice. Only from a top-level callback of the I/O thread (never
 * from inside QUIC): it may stop a receive source and deliver what waits. */
static void
io_direct_refresh (RlxRemoteLink *self)
{
  g_autoptr(GSocket) sock = NULL;
  NiceCandidate *local = NULL, *remote = NULL;
  struct sockaddr_storage to;
  guint gen;

  g_mutex_lock (&self->lock);
  gen = self->pair_gen;
  g_mutex_unlock (&self->lock);
  if (gen == self->direct_pair)
    return;
  self->direct_pair = gen;
  if (self->direct)
    rlx_udp_path_stop_receive (self->direct, TRUE);
  g_clear_pointer (&self->direct, rlx_udp_path_free);
  if (!nice_agent_get_selected_pair (self->agent, self->stream_id, 1, &local, &remote) ||
      local->transport != NICE_CANDIDATE_TRANSPORT_UDP ||
      local->type == NICE_CANDIDATE_TYPE_RELAYED || remote->type == NICE_CANDIDATE_TYPE_RELAYED)
    return;
  sock = nice_agent_get_selected_socket (self->agent, self->stream_id, 1);
  if (sock == NULL)
    return;
  memset (&to, 0, sizeof to);
  nice_address_copy_to_sockaddr (&remote->addr, (struct sockaddr *) &to);
  /* libnice keeps the socket open for as long as the pair exists. */
  self->direct = rlx_udp_path_new (g_socket_get_fd (sock), (struct sockaddr *) &to,
                                   to.ss_family == AF_INET6 ? sizeof (struct sockaddr_in6)
                                                            : sizeof (struct sockaddr_in));
}

/* The direct path is for the pair selected now (if not, libnice until the
 * update that follows every pair change). */
static gboolean
io_direct_current (RlxRemoteLink *self)
{
  gboolean current;

  if (self->direct == NULL)
    return FALSE;
  g_mutex_lock (&self->lock);
  current = self->pair_gen == self->direct_pair;
  g_mutex_unlock (&self->lock);
  return current;
}

static guint
quic_send_cb (const RlxDatagram *d, guint n, gpointer user_data)
{
  RlxRemoteLink *self = user_data;
  NiceOutputMessage msgs[64];
  GOutputVector vecs[64];
  guint done = 0;
  guint64 bytes = 0;

  if (!self->gso_off && io_direct_current (self))
    while (done < n)
      {
        gint sent = rlx_udp_path_send (self->direct, d + done, n - done);

        if (sent < 0)
          {
            self->gso_off = TRUE;   /* libnice from now on */
            break;
          }
        if (sent == 0)
          goto out;                 /* the socket is full: offered again shortly */
        for (gint i = 0; i < sent; i++)
          bytes += d[done + (guint) i].len;
        done += (guint) sent;
      }
  while (done < n)
    {
      guint k = MIN (n - done, G_N_ELEMENTS (msgs));
      gint sent;

      for (guint i = 0; i < k; i++)
        {
          vecs[i].buffer = d[done + i].data;
          vecs[i].size = d[done + i].len;
          msgs[i].buffers = &vecs[i];
          msgs[i].n_buffers = 1;
        }
      sent = nice_agent_send_messages_nonblocking (self->agent, self->stream_id, 1, msgs, k,
                                                   NULL, NULL);
      if (sent <= 0)
        break;
      for (gint i = 0; i < sent; i++)
        bytes += d[done + (guint) i].len;
      done += (guint) sent;
    }
out:
  rlx_link_mailbox_add_tx (self->mb, RLX_LINK_LANE_BULK, 0, bytes, 0);
  return done;
}

static void io_schedule_update (RlxRemoteLink *self);

static void
quic_established_cb (gpointer user_data)
{
  RlxRemoteLink *self = user_data;

  /* "ready" must reach the main thread before the first frame: whoever
   * takes the link connects its ::frame handler then, and the peer's first
   * frame (the cohort's hello) may follow the handshake at once. The
   * mailbox's source, attached earlier at the same priority, would be
   * dispatched first and the frame lost; above it, this post always wins. */
  post_main_full (self, post_ready, NULL, NULL, G_PRIORITY_HIGH);
  io_schedule_update (self);   /* not from inside QUIC */
}

/* Lanes are QUIC streams: CONTROL overtakes queued BULK data. */
static RlxQuicStream
stream_of_lane (RlxLinkLane lane)
{
  return lane == RLX_LINK_LANE_CONTROL ? RLX_QUIC_STREAM_CONTROL : RLX_QUIC_STREAM_BULK;
}

static RlxLinkLane
lane_of_stream (RlxQuicStream stream)
{
  return stream == RLX_QUIC_STREAM_CONTROL ? RLX_LINK_LANE_CONTROL : RLX_LINK_LANE_BULK;
}

static gboolean
quic_frame_cb (RlxQuicStream stream, GBytes *frame, gpointer user_data)
{
  RlxRemoteLink *self = user_data;

  /* QUIC cannot stop reading one link's datagrams, but once the mailbox's
   * inbox is full it holds the peer's flow-control credit until the main
   * context has taken the frames (io_wake): the peer stalls, the inbox
   * stays bounded. */
  return rlx_link_mailbox_push_frame (self->mb, lane_of_stream (stream), g_bytes_ref (frame));
}

static void
quic_progress_cb (const guint64 written[RLX_QUIC_N_STREAMS], gpointer user_data)
{
  RlxRemoteLink *self = user_data;

  g_mutex_lock (&self->lock);
  self->rtt_us = rlx_quic_get_rtt_us (self->quic);
  self->delivery_rate = rlx_quic_get_delivery_rate (self->quic);
  g_mutex_unlock (&self->lock);
  for (guint s = 0; s < RLX_QUIC_N_STREAMS; s++)
    if (written[s] > self->written_told[s])
      {
        rlx_link_mailbox_add_tx (self->mb, lane_of_stream (s), written[s] - self->written_told[s],
                                 0, 0);
        self->written_told[s] = written[s];
      }
}

static void
quic_closed_cb (const GError *error, gpointer user_data)
{
  RlxRemoteLink *self = user_data;

  rlx_link_mailbox_push_closed (self->mb, g_error_copy (error));
  io_finish (self);
}

static const RlxQuicCallbacks quic_callbacks = {
  .send = quic_send_cb,
  .established = quic_established_cb,
  .frame = quic_frame_cb,
  .progress = quic_progress_cb,
  .closed = quic_closed_cb,
};

/* ── I/O thread ─────────────────────────────────────────────────────────── */

static void
io_finish (RlxRemoteLink *self)
{
  if (self->io_done)
    return;
  self->io_done = TRUE;
  g_main_loop_quit (self->io_loop);
}

/* ── I/O thread: reading the selected pair's socket directly ─────────────── */

/* Who reads the selected socket now: its sources' priority and the flag
 * rlx_remote_link_reads_directly shows. */
static void
io_set_direct (RlxRemoteLink *self, gboolean direct)
{
  gint priority = direct ? IO_PRIORITY : G_PRIORITY_DEFAULT;

  rlx_link_mailbox_set_io_priority (self->mb, priority);
  if (self->quic)
    rlx_quic_set_priority (self->quic, priority);
  g_mutex_lock (&self->lock);
  self->direct_rx = direct;
  g_mutex_unlock (&self->lock);
}

static void
io_direct_datagrams (const RlxDatagram *d, guint n, gsize bytes, gpointer user_data)
{
  RlxRemoteLink *self = user_data;

  rlx_link_mailbox_add_rx (self->mb, bytes, g_get_monotonic_time ());
  if (self->quic && !self->io_done)
    rlx_quic_receive_batch (self->quic, d, n);
}

static void io_rx_update (RlxRemoteLink *self);

static gboolean
io_rx_retry_cb (gpointer user_data)
{
  RlxRemoteLink *self = user_data;

  g_clear_pointer (&self->rx_retry, g_source_unref);
  io_rx_update (self);
  return G_SOURCE_REMOVE;
}

/* ICE traffic on the selected socket: libnice reads it again for a while
 * (what was dropped, STUN retransmits). */
static void
io_direct_stray (const char *what, gpointer user_data)
{
  RlxRemoteLink *self = user_data;

  g_debug ("link to %s: %s on the selected pair; libnice reads it for %u ms", self->peer_id,
           what, RX_HOLDOFF_MS);
  self->rx_holdoff_until = g_get_monotonic_time () + (gint64) RX_HOLDOFF_MS * 1000;
  rlx_udp_path_stop_receive (self->direct, TRUE);
  io_set_direct (self, FALSE);
  if (self->rx_retry == NULL)
    {
      self->rx_retry = g_timeout_source_new (RX_HOLDOFF_MS);
      g_source_set_callback (self->rx_retry, io_rx_retry_cb, self, NULL);
      g_source_attach (self->rx_retry, self->io_ctx);
    }
}

static const RlxUdpPathCallbacks direct_callbacks = {
  .datagrams = io_direct_datagrams,
  .stray = io_direct_stray,
};

/* Read the selected socket ourselves while QUIC is up on a plain UDP pair
 * and ICE has concluded (READY: no checks left that need libnice to read);
 * libnice reads otherwise. Top-level callbacks of the I/O thread only. */
static void
io_rx_update (RlxRemoteLink *self)
{
  gboolean want, receiving;
  int state;

  if (self->io_done)
    return;
  io_direct_refresh (self);
  g_mutex_lock (&self->lock);
  state = self->ice_state;
  g_mutex_unlock (&self->lock);
  want = self->direct != NULL && !self->direct_rx_off && self->quic != NULL &&
         rlx_quic_is_established (self->quic) && state == NICE_COMPONENT_STATE_READY &&
         g_get_monotonic_time () >= self->rx_holdoff_until;
  receiving = self->direct != NULL && rlx_udp_path_is_receiving (self->direct);
  if (want && !receiving)
    rlx_udp_path_start_receive (self->direct, self->io_ctx, IO_PRIORITY, &direct_callbacks, self);
  else if (!want && receiving)
    rlx_udp_path_stop_receive (self->direct, TRUE);
  io_set_direct (self, want);
}

static gboolean
io_update_cb (gpointer user_data)
{
  RlxRemoteLink *self = user_data;

  g_mutex_lock (&self->lock);
  g_clear_pointer (&self->io_update, g_source_unref);
  g_mutex_unlock (&self->lock);
  io_rx_update (self);
  return G_SOURCE_REMOVE;
}

/* io_rx_update soon, on the I/O thread; from any thread, and from inside
 * QUIC or libnice. */
static void
io_schedule_update (RlxRemoteLink *self)
{
  g_mutex_lock (&self->lock);
  if (self->io_update == NULL && !self->io_ended)
    {
      self->io_update = g_idle_source_new ();
      g_source_set_priority (self->io_update, IO_PRIORITY);
      g_source_set_callback (self->io_update, io_update_cb, self, NULL);
      g_source_set_static_name (self->io_update, "rlx-remote-link update");
      g_source_attach (self->io_update, self->io_ctx);
    }
  g_mutex_unlock (&self->lock);
}

/* The frames taken from the mailbox go to QUIC once it exists. */
static void
io_send_waiting (RlxRemoteLink *self)
{
  GBytes *frame;

  if (self->quic == NULL)
    return;
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    while ((frame = g_queue_pop_head (&self->waiting[l])) != NULL)
      {
        g_autoptr(GError) error = NULL;

        if (!rlx_quic_send (self->quic, stream_of_lane (l), frame, &error))
          g_debug ("link to %s: frame not sent: %s", self->peer_id, error->message);
        g_bytes_unref (frame);
      }
}

static gboolean
io_start_quic (RlxRemoteLink *self)
{
  g_autoptr(GError) error = NULL;
  RlxQuicConfig c = { 0 };

  if (self->quic || self->io_done)
    return self->quic != NULL;
  c.is_client = self->controlling;
  c.identity = self->identity;
  c.peer_fingerprint = self->pin;
  c.max_frame = self->max_frame;
  c.max_udp_payload = self->max_udp_payload;
  c.cc = self->cc;
  c.handshake_timeout_ms = self->connect_timeout_ms;
  c.idle_timeout_ms = self->idle_timeout_ms;
  c.peer_name = self->peer_id;
  g_debug ("link to %s: starting QUIC as %s", self->peer_id, c.is_client ? "client" : "server");
  self->quic = rlx_quic_new (&c, &quic_callbacks, self, &error);
  if (self->quic == NULL)
    {
      rlx_link_mailbox_push_closed (self->mb, g_steal_pointer (&error));
      io_finish (self);
      return FALSE;
    }
  rlx_quic_start (self->quic);
  /* Frames queued so far go to QUIC now (it holds them until the handshake). */
  io_send_waiting (self);
  return TRUE;
}

/* Frames queued by the main thread, and a close request (the mailbox's
 * io_func). Frames queued before a close still go out (QUIC lingers for
 * them). */
static void
io_wake (gpointer data)
{
  RlxRemoteLink *self = data;

  if (self->io_done)
    return;
  rlx_link_mailbox_take (self->mb, self->waiting);
  io_send_waiting (self);
  /* The main context took a full inbox: the peer may send again. */
  if (self->quic && rlx_quic_is_rx_held (self->quic) && !rlx_link_mailbox_inbox_full (self->mb))
    rlx_quic_resume_rx (self->quic);
  if (!self->closing && rlx_link_mailbox_get_close (self->mb) != RLX_LINK_MAILBOX_OPEN)
    {
      self->closing = TRUE;
      if (self->quic && rlx_quic_is_established (self->quic))
        rlx_quic_close (self->quic, LINGER_MS);   /* quic_closed_cb finishes */
      else
        io_finish (self);
    }
}

static void
on_recv (NiceAgent *agent, guint stream_id, guint component_id, guint len, gchar *buf,
         gpointer user_data)
{
  RlxRemoteLink *self = user_data;

  rlx_link_mailbox_add_rx (self->mb, len, g_get_monotonic_time ());
  if (self->io_done)
    return;
  /* The controlled side's QUIC server starts with the first datagram; it
   * can come before our own component-state signal is handled. */
  if (self->quic == NULL && !self->controlling && !io_start_quic (self))
    return;
  if (self->quic)
    rlx_quic_receive (self->quic, (const guint8 *) buf, len);
}

typedef struct {
  RlxRemoteLink *self;
  guint          state;
} StateChange;

static void
state_change_free (gpointer data)
{
  StateChange *sc = data;

  g_object_unref (sc->self);
  g_free (sc);
}

static gboolean
io_state_changed (gpointer data)
{
  StateChange *sc = data;
  RlxRemoteLink *self = sc->self;

  io_schedule_update (self);
  g_debug ("link to %s: ICE %s%s", self->peer_id, nice_component_state_to_string (sc->state),
           self->io_done ? " (link already ended)" : "");
  if (self->io_done)
    return G_SOURCE_REMOVE;
  if (sc->state == NICE_COMPONENT_STATE_CONNECTED || sc->state == NICE_COMPONENT_STATE_READY)
    {
      if (self->controlling && self->quic == NULL)
        io_start_quic (self);
      else if (self->quic)
        rlx_quic_resume (self->quic);
    }
  else if (sc->state == NICE_COMPONENT_STATE_FAILED)
    {
      GError *error = g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_ICE_FAILED,
                                   "ICE found no working path to %s: every candidate pair "
                                   "failed its checks (a firewall or NAT in the way? give "
                                   "--turn for a relay)", self->peer_id);
      if (self->quic && rlx_quic_is_established (self->quic))
        rlx_quic_abort (self->quic, error);     /* reports through quic_closed_cb */
      else
        {
          rlx_link_mailbox_push_closed (self->mb, g_error_copy (error));
          io_finish (self);
        }
      g_error_free (error);
    }
  return G_SOURCE_REMOVE;
}

static gpointer
io_thread (gpointer data)
{
  RlxRemoteLink *self = data;

  g_main_context_push_thread_default (self->io_ctx);
  g_main_loop_run (self->io_loop);
  g_mutex_lock (&self->lock);
  self->io_ended = TRUE;
  if (self->io_update)
    {
      g_source_destroy (self->io_update);
      g_clear_pointer (&self->io_update, g_source_unref);
    }
  g_mutex_unlock (&self->lock);
  if (self->rx_retry)
    {
      g_source_destroy (self->rx_retry);
      g_clear_pointer (&self->rx_retry, g_source_unref);
    }
  if (self->direct)
    rlx_udp_path_stop_receive (self->direct, FALSE);
  g_clear_pointer (&self->direct, rlx_udp_path_free);
  g_clear_pointer (&self->quic, rlx_quic_free);
  rlx_link_mailbox_io_done (self->mb);
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    g_queue_clear_full (&self->waiting[l], (GDestroyNotify) g_bytes_unref);
  /* Stop the agent's timers and sockets here, on the thread that runs them.
   * No main-thread call about the stream is in progress or starts after
   * this: libnice warns about a stream it no longer knows. */
  g_mutex_lock (&self->stream_lock);
  self->stream_removed = TRUE;
  g_mutex_unlock (&self->stream_lock);
  nice_agent_attach_recv (self->agent, self->stream_id, 1, self->io_ctx, NULL, NULL);
  nice_agent_remove_stream (self->agent, self->stream_id);
  while (g_main_context_iteration (self->io_ctx, FALSE))
    ;
  g_main_context_pop_thread_default (self->io_ctx);
  post_main (self, post_io_finished, NULL, NULL);
  g_object_unref (self);   /* the thread's reference */
  return NULL;
}

/* ── libnice signal handlers (either thread): post only ─────────────────── */

static void
on_new_candidate (NiceAgent *agent, NiceCandidate *candidate, gpointer user_data)
{
  RlxRemoteLink *self = user_data;
  char *sdp = nice_agent_generate_local_candidate_sdp (agent, candidate);
  char ip[NICE_ADDRESS_STRING_LEN];

  nice_address_to_string (&candidate->addr, ip);
  g_mutex_lock (&self->lock);
  g_ptr_array_add (self->local_addrs,
                   g_strdup_printf (strchr (ip, ':') ? "[%s]:%u" : "%s:%u", ip,
                                    nice_address_get_port (&candidate->addr)));
  g_mutex_unlock (&self->lock);
  post_main (self, post_local_candidate, sdp, NULL);
}

static void
on_gathering_done (NiceAgent *agent, guint stream_id, gpointer user_data)
{
  post_main (user_data, post_gathering_done, NULL, NULL);
}

static void
on_state_changed (NiceAgent *agent, guint stream_id, guint component_id, guint state,
                  gpointer user_data)
{
  RlxRemoteLink *self = user_data;
  StateChange *sc = g_new0 (StateChange, 1);

  g_mutex_lock (&self->lock);
  self->ice_state = (int) state;
  g_mutex_unlock (&self->lock);
  sc->self = g_object_ref (self);
  sc->state = state;
  g_main_context_invoke_full (self->io_ctx, G_PRIORITY_DEFAULT, io_state_changed, sc,
                              state_change_free);
}

static const char *
candidate_kind (NiceCandidateType t)
{
  switch (t)
    {
    case NICE_CANDIDATE_TYPE_HOST:             return "host";
    case NICE_CANDIDATE_TYPE_SERVER_REFLEXIVE: return "srflx";
    case NICE_CANDIDATE_TYPE_PEER_REFLEXIVE:   return "prflx";
    case NICE_CANDIDATE_TYPE_RELAYED:          return "relay";
    default:                                   return "?";
    }
}

/* Enlarge the selected socket's buffers: SO_*BUFFORCE where allowed (root,
 * CAP_NET_ADMIN), else as far as net.core.[rw]mem_max lets us. */
static void
enlarge_buffers (NiceAgent *agent, guint stream_id)
{
  g_autoptr(GSocket) sock = nice_agent_get_selected_socket (agent, stream_id, 1);
  int fd, size = SOCKET_BUFFER;

  if (sock == NULL)
    return;   /* a relayed (TURN) pair has no socket of its own */
  fd = g_socket_get_fd (sock);
  if (setsockopt (fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) != 0)
    (void) setsockopt (fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  if (setsockopt (fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size) != 0)
    (void) setsockopt (fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
}

static void
on_selected_pair (NiceAgent *agent, guint stream_id, guint component_id,
                  NiceCandidate *local, NiceCandidate *remote, gpointer user_data)
{
  RlxRemoteLink *self = user_data;
  char ip[NICE_ADDRESS_STRING_LEN];

  enlarge_buffers (agent, stream_id);
  nice_address_to_string (&remote->addr, ip);
  g_mutex_lock (&self->lock);
  self->pair_gen++;
  g_free (self->path);
  self->path = g_strdup_printf ("%s/%s %s:%u", candidate_kind (local->type),
                                candidate_kind (remote->type), ip,
                                nice_address_get_port (&remote->addr));
  g_mutex_unlock (&self->lock);
  io_schedule_update (self);
}

/* ── RlxLink ─────────────────────────────────────────────────────────────── */

static gboolean
queue_frame (RlxRemoteLink *self, GBytes *frame, RlxLinkLane lane, GError **error)
{
  gsize len = g_bytes_get_size (frame);

  if (len > self->max_frame)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE,
                   "a frame of %" G_GSIZE_FORMAT " bytes is over the cap of %" G_GSIZE_FORMAT
                   " bytes of the link to %s", len, self->max_frame, peer_name (self));
      return FALSE;
    }
  return rlx_link_mailbox_send (self->mb, lane, frame, error);
}

static gboolean
rlx_remote_link_send (RlxLink *link, GBytes *frame, GError **error)
{
  return queue_frame (RLX_REMOTE_LINK (link), frame, RLX_LINK_LANE_BULK, error);
}

static gboolean
rlx_remote_link_send_lane (RlxLink *link, RlxLinkLane lane, GBytes *frame, GError **error)
{
  return queue_frame (RLX_REMOTE_LINK (link), frame, lane, error);
}

static gsize
rlx_remote_link_pending_bytes_lane (RlxLink *link, RlxLinkLane lane)
{
  return rlx_link_mailbox_pending (RLX_REMOTE_LINK (link)->mb, lane);
}

static void
rlx_remote_link_close (RlxLink *link)
{
  RlxRemoteLink *self = RLX_REMOTE_LINK (link);
  g_autoptr(GError) error = g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED,
                                         "link to %s closed", peer_name (self));

  stop_main_timers (self);
  request_io_close (self);
  rlx_link_emit_closed (link, error);
}

static gsize
rlx_remote_link_pending_bytes (RlxLink *link)
{
  return rlx_remote_link_pending_bytes_lane (link, RLX_LINK_LANE_CONTROL) +
         rlx_remote_link_pending_bytes_lane (link, RLX_LINK_LANE_BULK);
}

static gboolean
on_connect_timeout (gpointer user_data)
{
  RlxRemoteLink *self = user_data;
  int state;
  const char *why;

  g_clear_pointer (&self->connect_timeout, g_source_unref);
  g_mutex_lock (&self->lock);
  state = self->ice_state;
  g_mutex_unlock (&self->lock);
  if (state == NICE_COMPONENT_STATE_CONNECTED || state == NICE_COMPONENT_STATE_READY)
    why = "ICE found a path but the QUIC/TLS handshake did not finish";
  else if (!self->remote_creds_set)
    why = "the peer never answered through signalling";
  else if (self->n_remote_candidates == 0)
    why = "no candidates came from the peer";
  else
    why = "ICE is still checking: no candidate pair answered";
  fail_main (self, g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_TIMEOUT,
                                "the link to %s was not up after %u ms: %s", self->peer_id,
                                self->connect_timeout_ms, why));
  return G_SOURCE_REMOVE;
}

static void
rlx_remote_link_dispose (GObject *object)
{
  RlxRemoteLink *self = RLX_REMOTE_LINK (object);

  stop_main_timers (self);
  if (self->mb != NULL)
    rlx_link_mailbox_detach (self->mb);
  G_OBJECT_CLASS (rlx_remote_link_parent_class)->dispose (object);
}

/* However the link ends (closed here, or reported by the I/O thread). */
static void
on_closed (RlxLink *link, const GError *error, gpointer user_data)
{
  /* A peer that broke QUIC's or the framing's rules (a frame over a
   * stream's cap) is said in the log, as rlx-link.c says its own. */
  if (g_error_matches (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL))
    g_message ("link to %s closed: %s", rlx_link_get_peer (link), error->message);
  stop_main_timers (RLX_REMOTE_LINK (link));
}

static void
rlx_remote_link_finalize (GObject *object)
{
  RlxRemoteLink *self = RLX_REMOTE_LINK (object);

  /* The I/O thread held a reference until it ended. */
  g_assert (self->thread == NULL);
  g_clear_pointer (&self->mb, rlx_link_mailbox_unref);
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    g_queue_clear_full (&self->waiting[l], (GDestroyNotify) g_bytes_unref);
  if (self->agent)
    {
      g_signal_handlers_disconnect_by_data (self->agent, self);
      g_object_unref (self->agent);
    }
  g_clear_pointer (&self->io_loop, g_main_loop_unref);
  g_clear_pointer (&self->io_ctx, g_main_context_unref);
  g_clear_pointer (&self->main_ctx, g_main_context_unref);
  g_clear_pointer (&self->local_addrs, g_ptr_array_unref);
  g_clear_object (&self->identity);
  g_free (self->peer_id);
  g_free (self->pin);
  g_free (self->path);
  g_mutex_clear (&self->lock);
  g_mutex_clear (&self->stream_lock);
  G_OBJECT_CLASS (rlx_remote_link_parent_class)->finalize (object);
}

static void
rlx_remote_link_class_init (RlxRemoteLinkClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  RlxLinkClass *link_class = RLX_LINK_CLASS (klass);

  object_class->dispose = rlx_remote_link_dispose;
  object_class->finalize = rlx_remote_link_finalize;
  link_class->send = rlx_remote_link_send;
  link_class->close = rlx_remote_link_close;
  link_class->pending_bytes = rlx_remote_link_pending_bytes;
  link_class->send_lane = rlx_remote_link_send_lane;
  link_class->pending_bytes_lane = rlx_remote_link_pending_bytes_lane;

  signals[SIGNAL_LOCAL_CANDIDATE] =
    g_signal_new ("local-candidate", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                  0, NULL, NULL, NULL, G_TYPE_NONE, 1, G_TYPE_STRING);
  signals[SIGNAL_GATHERING_DONE] =
    g_signal_new ("gathering-done", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                  0, NULL, NULL, NULL, G_TYPE_NONE, 0);
  signals[SIGNAL_READY] =
    g_signal_new ("ready", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                  0, NULL, NULL, NULL, G_TYPE_NONE, 0);
}

static void
rlx_remote_link_init (RlxRemoteLink *self)
{
  g_mutex_init (&self->lock);
  g_mutex_init (&self->stream_lock);
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    g_queue_init (&self->waiting[l]);
  g_signal_connect (self, "closed", G_CALLBACK (on_closed), NULL);
  self->local_addrs = g_ptr_array_new_with_free_func (g_free);
  self->ice_state = NICE_COMPONENT_STATE_DISCONNECTED;
  self->direct_rx_off = g_strcmp0 (g_getenv ("RLX_REMOTE_DIRECT_RX"), "0") == 0;
}

RlxRemoteLink *
rlx_remote_link_new (const RlxRemoteLinkConfig *config, GError **error)
{
  g_autoptr(RlxRemoteLink) self = NULL;
  /* Aggressive nomination (libnice's default): the first pair that works carries
   * QUIC at once, and a better one found later replaces it under QUIC's feet
   * (its path is a placeholder, see rlx-quic.c). */
  NiceAgentOption options = NICE_AGENT_OPTION_ICE_TRICKLE;
  g_autofree char *name = NULL;

  g_return_val_if_fail (config != NULL, NULL);
  g_return_val_if_fail (RLX_IS_IDENTITY (config->identity), NULL);
  g_return_val_if_fail (config->peer_id != NULL, NULL);

  if (!rlx_fingerprint_is_valid (config->peer_fingerprint))
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_INVALID,
                   "%s's certificate fingerprint is not 64 hex digits", config->peer_id);
      return NULL;
    }
  if ((config->stun_ip && !g_hostname_is_ip_address (config->stun_ip)) ||
      (config->turn_ip && !g_hostname_is_ip_address (config->turn_ip)))
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_INVALID,
                   "STUN/TURN server '%s' is not a numeric address (resolve it first)",
                   config->turn_ip ? config->turn_ip : config->stun_ip);
      return NULL;
    }
  if (config->relay_only && config->turn_ip == NULL)
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_INVALID,
                   "relay-only needs a TURN server");
      return NULL;
    }

  self = g_object_new (RLX_TYPE_REMOTE_LINK, NULL);
  self->identity = g_object_ref (config->identity);
  self->peer_id = g_strdup (config->peer_id);
  self->pin = g_ascii_strdown (config->peer_fingerprint, -1);
  self->controlling = config->controlling;
  self->max_frame = config->max_frame ? config->max_frame : DEFAULT_MAX_FRAME;
  self->max_udp_payload = config->max_udp_payload;
  self->cc = config->cc;
  self->connect_timeout_ms = config->connect_timeout_ms ? config->connect_timeout_ms : 20000;
  self->idle_timeout_ms = config->idle_timeout_ms;
  self->main_ctx = g_main_context_ref_thread_default ();
  self->io_ctx = rlx_io_context_try_new (error);
  if (self->io_ctx == NULL)
    {
      g_prefix_error (error, "cannot set up the link to %s: ", config->peer_id);
      return NULL;
    }
  self->io_loop = g_main_loop_new (self->io_ctx, FALSE);
  name = g_strdup_printf ("%s (remote, connecting)", self->peer_id);
  rlx_link_set_peer (RLX_LINK (self), name);
  self->mb = rlx_link_mailbox_new (RLX_LINK (self), self->io_ctx, io_wake, self, error);
  if (self->mb == NULL)
    return NULL;
  /* Frames wait for ::ready (post_ready releases them). */
  rlx_link_mailbox_hold_main (self->mb);

  self->agent = nice_agent_new_full (self->io_ctx, NICE_COMPATIBILITY_RFC5245, options);
  g_object_set (self->agent,
                "controlling-mode", config->controlling,
                "ice-tcp", FALSE,
                "upnp", FALSE,
                "force-relay", config->relay_only,
                NULL);
  if (config->stun_ip)
    g_object_set (self->agent, "stun-server", config->stun_ip,
                  "stun-server-port", (guint) (config->stun_port ? config->stun_port : 3478), NULL);
  self->stream_id = nice_agent_add_stream (self->agent, 1);
  if (self->stream_id == 0)
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_INVALID,
                   "libnice could not add a stream");
      return NULL;
    }
  if (config->turn_ip &&
      !nice_agent_set_relay_info (self->agent, self->stream_id, 1, config->turn_ip,
                                  config->turn_port ? config->turn_port : 3478,
                                  config->turn_user ? config->turn_user : "",
                                  config->turn_password ? config->turn_password : "",
                                  NICE_RELAY_TYPE_TURN_UDP))
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_INVALID,
                   "libnice refused the TURN server %s:%u", config->turn_ip, config->turn_port);
      return NULL;
    }
  g_signal_connect (self->agent, "new-candidate-full", G_CALLBACK (on_new_candidate), self);
  g_signal_connect (self->agent, "candidate-gathering-done", G_CALLBACK (on_gathering_done), self);
  g_signal_connect (self->agent, "component-state-changed", G_CALLBACK (on_state_changed), self);
  g_signal_connect (self->agent, "new-selected-pair-full", G_CALLBACK (on_selected_pair), self);
  /* A read pending on the component before anything is gathered. */
  nice_agent_attach_recv (self->agent, self->stream_id, 1, self->io_ctx, on_recv, self);


  self->thread = g_thread_try_new ("rlx-remote-io", io_thread, g_object_ref (self), error);
  if (self->thread == NULL)
    {
      g_object_unref (self);  /* the reference the thread would have held */
      g_prefix_error (error, "cannot set up the link to %s: ", config->peer_id);
      return NULL;
    }
  return g_steal_pointer (&self);
}

/* Main thread, around a call into the agent about the stream: FALSE (and
 * nothing held) once the I/O thread has removed the stream, so that what
 * the peer sends after the link ended (a late trickled candidate) is
 * dropped instead of reaching libnice. Never held across anything but the
 * one libnice call; the handlers libnice emits from inside it take only
 * self->lock. */
static gboolean
stream_enter (RlxRemoteLink *self)
{
  g_mutex_lock (&self->stream_lock);
  if (!self->stream_removed)
    return TRUE;
  g_mutex_unlock (&self->stream_lock);
  return FALSE;
}

static void
stream_leave (RlxRemoteLink *self)
{
  g_mutex_unlock (&self->stream_lock);
}

void
rlx_remote_link_get_local_credentials (RlxRemoteLink *self, char **ufrag, char **pwd)
{
  g_return_if_fail (RLX_IS_REMOTE_LINK (self));
  *ufrag = NULL;
  *pwd = NULL;
  if (!stream_enter (self))
    return;
  if (!nice_agent_get_local_credentials (self->agent, self->stream_id, ufrag, pwd))
    {
      *ufrag = NULL;
      *pwd = NULL;
    }
  stream_leave (self);
}

static gboolean
ice_chars_ok (const char *s, gsize min, gsize max)
{
  gsize n;

  if (s == NULL)
    return FALSE;
  n = strlen (s);
  if (n < min || n > max)
    return FALSE;
  for (gsize i = 0; i < n; i++)
    if (!g_ascii_isalnum (s[i]) && s[i] != '+' && s[i] != '/')
      return FALSE;
  return TRUE;
}

gboolean
rlx_remote_link_set_remote_credentials (RlxRemoteLink *self, const char *ufrag,
                                        const char *pwd, GError **error)
{
  gboolean ok;

  g_return_val_if_fail (RLX_IS_REMOTE_LINK (self), FALSE);

  if (!ice_chars_ok (ufrag, 4, 256) || !ice_chars_ok (pwd, 22, 256))
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                   "%s sent ICE credentials that are not ICE credentials", self->peer_id);
      return FALSE;
    }
  if (self->remote_creds_set)
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                   "%s sent its ICE credentials twice", self->peer_id);
      return FALSE;
    }
  if (!stream_enter (self))
    return TRUE;    /* the link has ended: nothing left to set */
  ok = nice_agent_set_remote_credentials (self->agent, self->stream_id, ufrag, pwd);
  stream_leave (self);
  if (!ok)
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                   "libnice refused %s's ICE credentials", self->peer_id);
      return FALSE;
    }
  self->remote_creds_set = TRUE;
  return TRUE;
}

gboolean
rlx_remote_link_add_remote_candidate (RlxRemoteLink *self, const char *candidate, GError **error)
{
  g_autofree char *line = NULL;
  NiceCandidate *c;
  GSList *list;
  int added;

  g_return_val_if_fail (RLX_IS_REMOTE_LINK (self), FALSE);
  g_return_val_if_fail (candidate != NULL, FALSE);

  if (strlen (candidate) > MAX_CANDIDATE_LEN || self->n_remote_candidates >= MAX_CANDIDATES)
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                   "%s sent a candidate too long, or more than %u of them", self->peer_id,
                   MAX_CANDIDATES);
      return FALSE;
    }
  line = g_str_has_prefix (candidate, "a=") ? g_strdup (candidate)
                                            : g_strconcat ("a=", candidate, NULL);
  if (!stream_enter (self))
    {
      g_debug ("link to %s: a candidate after the link ended, dropped", self->peer_id);
      return TRUE;
    }
  c = nice_agent_parse_remote_candidate_sdp (self->agent, self->stream_id, line);
  if (c == NULL || c->component_id != 1)
    {
      stream_leave (self);
      if (c)
        nice_candidate_free (c);
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                   "%s sent a candidate libnice cannot read: '%.80s'", self->peer_id, candidate);
      return FALSE;
    }
  list = g_slist_append (NULL, c);
  added = nice_agent_set_remote_candidates (self->agent, self->stream_id, 1, list);
  stream_leave (self);
  g_slist_free_full (list, (GDestroyNotify) nice_candidate_free);
  if (added < 0)
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                   "libnice refused %s's candidate '%.80s'", self->peer_id, candidate);
      return FALSE;
    }
  self->n_remote_candidates++;
  return TRUE;
}

void
rlx_remote_link_remote_gathering_done (RlxRemoteLink *self)
{
  g_return_if_fail (RLX_IS_REMOTE_LINK (self));
  if (!stream_enter (self))
    return;
  nice_agent_peer_candidate_gathering_done (self->agent, self->stream_id);
  stream_leave (self);
}

void
rlx_remote_link_start (RlxRemoteLink *self)
{
  gboolean gathered;

  g_return_if_fail (RLX_IS_REMOTE_LINK (self));
  if (self->started || rlx_link_is_closed (RLX_LINK (self)))
    return;
  self->started = TRUE;
  self->connect_timeout = g_timeout_source_new (self->connect_timeout_ms);
  g_source_set_callback (self->connect_timeout, on_connect_timeout, self, NULL);
  g_source_attach (self->connect_timeout, self->main_ctx);
  if (!stream_enter (self))
    return;
  gathered = nice_agent_gather_candidates (self->agent, self->stream_id);
  stream_leave (self);
  if (!gathered)
    fail_main (self, g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_ICE_FAILED,
                                  "libnice could not gather any local candidate (no network "
                                  "interface up?)"));
}

gboolean
rlx_remote_link_is_ready (RlxRemoteLink *self)
{
  g_return_val_if_fail (RLX_IS_REMOTE_LINK (self), FALSE);
  return self->ready && !rlx_link_is_closed (RLX_LINK (self));
}

gboolean
rlx_remote_link_send_control (RlxRemoteLink *self, GBytes *frame, GError **error)
{
  g_return_val_if_fail (RLX_IS_REMOTE_LINK (self), FALSE);
  g_return_val_if_fail (frame != NULL, FALSE);
  if (rlx_link_is_closed (RLX_LINK (self)))
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED, "link to %s is closed",
                   peer_name (self));
      return FALSE;
    }
  return queue_frame (self, frame, RLX_LINK_LANE_CONTROL, error);
}

char *
rlx_remote_link_dup_path (RlxRemoteLink *self)
{
  char *path;

  g_return_val_if_fail (RLX_IS_REMOTE_LINK (self), NULL);
  g_mutex_lock (&self->lock);
  path = g_strdup (self->path);
  g_mutex_unlock (&self->lock);
  return path;
}

char **
rlx_remote_link_dup_local_addresses (RlxRemoteLink *self)
{
  GStrvBuilder *b;
  char **out;

  g_return_val_if_fail (RLX_IS_REMOTE_LINK (self), NULL);
  b = g_strv_builder_new ();
  g_mutex_lock (&self->lock);
  for (guint i = 0; i < self->local_addrs->len; i++)
    g_strv_builder_add (b, self->local_addrs->pdata[i]);
  g_mutex_unlock (&self->lock);
  out = g_strv_builder_end (b);
  g_strv_builder_unref (b);
  return out;
}

gboolean
rlx_remote_link_is_finished (RlxRemoteLink *self)
{
  g_return_val_if_fail (RLX_IS_REMOTE_LINK (self), FALSE);
  return self->thread == NULL;
}

gboolean
rlx_remote_link_reads_directly (RlxRemoteLink *self)
{
  gboolean direct;

  g_return_val_if_fail (RLX_IS_REMOTE_LINK (self), FALSE);
  g_mutex_lock (&self->lock);
  direct = self->direct_rx;
  g_mutex_unlock (&self->lock);
  return direct;
}

guint64
rlx_remote_link_get_rtt_us (RlxRemoteLink *self)
{
  guint64 rtt;

  g_return_val_if_fail (RLX_IS_REMOTE_LINK (self), 0);
  g_mutex_lock (&self->lock);
  rtt = self->rtt_us;
  g_mutex_unlock (&self->lock);
  return rtt;
}

guint64
rlx_remote_link_get_delivery_rate (RlxRemoteLink *self)
{
  guint64 rate;

  g_return_val_if_fail (RLX_IS_REMOTE_LINK (self), 0);
  g_mutex_lock (&self->lock);
  rate = self->delivery_rate;
  g_mutex_unlock (&self->lock);
  return rate;
}

const char *
rlx_remote_link_get_peer_id (RlxRemoteLink *self)
{
  g_return_val_if_fail (RLX_IS_REMOTE_LINK (self), NULL);
  return self->peer_id;
}
