/* rlx-backend-vk.c — the Vulkan implementation: gradients on a device, and
 * the replica, residuals and round in its memory
 *
 * The compute drives one RlxVkTrainer (gpu/rlx-vk.h); with RLX_BACKEND_CHECK
 * every gradient is compared with the CPU reference (rlx-backend-check.h).
 * The replica stays on the device when the device reproduces core/wire's
 * arithmetic bit for bit — checked here when the backend is made, with a few
 * thousand awkward values at every precision (vk_resident_check) — and
 * RLX_VK_RESIDENT=0 does not say otherwise; else the backend takes the host
 * replica (rlx-backend-host.c), each step uploads it, and the note says why.
 * What crosses to the device is copied once, checked on the way
 * (rlx_wire_codes_copy_check); what the device checked itself comes back
 * with its summary (RlxVkWireSummary).
 *
 * Threads: the backend's (rlx-backend-impl.h).
 */
#include "rlx-config.h"
#include "rlx-backend-impl.h"
#include "rlx-backend-check.h"
#include "rlx-backend-private.h"

#include <math.h>
#include <string.h>
#include "core/util/rlx-fp-mode.h"

typedef struct {
  RlxVkTrainer    *vk;
  RlxBackendCheck *check;   /* RLX_BACKEND_CHECK: compare each step with the CPU, or NULL */
} Vk;

static int
map_vk_code (const GError *e)
{
  if (e->domain != RLX_VK_ERROR)
    return RLX_BACKEND_ERROR_FAILED;
  switch (e->code)
    {
    case RLX_VK_ERROR_DEVICE_LOST: return RLX_BACKEND_ERROR_DEVICE_LOST;
    case RLX_VK_ERROR_OUT_OF_MEMORY: return RLX_BACKEND_ERROR_OUT_OF_MEMORY;
    case RLX_VK_ERROR_NO_DRIVER:
    case RLX_VK_ERROR_UNSUPPORTED: return RLX_BACKEND_ERROR_UNAVAILABLE;
    default: return RLX_BACKEND_ERROR_FAILED;
    }
}

/* @local (taken) as the backend's error */
static gboolean
vk_failed (RlxBackend *self, GError *local, GError **error)
{
  int code = local->domain == RLX_VK_ERROR && local->code == RLX_VK_ERROR_NOT_FINITE
             ? RLX_BACKEND_ERROR_NOT_FINITE : map_vk_code (local);

  g_set_error (error, RLX_BACKEND_ERROR, code, "vulkan (%s): %s", self->device, local->message);
  g_error_free (local);
  return FALSE;
}

static RlxVkTrainer *
trainer (RlxBackend *self)
{
  return ((Vk *) self->compute_ctx)->vk;
}

/* ------------------------------------------------------------ the compute */

static gboolean
vk_grads (RlxBackend *self, const float *params, const guint32 *indices, guint n, float *loss,
          float *grads, GError **error)
{
  Vk *v = self->compute_ctx;
  GError *local = NULL;

  if (!rlx_vk_trainer_grads (v->vk, params, indices, n, loss, grads, &local))
    {
      g_set_error (error, RLX_BACKEND_ERROR, map_vk_code (local), "vulkan (%s): %s",
                   self->device, local->message);
      g_error_free (local);
      return FALSE;
    }
  if (grads != NULL && v->check != NULL)
    rlx_backend_check_step (v->check, params, indices, n, *loss, grads);
  return TRUE;
}

static gboolean
vk_counters (const RlxBackend *self, RlxBackendCounters *c)
{
  Vk *v = self->compute_ctx;
  RlxVkTimings t;

  rlx_vk_trainer_timings (v->vk, &t);
  *c = (RlxBackendCounters) {
    .upload_us = t.upload_us, .compute_us = t.compute_us, .download_us = t.download_us,
    .round_us = t.round_us, .host_bytes = t.host_bytes, .ahead_taken = t.ahead_taken,
    .updates_ahead = t.presub_taken,
    .checked = v->check != NULL ? rlx_backend_check_count (v->check) : 0,
  };
  return TRUE;
}

