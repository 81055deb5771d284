/* rlx-vk-record-step.c — a training step recorded: upload, the model's
 * forward, loss and backward (dense layers, the CNN on GEMMs or on its
 * fused direct convolutions), download; one recording per batch size,
 * kept and replayed
 *
 * Threads: the trainer's (rlx-vk-trainer-private.h).
 */
#include "rlx-config.h"
#include "rlx-vk-trainer-private.h"

#include <math.h>
#include <string.h>

#define SPLIT_MIN_BYTES (4u << 20)   /* parameters large enough to split a step's submission */

static void
rec_gather (Rec *r, guint n)
{
  struct { guint32 n, x_off; } pc = { n, 0 };
  rlx_vkt_rec_dispatch (r, SH_GATHER, NULL, 0, &r->t->images, &r->t->indices, &r->t->bufs[B_X],
                        NULL, &pc, sizeof pc, groups_for ((guint64) n * 196, 256), 1, 1);
}

static void
rec_softmax (Rec *r, guint n)
{
  RlxVkTrainer *t = r->t;
  struct { guint32 n, logits_off, dl_off, loss_off; float inv_n; } pc = {
    n, 0, 0, 0, 1.0f / n
  };

  /* one output binding: the per-sample losses follow the n×10 logit
   * gradients in B_DLOGITS (sized for them) */
  pc.loss_off = n * RLX_N_CLASSES;
  rlx_vkt_rec_dispatch (r, SH_SOFTMAX, NULL, 0, &t->bufs[B_LOGITS], &t->labels, &t->indices,
                        &t->bufs[B_DLOGITS], &pc, sizeof pc, (n + 63) / 64, 1, 1);
  rlx_vkt_rec_colsum (r, &t->bufs[B_DLOGITS], n * RLX_N_CLASSES, n, 1, 1, &t->grads,
                      (guint) t->model->n_params, 1.0f / n, 0);
}

/* Ends the step's first command buffer and continues in a second, which
 * the host submits after it has written the rest of the parameters (see
 * rlx_vk_trainer_grads): what was recorded so far reads only the first
 * @head_bytes of them. A dispatch in the second that depends on the first
 * gets its barrier as usual (barriers order against earlier submissions on
 * the queue). */
static void
rec_split (Rec *r, gsize head_bytes)
{
  RlxVkTrainer *t = r->t;
  VkCommandBufferAllocateInfo cai = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
    .commandPool = t->cmdpool,
    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
    .commandBufferCount = 1,
  };
  VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO };
  VkResult res;

  if (r->failed)
    return;
  res = t->vk.EndCommandBuffer (r->cb);
  if (res == VK_SUCCESS)
    res = t->vk.AllocateCommandBuffers (t->dev, &cai, &r->step->cb[1]);
  if (res != VK_SUCCESS)
    {
      rlx_vk_set_error (r->error, res, "recording the step");
      r->failed = TRUE;
      return;
    }
  r->step->n_cb = 2;
  r->step->head_bytes = head_bytes;
  res = t->vk.BeginCommandBuffer (r->step->cb[1], &bi);
  if (res != VK_SUCCESS)
    {
      rlx_vk_set_error (r->error, res, "recording the step");
      r->failed = TRUE;
      return;
    }
  r->cb = r->step->cb[1];
}

/* --compute f16: how many times the tensor-core GEMM M×N×K re-reads its A
 * (@a) or its B: once per tile across the other dimension; 0 when it is
 * not on the tensor cores */
static guint
cm_rereads (RlxVkTrainer *t, guint M, guint N, guint K, gboolean a)
{
  const GemmCfg *c = &rlx_vkt_cfg_cm[t->tun.cm_tile];

  if (!rlx_vk_gemm_is_f16 (M, N, K))
    return 0;
  return a ? (N + c->bn - 1) / c->bn : (M + c->bm - 1) / c->bm;
}

