#version 450
/* poolgrad.comp — backward through ReLU and a 2×2 max pool:
 *   dz[s][q][c] (NHWC) = dP(s, c, qy/2, qx/2) where a(s, c, qy, qx) is the
 *   first maximum of its window and positive, else 0.
 * MODE 0: dP is NCHW [s][c][H/2][W/2] at dp_off.
 * MODE 1: dP is the col2im of the next convolution's column gradient
 *   dcol[(s*(H/2)*(W/2) + r)*C*9 + c*9 + ky*3 + kx] (3×3, pad 1).
 * MODE 2: dP is NHWC [s][H/2][W/2][c] at dp_off (the implicit-GEMM data
 *   gradient of the next convolution).
 * MODE 3: as MODE 1 (the same sums in the same order, so the same bits),
 *   but one thread per pooled value (s, py, px, c): the window's maximum is
 *   found once, the 9 column-gradient taps are gathered once, and the thread
 *   writes all four dz of its window (dispatched over n*C*(H/2)*(W/2)). */
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint MODE = 0;

layout(std430, set = 0, binding = 0) readonly buffer A { float act[]; };
layout(std430, set = 0, binding = 1) readonly buffer DP { float dp[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { float dz[]; };

layout(push_constant) uniform Push {
  uint n, C, H, W, a_nhwc, a_off, dp_off, out_off;
} p;

uint at (uint s, uint c, uint y, uint x)
{
  return p.a_off + (p.a_nhwc != 0u ? ((s * p.H + y) * p.W + x) * p.C + c
                                    : ((s * p.C + c) * p.H + y) * p.W + x);
}

float col2im (uint s, uint c, uint py, uint px, uint Hp, uint Wp)
{
  const uint K = p.C * 9u;
  float g = 0.0;
  for (int ky = 0; ky < 3; ky++)
    for (int kx = 0; kx < 3; kx++)
      {
        const int ry = int (py) + 1 - ky, rx = int (px) + 1 - kx;
        if (ry >= 0 && ry < int (Hp) && rx >= 0 && rx < int (Wp))
          g += dp[p.dp_off + (s * Hp * Wp + uint (ry) * Wp + uint (rx)) * K
                  + c * 9u + uint (ky * 3 + kx)];
      }
  return g;
}

void pooled ()
{
  const uint Hp = p.H / 2u, Wp = p.W / 2u;
  const uint total = p.n * Hp * Wp * p.C;
  for (uint id = gl_GlobalInvocationID.x; id < total; id += gl_NumWorkGroups.x * 256u)
    {
      const uint c = id % p.C, px = (id / p.C) % Wp, py = (id / (p.C * Wp)) % Hp;
      const uint s = id / (p.C * Wp * Hp);
      const uint y0 = py * 2u, x0 = px * 2u;
      float best = act[at (s, c, y0, x0)];
      uint arg = 0u;
      float v = act[at (s, c, y0, x0 + 1u)];
      if (v > best) { best = v; arg = 1u; }
      v = act[at (s, c, y0 + 1u, x0)];
      if (v > best) { best = v; arg = 2u; }
      v = act[at (s, c, y0 + 1u, x0 + 1u)];
      if (v > best) { best = v; arg = 3u; }
      const float g = best > 0.0 ? col2im (s, c, py, px, Hp, Wp) : 0.0;
      const uint o = p.out_off + ((s * p.H + y0) * p.W + x0) * p.C + c;
      dz[o] = arg == 0u ? g : 0.0;
      dz[o + p.C] = arg == 1u ? g : 0.0;
      dz[o + p.W * p.C] = arg == 2u ? g : 0.0;
      dz[o + (p.W + 1u) * p.C] = arg == 3u ? g : 0.0;
    }
}

void main ()
{
  if (MODE == 3u)
    {
      pooled ();
      return;
    }
  const uint Hp = p.H / 2u, Wp = p.W / 2u;
  const uint total = p.n * p.H * p.W * p.C;
  for (uint id = gl_GlobalInvocationID.x; id < total; id += gl_NumWorkGroups.x * 256u)
    {
      const uint c = id % p.C, q = (id / p.C) % (p.H * p.W), s = id / (p.C * p.H * p.W);
      const uint y = q / p.W, x = q % p.W;
      const uint py = y / 2u, px = x / 2u;
      const uint y0 = py * 2u, x0 = px * 2u;
      float best = act[at (s, c, y0, x0)];
      uint arg = 0u;
      float v = act[at (s, c, y0, x0 + 1u)];
      if (v > best) { best = v; arg = 1u; }
      v = act[at (s, c, y0 + 1u, x0)];
      if (v > best) { best = v; arg = 2u; }
      v = act[at (s, c, y0 + 1u, x0 + 1u)];
      if (v > best) { best = v; arg = 3u; }
      float g = 0.0;
      if (arg == (y & 1u) * 2u + (x & 1u) && best > 0.0)
        {
          if (MODE == 0u)
            g = dp[p.dp_off + ((s * p.C + c) * Hp + py) * Wp + px];
          else if (MODE == 2u)
            g = dp[p.dp_off + ((s * Hp + py) * Wp + px) * p.C + c];
          else
            g = col2im (s, c, py, px, Hp, Wp);
        }
      dz[p.out_off + id] = g;
    }
}
