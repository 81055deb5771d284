/* rlx-outer.c — see rlx-outer.h. Built with -ffp-contract=off (core/meson.build:
 * the kernels' library): a fused multiply-add would change the bits that every
 * replica must agree on. */
#include "rlx-config.h"
#include "rlx-outer.h"
#include "core/vision/rlx-model.h"

#include <math.h>
#include <string.h>
#include "core/util/rlx-fp-mode.h"

G_DEFINE_QUARK (rlx-outer-error-quark, rlx_outer_error)

/* The wire, the arrays and the layout are little-endian, as the host is. */
G_STATIC_ASSERT (G_BYTE_ORDER == G_LITTLE_ENDIAN);

#define LR_MIN 1e-6
#define LR_MAX 10.0

double
rlx_outer_inner_lr (double lr, guint ranks)
{
  return lr * sqrt ((double) MAX (1u, MIN (ranks, RLX_OUTER_LR_SCALE_RANKS)));
}

gboolean
rlx_outer_check_settings (double lr, double momentum, GError **error)
{
  if (!isfinite (lr) || lr < LR_MIN || lr > LR_MAX)
    {
      g_set_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_INVALID,
                   "outer learning rate %g is out of range: give a number from %g to %g "
                   "(DiLoCo's default is %g)", lr, LR_MIN, LR_MAX, RLX_OUTER_DEFAULT_LR);
      return FALSE;
    }
  if (!isfinite (momentum) || momentum < 0.0 || momentum >= 1.0)
    {
      g_set_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_INVALID,
                   "outer momentum %g is out of range: give a number from 0 up to (not "
                   "including) 1 (DiLoCo's default is %g)", momentum,
                   RLX_OUTER_DEFAULT_MOMENTUM);
      return FALSE;
    }
  return TRUE;
}

/* ── arithmetic ─────────────────────────────────────────────────────────── */

void
rlx_outer_pseudo_gradient (const float *outer, const float *local, float *delta, gsize n)
{
  g_return_if_fail ((outer != NULL && local != NULL && delta != NULL) || n == 0);

  for (gsize i = 0; i < n; i++)
    delta[i] = outer[i] - local[i];
}

static void
outer_accumulate_exact (float *sum, const float *delta, guint64 samples, gboolean first, gsize n)
{
  float w = (float) samples;

  g_return_if_fail ((sum != NULL && delta != NULL) || n == 0);

  if (first)
    for (gsize i = 0; i < n; i++)
      sum[i] = w * delta[i];
  else
    for (gsize i = 0; i < n; i++)
      sum[i] = sum[i] + w * delta[i];
}

/* in the exact mode, whatever the calling thread's (rlx-fp-mode.h) */
void
rlx_outer_accumulate (float *sum, const float *delta, guint64 samples, gboolean first, gsize n)
{
  RlxFpScope fp = rlx_fp_scope_begin_exact ();

  outer_accumulate_exact (sum, delta, samples, first, n);
  rlx_fp_scope_end (fp);
}

gssize
rlx_outer_update_check (const float *update, gsize n)
{
  g_return_val_if_fail (update != NULL || n == 0, -1);

  for (gsize i = 0; i < n; i++)
    if (!isfinite (update[i]))
      return (gssize) i;
  return -1;
}

