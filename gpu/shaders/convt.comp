#version 450
/* convt.comp — backward data of the second convolution (3×3, pad 1):
 *   dP[s][ci][y][x] = Σ_{co,ky,kx} dZ[s][y+1-ky][x+1-kx][co] · W[co][ci][ky][kx]
 * with dZ in NHWC (the GEMM's layout) and dP in NCHW. A thread computes one
 * position for SB samples and all CI channels, so each weight read from
 * shared memory (a broadcast) feeds SB multiply-adds. Replaces a
 * column-gradient GEMM plus col2im, which wrote and read a 9× larger
 * column matrix. */
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint CI = 16;
layout(constant_id = 1) const uint CO = 32;
layout(constant_id = 2) const uint H = 14;
layout(constant_id = 3) const uint W = 14;
const uint SB = 4;

layout(std430, set = 0, binding = 0) readonly buffer DZ { float dz[]; };
layout(std430, set = 0, binding = 1) readonly buffer Params { float params[]; };
layout(std430, set = 0, binding = 2) writeonly buffer DP { float dp[]; };

layout(push_constant) uniform Push {
  uint n, w_off, dz_off, dp_off;
} p;

shared float wsh[CO * CI * 9];

void main ()
{
  const uint lid = gl_LocalInvocationID.x;
  for (uint i = lid; i < CO * CI * 9; i += 256u)
    wsh[i] = params[p.w_off + i];
  barrier ();

  const uint m = gl_GlobalInvocationID.x;
  const uint groups = (p.n + SB - 1) / SB;
  if (m >= groups * H * W)
    return;
  const uint s0 = (m / (H * W)) * SB, q = m % (H * W);
  const uint ns = min (SB, p.n - s0);
  const int y = int (q / W), x = int (q % W);
  float acc[SB][CI];
  [[unroll]] for (uint j = 0; j < SB; j++)
    [[unroll]] for (uint ci = 0; ci < CI; ci++)
      acc[j][ci] = 0.0;
  for (int ky = 0; ky < 3; ky++)
    {
      const int yy = y + 1 - ky;
      if (yy < 0 || yy >= int (H))
        continue;
      for (int kx = 0; kx < 3; kx++)
        {
          const int xx = x + 1 - kx;
          if (xx < 0 || xx >= int (W))
            continue;
          const uint t = uint (ky * 3 + kx);
          const uint pos = uint (yy) * W + uint (xx);
          for (uint co = 0; co < CO; co++)
            {
              float d[SB];
              [[unroll]] for (uint j = 0; j < SB; j++)
                d[j] = j < ns ? dz[p.dz_off + ((s0 + j) * H * W + pos) * CO + co] : 0.0;
              [[unroll]] for (uint ci = 0; ci < CI; ci++)
                {
                  const float wv = wsh[(co * CI + ci) * 9u + t];
                  [[unroll]] for (uint j = 0; j < SB; j++)
                    acc[j][ci] = fma (d[j], wv, acc[j][ci]);
                }
            }
        }
    }
  [[unroll]] for (uint j = 0; j < SB; j++)
    if (j < ns)
      [[unroll]] for (uint ci = 0; ci < CI; ci++)
        dp[p.dp_off + ((s0 + j) * CI + ci) * H * W + q] = acc[j][ci];
}
