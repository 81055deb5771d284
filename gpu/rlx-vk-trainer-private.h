/* rlx-vk-trainer-private.h — the Vulkan trainer's structs, shared by its
 * files (gpu/ only: nothing outside gpu/ includes it)
 *
 * Threads: an RlxVkTrainer, and everything below that hangs off it (its
 * buffers, recordings, fences, the round's state), is owned by the one
 * thread that uses the trainer — the rank's compute worker (rlx-vk.h); no
 * field is shared with another thread, so there is no lock. The tunables
 * (rlx-vk-tunables.h) are read on the thread that makes the trainer.
 *
 * The files, by concern (each names what it exports below):
 *   rlx-vk-memory.c      the memory plan (also for rlx-vk.c's device check)
 *   rlx-vk-tunables.c    every RLX_VK_* switch, and the table documenting them
 *   rlx-vk-buffers.c     memory types, buffers, the one-off upload
 *   rlx-vk-pipelines.c   the shader table, GEMM configurations, pipeline cache
 *   rlx-vk-record.c      dispatches, barriers, column sums, GEMMs, recordings
 *   rlx-vk-record-step.c a training step recorded, per batch size
 *   rlx-vk-submit.c      submission, fences, VK_ERROR_DEVICE_LOST, the timeline
 *   rlx-vk-wire.c        the wire, apply and hash passes recorded
 *   rlx-vk-resident.c    resident parameters (rlx-vk.h's calls)
 *   rlx-vk-round.c       the leader's round (rlx-vk.h's calls)
 *   rlx-vk-test-hooks.c  the test hooks (rlx-vk.h's calls)
 *   rlx-vk-trainer.c     lifetime, and the plain step
 * rlx-vk.c (instance, devices, checks) depends on the memory plan and the
 * tunables, never on the trainer's files.
 *
 * The small helpers that run on every step are static inline at the end of
 * this header: in one file the compiler inlined them into each caller, and
 * across files (no LTO) only a header keeps that so.
 */
#pragma once

#include "rlx-vk-private.h"
#include "rlx-vk-memory.h"
#include "rlx-vk-tunables.h"
#include "gpu/shaders/wire-layout.h"

#include <string.h>

G_BEGIN_DECLS

#define N_BINDINGS    7u       /* storage buffers per dispatch */
#define TL_RING       64u      /* RLX_VK_TIMELINE: submissions timed at once */

/* A device buffer and its memory (mapped when the host can see it). */
typedef struct {
  VkBuffer       buf;
  VkDeviceMemory mem;
  VkDeviceSize   size;
  void          *map;
  guint64        bit;     /* for hazard tracking while recording */
} Buf;

/* The compute shaders (rlx-vk-pipelines.c holds their SPIR-V). */
typedef enum {
  SH_GEMM, SH_REDUCE, SH_GATHER, SH_SOFTMAX, SH_CONV1, SH_MAXPOOL, SH_IM2COL, SH_POOLGRAD,
  SH_CNN1, SH_CNN2, SH_CNN2W, SH_CNN1W, SH_GEMM2,
  SH_WIRE_SUM, SH_WIRE_MAX, SH_WIRE_QUANT, SH_WIRE_APPLY,
  SH_CODES_CHECK, SH_ROUND_ACC, SH_ROUND_U, SH_ROUND_QUANT, SH_PARAMS_HASH,
  SH_ROUND_LONE, SH_GEMM_CM, SH_TO_F16,
  N_SHADERS
} ShaderId;

/* The pipeline cache's entries: a shader at one specialization. */
typedef struct {
  ShaderId   shader;
  guint32    spec[10];
  guint      n_spec;
  VkPipeline pipe;
} PipeEntry;

#define PROF_MAX 128   /* RLX_VK_PROFILE: timestamps a step records at most */

/* Timestamps (the query pool): a step's four (start, inputs in, computed,
 * out), then pairs around an update's apply, a round's finish and a hash. */
enum { Q_STEP = 0, Q_APPLY = 4, Q_ROUND = 6, Q_HASH = 8, N_QUERIES = 10 };

/* A command buffer recorded once and replayed, with the descriptor sets it
 * binds (the wire and apply passes of the resident parameters). */
typedef struct {
  VkCommandBuffer  cb;
  VkDescriptorPool pool;
} Recorded;

