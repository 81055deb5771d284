/* test-bus.c — the local bus: links once per peer, frames both ways, leave
 * and rejoin, stale sockets, directory checks, other processes joining.
 */
#include "rlx-config.h"
#include "core/p2p/rlx-local-bus.h"
#include "core/p2p/rlx-link-stream.h"
#include "core/p2p/rlx-unix-link.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <gio/gio.h>
#include <glib-unix.h>

/* ── helpers ─────────────────────────────────────────────────────────── */

typedef struct {
  char       *name;
  RlxLocalBus *bus;
  GPtrArray  *added;      /* peer ids, in order, every ::link-added */
  GPtrArray  *removed;    /* peer ids, every ::link-removed */
  GPtrArray  *frames;     /* GBytes* received on any link */
  guint       closed;     /* ::closed of links we got */
} Node;

static void
on_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  Node *node = user_data;

  g_ptr_array_add (node->frames, g_bytes_ref (frame));
}

static void
on_closed (RlxLink *link, const GError *error, gpointer user_data)
{
  Node *node = user_data;

  node->closed++;
}

static void
on_added (RlxLocalBus *bus, RlxLink *link, const char *peer, gpointer user_data)
{
  Node *node = user_data;

  g_assert_false (rlx_link_is_closed (link));
  g_assert_true (rlx_local_bus_get_link (bus, peer) == link);
  g_ptr_array_add (node->added, g_strdup (peer));
  g_signal_connect (link, "frame", G_CALLBACK (on_frame), node);
  g_signal_connect (link, "closed", G_CALLBACK (on_closed), node);
}

static void
on_removed (RlxLocalBus *bus, RlxLink *link, const char *peer, gpointer user_data)
{
  Node *node = user_data;

  g_assert_true (rlx_link_is_closed (link));
  g_assert_null (rlx_local_bus_get_link (bus, peer));
  g_ptr_array_add (node->removed, g_strdup (peer));
}

static Node *
node_new (const char *dir, const char *name)
{
  Node *node = g_new0 (Node, 1);
  g_autoptr(GError) error = NULL;

  node->name = g_strdup (name);
  node->added = g_ptr_array_new_with_free_func (g_free);
  node->removed = g_ptr_array_new_with_free_func (g_free);
  node->frames = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  node->bus = rlx_local_bus_new_for_dir (dir, name, &error);
  g_assert_no_error (error);
  g_signal_connect (node->bus, "link-added", G_CALLBACK (on_added), node);
  g_signal_connect (node->bus, "link-removed", G_CALLBACK (on_removed), node);
  return node;
}

static void
node_start (Node *node)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (rlx_local_bus_start (node->bus, &error));
  g_assert_no_error (error);
}

static void
node_free (Node *node)
{
  rlx_local_bus_stop (node->bus);
  g_object_unref (node->bus);
  g_ptr_array_unref (node->added);
  g_ptr_array_unref (node->removed);
  g_ptr_array_unref (node->frames);
  g_free (node->name);
  g_free (node);
}

static guint
count_of (GPtrArray *ids, const char *id)
{
  guint n = 0;

  for (guint i = 0; i < ids->len; i++)
    if (strcmp (ids->pdata[i], id) == 0)
      n++;
  return n;
}

static void
wait_len (GPtrArray *array, guint want)
{
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  while (array->len < want && g_get_monotonic_time () < deadline)
    g_main_context_iteration (NULL, TRUE);
  g_assert_cmpuint (array->len, >=, want);
}

static void
spin (guint ms)
{
  gint64 deadline = g_get_monotonic_time () + ms * 1000;

  while (g_get_monotonic_time () < deadline)
    {
      if (!g_main_context_iteration (NULL, FALSE))
        g_usleep (1000);
    }
}

static char *
make_dir (void)
{
  g_autoptr(GError) error = NULL;
  char *dir = g_dir_make_tmp ("rlx-bus-XXXXXX", &error);

  g_assert_no_error (error);
  g_assert_cmpint (chmod (dir, 0700), ==, 0);
  return dir;
}

static void
remove_dir (const char *path)
{
  g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
  const char *name;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *child = g_build_filename (path, name, NULL);
      unlink (child);
    }
  rmdir (path);
}

/* A socket file nobody listens on: what a killed process leaves. */
static void
make_stale_socket (const char *path)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);

  g_strlcpy (sa.sun_path, path, sizeof sa.sun_path);
  g_assert_cmpint (bind (fd, (struct sockaddr *) &sa, sizeof sa), ==, 0);
  close (fd);
  g_assert_true (g_file_test (path, G_FILE_TEST_EXISTS));
}

static GBytes *
pattern_frame (gsize len, guint seed)
{
  guint8 *data = g_malloc (len);

  for (gsize i = 0; i < len; i++)
    data[i] = (guint8) (i * 7 + seed);
  return g_bytes_new_take (data, len);
}

/* ── in-process ──────────────────────────────────────────────────────── */

