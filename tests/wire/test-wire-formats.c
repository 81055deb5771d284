/* test-wire-formats.c — the minifloat formats, exhaustively, against
 * references computed independently (in double, from the format definitions
 * and the OCP 8-bit floating point specification), plus the dynamic scale,
 * round trip, error feedback and counters. */
#include "rlx-config.h"

#include <math.h>
#include <string.h>

#include "core/wire/rlx-wire.h"

/* ── independent references ─────────────────────────────────────────────── */

/* IEEE binary16 value of a code, from the definition. */
static double
ref_f16_value (guint16 h)
{
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;

  if (e == 31)
    return m ? NAN : (s ? -INFINITY : INFINITY);
  v = e == 0 ? ldexp (m, -24) : ldexp (1024 + m, e - 25);
  return s ? -v : v;
}

/* OCP OFP8 (v1.0, 2023) E4M3: bias 7, no infinities, S.1111.111 is NaN,
 * max normal S.1111.110 = ±448, min normal 2^-6, min subnormal 2^-9. */
static double
ocp_e4m3 (guint8 c)
{
  int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  double v;

  if (e == 15 && m == 7)
    return NAN;
  v = e == 0 ? ldexp (m, -9) : ldexp (8 + m, e - 10);
  return s ? -v : v;
}

/* OCP OFP8 E5M2: bias 15, IEEE-like: S.11111.00 is ±Inf, S.11111.{01,10,11}
 * NaN, max normal ±57344, min normal 2^-14, min subnormal 2^-16. */
static double
ocp_e5m2 (guint8 c)
{
  int s = c >> 7, e = (c >> 2) & 31, m = c & 3;
  double v;

  if (e == 31)
    return m ? NAN : (s ? -INFINITY : INFINITY);
  v = e == 0 ? ldexp (m, -16) : ldexp (4 + m, e - 17);
  return s ? -v : v;
}

static gboolean
same_value (double a, double b)
{
  return (isnan (a) && isnan (b)) || a == b;
}

/* Nearest f16 to @x (exact in double), ties to even, |x| >= 65520 → Inf:
 * a search over the ordered codes, sharing nothing with the library. */
static guint16
ref_f16_rne (double x, gboolean *tie_out)
{
  guint16 sign = signbit (x) ? 0x8000 : 0;
  double a = fabs (x);
  guint lo = 0, hi = 0x7bff;

  *tie_out = FALSE;
  if (isnan (x))
    return sign | 0x7e00;
  if (a >= 65520.0)
    return sign | 0x7c00;
  if (a >= ref_f16_value (0x7bff))
    return sign | 0x7bff;
  /* largest code with value <= a */
  while (hi - lo > 1)
    {
      guint mid = (lo + hi) / 2;
      if (ref_f16_value ((guint16) mid) <= a)
        lo = mid;
      else
        hi = mid;
    }
  if (ref_f16_value ((guint16) hi) <= a)
    lo = hi;
  if (ref_f16_value ((guint16) lo) == a)
    return sign | lo;
  {
    double dlo = a - ref_f16_value ((guint16) lo);
    double dhi = ref_f16_value ((guint16) (lo + 1)) - a;
    if (dlo < dhi)
      return sign | lo;
    if (dhi < dlo)
      return sign | (lo + 1);
    *tie_out = TRUE;
    return sign | ((lo & 1) ? lo + 1 : lo);
  }
}

/* ── f16 ────────────────────────────────────────────────────────────────── */

static void
test_f16_all_codes (void)
{
  for (guint c = 0; c < 0x10000; c++)
    {
      guint16 h = (guint16) c;
      float f = rlx_wire_f32_from_f16 (h);
      double ref = ref_f16_value (h);

      if (!same_value (f, ref))
        g_error ("f16 code 0x%04x decodes to %.9g, expected %.9g", c, f, ref);
      if (!isnan (ref))
        {
          g_assert_cmpuint (rlx_wire_f16_from_f32 (f), ==, h);
          g_assert_cmpuint (rlx_wire_f16_from_f32_seed (f), ==, h);
          if (ref == 0)
            g_assert_cmpint (!!signbit (f), ==, !!(c & 0x8000));
        }
      else
        {
          /* NaN stays NaN, and the IEEE converter keeps the code itself. */
          g_assert_cmpuint (rlx_wire_f16_from_f32 (f), ==, h);
          g_assert_true (isnan (rlx_wire_f32_from_f16 (rlx_wire_f16_from_f32_seed (f))));
          g_assert_cmpuint (rlx_wire_f16_from_f32_seed (f), ==, (c & 0x8000) | 0x7e00);
        }
    }
}