typedef struct {
  guint           n;
  VkCommandBuffer cb[2];       /* submitted in order; cb[1] only when split */
  guint           n_cb;
  gsize           head_bytes;  /* split: parameter bytes cb[0] reads */
  VkDescriptorPool pool;
  /* RLX_VK_PROFILE: a timestamp after every dispatch */
  GPtrArray      *labels;
  double         *prof_us;     /* summed per dispatch */
  guint           prof_steps;
} Step;

struct _RlxVkTrainer {
  RlxVkDeviceInfo  *info;
  const RlxModel   *model;
  RlxDataset       *dataset;
  guint             max_batch;
  gboolean          have_instance;

  VkPhysicalDevice  phys;
  VkDevice          dev;
  RlxVkDeviceTable  vk;
  VkQueue           queue;
  guint32           qfam;
  VkPhysicalDeviceMemoryProperties memprops;

  VkShaderModule    modules[N_SHADERS];
  VkDescriptorSetLayout dsl;
  VkPipelineLayout  layout;
  GArray           *pipes;        /* PipeEntry */
  VkCommandPool     cmdpool;
  VkQueryPool       queries;
  VkQueryPool       prof;         /* RLX_VK_PROFILE only */
  VkFence           fence;

  Buf               images, labels, params, grads, indices, staging_in, staging_out, dummy;
  Buf               bufs[N_BUFS];

