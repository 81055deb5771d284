/* test-outer.c — the outer mode's arithmetic and state (core/cohort/rlx-outer.h):
 * Nesterov's numbers, replicas that agree bit for bit through real wire
 * frames at every precision, error feedback, refusals, and the serialised
 * state's layout and every way it can be broken; and the engine's measure of
 * one inner step (what `--sync auto` weighs the link against) leaves out
 * the work run between inner steps. */
#include "rlx-config.h"

#include <math.h>
#include <string.h>

#include "core/cohort/rlx-outer.h"
#include "core/cohort/rlx-outer-engine.h"
#include "core/rlx-backend.h"
#include "core/rlx-kernels.h"
#include "core/vision/rlx-dataset.h"
#include "core/vision/rlx-model.h"

#define N 3000

/* Deterministic values in [-a, a). */
static void
fill (float *x, gsize n, guint64 seed, float a)
{
  GRand *r = g_rand_new_with_seed ((guint32) seed);

  for (gsize i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (r, -a, a);
  g_rand_free (r);
}

static void
test_settings (void)
{
  static const struct { double lr, mu; gboolean ok; } cases[] = {
    { 0.7, 0.9, TRUE }, { 1.0, 0.0, TRUE }, { 0.3, 0.99, TRUE },
    { 0.0, 0.9, FALSE }, { -0.7, 0.9, FALSE }, { NAN, 0.9, FALSE }, { INFINITY, 0.9, FALSE },
    { 11.0, 0.9, FALSE }, { 0.7, 1.0, FALSE }, { 0.7, -0.1, FALSE }, { 0.7, NAN, FALSE },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      gboolean ok = rlx_outer_check_settings (cases[i].lr, cases[i].mu, &error);

      g_assert_cmpint (ok, ==, cases[i].ok);
      if (!ok)
        {
          g_assert_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_INVALID);
          g_assert_nonnull (strstr (error->message, "give a number"));
        }
    }
}

/* Pseudo-gradients and their sample-weighted sum, bit for bit as the step
 * mode's accumulate of f32 buckets. */
static void
test_average (void)
{
  g_autofree float *outer = g_new (float, N), *local = g_new (float, N);
  g_autofree float *d1 = g_new (float, N), *d2 = g_new (float, N);
  g_autofree float *sum = g_new (float, N), *ref = g_new (float, N);

  fill (outer, N, 1, 1.0f);
  fill (local, N, 2, 1.0f);
  rlx_outer_pseudo_gradient (outer, local, d1, N);
  for (gsize i = 0; i < N; i++)
    g_assert_cmpfloat (d1[i], ==, outer[i] - local[i]);
  fill (d2, N, 3, 0.5f);

  rlx_outer_accumulate (sum, d1, 256, TRUE, N);
  rlx_outer_accumulate (sum, d2, 100, FALSE, N);
  g_assert_true (rlx_kernels_ref_accumulate (ref, NULL, d1, N, RLX_PRECISION_F32, 1.0,
                                             256.0f, NULL));
  g_assert_true (rlx_kernels_ref_accumulate (ref, ref, d2, N, RLX_PRECISION_F32, 1.0,
                                             100.0f, NULL));
  g_assert_cmpmem (sum, N * 4, ref, N * 4);
}

/* At f32 (no quantisation) the outer steps are Nesterov's, as
 * torch.optim.SGD (nesterov=True) takes them: m = μm + Δ, θ −= η(Δ + μm),
 * here in double beside the f32 state. */
