/* rlx-cpu.c — CPU forward/backward, SGD and evaluation
 *
 * Dense layers are one cblas_sgemm each over the whole batch. The CNN runs
 * in chunks of CNN_CHUNK samples so that a chunk's im2col matrices stay in
 * cache; both convolutions are im2col + cblas_sgemm with the chunk's samples
 * side by side in the GEMM's N dimension. Between forward and backward the
 * CNN keeps only the pooled activations and the pool's argmax; the im2col
 * matrices are rebuilt from them in backward (cheap copies).
 *
 * Layouts: dense activations are [n][features]. CNN conv outputs are
 * channel-major across the chunk, [channel][sample][y][x], which is what
 * W × cols produces; the second pool writes [sample][channel][7][7], the
 * order PyTorch's Flatten gives the dense layer.
 */
#include "rlx-config.h"
#include "rlx-cpu.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#define CNN_CHUNK 8

#define C1     16                  /* conv1 channels */
#define C2     32                  /* conv2 channels */
#define S1     28                  /* conv1 output side */
#define S2     14                  /* conv2 output side (pool1 output) */
#define S3     7                   /* pool2 output side */
#define P1     (S1 * S1)           /* 784 */
#define P2     (S2 * S2)           /* 196 */
#define P3     (S3 * S3)           /* 49 */
#define K2     (C1 * 9)            /* conv2 im2col rows: 144 */
#define FLAT   (C2 * P3)           /* 1568 */

struct _RlxCpuTrainer {
  const RlxModel *model;
  guint           max_batch;

  /* dense (MLP): hidden widths and per-layer activations [n][width] */
  guint           n_layers;
  guint           width[4];        /* width[0] = 784 input, width[L] = 10 */
  float          *act[4];          /* act[l], l = 1..L-1: post-ReLU hidden */
  float          *dact;            /* [n][max hidden] scratch, two halves */
  float          *dact2;

  float          *logits;          /* [n][10] */
  float          *dlogits;

  /* cnn */
  float          *cols1;           /* [9][CHUNK*784] */
  float          *conv1;           /* [16][CHUNK*784] */
  float          *pool1;           /* [n][16][196] (stored sample-major) */
  guint8         *arg1;            /* [n][16][196] argmax 0..3 */
  float          *cols2;           /* [144][CHUNK*196] */
  float          *conv2;           /* [32][CHUNK*196] */
  float          *pool2;           /* [n][1568] */
  guint8         *arg2;            /* [n][1568] */
  float          *dpool2;          /* [n][1568] */
  float          *dconv2;          /* [32][CHUNK*196] */
  float          *dcols2;          /* [144][CHUNK*196] */
  float          *dpool1;          /* [16][CHUNK*196] */
  float          *dconv1;          /* [16][CHUNK*784] */
};

static float *
alloc_floats (gsize n)
{
  return g_malloc0 (MAX (n, 1) * sizeof (float));
}

RlxCpuTrainer *
rlx_cpu_trainer_new (const RlxModel *model, guint max_batch)
{
  RlxCpuTrainer *self;
  gsize n;

  g_return_val_if_fail (model != NULL, NULL);
  g_return_val_if_fail (max_batch > 0, NULL);

  self = g_new0 (RlxCpuTrainer, 1);
  self->model = model;
  self->max_batch = max_batch;
  n = max_batch;
  self->logits = alloc_floats (n * RLX_N_CLASSES);
  self->dlogits = alloc_floats (n * RLX_N_CLASSES);

  if (model->id == RLX_MODEL_MNIST_CNN)
    {
      gsize c = MIN (n, CNN_CHUNK);

      self->cols1 = alloc_floats (9 * c * P1);
      self->conv1 = alloc_floats (C1 * c * P1);
      self->pool1 = alloc_floats (n * C1 * P2);
      self->arg1 = g_malloc0 (n * C1 * P2);
      self->cols2 = alloc_floats (K2 * c * P2);
      self->conv2 = alloc_floats (C2 * c * P2);
      self->pool2 = alloc_floats (n * FLAT);
      self->arg2 = g_malloc0 (n * FLAT);
      self->dpool2 = alloc_floats (n * FLAT);
      self->dconv2 = alloc_floats (C2 * c * P2);
      self->dcols2 = alloc_floats (K2 * c * P2);
      self->dpool1 = alloc_floats (C1 * c * P2);
      self->dconv1 = alloc_floats (C1 * c * P1);
    }
  else
    {
      guint maxw = 0;

      self->n_layers = model->n_tensors / 2;
      self->width[0] = RLX_INPUT_LEN;
      for (guint l = 0; l < self->n_layers; l++)
        {
          self->width[l + 1] = model->tensors[2 * l].shape[0];
          if (l + 1 < self->n_layers)
            {
              self->act[l + 1] = alloc_floats (n * self->width[l + 1]);
              maxw = MAX (maxw, self->width[l + 1]);
            }
        }
      self->dact = alloc_floats (n * maxw);
      self->dact2 = alloc_floats (n * maxw);
    }
  return self;
}

