#version 450
/* im2col.comp — 3×3, pad 1: col[(s*H*W + q)*C*9 + ci*9 + ky*3 + kx] =
 * src[s][ci][qy + ky - 1][qx + kx - 1] (NCHW source, zero outside).
 * One thread per (s, q, ci) writes its 9 taps. */
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer In { float src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Out { float col[]; };

layout(push_constant) uniform Push {
  uint n, C, H, W, src_off, col_off;
} p;

void main ()
{
  const uint HW = p.H * p.W;
  const uint total = p.n * HW * p.C;
  for (uint id = gl_GlobalInvocationID.x; id < total; id += gl_NumWorkGroups.x * 256u)
    {
      const uint ci = id % p.C, sq = id / p.C;
      const uint s = sq / HW, q = sq % HW;
      const int y0 = int (q / p.W) - 1, x0 = int (q % p.W) - 1;
      const uint sbase = p.src_off + (s * p.C + ci) * HW;
      const uint dst = p.col_off + id * 9u;
      for (int ky = 0; ky < 3; ky++)
        for (int kx = 0; kx < 3; kx++)
          {
            const int y = y0 + ky, x = x0 + kx;
            col[dst + uint (ky * 3 + kx)] = (y >= 0 && y < int (p.H) && x >= 0 && x < int (p.W))
              ? src[sbase + uint (y) * p.W + uint (x)] : 0.0;
          }
    }
}