static void
test_nesterov (void)
{
  const double lr = 0.7, mu = 0.9;
  g_autofree float *params = g_new (float, N), *sum = g_new (float, N);
  g_autofree float *update = g_new (float, N);
  g_autofree double *th = g_new (double, N), *m = g_new0 (double, N);
  g_autoptr(RlxOuterState) s = NULL;
  g_autoptr(GError) error = NULL;
  double scale, worst = 0.0;

  fill (params, N, 4, 1.0f);
  s = rlx_outer_state_new (params, N, lr, mu, RLX_PRECISION_F32, 50, &error);
  g_assert_no_error (error);
  for (gsize i = 0; i < N; i++)
    th[i] = params[i];
  for (guint r = 0; r < 30; r++)
    {
      guint64 samples = 512;

      fill (sum, N, 100 + r, 0.05f * samples);
      g_assert_true (rlx_outer_state_lead (s, sum, samples, TRUE, NULL, &scale, update, &error));
      g_assert_no_error (error);
      g_assert_cmpfloat (scale, ==, 1.0);
      g_assert_null (s->residual);            /* f32: no error feedback */
      for (gsize i = 0; i < N; i++)
        {
          double delta = (double) sum[i] / (double) samples;

          m[i] = mu * m[i] + delta;
          th[i] -= lr * (delta + mu * m[i]);
        }
    }
  for (gsize i = 0; i < N; i++)
    {
      worst = MAX (worst, fabs (th[i] - s->params[i]));
      worst = MAX (worst, fabs (m[i] - s->mom[i]) * lr);
    }
  g_assert_cmpuint (s->round, ==, 30);
  g_assert_cmpuint (s->samples, ==, 30 * 512);
  g_assert_cmpfloat (worst, <, 1e-4);
}

/* The leader and two members, through real frames: one member decodes the
 * frame and commits the values, the other commits the codes. */
