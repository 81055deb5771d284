/* rlx-replica.h — this node's copy of the cohort's state
 *
 * The parameters after the last applied commit, its step, their hash, the
 * loss it reported, where the next step's batch starts in the dataset
 * (epoch, position in the epoch's seeded permutation), and the hashes of
 * the last RLX_MSG_MAX_HASHES steps (to find where two histories part after
 * a split).
 *
 * Every operation on the parameters — applying an update and hashing the
 * result, loading a snapshot and checking its hash, reading them for a
 * snapshot, a checkpoint or an evaluation — runs on a worker thread, one at
 * a time and in the order asked (RlxSerial); the step and hash change when
 * an apply or load completes, on the main context, before its callback.
 * rlx_replica_get_params is only meaningful when rlx_replica_busy is FALSE.
 *
 * Threads: the main context only (the operations' thread functions aside).
 */
#pragma once

#include <glib-object.h>
#include "core/cohort/rlx-msg.h"
#include "core/vision/rlx-model.h"
#include "core/vision/rlx-dataset.h"

G_BEGIN_DECLS

#define RLX_TYPE_REPLICA (rlx_replica_get_type ())
G_DECLARE_FINAL_TYPE (RlxReplica, rlx_replica, RLX, REPLICA, GObject)

/* On the main context, once the operation completed. @ok: the apply or
 * load happened (FALSE: a snapshot whose parameters do not hash to what it
 * said). */
typedef void (*RlxReplicaDone) (RlxReplica *replica, gboolean ok, gpointer user_data);
/* On a worker thread, with the parameters (n floats) read-only. */
typedef void (*RlxReplicaReadFunc) (const float *params, gsize n, gpointer data);

RlxReplica   *rlx_replica_new          (const RlxModel *model, RlxDataset *dataset, guint64 seed);

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
/* (@epoch, @pos) moved on by @count samples (to the next epoch at its end). */
void          rlx_replica_advance      (RlxReplica *self, guint *epoch, guint *pos, guint count);
/* The seeded permutation of @epoch (n_train indices; cached). */
const guint32 *rlx_replica_permutation (RlxReplica *self, guint epoch);

/* The parameters (valid while not busy). */
const float  *rlx_replica_get_params   (RlxReplica *self);
gboolean      rlx_replica_busy         (RlxReplica *self);

/* Apply commit @step's update (a reference on its frame is taken); the
 * next step's batch then starts at (@epoch, @pos). */
void          rlx_replica_apply        (RlxReplica *self, guint64 step, const RlxMsgArray *update,
                                        guint epoch, guint pos,
                                        RlxReplicaDone done, gpointer user_data);
/* Replace the state with @params (f32, n floats; a reference on its frame
 * is taken) at @step, which must hash to @hash. */
void          rlx_replica_load         (RlxReplica *self, guint64 step, const RlxMsgArray *params,
                                        guint64 hash, guint epoch, guint pos,
                                        RlxReplicaDone done, gpointer user_data);
/* Replace the state with @params (taken), at @step; hashed on the thread. */
void          rlx_replica_load_floats  (RlxReplica *self, guint64 step, float *params,
                                        guint epoch, guint pos,
                                        RlxReplicaDone done, gpointer user_data);
/* Run @read on a worker thread with the parameters as they are once every
 * operation asked before has completed; then @done (with ok TRUE). */
void          rlx_replica_read         (RlxReplica *self, RlxReplicaReadFunc read, gpointer data,
                                        GDestroyNotify free_data, RlxReplicaDone done,
                                        gpointer user_data);
/* Forget operations not started yet; no callback of any operation asked
 * before this runs. */
void          rlx_replica_cancel       (RlxReplica *self);

/* The hash this replica had after @step, if it still remembers it. */
gboolean      rlx_replica_hash_at      (RlxReplica *self, guint64 step, guint64 *hash);
/* The last hashes (oldest first; the one of the current step last); *from:
 * the step of the first. */
GArray       *rlx_replica_history      (RlxReplica *self, guint64 *from);
/* The last step at which this history and @hashes (of steps @from…) agree,
 * or -1 if they share none of the steps both remember. */
gint64        rlx_replica_common_step  (RlxReplica *self, guint64 from, GArray *hashes);

/* Test switch: flip the lowest bit of parameter 0 (after pending
 * operations) and hash again, so this replica's hash differs from the
 * cohort's at its current step. */
void          rlx_replica_corrupt      (RlxReplica *self, RlxReplicaDone done, gpointer user_data);

G_END_DECLS
