/* rlx-vk-round.c — the leader's round on the device (rlx-vk.h says what
 * each call does): the own gradient, members' buckets added as they come,
 * the finish in one submission, and the rounds made ahead (the next own
 * gradient, the update made ahead for a lone leader, the gradient after
 * next), undone when the round turns out otherwise
 *
 * Threads: the trainer's (rlx-vk-trainer-private.h).
 */
#include "rlx-config.h"
#include "rlx-vk-trainer-private.h"

#include <math.h>
#include <string.h>

/* Parameters small enough for a lone leader's next update to be made ahead
 * (presubmit): on the H200 that won 12% a step for mnist-mlp (0.4 MB) and 6%
 * for mnist-cnn, and lost 2% for mnist-mlp-xl (7.5 MB), whose finish already
 * overlapped the host and whose backups cost more than the gap they close. */
#define PRESUB_MAX_BYTES (4u << 20)

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

  rlx_vkt_rec_full_barrier (r);
  rlx_vkt_rec_dispatch (r, SH_WIRE_SUM, NULL, 0, &t->grads, &t->residual, &t->control, &t->wire_s,
                        &a, sizeof a, groups, 1, 1);
  rlx_vkt_rec_fold_unless_done (r, groups, REG_OWN, n, WIRE_F32);
  rlx_vkt_rec_full_barrier (r);
  rlx_vkt_rec_copy_region (r, REG_OWN, &t->readback,
                           t->readback_meta + own_region (slot) * META_WORDS * 4);
  rlx_vkt_rec_to_host (r);
  if (t->queries != VK_NULL_HANDLE)
    t->vk.CmdWriteTimestamp (r->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, t->queries, Q_STEP + 3);
}

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

  rlx_vkt_rec_full_barrier (r);
  rlx_vkt_rec_dispatch_v (r, SH_ROUND_ACC, NULL, 0, bs, &pc, sizeof pc, groups_for (n, 256), 1, 1);
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
  r = rlx_vkt_submit (self, &rec->cb, 1, VK_NULL_HANDLE, FALSE);
  if (r != VK_SUCCESS)
    return rlx_vkt_wait_submission (self, VK_NULL_HANDLE, r, "adding to the round's sum", error);
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
  if (rlx_vkt_buf_create (self, &self->sum, n * 4, storage, MEM_DEVICE, "round sum", error) &&
      rlx_vkt_buf_create (self, &self->ures, n * 4, storage, MEM_DEVICE,
                          "update residual", error) &&
      rlx_vkt_buf_create (self, &self->round_rb, (self->code_words + META_WORDS) * 4, storage,
                          MEM_READBACK, "update download", error))
    return TRUE;
  rlx_vkt_buf_destroy (self, &self->sum);
  rlx_vkt_buf_destroy (self, &self->ures);
  rlx_vkt_buf_destroy (self, &self->round_rb);
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
  Step *step = rlx_vkt_get_step_slot (self, n, TRUE, slot, error);

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

      if (!rlx_vkt_wait_submission (self, self->fence3[self->presub_slot], VK_SUCCESS,
                                    "an update made ahead (the own gradient's check)", error))
        return FALSE;
      m = self->rb_presub[self->presub_slot].map;
      if (m[META_GMAX] >= 0x7f800000u)
        {
          self->poison_index = self->own_poison[slot][0];
          self->poison_bits = self->own_poison[slot][1];
          *ready = FALSE;
          return rlx_vkt_presub_settle (self, error);
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
  return rlx_vkt_submit_wait (self, &rec->cb, 1, FALSE, "the own gradient's check", error);
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
  if (self->after_q && self->n_contrib > 0 && !rlx_vkt_presub_settle (self, error))
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
      if (!rlx_vkt_presub_settle (self, error))
        return FALSE;
      slot = 0;
      self->tl_kind = "own gradient, waited for";
      if (!own_cbs (self, indices, n, slot, FALSE, cbs, &n_cbs, &checked, &step, error) ||
          !rlx_vkt_submit_wait (self, cbs, n_cbs, TRUE, what, error))
        return FALSE;
      if (!apply_outcome (self, checked, error))
        return FALSE;
      rlx_vkt_read_timings (self, step, applied);
    }
  else
    {
      Step *step = rlx_vkt_get_step_slot (self, n, TRUE, slot, NULL);
      if (step != NULL)
        rlx_vkt_read_timings (self, step, FALSE);
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

      if (!rlx_vkt_buf_create_upload (self, &b, (self->code_words + SLOT_WORDS) * 4, what, error))
        {
          rlx_vkt_buf_destroy (self, &b);
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
  if (self->early && !rlx_vkt_presub_settle (self, error))
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
  if (!rlx_vkt_presub_settle (self, &error))
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
    rlx_vkt_rec_timestamp (r, Q_ROUND, TRUE);
  rlx_vkt_rec_full_barrier (r);
  /* (the one pass backs the replica up as it goes, and leaves the update
   * residual alone) */
  if (k->presub && !k->lone)
    {
      VkBufferCopy all = { 0, 0, (VkDeviceSize) n * 4 };

      t->vk.CmdCopyBuffer (r->cb, t->replica.buf, t->replica_bak.buf, 1, &all);
      t->vk.CmdCopyBuffer (r->cb, t->ures.buf, t->ures_bak.buf, 1, &all);
      rlx_vkt_rec_full_barrier (r);
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
          rlx_vkt_rec_timestamp (r, Q_HASH, TRUE);
          rlx_vkt_rec_timestamp (r, Q_HASH, FALSE);
        }
      rlx_vkt_rec_dispatch_v (r, SH_ROUND_LONE, NULL, 0, bs, &l, sizeof l,
                              (n + HASH_CHUNK - 1) / HASH_CHUNK, 1, 1);
      if (t->tun.lone_direct)
        rlx_vkt_rec_all_barrier (r, TRUE);
      else
        {
          rlx_vkt_rec_full_barrier (r);
          rlx_vkt_rec_copy_region (r, REG_ROUND, out, k->presub ? 0 : t->code_words * 4);
          rlx_vkt_rec_to_host (r);
        }
      if (!k->presub)
        rlx_vkt_rec_timestamp (r, Q_ROUND, FALSE);
      return;
    }
  {
    Buf *bs[N_BINDINGS] = { x, &t->ures, &t->control, &t->wire_s, &t->tables, NULL };
    rlx_vkt_rec_dispatch_v (r, SH_ROUND_U, NULL, 0, bs, &u, sizeof u, groups, 1, 1);
  }
  rlx_vkt_rec_fold_unless_done (r, groups, REG_ROUND, G_MAXUINT32, G_MAXUINT32);
  rlx_vkt_rec_full_barrier (r);
  {
    Buf *bs[N_BINDINGS] = { &t->wire_s, &t->tables, &t->ures, &t->codes_dev, &t->replica,
                            &t->control };
    rlx_vkt_rec_dispatch_v (r, SH_ROUND_QUANT, NULL, 0, bs, &q, sizeof q, groups_for ((n + 3) / 4,
                                                                                      256),
                            1, 1);
  }
  /* the hash's chunks beside the codes' download */
  rlx_vkt_rec_full_barrier (r);
  if (!k->presub)
    rlx_vkt_rec_timestamp (r, Q_HASH, TRUE);
  rlx_vkt_rec_hash_chunks (r, n);
  if (k->codes)
    t->vk.CmdCopyBuffer (r->cb, t->codes_dev.buf, t->round_rb.buf, 1, &codes);
  rlx_vkt_rec_hash_combine (r, n, REG_ROUND);
  if (k->presub)
    rlx_vkt_rec_copy_region (r, REG_ROUND, &t->rb_presub[k->slot], 0);
  else
    {
      rlx_vkt_rec_timestamp (r, Q_HASH, FALSE);
      rlx_vkt_rec_copy_region (r, REG_ROUND, &t->round_rb, t->code_words * 4);
    }
  rlx_vkt_rec_to_host (r);
  if (!k->presub)
    rlx_vkt_rec_timestamp (r, Q_ROUND, FALSE);
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

  rlx_vkt_rec_full_barrier (r);
  t->vk.CmdCopyBuffer (r->cb, t->replica_bak.buf, t->replica.buf, 1, &all);
  if (data == NULL)
    t->vk.CmdCopyBuffer (r->cb, t->ures_bak.buf, t->ures.buf, 1, &all);
  rlx_vkt_rec_full_barrier (r);
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
  if (rlx_vkt_buf_create (self, &self->replica_bak, n * 4, storage, MEM_DEVICE,
                          "replica backup", error) &&
      rlx_vkt_buf_create (self, &self->ures_bak, n * 4, storage, MEM_DEVICE,
                          "update residual backup", error) &&
      rlx_vkt_buf_create (self, &self->rb_presub[0], META_WORDS * 4, storage, MEM_READBACK,
                          "summary of an update made ahead", error) &&
      rlx_vkt_buf_create (self, &self->rb_presub[1], META_WORDS * 4, storage, MEM_READBACK,
                          "summary of an update made ahead", error))
    return TRUE;
  rlx_vkt_buf_destroy (self, &self->replica_bak);
  rlx_vkt_buf_destroy (self, &self->ures_bak);
  rlx_vkt_buf_destroy (self, &self->rb_presub[0]);
  rlx_vkt_buf_destroy (self, &self->rb_presub[1]);
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
  if (rlx_vkt_submit (self, &rec->cb, 1, self->fence3[slot], FALSE) != VK_SUCCESS)
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
gboolean
rlx_vkt_presub_settle (RlxVkTrainer *self, GError **error)
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
          !rlx_vkt_wait_submission (self, self->fence2[self->after_slot], VK_SUCCESS,
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
      !rlx_vkt_submit_wait (self, &rec->cb, 1, FALSE, "undoing an update made ahead", error) ||
      !rlx_vkt_wait_submission (self, self->fence3[self->presub_slot], VK_SUCCESS,
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
      !rlx_vkt_submit_wait (self, cbs, n, FALSE, "the own gradient, made again", error))
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
  if (rlx_vkt_submit (self, cbs, n, self->fence2[slot], TRUE) != VK_SUCCESS)
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
  if (rlx_vkt_submit (self, cbs, n, self->fence2[0], TRUE) != VK_SUCCESS)
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
      if (!rlx_vkt_wait_submission (self, self->fence3[slot], VK_SUCCESS, what, error))
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

  if (!rlx_vkt_drain_ahead (self, error))
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
  r = rlx_vkt_submit (self, cbs, n_cbs, self->fence, FALSE);
  if (r == VK_SUCCESS && k.lone)
    self->lone_taken++;
  /* the next round's own gradient (and, ours alone, its update) right
   * behind on the queue */
  if (r == VK_SUCCESS)
    {
      queue_next (self, next, next_n, prec, fb, codes == NULL, 0);
      queue_after (self);
    }
  if (!rlx_vkt_wait_submission (self, self->fence, r, what, error))
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
      self->timings.round_us = rlx_vkt_query_span (self, Q_ROUND);
      self->timings.hash_us = rlx_vkt_query_span (self, Q_HASH);
    }
  call_end (self, t0);
  return TRUE;
}
