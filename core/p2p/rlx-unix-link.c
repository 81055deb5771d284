/* rlx-unix-link.c — RlxLink over a connected Unix stream socket
 *
 * Two halves:
 *
 *   RlxUnixLink   the GObject, on the main context: the RlxLink API, the
 *                 signals, the counters. It never touches the socket after
 *                 rlx_unix_link_new; it hands frames to a mailbox
 *                 (rlx-link-mailbox.h) and gets whole frames back from it.
 *   UnixIo        everything the socket needs, on an I/O thread
 *                 (rlx-io-thread.h): the read and write sources, the stream
 *                 reader, the send queues, memfds, the linger after close.
 *
 * The stream is records (rlx-link-stream.h): each lane's frames go out in
 * pieces of at most PIECE bytes, and whenever the next record is chosen the
 * control lane goes first, so a control frame queued behind a 7 MB bucket
 * waits for one piece, not for the bucket. Records go out with one sendmsg
 * per batch (headers and frame slices as separate iovecs: no copy); bodies of
 * large records are received straight into the frame's buffer, which grows
 * with what arrived (the reader never trusts an announced size), and the
 * finished buffer crosses to the main context as it is.
 *
 * Bulk frames of at least ring_min bytes go through the shared ring
 * (rlx-link-ring.h; RING records): copied once into a memfd both sides keep
 * mapped, only their place on the socket. Frames the ring has no room for
 * go on as below.
 *
 * Large bulk frames may travel as a sealed memfd instead (SHM records, the fd
 * passed with SCM_RIGHTS, when RLX_LINK_SHM asks for it): the I/O side copies
 * the frame into the memfd once, the receiver maps it read-only. Measured, a
 * fresh memfd per frame costs more than the socket's two copies, so it is
 * off by default. Every received fd is checked (a regular shmem file, sealed
 * against writes and shrinking, exactly the announced size) before it is
 * mapped; anything else closes the link.
 *
 * Lifetime: the link holds a reference on its UnixIo, and so does the I/O
 * side while its socket is open. Closing lets the I/O side flush for up to
 * LINGER_MS without the link (it may already be finalized); a link dropped
 * unclosed stops its I/O side at once.
 *
 * Over 1,000 lines: the two halves of one link and its three ways of
 * carrying a frame (records, the shared ring, sealed memfds) share the I/O
 * side's queues; the ring's half is the part to move out first.
 */
#include "rlx-config.h"
#include "rlx-unix-link.h"
#include "rlx-io-thread.h"
#include "rlx-link-mailbox.h"
#include "rlx-link-stream.h"
#include "rlx-frame-clock.h"
#include "rlx-trace.h"
#include "rlx-link-ring.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define STAGE_SIZE        (64 * 1024)
/* Largest record body: a control frame waits for at most this much of a
 * bulk frame that is being written (plus what the kernel already holds). */
#define PIECE             RLX_UNIX_LINK_PIECE
/* Record bodies at least this long are received straight into the frame. */
#define DIRECT_MIN        ((gsize) 16 * 1024)
/* Stop reading/writing after this much in one dispatch so the other links
 * of a shared I/O thread get their turn; the source fires again at once. */
#define DISPATCH_BUDGET   ((gsize) 8 << 20)
#define MAX_IOV           64
#define SOCKET_BUFFER     (4 * 1024 * 1024)
#define LINGER_MS         1000
/* Buffers of released large frames kept for the next ones: as many bytes as
 * the inbox and a frame in progress can hold (so a stream of frames runs on
 * recycled buffers), and two of the largest model's buckets (7.45 MB) — a
 * round's bucket held while the next one arrives. */
#define POOL_BUFFERS      64
#define POOL_BYTES        ((gsize) 16 << 20)
/* fds a peer may have passed ahead of their SHM records */
#define MAX_PENDING_FDS   8
#define REQUIRED_SEALS    (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

typedef struct {
  GBytes  *bytes;       /* NULL once moved into a memfd or the ring */
  gsize    len;         /* frame length */
  gsize    assigned;    /* body bytes put into records that have started */
  gboolean all_assigned;
  int      fd;          /* ≥ 0: passed on the record's first byte (an SHM
                         * record, or a ring's ATTACH) */
  gboolean ring;        /* one RING record, ring_rec */
  gboolean is_frame;    /* a frame of the link's user (not ring bookkeeping) */
  guint8   ring_rec[4 + RLX_LINK_STREAM_RING_OP_LEN];
} OutFrame;

/* A record being written: its header and body slice. */
typedef struct {
  RlxLinkLane lane;
  OutFrame   *f;
  gsize       body_off;
  gsize       body_len;
  gboolean    last;
  gboolean    shm;
  gboolean    ring;      /* a RING record: its body is f->ring_rec + 4 */
  guint8      hdr[4];
  gsize       done;      /* bytes of header + body written */
} Rec;

/* The I/O side. After rlx_unix_link_new everything but the configuration
 * block is touched on the I/O thread only. */
typedef struct {
  gatomicrefcount     ref;
  RlxIoThread        *thread;
  GMainContext       *context;
  RlxLinkMailbox     *mb;
  GSocketConnection  *connection;
  GSocket            *socket;
  int                 fd;
  gsize               max_frame;

  /* configuration the main side may change, under cfg_lock */
  GMutex              cfg_lock;
  char               *cfg_peer;
  gboolean            cfg_peer_changed;
  gsize               cfg_shm_min;
  gsize               cfg_ring_min;

  char               *peer;           /* for messages */
  GSource            *read_source;
  GSource            *write_source;
  GSource            *linger_source;
  gboolean            paused;         /* the mailbox's inbox is full */
  gboolean            resumed;        /* paused since the last frame tick */
  gboolean            closing;        /* the main side closed the link */
  gboolean            ended;          /* socket closed, nothing more happens */

  /* read state */
  guint8             *stage;
  RlxLinkStreamReader reader;
  RlxLinkStreamPool  *pool;
  GQueue              rx_fds;          /* GINT_TO_POINTER (fd + 1) */
  RlxRingRx          *ring_rx;         /* the peer's rings */
  GSource            *frame_tick;      /* while a frame is in progress */
  RlxFrameClock       clocks[RLX_LINK_N_LANES];

  /* write state */
  GQueue              out[RLX_LINK_N_LANES];   /* OutFrame*, oldest first */
  gsize               shm_min;
  gsize               ring_min;
  RlxRingTx          *ring_tx;         /* ours */
  Rec                 cur;             /* valid when cur_active */
  gboolean            cur_active;

  /* read by the main side (tests, traces) */
  gint                ring_frames_tx;
  gint                ring_frames_rx;
  gint                ring_fallbacks;
} UnixIo;

struct _RlxUnixLink
{
  RlxLink         parent_instance;

  UnixIo         *io;
  RlxLinkMailbox *mb;
  gsize           max_frame;
  gsize           shm_min;
  gsize           ring_min;
};