static gboolean
outer_make_update_exact (const float *sum, guint64 samples, const float *momentum,
                       float *residual, gsize n, double lr, double mu, RlxPrecision p,
                       void *codes, double *scale_out, float *update, gsize *bad_index,
                       GError **error)
{
  float inv, lrf = (float) lr, muf = (float) mu;
  gboolean carry = residual != NULL && p != RLX_PRECISION_F32;
  double scale;
  gssize bad;

  g_return_val_if_fail ((sum != NULL && momentum != NULL && update != NULL) || n == 0, FALSE);
  g_return_val_if_fail ((guint) p < RLX_PRECISION_COUNT, FALSE);
  g_return_val_if_fail (scale_out != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!rlx_outer_check_settings (lr, mu, error))
    return FALSE;
  if (samples == 0)
    {
      g_set_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_INVALID,
                   "an outer round over no samples has no update: it needs at least one "
                   "pseudo-gradient with a sample count");
      return FALSE;
    }
  inv = (float) (1.0 / (double) samples);

  /* pass 1: s = u (+ r) into @update, refused when not finite */
  for (gsize i = 0; i < n; i++)
    {
      float delta = sum[i] * inv;
      float t = muf * momentum[i] + delta;
      float u = lrf * (delta + muf * t);

      update[i] = carry ? u + residual[i] : u;
    }
  bad = rlx_outer_update_check (update, n);
  if (bad >= 0)
    {
      if (bad_index != NULL)
        *bad_index = (gsize) bad;
      g_set_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_NONFINITE,
                   "the outer update is %s at element %" G_GSSIZE_FORMAT ": the round's "
                   "pseudo-gradients summed past f32's range; nothing was applied — lower "
                   "the inner or the outer learning rate", isnan (update[bad]) ? "NaN"
                   : update[bad] > 0 ? "+Inf" : "-Inf", bad);
      return FALSE;
    }

  /* pass 2: the codes, d = what they decode to, r = s − d */
  if (carry)
    memcpy (residual, update, n * sizeof (float));
  scale = rlx_wire_scale_for (update, n, p);
  if (codes != NULL)
    {
      rlx_wire_quantize (update, n, p, scale, codes);
      rlx_wire_dequantize (codes, n, p, scale, update);
    }
  else
    rlx_wire_round_trip (update, update, n, p);
  if (carry)
    for (gsize i = 0; i < n; i++)
      {
        float r = residual[i] - update[i];
        residual[i] = isfinite (r) ? r : 0.0f;
      }
  *scale_out = scale;
  return TRUE;
}

/* in the exact mode, whatever the calling thread's (rlx-fp-mode.h) */
gboolean
rlx_outer_make_update (const float *sum, guint64 samples, const float *momentum,
                       float *residual, gsize n, double lr, double mu, RlxPrecision p,
                       void *codes, double *scale_out, float *update, gsize *bad_index,
                       GError **error)
{
  RlxFpScope fp = rlx_fp_scope_begin_exact ();
  gboolean ret;

  ret = outer_make_update_exact (sum, samples, momentum, residual, n, lr, mu, p, codes,
                                 scale_out, update, bad_index, error);
  rlx_fp_scope_end (fp);
  return ret;
}

static void
outer_apply_exact (float *outer, float *momentum, const float *update, gsize n, double lr,
                 double mu)
{
  float muf = (float) mu;
  float ilr = (float) (1.0 / lr);
  float i1m = (float) (1.0 / (1.0 + mu));

  g_return_if_fail ((outer != NULL && momentum != NULL && update != NULL) || n == 0);
  g_return_if_fail (lr > 0.0);

  for (gsize i = 0; i < n; i++)
    {
      float d = update[i];

      outer[i] = outer[i] - d;
      momentum[i] = (muf * momentum[i] + d * ilr) * i1m;
    }
}

/* in the exact mode, whatever the calling thread's (rlx-fp-mode.h) */
void
rlx_outer_apply (float *outer, float *momentum, const float *update, gsize n, double lr,
                 double mu)
{
  RlxFpScope fp = rlx_fp_scope_begin_exact ();

  outer_apply_exact (outer, momentum, update, n, lr, mu);
  rlx_fp_scope_end (fp);
}

static void
outer_apply_momentum_exact (float *momentum, const float *update, gsize n, double lr, double mu)
{
  float muf = (float) mu;
  float ilr = (float) (1.0 / lr);
  float i1m = (float) (1.0 / (1.0 + mu));

  g_return_if_fail ((momentum != NULL && update != NULL) || n == 0);
  g_return_if_fail (lr > 0.0);

  for (gsize i = 0; i < n; i++)
    momentum[i] = (muf * momentum[i] + update[i] * ilr) * i1m;
}

/* in the exact mode, whatever the calling thread's (rlx-fp-mode.h) */
void
rlx_outer_apply_momentum (float *momentum, const float *update, gsize n, double lr, double mu)
{
  RlxFpScope fp = rlx_fp_scope_begin_exact ();

  outer_apply_momentum_exact (momentum, update, n, lr, mu);
  rlx_fp_scope_end (fp);
}

guint64
rlx_outer_hash (guint64 params_hash, guint64 momentum_hash, gsize n)
{
  guint64 h[2] = { GUINT64_TO_LE (params_hash), GUINT64_TO_LE (momentum_hash) };

  return rlx_xxh64 (h, sizeof h, n);
}

/* ── state ──────────────────────────────────────────────────────────────── */

