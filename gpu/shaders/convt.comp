#version 450
/* convt.comp — backward data of the second convolution (3×3, pad 1):
 *   dP[s][ci][y][x] = Σ_{co,ky,kx} dZ[s][y+1-ky][x+1-kx][co] · W[co][ci][ky][kx]
 * with dZ in NHWC (the GEMM's layout) and dP in NCHW. One thread per
 * output position computes all CI channels; the weights sit in shared
 * memory and are read as broadcasts. Replaces a column-gradient GEMM plus
 * col2im, which wrote and read the 9× larger column matrix. */
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint CI = 16;
layout(constant_id = 1) const uint CO = 32;
layout(constant_id = 2) const uint H = 14;
layout(constant_id = 3) const uint W = 14;

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
  if (m >= p.n * H * W)
    return;
  const uint s = m / (H * W), q = m % (H * W);
  const int y = int (q / W), x = int (q % W);
  float acc[CI];
  [[unroll]] for (uint ci = 0; ci < CI; ci++)
    acc[ci] = 0.0;
  [[unroll]] for (int ky = 0; ky < 3; ky++)
    {
      const int yy = y + 1 - ky;
      if (yy < 0 || yy >= int (H))
        continue;
      [[unroll]] for (int kx = 0; kx < 3; kx++)
        {
          const int xx = x + 1 - kx;
          if (xx < 0 || xx >= int (W))
            continue;
          const uint base = p.dz_off + (s * H * W + uint (yy) * W + uint (xx)) * CO;
          const uint t = uint (ky * 3 + kx);
          for (uint co = 0; co < CO; co++)
            {
              const float d = dz[base + co];
              [[unroll]] for (uint ci = 0; ci < CI; ci++)
                acc[ci] = fma (d, wsh[(co * CI + ci) * 9u + t], acc[ci]);
            }
        }
    }
  [[unroll]] for (uint ci = 0; ci < CI; ci++)
    dp[p.dp_off + (s * CI + ci) * H * W + q] = acc[ci];
}
