/* rlx-backend-host.c — the host implementation: the CPU trainer, and the
 * replica, residuals and round in host memory
 *
 * Two parts behind rlx-backend-impl.h's two interfaces:
 *   - the cpu backend's compute: gather the samples, the CPU reference
 *     forward and backward (core/vision/rlx-cpu.h);
 *   - the host replica, the cpu backend's and a vulkan backend's whose device
 *     does not reproduce the wire's bits (its gradients come from the
 *     backend's own compute, one call per step): the replica, the residual
 *     and the step's gradient are host arrays made once; updates are
 *     dequantised and gradients quantised by core/rlx-kernels.h a chunk at a
 *     time, so a call allocates nothing parameter-sized and gives exactly
 *     the bits that rlx_wire_dequantize / RlxWireFeedback give.
 *
 * The leader's round on the host: the first contribution alone (unweighted:
 * it may stay the only one), then from the second on the weighted sum. The
 * f32 multiply-adds are rlx_kernels_accumulate's (dst = src + w·x, no fused
 * multiply-add, on every core); the update and its apply are
 * rlx_kernels_make_update's.
 *
 * Threads: the backend's (rlx-backend-impl.h).
 */
#include "rlx-config.h"
#include "rlx-backend-impl.h"
#include "core/rlx-kernels.h"
#include "core/vision/rlx-cpu.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------ the compute */

typedef struct {
  RlxCpuTrainer *cpu;
  float         *x;       /* [max_batch][784] gather buffer */
  guint8        *labels;
} HostCompute;

static gboolean
cpu_grads (RlxBackend *self, const float *params, const guint32 *indices, guint n,
           float *loss, float *grads, GError **error)
{
  HostCompute *c = self->compute_ctx;

  rlx_dataset_gather (self->dataset, RLX_SPLIT_TRAIN, indices, n, c->x, c->labels);
  *loss = rlx_cpu_trainer_grads (c->cpu, params, c->x, c->labels, n, grads);
  return TRUE;
}

static void
cpu_free (RlxBackend *self)
{
  HostCompute *c = self->compute_ctx;

  rlx_cpu_trainer_free (c->cpu);
  g_free (c->x);
  g_free (c->labels);
  g_free (c);
}

static const RlxBackendComputeI cpu_compute_i = {
  .name = "cpu",
  .free = cpu_free,
  .grads = cpu_grads,
  .counters = NULL,
};

RlxBackend *
rlx_backend_host_new (const RlxModel *model, RlxDataset *dataset, guint max_batch)
{
  RlxBackend *self = rlx_backend_alloc (model, dataset, max_batch);
  HostCompute *c = g_new0 (HostCompute, 1);

  c->cpu = rlx_cpu_trainer_new (model, max_batch);
  c->x = g_new (float, (gsize) max_batch * RLX_INPUT_LEN);
  c->labels = g_new (guint8, max_batch);
  self->compute = &cpu_compute_i;
  self->compute_ctx = c;
  g_free (self->device);
  /* the threads it will use (rlx_cpu_set_threads, e.g. --threads 1), not the cores */
  self->device = g_strdup_printf ("CPU, OpenBLAS, %u %s", rlx_cpu_threads (),
                                  rlx_cpu_threads () == 1 ? "thread" : "threads");
  rlx_backend_host_replica_init (self);
  return self;
}

void
rlx_backend_host_emulate_f16 (RlxBackend *self)
{
  HostCompute *c;

  g_return_if_fail (self != NULL && self->compute == &cpu_compute_i);
  c = self->compute_ctx;
  rlx_cpu_trainer_set_f16 (c->cpu, rlx_vk_gemm_is_f16, rlx_vk_f16_grad_scale);
  g_free (self->device);
  self->device = g_strdup_printf ("CPU emulating --compute f16, OpenBLAS, %u %s",
                                  rlx_cpu_threads (), rlx_cpu_threads () == 1 ? "thread" : "threads");
}

/* ------------------------------------------------------------ the replica */

