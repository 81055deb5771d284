/* bench-gpu.c — one training step, timed: samples/s, TFLOP/s and (on
 * Vulkan) the GPU-timestamp breakdown of a step
 *
 *   bench-gpu [--backend B] [--models a,b] [--batches 64,1024] [--seconds S]
 *             [--resident f32|f16|f8e4m3|f8e5m2]
 *
 * Each (model, batch): ten warm-up steps, then steps until S seconds have
 * passed; prints the median step time and, from the GPU timestamps of every
 * step, the median upload / compute / download. The step is the same as
 * `rlx-rank bench` (params in, gradient and loss to host memory); with
 * --resident P it is a cohort member's step on resident parameters instead:
 * apply an update at P, then the gradient at the replica as wire codes at P
 * with error feedback (rlx_backend_apply_update + rlx_backend_grads_wire).
 */
#include "rlx-config.h"
#include "core/rlx-backend.h"
#include "core/rlx-backend-private.h"
#include "gpu/rlx-vk.h"
#include "core/vision/rlx-model.h"
#include "core/vision/rlx-dataset.h"

#include <stdio.h>
#include <stdlib.h>

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

/* One step: `rlx-rank bench`'s, or (@resident) a cohort member's on
 * resident parameters at @prec. */
static gboolean
bench_step (RlxBackend *be, gboolean resident, RlxPrecision prec, const float *params,
            const guint32 *idx, guint batch, const guint8 *update, double uscale, guint8 *codes,
            float *grads, float *loss, GError **error)
{
  const RlxModel *m = rlx_backend_model (be);
  double scale;

  if (!resident)
    return rlx_backend_grads (be, params, idx, batch, loss, grads, error);
  return rlx_backend_apply_update (be, update, m->n_params, prec, uscale, error) &&
         rlx_backend_grads_wire (be, idx, batch, prec, TRUE, loss, codes, &scale, error);
}

int
main (int argc, char **argv)
{
  g_autofree char *backend_s = NULL, *models_s = NULL, *batches_s = NULL;
  double seconds = 2.0;
  g_autofree char *resident_s = NULL;
  GOptionEntry entries[] = {
    { "resident", 0, 0, G_OPTION_ARG_STRING, &resident_s, "time resident steps at this wire precision", "P" },
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

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error))
    {
      g_printerr ("bench-gpu: %s\n", error->message);
      return 2;
    }
  if (resident_s != NULL && !rlx_precision_from_string (resident_s, &prec, &error))
    {
      g_printerr ("bench-gpu: --resident: %s\n", error->message);
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
        g_autoptr(RlxBackend) be = NULL;
        g_autofree float *params = NULL, *grads = NULL;
        g_autofree guint32 *idx = NULL;
        g_autofree guint8 *codes = NULL, *update = NULL;
        double uscale = 1.0;
        g_autoptr(GArray) wall = g_array_new (FALSE, FALSE, sizeof (double));
        g_autoptr(GArray) up = g_array_new (FALSE, FALSE, sizeof (double));
        g_autoptr(GArray) comp = g_array_new (FALSE, FALSE, sizeof (double));
        g_autoptr(GArray) down = g_array_new (FALSE, FALSE, sizeof (double));
        g_autoptr(GArray) apply = g_array_new (FALSE, FALSE, sizeof (double));
        double flops, med, t_end;
        float loss;

        if (model == NULL || batch == 0)
          {
            g_printerr ("bench-gpu: bad model or batch (%s)\n", error ? error->message : batches[bi]);
            return 2;
          }
        be = rlx_backend_resolve (backend_s ? backend_s : "auto", model, dataset, batch, &error);
        if (be == NULL)
          {
            g_printerr ("bench-gpu: %s\n", error->message);
            return 1;
          }
        params = g_new (float, model->n_params);
        grads = g_new (float, model->n_params);
        idx = g_new (guint32, batch);
        rlx_model_init_params (model, 1, params);
        for (guint i = 0; i < batch; i++)
          idx[i] = (i * 7919u) % rlx_dataset_size (dataset, RLX_SPLIT_TRAIN);
        if (resident_s != NULL)
          {
            /* a small update at the precision, the same every step */
            codes = g_malloc (model->n_params * 4);
            update = g_malloc (model->n_params * 4);
            for (gsize i = 0; i < model->n_params; i++)
              grads[i] = 1e-4f * params[i];
            uscale = rlx_wire_scale_for (grads, model->n_params, prec);
            rlx_wire_quantize (grads, model->n_params, prec, uscale, update);
            if (!rlx_backend_load_params (be, params, &error))
              {
                g_printerr ("bench-gpu: %s\n", error->message);
                return 1;
              }
          }

        for (int i = 0; i < 10; i++)
          if (!bench_step (be, resident_s != NULL, prec, params, idx, batch, update, uscale,
                           codes, grads, &loss, &error))
            {
              g_printerr ("bench-gpu: %s\n", error->message);
              return 1;
            }
        t_end = g_get_monotonic_time () + seconds * 1e6;
        while (g_get_monotonic_time () < t_end || wall->len < 5)
          {
            gint64 t0 = g_get_monotonic_time ();
            double u, c, d;

            if (!bench_step (be, resident_s != NULL, prec, params, idx, batch, update, uscale,
                             codes, grads, &loss, &error))
              {
                g_printerr ("bench-gpu: %s\n", error->message);
                return 1;
              }
            u = (double) (g_get_monotonic_time () - t0);
            g_array_append_val (wall, u);
            if (rlx_backend_step_timings (be, &u, &c, &d))
              {
                g_array_append_val (up, u);
                g_array_append_val (comp, c);
                g_array_append_val (down, d);
              }
            if (resident_s != NULL && rlx_backend_params_on_device (be))
              {
                RlxVkTimings vt;
                rlx_vk_trainer_timings (rlx_backend_vk_trainer (be), &vt);
                g_array_append_val (apply, vt.apply_us);
              }
          }
        flops = step_flops (model) * batch;
        med = median (wall);
        printf ("%-12s batch %5u %-6s %s%9.0f samples/s  step %8.1f us  %6.2f TFLOP/s",
                model->slug, batch, rlx_backend_name (be),
                resident_s == NULL ? "" : rlx_backend_params_on_device (be) ? "resident " : "host-replica ",
                batch / (med * 1e-6), med, flops / (med * 1e-6) / 1e12);
        if (comp->len > 0)
          {
            double c = median (comp);
            printf ("  | GPU upload %.1f us, compute %.1f us (%.2f TFLOP/s), %s %.1f us",
                    median (up), c, flops / (c * 1e-6) / 1e12,
                    apply->len > 0 ? "wire pass + codes down" : "download", median (down));
            if (apply->len > 0)
              printf (", update applied %.1f us", median (apply));
          }
        printf ("  [%u steps, %s]\n", wall->len, rlx_backend_device (be));
        fflush (stdout);
      }
  return 0;
}
