/* test-vulkan.c — the Vulkan backend on a real device (lavapipe in CI)
 *
 * With the Khronos validation layer on and a debug messenger counting:
 *   - per tensor, GPU gradients against the CPU reference:
 *     max |Δ| ≤ 1e-4 · max |g| + 1e-6, loss within 1e-5 relative,
 *     for every model at batch 1, 7 and 64 (the CNN on the fused direct
 *     convolutions, also at 601, and on the GEMM path three ways: implicit
 *     forward, with conv2's data gradient as an implicit GEMM too, and all
 *     through the column matrix);
 *   - the same step twice gives identical bits;
 *   - bad batches are refused; a lost device is reported, never a crash;
 *   - the backend works from the rank's compute worker thread;
 *   - zero validation messages.
 */
#include "rlx-config.h"
#include "core/rlx-backend.h"
#include "core/rlx-worker.h"
#include "gpu/rlx-vk.h"

#include <math.h>
#include <string.h>

#define DEVICE "vulkan:llvmpipe"

static RlxDataset *dataset;
static gboolean have_device;

static RlxBackend *
open_vulkan (const RlxModel *model, guint max_batch)
{
  g_autoptr(GError) error = NULL;
  RlxBackend *be = rlx_backend_resolve (DEVICE, model, dataset, max_batch, &error);

  g_assert_no_error (error);
  g_assert_cmpstr (rlx_backend_name (be), ==, "vulkan");
  return be;
}

static void
random_indices (guint32 *idx, guint n, guint32 salt)
{
  guint size = rlx_dataset_size (dataset, RLX_SPLIT_TRAIN);
  for (guint i = 0; i < n; i++)
    idx[i] = (guint32) (((guint64) (i + 1) * 2654435761u + salt * 40503u) % size);
}

static void
check_model_at (RlxModelId id, const guint *batches, guint n_batches)
{
  const RlxModel *model = rlx_model_get (id);
  g_autoptr(RlxBackend) gpu = NULL, cpu = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree float *params = g_new (float, model->n_params);
  g_autofree float *g_gpu = g_new (float, model->n_params);
  g_autofree float *g_cpu = g_new (float, model->n_params);
  guint max_batch = 0;

  if (!have_device)
    {
      g_test_skip ("no lavapipe device (install mesa-vulkan-drivers)");
      return;
    }
  for (guint b = 0; b < n_batches; b++)
    max_batch = MAX (max_batch, batches[b]);
  gpu = open_vulkan (model, max_batch);
  cpu = rlx_backend_resolve ("cpu", model, dataset, max_batch, &error);
  g_assert_no_error (error);
  rlx_model_init_params (model, 42 + id, params);

  for (guint b = 0; b < n_batches; b++)
    {
      guint n = batches[b];
      g_autofree guint32 *idx = g_new (guint32, n);
      float l_gpu = NAN, l_cpu = NAN;

      random_indices (idx, n, n);
      memset (g_gpu, 0xff, model->n_params * sizeof (float));   /* NaN: every slot must be written */
      g_assert_true (rlx_backend_grads (gpu, params, idx, n, &l_gpu, g_gpu, &error));
      g_assert_no_error (error);
      g_assert_true (rlx_backend_grads (cpu, params, idx, n, &l_cpu, g_cpu, &error));
      g_assert_no_error (error);

      g_test_message ("%s batch %u: loss gpu %.9g cpu %.9g", model->slug, n, l_gpu, l_cpu);
      g_assert_true (isfinite (l_gpu));
      g_assert_cmpfloat (fabsf (l_gpu - l_cpu), <=, 1e-5f * fabsf (l_cpu));
      for (guint t = 0; t < model->n_tensors; t++)
        {
          const RlxTensorInfo *ti = &model->tensors[t];
          double maxg = 0, maxd = 0;

          for (gsize i = ti->offset; i < ti->offset + ti->numel; i++)
            {
              g_assert_true (isfinite (g_gpu[i]));
              maxg = MAX (maxg, fabs (g_cpu[i]));
              maxd = MAX (maxd, fabs ((double) g_gpu[i] - g_cpu[i]));
            }
          g_test_message ("  %-9s max|g| %.3g max|Δ| %.3g", ti->name, maxg, maxd);
          g_assert_cmpfloat (maxg, >, 0);
          g_assert_cmpfloat (maxd, <=, 1e-4 * maxg + 1e-6);
        }
      g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
    }
}