static gboolean
check_n (gsize n, GError **error)
{
  if (n == 0 || n > RLX_OUTER_MAX_PARAMS)
    {
      g_set_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_INVALID,
                   "an outer state of %" G_GSIZE_FORMAT " elements is not possible: a "
                   "model has 1 to %" G_GSIZE_FORMAT, n, RLX_OUTER_MAX_PARAMS);
      return FALSE;
    }
  return TRUE;
}

static RlxOuterState *
state_alloc (gsize n, double lr, double mu, RlxPrecision p, guint h)
{
  RlxOuterState *s = g_new0 (RlxOuterState, 1);

  s->n = n;
  s->lr = lr;
  s->momentum = mu;
  s->precision = p;
  s->h = h;
  s->params = g_new (float, n);
  s->mom = g_new0 (float, n);
  return s;
}

RlxOuterState *
rlx_outer_state_new (const float *params, gsize n, double lr, double mu, RlxPrecision p,
                     guint h, GError **error)
{
  RlxOuterState *s;

  g_return_val_if_fail (params != NULL || n == 0, NULL);
  g_return_val_if_fail ((guint) p < RLX_PRECISION_COUNT, NULL);

  if (!check_n (n, error) || !rlx_outer_check_settings (lr, mu, error))
    return NULL;
  if (h > RLX_OUTER_MAX_H)
    {
      g_set_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_INVALID,
                   "%u inner steps per outer round is over the limit of %u: give a "
                   "smaller H", h, RLX_OUTER_MAX_H);
      return NULL;
    }
  s = state_alloc (n, lr, mu, p, h);
  memcpy (s->params, params, n * sizeof (float));
  return s;
}

RlxOuterState *
rlx_outer_state_copy (const RlxOuterState *state)
{
  RlxOuterState *s;

  g_return_val_if_fail (state != NULL, NULL);

  s = g_memdup2 (state, sizeof *state);
  s->params = g_memdup2 (state->params, state->n * sizeof (float));
  s->mom = g_memdup2 (state->mom, state->n * sizeof (float));
  s->residual = state->residual ? g_memdup2 (state->residual, state->n * sizeof (float)) : NULL;
  return s;
}

void
rlx_outer_state_free (RlxOuterState *state)
{
  if (state == NULL)
    return;
  g_free (state->params);
  g_free (state->mom);
  g_free (state->residual);
  g_free (state);
}

gboolean
rlx_outer_state_commit (RlxOuterState *state, const float *update, guint64 samples,
                        GError **error)
{
  gssize bad;

  g_return_val_if_fail (state != NULL && update != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  bad = rlx_outer_update_check (update, state->n);
  if (bad >= 0)
    {
      g_set_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_NONFINITE,
                   "outer round %" G_GUINT64_FORMAT "'s update is not finite at element %"
                   G_GSSIZE_FORMAT "; nothing was applied — the leader's frame is broken: "
                   "resynchronise from a snapshot", state->round + 1, bad);
      return FALSE;
    }
  rlx_outer_apply (state->params, state->mom, update, state->n, state->lr, state->momentum);
  state->round++;
  state->samples += samples;
  return TRUE;
}

gboolean
rlx_outer_state_commit_codes (RlxOuterState *state, const void *codes, RlxPrecision p,
                              double scale, float *scratch, guint64 samples, GError **error)
{
  g_return_val_if_fail (state != NULL && codes != NULL && scratch != NULL, FALSE);
  g_return_val_if_fail ((guint) p < RLX_PRECISION_COUNT, FALSE);

  if (!isfinite (scale) || scale <= 0.0)
    {
      g_set_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_INVALID,
                   "outer round %" G_GUINT64_FORMAT "'s update has scale %g; a frame's scale "
                   "is finite and positive", state->round + 1, scale);
      return FALSE;
    }
  rlx_wire_dequantize (codes, state->n, p, scale, scratch);
  return rlx_outer_state_commit (state, scratch, samples, error);
}

gboolean
rlx_outer_state_lead (RlxOuterState *state, const float *sum, guint64 samples, gboolean feedback,
                      void *codes, double *scale_out, float *update, GError **error)
{
  g_return_val_if_fail (state != NULL && sum != NULL && update != NULL, FALSE);

  if (feedback && state->residual == NULL && state->precision != RLX_PRECISION_F32)
    state->residual = g_new0 (float, state->n);
  if (!rlx_outer_make_update (sum, samples, state->mom, feedback ? state->residual : NULL,
                              state->n, state->lr, state->momentum, state->precision, codes,
                              scale_out, update, NULL, error))
    return FALSE;
  return rlx_outer_state_commit (state, update, samples, error);
}

