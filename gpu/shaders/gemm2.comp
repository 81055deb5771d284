#version 450
/* gemm2.comp — the large-GEMM kernel: C = A·B on 128×128 tiles, 8-deep k
 * slices, 256 threads each holding an 8×8 block of C in registers, and two
 * shared-memory buffers so that one barrier per slice suffices: while the
 * threads multiply slice t from one buffer, slice t+1 travels from global
 * memory into registers and then into the other buffer.
 *
 * Same push constants, operand layouts (A_KC / B_KC 0 or 1, no
 * convolution modes), split-K and epilogue flags as gemm.comp:
 *   A(m,k) = a[a_off + m*lda + k]  (A_KC = 1)   or a[a_off + k*lda + m] (A_KC = 0)
 *   B(k,n) = b[b_off + n*ldb + k]  (B_KC = 1)   or b[b_off + k*ldb + n] (B_KC = 0)
 * Workgroup z sums k in [z*k_chunk, (z+1)*k_chunk) (k_chunk a multiple of
 * 8) in a fixed order, so a step is bitwise reproducible.
 *
 * Thread (tx, ty) = (tid % 16, tid / 16) owns rows ty*4 + {0..3} and
 * 64 + ty*4 + {0..3}, columns tx*4 + {0..3} and 64 + tx*4 + {0..3}: per k
 * four 16-byte shared loads (A's two shared by the warp's two rows of
 * threads) feed 64 fused multiply-adds. Shared rows are padded to 132
 * floats so the transposing stores of k-contiguous operands do not
 * collide. */
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require

layout(constant_id = 0) const uint A_KC = 1;
layout(constant_id = 1) const uint B_KC = 1;
layout(local_size_x = 256) in;

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

#include "epilogue.glsl"

const uint BM = 128u, BN = 128u, BK = 8u, S = 132u;
shared float As[2 * BK * S];
shared float Bs[2 * BK * S];

/* one row of the thread's block: columns n .. n+3 from v0, n+64 .. n+67
 * from v1, through the epilogue */
void store_row (uint cbase, uint m, uint n, vec4 v0, vec4 v1)
{
  /* (two vectors, not an array: see the accumulators below) */
  vec4 o0, o1;

  if (m >= p.M)
    return;
  /* all 8 through the epilogue (its reads of D issued together), then
   * the 8 stores */
  [[unroll]] for (uint j = 0u; j < 4u; j++)
    {
      o0[j] = n + j < p.N ? epilogue (v0[j], m, n + j) : 0.0;
      o1[j] = n + 64u + j < p.N ? epilogue (v1[j], m, n + 64u + j) : 0.0;
    }
  [[unroll]] for (uint j = 0u; j < 4u; j++)
    {
      if (n + j < p.N)
        c[cbase + m * p.ldc + n + j] = o0[j];
      if (n + 64u + j < p.N)
        c[cbase + m * p.ldc + n + 64u + j] = o1[j];
    }
}

