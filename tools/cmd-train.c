/* cmd-train.c — rlx-rank train, grads and bench: one rank on its own
 *
 *   train  SGD on a dataset through the seeded per-epoch permutation, loss per
 *          step, test accuracy at the end.
 *   grads  the loss and gradient bucket of samples [I, I+B) in file order, as
 *          little-endian f32 [loss, gradient...] (what a rank sends a leader).
 *   bench  samples per second of one training step after warm-up.
 */
#include "rlx-config.h"
#include "rlx-cli.h"
#include "core/rlx-backend.h"
#include "core/vision/rlx-cpu.h"
#include "core/vision/rlx-dataset.h"
#include "core/vision/rlx-model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Batches above this are refused before anything is allocated. */
#define MAX_BATCH 65536u

/* ------------------------------------------------------------ option values */

/* Model and dataset slugs; a bad slug is a usage error, a dataset that will
 * not load (missing package, broken file) a runtime failure. */
static int
open_model_dataset (const char *sub, const char *model_slug, const char *dataset_slug,
                    guint64 data_seed, const RlxModel **model, RlxDataset **dataset)
{
  g_autoptr(GError) error = NULL;

  *model = rlx_model_lookup (model_slug, &error);
  if (*model == NULL)
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--model: %s", error->message);
  *dataset = rlx_dataset_open (dataset_slug, data_seed, &error);
  if (*dataset == NULL)
    return rlx_cli_fail (sub, g_error_matches (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_UNKNOWN)
                              ? RLX_EXIT_USAGE : RLX_EXIT_FAILURE,
                         "%s", error->message);
  return RLX_EXIT_OK;
}

/* --compute: f32 (NULL), f16 or bf16; a usage error otherwise */
static gboolean
parse_compute (const char *sub, const char *text, RlxVkCompute *out)
{
  *out = RLX_VK_COMPUTE_F32;
  if (text == NULL || rlx_vk_compute_parse (text, out))
    return TRUE;
  rlx_cli_fail (sub, RLX_EXIT_USAGE, "--compute: '%s' is not f32, f16 or bf16", text);
  return FALSE;
}

static int
resolve_backend (const char *sub, const char *request, const char *compute_s,
                 const RlxModel *model, RlxDataset *dataset, guint batch, RlxBackend **backend)
{
  g_autoptr(GError) error = NULL;
  RlxVkCompute compute;

  if (!parse_compute (sub, compute_s, &compute))
    return RLX_EXIT_USAGE;
  *backend = rlx_backend_resolve_compute (request, compute, model, dataset, batch, &error);
  if (*backend == NULL)
    return rlx_cli_fail (sub, g_error_matches (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNKNOWN)
                              ? RLX_EXIT_USAGE : RLX_EXIT_FAILURE,
                         "--backend: %s", error->message);
  return RLX_EXIT_OK;
}

static gboolean
parse_threads (const char *sub, const char *text)
{
  guint64 v;

  if (text == NULL)
    return TRUE;
  if (!rlx_cli_uint (sub, "--threads", text, 1, 256, &v))
    return FALSE;
  rlx_cpu_set_threads ((guint) v);
  return TRUE;
}

/* ------------------------------------------------------------------- train */