  GHashTable       *steps;        /* n → Step* */
  gboolean          lost;
  char             *lost_reason;
  RlxVkTimings      timings;
  guint64           n_submits;
  guint             n_bufs_made;
  RlxVkTunables     tun;          /* what the environment asked for (rlx-vk-tunables.h) */
  RlxVkCompute      compute;      /* --compute: f16 runs the large GEMMs on gemm_cm.comp */
  guint             upload;       /* UPLOAD_*: tun.upload, or wc where there is no BAR */
  guint             max_groups_x; /* the device's x limit, or tun.max_groups_x */
  const GemmCfg    *force_cfg;    /* set while recording one GEMM */
  float             f16_scale;    /* --compute f16: the A operand's scale (loss scaling) while
                                   * recording the backward GEMMs; 0 (as 1) otherwise */
  /* resident parameters (rlx_vk_trainer_resident_init) */
  gboolean          resident_ready;
  gboolean          has_f64;      /* shaderFloat64 and shaderInt64, enabled */
  Buf               replica;      /* the parameters, device-local */
  Buf               residual;     /* the gradient's error-feedback residual: two halves, the
                                   * accepted one (res_half) and the last pass's new one */
  Buf               wire_s;       /* s = g + r, then wire_sum's partials, then the summary */
  Buf               codes_dev;    /* the gradient's codes */
  Buf               tables;       /* f16 → f8 bridges, f8 values (wire-layout.h TAB_*) */
  Buf               control;      /* host-written: CTL_* */
  Buf               codes_in;     /* host-written: the pending update's codes */
  Buf               readback;     /* codes, then the summaries (N_REGIONS) at readback_meta */
  gsize             part_off, meta_off;   /* in wire_s, words: partials, summaries */
  gsize             count_off;    /* in wire_s: the workgroups of a pass that folds by its
                                   * last one (wire-fold.glsl), 0 between passes */
  gsize             readback_meta;        /* bytes */
  gsize             code_words;           /* n_params rounded up to 4, the codes' room */
  guint64           replica_gen;  /* changes with every change of the replica */
  gboolean          pending_checked;   /* the queued update's codes are checked on the device */
  Buf               hash_part;    /* the hash's chunk hashes, two words each */
  Recorded          hash_rec;     /* the replica's hash → readback (REG_HASH) */
  gboolean          hash_each_step;    /* grads_wire hashes the replica (asked for once) */
  gboolean          hash_valid;        /* @hash is the replica's as it is now */
  guint64           hash;
  /* the leader's round (rlx_vk_trainer_round_*) */
  Buf               sum;          /* the weighted sum, from the second contribution on */
  Buf               ures;         /* the update's error-feedback residual */
  gboolean          ures_zero;    /* ...reads as zeros (reset, or never written) */
  Buf               round_rb;     /* the update's codes, then its summary (REG_ROUND) */
  GArray           *slots;        /* Buf: members' buckets, host-written, reused each round */
  guint             n_slots_used;
  guint             n_contrib;    /* contributions in the round */
  int               first;        /* the first one (while alone): -1 own gradient, k slot k */
  gboolean          own_in;
  guint64           total_weight;
  GHashTable       *acc_recs;     /* acc_key () → Recorded* */
  Recorded          own_rec[2];   /* the own gradient's check and loss → readback (own_region) */
  Recorded          finish_rec[3][4][2];   /* [x: sum, own, slot 0][precision][codes wanted] */
  /* the next round's own gradient, submitted right behind a finish */
  VkFence           fence2[2];    /* by slot: the own gradients on the queue */
  gboolean          ahead;        /* in flight, on fence2[ahead_slot] */
  guint             ahead_slot;   /* its sample indices in staging_in, fence, summary */
  guint32          *ahead_idx;
  guint             ahead_n;
  guint64           ahead_gen;
  gboolean          round_times_due;  /* the finish's timestamps, read once the queue is idle */
  /* The next round's finish, submitted ahead behind its own gradient when
   * that round is expected to be the own gradient alone
   * (rlx_vk_trainer_round_expect_alone): applied on the device, claimed by
   * the round_finish that matches it, undone from the backup otherwise. */
  gboolean          expect_alone;
  gboolean          presub;          /* one is on the queue (or done), unclaimed */
  guint             presub_slot;     /* its fence3 and rb_presub */
  guint32           presub_ctl[3];   /* CTL_ROUND_PREC, CTL_ROUND_FEEDBACK, CTL_COEF it reads */
  VkFence           fence3[2];
  Buf               rb_presub[2];    /* its summary */
  Buf               replica_bak, ures_bak;   /* the replica and update residual before it */
  Recorded          presub_rec[4][2];        /* [precision][slot] */
  Recorded          rollback_rec, rollback_lone_rec;
  guint64           presub_taken;    /* presubmitted finishes claimed, since made */
  gboolean          presub_lone;     /* it is a one-pass finish (round_lone.comp) */
  /* a lone leader's f32 round in one pass (round_lone.comp; RLX_VK_LONE=0:
   * never) */
  Recorded          finish_lone_rec, presub_lone_rec[2];
  /* The gradient after next goes on the queue without its check (own_bare
   * for its step slot, the test hook's poison kept in own_poison): the
   * one-pass update made ahead behind it folds that check in
   * (round_lone.comp flags 2; presub_fold, for the gradient in step slot
   * presub_fold_grad), and round_own reads it from there; when no such
   * update follows it, round_own runs the check then. RLX_VK_FOLD_CHECK=0:
   * never. */
  gboolean          own_bare[2];
  guint32           own_poison[2][2];
  gboolean          presub_fold;
  guint             presub_fold_grad;
  guint64           fold_taken;
  /* RLX_VK_TIMELINE=1: every submission bracketed by two timestamps (mark
   * command buffers around it, TL_RING of them in turn), read as they
   * complete; at exit, per kind of submission, how long the device worked
   * on it and how long it sat idle before it (rlx_vkt_timeline_print) */
  VkQueryPool       tl_pool;
  VkCommandBuffer   tl_cb[2 * TL_RING];
  const char       *tl_label[TL_RING];   /* what each ring entry holds, NULL: free */
  guint             tl_next, tl_read;
  guint64           tl_prev_end;
  const char       *tl_kind;        /* the label of the next submission */
  GHashTable       *tl_stats;       /* label → GArray of (busy, idle) µs pairs */
  /* Two rounds ahead (a lone leader that names the samples of the round
   * after next, rlx_vk_trainer_round_after; RLX_VK_EARLY=0: never): when a
   * finish queues the next round's gradient and its update made ahead, the
   * round after that's gradient goes behind them too ("after", in the
   * other slot), so the GPU always has a gradient queued and never waits
   * for the host between rounds. round_own then makes it the one ahead,
   * "early": it ran at parameters only this round's update gives and it
   * overwrote this round's own gradient, so when this round does not claim
   * its update made ahead it is dropped and the own gradient made again
   * from own_idx (rlx_vkt_presub_settle). */
  guint32          *after_hint;      /* the samples of the round after next, for the next finish */
  guint             after_hint_n;
  gboolean          after_q;         /* on the queue, on fence2[after_slot] */
  guint             after_slot;
  guint32          *after_idx;
  guint             after_n;
  gboolean          early;           /* the one ahead was queued "after" */
  guint32          *own_idx;         /* this round's own samples */
  guint             own_n;
  guint32           own_loss_bits;   /* its loss, to check the gradient made again */
  guint64           early_taken;     /* rounds claimed with the next gradient queued after */
  guint32           own_gmax;        /* max |g| of the own gradient in the round, f32 bits */
  guint64           lone_taken;      /* rounds finished in one pass, since made */
  guint64           host_bytes;   /* parameter-sized bytes the host moved, since made */
  guint64           ahead_taken;  /* own gradients taken from ahead, since made */
  gint64            wait_acc;     /* µs waited for the GPU in this call */
  guint32           target[4];    /* the wire's scale targets, by precision */
  Recorded          wire_rec[4][2][2];   /* [precision][feedback][the replica's hash too] */
  Recorded          apply_rec[4][2];  /* [precision][codes checked on the device] */
  int               pending;      /* precision of the update in codes_in, or -1 */
  gboolean          residual_zero;    /* the accepted residual is zero (a reset) */
  guint             res_half;         /* which half holds the accepted residual */
  gboolean          res_pending;      /* the other half holds a new one, not yet accepted */
  guint32           poison_index, poison_bits;
};

