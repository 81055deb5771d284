/* rlx-norm-guard.h — the leader's judge of a bucket's size
 *
 * A member's bucket (gradient, or an outer round's pseudo-gradient) whose
 * L2 norm is far outside the cohort's recent ones is refused before it
 * joins the round (issue 29: a member with the key must not poison the
 * update with one absurd bucket; NaN and ±Inf are refused by the backend's
 * check as it adds). The guard keeps the norms of the last
 * RLX_NORM_GUARD_KEEP buckets the leader took; the limit is @ratio × their
 * median, once RLX_NORM_GUARD_MIN_SEEN are known. The norms of one sync
 * mode (H) are not those of another: a change of H starts afresh.
 *
 * Threads: a plain value of the leader's (main context).
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define RLX_NORM_GUARD_KEEP      64
#define RLX_NORM_GUARD_MIN_SEEN  4
#define RLX_NORM_GUARD_DEFAULT_RATIO 100.0

typedef struct {
  double ratio;                       /* ≤ 0: no limit */
  guint  h;                           /* the sync mode's H the norms are of */
  guint  n, next;
  double norms[RLX_NORM_GUARD_KEEP];
} RlxNormGuard;

void   rlx_norm_guard_init  (RlxNormGuard *g, double ratio);
/* The largest norm a bucket of a round of @h may have; 0: no limit (off,
 * or too few norms known yet). */
double rlx_norm_guard_limit (RlxNormGuard *g, guint h);
/* The median of the norms known for @h (0: none). */
double rlx_norm_guard_median (RlxNormGuard *g, guint h);
/* A bucket of a round of @h with this @norm was taken. */
void   rlx_norm_guard_note  (RlxNormGuard *g, guint h, double norm);

G_END_DECLS
