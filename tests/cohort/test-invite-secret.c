/* test-invite-secret.c — the cohort key stays out of arguments and logs
 *
 * Real `rlx-rank join` processes on loopback: a founder (--host) writes its
 * invite with --invite-out (mode 0600) and prints it with the key hidden;
 * a joiner given --invite-file has no key in /proc/PID/cmdline and joins;
 * an invite file others may read is refused (exit 2, saying chmod 600), a
 * folder given for it too (saying it is a folder, not to chmod it); an
 * invite on standard input (--invite -) joins; one in the arguments still
 * joins, with a warning, and its key is blanked from /proc/PID/cmdline; a
 * wrong key (RLX_INVITE) exits 1 within a bound, saying the key is probably
 * wrong, with "done" success false. No key in the founder's output. The
 * TURN password likewise: a file (0600), RLX_TURN_PASSWORD, or the
 * arguments with a warning and blanked.
 */
#include "rlx-config.h"
#include "cohort-harness.h"

#include <string.h>
#include <sys/stat.h>
#include <glib/gstdio.h>

#define TIMEOUT_MS 60000

static guint16
free_port (void)
{
  g_autoptr(GSocket) s = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                       G_SOCKET_PROTOCOL_TCP, NULL);
  g_autoptr(GInetAddress) lo = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) any = g_inet_socket_address_new (lo, 0);
  g_autoptr(GSocketAddress) bound = NULL;

  g_assert_true (g_socket_bind (s, any, TRUE, NULL));
  bound = g_socket_get_local_address (s, NULL);
  return g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
}

/* What /proc/PID/cmdline shows of @proc, NULs as spaces ("" once gone). */
static char *
cmdline_of (GSubprocess *proc)
{
  g_autofree char *path = g_strdup_printf ("/proc/%s/cmdline", g_subprocess_get_identifier (proc));
  char *text = NULL;
  gsize len = 0;

  if (!g_file_get_contents (path, &text, &len, NULL))
    return g_strdup ("");   /* gone already */
  for (gsize i = 0; i + 1 < len; i++)
    if (text[i] == '\0')
      text[i] = ' ';
  return text;
}

typedef struct {
  Harness *h;
  Node    *founder;
  char    *file;      /* its invite, 0600 */
  char    *invite;
  char    *key;       /* the part after '#' */
} Founded;

static void
found (Founded *f, const char *cohort)
{
  g_autofree char *host = g_strdup_printf ("127.0.0.1:%u", free_port ());
  g_autofree char *text = NULL;
  GStatBuf st;
  int i;

  f->h = harness_new ();
  f->file = g_build_filename (f->h->dir, "invite", NULL);
  f->founder = harness_spawn (f->h, "founder", "join", "--json", "--backend", "cpu", "--threads",
                              "1", "--batch", "8", "--checkpoint-every", "0", "--wait-members", "2",
                              "--host", host,
                              "--cohort", cohort, "--invite-out", f->file, NULL);
  i = harness_wait_event (f->h, f->founder, "invite", NULL, 0, TIMEOUT_MS);
  /* printed with the key hidden ... */
  g_assert_true (g_str_has_suffix (json_object_get_string_member (node_ev (f->founder, i), "invite"),
                                   "#…"));
  /* ... and written whole, for this user alone */
  g_assert_true (g_file_get_contents (f->file, &text, NULL, NULL));
  g_assert_cmpint (g_stat (f->file, &st), ==, 0);
  g_assert_cmpint (st.st_mode & 0777, ==, 0600);
  f->invite = g_strdup (g_strstrip (text));
  g_assert_true (g_str_has_prefix (f->invite, "rlx://127.0.0.1:"));
  f->key = g_strdup (strchr (f->invite, '#') + 1);
  g_assert_cmpuint (strlen (f->key), ==, 22);
}

static void
founded_clear (Founded *f)
{
  g_autofree char *dump = node_dump (f->founder);

  /* The founder's whole event stream never showed the key. */
  g_assert_null (strstr (dump, f->key));
  node_kill (f->founder, SIGTERM);
  node_wait_exit (f->founder, TIMEOUT_MS);
  harness_free (f->h);
  g_free (f->file);
  g_free (f->invite);
  g_free (f->key);
}

