/* rlx-unix-link.c — RlxLink over a connected Unix stream socket
 *
 * The stream is records (rlx-link-stream.h): each lane's frames go out in
 * pieces of at most PIECE bytes, and whenever the next record is chosen the
 * control lane goes first, so a control frame queued behind a 7 MB bucket
 * waits for one piece, not for the bucket. Records go out with one sendmsg
 * per batch (headers and frame slices as separate iovecs: no copy); bodies of
 * large records are received straight into the frame's buffer, which grows
 * with what arrived (the reader never trusts an announced size).
 *
 * Large bulk frames may travel as a sealed memfd instead (SHM records, the fd
 * passed with SCM_RIGHTS, when RLX_LINK_SHM asks for it): the sender copies
 * the frame into the memfd once, the receiver maps it read-only. Measured, a
 * fresh memfd per frame costs more than the socket's two copies, so it is
 * off by default.
 * Every received fd is checked (a regular shmem file, sealed against writes
 * and shrinking, exactly the announced size) before it is mapped; anything
 * else closes the link.
 */
#include "rlx-config.h"
#include "rlx-unix-link.h"
#include "rlx-link-stream.h"

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
/* Stop reading/writing after this much in one dispatch so other sources on
 * the main context get their turn; the source fires again right away. */
#define DISPATCH_BUDGET   ((gsize) 32 << 20)
#define MAX_IOV           64
#define SOCKET_BUFFER     (4 * 1024 * 1024)
#define LINGER_MS         1000
/* fds a peer may have passed ahead of their SHM records */
#define MAX_PENDING_FDS   8
#define REQUIRED_SEALS    (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

typedef struct {
  GBytes  *bytes;       /* NULL once moved into a memfd */
  gsize    len;         /* frame length */
  gsize    assigned;    /* body bytes put into records that have started */
  gboolean all_assigned;
  int      fd;          /* ≥ 0: goes as one SHM record */
} OutFrame;

/* A record being written: its header and body slice. */
typedef struct {
  RlxLinkLane lane;
  OutFrame   *f;
  gsize       body_off;
  gsize       body_len;
  gboolean    last;
  gboolean    shm;
  guint8      hdr[4];
  gsize       done;      /* bytes of header + body written */
} Rec;

struct _RlxUnixLink
{
  RlxLink            parent_instance;

  GSocketConnection *connection;
  GSocket           *socket;
  int                fd;
  GMainContext      *context;
  gsize              max_frame;
  gsize              shm_min;         /* bulk frames ≥ this go as memfds; 0 never */

  GSource           *read_source;
  GSource           *write_source;
  GSource           *fail_source;     /* deferred failure found while sending */
  GSource           *linger_source;
  GError            *deferred_error;

  /* read state */
  guint8            *stage;
  RlxLinkStreamReader reader;
  GQueue             rx_fds;          /* GINT_TO_POINTER (fd) */

  /* write state */
  GQueue             out[RLX_LINK_N_LANES];   /* OutFrame*, oldest first */
  gsize              pending[RLX_LINK_N_LANES];
  Rec                cur;             /* valid when cur_active */
  gboolean           cur_active;
  gboolean           flushing;
  gboolean           lingering;       /* closed by us, flushing what was queued */
  gboolean           shut;            /* socket closed */
};

G_DEFINE_FINAL_TYPE (RlxUnixLink, rlx_unix_link, RLX_TYPE_LINK)

static gboolean on_readable (GSocket *socket, GIOCondition condition, gpointer user_data);
static gboolean on_writable (GSocket *socket, GIOCondition condition, gpointer user_data);

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
close_rx_fds (RlxUnixLink *self)
{
  gpointer p;

  while ((p = g_queue_pop_head (&self->rx_fds)) != NULL)
    close (GPOINTER_TO_INT (p) - 1);
}

static void
shutdown_socket (RlxUnixLink *self)
{
  clear_source (&self->read_source);
  clear_source (&self->write_source);
  clear_source (&self->linger_source);
  clear_source (&self->fail_source);
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    {
      g_queue_clear_full (&self->out[l], out_frame_free);
      self->pending[l] = 0;
    }
  self->cur_active = FALSE;
  rlx_link_stream_reader_clear (&self->reader);
  close_rx_fds (self);
  if (!self->shut && self->socket != NULL)
    {
      self->shut = TRUE;
      g_socket_close (self->socket, NULL);
    }
}

