#version 450
/* wire_apply.comp — replica -= decode (codes): an update at wire precision
 * applied to the parameters resident on the device, bit for bit as the CPU
 * does it (rlx_wire_dequantize, then one f32 subtraction). Each invocation
 * takes 4 elements; 1 / scale comes from the control buffer. */
#include "wire.glsl"
#include "wire-layout.h"

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufCodes { uint codes[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufTab { uint tab[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufCtl { uint ctl[]; };
layout(std430, set = 0, binding = 3) buffer BufP { uint params[]; };

layout(push_constant) uniform Push {
  uint n, prec;
} p;

void main ()
{
  const uint quads = (p.n + 3u) / 4u;
  const uint stride = gl_NumWorkGroups.x * 256u;
  const double inv = uint64BitsToDouble (uint64_t (ctl[CTL_INV_LO]) |
                                         (uint64_t (ctl[CTL_INV_HI]) << 32));

  for (uint q = gl_GlobalInvocationID.x; q < quads; q += stride)
    for (uint k = 0u; k < 4u; k++)
      {
        uint i = 4u * q + k;
        uint d;
        if (i >= p.n)
          break;
        if (p.prec == WIRE_F32)
          d = codes[i];
        else
          {
            double v;
            if (p.prec == WIRE_F16)
              v = f64_from_f16 ((codes[i >> 1] >> (16u * (i & 1u))) & 0xffffu);
            else
              v = f64_from_f32 (tab[(p.prec == WIRE_E4M3 ? TAB_F8_E4M3 : TAB_F8_E5M2) +
                                    ((codes[i >> 2] >> (8u * (i & 3u))) & 0xffu)]);
            precise double dd = v * inv;
            d = f32_from_f64 (dd);
          }
        params[i] = f32_sub (params[i], d);
      }
}