static void
test_pair (void)
{
  g_autofree char *dir = make_dir ();
  Node *a = node_new (dir, "a");
  Node *b = node_new (dir, "b");
  g_autoptr(GBytes) big = pattern_frame (4 << 20, 1);
  g_autoptr(GBytes) small = pattern_frame (100, 2);
  g_auto(GStrv) peers = NULL;
  g_auto(GStrv) nodes = NULL;
  g_autofree char *b_sock = NULL;
  Node *b2;

  node_start (a);
  node_start (b);
  g_assert_true (g_file_test (rlx_local_bus_get_socket_path (a->bus), G_FILE_TEST_EXISTS));
  wait_len (a->added, 1);
  wait_len (b->added, 1);
  spin (100);
  g_assert_cmpuint (a->added->len, ==, 1);
  g_assert_cmpuint (b->added->len, ==, 1);
  g_assert_cmpstr (a->added->pdata[0], ==, "b");
  g_assert_cmpstr (b->added->pdata[0], ==, "a");

  peers = rlx_local_bus_dup_peer_ids (a->bus);
  g_assert_cmpuint (g_strv_length (peers), ==, 1);
  g_assert_cmpstr (peers[0], ==, "b");
  nodes = rlx_local_bus_list_nodes (a->bus);
  g_assert_cmpuint (g_strv_length (nodes), ==, 1);
  g_assert_cmpstr (nodes[0], ==, "b");

  /* Frames in order both ways, a 4 MB one included. */
  g_assert_true (rlx_link_send (rlx_local_bus_get_link (a->bus, "b"), small, NULL));
  g_assert_true (rlx_link_send (rlx_local_bus_get_link (a->bus, "b"), big, NULL));
  g_assert_true (rlx_link_send (rlx_local_bus_get_link (b->bus, "a"), big, NULL));
  wait_len (b->frames, 2);
  wait_len (a->frames, 1);
  g_assert_true (g_bytes_equal (b->frames->pdata[0], small));
  g_assert_true (g_bytes_equal (b->frames->pdata[1], big));
  g_assert_true (g_bytes_equal (a->frames->pdata[0], big));

  /* b leaves: a sees closed and link-removed; b's socket is gone. */
  b_sock = g_strdup (rlx_local_bus_get_socket_path (b->bus));
  node_free (b);
  g_assert_false (g_file_test (b_sock, G_FILE_TEST_EXISTS));
  wait_len (a->removed, 1);
  g_assert_cmpstr (a->removed->pdata[0], ==, "b");
  g_assert_cmpuint (a->closed, ==, 1);
  g_assert_null (rlx_local_bus_get_link (a->bus, "b"));

  /* b comes back (a new process, same id): a new link, announced once. */
  b2 = node_new (dir, "b");
  node_start (b2);
  wait_len (a->added, 2);
  wait_len (b2->added, 1);
  spin (100);
  g_assert_cmpuint (a->added->len, ==, 2);
  g_assert_cmpuint (b2->added->len, ==, 1);
  g_assert_cmpuint (count_of (a->added, "b"), ==, 2);

  node_free (b2);
  node_free (a);
  remove_dir (dir);
}

static void
test_mesh (void)
{
  g_autofree char *dir = make_dir ();
  const char *names[] = { "n3", "n1", "n4", "n2", "n0" };
  Node *nodes[G_N_ELEMENTS (names)];
  guint n = G_N_ELEMENTS (names);

  for (guint i = 0; i < n; i++)
    nodes[i] = node_new (dir, names[i]);
  /* All bind before anyone runs the main loop: every pair connects both
   * ways at once where both saw each other, and the dedupe must pick one. */
  for (guint i = 0; i < n; i++)
    node_start (nodes[i]);
  for (guint i = 0; i < n; i++)
    wait_len (nodes[i]->added, n - 1);
  spin (300);
  for (guint i = 0; i < n; i++)
    {
      g_auto(GStrv) peers = rlx_local_bus_dup_peer_ids (nodes[i]->bus);

      g_assert_cmpuint (nodes[i]->added->len, ==, n - 1);
      g_assert_cmpuint (nodes[i]->removed->len, ==, 0);
      g_assert_cmpuint (g_strv_length (peers), ==, n - 1);
      for (guint j = 0; j < n; j++)
        if (j != i)
          g_assert_cmpuint (count_of (nodes[i]->added, names[j]), ==, 1);
    }
  /* A frame from every node to every other arrives once. */
  for (guint i = 0; i < n; i++)
    for (guint j = 0; j < n; j++)
      if (j != i)
        {
          g_autoptr(GBytes) f = g_bytes_new (names[i], strlen (names[i]));
          g_assert_true (rlx_link_send (rlx_local_bus_get_link (nodes[i]->bus, names[j]), f, NULL));
        }
  for (guint i = 0; i < n; i++)
    wait_len (nodes[i]->frames, n - 1);
  spin (50);
  for (guint i = 0; i < n; i++)
    g_assert_cmpuint (nodes[i]->frames->len, ==, n - 1);

  for (guint i = 0; i < n; i++)
    node_free (nodes[i]);
  remove_dir (dir);
}