/* The link failed or the peer went away: tear down and report, once. */
static void
link_fail (RlxUnixLink *self, GError *error)
{
  g_object_ref (self);
  if (self->lingering)
    {
      /* Already reported by close(); the background flush just ends. */
      shutdown_socket (self);
      self->lingering = FALSE;
      g_error_free (error);
      g_object_unref (self);   /* the linger reference */
      g_object_unref (self);
      return;
    }
  shutdown_socket (self);
  rlx_link_emit_closed (RLX_LINK (self), error);
  g_error_free (error);
  g_object_unref (self);
}

static gboolean
on_deferred_fail (gpointer user_data)
{
  RlxUnixLink *self = user_data;
  GError *error = g_steal_pointer (&self->deferred_error);

  g_clear_pointer (&self->fail_source, g_source_unref);
  if (error == NULL)
    error = g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED, "link failed");
  link_fail (self, error);
  return G_SOURCE_REMOVE;
}

static void
link_fail_later (RlxUnixLink *self, GError *error)
{
  if (self->fail_source != NULL)
    {
      g_error_free (error);
      return;
    }
  self->deferred_error = error;
  clear_source (&self->read_source);
  clear_source (&self->write_source);
  self->fail_source = g_idle_source_new ();
  g_source_set_priority (self->fail_source, G_PRIORITY_DEFAULT);
  g_source_set_callback (self->fail_source, on_deferred_fail, self, NULL);
  g_source_set_static_name (self->fail_source, "rlx-unix-link fail");
  g_source_attach (self->fail_source, self->context);
}

static const char *
peer_name (RlxUnixLink *self)
{
  const char *peer = rlx_link_get_peer (RLX_LINK (self));

  return peer ? peer : "peer";
}

static GError *
errno_to_link_error (RlxUnixLink *self, const char *what, int errsv)
{
  if (errsv == EPIPE || errsv == ECONNRESET)
    return g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED,
                        "%s closed the connection", peer_name (self));
  return g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED,
                      "%s to %s failed: %s", what, peer_name (self), g_strerror (errsv));
}

/* ── reading ─────────────────────────────────────────────────────────── */

static gboolean
sink_frame (gpointer user_data, RlxLinkLane lane, GBytes *frame)
{
  RlxUnixLink *self = user_data;

  rlx_link_emit_frame_lane (RLX_LINK (self), lane, frame);
  return self->read_source != NULL;
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
map_shm_frame (RlxUnixLink *self, int fd, gsize size, GError **error)
{
  struct stat st;
  int seals;
  void *addr;
  ShmMapping *m;

  if (fstat (fd, &st) != 0 || !S_ISREG (st.st_mode))
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                   "%s passed a file descriptor that is not a memfd for a shared-memory frame; "
                   "link closed", peer_name (self));
      return NULL;
    }
  seals = fcntl (fd, F_GET_SEALS);
  if (seals < 0 || (seals & REQUIRED_SEALS) != REQUIRED_SEALS)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                   "%s passed a shared-memory frame that is not sealed against writing and "
                   "resizing (seals 0x%x); link closed", peer_name (self), seals < 0 ? 0 : seals);
      return NULL;
    }
  if (st.st_size < 0 || (guint64) st.st_size != size)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                   "%s announced a shared-memory frame of %" G_GSIZE_FORMAT " bytes but passed "
                   "%" G_GINT64_FORMAT " bytes; link closed", peer_name (self), size,
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
                   size, peer_name (self), g_strerror (errsv));
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
  RlxUnixLink *self = user_data;
  gpointer p = g_queue_pop_head (&self->rx_fds);
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) frame = NULL;
  int fd;

  if (p == NULL)
    {
      link_fail (self, g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                                    "%s sent a shared-memory record without its file "
                                    "descriptor; link closed", peer_name (self)));
      return FALSE;
    }
  fd = GPOINTER_TO_INT (p) - 1;
  frame = map_shm_frame (self, fd, size, &error);
  close (fd);
  if (frame == NULL)
    {
      link_fail (self, g_steal_pointer (&error));
      return FALSE;
    }
  rlx_link_add_bytes_rx (RLX_LINK (self), size);
  if (self->read_source == NULL)
    return FALSE;
  rlx_link_emit_frame_lane (RLX_LINK (self), RLX_LINK_LANE_BULK, frame);
  return self->read_source != NULL;
}

