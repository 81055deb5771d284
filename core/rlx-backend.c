/* rlx-backend.c — the façade: resolution, and every call checked and routed
 *
 * Resolution (rules in rlx-backend.h) is the policy of rlx-backend-policy.c
 * (candidates, claims, the walk and its reasons, all without a device) over
 * the devices rlx_vk_enumerate finds; open_candidate makes the backend the
 * walk asks for. Each call then checks what rlx-backend.h promises to check
 * (batch, length, scale, state) and goes through the backend's interfaces
 * (rlx-backend-impl.h): the compute (rlx-backend-host.c, rlx-backend-vk.c)
 * and the replica (the same two files). This file never asks which
 * implementation it holds.
 */
#include "rlx-config.h"
#include "rlx-backend.h"
#include "rlx-backend-impl.h"
#include "rlx-backend-private.h"
#include "rlx-backend-policy.h"

#include <math.h>
#include <unistd.h>

G_DEFINE_QUARK (rlx-backend-error-quark, rlx_backend_error)

RlxBackend *
rlx_backend_alloc (const RlxModel *model, RlxDataset *dataset, guint max_batch)
{
  RlxBackend *self = g_new0 (RlxBackend, 1);

  self->gpu_lock = -1;
  self->model = model;
  self->dataset = rlx_dataset_ref (dataset);
  self->max_batch = max_batch;
  self->device = g_strdup ("");
  self->fallback = g_strdup ("");
  return self;
}

/* ------------------------------------------------------------ resolution */

typedef struct {
  GPtrArray      *devices;
  const RlxModel *model;
  RlxDataset     *dataset;
  guint           max_batch;
  RlxVkCompute    compute;
} Opening;

/* RlxBackendOpenFunc: candidate @c made into a backend */
static gpointer
open_candidate (guint c, gpointer user_data, char **note, GError **error)
{
  Opening *o = user_data;
  RlxBackend *self;

  if (c == RLX_BACKEND_CPU_CANDIDATE)
    return rlx_backend_host_new (o->model, o->dataset, o->max_batch);
  self = rlx_backend_vk_new (g_ptr_array_index (o->devices, c), o->model, o->dataset,
                             o->max_batch, o->compute, error);
  if (self != NULL)
    *note = g_strdup (self->note);
  return self;
}

RlxBackend *
rlx_backend_resolve (const char *request, const RlxModel *model,
                     RlxDataset *dataset, guint max_batch, GError **error)
{
  return rlx_backend_resolve_compute (request, RLX_VK_COMPUTE_F32, model, dataset, max_batch,
                                      error);
}

RlxBackend *
rlx_backend_resolve_compute (const char *request, RlxVkCompute compute, const RlxModel *model,
                             RlxDataset *dataset, guint max_batch, GError **error)
{
  g_autoptr(GPtrArray) devices = NULL;
  g_autoptr(GError) vk_error = NULL;
  g_autofree char *lock_dir = NULL;
  Opening o = { NULL, model, dataset, max_batch, compute };
  RlxBackendChoice choice;
  RlxBackend *self;

  g_return_val_if_fail (model != NULL, NULL);
  g_return_val_if_fail (dataset != NULL, NULL);
  g_return_val_if_fail (max_batch > 0, NULL);

  if (request == NULL || *request == '\0')
    request = "auto";
  /* the devices matter only to these requests (cpu opens none) */
  if (g_ascii_strncasecmp (request, "vulkan", 6) == 0 || g_ascii_strcasecmp (request, "auto") == 0)
    {
      devices = rlx_vk_enumerate (&vk_error);
      lock_dir = rlx_backend_gpu_lock_dir ();
    }
  o.devices = devices;
  if (!rlx_backend_choose (request, compute, model, max_batch, devices, vk_error ? vk_error->message : NULL,
                           lock_dir, open_candidate, &o, &choice, error))
    return NULL;
  self = choice.opened;
  self->gpu_lock = choice.lock_fd;
  g_free (self->fallback);
  self->fallback = choice.fallback;
  return self;
}

