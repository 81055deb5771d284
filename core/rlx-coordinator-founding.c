/* rlx-coordinator-founding.c — an alone node's founding timer: whom it
 * waits for before it founds, and who founds (see rlx-coordinator-private.h;
 * what founding does is rlx_coordinator_found, in rlx-coordinator-roles.c).
 *
 * A node waits for peers that live but do not answer, up to
 * FOUND_SILENT_CAP heartbeat timeouts: they may hold the cohort's newest
 * committed steps. Not for a peer that cannot hold a committed step this
 * node lacks — one that acknowledged a commit of the term this node led
 * (every commit of that term is this node's): it waits one timeout for
 * such a peer, then leads on (issue 29: a leader cut off and frozen waited
 * 9.1 s for its cut member, which waited for it). Nor for the leader it
 * took over from at a failover, once every member that leader had has
 * acknowledged a commit of this node's term (a chaos run's 7.54 s: a new
 * leader cut off and thawed waited for its old leader, cut).
 *
 * A node cut off from its group at once — every link gone, the last two
 * within a heartbeat timeout and a second — trains on, but at the pace the
 * group had (its worker makes one gradient per round time of the group's),
 * for RLX_CUT_PACE_MS or until a link is up (looked at every 500 ms): the group it lost has two
 * members or more and goes on without it, so the merge rule keeps that
 * group's history and discards this node's when they meet. Flat out, a
 * node of one made ~2,300 steps/s on a branch that was always discarded,
 * on the cores its group shared with it (scripts/chaos.py --cuts on two
 * cores: 38 % of a run had one). Lost by a kill, the group is gone and
 * this node's branch is the one kept: it trains at the group's pace until
 * a rank links to it, at most RLX_CUT_PACE_MS. */
#include "rlx-config.h"
#include "core/rlx-sources.h"
#include "rlx-coordinator-private.h"

#include <string.h>

static gboolean on_found_timer (gpointer user_data);

void
rlx_coordinator_start_found_timer (RlxCoordinator *self, guint ms)
{
  if (self->found_id == 0 && !self->finished)
    self->found_id = rlx_timeout_add (ms, on_found_timer, self);
}

/* As the leader, a step of its term was committed: every member
 * acknowledged it, so none holds a commit of this term that we lack. */
void
rlx_coordinator_note_led_commit (RlxCoordinator *self)
{
  GPtrArray *m = members (self);

  if (role (self) != RLX_ROLE_LEADER)
    return;
  if (self->behind == NULL)
    self->behind = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  for (guint i = 0; i < m->len; i++)
    if (!is_self (self, g_ptr_array_index (m, i)) &&
        !g_hash_table_contains (self->behind, g_ptr_array_index (m, i)))
      g_hash_table_add (self->behind, g_strdup (g_ptr_array_index (m, i)));
  /* The leader we took over from, once everyone it had has followed us:
   * since the takeover it can have committed only alone (a commit needs
   * every member's acknowledgement, and they were ours), a branch that
   * loses to this term by the merge rule however long we wait for it. */
  if (self->superseded == NULL || g_hash_table_contains (self->behind, self->superseded))
    return;
  for (guint i = 0; self->superseded_with && self->superseded_with[i]; i++)
    if (!g_hash_table_contains (self->behind, self->superseded_with[i]))
      return;
  g_hash_table_add (self->behind, g_strdup (self->superseded));
}

char **
rlx_coordinator_other_members (RlxCoordinator *self)
{
  GPtrArray *m = members (self);
  GStrvBuilder *b = g_strv_builder_new ();
  char **out;

  for (guint i = 0; i < m->len; i++)
    if (!is_self (self, g_ptr_array_index (m, i)))
      g_strv_builder_add (b, g_ptr_array_index (m, i));
  out = g_strv_builder_end (b);
  g_strv_builder_unref (b);
  return out;
}

