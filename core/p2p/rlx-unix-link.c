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
 */
#include "rlx-config.h"
#include "rlx-unix-link.h"
#include "rlx-io-thread.h"
#include "rlx-link-mailbox.h"
#include "rlx-link-stream.h"
#include "rlx-trace.h"
#include "core/util/rlx-par-copy.h"

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
/* The shared ring: sized for RING_FRAMES frames of the size that made it
 * (a round's bucket or update held while the next arrives, one in the
 * inbox), a power of two within [RING_MIN_SIZE, RING_MAX_SIZE]; a frame
 * larger than the largest ring can hold that many of goes through the
 * socket. */
#define RING_FRAMES       3
#define RING_ALIGN        ((gsize) 64)
#define RING_MIN_SIZE     ((gsize) 4 << 20)
#define RING_MAX_SIZE     ((gsize) 256 << 20)
/* Rings a side keeps: its current one plus retired ones whose frames the
 * peer still holds (sending), or mapped from the peer (receiving). */
#define MAX_RINGS         4
#define RING_SEALS        (F_SEAL_SHRINK | F_SEAL_GROW)

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

/* A block of a sending ring: a frame the peer may still be reading. */
typedef struct {
  gsize    off;
  gsize    len;
  gboolean released;
} RingBlock;

/* Our shared ring (I/O thread only): a memfd mapped here read-write and by
 * the peer read-only. Frames are placed first-in first-out; the peer
 * releases each when its frame is freed. */
typedef struct {
  guint32  id;
  guint8  *addr;
  gsize    size;
  gsize    head;      /* where the next block starts */
  GQueue   blocks;    /* RingBlock*, oldest first */
  gboolean retired;   /* no new frames; freed once every block is released */
} TxRing;

/* A ring the peer shared with us, mapped read-only. Each frame received in
 * it holds a reference, so it outlives the link while anyone holds one. */
typedef struct {
  gatomicrefcount ref;
  guint32         id;
  guint8         *addr;
  gsize           size;
} RxRing;

/* Releases of frames received in the peer's rings, from whichever thread
 * frees them, to the I/O thread. */
typedef struct {
  gatomicrefcount ref;
  GMutex          lock;
  gpointer        io;         /* UnixIo *, NULL once the I/O side ended */
  GMainContext   *context;
  GArray         *pending;    /* RlxLinkRingOp (RELEASE) */
  gboolean        scheduled;  /* an idle source will take them */
} RingReleases;

/* What a frame received in a ring holds. */
typedef struct {
  RxRing       *ring;
  RingReleases *rel;
  guint64       off;
} RingHold;

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
  gboolean            closing;        /* the main side closed the link */
  gboolean            ended;          /* socket closed, nothing more happens */

  /* read state */
  guint8             *stage;
  RlxLinkStreamReader reader;
  RlxLinkStreamPool  *pool;
  GQueue              rx_fds;          /* GINT_TO_POINTER (fd + 1) */
  RxRing             *rx_rings[MAX_RINGS];
  RingReleases       *rel;

  /* write state */
  GQueue              out[RLX_LINK_N_LANES];   /* OutFrame*, oldest first */
  gsize               shm_min;
  gsize               ring_min;
  gboolean            ring_broken;     /* the kernel refused a ring: socket only */
  TxRing             *tx_rings[MAX_RINGS];   /* [0]: the current one, or NULL */
  guint32             next_ring_id;
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
  g_assert (io->read_source == NULL && io->write_source == NULL && io->linger_source == NULL);
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


/* ── the shared ring ─────────────────────────────────────────────────── *
 *
 * Bulk frames of at least ring_min bytes are copied once into a memfd this
 * side made, which both sides keep mapped for the link's life (so neither
 * pays a page fault per frame, which is what sank a memfd per frame), and
 * only a FRAME record {ring, offset, length} crosses the socket. The
 * receiver hands the frame out as GBytes over its read-only mapping, with no
 * copy; freeing them sends RELEASE, and only then may the sender reuse those
 * bytes. When the ring has no room (the peer holds its frames) a frame goes
 * through the socket as before: nothing ever waits for ring space. The
 * receiver trusts nothing: the fd must be a memfd sealed against shrinking
 * and growing (so its mapping never faults), of the announced size; a frame
 * must lie inside a ring it has; a release must name a block this side
 * sent. The ring is not sealed against writing (it is reused): both ends
 * are one user's (check_peer_uid), and what a sender could do by rewriting
 * a frame it has sent, it could do by sending other bytes — a replica that
 * diverged is caught by the cohort's hashes (docs/PROTOCOL.md). */

