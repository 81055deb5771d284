/* rlx-coordinator-roles.c — the node's role: the one transition function,
 * founding, joining, failover, cutting off, merging two groups
 * (see rlx-coordinator-private.h; whom an alone node waits for before it
 * founds is rlx-coordinator-founding.c).
 *
 * The next change to it should move the merge judgement out to its own
 * object (rlx-leadership.c holds the rule already). */
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

/* Another node may have written a newer checkpoint since this one read its
 * own at start (it waited to found, for silent peers): read it again, and
 * take it if it is newer. A file read, as at start. */
static void
reload_checkpoint (RlxCoordinator *self)
{
  RlxCheckpoint fresh = { 0 };
  g_autoptr(GError) error = NULL;

  if (rlx_checkpointer_load (self->ckpt, &fresh, &error) && fresh.params != NULL &&
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
      rlx_coordinator_transition (self, RLX_ROLE_ALONE, NULL, rlx_leadership_get_term (self->lead),
                                  NULL);
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
  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *p = rlx_peer_set_nth (self->peers, i);
      if (p->ready && !p->refused)
        rlx_peer_set_say_hello (self->peers, p);
    }
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
      rlx_coordinator_transition (self, RLX_ROLE_ALONE, NULL, rlx_leadership_get_term (self->lead),
                                  NULL);
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

static void relay_leader (RlxCoordinator *self, GPtrArray *ids, RlxMsgLeader *lm, RlxPeer *skip);

/* @p's claim to lead a group (its hello's members and steps) as far as
 * this node can check it: the members it sees following @p, and their
 * steps (rlx_leadership_check_claim). */
static RlxGroupInfo
checked_group (RlxCoordinator *self, const char *id, guint members_claimed, guint64 step_claimed,
               const RlxMsgLineage *lineage, RlxPeer *skip, guint *seen_out)
{
  RlxGroupInfo claimed = { id, members_claimed, step_claimed, *lineage };
  guint seen = 1;
  guint64 backed = 0;

  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *q = rlx_peer_set_nth (self->peers, i);
      /* where it stands now: its heartbeats say, else its hello (by the
       * hellos alone a true claim was doubted for a minute: issue 29) */
      RlxRole r = q->hb_state ? q->hb_role : q->role;
      const char *l = q->hb_state ? q->hb_leader : q->leader;

      if (q == skip || !q->ready || q->refused || q->id == NULL || g_strcmp0 (q->id, id) == 0 ||
          r != RLX_ROLE_MEMBER || g_strcmp0 (l, id) != 0)
        continue;
      seen++;
      backed = MAX (backed, q->hb_state ? MAX (q->hb_step, q->step) : q->step);
    }
  *seen_out = seen;
  return rlx_leadership_check_claim (&claimed, seen, backed);
}

static RlxGroupInfo
checked_claim (RlxCoordinator *self, RlxPeer *p, guint *seen_out)
{
  return checked_group (self, p->id, p->members, p->step, &p->lineage, p, seen_out);
}

/* Whether this node, alone with the state of its lineage, is kept by the
 * merge rule against the group @lp leads in another fork of that lineage
 * (a founder that resumed a checkpoint, and found nobody answering): its
 * steps past where that fork began are committed steps the rule keeps,
 * which joining would discard (issue 29, item 13: resuming from a
 * checkpoint must never outrank a node that holds newer committed steps).
 * A node that only joins, or holds nothing, never outranks anyone. */
static gboolean
alone_outranks (RlxCoordinator *self, RlxPeer *lp, RlxGroupInfo *mine, RlxGroupInfo *theirs)
{
  const RlxMsgLineage *own = rlx_lineage_id (self->lineage);
  guint seen;

  if (role (self) != RLX_ROLE_ALONE || self->join_only || applied (self) == 0 || own->lin == 0 ||
      lp == NULL || !lp->ready || lp->refused || lp->id == NULL || lp->role != RLX_ROLE_LEADER ||
      lp->lineage.lin != own->lin || rlx_lineage_same_fork (self->lineage, &lp->lineage))
    return FALSE;
  *mine = (RlxGroupInfo) { self->node_id, 1, applied (self), *own };
  *theirs = checked_claim (self, lp, &seen);
  return rlx_leadership_merge_compare (mine, theirs) > 0;
}

