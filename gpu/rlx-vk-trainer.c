/* rlx-vk-trainer.c — one training step per submission on a Vulkan device
 *
 * Layout on the device (f32 unless said): the training split as packed u8
 * (images, labels), the parameters, the gradient (n_params + 1: the mean
 * loss rides in the last slot), the sample indices, one buffer per
 * activation, and a scratch buffer for split-K and column-sum partials.
 * Host-visible staging buffers carry parameters + indices in and the
 * gradient + loss out; the step's command buffer copies them.
 *
 * A dispatch waits behind a full compute barrier wherever it depends on an
 * earlier one (rec_dispatch_v tracks what was written and read), and no
 * shader uses atomics: each output element is summed in a fixed order, so
 * the same step gives the same bits every time.
 */
#include "rlx-config.h"
#include "rlx-vk-private.h"
#include "rlx-vk-memory.h"
#include "rlx-vk-tunables.h"
#include "core/util/rlx-par-copy.h"

#include <stdio.h>
#include <math.h>
#include <string.h>

#include "gpu/rlx-vk-spirv.h"
#include "gpu/shaders/wire-layout.h"

#define N_BINDINGS    7u       /* storage buffers per dispatch */
#define SPLIT_MIN_BYTES (4u << 20)   /* parameters large enough to split a step's submission */
/* Parameters small enough for a lone leader's next update to be made ahead
 * (presubmit): on the H200 that won 12% a step for mnist-mlp (0.4 MB) and 6%
 * for mnist-cnn, and lost 2% for mnist-mlp-xl (7.5 MB), whose finish already
 * overlapped the host and whose backups cost more than the gap they close. */
#define PRESUB_MAX_BYTES (4u << 20)
#define TL_RING       64u      /* RLX_VK_TIMELINE: submissions timed at once */
#define FILL_TARGET   256u     /* workgroups a GEMM should spread over */
#define MAX_SPLITS    4096u
#define MIN_K_CHUNK   128u

typedef struct {
  VkBuffer       buf;
  VkDeviceMemory mem;
  VkDeviceSize   size;
  void          *map;
  guint64        bit;     /* for hazard tracking while recording */
} Buf;

/* ------------------------------------------------------------- pipelines */

typedef enum {
  SH_GEMM, SH_REDUCE, SH_GATHER, SH_SOFTMAX, SH_CONV1, SH_MAXPOOL, SH_IM2COL, SH_POOLGRAD,
  SH_CNN1, SH_CNN2, SH_CNN2W, SH_CNN1W, SH_GEMM2,
  SH_WIRE_SUM, SH_WIRE_MAX, SH_WIRE_QUANT, SH_WIRE_APPLY,
  SH_CODES_CHECK, SH_ROUND_ACC, SH_ROUND_U, SH_ROUND_QUANT, SH_PARAMS_HASH,
  SH_ROUND_LONE,
  N_SHADERS
} ShaderId;

typedef struct {
  ShaderId   shader;
  guint32    spec[10];
  guint      n_spec;
  VkPipeline pipe;
} PipeEntry;
static const GemmCfg CFG_MED    = { 64, 64, 16, 4, 4 };
static const GemmCfg CFG_SMALL  = { 32, 32, 16, 4, 4 };
static const GemmCfg CFG_TALL   = { 128, 32, 16, 8, 4 };
static const GemmCfg CFG_TALLS  = { 64, 32, 16, 4, 4 };
static const GemmCfg CFG_NARROW = { 64, 16, 16, 4, 4 };
static const GemmCfg CFG_WIDE   = { 16, 64, 16, 4, 4 };
static const GemmCfg CFG_WIDE32 = { 32, 64, 16, 4, 4 };
/* gemm2.comp's fixed tile (double-buffered, 8×8 per thread, 256 threads) */
static const GemmCfg CFG_BIG2   = { 128, 128, 8, 8, 8 };

static guint
cfg_threads (const GemmCfg *c)
{
  return (c->bm / c->tm) * (c->bn / c->tn);
}

static guint
cfg_shared (const GemmCfg *c)
{
  return c->bk * ((c->bm + 4) + (c->bn + 4)) * 4;
}

#define PROF_MAX 128

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
  guint             upload;       /* UPLOAD_*: tun.upload, or wc where there is no BAR */
  guint             max_groups_x; /* the device's x limit, or tun.max_groups_x */
  const GemmCfg    *force_cfg;    /* set while recording one GEMM */
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
static void recorded_clear (RlxVkTrainer *self, Recorded *rec);
static void resident_free (RlxVkTrainer *self);
static gboolean drain_ahead (RlxVkTrainer *self, GError **error);
static gboolean presub_settle (RlxVkTrainer *self, GError **error);
static void timeline_init (RlxVkTrainer *self);
static void timeline_collect (RlxVkTrainer *self);
static void timeline_print (RlxVkTrainer *self);

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
} Rec;

static gboolean rec_begin (RlxVkTrainer *self, Rec *r, Recorded *out, guint max_sets,
                           GError **error);

/* Where a buffer's memory lives. */
typedef enum {
  MEM_DEVICE,          /* device-local */
  MEM_READBACK,        /* host-visible, coherent, cached if possible: the host reads it */
  MEM_UPLOAD,          /* host-visible, coherent, uncached (write-combined) if
                        * possible: the host only writes it, the GPU reads it */
  MEM_DEVICE_MAPPED,   /* device-local and host-visible (a BAR): the host
                        * writes it, shaders read it; none: buf_create fails */
} MemKind;

/* The first memory type among @type_bits with all of @want and none of
 * @avoid; then with all of @fallback (0: no fallback). */
static guint32
find_memory (RlxVkTrainer *self, guint32 type_bits, VkMemoryPropertyFlags want,
             VkMemoryPropertyFlags avoid, VkMemoryPropertyFlags fallback)
{
  for (guint32 i = 0; i < self->memprops.memoryTypeCount; i++)
    {
      VkMemoryPropertyFlags f = self->memprops.memoryTypes[i].propertyFlags;
      if ((type_bits & (1u << i)) && (f & want) == want && (f & avoid) == 0)
        return i;
    }
  if (fallback != 0)
    for (guint32 i = 0; i < self->memprops.memoryTypeCount; i++)
      if ((type_bits & (1u << i)) &&
          (self->memprops.memoryTypes[i].propertyFlags & fallback) == fallback)
        return i;
  return G_MAXUINT32;
}

static gboolean
buf_create (RlxVkTrainer *self, Buf *b, VkDeviceSize size, VkBufferUsageFlags usage,
            MemKind kind, const char *what, GError **error)
{
  const VkMemoryPropertyFlags visible = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                        VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  gboolean host = kind != MEM_DEVICE;
  VkBufferCreateInfo bci = {
    .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
    .size = MAX (size, 16),
    .usage = usage,
    .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
  };
  VkMemoryRequirements req;
  VkMemoryAllocateInfo mai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO };
  VkResult r;

  b->size = bci.size;
  b->bit = G_GUINT64_CONSTANT (1) << (self->n_bufs_made++ % 64);
  r = self->vk.CreateBuffer (self->dev, &bci, NULL, &b->buf);
  if (r != VK_SUCCESS)
    {
      rlx_vk_set_error (error, r, "creating the %s buffer (%" G_GUINT64_FORMAT " bytes)",
                        what, (guint64) size);
      return FALSE;
    }
  self->vk.GetBufferMemoryRequirements (self->dev, b->buf, &req);
  mai.allocationSize = req.size;
  switch (kind)
    {
    case MEM_READBACK:
      mai.memoryTypeIndex = find_memory (self, req.memoryTypeBits,
                                         visible | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0, visible);
      break;
    case MEM_UPLOAD:
      mai.memoryTypeIndex = find_memory (self, req.memoryTypeBits, visible,
                                         VK_MEMORY_PROPERTY_HOST_CACHED_BIT |
                                         VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, visible);
      break;
    case MEM_DEVICE_MAPPED:
      mai.memoryTypeIndex = find_memory (self, req.memoryTypeBits,
                                         visible | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, 0);
      break;
    case MEM_DEVICE:
    default:
      mai.memoryTypeIndex = find_memory (self, req.memoryTypeBits,
                                         VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, 0);
      break;
    }
  if (mai.memoryTypeIndex == G_MAXUINT32)
    {
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_UNSUPPORTED,
                   "%s has no memory type for the %s buffer", self->info->name, what);
      return FALSE;
    }
  g_debug ("rlx-vk: %s buffer, %" G_GUINT64_FORMAT " bytes, memory type %u (flags 0x%x)", what,
           (guint64) size, mai.memoryTypeIndex,
           self->memprops.memoryTypes[mai.memoryTypeIndex].propertyFlags);
  r = self->vk.AllocateMemory (self->dev, &mai, NULL, &b->mem);
  if (r != VK_SUCCESS)
    {
      g_autofree char *sz = g_format_size_full (req.size, G_FORMAT_SIZE_IEC_UNITS);
      b->mem = VK_NULL_HANDLE;
      rlx_vk_set_error (error, r, "allocating %s for the %s buffer of %s at batch %u",
                        sz, what, self->model->slug, self->max_batch);
      return FALSE;
    }
  r = self->vk.BindBufferMemory (self->dev, b->buf, b->mem, 0);
  if (r == VK_SUCCESS && host)
    r = self->vk.MapMemory (self->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map);
  if (r != VK_SUCCESS)
    {
      rlx_vk_set_error (error, r, "binding the %s buffer", what);
      return FALSE;
    }
  return TRUE;
}

static void
buf_destroy (RlxVkTrainer *self, Buf *b)
{
  if (b->buf != VK_NULL_HANDLE)
    self->vk.DestroyBuffer (self->dev, b->buf, NULL);
  if (b->mem != VK_NULL_HANDLE)
    self->vk.FreeMemory (self->dev, b->mem, NULL);
  memset (b, 0, sizeof *b);
}

static const guint32 *
shader_code (ShaderId id, gsize *size)
{
  switch (id)
    {
#define S(ID, arr) case ID: *size = sizeof (arr); return arr;
      S (SH_GEMM, rlx_spv_gemm)
      S (SH_REDUCE, rlx_spv_reduce)
      S (SH_GATHER, rlx_spv_gather)
      S (SH_SOFTMAX, rlx_spv_softmax)
      S (SH_CONV1, rlx_spv_conv1)
      S (SH_MAXPOOL, rlx_spv_maxpool)
      S (SH_IM2COL, rlx_spv_im2col)
      S (SH_POOLGRAD, rlx_spv_poolgrad)
      S (SH_CNN1, rlx_spv_cnn1)
      S (SH_CNN2, rlx_spv_cnn2)
      S (SH_CNN2W, rlx_spv_cnn2w)
      S (SH_CNN1W, rlx_spv_cnn1w)
      S (SH_GEMM2, rlx_spv_gemm2)
      S (SH_WIRE_SUM, rlx_spv_wire_sum)
      S (SH_WIRE_MAX, rlx_spv_wire_max)
      S (SH_WIRE_QUANT, rlx_spv_wire_quant)
      S (SH_WIRE_APPLY, rlx_spv_wire_apply)
      S (SH_CODES_CHECK, rlx_spv_codes_check)
      S (SH_ROUND_ACC, rlx_spv_round_acc)
      S (SH_ROUND_U, rlx_spv_round_u)
      S (SH_ROUND_QUANT, rlx_spv_round_quant)
      S (SH_PARAMS_HASH, rlx_spv_params_hash)
      S (SH_ROUND_LONE, rlx_spv_round_lone)
#undef S
    case N_SHADERS:
    default:
      g_assert_not_reached ();
    }
}

static VkPipeline
get_pipeline (RlxVkTrainer *self, ShaderId shader, const guint32 *spec, guint n_spec,
              GError **error)
{
  VkSpecializationMapEntry entries[10];
  VkSpecializationInfo si = {
    .mapEntryCount = n_spec,
    .pMapEntries = entries,
    .dataSize = n_spec * sizeof (guint32),
    .pData = spec,
  };
  VkComputePipelineCreateInfo ci = {
    .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
    .stage = {
      .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
      .stage = VK_SHADER_STAGE_COMPUTE_BIT,
      .pName = "main",
      .pSpecializationInfo = n_spec > 0 ? &si : NULL,
    },
    .layout = self->layout,
  };
  PipeEntry e = { .shader = shader, .n_spec = n_spec };
  VkResult r;

  g_assert (n_spec <= 10);
  for (guint i = 0; i < self->pipes->len; i++)
    {
      PipeEntry *p = &g_array_index (self->pipes, PipeEntry, i);
      if (p->shader == shader && p->n_spec == n_spec &&
          memcmp (p->spec, spec, n_spec * sizeof (guint32)) == 0)
        return p->pipe;
    }

  if (self->modules[shader] == VK_NULL_HANDLE)
    {
      gsize size;
      const guint32 *code = shader_code (shader, &size);
      VkShaderModuleCreateInfo mci = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
        .codeSize = size,
        .pCode = code,
      };
      r = self->vk.CreateShaderModule (self->dev, &mci, NULL, &self->modules[shader]);
      if (r != VK_SUCCESS)
        {
          rlx_vk_set_error (error, r, "loading shader %u", shader);
          return VK_NULL_HANDLE;
        }
    }
  for (guint i = 0; i < n_spec; i++)
    entries[i] = (VkSpecializationMapEntry) { i, i * sizeof (guint32), sizeof (guint32) };
  ci.stage.module = self->modules[shader];
  memcpy (e.spec, spec, n_spec * sizeof (guint32));
  r = self->vk.CreateComputePipelines (self->dev, VK_NULL_HANDLE, 1, &ci, NULL, &e.pipe);
  if (r != VK_SUCCESS)
    {
      rlx_vk_set_error (error, r, "compiling compute pipeline for shader %u on %s",
                        shader, self->info->name);
      return VK_NULL_HANDLE;
    }
  g_array_append_val (self->pipes, e);
  return e.pipe;
}

/* ------------------------------------------------------------- recording */