static void
check_model (RlxModelId id)
{
  const guint batches[] = { 1, 7, 64 };

  check_model_at (id, batches, G_N_ELEMENTS (batches));
}

/* check_model with the "NAME=VALUE" settings of @env (NULL-terminated) in
 * the environment, which the trainer reads when it is made; they are
 * removed again afterwards. */
static void
check_model_env (RlxModelId id, const char *const *env)
{
  for (guint i = 0; env[i] != NULL; i++)
    {
      g_auto(GStrv) kv = g_strsplit (env[i], "=", 2);
      g_setenv (kv[0], kv[1], TRUE);
    }
  check_model (id);
  for (guint i = 0; env[i] != NULL; i++)
    {
      g_auto(GStrv) kv = g_strsplit (env[i], "=", 2);
      g_unsetenv (kv[0]);
    }
}

#define ENV(...) ((const char *const[]) { __VA_ARGS__, NULL })

static void
test_mlp (void)
{
  check_model (RLX_MODEL_MNIST_MLP);
}

/* the default: fused direct convolutions (RLX_VK_CNN=direct); at 601
 * conv2's weight gradient runs on workgroups of five samples and a last
 * one of one */
static void
test_cnn (void)
{
  const guint batches[] = { 1, 7, 64, 601 };

  check_model_at (RLX_MODEL_MNIST_CNN, batches, G_N_ELEMENTS (batches));
}

/* the direct path's other settings: cnn2 staging 8 input channels,
 * cnn1w's per-entry dZ2 fill, cnn2w on 7 workgroups (10 samples each at 64) */
static void
test_cnn_direct_knobs (void)
{
  check_model_env (RLX_MODEL_MNIST_CNN, ENV ("RLX_VK_CNN2_CIC=8", "RLX_VK_CNN1W_FILL=gather",
                                             "RLX_VK_CNN_W2_GROUPS=7"));
}

/* RLX_VK_CNN=gemm: conv2's forward and weight gradient as implicit GEMMs
 * (pool1 read through im2col addressing), its data gradient through the
 * column gradient and col2im */
static void
test_cnn_gemm (void)
{
  check_model_env (RLX_MODEL_MNIST_CNN, ENV ("RLX_VK_CNN=gemm"));
}

/* RLX_VK_CNN_IMPLICIT=all: the data gradient too, straight from conv2's
 * output gradient and weights */
static void
test_cnn_implicit_data (void)
{
  check_model_env (RLX_MODEL_MNIST_CNN, ENV ("RLX_VK_CNN=gemm", "RLX_VK_CNN_IMPLICIT=all"));
}

/* and through the materialised column matrix and column gradient */
static void
test_cnn_columns (void)
{
  check_model_env (RLX_MODEL_MNIST_CNN, ENV ("RLX_VK_CNN=gemm", "RLX_VK_CNN_IMPLICIT=none"));
}

/* RLX_VK_CNN=gemm gathers pool1's gradient from the column gradient once
 * per pooled value on conv2-specific tiles; here the pooled gather on the
 * other tuning tiles, and the path before that: per-pixel gather
 * (RLX_VK_CNN_COL2IM=pixel) on the generic tiles (auto) */
static void
test_cnn_pooled (void)
{
  check_model_env (RLX_MODEL_MNIST_CNN,
                   ENV ("RLX_VK_CNN=gemm", "RLX_VK_CNN_COL2IM=pooled",
                        "RLX_VK_CNN_DCOL_TILE=256,48,12,16,4", "RLX_VK_CNN_WGRAD_TILE=32,144,18,4,4",
                        "RLX_VK_CNN_FWD_TILE=256,32,16,16,4"));
  check_model_env (RLX_MODEL_MNIST_CNN,
                   ENV ("RLX_VK_CNN=gemm", "RLX_VK_CNN_COL2IM=pooled",
                        "RLX_VK_CNN_DCOL_TILE=128,48,12,8,4", "RLX_VK_CNN_WGRAD_TILE=32,48,12,4,4",
                        "RLX_VK_CNN_FWD_TILE=128,32,8,8,4"));
  /* the previous default: per-pixel gather, generic tiles */
  check_model_env (RLX_MODEL_MNIST_CNN,
                   ENV ("RLX_VK_CNN=gemm", "RLX_VK_CNN_COL2IM=pixel", "RLX_VK_CNN_DCOL_TILE=auto",
                        "RLX_VK_CNN_WGRAD_TILE=auto", "RLX_VK_CNN_FWD_TILE=auto"));
}

