/* rlx-model.c — parameter layout and seeded initialisation of the models */
#include "rlx-config.h"
#include "rlx-model.h"
#include "rlx-philox.h"

#include <math.h>
#include <string.h>

G_DEFINE_QUARK (rlx-model-error-quark, rlx_model_error)

/* Philox counter word 3 for parameter initialisation ("INIT"), so init draws
 * never coincide with dataset or permutation draws under the same key. */
#define INIT_DOMAIN 0x494E4954u

#define T2(nm, o, i, off) { nm, 2, { o, i, 0, 0 }, off, (gsize) (o) * (i), i }
#define T1(nm, o, fan, off) { nm, 1, { o, 0, 0, 0 }, off, o, fan }
#define T4(nm, o, i, k, off) { nm, 4, { o, i, k, k }, off, (gsize) (o) * (i) * (k) * (k), (i) * (k) * (k) }

static const RlxTensorInfo mlp_tensors[] = {
  T2 ("1.weight", 128, 784, 0),
  T1 ("1.bias", 128, 784, 100352),
  T2 ("3.weight", 10, 128, 100480),
  T1 ("3.bias", 10, 128, 101760),
};

static const RlxTensorInfo mlp_xl_tensors[] = {
  T2 ("1.weight", 1024, 784, 0),
  T1 ("1.bias", 1024, 784, 802816),
  T2 ("3.weight", 1024, 1024, 803840),
  T1 ("3.bias", 1024, 1024, 1852416),
  T2 ("5.weight", 10, 1024, 1853440),
  T1 ("5.bias", 10, 1024, 1863680),
};

static const RlxTensorInfo cnn_tensors[] = {
  T4 ("0.weight", 16, 1, 3, 0),
  T1 ("0.bias", 16, 9, 144),
  T4 ("3.weight", 32, 16, 3, 160),
  T1 ("3.bias", 32, 144, 4768),
  T2 ("7.weight", 10, 1568, 4800),
  T1 ("7.bias", 10, 1568, 20480),
};

static const RlxModel models[RLX_N_MODELS] = {
  { RLX_MODEL_MNIST_MLP, "mnist-mlp", G_N_ELEMENTS (mlp_tensors), mlp_tensors, 101770 },
  { RLX_MODEL_MNIST_MLP_XL, "mnist-mlp-xl", G_N_ELEMENTS (mlp_xl_tensors), mlp_xl_tensors, 1863690 },
  { RLX_MODEL_MNIST_CNN, "mnist-cnn", G_N_ELEMENTS (cnn_tensors), cnn_tensors, 20490 },
};

const RlxModel *
rlx_model_get (RlxModelId id)
{
  g_return_val_if_fail ((guint) id < RLX_N_MODELS, NULL);
  return &models[id];
}

const char *
rlx_model_slugs (void)
{
  return "mnist-mlp, mnist-mlp-xl, mnist-cnn";
}

const RlxModel *
rlx_model_lookup (const char *slug, GError **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (slug != NULL)
    for (guint i = 0; i < RLX_N_MODELS; i++)
      if (strcmp (slug, models[i].slug) == 0)
        return &models[i];

  g_set_error (error, RLX_MODEL_ERROR, RLX_MODEL_ERROR_UNKNOWN,
               "unknown model '%s'; known models: %s",
               slug ? slug : "(null)", rlx_model_slugs ());
  return NULL;
}

/* Tensor t, element e takes word (e % 4) of Philox(ctr = {e / 4, t, 0, INIT},
 * key = seed): value = (2u - 1) / sqrt(fan_in), u uniform in [0, 1). */
void
rlx_model_init_params (const RlxModel *model, guint64 seed, float *params)
{
  const guint32 key[2] = { (guint32) seed, (guint32) (seed >> 32) };

  g_return_if_fail (model != NULL);
  g_return_if_fail (params != NULL);

  for (guint t = 0; t < model->n_tensors; t++)
    {
      const RlxTensorInfo *ti = &model->tensors[t];
      float bound = (float) (1.0 / sqrt ((double) ti->fan_in));
      float *p = params + ti->offset;

      for (gsize e = 0; e < ti->numel; e += 4)
        {
          guint32 ctr[4] = { (guint32) (e / 4), t, 0, INIT_DOMAIN };
          guint32 out[4];

          rlx_philox4x32_10 (ctr, key, out);
          for (gsize k = 0; k < 4 && e + k < ti->numel; k++)
            p[e + k] = (2.0f * rlx_philox_uniform (out[k]) - 1.0f) * bound;
        }
    }
}

/* The replicas' parameter hash, a tree of XXH64 (the published xxHash64,
 * https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md) so that it
 * splits across threads and still has one definition:
 *
 *   chunk k    = elements [k·C, min ((k+1)·C, n)), C = RLX_PARAMS_HASH_CHUNK,
 *                as little-endian f32 bytes
 *   h_k        = XXH64 (chunk k, seed = k)
 *   hash       = XXH64 (h_0 … h_{m-1} as little-endian u64, seed = n)
 *
 * (m = ceil (n / C); n = 0 hashes zero bytes with seed 0.) Each chunk's hash
 * is independent, so core/rlx-kernels.c hashes chunks on every core (and
 * while they are in cache after an apply) and gets the same value for any
 * thread count. The old whole-vector XXH64 was sequential: ~0.5 ms a round
 * for mnist-mlp-xl on one core. */