G_DEFINE_FINAL_TYPE (RlxUnixLink, rlx_unix_link, RLX_TYPE_LINK)

static gboolean on_readable (GSocket *socket, GIOCondition condition, gpointer user_data);
static gboolean on_writable (GSocket *socket, GIOCondition condition, gpointer user_data);
static void     io_flush    (UnixIo *io);
static void     rings_end   (UnixIo *io);

/* ── the I/O side's life ─────────────────────────────────────────────── */

static void
out_frame_free (gpointer data)
{
  OutFrame *f = data;

  g_clear_pointer (&f->bytes, g_bytes_unref);
  if (f->fd >= 0)
    close (f->fd);
  g_free (f);
}

static void
clear_source (GSource **source)
{
  if (*source != NULL)
    {
      g_source_destroy (*source);
      g_clear_pointer (source, g_source_unref);
    }
}

static void
close_rx_fds (UnixIo *io)
{
  gpointer p;

  while ((p = g_queue_pop_head (&io->rx_fds)) != NULL)
    close (GPOINTER_TO_INT (p) - 1);
}

static UnixIo *
io_ref (UnixIo *io)
{
  g_atomic_ref_count_inc (&io->ref);
  return io;
}

static void
io_unref (UnixIo *io)
{
  if (!g_atomic_ref_count_dec (&io->ref))
    return;
  /* Both halves let go; the I/O side ended first (or never started). */
  g_assert (io->read_source == NULL && io->write_source == NULL && io->linger_source == NULL &&
            io->frame_tick == NULL);
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    g_queue_clear_full (&io->out[l], out_frame_free);
  close_rx_fds (io);
  rlx_link_stream_reader_clear (&io->reader);
  rlx_link_stream_reader_free_name (&io->reader);
  g_clear_pointer (&io->pool, rlx_link_stream_pool_unref);
  rings_end (io);
  g_free (io->stage);
  g_free (io->peer);
  g_free (io->cfg_peer);
  g_mutex_clear (&io->cfg_lock);
  g_clear_object (&io->socket);
  g_clear_object (&io->connection);
  g_clear_pointer (&io->mb, rlx_link_mailbox_unref);
  g_clear_pointer (&io->context, g_main_context_unref);
  g_clear_pointer (&io->thread, rlx_io_thread_unref);
  g_free (io);
}

/* What the main side changed (the peer's name, the memfd threshold). */
static void
io_sync_config (UnixIo *io)
{
  g_mutex_lock (&io->cfg_lock);
  if (io->cfg_peer_changed)
    {
      io->cfg_peer_changed = FALSE;
      g_free (io->peer);
      io->peer = g_strdup (io->cfg_peer);
      rlx_link_stream_reader_set_peer (&io->reader, io->peer);
    }
  io->shm_min = io->cfg_shm_min;
  io->ring_min = io->cfg_ring_min;
  g_mutex_unlock (&io->cfg_lock);
}

/* Close the socket; nothing more happens on this side. The I/O side's own
 * reference goes (the caller holds one for the rest of its callback). */
static void
io_end (UnixIo *io)
{
  if (io->ended)
    return;
  io->ended = TRUE;
  clear_source (&io->read_source);
  clear_source (&io->write_source);
  clear_source (&io->linger_source);
  clear_source (&io->frame_tick);
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    g_queue_clear_full (&io->out[l], out_frame_free);
  io->cur_active = FALSE;
  rlx_link_stream_reader_clear (&io->reader);
  rlx_link_stream_pool_close (io->pool);
  close_rx_fds (io);
  rings_end (io);
  g_socket_close (io->socket, NULL);
  rlx_link_mailbox_io_done (io->mb);
  io_unref (io);
}

/* The link failed or the peer went away: report (after the frames that came
 * before) and end. */
static void
io_fail (UnixIo *io, GError *error)
{
  rlx_link_mailbox_push_closed (io->mb, error);
  io_end (io);
}

static GError *
errno_to_link_error (UnixIo *io, const char *what, int errsv)
{
  if (errsv == EPIPE || errsv == ECONNRESET)
    return g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED,
                        "%s closed the connection", io->peer);
  return g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED,
                      "%s to %s failed: %s", what, io->peer, g_strerror (errsv));
}

/* ── reading ─────────────────────────────────────────────────────────── */

static gboolean
sink_frame (gpointer user_data, RlxLinkLane lane, GBytes *frame)
{
  UnixIo *io = user_data;

  /* The bytes already read are still parsed; reading stops after them. */
  rlx_trace ("IO.rx", g_bytes_get_size (frame));
  if (!rlx_link_mailbox_push_frame (io->mb, lane, g_bytes_ref (frame)))
    io->paused = TRUE;
  return TRUE;
}

typedef struct {
  void  *addr;
  gsize  size;
} ShmMapping;

static void
shm_mapping_free (gpointer data)
{
  ShmMapping *m = data;

  munmap (m->addr, m->size);
  g_free (m);
}

/* Check a passed fd before it is trusted with a single byte. */
static GBytes *
map_shm_frame (UnixIo *io, int fd, gsize size, GError **error)
{
  struct stat st;
  int seals;
  void *addr;
  ShmMapping *m;

  if (fstat (fd, &st) != 0 || !S_ISREG (st.st_mode))
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                   "%s passed a file descriptor that is not a memfd for a shared-memory frame; "
                   "link closed", io->peer);
      return NULL;
    }
  seals = fcntl (fd, F_GET_SEALS);
  if (seals < 0 || (seals & REQUIRED_SEALS) != REQUIRED_SEALS)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                   "%s passed a shared-memory frame that is not sealed against writing and "
                   "resizing (seals 0x%x); link closed", io->peer, seals < 0 ? 0 : seals);
      return NULL;
    }
  if (st.st_size < 0 || (guint64) st.st_size != size)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                   "%s announced a shared-memory frame of %" G_GSIZE_FORMAT " bytes but passed "
                   "%" G_GINT64_FORMAT " bytes; link closed", io->peer, size,
                   (gint64) st.st_size);
      return NULL;
    }
  if (size == 0)
    return g_bytes_new (NULL, 0);
  addr = mmap (NULL, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (addr == MAP_FAILED)
    {
      int errsv = errno;
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED,
                   "cannot map a shared-memory frame of %" G_GSIZE_FORMAT " bytes from %s: %s",
                   size, io->peer, g_strerror (errsv));
      return NULL;
    }
  m = g_new (ShmMapping, 1);
  m->addr = addr;
  m->size = size;
  return g_bytes_new_with_free_func (addr, size, shm_mapping_free, m);
}