void
rlx_coordinator_note_superseded (RlxCoordinator *self, const char *old, char **with)
{
  rlx_coordinator_forget_superseded (self);
  if (old == NULL || is_self (self, old) || role (self) != RLX_ROLE_LEADER)
    {
      g_strfreev (with);
      return;
    }
  self->superseded = g_strdup (old);
  self->superseded_with = with;
}

void
rlx_coordinator_forget_superseded (RlxCoordinator *self)
{
  g_clear_pointer (&self->superseded, g_free);
  g_clear_pointer (&self->superseded_with, g_strfreev);
}

/* The id of a link's peer: its id, or its socket's name on the local bus. */
static char *
link_peer_id (RlxPeer *p)
{
  const char *peer = p->id ? p->id : rlx_link_get_peer (p->link);
  g_autofree char *base = peer ? g_path_get_basename (peer) : NULL;

  if (base && g_str_has_suffix (base, ".sock"))
    base[strlen (base) - strlen (".sock")] = '\0';
  return g_steal_pointer (&base);
}

/* Whether @id cannot hold a committed step this node lacks (it
 * acknowledged a commit of the term this node led, and this node has
 * held its own state since). */
static gboolean
is_behind (RlxCoordinator *self, const char *id)
{
  return id != NULL && self->behind != NULL && g_hash_table_contains (self->behind, id);
}

/* Why an alone node may not found now although nobody it can reach leads,
 * or NULL: a peer whose process lives but does not answer (RlxLocalBus's
 * unanswered sockets, a link without a hello yet), or one that belongs to
 * a cohort whose leader this node cannot reach (its leader is frozen, or it
 * is failing over). Such peers may hold the cohort's newest committed steps;
 * founding over them would fork the cohort's history (issue 29, item 13).
 * *@behind_only: every such peer is one that holds no committed step this
 * node lacks (is_behind). */
static char *
found_blocker (RlxCoordinator *self, gboolean *behind_only)
{
  g_autofree char *behind = NULL;

  *behind_only = FALSE;
  for (guint i = 0; self->silent && self->silent[i]; i++)
    if (!is_behind (self, self->silent[i]))
      {
        guint silent = g_strv_length (self->silent);
        return g_strdup_printf ("%u peer%s alive but not answering (%s%s)", silent,
                                silent == 1 ? " is" : "s are", self->silent[i],
                                silent > 1 ? ", …" : "");
      }
    else if (behind == NULL)
      behind = g_strdup_printf ("%s is alive but not answering", self->silent[i]);
  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *p = rlx_peer_set_nth (self->peers, i);
      g_autofree char *id = link_peer_id (p);

      if (p->refused)
        continue;
      if (!p->ready)
        {
          if (!is_behind (self, id))
            return g_strdup_printf ("%s has not said hello yet",
                                    p->id ? p->id : rlx_link_get_peer (p->link));
          if (behind == NULL)
            behind = g_strdup_printf ("%s has not said hello yet", id);
          continue;
        }
      if (self->unheard && g_hash_table_contains (self->unheard, p->id))
        {
          if (!is_behind (self, p->id))
            return g_strdup_printf ("%s was in this node's cohort and has not answered since "
                                    "this node was cut off", p->id);
          if (behind == NULL)
            behind = g_strdup_printf ("%s has not answered since this node was cut off", p->id);
          continue;
        }
      if (p->role == RLX_ROLE_MEMBER || p->role == RLX_ROLE_JOINING ||
          p->role == RLX_ROLE_LEADER)
        return g_strdup_printf ("%s is in a cohort led by %s, which this node cannot reach",
                                p->id, peer_leader (p) ? peer_leader (p) : "nobody yet");
    }
  *behind_only = behind != NULL;
  return g_steal_pointer (&behind);
}