/* Here the simultaneous connect is forced: every node has dialled every
 * other before any main loop runs, so each pair has two connections with
 * hellos crossing, and exactly one must survive, the same one on both sides. */
static void
test_simultaneous (void)
{
  const char *sets[][3] = { { "x", "y", NULL }, { "y", "x", NULL }, { "b", "c", "a" } };

  for (guint s = 0; s < G_N_ELEMENTS (sets); s++)
    {
      g_autofree char *dir = make_dir ();
      Node *nodes[3] = { NULL };
      guint n = sets[s][2] ? 3 : 2;

      for (guint i = 0; i < n; i++)
        {
          nodes[i] = node_new (dir, sets[s][i]);
          node_start (nodes[i]);
        }
      for (guint i = 0; i < n; i++)
        rlx_local_bus_rescan (nodes[i]->bus);   /* dial the later ones too */
      for (guint i = 0; i < n; i++)
        wait_len (nodes[i]->added, n - 1);
      spin (300);
      for (guint i = 0; i < n; i++)
        {
          g_assert_cmpuint (nodes[i]->added->len, ==, n - 1);
          g_assert_cmpuint (nodes[i]->removed->len, ==, 0);
          g_assert_cmpuint (nodes[i]->closed, ==, 0);
          for (guint j = 0; j < n; j++)
            if (j != i)
              {
                RlxLink *link = rlx_local_bus_get_link (nodes[i]->bus, sets[s][j]);
                g_autoptr(GBytes) f = g_bytes_new_static ("hi", 2);

                g_assert_nonnull (link);
                g_assert_true (rlx_link_send (link, f, NULL));
              }
        }
      for (guint i = 0; i < n; i++)
        wait_len (nodes[i]->frames, n - 1);
      for (guint i = 0; i < n; i++)
        node_free (nodes[i]);
      remove_dir (dir);
    }
}

static void
test_stale (void)
{
  g_autofree char *dir = make_dir ();
  g_autofree char *ghost = g_build_filename (dir, "ghost.sock", NULL);
  g_autofree char *own = g_build_filename (dir, "a.sock", NULL);
  g_autofree char *not_socket = g_build_filename (dir, "notes.txt", NULL);
  Node *a;

  make_stale_socket (ghost);
  make_stale_socket (own);                 /* our own id, left by a dead run */
  g_assert_true (g_file_set_contents (not_socket, "keep me", -1, NULL));

  a = node_new (dir, "a");
  node_start (a);
  g_assert_false (g_file_test (ghost, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (own, G_FILE_TEST_EXISTS));   /* ours now, live */
  g_assert_true (g_file_test (not_socket, G_FILE_TEST_EXISTS));
  spin (50);
  g_assert_cmpuint (a->added->len, ==, 0);
  node_free (a);
  g_assert_false (g_file_test (own, G_FILE_TEST_EXISTS));
  remove_dir (dir);
}

static void
test_in_use (void)
{
  g_autofree char *dir = make_dir ();
  Node *a = node_new (dir, "a");
  g_autoptr(RlxLocalBus) again = NULL;
  g_autoptr(GError) error = NULL;

  node_start (a);
  again = rlx_local_bus_new_for_dir (dir, "a", &error);
  g_assert_no_error (error);
  g_assert_false (rlx_local_bus_start (again, &error));
  g_assert_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_IN_USE);
  g_assert_nonnull (strstr (error->message, "already in use"));
  /* The live one is untouched. */
  g_assert_true (g_file_test (rlx_local_bus_get_socket_path (a->bus), G_FILE_TEST_EXISTS));
  spin (50);
  g_assert_cmpuint (a->added->len, ==, 0);
  node_free (a);
  remove_dir (dir);
}

static void
expect_dir_refused (const char *dir, const char *fragment)
{
  g_autoptr(RlxLocalBus) bus = NULL;
  g_autoptr(GError) error = NULL;

  bus = rlx_local_bus_new_for_dir (dir, "a", &error);
  g_assert_no_error (error);
  g_assert_false (rlx_local_bus_start (bus, &error));
  g_assert_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_DIRECTORY);
  g_assert_nonnull (strstr (error->message, fragment));
}