typedef struct {
  float          *replica;
  guint64         hash;      /* of the replica, when hash_valid */
  gboolean        hash_valid;
  float          *residual;  /* the gradient stream's quantisation residual (accepted) */
  float          *residual_next;  /* the last gradient's new residual, until accepted */
  gboolean        residual_pending;
  gboolean        residual_live;       /* the carried residual holds values (else all zero) */
  gboolean        residual_next_live;  /* so does the one waiting */
  float          *sum;       /* this step's gradient */
  guint8         *codes_buf; /* n_params × 4 bytes: update_begin's room, the codes */
  /* the leader's round */
  const float    *round_first;   /* the first contribution alone, unweighted, as floats */
  float           round_first_w;
  guint32         round_first_max; /* its largest |x| as bits, or RLX_KERNELS_MAX_UNKNOWN */
  float          *round_buf[2];  /* the sums (each add writes the one it does not read) */
  const float    *round_s;       /* the weighted sum from the second contribution on */
  guint           round_k;   /* contributions */
  guint64         round_total;
  float          *ures;      /* the update stream's residual */
  gboolean        ures_live; /* it holds values (else all zero) */
} HostReplica;

static void
host_free (RlxBackend *self)
{
  HostReplica *h = self->replica_ctx;

  g_free (h->replica);
  g_free (h->residual);
  g_free (h->residual_next);
  g_free (h->sum);
  g_free (h->codes_buf);
  g_free (h->round_buf[0]);
  g_free (h->round_buf[1]);
  g_free (h->ures);
  g_free (h);
}

/* The host passes over a gradient and an update, with GCC's vector
 * extensions so that they are SIMD at any optimisation level (the default
 * build is -O2, where GCC 12 leaves these loops scalar: 1 ms each for
 * mnist-mlp-xl). */
typedef guint32 V8u __attribute__ ((vector_size (32)));

/* The largest |x| as f32 bits without the sign (ordered like |x| for finite
 * x; ≥ RLX_BACKEND_ABS_BITS_INF for NaN or ±Inf). */
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

/* The first non-finite element of @x (there is one). */
static gsize
first_not_finite (const float *x)
{
  gsize i = 0;

  while (isfinite (x[i]))
    i++;
  return i;
}

static gboolean
host_load (RlxBackend *self, const float *params, GError **error)
{
  HostReplica *h = self->replica_ctx;

  if (h->replica == NULL)
    h->replica = g_new (float, self->model->n_params);
  memcpy (h->replica, params, self->model->n_params * sizeof (float));
  h->hash_valid = FALSE;
  return TRUE;
}

static gboolean
host_read (RlxBackend *self, float *params, GError **error)
{
  HostReplica *h = self->replica_ctx;

  memcpy (params, h->replica, self->model->n_params * sizeof (float));
  return TRUE;
}

static gboolean
host_hash (RlxBackend *self, guint64 *hash, GError **error)
{
  HostReplica *h = self->replica_ctx;

  /* an apply or a round's finish hashed them on the way */
  if (!h->hash_valid)
    {
      h->hash = rlx_kernels_hash (rlx_kernels_get_default (), h->replica, self->model->n_params);
      h->hash_valid = TRUE;
    }
  *hash = h->hash;
  return TRUE;
}

/* replica -= dequantise (@codes), hashed chunk by chunk on the way
 * (params_hash then costs nothing). */
static void
host_apply (RlxBackend *self, const void *codes, RlxPrecision precision, double scale)
{
  HostReplica *h = self->replica_ctx;

  rlx_kernels_apply (rlx_kernels_get_default (), h->replica, codes, self->model->n_params,
                     precision, scale, &h->hash);
  h->hash_valid = TRUE;
}

/* room for n_params codes of up to 4 bytes on the host (made once) */
static guint8 *
host_codes (RlxBackend *self)
{
  HostReplica *h = self->replica_ctx;

  if (h->codes_buf == NULL)
    h->codes_buf = g_malloc (self->model->n_params * 4);
  return h->codes_buf;
}

/* @codes checked (in place, nothing copied), then applied and hashed */
static gboolean
host_check_apply (RlxBackend *self, const void *codes, RlxPrecision precision, double scale,
                  GError **error)
{
  gssize bad = rlx_kernels_codes_check (rlx_kernels_get_default (), codes,
                                        self->model->n_params, precision);

  if (bad >= 0)
    return rlx_backend_refuse_update (self, bad, error);
  host_apply (self, codes, precision, scale);
  return TRUE;
}

static gboolean
host_apply_update (RlxBackend *self, const void *codes, RlxPrecision precision, double scale,
                   GError **error)
{
  return host_check_apply (self, codes, precision, scale, error);
}

static void *
host_update_begin (RlxBackend *self, RlxPrecision precision, GError **error)
{
  return host_codes (self);
}

