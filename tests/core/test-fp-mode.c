/* test-fp-mode.c — every kind of thread computes in its mode
 * (core/util/rlx-fp-mode.h)
 *
 * Fast (subnormals flushed): the compute worker, OpenBLAS's pool threads,
 * the CNN trainer's helper and GTask functions run through
 * rlx_fp_task_run_in_thread (the evaluations). Exact (subnormals kept),
 * even when called from a fast thread: the round kernels' helper threads and
 * the caller's share of their chunks, the wire codec and the outer round's
 * arithmetic. Each case computes with subnormal values on that kind of
 * thread and checks the bits: a flushed result is 0, a kept one is not.
 * The threads are made from this (exact) test thread, as the rank makes its
 * pools from its main thread, so a thread that does not set its own mode
 * would show the wrong one.
 */
#include "rlx-config.h"
#include "core/rlx-kernels.h"
#include "core/rlx-worker.h"
#include "core/cohort/rlx-outer.h"
#include "core/util/rlx-fp-mode.h"
#include "core/vision/rlx-blas-private.h"
#include "core/vision/rlx-cpu.h"
#include "core/vision/rlx-dataset.h"
#include "core/wire/rlx-wire.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define TINY 1e-40f   /* subnormal */

/* a * b, not folded at compile time */
static float
product (float a, float b)
{
  volatile float x = a, y = b;

  return x * y;
}

static gboolean
is_subnormal (float x)
{
  return x != 0.0f && fabsf (x) < FLT_MIN;
}

/* ── fast ─────────────────────────────────────────────────────────────── */

typedef struct {
  float    result;
  gboolean fast;
  gboolean done;
} Product;

static gboolean
worker_product (RlxBackend *backend, gpointer data, GError **error)
{
  Product *p = data;

  p->result = product (1e-20f, 1e-20f);   /* 1e-40: subnormal, so 0 when flushed */
  p->fast = rlx_fp_mode_is_fast ();
  return TRUE;
}

static void
worker_done (RlxWorker *worker, gpointer data, const GError *error, gpointer user_data)
{
  g_assert_no_error ((GError *) error);
  ((Product *) data)->done = TRUE;
}

static void
test_worker (void)
{
  g_autoptr(GError) error = NULL;
  const RlxModel *model = rlx_model_lookup ("mnist-mlp", &error);
  g_autoptr(RlxDataset) dataset = rlx_dataset_open ("synthetic", 42, &error);
  RlxBackend *backend;
  RlxWorker *worker;
  Product p = { -1.0f, FALSE, FALSE };

  g_assert_no_error (error);
  g_assert_false (rlx_fp_mode_is_fast ());
  backend = rlx_backend_resolve ("cpu", model, dataset, 16, &error);
  g_assert_no_error (error);
  worker = rlx_worker_new (backend);
  rlx_worker_queue (worker, worker_product, worker_done, &p, NULL, NULL);
  while (!p.done)
    g_main_context_iteration (NULL, TRUE);
  rlx_worker_free (worker);
  g_assert_true (p.fast);
  g_assert_cmpfloat (p.result, ==, 0.0f);
  /* and here, where nothing set it, subnormals are kept */
  g_assert_true (is_subnormal (product (1e-20f, 1e-20f)));
}

static void
task_product (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  Product *p = data;

  p->result = product (1e-20f, 1e-20f);
  p->fast = rlx_fp_mode_is_fast ();
  g_task_return_boolean (task, TRUE);
}

static void
task_done (GObject *source, GAsyncResult *result, gpointer data)
{
  g_assert_true (g_task_propagate_boolean (G_TASK (result), NULL));
  ((Product *) data)->done = TRUE;
}

/* the evaluations' threads: GLib's pool, whatever mode it made them with */
static void
test_task (void)
{
  for (guint round = 0; round < 3; round++)
    {
      Product p = { -1.0f, FALSE, FALSE };
      g_autoptr(GTask) task = g_task_new (NULL, NULL, task_done, &p);

      g_task_set_task_data (task, &p, NULL);
      rlx_fp_task_run_in_thread (task, task_product);
      g_clear_object (&task);
      while (!p.done)
        g_main_context_iteration (NULL, TRUE);
      g_assert_true (p.fast);
      g_assert_cmpfloat (p.result, ==, 0.0f);
    }
}

/* OpenBLAS's pool: C = A·B with A subnormal reads A as 0 on every thread
 * (denormals-are-zero), so every element of C is 0, also the rows that the
 * pool threads computed. */
static void
test_blas (void)
{
  const RlxBlas *blas = rlx_blas ();
  const int m = 512, n = 512, k = 64;
  g_autofree float *a = g_new (float, m * k);
  g_autofree float *b = g_new (float, k * n);
  g_autofree float *c = g_new0 (float, m * n);
  gsize nonzero = 0;

  for (int i = 0; i < m * k; i++)
    a[i] = TINY;
  for (int i = 0; i < k * n; i++)
    b[i] = 1.0f;
  blas->set_num_threads (MAX (2, (int) g_get_num_processors ()));
  g_assert_cmpint (blas->get_num_threads (), >=, 2);
  for (guint round = 0; round < 5; round++)
    {
      blas->sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n,
                   0.0f, c, n);
      for (int i = 0; i < m * n; i++)
        nonzero += c[i] != 0.0f;
    }
  blas->set_num_threads (1);
  g_assert_cmpuint (nonzero, ==, 0);
  /* its caller's mode is its own again */
  g_assert_false (rlx_fp_mode_is_fast ());
}

