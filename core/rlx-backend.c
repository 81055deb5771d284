/* rlx-backend.c — backend resolution and the uniform gradient entry point
 *
 * Resolution (rules in rlx-backend.h) is the policy of rlx-backend-policy.c
 * (candidates, claims, the walk and its reasons, all without a device) over
 * the devices rlx_vk_enumerate finds; open_candidate makes the backend the
 * walk asks for.
 */
#include "rlx-config.h"
#include "rlx-backend.h"
#include "rlx-backend-private.h"
#include "rlx-backend-policy.h"
#include "core/rlx-kernels.h"
#include "core/vision/rlx-cpu.h"
#include "gpu/rlx-vk.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

G_DEFINE_QUARK (rlx-backend-error-quark, rlx_backend_error)

typedef enum {
  BACKEND_CPU,
  BACKEND_VULKAN,
} BackendKind;

struct _RlxBackend {
  BackendKind     kind;
  const RlxModel *model;
  RlxDataset     *dataset;
  guint           max_batch;
  char           *device;
  char           *fallback;
  /* cpu */
  RlxCpuTrainer  *cpu;
  float          *x;       /* [max_batch][784] gather buffer */
  guint8         *labels;
  /* vulkan */
  RlxVkTrainer   *vk;
  gboolean        check;   /* RLX_BACKEND_CHECK: compare each step with the CPU */
  /* resident parameters: on the device (vulkan, when it reproduces the
   * wire's bits), else host arrays of n_params floats made on first use */
  int             gpu_lock;  /* flock'ed: this rank's claim on its GPU, or -1 */
  gboolean        resident_vk;
  char           *resident_note;  /* why not, for the fallback text */
  gboolean        loaded;    /* rlx_backend_load_params was called */
  float          *replica;
  guint64         hash;      /* of the host replica, when hash_valid */
  gboolean        hash_valid;
  float          *residual;  /* the gradient stream's quantisation residual (accepted) */
  float          *residual_next;  /* the last gradient's new residual, until accepted */
  gboolean        residual_pending;
  gboolean        residual_live;       /* the carried residual holds values (else all zero) */
  gboolean        residual_next_live;  /* so does the one waiting */
  float          *sum;       /* this step's gradient */
  guint8         *codes_buf; /* n_params × 4 bytes: update_begin's room, the host path's codes */
  gboolean        update_open;  /* between update_begin and update_commit */
  /* the leader's round on the host (the vulkan one is the trainer's) */
  const float    *round_first;   /* the first contribution alone, unweighted, as floats */
  float           round_first_w;
  guint32         round_first_max; /* its largest |x| as bits, or RLX_KERNELS_MAX_UNKNOWN */
  float          *round_buf[2];  /* the sums (each add writes the one it does not read) */
  const float    *round_s;       /* the weighted sum from the second contribution on */
  guint           round_k;   /* contributions */
  guint64         round_total;
  gboolean        round_own_in;
  float          *ures;      /* the update stream's residual */
  gboolean        ures_live; /* it holds values (else all zero) */
  guint64         host_bytes;   /* parameter-sized bytes copied on the host, since made */
  gboolean        poisoned;  /* rlx_backend_poison_gradient: one shot */
  gsize           poison_index;
  float           poison_value;
};

static RlxBackend *
backend_new_cpu (const RlxModel *model, RlxDataset *dataset, guint max_batch)
{
  RlxBackend *self = g_new0 (RlxBackend, 1);

  self->kind = BACKEND_CPU;
  self->gpu_lock = -1;
  self->model = model;
  self->dataset = rlx_dataset_ref (dataset);
  self->max_batch = max_batch;
  self->cpu = rlx_cpu_trainer_new (model, max_batch);
  self->x = g_new (float, (gsize) max_batch * RLX_INPUT_LEN);
  self->labels = g_new (guint8, max_batch);
  /* the threads it will use (rlx_cpu_set_threads, e.g. --threads 1), not the cores */
  self->device = g_strdup_printf ("CPU, OpenBLAS, %u %s", rlx_cpu_threads (),
                                  rlx_cpu_threads () == 1 ? "thread" : "threads");
  self->fallback = g_strdup ("");
  return self;
}

/* ------------------------------------------------- resident on the device */

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
vk_resident_check (RlxBackend *self, gsize n)
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
      rlx_vk_trainer_reset_feedback (self->vk);
      for (guint round = 0; round < 3; round++)
        {
          g_autoptr(GBytes) frame = NULL;
          RlxVkWireSummary sum;
          RlxWireInfo info;

          check_values (g, n, 10 * p + round);
          if (!rlx_vk_trainer_wire_test (self->vk, g, n, p, TRUE, codes, &sum, &error))
            return g_strdup (error->message);
          rlx_vk_trainer_accept_feedback (self->vk);
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
      if (!rlx_vk_trainer_apply_test (self->vk, p_dev, n, ucodes, p,
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

        if (!rlx_vk_trainer_hash_test (self->vk, p_ref, m, &h, &error))
          return g_strdup (error->message);
        if (h != rlx_params_hash (p_ref, m))
          return g_strdup_printf ("its parameter hash of %" G_GSIZE_FORMAT " values is %016"
                                  G_GINT64_MODIFIER "x, the CPU's %016" G_GINT64_MODIFIER "x", m,
                                  h, rlx_params_hash (p_ref, m));
      }
    }
  rlx_vk_trainer_reset_feedback (self->vk);
  return NULL;
}

