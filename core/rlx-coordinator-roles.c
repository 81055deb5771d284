/* rlx-coordinator-roles.c — the node's role: the one transition function,
 * founding, joining, failover, cutting off (see rlx-coordinator-private.h;
 * whom an alone node waits for before it founds is
 * rlx-coordinator-founding.c; how two groups that meet judge each other's
 * claims is rlx-coordinator-merge.c). */
#include "rlx-config.h"
#include "core/rlx-sources.h"
#include "rlx-coordinator-private.h"
#include "core/cohort/rlx-outer.h"

#include <string.h>

static gboolean on_join_retry (gpointer user_data);

/* How often a leader looks for nodes of its cohort it has no link to. */
#define LOOK_MS 2000

/* A leader looks for nodes it has no link to, every LOOK_MS: another
 * group of its cohort whose links to ours closed (a split that healed
 * without anyone looking again, or the links a frozen node lost) only
 * meets ours — and merges by the rule — once someone links to it. Two
 * leaders of one term with no link between them trained on side by side,
 * each new node joining one and then the other (issue 29, item 13). */
static gboolean
on_look_timer (gpointer user_data)
{
  RlxCoordinator *self = user_data;

  if (role (self) != RLX_ROLE_LEADER || self->finished)
    {
      self->look_id = 0;
      return G_SOURCE_REMOVE;
    }
  rlx_coordinator_emit_discover (self);
  return G_SOURCE_CONTINUE;
}

/* The one place where this node's role changes. */
void
rlx_coordinator_transition (RlxCoordinator *self, RlxRole to, const char *leader, guint64 term,
                            const char *reason)
{
  RlxRole from = role (self);
  g_autofree char *old_leader = g_strdup (rlx_leadership_get_leader (self->lead));
  guint64 old_term = rlx_leadership_get_term (self->lead);
  guint changed;

  if (from == RLX_ROLE_STOPPED)
    return;
  changed = rlx_leadership_set (self->lead, to, leader, term);
  /* Whatever changed, this node no longer waits for a successor (leader_lost
   * starts the wait after its own transition). */
  if (changed)
    {
      self->awaiting_successor = FALSE;
      g_clear_handle_id (&self->successor_id, rlx_source_remove);
      g_clear_handle_id (&self->due_id, rlx_source_remove);
    }
  /* A new term starts a new base — except the other side's term during a
   * merge: the steps since our own term began are what the merge
   * discards, so the base stays until the snapshot is adopted. */
  if (changed & 4)
    rlx_lineage_term_began (self->lineage, applied (self));
  /* Who holds nothing we lack is known only of the term we lead, and only
   * while we hold our own state: not past another term, nor once we join
   * or follow anyone. */
  if ((changed & 4) || to == RLX_ROLE_JOINING || to == RLX_ROLE_MEMBER)
    {
      g_clear_pointer (&self->behind, g_hash_table_unref);
      rlx_coordinator_forget_superseded (self);
    }

  /* Leaving the lead: the round in flight and the commits not reported are
   * abandoned (none was acknowledged by everyone, so none is lost). */
  if (from == RLX_ROLE_LEADER && to != RLX_ROLE_LEADER)
    {
      rlx_leader_step_down (self->leader);
    }
  /* Not computing for that leader any more: drop queued assignments
   * (updates still run). */
  if ((to != RLX_ROLE_MEMBER && to != RLX_ROLE_LEADER) || (changed & 6) || from != to)
    rlx_compute_queue_drop_assignments (self->queue);

  switch (to)
    {
    case RLX_ROLE_ALONE:
      g_clear_handle_id (&self->join_id, rlx_source_remove);
      self->joined_reported = FALSE;
      /* A wait for silent peers starts afresh. */
      self->found_blocked_since = 0;
      g_clear_pointer (&self->found_blocked_why, g_free);
      rlx_follower_forget_frames (self->follower);
      if (reason)
        rlx_coordinator_emit_simple (self, RLX_EVENT_REJOINING, self->node_id, reason);
      /* Look for peers from the main loop's next turn (the link that just
       * closed is still being torn down under us). */
      rlx_coordinator_start_found_timer (self, 50);
      break;
    case RLX_ROLE_JOINING:
      g_clear_handle_id (&self->found_id, rlx_source_remove);
      /* Once per leader and reason; the retry timer repeats it. */
      if (from != RLX_ROLE_JOINING || (changed & 2) || reason)
        rlx_coordinator_send_join (self, reason ? reason : "join");
      if (self->join_id == 0)
        self->join_id = rlx_timeout_add (JOIN_RETRY_MS, on_join_retry, self);
      break;
    case RLX_ROLE_MEMBER:
    case RLX_ROLE_LEADER:
      g_clear_handle_id (&self->found_id, rlx_source_remove);
      g_clear_handle_id (&self->join_id, rlx_source_remove);
      self->waiting_reported = FALSE;
      g_clear_pointer (&self->unheard, g_hash_table_unref);
      if (to == RLX_ROLE_LEADER && self->look_id == 0 && !self->finished)
        self->look_id = rlx_timeout_add (LOOK_MS, on_look_timer, self);
      else if (to != RLX_ROLE_LEADER)
        g_clear_handle_id (&self->look_id, rlx_source_remove);
      break;
    case RLX_ROLE_STOPPED:
    case RLX_ROLE_N:
    default:
      g_clear_handle_id (&self->found_id, rlx_source_remove);
      g_clear_handle_id (&self->join_id, rlx_source_remove);
      break;
    }

  if (changed & 1)
    rlx_coordinator_notify (self, PROP_ROLE);
  if (changed & 2)
    rlx_coordinator_notify (self, PROP_LEADER);
  if (changed & 4)
    rlx_coordinator_notify (self, PROP_TERM);
  if ((to == RLX_ROLE_MEMBER || to == RLX_ROLE_LEADER) &&
      (g_strcmp0 (old_leader, leader) != 0 || old_term != term ||
       (from != RLX_ROLE_MEMBER && from != RLX_ROLE_LEADER)) && self->joined_reported)
    rlx_coordinator_emit_leader (self);
  if (changed)
    rlx_coordinator_roster_sync (self);
}

