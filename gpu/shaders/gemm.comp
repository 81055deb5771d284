#version 450
/* gemm.comp — C = alpha · A·B with a fused epilogue, tiled and register-blocked
 *
 * A workgroup computes a BM×BN tile of C; each thread a TM×TN block of it,
 * held in registers, from BK-deep slices of A and B staged in shared memory
 * (rows padded by 4 floats against bank conflicts). The next slice is loaded
 * into registers while the current one is multiplied. Tile sizes and operand
 * layouts are specialization constants; shapes, strides and offsets (in
 * floats) are push constants.
 *
 *   A(m,k) = a[a_off + m*lda + k]  (A_KC = 1)   or a[a_off + k*lda + m] (A_KC = 0)
 *   B(k,n) = b[b_off + n*ldb + k]  (B_KC = 1)   or b[b_off + k*ldb + n] (B_KC = 0)
 *
 * Split-K: workgroup z sums k in [z*k_chunk, (z+1)*k_chunk) and writes its
 * partial tile at c_off + z*c_split. Each element's sum has a fixed order, so
 * a step is bitwise reproducible.
 * Implicit-GEMM convolutions (3×3, pad 1, square CONV_H×CONV_H images,
 * pixel rows m or k = s*CONV_H² + y*CONV_H + x; lda/ldb unused where noted):
 *   A_KC = 2: A(m,k) = im2col of NCHW a: k = ci*9 + ky*3 + kx (CONV_C
 *             channels), a[a_off + ((s*CONV_C + ci)*H + y+ky-1)*W + x+kx-1]
 *   A_KC = 3: A(m,k) = the data-gradient gather of NHWC a (CONV_C channels):
 *             k = (ky*3 + kx)*CONV_C + co, a[a_off + ((s*H + y+1-ky)*W + x+1-kx)*CONV_C + co]
 *   B_KC = 2: B(k,n) = im2col of NCHW b with the pixel along k:
 *             n = ci*9 + ky*3 + kx, b[b_off + ((s*CONV_C + ci)*H + y+ky-1)*W + x+kx-1]
 *   B_KC = 3: B(k,n) = conv weights [co][N*9] read for the data gradient:
 *             k = t*CONV_C + co, b[b_off + co*ldb + n*9 + t]
 * (zero outside the image). The tiles stage pixels along consecutive threads.
 * Epilogue flags: 1 + d[n] (bias per column), 2 + d[m] (bias per row),
 * 4 ReLU, 8 × (d[d_off + m*ldd + n] > 0) (ReLU backward mask).
 */
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require

layout(constant_id = 0) const uint BM = 64;
layout(constant_id = 1) const uint BN = 64;
layout(constant_id = 2) const uint BK = 16;
layout(constant_id = 3) const uint TM = 4;
layout(constant_id = 4) const uint TN = 4;
layout(constant_id = 5) const uint A_KC = 1;
layout(constant_id = 6) const uint B_KC = 1;
layout(local_size_x_id = 7) in;
layout(constant_id = 8) const uint CONV_C = 1;
layout(constant_id = 9) const uint CONV_H = 1;

