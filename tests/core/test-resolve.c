/* test-resolve.c — backend resolution without a GPU
 *
 * rlx_backend_candidates decides from device descriptions alone, so every
 * branch is covered with hand-made devices: no loader, only a software
 * device, a device that lacks a limit, explicit requests that cannot be met,
 * ordering, and the model mattering. The last cases run rlx-rank with the
 * Vulkan loader pointed at no driver at all. The walk that opens the
 * candidates (rlx_backend_choose: claims, failures to start, the fallback
 * text) runs with a fake opener.
 */
#include "rlx-config.h"
#include "core/rlx-backend.h"
#include "core/rlx-backend-private.h"
#include "gpu/rlx-vk.h"

#include <gio/gio.h>
#include <stdarg.h>
#include <glib/gstdio.h>
#include <string.h>
#include <unistd.h>

static RlxVkDeviceInfo *
fake (const char *name, RlxVkDeviceType type)
{
  RlxVkDeviceInfo *d = g_new0 (RlxVkDeviceInfo, 1);

  d->name = g_strdup (name);
  d->driver = g_strdup ("test");
  d->type = type;
  d->api_version = (1u << 22) | (3u << 12);
  d->has_compute_queue = TRUE;
  d->has_timestamps = TRUE;
  d->timestamp_period = 1;
  d->max_shared_memory = 48 * 1024;
  d->max_push_constants = 256;
  d->max_workgroup_invocations = 1024;
  d->max_workgroup_count[0] = d->max_workgroup_count[1] = d->max_workgroup_count[2] = 65535;
  d->max_storage_buffer_range = G_MAXUINT32;
  d->subgroup_size = 32;
  d->device_local_bytes = 16ull << 30;
  return d;
}

static GPtrArray *
devices_new (void)
{
  GPtrArray *a = g_ptr_array_new_with_free_func ((GDestroyNotify) rlx_vk_device_info_free);
  return a;
}

static const RlxModel *
mlp (void)
{
  return rlx_model_get (RLX_MODEL_MNIST_MLP);
}

static char *
joined (GPtrArray *reasons)
{
  g_autoptr(GString) s = g_string_new ("");
  for (guint i = 0; i < reasons->len; i++)
    g_string_append_printf (s, "%s%s", i ? "; " : "", (char *) g_ptr_array_index (reasons, i));
  return g_strdup (s->str);
}

static void
assert_only (GArray *cand, guint want)
{
  g_assert_nonnull (cand);
  g_assert_cmpuint (cand->len, ==, 1);
  g_assert_cmpuint (g_array_index (cand, guint, 0), ==, want);
}

/* @text contains @part; a failure shows the whole text */
#define assert_has(text, part)                                                \
  G_STMT_START {                                                              \
    const char *text_ = (text);                                               \
    if (strstr (text_, (part)) == NULL)                                       \
      g_error ("%s:%d: expected \"%s\" in: %s", __FILE__, __LINE__, (part), text_); \
  } G_STMT_END

/* @spec leaves the CPU as the only candidate; returns the reasons the
 * devices were passed over, joined. */
static char *
fallback_reasons (const char *spec, const RlxModel *model, guint batch, GPtrArray *devs,
                  const char *enum_error)
{
  g_autoptr(GPtrArray) why = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) c = rlx_backend_candidates (spec, RLX_VK_COMPUTE_F32, model, batch, devs, enum_error, why, &error);

  g_assert_no_error (error);
  assert_only (c, RLX_BACKEND_CPU_CANDIDATE);
  return joined (why);
}

/* @spec is refused with @code; returns the message. */
static char *
refusal (const char *spec, const RlxModel *model, guint batch, GPtrArray *devs, gint code)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) c = rlx_backend_candidates (spec, RLX_VK_COMPUTE_F32, model, batch, devs, NULL, NULL, &error);

  g_assert_null (c);
  g_assert_error (error, RLX_BACKEND_ERROR, code);
  return g_strdup (error->message);
}

/* @spec takes exactly candidate @want. */
static void
assert_picks (const char *spec, GPtrArray *devs, guint want)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) c = rlx_backend_candidates (spec, RLX_VK_COMPUTE_F32, mlp (), 64, devs, NULL, NULL, &error);

  g_assert_no_error (error);
  assert_only (c, want);
}

/* The first candidate auto tries for @model at @batch. */
static guint
first_candidate (const RlxModel *model, guint batch, GPtrArray *devs)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) c = rlx_backend_candidates ("auto", RLX_VK_COMPUTE_F32, model, batch, devs, NULL, NULL, &error);

  g_assert_no_error (error);
  g_assert_cmpuint (c->len, >=, 1);
  return g_array_index (c, guint, 0);
}

static void
test_no_loader (void)
{
  g_autofree char *text = fallback_reasons ("auto", mlp (), 64, NULL, NULL);
  g_autofree char *text2 = NULL, *msg = NULL, *msg2 = NULL;

  g_assert_cmpstr (text, ==, "vulkan: no Vulkan loader (libvulkan.so.1 not found; install libvulkan1)");
  g_assert_true (g_str_has_prefix (text, "vulkan: "));

  /* the enumeration's own message is passed on */
  text2 = fallback_reasons ("auto", mlp (), 64, NULL,
                            "no Vulkan driver is installed (VK_ERROR_INCOMPATIBLE_DRIVER)");
  assert_has (text2, "no Vulkan driver");

  /* explicit requests are refused with the reason, never downgraded */
  msg = refusal ("vulkan", mlp (), 64, NULL, RLX_BACKEND_ERROR_UNAVAILABLE);
  assert_has (msg, "libvulkan.so.1");
  assert_has (msg, "--backend cpu");
  msg2 = refusal ("vulkan:llvmpipe", mlp (), 64, NULL, RLX_BACKEND_ERROR_UNAVAILABLE);
}