static void
vk_free (RlxBackend *self)
{
  Vk *v = self->compute_ctx;

  g_clear_pointer (&v->check, rlx_backend_check_free);
  rlx_vk_trainer_free (v->vk);
  g_free (v);
}

static const RlxBackendComputeI vk_compute_i = {
  .name = "vulkan",
  .free = vk_free,
  .grads = vk_grads,
  .counters = vk_counters,
};

RlxVkTrainer *
rlx_backend_vk_trainer (RlxBackend *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->compute == &vk_compute_i ? trainer (self) : NULL;
}

/* ------------------------------------------------ the replica on the device */

/* The @n codes at @p of @src copied to @dst and checked on the way
 * (core/wire): the first that decodes to NaN or ±Inf, or -1. */
static gssize
copy_check (RlxBackend *self, void *dst, const void *src, gsize n, RlxPrecision p)
{
  self->host_bytes += n * rlx_precision_element_size (p);
  return rlx_wire_codes_copy_check (dst, src, n, p);
}

/* The same for codes already checked (on the device that wrote them). */
static void
copy_codes (RlxBackend *self, void *dst, const void *src, gsize n, RlxPrecision p)
{
  self->host_bytes += n * rlx_precision_element_size (p);
  rlx_wire_codes_copy (dst, src, n, p);
}

/* the inverse of @scale as rlx_wire_dequantize computes it */
static double
inverse_scale (RlxPrecision precision, double scale)
{
  return precision == RLX_PRECISION_F32 ? 1.0 : 1.0 / scale;
}

/* The wire's scale for a largest magnitude given as f32 bits (as
 * rlx_wire_scale_for computes it). */
static double
scale_for_max_bits (guint32 bits, RlxPrecision precision)
{
  float maxabs;

  memcpy (&maxabs, &bits, 4);
  if (precision == RLX_PRECISION_F32 || !(maxabs > 0))
    return 1.0;
  return rlx_precision_target (precision) / (double) maxabs;
}

/* The device computed the scale and its inverse itself; they must be the
 * wire's (rlx_backend_vk_new checked this device, so this never fires
 * unless its arithmetic changes under us). */
static gboolean
vk_scale_ok (RlxBackend *self, const RlxVkWireSummary *sum, RlxPrecision precision,
             double *scale_out, GError **error)
{
  double scale = scale_for_max_bits (sum->smax_bits, precision);

  if (precision != RLX_PRECISION_F32 && (scale != sum->scale || 1.0 / scale != sum->inv))
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED,
                   "vulkan (%s) computed the wire scale as %.17g (inverse %.17g), the CPU as "
                   "%.17g (%.17g): its double arithmetic does not match the CPU's; restart "
                   "this rank with --backend cpu", self->device, sum->scale, sum->inv, scale,
                   1.0 / scale);
      return FALSE;
    }
  *scale_out = scale;
  return TRUE;
}

/* The test poison goes to the trainer's next gradient. */
static void
pass_poison (RlxBackend *self)
{
  guint32 bits;

  if (!self->poisoned)
    return;
  memcpy (&bits, &self->poison_value, 4);
  rlx_vk_trainer_poison_gradient (trainer (self), (guint32) self->poison_index, bits);
  self->poisoned = FALSE;
}

static gboolean
vk_load (RlxBackend *self, const float *params, GError **error)
{
  GError *local = NULL;

  return rlx_vk_trainer_load_params (trainer (self), params, &local) ||
         vk_failed (self, local, error);
}

static gboolean
vk_read (RlxBackend *self, float *params, GError **error)
{
  GError *local = NULL;

  return rlx_vk_trainer_read_params (trainer (self), params, &local) ||
         vk_failed (self, local, error);
}

static gboolean
vk_hash (RlxBackend *self, guint64 *hash, GError **error)
{
  GError *local = NULL;

  return rlx_vk_trainer_params_hash (trainer (self), hash, &local) ||
         vk_failed (self, local, error);
}