static gboolean
host_update_commit (RlxBackend *self, RlxPrecision precision, double scale, GError **error)
{
  HostReplica *h = self->replica_ctx;

  return host_check_apply (self, h->codes_buf, precision, scale, error);
}

/* The wire half of grads_wire: @g holds the gradient (for f32 without a
 * residual to carry, already where the codes go). s = g + r; codes =
 * quantise (s) into @out; the new residual s − decode (codes) waits in
 * residual_next. Two passes over s at most (rlx_kernels_make_update): its
 * largest |s|, then quantise + residual; at f32 with nothing to carry, one
 * read-only pass for the check. */
static gboolean
host_encode (RlxBackend *self, const float *g, RlxPrecision precision, gboolean feedback,
             void *out, double *scale_out, GError **error)
{
  HostReplica *h = self->replica_ctx;
  gsize n = self->model->n_params, bad = G_MAXSIZE;
  g_autoptr(GError) local = NULL;
  gboolean carry = feedback && h->residual_live;

  h->residual_pending = FALSE;
  if (precision == RLX_PRECISION_F32 && !carry)
    {
      guint32 g_max = rlx_kernels_max_abs_bits (rlx_kernels_get_default (), g, n);

      if (g_max >= RLX_BACKEND_ABS_BITS_INF)
        {
          gsize i = first_not_finite (g);
          rlx_backend_set_not_finite (self, i, g[i], TRUE, "it was not sent", error);
          return FALSE;
        }
      if (out != g)
        {
          memcpy (out, g, n * sizeof (float));
          self->host_bytes += n * sizeof (float);
        }
      /* s − decode (s) is 0 at f32 */
      h->residual_pending = feedback;
      h->residual_next_live = FALSE;
      *scale_out = 1.0;
      return TRUE;
    }
  if (feedback && h->residual == NULL)
    {
      h->residual = g_new0 (float, n);
      h->residual_next = g_new0 (float, n);
    }
  if (!rlx_kernels_make_update (rlx_kernels_get_default (), g, n, 1.0f, 1.0f,
                                carry ? h->residual : NULL,
                                feedback ? h->residual_next : NULL, precision,
                                RLX_KERNELS_MAX_UNKNOWN, out, scale_out, NULL, NULL, &bad,
                                &local))
    {
      /* the residual is untouched: it is only written once s is known finite */
      if (bad == G_MAXSIZE)
        {
          g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED, "%s", local->message);
          return FALSE;
        }
      if (!isfinite (g[bad]) || max_abs_bits (g, n) >= RLX_BACKEND_ABS_BITS_INF)
        {
          gsize i = isfinite (g[bad]) ? first_not_finite (g) : bad;
          rlx_backend_set_not_finite (self, i, g[i], TRUE, "it was not sent", error);
        }
      else
        rlx_backend_set_not_finite (self, bad, g[bad] + h->residual[bad], FALSE,
                                    "it was not sent", error);
      return FALSE;
    }
  /* the new residual waits until the caller accepts this bucket */
  h->residual_pending = feedback;
  h->residual_next_live = feedback;
  return TRUE;
}

/* The gradient at the replica into @dst (NULL: the step's sum), with the
 * test poison; returns where it is. */
static float *
host_gradient (RlxBackend *self, const guint32 *indices, guint n, float *loss, float *dst,
               GError **error)
{
  HostReplica *h = self->replica_ctx;

  if (dst == NULL)
    {
      if (h->sum == NULL)
        h->sum = g_new (float, self->model->n_params);
      dst = h->sum;
    }
  if (!self->compute->grads (self, h->replica, indices, n, loss, dst, error))
    return NULL;
  if (self->poisoned)
    {
      dst[self->poison_index] = self->poison_value;
      self->poisoned = FALSE;
    }
  return dst;
}

static const void *
host_grads_wire (RlxBackend *self, const guint32 *indices, guint n, RlxPrecision precision,
                 gboolean feedback, float *loss, void *out, double *scale_out, GError **error)
{
  HostReplica *h = self->replica_ctx;
  /* at f32 with no residual to carry the gradient is its own codes: it is
   * computed where they go */
  gboolean direct = precision == RLX_PRECISION_F32 && !(feedback && h->residual_live);
  float *g = host_gradient (self, indices, n, loss, direct ? out : NULL, error);

  if (g == NULL)
    return NULL;
  if (out == NULL)
    out = direct ? (void *) g : host_codes (self);
  if (!host_encode (self, g, precision, feedback, out, scale_out, error))
    return NULL;
  return out;
}

