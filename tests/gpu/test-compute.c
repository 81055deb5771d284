/* test-compute.c — --compute f32 | f16 | bf16 (issue 27)
 *
 * Without a tensor-core GPU (CI: lavapipe has no cooperative matrix):
 *   - rlx_vk_device_compute_check on hand-made devices: every reason a
 *     device is refused for f16 (no cooperative matrix, KHR only, no
 *     16×16×16 f16 shape, no shaderFloat16, no memory model, subgroups not
 *     32 wide), bf16 always refused (not built), f32 never;
 *   - the dispatch logic: which requests meet which devices at f16 (never
 *     the CPU, never a fall back to f32), and which GEMMs of a step run on
 *     tensor cores (rlx_vk_gemm_compute: none at f32), and which of their
 *     operands get an f16 copy of their own (rlx_vk_f16_copy_pays);
 *   - on lavapipe itself: the refusal with its reason, and that --compute
 *     f32 is the default path bit for bit (rlx-rank's --compute:
 *     test-resolve.c, /gpu/resolve/compute-cli).
 * On a device with cooperative matrices (RLX_TEST_COOP=SPEC, e.g. vulkan:0;
 * scripts/device/gpu-f16.sh sets it on the H200): the f16 step's gradients
 * against the CPU emulating f16 (rlx_backend_host_emulate_f16) for all
 * three models at several batch sizes, within the bound of
 * core/rlx-backend-check.h (RLX_CHECK_F16_GRAD, RLX_CHECK_F16_LOSS), and
 * both distances from the f32 CPU (the device's, the emulation's) printed.
 * On the CPU alone: the emulation itself and the check's use of it.
 */
#include "rlx-config.h"
#include "core/rlx-backend.h"
#include "core/rlx-backend-check.h"
#include "core/vision/rlx-cpu.h"
#include "gpu/rlx-vk.h"

#include <math.h>
#include <string.h>

static RlxDataset *dataset;

#define assert_has(text, part)                                                \
  G_STMT_START {                                                              \
    const char *text_ = (text);                                               \
    if (text_ == NULL || strstr (text_, (part)) == NULL)                      \
      g_error ("%s:%d: expected \"%s\" in: %s", __FILE__, __LINE__, (part),   \
               text_ ? text_ : "(null)");                                     \
  } G_STMT_END

static void
add_shape (RlxVkDeviceInfo *d, guint m, guint n, guint k, guint8 ab, gboolean khr)
{
  d->coop[d->n_coop++] = (RlxVkCoopShape) { m, n, k, ab, ab, RLX_VK_COMPONENT_F32,
                                            RLX_VK_COMPONENT_F32, TRUE, khr };
}

/* An H200 as its driver describes itself (issue 27): NV and KHR, f16 in
 * 16×16×16, 16×8×16 and 16×8×8, bf16 through KHR. */
static RlxVkDeviceInfo *
fake (const char *name, gboolean coop)
{
  RlxVkDeviceInfo *d = g_new0 (RlxVkDeviceInfo, 1);

  d->name = g_strdup (name);
  d->driver = g_strdup ("test");
  d->type = RLX_VK_DEVICE_DISCRETE;
  d->api_version = (1u << 22) | (3u << 12);
  d->has_compute_queue = TRUE;
  d->max_shared_memory = 48 * 1024;
  d->max_push_constants = 256;
  d->max_workgroup_invocations = 1024;
  d->max_workgroup_count[0] = d->max_workgroup_count[1] = d->max_workgroup_count[2] = 65535;
  d->max_storage_buffer_range = G_MAXUINT32;
  d->subgroup_size = 32;
  d->device_local_bytes = 16ull << 30;
  d->shader_f16 = TRUE;
  d->memory_model = TRUE;
  if (coop)
    {
      d->coop_nv = d->coop_khr = TRUE;
      add_shape (d, 16, 16, 16, RLX_VK_COMPONENT_F16, FALSE);
      add_shape (d, 16, 8, 16, RLX_VK_COMPONENT_F16, FALSE);
      add_shape (d, 16, 8, 8, RLX_VK_COMPONENT_F16, FALSE);
      add_shape (d, 16, 16, 16, RLX_VK_COMPONENT_F16, TRUE);
      add_shape (d, 16, 16, 16, RLX_VK_COMPONENT_BF16, TRUE);
    }
  return d;
}

