/* test-philox.c — Philox4x32-10 against Random123's known-answer vectors,
 * and the seeded things built on it (init, permutation, synthetic data). */
#include "rlx-config.h"
#include "core/vision/rlx-philox.h"
#include "core/vision/rlx-model.h"
#include "core/vision/rlx-dataset.h"

#include <math.h>
#include <string.h>

static void
test_known_answers (void)
{
  /* Random123 kat_vectors, philox4x32 10 rounds. */
  static const struct {
    guint32 ctr[4], key[2], out[4];
  } kat[] = {
    { { 0, 0, 0, 0 }, { 0, 0 },
      { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 } },
    { { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff }, { 0xffffffff, 0xffffffff },
      { 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd } },
    { { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344 }, { 0xa4093822, 0x299f31d0 },
      { 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 } },
  };

  for (guint i = 0; i < G_N_ELEMENTS (kat); i++)
    {
      guint32 out[4];

      rlx_philox4x32_10 (kat[i].ctr, kat[i].key, out);
      for (guint k = 0; k < 4; k++)
        g_assert_cmphex (out[k], ==, kat[i].out[k]);
    }
}

static void
test_uniform (void)
{
  g_assert_cmpfloat (rlx_philox_uniform (0), ==, 0.0f);
  g_assert_cmpfloat (rlx_philox_uniform (0xffffffffu), <, 1.0f);
  g_assert_cmpfloat (rlx_philox_uniform (0x80000000u), ==, 0.5f);
}

static void
test_init (void)
{
  for (guint id = 0; id < RLX_N_MODELS; id++)
    {
      const RlxModel *m = rlx_model_get (id);
      g_autofree float *a = g_new (float, m->n_params);
      g_autofree float *b = g_new (float, m->n_params);
      g_autofree float *c = g_new (float, m->n_params);

      rlx_model_init_params (m, 42, a);
      rlx_model_init_params (m, 42, b);
      rlx_model_init_params (m, 43, c);
      g_assert_cmpmem (a, m->n_params * 4, b, m->n_params * 4);
      g_assert_cmpuint (rlx_params_hash (a, m->n_params), ==, rlx_params_hash (b, m->n_params));
      g_assert_cmpuint (rlx_params_hash (a, m->n_params), !=, rlx_params_hash (c, m->n_params));

      /* PyTorch's default: uniform in ±1/sqrt(fan_in), mean ~0, and the
       * range actually used (variance of U(-b, b) is b²/3). */
      for (guint t = 0; t < m->n_tensors; t++)
        {
          const RlxTensorInfo *ti = &m->tensors[t];
          double bound = 1.0 / sqrt (ti->fan_in), sum = 0, sq = 0;

          for (gsize e = 0; e < ti->numel; e++)
            {
              double v = a[ti->offset + e];
              g_assert_cmpfloat (fabs (v), <=, bound);
              sum += v;
              sq += v * v;
            }
          if (ti->numel >= 1000)
            {
              g_assert_cmpfloat (fabs (sum / ti->numel), <, 0.05 * bound);
              g_assert_cmpfloat (fabs (sq / ti->numel / (bound * bound / 3) - 1), <, 0.1);
            }
        }
    }
}

static void
test_permutation (void)
{
  const guint n = 1000;
  g_autofree guint32 *p0 = g_new (guint32, n);
  g_autofree guint32 *p0b = g_new (guint32, n);
  g_autofree guint32 *p1 = g_new (guint32, n);
  g_autofree guint8 *seen = g_new0 (guint8, n);
  guint fixed = 0;

  rlx_dataset_permutation (n, 5, 0, p0);
  rlx_dataset_permutation (n, 5, 0, p0b);
  rlx_dataset_permutation (n, 5, 1, p1);
  g_assert_cmpmem (p0, n * 4, p0b, n * 4);
  g_assert_true (memcmp (p0, p1, n * 4) != 0);
  for (guint i = 0; i < n; i++)
    {
      g_assert_cmpuint (p0[i], <, n);
      g_assert_false (seen[p0[i]]);
      seen[p0[i]] = 1;
      fixed += p0[i] == i;
    }
  /* A shuffle, not the identity: expected fixed points ~1. */
  g_assert_cmpuint (fixed, <, 10);
}

static void
test_synthetic (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxDataset) a = rlx_dataset_open ("synthetic", 7, &error);
  g_autoptr(RlxDataset) b = NULL;
  g_autoptr(RlxDataset) c = NULL;
  guint counts[RLX_N_CLASSES] = { 0 };

  g_assert_no_error (error);
  b = rlx_dataset_open ("synthetic", 7, &error);
  g_assert_no_error (error);
  c = rlx_dataset_open ("synthetic", 8, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (rlx_dataset_size (a, RLX_SPLIT_TRAIN), ==, 60000);
  g_assert_cmpuint (rlx_dataset_size (a, RLX_SPLIT_TEST), ==, 10000);
  g_assert_cmpstr (rlx_dataset_slug (a), ==, "synthetic");
  g_assert_cmpmem (rlx_dataset_images (a, RLX_SPLIT_TRAIN), 60000 * 784,
                   rlx_dataset_images (b, RLX_SPLIT_TRAIN), 60000 * 784);
  g_assert_true (memcmp (rlx_dataset_images (a, RLX_SPLIT_TRAIN),
                         rlx_dataset_images (c, RLX_SPLIT_TRAIN), 784) != 0);
  for (guint i = 0; i < 60000; i++)
    counts[rlx_dataset_labels (a, RLX_SPLIT_TRAIN)[i]]++;
  for (guint k = 0; k < RLX_N_CLASSES; k++)
    g_assert_cmpuint (counts[k], >, 5000);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/vision/philox/known-answers", test_known_answers);
  g_test_add_func ("/vision/philox/uniform", test_uniform);
  g_test_add_func ("/vision/model/init", test_init);
  g_test_add_func ("/vision/dataset/permutation", test_permutation);
  g_test_add_func ("/vision/dataset/synthetic", test_synthetic);
  return g_test_run ();
}