static gboolean
on_found_timer (gpointer user_data)
{
  RlxCoordinator *self = user_data;
  g_autofree RlxFounderCandidate *c = NULL;
  g_autofree char *blocker = NULL;
  gboolean behind_only;
  gint64 now, timeout_us;
  guint k = 0, cap;
  int pick;

  self->found_id = 0;
  if (role (self) != RLX_ROLE_ALONE || self->finished)
    return G_SOURCE_REMOVE;
  rlx_coordinator_emit_discover (self);
  now = g_get_monotonic_time ();
  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *p = rlx_peer_set_nth (self->peers, i);
      if (p->ready && !p->refused && peer_leader (p) &&
          rlx_peer_set_lookup (self->peers, peer_leader (p)))
        {
          rlx_coordinator_join_met_leader (self, peer_leader (p), p->term);
          return G_SOURCE_REMOVE;
        }
    }
  blocker = found_blocker (self, &behind_only);
  timeout_us = (gint64) rlx_peer_set_get_timeout (self->peers) * 1000;
  /* One timeout for peers that hold nothing we lack: founding over them
   * forks past none of their steps. */
  cap = behind_only ? 1 : FOUND_SILENT_CAP;
  if (blocker == NULL)
    {
      self->found_blocked_since = 0;
      /* Only the local bus, and every peer on it answers and is alone: the
       * cohort a node that was cut off looks for is not there any more. */
      if (self->silent_complete && self->rejoin_until > now)
        self->rejoin_until = now;
    }
  else if (self->found_blocked_since == 0)
    self->found_blocked_since = now;
  /* ... or every other one does, and the silent ones were this node's
   * members, silent for a timeout: its cohort is this node. */
  else if (behind_only && self->silent_complete && self->rejoin_until > now &&
           now - self->found_blocked_since >= timeout_us)
    self->rejoin_until = now;
  c = g_new0 (RlxFounderCandidate, rlx_peer_set_size (self->peers) + 1);
  c[k].id = self->node_id;
  /* The newest state each could found with: its checkpoint, or the step it
   * holds (a node cut off from its cohort holds that cohort's steps). */
  c[k].checkpoint = MAX (self->resume.params ? self->resume.step : 0, applied (self));
  /* A node that was cut off looks for its cohort for a while before it
   * would carry on alone (it may be the only one left); nobody founds over
   * peers that live but do not answer, for up to FOUND_SILENT_CAP timeouts
   * (one, for peers behind it). */
  c[k++].join_only = self->join_only || self->checkpoint_error != NULL ||
                     now < self->rejoin_until ||
                     (blocker != NULL && now - self->found_blocked_since < cap * timeout_us);
  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *p = rlx_peer_set_nth (self->peers, i);
      if (!p->ready || p->refused)
        continue;
      if (p->role == RLX_ROLE_ALONE)
        {
          c[k].id = p->id;
          c[k].checkpoint = MAX (p->checkpoint, p->step);
          c[k++].join_only = p->join_only;
        }
    }
  pick = rlx_leadership_pick_founder (c, k);
  if (blocker != NULL && (pick == 0 || g_strcmp0 (blocker, self->found_blocked_why) != 0))
    {
      /* Once per reason; and once more when the wait is over. */
      g_autofree char *why = NULL;

      if (pick != 0)
        why = g_strdup_printf ("%s; this node waits for it before founding a cohort", blocker);
      else if (behind_only)
        why = g_strdup_printf ("%s; it acknowledged this node's commits as its member and holds "
                               "none this node lacks: leading on after one heartbeat timeout",
                               blocker);
      else
        why = g_strdup_printf ("%s; founding anyway after waiting %u heartbeat timeouts",
                               blocker, FOUND_SILENT_CAP);
      rlx_coordinator_emit_simple (self, RLX_EVENT_WAITING, self->node_id, why);
      g_free (self->found_blocked_why);
      self->found_blocked_why = g_steal_pointer (&blocker);
    }
  if (pick == 0)
    {
      self->found_blocked_since = 0;
      g_clear_pointer (&self->found_blocked_why, g_free);
      rlx_coordinator_found (self);
      return G_SOURCE_REMOVE;
    }
  if (pick < 0 && self->checkpoint_error && !self->join_only &&
      now >= self->rejoin_until)
    {
      rlx_coordinator_finish (self, FALSE, self->checkpoint_error->message);
      return G_SOURCE_REMOVE;
    }
  if (pick < 0 && !self->waiting_reported && self->join_only)
    {
      self->waiting_reported = TRUE;
      rlx_coordinator_emit_simple (
          self, RLX_EVENT_WAITING, self->node_id,
          "no cohort reachable yet; this node only joins one (it was given peers to "
          "join), so it waits and keeps looking");
    }
  /* Someone else founds (or a stale view of it): say hello again now and
   * then (the answers refresh what we know), and look for more peers. */
  if (++self->found_waits % 4 == 0)
    for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
      {
        RlxPeer *p = rlx_peer_set_nth (self->peers, i);
        if (p->ready && !p->refused)
          rlx_peer_set_say_hello (self->peers, p);
      }
  rlx_coordinator_start_found_timer (
      self, now < self->rejoin_until || self->found_blocked_since ? 200 : FOUND_RETRY_MS);
  return G_SOURCE_REMOVE;
}

