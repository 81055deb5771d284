/* bench-gpu.c — one training step, timed: samples/s, TFLOP/s and (on
 * Vulkan) the GPU-timestamp breakdown of a step and where its host time goes
 *
 *   bench-gpu [--backend B] [--models a,b] [--batches 64,1024] [--seconds S]
 *             [--mode plain|member|member-copy|leader|leader-sync|leader-member]
 *             [--precision f32|f16|f8e4m3|f8e5m2] [--resident P]
 *
 * Each (model, batch): ten warm-up steps, then steps until S seconds have
 * passed; prints the median step time and, from the GPU timestamps of every
 * step, the medians of its parts. The step of each mode:
 *   plain          `rlx-rank bench`'s: parameters in, gradient and loss out
 *                  (rlx_backend_grads)
 *   member         a cohort member on resident parameters, zero-copy: the
 *                  update's codes at P written straight into the memory the
 *                  device reads (update_begin, one copy from where a frame
 *                  would hold them, update_commit), then the gradient's
 *                  codes at P with error feedback read where they are
 *                  (grads_wire_map)
 *   member-copy    the same through the copying calls (apply_update,
 *                  grads_wire): what the zero-copy calls save
 *   leader         a one-rank cohort's leader: round_own, then round_finish
 *                  at P with the next slice, so the next own gradient runs
 *                  right behind the update (the codes come to the host, as a
 *                  step frame would need them)
 *   leader-sync    the same without the next slice: each round_own waits
 *   leader-member  a leader with one member: round_own, round_add (a
 *                  member's bucket at P, as received), round_finish
 * --resident P is --mode member --precision P.
 * The host columns: the step's wall time less the time it waited for the
 * GPU, and the parameter-sized bytes it copied on the host.
 */
#include "rlx-config.h"
#include "core/rlx-backend.h"
#include "core/rlx-backend-private.h"
#include "gpu/rlx-vk.h"
#include "core/vision/rlx-model.h"
#include "core/vision/rlx-dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
  MODE_PLAIN, MODE_MEMBER, MODE_MEMBER_COPY, MODE_LEADER, MODE_LEADER_SYNC, MODE_LEADER_MEMBER,
  N_MODES
} Mode;

static const char *const mode_names[N_MODES + 1] = {
  "plain", "member", "member-copy", "leader", "leader-sync", "leader-member", NULL
};

/* Multiply-adds ×2 of forward + backward for one sample (no input gradient
 * for the first layer). */
