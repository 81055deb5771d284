/* rlx-backend-check.c — the check mode (rules in rlx-backend-check.h)
 *
 * The reference is a cpu backend of the same model, dataset and batch
 * (rlx-backend-host.c), made with the check and asked for each gradient
 * again.
 */
#include "rlx-config.h"
#include "rlx-backend-check.h"
#include "rlx-backend-impl.h"

#include <math.h>

struct _RlxBackendCheck {
  RlxBackend *ref;      /* the CPU reference */
  char       *device;
  float      *grads;    /* its gradient, n_params */
  guint64     count;    /* steps compared */
  double      grad_tol; /* max |Δ| ≤ grad_tol · max |g| + 1e-6 */
  double      loss_tol; /* |Δloss| ≤ loss_tol · |loss| */
};

gboolean
rlx_backend_check_enabled (void)
{
  const char *v = g_getenv ("RLX_BACKEND_CHECK");

  return v != NULL && g_strcmp0 (v, "0") != 0;
}

RlxBackendCheck *
rlx_backend_check_new (const RlxModel *model, RlxDataset *dataset, guint max_batch,
                       const char *device)
{
  RlxBackendCheck *self;

  g_return_val_if_fail (model != NULL && dataset != NULL && max_batch > 0, NULL);

  self = g_new0 (RlxBackendCheck, 1);
  self->ref = rlx_backend_host_new (model, dataset, max_batch);
  self->device = g_strdup (device);
  self->grads = g_new (float, model->n_params);
  self->grad_tol = 1e-4;
  self->loss_tol = 1e-5;
  return self;
}

void
rlx_backend_check_set_compute (RlxBackendCheck *self, guint compute)
{
  g_return_if_fail (self != NULL);
  self->grad_tol = compute == RLX_VK_COMPUTE_F32 ? 1e-4 : RLX_CHECK_F16_GRAD;
  self->loss_tol = compute == RLX_VK_COMPUTE_F32 ? 1e-5 : RLX_CHECK_F16_LOSS;
}

void
rlx_backend_check_free (RlxBackendCheck *self)
{
  if (self == NULL)
    return;
  rlx_backend_free (self->ref);
  g_free (self->device);
  g_free (self->grads);
  g_free (self);
}

guint
rlx_backend_check_step (RlxBackendCheck *self, const float *params, const guint32 *indices,
                        guint n, float loss, const float *grads)
{
  return rlx_backend_check_step_ratio (self, params, indices, n, loss, grads, NULL, NULL);
}

guint
rlx_backend_check_step_ratio (RlxBackendCheck *self, const float *params, const guint32 *indices,
                              guint n, float loss, const float *grads, double *grad_ratio,
                              double *loss_ratio)
{
  const RlxModel *m = rlx_backend_model (self->ref);
  const float *ref = self->grads;
  g_autoptr(GError) error = NULL;
  float ref_loss;
  guint bad = 0;

  g_return_val_if_fail (params != NULL && indices != NULL && grads != NULL, 0);

  self->count++;
  if (!rlx_backend_grads (self->ref, params, indices, n, &ref_loss, self->grads, &error))
    {
      g_warning ("check: %s batch %u on %s: no CPU reference: %s", m->slug, n, self->device,
                 error->message);
      return 1;
    }
  if (loss_ratio != NULL)
    *loss_ratio = fabs ((double) loss - ref_loss) / MAX (fabs ((double) ref_loss), 1e-30);
  if (grad_ratio != NULL)
    *grad_ratio = 0;
  if (!(fabs ((double) loss - ref_loss) <= self->loss_tol * fabs ((double) ref_loss)))
    {
      g_warning ("check: %s batch %u on %s: loss %.9g, CPU reference %.9g",
                 m->slug, n, self->device, loss, ref_loss);
      bad++;
    }
  for (guint t = 0; t < m->n_tensors; t++)
    {
      const RlxTensorInfo *ti = &m->tensors[t];
      double maxg = 0, maxd = 0;

      for (gsize i = ti->offset; i < ti->offset + ti->numel; i++)
        {
          maxg = MAX (maxg, fabs (ref[i]));
          maxd = MAX (maxd, fabs ((double) grads[i] - ref[i]));
        }
      if (grad_ratio != NULL && maxg > 0)
        *grad_ratio = MAX (*grad_ratio, maxd / maxg);
      if (!(maxd <= self->grad_tol * maxg + 1e-6))
        {
          g_warning ("check: %s batch %u on %s: %s differs from the CPU reference by %.3g "
                     "(max |g| %.3g)", m->slug, n, self->device, ti->name, maxd, maxg);
          bad++;
        }
    }
  return bad;
}

guint64
rlx_backend_check_count (RlxBackendCheck *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->count;
}
