/* rlx-unix-link.c — RlxLink over a connected Unix stream socket
 *
 * Reads and writes are non-blocking GSocket calls driven by GSocket sources
 * on the link's main context. Small frames are parsed out of a staging
 * buffer; the body of a large frame is received straight into its own
 * allocation, and frames go out with one sendmsg per batch (prefix and body as
 * separate iovecs), so a 4 MB frame is never copied on either side.
 */
#include "rlx-config.h"
#include "rlx-unix-link.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define STAGE_SIZE        (64 * 1024)
/* Stop reading/writing after this much in one dispatch so other sources on
 * the main context get their turn; the source fires again right away. */
#define DISPATCH_BUDGET   ((gsize) 32 << 20)
#define MAX_IOV           64
#define SOCKET_BUFFER     (4 * 1024 * 1024)
#define LINGER_MS         1000

typedef struct {
  GBytes *bytes;
  gsize   len;          /* frame length (prefix excluded) */
  gsize   off;          /* bytes of prefix+frame written */
  guint8  prefix[4];
} OutFrame;

struct _RlxUnixLink
{
  RlxLink            parent_instance;

  GSocketConnection *connection;
  GSocket           *socket;
  GMainContext      *context;
  gsize              max_frame;

  GSource           *read_source;
  GSource           *write_source;
  GSource           *fail_source;     /* deferred failure found while sending */
  GSource           *linger_source;
  GError            *deferred_error;

  /* read state */
  guint8            *stage;
  gsize              stage_len;
  gsize              stage_pos;
  guint8             hdr[4];
  gsize              hdr_got;
  gboolean           in_body;
  guint8            *body;
  gsize              body_len;
  gsize              body_got;

  /* write state */
  GQueue             out;             /* OutFrame* */
  gsize              pending;         /* frame bytes not yet written */
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

  g_bytes_unref (f->bytes);
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
shutdown_socket (RlxUnixLink *self)
{
  clear_source (&self->read_source);
  clear_source (&self->write_source);
  clear_source (&self->linger_source);
  clear_source (&self->fail_source);
  g_queue_clear_full (&self->out, out_frame_free);
  self->pending = 0;
  g_clear_pointer (&self->body, g_free);
  self->in_body = FALSE;
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

static GError *
io_error_to_link_error (RlxUnixLink *self, const char *what, const GError *io)
{
  const char *peer = rlx_link_get_peer (RLX_LINK (self));

  if (g_error_matches (io, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE) ||
      g_error_matches (io, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED))
    return g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED,
                        "%s closed the connection", peer ? peer : "peer");
  return g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED,
                      "%s to %s failed: %s", what, peer ? peer : "peer", io->message);
}

/* ── reading ─────────────────────────────────────────────────────────── */

/* Returns FALSE if the link is gone (closed while emitting, or a bad prefix). */
static gboolean
deliver_body (RlxUnixLink *self)
{
  GBytes *frame = g_bytes_new_take (g_steal_pointer (&self->body), self->body_len);

  self->in_body = FALSE;
  self->hdr_got = 0;
  self->body_len = self->body_got = 0;
  rlx_link_emit_frame (RLX_LINK (self), frame);
  g_bytes_unref (frame);
  return self->read_source != NULL;
}

static gboolean
start_body (RlxUnixLink *self)
{
  guint32 len = (guint32) self->hdr[0] | ((guint32) self->hdr[1] << 8) |
                ((guint32) self->hdr[2] << 16) | ((guint32) self->hdr[3] << 24);

  if (len > self->max_frame)
    {
      link_fail (self, g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE,
                                    "%s sent a frame of %u bytes, over this link's cap of %"
                                    G_GSIZE_FORMAT " bytes; link closed",
                                    rlx_link_get_peer (RLX_LINK (self)), len, self->max_frame));
      return FALSE;
    }
  self->body = g_try_malloc (len > 0 ? len : 1);
  if (self->body == NULL)
    {
      link_fail (self, g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED,
                                    "out of memory for a frame of %u bytes from %s",
                                    len, rlx_link_get_peer (RLX_LINK (self))));
      return FALSE;
    }
  self->body_len = len;
  self->body_got = 0;
  self->in_body = TRUE;
  if (len == 0)
    return deliver_body (self);
  return TRUE;
}

