/* rlx-backend-policy.c — which backend a rank takes, and why
 *
 * The decisions of rlx-backend.h's resolution, apart from any device (the
 * rules are in rlx-backend-policy.h): rlx_backend_candidates from device
 * descriptions alone, the claims that give local ranks distinct GPUs, and
 * rlx_backend_choose, which opens candidates through the caller's function
 * until one starts and keeps the reasons for those passed over. Pure enough
 * that tests cover every branch with hand-made devices, a temporary lock
 * folder and a fake opener (tests/core/test-resolve.c).
 */
#include "rlx-config.h"
#include "rlx-backend.h"
#include "rlx-backend-policy.h"
#include "gpu/rlx-vk.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include <glib/gstdio.h>

/* ------------------------------------------------------------ candidates */

static int
device_rank (const RlxVkDeviceInfo *info)
{
  switch (info->type)
    {
    case RLX_VK_DEVICE_DISCRETE: return 0;
    case RLX_VK_DEVICE_INTEGRATED: return 1;
    case RLX_VK_DEVICE_VIRTUAL: return 2;
    case RLX_VK_DEVICE_OTHER: return 3;
    case RLX_VK_DEVICE_CPU:
    default: return 4;
    }
}

static int
compare_devices (gconstpointer a, gconstpointer b, gpointer user_data)
{
  GPtrArray *devices = user_data;
  guint ia = *(const guint *) a, ib = *(const guint *) b;
  int ra = device_rank (g_ptr_array_index (devices, ia));
  int rb = device_rank (g_ptr_array_index (devices, ib));

  return ra != rb ? ra - rb : (int) ia - (int) ib;
}

static gboolean
name_matches (const RlxVkDeviceInfo *info, const char *want)
{
  g_autofree char *name = g_ascii_strdown (info->name ? info->name : "", -1);
  g_autofree char *needle = g_ascii_strdown (want, -1);

  return strstr (name, needle) != NULL;
}

static char *
join_reasons (GPtrArray *reasons)
{
  g_autoptr(GStrvBuilder) b = g_strv_builder_new ();
  g_auto(GStrv) v = NULL;

  for (guint i = 0; i < reasons->len; i++)
    g_strv_builder_add (b, g_ptr_array_index (reasons, i));
  v = g_strv_builder_end (b);
  return g_strjoinv ("; ", v);
}

static void
add_reason (GPtrArray *reasons, GPtrArray *passed_over, char *reason)
{
  if (passed_over != NULL)
    g_ptr_array_add (passed_over, g_strdup (reason));
  g_ptr_array_add (reasons, reason);
}

/* Why @info cannot train @model at @max_batch with @compute; NULL: it can. */
static char *
device_why (const RlxVkDeviceInfo *info, const RlxModel *model, guint max_batch,
            RlxVkCompute compute)
{
  char *why = rlx_vk_device_check (info, model, max_batch);

  return why != NULL ? why : rlx_vk_device_compute_check (info, compute);
}