static void
test_bad_dir (void)
{
  g_autofree char *base = make_dir ();
  g_autofree char *open_dir = g_build_filename (base, "open", NULL);
  g_autofree char *link = g_build_filename (base, "link", NULL);
  g_autofree char *theirs = g_build_filename (base, "theirs", NULL);
  g_autofree char *file = g_build_filename (base, "file", NULL);
  g_autofree char *fresh = g_build_filename (base, "fresh", NULL);
  struct stat st;

  g_assert_cmpint (mkdir (open_dir, 0700), ==, 0);
  g_assert_cmpint (chmod (open_dir, 0755), ==, 0);
  expect_dir_refused (open_dir, "chmod 700");
  g_assert_cmpint (chmod (open_dir, 0700), ==, 0);
  {
    /* fixed: accepted */
    g_autoptr(RlxLocalBus) bus = rlx_local_bus_new_for_dir (open_dir, "a", NULL);
    g_autoptr(GError) error = NULL;
    g_assert_true (rlx_local_bus_start (bus, &error));
    g_assert_no_error (error);
    rlx_local_bus_stop (bus);
  }

  g_assert_cmpint (symlink (open_dir, link), ==, 0);
  expect_dir_refused (link, "not a directory");

  g_assert_true (g_file_set_contents (file, "", 0, NULL));
  expect_dir_refused (file, "not a directory");

  /* Created when missing, mode 0700. */
  {
    g_autoptr(RlxLocalBus) bus = rlx_local_bus_new_for_dir (fresh, "a", NULL);
    g_autoptr(GError) error = NULL;
    g_assert_true (rlx_local_bus_start (bus, &error));
    g_assert_cmpint (lstat (fresh, &st), ==, 0);
    g_assert_cmpint (st.st_mode & 07777, ==, 0700);
    rlx_local_bus_stop (bus);
  }

  if (getuid () == 0)
    {
      g_assert_cmpint (mkdir (theirs, 0700), ==, 0);
      g_assert_cmpint (chown (theirs, 65534, 65534), ==, 0);
      expect_dir_refused (theirs, "belongs to uid 65534");
    }
  else
    g_test_message ("not root: the other-owner case is not exercised");

  rmdir (theirs);
  rmdir (fresh);
  unlink (link);
  unlink (file);
  rmdir (open_dir);
  rmdir (base);
}

static void
test_default_dir (void)
{
  g_autofree char *rt = make_dir ();
  g_autofree char *old = g_strdup (g_getenv ("XDG_RUNTIME_DIR"));
  g_autofree char *expect = g_build_filename (rt, "rlx-cluster", "my-cohort", NULL);
  g_autofree char *parent = g_build_filename (rt, "rlx-cluster", NULL);
  g_autofree char *dir = NULL;
  g_autoptr(RlxLocalBus) bus = NULL;
  g_autoptr(GError) error = NULL;
  struct stat st;

  g_setenv ("XDG_RUNTIME_DIR", rt, TRUE);
  dir = rlx_local_bus_dir_for_cohort ("my-cohort", &error);
  g_assert_no_error (error);
  g_assert_cmpstr (dir, ==, expect);

  bus = rlx_local_bus_new ("my-cohort", "node-1", &error);
  g_assert_no_error (error);
  g_assert_true (rlx_local_bus_start (bus, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (rlx_local_bus_get_dir (bus), ==, expect);
  g_assert_cmpint (lstat (parent, &st), ==, 0);
  g_assert_cmpint (st.st_mode & 07777, ==, 0700);
  g_assert_cmpint (lstat (expect, &st), ==, 0);
  g_assert_cmpint (st.st_mode & 07777, ==, 0700);
  rlx_local_bus_stop (bus);
  g_clear_object (&bus);

  /* A parent directory others can enter is refused too. */
  g_assert_cmpint (chmod (parent, 0755), ==, 0);
  bus = rlx_local_bus_new ("my-cohort", "node-1", &error);
  g_assert_false (rlx_local_bus_start (bus, &error));
  g_assert_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_DIRECTORY);
  g_clear_error (&error);

  /* Names that would escape the directory or break the socket path. */
  g_assert_null (rlx_local_bus_new ("../etc", "n", &error));
  g_assert_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_NAME);
  g_clear_error (&error);
  g_assert_null (rlx_local_bus_new ("ok", "a/b", &error));
  g_assert_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_NAME);
  g_clear_error (&error);
  g_assert_null (rlx_local_bus_new ("..", "n", &error));
  g_assert_error (error, RLX_LOCAL_BUS_ERROR, RLX_LOCAL_BUS_ERROR_NAME);
  g_clear_error (&error);
  g_assert_false (rlx_local_bus_name_is_valid (""));
  g_assert_true (rlx_local_bus_name_is_valid ("node-7_a.b"));

  if (old != NULL)
    g_setenv ("XDG_RUNTIME_DIR", old, TRUE);
  else
    g_unsetenv ("XDG_RUNTIME_DIR");
  rmdir (expect);
  rmdir (parent);
  rmdir (rt);
}

/* A raw client speaking the handshake by hand: the wire format is
 * [u32 LE length][bytes], first frame "rlx-bus/1 hello ID". */
static int
raw_connect (const char *path)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

  g_strlcpy (sa.sun_path, path, sizeof sa.sun_path);
  g_assert_cmpint (connect (fd, (struct sockaddr *) &sa, sizeof sa), ==, 0);
  return fd;
}

static void
raw_send_frame (int fd, const char *text)
{
  guint32 len = GUINT32_TO_LE ((guint32) strlen (text));

  g_assert_cmpint (write (fd, &len, 4), ==, 4);
  g_assert_cmpint (write (fd, text, strlen (text)), ==, (gssize) strlen (text));
}

