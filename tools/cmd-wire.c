/* cmd-wire.c — rlx-rank wire encode|decode|bench
 *
 *   wire encode --precision P [--field g] [--header JSON]
 *       little-endian f32 on stdin → one frame on stdout
 *   wire decode [--max-frame BYTES]
 *       one frame on stdin → the header (wire fields included) as one JSON
 *       line on stderr, the floats as little-endian f32 on stdout; a bad
 *       frame → the decoder's message on stderr, exit status 1
 *   wire bench [--size N]… [--reps R] [--json] [--portable|--kernels K]
 *       single-thread GB/s (of f32 bytes) of encode and decode for each
 *       precision, next to memcpy of the same bytes
 */
#include "rlx-config.h"
#include "rlx-cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/wire/rlx-wire.h"

/* Largest stdin `wire encode` accepts: 64 Mi floats. */
#define ENCODE_MAX_INPUT (256u * 1024u * 1024u)

/* Reads all of @fd, up to @cap bytes; more than that is an error. */
static GBytes *
read_all (int fd, gsize cap, GError **error)
{
  g_autoptr(GByteArray) buf = g_byte_array_new ();
  guint8 chunk[65536];

  for (;;)
    {
      ssize_t r = read (fd, chunk, sizeof chunk);
      if (r < 0)
        {
          int e = errno;
          if (e == EINTR)
            continue;
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (e), "reading stdin: %s",
                       g_strerror (e));
          return NULL;
        }
      if (r == 0)
        break;
      if (buf->len + (gsize) r > cap)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                       "stdin is over %" G_GSIZE_FORMAT " bytes", cap);
          return NULL;
        }
      g_byte_array_append (buf, chunk, (guint) r);
    }
  return g_byte_array_free_to_bytes (g_steal_pointer (&buf));
}

static int
cmd_encode (int argc, char **argv)
{
  g_autofree char *precision = NULL, *field = NULL, *header_json = NULL;
  GOptionEntry entries[] = {
    { "precision", 'p', 0, G_OPTION_ARG_STRING, &precision, "f32, f16, f8e4m3 or f8e5m2 (required)", "P" },
    { "field", 'f', 0, G_OPTION_ARG_STRING, &field, "name of the float array (default g)", "NAME" },
    { "header", 'H', 0, G_OPTION_ARG_STRING, &header_json, "the message's other fields, a JSON object", "JSON" },
    { NULL },
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("< f32-le > frame");
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonObject) header = NULL;
  g_autoptr(GBytes) input = NULL, frame = NULL;
  RlxPrecision p;
  gsize len;
  const void *data;
  g_autofree float *values = NULL;

  g_option_context_set_summary (ctx, "Little-endian f32 on stdin → one wire frame on stdout.");
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!rlx_cli_parse (ctx, "wire encode", &argc, &argv))
    return RLX_EXIT_USAGE;
  if (!rlx_cli_no_extra_args ("wire encode", argc, argv))
    return RLX_EXIT_USAGE;
  if (precision == NULL)
    return rlx_cli_fail ("wire encode", RLX_EXIT_USAGE, "--precision is required: f32, f16, f8e4m3 or f8e5m2");
  if (!rlx_precision_from_string (precision, &p, &error))
    return rlx_cli_fail ("wire encode", RLX_EXIT_USAGE, "--precision: %s", error->message);
  if (header_json != NULL && (header = rlx_wire_header_parse (header_json, -1, &error)) == NULL)
    return rlx_cli_fail ("wire encode", RLX_EXIT_USAGE, "--header: %s", error->message);

  input = read_all (STDIN_FILENO, ENCODE_MAX_INPUT, &error);
  if (input == NULL)
    return rlx_cli_fail ("wire encode", RLX_EXIT_FAILURE, "%s", error->message);
  data = g_bytes_get_data (input, &len);
  if (len % 4 != 0)
    return rlx_cli_fail ("wire encode", RLX_EXIT_FAILURE,
                         "stdin has %" G_GSIZE_FORMAT " bytes, not a whole number of 4-byte floats", len);
  values = g_malloc (MAX (len, 4));
  for (gsize i = 0; i < len / 4; i++)
    {
      guint32 b;
      memcpy (&b, (const guint8 *) data + 4 * i, 4);
      b = GUINT32_FROM_LE (b);
      memcpy (values + i, &b, 4);
    }
  frame = rlx_wire_encode (header, values, len / 4, p, field, &error);
  if (frame == NULL)
    return rlx_cli_fail ("wire encode", error->domain == RLX_WIRE_ERROR &&
                         error->code == RLX_WIRE_ERROR_INVALID_ARGUMENT ? RLX_EXIT_USAGE : RLX_EXIT_FAILURE,
                         "%s", error->message);
  if (!rlx_cli_write_fd (STDOUT_FILENO, "stdout", g_bytes_get_data (frame, NULL), g_bytes_get_size (frame), &error))
    return rlx_cli_fail ("wire encode", RLX_EXIT_FAILURE, "%s", error->message);
  return RLX_EXIT_OK;
}

