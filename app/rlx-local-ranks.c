/* rlx-local-ranks.c — child rank processes (see the header) */
#include "rlx-config.h"
#include "rlx-local-ranks.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

typedef struct {
  RlxLocalRanks    *owner;      /* NULL once the owner is gone */
  char             *node_id;
  GSubprocess      *proc;
  GDataInputStream *err;
  char             *last_err;   /* last non-empty stderr line */
  gboolean          exited;
  gboolean          err_eof;
  gboolean          stopping;
} Child;

struct _RlxLocalRanks
{
  GObject       parent_instance;

  char         *rlx_rank;
  char         *log_dir;
  guint         log_max_bytes;
  GPtrArray    *children;       /* Child*, until both exit and stderr EOF are in */
  GPtrArray    *stop_tasks;     /* GTask* */
  guint         kill_id;
};

#define RANK_NICENESS 5

/* node ids stay unique across instances in one app */
static guint spawn_counter;

G_DEFINE_FINAL_TYPE (RlxLocalRanks, rlx_local_ranks, G_TYPE_OBJECT)

enum { PROP_0, PROP_N_RUNNING, N_PROPS };
enum { SIG_EXITED, N_SIGNALS };
static GParamSpec *props[N_PROPS];
static guint signals[N_SIGNALS];

static void
child_free (Child *c)
{
  g_free (c->node_id);
  g_clear_object (&c->proc);
  g_clear_object (&c->err);
  g_free (c->last_err);
  g_free (c);
}

guint
rlx_local_ranks_get_n_running (RlxLocalRanks *self)
{
  guint n = 0;

  g_return_val_if_fail (RLX_IS_LOCAL_RANKS (self), 0);
  for (guint i = 0; i < self->children->len; i++)
    if (!((Child *) g_ptr_array_index (self->children, i))->exited)
      n++;
  return n;
}

static void
complete_stops (RlxLocalRanks *self)
{
  g_autoptr(GPtrArray) tasks = NULL;

  if (rlx_local_ranks_get_n_running (self) > 0 || self->stop_tasks->len == 0)
    return;
  g_clear_handle_id (&self->kill_id, g_source_remove);
  tasks = g_steal_pointer (&self->stop_tasks);
  self->stop_tasks = g_ptr_array_new_with_free_func (g_object_unref);
  for (guint i = 0; i < tasks->len; i++)
    g_task_return_boolean (g_ptr_array_index (tasks, i), TRUE);
}

/* Both the exit and the end of stderr are in: report and forget the child. */
static void
child_maybe_done (Child *c)
{
  RlxLocalRanks *self = c->owner;
  g_autofree char *message = NULL;
  gboolean expected;

  if (!c->exited || !c->err_eof)
    return;
  if (self == NULL)
    {
      child_free (c);
      return;
    }
  if (g_subprocess_get_if_exited (c->proc))
    {
      int status = g_subprocess_get_exit_status (c->proc);
      expected = c->stopping || status == 0;
      if (status != 0 && c->last_err && *c->last_err)
        message = g_strdup (c->last_err);
      else if (status == 0)
        message = g_strdup ("left the cohort");
      else
        message = g_strdup_printf ("rlx-rank exited with status %d", status);
    }
  else
    {
      int sig = g_subprocess_get_if_signaled (c->proc) ? g_subprocess_get_term_sig (c->proc) : 0;
      expected = c->stopping;
      message = g_strdup_printf ("rlx-rank was ended by signal %d (%s)", sig, g_strsignal (sig));
    }
  g_ptr_array_remove_fast (self->children, c);
  g_object_ref (self);
  g_signal_emit (self, signals[SIG_EXITED], 0, c->node_id, expected, message);
  child_free (c);
  g_object_unref (self);
}

static void
on_child_exit (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Child *c = user_data;

  g_subprocess_wait_finish (G_SUBPROCESS (source), result, NULL);
  c->exited = TRUE;
  if (c->owner)
    {
      RlxLocalRanks *self = g_object_ref (c->owner);
      g_object_notify_by_pspec (G_OBJECT (self), props[PROP_N_RUNNING]);
      complete_stops (self);
      child_maybe_done (c);
      g_object_unref (self);
    }
  else
    child_maybe_done (c);
}