static guint n_checked, n_ties, n_sub_ties;

static void
check_rounding (float x)
{
  gboolean tie;
  guint16 want = ref_f16_rne (x, &tie);
  guint16 got = rlx_wire_f16_from_f32 (x);
  guint16 seed = rlx_wire_f16_from_f32_seed (x);
  gboolean subnormal = fabsf (x) < 0x1p-14f;

  n_checked++;
  if (isnan (x))
    {
      g_assert_true (isnan (rlx_wire_f32_from_f16 (got)));
      g_assert_true (isnan (rlx_wire_f32_from_f16 (seed)));
      return;
    }
  if (got != want)
    g_error ("f32 %a → f16 0x%04x, the double reference says 0x%04x", x, got, want);
  if (tie)
    n_ties++;
  if (tie && subnormal)
    {
      /* The seed's one quirk, kept on the wire: subnormal ties round away
       * from zero instead of to even. */
      guint16 away = fabs (x) > fabs (ref_f16_value (want)) ? (guint16) (want + 1) : want;
      n_sub_ties++;
      if (seed != away)
        g_error ("seed rounding of subnormal tie %a: 0x%04x, expected 0x%04x", x, seed, away);
    }
  else if (seed != want)
    g_error ("seed rounding of %a: 0x%04x, expected 0x%04x", x, seed, want);
}

static void
test_f16_rounding (void)
{
  n_checked = n_ties = n_sub_ties = 0;
  /* Every pair of neighbouring codes: both values, the midpoint (exact in
   * f32: a tie), and the f32 neighbours of all three — every rounding case
   * (ties to even, subnormals, the normal/subnormal edge, overflow). */
  for (guint c = 0; c <= 0x7bff; c++)
    {
      double lo = ref_f16_value ((guint16) c);
      double hi = c < 0x7bff ? ref_f16_value ((guint16) (c + 1)) : 65536.0;
      float pts[3] = { (float) lo, (float) ((lo + hi) / 2), (float) hi };

      for (int k = 0; k < 3; k++)
        {
          float p = pts[k];
          float around[3] = { nextafterf (p, -INFINITY), p, nextafterf (p, INFINITY) };
          for (int j = 0; j < 3; j++)
            {
              check_rounding (around[j]);
              check_rounding (-around[j]);
            }
        }
    }
  /* Below half the smallest subnormal, f32 subnormals, huge values. */
  for (guint32 e = 0; e < 255; e++)
    for (guint32 m = 0; m < 0x800000; m += 0x1357)
      {
        guint32 b = e << 23 | m;
        float x;
        memcpy (&x, &b, 4);
        check_rounding (x);
        check_rounding (-x);
      }
  check_rounding (INFINITY);
  check_rounding (-INFINITY);
  check_rounding (NAN);
  check_rounding (G_MAXFLOAT);
  /* Random bit patterns. */
  {
    GRand *r = g_rand_new_with_seed (7);
    for (int i = 0; i < 1000000; i++)
      {
        guint32 b = g_rand_int (r);
        float x;
        memcpy (&x, &b, 4);
        check_rounding (x);
      }
    g_rand_free (r);
  }
  g_test_message ("%u conversions checked, %u ties, %u of them subnormal", n_checked, n_ties,
                  n_sub_ties);
  g_assert_cmpuint (n_ties, >, 60000);
  g_assert_cmpuint (n_sub_ties, >, 1000);
}

/* ── f8 ─────────────────────────────────────────────────────────────────── */