/* --compute f16: @count floats that its GEMMs re-read @rereads times in
 * all, rounded to f16 once (rlx_vkt_rec_to_f16) where rlx_vk_f16_copy_pays
 * says: mnist-mlp-xl's operands at 1024 to 8192, none of mnist-mlp's (784
 * → 128 → 10) at 1024, where copies measured slower (5.49 M against
 * 5.71 M samples/s, H200, BENCHMARKS.md). */
static void
dense_to_f16 (Rec *r, Buf *src, guint off, guint count, guint rereads, float scale)
{
  if (rlx_vk_f16_copy_pays (count, rereads))
    rlx_vkt_rec_to_f16 (r, src, off, count, scale);
}

static void
record_dense (Rec *r, guint n)
{
  RlxVkTrainer *t = r->t;
  const RlxModel *m = t->model;
  guint w[5];
  guint L = rlx_vkt_dense_widths (m, w);
  Buf *act[5], *dact[5];

  act[0] = &t->bufs[B_X];
  for (guint l = 1; l < L; l++)
    {
      act[l] = &t->bufs[B_H1 + l - 1];
      dact[l] = &t->bufs[B_DH1 + l - 1];
    }
  act[L] = &t->bufs[B_LOGITS];
  dact[L] = &t->bufs[B_DLOGITS];

  rec_gather (r, n);
  for (guint l = 1; l <= L; l++)
    {
      const RlxTensorInfo *wt = &m->tensors[2 * (l - 1)], *bt = &m->tensors[2 * (l - 1) + 1];
      /* --compute f16: this layer's input and weights rounded to f16 once,
       * for its forward GEMM and the backward's two (no-op otherwise) */
      /* (the input: A here, B of dW_l; the weights: B here and of dX) */
      dense_to_f16 (r, act[l - 1], 0, n * w[l - 1],
                    cm_rereads (t, n, w[l], w[l - 1], TRUE) + cm_rereads (t, w[l], w[l - 1], n, FALSE),
                    1.0f);
      dense_to_f16 (r, r->params, (guint) wt->offset, w[l] * w[l - 1],
                    cm_rereads (t, n, w[l], w[l - 1], FALSE) +
                    (l > 1 ? cm_rereads (t, n, w[l - 1], w[l], FALSE) : 0),
                    1.0f);
      rlx_vkt_rec_gemm (r, TRUE, TRUE, n, w[l], w[l - 1],
                        act[l - 1], w[l - 1], 0, r->params, w[l - 1], (guint) wt->offset,
                        act[l], w[l], 0, r->params, (guint) bt->offset, 0,
                        EPI_BIAS_COL | (l < L ? EPI_RELU : 0));
      /* with the parameters written by the host, large models submit the
       * first layer's forward before the host writes the other layers */
      if (l == 1 && L > 1 && t->tun.split_submit && t->upload == UPLOAD_BAR && r->params == &t->params &&
          m->n_params * sizeof (float) >= SPLIT_MIN_BYTES)
        rec_split (r, (bt->offset + bt->numel) * sizeof (float));
    }
  rec_softmax (r, n);
  /* --compute f16: the backward GEMMs' A is a gradient, at most 1/n in
   * magnitude (the softmax's, and what it makes of it): scaled by
   * 64·2^⌈log2 n⌉ before it is rounded to f16 — a power of two, undone
   * exactly by the epilogue — it stays clear of f16's subnormals, far
   * from its overflow (loss scaling; f32 GEMMs ignore it) */
  t->f16_scale = rlx_vk_f16_grad_scale (n);
  for (guint l = L; l >= 1; l--)
    {
      const RlxTensorInfo *wt = &m->tensors[2 * (l - 1)], *bt = &m->tensors[2 * (l - 1) + 1];
      /* --compute f16: the gradient rounded to f16 (scaled) once, for
       * the two GEMMs that read it */
      dense_to_f16 (r, dact[l], 0, n * w[l],
                    cm_rereads (t, w[l], w[l - 1], n, TRUE) +
                    (l > 1 ? cm_rereads (t, n, w[l - 1], w[l], TRUE) : 0),
                    t->f16_scale);
      /* dW_l = g^T · in */
      rlx_vkt_rec_gemm (r, FALSE, FALSE, w[l], w[l - 1], n,
                        dact[l], w[l], 0, act[l - 1], w[l - 1], 0,
                        &t->grads, w[l - 1], (guint) wt->offset, NULL, 0, 0, 0);
      rlx_vkt_rec_colsum (r, dact[l], 0, n, w[l], w[l], &t->grads, (guint) bt->offset, 1.0f, 0);
      if (l > 1)
        rlx_vkt_rec_gemm (r, TRUE, FALSE, n, w[l - 1], w[l],
                          dact[l], w[l], 0, r->params, w[l - 1], (guint) wt->offset,
                          dact[l - 1], w[l - 1], 0, act[l - 1], 0, w[l - 1], EPI_MASK);
    }
  t->f16_scale = 0;
}