static void
become_leader (RlxCoordinator *self, guint64 term, gboolean founding)
{
  if (founding)
    {
      GPtrArray *only = g_ptr_array_new_with_free_func (g_free);
      g_ptr_array_add (only, g_strdup (self->node_id));
      rlx_leadership_set_members (self->lead, only);
    }
  else
    {
      /* Failover or merge: keep the members we can still reach. */
      GPtrArray *cur = members (self);
      for (guint i = cur->len; i > 0; i--)
        if (!is_alive (g_ptr_array_index (cur, i - 1), self))
          g_ptr_array_remove_index (cur, i - 1);
      if (!rlx_leadership_has_member (self->lead, self->node_id))
        g_ptr_array_insert (cur, 0, g_strdup (self->node_id));
    }
  rlx_coordinator_transition (self, RLX_ROLE_LEADER, self->node_id, term, NULL);
  /* the cohort's sync mode is ours now (what we asked for; auto from
   * nothing measured yet, until the hook is given measurements) */
  rlx_coordinator_rechoose_sync (self, NULL);
  /* the update stream's residual starts from zero with a new leader */
  rlx_compute_queue_reset_feedback (self->queue);
  /* A commit our replica is still applying (we were a member a moment
   * ago) is the one the first round builds on. */
  rlx_leader_take_over (self->leader, !founding, MAX (applied (self), rlx_follower_applying (self->follower)));
  if (!self->joined_reported)
    {
      rlx_coordinator_emit_leader (self);
      rlx_coordinator_emit_joined (self);
    }

  rlx_cohort_send_leader (&self->ctx, NULL);

  if (self->ctx.steps > 0 && applied (self) >= self->ctx.steps)
    {
      rlx_coordinator_finish (self, TRUE, "all steps committed");
      return;
    }
  /* A new leader after a failover checkpoints what it holds. */
  if (!founding && applied (self) > 0)
    rlx_coordinator_maybe_checkpoint (self, 0, TRUE);
  rlx_leader_publish (self->leader, FALSE);
}

/* The checkpoint's outer momentum is on the worker (before its parameters:
 * the worker delivers in order). */
static void
on_resume_momentum (gboolean has, guint64 hash, gpointer user_data)
{
  RlxCoordinator *self = user_data;

  self->resume_has_momentum = has;
  self->resume_momentum_hash = hash;
}