static void
replicas_agree (RlxPrecision p, gboolean feedback)
{
  g_autofree float *params = g_new (float, N), *sum = g_new (float, N);
  g_autofree float *update = g_new (float, N), *got = g_new (float, N);
  g_autofree float *scratch = g_new (float, N);
  g_autofree guint8 *codes = g_malloc (N * rlx_precision_element_size (p));
  g_autoptr(RlxOuterState) lead = NULL, a = NULL, b = NULL;
  g_autoptr(GError) error = NULL;

  fill (params, N, 5, 1.0f);
  lead = rlx_outer_state_new (params, N, RLX_OUTER_DEFAULT_LR, RLX_OUTER_DEFAULT_MOMENTUM, p,
                              20, &error);
  g_assert_no_error (error);
  a = rlx_outer_state_copy (lead);
  b = rlx_outer_state_copy (lead);
  for (guint r = 0; r < 25; r++)
    {
      gsize frame_len = 0, off = 0;
      double scale = 0;
      guint8 *buf;
      g_autoptr(GBytes) frame = NULL;
      RlxWireInfo info;

      fill (sum, N, 200 + r, 0.02f * 768 * (1 + r % 3));
      g_assert_true (rlx_outer_state_lead (lead, sum, 768, feedback, codes, &scale, update,
                                           &error));
      g_assert_no_error (error);
      g_assert_cmpint (lead->residual != NULL, ==, feedback && p != RLX_PRECISION_F32);

      buf = rlx_wire_frame_alloc (NULL, "u", N, p, scale, &frame_len, &off, &error);
      g_assert_no_error (error);
      memcpy (buf + off, codes, N * rlx_precision_element_size (p));
      frame = g_bytes_new_take (buf, frame_len);
      g_assert_true (rlx_wire_decode_into (frame, NULL, &info, NULL, got, N, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (got, N * 4, update, N * 4);   /* d is what members decode */

      g_assert_true (rlx_outer_state_commit (a, got, 768, &error));
      g_assert_true (rlx_outer_state_commit_codes (b, codes, p, scale, scratch, 768, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (a->params, N * 4, lead->params, N * 4);
      g_assert_cmpmem (a->mom, N * 4, lead->mom, N * 4);
      g_assert_cmpmem (b->params, N * 4, lead->params, N * 4);
      g_assert_cmpmem (b->mom, N * 4, lead->mom, N * 4);
      g_assert_cmpuint (rlx_outer_state_hash (a), ==, rlx_outer_state_hash (lead));
      g_assert_cmpuint (rlx_outer_state_hash (b), ==, rlx_outer_state_hash (lead));
    }
  g_assert_cmpuint (a->round, ==, 25);
}

static void
test_replicas (void)
{
  for (guint p = 0; p < RLX_PRECISION_COUNT; p++)
    {
      replicas_agree ((RlxPrecision) p, TRUE);
      replicas_agree ((RlxPrecision) p, FALSE);
    }
}

/* θ after ROUNDS rounds of the same pseudo-gradients at @p, against f32's:
 * the largest difference. */
static double
drift (RlxPrecision p, gboolean feedback)
{
  g_autofree float *params = g_new0 (float, N), *sum = g_new (float, N);
  g_autofree float *update = g_new (float, N);
  g_autoptr(RlxOuterState) s = NULL, ref = NULL;
  double scale, worst = 0.0;

  s = rlx_outer_state_new (params, N, 0.7, 0.9, p, 10, NULL);
  ref = rlx_outer_state_new (params, N, 0.7, 0.9, RLX_PRECISION_F32, 10, NULL);
  for (guint r = 0; r < 40; r++)
    {
      fill (sum, N, 300 + r, 1.0f);
      sum[0] = 50.0f;          /* one large value: the small ones lose bits at f8 */
      g_assert_true (rlx_outer_state_lead (s, sum, 1, feedback, NULL, &scale, update, NULL));
      g_assert_true (rlx_outer_state_lead (ref, sum, 1, feedback, NULL, &scale, update, NULL));
    }
  for (gsize i = 1; i < N; i++)
    worst = MAX (worst, fabs ((double) s->params[i] - ref->params[i]));
  return worst;
}

/* Error feedback keeps θ near the unquantised run where plain f8 drifts. */
static void
test_feedback (void)
{
  for (RlxPrecision p = RLX_PRECISION_F8E4M3; p <= RLX_PRECISION_F8E5M2; p++)
    {
      double with = drift (p, TRUE), without = drift (p, FALSE);

      g_test_message ("%s: drift %.4g with error feedback, %.4g without",
                      rlx_precision_to_string (p), with, without);
      g_assert_cmpfloat (with * 3.0, <, without);
    }
}

static void
test_refuse (void)
{
  g_autofree float *params = g_new0 (float, N), *sum = g_new (float, N);
  g_autofree float *update = g_new (float, N), *res = NULL, *th = NULL, *mom = NULL;
  g_autoptr(RlxOuterState) s = NULL;
  g_autoptr(GError) error = NULL;
  gsize bad = 0;
  double scale;

  s = rlx_outer_state_new (params, N, 0.7, 0.9, RLX_PRECISION_F8E4M3, 10, &error);
  fill (sum, N, 7, 1.0f);
  g_assert_true (rlx_outer_state_lead (s, sum, 1, TRUE, NULL, &scale, update, &error));
  res = g_memdup2 (s->residual, N * 4);
  th = g_memdup2 (s->params, N * 4);
  mom = g_memdup2 (s->mom, N * 4);

  sum[17] = 3e38f;     /* u = 0.7·1.9·3e38 overflows f32 */
  g_assert_false (rlx_outer_make_update (sum, 1, s->mom, s->residual, N, 0.7, 0.9,
                                         RLX_PRECISION_F8E4M3, NULL, &scale, update, &bad,
                                         &error));
  g_assert_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_NONFINITE);
  g_assert_nonnull (strstr (error->message, "element 17"));
  g_assert_cmpuint (bad, ==, 17);
  g_assert_cmpmem (s->residual, N * 4, res, N * 4);
  g_clear_error (&error);
  g_assert_false (rlx_outer_state_lead (s, sum, 1, TRUE, NULL, &scale, update, &error));
  g_assert_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_NONFINITE);
  g_clear_error (&error);

  fill (update, N, 8, 0.1f);
  update[5] = NAN;
  g_assert_false (rlx_outer_state_commit (s, update, 1, &error));
  g_assert_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_NONFINITE);
  g_clear_error (&error);
  g_assert_false (rlx_outer_make_update (sum, 0, s->mom, NULL, N, 0.7, 0.9,
                                         RLX_PRECISION_F32, NULL, &scale, update, NULL, &error));
  g_assert_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_INVALID);
  g_clear_error (&error);

  g_assert_cmpuint (s->round, ==, 1);
  g_assert_cmpmem (s->params, N * 4, th, N * 4);
  g_assert_cmpmem (s->mom, N * 4, mom, N * 4);
  g_assert_cmpmem (s->residual, N * 4, res, N * 4);

  g_assert_null (rlx_outer_state_new (params, 0, 0.7, 0.9, RLX_PRECISION_F32, 1, &error));
  g_assert_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_null (rlx_outer_state_new (params, N, 0.7, 0.9, RLX_PRECISION_F32,
                                      RLX_OUTER_MAX_H + 1, &error));
  g_assert_error (error, RLX_OUTER_ERROR, RLX_OUTER_ERROR_INVALID);
}

