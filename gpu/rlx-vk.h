/* rlx-vk.h — the Vulkan compute backend: devices and training steps
 *
 * Enumeration records every physical device with what the shaders need from
 * it (a compute queue, shared memory, push constants, workgroup size and
 * count, storage-buffer range, memory); rlx_vk_device_check says, for one
 * model and batch, whether a device can train it and if not why, in words
 * for the person reading the roster. Which device a rank uses is decided in
 * core/rlx-backend.c; this module only describes and drives devices.
 *
 * A trainer owns one VkDevice. The training set (u8 images and labels) is
 * uploaded once; a step moves only the sample indices and parameters in and
 * the gradient and loss out — or, with the parameters resident (below),
 * only the indices and an update's codes in and the gradient's codes out. One command buffer per batch size, recorded on
 * first use and replayed, does the whole step (upload, forward, loss,
 * backward, download) with one submission and one fence wait.
 *
 * Threads: enumerate and check anywhere; a trainer is used by one thread at
 * a time (the rank's compute worker).
 *
 * Vulkan is loaded at run time (dlopen of libvulkan.so.1; RLX_VULKAN_LIBRARY
 * names another file, tests point it at one that does not exist): without the
 * loader rlx_vk_enumerate fails with RLX_VK_ERROR_NO_DRIVER and "no Vulkan
 * loader (libvulkan.so.1 not found; install libvulkan1)".
 *
 * Environment: RLX_VK_VALIDATE=1 enables the Khronos validation layer; with
 * or without it, validation and performance warnings and errors reported
 * through VK_EXT_debug_utils are printed and counted
 * (rlx_vk_validation_messages). For tuning and tests (read when a trainer is
 * made): RLX_VK_PROFILE=1 puts a timestamp (and a barrier) after every
 * dispatch and prints the mean time of each when the trainer is freed;
 * RLX_VK_GEMM_BIG=bm,bn,bk,tm,tn replaces the big GEMM tile;
 * RLX_VK_CNN_IMPLICIT=forward|data|all|none picks which parts of the CNN's
 * conv2 run as implicit GEMMs instead of through a column matrix (default
 * forward: its forward pass and weight gradient);
 * RLX_VK_CNN_COL2IM=pooled|pixel gathers pool1's gradient from conv2's
 * column gradient once per pooled value (default) or once per pixel;
 * RLX_VK_CNN_FWD_TILE, RLX_VK_CNN_WGRAD_TILE, RLX_VK_CNN_DCOL_TILE =
 * bm,bn,bk,tm,tn or auto replace the tiles of conv2's forward,
 * weight-gradient and column-gradient GEMMs (defaults tuned on an H200;
 * auto: the generic choice);
 * RLX_VK_SIMULATE_DEVICE_LOST=N makes the Nth step report
 * VK_ERROR_DEVICE_LOST. All of them are read in gpu/rlx-vk-tunables.c and
 * listed, with their defaults, in its table (rlx_vk_tunable_docs).
 */
#pragma once

#include <glib.h>
#include "core/vision/rlx-model.h"
#include "core/vision/rlx-dataset.h"

G_BEGIN_DECLS

#define RLX_VK_ERROR (rlx_vk_error_quark ())
GQuark rlx_vk_error_quark (void);
typedef enum {
  RLX_VK_ERROR_NO_DRIVER,       /* no loader, no ICD, instance creation failed */
  RLX_VK_ERROR_UNSUPPORTED,     /* the device lacks something the shaders need */
  RLX_VK_ERROR_DEVICE_LOST,     /* VK_ERROR_DEVICE_LOST or a step that never finished */
  RLX_VK_ERROR_OUT_OF_MEMORY,   /* host or device memory */
  RLX_VK_ERROR_FAILED,
  RLX_VK_ERROR_NOT_FINITE,      /* an update checked on the device held NaN or ±Inf */
} RlxVkError;

