/* test-local-ranks.c — the rank processes "Add local rank" starts: their JSON
 * logs, a clean stop, SIGKILL after the grace period, clear errors, and no
 * orphan when the app itself is killed (PR_SET_PDEATHSIG). Real rlx-rank
 * processes; every wait has a timeout. */
#include "node-test-utils.h"
#include "rlx-local-ranks.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define TIMEOUT_MS 60000

static const char *const options[] = {
  "--model", "mnist-mlp", "--dataset", "synthetic", "--backend", "cpu", "--batch", "8",
  "--threads", "1", NULL
};

typedef struct {
  RlxLocalRanks *ranks;
  GPtrArray     *exits;     /* "ID|expected|message" */
  gboolean       stopped;
} Fixture;

static void
on_exited (RlxLocalRanks *ranks, const char *id, gboolean expected, const char *message,
           Fixture *f)
{
  g_ptr_array_add (f->exits, g_strdup_printf ("%s|%d|%s", id, expected, message));
}

static void
on_stopped (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Fixture *f = user_data;

  g_assert_true (rlx_local_ranks_stop_finish (RLX_LOCAL_RANKS (source), result, NULL));
  f->stopped = TRUE;
}

static void
fixture_init (Fixture *f, const char *rlx_rank)
{
  g_autofree char *log_dir = g_build_filename (g_get_user_state_dir (), "ranks", NULL);

  f->ranks = rlx_local_ranks_new (rlx_rank, log_dir);
  f->exits = g_ptr_array_new_with_free_func (g_free);
  f->stopped = FALSE;
  g_signal_connect (f->ranks, "exited", G_CALLBACK (on_exited), f);
}

static void
fixture_clear (Fixture *f)
{
  g_clear_object (&f->ranks);
  g_ptr_array_unref (f->exits);
}

static gboolean
stopped (gpointer data)
{
  return ((Fixture *) data)->stopped;
}

typedef struct { Fixture *f; guint n; } ExitWait;

static gboolean
n_exits (gpointer data)
{
  ExitWait *w = data;
  return w->f->exits->len >= w->n;
}

/* Rank @id's JSON-lines log. */
static char *
log_path (Fixture *f, const char *id)
{
  return g_strdup_printf ("%s/%s.jsonl", rlx_local_ranks_get_log_dir (f->ranks), id);
}

/* The first event named @event in it whose "step" is at least @min_step. */
static JsonObject *
log_find (Fixture *f, const char *id, const char *event, gint64 min_step)
{
  g_autofree char *path = log_path (f, id);

  return node_test_log_find (path, event, min_step);
}

/* The rank's log has a "step" event at or past @min. */
typedef struct { Fixture *f; const char *id; gint64 min; } StepWait;

static gboolean
log_has_step (gpointer data)
{
  StepWait *w = data;
  g_autoptr(JsonObject) o = log_find (w->f, w->id, "step", w->min);

  return o != NULL;
}

/* The rank's log names @text somewhere. */
typedef struct { Fixture *f; const char *id; const char *text; } TextWait;

static gboolean
log_has_text (gpointer data)
{
  TextWait *w = data;
  g_autofree char *path = log_path (w->f, w->id);
  g_autofree char *text = NULL;

  return g_file_get_contents (path, &text, NULL, NULL) && strstr (text, w->text) != NULL;
}

/* Gone, or a zombie nobody reaps (a container's init may not): dead. */
static gboolean
process_gone (int pid)
{
  g_autofree char *path = g_strdup_printf ("/proc/%d/stat", pid);
  g_autofree char *text = NULL;
  const char *paren;

  if (kill (pid, 0) != 0 && errno == ESRCH)
    return TRUE;
  if (!g_file_get_contents (path, &text, NULL, NULL))
    return TRUE;
  paren = strrchr (text, ')');
  return paren && paren[1] == ' ' && paren[2] == 'Z';
}

static gboolean
pid_gone (gpointer data)
{
  return process_gone (GPOINTER_TO_INT (data));
}

