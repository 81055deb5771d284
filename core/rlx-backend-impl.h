/* rlx-backend-impl.h — the seam behind RlxBackend (for its implementations)
 *
 * RlxBackend (rlx-backend.h) is a façade: rlx-backend.c checks each call's
 * arguments and state, then routes it through two interfaces, as ggml's
 * backend does (ggml-backend-impl.h: ggml_backend_i for the stream that
 * computes, ggml_backend_buffer_i for the memory that holds tensors):
 *
 *   RlxBackendComputeI   where gradients are computed — the CPU trainer
 *                        (rlx-backend-host.c) or a Vulkan device
 *                        (rlx-backend-vk.c);
 *   RlxBackendReplicaI   where the parameters live between steps, with the
 *                        residuals and the leader's round — host arrays
 *                        (rlx-backend-host.c: the cpu backend's, and a
 *                        vulkan backend's whose device does not reproduce
 *                        the wire's bits) or device memory (rlx-backend-vk.c).
 *
 * An implementation fills a backend made by rlx_backend_alloc with its
 * interface and context. The façade has checked what rlx-backend.h says is
 * checked before a call reaches an interface (batch, length, scale, "load
 * them first", an open update), so the implementations do not check again.
 * Every call through these tables is one per step, bucket or round, never
 * per element. Which implementation a backend gets is decided once, when it
 * is made (rlx-backend-policy.h, and rlx-backend-vk.c for the replica);
 * nothing else switches on a kind.
 *
 * Threads: as rlx-backend.h — made anywhere, then owned by one thread at a
 * time (the rank's compute worker); nothing here is thread-safe.
 */
#pragma once

#include "rlx-backend.h"
#include "gpu/rlx-vk.h"

G_BEGIN_DECLS

/* The device's own counters (rlx_backend_step_timings, _device_round_us,
 * _host_bytes, _ahead_taken, _updates_ahead). */
typedef struct {
  double  upload_us, compute_us, download_us;   /* the last gradient, on the device */
  double  round_us;                             /* the last round's finish */
  guint64 host_bytes;                           /* the device side's host copies */
  guint64 ahead_taken, updates_ahead;
  guint64 checked;                              /* steps the check mode compared */
} RlxBackendCounters;

typedef struct {
  const char *name;   /* "cpu", "vulkan" */
  void     (*free)     (RlxBackend *self);
  /* rlx_backend_grads, the batch checked */
  gboolean (*grads)    (RlxBackend *self, const float *params, const guint32 *indices, guint n,
                        float *loss, float *grads, GError **error);
  /* FALSE (and *@c untouched) where there is no device */
  gboolean (*counters) (const RlxBackend *self, RlxBackendCounters *c);
} RlxBackendComputeI;

/* Each as its rlx_backend_* namesake, with the façade's checks done. */
typedef struct {
  gboolean on_device;   /* rlx_backend_params_on_device */
  void       (*free)            (RlxBackend *self);
  gboolean   (*load)            (RlxBackend *self, const float *params, GError **error);
  gboolean   (*read)            (RlxBackend *self, float *params, GError **error);
  gboolean   (*hash)            (RlxBackend *self, guint64 *hash, GError **error);
  gboolean   (*apply_update)    (RlxBackend *self, const void *codes, RlxPrecision precision,
                                 double scale, GError **error);
  void      *(*update_begin)    (RlxBackend *self, RlxPrecision precision, GError **error);
  gboolean   (*update_commit)   (RlxBackend *self, RlxPrecision precision, double scale,
                                 GError **error);
  /* the codes into @out, or (@out NULL) where they are: returned, NULL on error */
  const void *(*grads_wire)     (RlxBackend *self, const guint32 *indices, guint n,
                                 RlxPrecision precision, gboolean feedback, float *loss,
                                 void *out, double *scale_out, GError **error);
  void       (*accept_feedback) (RlxBackend *self);
  void       (*reset_feedback)  (RlxBackend *self);
  gboolean   (*round_own)       (RlxBackend *self, const guint32 *indices, guint n, float *loss,
                                 GError **error);
  gboolean   (*round_add)       (RlxBackend *self, const void *codes, RlxPrecision precision,
                                 double scale, guint weight, GError **error);
  void       (*round_cancel)    (RlxBackend *self);
  guint      (*round_size)      (RlxBackend *self);
  /* @feedback already FALSE at f32; the codes at *@codes_out (the
   * backend's memory) or copied into @codes_into; neither: not made */
  gboolean   (*round_finish)    (RlxBackend *self, double lr, RlxPrecision precision,
                                 gboolean feedback, const guint32 *next_indices, guint next_n,
                                 const void **codes_out, void *codes_into, double *scale_out,
                                 guint64 *hash_out, GError **error);
  /* hints (NULL: ignored); round_after's samples already pass as a batch */
  void       (*round_expect_alone) (RlxBackend *self, gboolean alone);
  void       (*round_after)     (RlxBackend *self, const guint32 *after, guint n);
} RlxBackendReplicaI;

