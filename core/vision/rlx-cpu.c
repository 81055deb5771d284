/* rlx-cpu.c — CPU forward/backward, SGD and evaluation
 *
 * Dense layers are one cblas_sgemm each over the whole batch; the input
 * gradient of the first layer is never computed.
 *
 * The CNN runs forward *and* backward one chunk of CNN_CHUNK samples at a
 * time: a sample's gradient needs only its own logits (the loss is a mean,
 * so d loss / d logits = (softmax - onehot) / n), so a chunk goes from the
 * input to its weight-gradient contributions while its im2col matrices are
 * still in cache, and nothing of size n is kept. Weight gradients accumulate
 * over the chunks in GEMM (beta = 1), in a fixed order: results do not
 * depend on max_batch.
 *
 * Both convolutions are im2col + cblas_sgemm with the chunk's samples side
 * by side. The im2col is made of plain contiguous copies: inputs are kept
 * zero-padded (28×28 in a 30×30 plane, 14×14 in 16×16) and the convolution
 * is computed on a "wide" grid as wide as the padded plane (28×30 and 14×16
 * outputs), so row (c, ky, kx) of the im2col matrix is the padded plane
 * shifted by ky*W + kx. The two extra outputs per row are junk that nothing
 * reads; their output gradients stay zero, so they add nothing to the
 * weight gradients (7% and 14% more GEMM work, for copies instead of
 * gathers).
 *
 * The GEMMs write the conv outputs channels-last, [sample][wide pixel]
 * [channel] (the transpose of W × cols, which BLAS gives for free), so that
 * bias + ReLU + 2×2 max-pool and its adjoint run across 16 or 32 channels
 * in vector registers. pool1 writes padded channel-first planes [sample]
 * [channel][16×16] for conv2's im2col; pool2 writes [sample][channel][7][7],
 * the order PyTorch's Flatten gives the dense layer.
 */
#include "rlx-config.h"
#include "rlx-cpu.h"
#include "rlx-blas-private.h"

#include <math.h>
#include <string.h>
#include "core/util/rlx-fp-mode.h"

#ifndef CNN_CHUNK
#define CNN_CHUNK 8
#endif
/* Chunk i belongs to lane i % CNN_LANES; each lane sums its own gradients
 * and the lanes are added in order at the end, so the result is the same
 * whether one thread runs both lanes or two threads run one each. */
#define CNN_LANES 2

#define C1     16                  /* conv1 channels */
#define C2     32                  /* conv2 channels */
#define K2     (C1 * 9)            /* conv2 im2col rows: 144 */
#define P3     49                  /* 7×7 after pool2 */
#define FLAT   (C2 * P3)           /* 1568 */
/* conv1: input 28×28 padded into 30×30; output on a 28×30 wide grid */
#define W1P    30
#define XP     904                 /* per-sample stride of padded inputs (900 + slack) */
#define N1     (28 * W1P)          /* 840 wide outputs per sample */
/* conv2: pool1 14×14 padded into 16×16; output on a 14×16 wide grid */
#define W2P    16
#define PP     (W2P * W2P)         /* 256 per padded plane */
#define N2     (14 * W2P)          /* 224 wide outputs per sample */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__ ((target_clones ("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HOT
#endif

/* One CNN lane: scratch for a chunk, and its share of a step. */
typedef struct {
  RlxCpuTrainer  *trainer;
  const RlxModel *model;
  __typeof__ (cblas_sgemm) *sgemm;
  float          *logits;          /* the trainer's [n][10], shared */
  float          *dlogits;
  guint           chunk;
  gsize           ld1, ld2;        /* chunk*N1, chunk*N2 */
  float          *xpad;            /* [chunk][XP], borders zero */
  float          *cols1;           /* [9][ld1] */
  float          *conv1;           /* [chunk*N1][16] channels-last */
  float          *p1;              /* [chunk][16][PP] + slack, borders zero */
  gint32         *a1;              /* [chunk][196][16] pool argmax, 4 = ReLU off */
  float          *cols2;           /* [144][ld2] */
  float          *conv2;           /* [chunk*N2][32] channels-last */
  float          *pool2;           /* [chunk][1568] */
  gint32         *a2;              /* [chunk][49][32] */
  float          *dpool2;          /* [chunk][1568] */
  float          *dconv2;          /* [chunk*N2][32], junk rows stay zero */
  float          *dcols2;          /* [144][ld2] */
  float          *dp1;             /* [chunk][16][PP] + slack */
  float          *dconv1;          /* [chunk*N1][16], junk rows stay zero */
  float          *grads;           /* lanes > 0: private gradient sums */
  /* the step */
  guint           index;
  const float    *params, *x;
  const guint8   *labels;
  guint           n;
  gboolean        want_grads;
  float          *out_grads;       /* where this worker accumulates */
  gboolean        wrote;           /* out_grads holds this step's sums */
  double          loss;
} CnnWork;