void
rlx_backend_free (RlxBackend *self)
{
  if (self == NULL)
    return;
  if (self->replica != NULL && self->replica->free != NULL)
    self->replica->free (self);
  if (self->compute != NULL)
    self->compute->free (self);
  if (self->gpu_lock >= 0)
    close (self->gpu_lock);
  g_clear_pointer (&self->dataset, rlx_dataset_unref);
  g_free (self->device);
  g_free (self->fallback);
  g_free (self->note);
  g_free (self);
}

const char *rlx_backend_name (const RlxBackend *self) { return self->compute->name; }
const char *rlx_backend_device (const RlxBackend *self) { return self->device; }
RlxVkCompute rlx_backend_compute_mode (const RlxBackend *self) { return self->compute_mode; }
const char *rlx_backend_fallback (const RlxBackend *self) { return self->fallback; }
guint rlx_backend_max_batch (const RlxBackend *self) { return self->max_batch; }
const RlxModel *rlx_backend_model (const RlxBackend *self) { return self->model; }
RlxDataset *rlx_backend_dataset (const RlxBackend *self) { return self->dataset; }

/* ---------------------------------------------------------------- checks */

static gboolean
check_batch (RlxBackend *self, const guint32 *indices, guint n, GError **error)
{
  guint size;

  if (n == 0 || n > self->max_batch)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_BATCH,
                   "batch of %u samples is outside 1..%u", n, self->max_batch);
      return FALSE;
    }
  size = rlx_dataset_size (self->dataset, RLX_SPLIT_TRAIN);
  for (guint i = 0; i < n; i++)
    if (indices[i] >= size)
      {
        g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_BATCH,
                     "sample index %u is past the end of the training set (%u samples)",
                     indices[i], size);
        return FALSE;
      }
  return TRUE;
}

static gboolean
require_replica (RlxBackend *self, const char *what, GError **error)
{
  if (self->loaded)
    return TRUE;
  g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED,
               "%s: the %s backend holds no parameters yet; load them first "
               "(rlx_backend_load_params at founding, join or snapshot)",
               what, rlx_backend_name (self));
  return FALSE;
}

/* The arguments of an update or a bucket of @n codes at @precision with
 * @scale: FALSE with RLX_BACKEND_ERROR_FAILED when they cannot be right. */
static gboolean
check_codes_args (RlxBackend *self, const char *what, gsize n, RlxPrecision precision,
                  double scale, GError **error)
{
  if (n != self->model->n_params)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED,
                   "%s of %" G_GSIZE_FORMAT " elements cannot apply to %s "
                   "(%" G_GSIZE_FORMAT " parameters); the leader and this rank disagree "
                   "on the model", what, n, self->model->slug, self->model->n_params);
      return FALSE;
    }
  if (precision != RLX_PRECISION_F32 && !(scale > 0 && isfinite (scale)))
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED,
                   "%s at %s with scale %g cannot be used: the scale must be "
                   "a finite positive number", what, rlx_precision_to_string (precision), scale);
      return FALSE;
    }
  return TRUE;
}

/* ------------------------------------------------ shared by the implementations */

const char *
rlx_backend_tensor_of (const RlxModel *model, gsize i)
{
  for (guint t = 0; t < model->n_tensors; t++)
    if (i >= model->tensors[t].offset && i < model->tensors[t].offset + model->tensors[t].numel)
      return model->tensors[t].name;
  return "?";
}

void
rlx_backend_set_not_finite (RlxBackend *self, gsize i, float v, gboolean gradient_itself,
                            const char *fate, GError **error)
{
  const RlxModel *m = self->model;

  if (gradient_itself)
    g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE,
                 "the gradient of %s holds %s (element %" G_GSIZE_FORMAT " of %s on %s); "
                 "%s — lower the learning rate or check the data",
                 m->slug, isnan (v) ? "NaN" : v > 0 ? "+Inf" : "-Inf", i,
                 rlx_backend_tensor_of (m, i), self->device, fate);
  else
    g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE,
                 "the gradient of %s plus its carried quantisation residual overflows f32 "
                 "(element %" G_GSIZE_FORMAT " of %s); %s — lower the "
                 "learning rate", m->slug, i, rlx_backend_tensor_of (m, i), fate);
}

