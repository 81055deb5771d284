#version 450
/* conv1.comp — the first convolution (1→16 channels, 3×3, pad 1) with bias
 * and ReLU, direct: out[s][co][p] (NCHW) from x[s][784]. */
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Params { float w[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { float dst[]; };

layout(push_constant) uniform Push {
  uint n, w_off, b_off, x_off, out_off;
} p;

void main ()
{
  const uint total = p.n * 784u;
  for (uint id = gl_GlobalInvocationID.x; id < total; id += gl_NumWorkGroups.x * 256u)
    {
      const uint s = id / 784u, q = id % 784u;
      const int y = int (q / 28u), xx = int (q % 28u);
      float v[9];
      for (int ky = 0; ky < 3; ky++)
        for (int kx = 0; kx < 3; kx++)
          {
            const int sy = y + ky - 1, sx = xx + kx - 1;
            v[ky * 3 + kx] = (sy >= 0 && sy < 28 && sx >= 0 && sx < 28)
              ? x[p.x_off + s * 784u + uint (sy * 28 + sx)] : 0.0;
          }
      for (uint co = 0u; co < 16u; co++)
        {
          float z = 0.0;
          for (uint t = 0u; t < 9u; t++)
            z = fma (w[p.w_off + co * 9u + t], v[t], z);
          dst[p.out_off + (s * 16u + co) * 784u + q] = max (z + w[p.b_off + co], 0.0);
        }
    }
}