static void
test_parse (void)
{
  RlxVkCompute c = RLX_VK_N_COMPUTE;

  for (guint i = 0; i < RLX_VK_N_COMPUTE; i++)
    {
      g_assert_true (rlx_vk_compute_parse (rlx_vk_compute_name ((RlxVkCompute) i), &c));
      g_assert_cmpuint (c, ==, i);
    }
  g_assert_true (rlx_vk_compute_parse ("F16", &c));
  g_assert_cmpuint (c, ==, RLX_VK_COMPUTE_F16);
  c = RLX_VK_COMPUTE_BF16;
  g_assert_false (rlx_vk_compute_parse ("f64", &c));
  g_assert_false (rlx_vk_compute_parse ("", &c));
  g_assert_false (rlx_vk_compute_parse (NULL, &c));
  g_assert_cmpuint (c, ==, RLX_VK_COMPUTE_BF16);   /* untouched */
}

/* Every reason a device is refused, one missing piece at a time. */
static void
test_device_check (void)
{
  g_autoptr(RlxVkDeviceInfo) h200 = fake ("NVIDIA H200", TRUE);
  g_autoptr(RlxVkDeviceInfo) plain = fake ("Plain GPU", FALSE);
  g_autoptr(RlxVkDeviceInfo) d = NULL;
  g_autofree char *text = rlx_vk_device_coop_text (h200);
  char *why;

  /* f32: always */
  g_assert_null (rlx_vk_device_compute_check (h200, RLX_VK_COMPUTE_F32));
  g_assert_null (rlx_vk_device_compute_check (plain, RLX_VK_COMPUTE_F32));
  /* f16: the H200 can */
  g_assert_null (rlx_vk_device_compute_check (h200, RLX_VK_COMPUTE_F16));
  assert_has (text, "16×16×16 f16·f16→f32 (NV)");
  assert_has (text, "16×8×8 f16·f16→f32 (NV)");
  assert_has (text, "16×16×16 bf16·bf16→f32 (KHR)");

  why = rlx_vk_device_compute_check (plain, RLX_VK_COMPUTE_F16);
  assert_has (why, "Plain GPU has no cooperative matrix");
  assert_has (why, "use --compute f32");
  g_free (why);

  d = rlx_vk_device_info_copy (h200);
  d->coop_nv = FALSE;
  why = rlx_vk_device_compute_check (d, RLX_VK_COMPUTE_F16);
  assert_has (why, "offers VK_KHR_cooperative_matrix");
  assert_has (why, "not VK_NV_cooperative_matrix");
  g_free (why);

  g_clear_pointer (&d, rlx_vk_device_info_free);
  d = rlx_vk_device_info_copy (h200);
  d->coop[0].k = 8;        /* the NV 16×16×16 f16 shape gone */
  why = rlx_vk_device_compute_check (d, RLX_VK_COMPUTE_F16);
  assert_has (why, "no 16×16×16 f16·f16→f32 shape at subgroup scope");
  assert_has (why, "it offers: ");
  g_free (why);
  d->coop[0].k = 16;
  d->coop[0].subgroup = FALSE;
  why = rlx_vk_device_compute_check (d, RLX_VK_COMPUTE_F16);
  assert_has (why, "no 16×16×16 f16·f16→f32 shape at subgroup scope");
  g_free (why);

  g_clear_pointer (&d, rlx_vk_device_info_free);
  d = rlx_vk_device_info_copy (h200);
  d->shader_f16 = FALSE;
  why = rlx_vk_device_compute_check (d, RLX_VK_COMPUTE_F16);
  assert_has (why, "not shaderFloat16");
  g_free (why);
  d->shader_f16 = TRUE;
  d->memory_model = FALSE;
  why = rlx_vk_device_compute_check (d, RLX_VK_COMPUTE_F16);
  assert_has (why, "Vulkan memory model");
  g_free (why);
  d->memory_model = TRUE;
  d->subgroup_size = 64;
  why = rlx_vk_device_compute_check (d, RLX_VK_COMPUTE_F16);
  assert_has (why, "subgroups of 64 threads");
  g_free (why);

  /* bf16: not built, whatever the device offers; the reason says which */
  why = rlx_vk_device_compute_check (h200, RLX_VK_COMPUTE_BF16);
  assert_has (why, "--compute bf16 is not built in");
  assert_has (why, "though NVIDIA H200 offers them");
  g_free (why);
  why = rlx_vk_device_compute_check (plain, RLX_VK_COMPUTE_BF16);
  assert_has (why, "and Plain GPU offers none either");
  g_free (why);
}

