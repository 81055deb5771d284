/* rlx-split.c — the global batch split over the members (see
 * core/rlx-coordinator-private.h, where the rule is written down; the unit
 * test is tests/cohort/test-split.c). */
#include "rlx-config.h"
#include "core/rlx-coordinator-private.h"

#include <math.h>

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
