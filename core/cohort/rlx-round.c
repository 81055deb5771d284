/* rlx-round.c — see rlx-round.h */
#include "rlx-config.h"
#include "rlx-round.h"
#include "core/rlx-kernels.h"
#include "rlx-serial.h"

#include <math.h>
#include <string.h>

typedef enum { SLOT_PENDING, SLOT_IN, SLOT_CLOSED } SlotState;

typedef struct {
  char     *node;
  guint     count;
  SlotState state;
} Slot;

typedef struct {
  char        *node;
  guint        samples;
  double       loss;
  const float *floats;      /* the leader's own (f32, read in place) */
  RlxMsgArray  codes;       /* a member's, in its frame */
  gboolean     added;       /* in the sum (fold jobs only) */
  gboolean     bad;         /* written by fold jobs, read on main after them */
  char        *bad_reason;
  gboolean     reported;    /* its rejection was reported */
} Bucket;

struct _RlxRound {
  GObject    parent_instance;
  gsize      n;
  RlxKernels *kernels;
  RlxKernelsSum *sum;       /* a refused bucket never touches it */
  float     *residual;      /* the update's error feedback */

  gboolean   active;
  guint64    step;
  GArray    *slots;         /* Slot */
  Bucket    *buckets;       /* capacity: slots->len */
  guint      n_buckets;
  guint      deadline_id;
  gint64     started;
  guint64    generation;

  guint64    samples;
  double     loss_sum;
  GPtrArray *contributors;
  guint      late, rejected;
  gint64     max_compute;

  RlxSerial *serial;
};

G_DEFINE_FINAL_TYPE (RlxRound, rlx_round, G_TYPE_OBJECT)

enum { SIG_REJECTED, SIG_LATE, SIG_COMPLETE, N_SIGNALS };
static guint signals[N_SIGNALS];

static void
slot_clear (gpointer p)
{
  g_free (((Slot *) p)->node);
}

static void
buckets_clear (RlxRound *self)
{
  for (guint i = 0; i < self->n_buckets; i++)
    {
      g_free (self->buckets[i].node);
      g_free (self->buckets[i].bad_reason);
      rlx_msg_array_clear (&self->buckets[i].codes);
    }
  g_clear_pointer (&self->buckets, g_free);
  self->n_buckets = 0;
}

static void
rlx_round_dispose (GObject *object)
{
  RlxRound *self = RLX_ROUND (object);

  g_clear_handle_id (&self->deadline_id, g_source_remove);
  g_clear_pointer (&self->serial, rlx_serial_free);
  G_OBJECT_CLASS (rlx_round_parent_class)->dispose (object);
}

static void
rlx_round_finalize (GObject *object)
{
  RlxRound *self = RLX_ROUND (object);

  buckets_clear (self);
  g_clear_pointer (&self->slots, g_array_unref);
  g_clear_pointer (&self->contributors, g_ptr_array_unref);
  g_clear_pointer (&self->sum, rlx_kernels_sum_free);
  g_free (self->residual);
  G_OBJECT_CLASS (rlx_round_parent_class)->finalize (object);
}

static void
rlx_round_class_init (RlxRoundClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GType t = G_TYPE_FROM_CLASS (klass);

  object_class->dispose = rlx_round_dispose;
  object_class->finalize = rlx_round_finalize;
  signals[SIG_REJECTED] = g_signal_new ("rejected", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                        G_TYPE_NONE, 3, G_TYPE_STRING, G_TYPE_UINT64,
                                        G_TYPE_STRING);
  signals[SIG_LATE] = g_signal_new ("late", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                    G_TYPE_NONE, 3, G_TYPE_STRING, G_TYPE_UINT64, G_TYPE_STRING);
  signals[SIG_COMPLETE] = g_signal_new ("complete", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                        G_TYPE_NONE, 0);
}

static void
rlx_round_init (RlxRound *self)
{
  self->slots = g_array_new (FALSE, TRUE, sizeof (Slot));
  g_array_set_clear_func (self->slots, slot_clear);
  self->contributors = g_ptr_array_new_with_free_func (g_free);
  self->serial = rlx_serial_new ();
}

RlxRound *
rlx_round_new (gsize n_params)
{
  RlxRound *self = g_object_new (RLX_TYPE_ROUND, NULL);

  self->n = n_params;
  self->kernels = rlx_kernels_get_default ();
  self->sum = rlx_kernels_sum_new (n_params);
  return self;
}

