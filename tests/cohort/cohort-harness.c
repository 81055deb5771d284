/* cohort-harness.c — see cohort-harness.h */
#include "rlx-config.h"
#include "cohort-harness.h"
#include "core/p2p/rlx-unix-link.h"

#include <glib/gstdio.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

static void
rm_rf (const char *path)
{
  g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
  const char *name;

  if (dir)
    {
      while ((name = g_dir_read_name (dir)))
        {
          g_autofree char *child = g_build_filename (path, name, NULL);
          if (g_file_test (child, G_FILE_TEST_IS_DIR) && !g_file_test (child, G_FILE_TEST_IS_SYMLINK))
            rm_rf (child);
          else
            g_unlink (child);
        }
    }
  g_rmdir (path);
}

Harness *
harness_new (void)
{
  Harness *h = g_new0 (Harness, 1);
  g_autoptr(GError) error = NULL;

  h->dir = g_dir_make_tmp ("rlx-cohort-XXXXXX", &error);
  g_assert_no_error (error);
  h->run_dir = g_build_filename (h->dir, "run", NULL);
  h->data_dir = g_build_filename (h->dir, "data", NULL);
  g_assert_cmpint (g_mkdir (h->run_dir, 0700), ==, 0);
  g_assert_cmpint (g_mkdir (h->data_dir, 0700), ==, 0);
  h->nodes = g_ptr_array_new ();
  h->env = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  h->started = g_get_monotonic_time ();
  return h;
}

void
harness_setenv (Harness *h, const char *key, const char *value)
{
  if (value)
    g_hash_table_replace (h->env, g_strdup (key), g_strdup (value));
  else
    g_hash_table_remove (h->env, key);
}

static void
node_free (Node *n)
{
  g_free (n->label);
  g_clear_object (&n->proc);
  g_clear_object (&n->out);
  g_ptr_array_unref (n->events);
  g_array_unref (n->times);
  g_free (n);
}

void
harness_free (Harness *h)
{
  for (guint i = 0; i < h->nodes->len; i++)
    {
      Node *n = g_ptr_array_index (h->nodes, i);
      if (!n->exited)
        g_subprocess_force_exit (n->proc);
    }
  for (guint i = 0; i < h->nodes->len; i++)
    node_wait_exit (g_ptr_array_index (h->nodes, i), 5000);
  /* Drain callbacks that still reference the nodes. */
  while (g_main_context_iteration (NULL, FALSE))
    ;
  for (guint i = 0; i < h->nodes->len; i++)
    node_free (g_ptr_array_index (h->nodes, i));
  g_ptr_array_unref (h->nodes);
  g_hash_table_unref (h->env);
  rm_rf (h->dir);
  g_free (h->dir);
  g_free (h->run_dir);
  g_free (h->data_dir);
  g_free (h);
}

static void read_next (Node *n);

static void
on_line (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Node *n = user_data;
  g_autoptr(GError) error = NULL;
  g_autofree char *line = g_data_input_stream_read_line_finish_utf8 (G_DATA_INPUT_STREAM (source),
                                                                     result, NULL, &error);
  g_autoptr(JsonParser) parser = NULL;

  if (line == NULL)
    {
      if (error)
        g_test_message ("%s: reading stdout: %s", n->label, error->message);
      n->eof = TRUE;
      return;
    }
  parser = json_parser_new ();
  if (json_parser_load_from_data (parser, line, -1, NULL) &&
      JSON_NODE_HOLDS_OBJECT (json_parser_get_root (parser)))
    {
      gint64 now = g_get_monotonic_time ();
      g_ptr_array_add (n->events, json_object_ref (json_node_get_object (json_parser_get_root (parser))));
      g_array_append_val (n->times, now);
    }
  else
    g_test_message ("%s: not a JSON line: %s", n->label, line);
  read_next (n);
}

static void
read_next (Node *n)
{
  g_data_input_stream_read_line_async (n->out, G_PRIORITY_DEFAULT, NULL, on_line, n);
}