struct _RlxCpuTrainer {
  const RlxModel *model;
  guint           max_batch;
  __typeof__ (cblas_sgemm) *sgemm;

  /* dense (MLP): widths and post-ReLU hidden activations [n][width] */
  guint           n_layers;
  guint           width[4];        /* width[0] = 784 input, width[L] = 10 */
  float          *act[4];
  float          *dact[2];         /* [n][widest hidden] */

  float          *logits;          /* [n][10] */
  float          *dlogits;

  /* rlx_cpu_trainer_set_f16: which dense GEMMs read f16-rounded operands,
   * the backward's gradient scale, and the rounded copies */
  RlxCpuF16Rule   f16_rule;
  RlxCpuF16Scale  f16_scale;
  float          *f16_a, *f16_b;
  gsize           f16_len;

  /* cnn: CNN_LANES chunk pipelines; lane 0 runs on the caller's thread,
   * lane 1 on a helper thread woken for each step when two or more threads
   * are wanted, else on the caller's thread after lane 0 */
  CnnWork        *work;
  GThread        *helper;
  GMutex          lock;
  GCond           cond;
  guint           generation;      /* bumped for each step the helper takes */
  guint           pending;         /* 1 while the helper works on it */
  gboolean        quit;
};

/* Threads the person allowed (0: one per core). The MLP's GEMMs get them as
 * BLAS threads; the CNN runs its lanes on two threads when 2 or more are
 * allowed, each with single-threaded GEMMs. */
static guint wanted_threads;
/* What OpenBLAS was last told (0: nothing yet). */
static gint blas_threads_set;

static guint
threads_wanted (void)
{
  guint n = g_atomic_int_get (&wanted_threads);

  return n ? n : MAX (g_get_num_processors (), 1u);
}

static void
blas_threads (guint n)
{
  if ((guint) g_atomic_int_get (&blas_threads_set) != n)
    {
      rlx_blas ()->set_num_threads ((int) n);
      g_atomic_int_set (&blas_threads_set, (gint) n);
    }
}

static gpointer cnn_helper (gpointer data);

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
  self->sgemm = rlx_blas ()->sgemm;
  n = max_batch;
  self->logits = alloc_floats (n * RLX_N_CLASSES);
  self->dlogits = alloc_floats (n * RLX_N_CLASSES);

  if (model->id == RLX_MODEL_MNIST_CNN)
    {
      gsize c = MIN (n, CNN_CHUNK);

      self->work = g_new0 (CnnWork, CNN_LANES);
      for (guint i = 0; i < CNN_LANES; i++)
        {
          CnnWork *w = &self->work[i];

          w->trainer = self;
          w->model = model;
          w->sgemm = self->sgemm;
          w->logits = self->logits;
          w->dlogits = self->dlogits;
          w->index = i;
          w->chunk = (guint) c;
          w->ld1 = c * N1;
          w->ld2 = c * N2;
          w->xpad = alloc_floats (c * XP + 8);
          w->cols1 = alloc_floats (9 * w->ld1);
          w->conv1 = alloc_floats (C1 * w->ld1);
          w->p1 = alloc_floats (c * C1 * PP + 8);
          w->a1 = g_new0 (gint32, c * C1 * 196);
          w->cols2 = alloc_floats (K2 * w->ld2);
          w->conv2 = alloc_floats (C2 * w->ld2);
          w->pool2 = alloc_floats (c * FLAT);
          w->a2 = g_new0 (gint32, c * FLAT);
          w->dpool2 = alloc_floats (c * FLAT);
          w->dconv2 = alloc_floats (C2 * w->ld2);
          w->dcols2 = alloc_floats (K2 * w->ld2);
          w->dp1 = alloc_floats (c * C1 * PP + 8);
          w->dconv1 = alloc_floats (C1 * w->ld1);
          if (i > 0)
            w->grads = alloc_floats (model->n_params);
        }
      g_mutex_init (&self->lock);
      g_cond_init (&self->cond);
      if (threads_wanted () > 1 && max_batch > c)
        self->helper = g_thread_new ("rlx-cpu-cnn", cnn_helper, &self->work[1]);
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
      self->dact[0] = alloc_floats (n * maxw);
      self->dact[1] = alloc_floats (n * maxw);
    }
  return self;
}

