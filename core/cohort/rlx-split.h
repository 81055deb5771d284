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
 * @per_round) takes when the epoch has @left left. A step (@per_round 1)
 * ends with its epoch: @global, or @left when that is less (the step
 * mode's short last step). An outer round (@per_round > 1) takes @global
 * (at most RLX_SPLIT_MAX_ROUND) wherever the epoch ends: its slots run on
 * into the next epoch's permutation (rlx_replica_indices). Capped at the
 * epoch, eight mnist-mlp ranks at batch 256 and H 150 (307,200 samples a
 * round) got 60,000 — 29 inner steps a round, not 150, and a round trip
 * and an average for each 29 (5.48x of one rank, 6.8x the goal). */
#define RLX_SPLIT_MAX_ROUND (1u << 30)
guint   rlx_split_round_count (guint64 global, guint left, guint per_round);
/* The most samples one member's slot of a round may hold, whatever the
 * round's H and the member's max_batch (H ≤ RLX_OUTER_MAX_H 10,000 times a
 * max_batch ≤ 65,536 would be 655 million: 2.6 GB of indices). 2^24 is
 * 64 MiB of indices, 280 epochs of Fashion-MNIST, more than an epoch of
 * the largest synthetic split (10,000,000) and 54 times the largest round
 * measured (eight mnist-mlp ranks at batch 256 and H 150: 307,200 in all);
 * a member's share of a round at H 10,000 stays within it up to 1,677
 * samples an inner step. The leader assigns nobody more
 * (rlx_split_assign_rounds), and a member refuses a frame that assigns it
 * more (rlx_split_slot_fits). */
#define RLX_SPLIT_MAX_SLOT (1u << 24)
/* Whether a slot of @count samples from stream position @start, of a round
 * of @h inner steps (0: a step), is one a member with @max_batch and an
 * epoch of @n_train takes. A step's lies within its epoch; an outer
 * round's may run on into the next epochs, and holds at most @h ×
 * @max_batch (what the leader assigns at most) or an epoch, whichever is
 * more, and never more than RLX_SPLIT_MAX_SLOT. FALSE with @error
 * (RLX_MSG_ERROR_FIELD) saying which bound it passes. */
gboolean rlx_split_slot_fits  (guint64 start, guint count, guint h, guint n_train,
                               guint max_batch, GError **error);
/* A round's slots (RlxMsgSlot) from position @pos of the epoch's
 * permutation: the global batch (the sum of the members' --batch) split in
 * proportion to measured speed (to --batch until every speed is measured),
 * as much as rlx_split_round_count gives. Starts are positions in the
 * sample stream from the start of @pos's epoch (at or past its end: in the
 * epochs after it; rlx_replica_indices); *@count: the samples assigned.
 * A member whose link has been silent for two heartbeats
 * (rlx_peer_set_is_silent: most likely stopped) gets no slot and adds
 * nothing to the global batch until it is heard again: a round would
 * otherwise wait for it until the deadline (at least 500 ms) each time
 * until the heartbeat drops it (chaos.py: member freezes cost 0.5 s a
 * round for the timeout's 3 s; a new leader's first rounds waited for a
 * member frozen at the failover). */
GArray *rlx_split_assign (RlxCohortContext *ctx, guint pos, guint *count);
/* The same for a round of @per_round batches (an outer round of H inner
 * steps: H times each member's --batch and max_batch; 1: a step). */
GArray *rlx_split_assign_rounds (RlxCohortContext *ctx, guint pos, guint per_round,
                                 guint *count);
/* How many ranks @slots (RlxMsgSlot) give samples to: the nodes named with a
 * count above 0, each once. */
guint   rlx_split_ranks          (GArray *slots);

G_END_DECLS