gboolean rlx_round_is_active (RlxRound *self) { return self->active; }
guint64 rlx_round_get_step (RlxRound *self) { return self->step; }
guint64 rlx_round_get_samples (RlxRound *self) { return self->samples; }
GPtrArray *rlx_round_get_contributors (RlxRound *self) { return self->contributors; }
guint rlx_round_get_late (RlxRound *self) { return self->late; }
guint rlx_round_get_rejected (RlxRound *self) { return self->rejected; }
gint64 rlx_round_get_max_compute (RlxRound *self) { return self->max_compute; }
gint64 rlx_round_get_started (RlxRound *self) { return self->started; }

double
rlx_round_get_loss (RlxRound *self)
{
  return self->samples > 0 ? self->loss_sum / (double) self->samples : 0.0;
}

void
rlx_round_reset_residual (RlxRound *self)
{
  if (self->residual)
    memset (self->residual, 0, self->n * sizeof (float));
}

static void
stop (RlxRound *self)
{
  g_clear_handle_id (&self->deadline_id, g_source_remove);
  /* A fold or the update may still be running on the buckets and the sum
   * that the next round reuses: wait for it (one job at most). */
  rlx_serial_drain (self->serial);
  self->active = FALSE;
  self->generation++;
}

void
rlx_round_cancel (RlxRound *self)
{
  g_return_if_fail (RLX_IS_ROUND (self));
  stop (self);
}

static Slot *
slot_of (RlxRound *self, const char *node)
{
  for (guint i = 0; i < self->slots->len; i++)
    {
      Slot *s = &g_array_index (self->slots, Slot, i);
      if (g_strcmp0 (s->node, node) == 0)
        return s;
    }
  return NULL;
}

static void
check_complete (RlxRound *self)
{
  if (!self->active || rlx_serial_busy (self->serial))
    return;
  for (guint i = 0; i < self->slots->len; i++)
    if (g_array_index (self->slots, Slot, i).state == SLOT_PENDING)
      return;
  g_clear_handle_id (&self->deadline_id, g_source_remove);
  self->active = FALSE;
  g_signal_emit (self, signals[SIG_COMPLETE], 0);
}

static gboolean
on_deadline (gpointer user_data)
{
  RlxRound *self = user_data;
  guint64 gen = self->generation;

  self->deadline_id = 0;
  for (guint i = 0; i < self->slots->len && gen == self->generation; i++)
    {
      Slot *s = &g_array_index (self->slots, Slot, i);
      if (s->state == SLOT_PENDING)
        {
          s->state = SLOT_CLOSED;
          self->late++;
          g_signal_emit (self, signals[SIG_LATE], 0, s->node, self->step,
                         "missed the collect deadline");
        }
    }
  if (gen == self->generation)
    check_complete (self);
  return G_SOURCE_REMOVE;
}

void
rlx_round_begin (RlxRound *self, guint64 step, GArray *slots, guint deadline_ms)
{
  g_return_if_fail (RLX_IS_ROUND (self));
  g_return_if_fail (slots != NULL && slots->len > 0);

  stop (self);
  buckets_clear (self);
  g_array_set_size (self->slots, 0);
  for (guint i = 0; i < slots->len; i++)
    {
      const RlxMsgSlot *in = &g_array_index (slots, RlxMsgSlot, i);
      Slot s = { g_strdup (in->node), in->count, SLOT_PENDING };
      g_array_append_val (self->slots, s);
    }
  self->buckets = g_new0 (Bucket, slots->len);
  rlx_kernels_sum_reset (self->sum);
  self->step = step;
  self->active = TRUE;
  self->started = g_get_monotonic_time ();
  self->samples = 0;
  self->loss_sum = 0;
  g_ptr_array_set_size (self->contributors, 0);
  self->late = self->rejected = 0;
  self->max_compute = 0;
  self->deadline_id = g_timeout_add (deadline_ms, on_deadline, self);
}

/* ── folding (worker thread) ────────────────────────────────────────────── */

typedef struct {
  RlxRound *self;
  guint     upto;       /* fold buckets [0, upto) */
  guint64   generation;
} Fold;

/* Bucket @b as wire codes (the leader's own floats are f32 codes). */
static void
codes_of (Bucket *b, const void **codes, RlxPrecision *p, double *scale)
{
  if (b->floats)
    {
      *codes = b->floats;
      *p = RLX_PRECISION_F32;
      *scale = 1.0;
    }
  else
    {
      *codes = b->codes.codes;
      *p = b->codes.precision;
      *scale = b->codes.scale;
    }
}

/* Add @b to the sum (worker thread); a bad one is marked and left out. */
static void
sum_add (RlxRound *self, Bucket *b)
{
  g_autoptr(GError) error = NULL;
  const void *codes;
  RlxPrecision p;
  double scale;

  codes_of (b, &codes, &p, &scale);
  if (rlx_kernels_sum_add (self->kernels, self->sum, codes, self->n, p, scale,
                           (float) b->samples, &error))
    b->added = TRUE;
  else
    {
      b->bad = TRUE;
      b->bad_reason = g_strdup_printf ("gradient bucket refused: %s", error->message);
    }
}