static void
on_resume_loaded (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  RlxEvent *e = rlx_event_new (RLX_EVENT_RESUMED);

  e->u.resumed.step = rlx_replica_get_step (replica);
  e->u.resumed.hash = rlx_replica_get_hash (replica);
  e->u.resumed.path = g_strdup (rlx_checkpointer_get_path (self->ckpt));
  if (self->resume_has_momentum)
    {
      e->u.resumed.has_outer = TRUE;
      e->u.resumed.outer_hash = rlx_outer_hash (e->u.resumed.hash, self->resume_momentum_hash,
                                                self->n);
    }
  rlx_coordinator_emit_event (self, e);
  /* a new fork of the checkpoint's lineage: others of it may have gone on
   * from that state, at terms of their own */
  rlx_lineage_found (self->lineage, self->resume.lineage, rlx_replica_get_step (replica));
  become_leader (self, 1, TRUE);
}

/* Whether @c holds history this node discarded in a merge: written before
 * its last merge, at a step the merges discarded. */
static gboolean
discarded_checkpoint (RlxCoordinator *self, const RlxCheckpoint *c)
{
  return self->discarded_at > 0 && c->params != NULL && c->written_us <= self->discarded_at &&
         c->step <= self->discarded_to;
}

/* This node yielded in a merge, discarding its history up to @to_step. The
 * checkpoint of this host may hold that history (this node, or its group's
 * leader here, wrote it as it led the branch the merge discarded): it is
 * never resumed after. Else a node that founds later, alone (it thawed
 * and found nobody), resumed it above the state it had adopted — a branch
 * already discarded, at step numbers the kept history had not reached —
 * and the kept group met it and yielded in turn (a 60-minute chaos run
 * across namespace hosts: a discarded checkpoint at step 385,401 resumed
 * over a kept state at 361,628, and the kept group's 24,825 steps since
 * discarded for it). A checkpoint written after the merge is judged as any
 * (by step against the state this node holds). */
void
rlx_coordinator_note_discarded (RlxCoordinator *self, guint64 to_step)
{
  self->discarded_to = MAX (self->discarded_to, to_step);
  self->discarded_at = g_get_real_time ();
  if (discarded_checkpoint (self, &self->resume))
    {
      g_clear_pointer (&self->resume.params, g_free);
      g_clear_pointer (&self->resume.momentum, g_free);
    }
}

/* Another node may have written a newer checkpoint since this one read its
 * own at start (it waited to found, for silent peers): read it again, and
 * take it if it is newer — unless it holds history this node discarded. A
 * file read, as at start. */
static void
reload_checkpoint (RlxCoordinator *self)
{
  RlxCheckpoint fresh = { 0 };
  g_autoptr(GError) error = NULL;

  if (rlx_checkpointer_load (self->ckpt, &fresh, &error) && fresh.params != NULL &&
      !discarded_checkpoint (self, &fresh) &&
      (self->resume.params == NULL || fresh.step > self->resume.step))
    {
      g_free (self->resume.params);
      g_free (self->resume.momentum);
      self->resume = fresh;
      g_clear_error (&self->checkpoint_error);
      return;
    }
  g_free (fresh.params);
  g_free (fresh.momentum);
}

void
rlx_coordinator_found (RlxCoordinator *self)
{
  reload_checkpoint (self);
  if (self->checkpoint_error)
    {
      rlx_coordinator_finish (self, FALSE, self->checkpoint_error->message);
      return;
    }
  /* A checkpoint older than the state this node holds (it was in a cohort
   * since it read it) is not resumed: that would drop committed steps. */
  if (self->resume.params && self->resume.step <= applied (self) && applied (self) > 0)
    g_clear_pointer (&self->resume.params, g_free);
  if (self->resume.params)
    {
      rlx_replica_set_seed (self->replica, self->resume.seed);
      if (self->resume.momentum != NULL)
        rlx_compute_queue_load_momentum_floats (self->queue,
                                                g_steal_pointer (&self->resume.momentum),
                                                on_resume_momentum, self);
      rlx_replica_load_floats (self->replica, self->resume.step,
                               g_steal_pointer (&self->resume.params), self->resume.epoch,
                               self->resume.pos, on_resume_loaded, self);
      return;
    }
  /* The state this node holds (it was in a cohort): it leads on in that
   * fork, as the side of a split that lost its leader does (term + 1);
   * with nothing, a new lineage. */
  if (applied (self) > 0 && rlx_lineage_id (self->lineage)->lin != 0)
    {
      rlx_lineage_lead_on (self->lineage, applied (self));
      become_leader (self, rlx_leadership_get_term (self->lead) + 1, TRUE);
      return;
    }
  rlx_lineage_found (self->lineage, 0, applied (self));
  become_leader (self, 1, TRUE);
}