#define XP1 G_GUINT64_CONSTANT (0x9E3779B185EBCA87)
#define XP2 G_GUINT64_CONSTANT (0xC2B2AE3D27D4EB4F)
#define XP3 G_GUINT64_CONSTANT (0x165667B19E3779F9)
#define XP4 G_GUINT64_CONSTANT (0x85EBCA77C2B2AE63)
#define XP5 G_GUINT64_CONSTANT (0x27D4EB2F165667C5)

static inline guint64
rotl64 (guint64 x, int r)
{
  return (x << r) | (x >> (64 - r));
}

static inline guint64
xround (guint64 acc, guint64 input)
{
  acc += input * XP2;
  acc = rotl64 (acc, 31);
  return acc * XP1;
}

static inline guint64
xmerge (guint64 acc, guint64 v)
{
  acc ^= xround (0, v);
  return acc * XP1 + XP4;
}

static inline guint64
load64 (const guint8 *p)
{
  guint64 v;

  memcpy (&v, p, 8);
  return GUINT64_FROM_LE (v);
}

guint64
rlx_xxh64 (const void *data, gsize len, guint64 seed)
{
  const guint8 *p = data;
  gsize i = 0;
  guint64 h;

  g_return_val_if_fail (data != NULL || len == 0, 0);

  if (len >= 32)
    {
      guint64 v1 = seed + XP1 + XP2, v2 = seed + XP2, v3 = seed, v4 = seed - XP1;
      for (; i + 32 <= len; i += 32)
        {
          v1 = xround (v1, load64 (p + i));
          v2 = xround (v2, load64 (p + i + 8));
          v3 = xround (v3, load64 (p + i + 16));
          v4 = xround (v4, load64 (p + i + 24));
        }
      h = rotl64 (v1, 1) + rotl64 (v2, 7) + rotl64 (v3, 12) + rotl64 (v4, 18);
      h = xmerge (h, v1);
      h = xmerge (h, v2);
      h = xmerge (h, v3);
      h = xmerge (h, v4);
    }
  else
    h = seed + XP5;
  h += len;
  for (; i + 8 <= len; i += 8)
    {
      h ^= xround (0, load64 (p + i));
      h = rotl64 (h, 27) * XP1 + XP4;
    }
  for (; i + 4 <= len; i += 4)
    {
      guint32 w;
      memcpy (&w, p + i, 4);
      h ^= (guint64) GUINT32_FROM_LE (w) * XP1;
      h = rotl64 (h, 23) * XP2 + XP3;
    }
  for (; i < len; i++)
    {
      h ^= p[i] * XP5;
      h = rotl64 (h, 11) * XP1;
    }
  h ^= h >> 33;
  h *= XP2;
  h ^= h >> 29;
  h *= XP3;
  h ^= h >> 32;
  return h;
}

guint64
rlx_params_hash_chunk (const float *params, gsize n, gsize index)
{
  const float *chunk = params + index * RLX_PARAMS_HASH_CHUNK;

  g_return_val_if_fail (params != NULL, 0);
  g_return_val_if_fail (index * RLX_PARAMS_HASH_CHUNK < n, 0);

  /* The f32 bits in memory are little-endian on every host this builds for
   * (x86-64, aarch64); a big-endian host would need a byte swap here. */
  G_STATIC_ASSERT (G_BYTE_ORDER == G_LITTLE_ENDIAN);
  return rlx_xxh64 (chunk, MIN (RLX_PARAMS_HASH_CHUNK, n - index * RLX_PARAMS_HASH_CHUNK) * 4,
                    index);
}

guint64
rlx_params_hash_combine (const guint64 *chunk_hashes, gsize n)
{
  g_return_val_if_fail (chunk_hashes != NULL || rlx_params_hash_n_chunks (n) == 0, 0);

  /* The chunk hashes as little-endian u64: their bytes in memory on the
   * little-endian hosts this builds for (asserted in _chunk). */
  return rlx_xxh64 (chunk_hashes, rlx_params_hash_n_chunks (n) * 8, n);
}

gsize
rlx_params_hash_n_chunks (gsize n)
{
  return (n + RLX_PARAMS_HASH_CHUNK - 1) / RLX_PARAMS_HASH_CHUNK;
}

guint64
rlx_params_hash_with_chunk (const float *params, gsize n, gsize chunk)
{
  gsize m;
  g_autofree guint64 *h = NULL;

  g_return_val_if_fail (params != NULL || n == 0, 0);
  g_return_val_if_fail (chunk >= 1, 0);

  if (chunk == RLX_PARAMS_HASH_CHUNK)
    return rlx_params_hash (params, n);
  m = (n + chunk - 1) / chunk;
  h = g_new (guint64, MAX (m, 1));
  for (gsize k = 0; k < m; k++)
    h[k] = GUINT64_TO_LE (rlx_xxh64 (params + k * chunk, MIN (chunk, n - k * chunk) * 4, k));
  return rlx_xxh64 (h, m * 8, n);
}

guint64
rlx_params_hash (const float *params, gsize n)
{
  gsize m = rlx_params_hash_n_chunks (n);
  guint64 stack[256];
  g_autofree guint64 *heap = NULL;
  guint64 *h = m <= G_N_ELEMENTS (stack) ? stack : (heap = g_new (guint64, m));

  g_return_val_if_fail (params != NULL || n == 0, 0);

  for (gsize k = 0; k < m; k++)
    h[k] = rlx_params_hash_chunk (params, n, k);
  return rlx_params_hash_combine (h, n);
}
