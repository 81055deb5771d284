/* rlx-leader.h — the leader's side of the cohort protocol
 *
 * While this node leads, the leader runs the rounds: it assigns each
 * member a slice of the global batch (in proportion to measured speed),
 * collects the gradients (its own through the compute queue, the members'
 * from their grad frames, judged against their acknowledged state), has the
 * backend make, quantise and apply the update (the finish), publishes it in
 * the next step frame, and reports a step committed once every member has
 * acknowledged it. It admits members (a snapshot each) and adopts the state
 * of a member that is ahead of it after a failover.
 *
 * It works over an RlxCohortContext (rlx-cohort-context.h) and never calls
 * the follower's side or the coordinator's internals; the coordinator
 * routes to it what concerns the leader (grad, ack, join, a member's
 * snapshot, the leader's compute results, a member lost, a snapshot sent)
 * and tells it when this node takes over or steps down. It keeps its state
 * while this node does not lead (empty: rlx_leader_step_down).
 *
 * Threads: the coordinator's (the context's); the compute queue's results
 * reach it there.
 */
#pragma once

#include "core/cohort/rlx-cohort-context.h"

G_BEGIN_DECLS

typedef struct _RlxLeader RlxLeader;

/* A member whose link lives but that missed this many collect deadlines in
 * a row, over four heartbeat timeouts at least, leaves the group. */
#define RLX_SILENT_ROUNDS 8

RlxLeader *rlx_leader_new   (RlxCohortContext *ctx);
void       rlx_leader_free  (RlxLeader *self);

/* This node leads now (founding, or @failover/a merge it won), building on
 * @last_commit (a commit still being applied here counts). */
void       rlx_leader_take_over (RlxLeader *self, gboolean failover, guint64 last_commit);
/* This node leads no more: the round in flight and the commits not
 * reported are abandoned (none was acknowledged by everyone, so none is
 * lost). */
void       rlx_leader_step_down (RlxLeader *self);

/* @commit: the round just collected is finished by the backend, and the
 * frame that publishes it assigns the next. Else (re)start the step after
 * the last applied one, once nothing is still being made or applied. */
void       rlx_leader_publish   (RlxLeader *self, gboolean commit);
/* Drop the round in flight (the backend forgets its contributions; its
 * finish, if not started, does not run). */
void       rlx_leader_abandon_round (RlxLeader *self);

/* Messages, as the leader. */
void       rlx_leader_on_grad   (RlxLeader *self, RlxPeer *p, RlxMsg *m);
void       rlx_leader_on_ack    (RlxLeader *self, RlxPeer *p, RlxMsgAck *a);
/* Admit @p (or send it a fresh snapshot). */
void       rlx_leader_admit     (RlxLeader *self, RlxPeer *p, RlxMsgJoin *join);
/* A snapshot from a member that is ahead of us. @m is taken. */
void       rlx_leader_on_snapshot (RlxLeader *self, RlxPeer *p, RlxMsg *m);

/* The cohort's recent round time as this node leads it, or as it saw it
 * when it took over (µs; 0: not known). */
double     rlx_leader_round_us  (RlxLeader *self);
/* @id left the cohort (the leadership state knows already). */
void       rlx_leader_member_lost (RlxLeader *self, const char *id);
/* A leader operation's result (RlxComputeQueueCallbacks). */
void       rlx_leader_op_done   (RlxLeader *self, RlxLeaderOp *op, const GError *error);
/* A commit this node was applying as a member is in (rounds that waited
 * for it may start). */
void       rlx_leader_commit_applied (RlxLeader *self);
/* A snapshot went out (RlxSnapshotSentFunc; @event taken). */
void       rlx_leader_snapshot_sent (RlxLeader *self, const char *to, guint64 step, guint64 hash,
                                     RlxEvent *event);

G_END_DECLS