static void
test_f8_codes (void)
{
  guint nan4 = 0, nan5 = 0, inf5 = 0;

  for (guint c = 0; c < 256; c++)
    {
      double a = rlx_wire_f32_from_f8 ((guint8) c, RLX_PRECISION_F8E4M3);
      double b = rlx_wire_f32_from_f8 ((guint8) c, RLX_PRECISION_F8E5M2);

      if (!same_value (a, ocp_e4m3 ((guint8) c)))
        g_error ("E4M3 code 0x%02x: %g, OCP says %g", c, a, ocp_e4m3 ((guint8) c));
      if (!same_value (b, ocp_e5m2 ((guint8) c)))
        g_error ("E5M2 code 0x%02x: %g, OCP says %g", c, b, ocp_e5m2 ((guint8) c));
      if (a == 0)
        g_assert_cmpint (!!signbit (a), ==, c >> 7);
      nan4 += isnan (a) != 0;
      nan5 += isnan (b) != 0;
      inf5 += isinf (b) != 0;
      g_assert_false (isinf (a));
    }
  /* Values straight from the specification's tables. */
  g_assert_cmpfloat (rlx_wire_f32_from_f8 (0x7e, RLX_PRECISION_F8E4M3), ==, 448);
  g_assert_cmpfloat (rlx_wire_f32_from_f8 (0xfe, RLX_PRECISION_F8E4M3), ==, -448);
  g_assert_cmpfloat (rlx_wire_f32_from_f8 (0x08, RLX_PRECISION_F8E4M3), ==, 0x1p-6);
  g_assert_cmpfloat (rlx_wire_f32_from_f8 (0x01, RLX_PRECISION_F8E4M3), ==, 0x1p-9);
  g_assert_cmpfloat (rlx_wire_f32_from_f8 (0x07, RLX_PRECISION_F8E4M3), ==, 0.875 * 0x1p-6);
  g_assert_cmpfloat (rlx_wire_f32_from_f8 (0x78, RLX_PRECISION_F8E4M3), ==, 256);
  g_assert_cmpfloat (rlx_wire_f32_from_f8 (0x7b, RLX_PRECISION_F8E5M2), ==, 57344);
  g_assert_cmpfloat (rlx_wire_f32_from_f8 (0x7c, RLX_PRECISION_F8E5M2), ==, INFINITY);
  g_assert_cmpfloat (rlx_wire_f32_from_f8 (0xfc, RLX_PRECISION_F8E5M2), ==, -INFINITY);
  g_assert_cmpfloat (rlx_wire_f32_from_f8 (0x04, RLX_PRECISION_F8E5M2), ==, 0x1p-14);
  g_assert_cmpfloat (rlx_wire_f32_from_f8 (0x01, RLX_PRECISION_F8E5M2), ==, 0x1p-16);
  g_assert_cmpfloat (rlx_wire_f32_from_f8 (0x3c, RLX_PRECISION_F8E5M2), ==, 1.0);
  g_assert_cmpfloat (rlx_wire_f32_from_f8 (0x38, RLX_PRECISION_F8E4M3), ==, 1.0);
  g_assert_cmpuint (nan4, ==, 2);  /* 0x7f, 0xff */
  g_assert_cmpuint (nan5, ==, 6);
  g_assert_cmpuint (inf5, ==, 2);
}

/* The bridge: the nearest finite f8 value to each f16 value, ties to the
 * even code, saturating, NaN → 0x7f; zero coded as the seed codes it. */
static void
check_bridge (RlxPrecision p, double (*ocp) (guint8))
{
  double maxv = p == RLX_PRECISION_F8E4M3 ? 448 : 57344;

  for (guint h = 0; h < 0x10000; h++)
    {
      double v = ref_f16_value ((guint16) h);
      guint8 got = rlx_wire_f8_from_f16 ((guint16) h, p);
      double gv = ocp (got);
      guint8 want;

      if (isnan (v))
        {
          g_assert_cmpuint (got, ==, 0x7f);
          continue;
        }
      if (v >= maxv || v <= -maxv)
        {
          if (gv != (v > 0 ? maxv : -maxv))
            g_error ("%s: f16 %g should saturate, got code 0x%02x", rlx_precision_to_string (p), v, got);
          continue;
        }
      /* nearest by exhaustive search over the finite codes; between two
       * equally near values, the even code */
      {
        double best = INFINITY, bestv = NAN;
        int bc = -1;
        for (int c = 0; c < 256; c++)
          {
            double cv = ocp ((guint8) c);
            double d;
            if (!isfinite (cv))
              continue;
            d = fabs (cv - v);
            if (d < best || (d == best && cv != bestv && !(c & 1)))
              best = d, bestv = cv, bc = c;
          }
        want = (guint8) bc;
      }
      if (ocp (want) == 0)
        {
          /* seed: ±0 and values rounding to 0 from above → 0x80, from below → 0x00 */
          guint8 zero = (v < 0) ? 0x00 : 0x80;
          if (got != zero)
            g_error ("%s: f16 %a rounds to zero, code 0x%02x, expected 0x%02x",
                     rlx_precision_to_string (p), v, got, zero);
        }
      else if (ocp (got) != ocp (want))
        g_error ("%s: f16 %a → code 0x%02x (%g), nearest-even is 0x%02x (%g)",
                 rlx_precision_to_string (p), v, got, ocp (got), want, ocp (want));
    }
}

