/* rlx-wire-avx512.c — AVX-512 + F16C kernels, chosen at run time
 *
 * Same bits as the portable kernels in rlx-wire-convert.c:
 *   - x * scale is done in double (vcvtps2pd, vmulpd, vcvtpd2ps) exactly as
 *     the seed's JavaScript does it, then vcvtps2ph rounds to f16 (RNE).
 *   - vcvtps2ph differs from the seed's f32ToF16 in two places, patched
 *     only in vectors where they occur: NaN (the seed writes sign|0x7e00)
 *     and the f16 subnormal range, where the seed rounds ties away from zero
 *     (those lanes get the seed's own integer formula).
 *   - f8 = the seed's f16 → f8 bridge, computed on the f16 codes (see
 *     f8_from_f16) rather than looked up.
 *   - decode: vcvtph2ps then a double multiply by 1/scale, f8 through f16.
 */
#include "rlx-config.h"

#include <math.h>
#include <string.h>

#include "core/wire/rlx-wire-private.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

#define RLX_AVX512 __attribute__ ((target ("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma,avx2")))

RLX_AVX512 static inline __m512
abs_ps (__m512 v)
{
  return _mm512_castsi512_ps (_mm512_and_si512 (_mm512_castps_si512 (v),
                                                _mm512_set1_epi32 (0x7fffffff)));
}

RLX_AVX512 static float
avx512_maxabs (const float *x, gsize n)
{
  const __m512 inf = _mm512_set1_ps (INFINITY);
  __m512 m0 = _mm512_setzero_ps (), m1 = m0, m2 = m0, m3 = m0;
  gsize i = 0;

  for (; i + 64 <= n; i += 64)
    {
      __m512 a0 = abs_ps (_mm512_loadu_ps (x + i));
      __m512 a1 = abs_ps (_mm512_loadu_ps (x + i + 16));
      __m512 a2 = abs_ps (_mm512_loadu_ps (x + i + 32));
      __m512 a3 = abs_ps (_mm512_loadu_ps (x + i + 48));
      m0 = _mm512_mask_max_ps (m0, _mm512_cmp_ps_mask (a0, inf, _CMP_LT_OQ), m0, a0);
      m1 = _mm512_mask_max_ps (m1, _mm512_cmp_ps_mask (a1, inf, _CMP_LT_OQ), m1, a1);
      m2 = _mm512_mask_max_ps (m2, _mm512_cmp_ps_mask (a2, inf, _CMP_LT_OQ), m2, a2);
      m3 = _mm512_mask_max_ps (m3, _mm512_cmp_ps_mask (a3, inf, _CMP_LT_OQ), m3, a3);
    }
  for (; i < n; i += 16)
    {
      __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16) ((1u << (n - i)) - 1);
      __m512 a = abs_ps (_mm512_maskz_loadu_ps (k, x + i));
      m0 = _mm512_mask_max_ps (m0, _mm512_cmp_ps_mask (a, inf, _CMP_LT_OQ), m0, a);
    }
  m0 = _mm512_max_ps (_mm512_max_ps (m0, m1), _mm512_max_ps (m2, m3));
  return _mm512_reduce_max_ps (m0);
}

RLX_AVX512 static float
avx512_add_maxabs (const float *x, const float *r, float *out, gsize n)
{
  const __m512 inf = _mm512_set1_ps (INFINITY);
  __m512 m0 = _mm512_setzero_ps (), m1 = m0;
  gsize i = 0;

  for (; i + 32 <= n; i += 32)
    {
      __m512 s0 = _mm512_add_ps (_mm512_loadu_ps (x + i), _mm512_loadu_ps (r + i));
      __m512 s1 = _mm512_add_ps (_mm512_loadu_ps (x + i + 16), _mm512_loadu_ps (r + i + 16));
      __m512 a0 = abs_ps (s0), a1 = abs_ps (s1);
      _mm512_storeu_ps (out + i, s0);
      _mm512_storeu_ps (out + i + 16, s1);
      m0 = _mm512_mask_max_ps (m0, _mm512_cmp_ps_mask (a0, inf, _CMP_LT_OQ), m0, a0);
      m1 = _mm512_mask_max_ps (m1, _mm512_cmp_ps_mask (a1, inf, _CMP_LT_OQ), m1, a1);
    }
  for (; i < n; i += 16)
    {
      __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16) ((1u << (n - i)) - 1);
      __m512 s = _mm512_add_ps (_mm512_maskz_loadu_ps (k, x + i), _mm512_maskz_loadu_ps (k, r + i));
      __m512 a = abs_ps (s);
      _mm512_mask_storeu_ps (out + i, k, s);
      m0 = _mm512_mask_max_ps (m0, _mm512_cmp_ps_mask (a, inf, _CMP_LT_OQ), m0, a);
    }
  return _mm512_reduce_max_ps (_mm512_max_ps (m0, m1));
}