/* Records one step into a command buffer. */
typedef struct {
  RlxVkTrainer    *t;
  VkCommandBuffer  cb;
  VkDescriptorPool pool;
  GError         **error;
  gboolean         failed;
  Step            *step;
  Buf             *params;    /* what the step reads: the host-written parameters or the replica */
  char             label[96];
  guint64          dirty_w;   /* buffers written since the last barrier */
  guint64          dirty_r;   /* and read */
  /* --compute f16: operands already rounded to f16 in B_HALF
   * (rlx_vkt_rec_to_f16), which the tensor-core GEMMs read instead */
  struct {
    Buf   *buf;
    guint  off, count, half_off;
    float  scale;
  }                halves[8];
  guint            n_halves;
  guint64          half_used;  /* halves of B_HALF taken */
} Rec;

/* Where a buffer's memory lives. */
typedef enum {
  MEM_DEVICE,          /* device-local */
  MEM_READBACK,        /* host-visible, coherent, cached if possible: the host reads it */
  MEM_UPLOAD,          /* host-visible, coherent, uncached (write-combined) if
                        * possible: the host only writes it, the GPU reads it */
  MEM_DEVICE_MAPPED,   /* device-local and host-visible (a BAR): the host
                        * writes it, shaders read it; none: rlx_vkt_buf_create fails */
} MemKind;

/* The passes' summaries, by region: at meta_off + region · META_WORDS in
 * wire_s, and for the host at readback_meta + region · META_WORDS · 4 in
 * readback. */
enum { REG_WIRE, REG_OWN, REG_ROUND, REG_APPLY, REG_HASH, N_REGIONS };

/* Bytes of a wire code, by precision (f32, f16, f8 E4M3, f8 E5M2). */
static const guint code_size[4] = { 4, 2, 1, 1 };

/* Records a command buffer's work (get_recorded, rlx_vkt_run_once). */
typedef void (*FillFunc) (Rec *r, gpointer data);

/* An update's apply (rlx_vkt_fill_apply): @n codes at @prec, @checked on
 * the device first or not. */
typedef struct {
  guint n, prec;
  gboolean checked;
} ApplyKey;

/* ------------------------------------------------------------- buffers
 * (rlx-vk-buffers.c) */

gboolean rlx_vkt_buf_create (RlxVkTrainer *self, Buf *b, VkDeviceSize size,
                             VkBufferUsageFlags usage, MemKind kind, const char *what,
                             GError **error);
void     rlx_vkt_buf_destroy (RlxVkTrainer *self, Buf *b);
/* Host-written memory the GPU reads: device-local where the host can map it
 * (RLX_VK_UPLOAD=bar, the default), else host memory. */
gboolean rlx_vkt_buf_create_upload (RlxVkTrainer *self, Buf *b, gsize size, const char *what,
                                    GError **error);
/* @data into @dst through a staging buffer, waited for (the training set,
 * the wire tables). */
gboolean rlx_vkt_upload (RlxVkTrainer *self, Buf *dst, const void *data, gsize size,
                         GError **error);

/* ------------------------------------------------------------- pipelines
 * (rlx-vk-pipelines.c) */

/* gemm2.comp's fixed tile: rlx_vkt_choose_cfg returns this very one to mean
 * "on gemm2.comp". */
