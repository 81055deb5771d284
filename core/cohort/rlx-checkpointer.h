/* rlx-checkpointer.h — the cohort's checkpoint file on this host
 *
 * $XDG_DATA_HOME/rlx-cluster/COHORT/checkpoint.safetensors (or a folder
 * given by the caller): the parameters as a .safetensors file whose
 * metadata holds the step, dataset position, seed and hash, written
 * atomically (write, fsync, rename). rlx_checkpointer_load reads it back
 * for a node that founds the cohort (or offers it when the cohort is
 * formed: hello's "checkpoint" member says how new it is).
 *
 * Saving copies the parameters out of the replica on a worker thread (after
 * the replica's pending operations) and writes the file on another; one
 * save at a time — asking again while one is being written saves the
 * newest state once that one has landed.
 *
 * Threads: the main context only.
 */
#pragma once

#include <gio/gio.h>
#include "core/cohort/rlx-replica.h"
#include "core/cohort/rlx-compute-queue.h"

G_BEGIN_DECLS

typedef struct {
  float  *params;         /* n_params floats, owned by the caller */
  float  *momentum;       /* the outer momentum (n_params floats, owned by the caller), or
                           * NULL: the checkpoint has no outer state */
  guint64 step, hash, seed;
  guint   epoch, pos;
  guint64 lineage;        /* the lineage of its state (RlxMsgLineage.lin; 0: not recorded) */
  gint64  written_us;     /* the file's modification time (real time, µs), as loaded */
} RlxCheckpoint;

#define RLX_TYPE_CHECKPOINTER (rlx_checkpointer_get_type ())
G_DECLARE_FINAL_TYPE (RlxCheckpointer, rlx_checkpointer, RLX, CHECKPOINTER, GObject)

/* Signals:
 *   ::written (guint64 step, const char *path)
 *   ::failed  (const char *message)       a save that did not land */

/* Creates @dir (0700) if needed; NULL with RLX_COORDINATOR_ERROR_CHECKPOINT
 * naming the folder when it cannot be. */
RlxCheckpointer *rlx_checkpointer_new   (const char *dir, const char *cohort,
                                         const RlxModel *model, RlxDataset *dataset,
                                         GError **error);
const char      *rlx_checkpointer_get_path (RlxCheckpointer *self);
/* Read the checkpoint. TRUE with @out->params NULL when there is none; FALSE
 * with an error saying what is wrong and what to do when it is unusable
 * (another model or dataset, broken, inconsistent metadata). */
gboolean         rlx_checkpointer_load  (RlxCheckpointer *self, RlxCheckpoint *out,
                                         GError **error);
/* The outer mode's state beside the parameters: when the compute worker of
 * @queue holds an outer momentum at the moment the parameters are copied
 * out, it is saved too — the outer state (rlx-outer.h's serialised form,
 * with @settings' h, lr and momentum and @precision) in checkpoint.outer
 * next to the file, written before it; loaded only when its θ hashes as
 * the checkpoint's parameters do (else, or without one, no momentum). Call
 * before a save, with the settings in force. */
void             rlx_checkpointer_set_outer (RlxCheckpointer *self, RlxComputeQueue *queue,
                                             const RlxOuterSettings *settings,
                                             RlxPrecision precision);
/* The lineage (RlxMsgLineage.lin) the next saves record, so that a resume
 * continues it (docs/PROTOCOL.md, "Lineages"). */
void             rlx_checkpointer_set_lineage (RlxCheckpointer *self, guint64 lineage);
/* Save @replica's state (learning rate @lr goes into the metadata). */
void             rlx_checkpointer_save  (RlxCheckpointer *self, RlxReplica *replica, double lr);
/* A save is being made or waits to be. */
gboolean         rlx_checkpointer_busy  (RlxCheckpointer *self);
/* Step of the last save that landed (0: none yet). */
guint64          rlx_checkpointer_get_saved_step (RlxCheckpointer *self);

G_END_DECLS
