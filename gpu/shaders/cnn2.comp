#version 450
/* cnn2.comp — mnist-cnn conv2 (16→32, 3×3, pad 1) + bias + ReLU + 2×2 max
 * pool, fused and direct (no im2col): from p1[s][16][14][14] (NCHW) to
 * out[out_off + s*1568 + c*49 + q] (pool2, the dense layer's input in
 * PyTorch's flatten order) and the pool's choices at
 * out[code_off + (s*4 + c/8)*49 + q], 4 bits per channel c%8: the window's
 * first maximum 0..3, or 4 where ReLU zeroed the output.
 *
 * A workgroup of 196 threads takes one sample at a time, its 16 zero-padded
 * 16×16 planes in shared memory; thread (g, b) computes the 2×2 pool window
 * b (7×7 of them) for the 8 channels 8g..8g+7: per input channel a 4×4
 * patch (16 shared loads) against 9 taps × 8 weights (18 vector loads, the
 * same for the whole warp) for 288 fused multiply-adds. The weights are
 * staged CIC input channels at a time. */
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 196) in;
/* input channels whose weights are staged at a time (4 or 8) */
layout(constant_id = 0) const uint CIC = 4;

layout(std430, set = 0, binding = 0) readonly buffer P1 { float p1[]; };
layout(std430, set = 0, binding = 1) readonly buffer Params { float prm[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { uint o[]; };

layout(push_constant) uniform Push {
  uint n, w_off, b_off, p1_off, out_off, code_off;
} p;

shared float ps[16 * 256];     /* [ci][16][16], the plane at (1, 1) */
shared float wsh[CIC * 9 * 32];  /* [ci%CIC][tap][co] of one group of CIC ci */

#include "cnn.glsl"

void main ()
{
  const uint tid = gl_LocalInvocationID.x;
  const uint g = tid / 49u, b = tid % 49u;
  const uint base = (b / 7u) * 32u + (b % 7u) * 2u;

  for (uint s = gl_WorkGroupID.x; s < p.n; s += gl_NumWorkGroups.x)
    {
      vec4 acc[8];   /* [pixel dy*2+dx][channels 8g+4h..+3] */
      [[unroll]] for (uint i = 0u; i < 8u; i++)
        acc[i] = vec4 (0.0);

      barrier ();
      for (uint i = tid; i < 16u * 256u; i += 196u)
        {
          const uint y = (i / 16u) % 16u - 1u, xx = i % 16u - 1u;
          ps[i] = (y < 14u && xx < 14u) ? p1[p.p1_off + (s * 16u + i / 256u) * 196u + y * 14u + xx] : 0.0;
        }
      for (uint cc = 0u; cc < 16u / CIC; cc++)
        {
          barrier ();
          for (uint i = tid; i < CIC * 9u * 32u; i += 196u)
            {
              const uint co = i % 32u, t = (i / 32u) % 9u, ci = cc * CIC + i / 288u;
              wsh[i] = prm[p.w_off + co * 144u + ci * 9u + t];
            }
          barrier ();
          [[unroll]] for (uint cl = 0u; cl < CIC; cl++)
            {
              float pt[16];
              const uint pb = (cc * CIC + cl) * 256u + base;
              [[unroll]] for (uint r = 0u; r < 4u; r++)
                [[unroll]] for (uint k = 0u; k < 4u; k++)
                  pt[r * 4u + k] = ps[pb + r * 16u + k];
              [[unroll]] for (uint t = 0u; t < 9u; t++)
                {
                  const uint ky = t / 3u, kx = t % 3u;
                  const uint wo = (cl * 9u + t) * 32u + g * 8u;
                  const vec4 w0 = vec4 (wsh[wo], wsh[wo + 1u], wsh[wo + 2u], wsh[wo + 3u]);
                  const vec4 w1 = vec4 (wsh[wo + 4u], wsh[wo + 5u], wsh[wo + 6u], wsh[wo + 7u]);
                  [[unroll]] for (uint d = 0u; d < 4u; d++)
                    {
                      const float v = pt[((d >> 1) + ky) * 4u + (d & 1u) + kx];
                      acc[d * 2u] = fma (vec4 (v), w0, acc[d * 2u]);
                      acc[d * 2u + 1u] = fma (vec4 (v), w1, acc[d * 2u + 1u]);
                    }
                }
            }
        }

      uint code = 0u;
      [[unroll]] for (uint j = 0u; j < 8u; j++)
        {
          const uint co = g * 8u + j, h = j / 4u, e = j % 4u;
          float m;
          const uint a = pool_arg (vec4 (acc[h][e], acc[2u + h][e], acc[4u + h][e], acc[6u + h][e]), m);
          const float mv = m + prm[p.b_off + co];
          o[p.out_off + s * 1568u + co * 49u + b] = floatBitsToUint (mv > 0.0 ? mv : 0.0);
          code |= (mv > 0.0 ? a : 4u) << (4u * j);
        }
      o[p.code_off + (s * 4u + g) * 49u + b] = code;
    }
}