/* Keeps the parameters on the device when it reproduces the wire's bits;
 * else leaves them on the host (each step uploads them) and says why. */
static void
vk_resident_start (RlxBackend *self)
{
  g_autofree RlxVkWireTables *tables = NULL;
  g_autoptr(GError) local = NULL;
  g_autofree char *why = NULL;

  if (g_strcmp0 (g_getenv ("RLX_VK_RESIDENT"), "0") == 0)
    {
      self->resident_note = g_strdup ("vulkan: parameters kept on the host (RLX_VK_RESIDENT=0)");
      return;
    }
  tables = g_new0 (RlxVkWireTables, 1);
  wire_tables (tables);
  if (!rlx_vk_trainer_resident_init (self->vk, tables, &local))
    why = g_strdup (local->message);
  else
    why = vk_resident_check (self, MIN (self->model->n_params, 4099));
  if (why == NULL)
    {
      self->resident_vk = TRUE;
      return;
    }
  self->resident_note = g_strdup_printf ("vulkan: parameters kept on the host, uploaded each "
                                         "step, because %s cannot apply updates bit-identically "
                                         "to the CPU: %s", self->device, why);
  g_debug ("rlx-backend: %s", self->resident_note);
}

/* ------------------------------------------------------------ resolution */

static RlxBackend *
backend_new_vulkan (const RlxVkDeviceInfo *info, const RlxModel *model, RlxDataset *dataset,
                    guint max_batch, GError **error)
{
  RlxVkTrainer *vk = rlx_vk_trainer_new (info->index, model, dataset, max_batch, error);
  RlxBackend *self;

  if (vk == NULL)
    return NULL;
  self = g_new0 (RlxBackend, 1);
  self->kind = BACKEND_VULKAN;
  self->gpu_lock = -1;
  self->model = model;
  self->dataset = rlx_dataset_ref (dataset);
  self->max_batch = max_batch;
  self->vk = vk;
  self->check = g_getenv ("RLX_BACKEND_CHECK") != NULL && g_strcmp0 (g_getenv ("RLX_BACKEND_CHECK"), "0") != 0;
  self->device = g_strdup (info->name);
  self->fallback = g_strdup ("");
  vk_resident_start (self);
  return self;
}

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

typedef struct {
  GPtrArray      *devices;
  const RlxModel *model;
  RlxDataset     *dataset;
  guint           max_batch;
} Opening;

/* RlxBackendOpenFunc: candidate @c made into a backend */
static gpointer
open_candidate (guint c, gpointer user_data, char **note, GError **error)
{
  Opening *o = user_data;
  g_autoptr(GError) local = NULL;
  RlxBackend *self;

  if (c == RLX_BACKEND_CPU_CANDIDATE)
    return backend_new_cpu (o->model, o->dataset, o->max_batch);
  self = backend_new_vulkan (g_ptr_array_index (o->devices, c), o->model, o->dataset,
                             o->max_batch, &local);
  if (self == NULL)
    {
      g_set_error_literal (error, RLX_BACKEND_ERROR, map_vk_code (local), local->message);
      return NULL;
    }
  *note = g_strdup (self->resident_note);
  return self;
}