/* Two ranks train, log their events, and stop cleanly on request. */
static void
test_log_and_stop (void)
{
  g_autofree char *cohort = node_test_cohort_name ("stop");
  g_autofree char *a = NULL, *b = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) pids = NULL;
  g_auto(GStrv) ids = NULL;
  StepWait sw;
  ExitWait ew;
  Fixture f;

  fixture_init (&f, g_getenv ("RLX_RANK"));
  a = rlx_local_ranks_spawn (f.ranks, cohort, options, &error);
  g_assert_no_error (error);
  b = rlx_local_ranks_spawn (f.ranks, cohort, options, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (a, !=, b);
  g_assert_cmpuint (rlx_local_ranks_get_n_running (f.ranks), ==, 2);
  ids = rlx_local_ranks_dup_node_ids (f.ranks);
  g_assert_cmpuint (g_strv_length (ids), ==, 2);
  g_assert_cmpstr (ids[0], ==, a);

  sw = (StepWait) { &f, a, 3 };
  g_assert_true (node_test_wait (log_has_step, &sw, TIMEOUT_MS));
  sw = (StepWait) { &f, b, 3 };
  g_assert_true (node_test_wait (log_has_step, &sw, TIMEOUT_MS));
  /* started with --threads 1, and says so (not the machine's cores) */
  {
    g_autoptr(JsonObject) joined = log_find (&f, a, "joined", 0);
    g_assert_nonnull (joined);
    g_assert_true (g_str_has_suffix (json_object_get_string_member_with_default (joined, "device", ""),
                                     ", 1 thread"));
  }

  pids = rlx_local_ranks_dup_pids (f.ranks);
  g_assert_cmpuint (pids->len, ==, 2);
  rlx_local_ranks_stop_async (f.ranks, 10000, on_stopped, &f);
  g_assert_true (node_test_wait (stopped, &f, TIMEOUT_MS));
  g_assert_cmpuint (rlx_local_ranks_get_n_running (f.ranks), ==, 0);
  for (guint i = 0; i < pids->len; i++)
    g_assert_true (process_gone (g_array_index (pids, int, i)));
  ew = (ExitWait) { &f, 2 };
  g_assert_true (node_test_wait (n_exits, &ew, TIMEOUT_MS));
  for (guint i = 0; i < 2; i++)
    g_assert_nonnull (strstr (g_ptr_array_index (f.exits, i), "|1|"));   /* expected */

  /* stopping with nothing running completes at once */
  f.stopped = FALSE;
  rlx_local_ranks_stop_async (f.ranks, 10000, on_stopped, &f);
  g_assert_true (node_test_wait (stopped, &f, 1000));
  fixture_clear (&f);
}

/* A rank's log is bounded: past the limit ID.jsonl becomes ID.jsonl.1 and a
 * new ID.jsonl goes on, each under the limit, the newest events in it. */
static void
test_log_bounded (void)
{
  g_autofree char *cohort = node_test_cohort_name ("logcap");
  const char *const steps[] = { "--model", "mnist-mlp", "--dataset", "synthetic", "--backend", "cpu",
                                "--batch", "8", "--threads", "1", "--steps", "600", NULL };
  g_autoptr(GError) error = NULL;
  g_autofree char *id = NULL, *path = NULL, *older = NULL, *text = NULL;
  GStatBuf st;
  ExitWait ew;
  Fixture f;

  fixture_init (&f, g_getenv ("RLX_RANK"));
  rlx_local_ranks_set_log_max_bytes (f.ranks, 16384);
  id = rlx_local_ranks_spawn (f.ranks, cohort, steps, &error);
  g_assert_no_error (error);
  ew = (ExitWait) { &f, 1 };
  g_assert_true (node_test_wait (n_exits, &ew, TIMEOUT_MS));
  g_assert_nonnull (strstr (g_ptr_array_index (f.exits, 0), "|1|"));   /* finished, status 0 */
  path = log_path (&f, id);
  older = g_strconcat (path, ".1", NULL);
  g_assert_cmpint (g_stat (path, &st), ==, 0);
  g_assert_cmpint (st.st_size, <=, 16384);
  g_assert_cmpint (g_stat (older, &st), ==, 0);                        /* it rotated */
  g_assert_cmpint (st.st_size, <=, 16384);
  g_assert_cmpint (st.st_size, >, 8192);
  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  g_assert_nonnull (strstr (text, "\"event\":\"done\""));              /* the newest is kept */
  fixture_clear (&f);
}