static gboolean
sink_shm (gpointer user_data, gsize size)
{
  UnixIo *io = user_data;
  gpointer p = g_queue_pop_head (&io->rx_fds);
  g_autoptr(GError) error = NULL;
  GBytes *frame;
  int fd;

  if (p == NULL)
    {
      io_fail (io, g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                                "%s sent a shared-memory record without its file "
                                "descriptor; link closed", io->peer));
      return FALSE;
    }
  fd = GPOINTER_TO_INT (p) - 1;
  frame = map_shm_frame (io, fd, size, &error);
  close (fd);
  if (frame == NULL)
    {
      io_fail (io, g_steal_pointer (&error));
      return FALSE;
    }
  rlx_link_mailbox_add_rx (io->mb, size, g_get_monotonic_time ());
  if (!rlx_link_mailbox_push_frame (io->mb, RLX_LINK_LANE_BULK, frame))
    io->paused = TRUE;
  return TRUE;
}


/* ── the shared ring (rlx-link-ring.h) ───────────────────────────────── */

/* The I/O side ends: our rings go, the peer's are unmapped as their frames
 * are freed, and releases from now on are dropped. */
static void
rings_end (UnixIo *io)
{
  g_clear_pointer (&io->ring_tx, rlx_ring_tx_free);
  g_clear_pointer (&io->ring_rx, rlx_ring_rx_end);
}

/* Queue ring operation @op (its own record; @fd passed with it, or -1). */
static OutFrame *
queue_ring_op (UnixIo *io, const RlxLinkRingOp *op, int fd)
{
  OutFrame *f = g_new0 (OutFrame, 1);

  f->fd = fd;
  f->ring = TRUE;
  rlx_link_stream_put_ring_op (f->ring_rec, op);
  g_queue_push_tail (&io->out[op->kind == RLX_LINK_RING_FRAME ||
                              op->kind == RLX_LINK_RING_DETACH ?
                              RLX_LINK_LANE_BULK : RLX_LINK_LANE_CONTROL], f);
  return f;
}

/* Put bulk frame @frame into our ring and queue its records. FALSE: it goes
 * another way (no ring, or no room while the peer holds frames). */
static gboolean
frame_to_ring (UnixIo *io, GBytes *frame)
{
  g_autoptr(GArray) out = g_array_new (FALSE, FALSE, sizeof (RlxRingOut));
  gsize len;
  const guint8 *data = g_bytes_get_data (frame, &len);
  gboolean placed;
  OutFrame *f = NULL;

  if (io->ring_tx == NULL)
    return FALSE;   /* the I/O side ended: the frame goes nowhere anyway */
  placed = rlx_ring_tx_place (io->ring_tx, data, len, io->peer, out);
  for (guint i = 0; i < out->len; i++)
    {
      RlxRingOut *o = &g_array_index (out, RlxRingOut, i);

      f = queue_ring_op (io, &o->op, o->fd);
    }
  if (!placed)
    {
      g_atomic_int_inc (&io->ring_fallbacks);
      return FALSE;
    }
  /* the FRAME record stands for the frame: counted as one when written */
  f->is_frame = TRUE;
  f->len = len;
  g_atomic_int_inc (&io->ring_frames_tx);
  return TRUE;
}

/* On the I/O thread: frames received in the peer's rings were freed. */
static void
on_ring_releases (gpointer data, const RlxLinkRingOp *ops, guint n_ops)
{
  UnixIo *io = data;

  for (guint i = 0; i < n_ops; i++)
    queue_ring_op (io, &ops[i], -1);
  if (io->write_source == NULL)
    io_flush (io);
}

static gboolean
sink_ring (gpointer user_data, const RlxLinkRingOp *op)
{
  UnixIo *io = user_data;
  g_autoptr(GError) error = NULL;
  gboolean ok = FALSE;

  switch (op->kind)
    {
    case RLX_LINK_RING_ATTACH:
      {
        gpointer p = g_queue_pop_head (&io->rx_fds);

        ok = rlx_ring_rx_attach (io->ring_rx, op, p ? GPOINTER_TO_INT (p) - 1 : -1, io->peer,
                                 &error);
      }
      break;
    case RLX_LINK_RING_RELEASE:
      ok = rlx_ring_tx_release (io->ring_tx, op->ring, op->a, io->peer, &error);
      break;
    case RLX_LINK_RING_DETACH:
      ok = rlx_ring_rx_detach (io->ring_rx, op, io->peer, &error);
      break;
    case RLX_LINK_RING_FRAME:
      {
        GBytes *frame = rlx_ring_rx_frame (io->ring_rx, op, io->peer, &error);

        if (frame == NULL)
          break;
        g_atomic_int_inc (&io->ring_frames_rx);
        rlx_trace ("IO.rx", op->b);
        rlx_link_mailbox_add_rx (io->mb, op->b, g_get_monotonic_time ());
        if (!rlx_link_mailbox_push_frame (io->mb, RLX_LINK_LANE_BULK, frame))
          io->paused = TRUE;
        ok = TRUE;
      }
      break;
    }
  if (!ok)
    io_fail (io, g_steal_pointer (&error));
  return ok;
}

static const RlxLinkStreamSink stream_sink = { sink_frame, sink_shm, sink_ring };

/* Keep the fds that came with the bytes, in order, for their SHM records. */
static gboolean
take_fds (UnixIo *io, struct msghdr *msg)
{
  for (struct cmsghdr *c = CMSG_FIRSTHDR (msg); c != NULL; c = CMSG_NXTHDR (msg, c))
    {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
        continue;
      for (gsize i = 0; i < (c->cmsg_len - CMSG_LEN (0)) / sizeof (int); i++)
        {
          int fd;

          memcpy (&fd, CMSG_DATA (c) + i * sizeof (int), sizeof (int));
          g_queue_push_tail (&io->rx_fds, GINT_TO_POINTER (fd + 1));
        }
    }
  if ((msg->msg_flags & MSG_CTRUNC) || g_queue_get_length (&io->rx_fds) > MAX_PENDING_FDS)
    {
      io_fail (io, g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                                "%s passed more file descriptors than shared-memory "
                                "records; link closed", io->peer));
      return FALSE;
    }
  return TRUE;
}

static void
stop_reading (UnixIo *io)
{
  clear_source (&io->read_source);
}

static void
start_reading (UnixIo *io)
{
  if (io->read_source != NULL || io->ended || io->closing)
    return;
  io->read_source = g_socket_create_source (io->socket, G_IO_IN, NULL);
  g_source_set_callback (io->read_source, G_SOURCE_FUNC (on_readable), io, NULL);
  g_source_set_static_name (io->read_source, "rlx-unix-link read");
  g_source_attach (io->read_source, io->context);
}

/* Read what the socket has (up to the budget). FALSE: stop this source
 * (the link ended, or the inbox is full). */
