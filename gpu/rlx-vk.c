/* rlx-vk.c — the Vulkan instance, device enumeration and device checks */
#include "rlx-config.h"
#include "rlx-vk-private.h"
#include "rlx-vk-tunables.h"

#include <dlfcn.h>
#include <sys/resource.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

G_DEFINE_QUARK (rlx-vk-error-quark, rlx_vk_error)

/* ------------------------------------------------------------- the loader */

RlxVkInstanceTable rlx_vki;
static void *libvulkan;
static char *loader_error;     /* why the loader could not be opened */

static gpointer
open_loader (gpointer data)
{
  const char *name = rlx_vk_tunable_library ();
  void *sym;

  libvulkan = dlopen (name, RTLD_NOW | RTLD_LOCAL);
  if (libvulkan == NULL)
    {
      const char *why = dlerror ();

      g_debug ("dlopen %s: %s", name, why ? why : "?");
      if (why == NULL || strstr (why, "No such file") != NULL)
        loader_error = g_strdup_printf ("no Vulkan loader (%s not found; install libvulkan1)", name);
      else
        loader_error = g_strdup_printf ("the Vulkan loader %s could not be loaded (%s); "
                                        "reinstall libvulkan1", name, why);
      return NULL;
    }
  sym = dlsym (libvulkan, "vkGetInstanceProcAddr");
  if (sym == NULL)
    {
      loader_error = g_strdup_printf ("%s is not a Vulkan loader (it has no vkGetInstanceProcAddr); "
                                      "reinstall libvulkan1", name);
      return NULL;
    }
  rlx_vki.GetInstanceProcAddr = (PFN_vkGetInstanceProcAddr) sym;
#define LOAD_GLOBAL(fn) \
  rlx_vki.fn = (PFN_vk##fn) rlx_vki.GetInstanceProcAddr (VK_NULL_HANDLE, "vk" #fn); \
  if (rlx_vki.fn == NULL) \
    { \
      loader_error = g_strdup_printf ("the Vulkan loader %s has no vk" #fn "; reinstall libvulkan1", name); \
      return NULL; \
    }
  RLX_VK_GLOBAL_FUNCS (LOAD_GLOBAL)
#undef LOAD_GLOBAL
  return libvulkan;
}

gboolean
rlx_vk_loader_open (GError **error)
{
  static GOnce once = G_ONCE_INIT;

  if (g_once (&once, open_loader, NULL) != NULL)
    return TRUE;
  g_set_error_literal (error, RLX_VK_ERROR, RLX_VK_ERROR_NO_DRIVER, loader_error);
  return FALSE;
}

static gboolean
load_instance (VkInstance inst, GError **error)
{
#define LOAD_INSTANCE(fn) \
  rlx_vki.fn = (PFN_vk##fn) rlx_vki.GetInstanceProcAddr (inst, "vk" #fn); \
  if (rlx_vki.fn == NULL) \
    { \
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_NO_DRIVER, \
                   "the Vulkan loader has no vk" #fn "; update libvulkan1"); \
      return FALSE; \
    }
  RLX_VK_INSTANCE_FUNCS (LOAD_INSTANCE)
#undef LOAD_INSTANCE
  rlx_vki.GetPhysicalDeviceProperties2 = (PFN_vkGetPhysicalDeviceProperties2)
    rlx_vki.GetInstanceProcAddr (inst, "vkGetPhysicalDeviceProperties2");
  rlx_vki.EnumerateDeviceExtensionProperties = (PFN_vkEnumerateDeviceExtensionProperties)
    rlx_vki.GetInstanceProcAddr (inst, "vkEnumerateDeviceExtensionProperties");
  rlx_vki.GetPhysicalDeviceFeatures2 = (PFN_vkGetPhysicalDeviceFeatures2)
    rlx_vki.GetInstanceProcAddr (inst, "vkGetPhysicalDeviceFeatures2");
  rlx_vki.GetPhysicalDeviceCooperativeMatrixPropertiesNV = (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)
    rlx_vki.GetInstanceProcAddr (inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
  rlx_vki.GetPhysicalDeviceCooperativeMatrixPropertiesKHR =
    rlx_vki.GetInstanceProcAddr (inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
  return TRUE;
}

gboolean
rlx_vk_load_device (VkDevice dev, RlxVkDeviceTable *table, GError **error)
{
  memset (table, 0, sizeof *table);
#define LOAD_DEVICE(fn) \
  table->fn = (PFN_vk##fn) rlx_vki.GetDeviceProcAddr (dev, "vk" #fn); \
  if (table->fn == NULL) \
    { \
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_UNSUPPORTED, \
                   "the Vulkan driver gives no vk" #fn "; update the GPU driver"); \
      return FALSE; \
    }
  RLX_VK_DEVICE_FUNCS (LOAD_DEVICE)
#undef LOAD_DEVICE
  return TRUE;
}

/* The process's VkInstance is made on first use and kept until the process
 * ends: backends come and go (the app and the tests open and close them one
 * after another), the instance stays. Destroying and re-creating it is what
 * failed on the H200 (device run 1: NVIDIA 580.159.04 with the validation
 * layer refused a process's ~25th vkCreateInstance with
 * VK_ERROR_INCOMPATIBLE_DRIVER after a dozen backends had been opened and
 * closed; others report the same driver corrupting its state after ~11
 * create/destroy cycles), and it saves every backend after the first the
 * time of loading the driver and the layers again. */
static GMutex   instance_lock;
static guint    instance_users;
static guint    instances_made;
static VkInstance instance;
static VkDebugUtilsMessengerEXT messenger;
static gboolean validation_on;
static gint     n_messages;
/* the loader's own errors and warnings while an instance is being made
 * (under instance_lock), for the error when it cannot be */
static GPtrArray *loader_said;

#define LOADER_SAID_MAX 12

guint
rlx_vk_validation_messages (void)
{
  return (guint) g_atomic_int_get (&n_messages);
}

gboolean
rlx_vk_validation_enabled (void)
{
  return validation_on;
}

guint
rlx_vk_instances_made (void)
{
  g_autoptr(GMutexLocker) locker = g_mutex_locker_new (&instance_lock);

  return instances_made;
}

static VKAPI_ATTR VkBool32 VKAPI_CALL
on_debug_message (VkDebugUtilsMessageSeverityFlagBitsEXT      severity,
                  VkDebugUtilsMessageTypeFlagsEXT             types,
                  const VkDebugUtilsMessengerCallbackDataEXT *data,
                  void                                       *user_data)
{
  const char *msg = data->pMessage ? data->pMessage : "(no message)";

  /* while the instance is being made: keep what the loader says */
  if (user_data == &loader_said && loader_said != NULL &&
      (types & VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT) != 0)
    {
      if (loader_said->len == LOADER_SAID_MAX)
        g_ptr_array_remove_index (loader_said, 0);
      g_ptr_array_add (loader_said, g_strdup_printf ("%s: %.300s",
                                                     (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)
                                                     ? "error" : "warning", msg));
    }
  if ((types & (VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT)) == 0 ||
      (severity & (VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                   VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)) == 0)
    return VK_FALSE;
  g_atomic_int_inc (&n_messages);
  fprintf (stderr, "rlx-vk: %s: %s\n",
           (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ? "validation error"
                                                                      : "validation warning",
           msg);
  return VK_FALSE;
}

static gboolean
has_layer (const char *name)
{
  guint32 n = 0;
  g_autofree VkLayerProperties *props = NULL;

  if (rlx_vki.EnumerateInstanceLayerProperties (&n, NULL) != VK_SUCCESS || n == 0)
    return FALSE;
  props = g_new0 (VkLayerProperties, n);
  if (rlx_vki.EnumerateInstanceLayerProperties (&n, props) != VK_SUCCESS)
    return FALSE;
  for (guint32 i = 0; i < n; i++)
    if (strcmp (props[i].layerName, name) == 0)
      return TRUE;
  return FALSE;
}

static gboolean
has_instance_extension (const char *name)
{
  guint32 n = 0;
  g_autofree VkExtensionProperties *props = NULL;

  if (rlx_vki.EnumerateInstanceExtensionProperties (NULL, &n, NULL) != VK_SUCCESS || n == 0)
    return FALSE;
  props = g_new0 (VkExtensionProperties, n);
  if (rlx_vki.EnumerateInstanceExtensionProperties (NULL, &n, props) != VK_SUCCESS)
    return FALSE;
  for (guint32 i = 0; i < n; i++)
    if (strcmp (props[i].extensionName, name) == 0)
      return TRUE;
  return FALSE;
}

/* What the loader said when vkCreateInstance failed (its errors and
 * warnings) and, when the failure is odd — this process made an instance
 * before, or is near its open-file limit (a driver that cannot open its
 * device files fails this way) — the open-file count and the instances made
 * before. */
static char *
instance_failure_details (void)
{
  g_autoptr(GString) s = g_string_new (NULL);
  g_autoptr(GDir) fds = g_dir_open ("/proc/self/fd", 0, NULL);
  struct rlimit lim;
  guint n_fds = 0, said = 0;

  for (guint i = 0; loader_said != NULL && i < loader_said->len; i++)
    g_string_append_printf (s, "%s%s", said++ ? " | " : "; the loader said: ",
                            (char *) g_ptr_array_index (loader_said, i));
  if (said == 0)
    g_string_append (s, "; VK_LOADER_DEBUG=all in the environment makes the loader list "
                        "what it tried");
  while (fds != NULL && g_dir_read_name (fds) != NULL)
    n_fds++;
  if (fds != NULL && getrlimit (RLIMIT_NOFILE, &lim) == 0 &&
      (instances_made > 0 || (guint64) n_fds * 5 >= (guint64) lim.rlim_cur * 4))
    g_string_append_printf (s, "; this process has %u files open (limit %llu) and made %u "
                            "Vulkan instance%s before", n_fds, (unsigned long long) lim.rlim_cur,
                            instances_made, instances_made == 1 ? "" : "s");
  return g_string_free (g_steal_pointer (&s), FALSE);
}

VkInstance
rlx_vk_instance_acquire (GError **error)
{
  g_autoptr(GMutexLocker) locker = g_mutex_locker_new (&instance_lock);
  VkApplicationInfo app = {
    .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
    .pApplicationName = "rlx-cluster",
    .applicationVersion = 1,
    .pEngineName = "rlx-gpu",
    .apiVersion = VK_API_VERSION_1_2,
  };
  const char *layers[1];
  const char *exts[1];
  guint n_layers = 0, n_exts = 0;
  gboolean debug_utils;
  /* for the life of the instance: validation and performance messages */
  VkDebugUtilsMessengerCreateInfoEXT dbg = {
    .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
    .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
    .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                   VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
    .pfnUserCallback = on_debug_message,
  };
  /* while it is made: the loader's messages too, kept for the error */
  VkDebugUtilsMessengerCreateInfoEXT during = {
    .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
    .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
    .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                   VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                   VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
    .pfnUserCallback = on_debug_message,
    .pUserData = &loader_said,
  };
  VkInstanceCreateInfo ci = {
    .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
    .pApplicationInfo = &app,
  };
  VkResult r;

  if (instance != VK_NULL_HANDLE)
    {
      instance_users++;
      return instance;
    }
  if (!rlx_vk_loader_open (error))
    return VK_NULL_HANDLE;

  validation_on = FALSE;
  if (rlx_vk_tunable_validate ())
    {
      if (!has_layer ("VK_LAYER_KHRONOS_validation"))
        {
          g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_NO_DRIVER,
                       "RLX_VK_VALIDATE is set but the Khronos validation layer is not "
                       "installed (apt install vulkan-validationlayers)");
          return VK_NULL_HANDLE;
        }
      layers[n_layers++] = "VK_LAYER_KHRONOS_validation";
      validation_on = TRUE;
    }
  debug_utils = has_instance_extension (VK_EXT_DEBUG_UTILS_EXTENSION_NAME) || validation_on;
  if (debug_utils)
    exts[n_exts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;

  ci.enabledLayerCount = n_layers;
  ci.ppEnabledLayerNames = layers;
  ci.enabledExtensionCount = n_exts;
  ci.ppEnabledExtensionNames = exts;
  if (debug_utils)
    ci.pNext = &during;

  loader_said = g_ptr_array_new_with_free_func (g_free);
  r = rlx_vki.CreateInstance (&ci, NULL, &instance);
  if (r != VK_SUCCESS)
    {
      g_autofree char *details = instance_failure_details ();

      instance = VK_NULL_HANDLE;
      g_clear_pointer (&loader_said, g_ptr_array_unref);
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_NO_DRIVER,
                   r == VK_ERROR_INCOMPATIBLE_DRIVER
                   ? "no Vulkan driver is installed (the loader found no usable ICD: %s); "
                     "install the GPU's Vulkan driver (mesa-vulkan-drivers, nvidia-driver)%s"
                   : "the Vulkan loader could not create an instance (%s)%s",
                   rlx_vk_result_name (r), details);
      return VK_NULL_HANDLE;
    }
  g_clear_pointer (&loader_said, g_ptr_array_unref);
  instances_made++;
  if (!load_instance (instance, error))
    {
      PFN_vkDestroyInstance destroy =
        (PFN_vkDestroyInstance) rlx_vki.GetInstanceProcAddr (instance, "vkDestroyInstance");
      if (destroy != NULL)
        destroy (instance, NULL);
      instance = VK_NULL_HANDLE;
      return VK_NULL_HANDLE;
    }

  messenger = VK_NULL_HANDLE;
  if (debug_utils)
    {
      PFN_vkCreateDebugUtilsMessengerEXT create =
        (PFN_vkCreateDebugUtilsMessengerEXT) rlx_vki.GetInstanceProcAddr (instance, "vkCreateDebugUtilsMessengerEXT");
      if (create != NULL)
        create (instance, &dbg, NULL, &messenger);
    }
  instance_users = 1;
  return instance;
}

void
rlx_vk_instance_release (void)
{
  g_autoptr(GMutexLocker) locker = g_mutex_locker_new (&instance_lock);

  /* the instance itself stays (see instance_lock) */
  g_return_if_fail (instance_users > 0);
  instance_users--;
}

const char *
rlx_vk_result_name (VkResult r)
{
  switch (r)
    {
#define R(x) case x: return #x;
      R (VK_SUCCESS) R (VK_NOT_READY) R (VK_TIMEOUT) R (VK_INCOMPLETE)
      R (VK_ERROR_OUT_OF_HOST_MEMORY) R (VK_ERROR_OUT_OF_DEVICE_MEMORY)
      R (VK_ERROR_INITIALIZATION_FAILED) R (VK_ERROR_DEVICE_LOST)
      R (VK_ERROR_MEMORY_MAP_FAILED) R (VK_ERROR_LAYER_NOT_PRESENT)
      R (VK_ERROR_EXTENSION_NOT_PRESENT) R (VK_ERROR_FEATURE_NOT_PRESENT)
      R (VK_ERROR_INCOMPATIBLE_DRIVER) R (VK_ERROR_TOO_MANY_OBJECTS)
      R (VK_ERROR_FORMAT_NOT_SUPPORTED) R (VK_ERROR_FRAGMENTED_POOL)
      R (VK_ERROR_OUT_OF_POOL_MEMORY) R (VK_ERROR_INVALID_SHADER_NV)
      R (VK_ERROR_UNKNOWN)
#undef R
    default:
      return "VkResult (unknown)";
    }
}

void
rlx_vk_set_error (GError **error, VkResult r, const char *fmt, ...)
{
  va_list ap;
  g_autofree char *what = NULL;
  int code;

  va_start (ap, fmt);
  what = g_strdup_vprintf (fmt, ap);
  va_end (ap);

  switch (r)
    {
    case VK_ERROR_DEVICE_LOST:
      code = RLX_VK_ERROR_DEVICE_LOST;
      g_set_error (error, RLX_VK_ERROR, code,
                   "the GPU was lost (%s: VK_ERROR_DEVICE_LOST); this rank cannot compute "
                   "on it any more — restart it, or use --backend cpu", what);
      return;
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_OUT_OF_POOL_MEMORY:
    case VK_ERROR_TOO_MANY_OBJECTS:
      code = RLX_VK_ERROR_OUT_OF_MEMORY;
      g_set_error (error, RLX_VK_ERROR, code,
                   "out of %s memory (%s: %s); use a smaller batch",
                   r == VK_ERROR_OUT_OF_HOST_MEMORY ? "host" : "GPU", what, rlx_vk_result_name (r));
      return;
    case VK_ERROR_FEATURE_NOT_PRESENT:
    case VK_ERROR_EXTENSION_NOT_PRESENT:
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      code = RLX_VK_ERROR_UNSUPPORTED;
      break;
    default:
      code = RLX_VK_ERROR_FAILED;
      break;
    }
  g_set_error (error, RLX_VK_ERROR, code, "%s: %s", what, rlx_vk_result_name (r));
}

/* ------------------------------------------------------------ device info */

RlxVkDeviceInfo *
rlx_vk_device_info_copy (const RlxVkDeviceInfo *info)
{
  RlxVkDeviceInfo *copy = g_memdup2 (info, sizeof *info);

  copy->name = g_strdup (info->name);
  copy->driver = g_strdup (info->driver);
  return copy;
}

void
rlx_vk_device_info_free (RlxVkDeviceInfo *info)
{
  if (info == NULL)
    return;
  g_free (info->name);
  g_free (info->driver);
  g_free (info);
}

const char *
rlx_vk_device_type_name (RlxVkDeviceType type)
{
  switch (type)
    {
    case RLX_VK_DEVICE_DISCRETE: return "discrete GPU";
    case RLX_VK_DEVICE_INTEGRATED: return "integrated GPU";
    case RLX_VK_DEVICE_VIRTUAL: return "virtual GPU";
    case RLX_VK_DEVICE_CPU: return "software (CPU)";
    case RLX_VK_DEVICE_OTHER:
    default: return "other";
    }
}

gboolean
rlx_vk_device_is_software (const RlxVkDeviceInfo *info)
{
  g_autofree char *lower = NULL;

  if (info->type == RLX_VK_DEVICE_CPU)
    return TRUE;
  lower = g_ascii_strdown (info->name ? info->name : "", -1);
  return strstr (lower, "llvmpipe") != NULL || strstr (lower, "lavapipe") != NULL ||
         strstr (lower, "swiftshader") != NULL;
}

/* VK_KHR_cooperative_matrix is newer than Debian 12's Vulkan headers
 * (1.3.239): its property struct and the values used here, from the spec */
typedef struct {
  VkStructureType sType;
  void           *pNext;
  guint32         MSize, NSize, KSize;
  guint32         AType, BType, CType, ResultType;
  VkBool32        saturatingAccumulation;
  guint32         scope;
} RlxCoopPropsKHR;
typedef VkResult (VKAPI_PTR *RlxCoopPropsKHRFunc) (VkPhysicalDevice, guint32 *, RlxCoopPropsKHR *);
#define RLX_STYPE_COOP_PROPS_KHR  ((VkStructureType) 1000506001)
#define RLX_COMPONENT_BF16_KHR    1000141000u
#define RLX_SCOPE_SUBGROUP        3u

static guint8
component_of (guint32 t)
{
  switch (t)
    {
    case 0: return RLX_VK_COMPONENT_F16;
    case 1: return RLX_VK_COMPONENT_F32;
    case RLX_COMPONENT_BF16_KHR: return RLX_VK_COMPONENT_BF16;
    default: return t >= 3 && t <= 10 ? RLX_VK_COMPONENT_INT : RLX_VK_COMPONENT_OTHER;
    }
}

static void
add_shape (RlxVkDeviceInfo *info, guint32 m, guint32 n, guint32 k, guint32 a, guint32 b,
           guint32 c, guint32 r, guint32 scope, gboolean khr)
{
  RlxVkCoopShape *s;

  if (info->n_coop == RLX_VK_MAX_COOP_SHAPES)
    return;
  s = &info->coop[info->n_coop++];
  *s = (RlxVkCoopShape) { (guint16) m, (guint16) n, (guint16) k, component_of (a), component_of (b),
                          component_of (c), component_of (r), scope == RLX_SCOPE_SUBGROUP, khr };
}

/* What the device offers for --compute f16 / bf16: the extensions, the
 * shapes each lists, shaderFloat16. */
static void
fill_coop (VkPhysicalDevice phys, RlxVkDeviceInfo *info)
{
  VkPhysicalDeviceVulkanMemoryModelFeatures vmm = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES,
  };
  VkPhysicalDeviceShaderFloat16Int8Features f16 = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES,
    .pNext = &vmm,
  };
  VkPhysicalDeviceFeatures2 feat = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
    .pNext = &f16,
  };
  g_autofree VkExtensionProperties *ext = NULL;
  guint32 n = 0;

  if (rlx_vki.EnumerateDeviceExtensionProperties == NULL ||
      rlx_vki.EnumerateDeviceExtensionProperties (phys, NULL, &n, NULL) != VK_SUCCESS || n == 0)
    return;
  ext = g_new0 (VkExtensionProperties, n);
  if (rlx_vki.EnumerateDeviceExtensionProperties (phys, NULL, &n, ext) != VK_SUCCESS)
    return;
  for (guint32 i = 0; i < n; i++)
    {
      if (strcmp (ext[i].extensionName, "VK_NV_cooperative_matrix") == 0)
        info->coop_nv = TRUE;
      else if (strcmp (ext[i].extensionName, "VK_KHR_cooperative_matrix") == 0)
        info->coop_khr = TRUE;
      else if (strcmp (ext[i].extensionName, "VK_KHR_shader_bfloat16") == 0)
        info->shader_bf16 = TRUE;
    }
  if (info->api_version >= VK_API_VERSION_1_2 && rlx_vki.GetPhysicalDeviceFeatures2 != NULL)
    {
      rlx_vki.GetPhysicalDeviceFeatures2 (phys, &feat);
      info->shader_f16 = f16.shaderFloat16;
      info->memory_model = vmm.vulkanMemoryModel && vmm.vulkanMemoryModelDeviceScope;
    }
  if (info->coop_nv && rlx_vki.GetPhysicalDeviceCooperativeMatrixPropertiesNV != NULL)
    {
      guint32 np = 0;
      g_autofree VkCooperativeMatrixPropertiesNV *p = NULL;

      if (rlx_vki.GetPhysicalDeviceCooperativeMatrixPropertiesNV (phys, &np, NULL) == VK_SUCCESS && np > 0)
        {
          p = g_new0 (VkCooperativeMatrixPropertiesNV, np);
          for (guint32 i = 0; i < np; i++)
            p[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
          if (rlx_vki.GetPhysicalDeviceCooperativeMatrixPropertiesNV (phys, &np, p) == VK_SUCCESS)
            for (guint32 i = 0; i < np; i++)
              add_shape (info, p[i].MSize, p[i].NSize, p[i].KSize, p[i].AType, p[i].BType,
                         p[i].CType, p[i].DType, p[i].scope, FALSE);
        }
    }
  if (info->coop_khr && rlx_vki.GetPhysicalDeviceCooperativeMatrixPropertiesKHR != NULL)
    {
      RlxCoopPropsKHRFunc get = (RlxCoopPropsKHRFunc) rlx_vki.GetPhysicalDeviceCooperativeMatrixPropertiesKHR;
      guint32 np = 0;
      g_autofree RlxCoopPropsKHR *p = NULL;

      if (get (phys, &np, NULL) == VK_SUCCESS && np > 0)
        {
          p = g_new0 (RlxCoopPropsKHR, np);
          for (guint32 i = 0; i < np; i++)
            p[i].sType = RLX_STYPE_COOP_PROPS_KHR;
          if (get (phys, &np, p) == VK_SUCCESS)
            for (guint32 i = 0; i < np; i++)
              add_shape (info, p[i].MSize, p[i].NSize, p[i].KSize, p[i].AType, p[i].BType,
                         p[i].CType, p[i].ResultType, p[i].scope, TRUE);
        }
    }
}

void
rlx_vk_fill_info (VkPhysicalDevice phys, guint index, RlxVkDeviceInfo *info)
{
  VkPhysicalDeviceIDProperties id = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES,
  };
  VkPhysicalDeviceDriverProperties driver = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES,
    .pNext = &id,
  };
  VkPhysicalDeviceSubgroupProperties subgroup = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
    .pNext = &driver,
  };
  VkPhysicalDeviceMaintenance3Properties maint3 = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
    .pNext = &subgroup,
  };
  VkPhysicalDeviceProperties2 props2 = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
    .pNext = &maint3,
  };
  VkPhysicalDeviceProperties props;
  VkPhysicalDeviceMemoryProperties mem;
  guint32 nq = 0;
  g_autofree VkQueueFamilyProperties *q = NULL;

  rlx_vki.GetPhysicalDeviceProperties (phys, &props);
  memset (info, 0, sizeof *info);
  info->index = index;
  info->name = g_strdup (props.deviceName);
  info->api_version = props.apiVersion;
  info->vendor_id = props.vendorID;
  info->device_id = props.deviceID;
  switch (props.deviceType)
    {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: info->type = RLX_VK_DEVICE_DISCRETE; break;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: info->type = RLX_VK_DEVICE_INTEGRATED; break;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: info->type = RLX_VK_DEVICE_VIRTUAL; break;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: info->type = RLX_VK_DEVICE_CPU; break;
    default: info->type = RLX_VK_DEVICE_OTHER; break;
    }
  info->max_shared_memory = props.limits.maxComputeSharedMemorySize;
  info->max_push_constants = props.limits.maxPushConstantsSize;
  info->max_workgroup_invocations = props.limits.maxComputeWorkGroupInvocations;
  for (guint i = 0; i < 3; i++)
    info->max_workgroup_count[i] = props.limits.maxComputeWorkGroupCount[i];
  info->max_storage_buffer_range = props.limits.maxStorageBufferRange;
  info->timestamp_period = props.limits.timestampPeriod;

  if (props.apiVersion >= VK_API_VERSION_1_2 && rlx_vki.GetPhysicalDeviceProperties2 != NULL)
    {
      rlx_vki.GetPhysicalDeviceProperties2 (phys, &props2);
      info->driver = g_strdup_printf ("%s %s", driver.driverName, driver.driverInfo);
      info->subgroup_size = subgroup.subgroupSize;
      info->max_allocation = maint3.maxMemoryAllocationSize;
      for (guint i = 0; i < VK_UUID_SIZE; i++)
        g_snprintf (info->uuid + 2 * i, 3, "%02x", id.deviceUUID[i]);
    }
  else
    info->driver = g_strdup_printf ("driver version %u", props.driverVersion);

  rlx_vki.GetPhysicalDeviceMemoryProperties (phys, &mem);
  for (guint32 i = 0; i < mem.memoryHeapCount; i++)
    if (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      info->device_local_bytes = MAX (info->device_local_bytes, mem.memoryHeaps[i].size);

  fill_coop (phys, info);

  rlx_vki.GetPhysicalDeviceQueueFamilyProperties (phys, &nq, NULL);
  q = g_new0 (VkQueueFamilyProperties, MAX (nq, 1));
  rlx_vki.GetPhysicalDeviceQueueFamilyProperties (phys, &nq, q);
  for (guint32 i = 0; i < nq; i++)
    if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT)
      {
        info->has_compute_queue = TRUE;
        info->has_timestamps = q[i].timestampValidBits > 0 && props.limits.timestampPeriod > 0;
        break;
      }
}

