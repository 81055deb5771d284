/* rlx-backend-check.h — the check mode: every gradient against the CPU
 *
 * RLX_BACKEND_CHECK=1 (any value but 0) in the environment: every gradient a
 * vulkan backend computes (rlx_backend_grads, and each step of a host
 * replica on it) is computed again by the CPU reference and compared, tensor
 * by tensor: max |Δ| ≤ 1e-4 · max |g| + 1e-6, the loss within 1e-5 of the
 * reference's (relative). A mismatch is logged (g_warning) with the model,
 * the batch, the device and the tensor's name. Slow: for debugging a device
 * or a driver.
 *
 * At --compute f16 (rlx_backend_check_set_compute) the reference is the
 * CPU computing as f16 does (rlx_backend_host_emulate_f16: the same GEMMs'
 * operands rounded to f16 with the same loss scale; products exact, sums
 * f32), so what is left is the order of the sums and the tensor cores'
 * accumulation, ~√K·2^-24 of Σ|a||b|, and now and then a ReLU that
 * flips between device and emulation (their f32 sums differ in the last
 * bits, which moves an f16 rounding of the next layer's input by one f16
 * step, which moves a pre-activation across 0): one sample's term of a
 * weight gradient (0.01·max |g| at mnist-mlp-xl 256 on the H200). Per
 * tensor: the 99th percentile of |Δ| ≤ RLX_CHECK_F16_GRAD · max |g| + 1e-6
 * (the bulk), and max |Δ| ≤ (RLX_CHECK_F16_GRAD + e) · max |g| + 1e-6, e
 * the emulation's own distance from f32 (max |Δ| / max |g|, worst tensor):
 * the device no further from the emulation than f16 itself is from f32;
 * the loss within RLX_CHECK_F16_LOSS (relative). Against the plain f32
 * reference no such bound holds: an f16 rounding of a forward operand
 * flips a ReLU now and then, and each flip moves one sample's term of a
 * weight gradient, about max |g| / √n (0.08 · max |g| at batch 64) — on the
 * CPU's own emulation as much as on the device. Both distances from f32
 * (the device's, the emulation's) are kept for the report
 * (rlx_backend_check_f32_distance). mnist-cnn: its default (direct)
 * convolutions have no GEMM that qualifies, so the emulation is f32.
 *
 * Threads: an RlxBackendCheck belongs to its backend (the rank's compute
 * worker); rlx_backend_check_enabled may be called anywhere.
 */
#pragma once

#include <glib.h>
#include "core/vision/rlx-model.h"
#include "core/vision/rlx-dataset.h"

G_BEGIN_DECLS

typedef struct _RlxBackendCheck RlxBackendCheck;

/* RLX_BACKEND_CHECK asks for the check */
gboolean         rlx_backend_check_enabled (void);
/* A check of @device's gradients of @model over @dataset's training
 * samples, batches up to @max_batch. */
RlxBackendCheck *rlx_backend_check_new  (const RlxModel *model, RlxDataset *dataset,
                                         guint max_batch, const char *device);
void             rlx_backend_check_free (RlxBackendCheck *self);
/* Compares @loss and @grads, computed at @params over samples
 * @indices[0..n) (1 ≤ n ≤ max_batch), with the CPU reference: the number of
 * mismatches (the loss, each tensor), each logged. */
guint            rlx_backend_check_step (RlxBackendCheck *self, const float *params,
                                         const guint32 *indices, guint n, float loss,
                                         const float *grads);
#define RLX_CHECK_F16_GRAD 1e-3
#define RLX_CHECK_F16_LOSS 1e-5

/* The bounds for gradients computed at @compute (RlxVkCompute; f32: as made). */
void             rlx_backend_check_set_compute (RlxBackendCheck *self, guint compute);
/* Like rlx_backend_check_step, and the worst ratios seen: max |Δ| / max |g|
 * over the tensors, and |Δloss| / |loss| (either may be NULL). */
guint            rlx_backend_check_step_ratio (RlxBackendCheck *self, const float *params,
                                               const guint32 *indices, guint n, float loss,
                                               const float *grads, double *grad_ratio,
                                               double *loss_ratio);
/* At f16, the last step's max |Δ| / max |g| (worst tensor) against the f32
 * reference: the device's gradient, and the f16 emulation's (NAN before a
 * step, or at f32). */
void             rlx_backend_check_f32_distance (RlxBackendCheck *self, double *device,
                                                 double *emulation);
/* Steps compared so far. */
guint64          rlx_backend_check_count (RlxBackendCheck *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxBackendCheck, rlx_backend_check_free)

G_END_DECLS