static void
test_only_software (void)
{
  g_autoptr(GPtrArray) devs = devices_new ();
  g_autoptr(GPtrArray) why = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) c = NULL;
  g_autofree char *text = NULL, *msg = NULL;

  g_ptr_array_add (devs, fake ("llvmpipe (LLVM 15.0.6, 256 bits)", RLX_VK_DEVICE_CPU));

  text = fallback_reasons ("auto", mlp (), 64, devs, NULL);
  assert_has (text, "the only device is llvmpipe");
  assert_has (text, "software rasterizer");
  assert_has (text, "--backend vulkan:llvmpipe");

  msg = refusal ("vulkan", mlp (), 64, devs, RLX_BACKEND_ERROR_UNAVAILABLE);
  assert_has (msg, "software rasterizer");

  /* asked for by name (any case, any part of the name) it is taken */
  assert_picks ("vulkan:LLVMpipe", devs, 0);

  /* a software device beside a hardware one is no reason worth showing */
  g_ptr_array_add (devs, fake ("AMD Radeon RX 7900", RLX_VK_DEVICE_DISCRETE));
  c = rlx_backend_candidates ("auto", RLX_VK_COMPUTE_F32, mlp (), 64, devs, NULL, why, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (c->len, ==, 2);
  g_assert_cmpuint (g_array_index (c, guint, 0), ==, 1);
  g_assert_cmpuint (g_array_index (c, guint, 1), ==, RLX_BACKEND_CPU_CANDIDATE);
  g_assert_cmpuint (why->len, ==, 0);
}

static void
test_lacks_limit (void)
{
  g_autoptr(GPtrArray) devs = devices_new ();
  g_autofree char *text = NULL, *msg = NULL;
  RlxVkDeviceInfo *d;

  d = fake ("Tiny GPU", RLX_VK_DEVICE_INTEGRATED);
  d->max_shared_memory = 4 * 1024;
  g_ptr_array_add (devs, d);
  text = fallback_reasons ("auto", mlp (), 64, devs, NULL);
  assert_has (text, "shared memory");
  assert_has (text, "Tiny GPU has 4 KiB");

  msg = refusal ("vulkan", mlp (), 64, devs, RLX_BACKEND_ERROR_UNAVAILABLE);
  assert_has (msg, "shared memory");

  /* workgroup size */
  d->max_shared_memory = 32 * 1024;
  d->max_workgroup_invocations = 128;
  {
    g_autofree char *r = rlx_vk_device_check (d, mlp (), 64);
    g_assert_nonnull (r);
    assert_has (r, "128 threads per workgroup");
  }
  /* push constants */
  d->max_workgroup_invocations = 1024;
  d->max_push_constants = 32;
  {
    g_autofree char *r = rlx_vk_device_check (d, mlp (), 64);
    g_assert_nonnull (r);
    assert_has (r, "push constants");
  }
  d->max_push_constants = 128;
  {
    g_autofree char *r = rlx_vk_device_check (d, mlp (), 64);
    g_assert_null (r);
  }
  /* Vulkan 1.0 only */
  d->api_version = 1u << 22;
  {
    g_autofree char *r = rlx_vk_device_check (d, mlp (), 64);
    g_assert_nonnull (r);
    assert_has (r, "Vulkan 1.1");
  }
}

/* The model and batch matter, not only the device. */
static void
test_model_matters (void)
{
  g_autoptr(GPtrArray) devs = devices_new ();
  g_autofree char *text = NULL, *text2 = NULL, *msg = NULL;
  const RlxModel *cnn = rlx_model_get (RLX_MODEL_MNIST_CNN);
  RlxVkDeviceInfo *d = fake ("Small-buffer GPU", RLX_VK_DEVICE_DISCRETE);

  d->max_storage_buffer_range = 128u << 20;
  g_ptr_array_add (devs, d);

  g_assert_cmpuint (first_candidate (mlp (), 2048, devs), ==, 0);

  /* on the direct path mnist-cnn fits at batch 2048 (its largest buffer is
   * the training set); pool1's output at batch 16384 is 205 MB */
  g_assert_cmpuint (first_candidate (cnn, 2048, devs), ==, 0);
  text = fallback_reasons ("auto", cnn, 16384, devs, NULL);
  g_test_message ("%s", text);
  assert_has (text, "mnist-cnn at batch 16384 needs a");
  assert_has (text, "allows 128.0");
  assert_has (text, "MiB per buffer");

  /* the GEMM path (RLX_VK_CNN=gemm): its im2col buffer at 2048 is 231 MB */
  g_setenv ("RLX_VK_CNN", "gemm", TRUE);
  text2 = fallback_reasons ("auto", cnn, 2048, devs, NULL);
  g_unsetenv ("RLX_VK_CNN");
  assert_has (text2, "mnist-cnn at batch 2048 needs a");
  assert_has (text2, "conv2 im2col");

  /* device memory */
  d->max_storage_buffer_range = G_MAXUINT32;
  d->device_local_bytes = 128u << 20;
  msg = refusal ("vulkan", rlx_model_get (RLX_MODEL_MNIST_MLP_XL), 8192, devs,
                 RLX_BACKEND_ERROR_UNAVAILABLE);
  assert_has (msg, "of GPU memory");
}