/* A state two rounds in, with a residual. */
static RlxOuterState *
sample_state (gsize n)
{
  g_autofree float *params = g_new (float, n), *sum = g_new (float, n);
  g_autofree float *update = g_new (float, n);
  RlxOuterState *s;
  double scale;

  fill (params, n, 9, 1.0f);
  s = rlx_outer_state_new (params, n, 0.5, 0.9, RLX_PRECISION_F16, 40, NULL);
  for (guint r = 0; r < 2; r++)
    {
      fill (sum, n, 10 + r, 100.0f);
      g_assert_true (rlx_outer_state_lead (s, sum, 300, TRUE, NULL, &scale, update, NULL));
    }
  return s;
}

static void
test_serialise (void)
{
  g_autoptr(RlxOuterState) s = sample_state (N);

  for (guint with = 0; with < 2; with++)
    {
      g_autoptr(GBytes) bytes = rlx_outer_state_write (s, with);
      g_autoptr(GBytes) again = NULL;
      g_autoptr(RlxOuterState) t = NULL;
      g_autoptr(GError) error = NULL;
      gsize len;
      const guint8 *d = g_bytes_get_data (bytes, &len);

      g_assert_cmpuint (len, ==, RLX_OUTER_STATE_HEADER + N * 4 * (with ? 3 : 2));
      g_assert_cmpmem (d, 8, "RLXOUTER", 8);
      t = rlx_outer_state_parse (d, len, N, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (t->n, ==, N);
      g_assert_cmpuint (t->round, ==, 2);
      g_assert_cmpuint (t->samples, ==, 600);
      g_assert_cmpuint (t->h, ==, 40);
      g_assert_cmpint (t->precision, ==, RLX_PRECISION_F16);
      g_assert_cmpfloat (t->lr, ==, 0.5);
      g_assert_cmpfloat (t->momentum, ==, 0.9);
      g_assert_cmpmem (t->params, N * 4, s->params, N * 4);
      g_assert_cmpmem (t->mom, N * 4, s->mom, N * 4);
      g_assert_cmpuint (rlx_outer_state_hash (t), ==, rlx_outer_state_hash (s));
      if (with)
        g_assert_cmpmem (t->residual, N * 4, s->residual, N * 4);
      else
        g_assert_null (t->residual);
      g_assert_cmpuint (rlx_outer_state_size (t), ==, len);
      again = rlx_outer_state_write (t, TRUE);
      g_assert_true (g_bytes_equal (again, bytes));
      g_clear_pointer (&t, rlx_outer_state_free);
      t = rlx_outer_state_parse (d, len, 0, &error);      /* any size */
      g_assert_no_error (error);
    }
}

typedef void (*Breaker) (guint8 *d, gsize *len);

static void put32 (guint8 *p, guint32 v) { memcpy (p, &v, 4); }
static void put64 (guint8 *p, guint64 v) { memcpy (p, &v, 8); }
static void b_short_header (guint8 *d, gsize *len) { (void) d; *len = 79; }
static void b_empty (guint8 *d, gsize *len) { (void) d; *len = 0; }
static void b_magic (guint8 *d, gsize *len) { (void) len; d[3] = 'x'; }
static void b_version0 (guint8 *d, gsize *len) { (void) len; put32 (d + 8, 0); }
static void b_version2 (guint8 *d, gsize *len) { (void) len; put32 (d + 8, 2); }
static void b_flags (guint8 *d, gsize *len) { (void) len; put32 (d + 12, 3); }
static void b_n0 (guint8 *d, gsize *len) { (void) len; put64 (d + 16, 0); }
static void b_nhuge (guint8 *d, gsize *len) { (void) len; put64 (d + 16, G_MAXUINT64 / 2); }
static void b_nother (guint8 *d, gsize *len) { (void) len; put64 (d + 16, N - 1); }
static void b_h (guint8 *d, gsize *len) { (void) len; put32 (d + 40, RLX_OUTER_MAX_H + 1); }
static void b_prec (guint8 *d, gsize *len) { (void) len; put32 (d + 44, 4); }
static void b_lr (guint8 *d, gsize *len) { double v = NAN; (void) len; memcpy (d + 48, &v, 8); }
static void b_mu (guint8 *d, gsize *len) { double v = 1.0; (void) len; memcpy (d + 56, &v, 8); }
static void b_cut (guint8 *d, gsize *len) { (void) d; *len -= 1; }
static void b_trail (guint8 *d, gsize *len) { d[*len] = 0; *len += 1; }
static void b_param (guint8 *d, gsize *len) { (void) len; d[RLX_OUTER_STATE_HEADER + 40] ^= 1; }
static void b_mom (guint8 *d, gsize *len) { (void) len; d[RLX_OUTER_STATE_HEADER + N * 4 + 8] ^= 1; }
static void
b_nan (guint8 *d, gsize *len)
{
  float v = NAN;
  (void) len;
  memcpy (d + RLX_OUTER_STATE_HEADER + N * 8 + 12, &v, 4);   /* the residual */
}

static void
test_parse_errors (void)
{
  static const struct { const char *name; Breaker brk; int code; const char *says; } cases[] = {
    { "empty", b_empty, RLX_OUTER_ERROR_TRUNCATED, "header" },
    { "short header", b_short_header, RLX_OUTER_ERROR_TRUNCATED, "header" },
    { "magic", b_magic, RLX_OUTER_ERROR_CORRUPT, "RLXOUTER" },
    { "version 0", b_version0, RLX_OUTER_ERROR_CORRUPT, "version 0" },
    { "version 2", b_version2, RLX_OUTER_ERROR_VERSION, "update rlx-cluster" },
    { "flags", b_flags, RLX_OUTER_ERROR_CORRUPT, "flags" },
    { "n 0", b_n0, RLX_OUTER_ERROR_CORRUPT, "element count" },
    { "n huge", b_nhuge, RLX_OUTER_ERROR_CORRUPT, "element count" },
    { "other model", b_nother, RLX_OUTER_ERROR_MISMATCH, "another model" },
    { "h", b_h, RLX_OUTER_ERROR_CORRUPT, "H" },
    { "precision", b_prec, RLX_OUTER_ERROR_CORRUPT, "precision" },
    { "lr", b_lr, RLX_OUTER_ERROR_CORRUPT, "byte 48: outer learning rate" },
    { "momentum", b_mu, RLX_OUTER_ERROR_CORRUPT, "byte 56: outer momentum" },
    { "cut", b_cut, RLX_OUTER_ERROR_TRUNCATED, "cut off" },
    { "trailing", b_trail, RLX_OUTER_ERROR_CORRUPT, "follow" },
    { "param bit", b_param, RLX_OUTER_ERROR_CORRUPT, "parameters do not match" },
    { "momentum bit", b_mom, RLX_OUTER_ERROR_CORRUPT, "momentum does not match" },
    { "residual NaN", b_nan, RLX_OUTER_ERROR_CORRUPT, "residual holds a NaN or an infinity at element 3" },
  };
  g_autoptr(RlxOuterState) s = sample_state (N);
  g_autoptr(GBytes) bytes = rlx_outer_state_write (s, TRUE);

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      gsize len = g_bytes_get_size (bytes);
      g_autofree guint8 *d = g_malloc (len + 1);
      g_autoptr(GError) error = NULL;

      memcpy (d, g_bytes_get_data (bytes, NULL), len);
      cases[i].brk (d, &len);
      g_assert_null (rlx_outer_state_parse (len ? d : NULL, len, N, &error));
      g_test_message ("%s: %s", cases[i].name, error ? error->message : "(no error)");
      g_assert_error (error, RLX_OUTER_ERROR, cases[i].code);
      g_assert_nonnull (strstr (error->message, cases[i].says));
    }
}