static int
cmd_decode (int argc, char **argv)
{
  gint64 max_frame = RLX_WIRE_DEFAULT_MAX_FRAME;
  GOptionEntry entries[] = {
    { "max-frame", 0, 0, G_OPTION_ARG_INT64, &max_frame, "largest frame accepted (default 16 MiB)", "BYTES" },
    { NULL },
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("< frame > f32-le");
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) frame = NULL;
  g_autoptr(JsonObject) header = NULL;
  g_autofree float *values = NULL;
  g_autofree char *line = NULL;
  RlxWireLimits limits = { 0 };
  RlxWireInfo info;

  g_option_context_set_summary (ctx, "One wire frame on stdin → header on stderr (one JSON line), "
                                     "floats on stdout (little-endian f32).");
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!rlx_cli_parse (ctx, "wire decode", &argc, &argv))
    return RLX_EXIT_USAGE;
  if (!rlx_cli_no_extra_args ("wire decode", argc, argv))
    return RLX_EXIT_USAGE;
  if (max_frame < 8 || max_frame > G_MAXUINT32)
    return rlx_cli_fail ("wire decode", RLX_EXIT_USAGE, "--max-frame must be between 8 and 4294967295");
  limits.max_frame = (gsize) max_frame;

  /* Read one byte more than allowed, so an oversize frame gets the
   * decoder's own message. */
  frame = read_all (STDIN_FILENO, limits.max_frame + 1, &error);
  if (frame == NULL)
    return rlx_cli_fail ("wire decode", RLX_EXIT_FAILURE, "%s (raise --max-frame?)", error->message);
  if (!rlx_wire_decode_full (frame, &limits, &info, &header, &values, &error))
    return rlx_cli_fail ("wire decode", RLX_EXIT_FAILURE, "%s", error->message);

  if (info.has_values)
    {
      json_object_set_string_member (header, "_f32", info.field);
      if (info.precision != RLX_PRECISION_F32)
        {
          json_object_set_string_member (header, "_fmt", rlx_precision_to_string (info.precision));
          json_object_set_double_member (header, "_scale", info.scale);
        }
    }
  line = rlx_wire_header_to_json (header, &error);
  if (line == NULL)
    return rlx_cli_fail ("wire decode", RLX_EXIT_FAILURE, "%s", error->message);
  fprintf (stderr, "%s\n", line);
  fflush (stderr);
  for (gsize i = 0; i < info.n; i++)
    {
      guint32 b;
      memcpy (&b, values + i, 4);
      b = GUINT32_TO_LE (b);
      memcpy (values + i, &b, 4);
    }
  if (info.n && !rlx_cli_write_fd (STDOUT_FILENO, "stdout", values, info.n * 4, &error))
    return rlx_cli_fail ("wire decode", RLX_EXIT_FAILURE, "%s", error->message);
  return RLX_EXIT_OK;
}

/* ── bench ──────────────────────────────────────────────────────────────── */

typedef void (*BenchFunc) (gpointer data);

/* Median over @reps samples of the seconds one call takes; each sample
 * repeats the call until it has run ≥ 20 ms. */
static double
time_op (BenchFunc fn, gpointer data, int reps)
{
  g_autofree double *samples = g_new (double, reps);

  fn (data); /* warm: tables, page faults */
  for (int r = 0; r < reps; r++)
    {
      guint64 iters = 1;
      for (;;)
        {
          gint64 t0 = g_get_monotonic_time ();
          double dt;
          for (guint64 i = 0; i < iters; i++)
            fn (data);
          dt = (g_get_monotonic_time () - t0) / 1e6;
          if (dt >= 0.02)
            {
              samples[r] = dt / iters;
              break;
            }
          iters *= 2;
        }
    }
  for (int i = 1; i < reps; i++)
    for (int j = i; j > 0 && samples[j - 1] > samples[j]; j--)
      {
        double t = samples[j];
        samples[j] = samples[j - 1];
        samples[j - 1] = t;
      }
  return samples[reps / 2];
}

