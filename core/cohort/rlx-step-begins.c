/* rlx-step-begins.c — where the last steps a member was told of begin
 * (rlx-step-begins.h) */
#include "rlx-config.h"
#include "rlx-step-begins.h"

#include <string.h>

void
rlx_step_begins_note (RlxStepBegins *self, guint64 term, guint64 step, guint epoch, guint pos)
{
  guint i = step % G_N_ELEMENTS (self->at);

  self->at[i].step = step;
  self->at[i].term = term;
  self->at[i].epoch = epoch;
  self->at[i].pos = pos;
}

gboolean
rlx_step_begins_find (const RlxStepBegins *self, guint64 term, guint64 step, guint *epoch,
                      guint *pos)
{
  guint i = step % G_N_ELEMENTS (self->at);

  if (step == 0 || self->at[i].step != step || self->at[i].term != term)
    return FALSE;
  *epoch = self->at[i].epoch;
  *pos = self->at[i].pos;
  return TRUE;
}

void
rlx_step_begins_clear (RlxStepBegins *self)
{
  memset (self, 0, sizeof *self);
}