void
rlx_cpu_trainer_free (RlxCpuTrainer *self)
{
  if (self == NULL)
    return;
  g_free (self->f16_a);
  g_free (self->f16_b);
  for (guint l = 0; l < G_N_ELEMENTS (self->act); l++)
    g_free (self->act[l]);
  g_free (self->dact[0]);
  g_free (self->dact[1]);
  g_free (self->logits);
  g_free (self->dlogits);
  if (self->work != NULL)
    {
      if (self->helper != NULL)
        {
          g_mutex_lock (&self->lock);
          self->quit = TRUE;
          g_cond_broadcast (&self->cond);
          g_mutex_unlock (&self->lock);
          g_thread_join (self->helper);
        }
      for (guint i = 0; i < CNN_LANES; i++)
        {
          CnnWork *w = &self->work[i];

          g_free (w->xpad);
          g_free (w->cols1);
          g_free (w->conv1);
          g_free (w->p1);
          g_free (w->a1);
          g_free (w->cols2);
          g_free (w->conv2);
          g_free (w->pool2);
          g_free (w->a2);
          g_free (w->dpool2);
          g_free (w->dconv2);
          g_free (w->dcols2);
          g_free (w->dp1);
          g_free (w->dconv1);
          g_free (w->grads);
        }
      g_free (self->work);
      g_mutex_clear (&self->lock);
      g_cond_clear (&self->cond);
    }
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
HOT static void
bias_act (float *restrict out, const float *restrict b, guint rows, guint cols,
          gboolean relu)
{
  for (guint i = 0; i < rows; i++)
    {
      float *restrict o = out + (gsize) i * cols;

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

/* Sum over the @n rows of softmax cross-entropy of @logits [n][10]; when
 * @dlogits is not NULL it receives d(loss)/d(logits) scaled by @scale (1/N
 * for a mean over N samples). */
static double
softmax_xent (const float *logits, const guint8 *labels, guint n, float scale,
              float *dlogits)
{
  double total = 0.0;

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
          float inv_s = scale / s;

          for (guint j = 0; j < RLX_N_CLASSES; j++)
            d[j] = e[j] * inv_s;
          d[labels[i]] -= scale;
        }
    }
  return total;
}

/* db[j] (+)= sum_i d[i][j] */
HOT static void
column_sums (const float *restrict d, guint rows, guint cols, float *restrict db,
             gboolean accumulate)
{
  if (!accumulate)
    memset (db, 0, cols * sizeof (float));
  for (guint i = 0; i < rows; i++)
    for (guint j = 0; j < cols; j++)
      db[j] += d[(gsize) i * cols + j];
}

/* d[i] = act[i] > 0 ? d[i] : 0 */
HOT static void
relu_backward (float *restrict d, const float *restrict act, gsize n)
{
  for (gsize i = 0; i < n; i++)
    d[i] = act[i] > 0.0f ? d[i] : 0.0f;
}

/* --------------------------------------------------------------------- MLP */

/* The dense GEMMs at --compute f16 (rlx_cpu_trainer_set_f16): C = A·B
 * from f16 copies of A·scale and B, A's scale undone. The products of two
 * f16 values are exact in f32, so what differs from the tensor cores is
 * only the order (and rounding) of the f32 sums. */
/* @x rounded to the nearest f16 (ties to even, past 65504 to infinity), as
 * an f32: bit arithmetic, since clang 14 has no _Float16 on x86-64 and the
 * sanitizer build uses it. Checked against gcc's (float) (_Float16) x over
 * every seventh f32 bit pattern: identical. */
static inline float
f16_round_one (float x)
{
  guint32 u, a;

  memcpy (&u, &x, sizeof u);
  a = u & 0x7fffffffu;
  if (a >= 0x7f800000u)            /* infinities and NaNs stay */
    return x;
  if (a >= 0x477ff000u)            /* 65520 and above round past 65504 */
    a = 0x7f800000u;
  else if (a < 0x38800000u)        /* below 2^-14: f16's subnormals, steps of 2^-24 */
    {
      float f = rintf (fabsf (x) * 16777216.0f) * 5.9604644775390625e-8f;
      memcpy (&a, &f, sizeof a);
    }
  else                             /* 13 mantissa bits fewer, to nearest even */
    a = (a + 0x0fffu + ((a >> 13) & 1u)) & ~0x1fffu;
  u = (u & 0x80000000u) | a;
  memcpy (&x, &u, sizeof x);
  return x;
}

static void
f16_round (float *restrict dst, const float *restrict src, gsize n, float scale)
{
  const float inv = 1.0f / scale;

  for (gsize i = 0; i < n; i++)
    dst[i] = f16_round_one (src[i] * scale) * inv;
}

/* @a (@a_len floats) and @b (@b_len) as the GEMM M×N×K reads them: the
 * rounded copies where the rule picks it, else themselves */
static void
f16_operands (RlxCpuTrainer *self, guint M, guint N, guint K, float a_scale,
              const float **a, gsize a_len, const float **b, gsize b_len)
{
  if (self->f16_rule == NULL || !self->f16_rule (M, N, K))
    return;
  g_assert (a_len <= self->f16_len && b_len <= self->f16_len);
  f16_round (self->f16_a, *a, a_len, a_scale);
  f16_round (self->f16_b, *b, b_len, 1.0f);
  *a = self->f16_a;
  *b = self->f16_b;
}

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
      const float *ga = in, *gb = w;

      f16_operands (self, n, fo, fi, 1.0f, &ga, (gsize) n * fi, &gb, (gsize) fo * fi);
      self->sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, n, fo, fi,
                   1.0f, ga, fi, gb, fi, 0.0f, out, fo);
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
  const float gs = self->f16_scale != NULL ? self->f16_scale (n) : 1.0f;

  for (guint l = self->n_layers; l-- > 0;)
    {
      const float *w = params + m->tensors[2 * l].offset;
      float *dw = grads + m->tensors[2 * l].offset;
      float *db = grads + m->tensors[2 * l + 1].offset;
      guint fi = self->width[l], fo = self->width[l + 1];
      const float *in = l == 0 ? x : self->act[l];
      const float *ga = dout, *gb = in;

      f16_operands (self, fo, fi, n, gs, &ga, (gsize) n * fo, &gb, (gsize) n * fi);
      self->sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, fo, fi, n,
                   1.0f, ga, fo, gb, fi, 0.0f, dw, fi);
      column_sums (dout, n, fo, db, FALSE);
      if (l > 0)
        {
          float *din = self->dact[l % 2];

          ga = dout;
          gb = w;
          f16_operands (self, n, fi, fo, gs, &ga, (gsize) n * fo, &gb, (gsize) fo * fi);
          self->sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, n, fi, fo,
                       1.0f, ga, fo, gb, fi, 0.0f, din, fi);
          relu_backward (din, in, (gsize) n * fi);
          dout = din;
        }
    }
}

