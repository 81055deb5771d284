/* rlx-coordinator-merge.c — two groups of one cohort meet: the merge rule
 * applied to their leaders' hellos and announcements, each claim checked
 * against what this node can see (the followers its peers' heartbeats, or
 * hellos, show), and yielding: our group joins the kept one and tells the
 * nodes that followed it (docs/PROTOCOL.md, "Split and merge"; the rule
 * itself is rlx-leadership.c). Threads: the coordinator's.
 */
#include "rlx-config.h"
#include "core/rlx-sources.h"
#include "rlx-coordinator-private.h"

#include <string.h>

static void relay_leader (RlxCoordinator *self, GPtrArray *ids, RlxMsgLeader *lm, RlxPeer *skip);

/* How long a larger group must stay larger before ours yields to it (µs):
 * more than a heartbeat (500 ms). */
#define RLX_OUTGROWN_US 700000

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
  rlx_coordinator_become_leader (self, rlx_leadership_get_term (self->lead) + 1, TRUE);
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

  if (p == NULL || !p->ready || (p->hb_state ? p->hb_role : p->role) != RLX_ROLE_LEADER)
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

static gboolean
on_outgrown (gpointer data)
{
  RlxCoordinator *self = data;

  self->outgrown_id = 0;
  rlx_coordinator_groups_changed (self);
  return G_SOURCE_REMOVE;
}

void
rlx_coordinator_groups_changed (RlxCoordinator *self)
{
  RlxGroupInfo mine;
  guint64 term = rlx_leadership_get_term (self->lead);
  gint64 now = g_get_monotonic_time ();

  if (role (self) != RLX_ROLE_LEADER || self->finished)
    return;
  if (self->claim_doubted)
    {
      rlx_coordinator_recheck_claim (self);
      if (role (self) != RLX_ROLE_LEADER)
        return;
    }
  mine = (RlxGroupInfo) { self->node_id, members (self)->len, applied (self),
                          *rlx_lineage_id (self->lineage) };
  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *q = rlx_peer_set_nth (self->peers, i);
      RlxGroupInfo theirs;
      RlxMsgLeader lm = { 0 };
      guint seen;

      /* (a leader of our fork at an older term is one we took over from:
       * its members follow us already, or will) */
      if (!q->ready || q->refused || q->id == NULL || !q->hb_state ||
          q->hb_role != RLX_ROLE_LEADER || g_strcmp0 (q->hb_leader, q->id) != 0 ||
          is_self (self, q->id) || rlx_leadership_has_member (self->lead, q->id) ||
          (rlx_lineage_same_fork (self->lineage, &q->hb_lineage) && q->hb_term < term))
        continue;
      /* By members alone (steps move on between heartbeats: a verdict by
       * them could keep both groups, or neither; docs/PROTOCOL.md) */
      theirs = checked_group (self, q->id, q->hb_members, q->hb_step, &q->hb_lineage, q, &seen);
      if (theirs.members <= mine.members)
        continue;
      /* A count can be a heartbeat old (ours a moment ago): only a group
       * that is still larger a beat later is yielded to, so two leaders
       * never both yield to counts that crossed. */
      if (g_strcmp0 (self->outgrown_by, q->id) != 0)
        {
          g_free (self->outgrown_by);
          self->outgrown_by = g_strdup (q->id);
          self->outgrown_at = now;
        }
      if (now - self->outgrown_at < RLX_OUTGROWN_US)
        {
          if (self->outgrown_id == 0)
            self->outgrown_id = rlx_timeout_add (RLX_OUTGROWN_US / 1000 + 100, on_outgrown, self);
          return;
        }
      g_clear_pointer (&self->outgrown_by, g_free);
      lm.leader = q->id;
      lm.term = q->hb_term;
      lm.step = q->hb_step;
      lm.lineage = q->hb_lineage;
      yield_to (self, q, &mine, &theirs, &lm);
      return;
    }
  g_clear_pointer (&self->outgrown_by, g_free);
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
