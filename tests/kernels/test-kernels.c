/* test-kernels.c — core/rlx-kernels against core/wire's reference, bit for bit
 *
 * Every kernel, every precision, sizes from 0 to a few chunks (odd ones, the
 * block and chunk edges), pools of 1, 2, 3 and 5 threads, and every kernel
 * set this CPU has (portable, avx2, avx512). The parameter hash is checked
 * against the reference xxHash library (libxxhash) and its tree definition.
 */
#include "rlx-config.h"

#include <math.h>
#include <string.h>
#include <xxhash.h>

#include "core/rlx-kernels.h"
#include "core/vision/rlx-model.h"

static const gsize sizes[] = {
  0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 65, 255, 4095, 4096, 4097, 16383, 16384, 16385,
  2 * 16384 - 1, 2 * 16384 + 5, 3 * 16384 + 4096 + 123, 101770,
};
static const guint threads[] = { 1, 2, 3, 5 };
static const char *const kernel_sets[] = { "portable", "avx2", "avx512", "avx512vbmi" };

/* A deterministic mix of magnitudes: zeros (both signs), subnormals, tiny,
 * ordinary and large values. */
static void
fill (float *x, gsize n, guint32 seed, float spread)
{
  GRand *r = g_rand_new_with_seed (seed);

  for (gsize i = 0; i < n; i++)
    {
      guint k = g_rand_int_range (r, 0, 100);
      double v = g_rand_double_range (r, -1.0, 1.0);

      if (k == 0)
        x[i] = 0.0f;
      else if (k == 1)
        x[i] = -0.0f;
      else if (k == 2)
        x[i] = (float) (v * 1e-41);            /* f32 subnormal */
      else if (k < 10)
        x[i] = (float) (v * 1e-6);
      else
        x[i] = (float) (v * spread);
    }
  g_rand_free (r);
}

/* The codes of @x at @p as rlx_wire_encode writes them, in a fresh buffer
 * offset by @misalign bytes; returns the buffer (free it) and the scale. */
static guint8 *
codes_for (const float *x, gsize n, RlxPrecision p, gsize misalign, const void **codes,
           double *scale)
{
  gsize es = rlx_precision_element_size (p);
  guint8 *buf = g_malloc (n * es + misalign + 1);

  *scale = rlx_wire_scale_for (x, n, p);
  rlx_wire_quantize (x, n, p, *scale, buf + misalign);
  *codes = buf + misalign;
  return buf;
}

static gboolean
same_bits (const float *a, const float *b, gsize n)
{
  return n == 0 || memcmp (a, b, n * sizeof (float)) == 0;
}

/* A pool that splits every job, however small, so the tests' sizes all
 * reach the threads. */
static RlxKernels *
pool_new (guint n_threads)
{
  RlxKernels *k = rlx_kernels_new (n_threads);

  rlx_kernels_set_min_parallel (k, 0);
  return k;
}

static guint n_sets_run;

/* Run @func once per kernel set this CPU has. */
static void
for_each_kernel_set (void (*func) (gconstpointer), gconstpointer data)
{
  n_sets_run = 0;
  for (guint s = 0; s < G_N_ELEMENTS (kernel_sets); s++)
    {
      if (rlx_wire_force_kernels (kernel_sets[s]) == NULL)
        continue;
      n_sets_run++;
      func (data);
    }
  rlx_wire_force_kernels (NULL);
  g_assert_cmpuint (n_sets_run, >=, 1);
}

/* ── hash ───────────────────────────────────────────────────────────────── */

static void
test_xxh64_reference (void)
{
  g_autofree guint8 *data = g_malloc (1000);

  for (guint i = 0; i < 1000; i++)
    data[i] = (guint8) (i * 7 + 3);
  for (gsize len = 0; len <= 1000; len = len < 70 ? len + 1 : len + 97)
    for (guint64 seed = 0; seed < 3; seed++)
      g_assert_cmphex (rlx_xxh64 (data, len, seed * 0x9E3779B97F4A7C15u), ==,
                       XXH64 (data, len, seed * 0x9E3779B97F4A7C15u));
}

/* The tree with chunks of @c elements, written out independently with
 * libxxhash. */
static guint64
tree_hash_c (const float *x, gsize n, gsize c)
{
  gsize m = (n + c - 1) / c;
  g_autofree guint64 *h = g_new (guint64, m + 1);

  for (gsize k = 0; k < m; k++)
    {
      gsize len = MIN (c, n - k * c);
      h[k] = GUINT64_TO_LE (XXH64 (x + k * c, len * 4, k));
    }
  return XXH64 (h, m * 8, n);
}

static guint64
tree_hash (const float *x, gsize n)
{
  return tree_hash_c (x, n, RLX_PARAMS_HASH_CHUNK);
}