static GPtrArray *
devices (gboolean with_h200)
{
  GPtrArray *a = g_ptr_array_new_with_free_func ((GDestroyNotify) rlx_vk_device_info_free);
  RlxVkDeviceInfo *d;

  g_ptr_array_add (a, fake ("Plain GPU", FALSE));
  if (with_h200)
    g_ptr_array_add (a, fake ("NVIDIA H200", TRUE));
  for (guint i = 0; i < a->len; i++)
    ((RlxVkDeviceInfo *) g_ptr_array_index (a, i))->index = i;
  d = fake ("llvmpipe (LLVM 15.0.6, 256 bits)", FALSE);
  d->type = RLX_VK_DEVICE_CPU;
  d->index = a->len;
  g_ptr_array_add (a, d);
  return a;
}

/* Which requests meet which devices at f16: only cooperative-matrix
 * devices, never the CPU, no fall back to f32; f32 as before. */
static void
test_candidates (void)
{
  const RlxModel *mlp = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autoptr(GPtrArray) both = devices (TRUE);
  g_autoptr(GPtrArray) plain = devices (FALSE);
  g_autoptr(GPtrArray) why = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) c = NULL;
  const char *explicit_refused[] = { "vulkan:Plain", "vulkan:0", "vulkan:llvmpipe" };

  /* f32: the plain GPU is first, the CPU behind it (unchanged) */
  c = rlx_backend_candidates ("auto", RLX_VK_COMPUTE_F32, mlp, 64, plain, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (c->len, ==, 2);
  g_assert_cmpuint (g_array_index (c, guint, 0), ==, 0);
  g_assert_cmpuint (g_array_index (c, guint, 1), ==, RLX_BACKEND_CPU_CANDIDATE);
  g_clear_pointer (&c, g_array_unref);

  /* f16: only the H200, and no CPU behind it; the plain GPU's reason kept */
  c = rlx_backend_candidates ("auto", RLX_VK_COMPUTE_F16, mlp, 64, both, NULL, why, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (c->len, ==, 1);
  g_assert_cmpuint (g_array_index (c, guint, 0), ==, 1);
  g_assert_cmpuint (why->len, >=, 1);
  assert_has (g_ptr_array_index (why, 0), "vulkan: Plain GPU has no cooperative matrix");
  g_clear_pointer (&c, g_array_unref);
  c = rlx_backend_candidates ("vulkan", RLX_VK_COMPUTE_F16, mlp, 64, both, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (c->len, ==, 1);
  g_assert_cmpuint (g_array_index (c, guint, 0), ==, 1);
  g_clear_pointer (&c, g_array_unref);
  c = rlx_backend_candidates ("vulkan:H200", RLX_VK_COMPUTE_F16, mlp, 64, both, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (c->len, ==, 1);
  g_clear_pointer (&c, g_array_unref);

  /* f16 where nothing can: refused, with each device's reason, not moved
   * to the CPU or to f32 */
  c = rlx_backend_candidates ("auto", RLX_VK_COMPUTE_F16, mlp, 64, plain, NULL, NULL, &error);
  g_assert_null (c);
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE);
  assert_has (error->message, "auto cannot train mnist-mlp at --compute f16");
  assert_has (error->message, "Plain GPU has no cooperative matrix");
  assert_has (error->message, "the CPU computes in f32 only");
  g_clear_error (&error);
  c = rlx_backend_candidates ("vulkan", RLX_VK_COMPUTE_F16, mlp, 64, plain, NULL, NULL, &error);
  g_assert_null (c);
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE);
  assert_has (error->message, "vulkan cannot train mnist-mlp at --compute f16");
  assert_has (error->message, "Plain GPU has no cooperative matrix");
  g_clear_error (&error);
  for (guint i = 0; i < G_N_ELEMENTS (explicit_refused); i++)
    {
      c = rlx_backend_candidates (explicit_refused[i], RLX_VK_COMPUTE_F16, mlp, 64, both, NULL,
                                  NULL, &error);
      g_assert_null (c);
      g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE);
      assert_has (error->message, "at --compute f16");
      assert_has (error->message, "has no cooperative matrix");
      g_clear_error (&error);
    }
  /* the CPU: f32 only */
  c = rlx_backend_candidates ("cpu", RLX_VK_COMPUTE_F16, mlp, 64, both, NULL, NULL, &error);
  g_assert_null (c);
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE);
  assert_has (error->message, "the CPU backend computes in f32 only");
  g_clear_error (&error);
  /* bf16: refused on every device, with why */
  c = rlx_backend_candidates ("vulkan:H200", RLX_VK_COMPUTE_BF16, mlp, 64, both, NULL, NULL,
                              &error);
  g_assert_null (c);
  assert_has (error->message, "--compute bf16 is not built in");
  g_clear_error (&error);
  /* no loader at all: the reason is the loader's */
  c = rlx_backend_candidates ("auto", RLX_VK_COMPUTE_F16, mlp, 64, NULL, "no Vulkan loader (x)",
                              NULL, &error);
  g_assert_null (c);
  assert_has (error->message, "no Vulkan loader (x)");
}