static const RlxLinkStreamSink stream_sink = { sink_frame, sink_shm };

/* Keep the fds that came with the bytes, in order, for their SHM records. */
static gboolean
take_fds (RlxUnixLink *self, struct msghdr *msg)
{
  for (struct cmsghdr *c = CMSG_FIRSTHDR (msg); c != NULL; c = CMSG_NXTHDR (msg, c))
    {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
        continue;
      for (gsize i = 0; i < (c->cmsg_len - CMSG_LEN (0)) / sizeof (int); i++)
        {
          int fd;

          memcpy (&fd, CMSG_DATA (c) + i * sizeof (int), sizeof (int));
          g_queue_push_tail (&self->rx_fds, GINT_TO_POINTER (fd + 1));
        }
    }
  if ((msg->msg_flags & MSG_CTRUNC) || g_queue_get_length (&self->rx_fds) > MAX_PENDING_FDS)
    {
      link_fail (self, g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                                    "%s passed more file descriptors than shared-memory "
                                    "records; link closed", peer_name (self)));
      return FALSE;
    }
  return TRUE;
}

static gboolean
read_some (RlxUnixLink *self)
{
  gsize budget = 0;

  while (budget < DISPATCH_BUDGET)
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
      gint64 t0;

      if (rlx_link_stream_reader_body_space (&self->reader, &direct, &direct_len, &error) &&
          direct_len >= DIRECT_MIN)
        {
          /* The rest of this record's body straight into the frame, then
           * the next record's header. */
          iov[0].iov_base = direct;
          iov[0].iov_len = direct_len;
          iov[1].iov_base = self->stage;
          iov[1].iov_len = 4;
          msg.msg_iovlen = 2;
        }
      else if (error != NULL)
        {
          link_fail (self, g_steal_pointer (&error));
          return FALSE;
        }
      else
        {
          direct_len = 0;
          iov[0].iov_base = self->stage;
          iov[0].iov_len = STAGE_SIZE;
          msg.msg_iovlen = 1;
        }
      msg.msg_iov = iov;
      msg.msg_control = control.buf;
      msg.msg_controllen = sizeof control.buf;

      t0 = g_get_monotonic_time ();
      do
        n = recvmsg (self->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      while (n < 0 && errno == EINTR);
      rlx_link_add_io_us (RLX_LINK (self), g_get_monotonic_time () - t0);

      if (n < 0)
        {
          int errsv = errno;

          if (errsv == EAGAIN || errsv == EWOULDBLOCK)
            return TRUE;
          link_fail (self, errno_to_link_error (self, "reading", errsv));
          return FALSE;
        }
      if (msg.msg_controllen > 0 && !take_fds (self, &msg))
        return FALSE;
      if (n == 0)
        {
          if (!rlx_link_stream_reader_at_boundary (&self->reader))
            link_fail (self, g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                                          "%s closed the connection in the middle of a frame",
                                          peer_name (self)));
          else
            link_fail (self, g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED,
                                          "%s closed the connection", peer_name (self)));
          return FALSE;
        }

      budget += n;
      rlx_link_add_bytes_rx (RLX_LINK (self), n);
      if (self->read_source == NULL)
        return FALSE;

      if (direct_len > 0)
        {
          gsize body = MIN ((gsize) n, direct_len);

          if (!rlx_link_stream_reader_body_got (&self->reader, body, &stream_sink, self, &error) ||
              ((gsize) n > body &&
               !rlx_link_stream_reader_feed (&self->reader, self->stage, n - body, &stream_sink,
                                             self, &error)))
            {
              if (error != NULL)
                link_fail (self, g_steal_pointer (&error));
              return FALSE;
            }
        }
      else if (!rlx_link_stream_reader_feed (&self->reader, self->stage, n, &stream_sink, self,
                                             &error))
        {
          if (error != NULL)
            link_fail (self, g_steal_pointer (&error));
          return FALSE;
        }
      if (self->read_source == NULL)
        return FALSE;
    }
  return TRUE;
}

