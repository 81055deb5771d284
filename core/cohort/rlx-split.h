/* rlx-split.h — the global batch split over the members (the leader's
 * assignment; the unit test is tests/cohort/test-split.c)
 *
 * Threads: rlx_coordinator_split_batch any (a pure function);
 * rlx_split_assign the context's.
 */
#pragma once

#include <glib.h>
#include "core/cohort/rlx-cohort-context.h"

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

/* How many samples a round of @global samples (the members' batches times
 * @per_round) takes when the epoch has @left left: @global, or @left when
 * that is less — and, for an outer round (@per_round > 1), @left also when
 * taking @global would leave a tail of under half a round. Such a tail
 * made a round of its own, and with overlap every round costs at least an
 * exchange: after a round of a few samples each rank waited for the commit
 * of the round before it to be assigned the next (mnist-mlp-xl at H 39,
 * 60,000 samples an epoch: 3 rounds of 19,968 and one of 96, which took
 * 1.2 s; the epoch 4.4 s where 3.7 s computed it). The last round of an
 * epoch is then up to 1.5 times the others, in as many inner steps. */
guint   rlx_split_round_count (guint64 global, guint left, guint per_round);
/* A round's slots (RlxMsgSlot) from position @pos of the epoch's
 * permutation: the global batch (the sum of the members' --batch) split in
 * proportion to measured speed (to --batch until every speed is measured),
 * within what the epoch has left (rlx_split_round_count). Starts are absolute positions; *@count:
 * the samples assigned. */
GArray *rlx_split_assign (RlxCohortContext *ctx, guint pos, guint *count);
/* The same for a round of @per_round batches (an outer round of H inner
 * steps: H times each member's --batch and max_batch; 1: a step). */
GArray *rlx_split_assign_rounds (RlxCohortContext *ctx, guint pos, guint per_round,
                                 guint *count);

G_END_DECLS