/* A rank that does not react to SIGTERM is killed after the grace period.
 * (A stand-in executable: rlx-rank always reacts to SIGTERM.) */
static void
test_kill_after_grace (void)
{
  g_autofree char *cohort = node_test_cohort_name ("stubborn");
  g_autofree char *script = g_build_filename (g_get_user_state_dir (), "stubborn-rank", NULL);
  g_autofree char *id = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) pids = NULL;
  StepWait sw;
  ExitWait ew = { NULL, 1 };
  Fixture f;

  g_assert_true (g_file_set_contents (script,
    "#!/usr/bin/python3\n"
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('{\"event\":\"step\",\"step\":1}', flush=True)\n"
    "time.sleep(600)\n", -1, &error));
  g_assert_cmpint (g_chmod (script, 0700), ==, 0);
  fixture_init (&f, script);
  id = rlx_local_ranks_spawn (f.ranks, cohort, options, &error);
  g_assert_no_error (error);
  sw = (StepWait) { &f, id, 1 };
  g_assert_true (node_test_wait (log_has_step, &sw, TIMEOUT_MS));   /* SIGTERM is ignored now */
  pids = rlx_local_ranks_dup_pids (f.ranks);
  rlx_local_ranks_stop_async (f.ranks, 300, on_stopped, &f);
  g_assert_true (node_test_wait (stopped, &f, TIMEOUT_MS));
  g_assert_true (process_gone (g_array_index (pids, int, 0)));
  ew.f = &f;
  g_assert_true (node_test_wait (n_exits, &ew, TIMEOUT_MS));
  g_assert_nonnull (strstr (g_ptr_array_index (f.exits, 0), "|1|"));
  if (strstr (g_ptr_array_index (f.exits, 0), "signal 9") == NULL)
    g_error ("not killed: %s", (char *) g_ptr_array_index (f.exits, 0));
  fixture_clear (&f);
}

static void
test_errors (void)
{
  const char *const bad[] = { "--model", "resnet-152", NULL };
  g_autofree char *cohort = node_test_cohort_name ("bad");
  g_autofree char *id = NULL;
  g_autoptr(GError) error = NULL;
  ExitWait ew = { NULL, 1 };
  Fixture f;
  char **parts;

  /* no such executable: an error naming it */
  fixture_init (&f, "/nonexistent/rlx-rank");
  g_assert_null (rlx_local_ranks_spawn (f.ranks, cohort, options, &error));
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, "/nonexistent/rlx-rank"));
  g_assert_cmpuint (rlx_local_ranks_get_n_running (f.ranks), ==, 0);
  fixture_clear (&f);
  g_clear_error (&error);

  /* a rank that refuses its options exits, and says why */
  fixture_init (&f, g_getenv ("RLX_RANK"));
  id = rlx_local_ranks_spawn (f.ranks, cohort, bad, &error);
  g_assert_no_error (error);
  ew.f = &f;
  g_assert_true (node_test_wait (n_exits, &ew, TIMEOUT_MS));
  parts = g_strsplit (g_ptr_array_index (f.exits, 0), "|", 3);
  g_assert_cmpstr (parts[0], ==, id);
  g_assert_cmpstr (parts[1], ==, "0");
  g_assert_nonnull (strstr (parts[2], "resnet-152"));
  g_strfreev (parts);
  fixture_clear (&f);
}

/* ── the app is killed: its ranks go too ───────────────────────────────── */

/* In a helper process: start one rank, print its pid, wait to be killed. */
static int
helper_main (const char *cohort)
{
  g_autoptr(GMainLoop) loop = g_main_loop_new (NULL, FALSE);
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) pids = NULL;
  g_autofree char *id = NULL;
  Fixture f;

  fixture_init (&f, g_getenv ("RLX_RANK"));
  id = rlx_local_ranks_spawn (f.ranks, cohort, options, &error);
  g_assert_no_error (error);
  pids = rlx_local_ranks_dup_pids (f.ranks);
  printf ("%d\n", g_array_index (pids, int, 0));
  fflush (stdout);
  g_main_loop_run (loop);
  return 0;
}

