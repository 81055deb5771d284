/* wire.glsl — the cohort wire's arithmetic (core/wire/rlx-wire.h), exactly
 *
 * Every 32-bit float here is held as its bits in a uint and never goes
 * through 32-bit float arithmetic, so the device's handling of f32
 * denormals (flushed on many GPUs, and lavapipe lacks
 * shaderDenormPreserveFloat32) cannot change a bit. Arithmetic runs in
 * double, whose values here are never subnormal (the smallest is an f32
 * subnormal times a scale ≥ 192 / FLT_MAX, about 1e-81), and is rounded to
 * f32 by integer code (f32_from_f64), round to nearest even:
 *   - a + b, a - b of two f32: the double result is exact or within 2^-53,
 *     and rounding it to f32 gives the correctly rounded f32 result (53 ≥
 *     2·24 + 2: double rounding is innocuous), i.e. what the CPU's f32
 *     add gives;
 *   - (float) ((double) x * scale) is what the wire itself computes;
 *   - the scale target / maxabs and 1 / scale are divisions corrected to
 *     the correctly rounded double with an exact remainder (Dekker's product
 *     and Knuth's sum, `precise` so nothing is fused), whatever precision
 *     the device's own double division has.
 * This needs only IEEE double add and multiply with round to nearest, which
 * the backend verifies on the device before it keeps parameters there.
 * NaN operands propagate like x86 SSE (the first NaN, quieted; Inf − Inf
 * gives the default NaN 0xffc00000).
 */
#extension GL_ARB_gpu_shader_int64 : require

#define F32_ABS_INF 0x7f800000u

/* f32 bits → double, exactly (subnormal f32 included) */
double
f64_from_f32 (uint b)
{
  uint64_t sign = uint64_t (b >> 31) << 63;
  uint e = (b >> 23) & 0xffu;
  uint m = b & 0x7fffffu;

  if (e == 0xffu)
    return uint64BitsToDouble (sign | (uint64_t (0x7ffu) << 52) | (uint64_t (m) << 29));
  if (e == 0u)
    {
      int top;
      if (m == 0u)
        return uint64BitsToDouble (sign);
      /* m · 2^-149 = 1.f · 2^(top - 149) */
      top = findMSB (m);
      return uint64BitsToDouble (sign | (uint64_t (top - 149 + 1023) << 52) |
                                 ((uint64_t (m) << (52 - top)) & 0xfffffffffffffUL));
    }
  return uint64BitsToDouble (sign | (uint64_t (e + 896u) << 52) | (uint64_t (m) << 29));
}

/* double → f32 bits, round to nearest even, with f32 subnormals, overflow
 * to ±Inf; a NaN becomes a quiet NaN with the top payload bits */
uint
f32_from_f64 (double d)
{
  uint64_t u = doubleBitsToUint64 (d);
  uint sign = uint (u >> 32) & 0x80000000u;
  int e = int (uint (u >> 52) & 0x7ffu);
  uint64_t sig = u & 0xfffffffffffffUL;
  int shift;
  uint64_t q, rem, halfway;

  if (e == 0x7ff)
    return sign | F32_ABS_INF | (sig != 0UL ? (0x400000u | uint (sig >> 29)) : 0u);
  if (e == 0)
    return sign;   /* ±0, or a double subnormal: far below half the least f32 */
  if (e - 1023 + 127 >= 0xff)
    return sign | F32_ABS_INF;
  sig |= 1UL << 52;
  /* the f32 exponent field this value would have */
  if (e - 1023 + 127 >= 1)
    shift = 29;                        /* normal: 53 → 24 significant bits */
  else
    shift = 29 + (1 - (e - 1023 + 127));   /* subnormal: fewer */
  if (shift > 54)
    return sign;                       /* below half the least subnormal */
  q = sig >> shift;
  rem = sig & ((1UL << shift) - 1UL);
  halfway = 1UL << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1UL) != 0UL))
    q += 1UL;
  if (shift == 29)
    {
      /* q holds the hidden bit: exponent field e' = e - 896, a carry moves
       * it up (and past the top into Inf) */
      uint bits = (uint (e - 1023 + 127) << 23) + (uint (q) - 0x800000u);
      if (bits >= F32_ABS_INF)
        return sign | F32_ABS_INF;
      return sign | bits;
    }
  /* a subnormal, or the least normal when the rounding carried into it */
  return sign | uint (q);
}

bool
f32_is_nan (uint b)
{
  return (b & 0x7fffffffu) > F32_ABS_INF;
}

/* a + b on f32 bits, as the CPU's f32 add */
uint
f32_add (uint a, uint b)
{
  if (f32_is_nan (a))
    return a | 0x400000u;
  if (f32_is_nan (b))
    return b | 0x400000u;
  if ((a & 0x7fffffffu) == F32_ABS_INF && (b & 0x7fffffffu) == F32_ABS_INF && a != b)
    return 0xffc00000u;
  {
    precise double r = f64_from_f32 (a) + f64_from_f32 (b);
    return f32_from_f64 (r);
  }
}

/* a · b on f32 bits, as the CPU's f32 multiplication: the product of two
 * f32 is exact in double (48 significant bits), so one rounding to f32
 * gives the correctly rounded product */
uint
f32_mul (uint a, uint b)
{
  if (f32_is_nan (a))
    return a | 0x400000u;
  if (f32_is_nan (b))
    return b | 0x400000u;
  {
    precise double r = f64_from_f32 (a) * f64_from_f32 (b);
    /* Inf · 0: the default NaN, as x86 SSE gives */
    if (r != r)
      return 0xffc00000u;
    return f32_from_f64 (r);
  }
}