static void
on_node_exit (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Node *n = user_data;

  g_subprocess_wait_finish (G_SUBPROCESS (source), result, NULL);
  n->exited = TRUE;
  if (g_subprocess_get_if_exited (n->proc))
    n->exit_code = g_subprocess_get_exit_status (n->proc);
  else if (g_subprocess_get_if_signaled (n->proc))
    {
      n->signaled = TRUE;
      n->term_sig = g_subprocess_get_term_sig (n->proc);
    }
}

/* In the child, before exec: it dies with the test. A test that fails an
 * assertion aborts without harness_free(); its nodes must not live on (a
 * running one trains for LONG_RUN steps, a stopped one never exits), as they
 * hold meson's output pipe open and hang the whole run until its timeout. */
static void
die_with_test (gpointer user_data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
  if (getppid () != (pid_t) GPOINTER_TO_INT (user_data))
    _exit (127);   /* the test is already gone */
}

static Node *
spawn_argv (Harness *h, const char *label, GPtrArray *argv)
{
  g_autoptr(GSubprocessLauncher) l = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE);
  g_autoptr(GError) error = NULL;
  Node *n = g_new0 (Node, 1);

  g_subprocess_launcher_setenv (l, "XDG_RUNTIME_DIR", h->run_dir, TRUE);
  g_subprocess_launcher_setenv (l, "XDG_DATA_HOME", h->data_dir, TRUE);
  g_subprocess_launcher_setenv (l, "OPENBLAS_NUM_THREADS", "1", TRUE);
  g_subprocess_launcher_set_child_setup (l, die_with_test, GINT_TO_POINTER (getpid ()), NULL);
  {
    GHashTableIter it;
    gpointer k, v;
    g_hash_table_iter_init (&it, h->env);
    while (g_hash_table_iter_next (&it, &k, &v))
      g_subprocess_launcher_setenv (l, k, v, TRUE);
  }
  g_ptr_array_add (argv, NULL);
  n->label = g_strdup (label);
  n->events = g_ptr_array_new_with_free_func ((GDestroyNotify) json_object_unref);
  n->times = g_array_new (FALSE, FALSE, sizeof (gint64));
  n->spawned = g_get_monotonic_time ();
  n->t0 = h->started;
  n->proc = g_subprocess_launcher_spawnv (l, (const char * const *) argv->pdata, &error);
  g_assert_no_error (error);
  n->out = g_data_input_stream_new (g_subprocess_get_stdout_pipe (n->proc));
  read_next (n);
  g_subprocess_wait_async (n->proc, NULL, on_node_exit, n);
  g_ptr_array_add (h->nodes, n);
  return n;
}

static const char *
rank_path (void)
{
  const char *rank = g_getenv ("RLX_RANK");

  if (rank == NULL)
    g_error ("RLX_RANK is not set: run the cohort tests through meson test");
  return rank;
}

Node *
harness_spawn (Harness *h, const char *label, ...)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  va_list ap;
  const char *a;

  g_ptr_array_add (argv, (char *) rank_path ());
  va_start (ap, label);
  while ((a = va_arg (ap, const char *)))
    g_ptr_array_add (argv, (char *) a);
  va_end (ap);
  return spawn_argv (h, label, argv);
}

Node *
harness_join (Harness *h, const char *label, ...)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  va_list ap;
  const char *a;

  g_ptr_array_add (argv, (char *) rank_path ());
  g_ptr_array_add (argv, "join");
  g_ptr_array_add (argv, "--local");
  g_ptr_array_add (argv, "--json");
  g_ptr_array_add (argv, "--threads");
  g_ptr_array_add (argv, "1");
  /* The cohort does not need a GPU: no Vulkan probing in these tests. */
  g_ptr_array_add (argv, "--backend");
  g_ptr_array_add (argv, "cpu");
  va_start (ap, label);
  while ((a = va_arg (ap, const char *)))
    g_ptr_array_add (argv, (char *) a);
  va_end (ap);
  return spawn_argv (h, label, argv);
}

static gboolean
on_timeout (gpointer data)
{
  *(gboolean *) data = TRUE;
  return G_SOURCE_REMOVE;
}

gboolean
harness_wait (HarnessPred pred, gpointer data, guint timeout_ms)
{
  gboolean timed_out = FALSE;
  guint id = g_timeout_add (timeout_ms, on_timeout, &timed_out);
  gboolean ok;

  while (!(ok = pred (data)) && !timed_out)
    g_main_context_iteration (NULL, TRUE);
  if (!timed_out)
    g_source_remove (id);
  return ok;
}