GArray *
rlx_backend_candidates (const char *request, RlxVkCompute compute, const RlxModel *model,
                        guint max_batch, GPtrArray *devices, const char *vulkan_error,
                        GPtrArray *passed_over, GError **error)
{
  g_autoptr(GArray) out = g_array_new (FALSE, FALSE, sizeof (guint));
  g_autoptr(GArray) order = g_array_new (FALSE, FALSE, sizeof (guint));
  g_autoptr(GPtrArray) reasons = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GPtrArray) software = g_ptr_array_new ();
  guint cpu = RLX_BACKEND_CPU_CANDIDATE;
  gboolean is_auto, is_vulkan, by_name, by_index = FALSE;
  const char *want = NULL;
  guint64 want_index = 0;
  guint n_dev = devices != NULL ? devices->len : 0;

  g_return_val_if_fail (model != NULL, NULL);

  if (request == NULL || *request == '\0')
    request = "auto";
  is_auto = g_ascii_strcasecmp (request, "auto") == 0;
  is_vulkan = g_ascii_strcasecmp (request, "vulkan") == 0;
  by_name = g_ascii_strncasecmp (request, "vulkan:", 7) == 0;
  if (by_name)
    {
      want = request + 7;
      /* vulkan:N is the device numbered N by rlx-rank devices; a name that
       * is a number is asked for as vulkan:name=N */
      if (g_str_has_prefix (want, "name="))
        want += 5;
      else if (*want != '\0' && strspn (want, "0123456789") == strlen (want))
        {
          by_index = TRUE;
          if (!g_ascii_string_to_unsigned (want, 10, 0, G_MAXUINT, &want_index, NULL))
            want_index = G_MAXUINT;
        }
      if (*want == '\0')
        {
          g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNKNOWN,
                       "backend '%s' names no device; use vulkan:N with a device's number "
                       "or vulkan:NAME with part of its name (rlx-rank devices lists them)",
                       request);
          return NULL;
        }
    }

  if (g_ascii_strcasecmp (request, "cpu") == 0)
    {
      if (compute != RLX_VK_COMPUTE_F32)
        {
          g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE,
                       "cpu cannot compute at %s: the CPU backend computes in f32 only; "
                       "--compute %s needs a Vulkan device with cooperative matrices "
                       "(rlx-rank devices lists what each can do); use --compute f32",
                       rlx_vk_compute_name (compute), rlx_vk_compute_name (compute));
          return NULL;
        }
      g_array_append_val (out, cpu);
      return g_steal_pointer (&out);
    }
  if (!is_auto && !is_vulkan && !by_name)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNKNOWN,
                   "unknown backend '%s'; use auto, cpu, vulkan, vulkan:N or vulkan:NAME", request);
      return NULL;
    }

  if (vulkan_error != NULL || devices == NULL)
    add_reason (reasons, passed_over,
                g_strdup_printf ("vulkan: %s", vulkan_error ? vulkan_error
                                                            : "no Vulkan loader (libvulkan.so.1 not found; install libvulkan1)"));
  else if (n_dev == 0)
    add_reason (reasons, passed_over,
                g_strdup ("vulkan: the Vulkan loader found no device (is the GPU driver installed?)"));

  for (guint i = 0; i < n_dev; i++)
    g_array_append_val (order, i);
  g_array_sort_with_data (order, compare_devices, devices);

  if (by_name)
    {
      g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
      gboolean matched = FALSE;

      for (guint k = 0; k < order->len; k++)
        {
          guint i = g_array_index (order, guint, k);
          const RlxVkDeviceInfo *info = g_ptr_array_index (devices, i);
          g_autofree char *why = NULL;

          g_ptr_array_add (names, g_strdup_printf ("[%u] %s", info->index, info->name));
          if (by_index ? info->index != want_index : !name_matches (info, want))
            continue;
          matched = TRUE;
          why = device_why (info, model, max_batch, compute);
          if (why == NULL)
            {
              g_array_append_val (out, i);
              return g_steal_pointer (&out);
            }
          add_reason (reasons, passed_over, g_strdup_printf ("vulkan: %s", why));
        }
      if (!matched && vulkan_error == NULL && devices != NULL)
        {
          g_autofree char *list = NULL;
          g_ptr_array_add (names, NULL);
          list = g_strjoinv (", ", (char **) names->pdata);
          if (by_index)
            add_reason (reasons, passed_over,
                        g_strdup_printf ("vulkan: there is no device %s (devices: %s; for a "
                                         "device whose name is a number use vulkan:name=%s)",
                                         want, n_dev > 0 ? list : "none", want));
          else
            add_reason (reasons, passed_over,
                        g_strdup_printf ("vulkan: no device's name contains '%s' (devices: %s)",
                                         want, n_dev > 0 ? list : "none"));
        }
      {
        g_autofree char *all = join_reasons (reasons);
        if (compute != RLX_VK_COMPUTE_F32)
          g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE,
                       "%s cannot train %s at --compute %s: %s", request, model->slug,
                       rlx_vk_compute_name (compute), all);
        else
          g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE,
                       "%s cannot train %s: %s; use --backend cpu or auto",
                       request, model->slug, all);
      }
      return NULL;
    }

  for (guint k = 0; k < order->len; k++)
    {
      guint i = g_array_index (order, guint, k);
      const RlxVkDeviceInfo *info = g_ptr_array_index (devices, i);
      g_autofree char *why = NULL;

      if (rlx_vk_device_is_software (info))
        {
          g_ptr_array_add (software, (gpointer) info);
          continue;
        }
      why = device_why (info, model, max_batch, compute);
      if (why != NULL)
        {
          add_reason (reasons, passed_over, g_strdup_printf ("vulkan: %s", why));
          continue;
        }
      g_array_append_val (out, i);
    }
  /* vulkan: every hardware device that can, best first (local ranks then
   * take distinct ones, rlx_backend_claim_order) */
  if (is_vulkan && out->len > 0)
    return g_steal_pointer (&out);

  /* software devices matter to the person only when nothing better was there */
  if (out->len == 0)
    for (guint k = 0; k < software->len; k++)
      {
        const RlxVkDeviceInfo *info = g_ptr_array_index (software, k);
        const char *ask = name_matches (info, "llvmpipe") ? "llvmpipe" : info->name;

        if (n_dev == 1)
          add_reason (reasons, passed_over,
                      g_strdup_printf ("vulkan: the only device is %s, a software rasterizer — "
                                       "cpu is faster (ask for it by name: --backend vulkan:%s)",
                                       info->name, ask));
        else
          add_reason (reasons, passed_over,
                      g_strdup_printf ("vulkan: %s is a software rasterizer — cpu is faster "
                                       "(ask for it by name: --backend vulkan:%s)",
                                       info->name, ask));
      }

  if (is_vulkan)
    {
      g_autofree char *all = join_reasons (reasons);
      if (compute != RLX_VK_COMPUTE_F32)
        g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE,
                     "vulkan cannot train %s at --compute %s: %s", model->slug,
                     rlx_vk_compute_name (compute), *all ? all : "vulkan: no hardware Vulkan device");
      else
        g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE,
                     "vulkan cannot train %s: %s; use --backend cpu or auto",
                     model->slug, *all ? all : "vulkan: no hardware Vulkan device");
      return NULL;
    }

  /* the CPU computes in f32 only: an f16 request has no fallback */
  if (compute != RLX_VK_COMPUTE_F32)
    {
      g_autofree char *all = NULL;

      if (out->len > 0)
        return g_steal_pointer (&out);
      all = join_reasons (reasons);
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE,
                   "%s cannot train %s at --compute %s: %s; the CPU computes in f32 only — "
                   "use --compute f32", request, model->slug, rlx_vk_compute_name (compute),
                   *all ? all : "vulkan: no hardware Vulkan device");
      return NULL;
    }
  g_array_append_val (out, cpu);
  return g_steal_pointer (&out);
}