GPtrArray *
rlx_vk_enumerate (GError **error)
{
  VkInstance inst = rlx_vk_instance_acquire (error);
  g_autoptr(GPtrArray) out = NULL;
  g_autofree VkPhysicalDevice *phys = NULL;
  guint32 n = 0;
  VkResult r;

  if (inst == VK_NULL_HANDLE)
    return NULL;

  out = g_ptr_array_new_with_free_func ((GDestroyNotify) rlx_vk_device_info_free);
  r = rlx_vki.EnumeratePhysicalDevices (inst, &n, NULL);
  if (r == VK_SUCCESS && n > 0)
    {
      phys = g_new0 (VkPhysicalDevice, n);
      r = rlx_vki.EnumeratePhysicalDevices (inst, &n, phys);
    }
  if (r != VK_SUCCESS && r != VK_INCOMPLETE)
    {
      rlx_vk_instance_release ();
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_NO_DRIVER,
                   "the Vulkan loader could not list devices (%s)", rlx_vk_result_name (r));
      return NULL;
    }
  for (guint32 i = 0; i < n; i++)
    {
      RlxVkDeviceInfo *info = g_new0 (RlxVkDeviceInfo, 1);
      rlx_vk_fill_info (phys[i], i, info);
      g_ptr_array_add (out, info);
    }
  rlx_vk_instance_release ();
  return g_steal_pointer (&out);
}