static void
rec_barrier (Rec *r)
{
  VkMemoryBarrier mb = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
  };
  r->t->vk.CmdPipelineBarrier (r->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* A dispatch of @shader with buffers @bs bound at 0..N_BINDINGS-1 (NULL:
 * a dummy). */
static void
rec_dispatch_v (Rec *r, ShaderId shader, const guint32 *spec, guint n_spec, Buf *const *bs,
                const void *push, gsize push_size, guint gx, guint gy, guint gz)
{
  RlxVkTrainer *t = r->t;
  VkDescriptorBufferInfo bi[N_BINDINGS];
  VkWriteDescriptorSet w[N_BINDINGS];
  VkDescriptorSetAllocateInfo ai = {
    .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
    .descriptorPool = r->pool,
    .descriptorSetCount = 1,
    .pSetLayouts = &t->dsl,
  };
  VkDescriptorSet set;
  VkPipeline pipe;
  VkResult res;

  if (r->failed)
    return;
  g_assert (push_size <= RLX_VK_PUSH_BYTES && push_size % 4 == 0);
  g_assert (gx > 0 && gy > 0 && gz > 0);
  g_assert (gx <= t->info->max_workgroup_count[0] && gy <= t->info->max_workgroup_count[1] &&
            gz <= t->info->max_workgroup_count[2]);

  pipe = get_pipeline (t, shader, spec, n_spec, r->error);
  if (pipe == VK_NULL_HANDLE)
    {
      r->failed = TRUE;
      return;
    }
  res = t->vk.AllocateDescriptorSets (t->dev, &ai, &set);
  if (res != VK_SUCCESS)
    {
      rlx_vk_set_error (r->error, res, "allocating a descriptor set");
      r->failed = TRUE;
      return;
    }
  for (guint i = 0; i < N_BINDINGS; i++)
    {
      Buf *b = bs[i] ? bs[i] : &t->dummy;
      bi[i] = (VkDescriptorBufferInfo) { b->buf, 0, VK_WHOLE_SIZE };
      w[i] = (VkWriteDescriptorSet) {
        .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
        .dstSet = set,
        .dstBinding = i,
        .descriptorCount = 1,
        .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
        .pBufferInfo = &bi[i],
      };
    }
  t->vk.UpdateDescriptorSets (t->dev, N_BINDINGS, w, 0, NULL);

  /* A barrier only where this dispatch depends on one since the last
   * barrier: it reads what was written, or writes what was read or written
   * (the gradient's tensors are written to disjoint ranges, so writes to it
   * need no ordering among themselves). With RLX_VK_PROFILE every dispatch
   * gets one, so each is timed alone. */
  {
    /* the binding each shader writes (wire_quant also writes the residual
     * at 2; the wire passes are ordered by barriers of their own) */
    static const guint writes[N_SHADERS] = {
      2, 1, 2, 3, 2, 1, 1, 2, 2, 2, 3, 4, 2, 3, 0, 3, 3, 1, 3, 3, 4, 1
    };
    guint64 rd = 0, wr = 0;

    for (guint i = 0; i < N_BINDINGS; i++)
      {
        Buf *b = bs[i] ? bs[i] : &t->dummy;
        if (i == writes[shader])
          wr |= b->bit;
        else
          rd |= b->bit;
      }
    if ((rd & r->dirty_w) || (wr & r->dirty_r) || (wr & r->dirty_w & ~t->grads.bit) ||
        t->prof != VK_NULL_HANDLE)
      {
        if (r->dirty_w | r->dirty_r)
          rec_barrier (r);
        r->dirty_w = r->dirty_r = 0;
      }
    r->dirty_w |= wr;
    r->dirty_r |= rd;
  }
  t->vk.CmdBindPipeline (r->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
  t->vk.CmdBindDescriptorSets (r->cb, VK_PIPELINE_BIND_POINT_COMPUTE, t->layout, 0, 1, &set, 0, NULL);
  t->vk.CmdPushConstants (r->cb, t->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size, push);
  t->vk.CmdDispatch (r->cb, gx, gy, gz);
  if (t->prof != VK_NULL_HANDLE && r->step != NULL && r->step->labels->len + 1 < PROF_MAX)
    {
      rec_barrier (r);
      r->dirty_w = r->dirty_r = 0;
      static const char *const names[N_SHADERS] = {
        "gemm", "reduce", "gather", "softmax", "conv1", "maxpool", "im2col", "poolgrad",
        "cnn1", "cnn2", "cnn2w", "cnn1w", "gemm2", "wiresum", "wiremax", "wirequan", "wireappl",
        "codechk", "roundacc", "roundu", "roundqua", "hash", "roundlon"
      };
      g_ptr_array_add (r->step->labels,
                       g_strdup_printf ("%-8s %s grid %u×%u×%u", names[shader], r->label, gx, gy, gz));
      t->vk.CmdWriteTimestamp (r->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, t->prof,
                           r->step->labels->len);
    }
  r->label[0] = '\0';
}

static void
rec_dispatch (Rec *r, ShaderId shader, const guint32 *spec, guint n_spec,
              Buf *b0, Buf *b1, Buf *b2, Buf *b3,
              const void *push, gsize push_size, guint gx, guint gy, guint gz)
{
  Buf *bs[N_BINDINGS] = { b0, b1, b2, b3, NULL, NULL };

  rec_dispatch_v (r, shader, spec, n_spec, bs, push, push_size, gx, gy, gz);
}

static guint
groups_for (guint64 total, guint per)
{
  guint64 g = (total + per - 1) / per;
  return (guint) CLAMP (g, 1, 65535);
}

/* What the last pass of a column sum does to each sum. */
typedef struct {
  float  scale;
  Buf   *bias;        /* NULL: none; else + bias[bias_off + col % bias_n] */
  guint  bias_off, bias_n;
  gboolean relu;
} SumEpi;

/* Column sums of src [R][C] (row stride ld) into dst[dst_off + c], with
 * @epi applied. Large R goes through row-chunk partials in B_RPART (at
 * part_off), in a fixed order. */
static void
rec_colsum_epi (Rec *r, Buf *src, guint in_off, guint R, guint C, guint ld,
                Buf *dst, guint dst_off, const SumEpi *epi, guint part_off)
{
  struct {
    guint32 R, C, ld, rows_per_chunk, in_off, out_off, out_split;
    float scale;
    guint32 bias_n, bias_off, relu;
  } pc;
  guint chunks = 1, rows = R;
  guint blocks, gx, gz;

  if (R > 256)
    {
      rows = 256;
      chunks = (R + rows - 1) / rows;
      if ((guint64) chunks * C + part_off > RPART_FLOATS || chunks > 65535)
        {
          chunks = MIN (65535u, (RPART_FLOATS - part_off) / C);
          rows = (R + chunks - 1) / chunks;
          chunks = (R + rows - 1) / rows;
        }
    }
  /* 64 columns a workgroup; past the grid's x limit (4.2M columns on most
   * devices: a split-K GEMM's M×N output) the blocks continue along z */
  blocks = (C + 63) / 64;
  gx = MIN (blocks, r->t->max_groups_x);
  gz = (blocks + gx - 1) / gx;
  if (chunks == 1)
    {
      pc = (typeof (pc)) { R, C, ld, R, in_off, dst_off, 0, epi->scale,
                           epi->bias ? epi->bias_n : 0, epi->bias_off, epi->relu };
      rec_dispatch (r, SH_REDUCE, NULL, 0, src, dst, epi->bias, NULL, &pc, sizeof pc, gx, 1, gz);
      return;
    }
  pc = (typeof (pc)) { R, C, ld, rows, in_off, part_off, C, 1.0f, 0, 0, 0 };
  rec_dispatch (r, SH_REDUCE, NULL, 0, src, &r->t->bufs[B_RPART], NULL, NULL, &pc, sizeof pc,
                gx, chunks, gz);
  rec_colsum_epi (r, &r->t->bufs[B_RPART], part_off, chunks, C, C, dst, dst_off, epi,
                  part_off + chunks * C);
}

static void
rec_colsum (Rec *r, Buf *src, guint in_off, guint R, guint C, guint ld,
            Buf *dst, guint dst_off, float scale, guint part_off)
{
  SumEpi epi = { .scale = scale };
  rec_colsum_epi (r, src, in_off, R, C, ld, dst, dst_off, &epi, part_off);
}

enum { EPI_BIAS_COL = 1, EPI_BIAS_ROW = 2, EPI_RELU = 4, EPI_MASK = 8 };

static guint64
tiles_of (const GemmCfg *c, guint M, guint N)
{
  return (guint64) ((M + c->bm - 1) / c->bm) * ((N + c->bn - 1) / c->bn);
}

/* @plain: both operands are plain matrices (no convolution modes), which
 * gemm2.comp needs */
static const GemmCfg *
choose_cfg (RlxVkTrainer *t, guint M, guint N, gboolean split_ok, gboolean plain)
{
  gboolean big_ok = t->info->max_shared_memory >= cfg_shared (&t->tun.big) &&
                    t->info->max_workgroup_invocations >= cfg_threads (&t->tun.big);

  if (t->force_cfg != NULL &&
      t->info->max_shared_memory >= cfg_shared (t->force_cfg) &&
      t->info->max_workgroup_invocations >= cfg_threads (t->force_cfg))
    return t->force_cfg;

  if (N <= 16)
    return &CFG_NARROW;
  if (M <= 16)
    return &CFG_WIDE;
  if (N <= 32)
    return (big_ok && tiles_of (&CFG_TALL, M, N) >= FILL_TARGET) ? &CFG_TALL : &CFG_TALLS;
  if (M <= 32)
    return &CFG_WIDE32;
  if (t->tun.gemm2 && plain && split_ok && M >= CFG_BIG2.bm && N >= CFG_BIG2.bn)
    return &CFG_BIG2;
  if (t->tun.gemm2 && plain && tiles_of (&CFG_BIG2, M, N) >= FILL_TARGET)
    return &CFG_BIG2;
  if (big_ok && split_ok && M >= t->tun.big.bm && N >= t->tun.big.bn)
    return &t->tun.big;
  if (big_ok && tiles_of (&t->tun.big, M, N) >= FILL_TARGET)
    return &t->tun.big;
  if (tiles_of (&CFG_MED, M, N) >= FILL_TARGET)
    return &CFG_MED;
  return &CFG_SMALL;
}

/* Operand modes of gemm.comp (A_KC / B_KC): row-major along k, along m/n,
 * or an implicit-GEMM convolution gather (see the shader). */
enum { OP_KN = 0, OP_KC = 1, OP_IM2COL = 2, OP_CONV_DATA = 3 };

/* C[M][N] (ldc) = epilogue (A·B). Split over K when the output is compact,
 * has no epilogue and would otherwise occupy few workgroups. @conv_c and
 * @conv_h describe the image for the convolution modes (0 otherwise). */
static void
rec_gemm_ex (Rec *r, guint a_mode, guint b_mode, guint conv_c, guint conv_h,
             guint M, guint N, guint K,
             Buf *A, guint lda, guint a_off, Buf *B, guint ldb, guint b_off,
             Buf *C, guint ldc, guint c_off, Buf *D, guint d_off, guint ldd, guint flags)
{
  struct {
    guint32 M, N, K, lda, ldb, ldc, ldd, a_off, b_off, c_off, d_off, k_chunk, c_split, flags;
    float alpha;
  } pc;
  /* a bias (and ReLU) can be applied by the reduce that adds the partials */
  gboolean split_ok = (flags & ~(EPI_BIAS_COL | EPI_RELU)) == 0 && ldc == N;
  const GemmCfg *cfg = choose_cfg (r->t, M, N, split_ok, a_mode <= OP_KC && b_mode <= OP_KC);
  ShaderId shader = SH_GEMM;
  guint64 tiles = tiles_of (cfg, M, N);
  guint64 threads = tiles * cfg_threads (cfg);
  guint splits = 1, k_chunk;
  guint32 spec[10];
  guint n_spec = conv_c > 0 ? 10 : 8;
  static const char mode_char[] = "TNIC";

  if (split_ok && threads < r->t->tun.fill_threads && K >= 2 * MIN_K_CHUNK)
    {
      splits = (guint) MIN ((r->t->tun.fill_threads + threads - 1) / threads, (guint64) K / MIN_K_CHUNK);
      splits = MIN (splits, MAX_SPLITS);
      splits = MIN (splits, r->t->info->max_workgroup_count[2]);
      splits = MIN (splits, (guint) (PART_FLOATS / ((guint64) M * N)));
      splits = MAX (splits, 1);
    }
  k_chunk = (K + splits - 1) / splits;
  k_chunk = (k_chunk + cfg->bk - 1) / cfg->bk * cfg->bk;
  splits = (K + k_chunk - 1) / k_chunk;
  if (splits <= 1)
    {
      splits = 1;
      k_chunk = K;
    }

  g_snprintf (r->label, sizeof r->label, "%ux%ux%u %c%c tile %ux%u split %u", M, N, K,
              mode_char[a_mode], "NTIC"[b_mode], cfg->bm, cfg->bn, splits);
  if (cfg == &CFG_BIG2)
    {
      shader = SH_GEMM2;
      spec[0] = a_mode;
      spec[1] = b_mode;
      n_spec = 2;
    }
  else
    {
      spec[0] = cfg->bm;
      spec[1] = cfg->bn;
      spec[2] = cfg->bk;
      spec[3] = cfg->tm;
      spec[4] = cfg->tn;
      spec[5] = a_mode;
      spec[6] = b_mode;
      spec[7] = cfg_threads (cfg);
      spec[8] = conv_c;
      spec[9] = conv_h;
    }

  if (splits == 1)
    {
      pc = (typeof (pc)) { M, N, K, lda, ldb, ldc, ldd, a_off, b_off, c_off, d_off,
                           K, 0, flags, 1.0f };
      rec_dispatch (r, shader, spec, n_spec, A, B, C, D, &pc, sizeof pc,
                    (N + cfg->bn - 1) / cfg->bn, (M + cfg->bm - 1) / cfg->bm, 1);
      return;
    }
  pc = (typeof (pc)) { M, N, K, lda, ldb, N, ldd, a_off, b_off, 0, d_off,
                       k_chunk, M * N, 0, 1.0f };
  rec_dispatch (r, shader, spec, n_spec, A, B, &r->t->bufs[B_PART], D, &pc, sizeof pc,
                (N + cfg->bn - 1) / cfg->bn, (M + cfg->bm - 1) / cfg->bm, splits);
  {
    SumEpi epi = {
      .scale = 1.0f,
      .bias = (flags & EPI_BIAS_COL) ? D : NULL,
      .bias_off = d_off,
      .bias_n = N,
      .relu = (flags & EPI_RELU) != 0,
    };
    rec_colsum_epi (r, &r->t->bufs[B_PART], 0, splits, M * N, M * N, C, c_off, &epi, 0);
  }
}

static void
rec_gemm (Rec *r, gboolean a_kc, gboolean b_kc, guint M, guint N, guint K,
          Buf *A, guint lda, guint a_off, Buf *B, guint ldb, guint b_off,
          Buf *C, guint ldc, guint c_off, Buf *D, guint d_off, guint ldd, guint flags)
{
  rec_gemm_ex (r, a_kc ? OP_KC : OP_KN, b_kc ? OP_KC : OP_KN, 0, 0, M, N, K,
               A, lda, a_off, B, ldb, b_off, C, ldc, c_off, D, d_off, ldd, flags);
}

static void
rec_gather (Rec *r, guint n)
{
  struct { guint32 n, x_off; } pc = { n, 0 };
  rec_dispatch (r, SH_GATHER, NULL, 0, &r->t->images, &r->t->indices, &r->t->bufs[B_X], NULL,
                &pc, sizeof pc, groups_for ((guint64) n * 196, 256), 1, 1);
}

static void
rec_softmax (Rec *r, guint n)
{
  RlxVkTrainer *t = r->t;
  struct { guint32 n, logits_off, dl_off, loss_off; float inv_n; } pc = {
    n, 0, 0, 0, 1.0f / n
  };

  /* one output binding: the per-sample losses follow the n×10 logit
   * gradients in B_DLOGITS (sized for them) */
  pc.loss_off = n * RLX_N_CLASSES;
  rec_dispatch (r, SH_SOFTMAX, NULL, 0, &t->bufs[B_LOGITS], &t->labels, &t->indices,
                &t->bufs[B_DLOGITS], &pc, sizeof pc, (n + 63) / 64, 1, 1);
  rec_colsum (r, &t->bufs[B_DLOGITS], n * RLX_N_CLASSES, n, 1, 1, &t->grads,
              (guint) t->model->n_params, 1.0f / n, 0);
}

/* Ends the step's first command buffer and continues in a second, which
 * the host submits after it has written the rest of the parameters (see
 * rlx_vk_trainer_grads): what was recorded so far reads only the first
 * @head_bytes of them. A dispatch in the second that depends on the first
 * gets its barrier as usual (barriers order against earlier submissions on
 * the queue). */
static void
rec_split (Rec *r, gsize head_bytes)
{
  RlxVkTrainer *t = r->t;
  VkCommandBufferAllocateInfo cai = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
    .commandPool = t->cmdpool,
    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
    .commandBufferCount = 1,
  };
  VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO };
  VkResult res;

  if (r->failed)
    return;
  res = t->vk.EndCommandBuffer (r->cb);
  if (res == VK_SUCCESS)
    res = t->vk.AllocateCommandBuffers (t->dev, &cai, &r->step->cb[1]);
  if (res != VK_SUCCESS)
    {
      rlx_vk_set_error (r->error, res, "recording the step");
      r->failed = TRUE;
      return;
    }
  r->step->n_cb = 2;
  r->step->head_bytes = head_bytes;
  res = t->vk.BeginCommandBuffer (r->step->cb[1], &bi);
  if (res != VK_SUCCESS)
    {
      rlx_vk_set_error (r->error, res, "recording the step");
      r->failed = TRUE;
      return;
    }
  r->cb = r->step->cb[1];
}

static void
record_dense (Rec *r, guint n)
{
  RlxVkTrainer *t = r->t;
  const RlxModel *m = t->model;
  guint w[5];
  guint L = rlx_vkt_dense_widths (m, w);
  Buf *act[5], *dact[5];

  act[0] = &t->bufs[B_X];
  for (guint l = 1; l < L; l++)
    {
      act[l] = &t->bufs[B_H1 + l - 1];
      dact[l] = &t->bufs[B_DH1 + l - 1];
    }
  act[L] = &t->bufs[B_LOGITS];
  dact[L] = &t->bufs[B_DLOGITS];

  rec_gather (r, n);
  for (guint l = 1; l <= L; l++)
    {
      const RlxTensorInfo *wt = &m->tensors[2 * (l - 1)], *bt = &m->tensors[2 * (l - 1) + 1];
      rec_gemm (r, TRUE, TRUE, n, w[l], w[l - 1],
                act[l - 1], w[l - 1], 0, r->params, w[l - 1], (guint) wt->offset,
                act[l], w[l], 0, r->params, (guint) bt->offset, 0,
                EPI_BIAS_COL | (l < L ? EPI_RELU : 0));
      /* with the parameters written by the host, large models submit the
       * first layer's forward before the host writes the other layers */
      if (l == 1 && L > 1 && t->tun.split_submit && t->upload == UPLOAD_BAR && r->params == &t->params &&
          m->n_params * sizeof (float) >= SPLIT_MIN_BYTES)
        rec_split (r, (bt->offset + bt->numel) * sizeof (float));
    }
  rec_softmax (r, n);
  for (guint l = L; l >= 1; l--)
    {
      const RlxTensorInfo *wt = &m->tensors[2 * (l - 1)], *bt = &m->tensors[2 * (l - 1) + 1];
      /* dW_l = g^T · in */
      rec_gemm (r, FALSE, FALSE, w[l], w[l - 1], n,
                dact[l], w[l], 0, act[l - 1], w[l - 1], 0,
                &t->grads, w[l - 1], (guint) wt->offset, NULL, 0, 0, 0);
      rec_colsum (r, dact[l], 0, n, w[l], w[l], &t->grads, (guint) bt->offset, 1.0f, 0);
      if (l > 1)
        rec_gemm (r, TRUE, FALSE, n, w[l - 1], w[l],
                  dact[l], w[l], 0, r->params, w[l - 1], (guint) wt->offset,
                  dact[l - 1], w[l - 1], 0, act[l - 1], 0, w[l - 1], EPI_MASK);
    }
}

static void
rec_maxpool (Rec *r, Buf *in, Buf *out, guint n, guint C, guint H, gboolean nhwc)
{
  struct { guint32 n, C, H, W, in_nhwc, in_off, out_off; } pc = { n, C, H, H, nhwc, 0, 0 };
  rec_dispatch (r, SH_MAXPOOL, NULL, 0, in, out, NULL, NULL, &pc, sizeof pc,
                groups_for ((guint64) n * C * (H / 2) * (H / 2), 256), 1, 1);
}

static void
rec_im2col (Rec *r, Buf *src, Buf *col, guint n, guint C, guint H)
{
  struct { guint32 n, C, H, W, src_off, col_off; } pc = { n, C, H, H, 0, 0 };
  rec_dispatch (r, SH_IM2COL, NULL, 0, src, col, NULL, NULL, &pc, sizeof pc,
                groups_for ((guint64) n * H * H * C * 9, 256), 1, 1);
}

static void
rec_poolgrad (Rec *r, guint mode, Buf *act, gboolean nhwc, Buf *dp, Buf *out,
              guint n, guint C, guint H)
{
  struct { guint32 n, C, H, W, a_nhwc, a_off, dp_off, out_off; } pc = { n, C, H, H, nhwc, 0, 0, 0 };
  guint32 spec[1] = { mode };
  /* MODE 3: one thread per pooled value, four outputs each */
  guint64 items = (guint64) n * H * H * C / (mode == 3 ? 4 : 1);
  rec_dispatch (r, SH_POOLGRAD, spec, 1, act, dp, out, NULL, &pc, sizeof pc,
                groups_for (items, 256), 1, 1);
}

/* mnist-cnn's dense layer on pool2's output (B_P2): logits, softmax and
 * loss, its weight and bias gradient, and pool2's gradient into B_DP2. */
static void
rec_cnn_dense (Rec *r, guint n)
{
  RlxVkTrainer *t = r->t;
  guint w3 = (guint) t->model->tensors[4].offset, b3 = (guint) t->model->tensors[5].offset;
  Buf *P2 = &t->bufs[B_P2], *LOG = &t->bufs[B_LOGITS], *DL = &t->bufs[B_DLOGITS];
  Buf *DP2 = &t->bufs[B_DP2], *PR = r->params, *G = &t->grads;

  rec_gemm (r, TRUE, TRUE, n, 10, 1568, P2, 1568, 0, PR, 1568, w3,
            LOG, 10, 0, PR, b3, 0, EPI_BIAS_COL);
  rec_softmax (r, n);

  rec_gemm (r, FALSE, FALSE, 10, 1568, n, DL, 10, 0, P2, 1568, 0, G, 1568, w3, NULL, 0, 0, 0);
  rec_colsum (r, DL, 0, n, 10, 10, G, b3, 1.0f, 0);
  rec_gemm (r, TRUE, FALSE, n, 1568, 10, DL, 10, 0, PR, 1568, w3, DP2, 1568, 0, NULL, 0, 0, 0);
}