/* the default writes the parameters into device-local memory the host
 * maps (lavapipe offers it); here the GPU copies them from a write-combined
 * or a cached staging buffer instead */
static void
test_upload_modes (void)
{
  check_model_env (RLX_MODEL_MNIST_MLP, ENV ("RLX_VK_UPLOAD=cached"));
  check_model_env (RLX_MODEL_MNIST_MLP, ENV ("RLX_VK_UPLOAD=wc"));
  check_model_env (RLX_MODEL_MNIST_CNN, ENV ("RLX_VK_UPLOAD=wc"));
}

/* a split-K GEMM's partial sums of more columns than a grid has workgroups
 * in x (at mnist-mlp-xl 4096 on real devices: 4096×1024 outputs, 65536
 * blocks of 64) are added by column blocks along z; lowering the x limit to
 * 100 reaches that path at batch 64 */
static void
test_reduce_z_blocks (void)
{
  check_model_env (RLX_MODEL_MNIST_MLP, ENV ("RLX_VK_TEST_MAX_GROUPS_X=100"));
  check_model_env (RLX_MODEL_MNIST_MLP_XL, ENV ("RLX_VK_TEST_MAX_GROUPS_X=100"));
}

static void
test_mlp_xl (void)
{
  const guint batches[] = { 1, 7, 64, 300 };

  /* 300: the forward GEMMs reach the large tile too (at 64 only the
   * weight gradients do); its 7.5 MB of parameters split the step's
   * submission. Then on gemm.comp's big tile in one submission. */
  check_model_at (RLX_MODEL_MNIST_MLP_XL, batches, G_N_ELEMENTS (batches));
  check_model_env (RLX_MODEL_MNIST_MLP_XL, ENV ("RLX_VK_GEMM2=0", "RLX_VK_SPLIT_SUBMIT=0"));
}

/* Same step, same bits: no atomics, fixed reduction orders, and a replayed
 * command buffer that does not depend on what ran before it. */
