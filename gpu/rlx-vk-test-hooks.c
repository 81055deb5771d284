/* rlx-vk-test-hooks.c — entry points for the tests and for the backend's
 * check of a device (rlx-vk.h): a poisoned gradient element, a nudged
 * division, and one wire pass, apply or hash on given data
 *
 * Threads: the trainer's (rlx-vk-trainer-private.h).
 */
#include "rlx-config.h"
#include "rlx-vk-trainer-private.h"

#include <string.h>

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
  rlx_vkt_rec_wire_pass (r, w->n, w->prec, w->feedback, G_MAXUINT32, FALSE);
}

gboolean
rlx_vk_trainer_wire_test (RlxVkTrainer *self, const float *g, gsize n, guint prec,
                          gboolean feedback, void *codes, RlxVkWireSummary *summary,
                          GError **error)
{
  WireTest w = { (guint) n, prec, feedback };

  g_return_val_if_fail (self != NULL && g != NULL && codes != NULL && summary != NULL, FALSE);
  g_return_val_if_fail (n >= 1 && n <= self->model->n_params && prec < 4, FALSE);

  if (!need_resident (self, error) || !rlx_vkt_drain_ahead (self, error))
    return FALSE;
  memcpy (self->staging_in.map, g, n * 4);
  rlx_vkt_wire_control (self);
  if (!rlx_vkt_run_once (self, fill_wire_test, &w, "a wire pass", error))
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
  rlx_vkt_rec_apply (r, k->n, k->prec, k->checked);
}

gboolean
rlx_vk_trainer_apply_test (RlxVkTrainer *self, float *params, gsize n, const void *codes,
                           guint prec, double inv, GError **error)
{
  ApplyKey k = { (guint) n, prec, FALSE };
  guint32 *ctl;

  g_return_val_if_fail (self != NULL && params != NULL && codes != NULL, FALSE);
  g_return_val_if_fail (n >= 1 && n <= self->model->n_params && prec < 4, FALSE);

  if (!need_resident (self, error) || !rlx_vkt_drain_ahead (self, error) ||
      !rlx_vkt_flush_update (self, FALSE, error))
    return FALSE;
  replica_changed (self);
  memcpy (self->staging_in.map, params, n * 4);
  memcpy (self->codes_in.map, codes, n * code_size[prec]);
  ctl = self->control.map;
  memcpy (&ctl[CTL_INV_LO], &inv, sizeof inv);
  return rlx_vkt_run_once (self, fill_apply_test, &k, "applying an update", error) &&
         rlx_vkt_read_replica (self, params, n, error);
}

static void
fill_hash_test (Rec *r, gpointer data)
{
  guint n = GPOINTER_TO_UINT (data);
  VkBufferCopy up = { 0, 0, (gsize) n * 4 };

  r->t->vk.CmdCopyBuffer (r->cb, r->t->staging_in.buf, r->t->replica.buf, 1, &up);
  rlx_vkt_rec_hash (r, n, REG_HASH);
  rlx_vkt_rec_copy_region (r, REG_HASH, &r->t->readback,
                           r->t->readback_meta + REG_HASH * META_WORDS * 4);
  rlx_vkt_rec_to_host (r);
}

gboolean
rlx_vk_trainer_hash_test (RlxVkTrainer *self, const float *params, gsize n, guint64 *hash,
                          GError **error)
{
  const guint32 *m;

  g_return_val_if_fail (self != NULL && params != NULL && hash != NULL, FALSE);
  g_return_val_if_fail (n >= 1 && n <= self->model->n_params, FALSE);

  if (!need_resident (self, error) || !rlx_vkt_drain_ahead (self, error) ||
      !rlx_vkt_flush_update (self, FALSE, error))
    return FALSE;
  replica_changed (self);
  memcpy (self->staging_in.map, params, n * 4);
  if (!rlx_vkt_run_once (self, fill_hash_test, GUINT_TO_POINTER ((guint) n), "hashing", error))
    return FALSE;
  m = readback_region (self, REG_HASH);
  *hash = (guint64) m[META_HASH_HI] << 32 | m[META_HASH_LO];
  return TRUE;
}
