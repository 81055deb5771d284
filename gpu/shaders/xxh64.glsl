/* xxh64.glsl — XXH64's pieces for rlx_params_hash (core/vision/rlx-model.h)
 * on the device: the primes, a lane's round, the lanes' merge, the tail
 * and the avalanche; then the hash's two levels over words the includer
 * names:
 *   XXH_WORD(e)  8 bytes of chunk data from element e (e and e + 1,
 *                little-endian), and XXH_ELEM(e) the element alone,
 *                for XXH64_CHUNK_END;
 *   XXH_CHUNK(k) the chunk hash h_k as a uint64_t, for XXH64_OF_CHUNKS.
 * Needs GL_ARB_gpu_shader_int64. */

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

/* A chunk's hash from its four lanes' accumulators after @stripes full
 * stripes (the lanes unused when there are none): merge, length, the
 * remaining elements [base + 8·stripes, base + count) two at a time, the
 * last one alone, avalanche. @seed: the chunk's index. */
#define XXH64_CHUNK_END(out, v1, v2, v3, v4, stripes, seed, base, count) \
  { \
    uint64_t acc_; \
    uint e_ = (base) + 8u * (stripes), end_ = (base) + (count); \
    acc_ = (stripes) > 0u ? lanes_merge (v1, v2, v3, v4) : uint64_t (seed) + P5; \
    acc_ += uint64_t (count) * 4UL; \
    for (; e_ + 2u <= end_; e_ += 2u) \
      acc_ = tail8 (acc_, XXH_WORD (e_)); \
    if (e_ < end_) \
      { \
        acc_ ^= uint64_t (XXH_ELEM (e_)) * P1; \
        acc_ = rotl64 (acc_, 23u) * P2 + P3; \
      } \
    out = avalanche (acc_); \
  }

/* The parameters' hash from the @m chunk hashes (XXH_CHUNK), seed @n: XXH64
 * over them as little-endian u64 words, by one invocation. */
#define XXH64_OF_CHUNKS(out, m, n) \
  { \
    const uint64_t seed_ = uint64_t (n); \
    const uint stripes_ = (m) / 4u; \
    uint64_t acc_; \
    uint k_ = 4u * stripes_; \
    if (stripes_ > 0u) \
      { \
        uint64_t v1_ = lane_init (seed_, 0u), v2_ = lane_init (seed_, 1u); \
        uint64_t v3_ = lane_init (seed_, 2u), v4_ = lane_init (seed_, 3u); \
        for (uint st_ = 0u; st_ < stripes_; st_++) \
          { \
            v1_ = xround (v1_, XXH_CHUNK (4u * st_)); \
            v2_ = xround (v2_, XXH_CHUNK (4u * st_ + 1u)); \
            v3_ = xround (v3_, XXH_CHUNK (4u * st_ + 2u)); \
            v4_ = xround (v4_, XXH_CHUNK (4u * st_ + 3u)); \
          } \
        acc_ = lanes_merge (v1_, v2_, v3_, v4_); \
      } \
    else \
      acc_ = seed_ + P5; \
    acc_ += uint64_t (m) * 8UL; \
    for (; k_ < (m); k_++) \
      acc_ = tail8 (acc_, XXH_CHUNK (k_)); \
    out = avalanche (acc_); \
  }
