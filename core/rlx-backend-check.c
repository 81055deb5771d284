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
  RlxBackend *ref16;    /* at f16: the CPU emulating it (the bound's reference), else NULL */
  char       *device;
  float      *grads;    /* the bound's reference gradient, n_params */
  float      *grads32;  /* at f16: the f32 reference's */
  float      *scratch;  /* at f16: n_params, for percentiles */
  guint64     count;    /* steps compared */
  double      grad_tol; /* max |Δ| ≤ grad_tol · max |g| + 1e-6 */
  double      loss_tol; /* |Δloss| ≤ loss_tol · |loss| */
  double      f32_device, f32_emulation;  /* the last f16 step's distances from f32 */
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
  self->f32_device = self->f32_emulation = NAN;
  return self;
}

void
rlx_backend_check_set_compute (RlxBackendCheck *self, guint compute)
{
  const RlxModel *m;

  g_return_if_fail (self != NULL);
  m = rlx_backend_model (self->ref);
  g_clear_pointer (&self->ref16, rlx_backend_free);
  g_clear_pointer (&self->grads32, g_free);
  g_clear_pointer (&self->scratch, g_free);
  self->grad_tol = compute == RLX_VK_COMPUTE_F32 ? 1e-4 : RLX_CHECK_F16_GRAD;
  self->loss_tol = compute == RLX_VK_COMPUTE_F32 ? 1e-5 : RLX_CHECK_F16_LOSS;
  if (compute == RLX_VK_COMPUTE_F32)
    return;
  self->ref16 = rlx_backend_host_new (m, rlx_backend_dataset (self->ref),
                                      rlx_backend_max_batch (self->ref));
  rlx_backend_host_emulate_f16 (self->ref16);
  self->grads32 = g_new (float, m->n_params);
  self->scratch = g_new (float, m->n_params);
}

void
rlx_backend_check_free (RlxBackendCheck *self)
{
  if (self == NULL)
    return;
  rlx_backend_free (self->ref);
  if (self->ref16 != NULL)
    rlx_backend_free (self->ref16);
  g_free (self->device);
  g_free (self->grads);
  g_free (self->grads32);
  g_free (self->scratch);
  g_free (self);
}

guint
rlx_backend_check_step (RlxBackendCheck *self, const float *params, const guint32 *indices,
                        guint n, float loss, const float *grads)
{
  return rlx_backend_check_step_ratio (self, params, indices, n, loss, grads, NULL, NULL);
}

/* max |a - b| and max |b| over tensor @ti */
static void
tensor_distance (const RlxTensorInfo *ti, const float *a, const float *b, double *maxd,
                 double *maxg)
{
  *maxd = *maxg = 0;
  for (gsize i = ti->offset; i < ti->offset + ti->numel; i++)
    {
      *maxg = MAX (*maxg, fabs (b[i]));
      *maxd = MAX (*maxd, fabs ((double) a[i] - b[i]));
    }
}

static int
cmp_float (const void *a, const void *b)
{
  float x = *(const float *) a, y = *(const float *) b;

  return (x > y) - (x < y);
}

/* the 99th percentile of |a - b| over tensor @ti (@scratch: numel floats) */
static double
tensor_p99 (const RlxTensorInfo *ti, const float *a, const float *b, float *scratch)
{
  for (gsize i = 0; i < ti->numel; i++)
    scratch[i] = fabsf (a[ti->offset + i] - b[ti->offset + i]);
  qsort (scratch, ti->numel, sizeof (float), cmp_float);
  return scratch[MIN (ti->numel - 1, (gsize) (0.99 * (double) ti->numel))];
}

/* max over @m's tensors of max |a - b| / max |b| */
static double
worst_ratio (const RlxModel *m, const float *a, const float *b)
{
  double worst = 0, maxd, maxg;

  for (guint t = 0; t < m->n_tensors; t++)
    {
      tensor_distance (&m->tensors[t], a, b, &maxd, &maxg);
      if (maxg > 0)
        worst = MAX (worst, maxd / maxg);
    }
  return worst;
}

guint
rlx_backend_check_step_ratio (RlxBackendCheck *self, const float *params, const guint32 *indices,
                              guint n, float loss, const float *grads, double *grad_ratio,
                              double *loss_ratio)
{
  const RlxModel *m = rlx_backend_model (self->ref);
  RlxBackend *bound_ref = self->ref16 != NULL ? self->ref16 : self->ref;
  const char *what = self->ref16 != NULL ? "CPU reference emulating f16" : "CPU reference";
  const float *ref = self->grads;
  g_autoptr(GError) error = NULL;
  float ref_loss, loss32;
  guint bad = 0;

  g_return_val_if_fail (params != NULL && indices != NULL && grads != NULL, 0);
  self->count++;
  if (!rlx_backend_grads (bound_ref, params, indices, n, &ref_loss, self->grads, &error) ||
      (self->ref16 != NULL &&
       !rlx_backend_grads (self->ref, params, indices, n, &loss32, self->grads32, &error)))
    {
      g_warning ("check: %s batch %u on %s: no CPU reference: %s", m->slug, n, self->device,
                 error->message);
      return 1;
    }
  if (self->ref16 != NULL)
    {
      self->f32_device = worst_ratio (m, grads, self->grads32);
      self->f32_emulation = worst_ratio (m, self->grads, self->grads32);
    }
  if (loss_ratio != NULL)
    *loss_ratio = fabs ((double) loss - ref_loss) / MAX (fabs ((double) ref_loss), 1e-30);
  if (grad_ratio != NULL)
    *grad_ratio = worst_ratio (m, grads, ref);
  if (!(fabs ((double) loss - ref_loss) <= self->loss_tol * fabs ((double) ref_loss)))
    {
      g_warning ("check: %s batch %u on %s: loss %.9g, %s %.9g",
                 m->slug, n, self->device, loss, what, ref_loss);
      bad++;
    }
  for (guint t = 0; t < m->n_tensors; t++)
    {
      const RlxTensorInfo *ti = &m->tensors[t];
      double maxg, maxd, tol = self->grad_tol;

      tensor_distance (ti, grads, ref, &maxd, &maxg);
      if (self->ref16 != NULL)
        {
          /* the bulk within grad_tol; the worst element within grad_tol
           * plus the emulation's own distance from f32 (a ReLU flipped
           * between device and emulation moves one sample's term) */
          double p99 = tensor_p99 (ti, grads, ref, self->scratch);

          if (!(p99 <= self->grad_tol * maxg + 1e-6))
            {
              g_warning ("check: %s batch %u on %s: %s's 99th-percentile difference from the %s "
                         "is %.3g (max |g| %.3g)", m->slug, n, self->device, ti->name, what, p99,
                         maxg);
              bad++;
            }
          tol += self->f32_emulation;
        }
      if (!(maxd <= tol * maxg + 1e-6))
        {
          g_warning ("check: %s batch %u on %s: %s differs from the %s by %.3g "
                     "(max |g| %.3g)", m->slug, n, self->device, ti->name, what, maxd, maxg);
          bad++;
        }
    }
  return bad;
}

void
rlx_backend_check_f32_distance (RlxBackendCheck *self, double *device, double *emulation)
{
  g_return_if_fail (self != NULL);
  if (device != NULL)
    *device = self->f32_device;
  if (emulation != NULL)
    *emulation = self->f32_emulation;
}

guint64
rlx_backend_check_count (RlxBackendCheck *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->count;
}