void
rlx_backend_set_round_not_finite (RlxBackend *self, gsize i, float v, GError **error)
{
  g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE,
               "the round's update of %s is %s at element %" G_GSIZE_FORMAT " (%s): the "
               "finite buckets summed past f32's range; nothing was applied — lower the "
               "learning rate", self->model->slug, isnan (v) ? "NaN" : v > 0 ? "+Inf" : "-Inf",
               i, rlx_backend_tensor_of (self->model, i));
}

gboolean
rlx_backend_refuse_update (RlxBackend *self, gssize bad, GError **error)
{
  g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE,
               "the update holds NaN or ±Inf at element %" G_GSSIZE_FORMAT " (%s of %s); "
               "it was not applied — the sender's update is corrupt", bad,
               rlx_backend_tensor_of (self->model, (gsize) bad), self->model->slug);
  return FALSE;
}

gboolean
rlx_backend_refuse_bucket (RlxBackend *self, gssize bad, GError **error)
{
  g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE,
               "the bucket holds NaN or ±Inf at element %" G_GSSIZE_FORMAT " (%s of %s); "
               "it was refused — the round's sum is as it was", bad,
               rlx_backend_tensor_of (self->model, (gsize) bad), self->model->slug);
  return FALSE;
}

/* ------------------------------------------------------------- gradients */

gboolean
rlx_backend_grads (RlxBackend *self, const float *params,
                   const guint32 *indices, guint n,
                   float *loss, float *grads, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (params != NULL && indices != NULL && loss != NULL, FALSE);

  if (!check_batch (self, indices, n, error))
    return FALSE;
  return self->compute->grads (self, params, indices, n, loss, grads, error);
}

/* The device's counters: FALSE (all 0) without a device. */
static gboolean
counters (const RlxBackend *self, RlxBackendCounters *c)
{
  *c = (RlxBackendCounters) { 0 };
  return self->compute->counters != NULL && self->compute->counters (self, c);
}

gboolean
rlx_backend_step_timings (const RlxBackend *self, double *upload_us, double *compute_us,
                          double *download_us)
{
  RlxBackendCounters c;

  g_return_val_if_fail (self != NULL, FALSE);
  if (!counters (self, &c))
    return FALSE;
  if (upload_us)
    *upload_us = c.upload_us;
  if (compute_us)
    *compute_us = c.compute_us;
  if (download_us)
    *download_us = c.download_us;
  return c.compute_us > 0;
}

gboolean
rlx_backend_is_hardware_gpu (const RlxBackend *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->hardware_gpu;
}

/* ------------------------------------------------------- resident parameters */