void
rlx_cpu_trainer_free (RlxCpuTrainer *self)
{
  if (self == NULL)
    return;
  for (guint l = 0; l < G_N_ELEMENTS (self->act); l++)
    g_free (self->act[l]);
  g_free (self->dact);
  g_free (self->dact2);
  g_free (self->logits);
  g_free (self->dlogits);
  g_free (self->cols1);
  g_free (self->conv1);
  g_free (self->pool1);
  g_free (self->arg1);
  g_free (self->cols2);
  g_free (self->conv2);
  g_free (self->pool2);
  g_free (self->arg2);
  g_free (self->dpool2);
  g_free (self->dconv2);
  g_free (self->dcols2);
  g_free (self->dpool1);
  g_free (self->dconv1);
  g_free (self);
}

const RlxModel *
rlx_cpu_trainer_model (const RlxCpuTrainer *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->model;
}

/* ------------------------------------------------------------- element-wise */

/* out[i][j] = max(0, out[i][j] + b[j]) (relu) or out[i][j] + b[j] */
static void
bias_act (float *restrict out, const float *restrict b, guint rows, guint cols,
          gboolean relu)
{
  for (guint i = 0; i < rows; i++)
    {
      float *o = out + (gsize) i * cols;

      if (relu)
        for (guint j = 0; j < cols; j++)
          {
            float v = o[j] + b[j];
            o[j] = v > 0.0f ? v : 0.0f;
          }
      else
        for (guint j = 0; j < cols; j++)
          o[j] += b[j];
    }
}

/* Mean softmax cross-entropy of @logits [n][10]; when @dlogits is not NULL
 * it receives d(mean loss)/d(logits). */
static float
softmax_xent (const float *logits, const guint8 *labels, guint n, float *dlogits)
{
  double total = 0.0;
  float inv_n = 1.0f / (float) n;

  for (guint i = 0; i < n; i++)
    {
      const float *l = logits + (gsize) i * RLX_N_CLASSES;
      float e[RLX_N_CLASSES];
      float m = l[0], s = 0.0f;

      for (guint j = 1; j < RLX_N_CLASSES; j++)
        m = MAX (m, l[j]);
      for (guint j = 0; j < RLX_N_CLASSES; j++)
        {
          e[j] = expf (l[j] - m);
          s += e[j];
        }
      total += (double) (logf (s) + m - l[labels[i]]);
      if (dlogits != NULL)
        {
          float *d = dlogits + (gsize) i * RLX_N_CLASSES;
          float inv_s = inv_n / s;

          for (guint j = 0; j < RLX_N_CLASSES; j++)
            d[j] = e[j] * inv_s;
          d[labels[i]] -= inv_n;
        }
    }
  return (float) (total / n);
}

/* db[j] = sum_i d[i][j] */
static void
column_sums (const float *restrict d, guint rows, guint cols, float *restrict db)
{
  memset (db, 0, cols * sizeof (float));
  for (guint i = 0; i < rows; i++)
    for (guint j = 0; j < cols; j++)
      db[j] += d[(gsize) i * cols + j];
}

/* --------------------------------------------------------------------- MLP */