static gboolean
on_readable (GSocket *socket, GIOCondition condition, gpointer user_data)
{
  RlxUnixLink *self = user_data;
  gboolean alive;

  g_object_ref (self);
  alive = read_some (self);
  g_object_unref (self);
  return alive ? G_SOURCE_CONTINUE : G_SOURCE_REMOVE;
}

/* ── writing ─────────────────────────────────────────────────────────── */

static void
finish_linger (RlxUnixLink *self)
{
  shutdown_socket (self);
  self->lingering = FALSE;
  g_object_unref (self);   /* the linger reference */
}

static void
ensure_write_source (RlxUnixLink *self)
{
  if (self->write_source != NULL || self->shut)
    return;
  self->write_source = g_socket_create_source (self->socket, G_IO_OUT, NULL);
  g_source_set_callback (self->write_source, G_SOURCE_FUNC (on_writable), self, NULL);
  g_source_set_static_name (self->write_source, "rlx-unix-link write");
  g_source_attach (self->write_source, self->context);
}

static gboolean
queues_empty (RlxUnixLink *self)
{
  return !self->cur_active && g_queue_is_empty (&self->out[0]) && g_queue_is_empty (&self->out[1]);
}

/* The first frame of @lane not yet wholly in records, from the head. */
static GList *
first_unassigned (RlxUnixLink *self, RlxLinkLane lane)
{
  for (GList *l = self->out[lane].head; l != NULL; l = l->next)
    if (!((OutFrame *) l->data)->all_assigned)
      return l;
  return NULL;
}

/* The next record of @lane starting at frame node @l (not wholly assigned). */
static void
plan_record (Rec *r, RlxLinkLane lane, OutFrame *f)
{
  memset (r, 0, sizeof *r);
  r->lane = lane;
  r->f = f;
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
record_done (RlxUnixLink *self, Rec *r)
{
  if (r->last)
    {
      OutFrame *head = g_queue_pop_head (&self->out[r->lane]);

      g_assert (head == r->f);
      out_frame_free (head);
    }
}

/* Write as much as the socket takes. Never emits ::closed synchronously
 * (send() may be the caller): failures are reported from an idle. */
static void
flush (RlxUnixLink *self)
{
  gsize budget = 0;
  guint64 written = 0;

  if (self->flushing || self->shut || self->fail_source != NULL)
    return;
  self->flushing = TRUE;

  while (!queues_empty (self) && budget < DISPATCH_BUDGET)
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
      if (self->cur_active)
        recs[n_rec++] = self->cur;
      /* Then new records, control lane first at every record. Planning
       * assigns body bytes; what the kernel does not take is handed back
       * below. */
      next[0] = first_unassigned (self, RLX_LINK_LANE_CONTROL);
      next[1] = first_unassigned (self, RLX_LINK_LANE_BULK);
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
          if (r->shm)
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

              iov[n_iov].iov_base = (guint8 *) g_bytes_get_data (r->f->bytes, NULL) + r->body_off + from;
              iov[n_iov].iov_len = r->body_len - from;
              n_iov++;
            }
        }
      msg.msg_iov = iov;
      msg.msg_iovlen = n_iov;
      if (recs[0].shm && recs[0].done == 0)
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
        n = sendmsg (self->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      while (n < 0 && errno == EINTR);
      rlx_link_add_io_us (RLX_LINK (self), g_get_monotonic_time () - t0);
      if (n < 0)
        {
          int errsv = errno;

          n = 0;
          if (errsv != EAGAIN && errsv != EWOULDBLOCK)
            {
              link_fail_later (self, errno_to_link_error (self, "writing", errsv));
              self->flushing = FALSE;
              return;
            }
        }

      budget += n;
      written += n;
      self->cur_active = FALSE;
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
            self->pending[r->lane] -= after - before;
            if (r->done == size)
              {
                if (r->shm)
                  {
                    /* the frame's bytes did move: count them */
                    self->pending[r->lane] -= r->f->len;
                    written += r->f->len;
                  }
                record_done (self, r);
                continue;
              }
            if (r->done > 0)
              {
                /* on the wire in part: it is finished first next time */
                self->cur = *r;
                self->cur_active = TRUE;
                unstarted = i + 1;
              }
            else
              unstarted = i;
            break;
          }
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
        if (unstarted < n_rec || self->cur_active)
          break;
      }
    }
  self->flushing = FALSE;

  if (queues_empty (self))
    clear_source (&self->write_source);
  else
    ensure_write_source (self);

  /* Report last: a ::notify handler may send() again (the sender does). */
  if (written > 0)
    rlx_link_add_bytes_tx (RLX_LINK (self), written);
}

