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

G_BEGIN_DECLS

typedef struct {
  float  *params;         /* n_params floats, owned by the caller */
  guint64 step, hash, seed;
  guint   epoch, pos;
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
/* Save @replica's state (learning rate @lr goes into the metadata). */
void             rlx_checkpointer_save  (RlxCheckpointer *self, RlxReplica *replica, double lr);
/* A save is being made or waits to be. */
gboolean         rlx_checkpointer_busy  (RlxCheckpointer *self);
/* Step of the last save that landed (0: none yet). */
guint64          rlx_checkpointer_get_saved_step (RlxCheckpointer *self);

G_END_DECLS