static void
rec_maxpool (Rec *r, Buf *in, Buf *out, guint n, guint C, guint H, gboolean nhwc)
{
  struct { guint32 n, C, H, W, in_nhwc, in_off, out_off; } pc = { n, C, H, H, nhwc, 0, 0 };
  rlx_vkt_rec_dispatch (r, SH_MAXPOOL, NULL, 0, in, out, NULL, NULL, &pc, sizeof pc,
                        groups_for ((guint64) n * C * (H / 2) * (H / 2), 256), 1, 1);
}

static void
rec_im2col (Rec *r, Buf *src, Buf *col, guint n, guint C, guint H)
{
  struct { guint32 n, C, H, W, src_off, col_off; } pc = { n, C, H, H, 0, 0 };
  rlx_vkt_rec_dispatch (r, SH_IM2COL, NULL, 0, src, col, NULL, NULL, &pc, sizeof pc,
                        groups_for ((guint64) n * H * H * C * 9, 256), 1, 1);
}

static void
rec_poolgrad (Rec *r, guint mode, Buf *act, gboolean nhwc, Buf *dp, Buf *out,
              guint n, guint C, guint H)
{
  struct { guint32 n, C, H, W, a_nhwc, a_off, dp_off, out_off; } pc = { n, C, H, H, nhwc, 0, 0, 0 };
  guint32 spec[1] = { mode };
  /* MODE 3: one thread per pooled value, four outputs each */
  guint64 items = (guint64) n * H * H * C / (mode == 3 ? 4 : 1);
  rlx_vkt_rec_dispatch (r, SH_POOLGRAD, spec, 1, act, dp, out, NULL, &pc, sizeof pc,
                        groups_for (items, 256), 1, 1);
}

/* mnist-cnn's dense layer on pool2's output (B_P2): logits, softmax and
 * loss, its weight and bias gradient, and pool2's gradient into B_DP2. */
static void
rec_cnn_dense (Rec *r, guint n)
{
  RlxVkTrainer *t = r->t;
  guint w3 = (guint) t->model->tensors[4].offset, b3 = (guint) t->model->tensors[5].offset;
  Buf *P2 = &t->bufs[B_P2], *LOG = &t->bufs[B_LOGITS], *DL = &t->bufs[B_DLOGITS];
  Buf *DP2 = &t->bufs[B_DP2], *PR = r->params, *G = &t->grads;

  rlx_vkt_rec_gemm (r, TRUE, TRUE, n, 10, 1568, P2, 1568, 0, PR, 1568, w3,
                    LOG, 10, 0, PR, b3, 0, EPI_BIAS_COL);
  rec_softmax (r, n);

  rlx_vkt_rec_gemm (r, FALSE, FALSE, 10, 1568, n, DL, 10, 0, P2, 1568, 0,
                    G, 1568, w3, NULL, 0, 0, 0);
  rlx_vkt_rec_colsum (r, DL, 0, n, 10, 10, G, b3, 1.0f, 0);
  rlx_vkt_rec_gemm (r, TRUE, FALSE, n, 1568, 10, DL, 10, 0, PR, 1568, w3,
                    DP2, 1568, 0, NULL, 0, 0, 0);
}

