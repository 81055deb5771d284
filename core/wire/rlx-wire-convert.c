/* rlx-wire-convert.c — minifloat conversions, the seed's f16 → f8 bridge,
 * the portable kernels and the run-time choice of kernels.
 *
 * The portable kernels are the definition: every vector kernel must give
 * the same bits (tests/wire/test-wire-simd.c holds them to that).
 */
#include "rlx-config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire/rlx-wire-private.h"

/* ── scalar conversions ─────────────────────────────────────────────────── */

static inline guint32
f32_bits (float x)
{
  guint32 b;
  memcpy (&b, &x, 4);
  return b;
}

static inline float
bits_f32 (guint32 b)
{
  float x;
  memcpy (&x, &b, 4);
  return x;
}

/* The seed's f32ToF16, bit for bit: round to nearest even in the normal
 * range, overflow → ±Inf, NaN → sign|0x7e00, and — the one departure from
 * IEEE — an exact tie between two subnormals rounds away from zero. */
static inline guint16
f16_from_f32_seed (float value)
{
  guint32 bits = f32_bits (value);
  guint32 sign = (bits >> 16) & 0x8000;
  guint32 exponent = (bits >> 23) & 0xff;
  guint32 mantissa = bits & 0x7fffff;
  int e;
  guint32 rounded;

  if (exponent == 0xff)
    return (guint16) (sign | 0x7c00 | (mantissa ? 0x200 : 0));
  e = (int) exponent - 127 + 15;
  if (e >= 0x1f)
    return (guint16) (sign | 0x7c00);
  if (e <= 0)
    {
      int shift;
      if (e < -10)
        return (guint16) sign;
      mantissa |= 0x800000;
      shift = 14 - e;
      return (guint16) (sign | ((mantissa + (1u << (shift - 1))) >> shift));
    }
  rounded = mantissa + 0x0fff + ((mantissa >> 13) & 1);
  if (rounded & 0x800000)
    {
      e += 1;
      if (e >= 0x1f)
        return (guint16) (sign | 0x7c00);
      return (guint16) (sign | ((guint32) e << 10));
    }
  return (guint16) (sign | ((guint32) e << 10) | ((rounded >> 13) & 0x3ff));
}

guint16
rlx_wire_f16_from_f32_seed (float x)
{
  return f16_from_f32_seed (x);
}

guint16
rlx_wire_f16_from_f32 (float value)
{
  guint32 bits = f32_bits (value);
  guint32 sign = (bits >> 16) & 0x8000;
  guint32 exponent = (bits >> 23) & 0xff;
  guint32 mantissa = bits & 0x7fffff;
  int e = (int) exponent - 127 + 15;

  if (exponent == 0xff)
    {
      /* Inf stays Inf; NaN keeps its top payload bits (a payload that lives
       * only in the low 13 bits gets the quiet bit so it stays NaN). */
      guint32 m = mantissa >> 13;
      if (mantissa && !m)
        m = 0x200;
      return (guint16) (sign | 0x7c00 | m);
    }
  if (e <= 0)
    {
      guint32 shift, q, rem, half;
      if (e < -10)
        return (guint16) sign;
      mantissa |= 0x800000;
      shift = (guint32) (14 - e);
      q = mantissa >> shift;
      rem = mantissa & ((1u << shift) - 1);
      half = 1u << (shift - 1);
      if (rem > half || (rem == half && (q & 1)))
        q++;
      return (guint16) (sign | q);
    }
  /* Normal: RNE on the magnitude bits; a carry into the exponent (and into
   * Inf at the top) is the right answer. */
  {
    guint32 m = ((guint32) e << 23 | mantissa);
    guint32 r = (m + 0x0fff + ((m >> 13) & 1)) >> 13;
    if (e >= 0x1f || r >= 0x7c00)
      return (guint16) (sign | 0x7c00);
    return (guint16) (sign | r);
  }
}

static inline float
f32_from_f16 (guint16 h)
{
  guint32 sign = (guint32) (h & 0x8000) << 16;
  guint32 exp = (h >> 10) & 0x1f;
  guint32 mant = h & 0x3ff;

  if (exp == 0x1f)
    return bits_f32 (sign | 0x7f800000 | (mant << 13));
  if (exp == 0)
    {
      /* subnormal: mant × 2^-24, exact in f32 */
      float v = (float) mant * 0x1p-24f;
      return sign ? -v : v;
    }
  return bits_f32 (sign | ((exp + 112) << 23) | (mant << 13));
}

float
rlx_wire_f32_from_f16 (guint16 h)
{
  return f32_from_f16 (h);
}

typedef struct {
  int exp, mant, bias;
  gboolean inf;
} MiniFormat;

static const MiniFormat *
mini_format (RlxPrecision p)
{
  static const MiniFormat e4m3 = { 4, 3, 7, FALSE };
  static const MiniFormat e5m2 = { 5, 2, 15, TRUE };

  return p == RLX_PRECISION_F8E4M3 ? &e4m3 : &e5m2;
}