static void
test_hash (void)
{
  gsize n_max = 7 * RLX_KERNELS_CHUNK + 77;   /* over every size in sizes[] */
  g_autofree float *x = g_new (float, n_max);

  fill (x, n_max, 1, 1.0f);
  for (guint t = 0; t < G_N_ELEMENTS (threads); t++)
    {
      g_autoptr(RlxKernels) k = pool_new (threads[t]);

      for (guint s = 0; s < G_N_ELEMENTS (sizes); s++)
        {
          gsize n = sizes[s];
          guint64 ref = tree_hash (x, n);

          g_assert_cmphex (rlx_params_hash (x, n), ==, ref);
          g_assert_cmphex (rlx_kernels_hash (k, x, n), ==, ref);
          /* checkpoints written before the chunk size changed */
          g_assert_cmphex (rlx_params_hash_with_chunk (x, n, RLX_PARAMS_HASH_CHUNK_V1), ==,
                           tree_hash_c (x, n, RLX_PARAMS_HASH_CHUNK_V1));
          g_assert_cmphex (rlx_params_hash_with_chunk (x, n, RLX_PARAMS_HASH_CHUNK), ==, ref);
        }
      g_assert_cmphex (rlx_kernels_hash (k, x, n_max), ==, tree_hash (x, n_max));
    }

  /* It sees every bit: one flipped bit anywhere changes it. */
  {
    gsize n = 2 * RLX_KERNELS_CHUNK + 3;
    guint64 h0 = rlx_params_hash (x, n);
    gsize where[] = { 0, 1, RLX_KERNELS_CHUNK - 1, RLX_KERNELS_CHUNK, n - 1 };

    for (guint i = 0; i < G_N_ELEMENTS (where); i++)
      {
        guint32 b;
        memcpy (&b, &x[where[i]], 4);
        b ^= 1;
        memcpy (&x[where[i]], &b, 4);
        g_assert_cmphex (rlx_params_hash (x, n), !=, h0);
        b ^= 1;
        memcpy (&x[where[i]], &b, 4);
      }
    g_assert_cmphex (rlx_params_hash (x, n), ==, h0);
    /* …and the length. */
    g_assert_cmphex (rlx_params_hash (x, n - 1), !=, h0);
  }
}

/* ── accumulate ─────────────────────────────────────────────────────────── */

static void
check_accumulate (gconstpointer unused)
{
  gsize n_max = 101770;
  g_autofree float *x = g_new (float, n_max);
  g_autofree float *src = g_new (float, n_max);
  g_autofree float *want = g_new (float, n_max);
  g_autofree float *got = g_new (float, n_max);

  fill (x, n_max, 2, 0.01f);
  fill (src, n_max, 3, 1.0f);
  for (guint t = 0; t < G_N_ELEMENTS (threads); t++)
    {
      g_autoptr(RlxKernels) k = pool_new (threads[t]);

      for (RlxPrecision p = 0; p < RLX_PRECISION_COUNT; p++)
        for (guint s = 0; s < G_N_ELEMENTS (sizes); s++)
          for (gsize misalign = 0; misalign < 2; misalign++)
            {
              gsize n = sizes[s];
              const void *codes;
              double scale;
              g_autofree guint8 *buf = codes_for (x, n, p, misalign, &codes, &scale);
              float w = 37.0f;

              /* first bucket: dst = w · x */
              g_assert_true (rlx_kernels_ref_accumulate (want, NULL, codes, n, p, scale, w, NULL));
              memset (got, 0xff, n_max * 4);
              g_assert_true (rlx_kernels_accumulate (k, got, NULL, codes, n, p, scale, w, NULL, NULL));
              g_assert_true (same_bits (want, got, n));

              /* later ones: out of place and in place */
              g_assert_true (rlx_kernels_ref_accumulate (want, src, codes, n, p, scale, w, NULL));
              g_assert_true (rlx_kernels_accumulate (k, got, src, codes, n, p, scale, w, NULL, NULL));
              g_assert_true (same_bits (want, got, n));
              memcpy (got, src, n * 4);
              g_assert_true (rlx_kernels_accumulate (k, got, got, codes, n, p, scale, w, NULL, NULL));
              g_assert_true (same_bits (want, got, n));
            }
    }
}

static void
test_accumulate (void)
{
  for_each_kernel_set (check_accumulate, NULL);
}

/* The reference loop is what the coordinator did before: dequantise, then
 * sum += w · x. Check that definition itself on a few hand values. */
static void
test_accumulate_definition (void)
{
  float x[4] = { 1.5f, -2.0f, 0.25f, 3.0f };
  float s[4] = { 1.0f, 1.0f, 1.0f, -0.0f };
  float out[4];
  g_autoptr(RlxKernels) k = pool_new (1);

  g_assert_true (rlx_kernels_accumulate (k, out, s, x, 4, RLX_PRECISION_F32, 1.0, 2.0f, NULL, NULL));
  g_assert_cmpfloat (out[0], ==, 4.0f);
  g_assert_cmpfloat (out[1], ==, -3.0f);
  g_assert_cmpfloat (out[2], ==, 1.5f);
  g_assert_cmpfloat (out[3], ==, 6.0f);
  g_assert_true (rlx_kernels_accumulate (k, out, NULL, x, 4, RLX_PRECISION_F32, 1.0, -0.5f, NULL, NULL));
  g_assert_cmpfloat (out[0], ==, -0.75f);
  g_assert_cmpfloat (out[3], ==, -1.5f);
}

