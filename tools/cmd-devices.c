/* cmd-devices.c — rlx-rank devices: every compute device, and what auto
 * would choose for each model
 *
 * Lists each Vulkan physical device with the properties the shaders depend
 * on, what it offers for --compute f16 / bf16 (cooperative matrix shapes,
 * f16 and bf16 shaders) and whether each --compute can run on it, whether
 * it can train each model at the given batch (and if not,
 * why), then the decision `--backend auto` would make per model, with the
 * reasons faster candidates were passed over — the answer to "why is it only
 * computing on CPU?".
 */
#include "rlx-config.h"
#include "rlx-cli.h"
#include "core/rlx-backend.h"
#include "core/vision/rlx-model.h"
#include "gpu/rlx-vk.h"

#include <stdio.h>

static char *
size_text (guint64 bytes)
{
  return g_format_size_full (bytes, G_FORMAT_SIZE_IEC_UNITS);
}

static void
print_device (GPtrArray *devices, guint i, guint batch)
{
  const RlxVkDeviceInfo *info = g_ptr_array_index (devices, i);
  g_autofree char *mem = size_text (info->device_local_bytes);
  g_autofree char *range = size_text (info->max_storage_buffer_range);

  printf ("  [%u] %s\n", info->index, info->name);
  printf ("      type %s%s, Vulkan %u.%u.%u, driver %s\n",
          rlx_vk_device_type_name (info->type),
          rlx_vk_device_is_software (info) ? " (software rasterizer: used only when asked for by name)" : "",
          info->api_version >> 22, (info->api_version >> 12) & 0x3ff, info->api_version & 0xfff,
          info->driver ? info->driver : "unknown");
  printf ("      memory %s; shared memory %u KiB; push constants %u B; subgroup %u; "
          "workgroup ≤ %u threads; storage buffers ≤ %s; compute queue %s; timestamps %s\n",
          mem, info->max_shared_memory / 1024, info->max_push_constants, info->subgroup_size,
          info->max_workgroup_invocations, range, info->has_compute_queue ? "yes" : "no",
          info->has_timestamps ? "yes" : "no");
  {
    g_autofree char *shapes = rlx_vk_device_coop_text (info);

    printf ("      cooperative matrix: %s%s%s; subgroup shapes: %s; shaderFloat16 %s; "
            "bf16 shaders %s\n",
            info->coop_nv ? "NV" : "", info->coop_nv && info->coop_khr ? " + " : "",
            info->coop_khr ? "KHR" : (info->coop_nv ? "" : "none"), shapes,
            info->shader_f16 ? "yes" : "no", info->shader_bf16 ? "yes" : "no");
    for (guint c = 0; c < RLX_VK_N_COMPUTE; c++)
      {
        g_autofree char *why = rlx_vk_device_compute_check (info, (RlxVkCompute) c);

        printf ("      --compute %-4s %s\n", rlx_vk_compute_name ((RlxVkCompute) c),
                why ? why : "can");
      }
  }
  if (!rlx_vk_device_is_software (info))
    printf ("      %s\n", rlx_backend_gpu_in_use (devices, i)
                             ? "in use by a rank on this host (auto and vulkan take another, if free)"
                             : "free (no rank on this host uses it)");
  for (guint m = 0; m < RLX_N_MODELS; m++)
    {
      const RlxModel *model = rlx_model_get (m);
      g_autofree char *why = rlx_vk_device_check (info, model, batch);

      printf ("      %-12s batch %u: %s\n", model->slug, batch, why ? why : "can train");
    }
}

