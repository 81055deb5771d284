/* rlx-safetensors.h — parameters as a .safetensors file, and back
 *
 * The format PyTorch's `safetensors` loader reads: an 8-byte little-endian
 * header length, a JSON header (padded with spaces so the data starts on an
 * 8-byte boundary) mapping each tensor name to {dtype, shape, data_offsets},
 * an optional "__metadata__" object of string → string, then the raw
 * little-endian data. Tensor names and shapes are those of RlxModel
 * ("1.weight" [128, 784], …), dtype F32, so the file loads straight into the
 * PyTorch model of shared/bench/torch_ref.py with load_state_dict.
 *
 * The cohort's checkpoint *is* such a file (step, dataset position and hash
 * ride in __metadata__), so a checkpoint is also an export.
 *
 * Writing is atomic and durable: a temporary file beside the target, fsync,
 * rename over the target, fsync of the directory. A crash leaves either the
 * old file or the new one, never a torn one.
 *
 * Reading validates everything (lengths, JSON, names, dtypes, shapes, offsets)
 * and fails with a GError: a broken or hostile file never crashes the process
 * nor allocates more than the model's own size.
 */
#pragma once

#include <gio/gio.h>
#include "core/vision/rlx-model.h"

G_BEGIN_DECLS

#define RLX_SAFETENSORS_ERROR (rlx_safetensors_error_quark ())
GQuark rlx_safetensors_error_quark (void);
typedef enum {
  RLX_SAFETENSORS_ERROR_NOT_FOUND,  /* no such file */
  RLX_SAFETENSORS_ERROR_IO,         /* read/write/fsync/rename failed */
  RLX_SAFETENSORS_ERROR_CORRUPT,    /* not a valid safetensors file */
  RLX_SAFETENSORS_ERROR_MISMATCH,   /* valid, but not this model's tensors */
} RlxSafetensorsError;

/* The file's bytes for @params (model->n_params floats) with optional
 * @metadata (string → string; may be NULL). */
GBytes  *rlx_safetensors_build (const RlxModel *model, const float *params,
                                GHashTable *metadata);

/* Atomically replace @path with rlx_safetensors_build()'s bytes. Blocking:
 * call it from a worker thread (see rlx_safetensors_write_async). */
gboolean rlx_safetensors_write (const char *path, const RlxModel *model,
                                const float *params, GHashTable *metadata,
                                GError **error);

/* The same in a thread of GTask's pool; @params is copied, @metadata is
 * referenced. */
void     rlx_safetensors_write_async  (const char *path, const RlxModel *model,
                                       const float *params, GHashTable *metadata,
                                       GCancellable *cancellable,
                                       GAsyncReadyCallback callback,
                                       gpointer user_data);
gboolean rlx_safetensors_write_finish (GAsyncResult *result, GError **error);

/* Parse @data as @model's parameters: a new model->n_params float vector,
 * and the metadata (string → string, never NULL on success) into
 * @metadata_out when it is not NULL. */
float   *rlx_safetensors_parse (const guint8 *data, gsize len,
                                const RlxModel *model,
                                GHashTable **metadata_out, GError **error);
float   *rlx_safetensors_read  (const char *path, const RlxModel *model,
                                GHashTable **metadata_out, GError **error);

/* Read only the metadata (to learn which model a file holds). */
GHashTable *rlx_safetensors_read_metadata (const char *path, GError **error);

G_END_DECLS
