/* rlx-vk-resident.c — resident parameters
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
 *
 * Threads: the trainer's (rlx-vk-trainer-private.h).
 */
#include "rlx-config.h"
#include "rlx-vk-trainer-private.h"
#include "core/util/rlx-par-copy.h"

#include <string.h>

static void
fill_hash (Rec *r, gpointer data)
{
  RlxVkTrainer *t = r->t;

  rlx_vkt_rec_timestamp (r, Q_HASH, TRUE);
  rlx_vkt_rec_hash (r, GPOINTER_TO_UINT (data), REG_HASH);
  rlx_vkt_rec_copy_region (r, REG_HASH, &t->readback, t->readback_meta + REG_HASH * META_WORDS * 4);
  rlx_vkt_rec_to_host (r);
  rlx_vkt_rec_timestamp (r, Q_HASH, FALSE);
}

static const Recorded *
get_hash_rec (RlxVkTrainer *self, GError **error)
{
  return get_recorded (self, &self->hash_rec, 2, fill_hash,
                       GUINT_TO_POINTER ((guint) self->model->n_params), error);
}

typedef struct {
  guint prec;
  gboolean feedback, hash;
} WireKey;

static void
fill_wire (Rec *r, gpointer data)
{
  WireKey *k = data;

  rlx_vkt_rec_wire_pass (r, (guint) r->t->model->n_params, k->prec, k->feedback,
                         (guint32) r->t->model->n_params, k->hash);
}

static const Recorded *
get_wire_rec (RlxVkTrainer *self, guint prec, gboolean feedback, gboolean hash, GError **error)
{
  WireKey k = { prec, feedback, hash };

  return get_recorded (self, &self->wire_rec[prec][feedback ? 1 : 0][hash ? 1 : 0], 6, fill_wire,
                       &k, error);
}

gboolean
rlx_vkt_drain_ahead (RlxVkTrainer *self, GError **error)
{
  return (!self->ahead || wait_ahead (self, "the next round's own gradient", error)) &&
         rlx_vkt_presub_settle (self, error);
}

/* Applies the update waiting in codes_in on its own (with the hash when
 * @hash). An own gradient computed ahead may still be running: it reads the
 * replica, which the update (after it on the queue) only writes behind a
 * barrier, and nothing here touches what it writes. */
gboolean
rlx_vkt_flush_update (RlxVkTrainer *self, gboolean hash, GError **error)
{
  VkCommandBuffer cbs[2];
  guint n_cbs = 0;
  gboolean checked;

  if (!rlx_vkt_presub_settle (self, error) || !take_update (self, cbs, &n_cbs, &checked, error))
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
  if (!rlx_vkt_submit_wait (self, cbs, n_cbs, FALSE, "applying an update", error))
    return FALSE;
  if (hash && !self->hash_valid)
    {
      const guint32 *m = readback_region (self, REG_HASH);
      self->hash = (guint64) m[META_HASH_HI] << 32 | m[META_HASH_LO];
      self->hash_valid = TRUE;
    }
  return apply_outcome (self, checked, error);
}