/* one pass: copied where the GPU reads it, checked on the way */
static gboolean
vk_apply_update (RlxBackend *self, const void *codes, RlxPrecision precision, double scale,
                 GError **error)
{
  GError *local = NULL;
  void *dst = rlx_vk_trainer_update_map (trainer (self), &local);
  gssize bad;

  if (dst == NULL)
    return vk_failed (self, local, error);
  bad = copy_check (self, dst, codes, self->model->n_params, precision);
  if (bad >= 0)
    return rlx_backend_refuse_update (self, bad, error);
  rlx_vk_trainer_update_commit (trainer (self), precision, inverse_scale (precision, scale),
                                FALSE);
  return TRUE;
}

static void *
vk_update_begin (RlxBackend *self, RlxPrecision precision, GError **error)
{
  GError *local = NULL;
  void *dst = rlx_vk_trainer_update_map (trainer (self), &local);

  if (dst == NULL)
    vk_failed (self, local, error);
  return dst;
}

/* checked on the device; a refusal surfaces at the next call */
static gboolean
vk_update_commit (RlxBackend *self, RlxPrecision precision, double scale, GError **error)
{
  rlx_vk_trainer_update_commit (trainer (self), precision, inverse_scale (precision, scale),
                                TRUE);
  return TRUE;
}

static const void *
vk_grads_wire (RlxBackend *self, const guint32 *indices, guint n, RlxPrecision precision,
               gboolean feedback, float *loss, void *out, double *scale_out, GError **error)
{
  GError *local = NULL;
  RlxVkWireSummary sum;
  const void *codes = NULL;

  pass_poison (self);
  if (!rlx_vk_trainer_grads_wire (trainer (self), indices, n, precision, feedback, &codes, &sum,
                                  &local))
    {
      vk_failed (self, local, error);
      return NULL;
    }
  *loss = sum.loss;
  if (sum.smax_bits >= RLX_BACKEND_ABS_BITS_INF)
    {
      float v;

      memcpy (&v, &sum.bad_bits, 4);
      rlx_backend_set_not_finite (self, sum.first_bad, v, sum.gmax_bits >= RLX_BACKEND_ABS_BITS_INF,
                                  "it was not sent", error);
      return NULL;
    }
  if (!vk_scale_ok (self, &sum, precision, scale_out, error))
    return NULL;
  if (out == NULL)
    return codes;
  /* (checked on the device; mnist-mlp-xl's 7.45 MB at f32 is ~0.5 ms on
   * one core, on the member's path every round) */
  copy_codes (self, out, codes, self->model->n_params, precision);
  return out;
}

static void
vk_accept_feedback (RlxBackend *self)
{
  rlx_vk_trainer_accept_feedback (trainer (self));
}

static void
vk_reset_feedback (RlxBackend *self)
{
  rlx_vk_trainer_reset_feedback (trainer (self));
}

static gboolean
vk_round_own (RlxBackend *self, const guint32 *indices, guint n, float *loss, GError **error)
{
  GError *local = NULL;
  RlxVkWireSummary sum;

  pass_poison (self);
  if (!rlx_vk_trainer_round_own (trainer (self), indices, n, &sum, &local))
    return vk_failed (self, local, error);
  *loss = sum.loss;
  if (sum.smax_bits >= RLX_BACKEND_ABS_BITS_INF)
    {
      float v;
      memcpy (&v, &sum.bad_bits, 4);
      rlx_backend_set_not_finite (self, sum.first_bad, v, TRUE, "it was not added to the round",
                                  error);
      return FALSE;
    }
  return TRUE;
}

/* copied where the GPU reads it, checked on the way; the GPU sums it while
 * the caller waits for more */
