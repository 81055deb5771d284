#version 450
/* wire_apply.comp — replica -= decode (codes): an update at wire precision
 * applied to the parameters resident on the device, bit for bit as the CPU
 * does it (rlx_wire_dequantize, then one f32 subtraction). Each invocation
 * takes 4 elements; 1 / scale comes from the control buffer. With
 * check_off != ~0 the codes were checked on the device first (codes_check +
 * wire_max): when that found a code that decodes to NaN or ±Inf
 * (s[check_off] != ~0: its index) nothing is applied. */
#include "wire.glsl"
#include "wire-layout.h"

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufCodes { uint codes[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufTab { uint tab[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufCtl { uint ctl[]; };
layout(std430, set = 0, binding = 3) buffer BufP { uint params[]; };
layout(std430, set = 0, binding = 4) readonly buffer BufS { uint s[]; };

#define WIRE_TAB(i) tab[i]
#include "wire-codec.glsl"

layout(push_constant) uniform Push {
  uint n, prec, check_off;
} p;

void main ()
{
  const uint quads = (p.n + 3u) / 4u;
  const uint stride = gl_NumWorkGroups.x * 256u;
  const double inv = uint64BitsToDouble (uint64_t (ctl[CTL_INV_LO]) |
                                         (uint64_t (ctl[CTL_INV_HI]) << 32));

  if (p.check_off != 0xffffffffu && s[p.check_off] != 0xffffffffu)
    return;
  for (uint q = gl_GlobalInvocationID.x; q < quads; q += stride)
    for (uint k = 0u; k < 4u; k++)
      {
        uint i = 4u * q + k;
        if (i >= p.n)
          break;
        params[i] = f32_sub (params[i], wire_decode (WIRE_CODE_AT (codes, i, p.prec), inv, p.prec));
      }
}
