/* rlx-model.h — the three models of DESIGN.md: layout and initialisation
 *
 * Parameters are one flat f32 vector in layer order, weight (row-major,
 * PyTorch's shape) then bias. Tensor names are those of PyTorch's
 * nn.Sequential in shared/bench/torch_ref.py ("1.weight", …), so an exported
 * .safetensors file loads straight into that model with load_state_dict.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define RLX_IMAGE_SIDE   28
#define RLX_INPUT_LEN    (RLX_IMAGE_SIDE * RLX_IMAGE_SIDE)
#define RLX_N_CLASSES    10

typedef enum {
  RLX_MODEL_MNIST_MLP,
  RLX_MODEL_MNIST_MLP_XL,
  RLX_MODEL_MNIST_CNN,
  RLX_N_MODELS
} RlxModelId;

typedef struct {
  const char *name;      /* "1.weight" */
  guint       rank;      /* number of dims used in shape[] */
  guint       shape[4];  /* PyTorch's shape: Linear (out, in); Conv2d (out, in, kh, kw) */
  gsize       offset;    /* first element in the flat vector */
  gsize       numel;
  guint       fan_in;    /* init bound is 1/sqrt(fan_in) */
} RlxTensorInfo;

typedef struct {
  RlxModelId           id;
  const char          *slug;      /* "mnist-mlp" */
  guint                n_tensors;
  const RlxTensorInfo *tensors;
  gsize                n_params;  /* flat length = gradient bucket length */
} RlxModel;

#define RLX_MODEL_ERROR (rlx_model_error_quark ())
GQuark rlx_model_error_quark (void);
typedef enum {
  RLX_MODEL_ERROR_UNKNOWN,      /* unknown slug */
  RLX_MODEL_ERROR_PARAMS,       /* wrong parameter vector */
} RlxModelError;

const RlxModel *rlx_model_get    (RlxModelId id);
/* NULL and an error listing the known slugs when @slug is unknown. */
const RlxModel *rlx_model_lookup (const char *slug, GError **error);
/* "mnist-mlp, mnist-mlp-xl, mnist-cnn" */
const char     *rlx_model_slugs  (void);

/* PyTorch's default distribution (uniform ±1/sqrt(fan_in) for weights and
 * biases) drawn from Philox keyed by @seed: bit-identical for equal seeds. */
void rlx_model_init_params (const RlxModel *model, guint64 seed, float *params);

/* 64-bit hash of a parameter vector's bits: equal hashes <=> (overwhelmingly)
 * bit-identical replicas. Every step, snapshot and checkpoint of a cohort
 * carries it, and rlx-rank train prints it, so one rank and a cohort can be
 * compared. Defined as a tree so it can be computed in parallel with the
 * same result for any thread count (core/rlx-kernels.h hashes on all cores):
 *
 *   h_k  = XXH64 (elements [k·C, (k+1)·C) as little-endian f32, seed k)
 *   hash = XXH64 (h_0 … h_{m-1} as little-endian u64, seed n)
 *
 * with C = RLX_PARAMS_HASH_CHUNK elements and m = ceil (n / C). C is small
 * (4 KB a chunk) so that a GPU hashes a small model with many short
 * sequential chains, not a few long ones: mnist-mlp's 101,770 parameters in
 * 100 chunks of 128 rounds a lane (on the H200 the hash of 16384-element
 * chunks, 2048 rounds a lane, was 180 µs of a one-rank cohort's 430 µs step).
 * Checkpoints say which C they were hashed with (metadata "hash_chunk"; none:
 * 16384, the size before), see rlx_params_hash_with_chunk. */
#define RLX_PARAMS_HASH_CHUNK ((gsize) 1024)
/* The chunk size of checkpoints that do not name theirs. */
#define RLX_PARAMS_HASH_CHUNK_V1 ((gsize) 16384)

guint64 rlx_params_hash          (const float *params, gsize n);
/* The same tree with chunks of @chunk elements (≥ 1): the hash a file
 * written with another RLX_PARAMS_HASH_CHUNK holds. */
guint64 rlx_params_hash_with_chunk (const float *params, gsize n, gsize chunk);
/* The pieces, for parallel hashing: chunk @index of the @n-element vector
 * (index < rlx_params_hash_n_chunks (n)), and the combination of all m chunk
 * hashes (in order) into the vector's hash. */
guint64 rlx_params_hash_chunk    (const float *params, gsize n, gsize index);
guint64 rlx_params_hash_combine  (const guint64 *chunk_hashes, gsize n);
gsize   rlx_params_hash_n_chunks (gsize n);
/* XXH64 of @len bytes with @seed (the reference algorithm). */
guint64 rlx_xxh64                (const void *data, gsize len, guint64 seed);

G_END_DECLS
