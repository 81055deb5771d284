/* rlx-vk-wire.c — what the resident parameters' passes record: the wire
 * pass (gradient → codes with error feedback), an update's apply (with its
 * check), the replica's hash, and the summaries they leave for the host
 *
 * Threads: the trainer's (rlx-vk-trainer-private.h).
 */
#include "rlx-config.h"
#include "rlx-vk-trainer-private.h"

/* Summary @region of wire_s → @dst at byte @dst_off, for the host. */
void
rlx_vkt_rec_copy_region (Rec *r, guint region, Buf *dst, gsize dst_off)
{
  VkBufferCopy meta = { region_off (r->t, region) * 4, dst_off, META_WORDS * 4 };

  r->t->vk.CmdCopyBuffer (r->cb, r->t->wire_s.buf, dst->buf, 1, &meta);
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

  rlx_vkt_rec_dispatch (r, SH_WIRE_MAX, NULL, 0, &t->wire_s, &t->grads, &t->control, NULL, &b,
                        sizeof b, 1, 1, 1);
}

void
rlx_vkt_rec_fold_unless_done (Rec *r, guint groups, guint region, guint32 loss_index, guint32 prec)
{
  if (r->t->tun.fold_last)
    return;
  rlx_vkt_rec_full_barrier (r);
  rec_fold (r, groups, region, loss_index, prec);
}

/* The hash of replica[0, @n) into summary @region (rlx_params_hash's tree):
 * first the chunk hashes — a chain of 2048 rounds a lane, whatever the
 * model's size, so the caller records what can run beside it (a download)
 * right after — then, behind a barrier, one invocation combines them. */
void
rlx_vkt_rec_hash_chunks (Rec *r, guint n)
{
  RlxVkTrainer *t = r->t;
  guint chunks = (n + HASH_CHUNK - 1) / HASH_CHUNK;

  G_STATIC_ASSERT (HASH_CHUNK == RLX_PARAMS_HASH_CHUNK);
  struct { guint32 n, mode, meta_off; } pc = { n, 0, 0 };

  rlx_vkt_rec_dispatch (r, SH_PARAMS_HASH, NULL, 0, &t->replica, &t->hash_part, &t->wire_s, NULL,
                        &pc, sizeof pc, (chunks + HASH_CHUNKS_PER_GROUP - 1) / HASH_CHUNKS_PER_GROUP, 1, 1);
}

void
rlx_vkt_rec_hash_combine (Rec *r, guint n, guint region)
{
  RlxVkTrainer *t = r->t;
  struct { guint32 n, mode, meta_off; } pc = { n, 1, (guint32) region_off (t, region) };

  rlx_vkt_rec_full_barrier (r);
  rlx_vkt_rec_dispatch (r, SH_PARAMS_HASH, NULL, 0, &t->replica, &t->hash_part, &t->wire_s, NULL,
                        &pc, sizeof pc, 1, 1, 1);
  rlx_vkt_rec_full_barrier (r);
}

void
rlx_vkt_rec_hash (Rec *r, guint n, guint region)
{
  rlx_vkt_rec_full_barrier (r);
  rlx_vkt_rec_hash_chunks (r, n);
  rlx_vkt_rec_hash_combine (r, n, region);
}

/* The wire pass over gradient elements [0, @n): codes at @prec into the
 * readback buffer, the summary after them (REG_WIRE); with @hash the
 * replica's hash too (REG_HASH), its chunks beside the codes' download. */
