/* rlx-backend.h — where a rank computes its gradients, and why there
 *
 * Resolution walks the candidates best first — a hardware Vulkan device
 * (discrete > integrated > virtual), then the CPU — and keeps, for each one
 * passed over, a reason written for the person who asks "why is it only
 * computing on CPU?". An explicit request that cannot be met is refused with
 * its reason, never silently downgraded. A software Vulkan device (llvmpipe)
 * is used only when asked for by name ("vulkan:llvmpipe").
 *
 * Requests: "auto", "cpu", "vulkan" (best hardware device), "vulkan:N" (the
 * device numbered N by `rlx-rank devices`, i.e. in vkEnumeratePhysicalDevices
 * order), "vulkan:NAME" (the device whose name contains NAME,
 * case-insensitively; a software device too). NAME is never all digits (that
 * is an index): a device whose name is a number is "vulkan:name=NUMBER".
 *
 * Several GPUs on one host: a rank asking for auto or vulkan takes the best
 * device that no other rank on this host holds (an flock'ed file per device
 * under $XDG_RUNTIME_DIR/rlx-cluster/@gpus/, held while the rank runs) and,
 * when every one is held, shares the best and says so in the fallback text.
 * vulkan:N and vulkan:NAME take their device whether it is held or not.
 *
 * Threads: resolve anywhere; afterwards one thread at a time (the rank's
 * compute worker) calls rlx_backend_grads.
 */
#pragma once

#include <glib.h>
#include "core/vision/rlx-model.h"
#include "core/vision/rlx-dataset.h"
#include "core/wire/rlx-wire.h"

G_BEGIN_DECLS

#define RLX_BACKEND_ERROR (rlx_backend_error_quark ())
GQuark rlx_backend_error_quark (void);
typedef enum {
  RLX_BACKEND_ERROR_UNKNOWN,       /* request is not auto/cpu/vulkan[:NAME] */
  RLX_BACKEND_ERROR_UNAVAILABLE,   /* explicit request that cannot be met */
  RLX_BACKEND_ERROR_BATCH,         /* batch outside 1..max_batch */
  RLX_BACKEND_ERROR_DEVICE_LOST,   /* the GPU is gone: fatal for this rank */
  RLX_BACKEND_ERROR_OUT_OF_MEMORY,
  RLX_BACKEND_ERROR_FAILED,
  RLX_BACKEND_ERROR_NOT_FINITE,    /* the gradient holds NaN or ±Inf */
} RlxBackendError;

typedef struct _RlxBackend RlxBackend;

RlxBackend *rlx_backend_resolve  (const char *request, const RlxModel *model,
                                  RlxDataset *dataset, guint max_batch,
                                  GError **error);
void        rlx_backend_free     (RlxBackend *self);

/* "cpu" or "vulkan" */
const char *rlx_backend_name     (const RlxBackend *self);
/* What it runs on: "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)",
 * "CPU, OpenBLAS 0.3.21, 2 threads". */
const char *rlx_backend_device   (const RlxBackend *self);
/* Why faster candidates were passed over, "; "-joined; "" when none was. */
const char *rlx_backend_fallback (const RlxBackend *self);
guint       rlx_backend_max_batch (const RlxBackend *self);
const RlxModel *rlx_backend_model (const RlxBackend *self);
RlxDataset *rlx_backend_dataset  (const RlxBackend *self);

/* Mean loss and gradient over training samples @indices[0..n) of the
 * backend's dataset (train split) at @params. 1 <= n <= max_batch. */
gboolean    rlx_backend_grads    (RlxBackend *self, const float *params,
                                  const guint32 *indices, guint n,
                                  float *loss, float *grads, GError **error);

/* GPU timestamps of the last rlx_backend_grads, in µs: parameters and
 * indices in, forward + backward, gradient out. FALSE on the CPU backend
 * (or a device without timestamps). */
gboolean    rlx_backend_step_timings (const RlxBackend *self, double *upload_us,
                                      double *compute_us, double *download_us);

/* TRUE when another process (a rank on this host) holds device @i of
 * @devices (as rlx_vk_enumerate lists them): ranks asking for auto or vulkan
 * take a device nobody holds, and share the best when all are held. */
gboolean    rlx_backend_gpu_in_use (GPtrArray *devices, guint i);

/* Resolution as a pure decision (no device is opened), for tests and for
 * `rlx-rank devices`: the candidates for @request, best first, as indices
 * into @devices (RlxVkDeviceInfo *, as rlx_vk_enumerate lists them) or
 * RLX_BACKEND_CPU_CANDIDATE. @vulkan_error says why there is no device list
 * at all (no loader, no driver), else NULL. Why each device was passed over
 * is appended to @passed_over (char *, may be NULL). An explicit request that
 * cannot be met returns NULL with RLX_BACKEND_ERROR_UNAVAILABLE and the
 * reason; an unknown one RLX_BACKEND_ERROR_UNKNOWN. */
#define RLX_BACKEND_CPU_CANDIDATE G_MAXUINT
GArray     *rlx_backend_candidates (const char *request, const RlxModel *model,
                                    guint max_batch, GPtrArray *devices,
                                    const char *vulkan_error, GPtrArray *passed_over,
                                    GError **error);

