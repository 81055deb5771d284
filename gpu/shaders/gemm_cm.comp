#version 450
/* gemm_cm.comp — --compute f16: C = A·B on the tensor cores, through
 * VK_NV_cooperative_matrix (Debian 12's glslang compiles only the NV form).
 *
 * Same push constants, operand layouts (A_KC / B_KC 0 or 1), split-K,
 * 128×128 tile and epilogue as gemm2.comp, plus a_scale:
 *   A(m,k) = a[a_off + m*lda + k]  (A_KC = 1)   or a[a_off + k*lda + m] (A_KC = 0)
 *   B(k,n) = b[b_off + n*ldb + k]  (B_KC = 1)   or b[b_off + k*ldb + n] (B_KC = 0)
 * The operands are read as f32 (the trainer's buffers do not change),
 * A × a_scale and B rounded to f16 into shared memory, multiplied in
 * 16×16×16 f16 fragments and accumulated in f32; the epilogue's alpha
 * (1 / a_scale, a power of two) undoes the scale exactly. a_scale is the
 * loss scaling of the backward GEMMs, whose A is a gradient (≤ 1/n in
 * magnitude): scaled, it stays clear of f16's subnormals.
 *
 * 256 threads, 8 subgroups of 32; subgroup w owns rows (w % 2)·64 .. +63
 * and columns (w / 2)·32 .. +31 of the tile: 4×2 accumulators of 16×16.
 * k advances BK (32, or 64) at a time: the next slice is read into registers while
 * the current one is multiplied. In shared memory each operand keeps its
 * global layout's contiguous dimension (k-contiguous rows padded to 40
 * halves — BK + 8 —, m- or n-contiguous rows to 136), and its fragments are loaded
 * row- or column-major to match. VEC = 1 (the host checks that every
 * offset, leading dimension and contiguous extent is a multiple of 4):
 * each thread reads its elements as 16-byte vectors.
 * The epilogue goes through a 16×16 f32 staging area per subgroup (the
 * fragments' layout is the driver's). Workgroup z sums k in
 * [z*k_chunk, (z+1)*k_chunk) (k_chunk a multiple of BK) in a fixed order,
 * so a step is reproducible on one device. */
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require