static void
test_order_and_names (void)
{
  g_autoptr(GPtrArray) devs = devices_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) c = NULL;
  g_autoptr(GPtrArray) why = g_ptr_array_new_with_free_func (g_free);
  g_autofree char *msg = NULL, *msg2 = NULL, *msg3 = NULL;

  g_ptr_array_add (devs, fake ("llvmpipe (LLVM 15.0.6, 256 bits)", RLX_VK_DEVICE_CPU));
  g_ptr_array_add (devs, fake ("Intel(R) UHD Graphics 770", RLX_VK_DEVICE_INTEGRATED));
  g_ptr_array_add (devs, fake ("Virtio-GPU Venus", RLX_VK_DEVICE_VIRTUAL));
  g_ptr_array_add (devs, fake ("NVIDIA H200", RLX_VK_DEVICE_DISCRETE));

  c = rlx_backend_candidates ("auto", RLX_VK_COMPUTE_F32, mlp (), 64, devs, NULL, why, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (c->len, ==, 4);
  g_assert_cmpuint (g_array_index (c, guint, 0), ==, 3);   /* discrete */
  g_assert_cmpuint (g_array_index (c, guint, 1), ==, 1);   /* integrated */
  g_assert_cmpuint (g_array_index (c, guint, 2), ==, 2);   /* virtual */
  g_assert_cmpuint (g_array_index (c, guint, 3), ==, RLX_BACKEND_CPU_CANDIDATE);
  g_assert_cmpuint (why->len, ==, 0);

  /* vulkan: every hardware device, best first (no CPU, no software) */
  g_clear_pointer (&c, g_array_unref);
  c = rlx_backend_candidates ("vulkan", RLX_VK_COMPUTE_F32, mlp (), 64, devs, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (c->len, ==, 3);
  g_assert_cmpuint (g_array_index (c, guint, 0), ==, 3);
  g_assert_cmpuint (g_array_index (c, guint, 1), ==, 1);
  g_assert_cmpuint (g_array_index (c, guint, 2), ==, 2);
  assert_picks ("vulkan:intel", devs, 1);
  assert_picks ("cpu", devs, RLX_BACKEND_CPU_CANDIDATE);

  msg = refusal ("vulkan:radeon", mlp (), 64, devs, RLX_BACKEND_ERROR_UNAVAILABLE);
  assert_has (msg, "no device's name contains 'radeon'");
  assert_has (msg, "NVIDIA H200");
  msg2 = refusal ("vulkan:", mlp (), 64, devs, RLX_BACKEND_ERROR_UNKNOWN);
  msg3 = refusal ("cuda", mlp (), 64, devs, RLX_BACKEND_ERROR_UNKNOWN);
  assert_has (msg3, "'cuda'");
}

/* The real thing, with the loader pointed at a driver that does not exist. */
static char *
run_rank_env (int *status, const char *const *args, gboolean no_driver)
{
  g_autoptr(GSubprocessLauncher) l =
    g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_MERGE);
  g_autoptr(GSubprocess) p = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  char *out = NULL;

  if (no_driver)
    {
      g_subprocess_launcher_setenv (l, "VK_ICD_FILENAMES", "/nonexistent/icd.json", TRUE);
      g_subprocess_launcher_setenv (l, "VK_DRIVER_FILES", "/nonexistent/icd.json", TRUE);
    }
  g_subprocess_launcher_unsetenv (l, "RLX_VK_VALIDATE");
  g_ptr_array_add (argv, (char *) g_getenv ("RLX_RANK"));
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add (argv, (char *) args[i]);
  g_ptr_array_add (argv, NULL);
  p = g_subprocess_launcher_spawnv (l, (const char *const *) argv->pdata, &error);
  g_assert_no_error (error);
  g_subprocess_communicate_utf8 (p, NULL, NULL, &out, NULL, &error);
  g_assert_no_error (error);
  *status = g_subprocess_get_exit_status (p);
  return out;
}

/* rlx-rank with the Vulkan loader itself missing (RLX_VULKAN_LIBRARY names
 * a library that is not there): it must start, fall back and say why. */
#define NO_LOADER_LIB "/nonexistent/libvulkan.so.1"
#define NO_LOADER_WHY "no Vulkan loader (" NO_LOADER_LIB " not found; install libvulkan1)"

static char *
run_rank_no_loader (int *status, const char *const *args)
{
  g_autoptr(GSubprocessLauncher) l =
    g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_MERGE);
  g_autoptr(GSubprocess) p = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  char *out = NULL;

  g_subprocess_launcher_setenv (l, "RLX_VULKAN_LIBRARY", NO_LOADER_LIB, TRUE);
  g_ptr_array_add (argv, (char *) g_getenv ("RLX_RANK"));
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add (argv, (char *) args[i]);
  g_ptr_array_add (argv, NULL);
  p = g_subprocess_launcher_spawnv (l, (const char *const *) argv->pdata, &error);
  g_assert_no_error (error);
  g_subprocess_communicate_utf8 (p, NULL, NULL, &out, NULL, &error);
  g_assert_no_error (error);
  *status = g_subprocess_get_exit_status (p);
  return out;
}

