/* test-cli.c — rlx-rank train, grads and bench as a person runs them, and
 * the lines join prints without --json */
#include "rlx-config.h"
#include "core/rlx-safetensors.h"
#include "core/vision/rlx-cpu.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *rank_path;
static char *tmpdir;

typedef struct {
  int   status;
  char *out;
  char *err;
} Run;

static void
run_clear (Run *r)
{
  g_free (r->out);
  g_free (r->err);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Run, run_clear)

/* Runs @argv (without its NULL) and the arguments in @ap, in @envp (NULL:
 * this process's environment). */
static void
run_argv (Run *r, GPtrArray *argv, char **envp, va_list ap)
{
  g_autoptr(GError) error = NULL;
  const char *a;
  int wait_status = 0;

  while ((a = va_arg (ap, const char *)) != NULL)
    g_ptr_array_add (argv, (char *) a);
  g_ptr_array_add (argv, NULL);
  g_spawn_sync (NULL, (char **) argv->pdata, envp, G_SPAWN_STDIN_FROM_DEV_NULL, NULL, NULL,
                &r->out, &r->err, &wait_status, &error);
  g_assert_no_error (error);
  g_assert_true (WIFEXITED (wait_status));
  r->status = WEXITSTATUS (wait_status);
}

/* Runs rlx-rank with the NULL-terminated arguments. */
static void
run (Run *r, const char *first, ...)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  va_list ap;

  g_assert_nonnull (first);
  g_ptr_array_add (argv, (char *) rank_path);
  g_ptr_array_add (argv, (char *) first);
  va_start (ap, first);
  run_argv (r, argv, NULL, ap);
  va_end (ap);
}

/* Exit status 2 and exactly one line on stderr that contains @needle. */
static void
assert_usage_error (Run *r, const char *needle)
{
  g_test_message ("stderr: %s", r->err);
  g_assert_cmpint (r->status, ==, 2);
  g_assert_true (g_str_has_prefix (r->err, "rlx-rank "));
  g_assert_true (g_str_has_suffix (r->err, "\n"));
  g_assert_true (strchr (r->err, '\n') == r->err + strlen (r->err) - 1);
  g_assert_nonnull (strstr (r->err, needle));
}

static void
test_help (void)
{
  const char *subs[] = { "train", "grads", "bench" };
  const char *opts[] = { "--epochs", "--params", "--seconds" };

  for (guint i = 0; i < G_N_ELEMENTS (subs); i++)
    {
      g_auto(Run) r = { 0 };

      run (&r, subs[i], "--help", NULL);
      g_assert_cmpint (r.status, ==, 0);
      g_assert_nonnull (strstr (r.out, opts[i]));
      g_assert_nonnull (strstr (r.out, "--model"));
    }
}

