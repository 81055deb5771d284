/* rlx-outer-engine.c — the outer mode's work on the compute worker
 * (rlx-outer-engine.h). Every array operation that replicas must agree on
 * is one of core/cohort/rlx-outer.c's (built without FMA contraction); the
 * inner steps are the rank's own and need not agree with anyone. */
#include "rlx-config.h"
#include "rlx-outer-engine.h"
#include "core/cohort/rlx-outer.h"
#include "core/vision/rlx-cpu.h"
#include "core/vision/rlx-model.h"

#include <math.h>
#include <string.h>

/* One of the leader's open rounds. */
typedef struct {
  float   *sum;
  guint64  step;
  guint    gen;
  guint    contributions;
  guint64  samples;
} Slot;

struct _RlxOuterEngine {
  gsize    n;
  float   *mom;          /* m */
  float   *x;            /* the inner steps' parameters */
  float   *grads;
  float   *delta;        /* δ of the last local */
  float   *scratch;      /* s, or a decoded bucket or update */
  float   *res;          /* the member stream's residual (NULL: none yet) */
  float   *res_next;     /* the one the last bucket left, kept aside */
  gboolean res_pending;
  float   *ures;         /* the leader's update residual (NULL: none yet) */
  guint64  delta_step;   /* the round δ belongs to (0: none) */
  double   inner_us;     /* the last local's compute of one inner step, µs */
  /* the leader's rounds: two may be open at once with overlap (round k
   * being finished while round k+1's contributions come in) */
  Slot     slot[2];
};

RlxOuterEngine *
rlx_outer_engine_new (gsize n)
{
  RlxOuterEngine *self = g_new0 (RlxOuterEngine, 1);

  self->n = n;
  self->mom = g_new0 (float, n);
  self->x = g_new (float, n);
  self->grads = g_new (float, n);
  self->delta = g_new0 (float, n);
  self->scratch = g_new (float, n);
  return self;
}

void
rlx_outer_engine_free (RlxOuterEngine *self)
{
  if (self == NULL)
    return;
  g_free (self->mom);
  g_free (self->x);
  g_free (self->grads);
  g_free (self->delta);
  g_free (self->scratch);
  g_free (self->res);
  g_free (self->res_next);
  g_free (self->ures);
  g_free (self->slot[0].sum);
  g_free (self->slot[1].sum);
  g_free (self);
}

static gboolean
not_finite (GError **error, const char *what, gssize at)
{
  g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE,
               "%s holds NaN or Inf (element %" G_GSSIZE_FORMAT ")", what, at);
  return FALSE;
}

gboolean
rlx_outer_engine_apply (RlxOuterEngine *self, RlxBackend *backend, const void *codes, gsize n,
                        RlxPrecision precision, double scale, const RlxOuterSettings *settings,
                        GError **error)
{
  gssize bad;

  if (n != self->n)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED,
                   "an outer update of %" G_GSIZE_FORMAT " values for %" G_GSIZE_FORMAT
                   " parameters", n, self->n);
      return FALSE;
    }
  rlx_wire_dequantize (codes, n, precision, scale, self->scratch);
  if ((bad = rlx_outer_update_check (self->scratch, n)) >= 0)
    return not_finite (error, "the outer update", bad);
  /* θ −= d in the backend: it decodes the same codes to the same d */
  if (!rlx_backend_apply_update (backend, codes, n, precision, scale, error))
    return FALSE;
  rlx_outer_apply_momentum (self->mom, self->scratch, n, settings->lr, settings->momentum);
  return TRUE;
}

void
rlx_outer_engine_reset (RlxOuterEngine *self)
{
  memset (self->mom, 0, self->n * sizeof (float));
  rlx_outer_engine_reset_feedback (self);
}

void
rlx_outer_engine_reset_feedback (RlxOuterEngine *self)
{
  g_clear_pointer (&self->res, g_free);
  g_clear_pointer (&self->res_next, g_free);
  self->res_pending = FALSE;
  g_clear_pointer (&self->ures, g_free);
  rlx_outer_engine_round_cancel (self);
}

gboolean
rlx_outer_engine_hash (RlxOuterEngine *self, RlxBackend *backend, guint64 *hash, GError **error)
{
  guint64 theta;

  if (!rlx_backend_params_hash (backend, &theta, error))
    return FALSE;
  *hash = rlx_outer_engine_hash_with (self, theta);
  return TRUE;
}

guint64
rlx_outer_engine_hash_with (RlxOuterEngine *self, guint64 theta_hash)
{
  return rlx_outer_hash (theta_hash, rlx_params_hash (self->mom, self->n), self->n);
}

