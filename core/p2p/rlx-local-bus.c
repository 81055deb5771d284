/* rlx-local-bus.c — the same-machine mesh of one cohort over Unix sockets
 *
 * See rlx-local-bus.h for the contract. The shape of it:
 *
 *   start: check/create the 0700 directory; bind a hidden temporary name,
 *   listen, then rename it to NODEID.sock (so nobody ever sees our socket in
 *   the window between bind and listen and takes it for a dead one); then
 *   connect to every other NODEID.sock.
 *
 *   handshake (first frame each way, plain text, on the control lane):
 *     connecting side:  "rlx-bus/1 hello ID"
 *     accepting side:   "rlx-bus/1 accept ID"  or  "rlx-bus/1 decline REASON"
 *   The accepting side declines when it already has a link to ID, or when it
 *   is itself connecting to ID and its own id is lower (the lower id's
 *   connection wins a simultaneous connect, on both sides). A declined node
 *   retries a little later unless a link has appeared by then, which covers a
 *   winner whose own connection failed.
 *
 * Over 1,000 lines: one object — names and the directory, the connections
 * with their handshake and retries, start and stop — over one table of
 * links and attempts that every part of it reads and writes.
 */
#include "rlx-config.h"
#include "rlx-local-bus.h"
#include "rlx-unix-link.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <gio/gunixsocketaddress.h>

#include "core/p2p/rlx-shaped-link.h"

#define HANDSHAKE_PREFIX     "rlx-bus/1 "
#define HANDSHAKE_TIMEOUT_MS 5000
/* Incoming connections that have not said hello, at most. The socket's
 * directory is 0700 and the peer's uid is checked, but a process of the
 * same user could open any number (each a link, its buffers and sources,
 * for HANDSHAKE_TIMEOUT_MS). One more closes the oldest: a real node's
 * hello follows its connect at once, so silent connections, however many,
 * cannot keep it out. A cohort has at most a few dozen nodes per host. */
#define MAX_PRE_HELLO        64
/* accept() failed (out of descriptors): stop watching the listener for
 * this long, doubling up to the most, instead of spinning on it. */
#define ACCEPT_BACKOFF_MIN_MS 50
#define ACCEPT_BACKOFF_MAX_MS 1000
#define RETRY_MIN_MS         100
#define RETRY_MAX_MS         2000
#define MAX_NAME             64

G_DEFINE_QUARK (rlx-local-bus-error-quark, rlx_local_bus_error)

typedef struct _Conn Conn;

struct _RlxLocalBus
{
  GObject       parent_instance;

  char         *node_id;
  char         *dir;
  char         *cohort;          /* NULL with new_for_dir */
  char         *sock_path;
  gsize         max_frame;
  gboolean      shaped;          /* wrap every link (RLX_LINK_SHAPE, set_link_shape) */
  RlxLinkShape  shape;
  GMainContext *context;

  GSocket      *listener;
  GSource      *accept_source;
  dev_t         sock_dev;
  ino_t         sock_ino;
  gboolean      started;
  gboolean      stopped;

  GHashTable   *linked;          /* peer id → Conn* (owned) */
  GHashTable   *outgoing;        /* peer id → Conn* (owned), handshake pending */
  GPtrArray    *incoming;        /* Conn* (owned), waiting for hello */
  GHashTable   *slow;            /* peer id → NULL: its process accepted our
                                  * connection (or its backlog was full) but it
                                  * has not answered the handshake since */

  GSource      *retry_source;
  guint         retry_ms;
  GSource      *accept_retry;    /* accept() failed: watch the listener again */
  guint         accept_backoff_ms;
  guint64       pre_hello_closed; /* incoming connections closed for MAX_PRE_HELLO */
};

struct _Conn
{
  RlxLocalBus *bus;
  RlxLink     *link;
  char        *peer_id;          /* known for outgoing from the start */
  gboolean     is_outgoing;
  gboolean     adopted;
  gboolean     superseded;       /* outgoing whose peer's connection won */
  gulong       frame_id;
  gulong       closed_id;
  GSource     *timeout;
  gint64       since;            /* monotonic µs it was made */
};

G_DEFINE_FINAL_TYPE (RlxLocalBus, rlx_local_bus, G_TYPE_OBJECT)

enum {
  SIGNAL_LINK_ADDED,
  SIGNAL_LINK_REMOVED,
  N_SIGNALS
};

static guint signals[N_SIGNALS];

static void schedule_retry (RlxLocalBus *self);
static void connect_to_peer (RlxLocalBus *self, const char *peer_id);

/* ── names and paths ─────────────────────────────────────────────────── */

gboolean
rlx_local_bus_name_is_valid (const char *name)
{
  gsize len;

  if (name == NULL)
    return FALSE;
  len = strlen (name);
  if (len == 0 || len > MAX_NAME)
    return FALSE;
  if (strcmp (name, ".") == 0 || strcmp (name, "..") == 0)
    return FALSE;
  for (const char *p = name; *p; p++)
    if (!g_ascii_isalnum (*p) && *p != '.' && *p != '_' && *p != '-')
      return FALSE;
  return TRUE;
}