static void
test_f8_bridge (void)
{
  check_bridge (RLX_PRECISION_F8E4M3, ocp_e4m3);
  check_bridge (RLX_PRECISION_F8E5M2, ocp_e5m2);
}

/* ── dynamic scale, round trip ──────────────────────────────────────────── */

static void
test_scale_tiny_bucket (void)
{
  gsize n = 5000;
  g_autofree float *x = g_new (float, n);
  g_autofree float *y = g_new (float, n);
  GRand *r = g_rand_new_with_seed (3);

  for (gsize i = 0; i < n; i++)
    x[i] = (float) (g_rand_double_range (r, -1, 1) * 1e-9);
  g_rand_free (r);
  for (int p = RLX_PRECISION_F16; p < RLX_PRECISION_COUNT; p++)
    {
      double maxrel = p == RLX_PRECISION_F16 ? 1.0 / 1024 : p == RLX_PRECISION_F8E4M3 ? 1.0 / 8 : 1.0 / 4;
      double scale = rlx_wire_round_trip (x, y, n, p);
      gsize zeros = 0;

      g_assert_cmpfloat (scale, >, 1e11);
      for (gsize i = 0; i < n; i++)
        {
          zeros += y[i] == 0;
          /* relative error within half an ulp of the format, for values
           * that land in its normal range */
          if (fabsf (x[i]) > 1e-11)
            g_assert_cmpfloat (fabs (y[i] - x[i]), <=, fabs (x[i]) * maxrel * 0.5 + 1e-30);
        }
      g_assert_cmpuint (zeros, <, n / 100);
    }
}

static void
test_scale_targets (void)
{
  float x[4] = { 0.5f, -3.0f, NAN, INFINITY };
  float y[4];

  g_assert_cmpfloat (rlx_wire_scale_for (x, 4, RLX_PRECISION_F16), ==, 1024.0 / 3.0);
  g_assert_cmpfloat (rlx_wire_scale_for (x, 4, RLX_PRECISION_F8E4M3), ==, 192.0 / 3.0);
  g_assert_cmpfloat (rlx_wire_scale_for (x, 4, RLX_PRECISION_F8E5M2), ==, 1024.0 / 3.0);
  g_assert_cmpfloat (rlx_wire_scale_for (x, 4, RLX_PRECISION_F32), ==, 1.0);
  for (int p = RLX_PRECISION_F16; p < RLX_PRECISION_COUNT; p++)
    {
      rlx_wire_round_trip (x, y, 4, p);
      g_assert_cmpfloat (y[1], ==, -3.0f);   /* the max is exact at every target */
      g_assert_true (isnan (y[2]));          /* NaN kept NaN */
      if (p == RLX_PRECISION_F16)
        g_assert_cmpfloat (y[3], ==, INFINITY);
      else /* the seed's f8 saturates Inf to the largest finite value */
        g_assert_cmpfloat (y[3], ==, (float) ((p == RLX_PRECISION_F8E4M3 ? 448.0 : 57344.0) * (3.0 / (p == RLX_PRECISION_F8E4M3 ? 192.0 : 1024.0))));
    }
  /* all zero / all non-finite: scale 1 */
  {
    float z[3] = { 0, -0.0f, NAN };
    g_assert_cmpfloat (rlx_wire_scale_for (z, 3, RLX_PRECISION_F16), ==, 1.0);
  }
}

/* ── error feedback ─────────────────────────────────────────────────────── */