gboolean
rlx_backend_load_params (RlxBackend *self, const float *params, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (params != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  rlx_backend_round_cancel (self);
  if (!self->replica->load (self, params, error))
    return FALSE;
  self->loaded = TRUE;
  return TRUE;
}

gboolean
rlx_backend_read_params (RlxBackend *self, float *params, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (params != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return require_replica (self, "reading the parameters", error) &&
         self->replica->read (self, params, error);
}

gboolean
rlx_backend_params_hash (RlxBackend *self, guint64 *hash, GError **error)
{
  g_return_val_if_fail (self != NULL && hash != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return require_replica (self, "hashing the parameters", error) &&
         self->replica->hash (self, hash, error);
}

gboolean
rlx_backend_apply_update (RlxBackend *self, const void *codes, gsize n,
                          RlxPrecision precision, double scale, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (codes != NULL || n == 0, FALSE);
  g_return_val_if_fail ((guint) precision < RLX_PRECISION_COUNT, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_codes_args (self, "an update", n, precision, scale, error) ||
      !require_replica (self, "applying an update", error))
    return FALSE;
  return self->replica->apply_update (self, codes, precision, scale, error);
}

void *
rlx_backend_update_begin (RlxBackend *self, RlxPrecision precision, GError **error)
{
  void *dst;

  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail ((guint) precision < RLX_PRECISION_COUNT, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!require_replica (self, "applying an update", error))
    return NULL;
  dst = self->replica->update_begin (self, precision, error);
  self->update_open = dst != NULL;
  return dst;
}

gboolean
rlx_backend_update_commit (RlxBackend *self, RlxPrecision precision, double scale,
                           GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail ((guint) precision < RLX_PRECISION_COUNT, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  g_return_val_if_fail (self->update_open, FALSE);   /* rlx_backend_update_begin first */

  self->update_open = FALSE;
  if (!check_codes_args (self, "an update", self->model->n_params, precision, scale, error))
    return FALSE;
  return self->replica->update_commit (self, precision, scale, error);
}

/* grads_wire into @out, or (NULL) where the codes are: returned */
static const void *
grads_wire_to (RlxBackend *self, const guint32 *indices, guint n, RlxPrecision precision,
               gboolean feedback, float *loss, void *out, double *scale_out, GError **error)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (indices != NULL && loss != NULL && scale_out != NULL, NULL);
  g_return_val_if_fail ((guint) precision < RLX_PRECISION_COUNT, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_batch (self, indices, n, error) ||
      !require_replica (self, "computing a gradient", error))
    return NULL;
  return self->replica->grads_wire (self, indices, n, precision, feedback, loss, out, scale_out,
                                    error);
}

gboolean
rlx_backend_grads_wire (RlxBackend *self, const guint32 *indices, guint n,
                        RlxPrecision precision, gboolean feedback, float *loss,
                        void *out, double *scale_out, GError **error)
{
  g_return_val_if_fail (out != NULL, FALSE);
  return grads_wire_to (self, indices, n, precision, feedback, loss, out, scale_out, error) != NULL;
}

const void *
rlx_backend_grads_wire_map (RlxBackend *self, const guint32 *indices, guint n,
                            RlxPrecision precision, gboolean feedback, float *loss,
                            double *scale_out, GError **error)
{
  return grads_wire_to (self, indices, n, precision, feedback, loss, NULL, scale_out, error);
}

void
rlx_backend_accept_feedback (RlxBackend *self)
{
  g_return_if_fail (self != NULL);
  self->replica->accept_feedback (self);
}

void
rlx_backend_reset_feedback (RlxBackend *self)
{
  g_return_if_fail (self != NULL);
  self->replica->reset_feedback (self);
}

gboolean
rlx_backend_params_on_device (const RlxBackend *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->replica->on_device;
}

/* ------------------------------------------------------------ the round */

void
rlx_backend_round_expect_alone (RlxBackend *self, gboolean alone)
{
  g_return_if_fail (self != NULL);
  if (self->replica->round_expect_alone != NULL)
    self->replica->round_expect_alone (self, alone);
}

void
rlx_backend_round_after (RlxBackend *self, const guint32 *after, guint n)
{
  g_return_if_fail (self != NULL);
  if (self->replica->round_after == NULL)
    return;
  /* (a hint: samples that would not pass as a batch are not used) */
  if (after != NULL && !check_batch (self, after, n, NULL))
    after = NULL;
  self->replica->round_after (self, after, after != NULL ? n : 0);
}

gboolean
rlx_backend_round_own (RlxBackend *self, const guint32 *indices, guint n, float *loss,
                       GError **error)
{
  g_return_val_if_fail (self != NULL && indices != NULL && loss != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_batch (self, indices, n, error) ||
      !require_replica (self, "computing the own gradient", error))
    return FALSE;
  if (self->round_own_in)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED,
                   "this round already holds the own gradient; finish or cancel it first");
      return FALSE;
    }
  if (!self->replica->round_own (self, indices, n, loss, error))
    return FALSE;
  self->round_own_in = TRUE;
  return TRUE;
}

gboolean
rlx_backend_round_add (RlxBackend *self, const void *codes, gsize n, RlxPrecision precision,
                       double scale, guint weight, GError **error)
{
  g_return_val_if_fail (self != NULL && (codes != NULL || n == 0), FALSE);
  g_return_val_if_fail ((guint) precision < RLX_PRECISION_COUNT, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_codes_args (self, "a bucket", n, precision, scale, error) ||
      !require_replica (self, "adding a bucket to the round", error))
    return FALSE;
  if (weight == 0)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED,
                   "a bucket over 0 samples cannot join the round; its weight is its sample "
                   "count");
      return FALSE;
    }
  return self->replica->round_add (self, codes, precision, scale, weight, error);
}