static gboolean
on_writable (GSocket *socket, GIOCondition condition, gpointer user_data)
{
  RlxUnixLink *self = user_data;

  g_object_ref (self);
  flush (self);
  if (self->lingering && queues_empty (self) && self->fail_source == NULL)
    {
      g_clear_pointer (&self->write_source, g_source_unref);
      finish_linger (self);
      g_object_unref (self);
      return G_SOURCE_REMOVE;
    }
  if (self->write_source == NULL || queues_empty (self))
    {
      g_object_unref (self);
      return G_SOURCE_REMOVE;
    }
  g_object_unref (self);
  return G_SOURCE_CONTINUE;
}

static gboolean
on_linger_timeout (gpointer user_data)
{
  RlxUnixLink *self = user_data;

  g_clear_pointer (&self->linger_source, g_source_unref);
  finish_linger (self);
  return G_SOURCE_REMOVE;
}

/* ── shared memory ───────────────────────────────────────────────────── */

/* A sealed memfd holding @frame; -1 (and the socket carries it) when the
 * kernel refuses. */
static int
frame_to_memfd (RlxUnixLink *self, GBytes *frame)
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

/* ── RlxLink ─────────────────────────────────────────────────────────── */

static gboolean
rlx_unix_link_send_lane (RlxLink *link, RlxLinkLane lane, GBytes *frame, GError **error)
{
  RlxUnixLink *self = RLX_UNIX_LINK (link);
  OutFrame *f;
  gsize len = g_bytes_get_size (frame);

  if (len > self->max_frame)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE,
                   "frame of %" G_GSIZE_FORMAT " bytes is over the cap of %" G_GSIZE_FORMAT
                   " bytes of the link to %s; not sent", len, self->max_frame, peer_name (self));
      return FALSE;
    }
  if (self->shut || self->fail_source != NULL)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED,
                   "link to %s is closed", peer_name (self));
      return FALSE;
    }

  f = g_new0 (OutFrame, 1);
  f->len = len;
  f->fd = -1;
  if (lane == RLX_LINK_LANE_BULK && self->shm_min > 0 && len >= self->shm_min &&
      len <= RLX_LINK_STREAM_LEN_MASK)
    f->fd = frame_to_memfd (self, frame);
  if (f->fd < 0)
    f->bytes = g_bytes_ref (frame);
  g_queue_push_tail (&self->out[lane], f);
  self->pending[lane] += len;

  /* Only write straight away when nothing is waiting for the socket to drain:
   * otherwise the write source is armed and will pick this frame up. */
  if (self->write_source == NULL)
    flush (self);
  return TRUE;
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

  clear_source (&self->read_source);
  rlx_link_stream_reader_clear (&self->reader);
  close_rx_fds (self);

  if (!self->shut && self->fail_source == NULL && !queues_empty (self))
    {
      /* Flush what was queued (a bye) in the background, then close. */
      self->lingering = TRUE;
      g_object_ref (self);
      ensure_write_source (self);
      self->linger_source = g_timeout_source_new (LINGER_MS);
      g_source_set_callback (self->linger_source, on_linger_timeout, self, NULL);
      g_source_set_static_name (self->linger_source, "rlx-unix-link linger");
      g_source_attach (self->linger_source, self->context);
    }
  else
    shutdown_socket (self);

  error = g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED, "link to %s closed by this node",
                       peer_name (self));
  rlx_link_emit_closed (link, error);
}