static gboolean
read_some (UnixIo *io)
{
  gsize budget = 0;

  while (budget < DISPATCH_BUDGET && !io->paused)
    {
      g_autoptr(GError) error = NULL;
      struct iovec iov[2];
      union {
        struct cmsghdr align;
        char buf[CMSG_SPACE (sizeof (int) * MAX_PENDING_FDS)];
      } control;
      struct msghdr msg = { 0 };
      guint8 *direct = NULL;
      gsize direct_len = 0;
      gssize n;
      gint64 t0, t1;

      if (rlx_link_stream_reader_body_space (&io->reader, &direct, &direct_len, &error) &&
          direct_len >= DIRECT_MIN)
        {
          /* The rest of this record's body straight into the frame, then
           * the next record's header. */
          iov[0].iov_base = direct;
          iov[0].iov_len = direct_len;
          iov[1].iov_base = io->stage;
          iov[1].iov_len = 4;
          msg.msg_iovlen = 2;
        }
      else if (error != NULL)
        {
          io_fail (io, g_steal_pointer (&error));
          return FALSE;
        }
      else
        {
          direct_len = 0;
          iov[0].iov_base = io->stage;
          iov[0].iov_len = STAGE_SIZE;
          msg.msg_iovlen = 1;
        }
      msg.msg_iov = iov;
      msg.msg_control = control.buf;
      msg.msg_controllen = sizeof control.buf;

      t0 = g_get_monotonic_time ();
      do
        n = recvmsg (io->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      while (n < 0 && errno == EINTR);
      t1 = g_get_monotonic_time ();
      rlx_link_mailbox_add_io_us (io->mb, t1 - t0);

      if (n < 0)
        {
          int errsv = errno;

          if (errsv == EAGAIN || errsv == EWOULDBLOCK)
            return TRUE;
          io_fail (io, errno_to_link_error (io, "reading", errsv));
          return FALSE;
        }
      if (msg.msg_controllen > 0 && !take_fds (io, &msg))
        return FALSE;
      if (n == 0)
        {
          if (!rlx_link_stream_reader_at_boundary (&io->reader))
            io_fail (io, g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                                      "%s closed the connection in the middle of a frame",
                                      io->peer));
          else
            io_fail (io, g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED,
                                      "%s closed the connection", io->peer));
          return FALSE;
        }

      budget += n;
      /* counted before the frames they complete are pushed */
      rlx_link_mailbox_add_rx (io->mb, n, t1);

      if (direct_len > 0)
        {
          gsize body = MIN ((gsize) n, direct_len);

          if (!rlx_link_stream_reader_body_got (&io->reader, body, &stream_sink, io, &error) ||
              ((gsize) n > body &&
               !rlx_link_stream_reader_feed (&io->reader, io->stage, n - body, &stream_sink,
                                             io, &error)))
            {
              if (error != NULL)
                io_fail (io, g_steal_pointer (&error));
              return FALSE;
            }
        }
      else if (!rlx_link_stream_reader_feed (&io->reader, io->stage, n, &stream_sink, io,
                                             &error))
        {
          if (error != NULL)
            io_fail (io, g_steal_pointer (&error));
          return FALSE;
        }
      if (io->ended)
        return FALSE;
      /* A short read drained the socket (as far as one can tell): back to
       * poll, which wakes us for anything that came since, instead of one
       * more recvmsg that would only say EAGAIN. */
      if ((gsize) n < (direct_len > 0 ? direct_len + 4 : STAGE_SIZE))
        break;
    }
  return !io->paused;
}

static gboolean
lane_in_progress (gpointer reader, guint lane, gsize *bytes, guint64 *seq)
{
  return rlx_link_stream_reader_in_progress (reader, lane, bytes, seq);
}

/* Every RLX_FRAME_CLOCK_TICK_MS while a frame is in progress: a frame
 * kept half-sent past its deadline ends the link (rlx-frame-clock.h). */
static gboolean
on_frame_tick (gpointer user_data)
{
  UnixIo *io = user_data;
  g_autofree char *why = NULL;
  gboolean any;
  gboolean ok = rlx_frame_clocks_tick (io->clocks, g_get_monotonic_time (),
                                       !io->paused && !io->resumed, lane_in_progress,
                                       &io->reader, io->peer, &any, &why);

  io->resumed = FALSE;
  if (ok && any)
    return G_SOURCE_CONTINUE;
  g_clear_pointer (&io->frame_tick, g_source_unref);
  if (!ok)
    {
      /* io_end drops the I/O side's own reference: keep it till here */
      io_ref (io);
      io_fail (io, g_error_new_literal (RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_SLOW, why));
      io_unref (io);
    }
  return G_SOURCE_REMOVE;
}

/* A frame is in progress after a read: time it. */
static void
ensure_frame_tick (UnixIo *io)
{
  gsize bytes;
  guint64 seq;

  if (io->frame_tick != NULL || io->ended ||
      (!rlx_link_stream_reader_in_progress (&io->reader, RLX_LINK_LANE_CONTROL, &bytes, &seq) &&
       !rlx_link_stream_reader_in_progress (&io->reader, RLX_LINK_LANE_BULK, &bytes, &seq)))
    return;
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    rlx_frame_clock_tick (&io->clocks[l], g_get_monotonic_time (), FALSE, 0, 0, TRUE);
  io->frame_tick = g_timeout_source_new (RLX_FRAME_CLOCK_TICK_MS);
  g_source_set_callback (io->frame_tick, on_frame_tick, io, NULL);
  g_source_set_static_name (io->frame_tick, "rlx-unix-link frame deadline");
  g_source_attach (io->frame_tick, io->context);
}

static gboolean
on_readable (GSocket *socket, GIOCondition condition, gpointer user_data)
{
  UnixIo *io = io_ref (user_data);
  gboolean go_on;

  io_sync_config (io);
  /* the frames of this burst reach the main context with one wake-up */
  rlx_link_mailbox_hold (io->mb);
  go_on = read_some (io);
  ensure_frame_tick (io);
  rlx_link_mailbox_release (io->mb);
  if (!go_on)
    g_clear_pointer (&io->read_source, g_source_unref);
  io_unref (io);
  return go_on ? G_SOURCE_CONTINUE : G_SOURCE_REMOVE;
}

/* ── writing ─────────────────────────────────────────────────────────── */

static void
ensure_write_source (UnixIo *io)
{
  if (io->write_source != NULL || io->ended)
    return;
  io->write_source = g_socket_create_source (io->socket, G_IO_OUT, NULL);
  g_source_set_callback (io->write_source, G_SOURCE_FUNC (on_writable), io, NULL);
  g_source_set_static_name (io->write_source, "rlx-unix-link write");
  g_source_attach (io->write_source, io->context);
}

static gboolean
queues_empty (UnixIo *io)
{
  return !io->cur_active && g_queue_is_empty (&io->out[0]) && g_queue_is_empty (&io->out[1]);
}

/* The first frame of @lane not yet wholly in records, from the head. */
static GList *
first_unassigned (UnixIo *io, RlxLinkLane lane)
{
  for (GList *l = io->out[lane].head; l != NULL; l = l->next)
    if (!((OutFrame *) l->data)->all_assigned)
      return l;
  return NULL;
}