static void
test_no_loader_cli (void)
{
  const char *devices[] = { "devices", NULL };
  const char *grads[] = { "grads", "--model", "mnist-mlp", "--dataset", "synthetic", "--start", "0",
                          "--batch", "2", "--seed", "1", "--backend", "vulkan",
                          "--out", "/dev/null", NULL };
  const char *cpu_grads[] = { "grads", "--model", "mnist-mlp", "--dataset", "synthetic", "--start", "0",
                              "--batch", "2", "--seed", "1", "--backend", "auto",
                              "--out", "/dev/null", NULL };
  g_autofree char *out = NULL, *out2 = NULL, *out3 = NULL;
  int status;

  if (g_getenv ("RLX_RANK") == NULL)
    {
      g_test_skip ("RLX_RANK is not set (run through meson test)");
      return;
    }
  out = run_rank_no_loader (&status, devices);
  g_test_message ("%s", out);
  g_assert_cmpint (status, ==, 0);
  g_assert_nonnull (strstr (out, "Vulkan: " NO_LOADER_WHY "\n"));
  g_assert_nonnull (strstr (out, "mnist-mlp    cpu — passed over: vulkan: " NO_LOADER_WHY "\n"));
  g_assert_nonnull (strstr (out, "mnist-cnn    cpu — passed over: vulkan: " NO_LOADER_WHY "\n"));

  out2 = run_rank_no_loader (&status, grads);
  g_test_message ("%s", out2);
  g_assert_cmpint (status, ==, 1);
  g_assert_nonnull (strstr (out2, "vulkan cannot train mnist-mlp: vulkan: " NO_LOADER_WHY));

  /* auto still computes, on the CPU */
  out3 = run_rank_no_loader (&status, cpu_grads);
  g_test_message ("%s", out3);
  g_assert_cmpint (status, ==, 0);
}

/* The same through the library, in a child whose first Vulkan use sees
 * RLX_VULKAN_LIBRARY: enumeration fails with the reason, auto falls back to
 * the CPU carrying it, explicit requests are refused with it, and
 * libvulkan is not mapped into the process (nothing links it). */
static void
test_no_loader_resolve (void)
{
  if (g_test_subprocess ())
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(RlxDataset) ds = NULL;
      g_autoptr(RlxBackend) be = NULL;
      g_autoptr(GPtrArray) devs = NULL;
      g_autofree char *maps = NULL;

      g_setenv ("RLX_VULKAN_LIBRARY", NO_LOADER_LIB, TRUE);
      devs = rlx_vk_enumerate (&error);
      g_assert_null (devs);
      g_assert_error (error, RLX_VK_ERROR, RLX_VK_ERROR_NO_DRIVER);
      g_assert_cmpstr (error->message, ==, NO_LOADER_WHY);
      g_clear_error (&error);

      ds = rlx_dataset_open ("synthetic", 1, &error);
      g_assert_no_error (error);
      be = rlx_backend_resolve ("auto", mlp (), ds, 8, &error);
      g_assert_no_error (error);
      g_assert_cmpstr (rlx_backend_name (be), ==, "cpu");
      g_assert_cmpstr (rlx_backend_fallback (be), ==, "vulkan: " NO_LOADER_WHY);
      g_clear_pointer (&be, rlx_backend_free);

      for (guint i = 0; i < 2; i++)
        {
          const char *req = i == 0 ? "vulkan" : "vulkan:llvmpipe";
          be = rlx_backend_resolve (req, mlp (), ds, 8, &error);
          g_assert_null (be);
          g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE);
          g_assert_nonnull (strstr (error->message, "vulkan: " NO_LOADER_WHY));
          g_assert_nonnull (strstr (error->message, "--backend cpu"));
          g_clear_error (&error);
        }

      g_assert_true (g_file_get_contents ("/proc/self/maps", &maps, NULL, &error));
      g_assert_no_error (error);
      g_assert_null (strstr (maps, "libvulkan"));
      return;
    }
  g_test_trap_subprocess (NULL, 60 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_INHERIT_STDERR);
  g_test_trap_assert_passed ();
}

static char *
run_rank (int *status, const char *const *args)
{
  return run_rank_env (status, args, TRUE);
}

/* With the real loader: lavapipe is listed, auto passes it over, asking for
 * it by name takes it, and a batch it cannot hold is refused with the limit. */
static void
test_lavapipe_cli (void)
{
  const char *devices[] = { "devices", "--backend", "vulkan:llvmpipe", NULL };
  const char *auto_devices[] = { "devices", NULL };
  const char *grads[] = { "grads", "--model", "mnist-cnn", "--dataset", "synthetic", "--start", "0",
                          "--batch", "16384", "--seed", "1", "--backend", "vulkan:llvmpipe",
                          "--out", "/dev/null", NULL };
  g_autofree char *out = NULL, *out2 = NULL, *out3 = NULL;
  int status;

  if (g_getenv ("RLX_RANK") == NULL)
    {
      g_test_skip ("RLX_RANK is not set (run through meson test)");
      return;
    }
  out = run_rank_env (&status, auto_devices, FALSE);
  if (strstr (out, "llvmpipe") == NULL)
    {
      /* scripts/deps.sh installs lavapipe in CI: missing there is a failure */
      if (g_getenv ("CI") != NULL)
        g_error ("CI is set but rlx-rank devices lists no llvmpipe: %s", out);
      g_test_skip ("no lavapipe device (install mesa-vulkan-drivers)");
      return;
    }
  g_test_message ("%s", out);
  g_assert_cmpint (status, ==, 0);
  g_assert_nonnull (strstr (out, "software rasterizer"));
  g_assert_nonnull (strstr (out, "shared memory"));

  out2 = run_rank_env (&status, devices, FALSE);
  g_test_message ("%s", out2);
  g_assert_cmpint (status, ==, 0);
  g_assert_nonnull (strstr (out2, "mnist-mlp    vulkan on llvmpipe"));

  out3 = run_rank_env (&status, grads, FALSE);
  g_test_message ("%s", out3);
  g_assert_cmpint (status, !=, 0);
  g_assert_nonnull (strstr (out3, "mnist-cnn at batch 16384 needs a"));
  g_assert_nonnull (strstr (out3, "per buffer"));
}