static void
mlp_forward (RlxCpuTrainer *self, const float *params, const float *x, guint n)
{
  const RlxModel *m = self->model;
  const float *in = x;

  for (guint l = 0; l < self->n_layers; l++)
    {
      const float *w = params + m->tensors[2 * l].offset;
      const float *b = params + m->tensors[2 * l + 1].offset;
      guint fi = self->width[l], fo = self->width[l + 1];
      gboolean last = l + 1 == self->n_layers;
      float *out = last ? self->logits : self->act[l + 1];

      cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, n, fo, fi,
                   1.0f, in, fi, w, fi, 0.0f, out, fo);
      bias_act (out, b, n, fo, !last);
      in = out;
    }
}

static void
mlp_backward (RlxCpuTrainer *self, const float *params, const float *x, guint n,
              float *grads)
{
  const RlxModel *m = self->model;
  const float *dout = self->dlogits;
  float *bufs[2] = { self->dact, self->dact2 };

  for (guint l = self->n_layers; l-- > 0;)
    {
      const float *w = params + m->tensors[2 * l].offset;
      float *dw = grads + m->tensors[2 * l].offset;
      float *db = grads + m->tensors[2 * l + 1].offset;
      guint fi = self->width[l], fo = self->width[l + 1];
      const float *in = l == 0 ? x : self->act[l];

      cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, fo, fi, n,
                   1.0f, dout, fo, in, fi, 0.0f, dw, fi);
      column_sums (dout, n, fo, db);
      if (l > 0)
        {
          float *din = bufs[l % 2];
          gsize len = (gsize) n * fi;

          cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, n, fi, fo,
                       1.0f, dout, fo, w, fi, 0.0f, din, fi);
          for (gsize i = 0; i < len; i++)
            din[i] = in[i] > 0.0f ? din[i] : 0.0f;
          dout = din;
        }
    }
}

/* --------------------------------------------------------------------- CNN */

/* cols[k][s*side*side + y*side + x] = src(s, c, y+ky-1, x+kx-1) for row
 * k = c*9 + ky*3 + kx, zero outside the image. src(s, c) is the plane at
 * src + s*sample_stride + c*side*side. */
static void
im2col3x3 (const float *src, gsize sample_stride, guint channels, guint side,
           guint ns, float *cols)
{
  gsize plane = (gsize) side * side;
  gsize ncols = ns * plane;

  for (guint c = 0; c < channels; c++)
    for (guint ky = 0; ky < 3; ky++)
      for (guint kx = 0; kx < 3; kx++)
        {
          float *row = cols + (gsize) (c * 9 + ky * 3 + kx) * ncols;

          for (guint s = 0; s < ns; s++)
            {
              const float *p = src + s * sample_stride + c * plane;
              float *r = row + s * plane;

              for (guint y = 0; y < side; y++)
                {
                  int sy = (int) y + (int) ky - 1;
                  float *ry = r + (gsize) y * side;

                  if (sy < 0 || sy >= (int) side)
                    {
                      memset (ry, 0, side * sizeof (float));
                      continue;
                    }
                  for (guint x = 0; x < side; x++)
                    {
                      int sx = (int) x + (int) kx - 1;
                      ry[x] = (sx >= 0 && sx < (int) side) ? p[(gsize) sy * side + sx] : 0.0f;
                    }
                }
            }
        }
}

/* The adjoint of im2col3x3: dst(s, c) planes (layout [c][s][plane], zeroed
 * here) accumulate the column gradients. */
static void
col2im3x3 (const float *cols, guint channels, guint side, guint ns, float *dst)
{
  gsize plane = (gsize) side * side;
  gsize ncols = ns * plane;

  memset (dst, 0, channels * ncols * sizeof (float));
  for (guint c = 0; c < channels; c++)
    for (guint ky = 0; ky < 3; ky++)
      for (guint kx = 0; kx < 3; kx++)
        {
          const float *row = cols + (gsize) (c * 9 + ky * 3 + kx) * ncols;

          for (guint s = 0; s < ns; s++)
            {
              float *p = dst + (gsize) c * ncols + s * plane;
              const float *r = row + s * plane;

              for (guint y = 0; y < side; y++)
                {
                  int sy = (int) y + (int) ky - 1;

                  if (sy < 0 || sy >= (int) side)
                    continue;
                  for (guint x = 0; x < side; x++)
                    {
                      int sx = (int) x + (int) kx - 1;
                      if (sx >= 0 && sx < (int) side)
                        p[(gsize) sy * side + sx] += r[(gsize) y * side + x];
                    }
                }
            }
        }
}