static gboolean
check_name (const char *what, const char *name, GError **error)
{
  if (rlx_local_bus_name_is_valid (name))
    return TRUE;
  g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_NAME,
               "%s '%s' is not usable: use 1 to %d characters of letters, digits, "
               "'.', '_' and '-'", what, name ? name : "(null)", MAX_NAME);
  return FALSE;
}

static const char *
runtime_dir (void)
{
  const char *env = g_getenv ("XDG_RUNTIME_DIR");

  if (env != NULL && env[0] == '/')
    return env;
  return g_get_user_runtime_dir ();
}

char *
rlx_local_bus_dir_for_cohort (const char *cohort, GError **error)
{
  if (!check_name ("cohort name", cohort, error))
    return NULL;
  return g_build_filename (runtime_dir (), "rlx-cluster", cohort, NULL);
}

/* Create @path (mode 0700) if it is missing, then insist that it is a real
 * directory of ours with mode 0700. */
static gboolean
ensure_private_dir (const char *path, GError **error)
{
  struct stat st;

  if (lstat (path, &st) != 0)
    {
      int errsv = errno;

      if (errsv != ENOENT)
        {
          g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_DIRECTORY,
                       "cannot inspect the bus directory %s: %s", path, g_strerror (errsv));
          return FALSE;
        }
      if (mkdir (path, 0700) != 0 && errno != EEXIST)
        {
          errsv = errno;
          g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_DIRECTORY,
                       "cannot create the bus directory %s: %s", path, g_strerror (errsv));
          return FALSE;
        }
      if (lstat (path, &st) != 0)
        {
          errsv = errno;
          g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_DIRECTORY,
                       "cannot inspect the bus directory %s: %s", path, g_strerror (errsv));
          return FALSE;
        }
    }

  if (!S_ISDIR (st.st_mode))
    {
      g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_DIRECTORY,
                   "bus directory %s is not a directory (a symlink or a file); "
                   "refusing to use it — remove it and start again", path);
      return FALSE;
    }
  if (st.st_uid != getuid ())
    {
      g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_DIRECTORY,
                   "bus directory %s belongs to uid %u, not to this user (uid %u); "
                   "refusing to use it — another user could reach the cohort's sockets",
                   path, (guint) st.st_uid, (guint) getuid ());
      return FALSE;
    }
  if ((st.st_mode & 07777) != 0700)
    {
      g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_DIRECTORY,
                   "bus directory %s has mode %04o, not 0700; refusing to use it — "
                   "fix it with: chmod 700 %s", path, (guint) (st.st_mode & 07777), path);
      return FALSE;
    }
  return TRUE;
}

static char *
peer_socket_path (RlxLocalBus *self, const char *peer_id)
{
  g_autofree char *name = g_strconcat (peer_id, ".sock", NULL);

  return g_build_filename (self->dir, name, NULL);
}

/* ── connections ─────────────────────────────────────────────────────── */

static void
conn_free (Conn *conn)
{
  if (conn->link != NULL)
    {
      g_clear_signal_handler (&conn->frame_id, conn->link);
      g_clear_signal_handler (&conn->closed_id, conn->link);
      if (!rlx_link_is_closed (conn->link))
        rlx_link_close (conn->link);
      g_clear_object (&conn->link);
    }
  if (conn->timeout != NULL)
    {
      g_source_destroy (conn->timeout);
      g_clear_pointer (&conn->timeout, g_source_unref);
    }
  g_free (conn->peer_id);
  g_free (conn);
}

/* Remove @conn from whichever table holds it, without freeing it. */
static void
conn_detach (RlxLocalBus *self, Conn *conn)
{
  if (conn->adopted)
    {
      if (g_hash_table_lookup (self->linked, conn->peer_id) == conn)
        g_hash_table_remove (self->linked, conn->peer_id);
    }
  else if (conn->is_outgoing)
    {
      if (g_hash_table_lookup (self->outgoing, conn->peer_id) == conn)
        g_hash_table_remove (self->outgoing, conn->peer_id);
    }
  else
    g_ptr_array_remove_fast (self->incoming, conn);
}

static void
conn_drop (RlxLocalBus *self, Conn *conn)
{
  conn_detach (self, conn);
  conn_free (conn);
}

static gboolean
send_text (RlxLink *link, const char *text)
{
  g_autoptr(GBytes) frame = g_bytes_new (text, strlen (text));

  /* On the control lane: the accept must reach the peer before anything the
   * coordinator sends right after ::link-added, and a control frame may
   * overtake bulk frames handed over in the same turn. */
  return rlx_link_send_lane (link, RLX_LINK_LANE_CONTROL, frame, NULL);
}

static void
on_link_closed (RlxLink *link, const GError *error, gpointer user_data)
{
  Conn *conn = user_data;
  RlxLocalBus *self = conn->bus;
  g_autoptr(RlxLink) keep = g_object_ref (link);
  g_autofree char *peer_id = g_strdup (conn->peer_id);
  gboolean was_adopted = conn->adopted;

  conn_detach (self, conn);
  conn_free (conn);
  if (was_adopted)
    g_signal_emit (self, signals[SIGNAL_LINK_REMOVED], 0, keep, peer_id);
}