static void
test_bad_options (void)
{
  static const struct {
    const char *args[16];
    const char *needle;
  } cases[] = {
    { { "train", "--bogus", NULL }, "--bogus" },
    { { "train", "--model", "resnet", "--dataset", "synthetic", "--batch", "8", "--lr", "0.1", "--steps", "1", NULL }, "resnet" },
    { { "train", "--model", "mnist-mlp", "--dataset", "cifar", "--batch", "8", "--lr", "0.1", "--steps", "1", NULL }, "cifar" },
    { { "train", "--model", "mnist-mlp", "--dataset", "synthetic", "--batch", "0", "--lr", "0.1", "--steps", "1", NULL }, "--batch" },
    { { "train", "--model", "mnist-mlp", "--dataset", "synthetic", "--batch", "8x", "--lr", "0.1", "--steps", "1", NULL }, "8x" },
    { { "train", "--model", "mnist-mlp", "--dataset", "synthetic", "--batch", "8", "--lr", "-1", "--steps", "1", NULL }, "--lr" },
    { { "train", "--model", "mnist-mlp", "--dataset", "synthetic", "--batch", "8", "--lr", "nan", "--steps", "1", NULL }, "--lr" },
    { { "train", "--model", "mnist-mlp", "--dataset", "synthetic", "--batch", "8", "--lr", "0.1", NULL }, "--epochs" },
    { { "train", "--model", "mnist-mlp", "--dataset", "synthetic", "--batch", "8", "--lr", "0.1", "--steps", "1", "--epochs", NULL }, "--epochs" },
    { { "train", "--model", "mnist-mlp", "--dataset", "synthetic", "--batch", "8", "--lr", "0.1", "--steps", "1", "extra", NULL }, "extra" },
    { { "train", "--dataset", "synthetic", "--batch", "8", "--lr", "0.1", "--steps", "1", NULL }, "--model" },
    { { "train", "--model", "mnist-mlp", "--dataset", "synthetic", "--batch", "8", "--lr", "0.1", "--steps", "1", "--backend", "tpu", NULL }, "tpu" },
    { { "grads", "--model", "mnist-mlp", "--dataset", "synthetic", "--start", "0", "--batch", "4", "--out", "x", NULL }, "--params" },
    { { "grads", "--model", "mnist-mlp", "--dataset", "synthetic", "--start", "59999", "--batch", "4", "--seed", "1", NULL }, "--out" },
    { { "grads", "--model", "mnist-mlp", "--dataset", "synthetic", "--start", "59999", "--batch", "4", "--seed", "1", "--out", "x", NULL }, "60000" },
    { { "bench", "--model", "mnist-mlp", "--batch", "64", "--seconds", "soon", NULL }, "--seconds" },
    { { "bench", "--model", "mnist-mlp", NULL }, "--batch" },
    { { "bench", "--model", "mnist-mlp", "--batch", "64", "--threads", "0", NULL }, "--threads" },
    { { "train", "--model", "mnist-mlp", "--dataset", "synthetic", "--batch", "8", "--lr", "0.1", "--steps", "1", "--order", "random", NULL }, "random" },
    { { "train", "--model", "mnist-mlp", "--dataset", "synthetic", "--batch", "8", "--lr", "0.1", "--steps", "1", "--threads", "-2", NULL }, "--threads" },
    { { "grads", "--model", "mnist-mlp", "--dataset", "synthetic", "--start", "0", "--batch", "4", "--seed", "1", "--params", "p", "--out", "x", NULL }, "--params" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_auto(Run) r = { 0 };
      g_autoptr(GPtrArray) argv = g_ptr_array_new ();
      g_autoptr(GError) error = NULL;
      int wait_status = 0;

      g_ptr_array_add (argv, (char *) rank_path);
      for (guint k = 0; cases[i].args[k]; k++)
        g_ptr_array_add (argv, (char *) cases[i].args[k]);
      g_ptr_array_add (argv, NULL);
      g_spawn_sync (tmpdir, (char **) argv->pdata, NULL, G_SPAWN_STDIN_FROM_DEV_NULL, NULL, NULL,
                    &r.out, &r.err, &wait_status, &error);
      g_assert_no_error (error);
      g_assert_true (WIFEXITED (wait_status));
      r.status = WEXITSTATUS (wait_status);
      assert_usage_error (&r, cases[i].needle);
    }
}

/* grads writes [loss, gradient] (1 + n_params LE f32) that match the trainer
 * on the same samples in file order; --params of the seeded init gives the
 * same bytes as --seed; a --params file of the wrong length is refused with
 * both lengths. */
static void
test_grads (void)
{
  for (guint id = 0; id < RLX_N_MODELS; id++)
    {
      const RlxModel *m = rlx_model_get (id);
      g_autofree char *out1 = g_build_filename (tmpdir, "g1.f32", NULL);
      g_autofree char *out2 = g_build_filename (tmpdir, "g2.f32", NULL);
      g_autofree char *pfile = g_build_filename (tmpdir, "p.f32", NULL);
      g_autofree char *b1 = NULL, *b2 = NULL;
      g_autofree float *params = g_new (float, m->n_params);
      g_autofree float *g = g_new (float, m->n_params);
      g_autoptr(GError) error = NULL;
      g_autoptr(RlxDataset) ds = rlx_dataset_open ("synthetic", 4, &error);
      g_autoptr(RlxCpuTrainer) tr = rlx_cpu_trainer_new (m, 6);
      g_auto(Run) r1 = { 0 };
      g_auto(Run) r2 = { 0 };
      g_auto(Run) r3 = { 0 };
      g_autofree char *short_len = g_strdup_printf ("%" G_GSIZE_FORMAT, m->n_params - 1);
      g_autofree char *full_len = g_strdup_printf ("%" G_GSIZE_FORMAT, m->n_params);
      gsize l1 = 0, l2 = 0;
      guint32 idx[6] = { 100, 101, 102, 103, 104, 105 };
      float x[6 * RLX_INPUT_LEN];
      guint8 labels[6];
      float loss;

      g_assert_no_error (error);
      run (&r1, "grads", "--model", m->slug, "--dataset", "synthetic", "--start", "100",
           "--batch", "6", "--seed", "4", "--backend", "cpu", "--out", out1, NULL);
      g_assert_cmpint (r1.status, ==, 0);
      g_assert_true (g_file_get_contents (out1, &b1, &l1, NULL));
      g_assert_cmpuint (l1, ==, 4 * (1 + m->n_params));

      rlx_model_init_params (m, 4, params);
      rlx_dataset_gather (ds, RLX_SPLIT_TRAIN, idx, 6, x, labels);
      loss = rlx_cpu_trainer_grads (tr, params, x, labels, 6, g);
      g_assert_cmpmem (b1, 4, &loss, 4);
      g_assert_cmpmem (b1 + 4, 4 * m->n_params, g, 4 * m->n_params);

      g_assert_true (g_file_set_contents (pfile, (char *) params, 4 * m->n_params, NULL));
      run (&r2, "grads", "--model", m->slug, "--dataset", "synthetic", "--start", "100",
           "--batch", "6", "--params", pfile, "--data-seed", "4", "--backend", "cpu",
           "--out", out2, NULL);
      g_assert_cmpint (r2.status, ==, 0);
      g_assert_true (g_file_get_contents (out2, &b2, &l2, NULL));
      g_assert_cmpmem (b1, l1, b2, l2);

      g_assert_true (g_file_set_contents (pfile, (char *) params, 4 * (m->n_params - 1), NULL));
      run (&r3, "grads", "--model", m->slug, "--dataset", "synthetic", "--start", "0",
           "--batch", "2", "--params", pfile, "--out", out2, NULL);
      g_test_message ("stderr: %s", r3.err);
      g_assert_cmpint (r3.status, !=, 0);
      g_assert_nonnull (strstr (r3.err, short_len));
      g_assert_nonnull (strstr (r3.err, full_len));
      g_assert_true (strchr (r3.err, '\n') == r3.err + strlen (r3.err) - 1);
      g_unlink (out1);
      g_unlink (out2);
      g_unlink (pfile);
    }
}

/* A FIFO at @path, opened for reading without blocking, its buffer made
 * large enough for @len bytes so that the writer never waits for a reader. */
static int
fifo_open (const char *path, gsize len)
{
  int fd;

  g_assert_cmpint (mkfifo (path, 0600), ==, 0);
  fd = g_open (path, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
  g_assert_cmpint (fd, >=, 0);
  if (fcntl (fd, F_SETPIPE_SZ, (int) len) < 0)
    g_error ("F_SETPIPE_SZ %" G_GSIZE_FORMAT ": %s", len, g_strerror (errno));
  return fd;
}

/* Everything its writer (now exited) left in the FIFO; closes @fd. */
static GBytes *
fifo_drain (int fd)
{
  g_autoptr(GByteArray) got = g_byte_array_new ();
  guint8 buf[65536];
  gssize n;

  while ((n = read (fd, buf, sizeof buf)) > 0)
    g_byte_array_append (got, buf, (guint) n);
  g_assert_cmpint (n, ==, 0);
  close (fd);
  return g_byte_array_free_to_bytes (g_steal_pointer (&got));
}

/* @to_file wrote @file and @to_fifo the FIFO @fifo (read end @fd): both
 * succeeded, the FIFO is still a FIFO, and it carried the file's bytes. */
static void
assert_same_through_fifo (Run *to_file, Run *to_fifo, const char *file, const char *fifo, int fd)
{
  g_autofree char *want = NULL;
  g_autoptr(GBytes) got = NULL;
  gsize want_len = 0;
  GStatBuf st;

  g_test_message ("stderr: %s", to_fifo->err);
  g_assert_cmpint (to_file->status, ==, 0);
  g_assert_cmpint (to_fifo->status, ==, 0);
  g_assert_cmpint (lstat (fifo, &st), ==, 0);
  if (!S_ISFIFO (st.st_mode))
    g_error ("%s was replaced (mode %o): --out must write into a file that is not regular, "
             "never rename over it (think /dev/null as root)", fifo, st.st_mode);
  got = fifo_drain (fd);
  g_assert_true (g_file_get_contents (file, &want, &want_len, NULL));
  g_assert_cmpmem (g_bytes_get_data (got, NULL), g_bytes_get_size (got), want, want_len);
  g_unlink (fifo);
  g_unlink (file);
}

/* --out naming something that is not a regular file (/dev/null, a FIFO) is
 * written into, not replaced by an atomic rename: grads and export put the
 * same bytes into a FIFO as into a regular file, and the FIFO stays. */
static void
test_out_special (void)
{
  const RlxModel *m = rlx_model_get (RLX_MODEL_MNIST_CNN);
  g_autofree char *fifo = g_build_filename (tmpdir, "out.fifo", NULL);
  g_autofree char *file = g_build_filename (tmpdir, "out.bin", NULL);
  g_autofree char *ckpt = g_build_filename (tmpdir, "ckpt.safetensors", NULL);
  g_autofree float *params = g_new (float, m->n_params);
  g_autoptr(GHashTable) md = g_hash_table_new (g_str_hash, g_str_equal);
  g_autoptr(GError) error = NULL;

  /* grads */
  {
    g_auto(Run) r1 = { 0 };
    g_auto(Run) r2 = { 0 };
    int fd = fifo_open (fifo, 4 * (1 + m->n_params));

    run (&r1, "grads", "--model", m->slug, "--dataset", "synthetic", "--start", "0", "--batch", "2",
         "--seed", "1", "--backend", "cpu", "--out", file, NULL);
    run (&r2, "grads", "--model", m->slug, "--dataset", "synthetic", "--start", "0", "--batch", "2",
         "--seed", "1", "--backend", "cpu", "--out", fifo, NULL);
    assert_same_through_fifo (&r1, &r2, file, fifo, fd);
  }

  /* export --checkpoint */
  {
    g_auto(Run) r1 = { 0 };
    g_auto(Run) r2 = { 0 };
    int fd;

    rlx_model_init_params (m, 3, params);
    g_hash_table_insert (md, "model", (gpointer) m->slug);
    g_assert_true (rlx_safetensors_write (ckpt, m, params, md, &error));
    g_assert_no_error (error);
    fd = fifo_open (fifo, 4 * m->n_params + 4096);
    run (&r1, "export", "--checkpoint", ckpt, "--format", "safetensors", "--out", file, NULL);
    run (&r2, "export", "--checkpoint", ckpt, "--format", "safetensors", "--out", fifo, NULL);
    assert_same_through_fifo (&r1, &r2, file, fifo, fd);
    g_unlink (ckpt);
  }
}

/* train --json: a start line, one step line per step with a finite loss,
 * and a done line with the test accuracy. */
static void
test_train_json (void)
{
  g_auto(Run) r = { 0 };
  g_auto(GStrv) lines = NULL;
  guint steps = 0;
  gboolean done = FALSE;

  run (&r, "train", "--model", "mnist-mlp", "--dataset", "synthetic", "--batch", "32",
       "--lr", "0.1", "--steps", "40", "--seed", "2", "--backend", "cpu", "--json", NULL);
  g_assert_cmpint (r.status, ==, 0);
  lines = g_strsplit (r.out, "\n", -1);
  for (guint i = 0; lines[i] && *lines[i]; i++)
    {
      g_autoptr(JsonParser) parser = json_parser_new ();
      g_autoptr(GError) error = NULL;
      JsonObject *o;
      const char *event;

      json_parser_load_from_data (parser, lines[i], -1, &error);
      g_assert_no_error (error);
      o = json_node_get_object (json_parser_get_root (parser));
      event = json_object_get_string_member (o, "event");
      if (i == 0)
        {
          g_assert_cmpstr (event, ==, "start");
          g_assert_cmpint (json_object_get_int_member (o, "params"), ==, 101770);
          g_assert_cmpstr (json_object_get_string_member (o, "backend"), ==, "cpu");
        }
      else if (g_str_equal (event, "step"))
        {
          double loss = json_object_get_double_member (o, "loss");

          g_assert_cmpint (json_object_get_int_member (o, "step"), ==, ++steps);
          g_assert_cmpfloat (loss, >, 0);
          g_assert_cmpfloat (loss, <, 10);
        }
      else
        {
          g_assert_cmpstr (event, ==, "done");
          g_assert_cmpint (json_object_get_int_member (o, "steps"), ==, 40);
          /* 40 steps of 32 on the synthetic patterns is far above chance. */
          g_assert_cmpfloat (json_object_get_double_member (o, "test_accuracy"), >, 0.5);
          done = TRUE;
        }
    }
  g_assert_cmpuint (steps, ==, 40);
  g_assert_true (done);
}

static void
test_bench (void)
{
  g_auto(Run) r = { 0 };
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  JsonObject *o;

  run (&r, "bench", "--model", "mnist-cnn", "--batch", "16", "--backend", "cpu",
       "--seconds", "0.2", "--json", NULL);
  g_assert_cmpint (r.status, ==, 0);
  json_parser_load_from_data (parser, r.out, -1, &error);
  g_assert_no_error (error);
  o = json_node_get_object (json_parser_get_root (parser));
  g_assert_cmpstr (json_object_get_string_member (o, "model"), ==, "mnist-cnn");
  g_assert_cmpint (json_object_get_int_member (o, "batch"), ==, 16);
  g_assert_cmpfloat (json_object_get_double_member (o, "samples_per_second"), >, 0);
}

/* `rlx-rank join --local --cohort @cohort --backend cpu --threads 1
 * --batch 8 --checkpoint-every 0 ARGS…` (NULL-terminated) in folders of
 * its own (the local bus, the checkpoint), where the cohort's checkpoint
 * holds @checkpoint first unless that is NULL. */
static void
run_join (Run *r, const char *cohort, const char *checkpoint, ...)
{
  g_autofree char *dir = g_build_filename (tmpdir, "join", NULL);
  g_autofree char *run_dir = g_build_filename (dir, "run", NULL);
  g_autofree char *data_dir = g_build_filename (dir, "data", NULL);
  g_autofree char *cohort_dir = g_build_filename (data_dir, "rlx-cluster", cohort, NULL);
  g_autofree char *rm = g_strdup_printf ("rm -rf '%s'", dir);
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  g_auto(GStrv) env = g_get_environ ();
  va_list ap;
  const char *fixed[] = { rank_path, "join", "--local", "--cohort", cohort, "--backend", "cpu",
                          "--threads", "1", "--batch", "8", "--checkpoint-every", "0", NULL };

  g_assert_cmpint (g_mkdir_with_parents (run_dir, 0700), ==, 0);
  g_assert_cmpint (g_mkdir_with_parents (cohort_dir, 0700), ==, 0);
  if (checkpoint)
    {
      g_autofree char *path = g_build_filename (cohort_dir, "checkpoint.safetensors", NULL);
      g_assert_true (g_file_set_contents (path, checkpoint, -1, NULL));
    }
  env = g_environ_setenv (env, "XDG_RUNTIME_DIR", run_dir, TRUE);
  env = g_environ_setenv (env, "XDG_DATA_HOME", data_dir, TRUE);
  for (guint k = 0; fixed[k] != NULL; k++)
    g_ptr_array_add (argv, (char *) fixed[k]);
  va_start (ap, checkpoint);
  run_argv (r, argv, env, ap);
  va_end (ap);
  g_assert_true (g_spawn_command_line_sync (rm, NULL, NULL, NULL, NULL));
  g_test_message ("stdout: %s\nstderr: %s", r->out, r->err);
}

/* join without --json prints events as lines a person reads: the numbers
 * of those it has no sentence for as written, not as JSON's round trip
 * (outer_momentum=0.90000000000000002). */
static void
test_join_lines (void)
{
  g_auto(Run) r = { 0 };

  run_join (&r, "lines", NULL, "--steps", "1", "--sync", "outer:5", "--outer-momentum", "0.9",
            "--outer-lr", "0.7", NULL);
  g_assert_cmpint (r.status, ==, 0);
  g_assert_nonnull (strstr (r.out, "\nsync "));
  g_assert_nonnull (strstr (r.out, " outer_momentum=0.9"));
  g_assert_nonnull (strstr (r.out, " outer_lr=0.7"));
  g_assert_null (strstr (r.out, "0.9000"));
  g_assert_null (strstr (r.out, "0.6999"));
}

/* A join that fails before its first step (a checkpoint that cannot be
 * resumed) says it stopped and why, once on standard output and as the
 * error on standard error — not "done at step 0" with the loss and hash
 * of parameters it never trained. */
static void
test_join_stopped_lines (void)
{
  g_auto(Run) r = { 0 };

  run_join (&r, "stopped", "garbage", "--steps", "5", NULL);
  g_assert_cmpint (r.status, ==, 1);
  g_assert_nonnull (strstr (r.out, "stopped before the first step: the checkpoint of cohort "
                                   "stopped cannot be resumed"));
  g_assert_null (strstr (r.out, "done at step"));
  g_assert_null (strstr (r.out, "loss 0.0000"));
  g_assert_nonnull (strstr (r.err, "rlx-rank join: the checkpoint of cohort stopped cannot be "
                                   "resumed"));
}

/* A word given where an invite may stand (a mistyped option's value, say)
 * is refused as no invite, without the warning about a cohort key in the
 * command line: there is none. */
static void
test_join_not_an_invite (void)
{
  g_auto(Run) r = { 0 };

  run_join (&r, "typo", NULL, "--steps", "1", "extra-word", NULL);
  g_assert_cmpint (r.status, ==, 2);
  g_assert_nonnull (strstr (r.err, "'extra-word' is not an invite"));
  g_assert_null (strstr (r.err, "warning"));
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  int status;

  g_test_init (&argc, &argv, NULL);
  rank_path = g_getenv ("RLX_RANK");
  if (rank_path == NULL)
    {
      g_printerr ("RLX_RANK is not set: run this test through meson test\n");
      return 1;
    }
  tmpdir = g_dir_make_tmp ("rlx-cli-XXXXXX", &error);
  g_assert_no_error (error);

  g_test_add_func ("/vision/cli/help", test_help);
  g_test_add_func ("/vision/cli/bad-options", test_bad_options);
  g_test_add_func ("/vision/cli/grads", test_grads);
  g_test_add_func ("/vision/cli/out-special", test_out_special);
  g_test_add_func ("/vision/cli/train-json", test_train_json);
  g_test_add_func ("/vision/cli/bench", test_bench);
  g_test_add_func ("/vision/cli/join-lines", test_join_lines);
  g_test_add_func ("/vision/cli/join-stopped-lines", test_join_stopped_lines);
  g_test_add_func ("/vision/cli/join-not-an-invite", test_join_not_an_invite);
  status = g_test_run ();
  g_rmdir (tmpdir);
  g_free (tmpdir);
  return status;
}