void
rlx_coordinator_join_met_leader (RlxCoordinator *self, const char *leader, guint64 term)
{
  RlxGroupInfo mine, theirs;
  RlxPeer *lp = rlx_peer_set_lookup (self->peers, leader);
  RlxEvent *e;

  if (!alone_outranks (self, lp, &mine, &theirs))
    {
      rlx_coordinator_transition (self, RLX_ROLE_JOINING, leader, term, NULL);
      return;
    }
  e = rlx_event_new (RLX_EVENT_REJECTED);
  e->u.rejected.node = g_strdup (lp->id);
  e->u.rejected.by = g_strdup (self->node_id);
  e->u.rejected.reason = g_strdup_printf (
      "%s leads another fork of this node's lineage (begun at step %" G_GUINT64_FORMAT
      ", %u member%s, step %" G_GUINT64_FORMAT "), and this node holds committed steps past it "
      "(step %" G_GUINT64_FORMAT "): by the merge rule (%s) it leads on instead of joining, and "
      "that group yields to it", lp->id, theirs.lineage.base, theirs.members,
      theirs.members == 1 ? "" : "s", theirs.step, mine.step,
      rlx_leadership_merge_reason (&mine, &theirs));
  rlx_coordinator_emit_event (self, e);
  self->found_blocked_since = 0;
  g_clear_pointer (&self->found_blocked_why, g_free);
  rlx_lineage_lead_on (self->lineage, applied (self));
  become_leader (self, rlx_leadership_get_term (self->lead) + 1, TRUE);
}

/* Our group does not yield to a claim it cannot check: reported once per
 * claimant, and checked again as peers say hello (a healed split's other
 * members may link a moment after their leader). */
static void
doubt_claim (RlxCoordinator *self, RlxPeer *p, const RlxGroupInfo *mine, const RlxGroupInfo *checked,
             guint seen)
{
  RlxEvent *e;

  if (g_strcmp0 (self->claim_doubted, p->id) == 0)
    return;
  g_free (self->claim_doubted);
  self->claim_doubted = g_strdup (p->id);
  e = rlx_event_new (RLX_EVENT_REJECTED);
  e->u.rejected.node = g_strdup (p->id);
  e->u.rejected.by = g_strdup (self->node_id);
  e->u.rejected.reason = g_strdup_printf (
      "a claim to lead %u members at step %" G_GUINT64_FORMAT " that this node cannot check: "
      "it sees %u of them (%u following it), and counts their steps up to %" G_GUINT64_FORMAT
      "; by what it can check, this group (%u members, step %" G_GUINT64_FORMAT ") is kept, "
      "so it does not yield", p->members, p->step, seen, seen - 1, checked->step,
      mine->members, mine->step);
  rlx_coordinator_emit_event (self, e);
}

/* Our group yields to @p's (by the rule, its claim checked). @lm: its
 * announcement, when it already came (then the nodes that followed us are
 * told now: no other announcement will come). */
static void
yield_to (RlxCoordinator *self, RlxPeer *p, const RlxGroupInfo *mine, const RlxGroupInfo *theirs,
          RlxMsgLeader *lm)
{
  GPtrArray *former = str_array_copy (members (self));
  const char *why = rlx_leadership_merge_reason (mine, theirs);

  g_clear_pointer (&self->claim_doubted, g_free);
  str_array_remove (former, self->node_id);
  rlx_lineage_yield (self->lineage,
                     g_strdup_printf ("two groups of cohort %s met; the one with %s "
                                      "(led by %s) is kept", self->cohort, why, p->id),
                     former);
  rlx_coordinator_transition (self, RLX_ROLE_JOINING, p->id,
                              MAX (p->term, rlx_leadership_get_term (self->lead)), "merge");
  if (lm)
    {
      g_autoptr(GPtrArray) told = rlx_lineage_take_former (self->lineage);
      relay_leader (self, told, lm, p);
    }
}

