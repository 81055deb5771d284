/* rlx-vk-private.h — internals shared by the files of gpu/ */
#pragma once

/* Vulkan is loaded at run time (dlopen of libvulkan.so.1, or of
 * $RLX_VULKAN_LIBRARY), so rlx-rank starts on a machine without the loader
 * and falls back to the CPU with a reason. No code here calls a vk* symbol
 * directly: loader and instance functions go through rlx_vki, device
 * functions through a per-device RlxVkDeviceTable. */
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>
#include "rlx-vk.h"

G_BEGIN_DECLS

/* Functions callable without an instance (required). */
#define RLX_VK_GLOBAL_FUNCS(X) \
  X (CreateInstance) \
  X (EnumerateInstanceExtensionProperties) \
  X (EnumerateInstanceLayerProperties)

/* Instance functions (required; GetPhysicalDeviceProperties2 is used only
 * when the device reports Vulkan 1.2 and may be NULL with an old loader). */
#define RLX_VK_INSTANCE_FUNCS(X) \
  X (DestroyInstance) \
  X (EnumeratePhysicalDevices) \
  X (GetPhysicalDeviceProperties) \
  X (GetPhysicalDeviceFeatures) \
  X (GetPhysicalDeviceMemoryProperties) \
  X (GetPhysicalDeviceQueueFamilyProperties) \
  X (CreateDevice) \
  X (GetDeviceProcAddr)

/* Device functions, loaded per VkDevice with vkGetDeviceProcAddr (no loader
 * trampoline on the step's path). */
#define RLX_VK_DEVICE_FUNCS(X) \
  X (AllocateCommandBuffers) X (AllocateDescriptorSets) X (AllocateMemory) \
  X (BeginCommandBuffer) X (BindBufferMemory) X (CmdBindDescriptorSets) \
  X (CmdBindPipeline) X (CmdCopyBuffer) X (CmdFillBuffer) X (CmdDispatch) X (CmdPipelineBarrier) \
  X (CmdPushConstants) X (CmdResetQueryPool) X (CmdWriteTimestamp) \
  X (CreateBuffer) X (CreateCommandPool) X (CreateComputePipelines) \
  X (CreateDescriptorPool) X (CreateDescriptorSetLayout) X (CreateFence) \
  X (CreatePipelineLayout) X (CreateQueryPool) X (CreateShaderModule) \
  X (DestroyBuffer) X (DestroyCommandPool) X (DestroyDescriptorPool) \
  X (DestroyDescriptorSetLayout) X (DestroyDevice) X (DestroyFence) \
  X (DestroyPipeline) X (DestroyPipelineLayout) X (DestroyQueryPool) \
  X (DestroyShaderModule) X (DeviceWaitIdle) X (EndCommandBuffer) \
  X (FreeCommandBuffers) X (FreeMemory) X (GetBufferMemoryRequirements) \
  X (GetDeviceQueue) X (GetFenceStatus) X (GetQueryPoolResults) X (MapMemory) \
  X (QueueSubmit) X (QueueWaitIdle) X (ResetFences) X (UpdateDescriptorSets) \
  X (WaitForFences)

#define RLX_VK_FN_MEMBER(name) PFN_vk##name name;

typedef struct {
  PFN_vkGetInstanceProcAddr GetInstanceProcAddr;
  RLX_VK_GLOBAL_FUNCS (RLX_VK_FN_MEMBER)
  RLX_VK_INSTANCE_FUNCS (RLX_VK_FN_MEMBER)
  PFN_vkGetPhysicalDeviceProperties2 GetPhysicalDeviceProperties2;
  /* optional (NULL when the loader or driver lacks them): what a device
   * can do beyond the shaders' needs (cooperative matrix, f16) */
  PFN_vkEnumerateDeviceExtensionProperties EnumerateDeviceExtensionProperties;
  PFN_vkGetPhysicalDeviceFeatures2 GetPhysicalDeviceFeatures2;
  PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV GetPhysicalDeviceCooperativeMatrixPropertiesNV;
  PFN_vkVoidFunction GetPhysicalDeviceCooperativeMatrixPropertiesKHR;   /* not in our headers */
} RlxVkInstanceTable;

typedef struct {
  RLX_VK_DEVICE_FUNCS (RLX_VK_FN_MEMBER)
} RlxVkDeviceTable;

/* Filled by rlx_vk_instance_acquire; valid while an instance is held. */
extern RlxVkInstanceTable rlx_vki;

/* Opens the Vulkan loader once per process (the outcome is kept). FALSE
 * with RLX_VK_ERROR_NO_DRIVER and "no Vulkan loader (libvulkan.so.1 not
 * found; install libvulkan1)" when it is missing. */
gboolean   rlx_vk_loader_open (GError **error);

/* Every function of RLX_VK_DEVICE_FUNCS for @dev; FALSE naming the first
 * one the driver does not give. */
gboolean   rlx_vk_load_device (VkDevice dev, RlxVkDeviceTable *table, GError **error);

/* The process's VkInstance, created on first use (with the validation layer
 * when RLX_VK_VALIDATE is set) and kept until the process ends (rlx-vk.c
 * says why); release only counts users. When it cannot be made the error
 * carries the loader's own messages, the open-file count and how many
 * instances were made before. */
VkInstance rlx_vk_instance_acquire (GError **error);
void       rlx_vk_instance_release (void);

/* "VK_ERROR_DEVICE_LOST" */
const char *rlx_vk_result_name (VkResult r);
/* Sets @error from a failed @r with the code it maps to. */
void        rlx_vk_set_error (GError **error, VkResult r, const char *fmt, ...) G_GNUC_PRINTF (3, 4);

void        rlx_vk_fill_info (VkPhysicalDevice phys, guint index, RlxVkDeviceInfo *info);

/* Sizes of the device buffers a trainer for @model at @max_batch allocates. */
typedef struct {
  guint64     largest;        /* bytes of the largest single buffer */
  const char *largest_name;
  guint64     total;          /* bytes of all of them */
} RlxVkMemoryPlan;
void        rlx_vk_plan_memory (const RlxModel *model, guint max_batch, RlxVkMemoryPlan *plan);

/* What the shaders need (also checked by rlx_vk_device_check). */
#define RLX_VK_WORKGROUP_SIZE   256u
#define RLX_VK_PUSH_BYTES       64u
#define RLX_VK_MIN_SHARED       (9u * 1024u)
#define RLX_VK_TRAIN_IMAGES     60000u

G_END_DECLS
