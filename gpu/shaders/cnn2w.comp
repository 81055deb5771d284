#version 450
/* cnn2w.comp — mnist-cnn conv2's weight and bias gradient, partial sums
 * over a run of samples. The gradient at conv2's output is the pooled
 * gradient dp[s][c][q] (q of 7×7) at the one pixel the pool chose (codes
 * from cnn2.comp), zero elsewhere, so per sample and channel only 49 pixels
 * contribute:
 *   dW2[co][ci][t] = Σ_s Σ_q g(s,co,q) · p1pad[s][ci][pixel(s,co,q) + t]
 *   db2[co]        = Σ_s Σ_q g(s,co,q)
 * Workgroup z sums samples [z*per_wg, (z+1)*per_wg) and writes 4640 floats
 * (dW2 [32][144], then db2 [32]) at out_off + z*4640; a reduce adds the
 * workgroups in order. Thread t owns co = t/8 and input channels 2(t%8),
 * 2(t%8)+1 (18 sums). */
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer P1 { float p1[]; };
layout(std430, set = 0, binding = 1) readonly buffer DP { float dp[]; };
layout(std430, set = 0, binding = 2) readonly buffer Codes { uint codes[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Out { float o[]; };

layout(push_constant) uniform Push {
  uint n, per_wg, p1_off, dp_off, code_off, out_off;
} p;

const uint CS = 257u;          /* plane stride: odd, so channels fall in different banks */
shared float ps[16 * CS];      /* [ci][16][16], the plane at (1, 1) */
shared float gs[1568];         /* [co][q] gradient that passed ReLU, else 0 */
shared uint  qs[1568];         /* [co][q] chosen pixel, y*16 + x */

void main ()
{
  const uint tid = gl_LocalInvocationID.x;
  const uint co = tid / 8u, ci0 = (tid % 8u) * 2u;
  const uint s0 = gl_WorkGroupID.x * p.per_wg;
  const uint s1 = min (p.n, s0 + p.per_wg);
  float acc[18];
  float db = 0.0;

  [[unroll]] for (uint i = 0u; i < 18u; i++)
    acc[i] = 0.0;
  for (uint s = s0; s < s1; s++)
    {
      barrier ();
      for (uint i = tid; i < 16u * 256u; i += 256u)
        {
          const uint y = (i / 16u) % 16u - 1u, xx = i % 16u - 1u;
          ps[(i / 256u) * CS + i % 256u] =
            (y < 14u && xx < 14u) ? p1[p.p1_off + (s * 16u + i / 256u) * 196u + y * 14u + xx] : 0.0;
        }
      for (uint i = tid; i < 1568u; i += 256u)
        {
          const uint c = i / 49u, q = i % 49u;
          const uint a = (codes[p.code_off + (s * 4u + c / 8u) * 49u + q] >> (4u * (c % 8u))) & 15u;
          gs[i] = a < 4u ? dp[p.dp_off + s * 1568u + i] : 0.0;
          qs[i] = (2u * (q / 7u) + (a >> 1) % 2u) * 16u + 2u * (q % 7u) + (a & 1u);
        }
      barrier ();
      for (uint q = 0u; q < 49u; q++)
        {
          const float g = gs[co * 49u + q];
          if (g != 0.0)
            {
              const uint pos = qs[co * 49u + q];
              [[unroll]] for (uint k = 0u; k < 2u; k++)
                [[unroll]] for (uint t = 0u; t < 9u; t++)
                  acc[k * 9u + t] = fma (g, ps[(ci0 + k) * CS + pos + (t / 3u) * 16u + t % 3u],
                                         acc[k * 9u + t]);
            }
          db += g;
        }
    }

  const uint ob = p.out_off + gl_WorkGroupID.x * 4640u;
  [[unroll]] for (uint k = 0u; k < 2u; k++)
    [[unroll]] for (uint t = 0u; t < 9u; t++)
      o[ob + co * 144u + (ci0 + k) * 9u + t] = acc[k * 9u + t];
  if (tid % 8u == 0u)
    o[ob + 4608u + co] = db;
}