/* the CNN's second lane runs on a helper made with the trainer: with every
 * parameter subnormal (read as 0), every logit is exactly 0 */
static gpointer
cnn_forward (gpointer data)
{
  RlxCpuTrainer *trainer = data;
  const RlxModel *model = rlx_cpu_trainer_model (trainer);
  const guint n = 64;
  g_autofree float *params = g_new (float, model->n_params);
  g_autofree float *x = g_new (float, n * RLX_INPUT_LEN);
  g_autofree float *logits = g_new (float, n * RLX_N_CLASSES);
  gsize nonzero = 0;

  rlx_fp_mode_enter_fast ();   /* as the worker and the evaluations are */
  for (gsize i = 0; i < model->n_params; i++)
    params[i] = TINY;
  for (gsize i = 0; i < n * RLX_INPUT_LEN; i++)
    x[i] = (float) (i % 7) / 7.0f;
  rlx_cpu_trainer_forward (trainer, params, x, n, logits);
  for (gsize i = 0; i < n * RLX_N_CLASSES; i++)
    nonzero += logits[i] != 0.0f;
  return GSIZE_TO_POINTER (nonzero);
}

static void
test_cnn_helper (void)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_CNN);
  RlxCpuTrainer *trainer;
  gsize nonzero;

  rlx_cpu_set_threads (2);
  trainer = rlx_cpu_trainer_new (model, 64);   /* its helper made here */
  nonzero = GPOINTER_TO_SIZE (g_thread_join (g_thread_new ("cnn", cnn_forward, trainer)));
  rlx_cpu_trainer_free (trainer);
  rlx_cpu_set_threads (0);
  g_assert_cmpuint (nonzero, ==, 0);
}

/* ── exact, from a fast thread ────────────────────────────────────────── */

/* 0 − TINY on the pool's threads and the caller's: −TINY everywhere */
static gpointer
kernels_apply (gpointer data)
{
  RlxKernels *pool = data;
  const gsize n = 1 << 20;
  g_autofree float *params = g_new (float, n);
  g_autofree float *codes = g_new (float, n);
  const float want = -TINY;
  gsize wrong = 0;

  rlx_fp_mode_enter_fast ();
  for (gsize i = 0; i < n; i++)
    codes[i] = TINY;
  for (guint round = 0; round < 20; round++)
    {
      memset (params, 0, n * sizeof (float));
      rlx_kernels_apply (pool, params, codes, n, RLX_PRECISION_F32, 1.0, NULL);
      for (gsize i = 0; i < n; i++)
        wrong += memcmp (&params[i], &want, 4) != 0;
    }
  /* the caller's mode is its own again */
  g_assert_true (rlx_fp_mode_is_fast ());
  return GSIZE_TO_POINTER (wrong);
}

static void
test_kernels (void)
{
  g_autoptr(RlxKernels) pool = NULL;
  gsize wrong;

  /* made on a fast thread, as the worker would: the helpers inherit fast */
  rlx_fp_mode_enter_fast ();
  pool = rlx_kernels_new (4);
  rlx_fp_mode_enter_exact ();
  wrong = GPOINTER_TO_SIZE (g_thread_join (g_thread_new ("apply", kernels_apply, pool)));
  g_assert_cmpuint (wrong, ==, 0);
}

typedef struct {
  float out[4], outer, momentum, sum;
  gboolean fast;
} CodecOuter;

static gpointer
codec_and_outer (gpointer data)
{
  CodecOuter *r = data;
  float in[4] = { TINY, -TINY, 3e-39f, 0.0f };
  float update[1] = { TINY };

  rlx_fp_mode_enter_fast ();
  /* decoding a subnormal f32 from f16 codes: (float) (code / scale) */
  rlx_wire_round_trip (in, r->out, 4, RLX_PRECISION_F16);
  /* θ − d and the momentum from d, on every replica */
  r->outer = r->momentum = 0.0f;
  rlx_outer_apply (&r->outer, &r->momentum, update, 1, 0.7, 0.9);
  /* the leader's weighted sum */
  rlx_outer_accumulate (&r->sum, update, 1, TRUE, 1);
  r->fast = rlx_fp_mode_is_fast ();
  return NULL;
}

static void
test_codec_and_outer (void)
{
  CodecOuter r = { { 0 } };

  g_thread_join (g_thread_new ("codec", codec_and_outer, &r));
  g_test_message ("round trip %g %g %g, outer %g, momentum %g, sum %g", r.out[0], r.out[1],
                  r.out[2], r.outer, r.momentum, r.sum);
  g_assert_true (is_subnormal (r.out[0]) && is_subnormal (r.out[1]) && is_subnormal (r.out[2]));
  g_assert_cmpfloat (r.outer, ==, -TINY);
  g_assert_true (is_subnormal (r.momentum));
  g_assert_cmpfloat (r.sum, ==, TINY);
  g_assert_true (r.fast);   /* the caller's mode is its own again */
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (!RLX_FP_HAVE_MODE)
    {
      g_test_skip ("no SSE control register on this platform: every thread is exact");
      return g_test_run ();
    }
  /* first: OpenBLAS is loaded here, on this exact thread */
  g_test_add_func ("/fp-mode/blas-pool", test_blas);
  g_test_add_func ("/fp-mode/worker", test_worker);
  g_test_add_func ("/fp-mode/task", test_task);
  g_test_add_func ("/fp-mode/cnn-helper", test_cnn_helper);
  g_test_add_func ("/fp-mode/kernels", test_kernels);
  g_test_add_func ("/fp-mode/codec-and-outer", test_codec_and_outer);
  return g_test_run ();
}
