/* test-grads.c — the CPU trainer's gradients against central differences
 *
 * An independent double-precision forward pass of each model (direct loops,
 * no BLAS, no im2col) gives the loss; central differences of it at sampled
 * elements of every parameter tensor must match the trainer's f32 analytic
 * gradient. Elements whose ±eps evaluations cross a ReLU or max-pool kink
 * (any ReLU sign or pool argmax decision changes) are skipped.
 */
#include "rlx-config.h"
#include "core/vision/rlx-cpu.h"
#include "core/vision/rlx-philox.h"

#include <math.h>
#include <string.h>

/* 11 samples for the CNN: more than one of the trainer's chunks. */
#define MAX_BATCH 11

typedef struct {
  guint64 decisions;   /* hash of every ReLU sign and pool argmax */
} Trace;

static void
trace_add (Trace *t, guint v)
{
  t->decisions = (t->decisions ^ v) * G_GUINT64_CONSTANT (0x100000001b3);
}

static double
xent (const double *logits, guint label)
{
  double m = logits[0], s = 0;

  for (guint j = 1; j < 10; j++)
    m = MAX (m, logits[j]);
  for (guint j = 0; j < 10; j++)
    s += exp (logits[j] - m);
  return log (s) + m - logits[label];
}

/* Dense layers of an MLP: in[fi] → out[fo] */
static void
dense (const double *p, const RlxTensorInfo *w, const RlxTensorInfo *b,
       const double *in, double *out, gboolean relu, Trace *t)
{
  guint fo = w->shape[0], fi = w->shape[1];

  for (guint o = 0; o < fo; o++)
    {
      double acc = p[b->offset + o];

      for (guint i = 0; i < fi; i++)
        acc += p[w->offset + (gsize) o * fi + i] * in[i];
      if (relu)
        {
          trace_add (t, acc > 0);
          acc = acc > 0 ? acc : 0;
        }
      out[o] = acc;
    }
}

/* conv3x3 pad 1 (cin → cout, side) + bias + ReLU + maxpool 2 */
static void
conv_relu_pool (const double *p, const RlxTensorInfo *w, const RlxTensorInfo *b,
                const double *in, guint cin, guint side, double *out, Trace *t)
{
  guint cout = w->shape[0], half = side / 2;
  g_autofree double *conv = g_new (double, (gsize) cout * side * side);

  for (guint o = 0; o < cout; o++)
    for (guint y = 0; y < side; y++)
      for (guint x = 0; x < side; x++)
        {
          double acc = p[b->offset + o];

          for (guint c = 0; c < cin; c++)
            for (int ky = 0; ky < 3; ky++)
              for (int kx = 0; kx < 3; kx++)
                {
                  int sy = (int) y + ky - 1, sx = (int) x + kx - 1;

                  if (sy < 0 || sx < 0 || sy >= (int) side || sx >= (int) side)
                    continue;
                  acc += p[w->offset + ((gsize) (o * cin + c) * 3 + ky) * 3 + kx] *
                         in[((gsize) c * side + sy) * side + sx];
                }
          conv[((gsize) o * side + y) * side + x] = acc;
        }
  for (guint o = 0; o < cout; o++)
    for (guint y = 0; y < half; y++)
      for (guint x = 0; x < half; x++)
        {
          const double *q = conv + ((gsize) o * side + 2 * y) * side + 2 * x;
          double v[4] = { q[0], q[1], q[side], q[side + 1] };
          guint best = 0;

          for (guint k = 1; k < 4; k++)
            if (v[k] > v[best])
              best = k;
          /* The argmax matters only where the max survives the ReLU. */
          trace_add (t, v[best] > 0 ? 1 + best : 0);
          out[((gsize) o * half + y) * half + x] = MAX (v[best], 0.0);
        }
}

static double
reference_loss (const RlxModel *m, const double *p, const float *x,
                const guint8 *labels, guint n, Trace *t)
{
  double total = 0;
  g_autofree double *a = g_new (double, 1568 * 4);
  g_autofree double *b = g_new (double, 1568 * 4);

  t->decisions = 0;
  for (guint s = 0; s < n; s++)
    {
      double logits[10];

      for (guint i = 0; i < RLX_INPUT_LEN; i++)
        a[i] = x[(gsize) s * RLX_INPUT_LEN + i];
      if (m->id == RLX_MODEL_MNIST_CNN)
        {
          conv_relu_pool (p, &m->tensors[0], &m->tensors[1], a, 1, 28, b, t);
          conv_relu_pool (p, &m->tensors[2], &m->tensors[3], b, 16, 14, a, t);
          dense (p, &m->tensors[4], &m->tensors[5], a, logits, FALSE, t);
        }
      else
        {
          guint L = m->n_tensors / 2;
          double *in = a, *out = b;

          for (guint l = 0; l + 1 < L; l++)
            {
              dense (p, &m->tensors[2 * l], &m->tensors[2 * l + 1], in, out, TRUE, t);
              double *tmp = in; in = out; out = tmp;
            }
          dense (p, &m->tensors[2 * L - 2], &m->tensors[2 * L - 1], in, logits, FALSE, t);
        }
      total += xent (logits, labels[s]);
    }
  return total / n;
}

