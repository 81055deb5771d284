/* rlx-backend.c — backend resolution and the uniform gradient entry point
 *
 * The CPU path is complete here; the Vulkan candidates are added by gpu/
 * (see rlx-backend.h for the resolution rules).
 */
#include "rlx-config.h"
#include "rlx-backend.h"
#include "core/vision/rlx-cpu.h"

#include <string.h>

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
};

static RlxBackend *
backend_new_cpu (const RlxModel *model, RlxDataset *dataset, guint max_batch)
{
  RlxBackend *self = g_new0 (RlxBackend, 1);

  self->kind = BACKEND_CPU;
  self->model = model;
  self->dataset = rlx_dataset_ref (dataset);
  self->max_batch = max_batch;
  self->cpu = rlx_cpu_trainer_new (model, max_batch);
  self->x = g_new (float, (gsize) max_batch * RLX_INPUT_LEN);
  self->labels = g_new (guint8, max_batch);
  self->device = g_strdup_printf ("CPU, OpenBLAS, %u threads", g_get_num_processors ());
  self->fallback = g_strdup ("");
  return self;
}

RlxBackend *
rlx_backend_resolve (const char *request, const RlxModel *model,
                     RlxDataset *dataset, guint max_batch, GError **error)
{
  g_autoptr(GPtrArray) passed_over = g_ptr_array_new_with_free_func (g_free);
  RlxBackend *self;

  g_return_val_if_fail (model != NULL, NULL);
  g_return_val_if_fail (dataset != NULL, NULL);
  g_return_val_if_fail (max_batch > 0, NULL);

  if (request == NULL || *request == '\0')
    request = "auto";

  if (g_ascii_strcasecmp (request, "cpu") == 0)
    return backend_new_cpu (model, dataset, max_batch);

  if (g_ascii_strcasecmp (request, "vulkan") == 0 ||
      g_ascii_strncasecmp (request, "vulkan:", 7) == 0)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE,
                   "vulkan: this build has no Vulkan backend; use --backend cpu");
      return NULL;
    }

  if (g_ascii_strcasecmp (request, "auto") != 0)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNKNOWN,
                   "unknown backend '%s'; use auto, cpu, vulkan or vulkan:NAME", request);
      return NULL;
    }

  g_ptr_array_add (passed_over, g_strdup ("vulkan: this build has no Vulkan backend"));
  self = backend_new_cpu (model, dataset, max_batch);
  g_free (self->fallback);
  g_ptr_array_add (passed_over, NULL);
  self->fallback = g_strjoinv ("; ", (char **) passed_over->pdata);
  return self;
}

void
rlx_backend_free (RlxBackend *self)
{
  if (self == NULL)
    return;
  g_clear_pointer (&self->cpu, rlx_cpu_trainer_free);
  g_free (self->x);
  g_free (self->labels);
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

gboolean
rlx_backend_grads (RlxBackend *self, const float *params,
                   const guint32 *indices, guint n,
                   float *loss, float *grads, GError **error)
{
  guint size;

  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (params != NULL && indices != NULL && loss != NULL, FALSE);

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

  rlx_dataset_gather (self->dataset, RLX_SPLIT_TRAIN, indices, n, self->x, self->labels);
  *loss = rlx_cpu_trainer_grads (self->cpu, params, self->x, self->labels, n, grads);
  return TRUE;
}
