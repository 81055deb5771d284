/* test-train.c — the properties the cohort rests on (cluster-worker.rs's
 * tests), on the CPU trainer and the synthetic dataset:
 *   two half-batch shards average to the full-batch gradient;
 *   replicas applying the same update stay bit-identical;
 *   a replica that adopts another's parameters computes identical gradients;
 *   the loss falls; the bucket is as long as the parameter vector.
 */
#include "rlx-config.h"
#include "core/vision/rlx-cpu.h"

#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static RlxDataset *synthetic;

/* Loss and gradient of training samples [start, start+n) in file order. */
static float
grads_at (RlxCpuTrainer *tr, const float *params, guint start, guint n, float *grads)
{
  g_autofree float *x = g_new (float, (gsize) n * RLX_INPUT_LEN);
  g_autofree guint32 *idx = g_new (guint32, n);
  g_autofree guint8 *labels = g_new (guint8, n);

  for (guint i = 0; i < n; i++)
    idx[i] = start + i;
  rlx_dataset_gather (synthetic, RLX_SPLIT_TRAIN, idx, n, x, labels);
  return rlx_cpu_trainer_grads (tr, params, x, labels, n, grads);
}

static void
test_layout (void)
{
  static const char *const names[RLX_N_MODELS][6] = {
    { "1.weight", "1.bias", "3.weight", "3.bias" },
    { "1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias" },
    { "0.weight", "0.bias", "3.weight", "3.bias", "7.weight", "7.bias" },
  };
  static const gsize n_params[RLX_N_MODELS] = { 101770, 1863690, 20490 };
  g_autoptr(GError) error = NULL;

  for (guint id = 0; id < RLX_N_MODELS; id++)
    {
      const RlxModel *m = rlx_model_get (id);
      gsize offset = 0;

      g_assert_true (rlx_model_lookup (m->slug, NULL) == m);
      g_assert_cmpuint (m->n_params, ==, n_params[id]);
      for (guint t = 0; t < m->n_tensors; t++)
        {
          const RlxTensorInfo *ti = &m->tensors[t];
          gsize numel = 1;

          g_assert_cmpstr (ti->name, ==, names[id][t]);
          for (guint d = 0; d < ti->rank; d++)
            numel *= ti->shape[d];
          g_assert_cmpuint (ti->numel, ==, numel);
          g_assert_cmpuint (ti->offset, ==, offset);
          offset += numel;
        }
      g_assert_cmpuint (offset, ==, m->n_params);
    }
  g_assert_null (rlx_model_lookup ("resnet", &error));
  g_assert_error (error, RLX_MODEL_ERROR, RLX_MODEL_ERROR_UNKNOWN);
  g_assert_nonnull (strstr (error->message, "mnist-cnn"));
}

/* The gradient bucket is exactly n_params long: the trainer writes every
 * element (a NaN canary before and after) and nothing past the end. */
static void
test_bucket_length (void)
{
  for (guint id = 0; id < RLX_N_MODELS; id++)
    {
      const RlxModel *m = rlx_model_get (id);
      g_autoptr(RlxCpuTrainer) tr = rlx_cpu_trainer_new (m, 2);
      g_autofree float *params = g_new (float, m->n_params);
      g_autofree float *bucket = g_new (float, m->n_params + 2);

      rlx_model_init_params (m, 1, params);
      for (gsize i = 0; i < m->n_params + 2; i++)
        bucket[i] = NAN;
      grads_at (tr, params, 0, 2, bucket + 1);
      g_assert_true (isnan (bucket[0]));
      g_assert_true (isnan (bucket[m->n_params + 1]));
      for (gsize i = 1; i <= m->n_params; i++)
        g_assert_true (isfinite (bucket[i]));
    }
}