/* Say hello to every peer in reach: what each knows of this node's role
 * is from its last hello (founding judges peers by it, found_blocker). */
static void
say_hello_around (RlxCoordinator *self)
{
  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *p = rlx_peer_set_nth (self->peers, i);
      if (p->ready && !p->refused)
        rlx_peer_set_say_hello (self->peers, p);
    }
}

/* A joiner whose leader went (or stopped leading) is alone: it says so, or
 * the leader, if it was cut off and rejoins, waits for it as for a peer of
 * its cohort that has not answered since (found_blocker: a heartbeat
 * timeout, 3.07 s in test-alone-leader) until it next says hello. */
static void
joiner_alone (RlxCoordinator *self)
{
  gboolean was_joining = role (self) == RLX_ROLE_JOINING;

  rlx_coordinator_transition (self, RLX_ROLE_ALONE, NULL, rlx_leadership_get_term (self->lead),
                              NULL);
  if (was_joining)
    say_hello_around (self);
}

static gboolean
on_join_retry (gpointer user_data)
{
  RlxCoordinator *self = user_data;
  RlxPeer *lp;

  if (role (self) != RLX_ROLE_JOINING)
    {
      self->join_id = 0;
      return G_SOURCE_REMOVE;
    }
  lp = rlx_peer_set_lookup (self->peers, rlx_leadership_get_leader (self->lead));
  if (lp == NULL || (lp->role != RLX_ROLE_LEADER && lp->role != RLX_ROLE_MEMBER))
    {
      /* The leader we were joining is gone (or no longer leads): look again. */
      self->join_id = 0;
      joiner_alone (self);
      return G_SOURCE_REMOVE;
    }
  if (!self->ctx.loading)
    rlx_coordinator_send_join (self,
                               applied (self) > 0 || self->joined_reported ? "resync" : "join");
  return G_SOURCE_CONTINUE;
}

void
rlx_coordinator_request_snapshot (RlxCoordinator *self, const char *reason)
{
  rlx_follower_forget_frames (self->follower);
  rlx_coordinator_transition (self, RLX_ROLE_JOINING, rlx_leadership_get_leader (self->lead),
                              rlx_leadership_get_term (self->lead), reason);
}

/* Look for the cohort again, as a node that only rejoins it for a while
 * (through a snapshot), and never founds over it meanwhile. */
static void
rejoin (RlxCoordinator *self, const char *reason)
{
  self->rejoin_until = g_get_monotonic_time () +
                       MAX (3 * (gint64) rlx_peer_set_get_timeout (self->peers), 3000) * 1000;
  /* What we know of our cohort's peers is from before: until each says
   * something new, it may hold the cohort's state (a member of ours that
   * said hello when it was alone is a member now). */
  /* The members whose links closed while we stood still closed them on
   * our silence, not by dying: until they are linked again they may be
   * alive (never taken for gone by the succession, may_be_alive). */
  for (guint i = 0; self->linked && i < members (self)->len; i++)
    if (!is_alive (g_ptr_array_index (members (self), i), self))
      g_hash_table_remove (self->linked, g_ptr_array_index (members (self), i));
  g_clear_pointer (&self->unheard, g_hash_table_unref);
  self->unheard = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *p = rlx_peer_set_nth (self->peers, i);
      if (p->id && p->ready && !p->refused)
        g_hash_table_add (self->unheard, g_strdup (p->id));
    }
  rlx_coordinator_transition (self, RLX_ROLE_ALONE, NULL, rlx_leadership_get_term (self->lead),
                              reason);
  /* The links that closed while we stood still: open them again now (we
   * may be back in the cohort through one link that stayed, before the
   * founding timer looks). */
  rlx_coordinator_emit_discover (self);
  /* Say that we are alone now: a member of ours fails over, others tell us
   * who leads. */
  say_hello_around (self);
}