static void
adopt (RlxLocalBus *self, Conn *conn)
{
  g_autofree char *path = peer_socket_path (self, conn->peer_id);
  g_autoptr(RlxLink) link = g_object_ref (conn->link);
  g_autofree char *peer_id = g_strdup (conn->peer_id);

  conn_detach (self, conn);
  conn->adopted = TRUE;
  g_clear_signal_handler (&conn->frame_id, conn->link);
  if (conn->timeout != NULL)
    {
      g_source_destroy (conn->timeout);
      g_clear_pointer (&conn->timeout, g_source_unref);
    }
  g_hash_table_insert (self->linked, g_strdup (conn->peer_id), conn);
  g_hash_table_remove (self->slow, conn->peer_id);
  rlx_link_set_peer (conn->link, path);
  self->retry_ms = 0;
  if (self->shaped)
    {
      /* The handshake ran unshaped; from here on the coordinator sees the
       * slow network. The wrapper owns the inner link's signals now. */
      RlxLink *shaped = rlx_shaped_link_new (conn->link, &self->shape);

      g_clear_signal_handler (&conn->closed_id, conn->link);
      g_object_unref (conn->link);     /* the wrapper holds the inner link */
      conn->link = shaped;             /* conn owns the wrapper */
      g_set_object (&link, shaped);    /* what ::link-added hands out */
      conn->closed_id = g_signal_connect_after (link, "closed", G_CALLBACK (on_link_closed), conn);
    }

  g_debug ("local bus %s: linked to %s (%s)", self->node_id, peer_id,
           conn->is_outgoing ? "we connected" : "it connected");
  g_signal_emit (self, signals[SIGNAL_LINK_ADDED], 0, link, peer_id);
}

/* Parse "rlx-bus/1 VERB ARG" into its parts (pointers into a copy). */
static gboolean
parse_handshake (GBytes *frame, char **verb, char **arg)
{
  gsize len;
  const char *data = g_bytes_get_data (frame, &len);
  g_autofree char *text = NULL;
  char *space;

  if (len < strlen (HANDSHAKE_PREFIX) || len > 256 ||
      memcmp (data, HANDSHAKE_PREFIX, strlen (HANDSHAKE_PREFIX)) != 0)
    return FALSE;
  text = g_strndup (data + strlen (HANDSHAKE_PREFIX), len - strlen (HANDSHAKE_PREFIX));
  if (strlen (text) != len - strlen (HANDSHAKE_PREFIX))
    return FALSE;  /* embedded NUL */
  space = strchr (text, ' ');
  if (space == NULL)
    return FALSE;
  *space = '\0';
  *verb = g_strdup (text);
  *arg = g_strdup (space + 1);
  return TRUE;
}

static void
decline (RlxLocalBus *self, Conn *conn, const char *reason)
{
  g_autofree char *text = g_strconcat (HANDSHAKE_PREFIX "decline ", reason, NULL);

  g_debug ("local bus %s: declined %s: %s", self->node_id,
           conn->peer_id ? conn->peer_id : "a connection", reason);
  send_text (conn->link, text);
  conn_drop (self, conn);   /* closes; the decline is flushed first */
}

static void
on_incoming_handshake (RlxLink *link, GBytes *frame, gpointer user_data)
{
  Conn *conn = user_data;
  RlxLocalBus *self = conn->bus;
  g_autofree char *verb = NULL;
  g_autofree char *peer_id = NULL;
  g_autofree char *reply = NULL;
  Conn *mine;

  if (!parse_handshake (frame, &verb, &peer_id) || strcmp (verb, "hello") != 0 ||
      !rlx_local_bus_name_is_valid (peer_id))
    {
      g_warning ("local bus %s: a connection did not open with a bus hello; closed",
                 self->node_id);
      conn_drop (self, conn);
      return;
    }
  conn->peer_id = g_strdup (peer_id);

  if (strcmp (peer_id, self->node_id) == 0)
    {
      decline (self, conn, "that node id is this node's own");
      return;
    }
  if (g_hash_table_contains (self->linked, peer_id))
    {
      decline (self, conn, "already linked");
      return;
    }
  mine = g_hash_table_lookup (self->outgoing, peer_id);
  if (mine != NULL && !mine->superseded)
    {
      if (strcmp (self->node_id, peer_id) < 0)
        {
          decline (self, conn, "simultaneous connect: the lower node id's connection is kept");
          return;
        }
      /* Theirs wins; ours will be declined by them and is dropped then. */
      mine->superseded = TRUE;
    }

  reply = g_strconcat (HANDSHAKE_PREFIX "accept ", self->node_id, NULL);
  if (!send_text (conn->link, reply))
    {
      conn_drop (self, conn);
      return;
    }
  adopt (self, conn);
}