/* 16 floats → (float) ((double) x * scale), rounded as the seed rounds. */
RLX_AVX512 static inline __m512
scale16 (__m512 x, __m512d s)
{
  __m512d lo = _mm512_cvtps_pd (_mm512_castps512_ps256 (x));
  __m512d hi = _mm512_cvtps_pd (_mm256_castpd_ps (_mm512_extractf64x4_pd (_mm512_castps_pd (x), 1)));
  __m256 ylo = _mm512_cvtpd_ps (_mm512_mul_pd (lo, s));
  __m256 yhi = _mm512_cvtpd_ps (_mm512_mul_pd (hi, s));
  return _mm512_insertf32x8 (_mm512_castps256_ps512 (ylo), yhi, 1);
}

/* The seed's f32ToF16 on 16 lanes, as 32-bit lanes. */
RLX_AVX512 static inline __m512i
seed_f16_slow (__m512 y, __m512i h32, __mmask16 knan, __mmask16 ksub)
{
  __m512i b = _mm512_castps_si512 (y);
  __m512i sign = _mm512_and_si512 (_mm512_srli_epi32 (b, 16), _mm512_set1_epi32 (0x8000));
  __m512i e8 = _mm512_and_si512 (_mm512_srli_epi32 (b, 23), _mm512_set1_epi32 (0xff));
  __m512i shift = _mm512_sub_epi32 (_mm512_set1_epi32 (126), e8);
  __m512i m = _mm512_or_si512 (_mm512_and_si512 (b, _mm512_set1_epi32 (0x7fffff)),
                               _mm512_set1_epi32 (0x800000));
  __m512i half = _mm512_sllv_epi32 (_mm512_set1_epi32 (1),
                                    _mm512_sub_epi32 (shift, _mm512_set1_epi32 (1)));
  __m512i sub = _mm512_or_si512 (sign, _mm512_srlv_epi32 (_mm512_add_epi32 (m, half), shift));
  __m512i nan = _mm512_or_si512 (sign, _mm512_set1_epi32 (0x7e00));

  h32 = _mm512_mask_mov_epi32 (h32, ksub, sub);
  return _mm512_mask_mov_epi32 (h32, knan, nan);
}

RLX_AVX512 static inline __m256i
seed_f16 (__m512 y)
{
  __m256i h = _mm512_cvtps_ph (y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512i a = _mm512_and_si512 (_mm512_castps_si512 (y), _mm512_set1_epi32 (0x7fffffff));
  /* NaN: a > 0x7f800000; seed subnormal path: 2^-25 <= |y| < 2^-14 */
  __mmask16 knan = _mm512_cmpgt_epu32_mask (a, _mm512_set1_epi32 (0x7f800000));
  __mmask16 ksub = _mm512_cmplt_epu32_mask (_mm512_sub_epi32 (a, _mm512_set1_epi32 (0x33000000)),
                                            _mm512_set1_epi32 (0x38800000 - 0x33000000));

  if (G_UNLIKELY ((knan | ksub) != 0))
    return _mm512_cvtepi32_epi16 (seed_f16_slow (y, _mm512_cvtepu16_epi32 (h), knan, ksub));
  return h;
}

RLX_AVX512 static void
avx512_quant_f16 (const float *x, gsize n, double scale, void *out)
{
  const __m512d s = _mm512_set1_pd (scale);
  guint8 *o = out;
  gsize i = 0;

  for (; i + 32 <= n; i += 32)
    {
      __m256i h0 = seed_f16 (scale16 (_mm512_loadu_ps (x + i), s));
      __m256i h1 = seed_f16 (scale16 (_mm512_loadu_ps (x + i + 16), s));
      _mm256_storeu_si256 ((__m256i *) (o + 2 * i), h0);
      _mm256_storeu_si256 ((__m256i *) (o + 2 * i + 32), h1);
    }
  for (; i < n; i += 16)
    {
      __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16) ((1u << (n - i)) - 1);
      __m256i h = seed_f16 (scale16 (_mm512_maskz_loadu_ps (k, x + i), s));
      _mm256_mask_storeu_epi16 (o + 2 * i, k, h);
    }
}