void
rlx_coordinator_recheck_claim (RlxCoordinator *self)
{
  RlxPeer *p = rlx_peer_set_lookup (self->peers, self->claim_doubted);
  RlxGroupInfo mine, theirs;
  RlxMsgLeader lm = { 0 };
  guint seen;

  if (p == NULL || !p->ready || p->role != RLX_ROLE_LEADER)
    {
      g_clear_pointer (&self->claim_doubted, g_free);
      return;
    }
  mine = (RlxGroupInfo) { self->node_id, p->sent_noted ? p->sent_members : members (self)->len,
                          p->sent_noted ? p->sent_step : applied (self),
                          *rlx_lineage_id (self->lineage) };
  theirs = checked_claim (self, p, &seen);
  if (rlx_leadership_merge_compare (&mine, &theirs) > 0)
    return;
  /* It checks out now. Its announcement came while we doubted it if its
   * term is above ours: our nodes are told at once. */
  lm.leader = p->id;
  lm.term = p->term;
  lm.step = p->step;
  lm.lineage = p->lineage;
  yield_to (self, p, &mine, &theirs,
            !rlx_lineage_same_fork (self->lineage, &p->lineage) ||
                    p->term > rlx_leadership_get_term (self->lead)
                ? &lm : NULL);
}

void
rlx_coordinator_groups_changed (RlxCoordinator *self)
{
  RlxGroupInfo mine;

  if (self->claim_doubted)
    {
      rlx_coordinator_recheck_claim (self);
      return;
    }
  if (role (self) != RLX_ROLE_LEADER || self->finished)
    return;
  mine = (RlxGroupInfo) { self->node_id, members (self)->len, applied (self),
                          *rlx_lineage_id (self->lineage) };
  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *q = rlx_peer_set_nth (self->peers, i);
      RlxGroupInfo theirs;
      RlxMsgLeader lm = { 0 };
      guint seen;

      if (!q->ready || q->refused || q->id == NULL || !q->hb_state ||
          q->hb_role != RLX_ROLE_LEADER || g_strcmp0 (q->hb_leader, q->id) != 0 ||
          is_self (self, q->id) || rlx_leadership_has_member (self->lead, q->id))
        continue;
      /* By members alone (steps move on between heartbeats: a verdict by
       * them could keep both groups, or neither; docs/PROTOCOL.md) */
      theirs = checked_group (self, q->id, q->hb_members, q->hb_step, &q->hb_lineage, q, &seen);
      if (theirs.members <= mine.members)
        continue;
      lm.leader = q->id;
      lm.term = q->hb_term;
      lm.step = q->hb_step;
      lm.lineage = q->hb_lineage;
      yield_to (self, q, &mine, &theirs, &lm);
      return;
    }
}

/* Two leaders met (@p's hello). The rule is applied to the numbers both
 * hellos carried, so both sides reach one verdict — except that a claim
 * that would make our group yield counts only as far as this node can
 * check it (issue 29, item 9): the members it sees following @p, their
 * steps. */
void
rlx_coordinator_merge_with (RlxCoordinator *self, RlxPeer *p, guint sent_members, guint64 sent_step)
{
  RlxGroupInfo mine = { self->node_id, sent_members, sent_step, *rlx_lineage_id (self->lineage) };
  RlxGroupInfo claimed = { p->id, p->members, p->step, p->lineage };
  RlxGroupInfo theirs;
  guint seen;

  if (rlx_leadership_merge_compare (&mine, &claimed) > 0)
    {
      /* We are kept: a new term above both, so every node of the other
       * group follows us. */
      guint64 term = MAX (rlx_leadership_get_term (self->lead), p->term) + 1;
      rlx_coordinator_transition (self, RLX_ROLE_LEADER, self->node_id, term, NULL);
      rlx_cohort_send_leader (&self->ctx, NULL);
      /* The round in flight goes on under the new term. */
      rlx_leader_abandon_round (self->leader);
      rlx_leader_publish (self->leader, FALSE);
      return;
    }
  theirs = checked_claim (self, p, &seen);
  if (rlx_leadership_merge_compare (&mine, &theirs) > 0)
    doubt_claim (self, p, &mine, &theirs, seen);
  else
    yield_to (self, p, &mine, &theirs, NULL);
}

/* Tell @ids (who followed us) that @lm's leader leads now. */
static void
relay_leader (RlxCoordinator *self, GPtrArray *ids, RlxMsgLeader *lm, RlxPeer *skip)
{
  for (guint i = 0; ids && i < ids->len; i++)
    {
      RlxPeer *mp = rlx_peer_set_lookup (self->peers, g_ptr_array_index (ids, i));
      RlxMsg m;

      if (mp == NULL || mp == skip)
        continue;
      rlx_msg_init (&m, RLX_MSG_LEADER, self->node_id);
      m.u.leader.leader = g_strdup (lm->leader);
      m.u.leader.term = lm->term;
      m.u.leader.step = lm->step;
      m.u.leader.lineage = lm->lineage;
      rlx_coordinator_send_msg (self, mp, &m);
      rlx_msg_clear (&m);
    }
}

