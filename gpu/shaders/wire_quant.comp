#version 450
/* wire_quant.comp — last pass of a gradient's trip to the wire: each
 * invocation takes 4 elements of s, writes their codes at the precision
 * (4 f32 words, 2 words of two f16 codes, or 1 word of four f8 codes,
 * little-endian, as the frame's payload) and, with error feedback, the new
 * residual r = s − decode (code) (0 where not finite), exactly as
 * core/wire does, into the half of the residual buffer that the control
 * buffer names (the other half, the one this pass read, stays until the
 * host accepts the new one). When the summary says s holds NaN or ±Inf nothing is
 * written: the gradient is refused and the residual stays as it was. */
#include "wire.glsl"
#include "wire-layout.h"

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufS { uint s[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufTab { uint tab[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufR { uint res[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufCodes { uint codes[]; };
layout(std430, set = 0, binding = 4) readonly buffer BufCtl { uint ctl[]; };

#define WIRE_TAB(i) tab[i]
#include "wire-codec.glsl"

layout(push_constant) uniform Push {
  uint n, prec, feedback, meta_off;
} p;

void main ()
{
  const uint quads = (p.n + 3u) / 4u;
  const uint stride = gl_NumWorkGroups.x * 256u;
  double scale, inv;

  const uint res_out = ctl[CTL_RES_OUT];

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
          c[k] = 0u;
          if (i >= p.n)
            continue;
          if (p.prec == WIRE_F32)
            {
              c[k] = s[i];
              if (p.feedback != 0u)
                res[res_out + i] = 0u;
              continue;
            }
          c[k] = wire_encode (s[i], scale, p.prec);
          if (p.feedback != 0u)
            {
              uint r = f32_sub (s[i], wire_decode (c[k], inv, p.prec));
              res[res_out + i] = (r & 0x7fffffffu) >= F32_ABS_INF ? 0u : r;
            }
        }
      WIRE_PACK (codes, q, c, p.n, p.prec);
    }
}
