/* rlx-lineage.c — which history this node's steps belong to, across
 * merges (rlx-lineage.h) */
#include "rlx-config.h"
#include "rlx-lineage.h"

struct _RlxLineage {
  gboolean   changing;   /* following a leader from outside our cohort */
  guint64    term_base;  /* our step when the current term began */
  char      *rule;       /* why the other group was kept (NULL: the default) */
  GPtrArray *former;     /* ours when we yielded in a merge: told who leads */
  RlxMsgLineage id;      /* of our state */
};

RlxLineage *
rlx_lineage_new (void)
{
  return g_new0 (RlxLineage, 1);
}

void
rlx_lineage_free (RlxLineage *self)
{
  if (self == NULL)
    return;
  g_free (self->rule);
  g_clear_pointer (&self->former, g_ptr_array_unref);
  g_free (self);
}

gboolean
rlx_lineage_is_changing (RlxLineage *self)
{
  return self->changing;
}

void
rlx_lineage_change (RlxLineage *self)
{
  self->changing = TRUE;
}

void
rlx_lineage_yield (RlxLineage *self, char *rule, GPtrArray *former)
{
  g_free (self->rule);
  self->rule = rule;
  self->changing = TRUE;
  g_clear_pointer (&self->former, g_ptr_array_unref);
  self->former = former;
}

GPtrArray *
rlx_lineage_take_former (RlxLineage *self)
{
  return g_steal_pointer (&self->former);
}

const RlxMsgLineage *
rlx_lineage_id (RlxLineage *self)
{
  return &self->id;
}

gboolean
rlx_lineage_same_fork (RlxLineage *self, const RlxMsgLineage *other)
{
  return rlx_msg_lineage_same_fork (&self->id, other);
}

/* 64 random bits, never 0 (0 is "none"). */
static guint64
random_id (void)
{
  guint64 v;

  do
    v = ((guint64) g_random_int () << 32) | g_random_int ();
  while (v == 0);
  return v;
}

void
rlx_lineage_lead_on (RlxLineage *self, guint64 applied)
{
  self->term_base = applied;
  self->changing = FALSE;
  g_clear_pointer (&self->rule, g_free);
  g_clear_pointer (&self->former, g_ptr_array_unref);
}

void
rlx_lineage_found (RlxLineage *self, guint64 lin, guint64 base)
{
  self->id.lin = lin ? lin : random_id ();
  self->id.fork = random_id ();
  self->id.base = base;
  rlx_lineage_lead_on (self, base);
}

void
rlx_lineage_term_began (RlxLineage *self, guint64 applied)
{
  if (!self->changing)
    self->term_base = applied;
}

guint64
rlx_lineage_term_base (RlxLineage *self)
{
  return self->term_base;
}

RlxEvent *
rlx_lineage_adopted (RlxLineage *self, const char *from, const RlxMsgSnapshot *s, guint64 had,
                     gint64 common_step, gint64 sparse_common, guint64 term_base,
                     guint64 history_from, guint64 applied)
{
  RlxEvent *e = NULL;

  /* After a split: the steps this node had that the cohort does not. */
  if (self->changing || had > (guint64) MAX (common_step, 0))
    {
      gboolean diverged = common_step >= 0 && (guint64) common_step < had;
      /* The snapshot's hashes hold our step and none of them is ours: we
       * parted before them (steps we applied that the cohort never
       * committed, or another lineage). */
      gboolean covered = common_step < 0 && s->hashes && s->hashes->len > 0 &&
                         s->hashes_from <= had && had < s->hashes_from + s->hashes->len;
      /* Ahead of the snapshot: the steps after it are replaced, whatever
       * the hashes tell (none of ours among them: another history, as a
       * leader that steps down for a newer term of a group it never
       * belonged to has; issue 29, item 13, chaos.py seed 30). */
      gboolean ahead = had > s->step;
      /* Steps of our own (applied since the state we last loaded) that no
       * hash of the snapshot's shows on its history: the sender no longer
       * remembers them (it loaded another lineage's state since), so they
       * may well be gone — said, as an upper bound. Silence here dropped a
       * leader's own 1,351 committed steps unreported (chaos.py --cuts
       * seed 66: it rejoined through a node that had adopted another
       * group's snapshot after that group parted from it). */
      gboolean unproven = common_step < 0 && had > history_from;
      if (self->changing || diverged || covered || ahead || unproven)
        {
          /* Where the histories part: from the hashes when they overlap
           * there, else the step at which our side's term began (the
           * split, for the side that had to elect a leader of its own). */
          guint64 common = common_step >= 0 ? (guint64) common_step
                                            : MIN (had, MIN (term_base, s->step));
          /* No step matched although the snapshot's hashes cover the first
           * step of ours: we parted before it (a node that followed the
           * other side's leader from a snapshot of its lineage; its term
           * base may be as late as the leader change that ended it). */
          if (common_step < 0 && s->hashes && history_from > 0 &&
              s->hashes_from <= history_from && history_from < s->hashes_from + s->hashes->len)
            common = MIN (common, history_from - 1);
          /* Only the hashes tell (no merge of ours): none of those both
           * remember matched, so we parted before the first of them. */
          if (covered && !self->changing)
            common = MIN (had, MAX (MAX (history_from, s->hashes_from), 1) - 1);
          /* No hash of the dense window matched: a step further back where
           * both histories still agree (the snapshot's sparse hashes) is
           * where they had not parted yet. Without one, all this node
           * remembers goes: once its side has changed leaders since it
           * parted, the term base is past that (chaos.py --cuts, seed 6: a
           * merge reported from step 1,042, parted at 166; seed 64: a node
           * cut off that led on alone, from 6,532, parted at 3,755). */
          if (common_step < 0 && sparse_common >= 0)
            common = MIN (common, (guint64) sparse_common);
          else if (common_step < 0)
            common = MIN (common, MAX (history_from, 1) - 1);
          e = rlx_event_new (RLX_EVENT_MERGED);
          e->u.merged.node = g_strdup (from);
          e->u.merged.discarded = had - MIN (common, had);
          e->u.merged.from_step = common + 1;
          e->u.merged.to_step = had;
          e->u.merged.exact = common_step >= 0;
          e->u.merged.rule = g_strdup (self->rule ? self->rule
                                       : "the cohort this node was cut off from is kept");
        }
    }
  /* The sender's lineage and term from here: its term began at its term
   * base (a node that joined a group late still reports from where that
   * group's own steps began when it yields: chaos.py --cuts seed 75). */
  self->id = s->lineage;
  self->term_base = MIN (s->tbase, applied);
  self->changing = FALSE;
  g_clear_pointer (&self->rule, g_free);
  return e;
}