/* Which operands of mnist-mlp-xl's and mnist-mlp's tensor-core GEMMs get
 * an f16 copy of their own (RLX_VK_CM_HALF): re-reads are tiles of 128
 * across the other dimension, summed over the operand's GEMMs. */
static void
test_copy_rule (void)
{
  /* mnist-mlp-xl 8192: the input (8 + 8), the first weights (64), a
   * hidden gradient's 7 for dW 1 */
  g_assert_true (rlx_vk_f16_copy_pays (8192ull * 784, 16));
  g_assert_true (rlx_vk_f16_copy_pays (1024ull * 784, 64));
  g_assert_true (rlx_vk_f16_copy_pays (8192ull * 1024, 7));
  /* mnist-mlp-xl 1024: the input still (16), not the first weights (8) */
  g_assert_true (rlx_vk_f16_copy_pays (1024ull * 784, 16));
  g_assert_false (rlx_vk_f16_copy_pays (1024ull * 784, 8));
  /* mnist-mlp 1024: nothing (the input is read once by each GEMM, the
   * weights and the gradient are small) */
  g_assert_false (rlx_vk_f16_copy_pays (1024ull * 784, 2));
  g_assert_false (rlx_vk_f16_copy_pays (784ull * 128, 8));
  g_assert_false (rlx_vk_f16_copy_pays (1024ull * 128, 7));
  /* under 4 re-reads never, however large; none at all */
  g_assert_false (rlx_vk_f16_copy_pays (G_GUINT64_CONSTANT (1) << 40, 3));
  g_assert_false (rlx_vk_f16_copy_pays (0, 1000));
}

/* Which GEMMs of a step run on tensor cores. */
static void
test_gemm_rule (void)
{
  static const guint shapes[][3] = {
    { 8192, 1024, 784 }, { 1024, 784, 8192 }, { 8192, 784, 1024 }, { 64, 64, 32 },
    { 8192, 10, 1024 }, { 10, 1024, 8192 }, { 63, 1024, 784 }, { 1024, 63, 784 },
    { 1024, 1024, 31 }, { 1, 1, 1 },
  };
  /* f16 where both sides of the output are ≥ 64 and K ≥ 32 */
  static const gboolean f16[] = { 1, 1, 1, 1, 0, 0, 0, 0, 0, 0 };

  for (guint i = 0; i < G_N_ELEMENTS (shapes); i++)
    {
      const guint *s = shapes[i];

      /* f32: never, whatever the shape */
      g_assert_cmpuint (rlx_vk_gemm_compute (RLX_VK_COMPUTE_F32, s[0], s[1], s[2], TRUE), ==,
                        RLX_VK_COMPUTE_F32);
      g_assert_cmpuint (rlx_vk_gemm_compute (RLX_VK_COMPUTE_F32, s[0], s[1], s[2], FALSE), ==,
                        RLX_VK_COMPUTE_F32);
      /* convolution addressing: never */
      g_assert_cmpuint (rlx_vk_gemm_compute (RLX_VK_COMPUTE_F16, s[0], s[1], s[2], FALSE), ==,
                        RLX_VK_COMPUTE_F32);
      g_assert_cmpuint (rlx_vk_gemm_compute (RLX_VK_COMPUTE_F16, s[0], s[1], s[2], TRUE), ==,
                        f16[i] ? RLX_VK_COMPUTE_F16 : RLX_VK_COMPUTE_F32);
    }
}

