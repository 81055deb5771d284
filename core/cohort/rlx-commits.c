/* rlx-commits.c — the leader's commits waiting for acknowledgements
 * (rlx-commits.h) */
#include "rlx-config.h"
#include "rlx-commits.h"

/* Commits waiting for acknowledgements, at most; the oldest is reported
 * without the missing ones beyond that. */
#define MAX_PENDING_COMMITS 64

/* A commit the leader published and has not reported yet. */
typedef struct {
  guint64    step, hash;
  guint64    outer_hash;           /* θ and m after an outer round; 0: a step's */
  double     loss;
  guint64    samples;
  GPtrArray *contributors;
  guint      late, rejected;
  GPtrArray *waiting;              /* members that have not acknowledged it */
  guint      members;              /* the cohort's size when it was published */
  guint      agree;                /* ranks whose acknowledged hash at it is its own */
  gint64     published;
  gboolean   final;
} Commit;

struct _RlxCommits {
  RlxCohortContext *ctx;
  GQueue            queue;         /* Commit*, oldest first */
  GHashTable       *members;       /* id → RlxMemberAcks* */
};

static void
member_free (gpointer p)
{
  RlxMemberAcks *ms = p;

  rlx_msg_clear (&ms->held);
  g_free (ms);
}

static void
commit_free (Commit *c)
{
  g_clear_pointer (&c->contributors, g_ptr_array_unref);
  g_clear_pointer (&c->waiting, g_ptr_array_unref);
  g_free (c);
}

RlxCommits *
rlx_commits_new (RlxCohortContext *ctx)
{
  RlxCommits *self = g_new0 (RlxCommits, 1);

  self->ctx = ctx;
  g_queue_init (&self->queue);
  self->members = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, member_free);
  return self;
}

void
rlx_commits_free (RlxCommits *self)
{
  if (self == NULL)
    return;
  rlx_commits_clear (self);
  g_hash_table_unref (self->members);
  g_free (self);
}

void
rlx_commits_clear (RlxCommits *self)
{
  g_queue_clear_full (&self->queue, (GDestroyNotify) commit_free);
  g_queue_init (&self->queue);
  g_hash_table_remove_all (self->members);
}

RlxMemberAcks *
rlx_commits_member (RlxCommits *self, const char *id)
{
  RlxMemberAcks *ms = g_hash_table_lookup (self->members, id);

  if (ms == NULL)
    {
      ms = g_new0 (RlxMemberAcks, 1);
      g_hash_table_insert (self->members, g_strdup (id), ms);
    }
  return ms;
}

void
rlx_commits_forget_member (RlxCommits *self, const char *id)
{
  g_hash_table_remove (self->members, id);
}

GPtrArray *
rlx_commits_members_holding (RlxCommits *self)
{
  GPtrArray *ready = g_ptr_array_new_with_free_func (g_free);
  GHashTableIter it;
  gpointer key, value;

  g_hash_table_iter_init (&it, self->members);
  while (g_hash_table_iter_next (&it, &key, &value))
    if (((RlxMemberAcks *) value)->has_held)
      g_ptr_array_add (ready, g_strdup (key));
  return ready;
}

void
rlx_commits_publish (RlxCommits *self, guint64 step, guint64 hash, guint64 outer_hash,
                     RlxRound *round, guint n_members, gboolean final, GPtrArray *waiting)
{
  Commit *c = g_new0 (Commit, 1);

  c->step = step;
  c->hash = hash;
  c->outer_hash = outer_hash;
  c->loss = rlx_round_get_loss (round);
  c->samples = rlx_round_get_samples (round);
  c->contributors = rlx_cohort_str_array_copy (rlx_round_get_contributors (round));
  c->late = rlx_round_get_late (round);
  c->rejected = rlx_round_get_rejected (round);
  c->waiting = waiting;
  c->published = g_get_monotonic_time ();
  c->final = final;
  c->members = n_members;
  c->agree = 1;   /* the leader's own replica made the hash */
  g_queue_push_tail (&self->queue, c);
}

void
rlx_commits_member_acked (RlxCommits *self, const char *id, guint64 step, guint64 hash,
                          guint64 outer_hash)
{
  RlxMemberAcks *ms = rlx_commits_member (self, id);

  ms->step = step;
  ms->hash = hash;
  ms->known = TRUE;
  ms->timed_out = FALSE;
  for (GList *l = self->queue.head; l; l = l->next)
    {
      Commit *c = l->data;
      /* the acknowledgement of this very commit: its hash is checked, and
       * after an outer round the outer hash (θ and the momentum) too */
      if (c->step == step && rlx_cohort_str_array_contains (c->waiting, id))
        {
          gboolean outer = hash == c->hash && c->outer_hash != 0 && outer_hash != 0 &&
                           outer_hash != c->outer_hash;

          if (hash == c->hash && !outer)
            c->agree++;
          else
            {
              RlxEvent *e = rlx_event_new (RLX_EVENT_DIVERGED);
              e->u.diverged.node = g_strdup (id);
              e->u.diverged.step = step;
              e->u.diverged.hash = outer ? outer_hash : hash;
              e->u.diverged.expected = outer ? c->outer_hash : c->hash;
              e->u.diverged.outer = outer;
              self->ctx->ops->emit (self->ctx->owner, e);
            }
        }
      if (c->step <= step)
        rlx_cohort_str_array_remove (c->waiting, id);
    }
}

void
rlx_commits_check (RlxCommits *self)
{
  RlxCohortContext *ctx = self->ctx;
  Commit *c;

  while ((c = g_queue_peek_head (&self->queue)))
    {
      gboolean forced = FALSE;

      /* A member that left is not waited for. */
      for (guint i = c->waiting->len; i > 0; i--)
        if (!rlx_leadership_has_member (ctx->lead, g_ptr_array_index (c->waiting, i - 1)))
          g_ptr_array_remove_index (c->waiting, i - 1);
      if (c->waiting->len > 0)
        {
          gint64 limit = 2 * (gint64) rlx_peer_set_get_timeout (ctx->peers) * 1000;
          if (g_queue_get_length (&self->queue) <= MAX_PENDING_COMMITS &&
              g_get_monotonic_time () - c->published < limit)
            return;
          forced = TRUE;
        }
      g_queue_pop_head (&self->queue);
      /* one "ack-timeout" for each member's stretch of silence, at its
       * first commit reported without it: a frozen member would otherwise
       * add one event to every commit until it is heard again or dropped */
      for (guint i = 0; forced && i < c->waiting->len; i++)
        {
          const char *id = g_ptr_array_index (c->waiting, i);
          RlxMemberAcks *ms = rlx_commits_member (self, id);
          RlxEvent *e;

          if (ms->timed_out)
            continue;
          ms->timed_out = TRUE;
          e = rlx_event_new (RLX_EVENT_ACK_TIMEOUT);
          e->u.node_step.node = g_strdup (id);
          e->u.node_step.step = c->step;
          ctx->ops->emit (ctx->owner, e);
        }
      ctx->ops->committed (ctx->owner, c->step, c->hash, c->loss, c->samples, c->contributors,
                           c->late, c->rejected, c->members, c->agree);
      ctx->ops->checkpoint (ctx->owner, c->step, c->final);
      commit_free (c);
      if (ctx->ops->finished (ctx->owner))
        return;
    }
}
