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
#include "gpu/rlx-vk.h"

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
/* The same at @compute (rlx-vk.h's RlxVkCompute: rlx_backend_resolve is
 * f32). Only a Vulkan device with what @compute needs can meet f16 (the
 * CPU computes in f32 only): otherwise the request is refused with each
 * device's reason (rlx_vk_device_compute_check), never moved to f32. */
RlxBackend *rlx_backend_resolve_compute (const char *request, RlxVkCompute compute,
                                         const RlxModel *model, RlxDataset *dataset,
                                         guint max_batch, GError **error);
/* What the backend computes at. */
RlxVkCompute rlx_backend_compute_mode (const RlxBackend *self);
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
GArray     *rlx_backend_candidates (const char *request, RlxVkCompute compute,
                                    const RlxModel *model,
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
 * read_params, apply_update, grads_wire and the round calls fail with
 * RLX_BACKEND_ERROR_FAILED ("load them first"). A call that fails with an
 * argument error (wrong length, bad scale, bad batch) changes nothing.
 *
 * Where the replica lives: the CPU backend's is a host array. A vulkan
 * backend keeps it in device memory: an update's codes (1, 2 or 4 bytes a
 * parameter) are written into memory the GPU reads and applied at the start
 * of the next submission; a gradient's scale, codes and new residual are
 * computed on the device and only the codes come back, read where the GPU
 * put them; the replica's hash is computed on the device. The device's
 * arithmetic reproduces core/wire's (and rlx_params_hash's) bit for bit
 * (gpu/shaders/wire.glsl says how); rlx_backend_resolve checks that on the
 * device with a few thousand awkward values at every precision, and where a
 * bit differs (or the device lacks shaderFloat64/shaderInt64) the replica
 * stays on the host, each step uploads it, and rlx_backend_fallback says
 * why. RLX_VK_RESIDENT=0 in the environment keeps it on the host too.
 * No call allocates a parameter-sized buffer after the first of its kind.
 *
 * Pointers a call returns (update_begin's, grads_wire_map's, round_finish's
 * codes) are valid until the next call on the backend; the caller reads or
 * writes them in place (zero-copy) — for vulkan they are the memory the
 * GPU reads or wrote.
 */

/* Replace the replica (founding, join, snapshot, resync). A round in
 * progress is dropped. */
gboolean    rlx_backend_load_params  (RlxBackend *self, const float *params,
                                      GError **error);
/* Copy the replica out (snapshot, checkpoint, verification); includes every
 * update applied so far. */
gboolean    rlx_backend_read_params  (RlxBackend *self, float *params,
                                      GError **error);
/* replica -= update, where update is exactly what rlx_wire_dequantize
 * (@codes, @n, @precision, @scale, ·) gives; one f32 subtraction per element.
 * @n must be the model's parameter count. @codes is copied (once, checked
 * on the way). Codes that decode to NaN or ±Inf are refused with
 * RLX_BACKEND_ERROR_NOT_FINITE (the replica untouched: a corrupt update must
 * not poison it; a rank whose hash then differs resyncs by snapshot). A GPU
 * defers the work into the next submission (an error then surfaces there). */
gboolean    rlx_backend_apply_update (RlxBackend *self, const void *codes, gsize n,
                                      RlxPrecision precision, double scale,
                                      GError **error);
/* The same without the copy: update_begin returns where to write the n_params
 * codes at @precision (for vulkan, the memory the GPU reads), valid until
 * update_commit, which applies them as apply_update does; call nothing else
 * on the backend in between. The CPU checks the codes in update_commit (and
 * refuses them there); vulkan checks them on the device, and a refused
 * update (replica untouched) makes the next call that runs on the device —
 * grads_wire(_map), round_own, round_finish, read_params, params_hash —
 * fail with RLX_BACKEND_ERROR_NOT_FINITE. */
void       *rlx_backend_update_begin  (RlxBackend *self, RlxPrecision precision,
                                       GError **error);
gboolean    rlx_backend_update_commit (RlxBackend *self, RlxPrecision precision,
                                       double scale, GError **error);
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
/* grads_wire without the copy: returns the codes where they are (for vulkan,
 * where the GPU put them), valid until the next call; NULL on error. */
