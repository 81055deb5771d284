/* test-wire-cli.c — rlx-rank wire encode | decode | bench, through the real
 * executable ($RLX_RANK), with pipes. */
#include "rlx-config.h"

#include <math.h>
#include <signal.h>
#include <string.h>

#include "core/wire/rlx-wire.h"

typedef struct {
  int     status;
  GBytes *out;
  char   *err;
} Run;

static void
run_clear (Run *r)
{
  g_clear_pointer (&r->out, g_bytes_unref);
  g_clear_pointer (&r->err, g_free);
}

/* Runs rlx-rank with @args, feeding @in on stdin; with @in NULL the child's
 * stdin is /dev/null. Give input only to commands that read all of it: one
 * that exits first (a usage error) would close the pipe while it is being
 * written, and whether that write fails is a race. */
static Run
run_rank (const char *const *args, GBytes *in)
{
  GSubprocessFlags flags = G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE;
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  g_autoptr(GSubprocess) proc = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) err = NULL;
  Run r = { 0 };
  const char *rank = g_getenv ("RLX_RANK");

  g_assert_nonnull (rank);
  g_ptr_array_add (argv, (gpointer) rank);
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add (argv, (gpointer) args[i]);
  g_ptr_array_add (argv, NULL);
  if (in != NULL)
    flags |= G_SUBPROCESS_FLAGS_STDIN_PIPE;
  proc = g_subprocess_newv ((const char *const *) argv->pdata, flags, &error);
  g_assert_no_error (error);
  g_assert_true (g_subprocess_communicate (proc, in, NULL, &r.out, &err, &error));
  g_assert_no_error (error);
  r.status = g_subprocess_get_exit_status (proc);
  r.err = err && g_bytes_get_size (err) ? g_strndup (g_bytes_get_data (err, NULL), g_bytes_get_size (err))
                                         : g_strdup ("");
  if (r.out == NULL)
    r.out = g_bytes_new (NULL, 0);
  return r;
}

static void
test_cli_encode_decode (void)
{
  float x[5] = { 1.0f, -2.0f, 0.5f, 1e-9f, NAN };
  g_autoptr(GBytes) in = g_bytes_new (x, sizeof x);

  for (int p = 0; p < RLX_PRECISION_COUNT; p++)
    {
      const char *enc[] = { "wire", "encode", "--precision", rlx_precision_to_string (p),
                            "--field", "params", "--header", "{\"t\":\"commit\",\"step\":3}", NULL };
      const char *dec[] = { "wire", "decode", NULL };
      Run e = run_rank (enc, in), d;
      g_autoptr(GBytes) lib = NULL;
      float rt[5];
      g_autofree char *want_hdr = NULL;

      g_assert_cmpint (e.status, ==, 0);
      g_assert_cmpstr (e.err, ==, "");
      /* the CLI's frame is the library's frame */
      {
        g_autoptr(JsonObject) h = json_object_new ();
        json_object_set_string_member (h, "t", "commit");
        json_object_set_int_member (h, "step", 3);
        lib = rlx_wire_encode (h, x, 5, p, "params", NULL);
      }
      g_assert_true (g_bytes_equal (e.out, lib));

      d = run_rank (dec, e.out);
      g_assert_cmpint (d.status, ==, 0);
      rlx_wire_round_trip (x, rt, 5, p);
      g_assert_cmpuint (g_bytes_get_size (d.out), ==, sizeof rt);
      for (int i = 0; i < 5; i++)
        {
          float got = ((const float *) g_bytes_get_data (d.out, NULL))[i];
          if (isnan (rt[i]))
            g_assert_true (isnan (got));
          else
            g_assert_cmpfloat (got, ==, rt[i]);
        }
      if (p == RLX_PRECISION_F32)
        want_hdr = g_strdup ("{\"t\":\"commit\",\"step\":3,\"_f32\":\"params\"}\n");
      else
        want_hdr = g_strdup_printf ("{\"t\":\"commit\",\"step\":3,\"_f32\":\"params\",\"_fmt\":\"%s\",\"_scale\":%s}\n",
                                    rlx_precision_to_string (p), p == RLX_PRECISION_F8E4M3 ? "96" : "512");
      g_assert_cmpstr (d.err, ==, want_hdr);
      run_clear (&e);
      run_clear (&d);
    }
}