static void
test_determinism (void)
{
  if (!have_device)
    {
      g_test_skip ("no lavapipe device");
      return;
    }
  for (guint m = 0; m < RLX_N_MODELS; m++)
    {
      const RlxModel *model = rlx_model_get (m);
      g_autoptr(RlxBackend) gpu = open_vulkan (model, 64);
      g_autoptr(GError) error = NULL;
      g_autofree float *params = g_new (float, model->n_params);
      g_autofree float *a = g_new (float, model->n_params);
      g_autofree float *b = g_new (float, model->n_params);
      g_autofree float *other = g_new (float, model->n_params);
      guint32 idx[64], idx2[64];
      float la, lb, lo;

      rlx_model_init_params (model, 7, params);
      random_indices (idx, 64, 1);
      random_indices (idx2, 33, 2);
      g_assert_true (rlx_backend_grads (gpu, params, idx, 64, &la, a, &error));
      /* something else in between: another batch size and other samples */
      g_assert_true (rlx_backend_grads (gpu, params, idx2, 33, &lo, other, &error));
      g_assert_true (rlx_backend_grads (gpu, params, idx, 64, &lb, b, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (&la, sizeof la, &lb, sizeof lb);
      g_assert_cmpmem (a, model->n_params * sizeof (float), b, model->n_params * sizeof (float));
      g_assert_true (memcmp (a, other, model->n_params * sizeof (float)) != 0);
    }
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

static void
test_refusals (void)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autoptr(RlxBackend) gpu = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree float *params = g_new0 (float, model->n_params);
  g_autofree float *grads = g_new0 (float, model->n_params);
  guint32 idx[9] = { 0 };
  float loss;

  if (!have_device)
    {
      g_test_skip ("no lavapipe device");
      return;
    }
  gpu = open_vulkan (model, 8);
  g_assert_false (rlx_backend_grads (gpu, params, idx, 9, &loss, grads, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_BATCH);
  g_clear_error (&error);
  idx[0] = 60000;
  g_assert_false (rlx_backend_grads (gpu, params, idx, 1, &loss, grads, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_BATCH);
  g_assert_nonnull (strstr (error->message, "past the end"));
  g_clear_error (&error);
  /* still works after refusals */
  idx[0] = 5;
  g_assert_true (rlx_backend_grads (gpu, params, idx, 1, &loss, grads, &error));
  g_assert_no_error (error);
}

static void
test_device_lost (void)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_CNN);
  g_autoptr(RlxBackend) gpu = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree float *params = g_new0 (float, model->n_params);
  g_autofree float *grads = g_new0 (float, model->n_params);
  guint32 idx[4] = { 1, 2, 3, 4 };
  float loss;

  if (!have_device)
    {
      g_test_skip ("no lavapipe device");
      return;
    }
  rlx_model_init_params (model, 1, params);
  g_setenv ("RLX_VK_SIMULATE_DEVICE_LOST", "2", TRUE);
  gpu = open_vulkan (model, 4);
  g_unsetenv ("RLX_VK_SIMULATE_DEVICE_LOST");
  g_assert_true (rlx_backend_grads (gpu, params, idx, 4, &loss, grads, &error));
  g_assert_false (rlx_backend_grads (gpu, params, idx, 4, &loss, grads, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_DEVICE_LOST);
  g_assert_nonnull (strstr (error->message, "VK_ERROR_DEVICE_LOST"));
  g_assert_nonnull (strstr (error->message, "--backend cpu"));
  g_clear_error (&error);
  /* fatal for this backend: later steps fail the same way */
  g_assert_false (rlx_backend_grads (gpu, params, idx, 4, &loss, grads, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_DEVICE_LOST);
}

typedef struct {
  gboolean done;
  float    loss;
  float   *grads;
  gsize    n_grads;
  GError  *error;
} WorkerOut;

static void
on_worker_done (RlxWorker *worker, const RlxGradResult *result, const GError *error,
                gpointer user_data)
{
  WorkerOut *out = user_data;

  g_assert_true (g_main_context_is_owner (g_main_context_default ()));
  out->done = TRUE;
  if (error != NULL)
    out->error = g_error_copy (error);
  else
    {
      out->loss = result->loss;
      out->grads = g_memdup2 (result->grads, result->n_grads * sizeof (float));
      out->n_grads = result->n_grads;
    }
}

/* The rank's compute worker owns the Vulkan backend: the result comes back
 * on the main context, equal to the same step run directly; a second job
 * while one is in flight is refused; a lost device arrives as an error. */
static void
test_worker (void)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_CNN);
  g_autoptr(RlxWorker) worker = NULL;
  g_autoptr(RlxBackend) direct = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree float *params = g_new (float, model->n_params);
  g_autofree float *expect = g_new (float, model->n_params);
  guint32 idx[16];
  WorkerOut out = { 0 };
  float loss;
  guint64 id;

  if (!have_device)
    {
      g_test_skip ("no lavapipe device");
      return;
    }
  rlx_model_init_params (model, 11, params);
  random_indices (idx, 16, 5);
  direct = open_vulkan (model, 16);
  g_assert_true (rlx_backend_grads (direct, params, idx, 16, &loss, expect, &error));
  g_clear_pointer (&direct, rlx_backend_free);

  worker = rlx_worker_new (open_vulkan (model, 16));
  id = rlx_worker_submit (worker, params, idx, 16, on_worker_done, &out, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (id, >, 0);
  g_assert_cmpuint (rlx_worker_submit (worker, params, idx, 16, on_worker_done, &out, &error), ==, 0);
  g_assert_error (error, RLX_WORKER_ERROR, RLX_WORKER_ERROR_BUSY);
  g_clear_error (&error);
  while (!out.done)
    g_main_context_iteration (NULL, TRUE);
  g_assert_no_error (out.error);
  g_assert_cmpuint (out.n_grads, ==, model->n_params);
  g_assert_cmpmem (&out.loss, sizeof loss, &loss, sizeof loss);
  g_assert_cmpmem (out.grads, model->n_params * sizeof (float), expect, model->n_params * sizeof (float));
  g_clear_pointer (&out.grads, g_free);

  /* a lost device reaches the rank as an error on the main context */
  g_clear_pointer (&worker, rlx_worker_free);
  g_setenv ("RLX_VK_SIMULATE_DEVICE_LOST", "1", TRUE);
  worker = rlx_worker_new (open_vulkan (model, 16));
  g_unsetenv ("RLX_VK_SIMULATE_DEVICE_LOST");
  memset (&out, 0, sizeof out);
  rlx_worker_submit (worker, params, idx, 16, on_worker_done, &out, &error);
  g_assert_no_error (error);
  while (!out.done)
    g_main_context_iteration (NULL, TRUE);
  g_assert_error (out.error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_DEVICE_LOST);
  g_clear_error (&out.error);
}

static void
test_validation_clean (void)
{
  if (!have_device)
    {
      g_test_skip ("no lavapipe device");
      return;
    }
  /* the layer was really on, and said nothing during any test above */
  g_assert_true (rlx_vk_validation_enabled ());
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) devices = NULL;

  g_test_init (&argc, &argv, NULL);
  g_setenv ("RLX_VK_VALIDATE", "1", TRUE);

  dataset = rlx_dataset_open ("synthetic", 3, &error);
  g_assert_no_error (error);
  devices = rlx_vk_enumerate (&error);
  g_assert_no_error (error);
  for (guint i = 0; i < devices->len; i++)
    if (strstr (((RlxVkDeviceInfo *) g_ptr_array_index (devices, i))->name, "llvmpipe"))
      have_device = TRUE;
  /* In CI lavapipe is installed by scripts/deps.sh: its absence there is a
   * broken setup, not a reason to skip the GPU tests. */
  if (!have_device && g_getenv ("CI") != NULL)
    g_error ("CI is set but no lavapipe Vulkan device was found: "
             "install mesa-vulkan-drivers (scripts/deps.sh does)");
  /* the layer is on for the instance every test uses */
  g_assert_true (rlx_vk_validation_enabled ());

  g_test_add_func ("/gpu/vulkan/grads-mnist-mlp", test_mlp);
  g_test_add_func ("/gpu/vulkan/grads-mnist-cnn", test_cnn);
  g_test_add_func ("/gpu/vulkan/grads-mnist-cnn-direct-knobs", test_cnn_direct_knobs);
  g_test_add_func ("/gpu/vulkan/grads-upload-modes", test_upload_modes);
  g_test_add_func ("/gpu/vulkan/grads-reduce-z-blocks", test_reduce_z_blocks);
  g_test_add_func ("/gpu/vulkan/grads-mnist-cnn-gemm", test_cnn_gemm);
  g_test_add_func ("/gpu/vulkan/grads-mnist-cnn-implicit-data", test_cnn_implicit_data);
  g_test_add_func ("/gpu/vulkan/grads-mnist-cnn-columns", test_cnn_columns);
  g_test_add_func ("/gpu/vulkan/grads-mnist-cnn-pooled", test_cnn_pooled);
  g_test_add_func ("/gpu/vulkan/grads-mnist-mlp-xl", test_mlp_xl);
  g_test_add_func ("/gpu/vulkan/determinism", test_determinism);
  g_test_add_func ("/gpu/vulkan/refusals", test_refusals);
  g_test_add_func ("/gpu/vulkan/device-lost", test_device_lost);
  g_test_add_func ("/gpu/vulkan/worker", test_worker);
  g_test_add_func ("/gpu/vulkan/validation-clean", test_validation_clean);
  {
    int status = g_test_run ();
    g_clear_pointer (&dataset, rlx_dataset_unref);
    /* destruction is validated too */
    if (have_device && rlx_vk_validation_messages () != 0)
      {
        g_printerr ("validation messages during teardown: %u\n", rlx_vk_validation_messages ());
        return 1;
      }
    return status;
  }
}