/* ── cut off at once ────────────────────────────────────────────────────── */

/* Whether a link of ours is up, but @lost's. */
static gboolean
linked_to_any (RlxCoordinator *self, const char *lost)
{
  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *p = rlx_peer_set_nth (self->peers, i);

      if (p->ready && !p->refused && p->link && !rlx_link_is_closed (p->link) &&
          g_strcmp0 (p->id, lost) != 0)
        return TRUE;
    }
  return FALSE;
}

/* Paced: every half second, whether a link is up (one that came up and
 * closed again at once — a peer whose side had not seen the cut yet —
 * ends nothing), or the time is up. */
static gboolean
on_pace_check (gpointer user_data)
{
  RlxCoordinator *self = user_data;

  if (g_get_monotonic_time () - self->paced_since >= (gint64) RLX_CUT_PACE_MS * 1000)
    {
      self->pace_id = 0;
      rlx_coordinator_pace_stop (self, "its cohort was not found again in time: it trains at "
                                       "its own speed");
      return G_SOURCE_REMOVE;
    }
  if (linked_to_any (self, NULL))
    {
      self->pace_id = 0;
      rlx_coordinator_pace_stop (self, "a link is up");
      return G_SOURCE_REMOVE;
    }
  return G_SOURCE_CONTINUE;
}

void
rlx_coordinator_pace_stop (RlxCoordinator *self, const char *why)
{
  gint64 since = self->paced_since;

  if (since == 0)
    return;
  self->paced_since = 0;
  g_clear_handle_id (&self->pace_id, rlx_source_remove);
  if (self->worker)
    rlx_worker_set_pace_us (self->worker, 0);
  if (why)
    g_message ("%s: no longer paced (after %.1f s): %s", self->node_id,
               (g_get_monotonic_time () - since) / 1e6, why);
}

void
rlx_coordinator_pace_lost (RlxCoordinator *self, const char *id, const char *reason)
{
  gint64 now = g_get_monotonic_time ();
  gint64 window = ((gint64) rlx_peer_set_get_timeout (self->peers) + 1000) * 1000;
  double us;

  if (g_str_has_prefix (reason, "bye"))
    return;
  self->lost_at[1] = self->lost_at[0];
  self->lost_at[0] = now;
  if (self->paced_since != 0 || self->lost_at[1] == 0 || now - self->lost_at[1] > window)
    return;
  if (linked_to_any (self, id))
    return;
  us = role (self) == RLX_ROLE_LEADER ? rlx_leader_round_us (self->leader)
                                      : self->ctx.member_round_us;
  if (!(us > 0) || self->worker == NULL)
    return;
  us = MIN (us, 100000.0);
  self->paced_since = now;
  self->pace_id = rlx_timeout_add (500, on_pace_check, self);
  rlx_worker_set_pace_us (self->worker, (guint64) us);
  g_message ("%s: cut off from its group at once (%s, and another link %.1f s before): it "
             "trains at the group's pace, one step per %.1f ms, until it finds a peer again "
             "(%u s at most)", self->node_id, reason, (now - self->lost_at[1]) / 1e6, us / 1000.0,
             RLX_CUT_PACE_MS / 1000);
}