static void
check_model (RlxModelId id)
{
  const RlxModel *m = rlx_model_get (id);
  const guint BATCH = id == RLX_MODEL_MNIST_CNN ? MAX_BATCH : 3;
  g_autoptr(RlxCpuTrainer) tr = rlx_cpu_trainer_new (m, BATCH);
  g_autofree float *params = g_new (float, m->n_params);
  g_autofree float *grads = g_new (float, m->n_params);
  g_autofree double *p = g_new (double, m->n_params);
  float x[MAX_BATCH * RLX_INPUT_LEN];
  guint8 labels[MAX_BATCH];
  const guint32 key[2] = { 1234, id };
  float loss;
  double ref;
  Trace t0;

  /* Inputs: smooth-ish random images; labels 0..9. */
  for (guint i = 0; i < BATCH * RLX_INPUT_LEN; i += 4)
    {
      guint32 ctr[4] = { i, 0, 0, 0 }, out[4];

      rlx_philox4x32_10 (ctr, key, out);
      for (guint k = 0; k < 4; k++)
        x[i + k] = rlx_philox_uniform (out[k]);
    }
  for (guint s = 0; s < BATCH; s++)
    labels[s] = (guint8) (3 * s + id) % 10;

  rlx_model_init_params (m, 99 + id, params);
  loss = rlx_cpu_trainer_grads (tr, params, x, labels, BATCH, grads);
  for (gsize i = 0; i < m->n_params; i++)
    p[i] = params[i];
  ref = reference_loss (m, p, x, labels, BATCH, &t0);
  g_test_message ("%s: loss f32 %.7f, f64 %.7f", m->slug, loss, ref);
  g_assert_cmpfloat (fabs (loss - ref), <, 1e-5 * MAX (1.0, fabs (ref)));

  for (guint ti = 0; ti < m->n_tensors; ti++)
    {
      const RlxTensorInfo *info = &m->tensors[ti];
      const double eps = 1e-6;
      guint checked = 0, skipped = 0, nonzero = 0;
      double gmax = 0;
      gsize largest = 0;

      for (gsize e = 0; e < info->numel; e++)
        if (fabs (grads[info->offset + e]) > gmax)
          {
            gmax = fabs (grads[info->offset + e]);
            largest = e;
          }
      g_assert_cmpfloat (gmax, >, 0);

      for (guint k = 0; checked < 16 && k < 64; k++)
        {
          guint32 ctr[4] = { k, ti, 1, 0 }, out[4];
          gsize e, idx;
          double save, lp, lm, num, ana;
          Trace tp, tm;

          rlx_philox4x32_10 (ctr, key, out);
          e = k == 0 ? largest : out[0] % info->numel;
          idx = info->offset + e;
          save = p[idx];
          p[idx] = save + eps;
          lp = reference_loss (m, p, x, labels, BATCH, &tp);
          p[idx] = save - eps;
          lm = reference_loss (m, p, x, labels, BATCH, &tm);
          p[idx] = save;
          if (tp.decisions != t0.decisions || tm.decisions != t0.decisions)
            {
              skipped++;
              continue;
            }
          num = (lp - lm) / (2 * eps);
          ana = grads[idx];
          if (fabs (num - ana) > 1e-4 * gmax + 1e-3 * fabs (num))
            g_error ("%s %s[%" G_GSIZE_FORMAT "]: analytic %.8g, numeric %.8g (largest |g| %.3g)",
                     m->slug, info->name, e, ana, num, gmax);
          checked++;
          nonzero += fabs (num) > 1e-3 * gmax;
        }
      g_test_message ("%s %s: %u elements checked, %u skipped at kinks, %u non-zero, max |g| %.3g",
                      m->slug, info->name, checked, skipped, nonzero, gmax);
      g_assert_cmpuint (checked, >=, 12);
      g_assert_cmpuint (nonzero, >=, 1);
    }
}

static void
test_mlp (void)
{
  check_model (RLX_MODEL_MNIST_MLP);
}

static void
test_mlp_xl (void)
{
  check_model (RLX_MODEL_MNIST_MLP_XL);
}

static void
test_cnn (void)
{
  check_model (RLX_MODEL_MNIST_CNN);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/vision/grads/mnist-mlp", test_mlp);
  g_test_add_func ("/vision/grads/mnist-mlp-xl", test_mlp_xl);
  g_test_add_func ("/vision/grads/mnist-cnn", test_cnn);
  return g_test_run ();
}