/* conv [ch][ns][side][side] (+ bias, ReLU) → 2×2 max pool into
 * out(s, c) = out + s*out_sample_stride + c*(side/2)^2, argmax into arg with
 * the same layout. */
static void
bias_relu_pool (const float *conv, const float *bias, guint channels, guint side,
                guint ns, float *out, guint8 *arg, gsize out_sample_stride)
{
  guint half = side / 2;
  gsize plane = (gsize) side * side;

  for (guint c = 0; c < channels; c++)
    for (guint s = 0; s < ns; s++)
      {
        const float *p = conv + ((gsize) c * ns + s) * plane;
        float *o = out + s * out_sample_stride + (gsize) c * half * half;
        guint8 *a = arg + s * out_sample_stride + (gsize) c * half * half;

        for (guint y = 0; y < half; y++)
          for (guint x = 0; x < half; x++)
            {
              const float *q = p + (gsize) (2 * y) * side + 2 * x;
              float v[4] = { q[0], q[1], q[side], q[side + 1] };
              guint best = 0;

              for (guint k = 1; k < 4; k++)
                if (v[k] > v[best])
                  best = k;
              o[y * half + x] = MAX (v[best] + bias[c], 0.0f);
              a[y * half + x] = (guint8) best;
            }
      }
}

/* Inverse of the pool: dconv [ch][ns][side][side] zeroed, then the pooled
 * gradient at each argmax where the pooled output was positive (ReLU). */
static void
unpool_relu (const float *dout, const float *out, const guint8 *arg,
             gsize sample_stride, guint channels, guint side, guint ns,
             float *dconv)
{
  guint half = side / 2;
  gsize plane = (gsize) side * side;

  memset (dconv, 0, channels * ns * plane * sizeof (float));
  for (guint c = 0; c < channels; c++)
    for (guint s = 0; s < ns; s++)
      {
        float *p = dconv + ((gsize) c * ns + s) * plane;
        gsize base = s * sample_stride + (gsize) c * half * half;

        for (guint y = 0; y < half; y++)
          for (guint x = 0; x < half; x++)
            {
              gsize i = base + y * half + x;
              guint k = arg[i];

              if (out[i] > 0.0f)
                p[(gsize) (2 * y + k / 2) * side + 2 * x + k % 2] = dout[i];
            }
      }
}

static void
cnn_forward (RlxCpuTrainer *self, const float *params, const float *x, guint n)
{
  const RlxModel *m = self->model;
  const float *w1 = params + m->tensors[0].offset, *b1 = params + m->tensors[1].offset;
  const float *w2 = params + m->tensors[2].offset, *b2 = params + m->tensors[3].offset;
  const float *w3 = params + m->tensors[4].offset, *b3 = params + m->tensors[5].offset;

  for (guint s0 = 0; s0 < n; s0 += CNN_CHUNK)
    {
      guint ns = MIN (CNN_CHUNK, n - s0);

      im2col3x3 (x + (gsize) s0 * P1, P1, 1, S1, ns, self->cols1);
      cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, C1, ns * P1, 9,
                   1.0f, w1, 9, self->cols1, ns * P1, 0.0f, self->conv1, ns * P1);
      bias_relu_pool (self->conv1, b1, C1, S1, ns, self->pool1 + (gsize) s0 * C1 * P2,
                      self->arg1 + (gsize) s0 * C1 * P2, C1 * P2);
      im2col3x3 (self->pool1 + (gsize) s0 * C1 * P2, C1 * P2, C1, S2, ns, self->cols2);
      cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, C2, ns * P2, K2,
                   1.0f, w2, K2, self->cols2, ns * P2, 0.0f, self->conv2, ns * P2);
      bias_relu_pool (self->conv2, b2, C2, S2, ns, self->pool2 + (gsize) s0 * FLAT,
                      self->arg2 + (gsize) s0 * FLAT, FLAT);
    }
  cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, n, RLX_N_CLASSES, FLAT,
               1.0f, self->pool2, FLAT, w3, FLAT, 0.0f, self->logits, RLX_N_CLASSES);
  bias_act (self->logits, b3, n, RLX_N_CLASSES, FALSE);
}