static gboolean
vk_round_add (RlxBackend *self, const void *codes, RlxPrecision precision, double scale,
              guint weight, GError **error)
{
  GError *local = NULL;
  void *dst = rlx_vk_trainer_round_slot (trainer (self), &local);
  gssize bad;

  if (dst == NULL)
    return vk_failed (self, local, error);
  bad = copy_check (self, dst, codes, self->model->n_params, precision);
  if (bad >= 0)
    return rlx_backend_refuse_bucket (self, bad, error);
  return rlx_vk_trainer_round_add (trainer (self), precision, inverse_scale (precision, scale),
                                   weight, &local) || vk_failed (self, local, error);
}

static void
vk_round_cancel (RlxBackend *self)
{
  rlx_vk_trainer_round_cancel (trainer (self));
}

static guint
vk_round_size (RlxBackend *self)
{
  return rlx_vk_trainer_round_size (trainer (self));
}

static gboolean
vk_round_finish (RlxBackend *self, double lr, RlxPrecision precision, gboolean feedback,
                 const guint32 *next_indices, guint next_n, const void **codes_out,
                 void *codes_into, double *scale_out, guint64 *hash_out, GError **error)
{
  GError *local = NULL;
  RlxVkWireSummary sum;
  const void *mapped = NULL;

  if (!rlx_vk_trainer_round_finish (trainer (self), lr, precision, feedback, next_indices,
                                    next_n, codes_out || codes_into ? &mapped : NULL, &sum,
                                    hash_out, &local))
    return vk_failed (self, local, error);
  if (sum.smax_bits >= RLX_BACKEND_ABS_BITS_INF)
    {
      float v;
      memcpy (&v, &sum.bad_bits, 4);
      rlx_backend_set_round_not_finite (self, sum.first_bad, v, error);
      return FALSE;
    }
  if (!vk_scale_ok (self, &sum, precision, scale_out, error))
    return FALSE;
  if (codes_out != NULL)
    *codes_out = mapped;
  if (codes_into != NULL)
    copy_codes (self, codes_into, mapped, self->model->n_params, precision);
  return TRUE;
}

static void
vk_round_expect_alone (RlxBackend *self, gboolean alone)
{
  rlx_vk_trainer_round_expect_alone (trainer (self), alone);
}

static void
vk_round_after (RlxBackend *self, const guint32 *after, guint n)
{
  rlx_vk_trainer_round_after (trainer (self), after, n);
}

static const RlxBackendReplicaI vk_replica_i = {
  .on_device = TRUE,
  .free = NULL,   /* the trainer's, freed with the compute */
  .load = vk_load,
  .read = vk_read,
  .hash = vk_hash,
  .apply_update = vk_apply_update,
  .update_begin = vk_update_begin,
  .update_commit = vk_update_commit,
  .grads_wire = vk_grads_wire,
  .accept_feedback = vk_accept_feedback,
  .reset_feedback = vk_reset_feedback,
  .round_own = vk_round_own,
  .round_add = vk_round_add,
  .round_cancel = vk_round_cancel,
  .round_size = vk_round_size,
  .round_finish = vk_round_finish,
  .round_expect_alone = vk_round_expect_alone,
  .round_after = vk_round_after,
};

/* ------------------------------------- does the device reproduce the wire */

static void
wire_tables (RlxVkWireTables *t)
{
  const RlxPrecision f8[2] = { RLX_PRECISION_F8E4M3, RLX_PRECISION_F8E5M2 };

  for (guint k = 0; k < 2; k++)
    {
      for (guint h = 0; h < 65536; h++)
        t->bridge[k][h] = rlx_wire_f8_from_f16 ((guint16) h, f8[k]);
      for (guint c = 0; c < 256; c++)
        {
          float v = rlx_wire_f32_from_f8 ((guint8) c, f8[k]);
          memcpy (&t->f8_bits[k][c], &v, 4);
        }
    }
  for (guint p = 0; p < RLX_PRECISION_COUNT; p++)
    t->target[p] = (guint32) rlx_precision_target (p);
}

/* Values that find the corners of the wire's arithmetic: every magnitude
 * from f32 subnormals up, both zeros, values near f16 and f8 rounding
 * boundaries after scaling. */