RlxBackend *
rlx_backend_resolve (const char *request, const RlxModel *model,
                     RlxDataset *dataset, guint max_batch, GError **error)
{
  g_autoptr(GPtrArray) devices = NULL;
  g_autoptr(GError) vk_error = NULL;
  g_autofree char *lock_dir = NULL;
  Opening o = { NULL, model, dataset, max_batch };
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
  if (!rlx_backend_choose (request, model, max_batch, devices, vk_error ? vk_error->message : NULL,
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
  g_clear_pointer (&self->cpu, rlx_cpu_trainer_free);
  g_clear_pointer (&self->vk, rlx_vk_trainer_free);
  g_free (self->x);
  g_free (self->labels);
  g_free (self->replica);
  g_free (self->residual);
  g_free (self->residual_next);
  g_free (self->sum);
  g_free (self->codes_buf);
  g_free (self->round_buf[0]);
  g_free (self->round_buf[1]);
  g_free (self->ures);
  g_free (self->resident_note);
  if (self->gpu_lock >= 0)
    close (self->gpu_lock);
  g_clear_pointer (&self->dataset, rlx_dataset_unref);
  g_free (self->device);
  g_free (self->fallback);
  g_free (self);
}

const char *rlx_backend_name (const RlxBackend *self) { return self->kind == BACKEND_CPU ? "cpu" : "vulkan"; }
const char *rlx_backend_device (const RlxBackend *self) { return self->device; }
const char *rlx_backend_fallback (const RlxBackend *self) { return self->fallback; }
guint rlx_backend_max_batch (const RlxBackend *self) { return self->max_batch; }
const RlxModel *rlx_backend_model (const RlxBackend *self) { return self->model; }
RlxDataset *rlx_backend_dataset (const RlxBackend *self) { return self->dataset; }

/* RLX_BACKEND_CHECK=1: every Vulkan step is recomputed by the CPU reference
 * and each tensor compared (max |Δ| ≤ 1e-4·max |g| + 1e-6, loss within
 * 1e-5); a mismatch is logged with the tensor's name. Slow: for debugging a
 * device or a driver. */
static void
check_against_cpu (RlxBackend *self, const float *params, const guint32 *indices, guint n,
                   float loss, const float *grads)
{
  const RlxModel *m = self->model;
  g_autofree float *ref = g_new (float, m->n_params);
  float ref_loss;

  if (self->cpu == NULL)
    {
      self->cpu = rlx_cpu_trainer_new (m, self->max_batch);
      self->x = g_new (float, (gsize) self->max_batch * RLX_INPUT_LEN);
      self->labels = g_new (guint8, self->max_batch);
    }
  rlx_dataset_gather (self->dataset, RLX_SPLIT_TRAIN, indices, n, self->x, self->labels);
  ref_loss = rlx_cpu_trainer_grads (self->cpu, params, self->x, self->labels, n, ref);
  if (fabsf (loss - ref_loss) > 1e-5f * fabsf (ref_loss))
    g_warning ("check: %s batch %u on %s: loss %.9g, CPU reference %.9g",
               m->slug, n, self->device, loss, ref_loss);
  for (guint t = 0; t < m->n_tensors; t++)
    {
      const RlxTensorInfo *ti = &m->tensors[t];
      double maxg = 0, maxd = 0;

      for (gsize i = ti->offset; i < ti->offset + ti->numel; i++)
        {
          maxg = MAX (maxg, fabs (ref[i]));
          maxd = MAX (maxd, fabs ((double) grads[i] - ref[i]));
        }
      if (!(maxd <= 1e-4 * maxg + 1e-6))
        g_warning ("check: %s batch %u on %s: %s differs from the CPU reference by %.3g "
                   "(max |g| %.3g)", m->slug, n, self->device, ti->name, maxd, maxg);
    }
}

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

gboolean
rlx_backend_grads (RlxBackend *self, const float *params,
                   const guint32 *indices, guint n,
                   float *loss, float *grads, GError **error)
{

  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (params != NULL && indices != NULL && loss != NULL, FALSE);

  if (!check_batch (self, indices, n, error))
    return FALSE;

  if (self->kind == BACKEND_VULKAN)
    {
      g_autoptr(GError) local = NULL;

      if (!rlx_vk_trainer_grads (self->vk, params, indices, n, loss, grads, &local))
        {
          g_set_error (error, RLX_BACKEND_ERROR, map_vk_code (local), "vulkan (%s): %s",
                       self->device, local->message);
          return FALSE;
        }
      if (grads != NULL && self->check)
        check_against_cpu (self, params, indices, n, *loss, grads);
      return TRUE;
    }

  rlx_dataset_gather (self->dataset, RLX_SPLIT_TRAIN, indices, n, self->x, self->labels);
  *loss = rlx_cpu_trainer_grads (self->cpu, params, self->x, self->labels, n, grads);
  return TRUE;
}

gboolean
rlx_backend_step_timings (const RlxBackend *self, double *upload_us, double *compute_us,
                          double *download_us)
{
  RlxVkTimings t;

  g_return_val_if_fail (self != NULL, FALSE);
  if (self->kind != BACKEND_VULKAN)
    return FALSE;
  rlx_vk_trainer_timings (self->vk, &t);
  if (upload_us)
    *upload_us = t.upload_us;
  if (compute_us)
    *compute_us = t.compute_us;
  if (download_us)
    *download_us = t.download_us;
  return t.compute_us > 0;
}

/* ------------------------------------------------------- resident parameters
 *
 * The host path: the replica, the residual and the step's gradient are host
 * arrays made once; updates are dequantised and gradients quantised by
 * core/wire's kernels a block at a time (the block stays in L1), so a call
 * allocates nothing parameter-sized and gives exactly the bits that
 * rlx_wire_dequantize / RlxWireFeedback give. The vulkan path hands the work
 * to the trainer (gpu/rlx-vk.h); what crosses to the device is copied once,
 * checked on the way.
 */

#define RESIDENT_BLOCK 4096

/* f32 bits with the sign cleared: ordered like |x| for finite x, and every
 * NaN or ±Inf is at or above this. */
#define ABS_BITS_INF 0x7f800000u


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

static gboolean
vk_failed (RlxBackend *self, GError *local, GError **error)
{
  int code = local->domain == RLX_VK_ERROR && local->code == RLX_VK_ERROR_NOT_FINITE
             ? RLX_BACKEND_ERROR_NOT_FINITE : map_vk_code (local);

  g_set_error (error, RLX_BACKEND_ERROR, code, "vulkan (%s): %s", self->device, local->message);
  g_error_free (local);
  return FALSE;
}

static const char *
tensor_of (const RlxModel *model, gsize i)
{
  for (guint t = 0; t < model->n_tensors; t++)
    if (i >= model->tensors[t].offset && i < model->tensors[t].offset + model->tensors[t].numel)
      return model->tensors[t].name;
  return "?";
}

/* The host passes over a gradient and an update, with GCC's vector
 * extensions so that they are SIMD at any optimisation level (the default build is -O2, where GCC 12
 * leaves these loops scalar: 1 ms each for mnist-mlp-xl). */
typedef guint32 V8u __attribute__ ((vector_size (32)));
typedef float   V8f __attribute__ ((vector_size (32)));

/* The largest |x| as f32 bits without the sign (ordered like |x| for finite
 * x; ≥ ABS_BITS_INF for NaN or ±Inf). */
static guint32
max_abs_bits (const float *x, gsize n)
{
  V8u m = { 0 };
  guint32 r = 0;
  gsize i = 0;

  for (; i + 8 <= n; i += 8)
    {
      V8u v;
      memcpy (&v, x + i, sizeof v);
      v &= 0x7fffffffu;
      m = (V8u) ((v > m) & v) | ((v <= m) & m);
    }
  for (guint k = 0; k < 8; k++)
    r = MAX (r, m[k]);
  for (; i < n; i++)
    {
      guint32 b;
      memcpy (&b, x + i, 4);
      r = MAX (r, b & 0x7fffffffu);
    }
  return r;
}

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

/* the inverse of @scale as rlx_wire_dequantize computes it */
static double
inverse_scale (RlxPrecision precision, double scale)
{
  return precision == RLX_PRECISION_F32 ? 1.0 : 1.0 / scale;
}

static gboolean
refuse_update (RlxBackend *self, gssize bad, GError **error)
{
  g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE,
               "the update holds NaN or ±Inf at element %" G_GSSIZE_FORMAT " (%s of %s); "
               "it was not applied — the sender's update is corrupt", bad,
               tensor_of (self->model, (gsize) bad), self->model->slug);
  return FALSE;
}

gboolean
rlx_backend_load_params (RlxBackend *self, const float *params, GError **error)
{
  GError *local = NULL;

  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (params != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  rlx_backend_round_cancel (self);
  if (self->resident_vk)
    {
      if (!rlx_vk_trainer_load_params (self->vk, params, &local))
        return vk_failed (self, local, error);
    }
  else
    {
      if (self->replica == NULL)
        self->replica = g_new (float, self->model->n_params);
      memcpy (self->replica, params, self->model->n_params * sizeof (float));
      self->hash_valid = FALSE;
    }
  self->loaded = TRUE;
  return TRUE;
}

gboolean
rlx_backend_read_params (RlxBackend *self, float *params, GError **error)
{
  GError *local = NULL;

  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (params != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!require_replica (self, "reading the parameters", error))
    return FALSE;
  if (self->resident_vk)
    return rlx_vk_trainer_read_params (self->vk, params, &local) || vk_failed (self, local, error);
  memcpy (params, self->replica, self->model->n_params * sizeof (float));
  return TRUE;
}

gboolean
rlx_backend_params_hash (RlxBackend *self, guint64 *hash, GError **error)
{
  GError *local = NULL;

  g_return_val_if_fail (self != NULL && hash != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!require_replica (self, "hashing the parameters", error))
    return FALSE;
  if (self->resident_vk)
    return rlx_vk_trainer_params_hash (self->vk, hash, &local) || vk_failed (self, local, error);
  /* an apply or a round's finish hashed them on the way */
  if (!self->hash_valid)
    {
      self->hash = rlx_kernels_hash (rlx_kernels_get_default (), self->replica,
                                     self->model->n_params);
      self->hash_valid = TRUE;
    }
  *hash = self->hash;
  return TRUE;
}

/* The host replica: replica -= dequantise (@codes), hashed chunk by chunk
 * on the way (params_hash then costs nothing). */
static void
host_apply (RlxBackend *self, const void *codes, RlxPrecision precision, double scale)
{
  rlx_kernels_apply (rlx_kernels_get_default (), self->replica, codes, self->model->n_params,
                     precision, scale, &self->hash);
  self->hash_valid = TRUE;
}

/* room for n_params codes of up to 4 bytes on the host (made once) */
static guint8 *
host_codes (RlxBackend *self)
{
  if (self->codes_buf == NULL)
    self->codes_buf = g_malloc (self->model->n_params * 4);
  return self->codes_buf;
}

gboolean
rlx_backend_apply_update (RlxBackend *self, const void *codes, gsize n,
                          RlxPrecision precision, double scale, GError **error)
{
  GError *local = NULL;
  gssize bad;

  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (codes != NULL || n == 0, FALSE);
  g_return_val_if_fail ((guint) precision < RLX_PRECISION_COUNT, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_codes_args (self, "an update", n, precision, scale, error) ||
      !require_replica (self, "applying an update", error))
    return FALSE;
  if (!self->resident_vk)
    {
      /* checked in place, then applied and hashed: nothing copied */
      bad = rlx_kernels_codes_check (rlx_kernels_get_default (), codes, n, precision);
      if (bad >= 0)
        return refuse_update (self, bad, error);
      host_apply (self, codes, precision, scale);
      return TRUE;
    }
  /* one pass: copied where the GPU reads it, checked on the way */
  {
    void *dst = rlx_vk_trainer_update_map (self->vk, &local);

    if (dst == NULL)
      return vk_failed (self, local, error);
    bad = copy_check (self, dst, codes, n, precision);
    if (bad >= 0)
      return refuse_update (self, bad, error);
    rlx_vk_trainer_update_commit (self->vk, precision, inverse_scale (precision, scale), FALSE);
  }
  return TRUE;
}

void *
rlx_backend_update_begin (RlxBackend *self, RlxPrecision precision, GError **error)
{
  GError *local = NULL;
  void *dst;

  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail ((guint) precision < RLX_PRECISION_COUNT, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!require_replica (self, "applying an update", error))
    return NULL;
  dst = self->resident_vk ? rlx_vk_trainer_update_map (self->vk, &local) : host_codes (self);
  if (dst == NULL)
    vk_failed (self, local, error);
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
  if (self->resident_vk)
    {
      /* checked on the device; a refusal surfaces at the next call */
      rlx_vk_trainer_update_commit (self->vk, precision, inverse_scale (precision, scale), TRUE);
      return TRUE;
    }
  {
    gssize bad = rlx_kernels_codes_check (rlx_kernels_get_default (), self->codes_buf,
                                          self->model->n_params, precision);

    if (bad >= 0)
      return refuse_update (self, bad, error);
  }
  host_apply (self, self->codes_buf, precision, scale);
  return TRUE;
}

/* Element @i of s is @v, not finite; @gradient_itself: so is g there;
 * @fate: what became of it ("it was not sent"). */
static void
set_not_finite (RlxBackend *self, gsize i, float v, gboolean gradient_itself, const char *fate,
                GError **error)
{
  const RlxModel *m = self->model;

  if (gradient_itself)
    g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE,
                 "the gradient of %s holds %s (element %" G_GSIZE_FORMAT " of %s on %s); "
                 "%s — lower the learning rate or check the data",
                 m->slug, isnan (v) ? "NaN" : v > 0 ? "+Inf" : "-Inf", i,
                 tensor_of (m, i), self->device, fate);
  else
    g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE,
                 "the gradient of %s plus its carried quantisation residual overflows f32 "
                 "(element %" G_GSIZE_FORMAT " of %s); %s — lower the "
                 "learning rate", m->slug, i, tensor_of (m, i), fate);
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

/* The first non-finite element of @x (there is one). */
static gsize
first_not_finite (const float *x)
{
  gsize i = 0;

  while (isfinite (x[i]))
    i++;
  return i;
}

/* The wire half of grads_wire on the host: @g holds the gradient (for f32
 * without a residual to carry, already where the codes go). s = g + r;
 * codes = quantise (s) into @out; the new residual s − decode (codes) waits
 * in residual_next. Two passes over s at most (rlx_kernels_make_update): its
 * largest |s|, then quantise + residual; at f32 with nothing to carry, one
 * read-only pass for the check. */
static gboolean
host_encode (RlxBackend *self, const float *g, RlxPrecision precision, gboolean feedback,
             void *out, double *scale_out, GError **error)
{
  gsize n = self->model->n_params, bad = G_MAXSIZE;
  g_autoptr(GError) local = NULL;
  gboolean carry = feedback && self->residual_live;

  self->residual_pending = FALSE;
  if (precision == RLX_PRECISION_F32 && !carry)
    {
      guint32 g_max = rlx_kernels_max_abs_bits (rlx_kernels_get_default (), g, n);

      if (g_max >= ABS_BITS_INF)
        {
          gsize i = first_not_finite (g);
          set_not_finite (self, i, g[i], TRUE, "it was not sent", error);
          return FALSE;
        }
      if (out != g)
        {
          memcpy (out, g, n * sizeof (float));
          self->host_bytes += n * sizeof (float);
        }
      /* s − decode (s) is 0 at f32 */
      self->residual_pending = feedback;
      self->residual_next_live = FALSE;
      *scale_out = 1.0;
      return TRUE;
    }
  if (feedback && self->residual == NULL)
    {
      self->residual = g_new0 (float, n);
      self->residual_next = g_new0 (float, n);
    }
  if (!rlx_kernels_make_update (rlx_kernels_get_default (), g, n, 1.0f, 1.0f,
                                carry ? self->residual : NULL,
                                feedback ? self->residual_next : NULL, precision,
                                RLX_KERNELS_MAX_UNKNOWN, out, scale_out, NULL, NULL, &bad,
                                &local))
    {
      /* the residual is untouched: it is only written once s is known finite */
      if (bad == G_MAXSIZE)
        {
          g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED, "%s", local->message);
          return FALSE;
        }
      if (!isfinite (g[bad]) || max_abs_bits (g, n) >= ABS_BITS_INF)
        {
          gsize i = isfinite (g[bad]) ? first_not_finite (g) : bad;
          set_not_finite (self, i, g[i], TRUE, "it was not sent", error);
        }
      else
        set_not_finite (self, bad, g[bad] + self->residual[bad], FALSE, "it was not sent", error);
      return FALSE;
    }
  /* the new residual waits until the caller accepts this bucket */
  self->residual_pending = feedback;
  self->residual_next_live = feedback;
  return TRUE;
}