/* The next record of @lane from frame @f (not wholly assigned). */
static void
plan_record (Rec *r, RlxLinkLane lane, OutFrame *f)
{
  memset (r, 0, sizeof *r);
  r->lane = lane;
  r->f = f;
  if (f->ring)
    {
      r->ring = TRUE;
      r->last = TRUE;
      r->body_len = RLX_LINK_STREAM_RING_OP_LEN;
      memcpy (r->hdr, f->ring_rec, 4);
      return;
    }
  if (f->fd >= 0)
    {
      r->shm = TRUE;
      r->last = TRUE;
      rlx_link_stream_put_word (r->hdr, lane, f->len, FALSE, TRUE);
      return;
    }
  r->body_off = f->assigned;
  r->body_len = MIN (PIECE, f->len - f->assigned);
  r->last = f->assigned + r->body_len == f->len;
  rlx_link_stream_put_word (r->hdr, lane, r->body_len, !r->last, FALSE);
}

static void
assign (Rec *r)
{
  r->f->assigned = r->body_off + r->body_len;
  if (r->last)
    r->f->all_assigned = TRUE;
}

/* The record @r has been written in full. */
static void
record_done (UnixIo *io, Rec *r)
{
  if (r->last)
    {
      OutFrame *head = g_queue_pop_head (&io->out[r->lane]);

      g_assert (head == r->f);
      rlx_trace ("IO.tx", head->len);
      out_frame_free (head);
    }
}

/* Progress of one sendmsg. */
typedef struct {
  guint64 frame_bytes[RLX_LINK_N_LANES];
  guint   frames_done[RLX_LINK_N_LANES];
  guint64 wire;
} Progress;

static void
report_progress (UnixIo *io, Progress *p)
{
  /* the wire bytes go with the first lane that moved (they are one total) */
  gboolean wire_sent = FALSE;

  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    if (p->frame_bytes[l] > 0 || p->frames_done[l] > 0)
      {
        rlx_link_mailbox_add_tx (io->mb, l, p->frame_bytes[l], wire_sent ? 0 : p->wire,
                                 p->frames_done[l]);
        wire_sent = TRUE;
      }
  if (!wire_sent && p->wire > 0)
    rlx_link_mailbox_add_tx (io->mb, RLX_LINK_LANE_BULK, 0, p->wire, 0);
}