/* Run the main loop until @fd is readable, then read what is there. */
static GByteArray *
raw_read_until_eof_or (int fd, gsize want)
{
  GByteArray *got = g_byte_array_new ();
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  g_unix_set_fd_nonblocking (fd, TRUE, NULL);
  while (got->len < want && g_get_monotonic_time () < deadline)
    {
      guint8 buf[4096];
      gssize n = read (fd, buf, sizeof buf);

      if (n == 0)
        break;   /* EOF */
      if (n > 0)
        g_byte_array_append (got, buf, n);
      else
        g_main_context_iteration (NULL, FALSE), g_usleep (1000);
    }
  return got;
}

#define SILENT 200

/* Run the main loop for @ms without blocking, noting the most
 * connections @node's bus held without a hello. */
static void
spin_watching_pre_hello (Node *node, guint ms, guint *most)
{
  gint64 deadline = g_get_monotonic_time () + ms * 1000;

  while (g_get_monotonic_time () < deadline)
    {
      *most = MAX (*most, rlx_local_bus_get_n_pre_hello (node->bus));
      if (!g_main_context_iteration (NULL, FALSE))
        g_usleep (1000);
    }
  *most = MAX (*most, rlx_local_bus_get_n_pre_hello (node->bus));
}

/* A process of the same user opens 200 connections to a node's socket and
 * says nothing: the node holds at most 64 of them (one more closes the one
 * that waited longest), and a real node that joins meanwhile links at
 * once; the silent rest go at the hello deadline. */
static void
test_pre_hello_cap (void)
{
  g_autofree char *dir = make_dir ();
  Node *a = node_new (dir, "a");
  Node *b;
  int fds[SILENT];
  guint most = 0, closed = 0;
  const char *path;

  node_start (a);
  path = rlx_local_bus_get_socket_path (a->bus);
  for (guint i = 0; i < SILENT; i++)
    {
      fds[i] = raw_connect (path);
      /* the backlog is 64: let the node accept as we go */
      if (i % 16 == 15)
        spin_watching_pre_hello (a, 20, &most);
    }
  spin_watching_pre_hello (a, 500, &most);
  g_test_message ("at most %u without a hello", most);
  g_assert_cmpuint (most, <=, 64);
  g_assert_cmpuint (rlx_local_bus_get_n_pre_hello (a->bus), ==, 64);
  for (guint i = 0; i < SILENT; i++)
    {
      char c;

      if (recv (fds[i], &c, 1, MSG_DONTWAIT) == 0)
        closed++;
    }
  g_assert_cmpuint (closed, ==, SILENT - 64);

  b = node_new (dir, "b");
  node_start (b);
  wait_len (b->added, 1);
  wait_len (a->added, 1);
  g_assert_cmpstr (a->added->pdata[0], ==, "b");
  g_assert_cmpuint (rlx_local_bus_get_n_pre_hello (a->bus), <=, 64);

  for (guint i = 0; i < SILENT; i++)
    close (fds[i]);
  node_free (b);
  node_free (a);
  remove_dir (dir);
}

static guint accept_failures;

static GLogWriterOutput
count_accept_failures (GLogLevelFlags level, const GLogField *fields, gsize n, gpointer data)
{
  for (gsize i = 0; i < n; i++)
    if (strcmp (fields[i].key, "MESSAGE") == 0 && strstr (fields[i].value, "cannot take a connection"))
      accept_failures++;
  return g_log_writer_default (level, fields, n, data);
}

/* Out of descriptors, with connections in the backlog: the node says so
 * once, gives a descriptor back (the oldest connection without a hello)
 * and looks again after a backoff, instead of spinning on a listener that
 * stays readable; once the connections go, a real node links. */
static void
test_accept_out_of_fds (void)
{
  if (g_test_subprocess ())
    {
      g_autofree char *dir = make_dir ();
      Node *a = node_new (dir, "a");
      Node *b;
      int fds[40], top = 0;
      struct rlimit rl;
      guint iterations = 0;
      gint64 end;

      g_log_set_always_fatal (G_LOG_FATAL_MASK);
      g_log_set_writer_func (count_accept_failures, NULL, NULL);
      node_start (a);
      for (guint i = 0; i < G_N_ELEMENTS (fds); i++)
        {
          fds[i] = raw_connect (rlx_local_bus_get_socket_path (a->bus));
          top = MAX (top, fds[i]);
        }
      /* room for a few accepted connections, not for 40 */
      g_assert_cmpint (getrlimit (RLIMIT_NOFILE, &rl), ==, 0);
      rl.rlim_cur = top + 12;
      g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &rl), ==, 0);
      end = g_get_monotonic_time () + G_USEC_PER_SEC;
      while (g_get_monotonic_time () < end)
        {
          g_main_context_iteration (NULL, FALSE);
          iterations++;
          g_usleep (100);
        }
      g_test_message ("1 s out of descriptors: %u accept failures said, %u loop turns",
                      accept_failures, iterations);
      g_assert_cmpuint (accept_failures, ==, 1);
      g_assert_cmpuint (rlx_local_bus_get_n_pre_hello (a->bus), >, 0);

      for (guint i = 0; i < G_N_ELEMENTS (fds); i++)
        close (fds[i]);
      rl.rlim_cur = rl.rlim_max;
      g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &rl), ==, 0);
      b = node_new (dir, "b");
      node_start (b);
      wait_len (a->added, 1);
      g_assert_cmpstr (a->added->pdata[0], ==, "b");
      node_free (b);
      node_free (a);
      remove_dir (dir);
      return;
    }
  g_test_trap_subprocess (NULL, 30 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_INHERIT_STDERR);
  g_test_trap_assert_passed ();
}