static gboolean
pred_never (gpointer data)
{
  return FALSE;
}

void
harness_pause (guint ms)
{
  harness_wait (pred_never, NULL, ms);
}

static gboolean
pred_exited (gpointer data)
{
  Node *n = data;
  return n->exited && n->eof;
}

gboolean
node_wait_exit (Node *n, guint timeout_ms)
{
  return harness_wait (pred_exited, n, timeout_ms);
}

gint64
ev_int (JsonObject *o, const char *key)
{
  JsonNode *v = json_object_get_member (o, key);

  if (v == NULL || !JSON_NODE_HOLDS_VALUE (v))
    return -1;
  if (json_node_get_value_type (v) == G_TYPE_INT64)
    return json_node_get_int (v);
  if (json_node_get_value_type (v) == G_TYPE_BOOLEAN)
    return json_node_get_boolean (v);
  return -1;
}

double
ev_num (JsonObject *o, const char *key)
{
  JsonNode *v = json_object_get_member (o, key);

  if (v == NULL || !JSON_NODE_HOLDS_VALUE (v))
    return -1;
  if (json_node_get_value_type (v) == G_TYPE_DOUBLE)
    return json_node_get_double (v);
  if (json_node_get_value_type (v) == G_TYPE_INT64)
    return (double) json_node_get_int (v);
  return -1;
}

const char *
ev_str (JsonObject *o, const char *key)
{
  JsonNode *v = json_object_get_member (o, key);

  if (v == NULL || !JSON_NODE_HOLDS_VALUE (v) || json_node_get_value_type (v) != G_TYPE_STRING)
    return NULL;
  return json_node_get_string (v);
}

int
node_find_event (Node *n, const char *event, guint from)
{
  for (guint i = from; i < n->events->len; i++)
    if (g_strcmp0 (ev_str (g_ptr_array_index (n->events, i), "event"), event) == 0)
      return (int) i;
  return -1;
}

typedef struct {
  Node       *n;
  const char *event, *key;
  gint64      min;
  guint       from;
  int         found;
} EventWait;

static gboolean
pred_event (gpointer data)
{
  EventWait *w = data;

  for (guint i = w->from; i < w->n->events->len; i++)
    {
      JsonObject *o = g_ptr_array_index (w->n->events, i);
      if (g_strcmp0 (ev_str (o, "event"), w->event) == 0 &&
          (w->key == NULL || ev_int (o, w->key) >= w->min))
        {
          w->found = (int) i;
          return TRUE;
        }
    }
  return w->n->exited && w->n->eof;   /* it will not come */
}

int
node_wait_event (Node *n, const char *event, const char *key, gint64 min, guint from,
                 guint timeout_ms)
{
  EventWait w = { n, event, key, min, from, -1 };

  harness_wait (pred_event, &w, timeout_ms);
  return w.found;
}

void
node_kill (Node *n, int sig)
{
  g_subprocess_send_signal (n->proc, sig);
}

const char *
node_id (Node *n)
{
  int i = node_find_event (n, "joined", 0);

  return i < 0 ? NULL : ev_str (g_ptr_array_index (n->events, i), "node");
}

GHashTable *
node_step_hashes (Node *n)
{
  GHashTable *t = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, g_free);

  for (guint i = 0; i < n->events->len; i++)
    {
      JsonObject *o = g_ptr_array_index (n->events, i);
      if (g_strcmp0 (ev_str (o, "event"), "step") == 0)
        {
          gint64 *k = g_new (gint64, 1);
          *k = ev_int (o, "step");
          g_hash_table_replace (t, k, g_strdup (ev_str (o, "hash")));
        }
    }
  return t;
}

gint64
node_max_step (Node *n)
{
  gint64 m = 0;

  for (guint i = 0; i < n->events->len; i++)
    {
      JsonObject *o = g_ptr_array_index (n->events, i);
      if (g_strcmp0 (ev_str (o, "event"), "step") == 0)
        m = MAX (m, ev_int (o, "step"));
    }
  return m;
}