static void
test_no_driver_cli (void)
{
  const char *devices[] = { "devices", NULL };
  const char *grads[] = { "grads", "--model", "mnist-mlp", "--dataset", "synthetic", "--start", "0",
                          "--batch", "2", "--seed", "1", "--backend", "vulkan",
                          "--out", "/dev/null", NULL };
  g_autofree char *out = NULL, *out2 = NULL;
  int status;

  if (g_getenv ("RLX_RANK") == NULL)
    {
      g_test_skip ("RLX_RANK is not set (run through meson test)");
      return;
    }
  out = run_rank (&status, devices);
  g_test_message ("%s", out);
  g_assert_cmpint (status, ==, 0);
  g_assert_nonnull (strstr (out, "Vulkan: no Vulkan driver is installed"));
  g_assert_nonnull (strstr (out, "mnist-cnn    cpu — passed over: vulkan: no Vulkan driver"));

  out2 = run_rank (&status, grads);
  g_test_message ("%s", out2);
  g_assert_cmpint (status, !=, 0);
  g_assert_nonnull (strstr (out2, "vulkan cannot train mnist-mlp"));
  g_assert_nonnull (strstr (out2, "no Vulkan driver"));
}

/* @devs gets a device numbered as vkEnumeratePhysicalDevices would */
static RlxVkDeviceInfo *
add_dev (GPtrArray *devs, const char *name, RlxVkDeviceType type, const char *uuid)
{
  RlxVkDeviceInfo *d = fake (name, type);

  d->index = devs->len;
  g_strlcpy (d->uuid, uuid ? uuid : "", sizeof d->uuid);
  g_ptr_array_add (devs, d);
  return d;
}

/* vulkan:N takes device N as `rlx-rank devices` numbers them; a name that is
 * a number is vulkan:name=N */
static void
test_index (void)
{
  g_autoptr(GPtrArray) devs = devices_new ();
  g_autofree char *msg = NULL, *msg2 = NULL, *msg3 = NULL;
  RlxVkDeviceInfo *small;

  add_dev (devs, "NVIDIA H200", RLX_VK_DEVICE_DISCRETE, NULL);
  add_dev (devs, "llvmpipe (LLVM 15.0.6, 256 bits)", RLX_VK_DEVICE_CPU, NULL);
  add_dev (devs, "NVIDIA H200", RLX_VK_DEVICE_DISCRETE, NULL);
  add_dev (devs, "4090", RLX_VK_DEVICE_DISCRETE, NULL);
  small = add_dev (devs, "Tiny GPU", RLX_VK_DEVICE_INTEGRATED, NULL);
  small->max_shared_memory = 4 * 1024;

  assert_picks ("vulkan:0", devs, 0);
  assert_picks ("vulkan:2", devs, 2);
  assert_picks ("vulkan:1", devs, 1);           /* software, but asked for */
  assert_picks ("vulkan:name=4090", devs, 3);
  assert_picks ("vulkan:h200", devs, 0);        /* by name: the first */

  msg = refusal ("vulkan:7", mlp (), 64, devs, RLX_BACKEND_ERROR_UNAVAILABLE);
  assert_has (msg, "there is no device 7");
  assert_has (msg, "[2] NVIDIA H200");
  assert_has (msg, "vulkan:name=7");
  msg2 = refusal ("vulkan:4", mlp (), 64, devs, RLX_BACKEND_ERROR_UNAVAILABLE);
  assert_has (msg2, "shared memory");
  msg3 = refusal ("vulkan:99999999999999999999", mlp (), 64, devs, RLX_BACKEND_ERROR_UNAVAILABLE);
  assert_has (msg3, "there is no device");
}

/* The lock files stay (harmless, reused); the folder @dir is the test's. */
static void
remove_locks (const char *dir, const char *locks)
{
  g_autoptr(GDir) d = g_dir_open (locks, 0, NULL);
  g_autofree char *parent = g_path_get_dirname (locks);
  const char *name;

  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *path = g_build_filename (locks, name, NULL);
      g_unlink (path);
    }
  g_rmdir (locks);
  g_rmdir (parent);
  g_rmdir (dir);
}

/* Local ranks take distinct GPUs: each claim takes the best device no other
 * holds; with all held, the best is shared and the note says so; a claim
 * ends with its holder (here: its fd). */