typedef enum {
  RLX_VK_DEVICE_OTHER,
  RLX_VK_DEVICE_INTEGRATED,
  RLX_VK_DEVICE_DISCRETE,
  RLX_VK_DEVICE_VIRTUAL,
  RLX_VK_DEVICE_CPU,            /* a software implementation (llvmpipe, SwiftShader) */
} RlxVkDeviceType;

/* A cooperative matrix shape the device offers: C/R (M×N) += A (M×K) · B
 * (K×N), component types as RlxVkComponent. */
typedef enum {
  RLX_VK_COMPONENT_F16,
  RLX_VK_COMPONENT_F32,
  RLX_VK_COMPONENT_BF16,
  RLX_VK_COMPONENT_INT,                  /* the integer types, listed as "int" */
  RLX_VK_COMPONENT_OTHER,
} RlxVkComponent;

typedef struct {
  guint16         m, n, k;
  guint8          a, b, c, r;            /* RlxVkComponent */
  gboolean        subgroup;              /* subgroup scope (the only one our shaders use) */
  gboolean        khr;                   /* listed by VK_KHR_cooperative_matrix, else NV */
} RlxVkCoopShape;

#define RLX_VK_MAX_COOP_SHAPES 24

typedef struct {
  guint           index;                 /* in vkEnumeratePhysicalDevices order */
  char           *name;                  /* "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)" */
  char           *driver;                /* "NVIDIA 580.159.03", "llvmpipe Mesa 22.3.6" */
  RlxVkDeviceType type;
  guint32         api_version;
  guint32         vendor_id;
  guint32         device_id;
  gboolean        has_compute_queue;
  gboolean        has_timestamps;
  float           timestamp_period;      /* ns per tick */
  guint32         max_shared_memory;     /* maxComputeSharedMemorySize */
  guint32         max_push_constants;    /* maxPushConstantsSize */
  guint32         max_workgroup_invocations;
  guint32         max_workgroup_count[3];
  guint64         max_storage_buffer_range;
  guint64         max_allocation;        /* maxMemoryAllocationSize, 0 when unknown */
  guint32         subgroup_size;         /* 0 when unknown */
  guint64         device_local_bytes;    /* largest DEVICE_LOCAL heap */
  char            uuid[33];              /* deviceUUID in hex; "" when unknown */
  /* cooperative matrix (tensor cores), for --compute f16 / bf16 */
  gboolean        coop_nv;               /* VK_NV_cooperative_matrix (what our shaders use) */
  gboolean        coop_khr;              /* VK_KHR_cooperative_matrix */
  gboolean        shader_f16;            /* shaderFloat16 */
  gboolean        memory_model;          /* vulkanMemoryModel and its device scope (the NV
                                          * cooperative matrix's SPIR-V needs the one, the
                                          * other shaders' device-scope barriers the other) */
  gboolean        shader_bf16;           /* VK_KHR_shader_bfloat16 */
  guint           n_coop;                /* shapes in @coop */
  RlxVkCoopShape  coop[RLX_VK_MAX_COOP_SHAPES];
} RlxVkDeviceInfo;

RlxVkDeviceInfo *rlx_vk_device_info_copy (const RlxVkDeviceInfo *info);
void             rlx_vk_device_info_free (RlxVkDeviceInfo *info);
const char      *rlx_vk_device_type_name (RlxVkDeviceType type);
/* TRUE for CPU-type devices and known software rasterizers. */
gboolean         rlx_vk_device_is_software (const RlxVkDeviceInfo *info);

/* Every physical device (RlxVkDeviceInfo*, free func set), possibly empty.
 * NULL with RLX_VK_ERROR_NO_DRIVER when no Vulkan instance can be created. */
GPtrArray       *rlx_vk_enumerate (GError **error);

/* NULL when @info can train @model at batches up to @max_batch, else a
 * sentence saying what the device lacks (newly allocated). Pure: tests pass
 * hand-made infos. */
char            *rlx_vk_device_check (const RlxVkDeviceInfo *info,
                                      const RlxModel *model, guint max_batch);