/* --------------------------------------------------------------------- CNN */

/* Pads the chunk's inputs into 30×30 planes (borders stay zero) and builds
 * cols1[k][s*N1 + j] = xpad[s][ky*30 + kx + j], k = ky*3 + kx. */
static void
cnn_im2col1 (CnnWork *self, const float *x, guint ns)
{
  for (guint s = 0; s < ns; s++)
    {
      float *xp = self->xpad + (gsize) s * XP;

      for (guint y = 0; y < 28; y++)
        memcpy (xp + (y + 1) * W1P + 1, x + (gsize) s * RLX_INPUT_LEN + y * 28, 28 * sizeof (float));
      for (guint k = 0; k < 9; k++)
        memcpy (self->cols1 + k * self->ld1 + (gsize) s * N1, xp + (k / 3) * W1P + k % 3,
                N1 * sizeof (float));
    }
}

/* cols2[c*9 + k][s*N2 + j] = p1[s][c][ky*16 + kx + j] */
static void
cnn_im2col2 (CnnWork *self, guint ns)
{
  for (guint c = 0; c < C1; c++)
    for (guint k = 0; k < 9; k++)
      {
        float *row = self->cols2 + (gsize) (c * 9 + k) * self->ld2;

        for (guint s = 0; s < ns; s++)
          memcpy (row + (gsize) s * N2, self->p1 + ((gsize) s * C1 + c) * PP + (k / 3) * W2P + k % 3,
                  N2 * sizeof (float));
      }
}