/* lavapipe (no cooperative matrix): f16 refused with the reason; f32 is
 * the default path, bit for bit. */
static void
test_lavapipe (void)
{
  const RlxModel *mlp = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxBackend) f16 = NULL, f32 = NULL, dflt = NULL;
  g_autofree float *params = g_new (float, mlp->n_params);
  g_autofree float *g1 = g_new (float, mlp->n_params);
  g_autofree float *g2 = g_new (float, mlp->n_params);
  guint32 idx[32];
  float l1, l2;

  f16 = rlx_backend_resolve_compute ("vulkan:llvmpipe", RLX_VK_COMPUTE_F16, mlp, dataset, 32,
                                     &error);
  if (f16 == NULL && error != NULL && strstr (error->message, "no device's name contains") != NULL)
    {
      if (g_getenv ("CI") != NULL)
        g_error ("CI is set but there is no lavapipe device: %s", error->message);
      g_test_skip ("no lavapipe device (install mesa-vulkan-drivers)");
      return;
    }
  g_assert_null (f16);
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE);
  assert_has (error->message, "vulkan:llvmpipe cannot train mnist-mlp at --compute f16");
  assert_has (error->message, "has no cooperative matrix");
  assert_has (error->message, "use --compute f32");
  g_clear_error (&error);

  f32 = rlx_backend_resolve_compute ("vulkan:llvmpipe", RLX_VK_COMPUTE_F32, mlp, dataset, 32,
                                     &error);
  g_assert_no_error (error);
  dflt = rlx_backend_resolve ("vulkan:llvmpipe", mlp, dataset, 32, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (rlx_backend_compute_mode (f32), ==, RLX_VK_COMPUTE_F32);
  g_assert_cmpuint (rlx_backend_compute_mode (dflt), ==, RLX_VK_COMPUTE_F32);
  g_assert_cmpstr (rlx_backend_device (f32), ==, rlx_backend_device (dflt));
  rlx_model_init_params (mlp, 3, params);
  for (guint i = 0; i < G_N_ELEMENTS (idx); i++)
    idx[i] = 131 * i + 7;
  g_assert_true (rlx_backend_grads (f32, params, idx, 32, &l1, g1, &error));
  g_assert_true (rlx_backend_grads (dflt, params, idx, 32, &l2, g2, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (&l1, 4, &l2, 4);
  g_assert_cmpmem (g1, mlp->n_params * sizeof (float), g2, mlp->n_params * sizeof (float));
}

static gboolean
never_f16 (guint M, guint N, guint K)
{
  return FALSE;
}

/* The f16 check's reference, on the CPU (no device needed): the CPU
 * emulating --compute f16 (rlx_cpu_trainer_set_f16 with the GPU's rule and
 * loss scale) is as far from f32 at small batches as the H200's f16 step
 * was (0.083 and 0.068 · max |g| at batch 64), a rule that picks nothing is
 * f32 bit for bit, and the check at f16 measures against the emulation:
 * the emulation's own gradient passes it exactly; a lost tile (the
 * worst-element bound) and an error in every element (the 99th-percentile
 * bound) do not. */
static void
test_f16_reference (void)
{
  static const RlxModelId models[] = { RLX_MODEL_MNIST_MLP, RLX_MODEL_MNIST_MLP_XL };
  const guint n = 64;

  g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
  for (guint i = 0; i < G_N_ELEMENTS (models); i++)
    {
      const RlxModel *model = rlx_model_get (models[i]);
      g_autoptr(RlxCpuTrainer) c32 = rlx_cpu_trainer_new (model, n);
      g_autoptr(RlxCpuTrainer) c16 = rlx_cpu_trainer_new (model, n);
      g_autoptr(RlxCpuTrainer) cnone = rlx_cpu_trainer_new (model, n);
      g_autoptr(RlxBackendCheck) check = rlx_backend_check_new (model, dataset, n, "emulation");
      g_autofree float *params = g_new (float, model->n_params);
      g_autofree float *g32 = g_new (float, model->n_params);
      g_autofree float *g16 = g_new (float, model->n_params);
      g_autofree float *gnone = g_new (float, model->n_params);
      g_autofree float *x = g_new (float, (gsize) n * RLX_INPUT_LEN);
      guint8 labels[64];
      guint32 idx[64];
      double gr = 1, lr = 1, dev = 0, emu = 0;
      float l32, l16, lnone;

      rlx_cpu_trainer_set_f16 (c16, rlx_vk_gemm_is_f16, rlx_vk_f16_grad_scale);
      rlx_cpu_trainer_set_f16 (cnone, never_f16, rlx_vk_f16_grad_scale);
      rlx_model_init_params (model, 11, params);
      for (guint k = 0; k < n; k++)
        idx[k] = (guint32) ((7919u * k) % rlx_dataset_size (dataset, RLX_SPLIT_TRAIN));
      rlx_dataset_gather (dataset, RLX_SPLIT_TRAIN, idx, n, x, labels);
      l32 = rlx_cpu_trainer_grads (c32, params, x, labels, n, g32);
      l16 = rlx_cpu_trainer_grads (c16, params, x, labels, n, g16);
      lnone = rlx_cpu_trainer_grads (cnone, params, x, labels, n, gnone);
      g_assert_cmpmem (&lnone, 4, &l32, 4);
      g_assert_cmpmem (gnone, model->n_params * sizeof (float), g32, model->n_params * sizeof (float));
      rlx_backend_check_set_compute (check, RLX_VK_COMPUTE_F16);
      g_assert_cmpuint (rlx_backend_check_step_ratio (check, params, idx, n, l16, g16, &gr, &lr), ==, 0);
      g_assert_cmpfloat (gr, <=, 1e-6);
      g_assert_cmpfloat (lr, <=, 1e-6);
      rlx_backend_check_f32_distance (check, &dev, &emu);
      g_print ("f16-emulation %s batch %u: max|dg|/max|g| against f32 %.3g, |dloss|/loss %.3g\n",
               model->slug, n, emu, fabs ((double) l16 - l32) / l32);
      /* f16's rounding shows, far beyond the f16 check's bound, as much in
       * the emulation as in the "device" (here the emulation itself) */
      g_assert_cmpfloat (emu, >, 10 * RLX_CHECK_F16_GRAD);
      g_assert_cmpfloat (dev, ==, emu);
      /* 8 × 16 elements around the largest gone (max |Δ| = max |g|: over
       * the emulation's own distance; too few to move the 99th
       * percentile) is out; so is every element off by
       * 2·RLX_CHECK_F16_GRAD·max |g| (the bulk) */
      {
        const RlxTensorInfo *w1 = &model->tensors[0];
        g_autofree float *bad = g_memdup2 (g16, model->n_params * sizeof (float));
        gsize at = w1->offset, row, col;
        float maxg = 0;

        for (gsize k = w1->offset; k < w1->offset + w1->numel; k++)
          if (fabsf (g16[k]) > maxg)
            {
              maxg = fabsf (g16[k]);
              at = k;
            }
        row = MIN ((at - w1->offset) / w1->shape[1], w1->shape[0] - 8);
        col = MIN ((at - w1->offset) % w1->shape[1], w1->shape[1] - 16);
        for (guint r = 0; r < 8; r++)
          memset (bad + w1->offset + (row + r) * w1->shape[1] + col, 0, 16 * sizeof (float));
        g_assert_cmpuint (rlx_backend_check_step_ratio (check, params, idx, n, l16, bad, &gr, &lr), >, 0);
        for (gsize k = w1->offset; k < w1->offset + w1->numel; k++)
          bad[k] = g16[k] + ((k & 1) ? 2.0f : -2.0f) * (float) RLX_CHECK_F16_GRAD * maxg;
        g_assert_cmpfloat (2 * RLX_CHECK_F16_GRAD, <, emu);   /* the max bound alone would pass it */
        g_assert_cmpuint (rlx_backend_check_step_ratio (check, params, idx, n, l16, bad, &gr, &lr), >, 0);
      }
      /* at f32 the f32 gradient passes */
      rlx_backend_check_set_compute (check, RLX_VK_COMPUTE_F32);
      g_assert_cmpuint (rlx_backend_check_step_ratio (check, params, idx, n, l32, g32, NULL, NULL), ==, 0);
    }
}

/* The f16 step against the CPU, on a device that has cooperative
 * matrices (RLX_TEST_COOP=SPEC). */
static void
test_f16_gradients (void)
{
  const char *spec = g_getenv ("RLX_TEST_COOP");
  static const guint batches[] = { 7, 64, 256, 1024, 4096, 8192 };
  guint failed = 0;

  if (spec == NULL)
    {
      g_test_skip ("RLX_TEST_COOP is not set (a device with cooperative matrices, e.g. vulkan:0)");
      return;
    }
  /* the check names each mismatch in a warning: every case runs and says
   * how far it is, then the test fails if any was out of bounds */
  g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
  for (guint m = 0; m < RLX_N_MODELS; m++)
    {
      const RlxModel *model = rlx_model_get (m);
      g_autoptr(GError) error = NULL;
      g_autoptr(RlxBackend) be = rlx_backend_resolve_compute (spec, RLX_VK_COMPUTE_F16, model,
                                                              dataset, 8192, &error);
      g_autoptr(RlxBackendCheck) check = NULL;
      g_autofree float *params = g_new (float, model->n_params);
      g_autofree float *grads = g_new (float, model->n_params);
      g_autofree guint32 *idx = g_new (guint32, 8192);

      g_assert_no_error (error);
      check = rlx_backend_check_new (model, dataset, 8192, rlx_backend_device (be));
      rlx_backend_check_set_compute (check, RLX_VK_COMPUTE_F16);
      rlx_model_init_params (model, 11, params);
      for (guint b = 0; b < G_N_ELEMENTS (batches); b++)
        {
          guint n = batches[b];
          double gr = 0, lr = 0, dev = 0, emu = 0;
          float loss;
          guint bad;

          for (guint i = 0; i < n; i++)
            idx[i] = (guint32) ((7919u * i + 13u * b) % rlx_dataset_size (dataset, RLX_SPLIT_TRAIN));
          g_assert_true (rlx_backend_grads (be, params, idx, n, &loss, grads, &error));
          g_assert_no_error (error);
          bad = rlx_backend_check_step_ratio (check, params, idx, n, loss, grads, &gr, &lr);
          rlx_backend_check_f32_distance (check, &dev, &emu);
          /* one line per case, for BENCHMARKS.md */
          g_print ("f16-check %s batch %u: against the CPU emulating f16 max|dg|/max|g| %.3g "
                   "(bound %g), |dloss|/loss %.3g (bound %g); against f32: this device %.3g, "
                   "the CPU's f16 emulation %.3g; on %s%s\n", model->slug, n, gr,
                   RLX_CHECK_F16_GRAD, lr, RLX_CHECK_F16_LOSS, dev, emu,
                   rlx_backend_device (be), bad ? " — OUT OF BOUNDS" : "");
          failed += bad != 0;
        }
    }
  g_assert_cmpuint (failed, ==, 0);
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  int r;

  g_test_init (&argc, &argv, NULL);
  g_setenv ("RLX_VK_VALIDATE", "1", FALSE);
  dataset = rlx_dataset_open ("synthetic", 1, &error);
  g_assert_no_error (error);
  g_test_add_func ("/gpu/compute/parse", test_parse);
  g_test_add_func ("/gpu/compute/device-check", test_device_check);
  g_test_add_func ("/gpu/compute/candidates", test_candidates);
  g_test_add_func ("/gpu/compute/gemm-rule", test_gemm_rule);
  g_test_add_func ("/gpu/compute/copy-rule", test_copy_rule);
  g_test_add_func ("/gpu/compute/lavapipe", test_lavapipe);
  g_test_add_func ("/gpu/compute/f16-reference", test_f16_reference);
  g_test_add_func ("/gpu/compute/f16-gradients", test_f16_gradients);
  r = g_test_run ();
  rlx_dataset_unref (dataset);
  return r;
}