static void
record_cnn_gemm (Rec *r, guint n)
{
  RlxVkTrainer *t = r->t;
  const RlxModel *m = t->model;
  guint w1 = (guint) m->tensors[0].offset, b1 = (guint) m->tensors[1].offset;
  guint w2 = (guint) m->tensors[2].offset, b2 = (guint) m->tensors[3].offset;
  Buf *X = &t->bufs[B_X], *A1 = &t->bufs[B_A1], *P1 = &t->bufs[B_P1];
  Buf *COL1 = &t->bufs[B_COL1], *COL2 = &t->bufs[B_COL2], *A2 = &t->bufs[B_A2];
  Buf *P2 = &t->bufs[B_P2], *DP2 = &t->bufs[B_DP2], *DZ2 = &t->bufs[B_DZ2];
  Buf *DZ1 = &t->bufs[B_DZ1];
  Buf *PR = r->params, *G = &t->grads;
  struct { guint32 n, w_off, b_off, x_off, out_off; } c1 = { n, w1, b1, 0, 0 };
  guint rows2 = n * 196, rows1 = n * 784;

  rec_gather (r, n);
  rec_dispatch (r, SH_CONV1, NULL, 0, X, PR, A1, NULL, &c1, sizeof c1,
                groups_for ((guint64) n * 784, 256), 1, 1);
  rec_maxpool (r, A1, P1, n, 16, 28, FALSE);
  if (t->tun.cnn_implicit & CNN_IMPLICIT_FORWARD)
    {
      /* conv2 reads pool1 through im2col addressing in its tile loads */
      t->force_cfg = t->tun.fwd2.bm != 0 ? &t->tun.fwd2 : NULL;
      rec_gemm_ex (r, OP_IM2COL, OP_KC, 16, 14, rows2, 32, 144, P1, 0, 0, PR, 144, w2,
                   A2, 32, 0, PR, b2, 0, EPI_BIAS_COL | EPI_RELU);
      t->force_cfg = NULL;
    }
  else
    {
      rec_im2col (r, P1, COL2, n, 16, 14);
      rec_gemm (r, TRUE, TRUE, rows2, 32, 144, COL2, 144, 0, PR, 144, w2,
                A2, 32, 0, PR, b2, 0, EPI_BIAS_COL | EPI_RELU);
    }
  rec_maxpool (r, A2, P2, n, 32, 14, TRUE);
  rec_cnn_dense (r, n);
  /* pool2 + relu2, conv2 */
  rec_poolgrad (r, 0, A2, TRUE, DP2, DZ2, n, 32, 14);
  if (t->tun.cnn_implicit & CNN_IMPLICIT_FORWARD)
    {
      t->force_cfg = t->tun.wgrad2.bm != 0 ? &t->tun.wgrad2 : NULL;
      rec_gemm_ex (r, OP_KN, OP_IM2COL, 16, 14, 32, 144, rows2, DZ2, 32, 0, P1, 0, 0,
                   G, 144, w2, NULL, 0, 0, 0);
      t->force_cfg = NULL;
    }
  else
    rec_gemm (r, FALSE, FALSE, 32, 144, rows2, DZ2, 32, 0, COL2, 144, 0, G, 144, w2, NULL, 0, 0, 0);
  rec_colsum (r, DZ2, 0, rows2, 32, 32, G, b2, 1.0f, 0);
  if (t->tun.cnn_implicit & CNN_IMPLICIT_DATA)
    {
      /* pool1's gradient (NHWC, 16 channels, in conv2's column buffer)
       * straight from conv2's output gradient and weights: no column gradient */
      rec_gemm_ex (r, OP_CONV_DATA, OP_CONV_DATA, 32, 14, rows2, 16, 288, DZ2, 0, 0, PR, 144, w2,
                   COL2, 16, 0, NULL, 0, 0, 0);
      rec_poolgrad (r, 2, A1, FALSE, COL2, DZ1, n, 16, 28);
    }
  else
    {
      /* the column gradient overwrites conv2's im2col, no longer needed */
      t->force_cfg = t->tun.dcol.bm != 0 ? &t->tun.dcol : NULL;
      rec_gemm (r, TRUE, FALSE, rows2, 144, 32, DZ2, 32, 0, PR, 144, w2, COL2, 144, 0, NULL, 0, 0, 0);
      t->force_cfg = NULL;
      /* col2im + pool1 + relu1 (per pooled value, or per pixel) */
      rec_poolgrad (r, t->tun.cnn_pooled ? 3 : 1, A1, FALSE, COL2, DZ1, n, 16, 28);
    }
  /* conv1 */
  rec_im2col (r, X, COL1, n, 1, 28);
  rec_gemm (r, FALSE, FALSE, 16, 9, rows1, DZ1, 16, 0, COL1, 9, 0, G, 9, w1, NULL, 0, 0, 0);
  rec_colsum (r, DZ1, 0, rows1, 16, 16, G, b1, 1.0f, 0);
}

/* mnist-cnn with fused direct convolutions (RLX_VK_CNN=direct, the
 * default): conv1+pool1 and conv2+pool2 write only the pooled outputs (and
 * pool2's choices); the backward pass never expands a gradient to a full
 * conv output: conv2's weight gradient reads the 49 chosen pixels per
 * channel (cnn2w), and pool1's gradient, pool1/ReLU1 backward and conv1's
 * weight gradient are one pass per sample (cnn1w). */
static void
record_cnn_direct (Rec *r, guint n)
{
  RlxVkTrainer *t = r->t;
  const RlxModel *m = t->model;
  guint w1 = (guint) m->tensors[0].offset, b1 = (guint) m->tensors[1].offset;
  guint w2 = (guint) m->tensors[2].offset, b2 = (guint) m->tensors[3].offset;
  Buf *X = &t->bufs[B_X], *P1 = &t->bufs[B_P1], *P2 = &t->bufs[B_P2];
  Buf *DP2 = &t->bufs[B_DP2], *PR = r->params, *G = &t->grads;
  Buf *W2P = &t->bufs[B_PART], *W1P = &t->bufs[B_DZ1];
  guint groups = MIN (n, 65535u);
  guint code_off = n * 1568;
  /* conv2's weight gradient: about cnn_w2_groups workgroups of a few
   * samples each (8 at batch 1024) */
  guint per_wg = (n + t->tun.cnn_w2_groups - 1) / t->tun.cnn_w2_groups;
  guint wgs2 = (n + per_wg - 1) / per_wg;
  struct { guint32 n, w_off, b_off, x_off, out_off; } k1 = { n, w1, b1, 0, 0 };
  struct { guint32 n, w_off, b_off, p1_off, out_off, code_off; } k2 = { n, w2, b2, 0, 0, code_off };
  struct { guint32 n, per_wg, p1_off, dp_off, code_off, out_off; } k3 = {
    n, per_wg, 0, 0, code_off, 0
  };
  struct { guint32 n, w1_off, w2_off, x_off, dp_off, code_off, out_off; } k4 = {
    n, w1, w2, 0, 0, code_off, 0
  };

  /* the shaders write w and b of a layer as one run */
  g_assert (b1 == w1 + 144 && b2 == w2 + 4608);
  g_assert ((guint64) wgs2 * 4640 <= PART_FLOATS);

  rec_gather (r, n);
  rec_dispatch (r, SH_CNN1, NULL, 0, X, PR, P1, NULL, &k1, sizeof k1, groups, 1, 1);
  rec_dispatch (r, SH_CNN2, &t->tun.cnn2_cic, 1, P1, PR, P2, NULL, &k2, sizeof k2, groups, 1, 1);
  rec_cnn_dense (r, n);

  /* conv2's and conv1's gradients, independent of each other */
  rec_dispatch (r, SH_CNN2W, NULL, 0, P1, DP2, P2, W2P, &k3, sizeof k3, wgs2, 1, 1);
  {
    Buf *bs[N_BINDINGS] = { X, PR, DP2, P2, W1P, NULL };
    rec_dispatch_v (r, SH_CNN1W, &t->tun.cnn1w_scatter, 1, bs, &k4, sizeof k4, groups, 1, 1);
  }
  rec_colsum (r, W2P, 0, wgs2, 4640, 4640, G, w2, 1.0f, 0);
  rec_colsum (r, W1P, 0, n, 160, 160, G, w1, 1.0f, 1u << 20);
}

static void
record_cnn (Rec *r, guint n)
{
  if (r->t->tun.cnn_direct)
    record_cnn_direct (r, n);
  else
    record_cnn_gemm (r, n);
}

static void
step_free (gpointer data)
{
  Step *s = data;

  g_clear_pointer (&s->labels, g_ptr_array_unref);
  g_free (s->prof_us);
  g_free (s);
}

static void
print_profile (RlxVkTrainer *self, Step *s)
{
  double total = 0;

  if (s->prof_steps == 0)
    return;
  for (guint i = 0; i < s->labels->len; i++)
    total += s->prof_us[i];
  g_printerr ("rlx-vk profile: %s batch %u on %s, mean of %u steps, %.1f us in dispatches\n",
              self->model->slug, s->n, self->info->name, s->prof_steps, total / s->prof_steps);
  for (guint i = 0; i < s->labels->len; i++)
    g_printerr ("  %8.1f us  %s\n", s->prof_us[i] / s->prof_steps,
                (char *) g_ptr_array_index (s->labels, i));
}

/* The step at batch @n; @resident: on the replica (the parameters stay
 * on the device, no parameter upload, the gradient is left for the wire
 * pass), else on the parameters the host writes, with the gradient copied
 * out. */
static Step *
record_step (RlxVkTrainer *self, guint n, gboolean resident, guint slot, GError **error)
{
  gsize pbytes = self->model->n_params * sizeof (float);
  VkBufferCopy up_params = { 0, 0, pbytes };
  VkBufferCopy up_idx = { pbytes + (gsize) slot * self->max_batch * sizeof (guint32), 0,
                          n * sizeof (guint32) };
  VkBufferCopy down = { 0, 0, pbytes + sizeof (float) };
  VkMemoryBarrier to_compute = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_SHADER_READ_BIT,
  };
  VkMemoryBarrier to_transfer = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT,
  };
  VkMemoryBarrier to_host = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_HOST_READ_BIT,
  };
  Step *step = g_new0 (Step, 1);
  Recorded first;
  Rec rec;
  VkResult res;

  step->n = n;
  step->labels = g_ptr_array_new_with_free_func (g_free);
  if (!rec_begin (self, &rec, &first, 96, error))
    {
      recorded_clear (self, &first);
      step_free (step);
      return NULL;
    }
  step->pool = first.pool;
  step->cb[0] = first.cb;
  step->n_cb = 1;
  rec.step = step;
  rec.params = resident ? &self->replica : &self->params;

  if (self->queries != VK_NULL_HANDLE)
    {
      self->vk.CmdResetQueryPool (step->cb[0], self->queries, 0, 4);
      self->vk.CmdWriteTimestamp (step->cb[0], VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, self->queries, 0);
    }
  if (self->upload != UPLOAD_BAR && !resident)
    self->vk.CmdCopyBuffer (step->cb[0], self->staging_in.buf, self->params.buf, 1, &up_params);
  self->vk.CmdCopyBuffer (step->cb[0], self->staging_in.buf, self->indices.buf, 1, &up_idx);
  self->vk.CmdPipelineBarrier (step->cb[0], VK_PIPELINE_STAGE_TRANSFER_BIT,
                        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &to_compute, 0, NULL, 0, NULL);
  if (self->queries != VK_NULL_HANDLE)
    self->vk.CmdWriteTimestamp (step->cb[0], VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self->queries, 1);

  if (self->prof != VK_NULL_HANDLE)
    {
      self->vk.CmdResetQueryPool (step->cb[0], self->prof, 0, PROF_MAX);
      self->vk.CmdWriteTimestamp (step->cb[0], VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self->prof, 0);
    }
  if (self->model->id == RLX_MODEL_MNIST_CNN)
    record_cnn (&rec, n);
  else
    record_dense (&rec, n);

  if (self->queries != VK_NULL_HANDLE)
    self->vk.CmdWriteTimestamp (rec.cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self->queries, 2);
  /* resident: the wire pass, submitted right after, reads the gradient and
   * writes timestamp 3 */
  if (!resident)
    {
      self->vk.CmdPipelineBarrier (rec.cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                   VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &to_transfer, 0, NULL, 0, NULL);
      self->vk.CmdCopyBuffer (rec.cb, self->grads.buf, self->staging_out.buf, 1, &down);
      self->vk.CmdPipelineBarrier (rec.cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                                   VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host, 0, NULL, 0, NULL);
      if (self->queries != VK_NULL_HANDLE)
        self->vk.CmdWriteTimestamp (rec.cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self->queries, 3);
    }

  res = self->vk.EndCommandBuffer (rec.cb);
  if (!rec.failed && res != VK_SUCCESS)
    {
      rlx_vk_set_error (error, res, "recording the step");
      rec.failed = TRUE;
    }
  if (rec.failed)
    {
      self->vk.FreeCommandBuffers (self->dev, self->cmdpool, step->n_cb, step->cb);
      self->vk.DestroyDescriptorPool (self->dev, step->pool, NULL);
      step_free (step);
      return NULL;
    }
  step->prof_us = g_new0 (double, step->labels->len + 1);
  return step;
}

/* ------------------------------------------------------------- lifetime */

static gboolean
upload (RlxVkTrainer *self, Buf *dst, const void *data, gsize size, GError **error)
{
  Buf staging = { 0 };
  VkCommandBufferAllocateInfo cai = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
    .commandPool = self->cmdpool,
    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
    .commandBufferCount = 1,
  };
  VkCommandBufferBeginInfo bi = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
    .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
  };
  VkBufferCopy region = { 0, 0, size };
  VkCommandBuffer cb = VK_NULL_HANDLE;
  VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1 };
  VkResult r;
  gboolean ok = FALSE;

  if (!buf_create (self, &staging, size, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, MEM_UPLOAD,
                   "upload staging", error))
    goto out;
  memcpy (staging.map, data, size);
  r = self->vk.AllocateCommandBuffers (self->dev, &cai, &cb);
  if (r == VK_SUCCESS)
    r = self->vk.BeginCommandBuffer (cb, &bi);
  if (r == VK_SUCCESS)
    {
      self->vk.CmdCopyBuffer (cb, staging.buf, dst->buf, 1, &region);
      r = self->vk.EndCommandBuffer (cb);
    }
  si.pCommandBuffers = &cb;
  if (r == VK_SUCCESS)
    r = self->vk.ResetFences (self->dev, 1, &self->fence);
  if (r == VK_SUCCESS)
    r = self->vk.QueueSubmit (self->queue, 1, &si, self->fence);
  if (r == VK_SUCCESS)
    r = self->vk.WaitForFences (self->dev, 1, &self->fence, VK_TRUE, 60ull * 1000000000ull);
  if (r == VK_TIMEOUT)
    r = VK_ERROR_DEVICE_LOST;
  if (r != VK_SUCCESS)
    {
      rlx_vk_set_error (error, r, "uploading the training set to %s", self->info->name);
      goto out;
    }
  ok = TRUE;
out:
  if (cb != VK_NULL_HANDLE)
    self->vk.FreeCommandBuffers (self->dev, self->cmdpool, 1, &cb);
  buf_destroy (self, &staging);
  return ok;
}

RlxVkTrainer *
rlx_vk_trainer_new (guint index, const RlxModel *model, RlxDataset *dataset,
                    guint max_batch, GError **error)
{
  g_autoptr(RlxVkTrainer) self = g_new0 (RlxVkTrainer, 1);
  VkInstance inst;
  guint32 n_phys = 0, nq = 0;
  g_autofree VkPhysicalDevice *phys = NULL;
  g_autofree VkQueueFamilyProperties *qf = NULL;
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = {
    .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
    .queueCount = 1,
    .pQueuePriorities = &prio,
  };
  VkDeviceCreateInfo dci = {
    .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
    .queueCreateInfoCount = 1,
    .pQueueCreateInfos = &qci,
  };
  VkPhysicalDeviceFeatures have, want = { 0 };
  VkDescriptorSetLayoutBinding bindings[N_BINDINGS];
  VkDescriptorSetLayoutCreateInfo dslci = {
    .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
    .bindingCount = N_BINDINGS,
    .pBindings = bindings,
  };
  VkPushConstantRange pcr = { VK_SHADER_STAGE_COMPUTE_BIT, 0, RLX_VK_PUSH_BYTES };
  VkPipelineLayoutCreateInfo plci = {
    .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
    .setLayoutCount = 1,
    .pushConstantRangeCount = 1,
    .pPushConstantRanges = &pcr,
  };
  VkCommandPoolCreateInfo cpci = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
    .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
  };
  VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
  VkQueryPoolCreateInfo qpci = {
    .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
    .queryType = VK_QUERY_TYPE_TIMESTAMP,
    .queryCount = N_QUERIES,
  };
  const VkBufferUsageFlags storage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
  guint64 sizes[N_BUFS];
  g_autofree char *why = NULL;
  g_autofree guint8 *labels = NULL;
  guint n_train;
  gsize pbytes;
  VkResult r;

  g_return_val_if_fail (model != NULL && dataset != NULL && max_batch > 0, NULL);

  self->model = model;
  self->dataset = rlx_dataset_ref (dataset);
  self->max_batch = max_batch;
  self->pipes = g_array_new (FALSE, TRUE, sizeof (PipeEntry));
  /* every RLX_VK_* switch, once (rlx-vk-tunables.c) */
  rlx_vk_tunables_read (&self->tun);
  self->upload = self->tun.upload;
  /* lowered below to the device's limit */
  self->max_groups_x = self->tun.max_groups_x;
  self->steps = g_hash_table_new_full (NULL, NULL, NULL, step_free);

  inst = rlx_vk_instance_acquire (error);
  if (inst == VK_NULL_HANDLE)
    return NULL;
  self->have_instance = TRUE;

  r = rlx_vki.EnumeratePhysicalDevices (inst, &n_phys, NULL);
  if (r == VK_SUCCESS && n_phys > 0)
    {
      phys = g_new0 (VkPhysicalDevice, n_phys);
      r = rlx_vki.EnumeratePhysicalDevices (inst, &n_phys, phys);
    }
  if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || index >= n_phys)
    {
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_NO_DRIVER,
                   "Vulkan device %u is not there (the loader lists %u)", index, n_phys);
      return NULL;
    }
  self->phys = phys[index];
  self->info = g_new0 (RlxVkDeviceInfo, 1);
  rlx_vk_fill_info (self->phys, index, self->info);
  self->max_groups_x = MIN (self->max_groups_x, self->info->max_workgroup_count[0]);
  why = rlx_vk_device_check (self->info, model, max_batch);
  if (why != NULL)
    {
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_UNSUPPORTED, "%s", why);
      return NULL;
    }
  rlx_vki.GetPhysicalDeviceMemoryProperties (self->phys, &self->memprops);

  rlx_vki.GetPhysicalDeviceQueueFamilyProperties (self->phys, &nq, NULL);
  qf = g_new0 (VkQueueFamilyProperties, MAX (nq, 1));
  rlx_vki.GetPhysicalDeviceQueueFamilyProperties (self->phys, &nq, qf);
  self->qfam = G_MAXUINT32;
  /* a compute queue; prefer one that also has graphics (the universal queue) */
  for (guint32 i = 0; i < nq && self->qfam == G_MAXUINT32; i++)
    if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && (qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
      self->qfam = i;
  for (guint32 i = 0; i < nq && self->qfam == G_MAXUINT32; i++)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT)
      self->qfam = i;
  g_assert (self->qfam != G_MAXUINT32);   /* device_check asked for one */
  qci.queueFamilyIndex = self->qfam;
  /* 64-bit shader arithmetic, where the device has it, for the wire passes
   * of the resident parameters (shaders/wire.glsl) */
  rlx_vki.GetPhysicalDeviceFeatures (self->phys, &have);
  if (have.shaderFloat64 && have.shaderInt64)
    {
      want.shaderFloat64 = VK_TRUE;
      want.shaderInt64 = VK_TRUE;
      dci.pEnabledFeatures = &want;
      self->has_f64 = TRUE;
    }

  r = rlx_vki.CreateDevice (self->phys, &dci, NULL, &self->dev);
  if (r != VK_SUCCESS)
    {
      self->dev = VK_NULL_HANDLE;
      rlx_vk_set_error (error, r, "opening %s", self->info->name);
      return NULL;
    }
  if (!rlx_vk_load_device (self->dev, &self->vk, error))
    {
      PFN_vkDestroyDevice destroy =
        (PFN_vkDestroyDevice) rlx_vki.GetDeviceProcAddr (self->dev, "vkDestroyDevice");
      if (destroy != NULL)
        destroy (self->dev, NULL);
      self->dev = VK_NULL_HANDLE;
      return NULL;
    }
  self->vk.GetDeviceQueue (self->dev, self->qfam, 0, &self->queue);

  for (guint i = 0; i < N_BINDINGS; i++)
    bindings[i] = (VkDescriptorSetLayoutBinding) {
      i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL
    };
  r = self->vk.CreateDescriptorSetLayout (self->dev, &dslci, NULL, &self->dsl);
  if (r == VK_SUCCESS)
    {
      plci.pSetLayouts = &self->dsl;
      r = self->vk.CreatePipelineLayout (self->dev, &plci, NULL, &self->layout);
    }
  cpci.queueFamilyIndex = self->qfam;
  if (r == VK_SUCCESS)
    r = self->vk.CreateCommandPool (self->dev, &cpci, NULL, &self->cmdpool);
  if (r == VK_SUCCESS)
    r = self->vk.CreateFence (self->dev, &fci, NULL, &self->fence);
  if (r == VK_SUCCESS)
    r = self->vk.CreateFence (self->dev, &fci, NULL, &self->fence2[0]);
  if (r == VK_SUCCESS)
    r = self->vk.CreateFence (self->dev, &fci, NULL, &self->fence2[1]);
  for (guint i = 0; i < 2 && r == VK_SUCCESS; i++)
    r = self->vk.CreateFence (self->dev, &fci, NULL, &self->fence3[i]);
  if (r == VK_SUCCESS && qf[self->qfam].timestampValidBits > 0 && self->info->timestamp_period > 0)
    {
      r = self->vk.CreateQueryPool (self->dev, &qpci, NULL, &self->queries);
      if (r == VK_SUCCESS && self->tun.profile)
        {
          qpci.queryCount = PROF_MAX;
          r = self->vk.CreateQueryPool (self->dev, &qpci, NULL, &self->prof);
        }
    }
  if (r != VK_SUCCESS)
    {
      rlx_vk_set_error (error, r, "setting up %s", self->info->name);
      return NULL;
    }
  timeline_init (self);

  /* the training split, once */
  n_train = rlx_dataset_size (dataset, RLX_SPLIT_TRAIN);
  pbytes = model->n_params * sizeof (float);
  if (!buf_create (self, &self->images, (gsize) n_train * RLX_INPUT_LEN, storage, MEM_DEVICE,
                   "training images", error) ||
      !upload (self, &self->images, rlx_dataset_images (dataset, RLX_SPLIT_TRAIN),
               (gsize) n_train * RLX_INPUT_LEN, error))
    return NULL;
  labels = g_malloc0 ((n_train + 3) / 4 * 4);
  memcpy (labels, rlx_dataset_labels (dataset, RLX_SPLIT_TRAIN), n_train);
  if (!buf_create (self, &self->labels, (n_train + 3) / 4 * 4, storage, MEM_DEVICE,
                   "training labels", error) ||
      !upload (self, &self->labels, labels, (n_train + 3) / 4 * 4, error))
    return NULL;

  /* RLX_VK_UPLOAD=bar: the parameters in device-local memory the host maps
   * (where the device offers it), written by the host, no copy on the GPU */
  if (self->upload == UPLOAD_BAR &&
      !buf_create (self, &self->params, pbytes, storage, MEM_DEVICE_MAPPED, "parameters", NULL))
    {
      buf_destroy (self, &self->params);
      self->upload = UPLOAD_WC;
    }
  if ((self->params.buf == VK_NULL_HANDLE &&
       !buf_create (self, &self->params, pbytes, storage, MEM_DEVICE, "parameters", error)) ||
      !buf_create (self, &self->grads, pbytes + sizeof (float), storage, MEM_DEVICE, "gradient", error) ||
      !buf_create (self, &self->indices, max_batch * sizeof (guint32), storage, MEM_DEVICE,
                   "sample indices", error) ||
      !buf_create (self, &self->staging_in, pbytes + 2 * max_batch * sizeof (guint32),
                   VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
                   self->upload == UPLOAD_CACHED ? MEM_READBACK : MEM_UPLOAD, "upload staging", error) ||
      !buf_create (self, &self->staging_out, pbytes + sizeof (float),
                   VK_BUFFER_USAGE_TRANSFER_DST_BIT, MEM_READBACK, "download staging", error) ||
      !buf_create (self, &self->dummy, 16, storage, MEM_DEVICE, "placeholder", error))
    return NULL;
  rlx_vkt_buffer_floats (model, max_batch, self->tun.cnn_direct, sizes);
  for (guint i = 0; i < N_BUFS; i++)
    if (sizes[i] > 0 &&
        !buf_create (self, &self->bufs[i], sizes[i] * sizeof (float), storage, MEM_DEVICE,
                     rlx_vkt_buf_names[i], error))
      return NULL;

  g_debug ("rlx-vk: %s ready for %s at batch ≤ %u", self->info->name, model->slug, max_batch);
  return g_steal_pointer (&self);
}