/* 2×2 max pool + bias + ReLU of one sample's conv output, channels-last
 * [rows of @stride pixels][C], valid @side × @side. The pooled value of
 * channel c at (y, x) goes to out[c * out_c + y * out_y + x]; arg[(y * side/2
 * + x) * C + c] = the window's first maximum (0..3, row-major), or 4 when
 * ReLU zeroed the output (so backward needs no other mask). The inner loops
 * run over the C channels: vectorised, no shuffles (int32 arg and
 * -fno-trapping-math let GCC if-convert them). */
#define DEFINE_POOL(NAME, C)                                                     \
HOT static void                                                                  \
NAME (const float *restrict conv, gsize stride, guint side, const float *restrict b, \
      float *restrict out, gsize out_c, gsize out_y, gint32 *restrict arg)       \
{                                                                                \
  guint half = side / 2;                                                         \
                                                                                 \
  for (guint y = 0; y < half; y++)                                               \
    for (guint x = 0; x < half; x++)                                             \
      {                                                                          \
        const float *q0 = conv + ((gsize) (2 * y) * stride + 2 * x) * C;         \
        const float *q1 = q0 + C, *q2 = q0 + stride * C, *q3 = q2 + C;           \
        gint32 *a = arg + (gsize) (y * half + x) * C;                            \
        float v[C];                                                              \
                                                                                 \
        for (guint c = 0; c < C; c++)                                            \
          {                                                                      \
            float x0 = q0[c], x1 = q1[c], x2 = q2[c], x3 = q3[c];                \
            int g01 = x1 > x0, g23 = x3 > x2;                                    \
            float m01 = g01 ? x1 : x0, m23 = g23 ? x3 : x2;                      \
            int g = m23 > m01;                                                   \
            float mv = (g ? m23 : m01) + b[c];                                   \
            gint32 i = g ? 2 + g23 : g01;                                        \
                                                                                 \
            a[c] = mv > 0.0f ? i : 4;                                            \
            v[c] = mv > 0.0f ? mv : 0.0f;                                        \
          }                                                                      \
        for (guint c = 0; c < C; c++)                                            \
          out[c * out_c + y * out_y + x] = v[c];                                 \
      }                                                                          \
}

/* The pool's adjoint, with ReLU: the four pixels of each window get the
 * pooled gradient (from din[c * in_c + y * in_y + x]) where arg says, else
 * 0; db[c] accumulates the gradients that passed. */
#define DEFINE_UNPOOL(NAME, C)                                                   \
HOT static void                                                                  \
NAME (const float *restrict din, gsize in_c, gsize in_y, const gint32 *restrict arg, \
      guint side, float *restrict dconv, gsize stride, float *restrict db)       \
{                                                                                \
  guint half = side / 2;                                                         \
                                                                                 \
  for (guint y = 0; y < half; y++)                                               \
    for (guint x = 0; x < half; x++)                                             \
      {                                                                          \
        float *q0 = dconv + ((gsize) (2 * y) * stride + 2 * x) * C;              \
        float *q1 = q0 + C, *q2 = q0 + stride * C, *q3 = q2 + C;                 \
        const gint32 *a = arg + (gsize) (y * half + x) * C;                      \
        float g[C];                                                              \
                                                                                 \
        for (guint c = 0; c < C; c++)                                            \
          g[c] = din[c * in_c + y * in_y + x];                                   \
        for (guint c = 0; c < C; c++)                                            \
          {                                                                      \
            float gc = g[c];                                                     \
            gint32 ac = a[c];                                                    \
                                                                                 \
            q0[c] = ac == 0 ? gc : 0.0f;                                         \
            q1[c] = ac == 1 ? gc : 0.0f;                                         \
            q2[c] = ac == 2 ? gc : 0.0f;                                         \
            q3[c] = ac == 3 ? gc : 0.0f;                                         \
            db[c] += ac < 4 ? gc : 0.0f;                                         \
          }                                                                      \
      }                                                                          \
}

DEFINE_POOL (pool16, C1)
DEFINE_POOL (pool32, C2)
DEFINE_UNPOOL (unpool16, C1)
DEFINE_UNPOOL (unpool32, C2)

/* dst[i] += src[i] */
HOT static void
add_to (float *restrict dst, const float *restrict src, gsize n)
{
  for (gsize i = 0; i < n; i++)
    dst[i] += src[i];
}

