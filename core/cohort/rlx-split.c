/* rlx-split.c — the global batch split over the members (see
 * rlx-split.h, where the rule is written down; the unit test is
 * tests/cohort/test-split.c). */
#include "rlx-config.h"
#include "rlx-split.h"

#include <math.h>

/* A hello's batch counts for at most this many times the leader's own
 * --batch (and at least SANE_BATCH_MIN); its max_batch for this many times
 * that again. */
#define SANE_BATCH_FACTOR 8u
#define SANE_BATCH_MIN    256u

guint
rlx_coordinator_split_batch (guint count, const double *weights, const guint *max_batch,
                             guint k, guint *out)
{
  g_autofree double *w = NULL;
  g_autofree double *frac = NULL;
  double wsum = 0;
  guint given = 0;

  g_return_val_if_fail (k == 0 || (weights != NULL && max_batch != NULL && out != NULL), 0);

  if (k == 0)
    return 0;
  w = g_new0 (double, k);
  frac = g_new0 (double, k);
  for (guint i = 0; i < k; i++)
    {
      out[i] = 0;
      w[i] = max_batch[i] == 0 || !(weights[i] > 0) ? 0 : weights[i];
      wsum += w[i];
    }
  if (wsum <= 0)
    count = 0;
  for (guint i = 0; i < k && count > 0; i++)
    {
      double raw = count * w[i] / wsum;
      out[i] = (guint) floor (raw);
      frac[i] = raw - out[i];
      given += out[i];
    }
  /* The remainder to the largest fractions. */
  while (given < count)
    {
      guint best = 0;
      for (guint i = 1; i < k; i++)
        if (w[i] > 0 && (frac[i] > frac[best] || w[best] <= 0))
          best = i;
      out[best]++;
      frac[best] = -1;
      given++;
    }
  /* Everyone able gets at least one sample when there are enough. */
  if (count >= k)
    for (guint i = 0; i < k; i++)
      if (out[i] == 0 && w[i] > 0)
        {
          guint big = 0;
          for (guint j = 1; j < k; j++)
            if (out[j] > out[big])
              big = j;
          if (out[big] > 1)
            {
              out[big]--;
              out[i]++;
            }
        }
  /* No more than a member's backend takes; the excess to those with room. */
  for (guint pass = 0; pass < 4; pass++)
    {
      guint excess = 0;
      for (guint i = 0; i < k; i++)
        if (out[i] > max_batch[i])
          {
            excess += out[i] - max_batch[i];
            out[i] = max_batch[i];
          }
      for (guint i = 0; i < k && excess > 0; i++)
        while (out[i] < max_batch[i] && excess > 0 && w[i] > 0)
          {
            out[i]++;
            excess--;
          }
      count -= excess;
      if (excess == 0)
        break;
    }
  return count;
}

static guint
member_batch (RlxCohortContext *ctx, const char *id, guint *max_batch, double *speed)
{
  RlxPeer *p;

  if (rlx_cohort_is_self (ctx, id))
    {
      RlxWorker *worker = rlx_compute_queue_get_worker (ctx->queue);

      *max_batch = rlx_backend_max_batch (rlx_worker_backend (worker));
      *speed = ctx->self_speed;
      return ctx->batch;
    }
  p = rlx_peer_set_lookup (ctx->peers, id);
  if (p == NULL || rlx_peer_set_is_silent (ctx->peers, p))
    {
      *max_batch = 0;
      *speed = 0;
      return 0;
    }
  /* What a hello claims is bounded: a member cannot grow the global batch,
   * or lift its own cap, beyond SANE_BATCH_FACTOR times our --batch. */
  {
    guint sane = MAX (SANE_BATCH_FACTOR * ctx->batch, SANE_BATCH_MIN);
    *max_batch = MIN (p->max_batch, SANE_BATCH_FACTOR * sane);
    *speed = p->speed;
    return MIN (p->batch, sane);
  }
}

guint
rlx_split_round_count (guint64 global, guint left, guint per_round)
{
  if (per_round > 1)
    return (guint) MIN (global, (guint64) RLX_SPLIT_MAX_ROUND);
  return (guint) MIN (global, (guint64) left);
}

