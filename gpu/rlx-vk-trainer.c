/* rlx-vk-trainer.c — a trainer's lifetime (the device opened, the
 * training split uploaded, everything freed) and the plain step, on
 * parameters the host writes
 *
 * Layout on the device (f32 unless said): the training split as packed u8
 * (images, labels), the parameters, the gradient (n_params + 1: the mean
 * loss rides in the last slot), the sample indices, one buffer per
 * activation, and a scratch buffer for split-K and column-sum partials.
 * Host-visible staging buffers carry parameters + indices in and the
 * gradient + loss out; the step's command buffer copies them.
 *
 * The other files of the trainer, each for one concern, share
 * rlx-vk-trainer-private.h: rlx-vk-buffers.c, -pipelines.c, -record.c,
 * -record-step.c, -submit.c, -wire.c, -resident.c, -round.c and
 * -test-hooks.c; rlx-vk-tunables.c reads the environment and
 * rlx-vk-memory.c sizes the buffers.
 *
 * Threads: the trainer's (rlx-vk-trainer-private.h).
 */
#include "rlx-config.h"
#include "rlx-vk-trainer-private.h"
#include "core/util/rlx-par-copy.h"

#include <string.h>

RlxVkTrainer *
rlx_vk_trainer_new (guint index, const RlxModel *model, RlxDataset *dataset,
                    guint max_batch, RlxVkCompute compute, GError **error)
{
  g_autoptr(RlxVkTrainer) self = g_new0 (RlxVkTrainer, 1);
  VkInstance inst;
  guint32 n_phys = 0, nq = 0;
  g_autofree VkPhysicalDevice *phys = NULL;
  g_autofree VkQueueFamilyProperties *qf = NULL;
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = {
    .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
    .queueCount = 1,
    .pQueuePriorities = &prio,
  };
  VkDeviceCreateInfo dci = {
    .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
    .queueCreateInfoCount = 1,
    .pQueueCreateInfos = &qci,
  };
  VkPhysicalDeviceFeatures have, want = { 0 };
  /* --compute f16: VK_NV_cooperative_matrix, shaderFloat16 and the Vulkan
   * memory model (which SPV_NV_cooperative_matrix declares) */
  const char *coop_ext[] = { "VK_NV_cooperative_matrix" };
  VkPhysicalDeviceVulkanMemoryModelFeatures vmm = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES,
    .vulkanMemoryModel = VK_TRUE,
    /* once the memory model is on, the other shaders' device-scope
     * barriers (memoryBarrier, the fold of wire-fold.glsl) need it */
    .vulkanMemoryModelDeviceScope = VK_TRUE,
  };
  VkPhysicalDeviceShaderFloat16Int8Features f16 = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES,
    .pNext = &vmm,
    .shaderFloat16 = VK_TRUE,
  };
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coop = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
    .pNext = &f16,
    .cooperativeMatrix = VK_TRUE,
  };
  VkDescriptorSetLayoutBinding bindings[N_BINDINGS];
  VkDescriptorSetLayoutCreateInfo dslci = {
    .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
    .bindingCount = N_BINDINGS,
    .pBindings = bindings,
  };
  VkPushConstantRange pcr = { VK_SHADER_STAGE_COMPUTE_BIT, 0, RLX_VK_PUSH_BYTES };
  VkPipelineLayoutCreateInfo plci = {
    .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
    .setLayoutCount = 1,
    .pushConstantRangeCount = 1,
    .pPushConstantRanges = &pcr,
  };
  VkCommandPoolCreateInfo cpci = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
    .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
  };
  VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
  VkQueryPoolCreateInfo qpci = {
    .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
    .queryType = VK_QUERY_TYPE_TIMESTAMP,
    .queryCount = N_QUERIES,
  };
  const VkBufferUsageFlags storage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
  guint64 sizes[N_BUFS];
  g_autofree char *why = NULL;
  g_autofree guint8 *labels = NULL;
  guint n_train;
  gsize pbytes;
  VkResult r;

  g_return_val_if_fail (model != NULL && dataset != NULL && max_batch > 0, NULL);

  self->model = model;
  self->compute = compute;
  self->dataset = rlx_dataset_ref (dataset);
  self->max_batch = max_batch;
  self->pipes = g_array_new (FALSE, TRUE, sizeof (PipeEntry));
  /* every RLX_VK_* switch, once (rlx-vk-tunables.c) */
  rlx_vk_tunables_read (&self->tun);
  self->upload = self->tun.upload;
  /* lowered below to the device's limit */
  self->max_groups_x = self->tun.max_groups_x;
  self->steps = g_hash_table_new_full (NULL, NULL, NULL, rlx_vkt_step_free);

  inst = rlx_vk_instance_acquire (error);
  if (inst == VK_NULL_HANDLE)
    return NULL;
  self->have_instance = TRUE;

  r = rlx_vki.EnumeratePhysicalDevices (inst, &n_phys, NULL);
  if (r == VK_SUCCESS && n_phys > 0)
    {
      phys = g_new0 (VkPhysicalDevice, n_phys);
      r = rlx_vki.EnumeratePhysicalDevices (inst, &n_phys, phys);
    }
  if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || index >= n_phys)
    {
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_NO_DRIVER,
                   "Vulkan device %u is not there (the loader lists %u)", index, n_phys);
      return NULL;
    }
  self->phys = phys[index];
  self->info = g_new0 (RlxVkDeviceInfo, 1);
  rlx_vk_fill_info (self->phys, index, self->info);
  self->max_groups_x = MIN (self->max_groups_x, self->info->max_workgroup_count[0]);
  why = rlx_vk_device_check (self->info, model, max_batch);
  if (why != NULL)
    {
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_UNSUPPORTED, "%s", why);
      return NULL;
    }
  why = rlx_vk_device_compute_check (self->info, compute);
  if (why != NULL)
    {
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_UNSUPPORTED, "%s", why);
      return NULL;
    }
  if (compute == RLX_VK_COMPUTE_F16)
    {
      dci.pNext = &coop;
      dci.enabledExtensionCount = 1;
      dci.ppEnabledExtensionNames = coop_ext;
    }
  rlx_vki.GetPhysicalDeviceMemoryProperties (self->phys, &self->memprops);

  rlx_vki.GetPhysicalDeviceQueueFamilyProperties (self->phys, &nq, NULL);
  qf = g_new0 (VkQueueFamilyProperties, MAX (nq, 1));
  rlx_vki.GetPhysicalDeviceQueueFamilyProperties (self->phys, &nq, qf);
  self->qfam = G_MAXUINT32;
  /* a compute queue; prefer one that also has graphics (the universal queue) */
  for (guint32 i = 0; i < nq && self->qfam == G_MAXUINT32; i++)
    if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && (qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
      self->qfam = i;
  for (guint32 i = 0; i < nq && self->qfam == G_MAXUINT32; i++)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT)
      self->qfam = i;
  g_assert (self->qfam != G_MAXUINT32);   /* device_check asked for one */
  qci.queueFamilyIndex = self->qfam;
  /* 64-bit shader arithmetic, where the device has it, for the wire passes
   * of the resident parameters (shaders/wire.glsl) */
  rlx_vki.GetPhysicalDeviceFeatures (self->phys, &have);
  if (have.shaderFloat64 && have.shaderInt64)
    {
      want.shaderFloat64 = VK_TRUE;
      want.shaderInt64 = VK_TRUE;
      dci.pEnabledFeatures = &want;
      self->has_f64 = TRUE;
    }

  r = rlx_vki.CreateDevice (self->phys, &dci, NULL, &self->dev);
  if (r != VK_SUCCESS)
    {
      self->dev = VK_NULL_HANDLE;
      rlx_vk_set_error (error, r, "opening %s", self->info->name);
      return NULL;
    }
  if (!rlx_vk_load_device (self->dev, &self->vk, error))
    {
      PFN_vkDestroyDevice destroy =
        (PFN_vkDestroyDevice) rlx_vki.GetDeviceProcAddr (self->dev, "vkDestroyDevice");
      if (destroy != NULL)
        destroy (self->dev, NULL);
      self->dev = VK_NULL_HANDLE;
      return NULL;
    }
  self->vk.GetDeviceQueue (self->dev, self->qfam, 0, &self->queue);

  for (guint i = 0; i < N_BINDINGS; i++)
    bindings[i] = (VkDescriptorSetLayoutBinding) {
      i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL
    };
  r = self->vk.CreateDescriptorSetLayout (self->dev, &dslci, NULL, &self->dsl);
  if (r == VK_SUCCESS)
    {
      plci.pSetLayouts = &self->dsl;
      r = self->vk.CreatePipelineLayout (self->dev, &plci, NULL, &self->layout);
    }
  cpci.queueFamilyIndex = self->qfam;
  if (r == VK_SUCCESS)
    r = self->vk.CreateCommandPool (self->dev, &cpci, NULL, &self->cmdpool);
  if (r == VK_SUCCESS)
    r = self->vk.CreateFence (self->dev, &fci, NULL, &self->fence);
  if (r == VK_SUCCESS)
    r = self->vk.CreateFence (self->dev, &fci, NULL, &self->fence2[0]);
  if (r == VK_SUCCESS)
    r = self->vk.CreateFence (self->dev, &fci, NULL, &self->fence2[1]);
  for (guint i = 0; i < 2 && r == VK_SUCCESS; i++)
    r = self->vk.CreateFence (self->dev, &fci, NULL, &self->fence3[i]);
  if (r == VK_SUCCESS && qf[self->qfam].timestampValidBits > 0 && self->info->timestamp_period > 0)
    {
      r = self->vk.CreateQueryPool (self->dev, &qpci, NULL, &self->queries);
      if (r == VK_SUCCESS && self->tun.profile)
        {
          qpci.queryCount = PROF_MAX;
          r = self->vk.CreateQueryPool (self->dev, &qpci, NULL, &self->prof);
        }
    }
  if (r != VK_SUCCESS)
    {
      rlx_vk_set_error (error, r, "setting up %s", self->info->name);
      return NULL;
    }
  rlx_vkt_timeline_init (self);

  /* the training split, once */
  n_train = rlx_dataset_size (dataset, RLX_SPLIT_TRAIN);
  pbytes = model->n_params * sizeof (float);
  if (!rlx_vkt_buf_create (self, &self->images, (gsize) n_train * RLX_INPUT_LEN, storage,
                           MEM_DEVICE, "training images", error) ||
      !rlx_vkt_upload (self, &self->images, rlx_dataset_images (dataset, RLX_SPLIT_TRAIN),
                       (gsize) n_train * RLX_INPUT_LEN, error))
    return NULL;
  labels = g_malloc0 ((n_train + 3) / 4 * 4);
  memcpy (labels, rlx_dataset_labels (dataset, RLX_SPLIT_TRAIN), n_train);
  if (!rlx_vkt_buf_create (self, &self->labels, (n_train + 3) / 4 * 4, storage, MEM_DEVICE,
                           "training labels", error) ||
      !rlx_vkt_upload (self, &self->labels, labels, (n_train + 3) / 4 * 4, error))
    return NULL;

  /* RLX_VK_UPLOAD=bar: the parameters in device-local memory the host maps
   * (where the device offers it), written by the host, no copy on the GPU */
  if (self->upload == UPLOAD_BAR &&
      !rlx_vkt_buf_create (self, &self->params, pbytes, storage, MEM_DEVICE_MAPPED, "parameters",
                           NULL))
    {
      rlx_vkt_buf_destroy (self, &self->params);
      self->upload = UPLOAD_WC;
    }
  if ((self->params.buf == VK_NULL_HANDLE &&
       !rlx_vkt_buf_create (self, &self->params, pbytes, storage, MEM_DEVICE, "parameters",
                            error)) ||
      !rlx_vkt_buf_create (self, &self->grads, pbytes + sizeof (float), storage, MEM_DEVICE, "gradient", error) ||
      !rlx_vkt_buf_create (self, &self->indices, max_batch * sizeof (guint32), storage, MEM_DEVICE,
                           "sample indices", error) ||
      !rlx_vkt_buf_create (self, &self->staging_in, pbytes + 2 * max_batch * sizeof (guint32),
                           VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
                           self->upload == UPLOAD_CACHED ? MEM_READBACK : MEM_UPLOAD, "upload staging", error) ||
      !rlx_vkt_buf_create (self, &self->staging_out, pbytes + sizeof (float),
                           VK_BUFFER_USAGE_TRANSFER_DST_BIT, MEM_READBACK, "download staging", error) ||
      !rlx_vkt_buf_create (self, &self->dummy, 16, storage, MEM_DEVICE, "placeholder", error))
    return NULL;
  rlx_vkt_buffer_floats (model, max_batch, self->tun.cnn_direct, sizes);
  /* --compute f16 on a dense model: the f16 copies of its GEMMs' operands
   * (rlx_vkt_rec_to_f16), two halves a float */
  if (compute == RLX_VK_COMPUTE_F16 && self->tun.cm_half && model->id != RLX_MODEL_MNIST_CNN)
    {
      guint w[5];
      guint L = rlx_vkt_dense_widths (model, w);
      guint64 halves = (guint64) max_batch * w[0];

      for (guint l = 1; l <= L; l++)
        halves += (guint64) w[l] * w[l - 1] + (l < L ? 2ull * max_batch * w[l] : 0);
      sizes[B_HALF] = halves / 2 + 16;
    }
  for (guint i = 0; i < N_BUFS; i++)
    if (sizes[i] > 0 &&
        !rlx_vkt_buf_create (self, &self->bufs[i], sizes[i] * sizeof (float), storage, MEM_DEVICE,
                             rlx_vkt_buf_names[i], error))
      return NULL;

  g_debug ("rlx-vk: %s ready for %s at batch ≤ %u", self->info->name, model->slug, max_batch);
  return g_steal_pointer (&self);
}