/* The seed's f16 → f8 bridge, computed instead of looked up (same bits: the
 * bridge is "nearest f8 value, ties to the even code, saturate, NaN → 0x7f",
 * which on the f16 code is round-to-nearest-even of the magnitude bits):
 *   E5M2: the top byte of the f16 code, rounded (same exponent bias);
 *   E4M3: rebias the exponent by −8 and round off 7 bits; below 2^-6 (E4M3
 *         subnormals) round v × 512 to an integer.
 * A result of zero is coded as the seed codes it: 0x00 when the value was
 * negative and non-zero, else 0x80. */
RLX_AVX512 static inline __m128i
f8_from_f16 (__m256i h, gboolean e4m3)
{
  const __m256i one = _mm256_set1_epi16 (1);
  __m256i sign = _mm256_and_si256 (h, _mm256_set1_epi16 ((short) 0x8000));
  __m256i a = _mm256_and_si256 (h, _mm256_set1_epi16 (0x7fff));
  __mmask16 knan = _mm256_cmpgt_epu16_mask (a, _mm256_set1_epi16 (0x7c00));
  __m256i r;
  __mmask16 kzero, kneg;

  if (e4m3)
    {
      __m256i a2 = _mm256_sub_epi16 (a, _mm256_set1_epi16 (0x2000));
      __m256i odd = _mm256_and_si256 (_mm256_srli_epi16 (a2, 7), one);
      __m256i rn = _mm256_srli_epi16 (_mm256_add_epi16 (_mm256_add_epi16 (a2, _mm256_set1_epi16 (0x3f)), odd), 7);
      __mmask16 ksub = _mm256_cmplt_epu16_mask (a, _mm256_set1_epi16 (0x2400));

      rn = _mm256_min_epu16 (rn, _mm256_set1_epi16 (0x7e));
      if (ksub)
        {
          __m512 v = _mm512_cvtph_ps (a);
          __m512i m = _mm512_cvt_roundps_epi32 (_mm512_mul_ps (v, _mm512_set1_ps (512.0f)),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          rn = _mm256_mask_mov_epi16 (rn, ksub, _mm512_cvtepi32_epi16 (m));
        }
      r = rn;
    }
  else
    {
      __m256i odd = _mm256_and_si256 (_mm256_srli_epi16 (a, 8), one);
      r = _mm256_srli_epi16 (_mm256_add_epi16 (_mm256_add_epi16 (a, _mm256_set1_epi16 (0x7f)), odd), 8);
      r = _mm256_min_epu16 (r, _mm256_set1_epi16 (0x7b));
    }
  kzero = _mm256_cmpeq_epi16_mask (r, _mm256_setzero_si256 ());
  kneg = _mm256_cmpneq_epi16_mask (sign, _mm256_setzero_si256 ()) &
         _mm256_cmpneq_epi16_mask (a, _mm256_setzero_si256 ());
  r = _mm256_or_si256 (r, _mm256_srli_epi16 (sign, 8));
  r = _mm256_mask_mov_epi16 (r, kzero & ~kneg, _mm256_set1_epi16 (0x80));
  r = _mm256_mask_mov_epi16 (r, kzero & kneg, _mm256_setzero_si256 ());
  r = _mm256_mask_mov_epi16 (r, knan, _mm256_set1_epi16 (0x7f));
  return _mm256_cvtepi16_epi8 (r);
}

RLX_AVX512 static inline void
quant_f8_loop (const float *x, gsize n, double scale, guint8 *o, gboolean e4m3)
{
  const __m512d s = _mm512_set1_pd (scale);
  gsize i = 0;

  for (; i + 32 <= n; i += 32)
    {
      __m256i h0 = seed_f16 (scale16 (_mm512_loadu_ps (x + i), s));
      __m256i h1 = seed_f16 (scale16 (_mm512_loadu_ps (x + i + 16), s));
      _mm_storeu_si128 ((__m128i *) (o + i), f8_from_f16 (h0, e4m3));
      _mm_storeu_si128 ((__m128i *) (o + i + 16), f8_from_f16 (h1, e4m3));
    }
  for (; i < n; i += 16)
    {
      __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16) ((1u << (n - i)) - 1);
      __m256i h = seed_f16 (scale16 (_mm512_maskz_loadu_ps (k, x + i), s));
      _mm_mask_storeu_epi8 (o + i, k, f8_from_f16 (h, e4m3));
    }
}