static void
check_nonfinite (gconstpointer unused)
{
  gsize n = 3 * RLX_KERNELS_CHUNK + 11;
  g_autofree float *x = g_new (float, n);
  g_autofree float *dst = g_new (float, n);
  /* f8 saturates ±Inf to a finite code, so only NaN survives there; f32 and
   * f16 carry ±Inf. */
  struct { RlxPrecision p; float bad; } cases[] = {
    { RLX_PRECISION_F32, INFINITY }, { RLX_PRECISION_F32, -INFINITY }, { RLX_PRECISION_F32, NAN },
    { RLX_PRECISION_F16, INFINITY }, { RLX_PRECISION_F16, NAN },
    { RLX_PRECISION_F8E4M3, NAN }, { RLX_PRECISION_F8E5M2, NAN },
  };
  gsize where[][2] = { { 0, 5 }, { 4096, 40000 }, { 16384, 16385 }, { n - 1, n - 1 },
                       { 40000, 2 } };

  for (guint t = 0; t < G_N_ELEMENTS (threads); t++)
    {
      g_autoptr(RlxKernels) k = pool_new (threads[t]);

      for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
        for (guint w = 0; w < G_N_ELEMENTS (where); w++)
          {
            const void *codes;
            double scale;
            g_autofree guint8 *buf = NULL;
            g_autoptr(GError) error = NULL;
            gsize bad = 0, ref_bad = 0, first = MIN (where[w][0], where[w][1]);

            fill (x, n, 4, 1.0f);
            x[where[w][0]] = cases[c].bad;
            x[where[w][1]] = cases[c].bad;
            buf = codes_for (x, n, cases[c].p, 0, &codes, &scale);
            g_assert_false (rlx_kernels_ref_accumulate (dst, NULL, codes, n, cases[c].p, scale,
                                                        1.0f, &ref_bad));
            g_assert_cmpuint (ref_bad, ==, first);
            g_assert_false (rlx_kernels_accumulate (k, dst, NULL, codes, n, cases[c].p, scale,
                                                    1.0f, &bad, &error));
            g_assert_error (error, RLX_KERNELS_ERROR, RLX_KERNELS_ERROR_NONFINITE);
            g_assert_cmpuint (bad, ==, first);
            {
              g_autofree char *needle = g_strdup_printf ("value %" G_GSIZE_FORMAT " is", first);
              g_assert_nonnull (strstr (error->message, needle));
            }
          }
    }
}

static void
test_nonfinite (void)
{
  for_each_kernel_set (check_nonfinite, NULL);
}

/* RlxKernelsSum: a refused bucket leaves the sum as it was. */
static void
test_sum_refuses_cleanly (void)
{
  gsize n = 2 * RLX_KERNELS_CHUNK + 100;
  g_autoptr(RlxKernels) k = pool_new (2);
  g_autoptr(RlxKernelsSum) sum = rlx_kernels_sum_new (n);
  g_autofree float *a = g_new (float, n);
  g_autofree float *b = g_new (float, n);
  g_autofree float *want = g_new (float, n);
  g_autoptr(GError) error = NULL;

  fill (a, n, 5, 0.1f);
  fill (b, n, 6, 0.1f);
  g_assert_null (rlx_kernels_sum_get (sum));
  g_assert_true (rlx_kernels_sum_add (k, sum, a, n, RLX_PRECISION_F32, 1.0, 3.0f, NULL));
  g_assert_true (rlx_kernels_ref_accumulate (want, NULL, a, n, RLX_PRECISION_F32, 1.0, 3.0f, NULL));
  g_assert_true (same_bits (rlx_kernels_sum_get (sum), want, n));

  /* a bad bucket: NaN late in the last chunk, after most values were added */
  b[n - 2] = NAN;
  g_assert_false (rlx_kernels_sum_add (k, sum, b, n, RLX_PRECISION_F32, 1.0, 2.0f, &error));
  g_assert_error (error, RLX_KERNELS_ERROR, RLX_KERNELS_ERROR_NONFINITE);
  g_clear_error (&error);
  g_assert_true (same_bits (rlx_kernels_sum_get (sum), want, n));
  g_assert_cmpuint (rlx_kernels_sum_count (sum), ==, 1);

  /* a good one after it */
  b[n - 2] = 0.5f;
  g_assert_true (rlx_kernels_sum_add (k, sum, b, n, RLX_PRECISION_F32, 1.0, 2.0f, NULL));
  g_assert_true (rlx_kernels_ref_accumulate (want, want, b, n, RLX_PRECISION_F32, 1.0, 2.0f, NULL));
  g_assert_true (same_bits (rlx_kernels_sum_get (sum), want, n));
  g_assert_cmpuint (rlx_kernels_sum_count (sum), ==, 2);

  /* wrong length */
  g_assert_false (rlx_kernels_sum_add (k, sum, b, n - 1, RLX_PRECISION_F32, 1.0, 2.0f, &error));
  g_assert_error (error, RLX_KERNELS_ERROR, RLX_KERNELS_ERROR_INVALID);
  rlx_kernels_sum_reset (sum);
  g_assert_null (rlx_kernels_sum_get (sum));
}