void
rlx_vk_trainer_free (RlxVkTrainer *self)
{
  if (self == NULL)
    return;
  if (self->dev != VK_NULL_HANDLE)
    {
      GHashTableIter it;
      gpointer v;

      self->vk.DeviceWaitIdle (self->dev);
      rlx_vkt_timeline_print (self);
      if (self->tl_pool != VK_NULL_HANDLE)
        {
          self->vk.FreeCommandBuffers (self->dev, self->cmdpool, 2 * TL_RING, self->tl_cb);
          self->vk.DestroyQueryPool (self->dev, self->tl_pool, NULL);
        }
      g_clear_pointer (&self->tl_stats, g_hash_table_unref);
      g_hash_table_iter_init (&it, self->steps);
      while (g_hash_table_iter_next (&it, NULL, &v))
        {
          Step *s = v;
          rlx_vkt_print_profile (self, s);
          self->vk.FreeCommandBuffers (self->dev, self->cmdpool, s->n_cb, s->cb);
          self->vk.DestroyDescriptorPool (self->dev, s->pool, NULL);
        }
      for (guint i = 0; i < self->pipes->len; i++)
        self->vk.DestroyPipeline (self->dev, g_array_index (self->pipes, PipeEntry, i).pipe, NULL);
      for (guint i = 0; i < N_SHADERS; i++)
        if (self->modules[i] != VK_NULL_HANDLE)
          self->vk.DestroyShaderModule (self->dev, self->modules[i], NULL);
      for (guint i = 0; i < N_BUFS; i++)
        rlx_vkt_buf_destroy (self, &self->bufs[i]);
      rlx_vkt_buf_destroy (self, &self->images);
      rlx_vkt_buf_destroy (self, &self->labels);
      rlx_vkt_buf_destroy (self, &self->params);
      rlx_vkt_buf_destroy (self, &self->grads);
      rlx_vkt_buf_destroy (self, &self->indices);
      rlx_vkt_buf_destroy (self, &self->staging_in);
      rlx_vkt_buf_destroy (self, &self->staging_out);
      rlx_vkt_buf_destroy (self, &self->dummy);
      rlx_vkt_resident_free (self);
      if (self->queries != VK_NULL_HANDLE)
        self->vk.DestroyQueryPool (self->dev, self->queries, NULL);
      if (self->prof != VK_NULL_HANDLE)
        self->vk.DestroyQueryPool (self->dev, self->prof, NULL);
      if (self->fence != VK_NULL_HANDLE)
        self->vk.DestroyFence (self->dev, self->fence, NULL);
      for (guint i = 0; i < 2; i++)
        if (self->fence2[i] != VK_NULL_HANDLE)
          self->vk.DestroyFence (self->dev, self->fence2[i], NULL);
      for (guint i = 0; i < 2; i++)
        if (self->fence3[i] != VK_NULL_HANDLE)
          self->vk.DestroyFence (self->dev, self->fence3[i], NULL);
      if (self->cmdpool != VK_NULL_HANDLE)
        self->vk.DestroyCommandPool (self->dev, self->cmdpool, NULL);
      if (self->layout != VK_NULL_HANDLE)
        self->vk.DestroyPipelineLayout (self->dev, self->layout, NULL);
      if (self->dsl != VK_NULL_HANDLE)
        self->vk.DestroyDescriptorSetLayout (self->dev, self->dsl, NULL);
      self->vk.DestroyDevice (self->dev, NULL);
    }
  g_clear_pointer (&self->steps, g_hash_table_unref);
  g_clear_pointer (&self->acc_recs, g_hash_table_unref);
  g_clear_pointer (&self->slots, g_array_unref);
  g_free (self->ahead_idx);
  g_free (self->own_idx);
  g_free (self->after_idx);
  g_free (self->after_hint);
  g_clear_pointer (&self->pipes, g_array_unref);
  g_clear_pointer (&self->info, rlx_vk_device_info_free);
  g_clear_pointer (&self->dataset, rlx_dataset_unref);
  g_free (self->lost_reason);
  if (self->have_instance)
    rlx_vk_instance_release ();
  g_free (self);
}

