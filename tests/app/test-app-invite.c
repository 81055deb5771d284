/* test-app-invite.c — the window's invite entry and Copy Invite, with real
 * remote cohorts on loopback
 *
 * A real `rlx-rank join` runs beside the window as "another machine": its
 * own XDG_RUNTIME_DIR (so no local bus can link the two), its own identity
 * and data. Every link between them is a remote one: signalling over
 * WebSocket, ICE and QUIC on 127.0.0.1.
 *
 *   join-rlx-rank-host  rlx-rank founds the cohort (--host) and prints an
 *                       invite; the window joins with it pasted in the entry,
 *                       trains steps with it, and Copy Invite puts that
 *                       invite on the clipboard.
 *   host-and-copy       the window founds the cohort ("Let other machines
 *                       join"), Copy Invite gives out its invite, and
 *                       rlx-rank joins with it and trains.
 *   bad-invite          a malformed invite marks the entry and says the form.
 */
#include "rlx-config.h"
#include "node-test-utils.h"
#include "rlx-window-private.h"
#include "core/rlx-node.h"
#include "core/p2p/rlx-invite.h"

#include <adwaita.h>
#include <signal.h>
#include <sys/prctl.h>

#define TIMEOUT_MS 90000

/* ── another machine: rlx-rank join with its own directories ─────────────── */

typedef struct {
  GSubprocess      *proc;
  GDataInputStream *out;
  GPtrArray        *events;   /* JsonObject* */
  GCancellable     *cancellable;
  gboolean          eof;
} Rank;

static void read_next (Rank *r);

static void
on_line (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Rank *r = user_data;
  g_autoptr(GError) error = NULL;
  g_autofree char *line = g_data_input_stream_read_line_finish_utf8 (G_DATA_INPUT_STREAM (source),
                                                                     result, NULL, &error);
  g_autoptr(JsonParser) parser = NULL;

  if (line == NULL)
    {
      if (!g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
        r->eof = TRUE;
      return;
    }
  parser = json_parser_new ();
  if (json_parser_load_from_data (parser, line, -1, NULL) &&
      JSON_NODE_HOLDS_OBJECT (json_parser_get_root (parser)))
    g_ptr_array_add (r->events, json_object_ref (json_node_get_object (json_parser_get_root (parser))));
  read_next (r);
}

static void
read_next (Rank *r)
{
  g_data_input_stream_read_line_async (r->out, G_PRIORITY_DEFAULT, r->cancellable, on_line, r);
}

/* A failed assertion must not leave the other machine running. */
static void
die_with_parent (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
}

static Rank *
rank_spawn (const char *tag, const char *const *args)
{
  g_autoptr(GSubprocessLauncher) launcher = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE);
  g_autofree char *home = g_build_filename (g_getenv ("XDG_STATE_HOME"), "..", tag, NULL);
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  g_autoptr(GError) error = NULL;
  const char *dirs[][2] = { { "XDG_RUNTIME_DIR", "run" }, { "XDG_CONFIG_HOME", "config" },
                            { "XDG_DATA_HOME", "data" }, { "XDG_STATE_HOME", "state" } };
  Rank *r = g_new0 (Rank, 1);

  for (guint i = 0; i < G_N_ELEMENTS (dirs); i++)
    {
      g_autofree char *d = g_build_filename (home, dirs[i][1], NULL);
      g_assert_cmpint (g_mkdir_with_parents (d, 0700), ==, 0);
      g_subprocess_launcher_setenv (launcher, dirs[i][0], d, TRUE);
    }
  g_subprocess_launcher_set_child_setup (launcher, die_with_parent, NULL, NULL);
  g_ptr_array_add (argv, (gpointer) g_getenv ("RLX_RANK"));
  g_ptr_array_add (argv, (gpointer) "join");
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add (argv, (gpointer) args[i]);
  g_ptr_array_add (argv, NULL);
  r->proc = g_subprocess_launcher_spawnv (launcher, (const char * const *) argv->pdata, &error);
  g_assert_no_error (error);
  r->events = g_ptr_array_new_with_free_func ((GDestroyNotify) json_object_unref);
  r->cancellable = g_cancellable_new ();
  r->out = g_data_input_stream_new (g_subprocess_get_stdout_pipe (r->proc));
  read_next (r);
  return r;
}

static gboolean
exited (gpointer data)
{
  return g_subprocess_get_if_exited (data) || g_subprocess_get_if_signaled (data);
}

static gboolean
rank_done (gpointer data)
{
  Rank *r = data;
  /* the exit is seen by GSubprocess's child watch */
  return r->eof && g_subprocess_get_identifier (r->proc) == NULL;
}