/* The device computed the scale and its inverse itself; they must be the
 * wire's (rlx_backend_resolve checked this device, so this never fires
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

static const void *
vk_grads_wire (RlxBackend *self, const guint32 *indices, guint n, RlxPrecision precision,
               gboolean feedback, float *loss, double *scale_out, GError **error)
{
  GError *local = NULL;
  RlxVkWireSummary sum;
  const void *codes = NULL;

  if (self->poisoned)
    {
      guint32 bits;

      memcpy (&bits, &self->poison_value, 4);
      rlx_vk_trainer_poison_gradient (self->vk, (guint32) self->poison_index, bits);
      self->poisoned = FALSE;
    }
  if (!rlx_vk_trainer_grads_wire (self->vk, indices, n, precision, feedback, &codes, &sum, &local))
    {
      vk_failed (self, local, error);
      return NULL;
    }
  *loss = sum.loss;
  if (sum.smax_bits >= ABS_BITS_INF)
    {
      float v;

      memcpy (&v, &sum.bad_bits, 4);
      set_not_finite (self, sum.first_bad, v, sum.gmax_bits >= ABS_BITS_INF, "it was not sent",
                      error);
      return NULL;
    }
  return vk_scale_ok (self, &sum, precision, scale_out, error) ? codes : NULL;
}

/* The gradient at the replica into @dst (NULL: self->sum), with the test
 * poison; returns where it is. */
