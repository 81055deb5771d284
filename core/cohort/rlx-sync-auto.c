/* rlx-sync-auto.c — see rlx-sync-auto.h */
#include "rlx-config.h"
#include "rlx-sync-auto.h"

#include <math.h>

#define STEP_WINDOW 8u

struct _RlxSyncAuto
{
  RlxLinkEstimates *est;
  double            steps[STEP_WINDOW];
  guint             step_next, step_n, steps_noted;
  RlxSyncLink      *links;          /* the last inputs' links */
  guint             pending_ranks;  /* what the last due was for */
  double            pending_step;
  gboolean          pending_local, pending_provisional;
  /* the last choice */
  guint             choices;
  gint64            chosen_at;
  guint             chosen_ranks;
  double            chosen_step;
  gboolean          chosen_local;        /* every link was on this host */
  gboolean          chosen_provisional;  /* made before the links and steps were measured */
};

RlxSyncAuto *
rlx_sync_auto_new (void)
{
  RlxSyncAuto *self = g_new0 (RlxSyncAuto, 1);

  self->est = rlx_link_estimates_new ();
  return self;
}

void
rlx_sync_auto_free (RlxSyncAuto *self)
{
  if (self == NULL)
    return;
  rlx_link_estimates_free (self->est);
  g_free (self->links);
  g_free (self);
}

RlxLinkEstimates *
rlx_sync_auto_estimates (RlxSyncAuto *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->est;
}

void
rlx_sync_auto_note_step (RlxSyncAuto *self, double step_ms)
{
  g_return_if_fail (self != NULL);
  if (!isfinite (step_ms) || step_ms <= 0.0)
    return;
  self->steps[self->step_next] = step_ms;
  self->step_next = (self->step_next + 1) % STEP_WINDOW;
  self->step_n = MIN (self->step_n + 1, STEP_WINDOW);
  self->steps_noted++;
}

double
rlx_sync_auto_step_ms (RlxSyncAuto *self)
{
  double sum = 0.0;

  g_return_val_if_fail (self != NULL, 0.0);
  for (guint i = 0; i < self->step_n; i++)
    sum += self->steps[i];
  return self->step_n ? sum / self->step_n : 0.0;
}

static gboolean
all_local (RlxLinkEstimates *est)
{
  for (guint i = 0; i < rlx_link_estimates_size (est); i++)
    {
      const RlxLinkEstimate *l = rlx_link_estimates_nth (est, i);

      if (l != NULL && !l->local)
        return FALSE;
    }
  return TRUE;
}

gboolean
rlx_sync_auto_due (RlxSyncAuto *self, gint64 now_us, guint n_ranks, guint64 exchange_bytes,
                   RlxSyncInputs *inputs)
{
  double step;
  gboolean local, ranks_changed, provisional = FALSE;
  guint n = 0;

  g_return_val_if_fail (self != NULL && inputs != NULL, FALSE);
  local = all_local (self->est);
  step = rlx_sync_auto_step_ms (self);
  ranks_changed = self->choices == 0 || n_ranks != self->chosen_ranks;
  if (!local)
    {
      gboolean ready = rlx_link_estimates_ready (self->est, RLX_SYNC_AUTO_MIN_FRAMES) &&
                       self->steps_noted >= RLX_SYNC_AUTO_MIN_STEPS && step > 0.0;

      if (!ready)
        {
          /* not measured yet: a first choice from what is known (a remote
           * link, whatever was measured of it and of the step) — unless a
           * choice from measurements stands */
          if (self->choices > 0 && !self->chosen_local &&
              !(self->chosen_provisional && ranks_changed))
            return FALSE;
          provisional = TRUE;
        }
      else if (!ranks_changed && !self->chosen_provisional && !self->chosen_local)
        {
          gboolean step_moved = step > self->chosen_step * RLX_SYNC_AUTO_DRIFT ||
                                step < self->chosen_step / RLX_SYNC_AUTO_DRIFT;

          if (now_us - self->chosen_at < RLX_SYNC_AUTO_HOLD_US)
            return FALSE;
          if (!step_moved && !rlx_link_estimates_drifted (self->est, RLX_SYNC_AUTO_DRIFT))
            return FALSE;
        }
    }
  else if (!ranks_changed && !rlx_link_estimates_drifted (self->est, RLX_SYNC_AUTO_DRIFT))
    return FALSE;

  g_free (self->links);
  self->links = rlx_link_estimates_sync_links (self->est, &n);
  *inputs = (RlxSyncInputs) {
    .links = self->links, .n_links = n, .n_ranks = n_ranks,
    .exchange_bytes = exchange_bytes, .step_ms = self->step_n > 0 ? step : 0.0, .max_h = 0,
  };
  self->pending_ranks = n_ranks;
  self->pending_step = step;
  self->pending_local = local;
  self->pending_provisional = provisional;
  return TRUE;
}

void
rlx_sync_auto_chosen (RlxSyncAuto *self, gint64 now_us)
{
  g_return_if_fail (self != NULL);
  rlx_link_estimates_mark (self->est);
  self->choices++;
  self->chosen_at = now_us;
  self->chosen_ranks = self->pending_ranks;
  self->chosen_step = self->pending_step;
  self->chosen_local = self->pending_local;
  self->chosen_provisional = self->pending_provisional;
}

void
rlx_sync_auto_forget (RlxSyncAuto *self)
{
  g_return_if_fail (self != NULL);
  self->choices = 0;
  self->chosen_ranks = 0;
  self->chosen_at = 0;
  self->chosen_local = FALSE;
  self->chosen_provisional = FALSE;
}

gboolean
rlx_sync_auto_provisional (RlxSyncAuto *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->choices > 0 && self->chosen_provisional;
}

guint
rlx_sync_auto_choices (RlxSyncAuto *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->choices;
}
