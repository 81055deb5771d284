/* rlx-round.c — see rlx-round.h */
#include "rlx-config.h"
#include "rlx-round.h"
#include "rlx-cohort-math.h"
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
  const float *floats;
  RlxMsgArray  codes;
  gboolean     bad;         /* written by fold jobs, read on main after them */
  char        *bad_reason;
  gboolean     reported;    /* its rejection was reported */
} Bucket;

struct _RlxRound {
  GObject    parent_instance;
  gsize      n;
  float     *sum;
  float     *u;             /* the update before quantisation */
  float     *residual;      /* the update's error feedback */

  gboolean   active;
  guint64    step;
  GArray    *slots;         /* Slot */
  Bucket    *buckets;       /* capacity: slots->len */
  guint      n_buckets;
  guint      folded;        /* buckets the fold jobs have seen (main's count of pushed) */
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
  g_free (self->sum);
  g_free (self->u);
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
  self->sum = g_new (float, n_params);
  self->u = g_new (float, n_params);
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
  rlx_serial_cancel (self->serial);
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
  self->folded = 0;
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

static RlxMathSrc
src_of (Bucket *b)
{
  RlxMathSrc s = { b->floats, b->floats ? NULL : &b->codes };
  return s;
}

static void
mark_bad (Bucket *b, const RlxMathSrc *src, gsize index)
{
  float v;

  if (src->floats)
    v = src->floats[index];
  else
    rlx_msg_array_decode (&(RlxMsgArray) {
        NULL, (const guint8 *) src->codes->codes + index * rlx_precision_element_size (src->codes->precision),
        1, src->codes->precision, src->codes->scale }, &v);
  b->bad = TRUE;
  g_free (b->bad_reason);
  {
    g_autofree char *what = rlx_math_describe_bad (v, index);
    b->bad_reason = g_strdup_printf ("gradient %s", what);
  }
}

/* sum = Σ good buckets [0, upto) with weights; the first alone is not
 * copied (sum is then unused). Buckets found bad are marked. */
static void
fold_from_scratch (RlxRound *self, guint upto)
{
  for (;;)
    {
      Bucket *first = NULL;
      gboolean summed = FALSE, ok = TRUE;

      for (guint i = 0; i < upto && ok; i++)
        {
          Bucket *b = &self->buckets[i];
          RlxMathSrc sb = src_of (b);
          gsize bad = 0;
          guint which = 0;

          if (b->bad)
            continue;
          if (first == NULL)
            first = b;
          else if (!summed)
            {
              RlxMathSrc sa = src_of (first);
              summed = TRUE;
              if (!rlx_math_sum2 (self->sum, &sa, (float) first->samples, &sb, (float) b->samples,
                                  self->n, &which, &bad))
                {
                  mark_bad (which == 0 ? first : b, which == 0 ? &sa : &sb, bad);
                  ok = FALSE;
                }
            }
          else if (!rlx_math_add (self->sum, &sb, (float) b->samples, self->n, &bad))
            {
              mark_bad (b, &sb, bad);
              ok = FALSE;
            }
        }
      if (ok)
        return;
    }
}

static void
fold_run (gpointer data)
{
  Fold *f = data;
  RlxRound *self = f->self;
  guint good = 0, last = f->upto - 1;
  Bucket *b = &self->buckets[last];
  RlxMathSrc sb = src_of (b);
  gsize bad = 0;

  for (guint i = 0; i < last; i++)
    if (!self->buckets[i].bad)
      good++;
  /* The common case, incremental: the new bucket joins the sum (the first
   * good one stays where it is until a second comes). */
  if (good == 0)
    return;
  if (good == 1)
    {
      Bucket *first = NULL;
      RlxMathSrc sa;
      guint which = 0;

      for (guint i = 0; i < last && first == NULL; i++)
        if (!self->buckets[i].bad)
          first = &self->buckets[i];
      if (first == NULL)
        return;
      sa = src_of (first);
      if (rlx_math_sum2 (self->sum, &sa, (float) first->samples, &sb, (float) b->samples, self->n,
                         &which, &bad))
        return;
      mark_bad (which == 0 ? first : b, which == 0 ? &sa : &sb, bad);
    }
  else
    {
      if (rlx_math_add (self->sum, &sb, (float) b->samples, self->n, &bad))
        return;
      mark_bad (b, &sb, bad);
    }
  fold_from_scratch (self, f->upto);
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

void
rlx_round_close_slot (RlxRound *self, const char *node)
{
  Slot *slot;

  g_return_if_fail (RLX_IS_ROUND (self));
  slot = slot_of (self, node);
  if (!self->active || slot == NULL || slot->state != SLOT_PENDING)
    return;
  slot->state = SLOT_CLOSED;
  check_complete (self);
}

void
rlx_round_reject_slot (RlxRound *self, const char *node)
{
  Slot *slot;

  g_return_if_fail (RLX_IS_ROUND (self));
  slot = slot_of (self, node);
  if (!self->active || slot == NULL || slot->state != SLOT_PENDING)
    return;
  slot->state = SLOT_CLOSED;
  self->rejected++;
  check_complete (self);
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
  g_autoptr(GError) error = NULL;
  Bucket *only = NULL;
  guint good = 0;
  guint64 samples = 0;
  float maxabs = 0;
  gsize bad = 0, len = 0;
  double scale;
  guint8 *buf, *payload = NULL;
  const float *r = f->feedback ? self->residual : NULL;

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
  if (good == 1)
    {
      /* One bucket: u = lr · (w·b / w), read in place; checked on the way. */
      RlxMathSrc src = src_of (only);
      if (!rlx_math_scale_add (self->u, &src, (float) f->lr, r, self->n, &maxabs, &bad))
        {
          mark_bad (only, &src, bad);
          f->changed = TRUE;
          return;
        }
    }
  else
    {
      RlxMathSrc src = { self->sum, NULL };
      float coef = (float) (f->lr / (double) samples);
      if (!rlx_math_scale_add (self->u, &src, coef, r, self->n, &maxabs, &bad))
        {
          /* Finite buckets whose sum overflowed: nothing to take out. */
          f->error = g_strdup ("the sum of the buckets is not finite");
          return;
        }
    }
  scale = rlx_math_scale_for (maxabs, f->precision);
  buf = rlx_msg_frame_new (&f->header, self->n, f->precision, scale, &len, &payload, &error);
  if (buf == NULL)
    {
      f->error = g_strdup (error->message);
      return;
    }
  rlx_math_quantise (self->u, self->n, f->precision, scale, payload, f->feedback ? self->residual : NULL);
  f->frame = g_bytes_new_take (buf, len);
  f->update.frame = g_bytes_ref (f->frame);
  f->update.codes = payload;
  f->update.n = self->n;
  f->update.precision = f->precision;
  f->update.scale = scale;
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