static int run_joiner (Founded *f, const char *stdin_text, char **out, char **err,
                       const char *const *args, const char *env_invite, gboolean check_cmdline);

static void
test_invite_file (void)
{
  Founded f;
  Node *j;
  g_autofree char *cmd = NULL;

  found (&f, "secret-file");
  j = harness_spawn (f.h, "joiner", "join", "--json", "--backend", "cpu", "--threads", "1",
                     "--batch", "8", "--invite-file", f.file, NULL);
  cmd = cmdline_of (j->proc);
  g_test_message ("joiner: %s", cmd);
  g_assert_nonnull (strstr (cmd, "--invite-file"));
  g_assert_null (strstr (cmd, f.key));
  harness_wait_event (f.h, j, "step", "members", 2, TIMEOUT_MS);
  node_kill (j, SIGTERM);
  g_assert_true (node_wait_exit (j, TIMEOUT_MS));

  /* Readable by others: refused, saying how to fix it. */
  g_assert_cmpint (g_chmod (f.file, 0644), ==, 0);
  {
    const char *args[] = { "--json", "--steps", "1", "--invite-file", f.file, NULL };
    g_autofree char *out = NULL, *err = NULL;
    g_assert_cmpint (run_joiner (&f, NULL, &out, &err, args, NULL, FALSE), ==, 2);
    g_test_message ("%s", err);
    g_assert_nonnull (strstr (err, "chmod 600"));
    g_assert_null (strstr (err, f.key));
  }
  g_assert_cmpint (g_chmod (f.file, 0600), ==, 0);
  /* A folder (readable by others, as folders are) is not taken for an
   * invite whose mode is wrong. */
  {
    g_autofree char *dir = g_build_filename (f.h->dir, "invites", NULL);
    const char *args[] = { "--json", "--steps", "1", "--invite-file", dir, NULL };
    g_autofree char *out = NULL, *err = NULL;

    g_assert_cmpint (g_mkdir (dir, 0755), ==, 0);
    g_assert_cmpint (g_chmod (dir, 0755), ==, 0);
    g_assert_cmpint (run_joiner (&f, NULL, &out, &err, args, NULL, FALSE), ==, 2);
    g_test_message ("%s", err);
    g_assert_nonnull (strstr (err, "is a folder: name the file in it that holds the invite"));
    g_assert_null (strstr (err, "chmod"));
  }
  founded_clear (&f);
}

typedef struct {
  gboolean done;
  char    *out, *err;
} Comm;

static void
on_communicated (GObject *source, GAsyncResult *result, gpointer data)
{
  Comm *c = data;
  g_autoptr(GError) error = NULL;

  g_assert_true (g_subprocess_communicate_utf8_finish (G_SUBPROCESS (source), result, &c->out,
                                                       &c->err, &error));
  c->done = TRUE;
}

static gboolean
communicated (gpointer data)
{
  return ((Comm *) data)->done;
}

typedef struct { GSubprocess *p; const char *secret, *marker; } Cmdline;

static gboolean
secret_gone (gpointer data)
{
  Cmdline *c = data;
  g_autofree char *cmd = cmdline_of (c->p);

  /* still running (a zombie's is empty: @marker is not in it) and blanked */
  return strstr (cmd, c->marker) != NULL && strstr (cmd, c->secret) == NULL;
}

/* A joiner of its own (stdin, stderr): `rlx-rank join ARGS` in the
 * harness's directories, with @env_name set to @env_value (unless NULL),
 * run to its exit while the main context runs (the founder's events must
 * keep being read). With @secret, its /proc/PID/cmdline must come to show
 * @marker without @secret while it runs. */