static void
tx_ring_free (TxRing *t)
{
  g_queue_clear_full (&t->blocks, g_free);
  if (t->addr != NULL)
    munmap (t->addr, t->size);
  g_free (t);
}

static void
rx_ring_unref (RxRing *r)
{
  if (!g_atomic_ref_count_dec (&r->ref))
    return;
  munmap (r->addr, r->size);
  g_free (r);
}

static RingReleases *
ring_releases_ref (RingReleases *rel)
{
  g_atomic_ref_count_inc (&rel->ref);
  return rel;
}

static void
ring_releases_unref (gpointer data)
{
  RingReleases *rel = data;

  if (!g_atomic_ref_count_dec (&rel->ref))
    return;
  g_array_unref (rel->pending);
  g_main_context_unref (rel->context);
  g_mutex_clear (&rel->lock);
  g_free (rel);
}

/* The I/O side ends: every ring goes (a frame received in one keeps its
 * mapping until it is freed); releases from now on are dropped. */
static void
rings_end (UnixIo *io)
{
  for (guint i = 0; i < MAX_RINGS; i++)
    {
      g_clear_pointer (&io->tx_rings[i], tx_ring_free);
      g_clear_pointer (&io->rx_rings[i], rx_ring_unref);
    }
  if (io->rel != NULL)
    {
      g_mutex_lock (&io->rel->lock);
      io->rel->io = NULL;
      g_mutex_unlock (&io->rel->lock);
      g_clear_pointer (&io->rel, ring_releases_unref);
    }
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

/* A new sending ring of @size bytes, mapped here; its fd goes out with
 * ATTACH. NULL (and no ring on this link from now on) when the kernel
 * refuses. */
static TxRing *
tx_ring_new (UnixIo *io, gsize size)
{
  int fd = memfd_create ("rlx-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  RlxLinkRingOp op = { RLX_LINK_RING_ATTACH, 0, size, 0 };
  TxRing *t;
  void *addr;

  if (fd < 0)
    goto fail;
  if (ftruncate (fd, size) != 0 || fcntl (fd, F_ADD_SEALS, RING_SEALS | F_SEAL_SEAL) != 0)
    goto fail;
  addr = mmap (NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (addr == MAP_FAILED)
    goto fail;
  t = g_new0 (TxRing, 1);
  t->id = op.ring = ++io->next_ring_id;
  t->addr = addr;
  t->size = size;
  g_queue_init (&t->blocks);
  queue_ring_op (io, &op, fd);
  return t;

fail:
  g_debug ("no shared ring of %" G_GSIZE_FORMAT " bytes for %s: %s; frames go through the "
           "socket", size, io->peer, g_strerror (errno));
  if (fd >= 0)
    close (fd);
  io->ring_broken = TRUE;
  return NULL;
}

/* Room for @len bytes (aligned) in @t, first-in first-out: after the newest
 * block, or from the start when the end is too short and the oldest block
 * leaves enough before it. */
static gboolean
tx_ring_alloc (TxRing *t, gsize len, gsize *off)
{
  RingBlock *b;
  gsize tail;

  len = MAX (RING_ALIGN, (len + RING_ALIGN - 1) & ~(RING_ALIGN - 1));
  if (g_queue_is_empty (&t->blocks))
    t->head = 0;
  tail = g_queue_is_empty (&t->blocks) ? 0 : ((RingBlock *) g_queue_peek_head (&t->blocks))->off;
  if (g_queue_is_empty (&t->blocks) || t->head > tail)
    {
      if (t->size - t->head >= len)
        *off = t->head;
      else if (tail >= len)
        *off = 0;
      else
        return FALSE;
    }
  else if (tail - t->head >= len)
    *off = t->head;
  else
    return FALSE;
  b = g_new (RingBlock, 1);
  b->off = *off;
  b->len = len;
  b->released = FALSE;
  g_queue_push_tail (&t->blocks, b);
  t->head = *off + len;
  return TRUE;
}

/* The current sending ring, made (or replaced by a larger one) for frames of
 * @len bytes; NULL when they go through the socket. */
static TxRing *
tx_ring_for (UnixIo *io, gsize len)
{
  gsize need = RING_FRAMES * ((len + RING_ALIGN - 1) & ~(RING_ALIGN - 1));
  gsize want = RING_MIN_SIZE;
  guint free_slot = MAX_RINGS;

  /* a power of two: frames a little larger than the last do not make a
   * new ring each time */
  while (want < need && want <= RING_MAX_SIZE)
    want *= 2;
  if (io->ring_broken || want > RING_MAX_SIZE)
    return NULL;
  if (io->tx_rings[0] != NULL && io->tx_rings[0]->size >= want)
    return io->tx_rings[0];
  for (guint i = 1; i < MAX_RINGS; i++)
    if (io->tx_rings[i] == NULL)
      free_slot = i;
  if (io->tx_rings[0] != NULL)
    {
      /* Retire the ring that is too small: the peer unmaps it once the
       * frames it holds are freed; we keep it until they are released. */
      RlxLinkRingOp op = { RLX_LINK_RING_DETACH, io->tx_rings[0]->id, 0, 0 };

      if (free_slot == MAX_RINGS && !g_queue_is_empty (&io->tx_rings[0]->blocks))
        return NULL;   /* too many retired rings still held: wait */
      queue_ring_op (io, &op, -1);
      if (g_queue_is_empty (&io->tx_rings[0]->blocks))
        tx_ring_free (io->tx_rings[0]);
      else
        {
          io->tx_rings[0]->retired = TRUE;
          io->tx_rings[free_slot] = io->tx_rings[0];
        }
      io->tx_rings[0] = NULL;
    }
  io->tx_rings[0] = tx_ring_new (io, want);
  return io->tx_rings[0];
}

/* Put bulk frame @frame into the ring and queue its FRAME record. FALSE:
 * it goes another way (no ring, or no room while the peer holds frames). */
static gboolean
frame_to_ring (UnixIo *io, GBytes *frame)
{
  gsize len;
  const guint8 *data = g_bytes_get_data (frame, &len);
  TxRing *t = tx_ring_for (io, len);
  RlxLinkRingOp op = { RLX_LINK_RING_FRAME, 0, 0, len };
  OutFrame *f;
  gsize off;

  if (t == NULL || !tx_ring_alloc (t, len, &off))
    {
      g_atomic_int_inc (&io->ring_fallbacks);
      return FALSE;
    }
  /* the one copy of the frame: in pieces when it is large (rlx-par-copy.h) */
  rlx_par_copy (t->addr + off, data, len);
  op.ring = t->id;
  op.a = off;
  f = queue_ring_op (io, &op, -1);
  /* the FRAME record stands for the frame: counted as one when written */
  f->is_frame = TRUE;
  f->len = len;
  g_atomic_int_inc (&io->ring_frames_tx);
  return TRUE;
}

/* The peer released the frame at @off of our ring @id. */
static gboolean
tx_ring_release (UnixIo *io, guint32 id, guint64 off, GError **error)
{
  for (guint i = 0; i < MAX_RINGS; i++)
    {
      TxRing *t = io->tx_rings[i];

      if (t == NULL || t->id != id)
        continue;
      for (GList *l = t->blocks.head; l != NULL; l = l->next)
        {
          RingBlock *b = l->data;

          if (b->off != off || b->released)
            continue;
          b->released = TRUE;
          while (!g_queue_is_empty (&t->blocks) &&
                 ((RingBlock *) g_queue_peek_head (&t->blocks))->released)
            g_free (g_queue_pop_head (&t->blocks));
          if (t->retired && g_queue_is_empty (&t->blocks))
            g_clear_pointer (&io->tx_rings[i], tx_ring_free);
          return TRUE;
        }
      break;
    }
  g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
               "%s released a shared-ring frame it was not sent (ring %u, offset %"
               G_GUINT64_FORMAT "); link closed", io->peer, id, off);
  return FALSE;
}

/* On the I/O thread: the releases other threads collected go out. */
static gboolean
on_ring_releases (gpointer data)
{
  RingReleases *rel = data;
  g_autoptr(GArray) ops = NULL;
  UnixIo *io;

  g_mutex_lock (&rel->lock);
  rel->scheduled = FALSE;
  io = rel->io;
  ops = rel->pending;
  rel->pending = g_array_new (FALSE, FALSE, sizeof (RlxLinkRingOp));
  g_mutex_unlock (&rel->lock);
  /* io_end, on this thread, clears rel->io: a set one is alive */
  if (io == NULL)
    return G_SOURCE_REMOVE;
  for (guint i = 0; i < ops->len; i++)
    queue_ring_op (io, &g_array_index (ops, RlxLinkRingOp, i), -1);
  if (io->write_source == NULL)
    io_flush (io);
  return G_SOURCE_REMOVE;
}

/* A frame received in a ring was freed (any thread). */
static void
ring_hold_free (gpointer data)
{
  RingHold *h = data;
  RingReleases *rel = h->rel;
  RlxLinkRingOp op = { RLX_LINK_RING_RELEASE, h->ring->id, h->off, 0 };

  g_mutex_lock (&rel->lock);
  if (rel->io != NULL)
    {
      g_array_append_val (rel->pending, op);
      if (!rel->scheduled)
        {
          GSource *src = g_idle_source_new ();

          rel->scheduled = TRUE;
          g_source_set_priority (src, G_PRIORITY_HIGH);
          g_source_set_callback (src, on_ring_releases, ring_releases_ref (rel),
                                 ring_releases_unref);
          g_source_set_static_name (src, "rlx-unix-link ring releases");
          g_source_attach (src, rel->context);
          g_source_unref (src);
        }
    }
  g_mutex_unlock (&rel->lock);
  rx_ring_unref (h->ring);
  ring_releases_unref (rel);
  g_free (h);
}

static RxRing **
rx_ring_slot (UnixIo *io, guint32 id)
{
  for (guint i = 0; i < MAX_RINGS; i++)
    if (io->rx_rings[i] != NULL && io->rx_rings[i]->id == id)
      return &io->rx_rings[i];
  return NULL;
}

/* ATTACH: map the peer's ring, after checking its fd. */
static gboolean
rx_ring_attach (UnixIo *io, const RlxLinkRingOp *op, GError **error)
{
  gpointer p = g_queue_pop_head (&io->rx_fds);
  int fd = p ? GPOINTER_TO_INT (p) - 1 : -1;
  RxRing **slot = NULL;
  struct stat st;
  int seals;
  void *addr;
  const char *bad = NULL;

  for (guint i = 0; i < MAX_RINGS && slot == NULL; i++)
    if (io->rx_rings[i] == NULL)
      slot = &io->rx_rings[i];
  if (fd < 0)
    bad = "without its file descriptor";
  else if (rx_ring_slot (io, op->ring) != NULL)
    bad = "whose id is already attached";
  else if (slot == NULL)
    bad = "beyond the rings a link may hold";
  else if (op->a == 0 || op->a > RING_MAX_SIZE)
    bad = "of a size outside 1 byte to 256 MiB";
  else if (fstat (fd, &st) != 0 || !S_ISREG (st.st_mode))
    bad = "whose file descriptor is not a memfd";
  else if ((seals = fcntl (fd, F_GET_SEALS)) < 0 || (seals & RING_SEALS) != RING_SEALS)
    bad = "not sealed against resizing";
  else if (st.st_size < 0 || (guint64) st.st_size != op->a)
    bad = "whose memfd is not of the announced size";
  if (bad != NULL)
    {
      if (fd >= 0)
        close (fd);
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                   "%s attached a shared ring %s (ring %u, %" G_GUINT64_FORMAT " bytes); link "
                   "closed", io->peer, bad, op->ring, op->a);
      return FALSE;
    }
  addr = mmap (NULL, op->a, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  close (fd);
  if (addr == MAP_FAILED)
    {
      int errsv = errno;
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED,
                   "cannot map the shared ring of %" G_GUINT64_FORMAT " bytes from %s: %s",
                   op->a, io->peer, g_strerror (errsv));
      return FALSE;
    }
  *slot = g_new0 (RxRing, 1);
  g_atomic_ref_count_init (&(*slot)->ref);
  (*slot)->id = op->ring;
  (*slot)->addr = addr;
  (*slot)->size = op->a;
  if (io->rel == NULL)
    {
      io->rel = g_new0 (RingReleases, 1);
      g_atomic_ref_count_init (&io->rel->ref);
      g_mutex_init (&io->rel->lock);
      io->rel->io = io;
      io->rel->context = g_main_context_ref (io->context);
      io->rel->pending = g_array_new (FALSE, FALSE, sizeof (RlxLinkRingOp));
    }
  return TRUE;
}

static gboolean
sink_ring (gpointer user_data, const RlxLinkRingOp *op)
{
  UnixIo *io = user_data;
  g_autoptr(GError) error = NULL;
  RxRing **slot;

  switch (op->kind)
    {
    case RLX_LINK_RING_ATTACH:
      if (!rx_ring_attach (io, op, &error))
        break;
      return TRUE;
    case RLX_LINK_RING_RELEASE:
      if (!tx_ring_release (io, op->ring, op->a, &error))
        break;
      return TRUE;
    case RLX_LINK_RING_DETACH:
      slot = rx_ring_slot (io, op->ring);
      if (slot == NULL)
        {
          g_set_error (&error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                       "%s retired shared ring %u, which it never attached; link closed",
                       io->peer, op->ring);
          break;
        }
      g_clear_pointer (slot, rx_ring_unref);
      return TRUE;
    case RLX_LINK_RING_FRAME:
      slot = rx_ring_slot (io, op->ring);
      if (slot == NULL || op->a > (*slot)->size || op->b > (*slot)->size - op->a)
        {
          g_set_error (&error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                       "%s sent a frame of %" G_GUINT64_FORMAT " bytes at offset %"
                       G_GUINT64_FORMAT " of shared ring %u, %s; link closed", io->peer, op->b,
                       op->a, op->ring, slot == NULL ? "which it never attached" :
                       "beyond the ring's end");
          break;
        }
      {
        RingHold *h = g_new (RingHold, 1);
        GBytes *frame;

        g_atomic_ref_count_inc (&(*slot)->ref);
        h->ring = *slot;
        h->rel = ring_releases_ref (io->rel);
        h->off = op->a;
        frame = g_bytes_new_with_free_func ((*slot)->addr + op->a, op->b, ring_hold_free, h);
        g_atomic_int_inc (&io->ring_frames_rx);
        rlx_trace ("IO.rx", op->b);
        rlx_link_mailbox_add_rx (io->mb, op->b, g_get_monotonic_time ());
        if (!rlx_link_mailbox_push_frame (io->mb, RLX_LINK_LANE_BULK, frame))
          io->paused = TRUE;
      }
      return TRUE;
    }
  io_fail (io, g_steal_pointer (&error));
  return FALSE;
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
on_readable (GSocket *socket, GIOCondition condition, gpointer user_data)
{
  UnixIo *io = io_ref (user_data);
  gboolean go_on;

  io_sync_config (io);
  /* the frames of this burst reach the main context with one wake-up */
  rlx_link_mailbox_hold (io->mb);
  go_on = read_some (io);
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
 * "link" (a thread per link); unset: the measured default. */
static RlxIoThread *
io_thread_from_env (void)
{
  const char *env = g_getenv ("RLX_LINK_IO");
  gboolean shared = RLX_UNIX_LINK_DEFAULT_IO_SHARED;

  if (g_strcmp0 (env, "shared") == 0)
    shared = TRUE;
  else if (g_strcmp0 (env, "link") == 0)
    shared = FALSE;
  else if (env != NULL && *env != '\0')
    g_warning ("RLX_LINK_IO=%s is neither \"shared\" nor \"link\"; using the default (%s)", env,
               shared ? "shared" : "link");
  return shared ? rlx_io_thread_get_shared () : rlx_io_thread_new ("rlx-link-io");
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
   * The mailbox first: it is what can fail (no fd for its eventfds), and
   * nothing wakes the I/O side before this returns. */
  io = g_new0 (UnixIo, 1);
  io->thread = io_thread_from_env ();
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
  io->pool = rlx_link_stream_pool_new (POOL_BUFFERS, POOL_BYTES);
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