static void
test_handshake_wire (void)
{
  g_autofree char *dir = make_dir ();
  Node *a = node_new (dir, "a");
  const char *path;
  int fd;

  node_start (a);
  path = rlx_local_bus_get_socket_path (a->bus);

  /* Not a bus hello: closed, no link. */
  g_test_expect_message (NULL, G_LOG_LEVEL_WARNING, "*did not open with a bus hello*");
  fd = raw_connect (path);
  raw_send_frame (fd, "GET / HTTP/1.1");
  {
    g_autoptr(GByteArray) got = raw_read_until_eof_or (fd, 1 << 20);
    g_assert_cmpuint (got->len, ==, 0);
  }
  close (fd);
  g_test_assert_expected_messages ();

  /* A hello with a node id that could escape the directory: declined. */
  g_test_expect_message (NULL, G_LOG_LEVEL_WARNING, "*did not open with a bus hello*");
  fd = raw_connect (path);
  raw_send_frame (fd, "rlx-bus/1 hello ../x");
  {
    g_autoptr(GByteArray) got = raw_read_until_eof_or (fd, 1 << 20);
    g_assert_cmpuint (got->len, ==, 0);
  }
  close (fd);
  g_test_assert_expected_messages ();

  /* Our own id: declined with a reason. */
  fd = raw_connect (path);
  raw_send_frame (fd, "rlx-bus/1 hello a");
  {
    g_autoptr(GByteArray) got = raw_read_until_eof_or (fd, 1 << 20);
    g_autofree char *text = NULL;

    g_assert_cmpuint (got->len, >, 4);
    text = g_strndup ((char *) got->data + 4, got->len - 4);
    g_assert_true (g_str_has_prefix (text, "rlx-bus/1 decline "));
  }
  close (fd);
  spin (50);
  g_assert_cmpuint (a->added->len, ==, 0);

  /* A good hello: "accept a", then a link the coordinator can use. */
  fd = raw_connect (path);
  raw_send_frame (fd, "rlx-bus/1 hello zed");
  {
    const char *expect = "rlx-bus/1 accept a";
    g_autoptr(GByteArray) got = raw_read_until_eof_or (fd, 4 + strlen (expect));

    g_assert_cmpuint (got->len, ==, 4 + strlen (expect));
    /* one record (rlx-link-stream.h): its length, no MORE, no SHM */
    g_assert_cmpuint (GUINT32_FROM_LE (*(guint32 *) got->data) &
                      ~(guint32) RLX_LINK_STREAM_BULK, ==, strlen (expect));
    g_assert_cmpmem (got->data + 4, got->len - 4, expect, strlen (expect));
  }
  wait_len (a->added, 1);
  g_assert_cmpstr (a->added->pdata[0], ==, "zed");
  raw_send_frame (fd, "payload");
  wait_len (a->frames, 1);
  g_assert_cmpmem (g_bytes_get_data (a->frames->pdata[0], NULL),
                   g_bytes_get_size (a->frames->pdata[0]), "payload", 7);
  close (fd);
  wait_len (a->removed, 1);

  node_free (a);
  remove_dir (dir);
}

/* ── other processes ─────────────────────────────────────────────────── */

typedef struct {
  GSubprocess      *proc;
  GDataInputStream *out;
  GPtrArray        *lines;
  GCancellable     *cancel;
  gboolean          eof;
} Helper;

static void
on_line (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Helper *h = user_data;
  g_autoptr(GError) error = NULL;
  char *line = g_data_input_stream_read_line_finish (G_DATA_INPUT_STREAM (source), result,
                                                     NULL, &error);

  if (line == NULL)
    {
      if (!g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
        h->eof = TRUE;
      return;
    }
  g_ptr_array_add (h->lines, line);
  g_data_input_stream_read_line_async (h->out, G_PRIORITY_DEFAULT, h->cancel, on_line, h);
}

/* @shape: RLX_LINK_SHAPE for the helper (NULL: unset). */
static Helper *
helper_spawn_shaped (const char *dir, const char *id, const char *shape)
{
  /* Built beside this test. */
  g_autofree char *self_exe = g_file_read_link ("/proc/self/exe", NULL);
  g_autofree char *self_dir = g_path_get_dirname (self_exe);
  g_autofree char *exe = g_build_filename (self_dir, "p2p-helper", NULL);
  g_autoptr(GError) error = NULL;
  Helper *h = g_new0 (Helper, 1);

  h->lines = g_ptr_array_new_with_free_func (g_free);
  h->cancel = g_cancellable_new ();
  {
    g_autoptr(GSubprocessLauncher) launcher =
      g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDIN_PIPE | G_SUBPROCESS_FLAGS_STDOUT_PIPE);

    if (shape != NULL)
      g_subprocess_launcher_setenv (launcher, "RLX_LINK_SHAPE", shape, TRUE);
    else
      g_subprocess_launcher_unsetenv (launcher, "RLX_LINK_SHAPE");
    h->proc = g_subprocess_launcher_spawn (launcher, &error, exe, "node", dir, id, NULL);
  }
  g_assert_no_error (error);
  h->out = g_data_input_stream_new (g_subprocess_get_stdout_pipe (h->proc));
  g_data_input_stream_read_line_async (h->out, G_PRIORITY_DEFAULT, h->cancel, on_line, h);
  return h;
}