const void *rlx_backend_grads_wire_map (RlxBackend *self, const guint32 *indices, guint n,
                                        RlxPrecision precision, gboolean feedback,
                                        float *loss, double *scale_out, GError **error);
/* rlx_params_hash of the replica (after every apply so far). On vulkan it
 * is computed on the device (8 bytes come back, never the parameters); once
 * asked for, every later step hashes the replica in its own submission, and
 * a round's finish always does, so hashing right after a step costs nothing. */
gboolean    rlx_backend_params_hash  (RlxBackend *self, guint64 *hash, GError **error);
/* The last grads_wire's bucket was taken: its new residual becomes the one
 * carried (nothing happens when there is none: no feedback, refused, or
 * already accepted). */
void        rlx_backend_accept_feedback (RlxBackend *self);
/* Forget the quantisation residuals — the gradient stream's (a residual
 * waiting for acceptance too) and the leader's update stream's — after a
 * snapshot or a resync. */
void        rlx_backend_reset_feedback (RlxBackend *self);
/* TRUE when the replica lives in device memory (vulkan on a device that
 * reproduces the wire's arithmetic bit for bit, which is checked when the
 * backend is made); FALSE for the host replica (cpu, or vulkan with the
 * reason in rlx_backend_fallback). */
gboolean    rlx_backend_params_on_device (const RlxBackend *self);
/* TRUE for vulkan on a hardware device (not llvmpipe or another software
 * rasterizer, whose "device" time is the host's own). */
gboolean    rlx_backend_is_hardware_gpu (const RlxBackend *self);

/* ── the leader's round ──────────────────────────────────────────────────
 *
 * A leader sums its round on its backend: on a GPU its own gradient never
 * leaves the device, members' buckets go up as received, and the update is
 * made, applied and hashed there, one submission, no host round trip.
 *
 * A round is open from its first contribution until round_finish or
 * round_cancel. Contributions x_1 … x_K, weights w_k (samples), are summed
 * in the order they were added — deterministic, no atomics:
 *   x  = the own gradient (f32, exact), or a member's bucket as
 *        rlx_wire_dequantize decodes it;
 *   K = 1: u = (float) lr · x_1
 *   K ≥ 2: S = w_1·x_1 + w_2·x_2, then S += w_k·x_k (every product and sum
 *          rounded to f32); u = (float) (lr / Σ w_k) · S
 *   u += r with @feedback (not at f32, where r is left alone): r is the
 *          update stream's residual, zero after a reset;
 *   codes = u at @precision with the dynamic scale (rlx_wire_scale_for);
 *   r = u − decode (codes) (0 where not finite);  replica −= decode (codes).
 * That is how the engine's CPU round computes it (core/cohort/rlx-round.c), so a cpu
 * backend and a vulkan one given the same contributions give the same bits.
 * Every rank applies the codes with apply_update, which subtracts exactly
 * decode (codes): all replicas stay bit-identical.
 *
 * Order of calls for a leader, one round (see also round_finish's @next):
 *   round_own (indices of its slice)          its own gradient, if it has a slice
 *   round_add (bucket) for each member's      as they arrive, in any order
 *   round_finish (lr, precision, …)           → codes to broadcast, scale, hash
 * Worker thread only, like the rest; none of these blocks on the network.
 */

/* The own gradient over training samples @indices[0..n) at the replica
 * joins the round (weight n). *@loss: its mean loss. A gradient with NaN or
 * ±Inf fails with RLX_BACKEND_ERROR_NOT_FINITE and does not join (the round
 * goes on with the members). Once per round. */
gboolean    rlx_backend_round_own    (RlxBackend *self, const guint32 *indices, guint n,
                                      float *loss, GError **error);
/* A member's bucket — @n codes at @precision with @scale, as its frame
 * carries them (copied once, checked on the way) — joins the round with
 * @weight (its sample count, ≥ 1). A bucket of the wrong length or with a
 * bad scale fails with RLX_BACKEND_ERROR_FAILED, one holding NaN or ±Inf
 * with RLX_BACKEND_ERROR_NOT_FINITE; either way the round is as it was. On
 * vulkan the bucket is summed by the GPU while the caller waits for more. */
gboolean    rlx_backend_round_add    (RlxBackend *self, const void *codes, gsize n,
                                      RlxPrecision precision, double scale, guint weight,
                                      GError **error);
