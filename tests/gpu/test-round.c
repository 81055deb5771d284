/* test-round.c — the leader's round on the backend, the parameter hash on
 * the device and the zero-copy calls (rlx-backend.h), on the CPU and on a
 * Vulkan device (lavapipe in CI; RLX_TEST_VULKAN=SPEC for another)
 *
 * Against a reference written from core/wire's public functions and
 * rlx_params_hash, bit for bit:
 *   - rounds of every shape (the own gradient alone, with members, after
 *     them, members alone, one member alone) at every precision, with the
 *     update's error feedback carried from round to round: the codes, the
 *     scale, the hash and the replica; a CPU rank that applies the codes
 *     holds the hash the leader reported;
 *   - the own gradient computed behind the last finish is the one a fresh
 *     step gives, and is recomputed when the samples or the replica changed;
 *   - refusals: a non-finite bucket or own gradient leaves the round as it
 *     was, an update that overflows leaves replica and residual as they
 *     were, bad calls fail with a message;
 *   - the device's hash of random and odd-sized arrays is rlx_params_hash's;
 *     params_hash moves no parameter-sized data;
 *   - update_begin/commit and grads_wire_map give what the copying calls
 *     give without the copies; a corrupt update committed without a host
 *     check is refused by the device, the replica untouched;
 *   - backends opened and closed one after another share one VkInstance.
 * The validation layer is on and must stay silent.
 */
#include "rlx-config.h"
#include "core/rlx-backend.h"
#include "core/rlx-backend-private.h"
#include "gpu/rlx-vk.h"

#include <math.h>
#include <string.h>

static RlxDataset *dataset;
static const char *VK_SPEC = "vulkan:llvmpipe";
static gboolean have_device;

static const RlxPrecision all_precisions[] = {
  RLX_PRECISION_F32, RLX_PRECISION_F16, RLX_PRECISION_F8E4M3, RLX_PRECISION_F8E5M2,
};

#define BATCH 8
#define LR 0.05

/* NULL when the backend cannot be opened: the test is marked failed with
 * the reason and returns, and the tests after it still run. */
static RlxBackend *
open_backend (const char *spec, const RlxModel *model)
{
  g_autoptr(GError) error = NULL;
  RlxBackend *be = rlx_backend_resolve (spec, model, dataset, BATCH, &error);

  if (be == NULL)
    g_test_fail_printf ("opening %s for %s failed: %s", spec, model->slug, error->message);
  return be;
}

static gboolean
need_device (void)
{
  if (!have_device)
    g_test_skip ("no lavapipe device (install mesa-vulkan-drivers)");
  return have_device;
}

