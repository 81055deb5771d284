#version 450
/* maxpool.comp — 2×2 max pool, stride 2: out[s][c][py][px] (NCHW) from an
 * NCHW (in_nhwc = 0) or NHWC (in_nhwc = 1) input of C×H×W per sample. */
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer In { float src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Out { float dst[]; };

layout(push_constant) uniform Push {
  uint n, C, H, W, in_nhwc, in_off, out_off;
} p;

uint at (uint s, uint c, uint y, uint x)
{
  return p.in_off + (p.in_nhwc != 0u ? ((s * p.H + y) * p.W + x) * p.C + c
                                      : ((s * p.C + c) * p.H + y) * p.W + x);
}

void main ()
{
  const uint Hp = p.H / 2u, Wp = p.W / 2u;
  const uint total = p.n * p.C * Hp * Wp;
  for (uint id = gl_GlobalInvocationID.x; id < total; id += gl_NumWorkGroups.x * 256u)
    {
      const uint px = id % Wp, py = (id / Wp) % Hp;
      const uint c = (id / (Wp * Hp)) % p.C, s = id / (Wp * Hp * p.C);
      const uint y = py * 2u, x = px * 2u;
      float m = src[at (s, c, y, x)];
      m = max (m, src[at (s, c, y, x + 1u)]);
      m = max (m, src[at (s, c, y + 1u, x)]);
      m = max (m, src[at (s, c, y + 1u, x + 1u)]);
      dst[p.out_off + id] = m;
    }
}