static void
test_feedback_small_updates (void)
{
  enum { N = 1000, STEPS = 400 };
  g_autoptr(RlxWireFeedback) fb = rlx_wire_feedback_new (N);
  float x[N], out[N], plain[N];
  double sum_fb = 0, sum_plain = 0, sum_true = 0;

  /* One large entry sets the scale; the rest are 1e-6, far below E4M3's
   * resolution at that scale (1e-6 × 192 ≪ 2^-10): without feedback they are
   * lost every step. */
  for (int i = 0; i < N; i++)
    x[i] = i == 0 ? 1.0f : 1e-6f;
  for (int s = 0; s < STEPS; s++)
    {
      double scale = rlx_wire_feedback_apply (fb, x, out, N, RLX_PRECISION_F8E4M3);
      g_assert_cmpfloat (scale, >, 0);
      rlx_wire_round_trip (x, plain, N, RLX_PRECISION_F8E4M3);
      for (int i = 1; i < N; i++)
        {
          sum_fb += out[i];
          sum_plain += plain[i];
          sum_true += x[i];
        }
    }
  g_assert_cmpfloat (sum_plain, ==, 0);                       /* lost without */
  g_assert_cmpfloat (fabs (sum_fb - sum_true), <, 0.05 * sum_true); /* kept with */
  /* The residual is what has not been sent yet: bounded by one step's
   * quantisation error. */
  for (int i = 0; i < N; i++)
    g_assert_cmpfloat (fabsf (rlx_wire_feedback_residual (fb)[i]), <, 0.02f);
  rlx_wire_feedback_reset (fb);
  for (int i = 0; i < N; i++)
    g_assert_cmpfloat (rlx_wire_feedback_residual (fb)[i], ==, 0);
}

static void
test_feedback_encode_matches_apply (void)
{
  enum { N = 10007 };
  g_autoptr(RlxWireFeedback) a = rlx_wire_feedback_new (N);
  g_autoptr(RlxWireFeedback) b = rlx_wire_feedback_new (N);
  g_autofree float *x = g_new (float, N);
  g_autofree float *oa = g_new (float, N);
  g_autofree float *ob = g_new (float, N);
  GRand *r = g_rand_new_with_seed (11);

  for (int p = 0; p < RLX_PRECISION_COUNT; p++)
    for (int step = 0; step < 3; step++)
      {
        g_autoptr(GBytes) frame = NULL;
        g_autoptr(GError) error = NULL;
        g_autofree float *dec = NULL;
        gsize n = 0;

        for (int i = 0; i < N; i++)
          x[i] = (float) g_rand_double_range (r, -1, 1) * (i % 7 ? 1e-3f : 1.0f);
        x[5] = NAN;
        rlx_wire_feedback_apply (a, x, oa, N, p);
        frame = rlx_wire_feedback_encode (b, NULL, x, N, p, "avg", ob, &error);
        g_assert_no_error (error);
        g_assert_true (rlx_wire_decode (frame, NULL, NULL, &dec, &n, &error));
        g_assert_no_error (error);
        g_assert_cmpuint (n, ==, N);
        g_assert_cmpmem (oa, N * 4, ob, N * 4);
        g_assert_cmpmem (dec, N * 4, ob, N * 4);
        g_assert_cmpmem (rlx_wire_feedback_residual (a), N * 4, rlx_wire_feedback_residual (b), N * 4);
        g_assert_cmpfloat (rlx_wire_feedback_residual (a)[5], ==, 0);  /* NaN carries nothing */
        for (int i = 0; i < N; i++)
          if (i != 5 && p == RLX_PRECISION_F32)
            g_assert_cmpfloat (rlx_wire_feedback_residual (a)[i], ==, 0);
      }
  g_rand_free (r);
  /* size mismatch is an error, not a crash */
  {
    g_autoptr(GError) error = NULL;
    g_assert_null (rlx_wire_feedback_encode (a, NULL, x, N - 1, RLX_PRECISION_F16, NULL, NULL, &error));
    g_assert_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT);
  }
}

/* ── counters, precisions ───────────────────────────────────────────────── */

