/* rlx-round.c — see rlx-round.h */
#include "rlx-config.h"
#include "core/rlx-sources.h"
#include "rlx-round.h"

#include <math.h>
#include <string.h>

typedef enum { SLOT_PENDING, SLOT_ADDING, SLOT_IN, SLOT_CLOSED } SlotState;

typedef struct {
  char     *node;
  guint     count;
  SlotState state;
  guint     samples;   /* of its bucket, while adding or in */
  double    loss;
} Slot;

struct _RlxRound {
  GObject    parent_instance;
  gsize      n;

  gboolean   active;
  guint64    step;
  GArray    *slots;         /* Slot */
  guint      deadline_id;
  gint64     started;
  gint64     last_in;       /* when the last bucket was accepted (0: none yet) */
  guint      adding;
  guint64    generation;    /* bumped by every begin and cancel */

  guint64    samples;
  double     loss_sum;
  GPtrArray *contributors;
  guint      late, rejected;
  gint64     max_compute;
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
rlx_round_dispose (GObject *object)
{
  RlxRound *self = RLX_ROUND (object);

  g_clear_handle_id (&self->deadline_id, rlx_source_remove);
  G_OBJECT_CLASS (rlx_round_parent_class)->dispose (object);
}

static void
rlx_round_finalize (GObject *object)
{
  RlxRound *self = RLX_ROUND (object);

  g_clear_pointer (&self->slots, g_array_unref);
  g_clear_pointer (&self->contributors, g_ptr_array_unref);
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
}

RlxRound *
rlx_round_new (gsize n_params)
{
  RlxRound *self = g_object_new (RLX_TYPE_ROUND, NULL);

  self->n = n_params;
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

gint64
rlx_round_get_collect_us (RlxRound *self)
{
  return self->last_in > 0 ? self->last_in - self->started : 0;
}
guint rlx_round_adding (RlxRound *self) { return self->adding; }

double
rlx_round_get_loss (RlxRound *self)
{
  return self->samples > 0 ? self->loss_sum / (double) self->samples : 0.0;
}

void
rlx_round_cancel (RlxRound *self)
{
  g_return_if_fail (RLX_IS_ROUND (self));

  g_clear_handle_id (&self->deadline_id, rlx_source_remove);
  self->active = FALSE;
  self->adding = 0;
  self->generation++;
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
  if (!self->active || self->adding > 0)
    return;
  for (guint i = 0; i < self->slots->len; i++)
    if (g_array_index (self->slots, Slot, i).state == SLOT_PENDING)
      return;
  g_clear_handle_id (&self->deadline_id, rlx_source_remove);
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

guint
rlx_round_deadline_ms (double round_us, guint floor_ms, guint h)
{
  double ms, cap;

  if (!(round_us > 0))
    return (guint) MIN (MAX (MAX ((double) RLX_ROUND_FIRST_DEADLINE_MS, (double) floor_ms),
                             (double) h * RLX_ROUND_FIRST_STEP_MS),
                        (double) G_MAXUINT);
  ms = 10.0 * round_us / 1000.0;
  cap = MAX ((double) RLX_ROUND_MAX_DEADLINE_MS, 3.0 * round_us / 1000.0);
  /* (the floor after the cap: a floor above the cap is what was asked for;
   * CLAMP with low > high returned the cap for long rounds, so a floor of
   * 600 s still closed 37 s rounds at 30 s) */
  return (guint) CLAMP (MAX (MIN (ms, cap), (double) floor_ms), 1.0, (double) G_MAXUINT);
}

void
rlx_round_begin (RlxRound *self, guint64 step, GArray *slots, guint deadline_ms)
{
  g_return_if_fail (RLX_IS_ROUND (self));
  g_return_if_fail (slots != NULL && slots->len > 0);

  rlx_round_cancel (self);
  g_array_set_size (self->slots, 0);
  for (guint i = 0; i < slots->len; i++)
    {
      const RlxMsgSlot *in = &g_array_index (slots, RlxMsgSlot, i);
      Slot s = { g_strdup (in->node), in->count, SLOT_PENDING, 0, 0 };
      g_array_append_val (self->slots, s);
    }
  self->step = step;
  self->active = TRUE;
  self->started = g_get_monotonic_time ();
  self->last_in = 0;
  self->samples = 0;
  self->loss_sum = 0;
  g_ptr_array_set_size (self->contributors, 0);
  self->late = self->rejected = 0;
  self->max_compute = 0;
  if (deadline_ms > 0)
    self->deadline_id = rlx_timeout_add (deadline_ms, on_deadline, self);
}

RlxRoundVerdict
rlx_round_offer (RlxRound *self, const char *node, guint64 step, guint samples, double loss,
                 gint64 compute_us, gsize n, char **reason)
{
  Slot *slot;

  g_return_val_if_fail (RLX_IS_ROUND (self), RLX_ROUND_LATE);
  g_return_val_if_fail (reason != NULL && *reason == NULL, RLX_ROUND_LATE);

  if (!self->active || step != self->step)
    return RLX_ROUND_LATE;
  slot = slot_of (self, node);
  if (slot == NULL || slot->state != SLOT_PENDING)
    return RLX_ROUND_LATE;

  if (n != self->n)
    *reason = g_strdup_printf ("gradient bucket of %" G_GSIZE_FORMAT " values, the model has %"
                               G_GSIZE_FORMAT, n, self->n);
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

  slot->state = SLOT_ADDING;
  self->last_in = g_get_monotonic_time ();
  slot->samples = samples;
  slot->loss = loss;
  self->adding++;
  self->samples += samples;
  self->loss_sum += loss * samples;
  self->max_compute = MAX (self->max_compute, compute_us);
  g_ptr_array_add (self->contributors, g_strdup (node));
  return RLX_ROUND_ACCEPTED;
}

void
rlx_round_added (RlxRound *self, const char *node, gboolean ok, const char *reason)
{
  Slot *slot;

  g_return_if_fail (RLX_IS_ROUND (self));

  slot = slot_of (self, node);
  if (!self->active || slot == NULL || slot->state != SLOT_ADDING)
    return;
  self->adding--;
  slot->state = SLOT_IN;
  if (!ok)
    {
      g_autofree char *why = g_strdup (reason ? reason : "the backend refused the bucket");
      slot->state = SLOT_CLOSED;
      self->samples -= slot->samples;
      self->loss_sum -= slot->loss * slot->samples;
      for (guint j = 0; j < self->contributors->len; j++)
        if (g_strcmp0 (g_ptr_array_index (self->contributors, j), node) == 0)
          {
            g_ptr_array_remove_index (self->contributors, j);
            break;
          }
      self->rejected++;
      g_signal_emit (self, signals[SIG_REJECTED], 0, node, self->step, why);
    }
  check_complete (self);
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