gboolean
rlx_split_slot_fits (guint64 start, guint count, guint h, guint n_train, guint max_batch,
                     GError **error)
{
  guint64 most = MAX ((guint64) h * max_batch, (guint64) n_train);

  if (h == 0 && start + count > n_train)
    {
      g_set_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_FIELD,
                   "a step's slot of %u samples from %" G_GUINT64_FORMAT " passes the epoch's "
                   "end (%u samples)", count, start, n_train);
      return FALSE;
    }
  if (h > 0 && count > RLX_SPLIT_MAX_SLOT)
    {
      g_set_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_FIELD,
                   "an outer round's slot of %u samples is more than any slot may hold (%u)",
                   count, RLX_SPLIT_MAX_SLOT);
      return FALSE;
    }
  if (h > 0 && count > most)
    {
      g_set_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_FIELD,
                   "an outer round's slot of %u samples is more than H %u times this rank's "
                   "max_batch %u, or an epoch (%u)", count, h, max_batch, n_train);
      return FALSE;
    }
  return TRUE;
}

GArray *
rlx_split_assign (RlxCohortContext *ctx, guint pos, guint *count_out)
{
  return rlx_split_assign_rounds (ctx, pos, 1, count_out);
}

GArray *
rlx_split_assign_rounds (RlxCohortContext *ctx, guint pos, guint per_round, guint *count_out)
{
  GPtrArray *ids = rlx_cohort_members (ctx);
  guint k = ids->len;
  g_autofree guint *maxb = g_new0 (guint, MAX (k, 1));
  g_autofree double *w = g_new0 (double, MAX (k, 1));
  g_autofree guint *c = g_new0 (guint, MAX (k, 1));
  GArray *slots = rlx_msg_slots_new ();
  gboolean all_measured = TRUE;
  guint64 global = 0;
  guint count, start = pos;

  for (guint i = 0; i < k; i++)
    {
      double speed;
      guint b = member_batch (ctx, g_ptr_array_index (ids, i), &maxb[i], &speed);
      global += (guint64) b * per_round;
      maxb[i] = (guint) MIN ((guint64) maxb[i] * per_round, (guint64) RLX_SPLIT_MAX_SLOT);
      w[i] = speed;
      /* (one that gets nothing — gone, or silent — has no speed to wait for) */
      if (speed <= 0 && maxb[i] > 0)
        all_measured = FALSE;
    }
  if (!all_measured)
    for (guint i = 0; i < k; i++)
      {
        double speed;
        w[i] = member_batch (ctx, g_ptr_array_index (ids, i), &maxb[i], &speed);
        maxb[i] = (guint) MIN ((guint64) maxb[i] * per_round, (guint64) RLX_SPLIT_MAX_SLOT);
      }
  count = rlx_split_round_count (global, rlx_replica_get_n_train (ctx->replica) - pos,
                                 per_round);
  /* With three members or more, nobody gets more than half of a round:
   * however fast it looks, no one member's gradient outweighs the rest. */
  if (k >= 3)
    for (guint i = 0; i < k; i++)
      maxb[i] = MIN (maxb[i], (count + 1) / 2);
  rlx_coordinator_split_batch (count, w, maxb, k, c);
  for (guint i = 0; i < k; i++)
    {
      RlxMsgSlot s = { 0 };
      if (c[i] == 0)
        continue;
      s.node = g_strdup (g_ptr_array_index (ids, i));
      s.start = start;
      s.count = c[i];
      start += c[i];
      g_array_append_val (slots, s);
    }
  *count_out = start - pos;
  return slots;
}

guint
rlx_split_ranks (GArray *slots)
{
  g_autoptr(GHashTable) seen = g_hash_table_new (g_str_hash, g_str_equal);

  for (guint i = 0; slots && i < slots->len; i++)
    {
      const RlxMsgSlot *s = &g_array_index (slots, RlxMsgSlot, i);
      if (s->count > 0 && s->node != NULL)
        g_hash_table_add (seen, s->node);
    }
  return g_hash_table_size (seen);
}
