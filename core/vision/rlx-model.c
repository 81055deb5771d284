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

guint64
rlx_params_hash (const float *params, gsize n)
{
  guint64 h = G_GUINT64_CONSTANT (0xcbf29ce484222325);

  g_return_val_if_fail (params != NULL || n == 0, 0);

  for (gsize i = 0; i < n; i++)
    {
      guint32 bits;

      memcpy (&bits, &params[i], 4);
      for (int b = 0; b < 4; b++)
        {
          h ^= (bits >> (8 * b)) & 0xff;
          h *= G_GUINT64_CONSTANT (0x100000001b3);
        }
    }
  return h;
}
