/* test-wire-simd.c — the vector kernels (AVX-512 + F16C, AVX2 + F16C) give the same bits
 * as the portable ones, on every f32 bit pattern class that matters and on
 * every length up to a few vectors (tails, masks). Both are reached through
 * the public API with rlx_wire_force_portable (). */
#include "rlx-config.h"

#include <math.h>
#include <string.h>

#include "core/wire/rlx-wire.h"

/* The vector kernel set under test ("avx512vbmi", "avx512", "avx2"). */
static const char *vec;

static gboolean
have_vector_path (gconstpointer set)
{
  vec = set;
  if (rlx_wire_force_kernels (vec) == NULL)
    {
      g_autofree char *msg = g_strdup_printf ("this CPU cannot run the %s kernels", vec);
      g_test_skip (msg);
      return FALSE;
    }
  return TRUE;
}

static void
assert_same_bits (const char *what, const void *a, const void *b, gsize bytes, gsize esize)
{
  if (memcmp (a, b, bytes) != 0)
    {
      const guint8 *pa = a, *pb = b;
      gsize i = 0;
      while (pa[i] == pb[i])
        i++;
      g_error ("%s: vector and portable kernels differ at element %" G_GSIZE_FORMAT, what, i / esize);
    }
}

/* Quantise @x at @scale with both paths; compare codes; dequantise the codes
 * with both paths; compare floats. */
static void
compare_paths (const char *what, const float *x, gsize n, double scale)
{
  /* kept between calls: fresh multi-MB buffers would cost more in page
   * faults than the comparison itself */
  static guint8 *cv, *cp;
  static float *dv, *dp;
  static gsize cap;

  if (n + 1 > cap)
    {
      cap = n + 1;
      cv = g_realloc (cv, cap * 4);
      cp = g_realloc (cp, cap * 4);
      dv = g_renew (float, dv, cap);
      dp = g_renew (float, dp, cap);
    }

  for (int p = RLX_PRECISION_F16; p < RLX_PRECISION_COUNT; p++)
    {
      gsize es = rlx_precision_element_size (p);

      rlx_wire_force_kernels (vec);
      rlx_wire_quantize (x, n, p, scale, cv);
      rlx_wire_force_portable (TRUE);
      rlx_wire_quantize (x, n, p, scale, cp);
      assert_same_bits (what, cv, cp, n * es, es);

      rlx_wire_force_kernels (vec);
      rlx_wire_dequantize (cv, n, p, scale, dv);
      rlx_wire_force_portable (TRUE);
      rlx_wire_dequantize (cv, n, p, scale, dp);
      assert_same_bits (what, dv, dp, n * 4, 4);
    }
  rlx_wire_force_kernels (vec);
}

/* Every f32 exponent, mantissas strided (all of them in the f16 subnormal
 * band, where the seed's rounding is patched in), scale 1 so the
 * f32 reaches the f16 conversion unchanged. */
static void
test_simd_conversion_space (gconstpointer set)
{
  gsize cap = 1 << 20, n = 0;
  g_autofree float *x = g_new (float, cap);
  guint64 total = 0;

  if (!have_vector_path (set))
    return;
  for (guint32 e = 0; e < 256; e++)
    {
      /* f32 exponents 102..112: |y| in [2^-25, 2^-14), the band where the
       * seed rounds ties away from zero — every mantissa there. */
      guint32 step = (e >= 101 && e <= 113) ? 1 : 509;
      for (guint32 m = 0; m < 0x800000; m += step)
        for (guint32 s = 0; s < (step == 1 ? 1u : 2u); s++) /* sign: one in the band */
          {
            guint32 b = s << 31 | e << 23 | m;
            memcpy (&x[n++], &b, 4);
            if (n == cap)
              {
                compare_paths ("f32 bit patterns", x, n, 1.0);
                total += n;
                n = 0;
              }
          }
    }
  compare_paths ("f32 bit patterns", x, n, 1.0);
  total += n;
  g_test_message ("%" G_GUINT64_FORMAT " bit patterns through both paths", total);
}