void
rlx_vkt_resident_free (RlxVkTrainer *self)
{
  for (guint p = 0; p < 4; p++)
    {
      rlx_vkt_recorded_clear (self, &self->apply_rec[p][0]);
      rlx_vkt_recorded_clear (self, &self->apply_rec[p][1]);
      for (guint f = 0; f < 4; f++)
        rlx_vkt_recorded_clear (self, &self->wire_rec[p][f / 2][f % 2]);
      for (guint x = 0; x < 3; x++)
        for (guint w = 0; w < 2; w++)
          rlx_vkt_recorded_clear (self, &self->finish_rec[x][p][w]);
      for (guint i = 0; i < 2; i++)
        rlx_vkt_recorded_clear (self, &self->presub_rec[p][i]);
    }
  rlx_vkt_recorded_clear (self, &self->rollback_rec);
  rlx_vkt_recorded_clear (self, &self->rollback_lone_rec);
  rlx_vkt_recorded_clear (self, &self->finish_lone_rec);
  rlx_vkt_recorded_clear (self, &self->presub_lone_rec[0]);
  rlx_vkt_recorded_clear (self, &self->presub_lone_rec[1]);
  rlx_vkt_recorded_clear (self, &self->hash_rec);
  rlx_vkt_recorded_clear (self, &self->own_rec[0]);
  rlx_vkt_recorded_clear (self, &self->own_rec[1]);
  if (self->acc_recs != NULL)
    {
      GHashTableIter it;
      gpointer v;

      g_hash_table_iter_init (&it, self->acc_recs);
      while (g_hash_table_iter_next (&it, NULL, &v))
        rlx_vkt_recorded_clear (self, v);
    }
  for (guint k = 0; self->slots != NULL && k < self->slots->len; k++)
    rlx_vkt_buf_destroy (self, slot_buf (self, k));
  rlx_vkt_buf_destroy (self, &self->replica);
  rlx_vkt_buf_destroy (self, &self->residual);
  rlx_vkt_buf_destroy (self, &self->wire_s);
  rlx_vkt_buf_destroy (self, &self->codes_dev);
  rlx_vkt_buf_destroy (self, &self->tables);
  rlx_vkt_buf_destroy (self, &self->control);
  rlx_vkt_buf_destroy (self, &self->codes_in);
  rlx_vkt_buf_destroy (self, &self->readback);
  rlx_vkt_buf_destroy (self, &self->hash_part);
  rlx_vkt_buf_destroy (self, &self->sum);
  rlx_vkt_buf_destroy (self, &self->ures);
  rlx_vkt_buf_destroy (self, &self->round_rb);
  for (guint i = 0; i < 2; i++)
    rlx_vkt_buf_destroy (self, &self->rb_presub[i]);
  rlx_vkt_buf_destroy (self, &self->replica_bak);
  rlx_vkt_buf_destroy (self, &self->ures_bak);
  self->presub = FALSE;
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
  if (!rlx_vkt_buf_create (self, &self->replica, n * 4, storage, MEM_DEVICE,
                           "parameter replica", error) ||
      !rlx_vkt_buf_create (self, &self->residual, 2 * n * 4, storage, MEM_DEVICE,
                           "gradient residual", error) ||
      !rlx_vkt_buf_create (self, &self->wire_s, (self->meta_off + N_REGIONS * META_WORDS + 1) * 4,
                           storage, MEM_DEVICE, "wire scratch", error) ||
      !rlx_vkt_buf_create (self, &self->codes_dev, words * 4, storage, MEM_DEVICE,
                           "gradient codes", error) ||
      !rlx_vkt_buf_create (self, &self->tables, TAB_WORDS * 4, storage, MEM_DEVICE,
                           "wire tables", error) ||
      !rlx_vkt_buf_create (self, &self->control, CTL_WORDS * 4, storage, MEM_UPLOAD,
                           "wire control", error) ||
      !rlx_vkt_buf_create (self, &self->readback, (words + (N_REGIONS + 1) * META_WORDS) * 4,
                           storage, MEM_READBACK, "codes download", error) ||
      !rlx_vkt_buf_create (self, &self->hash_part, chunks * 8, storage, MEM_DEVICE,
                           "hash chunks", error) ||
      !rlx_vkt_buf_create_upload (self, &self->codes_in, words * 4, "update codes", error))
    return FALSE;

  tab = g_new0 (guint32, TAB_WORDS);
  memcpy (tab + TAB_BRIDGE_E4M3, tables->bridge[0], 65536);
  memcpy (tab + TAB_BRIDGE_E5M2, tables->bridge[1], 65536);
  memcpy (tab + TAB_F8_E4M3, tables->f8_bits[0], 256 * 4);
  memcpy (tab + TAB_F8_E5M2, tables->f8_bits[1], 256 * 4);
  if (!rlx_vkt_upload (self, &self->tables, tab, TAB_WORDS * 4, error) ||
      !rlx_vkt_run_once (self, fill_count_zero, NULL, "clearing the wire scratch", error))
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

  rlx_vkt_rec_full_barrier (r);
  r->t->vk.CmdCopyBuffer (r->cb, r->t->codes_in.buf, r->t->replica.buf, 1, &region);
  rlx_vkt_rec_hash (r, (guint) r->t->model->n_params, REG_HASH);
  rlx_vkt_rec_copy_region (r, REG_HASH, &r->t->readback,
                           r->t->readback_meta + REG_HASH * META_WORDS * 4);
  rlx_vkt_rec_to_host (r);
}