static void
check_values (float *v, gsize n, guint32 seed)
{
  guint32 x = 0x9e3779b9u ^ (seed * 0x85ebca6bu);

  for (gsize i = 0; i < n; i++)
    {
      guint32 bits;

      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      switch (x % 8)
        {
        case 0:   /* any finite f32 below 2^8, subnormals included */
          bits = x & 0x437fffffu;
          break;
        case 1:
          bits = (x & 0x807fffffu);   /* subnormal */
          break;
        case 2:
          bits = (i & 1) ? 0x80000000u : 0u;
          break;
        default:   /* ordinary gradient values, some tiny */
          {
            float f = ((float) (x >> 8) / 16777216.0f - 0.5f) * ((x & 0x10) ? 1e-3f : 1.0f);
            memcpy (&bits, &f, 4);
          }
          break;
        }
      memcpy (&v[i], &bits, 4);
    }
}

/* Runs the device's wire arithmetic on @n values at every precision and
 * compares it with core/wire: NULL when every bit agrees, else why not. */
static char *
vk_resident_check (RlxVkTrainer *vk, gsize n)
{
  g_autofree float *g = g_new (float, n);
  g_autofree float *p_dev = g_new (float, n);
  g_autofree float *p_ref = g_new (float, n);
  g_autofree float *d = g_new (float, n);
  g_autofree guint8 *codes = g_malloc (n * 4);
  g_autofree guint8 *ucodes = g_malloc (n * 4);
  g_autoptr(GError) error = NULL;

  for (guint p = 0; p < RLX_PRECISION_COUNT; p++)
    {
      g_autoptr(RlxWireFeedback) fb = rlx_wire_feedback_new (n);
      gsize es = rlx_precision_element_size (p);
      double scale;

      /* gradients, with the residual carried: three rounds */
      rlx_vk_trainer_reset_feedback (vk);
      for (guint round = 0; round < 3; round++)
        {
          g_autoptr(GBytes) frame = NULL;
          RlxVkWireSummary sum;
          RlxWireInfo info;

          check_values (g, n, 10 * p + round);
          if (!rlx_vk_trainer_wire_test (vk, g, n, p, TRUE, codes, &sum, &error))
            return g_strdup (error->message);
          rlx_vk_trainer_accept_feedback (vk);
          frame = rlx_wire_feedback_encode (fb, NULL, g, n, p, "g", NULL, &error);
          if (frame == NULL || !rlx_wire_decode_full (frame, NULL, &info, NULL, NULL, &error))
            return g_strdup (error->message);
          if (sum.scale != info.scale)
            return g_strdup_printf ("its %s scale is %.17g, the CPU's %.17g",
                                    rlx_precision_to_string (p), sum.scale, info.scale);
          for (gsize i = 0; i < n; i++)
            if (memcmp ((const guint8 *) g_bytes_get_data (frame, NULL) + 4 + info.header_len +
                        i * es, codes + i * es, es) != 0)
              return g_strdup_printf ("its %s gradient codes differ from the CPU's (element %"
                                      G_GSIZE_FORMAT " of %" G_GSIZE_FORMAT ", round %u)",
                                      rlx_precision_to_string (p), i, n, round + 1);
        }
      /* an update applied to parameters */
      check_values (p_ref, n, 100 + p);
      check_values (g, n, 200 + p);
      scale = rlx_wire_scale_for (g, n, p);
      rlx_wire_quantize (g, n, p, scale, ucodes);
      memcpy (p_dev, p_ref, n * 4);
      if (!rlx_vk_trainer_apply_test (vk, p_dev, n, ucodes, p,
                                      p == RLX_PRECISION_F32 ? 1.0 : 1.0 / scale, &error))
        return g_strdup (error->message);
      rlx_wire_dequantize (ucodes, n, p, scale, d);
      for (gsize i = 0; i < n; i++)
        {
          p_ref[i] -= d[i];
          if (memcmp (&p_ref[i], &p_dev[i], 4) != 0)
            return g_strdup_printf ("an update at %s gives %.9g where the CPU gives %.9g "
                                    "(element %" G_GSIZE_FORMAT ")", rlx_precision_to_string (p),
                                    p_dev[i], p_ref[i], i);
        }
      /* the replica's hash, over a prefix of another length each time */
      {
        gsize m = n - 7 * p;
        guint64 h;

        if (!rlx_vk_trainer_hash_test (vk, p_ref, m, &h, &error))
          return g_strdup (error->message);
        if (h != rlx_params_hash (p_ref, m))
          return g_strdup_printf ("its parameter hash of %" G_GSIZE_FORMAT " values is %016"
                                  G_GINT64_MODIFIER "x, the CPU's %016" G_GINT64_MODIFIER "x", m,
                                  h, rlx_params_hash (p_ref, m));
      }
    }
  rlx_vk_trainer_reset_feedback (vk);
  return NULL;
}