static char *
format_bytes (guint64 b)
{
  return g_format_size_full (b, G_FORMAT_SIZE_IEC_UNITS);
}

char *
rlx_vk_device_check (const RlxVkDeviceInfo *info, const RlxModel *model, guint max_batch)
{
  RlxVkMemoryPlan plan;

  g_return_val_if_fail (info != NULL && model != NULL, NULL);

  if (info->api_version < VK_API_VERSION_1_1)
    return g_strdup_printf ("%s supports only Vulkan %u.%u; the shaders need Vulkan 1.1",
                            info->name, VK_API_VERSION_MAJOR (info->api_version),
                            VK_API_VERSION_MINOR (info->api_version));
  if (!info->has_compute_queue)
    return g_strdup_printf ("%s has no compute queue", info->name);
  if (info->max_workgroup_invocations < RLX_VK_WORKGROUP_SIZE)
    return g_strdup_printf ("%s runs at most %u threads per workgroup; the shaders need %u",
                            info->name, info->max_workgroup_invocations, RLX_VK_WORKGROUP_SIZE);
  if (info->max_push_constants < RLX_VK_PUSH_BYTES)
    return g_strdup_printf ("%s offers %u bytes of push constants; the shaders need %u",
                            info->name, info->max_push_constants, RLX_VK_PUSH_BYTES);
  if (info->max_shared_memory < RLX_VK_MIN_SHARED)
    return g_strdup_printf ("the shaders need %u KiB of shared memory, %s has %u KiB",
                            RLX_VK_MIN_SHARED / 1024, info->name, info->max_shared_memory / 1024);
  if (info->max_workgroup_count[0] < 65535 || info->max_workgroup_count[1] < 65535 ||
      info->max_workgroup_count[2] < 64)
    return g_strdup_printf ("%s dispatches at most %u×%u×%u workgroups; the shaders need "
                            "65535×65535×64", info->name, info->max_workgroup_count[0],
                            info->max_workgroup_count[1], info->max_workgroup_count[2]);

  rlx_vk_plan_memory (model, max_batch, &plan);
  if (plan.largest > info->max_storage_buffer_range ||
      (info->max_allocation > 0 && plan.largest > info->max_allocation))
    {
      g_autofree char *need = format_bytes (plan.largest);
      g_autofree char *have = format_bytes (MIN (info->max_storage_buffer_range,
                                                 info->max_allocation > 0 ? info->max_allocation
                                                                          : G_MAXUINT64));
      return g_strdup_printf ("%s at batch %u needs a %s buffer (%s), %s allows %s per buffer; "
                              "use a smaller batch", model->slug, max_batch, need,
                              plan.largest_name, info->name, have);
    }
  if (info->device_local_bytes > 0 && plan.total > info->device_local_bytes)
    {
      g_autofree char *need = format_bytes (plan.total);
      g_autofree char *have = format_bytes (info->device_local_bytes);
      return g_strdup_printf ("%s at batch %u needs %s of GPU memory, %s has %s; "
                              "use a smaller batch", model->slug, max_batch, need, info->name, have);
    }
  return NULL;
}