/* One chunk: forward to logits (into self->logits + s0*10); with @grads,
 * backward with d loss/d logits scaled by @scale, accumulating (@first:
 * writing) the weight gradients. Returns the chunk's summed loss.
 *
 * The GEMMs produce the conv outputs channels-last ([pixel][channel], the
 * transpose of W × cols) so that pooling runs across channels. */
static double
cnn_chunk (CnnWork *self, const float *params, const float *x, const guint8 *labels,
           guint s0, guint ns, float scale, float *grads, gboolean first)
{
  const RlxModel *m = self->model;
  const float *w1 = params + m->tensors[0].offset, *b1 = params + m->tensors[1].offset;
  const float *w2 = params + m->tensors[2].offset, *b2 = params + m->tensors[3].offset;
  const float *w3 = params + m->tensors[4].offset, *b3 = params + m->tensors[5].offset;
  float *logits = self->logits + (gsize) s0 * RLX_N_CLASSES;
  float *dlogits = self->dlogits + (gsize) s0 * RLX_N_CLASSES;
  float beta = first ? 0.0f : 1.0f;
  double loss = 0.0;

  /* conv1 (+ bias, ReLU, pool) into the padded planes of p1 */
  cnn_im2col1 (self, x + (gsize) s0 * RLX_INPUT_LEN, ns);
  self->sgemm (CblasRowMajor, CblasTrans, CblasTrans, ns * N1, C1, 9,
               1.0f, self->cols1, self->ld1, w1, 9, 0.0f, self->conv1, C1);
  for (guint s = 0; s < ns; s++)
    pool16 (self->conv1 + (gsize) s * N1 * C1, W1P, 28, b1,
            self->p1 + (gsize) s * C1 * PP + W2P + 1, PP, W2P,
            self->a1 + (gsize) s * C1 * 196);

  /* conv2 (+ bias, ReLU, pool) into pool2 [s][c][7][7] */
  cnn_im2col2 (self, ns);
  self->sgemm (CblasRowMajor, CblasTrans, CblasTrans, ns * N2, C2, K2,
               1.0f, self->cols2, self->ld2, w2, K2, 0.0f, self->conv2, C2);
  for (guint s = 0; s < ns; s++)
    pool32 (self->conv2 + (gsize) s * N2 * C2, W2P, 14, b2,
            self->pool2 + (gsize) s * FLAT, P3, 7, self->a2 + (gsize) s * FLAT);

  /* dense 1568 → 10 */
  self->sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, ns, RLX_N_CLASSES, FLAT,
               1.0f, self->pool2, FLAT, w3, FLAT, 0.0f, logits, RLX_N_CLASSES);
  bias_act (logits, b3, ns, RLX_N_CLASSES, FALSE);
  if (labels == NULL)
    return 0.0;
  loss = softmax_xent (logits, labels + s0, ns, scale, grads ? dlogits : NULL);
  if (grads == NULL)
    return loss;

  {
    float *dw1 = grads + m->tensors[0].offset, *db1 = grads + m->tensors[1].offset;
    float *dw2 = grads + m->tensors[2].offset, *db2 = grads + m->tensors[3].offset;
    float *dw3 = grads + m->tensors[4].offset, *db3 = grads + m->tensors[5].offset;

    if (first)
      {
        memset (db1, 0, C1 * sizeof (float));
        memset (db2, 0, C2 * sizeof (float));
      }

    /* dense */
    self->sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, RLX_N_CLASSES, FLAT, ns,
                 1.0f, dlogits, RLX_N_CLASSES, self->pool2, FLAT, beta, dw3, FLAT);
    column_sums (dlogits, ns, RLX_N_CLASSES, db3, !first);
    self->sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, ns, FLAT, RLX_N_CLASSES,
                 1.0f, dlogits, RLX_N_CLASSES, w3, FLAT, 0.0f, self->dpool2, FLAT);

    /* pool2 + ReLU backward into dconv2, then conv2's weights and input */
    for (guint s = 0; s < ns; s++)
      unpool32 (self->dpool2 + (gsize) s * FLAT, P3, 7, self->a2 + (gsize) s * FLAT, 14,
                self->dconv2 + (gsize) s * N2 * C2, W2P, db2);
    self->sgemm (CblasRowMajor, CblasTrans, CblasTrans, C2, K2, ns * N2,
                 1.0f, self->dconv2, C2, self->cols2, self->ld2, beta, dw2, K2);
    self->sgemm (CblasRowMajor, CblasTrans, CblasTrans, K2, ns * N2, C2,
                 1.0f, w2, K2, self->dconv2, C2, 0.0f, self->dcols2, self->ld2);

    /* col2im into padded planes dp1 (border sums are ignored) */
    memset (self->dp1, 0, (gsize) ns * C1 * PP * sizeof (float));
    for (guint c = 0; c < C1; c++)
      for (guint k = 0; k < 9; k++)
        {
          const float *row = self->dcols2 + (gsize) (c * 9 + k) * self->ld2;

          for (guint s = 0; s < ns; s++)
            add_to (self->dp1 + ((gsize) s * C1 + c) * PP + (k / 3) * W2P + k % 3,
                    row + (gsize) s * N2, N2);
        }

    /* pool1 + ReLU backward into dconv1, then conv1's weights */
    for (guint s = 0; s < ns; s++)
      unpool16 (self->dp1 + (gsize) s * C1 * PP + W2P + 1, PP, W2P,
                self->a1 + (gsize) s * C1 * 196, 28,
                self->dconv1 + (gsize) s * N1 * C1, W1P, db1);
    self->sgemm (CblasRowMajor, CblasTrans, CblasTrans, C1, 9, ns * N1,
                 1.0f, self->dconv1, C1, self->cols1, self->ld1, beta, dw1, 9);
  }
  return loss;
}

