#version 450
/* cnn1.comp — mnist-cnn conv1 (1→16, 3×3, pad 1) + bias + ReLU + 2×2 max
 * pool, fused: p1[s][c][14][14] (NCHW) from x[s][784]. A workgroup takes one
 * sample at a time: the zero-padded 30×30 image and the 16×9 weights sit in
 * shared memory; each thread computes the four raw sums of a pool window,
 * picks the window's first maximum (as the CPU does, before the bias) and
 * writes relu(max + bias). Nothing of the 28×28 conv output is stored:
 * cnn1w.comp recomputes the same sums with the same code. */
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Params { float prm[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { float p1[]; };

layout(push_constant) uniform Push {
  uint n, w_off, b_off, x_off, out_off;
} p;

shared float xs[900];   /* [30][30], the image at (1, 1) */
shared float ws[160];   /* w1 [16][9], then b1 [16] */

#include "cnn.glsl"

void main ()
{
  const uint tid = gl_LocalInvocationID.x;

  if (tid < 160u)
    ws[tid] = tid < 144u ? prm[p.w_off + tid] : prm[p.b_off + tid - 144u];
  for (uint s = gl_WorkGroupID.x; s < p.n; s += gl_NumWorkGroups.x)
    {
      barrier ();
      for (uint i = tid; i < 900u; i += 256u)
        {
          const uint y = i / 30u - 1u, xx = i % 30u - 1u;   /* wrap: outside */
          xs[i] = (y < 28u && xx < 28u) ? x[p.x_off + s * 784u + y * 28u + xx] : 0.0;
        }
      barrier ();
      for (uint i = tid; i < 16u * 196u; i += 256u)
        {
          const uint c = i / 196u, q = i % 196u;
          const uint base = (q / 14u) * 60u + (q % 14u) * 2u;
          float pt[16], w[9], m;
          [[unroll]] for (uint r = 0u; r < 4u; r++)
            [[unroll]] for (uint k = 0u; k < 4u; k++)
              pt[r * 4u + k] = xs[base + r * 30u + k];
          [[unroll]] for (uint t = 0u; t < 9u; t++)
            w[t] = ws[c * 9u + t];
          pool_arg (conv1_window (pt, w), m);
          const float mv = m + ws[144u + c];
          p1[p.out_off + (s * 16u + c) * 196u + q] = mv > 0.0 ? mv : 0.0;
        }
    }
}