int
rlx_cmd_train (int argc, char **argv)
{
  const char *sub = "train";
  g_autofree char *model_slug = NULL, *dataset_slug = NULL, *batch_s = NULL;
  g_autofree char *lr_s = NULL, *steps_s = NULL, *epochs_s = NULL, *seed_s = NULL;
  g_autofree char *backend_s = NULL, *threads_s = NULL, *order_s = NULL, *compute_s = NULL;
  gboolean json = FALSE, file_order = FALSE;
  GOptionEntry entries[] = {
    { "model", 0, 0, G_OPTION_ARG_STRING, &model_slug, "mnist-mlp, mnist-mlp-xl or mnist-cnn", "M" },
    { "dataset", 0, 0, G_OPTION_ARG_STRING, &dataset_slug, "fashion-mnist or synthetic", "D" },
    { "batch", 0, 0, G_OPTION_ARG_STRING, &batch_s, "samples per step", "B" },
    { "lr", 0, 0, G_OPTION_ARG_STRING, &lr_s, "SGD learning rate", "LR" },
    { "steps", 0, 0, G_OPTION_ARG_STRING, &steps_s, "train this many steps (continuing into new epochs)", "N" },
    { "epochs", 0, 0, G_OPTION_ARG_STRING, &epochs_s, "train this many passes over the training set", "E" },
    { "seed", 0, 0, G_OPTION_ARG_STRING, &seed_s, "keys the initialisation, the permutation and synthetic data (default 0)", "S" },
    { "backend", 0, 0, G_OPTION_ARG_STRING, &backend_s, "auto, cpu, vulkan or vulkan:NAME (default auto)", "B" },
    { "compute", 0, 0, G_OPTION_ARG_STRING, &compute_s, "f32 (default), or f16: matrix products on tensor cores (a Vulkan device with cooperative matrices)", "C" },
    { "order", 0, 0, G_OPTION_ARG_STRING, &order_s, "permuted (each epoch a seeded permutation; default) or file", "O" },
    { "threads", 0, 0, G_OPTION_ARG_STRING, &threads_s, "CPU threads for the CPU backend (default: one per core)", "N" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "one JSON object per line", NULL },
    { NULL }
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("- train one rank and report test accuracy");
  g_autoptr(RlxDataset) dataset = NULL;
  g_autoptr(RlxBackend) backend = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree float *params = NULL, *grads = NULL;
  g_autofree guint32 *perm = NULL;
  g_autofree char *backend_json = NULL, *device_json = NULL, *fallback_json = NULL;
  g_autoptr(GTimer) timer = NULL;
  const RlxModel *model = NULL;
  guint64 batch = 0, steps = 0, epochs = 0, seed = 0;
  double lr = 0, accuracy, test_loss, seconds;
  guint train_size, steps_per_epoch, epoch = G_MAXUINT;
  char b1[G_ASCII_DTOSTR_BUF_SIZE], b2[G_ASCII_DTOSTR_BUF_SIZE], b3[G_ASCII_DTOSTR_BUF_SIZE];
  int status;

  g_set_prgname ("rlx-rank train");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_set_description (ctx,
    "Trains from the seeded initialisation with plain SGD on mean softmax\n"
    "cross-entropy. Each epoch visits a permutation of the training set seeded\n"
    "by --seed (the last batch of an epoch may be smaller), then the model is\n"
    "evaluated on the test set. --order file visits the samples in file order\n"
    "instead, as torch_ref.py accuracy does.\n\n"
    "Example:\n"
    "  rlx-rank train --model mnist-mlp --dataset fashion-mnist --batch 64 --lr 0.05 --epochs 2");
  if (!rlx_cli_parse (ctx, sub, &argc, &argv) || !rlx_cli_no_extra_args (sub, argc, argv))
    return RLX_EXIT_USAGE;

  if (!rlx_cli_require (sub, "--model", model_slug, rlx_model_slugs ()) ||
      !rlx_cli_require (sub, "--dataset", dataset_slug, "fashion-mnist or synthetic") ||
      !rlx_cli_require (sub, "--batch", batch_s, "samples per step") ||
      !rlx_cli_require (sub, "--lr", lr_s, "the SGD learning rate"))
    return RLX_EXIT_USAGE;
  if ((steps_s == NULL) == (epochs_s == NULL))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "give exactly one of --steps N or --epochs E (see rlx-rank train --help)");
  if (!rlx_cli_uint (sub, "--batch", batch_s, 1, MAX_BATCH, &batch) ||
      !rlx_cli_positive (sub, "--lr", lr_s, &lr) ||
      !rlx_cli_uint (sub, "--steps", steps_s, 1, G_MAXUINT32, &steps) ||
      !rlx_cli_uint (sub, "--epochs", epochs_s, 1, 10000, &epochs) ||
      !rlx_cli_uint (sub, "--seed", seed_s, 0, G_MAXUINT64, &seed) ||
      !parse_threads (sub, threads_s))
    return RLX_EXIT_USAGE;
  if (order_s != NULL && g_strcmp0 (order_s, "file") != 0 && g_strcmp0 (order_s, "permuted") != 0)
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--order: '%s' is neither permuted nor file (see rlx-rank train --help)",
                         order_s);
  file_order = g_strcmp0 (order_s, "file") == 0;

  status = open_model_dataset (sub, model_slug, dataset_slug, seed, &model, &dataset);
  if (status != RLX_EXIT_OK)
    return status;
  train_size = rlx_dataset_size (dataset, RLX_SPLIT_TRAIN);
  if (batch > train_size)
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--batch: %" G_GUINT64_FORMAT " is more than the %u training samples of %s",
                         batch, train_size, dataset_slug);
  status = resolve_backend (sub, backend_s, compute_s, model, dataset, (guint) batch, &backend);
  if (status != RLX_EXIT_OK)
    return status;

  steps_per_epoch = (train_size + (guint) batch - 1) / (guint) batch;
  if (epochs_s)
    steps = epochs * steps_per_epoch;

  params = g_new (float, model->n_params);
  grads = g_new (float, model->n_params);
  perm = g_new (guint32, train_size);
  rlx_model_init_params (model, seed, params);

  backend_json = rlx_cli_json_str (rlx_backend_name (backend));
  device_json = rlx_cli_json_str (rlx_backend_device (backend));
  fallback_json = rlx_cli_json_str (rlx_backend_fallback (backend));
  if (json)
    printf ("{\"event\":\"start\",\"model\":\"%s\",\"dataset\":\"%s\",\"params\":%" G_GSIZE_FORMAT
            ",\"batch\":%" G_GUINT64_FORMAT ",\"lr\":%s,\"steps\":%" G_GUINT64_FORMAT
            ",\"seed\":%" G_GUINT64_FORMAT ",\"order\":\"%s\",\"backend\":%s,\"device\":%s,\"compute\":\"%s\","
            "\"fallback\":%s}\n",
            model->slug, rlx_dataset_slug (dataset), model->n_params, batch,
            rlx_cli_json_num (b1, lr), steps, seed, file_order ? "file" : "permuted", backend_json,
            device_json, rlx_vk_compute_name (rlx_backend_compute_mode (backend)), fallback_json);
  else
    {
      printf ("training %s (%" G_GSIZE_FORMAT " parameters) on %s: batch %" G_GUINT64_FORMAT
              ", lr %s, %" G_GUINT64_FORMAT " steps, seed %" G_GUINT64_FORMAT ", %s order\n",
              model->slug, model->n_params, rlx_dataset_slug (dataset), batch,
              rlx_cli_json_num (b1, lr), steps, seed, file_order ? "file" : "permuted");
      printf ("backend %s: %s%s%s\n", rlx_backend_name (backend), rlx_backend_device (backend),
              *rlx_backend_fallback (backend) ? " — passed over: " : "",
              rlx_backend_fallback (backend));
    }

  timer = g_timer_new ();
  for (guint64 step = 0; step < steps; step++)
    {
      guint e = (guint) (step / steps_per_epoch);
      guint start = (guint) (step % steps_per_epoch) * (guint) batch;
      guint n = MIN ((guint) batch, train_size - start);
      float loss = 0;

      if (e != epoch)
        {
          epoch = e;
          if (file_order)
            for (guint i = 0; i < train_size; i++)
              perm[i] = i;
          else
            rlx_dataset_permutation (train_size, seed, epoch, perm);
        }
      if (!rlx_backend_grads (backend, params, perm + start, n, &loss, grads, &error))
        return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "step %" G_GUINT64_FORMAT ": %s",
                             step + 1, error->message);
      if (!isfinite (loss))
        return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "step %" G_GUINT64_FORMAT
                             ": the loss is %s; lower --lr", step + 1, isnan (loss) ? "NaN" : "infinite");
      rlx_sgd_step (params, grads, model->n_params, (float) lr);
      if (json)
        printf ("{\"event\":\"step\",\"step\":%" G_GUINT64_FORMAT ",\"epoch\":%u,\"loss\":%s}\n",
                step + 1, epoch, rlx_cli_json_num (b1, loss));
      else
        printf ("step %" G_GUINT64_FORMAT "/%" G_GUINT64_FORMAT "  epoch %u  loss %.4f\n",
                step + 1, steps, epoch, loss);
    }
  seconds = g_timer_elapsed (timer, NULL);

  {
    g_autoptr(RlxCpuTrainer) eval = rlx_cpu_trainer_new (model, 256);

    accuracy = rlx_cpu_evaluate (eval, params, dataset, RLX_SPLIT_TEST, &test_loss);
  }
  if (json)
    printf ("{\"event\":\"done\",\"steps\":%" G_GUINT64_FORMAT ",\"seconds\":%s,"
            "\"test_accuracy\":%s,\"test_loss\":%s,\"test_samples\":%u,\"params_hash\":\"%016"
            G_GINT64_MODIFIER "x\"}\n",
            steps, rlx_cli_json_num (b1, seconds), rlx_cli_json_num (b2, accuracy), rlx_cli_json_num (b3, test_loss),
            rlx_dataset_size (dataset, RLX_SPLIT_TEST), rlx_params_hash (params, model->n_params));
  else
    printf ("test accuracy %.2f%% (%u test samples), test loss %.4f; %" G_GUINT64_FORMAT
            " steps in %.1f s\n", 100 * accuracy, rlx_dataset_size (dataset, RLX_SPLIT_TEST),
            test_loss, steps, seconds);
  return RLX_EXIT_OK;
}

