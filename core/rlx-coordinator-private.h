/* rlx-coordinator-private.h — internals of the cohort engine exposed for tests
 *
 * Not part of the API: only core/ and tests/cohort include it. The batch
 * split lives in core/cohort/rlx-split.c.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Split @count samples over @k members in proportion to @weights (samples
 * per second, or --batch until every speed is measured): floor of each
 * share, the remainder one by one to the largest fractions; when @count >= @k
 * every member able (weight > 0, max_batch > 0) gets at least one; nobody gets
 * more than its @max_batch, the excess going to members with room. A member
 * with max_batch 0 counts as weight 0. Writes @out[0..k) and returns the sum,
 * which is @count unless the caps leave too little room (then less), or 0
 * when no member is able. */
guint rlx_coordinator_split_batch (guint         count,
                                   const double *weights,
                                   const guint  *max_batch,
                                   guint         k,
                                   guint        *out);

G_END_DECLS