static void
record_cnn_gemm (Rec *r, guint n)
{
  RlxVkTrainer *t = r->t;
  const RlxModel *m = t->model;
  guint w1 = (guint) m->tensors[0].offset, b1 = (guint) m->tensors[1].offset;
  guint w2 = (guint) m->tensors[2].offset, b2 = (guint) m->tensors[3].offset;
  Buf *X = &t->bufs[B_X], *A1 = &t->bufs[B_A1], *P1 = &t->bufs[B_P1];
  Buf *COL1 = &t->bufs[B_COL1], *COL2 = &t->bufs[B_COL2], *A2 = &t->bufs[B_A2];
  Buf *P2 = &t->bufs[B_P2], *DP2 = &t->bufs[B_DP2], *DZ2 = &t->bufs[B_DZ2];
  Buf *DZ1 = &t->bufs[B_DZ1];
  Buf *PR = r->params, *G = &t->grads;
  struct { guint32 n, w_off, b_off, x_off, out_off; } c1 = { n, w1, b1, 0, 0 };
  guint rows2 = n * 196, rows1 = n * 784;

  rec_gather (r, n);
  rlx_vkt_rec_dispatch (r, SH_CONV1, NULL, 0, X, PR, A1, NULL, &c1, sizeof c1,
                        groups_for ((guint64) n * 784, 256), 1, 1);
  rec_maxpool (r, A1, P1, n, 16, 28, FALSE);
  if (t->tun.cnn_implicit & CNN_IMPLICIT_FORWARD)
    {
      /* conv2 reads pool1 through im2col addressing in its tile loads */
      t->force_cfg = t->tun.fwd2.bm != 0 ? &t->tun.fwd2 : NULL;
      rlx_vkt_rec_gemm_ex (r, OP_IM2COL, OP_KC, 16, 14, rows2, 32, 144, P1, 0, 0, PR, 144, w2,
                           A2, 32, 0, PR, b2, 0, EPI_BIAS_COL | EPI_RELU);
      t->force_cfg = NULL;
    }
  else
    {
      rec_im2col (r, P1, COL2, n, 16, 14);
      rlx_vkt_rec_gemm (r, TRUE, TRUE, rows2, 32, 144, COL2, 144, 0, PR, 144, w2,
                        A2, 32, 0, PR, b2, 0, EPI_BIAS_COL | EPI_RELU);
    }
  rec_maxpool (r, A2, P2, n, 32, 14, TRUE);
  rec_cnn_dense (r, n);
  /* pool2 + relu2, conv2 */
  rec_poolgrad (r, 0, A2, TRUE, DP2, DZ2, n, 32, 14);
  if (t->tun.cnn_implicit & CNN_IMPLICIT_FORWARD)
    {
      t->force_cfg = t->tun.wgrad2.bm != 0 ? &t->tun.wgrad2 : NULL;
      rlx_vkt_rec_gemm_ex (r, OP_KN, OP_IM2COL, 16, 14, 32, 144, rows2, DZ2, 32, 0, P1, 0, 0,
                           G, 144, w2, NULL, 0, 0, 0);
      t->force_cfg = NULL;
    }
  else
    rlx_vkt_rec_gemm (r, FALSE, FALSE, 32, 144, rows2, DZ2, 32, 0, COL2, 144, 0, G, 144, w2, NULL,
                      0, 0, 0);
  rlx_vkt_rec_colsum (r, DZ2, 0, rows2, 32, 32, G, b2, 1.0f, 0);
  if (t->tun.cnn_implicit & CNN_IMPLICIT_DATA)
    {
      /* pool1's gradient (NHWC, 16 channels, in conv2's column buffer)
       * straight from conv2's output gradient and weights: no column gradient */
      rlx_vkt_rec_gemm_ex (r, OP_CONV_DATA, OP_CONV_DATA, 32, 14, rows2, 16, 288, DZ2, 0, 0, PR,
                           144, w2, COL2, 16, 0, NULL, 0, 0, 0);
      rec_poolgrad (r, 2, A1, FALSE, COL2, DZ1, n, 16, 28);
    }
  else
    {
      /* the column gradient overwrites conv2's im2col, no longer needed */
      t->force_cfg = t->tun.dcol.bm != 0 ? &t->tun.dcol : NULL;
      rlx_vkt_rec_gemm (r, TRUE, FALSE, rows2, 144, 32, DZ2, 32, 0, PR, 144, w2, COL2, 144, 0, NULL, 0, 0, 0);
      t->force_cfg = NULL;
      /* col2im + pool1 + relu1 (per pooled value, or per pixel) */
      rec_poolgrad (r, t->tun.cnn_pooled ? 3 : 1, A1, FALSE, COL2, DZ1, n, 16, 28);
    }
  /* conv1 */
  rec_im2col (r, X, COL1, n, 1, 28);
  rlx_vkt_rec_gemm (r, FALSE, FALSE, 16, 9, rows1, DZ1, 16, 0, COL1, 9, 0, G, 9, w1, NULL, 0, 0, 0);
  rlx_vkt_rec_colsum (r, DZ1, 0, rows1, 16, 16, G, b1, 1.0f, 0);
}