static void
test_no_orphans (void)
{
  g_autofree char *cohort = node_test_cohort_name ("orphan");
  g_autofree char *exe = g_file_read_link ("/proc/self/exe", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocess) helper = NULL;
  g_autoptr(GDataInputStream) out = NULL;
  g_autofree char *line = NULL;
  int rank_pid;

  helper = g_subprocess_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE, &error, exe, "--helper", cohort, NULL);
  g_assert_no_error (error);
  out = g_data_input_stream_new (g_subprocess_get_stdout_pipe (helper));
  line = g_data_input_stream_read_line_utf8 (out, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (line);
  rank_pid = atoi (line);
  g_assert_cmpint (rank_pid, >, 0);
  g_assert_false (process_gone (rank_pid));

  /* the app dies without a word */
  g_subprocess_force_exit (helper);
  g_assert_true (g_subprocess_wait (helper, NULL, &error));
  g_assert_no_error (error);
  if (!node_test_wait (pid_gone, GINT_TO_POINTER (rank_pid), TIMEOUT_MS))
    {
      kill (rank_pid, SIGKILL);
      g_error ("rank %d outlived the app that started it", rank_pid);
    }
}

/* A child given an invite reads it from a pipe: the key is nowhere in its
 * arguments, and it does try the invite's server (its log says so). */
static void
test_invite_not_in_argv (void)
{
  g_autofree char *cohort = node_test_cohort_name ("inv");
  g_autofree char *invite = g_strdup_printf ("rlx://127.0.0.1:9/%s#3q2-7wEjRWeJq83vEjRWeA", cohort);
  g_autofree char *id = NULL;
  g_autofree char *cmdline = NULL;
  g_autofree char *path = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) pids = NULL;
  gsize len;
  Fixture f;

  fixture_init (&f, g_getenv ("RLX_RANK"));
  id = rlx_local_ranks_spawn_with_invite (f.ranks, cohort, invite, options, &error);
  g_assert_no_error (error);
  pids = rlx_local_ranks_dup_pids (f.ranks);
  g_assert_cmpuint (pids->len, ==, 1);
  path = g_strdup_printf ("/proc/%d/cmdline", g_array_index (pids, int, 0));
  g_assert_true (g_file_get_contents (path, &cmdline, &len, NULL));
  for (gsize i = 0; i + 1 < len; i++)
    if (cmdline[i] == '\0')
      cmdline[i] = ' ';
  g_test_message ("child: %s", cmdline);
  g_assert_null (strstr (cmdline, "3q2-7wEjRWeJq83vEjRWeA"));
  g_assert_nonnull (strstr (cmdline, "--invite -"));
  {
    /* it read the invite: it looks for the invite's server */
    TextWait tw = { &f, id, "127.0.0.1:9" };
    g_assert_true (node_test_wait (log_has_text, &tw, 20000));
  }
  rlx_local_ranks_stop_async (f.ranks, 10000, on_stopped, &f);
  g_assert_true (node_test_wait (stopped, &f, TIMEOUT_MS));
  fixture_clear (&f);
}

int
main (int argc, char **argv)
{
  int status;

  if (argc == 3 && g_str_equal (argv[1], "--helper"))
    return helper_main (argv[2]);
  node_test_init ();
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/app/local-ranks/log-and-stop", test_log_and_stop);
  g_test_add_func ("/app/local-ranks/log-bounded", test_log_bounded);
  g_test_add_func ("/app/local-ranks/kill-after-grace", test_kill_after_grace);
  g_test_add_func ("/app/local-ranks/errors", test_errors);
  g_test_add_func ("/app/local-ranks/no-orphans", test_no_orphans);
  g_test_add_func ("/app/local-ranks/invite-not-in-argv", test_invite_not_in_argv);
  status = g_test_run ();
  node_test_cleanup ();
  return status;
}