static void
test_shards_average (void)
{
  for (guint id = 0; id < RLX_N_MODELS; id++)
    {
      const RlxModel *m = rlx_model_get (id);
      g_autoptr(RlxCpuTrainer) full = rlx_cpu_trainer_new (m, 20);
      g_autoptr(RlxCpuTrainer) half = rlx_cpu_trainer_new (m, 10);
      g_autofree float *params = g_new (float, m->n_params);
      g_autofree float *g = g_new (float, m->n_params);
      g_autofree float *ga = g_new (float, m->n_params);
      g_autofree float *gb = g_new (float, m->n_params);
      float lf, la, lb, worst = 0;

      rlx_model_init_params (m, 42, params);
      lf = grads_at (full, params, 0, 20, g);
      la = grads_at (half, params, 0, 10, ga);
      lb = grads_at (half, params, 10, 10, gb);
      for (gsize i = 0; i < m->n_params; i++)
        worst = MAX (worst, fabsf (0.5f * (ga[i] + gb[i]) - g[i]));
      g_test_message ("%s: shard average differs from full batch by %g", m->slug, worst);
      g_assert_cmpfloat (worst, <, 1e-5);
      g_assert_cmpfloat (fabsf (0.5f * (la + lb) - lf), <, 1e-5);
    }
}

static void
test_replicas_stay_identical (void)
{
  for (guint id = 0; id < RLX_N_MODELS; id++)
    {
      const RlxModel *m = rlx_model_get (id);
      /* Different scratch sizes, as ranks with different batches have. */
      g_autoptr(RlxCpuTrainer) ta = rlx_cpu_trainer_new (m, 4);
      g_autoptr(RlxCpuTrainer) tb = rlx_cpu_trainer_new (m, 64);
      g_autofree float *a = g_new (float, m->n_params);
      g_autofree float *b = g_new (float, m->n_params);
      g_autofree float *ga = g_new (float, m->n_params);
      g_autofree float *gb = g_new (float, m->n_params);
      g_autofree float *avg = g_new (float, m->n_params);
      guint steps = id == RLX_MODEL_MNIST_MLP ? 100 : 10;
      guint64 h0;

      rlx_model_init_params (m, 7, a);
      rlx_model_init_params (m, 7, b);
      h0 = rlx_params_hash (a, m->n_params);
      for (guint step = 0; step < steps; step++)
        {
          grads_at (ta, a, step * 8, 4, ga);
          grads_at (tb, b, step * 8 + 4, 4, gb);
          for (gsize i = 0; i < m->n_params; i++)
            avg[i] = 0.5f * (ga[i] + gb[i]);
          rlx_sgd_step (a, avg, m->n_params, 0.05f);
          rlx_sgd_step (b, avg, m->n_params, 0.05f);
          if (memcmp (a, b, m->n_params * sizeof (float)) != 0)
            g_error ("%s: replicas diverged at step %u", m->slug, step);
          g_assert_cmpuint (rlx_params_hash (a, m->n_params), ==, rlx_params_hash (b, m->n_params));
        }
      /* They moved. */
      g_assert_cmpuint (rlx_params_hash (a, m->n_params), !=, h0);
    }
}

static void
test_adopt_params (void)
{
  for (guint id = 0; id < RLX_N_MODELS; id++)
    {
      const RlxModel *m = rlx_model_get (id);
      g_autoptr(RlxCpuTrainer) vt = rlx_cpu_trainer_new (m, 4);
      g_autoptr(RlxCpuTrainer) jt = rlx_cpu_trainer_new (m, 32);
      g_autofree float *veteran = g_new (float, m->n_params);
      g_autofree float *joiner = g_new (float, m->n_params);
      g_autofree float *gv = g_new (float, m->n_params);
      g_autofree float *gj = g_new (float, m->n_params);
      float lv, lj;

      rlx_model_init_params (m, 7, veteran);
      for (guint step = 0; step < 3; step++)
        {
          grads_at (vt, veteran, step * 4, 4, gv);
          rlx_sgd_step (veteran, gv, m->n_params, 0.05f);
        }
      rlx_model_init_params (m, 999, joiner);
      g_assert_true (memcmp (joiner, veteran, m->n_params * 4) != 0);
      memcpy (joiner, veteran, m->n_params * 4);
      lv = grads_at (vt, veteran, 12, 4, gv);
      lj = grads_at (jt, joiner, 12, 4, gj);
      g_assert_cmpfloat (lv, ==, lj);
      g_assert_cmpmem (gv, m->n_params * 4, gj, m->n_params * 4);
    }
}