/* ── the update frame ───────────────────────────────────────────────────── */

static JsonObject *
step_header (guint round)
{
  JsonObject *h = json_object_new ();

  json_object_set_string_member (h, "t", "step");
  json_object_set_int_member (h, "step", round);
  return h;
}

static void
check_encode_update (gconstpointer unused)
{
  for (guint t = 0; t < G_N_ELEMENTS (threads); t++)
    {
      g_autoptr(RlxKernels) k = pool_new (threads[t]);

      for (RlxPrecision p = 0; p < RLX_PRECISION_COUNT; p++)
        for (guint s = 0; s < G_N_ELEMENTS (sizes); s++)
          {
            gsize n = sizes[s];
            g_autoptr(RlxWireFeedback) fb = rlx_wire_feedback_new (n);
            g_autofree float *sum = g_new (float, MAX (n, 1));
            g_autofree float *x = g_new (float, MAX (n, 1));
            g_autofree float *residual = g_new0 (float, MAX (n, 1));
            g_autofree float *params = g_new (float, MAX (n, 1));
            g_autofree float *ref_params = g_new (float, MAX (n, 1));
            g_autofree float *update = g_new (float, MAX (n, 1));
            g_autofree float *ref_update = g_new (float, MAX (n, 1));
            float lr = 0.05f;
            guint64 samples = 96;
            float inv = (float) (1.0 / (double) samples);

            fill (params, n, 7, 1.0f);
            memcpy (ref_params, params, n * 4);
            /* Three rounds, so the residual carried from one to the next is
             * checked too. */
            for (guint round = 0; round < 3; round++)
              {
                g_autoptr(JsonObject) h = step_header (round);
                g_autoptr(GBytes) want = NULL;
                g_autoptr(GBytes) got = NULL;
                g_autoptr(GError) error = NULL;
                guint64 hash = 0;

                fill (sum, n, 10 + round, 20.0f);
                for (gsize i = 0; i < n; i++)
                  x[i] = lr * (sum[i] * inv);
                want = rlx_wire_feedback_encode (fb, h, x, n, p, "avg", ref_update, &error);
                g_assert_no_error (error);
                for (gsize i = 0; i < n; i++)
                  ref_params[i] -= ref_update[i];

                got = rlx_kernels_encode_update (k, h, "avg", sum, n, lr, samples, residual, p,
                                                 params, update, &hash, &error);
                g_assert_no_error (error);
                g_assert_true (g_bytes_equal (want, got));
                g_assert_true (same_bits (residual, rlx_wire_feedback_residual (fb), n));
                g_assert_true (same_bits (update, ref_update, n));
                g_assert_true (same_bits (params, ref_params, n));
                g_assert_cmphex (hash, ==, rlx_params_hash (ref_params, n));
              }

            /* Without a residual: rlx_wire_encode of u. */
            {
              g_autoptr(JsonObject) h = step_header (9);
              g_autoptr(GBytes) want = NULL;
              g_autoptr(GBytes) got = NULL;

              for (gsize i = 0; i < n; i++)
                x[i] = lr * (sum[i] * inv);
              want = rlx_wire_encode (h, x, n, p, "avg", NULL);
              got = rlx_kernels_encode_update (k, h, "avg", sum, n, lr, samples, NULL, p,
                                               NULL, NULL, NULL, NULL);
              g_assert_nonnull (want);
              g_assert_nonnull (got);
              g_assert_true (g_bytes_equal (want, got));
            }
          }
    }
}

static void
test_encode_update (void)
{
  for_each_kernel_set (check_encode_update, NULL);
}

/* A member's gradient with error feedback is the same function at lr 1 over
 * one sample: u = x + residual. */
static void
test_encode_feedback_bucket (void)
{
  gsize n = 101770;
  g_autoptr(RlxKernels) k = pool_new (2);
  g_autoptr(RlxWireFeedback) fb = rlx_wire_feedback_new (n);
  g_autofree float *g = g_new (float, n);
  g_autofree float *residual = g_new0 (float, n);

  for (guint round = 0; round < 4; round++)
    {
      g_autoptr(GBytes) want = NULL;
      g_autoptr(GBytes) got = NULL;

      fill (g, n, 20 + round, 0.3f);
      want = rlx_wire_feedback_encode (fb, NULL, g, n, RLX_PRECISION_F8E4M3, "g", NULL, NULL);
      got = rlx_kernels_encode_update (k, NULL, "g", g, n, 1.0f, 1, residual,
                                       RLX_PRECISION_F8E4M3, NULL, NULL, NULL, NULL);
      g_assert_true (g_bytes_equal (want, got));
      g_assert_true (same_bits (residual, rlx_wire_feedback_residual (fb), n));
    }
}

/* make_update is encode_update without the frame: the same codes, the
 * same residual and parameters; with separate residual arrays the carried
 * one is left alone; with the largest |u| given (and every u finite) it
 * skips the pass that finds it and gives the same bits; without codes it
 * still applies what they decode to. */