/* ── the arithmetic of a step (--compute) ────────────────────────────────
 *
 * f32: every product in f32 (the default; the only one on the CPU). f16:
 * the large matrix products (rlx_vk_gemm_compute) read their operands as
 * f16 and accumulate in f32 on the tensor cores, through
 * VK_NV_cooperative_matrix (gpu/shaders/gemm_cm.comp); everything else —
 * parameters, gradients, updates, the wire, the replica's hash — stays f32,
 * so a cohort's protocol and hashes do not change. bf16: the same with
 * bf16 operands; not built (this build's glslang has no bf16 cooperative
 * matrix), so always refused with that reason. */
typedef enum {
  RLX_VK_COMPUTE_F32,
  RLX_VK_COMPUTE_F16,
  RLX_VK_COMPUTE_BF16,
  RLX_VK_N_COMPUTE
} RlxVkCompute;

/* "f32", "f16", "bf16" */
const char      *rlx_vk_compute_name  (RlxVkCompute compute);
/* FALSE (and *@out untouched) when @s is none of the names. */
gboolean         rlx_vk_compute_parse (const char *s, RlxVkCompute *out);
/* NULL when @info can step at @compute, else a sentence saying what the
 * device (or this build) lacks and what to ask for instead. Pure. */
char            *rlx_vk_device_compute_check (const RlxVkDeviceInfo *info, RlxVkCompute compute);
/* "16×16×16 f16·f16→f32 (NV), ..." — the subgroup-scope shapes; "none". */
char            *rlx_vk_device_coop_text (const RlxVkDeviceInfo *info);
/* The arithmetic of one GEMM of a step at @compute: an M×N output over K,
 * @plain (both operands plain matrices, no convolution addressing). f16
 * only for plain GEMMs with M, N ≥ 64 and K ≥ 32 (the tensor-core tile's
 * use); f32 otherwise, and always at f32. Pure: the trainer records by it. */
RlxVkCompute     rlx_vk_gemm_compute  (RlxVkCompute compute, guint M, guint N, guint K,
                                       gboolean plain);
/* rlx_vk_gemm_compute (f16, M, N, K, plain) is f16 (the CPU's emulation of
 * the step: rlx_cpu_trainer_set_f16) */
gboolean         rlx_vk_gemm_is_f16   (guint M, guint N, guint K);
/* --compute f16: whether rounding an operand of @count floats to f16 once
 * (a pass of its own) moves fewer bytes than the tensor-core GEMMs that
 * re-read it @rereads times in all would convert: each re-read of the copy
 * saves 2 bytes an element, the pass costs 6 (4 read, 2 written) and a
 * dispatch with its barrier, ~4 µs or 16 MiB of traffic. Pure: the
 * trainer records by it (RLX_VK_CM_HALF). */
gboolean         rlx_vk_f16_copy_pays (guint64 count, guint rereads);
/* The loss scaling at f16, batch @n: the backward GEMMs' A (a gradient, at
 * most 1/n in magnitude) is multiplied by 64·2^⌈log2 n⌉ before it is
 * rounded to f16, and the product divided by it (powers of two: exact
 * unless f16's range is left). */
float            rlx_vk_f16_grad_scale (guint n);

/* Validation / performance messages seen by the debug messenger since the
 * process started, and whether the validation layer is on. */
guint            rlx_vk_validation_messages (void);
gboolean         rlx_vk_validation_enabled (void);
/* How many VkInstances this process has made: 1 once Vulkan was used, however
 * many trainers were opened and freed since (the instance is kept). */
guint            rlx_vk_instances_made (void);

typedef struct _RlxVkTrainer RlxVkTrainer;

