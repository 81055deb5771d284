/* rlx-round.h — the leader's round: slots, deadline, what was collected
 *
 * A round collects one gradient bucket per assigned slot of one step. A
 * bucket is checked here, on the main context, for what its header says
 * (step, sample count, length, loss); one that passes is handed to the
 * rank's backend, which adds it to the round's sum on the compute worker
 * (rlx_backend_round_add, or round_own for the leader's own gradient) and
 * checks its values for NaN and ±Inf on the way. The caller reports the
 * outcome with rlx_round_added: a bucket the backend refused is taken out
 * of the totals again ("rejected") and never reaches the update.
 *
 * The round is complete (::complete) when every slot has delivered, been
 * rejected or dropped, or the deadline dropped the rest ("late"), and no
 * bucket is still being added. Its totals (samples, the sample-weighted
 * loss, the contributors) then describe exactly what the backend's sum
 * holds, and the leader finishes the round there (rlx_backend_round_finish).
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
  RLX_ROUND_ACCEPTED,   /* goes to the backend (which may still refuse its values) */
  RLX_ROUND_LATE,       /* not this round's step, or its slot is already closed */
  RLX_ROUND_REJECTED,   /* its header does not match its slot (@reason says how) */
} RlxRoundVerdict;

/* Signals:
 *   ::rejected (const char *node, guint64 step, const char *reason)
 *       the backend refused an accepted bucket (its values were not finite)
 *   ::late     (const char *node, guint64 step, const char *reason)
 *       a slot the deadline closed
 *   ::complete ()   every slot is closed and every accepted bucket added */

RlxRound  *rlx_round_new         (gsize n_params);
/* Start collecting step @step: @slots (RlxMsgSlot: node, start, count; the
 * leader's own slot among them) are copied; the deadline closes the round
 * after @deadline_ms (0: no deadline). */
void       rlx_round_begin       (RlxRound *self, guint64 step, GArray *slots, guint deadline_ms);

/* The collect deadline of a leader's round (ms): 10 × the round time
 * (@round_us, an average of the rounds measured), but never below
 * @floor_ms (--deadline-floor-ms: it always holds) and at most
 * RLX_ROUND_MAX_DEADLINE_MS — or 3 × the round time where that is longer,
 * so a long outer round (H steps of a slow rank) is not cut once its time
 * is known; never 0 (no deadline). @round_us ≤ 0 (nothing measured yet: a
 * founder's first three rounds): RLX_ROUND_FIRST_DEADLINE_MS, or
 * RLX_ROUND_FIRST_STEP_MS for each of the round's @h inner steps (0 or 1:
 * a step-mode round), or @floor_ms, whichever is longest — an outer round
 * of 50 steps of 250 ms was cut at 10 s, the leader's own share with it. */
#define RLX_ROUND_FIRST_DEADLINE_MS 10000
#define RLX_ROUND_FIRST_STEP_MS     1000
#define RLX_ROUND_MAX_DEADLINE_MS   30000
/* --deadline-floor-ms's default. A member that stops holds every round it
 * was assigned for the deadline, the cohort with it: at 500 ms a member
 * freeze stood a local cohort still 0.58 s of every one (issue 29). A
 * member that only runs late loses its share of that one round (its bucket
 * is counted and dropped); the floor is 60 × a 3 ms local round still. */
#define RLX_ROUND_DEADLINE_FLOOR_MS 200
guint      rlx_round_deadline_ms (double round_us, guint floor_ms, guint h);
gboolean   rlx_round_is_active   (RlxRound *self);
guint64    rlx_round_get_step    (RlxRound *self);
/* A bucket of @n values for @step from @node (the leader's own gradient
 * too). REJECTED sets @reason (free it). ACCEPTED: hand it to the backend;
 * the round waits for rlx_round_added (@node, …). */
RlxRoundVerdict rlx_round_offer  (RlxRound *self, const char *node, guint64 step, guint samples,
                                  double loss, gint64 compute_us, gsize n, char **reason);
/* The backend took @node's accepted bucket (@ok) or refused it for
 * @reason (then ::rejected is emitted and the totals lose it). */
void       rlx_round_added       (RlxRound *self, const char *node, gboolean ok,
                                  const char *reason);
/* Buckets accepted and not yet reported added. */
guint      rlx_round_adding      (RlxRound *self);
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
/* From the beginning to the last bucket accepted, µs (0: none was): what
 * the slots that delivered took, without the deadline's wait for those
 * that did not. */
gint64     rlx_round_get_collect_us   (RlxRound *self);

G_END_DECLS
