/* rlx-sync-auto.h — when `--sync auto` chooses, and from what
 *
 * The leader's side of `auto` (DESIGN.md, "Training across slow links"):
 * it owns the link estimates (rlx-link-estimates.h) of the leader's links
 * and the measured compute time of one inner step, and says when a choice
 * is due and with which inputs (rlx_sync_choose's, rlx-sync-policy.h). The
 * coordinator passes those inputs to rlx_coordinator_rechoose_sync.
 *
 * A choice is due
 *   - at once when a link is remote and not measured yet (the cohort's
 *     first choice, or the first since every link was on this host): a
 *     *provisional* one from what is known — the chooser's outer mode at
 *     RLX_SYNC_PROVISIONAL_H while no step time was noted, with an assumed
 *     throughput while no frame was timed (rlx-sync-policy.h). The step
 *     rounds it replaces ran at a few per cent of one rank's speed over a
 *     slow link, for seconds, only to measure it;
 *   - once every remote link has a round trip and RLX_SYNC_AUTO_MIN_FRAMES
 *     timed frames (or QUIC's rate), and RLX_SYNC_AUTO_MIN_STEPS step times
 *     were noted (the first outer rounds measure both) — at once after a
 *     provisional choice;
 *   - again when the ranks change in number, a link comes or goes, or a
 *     round trip, throughput or the step time moves by more than
 *     RLX_SYNC_AUTO_DRIFT either way since the last choice — but not within
 *     RLX_SYNC_AUTO_HOLD_US of it, unless the ranks changed (one slow
 *     sample must not flap the mode). A choice from measurements stands
 *     while a new link is being measured.
 * On a cohort whose links all stay on this host a choice is due at once
 * (it is `step`, and nothing needs measuring).
 *
 * The step time is the compute of one inner step of the slowest rank
 * (without waiting for the network, nor the outer round's own work); the
 * caller notes it as it learns it (rlx-coordinator-auto.c), smoothed here.
 *
 * Threads: the coordinator's (the main context of the links it watches).
 */
#pragma once

#include <glib.h>
#include "core/cohort/rlx-link-estimates.h"
#include "core/cohort/rlx-sync-policy.h"

G_BEGIN_DECLS

#define RLX_SYNC_AUTO_MIN_FRAMES 2u
#define RLX_SYNC_AUTO_MIN_STEPS  3u
#define RLX_SYNC_AUTO_DRIFT      1.5
#define RLX_SYNC_AUTO_HOLD_US    (5 * G_USEC_PER_SEC)

typedef struct _RlxSyncAuto RlxSyncAuto;

RlxSyncAuto      *rlx_sync_auto_new       (void);
void              rlx_sync_auto_free      (RlxSyncAuto *self);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxSyncAuto, rlx_sync_auto_free)

/* The estimates it chooses from (the caller adds, watches and removes the
 * leader's links there). */
RlxLinkEstimates *rlx_sync_auto_estimates (RlxSyncAuto *self);

/* One inner step of the slowest rank took @step_ms of compute (finite,
 * > 0; others are ignored). Smoothed: the mean of the last few. */
void              rlx_sync_auto_note_step (RlxSyncAuto *self, double step_ms);
/* The smoothed step time (0: none noted yet). */
double            rlx_sync_auto_step_ms   (RlxSyncAuto *self);

/* At monotonic time @now_us, for a cohort of @n_ranks (the leader
 * included) exchanging arrays of @exchange_bytes: whether a choice is due
 * (the rules above). When TRUE, *@inputs holds them (its links point into
 * @self: valid until the next call); choose with them, then call
 * rlx_sync_auto_chosen. */
gboolean          rlx_sync_auto_due       (RlxSyncAuto *self, gint64 now_us, guint n_ranks,
                                           guint64 exchange_bytes, RlxSyncInputs *inputs);
/* The inputs of the last rlx_sync_auto_due were chosen from at @now_us. */
void              rlx_sync_auto_chosen    (RlxSyncAuto *self, gint64 now_us);
/* Forget the last choice (this node took over as leader, and chose `step`
 * with nothing measured): the next rlx_sync_auto_due is due once ready. */
void              rlx_sync_auto_forget    (RlxSyncAuto *self);
/* The last choice was provisional (made before the links and the steps
 * were measured). */
gboolean          rlx_sync_auto_provisional (RlxSyncAuto *self);
/* Choices made so far. */
guint             rlx_sync_auto_choices   (RlxSyncAuto *self);

G_END_DECLS