static void
test_make_update (void)
{
  gsize n = 3 * RLX_KERNELS_CHUNK + 101;
  g_autoptr(RlxKernels) k = pool_new (2);
  g_autofree float *sum = g_new (float, n);
  g_autofree float *r0 = g_new (float, n), *r1 = g_new (float, n), *r2 = g_new (float, n);
  g_autofree float *p1 = g_new (float, n), *p2 = g_new (float, n), *p3 = g_new (float, n);
  g_autofree guint8 *codes = g_malloc (n * 4);

  for (guint pi = 0; pi < RLX_PRECISION_COUNT; pi++)
    {
      RlxPrecision p = (RlxPrecision) pi;
      g_autoptr(GBytes) want = NULL;
      g_autoptr(GError) error = NULL;
      guint64 h1 = 0, h2 = 0, h3 = 0;
      double scale = 0;
      gsize len, es = rlx_precision_element_size (p);
      const guint8 *frame;
      float lr = 0.05f;

      fill (sum, n, 30 + pi, 0.2f);
      fill (r0, n, 40 + pi, 0.001f);
      fill (p1, n, 50, 1.0f);
      memcpy (r1, r0, n * sizeof (float));
      memcpy (p2, p1, n * sizeof (float));
      memcpy (p3, p1, n * sizeof (float));
      want = rlx_kernels_encode_update (k, NULL, "avg", sum, n, lr, 1, r1, p, p1, NULL, &h1,
                                        &error);
      g_assert_no_error (error);
      g_assert_true (rlx_kernels_make_update (k, sum, n, lr, 1.0f, r0, r2, p,
                                              RLX_KERNELS_MAX_UNKNOWN, codes, &scale, p2, &h2,
                                              NULL, &error));
      g_assert_no_error (error);
      frame = g_bytes_get_data (want, &len);
      g_assert_cmpmem (frame + len - n * es, n * es, codes, n * es);
      g_assert_true (same_bits (r2, r1, n));
      g_assert_true (same_bits (p2, p1, n));
      g_assert_cmphex (h2, ==, h1);
      /* no codes wanted: the same apply */
      g_assert_true (rlx_kernels_make_update (k, sum, n, lr, 1.0f, r0, NULL, p,
                                              RLX_KERNELS_MAX_UNKNOWN, NULL, &scale, p3, &h3,
                                              NULL, &error));
      g_assert_true (same_bits (p3, p1, n));
      g_assert_cmphex (h3, ==, h1);
    }

  /* the largest |u| given: u = lr · x, no residual */
  for (guint pi = 0; pi < RLX_PRECISION_COUNT; pi++)
    {
      RlxPrecision p = (RlxPrecision) pi;
      gsize es = rlx_precision_element_size (p);
      g_autofree guint8 *c2 = g_malloc (n * 4);
      guint32 mb = 0;
      double s1 = 0, s2 = 0;
      float lr = 0.3f, m;
      guint64 h1 = 0, h2 = 0;

      fill (sum, n, 60 + pi, 0.7f);
      fill (p1, n, 61, 1.0f);
      memcpy (p2, p1, n * sizeof (float));
      for (gsize i = 0; i < n; i++)
        {
          guint32 b;
          memcpy (&b, &sum[i], 4);
          mb = MAX (mb, b & 0x7fffffffu);
        }
      memcpy (&m, &mb, 4);
      m = lr * m;
      memcpy (&mb, &m, 4);
      g_assert_true (rlx_kernels_make_update (k, sum, n, lr, 1.0f, NULL, NULL, p,
                                              RLX_KERNELS_MAX_UNKNOWN, codes, &s1, p1, &h1,
                                              NULL, NULL));
      g_assert_true (rlx_kernels_make_update (k, sum, n, lr, 1.0f, NULL, NULL, p, mb, c2, &s2,
                                              p2, &h2, NULL, NULL));
      g_assert_cmpfloat (s1, ==, s2);
      g_assert_cmpmem (codes, n * es, c2, n * es);
      g_assert_true (same_bits (p2, p1, n));
      g_assert_cmphex (h2, ==, h1);
    }
}

/* dst = sw · src + w · x: the round's first two contributions in one pass,
 * bit for bit the two-step definition (scale src, then accumulate). */
static void
test_accumulate_weighted (void)
{
  gsize n = 2 * RLX_KERNELS_CHUNK + 5;
  g_autofree float *src = g_new (float, n), *x = g_new (float, n);
  g_autofree float *want = g_new (float, n), *got = g_new (float, n);

  fill (src, n, 70, 1.0f);
  fill (x, n, 71, 1.0f);
  for (guint pi = 0; pi < RLX_PRECISION_COUNT; pi++)
    for (guint t = 0; t < G_N_ELEMENTS (threads); t++)
      {
        g_autoptr(RlxKernels) k = pool_new (threads[t]);
        RlxPrecision p = (RlxPrecision) pi;
        const void *codes;
        double scale;
        g_autofree guint8 *buf = codes_for (x, n, p, 0, &codes, &scale);

        for (gsize i = 0; i < n; i++)
          want[i] = 24.0f * src[i];
        g_assert_true (rlx_kernels_ref_accumulate (want, want, codes, n, p, scale, 40.0f, NULL));
        g_assert_true (rlx_kernels_accumulate_weighted (k, got, src, 24.0f, codes, n, p, scale,
                                                        40.0f, NULL, NULL));
        g_assert_true (same_bits (got, want, n));
        /* in place */
        memcpy (got, src, n * sizeof (float));
        g_assert_true (rlx_kernels_accumulate_weighted (k, got, got, 24.0f, codes, n, p, scale,
                                                        40.0f, NULL, NULL));
        g_assert_true (same_bits (got, want, n));
      }
}