static void
test_loss_falls (void)
{
  for (guint id = 0; id < RLX_N_MODELS; id++)
    {
      const RlxModel *m = rlx_model_get (id);
      g_autoptr(RlxCpuTrainer) tr = rlx_cpu_trainer_new (m, 64);
      g_autofree float *params = g_new (float, m->n_params);
      g_autofree float *g = g_new (float, m->n_params);
      float first, last;

      rlx_model_init_params (m, 3, params);
      first = grads_at (tr, params, 0, 64, NULL);
      for (guint step = 0; step < 30; step++)
        {
          grads_at (tr, params, step * 8, 8, g);
          rlx_sgd_step (params, g, m->n_params, 0.1f);
        }
      last = grads_at (tr, params, 0, 64, NULL);
      g_test_message ("%s: loss %.4f → %.4f after 30 steps", m->slug, first, last);
      g_assert_cmpfloat (last, <, first);
    }
}

/* Synthetic data is learnable: a few hundred steps take the MLP far above
 * chance on the test split, and forward-only logits agree with evaluate. */
static void
test_learnable (void)
{
  const RlxModel *m = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autoptr(RlxCpuTrainer) tr = rlx_cpu_trainer_new (m, 32);
  g_autofree float *params = g_new (float, m->n_params);
  g_autofree float *g = g_new (float, m->n_params);
  g_autofree guint32 *perm = g_new (guint32, 60000);
  double acc0, acc, loss;

  rlx_model_init_params (m, 5, params);
  acc0 = rlx_cpu_evaluate (tr, params, synthetic, RLX_SPLIT_TEST, NULL);
  rlx_dataset_permutation (60000, 5, 0, perm);
  for (guint step = 0; step < 300; step++)
    {
      float x[32 * RLX_INPUT_LEN];
      guint8 labels[32];

      rlx_dataset_gather (synthetic, RLX_SPLIT_TRAIN, perm + step * 32, 32, x, labels);
      rlx_cpu_trainer_grads (tr, params, x, labels, 32, g);
      rlx_sgd_step (params, g, m->n_params, 0.1f);
    }
  acc = rlx_cpu_evaluate (tr, params, synthetic, RLX_SPLIT_TEST, &loss);
  g_test_message ("synthetic test accuracy %.3f → %.3f (loss %.3f)", acc0, acc, loss);
  g_assert_cmpfloat (acc0, <, 0.3);
  g_assert_cmpfloat (acc, >, 0.9);
  g_assert_cmpfloat (loss, <, 0.5);

  /* evaluate's accuracy equals an argmax over rlx_cpu_trainer_forward. */
  {
    const guint8 *labels = rlx_dataset_labels (synthetic, RLX_SPLIT_TEST);
    guint correct = 0;

    for (guint start = 0; start < 10000; start += 32)
      {
        guint32 idx[32];
        float x[32 * RLX_INPUT_LEN], logits[32 * RLX_N_CLASSES];

        for (guint k = 0; k < 32; k++)
          idx[k] = MIN (start + k, 9999u);
        rlx_dataset_gather (synthetic, RLX_SPLIT_TEST, idx, 32, x, NULL);
        rlx_cpu_trainer_forward (tr, params, x, 32, logits);
        for (guint k = 0; k < 32 && start + k < 10000; k++)
          {
            guint best = 0;

            for (guint j = 1; j < RLX_N_CLASSES; j++)
              if (logits[k * RLX_N_CLASSES + j] > logits[k * RLX_N_CLASSES + best])
                best = j;
            correct += best == labels[start + k];
          }
      }
    g_assert_cmpfloat (fabs (correct / 10000.0 - acc), <, 1e-9);
  }
}

/* The CNN's gradients are bit-identical whether its two chunk lanes run on
 * one thread or two, and whatever the trainer's max_batch. */
