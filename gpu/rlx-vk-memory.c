/* rlx-vk-memory.c — the trainer's memory plan (rlx-vk-memory.h)
 *
 * Here, not in the trainer, so that rlx-vk.c's device check can size a
 * model without depending on the trainer's files (which depend on it).
 */
#include "rlx-config.h"
#include "rlx-vk-private.h"
#include "rlx-vk-memory.h"
#include "rlx-vk-tunables.h"

#include <string.h>

const char *const rlx_vkt_buf_names[N_BUFS] = {
  "inputs", "hidden 1", "hidden 2", "logits", "logit gradient", "losses",
  "hidden 1 gradient", "hidden 2 gradient",
  "conv1 output", "pool1 output", "conv1 im2col", "conv2 im2col/column gradient",
  "conv2 output", "pool2 output", "pool2 gradient", "conv2 gradient", "conv1 gradient",
  "split-K partials", "column-sum partials", "f16 operands",
};

/* Widths of the dense layers; 0-terminated. */
guint
rlx_vkt_dense_widths (const RlxModel *model, guint w[5])
{
  guint L = model->n_tensors / 2;

  w[0] = RLX_INPUT_LEN;
  for (guint l = 0; l < L; l++)
    w[l + 1] = model->tensors[2 * l].shape[0];
  return L;
}

/* Floats per buffer at batch @n; mnist-cnn on the direct path (@direct)
 * keeps only the pooled activations and a [n][160] partial of conv1's
 * gradient in B_DZ1. */
void
rlx_vkt_buffer_floats (const RlxModel *model, guint n, gboolean direct, guint64 sizes[N_BUFS])
{
  guint64 N = n;

  memset (sizes, 0, sizeof (guint64) * N_BUFS);
  sizes[B_X] = N * RLX_INPUT_LEN;
  sizes[B_LOGITS] = N * RLX_N_CLASSES;
  sizes[B_DLOGITS] = N * (RLX_N_CLASSES + 1);   /* + the per-sample losses */
  sizes[B_PART] = PART_FLOATS;
  sizes[B_RPART] = RPART_FLOATS;
  if (model->id == RLX_MODEL_MNIST_CNN)
    {
      sizes[B_P1] = N * 16 * 196;
      sizes[B_P2] = N * 1568 + N * 196;   /* + pool2's choices (cnn2.comp) */
      sizes[B_DP2] = N * 1568;
      sizes[B_DZ1] = direct ? N * 160 : N * 784 * 16;
      if (!direct)
        {
          sizes[B_A1] = N * 16 * 784;
          sizes[B_COL1] = N * 784 * 9;
          sizes[B_COL2] = N * 196 * 144;
          sizes[B_A2] = N * 196 * 32;
          sizes[B_DZ2] = N * 196 * 32;
        }
    }
  else
    {
      guint w[5];
      guint L = rlx_vkt_dense_widths (model, w);
      for (guint l = 1; l < L; l++)
        {
          sizes[B_H1 + l - 1] = N * w[l];
          sizes[B_DH1 + l - 1] = N * w[l];
        }
    }
}

void
rlx_vk_plan_memory (const RlxModel *model, guint max_batch, RlxVkMemoryPlan *plan)
{
  guint64 sizes[N_BUFS];
  guint64 images = (guint64) RLX_VK_TRAIN_IMAGES * RLX_INPUT_LEN;

  rlx_vkt_buffer_floats (model, max_batch, rlx_vk_tunable_cnn_direct (FALSE), sizes);
  plan->largest = images;
  plan->largest_name = "training images";
  plan->total = images + RLX_VK_TRAIN_IMAGES + 2 * 4 * (model->n_params + 1) + 4ull * max_batch;
  for (guint i = 0; i < N_BUFS; i++)
    {
      plan->total += 4 * sizes[i];
      if (4 * sizes[i] > plan->largest)
        {
          plan->largest = 4 * sizes[i];
          plan->largest_name = rlx_vkt_buf_names[i];
        }
    }
}