/* All 65,536 f16 codes and all 256 f8 codes decode identically at awkward
 * scales (the double multiply). */
static void
test_simd_decode_all_codes (gconstpointer set)
{
  const double scales[] = { 1.0, 1024.0 / 3.0, 7.3e47, 5.6e-37, 0.1875, 12345.678 };
  g_autofree guint16 *h = g_new (guint16, 0x10000);
  g_autofree float *a = g_new (float, 0x10000), *b = g_new (float, 0x10000);
  guint8 c8[256], rnd[4100];

  if (!have_vector_path (set))
    return;
  for (guint i = 0; i < 0x10000; i++)
    h[i] = (guint16) i;
  for (guint i = 0; i < 256; i++)
    c8[i] = (guint8) i;
  for (guint i = 0; i < sizeof rnd; i++)
    rnd[i] = (guint8) g_test_rand_int_range (0, 256);
  for (guint k = 0; k < G_N_ELEMENTS (scales); k++)
    {
      rlx_wire_force_kernels (vec);
      rlx_wire_dequantize (h, 0x10000, RLX_PRECISION_F16, scales[k], a);
      rlx_wire_force_portable (TRUE);
      rlx_wire_dequantize (h, 0x10000, RLX_PRECISION_F16, scales[k], b);
      assert_same_bits ("f16 decode", a, b, 0x10000 * 4, 4);
      for (int p = RLX_PRECISION_F8E4M3; p <= RLX_PRECISION_F8E5M2; p++)
        {
          rlx_wire_force_kernels (vec);
          rlx_wire_dequantize (c8, 256, p, scales[k], a);
          rlx_wire_force_portable (TRUE);
          rlx_wire_dequantize (c8, 256, p, scales[k], b);
          assert_same_bits ("f8 decode", a, b, 256 * 4, 4);
          /* codes in no order, from an odd address, with a tail: a table
           * lookup that put a block's floats in the wrong places fails here */
          rlx_wire_force_kernels (vec);
          rlx_wire_dequantize (rnd + 1, 4099, p, scales[k], a);
          rlx_wire_force_portable (TRUE);
          rlx_wire_dequantize (rnd + 1, 4099, p, scales[k], b);
          assert_same_bits ("f8 decode, random codes", a, b, 4099 * 4, 4);
        }
    }
  rlx_wire_force_kernels (vec);
}

/* Every f16 value (and so every input of the f16 → f8 step) through both
 * paths at scale 1, and against the bridge itself; every f8 code back. */
static void
test_simd_f8_every_f16 (gconstpointer set)
{
  g_autofree float *x = g_new (float, 0x10000);
  guint8 cv[0x10000], cp[0x10000];

  if (!have_vector_path (set))
    return;
  for (guint h = 0; h < 0x10000; h++)
    x[h] = rlx_wire_f32_from_f16 ((guint16) h);
  compare_paths ("every f16 value", x, 0x10000, 1.0);
  for (int p = RLX_PRECISION_F8E4M3; p <= RLX_PRECISION_F8E5M2; p++)
    {
      rlx_wire_force_kernels (vec);
      rlx_wire_quantize (x, 0x10000, p, 1.0, cv);
      rlx_wire_force_portable (TRUE);
      rlx_wire_quantize (x, 0x10000, p, 1.0, cp);
      for (guint h = 0; h < 0x10000; h++)
        {
          guint8 want = rlx_wire_f8_from_f16 (isnan (x[h]) ? 0x7e00 : (guint16) h, p);
          if (cv[h] != want || cp[h] != want)
            g_error ("%s: f16 0x%04x → vector 0x%02x, portable 0x%02x, bridge 0x%02x",
                     rlx_precision_to_string (p), h, cv[h], cp[h], want);
        }
    }
  rlx_wire_force_kernels (vec);
}