static float *
host_gradient (RlxBackend *self, const guint32 *indices, guint n, float *loss, float *dst,
               GError **error)
{
  if (dst == NULL)
    {
      if (self->sum == NULL)
        self->sum = g_new (float, self->model->n_params);
      dst = self->sum;
    }
  if (!rlx_backend_grads (self, self->replica, indices, n, loss, dst, error))
    return NULL;
  if (self->poisoned)
    {
      dst[self->poison_index] = self->poison_value;
      self->poisoned = FALSE;
    }
  return dst;
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
  if (self->resident_vk)
    {
      const void *codes = vk_grads_wire (self, indices, n, precision, feedback, loss, scale_out,
                                         error);

      if (codes == NULL || out == NULL)
        return codes;
      /* (checked on the device; mnist-mlp-xl's 7.45 MB at f32 is ~0.5 ms
       * on one core, on the member's path every round) */
      copy_codes (self, out, codes, self->model->n_params, precision);
      return out;
    }
  {
    /* at f32 with no residual to carry the gradient is its own codes: it is
     * computed where they go */
    gboolean direct = precision == RLX_PRECISION_F32 && !(feedback && self->residual_live);
    float *g = host_gradient (self, indices, n, loss, direct ? out : NULL, error);

    if (g == NULL)
      return NULL;
    if (out == NULL)
      out = direct ? (void *) g : host_codes (self);
    if (!host_encode (self, g, precision, feedback, out, scale_out, error))
      return NULL;
    return out;
  }
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

  if (self->resident_vk)
    rlx_vk_trainer_accept_feedback (self->vk);
  else if (self->residual_pending)
    {
      float *t = self->residual;
      self->residual = self->residual_next;
      self->residual_next = t;
      self->residual_live = self->residual_next_live;
      self->residual_pending = FALSE;
    }
}