static void
cnn_backward (RlxCpuTrainer *self, const float *params, const float *x, guint n,
              float *grads)
{
  const RlxModel *m = self->model;
  const float *w2 = params + m->tensors[2].offset;
  const float *w3 = params + m->tensors[4].offset;
  float *dw1 = grads + m->tensors[0].offset, *db1 = grads + m->tensors[1].offset;
  float *dw2 = grads + m->tensors[2].offset, *db2 = grads + m->tensors[3].offset;
  float *dw3 = grads + m->tensors[4].offset, *db3 = grads + m->tensors[5].offset;

  cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, RLX_N_CLASSES, FLAT, n,
               1.0f, self->dlogits, RLX_N_CLASSES, self->pool2, FLAT, 0.0f, dw3, FLAT);
  column_sums (self->dlogits, n, RLX_N_CLASSES, db3);
  cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, n, FLAT, RLX_N_CLASSES,
               1.0f, self->dlogits, RLX_N_CLASSES, w3, FLAT, 0.0f, self->dpool2, FLAT);

  memset (db1, 0, C1 * sizeof (float));
  memset (db2, 0, C2 * sizeof (float));
  for (guint s0 = 0; s0 < n; s0 += CNN_CHUNK)
    {
      guint ns = MIN (CNN_CHUNK, n - s0);
      float beta = s0 == 0 ? 0.0f : 1.0f;

      unpool_relu (self->dpool2 + (gsize) s0 * FLAT, self->pool2 + (gsize) s0 * FLAT,
                   self->arg2 + (gsize) s0 * FLAT, FLAT, C2, S2, ns, self->dconv2);
      for (guint c = 0; c < C2; c++)
        {
          const float *d = self->dconv2 + (gsize) c * ns * P2;
          float acc = 0.0f;

          for (gsize i = 0; i < (gsize) ns * P2; i++)
            acc += d[i];
          db2[c] += acc;
        }
      im2col3x3 (self->pool1 + (gsize) s0 * C1 * P2, C1 * P2, C1, S2, ns, self->cols2);
      cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, C2, K2, ns * P2,
                   1.0f, self->dconv2, ns * P2, self->cols2, ns * P2, beta, dw2, K2);
      cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, K2, ns * P2, C2,
                   1.0f, w2, K2, self->dconv2, ns * P2, 0.0f, self->dcols2, ns * P2);
      col2im3x3 (self->dcols2, C1, S2, ns, self->dpool1);

      /* dpool1 is [c][s][196]; unpool_relu wants the pooled gradient in the
       * stored layout [s][c][196]: index through a strided view instead. */
      memset (self->dconv1, 0, (gsize) C1 * ns * P1 * sizeof (float));
      for (guint c = 0; c < C1; c++)
        for (guint s = 0; s < ns; s++)
          {
            const float *dp = self->dpool1 + ((gsize) c * ns + s) * P2;
            gsize base = (gsize) (s0 + s) * C1 * P2 + (gsize) c * P2;
            const float *po = self->pool1 + base;
            const guint8 *a = self->arg1 + base;
            float *dc = self->dconv1 + ((gsize) c * ns + s) * P1;

            for (guint y = 0; y < S2; y++)
              for (guint xx = 0; xx < S2; xx++)
                {
                  guint i = y * S2 + xx, k = a[i];

                  if (po[i] > 0.0f)
                    dc[(2 * y + k / 2) * S1 + 2 * xx + k % 2] = dp[i];
                }
          }
      for (guint c = 0; c < C1; c++)
        {
          const float *d = self->dconv1 + (gsize) c * ns * P1;
          float acc = 0.0f;

          for (gsize i = 0; i < (gsize) ns * P1; i++)
            acc += d[i];
          db1[c] += acc;
        }
      im2col3x3 (x + (gsize) s0 * P1, P1, 1, S1, ns, self->cols1);
      cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, C1, 9, ns * P1,
                   1.0f, self->dconv1, ns * P1, self->cols1, ns * P1, beta, dw1, 9);
    }
}