/* mnist-cnn with fused direct convolutions (RLX_VK_CNN=direct, the
 * default): conv1+pool1 and conv2+pool2 write only the pooled outputs (and
 * pool2's choices); the backward pass never expands a gradient to a full
 * conv output: conv2's weight gradient reads the 49 chosen pixels per
 * channel (cnn2w), and pool1's gradient, pool1/ReLU1 backward and conv1's
 * weight gradient are one pass per sample (cnn1w). */
static void
record_cnn_direct (Rec *r, guint n)
{
  RlxVkTrainer *t = r->t;
  const RlxModel *m = t->model;
  guint w1 = (guint) m->tensors[0].offset, b1 = (guint) m->tensors[1].offset;
  guint w2 = (guint) m->tensors[2].offset, b2 = (guint) m->tensors[3].offset;
  Buf *X = &t->bufs[B_X], *P1 = &t->bufs[B_P1], *P2 = &t->bufs[B_P2];
  Buf *DP2 = &t->bufs[B_DP2], *PR = r->params, *G = &t->grads;
  Buf *W2P = &t->bufs[B_PART], *W1P = &t->bufs[B_DZ1];
  guint groups = MIN (n, 65535u);
  guint code_off = n * 1568;
  /* conv2's weight gradient: about cnn_w2_groups workgroups of a few
   * samples each (8 at batch 1024) */
  guint per_wg = (n + t->tun.cnn_w2_groups - 1) / t->tun.cnn_w2_groups;
  guint wgs2 = (n + per_wg - 1) / per_wg;
  struct { guint32 n, w_off, b_off, x_off, out_off; } k1 = { n, w1, b1, 0, 0 };
  struct { guint32 n, w_off, b_off, p1_off, out_off, code_off; } k2 = { n, w2, b2, 0, 0, code_off };
  struct { guint32 n, per_wg, p1_off, dp_off, code_off, out_off; } k3 = {
    n, per_wg, 0, 0, code_off, 0
  };
  struct { guint32 n, w1_off, w2_off, x_off, dp_off, code_off, out_off; } k4 = {
    n, w1, w2, 0, 0, code_off, 0
  };

  /* the shaders write w and b of a layer as one run */
  g_assert (b1 == w1 + 144 && b2 == w2 + 4608);
  g_assert ((guint64) wgs2 * 4640 <= PART_FLOATS);

  rec_gather (r, n);
  rlx_vkt_rec_dispatch (r, SH_CNN1, NULL, 0, X, PR, P1, NULL, &k1, sizeof k1, groups, 1, 1);
  rlx_vkt_rec_dispatch (r, SH_CNN2, &t->tun.cnn2_cic, 1, P1, PR, P2, NULL, &k2, sizeof k2, groups,
                        1, 1);
  rec_cnn_dense (r, n);

  /* conv2's and conv1's gradients, independent of each other */
  rlx_vkt_rec_dispatch (r, SH_CNN2W, NULL, 0, P1, DP2, P2, W2P, &k3, sizeof k3, wgs2, 1, 1);
  {
    Buf *bs[N_BINDINGS] = { X, PR, DP2, P2, W1P, NULL };
    rlx_vkt_rec_dispatch_v (r, SH_CNN1W, &t->tun.cnn1w_scatter, 1, bs, &k4, sizeof k4,
                            groups, 1, 1);
  }
  rlx_vkt_rec_colsum (r, W2P, 0, wgs2, 4640, 4640, G, w2, 1.0f, 0);
  rlx_vkt_rec_colsum (r, W1P, 0, n, 160, 160, G, w1, 1.0f, 1u << 20);
}