RLX_AVX512 static void
avx512_quant_f8 (const float *x, gsize n, double scale, RlxPrecision p, void *out)
{
  /* two instances so the format test leaves the inner loop */
  if (p == RLX_PRECISION_F8E4M3)
    quant_f8_loop (x, n, scale, out, TRUE);
  else
    quant_f8_loop (x, n, scale, out, FALSE);
}

RLX_AVX512 static inline void
dequant16 (__m256i h, __m512d inv, float *out, __mmask16 k)
{
  __m512 f = _mm512_cvtph_ps (h);
  __m512d lo = _mm512_cvtps_pd (_mm512_castps512_ps256 (f));
  __m512d hi = _mm512_cvtps_pd (_mm256_castpd_ps (_mm512_extractf64x4_pd (_mm512_castps_pd (f), 1)));
  __m256 ylo = _mm512_cvtpd_ps (_mm512_mul_pd (lo, inv));
  __m256 yhi = _mm512_cvtpd_ps (_mm512_mul_pd (hi, inv));
  __m512 y = _mm512_insertf32x8 (_mm512_castps256_ps512 (ylo), yhi, 1);

  if (k == 0xffff)
    _mm512_storeu_ps (out, y);
  else
    _mm512_mask_storeu_ps (out, k, y);
}

RLX_AVX512 static void
avx512_dequant_f16 (const void *in, gsize n, double inv, float *out)
{
  const __m512d v = _mm512_set1_pd (inv);
  const guint8 *p = in;
  gsize i = 0;

  for (; i + 32 <= n; i += 32)
    {
      dequant16 (_mm256_loadu_si256 ((const __m256i *) (p + 2 * i)), v, out + i, 0xffff);
      dequant16 (_mm256_loadu_si256 ((const __m256i *) (p + 2 * i + 32)), v, out + i + 16, 0xffff);
    }
  for (; i < n; i += 16)
    {
      __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16) ((1u << (n - i)) - 1);
      dequant16 (_mm256_maskz_loadu_epi16 (k, p + 2 * i), v, out + i, k);
    }
}

/* f8 → f16 bits is a shift (E5M2 is the top byte of an f16; E4M3 placed in
 * an f16 reads 2^-8 of its value, and × 256 in f32 is exact), then the same
 * double multiply as f16. NaN codes take the table's NaN, so the bits match
 * the portable table lookup. */
RLX_AVX512 static inline void
dequant_f8_16 (__m128i c, gboolean e4m3, __m512d inv, __m512 nan, float *out, __mmask16 k)
{
  __m256i w = _mm256_cvtepu8_epi16 (c);
  __m256i h;
  __mmask16 knan;
  __m512 f;
  __m512d lo, hi;
  __m512 y;

  if (e4m3)
    {
      h = _mm256_or_si256 (_mm256_slli_epi16 (_mm256_and_si256 (w, _mm256_set1_epi16 (0x80)), 8),
                           _mm256_slli_epi16 (_mm256_and_si256 (w, _mm256_set1_epi16 (0x7f)), 7));
      knan = _mm_cmpeq_epi8_mask (_mm_and_si128 (c, _mm_set1_epi8 (0x7f)), _mm_set1_epi8 (0x7f));
      f = _mm512_mul_ps (_mm512_cvtph_ps (h), _mm512_set1_ps (256.0f));
    }
  else
    {
      h = _mm256_slli_epi16 (w, 8);
      knan = _mm_cmpgt_epu8_mask (_mm_and_si128 (c, _mm_set1_epi8 (0x7f)), _mm_set1_epi8 (0x7c));
      f = _mm512_cvtph_ps (h);
    }
  lo = _mm512_cvtps_pd (_mm512_castps512_ps256 (f));
  hi = _mm512_cvtps_pd (_mm256_castpd_ps (_mm512_extractf64x4_pd (_mm512_castps_pd (f), 1)));
  y = _mm512_insertf32x8 (_mm512_castps256_ps512 (_mm512_cvtpd_ps (_mm512_mul_pd (lo, inv))),
                          _mm512_cvtpd_ps (_mm512_mul_pd (hi, inv)), 1);
  y = _mm512_mask_mov_ps (y, knan, nan);
  if (k == 0xffff)
    _mm512_storeu_ps (out, y);
  else
    _mm512_mask_storeu_ps (out, k, y);
}

