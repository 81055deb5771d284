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
 * They meet in a few mutex-protected queues: frames to send (main → I/O,
 * plus a wake-up source), frames received, progress and the end (I/O →
 * main, as idle sources on the main context, in order). libnice may emit
 * its signals on either thread (host candidates come from inside
 * nice_agent_gather_candidates on the main thread, the rest from the I/O
 * thread), so every handler only posts.
 *
 * Lifetime: the I/O thread holds a reference until it has finished; it
 * finishes when QUIC has closed (cleanly or not) or failed to start, then
 * posts one last callback that joins it.
 */
#define G_LOG_DOMAIN "rlx-remote"
#include "rlx-config.h"
#include "rlx-remote-link.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <string.h>
#include <sys/socket.h>
#include <nice/agent.h>

#define DEFAULT_MAX_FRAME   ((gsize) 64 << 20)
#define LINGER_MS           1000
#define SYNC_MS             250
#define MAX_CANDIDATE_LEN   512
#define MAX_CANDIDATES      64
/* Socket buffers of the selected pair: a burst of a few MB must not be
 * dropped while the I/O thread waits for a core (drops cost QUIC its
 * congestion window). */
#define SOCKET_BUFFER       (8 * 1024 * 1024)

typedef struct {
  GBytes       *frame;
  RlxQuicStream stream;
} Item;

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

  /* I/O thread only */
  RlxQuic      *quic;
  int           gso_fd;         /* the selected pair's UDP socket, or -1 */
  struct sockaddr_storage gso_to;
  socklen_t     gso_to_len;
  gboolean      gso_off;        /* the kernel refused UDP_SEGMENT once */
  guint         gso_pair;       /* which selected pair gso_fd is for */
  GSource      *io_wake;
  gboolean      io_done;

  /* shared, under lock */
  GMutex        lock;
  GQueue        out_q;          /* Item* */
  GQueue        in_q;           /* Item* */
  gboolean      in_posted;
  gboolean      progress_posted;
  gboolean      close_requested;
  guint64       written[RLX_QUIC_N_STREAMS];   /* frame bytes QUIC wrote (I/O side) */
  gint64        last_rx_at;     /* monotonic µs of the last datagram */
  guint64       dgram_tx;
  guint64       dgram_rx;
  char         *path;           /* "host/srflx" … */
  guint         pair_gen;       /* bumped when the selected pair changes */
  GPtrArray    *local_addrs;    /* char* */
  int           ice_state;      /* NiceComponentState */
  guint64       rtt_us;

  /* main thread only */
  gboolean      started;
  gboolean      ready;
  gboolean      remote_creds_set;
  guint         n_remote_candidates;
  guint64       handed[RLX_QUIC_N_STREAMS];   /* frame bytes handed to send */
  guint64       written_seen[RLX_QUIC_N_STREAMS];
  guint64       tx_seen;
  guint64       rx_seen;
  GSource      *connect_timeout;
  GSource      *sync;
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

static void
item_free (gpointer data)
{
  Item *it = data;

  g_bytes_unref (it->frame);
  g_free (it);
}

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
post_main (RlxRemoteLink *self, GSourceFunc func, char *text, GError *error)
{
  Post *p = g_new0 (Post, 1);
  GSource *s = g_idle_source_new ();

  p->self = g_object_ref (self);
  p->func = func;
  p->text = text;
  p->error = error;
  g_source_set_priority (s, G_PRIORITY_DEFAULT);
  g_source_set_callback (s, post_dispatch, p, post_free);
  g_source_set_static_name (s, "rlx-remote-link post");
  g_source_attach (s, self->main_ctx);
  g_source_unref (s);
}

/* ── main-thread handlers of posts ──────────────────────────────────────── */

static void
sync_counters (RlxRemoteLink *self)
{
  guint64 written[RLX_QUIC_N_STREAMS], tx, rx;
  gint64 last_rx_at;
  gboolean drained = FALSE;

  g_mutex_lock (&self->lock);
  memcpy (written, self->written, sizeof written);
  tx = self->dgram_tx;
  rx = self->dgram_rx;
  last_rx_at = self->last_rx_at;
  g_mutex_unlock (&self->lock);

  if (rx != self->rx_seen)
    {
      /* Any bytes count as a sign of life, at the time they arrived. */
      rlx_link_add_bytes_rx_at (RLX_LINK (self), rx - self->rx_seen, last_rx_at);
      self->rx_seen = rx;
    }
  for (guint s = 0; s < RLX_QUIC_N_STREAMS; s++)
    if (written[s] != self->written_seen[s])
      {
        self->written_seen[s] = written[s];
        drained = TRUE;
      }
  if (tx != self->tx_seen)
    {
      rlx_link_add_bytes_tx (RLX_LINK (self), tx - self->tx_seen);
      self->tx_seen = tx;
    }
  else if (drained)
    {
      /* Frames drained without a datagram counted yet: still tell the
       * sender to look at pending_bytes again. */
      g_object_notify (G_OBJECT (self), "bytes-tx");
    }
}