static void
test_distinct_gpus (void)
{
  g_autoptr(GPtrArray) devs = devices_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) cand = NULL, vcand = NULL;
  g_autofree char *dir = g_dir_make_tmp ("rlx-gpus-XXXXXX", &error);
  g_autofree char *locks = NULL;
  int fd[4];
  char *note = NULL;
  GArray *o;

  g_assert_no_error (error);
  locks = g_build_filename (dir, "rlx-cluster", "@gpus", NULL);
  add_dev (devs, "llvmpipe (LLVM 15.0.6, 256 bits)", RLX_VK_DEVICE_CPU, "00");
  add_dev (devs, "NVIDIA H200", RLX_VK_DEVICE_DISCRETE, "aa01");
  add_dev (devs, "NVIDIA H200", RLX_VK_DEVICE_DISCRETE, "aa02");
  cand = rlx_backend_candidates ("auto", RLX_VK_COMPUTE_F32, mlp (), 64, devs, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (cand->len, ==, 3);   /* 1, 2, cpu */

  /* first rank: device 1 */
  o = rlx_backend_claim_order (cand, devs, locks, &fd[0], &note);
  g_assert_cmpuint (g_array_index (o, guint, 0), ==, 1);
  g_assert_cmpint (fd[0], >=, 0);
  g_assert_null (note);
  g_array_unref (o);
  /* second: device 2, then 1, then the CPU */
  o = rlx_backend_claim_order (cand, devs, locks, &fd[1], &note);
  g_assert_cmpuint (o->len, ==, 3);
  g_assert_cmpuint (g_array_index (o, guint, 0), ==, 2);
  g_assert_cmpuint (g_array_index (o, guint, 1), ==, 1);
  g_assert_cmpuint (g_array_index (o, guint, 2), ==, RLX_BACKEND_CPU_CANDIDATE);
  g_assert_cmpint (fd[1], >=, 0);
  g_assert_null (note);
  g_array_unref (o);
  /* third: all held — shares the best (a GPU, not the CPU) and says so */
  o = rlx_backend_claim_order (cand, devs, locks, &fd[2], &note);
  g_assert_cmpuint (g_array_index (o, guint, 0), ==, 1);
  g_assert_cmpint (fd[2], ==, -1);
  g_assert_nonnull (note);
  g_test_message ("%s", note);
  assert_has (note, "every GPU on this host is in use by another rank");
  assert_has (note, "sharing the best, NVIDIA H200 [1]");
  g_clear_pointer (&note, g_free);
  g_array_unref (o);
  /* vulkan (no CPU) behaves the same */
  vcand = rlx_backend_candidates ("vulkan", RLX_VK_COMPUTE_F32, mlp (), 64, devs, NULL, NULL, &error);
  g_assert_no_error (error);
  o = rlx_backend_claim_order (vcand, devs, locks, &fd[3], &note);
  g_assert_cmpuint (o->len, ==, 2);
  g_assert_cmpint (fd[3], ==, -1);
  g_assert_nonnull (note);
  g_clear_pointer (&note, g_free);
  g_array_unref (o);

  /* the first rank ends: its device is free for the next */
  close (fd[0]);
  o = rlx_backend_claim_order (cand, devs, locks, &fd[0], &note);
  g_assert_cmpuint (g_array_index (o, guint, 0), ==, 1);
  g_assert_cmpint (fd[0], >=, 0);
  g_assert_null (note);
  g_array_unref (o);

  /* an explicit device is taken even when held, with a note */
  {
    g_autoptr(GArray) one = rlx_backend_candidates ("vulkan:2", RLX_VK_COMPUTE_F32, mlp (), 64, devs, NULL, NULL,
                                                    &error);
    g_assert_no_error (error);
    o = rlx_backend_claim_order (one, devs, locks, &fd[3], &note);
    g_assert_cmpuint (o->len, ==, 1);
    g_assert_cmpuint (g_array_index (o, guint, 0), ==, 2);
    g_assert_cmpint (fd[3], ==, -1);
    assert_has (note, "NVIDIA H200 [2] is in use by another rank on this host; sharing it");
    g_clear_pointer (&note, g_free);
    g_array_unref (o);
  }
  /* a software device asked for by name is never claimed */
  {
    g_autoptr(GArray) sw = rlx_backend_candidates ("vulkan:llvmpipe", RLX_VK_COMPUTE_F32, mlp (), 64, devs, NULL,
                                                   NULL, &error);
    g_assert_no_error (error);
    o = rlx_backend_claim_order (sw, devs, locks, &fd[3], &note);
    g_assert_cmpint (fd[3], ==, -1);
    g_assert_null (note);
    g_array_unref (o);
  }

  close (fd[0]);
  close (fd[1]);
  remove_locks (dir, locks);
}

/* ── rlx_backend_choose: the walk, with a fake opener ─────────────────── */

typedef struct {
  guint32     fail;     /* bit c: opening candidate c fails (bit 31: the CPU) */
  int         code;     /* with this RLX_BACKEND_ERROR code */
  const char *note;     /* what an opened GPU says about itself, or NULL */
  GArray     *tried;    /* the candidates it was asked to open, in order */
} FakeOpener;

static char opened_marks[32];

static guint
candidate_bit (guint c)
{
  return c == RLX_BACKEND_CPU_CANDIDATE ? 31 : c;
}

static gpointer
fake_open (guint c, gpointer user_data, char **note, GError **error)
{
  FakeOpener *f = user_data;

  g_assert_null (*note);
  g_array_append_val (f->tried, c);
  if (f->fail & (1u << candidate_bit (c)))
    {
      g_set_error (error, RLX_BACKEND_ERROR, f->code, "fake failure of %s",
                   c == RLX_BACKEND_CPU_CANDIDATE ? "the cpu" : "the device");
      return NULL;
    }
  if (c != RLX_BACKEND_CPU_CANDIDATE && f->note != NULL)
    *note = g_strdup (f->note);
  return &opened_marks[candidate_bit (c)];
}

/* rlx_backend_choose of @request over @devs with @f: TRUE and the choice,
 * or FALSE and the error; the candidates tried are in f->tried. */
static gboolean
choose (const char *request, GPtrArray *devs, const char *locks, FakeOpener *f,
        RlxBackendChoice *choice, GError **error)
{
  g_array_set_size (f->tried, 0);
  if (!rlx_backend_choose (request, RLX_VK_COMPUTE_F32, mlp (), 64, devs, NULL, locks, fake_open, f, choice, error))
    return FALSE;
  g_assert_true (choice->opened == &opened_marks[candidate_bit (choice->candidate)]);
  return TRUE;
}

static void
assert_tried (FakeOpener *f, guint n, ...)
{
  va_list ap;

  g_assert_cmpuint (f->tried->len, ==, n);
  va_start (ap, n);
  for (guint i = 0; i < n; i++)
    g_assert_cmpuint (g_array_index (f->tried, guint, i), ==, va_arg (ap, guint));
  va_end (ap);
}