RLX_AVX512 static inline void
dequant_f8_loop (const guint8 *p, gsize n, gboolean e4m3, double inv, float nanv, float *out)
{
  const __m512d v = _mm512_set1_pd (inv);
  const __m512 nan = _mm512_set1_ps (nanv);
  gsize i = 0;

  for (; i + 32 <= n; i += 32)
    {
      dequant_f8_16 (_mm_loadu_si128 ((const __m128i *) (p + i)), e4m3, v, nan, out + i, 0xffff);
      dequant_f8_16 (_mm_loadu_si128 ((const __m128i *) (p + i + 16)), e4m3, v, nan, out + i + 16, 0xffff);
    }
  for (; i < n; i += 16)
    {
      __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16) ((1u << (n - i)) - 1);
      dequant_f8_16 (_mm_maskz_loadu_epi8 (k, p + i), e4m3, v, nan, out + i, k);
    }
}

RLX_AVX512 static void
avx512_dequant_f8 (const void *in, gsize n, RlxPrecision p, double inv, const float *lut, float *out)
{
  if (p == RLX_PRECISION_F8E4M3)
    dequant_f8_loop (in, n, TRUE, inv, lut[0x7f], out);
  else
    dequant_f8_loop (in, n, FALSE, inv, lut[0x7f], out);
}

/* ── AVX-512 VBMI: f8 codes decoded by table ─────────────────────────────
 *
 * A code has only 256 values, so its f32 is lut[code] exactly (the table
 * rlx_wire_f8_lut fills with the same double multiply as above). VBMI's
 * vpermi2b looks up 64 bytes at once in a 128-byte table: each of the
 * lut's four byte planes is two such tables (codes below and above 0x80),
 * and the four planes' bytes are then interleaved into 64 floats. The
 * interleave (unpack) works within 128-bit lanes, so the codes are first
 * put in the order that makes each of its four results 16 consecutive
 * floats. */

#define RLX_AVX512VBMI \
  __attribute__ ((target ("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,f16c,fma,avx2")))

/* Position q of a 64-code block holds code 16k + 4L + j, where the lane
 * L = q / 16, k = q / 4 % 4 and j = q % 4: after the two unpacks, result k
 * holds codes 16k … 16k + 15 in order. */
RLX_AVX512VBMI static inline __m512i
vbmi_code_order (void)
{
  guint8 idx[64];

  for (guint q = 0; q < 64; q++)
    idx[q] = (guint8) (16 * ((q >> 2) & 3) + 4 * (q >> 4) + (q & 3));
  return _mm512_loadu_si512 (idx);
}