/* ----------------------------------------------- one GPU per local rank
 *
 * A rank holds an flock on $XDG_RUNTIME_DIR/rlx-cluster/@gpus/KEY.lock
 * (KEY: the device's UUID) while it runs; the kernel drops it when the
 * process ends, however it ends. Ranks asking for auto or vulkan take the
 * best device nobody holds, and share the best one when every one is held.
 * ('@' cannot occur in a cohort name, so the folder never meets a cohort's.)
 */

char *
rlx_backend_gpu_lock_dir (void)
{
  const char *rt = g_getenv ("XDG_RUNTIME_DIR");

  return g_build_filename (rt != NULL && rt[0] == '/' ? rt : g_get_user_runtime_dir (),
                           "rlx-cluster", "@gpus", NULL);
}

static char *
lock_path (const char *dir, const RlxVkDeviceInfo *info)
{
  g_autofree char *name = info->uuid[0] != '\0'
    ? g_strdup_printf ("%s.lock", info->uuid)
    : g_strdup_printf ("%04x-%04x-%u.lock", info->vendor_id, info->device_id, info->index);

  return g_build_filename (dir, name, NULL);
}

/* An fd holding the lock of @info's device, or -1 when another process
 * holds it (or it cannot be made: then @broken says why). */
static int
try_lock (const char *dir, const RlxVkDeviceInfo *info, char **broken)
{
  g_autofree char *path = lock_path (dir, info);
  int fd;

  if (g_mkdir_with_parents (dir, 0700) != 0)
    {
      *broken = g_strdup_printf ("cannot make %s (%s)", dir, g_strerror (errno));
      return -1;
    }
  fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    {
      *broken = g_strdup_printf ("cannot open %s (%s)", path, g_strerror (errno));
      return -1;
    }
  if (flock (fd, LOCK_EX | LOCK_NB) == 0)
    return fd;
  if (errno != EWOULDBLOCK)
    *broken = g_strdup_printf ("cannot lock %s (%s)", path, g_strerror (errno));
  close (fd);
  return -1;
}