gboolean
node_exited_ok (Node *n)
{
  return n->exited && !n->signaled && n->exit_code == 0;
}

char *
node_dump (Node *n)
{
  GString *s = g_string_new (NULL);

  g_string_append_printf (s, "--- %s (exited %d, code %d, signal %d), %u events:\n", n->label,
                          n->exited, n->exit_code, n->term_sig, n->events->len);
  for (guint i = 0; i < n->events->len; i++)
    {
      JsonObject *o = g_ptr_array_index (n->events, i);
      g_autoptr(JsonNode) node = json_node_init_object (json_node_alloc (), o);
      g_autofree char *line = json_to_string (node, FALSE);
      if (g_strcmp0 (ev_str (o, "event"), "step") == 0 && i > 4 && i + 6 < n->events->len)
        continue;
      g_string_append_printf (s, "  %+.3f %s\n",
                              (double) (g_array_index (n->times, gint64, i) - n->t0) / G_USEC_PER_SEC,
                              line);
    }
  return g_string_free (s, FALSE);
}

void
harness_dump (Harness *h)
{
  for (guint i = 0; i < h->nodes->len; i++)
    {
      g_autofree char *d = node_dump (g_ptr_array_index (h->nodes, i));
      g_test_message ("%s", d);
    }
}

int
harness_wait_event (Harness *h, Node *n, const char *event, const char *key, gint64 min,
                    guint timeout_ms)
{
  int i = node_wait_event (n, event, key, min, 0, timeout_ms);

  if (i < 0)
    {
      harness_dump (h);
      g_error ("%s: no '%s' event%s%s within %u ms", n->label, event, key ? " with " : "",
               key ? key : "", timeout_ms);
    }
  return i;
}

void
harness_assert_exit_ok (Harness *h, Node *n, guint timeout_ms)
{
  if (!node_wait_exit (n, timeout_ms) || !node_exited_ok (n))
    {
      harness_dump (h);
      g_error ("%s did not exit cleanly within %u ms (exited %d, code %d, signal %d)",
               n->label, timeout_ms, n->exited, n->exit_code, n->term_sig);
    }
}

JsonObject *
node_ev (Node *n, int i)
{
  return g_ptr_array_index (n->events, i);
}

int
node_step (Node *n, gint64 step)
{
  for (guint i = 0; i < n->events->len; i++)
    if (g_strcmp0 (ev_str (node_ev (n, i), "event"), "step") == 0 &&
        ev_int (node_ev (n, i), "step") == step)
      return (int) i;
  return -1;
}

Node *
harness_leader (Harness *h, Node **nodes, guint k)
{
  for (guint i = 0; i < k; i++)
    {
      int j = node_find_event (nodes[i], "joined", 0);
      if (j >= 0 && g_strcmp0 (ev_str (node_ev (nodes[i], j), "role"), "leader") == 0)
        return nodes[i];
    }
  harness_dump (h);
  g_error ("no node reported joining as the leader");
  return NULL;
}

void
harness_others (Node **nodes, Node *leader, Node **first, Node **second)
{
  *first = *second = NULL;
  for (guint j = 0; j < 3; j++)
    if (nodes[j] != leader)
      {
        if (*first == NULL)
          *first = nodes[j];
        else
          *second = nodes[j];
      }
}

Node *
harness_kill_leader_at (Harness *h, Node **nodes, gint64 at, guint step_ms, guint exit_ms,
                        Node **rest)
{
  Node *leader;

  for (guint i = 0; i < 3; i++)
    harness_wait_event (h, nodes[i], "joined", NULL, 0, 30000);
  leader = harness_leader (h, nodes, 3);
  harness_others (nodes, leader, &rest[0], &rest[1]);
  harness_wait_event (h, leader, "step", "step", at, step_ms);
  node_kill (leader, SIGKILL);
  harness_assert_exit_ok (h, rest[0], exit_ms);
  harness_assert_exit_ok (h, rest[1], exit_ms);
  node_wait_exit (leader, 5000);
  return leader;
}

/* Every step @a and @b both report from @from on has the same hash, or
 * fail the test; how many they both report. */