static void
on_outgoing_handshake (RlxLink *link, GBytes *frame, gpointer user_data)
{
  Conn *conn = user_data;
  RlxLocalBus *self = conn->bus;
  g_autofree char *verb = NULL;
  g_autofree char *arg = NULL;

  if (!parse_handshake (frame, &verb, &arg))
    {
      g_warning ("local bus %s: %s answered with something that is not a bus handshake; closed",
                 self->node_id, conn->peer_id);
      conn_drop (self, conn);
      return;
    }
  if (strcmp (verb, "accept") == 0)
    {
      if (strcmp (arg, conn->peer_id) != 0)
        {
          g_warning ("local bus %s: %s.sock answered as node '%s'; closed",
                     self->node_id, conn->peer_id, arg);
          conn_drop (self, conn);
          return;
        }
      if (g_hash_table_contains (self->linked, conn->peer_id))
        {
          /* Cannot happen with a peer that follows the rule; be safe. */
          conn_drop (self, conn);
          return;
        }
      adopt (self, conn);
      return;
    }
  if (strcmp (verb, "decline") == 0)
    {
      g_debug ("local bus %s: %s declined: %s", self->node_id, conn->peer_id, arg);
      conn_drop (self, conn);
      schedule_retry (self);
      return;
    }
  conn_drop (self, conn);
}

static gboolean
on_handshake_timeout (gpointer user_data)
{
  Conn *conn = user_data;

  g_warning ("local bus %s: no handshake from %s within %d ms; closed",
             conn->bus->node_id, conn->peer_id ? conn->peer_id : "an incoming connection",
             HANDSHAKE_TIMEOUT_MS);
  g_clear_pointer (&conn->timeout, g_source_unref);
  if (conn->is_outgoing)
    {
      /* Its main loop may just have been slow: try again later. */
      RlxLocalBus *self = conn->bus;

      g_hash_table_add (self->slow, g_strdup (conn->peer_id));
      conn_drop (self, conn);
      schedule_retry (self);
    }
  else
    conn_drop (conn->bus, conn);
  return G_SOURCE_REMOVE;
}

static Conn *
conn_new (RlxLocalBus *self, RlxLink *link, const char *peer_id, gboolean is_outgoing)
{
  Conn *conn = g_new0 (Conn, 1);

  conn->bus = self;
  conn->link = link;   /* takes the reference */
  conn->peer_id = g_strdup (peer_id);
  conn->is_outgoing = is_outgoing;
  conn->since = g_get_monotonic_time ();
  conn->frame_id = g_signal_connect (link, "frame",
                                     is_outgoing ? G_CALLBACK (on_outgoing_handshake)
                                                 : G_CALLBACK (on_incoming_handshake),
                                     conn);
  /* After: the coordinator's own ::closed handlers run before ::link-removed. */
  conn->closed_id = g_signal_connect_after (link, "closed", G_CALLBACK (on_link_closed), conn);
  conn->timeout = g_timeout_source_new (HANDSHAKE_TIMEOUT_MS);
  g_source_set_callback (conn->timeout, on_handshake_timeout, conn, NULL);
  g_source_set_static_name (conn->timeout, "rlx-local-bus handshake");
  g_source_attach (conn->timeout, self->context);
  return conn;
}

/* A file that is a socket nobody listens on any more. */
static void
remove_stale (RlxLocalBus *self, const char *path)
{
  struct stat st;

  if (lstat (path, &st) == 0 && S_ISSOCK (st.st_mode) && unlink (path) == 0)
    g_message ("local bus %s: removed stale socket %s (its process is gone)",
               self->node_id, path);
}

/* Connect to @path. Returns the socket, or NULL with @refused set when
 * nobody listens there (a stale socket). Never blocks. */
static GSocket *
dial (const char *path, gboolean *refused, GError **error)
{
  g_autoptr(GSocket) socket = NULL;
  g_autoptr(GSocketAddress) address = NULL;
  g_autoptr(GError) local_error = NULL;

  *refused = FALSE;
  socket = g_socket_new (G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_STREAM,
                         G_SOCKET_PROTOCOL_DEFAULT, error);
  if (socket == NULL)
    return NULL;
  g_socket_set_blocking (socket, FALSE);
  address = g_unix_socket_address_new (path);
  if (!g_socket_connect (socket, address, NULL, &local_error))
    {
      *refused = g_error_matches (local_error, G_IO_ERROR, G_IO_ERROR_CONNECTION_REFUSED);
      g_propagate_error (error, g_steal_pointer (&local_error));
      return NULL;
    }
  return g_steal_pointer (&socket);
}

static void
connect_to_peer (RlxLocalBus *self, const char *peer_id)
{
  g_autofree char *path = NULL;
  g_autofree char *hello = NULL;
  g_autoptr(GSocket) socket = NULL;
  g_autoptr(GSocketConnection) connection = NULL;
  g_autoptr(GError) error = NULL;
  RlxLink *link;
  Conn *conn;
  gboolean refused;

  if (strcmp (peer_id, self->node_id) == 0 ||
      g_hash_table_contains (self->linked, peer_id) ||
      g_hash_table_contains (self->outgoing, peer_id))
    return;

  path = peer_socket_path (self, peer_id);
  socket = dial (path, &refused, &error);
  if (socket == NULL)
    {
      if (refused)
        remove_stale (self, path);
      else if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK) ||
               g_error_matches (error, G_IO_ERROR, G_IO_ERROR_PENDING))
        {
          /* Its backlog is full (a live process that does not accept):
           * try again soon. */
          g_hash_table_add (self->slow, g_strdup (peer_id));
          schedule_retry (self);
        }
      else if (!g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
        g_warning ("local bus %s: cannot connect to %s: %s", self->node_id, path, error->message);
      if (refused || g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
        g_hash_table_remove (self->slow, peer_id);
      return;
    }

  connection = g_socket_connection_factory_create_connection (socket);
  link = rlx_unix_link_new (connection, path, self->max_frame, &error);
  if (link == NULL)
    {
      g_warning ("local bus %s: %s", self->node_id, error->message);
      g_socket_close (socket, NULL);
      return;
    }
  conn = conn_new (self, link, peer_id, TRUE);
  g_hash_table_insert (self->outgoing, g_strdup (peer_id), conn);
  hello = g_strconcat (HANDSHAKE_PREFIX "hello ", self->node_id, NULL);
  if (!send_text (link, hello))
    conn_drop (self, conn);
}