void
rlx_vkt_rec_wire_pass (Rec *r, guint n, guint prec, gboolean feedback, guint32 loss_index,
                       gboolean hash)
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

  rlx_vkt_rec_full_barrier (r);
  rlx_vkt_rec_dispatch (r, SH_WIRE_SUM, NULL, 0, &t->grads, &t->residual, &t->control, &t->wire_s,
                        &a, sizeof a, groups, 1, 1);
  rlx_vkt_rec_fold_unless_done (r, groups, REG_WIRE, loss_index, prec);
  {
    Buf *bs[N_BINDINGS] = { &t->wire_s, &t->tables, &t->residual, &t->codes_dev, &t->control, NULL };
    rlx_vkt_rec_dispatch_v (r, SH_WIRE_QUANT, NULL, 0, bs, &c, sizeof c, groups_for ((n + 3) / 4, 256), 1, 1);
  }
  rlx_vkt_rec_full_barrier (r);
  if (hash)
    {
      rlx_vkt_rec_timestamp (r, Q_HASH, TRUE);
      rlx_vkt_rec_hash_chunks (r, (guint) t->model->n_params);
    }
  t->vk.CmdCopyBuffer (r->cb, t->codes_dev.buf, t->readback.buf, 1, &codes);
  rlx_vkt_rec_copy_region (r, REG_WIRE, &t->readback, t->readback_meta);
  if (hash)
    {
      rlx_vkt_rec_hash_combine (r, (guint) t->model->n_params, REG_HASH);
      rlx_vkt_rec_copy_region (r, REG_HASH, &t->readback,
                               t->readback_meta + REG_HASH * META_WORDS * 4);
      rlx_vkt_rec_timestamp (r, Q_HASH, FALSE);
    }
  rlx_vkt_rec_to_host (r);
  if (t->queries != VK_NULL_HANDLE && loss_index != G_MAXUINT32)
    t->vk.CmdWriteTimestamp (r->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, t->queries, Q_STEP + 3);
}

/* replica[0, @n) -= decode (codes_in) at @prec; @checked: codes_check and a
 * fold first (REG_APPLY, copied out), and nothing is applied when a code
 * decodes to NaN or ±Inf */
void
rlx_vkt_rec_apply (Rec *r, guint n, guint prec, gboolean checked)
{
  RlxVkTrainer *t = r->t;
  struct { guint32 n, prec, check_off; } pc = { n, prec, G_MAXUINT32 };
  gboolean timed = r->step == NULL && n == t->model->n_params;

  if (timed)
    rlx_vkt_rec_timestamp (r, Q_APPLY, TRUE);
  rlx_vkt_rec_full_barrier (r);
  if (checked)
    {
      guint per_group, groups = wire_groups (n, &per_group);
      struct { guint32 n, per_group, part_off, prec; } c = {
        n, per_group, (guint32) t->part_off, prec
      };

      rlx_vkt_rec_dispatch (r, SH_CODES_CHECK, NULL, 0, &t->codes_in, &t->wire_s, NULL, NULL, &c,
                            sizeof c, groups, 1, 1);
      rlx_vkt_rec_full_barrier (r);
      rec_fold (r, groups, REG_APPLY, G_MAXUINT32, WIRE_F32);
      rlx_vkt_rec_full_barrier (r);
      pc.check_off = (guint32) region_off (t, REG_APPLY) + META_BAD;
    }
  {
    Buf *bs[N_BINDINGS] = { &t->codes_in, &t->tables, &t->control, &t->replica, &t->wire_s, NULL };
    rlx_vkt_rec_dispatch_v (r, SH_WIRE_APPLY, NULL, 0, bs, &pc, sizeof pc, groups_for ((n + 3) / 4, 256), 1, 1);
  }
  rlx_vkt_rec_full_barrier (r);
  if (checked)
    {
      rlx_vkt_rec_copy_region (r, REG_APPLY, &t->readback,
                               t->readback_meta + REG_APPLY * META_WORDS * 4);
      rlx_vkt_rec_to_host (r);
    }
  if (timed)
    rlx_vkt_rec_timestamp (r, Q_APPLY, FALSE);
}

void
rlx_vkt_fill_apply (Rec *r, gpointer data)
{
  ApplyKey *k = data;
  rlx_vkt_rec_apply (r, k->n, k->prec, k->checked);
}