extern const GemmCfg rlx_vkt_cfg_big2;
/* gemm_cm.comp's tile (--compute f16, rlx_vk_gemm_compute) */
extern const GemmCfg rlx_vkt_cfg_cm[];
guint rlx_vkt_cm_shared (const GemmCfg *c, guint bk, gboolean a_kc, gboolean b_kc);
/* --compute f16: @count floats of @src from @off, × @scale, rounded to f16
 * into B_HALF once, for the tensor-core GEMMs that read them after (where
 * the f16 operands are off, or the sizes do not suit, nothing) */
void rlx_vkt_rec_to_f16 (Rec *r, Buf *src, guint off, guint count, float scale);

/* The pipeline of @shader at @spec, made on first use and kept. */
VkPipeline     rlx_vkt_get_pipeline (RlxVkTrainer *self, ShaderId shader, const guint32 *spec,
                                     guint n_spec, GError **error);
/* The tile of a GEMM with an M×N output. @plain: both operands are plain
 * matrices (no convolution modes), which gemm2.comp needs. */
const GemmCfg *rlx_vkt_choose_cfg (RlxVkTrainer *t, guint M, guint N, gboolean split_ok,
                                   gboolean plain);

/* ------------------------------------------------------------- recording
 * (rlx-vk-record.c) */

/* Epilogues of gemm.comp (flags). */
enum { EPI_BIAS_COL = 1, EPI_BIAS_ROW = 2, EPI_RELU = 4, EPI_MASK = 8 };

/* Operand modes of gemm.comp (A_KC / B_KC): row-major along k, along m/n,
 * or an implicit-GEMM convolution gather (see the shader). */
enum { OP_KN = 0, OP_KC = 1, OP_IM2COL = 2, OP_CONV_DATA = 3 };

void     rlx_vkt_rec_dispatch_v (Rec *r, ShaderId shader, const guint32 *spec, guint n_spec,
                                 Buf *const *bs, const void *push, gsize push_size,
                                 guint gx, guint gy, guint gz);
void     rlx_vkt_rec_dispatch (Rec *r, ShaderId shader, const guint32 *spec, guint n_spec,
                               Buf *b0, Buf *b1, Buf *b2, Buf *b3,
                               const void *push, gsize push_size, guint gx, guint gy, guint gz);
void     rlx_vkt_rec_colsum (Rec *r, Buf *src, guint in_off, guint R, guint C, guint ld,
                             Buf *dst, guint dst_off, float scale, guint part_off);
void     rlx_vkt_rec_gemm_ex (Rec *r, guint a_mode, guint b_mode, guint conv_c, guint conv_h,
                              guint M, guint N, guint K,
                              Buf *A, guint lda, guint a_off, Buf *B, guint ldb, guint b_off,
                              Buf *C, guint ldc, guint c_off, Buf *D, guint d_off, guint ldd,
                              guint flags);
void     rlx_vkt_rec_gemm (Rec *r, gboolean a_kc, gboolean b_kc, guint M, guint N, guint K,
                           Buf *A, guint lda, guint a_off, Buf *B, guint ldb, guint b_off,
                           Buf *C, guint ldc, guint c_off, Buf *D, guint d_off, guint ldd,
                           guint flags);
void     rlx_vkt_rec_all_barrier (Rec *r, gboolean host);
void     rlx_vkt_rec_full_barrier (Rec *r);
void     rlx_vkt_rec_to_host (Rec *r);
void     rlx_vkt_rec_timestamp (Rec *r, guint q, gboolean start);
gboolean rlx_vkt_rec_begin (RlxVkTrainer *self, Rec *r, Recorded *out, guint max_sets,
                            GError **error);
gboolean rlx_vkt_rec_end (RlxVkTrainer *self, Rec *r, Recorded *out);
void     rlx_vkt_recorded_clear (RlxVkTrainer *self, Recorded *rec);

/* ------------------------------------------------------------- the step
 * (rlx-vk-record-step.c) */

void     rlx_vkt_step_free (gpointer data);
void     rlx_vkt_print_profile (RlxVkTrainer *self, Step *s);
/* The recorded step at batch @n, @resident or not, reading its sample
 * indices from @slot of staging_in; recorded on first use. */
Step    *rlx_vkt_get_step_slot (RlxVkTrainer *self, guint n, gboolean resident, guint slot,
                                GError **error);

/* ------------------------------------------------------------- submission
 * (rlx-vk-submit.c) */

gboolean rlx_vkt_wait_submission (RlxVkTrainer *self, VkFence fence, VkResult r,
                                  const char *what, GError **error);