layout(constant_id = 0) const uint A_KC = 1;
layout(constant_id = 1) const uint B_KC = 1;
layout(constant_id = 2) const uint VEC = 0;
/* the k slice (64, or 32: RLX_VK_CM_BK): 64 halves the barriers per k */
layout(constant_id = 3) const uint BK = 32;
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufA { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB { float b[]; };
/* the same buffers as 16-byte vectors (VEC = 1) */
layout(std430, set = 0, binding = 0) readonly buffer BufA4 { vec4 a4[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB4 { vec4 b4[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufC { float c[]; };
layout(std430, set = 0, binding = 3) readonly buffer BufD { float d[]; };

layout(push_constant) uniform Push {
  uint M, N, K;
  uint lda, ldb, ldc, ldd;
  uint a_off, b_off, c_off, d_off;
  uint k_chunk, c_split, flags;
  float alpha;
  float a_scale;
} p;

#include "epilogue.glsl"

const uint BM = 128u, BN = 128u;
const uint SK = BK + 8u;    /* a k-contiguous row in shared memory (halves) */
const uint SM = BM + 8u;    /* an m- (n-) contiguous row */
const uint SCOPE = 3u;      /* gl_ScopeSubgroup */
const uint PER = BM * BK / 256u;   /* elements of each operand a thread stages */
const uint PER4 = PER / 4u;        /* ... as vectors (VEC) */
shared float16_t As[BM * SK];   /* A(m, k): A_KC = 1 at m*SK + k, else at k*SM + m */
shared float16_t Bs[BN * SK];   /* B(k, n): B_KC = 1 at n*SK + k, else at k*SM + n */

uint a_at (uint m, uint k) { return A_KC == 1u ? m * SK + k : k * SM + m; }
uint b_at (uint n, uint k) { return B_KC == 1u ? n * SK + k : k * SM + n; }
shared float Cs[8u * 256u];    /* per subgroup: a 16×16 fragment, row-major */

#define ACC fcoopmatNV<32, SCOPE, 16, 16>
#define FRAG fcoopmatNV<16, SCOPE, 16, 16>

void main ()
{
  const uint tid = gl_LocalInvocationID.x;
  /* the subgroup as the driver formed it (the host checked it is 32 wide) */
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint wm = (sg % 2u) * 64u, wn = (sg / 2u) * 32u;
  const uint m0 = gl_WorkGroupID.y * BM;
  const uint n0 = gl_WorkGroupID.x * BN;
  const uint kbeg = gl_WorkGroupID.z * p.k_chunk;
  const uint kend = min (p.K, kbeg + p.k_chunk);
  const uint tiles = (kend - kbeg + BK - 1u) / BK;

  /* what this thread stages: consecutive threads along the operand's
   * contiguous dimension; with VEC, 4 consecutive elements from element
   * 4·e (the first PER4 of the indices) */
  uint am[PER], ak[PER], bn[PER], bk[PER];
  [[unroll]] for (uint l = 0u; l < PER; l++)
    {
      const uint e = tid + l * 256u;
      if (VEC == 1u)
        {
          am[l] = A_KC == 1u ? e / (BK / 4u) : (e % (BM / 4u)) * 4u;
          ak[l] = A_KC == 1u ? (e % (BK / 4u)) * 4u : e / (BM / 4u);
          bn[l] = B_KC == 1u ? e / (BK / 4u) : (e % (BN / 4u)) * 4u;
          bk[l] = B_KC == 1u ? (e % (BK / 4u)) * 4u : e / (BN / 4u);
        }
      else
        {
          am[l] = A_KC == 1u ? e / BK : e % BM;
          ak[l] = A_KC == 1u ? e % BK : e / BM;
          bn[l] = B_KC == 1u ? e / BK : e % BN;
          bk[l] = B_KC == 1u ? e % BK : e / BN;
        }
    }
  float ra[PER], rb[PER];
  vec4 va[PER4], vb[PER4];

  ACC c00 = ACC (0.0), c01 = ACC (0.0), c10 = ACC (0.0), c11 = ACC (0.0);
  ACC c20 = ACC (0.0), c21 = ACC (0.0), c30 = ACC (0.0), c31 = ACC (0.0);

#define LOAD(K0)                                                              \
  if (VEC == 1u)                                                              \
    {                                                                         \
      [[unroll]] for (uint l = 0u; l < PER4; l++)                             \
        {                                                                     \
          const uint gm = m0 + am[l], gk = (K0) + ak[l];                      \
          va[l] = (gm < p.M && gk < kend)                                     \
            ? a4[(p.a_off + (A_KC == 1u ? gm * p.lda + gk : gk * p.lda + gm)) / 4u] : vec4 (0.0); \
          const uint gn = n0 + bn[l], gk2 = (K0) + bk[l];                     \
          vb[l] = (gn < p.N && gk2 < kend)                                    \
            ? b4[(p.b_off + (B_KC == 1u ? gn * p.ldb + gk2 : gk2 * p.ldb + gn)) / 4u] : vec4 (0.0); \
        }                                                                     \
    }                                                                         \
  else                                                                        \
    {                                                                         \
      [[unroll]] for (uint l = 0u; l < PER; l++)                              \
        {                                                                     \
          const uint gm = m0 + am[l], gk = (K0) + ak[l];                      \
          ra[l] = (gm < p.M && gk < kend)                                     \
            ? a[p.a_off + (A_KC == 1u ? gm * p.lda + gk : gk * p.lda + gm)] : 0.0; \
          const uint gn = n0 + bn[l], gk2 = (K0) + bk[l];                     \
          rb[l] = (gn < p.N && gk2 < kend)                                    \
            ? b[p.b_off + (B_KC == 1u ? gn * p.ldb + gk2 : gk2 * p.ldb + gn)] : 0.0; \
        }                                                                     \
    }
/* a vector's 4 elements go along the contiguous dimension: k for A_KC
 * (B_KC) = 1, m (n) otherwise */
#define STORE()                                                               \
  if (VEC == 1u)                                                              \
    {                                                                         \
      [[unroll]] for (uint l = 0u; l < PER4; l++)                             \
        {                                                                     \
          const f16vec4 ha = f16vec4 (va[l] * p.a_scale), hb = f16vec4 (vb[l]); \
          [[unroll]] for (uint i = 0u; i < 4u; i++)                           \
            {                                                                 \
              As[A_KC == 1u ? a_at (am[l], ak[l] + i) : a_at (am[l] + i, ak[l])] = ha[i]; \
              Bs[B_KC == 1u ? b_at (bn[l], bk[l] + i) : b_at (bn[l] + i, bk[l])] = hb[i]; \
            }                                                                 \
        }                                                                     \
    }                                                                         \
  else                                                                        \
    {                                                                         \
      [[unroll]] for (uint l = 0u; l < PER; l++)                              \
        {                                                                     \
          As[a_at (am[l], ak[l])] = float16_t (ra[l] * p.a_scale);            \
          Bs[b_at (bn[l], bk[l])] = float16_t (rb[l]);                        \
        }                                                                     \
    }

  LOAD (kbeg);
  for (uint t = 0u; t < tiles; t++)
    {
      STORE ();
      barrier ();
      if (t + 1u < tiles)
        {
          LOAD (kbeg + (t + 1u) * BK);
        }
      [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u)
        {
          FRAG a0, a1, a2, a3, b0, b1;
          /* A's fragments are M×K, B's K×N: row-major where the rows
           * are contiguous in shared memory, column-major where the
           * columns are */
          if (A_KC == 1u)
            {
              coopMatLoadNV (a0, As, a_at (wm + 0u, kk), SK, false);
              coopMatLoadNV (a1, As, a_at (wm + 16u, kk), SK, false);
              coopMatLoadNV (a2, As, a_at (wm + 32u, kk), SK, false);
              coopMatLoadNV (a3, As, a_at (wm + 48u, kk), SK, false);
            }
          else
            {
              coopMatLoadNV (a0, As, a_at (wm + 0u, kk), SM, true);
              coopMatLoadNV (a1, As, a_at (wm + 16u, kk), SM, true);
              coopMatLoadNV (a2, As, a_at (wm + 32u, kk), SM, true);
              coopMatLoadNV (a3, As, a_at (wm + 48u, kk), SM, true);
            }
          if (B_KC == 1u)
            {
              coopMatLoadNV (b0, Bs, b_at (wn + 0u, kk), SK, true);
              coopMatLoadNV (b1, Bs, b_at (wn + 16u, kk), SK, true);
            }
          else
            {
              coopMatLoadNV (b0, Bs, b_at (wn + 0u, kk), SM, false);
              coopMatLoadNV (b1, Bs, b_at (wn + 16u, kk), SM, false);
            }
          c00 = coopMatMulAddNV (a0, b0, c00); c01 = coopMatMulAddNV (a0, b1, c01);
          c10 = coopMatMulAddNV (a1, b0, c10); c11 = coopMatMulAddNV (a1, b1, c11);
          c20 = coopMatMulAddNV (a2, b0, c20); c21 = coopMatMulAddNV (a2, b1, c21);
          c30 = coopMatMulAddNV (a3, b0, c30); c31 = coopMatMulAddNV (a3, b1, c31);
        }
      barrier ();
    }

  const uint cbase = p.c_off + gl_WorkGroupID.z * p.c_split;
  const uint stage = sg * 256u;
#define EMIT(ACCV, I, J)                                                      \
  coopMatStoreNV (ACCV, Cs, stage, 16u, false);                               \
  subgroupMemoryBarrierShared ();                                             \
  subgroupBarrier ();                                                         \
  [[unroll]] for (uint q = 0u; q < 8u; q++)                                   \
    {                                                                         \
      const uint e = lane + q * 32u;                                          \
      const uint m = m0 + wm + (I) * 16u + e / 16u;                           \
      const uint n = n0 + wn + (J) * 16u + e % 16u;                           \
      if (m < p.M && n < p.N)                                                 \
        c[cbase + m * p.ldc + n] = epilogue (Cs[stage + e], m, n);            \
    }                                                                         \
  subgroupBarrier ();
  EMIT (c00, 0u, 0u) EMIT (c01, 0u, 1u)
  EMIT (c10, 1u, 0u) EMIT (c11, 1u, 1u)
  EMIT (c20, 2u, 0u) EMIT (c21, 2u, 1u)
  EMIT (c30, 3u, 0u) EMIT (c31, 3u, 1u)
}