/* SIGTERM: rlx-rank leaves cleanly and exits 0. */
static void
rank_stop (Rank *r)
{
  g_subprocess_send_signal (r->proc, SIGTERM);
  g_assert_true (node_test_wait (rank_done, r, TIMEOUT_MS));
  g_assert_true (exited (r->proc));
  g_assert_true (g_subprocess_get_if_exited (r->proc));
  g_assert_cmpint (g_subprocess_get_exit_status (r->proc), ==, 0);
  g_cancellable_cancel (r->cancellable);
  g_object_unref (r->out);
  g_object_unref (r->proc);
  g_object_unref (r->cancellable);
  g_ptr_array_unref (r->events);
  g_free (r);
}

static JsonObject *
wait_event (GPtrArray *events, const char *name, const char *key, gint64 min)
{
  return node_test_wait_event (events, name, key, min, TIMEOUT_MS, NULL, NULL);
}

/* A TCP port nothing listens on now. */
static guint16
free_port (void)
{
  g_autoptr(GSocket) sock = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                          G_SOCKET_PROTOCOL_TCP, NULL);
  g_autoptr(GInetAddress) lo = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) any = g_inet_socket_address_new (lo, 0);
  g_autoptr(GSocketAddress) bound = NULL;

  g_assert_true (g_socket_bind (sock, any, FALSE, NULL));
  bound = g_socket_get_local_address (sock, NULL);
  return g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
}

/* ── the window's side ───────────────────────────────────────────────────── */

typedef struct {
  GPtrArray *events;     /* the window node's events */
  GPtrArray *peers;      /* char*: ids of the links it got */
} Watch;

static void
on_node_event (RlxNodeThread *node, RlxEvent *event, Watch *w)
{
  g_ptr_array_add (w->events, rlx_event_to_json (event));
}

static void
on_link_added (RlxNodeThread *node, const char *peer_id, Watch *w)
{
  g_ptr_array_add (w->peers, g_strdup (peer_id));
}

static void
watch_init (Watch *w)
{
  w->events = g_ptr_array_new_with_free_func ((GDestroyNotify) json_object_unref);
  w->peers = g_ptr_array_new_with_free_func (g_free);
}

static void
watch_clear (Watch *w)
{
  g_ptr_array_unref (w->events);
  g_ptr_array_unref (w->peers);
}

static gboolean
window_in_state (RlxWindow *window, const char *state)
{
  return g_str_equal (rlx_window_get_state (window), state);
}

static gboolean
joined (gpointer data)
{
  return window_in_state (data, "joined");
}

static gboolean
idle (gpointer data)
{
  return window_in_state (data, "idle");
}

static gboolean
node_exists (gpointer data)
{
  return rlx_window_get_node (data) != NULL;
}

static RlxWindow *
new_window (const char *cohort)
{
  g_autoptr(GSettings) settings = g_settings_new (RLX_APP_ID);
  RlxWindow *window;

  g_settings_set_string (settings, "dataset", "synthetic");
  g_settings_set_string (settings, "backend", "cpu");
  g_settings_set_uint (settings, "batch", 8);
  g_settings_set_uint (settings, "evaluate-every", 0);
  window = rlx_window_new (NULL, cohort);
  gtk_window_present (GTK_WINDOW (window));
  return window;
}

/* Join (the entry holds @invite) and watch the node from its first event. */
static void
join (RlxWindow *window, const char *invite, Watch *w)
{
  GtkWidget *row = GTK_WIDGET (gtk_widget_get_template_child (GTK_WIDGET (window),
                                                              RLX_TYPE_WINDOW, "invite_row"));
  RlxNodeThread *node;

  gtk_editable_set_text (GTK_EDITABLE (row), invite);
  rlx_window_join (window);
  g_assert_true (node_exists (window));
  node = rlx_window_get_node (window);
  g_signal_connect (node, "event", G_CALLBACK (on_node_event), w);
  g_signal_connect (node, "link-added", G_CALLBACK (on_link_added), w);
  g_assert_true (node_test_wait (joined, window, TIMEOUT_MS));
}

typedef struct {
  char    *text;
  gboolean done;
} ClipRead;

static void
on_clipboard_text (GObject *source, GAsyncResult *result, gpointer user_data)
{
  ClipRead *c = user_data;
  g_autoptr(GError) error = NULL;

  c->text = gdk_clipboard_read_text_finish (GDK_CLIPBOARD (source), result, &error);
  g_assert_no_error (error);
  c->done = TRUE;
}

static gboolean
clip_read (gpointer data)
{
  return ((ClipRead *) data)->done;
}