static void
test_cnn_threads_agree (void)
{
  const RlxModel *m = rlx_model_get (RLX_MODEL_MNIST_CNN);
  g_autofree float *params = g_new (float, m->n_params);
  g_autofree float *g1 = g_new (float, m->n_params);
  g_autofree float *g2 = g_new (float, m->n_params);
  g_autofree float *g3 = g_new (float, m->n_params);
  g_autoptr(RlxCpuTrainer) one = NULL;
  g_autoptr(RlxCpuTrainer) two = NULL;
  g_autoptr(RlxCpuTrainer) big = NULL;
  float l1, l2, l3;

  rlx_model_init_params (m, 21, params);
  rlx_cpu_set_threads (1);
  g_assert_cmpuint (rlx_cpu_threads (), ==, 1);
  one = rlx_cpu_trainer_new (m, 43);
  rlx_cpu_set_threads (2);
  two = rlx_cpu_trainer_new (m, 43);
  big = rlx_cpu_trainer_new (m, 200);
  rlx_cpu_set_threads (0);

  l1 = grads_at (one, params, 500, 43, g1);
  l2 = grads_at (two, params, 500, 43, g2);
  l3 = grads_at (big, params, 500, 43, g3);
  g_assert_cmpfloat (l1, ==, l2);
  g_assert_cmpfloat (l1, ==, l3);
  g_assert_cmpmem (g1, m->n_params * 4, g2, m->n_params * 4);
  g_assert_cmpmem (g1, m->n_params * 4, g3, m->n_params * 4);
}

/* A process that trains may fork (the app spawns local ranks): OpenBLAS's
 * fork handler stops its thread pool, and in 0.3.21 a threaded call in
 * flight on another thread then hung the fork or itself. Forks while an
 * MLP trains on two BLAS threads must all return, and training go on. */
typedef struct {
  RlxCpuTrainer *tr;
  const float   *params;
  float         *grads;
  gint           stop;
  guint          steps;
} Trainer;

static gpointer
train_until_stopped (gpointer data)
{
  Trainer *t = data;

  while (!g_atomic_int_get (&t->stop))
    {
      grads_at (t->tr, t->params, 64 * (t->steps % 100), 64, t->grads);
      g_atomic_int_inc (&t->steps);
    }
  return NULL;
}

static void
test_fork_while_training (void)
{
  const RlxModel *m = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autofree float *params = g_new (float, m->n_params);
  g_autofree float *grads = g_new (float, m->n_params);
  Trainer t = { 0 };
  GThread *thread;
  guint steps_before;

  rlx_model_init_params (m, 5, params);
  rlx_cpu_set_threads (2);
  t.tr = rlx_cpu_trainer_new (m, 64);
  t.params = params;
  t.grads = grads;
  thread = g_thread_new ("trainer", train_until_stopped, &t);
  /* a hang is the failure: the alarm ends the test */
  alarm (60);
  for (guint i = 0; i < 200; i++)
    {
      int status;
      pid_t pid = fork ();

      g_assert_cmpint (pid, >=, 0);
      if (pid == 0)
        _exit (0);
      g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
      g_assert_true (WIFEXITED (status));
      g_usleep (1000);
    }
  /* the trainer was not stranded in BLAS by the last fork */
  steps_before = (guint) g_atomic_int_get (&t.steps);
  while ((guint) g_atomic_int_get (&t.steps) < steps_before + 3)
    g_usleep (1000);
  g_atomic_int_set (&t.stop, TRUE);
  g_thread_join (thread);
  alarm (0);
  g_assert_cmpuint (t.steps, >, 0);
  rlx_cpu_trainer_free (t.tr);
  rlx_cpu_set_threads (0);
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  int status;

  g_test_init (&argc, &argv, NULL);
  synthetic = rlx_dataset_open ("synthetic", 11, &error);
  g_assert_no_error (error);

  g_test_add_func ("/vision/train/layout", test_layout);
  g_test_add_func ("/vision/train/bucket-length", test_bucket_length);
  g_test_add_func ("/vision/train/shards-average-to-full-batch", test_shards_average);
  g_test_add_func ("/vision/train/replicas-stay-identical", test_replicas_stay_identical);
  g_test_add_func ("/vision/train/adopted-params-give-identical-grads", test_adopt_params);
  g_test_add_func ("/vision/train/loss-falls", test_loss_falls);
  g_test_add_func ("/vision/train/cnn-threads-agree", test_cnn_threads_agree);
  g_test_add_func ("/vision/train/synthetic-is-learnable", test_learnable);
  g_test_add_func ("/vision/train/fork-while-training", test_fork_while_training);
  status = g_test_run ();
  rlx_dataset_unref (synthetic);
  return status;
}