RlxVkCompute
rlx_vk_trainer_compute (const RlxVkTrainer *self)
{
  return self->compute;
}

const RlxVkDeviceInfo *
rlx_vk_trainer_device (const RlxVkTrainer *self)
{
  return self->info;
}

void
rlx_vk_trainer_timings (const RlxVkTrainer *self, RlxVkTimings *out)
{
  *out = self->timings;
}

gboolean
rlx_vk_trainer_grads (RlxVkTrainer *self, const float *params, const guint32 *indices,
                      guint n, float *loss, float *grads, GError **error)
{
  gsize pbytes = self->model->n_params * sizeof (float), head;
  gint64 t0 = g_get_monotonic_time ();
  g_autofree char *what = NULL;
  Step *step;
  VkResult r;

  g_return_val_if_fail (self != NULL && params != NULL && indices != NULL && loss != NULL, FALSE);
  g_return_val_if_fail (n >= 1 && n <= self->max_batch, FALSE);

  self->wait_acc = 0;
  if (!check_lost (self, error) || !rlx_vkt_drain_ahead (self, error))
    return FALSE;
  step = get_step (self, n, FALSE, error);
  if (step == NULL)
    return FALSE;

  /* split (rec_split): the first layer's parameters, submit its part, then
   * the rest of the parameters while the GPU computes */
  head = step->n_cb == 2 ? step->head_bytes : pbytes;
  rlx_par_copy (self->upload == UPLOAD_BAR ? self->params.map : self->staging_in.map,
              params, head);
  memcpy ((char *) self->staging_in.map + pbytes, indices, n * sizeof (guint32));

  if (step->n_cb == 2)
    {
      r = rlx_vkt_submit (self, &step->cb[0], 1, VK_NULL_HANDLE, TRUE);
      if (r == VK_SUCCESS)
        {
          rlx_par_copy ((char *) self->params.map + head, (const char *) params + head,
                      pbytes - head);
          r = rlx_vkt_submit (self, &step->cb[1], 1, self->fence, FALSE);
          if (r != VK_SUCCESS)
            self->vk.QueueWaitIdle (self->queue);   /* the first part may be running */
        }
    }
  else
    {
      self->tl_kind = "plain step";
      r = rlx_vkt_submit (self, &step->cb[0], 1, self->fence, TRUE);
    }
  self->host_bytes += 2 * pbytes;
  what = g_strdup_printf ("a %s step of %u samples", self->model->slug, n);
  if (!rlx_vkt_wait_submission (self, self->fence, r, what, error))
    return FALSE;

  *loss = ((const float *) self->staging_out.map)[self->model->n_params];
  if (grads != NULL)
    rlx_par_copy (grads, self->staging_out.map, pbytes);
  rlx_vkt_read_timings (self, step, FALSE);
  self->timings.wall_us = (double) (g_get_monotonic_time () - t0);
  self->timings.wait_us = (double) self->wait_acc;
  self->timings.host_bytes = self->host_bytes;
  return TRUE;
}