/* @check on the device, with no validation message (skipped without one) */
static void
on_device (void (*check) (const char *spec))
{
  if (!need_device ())
    return;
  check (VK_SPEC);
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

static void
assert_same_bits (const float *a, const float *b, gsize n, const char *what)
{
  for (gsize i = 0; i < n; i++)
    if (memcmp (&a[i], &b[i], 4) != 0)
      g_error ("%s: element %" G_GSIZE_FORMAT " differs: %.9g vs %.9g", what, i, a[i], b[i]);
}

static guint32
xorshift (guint32 *x)
{
  *x ^= *x << 13;
  *x ^= *x >> 17;
  *x ^= *x << 5;
  return *x;
}

/* gradient-like values: mostly small, some tiny, a few zeros */
static void
fill_values (float *v, gsize n, guint32 seed, float magnitude)
{
  guint32 x = 0x9e3779b9u ^ (seed * 2654435761u);

  for (gsize i = 0; i < n; i++)
    {
      guint32 r = xorshift (&x);
      float f = ((float) (r & 0xffffff) / 16777216.0f - 0.5f) * magnitude;
      v[i] = (r >> 29) == 0 ? f * 1e-6f : (r >> 29) == 1 ? 0.0f : f;
    }
}

static void
indices_for (guint32 *idx, guint step)
{
  guint size = rlx_dataset_size (dataset, RLX_SPLIT_TRAIN);

  for (guint i = 0; i < BATCH; i++)
    idx[i] = (guint32) (((guint64) step * 991u + i * 137u) % size);
}

/* ── the reference round ─────────────────────────────────────────────────
 *
 * What rlx-backend.h says a round computes, in plain f32 loops over core/wire's
 * functions: K = 1: u = (float) lr · x_1; K ≥ 2: S = w_1·x_1 + w_2·x_2 + …,
 * u = (float) (lr / Σw) · S; u += r with feedback (not at f32); codes at the
 * dynamic scale; r = u − d (0 where not finite); params −= d. */

typedef struct {
  const char     *spec;
  const RlxModel *model;
  gsize           n;
  RlxBackend     *be;       /* the leader under test */
  RlxBackend     *grads;    /* the same spec: its own gradient, for the reference */
  RlxBackend     *member;   /* cpu: a rank that applies the leader's codes */
  float          *params;   /* the reference replica */
  float          *ures;     /* the reference update residual */
  float          *sum;      /* the reference round's sum (x_1 alone while K = 1) */
  float           w1;
  guint           k;
  guint64         total;
  float          *x;        /* scratch: one contribution */
  guint8         *bucket;   /* scratch: a member's codes */
} Leader;

static gboolean
leader_init (Leader *l, const char *spec, const RlxModel *model, guint64 seed)
{
  g_autoptr(GError) error = NULL;

  memset (l, 0, sizeof *l);
  l->spec = spec;
  l->model = model;
  l->n = model->n_params;
  l->be = open_backend (spec, model);
  l->grads = l->be != NULL ? open_backend (spec, model) : NULL;
  l->member = l->grads != NULL ? open_backend ("cpu", model) : NULL;
  if (l->member == NULL)
    return FALSE;
  l->params = g_new (float, l->n);
  l->ures = g_new0 (float, l->n);
  l->sum = g_new (float, l->n);
  l->x = g_new (float, l->n);
  l->bucket = g_malloc (l->n * 4);
  rlx_model_init_params (model, seed, l->params);
  g_assert_true (rlx_backend_load_params (l->be, l->params, &error));
  g_assert_true (rlx_backend_load_params (l->member, l->params, &error));
  g_assert_no_error (error);
  rlx_backend_reset_feedback (l->be);
  return TRUE;
}

static void
leader_clear (Leader *l)
{
  g_clear_pointer (&l->be, rlx_backend_free);
  g_clear_pointer (&l->grads, rlx_backend_free);
  g_clear_pointer (&l->member, rlx_backend_free);
  g_clear_pointer (&l->params, g_free);
  g_clear_pointer (&l->ures, g_free);
  g_clear_pointer (&l->sum, g_free);
  g_clear_pointer (&l->x, g_free);
  g_clear_pointer (&l->bucket, g_free);
}

/* the reference round gains l->x with weight @w */
static void
ref_join (Leader *l, guint w)
{
  float fw = (float) w;

  if (l->k == 0)
    {
      memcpy (l->sum, l->x, l->n * 4);
      l->w1 = fw;
    }
  else
    for (gsize i = 0; i < l->n; i++)
      {
        float a = l->k == 1 ? l->w1 * l->sum[i] : l->sum[i];
        float b = fw * l->x[i];
        l->sum[i] = a + b;
      }
  l->k++;
  l->total += w;
}

/* Both rounds gain the own gradient at the replica over step @step's samples. */
static void
add_own (Leader *l, guint step)
{
  g_autoptr(GError) error = NULL;
  guint32 idx[BATCH];
  float loss = NAN, ref_loss;

  indices_for (idx, step);
  g_assert_true (rlx_backend_round_own (l->be, idx, BATCH, &loss, &error));
  g_assert_no_error (error);
  g_assert_true (rlx_backend_grads (l->grads, l->params, idx, BATCH, &ref_loss, l->x, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat (loss, ==, ref_loss);
  ref_join (l, BATCH);
}

/* Both rounds gain a member's bucket at @p (made from @seed) with @w. */
static void
add_member (Leader *l, RlxPrecision p, guint32 seed, guint w)
{
  g_autoptr(GError) error = NULL;
  double scale;
  guint size = rlx_backend_round_size (l->be);

  fill_values (l->x, l->n, seed, 0.02f);
  scale = rlx_wire_scale_for (l->x, l->n, p);
  rlx_wire_quantize (l->x, l->n, p, scale, l->bucket);
  g_assert_true (rlx_backend_round_add (l->be, l->bucket, l->n, p, scale, w, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (rlx_backend_round_size (l->be), ==, size + 1);
  rlx_wire_dequantize (l->bucket, l->n, p, scale, l->x);
  ref_join (l, w);
}

/* The reference round's finish at @p (@fb: with the update residual):
 * its codes into @ref_codes (n elements at @p), its scale returned; the
 * reference replica and residual take the update, the round is emptied. */
static double
ref_finish (Leader *l, RlxPrecision p, gboolean fb, guint8 *ref_codes)
{
  g_autofree float *u = g_new (float, l->n);
  g_autofree float *d = g_new (float, l->n);
  float coef = l->k == 1 ? (float) LR : (float) (LR / (double) l->total);
  double scale;

  for (gsize i = 0; i < l->n; i++)
    {
      float t = coef * l->sum[i];
      u[i] = fb ? t + l->ures[i] : t;
    }
  scale = rlx_wire_scale_for (u, l->n, p);
  rlx_wire_quantize (u, l->n, p, scale, ref_codes);
  rlx_wire_dequantize (ref_codes, l->n, p, scale, d);
  for (gsize i = 0; i < l->n; i++)
    {
      float r = u[i] - d[i];
      if (fb)
        l->ures[i] = isfinite (r) ? r : 0.0f;
      l->params[i] -= d[i];
    }
  l->k = 0;
  l->total = 0;
  return scale;
}

/* Finishes both rounds and checks codes, scale, hash, the replica and a
 * member's apply. @next: the next round's samples (step @next_step).
 * Every other call takes the codes written into a buffer of its own
 * (round_finish_into, as a step frame does) instead of where they are. */
static void
finish_round (Leader *l, RlxPrecision p, gboolean feedback, gboolean next, guint next_step,
              const char *what)
{
  static guint calls;
  g_autoptr(GError) error = NULL;
  gsize es = rlx_precision_element_size (p);
  g_autofree guint8 *ref_codes = g_malloc (l->n * es);
  g_autofree guint8 *into = g_malloc (l->n * es);
  g_autofree float *got = g_new (float, l->n);
  const void *codes = NULL;
  guint32 idx[BATCH];
  guint64 hash = 0, member_hash = 1;
  double scale = -1, ref_scale;
  gboolean ok;

  ref_scale = ref_finish (l, p, feedback && p != RLX_PRECISION_F32, ref_codes);
  indices_for (idx, next_step);
  g_test_message ("%s: %s at %s, %u contributions", l->spec, what, rlx_precision_to_string (p),
                  rlx_backend_round_size (l->be));
  if (calls++ % 2 == 1)
    {
      memset (into, 0xa5, l->n * es);
      ok = rlx_backend_round_finish_into (l->be, LR, p, feedback, next ? idx : NULL,
                                          next ? BATCH : 0, into, &scale, &hash, &error);
      codes = into;
    }
  else
    ok = rlx_backend_round_finish (l->be, LR, p, feedback, next ? idx : NULL, next ? BATCH : 0,
                                   &codes, &scale, &hash, &error);
  g_assert_no_error (error);
  g_assert_true (ok);
  g_assert_cmpuint (rlx_backend_round_size (l->be), ==, 0);
  g_assert_cmpfloat (scale, ==, ref_scale);
  if (memcmp (codes, ref_codes, l->n * es) != 0)
    {
      gsize i = 0;
      while (memcmp ((const guint8 *) codes + i * es, ref_codes + i * es, es) == 0)
        i++;
      g_error ("%s (%s %s): the update's code %" G_GSIZE_FORMAT " differs from the reference's",
               what, l->spec, rlx_precision_to_string (p), i);
    }
  g_assert_cmphex (hash, ==, rlx_params_hash (l->params, l->n));
  g_assert_true (rlx_backend_read_params (l->be, got, &error));
  g_assert_no_error (error);
  assert_same_bits (got, l->params, l->n, what);
  /* a member applies the codes as they travel and holds the same hash */
  g_assert_true (rlx_backend_apply_update (l->member, codes, l->n, p, scale, &error));
  g_assert_no_error (error);
  g_assert_true (rlx_backend_params_hash (l->member, &member_hash, &error));
  g_assert_cmphex (member_hash, ==, hash);
}

/* Every shape of round at every precision, the update residual carried. */
static void
check_round_bits (const char *spec, const RlxModel *model)
{
  for (guint k = 0; k < G_N_ELEMENTS (all_precisions); k++)
    {
      RlxPrecision p = all_precisions[k];
      Leader l;

      if (!leader_init (&l, spec, model, 3 + k))
        {
          leader_clear (&l);
          return;
        }
      /* the own gradient alone */
      add_own (&l, 0);
      finish_round (&l, p, TRUE, FALSE, 0, "own gradient alone");
      /* own first, then two members at other precisions */
      add_own (&l, 1);
      add_member (&l, RLX_PRECISION_F16, 11 + k, 5);
      add_member (&l, RLX_PRECISION_F8E5M2, 12 + k, 3);
      finish_round (&l, p, TRUE, FALSE, 0, "own gradient and two members");
      /* a member first, then the own gradient */
      add_member (&l, RLX_PRECISION_F8E4M3, 13 + k, 4);
      add_own (&l, 2);
      finish_round (&l, p, TRUE, FALSE, 0, "a member, then the own gradient");
      /* members alone */
      add_member (&l, RLX_PRECISION_F32, 14 + k, 2);
      add_member (&l, RLX_PRECISION_F16, 15 + k, 6);
      finish_round (&l, p, TRUE, FALSE, 0, "two members alone");
      /* one member alone, then a round without feedback */
      add_member (&l, RLX_PRECISION_F8E5M2, 16 + k, 7);
      finish_round (&l, p, TRUE, FALSE, 0, "one member alone");
      add_own (&l, 3);
      add_member (&l, RLX_PRECISION_F16, 17 + k, 2);
      finish_round (&l, p, FALSE, FALSE, 0, "without feedback");
      leader_clear (&l);
    }
}

static void
test_cpu_round_bits (void)
{
  check_round_bits ("cpu", rlx_model_get (RLX_MODEL_MNIST_CNN));
}

static void
test_vk_round_bits (void)
{
  if (!need_device ())
    return;
  check_round_bits (VK_SPEC, rlx_model_get (RLX_MODEL_MNIST_CNN));
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

/* mnist-mlp: seven hash chunks, the last one short */
static void
test_vk_round_mlp (void)
{
  Leader l;

  if (!need_device ())
    return;
  if (!leader_init (&l, VK_SPEC, rlx_model_get (RLX_MODEL_MNIST_MLP), 5))
    {
      leader_clear (&l);
      return;
    }
  for (guint r = 0; r < 3; r++)
    {
      add_own (&l, r);
      if (r > 0)
        add_member (&l, RLX_PRECISION_F8E4M3, 40 + r, 3);
      finish_round (&l, RLX_PRECISION_F8E4M3, TRUE, FALSE, 0, "mnist-mlp");
    }
  leader_clear (&l);
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

/* ── the next own gradient behind the finish ─────────────────────────── */

static guint64
ahead_taken (RlxBackend *be)
{
  RlxVkTimings t = { 0 };

  if (rlx_backend_vk_trainer (be) != NULL && rlx_backend_params_on_device (be))
    rlx_vk_trainer_timings (rlx_backend_vk_trainer (be), &t);
  return t.ahead_taken;
}

static void
check_ahead (const char *spec)
{
  g_autoptr(GError) error = NULL;
  gboolean device;
  guint64 taken;
  Leader l;

  if (!leader_init (&l, spec, rlx_model_get (RLX_MODEL_MNIST_CNN), 21))
    {
      leader_clear (&l);
      return;
    }
  device = rlx_backend_params_on_device (l.be);
  taken = ahead_taken (l.be);
  /* a one-rank cohort: each finish names the next slice */
  for (guint s = 0; s < 4; s++)
    {
      add_own (&l, s);
      finish_round (&l, RLX_PRECISION_F16, TRUE, TRUE, s + 1, "one rank, ahead");
    }
  /* rounds 1..3 took the gradient computed ahead */
  g_assert_cmpuint (ahead_taken (l.be), ==, taken + (device ? 3 : 0));
  /* the next round asks for other samples than the finish named: computed again */
  add_own (&l, 9);
  add_member (&l, RLX_PRECISION_F8E4M3, 50, 4);
  finish_round (&l, RLX_PRECISION_F16, TRUE, TRUE, 10, "other samples than named");
  g_assert_cmpuint (ahead_taken (l.be), ==, taken + (device ? 3 : 0));
  /* an update applied in between: the replica changed, computed again */
  {
    g_autofree guint8 *codes = g_malloc (l.n * 2);
    g_autofree float *d = g_new (float, l.n);
    double scale;

    fill_values (d, l.n, 51, 1e-3f);
    scale = rlx_wire_scale_for (d, l.n, RLX_PRECISION_F16);
    rlx_wire_quantize (d, l.n, RLX_PRECISION_F16, scale, codes);
    g_assert_true (rlx_backend_apply_update (l.be, codes, l.n, RLX_PRECISION_F16, scale, &error));
    g_assert_true (rlx_backend_apply_update (l.member, codes, l.n, RLX_PRECISION_F16, scale,
                                             &error));
    g_assert_no_error (error);
    rlx_wire_dequantize (codes, l.n, RLX_PRECISION_F16, scale, d);
    for (gsize i = 0; i < l.n; i++)
      l.params[i] -= d[i];
    /* its hash: the update is applied now, nothing is left queued */
    {
      guint64 h;
      g_assert_true (rlx_backend_params_hash (l.be, &h, &error));
      g_assert_cmphex (h, ==, rlx_params_hash (l.params, l.n));
    }
  }
  add_own (&l, 10);
  finish_round (&l, RLX_PRECISION_F16, TRUE, TRUE, 11, "after an update");
  g_assert_cmpuint (ahead_taken (l.be), ==, taken + (device ? 3 : 0));
  /* a round of members alone: the gradient computed ahead is dropped */
  add_member (&l, RLX_PRECISION_F16, 52, 4);
  finish_round (&l, RLX_PRECISION_F16, TRUE, TRUE, 12, "members alone, ahead dropped");
  add_own (&l, 12);
  finish_round (&l, RLX_PRECISION_F16, TRUE, FALSE, 0, "after the dropped one");
  g_assert_cmpuint (ahead_taken (l.be), ==, taken + (device ? 4 : 0));
  leader_clear (&l);
}

static void
test_cpu_ahead (void)
{
  check_ahead ("cpu");
}

static void
test_vk_ahead (void)
{
  on_device (check_ahead);
}

/* ── a lone leader's next update made ahead ──────────────────────────────── */

/* The device trainer's counters (all 0 without one). */
static RlxVkTimings
vk_timings (RlxBackend *be)
{
  RlxVkTimings t = { 0 };

  if (rlx_backend_vk_trainer (be) != NULL)
    rlx_vk_trainer_timings (rlx_backend_vk_trainer (be), &t);
  return t;
}

/* On a device, the next gradient the trainer queues gets +Inf at element
 * n / 3 (the CPU backend is poisoned by the caller, right before the
 * round_own that must refuse it). */
static void
poison_next_on_device (Leader *l)
{
  float inf = INFINITY;
  guint32 bits;

  if (rlx_backend_vk_trainer (l->be) == NULL)
    return;
  memcpy (&bits, &inf, 4);
  rlx_vk_trainer_poison_gradient (rlx_backend_vk_trainer (l->be), (guint32) (l->n / 3), bits);
}

/* finish_round as a lone leader's: no codes wanted, the next round
 * expected to be its own alone (@alone), the replica not read (reading it
 * undoes an update made ahead); scale and hash against the reference. */
static void
finish_lone (Leader *l, RlxPrecision p, gboolean alone, guint next_step, const char *what)
{
  g_autoptr(GError) error = NULL;
  g_autofree guint8 *ref_codes = g_malloc (l->n * rlx_precision_element_size (p));
  guint32 idx[BATCH];
  guint64 hash = 0;
  double scale = -1, ref_scale;

  ref_scale = ref_finish (l, p, p != RLX_PRECISION_F32, ref_codes);
  indices_for (idx, next_step);
  g_test_message ("%s: %s at %s", l->spec, what, rlx_precision_to_string (p));
  rlx_backend_round_expect_alone (l->be, alone);
  g_assert_true (rlx_backend_round_finish (l->be, LR, p, TRUE, idx, BATCH, NULL, &scale, &hash,
                                           &error));
  g_assert_no_error (error);
  g_assert_cmpfloat (scale, ==, ref_scale);
  if (hash != rlx_params_hash (l->params, l->n))
    g_error ("%s (%s): hash %016" G_GINT64_MODIFIER "x, the reference's %016" G_GINT64_MODIFIER
             "x", what, l->spec, hash, rlx_params_hash (l->params, l->n));
}

static void
assert_replica (Leader *l, const char *what)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *got = g_new (float, l->n);

  g_assert_true (rlx_backend_read_params (l->be, got, &error));
  g_assert_no_error (error);
  assert_same_bits (got, l->params, l->n, what);
}

/* A one-rank leader tells each finish that the next round is its own
 * alone: on a device each finish also makes that round's update, right
 * behind its own gradient, and the next finish claims it — every claimed
 * round gives the reference's scale and hash. Then every way the next round
 * can turn out otherwise, each right after a finish that made the next
 * update ahead: a member's bucket joins it; it is cancelled; its samples
 * change; its precision changes; the replica is read; its own gradient is
 * not finite; the round before it is refused (the update made ahead must
 * not apply). Each time the results are the reference's (which never made
 * anything ahead), and the replica is the reference's, bit for bit. */
static void
check_presub (const char *spec)
{
  g_autoptr(GError) error = NULL;
  gboolean device;
  guint64 taken0, taken;
  guint32 idx[BATCH];
  float loss;
  Leader l;

  if (!leader_init (&l, spec, rlx_model_get (RLX_MODEL_MNIST_MLP), 31))
    {
      leader_clear (&l);
      return;
    }
  device = rlx_backend_params_on_device (l.be);
  taken0 = vk_timings (l.be).presub_taken;
  /* rounds 0..5: the first at f16 resets into the residual (mode 2), so
   * round 1's is not made ahead; rounds 2..5 are claimed */
  for (guint s = 0; s < 6; s++)
    {
      add_own (&l, s);
      finish_lone (&l, RLX_PRECISION_F16, TRUE, s + 1, "lone chain");
    }
  taken = vk_timings (l.be).presub_taken;
  g_assert_cmpuint (taken, ==, taken0 + (device ? 4 : 0));
  assert_replica (&l, "after the chain (the update made ahead undone by the read)");

  /* a member's bucket joins the round made ahead */
  add_own (&l, 6);
  finish_lone (&l, RLX_PRECISION_F16, TRUE, 7, "lone again");
  add_own (&l, 7);
  add_member (&l, RLX_PRECISION_F8E4M3, 70, 3);
  finish_lone (&l, RLX_PRECISION_F16, TRUE, 8, "a member joined");
  /* cancelled (a round abandoned), then the same samples again */
  rlx_backend_round_cancel (l.be);
  add_own (&l, 8);
  finish_lone (&l, RLX_PRECISION_F16, TRUE, 9, "after a cancel");
  /* other samples than named */
  add_own (&l, 20);
  finish_lone (&l, RLX_PRECISION_F16, TRUE, 21, "other samples");
  /* the precision changes */
  add_own (&l, 21);
  finish_lone (&l, RLX_PRECISION_F8E4M3, TRUE, 22, "precision changed");
  /* none of these rounds was the one made ahead */
  g_assert_cmpuint (vk_timings (l.be).presub_taken, ==, taken);
  /* the replica read while an update made ahead waits */
  assert_replica (&l, "read with an update made ahead");
  add_own (&l, 22);
  finish_lone (&l, RLX_PRECISION_F8E4M3, TRUE, 23, "after the read");
  /* the own gradient computed ahead is not finite: it does not join, its
   * update made ahead is refused on the device */
  add_own (&l, 23);
  /* the gradient the finish queues ahead is poisoned */
  poison_next_on_device (&l);
  finish_lone (&l, RLX_PRECISION_F8E4M3, TRUE, 24, "ahead of a poisoned gradient");
  if (!device)
    rlx_backend_poison_gradient (l.be, l.n / 3, INFINITY);
  indices_for (idx, 24);
  g_assert_false (rlx_backend_round_own (l.be, idx, BATCH, &loss, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE);
  g_clear_error (&error);
  add_member (&l, RLX_PRECISION_F16, 71, 4);
  finish_lone (&l, RLX_PRECISION_F8E4M3, TRUE, 25, "a member alone after the poison");
  assert_replica (&l, "after the poisoned round");
  /* a refused round (finite buckets that overflow, lr chosen so that its
   * coefficient is the next round's) with the next update made ahead
   * behind it: the refused one changed nothing, so that update is right as
   * it is and is claimed */
  add_own (&l, 25);
  finish_lone (&l, RLX_PRECISION_F8E4M3, TRUE, 26, "before the overflow");
  {
    double scale;
    guint64 hash;

    for (gsize i = 0; i < l.n; i++)
      ((float *) l.bucket)[i] = i == 9 ? 3e38f : 1e-3f;
    g_assert_true (rlx_backend_round_add (l.be, l.bucket, l.n, RLX_PRECISION_F32, 1.0, 1, &error));
    g_assert_true (rlx_backend_round_add (l.be, l.bucket, l.n, RLX_PRECISION_F32, 1.0, 1, &error));
    g_assert_no_error (error);
    indices_for (idx, 26);
    rlx_backend_round_expect_alone (l.be, TRUE);
    g_assert_false (rlx_backend_round_finish (l.be, 2 * LR, RLX_PRECISION_F8E4M3, TRUE, idx,
                                              BATCH, NULL, &scale, &hash, &error));
    g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE);
    g_clear_error (&error);
  }
  taken = vk_timings (l.be).presub_taken;
  add_own (&l, 26);
  finish_lone (&l, RLX_PRECISION_F8E4M3, TRUE, 27, "after the refused round");
  g_assert_cmpuint (vk_timings (l.be).presub_taken, ==, taken + (device ? 1 : 0));
  add_own (&l, 27);
  finish_lone (&l, RLX_PRECISION_F8E4M3, FALSE, 28, "the last, nothing ahead");
  assert_replica (&l, "at the end");
  leader_clear (&l);
}

static void
test_cpu_presub (void)
{
  check_presub ("cpu");
}

static void
test_vk_presub (void)
{
  on_device (check_presub);
}

/* ── a lone leader's f32 round in one pass ────────────────────────────── */

/* A finish whose update overflows (lr so large that its coefficient is
 * +Inf): refused, and the reference round given up with it. */
static void
finish_overflow (Leader *l, guint next_step, const char *what)
{
  g_autoptr(GError) error = NULL;
  guint32 idx[BATCH];
  double scale;
  guint64 hash;

  indices_for (idx, next_step);
  g_test_message ("%s: %s", l->spec, what);
  rlx_backend_round_expect_alone (l->be, TRUE);
  g_assert_false (rlx_backend_round_finish (l->be, 1e39, RLX_PRECISION_F32, TRUE, idx, BATCH,
                                            NULL, &scale, &hash, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE);
  g_assert_cmpuint (rlx_backend_round_size (l->be), ==, 0);
  l->k = 0;
  l->total = 0;
}

/* A lone leader at f32 with no codes wanted: on a device each round
 * finishes in one pass (round_lone.comp: the update, its apply and the
 * hash), plain and made ahead, with the reference's scale, hash and
 * replica bit for bit. Then updates that overflow, which that pass must
 * never write: one finished plainly, and one made ahead behind it (on the
 * device that one was written ahead and must be undone). Both are refused,
 * and the replica and the rounds after them are the reference's. */
static void
check_lone (const char *spec)
{
  gboolean device;
  guint64 lone0;
  Leader l;

  if (!leader_init (&l, spec, rlx_model_get (RLX_MODEL_MNIST_MLP), 41))
    {
      leader_clear (&l);
      return;
    }
  device = rlx_backend_params_on_device (l.be);
  lone0 = vk_timings (l.be).lone_taken;
  for (guint s = 0; s < 4; s++)
    {
      add_own (&l, s);
      finish_lone (&l, RLX_PRECISION_F32, FALSE, s + 1, "alone, nothing made ahead");
    }
  /* rounds 4..8: 4 plain (it makes 5 ahead), 5..8 claimed */
  for (guint s = 4; s < 9; s++)
    {
      add_own (&l, s);
      finish_lone (&l, RLX_PRECISION_F32, TRUE, s + 1, "alone, made ahead");
    }
  g_assert_cmpuint (vk_timings (l.be).lone_taken, ==, lone0 + (device ? 9 : 0));
  assert_replica (&l, "after the lone rounds");

  add_own (&l, 9);
  finish_overflow (&l, 10, "an update that overflows");
  add_own (&l, 10);
  finish_overflow (&l, 11, "an update that overflows, made ahead behind the first");
  assert_replica (&l, "after the overflowing rounds");
  add_own (&l, 11);
  finish_lone (&l, RLX_PRECISION_F32, FALSE, 12, "after them");
  assert_replica (&l, "at the end");
  leader_clear (&l);
}

static void
test_cpu_lone (void)
{
  check_lone ("cpu");
}

/* ── a lone leader's next gradient queued early ───────────────────────── */

/* finish_lone, naming the samples of the round after the next one too
 * (step @after_step), as a lone leader does. */
static void
finish_after (Leader *l, guint next_step, guint after_step, const char *what)
{
  guint32 after[BATCH];

  indices_for (after, after_step);
  rlx_backend_round_after (l->be, after, BATCH);
  finish_lone (l, RLX_PRECISION_F32, TRUE, next_step, what);
}

/* A lone leader at f32 that names the round after next's samples: on a
 * device, behind the next round's gradient and its update made ahead goes
 * the gradient of the round after it, so two rounds are always on the
 * queue, and every claimed round gives the reference's scale and hash.
 * Then every way a round can turn out otherwise with that gradient queued
 * (it overwrote the round's own gradient): a member's bucket joins it,
 * before its own gradient and after; it is cancelled; the rounds have
 * other samples than named; the replica is read; its update overflows.
 * Each time the own gradient must be made again, bit for bit, and the
 * results are the reference's.
 * The gradient queued after next goes without its check, which the
 * update made ahead behind it folds in: the rounds' losses are the
 * reference's when that update is there, when none follows it (the next
 * round not expected alone: the check runs then), and a poisoned one is
 * refused, naming its element, with the replica the reference's after. */
static void
check_early (const char *spec)
{
  gboolean device;
  guint64 early0, early, fold0, fold;
  guint32 idx[BATCH];
  float loss;
  g_autoptr(GError) error = NULL;
  g_autofree char *element = NULL;
  Leader l;

  if (!leader_init (&l, spec, rlx_model_get (RLX_MODEL_MNIST_MLP), 43))
    {
      leader_clear (&l);
      return;
    }
  device = rlx_backend_params_on_device (l.be);
  early0 = vk_timings (l.be).early_taken;
  fold0 = vk_timings (l.be).fold_taken;
  /* round 0 queues round 1's gradient and update and round 2's gradient;
   * rounds 1..7 are claimed with the next one's gradient queued after */
  for (guint s = 0; s < 8; s++)
    {
      add_own (&l, s);
      finish_after (&l, s + 1, s + 2, "lone, two rounds queued");
    }
  early = vk_timings (l.be).early_taken;
  g_assert_cmpuint (early, ==, early0 + (device ? 7 : 0));
  /* rounds 2..7's checks came with their updates made ahead */
  g_assert_cmpuint (vk_timings (l.be).fold_taken, ==, fold0 + (device ? 6 : 0));

  /* a member's bucket joins a round whose next gradient is queued */
  add_own (&l, 8);
  add_member (&l, RLX_PRECISION_F16, 80, 5);
  finish_after (&l, 9, 10, "a member joined after the own gradient");
  /* ... and before the own gradient (added to it at once) */
  add_own (&l, 9);
  finish_after (&l, 10, 11, "lone again");
  add_member (&l, RLX_PRECISION_F8E4M3, 81, 6);
  add_own (&l, 10);
  finish_after (&l, 11, 12, "a member joined before the own gradient");
  /* cancelled with the next gradient queued, then the round again */
  add_own (&l, 11);
  finish_after (&l, 12, 13, "lone again");
  add_own (&l, 12);
  rlx_backend_round_cancel (l.be);
  l.k = 0;
  l.total = 0;
  add_own (&l, 12);
  finish_after (&l, 13, 14, "after a cancel");
  /* the rounds are not the ones named */
  add_own (&l, 13);
  finish_after (&l, 14, 40, "the round after next named wrongly");
  add_own (&l, 14);
  finish_after (&l, 15, 16, "its own gradient as named");
  add_own (&l, 15);
  finish_after (&l, 16, 17, "the next round not as named");
  add_own (&l, 20);
  finish_after (&l, 21, 22, "other samples");
  /* the replica read with the next gradient queued */
  add_own (&l, 21);
  finish_after (&l, 22, 23, "lone again");
  add_own (&l, 22);
  assert_replica (&l, "read with the next gradient queued");
  finish_after (&l, 23, 24, "after the read");
  /* an update that overflows, with the next gradient queued behind it */
  add_own (&l, 23);
  finish_after (&l, 24, 25, "lone again");
  add_own (&l, 24);
  finish_overflow (&l, 25, "an update that overflows, the next gradient queued");
  assert_replica (&l, "after the overflowing round");
  for (guint s = 25; s < 28; s++)
    {
      add_own (&l, s);
      finish_after (&l, s + 1, s + 2, "lone again");
    }
  /* round 29's gradient, queued without its check, with no update made
   * ahead behind it: the round after it is not expected to be ours alone */
  add_own (&l, 28);
  indices_for (idx, 30);
  rlx_backend_round_after (l.be, idx, BATCH);
  finish_lone (&l, RLX_PRECISION_F32, FALSE, 29, "the next round not expected alone");
  fold = vk_timings (l.be).fold_taken;
  add_own (&l, 29);
  g_assert_cmpuint (vk_timings (l.be).fold_taken, ==, fold);
  finish_after (&l, 30, 31, "lone again");
  for (guint s = 30; s < 33; s++)
    {
      add_own (&l, s);
      finish_after (&l, s + 1, s + 2, "lone again");
    }
  g_assert_cmpuint (vk_timings (l.be).fold_taken, ==, fold + (device ? 2 : 0));
  /* the gradient queued after next (35's) is poisoned: its update made
   * ahead finds it, and it is refused as its check would refuse it */
  add_own (&l, 33);
  poison_next_on_device (&l);
  finish_after (&l, 34, 35, "the gradient after next poisoned");
  add_own (&l, 34);
  finish_after (&l, 35, 36, "before the poisoned round");
  if (!device)
    rlx_backend_poison_gradient (l.be, l.n / 3, INFINITY);
  indices_for (idx, 35);
  g_assert_false (rlx_backend_round_own (l.be, idx, BATCH, &loss, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE);
  element = g_strdup_printf ("+Inf (element %u ", (guint) (l.n / 3));
  if (strstr (error->message, element) == NULL)
    g_error ("%s: the refusal does not name %s: %s", spec, element, error->message);
  g_clear_error (&error);
  add_member (&l, RLX_PRECISION_F16, 82, 4);
  finish_after (&l, 36, 37, "a member alone after the poison");
  assert_replica (&l, "after the poisoned round");
  for (guint s = 36; s < 39; s++)
    {
      add_own (&l, s);
      finish_after (&l, s + 1, s + 2, "lone again");
    }
  add_own (&l, 39);
  finish_lone (&l, RLX_PRECISION_F32, FALSE, 40, "the last, nothing ahead");
  assert_replica (&l, "at the end");
  if (device)
    g_assert_cmpuint (vk_timings (l.be).early_taken, >, early + 5);
  leader_clear (&l);
}

static void
test_cpu_early (void)
{
  check_early ("cpu");
}

static void
test_vk_early (void)
{
  on_device (check_early);
}

static void
test_vk_lone (void)
{
  on_device (check_lone);
}

/* ── refusals ─────────────────────────────────────────────────────────── */

static void
check_round_refusals (const char *spec)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *before = NULL, *after = NULL;
  guint32 idx[BATCH];
  const void *codes;
  double scale;
  guint64 hash;
  float loss;
  Leader l;

  if (!leader_init (&l, spec, rlx_model_get (RLX_MODEL_MNIST_CNN), 31))
    {
      leader_clear (&l);
      return;
    }
  before = g_new (float, l.n);
  after = g_new (float, l.n);
  indices_for (idx, 0);

  /* nothing to finish */
  g_assert_false (rlx_backend_round_finish (l.be, LR, RLX_PRECISION_F16, TRUE, NULL, 0, &codes,
                                            &scale, &hash, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED);
  g_assert_nonnull (strstr (error->message, "no gradient"));
  g_clear_error (&error);

  /* a bucket of the wrong length, a bad scale, no samples */
  memset (l.bucket, 0, l.n * 2);
  g_assert_false (rlx_backend_round_add (l.be, l.bucket, l.n - 1, RLX_PRECISION_F16, 1.0, 4,
                                         &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED);
  g_clear_error (&error);
  g_assert_false (rlx_backend_round_add (l.be, l.bucket, l.n, RLX_PRECISION_F16, -1.0, 4, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED);
  g_clear_error (&error);
  g_assert_false (rlx_backend_round_add (l.be, l.bucket, l.n, RLX_PRECISION_F16, 1.0, 0, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED);
  g_clear_error (&error);
  g_assert_cmpuint (rlx_backend_round_size (l.be), ==, 0);

  /* a non-finite own gradient does not join; the round goes on */
  rlx_backend_poison_gradient (l.be, l.n / 2, NAN);
  g_assert_false (rlx_backend_round_own (l.be, idx, BATCH, &loss, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE);
  g_assert_nonnull (strstr (error->message, "not added to the round"));
  g_clear_error (&error);
  g_assert_cmpuint (rlx_backend_round_size (l.be), ==, 0);
  add_member (&l, RLX_PRECISION_F16, 60, 3);

  /* a bucket with a NaN (f16 0x7e00) or -Inf (E5M2 0xfc) code is refused */
  {
    const struct { RlxPrecision p; guint32 code; gsize at; } bad[] = {
      { RLX_PRECISION_F16, 0x7e00, 17 }, { RLX_PRECISION_F8E5M2, 0xfc, 3 },
      { RLX_PRECISION_F8E4M3, 0x7f, 20000 }, { RLX_PRECISION_F32, 0x7f800000u, 5 },
    };

    for (guint c = 0; c < G_N_ELEMENTS (bad); c++)
      {
        gsize es = rlx_precision_element_size (bad[c].p);
        memset (l.bucket, 0, l.n * es);
        memcpy (l.bucket + bad[c].at * es, &bad[c].code, es);
        g_assert_false (rlx_backend_round_add (l.be, l.bucket, l.n, bad[c].p, 2.0, 4, &error));
        g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE);
        g_assert_nonnull (strstr (error->message, "refused"));
        g_clear_error (&error);
        g_assert_cmpuint (rlx_backend_round_size (l.be), ==, 1);
      }
  }
  /* the round is what it would have been without them */
  add_own (&l, 1);
  g_assert_false (rlx_backend_round_own (l.be, idx, BATCH, &loss, &error));   /* twice */
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED);
  g_clear_error (&error);
  finish_round (&l, RLX_PRECISION_F8E4M3, TRUE, FALSE, 0, "after refusals");

  /* finite buckets whose sum overflows: refused, replica and residual kept */
  g_assert_true (rlx_backend_read_params (l.be, before, &error));
  for (gsize i = 0; i < l.n; i++)
    ((float *) l.bucket)[i] = i == 7 ? 3e38f : 1e-3f;
  g_assert_true (rlx_backend_round_add (l.be, l.bucket, l.n, RLX_PRECISION_F32, 1.0, 1, &error));
  g_assert_true (rlx_backend_round_add (l.be, l.bucket, l.n, RLX_PRECISION_F32, 1.0, 1, &error));
  g_assert_no_error (error);
  g_assert_false (rlx_backend_round_finish (l.be, 1.0, RLX_PRECISION_F8E4M3, TRUE, NULL, 0,
                                            &codes, &scale, &hash, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, "element 7"));
  g_clear_error (&error);
  g_assert_cmpuint (rlx_backend_round_size (l.be), ==, 0);
  g_assert_true (rlx_backend_read_params (l.be, after, &error));
  assert_same_bits (after, before, l.n, "replica after an overflowing round");
  /* the residual too: the next round equals the reference's next */
  add_own (&l, 2);
  finish_round (&l, RLX_PRECISION_F8E4M3, TRUE, FALSE, 0, "after the overflow");

  /* cancel drops a round; load drops one too */
  add_member (&l, RLX_PRECISION_F16, 61, 2);
  rlx_backend_round_cancel (l.be);
  l.k = 0;
  l.total = 0;
  g_assert_cmpuint (rlx_backend_round_size (l.be), ==, 0);
  add_member (&l, RLX_PRECISION_F16, 62, 2);
  g_assert_true (rlx_backend_load_params (l.be, l.params, &error));
  g_assert_no_error (error);
  l.k = 0;
  l.total = 0;
  g_assert_cmpuint (rlx_backend_round_size (l.be), ==, 0);
  add_own (&l, 3);
  finish_round (&l, RLX_PRECISION_F8E4M3, TRUE, FALSE, 0, "after cancel and load");
  leader_clear (&l);
}

static void
test_cpu_round_refusals (void)
{
  check_round_refusals ("cpu");
}

static void
test_vk_round_refusals (void)
{
  on_device (check_round_refusals);
}

/* ── the hash on the device ───────────────────────────────────────────── */

static void
test_vk_hash_bits (void)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_MLP);
  const gsize sizes[] = {
    1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 16383, 16384, 16385,
    32767, 32768, 4 * 16384 + 3, 5 * 16384 + 8, 101770,
  };
  g_autoptr(RlxBackend) be = NULL;
  g_autofree guint32 *v = g_new (guint32, model->n_params);
  guint32 x = 12345;

  if (!need_device ())
    return;
  be = open_backend (VK_SPEC, model);
  if (be == NULL)
    return;
  g_assert_true (rlx_backend_params_on_device (be));
  for (guint z = 0; z < G_N_ELEMENTS (sizes); z++)
    {
      g_autoptr(GError) error = NULL;
      guint64 h = 0;

      /* any bits at all: the hash reads them as they are (NaNs included) */
      for (gsize i = 0; i < sizes[z]; i++)
        v[i] = xorshift (&x);
      g_assert_true (rlx_vk_trainer_hash_test (rlx_backend_vk_trainer (be), (const float *) v,
                                               sizes[z], &h, &error));
      g_assert_no_error (error);
      if (h != rlx_params_hash ((const float *) v, sizes[z]))
        g_error ("the device's hash of %" G_GSIZE_FORMAT " values is %016" G_GINT64_MODIFIER
                 "x, rlx_params_hash's %016" G_GINT64_MODIFIER "x", sizes[z], h,
                 rlx_params_hash ((const float *) v, sizes[z]));
    }
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

/* params_hash after a load, an update, a step: the replica's hash, with no
 * parameter-sized transfer */
static void
test_vk_params_hash (void)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autoptr(RlxBackend) be = NULL;
  g_autoptr(GError) error = NULL;
  gsize n = model->n_params;
  g_autofree float *p = g_new (float, n);
  g_autofree float *d = g_new (float, n);
  g_autofree guint8 *codes = g_malloc (n);
  guint32 idx[BATCH];
  guint64 h, bytes;
  double scale;
  float loss;

  if (!need_device ())
    return;
  be = open_backend (VK_SPEC, model);
  if (be == NULL)
    return;
  rlx_model_init_params (model, 8, p);
  g_assert_true (rlx_backend_load_params (be, p, &error));
  bytes = rlx_backend_host_bytes (be);
  g_assert_true (rlx_backend_params_hash (be, &h, &error));
  g_assert_no_error (error);
  g_assert_cmphex (h, ==, rlx_params_hash (p, n));
  g_assert_cmpuint (rlx_backend_host_bytes (be), ==, bytes);

  for (guint s = 0; s < 3; s++)
    {
      fill_values (d, n, 70 + s, 1e-3f);
      scale = rlx_wire_scale_for (d, n, RLX_PRECISION_F8E5M2);
      rlx_wire_quantize (d, n, RLX_PRECISION_F8E5M2, scale, codes);
      g_assert_true (rlx_backend_apply_update (be, codes, n, RLX_PRECISION_F8E5M2, scale, &error));
      g_assert_no_error (error);
      rlx_wire_dequantize (codes, n, RLX_PRECISION_F8E5M2, scale, d);
      for (gsize i = 0; i < n; i++)
        p[i] -= d[i];
      if (s == 1)
        {
          /* the hash with the update still queued */
          g_assert_true (rlx_backend_params_hash (be, &h, &error));
          g_assert_cmphex (h, ==, rlx_params_hash (p, n));
          continue;
        }
      /* a step hashes the replica in its own submission */
      indices_for (idx, s);
      g_assert_nonnull (rlx_backend_grads_wire_map (be, idx, BATCH, RLX_PRECISION_F16, TRUE, &loss,
                                                    &scale, &error));
      g_assert_no_error (error);
      bytes = rlx_backend_host_bytes (be);
      g_assert_true (rlx_backend_params_hash (be, &h, &error));
      g_assert_cmphex (h, ==, rlx_params_hash (p, n));
      g_assert_cmpuint (rlx_backend_host_bytes (be), ==, bytes);
    }
  g_assert_cmpuint (rlx_vk_validation_messages (), ==, 0);
}

/* ── zero-copy calls ──────────────────────────────────────────────────── */

/* update_begin/commit and grads_wire_map against apply_update and
 * grads_wire on a twin backend: the same bits, and no parameter-sized host
 * copy on a device */
static void
check_zero_copy (const char *spec)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_CNN);
  g_autoptr(RlxBackend) a = NULL, b = NULL;
  g_autoptr(GError) error = NULL;
  gsize n = model->n_params;
  g_autofree float *p = g_new (float, n);
  g_autofree float *pa = g_new (float, n);
  g_autofree float *pb = g_new (float, n);
  g_autofree guint8 *codes = g_malloc (n * 4);
  g_autofree guint8 *ga = g_malloc (n * 4);
  gboolean device;

  a = open_backend (spec, model);
  b = a != NULL ? open_backend (spec, model) : NULL;
  if (b == NULL)
    return;
  device = rlx_backend_params_on_device (b);
  rlx_model_init_params (model, 4, p);
  g_assert_true (rlx_backend_load_params (a, p, &error));
  g_assert_true (rlx_backend_load_params (b, p, &error));
  for (guint s = 0; s < 4; s++)
    {
      RlxPrecision prec = all_precisions[s];
      gsize es = rlx_precision_element_size (prec);
      guint64 bytes;
      double scale, sa, sb;
      float la, lb;
      void *dst;
      const void *gb;
      guint32 idx[BATCH];

      fill_values (pa, n, 80 + s, 1e-2f);
      scale = rlx_wire_scale_for (pa, n, prec);
      rlx_wire_quantize (pa, n, prec, scale, codes);
      g_assert_true (rlx_backend_apply_update (a, codes, n, prec, scale, &error));
      bytes = rlx_backend_host_bytes (b);
      dst = rlx_backend_update_begin (b, prec, &error);
      g_assert_nonnull (dst);
      memcpy (dst, codes, n * es);
      g_assert_true (rlx_backend_update_commit (b, prec, scale, &error));
      g_assert_no_error (error);
      indices_for (idx, s);
      g_assert_true (rlx_backend_grads_wire (a, idx, BATCH, prec, TRUE, &la, ga, &sa, &error));
      gb = rlx_backend_grads_wire_map (b, idx, BATCH, prec, TRUE, &lb, &sb, &error);
      g_assert_no_error (error);
      g_assert_nonnull (gb);
      if (device)
        g_assert_cmpuint (rlx_backend_host_bytes (b), ==, bytes);
      g_assert_cmpfloat (la, ==, lb);
      g_assert_cmpfloat (sa, ==, sb);
      g_assert_cmpmem (ga, n * es, gb, n * es);
      rlx_backend_accept_feedback (a);
      rlx_backend_accept_feedback (b);
    }
  g_assert_true (rlx_backend_read_params (a, pa, &error));
  g_assert_true (rlx_backend_read_params (b, pb, &error));
  assert_same_bits (pb, pa, n, "zero-copy against copying calls");

  /* a corrupt update committed without a host check: refused, the replica
   * untouched; on the CPU at once, on a device by the next call there */
  {
    guint32 idx[BATCH];
    guint64 h;
    double sc;
    float loss;
    guint16 *dst = rlx_backend_update_begin (b, RLX_PRECISION_F16, &error);

    g_assert_nonnull (dst);
    memset (dst, 0, n * 2);
    dst[n - 3] = 0xfc00;   /* -Inf */
    indices_for (idx, 9);
    if (device)
      {
        g_assert_true (rlx_backend_update_commit (b, RLX_PRECISION_F16, 4.0, &error));
        g_assert_no_error (error);
        g_assert_null (rlx_backend_grads_wire_map (b, idx, BATCH, RLX_PRECISION_F16, TRUE, &loss,
                                                   &sc, &error));
      }
    else
      g_assert_false (rlx_backend_update_commit (b, RLX_PRECISION_F16, 4.0, &error));
    g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_NOT_FINITE);
    g_test_message ("%s", error->message);
    g_assert_nonnull (strstr (error->message, "not applied"));
    g_clear_error (&error);
    /* the calls after work, on the replica as it was */
    g_assert_nonnull (rlx_backend_grads_wire_map (b, idx, BATCH, RLX_PRECISION_F16, TRUE, &loss,
                                                  &sc, &error));
    g_assert_no_error (error);
    g_assert_true (rlx_backend_read_params (b, pb, &error));
    assert_same_bits (pb, pa, n, "replica after a refused update");
    g_assert_true (rlx_backend_params_hash (b, &h, &error));
    g_assert_cmphex (h, ==, rlx_params_hash (pa, n));
  }
}

static void
test_cpu_zero_copy (void)
{
  check_zero_copy ("cpu");
}

static void
test_vk_zero_copy (void)
{
  on_device (check_zero_copy);
}

/* ── one instance for many backends ───────────────────────────────────── */

static void
test_vk_reopen (void)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_CNN);

  if (!need_device ())
    return;
  /* on the H200 the driver refused the ~25th instance of a process that
   * made one per backend */
  for (guint k = 0; k < 30; k++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(RlxVkTrainer) t = rlx_vk_trainer_new (0, model, dataset, 1, RLX_VK_COMPUTE_F32, &error);
      g_autoptr(GPtrArray) devices = rlx_vk_enumerate (&error);

      g_assert_no_error (error);
      g_assert_nonnull (t);
      g_assert_nonnull (devices);
    }
  g_assert_cmpuint (rlx_vk_instances_made (), ==, 1);
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
                                                       dataset, BATCH, &local);

    have_device = probe != NULL && rlx_backend_params_on_device (probe);
    if (probe != NULL)
      g_test_message ("Vulkan tests on %s (%s), parameters on the device: %s",
                      rlx_backend_device (probe), VK_SPEC, have_device ? "yes" : "no");
    else
      g_test_message ("no device for %s: %s", VK_SPEC, local->message);
    if (!have_device && g_getenv ("CI") != NULL)
      g_error ("CI is set but %s cannot keep parameters on the device (%s): install "
               "mesa-vulkan-drivers (scripts/deps.sh does)", VK_SPEC,
               local != NULL ? local->message : rlx_backend_fallback (probe));
  }

  g_test_add_func ("/backend/round/cpu/bits", test_cpu_round_bits);
  g_test_add_func ("/backend/round/cpu/ahead", test_cpu_ahead);
  g_test_add_func ("/backend/round/cpu/refusals", test_cpu_round_refusals);
  g_test_add_func ("/backend/round/cpu/ahead-update", test_cpu_presub);
  g_test_add_func ("/backend/round/cpu/lone-f32", test_cpu_lone);
  g_test_add_func ("/backend/round/cpu/early-next", test_cpu_early);
  g_test_add_func ("/backend/zero-copy/cpu", test_cpu_zero_copy);
  g_test_add_func ("/backend/round/vulkan/bits", test_vk_round_bits);
  g_test_add_func ("/backend/round/vulkan/mnist-mlp", test_vk_round_mlp);
  g_test_add_func ("/backend/round/vulkan/ahead", test_vk_ahead);
  g_test_add_func ("/backend/round/vulkan/refusals", test_vk_round_refusals);
  g_test_add_func ("/backend/round/vulkan/ahead-update", test_vk_presub);
  g_test_add_func ("/backend/round/vulkan/lone-f32", test_vk_lone);
  g_test_add_func ("/backend/round/vulkan/early-next", test_vk_early);
  g_test_add_func ("/backend/zero-copy/vulkan", test_vk_zero_copy);
  g_test_add_func ("/backend/hash/vulkan/bits", test_vk_hash_bits);
  g_test_add_func ("/backend/hash/vulkan/params-hash", test_vk_params_hash);
  g_test_add_func ("/gpu/vulkan/reopen", test_vk_reopen);
  {
    int status = g_test_run ();
    g_clear_pointer (&dataset, rlx_dataset_unref);
    return status;
  }
}