void     rlx_vkt_timeline_init (RlxVkTrainer *self);
void     rlx_vkt_timeline_print (RlxVkTrainer *self);
/* Reads RLX_VK_TIMELINE's completed entries (none: nothing). */
void     rlx_vkt_timeline_collect (RlxVkTrainer *self);
gboolean rlx_vkt_submit_wait (RlxVkTrainer *self, const VkCommandBuffer *cbs, guint n,
                              gboolean count_step, const char *what, GError **error);
void     rlx_vkt_read_timings (RlxVkTrainer *self, Step *step, gboolean applied);
gboolean rlx_vkt_run_once (RlxVkTrainer *self, FillFunc fill, gpointer data, const char *what,
                           GError **error);

/* ------------------------------------------------------------- the wire passes
 * (rlx-vk-wire.c) */

/* Work per workgroup of a wire pass (elements). */
#define WIRE_ELEMS_PER_GROUP 4096u

void     rlx_vkt_rec_copy_region (Rec *r, guint region, Buf *dst, gsize dst_off);
void     rlx_vkt_rec_fold_unless_done (Rec *r, guint groups, guint region, guint32 loss_index,
                                       guint32 prec);
void     rlx_vkt_rec_hash_chunks (Rec *r, guint n);
void     rlx_vkt_rec_hash_combine (Rec *r, guint n, guint region);
void     rlx_vkt_rec_hash (Rec *r, guint n, guint region);
void     rlx_vkt_rec_wire_pass (Rec *r, guint n, guint prec, gboolean feedback,
                                guint32 loss_index, gboolean hash);
void     rlx_vkt_rec_apply (Rec *r, guint n, guint prec, gboolean checked);
void     rlx_vkt_fill_apply (Rec *r, gpointer data);   /* ApplyKey */

/* ------------------------------------------------------------- resident parameters
 * (rlx-vk-resident.c) */

gboolean rlx_vkt_drain_ahead (RlxVkTrainer *self, GError **error);
gboolean rlx_vkt_flush_update (RlxVkTrainer *self, gboolean hash, GError **error);
void     rlx_vkt_resident_free (RlxVkTrainer *self);
gboolean rlx_vkt_read_replica (RlxVkTrainer *self, float *params, gsize n, GError **error);
void     rlx_vkt_wire_control (RlxVkTrainer *self);

/* ------------------------------------------------------------- the leader's round
 * (rlx-vk-round.c) */

gboolean rlx_vkt_presub_settle (RlxVkTrainer *self, GError **error);

/* ------------------------------------------------------------- on every step
 * (static inline: see the top of this header) */

static inline guint
cfg_threads (const GemmCfg *c)
{
  return (c->bm / c->tm) * (c->bn / c->tn);
}

static inline guint
groups_for (guint64 total, guint per)
{
  guint64 g = (total + per - 1) / per;
  return (guint) CLAMP (g, 1, 65535);
}

static inline guint64
tiles_of (const GemmCfg *c, guint M, guint N)
{
  return (guint64) ((M + c->bm - 1) / c->bm) * ((N + c->bn - 1) / c->bn);
}

static inline gboolean
check_lost (RlxVkTrainer *self, GError **error)
{
  if (!self->lost)
    return TRUE;
  g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_DEVICE_LOST, "%s", self->lost_reason);
  return FALSE;
}

/* The recorded step at batch @n reading its sample indices from slot 0 of
 * staging_in. */
static inline Step *
get_step (RlxVkTrainer *self, guint n, gboolean resident, GError **error)
{
  return rlx_vkt_get_step_slot (self, n, resident, 0, error);
}

/* @out recorded by @fill on first use (@max_sets descriptor sets), then
 * replayed. */
static inline const Recorded *
get_recorded (RlxVkTrainer *self, Recorded *out, guint max_sets, FillFunc fill, gpointer data,
              GError **error)
{
  Rec r;

  if (out->cb != VK_NULL_HANDLE)
    return out;
  if (!rlx_vkt_rec_begin (self, &r, out, max_sets, error))
    {
      rlx_vkt_recorded_clear (self, out);
      return NULL;
    }
  fill (&r, data);
  return rlx_vkt_rec_end (self, &r, out) ? out : NULL;
}

static inline gsize
region_off (RlxVkTrainer *self, guint region)
{
  return self->meta_off + region * META_WORDS;
}

