/* test-resident.c — the backend's resident parameters (rlx-backend.h)
 *
 * Against the wire's own reference, bit for bit, at every precision:
 *   - apply_update: replica -= rlx_wire_dequantize (codes), over chains of
 *     updates that mix large, tiny, subnormal and zero values;
 *   - grads_wire: the codes and scale equal the payload and `_scale` of
 *     rlx_wire_feedback_encode (with error feedback) or rlx_wire_encode
 *     (without) for the gradient rlx_backend_grads gives at the same
 *     parameters, step after step (so the residual is carried identically);
 *   - a NaN or ±Inf gradient is refused with RLX_BACKEND_ERROR_NOT_FINITE and
 *     the residual is left as it was; a bucket not accepted (dropped) leaves
 *     it as it was too; reset_feedback forgets it;
 *   - bad calls (no parameters yet, wrong length, bad scale, bad batch) fail
 *     with a message, never a crash.
 */
#include "rlx-config.h"
#include "core/rlx-backend.h"
#include "core/rlx-backend-private.h"
#include "gpu/rlx-vk.h"

#include <math.h>
#include <string.h>

static RlxDataset *dataset;

static const RlxPrecision all_precisions[] = {
  RLX_PRECISION_F32, RLX_PRECISION_F16, RLX_PRECISION_F8E4M3, RLX_PRECISION_F8E5M2,
};

/* NULL when the backend cannot be opened: the test is marked failed with
 * the reason and returns, and the tests after it still run (on the H200 a
 * backend that failed to open once aborted every test after it). */
static RlxBackend *
open_backend (const char *spec, const RlxModel *model, guint max_batch)
{
  g_autoptr(GError) error = NULL;
  RlxBackend *be = rlx_backend_resolve (spec, model, dataset, max_batch, &error);

  if (be == NULL)
    g_test_fail_printf ("opening %s for %s at batch %u failed: %s (instances made in this "
                        "process: %u)", spec, model->slug, max_batch, error->message,
                        rlx_vk_instances_made ());
  return be;
}

/* A deterministic spread of magnitudes: ordinary values, tiny ones, f32
 * subnormals, exact zeros of both signs, one large value per stream. */
static void
fill_update (float *u, gsize n, guint32 salt, float magnitude)
{
  guint32 x = 2463534242u ^ (salt * 2654435761u);

  for (gsize i = 0; i < n; i++)
    {
      float v;

      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      v = ((float) (x & 0xffffff) / 16777216.0f - 0.5f) * magnitude;
      switch (x >> 29)
        {
        case 0: v *= 1e-6f; break;
        case 1: v *= 1e-30f; break;              /* far below f16/f8 resolution */
        case 2: v = (x & 1 ? 1 : -1) * 1e-40f; break; /* f32 subnormal */
        case 3: v = (x & 1) ? 0.0f : -0.0f; break;
        default: break;
        }
      u[i] = v;
    }
  u[(salt * 7919u) % n] = 3.0f * magnitude;
}

static void
assert_same_bits (const float *a, const float *b, gsize n, const char *what)
{
  for (gsize i = 0; i < n; i++)
    if (memcmp (&a[i], &b[i], 4) != 0)
      g_error ("%s: element %" G_GSIZE_FORMAT " differs: %.9g (0x%08x) vs %.9g (0x%08x)", what,
               i, a[i], *(const guint32 *) &a[i], b[i], *(const guint32 *) &b[i]);
}

static void
indices_for (guint32 *idx, guint n, guint step)
{
  guint size = rlx_dataset_size (dataset, RLX_SPLIT_TRAIN);

  for (guint i = 0; i < n; i++)
    idx[i] = (guint32) (((guint64) step * 977u + i * 131u) % size);
}

/* ── apply_update ───────────────────────────────────────────────────────── */

static void
check_apply_chain (const char *spec, const RlxModel *model, RlxPrecision p, guint chain)
{
  g_autoptr(RlxBackend) be = open_backend (spec, model, 8);
  g_autoptr(GError) error = NULL;
  gsize n = model->n_params, es = rlx_precision_element_size (p);
  g_autofree float *ref = g_new (float, n);
  g_autofree float *got = g_new (float, n);
  g_autofree float *u = g_new (float, n);
  g_autofree float *d = g_new (float, n);
  g_autofree guint8 *codes = g_malloc (n * es);

  if (be == NULL)
    return;
  rlx_model_init_params (model, 7, ref);
  /* tiny and subnormal parameters too, so the subtraction meets them */
  for (gsize i = 0; i < n; i += 97)
    ref[i] = (i & 1) ? 1e-39f : -3e-38f;
  g_assert_true (rlx_backend_load_params (be, ref, &error));
  g_assert_no_error (error);

  for (guint k = 0; k < chain; k++)
    {
      double scale;

      fill_update (u, n, k + 1 + 100 * p, k % 3 == 2 ? 1e-3f : 0.05f);
      scale = rlx_wire_scale_for (u, n, p);
      rlx_wire_quantize (u, n, p, scale, codes);
      g_assert_true (rlx_backend_apply_update (be, codes, n, p, scale, &error));
      g_assert_no_error (error);
      rlx_wire_dequantize (codes, n, p, scale, d);
      for (gsize i = 0; i < n; i++)
        ref[i] -= d[i];
    }
  g_assert_true (rlx_backend_read_params (be, got, &error));
  g_assert_no_error (error);
  assert_same_bits (got, ref, n, "replica after a chain of updates");
}