/* The first bucket is not added alone (a round of one bucket never copies
 * it: the update reads it in place); the second adds both. */
static void
fold_run (gpointer data)
{
  Fold *f = data;
  RlxRound *self = f->self;

  if (f->upto < 2)
    return;
  if (f->upto == 2 && !self->buckets[0].added && !self->buckets[0].bad)
    sum_add (self, &self->buckets[0]);
  sum_add (self, &self->buckets[f->upto - 1]);
}

/* Take the buckets found bad out of the round's totals and report them. */
static void
report_bad (RlxRound *self)
{
  for (guint i = 0; i < self->n_buckets; i++)
    {
      Bucket *b = &self->buckets[i];

      if (!b->bad || b->reported)
        continue;
      b->reported = TRUE;
      self->samples -= b->samples;
      self->loss_sum -= b->loss * b->samples;
      for (guint j = 0; j < self->contributors->len; j++)
        if (g_strcmp0 (g_ptr_array_index (self->contributors, j), b->node) == 0)
          {
            g_ptr_array_remove_index (self->contributors, j);
            break;
          }
      self->rejected++;
      g_signal_emit (self, signals[SIG_REJECTED], 0, b->node, self->step, b->bad_reason);
    }
}

static void
fold_done (gpointer data, gpointer user_data)
{
  Fold *f = data;
  RlxRound *self = f->self;

  if (f->generation != self->generation)
    return;
  report_bad (self);
  check_complete (self);
}

RlxRoundVerdict
rlx_round_offer (RlxRound *self, const char *node, guint64 step, guint samples, double loss,
                 gint64 compute_us, const float *floats, const RlxMsgArray *codes, char **reason)
{
  Slot *slot;
  Bucket *b;
  Fold *f;

  g_return_val_if_fail (RLX_IS_ROUND (self), RLX_ROUND_LATE);
  g_return_val_if_fail (reason != NULL && *reason == NULL, RLX_ROUND_LATE);

  if (!self->active || step != self->step)
    return RLX_ROUND_LATE;
  slot = slot_of (self, node);
  if (slot == NULL || slot->state != SLOT_PENDING)
    return RLX_ROUND_LATE;

  if (floats == NULL && (codes == NULL || codes->frame == NULL || codes->n != self->n))
    *reason = g_strdup_printf ("gradient bucket of %" G_GSIZE_FORMAT " values, the model has %"
                               G_GSIZE_FORMAT, codes && codes->frame ? codes->n : 0, self->n);
  else if (samples != slot->count)
    *reason = g_strdup_printf ("gradient over %u samples, %u were assigned", samples, slot->count);
  else if (!isfinite (loss))
    *reason = g_strdup ("loss is not finite");
  if (*reason)
    {
      slot->state = SLOT_CLOSED;
      self->rejected++;
      check_complete (self);
      return RLX_ROUND_REJECTED;
    }

  slot->state = SLOT_IN;
  b = &self->buckets[self->n_buckets++];
  b->node = g_strdup (node);
  b->samples = samples;
  b->loss = loss;
  b->floats = floats;
  if (floats == NULL)
    rlx_msg_array_copy (&b->codes, codes);
  self->samples += samples;
  self->loss_sum += loss * samples;
  self->max_compute = MAX (self->max_compute, compute_us);
  g_ptr_array_add (self->contributors, g_strdup (node));

  f = g_new0 (Fold, 1);
  f->self = self;
  f->upto = self->n_buckets;
  f->generation = self->generation;
  rlx_serial_push (self->serial, fold_run, fold_done, f, g_free, NULL);
  return RLX_ROUND_ACCEPTED;
}

static void
close_slot (RlxRound *self, const char *node, gboolean rejected)
{
  Slot *slot = slot_of (self, node);

  if (!self->active || slot == NULL || slot->state != SLOT_PENDING)
    return;
  slot->state = SLOT_CLOSED;
  if (rejected)
    self->rejected++;
  check_complete (self);
}

void
rlx_round_close_slot (RlxRound *self, const char *node)
{
  g_return_if_fail (RLX_IS_ROUND (self));
  close_slot (self, node, FALSE);
}

void
rlx_round_reject_slot (RlxRound *self, const char *node)
{
  g_return_if_fail (RLX_IS_ROUND (self));
  close_slot (self, node, TRUE);
}

gboolean
rlx_round_slot_pending (RlxRound *self, const char *node)
{
  Slot *slot = slot_of (self, node);

  return self->active && slot != NULL && slot->state == SLOT_PENDING;
}