/* NULL when the parameters can stay on the device (it reproduces the
 * wire's bits), else why they stay on the host. */
static char *
vk_resident_refusal (RlxBackend *self, RlxVkTrainer *vk)
{
  g_autofree RlxVkWireTables *tables = NULL;
  g_autoptr(GError) local = NULL;
  g_autofree char *why = NULL;
  char *note;

  if (g_strcmp0 (g_getenv ("RLX_VK_RESIDENT"), "0") == 0)
    return g_strdup ("vulkan: parameters kept on the host (RLX_VK_RESIDENT=0)");
  tables = g_new0 (RlxVkWireTables, 1);
  wire_tables (tables);
  if (!rlx_vk_trainer_resident_init (vk, tables, &local))
    why = g_strdup (local->message);
  else
    {
      /* against the CPU's replicated arithmetic, which is exact (rlx-fp-mode.h) */
      RlxFpScope fp = rlx_fp_scope_begin_exact ();

      why = vk_resident_check (vk, MIN (self->model->n_params, 4099));
      rlx_fp_scope_end (fp);
    }
  if (why == NULL)
    return NULL;
  note = g_strdup_printf ("vulkan: parameters kept on the host, uploaded each step, because %s "
                          "cannot apply updates bit-identically to the CPU: %s", self->device,
                          why);
  g_debug ("rlx-backend: %s", note);
  return note;
}

RlxBackend *
rlx_backend_vk_new (const RlxVkDeviceInfo *info, const RlxModel *model, RlxDataset *dataset,
                    guint max_batch, RlxVkCompute compute, GError **error)
{
  g_autoptr(GError) local = NULL;
  RlxVkTrainer *vk = rlx_vk_trainer_new (info->index, model, dataset, max_batch, compute, &local);
  RlxBackend *self;
  Vk *v;

  if (vk == NULL)
    {
      g_set_error_literal (error, RLX_BACKEND_ERROR, map_vk_code (local), local->message);
      return NULL;
    }
  self = rlx_backend_alloc (model, dataset, max_batch);
  v = g_new0 (Vk, 1);
  v->vk = vk;
  self->compute = &vk_compute_i;
  self->compute_ctx = v;
  g_free (self->device);
  self->compute_mode = compute;
  self->device = compute == RLX_VK_COMPUTE_F32
                 ? g_strdup (info->name)
                 : g_strdup_printf ("%s (%s tensor cores)", info->name, rlx_vk_compute_name (compute));
  self->hardware_gpu = !rlx_vk_device_is_software (rlx_vk_trainer_device (vk));
  if (rlx_backend_check_enabled ())
    {
      v->check = rlx_backend_check_new (model, dataset, max_batch, self->device);
      rlx_backend_check_set_compute (v->check, compute);
    }
  /* the replica: on the device when it reproduces the wire's bits */
  self->note = vk_resident_refusal (self, vk);
  if (self->note == NULL)
    {
      self->replica = &vk_replica_i;
      self->replica_ctx = v;
    }
  else
    rlx_backend_host_replica_init (self);
  return self;
}