static void
cnn_work (CnnWork *w)
{
  guint chunk = w->chunk;

  w->loss = 0.0;
  w->wrote = FALSE;
  for (guint s0 = w->index * chunk; s0 < w->n; s0 += CNN_LANES * chunk)
    {
      w->loss += cnn_chunk (w, w->params, w->x, w->labels, s0, MIN (chunk, w->n - s0),
                            1.0f / (float) w->n, w->want_grads ? w->out_grads : NULL,
                            !w->wrote);
      w->wrote = TRUE;
    }
}

static gpointer
cnn_helper (gpointer data)
{
  CnnWork *w = data;
  RlxCpuTrainer *self = w->trainer;
  guint seen = 0;

  rlx_fp_mode_enter_fast ();   /* training arithmetic (rlx-fp-mode.h) */
  g_mutex_lock (&self->lock);
  for (;;)
    {
      while (!self->quit && self->generation == seen)
        g_cond_wait (&self->cond, &self->lock);
      if (self->quit)
        break;
      seen = self->generation;
      g_mutex_unlock (&self->lock);
      cnn_work (w);
      g_mutex_lock (&self->lock);
      self->pending = 0;
      g_cond_broadcast (&self->cond);
    }
  g_mutex_unlock (&self->lock);
  return NULL;
}

static double
cnn_run (RlxCpuTrainer *self, const float *params, const float *x, const guint8 *labels,
         guint n, float *grads)
{
  double loss = 0.0;

  /* The lanes' GEMMs are small; two single-threaded ones side by side beat
   * one split across threads. */
  blas_threads (1);
  for (guint i = 0; i < CNN_LANES; i++)
    {
      CnnWork *w = &self->work[i];

      w->params = params;
      w->x = x;
      w->labels = labels;
      w->n = n;
      w->want_grads = grads != NULL;
      w->out_grads = i == 0 ? grads : w->grads;
    }
  if (self->helper != NULL && n > self->work[0].chunk)
    {
      g_mutex_lock (&self->lock);
      self->generation++;
      self->pending = 1;
      g_cond_broadcast (&self->cond);
      g_mutex_unlock (&self->lock);
      cnn_work (&self->work[0]);
      g_mutex_lock (&self->lock);
      while (self->pending > 0)
        g_cond_wait (&self->cond, &self->lock);
      g_mutex_unlock (&self->lock);
    }
  else
    for (guint i = 0; i < CNN_LANES; i++)
      cnn_work (&self->work[i]);

  for (guint i = 0; i < CNN_LANES; i++)
    {
      CnnWork *w = &self->work[i];

      loss += w->loss;
      if (i > 0 && grads != NULL && w->wrote)
        add_to (grads, w->grads, self->model->n_params);
    }
  return loss;
}

/* ------------------------------------------------------------------ public */