gboolean
rlx_vk_trainer_load_params (RlxVkTrainer *self, const float *params, GError **error)
{
  gint64 t0 = call_begin (self);
  const guint32 *m;

  g_return_val_if_fail (self != NULL && params != NULL, FALSE);

  if (!need_resident (self, error) || !rlx_vkt_drain_ahead (self, error))
    return FALSE;
  /* an update still waiting was for the replica this replaces, and so was
   * a round in progress */
  self->pending = -1;
  rlx_vk_trainer_round_cancel (self);
  replica_changed (self);
  rlx_par_copy (self->codes_in.map, params, self->model->n_params * 4);
  self->host_bytes += self->model->n_params * 4;
  if (!rlx_vkt_run_once (self, fill_load, NULL, "loading the parameters", error))
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

  rlx_vkt_rec_full_barrier (r);
  r->t->vk.CmdCopyBuffer (r->cb, r->t->replica.buf, r->t->readback.buf, 1, &region);
  rlx_vkt_rec_full_barrier (r);
  rlx_vkt_rec_to_host (r);
}

gboolean
rlx_vkt_read_replica (RlxVkTrainer *self, float *params, gsize n, GError **error)
{
  if (!rlx_vkt_flush_update (self, FALSE, error) ||
      !rlx_vkt_run_once (self, fill_read, GSIZE_TO_POINTER (n), "reading the parameters", error))
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
  return need_resident (self, error) && rlx_vkt_presub_settle (self, error) &&
         rlx_vkt_read_replica (self, params, self->model->n_params, error);
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
  if (!self->hash_valid && !rlx_vkt_flush_update (self, TRUE, error))
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
  if (!rlx_vkt_flush_update (self, FALSE, error))
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

/* Sets the control words of a wire pass: it reads the accepted residual
 * and writes the new one into the other half. */
void
rlx_vkt_wire_control (RlxVkTrainer *self)
{
  guint32 *ctl = self->control.map;
  guint32 n = (guint32) self->model->n_params;

  ctl[CTL_USE_RESIDUAL] = self->residual_zero ? 0 : 1;
  ctl[CTL_RES_IN] = self->res_half * n;
  ctl[CTL_RES_OUT] = (self->res_half ^ 1) * n;
  self->res_pending = FALSE;
  poison_control (self);
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

  if (!need_resident (self, error) || !rlx_vkt_drain_ahead (self, error))
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
  rlx_vkt_wire_control (self);
  what = g_strdup_printf ("a %s step of %u samples", self->model->slug, n);
  if (!rlx_vkt_submit_wait (self, cbs, n_cbs, TRUE, what, error))
    return FALSE;
  if (hash)
    take_hash (self);
  if (!apply_outcome (self, checked, error))
    return FALSE;
  summary_of (readback_region (self, REG_WIRE), summary);
  /* a new residual waits for rlx_vk_trainer_accept_feedback */
  self->res_pending = feedback && summary->smax_bits < 0x7f800000u;
  *codes = self->readback.map;
  rlx_vkt_read_timings (self, step, applied);
  self->timings.hash_us = hash ? rlx_vkt_query_span (self, Q_HASH) : 0;
  call_end (self, t0);
  return TRUE;
}
