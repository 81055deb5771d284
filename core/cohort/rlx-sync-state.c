/* rlx-sync-state.c — the cohort's sync mode (rlx-sync-state.h) */
#include "rlx-config.h"
#include "rlx-sync-state.h"

/* The last commits' outer settings, kept until the leader reports them:
 * it may hold 64 commits waiting for acknowledgements (MAX_PENDING_COMMITS,
 * rlx-commits.c) and notes the next before the oldest is reported, so at
 * 64 a member silent for 64 rounds had the reported commit's slot taken by
 * the one 64 after it (its step event lost its outer fields). */
#define KEPT 128

struct _RlxSyncState {
  RlxSyncRequest request;
  double         olr, omom;
  RlxSyncMode    mode;
  guint          h;
  guint          fragments;
  gboolean       provisional;    /* auto's choice before the steps were measured */
  double         inner_lr;       /* the outer round's inner SGD rate (0: none yet) */
  char          *reason;
  struct {
    guint64 step;
    guint   h;
    guint64 hash;
  } commits[KEPT];
};

static void
set_choice (RlxSyncState *self, RlxSyncMode mode, guint h, char *reason)
{
  self->mode = mode;
  self->h = mode == RLX_SYNC_OUTER ? h : 0;
  /* (a step period forgets the last outer rate: back in the outer mode the
   * event says 0 until a round is assigned at its own) */
  if (mode != RLX_SYNC_OUTER)
    self->inner_lr = 0;
  g_free (self->reason);
  self->reason = reason;
}

RlxSyncState *
rlx_sync_state_new (const RlxSyncRequest *request, double outer_lr, double outer_momentum)
{
  RlxSyncState *self = g_new0 (RlxSyncState, 1);

  self->request = request ? *request : (RlxSyncRequest) { RLX_SYNC_STEP, 0 };
  self->olr = outer_lr;
  self->omom = outer_momentum;
  self->fragments = 1;
  rlx_sync_state_rechoose (self, NULL);
  return self;
}

void
rlx_sync_state_free (RlxSyncState *self)
{
  if (self == NULL)
    return;
  g_free (self->reason);
  g_free (self);
}

const RlxSyncRequest *
rlx_sync_state_request (RlxSyncState *self)
{
  return &self->request;
}

RlxSyncMode
rlx_sync_state_mode (RlxSyncState *self)
{
  return self->mode;
}

guint
rlx_sync_state_h (RlxSyncState *self)
{
  return self->h;
}

const char *
rlx_sync_state_reason (RlxSyncState *self)
{
  return self->reason;
}

void
rlx_sync_state_settings (RlxSyncState *self, double inner_lr, RlxOuterSettings *out)
{
  *out = (RlxOuterSettings) {
    .h = self->mode == RLX_SYNC_OUTER ? self->h : 0,
    .lr = self->olr,
    .momentum = self->omom,
    .inner_lr = inner_lr,
    /* outer rounds always overlap (docs/PROTOCOL.md, "Overlap") */
    .lag = self->mode == RLX_SYNC_OUTER ? 1 : 0,
  };
}

gboolean
rlx_sync_state_rechoose (RlxSyncState *self, const RlxSyncInputs *inputs)
{
  RlxSyncMode was = self->mode;
  guint was_h = self->h;
  gboolean was_provisional = self->provisional;

  switch (self->request.mode)
    {
    case RLX_SYNC_OUTER:
      set_choice (self, RLX_SYNC_OUTER, self->request.h,
                  g_strdup_printf ("outer every %u steps: asked for (--sync outer:%u)",
                                   self->request.h, self->request.h));
      break;
    case RLX_SYNC_AUTO:
      {
        RlxSyncChoice c = { 0 };
        g_autoptr(GError) error = NULL;

        if (inputs == NULL)
          {
            set_choice (self, RLX_SYNC_STEP, 0,
                        g_strdup ("step: auto, and no remote link measured (every link on "
                                  "this host)"));
            self->provisional = FALSE;
          }
        else if (rlx_sync_choose (inputs, &c, &error))
          {
            set_choice (self, c.mode, c.h, g_strdup_printf ("%s (auto)", c.reason));
            self->fragments = c.fragments;
            self->provisional = c.provisional;
            rlx_sync_choice_clear (&c);
          }
        else
          /* unusable measurements change nothing: say why, keep the mode */
          set_choice (self, self->mode, self->h,
                      g_strdup_printf ("%s (auto could not choose: %s)",
                                       self->mode == RLX_SYNC_OUTER ? "outer" : "step",
                                       error->message));
        break;
      }
    case RLX_SYNC_STEP:
    default:
      set_choice (self, RLX_SYNC_STEP, 0, g_strdup ("step: asked for (--sync step)"));
      break;
    }
  if (self->request.mode != RLX_SYNC_AUTO)
    self->provisional = FALSE;
  /* (a provisional choice made again from measurements is reported, even
   * at the same H: the reason now says what was measured) */
  return self->mode != was || self->h != was_h || self->provisional != was_provisional;
}

