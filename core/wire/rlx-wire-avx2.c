/* rlx-wire-avx2.c — AVX2 + F16C kernels, for x86 CPUs without AVX-512
 *
 * The same arithmetic as rlx-wire-avx512.c, eight lanes at a time, with
 * blends instead of mask registers; tails go to the portable kernels. Same
 * bits as the portable kernels (tests/wire/test-wire-simd.c checks every
 * path it can run).
 */
#include "rlx-config.h"

#include <math.h>
#include <string.h>

#include "core/wire/rlx-wire-private.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

#define RLX_AVX2 __attribute__ ((target ("avx2,f16c,fma")))

RLX_AVX2 static inline __m256
abs8 (__m256 v)
{
  return _mm256_and_ps (v, _mm256_castsi256_ps (_mm256_set1_epi32 (0x7fffffff)));
}

/* |v| where finite, else 0 (max-abs ignores NaN and Inf). */
RLX_AVX2 static inline __m256
finite_abs8 (__m256 v)
{
  __m256 a = abs8 (v);
  return _mm256_and_ps (a, _mm256_cmp_ps (a, _mm256_set1_ps (INFINITY), _CMP_LT_OQ));
}

RLX_AVX2 static inline float
hmax8 (__m256 m)
{
  __m128 v = _mm_max_ps (_mm256_castps256_ps128 (m), _mm256_extractf128_ps (m, 1));
  v = _mm_max_ps (v, _mm_movehl_ps (v, v));
  v = _mm_max_ss (v, _mm_shuffle_ps (v, v, 1));
  return _mm_cvtss_f32 (v);
}

RLX_AVX2 static float
avx2_maxabs (const float *x, gsize n)
{
  __m256 m0 = _mm256_setzero_ps (), m1 = m0;
  gsize i = 0;
  float m;

  for (; i + 16 <= n; i += 16)
    {
      m0 = _mm256_max_ps (m0, finite_abs8 (_mm256_loadu_ps (x + i)));
      m1 = _mm256_max_ps (m1, finite_abs8 (_mm256_loadu_ps (x + i + 8)));
    }
  m = hmax8 (_mm256_max_ps (m0, m1));
  if (i < n)
    {
      /* not inside MAX (): it evaluates its arguments twice */
      float t = rlx_wire_kernels_portable ()->maxabs (x + i, n - i);
      m = MAX (m, t);
    }
  return m;
}

RLX_AVX2 static float
avx2_add_maxabs (const float *x, const float *r, float *out, gsize n)
{
  __m256 m0 = _mm256_setzero_ps ();
  gsize i = 0;
  float m;

  for (; i + 8 <= n; i += 8)
    {
      __m256 s = _mm256_add_ps (_mm256_loadu_ps (x + i), _mm256_loadu_ps (r + i));
      _mm256_storeu_ps (out + i, s);
      m0 = _mm256_max_ps (m0, finite_abs8 (s));
    }
  m = hmax8 (m0);
  if (i < n)
    {
      /* not inside MAX (): it evaluates its arguments twice (and this one
       * writes) */
      float t = rlx_wire_kernels_portable ()->add_maxabs (x + i, r + i, out + i, n - i);
      m = MAX (m, t);
    }
  return m;
}

RLX_AVX2 static inline __m256
scale8 (__m256 x, __m256d s)
{
  __m128 lo = _mm256_cvtpd_ps (_mm256_mul_pd (_mm256_cvtps_pd (_mm256_castps256_ps128 (x)), s));
  __m128 hi = _mm256_cvtpd_ps (_mm256_mul_pd (_mm256_cvtps_pd (_mm256_extractf128_ps (x, 1)), s));
  return _mm256_set_m128 (hi, lo);
}

/* The seed's f32ToF16 on 8 lanes: F16C, patched for NaN and for the f16
 * subnormal band where the seed rounds ties away from zero. */