/* Whether device @i's claim is free (another rank could take it). */
static gboolean
claim_free (GPtrArray *devs, const char *locks, guint i)
{
  g_autoptr(GArray) one = g_array_new (FALSE, FALSE, sizeof (guint));
  g_autoptr(GArray) o = NULL;
  g_autofree char *note = NULL;
  int fd;

  g_array_append_val (one, i);
  o = rlx_backend_claim_order (one, devs, locks, &fd, &note);
  if (fd < 0)
    return FALSE;
  close (fd);
  return TRUE;
}

/* Two GPUs, fresh claims: ranks take distinct ones; with both held the
 * third shares the best and its fallback says so, before the backend's
 * own note. */
static void
test_choose_claims (void)
{
  g_autoptr(GPtrArray) devs = devices_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("rlx-choose-XXXXXX", &error);
  g_autofree char *locks = NULL;
  FakeOpener f = { 0, 0, "vulkan: parameters kept on the host (a test)", NULL };
  RlxBackendChoice a, b, c;

  g_assert_no_error (error);
  f.tried = g_array_new (FALSE, FALSE, sizeof (guint));
  locks = g_build_filename (dir, "@gpus", NULL);
  add_dev (devs, "llvmpipe (LLVM 15.0.6, 256 bits)", RLX_VK_DEVICE_CPU, "00");
  add_dev (devs, "NVIDIA H200", RLX_VK_DEVICE_DISCRETE, "aa01");
  add_dev (devs, "NVIDIA H200", RLX_VK_DEVICE_DISCRETE, "aa02");

  g_assert_true (choose ("auto", devs, locks, &f, &a, &error));
  g_assert_cmpuint (a.candidate, ==, 1);
  g_assert_cmpint (a.lock_fd, >=, 0);
  g_assert_cmpstr (a.fallback, ==, "vulkan: parameters kept on the host (a test)");
  assert_tried (&f, 1, 1);

  g_assert_true (choose ("auto", devs, locks, &f, &b, &error));
  g_assert_cmpuint (b.candidate, ==, 2);
  g_assert_cmpint (b.lock_fd, >=, 0);

  g_assert_true (choose ("auto", devs, locks, &f, &c, &error));
  g_assert_cmpuint (c.candidate, ==, 1);
  g_assert_cmpint (c.lock_fd, ==, -1);
  g_assert_cmpstr (c.fallback, ==,
                   "vulkan: every GPU on this host is in use by another rank (NVIDIA H200 [1], "
                   "NVIDIA H200 [2]); sharing the best, NVIDIA H200 [1]; "
                   "vulkan: parameters kept on the host (a test)");
  g_free (c.fallback);

  /* the claim ends with its holder */
  close (a.lock_fd);
  g_assert_true (claim_free (devs, locks, 1));
  g_assert_false (claim_free (devs, locks, 2));
  close (b.lock_fd);
  g_free (a.fallback);
  g_free (b.fallback);
  g_array_unref (f.tried);
  remove_locks (dir, locks);
}

/* A device that fails to start: auto says why and moves on (its claim
 * given back), down to the CPU; an explicit request is refused with the
 * opener's code; cpu opens the CPU alone. */