/* ------------------------------------------------------------------- grads */

int
rlx_cmd_grads (int argc, char **argv)
{
  const char *sub = "grads";
  g_autofree char *model_slug = NULL, *dataset_slug = NULL, *start_s = NULL, *batch_s = NULL;
  g_autofree char *seed_s = NULL, *params_path = NULL, *backend_s = NULL, *out_path = NULL;
  g_autofree char *compute_s = NULL;
  g_autofree char *data_seed_s = NULL;
  GOptionEntry entries[] = {
    { "model", 0, 0, G_OPTION_ARG_STRING, &model_slug, "mnist-mlp, mnist-mlp-xl or mnist-cnn", "M" },
    { "dataset", 0, 0, G_OPTION_ARG_STRING, &dataset_slug, "fashion-mnist or synthetic", "D" },
    { "start", 0, 0, G_OPTION_ARG_STRING, &start_s, "first training sample (file order)", "I" },
    { "batch", 0, 0, G_OPTION_ARG_STRING, &batch_s, "number of samples", "B" },
    { "seed", 0, 0, G_OPTION_ARG_STRING, &seed_s, "parameters from the seeded initialisation", "S" },
    { "params", 0, 0, G_OPTION_ARG_FILENAME, &params_path, "parameters from a raw little-endian f32 file", "FILE" },
    { "data-seed", 0, 0, G_OPTION_ARG_STRING, &data_seed_s, "key of the synthetic dataset (default: --seed, or 0)", "S" },
    { "backend", 0, 0, G_OPTION_ARG_STRING, &backend_s, "auto, cpu, vulkan or vulkan:NAME (default auto)", "B" },
    { "compute", 0, 0, G_OPTION_ARG_STRING, &compute_s, "f32 (default), or f16: matrix products on tensor cores (a Vulkan device with cooperative matrices)", "C" },
    { "out", 0, 0, G_OPTION_ARG_FILENAME, &out_path, "where to write [loss, gradient] as little-endian f32", "FILE" },
    { NULL }
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("- write the loss and gradient of a batch to a file");
  g_autoptr(RlxDataset) dataset = NULL;
  g_autoptr(RlxBackend) backend = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree float *params = NULL, *bucket = NULL;
  g_autofree guint32 *indices = NULL;
  gsize out_len;
  gboolean written;
  const RlxModel *model = NULL;
  guint64 start = 0, batch = 0, seed = 0, data_seed = 0;
  guint train_size;
  int status;

  g_set_prgname ("rlx-rank grads");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_set_description (ctx,
    "Computes the mean loss and its gradient over training samples [I, I+B)\n"
    "in file order (not permuted) and writes 1 + P little-endian f32 values:\n"
    "the loss, then the gradient in flat parameter order (P parameters).\n"
    "--params takes a raw little-endian f32 vector of exactly P values.\n\n"
    "Example:\n"
    "  rlx-rank grads --model mnist-cnn --dataset synthetic --start 0 --batch 8 --seed 1 --out g.f32");
  if (!rlx_cli_parse (ctx, sub, &argc, &argv) || !rlx_cli_no_extra_args (sub, argc, argv))
    return RLX_EXIT_USAGE;

  if (!rlx_cli_require (sub, "--model", model_slug, rlx_model_slugs ()) ||
      !rlx_cli_require (sub, "--dataset", dataset_slug, "fashion-mnist or synthetic") ||
      !rlx_cli_require (sub, "--start", start_s, "the first training sample") ||
      !rlx_cli_require (sub, "--batch", batch_s, "the number of samples") ||
      !rlx_cli_require (sub, "--out", out_path, "the output file"))
    return RLX_EXIT_USAGE;
  if ((seed_s == NULL) == (params_path == NULL))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "give exactly one of --seed S or --params FILE (see rlx-rank grads --help)");
  if (!rlx_cli_uint (sub, "--start", start_s, 0, G_MAXUINT32, &start) ||
      !rlx_cli_uint (sub, "--batch", batch_s, 1, MAX_BATCH, &batch) ||
      !rlx_cli_uint (sub, "--seed", seed_s, 0, G_MAXUINT64, &seed) ||
      !rlx_cli_uint (sub, "--data-seed", data_seed_s, 0, G_MAXUINT64, &data_seed))
    return RLX_EXIT_USAGE;
  if (data_seed_s == NULL)
    data_seed = seed;

  status = open_model_dataset (sub, model_slug, dataset_slug, data_seed, &model, &dataset);
  if (status != RLX_EXIT_OK)
    return status;
  train_size = rlx_dataset_size (dataset, RLX_SPLIT_TRAIN);
  if (start + batch > train_size)
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "samples [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                         ") run past the %u training samples of %s",
                         start, start + batch, train_size, dataset_slug);

  params = g_new (float, model->n_params);
  if (params_path != NULL)
    {
      g_autofree char *contents = NULL;
      gsize length = 0;

      if (!g_file_get_contents (params_path, &contents, &length, &error))
        return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "--params: %s", error->message);
      if (length != model->n_params * sizeof (float))
        return rlx_cli_fail (sub, RLX_EXIT_FAILURE,
                             "--params: %s holds %" G_GSIZE_FORMAT " bytes (%" G_GSIZE_FORMAT
                             " f32 values%s), but %s has %" G_GSIZE_FORMAT " parameters (%"
                             G_GSIZE_FORMAT " bytes)",
                             params_path, length, length / 4, length % 4 ? " and a partial one" : "",
                             model->slug, model->n_params, model->n_params * sizeof (float));
      for (gsize i = 0; i < model->n_params; i++)
        {
          guint32 bits;

          memcpy (&bits, contents + 4 * i, 4);
          bits = GUINT32_FROM_LE (bits);
          memcpy (&params[i], &bits, 4);
        }
    }
  else
    rlx_model_init_params (model, seed, params);

  status = resolve_backend (sub, backend_s, compute_s, model, dataset, (guint) batch, &backend);
  if (status != RLX_EXIT_OK)
    return status;

  indices = g_new (guint32, batch);
  for (guint i = 0; i < batch; i++)
    indices[i] = (guint32) start + i;
  bucket = g_new (float, 1 + model->n_params);
  if (!rlx_backend_grads (backend, params, indices, (guint) batch, &bucket[0], bucket + 1, &error))
    return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "%s", error->message);

  for (gsize i = 0; i < 1 + model->n_params; i++)
    {
      guint32 bits;

      memcpy (&bits, &bucket[i], 4);
      bits = GUINT32_TO_LE (bits);
      memcpy (&bucket[i], &bits, 4);
    }
  out_len = (1 + model->n_params) * sizeof (float);
  if (rlx_cli_out_is_special (out_path))
    written = rlx_cli_write_special (out_path, bucket, out_len, &error);
  else
    written = g_file_set_contents (out_path, (const char *) bucket, (gssize) out_len, &error);
  if (!written)
    return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "--out: %s", error->message);
  return RLX_EXIT_OK;
}