/* The leader's sums and finish run between its inner steps (@between):
 * here a stand-in that takes BETWEEN_US. */
#define BETWEEN_US (100 * 1000)

static void
slow_between (gpointer data)
{
  (*(guint *) data)++;
  g_usleep (BETWEEN_US);
}

/* A real round (mnist-mlp on the CPU, 4 inner steps of 16 samples): the
 * inner step it reports is the steps' own compute, not the 3 × 100 ms run
 * between them (counted in, it would read ≥ 75 ms a step; mnist-mlp's
 * step at 16 samples takes well under a millisecond alone). */
static void
test_inner_time (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxDataset) dataset = rlx_dataset_open ("synthetic", 0, &error);
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autoptr(RlxBackend) backend = NULL;
  g_autofree float *params = g_new (float, model->n_params);
  RlxOuterEngine *e = rlx_outer_engine_new (model->n_params);
  RlxOuterSettings s = { .h = 4, .lr = 0.7, .momentum = 0.9, .inner_lr = 0.05, .lag = 0 };
  guint32 idx[64];
  guint calls = 0;
  gint64 t0;
  float loss = 0;

  g_assert_no_error (error);
  backend = rlx_backend_resolve ("cpu", model, dataset, 64, &error);
  g_assert_no_error (error);
  rlx_model_init_params (model, 1, params);
  g_assert_true (rlx_backend_load_params (backend, params, &error));
  for (guint i = 0; i < G_N_ELEMENTS (idx); i++)
    idx[i] = i;
  g_assert_cmpfloat (rlx_outer_engine_inner_us (e), ==, 0.0);
  t0 = g_get_monotonic_time ();
  g_assert_true (rlx_outer_engine_local (e, backend, 1, idx, G_N_ELEMENTS (idx), &s,
                                         slow_between, &calls, &loss, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (calls, ==, 3);
  g_assert_cmpint (g_get_monotonic_time () - t0, >=, 3 * BETWEEN_US);
  g_test_message ("one inner step: %.0f us", rlx_outer_engine_inner_us (e));
  g_assert_cmpfloat (rlx_outer_engine_inner_us (e), >, 0.0);
  g_assert_cmpfloat (rlx_outer_engine_inner_us (e), <, BETWEEN_US / 2);
  rlx_outer_engine_free (e);
}

/* An outer round's inner lr grows with √ of its ranks, up to
 * RLX_OUTER_LR_SCALE_RANKS of them; 0 or 1 rank: the lr itself. */
static void
test_inner_lr (void)
{
  g_assert_cmpfloat (rlx_outer_inner_lr (0.05, 0), ==, 0.05);
  g_assert_cmpfloat (rlx_outer_inner_lr (0.05, 1), ==, 0.05);
  g_assert_cmpfloat_with_epsilon (rlx_outer_inner_lr (0.05, 2), 0.05 * G_SQRT2, 1e-15);
  g_assert_cmpfloat_with_epsilon (rlx_outer_inner_lr (0.05, 3), 0.05 * sqrt (3), 1e-15);
  g_assert_cmpfloat (rlx_outer_inner_lr (0.025, 4), ==, 0.05);
  g_assert_cmpuint (RLX_OUTER_LR_SCALE_RANKS, ==, 4);
  for (guint k = 5; k < 1000; k += 97)
    g_assert_cmpfloat (rlx_outer_inner_lr (0.025, k), ==, 0.05);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/outer/settings", test_settings);
  g_test_add_func ("/outer/average", test_average);
  g_test_add_func ("/outer/nesterov", test_nesterov);
  g_test_add_func ("/outer/replicas-agree", test_replicas);
  g_test_add_func ("/outer/error-feedback", test_feedback);
  g_test_add_func ("/outer/refuse", test_refuse);
  g_test_add_func ("/outer/serialise", test_serialise);
  g_test_add_func ("/outer/parse-errors", test_parse_errors);
  g_test_add_func ("/outer/inner-time", test_inner_time);
  g_test_add_func ("/outer/inner-lr", test_inner_lr);
  return g_test_run ();
}