static gsize
rlx_unix_link_pending_bytes (RlxLink *link)
{
  RlxUnixLink *self = RLX_UNIX_LINK (link);

  return self->pending[0] + self->pending[1];
}

static gsize
rlx_unix_link_pending_bytes_lane (RlxLink *link, RlxLinkLane lane)
{
  return RLX_UNIX_LINK (link)->pending[lane];
}

static void
rlx_unix_link_dispose (GObject *object)
{
  RlxUnixLink *self = RLX_UNIX_LINK (object);

  shutdown_socket (self);
  G_OBJECT_CLASS (rlx_unix_link_parent_class)->dispose (object);
}

static void
rlx_unix_link_finalize (GObject *object)
{
  RlxUnixLink *self = RLX_UNIX_LINK (object);

  g_clear_error (&self->deferred_error);
  g_clear_pointer (&self->stage, g_free);
  rlx_link_stream_reader_clear (&self->reader);
  rlx_link_stream_reader_free_name (&self->reader);
  g_clear_object (&self->socket);
  g_clear_object (&self->connection);
  g_clear_pointer (&self->context, g_main_context_unref);
  G_OBJECT_CLASS (rlx_unix_link_parent_class)->finalize (object);
}

static void
rlx_unix_link_class_init (RlxUnixLinkClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  RlxLinkClass *link_class = RLX_LINK_CLASS (klass);

  object_class->dispose = rlx_unix_link_dispose;
  object_class->finalize = rlx_unix_link_finalize;
  link_class->send = rlx_unix_link_send;
  link_class->send_lane = rlx_unix_link_send_lane;
  link_class->close = rlx_unix_link_close;
  link_class->pending_bytes = rlx_unix_link_pending_bytes;
  link_class->pending_bytes_lane = rlx_unix_link_pending_bytes_lane;
}

static void
rlx_unix_link_init (RlxUnixLink *self)
{
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    g_queue_init (&self->out[l]);
  g_queue_init (&self->rx_fds);
  self->fd = -1;
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

  rlx_link_stream_reader_set_peer (&self->reader, rlx_link_get_peer (RLX_LINK (self)));
}

RlxLink *
rlx_unix_link_new (GSocketConnection *connection, const char *peer,
                   gsize max_frame, GError **error)
{
  RlxUnixLink *self;
  GSocket *socket;

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
  self->connection = g_object_ref (connection);
  self->socket = g_object_ref (socket);
  self->context = g_main_context_ref_thread_default ();
  self->max_frame = max_frame;
  self->stage = g_malloc (STAGE_SIZE);
  self->fd = g_socket_get_fd (socket);
  self->shm_min = shm_min_from_env ();
  rlx_link_set_peer (RLX_LINK (self), peer);
  rlx_link_stream_reader_init (&self->reader, max_frame, peer);
  g_signal_connect (self, "notify::peer", G_CALLBACK (on_peer_renamed), NULL);

  g_socket_set_blocking (socket, FALSE);
  /* Bigger buffers mean fewer wakeups per MB; the kernel caps them
   * (net.core.wmem_max) and a smaller one only costs speed. */
  g_socket_set_option (socket, SOL_SOCKET, SO_SNDBUF, SOCKET_BUFFER, NULL);
  g_socket_set_option (socket, SOL_SOCKET, SO_RCVBUF, SOCKET_BUFFER, NULL);

  self->read_source = g_socket_create_source (socket, G_IO_IN, NULL);
  g_source_set_callback (self->read_source, G_SOURCE_FUNC (on_readable), self, NULL);
  g_source_set_static_name (self->read_source, "rlx-unix-link read");
  g_source_attach (self->read_source, self->context);

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
}

gsize
rlx_unix_link_get_shm_min (RlxUnixLink *self)
{
  g_return_val_if_fail (RLX_IS_UNIX_LINK (self), 0);
  return self->shm_min;
}