guint
harness_same_hashes (Harness *h, Node *a, Node *b, gint64 from)
{
  g_autoptr(GHashTable) ha = node_step_hashes (a);
  g_autoptr(GHashTable) hb = node_step_hashes (b);
  GHashTableIter it;
  gpointer k, v;
  guint n = 0;

  g_hash_table_iter_init (&it, ha);
  while (g_hash_table_iter_next (&it, &k, &v))
    {
      const char *other = g_hash_table_lookup (hb, k);
      if (*(gint64 *) k < from || other == NULL)
        continue;
      if (g_strcmp0 (v, other) != 0)
        {
          harness_dump (h);
          g_error ("step %" G_GINT64_FORMAT ": %s has %s, %s has %s", *(gint64 *) k, a->label,
                   (char *) v, b->label, other);
        }
      n++;
    }
  return n;
}

void
harness_assert_led_by (Node **nodes, guint k, Node *leader, gint64 term)
{
  for (guint j = 0; j < k; j++)
    for (guint e = 0; e < nodes[j]->events->len; e++)
      if (g_strcmp0 (ev_str (node_ev (nodes[j], e), "event"), "leader") == 0)
        {
          g_assert_cmpint (ev_int (node_ev (nodes[j], e), "term"), ==, term);
          g_assert_cmpstr (ev_str (node_ev (nodes[j], e), "node"), ==, node_id (leader));
        }
}

gint64
harness_freeze_thaw (Harness *h, Node *leader, Node *victim, Node *other, guint timeout_ms)
{
  int i, snap;

  node_kill (victim, SIGSTOP);
  i = harness_wait_event (h, leader, "member-left", NULL, 0, timeout_ms);
  g_assert_cmpstr (ev_str (node_ev (leader, i), "node"), ==, node_id (victim));
  g_assert_nonnull (strstr (ev_str (node_ev (leader, i), "reason"), "heartbeat"));
  /* The cohort goes on with two. */
  i = node_wait_event (leader, "step", "members", 0, (guint) i, timeout_ms);
  while (i >= 0 && ev_int (node_ev (leader, i), "members") != 2)
    i = node_wait_event (leader, "step", "members", 0, (guint) i + 1, timeout_ms);
  if (i < 0)
    {
      harness_dump (h);
      g_error ("the leader did not go on with two members after %s froze", victim->label);
    }
  harness_wait_event (h, other, "step", "step", ev_int (node_ev (leader, i), "step") + 3,
                      2 * timeout_ms);

  /* It wakes up: it says it was cut off and gets a snapshot from the leader. */
  node_kill (victim, SIGCONT);
  i = node_wait_event (victim, "rejoining", NULL, 0, 0, 2 * timeout_ms);
  if (i < 0)
    {
      harness_dump (h);
      g_error ("the node that was timed out did not report that it rejoins");
    }
  snap = node_wait_event (victim, "snapshot", NULL, 0, (guint) i, 2 * timeout_ms);
  if (snap < 0 || g_strcmp0 (ev_str (node_ev (victim, snap), "from"), node_id (leader)) != 0)
    {
      harness_dump (h);
      g_error ("the node that was cut off did not rejoin through a snapshot from the leader");
    }
  return ev_int (node_ev (victim, snap), "step");
}

void
harness_assert_checkpoint_finite (Harness *h, const char *cohort, gsize n_params)
{
  g_autofree char *ckpt = g_build_filename (h->data_dir, "rlx-cluster", cohort,
                                            "checkpoint.safetensors", NULL);
  g_autofree char *data = NULL;
  gsize len;
  guint64 hlen;
  const float *p;

  g_assert_true (g_file_get_contents (ckpt, &data, &len, NULL));
  g_assert_cmpuint (len, >=, 8);
  memcpy (&hlen, data, 8);
  hlen = GUINT64_FROM_LE (hlen);
  g_assert_cmpuint (len, ==, 8 + hlen + n_params * 4);
  p = (const float *) (data + 8 + hlen);
  for (gsize j = 0; j < n_params; j++)
    if (!isfinite (p[j]))
      g_error ("%s: parameter %" G_GSIZE_FORMAT " is not finite", ckpt, j);
}

