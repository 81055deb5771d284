/* rlx-step-begins.h — where the last steps a member was told of begin in
 * the sample stream
 *
 * Every step frame names a step and says where it begins (its epoch and
 * pos; docs/PROTOCOL.md, "Sync modes"). After commit c a member's replica
 * holds where round c + 1 begins, as the leader's does: from the frame that
 * named c + 1, which in overlapped rounds came one frame before the commit.
 * The member notes each frame's here (a ring of the last four steps) and
 * finds c + 1's at the commit. A record counts only for the term whose
 * frame made it (a step of another term, or of another lineage before a
 * merge, may have begun elsewhere), and a snapshot loaded forgets them all
 * (rlx-follower.c).
 *
 * Threads: a plain value, its owner's.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  struct {
    guint64 step, term;   /* step 0: none */
    guint   epoch, pos;
  } at[4];
} RlxStepBegins;

/* A frame of @term named @step, which begins at (@epoch, @pos). */
void     rlx_step_begins_note  (RlxStepBegins *self, guint64 term, guint64 step, guint epoch,
                                guint pos);
/* Where @step begins as a frame of @term said; FALSE when none did (or
 * the record was of another term, or pushed out of the ring). */
gboolean rlx_step_begins_find  (const RlxStepBegins *self, guint64 term, guint64 step,
                                guint *epoch, guint *pos);
/* Forget every record. */
void     rlx_step_begins_clear (RlxStepBegins *self);

G_END_DECLS