static void
on_err_line (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Child *c = user_data;
  g_autoptr(GError) error = NULL;
  g_autofree char *line = g_data_input_stream_read_line_finish_utf8 (G_DATA_INPUT_STREAM (source),
                                                                     result, NULL, &error);

  if (line == NULL)
    {
      c->err_eof = TRUE;
      child_maybe_done (c);
      return;
    }
  g_strstrip (line);
  if (*line)
    {
      /* "rlx-rank join: the reason" → "the reason" */
      const char *text = g_str_has_prefix (line, "rlx-rank join: ") ? line + 15 : line;
      g_free (c->last_err);
      c->last_err = g_utf8_substring (text, 0, MIN (g_utf8_strlen (text, -1), 400));
    }
  g_data_input_stream_read_line_async (c->err, G_PRIORITY_DEFAULT, NULL, on_err_line, c);
}

/* In the child, between fork and exec: die with the app. */
static void
child_setup (gpointer user_data)
{
  pid_t parent = (pid_t) GPOINTER_TO_INT (user_data);

  prctl (PR_SET_PDEATHSIG, SIGTERM);
  /* the app may have died before prctl */
  if (getppid () != parent)
    _exit (1);
  /* background work: the desktop (and the app's own node, which leads the
   * rounds it founded) gets the CPU first when both want it */
  if (nice (RANK_NICENESS) == -1 && errno != 0)
    errno = 0;
}

char *
rlx_local_ranks_spawn (RlxLocalRanks *self, const char *cohort, const char *const *options,
                       GError **error)
{
  return rlx_local_ranks_spawn_with_invite (self, cohort, NULL, options, error);
}

char *
rlx_local_ranks_spawn_with_invite (RlxLocalRanks *self, const char *cohort, const char *invite,
                                   const char *const *options, GError **error)
{
  g_autoptr(GSubprocessLauncher) launcher = NULL;
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func (g_free);
  g_autofree char *node_id = NULL;
  g_autofree char *log_path = NULL;
  GSubprocess *proc;
  Child *c;
  int log_fd;

  g_return_val_if_fail (RLX_IS_LOCAL_RANKS (self), NULL);
  g_return_val_if_fail (cohort != NULL, NULL);

  if (g_mkdir_with_parents (self->log_dir, 0700) != 0)
    {
      int saved = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved),
                   "Cannot create the folder for the ranks’ logs, %s: %s", self->log_dir,
                   g_strerror (saved));
      return NULL;
    }
  node_id = g_strdup_printf ("r%d-%u", (int) getpid (), ++spawn_counter);
  log_path = g_build_filename (self->log_dir, node_id, NULL);
  {
    g_autofree char *with_ext = g_strconcat (log_path, ".jsonl", NULL);
    g_free (log_path);
    log_path = g_steal_pointer (&with_ext);
  }

  g_ptr_array_add (argv, g_strdup (self->rlx_rank));
  g_ptr_array_add (argv, g_strdup ("join"));
  g_ptr_array_add (argv, g_strdup ("--local"));
  g_ptr_array_add (argv, g_strdup ("--json"));
  g_ptr_array_add (argv, g_strdup ("--cohort"));
  g_ptr_array_add (argv, g_strdup (cohort));
  g_ptr_array_add (argv, g_strdup ("--node"));
  g_ptr_array_add (argv, g_strdup (node_id));
  /* bounded: ID.jsonl and the ID.jsonl.1 before it (a fast cohort's step
   * lines came to about 700 MB an hour) */
  /* commands on its stdin: the wire precision, when the app's changes */
  g_ptr_array_add (argv, g_strdup ("--control-stdin"));
  g_ptr_array_add (argv, g_strdup ("--log-max-bytes"));
  g_ptr_array_add (argv, g_strdup_printf ("%u", self->log_max_bytes));
  for (guint i = 0; options && options[i]; i++)
    g_ptr_array_add (argv, g_strdup (options[i]));
  if (invite)
    {
      /* the key never goes in the arguments: the child reads it from a pipe */
      g_ptr_array_add (argv, g_strdup ("--invite"));
      g_ptr_array_add (argv, g_strdup ("-"));
    }
  g_ptr_array_add (argv, NULL);

  /* a fresh log, readable by this user only */
  log_fd = open (log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log_fd < 0)
    {
      int saved = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved),
                   "Cannot write the rank’s log %s: %s", log_path, g_strerror (saved));
      return NULL;
    }
  launcher = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDERR_PIPE |
                                        G_SUBPROCESS_FLAGS_STDIN_PIPE);
  g_subprocess_launcher_take_stdout_fd (launcher, log_fd);
  g_subprocess_launcher_set_child_setup (launcher, child_setup,
                                         GINT_TO_POINTER ((int) getpid ()), NULL);
  proc = g_subprocess_launcher_spawnv (launcher, (const char *const *) argv->pdata, error);
  if (proc == NULL)
    {
      g_prefix_error (error, "Cannot start a local rank (%s): ", self->rlx_rank);
      return NULL;
    }
  if (invite)
    {
      /* one short line into an empty pipe: written at once, never blocks */
      g_autofree char *line = g_strconcat (invite, "\n", NULL);
      GOutputStream *in = g_subprocess_get_stdin_pipe (proc);
      g_output_stream_write_all (in, line, strlen (line), NULL, NULL, NULL);
      memset (line, 0, strlen (line));
    }

  c = g_new0 (Child, 1);
  c->owner = self;
  c->node_id = g_strdup (node_id);
  c->proc = proc;
  c->err = g_data_input_stream_new (g_subprocess_get_stderr_pipe (proc));
  g_ptr_array_add (self->children, c);
  g_subprocess_wait_async (proc, NULL, on_child_exit, c);
  g_data_input_stream_read_line_async (c->err, G_PRIORITY_DEFAULT, NULL, on_err_line, c);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_N_RUNNING]);
  return g_steal_pointer (&node_id);
}