/* Random buckets with specials sprinkled in, every length 0..200 (masked
 * tails) and some long ones, through the whole API: scale, round trip,
 * frames, error feedback. */
static void
test_simd_api_lengths (gconstpointer set)
{
  GRand *r = g_rand_new_with_seed (99);
  gsize maxn = 70000;
  g_autofree float *x = g_new (float, maxn);
  g_autofree float *ya = g_new (float, maxn), *yb = g_new (float, maxn);
  const float specials[] = { NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-45f, G_MAXFLOAT };

  if (!have_vector_path (set))
    return;
  for (gsize n = 0; n < maxn; n = n < 200 ? n + 1 : n * 3 + 7)
    {
      for (gsize i = 0; i < n; i++)
        {
          x[i] = (float) (g_rand_double_range (r, -1, 1) * pow (10, g_rand_double_range (r, -12, 2)));
          if (g_rand_int_range (r, 0, 50) == 0)
            x[i] = specials[g_rand_int_range (r, 0, G_N_ELEMENTS (specials))];
        }
      for (int p = 0; p < RLX_PRECISION_COUNT; p++)
        {
          double sa, sb;
          g_autoptr(GBytes) fa = NULL, fb = NULL;
          g_autoptr(RlxWireFeedback) ea = rlx_wire_feedback_new (n);
          g_autoptr(RlxWireFeedback) eb = rlx_wire_feedback_new (n);

          rlx_wire_force_kernels (vec);
          sa = rlx_wire_round_trip (x, ya, n, p);
          fa = rlx_wire_encode (NULL, x, n, p, NULL, NULL);
          rlx_wire_feedback_apply (ea, x, ya, n, p);
          rlx_wire_feedback_apply (ea, x, ya, n, p);
          rlx_wire_force_portable (TRUE);
          sb = rlx_wire_round_trip (x, yb, n, p);
          fb = rlx_wire_encode (NULL, x, n, p, NULL, NULL);
          rlx_wire_feedback_apply (eb, x, yb, n, p);
          rlx_wire_feedback_apply (eb, x, yb, n, p);
          rlx_wire_force_kernels (vec);

          g_assert_cmpfloat (sa, ==, sb);
          g_assert_true (g_bytes_equal (fa, fb));
          assert_same_bits ("feedback output", ya, yb, n * 4, 4);
          assert_same_bits ("feedback residual", rlx_wire_feedback_residual (ea),
                            rlx_wire_feedback_residual (eb), n * 4, 4);
        }
    }
  g_rand_free (r);
}

/* The environment variable picks the portable path at first use. */
static void
test_simd_env (void)
{
  if (g_test_subprocess ())
    {
      g_assert_cmpstr (rlx_wire_simd_path (), ==, "portable");
      return;
    }
  /* the child inherits the variable; this process chose its kernels already */
  g_setenv ("RLX_WIRE_PORTABLE", "1", TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_unsetenv ("RLX_WIRE_PORTABLE");
  g_test_trap_assert_passed ();
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  static const char *const sets[] = { "avx512vbmi", "avx512", "avx2" };

  for (guint i = 0; i < G_N_ELEMENTS (sets); i++)
    {
      const char *set = sets[i];
      g_autofree char *a = g_strdup_printf ("/wire/simd/%s/conversion-space", set);
      g_autofree char *b = g_strdup_printf ("/wire/simd/%s/decode-all-codes", set);
      g_autofree char *c = g_strdup_printf ("/wire/simd/%s/f8-every-f16", set);
      g_autofree char *d = g_strdup_printf ("/wire/simd/%s/api-lengths", set);
      g_test_add_data_func (a, set, test_simd_conversion_space);
      g_test_add_data_func (b, set, test_simd_decode_all_codes);
      g_test_add_data_func (c, set, test_simd_f8_every_f16);
      g_test_add_data_func (d, set, test_simd_api_lengths);
    }
  g_test_add_func ("/wire/simd/env-portable", test_simd_env);
  return g_test_run ();
}
