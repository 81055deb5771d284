/* rlx-vk.c — the Vulkan instance, device enumeration and device checks */
#include "rlx-config.h"
#include "rlx-vk-private.h"
#include "rlx-vk-tunables.h"

#include <dlfcn.h>
#include <sys/resource.h>
#include <stdio.h>
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