RLX_AVX512VBMI static void
vbmi_dequant_f8 (const void *in, gsize n, RlxPrecision p, double inv, const float *lut,
                 float *out)
{
  const guint8 *c = in;
  __m512i plane[4][4];   /* byte b of lut[64 h … 64 h + 63], for plane[b][h] */
  __m512i order;
  gsize i = 0;

  if (n < 64)
    {
      avx512_dequant_f8 (in, n, p, inv, lut, out);
      return;
    }
  for (guint h = 0; h < 4; h++)
    {
      __m512i w[4];

      for (guint v = 0; v < 4; v++)
        w[v] = _mm512_loadu_si512 (lut + 64 * h + 16 * v);
      for (guint b = 0; b < 4; b++)
        {
          __m128i q[4];

          for (guint v = 0; v < 4; v++)
            q[v] = _mm512_cvtepi32_epi8 (_mm512_srli_epi32 (w[v], 8 * b));
          plane[b][h] = _mm512_inserti64x4 (
            _mm512_castsi256_si512 (_mm256_inserti128_si256 (_mm256_castsi128_si256 (q[0]), q[1], 1)),
            _mm256_inserti128_si256 (_mm256_castsi128_si256 (q[2]), q[3], 1), 1);
        }
    }
  order = vbmi_code_order ();
  for (; i + 64 <= n; i += 64)
    {
      __m512i x = _mm512_permutexvar_epi8 (order, _mm512_loadu_si512 (c + i));
      __mmask64 high = _mm512_movepi8_mask (x);
      __m512i b[4], l01, h01, l23, h23;

      for (guint k = 0; k < 4; k++)
        b[k] = _mm512_mask_mov_epi8 (_mm512_permutex2var_epi8 (plane[k][0], x, plane[k][1]), high,
                                     _mm512_permutex2var_epi8 (plane[k][2], x, plane[k][3]));
      l01 = _mm512_unpacklo_epi8 (b[0], b[1]);
      h01 = _mm512_unpackhi_epi8 (b[0], b[1]);
      l23 = _mm512_unpacklo_epi8 (b[2], b[3]);
      h23 = _mm512_unpackhi_epi8 (b[2], b[3]);
      _mm512_storeu_si512 (out + i, _mm512_unpacklo_epi16 (l01, l23));
      _mm512_storeu_si512 (out + i + 16, _mm512_unpackhi_epi16 (l01, l23));
      _mm512_storeu_si512 (out + i + 32, _mm512_unpacklo_epi16 (h01, h23));
      _mm512_storeu_si512 (out + i + 48, _mm512_unpackhi_epi16 (h01, h23));
    }
  if (i < n)
    avx512_dequant_f8 (c + i, n - i, p, inv, lut, out + i);
}

static const RlxWireKernels avx512_kernels = {
  .name = "avx512",
  .maxabs = avx512_maxabs,
  .add_maxabs = avx512_add_maxabs,
  .quant_f16 = avx512_quant_f16,
  .quant_f8 = avx512_quant_f8,
  .dequant_f16 = avx512_dequant_f16,
  .dequant_f8 = avx512_dequant_f8,
};

/* The same, with VBMI's table lookup for f8 codes. */
static const RlxWireKernels avx512vbmi_kernels = {
  .name = "avx512vbmi",
  .maxabs = avx512_maxabs,
  .add_maxabs = avx512_add_maxabs,
  .quant_f16 = avx512_quant_f16,
  .quant_f8 = avx512_quant_f8,
  .dequant_f16 = avx512_dequant_f16,
  .dequant_f8 = vbmi_dequant_f8,
};

const RlxWireKernels *
rlx_wire_kernels_avx512 (void)
{
  unsigned int eax, ebx, ecx = 0, edx;
  gboolean f16c;

  /* clang 14's __builtin_cpu_supports does not know "f16c": ask CPUID
   * (leaf 1, ECX bit 29). The AVX-512 checks also cover the OS saving the
   * registers (XCR0). */
  f16c = __get_cpuid (1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  __builtin_cpu_init ();
  if (f16c && __builtin_cpu_supports ("avx512f") && __builtin_cpu_supports ("avx512bw") &&
      __builtin_cpu_supports ("avx512vl") && __builtin_cpu_supports ("avx512dq") &&
      __builtin_cpu_supports ("fma") && __builtin_cpu_supports ("avx2"))
    return &avx512_kernels;
  return NULL;
}

const RlxWireKernels *
rlx_wire_kernels_avx512vbmi (void)
{
  if (rlx_wire_kernels_avx512 () != NULL && __builtin_cpu_supports ("avx512vbmi"))
    return &avx512vbmi_kernels;
  return NULL;
}

#else

const RlxWireKernels *
rlx_wire_kernels_avx512 (void)
{
  return NULL;
}

const RlxWireKernels *
rlx_wire_kernels_avx512vbmi (void)
{
  return NULL;
}

#endif
