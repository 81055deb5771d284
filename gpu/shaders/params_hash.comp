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

#include "xxh64.glsl"

/* 8 bytes of the parameters from element @e: e and e + 1, little-endian */
uint64_t
param_word (uint e)
{
  return uint64_t (params[e]) | (uint64_t (params[e + 1u]) << 32);
}

#define XXH_WORD(e)  param_word (e)
#define XXH_ELEM(e)  params[e]
#define XXH_CHUNK(k) (uint64_t (h[2u * (k)]) | (uint64_t (h[2u * (k) + 1u]) << 32))

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
          uint64_t hk;
          XXH64_CHUNK_END (hk, sh_v[lid], sh_v[lid + 1u], sh_v[lid + 2u], sh_v[lid + 3u],
                           stripes, k, base, count);
          h[2u * k] = uint (hk);
          h[2u * k + 1u] = uint (hk >> 32);
        }
      return;
    }

  if (lid == 0u)
    {
      uint64_t hash;
      XXH64_OF_CHUNKS (hash, m, p.n);
      s[p.meta_off + META_HASH_LO] = uint (hash);
      s[p.meta_off + META_HASH_HI] = uint (hash >> 32);
    }
}