static void
host_accept_feedback (RlxBackend *self)
{
  HostReplica *h = self->replica_ctx;

  if (h->residual_pending)
    {
      float *t = h->residual;
      h->residual = h->residual_next;
      h->residual_next = t;
      h->residual_live = h->residual_next_live;
      h->residual_pending = FALSE;
    }
}

static void
host_reset_feedback (RlxBackend *self)
{
  HostReplica *h = self->replica_ctx;

  /* zero without touching them: they are written before they are read */
  h->residual_live = FALSE;
  h->residual_pending = FALSE;
  h->ures_live = FALSE;
}

/* A round buffer other than @avoid (made on first use). */
static float *
round_buffer (RlxBackend *self, const float *avoid)
{
  HostReplica *h = self->replica_ctx;
  int k = h->round_buf[0] != NULL && h->round_buf[0] == avoid ? 1 : 0;

  if (h->round_buf[k] == NULL)
    h->round_buf[k] = g_new (float, self->model->n_params);
  return h->round_buf[k];
}

/* x (codes at @p with @scale: the own gradient is f32 codes, already
 * checked, with its largest |x| in @x_max) joins the round with weight @w,
 * in one pass that also finds a non-finite x (then the round is as it was:
 * every add writes a buffer it does not read). The first contribution is
 * kept unweighted — the own gradient where it was computed — since it may
 * stay the only one. */
static gboolean
host_join (RlxBackend *self, const void *x, RlxPrecision p, double scale, guint w,
           guint32 x_max, GError **error)
{
  HostReplica *h = self->replica_ctx;
  gsize n = self->model->n_params, bad = G_MAXSIZE;
  g_autoptr(GError) local = NULL;
  RlxKernels *k = rlx_kernels_get_default ();
  float *dst;
  gboolean ok;

  if (h->round_k == 0 && p == RLX_PRECISION_F32 && x == (const void *) h->sum)
    {
      /* the own gradient, read in place */
      h->round_first = h->sum;
      h->round_first_max = x_max;
      ok = TRUE;
    }
  else if (h->round_k == 0)
    {
      dst = round_buffer (self, NULL);
      ok = rlx_kernels_accumulate (k, dst, NULL, x, n, p, scale, 1.0f, &bad, &local);
      h->round_first = dst;
      h->round_first_max = RLX_KERNELS_MAX_UNKNOWN;
    }
  else
    {
      /* S = w1·x1 + w·x, then S + w·x */
      const float *src = h->round_k == 1 ? h->round_first : h->round_s;

      dst = round_buffer (self, src);
      ok = rlx_kernels_accumulate_weighted (k, dst, src, h->round_k == 1 ? h->round_first_w
                                                                          : 1.0f,
                                            x, n, p, scale, (float) w, &bad, &local);
      if (ok)
        h->round_s = dst;
    }
  if (!ok)
    {
      if (bad == G_MAXSIZE)
        {
          g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED, "%s", local->message);
          return FALSE;
        }
      return rlx_backend_refuse_bucket (self, (gssize) bad, error);
    }
  if (h->round_k == 0)
    h->round_first_w = (float) w;
  h->round_k++;
  h->round_total += w;
  return TRUE;
}

static gboolean
host_round_own (RlxBackend *self, const guint32 *indices, guint n, float *loss, GError **error)
{
  HostReplica *h = self->replica_ctx;
  guint32 g_max;

  /* a round that holds a contribution in the step's sum keeps it there */
  if (h->round_k == 1 && h->round_first == h->sum)
    {
      float *keep = round_buffer (self, NULL);
      memcpy (keep, h->sum, self->model->n_params * sizeof (float));
      h->round_first = keep;
    }
  if (!host_gradient (self, indices, n, loss, NULL, error))
    return FALSE;
  /* the check: the one pass over the own gradient before the finish */
  g_max = rlx_kernels_max_abs_bits (rlx_kernels_get_default (), h->sum, self->model->n_params);
  if (g_max >= RLX_BACKEND_ABS_BITS_INF)
    {
      gsize i = first_not_finite (h->sum);
      rlx_backend_set_not_finite (self, i, h->sum[i], TRUE, "it was not added to the round",
                                  error);
      return FALSE;
    }
  return host_join (self, h->sum, RLX_PRECISION_F32, 1.0, n, g_max, error);
}