static void
test_cpu_apply (void)
{
  for (guint m = 0; m < RLX_N_MODELS; m++)
    {
      if (m == RLX_MODEL_MNIST_MLP_XL && !g_test_slow ())
        continue;
      for (guint k = 0; k < G_N_ELEMENTS (all_precisions); k++)
        check_apply_chain ("cpu", rlx_model_get (m), all_precisions[k], 12);
    }
}

/* ── grads_wire ─────────────────────────────────────────────────────────── */

/* The reference stream: the gradient at @params by rlx_backend_grads, then
 * the wire's feedback (or plain) encoder; returns the payload and scale. */
typedef struct {
  RlxBackend      *be;
  RlxWireFeedback *fb;
  float           *params;
  float           *g;
} Reference;

/* @spec: the same backend as the one checked (its gradient's bits are its
 * own: a GPU's differ from the CPU's in the last places) */
static gboolean
reference_init (Reference *r, const char *spec, const RlxModel *model, const float *params,
                guint max_batch)
{
  r->be = open_backend (spec, model, max_batch);
  if (r->be == NULL)
    return FALSE;
  r->fb = rlx_wire_feedback_new (model->n_params);
  r->params = g_memdup2 (params, model->n_params * sizeof (float));
  r->g = g_new (float, model->n_params);
  return TRUE;
}

static void
reference_clear (Reference *r)
{
  g_clear_pointer (&r->be, rlx_backend_free);
  g_clear_pointer (&r->fb, rlx_wire_feedback_free);
  g_clear_pointer (&r->params, g_free);
  g_clear_pointer (&r->g, g_free);
}