typedef struct {
  double upload_us;    /* indices and parameters to the device */
  double compute_us;   /* forward, loss, backward */
  double download_us;  /* gradient and loss to host memory (resident: the wire
                        * pass, scale + codes + residual, and the codes' download;
                        * the leader's own step: its check) */
  double apply_us;     /* resident: the queued update applied (0: none) */
  double round_us;     /* the last round's finish on the device, its hash included */
  double hash_us;      /* the replica's hash in the last call that made one (0: none) */
  double wall_us;      /* the whole call, host copies included */
  double wait_us;      /* ... of which in the driver: waiting for the GPU, and in
                        * vkQueueSubmit (where lavapipe does the work itself) */
  guint64 host_bytes;  /* parameter-sized bytes the trainer's host code moved, since made */
  guint64 ahead_taken; /* own gradients a round took from behind the last finish, since made */
  guint64 presub_taken; /* rounds whose finish was made ahead and claimed, since made */
  guint64 lone_taken;   /* rounds finished in one pass (a lone leader at f32), since made */
  guint64 early_taken;  /* rounds claimed whose next own gradient round_own had queued, since made */
  guint64 fold_taken;   /* own gradients whose check came from their update made ahead, since made */
} RlxVkTimings;

/* Opens device @index (as enumerated), uploads the training split of
 * @dataset and builds the pipelines for @model. RLX_VK_ERROR_UNSUPPORTED
 * with rlx_vk_device_compute_check's reason when the device cannot step
 * at @compute. */
RlxVkTrainer    *rlx_vk_trainer_new   (guint index, const RlxModel *model,
                                       RlxDataset *dataset, guint max_batch,
                                       RlxVkCompute compute, GError **error);
/* What the trainer computes at (as asked for when it was made). */
RlxVkCompute     rlx_vk_trainer_compute (const RlxVkTrainer *self);
void             rlx_vk_trainer_free  (RlxVkTrainer *self);
const RlxVkDeviceInfo *rlx_vk_trainer_device (const RlxVkTrainer *self);

/* Mean loss and gradient over training samples @indices[0..n) at @params
 * (indices already checked by the caller). After RLX_VK_ERROR_DEVICE_LOST
 * every later call fails the same way. */
gboolean         rlx_vk_trainer_grads (RlxVkTrainer *self, const float *params,
                                       const guint32 *indices, guint n,
                                       float *loss, float *grads, GError **error);
/* GPU timestamps of the last step (zeros when the queue has none). */
void             rlx_vk_trainer_timings (const RlxVkTrainer *self, RlxVkTimings *out);

/* ── resident parameters ─────────────────────────────────────────────────
 *
 * The device side of rlx-backend.h's resident parameters: a replica in
 * device-local memory, updates applied on the device, gradients turned into
 * wire codes with error feedback on the device. The arithmetic reproduces
 * core/wire's bit for bit (shaders/wire.glsl); core/rlx-backend.c checks
 * that on each device before it relies on it. Precisions are numbered as
 * RlxPrecision (0 f32, 1 f16, 2 f8e4m3, 3 f8e5m2).
 */

/* What the device needs from core/wire, which gpu/ does not link. */
typedef struct {
  guint8  bridge[2][65536];   /* f16 code → f8 code: [0] E4M3, [1] E5M2 */
  guint32 f8_bits[2][256];    /* f8 code → its value as f32 bits */
  guint32 target[4];          /* the scale's target by precision (0 for f32) */
} RlxVkWireTables;

/* What a wire pass found, besides the codes. */
typedef struct {
  guint32 smax_bits;   /* largest |s| (s = g + residual) as f32 bits; ≥ 0x7f800000: NaN/Inf */
  guint32 gmax_bits;   /* largest |g| likewise */
  guint32 first_bad;   /* first element whose s is not finite (G_MAXUINT32: none) */
  guint32 bad_bits;    /* and that s, as f32 bits */
  float   loss;        /* the step's mean loss */
  double  scale;       /* as the device computed it; 1.0 for f32 */
  double  inv;         /* 1.0 / scale */
} RlxVkWireSummary;

/* Makes the buffers and tables; RLX_VK_ERROR_UNSUPPORTED with the reason
 * when the device lacks 64-bit shader arithmetic. Idempotent. */
