#version 450
/* round_lone.comp — a lone leader's round at f32 in one pass: its own
 * gradient x alone, no codes wanted (nobody to send them to), so nothing
 * waits for the update's scale. Workgroup k takes hash chunk k (elements
 * [k·C, (k+1)·C), C = HASH_CHUNK):
 *   u = coef · x and params −= u, rounded as round_u and round_quant round
 *   them at f32 (wire.glsl), so the replica's bits are theirs;
 *   the chunk's hash h_k from the new values, kept in shared memory
 *   (params_hash's mode 0, xxh64.glsl);
 *   its largest |u| and |x| and first non-finite u as partials.
 * The last workgroup folds the partials into the round's summary at f32
 * (wire-fold.glsl) and combines h_0 … h_{m-1} into the hash there.
 *
 * It writes the replica before knowing whether every u is finite, so the
 * host dispatches it only when it knows that: the own gradient was checked
 * finite and coef · max |x| does not overflow (rounding is monotonic), or
 * for an update made ahead, whose replica is backed up (flags bit 0: into
 * bak[], element by element as it is read) and restored when that does not
 * hold. A non-finite u is still found and reported.
 *
 * flags bit 1, the own gradient's check folded in: an update made ahead
 * behind a gradient queued without its check (wire_sum's flags 2). The
 * test hook's poison (ctl[poison_off], ctl[poison_off + 1]) replaces its
 * element of x as wire_sum would replace it, and the summary's loss is the
 * step's (x[n]), so the summary's largest |x| and loss are what that check
 * would have given. */
#extension GL_ARB_gpu_shader_int64 : require
#include "wire.glsl"
#include "wire-layout.h"

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer BufX { uint x[]; };
layout(std430, set = 0, binding = 1) buffer BufP { uint params[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufCtl { uint ctl[]; };
/* coherent: the last workgroup reads what the others wrote */
layout(std430, set = 0, binding = 3) coherent buffer BufS { uint s[]; };
layout(std430, set = 0, binding = 4) coherent buffer BufH { uint h[]; };
layout(std430, set = 0, binding = 5) writeonly buffer BufB { uint bak[]; };
/* the summary's host-visible copy, at out_off (~0: none; the host copies
 * it from s[] then) */
layout(std430, set = 0, binding = 6) writeonly buffer BufOut { uint out_[]; };

layout(push_constant) uniform Push {
  uint n, part_off, meta_off, count_off, flags, poison_off, out_off;
} p;

shared uint sh_s[256], sh_g[256], sh_bad[256];
shared uint sh_p[HASH_CHUNK];
shared uint64_t sh_v[4];

#include "wire-fold.glsl"
#include "xxh64.glsl"

#define XXH_WORD(e)  (uint64_t (sh_p[e]) | (uint64_t (sh_p[(e) + 1u]) << 32))
#define XXH_ELEM(e)  sh_p[e]
#define XXH_CHUNK(k) (uint64_t (h[2u * (k)]) | (uint64_t (h[2u * (k) + 1u]) << 32))

void main ()
{
  const uint lid = gl_LocalInvocationID.x;
  const uint k = gl_WorkGroupID.x;
  const uint base = k * HASH_CHUNK;
  const uint count = min (HASH_CHUNK, p.n - base);
  const uint stripes = count / 8u;
  const uint coef = ctl[CTL_COEF];
  const bool backup = (p.flags & 1u) != 0u, check = (p.flags & 2u) != 0u;
  const uint poison_i = check ? ctl[p.poison_off] : 0xffffffffu;
  const uint poison_b = check ? ctl[p.poison_off + 1u] : 0u;
  uint um = 0u, xm = 0u, bad = 0xffffffffu;

  for (uint j = lid; j < count; j += 256u)
    {
      const uint i = base + j;
      /* an f32 code is its own value (wire_decode) */
      const uint xb = i == poison_i ? poison_b : x[i];
      const uint u = f32_mul (coef, xb);
      const uint a = u & 0x7fffffffu;
      const uint op = params[i];
      const uint np = f32_sub (op, u);

      xm = max (xm, xb & 0x7fffffffu);
      um = max (um, a);
      if (a >= F32_ABS_INF)
        {
          bad = min (bad, i);
          s[i] = u;   /* the fold reports the first one's bits from here */
        }
      if (backup)
        bak[i] = op;
      params[i] = np;
      sh_p[j] = np;
    }
  barrier ();
  /* the chunk's hash: its four lanes one invocation each, then the first
   * finishes it */
  if (lid < 4u)
    {
      uint64_t v = lane_init (uint64_t (k), lid);
      for (uint st = 0u; st < stripes; st++)
        v = xround (v, XXH_WORD (8u * st + 2u * lid));
      sh_v[lid] = v;
    }
  barrier ();
  if (lid == 0u)
    {
      uint64_t hk;
      XXH64_CHUNK_END (hk, sh_v[0], sh_v[1], sh_v[2], sh_v[3], stripes, k, 0u, count);
      h[2u * k] = uint (hk);
      h[2u * k + 1u] = uint (hk >> 32);
    }

  wire_partials (lid, p.part_off, k, um, xm, bad);
  wire_fold_last (lid, p.part_off, p.meta_off, p.count_off, check ? x[p.n] : 0u, WIRE_F32, 0u);
  if (sh_last != 0u && lid == 0u)
    {
      uint64_t hash;
      XXH64_OF_CHUNKS (hash, gl_NumWorkGroups.x, p.n);
      s[p.meta_off + META_HASH_LO] = uint (hash);
      s[p.meta_off + META_HASH_HI] = uint (hash >> 32);
      /* (this invocation wrote every word of the summary: the fold's and
       * the hash) */
      if (p.out_off != 0xffffffffu)
        for (uint j = 0u; j < META_WORDS; j++)
          out_[p.out_off + j] = s[p.meta_off + j];
    }
}
