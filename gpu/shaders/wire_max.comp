#version 450
/* wire_max.comp — one workgroup: folds wire_sum's partials into the pass's
 * summary (wire-layout.h META_*), copies the step's loss beside it and
 * computes the scale exactly as the wire does: target / (double) maxabs,
 * 1.0 when maxabs is 0 (and for f32), and its reciprocal 1.0 / scale, both
 * correctly rounded. prec ~0: the precision (and its target) of the round
 * being finished, from the control buffer. */
#include "wire.glsl"
#include "wire-layout.h"

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) buffer BufS { uint s[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufG { uint g[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufCtl { uint ctl[]; };

layout(push_constant) uniform Push {
  uint n_groups, part_off, meta_off, loss_index, prec, target;
} p;

shared uint sh_s[256], sh_g[256], sh_bad[256];

void main ()
{
  const uint lid = gl_LocalInvocationID.x;
  const uint prec = p.prec != 0xffffffffu ? p.prec : ctl[CTL_ROUND_PREC];
  const uint target = p.prec != 0xffffffffu ? p.target : ctl[CTL_TARGET + prec];
  uint sm = 0u, gm = 0u, bad = 0xffffffffu;

  for (uint w = lid; w < p.n_groups; w += 256u)
    {
      sm = max (sm, s[p.part_off + 3u * w]);
      gm = max (gm, s[p.part_off + 3u * w + 1u]);
      bad = min (bad, s[p.part_off + 3u * w + 2u]);
    }
  sh_s[lid] = sm;
  sh_g[lid] = gm;
  sh_bad[lid] = bad;
  barrier ();
  for (uint k = 128u; k > 0u; k >>= 1)
    {
      if (lid < k)
        {
          sh_s[lid] = max (sh_s[lid], sh_s[lid + k]);
          sh_g[lid] = max (sh_g[lid], sh_g[lid + k]);
          sh_bad[lid] = min (sh_bad[lid], sh_bad[lid + k]);
        }
      barrier ();
    }
  if (lid == 0u)
    {
      uint m = sh_s[0];
      double scale = 1.0LF, inv = 1.0LF;

      if (prec != WIRE_F32 && m != 0u && m < F32_ABS_INF)
        {
          int nudge = int (ctl[CTL_DIV_NUDGE]);
          scale = f64_div (double (target), f64_from_f32 (m), nudge);
          inv = f64_div (1.0LF, scale, nudge);
        }
      s[p.meta_off + META_SMAX] = m;
      s[p.meta_off + META_GMAX] = sh_g[0];
      s[p.meta_off + META_BAD] = sh_bad[0];
      s[p.meta_off + META_BAD_BITS] = sh_bad[0] != 0xffffffffu ? s[sh_bad[0]] : 0u;
      s[p.meta_off + META_LOSS] = p.loss_index != 0xffffffffu ? g[p.loss_index] : 0u;
      s[p.meta_off + META_SCALE_LO] = uint (doubleBitsToUint64 (scale));
      s[p.meta_off + META_SCALE_HI] = uint (doubleBitsToUint64 (scale) >> 32);
      s[p.meta_off + META_INV_LO] = uint (doubleBitsToUint64 (inv));
      s[p.meta_off + META_INV_HI] = uint (doubleBitsToUint64 (inv) >> 32);
    }
}