static gboolean
on_sync (gpointer user_data)
{
  RlxRemoteLink *self = user_data;

  sync_counters (self);
  return G_SOURCE_CONTINUE;
}

static void
stop_main_timers (RlxRemoteLink *self)
{
  if (self->connect_timeout)
    {
      g_source_destroy (self->connect_timeout);
      g_clear_pointer (&self->connect_timeout, g_source_unref);
    }
  if (self->sync)
    {
      g_source_destroy (self->sync);
      g_clear_pointer (&self->sync, g_source_unref);
    }
}

static void
request_io_close (RlxRemoteLink *self)
{
  g_mutex_lock (&self->lock);
  self->close_requested = TRUE;
  g_mutex_unlock (&self->lock);
  if (self->io_wake)
    g_source_set_ready_time (self->io_wake, 0);
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
  return G_SOURCE_REMOVE;
}

static gboolean
post_frames (gpointer data)
{
  Post *p = data;
  RlxRemoteLink *self = p->self;
  GQueue q = G_QUEUE_INIT;
  Item *it;

  g_mutex_lock (&self->lock);
  q = self->in_q;
  g_queue_init (&self->in_q);
  self->in_posted = FALSE;
  g_mutex_unlock (&self->lock);

  sync_counters (self);
  while ((it = g_queue_pop_head (&q)) != NULL)
    {
      if (!rlx_link_is_closed (RLX_LINK (self)))
        rlx_link_emit_frame_lane (RLX_LINK (self),
                                  it->stream == RLX_QUIC_STREAM_CONTROL ? RLX_LINK_LANE_CONTROL
                                                                        : RLX_LINK_LANE_BULK,
                                  it->frame);
      item_free (it);
    }
  return G_SOURCE_REMOVE;
}

static gboolean
post_progress (gpointer data)
{
  Post *p = data;

  g_mutex_lock (&p->self->lock);
  p->self->progress_posted = FALSE;
  g_mutex_unlock (&p->self->lock);
  if (!rlx_link_is_closed (RLX_LINK (p->self)))
    sync_counters (p->self);
  return G_SOURCE_REMOVE;
}