/* The seed's decodeMini, in double (every 8-bit value is exact in f32). */
static double
decode_mini (guint code, const MiniFormat *f)
{
  int max_exp = (1 << f->exp) - 1;
  double sign = (code >> (f->exp + f->mant)) ? -1.0 : 1.0;
  int exp = (code >> f->mant) & max_exp;
  int mant = code & ((1 << f->mant) - 1);

  if (exp == max_exp)
    {
      if (f->inf)
        return mant ? NAN : sign * INFINITY;
      if (mant == (1 << f->mant) - 1)
        return NAN;
      return sign * (1.0 + (double) mant / (1 << f->mant)) * ldexp (1.0, max_exp - f->bias);
    }
  if (exp == 0)
    return sign * mant / (1 << f->mant) * ldexp (1.0, 1 - f->bias);
  return sign * (1.0 + (double) mant / (1 << f->mant)) * ldexp (1.0, exp - f->bias);
}

float
rlx_wire_f32_from_f8 (guint8 code, RlxPrecision p)
{
  g_return_val_if_fail (p == RLX_PRECISION_F8E4M3 || p == RLX_PRECISION_F8E5M2, NAN);
  return (float) decode_mini (code, mini_format (p));
}

/* The seed's encodeMini: the nearest finite code by binary search over the
 * finite values sorted by value (a stable sort, so +0 (code 0x00) sorts
 * before -0 (code 0x80)), ties to the even code, saturating at both ends.
 * This is also why the seed codes a value that rounds to zero from above, or
 * a zero, as 0x80 (-0) and one from below as 0x00 (+0). */
typedef struct {
  double values[256];
  guint8 codes[256];
  int    count;
} MiniTable;

static void
mini_table_build (const MiniFormat *f, MiniTable *t)
{
  t->count = 0;
  for (guint code = 0; code < 256; code++)
    {
      double v = decode_mini (code, f);
      int i;
      if (!isfinite (v))
        continue;
      /* insertion sort: stable, equal values keep code order */
      for (i = t->count; i > 0 && t->values[i - 1] > v; i--)
        {
          t->values[i] = t->values[i - 1];
          t->codes[i] = t->codes[i - 1];
        }
      t->values[i] = v;
      t->codes[i] = (guint8) code;
      t->count++;
    }
}

static guint8
encode_mini (double value, const MiniFormat *f, const MiniTable *t)
{
  int lo = 0, hi = t->count - 1;
  double dlo, dhi;

  if (isnan (value))
    return (guint8) (((1 << (f->exp + f->mant)) - 1) | (((1 << f->exp) - 1) << f->mant));
  if (value <= t->values[0])
    return t->codes[0];
  if (value >= t->values[t->count - 1])
    return t->codes[t->count - 1];
  while (hi - lo > 1)
    {
      int mid = (lo + hi) >> 1;
      if (t->values[mid] <= value)
        lo = mid;
      else
        hi = mid;
    }
  dlo = value - t->values[lo];
  dhi = t->values[hi] - value;
  if (dlo < dhi)
    return t->codes[lo];
  if (dhi < dlo)
    return t->codes[hi];
  return t->codes[lo] % 2 == 0 ? t->codes[lo] : t->codes[hi];
}

static guint8 *bridges[2];
static double f8_values[2][256];

static gpointer
build_bridges (gpointer data)
{
  for (int k = 0; k < 2; k++)
    {
      RlxPrecision p = k == 0 ? RLX_PRECISION_F8E4M3 : RLX_PRECISION_F8E5M2;
      const MiniFormat *f = mini_format (p);
      MiniTable t;
      guint8 *map = g_malloc0 (0x10000 + 4);

      for (guint c = 0; c < 256; c++)
        f8_values[k][c] = decode_mini (c, f);
      mini_table_build (f, &t);
      for (guint code = 0; code < 0x10000; code++)
        map[code] = encode_mini ((double) f32_from_f16 ((guint16) code), f, &t);
      bridges[k] = map;
    }
  return NULL;
}

static GOnce bridges_once = G_ONCE_INIT;

const guint8 *
rlx_wire_bridge (RlxPrecision p)
{
  g_once (&bridges_once, build_bridges, NULL);
  return bridges[p == RLX_PRECISION_F8E4M3 ? 0 : 1];
}

guint8
rlx_wire_f8_from_f16 (guint16 h, RlxPrecision p)
{
  g_return_val_if_fail (p == RLX_PRECISION_F8E4M3 || p == RLX_PRECISION_F8E5M2, 0);
  return rlx_wire_bridge (p)[h];
}

void
rlx_wire_f8_lut (RlxPrecision p, double inv, float *lut)
{
  const double *v;

  g_once (&bridges_once, build_bridges, NULL);
  v = f8_values[p == RLX_PRECISION_F8E4M3 ? 0 : 1];
  for (guint c = 0; c < 256; c++)
    lut[c] = (float) (v[c] * inv);
}