static void
connect_to_all (RlxLocalBus *self)
{
  g_auto(GStrv) nodes = rlx_local_bus_list_nodes (self);

  for (guint i = 0; nodes[i] != NULL; i++)
    {
      connect_to_peer (self, nodes[i]);
      if (self->stopped)
        return;
    }
}

static gboolean
on_retry (gpointer user_data)
{
  RlxLocalBus *self = user_data;

  g_clear_pointer (&self->retry_source, g_source_unref);
  connect_to_all (self);
  return G_SOURCE_REMOVE;
}

static void
schedule_retry (RlxLocalBus *self)
{
  if (self->retry_source != NULL || self->stopped)
    return;
  self->retry_ms = self->retry_ms == 0 ? RETRY_MIN_MS : MIN (self->retry_ms * 2, RETRY_MAX_MS);
  self->retry_source = g_timeout_source_new (self->retry_ms);
  g_source_set_callback (self->retry_source, on_retry, self, NULL);
  g_source_set_static_name (self->retry_source, "rlx-local-bus retry");
  g_source_attach (self->retry_source, self->context);
}

/* Close the incoming connection that has waited longest for its hello. */
static void
drop_oldest_pre_hello (RlxLocalBus *self, const char *why)
{
  Conn *oldest = NULL;
  guint64 n;

  for (guint i = 0; i < self->incoming->len; i++)
    {
      Conn *c = self->incoming->pdata[i];

      if (oldest == NULL || c->since < oldest->since)
        oldest = c;
    }
  if (oldest == NULL)
    return;
  /* said the first time, then at every power of ten */
  for (n = ++self->pre_hello_closed; n % 10 == 0; n /= 10)
    ;
  if (n == 1)
    g_message ("local bus %s: %s; closed the connection that waited longest for its hello "
               "(%" G_GUINT64_FORMAT " so far)", self->node_id, why, self->pre_hello_closed);
  conn_drop (self, oldest);
}

static gboolean on_incoming (GSocket *listener, GIOCondition condition, gpointer user_data);

static void
watch_listener (RlxLocalBus *self)
{
  self->accept_source = g_socket_create_source (self->listener, G_IO_IN, NULL);
  g_source_set_callback (self->accept_source, G_SOURCE_FUNC (on_incoming), self, NULL);
  g_source_set_static_name (self->accept_source, "rlx-local-bus accept");
  g_source_attach (self->accept_source, self->context);
}

static gboolean
on_accept_retry (gpointer user_data)
{
  RlxLocalBus *self = user_data;

  g_clear_pointer (&self->accept_retry, g_source_unref);
  watch_listener (self);
  return G_SOURCE_REMOVE;
}

/* accept() failed, or the link of an accepted connection could not be
 * made, most likely for want of descriptors: the next connections in the
 * backlog would fail the same way (and the listener stays readable), so
 * give a descriptor back (the oldest connection without a hello) and look
 * again later. */
static void
accept_back_off (RlxLocalBus *self, const GError *error)
{
  if (self->accept_backoff_ms == 0)
    g_warning ("local bus %s: cannot take a connection: %s; retrying with a backoff of up to %d ms "
               "(said once, until the backlog is drained)",
               self->node_id, error->message, ACCEPT_BACKOFF_MAX_MS);
  self->accept_backoff_ms = CLAMP (self->accept_backoff_ms * 2, ACCEPT_BACKOFF_MIN_MS,
                                   ACCEPT_BACKOFF_MAX_MS);
  drop_oldest_pre_hello (self, "out of descriptors");
  g_clear_pointer (&self->accept_source, g_source_unref);   /* its callback removes it */
  self->accept_retry = g_timeout_source_new (self->accept_backoff_ms);
  g_source_set_callback (self->accept_retry, on_accept_retry, self, NULL);
  g_source_attach (self->accept_retry, self->context);
}

