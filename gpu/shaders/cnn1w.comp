#version 450
/* cnn1w.comp — mnist-cnn backward from conv2's output to conv1's weights,
 * fused, one sample per workgroup at a time:
 *  1. pool1's gradient dP1[ci][y][x] = Σ_co Σ_t dZ2[co][y+1-ky][x+1-kx] ·
 *     W2[co][ci][t], a direct transposed convolution over zero-padded
 *     16×16 planes of dZ2 (the pooled gradient at the pixel pool2 chose,
 *     from cnn2.comp's codes), 16 output channels of dZ2 at a time;
 *  2. pool1 + ReLU backward: conv1's four sums of each pool1 window are
 *     recomputed from the image with cnn1.comp's code (so the same bits and
 *     the same choice), and the gradient goes to the chosen pixel if it
 *     passed ReLU;
 *  3. conv1's weight and bias gradient from that pixel's 3×3 patch.
 * Thread (g, b) owns pool1 block b (2×2 of the 14×14, 7×7 blocks) for input
 * channels 4g..4g+3. The workgroup adds its threads' sums in a fixed order
 * and writes 160 floats (dW1 [16][9], then db1 [16]) at out_off + s*160;
 * a reduce adds the samples. */
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 196) in;
/* SCATTER: fill the dZ2 planes with zeros and then the chosen pixels
 * (otherwise every plane entry looks its pool window's choice up) */