struct _RlxBackend {
  const RlxBackendComputeI *compute;
  gpointer                  compute_ctx;
  const RlxBackendReplicaI *replica;
  gpointer                  replica_ctx;
  const RlxModel *model;
  RlxDataset     *dataset;
  guint           max_batch;
  char           *device;
  char           *fallback;
  char           *note;       /* why it is slower than it could be (ends the fallback), or NULL */
  gboolean        hardware_gpu;
  RlxVkCompute    compute_mode;   /* --compute (f32 on the CPU) */
  int             gpu_lock;   /* flock'ed: this rank's claim on its GPU, or -1 */
  /* the façade's state */
  gboolean        loaded;       /* rlx_backend_load_params was called */
  gboolean        update_open;  /* between update_begin and update_commit */
  gboolean        round_own_in; /* the round holds the own gradient */
  guint64         host_bytes;   /* parameter-sized bytes copied on the host, since made */
  /* rlx_backend_poison_gradient: one shot, taken by the replica's next gradient */
  gboolean        poisoned;
  gsize           poison_index;
  float           poison_value;
};

/* A backend with the common fields set (device "", fallback ""); the
 * caller sets the interfaces and contexts. */
RlxBackend *rlx_backend_alloc (const RlxModel *model, RlxDataset *dataset, guint max_batch);

/* The implementations */
RlxBackend *rlx_backend_host_new (const RlxModel *model, RlxDataset *dataset, guint max_batch);
/* A cpu backend (rlx_backend_host_new) computes as --compute f16 does
 * (rlx_cpu_trainer_set_f16 with the GPU's rule and loss scale): the check's
 * reference of an f16 step. */
void        rlx_backend_host_emulate_f16 (RlxBackend *self);
/* Gives @self (made by another implementation) the host replica. */
void        rlx_backend_host_replica_init (RlxBackend *self);
/* Device @info, or NULL with @error (an RLX_BACKEND_ERROR code). */
RlxBackend *rlx_backend_vk_new (const RlxVkDeviceInfo *info, const RlxModel *model,
                                RlxDataset *dataset, guint max_batch, RlxVkCompute compute,
                                GError **error);

/* ── shared by the implementations (rlx-backend.c) ─────────────────────── */

/* f32 bits with the sign cleared: ordered like |x| for finite x, and every
 * NaN or ±Inf is at or above this. */
#define RLX_BACKEND_ABS_BITS_INF 0x7f800000u

/* The name of the tensor of @model that holds parameter @i. */
const char *rlx_backend_tensor_of (const RlxModel *model, gsize i);
/* Element @i of s (a gradient, plus its residual) is @v, not finite;
 * @gradient_itself: so is the gradient there; @fate: what became of it
 * ("it was not sent"). */
void        rlx_backend_set_not_finite (RlxBackend *self, gsize i, float v,
                                        gboolean gradient_itself, const char *fate,
                                        GError **error);
/* The u of a round that is not finite at element @i (its value @v). */
void        rlx_backend_set_round_not_finite (RlxBackend *self, gsize i, float v,
                                              GError **error);
/* FALSE with RLX_BACKEND_ERROR_NOT_FINITE: the update's code @bad, the
 * bucket's code @bad. */
gboolean    rlx_backend_refuse_update (RlxBackend *self, gssize bad, GError **error);
gboolean    rlx_backend_refuse_bucket (RlxBackend *self, gssize bad, GError **error);

G_END_DECLS