static int
run_rank (Founded *f, const char *stdin_text, char **out, char **err, const char *const *args,
          const char *env_name, const char *env_value, const char *secret, const char *marker)
{
  g_autoptr(GSubprocessLauncher) l =
    g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDIN_PIPE | G_SUBPROCESS_FLAGS_STDOUT_PIPE |
                               G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  g_autoptr(GSubprocess) p = NULL;
  g_autoptr(GError) error = NULL;
  Comm c = { FALSE, NULL, NULL };

  g_subprocess_launcher_setenv (l, "XDG_RUNTIME_DIR", f->h->run_dir, TRUE);
  g_subprocess_launcher_setenv (l, "XDG_DATA_HOME", f->h->data_dir, TRUE);
  if (env_value)
    g_subprocess_launcher_setenv (l, env_name, env_value, TRUE);
  g_ptr_array_add (argv, (char *) g_getenv ("RLX_RANK"));
  g_ptr_array_add (argv, "join");
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add (argv, (char *) args[i]);
  g_ptr_array_add (argv, NULL);
  p = g_subprocess_launcher_spawnv (l, (const char *const *) argv->pdata, &error);
  g_assert_no_error (error);
  g_subprocess_communicate_utf8_async (p, stdin_text, NULL, on_communicated, &c);
  if (secret)
    {
      /* the secret is blanked as soon as rlx-rank has read its arguments */
      Cmdline cl = { p, secret, marker };
      g_assert_true (harness_wait (secret_gone, &cl, 10000));
      g_autofree char *cmd = cmdline_of (p);
      g_test_message ("joiner: %s", cmd);
    }
  g_assert_true (harness_wait (communicated, &c, TIMEOUT_MS));
  *out = c.out;
  *err = c.err;
  return g_subprocess_get_exit_status (p);
}

static int
run_joiner (Founded *f, const char *stdin_text, char **out, char **err, const char *const *args,
            const char *env_invite, gboolean check_cmdline)
{
  return run_rank (f, stdin_text, out, err, args, "RLX_INVITE", env_invite,
                   check_cmdline ? f->key : NULL, "rlx://127.0.0.1:");
}

/* The founder waits for a second member: a joiner's --steps 3 are
 * steps it takes part in. */
static void
test_stdin (void)
{
  static const char *const args[] = { "--json", "--backend", "cpu", "--threads", "1",
                                      "--batch", "8", "--steps", "3", "--invite", "-", NULL };
  g_autofree char *line = NULL;
  g_autofree char *out = NULL, *err = NULL;
  Founded f;

  found (&f, "secret-stdin");
  line = g_strconcat (f.invite, "\n", NULL);
  g_assert_cmpint (run_joiner (&f, line, &out, &err, args, NULL, FALSE), ==, 0);
  g_assert_nonnull (strstr (out, "\"members\":2"));
  g_assert_null (strstr (err, "warning"));
  founded_clear (&f);
}

static void
test_argv_warns_and_hides (void)
{
  const char *args[] = { "--json", "--backend", "cpu", "--threads", "1", "--batch", "8",
                         "--steps", "3", NULL, NULL };
  g_autofree char *out = NULL, *err = NULL;
  Founded f;

  found (&f, "secret-argv");
  args[9] = f.invite;
  g_assert_cmpint (run_joiner (&f, NULL, &out, &err, args, NULL, TRUE), ==, 0);
  g_assert_nonnull (strstr (out, "\"members\":2"));
  g_assert_nonnull (strstr (err, "warning"));
  g_assert_nonnull (strstr (err, "--invite-file"));
  founded_clear (&f);
}

/* A wrong key (from RLX_INVITE): exit 1 within a bound, a message that
 * says the key is probably wrong, and "done" with success false. */
static void
test_wrong_key_done (void)
{
  static const char *const args[] = { "--json", "--backend", "cpu", "--threads", "1", NULL };
  g_autofree char *wrong = NULL, *out = NULL, *err = NULL;
  g_auto(GStrv) lines = NULL;
  JsonObject *done = NULL;
  g_autoptr(JsonParser) parser = json_parser_new ();
  gint64 t0;
  Founded f;

  found (&f, "secret-wrong");
  wrong = g_strdup (f.invite);
  memcpy (strchr (wrong, '#') + 1, f.key[0] == 'A' ? "BBBB" : "AAAA", 4);
  t0 = g_get_monotonic_time ();
  g_assert_cmpint (run_joiner (&f, NULL, &out, &err, args, wrong, FALSE), ==, 1);
  g_test_message ("refused after %.1f s: %s", (g_get_monotonic_time () - t0) / 1e6, err);
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 25 * G_USEC_PER_SEC);
  g_assert_nonnull (strstr (err, "key"));
  g_assert_nonnull (strstr (err, "invite"));
  lines = g_strsplit (out, "\n", -1);
  for (guint i = 0; lines[i]; i++)
    if (strstr (lines[i], "\"event\":\"done\"") &&
        json_parser_load_from_data (parser, lines[i], -1, NULL))
      done = json_node_get_object (json_parser_get_root (parser));
  g_assert_nonnull (done);
  g_assert_false (json_object_get_boolean_member (done, "success"));
  g_assert_nonnull (strstr (json_object_get_string_member (done, "message"), "key"));
  founded_clear (&f);
}