static gboolean
post_closed (gpointer data)
{
  Post *p = data;

  stop_main_timers (p->self);
  sync_counters (p->self);
  rlx_link_emit_closed (RLX_LINK (p->self), p->error);
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

/* The selected pair changed: use its socket directly for sending (UDP
 * generic segmentation offload: one sendmsg per burst instead of one per
 * packet) when it is a plain UDP socket of ours; relayed (TURN) and TCP pairs
 * have none and go through libnice. Receiving always goes through libnice. */
static void
io_refresh_direct (RlxRemoteLink *self)
{
  g_autoptr(GSocket) sock = NULL;
  NiceCandidate *local = NULL, *remote = NULL;
  guint gen;

  g_mutex_lock (&self->lock);
  gen = self->pair_gen;
  g_mutex_unlock (&self->lock);
  if (gen == self->gso_pair)
    return;
  self->gso_pair = gen;
  self->gso_fd = -1;
  if (self->gso_off)
    return;
  if (!nice_agent_get_selected_pair (self->agent, self->stream_id, 1, &local, &remote) ||
      local->transport != NICE_CANDIDATE_TRANSPORT_UDP ||
      local->type == NICE_CANDIDATE_TYPE_RELAYED || remote->type == NICE_CANDIDATE_TYPE_RELAYED)
    return;
  sock = nice_agent_get_selected_socket (self->agent, self->stream_id, 1);
  if (sock == NULL)
    return;
  nice_address_copy_to_sockaddr (&remote->addr, (struct sockaddr *) &self->gso_to);
  self->gso_to_len = remote->addr.s.addr.sa_family == AF_INET6 ? sizeof (struct sockaddr_in6)
                                                                 : sizeof (struct sockaddr_in);
  self->gso_fd = g_socket_get_fd (sock);   /* libnice keeps the socket open */
}

/* Datagrams [d, d+n) of equal length (the last may be shorter) in one
 * sendmsg with UDP_SEGMENT. Returns how many went out, or -1 if GSO is not
 * available (then nothing was sent). */
static gint
send_gso (RlxRemoteLink *self, const RlxDatagram *d, guint n)
{
  struct iovec iov[64];
  union { char buf[CMSG_SPACE (sizeof (guint16))]; struct cmsghdr align; } ctl;
  struct msghdr msg = { 0 };
  struct cmsghdr *cm;
  guint16 seg = (guint16) d[0].len;
  gsize total = 0;
  guint k = 0;

  /* Segments of length seg, the last one possibly shorter. */
  while (k < n && k < G_N_ELEMENTS (iov) && d[k].len <= seg && total + d[k].len <= 65000)
    {
      iov[k].iov_base = (void *) d[k].data;
      iov[k].iov_len = d[k].len;
      total += d[k].len;
      if (d[k++].len < seg)
        break;
    }
  if (k <= 1)
    return 0;
  msg.msg_name = &self->gso_to;
  msg.msg_namelen = self->gso_to_len;
  msg.msg_iov = iov;
  msg.msg_iovlen = k;
  msg.msg_control = ctl.buf;
  msg.msg_controllen = sizeof ctl.buf;
  cm = CMSG_FIRSTHDR (&msg);
  cm->cmsg_level = SOL_UDP;
  cm->cmsg_type = UDP_SEGMENT;
  cm->cmsg_len = CMSG_LEN (sizeof (guint16));
  memcpy (CMSG_DATA (cm), &seg, sizeof seg);
  if (sendmsg (self->gso_fd, &msg, MSG_DONTWAIT) < 0)
    {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
        return -2;
      /* The path is down for now (a cable pulled, a route gone): like any
       * UDP send, the datagrams are lost and QUIC recovers or times out. */
      if (errno == ENETUNREACH || errno == EHOSTUNREACH || errno == ECONNREFUSED ||
          errno == ENETDOWN || errno == EPERM)
        return (gint) k;
      /* No GSO here (an old kernel, a device without it): libnice from now on. */
      g_debug ("link to %s: UDP GSO refused (%s); sending through libnice",
               self->peer_id, g_strerror (errno));
      self->gso_off = TRUE;
      self->gso_fd = -1;
      return -1;
    }
  return (gint) k;
}

static guint
quic_send_cb (const RlxDatagram *d, guint n, gpointer user_data)
{
  RlxRemoteLink *self = user_data;
  NiceOutputMessage msgs[64];
  GOutputVector vecs[64];
  guint done = 0;
  guint64 bytes = 0;

  io_refresh_direct (self);
  while (done < n)
    {
      guint k = MIN (n - done, G_N_ELEMENTS (msgs));
      gint sent = 0;

      if (self->gso_fd >= 0 && n - done > 1)
        {
          sent = send_gso (self, d + done, n - done);
          if (sent == -2)
            break;
        }
      if (sent <= 0)
        {
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
        }
      for (gint i = 0; i < sent; i++)
        bytes += d[done + (guint) i].len;
      done += (guint) sent;
    }
  g_mutex_lock (&self->lock);
  self->dgram_tx += bytes;
  g_mutex_unlock (&self->lock);
  return done;
}

static void
quic_established_cb (gpointer user_data)
{
  RlxRemoteLink *self = user_data;

  post_main (self, post_ready, NULL, NULL);
}

static void
quic_frame_cb (RlxQuicStream stream, GBytes *frame, gpointer user_data)
{
  RlxRemoteLink *self = user_data;
  Item *it = g_new0 (Item, 1);
  gboolean post;

  it->frame = g_bytes_ref (frame);
  it->stream = stream;
  g_mutex_lock (&self->lock);
  g_queue_push_tail (&self->in_q, it);
  post = !self->in_posted;
  self->in_posted = TRUE;
  g_mutex_unlock (&self->lock);
  if (post)
    post_main (self, post_frames, NULL, NULL);
}

static void
quic_progress_cb (const guint64 written[RLX_QUIC_N_STREAMS], gpointer user_data)
{
  RlxRemoteLink *self = user_data;
  gboolean post;

  g_mutex_lock (&self->lock);
  memcpy (self->written, written, sizeof self->written);
  self->rtt_us = rlx_quic_get_rtt_us (self->quic);
  post = !self->progress_posted;
  self->progress_posted = TRUE;
  g_mutex_unlock (&self->lock);
  if (post)
    post_main (self, post_progress, NULL, NULL);
}

static void
quic_closed_cb (const GError *error, gpointer user_data)
{
  RlxRemoteLink *self = user_data;

  post_main (self, post_closed, NULL, g_error_copy (error));
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
      post_main (self, post_closed, NULL, g_steal_pointer (&error));
      io_finish (self);
      return FALSE;
    }
  rlx_quic_start (self->quic);
  /* Frames queued so far go to QUIC now (it holds them until the handshake). */
  g_source_set_ready_time (self->io_wake, 0);
  return TRUE;
}

