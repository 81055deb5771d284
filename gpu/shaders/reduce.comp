#version 450
/* reduce.comp — column sums: out[out_off + z*out_split + col] =
 *   epilogue (scale · Σ_{r in chunk z} in[in_off + r*ld + col])
 * where the epilogue optionally adds bias[bias_off + col % bias_n] and
 * applies ReLU (the last step of a split-K GEMM with a bias).
 * A workgroup covers 64 columns (block x + z·(x groups)) of row chunk y,
 * with 4 lanes per column;
 * the lanes are added in a fixed order, so the result is reproducible.
 * Used for bias gradients, the mean loss, and to add split-K partials. */
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufIn { float src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { float dst[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufBias { float bias[]; };

layout(push_constant) uniform Push {
  uint R, C, ld, rows_per_chunk;
  uint in_off, out_off, out_split;
  float scale;
  uint bias_n, bias_off, relu;
} p;

shared float part[256];

void main ()
{
  const uint lid = gl_LocalInvocationID.x;
  const uint cl = lid % 64u;
  const uint lane = lid / 64u;
  /* column blocks beyond the x limit of a grid continue along z */
  const uint col = (gl_WorkGroupID.z * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + cl;
  const uint r0 = gl_WorkGroupID.y * p.rows_per_chunk;
  const uint r1 = min (p.R, r0 + p.rows_per_chunk);
  float s = 0.0;

  if (col < p.C)
    for (uint r = r0 + lane; r < r1; r += 4u)
      s += src[p.in_off + r * p.ld + col];
  part[lid] = s;
  barrier ();
  if (lane == 0u && col < p.C)
    {
      float v = p.scale * ((part[cl] + part[64u + cl]) + (part[128u + cl] + part[192u + cl]));
      if (p.bias_n != 0u)
        v += bias[p.bias_off + col % p.bias_n];
      if (p.relu != 0u)
        v = max (v, 0.0);
      dst[p.out_off + gl_WorkGroupID.y * p.out_split + col] = v;
    }
}