/* Finishes the round (see above): *@codes_out (NULL: not wanted — on
 * vulkan not even downloaded) points at the update's n_params codes at
 * @precision, valid until the next call; *@scale_out its scale;
 * *@hash_out the replica's rlx_params_hash after the update. The replica
 * has then taken the update exactly as every rank's apply_update of these
 * codes does. A round with no contribution fails (RLX_BACKEND_ERROR_FAILED);
 * one whose u is not finite (finite buckets whose sum overflowed) fails
 * with RLX_BACKEND_ERROR_NOT_FINITE, replica and residual untouched. The
 * round is over either way.
 * @next_indices (NULL: unknown): the samples of this rank's next slice; on
 * vulkan its own gradient of the next round is then computed right behind
 * this round's update, on the same queue (the GPU never waits for the host
 * between rounds), and the next round_own with the same indices — no update
 * applied or parameters loaded in between — takes it without computing
 * again. The cpu backend ignores it. */
gboolean    rlx_backend_round_finish (RlxBackend *self, double lr, RlxPrecision precision,
                                      gboolean feedback, const guint32 *next_indices,
                                      guint next_n, const void **codes_out, double *scale_out,
                                      guint64 *hash_out, GError **error);
/* round_finish with the update's codes written into @codes (n_params ×
 * rlx_precision_element_size (@precision) bytes, e.g. where the step frame
 * carries them): the cpu backend's finish writes them there itself, a
 * vulkan one copies them out of the memory the GPU wrote. */
gboolean    rlx_backend_round_finish_into (RlxBackend *self, double lr, RlxPrecision precision,
                                           gboolean feedback, const guint32 *next_indices,
                                           guint next_n, void *codes, double *scale_out,
                                           guint64 *hash_out, GError **error);
/* The leader's next round is expected to be its own gradient alone, finished
 * with the same lr, precision and feedback, whose slice the next
 * round_finish names (@alone): a vulkan backend then makes and applies that
 * round's update on the device right behind its own gradient, and undoes it
 * if the next calls turn out otherwise (a member's bucket, other samples, a
 * cancel, a snapshot read): the results are those of the plain calls. The
 * cpu backend ignores it. */
void        rlx_backend_round_expect_alone (RlxBackend *self, gboolean alone);
/* With round_expect_alone: the slice of the round after the one the next
 * round_finish names (@after, @n samples; NULL: not known), expected to be
 * the own gradient alone too. A vulkan backend then queues that round's
 * gradient as well, so that the device always has the next gradient to
 * compute whatever the host is doing; a round that turns out otherwise
 * makes its own gradient again (the same bits). Samples that would not
 * pass as a batch are ignored. The cpu backend ignores it. */
void        rlx_backend_round_after  (RlxBackend *self, const guint32 *after, guint n);
/* Rounds whose update was made ahead (round_expect_alone) and claimed,
 * since the backend was made (0 on the cpu). */
guint64     rlx_backend_updates_ahead (RlxBackend *self);
/* Drops the round in progress (the leader stepped down, the round was
 * abandoned); nothing to undo. */
void        rlx_backend_round_cancel (RlxBackend *self);
/* Contributions in the round in progress (0: none open). */
guint       rlx_backend_round_size   (RlxBackend *self);

/* ── statistics ──────────────────────────────────────────────────────── */

/* Parameter-sized bytes the backend (and its trainer) copied on the host
 * since it was made: updates and buckets in, codes out, loads and reads —
 * for benchmarks and for tests that a call moved no more than it should. */
guint64 rlx_backend_host_bytes (RlxBackend *self);
/* Own gradients a round took from behind the last finish (computed while
 * the host handled that finish), since the backend was made. */
guint64 rlx_backend_ahead_taken (RlxBackend *self);
/* On a GPU, the device's own time (timestamps) for the last round's finish
 * (its hash included) and the last gradient: FALSE (both 0) elsewhere. */
gboolean rlx_backend_device_round_us (RlxBackend *self, double *finish_us, double *grad_us);
/* Steps the check mode (RLX_BACKEND_CHECK, rlx-backend-check.h) compared
 * with the CPU since the backend was made (0 without it). */
guint64 rlx_backend_checked_steps (RlxBackend *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxBackend, rlx_backend_free)

G_END_DECLS