static void
test_encode_update_refuses_nonfinite (void)
{
  gsize n = 2 * RLX_KERNELS_CHUNK + 9;
  g_autoptr(RlxKernels) k = pool_new (2);
  g_autofree float *sum = g_new (float, n);
  g_autofree float *residual = g_new (float, n);
  g_autofree float *params = g_new (float, n);
  g_autofree float *residual0 = NULL;
  g_autofree float *params0 = NULL;

  fill (sum, n, 30, 1.0f);
  fill (residual, n, 31, 1e-4f);
  fill (params, n, 32, 1.0f);
  residual0 = g_memdup2 (residual, n * 4);
  params0 = g_memdup2 (params, n * 4);

  for (RlxPrecision p = 0; p < RLX_PRECISION_COUNT; p++)
    {
      float bads[] = { INFINITY, -INFINITY, NAN };

      for (guint b = 0; b < G_N_ELEMENTS (bads); b++)
        {
          g_autoptr(GError) error = NULL;
          g_autoptr(GBytes) frame = NULL;
          float keep = sum[n - 3];

          sum[n - 3] = bads[b];
          frame = rlx_kernels_encode_update (k, NULL, "avg", sum, n, 0.1f, 8, residual, p,
                                             params, NULL, NULL, &error);
          sum[n - 3] = keep;
          g_assert_null (frame);
          g_assert_error (error, RLX_KERNELS_ERROR, RLX_KERNELS_ERROR_NONFINITE);
          g_assert_nonnull (strstr (error->message, "update value"));
          g_assert_true (same_bits (residual, residual0, n));
          g_assert_true (same_bits (params, params0, n));
        }
    }

  /* Overflow of a finite sum (lr · sum) is refused the same way. */
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(GBytes) frame = NULL;

    sum[7] = 3e38f;
    frame = rlx_kernels_encode_update (k, NULL, "avg", sum, n, 100.0f, 1, NULL,
                                       RLX_PRECISION_F16, NULL, NULL, NULL, &error);
    g_assert_null (frame);
    g_assert_error (error, RLX_KERNELS_ERROR, RLX_KERNELS_ERROR_NONFINITE);
    g_assert_nonnull (strstr (error->message, "value 7 is +Inf"));
  }
}

/* ── apply ──────────────────────────────────────────────────────────────── */

static void
check_apply (gconstpointer unused)
{
  gsize n_max = 101770;
  g_autofree float *x = g_new (float, n_max);
  g_autofree float *params0 = g_new (float, n_max);
  g_autofree float *want = g_new (float, n_max);
  g_autofree float *got = g_new (float, n_max);

  fill (x, n_max, 40, 1e-3f);
  fill (params0, n_max, 41, 1.0f);
  for (guint t = 0; t < G_N_ELEMENTS (threads); t++)
    {
      g_autoptr(RlxKernels) k = pool_new (threads[t]);

      for (RlxPrecision p = 0; p < RLX_PRECISION_COUNT; p++)
        for (guint s = 0; s < G_N_ELEMENTS (sizes); s++)
          {
            gsize n = sizes[s];
            const void *codes;
            double scale;
            g_autofree guint8 *buf = codes_for (x, n, p, s % 2, &codes, &scale);
            guint64 hash = 0;

            memcpy (want, params0, n * 4);
            memcpy (got, params0, n * 4);
            rlx_kernels_ref_apply (want, codes, n, p, scale);
            rlx_kernels_apply (k, got, codes, n, p, scale, s % 3 == 0 ? NULL : &hash);
            g_assert_true (same_bits (want, got, n));
            if (s % 3 != 0)
              g_assert_cmphex (hash, ==, rlx_params_hash (want, n));
          }
    }
}

static void
test_apply (void)
{
  for_each_kernel_set (check_apply, NULL);
}

/* ── threads ────────────────────────────────────────────────────────────── */

typedef struct {
  RlxKernels *k;
  gsize       n;
  guint64     want;
  guint       rounds;
  gboolean    ok;
} Racer;

static gpointer
racer (gpointer data)
{
  Racer *r = data;
  g_autofree float *x = g_new (float, r->n);

  fill (x, r->n, 50, 1.0f);
  r->ok = TRUE;
  for (guint i = 0; i < r->rounds; i++)
    if (rlx_kernels_hash (r->k, x, r->n) != r->want)
      r->ok = FALSE;
  return NULL;
}