static Helper *
helper_spawn (const char *dir, const char *id)
{
  return helper_spawn_shaped (dir, id, NULL);
}

static guint
helper_count (Helper *h, const char *line)
{
  guint n = 0;

  for (guint i = 0; i < h->lines->len; i++)
    if (strcmp (h->lines->pdata[i], line) == 0)
      n++;
  return n;
}

static void
helper_wait_line (Helper *h, const char *line, guint times)
{
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  while (helper_count (h, line) < times && !h->eof && g_get_monotonic_time () < deadline)
    g_main_context_iteration (NULL, TRUE);
  if (helper_count (h, line) < times)
    {
      for (guint i = 0; i < h->lines->len; i++)
        g_test_message ("helper said: %s", (char *) h->lines->pdata[i]);
      g_error ("helper never said '%s' %u times", line, times);
    }
}

static void
helper_free (Helper *h)
{
  g_cancellable_cancel (h->cancel);
  g_subprocess_force_exit (h->proc);
  g_subprocess_wait (h->proc, NULL, NULL);
  g_object_unref (h->cancel);
  g_object_unref (h->out);
  g_object_unref (h->proc);
  g_ptr_array_unref (h->lines);
  g_free (h);
}

/* Clean exit: close its stdin and wait; it removes its socket. */
static void
helper_quit (Helper *h)
{
  g_autoptr(GError) error = NULL;

  g_output_stream_close (g_subprocess_get_stdin_pipe (h->proc), NULL, NULL);
  g_assert_true (g_subprocess_wait_check (h->proc, NULL, &error));
  g_assert_no_error (error);
}

static void
test_processes (void)
{
  g_autofree char *dir = make_dir ();
  const char *ids[] = { "p1", "p2", "p3" };
  Helper *helpers[3];
  g_autofree char *p2_sock = g_build_filename (dir, "p2.sock", NULL);
  g_autoptr(GBytes) big = pattern_frame (4 << 20, 9);
  Node *m = node_new (dir, "m");
  Node *late;

  /* Three processes and this one, all at once: races galore. */
  for (guint i = 0; i < 3; i++)
    helpers[i] = helper_spawn (dir, ids[i]);
  node_start (m);

  wait_len (m->added, 3);
  for (guint i = 0; i < 3; i++)
    {
      helper_wait_line (helpers[i], "added m", 1);
      for (guint j = 0; j < 3; j++)
        if (j != i)
          {
            g_autofree char *line = g_strdup_printf ("added %s", ids[j]);
            helper_wait_line (helpers[i], line, 1);
          }
    }
  spin (300);
  g_assert_cmpuint (m->added->len, ==, 3);
  for (guint i = 0; i < 3; i++)
    {
      guint added = 0;

      g_assert_cmpuint (count_of (m->added, ids[i]), ==, 1);
      for (guint l = 0; l < helpers[i]->lines->len; l++)
        if (g_str_has_prefix (helpers[i]->lines->pdata[l], "added "))
          added++;
      g_assert_cmpuint (added, ==, 3);   /* exactly once per peer */
      g_assert_cmpuint (helper_count (helpers[i], "ready"), ==, 1);
    }

  /* A 4 MB frame to p1 comes back intact (echo). */
  g_assert_true (rlx_link_send (rlx_local_bus_get_link (m->bus, "p1"), big, NULL));
  wait_len (m->frames, 1);
  g_assert_true (g_bytes_equal (m->frames->pdata[0], big));

  /* kill -9 p2: everyone drops it; its socket stays behind, stale. */
  g_subprocess_send_signal (helpers[1]->proc, SIGKILL);
  g_assert_true (g_subprocess_wait (helpers[1]->proc, NULL, NULL));   /* all its fds closed */
  wait_len (m->removed, 1);
  g_assert_cmpstr (m->removed->pdata[0], ==, "p2");
  helper_wait_line (helpers[0], "removed p2", 1);
  helper_wait_line (helpers[2], "removed p2", 1);
  g_assert_true (g_file_test (p2_sock, G_FILE_TEST_EXISTS));

  /* A newcomer removes the dead process's socket and links to the rest. */
  late = node_new (dir, "late");
  node_start (late);
  g_assert_false (g_file_test (p2_sock, G_FILE_TEST_EXISTS));
  wait_len (late->added, 3);
  helper_wait_line (helpers[0], "added late", 1);
  helper_wait_line (helpers[2], "added late", 1);
  wait_len (m->added, 4);
  g_assert_cmpuint (count_of (late->added, "p2"), ==, 0);

  /* Clean exits remove their sockets; the others see them go. */
  helper_quit (helpers[0]);
  helper_quit (helpers[2]);
  wait_len (m->removed, 3);
  {
    g_auto(GStrv) left = rlx_local_bus_list_nodes (m->bus);
    g_assert_cmpuint (g_strv_length (left), ==, 1);
    g_assert_cmpstr (left[0], ==, "late");
  }

  for (guint i = 0; i < 3; i++)
    helper_free (helpers[i]);
  node_free (late);
  node_free (m);
  remove_dir (dir);
}

