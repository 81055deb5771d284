/* rlx-dataset.h — training data every rank agrees on without moving it
 *
 * A dataset is 28×28 u8 images with u8 labels, split into train and test.
 * The model input is pixel / 255 in [0, 1].
 *   "synthetic":     60,000 train + 10,000 test samples; sample i is generated
 *                    from Philox4x32-10 with counter i (test samples continue
 *                    the counter at 60,000) keyed by the dataset seed.
 *                    Class-dependent patterns plus noise: learnable.
 *                    RLX_SYNTHETIC_TRAIN=N (1,000–10,000,000) makes the
 *                    train split N samples (the test split keeps its
 *                    10,000, its counters then start at N).
 *   "fashion-mnist": the IDX .gz files of Debian's dataset-fashion-mnist.
 * A dataset is immutable once opened and may be read from any thread.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef enum {
  RLX_SPLIT_TRAIN,
  RLX_SPLIT_TEST,
} RlxSplit;

#define RLX_DATASET_ERROR (rlx_dataset_error_quark ())
GQuark rlx_dataset_error_quark (void);
typedef enum {
  RLX_DATASET_ERROR_UNKNOWN,    /* unknown dataset slug */
  RLX_DATASET_ERROR_MISSING,    /* file not found: install dataset-fashion-mnist */
  RLX_DATASET_ERROR_CORRUPT,    /* truncated, bad gzip, wrong magic or dimensions */
} RlxDatasetError;

typedef struct _RlxDataset RlxDataset;

/* @slug: "synthetic" or "fashion-mnist". @seed keys the synthetic generator
 * (ignored for fashion-mnist). */
RlxDataset  *rlx_dataset_open      (const char *slug, guint64 seed, GError **error);
/* fashion-mnist from another directory (tests use this for broken files). */
RlxDataset  *rlx_dataset_open_fashion_mnist (const char *dir, GError **error);
RlxDataset  *rlx_dataset_ref       (RlxDataset *self);
void         rlx_dataset_unref     (RlxDataset *self);
const char  *rlx_dataset_slug      (const RlxDataset *self);
guint        rlx_dataset_size      (const RlxDataset *self, RlxSplit split);
/* [size][784] row-major u8 pixels, and [size] labels in 0..9. */
const guint8 *rlx_dataset_images   (const RlxDataset *self, RlxSplit split);
const guint8 *rlx_dataset_labels   (const RlxDataset *self, RlxSplit split);
/* x[k*784 + p] = image(indices[k])[p] / 255; labels[k] = label(indices[k]).
 * Indices must be < size. */
void         rlx_dataset_gather    (const RlxDataset *self, RlxSplit split,
                                    const guint32 *indices, guint n,
                                    float *x, guint8 *labels);

/* perm = the seeded permutation of 0..n-1 for @epoch (Fisher–Yates driven by
 * Philox keyed by @seed, counter (epoch, i)). */
void         rlx_dataset_permutation (guint n, guint64 seed, guint epoch, guint32 *perm);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxDataset, rlx_dataset_unref)

G_END_DECLS
