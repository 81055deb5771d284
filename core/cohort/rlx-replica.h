/* rlx-replica.h — this node's copy of the cohort's state
 *
 * The step of the last applied commit, the hash of the parameters after it,
 * the loss it reported, where the next step's batch starts in the dataset
 * (epoch, position in the epoch's seeded permutation), and the hashes of
 * the last RLX_MSG_MAX_HASHES steps (to find where two histories part after
 * a split; a snapshot loaded keeps the steps where its history and ours
 * agree, so the history may have a gap before the loaded step).
 *
 * The parameters themselves live in the rank's backend (rlx-backend.h: in
 * device memory for a GPU rank), owned by the compute worker: a step never
 * moves them through the host. Whoever changes them there — the leader's
 * round finishing, a member applying a commit — tells the replica with
 * rlx_replica_commit. The operations below reach them through the worker's
 * queue (rlx_worker_queue), in order with the steps queued there: loading
 * parameters (founding, a snapshot, a checkpoint), reading them (a snapshot
 * to send, a checkpoint, an evaluation, the end of the run) and the test
 * switch that corrupts them. Each completes on the main context, where the
 * state changes before its callback runs; since the worker delivers its
 * results in the order it ran them, the state at a read's callback is the
 * state of what was read.
 *
 * rlx_replica_get_params is the host copy the last read made (NULL before
 * one): reading costs a pass over the parameters, so it happens only when
 * something needs them.
 *
 * Threads: the main context only (read functions aside, which run on the
 * worker thread).
 */
#pragma once

#include <glib-object.h>
#include "core/cohort/rlx-msg.h"
#include "core/rlx-worker.h"

G_BEGIN_DECLS

#define RLX_TYPE_REPLICA (rlx_replica_get_type ())
G_DECLARE_FINAL_TYPE (RlxReplica, rlx_replica, RLX, REPLICA, GObject)

/* On the main context, once the operation completed. @ok: it happened
 * (FALSE: a snapshot whose parameters do not hash to what it said, or the
 * backend failed — then the state is as it was). */
typedef void (*RlxReplicaDone) (RlxReplica *replica, gboolean ok, gpointer user_data);
/* On the worker thread, with the parameters (n floats) read-only. */
typedef void (*RlxReplicaReadFunc) (const float *params, gsize n, gpointer data);

/* The initial parameters for @seed, loaded into @worker's backend (queued
 * first). @worker is not owned: it must outlive the replica's operations
 * (free it first: its pending operations are then dropped). */
RlxReplica   *rlx_replica_new          (RlxWorker *worker, guint64 seed);

gsize         rlx_replica_get_n        (RlxReplica *self);
guint64       rlx_replica_get_step     (RlxReplica *self);
guint64       rlx_replica_get_hash     (RlxReplica *self);
double        rlx_replica_get_loss     (RlxReplica *self);
void          rlx_replica_set_loss     (RlxReplica *self, double loss);
guint64       rlx_replica_get_seed     (RlxReplica *self);
void          rlx_replica_set_seed     (RlxReplica *self, guint64 seed);
guint         rlx_replica_get_epoch    (RlxReplica *self);
guint         rlx_replica_get_pos      (RlxReplica *self);
guint         rlx_replica_get_n_train  (RlxReplica *self);
/* (@epoch, @pos) moved on by @count samples through the sample stream —
 * the epochs' permutations one after another — so into the next epoch at
 * an epoch's end, or over several (an outer round crosses epochs). */
void          rlx_replica_advance      (RlxReplica *self, guint *epoch, guint *pos, guint count);
/* A new array of the @count indices of the sample stream from position
 * @start of @epoch's permutation: a @start at or past the epoch's end, and
 * a slice that runs over it, continue in the next epochs' permutations (an
 * outer round's slot; docs/PROTOCOL.md, "Sync modes"). Every epoch is one
 * pass: the slices of consecutive rounds, laid end to end, visit each
 * sample once per epoch. NULL when the array cannot be allocated (a member
 * bounds @count first: rlx_split_slot_fits). */
guint32      *rlx_replica_indices      (RlxReplica *self, guint epoch, guint64 start, guint count);
/* The seeded permutation of @epoch (n_train indices): valid until the next
 * call (copy what you keep). The next epoch's is made ahead on a thread of
 * its own, so that the main loop does not make one at an epoch's start. */