void
rlx_vk_trainer_free (RlxVkTrainer *self)
{
  if (self == NULL)
    return;
  if (self->dev != VK_NULL_HANDLE)
    {
      GHashTableIter it;
      gpointer v;

      self->vk.DeviceWaitIdle (self->dev);
      timeline_print (self);
      if (self->tl_pool != VK_NULL_HANDLE)
        {
          self->vk.FreeCommandBuffers (self->dev, self->cmdpool, 2 * TL_RING, self->tl_cb);
          self->vk.DestroyQueryPool (self->dev, self->tl_pool, NULL);
        }
      g_clear_pointer (&self->tl_stats, g_hash_table_unref);
      g_hash_table_iter_init (&it, self->steps);
      while (g_hash_table_iter_next (&it, NULL, &v))
        {
          Step *s = v;
          print_profile (self, s);
          self->vk.FreeCommandBuffers (self->dev, self->cmdpool, s->n_cb, s->cb);
          self->vk.DestroyDescriptorPool (self->dev, s->pool, NULL);
        }
      for (guint i = 0; i < self->pipes->len; i++)
        self->vk.DestroyPipeline (self->dev, g_array_index (self->pipes, PipeEntry, i).pipe, NULL);
      for (guint i = 0; i < N_SHADERS; i++)
        if (self->modules[i] != VK_NULL_HANDLE)
          self->vk.DestroyShaderModule (self->dev, self->modules[i], NULL);
      for (guint i = 0; i < N_BUFS; i++)
        buf_destroy (self, &self->bufs[i]);
      buf_destroy (self, &self->images);
      buf_destroy (self, &self->labels);
      buf_destroy (self, &self->params);
      buf_destroy (self, &self->grads);
      buf_destroy (self, &self->indices);
      buf_destroy (self, &self->staging_in);
      buf_destroy (self, &self->staging_out);
      buf_destroy (self, &self->dummy);
      resident_free (self);
      if (self->queries != VK_NULL_HANDLE)
        self->vk.DestroyQueryPool (self->dev, self->queries, NULL);
      if (self->prof != VK_NULL_HANDLE)
        self->vk.DestroyQueryPool (self->dev, self->prof, NULL);
      if (self->fence != VK_NULL_HANDLE)
        self->vk.DestroyFence (self->dev, self->fence, NULL);
      for (guint i = 0; i < 2; i++)
        if (self->fence2[i] != VK_NULL_HANDLE)
          self->vk.DestroyFence (self->dev, self->fence2[i], NULL);
      for (guint i = 0; i < 2; i++)
        if (self->fence3[i] != VK_NULL_HANDLE)
          self->vk.DestroyFence (self->dev, self->fence3[i], NULL);
      if (self->cmdpool != VK_NULL_HANDLE)
        self->vk.DestroyCommandPool (self->dev, self->cmdpool, NULL);
      if (self->layout != VK_NULL_HANDLE)
        self->vk.DestroyPipelineLayout (self->dev, self->layout, NULL);
      if (self->dsl != VK_NULL_HANDLE)
        self->vk.DestroyDescriptorSetLayout (self->dev, self->dsl, NULL);
      self->vk.DestroyDevice (self->dev, NULL);
    }
  g_clear_pointer (&self->steps, g_hash_table_unref);
  g_clear_pointer (&self->acc_recs, g_hash_table_unref);
  g_clear_pointer (&self->slots, g_array_unref);
  g_free (self->ahead_idx);
  g_free (self->own_idx);
  g_free (self->after_idx);
  g_free (self->after_hint);
  g_clear_pointer (&self->pipes, g_array_unref);
  g_clear_pointer (&self->info, rlx_vk_device_info_free);
  g_clear_pointer (&self->dataset, rlx_dataset_unref);
  g_free (self->lost_reason);
  if (self->have_instance)
    rlx_vk_instance_release ();
  g_free (self);
}

const RlxVkDeviceInfo *
rlx_vk_trainer_device (const RlxVkTrainer *self)
{
  return self->info;
}

void
rlx_vk_trainer_timings (const RlxVkTrainer *self, RlxVkTimings *out)
{
  *out = self->timings;
}

/* Waits for the step's fence. A hardware GPU step takes well under a
 * millisecond for the small models, where a sleeping wait costs tens of
 * microseconds to wake up: poll first, then sleep. (Not on a software
 * device, whose worker threads need the cores.) */
static VkResult
wait_fence (RlxVkTrainer *self, VkFence fence, guint64 timeout_ns)
{
  gint64 t0 = g_get_monotonic_time ();
  VkResult r = VK_NOT_READY;

  if (!rlx_vk_device_is_software (self->info))
    {
      gint64 until = t0 + 20000;
      do
        r = self->vk.GetFenceStatus (self->dev, fence);
      while (r == VK_NOT_READY && g_get_monotonic_time () < until);
    }
  if (r == VK_NOT_READY)
    r = self->vk.WaitForFences (self->dev, 1, &fence, VK_TRUE, timeout_ns);
  self->wait_acc += g_get_monotonic_time () - t0;
  return r;
}

/* RLX_VK_SIMULATE_DEVICE_LOST=N (read when the trainer is made): the Nth
 * step (from 1) reports VK_ERROR_DEVICE_LOST instead of being submitted —
 * how the tests reach the device-lost path on a device that never loses
 * itself. */
static gboolean
simulate_lost (RlxVkTrainer *self)
{
  self->n_submits++;
  return self->tun.lose_at != 0 && self->n_submits == self->tun.lose_at;
}

static gboolean
check_lost (RlxVkTrainer *self, GError **error)
{
  if (!self->lost)
    return TRUE;
  g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_DEVICE_LOST, "%s", self->lost_reason);
  return FALSE;
}

/* The recorded step at batch @n (see record_step), recorded on first use. */
static Step *
get_step_slot (RlxVkTrainer *self, guint n, gboolean resident, guint slot, GError **error)
{
  gpointer key = GUINT_TO_POINTER (n | (resident ? 1u << 31 : 0) | (slot ? 1u << 30 : 0));
  Step *step = g_hash_table_lookup (self->steps, key);

  if (step != NULL)
    return step;
  /* a rank uses a few batch sizes; keep the recordings bounded */
  if (g_hash_table_size (self->steps) >= 16)
    {
      GHashTableIter it;
      gpointer v;
      g_hash_table_iter_init (&it, self->steps);
      while (g_hash_table_iter_next (&it, NULL, &v))
        {
          Step *s = v;
          self->vk.FreeCommandBuffers (self->dev, self->cmdpool, s->n_cb, s->cb);
          self->vk.DestroyDescriptorPool (self->dev, s->pool, NULL);
          g_hash_table_iter_remove (&it);
        }
    }
  step = record_step (self, n, resident, slot, error);
  if (step != NULL)
    g_hash_table_insert (self->steps, key, step);
  return step;
}

/* The recorded step at batch @n reading its sample indices from slot 0 of
 * staging_in. */
static Step *
get_step (RlxVkTrainer *self, guint n, gboolean resident, GError **error)
{
  return get_step_slot (self, n, resident, 0, error);
}

/* @r: what submitting (with the fence) returned. Waits for the fence and
 * turns a failure into an error naming @what; a lost device, or work that
 * never finishes, is lost for good (every later call fails the same way). */
static gboolean
wait_submission (RlxVkTrainer *self, VkFence fence, VkResult r, const char *what, GError **error)
{
  g_autoptr(GError) local = NULL;

  if (r == VK_SUCCESS)
    {
      r = wait_fence (self, fence, 120ull * 1000000000ull);
      if (r == VK_TIMEOUT)
        {
          self->lost = TRUE;
          self->lost_reason = g_strdup_printf ("%s did not finish %s in 120 s; this rank cannot "
                                               "compute on it any more — restart it, or use "
                                               "--backend cpu", self->info->name, what);
          g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_DEVICE_LOST, "%s", self->lost_reason);
          return FALSE;
        }
    }
  if (r == VK_SUCCESS)
    {
      timeline_collect (self);
      return TRUE;
    }
  rlx_vk_set_error (&local, r, "%s on %s", what, self->info->name);
  if (r == VK_ERROR_DEVICE_LOST)
    {
      self->lost = TRUE;
      self->lost_reason = g_strdup (local->message);
    }
  g_propagate_error (error, g_steal_pointer (&local));
  return FALSE;
}

/* ── RLX_VK_TIMELINE ─────────────────────────────────────────────────────
 *
 * Each submission is bracketed by two timestamps written at the bottom of
 * the pipe: the first when all work before it is done, or when it reached
 * the device if that was later; the second when its own work is done. So
 * "busy" is the device's time on it, and "idle" the time the device had
 * nothing to do before it (the host was late with it). */

static void
timeline_init (RlxVkTrainer *self)
{
  VkQueryPoolCreateInfo qpci = {
    .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
    .queryType = VK_QUERY_TYPE_TIMESTAMP,
    .queryCount = 2 * TL_RING,
  };
  VkCommandBufferAllocateInfo cai = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
    .commandPool = self->cmdpool,
    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
    .commandBufferCount = 2 * TL_RING,
  };
  VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO };

  if (!self->tun.timeline || self->queries == VK_NULL_HANDLE)
    return;
  if (self->vk.CreateQueryPool (self->dev, &qpci, NULL, &self->tl_pool) != VK_SUCCESS)
    {
      self->tl_pool = VK_NULL_HANDLE;
      return;
    }
  if (self->vk.AllocateCommandBuffers (self->dev, &cai, self->tl_cb) != VK_SUCCESS)
    {
      self->vk.DestroyQueryPool (self->dev, self->tl_pool, NULL);
      self->tl_pool = VK_NULL_HANDLE;
      return;
    }
  for (guint j = 0; j < 2 * TL_RING; j++)
    {
      self->vk.BeginCommandBuffer (self->tl_cb[j], &bi);
      self->vk.CmdResetQueryPool (self->tl_cb[j], self->tl_pool, j, 1);
      self->vk.CmdWriteTimestamp (self->tl_cb[j], VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                                  self->tl_pool, j);
      self->vk.EndCommandBuffer (self->tl_cb[j]);
    }
  self->tl_stats = g_hash_table_new_full (g_str_hash, g_str_equal, NULL,
                                          (GDestroyNotify) g_array_unref);
}

/* Reads the ring's completed entries, in submission order. */
static void
timeline_collect (RlxVkTrainer *self)
{
  if (self->tl_pool == VK_NULL_HANDLE)
    return;
  while (self->tl_label[self->tl_read] != NULL)
    {
      guint e = self->tl_read;
      guint64 ts[4];
      double tick = self->info->timestamp_period / 1000.0, pair[2];
      GArray *a;
      VkResult r = self->vk.GetQueryPoolResults (self->dev, self->tl_pool, 2 * e, 2, sizeof ts, ts,
                                                 2 * sizeof (guint64),
                                                 VK_QUERY_RESULT_64_BIT |
                                                 VK_QUERY_RESULT_WITH_AVAILABILITY_BIT);

      if ((r != VK_SUCCESS && r != VK_NOT_READY) || ts[1] == 0 || ts[3] == 0)
        return;
      pair[0] = ts[2] > ts[0] ? (double) (ts[2] - ts[0]) * tick : 0;
      pair[1] = self->tl_prev_end != 0 && ts[0] > self->tl_prev_end
                ? (double) (ts[0] - self->tl_prev_end) * tick : 0;
      self->tl_prev_end = ts[2];
      a = g_hash_table_lookup (self->tl_stats, self->tl_label[e]);
      if (a == NULL)
        {
          a = g_array_new (FALSE, FALSE, sizeof (double));
          g_hash_table_insert (self->tl_stats, (gpointer) self->tl_label[e], a);
        }
      if (a->len < 2 * 200000)
        g_array_append_vals (a, pair, 2);
      self->tl_label[e] = NULL;
      self->tl_read = (e + 1) % TL_RING;
    }
}