typedef struct {
  float        *x;
  float        *y;
  gsize         n;
  RlxPrecision  p;
  JsonObject   *header;
  GBytes       *frame;
} Bench;

static void
op_memcpy (gpointer d)
{
  Bench *b = d;
  memcpy (b->y, b->x, b->n * 4);
  __asm__ volatile ("" : : "r" (b->y) : "memory");
}

static void
op_encode (gpointer d)
{
  Bench *b = d;
  GBytes *f = rlx_wire_encode (b->header, b->x, b->n, b->p, NULL, NULL);
  g_bytes_unref (f);
}

static void
op_decode (gpointer d)
{
  Bench *b = d;
  float *v = NULL;
  gsize n = 0;
  if (!rlx_wire_decode (b->frame, NULL, NULL, &v, &n, NULL))
    g_error ("bench: decode failed");
  g_free (v);
}

static void
op_decode_into (gpointer d)
{
  Bench *b = d;
  if (!rlx_wire_decode_into (b->frame, NULL, NULL, NULL, b->y, b->n, NULL))
    g_error ("bench: decode failed");
}

/* The same gradient-like vector as tests/wire/seed-codec.mjs's bench (same
 * generator, same arithmetic), so both codecs see the same values. */
static void
bench_vector (float *x, gsize n)
{
  guint32 s = 12345;

  for (gsize i = 0; i < n; i++)
    {
      double a, b;
      s = s * 1103515245u + 12345u;
      a = s / 4294967296.0;
      s = s * 1103515245u + 12345u;
      b = s / 4294967296.0;
      x[i] = (float) ((a - 0.5) * 1e-3 * (1 + 10 * b));
    }
}