/* The host's copy of summary @region (in readback). */
static inline const guint32 *
readback_region (RlxVkTrainer *self, guint region)
{
  return (const guint32 *) ((const char *) self->readback.map + self->readback_meta +
                            region * META_WORDS * 4);
}

/* The summary @region of a pass of @groups workgroups: folded by its last
 * workgroup already (fold_last), or by wire_max now, behind a barrier. */
static inline guint32
fold_meta (RlxVkTrainer *t, guint region)
{
  return t->tun.fold_last ? (guint32) region_off (t, region) : G_MAXUINT32;
}

/* How a pass over @n elements spreads over workgroups that each write one
 * set of partials (at most WIRE_MAX_GROUPS). */
static inline guint
wire_groups (guint n, guint *per_group)
{
  guint groups = CLAMP ((n + WIRE_ELEMS_PER_GROUP - 1) / WIRE_ELEMS_PER_GROUP, 1, WIRE_MAX_GROUPS);

  *per_group = (n + groups - 1) / groups;
  return groups;
}

static inline const Recorded *
get_apply_rec (RlxVkTrainer *self, guint prec, gboolean checked, GError **error)
{
  ApplyKey k = { (guint) self->model->n_params, prec, checked };

  return get_recorded (self, &self->apply_rec[prec][checked ? 1 : 0], 4, rlx_vkt_fill_apply, &k,
                       error);
}

static inline gboolean
need_resident (RlxVkTrainer *self, GError **error)
{
  if (self->resident_ready)
    return check_lost (self, error);
  g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_FAILED,
               "the parameters are not resident on %s (rlx_vk_trainer_resident_init)",
               self->info->name);
  return FALSE;
}

/* A call begins: no time waited yet. */
static inline gint64
call_begin (RlxVkTrainer *self)
{
  self->wait_acc = 0;
  return g_get_monotonic_time ();
}

static inline void
call_end (RlxVkTrainer *self, gint64 t0)
{
  self->timings.wall_us = (double) (g_get_monotonic_time () - t0);
  self->timings.wait_us = (double) self->wait_acc;
  self->timings.host_bytes = self->host_bytes;
  self->timings.ahead_taken = self->ahead_taken;
  self->timings.presub_taken = self->presub_taken;
  self->timings.lone_taken = self->lone_taken;
  self->timings.early_taken = self->early_taken;
  self->timings.fold_taken = self->fold_taken;
}

/* µs between timestamps @q and @q + 1 (0 without timestamps). Timestamps
 * are read after the fence of the submission that wrote them, and not while
 * another submission runs: lavapipe waits for the whole queue then, an own
 * gradient computed ahead included (round_times_due). */
static inline double
rlx_vkt_query_span (RlxVkTrainer *self, guint q)
{
  guint64 ts[2];

  if (self->queries == VK_NULL_HANDLE ||
      self->vk.GetQueryPoolResults (self->dev, self->queries, q, 2, sizeof ts, ts, sizeof (guint64),
                                    VK_QUERY_RESULT_64_BIT) != VK_SUCCESS)
    return 0;
  return (double) (ts[1] - ts[0]) * self->info->timestamp_period / 1000.0;
}

/* The own gradient computed ahead (behind a finish) is waited for and
 * forgotten: whoever calls this is about to write what it reads (the
 * sample indices in staging_in, the gradient buffer) or to submit with
 * fence2. */
static inline gboolean
wait_ahead (RlxVkTrainer *self, const char *what, GError **error)
{
  self->ahead = FALSE;
  if (!rlx_vkt_wait_submission (self, self->fence2[self->ahead_slot], VK_SUCCESS, what, error))
    return FALSE;
  if (self->round_times_due)
    {
      self->timings.round_us = rlx_vkt_query_span (self, Q_ROUND);
      self->timings.hash_us = rlx_vkt_query_span (self, Q_HASH);
      self->round_times_due = FALSE;
    }
  return TRUE;
}

/* After a submission that applied a queued update checked on the device:
 * FALSE with RLX_VK_ERROR_NOT_FINITE when that update was refused. */
static inline gboolean
apply_outcome (RlxVkTrainer *self, gboolean checked, GError **error)
{
  guint32 bad;

  if (!checked)
    return TRUE;
  bad = readback_region (self, REG_APPLY)[META_BAD];
  if (bad == G_MAXUINT32)
    return TRUE;
  g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_NOT_FINITE,
               "the update committed before this call holds NaN or ±Inf at element %u; it "
               "was not applied — the replica is as it was before it", bad);
  return FALSE;
}