static void
test_counters (void)
{
  RlxWireCounters link1 = { 0 }, link2 = { 0 }, total = { 0 };
  float v[1000] = { 1.0f };
  g_autoptr(GBytes) f16 = rlx_wire_encode (NULL, v, 1000, RLX_PRECISION_F16, NULL, NULL);
  g_autoptr(GBytes) f8 = rlx_wire_encode (NULL, v, 1000, RLX_PRECISION_F8E5M2, NULL, NULL);
  g_autoptr(GBytes) f32 = rlx_wire_encode (NULL, v, 1000, RLX_PRECISION_F32, NULL, NULL);
  gsize s16 = g_bytes_get_size (f16), s8 = g_bytes_get_size (f8), s32 = g_bytes_get_size (f32);
  RlxWireInfo info;

  g_assert_cmpuint (rlx_wire_f32_equivalent (s16, 1000, RLX_PRECISION_F16), ==, s16 + 2000);
  g_assert_cmpuint (rlx_wire_f32_equivalent (s32, 1000, RLX_PRECISION_F32), ==, s32);
  rlx_wire_counters_add_tx (&link1, &total, s16, rlx_wire_f32_equivalent (s16, 1000, RLX_PRECISION_F16));
  rlx_wire_counters_add_tx (&link2, &total, s8, rlx_wire_f32_equivalent (s8, 1000, RLX_PRECISION_F8E5M2));
  g_assert_true (rlx_wire_decode_full (f8, NULL, &info, NULL, NULL, NULL));
  rlx_wire_counters_add_rx_info (&link2, &total, &info);
  g_assert_cmpuint (link1.tx_frames, ==, 1);
  g_assert_cmpuint (link1.tx_bytes, ==, s16);
  g_assert_cmpuint (link2.tx_bytes, ==, s8);
  g_assert_cmpuint (link2.rx_bytes, ==, s8);
  g_assert_cmpuint (link2.rx_f32_bytes, ==, s8 + 3000);
  g_assert_cmpuint (total.tx_frames, ==, 2);
  g_assert_cmpuint (total.tx_bytes, ==, s16 + s8);
  g_assert_cmpuint (total.tx_f32_bytes, ==, s16 + 2000 + s8 + 3000);
  g_assert_cmpuint (total.rx_frames, ==, 1);
  g_assert_cmpfloat (rlx_wire_counters_tx_ratio (&link2), >, 3.5);
  rlx_wire_counters_reset (&total);
  g_assert_cmpuint (total.tx_bytes, ==, 0);
}

static void
test_precision_names (void)
{
  const char *names[] = { "f32", "f16", "f8e4m3", "f8e5m2" };
  g_autoptr(GError) error = NULL;
  RlxPrecision p = RLX_PRECISION_F16;

  for (int i = 0; i < 4; i++)
    {
      g_assert_cmpstr (rlx_precision_to_string (i), ==, names[i]);
      g_assert_true (rlx_precision_from_string (names[i], &p, NULL));
      g_assert_cmpint (p, ==, i);
    }
  g_assert_false (rlx_precision_from_string ("f8", &p, &error));
  g_assert_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_FORMAT);
  g_assert_nonnull (strstr (error->message, "f8e4m3"));
  g_assert_cmpint (p, ==, RLX_PRECISION_F8E5M2);
  g_assert_cmpuint (rlx_precision_element_size (RLX_PRECISION_F16), ==, 2);
  g_assert_cmpuint (rlx_precision_element_size (RLX_PRECISION_F8E4M3), ==, 1);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/wire/f16/all-codes", test_f16_all_codes);
  g_test_add_func ("/wire/f16/rounding", test_f16_rounding);
  g_test_add_func ("/wire/f8/ocp-codes", test_f8_codes);
  g_test_add_func ("/wire/f8/bridge", test_f8_bridge);
  g_test_add_func ("/wire/scale/tiny-bucket", test_scale_tiny_bucket);
  g_test_add_func ("/wire/scale/targets", test_scale_targets);
  g_test_add_func ("/wire/feedback/small-updates", test_feedback_small_updates);
  g_test_add_func ("/wire/feedback/encode-matches-apply", test_feedback_encode_matches_apply);
  g_test_add_func ("/wire/counters", test_counters);
  g_test_add_func ("/wire/precision/names", test_precision_names);
  return g_test_run ();
}