layout(constant_id = 0) const bool SCATTER = true;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Params { float prm[]; };
layout(std430, set = 0, binding = 2) readonly buffer DP { float dp[]; };
layout(std430, set = 0, binding = 3) readonly buffer Codes { uint codes[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Out { float o[]; };

layout(push_constant) uniform Push {
  uint n, w1_off, w2_off, x_off, dp_off, code_off, out_off;
} p;

/* one array, carved: while computing, dZ2 planes [16][16][16] at DZ, W2 of
 * those 16 channels [co%16][tap][ci] at W2S, the padded image [30][30] at
 * XS, w1 + b1 at W1S; at the end, the threads' 40 sums [40][196] from 0 */
const uint DZ = 0u, W2S = 4096u, XS = 6400u, W1S = 7300u;
shared float sm[40 * 196];

#include "cnn.glsl"

void main ()
{
  const uint tid = gl_LocalInvocationID.x;
  const uint g = tid / 49u, b = tid % 49u, ci0 = g * 4u;
  const uint by = b / 7u, bx = b % 7u;

  for (uint s = gl_WorkGroupID.x; s < p.n; s += gl_NumWorkGroups.x)
    {
      vec4 acc[4];   /* dP1 at pixel (2by + d/2, 2bx + d%2), channels ci0.. */
      [[unroll]] for (uint d = 0u; d < 4u; d++)
        acc[d] = vec4 (0.0);

      barrier ();
      for (uint i = tid; i < 900u; i += 196u)
        {
          const uint y = i / 30u - 1u, xx = i % 30u - 1u;
          sm[XS + i] = (y < 28u && xx < 28u) ? x[p.x_off + s * 784u + y * 28u + xx] : 0.0;
        }
      if (tid < 160u)
        sm[W1S + tid] = prm[p.w1_off + tid];   /* w1 [144] and b1 [16] follow each other */

      for (uint cc = 0u; cc < 2u; cc++)
        {
          barrier ();
          if (SCATTER)
            {
              /* zeros, then the 16×49 chosen pixels */
              for (uint i = tid; i < 16u * 256u; i += 196u)
                sm[DZ + i] = 0.0;
              barrier ();
              for (uint i = tid; i < 16u * 49u; i += 196u)
                {
                  const uint co = cc * 16u + i / 49u, q = i % 49u;
                  const uint a = (codes[p.code_off + (s * 4u + co / 8u) * 49u + q] >> (4u * (co % 8u))) & 15u;
                  if (a < 4u)
                    sm[DZ + (i / 49u) * 256u + (2u * (q / 7u) + (a >> 1) + 1u) * 16u
                       + 2u * (q % 7u) + (a & 1u) + 1u] = dp[p.dp_off + s * 1568u + co * 49u + q];
                }
            }
          else
            for (uint i = tid; i < 16u * 256u; i += 196u)
              {
                const uint co = cc * 16u + i / 256u;
                const uint y = (i / 16u) % 16u - 1u, xx = i % 16u - 1u;
                float v = 0.0;
                if (y < 14u && xx < 14u)
                  {
                    const uint q = (y / 2u) * 7u + xx / 2u;
                    const uint a = (codes[p.code_off + (s * 4u + co / 8u) * 49u + q] >> (4u * (co % 8u))) & 15u;
                    if (a == (y & 1u) * 2u + (xx & 1u))
                      v = dp[p.dp_off + s * 1568u + co * 49u + q];
                  }
                sm[DZ + i] = v;
              }
          for (uint i = tid; i < 16u * 144u; i += 196u)
            {
              const uint ci = i % 16u, t = (i / 16u) % 9u, co = cc * 16u + i / 144u;
              sm[W2S + i] = prm[p.w2_off + co * 144u + ci * 9u + t];
            }
          barrier ();
          for (uint cl = 0u; cl < 16u; cl++)
            {
              float pr[16];
              const uint pb = DZ + cl * 256u + by * 32u + bx * 2u;
              [[unroll]] for (uint r = 0u; r < 4u; r++)
                [[unroll]] for (uint k = 0u; k < 4u; k++)
                  pr[r * 4u + k] = sm[pb + r * 16u + k];
              [[unroll]] for (uint t = 0u; t < 9u; t++)
                {
                  const uint ky = t / 3u, kx = t % 3u;
                  const uint wo = W2S + (cl * 9u + t) * 16u + ci0;
                  const vec4 w = vec4 (sm[wo], sm[wo + 1u], sm[wo + 2u], sm[wo + 3u]);
                  [[unroll]] for (uint d = 0u; d < 4u; d++)
                    acc[d] = fma (vec4 (pr[((d >> 1) + 2u - ky) * 4u + (d & 1u) + 2u - kx]), w, acc[d]);
                }
            }
        }

      /* pool1 + ReLU backward, conv1's weight gradient */
      float dw[36];
      vec4 dbv = vec4 (0.0);
      [[unroll]] for (uint i = 0u; i < 36u; i++)
        dw[i] = 0.0;
      [[unroll]] for (uint d = 0u; d < 4u; d++)
        {
          const uint py = by * 2u + (d >> 1), px = bx * 2u + (d & 1u);
          float pt[16];
          [[unroll]] for (uint r = 0u; r < 4u; r++)
            [[unroll]] for (uint k = 0u; k < 4u; k++)
              pt[r * 4u + k] = sm[XS + (py * 2u + r) * 30u + px * 2u + k];
          [[unroll]] for (uint k = 0u; k < 4u; k++)
            {
              const uint ci = ci0 + k;
              float w[9], m;
              [[unroll]] for (uint t = 0u; t < 9u; t++)
                w[t] = sm[W1S + ci * 9u + t];
              const uint a = pool_arg (conv1_window (pt, w), m);
              const float gv = (m + sm[W1S + 144u + ci]) > 0.0 ? acc[d][k] : 0.0;
              const bool down = a >= 2u, right = (a & 1u) != 0u;
              [[unroll]] for (uint t = 0u; t < 9u; t++)
                {
                  const uint o0 = (t / 3u) * 4u + t % 3u;
                  const float v0 = right ? pt[o0 + 1u] : pt[o0];
                  const float v1 = right ? pt[o0 + 5u] : pt[o0 + 4u];
                  dw[k * 9u + t] = fma (gv, down ? v1 : v0, dw[k * 9u + t]);
                }
              dbv[k] += gv;
            }
        }

      barrier ();
      [[unroll]] for (uint i = 0u; i < 36u; i++)
        sm[i * 196u + tid] = dw[i];
      [[unroll]] for (uint k = 0u; k < 4u; k++)
        sm[(36u + k) * 196u + tid] = dbv[k];
      barrier ();
      if (tid < 160u)
        {
          const uint ci = tid < 144u ? tid / 9u : tid - 144u;
          const uint v = tid < 144u ? (ci % 4u) * 9u + tid % 9u : 36u + ci % 4u;
          const uint from = v * 196u + (ci / 4u) * 49u;
          float sum = 0.0;
          for (uint k = 0u; k < 49u; k++)
            sum += sm[from + k];
          o[p.out_off + s * 160u + tid] = sum;
        }
    }
}