static int
cmp_double (gconstpointer a, gconstpointer b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

/* Per kind: the count, then the device's time on it and its idle time
 * before it — median, 90th and 99th percentile, and the mean without the
 * first 50 of the kind (the start-up: datasets uploaded, pipelines made). */
static void
timeline_print (RlxVkTrainer *self)
{
  GHashTableIter it;
  gpointer k, v;

  if (self->tl_pool == VK_NULL_HANDLE)
    return;
  timeline_collect (self);
  g_printerr ("rlx-vk timeline: %s on %s, per kind of submission: count; the device's time "
              "on it and its idle time before it, us: median / p90 / p99 / mean after the "
              "first 50\n", self->model->slug, self->info->name);
  g_hash_table_iter_init (&it, self->tl_stats);
  while (g_hash_table_iter_next (&it, &k, &v))
    {
      GArray *a = v;
      guint m = a->len / 2, skip = m > 100 ? 50 : 0;
      g_autofree double *busy = g_new (double, m), *idle = g_new (double, m);
      double sb = 0, si = 0;

      if (m == 0)
        continue;
      for (guint i = 0; i < m; i++)
        {
          busy[i] = g_array_index (a, double, 2 * i);
          idle[i] = g_array_index (a, double, 2 * i + 1);
          if (i >= skip)
            {
              sb += busy[i];
              si += idle[i];
            }
        }
      qsort (busy, m, sizeof (double), cmp_double);
      qsort (idle, m, sizeof (double), cmp_double);
      g_printerr ("  %-28s %7u  busy %7.1f / %7.1f / %7.1f / %7.1f  idle before %7.1f / %7.1f / "
                  "%7.1f / %7.1f\n", (char *) k, m, busy[m / 2], busy[m * 9 / 10],
                  busy[m * 99 / 100], sb / (m - skip), idle[m / 2], idle[m * 9 / 10],
                  idle[m * 99 / 100], si / (m - skip));
    }
}

/* Submits @cbs[0..n) as one batch with @fence (VK_NULL_HANDLE: none). */
static VkResult
submit (RlxVkTrainer *self, const VkCommandBuffer *cbs, guint n, VkFence fence,
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

      timeline_collect (self);
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

/* Submits @cbs[0..n) as one batch with the fence and waits. */
static gboolean
submit_wait (RlxVkTrainer *self, const VkCommandBuffer *cbs, guint n, gboolean count_step,
             const char *what, GError **error)
{
  if (!check_lost (self, error))
    return FALSE;
  return wait_submission (self, self->fence, submit (self, cbs, n, self->fence, count_step),
                          what, error);
}

/* µs between timestamps @q and @q + 1 (0 without timestamps). Timestamps
 * are read after the fence of the submission that wrote them, and not while
 * another submission runs: lavapipe waits for the whole queue then, an own
 * gradient computed ahead included (round_times_due). */
static double
query_span (RlxVkTrainer *self, guint q)
{
  guint64 ts[2];

  if (self->queries == VK_NULL_HANDLE ||
      self->vk.GetQueryPoolResults (self->dev, self->queries, q, 2, sizeof ts, ts, sizeof (guint64),
                                    VK_QUERY_RESULT_64_BIT) != VK_SUCCESS)
    return 0;
  return (double) (ts[1] - ts[0]) * self->info->timestamp_period / 1000.0;
}

/* The last step's timestamps (and, with RLX_VK_PROFILE, its dispatches'). */
static void
read_timings (RlxVkTrainer *self, Step *step, gboolean applied)
{
  VkResult r;

  self->timings.apply_us = applied ? query_span (self, Q_APPLY) : 0;
  if (self->queries != VK_NULL_HANDLE)
    {
      guint64 ts[4];
      r = self->vk.GetQueryPoolResults (self->dev, self->queries, 0, 4, sizeof ts, ts, sizeof (guint64),
                                 VK_QUERY_RESULT_64_BIT);
      if (r == VK_SUCCESS)
        {
          double p = self->info->timestamp_period / 1000.0;
          self->timings.upload_us = (double) (ts[1] - ts[0]) * p;
          self->timings.compute_us = (double) (ts[2] - ts[1]) * p;
          self->timings.download_us = (double) (ts[3] - ts[2]) * p;
        }
    }
  if (self->prof != VK_NULL_HANDLE && step->labels->len > 0)
    {
      guint nq = step->labels->len + 1;
      g_autofree guint64 *ts = g_new0 (guint64, nq);
      if (self->vk.GetQueryPoolResults (self->dev, self->prof, 0, nq, nq * sizeof (guint64), ts,
                                 sizeof (guint64),
                                 VK_QUERY_RESULT_64_BIT) == VK_SUCCESS)
        {
          for (guint i = 1; i < nq; i++)
            step->prof_us[i - 1] += (double) (ts[i] - ts[i - 1]) * self->info->timestamp_period / 1000.0;
          step->prof_steps++;
        }
    }
}

gboolean
rlx_vk_trainer_grads (RlxVkTrainer *self, const float *params, const guint32 *indices,
                      guint n, float *loss, float *grads, GError **error)
{
  gsize pbytes = self->model->n_params * sizeof (float), head;
  gint64 t0 = g_get_monotonic_time ();
  g_autofree char *what = NULL;
  Step *step;
  VkResult r;

  g_return_val_if_fail (self != NULL && params != NULL && indices != NULL && loss != NULL, FALSE);
  g_return_val_if_fail (n >= 1 && n <= self->max_batch, FALSE);

  self->wait_acc = 0;
  if (!check_lost (self, error) || !drain_ahead (self, error))
    return FALSE;
  step = get_step (self, n, FALSE, error);
  if (step == NULL)
    return FALSE;

  /* split (rec_split): the first layer's parameters, submit its part, then
   * the rest of the parameters while the GPU computes */
  head = step->n_cb == 2 ? step->head_bytes : pbytes;
  rlx_par_copy (self->upload == UPLOAD_BAR ? self->params.map : self->staging_in.map,
              params, head);
  memcpy ((char *) self->staging_in.map + pbytes, indices, n * sizeof (guint32));

  if (step->n_cb == 2)
    {
      r = submit (self, &step->cb[0], 1, VK_NULL_HANDLE, TRUE);
      if (r == VK_SUCCESS)
        {
          rlx_par_copy ((char *) self->params.map + head, (const char *) params + head,
                      pbytes - head);
          r = submit (self, &step->cb[1], 1, self->fence, FALSE);
          if (r != VK_SUCCESS)
            self->vk.QueueWaitIdle (self->queue);   /* the first part may be running */
        }
    }
  else
    {
      self->tl_kind = "plain step";
      r = submit (self, &step->cb[0], 1, self->fence, TRUE);
    }
  self->host_bytes += 2 * pbytes;
  what = g_strdup_printf ("a %s step of %u samples", self->model->slug, n);
  if (!wait_submission (self, self->fence, r, what, error))
    return FALSE;

  *loss = ((const float *) self->staging_out.map)[self->model->n_params];
  if (grads != NULL)
    rlx_par_copy (grads, self->staging_out.map, pbytes);
  read_timings (self, step, FALSE);
  self->timings.wall_us = (double) (g_get_monotonic_time () - t0);
  self->timings.wait_us = (double) self->wait_acc;
  self->timings.host_bytes = self->host_bytes;
  return TRUE;
}

/* ------------------------------------------------------ resident parameters
 *
 * The replica lives in device-local memory across steps. An update's codes
 * (1, 2 or 4 bytes a parameter) wait in codes_in — written by the host
 * straight into memory the GPU reads — until the next submission, whose
 * first command buffer applies them (wire_apply.comp; for codes the host did
 * not check, codes_check.comp + wire_max.comp first, and the apply refuses
 * them when one decodes to NaN or ±Inf). A member's step is then [apply] +
 * [hash] + [forward/backward on the replica] + [wire pass], one submission
 * and one fence. The wire pass (wire_sum, wire_max, wire_quant) turns the
 * gradient into codes with error feedback on the device and copies out only
 * the codes and a summary; the host reads them where the GPU put them.
 *
 * The leader's round: its own gradient stays in the gradient buffer; a
 * member's bucket goes, as received, into a slot (host-written device
 * memory) and is added to the sum by a submission of its own that nobody
 * waits for (round_acc.comp); the finish is one submission: u (round_u),
 * its scale (wire_max), codes + residual + apply (round_quant), the hash
 * (params_hash), the codes and the summary out. The next round's own
 * gradient can follow it on the queue at once (fence2).
 *
 * The arithmetic is the wire's, bit for bit (shaders/wire.glsl says how).
 * Summaries live at meta_off + region · META_WORDS in wire_s and, for the
 * host, at readback_meta + region · META_WORDS · 4 in readback (the round's
 * in round_rb, after its codes).
 */

#define WIRE_ELEMS_PER_GROUP 4096u

enum { REG_WIRE, REG_OWN, REG_ROUND, REG_APPLY, REG_HASH, N_REGIONS };

static const guint code_size[4] = { 4, 2, 1, 1 };

/* Everything recorded before, compute or transfer, done and visible to
 * what comes after on the device, and with @host to the host too (a pass
 * that wrote its results straight into host-visible memory). */
static void
rec_all_barrier (Rec *r, gboolean host)
{
  VkMemoryBarrier mb = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                     (host ? VK_ACCESS_HOST_READ_BIT : 0),
  };
  const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT |
                                      VK_PIPELINE_STAGE_TRANSFER_BIT;

  r->t->vk.CmdPipelineBarrier (r->cb, stages, stages | (host ? VK_PIPELINE_STAGE_HOST_BIT : 0),
                               0, 1, &mb, 0, NULL, 0, NULL);
  r->dirty_w = r->dirty_r = 0;
}

static void
rec_full_barrier (Rec *r)
{
  rec_all_barrier (r, FALSE);
}

static void
rec_to_host (Rec *r)
{
  VkMemoryBarrier to_host = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_HOST_READ_BIT,
  };
  r->t->vk.CmdPipelineBarrier (r->cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                               0, 1, &to_host, 0, NULL, 0, NULL);
}

static void
rec_timestamp (Rec *r, guint q, gboolean start)
{
  RlxVkTrainer *t = r->t;

  if (t->queries == VK_NULL_HANDLE)
    return;
  if (start)
    {
      t->vk.CmdResetQueryPool (r->cb, t->queries, q, 2);
      t->vk.CmdWriteTimestamp (r->cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, t->queries, q);
    }
  else
    t->vk.CmdWriteTimestamp (r->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, t->queries, q + 1);
}

/* Starts recording a command buffer with a descriptor pool of its own
 * (@max_sets sets). */
static gboolean
rec_begin (RlxVkTrainer *self, Rec *r, Recorded *out, guint max_sets, GError **error)
{
  VkDescriptorPoolSize ps = { VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, N_BINDINGS * max_sets };
  VkDescriptorPoolCreateInfo dpci = {
    .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
    .maxSets = max_sets,
    .poolSizeCount = 1,
    .pPoolSizes = &ps,
  };
  VkCommandBufferAllocateInfo cai = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
    .commandPool = self->cmdpool,
    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
    .commandBufferCount = 1,
  };
  VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO };
  VkResult res;

  memset (out, 0, sizeof *out);
  res = self->vk.CreateDescriptorPool (self->dev, &dpci, NULL, &out->pool);
  if (res == VK_SUCCESS)
    res = self->vk.AllocateCommandBuffers (self->dev, &cai, &out->cb);
  if (res == VK_SUCCESS)
    res = self->vk.BeginCommandBuffer (out->cb, &bi);
  if (res != VK_SUCCESS)
    {
      rlx_vk_set_error (error, res, "recording a command buffer");
      return FALSE;
    }
  *r = (Rec) { .t = self, .cb = out->cb, .pool = out->pool, .error = error };
  return TRUE;
}

static void
recorded_clear (RlxVkTrainer *self, Recorded *rec)
{
  if (rec->cb != VK_NULL_HANDLE)
    self->vk.FreeCommandBuffers (self->dev, self->cmdpool, 1, &rec->cb);
  if (rec->pool != VK_NULL_HANDLE)
    self->vk.DestroyDescriptorPool (self->dev, rec->pool, NULL);
  memset (rec, 0, sizeof *rec);
}

static gboolean
rec_end (RlxVkTrainer *self, Rec *r, Recorded *out)
{
  VkResult res = self->vk.EndCommandBuffer (r->cb);

  if (!r->failed && res != VK_SUCCESS)
    {
      rlx_vk_set_error (r->error, res, "recording a command buffer");
      r->failed = TRUE;
    }
  if (r->failed)
    recorded_clear (self, out);
  return !r->failed;
}

typedef void (*FillFunc) (Rec *r, gpointer data);

/* @out recorded by @fill on first use (@max_sets descriptor sets), then
 * replayed. */
static const Recorded *
get_recorded (RlxVkTrainer *self, Recorded *out, guint max_sets, FillFunc fill, gpointer data,
              GError **error)
{
  Rec r;

  if (out->cb != VK_NULL_HANDLE)
    return out;
  if (!rec_begin (self, &r, out, max_sets, error))
    {
      recorded_clear (self, out);
      return NULL;
    }
  fill (&r, data);
  return rec_end (self, &r, out) ? out : NULL;
}

/* Records, submits and waits for a command buffer made by @fill; for the
 * rare work (load, read, tests). */
static gboolean
run_once (RlxVkTrainer *self, FillFunc fill, gpointer data, const char *what, GError **error)
{
  Recorded once = { 0 };
  gboolean ok;

  if (get_recorded (self, &once, 4, fill, data, error) == NULL)
    return FALSE;
  ok = submit_wait (self, &once.cb, 1, FALSE, what, error);
  recorded_clear (self, &once);
  return ok;
}

static gsize
region_off (RlxVkTrainer *self, guint region)
{
  return self->meta_off + region * META_WORDS;
}

/* Summary @region of wire_s → @dst at byte @dst_off, for the host. */
static void
rec_copy_region (Rec *r, guint region, Buf *dst, gsize dst_off)
{
  VkBufferCopy meta = { region_off (r->t, region) * 4, dst_off, META_WORDS * 4 };

  r->t->vk.CmdCopyBuffer (r->cb, r->t->wire_s.buf, dst->buf, 1, &meta);
}

/* The host's copy of summary @region (in readback). */
static const guint32 *
readback_region (RlxVkTrainer *self, guint region)
{
  return (const guint32 *) ((const char *) self->readback.map + self->readback_meta +
                            region * META_WORDS * 4);
}

/* wire_max over the partials of @groups workgroups into summary @region:
 * the largest |s| and |g|, the first non-finite, the loss (@loss_index,
 * ~0: none), the scale at @prec (~0: the round's, from the control buffer). */
static void
rec_fold (Rec *r, guint groups, guint region, guint32 loss_index, guint32 prec)
{
  RlxVkTrainer *t = r->t;
  struct { guint32 n_groups, part_off, meta_off, loss_index, prec, target; } b = {
    groups, (guint32) t->part_off, (guint32) region_off (t, region), loss_index, prec,
    prec < 4 ? t->target[prec] : 0
  };

  rec_dispatch (r, SH_WIRE_MAX, NULL, 0, &t->wire_s, &t->grads, &t->control, NULL, &b, sizeof b,
                1, 1, 1);
}

/* The summary @region of a pass of @groups workgroups: folded by its last
 * workgroup already (fold_last), or by wire_max now, behind a barrier. */
static guint32
fold_meta (RlxVkTrainer *t, guint region)
{
  return t->tun.fold_last ? (guint32) region_off (t, region) : G_MAXUINT32;
}

static void
rec_fold_unless_done (Rec *r, guint groups, guint region, guint32 loss_index, guint32 prec)
{
  if (r->t->tun.fold_last)
    return;
  rec_full_barrier (r);
  rec_fold (r, groups, region, loss_index, prec);
}

/* How a pass over @n elements spreads over workgroups that each write one
 * set of partials (at most WIRE_MAX_GROUPS). */
static guint
wire_groups (guint n, guint *per_group)
{
  guint groups = CLAMP ((n + WIRE_ELEMS_PER_GROUP - 1) / WIRE_ELEMS_PER_GROUP, 1, WIRE_MAX_GROUPS);

  *per_group = (n + groups - 1) / groups;
  return groups;
}

/* The hash of replica[0, @n) into summary @region (rlx_params_hash's tree):
 * first the chunk hashes — a chain of 2048 rounds a lane, whatever the
 * model's size, so the caller records what can run beside it (a download)
 * right after — then, behind a barrier, one invocation combines them. */
static void
rec_hash_chunks (Rec *r, guint n)
{
  RlxVkTrainer *t = r->t;
  guint chunks = (n + HASH_CHUNK - 1) / HASH_CHUNK;

  G_STATIC_ASSERT (HASH_CHUNK == RLX_PARAMS_HASH_CHUNK);
  struct { guint32 n, mode, meta_off; } pc = { n, 0, 0 };

  rec_dispatch (r, SH_PARAMS_HASH, NULL, 0, &t->replica, &t->hash_part, &t->wire_s, NULL,
                &pc, sizeof pc, (chunks + HASH_CHUNKS_PER_GROUP - 1) / HASH_CHUNKS_PER_GROUP, 1, 1);
}

static void
rec_hash_combine (Rec *r, guint n, guint region)
{
  RlxVkTrainer *t = r->t;
  struct { guint32 n, mode, meta_off; } pc = { n, 1, (guint32) region_off (t, region) };

  rec_full_barrier (r);
  rec_dispatch (r, SH_PARAMS_HASH, NULL, 0, &t->replica, &t->hash_part, &t->wire_s, NULL,
                &pc, sizeof pc, 1, 1, 1);
  rec_full_barrier (r);
}

static void
rec_hash (Rec *r, guint n, guint region)
{
  rec_full_barrier (r);
  rec_hash_chunks (r, n);
  rec_hash_combine (r, n, region);
}

/* The wire pass over gradient elements [0, @n): codes at @prec into the
 * readback buffer, the summary after them (REG_WIRE); with @hash the
 * replica's hash too (REG_HASH), its chunks beside the codes' download. */
static void
rec_wire_pass (Rec *r, guint n, guint prec, gboolean feedback, guint32 loss_index, gboolean hash)
{
  RlxVkTrainer *t = r->t;
  guint per_group, groups = wire_groups (n, &per_group);
  struct { guint32 n, per_group, part_off, flags, fold_meta, count_off, loss_index, prec,
           target; } a = {
    n, per_group, (guint32) t->part_off, feedback ? 1 : 0, fold_meta (t, REG_WIRE),
    (guint32) t->count_off, loss_index, prec, t->target[prec]
  };
  struct { guint32 n, prec, feedback, meta_off; } c = {
    n, prec, feedback, (guint32) region_off (t, REG_WIRE)
  };
  VkBufferCopy codes = { 0, 0, ((gsize) n * code_size[prec] + 3) / 4 * 4 };

  rec_full_barrier (r);
  rec_dispatch (r, SH_WIRE_SUM, NULL, 0, &t->grads, &t->residual, &t->control, &t->wire_s,
                &a, sizeof a, groups, 1, 1);
  rec_fold_unless_done (r, groups, REG_WIRE, loss_index, prec);
  {
    Buf *bs[N_BINDINGS] = { &t->wire_s, &t->tables, &t->residual, &t->codes_dev, &t->control, NULL };
    rec_dispatch_v (r, SH_WIRE_QUANT, NULL, 0, bs, &c, sizeof c, groups_for ((n + 3) / 4, 256), 1, 1);
  }
  rec_full_barrier (r);
  if (hash)
    {
      rec_timestamp (r, Q_HASH, TRUE);
      rec_hash_chunks (r, (guint) t->model->n_params);
    }
  t->vk.CmdCopyBuffer (r->cb, t->codes_dev.buf, t->readback.buf, 1, &codes);
  rec_copy_region (r, REG_WIRE, &t->readback, t->readback_meta);
  if (hash)
    {
      rec_hash_combine (r, (guint) t->model->n_params, REG_HASH);
      rec_copy_region (r, REG_HASH, &t->readback, t->readback_meta + REG_HASH * META_WORDS * 4);
      rec_timestamp (r, Q_HASH, FALSE);
    }
  rec_to_host (r);
  if (t->queries != VK_NULL_HANDLE && loss_index != G_MAXUINT32)
    t->vk.CmdWriteTimestamp (r->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, t->queries, Q_STEP + 3);
}

/* replica[0, @n) -= decode (codes_in) at @prec; @checked: codes_check and a
 * fold first (REG_APPLY, copied out), and nothing is applied when a code
 * decodes to NaN or ±Inf */
static void
rec_apply (Rec *r, guint n, guint prec, gboolean checked)
{
  RlxVkTrainer *t = r->t;
  struct { guint32 n, prec, check_off; } pc = { n, prec, G_MAXUINT32 };
  gboolean timed = r->step == NULL && n == t->model->n_params;

  if (timed)
    rec_timestamp (r, Q_APPLY, TRUE);
  rec_full_barrier (r);
  if (checked)
    {
      guint per_group, groups = wire_groups (n, &per_group);
      struct { guint32 n, per_group, part_off, prec; } c = {
        n, per_group, (guint32) t->part_off, prec
      };

      rec_dispatch (r, SH_CODES_CHECK, NULL, 0, &t->codes_in, &t->wire_s, NULL, NULL, &c, sizeof c,
                    groups, 1, 1);
      rec_full_barrier (r);
      rec_fold (r, groups, REG_APPLY, G_MAXUINT32, WIRE_F32);
      rec_full_barrier (r);
      pc.check_off = (guint32) region_off (t, REG_APPLY) + META_BAD;
    }
  {
    Buf *bs[N_BINDINGS] = { &t->codes_in, &t->tables, &t->control, &t->replica, &t->wire_s, NULL };
    rec_dispatch_v (r, SH_WIRE_APPLY, NULL, 0, bs, &pc, sizeof pc, groups_for ((n + 3) / 4, 256), 1, 1);
  }
  rec_full_barrier (r);
  if (checked)
    {
      rec_copy_region (r, REG_APPLY, &t->readback, t->readback_meta + REG_APPLY * META_WORDS * 4);
      rec_to_host (r);
    }
  if (timed)
    rec_timestamp (r, Q_APPLY, FALSE);
}

static void
fill_hash (Rec *r, gpointer data)
{
  RlxVkTrainer *t = r->t;

  rec_timestamp (r, Q_HASH, TRUE);
  rec_hash (r, GPOINTER_TO_UINT (data), REG_HASH);
  rec_copy_region (r, REG_HASH, &t->readback, t->readback_meta + REG_HASH * META_WORDS * 4);
  rec_to_host (r);
  rec_timestamp (r, Q_HASH, FALSE);
}

static const Recorded *
get_hash_rec (RlxVkTrainer *self, GError **error)
{
  return get_recorded (self, &self->hash_rec, 2, fill_hash,
                       GUINT_TO_POINTER ((guint) self->model->n_params), error);
}

/* The own gradient's check (wire_sum without writing s, then a fold: the
 * largest |g|, the first non-finite, the loss) into REG_OWN, copied out. */
/* Where the host finds the summary of an own gradient of @slot: two, so
 * that one can be read while the next own gradient is on the queue. */
static guint
own_region (guint slot)
{
  return slot == 0 ? REG_OWN : N_REGIONS;
}

static void
fill_own (Rec *r, gpointer data)
{
  RlxVkTrainer *t = r->t;
  guint slot = GPOINTER_TO_UINT (data);
  guint n = (guint) t->model->n_params;
  guint per_group, groups = wire_groups (n, &per_group);
  /* the check alone (flags 2), folded by its last workgroup */
  struct { guint32 n, per_group, part_off, flags, fold_meta, count_off, loss_index, prec,
           target; } a = {
    n, per_group, (guint32) t->part_off, 2, fold_meta (t, REG_OWN),
    (guint32) t->count_off, n, WIRE_F32, t->target[WIRE_F32]
  };

  rec_full_barrier (r);
  rec_dispatch (r, SH_WIRE_SUM, NULL, 0, &t->grads, &t->residual, &t->control, &t->wire_s,
                &a, sizeof a, groups, 1, 1);
  rec_fold_unless_done (r, groups, REG_OWN, n, WIRE_F32);
  rec_full_barrier (r);
  rec_copy_region (r, REG_OWN, &t->readback,
                   t->readback_meta + own_region (slot) * META_WORDS * 4);
  rec_to_host (r);
  if (t->queries != VK_NULL_HANDLE)
    t->vk.CmdWriteTimestamp (r->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, t->queries, Q_STEP + 3);
}