int
rlx_cmd_devices (int argc, char **argv)
{
  const char *sub = "devices";
  g_autofree char *batch_s = NULL, *backend_s = NULL, *compute_s = NULL;
  RlxVkCompute compute = RLX_VK_COMPUTE_F32;
  GOptionEntry entries[] = {
    { "batch", 0, 0, G_OPTION_ARG_STRING, &batch_s, "largest batch a step would use (default 1024)", "B" },
    { "backend", 0, 0, G_OPTION_ARG_STRING, &backend_s, "the request to decide (default auto)", "B" },
    { "compute", 0, 0, G_OPTION_ARG_STRING, &compute_s, "and at which arithmetic: f32 (default), f16 or bf16", "C" },
    { NULL }
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("- list compute devices and what auto would choose");
  g_autoptr(GPtrArray) devices = NULL;
  g_autoptr(GError) vk_error = NULL;
  guint64 batch = 1024;
  const char *request;
  int status = RLX_EXIT_OK;

  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_set_description (ctx,
    "A device is skipped when it lacks what the shaders need (shared memory,\n"
    "push constants, workgroup size, buffer range, memory for the batch).\n"
    "Software devices (llvmpipe) are used only when asked for by name.\n"
    "The [N] before a device is what --backend vulkan:N asks for (a device\n"
    "whose name is a number is asked for as vulkan:name=NUMBER). Ranks on one\n"
    "host asking for auto or vulkan take distinct GPUs while there are free ones.\n\n"
    "Examples:\n"
    "  rlx-rank devices\n"
    "  rlx-rank devices --batch 8192 --backend vulkan\n"
    "  rlx-rank devices --backend vulkan:1\n"
    "  rlx-rank devices --compute f16");
  if (!rlx_cli_parse (ctx, sub, &argc, &argv))
    return RLX_EXIT_USAGE;
  if (!rlx_cli_no_extra_args (sub, argc, argv) ||
      !rlx_cli_uint (sub, "--batch", batch_s, 1, 65536, &batch))
    return RLX_EXIT_USAGE;
  request = backend_s ? backend_s : "auto";
  if (compute_s != NULL && !rlx_vk_compute_parse (compute_s, &compute))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--compute: '%s' is not f32, f16 or bf16 (see "
                         "rlx-rank devices --help)", compute_s);

  devices = rlx_vk_enumerate (&vk_error);
  if (devices == NULL)
    printf ("Vulkan: %s\n", vk_error->message);
  else if (devices->len == 0)
    printf ("Vulkan: the loader found no device\n");
  else
    {
      printf ("Vulkan devices:\n");
      for (guint i = 0; i < devices->len; i++)
        print_device (devices, i, (guint) batch);
    }
  printf ("CPU: %u threads\n\n", g_get_num_processors ());

  printf ("--backend %s --compute %s would choose:\n", request, rlx_vk_compute_name (compute));
  for (guint m = 0; m < RLX_N_MODELS; m++)
    {
      const RlxModel *model = rlx_model_get (m);
      g_autoptr(GPtrArray) passed_over = g_ptr_array_new_with_free_func (g_free);
      g_autoptr(GError) error = NULL;
      g_autoptr(GArray) cand = rlx_backend_candidates (request, compute, model, (guint) batch, devices,
                                                       vk_error ? vk_error->message : NULL,
                                                       passed_over, &error);
      g_autofree char *why = NULL;
      guint first;

      if (cand == NULL)
        {
          printf ("  %-12s refused: %s\n", model->slug, error->message);
          if (error->code == RLX_BACKEND_ERROR_UNKNOWN)
            return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--backend: %s", error->message);
          status = RLX_EXIT_FAILURE;
          continue;
        }
      g_ptr_array_add (passed_over, NULL);
      why = g_strjoinv ("; ", (char **) passed_over->pdata);
      first = g_array_index (cand, guint, 0);
      if (first == RLX_BACKEND_CPU_CANDIDATE)
        printf ("  %-12s cpu%s%s\n", model->slug, *why ? " — passed over: " : "", why);
      else
        {
          g_autoptr(GString) others = g_string_new (NULL);

          for (guint k = 1; k < cand->len; k++)
            {
              guint c = g_array_index (cand, guint, k);
              if (c != RLX_BACKEND_CPU_CANDIDATE)
                g_string_append_printf (others, ", [%u]", c);
            }
          printf ("  %-12s vulkan on %s [%u]%s%s%s%s%s\n", model->slug,
                  ((RlxVkDeviceInfo *) g_ptr_array_index (devices, first))->name, first,
                  others->len ? " (further ranks on this host: " : "",
                  others->len ? others->str + 2 : "", others->len ? ")" : "",
                  *why ? " — passed over: " : "", why);
        }
    }
  return status;
}