static gboolean
on_incoming (GSocket *listener, GIOCondition condition, gpointer user_data)
{
  RlxLocalBus *self = user_data;

  for (;;)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(GSocket) socket = g_socket_accept (listener, NULL, &error);
      g_autoptr(GSocketConnection) connection = NULL;
      RlxLink *link;

      if (socket == NULL)
        {
          if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
            {
              if (self->accept_backoff_ms > 0)
                g_message ("local bus %s: accepting connections again", self->node_id);
              self->accept_backoff_ms = 0;
              break;
            }
          accept_back_off (self, error);
          return G_SOURCE_REMOVE;
        }
      if (self->incoming->len >= MAX_PRE_HELLO)
        drop_oldest_pre_hello (self, "too many connections without a hello");
      connection = g_socket_connection_factory_create_connection (socket);
      link = rlx_unix_link_new (connection, "incoming connection", self->max_frame, &error);
      if (link == NULL)
        {
          g_socket_close (socket, NULL);
          if (!g_error_matches (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PERMISSION))
            {
              /* no descriptor for its eventfds, most likely: as above */
              accept_back_off (self, error);
              return G_SOURCE_REMOVE;
            }
          g_warning ("local bus %s: refused an incoming connection: %s",
                     self->node_id, error->message);
          continue;
        }
      g_ptr_array_add (self->incoming, conn_new (self, link, NULL, FALSE));
    }
  return G_SOURCE_CONTINUE;
}

/* ── start / stop ────────────────────────────────────────────────────── */

static gboolean
bind_and_listen (RlxLocalBus *self, GError **error)
{
  g_autofree char *tmp_name = g_strdup_printf (".%u-%08x.tmp", (guint) getpid (),
                                               g_random_int ());
  g_autofree char *tmp_path = g_build_filename (self->dir, tmp_name, NULL);
  g_autoptr(GSocket) socket = NULL;
  g_autoptr(GSocketAddress) address = NULL;
  g_autoptr(GError) local_error = NULL;
  struct stat st;

  socket = g_socket_new (G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_STREAM,
                         G_SOCKET_PROTOCOL_DEFAULT, &local_error);
  if (socket == NULL)
    {
      g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_FAILED,
                   "cannot create a Unix socket: %s", local_error->message);
      return FALSE;
    }
  address = g_unix_socket_address_new (tmp_path);
  if (!g_socket_bind (socket, address, FALSE, &local_error))
    {
      g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_FAILED,
                   "cannot bind %s: %s", tmp_path, local_error->message);
      return FALSE;
    }
  g_socket_set_listen_backlog (socket, 64);
  if (!g_socket_listen (socket, &local_error))
    {
      unlink (tmp_path);
      g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_FAILED,
                   "cannot listen on %s: %s", tmp_path, local_error->message);
      return FALSE;
    }
  if (rename (tmp_path, self->sock_path) != 0)
    {
      int errsv = errno;
      unlink (tmp_path);
      g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_FAILED,
                   "cannot move the socket into place as %s: %s",
                   self->sock_path, g_strerror (errsv));
      return FALSE;
    }
  if (lstat (self->sock_path, &st) == 0)
    {
      self->sock_dev = st.st_dev;
      self->sock_ino = st.st_ino;
    }
  g_socket_set_blocking (socket, FALSE);
  self->listener = g_steal_pointer (&socket);
  watch_listener (self);
  return TRUE;
}

gboolean
rlx_local_bus_start (RlxLocalBus *self, GError **error)
{
  struct stat st;

  g_return_val_if_fail (RLX_IS_LOCAL_BUS (self), FALSE);
  g_return_val_if_fail (!self->started, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (strlen (self->sock_path) >= sizeof (((struct sockaddr_un *) NULL)->sun_path))
    {
      g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_NAME,
                   "socket path %s is longer than a Unix socket address allows (%zu bytes); "
                   "use a shorter cohort name or node id, or a shorter XDG_RUNTIME_DIR",
                   self->sock_path, sizeof (((struct sockaddr_un *) NULL)->sun_path) - 1);
      return FALSE;
    }

  if (self->cohort != NULL)
    {
      g_autofree char *parent = g_path_get_dirname (self->dir);
      const char *rt = runtime_dir ();

      /* Without XDG_RUNTIME_DIR, GLib falls back to the cache directory,
       * which may not exist yet on a fresh account. */
      if (!g_file_test (rt, G_FILE_TEST_IS_DIR) && g_getenv ("XDG_RUNTIME_DIR") == NULL)
        g_mkdir_with_parents (rt, 0700);
      if (!g_file_test (rt, G_FILE_TEST_IS_DIR))
        {
          g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_DIRECTORY,
                       "runtime directory %s does not exist; set XDG_RUNTIME_DIR to a "
                       "private directory of this user", rt);
          return FALSE;
        }
      if (!ensure_private_dir (parent, error))
        return FALSE;
    }
  if (!ensure_private_dir (self->dir, error))
    return FALSE;

  /* Our own name: stale (remove) or taken by a live process (refuse). */
  if (lstat (self->sock_path, &st) == 0)
    {
      g_autoptr(GError) dial_error = NULL;
      g_autoptr(GSocket) probe = NULL;
      gboolean refused;

      if (!S_ISSOCK (st.st_mode))
        {
          g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_IN_USE,
                       "%s exists and is not a socket; remove it or use another node id",
                       self->sock_path);
          return FALSE;
        }
      probe = dial (self->sock_path, &refused, &dial_error);
      if (probe != NULL || !refused)
        {
          if (probe != NULL)
            g_socket_close (probe, NULL);
          g_set_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_IN_USE,
                       "node id '%s' is already in use by a live process on %s; "
                       "use another node id", self->node_id, self->sock_path);
          return FALSE;
        }
      remove_stale (self, self->sock_path);
    }

  if (!bind_and_listen (self, error))
    return FALSE;
  self->started = TRUE;
  connect_to_all (self);
  return TRUE;
}