/* Frames queued by the main thread, and a close request. */
static gboolean
io_wake_dispatch (GSource *source, GSourceFunc callback, gpointer user_data)
{
  RlxRemoteLink *self = user_data;
  GQueue q;
  gboolean close;
  Item *it;

  g_source_set_ready_time (source, -1);
  if (self->io_done)
    return G_SOURCE_CONTINUE;
  /* Frames queued before a close still go out (QUIC lingers for them). */
  g_mutex_lock (&self->lock);
  close = self->close_requested;
  if (self->quic)
    {
      q = self->out_q;
      g_queue_init (&self->out_q);
    }
  else
    g_queue_init (&q);
  g_mutex_unlock (&self->lock);

  while ((it = g_queue_pop_head (&q)) != NULL)
    {
      g_autoptr(GError) error = NULL;
      if (!rlx_quic_send (self->quic, it->stream, it->frame, &error))
        g_debug ("link to %s: frame not sent: %s", self->peer_id, error->message);
      item_free (it);
    }
  if (close)
    {
      if (self->quic && rlx_quic_is_established (self->quic))
        rlx_quic_close (self->quic, LINGER_MS);   /* quic_closed_cb finishes */
      else
        io_finish (self);
    }
  return G_SOURCE_CONTINUE;
}

static GSourceFuncs io_wake_funcs = {
  .dispatch = io_wake_dispatch,
};

static void
on_recv (NiceAgent *agent, guint stream_id, guint component_id, guint len, gchar *buf,
         gpointer user_data)
{
  RlxRemoteLink *self = user_data;

  g_mutex_lock (&self->lock);
  self->dgram_rx += len;
  self->last_rx_at = g_get_monotonic_time ();
  g_mutex_unlock (&self->lock);
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
          post_main (self, post_closed, NULL, g_error_copy (error));
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
  g_clear_pointer (&self->quic, rlx_quic_free);
  if (self->io_wake)
    g_source_destroy (self->io_wake);
  /* Stop the agent's timers and sockets here, on the thread that runs them. */
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
}

/* ── RlxLink ─────────────────────────────────────────────────────────────── */

static gboolean
queue_frame (RlxRemoteLink *self, GBytes *frame, RlxQuicStream stream, GError **error)
{
  Item *it;
  gsize len = g_bytes_get_size (frame);

  if (len > self->max_frame)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE,
                   "a frame of %" G_GSIZE_FORMAT " bytes is over the cap of %" G_GSIZE_FORMAT
                   " bytes of the link to %s", len, self->max_frame, peer_name (self));
      return FALSE;
    }
  it = g_new0 (Item, 1);
  it->frame = g_bytes_ref (frame);
  it->stream = stream;
  g_mutex_lock (&self->lock);
  g_queue_push_tail (&self->out_q, it);
  g_mutex_unlock (&self->lock);
  self->handed[stream] += len;
  g_source_set_ready_time (self->io_wake, 0);
  return TRUE;
}

static gboolean
rlx_remote_link_send (RlxLink *link, GBytes *frame, GError **error)
{
  return queue_frame (RLX_REMOTE_LINK (link), frame, RLX_QUIC_STREAM_BULK, error);
}

/* Lanes are QUIC streams: CONTROL overtakes queued BULK data. */
static RlxQuicStream
stream_of_lane (RlxLinkLane lane)
{
  return lane == RLX_LINK_LANE_CONTROL ? RLX_QUIC_STREAM_CONTROL : RLX_QUIC_STREAM_BULK;
}

static gboolean
rlx_remote_link_send_lane (RlxLink *link, RlxLinkLane lane, GBytes *frame, GError **error)
{
  return queue_frame (RLX_REMOTE_LINK (link), frame, stream_of_lane (lane), error);
}

