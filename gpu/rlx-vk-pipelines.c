/* rlx-vk-pipelines.c — the shader table, the GEMM configurations and the
 * pipeline cache (one pipeline per shader and specialization)
 *
 * Threads: the trainer's (rlx-vk-trainer-private.h).
 */
#include "rlx-config.h"
#include "rlx-vk-trainer-private.h"

#include <string.h>

#include "gpu/rlx-vk-spirv.h"

#define FILL_TARGET   256u     /* workgroups a GEMM should spread over */

static const GemmCfg CFG_MED    = { 64, 64, 16, 4, 4 };
static const GemmCfg CFG_SMALL  = { 32, 32, 16, 4, 4 };
static const GemmCfg CFG_TALL   = { 128, 32, 16, 8, 4 };
static const GemmCfg CFG_TALLS  = { 64, 32, 16, 4, 4 };
static const GemmCfg CFG_NARROW = { 64, 16, 16, 4, 4 };
static const GemmCfg CFG_WIDE   = { 16, 64, 16, 4, 4 };
static const GemmCfg CFG_WIDE32 = { 32, 64, 16, 4, 4 };
/* gemm2.comp's fixed tile (double-buffered, 8×8 per thread, 256 threads) */
const GemmCfg rlx_vkt_cfg_big2   = { 128, 128, 8, 8, 8 };
/* gemm_cm.comp's (tensor cores, 8 subgroups of 4×FN 16×16 fragments; bk is
 * RLX_VK_CM_BK's), by CM_TILE_*: tm is its SGM, tn its FN */
const GemmCfg rlx_vkt_cfg_cm[N_CM_TILES] = {
  { 128, 128, 32, 2, 2 },
  { 256, 128, 32, 4, 4 },
  { 128, 256, 32, 2, 4 },
};

/* gemm_cm.comp's shared memory at @bk for operand layouts @a_kc, @b_kc:
 * each operand in 16-byte chunks of 8 halves, rows padded by a chunk, and
 * the epilogue's 8 × 16×16 f32 */
guint
rlx_vkt_cm_shared (const GemmCfg *c, guint bk, gboolean a_kc, gboolean b_kc)
{
  guint a = a_kc ? c->bm * (bk / 8 + 1) : bk * (c->bm / 8 + 1);
  guint b = b_kc ? c->bn * (bk / 8 + 1) : bk * (c->bn / 8 + 1);

  return (a + b) * 16 + 8 * 256 * 4;
}

static guint
cfg_shared (const GemmCfg *c)
{
  return c->bk * ((c->bm + 4) + (c->bn + 4)) * 4;
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
      S (SH_GEMM_CM, rlx_spv_gemm_cm)
      S (SH_TO_F16, rlx_spv_to_f16)
#undef S
    case N_SHADERS:
    default:
      g_assert_not_reached ();
    }
}

VkPipeline
rlx_vkt_get_pipeline (RlxVkTrainer *self, ShaderId shader, const guint32 *spec, guint n_spec,
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

/* @plain: both operands are plain matrices (no convolution modes), which
 * gemm2.comp needs */
const GemmCfg *
rlx_vkt_choose_cfg (RlxVkTrainer *t, guint M, guint N, gboolean split_ok, gboolean plain)
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
  if (t->tun.gemm2 && plain && split_ok && M >= rlx_vkt_cfg_big2.bm && N >= rlx_vkt_cfg_big2.bn)
    return &rlx_vkt_cfg_big2;
  if (t->tun.gemm2 && plain && tiles_of (&rlx_vkt_cfg_big2, M, N) >= FILL_TARGET)
    return &rlx_vkt_cfg_big2;
  if (big_ok && split_ok && M >= t->tun.big.bm && N >= t->tun.big.bn)
    return &t->tun.big;
  if (big_ok && tiles_of (&t->tun.big, M, N) >= FILL_TARGET)
    return &t->tun.big;
  if (tiles_of (&CFG_MED, M, N) >= FILL_TARGET)
    return &CFG_MED;
  return &CFG_SMALL;
}
