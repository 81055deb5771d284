#version 450
/* gemm_cm.comp — --compute f16: C = A·B on the tensor cores, through
 * VK_NV_cooperative_matrix (Debian 12's glslang compiles only the NV form).
 *
 * Same push constants, operand layouts (A_KC / B_KC 0 or 1), split-K and
 * epilogue as gemm2.comp, plus a_scale:
 *   A(m,k) = a[a_off + m*lda + k]  (A_KC = 1)   or a[a_off + k*lda + m] (A_KC = 0)
 *   B(k,n) = b[b_off + n*ldb + k]  (B_KC = 1)   or b[b_off + k*ldb + n] (B_KC = 0)
 * The operands are read as f32 (the trainer's buffers do not change),
 * A × a_scale and B rounded to f16 into shared memory — or, A_H / B_H,
 * read as the f16 copy to_f16.comp made of them once after their producer
 * (the same rounding, so the same products) — multiplied in
 * 16×16×16 f16 fragments and accumulated in f32; the epilogue's alpha
 * (1 / a_scale, a power of two) undoes the scale exactly. a_scale is the
 * loss scaling of the backward GEMMs, whose A is a gradient (≤ 1/n in
 * magnitude): scaled, it stays clear of f16's subnormals.
 *
 * 256 threads, 8 subgroups of 32 in a SGM × (8 / SGM) grid; each subgroup
 * owns 64 rows and FN·16 columns of the tile (4 × FN accumulators of
 * 16×16), so the tile is (SGM·64) × ((8 / SGM)·FN·16): 128×128 (SGM 2, FN
 * 2), 256×128 (SGM 4, FN 4) or 128×256 (SGM 2, FN 4) — RLX_VK_CM_TILE.
 * k advances BK (32 or 64) at a time: the next slice is read into
 * registers while the current one is multiplied.
 *
 * Shared memory holds the operands as 16-byte chunks of 8 halves (uvec4),
 * each operand keeping its global layout's contiguous dimension: a chunk is
 * 8 consecutive k (A_KC / B_KC = 1) or m / n (0), rows padded by one
 * chunk against bank conflicts. A thread converts 8 consecutive f32 (two
 * 16-byte reads with VEC = 1, where the host checked that every offset,
 * leading dimension and contiguous extent is a multiple of 4; 8 reads
 * otherwise) and stores them with one 16-byte write; the fragments are
 * loaded from the chunks row- or column-major to match (element and
 * stride in chunks).
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
/* subgroups along m (2 or 4; 8 / SGM along n) and 16-wide fragments per
 * subgroup along n (2 or 4): RLX_VK_CM_TILE */
layout(constant_id = 4) const uint SGM = 2;
layout(constant_id = 5) const uint FN = 2;
/* A (B) already in f16, made by to_f16.comp (A × a_scale already): its
 * offset and leading dimension count halves, and a chunk is one 16-byte
 * read (the host checked both and the contiguous extent are multiples of
 * 8); RLX_VK_CM_HALF */