void
rlx_sync_state_announce (const RlxOuterSettings *round, guint commit_h, RlxMsgStep *step)
{
  step->h = round ? round->h : 0;
  step->ch = commit_h;
  step->olr = round ? round->lr : 0;
  step->omom = round ? round->momentum : 0;
  step->lag = round && round->h > 0 ? round->lag : 0;
}

gboolean
rlx_sync_state_follow (RlxSyncState *self, const RlxMsgStep *step, RlxOuterSettings *round,
                       RlxOuterSettings *commit)
{
  RlxSyncMode mode = step->h > 0 ? RLX_SYNC_OUTER : RLX_SYNC_STEP;
  gboolean changed = mode != self->mode || step->h != self->h;
  gboolean changed_lr = FALSE;

  if (round)
    *round = (RlxOuterSettings) { step->h, step->olr, step->omom, step->lr, step->lag };
  if (commit)
    *commit = (RlxOuterSettings) { step->ch, step->olr, step->omom, step->lr, step->lag };
  if (step->h > 0 && !changed && step->lr != self->inner_lr)
    changed_lr = TRUE;
  if (step->h > 0)
    self->inner_lr = step->lr;
  if (changed)
    set_choice (self, mode, step->h,
                mode == RLX_SYNC_OUTER
                    ? g_strdup_printf ("outer every %u steps: the leader's choice", step->h)
                    : g_strdup ("step: the leader's choice"));
  if (step->h > 0)
    {
      self->olr = step->olr;
      self->omom = step->omom;
    }
  return changed || changed_lr;
}

gboolean
rlx_sync_state_note_inner_lr (RlxSyncState *self, const RlxOuterSettings *round)
{
  if (round->h == 0 || round->inner_lr == self->inner_lr)
    return FALSE;
  self->inner_lr = round->inner_lr;
  return TRUE;
}

RlxEvent *
rlx_sync_state_event (RlxSyncState *self)
{
  RlxEvent *e = rlx_event_new (RLX_EVENT_SYNC);
  RlxEventSync *o = &e->u.sync;

  o->mode = g_strdup (rlx_sync_mode_to_string (self->mode));
  o->h = self->mode == RLX_SYNC_OUTER ? self->h : 1;
  o->requested = rlx_sync_format (&self->request);
  o->reason = g_strdup (self->reason);
  if (self->mode == RLX_SYNC_OUTER)
    {
      o->has_outer = TRUE;
      o->outer_lr = self->olr;
      o->outer_momentum = self->omom;
      o->fragments = self->fragments;
      o->inner_lr = self->inner_lr;
    }
  return e;
}

void
rlx_sync_state_note_commit (RlxSyncState *self, guint64 step, guint h, guint64 outer_hash)
{
  guint i = step % KEPT;

  self->commits[i].step = step;
  self->commits[i].h = h;
  self->commits[i].hash = outer_hash;
}

gboolean
rlx_sync_state_commit_info (RlxSyncState *self, guint64 step, guint *h, guint64 *outer_hash)
{
  guint i = step % KEPT;

  if (step == 0 || self->commits[i].step != step || self->commits[i].h == 0)
    return FALSE;
  *h = self->commits[i].h;
  *outer_hash = self->commits[i].hash;
  return TRUE;
}