/* ------------------------------------------------------------------ public */

static void
forward (RlxCpuTrainer *self, const float *params, const float *x, guint n)
{
  if (self->model->id == RLX_MODEL_MNIST_CNN)
    cnn_forward (self, params, x, n);
  else
    mlp_forward (self, params, x, n);
}

float
rlx_cpu_trainer_grads (RlxCpuTrainer *self, const float *params,
                       const float *x, const guint8 *labels, guint n,
                       float *grads)
{
  float loss;

  g_return_val_if_fail (self != NULL, NAN);
  g_return_val_if_fail (params != NULL && x != NULL && labels != NULL, NAN);
  g_return_val_if_fail (n >= 1 && n <= self->max_batch, NAN);

  forward (self, params, x, n);
  loss = softmax_xent (self->logits, labels, n, grads ? self->dlogits : NULL);
  if (grads == NULL)
    return loss;
  if (self->model->id == RLX_MODEL_MNIST_CNN)
    cnn_backward (self, params, x, n, grads);
  else
    mlp_backward (self, params, x, n, grads);
  return loss;
}

void
rlx_cpu_trainer_forward (RlxCpuTrainer *self, const float *params,
                         const float *x, guint n, float *logits)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (params != NULL && x != NULL && logits != NULL);
  g_return_if_fail (n >= 1 && n <= self->max_batch);

  forward (self, params, x, n);
  memcpy (logits, self->logits, (gsize) n * RLX_N_CLASSES * sizeof (float));
}

void
rlx_sgd_step (float *params, const float *grads, gsize n, float lr)
{
  g_return_if_fail (params != NULL || n == 0);
  g_return_if_fail (grads != NULL || n == 0);

  for (gsize i = 0; i < n; i++)
    params[i] -= lr * grads[i];
}

double
rlx_cpu_evaluate (RlxCpuTrainer *self, const float *params,
                  const RlxDataset *dataset, RlxSplit split, double *loss_out)
{
  guint size, chunk, correct = 0;
  double loss_sum = 0.0;
  g_autofree float *x = NULL;
  g_autofree guint32 *idx = NULL;
  g_autofree guint8 *labels = NULL;

  g_return_val_if_fail (self != NULL, 0.0);
  g_return_val_if_fail (params != NULL && dataset != NULL, 0.0);

  size = rlx_dataset_size (dataset, split);
  chunk = MIN (self->max_batch, 256u);
  x = g_new (float, (gsize) chunk * RLX_INPUT_LEN);
  idx = g_new (guint32, chunk);
  labels = g_new (guint8, chunk);

  for (guint start = 0; start < size; start += chunk)
    {
      guint n = MIN (chunk, size - start);

      for (guint k = 0; k < n; k++)
        idx[k] = start + k;
      rlx_dataset_gather (dataset, split, idx, n, x, labels);
      forward (self, params, x, n);
      loss_sum += (double) softmax_xent (self->logits, labels, n, NULL) * n;
      for (guint k = 0; k < n; k++)
        {
          const float *l = self->logits + (gsize) k * RLX_N_CLASSES;
          guint best = 0;

          for (guint j = 1; j < RLX_N_CLASSES; j++)
            if (l[j] > l[best])
              best = j;
          correct += best == labels[k];
        }
    }
  if (loss_out != NULL)
    *loss_out = size ? loss_sum / size : 0.0;
  return size ? (double) correct / size : 0.0;
}

void
rlx_cpu_set_threads (guint n)
{
  if (n > 0)
    openblas_set_num_threads ((int) MIN (n, 256u));
}

guint
rlx_cpu_threads (void)
{
  return (guint) MAX (openblas_get_num_threads (), 1);
}

const char *
rlx_cpu_blas_name (void)
{
  return openblas_get_config ();
}
