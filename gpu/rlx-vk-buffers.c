/* rlx-vk-buffers.c — a trainer's device buffers: memory types, creation,
 * and the one-off upload through a staging buffer
 *
 * Threads: the trainer's (rlx-vk-trainer-private.h).
 */
#include "rlx-config.h"
#include "rlx-vk-trainer-private.h"

#include <string.h>

/* The first memory type among @type_bits with all of @want and none of
 * @avoid; then with all of @fallback (0: no fallback). */
static guint32
find_memory (RlxVkTrainer *self, guint32 type_bits, VkMemoryPropertyFlags want,
             VkMemoryPropertyFlags avoid, VkMemoryPropertyFlags fallback)
{
  for (guint32 i = 0; i < self->memprops.memoryTypeCount; i++)
    {
      VkMemoryPropertyFlags f = self->memprops.memoryTypes[i].propertyFlags;
      if ((type_bits & (1u << i)) && (f & want) == want && (f & avoid) == 0)
        return i;
    }
  if (fallback != 0)
    for (guint32 i = 0; i < self->memprops.memoryTypeCount; i++)
      if ((type_bits & (1u << i)) &&
          (self->memprops.memoryTypes[i].propertyFlags & fallback) == fallback)
        return i;
  return G_MAXUINT32;
}

gboolean
rlx_vkt_buf_create (RlxVkTrainer *self, Buf *b, VkDeviceSize size, VkBufferUsageFlags usage,
                    MemKind kind, const char *what, GError **error)
{
  const VkMemoryPropertyFlags visible = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                        VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  gboolean host = kind != MEM_DEVICE;
  VkBufferCreateInfo bci = {
    .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
    .size = MAX (size, 16),
    .usage = usage,
    .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
  };
  VkMemoryRequirements req;
  VkMemoryAllocateInfo mai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO };
  VkResult r;

  b->size = bci.size;
  b->bit = G_GUINT64_CONSTANT (1) << (self->n_bufs_made++ % 64);
  r = self->vk.CreateBuffer (self->dev, &bci, NULL, &b->buf);
  if (r != VK_SUCCESS)
    {
      rlx_vk_set_error (error, r, "creating the %s buffer (%" G_GUINT64_FORMAT " bytes)",
                        what, (guint64) size);
      return FALSE;
    }
  self->vk.GetBufferMemoryRequirements (self->dev, b->buf, &req);
  mai.allocationSize = req.size;
  switch (kind)
    {
    case MEM_READBACK:
      mai.memoryTypeIndex = find_memory (self, req.memoryTypeBits,
                                         visible | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0, visible);
      break;
    case MEM_UPLOAD:
      mai.memoryTypeIndex = find_memory (self, req.memoryTypeBits, visible,
                                         VK_MEMORY_PROPERTY_HOST_CACHED_BIT |
                                         VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, visible);
      break;
    case MEM_DEVICE_MAPPED:
      mai.memoryTypeIndex = find_memory (self, req.memoryTypeBits,
                                         visible | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, 0);
      break;
    case MEM_DEVICE:
    default:
      mai.memoryTypeIndex = find_memory (self, req.memoryTypeBits,
                                         VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, 0);
      break;
    }
  if (mai.memoryTypeIndex == G_MAXUINT32)
    {
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_UNSUPPORTED,
                   "%s has no memory type for the %s buffer", self->info->name, what);
      return FALSE;
    }
  g_debug ("rlx-vk: %s buffer, %" G_GUINT64_FORMAT " bytes, memory type %u (flags 0x%x)", what,
           (guint64) size, mai.memoryTypeIndex,
           self->memprops.memoryTypes[mai.memoryTypeIndex].propertyFlags);
  r = self->vk.AllocateMemory (self->dev, &mai, NULL, &b->mem);
  if (r != VK_SUCCESS)
    {
      g_autofree char *sz = g_format_size_full (req.size, G_FORMAT_SIZE_IEC_UNITS);
      b->mem = VK_NULL_HANDLE;
      rlx_vk_set_error (error, r, "allocating %s for the %s buffer of %s at batch %u",
                        sz, what, self->model->slug, self->max_batch);
      return FALSE;
    }
  r = self->vk.BindBufferMemory (self->dev, b->buf, b->mem, 0);
  if (r == VK_SUCCESS && host)
    r = self->vk.MapMemory (self->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map);
  if (r != VK_SUCCESS)
    {
      rlx_vk_set_error (error, r, "binding the %s buffer", what);
      return FALSE;
    }
  return TRUE;
}

void
rlx_vkt_buf_destroy (RlxVkTrainer *self, Buf *b)
{
  if (b->buf != VK_NULL_HANDLE)
    self->vk.DestroyBuffer (self->dev, b->buf, NULL);
  if (b->mem != VK_NULL_HANDLE)
    self->vk.FreeMemory (self->dev, b->mem, NULL);
  memset (b, 0, sizeof *b);
}

gboolean
rlx_vkt_upload (RlxVkTrainer *self, Buf *dst, const void *data, gsize size, GError **error)
{
  Buf staging = { 0 };
  VkCommandBufferAllocateInfo cai = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
    .commandPool = self->cmdpool,
    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
    .commandBufferCount = 1,
  };
  VkCommandBufferBeginInfo bi = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
    .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
  };
  VkBufferCopy region = { 0, 0, size };
  VkCommandBuffer cb = VK_NULL_HANDLE;
  VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1 };
  VkResult r;
  gboolean ok = FALSE;

  if (!rlx_vkt_buf_create (self, &staging, size, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, MEM_UPLOAD,
                           "upload staging", error))
    goto out;
  memcpy (staging.map, data, size);
  r = self->vk.AllocateCommandBuffers (self->dev, &cai, &cb);
  if (r == VK_SUCCESS)
    r = self->vk.BeginCommandBuffer (cb, &bi);
  if (r == VK_SUCCESS)
    {
      self->vk.CmdCopyBuffer (cb, staging.buf, dst->buf, 1, &region);
      r = self->vk.EndCommandBuffer (cb);
    }
  si.pCommandBuffers = &cb;
  if (r == VK_SUCCESS)
    r = self->vk.ResetFences (self->dev, 1, &self->fence);
  if (r == VK_SUCCESS)
    r = self->vk.QueueSubmit (self->queue, 1, &si, self->fence);
  if (r == VK_SUCCESS)
    r = self->vk.WaitForFences (self->dev, 1, &self->fence, VK_TRUE, 60ull * 1000000000ull);
  if (r == VK_TIMEOUT)
    r = VK_ERROR_DEVICE_LOST;
  if (r != VK_SUCCESS)
    {
      rlx_vk_set_error (error, r, "uploading the training set to %s", self->info->name);
      goto out;
    }
  ok = TRUE;
out:
  if (cb != VK_NULL_HANDLE)
    self->vk.FreeCommandBuffers (self->dev, self->cmdpool, 1, &cb);
  rlx_vkt_buf_destroy (self, &staging);
  return ok;
}

/* Host-written memory the GPU reads: device-local where the host can map it
 * (RLX_VK_UPLOAD=bar, the default), else host memory. */
gboolean
rlx_vkt_buf_create_upload (RlxVkTrainer *self, Buf *b, gsize size, const char *what, GError **error)
{
  const VkBufferUsageFlags storage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_SRC_BIT;

  if (self->upload == UPLOAD_BAR && rlx_vkt_buf_create (self, b, size, storage, MEM_DEVICE_MAPPED, what, NULL))
    return TRUE;
  rlx_vkt_buf_destroy (self, b);
  return rlx_vkt_buf_create (self, b, size, storage, MEM_UPLOAD, what, error);
}