/* Several threads using one pool at once each get their own right answer. */
static void
test_concurrent_callers (void)
{
  g_autoptr(RlxKernels) k = pool_new (3);
  Racer r[4];
  GThread *t[4];

  for (guint i = 0; i < 4; i++)
    {
      g_autofree float *x = NULL;

      r[i].k = k;
      r[i].n = (3 + i) * RLX_KERNELS_CHUNK + i;
      r[i].rounds = 200;
      x = g_new (float, r[i].n);
      fill (x, r[i].n, 50, 1.0f);
      r[i].want = rlx_params_hash (x, r[i].n);
    }
  for (guint i = 0; i < 4; i++)
    t[i] = g_thread_new ("racer", racer, &r[i]);
  for (guint i = 0; i < 4; i++)
    {
      g_thread_join (t[i]);
      g_assert_true (r[i].ok);
    }
}

/* ── async ──────────────────────────────────────────────────────────────── */

typedef struct {
  GMainLoop *loop;
  GThread   *main_thread;
  gboolean   done;
  gboolean   ok;
  guint64    hash;
  GError    *error;
} AsyncWait;

static void
on_apply_done (GObject *source, GAsyncResult *result, gpointer user_data)
{
  AsyncWait *w = user_data;

  /* completes on the caller's context, i.e. this (main) thread */
  g_assert_true (g_thread_self () == w->main_thread);
  w->ok = rlx_kernels_apply_finish (RLX_KERNELS (source), result, &w->hash, &w->error);
  w->done = TRUE;
  g_main_loop_quit (w->loop);
}

static gboolean
on_timeout (gpointer data)
{
  g_error ("async kernel job did not complete within 30 s");
  return G_SOURCE_REMOVE;
}

static void
test_apply_async (void)
{
  gsize n = 3 * RLX_KERNELS_CHUNK + 5;
  g_autoptr(RlxKernels) k = pool_new (2);
  g_autofree float *x = g_new (float, n);
  g_autofree float *params = g_new (float, n);
  g_autofree float *want = g_new (float, n);
  g_autoptr(GBytes) frame = NULL;
  g_autoptr(GMainLoop) loop = g_main_loop_new (NULL, FALSE);
  AsyncWait w = { loop, g_thread_self () };
  RlxWireInfo info;
  gsize len;
  const guint8 *data;
  guint timeout;

  fill (x, n, 60, 1e-2f);
  fill (params, n, 61, 1.0f);
  memcpy (want, params, n * 4);
  frame = rlx_wire_encode (NULL, x, n, RLX_PRECISION_F16, "avg", NULL);
  g_assert_true (rlx_wire_decode_full (frame, NULL, &info, NULL, NULL, NULL));
  data = g_bytes_get_data (frame, &len);
  rlx_kernels_ref_apply (want, data + 4 + info.header_len, n, info.precision, info.scale);

  rlx_kernels_apply_async (k, params, frame, data + 4 + info.header_len, n, info.precision,
                           info.scale, NULL, on_apply_done, &w);
  g_clear_pointer (&frame, g_bytes_unref);   /* the job holds it */
  timeout = g_timeout_add_seconds (30, on_timeout, NULL);
  g_main_loop_run (loop);
  g_source_remove (timeout);
  g_assert_true (w.done);
  g_assert_no_error (w.error);
  g_assert_true (w.ok);
  g_assert_true (same_bits (params, want, n));
  g_assert_cmphex (w.hash, ==, rlx_params_hash (want, n));
}

static gboolean
failing_job (RlxKernels *self, gpointer data, GCancellable *cancellable, GError **error)
{
  g_set_error (error, RLX_KERNELS_ERROR, RLX_KERNELS_ERROR_INVALID, "job %s failed", (char *) data);
  return FALSE;
}

static void
on_run_done (GObject *source, GAsyncResult *result, gpointer user_data)
{
  AsyncWait *w = user_data;

  w->ok = rlx_kernels_run_finish (RLX_KERNELS (source), result, &w->error);
  w->done = TRUE;
  g_main_loop_quit (w->loop);
}

static void
test_run_async_error (void)
{
  g_autoptr(RlxKernels) k = pool_new (2);
  g_autoptr(GMainLoop) loop = g_main_loop_new (NULL, FALSE);
  AsyncWait w = { loop, g_thread_self () };
  guint timeout;

  rlx_kernels_run_async (k, failing_job, g_strdup ("seven"), g_free, NULL, on_run_done, &w);
  timeout = g_timeout_add_seconds (30, on_timeout, NULL);
  g_main_loop_run (loop);
  g_source_remove (timeout);
  g_assert_false (w.ok);
  g_assert_error (w.error, RLX_KERNELS_ERROR, RLX_KERNELS_ERROR_INVALID);
  g_assert_cmpstr (w.error->message, ==, "job seven failed");
  g_clear_error (&w.error);
}

/* The check a gradient gets: the largest |x| as bits, at every size and
 * thread count; a NaN or ±Inf anywhere shows, a larger finite value does
 * not hide it. */