const guint32 *rlx_replica_permutation (RlxReplica *self, guint epoch);

/* The host copy of the parameters from the last read (NULL before any),
 * and the step it holds. */
const float  *rlx_replica_get_params   (RlxReplica *self);
guint64       rlx_replica_get_params_step (RlxReplica *self);
/* A load, read or corruption is queued or running. */
gboolean      rlx_replica_busy         (RlxReplica *self);

/* The backend's parameters are now those of commit @step, hashing to
 * @hash; the next step's batch starts at (@epoch, @pos). */
void          rlx_replica_commit       (RlxReplica *self, guint64 step, guint64 hash,
                                        guint epoch, guint pos);
/* Replace the parameters with @params (f32, n floats; a reference on its
 * frame is taken) at @step, which must hash to @hash; the gradient
 * stream's and the update stream's quantisation residuals are forgotten
 * (rlx_backend_reset_feedback). */
void          rlx_replica_load         (RlxReplica *self, guint64 step, const RlxMsgArray *params,
                                        guint64 hash, guint epoch, guint pos,
                                        RlxReplicaDone done, gpointer user_data);
/* rlx_replica_load of snapshot @s's state, keeping the hash history: ours
 * up to step @keep_until (-1: none; where ours and the snapshot's agree:
 * rlx_replica_agrees_until), then the snapshot's hashes and sparse hashes,
 * then its step; the steps between are not known. */
void          rlx_replica_load_snapshot (RlxReplica *self, const RlxMsgSnapshot *s,
                                         gint64 keep_until, RlxReplicaDone done,
                                         gpointer user_data);
/* The last step of @s's history at which this one agrees with it: of its
 * hashes (rlx_replica_common_step), or its own step when this history has
 * @s's hash there (the dense window may end before it: it ends at the step
 * a join said, and a member that caught up meanwhile is past that); -1:
 * none. In *@sparse_common the newest of its sparse steps at which it does
 * (-1: none). */
gint64        rlx_replica_agrees_until  (RlxReplica *self, const RlxMsgSnapshot *s,
                                         gint64 *sparse_common);
/* Replace the parameters with @params (taken), at @step; hashed by the
 * backend; the residuals are forgotten as by rlx_replica_load. */
void          rlx_replica_load_floats  (RlxReplica *self, guint64 step, float *params,
                                        guint epoch, guint pos,
                                        RlxReplicaDone done, gpointer user_data);
/* Read the parameters (after everything queued before) into the host copy,
 * run @read (nullable) on the worker thread with them, then @done.
 * @free_data frees @data after @done, or when the read is dropped. */
void          rlx_replica_read         (RlxReplica *self, RlxReplicaReadFunc read, gpointer data,
                                        GDestroyNotify free_data, RlxReplicaDone done,
                                        gpointer user_data);
/* No callback of an operation asked before this runs, and none of them
 * changes the state (the backend may still do them: a load that follows
 * replaces their effect). */
void          rlx_replica_cancel       (RlxReplica *self);

/* The hash this replica had after @step, if it still remembers it. */
gboolean      rlx_replica_hash_at      (RlxReplica *self, guint64 step, guint64 *hash);
/* The oldest step whose hash this replica remembers (the history starts
 * anew at a checkpoint loaded, goes on through a snapshot loaded with
 * rlx_replica_load_snapshot where the two agree, and keeps the last 65536;
 * it may have gaps). */
guint64       rlx_replica_history_start (RlxReplica *self);
/* The last hashes (oldest first; the one of the current step last); *from:
 * the step of the first. */
GArray       *rlx_replica_history      (RlxReplica *self, guint64 *from);
/* At most @max hashes ending at step @until (or the newest, if older),
 * oldest first; *from: the step of the first. The replica remembers the
 * last 65536 steps. */
GArray       *rlx_replica_history_until (RlxReplica *self, guint64 until, guint max,
                                         guint64 *from);
/* The last step at which this history and @hashes (of steps @from…) agree,
 * or -1 if they share none of the steps both remember. */
gint64        rlx_replica_common_step  (RlxReplica *self, guint64 from, GArray *hashes);

/* Test switch: flip the lowest bit of parameter 0 (after pending
 * operations) and hash again, so this replica's hash differs from the
 * cohort's at its current step. */
void          rlx_replica_corrupt      (RlxReplica *self, RlxReplicaDone done, gpointer user_data);

G_END_DECLS