static int
cmd_bench (int argc, char **argv)
{
  g_auto(GStrv) sizes = NULL;
  gint reps = 7;
  gboolean json = FALSE, portable = FALSE;
  g_autofree char *kernels = NULL;
  GOptionEntry entries[] = {
    { "size", 'n', 0, G_OPTION_ARG_STRING_ARRAY, &sizes, "floats per bucket (repeatable; default 101770 and 1863690, the mnist-mlp and mnist-mlp-xl sizes)", "N" },
    { "reps", 'r', 0, G_OPTION_ARG_INT, &reps, "samples per figure, the median is reported (default 7)", "R" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "one JSON line per size", NULL },
    { "portable", 0, 0, G_OPTION_ARG_NONE, &portable, "use the portable kernels (no F16C/AVX-512)", NULL },
    { "kernels", 0, 0, G_OPTION_ARG_STRING, &kernels, "kernel set: avx512vbmi, avx512, avx2 or portable (default: the best this CPU has)", "NAME" },
    { NULL },
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("");
  const char *default_sizes[] = { "101770", "1863690", NULL };
  const char *const *list;

  g_option_context_set_summary (ctx, "Single-thread throughput of the wire codec, in GB/s of f32 data.");
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!rlx_cli_parse (ctx, "wire bench", &argc, &argv))
    return RLX_EXIT_USAGE;
  if (reps < 1 || reps > 101)
    return rlx_cli_fail ("wire bench", RLX_EXIT_USAGE, "--reps must be between 1 and 101");
  rlx_wire_force_portable (portable);
  if (kernels != NULL && rlx_wire_force_kernels (kernels) == NULL)
    return rlx_cli_fail ("wire bench", RLX_EXIT_USAGE,
                         "--kernels %s: not a kernel set this CPU can run (avx512vbmi, avx512, avx2, portable)", kernels);
  list = sizes ? (const char *const *) sizes : default_sizes;

  for (guint k = 0; list[k]; k++)
    {
      guint64 n64;
      Bench b = { 0 };
      double t_memcpy;
      g_autoptr(GString) out = g_string_new (NULL);

      if (!g_ascii_string_to_unsigned (list[k], 10, 1, 64 * 1024 * 1024, &n64, NULL))
        return rlx_cli_fail ("wire bench", RLX_EXIT_USAGE, "--size '%s' is not a count between 1 and 67108864", list[k]);
      b.n = n64;
      b.x = g_new (float, b.n);
      b.y = g_new (float, b.n);
      bench_vector (b.x, b.n);
      memset (b.y, 0, b.n * 4);
      b.header = json_object_new ();
      json_object_set_string_member (b.header, "t", "grad");
      json_object_set_int_member (b.header, "step", 1);

      t_memcpy = time_op (op_memcpy, &b, reps);
      if (json)
        {
          double sum = 0; /* the Node bench prints the same sum: same vector */
          for (gsize i = 0; i < b.n; i++)
            sum += b.x[i];
          g_string_append_printf (out, "{\"n\":%" G_GSIZE_FORMAT ",\"bytes\":%" G_GSIZE_FORMAT
                                  ",\"sum\":%.17g,\"kernels\":\"%s\",\"memcpy_gbs\":%.3f",
                                  b.n, b.n * 4, sum, rlx_wire_simd_path (), b.n * 4 / t_memcpy / 1e9);
        }
      else
        g_string_append_printf (out, "%" G_GSIZE_FORMAT " floats (%.1f KB), kernels %s, median of %d\n"
                                "  memcpy                 %7.2f GB/s\n",
                                b.n, b.n * 4 / 1e3, rlx_wire_simd_path (), reps, b.n * 4 / t_memcpy / 1e9);
      for (int p = 0; p < RLX_PRECISION_COUNT; p++)
        {
          double te, td, ti;

          b.p = p;
          b.frame = rlx_wire_encode (b.header, b.x, b.n, p, NULL, NULL);
          te = time_op (op_encode, &b, reps);
          td = time_op (op_decode, &b, reps);
          ti = time_op (op_decode_into, &b, reps);
          if (json)
            g_string_append_printf (out, ",\"%s\":{\"encode_gbs\":%.3f,\"decode_gbs\":%.3f,\"decode_into_gbs\":%.3f,\"frame_bytes\":%" G_GSIZE_FORMAT "}",
                                    rlx_precision_to_string (p), b.n * 4 / te / 1e9, b.n * 4 / td / 1e9,
                                    b.n * 4 / ti / 1e9, g_bytes_get_size (b.frame));
          else
            g_string_append_printf (out, "  %-7s encode %7.2f GB/s   decode %7.2f GB/s   decode_into %7.2f GB/s\n",
                                    rlx_precision_to_string (p), b.n * 4 / te / 1e9, b.n * 4 / td / 1e9,
                                    b.n * 4 / ti / 1e9);
          g_clear_pointer (&b.frame, g_bytes_unref);
        }
      if (json)
        g_string_append (out, "}\n");
      fputs (out->str, stdout);
      fflush (stdout);
      g_free (b.x);
      g_free (b.y);
      json_object_unref (b.header);
    }
  return RLX_EXIT_OK;
}

int
rlx_cmd_wire (int argc, char **argv)
{
  if (argc >= 2 && strcmp (argv[1], "encode") == 0)
    return cmd_encode (argc - 1, argv + 1);
  if (argc >= 2 && strcmp (argv[1], "decode") == 0)
    return cmd_decode (argc - 1, argv + 1);
  if (argc >= 2 && strcmp (argv[1], "bench") == 0)
    return cmd_bench (argc - 1, argv + 1);
  if (argc >= 2 && (strcmp (argv[1], "--help") == 0 || strcmp (argv[1], "-h") == 0))
    {
      printf ("Usage: rlx-rank wire encode|decode|bench [OPTIONS]\n\n"
              "  encode --precision P [--field g] [--header JSON]   f32 on stdin → frame on stdout\n"
              "  decode [--max-frame BYTES]    frame on stdin → header on stderr, f32 on stdout\n"
              "  bench [--size N]… [--reps R] [--json] [--kernels K]   codec throughput\n\n"
              "Run 'rlx-rank wire SUB --help' for a subcommand's options.\n");
      return RLX_EXIT_OK;
    }
  if (argc < 2)
    return rlx_cli_fail ("wire", RLX_EXIT_USAGE, "missing subcommand: encode, decode or bench (see rlx-rank wire --help)");
  return rlx_cli_fail ("wire", RLX_EXIT_USAGE, "unknown subcommand '%s': use encode, decode or bench (see rlx-rank wire --help)", argv[1]);
}