static void
test_cli_bad_input (void)
{
  const char *dec[] = { "wire", "decode", NULL };
  const char *enc_f16[] = { "wire", "encode", "-p", "f16", NULL };
  struct { const char *frame; gsize len; const char *says; } bad[] = {
    { "ab", 2, "shorter than its 4-byte header length" },
    { "\x04\x00\x00\x00{\"a\"", 8, "header JSON" },
    { "\x10\x00\x00\x00{\"_f32\":1}", 14, "runs past the end" },
    { "\x04\x00\x00\x00[1] ", 8, "not an object" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GBytes) in = g_bytes_new (bad[i].frame, bad[i].len);
      Run r = run_rank (dec, in);
      g_assert_cmpint (r.status, ==, 1);
      g_assert_cmpuint (g_bytes_get_size (r.out), ==, 0);
      if (strstr (r.err, bad[i].says) == NULL || !g_str_has_prefix (r.err, "rlx-rank wire decode: "))
        g_error ("bad frame %u: stderr \"%s\" does not say \"%s\"", i, r.err, bad[i].says);
      run_clear (&r);
    }
  /* encode: stdin not a whole number of floats */
  {
    g_autoptr(GBytes) in = g_bytes_new ("abcde", 5);
    Run r = run_rank (enc_f16, in);
    g_assert_cmpint (r.status, ==, 1);
    g_assert_nonnull (strstr (r.err, "not a whole number"));
    run_clear (&r);
  }
  /* usage errors: status 2, one line naming the problem */
  {
    const char *a1[] = { "wire", "encode", "-p", "f12", NULL };
    const char *a2[] = { "wire", "encode", NULL };
    const char *a3[] = { "wire", "encode", "-p", "f16", "--header", "{'t':1}", NULL };
    const char *a4[] = { "wire", "frobnicate", NULL };
    const char *a5[] = { "wire", "encode", "-p", "f16", "--header", "{\"_scale\":1}", NULL };
    const char *const *cases[] = { a1, a2, a3, a4, a5 };
    const char *says[] = { "f12", "--precision", "--header", "frobnicate", "_scale" };

    /* No stdin: they exit before reading any. */
    for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
      {
        Run r = run_rank (cases[i], NULL);
        g_assert_cmpint (r.status, ==, 2);
        g_assert_nonnull (strstr (r.err, says[i]));
        run_clear (&r);
      }
  }
}

static void
test_cli_bench (void)
{
  const char *args[] = { "wire", "bench", "--size", "1000", "--reps", "1", "--json", NULL };
  Run r = run_rank (args, NULL);
  g_autoptr(JsonParser) parser = json_parser_new ();
  JsonObject *o;

  g_assert_cmpint (r.status, ==, 0);
  g_assert_true (json_parser_load_from_data (parser, g_bytes_get_data (r.out, NULL),
                                             (gssize) g_bytes_get_size (r.out), NULL));
  o = json_node_get_object (json_parser_get_root (parser));
  g_assert_cmpint (json_object_get_int_member (o, "n"), ==, 1000);
  g_assert_cmpfloat (json_object_get_double_member (o, "memcpy_gbs"), >, 0);
  for (int p = 0; p < RLX_PRECISION_COUNT; p++)
    {
      JsonObject *f = json_object_get_object_member (o, rlx_precision_to_string (p));
      g_assert_nonnull (f);
      g_assert_cmpfloat (json_object_get_double_member (f, "encode_gbs"), >, 0);
      g_assert_cmpfloat (json_object_get_double_member (f, "decode_gbs"), >, 0);
      g_assert_cmpint (json_object_get_int_member (f, "frame_bytes"), >, 1000 * rlx_precision_element_size (p));
    }
  run_clear (&r);
}

int
main (int argc, char **argv)
{
  /* A child that stops reading its input early must fail an assertion with
   * "Broken pipe", not kill this process with SIGPIPE. */
  signal (SIGPIPE, SIG_IGN);
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/wire/cli/encode-decode", test_cli_encode_decode);
  g_test_add_func ("/wire/cli/bad-input", test_cli_bad_input);
  g_test_add_func ("/wire/cli/bench", test_cli_bench);
  return g_test_run ();
}