void
rlx_local_bus_rescan (RlxLocalBus *self)
{
  g_return_if_fail (RLX_IS_LOCAL_BUS (self));

  if (self->started && !self->stopped)
    connect_to_all (self);
}

static void
close_table (GHashTable *table)
{
  GHashTableIter iter;
  gpointer value;
  g_autoptr(GPtrArray) conns = g_ptr_array_new ();

  g_hash_table_iter_init (&iter, table);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    g_ptr_array_add (conns, value);
  for (guint i = 0; i < conns->len; i++)
    {
      Conn *conn = conns->pdata[i];
      /* ::closed → on_link_closed detaches and frees it. */
      if (conn->link != NULL && !rlx_link_is_closed (conn->link))
        rlx_link_close (conn->link);
    }
}

void
rlx_local_bus_stop (RlxLocalBus *self)
{
  struct stat st;

  g_return_if_fail (RLX_IS_LOCAL_BUS (self));

  if (self->stopped)
    return;
  self->stopped = TRUE;
  g_object_ref (self);

  if (self->retry_source != NULL)
    {
      g_source_destroy (self->retry_source);
      g_clear_pointer (&self->retry_source, g_source_unref);
    }
  if (self->accept_source != NULL)
    {
      g_source_destroy (self->accept_source);
      g_clear_pointer (&self->accept_source, g_source_unref);
    }
  if (self->accept_retry != NULL)
    {
      g_source_destroy (self->accept_retry);
      g_clear_pointer (&self->accept_retry, g_source_unref);
    }
  if (self->listener != NULL)
    {
      g_socket_close (self->listener, NULL);
      g_clear_object (&self->listener);
      /* Only our own socket: a new process may have replaced a stale one. */
      if (lstat (self->sock_path, &st) == 0 && st.st_dev == self->sock_dev &&
          st.st_ino == self->sock_ino)
        unlink (self->sock_path);
    }

  while (self->incoming->len > 0)
    conn_drop (self, self->incoming->pdata[self->incoming->len - 1]);
  close_table (self->outgoing);
  close_table (self->linked);
  g_object_unref (self);
}

guint
rlx_local_bus_get_n_pre_hello (RlxLocalBus *self)
{
  g_return_val_if_fail (RLX_IS_LOCAL_BUS (self), 0);
  return self->incoming->len;
}

/* ── object ──────────────────────────────────────────────────────────── */

static void
rlx_local_bus_dispose (GObject *object)
{
  RlxLocalBus *self = RLX_LOCAL_BUS (object);

  if (self->started)
    rlx_local_bus_stop (self);
  G_OBJECT_CLASS (rlx_local_bus_parent_class)->dispose (object);
}

static void
rlx_local_bus_finalize (GObject *object)
{
  RlxLocalBus *self = RLX_LOCAL_BUS (object);

  g_hash_table_unref (self->linked);
  g_hash_table_unref (self->outgoing);
  g_hash_table_unref (self->slow);
  g_ptr_array_unref (self->incoming);
  g_free (self->node_id);
  g_free (self->dir);
  g_free (self->cohort);
  g_free (self->sock_path);
  g_clear_pointer (&self->context, g_main_context_unref);
  G_OBJECT_CLASS (rlx_local_bus_parent_class)->finalize (object);
}

static void
rlx_local_bus_class_init (RlxLocalBusClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = rlx_local_bus_dispose;
  object_class->finalize = rlx_local_bus_finalize;

  signals[SIGNAL_LINK_ADDED] =
    g_signal_new ("link-added", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                  0, NULL, NULL, NULL, G_TYPE_NONE, 2, RLX_TYPE_LINK, G_TYPE_STRING);
  signals[SIGNAL_LINK_REMOVED] =
    g_signal_new ("link-removed", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                  0, NULL, NULL, NULL, G_TYPE_NONE, 2, RLX_TYPE_LINK, G_TYPE_STRING);
}

static void
rlx_local_bus_init (RlxLocalBus *self)
{
  /* Values are freed by hand (conn_free): removing an entry frees only its key. */
  self->linked = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  self->outgoing = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  self->incoming = g_ptr_array_new ();
  self->slow = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  self->max_frame = RLX_UNIX_LINK_DEFAULT_MAX_FRAME;
  self->shaped = rlx_link_shape_from_env (&self->shape);
  self->context = g_main_context_ref_thread_default ();
}

static RlxLocalBus *
bus_new (char *dir, const char *cohort, const char *node_id)
{
  RlxLocalBus *self = g_object_new (RLX_TYPE_LOCAL_BUS, NULL);
  g_autofree char *name = g_strconcat (node_id, ".sock", NULL);

  self->dir = dir;
  self->cohort = g_strdup (cohort);
  self->node_id = g_strdup (node_id);
  self->sock_path = g_build_filename (dir, name, NULL);
  return self;
}

RlxLocalBus *
rlx_local_bus_new (const char *cohort, const char *node_id, GError **error)
{
  char *dir;

  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_name ("node id", node_id, error))
    return NULL;
  dir = rlx_local_bus_dir_for_cohort (cohort, error);
  if (dir == NULL)
    return NULL;
  return bus_new (dir, cohort, node_id);
}

