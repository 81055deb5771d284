/* cnn.glsl — pieces the fused mnist-cnn shaders share, so that the
 * forward pass and the backward pass that recomputes conv1 get the same
 * bits. */

/* The first maximum of a 2×2 pool window (z = the window's four raw conv
 * sums, row-major) by the CPU reference's tournament (core/vision/rlx-cpu.c
 * DEFINE_POOL): ties go to the earlier pixel. Returns 0..3, the max in @m. */
uint pool_arg (vec4 z, out float m)
{
  const bool g01 = z.y > z.x, g23 = z.w > z.z;
  const float m01 = g01 ? z.y : z.x, m23 = g23 ? z.w : z.z;
  const bool g = m23 > m01;
  m = g ? m23 : m01;
  return g ? (g23 ? 3u : 2u) : (g01 ? 1u : 0u);
}

/* conv1's raw sums (no bias) at the four pixels of a pool window, from the
 * 4×4 patch @pt of the zero-padded image whose top-left is the window's
 * top-left pixel: z[dy*2 + dx] = Σ_t w[t] · pt[(dy + t/3)*4 + dx + t%3],
 * fused multiply-adds in tap order. */
vec4 conv1_window (const float pt[16], const float w[9])
{
  vec4 z = vec4 (0.0);
  [[unroll]] for (uint t = 0u; t < 9u; t++)
    {
      const uint ky = t / 3u, kx = t % 3u;
      z.x = fma (w[t], pt[ky * 4u + kx], z.x);
      z.y = fma (w[t], pt[ky * 4u + kx + 1u], z.y);
      z.z = fma (w[t], pt[(ky + 1u) * 4u + kx], z.z);
      z.w = fma (w[t], pt[(ky + 1u) * 4u + kx + 1u], z.w);
    }
  return z;
}