static void
test_max_abs_bits (void)
{
  gsize n_max = 7 * RLX_KERNELS_CHUNK + 77;
  g_autofree float *x = g_new (float, n_max);
  const float bad[] = { NAN, INFINITY, -INFINITY };

  fill (x, n_max, 3, 2.0f);
  for (guint t = 0; t < G_N_ELEMENTS (threads); t++)
    {
      g_autoptr(RlxKernels) k = pool_new (threads[t]);

      for (guint s = 0; s < G_N_ELEMENTS (sizes); s++)
        {
          gsize n = sizes[s];
          guint32 ref = 0;

          for (gsize i = 0; i < n; i++)
            {
              guint32 b;
              memcpy (&b, &x[i], 4);
              ref = MAX (ref, b & 0x7fffffffu);
            }
          g_assert_cmphex (rlx_kernels_max_abs_bits (k, x, n), ==, ref);
          for (guint b = 0; b < G_N_ELEMENTS (bad) && n > 2; b++)
            {
              gsize where = (n * (b + 1)) / 4;
              float keep = x[where];

              x[where] = bad[b];
              g_assert_cmphex (rlx_kernels_max_abs_bits (k, x, n), >=, 0x7f800000u);
              x[where] = keep;
            }
        }
    }
}

/* The update's check: the first code that decodes to NaN or ±Inf, as
 * core/wire decodes it, at every precision, size, thread count and
 * alignment; -1 for codes that are all finite (E4M3's largest, ±448, and
 * the f32/f16 largest finite values included). */
static void
test_codes_check (void)
{
  gsize n_max = 7 * RLX_KERNELS_CHUNK + 37;   /* over every size in sizes[] */
  g_autofree float *x = g_new (float, n_max);
  g_autofree float *d = g_new (float, n_max);

  fill (x, n_max, 9, 1.0f);
  x[7] = 65504.0f * 4;   /* large: the scale maps it to the format's target */
  for (guint pi = 0; pi < RLX_PRECISION_COUNT; pi++)
    for (guint t = 0; t < G_N_ELEMENTS (threads); t++)
      for (gsize mis = 0; mis < 3; mis += 2)
        {
          g_autoptr(RlxKernels) k = pool_new (threads[t]);
          RlxPrecision p = (RlxPrecision) pi;
          gsize es = rlx_precision_element_size (p);
          const void *codes;
          double scale;
          g_autofree guint8 *buf = codes_for (x, n_max, p, mis, &codes, &scale);
          guint8 *c = (guint8 *) codes;
          gsize where[] = { 0, 5, RLX_KERNELS_CHUNK - 1, 3 * RLX_KERNELS_CHUNK + 1,
                            n_max - 1 };

          for (guint s = 0; s < G_N_ELEMENTS (sizes); s++)
            g_assert_cmpint (rlx_kernels_codes_check (k, codes, sizes[s], p), ==, -1);
          for (guint w = 0; w < G_N_ELEMENTS (where); w++)
            {
              gsize at = where[w];
              g_autofree guint8 *keep = g_memdup2 (c + at * es, es);

              /* NaN at this precision: an all-ones exponent (E4M3: 0x7f) */
              if (p == RLX_PRECISION_F32)
                memcpy (c + at * 4, &(guint32) { 0x7fc00000u }, 4);
              else if (p == RLX_PRECISION_F16)
                memcpy (c + at * 2, &(guint16) { 0x7e00u }, 2);
              else
                c[at] = 0x7f | (p == RLX_PRECISION_F8E5M2 ? 0x80 : 0);
              rlx_wire_dequantize (c + at * es, 1, p, scale, d);
              g_assert_false (isfinite (d[0]));
              g_assert_cmpint (rlx_kernels_codes_check (k, codes, n_max, p), ==, (gssize) at);
              g_assert_cmpint (rlx_kernels_codes_check (k, c + at * es, n_max - at, p), ==, 0);
              memcpy (c + at * es, keep, es);
            }
          g_assert_cmpint (rlx_kernels_codes_check (k, codes, n_max, p), ==, -1);
        }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/kernels/hash/xxh64-reference", test_xxh64_reference);
  g_test_add_func ("/kernels/hash/tree", test_hash);
  g_test_add_func ("/kernels/accumulate/definition", test_accumulate_definition);
  g_test_add_func ("/kernels/accumulate/bit-identical", test_accumulate);
  g_test_add_func ("/kernels/accumulate/nonfinite", test_nonfinite);
  g_test_add_func ("/kernels/accumulate/sum-refuses-cleanly", test_sum_refuses_cleanly);
  g_test_add_func ("/kernels/update/bit-identical", test_encode_update);
  g_test_add_func ("/kernels/update/feedback-bucket", test_encode_feedback_bucket);
  g_test_add_func ("/kernels/update/refuses-nonfinite", test_encode_update_refuses_nonfinite);
  g_test_add_func ("/kernels/apply/bit-identical", test_apply);
  g_test_add_func ("/kernels/max-abs-bits", test_max_abs_bits);
  g_test_add_func ("/kernels/codes-check", test_codes_check);
  g_test_add_func ("/kernels/update/make-update", test_make_update);
  g_test_add_func ("/kernels/accumulate/weighted", test_accumulate_weighted);
  g_test_add_func ("/kernels/pool/concurrent-callers", test_concurrent_callers);
  g_test_add_func ("/kernels/async/apply", test_apply_async);
  g_test_add_func ("/kernels/async/error", test_run_async_error);

  return g_test_run ();
}