gboolean
rlx_backend_gpu_in_use (GPtrArray *devices, guint i)
{
  g_autofree char *dir = rlx_backend_gpu_lock_dir ();
  g_autofree char *broken = NULL;
  int fd;

  g_return_val_if_fail (devices != NULL && i < devices->len, FALSE);
  fd = try_lock (dir, g_ptr_array_index (devices, i), &broken);

  if (fd < 0)
    return broken == NULL;
  close (fd);
  return FALSE;
}

GArray *
rlx_backend_claim_order (GArray *candidates, GPtrArray *devices, const char *lock_dir,
                         int *lock_fd, char **note)
{
  GArray *out = g_array_sized_new (FALSE, FALSE, sizeof (guint), candidates->len);
  g_autoptr(GString) held = g_string_new (NULL);
  g_autofree char *broken = NULL;
  guint n_gpu = 0, first_gpu = 0;
  int fd = -1;

  *lock_fd = -1;
  *note = NULL;
  for (guint k = 0; k < candidates->len; k++)
    {
      guint c = g_array_index (candidates, guint, k);
      const RlxVkDeviceInfo *info;

      if (c == RLX_BACKEND_CPU_CANDIDATE)
        continue;
      info = g_ptr_array_index (devices, c);
      /* a software device (asked for by name) is no scarce GPU */
      if (rlx_vk_device_is_software (info))
        continue;
      if (n_gpu++ == 0)
        first_gpu = c;
      if (fd < 0 && broken == NULL)
        fd = try_lock (lock_dir, info, &broken);
      if (fd >= 0)
        {
          /* the first free one goes first; the others keep their order */
          g_array_prepend_val (out, c);
          *lock_fd = fd;
          for (guint j = 0; j < candidates->len; j++)
            if (j != k)
              g_array_append_val (out, g_array_index (candidates, guint, j));
          return out;
        }
      g_string_append_printf (held, "%s%s [%u]", held->len ? ", " : "", info->name, info->index);
    }
  g_array_append_vals (out, candidates->data, candidates->len);
  if (broken != NULL)
    *note = g_strdup_printf ("vulkan: cannot tell which GPUs other ranks on this host use (%s)",
                             broken);
  else if (n_gpu == 1)
    *note = g_strdup_printf ("vulkan: %s is in use by another rank on this host; sharing it",
                             held->str);
  else if (n_gpu > 1)
    *note = g_strdup_printf ("vulkan: every GPU on this host is in use by another rank (%s); "
                             "sharing the best, %s [%u]", held->str,
                             ((RlxVkDeviceInfo *) g_ptr_array_index (devices, first_gpu))->name,
                             first_gpu);
  return out;
}