/* The queued update's command buffer, appended to @cbs (none queued:
 * nothing); *@checked says whether the device checks its codes. The update
 * counts as applied from here on. */
static inline gboolean
take_update (RlxVkTrainer *self, VkCommandBuffer *cbs, guint *n_cbs, gboolean *checked,
             GError **error)
{
  const Recorded *rec;
  int prec = self->pending;

  *checked = FALSE;
  if (prec < 0)
    return TRUE;
  rec = get_apply_rec (self, (guint) prec, self->pending_checked, error);
  if (rec == NULL)
    return FALSE;
  cbs[(*n_cbs)++] = rec->cb;
  *checked = self->pending_checked;
  self->pending = -1;
  return TRUE;
}

static inline Buf *
slot_buf (RlxVkTrainer *self, guint k)
{
  return &g_array_index (self->slots, Buf, k);
}

/* the replica changed: what was computed from the old one is stale */
static inline void
replica_changed (RlxVkTrainer *self)
{
  self->replica_gen++;
  self->hash_valid = FALSE;
}

/* The poison (a test hook) for the next pass that reads the gradient. */
static inline void
poison_control (RlxVkTrainer *self)
{
  guint32 *ctl = self->control.map;

  ctl[CTL_POISON_INDEX] = self->poison_index;
  ctl[CTL_POISON_BITS] = self->poison_bits;
  self->poison_index = G_MAXUINT32;
}

static inline void
summary_of (const guint32 *m, RlxVkWireSummary *out)
{
  guint64 scale = (guint64) m[META_SCALE_HI] << 32 | m[META_SCALE_LO];
  guint64 inv = (guint64) m[META_INV_HI] << 32 | m[META_INV_LO];

  out->smax_bits = m[META_SMAX];
  out->gmax_bits = m[META_GMAX];
  out->first_bad = m[META_BAD];
  out->bad_bits = m[META_BAD_BITS];
  memcpy (&out->loss, &m[META_LOSS], 4);
  memcpy (&out->scale, &scale, 8);
  memcpy (&out->inv, &inv, 8);
}

/* RLX_VK_SIMULATE_DEVICE_LOST=N (read when the trainer is made): the Nth
 * step (from 1) reports VK_ERROR_DEVICE_LOST instead of being submitted —
 * how the tests reach the device-lost path on a device that never loses
 * itself. */
static inline gboolean
simulate_lost (RlxVkTrainer *self)
{
  self->n_submits++;
  return self->tun.lose_at != 0 && self->n_submits == self->tun.lose_at;
}

/* Submits @cbs[0..n) as one batch with @fence (VK_NULL_HANDLE: none). */
static inline VkResult
rlx_vkt_submit (RlxVkTrainer *self, const VkCommandBuffer *cbs, guint n, VkFence fence,
                gboolean count_step)
{
  VkCommandBuffer marked[16];
  VkSubmitInfo si = {
    .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
    .commandBufferCount = n,
    .pCommandBuffers = cbs,
  };
  VkResult r = fence != VK_NULL_HANDLE ? self->vk.ResetFences (self->dev, 1, &fence) : VK_SUCCESS;
  gint64 t0 = g_get_monotonic_time ();

  if (self->tl_pool != VK_NULL_HANDLE && n + 2 <= G_N_ELEMENTS (marked))
    {
      guint e = self->tl_next;

      rlx_vkt_timeline_collect (self);
      if (self->tl_label[e] == NULL)
        {
          marked[0] = self->tl_cb[2 * e];
          memcpy (marked + 1, cbs, n * sizeof (VkCommandBuffer));
          marked[n + 1] = self->tl_cb[2 * e + 1];
          si.pCommandBuffers = marked;
          si.commandBufferCount = n + 2;
          self->tl_label[e] = self->tl_kind != NULL ? self->tl_kind : "other";
          self->tl_next = (e + 1) % TL_RING;
        }
    }
  self->tl_kind = NULL;

  if (r == VK_SUCCESS && count_step && simulate_lost (self))
    return VK_ERROR_DEVICE_LOST;
  if (r == VK_SUCCESS)
    r = self->vk.QueueSubmit (self->queue, 1, &si, fence);
  /* a software device (lavapipe) runs the work inside vkQueueSubmit */
  self->wait_acc += g_get_monotonic_time () - t0;
  return r;
}

G_END_DECLS