void
rlx_backend_reset_feedback (RlxBackend *self)
{
  g_return_if_fail (self != NULL);

  if (self->resident_vk)
    rlx_vk_trainer_reset_feedback (self->vk);
  else
    {
      /* zero without touching them: they are written before they are read */
      self->residual_live = FALSE;
      self->residual_pending = FALSE;
      self->ures_live = FALSE;
    }
}

gboolean
rlx_backend_params_on_device (const RlxBackend *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->resident_vk;
}

void
rlx_backend_round_expect_alone (RlxBackend *self, gboolean alone)
{
  g_return_if_fail (self != NULL);
  if (self->vk != NULL && self->resident_vk)
    rlx_vk_trainer_round_expect_alone (self->vk, alone);
}

void
rlx_backend_round_after (RlxBackend *self, const guint32 *after, guint n)
{
  g_return_if_fail (self != NULL);
  if (self->vk == NULL || !self->resident_vk)
    return;
  /* (a hint: samples that would not pass as a batch are not used) */
  if (after != NULL && !check_batch (self, after, n, NULL))
    after = NULL;
  rlx_vk_trainer_round_after (self->vk, after, after != NULL ? n : 0);
}

gboolean
rlx_backend_is_hardware_gpu (const RlxBackend *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->vk != NULL && !rlx_vk_device_is_software (rlx_vk_trainer_device (self->vk));
}

/* ------------------------------------------------------------ the round
 *
 * The host path keeps the round in round_sum: the first contribution alone
 * (unweighted: it may stay the only one), then from the second on the
 * weighted sum. The f32 multiply-adds are rlx_kernels_accumulate's
 * (dst = src + w·x, no fused multiply-add, on every core); the update and
 * its apply are host_quantise's. The vulkan path is the trainer's
 * (gpu/rlx-vk.h), the same arithmetic in shaders.
 */

/* A round buffer other than @avoid (made on first use). */
static float *
round_buffer (RlxBackend *self, const float *avoid)
{
  int k = self->round_buf[0] != NULL && self->round_buf[0] == avoid ? 1 : 0;

  if (self->round_buf[k] == NULL)
    self->round_buf[k] = g_new (float, self->model->n_params);
  return self->round_buf[k];
}

/* x (codes at @p with @scale: the own gradient is f32 codes, already
 * checked, with its largest |x| in @x_max) joins the host round with weight
 * @w, in one pass that also finds a non-finite x (then the round is as it
 * was: every add writes a buffer it does not read). The first contribution
 * is kept unweighted — the own gradient where it was computed — since it may
 * stay the only one. */