/* Our group is kept against the group whose leader @lp announced itself
 * (@lm): tell it who leads, so that it judges by the rule too — once per
 * announcement (it answers ours once the same way). Without it a leader
 * of another fork whose announcement we judged heard nothing from us, and
 * both led on side by side, linked. */
static void
answer_claim (RlxCoordinator *self, RlxPeer *lp, const RlxMsgLeader *lm)
{
  if (g_strcmp0 (self->answered, lp->id) == 0 && self->answered_term == lm->term &&
      memcmp (&self->answered_lineage, &lm->lineage, sizeof lm->lineage) == 0)
    return;
  g_free (self->answered);
  self->answered = g_strdup (lp->id);
  self->answered_term = lm->term;
  self->answered_lineage = lm->lineage;
  rlx_cohort_send_leader (&self->ctx, lp);
}

void
rlx_coordinator_on_leader_msg (RlxCoordinator *self, RlxPeer *p, RlxMsgLeader *lm)
{
  const char *lid = lm->leader;
  guint64 term = rlx_leadership_get_term (self->lead);
  /* Terms compare only within one fork (docs/PROTOCOL.md, "Lineages"): an
   * announcement of another fork's leader is neither stale nor newer than
   * ours, and its leader is outside our group whatever our member list
   * says. */
  gboolean ours = rlx_lineage_same_fork (self->lineage, &lm->lineage);
  gboolean newer = !ours || lm->term > term;
  g_autoptr(GPtrArray) former = NULL;
  RlxPeer *lp;

  if (self->unheard)
    g_hash_table_remove (self->unheard, p->id);
  if (is_self (self, lid))
    return;
  lp = rlx_peer_set_lookup (self->peers, lid);
  if (lp)
    rlx_peer_note_leads (lp, &lm->lineage, lm->term);
  if (ours && lm->term < term)
    return;
  /* We yielded in a merge: the nodes that followed us follow the new
   * leader too, once it has announced its term. */
  if (newer && (former = rlx_lineage_take_former (self->lineage)))
    relay_leader (self, former, lm, lp);
  switch (role (self))
    {
    case RLX_ROLE_ALONE:
      if (lp)
        rlx_coordinator_join_met_leader (self, lid, lm->term);
      break;
    case RLX_ROLE_JOINING:
      if (lp && (g_strcmp0 (rlx_leadership_get_leader (self->lead), lid) != 0 || newer))
        rlx_coordinator_transition (self, RLX_ROLE_JOINING, lid, lm->term, NULL);
      break;
    case RLX_ROLE_MEMBER:
      if (newer || g_strcmp0 (rlx_leadership_get_leader (self->lead), lid) != 0)
        {
          /* A leader from outside our cohort (a merge): its state is not
           * ours, join it through a snapshot (we may not even have a link
           * to it yet: joining looks for it). Else: a failover. Only our
           * own leader (relaying a merge it lost) moves us to another
           * group while it is in reach: an announcement of anyone else's
           * is a claim our leader judges (issue 29, item 9). */
          gboolean outside = !ours || !rlx_leadership_has_member (self->lead, lid);

          if (outside && g_strcmp0 (p->id, rlx_leadership_get_leader (self->lead)) != 0 &&
              rlx_peer_set_lookup (self->peers, rlx_leadership_get_leader (self->lead)))
            g_debug ("%s announces %s (term %" G_GUINT64_FORMAT "), from outside our cohort: "
                     "our leader %s judges it", p->id, lid, lm->term,
                     rlx_leadership_get_leader (self->lead));
          else if (outside)
            {
              rlx_lineage_change (self->lineage);
              rlx_coordinator_transition (self, RLX_ROLE_JOINING, lid, lm->term, "merge");
            }
          else if (lp)
            {
              rlx_coordinator_transition (self, RLX_ROLE_MEMBER, lid, lm->term, NULL);
              rlx_follower_send_ack (self->follower);
            }
        }
      break;
    case RLX_ROLE_LEADER:
      /* A leader from outside our group announcing itself (a merge): the
       * merge rule decides, its claim checked — an announcement alone never
       * makes our group yield (issue 29, item 9). */
      if (lp && (!ours || !rlx_leadership_has_member (self->lead, lid)) &&
          (newer || strcmp (lid, self->node_id) < 0))
        {
          /* Between two forks of one lineage each leader leads at least
           * itself, whatever its hello said while it was alone (0
           * members): a node alone that leads on over a resumed founder
           * (join_met_leader) then counts as one on both sides, and both
           * keep it by the fork order. (Not between other groups: there a
           * hello of 0 members was a node cut off that yields, and
           * counting it as one kept cut leaders of one apart — a 300 s
           * chaos run never settled.) */
          const RlxMsgLineage *own = rlx_lineage_id (self->lineage);
          guint at_least = !ours && own->lin != 0 && lp->lineage.lin == own->lin ? 1 : 0;
          RlxGroupInfo mine = { self->node_id,
                                MAX (lp->sent_noted ? lp->sent_members : members (self)->len,
                                     at_least),
                                lp->sent_noted ? lp->sent_step : applied (self), *own };
          RlxGroupInfo claimed = { lp->id, MAX (lp->members, at_least), lp->step, lp->lineage };
          guint seen;
          RlxGroupInfo theirs = checked_group (self, lp->id, claimed.members, lp->step,
                                               &lp->lineage, lp, &seen);

          if (rlx_leadership_merge_compare (&mine, &theirs) > 0)
            {
              if (rlx_leadership_merge_compare (&mine, &claimed) < 0)
                doubt_claim (self, lp, &mine, &theirs, seen);
              answer_claim (self, lp, lm);
            }
          else
            yield_to (self, lp, &mine, &theirs, lm);
          break;
        }
      /* A newer term of our own fork always wins; two leaders of one term:
       * the smaller id keeps it. */
      if (lp && (lm->term > term || strcmp (lid, self->node_id) < 0))
        {
          g_autoptr(GPtrArray) mine = str_array_copy (members (self));
          rlx_coordinator_transition (self, RLX_ROLE_JOINING, lid, lm->term,
                                      "another leader took over");
          /* Our members follow the new leader too: tell them. */
          relay_leader (self, mine, lm, lp);
        }
      break;
    case RLX_ROLE_STOPPED:
    case RLX_ROLE_N:
    default:
      break;
    }
}