static void
test_choose_failures (void)
{
  g_autoptr(GPtrArray) devs = devices_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("rlx-choose-XXXXXX", &error);
  g_autofree char *locks = NULL;
  FakeOpener f = { 1u << 1, RLX_BACKEND_ERROR_OUT_OF_MEMORY, NULL, NULL };
  RlxBackendChoice ch;

  g_assert_no_error (error);
  f.tried = g_array_new (FALSE, FALSE, sizeof (guint));
  locks = g_build_filename (dir, "@gpus", NULL);
  add_dev (devs, "NVIDIA H200", RLX_VK_DEVICE_DISCRETE, "aa01");
  add_dev (devs, "NVIDIA H200", RLX_VK_DEVICE_DISCRETE, "aa02");
  add_dev (devs, "Radeon 780M", RLX_VK_DEVICE_INTEGRATED, "bb01");

  /* device 1 fails: 0 was claimed and taken */
  g_assert_true (choose ("auto", devs, locks, &f, &ch, &error));
  g_assert_cmpuint (ch.candidate, ==, 0);
  assert_tried (&f, 1, 0);
  close (ch.lock_fd);
  g_free (ch.fallback);

  /* device 0 fails: its claim is given back, 1 starts unclaimed */
  f.fail = 1u << 0;
  g_assert_true (choose ("auto", devs, locks, &f, &ch, &error));
  g_assert_cmpuint (ch.candidate, ==, 1);
  g_assert_cmpint (ch.lock_fd, ==, -1);
  g_assert_cmpstr (ch.fallback, ==, "vulkan: NVIDIA H200 failed to start: fake failure of "
                                    "the device");
  assert_tried (&f, 2, 0, 1);
  g_assert_true (claim_free (devs, locks, 0));
  g_free (ch.fallback);

  /* every GPU fails: the CPU, with every reason in the order tried */
  f.fail = 0x7;
  g_assert_true (choose ("auto", devs, locks, &f, &ch, &error));
  g_assert_cmpuint (ch.candidate, ==, RLX_BACKEND_CPU_CANDIDATE);
  g_assert_cmpint (ch.lock_fd, ==, -1);
  assert_tried (&f, 4, 0, 1, 2, RLX_BACKEND_CPU_CANDIDATE);
  g_assert_cmpstr (ch.fallback, ==,
                   "vulkan: NVIDIA H200 failed to start: fake failure of the device; "
                   "vulkan: NVIDIA H200 failed to start: fake failure of the device; "
                   "vulkan: Radeon 780M failed to start: fake failure of the device");
  g_assert_true (claim_free (devs, locks, 0));
  g_free (ch.fallback);

  /* explicit: refused at the first failure, with the opener's code */
  f.fail = 1u << 0;
  g_assert_false (choose ("vulkan", devs, locks, &f, &ch, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_OUT_OF_MEMORY);
  g_assert_cmpstr (error->message, ==,
                   "vulkan: NVIDIA H200 could not train mnist-mlp: fake failure of the device");
  assert_tried (&f, 1, 0);
  g_assert_true (claim_free (devs, locks, 0));
  g_clear_error (&error);
  f.fail = 1u << 2;
  f.code = RLX_BACKEND_ERROR_DEVICE_LOST;
  g_assert_false (choose ("vulkan:radeon", devs, locks, &f, &ch, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_DEVICE_LOST);
  g_assert_cmpstr (error->message, ==,
                   "vulkan:radeon: Radeon 780M could not train mnist-mlp: fake failure of the "
                   "device");
  g_clear_error (&error);

  /* cpu: no device is looked at */
  f.fail = 0x7;
  g_assert_true (rlx_backend_choose ("cpu", RLX_VK_COMPUTE_F32, mlp (), 64, NULL, NULL, NULL, fake_open, &f, &ch,
                                     &error));
  g_assert_cmpuint (ch.candidate, ==, RLX_BACKEND_CPU_CANDIDATE);
  g_assert_cmpstr (ch.fallback, ==, "");
  g_free (ch.fallback);

  /* nothing starts at all: refused with every reason */
  f.fail = 0x7 | 1u << 31;
  f.code = RLX_BACKEND_ERROR_FAILED;
  g_assert_false (choose ("auto", devs, locks, &f, &ch, &error));
  g_assert_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE);
  assert_has (error->message, "no backend could train mnist-mlp: vulkan: NVIDIA H200 failed");
  assert_has (error->message, "cpu failed to start: fake failure of the cpu");
  g_assert_true (claim_free (devs, locks, 0));

  g_array_unref (f.tried);
  remove_locks (dir, locks);
}

/* rlx-rank: the options, the refusal and what `devices` lists */
static void
test_compute_cli (void)
{
  const char *bench[] = { "bench", "--model", "mnist-mlp", "--batch", "8", "--seconds", "0.1",
                          "--backend", "vulkan:llvmpipe", "--compute", "f16", NULL };
  const char *bad[] = { "bench", "--model", "mnist-mlp", "--batch", "8", "--seconds", "0.1",
                        "--backend", "cpu", "--compute", "f64", NULL };
  const char *cpu[] = { "bench", "--model", "mnist-mlp", "--batch", "8", "--seconds", "0.1",
                        "--backend", "cpu", "--compute", "f16", NULL };
  const char *devs[] = { "devices", "--compute", "f16", NULL };
  g_autofree char *o1 = NULL, *o2 = NULL, *o3 = NULL, *o4 = NULL;
  int status;

  if (g_getenv ("RLX_RANK") == NULL)
    {
      g_test_skip ("RLX_RANK is not set (run through meson test)");
      return;
    }
  o2 = run_rank_env (&status, bad, FALSE);
  g_assert_cmpint (status, ==, 2);
  assert_has (o2, "--compute: 'f64' is not f32, f16 or bf16");
  o3 = run_rank_env (&status, cpu, FALSE);
  g_assert_cmpint (status, !=, 0);
  assert_has (o3, "the CPU backend computes in f32 only");
  o4 = run_rank_env (&status, devs, FALSE);
  g_test_message ("%s", o4);
  assert_has (o4, "--backend auto --compute f16 would choose:");
  if (strstr (o4, "llvmpipe") == NULL)
    {
      g_test_skip ("no lavapipe device (install mesa-vulkan-drivers)");
      return;
    }
  assert_has (o4, "cooperative matrix: none");
  assert_has (o4, "--compute f32  can");
  assert_has (o4, "has no cooperative matrix");
  o1 = run_rank_env (&status, bench, FALSE);
  g_assert_cmpint (status, !=, 0);
  assert_has (o1, "cannot train mnist-mlp at --compute f16");
  assert_has (o1, "has no cooperative matrix");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/gpu/resolve/no-loader", test_no_loader);
  g_test_add_func ("/gpu/resolve/only-software", test_only_software);
  g_test_add_func ("/gpu/resolve/lacks-limit", test_lacks_limit);
  g_test_add_func ("/gpu/resolve/model-matters", test_model_matters);
  g_test_add_func ("/gpu/resolve/order-and-names", test_order_and_names);
  g_test_add_func ("/gpu/resolve/no-driver-cli", test_no_driver_cli);
  g_test_add_func ("/gpu/resolve/lavapipe-cli", test_lavapipe_cli);
  g_test_add_func ("/gpu/resolve/compute-cli", test_compute_cli);
  g_test_add_func ("/gpu/resolve/no-loader-cli", test_no_loader_cli);
  g_test_add_func ("/gpu/resolve/no-loader-resolve", test_no_loader_resolve);
  g_test_add_func ("/gpu/resolve/index", test_index);
  g_test_add_func ("/gpu/resolve/distinct-gpus", test_distinct_gpus);
  g_test_add_func ("/gpu/resolve/choose/claims", test_choose_claims);
  g_test_add_func ("/gpu/resolve/choose/failures", test_choose_failures);
  return g_test_run ();
}