static void
on_clipboard_changed (GdkClipboard *clipboard, guint *n)
{
  (*n)++;
}

static gboolean
changed_once (gpointer data)
{
  return *(guint *) data > 0;
}

/* Press Copy Invite (its button: visible, named for assistive technology)
 * and read the clipboard back. */
static char *
copy_invite (RlxWindow *window)
{
  GtkWidget *button = GTK_WIDGET (gtk_widget_get_template_child (GTK_WIDGET (window),
                                                                 RLX_TYPE_WINDOW,
                                                                 "copy_invite_button"));
  GdkClipboard *clipboard = gtk_widget_get_clipboard (GTK_WIDGET (window));
  ClipRead c = { 0 };
  guint changes = 0;
  gulong id;

  g_assert_true (gtk_widget_get_visible (button));
  g_assert_true (gtk_widget_is_sensitive (button));
  gdk_clipboard_set_text (clipboard, "not the invite");
  /* a button's activation lands a moment later (it shows itself pressed) */
  id = g_signal_connect (clipboard, "changed", G_CALLBACK (on_clipboard_changed), &changes);
  g_assert_true (gtk_widget_activate (button));
  g_assert_true (node_test_wait (changed_once, &changes, TIMEOUT_MS));
  g_signal_handler_disconnect (clipboard, id);
  gdk_clipboard_read_text_async (clipboard, NULL, on_clipboard_text, &c);
  g_assert_true (node_test_wait (clip_read, &c, TIMEOUT_MS));
  return c.text;
}

static gboolean
has_peer (Watch *w, const char *peer)
{
  for (guint i = 0; i < w->peers->len; i++)
    if (g_str_equal (g_ptr_array_index (w->peers, i), peer))
      return TRUE;
  return FALSE;
}

/* The roster lists @node_id. */
static gboolean
roster_has (RlxWindow *window, const char *node_id)
{
  GListModel *roster = rlx_node_thread_get_roster (rlx_window_get_node (window));

  for (guint i = 0; i < g_list_model_get_n_items (roster); i++)
    {
      g_autoptr(GObject) entry = g_list_model_get_item (roster, i);
      g_autofree char *id = NULL;
      g_object_get (entry, "node-id", &id, NULL);
      if (g_strcmp0 (id, node_id) == 0)
        return TRUE;
    }
  return FALSE;
}

static void
leave (RlxWindow *window)
{
  rlx_window_leave (window);
  g_assert_true (node_test_wait (idle, window, TIMEOUT_MS));
}

/* ── cases ──────────────────────────────────────────────────────────────── */

static void
test_join_rlx_rank_host (void)
{
  g_autofree char *port = g_strdup_printf ("127.0.0.1:%u", free_port ());
  g_autofree char *cohort = node_test_cohort_name ("host");
  const char *args[] = { "--host", port, "--show-invite", "--advertise", "127.0.0.1", "--cohort", cohort,
                         "--json", "--backend", "cpu", "--batch", "8", "--threads", "1",
                         "--checkpoint-every", "0", NULL };
  Rank *rank = rank_spawn ("founder", args);
  g_autofree char *clip = NULL;
  g_autofree char *mine = NULL;
  const char *invite, *rank_id;
  RlxWindow *window;
  JsonObject *step;
  Watch w;

  invite = json_object_get_string_member (wait_event (rank->events, "invite", NULL, 0), "invite");
  rank_id = json_object_get_string_member (wait_event (rank->events, "joined", NULL, 0), "node");
  g_assert_true (g_str_has_prefix (invite, "rlx://127.0.0.1:"));

  watch_init (&w);
  window = new_window ("ignored-by-an-invite");
  join (window, invite, &w);
  /* the invite names the cohort */
  g_assert_cmpstr (rlx_node_thread_get_cohort (rlx_window_get_node (window)), ==, cohort);

  /* trained together: steps with both, the rlx-rank leading, over a remote link */
  step = wait_event (w.events, "step", "step", 5);
  wait_event (w.events, "link-up", NULL, 0);
  g_assert_cmpint (json_object_get_int_member (step, "members"), ==, 2);
  g_assert_cmpstr (json_object_get_string_member (step, "leader"), ==, rank_id);
  g_assert_true (json_object_get_boolean_member (step, "contributed"));
  g_assert_true (has_peer (&w, rank_id));
  g_assert_true (roster_has (window, rank_id));
  wait_event (rank->events, "step", "contributors", 2);

  /* Copy Invite gives out the invite that was pasted (it reaches this cohort) */
  mine = rlx_node_thread_dup_invite (rlx_window_get_node (window));
  g_assert_cmpstr (mine, ==, invite);
  clip = copy_invite (window);
  g_assert_cmpstr (clip, ==, invite);

  leave (window);
  gtk_window_destroy (GTK_WINDOW (window));
  rank_stop (rank);
  watch_clear (&w);
}