static gboolean
host_join (RlxBackend *self, const void *x, RlxPrecision p, double scale, guint w,
           guint32 x_max, GError **error)
{
  gsize n = self->model->n_params, bad = G_MAXSIZE;
  g_autoptr(GError) local = NULL;
  RlxKernels *k = rlx_kernels_get_default ();
  float *dst;
  gboolean ok;

  if (self->round_k == 0 && p == RLX_PRECISION_F32 && x == (const void *) self->sum)
    {
      /* the own gradient, read in place */
      self->round_first = self->sum;
      self->round_first_max = x_max;
      ok = TRUE;
    }
  else if (self->round_k == 0)
    {
      dst = round_buffer (self, NULL);
      ok = rlx_kernels_accumulate (k, dst, NULL, x, n, p, scale, 1.0f, &bad, &local);
      self->round_first = dst;
      self->round_first_max = RLX_KERNELS_MAX_UNKNOWN;
    }
  else
    {
      /* S = w1·x1 + w·x, then S + w·x */
      const float *src = self->round_k == 1 ? self->round_first : self->round_s;

      dst = round_buffer (self, src);
      ok = rlx_kernels_accumulate_weighted (k, dst, src, self->round_k == 1 ? self->round_first_w
                                                                             : 1.0f,
                                            x, n, p, scale, (float) w, &bad, &local);
      if (ok)
        self->round_s = dst;
    }
  if (!ok)
    {
      if (bad == G_MAXSIZE)
        g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED, "%s", local->message);
      else
        g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE,
                     "the bucket holds NaN or ±Inf at element %" G_GSIZE_FORMAT " (%s of %s); "
                     "it was refused — the round's sum is as it was", bad,
                     tensor_of (self->model, bad), self->model->slug);
      return FALSE;
    }
  if (self->round_k == 0)
    self->round_first_w = (float) w;
  self->round_k++;
  self->round_total += w;
  return TRUE;
}

gboolean
rlx_backend_round_own (RlxBackend *self, const guint32 *indices, guint n, float *loss,
                       GError **error)
{
  GError *local = NULL;

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
  if (self->resident_vk)
    {
      RlxVkWireSummary sum;

      if (self->poisoned)
        {
          guint32 bits;
          memcpy (&bits, &self->poison_value, 4);
          rlx_vk_trainer_poison_gradient (self->vk, (guint32) self->poison_index, bits);
          self->poisoned = FALSE;
        }
      if (!rlx_vk_trainer_round_own (self->vk, indices, n, &sum, &local))
        return vk_failed (self, local, error);
      *loss = sum.loss;
      if (sum.smax_bits >= ABS_BITS_INF)
        {
          float v;
          memcpy (&v, &sum.bad_bits, 4);
          set_not_finite (self, sum.first_bad, v, TRUE, "it was not added to the round", error);
          return FALSE;
        }
    }
  else
    {
      guint32 g_max;

      /* a round that holds a contribution in self->sum keeps it there */
      if (self->round_k == 1 && self->round_first == self->sum)
        {
          float *keep = round_buffer (self, NULL);
          memcpy (keep, self->sum, self->model->n_params * sizeof (float));
          self->round_first = keep;
        }
      if (!host_gradient (self, indices, n, loss, NULL, error))
        return FALSE;
      /* the check: the one pass over the own gradient before the finish */
      g_max = rlx_kernels_max_abs_bits (rlx_kernels_get_default (), self->sum,
                                        self->model->n_params);
      if (g_max >= ABS_BITS_INF)
        {
          gsize i = first_not_finite (self->sum);
          set_not_finite (self, i, self->sum[i], TRUE, "it was not added to the round", error);
          return FALSE;
        }
      if (!host_join (self, self->sum, RLX_PRECISION_F32, 1.0, n, g_max, error))
        return FALSE;
    }
  self->round_own_in = TRUE;
  return TRUE;
}

gboolean
rlx_backend_round_add (RlxBackend *self, const void *codes, gsize n, RlxPrecision precision,
                       double scale, guint weight, GError **error)
{
  GError *local = NULL;
  gssize bad;
  void *dst = NULL;

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
  /* the host's sum checks the codes in the pass that adds them */
  if (!self->resident_vk)
    return host_join (self, codes, precision, scale, weight, RLX_KERNELS_MAX_UNKNOWN, error);
  dst = rlx_vk_trainer_round_slot (self->vk, &local);
  if (dst == NULL)
    return vk_failed (self, local, error);
  bad = copy_check (self, dst, codes, n, precision);
  if (bad >= 0)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE,
                   "the bucket holds NaN or ±Inf at element %" G_GSSIZE_FORMAT " (%s of %s); "
                   "it was refused — the round's sum is as it was", bad,
                   tensor_of (self->model, (gsize) bad), self->model->slug);
      return FALSE;
    }
  return rlx_vk_trainer_round_add (self->vk, precision, inverse_scale (precision, scale), weight,
                                   &local) || vk_failed (self, local, error);
}

void
rlx_backend_round_cancel (RlxBackend *self)
{
  g_return_if_fail (self != NULL);

  if (self->resident_vk)
    rlx_vk_trainer_round_cancel (self->vk);
  self->round_k = 0;
  self->round_total = 0;
  self->round_own_in = FALSE;
  self->round_first = self->round_s = NULL;
}

guint
rlx_backend_round_size (RlxBackend *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->resident_vk ? rlx_vk_trainer_round_size (self->vk) : self->round_k;
}

