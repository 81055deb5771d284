/* bench-kernels.c — GB/s of each round kernel against the plain
 * single-threaded path it replaces (the coordinator's loops over core/wire),
 * in one run. scripts/bench.sh runs it (area "kernels").
 *
 *   bench-kernels [--size N] [--threads LIST] [--reps R] [--json]
 *
 * GB/s counts the parameter vector at f32 (4·N bytes) per call, whatever the
 * wire precision, so the figures of one row compare directly. Each figure is
 * the median of R samples; a sample repeats the call until ≥ 20 ms passed,
 * and the plain path and the pools take turns sample by sample.
 */
#include "rlx-config.h"

#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rlx-kernels.h"
#include "core/vision/rlx-model.h"

typedef struct {
  gsize        n;
  RlxPrecision p;
  float       *x, *sum, *params, *residual, *tmp, *tmp2;
  guint8      *codes;
  double       scale;
  RlxKernels  *k;
} Ctx;

typedef void (*Fn) (Ctx *c);

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

/* One sample: GB/s of @fn, repeated until ≥ 20 ms passed. */
static double
sample (Ctx *c, Fn fn)
{
  gint64 t0 = g_get_monotonic_time (), t;
  guint calls = 0;

  do
    {
      fn (c);
      calls++;
      t = g_get_monotonic_time ();
    }
  while (t - t0 < 20000);
  return (double) c->n * 4 * calls / ((t - t0) * 1e-6) / 1e9;
}

static double
median (double *v, guint n)
{
  qsort (v, n, sizeof (double), cmp_double);
  return v[n / 2];
}

/* ── the plain path (what rlx-coordinator.c did per round) ─────────────── */

static void
ref_accumulate (Ctx *c)
{
  const guint32 *b = (const guint32 *) c->tmp;
  guint32 bad = 0;

  rlx_wire_dequantize (c->codes, c->n, c->p, c->scale, c->tmp);
  /* the coordinator's all_finite, then its accumulate */
  for (gsize i = 0; i < c->n; i++)
    bad |= (guint32) ((b[i] & 0x7f800000u) == 0x7f800000u);
  if (bad)
    abort ();
  for (gsize i = 0; i < c->n; i++)
    c->sum[i] += 3.0f * c->tmp[i];
}

static void
ref_update (Ctx *c)
{
  float inv = (float) (1.0 / 96.0);
  g_autoptr(GBytes) frame = NULL;

  for (gsize i = 0; i < c->n; i++)
    c->tmp[i] = 0.05f * (c->sum[i] * inv) + c->residual[i];
  frame = rlx_wire_encode (NULL, c->tmp, c->n, c->p, "avg", NULL);
  if (c->p != RLX_PRECISION_F32)
    rlx_wire_decode_into (frame, NULL, NULL, NULL, c->tmp2, c->n, NULL);
  else
    memcpy (c->tmp2, c->tmp, c->n * 4);
  for (gsize i = 0; i < c->n; i++)
    {
      float r = c->tmp[i] - c->tmp2[i];
      c->residual[i] = isfinite (r) ? r : 0.0f;
    }
  for (gsize i = 0; i < c->n; i++)
    c->params[i] -= c->tmp2[i];
}

static void
ref_apply (Ctx *c)
{
  rlx_wire_dequantize (c->codes, c->n, c->p, c->scale, c->tmp);
  for (gsize i = 0; i < c->n; i++)
    c->params[i] -= c->tmp[i];
}

static void
ref_apply_hash (Ctx *c)
{
  ref_apply (c);
  /* the old hash: one sequential XXH64 over the whole vector */
  if (rlx_xxh64 (c->params, c->n * 4, 0) == 42)
    abort ();
}

static void
ref_hash (Ctx *c)
{
  if (rlx_xxh64 (c->params, c->n * 4, 0) == 42)
    abort ();
}

/* ── the kernels ────────────────────────────────────────────────────────── */

static void
k_accumulate (Ctx *c)
{
  if (!rlx_kernels_accumulate (c->k, c->sum, c->sum, c->codes, c->n, c->p, c->scale, 3.0f,
                               NULL, NULL))
    abort ();
}

static void
k_update (Ctx *c)
{
  g_autoptr(GBytes) frame = rlx_kernels_encode_update (c->k, NULL, "avg", c->sum, c->n, 0.05f,
                                                       96, c->residual, c->p, c->params, NULL,
                                                       NULL, NULL);
  if (frame == NULL)
    abort ();
}

static void
k_apply (Ctx *c)
{
  rlx_kernels_apply (c->k, c->params, c->codes, c->n, c->p, c->scale, NULL);
}

static void
k_apply_hash (Ctx *c)
{
  guint64 h;

  rlx_kernels_apply (c->k, c->params, c->codes, c->n, c->p, c->scale, &h);
}

static void
k_hash (Ctx *c)
{
  if (rlx_kernels_hash (c->k, c->params, c->n) == 42)
    abort ();
}