void main ()
{
  const uint tid = gl_LocalInvocationID.x;
  const uint tx = tid % 16u, ty = tid / 16u;
  const uint m0 = gl_WorkGroupID.y * BM;
  const uint n0 = gl_WorkGroupID.x * BN;
  const uint kbeg = gl_WorkGroupID.z * p.k_chunk;
  const uint kend = min (p.K, kbeg + p.k_chunk);
  const uint tiles = (kend - kbeg + BK - 1u) / BK;

  /* what this thread stages: 4 elements of each operand's 128×8 slice,
   * consecutive threads along the operand's contiguous dimension */
  uint am[4], ak[4], bn[4], bk[4];
  [[unroll]] for (uint l = 0u; l < 4u; l++)
    {
      const uint e = tid + l * 256u;
      am[l] = A_KC == 1u ? e / BK : e % BM;
      ak[l] = A_KC == 1u ? e % BK : e / BM;
      bn[l] = B_KC == 1u ? e / BK : e % BN;
      bk[l] = B_KC == 1u ? e % BK : e / BN;
    }

  float ra[4], rb[4];
  /* the 8×8 block as 16 named vectors, no array: cRH = row r (0..3: ty*4
   * + r, 4..7: 64 + ty*4 + r-4), column half H (tx*4 or 64 + tx*4). As a
   * vec4[16] array it went to local memory on the H200's driver and the
   * kernel ran 11 times slower (5.9 ms against 0.38 ms) */
  vec4 c00 = vec4 (0.0), c01 = vec4 (0.0), c10 = vec4 (0.0), c11 = vec4 (0.0);
  vec4 c20 = vec4 (0.0), c21 = vec4 (0.0), c30 = vec4 (0.0), c31 = vec4 (0.0);
  vec4 c40 = vec4 (0.0), c41 = vec4 (0.0), c50 = vec4 (0.0), c51 = vec4 (0.0);
  vec4 c60 = vec4 (0.0), c61 = vec4 (0.0), c70 = vec4 (0.0), c71 = vec4 (0.0);

#define LOAD(K0)                                                              \
  [[unroll]] for (uint l = 0u; l < 4u; l++)                                   \
    {                                                                         \
      const uint gm = m0 + am[l], gk = (K0) + ak[l];                          \
      ra[l] = (gm < p.M && gk < kend)                                         \
        ? a[p.a_off + (A_KC == 1u ? gm * p.lda + gk : gk * p.lda + gm)] : 0.0; \
      const uint gn = n0 + bn[l], gk2 = (K0) + bk[l];                         \
      rb[l] = (gn < p.N && gk2 < kend)                                        \
        ? b[p.b_off + (B_KC == 1u ? gn * p.ldb + gk2 : gk2 * p.ldb + gn)] : 0.0; \
    }
#define STORE(BUF)                                                            \
  [[unroll]] for (uint l = 0u; l < 4u; l++)                                   \
    {                                                                         \
      As[(BUF) * BK * S + ak[l] * S + am[l]] = ra[l];                         \
      Bs[(BUF) * BK * S + bk[l] * S + bn[l]] = rb[l];                         \
    }

  LOAD (kbeg);
  STORE (0u);
  barrier ();

  for (uint t = 0u; t < tiles; t++)
    {
      const uint cur = t & 1u;
      const bool more = t + 1u < tiles;

      if (more)
        {
          LOAD (kbeg + (t + 1u) * BK);
        }
      [[unroll]] for (uint k = 0u; k < BK; k++)
        {
          const uint ao = cur * BK * S + k * S + ty * 4u;
          const uint bo = cur * BK * S + k * S + tx * 4u;
          const vec4 a0 = vec4 (As[ao], As[ao + 1u], As[ao + 2u], As[ao + 3u]);
          const vec4 a1 = vec4 (As[ao + 64u], As[ao + 65u], As[ao + 66u], As[ao + 67u]);
          const vec4 b0 = vec4 (Bs[bo], Bs[bo + 1u], Bs[bo + 2u], Bs[bo + 3u]);
          const vec4 b1 = vec4 (Bs[bo + 64u], Bs[bo + 65u], Bs[bo + 66u], Bs[bo + 67u]);
          c00 = fma (vec4 (a0.x), b0, c00); c01 = fma (vec4 (a0.x), b1, c01);
          c10 = fma (vec4 (a0.y), b0, c10); c11 = fma (vec4 (a0.y), b1, c11);
          c20 = fma (vec4 (a0.z), b0, c20); c21 = fma (vec4 (a0.z), b1, c21);
          c30 = fma (vec4 (a0.w), b0, c30); c31 = fma (vec4 (a0.w), b1, c31);
          c40 = fma (vec4 (a1.x), b0, c40); c41 = fma (vec4 (a1.x), b1, c41);
          c50 = fma (vec4 (a1.y), b0, c50); c51 = fma (vec4 (a1.y), b1, c51);
          c60 = fma (vec4 (a1.z), b0, c60); c61 = fma (vec4 (a1.z), b1, c61);
          c70 = fma (vec4 (a1.w), b0, c70); c71 = fma (vec4 (a1.w), b1, c71);
        }
      if (more)
        {
          STORE (cur ^ 1u);
        }
      barrier ();
    }

  const uint cbase = p.c_off + gl_WorkGroupID.z * p.c_split;
  store_row (cbase, m0 + ty * 4u, n0 + tx * 4u, c00, c01);
  store_row (cbase, m0 + ty * 4u + 1u, n0 + tx * 4u, c10, c11);
  store_row (cbase, m0 + ty * 4u + 2u, n0 + tx * 4u, c20, c21);
  store_row (cbase, m0 + ty * 4u + 3u, n0 + tx * 4u, c30, c31);
  store_row (cbase, m0 + 64u + ty * 4u, n0 + tx * 4u, c40, c41);
  store_row (cbase, m0 + 65u + ty * 4u, n0 + tx * 4u, c50, c51);
  store_row (cbase, m0 + 66u + ty * 4u, n0 + tx * 4u, c60, c61);
  store_row (cbase, m0 + 67u + ty * 4u, n0 + tx * 4u, c70, c71);
}