/* ── the update (worker thread) ─────────────────────────────────────────── */

typedef struct {
  RlxRound        *self;
  guint64          generation;
  RlxMsg           header;
  double           lr;
  RlxPrecision     precision;
  gboolean         feedback;
  RlxRoundFinished done;
  gpointer         user_data;
  /* out */
  GBytes          *frame;
  RlxMsgArray      update;
  gboolean         changed;   /* a bucket turned out bad */
  char            *error;
} Finish;

static void
finish_free (gpointer p)
{
  Finish *f = p;

  rlx_msg_clear (&f->header);
  g_clear_pointer (&f->frame, g_bytes_unref);
  rlx_msg_array_clear (&f->update);
  g_free (f->error);
  g_free (f);
}

static void
finish_run (gpointer data)
{
  Finish *f = data;
  RlxRound *self = f->self;
  g_autoptr(JsonObject) header = rlx_msg_header (&f->header);
  g_autoptr(GError) error = NULL;
  Bucket *only = NULL;
  guint good = 0;
  guint64 samples = 0;
  const float *sum;
  float *residual = f->feedback ? self->residual : NULL;
  RlxMsg parsed;

  for (guint i = 0; i < self->n_buckets; i++)
    if (!self->buckets[i].bad)
      {
        good++;
        samples += self->buckets[i].samples;
        only = &self->buckets[i];
      }
  if (only == NULL || samples == 0)
    {
      f->changed = TRUE;   /* nothing left to make an update of */
      return;
    }
  if (good == 1 && !only->added &&
      (only->floats || rlx_msg_array_f32 (&only->codes)))
    {
      /* One bucket at f32: u = lr · g straight from it (a bad value in it
       * is found here; then there is no update). */
      sum = only->floats ? only->floats : rlx_msg_array_f32 (&only->codes);
      samples = 1;
    }
  else
    {
      for (guint i = 0; i < self->n_buckets; i++)
        if (!self->buckets[i].bad && !self->buckets[i].added)
          {
            sum_add (self, &self->buckets[i]);
            if (self->buckets[i].bad)
              f->changed = TRUE;
          }
      if (f->changed)
        return;
      sum = rlx_kernels_sum_get (self->sum);
    }
  f->frame = rlx_kernels_encode_update (self->kernels, header, "avg", sum, self->n, (float) f->lr,
                                        samples, residual, f->precision, NULL, NULL, NULL, &error);
  if (f->frame == NULL)
    {
      if (good == 1 && !only->added && g_error_matches (error, RLX_KERNELS_ERROR,
                                                         RLX_KERNELS_ERROR_NONFINITE))
        {
          only->bad = TRUE;
          only->bad_reason = g_strdup_printf ("gradient bucket refused: %s", error->message);
          f->changed = TRUE;
        }
      else
        f->error = g_strdup (error->message);
      return;
    }
  /* The update as every receiver reads it: the frame's own array. */
  if (!rlx_msg_parse (f->frame, NULL, &parsed, &error))
    {
      f->error = g_strdup (error->message);
      return;
    }
  rlx_msg_array_copy (&f->update, &parsed.u.step.update);
  rlx_msg_clear (&parsed);
}

static void
finish_done (gpointer data, gpointer user_data)
{
  Finish *f = data;
  RlxRound *self = f->self;

  if (f->generation != self->generation)
    return;
  if (f->changed)
    {
      report_bad (self);
      f->done (self, NULL, NULL, f->user_data);
      return;
    }
  if (f->error)
    g_critical ("the round's update could not be made: %s", f->error);
  f->done (self, f->frame, f->frame ? &f->update : NULL, f->user_data);
}

void
rlx_round_finish (RlxRound *self, RlxMsg *header, double lr, RlxPrecision precision,
                  gboolean feedback, RlxRoundFinished done, gpointer user_data)
{
  Finish *f;

  g_return_if_fail (RLX_IS_ROUND (self));
  g_return_if_fail (header != NULL && header->kind == RLX_MSG_STEP);
  g_return_if_fail (self->samples > 0);

  if (feedback && precision != RLX_PRECISION_F32 && self->residual == NULL)
    self->residual = g_new0 (float, self->n);
  f = g_new0 (Finish, 1);
  f->self = self;
  f->generation = self->generation;
  f->header = *header;
  memset (header, 0, sizeof *header);
  f->lr = lr;
  f->precision = precision;
  f->feedback = feedback && precision != RLX_PRECISION_F32;
  f->done = done;
  f->user_data = user_data;
  rlx_serial_push (self->serial, finish_run, finish_done, f, finish_free, NULL);
}