/* the sum checks the codes in the pass that adds them */
static gboolean
host_round_add (RlxBackend *self, const void *codes, RlxPrecision precision, double scale,
                guint weight, GError **error)
{
  return host_join (self, codes, precision, scale, weight, RLX_KERNELS_MAX_UNKNOWN, error);
}

static void
host_round_cancel (RlxBackend *self)
{
  HostReplica *h = self->replica_ctx;

  h->round_k = 0;
  h->round_total = 0;
  h->round_first = h->round_s = NULL;
}

static guint
host_round_size (RlxBackend *self)
{
  HostReplica *h = self->replica_ctx;

  return h->round_k;
}

/* u = coef · x (+ r), its codes into @codes (NULL: not wanted), the
 * residual, replica −= decode (codes), the hash — in one pass when the round
 * is the own gradient alone with no residual to carry (its largest |x| is
 * known from round_own's check), else two. */
static gboolean
host_finish_update (RlxBackend *self, double lr, RlxPrecision precision, gboolean feedback,
                    void *codes, double *scale_out, guint64 *hash_out, GError **error)
{
  HostReplica *h = self->replica_ctx;
  gsize n = self->model->n_params, bad = G_MAXSIZE;
  g_autoptr(GError) local = NULL;
  const float *x = h->round_k == 1 ? h->round_first : h->round_s;
  float coef = h->round_k == 1 ? (float) lr : (float) (lr / (double) h->round_total);
  gboolean carry = feedback && h->ures_live;
  guint32 known = RLX_KERNELS_MAX_UNKNOWN;

  if (feedback && h->ures == NULL)
    h->ures = g_new0 (float, n);
  if (h->round_k == 1 && h->round_first_max != RLX_KERNELS_MAX_UNKNOWN && !carry)
    {
      float m, u;

      /* every |coef·x_i| ≤ |coef·max|x|| (rounding is monotonic), and that
       * bound is attained: the largest |u| without computing u */
      memcpy (&m, &h->round_first_max, 4);
      u = fabsf (coef) * m;
      if (isfinite (u))
        memcpy (&known, &u, 4);
    }
  if (!rlx_kernels_make_update (rlx_kernels_get_default (), x, n, coef, 1.0f,
                                carry ? h->ures : NULL, feedback ? h->ures : NULL,
                                precision, known, codes, scale_out, h->replica,
                                &h->hash, &bad, &local))
    {
      if (bad == G_MAXSIZE)
        g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED, "%s", local->message);
      else
        rlx_backend_set_round_not_finite (self, bad,
                                          coef * x[bad] + (carry ? h->ures[bad] : 0.0f), error);
      return FALSE;
    }
  if (feedback)
    h->ures_live = TRUE;
  h->hash_valid = TRUE;
  *hash_out = h->hash;
  return TRUE;
}

/* the finish writes the codes where the caller wants them itself; the
 * round is over either way */
static gboolean
host_round_finish (RlxBackend *self, double lr, RlxPrecision precision, gboolean feedback,
                   const guint32 *next_indices, guint next_n, const void **codes_out,
                   void *codes_into, double *scale_out, guint64 *hash_out, GError **error)
{
  void *codes = codes_into ? codes_into : codes_out ? host_codes (self) : NULL;
  gboolean ok = host_finish_update (self, lr, precision, feedback, codes, scale_out, hash_out,
                                    error);

  host_round_cancel (self);
  if (ok && codes_out != NULL)
    *codes_out = codes;
  return ok;
}

static const RlxBackendReplicaI host_replica_i = {
  .on_device = FALSE,
  .free = host_free,
  .load = host_load,
  .read = host_read,
  .hash = host_hash,
  .apply_update = host_apply_update,
  .update_begin = host_update_begin,
  .update_commit = host_update_commit,
  .grads_wire = host_grads_wire,
  .accept_feedback = host_accept_feedback,
  .reset_feedback = host_reset_feedback,
  .round_own = host_round_own,
  .round_add = host_round_add,
  .round_cancel = host_round_cancel,
  .round_size = host_round_size,
  .round_finish = host_round_finish,
  /* the next round is made when it comes */
  .round_expect_alone = NULL,
  .round_after = NULL,
};

void
rlx_backend_host_replica_init (RlxBackend *self)
{
  g_assert (self->replica == NULL);
  self->replica = &host_replica_i;
  self->replica_ctx = g_new0 (HostReplica, 1);
}
