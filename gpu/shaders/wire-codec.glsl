/* wire-codec.glsl — one wire code to and from its value, as core/wire does
 * it (after wire.glsl). The including shader defines WIRE_TAB(i), its
 * tables buffer (wire-layout.h TAB_*), before including this. */

/* code @i of a packed buffer @buf of codes at @prec (4, 2 or 1 bytes each,
 * little-endian, as a frame's payload) */
#define WIRE_CODE_AT(buf, i, prec) \
  ((prec) == WIRE_F32 ? (buf)[i] \
   : (prec) == WIRE_F16 ? (((buf)[(i) >> 1] >> (16u * ((i) & 1u))) & 0xffffu) \
   : (((buf)[(i) >> 2] >> (8u * ((i) & 3u))) & 0xffu))

/* the codes c[0..3] of elements 4q .. 4q+3 (those below @n; the others are
 * 0) into @buf, packed as a frame's payload */
#define WIRE_PACK(buf, q, c, n, prec) \
  if ((prec) == WIRE_F32) \
    { \
      for (uint k_ = 0u; k_ < 4u; k_++) \
        if (4u * (q) + k_ < (n)) \
          (buf)[4u * (q) + k_] = c[k_]; \
    } \
  else if ((prec) == WIRE_F16) \
    { \
      (buf)[2u * (q)] = c[0] | (c[1] << 16); \
      if (4u * (q) + 2u < (n)) \
        (buf)[2u * (q) + 1u] = c[2] | (c[3] << 16); \
    } \
  else \
    (buf)[q] = c[0] | (c[1] << 8) | (c[2] << 16) | (c[3] << 24)

/* f32 bits @sb → its code at @prec (not f32) with @scale: the value times
 * the scale in double, rounded to f32, to f16 by the wire's rounding, then
 * through the f16 → f8 bridge */
uint
wire_encode (uint sb, double scale, uint prec)
{
  precise double y = f64_from_f32 (sb) * scale;
  uint h = f16_seed (f32_from_f64 (y));
  if (prec == WIRE_F16)
    return h;
  {
    uint base = prec == WIRE_E4M3 ? TAB_BRIDGE_E4M3 : TAB_BRIDGE_E5M2;
    return (WIRE_TAB (base + (h >> 2)) >> (8u * (h & 3u))) & 0xffu;
  }
}

/* code → f32 bits: the code's value times @inv (1 / scale) in double,
 * rounded to f32 (rlx_wire_dequantize); an f32 code is its own value */
uint
wire_decode (uint code, double inv, uint prec)
{
  double v;
  if (prec == WIRE_F32)
    return code;
  if (prec == WIRE_F16)
    v = f64_from_f16 (code);
  else
    v = f64_from_f32 (WIRE_TAB ((prec == WIRE_E4M3 ? TAB_F8_E4M3 : TAB_F8_E5M2) + code));
  precise double d = v * inv;
  return f32_from_f64 (d);
}

/* whether a code decodes to NaN or ±Inf (E4M3 has no infinities: only
 * S.1111.111 is NaN) */
bool
wire_code_bad (uint code, uint prec)
{
  if (prec == WIRE_F32)
    return (code & 0x7f800000u) == 0x7f800000u;
  if (prec == WIRE_F16)
    return (code & 0x7c00u) == 0x7c00u;
  if (prec == WIRE_E4M3)
    return (code & 0x7fu) == 0x7fu;
  return (code & 0x7cu) == 0x7cu;
}