void
rlx_backend_round_cancel (RlxBackend *self)
{
  g_return_if_fail (self != NULL);

  self->replica->round_cancel (self);
  self->round_own_in = FALSE;
}

guint
rlx_backend_round_size (RlxBackend *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->replica->round_size (self);
}

/* round_finish with the codes where the caller wants them: at *@codes_out
 * (the backend's memory) or copied into @codes_into; neither: not made. */
static gboolean
round_finish (RlxBackend *self, double lr, RlxPrecision precision, gboolean feedback,
              const guint32 *next_indices, guint next_n, const void **codes_out,
              void *codes_into, double *scale_out, guint64 *hash_out, GError **error)
{
  g_return_val_if_fail (self != NULL && scale_out != NULL && hash_out != NULL, FALSE);
  g_return_val_if_fail ((guint) precision < RLX_PRECISION_COUNT, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!require_replica (self, "finishing a round", error))
    return FALSE;
  if (!isfinite (lr))
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED,
                   "a round cannot be finished with learning rate %g; give a finite one", lr);
      return FALSE;
    }
  if (next_indices != NULL && !check_batch (self, next_indices, next_n, error))
    return FALSE;
  if (rlx_backend_round_size (self) == 0)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED,
                   "the round holds no gradient to finish: neither the own one nor a member's "
                   "bucket joined it (rlx_backend_round_own, rlx_backend_round_add)");
      return FALSE;
    }
  /* the round is over, whatever the finish gives */
  self->round_own_in = FALSE;
  /* never at f32, where the residual is left for when the precision drops */
  feedback = feedback && precision != RLX_PRECISION_F32;
  return self->replica->round_finish (self, lr, precision, feedback, next_indices, next_n,
                                      codes_out, codes_into, scale_out, hash_out, error);
}

gboolean
rlx_backend_round_finish (RlxBackend *self, double lr, RlxPrecision precision,
                          gboolean feedback, const guint32 *next_indices, guint next_n,
                          const void **codes_out, double *scale_out, guint64 *hash_out,
                          GError **error)
{
  return round_finish (self, lr, precision, feedback, next_indices, next_n, codes_out, NULL,
                       scale_out, hash_out, error);
}

gboolean
rlx_backend_round_finish_into (RlxBackend *self, double lr, RlxPrecision precision,
                               gboolean feedback, const guint32 *next_indices, guint next_n,
                               void *codes, double *scale_out, guint64 *hash_out, GError **error)
{
  g_return_val_if_fail (codes != NULL, FALSE);
  return round_finish (self, lr, precision, feedback, next_indices, next_n, NULL, codes,
                       scale_out, hash_out, error);
}

/* ------------------------------------------------------------ test hooks */

guint64
rlx_backend_host_bytes (RlxBackend *self)
{
  RlxBackendCounters c;

  g_return_val_if_fail (self != NULL, 0);
  counters (self, &c);
  return self->host_bytes + c.host_bytes;
}

guint64
rlx_backend_ahead_taken (RlxBackend *self)
{
  RlxBackendCounters c;

  g_return_val_if_fail (self != NULL, 0);
  counters (self, &c);
  return c.ahead_taken;
}

guint64
rlx_backend_updates_ahead (RlxBackend *self)
{
  RlxBackendCounters c;

  g_return_val_if_fail (self != NULL, 0);
  counters (self, &c);
  return c.updates_ahead;
}

gboolean
rlx_backend_device_round_us (RlxBackend *self, double *finish_us, double *grad_us)
{
  RlxBackendCounters c;
  gboolean has;

  g_return_val_if_fail (self != NULL && finish_us != NULL && grad_us != NULL, FALSE);
  has = counters (self, &c);
  *finish_us = c.round_us;
  *grad_us = c.compute_us;
  return has;
}

guint64
rlx_backend_checked_steps (RlxBackend *self)
{
  RlxBackendCounters c;

  g_return_val_if_fail (self != NULL, 0);
  counters (self, &c);
  return c.checked;
}

void
rlx_backend_poison_gradient (RlxBackend *self, gsize index, float value)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (index < self->model->n_params);

  self->poisoned = TRUE;
  self->poison_index = index;
  self->poison_value = value;
}
