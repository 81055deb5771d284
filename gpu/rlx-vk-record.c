/* rlx-vk-record.c — recording command buffers: dispatches with the
 * barriers their hazards need, column sums, GEMMs (split over K where that
 * fills the device), and command buffers recorded once and replayed
 *
 * A dispatch waits behind a full compute barrier wherever it depends on an
 * earlier one (rlx_vkt_rec_dispatch_v tracks what was written and read), and no
 * shader uses atomics: each output element is summed in a fixed order, so
 * the same step gives the same bits every time.
 *
 * Threads: the trainer's (rlx-vk-trainer-private.h).
 */
#include "rlx-config.h"
#include "rlx-vk-trainer-private.h"

#include <string.h>

#define MAX_SPLITS    4096u
#define MIN_K_CHUNK   128u

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
void
rlx_vkt_rec_dispatch_v (Rec *r, ShaderId shader, const guint32 *spec, guint n_spec, Buf *const *bs,
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

  pipe = rlx_vkt_get_pipeline (t, shader, spec, n_spec, r->error);
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
    static const guint writes[] = {
      2, 1, 2, 3, 2, 1, 1, 2, 2, 2, 3, 4, 2, 3, 0, 3, 3, 1, 3, 3, 4, 1,
      0 /* round_lone: ordered by its own barriers, as the wire passes */,
      2 /* gemm_cm */, 2 /* to_f16 */
    };
    /* one entry per shader: a shader missing here read as writing binding
     * 0, and what read its output got no barrier (gemm_cm's split-K
     * partials, read by the reduce before they were written) */
    G_STATIC_ASSERT (G_N_ELEMENTS (writes) == N_SHADERS);
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
        "codechk", "roundacc", "roundu", "roundqua", "hash", "roundlon", "gemm_cm", "to_f16"
      };
      g_ptr_array_add (r->step->labels,
                       g_strdup_printf ("%-8s %s grid %u×%u×%u", names[shader], r->label, gx, gy, gz));
      t->vk.CmdWriteTimestamp (r->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, t->prof,
                           r->step->labels->len);
    }
  r->label[0] = '\0';
}

void
rlx_vkt_rec_dispatch (Rec *r, ShaderId shader, const guint32 *spec, guint n_spec,
                      Buf *b0, Buf *b1, Buf *b2, Buf *b3,
                      const void *push, gsize push_size, guint gx, guint gy, guint gz)
{
  Buf *bs[N_BINDINGS] = { b0, b1, b2, b3, NULL, NULL };

  rlx_vkt_rec_dispatch_v (r, shader, spec, n_spec, bs, push, push_size, gx, gy, gz);
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
      rlx_vkt_rec_dispatch (r, SH_REDUCE, NULL, 0, src, dst, epi->bias, NULL, &pc, sizeof pc, gx,
                            1, gz);
      return;
    }
  pc = (typeof (pc)) { R, C, ld, rows, in_off, part_off, C, 1.0f, 0, 0, 0 };
  rlx_vkt_rec_dispatch (r, SH_REDUCE, NULL, 0, src, &r->t->bufs[B_RPART], NULL, NULL, &pc,
                        sizeof pc, gx, chunks, gz);
  rec_colsum_epi (r, &r->t->bufs[B_RPART], part_off, chunks, C, C, dst, dst_off, epi,
                  part_off + chunks * C);
}

void
rlx_vkt_rec_colsum (Rec *r, Buf *src, guint in_off, guint R, guint C, guint ld,
                    Buf *dst, guint dst_off, float scale, guint part_off)
{
  SumEpi epi = { .scale = scale };
  rec_colsum_epi (r, src, in_off, R, C, ld, dst, dst_off, &epi, part_off);
}

void
rlx_vkt_rec_to_f16 (Rec *r, Buf *src, guint off, guint count, float scale)
{
  RlxVkTrainer *t = r->t;
  Buf *dst = &t->bufs[B_HALF];
  struct {
    guint32 count, src_off, dst_off;
    float scale;
  } pc = { count, off, (guint32) r->half_used, scale };
  guint64 groups = ((guint64) count / 8 + 255) / 256;

  if (t->compute != RLX_VK_COMPUTE_F16 || !t->tun.cm_half || dst->buf == VK_NULL_HANDLE ||
      r->n_halves == G_N_ELEMENTS (r->halves) || count == 0 || count % 8 != 0 || off % 4 != 0 ||
      r->half_used + count > dst->size / 2 || r->half_used + count > G_MAXUINT32)
    return;
  g_snprintf (r->label, sizeof r->label, "%u floats x %g", count, scale);
  rlx_vkt_rec_dispatch (r, SH_TO_F16, NULL, 0, src, NULL, dst, NULL, &pc, sizeof pc,
                        (guint) MIN (groups, 4096), 1, 1);
  r->halves[r->n_halves++] = (typeof (r->halves[0])) { src, off, count, (guint) r->half_used, scale };
  r->half_used += count;   /* (a multiple of 8, as every offset in it) */
}