RlxLocalBus *
rlx_local_bus_new_for_dir (const char *dir, const char *node_id, GError **error)
{
  g_return_val_if_fail (dir != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_name ("node id", node_id, error))
    return NULL;
  if (!g_path_is_absolute (dir))
    {
      g_autofree char *cwd = g_get_current_dir ();
      return bus_new (g_build_filename (cwd, dir, NULL), NULL, node_id);
    }
  return bus_new (g_strdup (dir), NULL, node_id);
}

void
rlx_local_bus_set_max_frame (RlxLocalBus *self, gsize max_frame)
{
  g_return_if_fail (RLX_IS_LOCAL_BUS (self));
  self->max_frame = max_frame > 0 ? max_frame : RLX_UNIX_LINK_DEFAULT_MAX_FRAME;
}

void
rlx_local_bus_set_link_shape (RlxLocalBus *self, const RlxLinkShape *shape)
{
  g_return_if_fail (RLX_IS_LOCAL_BUS (self));
  self->shaped = shape != NULL;
  if (shape != NULL)
    self->shape = *shape;
}

const char *
rlx_local_bus_get_node_id (RlxLocalBus *self)
{
  g_return_val_if_fail (RLX_IS_LOCAL_BUS (self), NULL);
  return self->node_id;
}

const char *
rlx_local_bus_get_dir (RlxLocalBus *self)
{
  g_return_val_if_fail (RLX_IS_LOCAL_BUS (self), NULL);
  return self->dir;
}

const char *
rlx_local_bus_get_socket_path (RlxLocalBus *self)
{
  g_return_val_if_fail (RLX_IS_LOCAL_BUS (self), NULL);
  return self->sock_path;
}

static int
compare_strings (gconstpointer a, gconstpointer b)
{
  return strcmp (*(char * const *) a, *(char * const *) b);
}

char **
rlx_local_bus_dup_peer_ids (RlxLocalBus *self)
{
  GPtrArray *ids;
  GHashTableIter iter;
  gpointer key;

  g_return_val_if_fail (RLX_IS_LOCAL_BUS (self), NULL);

  ids = g_ptr_array_new ();
  g_hash_table_iter_init (&iter, self->linked);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    g_ptr_array_add (ids, g_strdup (key));
  g_ptr_array_sort (ids, compare_strings);
  g_ptr_array_add (ids, NULL);
  return (char **) g_ptr_array_free (ids, FALSE);
}

RlxLink *
rlx_local_bus_get_link (RlxLocalBus *self, const char *peer_id)
{
  Conn *conn;

  g_return_val_if_fail (RLX_IS_LOCAL_BUS (self), NULL);
  g_return_val_if_fail (peer_id != NULL, NULL);

  conn = g_hash_table_lookup (self->linked, peer_id);
  return conn != NULL ? conn->link : NULL;
}

char **
rlx_local_bus_list_nodes (RlxLocalBus *self)
{
  GPtrArray *ids;
  g_autoptr(GDir) dir = NULL;
  const char *name;

  g_return_val_if_fail (RLX_IS_LOCAL_BUS (self), NULL);

  ids = g_ptr_array_new ();
  dir = g_dir_open (self->dir, 0, NULL);
  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *id = NULL;

      if (name[0] == '.' || !g_str_has_suffix (name, ".sock"))
        continue;
      id = g_strndup (name, strlen (name) - strlen (".sock"));
      if (!rlx_local_bus_name_is_valid (id) || strcmp (id, self->node_id) == 0)
        continue;
      g_ptr_array_add (ids, g_steal_pointer (&id));
    }
  g_ptr_array_sort (ids, compare_strings);
  g_ptr_array_add (ids, NULL);
  return (char **) g_ptr_array_free (ids, FALSE);
}

char **
rlx_local_bus_dup_unanswered (RlxLocalBus *self)
{
  g_autoptr(GPtrArray) ids = g_ptr_array_new ();
  GHashTableIter it;
  gpointer key;
  g_autofree char *path = NULL;

  g_return_val_if_fail (RLX_IS_LOCAL_BUS (self), NULL);
  g_hash_table_iter_init (&it, self->outgoing);
  while (g_hash_table_iter_next (&it, &key, NULL))
    if (!g_hash_table_contains (self->linked, key))
      g_ptr_array_add (ids, g_strdup (key));
  g_hash_table_iter_init (&it, self->slow);
  while (g_hash_table_iter_next (&it, &key, NULL))
    {
      struct stat st;

      g_free (path);
      path = peer_socket_path (self, key);
      if (g_hash_table_contains (self->outgoing, key) || g_hash_table_contains (self->linked, key))
        continue;
      /* Its socket is gone: so is its process (it removes it, or the next
       * dial finds it stale). */
      if (lstat (path, &st) != 0)
        {
          g_hash_table_iter_remove (&it);
          continue;
        }
      g_ptr_array_add (ids, g_strdup (key));
    }
  g_ptr_array_sort (ids, compare_strings);
  g_ptr_array_add (ids, NULL);
  return (char **) g_ptr_array_free (g_steal_pointer (&ids), FALSE);
}