/* This node was cut off (its loop stood still and the cohort went on
 * without it): it rejoins through a snapshot, never founds over it. */
void
rlx_coordinator_cut_off (RlxCoordinator *self, const char *why)
{
  g_autofree char *reason = g_strdup_printf ("%s; this node stood still longer than the heartbeat "
                                             "timeout (%u ms) and rejoins the cohort",
                                             why, rlx_peer_set_get_timeout (self->peers));
  rejoin (self, reason);
}

/* A member waits for the successor to take over after its leader was lost
 * (leader_lost). Meeting a leader of the cohort that it can reach instead
 * (told by @p's hello: @p leads, or follows a peer of ours that leads, at
 * our term or later) means the leader was lost to this node alone: its link
 * or the path was cut, and the successor still follows that leader. It
 * rejoins that leader through a snapshot. TRUE when it did. */
gboolean
rlx_coordinator_successor_check (RlxCoordinator *self, RlxPeer *p)
{
  guint64 term = rlx_leadership_get_term (self->lead);
  const char *lid = peer_leader (p);
  g_autofree char *leader = NULL, *why = NULL;
  guint64 their_term;
  RlxPeer *lp;

  if (!self->awaiting_successor || role (self) != RLX_ROLE_MEMBER || lid == NULL ||
      is_self (self, lid))
    return FALSE;
  /* The successor itself leads: its leader message follows — unless its
   * link is new (it was not linked when the leader was lost): then its
   * hello is all it says, and says it. */
  if (g_strcmp0 (lid, rlx_leadership_get_leader (self->lead)) == 0)
    {
      if (is_self (self, p->id) || g_strcmp0 (p->id, lid) != 0 || p->role != RLX_ROLE_LEADER ||
          !rlx_lineage_same_fork (self->lineage, &p->lineage) || p->term <= term)
        return FALSE;
      leader = g_strdup (lid);
      rlx_coordinator_transition (self, RLX_ROLE_MEMBER, leader, p->term, NULL);
      rlx_follower_send_ack (self->follower);
      return TRUE;
    }
  lp = rlx_peer_set_lookup (self->peers, lid);
  /* (of our fork: a leader of another is no leader of our cohort's, and
   * its term says nothing against ours) */
  if (lp == NULL || lp->role != RLX_ROLE_LEADER ||
      !rlx_lineage_same_fork (self->lineage, &lp->lineage) || lp->term < term)
    return FALSE;
  leader = g_strdup (lid);
  their_term = lp->term;
  why = g_strdup_printf ("%s, next in line after the leader was lost, has not taken over: %s "
                         "leads the cohort (term %" G_GUINT64_FORMAT ") and this node rejoins it",
                         rlx_leadership_get_leader (self->lead), leader, their_term);
  rlx_coordinator_emit_simple (self, RLX_EVENT_REJOINING, self->node_id, why);
  rlx_coordinator_transition (self, RLX_ROLE_JOINING, leader, MAX (term, their_term), "resync");
  return TRUE;
}

static gboolean
on_successor_due (gpointer user_data)
{
  RlxCoordinator *self = user_data;

  self->due_id = 0;
  rlx_coordinator_successor_due (self);
  return G_SOURCE_REMOVE;
}

/* Whether @p, a member of our group, waits for this node to take over: it
 * follows us at our term in our fork, as its heartbeats say (or its hello,
 * before any: a member that links to us while it waits says so there, and
 * its heartbeats then change nothing). */
static gboolean
waits_for_us (RlxCoordinator *self, RlxPeer *p)
{
  gboolean hb = p->hb_state;

  return p->ready && !p->refused && p->id && !is_self (self, p->id) &&
         (hb ? p->hb_role : p->role) == RLX_ROLE_MEMBER &&
         is_self (self, hb ? p->hb_leader : p->leader) &&
         (hb ? p->hb_term : p->term) == rlx_leadership_get_term (self->lead) &&
         rlx_lineage_same_fork (self->lineage, hb ? &p->hb_lineage : &p->lineage) &&
         rlx_leadership_has_member (self->lead, p->id);
}