/* ── portable kernels ───────────────────────────────────────────────────── */

static float
portable_maxabs (const float *x, gsize n)
{
  float m = 0;

  for (gsize i = 0; i < n; i++)
    {
      float a = fabsf (x[i]);
      if (a > m && a <= G_MAXFLOAT)
        m = a;
    }
  return m;
}

static float
portable_add_maxabs (const float *x, const float *r, float *out, gsize n)
{
  float m = 0;

  for (gsize i = 0; i < n; i++)
    {
      float s = x[i] + r[i];
      float a = fabsf (s);
      out[i] = s;
      if (a > m && a <= G_MAXFLOAT)
        m = a;
    }
  return m;
}

static void
portable_quant_f16 (const float *x, gsize n, double scale, void *out)
{
  guint8 *o = out;

  for (gsize i = 0; i < n; i++)
    {
      guint16 h = GUINT16_TO_LE (f16_from_f32_seed ((float) ((double) x[i] * scale)));
      memcpy (o + 2 * i, &h, 2);
    }
}

static void
portable_quant_f8 (const float *x, gsize n, double scale, RlxPrecision p, void *out)
{
  const guint8 *bridge = rlx_wire_bridge (p);
  guint8 *o = out;

  for (gsize i = 0; i < n; i++)
    o[i] = bridge[f16_from_f32_seed ((float) ((double) x[i] * scale))];
}

static void
portable_dequant_f16 (const void *in, gsize n, double inv, float *out)
{
  const guint8 *p = in;

  for (gsize i = 0; i < n; i++)
    {
      guint16 h;
      memcpy (&h, p + 2 * i, 2);
      out[i] = (float) ((double) f32_from_f16 (GUINT16_FROM_LE (h)) * inv);
    }
}

static void
portable_dequant_f8 (const void *in, gsize n, RlxPrecision p, double inv, const float *lut,
                     float *out)
{
  const guint8 *c = in;

  for (gsize i = 0; i < n; i++)
    out[i] = lut[c[i]];
}

static const RlxWireKernels portable_kernels = {
  .name = "portable",
  .maxabs = portable_maxabs,
  .add_maxabs = portable_add_maxabs,
  .quant_f16 = portable_quant_f16,
  .quant_f8 = portable_quant_f8,
  .dequant_f16 = portable_dequant_f16,
  .dequant_f8 = portable_dequant_f8,
};

const RlxWireKernels *
rlx_wire_kernels_portable (void)
{
  return &portable_kernels;
}

/* ── choice ─────────────────────────────────────────────────────────────── */

static const RlxWireKernels *chosen;

static const RlxWireKernels *
best_kernels (void)
{
  const RlxWireKernels *k = rlx_wire_kernels_avx512vbmi ();

  if (k == NULL)
    k = rlx_wire_kernels_avx512 ();
  if (k == NULL)
    k = rlx_wire_kernels_avx2 ();
  return k ? k : &portable_kernels;
}

static const RlxWireKernels *
kernels_by_name (const char *name)
{
  if (g_strcmp0 (name, "portable") == 0)
    return &portable_kernels;
  if (g_strcmp0 (name, "avx2") == 0)
    return rlx_wire_kernels_avx2 ();
  if (g_strcmp0 (name, "avx512") == 0)
    return rlx_wire_kernels_avx512 ();
  if (g_strcmp0 (name, "avx512vbmi") == 0)
    return rlx_wire_kernels_avx512vbmi ();
  return NULL;
}

const RlxWireKernels *
rlx_wire_kernels (void)
{
  const RlxWireKernels *k = g_atomic_pointer_get (&chosen);

  if (G_UNLIKELY (k == NULL))
    {
      const char *env = g_getenv ("RLX_WIRE_PORTABLE");
      const char *named = g_getenv ("RLX_WIRE_KERNELS");

      if (env != NULL && *env != '\0' && g_strcmp0 (env, "0") != 0)
        k = &portable_kernels;
      else if (named != NULL && *named != '\0')
        {
          k = kernels_by_name (named);
          if (k == NULL)
            {
              g_warning ("RLX_WIRE_KERNELS=%s is not available on this CPU or not a kernel set "
                         "(portable, avx2, avx512, avx512vbmi); using the best one", named);
              k = best_kernels ();
            }
        }
      else
        k = best_kernels ();
      g_atomic_pointer_set (&chosen, k);
    }
  return k;
}

const char *
rlx_wire_force_portable (gboolean portable)
{
  const RlxWireKernels *k = portable ? &portable_kernels : best_kernels ();

  g_atomic_pointer_set (&chosen, k);
  return k->name;
}

const char *
rlx_wire_force_kernels (const char *name)
{
  const RlxWireKernels *k = name ? kernels_by_name (name) : best_kernels ();

  if (k == NULL)
    return NULL;
  g_atomic_pointer_set (&chosen, k);
  return k->name;
}

const char *
rlx_wire_simd_path (void)
{
  return rlx_wire_kernels ()->name;
}