/* Two groups of one cohort that cannot merge (one refused the other's
 * hello): whether ours is the one that gives way, by the merge rule with
 * the numbers the two hellos carried, as both sides judge. Only a group
 * led by the refused peer counts; our hello said members 0 unless we led
 * when we sent it. Its claim counts only as far as this node can check it
 * (as in a merge): a hello alone never ends a group. */
gboolean
rlx_coordinator_refusal_yields (RlxCoordinator *self, RlxPeer *p, const RlxMsg *hello)
{
  RlxGroupInfo mine = { self->node_id, 0, 0, *rlx_lineage_id (self->lineage) };
  RlxGroupInfo theirs;

  if (p == NULL || p->link == NULL)
    return FALSE;
  if (hello != NULL)
    {
      if (hello->u.hello.role != RLX_ROLE_LEADER || hello->node == NULL)
        return FALSE;
      theirs = (RlxGroupInfo) { hello->node, hello->u.hello.members, hello->u.hello.step,
                                hello->u.hello.lineage };
    }
  else
    {
      if (!p->ready || p->role != RLX_ROLE_LEADER || p->id == NULL)
        return FALSE;
      theirs = (RlxGroupInfo) { p->id, p->members, p->step, p->lineage };
    }
  mine.members = p->sent_members;
  mine.step = p->sent_noted ? p->sent_step : 0;
  if (rlx_leadership_merge_compare (&mine, &theirs) > 0)
    return FALSE;
  {
    guint seen;
    RlxGroupInfo checked = checked_group (self, theirs.leader, theirs.members, theirs.step,
                                          &theirs.lineage, p, &seen);

    if (rlx_leadership_merge_compare (&mine, &checked) > 0)
      {
        g_autofree char *why = g_strdup_printf (
            "a refused claim to lead %u members at step %" G_GUINT64_FORMAT " that this node "
            "cannot check: it sees %u of them; this group (%u members) goes on",
            theirs.members, theirs.step, seen, mine.members);
        RlxEvent *e = rlx_event_new (RLX_EVENT_REJECTED);
        e->u.rejected.node = g_strdup (theirs.leader);
        e->u.rejected.by = g_strdup (self->node_id);
        e->u.rejected.reason = g_steal_pointer (&why);
        rlx_coordinator_emit_event (self, e);
        return FALSE;
      }
  }
  return TRUE;
}