static void
test_host_and_copy (void)
{
  g_autoptr(GSettings) settings = g_settings_new (RLX_APP_ID);
  g_autofree char *cohort = node_test_cohort_name ("app-host");
  g_autofree char *clip = NULL;
  g_autofree char *loopback = NULL;
  g_autofree char *port_part = NULL;
  g_autoptr(RlxInvite) parsed = NULL;
  g_autoptr(GError) error = NULL;
  guint16 port = free_port ();
  const char *args[] = { NULL, "--json", "--backend", "cpu", "--batch", "8", "--threads", "1",
                         "--checkpoint-every", "0", NULL };
  JsonObject *invite_event, *step;
  const char *window_id;
  RlxWindow *window;
  Rank *rank;
  Watch w;

  g_settings_set_boolean (settings, "host", TRUE);
  g_settings_set_uint (settings, "host-port", port);
  watch_init (&w);
  window = new_window (cohort);
  join (window, "", &w);
  window_id = rlx_node_thread_get_node_id (rlx_window_get_node (window));

  /* hosting: an "invite" event, and Copy Invite copies that invite */
  invite_event = wait_event (w.events, "invite", NULL, 0);
  g_assert_cmpint (json_object_get_int_member (invite_event, "port"), ==, port);
  clip = copy_invite (window);
  g_assert_cmpstr (clip, ==, json_object_get_string_member (invite_event, "invite"));
  parsed = rlx_invite_parse (clip, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (parsed->port, ==, port);
  g_assert_cmpstr (parsed->cohort, ==, cohort);

  /* another machine joins with it (the advertised address may not be
   * reachable from here: the same invite, on loopback) */
  loopback = g_strdup_printf ("rlx://127.0.0.1:%u/%s#%s", port, parsed->cohort,
                              strchr (clip, '#') + 1);
  args[0] = loopback;
  rank = rank_spawn ("joiner", args);
  step = wait_event (rank->events, "step", "members", 2);
  g_assert_cmpstr (json_object_get_string_member (step, "leader"), ==, window_id);
  wait_event (rank->events, "step", "contributors", 2);
  port_part = g_strdup_printf (":%u/", port);
  g_assert_nonnull (strstr (clip, port_part));
  step = wait_event (w.events, "step", "contributors", 2);
  g_assert_cmpint (json_object_get_int_member (step, "members"), ==, 2);

  rank_stop (rank);
  leave (window);
  gtk_window_destroy (GTK_WINDOW (window));
  watch_clear (&w);
  g_settings_reset (settings, "host");
  g_settings_reset (settings, "host-port");
}

static void
test_bad_invite (void)
{
  RlxWindow *window = new_window ("bad-invite");
  GtkWidget *row = GTK_WIDGET (gtk_widget_get_template_child (GTK_WIDGET (window),
                                                              RLX_TYPE_WINDOW, "invite_row"));
  GListModel *log = G_LIST_MODEL (rlx_window_get_event_log (window));
  g_autoptr(RlxEventItem) last = NULL;

  gtk_editable_set_text (GTK_EDITABLE (row), "rlx://example.org/demo");
  rlx_window_join (window);
  g_assert_cmpstr (rlx_window_get_state (window), ==, "idle");
  g_assert_null (rlx_window_get_node (window));
  g_assert_true (gtk_widget_has_css_class (row, "error"));
  g_assert_cmpuint (g_list_model_get_n_items (log), >, 0);
  last = g_list_model_get_item (log, g_list_model_get_n_items (log) - 1);
  g_assert_nonnull (strstr (rlx_event_item_get_detail (last), RLX_INVITE_FORM));
  /* typing clears the mark */
  gtk_editable_set_text (GTK_EDITABLE (row), "");
  g_assert_false (gtk_widget_has_css_class (row, "error"));
  gtk_window_destroy (GTK_WINDOW (window));
}

int
main (int argc, char **argv)
{
  int status;

  node_test_init ();
  gtk_test_init (&argc, &argv, NULL);
  adw_init ();
  g_test_add_func ("/app/invite/bad-invite", test_bad_invite);
  g_test_add_func ("/app/invite/join-rlx-rank-host", test_join_rlx_rank_host);
  g_test_add_func ("/app/invite/host-and-copy", test_host_and_copy);
  status = g_test_run ();
  node_test_cleanup ();
  return status;
}