static double
step_flops (const RlxModel *m)
{
  if (m->id == RLX_MODEL_MNIST_CNN)
    {
      double c1 = 784.0 * 16 * 9, c2 = 196.0 * 32 * 144, d = 1568.0 * 10;
      return 2 * ((c1 + c2 + d) * 2 + c2 + d);
    }
  else
    {
      double fwd = 0, dx = 0;
      for (guint l = 0; l < m->n_tensors / 2; l++)
        {
          double mn = (double) m->tensors[2 * l].numel;
          fwd += mn;
          if (l > 0)
            dx += mn;
        }
      return 2 * (2 * fwd + dx);
    }
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static double
median (GArray *v)
{
  if (v->len == 0)
    return 0;
  qsort (v->data, v->len, sizeof (double), cmp_double);
  return g_array_index (v, double, v->len / 2);
}

/* What a case needs besides the backend. */
typedef struct {
  RlxBackend  *be;
  Mode         mode;
  RlxPrecision prec;
  const float *params;
  guint32     *idx;
  guint        batch;
  guint8      *update;    /* a small update (member) or a member's bucket (leader-member) at prec */
  double       uscale;
  guint8      *codes;     /* the copying calls' output */
  float       *grads;
  double       waited;    /* µs the step's calls waited for the GPU */
  RlxVkTimings t;         /* the step's device parts (the calls' sum where they add up) */
} Case;

/* After each backend call: what it waited, and its device parts. */
static void
note_call (Case *c)
{
  RlxVkTrainer *vk = rlx_backend_vk_trainer (c->be);
  RlxVkTimings t;

  if (vk == NULL)
    return;
  rlx_vk_trainer_timings (vk, &t);
  c->waited += t.wait_us;
  if (t.compute_us > 0)
    {
      c->t.upload_us = t.upload_us;
      c->t.compute_us = t.compute_us;
      c->t.download_us = t.download_us;
    }
  c->t.apply_us = MAX (c->t.apply_us, t.apply_us);
  c->t.round_us = MAX (c->t.round_us, t.round_us);
  c->t.hash_us = MAX (c->t.hash_us, t.hash_us);
}

static gboolean
bench_step (Case *c, float *loss, GError **error)
{
  const RlxModel *m = rlx_backend_model (c->be);
  gsize code_bytes = m->n_params * rlx_precision_element_size (c->prec);
  const void *codes;
  double scale;
  guint64 hash;

  c->waited = 0;
  memset (&c->t, 0, sizeof c->t);
  switch (c->mode)
    {
    case MODE_PLAIN:
      if (!rlx_backend_grads (c->be, c->params, c->idx, c->batch, loss, c->grads, error))
        return FALSE;
      note_call (c);
      return TRUE;
    case MODE_MEMBER:
      {
        void *dst = rlx_backend_update_begin (c->be, c->prec, error);
        if (dst == NULL)
          return FALSE;
        memcpy (dst, c->update, code_bytes);
        if (!rlx_backend_update_commit (c->be, c->prec, c->uscale, error))
          return FALSE;
        codes = rlx_backend_grads_wire_map (c->be, c->idx, c->batch, c->prec, TRUE, loss, &scale,
                                            error);
        if (codes == NULL)
          return FALSE;
        note_call (c);
        rlx_backend_accept_feedback (c->be);
        return TRUE;
      }
    case MODE_MEMBER_COPY:
      if (!rlx_backend_apply_update (c->be, c->update, m->n_params, c->prec, c->uscale, error) ||
          !rlx_backend_grads_wire (c->be, c->idx, c->batch, c->prec, TRUE, loss, c->codes, &scale,
                                   error))
        return FALSE;
      note_call (c);
      rlx_backend_accept_feedback (c->be);
      return TRUE;
    case MODE_LEADER:
    case MODE_LEADER_SYNC:
    case MODE_LEADER_MEMBER:
      if (!rlx_backend_round_own (c->be, c->idx, c->batch, loss, error))
        return FALSE;
      note_call (c);
      if (c->mode == MODE_LEADER_MEMBER)
        {
          if (!rlx_backend_round_add (c->be, c->update, m->n_params, c->prec, c->uscale, c->batch,
                                      error))
            return FALSE;
          note_call (c);
        }
      if (!rlx_backend_round_finish (c->be, 1e-3, c->prec, TRUE,
                                     c->mode == MODE_LEADER_SYNC ? NULL : c->idx, c->batch,
                                     &codes, &scale, &hash, error))
        return FALSE;
      note_call (c);
      return TRUE;
    case N_MODES:
    default:
      g_assert_not_reached ();
    }
}

static gboolean
bench_case (const RlxModel *model, guint batch, const char *backend, Mode mode, RlxPrecision prec,
            RlxDataset *dataset, double seconds, GError **error)
{
  g_autoptr(RlxBackend) be = NULL;
  g_autofree float *params = NULL, *grads = NULL;
  g_autofree guint32 *idx = NULL;
  g_autofree guint8 *codes = NULL, *update = NULL;
  g_autoptr(GArray) wall = g_array_new (FALSE, FALSE, sizeof (double));
  g_autoptr(GArray) host = g_array_new (FALSE, FALSE, sizeof (double));
  g_autoptr(GArray) up = g_array_new (FALSE, FALSE, sizeof (double));
  g_autoptr(GArray) comp = g_array_new (FALSE, FALSE, sizeof (double));
  g_autoptr(GArray) down = g_array_new (FALSE, FALSE, sizeof (double));
  g_autoptr(GArray) apply = g_array_new (FALSE, FALSE, sizeof (double));
  g_autoptr(GArray) round = g_array_new (FALSE, FALSE, sizeof (double));
  g_autoptr(GArray) hash = g_array_new (FALSE, FALSE, sizeof (double));
  gboolean resident = mode != MODE_PLAIN, leader = mode >= MODE_LEADER;
  guint64 bytes0;
  double flops, med, t_end;
  float loss;
  Case c;

  be = rlx_backend_resolve (backend, model, dataset, batch, error);
  if (be == NULL)
    return FALSE;
  params = g_new (float, model->n_params);
  grads = g_new (float, model->n_params);
  idx = g_new (guint32, batch);
  rlx_model_init_params (model, 1, params);
  for (guint i = 0; i < batch; i++)
    idx[i] = (i * 7919u) % rlx_dataset_size (dataset, RLX_SPLIT_TRAIN);
  c = (Case) { be, mode, prec, params, idx, batch, NULL, 1.0, NULL, grads, 0, { 0 } };
  if (resident)
    {
      /* a small update at the precision, the same every step (a member's
       * bucket of about a gradient's size for leader-member) */
      codes = g_malloc (model->n_params * 4);
      update = g_malloc (model->n_params * 4);
      for (gsize i = 0; i < model->n_params; i++)
        grads[i] = (leader ? 1e-2f : 1e-4f) * params[i];
      c.uscale = rlx_wire_scale_for (grads, model->n_params, prec);
      rlx_wire_quantize (grads, model->n_params, prec, c.uscale, update);
      c.update = update;
      c.codes = codes;
      if (!rlx_backend_load_params (be, params, error))
        return FALSE;
    }

  for (int i = 0; i < 10; i++)
    if (!bench_step (&c, &loss, error))
      return FALSE;
  bytes0 = rlx_backend_host_bytes (be);
  t_end = g_get_monotonic_time () + seconds * 1e6;
  while (g_get_monotonic_time () < t_end || wall->len < 5)
    {
      gint64 t0 = g_get_monotonic_time ();
      double w;

      if (!bench_step (&c, &loss, error))
        return FALSE;
      w = (double) (g_get_monotonic_time () - t0);
      g_array_append_val (wall, w);
      w -= c.waited;
      g_array_append_val (host, w);
      if (c.t.compute_us > 0)
        {
          g_array_append_val (up, c.t.upload_us);
          g_array_append_val (comp, c.t.compute_us);
          g_array_append_val (down, c.t.download_us);
          g_array_append_val (apply, c.t.apply_us);
          g_array_append_val (round, c.t.round_us);
          g_array_append_val (hash, c.t.hash_us);
        }
    }
  flops = step_flops (model) * batch;
  med = median (wall);
  printf ("%-12s batch %5u %-6s %-13s %-6s %9.0f samples/s  step %8.1f us  %6.2f TFLOP/s",
          model->slug, batch, rlx_backend_name (be), mode_names[mode],
          resident ? rlx_precision_to_string (prec) : "", batch / (med * 1e-6), med,
          flops / (med * 1e-6) / 1e12);
  if (resident && rlx_backend_vk_trainer (be) != NULL && !rlx_backend_params_on_device (be))
    printf ("  (replica on the host)");
  if (comp->len > 0)
    {
      double cm = median (comp);
      printf ("  | GPU in %.1f us, compute %.1f us (%.2f TFLOP/s), %s %.1f us", median (up), cm,
              flops / (cm * 1e-6) / 1e12,
              mode == MODE_PLAIN ? "gradient out" : leader ? "own check" : "wire pass + codes out",
              median (down));
      if (mode == MODE_MEMBER || mode == MODE_MEMBER_COPY)
        printf (", update applied %.1f us", median (apply));
      if (leader)
        printf (", finish %.1f us (hash %.1f)", median (round), median (hash));
    }
  /* member: the step's own copy of the update into the device's memory too */
  printf ("  | host %.1f us, %.0f bytes copied a step  [%u steps, %s]\n", median (host),
          (double) (rlx_backend_host_bytes (be) - bytes0) / wall->len +
          (mode == MODE_MEMBER ? (double) model->n_params * rlx_precision_element_size (prec) : 0),
          wall->len, rlx_backend_device (be));
  fflush (stdout);
  return TRUE;
}

int
main (int argc, char **argv)
{
  g_autofree char *backend_s = NULL, *models_s = NULL, *batches_s = NULL;
  g_autofree char *resident_s = NULL, *mode_s = NULL, *prec_s = NULL;
  double seconds = 2.0;
  GOptionEntry entries[] = {
    { "mode", 0, 0, G_OPTION_ARG_STRING, &mode_s,
      "plain, member, member-copy, leader, leader-sync, leader-member", "M" },
    { "precision", 0, 0, G_OPTION_ARG_STRING, &prec_s, "wire precision of the resident modes", "P" },
    { "resident", 0, 0, G_OPTION_ARG_STRING, &resident_s, "--mode member --precision P", "P" },
    { "backend", 0, 0, G_OPTION_ARG_STRING, &backend_s, "auto, cpu, vulkan, vulkan:NAME", "B" },
    { "models", 0, 0, G_OPTION_ARG_STRING, &models_s, "comma-separated model slugs", "M" },
    { "batches", 0, 0, G_OPTION_ARG_STRING, &batches_s, "comma-separated batch sizes", "B" },
    { "seconds", 0, 0, G_OPTION_ARG_DOUBLE, &seconds, "measuring time per case", "S" },
    { NULL }
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("- time training steps");
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxDataset) dataset = NULL;
  g_auto(GStrv) models = NULL, batches = NULL;
  RlxPrecision prec = RLX_PRECISION_F32;
  Mode mode = MODE_PLAIN;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error))
    {
      g_printerr ("bench-gpu: %s\n", error->message);
      return 2;
    }
  if (resident_s != NULL)
    {
      mode = MODE_MEMBER;
      prec_s = g_steal_pointer (&resident_s);
    }
  if (mode_s != NULL)
    {
      guint i = 0;
      while (mode_names[i] != NULL && strcmp (mode_names[i], mode_s) != 0)
        i++;
      if (mode_names[i] == NULL)
        {
          g_printerr ("bench-gpu: --mode %s: use plain, member, member-copy, leader, leader-sync "
                      "or leader-member\n", mode_s);
          return 2;
        }
      mode = (Mode) i;
    }
  if (prec_s != NULL && !rlx_precision_from_string (prec_s, &prec, &error))
    {
      g_printerr ("bench-gpu: --precision: %s\n", error->message);
      return 2;
    }
  models = g_strsplit (models_s ? models_s : "mnist-mlp,mnist-cnn,mnist-mlp-xl", ",", -1);
  batches = g_strsplit (batches_s ? batches_s : "64", ",", -1);
  dataset = rlx_dataset_open ("synthetic", 0, &error);
  if (dataset == NULL)
    {
      g_printerr ("bench-gpu: %s\n", error->message);
      return 1;
    }

  for (guint mi = 0; models[mi]; mi++)
    for (guint bi = 0; batches[bi]; bi++)
      {
        const RlxModel *model = rlx_model_lookup (models[mi], &error);
        guint batch = (guint) g_ascii_strtoull (batches[bi], NULL, 10);

        if (model == NULL || batch == 0)
          {
            g_printerr ("bench-gpu: bad model or batch (%s)\n", error ? error->message : batches[bi]);
            return 2;
          }
        if (!bench_case (model, batch, backend_s ? backend_s : "auto", mode, prec, dataset,
                         seconds, &error))
          {
            g_printerr ("bench-gpu: %s\n", error->message);
            return 1;
          }
      }
  return 0;
}
