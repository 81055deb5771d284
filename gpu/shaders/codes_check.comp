#version 450
/* codes_check.comp — the first code in this workgroup's elements that
 * decodes to NaN or ±Inf (~0: none), into the partials as wire_sum writes
 * them (3 words a workgroup; only the third is used), for wire_max to fold:
 * an update the host wrote straight into device memory is checked here, so
 * wire_apply can refuse it without touching the replica. */
#include "wire.glsl"
#include "wire-layout.h"

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufCodes { uint codes[]; };
layout(std430, set = 0, binding = 1) buffer BufS { uint s[]; };

#define WIRE_TAB(i) 0u
#include "wire-codec.glsl"

layout(push_constant) uniform Push {
  uint n, per_group, part_off, prec;
} p;

shared uint sh_bad[256];

void main ()
{
  const uint lid = gl_LocalInvocationID.x;
  const uint start = gl_WorkGroupID.x * p.per_group;
  const uint end = min (p.n, start + p.per_group);
  uint bad = 0xffffffffu;

  for (uint i = start + lid; i < end; i += 256u)
    if (wire_code_bad (WIRE_CODE_AT (codes, i, p.prec), p.prec))
      bad = min (bad, i);
  sh_bad[lid] = bad;
  barrier ();
  for (uint k = 128u; k > 0u; k >>= 1)
    {
      if (lid < k)
        sh_bad[lid] = min (sh_bad[lid], sh_bad[lid + k]);
      barrier ();
    }
  if (lid == 0u)
    {
      s[p.part_off + 3u * gl_WorkGroupID.x] = 0u;
      s[p.part_off + 3u * gl_WorkGroupID.x + 1u] = 0u;
      s[p.part_off + 3u * gl_WorkGroupID.x + 2u] = sh_bad[0];
    }
}
