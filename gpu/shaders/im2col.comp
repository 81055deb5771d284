#version 450
/* im2col.comp — 3×3, pad 1: col[(s*H*W + q)*C*9 + ci*9 + ky*3 + kx] =
 * src[s][ci][qy + ky - 1][qx + kx - 1] (NCHW source, zero outside). */
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer In { float src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Out { float col[]; };

layout(push_constant) uniform Push {
  uint n, C, H, W, src_off, col_off;
} p;

void main ()
{
  const uint K = p.C * 9u, HW = p.H * p.W;
  const uint total = p.n * HW * K;
  for (uint id = gl_GlobalInvocationID.x; id < total; id += gl_NumWorkGroups.x * 256u)
    {
      const uint k = id % K, q = (id / K) % HW, s = id / (K * HW);
      const uint ci = k / 9u, t = k % 9u;
      const int y = int (q / p.W) + int (t / 3u) - 1;
      const int x = int (q % p.W) + int (t % 3u) - 1;
      col[p.col_off + id] = (y >= 0 && y < int (p.H) && x >= 0 && x < int (p.W))
        ? src[p.src_off + ((s * p.C + ci) * p.H + uint (y)) * p.W + uint (x)] : 0.0;
    }
}