/* ------------------------------------------------------------ --compute */

static const char *const compute_names[RLX_VK_N_COMPUTE] = { "f32", "f16", "bf16" };

const char *
rlx_vk_compute_name (RlxVkCompute compute)
{
  return (guint) compute < RLX_VK_N_COMPUTE ? compute_names[compute] : "?";
}

gboolean
rlx_vk_compute_parse (const char *s, RlxVkCompute *out)
{
  for (guint i = 0; s != NULL && i < RLX_VK_N_COMPUTE; i++)
    if (g_ascii_strcasecmp (s, compute_names[i]) == 0)
      {
        *out = (RlxVkCompute) i;
        return TRUE;
      }
  return FALSE;
}

static const char *
component_name (guint8 c)
{
  switch (c)
    {
    case RLX_VK_COMPONENT_F16: return "f16";
    case RLX_VK_COMPONENT_F32: return "f32";
    case RLX_VK_COMPONENT_BF16: return "bf16";
    case RLX_VK_COMPONENT_INT: return "int";
    default: return "other";
    }
}

char *
rlx_vk_device_coop_text (const RlxVkDeviceInfo *info)
{
  g_autoptr(GString) s = g_string_new (NULL);

  for (guint i = 0; i < info->n_coop; i++)
    {
      const RlxVkCoopShape *c = &info->coop[i];
      g_autofree char *one = NULL;

      if (!c->subgroup)
        continue;
      one = g_strdup_printf ("%u×%u×%u %s·%s→%s (%s)", c->m, c->n, c->k, component_name (c->a),
                             component_name (c->b), component_name (c->r), c->khr ? "KHR" : "NV");
      /* the NV and KHR lists repeat each other: once each */
      if (strstr (s->str, one) == NULL)
        g_string_append_printf (s, "%s%s", s->len ? ", " : "", one);
    }
  if (s->len == 0)
    g_string_append (s, "none");
  return g_string_free (g_steal_pointer (&s), FALSE);
}