gboolean
rlx_coordinator_waits_for_us (RlxCoordinator *self, RlxPeer *p)
{
  return role (self) == RLX_ROLE_MEMBER && waits_for_us (self, p);
}

typedef struct {
  RlxCoordinator *self;
  const char     *lost;
} AliveBut;

static gboolean may_be_alive (const char *id, gpointer user_data);

static gboolean
alive_but (const char *id, gpointer user_data)
{
  AliveBut *ab = user_data;

  return g_strcmp0 (id, ab->lost) != 0 && may_be_alive (id, ab->self);
}

/* Members that lost our leader wait for this node, the next in line, to
 * take over (leader_lost): they follow it at our term (waits_for_us). Our
 * timeout for the leader may be longer than theirs (a link's round trip
 * stretches it: rlx_peer_set_timeout_for), and the cohort stood still for
 * it — 3.5 s in a 300 s chaos run across namespace hosts (seed 7), the next
 * in line frozen 2.1 s into the leader's freeze without having taken over.
 * Once the leader has been silent here for the plain timeout too (and
 * longer than 1.5 × any gap the link showed while it lived: such a link
 * may be silent that long with a live leader behind it), this node sees
 * what they saw, and times the leader out — if it is next in line in its
 * own view, and its own loop has not stood still lately (a close then
 * reads as this node cut off). While the silence is shorter it looks
 * again when it would pass: a leader heard within that keeps its place,
 * and a member cut off from it alone waits out its successor timeout. */
void
rlx_coordinator_successor_due (RlxCoordinator *self)
{
  const char *lid = rlx_leadership_get_leader (self->lead);
  gint64 limit = (gint64) rlx_peer_set_get_timeout (self->peers) * 1000, silent;
  RlxPeer *waiting = NULL, *lp;
  AliveBut ab = { self, lid };
  const char *next;
  g_autofree char *why = NULL;

  if (role (self) != RLX_ROLE_MEMBER || lid == NULL || is_self (self, lid) || self->due_id)
    return;
  for (guint i = 0; i < rlx_peer_set_size (self->peers) && waiting == NULL; i++)
    {
      RlxPeer *p = rlx_peer_set_nth (self->peers, i);

      if (waits_for_us (self, p))
        waiting = p;
    }
  if (waiting == NULL || (lp = rlx_peer_set_lookup (self->peers, lid)) == NULL || lp->link == NULL)
    return;
  next = rlx_leadership_successor (self->lead, alive_but, &ab);
  if (next == NULL || !is_self (self, next))
    return;
  limit = MAX (limit, (gint64) (1.5 * lp->gap_peak_us));
  silent = rlx_peer_set_silence_us (self->peers, lp);
  if (silent < limit || rlx_peer_set_stalled_recently (self->peers))
    {
      gint64 wait_ms = silent < 0 || silent >= limit ? 500 : (limit - silent) / 1000 + 20;

      self->due_id = rlx_timeout_add ((guint) CLAMP (wait_ms, 50, 2000), on_successor_due, self);
      return;
    }
  why = g_strdup_printf ("heartbeat timeout (silent for %.1f s; %s lost it too, and waits for "
                         "this node, next in line, to take over)", silent / 1e6, waiting->id);
  rlx_peer_set_close (self->peers, lp, why);
}

/* The successor did not announce itself in time (twice the heartbeat
 * timeout: it may see the old leader's silence up to a timeout later than
 * this node did). A leader in reach is rejoined; else this node looks for
 * its cohort again, as a node that was cut off does. */
static gboolean
on_successor_timeout (gpointer user_data)
{
  RlxCoordinator *self = user_data;
  g_autofree char *reason = NULL;

  self->successor_id = 0;
  if (!self->awaiting_successor || role (self) != RLX_ROLE_MEMBER)
    return G_SOURCE_REMOVE;
  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *p = rlx_peer_set_nth (self->peers, i);
      if (p->ready && !p->refused && rlx_coordinator_successor_check (self, p))
        return G_SOURCE_REMOVE;
    }
  reason = g_strdup_printf ("%s, next in line after the leader was lost, did not take over "
                            "within %u ms; this node looks for its cohort again",
                            rlx_leadership_get_leader (self->lead),
                            2 * rlx_peer_set_get_timeout (self->peers));
  rejoin (self, reason);
  return G_SOURCE_REMOVE;
}