/* Parse what is in the staging buffer. FALSE if the link went away. */
static gboolean
parse_stage (RlxUnixLink *self)
{
  while (self->stage_pos < self->stage_len)
    {
      gsize avail = self->stage_len - self->stage_pos;

      if (!self->in_body)
        {
          gsize take = MIN (avail, 4 - self->hdr_got);

          memcpy (self->hdr + self->hdr_got, self->stage + self->stage_pos, take);
          self->hdr_got += take;
          self->stage_pos += take;
          if (self->hdr_got == 4 && !start_body (self))
            return FALSE;
        }
      else
        {
          gsize take = MIN (avail, self->body_len - self->body_got);

          memcpy (self->body + self->body_got, self->stage + self->stage_pos, take);
          self->body_got += take;
          self->stage_pos += take;
          if (self->body_got == self->body_len && !deliver_body (self))
            return FALSE;
        }
    }
  self->stage_pos = self->stage_len = 0;
  return TRUE;
}

static gboolean
read_some (RlxUnixLink *self)
{
  gsize budget = 0;

  while (budget < DISPATCH_BUDGET)
    {
      g_autoptr(GError) error = NULL;
      gssize n;
      gboolean direct = self->in_body &&
                        self->body_len - self->body_got >= STAGE_SIZE;

      gint64 t0 = g_get_monotonic_time ();

      if (direct)
        n = g_socket_receive (self->socket, (char *) self->body + self->body_got,
                              self->body_len - self->body_got, NULL, &error);
      else
        n = g_socket_receive (self->socket, (char *) self->stage, STAGE_SIZE, NULL, &error);
      rlx_link_add_io_us (RLX_LINK (self), g_get_monotonic_time () - t0);

      if (n < 0)
        {
          if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
            return TRUE;
          link_fail (self, io_error_to_link_error (self, "reading", error));
          return FALSE;
        }
      if (n == 0)
        {
          const char *peer = rlx_link_get_peer (RLX_LINK (self));

          if (self->in_body || self->hdr_got > 0)
            link_fail (self, g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                                          "%s closed the connection in the middle of a frame",
                                          peer ? peer : "peer"));
          else
            link_fail (self, g_error_new (RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED,
                                          "%s closed the connection", peer ? peer : "peer"));
          return FALSE;
        }

      budget += n;
      rlx_link_add_bytes_rx (RLX_LINK (self), n);
      if (self->read_source == NULL)
        return FALSE;

      if (direct)
        {
          self->body_got += n;
          if (self->body_got == self->body_len && !deliver_body (self))
            return FALSE;
        }
      else
        {
          self->stage_len = n;
          self->stage_pos = 0;
          if (!parse_stage (self))
            return FALSE;
        }
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

  while (!g_queue_is_empty (&self->out) && budget < DISPATCH_BUDGET)
    {
      GOutputVector iov[MAX_IOV];
      guint n_iov = 0;
      g_autoptr(GError) error = NULL;
      gssize n;
      gint64 t0;

      for (GList *l = self->out.head; l != NULL && n_iov + 2 <= MAX_IOV; l = l->next)
        {
          OutFrame *f = l->data;

          if (f->off < 4)
            {
              iov[n_iov].buffer = f->prefix + f->off;
              iov[n_iov].size = 4 - f->off;
              n_iov++;
            }
          if (f->len > 0)
            {
              gsize body_off = f->off > 4 ? f->off - 4 : 0;

              iov[n_iov].buffer = (const guint8 *) g_bytes_get_data (f->bytes, NULL) + body_off;
              iov[n_iov].size = f->len - body_off;
              n_iov++;
            }
        }

      t0 = g_get_monotonic_time ();
      n = g_socket_send_message (self->socket, NULL, iov, n_iov, NULL, 0, 0, NULL, &error);
      rlx_link_add_io_us (RLX_LINK (self), g_get_monotonic_time () - t0);
      if (n < 0)
        {
          if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
            break;
          link_fail_later (self, io_error_to_link_error (self, "writing", error));
          self->flushing = FALSE;
          return;
        }

      budget += n;
      written += n;
      while (n > 0)
        {
          OutFrame *f = g_queue_peek_head (&self->out);
          gsize left = 4 + f->len - f->off;
          gsize take = MIN ((gsize) n, left);
          gsize body_before = f->off > 4 ? f->off - 4 : 0;
          gsize body_after;

          f->off += take;
          n -= take;
          body_after = f->off > 4 ? f->off - 4 : 0;
          self->pending -= body_after - body_before;
          if (f->off == 4 + f->len)
            out_frame_free (g_queue_pop_head (&self->out));
        }
    }
  self->flushing = FALSE;

  if (g_queue_is_empty (&self->out))
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
  if (self->lingering && g_queue_is_empty (&self->out) && self->fail_source == NULL)
    {
      g_clear_pointer (&self->write_source, g_source_unref);
      finish_linger (self);
      g_object_unref (self);
      return G_SOURCE_REMOVE;
    }
  if (self->write_source == NULL || g_queue_is_empty (&self->out))
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

/* ── RlxLink ─────────────────────────────────────────────────────────── */

static gboolean
rlx_unix_link_send (RlxLink *link, GBytes *frame, GError **error)
{
  RlxUnixLink *self = RLX_UNIX_LINK (link);
  OutFrame *f;
  gsize len = g_bytes_get_size (frame);

  if (len > self->max_frame)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_TOO_LARGE,
                   "frame of %" G_GSIZE_FORMAT " bytes is over the cap of %" G_GSIZE_FORMAT
                   " bytes of the link to %s; not sent", len, self->max_frame,
                   rlx_link_get_peer (link));
      return FALSE;
    }
  if (self->shut || self->fail_source != NULL)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED,
                   "link to %s is closed", rlx_link_get_peer (link));
      return FALSE;
    }

  f = g_new0 (OutFrame, 1);
  f->bytes = g_bytes_ref (frame);
  f->len = len;
  f->prefix[0] = len & 0xff;
  f->prefix[1] = (len >> 8) & 0xff;
  f->prefix[2] = (len >> 16) & 0xff;
  f->prefix[3] = (len >> 24) & 0xff;
  g_queue_push_tail (&self->out, f);
  self->pending += len;

  /* Only write straight away when nothing is waiting for the socket to drain:
   * otherwise the write source is armed and will pick this frame up. */
  if (self->write_source == NULL)
    flush (self);
  return TRUE;
}

static void
rlx_unix_link_close (RlxLink *link)
{
  RlxUnixLink *self = RLX_UNIX_LINK (link);
  g_autoptr(GError) error = NULL;

  clear_source (&self->read_source);
  g_clear_pointer (&self->body, g_free);
  self->in_body = FALSE;

  if (!self->shut && self->fail_source == NULL && !g_queue_is_empty (&self->out))
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
                       rlx_link_get_peer (link));
  rlx_link_emit_closed (link, error);
}

static gsize
rlx_unix_link_pending_bytes (RlxLink *link)
{
  return RLX_UNIX_LINK (link)->pending;
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
  link_class->close = rlx_unix_link_close;
  link_class->pending_bytes = rlx_unix_link_pending_bytes;
}

static void
rlx_unix_link_init (RlxUnixLink *self)
{
  g_queue_init (&self->out);
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
  rlx_link_set_peer (RLX_LINK (self), peer);

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