void
rlx_local_ranks_set_precision (RlxLocalRanks *self, const char *precision)
{
  g_autofree char *line = NULL;

  g_return_if_fail (RLX_IS_LOCAL_RANKS (self));
  g_return_if_fail (precision != NULL);

  line = g_strdup_printf ("precision %s\n", precision);
  for (guint i = 0; i < self->children->len; i++)
    {
      Child *c = g_ptr_array_index (self->children, i);
      GOutputStream *in = c->exited || c->stopping ? NULL : g_subprocess_get_stdin_pipe (c->proc);
      g_autoptr(GError) error = NULL;

      /* a few bytes into a pipe the rank reads all along: never blocks (and
       * if it ever would, the rank misses this change and says so) */
      if (in && g_pollable_output_stream_write_nonblocking (G_POLLABLE_OUTPUT_STREAM (in), line,
                                                            strlen (line), NULL, &error) < 0)
        g_message ("could not tell local rank %s its new precision: %s", c->node_id, error->message);
    }
}

static gboolean
on_kill_timeout (gpointer user_data)
{
  RlxLocalRanks *self = user_data;

  self->kill_id = 0;
  for (guint i = 0; i < self->children->len; i++)
    {
      Child *c = g_ptr_array_index (self->children, i);
      if (!c->exited)
        g_subprocess_force_exit (c->proc);
    }
  return G_SOURCE_REMOVE;
}

void
rlx_local_ranks_stop_async (RlxLocalRanks *self, guint grace_ms, GAsyncReadyCallback callback,
                            gpointer user_data)
{
  g_autoptr(GTask) task = NULL;

  g_return_if_fail (RLX_IS_LOCAL_RANKS (self));

  task = g_task_new (self, NULL, callback, user_data);
  g_task_set_source_tag (task, rlx_local_ranks_stop_async);
  for (guint i = 0; i < self->children->len; i++)
    {
      Child *c = g_ptr_array_index (self->children, i);
      if (!c->exited && !c->stopping)
        {
          c->stopping = TRUE;
          g_subprocess_send_signal (c->proc, SIGTERM);
        }
    }
  g_ptr_array_add (self->stop_tasks, g_steal_pointer (&task));
  if (self->kill_id == 0 && rlx_local_ranks_get_n_running (self) > 0)
    self->kill_id = g_timeout_add (grace_ms, on_kill_timeout, self);
  complete_stops (self);
}