/* Encodes the reference gradient and checks @codes / @scale against it. */
static void
reference_check (Reference *r, const guint32 *idx, guint n, RlxPrecision p, gboolean feedback,
                 float loss, const void *codes, double scale, const char *what)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) frame = NULL;
  gsize n_params = rlx_backend_model (r->be)->n_params;
  gsize es = rlx_precision_element_size (p);
  RlxWireInfo info;
  const guint8 *data;
  float ref_loss;

  g_assert_true (rlx_backend_grads (r->be, r->params, idx, n, &ref_loss, r->g, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat (loss, ==, ref_loss);
  if (feedback)
    frame = rlx_wire_feedback_encode (r->fb, NULL, r->g, n_params, p, "g", NULL, &error);
  else
    frame = rlx_wire_encode (NULL, r->g, n_params, p, "g", &error);
  g_assert_no_error (error);
  g_assert_true (rlx_wire_decode_full (frame, NULL, &info, NULL, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (info.n, ==, n_params);
  data = g_bytes_get_data (frame, NULL);
  g_assert_cmpfloat (scale, ==, info.scale);
  if (memcmp (data + 4 + info.header_len, codes, n_params * es) != 0)
    {
      const guint8 *a = data + 4 + info.header_len, *b = codes;
      gsize i = 0;

      while (a[i] == b[i])
        i++;
      g_error ("%s: codes differ from the wire's at byte %" G_GSIZE_FORMAT " (element %"
               G_GSIZE_FORMAT "): 0x%02x vs 0x%02x", what, i, i / es, b[i], a[i]);
    }
}

/* Both replicas take the same small update, made from the gradient codes. */
static void
apply_same_update (RlxBackend *be, Reference *r, const void *codes, RlxPrecision p, double scale,
                   guint step)
{
  g_autoptr(GError) error = NULL;
  gsize n = rlx_backend_model (be)->n_params;
  gsize es = rlx_precision_element_size (p);
  g_autofree float *u = g_new (float, n);
  g_autofree guint8 *ucodes = g_malloc (n * es);
  double us;

  rlx_wire_dequantize (codes, n, p, scale, u);
  for (gsize i = 0; i < n; i++)
    u[i] *= 0.05f;
  us = rlx_wire_scale_for (u, n, p);
  rlx_wire_quantize (u, n, p, us, ucodes);
  g_assert_true (rlx_backend_apply_update (be, ucodes, n, p, us, &error));
  g_assert_no_error (error);
  rlx_wire_dequantize (ucodes, n, p, us, u);
  for (gsize i = 0; i < n; i++)
    r->params[i] -= u[i];
  (void) step;
}

static void
check_grads_wire (const char *spec, const RlxModel *model, RlxPrecision p, gboolean feedback,
                  guint steps, guint batch)
{
  g_autoptr(RlxBackend) be = open_backend (spec, model, batch);
  g_autoptr(GError) error = NULL;
  gsize n = model->n_params, es = rlx_precision_element_size (p);
  g_autofree float *params = g_new (float, n);
  g_autofree float *got = g_new (float, n);
  g_autofree guint8 *codes = g_malloc (n * es);
  g_autofree guint32 *idx = g_new (guint32, batch);
  Reference r;

  if (be == NULL)
    return;
  rlx_model_init_params (model, 11, params);
  if (!reference_init (&r, spec, model, params, batch))
    return;
  g_assert_true (rlx_backend_load_params (be, params, &error));
  g_assert_no_error (error);

  for (guint s = 0; s < steps; s++)
    {
      g_autofree char *what = g_strdup_printf ("%s %s %s feedback %d step %u", spec, model->slug,
                                               rlx_precision_to_string (p), feedback, s);
      double scale = -1;
      float loss = NAN;

      indices_for (idx, batch, s);
      memset (codes, 0xa5, n * es);
      g_assert_true (rlx_backend_grads_wire (be, idx, batch, p, feedback, &loss, codes, &scale,
                                             &error));
      g_assert_no_error (error);
      g_assert_true (isfinite (loss));
      reference_check (&r, idx, batch, p, feedback, loss, codes, scale, what);
      rlx_backend_accept_feedback (be);
      apply_same_update (be, &r, codes, p, scale, s);
    }
  g_assert_true (rlx_backend_read_params (be, got, &error));
  g_assert_no_error (error);
  assert_same_bits (got, r.params, n, "replica after the steps");
  reference_clear (&r);
}

static void
test_cpu_grads_wire (void)
{
  const RlxModelId models[] = { RLX_MODEL_MNIST_MLP, RLX_MODEL_MNIST_CNN };

  for (guint m = 0; m < G_N_ELEMENTS (models); m++)
    for (guint k = 0; k < G_N_ELEMENTS (all_precisions); k++)
      {
        check_grads_wire ("cpu", rlx_model_get (models[m]), all_precisions[k], TRUE, 5, 16);
        check_grads_wire ("cpu", rlx_model_get (models[m]), all_precisions[k], FALSE, 2, 16);
      }
}

/* ── NaN / ±Inf refused, dropped buckets, reset ─────────────────────────── */

/* One rank's gradient stream at @p on mnist-cnn, batch 8, and its reference
 * (which sees only the buckets that are checked). */
typedef struct {
  RlxBackend  *be;
  Reference    r;
  RlxPrecision p;
  guint8      *codes;
  guint32      idx[8];
  double       scale;
  float        loss;
} Stream;

static gboolean
stream_init (Stream *st, const char *spec, RlxPrecision p, guint64 seed)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_CNN);
  g_autofree float *params = g_new (float, model->n_params);
  g_autoptr(GError) error = NULL;

  memset (st, 0, sizeof *st);
  st->be = open_backend (spec, model, 8);
  st->p = p;
  st->codes = g_malloc (model->n_params * rlx_precision_element_size (p));
  rlx_model_init_params (model, seed, params);
  if (st->be == NULL || !reference_init (&st->r, spec, model, params, 8))
    {
      reference_clear (&st->r);
      g_clear_pointer (&st->be, rlx_backend_free);
      g_clear_pointer (&st->codes, g_free);
      return FALSE;
    }
  g_assert_true (rlx_backend_load_params (st->be, params, &error));
  g_assert_no_error (error);
  return TRUE;
}

static void
stream_clear (Stream *st)
{
  reference_clear (&st->r);
  g_clear_pointer (&st->be, rlx_backend_free);
  g_clear_pointer (&st->codes, g_free);
}

/* The gradient of step @step, with feedback; FALSE with @error when refused. */
static gboolean
stream_step (Stream *st, guint step, GError **error)
{
  indices_for (st->idx, 8, step);
  return rlx_backend_grads_wire (st->be, st->idx, 8, st->p, TRUE, &st->loss, st->codes,
                                 &st->scale, error);
}

/* The last step equals the reference's next; its bucket is accepted. */
static void
stream_check (Stream *st, const char *what)
{
  reference_check (&st->r, st->idx, 8, st->p, TRUE, st->loss, st->codes, st->scale, what);
  rlx_backend_accept_feedback (st->be);
}

static void
check_not_finite (const char *spec, RlxPrecision p, float poison, const char *word)
{
  g_autoptr(GError) error = NULL;
  Stream st;

  if (!stream_init (&st, spec, p, 5))
    return;
  /* step 0 fills the residual */
  g_assert_true (stream_step (&st, 0, &error));
  g_assert_no_error (error);
  stream_check (&st, "before the poison");

  /* step 1: one element poisoned — refused, nothing carried */
  rlx_backend_poison_gradient (st.be, rlx_backend_model (st.be)->n_params / 3, poison);
  g_assert_false (stream_step (&st, 1, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, word));
  g_assert_nonnull (strstr (error->message, "not sent"));
  g_clear_error (&error);
  rlx_backend_accept_feedback (st.be);   /* nothing to accept: refused */

  /* step 2 equals the reference stream that never saw step 1 */
  g_assert_true (stream_step (&st, 2, &error));
  g_assert_no_error (error);
  stream_check (&st, "after the refused step");
  stream_clear (&st);
}

static void
test_cpu_not_finite (void)
{
  for (guint k = 0; k < G_N_ELEMENTS (all_precisions); k++)
    {
      check_not_finite ("cpu", all_precisions[k], NAN, "NaN");
      check_not_finite ("cpu", all_precisions[k], INFINITY, "+Inf");
      check_not_finite ("cpu", all_precisions[k], -INFINITY, "-Inf");
    }
}

/* A bucket the leader did not take (late, rejected): without
 * accept_feedback its residual is not carried — the step after equals the
 * reference stream that never saw it. */
static void
check_dropped (const char *spec, RlxPrecision p)
{
  g_autoptr(GError) error = NULL;
  Stream st;

  if (!stream_init (&st, spec, p, 13))
    return;
  for (guint step = 0; step < 4; step++)
    {
      g_assert_true (stream_step (&st, step, &error));
      g_assert_no_error (error);
      if (step == 1 || step == 2)
        continue;   /* dropped: not accepted, not in the reference stream */
      stream_check (&st, step == 0 ? "before the drops" : "after two dropped buckets");
    }
  stream_clear (&st);
}

static void
test_cpu_dropped (void)
{
  for (guint k = 1; k < G_N_ELEMENTS (all_precisions); k++)
    check_dropped ("cpu", all_precisions[k]);
}

/* reset_feedback: the next codes are those of a fresh feedback stream. */
static void
check_reset_feedback (const char *spec, RlxPrecision p)
{
  g_autoptr(GError) error = NULL;
  Stream st;

  if (!stream_init (&st, spec, p, 9))
    return;
  for (guint step = 10; step < 13; step++)
    {
      g_assert_true (stream_step (&st, step, &error));
      g_assert_no_error (error);
      rlx_backend_accept_feedback (st.be);   /* accepted, but not in the reference */
    }
  /* one more, not accepted: the reset drops it too */
  g_assert_true (stream_step (&st, 13, &error));
  rlx_backend_reset_feedback (st.be);
  rlx_backend_accept_feedback (st.be);
  /* the parameters did not move: the reference starts fresh at them */
  g_assert_true (stream_step (&st, 3, &error));
  g_assert_no_error (error);
  stream_check (&st, "after reset_feedback");
  stream_clear (&st);
}

static void
test_cpu_reset_feedback (void)
{
  check_reset_feedback ("cpu", RLX_PRECISION_F8E4M3);
  check_reset_feedback ("cpu", RLX_PRECISION_F16);
}

/* ── bad calls ──────────────────────────────────────────────────────────── */

static void
check_bad_calls (const char *spec)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_CNN);
  g_autoptr(RlxBackend) be = open_backend (spec, model, 4);
  g_autoptr(GError) error = NULL;
  gsize n = model->n_params;
  g_autofree float *params = g_new0 (float, n);
  g_autofree float *before = g_new (float, n);
  g_autofree float *after = g_new (float, n);
  g_autofree guint16 *codes = g_new0 (guint16, n);
  guint32 idx[5] = { 0, 1, 2, 3, 4 };
  guint64 hash;
  double scale;
  float loss;

  if (be == NULL)
    return;
  /* nothing loaded yet */
  g_assert_false (rlx_backend_apply_update (be, codes, n, RLX_PRECISION_F16, 1.0, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED);
  g_assert_nonnull (strstr (error->message, "load them first"));
  g_clear_error (&error);
  g_assert_false (rlx_backend_read_params (be, params, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED);
  g_clear_error (&error);
  g_assert_false (rlx_backend_params_hash (be, &hash, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED);
  g_clear_error (&error);
  g_assert_false (rlx_backend_grads_wire (be, idx, 4, RLX_PRECISION_F16, TRUE, &loss, codes,
                                          &scale, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED);
  g_clear_error (&error);

  rlx_model_init_params (model, 3, params);
  g_assert_true (rlx_backend_load_params (be, params, &error));
  g_assert_true (rlx_backend_read_params (be, before, &error));
  g_assert_no_error (error);
  assert_same_bits (before, params, n, "read after load");
  g_assert_true (rlx_backend_params_hash (be, &hash, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (hash, ==, rlx_params_hash (params, n));

  /* wrong length, bad scales: refused, the replica untouched */
  g_assert_false (rlx_backend_apply_update (be, codes, n - 1, RLX_PRECISION_F16, 1.0, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED);
  g_assert_nonnull (strstr (error->message, "disagree on the model"));
  g_clear_error (&error);
  g_assert_false (rlx_backend_apply_update (be, codes, n, RLX_PRECISION_F8E4M3, 0.0, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED);
  g_assert_nonnull (strstr (error->message, "scale"));
  g_clear_error (&error);
  g_assert_false (rlx_backend_apply_update (be, codes, n, RLX_PRECISION_F16, INFINITY, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED);
  g_clear_error (&error);
  g_assert_false (rlx_backend_apply_update (be, codes, n, RLX_PRECISION_F16, NAN, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED);
  g_clear_error (&error);

  /* codes that decode to NaN or ±Inf: refused, at every precision */
  {
    g_autofree guint8 *bad = g_malloc0 (n * 4);
    const struct { RlxPrecision p; gsize at; guint32 code; } cases[] = {
      { RLX_PRECISION_F32, 7, 0x7f800000u }, { RLX_PRECISION_F32, 8, 0xffc00001u },
      { RLX_PRECISION_F16, n - 1, 0x7c00 }, { RLX_PRECISION_F16, 3, 0xfe01 },
      { RLX_PRECISION_F8E4M3, 11, 0x7f }, { RLX_PRECISION_F8E4M3, 12, 0xff },
      { RLX_PRECISION_F8E5M2, 13, 0x7c }, { RLX_PRECISION_F8E5M2, n - 1, 0xfd },
    };

    for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
      {
        gsize es = rlx_precision_element_size (cases[c].p);

        memset (bad, 0, n * 4);
        memcpy (bad + cases[c].at * es, &cases[c].code, es);   /* little-endian */
        g_assert_false (rlx_backend_apply_update (be, bad, n, cases[c].p, 2.0, &error));
        g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE);
        g_assert_nonnull (strstr (error->message, "not applied"));
        g_clear_error (&error);
      }
  }
  /* the largest finite codes are applied (the check is exact at the edge);
   * a huge scale keeps the update small */
  {
    g_autofree guint8 *edge = g_malloc0 (n * 4);
    const struct { RlxPrecision p; guint32 code; } finite[] = {
      { RLX_PRECISION_F32, 0x7f7fffffu }, { RLX_PRECISION_F16, 0xfbff },
      { RLX_PRECISION_F8E4M3, 0xfe }, { RLX_PRECISION_F8E5M2, 0x7b },
    };

    for (guint c = 0; c < G_N_ELEMENTS (finite); c++)
      {
        gsize es = rlx_precision_element_size (finite[c].p);

        for (gsize i = 0; i < n; i++)
          memcpy (edge + i * es, &finite[c].code, es);
        g_assert_true (rlx_backend_apply_update (be, edge, n, finite[c].p, 1e30, &error));
        g_assert_no_error (error);
      }
    /* back to where the rest of the test expects it */
    g_assert_true (rlx_backend_load_params (be, before, &error));
  }

  /* bad batches */
  g_assert_false (rlx_backend_grads_wire (be, idx, 0, RLX_PRECISION_F16, TRUE, &loss, codes,
                                          &scale, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_BATCH);
  g_clear_error (&error);
  g_assert_false (rlx_backend_grads_wire (be, idx, 5, RLX_PRECISION_F16, TRUE, &loss, codes,
                                          &scale, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_BATCH);
  g_clear_error (&error);
  idx[1] = 60000;
  g_assert_false (rlx_backend_grads_wire (be, idx, 2, RLX_PRECISION_F16, TRUE, &loss, codes,
                                          &scale, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_BATCH);
  g_clear_error (&error);

  g_assert_true (rlx_backend_read_params (be, after, &error));
  g_assert_no_error (error);
  assert_same_bits (after, before, n, "replica after refused calls");
}

static void
test_cpu_bad_calls (void)
{
  check_bad_calls ("cpu");
}

/* ── the same on a Vulkan device (lavapipe in CI) ───────────────────────── */

/* the device: lavapipe in CI; RLX_TEST_VULKAN=SPEC runs the same checks on
 * another (scripts/device/gpu-cohort.sh: vulkan on the H200) */
static const char *VK_SPEC = "vulkan:llvmpipe";
static gboolean have_device;

static gboolean
need_device (void)
{
  if (!have_device)
    g_test_skip ("no lavapipe device (install mesa-vulkan-drivers)");
  return have_device;
}

/* the Vulkan backend really keeps the replica on the device here, else the
 * tests below would check the host path twice */
static void
test_vk_on_device (void)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_CNN);
  g_autoptr(RlxBackend) be = NULL, cpu = NULL;

  if (!need_device ())
    return;
  be = open_backend (VK_SPEC, model, 8);
  if (be == NULL)
    return;
  g_test_message ("fallback: '%s'", rlx_backend_fallback (be));
  g_assert_true (rlx_backend_params_on_device (be));
  g_assert_null (strstr (rlx_backend_fallback (be), "kept on the host"));
  cpu = open_backend ("cpu", model, 8);
  g_assert_false (rlx_backend_params_on_device (cpu));

  /* RLX_VK_RESIDENT=0 keeps them on the host and says so */
  g_setenv ("RLX_VK_RESIDENT", "0", TRUE);
  g_clear_pointer (&be, rlx_backend_free);
  be = open_backend (VK_SPEC, model, 8);
  g_unsetenv ("RLX_VK_RESIDENT");
  if (be == NULL)
    return;
  g_assert_false (rlx_backend_params_on_device (be));
  g_assert_nonnull (strstr (rlx_backend_fallback (be), "RLX_VK_RESIDENT=0"));
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

static void
test_vk_apply (void)
{
  if (!need_device ())
    return;
  for (guint m = 0; m < RLX_N_MODELS; m++)
    {
      if (m == RLX_MODEL_MNIST_MLP_XL && !g_test_slow ())
        continue;
      for (guint k = 0; k < G_N_ELEMENTS (all_precisions); k++)
        check_apply_chain (VK_SPEC, rlx_model_get (m), all_precisions[k], 6);
    }
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

static void
test_vk_grads_wire (void)
{
  const RlxModelId models[] = { RLX_MODEL_MNIST_MLP, RLX_MODEL_MNIST_CNN };

  if (!need_device ())
    return;
  for (guint m = 0; m < G_N_ELEMENTS (models); m++)
    for (guint k = 0; k < G_N_ELEMENTS (all_precisions); k++)
      {
        check_grads_wire (VK_SPEC, rlx_model_get (models[m]), all_precisions[k], TRUE, 3, 16);
        check_grads_wire (VK_SPEC, rlx_model_get (models[m]), all_precisions[k], FALSE, 1, 7);
      }
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

static void
test_vk_not_finite (void)
{
  if (!need_device ())
    return;
  for (guint k = 0; k < G_N_ELEMENTS (all_precisions); k++)
    {
      check_not_finite (VK_SPEC, all_precisions[k], NAN, "NaN");
      check_not_finite (VK_SPEC, all_precisions[k], INFINITY, "+Inf");
      check_not_finite (VK_SPEC, all_precisions[k], -INFINITY, "-Inf");
    }
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

static void
test_vk_dropped (void)
{
  if (!need_device ())
    return;
  for (guint k = 1; k < G_N_ELEMENTS (all_precisions); k++)
    check_dropped (VK_SPEC, all_precisions[k]);
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

static void
test_vk_reset_feedback (void)
{
  if (!need_device ())
    return;
  check_reset_feedback (VK_SPEC, RLX_PRECISION_F8E4M3);
  check_reset_feedback (VK_SPEC, RLX_PRECISION_F16);
}

static void
test_vk_bad_calls (void)
{
  if (!need_device ())
    return;
  check_bad_calls (VK_SPEC);
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

/* The device's wire arithmetic on its own, at sizes that are not a multiple
 * of anything (1, 2, 3, 5, 4095, 4097, 20481) and on values from f32
 * subnormals up, with the residual carried over several rounds. */
static void
check_odd_sizes (int nudge)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_CNN);
  const gsize sizes[] = { 1, 2, 3, 5, 4095, 4097, 20481 };
  g_autoptr(RlxBackend) be = NULL;
  RlxVkTrainer *vk;

  if (!need_device ())
    return;
  be = open_backend (VK_SPEC, model, 8);
  if (be == NULL)
    return;
  g_assert_true (rlx_backend_params_on_device (be));
  vk = rlx_backend_vk_trainer (be);
  rlx_vk_trainer_set_div_nudge (vk, nudge);
  for (guint z = 0; z < G_N_ELEMENTS (sizes); z++)
    for (guint k = 0; k < G_N_ELEMENTS (all_precisions); k++)
      {
        RlxPrecision p = all_precisions[k];
        gsize n = sizes[z], es = rlx_precision_element_size (p);
        g_autoptr(RlxWireFeedback) fb = rlx_wire_feedback_new (n);
        g_autoptr(GError) error = NULL;
        g_autofree float *g = g_new (float, n);
        g_autofree float *params = g_new (float, n);
        g_autofree float *ref = g_new (float, n);
        g_autofree float *d = g_new (float, n);
        g_autofree guint8 *codes = g_malloc (n * 4);

        rlx_vk_trainer_reset_feedback (vk);
        for (guint round = 0; round < 4; round++)
          {
            g_autoptr(GBytes) frame = NULL;
            RlxVkWireSummary sum;
            RlxWireInfo info;
            const guint8 *payload;
            double scale;

            /* the last round is all tiny values: the scale is huge */
            fill_update (g, n, 31 * z + round + 7 * k, round == 3 ? 1e-35f : 0.5f);
            g_assert_true (rlx_vk_trainer_wire_test (vk, g, n, p, TRUE, codes, &sum, &error));
            g_assert_no_error (error);
            rlx_vk_trainer_accept_feedback (vk);
            frame = rlx_wire_feedback_encode (fb, NULL, g, n, p, "g", NULL, &error);
            g_assert_no_error (error);
            g_assert_true (rlx_wire_decode_full (frame, NULL, &info, NULL, NULL, &error));
            payload = (const guint8 *) g_bytes_get_data (frame, NULL) + 4 + info.header_len;
            g_assert_cmpfloat (sum.scale, ==, info.scale);
            if (memcmp (payload, codes, n * es) != 0)
              g_error ("%s n=%" G_GSIZE_FORMAT " round %u: codes differ from the wire's",
                       rlx_precision_to_string (p), n, round);

            /* and an update applied to parameters, subnormals among them */
            fill_update (params, n, 77 + round, round == 3 ? 1e-37f : 1.0f);
            memcpy (ref, params, n * 4);
            scale = rlx_wire_scale_for (g, n, p);
            rlx_wire_quantize (g, n, p, scale, codes);
            g_assert_true (rlx_vk_trainer_apply_test (vk, params, n, codes, p,
                                                      p == RLX_PRECISION_F32 ? 1.0 : 1.0 / scale,
                                                      &error));
            g_assert_no_error (error);
            rlx_wire_dequantize (codes, n, p, scale, d);
            for (gsize i = 0; i < n; i++)
              ref[i] -= d[i];
            assert_same_bits (params, ref, n, "apply at an odd size");
          }
      }
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

static void
test_vk_odd_sizes (void)
{
  check_odd_sizes (0);
}

/* The scale and its inverse are correctly rounded even when the device's
 * own division is a few ulps off (simulated by starting 3 ulps away). */
static void
test_vk_division (void)
{
  check_odd_sizes (3);
  check_odd_sizes (-3);
}

/* A long chain: a CPU rank and a Vulkan rank take the same 200 updates,
 * precisions mixed, with a gradient step on each between some of them; the
 * replicas' bits stay equal (the hash of a mixed cohort). */
static void
test_vk_long_chain (void)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autoptr(RlxBackend) cpu = NULL, gpu = NULL;
  g_autoptr(GError) error = NULL;
  gsize n = model->n_params;
  g_autofree float *params = g_new (float, n);
  g_autofree float *a = g_new (float, n);
  g_autofree float *b = g_new (float, n);
  g_autofree float *u = g_new (float, n);
  g_autofree guint8 *codes = g_malloc (n * 4);
  g_autofree guint8 *gcodes = g_malloc (n * 4);
  guint32 idx[8];

  if (!need_device ())
    return;
  cpu = open_backend ("cpu", model, 8);
  gpu = open_backend (VK_SPEC, model, 8);
  if (gpu == NULL)
    return;
  rlx_model_init_params (model, 21, params);
  g_assert_true (rlx_backend_load_params (cpu, params, &error));
  g_assert_true (rlx_backend_load_params (gpu, params, &error));
  for (guint k = 0; k < 200; k++)
    {
      RlxPrecision p = all_precisions[(k / 3) % 4];
      guint64 hg = 0, hc = 1;
      double scale;

      fill_update (u, n, 1000 + k, 1e-3f);
      scale = rlx_wire_scale_for (u, n, p);
      rlx_wire_quantize (u, n, p, scale, codes);
      g_assert_true (rlx_backend_apply_update (cpu, codes, n, p, scale, &error));
      g_assert_no_error (error);
      g_assert_true (rlx_backend_apply_update (gpu, codes, n, p, scale, &error));
      g_assert_no_error (error);
      if (k % 25 == 24)
        {
          float loss;
          double gs;

          /* a step on the GPU replica between updates (the queued update
           * rides in its submission) */
          indices_for (idx, 8, k);
          g_assert_true (rlx_backend_grads_wire (gpu, idx, 8, p, TRUE, &loss, gcodes, &gs, &error));
          g_assert_no_error (error);
          /* the hash right after a step (the copy the step brought along),
           * then the replica itself */
          g_assert_true (rlx_backend_params_hash (gpu, &hg, &error));
          g_assert_no_error (error);
          g_assert_true (rlx_backend_params_hash (cpu, &hc, &error));
          g_assert_cmpuint (hg, ==, hc);
          g_assert_true (rlx_backend_read_params (cpu, a, &error));
          g_assert_true (rlx_backend_read_params (gpu, b, &error));
          assert_same_bits (b, a, n, "GPU replica against the CPU's in the chain");
          g_assert_cmpuint (rlx_params_hash (a, n), ==, hc);
        }
      else if (k % 25 == 7)
        {
          /* the hash with an update still queued on the device */
          g_assert_true (rlx_backend_params_hash (gpu, &hg, &error));
          g_assert_no_error (error);
          g_assert_true (rlx_backend_params_hash (cpu, &hc, &error));
          g_assert_cmpuint (hg, ==, hc);
        }
    }
  g_assert_true (rlx_backend_read_params (cpu, a, &error));
  g_assert_true (rlx_backend_read_params (gpu, b, &error));
  assert_same_bits (b, a, n, "GPU replica against the CPU's after 200 updates");
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;

  g_test_init (&argc, &argv, NULL);
  g_setenv ("RLX_VK_VALIDATE", "1", TRUE);
  dataset = rlx_dataset_open ("synthetic", 3, &error);
  g_assert_no_error (error);
  if (g_getenv ("RLX_TEST_VULKAN") != NULL)
    VK_SPEC = g_getenv ("RLX_TEST_VULKAN");
  {
    g_autoptr(GError) local = NULL;
    g_autoptr(RlxBackend) probe = rlx_backend_resolve (VK_SPEC, rlx_model_get (RLX_MODEL_MNIST_CNN),
                                                       dataset, 8, &local);

    have_device = probe != NULL;
    if (probe != NULL)
      g_test_message ("Vulkan tests on %s (%s)", rlx_backend_device (probe), VK_SPEC);
    else
      g_test_message ("no device for %s: %s", VK_SPEC, local->message);
    if (!have_device && g_getenv ("CI") != NULL)
      g_error ("CI is set but %s cannot be opened (%s): install mesa-vulkan-drivers "
               "(scripts/deps.sh does)", VK_SPEC, local->message);
  }

  g_test_add_func ("/backend/resident/cpu/apply-bits", test_cpu_apply);
  g_test_add_func ("/backend/resident/cpu/grads-wire", test_cpu_grads_wire);
  g_test_add_func ("/backend/resident/cpu/not-finite", test_cpu_not_finite);
  g_test_add_func ("/backend/resident/cpu/dropped-bucket", test_cpu_dropped);
  g_test_add_func ("/backend/resident/cpu/reset-feedback", test_cpu_reset_feedback);
  g_test_add_func ("/backend/resident/cpu/bad-calls", test_cpu_bad_calls);
  g_test_add_func ("/backend/resident/vulkan/on-device", test_vk_on_device);
  g_test_add_func ("/backend/resident/vulkan/apply-bits", test_vk_apply);
  g_test_add_func ("/backend/resident/vulkan/grads-wire", test_vk_grads_wire);
  g_test_add_func ("/backend/resident/vulkan/not-finite", test_vk_not_finite);
  g_test_add_func ("/backend/resident/vulkan/dropped-bucket", test_vk_dropped);
  g_test_add_func ("/backend/resident/vulkan/reset-feedback", test_vk_reset_feedback);
  g_test_add_func ("/backend/resident/vulkan/bad-calls", test_vk_bad_calls);
  g_test_add_func ("/backend/resident/vulkan/odd-sizes", test_vk_odd_sizes);
  g_test_add_func ("/backend/resident/vulkan/division", test_vk_division);
  g_test_add_func ("/backend/resident/vulkan/long-chain", test_vk_long_chain);
  {
    int status = g_test_run ();
    g_clear_pointer (&dataset, rlx_dataset_unref);
    return status;
  }
}
