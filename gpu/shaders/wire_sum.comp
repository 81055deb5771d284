#version 450
/* wire_sum.comp — first pass of a gradient's trip to the wire: s = g + r
 * (with error feedback, flags bit 0: r the residual, or 0 after a reset;
 * without, s = g) for elements [start, end) of this workgroup, written to
 * s[] (not with flags bit 1: a check of the gradient alone, the leader's own
 * in its round); the workgroup's largest |s| and |g| (as f32 bits) and its
 * first non-finite s go to the partials. Max and min are exact, so the order
 * of the reduction does not matter. */
#include "wire.glsl"
#include "wire-layout.h"

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufG { uint g[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufR { uint res[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufCtl { uint ctl[]; };
/* coherent: the last workgroup reads what the others wrote (wire-fold.glsl) */
layout(std430, set = 0, binding = 3) coherent buffer BufS { uint s[]; };

layout(push_constant) uniform Push {
  uint n, per_group, part_off, flags;
  /* fold_meta ~0: the partials are left for wire_max; else the last
   * workgroup folds them into the summary there (wire-fold.glsl) */
  uint fold_meta, count_off, loss_index, prec, target;
} p;

shared uint sh_s[256], sh_g[256], sh_bad[256];

#include "wire-fold.glsl"

void main ()
{
  const uint lid = gl_LocalInvocationID.x;
  const uint start = gl_WorkGroupID.x * p.per_group;
  const uint end = min (p.n, start + p.per_group);
  const bool use_r = ctl[CTL_USE_RESIDUAL] != 0u;
  const uint poison_i = ctl[CTL_POISON_INDEX], poison_b = ctl[CTL_POISON_BITS];
  const bool feedback = (p.flags & 1u) != 0u, write_s = (p.flags & 2u) == 0u;
  uint sm = 0u, gm = 0u, bad = 0xffffffffu;

  for (uint i = start + lid; i < end; i += 256u)
    {
      uint gb = i == poison_i ? poison_b : g[i];
      /* with feedback s = g + r even when r was reset: g + 0 turns −0 into
       * +0, as the CPU's add does */
      uint sb = feedback ? f32_add (gb, use_r ? res[ctl[CTL_RES_IN] + i] : 0u) : gb;
      uint a = sb & 0x7fffffffu;
      /* (a check writes the non-finite ones alone: the fold reports the
       * first one's bits from there) */
      if (write_s || a >= F32_ABS_INF)
        s[i] = sb;
      gm = max (gm, gb & 0x7fffffffu);
      sm = max (sm, a);
      if (a >= F32_ABS_INF)
        bad = min (bad, i);
    }
  wire_partials (lid, p.part_off, gl_WorkGroupID.x, sm, gm, bad);
  if (p.fold_meta != 0xffffffffu)
    wire_fold_last (lid, p.part_off, p.fold_meta, p.count_off,
                    p.loss_index != 0xffffffffu ? g[p.loss_index] : 0u, p.prec, p.target);
}