gboolean
rlx_local_ranks_stop_finish (RlxLocalRanks *self, GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

GArray *
rlx_local_ranks_dup_pids (RlxLocalRanks *self)
{
  GArray *pids = g_array_new (FALSE, FALSE, sizeof (int));

  g_return_val_if_fail (RLX_IS_LOCAL_RANKS (self), pids);
  for (guint i = 0; i < self->children->len; i++)
    {
      Child *c = g_ptr_array_index (self->children, i);
      const char *id = c->exited ? NULL : g_subprocess_get_identifier (c->proc);
      if (id)
        {
          int pid = atoi (id);
          g_array_append_val (pids, pid);
        }
    }
  return pids;
}

char **
rlx_local_ranks_dup_node_ids (RlxLocalRanks *self)
{
  g_autoptr(GStrvBuilder) b = g_strv_builder_new ();

  g_return_val_if_fail (RLX_IS_LOCAL_RANKS (self), NULL);
  for (guint i = 0; i < self->children->len; i++)
    {
      Child *c = g_ptr_array_index (self->children, i);
      if (!c->exited)
        g_strv_builder_add (b, c->node_id);
    }
  return g_strv_builder_end (b);
}

void
rlx_local_ranks_set_log_max_bytes (RlxLocalRanks *self, guint max_bytes)
{
  g_return_if_fail (RLX_IS_LOCAL_RANKS (self));
  self->log_max_bytes = MAX (max_bytes, 4096);
}

const char *
rlx_local_ranks_get_log_dir (RlxLocalRanks *self)
{
  g_return_val_if_fail (RLX_IS_LOCAL_RANKS (self), NULL);
  return self->log_dir;
}

char *
rlx_local_ranks_find_rlx_rank (void)
{
  const char *env = g_getenv ("RLX_RANK");
  g_autofree char *exe = NULL;
  g_autofree char *installed = NULL;

  if (env && *env)
    return g_strdup (env);
  exe = g_file_read_link ("/proc/self/exe", NULL);
  if (exe)
    {
      g_autofree char *dir = g_path_get_dirname (exe);
      g_autofree char *sibling = g_build_filename (dir, "..", "tools", "rlx-rank", NULL);
      if (g_file_test (sibling, G_FILE_TEST_IS_EXECUTABLE))
        return g_canonicalize_filename (sibling, NULL);
    }
  installed = g_build_filename (RLX_BINDIR, "rlx-rank", NULL);
  if (g_file_test (installed, G_FILE_TEST_IS_EXECUTABLE))
    return g_steal_pointer (&installed);
  return g_strdup ("rlx-rank");
}

/* ── GObject ───────────────────────────────────────────────────────────── */

RlxLocalRanks *
rlx_local_ranks_new (const char *rlx_rank, const char *log_dir)
{
  RlxLocalRanks *self;

  g_return_val_if_fail (rlx_rank != NULL, NULL);
  g_return_val_if_fail (log_dir != NULL, NULL);

  self = g_object_new (RLX_TYPE_LOCAL_RANKS, NULL);
  self->rlx_rank = g_strdup (rlx_rank);
  self->log_dir = g_strdup (log_dir);
  self->log_max_bytes = RLX_LOCAL_RANKS_LOG_MAX_BYTES;
  return self;
}

static void
rlx_local_ranks_dispose (GObject *object)
{
  RlxLocalRanks *self = RLX_LOCAL_RANKS (object);

  g_clear_handle_id (&self->kill_id, g_source_remove);
  /* Children still running leave on SIGTERM; their exit and stderr
   * callbacks free them (the owner pointer tells them we are gone). */
  for (guint i = 0; i < self->children->len; i++)
    {
      Child *c = g_ptr_array_index (self->children, i);
      if (!c->exited)
        g_subprocess_send_signal (c->proc, SIGTERM);
      c->owner = NULL;
    }
  g_ptr_array_set_size (self->children, 0);
  G_OBJECT_CLASS (rlx_local_ranks_parent_class)->dispose (object);
}

static void
rlx_local_ranks_finalize (GObject *object)
{
  RlxLocalRanks *self = RLX_LOCAL_RANKS (object);

  g_ptr_array_unref (self->children);
  g_ptr_array_unref (self->stop_tasks);
  g_free (self->rlx_rank);
  g_free (self->log_dir);
  G_OBJECT_CLASS (rlx_local_ranks_parent_class)->finalize (object);
}

static void
rlx_local_ranks_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  switch (id)
    {
    case PROP_N_RUNNING:
      g_value_set_uint (value, rlx_local_ranks_get_n_running (RLX_LOCAL_RANKS (object)));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_local_ranks_class_init (RlxLocalRanksClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = rlx_local_ranks_dispose;
  object_class->finalize = rlx_local_ranks_finalize;
  object_class->get_property = rlx_local_ranks_get_property;

  props[PROP_N_RUNNING] = g_param_spec_uint ("n-running", NULL, NULL, 0, G_MAXUINT, 0,
                                             G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY |
                                             G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, props);

  signals[SIG_EXITED] = g_signal_new ("exited", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                      0, NULL, NULL, NULL, G_TYPE_NONE, 3,
                                      G_TYPE_STRING, G_TYPE_BOOLEAN, G_TYPE_STRING);
}

static void
rlx_local_ranks_init (RlxLocalRanks *self)
{
  /* children are freed by their own callbacks, never by the array */
  self->children = g_ptr_array_new ();
  self->stop_tasks = g_ptr_array_new_with_free_func (g_object_unref);
}