gboolean rlx_vk_trainer_resident_init (RlxVkTrainer *self, const RlxVkWireTables *tables,
                                       GError **error);
/* Replaces the replica (an update still queued and a round in progress are
 * dropped) and hashes it on the device. */
gboolean rlx_vk_trainer_load_params   (RlxVkTrainer *self, const float *params, GError **error);
/* Copies the replica out, after applying a queued update. */
gboolean rlx_vk_trainer_read_params   (RlxVkTrainer *self, float *params, GError **error);
/* rlx_params_hash of the replica as it is now (after a queued update),
 * computed on the device (shaders/params_hash.comp): 8 bytes come back, not
 * the parameters. The first call also makes every later grads_wire hash the
 * replica in its submission (after its update), so a call after a step
 * costs nothing; a round's finish always hashes. */
gboolean rlx_vk_trainer_params_hash   (RlxVkTrainer *self, guint64 *hash, GError **error);

/* An update, written by the host straight into the memory the GPU reads
 * (device-local where the host can map it): update_map returns that memory
 * (room for n_params codes of 4 bytes; an update queued before is applied
 * first, on its own), valid until update_commit, which queues replica -=
 * decode (codes) (n_params codes at @prec, @inv = 1.0 / scale) for the next
 * submission. @checked: the device checks the codes first (codes_check) and
 * applies nothing when one decodes to NaN or ±Inf; the call that waits for
 * that submission then fails with RLX_VK_ERROR_NOT_FINITE (the replica as
 * it was). Unchecked: the caller checked them. */
void    *rlx_vk_trainer_update_map    (RlxVkTrainer *self, GError **error);
void     rlx_vk_trainer_update_commit (RlxVkTrainer *self, guint prec, double inv,
                                       gboolean checked);
/* update_map + a copy of @codes + update_commit (unchecked). */
gboolean rlx_vk_trainer_queue_update  (RlxVkTrainer *self, const void *codes, guint prec,
                                       double inv, GError **error);
/* One step on the replica (after the queued update): the gradient's codes
 * at @prec and the summary. *@codes points at the codes where the GPU put
 * them (n_params × element size bytes, host memory of the trainer's), valid
 * until the next call on the trainer. When @summary->smax_bits says s is
 * not finite the codes mean nothing and the residual is kept (the caller
 * refuses the gradient). The scale is the device's; the caller checks it. */
gboolean rlx_vk_trainer_grads_wire    (RlxVkTrainer *self, const guint32 *indices, guint n,
                                       guint prec, gboolean feedback, const void **codes,
                                       RlxVkWireSummary *summary, GError **error);
/* A wire pass with feedback keeps its new residual aside: accept makes it
 * the one the next pass carries (its bucket was taken); without it the next
 * pass carries the one before. Reset: the next pass starts from zero, and
 * so does the leader's update residual. */
void     rlx_vk_trainer_accept_feedback (RlxVkTrainer *self);
void     rlx_vk_trainer_reset_feedback (RlxVkTrainer *self);

/* ── the leader's round (core/rlx-backend.h says what it computes) ──
 *
 * round_own: the own gradient at the replica (after a queued update) joins
 * the round as its next contribution, weight n; it stays in the gradient
 * buffer. @summary: its largest |g| and first non-finite element, and the
 * loss; when g is not finite it does not join (the caller refuses it).
 * When the last finish was given these @indices as its @next and the
 * replica has not changed since, the gradient computed then is taken.
 * round_after: the samples of the round after the next finish's @next,
 * when both are expected to be the own gradient alone (NULL: not known),
 * for the finishes to come: behind the next round's gradient and its
 * update made ahead goes that round's gradient too, so the device never
 * waits for the host between rounds. A round that then does not claim its
 * update made ahead makes its own gradient again (the same bits).
 * round_slot: memory for the next member's bucket (n_params codes of 4
 * bytes at most), host-written where the GPU reads it, valid until
 * round_add, which makes it the next contribution (codes at @prec, @inv =
 * 1.0 / scale, @weight samples): the caller checked the codes. From the
 * second contribution on each is added to the sum by a submission nobody
 * waits for. round_finish: u, its codes at @prec (with the update residual
 * when @feedback and not f32), replica -= decode (codes) and the replica's
 * hash, in one submission; *@codes (NULL: not wanted, not downloaded)
 * points at the codes, valid until the next call; @summary: the largest |u|
 * (≥ 0x7f800000: u not finite — nothing was applied or kept), the scale and
 * its inverse. With @next, the own gradient of the next round over those
 * samples is submitted right behind it. The round is over either way.
 * round_cancel: forget the round (nothing to undo on the device). */