/* RLX_LINK_SHAPE in another process's environment shapes what it receives:
 * a frame echoed by a helper that has "delay=60ms" comes back no sooner
 * than 60 ms (a lower bound: never flaky), and still whole. */
static void
test_shape_from_env (void)
{
  g_autofree char *dir = make_dir ();
  Helper *h = helper_spawn_shaped (dir, "slow", "delay=60ms");
  Node *m = node_new (dir, "m");
  g_autoptr(GBytes) f = pattern_frame (300000, 4);
  gint64 t0;

  node_start (m);
  wait_len (m->added, 1);
  helper_wait_line (h, "added m", 1);
  t0 = g_get_monotonic_time ();
  g_assert_true (rlx_link_send (rlx_local_bus_get_link (m->bus, "slow"), f, NULL));
  wait_len (m->frames, 1);
  g_assert_cmpint (g_get_monotonic_time () - t0, >=, 60000);
  g_assert_true (g_bytes_equal (m->frames->pdata[0], f));
  helper_quit (h);
  helper_free (h);
  node_free (m);
  remove_dir (dir);
}

/* A shaped bus: links come out wrapped, and what arrives is delayed; the
 * other side, unshaped, is not. Leaving still reaches the shaped side. */
static void
test_shaped (void)
{
  g_autofree char *dir = make_dir ();
  Node *a = node_new (dir, "a");
  Node *b = node_new (dir, "b");
  g_autoptr(GBytes) f = pattern_frame (1000, 3);
  RlxLinkShape shape;
  RlxLink *to_a;
  gint64 arrived, visible;

  g_assert_true (rlx_link_shape_parse ("delay=30ms,rate=10MB/s", &shape, NULL));
  rlx_local_bus_set_link_shape (b->bus, &shape);
  node_start (a);
  node_start (b);
  wait_len (a->added, 1);
  wait_len (b->added, 1);
  to_a = rlx_local_bus_get_link (b->bus, "a");
  g_assert_true (RLX_IS_SHAPED_LINK (to_a));
  g_assert_false (RLX_IS_SHAPED_LINK (rlx_local_bus_get_link (a->bus, "b")));

  g_assert_true (rlx_link_send (rlx_local_bus_get_link (a->bus, "b"), f, NULL));
  wait_len (b->frames, 1);
  g_assert_true (g_bytes_equal (b->frames->pdata[0], f));
  rlx_shaped_link_get_rx_times (RLX_SHAPED_LINK (to_a), &arrived, &visible);
  g_assert_cmpint (visible - arrived, ==, 30000 + 100);   /* delay + 1000 B at 10 MB/s */

  g_assert_true (rlx_link_send (to_a, f, NULL));
  wait_len (a->frames, 1);

  node_free (a);
  wait_len (b->removed, 1);
  g_assert_cmpstr (b->removed->pdata[0], ==, "a");
  node_free (b);
  remove_dir (dir);
}

int
main (int argc, char **argv)
{
  signal (SIGPIPE, SIG_IGN);
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/p2p/bus/pair", test_pair);
  g_test_add_func ("/p2p/bus/mesh", test_mesh);
  g_test_add_func ("/p2p/bus/simultaneous", test_simultaneous);
  g_test_add_func ("/p2p/bus/stale", test_stale);
  g_test_add_func ("/p2p/bus/in-use", test_in_use);
  g_test_add_func ("/p2p/bus/bad-dir", test_bad_dir);
  g_test_add_func ("/p2p/bus/default-dir", test_default_dir);
  g_test_add_func ("/p2p/bus/handshake-wire", test_handshake_wire);
  g_test_add_func ("/p2p/bus/pre-hello-cap", test_pre_hello_cap);
  g_test_add_func ("/p2p/bus/accept-out-of-fds", test_accept_out_of_fds);
  g_test_add_func ("/p2p/bus/processes", test_processes);
  g_test_add_func ("/p2p/bus/shaped", test_shaped);
  g_test_add_func ("/p2p/bus/shape-from-env", test_shape_from_env);

  return g_test_run ();
}
