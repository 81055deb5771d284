/* rlx-round-stats.h — what the "done" event says about a node's rounds
 *
 * The figures a node reports when it finishes ("done"): buckets late and
 * rejected; the leader's rounds (wall time, compute, main-loop time and
 * sends, process CPU time, samples) from the 6th committed round on; the
 * backend's counters per step (host bytes, own gradients computed ahead,
 * updates made ahead, worker wait) from the 5th noted step on; and the
 * leader's path per step (its operations' time on the worker, the hop back
 * to the main loop, the device's own times). The first rounds are left out:
 * they include warm-up (first allocations, shader caches, speed not yet
 * measured).
 *
 * Statistics only: nothing here decides anything in the protocol.
 *
 * Threads: the coordinator's; the figures it is given were copied off the
 * compute worker by the jobs that measured them.
 */
#pragma once

#include <json-glib/json-glib.h>
#include "core/event/rlx-event.h"

G_BEGIN_DECLS

typedef struct _RlxRoundStats RlxRoundStats;

RlxRoundStats *rlx_round_stats_new  (void);
void           rlx_round_stats_free (RlxRoundStats *self);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxRoundStats, rlx_round_stats_free)

/* CPU time of the calling thread, µs: the main loop's time in a handler,
 * which preemption by other processes on a loaded machine does not
 * inflate (wall time would). */
gint64  rlx_round_stats_now      (void);

/* Main-loop CPU time of a handler, and of a send (part of it), µs: summed
 * into the round in progress. */
void    rlx_round_stats_add_busy (RlxRoundStats *self, gint64 us);
void    rlx_round_stats_add_send (RlxRoundStats *self, gint64 us);

/* The leader committed a round: its @measured-th since it took the lead
 * (1-based), @round_us from its start to its commit, @samples in it, the
 * slowest member's @max_compute_us. Closes the round in progress. */
void    rlx_round_stats_round    (RlxRoundStats *self, guint measured, gint64 round_us,
                                  guint64 samples, double max_compute_us);

/* The backend's counters after a step (rlx_backend_host_bytes,
 * rlx_backend_ahead_taken, rlx_backend_updates_ahead) and the worker's
 * wait so far (rlx_worker_wait_us). */
void    rlx_round_stats_backend  (RlxRoundStats *self, guint64 host_bytes, guint64 ahead,
                                  guint64 update_ahead, guint64 worker_wait_us);
/* The leader's own gradient took @run_us on the worker. */
void    rlx_round_stats_own_path (RlxRoundStats *self, gint64 run_us);
/* The leader's finish took @run_us on the worker, ended there at @ran_at
 * (monotonic µs; the hop is measured from it to now), and the device's own
 * times for the finish and the gradient. Call after rlx_round_stats_backend
 * for the same step. */
void    rlx_round_stats_finish_path (RlxRoundStats *self, gint64 run_us, gint64 ran_at,
                                     double dev_finish_us, double dev_grad_us);

/* A bucket missed its round (late), or was thrown away (rejected). */
void    rlx_round_stats_late     (RlxRoundStats *self);
void    rlx_round_stats_rejected (RlxRoundStats *self);
guint64 rlx_round_stats_get_late     (RlxRoundStats *self);
guint64 rlx_round_stats_get_rejected (RlxRoundStats *self);

/* The measured figures into "done" (none that were never measured). */
void    rlx_round_stats_write    (RlxRoundStats *self, RlxEventDone *done);

G_END_DECLS
