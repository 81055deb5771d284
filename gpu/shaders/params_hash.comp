#version 450
/* params_hash.comp — rlx_params_hash of the replica (core/vision/rlx-model.h),
 * bit for bit, without the parameters leaving the device:
 *   h_k  = XXH64 (elements [k·C, (k+1)·C) as little-endian f32, seed k)
 *   hash = XXH64 (h_0 … h_{m-1} as little-endian u64, seed n)
 * mode 0: four invocations a chunk, one per XXH64 lane (a lane is a
 *   sequential chain: 2048 rounds for a full chunk), 64 chunks a workgroup;
 *   the first of the four finishes its chunk (merge, tail, avalanche) and
 *   writes h_k (two words) to h[].
 * mode 1: one invocation combines h_0 … h_{m-1} into the hash, written to
 *   the summary at meta_off (META_HASH_LO/HI). */
#extension GL_ARB_gpu_shader_int64 : require
#include "wire-layout.h"

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufP { uint params[]; };
layout(std430, set = 0, binding = 1) buffer BufH { uint h[]; };
layout(std430, set = 0, binding = 2) buffer BufS { uint s[]; };

layout(push_constant) uniform Push {
  uint n, mode, meta_off;
} p;

const uint64_t P1 = 0x9E3779B185EBCA87UL;
const uint64_t P2 = 0xC2B2AE3D27D4EB4FUL;
const uint64_t P3 = 0x165667B19E3779F9UL;
const uint64_t P4 = 0x85EBCA77C2B2AE63UL;
const uint64_t P5 = 0x27D4EB2F165667C5UL;

uint64_t
rotl64 (uint64_t x, uint r)
{
  return (x << r) | (x >> (64u - r));
}

uint64_t
xround (uint64_t acc, uint64_t word)
{
  acc += word * P2;
  acc = rotl64 (acc, 31u);
  return acc * P1;
}

uint64_t
xmerge (uint64_t acc, uint64_t v)
{
  acc ^= xround (0UL, v);
  return acc * P1 + P4;
}

uint64_t
lane_init (uint64_t seed, uint lane)
{
  return lane == 0u ? seed + P1 + P2 : lane == 1u ? seed + P2 : lane == 2u ? seed : seed - P1;
}

/* the four lanes' accumulators → the hash's start (XXH64, len ≥ 32) */
uint64_t
lanes_merge (uint64_t v1, uint64_t v2, uint64_t v3, uint64_t v4)
{
  uint64_t r = rotl64 (v1, 1u) + rotl64 (v2, 7u) + rotl64 (v3, 12u) + rotl64 (v4, 18u);
  r = xmerge (r, v1);
  r = xmerge (r, v2);
  r = xmerge (r, v3);
  return xmerge (r, v4);
}

uint64_t
tail8 (uint64_t acc, uint64_t w)
{
  acc ^= xround (0UL, w);
  return rotl64 (acc, 27u) * P1 + P4;
}

uint64_t
avalanche (uint64_t x)
{
  x ^= x >> 33;
  x *= P2;
  x ^= x >> 29;
  x *= P3;
  x ^= x >> 32;
  return x;
}

/* 8 bytes of the parameters from element @e: e and e + 1, little-endian */
uint64_t
param_word (uint e)
{
  return uint64_t (params[e]) | (uint64_t (params[e + 1u]) << 32);
}

uint64_t
chunk_hash (uint k)
{
  return uint64_t (h[2u * k]) | (uint64_t (h[2u * k + 1u]) << 32);
}

shared uint64_t sh_v[256];

void main ()
{
  const uint lid = gl_LocalInvocationID.x;
  const uint m = (p.n + HASH_CHUNK - 1u) / HASH_CHUNK;

  if (p.mode == 0u)
    {
      const uint k = gl_WorkGroupID.x * HASH_CHUNKS_PER_GROUP + lid / 4u;
      const uint lane = lid % 4u;
      const uint base = k * HASH_CHUNK;
      const uint count = k < m ? min (HASH_CHUNK, p.n - base) : 0u;
      const uint stripes = count / 8u;
      uint64_t v = lane_init (uint64_t (k), lane);

      for (uint st = 0u; st < stripes; st++)
        v = xround (v, param_word (base + 8u * st + 2u * lane));
      sh_v[lid] = v;
      barrier ();
      if (lane == 0u && k < m)
        {
          uint64_t acc;
          uint e = base + 8u * stripes, end = base + count;

          if (stripes > 0u)
            acc = lanes_merge (sh_v[lid], sh_v[lid + 1u], sh_v[lid + 2u], sh_v[lid + 3u]);
          else
            acc = uint64_t (k) + P5;
          acc += uint64_t (count) * 4UL;
          for (; e + 2u <= end; e += 2u)
            acc = tail8 (acc, param_word (e));
          if (e < end)
            {
              acc ^= uint64_t (params[e]) * P1;
              acc = rotl64 (acc, 23u) * P2 + P3;
            }
          acc = avalanche (acc);
          h[2u * k] = uint (acc);
          h[2u * k + 1u] = uint (acc >> 32);
        }
      return;
    }

  if (lid == 0u)
    {
      const uint64_t seed = uint64_t (p.n);
      const uint stripes = m / 4u;
      uint64_t acc;
      uint k = 4u * stripes;

      if (stripes > 0u)
        {
          uint64_t v1 = lane_init (seed, 0u), v2 = lane_init (seed, 1u);
          uint64_t v3 = lane_init (seed, 2u), v4 = lane_init (seed, 3u);
          for (uint st = 0u; st < stripes; st++)
            {
              v1 = xround (v1, chunk_hash (4u * st));
              v2 = xround (v2, chunk_hash (4u * st + 1u));
              v3 = xround (v3, chunk_hash (4u * st + 2u));
              v4 = xround (v4, chunk_hash (4u * st + 3u));
            }
          acc = lanes_merge (v1, v2, v3, v4);
        }
      else
        acc = seed + P5;
      acc += uint64_t (m) * 8UL;
      for (; k < m; k++)
        acc = tail8 (acc, chunk_hash (k));
      acc = avalanche (acc);
      s[p.meta_off + META_HASH_LO] = uint (acc);
      s[p.meta_off + META_HASH_HI] = uint (acc >> 32);
    }
}