typedef struct {
  guint prec;
  gboolean feedback, hash;
} WireKey;

static void
fill_wire (Rec *r, gpointer data)
{
  WireKey *k = data;

  rec_wire_pass (r, (guint) r->t->model->n_params, k->prec, k->feedback,
                 (guint32) r->t->model->n_params, k->hash);
}

static const Recorded *
get_wire_rec (RlxVkTrainer *self, guint prec, gboolean feedback, gboolean hash, GError **error)
{
  WireKey k = { prec, feedback, hash };

  return get_recorded (self, &self->wire_rec[prec][feedback ? 1 : 0][hash ? 1 : 0], 6, fill_wire,
                       &k, error);
}

typedef struct {
  guint n, prec;
  gboolean checked;
} ApplyKey;

static void
fill_apply (Rec *r, gpointer data)
{
  ApplyKey *k = data;
  rec_apply (r, k->n, k->prec, k->checked);
}

static const Recorded *
get_apply_rec (RlxVkTrainer *self, guint prec, gboolean checked, GError **error)
{
  ApplyKey k = { (guint) self->model->n_params, prec, checked };

  return get_recorded (self, &self->apply_rec[prec][checked ? 1 : 0], 4, fill_apply, &k, error);
}

static gboolean
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
static gint64
call_begin (RlxVkTrainer *self)
{
  self->wait_acc = 0;
  return g_get_monotonic_time ();
}

static void
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

/* The own gradient computed ahead (behind a finish) is waited for and
 * forgotten: whoever calls this is about to write what it reads (the
 * sample indices in staging_in, the gradient buffer) or to submit with
 * fence2. */
static gboolean
wait_ahead (RlxVkTrainer *self, const char *what, GError **error)
{
  self->ahead = FALSE;
  if (!wait_submission (self, self->fence2[self->ahead_slot], VK_SUCCESS, what, error))
    return FALSE;
  if (self->round_times_due)
    {
      self->timings.round_us = query_span (self, Q_ROUND);
      self->timings.hash_us = query_span (self, Q_HASH);
      self->round_times_due = FALSE;
    }
  return TRUE;
}

static gboolean
drain_ahead (RlxVkTrainer *self, GError **error)
{
  return (!self->ahead || wait_ahead (self, "the next round's own gradient", error)) &&
         presub_settle (self, error);
}

/* After a submission that applied a queued update checked on the device:
 * FALSE with RLX_VK_ERROR_NOT_FINITE when that update was refused. */
static gboolean
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
static gboolean
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

/* Applies the update waiting in codes_in on its own (with the hash when
 * @hash). An own gradient computed ahead may still be running: it reads the
 * replica, which the update (after it on the queue) only writes behind a
 * barrier, and nothing here touches what it writes. */
static gboolean
flush_update (RlxVkTrainer *self, gboolean hash, GError **error)
{
  VkCommandBuffer cbs[2];
  guint n_cbs = 0;
  gboolean checked;

  if (!presub_settle (self, error) || !take_update (self, cbs, &n_cbs, &checked, error))
    return FALSE;
  if (hash && !self->hash_valid)
    {
      const Recorded *h = get_hash_rec (self, error);
      if (h == NULL)
        return FALSE;
      cbs[n_cbs++] = h->cb;
    }
  if (n_cbs == 0)
    return TRUE;
  if (!submit_wait (self, cbs, n_cbs, FALSE, "applying an update", error))
    return FALSE;
  if (hash && !self->hash_valid)
    {
      const guint32 *m = readback_region (self, REG_HASH);
      self->hash = (guint64) m[META_HASH_HI] << 32 | m[META_HASH_LO];
      self->hash_valid = TRUE;
    }
  return apply_outcome (self, checked, error);
}

static Buf *
slot_buf (RlxVkTrainer *self, guint k)
{
  return &g_array_index (self->slots, Buf, k);
}

static void
resident_free (RlxVkTrainer *self)
{
  for (guint p = 0; p < 4; p++)
    {
      recorded_clear (self, &self->apply_rec[p][0]);
      recorded_clear (self, &self->apply_rec[p][1]);
      for (guint f = 0; f < 4; f++)
        recorded_clear (self, &self->wire_rec[p][f / 2][f % 2]);
      for (guint x = 0; x < 3; x++)
        for (guint w = 0; w < 2; w++)
          recorded_clear (self, &self->finish_rec[x][p][w]);
      for (guint i = 0; i < 2; i++)
        recorded_clear (self, &self->presub_rec[p][i]);
    }
  recorded_clear (self, &self->rollback_rec);
  recorded_clear (self, &self->rollback_lone_rec);
  recorded_clear (self, &self->finish_lone_rec);
  recorded_clear (self, &self->presub_lone_rec[0]);
  recorded_clear (self, &self->presub_lone_rec[1]);
  recorded_clear (self, &self->hash_rec);
  recorded_clear (self, &self->own_rec[0]);
  recorded_clear (self, &self->own_rec[1]);
  if (self->acc_recs != NULL)
    {
      GHashTableIter it;
      gpointer v;

      g_hash_table_iter_init (&it, self->acc_recs);
      while (g_hash_table_iter_next (&it, NULL, &v))
        recorded_clear (self, v);
    }
  for (guint k = 0; self->slots != NULL && k < self->slots->len; k++)
    buf_destroy (self, slot_buf (self, k));
  buf_destroy (self, &self->replica);
  buf_destroy (self, &self->residual);
  buf_destroy (self, &self->wire_s);
  buf_destroy (self, &self->codes_dev);
  buf_destroy (self, &self->tables);
  buf_destroy (self, &self->control);
  buf_destroy (self, &self->codes_in);
  buf_destroy (self, &self->readback);
  buf_destroy (self, &self->hash_part);
  buf_destroy (self, &self->sum);
  buf_destroy (self, &self->ures);
  buf_destroy (self, &self->round_rb);
  for (guint i = 0; i < 2; i++)
    buf_destroy (self, &self->rb_presub[i]);
  buf_destroy (self, &self->replica_bak);
  buf_destroy (self, &self->ures_bak);
  self->presub = FALSE;
}

/* Host-written memory the GPU reads: device-local where the host can map it
 * (RLX_VK_UPLOAD=bar, the default), else host memory. */
static gboolean
buf_create_upload (RlxVkTrainer *self, Buf *b, gsize size, const char *what, GError **error)
{
  const VkBufferUsageFlags storage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_SRC_BIT;

  if (self->upload == UPLOAD_BAR && buf_create (self, b, size, storage, MEM_DEVICE_MAPPED, what, NULL))
    return TRUE;
  buf_destroy (self, b);
  return buf_create (self, b, size, storage, MEM_UPLOAD, what, error);
}

/* The workgroup counter of the passes that fold by their last workgroup
 * starts at 0 (each such pass leaves it at 0). */
static void
fill_count_zero (Rec *r, gpointer data)
{
  r->t->vk.CmdFillBuffer (r->cb, r->t->wire_s.buf, r->t->count_off * 4, 4, 0);
}

gboolean
rlx_vk_trainer_resident_init (RlxVkTrainer *self, const RlxVkWireTables *tables, GError **error)
{
  const VkBufferUsageFlags storage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
  gsize n = self->model->n_params, words = (n + 3) / 4 * 4;
  gsize chunks = (n + HASH_CHUNK - 1) / HASH_CHUNK;
  g_autofree guint32 *tab = NULL;
  guint32 *ctl;

  g_return_val_if_fail (self != NULL && tables != NULL, FALSE);

  if (self->resident_ready)
    return TRUE;
  if (!self->has_f64)
    {
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_UNSUPPORTED,
                   "%s lacks 64-bit shader arithmetic (shaderFloat64 and shaderInt64), which "
                   "applying updates bit-identically to the CPU needs", self->info->name);
      return FALSE;
    }
  self->code_words = words;
  self->part_off = words;
  self->meta_off = words + 3 * WIRE_MAX_GROUPS;
  self->count_off = self->meta_off + N_REGIONS * META_WORDS;
  self->readback_meta = words * 4;
  memcpy (self->target, tables->target, sizeof self->target);
  if (!buf_create (self, &self->replica, n * 4, storage, MEM_DEVICE, "parameter replica", error) ||
      !buf_create (self, &self->residual, 2 * n * 4, storage, MEM_DEVICE, "gradient residual",
                   error) ||
      !buf_create (self, &self->wire_s, (self->meta_off + N_REGIONS * META_WORDS + 1) * 4,
                   storage, MEM_DEVICE, "wire scratch", error) ||
      !buf_create (self, &self->codes_dev, words * 4, storage, MEM_DEVICE, "gradient codes", error) ||
      !buf_create (self, &self->tables, TAB_WORDS * 4, storage, MEM_DEVICE, "wire tables", error) ||
      !buf_create (self, &self->control, CTL_WORDS * 4, storage, MEM_UPLOAD, "wire control", error) ||
      !buf_create (self, &self->readback, (words + (N_REGIONS + 1) * META_WORDS) * 4, storage,
                   MEM_READBACK, "codes download", error) ||
      !buf_create (self, &self->hash_part, chunks * 8, storage, MEM_DEVICE, "hash chunks", error) ||
      !buf_create_upload (self, &self->codes_in, words * 4, "update codes", error))
    return FALSE;

  tab = g_new0 (guint32, TAB_WORDS);
  memcpy (tab + TAB_BRIDGE_E4M3, tables->bridge[0], 65536);
  memcpy (tab + TAB_BRIDGE_E5M2, tables->bridge[1], 65536);
  memcpy (tab + TAB_F8_E4M3, tables->f8_bits[0], 256 * 4);
  memcpy (tab + TAB_F8_E5M2, tables->f8_bits[1], 256 * 4);
  if (!upload (self, &self->tables, tab, TAB_WORDS * 4, error) ||
      !run_once (self, fill_count_zero, NULL, "clearing the wire scratch", error))
    return FALSE;
  ctl = self->control.map;
  memset (ctl, 0, CTL_WORDS * 4);
  ctl[CTL_POISON_INDEX] = G_MAXUINT32;
  ctl[CTL_POISON_AHEAD] = ctl[CTL_POISON_AHEAD + 2] = G_MAXUINT32;
  for (guint p = 0; p < 4; p++)
    ctl[CTL_TARGET + p] = tables->target[p];
  self->pending = -1;
  self->residual_zero = TRUE;
  self->ures_zero = TRUE;
  self->poison_index = G_MAXUINT32;
  self->slots = g_array_new (FALSE, TRUE, sizeof (Buf));
  self->acc_recs = g_hash_table_new_full (NULL, NULL, NULL, g_free);
  self->resident_ready = TRUE;
  return TRUE;
}

static void
fill_load (Rec *r, gpointer data)
{
  VkBufferCopy region = { 0, 0, r->t->model->n_params * 4 };

  rec_full_barrier (r);
  r->t->vk.CmdCopyBuffer (r->cb, r->t->codes_in.buf, r->t->replica.buf, 1, &region);
  rec_hash (r, (guint) r->t->model->n_params, REG_HASH);
  rec_copy_region (r, REG_HASH, &r->t->readback, r->t->readback_meta + REG_HASH * META_WORDS * 4);
  rec_to_host (r);
}

/* the replica changed: what was computed from the old one is stale */
static void
replica_changed (RlxVkTrainer *self)
{
  self->replica_gen++;
  self->hash_valid = FALSE;
}

gboolean
rlx_vk_trainer_load_params (RlxVkTrainer *self, const float *params, GError **error)
{
  gint64 t0 = call_begin (self);
  const guint32 *m;

  g_return_val_if_fail (self != NULL && params != NULL, FALSE);

  if (!need_resident (self, error) || !drain_ahead (self, error))
    return FALSE;
  /* an update still waiting was for the replica this replaces, and so was
   * a round in progress */
  self->pending = -1;
  rlx_vk_trainer_round_cancel (self);
  replica_changed (self);
  rlx_par_copy (self->codes_in.map, params, self->model->n_params * 4);
  self->host_bytes += self->model->n_params * 4;
  if (!run_once (self, fill_load, NULL, "loading the parameters", error))
    return FALSE;
  m = readback_region (self, REG_HASH);
  self->hash = (guint64) m[META_HASH_HI] << 32 | m[META_HASH_LO];
  self->hash_valid = TRUE;
  call_end (self, t0);
  return TRUE;
}

static void
fill_read (Rec *r, gpointer data)
{
  VkBufferCopy region = { 0, 0, GPOINTER_TO_SIZE (data) * 4 };

  rec_full_barrier (r);
  r->t->vk.CmdCopyBuffer (r->cb, r->t->replica.buf, r->t->readback.buf, 1, &region);
  rec_full_barrier (r);
  rec_to_host (r);
}

static gboolean
read_replica (RlxVkTrainer *self, float *params, gsize n, GError **error)
{
  if (!flush_update (self, FALSE, error) ||
      !run_once (self, fill_read, GSIZE_TO_POINTER (n), "reading the parameters", error))
    return FALSE;
  rlx_par_copy (params, self->readback.map, n * 4);
  self->host_bytes += n * 4;
  return TRUE;
}

gboolean
rlx_vk_trainer_read_params (RlxVkTrainer *self, float *params, GError **error)
{
  g_return_val_if_fail (self != NULL && params != NULL, FALSE);

  /* (an own gradient computed ahead stays: it only reads the replica) */
  return need_resident (self, error) && presub_settle (self, error) &&
         read_replica (self, params, self->model->n_params, error);
}

gboolean
rlx_vk_trainer_params_hash (RlxVkTrainer *self, guint64 *hash, GError **error)
{
  gint64 t0 = call_begin (self);

  g_return_val_if_fail (self != NULL && hash != NULL, FALSE);

  if (!need_resident (self, error))
    return FALSE;
  /* asked for once: from now on every step hashes the replica too */
  self->hash_each_step = TRUE;
  if (!self->hash_valid && !flush_update (self, TRUE, error))
    return FALSE;
  *hash = self->hash;
  call_end (self, t0);
  return TRUE;
}

void *
rlx_vk_trainer_update_map (RlxVkTrainer *self, GError **error)
{
  g_return_val_if_fail (self != NULL, NULL);

  if (!need_resident (self, error))
    return NULL;
  /* codes_in holds one update: an earlier one goes first, on its own */
  if (!flush_update (self, FALSE, error))
    return NULL;
  return self->codes_in.map;
}

void
rlx_vk_trainer_update_commit (RlxVkTrainer *self, guint prec, double inv, gboolean checked)
{
  guint32 *ctl;

  g_return_if_fail (self != NULL && self->resident_ready && prec < 4);

  ctl = self->control.map;
  memcpy (&ctl[CTL_INV_LO], &inv, sizeof inv);
  self->pending = (int) prec;
  self->pending_checked = checked;
  replica_changed (self);
}

gboolean
rlx_vk_trainer_queue_update (RlxVkTrainer *self, const void *codes, guint prec, double inv,
                             GError **error)
{
  void *dst;

  g_return_val_if_fail (self != NULL && codes != NULL && prec < 4, FALSE);

  dst = rlx_vk_trainer_update_map (self, error);
  if (dst == NULL)
    return FALSE;
  rlx_par_copy (dst, codes, self->model->n_params * code_size[prec]);
  self->host_bytes += self->model->n_params * code_size[prec];
  rlx_vk_trainer_update_commit (self, prec, inv, FALSE);
  return TRUE;
}

void
rlx_vk_trainer_reset_feedback (RlxVkTrainer *self)
{
  g_return_if_fail (self != NULL);
  self->residual_zero = TRUE;
  self->res_pending = FALSE;
  self->ures_zero = TRUE;
}

void
rlx_vk_trainer_accept_feedback (RlxVkTrainer *self)
{
  g_return_if_fail (self != NULL);
  if (!self->res_pending)
    return;
  self->res_half ^= 1;
  self->residual_zero = FALSE;
  self->res_pending = FALSE;
}

void
rlx_vk_trainer_set_div_nudge (RlxVkTrainer *self, int ulps)
{
  g_return_if_fail (self != NULL && self->resident_ready);
  ((gint32 *) self->control.map)[CTL_DIV_NUDGE] = ulps;
}

void
rlx_vk_trainer_poison_gradient (RlxVkTrainer *self, guint32 index, guint32 bits)
{
  g_return_if_fail (self != NULL);
  self->poison_index = index;
  self->poison_bits = bits;
}

/* The poison (a test hook) for the next pass that reads the gradient. */
static void
poison_control (RlxVkTrainer *self)
{
  guint32 *ctl = self->control.map;

  ctl[CTL_POISON_INDEX] = self->poison_index;
  ctl[CTL_POISON_BITS] = self->poison_bits;
  self->poison_index = G_MAXUINT32;
}

/* Sets the control words of a wire pass: it reads the accepted residual
 * and writes the new one into the other half. */
static void
wire_control (RlxVkTrainer *self)
{
  guint32 *ctl = self->control.map;
  guint32 n = (guint32) self->model->n_params;

  ctl[CTL_USE_RESIDUAL] = self->residual_zero ? 0 : 1;
  ctl[CTL_RES_IN] = self->res_half * n;
  ctl[CTL_RES_OUT] = (self->res_half ^ 1) * n;
  self->res_pending = FALSE;
  poison_control (self);
}

static void
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

/* After a submission that hashed the replica (REG_HASH). */
static void
take_hash (RlxVkTrainer *self)
{
  const guint32 *m = readback_region (self, REG_HASH);

  self->hash = (guint64) m[META_HASH_HI] << 32 | m[META_HASH_LO];
  self->hash_valid = TRUE;
}

gboolean
rlx_vk_trainer_grads_wire (RlxVkTrainer *self, const guint32 *indices, guint n, guint prec,
                           gboolean feedback, const void **codes, RlxVkWireSummary *summary,
                           GError **error)
{
  gsize pbytes = self->model->n_params * sizeof (float);
  gint64 t0 = call_begin (self);
  g_autofree char *what = NULL;
  VkCommandBuffer cbs[3];
  const Recorded *wire;
  guint n_cbs = 0;
  gboolean checked = FALSE, applied, hash;
  Step *step;

  g_return_val_if_fail (self != NULL && indices != NULL && codes != NULL && summary != NULL, FALSE);
  g_return_val_if_fail (n >= 1 && n <= self->max_batch && prec < 4, FALSE);

  if (!need_resident (self, error) || !drain_ahead (self, error))
    return FALSE;
  /* the replica's hash rides along once hashes were asked for; the step
   * does not change the replica, so it is taken beside the codes' download */
  hash = self->hash_each_step && !self->hash_valid;
  step = get_step (self, n, TRUE, error);
  wire = step != NULL ? get_wire_rec (self, prec, feedback, hash, error) : NULL;
  if (wire == NULL)
    return FALSE;
  applied = self->pending >= 0;
  if (!take_update (self, cbs, &n_cbs, &checked, error))
    return FALSE;
  g_assert (step->n_cb == 1);
  cbs[n_cbs++] = step->cb[0];
  cbs[n_cbs++] = wire->cb;

  memcpy ((char *) self->staging_in.map + pbytes, indices, n * sizeof (guint32));
  wire_control (self);
  what = g_strdup_printf ("a %s step of %u samples", self->model->slug, n);
  if (!submit_wait (self, cbs, n_cbs, TRUE, what, error))
    return FALSE;
  if (hash)
    take_hash (self);
  if (!apply_outcome (self, checked, error))
    return FALSE;
  summary_of (readback_region (self, REG_WIRE), summary);
  /* a new residual waits for rlx_vk_trainer_accept_feedback */
  self->res_pending = feedback && summary->smax_bits < 0x7f800000u;
  *codes = self->readback.map;
  read_timings (self, step, applied);
  self->timings.hash_us = hash ? query_span (self, Q_HASH) : 0;
  call_end (self, t0);
  return TRUE;
}

