#version 450
/* round_quant.comp — the leader's update leaves for the wire and is applied
 * here in the same pass: each invocation takes 4 elements of u (s[]),
 * writes their codes at the round's precision (packed as wire_quant packs
 * them), keeps the update's residual r = u − decode (code) (0 where not
 * finite) with feedback, and subtracts decode (code) from the replica —
 * exactly what every other rank's apply of these codes does (wire_apply),
 * so every replica keeps the same bits. Nothing is written when wire_max
 * found a non-finite u: the round is refused, replica and residual as
 * they were. */
#include "wire.glsl"
#include "wire-layout.h"

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufS { uint s[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufTab { uint tab[]; };
layout(std430, set = 0, binding = 2) buffer BufR { uint res[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufCodes { uint codes[]; };
layout(std430, set = 0, binding = 4) buffer BufP { uint params[]; };
layout(std430, set = 0, binding = 5) readonly buffer BufCtl { uint ctl[]; };

#define WIRE_TAB(i) tab[i]
#include "wire-codec.glsl"

layout(push_constant) uniform Push {
  uint n, meta_off;
} p;

void main ()
{
  const uint quads = (p.n + 3u) / 4u;
  const uint stride = gl_NumWorkGroups.x * 256u;
  const uint prec = ctl[CTL_ROUND_PREC];
  const bool feedback = ctl[CTL_ROUND_FEEDBACK] != 0u && prec != WIRE_F32;
  double scale, inv;

  if (s[p.meta_off + META_SMAX] >= F32_ABS_INF)
    return;
  scale = uint64BitsToDouble (uint64_t (s[p.meta_off + META_SCALE_LO]) |
                              (uint64_t (s[p.meta_off + META_SCALE_HI]) << 32));
  inv = uint64BitsToDouble (uint64_t (s[p.meta_off + META_INV_LO]) |
                            (uint64_t (s[p.meta_off + META_INV_HI]) << 32));

  for (uint q = gl_GlobalInvocationID.x; q < quads; q += stride)
    {
      uint c[4];
      for (uint k = 0u; k < 4u; k++)
        {
          uint i = 4u * q + k;
          uint d;
          c[k] = 0u;
          if (i >= p.n)
            continue;
          if (prec == WIRE_F32)
            {
              c[k] = s[i];
              d = s[i];
            }
          else
            {
              c[k] = wire_encode (s[i], scale, prec);
              d = wire_decode (c[k], inv, prec);
              if (feedback)
                {
                  uint r = f32_sub (s[i], d);
                  res[i] = (r & 0x7fffffffu) >= F32_ABS_INF ? 0u : r;
                }
            }
          params[i] = f32_sub (params[i], d);
        }
      WIRE_PACK (codes, q, c, p.n, prec);
    }
}
