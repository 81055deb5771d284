/* rlx-vk-submit.c — submission and its timeline: fences, the wait that
 * polls before it sleeps, VK_ERROR_DEVICE_LOST (and the simulated one),
 * timestamps, and RLX_VK_TIMELINE's per-submission record
 *
 * Threads: the trainer's (rlx-vk-trainer-private.h).
 */
#include "rlx-config.h"
#include "rlx-vk-trainer-private.h"

#include <stdlib.h>
#include <string.h>

/* Waits for the step's fence. A hardware GPU step takes well under a
 * millisecond for the small models, where a sleeping wait costs tens of
 * microseconds to wake up: poll first, then sleep. (Not on a software
 * device, whose worker threads need the cores.) */
static VkResult
wait_fence (RlxVkTrainer *self, VkFence fence, guint64 timeout_ns)
{
  gint64 t0 = g_get_monotonic_time ();
  VkResult r = VK_NOT_READY;

  if (!rlx_vk_device_is_software (self->info))
    {
      gint64 until = t0 + 20000;
      do
        r = self->vk.GetFenceStatus (self->dev, fence);
      while (r == VK_NOT_READY && g_get_monotonic_time () < until);
    }
  if (r == VK_NOT_READY)
    r = self->vk.WaitForFences (self->dev, 1, &fence, VK_TRUE, timeout_ns);
  self->wait_acc += g_get_monotonic_time () - t0;
  return r;
}

/* @r: what submitting (with the fence) returned. Waits for the fence and
 * turns a failure into an error naming @what; a lost device, or work that
 * never finishes, is lost for good (every later call fails the same way). */
gboolean
rlx_vkt_wait_submission (RlxVkTrainer *self, VkFence fence, VkResult r, const char *what,
                         GError **error)
{
  g_autoptr(GError) local = NULL;

  if (r == VK_SUCCESS)
    {
      r = wait_fence (self, fence, 120ull * 1000000000ull);
      if (r == VK_TIMEOUT)
        {
          self->lost = TRUE;
          self->lost_reason = g_strdup_printf ("%s did not finish %s in 120 s; this rank cannot "
                                               "compute on it any more — restart it, or use "
                                               "--backend cpu", self->info->name, what);
          g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_DEVICE_LOST, "%s", self->lost_reason);
          return FALSE;
        }
    }
  if (r == VK_SUCCESS)
    {
      rlx_vkt_timeline_collect (self);
      return TRUE;
    }
  rlx_vk_set_error (&local, r, "%s on %s", what, self->info->name);
  if (r == VK_ERROR_DEVICE_LOST)
    {
      self->lost = TRUE;
      self->lost_reason = g_strdup (local->message);
    }
  g_propagate_error (error, g_steal_pointer (&local));
  return FALSE;
}

/* ── RLX_VK_TIMELINE ─────────────────────────────────────────────────────
 *
 * Each submission is bracketed by two timestamps written at the bottom of
 * the pipe: the first when all work before it is done, or when it reached
 * the device if that was later; the second when its own work is done. So
 * "busy" is the device's time on it, and "idle" the time the device had
 * nothing to do before it (the host was late with it). */

void
rlx_vkt_timeline_init (RlxVkTrainer *self)
{
  VkQueryPoolCreateInfo qpci = {
    .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
    .queryType = VK_QUERY_TYPE_TIMESTAMP,
    .queryCount = 2 * TL_RING,
  };
  VkCommandBufferAllocateInfo cai = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
    .commandPool = self->cmdpool,
    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
    .commandBufferCount = 2 * TL_RING,
  };
  VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO };

  if (!self->tun.timeline || self->queries == VK_NULL_HANDLE)
    return;
  if (self->vk.CreateQueryPool (self->dev, &qpci, NULL, &self->tl_pool) != VK_SUCCESS)
    {
      self->tl_pool = VK_NULL_HANDLE;
      return;
    }
  if (self->vk.AllocateCommandBuffers (self->dev, &cai, self->tl_cb) != VK_SUCCESS)
    {
      self->vk.DestroyQueryPool (self->dev, self->tl_pool, NULL);
      self->tl_pool = VK_NULL_HANDLE;
      return;
    }
  for (guint j = 0; j < 2 * TL_RING; j++)
    {
      self->vk.BeginCommandBuffer (self->tl_cb[j], &bi);
      self->vk.CmdResetQueryPool (self->tl_cb[j], self->tl_pool, j, 1);
      self->vk.CmdWriteTimestamp (self->tl_cb[j], VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                                  self->tl_pool, j);
      self->vk.EndCommandBuffer (self->tl_cb[j]);
    }
  self->tl_stats = g_hash_table_new_full (g_str_hash, g_str_equal, NULL,
                                          (GDestroyNotify) g_array_unref);
}

