#version 450
/* gemm2.comp — the large-GEMM kernel: C = A·B on 128×128 tiles, 8- or
 * 16-deep k slices, 256 threads each holding an 8×8 block of C in registers, and two
 * shared-memory buffers so that one barrier per slice suffices: while the
 * threads multiply slice t from one buffer, slice t+1 travels from global
 * memory into registers and then into the other buffer.
 *
 * Same push constants, operand layouts (A_KC / B_KC 0 or 1, no
 * convolution modes), split-K and epilogue flags as gemm.comp:
 *   A(m,k) = a[a_off + m*lda + k]  (A_KC = 1)   or a[a_off + k*lda + m] (A_KC = 0)
 *   B(k,n) = b[b_off + n*ldb + k]  (B_KC = 1)   or b[b_off + k*ldb + n] (B_KC = 0)
 * Workgroup z sums k in [z*k_chunk, (z+1)*k_chunk) (k_chunk a multiple of
 * BK) in a fixed order (the same order at either BK), so a step is bitwise reproducible.
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
/* the k slice, 8 or 16 (RLX_VK_GEMM2_BK): 16 halves the barriers */
layout(constant_id = 2) const uint BK = 8;
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufA { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB { float b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufC { float c[]; };
layout(std430, set = 0, binding = 3) readonly buffer BufD { float d[]; };

layout(push_constant) uniform Push {
  uint M, N, K;
  uint lda, ldb, ldc, ldd;
  uint a_off, b_off, c_off, d_off;
  uint k_chunk, c_split, flags;
  float alpha;
} p;

#include "epilogue.glsl"

const uint BM = 128u, BN = 128u, S = 132u;
const uint PER = BM * BK / 256u;   /* elements of each operand a thread stages */
/* as 16-byte vectors (S and every row's start a multiple of 4): the inner
 * loop's reads are one 16-byte load each */
shared vec4 As[2 * BK * S / 4];
shared vec4 Bs[2 * BK * S / 4];

/* one row of the thread's block: columns n .. n+3 from v0, n+64 .. n+67
 * from v1, through the epilogue */
void store_row (uint cbase, uint m, uint n, vec4 v0, vec4 v1)
{
  if (m >= p.M)
    return;
  [[unroll]] for (uint h = 0u; h < 2u; h++)
    [[unroll]] for (uint j = 0u; j < 4u; j++)
      {
        const uint nn = n + h * 64u + j;
        if (nn < p.N)
          {
            c[cbase + m * p.ldc + nn] = epilogue (h == 0u ? v0[j] : v1[j], m, nn);
          }
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

  /* what this thread stages: PER elements of each operand's 128×BK slice,
   * consecutive threads along the operand's contiguous dimension */
  uint am[PER], ak[PER], bn[PER], bk[PER];
  [[unroll]] for (uint l = 0u; l < PER; l++)
    {
      const uint e = tid + l * 256u;
      am[l] = A_KC == 1u ? e / BK : e % BM;
      ak[l] = A_KC == 1u ? e % BK : e / BM;
      bn[l] = B_KC == 1u ? e / BK : e % BN;
      bk[l] = B_KC == 1u ? e % BK : e / BN;
    }

  float ra[PER], rb[PER];
  /* the 8×8 block as 16 named vectors, no array: cRH = row r (0..3: ty*4
   * + r, 4..7: 64 + ty*4 + r-4), column half H (tx*4 or 64 + tx*4). As a
   * vec4[16] array it went to local memory on the H200's driver and the
   * kernel ran 11 times slower (5.9 ms against 0.38 ms) */
  vec4 c00 = vec4 (0.0), c01 = vec4 (0.0), c10 = vec4 (0.0), c11 = vec4 (0.0);
  vec4 c20 = vec4 (0.0), c21 = vec4 (0.0), c30 = vec4 (0.0), c31 = vec4 (0.0);
  vec4 c40 = vec4 (0.0), c41 = vec4 (0.0), c50 = vec4 (0.0), c51 = vec4 (0.0);
  vec4 c60 = vec4 (0.0), c61 = vec4 (0.0), c70 = vec4 (0.0), c71 = vec4 (0.0);

#define LOAD(K0)                                                              \
  [[unroll]] for (uint l = 0u; l < PER; l++)                                   \
    {                                                                         \
      const uint gm = m0 + am[l], gk = (K0) + ak[l];                          \
      ra[l] = (gm < p.M && gk < kend)                                         \
        ? a[p.a_off + (A_KC == 1u ? gm * p.lda + gk : gk * p.lda + gm)] : 0.0; \
      const uint gn = n0 + bn[l], gk2 = (K0) + bk[l];                         \
      rb[l] = (gn < p.N && gk2 < kend)                                        \
        ? b[p.b_off + (B_KC == 1u ? gn * p.ldb + gk2 : gk2 * p.ldb + gn)] : 0.0; \
    }
#define STORE(BUF)                                                            \
  [[unroll]] for (uint l = 0u; l < PER; l++)                                  \
    {                                                                         \
      const uint ia = (BUF) * BK * S + ak[l] * S + am[l];                     \
      const uint ib = (BUF) * BK * S + bk[l] * S + bn[l];                     \
      As[ia / 4u][ia % 4u] = ra[l];                                           \
      Bs[ib / 4u][ib % 4u] = rb[l];                                           \
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
          const vec4 a0 = As[ao / 4u], a1 = As[ao / 4u + 16u];
          const vec4 b0 = Bs[bo / 4u], b1 = Bs[bo / 4u + 16u];
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