guint64
rlx_outer_state_hash (const RlxOuterState *state)
{
  g_return_val_if_fail (state != NULL, 0);

  return rlx_outer_hash (rlx_params_hash (state->params, state->n),
                         rlx_params_hash (state->mom, state->n), state->n);
}

/* ── serialised form ────────────────────────────────────────────────────── */

#define FLAG_RESIDUAL 1u

static void
put32 (guint8 *p, guint32 v)
{
  v = GUINT32_TO_LE (v);
  memcpy (p, &v, 4);
}

static void
put64 (guint8 *p, guint64 v)
{
  v = GUINT64_TO_LE (v);
  memcpy (p, &v, 8);
}

static void
putf64 (guint8 *p, double d)
{
  guint64 v;

  memcpy (&v, &d, 8);
  put64 (p, v);
}

static guint32
get32 (const guint8 *p)
{
  guint32 v;

  memcpy (&v, p, 4);
  return GUINT32_FROM_LE (v);
}

static guint64
get64 (const guint8 *p)
{
  guint64 v;

  memcpy (&v, p, 8);
  return GUINT64_FROM_LE (v);
}

static double
getf64 (const guint8 *p)
{
  guint64 v = get64 (p);
  double d;

  memcpy (&d, &v, 8);
  return d;
}

gsize
rlx_outer_state_size (const RlxOuterState *state)
{
  g_return_val_if_fail (state != NULL, 0);

  return RLX_OUTER_STATE_HEADER + state->n * 4 * (state->residual ? 3 : 2);
}

GBytes *
rlx_outer_state_write (const RlxOuterState *state, gboolean with_residual)
{
  gboolean res;
  gsize len, a;
  guint8 *buf;

  g_return_val_if_fail (state != NULL, NULL);

  res = with_residual && state->residual != NULL;
  a = state->n * 4;
  len = RLX_OUTER_STATE_HEADER + a * (res ? 3 : 2);
  buf = g_malloc (len);
  memcpy (buf, RLX_OUTER_STATE_MAGIC, 8);
  put32 (buf + 8, RLX_OUTER_STATE_VERSION);
  put32 (buf + 12, res ? FLAG_RESIDUAL : 0);
  put64 (buf + 16, state->n);
  put64 (buf + 24, state->round);
  put64 (buf + 32, state->samples);
  put32 (buf + 40, state->h);
  put32 (buf + 44, (guint32) state->precision);
  putf64 (buf + 48, state->lr);
  putf64 (buf + 56, state->momentum);
  put64 (buf + 64, rlx_params_hash (state->params, state->n));
  put64 (buf + 72, rlx_params_hash (state->mom, state->n));
  memcpy (buf + RLX_OUTER_STATE_HEADER, state->params, a);
  memcpy (buf + RLX_OUTER_STATE_HEADER + a, state->mom, a);
  if (res)
    memcpy (buf + RLX_OUTER_STATE_HEADER + 2 * a, state->residual, a);
  return g_bytes_new_take (buf, len);
}

static gboolean
corrupt (GError **error, gsize offset, const char *what)
{
  g_set_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_CORRUPT,
               "the outer state is broken at byte %" G_GSIZE_FORMAT ": %s; take a fresh "
               "snapshot from the cohort or resume from another checkpoint", offset, what);
  return FALSE;
}

/* The first non-finite value of an array, named in @error. */
static gboolean
check_finite (const float *a, gsize n, gsize offset, const char *name, GError **error)
{
  gssize bad = rlx_outer_update_check (a, n);
  g_autofree char *what = NULL;

  if (bad < 0)
    return TRUE;
  what = g_strdup_printf ("%s holds a NaN or an infinity at element %" G_GSSIZE_FORMAT, name, bad);
  return corrupt (error, offset + (gsize) bad * 4, what);
}