int
main (int argc, char **argv)
{
  gint64 size = 1863690;
  g_autofree char *threads_arg = NULL;
  gint reps = 5;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "size", 0, 0, G_OPTION_ARG_INT64, &size, "elements (default mnist-mlp-xl's 1863690)", "N" },
    { "threads", 0, 0, G_OPTION_ARG_STRING, &threads_arg, "pool sizes, e.g. 1,2 (default 1,cores)", "LIST" },
    { "reps", 0, 0, G_OPTION_ARG_INT, &reps, "samples per figure (median)", "R" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "one JSON object per figure", NULL },
    { NULL }
  };
  g_autoptr(GOptionContext) octx = g_option_context_new ("— round kernels vs the plain path");
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) tlist = NULL;
  struct { const char *name; Fn ref, kern; gboolean per_precision; } rows[] = {
    { "accumulate", ref_accumulate, k_accumulate, TRUE },
    { "update", ref_update, k_update, TRUE },
    { "apply", ref_apply, k_apply, TRUE },
    { "apply+hash", ref_apply_hash, k_apply_hash, TRUE },
    { "hash", ref_hash, k_hash, FALSE },
  };
  Ctx c = { 0 };

  setlocale (LC_ALL, "");
  g_option_context_add_main_entries (octx, entries, NULL);
  if (!g_option_context_parse (octx, &argc, &argv, &error) || size < 1 || size > (1 << 28) ||
      reps < 1 || reps > 64)
    {
      g_printerr ("bench-kernels: %s\n",
                  error ? error->message : "--size must be 1..2^28 and --reps 1..64");
      return 2;
    }
  if (threads_arg == NULL)
    threads_arg = g_strdup_printf ("1,%u", g_get_num_processors ());
  tlist = g_strsplit (threads_arg, ",", -1);

  c.n = (gsize) size;
  c.x = g_new (float, c.n);
  c.sum = g_new (float, c.n);
  c.params = g_new (float, c.n);
  c.residual = g_new0 (float, c.n);
  c.tmp = g_new (float, c.n);
  c.tmp2 = g_new (float, c.n);
  c.codes = g_malloc (c.n * 4);
  {
    GRand *r = g_rand_new_with_seed (1);
    for (gsize i = 0; i < c.n; i++)
      {
        c.x[i] = (float) g_rand_double_range (r, -1e-3, 1e-3);
        c.sum[i] = (float) g_rand_double_range (r, -1.0, 1.0);
        c.params[i] = (float) g_rand_double_range (r, -0.1, 0.1);
      }
    g_rand_free (r);
  }

  if (!json)
    {
      g_print ("%" G_GSIZE_FORMAT " elements (%.2f MB at f32), kernels %s; GB/s of f32 "
               "parameters, median of %d\n\n", c.n, c.n * 4 / 1e6, rlx_wire_simd_path (), reps);
      g_print ("| kernel | precision | plain path | ");
      for (guint t = 0; tlist[t]; t++)
        g_print ("%s thread%s | × |", tlist[t], strcmp (tlist[t], "1") ? "s" : "");
      g_print ("\n|---|---|---|");
      for (guint t = 0; tlist[t]; t++)
        g_print ("---|---|");
      g_print ("\n");
    }

  for (guint row = 0; row < G_N_ELEMENTS (rows); row++)
    for (RlxPrecision p = 0; p < RLX_PRECISION_COUNT; p++)
      {
        double ref;

        if (!rows[row].per_precision && p != RLX_PRECISION_F32)
          continue;
        c.p = p;
        c.scale = rlx_wire_scale_for (c.x, c.n, p);
        rlx_wire_quantize (c.x, c.n, p, c.scale, c.codes);
        /* The plain path and every pool size take turns, sample by sample,
         * so a change in the machine's load hits all of them alike. */
        {
          RlxKernels *pools[16] = { NULL };
          double samples[17][64];
          guint n_pools = 0;

          for (guint t = 0; tlist[t] && n_pools < G_N_ELEMENTS (pools); t++)
            {
              guint64 nt = 0;

              if (!g_ascii_string_to_unsigned (tlist[t], 10, 1, 256, &nt, NULL))
                {
                  g_printerr ("bench-kernels: bad thread count '%s'\n", tlist[t]);
                  return 2;
                }
              pools[n_pools++] = rlx_kernels_new ((guint) nt);
            }
          rows[row].ref (&c);   /* warm */
          for (guint r = 0; r < (guint) reps; r++)
            {
              samples[0][r] = sample (&c, rows[row].ref);
              for (guint t = 0; t < n_pools; t++)
                {
                  c.k = pools[t];
                  samples[1 + t][r] = sample (&c, rows[row].kern);
                }
            }
          ref = median (samples[0], reps);
          if (!json)
            g_print ("| %s | %s | %.2f |", rows[row].name,
                     rows[row].per_precision ? rlx_precision_to_string (p) : "—", ref);
          for (guint t = 0; t < n_pools; t++)
            {
              double got = median (samples[1 + t], reps);

              if (json)
                g_print ("{\"kernel\":\"%s\",\"precision\":\"%s\",\"n\":%" G_GSIZE_FORMAT
                         ",\"threads\":%u,\"plain_gbs\":%.3f,\"kernel_gbs\":%.3f,\"kernels\":\"%s\"}\n",
                         rows[row].name, rlx_precision_to_string (p), c.n,
                         rlx_kernels_get_n_threads (pools[t]), ref, got, rlx_wire_simd_path ());
              else
                g_print (" %.2f | %.1f× |", got, got / ref);
              g_object_unref (pools[t]);
            }
          c.k = NULL;
        }
        if (!json)
          g_print ("\n");
      }

  g_free (c.x);
  g_free (c.sum);
  g_free (c.params);
  g_free (c.residual);
  g_free (c.tmp);
  g_free (c.tmp2);
  g_free (c.codes);
  return 0;
}