/* The u of a round that is not finite at element @i (its value @v). */
static void
set_round_not_finite (RlxBackend *self, gsize i, float v, GError **error)
{
  g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE,
               "the round's update of %s is %s at element %" G_GSIZE_FORMAT " (%s): the "
               "finite buckets summed past f32's range; nothing was applied — lower the "
               "learning rate", self->model->slug, isnan (v) ? "NaN" : v > 0 ? "+Inf" : "-Inf",
               i, tensor_of (self->model, i));
}

/* The host round's finish: u = coef · x (+ r), its codes into @codes
 * (NULL: not wanted), the residual, replica −= decode (codes), the hash — in
 * one pass when the round is the own gradient alone with no residual to
 * carry (its largest |x| is known from round_own's check), else two. */
static gboolean
host_round_finish (RlxBackend *self, double lr, RlxPrecision precision, gboolean feedback,
                   void *codes, double *scale_out, guint64 *hash_out, GError **error)
{
  gsize n = self->model->n_params, bad = G_MAXSIZE;
  g_autoptr(GError) local = NULL;
  const float *x = self->round_k == 1 ? self->round_first : self->round_s;
  float coef = self->round_k == 1 ? (float) lr : (float) (lr / (double) self->round_total);
  gboolean carry = feedback && self->ures_live;
  guint32 known = RLX_KERNELS_MAX_UNKNOWN;

  if (feedback && self->ures == NULL)
    self->ures = g_new0 (float, n);
  if (self->round_k == 1 && self->round_first_max != RLX_KERNELS_MAX_UNKNOWN && !carry)
    {
      float m, u;

      /* every |coef·x_i| ≤ |coef·max|x|| (rounding is monotonic), and that
       * bound is attained: the largest |u| without computing u */
      memcpy (&m, &self->round_first_max, 4);
      u = fabsf (coef) * m;
      if (isfinite (u))
        memcpy (&known, &u, 4);
    }
  if (!rlx_kernels_make_update (rlx_kernels_get_default (), x, n, coef, 1.0f,
                                carry ? self->ures : NULL, feedback ? self->ures : NULL,
                                precision, known, codes, scale_out, self->replica,
                                &self->hash, &bad, &local))
    {
      if (bad == G_MAXSIZE)
        g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED, "%s", local->message);
      else
        set_round_not_finite (self, bad, coef * x[bad] + (carry ? self->ures[bad] : 0.0f),
                              error);
      return FALSE;
    }
  if (feedback)
    self->ures_live = TRUE;
  self->hash_valid = TRUE;
  *hash_out = self->hash;
  return TRUE;
}

/* round_finish with the codes where the caller wants them: at *@codes_out
 * (the backend's memory) or copied into @codes_into (for the host, written
 * there by the finish itself); neither: not made. */
static gboolean
round_finish (RlxBackend *self, double lr, RlxPrecision precision, gboolean feedback,
              const guint32 *next_indices, guint next_n, const void **codes_out,
              void *codes_into, double *scale_out, guint64 *hash_out, GError **error)
{
  GError *local = NULL;
  RlxVkWireSummary sum;
  const void *mapped = NULL;
  gboolean ok;

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
  /* never at f32, where the residual is left for when the precision drops */
  feedback = feedback && precision != RLX_PRECISION_F32;
  if (!self->resident_vk)
    {
      void *codes = codes_into ? codes_into : codes_out ? host_codes (self) : NULL;

      ok = host_round_finish (self, lr, precision, feedback, codes, scale_out, hash_out, error);
      rlx_backend_round_cancel (self);
      if (ok && codes_out != NULL)
        *codes_out = codes;
      return ok;
    }
  self->round_own_in = FALSE;
  if (!rlx_vk_trainer_round_finish (self->vk, lr, precision, feedback, next_indices, next_n,
                                    codes_out || codes_into ? &mapped : NULL, &sum, hash_out,
                                    &local))
    return vk_failed (self, local, error);
  if (sum.smax_bits >= ABS_BITS_INF)
    {
      float v;
      memcpy (&v, &sum.bad_bits, 4);
      set_round_not_finite (self, sum.first_bad, v, error);
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

RlxVkTrainer *
rlx_backend_vk_trainer (RlxBackend *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->vk;
}

/* The vulkan trainer's counters (all 0 without one). */
static RlxVkTimings
vk_timings (RlxBackend *self)
{
  RlxVkTimings t = { 0 };

  if (self->vk != NULL)
    rlx_vk_trainer_timings (self->vk, &t);
  return t;
}

guint64
rlx_backend_host_bytes (RlxBackend *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->host_bytes + vk_timings (self).host_bytes;
}

guint64
rlx_backend_ahead_taken (RlxBackend *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return vk_timings (self).ahead_taken;
}

guint64
rlx_backend_updates_ahead (RlxBackend *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return vk_timings (self).presub_taken;
}

gboolean
rlx_backend_device_round_us (RlxBackend *self, double *finish_us, double *grad_us)
{
  RlxVkTimings t;

  g_return_val_if_fail (self != NULL && finish_us != NULL && grad_us != NULL, FALSE);
  t = vk_timings (self);
  *finish_us = t.round_us;
  *grad_us = t.compute_us;
  return self->vk != NULL;
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