/* Reads the ring's completed entries, in submission order. */
void
rlx_vkt_timeline_collect (RlxVkTrainer *self)
{
  if (self->tl_pool == VK_NULL_HANDLE)
    return;
  while (self->tl_label[self->tl_read] != NULL)
    {
      guint e = self->tl_read;
      guint64 ts[4];
      double tick = self->info->timestamp_period / 1000.0, pair[2];
      GArray *a;
      VkResult r = self->vk.GetQueryPoolResults (self->dev, self->tl_pool, 2 * e, 2, sizeof ts, ts,
                                                 2 * sizeof (guint64),
                                                 VK_QUERY_RESULT_64_BIT |
                                                 VK_QUERY_RESULT_WITH_AVAILABILITY_BIT);

      if ((r != VK_SUCCESS && r != VK_NOT_READY) || ts[1] == 0 || ts[3] == 0)
        return;
      pair[0] = ts[2] > ts[0] ? (double) (ts[2] - ts[0]) * tick : 0;
      pair[1] = self->tl_prev_end != 0 && ts[0] > self->tl_prev_end
                ? (double) (ts[0] - self->tl_prev_end) * tick : 0;
      self->tl_prev_end = ts[2];
      a = g_hash_table_lookup (self->tl_stats, self->tl_label[e]);
      if (a == NULL)
        {
          a = g_array_new (FALSE, FALSE, sizeof (double));
          g_hash_table_insert (self->tl_stats, (gpointer) self->tl_label[e], a);
        }
      if (a->len < 2 * 200000)
        g_array_append_vals (a, pair, 2);
      self->tl_label[e] = NULL;
      self->tl_read = (e + 1) % TL_RING;
    }
}

static int
cmp_double (gconstpointer a, gconstpointer b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

/* Per kind: the count, then the device's time on it and its idle time
 * before it — median, 90th and 99th percentile, and the mean without the
 * first 50 of the kind (the start-up: datasets uploaded, pipelines made). */
void
rlx_vkt_timeline_print (RlxVkTrainer *self)
{
  GHashTableIter it;
  gpointer k, v;

  if (self->tl_pool == VK_NULL_HANDLE)
    return;
  rlx_vkt_timeline_collect (self);
  g_printerr ("rlx-vk timeline: %s on %s, per kind of submission: count; the device's time "
              "on it and its idle time before it, us: median / p90 / p99 / mean after the "
              "first 50\n", self->model->slug, self->info->name);
  g_hash_table_iter_init (&it, self->tl_stats);
  while (g_hash_table_iter_next (&it, &k, &v))
    {
      GArray *a = v;
      guint m = a->len / 2, skip = m > 100 ? 50 : 0;
      g_autofree double *busy = g_new (double, m), *idle = g_new (double, m);
      double sb = 0, si = 0;

      if (m == 0)
        continue;
      for (guint i = 0; i < m; i++)
        {
          busy[i] = g_array_index (a, double, 2 * i);
          idle[i] = g_array_index (a, double, 2 * i + 1);
          if (i >= skip)
            {
              sb += busy[i];
              si += idle[i];
            }
        }
      qsort (busy, m, sizeof (double), cmp_double);
      qsort (idle, m, sizeof (double), cmp_double);
      g_printerr ("  %-28s %7u  busy %7.1f / %7.1f / %7.1f / %7.1f  idle before %7.1f / %7.1f / "
                  "%7.1f / %7.1f\n", (char *) k, m, busy[m / 2], busy[m * 9 / 10],
                  busy[m * 99 / 100], sb / (m - skip), idle[m / 2], idle[m * 9 / 10],
                  idle[m * 99 / 100], si / (m - skip));
    }
}

/* Submits @cbs[0..n) as one batch with the fence and waits. */
gboolean
rlx_vkt_submit_wait (RlxVkTrainer *self, const VkCommandBuffer *cbs, guint n, gboolean count_step,
                     const char *what, GError **error)
{
  if (!check_lost (self, error))
    return FALSE;
  return rlx_vkt_wait_submission (self, self->fence, rlx_vkt_submit (self, cbs, n, self->fence,
                                                                     count_step),
                                  what, error);
}

/* The last step's timestamps (and, with RLX_VK_PROFILE, its dispatches'). */
void
rlx_vkt_read_timings (RlxVkTrainer *self, Step *step, gboolean applied)
{
  VkResult r;

  self->timings.apply_us = applied ? rlx_vkt_query_span (self, Q_APPLY) : 0;
  if (self->queries != VK_NULL_HANDLE)
    {
      guint64 ts[4];
      r = self->vk.GetQueryPoolResults (self->dev, self->queries, 0, 4, sizeof ts, ts, sizeof (guint64),
                                 VK_QUERY_RESULT_64_BIT);
      if (r == VK_SUCCESS)
        {
          double p = self->info->timestamp_period / 1000.0;
          self->timings.upload_us = (double) (ts[1] - ts[0]) * p;
          self->timings.compute_us = (double) (ts[2] - ts[1]) * p;
          self->timings.download_us = (double) (ts[3] - ts[2]) * p;
        }
    }
  if (self->prof != VK_NULL_HANDLE && step->labels->len > 0)
    {
      guint nq = step->labels->len + 1;
      g_autofree guint64 *ts = g_new0 (guint64, nq);
      if (self->vk.GetQueryPoolResults (self->dev, self->prof, 0, nq, nq * sizeof (guint64), ts,
                                 sizeof (guint64),
                                 VK_QUERY_RESULT_64_BIT) == VK_SUCCESS)
        {
          for (guint i = 1; i < nq; i++)
            step->prof_us[i - 1] += (double) (ts[i] - ts[i - 1]) * self->info->timestamp_period / 1000.0;
          step->prof_steps++;
        }
    }
}

/* Records, submits and waits for a command buffer made by @fill; for the
 * rare work (load, read, tests). */
gboolean
rlx_vkt_run_once (RlxVkTrainer *self, FillFunc fill, gpointer data, const char *what,
                  GError **error)
{
  Recorded once = { 0 };
  gboolean ok;

  if (get_recorded (self, &once, 4, fill, data, error) == NULL)
    return FALSE;
  ok = rlx_vkt_submit_wait (self, &once.cb, 1, FALSE, what, error);
  rlx_vkt_recorded_clear (self, &once);
  return ok;
}