gboolean rlx_vk_trainer_round_own     (RlxVkTrainer *self, const guint32 *indices, guint n,
                                       RlxVkWireSummary *summary, GError **error);
void    *rlx_vk_trainer_round_slot    (RlxVkTrainer *self, GError **error);
gboolean rlx_vk_trainer_round_add     (RlxVkTrainer *self, guint prec, double inv, guint weight,
                                       GError **error);
gboolean rlx_vk_trainer_round_finish  (RlxVkTrainer *self, double lr, guint prec,
                                       gboolean feedback, const guint32 *next, guint next_n,
                                       const void **codes, RlxVkWireSummary *summary,
                                       guint64 *hash, GError **error);
/* The leader's next round is expected to be its own gradient alone,
 * finished with the same lr, precision and feedback (@alone): round_finish
 * given the next slice then also submits that round's finish behind its own
 * gradient — the update is made and applied on the device with nothing
 * between them for the host. The round_finish that matches it (own gradient
 * alone, computed ahead, after a finish that applied, same control words)
 * claims it; anything else undoes it first (the replica and update
 * residual come back from a backup taken on the device), so the calls'
 * results are those of the plain path. Only for models of at most 4 MiB
 * of parameters (larger ones lose more to the backup than they gain);
 * RLX_VK_PRESUBMIT=0 turns it off. */
void     rlx_vk_trainer_round_expect_alone (RlxVkTrainer *self, gboolean alone);
void     rlx_vk_trainer_round_after   (RlxVkTrainer *self, const guint32 *after, guint n);
void     rlx_vk_trainer_round_cancel  (RlxVkTrainer *self);
/* contributions in the round so far */
guint    rlx_vk_trainer_round_size    (RlxVkTrainer *self);

/* Test hooks (and the backend's check of a device). poison: the next pass
 * that reads the gradient (a wire pass, an own step's check) reads @bits
 * for element @index. wire_test: a wire pass over @g[0..n) (n ≤ n_params)
 * with the trainer's residual, as grads_wire does after a step. apply_test:
 * @params[0..n) -= decode (@codes), through the replica's memory (which it
 * overwrites). hash_test: the device's hash of @params[0..n), through the
 * replica's memory (which it overwrites). */
void     rlx_vk_trainer_poison_gradient (RlxVkTrainer *self, guint32 index, guint32 bits);
/* Tests: every later wire pass starts its divisions @ulps away from the
 * device's quotient (0: off), to exercise the correction. */
void     rlx_vk_trainer_set_div_nudge   (RlxVkTrainer *self, int ulps);
gboolean rlx_vk_trainer_wire_test     (RlxVkTrainer *self, const float *g, gsize n, guint prec,
                                       gboolean feedback, void *codes, RlxVkWireSummary *summary,
                                       GError **error);
gboolean rlx_vk_trainer_apply_test    (RlxVkTrainer *self, float *params, gsize n,
                                       const void *codes, guint prec, double inv, GError **error);
gboolean rlx_vk_trainer_hash_test     (RlxVkTrainer *self, const float *params, gsize n,
                                       guint64 *hash, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxVkTrainer, rlx_vk_trainer_free)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxVkDeviceInfo, rlx_vk_device_info_free)

G_END_DECLS