/* ── the leader's round ── */

/* Which source an accumulation or the finish reads: the own gradient, or
 * slot k. */
#define SRC_OWN (-1)

static guint
acc_key (guint mode, int a, int b)
{
  return (mode << 30) | ((guint) (a + 1) << 15) | (guint) (b + 1);
}

static Buf *
src_buf (RlxVkTrainer *self, int src)
{
  return src == SRC_OWN ? &self->grads : slot_buf (self, (guint) src);
}

typedef struct {
  guint mode;
  int a, b;
} AccKey;

static void
fill_acc (Rec *r, gpointer data)
{
  AccKey *k = data;
  RlxVkTrainer *t = r->t;
  guint n = (guint) t->model->n_params;
  struct { guint32 n, mode, a_own, b_own, param_off; } pc = {
    n, k->mode, k->a == SRC_OWN, k->b == SRC_OWN, (guint32) t->code_words
  };
  Buf *a = k->mode == 1 ? src_buf (t, k->a) : NULL;

  Buf *bs[N_BINDINGS] = { a, src_buf (t, k->b), &t->tables, &t->sum, &t->control, NULL };

  rec_full_barrier (r);
  rec_dispatch_v (r, SH_ROUND_ACC, NULL, 0, bs, &pc, sizeof pc, groups_for (n, 256), 1, 1);
}

/* The contribution @src joins the round: the second starts the sum (the
 * first waited alone), later ones add to it; the accumulation is submitted
 * now and nobody waits for it (the queue runs it before the finish). */
static gboolean
round_join (RlxVkTrainer *self, int src, guint weight, GError **error)
{
  AccKey k = { self->n_contrib == 1 ? 1 : 0, self->first, src };
  Recorded *rec;
  VkResult r;

  self->total_weight += weight;
  if (self->n_contrib++ == 0)
    {
      self->first = src;
      return TRUE;
    }
  rec = g_hash_table_lookup (self->acc_recs, GUINT_TO_POINTER (acc_key (k.mode, k.a, k.b)));
  if (rec == NULL)
    {
      rec = g_new0 (Recorded, 1);
      if (get_recorded (self, rec, 1, fill_acc, &k, error) == NULL)
        {
          g_free (rec);
          return FALSE;
        }
      g_hash_table_insert (self->acc_recs, GUINT_TO_POINTER (acc_key (k.mode, k.a, k.b)), rec);
    }
  self->tl_kind = "add to the sum";
  r = submit (self, &rec->cb, 1, VK_NULL_HANDLE, FALSE);
  if (r != VK_SUCCESS)
    return wait_submission (self, VK_NULL_HANDLE, r, "adding to the round's sum", error);
  return TRUE;
}

static gboolean
round_buffers (RlxVkTrainer *self, GError **error)
{
  const VkBufferUsageFlags storage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
  gsize n = self->model->n_params;

  if (self->sum.buf != VK_NULL_HANDLE)
    return TRUE;
  if (buf_create (self, &self->sum, n * 4, storage, MEM_DEVICE, "round sum", error) &&
      buf_create (self, &self->ures, n * 4, storage, MEM_DEVICE, "update residual", error) &&
      buf_create (self, &self->round_rb, (self->code_words + META_WORDS) * 4, storage,
                  MEM_READBACK, "update download", error))
    return TRUE;
  buf_destroy (self, &self->sum);
  buf_destroy (self, &self->ures);
  buf_destroy (self, &self->round_rb);
  return FALSE;
}

/* The own step's submission: [queued update] [hash?] [step] [check], its
 * sample indices in @slot of staging_in, its summary at own_region (@slot).
 * @bare: without the check (fold_env), the poison kept for whoever checks
 * it (own_bare). */
static gboolean
own_cbs (RlxVkTrainer *self, const guint32 *indices, guint n, guint slot, gboolean bare,
         VkCommandBuffer *cbs, guint *n_cbs, gboolean *checked, Step **step_out, GError **error)
{
  gsize pbytes = self->model->n_params * sizeof (float);
  const Recorded *own;
  Step *step = get_step_slot (self, n, TRUE, slot, error);

  own = step != NULL ? get_recorded (self, &self->own_rec[slot], 4, fill_own,
                                     GUINT_TO_POINTER (slot), error)
                     : NULL;
  if (own == NULL || !take_update (self, cbs, n_cbs, checked, error))
    return FALSE;
  g_assert (step->n_cb == 1);
  cbs[(*n_cbs)++] = step->cb[0];
  if (!bare)
    cbs[(*n_cbs)++] = own->cb;
  memcpy ((char *) self->staging_in.map + pbytes + (gsize) slot * self->max_batch * 4, indices,
          n * sizeof (guint32));
  self->own_bare[slot] = bare;
  if (bare)
    {
      self->own_poison[slot][0] = self->poison_index;
      self->own_poison[slot][1] = self->poison_bits;
      self->poison_index = G_MAXUINT32;
    }
  else
    poison_control (self);
  *step_out = step;
  return TRUE;
}

/* The check of the own gradient in step @slot, queued without it (the
 * one ahead, just waited for): from the one-pass update made ahead behind
 * it, which folded it in (@folded: @summary made here, as the check would
 * have made it). When that says the gradient is not finite, the update is
 * undone and @ready cleared, so that round_own makes the gradient again with
 * its check (and the poison it had), whose summary names the first element
 * that is not finite as before. With no such update behind it, its check
 * runs now: nothing queued behind the gradient overwrote it (queue_after
 * queues a gradient only behind a one-pass update made ahead). */
static gboolean
ahead_check (RlxVkTrainer *self, guint slot, RlxVkWireSummary *summary, gboolean *ready,
             gboolean *folded, GError **error)
{
  guint32 *ctl = self->control.map;
  const Recorded *rec;

  self->own_bare[slot] = FALSE;
  if (self->presub && self->presub_fold && self->presub_fold_grad == slot)
    {
      const guint32 *m;
      double one = 1.0;

      if (!wait_submission (self, self->fence3[self->presub_slot], VK_SUCCESS,
                            "an update made ahead (the own gradient's check)", error))
        return FALSE;
      m = self->rb_presub[self->presub_slot].map;
      if (m[META_GMAX] >= 0x7f800000u)
        {
          self->poison_index = self->own_poison[slot][0];
          self->poison_bits = self->own_poison[slot][1];
          *ready = FALSE;
          return presub_settle (self, error);
        }
      memset (summary, 0, sizeof *summary);
      summary->smax_bits = summary->gmax_bits = m[META_GMAX];
      summary->first_bad = G_MAXUINT32;
      memcpy (&summary->loss, &m[META_LOSS], 4);
      summary->scale = summary->inv = one;
      self->fold_taken++;
      *folded = TRUE;
      return TRUE;
    }
  rec = get_recorded (self, &self->own_rec[slot], 4, fill_own, GUINT_TO_POINTER (slot), error);
  if (rec == NULL)
    return FALSE;
  ctl[CTL_POISON_INDEX] = self->own_poison[slot][0];
  ctl[CTL_POISON_BITS] = self->own_poison[slot][1];
  self->tl_kind = "own gradient's check";
  return submit_wait (self, &rec->cb, 1, FALSE, "the own gradient's check", error);
}

gboolean
rlx_vk_trainer_round_own (RlxVkTrainer *self, const guint32 *indices, guint n,
                          RlxVkWireSummary *summary, GError **error)
{
  gint64 t0 = call_begin (self);
  g_autofree char *what = NULL;
  gboolean ready = FALSE, checked = FALSE, folded = FALSE;
  guint slot = 0;
  guint32 *ctl;
  float w = (float) n;

  g_return_val_if_fail (self != NULL && indices != NULL && summary != NULL, FALSE);
  g_return_val_if_fail (n >= 1 && n <= self->max_batch, FALSE);

  if (!need_resident (self, error) || !round_buffers (self, error))
    return FALSE;
  if (self->own_in)
    {
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_FAILED,
                   "this round already holds the own gradient; finish or cancel it first");
      return FALSE;
    }
  what = g_strdup_printf ("a %s step of %u samples", self->model->slug, n);
  /* A member's bucket is in the round already: round_join adds the own
   * gradient to it at once, and the one queued after overwrote it. */
  if (self->after_q && self->n_contrib > 0 && !presub_settle (self, error))
    return FALSE;
  /* computed ahead, behind the last finish, for these samples at this replica */
  if (self->ahead)
    {
      ready = self->ahead_gen == self->replica_gen && self->pending < 0 && self->ahead_n == n &&
              memcmp (self->ahead_idx, indices, n * sizeof (guint32)) == 0;
      slot = self->ahead_slot;
      if (!wait_ahead (self, what, error))
        return FALSE;
      if (ready && self->own_bare[slot] &&
          !ahead_check (self, slot, summary, &ready, &folded, error))
        return FALSE;
      if (ready)
        self->ahead_taken++;
      else
        g_debug ("rlx-vk: the own gradient computed ahead was for other samples or another "
                 "replica, or not finite; computing it again");
    }
  if (!ready)
    {
      VkCommandBuffer cbs[4];
      guint n_cbs = 0;
      gboolean applied = self->pending >= 0;
      Step *step;

      /* an update made ahead for the samples computed ahead: not this round's */
      if (!presub_settle (self, error))
        return FALSE;
      slot = 0;
      self->tl_kind = "own gradient, waited for";
      if (!own_cbs (self, indices, n, slot, FALSE, cbs, &n_cbs, &checked, &step, error) ||
          !submit_wait (self, cbs, n_cbs, TRUE, what, error))
        return FALSE;
      if (!apply_outcome (self, checked, error))
        return FALSE;
      read_timings (self, step, applied);
    }
  else
    {
      Step *step = get_step_slot (self, n, TRUE, slot, NULL);
      if (step != NULL)
        read_timings (self, step, FALSE);
    }
  if (!folded)
    summary_of (readback_region (self, own_region (slot)), summary);
  self->own_gmax = summary->gmax_bits;
  if (summary->smax_bits < 0x7f800000u)
    {
      ctl = self->control.map;
      memcpy (&ctl[CTL_OWN_WEIGHT], &w, 4);
      self->own_in = TRUE;
      if (!round_join (self, SRC_OWN, n, error))
        return FALSE;
      /* the next round's gradient, queued behind this round's update made
       * ahead, is the one ahead now */
      if (ready && self->after_q)
        {
          self->after_q = FALSE;
          self->ahead = TRUE;
          self->early = TRUE;
          self->ahead_slot = self->after_slot;
          g_free (self->ahead_idx);
          self->ahead_idx = g_steal_pointer (&self->after_idx);
          self->ahead_n = self->after_n;
          g_free (self->own_idx);
          self->own_idx = g_memdup2 (indices, n * sizeof (guint32));
          self->own_n = n;
          memcpy (&self->own_loss_bits, &summary->loss, 4);
        }
    }
  call_end (self, t0);
  return TRUE;
}

void *
rlx_vk_trainer_round_slot (RlxVkTrainer *self, GError **error)
{
  guint k;

  g_return_val_if_fail (self != NULL, NULL);

  if (!need_resident (self, error) || !round_buffers (self, error))
    return NULL;
  k = self->n_slots_used;
  if (k == self->slots->len)
    {
      g_autofree char *what = g_strdup_printf ("member bucket %u", k + 1);
      Buf b = { 0 };

      if (!buf_create_upload (self, &b, (self->code_words + SLOT_WORDS) * 4, what, error))
        {
          buf_destroy (self, &b);
          return NULL;
        }
      g_array_append_val (self->slots, b);
    }
  return slot_buf (self, k)->map;
}

gboolean
rlx_vk_trainer_round_add (RlxVkTrainer *self, guint prec, double inv, guint weight,
                          GError **error)
{
  gint64 t0 = call_begin (self);
  guint k = self->n_slots_used;
  guint32 *params;
  float w = (float) weight;

  g_return_val_if_fail (self != NULL && prec < 4, FALSE);
  g_return_val_if_fail (k < self->slots->len, FALSE);   /* round_slot gave it */

  /* the sum reads the own gradient, which the one queued after overwrote */
  if (self->early && !presub_settle (self, error))
    return FALSE;

  params = (guint32 *) slot_buf (self, k)->map + self->code_words;
  params[SLOT_PREC] = prec;
  memcpy (&params[SLOT_INV_LO], &inv, 8);
  memcpy (&params[SLOT_WEIGHT], &w, 4);
  self->n_slots_used++;
  if (!round_join (self, (int) k, weight, error))
    return FALSE;
  call_end (self, t0);
  return TRUE;
}

/* The round's contributions are forgotten (the sum is rewritten by the
 * next round's second contribution). */
static void
round_reset (RlxVkTrainer *self)
{
  self->n_contrib = 0;
  self->n_slots_used = 0;
  self->own_in = FALSE;
  self->total_weight = 0;
}

void
rlx_vk_trainer_round_cancel (RlxVkTrainer *self)
{
  g_autoptr(GError) error = NULL;

  g_return_if_fail (self != NULL);
  round_reset (self);
  /* the next round's update, if it was made ahead, is not wanted now */
  if (!presub_settle (self, &error))
    g_debug ("rlx-vk: %s (the next call reports it)", error->message);
}

void
rlx_vk_trainer_round_expect_alone (RlxVkTrainer *self, gboolean alone)
{
  g_return_if_fail (self != NULL);
  self->expect_alone = alone;
}

void
rlx_vk_trainer_round_after (RlxVkTrainer *self, const guint32 *after, guint n)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (after == NULL || (n >= 1 && n <= self->max_batch));

  g_clear_pointer (&self->after_hint, g_free);
  self->after_hint_n = 0;
  if (after != NULL)
    {
      self->after_hint = g_memdup2 (after, n * sizeof (guint32));
      self->after_hint_n = n;
    }
}

guint
rlx_vk_trainer_round_size (RlxVkTrainer *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_contrib;
}

typedef struct {
  guint x, prec;
  gboolean codes;
  /* submitted ahead (presubmit): the replica and update residual backed up
   * first, the summary to rb_presub[slot], no timestamps (the queue is
   * never idle to read them) */
  gboolean presub;
  guint slot;
  /* in one pass (round_lone.comp): x is X_OWN, prec f32, no codes */
  gboolean lone;
} FinishKey;

enum { X_SUM, X_OWN, X_SLOT0 };

static void
fill_finish (Rec *r, gpointer data)
{
  FinishKey *k = data;
  RlxVkTrainer *t = r->t;
  guint n = (guint) t->model->n_params;
  guint per_group, groups = wire_groups (n, &per_group);
  Buf *x = k->x == X_SUM ? &t->sum : k->x == X_OWN ? &t->grads : slot_buf (t, 0);
  struct { guint32 n, per_group, part_off, x_kind, param_off, fold_meta, count_off; } u = {
    n, per_group, (guint32) t->part_off, k->x == X_SLOT0, (guint32) t->code_words,
    fold_meta (t, REG_ROUND), (guint32) t->count_off
  };
  struct { guint32 n, meta_off; } q = { n, (guint32) region_off (t, REG_ROUND) };
  VkBufferCopy codes = { 0, 0, ((gsize) n * code_size[k->prec] + 3) / 4 * 4 };

  if (!k->presub)
    rec_timestamp (r, Q_ROUND, TRUE);
  rec_full_barrier (r);
  /* (the one pass backs the replica up as it goes, and leaves the update
   * residual alone) */
  if (k->presub && !k->lone)
    {
      VkBufferCopy all = { 0, 0, (VkDeviceSize) n * 4 };

      t->vk.CmdCopyBuffer (r->cb, t->replica.buf, t->replica_bak.buf, 1, &all);
      t->vk.CmdCopyBuffer (r->cb, t->ures.buf, t->ures_bak.buf, 1, &all);
      rec_full_barrier (r);
    }
  if (k->lone)
    {
      /* made ahead: backed up (bit 0), the gradient's check folded in (bit
       * 1); the summary written straight where the host reads it
       * (lone_direct) */
      Buf *out = k->presub ? &t->rb_presub[k->slot] : &t->round_rb;
      struct { guint32 n, part_off, meta_off, count_off, flags, poison_off, out_off; } l = {
        n, (guint32) t->part_off, (guint32) region_off (t, REG_ROUND), (guint32) t->count_off,
        k->presub ? 3 : 0, CTL_POISON_AHEAD + 2 * k->slot,
        !t->tun.lone_direct ? G_MAXUINT32 : k->presub ? 0 : (guint32) t->code_words
      };
      Buf *bs[N_BINDINGS] = { &t->grads, &t->replica, &t->control, &t->wire_s, &t->hash_part,
                              k->presub ? &t->replica_bak : &t->replica, out };

      /* the hash is inside the pass: its span is empty */
      if (!k->presub)
        {
          rec_timestamp (r, Q_HASH, TRUE);
          rec_timestamp (r, Q_HASH, FALSE);
        }
      rec_dispatch_v (r, SH_ROUND_LONE, NULL, 0, bs, &l, sizeof l,
                      (n + HASH_CHUNK - 1) / HASH_CHUNK, 1, 1);
      if (t->tun.lone_direct)
        rec_all_barrier (r, TRUE);
      else
        {
          rec_full_barrier (r);
          rec_copy_region (r, REG_ROUND, out, k->presub ? 0 : t->code_words * 4);
          rec_to_host (r);
        }
      if (!k->presub)
        rec_timestamp (r, Q_ROUND, FALSE);
      return;
    }
  {
    Buf *bs[N_BINDINGS] = { x, &t->ures, &t->control, &t->wire_s, &t->tables, NULL };
    rec_dispatch_v (r, SH_ROUND_U, NULL, 0, bs, &u, sizeof u, groups, 1, 1);
  }
  rec_fold_unless_done (r, groups, REG_ROUND, G_MAXUINT32, G_MAXUINT32);
  rec_full_barrier (r);
  {
    Buf *bs[N_BINDINGS] = { &t->wire_s, &t->tables, &t->ures, &t->codes_dev, &t->replica,
                            &t->control };
    rec_dispatch_v (r, SH_ROUND_QUANT, NULL, 0, bs, &q, sizeof q, groups_for ((n + 3) / 4, 256),
                    1, 1);
  }
  /* the hash's chunks beside the codes' download */
  rec_full_barrier (r);
  if (!k->presub)
    rec_timestamp (r, Q_HASH, TRUE);
  rec_hash_chunks (r, n);
  if (k->codes)
    t->vk.CmdCopyBuffer (r->cb, t->codes_dev.buf, t->round_rb.buf, 1, &codes);
  rec_hash_combine (r, n, REG_ROUND);
  if (k->presub)
    rec_copy_region (r, REG_ROUND, &t->rb_presub[k->slot], 0);
  else
    {
      rec_timestamp (r, Q_HASH, FALSE);
      rec_copy_region (r, REG_ROUND, &t->round_rb, t->code_words * 4);
    }
  rec_to_host (r);
  if (!k->presub)
    rec_timestamp (r, Q_ROUND, FALSE);
}

/* An update made ahead and not claimed, undone: the replica and update
 * residual back from their backups (on the queue behind that finish); the
 * replica alone after a one pass (@data non-NULL), which left the residual
 * as it was. */
static void
fill_rollback (Rec *r, gpointer data)
{
  RlxVkTrainer *t = r->t;
  VkBufferCopy all = { 0, 0, (VkDeviceSize) t->model->n_params * 4 };

  rec_full_barrier (r);
  t->vk.CmdCopyBuffer (r->cb, t->replica_bak.buf, t->replica.buf, 1, &all);
  if (data == NULL)
    t->vk.CmdCopyBuffer (r->cb, t->ures_bak.buf, t->ures.buf, 1, &all);
  rec_full_barrier (r);
}