#define TURN_PASSWORD "turn-pw-Zq7Vx"

/* The TURN password stays out of the arguments too: from a file (0600, or
 * refused), from RLX_TURN_PASSWORD (read: without --turn it is refused),
 * or in the arguments with a warning, blanked from /proc/PID/cmdline. It
 * shows in no output. (No TURN server listens on 127.0.0.1:9: host
 * candidates carry the link.) */
static void
test_turn_password (void)
{
  g_autofree char *line = NULL, *pw_file = NULL;
  Founded f;

  found (&f, "secret-turn");
  line = g_strconcat (f.invite, "\n", NULL);
  pw_file = g_build_filename (f.h->dir, "turn-password", NULL);
  g_assert_true (g_file_set_contents_full (pw_file, TURN_PASSWORD "\n", -1,
                                           G_FILE_SET_CONTENTS_NONE, 0644, NULL));
  {
    /* readable by others: refused, saying how to fix it */
    const char *args[] = { "--json", "--steps", "1", "--invite", "-", "--turn", "127.0.0.1:9",
                           "--turn-user", "u", "--turn-password-file", pw_file, NULL };
    g_autofree char *out = NULL, *err = NULL;
    g_assert_cmpint (run_rank (&f, line, &out, &err, args, NULL, NULL, NULL, NULL), ==, 2);
    g_test_message ("%s", err);
    g_assert_nonnull (strstr (err, "chmod 600"));
    g_assert_nonnull (strstr (err, "TURN password"));
    g_assert_null (strstr (err, TURN_PASSWORD));
  }
  {
    /* the environment is read (and refused without --turn) */
    const char *args[] = { "--json", "--steps", "1", "--invite", "-", NULL };
    g_autofree char *out = NULL, *err = NULL;
    g_assert_cmpint (run_rank (&f, line, &out, &err, args, "RLX_TURN_PASSWORD", TURN_PASSWORD,
                               NULL, NULL), ==, 2);
    g_test_message ("%s", err);
    g_assert_nonnull (strstr (err, "RLX_TURN_PASSWORD"));
    g_assert_null (strstr (err, TURN_PASSWORD));
  }
  {
    /* in the arguments: a warning, blanked, and the joiner joins */
    const char *args[] = { "--json", "--backend", "cpu", "--threads", "1", "--batch", "8",
                           "--steps", "3", "--invite", "-", "--turn", "127.0.0.1:9",
                           "--turn-user", "u", "--turn-password", TURN_PASSWORD, NULL };
    g_autofree char *out = NULL, *err = NULL;
    g_assert_cmpint (run_rank (&f, line, &out, &err, args, NULL, NULL, TURN_PASSWORD,
                               "--turn-password"), ==, 0);
    g_assert_nonnull (strstr (out, "\"members\":2"));
    g_assert_nonnull (strstr (err, "warning"));
    g_assert_nonnull (strstr (err, "--turn-password-file"));
    g_assert_null (strstr (err, TURN_PASSWORD));
    g_assert_null (strstr (out, TURN_PASSWORD));
  }
  founded_clear (&f);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/invite/file", test_invite_file);
  g_test_add_func ("/invite/stdin", test_stdin);
  g_test_add_func ("/invite/argv-warns-and-hides", test_argv_warns_and_hides);
  g_test_add_func ("/invite/wrong-key-done", test_wrong_key_done);
  g_test_add_func ("/invite/turn-password", test_turn_password);
  return g_test_run ();
}