GHashTable *
harness_read_trace (const char *path)
{
  g_autofree char *text = NULL;
  g_auto(GStrv) lines = NULL;
  GHashTable *t = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);

  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_auto(GStrv) f = g_strsplit (lines[i], "\t", 4);
      char *key;

      if (g_strv_length (f) != 4)
        continue;
      key = g_strdup_printf ("%s %s", f[2], f[3]);
      if (!g_hash_table_contains (t, key))
        {
          gint64 *ns = g_new (gint64, 1);
          *ns = g_ascii_strtoll (f[0], NULL, 10);
          g_hash_table_insert (t, key, ns);
        }
      else
        g_free (key);
    }
  return t;
}

gint64
harness_trace_at (GHashTable *trace, const char *what, gint64 step)
{
  g_autofree char *key = g_strdup_printf ("%s %" G_GINT64_FORMAT, what, step);
  gint64 *ns = g_hash_table_lookup (trace, key);

  if (ns == NULL)
    g_error ("the trace has no %s", key);
  return *ns;
}

void
harness_assert_outer_rounds (Harness *h, Node **n, guint k, gint64 first, gint64 last,
                             guint hh, gint64 samples)
{
  for (gint64 s = first; s <= last; s++)
    {
      int e0 = node_step (n[0], s);
      JsonObject *o0;

      if (e0 < 0)
        {
          harness_dump (h);
          g_error ("%s did not report round %" G_GINT64_FORMAT, n[0]->label, s);
        }
      o0 = node_ev (n[0], e0);
      if (g_strcmp0 (ev_str (o0, "sync"), "outer") != 0 || ev_int (o0, "h") != hh ||
          ev_str (o0, "outer_hash") == NULL)
        {
          harness_dump (h);
          g_error ("round %" G_GINT64_FORMAT " of %s is not an outer round of H=%u", s,
                   n[0]->label, hh);
        }
      if (ev_int (o0, "contributors") != k || ev_int (o0, "samples") != samples)
        {
          harness_dump (h);
          g_error ("round %" G_GINT64_FORMAT ": %" G_GINT64_FORMAT " contributors, %"
                   G_GINT64_FORMAT " samples; want %u and %" G_GINT64_FORMAT, s,
                   ev_int (o0, "contributors"), ev_int (o0, "samples"), k, samples);
        }
      g_assert_true (isfinite (ev_num (o0, "loss")));
      for (guint i = 1; i < k; i++)
        {
          int e = node_step (n[i], s);
          JsonObject *o = e >= 0 ? node_ev (n[i], e) : NULL;

          if (o == NULL || g_strcmp0 (ev_str (o, "hash"), ev_str (o0, "hash")) != 0 ||
              g_strcmp0 (ev_str (o, "outer_hash"), ev_str (o0, "outer_hash")) != 0)
            {
              harness_dump (h);
              g_error ("round %" G_GINT64_FORMAT ": %s has hash %s / outer %s, %s %s / %s", s,
                       n[i]->label, o ? ev_str (o, "hash") : "(none)",
                       o ? ev_str (o, "outer_hash") : "(none)", n[0]->label,
                       ev_str (o0, "hash"), ev_str (o0, "outer_hash"));
            }
        }
    }
}

RlxLink *
harness_stalled_link (const char *peer, int *fd)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GSocket) mine = NULL;
  g_autoptr(GSocketConnection) conn = NULL;
  RlxLink *link;
  int fds[2], small = 64 * 1024;

  g_assert_cmpint (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), ==, 0);
  mine = g_socket_new_from_fd (fds[0], &error);
  g_assert_no_error (error);
  conn = g_socket_connection_factory_create_connection (mine);
  link = rlx_unix_link_new (conn, peer, 0, &error);
  g_assert_no_error (error);
  /* Through the socket only: a shared ring or a memfd would take a large
   * frame without the socket filling. */
  rlx_unix_link_set_ring_min (RLX_UNIX_LINK (link), 0);
  rlx_unix_link_set_shm_min (RLX_UNIX_LINK (link), 0);
  /* Small, after the link set its own large buffers: one frame of a few
   * hundred KB fills it. */
  g_assert_cmpint (setsockopt (fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), ==, 0);
  *fd = fds[1];
  return link;
}