/* Write as much as the socket takes (up to the budget). */
static void
io_flush (UnixIo *io)
{
  gsize budget = 0;
  Progress progress;

  if (io->ended)
    return;

  while (!queues_empty (io) && budget < DISPATCH_BUDGET)
    {
      Rec recs[MAX_IOV / 2];
      struct iovec iov[MAX_IOV];
      guint n_rec = 0, n_iov = 0;
      union {
        struct cmsghdr align;
        char buf[CMSG_SPACE (sizeof (int))];
      } control;
      struct msghdr msg = { 0 };
      GList *next[RLX_LINK_N_LANES];
      gsize planned = 0;
      gssize n;
      gint64 t0;

      /* The record already on the wire goes on first. */
      if (io->cur_active)
        recs[n_rec++] = io->cur;
      /* Then new records, control lane first at every record. Planning
       * assigns body bytes; what the kernel does not take is handed back
       * below. */
      next[0] = first_unassigned (io, RLX_LINK_LANE_CONTROL);
      next[1] = first_unassigned (io, RLX_LINK_LANE_BULK);
      while (n_rec < G_N_ELEMENTS (recs) && planned < DISPATCH_BUDGET)
        {
          RlxLinkLane lane = next[0] ? RLX_LINK_LANE_CONTROL : RLX_LINK_LANE_BULK;
          OutFrame *f;
          Rec *r;

          if (next[lane] == NULL)
            break;
          f = next[lane]->data;
          /* An fd attaches to the first byte of a sendmsg: SHM records
           * start a batch of their own. */
          if (f->fd >= 0 && n_rec > 0)
            break;
          r = &recs[n_rec++];
          plan_record (r, lane, f);
          assign (r);
          planned += 4 + r->body_len;
          if (f->all_assigned)
            next[lane] = next[lane]->next;
          if (r->shm || f->fd >= 0)
            break;
        }

      for (guint i = 0; i < n_rec; i++)
        {
          Rec *r = &recs[i];

          if (r->done < 4)
            {
              iov[n_iov].iov_base = r->hdr + r->done;
              iov[n_iov].iov_len = 4 - r->done;
              n_iov++;
            }
          if (r->body_len > 0)
            {
              gsize from = r->done > 4 ? r->done - 4 : 0;

              iov[n_iov].iov_base = (r->ring ? r->f->ring_rec + 4 :
                                     (guint8 *) g_bytes_get_data (r->f->bytes, NULL) +
                                     r->body_off) + from;
              iov[n_iov].iov_len = r->body_len - from;
              n_iov++;
            }
        }
      msg.msg_iov = iov;
      msg.msg_iovlen = n_iov;
      if (recs[0].f->fd >= 0 && recs[0].done == 0)
        {
          struct cmsghdr *c;

          msg.msg_control = control.buf;
          msg.msg_controllen = sizeof control.buf;
          c = CMSG_FIRSTHDR (&msg);
          c->cmsg_level = SOL_SOCKET;
          c->cmsg_type = SCM_RIGHTS;
          c->cmsg_len = CMSG_LEN (sizeof (int));
          memcpy (CMSG_DATA (c), &recs[0].f->fd, sizeof (int));
        }

      t0 = g_get_monotonic_time ();
      do
        n = sendmsg (io->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      while (n < 0 && errno == EINTR);
      rlx_link_mailbox_add_io_us (io->mb, g_get_monotonic_time () - t0);
      if (n < 0)
        {
          int errsv = errno;

          n = 0;
          if (errsv != EAGAIN && errsv != EWOULDBLOCK)
            {
              io_fail (io, errno_to_link_error (io, "writing", errsv));
              return;
            }
        }

      budget += n;
      progress.wire = n;
      memset (progress.frame_bytes, 0, sizeof progress.frame_bytes);
      memset (progress.frames_done, 0, sizeof progress.frames_done);
      io->cur_active = FALSE;
      {
        guint unstarted = n_rec;

        for (guint i = 0; i < n_rec; i++)
          {
            Rec *r = &recs[i];
            gsize size = 4 + r->body_len;
            gsize take = MIN ((gsize) n, size - r->done);
            gsize before = r->done > 4 ? r->done - 4 : 0;
            gsize after;

            r->done += take;
            n -= take;
            after = r->done > 4 ? r->done - 4 : 0;
            if (!r->ring)
              progress.frame_bytes[r->lane] += after - before;
            if (r->done == size)
              {
                if (r->shm || (r->ring && r->f->is_frame))
                  {
                    /* the frame's bytes did move: count them */
                    progress.frame_bytes[r->lane] += r->f->len;
                    progress.wire += r->f->len;
                  }
                if (r->last && (!r->ring || r->f->is_frame))
                  progress.frames_done[r->lane]++;
                record_done (io, r);
                continue;
              }
            if (r->done > 0)
              {
                /* on the wire in part: it is finished first next time */
                io->cur = *r;
                io->cur_active = TRUE;
                unstarted = i + 1;
              }
            else
              unstarted = i;
            break;
          }
        /* at once, so pending_bytes follows every write */
        report_progress (io, &progress);
        /* Records the kernel did not start give their bytes back to their
         * frames (latest first, so each frame ends at its earliest one); the
         * next batch plans afresh, a control frame queued meanwhile first. */
        for (guint j = n_rec; j > unstarted; j--)
          {
            Rec *r = &recs[j - 1];

            r->f->assigned = r->body_off;
            r->f->all_assigned = FALSE;
          }
        /* the socket took less than offered: wait until it drains */
        if (unstarted < n_rec || io->cur_active)
          break;
      }
    }

  if (queues_empty (io))
    clear_source (&io->write_source);
  else
    ensure_write_source (io);

  /* closed by this node: everything queued went out */
  if (io->closing && queues_empty (io))
    io_end (io);
}

static gboolean
on_writable (GSocket *socket, GIOCondition condition, gpointer user_data)
{
  UnixIo *io = io_ref (user_data);
  gboolean go_on;

  io_flush (io);
  go_on = io->write_source != NULL;
  if (!go_on)
    {
      io_unref (io);
      return G_SOURCE_REMOVE;
    }
  io_unref (io);
  return G_SOURCE_CONTINUE;
}

static gboolean
on_linger_timeout (gpointer user_data)
{
  UnixIo *io = io_ref (user_data);

  g_clear_pointer (&io->linger_source, g_source_unref);
  io_end (io);
  io_unref (io);
  return G_SOURCE_REMOVE;
}

/* ── shared memory ───────────────────────────────────────────────────── */

/* A sealed memfd holding @frame; -1 (and the socket carries it) when the
 * kernel refuses. */
static int
frame_to_memfd (GBytes *frame)
{
  gsize len;
  const guint8 *data = g_bytes_get_data (frame, &len);
  gsize off = 0;
  int fd = memfd_create ("rlx-frame", MFD_CLOEXEC | MFD_ALLOW_SEALING);

  if (fd < 0)
    return -1;
  while (off < len)
    {
      gssize n = write (fd, data + off, len - off);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        {
          close (fd);
          return -1;
        }
      off += n;
    }
  if (fcntl (fd, F_ADD_SEALS, REQUIRED_SEALS | F_SEAL_SEAL) != 0)
    {
      close (fd);
      return -1;
    }
  return fd;
}

/* ── the I/O side's wake-up: frames to send, a close, room in the inbox ─ */

static void
take_frames (UnixIo *io)
{
  GQueue in[RLX_LINK_N_LANES] = { G_QUEUE_INIT, G_QUEUE_INIT };

  rlx_link_mailbox_take (io->mb, in);
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    {
      GBytes *frame;

      while ((frame = g_queue_pop_head (&in[l])) != NULL)
        {
          OutFrame *f = g_new0 (OutFrame, 1);

          f->len = g_bytes_get_size (frame);
          f->fd = -1;
          if (l == RLX_LINK_LANE_BULK && io->ring_min > 0 && f->len >= io->ring_min &&
              frame_to_ring (io, frame))
            {
              /* its FRAME record is queued in its place */
              g_bytes_unref (frame);
              g_free (f);
              continue;
            }
          if (l == RLX_LINK_LANE_BULK && io->shm_min > 0 && f->len >= io->shm_min &&
              f->len <= RLX_LINK_STREAM_LEN_MASK)
            f->fd = frame_to_memfd (frame);
          if (f->fd < 0)
            f->bytes = frame;
          else
            g_bytes_unref (frame);
          g_queue_push_tail (&io->out[l], f);
        }
    }
}

static void
on_io_wake (gpointer data)
{
  UnixIo *io = io_ref (data);
  RlxLinkMailboxClose how;

  io_sync_config (io);
  /* Frames queued before a close still go out: take them first. */
  take_frames (io);
  how = rlx_link_mailbox_get_close (io->mb);
  if (how == RLX_LINK_MAILBOX_CLOSE_ABORT || (how != RLX_LINK_MAILBOX_OPEN && !io->closing))
    {
      /* Stop reading at once; flush what was queued in the background for
       * up to LINGER_MS (a bye), then close. */
      io->closing = TRUE;
      stop_reading (io);
      rlx_link_stream_reader_clear (&io->reader);
      close_rx_fds (io);
      if (how == RLX_LINK_MAILBOX_CLOSE_ABORT || queues_empty (io))
        {
          io_end (io);
          io_unref (io);
          return;
        }
      if (io->linger_source == NULL)
        {
          io->linger_source = g_timeout_source_new (LINGER_MS);
          g_source_set_callback (io->linger_source, on_linger_timeout, io, NULL);
          g_source_set_static_name (io->linger_source, "rlx-unix-link linger");
          g_source_attach (io->linger_source, io->context);
        }
    }
  if (io->paused && !rlx_link_mailbox_inbox_full (io->mb))
    {
      io->paused = FALSE;
      io->resumed = TRUE;
      start_reading (io);
    }
  /* Only write straight away when nothing is waiting for the socket to
   * drain: otherwise the write source will pick the new frames up. */
  if (io->write_source == NULL)
    io_flush (io);
  io_unref (io);
}

/* ── RlxLink ─────────────────────────────────────────────────────────── */

static const char *
peer_name (RlxUnixLink *self)
{
  const char *peer = rlx_link_get_peer (RLX_LINK (self));

  return peer ? peer : "peer";
}

static gboolean
rlx_unix_link_send_lane (RlxLink *link, RlxLinkLane lane, GBytes *frame, GError **error)
{
  RlxUnixLink *self = RLX_UNIX_LINK (link);
  gsize len = g_bytes_get_size (frame);

  if (len > self->max_frame)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE,
                   "frame of %" G_GSIZE_FORMAT " bytes is over the cap of %" G_GSIZE_FORMAT
                   " bytes of the link to %s; not sent", len, self->max_frame, peer_name (self));
      return FALSE;
    }
  return rlx_link_mailbox_send (self->mb, lane, frame, error);
}

static gboolean
rlx_unix_link_send (RlxLink *link, GBytes *frame, GError **error)
{
  return rlx_unix_link_send_lane (link, RLX_LINK_LANE_BULK, frame, error);
}

static void
rlx_unix_link_close (RlxLink *link)
{
  RlxUnixLink *self = RLX_UNIX_LINK (link);
  g_autoptr(GError) error = NULL;

  rlx_link_mailbox_close (self->mb, RLX_LINK_MAILBOX_CLOSE_FLUSH);
  error = g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED, "link to %s closed by this node",
                       peer_name (self));
  rlx_link_emit_closed (link, error);
}