static void
record_cnn (Rec *r, guint n)
{
  if (r->t->tun.cnn_direct)
    record_cnn_direct (r, n);
  else
    record_cnn_gemm (r, n);
}

void
rlx_vkt_step_free (gpointer data)
{
  Step *s = data;

  g_clear_pointer (&s->labels, g_ptr_array_unref);
  g_free (s->prof_us);
  g_free (s);
}

void
rlx_vkt_print_profile (RlxVkTrainer *self, Step *s)
{
  double total = 0;

  if (s->prof_steps == 0)
    return;
  for (guint i = 0; i < s->labels->len; i++)
    total += s->prof_us[i];
  g_printerr ("rlx-vk profile: %s batch %u on %s, mean of %u steps, %.1f us in dispatches\n",
              self->model->slug, s->n, self->info->name, s->prof_steps, total / s->prof_steps);
  for (guint i = 0; i < s->labels->len; i++)
    g_printerr ("  %8.1f us  %s\n", s->prof_us[i] / s->prof_steps,
                (char *) g_ptr_array_index (s->labels, i));
}

/* The step at batch @n; @resident: on the replica (the parameters stay
 * on the device, no parameter upload, the gradient is left for the wire
 * pass), else on the parameters the host writes, with the gradient copied
 * out. */
static Step *
record_step (RlxVkTrainer *self, guint n, gboolean resident, guint slot, GError **error)
{
  gsize pbytes = self->model->n_params * sizeof (float);
  VkBufferCopy up_params = { 0, 0, pbytes };
  VkBufferCopy up_idx = { pbytes + (gsize) slot * self->max_batch * sizeof (guint32), 0,
                          n * sizeof (guint32) };
  VkBufferCopy down = { 0, 0, pbytes + sizeof (float) };
  VkMemoryBarrier to_compute = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_SHADER_READ_BIT,
  };
  VkMemoryBarrier to_transfer = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT,
  };
  VkMemoryBarrier to_host = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_HOST_READ_BIT,
  };
  Step *step = g_new0 (Step, 1);
  Recorded first;
  Rec rec;
  VkResult res;

  step->n = n;
  step->labels = g_ptr_array_new_with_free_func (g_free);
  if (!rlx_vkt_rec_begin (self, &rec, &first, 96, error))
    {
      rlx_vkt_recorded_clear (self, &first);
      rlx_vkt_step_free (step);
      return NULL;
    }
  step->pool = first.pool;
  step->cb[0] = first.cb;
  step->n_cb = 1;
  rec.step = step;
  rec.params = resident ? &self->replica : &self->params;

  if (self->queries != VK_NULL_HANDLE)
    {
      self->vk.CmdResetQueryPool (step->cb[0], self->queries, 0, 4);
      self->vk.CmdWriteTimestamp (step->cb[0], VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, self->queries, 0);
    }
  if (self->upload != UPLOAD_BAR && !resident)
    self->vk.CmdCopyBuffer (step->cb[0], self->staging_in.buf, self->params.buf, 1, &up_params);
  self->vk.CmdCopyBuffer (step->cb[0], self->staging_in.buf, self->indices.buf, 1, &up_idx);
  self->vk.CmdPipelineBarrier (step->cb[0], VK_PIPELINE_STAGE_TRANSFER_BIT,
                        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &to_compute, 0, NULL, 0, NULL);
  if (self->queries != VK_NULL_HANDLE)
    self->vk.CmdWriteTimestamp (step->cb[0], VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self->queries, 1);

  if (self->prof != VK_NULL_HANDLE)
    {
      self->vk.CmdResetQueryPool (step->cb[0], self->prof, 0, PROF_MAX);
      self->vk.CmdWriteTimestamp (step->cb[0], VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self->prof, 0);
    }
  if (self->model->id == RLX_MODEL_MNIST_CNN)
    record_cnn (&rec, n);
  else
    record_dense (&rec, n);

  if (self->queries != VK_NULL_HANDLE)
    self->vk.CmdWriteTimestamp (rec.cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self->queries, 2);
  /* resident: the wire pass, submitted right after, reads the gradient and
   * writes timestamp 3 */
  if (!resident)
    {
      self->vk.CmdPipelineBarrier (rec.cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                   VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &to_transfer, 0, NULL, 0, NULL);
      self->vk.CmdCopyBuffer (rec.cb, self->grads.buf, self->staging_out.buf, 1, &down);
      self->vk.CmdPipelineBarrier (rec.cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                                   VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host, 0, NULL, 0, NULL);
      if (self->queries != VK_NULL_HANDLE)
        self->vk.CmdWriteTimestamp (rec.cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self->queries, 3);
    }

  res = self->vk.EndCommandBuffer (rec.cb);
  if (!rec.failed && res != VK_SUCCESS)
    {
      rlx_vk_set_error (error, res, "recording the step");
      rec.failed = TRUE;
    }
  if (rec.failed)
    {
      self->vk.FreeCommandBuffers (self->dev, self->cmdpool, step->n_cb, step->cb);
      self->vk.DestroyDescriptorPool (self->dev, step->pool, NULL);
      rlx_vkt_step_free (step);
      return NULL;
    }
  step->prof_us = g_new0 (double, step->labels->len + 1);
  return step;
}

/* The recorded step at batch @n (see record_step), recorded on first use. */
Step *
rlx_vkt_get_step_slot (RlxVkTrainer *self, guint n, gboolean resident, guint slot, GError **error)
{
  gpointer key = GUINT_TO_POINTER (n | (resident ? 1u << 31 : 0) | (slot ? 1u << 30 : 0));
  Step *step = g_hash_table_lookup (self->steps, key);

  if (step != NULL)
    return step;
  /* a rank uses a few batch sizes; keep the recordings bounded */
  if (g_hash_table_size (self->steps) >= 16)
    {
      GHashTableIter it;
      gpointer v;
      g_hash_table_iter_init (&it, self->steps);
      while (g_hash_table_iter_next (&it, NULL, &v))
        {
          Step *s = v;
          self->vk.FreeCommandBuffers (self->dev, self->cmdpool, s->n_cb, s->cb);
          self->vk.DestroyDescriptorPool (self->dev, s->pool, NULL);
          g_hash_table_iter_remove (&it);
        }
    }
  step = record_step (self, n, resident, slot, error);
  if (step != NULL)
    g_hash_table_insert (self->steps, key, step);
  return step;
}
