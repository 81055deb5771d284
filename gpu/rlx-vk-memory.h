/* rlx-vk-memory.h — the device buffers a trainer allocates, by model and
 * batch: what rlx_vk_plan_memory (rlx-vk-private.h) adds up for
 * rlx_vk_device_check before any trainer exists, and what
 * rlx_vk_trainer_new then allocates, from the same sizes
 *
 * Private to gpu/. Threads: pure functions of their arguments (and of
 * RLX_VK_CNN); any thread.
 */
#pragma once

#include <glib.h>
#include "core/vision/rlx-model.h"

G_BEGIN_DECLS

/* The activation and scratch buffers (RlxVkTrainer.bufs). */
enum {
  B_X, B_H1, B_H2, B_LOGITS, B_DLOGITS, B_LOSSES, B_DH1, B_DH2,
  B_A1, B_P1, B_COL1, B_COL2, B_A2, B_P2, B_DP2, B_DZ2, B_DZ1,
  B_PART, B_RPART, B_HALF, N_BUFS
};
#define PART_FLOATS   (8u * 1024u * 1024u)
#define RPART_FLOATS  (2u * 1024u * 1024u)

/* What each buffer is called in an error or the debug log. */
extern const char *const rlx_vkt_buf_names[N_BUFS];

/* Widths of the dense layers; returns the number of layers. */
guint rlx_vkt_dense_widths (const RlxModel *model, guint w[5]);
/* Floats per buffer at batch @n (0: not made); @direct: mnist-cnn on the
 * direct path. */
void  rlx_vkt_buffer_floats (const RlxModel *model, guint n, gboolean direct,
                             guint64 sizes[N_BUFS]);

G_END_DECLS