static gsize
rlx_unix_link_pending_bytes (RlxLink *link)
{
  RlxUnixLink *self = RLX_UNIX_LINK (link);

  return rlx_link_mailbox_pending (self->mb, RLX_LINK_LANE_CONTROL) +
         rlx_link_mailbox_pending (self->mb, RLX_LINK_LANE_BULK);
}

static gsize
rlx_unix_link_pending_bytes_lane (RlxLink *link, RlxLinkLane lane)
{
  return rlx_link_mailbox_pending (RLX_UNIX_LINK (link)->mb, lane);
}

static void
rlx_unix_link_dispose (GObject *object)
{
  RlxUnixLink *self = RLX_UNIX_LINK (object);

  if (self->mb != NULL)
    {
      /* Dropped without a close: stop at once (a closed link goes on
       * flushing what it had queued, without us). */
      if (!rlx_link_is_closed (RLX_LINK (self)))
        rlx_link_mailbox_close (self->mb, RLX_LINK_MAILBOX_CLOSE_ABORT);
      rlx_link_mailbox_detach (self->mb);
      g_clear_pointer (&self->mb, rlx_link_mailbox_unref);
    }
  g_clear_pointer (&self->io, io_unref);
  G_OBJECT_CLASS (rlx_unix_link_parent_class)->dispose (object);
}

static void
rlx_unix_link_class_init (RlxUnixLinkClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  RlxLinkClass *link_class = RLX_LINK_CLASS (klass);

  object_class->dispose = rlx_unix_link_dispose;
  link_class->send = rlx_unix_link_send;
  link_class->send_lane = rlx_unix_link_send_lane;
  link_class->close = rlx_unix_link_close;
  link_class->pending_bytes = rlx_unix_link_pending_bytes;
  link_class->pending_bytes_lane = rlx_unix_link_pending_bytes_lane;
}

static void
rlx_unix_link_init (RlxUnixLink *self)
{
}

/* RLX_LINK_SHM: a size in bytes for the smallest frame that goes as a memfd,
 * "0" never; unset: the measured default (never). */
static gsize
shm_min_from_env (void)
{
  const char *env = g_getenv ("RLX_LINK_SHM");
  guint64 v;

  if (env == NULL || *env == '\0')
    return RLX_UNIX_LINK_DEFAULT_SHM_MIN;
  if (g_ascii_string_to_unsigned (env, 10, 0, G_MAXUINT32, &v, NULL))
    return (gsize) v;
  g_warning ("RLX_LINK_SHM=%s is not a byte count (0 turns shared memory off); using the "
             "default of %" G_GSIZE_FORMAT " bytes", env, RLX_UNIX_LINK_DEFAULT_SHM_MIN);
  return RLX_UNIX_LINK_DEFAULT_SHM_MIN;
}

/* RLX_LINK_RING: a size in bytes for the smallest frame that goes through the
 * shared ring, "0" never; unset: the measured default. */
static gsize
ring_min_from_env (void)
{
  const char *env = g_getenv ("RLX_LINK_RING");
  guint64 v;

  if (env == NULL || *env == '\0')
    return RLX_UNIX_LINK_DEFAULT_RING_MIN;
  if (g_ascii_string_to_unsigned (env, 10, 0, G_MAXUINT32, &v, NULL))
    return (gsize) v;
  g_warning ("RLX_LINK_RING=%s is not a byte count (0 turns the shared ring off); using the "
             "default of %" G_GSIZE_FORMAT " bytes", env, RLX_UNIX_LINK_DEFAULT_RING_MIN);
  return RLX_UNIX_LINK_DEFAULT_RING_MIN;
}

/* RLX_LINK_IO: "shared" (one I/O thread for every link of the process) or
 * "link" (a thread per link); unset: the measured default. NULL and
 * @error when the thread cannot be started (out of descriptors). */
static RlxIoThread *
io_thread_from_env (const char *peer, GError **error)
{
  g_autoptr(GError) local_error = NULL;
  RlxIoThread *thread;
  const char *env = g_getenv ("RLX_LINK_IO");
  gboolean shared = RLX_UNIX_LINK_DEFAULT_IO_SHARED;

  if (g_strcmp0 (env, "shared") == 0)
    shared = TRUE;
  else if (g_strcmp0 (env, "link") == 0)
    shared = FALSE;
  else if (env != NULL && *env != '\0')
    g_warning ("RLX_LINK_IO=%s is neither \"shared\" nor \"link\"; using the default (%s)", env,
               shared ? "shared" : "link");
  thread = shared ? rlx_io_thread_get_shared (&local_error)
                  : rlx_io_thread_try_new ("rlx-link-io", &local_error);
  if (thread == NULL)
    g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED, "cannot set up the link to %s: %s",
                 peer, local_error->message);
  return thread;
}

static gboolean
check_peer_uid (GSocket *socket, const char *peer, GError **error)
{
  g_autoptr(GError) local_error = NULL;
  g_autoptr(GCredentials) creds = g_socket_get_credentials (socket, &local_error);
  uid_t uid;

  if (creds == NULL)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED,
                   "cannot read the credentials of %s: %s", peer, local_error->message);
      return FALSE;
    }
  uid = g_credentials_get_unix_user (creds, &local_error);
  if (uid == (uid_t) -1)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED,
                   "cannot read the uid of %s: %s", peer, local_error->message);
      return FALSE;
    }
  if (uid != getuid ())
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PERMISSION,
                   "%s belongs to uid %u, not to this user (uid %u); refused",
                   peer, (guint) uid, (guint) getuid ());
      return FALSE;
    }
  return TRUE;
}

static void
on_peer_renamed (GObject *object, GParamSpec *pspec, gpointer user_data)
{
  RlxUnixLink *self = RLX_UNIX_LINK (object);

  if (self->io == NULL)
    return;
  g_mutex_lock (&self->io->cfg_lock);
  g_free (self->io->cfg_peer);
  self->io->cfg_peer = g_strdup (peer_name (self));
  self->io->cfg_peer_changed = TRUE;
  g_mutex_unlock (&self->io->cfg_lock);
}