/* a - b on f32 bits, as the CPU's f32 subtraction */
uint
f32_sub (uint a, uint b)
{
  if (f32_is_nan (a))
    return a | 0x400000u;
  if (f32_is_nan (b))
    return b | 0x400000u;
  return f32_add (a, b ^ 0x80000000u);
}

/* f16 code → double, exactly */
double
f64_from_f16 (uint h)
{
  uint64_t sign = uint64_t (h >> 15) << 63;
  uint e = (h >> 10) & 0x1fu;
  uint m = h & 0x3ffu;

  if (e == 0x1fu)
    return uint64BitsToDouble (sign | (uint64_t (0x7ffu) << 52) | (uint64_t (m) << 42));
  if (e == 0u)
    {
      int top;
      if (m == 0u)
        return uint64BitsToDouble (sign);
      top = findMSB (m);   /* m · 2^-24 */
      return uint64BitsToDouble (sign | (uint64_t (top - 24 + 1023) << 52) |
                                 ((uint64_t (m) << (52 - top)) & 0xfffffffffffffUL));
    }
  return uint64BitsToDouble (sign | (uint64_t (e + 1008u) << 52) | (uint64_t (m) << 42));
}

/* The wire's f32 → f16 rounding (rlx_wire_f16_from_f32_seed): nearest
 * even, except that a tie between two f16 subnormals rounds away from 0. */
uint
f16_seed (uint bits)
{
  uint sign = (bits >> 16) & 0x8000u;
  uint exponent = (bits >> 23) & 0xffu;
  uint mantissa = bits & 0x7fffffu;
  int e;
  uint rounded;

  if (exponent == 0xffu)
    return sign | 0x7c00u | (mantissa != 0u ? 0x200u : 0u);
  e = int (exponent) - 127 + 15;
  if (e >= 0x1f)
    return sign | 0x7c00u;
  if (e <= 0)
    {
      uint shift;
      if (e < -10)
        return sign;
      mantissa |= 0x800000u;
      shift = uint (14 - e);
      return sign | ((mantissa + (1u << (shift - 1u))) >> shift);
    }
  rounded = mantissa + 0x0fffu + ((mantissa >> 13) & 1u);
  if ((rounded & 0x800000u) != 0u)
    {
      e += 1;
      if (e >= 0x1f)
        return sign | 0x7c00u;
      return sign | (uint (e) << 10);
    }
  return sign | (uint (e) << 10) | ((rounded >> 13) & 0x3ffu);
}

/* ── correctly rounded division (positive, normal operands) ─────────── */

void
two_sum (double a, double b, out double s, out double t)
{
  precise double ss = a + b;
  precise double bb = ss - a;
  precise double tt = (a - (ss - bb)) + (b - bb);
  s = ss;
  t = tt;
}

void
split53 (double a, out double hi, out double lo)
{
  precise double c = 134217729.0LF * a;   /* 2^27 + 1 */
  precise double h = c - (c - a);
  precise double l = a - h;
  hi = h;
  lo = l;
}

/* p + e == a · b exactly */
void
two_prod (double a, double b, out double p, out double e)
{
  double ah, al, bh, bl;
  precise double pp = a * b;
  split53 (a, ah, al);
  split53 (b, bh, bl);
  precise double ee = ((ah * bh - pp) + ah * bl + al * bh) + al * bl;
  p = pp;
  e = ee;
}

double
f64_next (double q, bool up)
{
  uint64_t u = doubleBitsToUint64 (q);
  return uint64BitsToDouble (up ? u + 1UL : u - 1UL);
}

/* the spacing of doubles just above (@above) or just below q > 0 */
double
f64_gap (double q, bool above)
{
  uint64_t u = doubleBitsToUint64 (q);
  uint64_t e = u >> 52;
  if (!above && (u & 0xfffffffffffffUL) == 0UL)
    e -= 1UL;   /* below a power of two the spacing halves */
  return uint64BitsToDouble ((e - 52UL) << 52);
}

/* a / b rounded to nearest even, for a, b > 0 and a quotient far from the
 * ends of the double range (true of target / maxabs and 1 / scale).
 * @nudge (tests): start that many ulps away from the device's quotient, to
 * show that the correction finds the right one from there. */
double
f64_div (double a, double b, int nudge)
{
  precise double q = uint64BitsToDouble (doubleBitsToUint64 (a / b) + uint64_t (int64_t (nudge)));

  for (int it = 0; it < 4; it++)
    {
      double p, e, rh, rl;
      /* the exact remainder a − q·b as rh + rl: a − p is exact (p is within
       * a factor 2 of a), and two_sum keeps what the last step rounds off */
      two_prod (q, b, p, e);
      precise double dh = a - p;
      two_sum (dh, -e, rh, rl);
      precise double hu = 0.5LF * f64_gap (q, true) * b;    /* exact: powers of two */
      precise double hd = 0.5LF * f64_gap (q, false) * b;
      if (rh > hu || (rh == hu && rl > 0.0LF) ||
          (rh == hu && rl == 0.0LF && (doubleBitsToUint64 (q) & 1UL) != 0UL))
        q = f64_next (q, true);
      else if (rh < -hd || (rh == -hd && rl < 0.0LF) ||
               (rh == -hd && rl == 0.0LF && (doubleBitsToUint64 (q) & 1UL) != 0UL))
        q = f64_next (q, false);
      else
        break;
    }
  return q;
}