const float *
rlx_outer_engine_momentum (RlxOuterEngine *self)
{
  return self->mom;
}

void
rlx_outer_engine_load_momentum (RlxOuterEngine *self, const float *m)
{
  memcpy (self->mom, m, self->n * sizeof (float));
}

/* (Not one bit: the momentum update μ·m + d/η would round a one-ulp
 * difference away within a few rounds; +1 decays by μ/(1 + μ) a round.) */
void
rlx_outer_engine_perturb_momentum (RlxOuterEngine *self)
{
  if (self->n > 0)
    self->mom[0] += 1.0f;
}

/* The start of an overlapped round (the eager rule of arXiv 2502.12996):
 * x = θ − u, u the outer step the round before would make if the average
 * pseudo-gradient were this rank's own δ, with the replica's momentum —
 * u = η (δ + μ (μ m + δ)), as rlx_outer_make_update makes it. θ is where
 * the cohort's update of that round will be applied, so the rank computes
 * near where its result lands. Only this rank's local parameters depend on
 * it. */
static void
eager_start (RlxOuterEngine *self, const RlxOuterSettings *settings)
{
  float muf = (float) settings->momentum, lrf = (float) settings->lr;

  for (gsize i = 0; i < self->n; i++)
    {
      float d = self->delta[i];
      float t = muf * self->mom[i] + d;

      self->x[i] -= lrf * (d + muf * t);
    }
}

gboolean
rlx_outer_engine_local (RlxOuterEngine *self, RlxBackend *backend, guint64 step,
                        const guint32 *indices, guint n, const RlxOuterSettings *settings,
                        RlxOuterBetween between, gpointer between_data, float *loss,
                        GError **error)
{
  guint steps = MAX (1u, MIN (settings->h, n));
  guint max_batch = rlx_backend_max_batch (backend);
  double loss_sum = 0;
  guint done = 0;
  gint64 inner = 0;
  gssize bad;

  g_return_val_if_fail (n > 0, FALSE);
  /* chunks of at most max_batch: more steps when the slice needs them */
  if ((n + steps - 1) / steps > max_batch)
    steps = (n + max_batch - 1) / max_batch;
  if (!rlx_backend_read_params (backend, self->x, error))
    return FALSE;
  /* With overlap, the round before this one was this rank's too: its own
   * progress goes on from the newest θ (x = θ − δ of that round). */
  if (settings->lag > 0 && self->delta_step > 0 && self->delta_step + 1 == step)
    eager_start (self, settings);
  memcpy (self->delta, self->x, self->n * sizeof (float));   /* the round's start s */
  self->delta_step = 0;
  self->inner_us = 0;
  for (guint k = 0; k < steps; k++)
    {
      guint size = n / steps + (k < n % steps ? 1 : 0);
      gint64 t0 = g_get_monotonic_time ();
      float l = 0;

      if (!rlx_backend_grads (backend, self->x, indices + done, size, &l, self->grads, error))
        return FALSE;
      rlx_sgd_step (self->x, self->grads, self->n, (float) settings->inner_lr);
      /* the inner steps alone: not the round's setup, its pseudo-gradient
       * or the work run in between (the leader's sums and finish) */
      inner += g_get_monotonic_time () - t0;
      loss_sum += (double) l * size;
      done += size;
      if (between != NULL && k + 1 < steps)
        between (between_data);
    }
  *loss = (float) (loss_sum / n);
  /* δ = s − x */
  rlx_outer_pseudo_gradient (self->delta, self->x, self->delta, self->n);
  if ((bad = rlx_outer_update_check (self->delta, self->n)) >= 0)
    return not_finite (error, "the pseudo-gradient", bad);
  self->delta_step = step;
  self->inner_us = MAX (1.0, (double) inner / steps);
  return TRUE;
}

double
rlx_outer_engine_inner_us (RlxOuterEngine *self)
{
  g_return_val_if_fail (self != NULL, 0.0);
  return self->inner_us;
}

void
rlx_outer_engine_delta_wire (RlxOuterEngine *self, RlxPrecision precision, gboolean feedback,
                             void *codes, double *scale_out)
{
  gsize n = self->n;
  const float *s = self->delta;
  double scale;

  if (feedback && precision != RLX_PRECISION_F32)
    {
      if (self->res == NULL)
        self->res = g_new0 (float, n);
      if (self->res_next == NULL)
        self->res_next = g_new0 (float, n);
      for (gsize i = 0; i < n; i++)
        self->scratch[i] = self->delta[i] + self->res[i];
      s = self->scratch;
    }
  scale = rlx_wire_scale_for (s, n, precision);
  rlx_wire_quantize (s, n, precision, scale, codes);
  *scale_out = scale;
  self->res_pending = FALSE;
  if (feedback && precision != RLX_PRECISION_F32)
    {
      /* r' = s − decode (codes), 0 where that is not finite */
      rlx_wire_dequantize (codes, n, precision, scale, self->res_next);
      for (gsize i = 0; i < n; i++)
        {
          float r = s[i] - self->res_next[i];
          self->res_next[i] = isfinite (r) ? r : 0.0f;
        }
      self->res_pending = TRUE;
    }
}

