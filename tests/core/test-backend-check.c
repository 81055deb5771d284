/* test-backend-check.c — the check mode (core/rlx-backend-check.c)
 *
 * The check recomputes a gradient on the CPU and names what differs: here
 * it is given the CPU's own gradient (nothing may be reported), the same
 * with noise inside the tolerance, and gradients broken in one tensor or in
 * the loss (exactly that must be reported, by name). Then RLX_BACKEND_CHECK
 * on a real vulkan backend (lavapipe): every step is checked, and passes
 * silently.
 */
#include "rlx-config.h"
#include "core/rlx-backend.h"
#include "core/rlx-backend-check.h"
#include "core/rlx-backend-private.h"

#include <math.h>
#include <string.h>

static RlxDataset *dataset;

#define BATCH 8

typedef struct {
  const RlxModel *model;
  float          *params;
  float          *grads;
  float           loss;
  guint32         indices[BATCH];
} Step;

/* A step of @model at its initial parameters, computed by the cpu backend. */
static void
step_init (Step *s, const RlxModel *model)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxBackend) cpu = rlx_backend_resolve ("cpu", model, dataset, BATCH, &error);

  g_assert_no_error (error);
  s->model = model;
  s->params = g_new (float, model->n_params);
  s->grads = g_new (float, model->n_params);
  rlx_model_init_params (model, 7, s->params);
  for (guint i = 0; i < BATCH; i++)
    s->indices[i] = 97 * i + 5;
  g_assert_true (rlx_backend_grads (cpu, s->params, s->indices, BATCH, &s->loss, s->grads,
                                    &error));
  g_assert_no_error (error);
}

static void
step_clear (Step *s)
{
  g_free (s->params);
  g_free (s->grads);
}

/* The largest |g| of tensor @t. */
static double
tensor_max (const Step *s, guint t)
{
  const RlxTensorInfo *ti = &s->model->tensors[t];
  double m = 0;

  for (gsize i = ti->offset; i < ti->offset + ti->numel; i++)
    m = MAX (m, fabs (s->grads[i]));
  return m;
}

static void
test_check_compares (void)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autoptr(RlxBackendCheck) check = rlx_backend_check_new (model, dataset, BATCH, "a test");
  g_autofree float *g = NULL;
  Step s;

  step_init (&s, model);
  g = g_memdup2 (s.grads, model->n_params * sizeof (float));

  /* the reference itself, and noise within the tolerance */
  g_assert_cmpuint (rlx_backend_check_step (check, s.params, s.indices, BATCH, s.loss, g), ==, 0);
  for (guint t = 0; t < model->n_tensors; t++)
    {
      const RlxTensorInfo *ti = &model->tensors[t];
      g[ti->offset + ti->numel / 2] += (float) (0.8e-4 * tensor_max (&s, t));
    }
  g_assert_cmpuint (rlx_backend_check_step (check, s.params, s.indices, BATCH,
                                            s.loss * (1 + 2e-6f), g), ==, 0);

  /* one tensor broken: that one is named */
  for (guint t = 0; t < model->n_tensors; t++)
    {
      const RlxTensorInfo *ti = &model->tensors[t];
      g_autofree char *want = g_strdup_printf ("*check: mnist-mlp batch %u on a test: %s differs "
                                               "from the CPU reference*", BATCH, ti->name);

      memcpy (g, s.grads, model->n_params * sizeof (float));
      g[ti->offset + ti->numel - 1] += (float) (3e-4 * tensor_max (&s, t) + 1e-6);
      g_test_expect_message (G_LOG_DOMAIN, G_LOG_LEVEL_WARNING, want);
      g_assert_cmpuint (rlx_backend_check_step (check, s.params, s.indices, BATCH, s.loss, g),
                        ==, 1);
      g_test_assert_expected_messages ();
    }

  /* the loss */
  memcpy (g, s.grads, model->n_params * sizeof (float));
  g_test_expect_message (G_LOG_DOMAIN, G_LOG_LEVEL_WARNING,
                         "*check: mnist-mlp batch 8 on a test: loss *, CPU reference*");
  g_assert_cmpuint (rlx_backend_check_step (check, s.params, s.indices, BATCH, s.loss * 1.001f,
                                            g), ==, 1);
  g_test_assert_expected_messages ();
  step_clear (&s);
}

static void
test_check_enabled (void)
{
  g_unsetenv ("RLX_BACKEND_CHECK");
  g_assert_false (rlx_backend_check_enabled ());
  g_setenv ("RLX_BACKEND_CHECK", "0", TRUE);
  g_assert_false (rlx_backend_check_enabled ());
  g_setenv ("RLX_BACKEND_CHECK", "1", TRUE);
  g_assert_true (rlx_backend_check_enabled ());
  g_unsetenv ("RLX_BACKEND_CHECK");
}

/* A vulkan backend made with RLX_BACKEND_CHECK=1 checks its steps: they
 * agree with the CPU, so nothing is reported (a warning fails the test). */
static void
test_check_vulkan (void)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxBackend) vk = NULL;
  g_autofree float *g = g_new (float, model->n_params);
  float loss;
  Step s;

  g_setenv ("RLX_BACKEND_CHECK", "1", TRUE);
  vk = rlx_backend_resolve ("vulkan:llvmpipe", model, dataset, BATCH, &error);
  g_unsetenv ("RLX_BACKEND_CHECK");
  if (vk == NULL)
    {
      if (g_getenv ("CI") != NULL)
        g_error ("CI is set but vulkan:llvmpipe cannot be opened (%s): install "
                 "mesa-vulkan-drivers (scripts/deps.sh does)", error->message);
      g_test_skip (error->message);
      return;
    }
  step_init (&s, model);
  for (guint k = 0; k < 3; k++)
    {
      g_assert_true (rlx_backend_grads (vk, s.params, s.indices, BATCH, &loss, g, &error));
      g_assert_no_error (error);
      s.indices[k] += 1000;
    }
  g_assert_cmpuint (rlx_backend_checked_steps (vk), ==, 3);
  g_assert_true (isfinite (loss));
  step_clear (&s);
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  int status;

  g_test_init (&argc, &argv, NULL);
  dataset = rlx_dataset_open ("synthetic", 3, &error);
  g_assert_no_error (error);
  g_test_add_func ("/backend/check/compares", test_check_compares);
  g_test_add_func ("/backend/check/enabled", test_check_enabled);
  g_test_add_func ("/backend/check/vulkan", test_check_vulkan);
  status = g_test_run ();
  g_clear_pointer (&dataset, rlx_dataset_unref);
  return status;
}