/* ── resident parameters ───────────────────────────────────────────────
 *
 * In a cohort a backend keeps its own replica of the parameters between
 * steps (in device memory for vulkan), so a step moves only the update in
 * and the gradient out. Applying updates is bit-identical on every backend:
 * a CPU rank and a GPU rank that load the same parameters and apply the
 * same updates hold the same bits (so a mixed cohort keeps one hash).
 *
 * Worker thread only (like rlx_backend_grads). Until the first load,
 * read_params, apply_update and grads_wire fail with
 * RLX_BACKEND_ERROR_FAILED ("load them first"). A call that fails with an
 * argument error (wrong length, bad scale, bad batch) changes nothing.
 *
 * Where the replica lives: the CPU backend's is a host array. A vulkan
 * backend keeps it in device memory: apply_update uploads only the codes
 * (1, 2 or 4 bytes a parameter) and the device dequantises and subtracts
 * them at the start of the next grads_wire's submission; grads_wire computes
 * the scale, the codes and the new residual on the device and downloads only
 * the codes. The device's arithmetic reproduces core/wire's bit for bit
 * (gpu/shaders/wire.glsl says how); rlx_backend_resolve checks that on the
 * device with a few thousand awkward values at every precision, and where a
 * bit differs (or the device lacks shaderFloat64/shaderInt64) the replica
 * stays on the host, each step uploads it, and rlx_backend_fallback says
 * why. RLX_VK_RESIDENT=0 in the environment keeps it on the host too.
 * No call allocates a parameter-sized buffer after the first.
 */

/* Replace the replica (founding, join, snapshot, resync). */
gboolean    rlx_backend_load_params  (RlxBackend *self, const float *params,
                                      GError **error);
/* Copy the replica out (snapshot, checkpoint, verification); includes every
 * update applied so far. */
gboolean    rlx_backend_read_params  (RlxBackend *self, float *params,
                                      GError **error);
/* replica -= update, where update is exactly what rlx_wire_dequantize
 * (@codes, @n, @precision, @scale, ·) gives; one f32 subtraction per element.
 * @n must be the model's parameter count. @codes is copied. Codes that
 * decode to NaN or ±Inf are refused with RLX_BACKEND_ERROR_NOT_FINITE (the
 * replica untouched: a corrupt update must not poison it; a rank whose hash
 * then differs resyncs by snapshot). A GPU defers the work into the next
 * grads_wire's submission (an error then surfaces there or in read_params);
 * a second apply before that applies the first on its own. */
gboolean    rlx_backend_apply_update (RlxBackend *self, const void *codes, gsize n,
                                      RlxPrecision precision, double scale,
                                      GError **error);
/* Mean loss and gradient over training samples @indices[0..n) at the
 * replica, delivered ready for the wire at @precision: @out receives
 * n_params × rlx_precision_element_size (@precision) bytes of codes (for
 * f32, the floats themselves) and @scale_out the scale (1.0 for f32).
 * With @feedback the quantisation residual of this rank's gradient stream is
 * carried exactly as RlxWireFeedback does it (s = g + r; codes = quantise
 * (s); r' = s - dequantise (codes)); the codes are those rlx_wire_quantize
 * gives for s at rlx_wire_scale_for (s). The new residual r' is kept aside:
 * rlx_backend_accept_feedback makes it the one the next call carries (the
 * leader took this bucket); without it the next call carries r again (the
 * bucket was dropped as late or rejected, so its quantisation error was
 * never sent and must not be carried). Accepting every bucket gives
 * RlxWireFeedback's stream exactly. A gradient with
 * NaN or ±Inf — or, rarer, one whose s overflows f32 — fails with
 * RLX_BACKEND_ERROR_NOT_FINITE (never quantised; the message names the
 * tensor) and leaves the residual as it was. Without @feedback the residual
 * is neither used nor changed. */
gboolean    rlx_backend_grads_wire   (RlxBackend *self, const guint32 *indices, guint n,
                                      RlxPrecision precision, gboolean feedback,
                                      float *loss, void *out, double *scale_out,
                                      GError **error);
/* rlx_params_hash of the replica (after every apply so far). On vulkan the
 * first call copies the replica out; from then on each grads_wire brings a
 * copy along in its submission, so hashing right after a step costs the hash
 * alone (about 1 ms for mnist-mlp-xl), no GPU round trip. */
gboolean    rlx_backend_params_hash  (RlxBackend *self, guint64 *hash, GError **error);
/* The last grads_wire's bucket was taken: its new residual becomes the one
 * carried (nothing happens when there is none: no feedback, refused, or
 * already accepted). */
void        rlx_backend_accept_feedback (RlxBackend *self);
/* Forget the gradient residual (after a snapshot or a resync); a residual
 * waiting for acceptance is dropped too. */
void        rlx_backend_reset_feedback (RlxBackend *self);
/* TRUE when the replica lives in device memory (vulkan on a device that
 * reproduces the wire's arithmetic bit for bit, which is checked when the
 * backend is made); FALSE for the host replica (cpu, or vulkan with the
 * reason in rlx_backend_fallback). */
gboolean    rlx_backend_params_on_device (const RlxBackend *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxBackend, rlx_backend_free)

G_END_DECLS