static gboolean
has_shape (const RlxVkDeviceInfo *info, gboolean khr, guint m, guint n, guint k, guint8 ab)
{
  for (guint i = 0; i < info->n_coop; i++)
    {
      const RlxVkCoopShape *c = &info->coop[i];
      if (c->khr == khr && c->subgroup && c->m == m && c->n == n && c->k == k && c->a == ab &&
          c->b == ab && c->c == RLX_VK_COMPONENT_F32 && c->r == RLX_VK_COMPONENT_F32)
        return TRUE;
    }
  return FALSE;
}

char *
rlx_vk_device_compute_check (const RlxVkDeviceInfo *info, RlxVkCompute compute)
{
  g_autofree char *offers = NULL;

  g_return_val_if_fail (info != NULL, NULL);

  if (compute == RLX_VK_COMPUTE_F32)
    return NULL;
  if (compute == RLX_VK_COMPUTE_BF16)
    {
      gboolean dev_bf16 = FALSE;

      for (guint i = 0; i < info->n_coop; i++)
        dev_bf16 |= info->coop[i].a == RLX_VK_COMPONENT_BF16;
      /* "..., though NVIDIA H200 offers them" / "..., and llvmpipe offers none either" */
      return g_strdup_printf ("--compute bf16 is not built in: this build's shaders are compiled "
                              "by a glslang without bf16 cooperative matrices "
                              "(GL_EXT_bfloat16), %s %s %s; use --compute f16 or f32",
                              dev_bf16 ? "though" : "and", info->name,
                              dev_bf16 ? "offers them" : "offers none either");
    }
  if (compute != RLX_VK_COMPUTE_F16)
    return g_strdup_printf ("unknown --compute %u; use f32, f16 or bf16", (guint) compute);

  if (!info->coop_nv && !info->coop_khr)
    return g_strdup_printf ("%s has no cooperative matrix (neither VK_NV_cooperative_matrix nor "
                            "VK_KHR_cooperative_matrix), which --compute f16 runs its matrix "
                            "products on; use --compute f32", info->name);
  offers = rlx_vk_device_coop_text (info);
  if (!info->coop_nv)
    return g_strdup_printf ("%s offers VK_KHR_cooperative_matrix (%s) but not "
                            "VK_NV_cooperative_matrix, the form this build's shaders use "
                            "(its glslang compiles only GL_NV_cooperative_matrix); use "
                            "--compute f32", info->name, offers);
  if (!has_shape (info, FALSE, 16, 16, 16, RLX_VK_COMPONENT_F16))
    return g_strdup_printf ("%s's VK_NV_cooperative_matrix has no 16×16×16 f16·f16→f32 shape "
                            "at subgroup scope, which --compute f16 needs (it offers: %s); use "
                            "--compute f32", info->name, offers);
  if (!info->shader_f16)
    return g_strdup_printf ("%s has cooperative matrices but not shaderFloat16, which "
                            "--compute f16 needs; use --compute f32", info->name);
  if (!info->memory_model)
    return g_strdup_printf ("%s has cooperative matrices but not the Vulkan memory model "
                            "(vulkanMemoryModel with its device scope), which their shaders need; use "
                            "--compute f32",
                            info->name);
  if (info->subgroup_size != 32)
    return g_strdup_printf ("%s runs subgroups of %u threads; --compute f16's shader is laid "
                            "out for 32; use --compute f32", info->name, info->subgroup_size);
  return NULL;
}

RlxVkCompute
rlx_vk_gemm_compute (RlxVkCompute compute, guint M, guint N, guint K, gboolean plain)
{
  if (compute == RLX_VK_COMPUTE_F16 && plain && M >= 64 && N >= 64 && K >= 32)
    return RLX_VK_COMPUTE_F16;
  return RLX_VK_COMPUTE_F32;
}

gboolean
rlx_vk_gemm_is_f16 (guint M, guint N, guint K)
{
  return rlx_vk_gemm_compute (RLX_VK_COMPUTE_F16, M, N, K, TRUE) == RLX_VK_COMPUTE_F16;
}

gboolean
rlx_vk_f16_copy_pays (guint64 count, guint rereads)
{
  return rereads >= 4 && count * (2 * (guint64) rereads - 6) >= 16u * 1024 * 1024;
}

float
rlx_vk_f16_grad_scale (guint n)
{
  return ldexpf (64.0f, (int) g_bit_storage (MAX (n, 2u) - 1));
}