RlxLink *
rlx_unix_link_new (GSocketConnection *connection, const char *peer,
                   gsize max_frame, GError **error)
{
  RlxUnixLink *self;
  GSocket *socket;
  UnixIo *io;

  g_return_val_if_fail (G_IS_SOCKET_CONNECTION (connection), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (peer == NULL)
    peer = "unix peer";
  if (max_frame == 0)
    max_frame = RLX_UNIX_LINK_DEFAULT_MAX_FRAME;
  /* The prefix is a u32. */
  max_frame = MIN (max_frame, (gsize) G_MAXUINT32);

  socket = g_socket_connection_get_socket (connection);
  if (g_socket_get_family (socket) != G_SOCKET_FAMILY_UNIX ||
      g_socket_get_socket_type (socket) != G_SOCKET_TYPE_STREAM)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED,
                   "%s is not a Unix stream socket", peer);
      return NULL;
    }
  if (!check_peer_uid (socket, peer, error))
    return NULL;

  self = g_object_new (RLX_TYPE_UNIX_LINK, NULL);
  self->max_frame = max_frame;
  self->shm_min = shm_min_from_env ();
  self->ring_min = ring_min_from_env ();
  rlx_link_set_peer (RLX_LINK (self), peer);

  g_socket_set_blocking (socket, FALSE);
  /* Bigger buffers mean fewer wakeups per MB; the kernel caps them
   * (net.core.wmem_max) and a smaller one only costs speed. */
  g_socket_set_option (socket, SOL_SOCKET, SO_SNDBUF, SOCKET_BUFFER, NULL);
  g_socket_set_option (socket, SOL_SOCKET, SO_RCVBUF, SOCKET_BUFFER, NULL);

  /* Two references: ours, and the I/O side's own until its socket closes.
   * The I/O thread and the mailbox first: they are what can fail (no fd
   * for a context's wakeup or the eventfds), and
   * nothing wakes the I/O side before this returns. */
  io = g_new0 (UnixIo, 1);
  io->thread = io_thread_from_env (peer, error);
  if (io->thread == NULL)
    {
      g_free (io);
      g_object_unref (self);
      return NULL;
    }
  io->context = g_main_context_ref (rlx_io_thread_get_context (io->thread));
  self->mb = rlx_link_mailbox_new (RLX_LINK (self), io->context, on_io_wake, io, error);
  if (self->mb == NULL)
    {
      g_main_context_unref (io->context);
      rlx_io_thread_unref (io->thread);
      g_free (io);
      g_object_unref (self);
      return NULL;
    }
  g_atomic_ref_count_init (&io->ref);
  g_atomic_ref_count_inc (&io->ref);
  g_mutex_init (&io->cfg_lock);
  io->connection = g_object_ref (connection);
  io->socket = g_object_ref (socket);
  io->fd = g_socket_get_fd (socket);
  io->max_frame = max_frame;
  io->peer = g_strdup (peer);
  io->cfg_peer = g_strdup (peer);
  io->cfg_shm_min = io->shm_min = self->shm_min;
  io->cfg_ring_min = io->ring_min = self->ring_min;
  io->stage = g_malloc (STAGE_SIZE);
  g_queue_init (&io->rx_fds);
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    g_queue_init (&io->out[l]);
  rlx_link_stream_reader_init (&io->reader, max_frame, peer);
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    rlx_frame_clock_init (&io->clocks[l], rlx_frame_clock_grace_from_env ());
  io->pool = rlx_link_stream_pool_new (POOL_BUFFERS, POOL_BYTES);
  io->ring_tx = rlx_ring_tx_new ();
  io->ring_rx = rlx_ring_rx_new (io->context, on_ring_releases, io);
  rlx_link_stream_reader_set_pool (&io->reader, io->pool);
  self->io = io;
  io->mb = rlx_link_mailbox_ref (self->mb);
  g_signal_connect (self, "notify::peer", G_CALLBACK (on_peer_renamed), NULL);

  /* Last: from here on the I/O thread may run. */
  io->read_source = g_socket_create_source (socket, G_IO_IN, NULL);
  g_source_set_callback (io->read_source, G_SOURCE_FUNC (on_readable), io, NULL);
  g_source_set_static_name (io->read_source, "rlx-unix-link read");
  g_source_attach (io->read_source, io->context);

  return RLX_LINK (self);
}

static RlxLink *
link_from_fd (int fd, const char *peer, gsize max_frame, GError **error)
{
  g_autoptr(GSocket) socket = g_socket_new_from_fd (fd, error);
  g_autoptr(GSocketConnection) connection = NULL;

  if (socket == NULL)
    {
      close (fd);
      return NULL;
    }
  connection = g_socket_connection_factory_create_connection (socket);
  return rlx_unix_link_new (connection, peer, max_frame, error);
}

gboolean
rlx_unix_link_new_pair (gsize max_frame, RlxLink **a, RlxLink **b, GError **error)
{
  int fds[2];
  g_autoptr(RlxLink) la = NULL;
  g_autoptr(RlxLink) lb = NULL;

  g_return_val_if_fail (a != NULL && b != NULL, FALSE);

  if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    {
      int errsv = errno;
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED,
                   "socketpair failed: %s", g_strerror (errsv));
      return FALSE;
    }
  la = link_from_fd (fds[0], "socketpair end a", max_frame, error);
  if (la == NULL)
    {
      close (fds[1]);
      return FALSE;
    }
  lb = link_from_fd (fds[1], "socketpair end b", max_frame, error);
  if (lb == NULL)
    return FALSE;
  *a = g_steal_pointer (&la);
  *b = g_steal_pointer (&lb);
  return TRUE;
}

gsize
rlx_unix_link_get_max_frame (RlxUnixLink *self)
{
  g_return_val_if_fail (RLX_IS_UNIX_LINK (self), 0);
  return self->max_frame;
}

void
rlx_unix_link_set_shm_min (RlxUnixLink *self, gsize min_bytes)
{
  g_return_if_fail (RLX_IS_UNIX_LINK (self));
  self->shm_min = min_bytes;
  /* for frames handed over from now on (the I/O side reads it before it
   * takes them) */
  g_mutex_lock (&self->io->cfg_lock);
  self->io->cfg_shm_min = min_bytes;
  g_mutex_unlock (&self->io->cfg_lock);
}

gsize
rlx_unix_link_get_shm_min (RlxUnixLink *self)
{
  g_return_val_if_fail (RLX_IS_UNIX_LINK (self), 0);
  return self->shm_min;
}

void
rlx_unix_link_set_ring_min (RlxUnixLink *self, gsize min_bytes)
{
  g_return_if_fail (RLX_IS_UNIX_LINK (self));
  self->ring_min = min_bytes;
  g_mutex_lock (&self->io->cfg_lock);
  self->io->cfg_ring_min = min_bytes;
  g_mutex_unlock (&self->io->cfg_lock);
}

gsize
rlx_unix_link_get_ring_min (RlxUnixLink *self)
{
  g_return_val_if_fail (RLX_IS_UNIX_LINK (self), 0);
  return self->ring_min;
}

void
rlx_unix_link_get_ring_stats (RlxUnixLink *self, guint *sent, guint *received, guint *fallbacks)
{
  g_return_if_fail (RLX_IS_UNIX_LINK (self));
  if (sent)
    *sent = g_atomic_int_get (&self->io->ring_frames_tx);
  if (received)
    *received = g_atomic_int_get (&self->io->ring_frames_rx);
  if (fallbacks)
    *fallbacks = g_atomic_int_get (&self->io->ring_fallbacks);
}