static gboolean
check_header (const guint8 *data, gsize len, gsize expected_n, gsize *n_out,
              gboolean *res_out, GError **error)
{
  guint32 version, flags, prec, h;
  guint64 n;
  gsize want;
  g_autoptr(GError) local = NULL;

  if (len < RLX_OUTER_STATE_HEADER)
    {
      g_set_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_TRUNCATED,
                   "the outer state is %" G_GSIZE_FORMAT " bytes, shorter than its %"
                   G_GSIZE_FORMAT "-byte header: it was cut off; take a fresh snapshot",
                   len, RLX_OUTER_STATE_HEADER);
      return FALSE;
    }
  if (memcmp (data, RLX_OUTER_STATE_MAGIC, 8) != 0)
    return corrupt (error, 0, "it does not start with \"" RLX_OUTER_STATE_MAGIC "\"");
  version = get32 (data + 8);
  if (version == 0)
    return corrupt (error, 8, "version 0 does not exist");
  if (version > RLX_OUTER_STATE_VERSION)
    {
      g_set_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_VERSION,
                   "the outer state has layout version %u; this build reads version %u: "
                   "update rlx-cluster on this machine", version, RLX_OUTER_STATE_VERSION);
      return FALSE;
    }
  flags = get32 (data + 12);
  if (flags & ~FLAG_RESIDUAL)
    return corrupt (error, 12, "unknown flags are set");
  n = get64 (data + 16);
  if (n == 0 || n > RLX_OUTER_MAX_PARAMS)
    return corrupt (error, 16, "its element count is 0 or over the limit");
  if (expected_n != 0 && n != expected_n)
    {
      g_set_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_MISMATCH,
                   "the outer state holds %" G_GUINT64_FORMAT " elements, the model has %"
                   G_GSIZE_FORMAT ": it belongs to another model", n, expected_n);
      return FALSE;
    }
  h = get32 (data + 40);
  if (h > RLX_OUTER_MAX_H)
    return corrupt (error, 40, "its H is over the limit");
  prec = get32 (data + 44);
  if (prec >= RLX_PRECISION_COUNT)
    return corrupt (error, 44, "its precision is not one of f32, f16, f8e4m3, f8e5m2");
  if (!rlx_outer_check_settings (getf64 (data + 48), RLX_OUTER_DEFAULT_MOMENTUM, &local))
    return corrupt (error, 48, local->message);
  if (!rlx_outer_check_settings (RLX_OUTER_DEFAULT_LR, getf64 (data + 56), &local))
    return corrupt (error, 56, local->message);
  /* n ≤ 64 Mi, so 12·n cannot overflow */
  want = RLX_OUTER_STATE_HEADER + (gsize) n * 4 * ((flags & FLAG_RESIDUAL) ? 3 : 2);
  if (len < want)
    {
      g_set_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_TRUNCATED,
                   "the outer state is %" G_GSIZE_FORMAT " bytes, its header says %"
                   G_GSIZE_FORMAT ": it was cut off; take a fresh snapshot", len, want);
      return FALSE;
    }
  if (len > want)
    return corrupt (error, want, "bytes follow the last array");
  *n_out = (gsize) n;
  *res_out = (flags & FLAG_RESIDUAL) != 0;
  return TRUE;
}

RlxOuterState *
rlx_outer_state_parse (const guint8 *data, gsize len, gsize expected_n, GError **error)
{
  g_autoptr(RlxOuterState) s = NULL;
  gboolean res = FALSE;
  gsize n = 0, a;
  const guint8 *arrays;

  g_return_val_if_fail (data != NULL || len == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_header (data, len, expected_n, &n, &res, error))
    return NULL;
  a = n * 4;
  arrays = data + RLX_OUTER_STATE_HEADER;
  s = state_alloc (n, getf64 (data + 48), getf64 (data + 56), (RlxPrecision) get32 (data + 44),
                   get32 (data + 40));
  s->round = get64 (data + 24);
  s->samples = get64 (data + 32);
  memcpy (s->params, arrays, a);
  memcpy (s->mom, arrays + a, a);
  if (res)
    s->residual = g_memdup2 (arrays + 2 * a, a);
  if (!check_finite (s->params, n, RLX_OUTER_STATE_HEADER, "the outer parameters", error)
      || !check_finite (s->mom, n, RLX_OUTER_STATE_HEADER + a, "the outer momentum", error)
      || (res && !check_finite (s->residual, n, RLX_OUTER_STATE_HEADER + 2 * a,
                                "the residual", error)))
    return NULL;
  if (rlx_params_hash (s->params, n) != get64 (data + 64))
    {
      corrupt (error, 64, "the outer parameters do not match their hash");
      return NULL;
    }
  if (rlx_params_hash (s->mom, n) != get64 (data + 72))
    {
      corrupt (error, 72, "the outer momentum does not match its hash");
      return NULL;
    }
  return g_steal_pointer (&s);
}
