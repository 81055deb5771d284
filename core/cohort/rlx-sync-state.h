/* rlx-sync-state.h — the cohort's sync mode: what this node asked for, what
 * the cohort runs, and why
 *
 * The sync mode (`--sync step|outer:H|auto`, DESIGN.md "Training across
 * slow links") is a property of the cohort, decided by its leader: the
 * leader's state holds the choice and announces it in every step frame
 * (docs/PROTOCOL.md, "Sync modes": `h`, `ch`, `olr`, `omom`); members never
 * decide, they follow what each frame says (rlx_sync_state_follow), so a
 * failover or a merge changes the mode to the new leader's with nothing
 * else to agree on.
 *
 * `auto` is chosen here through rlx_sync_choose (rlx-sync-policy.h): the
 * coordinator calls rlx_sync_state_rechoose when what it measures changes
 * (a member joins or leaves, this node takes over, a link's estimates move;
 * the measurements are the caller's). With no measurement (NULL inputs)
 * `auto` is `step`, which is right for a cohort of one host. A choice takes
 * effect at the next round the leader assigns.
 *
 * The object also keeps the outer hashes of the last few commits (θ and m,
 * rlx_outer_hash), so the "step" event of an outer round can report it.
 *
 * Threads: the coordinator's (its thread-default main context).
 */
#pragma once

#include "core/event/rlx-event.h"
#include "core/cohort/rlx-msg.h"
#include "core/cohort/rlx-outer-engine.h"
#include "core/cohort/rlx-sync-policy.h"

G_BEGIN_DECLS

typedef struct _RlxSyncState RlxSyncState;

/* @request: what --sync asked (NULL: step); @outer_lr, @outer_momentum as
 * rlx_outer_check_settings accepts them. */
RlxSyncState *rlx_sync_state_new  (const RlxSyncRequest *request, double outer_lr,
                                   double outer_momentum);
void          rlx_sync_state_free (RlxSyncState *self);

/* What this node asked for (auto included). */
const RlxSyncRequest *rlx_sync_state_request (RlxSyncState *self);
/* The mode in force: RLX_SYNC_STEP or RLX_SYNC_OUTER (never auto); as the
 * leader chose it, or as the last frame followed announced it. */
RlxSyncMode   rlx_sync_state_mode   (RlxSyncState *self);
guint         rlx_sync_state_h      (RlxSyncState *self);   /* 0 in the step mode */
const char   *rlx_sync_state_reason (RlxSyncState *self);
/* The outer settings of a round in the mode in force (h = 0: the step
 * mode), with @inner_lr as the inner SGD's rate. */
void          rlx_sync_state_settings (RlxSyncState *self, double inner_lr,
                                       RlxOuterSettings *out);

/* (Re)choose, as the leader: a fixed request stays what it is; auto picks
 * with rlx_sync_choose (@inputs NULL: nothing measured, step). TRUE when the
 * mode or H changed, or a provisional choice (rlx-sync-policy.h) was made
 * again from measurements (the caller reports rlx_sync_state_event). */
gboolean      rlx_sync_state_rechoose (RlxSyncState *self, const RlxSyncInputs *inputs);

/* The leader's step frame: @round is the settings of the round being
 * assigned (h, olr, omom), @commit_h the H of the round being committed (0:
 * a step-mode commit, or none). */
void          rlx_sync_state_announce (const RlxOuterSettings *round, guint commit_h,
                                       RlxMsgStep *step);
/* A member follows a frame: the settings of its assignment and of its
 * commit (h = 0: step) into @round and @commit (either NULL). TRUE when the
 * mode in force, or an outer round's inner rate, changed (report
 * rlx_sync_state_event). */
gboolean      rlx_sync_state_follow   (RlxSyncState *self, const RlxMsgStep *step,
                                       RlxOuterSettings *round, RlxOuterSettings *commit);

/* The leader assigns a round at @round's settings: TRUE when it is an outer
 * round whose inner rate differs from the last one's (the ranks of a round
 * set it: rlx_outer_inner_lr; report rlx_sync_state_event). */
gboolean      rlx_sync_state_note_inner_lr (RlxSyncState *self, const RlxOuterSettings *round);

/* The "sync" event: mode, h, requested, outer_lr, outer_momentum, inner_lr
 * (outer), reason. */
RlxEvent     *rlx_sync_state_event    (RlxSyncState *self);

/* The outer hash of commit @step (θ and m), and whether @step was an outer
 * round; the last 64 are kept. */
void          rlx_sync_state_note_commit (RlxSyncState *self, guint64 step, guint h,
                                          guint64 outer_hash);
gboolean      rlx_sync_state_commit_info (RlxSyncState *self, guint64 step, guint *h,
                                          guint64 *outer_hash);

G_END_DECLS