void
rlx_outer_engine_accept_feedback (RlxOuterEngine *self)
{
  float *t;

  if (!self->res_pending)
    return;
  t = self->res;
  self->res = self->res_next;
  self->res_next = t;
  self->res_pending = FALSE;
}

/* The slot of round @step (of abandon generation @gen), emptied when it
 * held another. */
static Slot *
slot_of (RlxOuterEngine *self, guint64 step, guint gen)
{
  Slot *sl = &self->slot[step % 2];

  if (sl->step != step || sl->gen != gen)
    {
      sl->step = step;
      sl->gen = gen;
      sl->contributions = 0;
      sl->samples = 0;
    }
  if (sl->sum == NULL)
    sl->sum = g_new (float, self->n);
  return sl;
}

static void
round_add_f32 (RlxOuterEngine *self, guint64 step, guint gen, const float *delta, guint samples)
{
  Slot *sl = slot_of (self, step, gen);

  rlx_outer_accumulate (sl->sum, delta, samples, sl->contributions == 0, self->n);
  sl->contributions++;
  sl->samples += samples;
}

void
rlx_outer_engine_round_own (RlxOuterEngine *self, guint64 step, guint gen, guint samples)
{
  round_add_f32 (self, step, gen, self->delta, samples);
}

gboolean
rlx_outer_engine_round_add (RlxOuterEngine *self, guint64 step, guint gen, const void *codes,
                            gsize n, RlxPrecision precision, double scale, guint samples,
                            GError **error)
{
  gssize bad;

  if (n != self->n || samples == 0 || !isfinite (scale) || scale <= 0)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED,
                   "a pseudo-gradient of %" G_GSIZE_FORMAT " values (scale %g, %u samples) "
                   "for %" G_GSIZE_FORMAT " parameters", n, scale, samples, self->n);
      return FALSE;
    }
  rlx_wire_dequantize (codes, n, precision, scale, self->scratch);
  if ((bad = rlx_outer_update_check (self->scratch, n)) >= 0)
    return not_finite (error, "the pseudo-gradient", bad);
  round_add_f32 (self, step, gen, self->scratch, samples);
  return TRUE;
}

gboolean
rlx_outer_engine_round_finish (RlxOuterEngine *self, RlxBackend *backend, guint64 step,
                               guint gen, const RlxOuterSettings *settings, RlxPrecision precision,
                               gboolean feedback, void *codes, double *scale_out,
                               guint64 *hash_out, GError **error)
{
  gsize n = self->n;
  gsize es = rlx_precision_element_size (precision);
  g_autofree guint8 *own = NULL;
  g_autoptr(GError) local = NULL;
  gboolean with_res = feedback && precision != RLX_PRECISION_F32;
  Slot *sl = slot_of (self, step, gen);
  guint64 samples = sl->samples;
  gboolean ok;

  if (sl->contributions == 0)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED,
                   "an outer round with no contribution");
      return FALSE;
    }
  sl->contributions = 0;
  sl->samples = 0;
  if (with_res && self->ures == NULL)
    self->ures = g_new0 (float, n);
  if (codes == NULL)
    codes = own = g_malloc (n * es);
  ok = rlx_outer_make_update (sl->sum, samples, self->mom, with_res ? self->ures : NULL, n,
                              settings->lr, settings->momentum, precision, codes, scale_out,
                              self->scratch, NULL, &local);
  if (!ok)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE, "%s",
                   local->message);
      return FALSE;
    }
  /* exactly what every member does with these codes */
  if (!rlx_backend_apply_update (backend, codes, n, precision, *scale_out, error))
    return FALSE;
  rlx_outer_apply_momentum (self->mom, self->scratch, n, settings->lr, settings->momentum);
  return rlx_backend_params_hash (backend, hash_out, error);
}

void
rlx_outer_engine_round_cancel (RlxOuterEngine *self)
{
  for (guint i = 0; i < 2; i++)
    {
      self->slot[i].step = 0;
      self->slot[i].contributions = 0;
      self->slot[i].samples = 0;
    }
}