static gsize
rlx_remote_link_pending_bytes_lane (RlxLink *link, RlxLinkLane lane)
{
  RlxRemoteLink *self = RLX_REMOTE_LINK (link);
  RlxQuicStream s = stream_of_lane (lane);

  return (gsize) (self->handed[s] - MIN (self->handed[s], self->written_seen[s]));
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
  G_OBJECT_CLASS (rlx_remote_link_parent_class)->dispose (object);
}

static void
rlx_remote_link_finalize (GObject *object)
{
  RlxRemoteLink *self = RLX_REMOTE_LINK (object);

  /* The I/O thread held a reference until it ended. */
  g_assert (self->thread == NULL);
  if (self->io_wake)
    g_source_unref (self->io_wake);
  if (self->agent)
    {
      g_signal_handlers_disconnect_by_data (self->agent, self);
      g_object_unref (self->agent);
    }
  g_clear_pointer (&self->io_loop, g_main_loop_unref);
  g_clear_pointer (&self->io_ctx, g_main_context_unref);
  g_clear_pointer (&self->main_ctx, g_main_context_unref);
  g_queue_clear_full (&self->out_q, item_free);
  g_queue_clear_full (&self->in_q, item_free);
  g_clear_pointer (&self->local_addrs, g_ptr_array_unref);
  g_clear_object (&self->identity);
  g_free (self->peer_id);
  g_free (self->pin);
  g_free (self->path);
  g_mutex_clear (&self->lock);
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
  g_queue_init (&self->out_q);
  g_queue_init (&self->in_q);
  self->local_addrs = g_ptr_array_new_with_free_func (g_free);
  self->gso_fd = -1;
  self->ice_state = NICE_COMPONENT_STATE_DISCONNECTED;
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
  self->io_ctx = g_main_context_new ();
  self->io_loop = g_main_loop_new (self->io_ctx, FALSE);
  name = g_strdup_printf ("%s (remote, connecting)", self->peer_id);
  rlx_link_set_peer (RLX_LINK (self), name);

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

  self->io_wake = g_source_new (&io_wake_funcs, sizeof (GSource));
  g_source_set_callback (self->io_wake, NULL, self, NULL);
  g_source_set_static_name (self->io_wake, "rlx-remote-link wake");
  g_source_set_ready_time (self->io_wake, -1);
  g_source_attach (self->io_wake, self->io_ctx);

  self->thread = g_thread_new ("rlx-remote-io", io_thread, g_object_ref (self));
  return g_steal_pointer (&self);
}

void
rlx_remote_link_get_local_credentials (RlxRemoteLink *self, char **ufrag, char **pwd)
{
  g_return_if_fail (RLX_IS_REMOTE_LINK (self));
  if (!nice_agent_get_local_credentials (self->agent, self->stream_id, ufrag, pwd))
    {
      *ufrag = NULL;
      *pwd = NULL;
    }
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
  if (!nice_agent_set_remote_credentials (self->agent, self->stream_id, ufrag, pwd))
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
  c = nice_agent_parse_remote_candidate_sdp (self->agent, self->stream_id, line);
  if (c == NULL || c->component_id != 1)
    {
      if (c)
        nice_candidate_free (c);
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_PROTOCOL,
                   "%s sent a candidate libnice cannot read: '%.80s'", self->peer_id, candidate);
      return FALSE;
    }
  list = g_slist_append (NULL, c);
  added = nice_agent_set_remote_candidates (self->agent, self->stream_id, 1, list);
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
  nice_agent_peer_candidate_gathering_done (self->agent, self->stream_id);
}

void
rlx_remote_link_start (RlxRemoteLink *self)
{
  g_return_if_fail (RLX_IS_REMOTE_LINK (self));
  if (self->started || rlx_link_is_closed (RLX_LINK (self)))
    return;
  self->started = TRUE;
  self->connect_timeout = g_timeout_source_new (self->connect_timeout_ms);
  g_source_set_callback (self->connect_timeout, on_connect_timeout, self, NULL);
  g_source_attach (self->connect_timeout, self->main_ctx);
  self->sync = g_timeout_source_new (SYNC_MS);
  g_source_set_callback (self->sync, on_sync, self, NULL);
  g_source_attach (self->sync, self->main_ctx);
  if (!nice_agent_gather_candidates (self->agent, self->stream_id))
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
  return queue_frame (self, frame, RLX_QUIC_STREAM_CONTROL, error);
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

const char *
rlx_remote_link_get_peer_id (RlxRemoteLink *self)
{
  g_return_val_if_fail (RLX_IS_REMOTE_LINK (self), NULL);
  return self->peer_id;
}