/* ------------------------------------------------------------ the walk */

gboolean
rlx_backend_choose (const char *request, RlxVkCompute compute, const RlxModel *model,
                    guint max_batch,
                    GPtrArray *devices, const char *vulkan_error, const char *lock_dir,
                    RlxBackendOpenFunc open, gpointer user_data, RlxBackendChoice *choice,
                    GError **error)
{
  g_autoptr(GPtrArray) passed_over = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GArray) candidates = NULL;
  g_autofree char *claim_note = NULL;
  int lock_fd = -1;
  gboolean explicit_vulkan;

  g_return_val_if_fail (model != NULL, FALSE);
  g_return_val_if_fail (open != NULL && choice != NULL, FALSE);

  *choice = (RlxBackendChoice) { NULL, RLX_BACKEND_CPU_CANDIDATE, -1, NULL };
  if (request == NULL || *request == '\0')
    request = "auto";
  explicit_vulkan = g_ascii_strncasecmp (request, "vulkan", 6) == 0;
  candidates = rlx_backend_candidates (request, compute, model, max_batch, devices, vulkan_error,
                                       passed_over, error);
  if (candidates == NULL)
    return FALSE;
  if (devices != NULL && devices->len > 0 && lock_dir != NULL)
    {
      GArray *order = rlx_backend_claim_order (candidates, devices, lock_dir, &lock_fd,
                                               &claim_note);

      g_array_unref (candidates);
      candidates = order;
    }

  for (guint k = 0; k < candidates->len; k++)
    {
      guint c = g_array_index (candidates, guint, k);
      const RlxVkDeviceInfo *info = c != RLX_BACKEND_CPU_CANDIDATE
                                    ? g_ptr_array_index (devices, c) : NULL;
      g_autoptr(GError) local = NULL;
      g_autofree char *note = NULL;
      gpointer opened = open (c, user_data, &note, &local);

      if (opened == NULL)
        {
          g_assert (local != NULL);
          /* the claim was this device's */
          if (k == 0 && lock_fd >= 0)
            {
              close (lock_fd);
              lock_fd = -1;
            }
          if (explicit_vulkan)
            {
              g_set_error (error, RLX_BACKEND_ERROR,
                           local->domain == RLX_BACKEND_ERROR ? local->code
                                                              : RLX_BACKEND_ERROR_FAILED,
                           "%s: %s could not train %s: %s", request,
                           info != NULL ? info->name : "cpu", model->slug, local->message);
              return FALSE;
            }
          g_ptr_array_add (passed_over,
                           info != NULL ? g_strdup_printf ("vulkan: %s failed to start: %s",
                                                           info->name, local->message)
                                        : g_strdup_printf ("cpu failed to start: %s",
                                                           local->message));
          continue;
        }
      /* the claim is this device's: the rank holds it while it runs */
      if (k == 0)
        {
          choice->lock_fd = lock_fd;
          lock_fd = -1;
        }
      if (info != NULL && claim_note != NULL)
        g_ptr_array_add (passed_over, g_strdup (claim_note));
      if (note != NULL)
        g_ptr_array_add (passed_over, g_steal_pointer (&note));
      g_ptr_array_add (passed_over, NULL);
      choice->opened = opened;
      choice->candidate = c;
      choice->fallback = g_strjoinv ("; ", (char **) passed_over->pdata);
      return TRUE;
    }
  if (lock_fd >= 0)
    close (lock_fd);
  g_ptr_array_add (passed_over, NULL);
  {
    g_autofree char *all = g_strjoinv ("; ", (char **) passed_over->pdata);

    g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_UNAVAILABLE,
                 "no backend could train %s: %s", model->slug, all);
  }
  return FALSE;
}