/* Where the f16 copy of the operand at @off of @b (@span elements from
 * there, made × @scale) starts in B_HALF, or G_MAXUINT without one. */
static guint
find_half (Rec *r, Buf *b, guint off, guint64 span, float scale)
{
  for (guint i = 0; i < r->n_halves; i++)
    if (r->halves[i].buf == b && r->halves[i].scale == scale && off >= r->halves[i].off &&
        (guint64) off + span <= (guint64) r->halves[i].off + r->halves[i].count)
      return r->halves[i].half_off + (off - r->halves[i].off);
  return G_MAXUINT;
}

/* The f16 copies of what a dispatch is about to overwrite are stale. */
static void
drop_halves (Rec *r, Buf *b)
{
  for (guint i = 0; i < r->n_halves;)
    if (r->halves[i].buf == b)
      r->halves[i] = r->halves[--r->n_halves];
    else
      i++;
}

/* C[M][N] (ldc) = epilogue (A·B). Split over K when the output is compact,
 * has no epilogue and would otherwise occupy few workgroups. @conv_c and
 * @conv_h describe the image for the convolution modes (0 otherwise). */
void
rlx_vkt_rec_gemm_ex (Rec *r, guint a_mode, guint b_mode, guint conv_c, guint conv_h,
                     guint M, guint N, guint K,
                     Buf *A, guint lda, guint a_off, Buf *B, guint ldb, guint b_off,
                     Buf *C, guint ldc, guint c_off, Buf *D, guint d_off, guint ldd, guint flags)
{
  struct {
    guint32 M, N, K, lda, ldb, ldc, ldd, a_off, b_off, c_off, d_off, k_chunk, c_split, flags;
    float alpha;
    float a_scale;   /* gemm_cm.comp only (the others' push constants end before it) */
  } pc;
  /* a bias (and ReLU) can be applied by the reduce that adds the partials */
  gboolean split_ok = (flags & ~(EPI_BIAS_COL | EPI_RELU)) == 0 && ldc == N;
  gboolean plain = a_mode <= OP_KC && b_mode <= OP_KC;
  /* --compute f16: the tensor cores where rlx_vk_gemm_compute says */
  gboolean cm = rlx_vk_gemm_compute (r->t->compute, M, N, K, plain) == RLX_VK_COMPUTE_F16;
  const GemmCfg *cfg = cm ? &rlx_vkt_cfg_cm[r->t->tun.cm_tile] : rlx_vkt_choose_cfg (r->t, M, N, split_ok, plain);
  float a_scale = cm && r->t->f16_scale > 0 ? r->t->f16_scale : 1.0f;
  gsize push_size = cm ? sizeof pc : G_STRUCT_OFFSET (typeof (pc), a_scale);
  ShaderId shader = SH_GEMM;
  guint64 tiles = tiles_of (cfg, M, N);
  guint64 threads = tiles * cfg_threads (cfg);
  guint splits = 1, k_chunk, bk;
  guint32 spec[10];
  guint n_spec = conv_c > 0 ? 10 : 8;
  static const char mode_char[] = "TNIC";
  guint a_half = G_MAXUINT, b_half = G_MAXUINT;

  if (split_ok && threads < r->t->tun.fill_threads && K >= 2 * MIN_K_CHUNK &&
      (!cm || r->t->tun.cm_split))
    {
      splits = (guint) MIN ((r->t->tun.fill_threads + threads - 1) / threads, (guint64) K / MIN_K_CHUNK);
      splits = MIN (splits, MAX_SPLITS);
      splits = MIN (splits, r->t->info->max_workgroup_count[2]);
      splits = MIN (splits, (guint) (PART_FLOATS / ((guint64) M * N)));
      splits = MAX (splits, 1);
    }
  bk = cm ? r->t->tun.cm_bk : cfg->bk;
  /* (a tile whose k 64 deep would not fit the device's shared memory goes 32 deep) */
  if (cm && bk > 32 &&
      rlx_vkt_cm_shared (cfg, bk, a_mode == OP_KC, b_mode == OP_KC) > r->t->info->max_shared_memory)
    bk = 32;
  k_chunk = (K + splits - 1) / splits;
  k_chunk = (k_chunk + bk - 1) / bk * bk;
  splits = (K + k_chunk - 1) / k_chunk;
  if (splits <= 1)
    {
      splits = 1;
      k_chunk = K;
    }

  drop_halves (r, C);
  if (cm)
    {
      /* 16-byte reads where every offset, leading dimension and
       * contiguous extent is a multiple of 4 (gemm_cm.comp's VEC) */
      shader = SH_GEMM_CM;
      spec[0] = a_mode;
      spec[1] = b_mode;
      spec[2] = r->t->tun.cm_vec && a_off % 4 == 0 && b_off % 4 == 0 && lda % 4 == 0 &&
                ldb % 4 == 0 && (a_mode == OP_KC ? K : M) % 4 == 0 &&
                (b_mode == OP_KC ? K : N) % 4 == 0;
      spec[3] = bk;
      spec[4] = cfg->tm;
      spec[5] = cfg->tn;
      /* the operands rounded to f16 already (rlx_vkt_rec_to_f16), where
       * their offsets, leading dimensions and contiguous extents are
       * multiples of 8: one 16-byte read a chunk */
      a_half = find_half (r, A, a_off,
                          a_mode == OP_KC ? (guint64) (M - 1) * lda + K : (guint64) (K - 1) * lda + M,
                          a_scale);
      if (a_half % 8 != 0 || lda % 8 != 0 || (a_mode == OP_KC ? K : M) % 8 != 0)
        a_half = G_MAXUINT;
      b_half = find_half (r, B, b_off,
                          b_mode == OP_KC ? (guint64) (N - 1) * ldb + K : (guint64) (K - 1) * ldb + N,
                          1.0f);
      if (b_half % 8 != 0 || ldb % 8 != 0 || (b_mode == OP_KC ? K : N) % 8 != 0)
        b_half = G_MAXUINT;
      spec[6] = a_half != G_MAXUINT;
      spec[7] = b_half != G_MAXUINT;
      n_spec = 8;
      if (a_half != G_MAXUINT)
        {
          A = &r->t->bufs[B_HALF];
          a_off = a_half;
        }
      if (b_half != G_MAXUINT)
        {
          B = &r->t->bufs[B_HALF];
          b_off = b_half;
        }
    }
  else if (cfg == &rlx_vkt_cfg_big2)
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

  g_snprintf (r->label, sizeof r->label, "%ux%ux%u %c%c tile %ux%u split %u%s%s%s", M, N, K,
              mode_char[a_mode], "NTIC"[b_mode], cfg->bm, cfg->bn, splits, cm ? " f16" : "",
              a_half != G_MAXUINT ? " A16" : "", b_half != G_MAXUINT ? " B16" : "");
  if (splits == 1)
    {
      pc = (typeof (pc)) { M, N, K, lda, ldb, ldc, ldd, a_off, b_off, c_off, d_off,
                           K, 0, flags, 1.0f / a_scale, a_scale };
      rlx_vkt_rec_dispatch (r, shader, spec, n_spec, A, B, C, D, &pc, push_size,
                            (N + cfg->bn - 1) / cfg->bn, (M + cfg->bm - 1) / cfg->bm, 1);
      return;
    }
  pc = (typeof (pc)) { M, N, K, lda, ldb, N, ldd, a_off, b_off, 0, d_off,
                       k_chunk, M * N, 0, 1.0f / a_scale, a_scale };
  rlx_vkt_rec_dispatch (r, shader, spec, n_spec, A, B, &r->t->bufs[B_PART], D, &pc, push_size,
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

void
rlx_vkt_rec_gemm (Rec *r, gboolean a_kc, gboolean b_kc, guint M, guint N, guint K,
                  Buf *A, guint lda, guint a_off, Buf *B, guint ldb, guint b_off,
                  Buf *C, guint ldc, guint c_off, Buf *D, guint d_off, guint ldd, guint flags)
{
  rlx_vkt_rec_gemm_ex (r, a_kc ? OP_KC : OP_KN, b_kc ? OP_KC : OP_KN, 0, 0, M, N, K,
                       A, lda, a_off, B, ldb, b_off, C, ldc, c_off, D, d_off, ldd, flags);
}

/* Everything recorded before, compute or transfer, done and visible to
 * what comes after on the device, and with @host to the host too (a pass
 * that wrote its results straight into host-visible memory). */
void
rlx_vkt_rec_all_barrier (Rec *r, gboolean host)
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

void
rlx_vkt_rec_full_barrier (Rec *r)
{
  rlx_vkt_rec_all_barrier (r, FALSE);
}

void
rlx_vkt_rec_to_host (Rec *r)
{
  VkMemoryBarrier to_host = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_HOST_READ_BIT,
  };
  r->t->vk.CmdPipelineBarrier (r->cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                               0, 1, &to_host, 0, NULL, 0, NULL);
}

void
rlx_vkt_rec_timestamp (Rec *r, guint q, gboolean start)
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
gboolean
rlx_vkt_rec_begin (RlxVkTrainer *self, Rec *r, Recorded *out, guint max_sets, GError **error)
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

void
rlx_vkt_recorded_clear (RlxVkTrainer *self, Recorded *rec)
{
  if (rec->cb != VK_NULL_HANDLE)
    self->vk.FreeCommandBuffers (self->dev, self->cmdpool, 1, &rec->cb);
  if (rec->pool != VK_NULL_HANDLE)
    self->vk.DestroyDescriptorPool (self->dev, rec->pool, NULL);
  memset (rec, 0, sizeof *rec);
}

gboolean
rlx_vkt_rec_end (RlxVkTrainer *self, Rec *r, Recorded *out)
{
  VkResult res = self->vk.EndCommandBuffer (r->cb);

  if (!r->failed && res != VK_SUCCESS)
    {
      rlx_vk_set_error (r->error, res, "recording a command buffer");
      r->failed = TRUE;
    }
  if (r->failed)
    rlx_vkt_recorded_clear (self, out);
  return !r->failed;
}