/* For the succession: a member that may be alive — reachable, or one this
 * node never had a link to. A member joins knowing the member list, not
 * every member: its link to one may not be up yet (its first attempt
 * failed, the peer was frozen as it came). Passing over such a member took
 * over beside it, two leaders of one term (issue 29, a 60-minute chaos
 * run: two leaders of term 38). Only a member whose link closed on us is
 * known to be gone. */
static gboolean
may_be_alive (const char *id, gpointer user_data)
{
  RlxCoordinator *self = user_data;

  return is_alive (id, self) || self->linked == NULL ||
         !g_hash_table_contains (self->linked, id);
}

/* A peer in reach that leads our fork at a term past @term, or NULL. */
static RlxPeer *
newer_leader_in_reach (RlxCoordinator *self, guint64 term)
{
  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *p = rlx_peer_set_nth (self->peers, i);

      if (p->ready && !p->refused && p->id != NULL && !is_self (self, p->id) &&
          p->role == RLX_ROLE_LEADER && p->term > term &&
          rlx_lineage_same_fork (self->lineage, &p->lineage))
        return p;
    }
  return NULL;
}

/* The leader is gone: the most senior member that may be alive takes over
 * — unless a peer in reach already leads our fork at a newer term (the
 * member of ours that took over first, while our leader, which had dropped
 * it, was still in reach for us): this node rejoins it instead of leading
 * beside it at the same term, where neither passes over to the other (a
 * leader passes over an announcement of its own member's at its term). */
void
rlx_coordinator_leader_lost (RlxCoordinator *self, const char *old, const char *reason)
{
  const char *next;
  RlxPeer *lp;

  if (role (self) == RLX_ROLE_JOINING || role (self) == RLX_ROLE_ALONE)
    {
      joiner_alone (self);
      return;
    }
  if (role (self) != RLX_ROLE_MEMBER)
    return;
  if (rlx_leadership_remove_member (self->lead, old))
    rlx_coordinator_emit_member (self, RLX_EVENT_MEMBER_LEFT, old, reason);
  next = rlx_leadership_successor (self->lead, may_be_alive, self);
  /* Not linked yet: look for it (it announces its term on the link). */
  if (next != NULL && !is_alive (next, self))
    rlx_coordinator_emit_discover (self);
  if ((next == NULL || is_self (self, next)) &&
      (lp = newer_leader_in_reach (self, rlx_leadership_get_term (self->lead))) != NULL)
    {
      g_autofree char *leader = g_strdup (lp->id);
      g_autofree char *why = g_strdup_printf (
          "this node is next in line after the leader was lost, but %s leads the cohort "
          "already (term %" G_GUINT64_FORMAT "): it rejoins it", leader, lp->term);
      guint64 term = MAX (rlx_leadership_get_term (self->lead), lp->term);

      rlx_coordinator_emit_simple (self, RLX_EVENT_REJOINING, self->node_id, why);
      rlx_coordinator_transition (self, RLX_ROLE_JOINING, leader, term, "resync");
    }
  else if (next == NULL || is_self (self, next))
    {
      g_autofree char *was = g_strdup (old);
      char **with = rlx_coordinator_other_members (self);

      become_leader (self, rlx_leadership_get_term (self->lead) + 1, FALSE);
      rlx_coordinator_note_superseded (self, was, with);
    }
  else
    {
      /* Wait for it to announce itself (term + 1); its silence is caught
       * by the heartbeat like anyone's. */
      g_autofree char *n = g_strdup (next);
      rlx_coordinator_transition (self, RLX_ROLE_MEMBER, n, rlx_leadership_get_term (self->lead),
                                  NULL);
      /* Unless the old leader was lost to this node alone: then the
       * successor never takes over (see successor_check). */
      self->awaiting_successor = TRUE;
      g_clear_handle_id (&self->successor_id, rlx_source_remove);
      self->successor_id = rlx_timeout_add (2 * rlx_peer_set_get_timeout (self->peers),
                                            on_successor_timeout, self);
    }
}

void
rlx_coordinator_become_leader (RlxCoordinator *self, guint64 term, gboolean founding)
{
  become_leader (self, term, founding);
}