/* ------------------------------------------------------------------- bench */

/* CPU time of the whole process (all threads), so a figure taken on a
 * shared machine can be read per core used as well as per wall second. */
static double
process_cpu_seconds (void)
{
  struct timespec ts;

  if (clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
    return 0.0;
  return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

int
rlx_cmd_bench (int argc, char **argv)
{
  const char *sub = "bench";
  g_autofree char *model_slug = NULL, *batch_s = NULL, *backend_s = NULL, *compute_s = NULL;
  g_autofree char *seconds_s = NULL, *dataset_slug = NULL, *threads_s = NULL;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "model", 0, 0, G_OPTION_ARG_STRING, &model_slug, "mnist-mlp, mnist-mlp-xl or mnist-cnn", "M" },
    { "batch", 0, 0, G_OPTION_ARG_STRING, &batch_s, "samples per step", "B" },
    { "backend", 0, 0, G_OPTION_ARG_STRING, &backend_s, "auto, cpu, vulkan or vulkan:NAME (default auto)", "B" },
    { "compute", 0, 0, G_OPTION_ARG_STRING, &compute_s, "f32 (default), or f16: matrix products on tensor cores (a Vulkan device with cooperative matrices)", "C" },
    { "seconds", 0, 0, G_OPTION_ARG_STRING, &seconds_s, "how long to measure after warm-up (default 2)", "S" },
    { "dataset", 0, 0, G_OPTION_ARG_STRING, &dataset_slug, "where the samples come from (default synthetic)", "D" },
    { "threads", 0, 0, G_OPTION_ARG_STRING, &threads_s, "CPU threads for the CPU backend (default: one per core)", "N" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "print one JSON object", NULL },
    { NULL }
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("- samples per second of one training step");
  g_autoptr(RlxDataset) dataset = NULL;
  g_autoptr(RlxBackend) backend = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GTimer) timer = NULL;
  g_autofree float *params = NULL, *grads = NULL;
  g_autofree guint32 *indices = NULL;
  g_autofree char *backend_json = NULL, *device_json = NULL, *blas_json = NULL;
  const RlxModel *model = NULL;
  guint64 batch = 0, steps = 0;
  double seconds = 2.0, elapsed, sps, cpu0, cpu;
  char b1[G_ASCII_DTOSTR_BUF_SIZE], b2[G_ASCII_DTOSTR_BUF_SIZE];
  char b3[G_ASCII_DTOSTR_BUF_SIZE], b4[G_ASCII_DTOSTR_BUF_SIZE];
  float loss;
  int status;

  g_set_prgname ("rlx-rank bench");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_set_description (ctx,
    "One step is what a rank does per round: gather the batch, forward,\n"
    "backward, gradients in host memory (no update, like torch_ref.py speed).\n"
    "Ten steps of warm-up, then as many steps as fit in --seconds. --json\n"
    "also gives samples per CPU-second (all threads' CPU time), a figure that\n"
    "other load on the machine disturbs less.\n\n"
    "Example:\n"
    "  rlx-rank bench --model mnist-mlp --batch 64 --backend cpu");
  if (!rlx_cli_parse (ctx, sub, &argc, &argv) || !rlx_cli_no_extra_args (sub, argc, argv))
    return RLX_EXIT_USAGE;
  if (!rlx_cli_require (sub, "--model", model_slug, rlx_model_slugs ()) ||
      !rlx_cli_require (sub, "--batch", batch_s, "samples per step"))
    return RLX_EXIT_USAGE;
  if (!rlx_cli_uint (sub, "--batch", batch_s, 1, MAX_BATCH, &batch) ||
      !rlx_cli_positive (sub, "--seconds", seconds_s, &seconds) ||
      !parse_threads (sub, threads_s))
    return RLX_EXIT_USAGE;
  if (seconds > 3600)
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--seconds: %s is more than an hour", seconds_s);

  status = open_model_dataset (sub, model_slug, dataset_slug ? dataset_slug : "synthetic", 0,
                               &model, &dataset);
  if (status != RLX_EXIT_OK)
    return status;
  if (batch > rlx_dataset_size (dataset, RLX_SPLIT_TRAIN))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--batch: %" G_GUINT64_FORMAT " is more than the %u training samples",
                         batch, rlx_dataset_size (dataset, RLX_SPLIT_TRAIN));
  status = resolve_backend (sub, backend_s, compute_s, model, dataset, (guint) batch, &backend);
  if (status != RLX_EXIT_OK)
    return status;

  params = g_new (float, model->n_params);
  grads = g_new (float, model->n_params);
  indices = g_new (guint32, batch);
  rlx_model_init_params (model, 0, params);
  for (guint i = 0; i < batch; i++)
    indices[i] = i;

  for (int i = 0; i < 10; i++)
    if (!rlx_backend_grads (backend, params, indices, (guint) batch, &loss, grads, &error))
      return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "%s", error->message);

  cpu0 = process_cpu_seconds ();
  timer = g_timer_new ();
  do
    {
      if (!rlx_backend_grads (backend, params, indices, (guint) batch, &loss, grads, &error))
        return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "%s", error->message);
      steps++;
    }
  while (g_timer_elapsed (timer, NULL) < seconds);
  elapsed = g_timer_elapsed (timer, NULL);
  cpu = process_cpu_seconds () - cpu0;
  sps = (double) steps * batch / elapsed;

  backend_json = rlx_cli_json_str (rlx_backend_name (backend));
  device_json = rlx_cli_json_str (rlx_backend_device (backend));
  blas_json = rlx_cli_json_str (rlx_cpu_blas_name ());
  if (json)
    printf ("{\"event\":\"bench\",\"model\":\"%s\",\"batch\":%" G_GUINT64_FORMAT
            ",\"backend\":%s,\"device\":%s,\"compute\":\"%s\",\"threads\":%u,\"blas\":%s,\"steps\":%"
            G_GUINT64_FORMAT ",\"seconds\":%s,\"samples_per_second\":%s,\"cpu_seconds\":%s,"
            "\"samples_per_cpu_second\":%s}\n",
            model->slug, batch, backend_json, device_json,
            rlx_vk_compute_name (rlx_backend_compute_mode (backend)), rlx_cpu_threads (), blas_json, steps,
            rlx_cli_json_num (b1, elapsed), rlx_cli_json_num (b2, sps), rlx_cli_json_num (b3, cpu),
            rlx_cli_json_num (b4, cpu > 0 ? (double) steps * batch / cpu : NAN));
  else
    printf ("%s batch %" G_GUINT64_FORMAT " %s: %.0f samples/s (%" G_GUINT64_FORMAT
            " steps in %.2f s; %s; BLAS %u threads: %s)\n", model->slug, batch,
            rlx_backend_name (backend), sps, steps, elapsed, rlx_backend_device (backend),
            rlx_cpu_threads (), rlx_cpu_blas_name ());
  return RLX_EXIT_OK;
}
