/* rlx-norm-guard.c — the leader's judge of a bucket's size (rlx-norm-guard.h) */
#include "rlx-config.h"
#include "rlx-norm-guard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void
rlx_norm_guard_init (RlxNormGuard *g, double ratio)
{
  memset (g, 0, sizeof *g);
  g->ratio = ratio;
}

static void
start_over (RlxNormGuard *g, guint h)
{
  if (g->h != h)
    {
      g->h = h;
      g->n = g->next = 0;
    }
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y ? 1 : 0;
}

double
rlx_norm_guard_median (RlxNormGuard *g, guint h)
{
  double v[RLX_NORM_GUARD_KEEP];

  start_over (g, h);
  if (g->n == 0)
    return 0;
  memcpy (v, g->norms, g->n * sizeof (double));
  qsort (v, g->n, sizeof (double), cmp_double);
  return g->n % 2 ? v[g->n / 2] : 0.5 * (v[g->n / 2 - 1] + v[g->n / 2]);
}

double
rlx_norm_guard_limit (RlxNormGuard *g, guint h)
{
  double m;

  start_over (g, h);
  if (g->ratio <= 0 || g->n < RLX_NORM_GUARD_MIN_SEEN)
    return 0;
  m = rlx_norm_guard_median (g, h);
  /* a cohort whose buckets are all zero yet: anything is far from them,
   * and nothing is known */
  return m > 0 ? g->ratio * m : 0;
}

void
rlx_norm_guard_note (RlxNormGuard *g, guint h, double norm)
{
  start_over (g, h);
  if (!isfinite (norm) || norm < 0)
    return;
  g->norms[g->next] = norm;
  g->next = (g->next + 1) % RLX_NORM_GUARD_KEEP;
  g->n = MIN (g->n + 1, RLX_NORM_GUARD_KEEP);
}
