#version 450
/* round_u.comp — the leader's update before quantising, as the CPU leader
 * computes it: u = coef · x (+ r, the update's residual, with feedback),
 * every operation rounded to f32 (wire.glsl), where x is the round's
 * weighted sum (coef = (float) (lr / samples)) or its only contribution
 * (coef = (float) lr): the own gradient or a member's bucket decoded from its
 * slot (x_kind 1). u goes to s[], and the workgroup's largest |u| and |x|
 * and its first non-finite u to the partials, as wire_sum does, for
 * wire_max to fold into the scale. */
#include "wire.glsl"
#include "wire-layout.h"

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufX { uint x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufR { uint res[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufCtl { uint ctl[]; };
/* coherent: the last workgroup reads what the others wrote (wire-fold.glsl) */
layout(std430, set = 0, binding = 3) coherent buffer BufS { uint s[]; };
layout(std430, set = 0, binding = 4) readonly buffer BufTab { uint tab[]; };

#define WIRE_TAB(i) tab[i]
#include "wire-codec.glsl"

layout(push_constant) uniform Push {
  uint n, per_group, part_off, x_kind, param_off;
  /* fold_meta ~0: the partials are left for wire_max; else the last
   * workgroup folds them into the summary there, at the round's precision
   * (wire-fold.glsl) */
  uint fold_meta, count_off;
} p;

shared uint sh_s[256], sh_g[256], sh_bad[256];

#include "wire-fold.glsl"

void main ()
{
  const uint lid = gl_LocalInvocationID.x;
  const uint start = gl_WorkGroupID.x * p.per_group;
  const uint end = min (p.n, start + p.per_group);
  const uint coef = ctl[CTL_COEF];
  /* 1: add the residual; 2: add zeros (it was reset: -0 becomes +0 as
   * adding the CPU's zeroed residual does) */
  const uint fb = ctl[CTL_ROUND_PREC] != WIRE_F32 ? ctl[CTL_ROUND_FEEDBACK] : 0u;
  uint px = WIRE_F32, um = 0u, xm = 0u, bad = 0xffffffffu;
  double inv = 1.0LF;

  if (p.x_kind != 0u)
    {
      px = x[p.param_off + SLOT_PREC];
      inv = uint64BitsToDouble (uint64_t (x[p.param_off + SLOT_INV_LO]) |
                                (uint64_t (x[p.param_off + SLOT_INV_HI]) << 32));
    }
  for (uint i = start + lid; i < end; i += 256u)
    {
      uint xb = wire_decode (WIRE_CODE_AT (x, i, px), inv, px);
      uint u = f32_mul (coef, xb);
      uint a;
      if (fb != 0u)
        u = f32_add (u, fb == 1u ? res[i] : 0u);
      a = u & 0x7fffffffu;
      s[i] = u;
      xm = max (xm, xb & 0x7fffffffu);
      um = max (um, a);
      if (a >= F32_ABS_INF)
        bad = min (bad, i);
    }
  wire_partials (lid, p.part_off, gl_WorkGroupID.x, um, xm, bad);
  if (p.fold_meta != 0xffffffffu)
    wire_fold_last (lid, p.part_off, p.fold_meta, p.count_off, 0u, 0xffffffffu, 0u);
}