RLX_AVX2 static inline __m128i
seed_f16_8 (__m256 y)
{
  __m128i h = _mm256_cvtps_ph (y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256i b = _mm256_castps_si256 (y);
  __m256i a = _mm256_and_si256 (b, _mm256_set1_epi32 (0x7fffffff));
  __m256i knan = _mm256_cmpgt_epi32 (a, _mm256_set1_epi32 (0x7f800000));
  __m256i ksub = _mm256_and_si256 (_mm256_cmpgt_epi32 (a, _mm256_set1_epi32 (0x32ffffff)),
                                   _mm256_cmpgt_epi32 (_mm256_set1_epi32 (0x38800000), a));
  __m256i fix = _mm256_or_si256 (knan, ksub);

  if (G_UNLIKELY (!_mm256_testz_si256 (fix, fix)))
    {
      __m256i h32 = _mm256_cvtepu16_epi32 (h);
      __m256i sign = _mm256_and_si256 (_mm256_srli_epi32 (b, 16), _mm256_set1_epi32 (0x8000));
      __m256i e8 = _mm256_srli_epi32 (a, 23);
      __m256i shift = _mm256_sub_epi32 (_mm256_set1_epi32 (126), e8);
      __m256i m = _mm256_or_si256 (_mm256_and_si256 (a, _mm256_set1_epi32 (0x7fffff)),
                                   _mm256_set1_epi32 (0x800000));
      __m256i half = _mm256_sllv_epi32 (_mm256_set1_epi32 (1),
                                        _mm256_sub_epi32 (shift, _mm256_set1_epi32 (1)));
      __m256i sub = _mm256_or_si256 (sign, _mm256_srlv_epi32 (_mm256_add_epi32 (m, half), shift));
      __m256i nan = _mm256_or_si256 (sign, _mm256_set1_epi32 (0x7e00));

      h32 = _mm256_blendv_epi8 (h32, sub, ksub);
      h32 = _mm256_blendv_epi8 (h32, nan, knan);
      h = _mm_packus_epi32 (_mm256_castsi256_si128 (h32), _mm256_extracti128_si256 (h32, 1));
    }
  return h;
}

RLX_AVX2 static void
avx2_quant_f16 (const float *x, gsize n, double scale, void *out)
{
  const __m256d s = _mm256_set1_pd (scale);
  guint8 *o = out;
  gsize i = 0;

  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128 ((__m128i *) (o + 2 * i), seed_f16_8 (scale8 (_mm256_loadu_ps (x + i), s)));
  if (i < n)
    rlx_wire_kernels_portable ()->quant_f16 (x + i, n - i, scale, o + 2 * i);
}

/* The seed's f16 → f8 bridge on 8 lanes (see f8_from_f16 in
 * rlx-wire-avx512.c for the reasoning); returns 8 codes in the low bytes. */
RLX_AVX2 static inline __m128i
f8_from_f16_8 (__m128i h, gboolean e4m3)
{
  const __m128i zero = _mm_setzero_si128 ();
  const __m128i one = _mm_set1_epi16 (1);
  __m128i sign = _mm_and_si128 (h, _mm_set1_epi16 ((short) 0x8000));
  __m128i a = _mm_and_si128 (h, _mm_set1_epi16 (0x7fff));
  __m128i knan = _mm_cmpgt_epi16 (a, _mm_set1_epi16 (0x7c00));
  __m128i r, kzero, kneg;

  if (e4m3)
    {
      __m128i a2 = _mm_sub_epi16 (a, _mm_set1_epi16 (0x2000));
      __m128i odd = _mm_and_si128 (_mm_srli_epi16 (a2, 7), one);
      __m128i ksub = _mm_cmplt_epi16 (a, _mm_set1_epi16 (0x2400));

      r = _mm_srli_epi16 (_mm_add_epi16 (_mm_add_epi16 (a2, _mm_set1_epi16 (0x3f)), odd), 7);
      r = _mm_min_epu16 (r, _mm_set1_epi16 (0x7e));
      if (!_mm_testz_si128 (ksub, ksub))
        {
          __m256 v = _mm256_mul_ps (_mm256_cvtph_ps (a), _mm256_set1_ps (512.0f));
          __m256i m = _mm256_cvttps_epi32 (_mm256_round_ps (v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
          __m128i m16 = _mm_packs_epi32 (_mm256_castsi256_si128 (m), _mm256_extracti128_si256 (m, 1));
          r = _mm_blendv_epi8 (r, m16, ksub);
        }
    }
  else
    {
      __m128i odd = _mm_and_si128 (_mm_srli_epi16 (a, 8), one);
      r = _mm_srli_epi16 (_mm_add_epi16 (_mm_add_epi16 (a, _mm_set1_epi16 (0x7f)), odd), 8);
      r = _mm_min_epu16 (r, _mm_set1_epi16 (0x7b));
    }
  kzero = _mm_cmpeq_epi16 (r, zero);
  kneg = _mm_andnot_si128 (_mm_cmpeq_epi16 (a, zero), _mm_andnot_si128 (_mm_cmpeq_epi16 (sign, zero),
                                                                        _mm_set1_epi16 (-1)));
  r = _mm_or_si128 (r, _mm_srli_epi16 (sign, 8));
  r = _mm_blendv_epi8 (r, _mm_set1_epi16 (0x80), _mm_andnot_si128 (kneg, kzero));
  r = _mm_blendv_epi8 (r, zero, _mm_and_si128 (kneg, kzero));
  r = _mm_blendv_epi8 (r, _mm_set1_epi16 (0x7f), knan);
  return _mm_packus_epi16 (r, r);
}

RLX_AVX2 static inline void
quant_f8_loop8 (const float *x, gsize n, double scale, guint8 *o, gboolean e4m3, RlxPrecision p)
{
  const __m256d s = _mm256_set1_pd (scale);
  gsize i = 0;

  for (; i + 8 <= n; i += 8)
    _mm_storel_epi64 ((__m128i *) (o + i),
                      f8_from_f16_8 (seed_f16_8 (scale8 (_mm256_loadu_ps (x + i), s)), e4m3));
  if (i < n)
    rlx_wire_kernels_portable ()->quant_f8 (x + i, n - i, scale, p, o + i);
}

RLX_AVX2 static void
avx2_quant_f8 (const float *x, gsize n, double scale, RlxPrecision p, void *out)
{
  if (p == RLX_PRECISION_F8E4M3)
    quant_f8_loop8 (x, n, scale, out, TRUE, p);
  else
    quant_f8_loop8 (x, n, scale, out, FALSE, p);
}

RLX_AVX2 static inline __m256
mul_double8 (__m256 f, __m256d inv)
{
  __m128 lo = _mm256_cvtpd_ps (_mm256_mul_pd (_mm256_cvtps_pd (_mm256_castps256_ps128 (f)), inv));
  __m128 hi = _mm256_cvtpd_ps (_mm256_mul_pd (_mm256_cvtps_pd (_mm256_extractf128_ps (f, 1)), inv));
  return _mm256_set_m128 (hi, lo);
}

RLX_AVX2 static void
avx2_dequant_f16 (const void *in, gsize n, double inv, float *out)
{
  const __m256d v = _mm256_set1_pd (inv);
  const guint8 *p = in;
  gsize i = 0;

  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps (out + i, mul_double8 (_mm256_cvtph_ps (_mm_loadu_si128 ((const __m128i *) (p + 2 * i))), v));
  if (i < n)
    rlx_wire_kernels_portable ()->dequant_f16 (p + 2 * i, n - i, inv, out + i);
}

RLX_AVX2 static inline void
dequant_f8_loop8 (const guint8 *p, gsize n, gboolean e4m3, RlxPrecision prec, double inv,
                  const float *lut, float *out)
{
  const __m256d v = _mm256_set1_pd (inv);
  const __m256 nan = _mm256_set1_ps (lut[0x7f]);
  gsize i = 0;

  for (; i + 8 <= n; i += 8)
    {
      __m128i w = _mm_cvtepu8_epi16 (_mm_loadl_epi64 ((const __m128i *) (p + i)));
      __m128i low7 = _mm_and_si128 (w, _mm_set1_epi16 (0x7f));
      __m128i knan16;
      __m256 f, y;

      if (e4m3)
        {
          __m128i h = _mm_or_si128 (_mm_slli_epi16 (_mm_and_si128 (w, _mm_set1_epi16 (0x80)), 8),
                                    _mm_slli_epi16 (low7, 7));
          knan16 = _mm_cmpeq_epi16 (low7, _mm_set1_epi16 (0x7f));
          f = _mm256_mul_ps (_mm256_cvtph_ps (h), _mm256_set1_ps (256.0f));
        }
      else
        {
          knan16 = _mm_cmpgt_epi16 (low7, _mm_set1_epi16 (0x7c));
          f = _mm256_cvtph_ps (_mm_slli_epi16 (w, 8));
        }
      y = mul_double8 (f, v);
      y = _mm256_blendv_ps (y, nan, _mm256_castsi256_ps (_mm256_cvtepi16_epi32 (knan16)));
      _mm256_storeu_ps (out + i, y);
    }
  if (i < n)
    rlx_wire_kernels_portable ()->dequant_f8 (p + i, n - i, prec, inv, lut, out + i);
}

RLX_AVX2 static void
avx2_dequant_f8 (const void *in, gsize n, RlxPrecision p, double inv, const float *lut, float *out)
{
  if (p == RLX_PRECISION_F8E4M3)
    dequant_f8_loop8 (in, n, TRUE, p, inv, lut, out);
  else
    dequant_f8_loop8 (in, n, FALSE, p, inv, lut, out);
}

static const RlxWireKernels avx2_kernels = {
  .name = "avx2",
  .maxabs = avx2_maxabs,
  .add_maxabs = avx2_add_maxabs,
  .quant_f16 = avx2_quant_f16,
  .quant_f8 = avx2_quant_f8,
  .dequant_f16 = avx2_dequant_f16,
  .dequant_f8 = avx2_dequant_f8,
};

const RlxWireKernels *
rlx_wire_kernels_avx2 (void)
{
  unsigned int eax, ebx, ecx = 0, edx;
  gboolean f16c = __get_cpuid (1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;

  __builtin_cpu_init ();
  if (f16c && __builtin_cpu_supports ("avx2"))
    return &avx2_kernels;
  return NULL;
}

#else

const RlxWireKernels *
rlx_wire_kernels_avx2 (void)
{
  return NULL;
}

#endif
