#version 450
/* round_acc.comp — the leader's round, one contribution more in its sum:
 *   mode 0: sum += w_b · x_b
 *   mode 1: sum  = w_a · x_a + w_b · x_b   (the second contribution: the
 *           first waited, unweighted, in case it stayed the only one)
 * where x is the own gradient (f32, weight ctl[CTL_OWN_WEIGHT]) or a
 * member's bucket decoded from its slot (codes, then SLOT_* at param_off).
 * Every product and sum is rounded to f32 as the CPU's f32 arithmetic does
 * (wire.glsl), one element per invocation: no order to depend on. */
#include "wire.glsl"
#include "wire-layout.h"

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufA { uint a[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB { uint b[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufTab { uint tab[]; };
layout(std430, set = 0, binding = 3) buffer BufSum { uint sum[]; };
layout(std430, set = 0, binding = 4) readonly buffer BufCtl { uint ctl[]; };

#define WIRE_TAB(i) tab[i]
#include "wire-codec.glsl"

layout(push_constant) uniform Push {
  uint n, mode, a_own, b_own, param_off;
} p;

void main ()
{
  const uint stride = gl_NumWorkGroups.x * 256u;
  uint pa = WIRE_F32, pb = WIRE_F32, wa = 0u, wb;
  double inva = 1.0LF, invb = 1.0LF;

  if (p.b_own != 0u)
    wb = ctl[CTL_OWN_WEIGHT];
  else
    {
      pb = b[p.param_off + SLOT_PREC];
      invb = uint64BitsToDouble (uint64_t (b[p.param_off + SLOT_INV_LO]) |
                                 (uint64_t (b[p.param_off + SLOT_INV_HI]) << 32));
      wb = b[p.param_off + SLOT_WEIGHT];
    }
  if (p.mode == 1u)
    {
      if (p.a_own != 0u)
        wa = ctl[CTL_OWN_WEIGHT];
      else
        {
          pa = a[p.param_off + SLOT_PREC];
          inva = uint64BitsToDouble (uint64_t (a[p.param_off + SLOT_INV_LO]) |
                                     (uint64_t (a[p.param_off + SLOT_INV_HI]) << 32));
          wa = a[p.param_off + SLOT_WEIGHT];
        }
    }

  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride)
    {
      uint tb = f32_mul (wb, wire_decode (WIRE_CODE_AT (b, i, pb), invb, pb));
      if (p.mode == 1u)
        sum[i] = f32_add (f32_mul (wa, wire_decode (WIRE_CODE_AT (a, i, pa), inva, pa)), tb);
      else
        sum[i] = f32_add (sum[i], tb);
    }
}