void
rlx_cpu_trainer_set_f16 (RlxCpuTrainer *self, RlxCpuF16Rule rule, RlxCpuF16Scale scale)
{
  gsize len = 0;

  g_return_if_fail (self != NULL);
  g_clear_pointer (&self->f16_a, g_free);
  g_clear_pointer (&self->f16_b, g_free);
  self->f16_len = 0;
  self->f16_rule = self->model->id == RLX_MODEL_MNIST_CNN ? NULL : rule;
  self->f16_scale = self->f16_rule != NULL ? scale : NULL;
  if (self->f16_rule == NULL)
    return;
  /* the largest operand: a layer's input or output gradient, or its weights */
  for (guint l = 0; l < self->n_layers; l++)
    {
      len = MAX (len, (gsize) self->max_batch * MAX (self->width[l], self->width[l + 1]));
      len = MAX (len, (gsize) self->width[l] * self->width[l + 1]);
    }
  self->f16_a = alloc_floats (len);
  self->f16_b = alloc_floats (len);
  self->f16_len = len;
}

float
rlx_cpu_trainer_grads (RlxCpuTrainer *self, const float *params,
                       const float *x, const guint8 *labels, guint n,
                       float *grads)
{
  double loss;

  g_return_val_if_fail (self != NULL, NAN);
  g_return_val_if_fail (params != NULL && x != NULL && labels != NULL, NAN);
  g_return_val_if_fail (n >= 1 && n <= self->max_batch, NAN);

  if (self->model->id == RLX_MODEL_MNIST_CNN)
    return (float) (cnn_run (self, params, x, labels, n, grads) / n);

  blas_threads (threads_wanted ());
  mlp_forward (self, params, x, n);
  loss = softmax_xent (self->logits, labels, n, 1.0f / (float) n, grads ? self->dlogits : NULL);
  if (grads != NULL)
    mlp_backward (self, params, x, n, grads);
  return (float) (loss / n);
}

static void
forward (RlxCpuTrainer *self, const float *params, const float *x, guint n)
{
  if (self->model->id == RLX_MODEL_MNIST_CNN)
    cnn_run (self, params, x, NULL, n, NULL);
  else
    {
      blas_threads (threads_wanted ());
      mlp_forward (self, params, x, n);
    }
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

/* No FMA contraction: every replica, whatever its compiler flags, must round
 * lr * grad and the subtraction separately to stay bit-identical. */
__attribute__ ((optimize ("fp-contract=off"))) void
rlx_sgd_step (float *params, const float *grads, gsize n, float lr)
{
  g_return_if_fail (params != NULL || n == 0);
  g_return_if_fail (grads != NULL || n == 0);

  for (gsize i = 0; i < n; i++)
    params[i] -= lr * grads[i];
}

gboolean
rlx_cpu_evaluate_cancellable (RlxCpuTrainer *self, const float *params,
                              const RlxDataset *dataset, RlxSplit split,
                              GCancellable *cancellable, double *accuracy_out,
                              double *loss_out)
{
  guint size, chunk, correct = 0;
  double loss_sum = 0.0;
  g_autofree float *x = NULL;
  g_autofree guint32 *idx = NULL;
  g_autofree guint8 *labels = NULL;

  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (params != NULL && dataset != NULL, FALSE);

  size = rlx_dataset_size (dataset, split);
  chunk = MIN (self->max_batch, 256u);
  x = g_new (float, (gsize) chunk * RLX_INPUT_LEN);
  idx = g_new (guint32, chunk);
  labels = g_new (guint8, chunk);

  for (guint start = 0; start < size; start += chunk)
    {
      guint n = MIN (chunk, size - start);

      if (g_cancellable_is_cancelled (cancellable))
        return FALSE;
      for (guint k = 0; k < n; k++)
        idx[k] = start + k;
      rlx_dataset_gather (dataset, split, idx, n, x, labels);
      forward (self, params, x, n);
      loss_sum += softmax_xent (self->logits, labels, n, 1.0f, NULL);
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
  if (accuracy_out != NULL)
    *accuracy_out = size ? (double) correct / size : 0.0;
  return TRUE;
}

double
rlx_cpu_evaluate (RlxCpuTrainer *self, const float *params,
                  const RlxDataset *dataset, RlxSplit split, double *loss_out)
{
  double accuracy = 0.0;

  rlx_cpu_evaluate_cancellable (self, params, dataset, split, NULL, &accuracy, loss_out);
  return accuracy;
}

void
rlx_cpu_set_threads (guint n)
{
  g_atomic_int_set (&wanted_threads, MIN (n, 256u));
}

guint
rlx_cpu_threads (void)
{
  return threads_wanted ();
}

const char *
rlx_cpu_blas_name (void)
{
  return rlx_blas ()->name;
}
