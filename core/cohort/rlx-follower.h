/* rlx-follower.h — the member's side of the cohort protocol
 *
 * While this node follows a leader, the follower keeps its replica the
 * cohort's: it takes the leader's step frames (the commit of the last
 * round and this node's slice of the next), has the compute queue apply
 * the commit and compute the slice's gradient, acknowledges the commit and
 * sends the gradient, reports the step, and loads the leader's snapshot
 * when it is admitted (or asks for one when its state is not the cohort's
 * any more: a hash that differs, a commit missed, a frame out of
 * sequence). Frames that come before the snapshot they build on, or while
 * a commit is being applied, wait in its inbox (at most 16).
 *
 * It works over an RlxCohortContext (rlx-cohort-context.h) and never calls
 * the leader's side or the coordinator's internals: a role change goes
 * through the context's ops (transition, request_snapshot). The
 * coordinator routes to it every step frame, the leader's snapshot while
 * this node does not lead, and the compute queue's member results.
 *
 * Threads: the coordinator's (the context's); the compute queue's results
 * reach it there.
 */
#pragma once

#include "core/cohort/rlx-cohort-context.h"

G_BEGIN_DECLS

typedef struct _RlxFollower RlxFollower;

RlxFollower *rlx_follower_new  (RlxCohortContext *ctx);
void         rlx_follower_free (RlxFollower *self);

/* A step frame from @p, whatever this node's role: a leader of an older
 * term is told who leads, one of a newer term (or a more senior one of
 * ours) followed; @m's contents may be taken. */
void     rlx_follower_on_step     (RlxFollower *self, RlxPeer *p, RlxMsg *m);
/* A snapshot from @p while this node does not lead, already checked
 * against our term and size (@seed: its data order's seed, parsed). Only
 * the leader's own admits; @m's contents are taken then. */
void     rlx_follower_on_snapshot (RlxFollower *self, RlxPeer *p, RlxMsg *m, guint64 seed);
/* A member step's result (RlxComputeQueueCallbacks). */
void     rlx_follower_stepped     (RlxFollower *self, RlxMemberStep *ms, const GError *error);

/* Tell the leader where this node is (a member only: after a commit, a
 * snapshot, or when it starts following a new leader). */
void     rlx_follower_send_ack    (RlxFollower *self);
/* Drop the step frames kept (this node leaves the cohort's state). */
void     rlx_follower_forget_frames (RlxFollower *self);
/* The commit being applied here (0: none). */
guint64  rlx_follower_applying    (RlxFollower *self);

G_END_DECLS
