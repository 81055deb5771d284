#version 450
/* wire_max.comp — one workgroup: folds a pass's partials into its summary
 * and copies the step's loss beside it (wire-fold.glsl). The passes that
 * fold by their last workgroup (wire_sum, round_u) need it no more; the
 * codes check of a member's update still does. */
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

#include "wire-fold.glsl"

void main ()
{
  wire_fold (gl_LocalInvocationID.x, p.n_groups, p.part_off, p.meta_off,
             p.loss_index != 0xffffffffu ? g[p.loss_index] : 0u, p.prec, p.target);
}