/* Whether a round can finish in one pass (round_lone.comp): the own
 * gradient alone at f32 with no codes wanted, on a model whose partials
 * (one per hash chunk) fit. */
static gboolean
lone_fits (RlxVkTrainer *self, guint x, guint prec, gboolean codes)
{
  return self->tun.lone_env && x == X_OWN && prec == WIRE_F32 && !codes &&
         self->model->n_params <= (gsize) WIRE_MAX_GROUPS * HASH_CHUNK;
}

/* ... and whether its update u = coef · x is finite everywhere, as that
 * pass must know before it writes the replica: it is when coef · max |x|
 * is, f32 rounding being monotonic (the own gradient's check gave max |x|
 * and found it finite). */
static gboolean
lone_finite (RlxVkTrainer *self, guint32 coef_bits)
{
  float coef, gmax, u;

  memcpy (&coef, &coef_bits, 4);
  memcpy (&gmax, &self->own_gmax, 4);
  u = coef * gmax;
  return isfinite (coef) && isfinite (u);
}

static gboolean
presub_buffers (RlxVkTrainer *self, GError **error)
{
  const VkBufferUsageFlags storage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
  gsize n = self->model->n_params;

  if (self->replica_bak.buf != VK_NULL_HANDLE)
    return TRUE;
  if (buf_create (self, &self->replica_bak, n * 4, storage, MEM_DEVICE, "replica backup", error) &&
      buf_create (self, &self->ures_bak, n * 4, storage, MEM_DEVICE, "update residual backup",
                  error) &&
      buf_create (self, &self->rb_presub[0], META_WORDS * 4, storage, MEM_READBACK,
                  "summary of an update made ahead", error) &&
      buf_create (self, &self->rb_presub[1], META_WORDS * 4, storage, MEM_READBACK,
                  "summary of an update made ahead", error))
    return TRUE;
  buf_destroy (self, &self->replica_bak);
  buf_destroy (self, &self->ures_bak);
  buf_destroy (self, &self->rb_presub[0]);
  buf_destroy (self, &self->rb_presub[1]);
  return FALSE;
}

/* Behind the own gradient just queued (fence2), the finish of the round it
 * belongs to, in @slot, reading the control words as they are: the GPU goes
 * from that gradient to its update with nothing between them. Not fatal
 * when it cannot be made (the round is then finished as usual). */
static void
presubmit (RlxVkTrainer *self, guint prec, guint slot)
{
  FinishKey k = { X_OWN, prec, FALSE, TRUE, slot, lone_fits (self, X_OWN, prec, FALSE) };
  const Recorded *rec;
  guint32 *ctl = self->control.map;
  /* the gradient it follows was queued without its check: it folds it in */
  gboolean fold = k.lone && self->ahead && self->own_bare[self->ahead_slot];

  if (!presub_buffers (self, NULL))
    return;
  rec = get_recorded (self, k.lone ? &self->presub_lone_rec[slot] : &self->presub_rec[prec][slot],
                      6, fill_finish, &k, NULL);
  self->tl_kind = k.lone ? "update made ahead, one pass" : "update made ahead";
  if (rec == NULL)
    return;
  /* (the one made ahead in this slot before it was waited for: nothing
   * reads these words now) */
  ctl[CTL_POISON_AHEAD + 2 * slot] = fold ? self->own_poison[self->ahead_slot][0] : G_MAXUINT32;
  ctl[CTL_POISON_AHEAD + 2 * slot + 1] = fold ? self->own_poison[self->ahead_slot][1] : 0;
  if (submit (self, &rec->cb, 1, self->fence3[slot], FALSE) != VK_SUCCESS)
    return;
  self->presub = TRUE;
  self->presub_lone = k.lone;
  self->presub_slot = slot;
  self->presub_fold = fold;
  self->presub_fold_grad = self->ahead_slot;
  self->presub_ctl[0] = ctl[CTL_ROUND_PREC];
  self->presub_ctl[1] = ctl[CTL_ROUND_FEEDBACK];
  self->presub_ctl[2] = ctl[CTL_COEF];
}

/* An update made ahead and not claimed is undone. (One made behind a
 * finish that was refused is right as it is: that finish changed nothing,
 * so it was made from the state its round starts from.) What was queued
 * behind it (after, or early once round_own took it) ran at parameters
 * that update gives, and overwrote the gradient buffer: dropped, with the
 * one ahead of it, and the round's own gradient, when the round holds it,
 * made again — the same bits, the step being deterministic (checked). */
static gboolean
presub_settle (RlxVkTrainer *self, GError **error)
{
  gboolean redo = self->early && self->own_in;
  const Recorded *rec;
  VkCommandBuffer cbs[4];
  guint n = 0;
  gboolean checked = FALSE;
  Step *step = NULL;
  RlxVkWireSummary again;
  guint32 loss_bits;

  if (!self->presub)
    return TRUE;
  if (self->after_q || self->early)
    {
      if (self->after_q &&
          !wait_submission (self, self->fence2[self->after_slot], VK_SUCCESS,
                            "the round after next's own gradient", error))
        return FALSE;
      if (self->ahead && !wait_ahead (self, "the next round's own gradient", error))
        return FALSE;
      self->after_q = self->early = self->ahead = FALSE;
    }
  self->presub = FALSE;
  rec = self->presub_lone ? get_recorded (self, &self->rollback_lone_rec, 1, fill_rollback,
                                          GINT_TO_POINTER (1), error)
                          : get_recorded (self, &self->rollback_rec, 1, fill_rollback, NULL, error);
  if (rec == NULL ||
      !submit_wait (self, &rec->cb, 1, FALSE, "undoing an update made ahead", error) ||
      !wait_submission (self, self->fence3[self->presub_slot], VK_SUCCESS,
                        "an update made ahead", error))
    return FALSE;
  if (!redo)
    return TRUE;
  if (self->pending >= 0)
    {
      /* (never: a gradient is queued early only with no update waiting) */
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_FAILED,
                   "the own gradient cannot be made again with an update waiting on %s",
                   self->info->name);
      return FALSE;
    }
  if (!own_cbs (self, self->own_idx, self->own_n, 0, FALSE, cbs, &n, &checked, &step, error) ||
      !submit_wait (self, cbs, n, FALSE, "the own gradient, made again", error))
    return FALSE;
  summary_of (readback_region (self, own_region (0)), &again);
  memcpy (&loss_bits, &again.loss, 4);
  if (again.gmax_bits != self->own_gmax || loss_bits != self->own_loss_bits)
    {
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_FAILED,
                   "the own gradient made again on %s differs from the first (largest |g| "
                   "%08x against %08x): the device's step is not deterministic — set "
                   "RLX_VK_EARLY=0", self->info->name, again.gmax_bits, self->own_gmax);
      return FALSE;
    }
  return TRUE;
}

/* The round's update made ahead behind its own gradient (in @slot), when
 * that round is expected to be ours alone and the update residual is read
 * the same way (mode 1) by it as by the finish just made. */
static void
presubmit_if_alone (RlxVkTrainer *self, guint prec, gboolean fb, guint slot)
{
  if (self->expect_alone && self->tun.presub_env && self->pending < 0 && !self->presub &&
      (!fb || !self->ures_zero) && self->model->n_params * 4 <= PRESUB_MAX_BYTES)
    presubmit (self, prec, slot);
}

/* Behind the next round's gradient (ahead) and its update made ahead in
 * one pass, the gradient of the round after it, over the samples
 * rlx_vk_trainer_round_after named, in the other slot: the GPU has it when
 * it is done with those, whenever the host comes back. Not fatal when it
 * cannot be queued. */
static void
queue_after (RlxVkTrainer *self)
{
  VkCommandBuffer cbs[4];
  guint n = 0, slot;
  gboolean checked = FALSE;
  Step *step = NULL;

  if (!self->tun.early_env || self->after_hint == NULL || !self->ahead || !self->presub ||
      !self->presub_lone || self->after_q || self->pending >= 0)
    return;
  slot = 1 - self->ahead_slot;
  if (!own_cbs (self, self->after_hint, self->after_hint_n, slot, self->tun.fold_env, cbs, &n,
                &checked, &step, NULL))
    return;
  g_assert (!checked);
  self->tl_kind = "gradient after next";
  if (submit (self, cbs, n, self->fence2[slot], TRUE) != VK_SUCCESS)
    return;
  self->after_q = TRUE;
  self->after_slot = slot;
  g_free (self->after_idx);
  self->after_idx = g_memdup2 (self->after_hint, self->after_hint_n * sizeof (guint32));
  self->after_n = self->after_hint_n;
}

/* The next round's own gradient (@next, fence2) right behind what is on
 * the queue, and, when that round is expected to be ours alone, its finish
 * behind it in @slot (presubmit): the GPU does not wait for the host
 * between the rounds. */
static void
queue_next (RlxVkTrainer *self, const guint32 *next, guint next_n, guint prec, gboolean fb,
            gboolean may_presub, guint slot)
{
  VkCommandBuffer cbs[4];
  guint n = 0;
  gboolean checked = FALSE;
  Step *step = NULL;

  if (next == NULL || !own_cbs (self, next, next_n, 0, FALSE, cbs, &n, &checked, &step, NULL))
    return;
  g_assert (!checked);
  self->tl_kind = "next gradient";
  if (submit (self, cbs, n, self->fence2[0], TRUE) != VK_SUCCESS)
    return;
  self->ahead = TRUE;
  self->ahead_slot = 0;
  g_free (self->ahead_idx);
  self->ahead_idx = g_memdup2 (next, next_n * sizeof (guint32));
  self->ahead_n = next_n;
  if (may_presub)
    presubmit_if_alone (self, prec, fb, slot);
}

/* The round's outcome, from the summary @m of its finish (the replica
 * took the update when u was finite). */
static void
finish_outcome (RlxVkTrainer *self, const guint32 *m, gboolean fb, RlxVkWireSummary *summary)
{
  summary_of (m, summary);
  if (summary->smax_bits < 0x7f800000u)
    {
      replica_changed (self);
      self->hash = (guint64) m[META_HASH_HI] << 32 | m[META_HASH_LO];
      self->hash_valid = TRUE;
      if (fb)
        self->ures_zero = FALSE;
    }
}

gboolean
rlx_vk_trainer_round_finish (RlxVkTrainer *self, double lr, guint prec, gboolean feedback,
                             const guint32 *next, guint next_n, const void **codes,
                             RlxVkWireSummary *summary, guint64 *hash, GError **error)
{
  gint64 t0 = call_begin (self);
  g_autofree char *what = NULL;
  FinishKey k = { X_SUM, prec, codes != NULL, FALSE, 0 };
  const Recorded *fin;
  VkCommandBuffer cbs[3];
  guint n_cbs = 0;
  gboolean checked = FALSE, fb = feedback && prec != WIRE_F32;
  guint32 *ctl, mode, coef_bits;
  float coef;
  VkResult r;

  g_return_val_if_fail (self != NULL && prec < 4 && summary != NULL && hash != NULL, FALSE);
  g_return_val_if_fail (next == NULL || (next_n >= 1 && next_n <= self->max_batch), FALSE);

  if (!need_resident (self, error) || !round_buffers (self, error))
    return FALSE;
  if (self->n_contrib == 0)
    {
      g_set_error (error, RLX_VK_ERROR, RLX_VK_ERROR_FAILED,
                   "the round holds no gradient to finish (neither the own one nor a "
                   "member's bucket)");
      return FALSE;
    }
  if (self->n_contrib == 1)
    {
      k.x = self->first == SRC_OWN ? X_OWN : X_SLOT0;
      coef = (float) lr;
    }
  else
    coef = (float) (lr / (double) self->total_weight);
  mode = !fb ? 0 : self->ures_zero ? 2 : 1;
  memcpy (&coef_bits, &coef, 4);
  what = g_strdup_printf ("finishing a %s round", self->model->slug);

  /* Made ahead already, for exactly this round: our own gradient alone,
   * the one computed ahead (round_own checked that the replica has not
   * changed since), no update queued, the same control words. Claim it. */
  if (self->presub && k.x == X_OWN && codes == NULL && (!self->ahead || self->early) &&
      self->pending < 0 &&
      self->presub_ctl[0] == prec && self->presub_ctl[1] == mode &&
      self->presub_ctl[2] == coef_bits && (!self->presub_lone || lone_finite (self, coef_bits)))
    {
      guint slot = self->presub_slot;

      self->presub = FALSE;
      self->presub_taken++;
      if (self->presub_lone)
        self->lone_taken++;
      /* the round after it goes on the queue before we wait for this one
       * (its own gradient is there already when round_own queued it early:
       * then only its update made ahead, when those were its samples) */
      if (self->early)
        {
          self->early = FALSE;
          self->early_taken++;
          if (next != NULL && next_n == self->ahead_n &&
              memcmp (next, self->ahead_idx, next_n * sizeof (guint32)) == 0)
            presubmit_if_alone (self, prec, fb, 1 - slot);
        }
      else
        queue_next (self, next, next_n, prec, fb, TRUE, 1 - slot);
      /* and the round after that's gradient behind them */
      queue_after (self);
      if (!wait_submission (self, self->fence3[slot], VK_SUCCESS, what, error))
        return FALSE;
      round_reset (self);
      finish_outcome (self, self->rb_presub[slot].map, fb, summary);
      *hash = self->hash;
      self->ahead_gen = self->replica_gen;
      self->timings.round_us = 0;
      self->timings.hash_us = 0;
      call_end (self, t0);
      return TRUE;
    }

  if (!drain_ahead (self, error))
    return FALSE;
  g_assert (k.x != X_SLOT0 || self->first == 0);
  k.lone = lone_fits (self, k.x, prec, k.codes) && lone_finite (self, coef_bits);
  fin = get_recorded (self, k.lone ? &self->finish_lone_rec : &self->finish_rec[k.x][prec][k.codes],
                      6, fill_finish, &k, error);
  if (fin == NULL || !take_update (self, cbs, &n_cbs, &checked, error))
    return FALSE;
  cbs[n_cbs++] = fin->cb;
  ctl = self->control.map;
  ctl[CTL_ROUND_PREC] = prec;
  ctl[CTL_ROUND_FEEDBACK] = mode;
  ctl[CTL_COEF] = coef_bits;

  if (!check_lost (self, error))
    return FALSE;
  self->tl_kind = k.lone ? "finish, one pass" : "finish";
  r = submit (self, cbs, n_cbs, self->fence, FALSE);
  if (r == VK_SUCCESS && k.lone)
    self->lone_taken++;
  /* the next round's own gradient (and, ours alone, its update) right
   * behind on the queue */
  if (r == VK_SUCCESS)
    {
      queue_next (self, next, next_n, prec, fb, codes == NULL, 0);
      queue_after (self);
    }
  if (!wait_submission (self, self->fence, r, what, error))
    return FALSE;
  round_reset (self);   /* the round is over, whatever came of it */
  if (!apply_outcome (self, checked, error))
    return FALSE;
  finish_outcome (self, (const guint32 *) ((const char *) self->round_rb.map +
                                           self->code_words * 4), fb, summary);
  *hash = self->hash;
  self->ahead_gen = self->replica_gen;
  if (codes != NULL)
    *codes = self->round_rb.map;
  /* with the next own gradient running, its timestamps come with it */
  self->round_times_due = self->ahead;
  if (!self->ahead)
    {
      self->timings.round_us = query_span (self, Q_ROUND);
      self->timings.hash_us = query_span (self, Q_HASH);
    }
  call_end (self, t0);
  return TRUE;
}

/* ── test hooks ── */

typedef struct {
  guint n, prec;
  gboolean feedback;
} WireTest;

static void
fill_wire_test (Rec *r, gpointer data)
{
  WireTest *w = data;
  VkBufferCopy up = { 0, 0, (gsize) w->n * 4 };

  r->t->vk.CmdCopyBuffer (r->cb, r->t->staging_in.buf, r->t->grads.buf, 1, &up);
  rec_wire_pass (r, w->n, w->prec, w->feedback, G_MAXUINT32, FALSE);
}

gboolean
rlx_vk_trainer_wire_test (RlxVkTrainer *self, const float *g, gsize n, guint prec,
                          gboolean feedback, void *codes, RlxVkWireSummary *summary,
                          GError **error)
{
  WireTest w = { (guint) n, prec, feedback };

  g_return_val_if_fail (self != NULL && g != NULL && codes != NULL && summary != NULL, FALSE);
  g_return_val_if_fail (n >= 1 && n <= self->model->n_params && prec < 4, FALSE);

  if (!need_resident (self, error) || !drain_ahead (self, error))
    return FALSE;
  memcpy (self->staging_in.map, g, n * 4);
  wire_control (self);
  if (!run_once (self, fill_wire_test, &w, "a wire pass", error))
    return FALSE;
  summary_of (readback_region (self, REG_WIRE), summary);
  self->res_pending = feedback && summary->smax_bits < 0x7f800000u;
  memcpy (codes, self->readback.map, n * code_size[prec]);
  return TRUE;
}

static void
fill_apply_test (Rec *r, gpointer data)
{
  ApplyKey *k = data;
  VkBufferCopy up = { 0, 0, (gsize) k->n * 4 };

  r->t->vk.CmdCopyBuffer (r->cb, r->t->staging_in.buf, r->t->replica.buf, 1, &up);
  rec_apply (r, k->n, k->prec, k->checked);
}

gboolean
rlx_vk_trainer_apply_test (RlxVkTrainer *self, float *params, gsize n, const void *codes,
                           guint prec, double inv, GError **error)
{
  ApplyKey k = { (guint) n, prec, FALSE };
  guint32 *ctl;

  g_return_val_if_fail (self != NULL && params != NULL && codes != NULL, FALSE);
  g_return_val_if_fail (n >= 1 && n <= self->model->n_params && prec < 4, FALSE);

  if (!need_resident (self, error) || !drain_ahead (self, error) ||
      !flush_update (self, FALSE, error))
    return FALSE;
  replica_changed (self);
  memcpy (self->staging_in.map, params, n * 4);
  memcpy (self->codes_in.map, codes, n * code_size[prec]);
  ctl = self->control.map;
  memcpy (&ctl[CTL_INV_LO], &inv, sizeof inv);
  return run_once (self, fill_apply_test, &k, "applying an update", error) &&
         read_replica (self, params, n, error);
}

static void
fill_hash_test (Rec *r, gpointer data)
{
  guint n = GPOINTER_TO_UINT (data);
  VkBufferCopy up = { 0, 0, (gsize) n * 4 };

  r->t->vk.CmdCopyBuffer (r->cb, r->t->staging_in.buf, r->t->replica.buf, 1, &up);
  rec_hash (r, n, REG_HASH);
  rec_copy_region (r, REG_HASH, &r->t->readback, r->t->readback_meta + REG_HASH * META_WORDS * 4);
  rec_to_host (r);
}

gboolean
rlx_vk_trainer_hash_test (RlxVkTrainer *self, const float *params, gsize n, guint64 *hash,
                          GError **error)
{
  const guint32 *m;

  g_return_val_if_fail (self != NULL && params != NULL && hash != NULL, FALSE);
  g_return_val_if_fail (n >= 1 && n <= self->model->n_params, FALSE);

  if (!need_resident (self, error) || !drain_ahead (self, error) ||
      !flush_update (self, FALSE, error))
    return FALSE;
  replica_changed (self);
  memcpy (self->staging_in.map, params, n * 4);
  if (!run_once (self, fill_hash_test, GUINT_TO_POINTER ((guint) n), "hashing", error))
    return FALSE;
  m = readback_region (self, REG_HASH);
  *hash = (guint64) m[META_HASH_HI] << 32 | m[META_HASH_LO];
  return TRUE;
}