layout(std430, set = 0, binding = 0) readonly buffer BufA { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB { float b[]; };
/* (C and D are never the same buffer: restrict lets the epilogue's reads
 * of D go ahead of its stores to C) */
layout(std430, set = 0, binding = 2) restrict writeonly buffer BufC { float c[]; };
layout(std430, set = 0, binding = 3) restrict readonly buffer BufD { float d[]; };

layout(push_constant) uniform Push {
  uint M, N, K;
  uint lda, ldb, ldc, ldd;
  uint a_off, b_off, c_off, d_off;
  uint k_chunk, c_split, flags;
  float alpha;
} p;

const uint WX  = BN / TN;          /* threads along n */
const uint WY  = BM / TM;          /* threads along m */
const uint WG  = WX * WY;
const uint TMV = TM / 4;
const uint TNV = TN / 4;
const uint BMP = BM + 4;           /* padded shared rows, in floats */
const uint BNP = BN + 4;
const uint LA  = (BM * BK) / WG;   /* elements of A each thread stages */
const uint LB  = (BN * BK) / WG;
const uint CONV_HW = CONV_H * CONV_H;
/* tile staging order: consecutive threads along k (1) or along m / n (0) */
const bool A_ALONG_K = A_KC == 1u || A_KC == 3u;
const bool B_ALONG_K = B_KC == 1u || B_KC == 2u;

/* scalar arrays: every thread stores whole words (no vector-component
 * writes that a compiler could turn into read-modify-write of 16 bytes) */
#include "epilogue.glsl"

shared float As[BK * BMP];
shared float Bs[BK * BNP];

float im2col_at (uint pix, uint tap, bool from_a, uint off)
{
  const uint s = pix / CONV_HW, q = pix % CONV_HW;
  const uint ci = tap / 9u, t = tap % 9u;
  const int y = int (q / CONV_H) + int (t / 3u) - 1;
  const int x = int (q % CONV_H) + int (t % 3u) - 1;
  if (y < 0 || y >= int (CONV_H) || x < 0 || x >= int (CONV_H))
    return 0.0;
  const uint i = off + ((s * CONV_C + ci) * CONV_H + uint (y)) * CONV_H + uint (x);
  return from_a ? a[i] : b[i];
}

float load_a (uint gm, uint gk)
{
  if (A_KC == 2u)
    return im2col_at (gm, gk, true, p.a_off);
  if (A_KC == 3u)
    {
      const uint s = gm / CONV_HW, q = gm % CONV_HW;
      const uint t = gk / CONV_C, co = gk % CONV_C;
      const int y = int (q / CONV_H) + 1 - int (t / 3u);
      const int x = int (q % CONV_H) + 1 - int (t % 3u);
      if (y < 0 || y >= int (CONV_H) || x < 0 || x >= int (CONV_H))
        return 0.0;
      return a[p.a_off + ((s * CONV_H + uint (y)) * CONV_H + uint (x)) * CONV_C + co];
    }
  return a[p.a_off + (A_KC == 1u ? gm * p.lda + gk : gk * p.lda + gm)];
}

float load_b (uint gk, uint gn)
{
  if (B_KC == 2u)
    return im2col_at (gk, gn, false, p.b_off);
  if (B_KC == 3u)
    return b[p.b_off + (gk % CONV_C) * p.ldb + gn * 9u + gk / CONV_C];
  return b[p.b_off + (B_KC == 1u ? gn * p.ldb + gk : gk * p.ldb + gn)];
}

void main ()
{
  const uint tid = gl_LocalInvocationID.x;
  const uint tx = tid % WX;
  const uint ty = tid / WX;
  const uint m0 = gl_WorkGroupID.y * BM;
  const uint n0 = gl_WorkGroupID.x * BN;
  const uint kbeg = gl_WorkGroupID.z * p.k_chunk;
  const uint kend = min (p.K, kbeg + p.k_chunk);

  vec4 acc[TM * TNV];
  float ra[LA];
  float rb[LB];

  [[unroll]] for (uint i = 0; i < TM * TNV; i++)
    acc[i] = vec4 (0.0);

#define LOAD_TILES(K0)                                                        \
  [[unroll]] for (uint l = 0; l < LA; l++)                                    \
    {                                                                         \
      const uint e = tid + l * WG;                                            \
      const uint mm = A_ALONG_K ? e / BK : e % BM;                            \
      const uint kk = A_ALONG_K ? e % BK : e / BM;                            \
      const uint gm = m0 + mm, gk = (K0) + kk;                                \
      ra[l] = (gm < p.M && gk < kend) ? load_a (gm, gk) : 0.0;                \
    }                                                                         \
  [[unroll]] for (uint l = 0; l < LB; l++)                                    \
    {                                                                         \
      const uint e = tid + l * WG;                                            \
      const uint nn = B_ALONG_K ? e / BK : e % BN;                            \
      const uint kk = B_ALONG_K ? e % BK : e / BN;                            \
      const uint gn = n0 + nn, gk = (K0) + kk;                                \
      rb[l] = (gn < p.N && gk < kend) ? load_b (gk, gn) : 0.0;                \
    }

  LOAD_TILES (kbeg);

  for (uint k0 = kbeg; k0 < kend; k0 += BK)
    {
      barrier ();
      [[unroll]] for (uint l = 0; l < LA; l++)
        {
          const uint e = tid + l * WG;
          const uint mm = A_ALONG_K ? e / BK : e % BM;
          const uint kk = A_ALONG_K ? e % BK : e / BM;
          As[kk * BMP + mm] = ra[l];
        }
      [[unroll]] for (uint l = 0; l < LB; l++)
        {
          const uint e = tid + l * WG;
          const uint nn = B_ALONG_K ? e / BK : e % BN;
          const uint kk = B_ALONG_K ? e % BK : e / BN;
          Bs[kk * BNP + nn] = rb[l];
        }
      barrier ();

      if (k0 + BK < kend)
        {
          LOAD_TILES (k0 + BK);
        }

      [[unroll]] for (uint k = 0; k < BK; k++)
        {
          vec4 av[TMV];
          vec4 bv[TNV];
          [[unroll]] for (uint g = 0; g < TMV; g++)
            {
              const uint o = k * BMP + (g * WY + ty) * 4;
              av[g] = vec4 (As[o], As[o + 1], As[o + 2], As[o + 3]);
            }
          [[unroll]] for (uint h = 0; h < TNV; h++)
            {
              const uint o = k * BNP + (h * WX + tx) * 4;
              bv[h] = vec4 (Bs[o], Bs[o + 1], Bs[o + 2], Bs[o + 3]);
            }
          [[unroll]] for (uint g = 0; g < TMV; g++)
            [[unroll]] for (uint i = 0; i < 4; i++)
              [[unroll]] for (uint h = 0; h < TNV; h++)
                acc[(g * 4 + i) * TNV + h] = fma (vec4 (av[g][i]), bv[h], acc[(g * 4 + i) * TNV + h]);
        }
    }

  const uint cbase = p.c_off + gl_WorkGroupID.z * p.c_split;
  [[unroll]] for (uint g = 0; g < TMV; g++)
    [[unroll]] for (uint i = 0; i < 4; i++)
      {
        const uint m = m0 + g * WY * 4 + ty * 4 + i;
        if (m >= p.M)
          continue;
        [[unroll]] for (uint h = 0; h < TNV; h++)
          [[unroll]] for (uint j = 0; j < 4; j++)
            {
              const uint n = n0 + h * WX * 4 + tx * 4 + j;
              if (n >= p.N)
                continue;
              c[cbase + m * p.ldc + n] = epilogue (acc[(g * 4 + i) * TNV + h][j], m, n);
            }
      }
}