layout(constant_id = 6) const uint A_H = 0;
layout(constant_id = 7) const uint B_H = 0;
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufA { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB { float b[]; };
/* the same buffers as 16-byte vectors (VEC = 1) */
layout(std430, set = 0, binding = 0) readonly buffer BufA4 { vec4 a4[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB4 { vec4 b4[]; };
/* ... and as 16-byte chunks of 8 halves (A_H, B_H) */
layout(std430, set = 0, binding = 0) readonly buffer BufA8 { uvec4 a8[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB8 { uvec4 b8[]; };
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

const uint FM = 4u;                      /* fragments per subgroup along m */
const uint SGN = 8u / SGM;
const uint BM = SGM * FM * 16u, BN = SGN * FN * 16u;
const uint SCOPE = 3u;                   /* gl_ScopeSubgroup */
/* rows in chunks of 8 halves, one chunk of padding */
const uint SK8 = BK / 8u + 1u;           /* a k-contiguous row (of m or n) */
const uint SM8 = BM / 8u + 1u;           /* an m-contiguous row (of k) */
const uint SN8 = BN / 8u + 1u;           /* an n-contiguous row (of k) */
/* chunks of each operand a thread stages per slice */
const uint CA = BM * BK / 8u / 256u, CB = BN * BK / 8u / 256u;
const uint MAXC = 8u;                    /* CA, CB ≤ 8 (BM, BN ≤ 256, BK ≤ 64) */
shared uvec4 As[A_KC == 1u ? BM * SK8 : BK * SM8];
shared uvec4 Bs[B_KC == 1u ? BN * SK8 : BK * SN8];
shared float Cs[8u * 256u];    /* per subgroup: a 16×16 fragment, row-major */

#define ACC fcoopmatNV<32, SCOPE, 16, 16>
#define FRAG fcoopmatNV<16, SCOPE, 16, 16>

/* chunk e of an operand's slice: its row r (m / n for KC = 1, k for 0) and
 * the first of its 8 elements along the contiguous dimension, q */
void chunk_at (uint e, uint kc, uint rows, out uint r, out uint q)
{
  if (kc == 1u)
    {
      r = e / (BK / 8u);
      q = (e % (BK / 8u)) * 8u;
    }
  else
    {
      r = e / (rows / 8u);
      q = (e % (rows / 8u)) * 8u;
    }
}

uvec4 pack8 (vec4 lo, vec4 hi, float s)
{
  return uvec4 (packFloat2x16 (f16vec2 (lo.xy * s)), packFloat2x16 (f16vec2 (lo.zw * s)),
                packFloat2x16 (f16vec2 (hi.xy * s)), packFloat2x16 (f16vec2 (hi.zw * s)));
}

void main ()
{
  const uint tid = gl_LocalInvocationID.x;
  /* the subgroup as the driver formed it (the host checked it is 32 wide) */
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint wm = (sg % SGM) * (FM * 16u), wn = (sg / SGM) * (FN * 16u);
  const uint m0 = gl_WorkGroupID.y * BM;
  const uint n0 = gl_WorkGroupID.x * BN;
  const uint kbeg = gl_WorkGroupID.z * p.k_chunk;
  const uint kend = min (p.K, kbeg + p.k_chunk);
  const uint tiles = (kend - kbeg + BK - 1u) / BK;

  vec4 ra[2u * MAXC], rb[2u * MAXC];
  ACC acc[FM][4];
  [[unroll]] for (uint i = 0u; i < FM; i++)
    [[unroll]] for (uint j = 0u; j < FN; j++)
      acc[i][j] = ACC (0.0);

  /* A(m, k) and B(k, n) of one chunk, 8 consecutive along the contiguous
   * dimension, as f32 (0 outside the matrix and the k range) */
#define FETCH(X, X4, X8, H, KC, MN0, MNLIM, LD, OFF, K0, R, Q, LO, HI)        \
  {                                                                           \
    const uint gmn = (MN0) + ((KC) == 1u ? (R) : (Q));                        \
    const uint gk = (K0) + ((KC) == 1u ? (Q) : (R));                          \
    const uint at = (OFF) + ((KC) == 1u ? gmn * (LD) + gk : gk * (LD) + gmn); \
    if ((H) == 1u)                                                            \
      {                                                                       \
        /* 8 halves, all in or all out; kept as bits in LO */                 \
        const bool in_ = gmn < (MNLIM) && gk < kend;                          \
        LO = uintBitsToFloat (in_ ? X8[at / 8u] : uvec4 (0u));                \
      }                                                                       \
    else if (VEC == 1u)                                                       \
      {                                                                       \
        /* every extent a multiple of 4: a vector is all in or all out */     \
        const bool in0 = (KC) == 1u ? (gmn < (MNLIM) && gk < kend)            \
                                    : (gk < kend && gmn < (MNLIM));           \
        const bool in1 = (KC) == 1u ? (gmn < (MNLIM) && gk + 4u < kend)       \
                                    : (gk < kend && gmn + 4u < (MNLIM));      \
        LO = in0 ? X4[at / 4u] : vec4 (0.0);                                  \
        HI = in1 ? X4[at / 4u + 1u] : vec4 (0.0);                             \
      }                                                                       \
    else                                                                      \
      {                                                                       \
        [[unroll]] for (uint i = 0u; i < 8u; i++)                             \
          {                                                                   \
            const bool in_ = (KC) == 1u ? (gmn < (MNLIM) && gk + i < kend)    \
                                        : (gk < kend && gmn + i < (MNLIM));   \
            const float v = in_ ? X[at + i] : 0.0;                            \
            if (i < 4u) LO[i] = v; else HI[i - 4u] = v;                       \
          }                                                                   \
      }                                                                       \
  }

#define LOAD(K0)                                                              \
  [[unroll]] for (uint l = 0u; l < CA; l++)                                   \
    {                                                                         \
      uint r, q;                                                              \
      chunk_at (tid + l * 256u, A_KC, BM, r, q);                              \
      FETCH (a, a4, a8, A_H, A_KC, m0, p.M, p.lda, p.a_off, K0, r, q, ra[2u * l], ra[2u * l + 1u]) \
    }                                                                         \
  [[unroll]] for (uint l = 0u; l < CB; l++)                                   \
    {                                                                         \
      uint r, q;                                                              \
      chunk_at (tid + l * 256u, B_KC, BN, r, q);                              \
      FETCH (b, b4, b8, B_H, B_KC, n0, p.N, p.ldb, p.b_off, K0, r, q, rb[2u * l], rb[2u * l + 1u]) \
    }

#define STORE()                                                               \
  [[unroll]] for (uint l = 0u; l < CA; l++)                                   \
    {                                                                         \
      uint r, q;                                                              \
      chunk_at (tid + l * 256u, A_KC, BM, r, q);                              \
      As[r * (A_KC == 1u ? SK8 : SM8) + q / 8u] = A_H == 1u ? floatBitsToUint (ra[2u * l]) \
        : pack8 (ra[2u * l], ra[2u * l + 1u], p.a_scale);                    \
    }                                                                         \
  [[unroll]] for (uint l = 0u; l < CB; l++)                                   \
    {                                                                         \
      uint r, q;                                                              \
      chunk_at (tid + l * 256u, B_KC, BN, r, q);                              \
      Bs[r * (B_KC == 1u ? SK8 : SN8) + q / 8u] = B_H == 1u ? floatBitsToUint (rb[2u * l]) \
        : pack8 (rb[2u * l], rb[2u * l + 1u], 1.0);                          \
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
          /* A's fragments are M×K, B's K×N: row-major where the rows
           * are contiguous in shared memory, column-major where the
           * columns are (element and stride in 8-half chunks) */
          FRAG fa[FM];
          [[unroll]] for (uint i = 0u; i < FM; i++)
            {
              if (A_KC == 1u)
                coopMatLoadNV (fa[i], As, (wm + i * 16u) * SK8 + kk / 8u, SK8, false);
              else
                coopMatLoadNV (fa[i], As, kk * SM8 + (wm + i * 16u) / 8u, SM8, true);
            }
          [[unroll]] for (uint j = 0u; j < FN; j++)
            {
              FRAG fb;
              if (B_KC == 1u)
                coopMatLoadNV (fb, Bs, (wn + j * 16u) * SK8 + kk / 8u, SK8, true);
              else
                coopMatLoadNV (fb, Bs, kk * SN8 + (wn + j * 16u) / 8u, SN8, false);
              [[unroll]] for (uint i = 0u; i < FM; i++)
                acc[i][j] = coopMatMulAddNV (fa[i], fb, acc[i][j]);
            }
        }
      barrier ();
    }

  const uint cbase = p.c_off + gl_WorkGroupID.z * p.c_split;
  const uint stage = sg * 256u;
  [[unroll]] for (uint i = 0u; i < FM; i++)
    [[unroll]] for (uint j = 0u; j < FN; j++)
      {
        coopMatStoreNV (acc[i][j], Cs, stage, 16u, false);
        subgroupMemoryBarrierShared ();
        subgroupBarrier ();
        [[unroll]] for (uint q = 0u; q < 8u; q++)
          {
            const uint e = lane + q * 32u;
            const uint m = m0 + wm + i * 16u + e / 16u;
            const uint n = n0 + wn + j * 16u + e % 16u;
            if (m < p.M && n < p.N)
              c[cbase + m * p.ldc + n] = epilogue (Cs[stage + e], m, n);
          }
        subgroupBarrier ();
      }
}
