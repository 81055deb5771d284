/* rlx-vk-private.h — internals shared by the files of gpu/ */
#pragma once

#include <vulkan/vulkan.h>
#include "rlx-vk.h"

G_BEGIN_DECLS

/* The process's VkInstance, created on first use (with the validation layer
 * when RLX_VK_VALIDATE is set) and destroyed when the last user releases it. */
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
