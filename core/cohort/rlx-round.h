/* rlx-round.h — the leader's round: slots, deadline, accumulation, update
 *
 * A round collects one gradient bucket per assigned slot of one step. A
 * bucket is checked on the main context for what its header says (step,
 * sample count, length, loss) and then folded into the sample-weighted sum
 * on a worker thread (RlxSerial), where its values are checked for NaN and
 * ±Inf in the same pass; a bad one is taken out again ("rejected") and never
 * reaches the update. The first bucket is not copied: it is read in place
 * when the second arrives (sum = w1·b1 + w2·b2 in one pass), or straight by
 * the update if it stays the only one.
 *
 * The round is complete (::complete) when every slot has delivered, been
 * rejected or dropped, or the deadline dropped the rest ("late"), and the
 * folding is done. rlx_round_finish then computes, on a worker thread,
 * u = lr · (sum / samples) + residual, its wire scale, the step frame with u
 * quantised at the leader's precision written straight into it, and the new
 * residual (error feedback: what quantisation lost is carried into the next
 * update). Every replica — the leader's included — applies exactly the
 * update decoded from that frame.
 *
 * Threads: the main context only.
 */
#pragma once

#include <glib-object.h>
#include "core/cohort/rlx-msg.h"

G_BEGIN_DECLS

#define RLX_TYPE_ROUND (rlx_round_get_type ())
G_DECLARE_FINAL_TYPE (RlxRound, rlx_round, RLX, ROUND, GObject)

typedef enum {
  RLX_ROUND_ACCEPTED,   /* folded into the sum (may still be rejected by its values) */
  RLX_ROUND_LATE,       /* not this round's step, or its slot is already closed */
  RLX_ROUND_REJECTED,   /* its header does not match its slot (@reason says how) */
} RlxRoundVerdict;

/* Signals:
 *   ::rejected (const char *node, guint64 step, const char *reason)
 *       a bucket's values were not finite (found while folding it)
 *   ::late     (const char *node, guint64 step, const char *reason)
 *       a slot the deadline closed
 *   ::complete ()   every slot is closed and the sum is ready */

RlxRound  *rlx_round_new         (gsize n_params);
/* Start collecting step @step: @slots (RlxMsgSlot: node, start, count; the
 * leader's own slot among them) are copied; the deadline closes the round
 * after @deadline_ms. */
void       rlx_round_begin       (RlxRound *self, guint64 step, GArray *slots, guint deadline_ms);
gboolean   rlx_round_is_active   (RlxRound *self);
guint64    rlx_round_get_step    (RlxRound *self);
/* A bucket for @step from @node: @floats (the leader's own, read in place
 * until the round is finished) or @codes (a member's, its frame is
 * referenced). REJECTED sets @reason (free it). */
RlxRoundVerdict rlx_round_offer  (RlxRound *self, const char *node, guint64 step, guint samples,
                                  double loss, gint64 compute_us, const float *floats,
                                  const RlxMsgArray *codes, char **reason);
/* @node's slot will not deliver (it left, it is resyncing). */
void       rlx_round_close_slot  (RlxRound *self, const char *node);
/* Reject @node's bucket-to-be for @reason (counted as rejected). */
void       rlx_round_reject_slot (RlxRound *self, const char *node);
/* The slot of @node is still waiting for its bucket. */
gboolean   rlx_round_slot_pending (RlxRound *self, const char *node);
/* Stop: no signal of this round is emitted any more. */
void       rlx_round_cancel      (RlxRound *self);

/* Once complete: what it collected. */
guint64    rlx_round_get_samples      (RlxRound *self);
double     rlx_round_get_loss         (RlxRound *self);   /* sample-weighted mean */
GPtrArray *rlx_round_get_contributors (RlxRound *self);   /* char*, owned by the round */
guint      rlx_round_get_late         (RlxRound *self);
guint      rlx_round_get_rejected     (RlxRound *self);
gint64     rlx_round_get_max_compute  (RlxRound *self);
gint64     rlx_round_get_started      (RlxRound *self);   /* monotonic µs */

/* Forget the update's error feedback (a new leader starts without it). */
void       rlx_round_reset_residual   (RlxRound *self);

/* The step frame: @header (a RLX_MSG_STEP whose fields the caller filled,
 * taken) with u at @precision. @done gets the frame and the update inside
 * it, or NULL when a bucket turned out bad while computing u (the round's
 * totals changed: finish again with a new header). */
typedef void (*RlxRoundFinished) (RlxRound *round, GBytes *frame, const RlxMsgArray *update,
                                  gpointer user_data);
void       rlx_round_finish      (RlxRound *self, RlxMsg *header, double lr,
                                  RlxPrecision precision, gboolean feedback,
                                  RlxRoundFinished done, gpointer user_data);

G_END_DECLS
