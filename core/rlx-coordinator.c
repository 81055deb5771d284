/* rlx-coordinator.c — one node of a cohort: the façade over core/cohort/
 *
 * The protocol is docs/PROTOCOL.md; the pieces it is made of:
 *
 *   RlxPeerSet     links, hello, liveness, heartbeats     (cohort/rlx-peer-set)
 *   RlxMsg         typed messages, parsed once            (cohort/rlx-msg)
 *   RlxLeadership  role, term, leader, members, the rules (cohort/rlx-leadership)
 *   RlxLeader      the leader's rounds, commits, admission (cohort/rlx-leader)
 *   RlxFollower    the member's steps, its snapshot in    (cohort/rlx-follower)
 *   RlxLineage     our history across merges              (cohort/rlx-lineage)
 *   RlxRound       the leader's round: slots, deadline    (cohort/rlx-round)
 *   RlxCommits     commits waiting for acknowledgements   (cohort/rlx-commits)
 *   RlxReplica     step, hash, history; reads and loads   (cohort/rlx-replica)
 *   RlxComputeQueue the rank's compute worker and its jobs (cohort/rlx-compute-queue)
 *   RlxRoundStats  what "done" says about the rounds      (cohort/rlx-round-stats)
 *   RlxSnapshots   snapshots out                          (cohort/rlx-cohort-context)
 *   RlxCheckpointer the checkpoint file                   (cohort/rlx-checkpointer)
 *   RlxRoster      the roster the GUI shows               (cohort/rlx-roster)
 *
 * This file is the GObject, its public API, properties and signals, the
 * routing of messages, peer events and compute results, the ops the role
 * objects may ask for (RlxCohortOps), and finishing; the flows live beside
 * it (rlx-coordinator-private.h lists them). The main loop only
 * routes frames and makes the protocol's decisions: the parameters live in
 * the rank's backend (in device memory on a GPU rank) and every pass over
 * them runs on the compute worker, in the order the protocol queues it.
 *
 * Per round, as a member: a `step` frame arrives (the commit of step c and
 * the assignment of c+1); the worker applies the update, computes the
 * gradient of the slice straight into a `grad` frame at this node's
 * precision and hashes the parameters; then `ack` to the leader, the
 * "step" event, the `grad`. As the leader: the worker computes its own
 * gradient into the backend's round (round_own) and adds each member's
 * bucket as it arrives (round_add); when the round is complete the backend
 * makes the update, writes its codes into the next `step` frame, applies it
 * and hashes (round_finish), with the leader's next slice computed right
 * behind on a GPU; the leader sends the frame and reports step c once
 * every member has acknowledged it.
 *
 * Just over 1,000 lines: the GObject's API, properties and construction and
 * the routing of every peer event are one façade; what could move out (the
 * flows, the roles' work) already lives beside it or in core/cohort/.
 */
#include "rlx-config.h"
#include "core/rlx-sources.h"
#include "rlx-coordinator-private.h"
#include "core/p2p/rlx-busy-poll.h"
#include "core/cohort/rlx-outer.h"
#include "core/cohort/rlx-norm-guard.h"
#include "core/cohort/rlx-round.h"

#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

G_DEFINE_QUARK (rlx - coordinator - error - quark, rlx_coordinator_error)

G_STATIC_ASSERT (RLX_PROTOCOL_VERSION == RLX_MSG_PROTOCOL_VERSION);

G_DEFINE_FINAL_TYPE (RlxCoordinator, rlx_coordinator, G_TYPE_OBJECT)

static GParamSpec *props[N_PROPS];

enum { SIG_EVENT, SIG_FINISHED, SIG_DISCOVER, N_SIGNALS };
static guint signals[N_SIGNALS];

void
rlx_coordinator_notify (RlxCoordinator *self, guint prop)
{
  g_object_notify_by_pspec (G_OBJECT (self), props[prop]);
}

void
rlx_coordinator_emit_discover (RlxCoordinator *self)
{
  g_signal_emit (self, signals[SIG_DISCOVER], 0);
}

void
rlx_coordinator_emit_event (RlxCoordinator *self, RlxEvent *event)
{
  if (event->kind == RLX_EVENT_MERGED)
    rlx_coordinator_note_discarded (self, event->u.merged.to_step);
  g_signal_emit (self, signals[SIG_EVENT], 0, event);
  rlx_event_unref (event);
}

static void
on_peer_ready (RlxPeerSet *set, RlxPeer *p, RlxMsg *hello, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  RlxRole r = role (self);
  BUSY_BEGIN;

  if (self->unheard && p->id)
    g_hash_table_remove (self->unheard, p->id);
  if (p->id)
    {
      if (self->linked == NULL)
        self->linked = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
      g_hash_table_add (self->linked, g_strdup (p->id));
    }
  /* The leader we lost is back, or someone tells who leads now. */
  if (r == RLX_ROLE_MEMBER && rlx_coordinator_successor_check (self, p))
    goto out;
  /* Our leader says it is alone (it was cut off, and looks for its cohort
   * again): it leads nobody, and would wait for us as we wait for it. So
   * too the leader we join: it sends no snapshot any more (a joiner found
   * out only by its join retry, a second later, in test-alone-leader) —
   * unless one it sent is loading: the load ends in following it, and the
   * alone leader's heartbeats then end that (on_peer_state), where going
   * alone now and following it after would take the lead at the term the
   * alone node may found at (a second reader of f6728dd). */
  if ((r == RLX_ROLE_MEMBER || (r == RLX_ROLE_JOINING && !self->ctx.loading)) &&
      p->role == RLX_ROLE_ALONE && g_strcmp0 (p->id, rlx_leadership_get_leader (self->lead)) == 0)
    {
      g_autofree char *id = g_strdup (p->id);
      rlx_coordinator_leader_lost (self, id, "the leader is alone (it was cut off)");
      goto out;
    }
  /* A member that lost our leader links to us, the next in line, and
   * waits (its heartbeats will say nothing new). */
  if (rlx_coordinator_waits_for_us (self, p))
    rlx_coordinator_successor_due (self);
  if ((r == RLX_ROLE_LEADER || r == RLX_ROLE_MEMBER) &&
      (p->role == RLX_ROLE_ALONE || p->role == RLX_ROLE_JOINING))
    /* It may have said hello before we founded or joined: tell it who
     * leads, so it asks to join. */
    rlx_cohort_send_leader (&self->ctx, p);
  if (r == RLX_ROLE_ALONE && peer_leader (p) &&
      (p->role == RLX_ROLE_LEADER || rlx_peer_set_lookup (self->peers, peer_leader (p))))
    rlx_coordinator_join_met_leader (self, peer_leader (p), p->term);
  else if (r == RLX_ROLE_LEADER && p->role == RLX_ROLE_LEADER)
    {
      /* Two groups of one cohort met (founded apart, or a split healed).
       * Both sides judge with the hellos they exchanged, so they agree. */
      rlx_coordinator_merge_with (self, p, p->sent_members ? p->sent_members : members (self)->len,
                                  p->sent_noted ? p->sent_step : applied (self));
    }
  else if (r == RLX_ROLE_JOINING && g_strcmp0 (rlx_leadership_get_leader (self->lead), p->id) == 0)
    rlx_coordinator_send_join (self, "join");
  if (rlx_leadership_has_member (self->lead, p->id))
    rlx_coordinator_roster_sync (self);
  if (self->claim_doubted && role (self) == RLX_ROLE_LEADER)
    rlx_coordinator_recheck_claim (self);
  rlx_coordinator_auto_peer_ready (self, p);
out:
  BUSY_END;
}

/* A snapshot, if it is of our term (or newer, or of another fork) and of our model's size: a
 * member's to the leader, the leader's to a member. */
static void
on_snapshot_msg (RlxCoordinator *self, RlxPeer *p, RlxMsg *m)
{
  RlxMsgSnapshot *s = &m->u.snapshot;
  guint64 seed;

  /* (an older term of our own fork: terms of another say nothing) */
  if ((s->term < rlx_leadership_get_term (self->lead) &&
       rlx_lineage_same_fork (self->lineage, &s->lineage)) ||
      s->params.n != self->n)
    return;
  if (!g_ascii_string_to_unsigned (s->seed, 10, 0, G_MAXUINT64, &seed, NULL))
    return;
  if (rlx_leadership_is_leader (self->lead))
    rlx_leader_on_snapshot (self->leader, p, m);
  else
    rlx_follower_on_snapshot (self->follower, p, m, seed);
}

static void
on_message (RlxPeerSet *set, RlxPeer *p, RlxMsg *m, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  BUSY_BEGIN;

  if (role (self) == RLX_ROLE_STOPPED)
    goto out;
  switch (m->kind)
    {
    case RLX_MSG_STEP:
      rlx_follower_on_step (self->follower, p, m);
      break;
    case RLX_MSG_GRAD:
      if (rlx_leadership_is_leader (self->lead))
        rlx_leader_on_grad (self->leader, p, m);
      break;
    case RLX_MSG_ACK:
      if (rlx_leadership_is_leader (self->lead))
        rlx_leader_on_ack (self->leader, p, &m->u.ack);
      break;
    case RLX_MSG_SNAPSHOT:
      on_snapshot_msg (self, p, m);
      break;
    case RLX_MSG_JOIN:
      if (rlx_leadership_is_leader (self->lead) && !self->finished)
        rlx_leader_admit (self->leader, p, &m->u.join);
      break;
    case RLX_MSG_LEADER:
      rlx_coordinator_on_leader_msg (self, p, &m->u.leader);
      break;
    case RLX_MSG_REJECT:
      {
        RlxEvent *e = rlx_event_new (RLX_EVENT_REJECTED);
        e->u.rejected.node = g_strdup (self->node_id);
        e->u.rejected.has_step = TRUE;
        e->u.rejected.step = m->u.reject.step;
        e->u.rejected.reason = g_strdup (m->u.reject.reason);
        e->u.rejected.by = g_strdup (p->id);
        rlx_coordinator_emit_event (self, e);
        break;
      }
    case RLX_MSG_HELLO:
    case RLX_MSG_REFUSE:
    case RLX_MSG_HEARTBEAT:
    case RLX_MSG_BYE:
    case RLX_MSG_N_KINDS:
    default:
      break;
    }
out:
  BUSY_END;
}

/* A leader's member @id leaves its group (@reason, for member-left). */
void
rlx_coordinator_drop_member (RlxCoordinator *self, const char *id, const char *reason)
{
  g_autofree char *keep = g_strdup (id);

  if (!rlx_leadership_remove_member (self->lead, keep))
    return;
  rlx_coordinator_emit_member (self, RLX_EVENT_MEMBER_LEFT, keep, reason);
  rlx_coordinator_roster_sync (self);
  rlx_leader_member_lost (self->leader, keep);
}

/* Why @p, a member of the group this node leads, is not: its heartbeats
 * say it follows another leader, or leads a group of its own, at a term no
 * older than ours (or in another fork) — so not on its way here through a
 * failover (a member still following the leader we took over from says an
 * older term). NULL: nothing says so. A joiner that asked two leaders and
 * took the other's snapshot was counted by both, and the one it did not
 * follow claimed it in every merge (issue 29, item 13: the 60-minute run's
 * two leaders to the end). */
static char *
follows_elsewhere (RlxCoordinator *self, RlxPeer *p)
{
  guint64 term = rlx_leadership_get_term (self->lead);
  gboolean other = !rlx_lineage_same_fork (self->lineage, &p->hb_lineage);

  if (!p->hb_state || !(other || p->hb_term >= term))
    return NULL;
  if (p->hb_role == RLX_ROLE_MEMBER && p->hb_leader && !is_self (self, p->hb_leader))
    return g_strdup_printf ("follows %s (term %" G_GUINT64_FORMAT "), not this node",
                            p->hb_leader, p->hb_term);
  if (p->hb_role == RLX_ROLE_LEADER && !is_self (self, p->hb_leader))
    return g_strdup_printf ("leads a group of its own (%u member%s, term %" G_GUINT64_FORMAT ")",
                            p->hb_members, p->hb_members == 1 ? "" : "s", p->hb_term);
  return NULL;
}

/* @p's heartbeat says it stands elsewhere than before. */
static void
on_peer_state (RlxPeerSet *set, RlxPeer *p, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  BUSY_BEGIN;

  if (role (self) == RLX_ROLE_LEADER && p->id && !is_self (self, p->id) &&
      rlx_leadership_has_member (self->lead, p->id))
    {
      g_autofree char *why = follows_elsewhere (self, p);

      if (why)
        rlx_coordinator_drop_member (self, p->id, why);
    }
  else if ((role (self) == RLX_ROLE_MEMBER ||
            (role (self) == RLX_ROLE_JOINING && !self->ctx.loading)) && p->id &&
           p->hb_state && p->hb_role == RLX_ROLE_ALONE &&
           g_strcmp0 (p->id, rlx_leadership_get_leader (self->lead)) == 0)
    {
      /* Our leader's heartbeats say it is alone: it rejoins (it stood
       * still, and was cut off), and leads nobody. Its hello saying so may
       * have come while we were loading its snapshot, sent just before it
       * found out (on_peer_ready judges it only as a member, or as a joiner
       * that is not loading a snapshot): the
       * chaos run at 35550f8 stood 3.7 s still so, its leader waiting for
       * us as we followed it. A joiner waits for a snapshot it no longer
       * sends (rlx_snapshots_send_around): it is alone too, and the two
       * meet as alone nodes do (leader_lost); one loading a snapshot of it
       * follows it first, and is a member when the next heartbeat comes. */
      g_autofree char *id = g_strdup (p->id);
      rlx_coordinator_leader_lost (self, id, "its heartbeats say the leader is alone (it was "
                                             "cut off)");
    }
  else if (rlx_coordinator_waits_for_us (self, p))
    /* a member lost our leader and waits for this node to take over */
    rlx_coordinator_successor_due (self);
  rlx_coordinator_groups_changed (self);
  BUSY_END;
}

static void
on_peer_lost (RlxPeerSet *set, RlxPeer *p, const char *reason, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  g_autofree char *id = g_strdup (p->id);
  gboolean member = rlx_leadership_has_member (self->lead, id);
  RlxRole r = role (self);
  BUSY_BEGIN;

  rlx_coordinator_auto_peer_lost (self, id);

  if (r == RLX_ROLE_STOPPED)
    goto out;
  rlx_coordinator_pace_lost (self, id, reason);
  /* A peer of our cohort closed on us right after our own loop stood still
   * past the heartbeat timeout: the cohort timed *us* out and went on
   * without us. Taking over or carrying on would split it: rejoin. So too
   * when a frame read right after the stall (one the leader sent before it
   * timed us out, a step past one dropped for us) already had us ask for a
   * snapshot (joining): looking for the cohort afresh, as leader_lost does
   * then, would say nothing of the cut-off and might found over it. */
  if (member && (r == RLX_ROLE_MEMBER || r == RLX_ROLE_LEADER || r == RLX_ROLE_JOINING) &&
      rlx_peer_set_stalled_recently (self->peers) && !g_str_has_prefix (reason, "bye"))
    {
      g_autofree char *why = g_strdup_printf ("%s closed its link (%s)", id, reason);
      rlx_coordinator_cut_off (self, why);
      goto out;
    }
  if (r == RLX_ROLE_LEADER)
    rlx_coordinator_drop_member (self, id, reason);
  else if (g_strcmp0 (id, rlx_leadership_get_leader (self->lead)) == 0)
    rlx_coordinator_leader_lost (self, id, reason);
  else if (member)
    rlx_coordinator_roster_sync (self);
out:
  BUSY_END;
}

static void
on_refused (RlxPeerSet *set, const char *node, const char *reason, const char *by, RlxMsg *hello,
            RlxPeer *peer, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  RlxEvent *e = rlx_event_new (RLX_EVENT_REFUSED);

  e->u.refused.node = g_strdup (node);
  e->u.refused.reason = g_strdup (reason);
  e->u.refused.by = g_strdup (by);
  rlx_coordinator_emit_event (self, e);
  /* Refused by (or refusing) a cohort that exists: this node cannot take
   * part. */
  if (hello && (hello->u.hello.role == RLX_ROLE_LEADER || hello->u.hello.role == RLX_ROLE_MEMBER) &&
      (role (self) == RLX_ROLE_ALONE || role (self) == RLX_ROLE_JOINING))
    {
      g_autofree char *msg = g_strdup_printf ("cannot join cohort %s: %s", self->cohort, reason);
      rlx_coordinator_finish (self, FALSE, msg);
    }
  else if (hello == NULL && (role (self) == RLX_ROLE_ALONE || role (self) == RLX_ROLE_JOINING))
    {
      RlxPeer *p = NULL;
      for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
        if (g_strcmp0 (rlx_peer_set_nth (self->peers, i)->id, by) == 0)
          p = rlx_peer_set_nth (self->peers, i);
      if (p && (p->role == RLX_ROLE_LEADER || p->role == RLX_ROLE_MEMBER))
        {
          g_autofree char *msg
              = g_strdup_printf ("cannot join cohort %s: %s", self->cohort, reason);
          rlx_coordinator_finish (self, FALSE, msg);
        }
    }
  else if (role (self) == RLX_ROLE_LEADER && rlx_coordinator_refusal_yields (self, peer, hello))
    {
      /* We founded a group of our own (say the discovery window passed
       * before the cohort's hello came) and met the cohort proper, which
       * cannot take us: the group the merge rule would keep goes on, ours
       * ends, as a joiner refused would. */
      g_autofree char *msg
          = g_strdup_printf ("cannot join cohort %s: %s (its group led by %s is kept over this "
                             "node's)", self->cohort, reason,
                             hello ? hello->node : peer->id);
      rlx_coordinator_finish (self, FALSE, msg);
    }
}

static void
on_dropped (RlxPeerSet *set, RlxPeer *p, const char *klass, guint64 total, const char *reason,
            gpointer user_data)
{
  RlxCoordinator *self = user_data;
  RlxEvent *e = rlx_event_new (RLX_EVENT_DROPPED);

  e->u.dropped.node = g_strdup (p->id ? p->id : rlx_link_get_peer (p->link));
  e->u.dropped.class = g_strdup (klass);
  e->u.dropped.total = total;
  e->u.dropped.reason = g_strdup (reason);
  rlx_coordinator_emit_event (self, e);
}

static void
on_send_failed (RlxPeerSet *set, RlxPeer *p, const char *reason, gpointer user_data)
{
  rlx_coordinator_emit_simple (user_data, RLX_EVENT_SEND_FAILED,
                               p->id ? p->id : rlx_link_get_peer (p->link), reason);
}

static void
on_bad_frame (RlxPeerSet *set, RlxPeer *p, const char *message, gpointer user_data)
{
  rlx_coordinator_emit_simple (user_data, RLX_EVENT_ERROR, p->id ? p->id : rlx_link_get_peer (p->link),
                               message);
}

/* The dynamic part of our hello (and heartbeats). */
static void
fill_hello (RlxMsgHello *h, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  RlxBackend *b = rlx_worker_backend (self->worker);
  RlxRole r = role (self);

  h->backend = g_strdup (rlx_backend_name (b));
  h->device = g_strdup (rlx_backend_device (b));
  h->fallback = g_strdup (rlx_backend_fallback (b));
  h->host = g_strdup (self->host);
  h->precision = self->ctx.precision;
  h->batch = self->ctx.batch;
  h->max_batch = rlx_backend_max_batch (b);
  h->role = r;
  h->leader = g_strdup (rlx_leadership_get_leader (self->lead));
  h->term = rlx_leadership_get_term (self->lead);
  h->step = applied (self);
  h->members = (r == RLX_ROLE_LEADER || r == RLX_ROLE_MEMBER) ? members (self)->len : 0;
  if (r == RLX_ROLE_MEMBER && self->ctx.faults.claim_follows[0])
    {
      g_free (h->leader);
      h->leader = g_strdup (self->ctx.faults.claim_follows);
    }
  if (r == RLX_ROLE_LEADER && self->ctx.faults.claim_members)
    h->members = self->ctx.faults.claim_members;
  if (r == RLX_ROLE_LEADER && self->ctx.faults.claim_step)
    h->step = self->ctx.faults.claim_step;
  h->checkpoint = self->resume.params ? self->resume.step : 0;
  h->join_only = self->join_only;
  h->lineage = *rlx_lineage_id (self->lineage);
}

void
rlx_coordinator_note_backend (RlxCoordinator *self, guint64 host_bytes, guint64 ahead,
                              guint64 update_ahead)
{
  rlx_round_stats_backend (self->stats, host_bytes, ahead, update_ahead,
                           rlx_worker_wait_us (self->worker));
}

/* "done" and ::finished, once the parameters are read (rlx_coordinator_finish). */
static void
finish_report (RlxCoordinator *self)
{
  const RlxWireCounters *t = rlx_peer_set_get_totals (self->peers);
  gboolean success = self->finish_success;
  RlxEvent *e = rlx_event_new (RLX_EVENT_DONE);
  RlxEventDone *d = &e->u.done;

  d->node = g_strdup (self->node_id);
  d->success = success;
  d->message = g_strdup (self->finish_message);
  d->step = applied (self);
  d->hash = rlx_replica_get_hash (self->replica);
  d->loss = rlx_replica_get_loss (self->replica);
  d->late = rlx_round_stats_get_late (self->stats);
  d->rejected = rlx_round_stats_get_rejected (self->stats);
  /* whether its threads polled instead of sleeping while it trained
   * (RLX_BUSY_POLL) */
  d->busy_poll = self->busy_poll_used;
  rlx_round_stats_write (self->stats, d);
  d->bytes_tx = t->tx_bytes;
  d->bytes_rx = t->rx_bytes;
  d->bytes_f32 = t->tx_f32_bytes + t->rx_f32_bytes;
  rlx_coordinator_emit_event (self, e);
  g_signal_emit (self, signals[SIG_FINISHED], 0, success, self->finish_message);
}

static void
on_final_read (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  RlxCoordinator *self = user_data;

  self->finish_reading = FALSE;
  finish_report (self);
}

/* RLX_BUSY_POLL: "0" never, "1" always, unset or "auto" for a rank on a
 * hardware GPU with at least 8 cores on the host (a rank's main loop, link
 * I/O thread and worker each keep a core busy while it trains). */
static int
busy_poll_policy (RlxBackend *backend)
{
  const char *v = g_getenv ("RLX_BUSY_POLL");

  if (v != NULL && (g_str_equal (v, "0") || g_ascii_strcasecmp (v, "off") == 0))
    return -1;
  if (v != NULL && (g_str_equal (v, "1") || g_ascii_strcasecmp (v, "on") == 0))
    return 1;
  if (v != NULL && *v != '\0' && g_ascii_strcasecmp (v, "auto") != 0)
    g_warning ("RLX_BUSY_POLL=%s is not 0, 1 or auto; using auto", v);
  return rlx_backend_is_hardware_gpu (backend) && g_get_num_processors () >= 8 ? 1 : -1;
}

void
rlx_coordinator_busy_poll_begin (RlxCoordinator *self)
{
  g_autoptr(GMainContext) context = NULL;

  if (self->busy_poll_held || self->busy_poll < 0 || self->finished)
    return;
  self->busy_poll_held = TRUE;
  self->busy_poll_used = TRUE;
  context = g_main_context_ref_thread_default ();
  rlx_busy_poll_attach (context);
  rlx_busy_poll_hold ();
}

void
rlx_coordinator_busy_poll_end (RlxCoordinator *self)
{
  if (!self->busy_poll_held)
    return;
  self->busy_poll_held = FALSE;
  rlx_busy_poll_release ();
}

void
rlx_coordinator_finish (RlxCoordinator *self, gboolean success, const char *message)
{
  if (self->finished)
    return;
  rlx_coordinator_busy_poll_end (self);
  self->finished = TRUE;
  self->finish_success = success;
  self->finish_message = g_strdup (message);
  g_clear_handle_id (&self->found_id, rlx_source_remove);
  g_clear_handle_id (&self->join_id, rlx_source_remove);
  g_clear_handle_id (&self->successor_id, rlx_source_remove);
  g_clear_handle_id (&self->due_id, rlx_source_remove);
  g_clear_handle_id (&self->outgrown_id, rlx_source_remove);
  g_clear_handle_id (&self->look_id, rlx_source_remove);
  rlx_leader_abandon_round (self->leader);
  rlx_compute_queue_drop_assignments (self->queue);
  /* The parameters as they end, for rlx_coordinator_get_params (read after
   * everything queued on the worker), unless the last read holds them. */
  if (rlx_replica_get_params (self->replica) == NULL
      || rlx_replica_get_params_step (self->replica) != applied (self)
      || rlx_replica_busy (self->replica) || rlx_compute_queue_member_steps (self->queue) > 0
      || rlx_compute_queue_finishes (self->queue) > 0)
    {
      self->finish_reading = TRUE;
      rlx_replica_read (self->replica, NULL, NULL, NULL, on_final_read, self);
      return;
    }
  finish_report (self);
}

static gboolean
on_leave_poll (gpointer user_data)
{
  RlxCoordinator *self = user_data;
  gboolean flushed = !rlx_checkpointer_busy (self->ckpt) && !rlx_replica_busy (self->replica) &&
                     !self->finish_reading;
  GCallback cb;

  for (guint i = 0; flushed && i < rlx_peer_set_size (self->peers); i++)
    if (!rlx_peer_set_is_flushed (self->peers, rlx_peer_set_nth (self->peers, i)))
      flushed = FALSE;
  if (!flushed && g_get_monotonic_time () < self->leave_deadline)
    return G_SOURCE_CONTINUE;
  /* No deadline for the evaluations (cancelled, each ends within a chunk
   * of samples): whoever gets the leave callback may exit the process,
   * whose exit handlers unmap OpenBLAS's buffers under a running one. */
  if (self->evaluations > 0)
    return G_SOURCE_CONTINUE;
  self->leave_id = 0;
  cb = self->leave_cb;
  self->leave_cb = NULL;
  if (cb)
    ((void (*) (gpointer)) cb) (self->leave_data);
  return G_SOURCE_REMOVE;
}

void
rlx_coordinator_leave (RlxCoordinator *self, const char *reason, GCallback callback,
                       gpointer user_data)
{
  RlxMsg m;

  g_return_if_fail (RLX_IS_COORDINATOR (self));

  /* A leader that leaves writes what it holds: the cohort restarted later
   * resumes every step it committed, not the last periodic checkpoint. */
  if (!self->finished && applied (self) > 0)
    rlx_coordinator_maybe_checkpoint (self, 0, TRUE);
  if (!self->finished)
    rlx_coordinator_finish (self, TRUE, reason ? reason : "left");
  rlx_msg_init (&m, RLX_MSG_BYE, self->node_id);
  m.u.bye.reason = g_strdup (reason ? reason : "left");
  rlx_peer_set_broadcast (self->peers, &m);
  rlx_msg_clear (&m);
  rlx_coordinator_transition (self, RLX_ROLE_STOPPED, rlx_leadership_get_leader (self->lead),
                              rlx_leadership_get_term (self->lead), NULL);
  rlx_peer_set_stop (self->peers);
  g_cancellable_cancel (self->eval_cancel);
  self->leave_cb = callback;
  self->leave_data = user_data;
  /* Wait for the bye (and a final checkpoint) to reach the wire. */
  self->leave_deadline = g_get_monotonic_time () +
                         (rlx_checkpointer_busy (self->ckpt) || self->finish_reading ? 10000000 : 1000000);
  if (self->leave_id == 0)
    self->leave_id = rlx_timeout_add (5, on_leave_poll, self);
}

void
rlx_coordinator_fail (RlxCoordinator *self, const char *message)
{
  g_return_if_fail (RLX_IS_COORDINATOR (self));
  rlx_coordinator_finish (self, FALSE, message);
}

static void
rlx_coordinator_dispose (GObject *object)
{
  RlxCoordinator *self = RLX_COORDINATOR (object);

  g_cancellable_cancel (self->cancellable);
  g_cancellable_cancel (self->eval_cancel);
  rlx_coordinator_busy_poll_end (self);
  g_clear_handle_id (&self->found_id, rlx_source_remove);
  g_clear_handle_id (&self->join_id, rlx_source_remove);
  g_clear_handle_id (&self->successor_id, rlx_source_remove);
  g_clear_handle_id (&self->due_id, rlx_source_remove);
  g_clear_handle_id (&self->look_id, rlx_source_remove);
  g_clear_handle_id (&self->leave_id, rlx_source_remove);
  g_clear_handle_id (&self->pace_id, rlx_source_remove);
  /* No worker callback after this (the worker thread is joined). */
  g_clear_pointer (&self->queue, rlx_compute_queue_free);
  self->worker = NULL;
  if (self->peers)
    g_signal_handlers_disconnect_by_data (self->peers, self);
  g_clear_pointer (&self->leader, rlx_leader_free);
  if (self->ckpt)
    g_signal_handlers_disconnect_by_data (self->ckpt, self);
  if (self->replica)
    rlx_replica_cancel (self->replica);
  g_clear_pointer (&self->follower, rlx_follower_free);
  /* the link estimates hold the peers' links */
  g_clear_pointer (&self->autosync, rlx_sync_auto_free);
  g_clear_object (&self->peers);
  g_clear_object (&self->ckpt);
  g_clear_object (&self->replica);
  g_clear_object (&self->roster);
  G_OBJECT_CLASS (rlx_coordinator_parent_class)->dispose (object);
}

static void
rlx_coordinator_finalize (GObject *object)
{
  RlxCoordinator *self = RLX_COORDINATOR (object);

  g_clear_pointer (&self->snapshots, rlx_snapshots_free);
  g_clear_pointer (&self->stats, rlx_round_stats_free);
  g_clear_pointer (&self->ctx.sync, rlx_sync_state_free);
  g_clear_pointer (&self->links_text, g_free);
  g_clear_pointer (&self->claim_doubted, g_free);
  g_clear_pointer (&self->outgrown_by, g_free);
  g_clear_pointer (&self->answered, g_free);
  g_clear_object (&self->lead);
  g_clear_object (&self->cancellable);
  g_clear_object (&self->eval_cancel);
  g_clear_pointer (&self->dataset, rlx_dataset_unref);
  g_free (self->resume.params);
  g_free (self->resume.momentum);
  g_clear_error (&self->checkpoint_error);
  g_free (self->cohort);
  g_free (self->node_id);
  g_free (self->host);
  g_clear_pointer (&self->lineage, rlx_lineage_free);
  g_strfreev (self->silent);
  g_free (self->found_blocked_why);
  g_clear_pointer (&self->unheard, g_hash_table_unref);
  g_clear_pointer (&self->linked, g_hash_table_unref);
  g_clear_pointer (&self->behind, g_hash_table_unref);
  rlx_coordinator_forget_superseded (self);
  g_free (self->finish_message);
  G_OBJECT_CLASS (rlx_coordinator_parent_class)->finalize (object);
}

static void
rlx_coordinator_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  RlxCoordinator *self = RLX_COORDINATOR (object);

  switch (id)
    {
    case PROP_NODE_ID: g_value_set_string (value, self->node_id); break;
    case PROP_ROLE: g_value_set_string (value, rlx_coordinator_get_role (self)); break;
    case PROP_LEADER: g_value_set_string (value, rlx_coordinator_get_leader (self)); break;
    case PROP_TERM: g_value_set_uint64 (value, rlx_coordinator_get_term (self)); break;
    case PROP_STEP: g_value_set_uint64 (value, rlx_coordinator_get_step (self)); break;
    case PROP_LOSS: g_value_set_double (value, rlx_coordinator_get_loss (self)); break;
    case PROP_MEMBERS: g_value_set_uint (value, members (self)->len); break;
    case PROP_BYTES_TX: g_value_set_uint64 (value, rlx_coordinator_get_bytes_tx (self)); break;
    case PROP_BYTES_RX: g_value_set_uint64 (value, rlx_coordinator_get_bytes_rx (self)); break;
    case PROP_BYTES_F32: g_value_set_uint64 (value, rlx_coordinator_get_bytes_f32 (self)); break;
    case PROP_ROSTER: g_value_set_object (value, self->roster); break;
    case PROP_COHORT: g_value_set_string (value, self->cohort); break;
    case PROP_PRECISION:
      g_value_set_string (value, rlx_precision_to_string (self->ctx.precision));
      break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_coordinator_set_property (GObject *object, guint id, const GValue *value, GParamSpec *pspec)
{
  RlxCoordinator *self = RLX_COORDINATOR (object);
  RlxPrecision p;

  switch (id)
    {
    case PROP_PRECISION:
      if (rlx_precision_from_string (g_value_get_string (value), &p, NULL))
        rlx_coordinator_set_precision (self, p);
      else
        g_warning ("unknown wire precision '%s'", g_value_get_string (value));
      break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_coordinator_class_init (RlxCoordinatorClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags f = G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;

  object_class->dispose = rlx_coordinator_dispose;
  object_class->finalize = rlx_coordinator_finalize;
  object_class->get_property = rlx_coordinator_get_property;
  object_class->set_property = rlx_coordinator_set_property;

  props[PROP_NODE_ID] = g_param_spec_string ("node-id", NULL, NULL, NULL, f);
  props[PROP_ROLE] = g_param_spec_string ("role", NULL, NULL, NULL, f);
  props[PROP_LEADER] = g_param_spec_string ("leader", NULL, NULL, NULL, f);
  props[PROP_TERM] = g_param_spec_uint64 ("term", NULL, NULL, 0, G_MAXUINT64, 0, f);
  props[PROP_STEP] = g_param_spec_uint64 ("step", NULL, NULL, 0, G_MAXUINT64, 0, f);
  props[PROP_LOSS] = g_param_spec_double ("loss", NULL, NULL, -G_MAXDOUBLE, G_MAXDOUBLE, 0, f);
  props[PROP_MEMBERS] = g_param_spec_uint ("members", NULL, NULL, 0, G_MAXUINT, 0, f);
  props[PROP_BYTES_TX] = g_param_spec_uint64 ("bytes-tx", NULL, NULL, 0, G_MAXUINT64, 0, f);
  props[PROP_BYTES_RX] = g_param_spec_uint64 ("bytes-rx", NULL, NULL, 0, G_MAXUINT64, 0, f);
  props[PROP_BYTES_F32] = g_param_spec_uint64 ("bytes-f32", NULL, NULL, 0, G_MAXUINT64, 0, f);
  props[PROP_ROSTER] = g_param_spec_object ("roster", NULL, NULL, G_TYPE_LIST_MODEL, f);
  props[PROP_COHORT] = g_param_spec_string ("cohort", NULL, NULL, NULL, f);
  props[PROP_PRECISION] = g_param_spec_string ("precision", NULL, NULL, "f32",
                                               G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY |
                                               G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, props);

  signals[SIG_EVENT] = g_signal_new ("event", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                     0, NULL, NULL, NULL, G_TYPE_NONE, 1,
                                     RLX_TYPE_EVENT | G_SIGNAL_TYPE_STATIC_SCOPE);
  signals[SIG_FINISHED] = g_signal_new ("finished", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                        0, NULL, NULL, NULL, G_TYPE_NONE, 2,
                                        G_TYPE_BOOLEAN, G_TYPE_STRING);
  signals[SIG_DISCOVER] = g_signal_new ("discover", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                        0, NULL, NULL, NULL, G_TYPE_NONE, 0);
}

static void
rlx_coordinator_init (RlxCoordinator *self)
{
  self->roster = rlx_roster_new ();
  self->stats = rlx_round_stats_new ();
  self->cancellable = g_cancellable_new ();
  self->eval_cancel = g_cancellable_new ();
}

/* A member step's result goes to the follower; a round that waited for
 * its commit (this node took over meanwhile) may start then. */
static void
on_member_step_done (RlxMemberStep *ms, const GError *error, gpointer user_data)
{
  RlxCoordinator *self = user_data;
  BUSY_BEGIN;

  rlx_follower_stepped (self->follower, ms, error);
  rlx_leader_commit_applied (self->leader);
  BUSY_END;
}

/* The leader's compute results go to the leader. */
static void
on_leader_op_done (RlxLeaderOp *op, const GError *error, gpointer user_data)
{
  RlxCoordinator *self = user_data;

  rlx_leader_op_done (self->leader, op, error);
}

/* A snapshot went out (either role sends them): the leader notes it. */
static void
on_snapshot_sent (const char *to, guint64 step, guint64 hash, RlxEvent *event,
                  gpointer user_data)
{
  RlxCoordinator *self = user_data;

  rlx_leader_snapshot_sent (self->leader, to, step, hash, event);
}

RlxCoordinator *
rlx_coordinator_new (const RlxCoordinatorConfig *config, RlxWorker *worker, GError **error)
{
  g_autoptr(RlxCoordinator) self = NULL;
  g_autofree char *seed = NULL;
  g_autofree char *dir = NULL;
  RlxPeerSetIdentity me = { 0 };
  RlxBackend *backend;

  g_return_val_if_fail (config != NULL, NULL);
  g_return_val_if_fail (worker != NULL, NULL);

  self = g_object_new (RLX_TYPE_COORDINATOR, NULL);
  self->queue = rlx_compute_queue_new (worker, &(RlxComputeQueueCallbacks) {
                                         .member_done = on_member_step_done,
                                         .leader_done = on_leader_op_done,
                                       }, self);
  self->worker = worker;
  backend = rlx_worker_backend (worker);
  self->model = rlx_backend_model (backend);
  self->dataset = rlx_dataset_ref (rlx_backend_dataset (backend));
  self->n = self->model->n_params;
  self->busy_poll = busy_poll_policy (backend);

  if (config->cohort == NULL || *config->cohort == '\0')
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_INVALID,
                   "a cohort needs a name");
      return NULL;
    }
  if (config->batch == 0 || config->batch > rlx_backend_max_batch (backend))
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_INVALID,
                   "batch %u is outside 1..%u", config->batch, rlx_backend_max_batch (backend));
      return NULL;
    }
  if (!(config->lr > 0) || !isfinite (config->lr))
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_INVALID,
                   "learning rate %g is not a positive number", config->lr);
      return NULL;
    }
  {
    GError *bad = NULL;

    if (!rlx_sync_request_check (&config->sync, &bad))
      {
        g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_INVALID, "%s", bad->message);
        g_error_free (bad);
        return NULL;
      }
  }
  {
    double olr = config->outer_lr > 0 ? config->outer_lr : RLX_OUTER_DEFAULT_LR;
    double omom = config->outer_lr > 0 ? config->outer_momentum : RLX_OUTER_DEFAULT_MOMENTUM;
    GError *local = NULL;

    if (!rlx_outer_check_settings (olr, omom, &local))
      {
        g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_INVALID,
                     "outer optimizer: %s", local->message);
        g_error_free (local);
        return NULL;
      }
    self->ctx.sync = rlx_sync_state_new (&config->sync, olr, omom);
  }
  self->cohort = g_strdup (config->cohort);
  self->node_id = config->node_id ? g_strdup (config->node_id)
                                  : g_strdup_printf ("n%d-%08x", (int) getpid (), g_random_int ());
  if (strlen (self->node_id) > RLX_MSG_MAX_ID)
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_INVALID,
                   "node id '%s' is longer than %d bytes", self->node_id, RLX_MSG_MAX_ID);
      return NULL;
    }
  self->host = g_strdup (config->host ? config->host : g_get_host_name ());
  self->ctx.precision = config->precision;
  self->ctx.error_feedback = config->error_feedback;
  self->ctx.batch = config->batch;
  self->ctx.lr = config->lr;
  self->ctx.lr_fixed = config->inner_lr_fixed;
  self->ctx.steps = config->steps;
  self->checkpoint_every = config->checkpoint_every;
  self->ctx.wait_members = MAX (1u, config->wait_members);
  self->ctx.deadline_floor_ms = config->deadline_floor_ms ? config->deadline_floor_ms
                                                           : RLX_ROUND_DEADLINE_FLOOR_MS;
  self->ctx.max_norm_ratio = config->max_grad_norm_ratio == 0 ? RLX_NORM_GUARD_DEFAULT_RATIO
                             : config->max_grad_norm_ratio;
  self->evaluate_every = config->evaluate_every;
  self->evaluate_threads = CLAMP (config->evaluate_threads, 1, RLX_EVALUATE_THREADS_MAX);
  self->join_only = config->join_only;

  dir = config->checkpoint_dir
    ? g_strdup (config->checkpoint_dir)
    : g_build_filename (g_get_user_data_dir (), "rlx-cluster", self->cohort, NULL);
  self->ckpt = rlx_checkpointer_new (dir, self->cohort, self->model, self->dataset, error);
  if (self->ckpt == NULL)
    return NULL;
  /* Only a founder resumes; a node that joins a running cohort does not
   * care what the folder holds, so an unusable checkpoint only stops us
   * from founding (see rlx_coordinator_found). */
  rlx_checkpointer_load (self->ckpt, &self->resume, &self->checkpoint_error);
  g_signal_connect (self->ckpt, "written", G_CALLBACK (rlx_coordinator_on_checkpoint_written),
                    self);
  g_signal_connect (self->ckpt, "failed", G_CALLBACK (rlx_coordinator_on_checkpoint_failed), self);

  self->lead = rlx_leadership_new (self->node_id);
  self->lineage = rlx_lineage_new ();
  self->replica = rlx_replica_new (self->worker, config->seed);

  seed = g_strdup_printf ("%" G_GUINT64_FORMAT, config->seed);
  me.node_id = self->node_id;
  me.cohort = self->cohort;
  me.seed = seed;
  me.model = self->model->slug;
  me.dataset = rlx_dataset_slug (self->dataset);
  self->peers = rlx_peer_set_new (&me, fill_hello, self);
  rlx_peer_set_set_timeout (self->peers, config->heartbeat_timeout_ms ? config->heartbeat_timeout_ms
                                                                       : 3000);
  g_signal_connect (self->peers, "peer-ready", G_CALLBACK (on_peer_ready), self);
  g_signal_connect (self->peers, "message", G_CALLBACK (on_message), self);
  g_signal_connect (self->peers, "peer-state", G_CALLBACK (on_peer_state), self);
  g_signal_connect (self->peers, "peer-lost", G_CALLBACK (on_peer_lost), self);
  g_signal_connect (self->peers, "refused", G_CALLBACK (on_refused), self);
  g_signal_connect (self->peers, "dropped", G_CALLBACK (on_dropped), self);
  g_signal_connect (self->peers, "send-failed", G_CALLBACK (on_send_failed), self);
  g_signal_connect (self->peers, "bad-frame", G_CALLBACK (on_bad_frame), self);

  self->ctx.node_id = self->node_id;
  self->ctx.n = self->n;
  self->ctx.peers = self->peers;
  self->ctx.lead = self->lead;
  self->ctx.lineage = self->lineage;
  self->ctx.replica = self->replica;
  self->ctx.queue = self->queue;
  self->ctx.stats = self->stats;
  self->ctx.ops = &rlx_coordinator_cohort_ops;
  self->ctx.owner = self;
  self->snapshots = rlx_snapshots_new (&self->ctx, on_snapshot_sent, self);
  self->ctx.snapshots = self->snapshots;
  self->leader = rlx_leader_new (&self->ctx);
  self->follower = rlx_follower_new (&self->ctx);
  return g_steal_pointer (&self);
}

void
rlx_coordinator_rechoose_sync (RlxCoordinator *self, const RlxSyncInputs *inputs)
{
  g_return_if_fail (RLX_IS_COORDINATOR (self));

  if (!rlx_leadership_is_leader (self->lead))
    return;
  if (rlx_sync_state_rechoose (self->ctx.sync, inputs) && self->joined_reported)
    rlx_coordinator_emit_sync (self);
}

RlxSyncMode
rlx_coordinator_get_sync (RlxCoordinator *self, guint *h)
{
  g_return_val_if_fail (RLX_IS_COORDINATOR (self), RLX_SYNC_STEP);

  if (h)
    *h = rlx_sync_state_h (self->ctx.sync);
  return rlx_sync_state_mode (self->ctx.sync);
}

void
rlx_coordinator_set_fault_plan (RlxCoordinator *self, const RlxFaultPlan *plan)
{
  g_return_if_fail (RLX_IS_COORDINATOR (self));
  g_return_if_fail (!self->started);

  if (plan != NULL)
    self->ctx.faults = *plan;
  else
    memset (&self->ctx.faults, 0, sizeof self->ctx.faults);
}

void
rlx_coordinator_start (RlxCoordinator *self)
{
  g_return_if_fail (RLX_IS_COORDINATOR (self));
  g_return_if_fail (!self->started);

  self->started = TRUE;
  rlx_coordinator_start_found_timer (self, DISCOVERY_MS);
  rlx_peer_set_start (self->peers);
}

void
rlx_coordinator_add_link (RlxCoordinator *self, RlxLink *link)
{
  g_return_if_fail (RLX_IS_COORDINATOR (self));
  g_return_if_fail (RLX_IS_LINK (link));

  RlxPeer *p;

  if (role (self) == RLX_ROLE_STOPPED || rlx_link_is_closed (link))
    return;
  /* What our hello said, for the merge rule (both sides must judge with
   * the same numbers). */
  p = rlx_peer_set_add_link (self->peers, link);
  if (p != NULL)
    {
      p->sent_noted = TRUE;
      p->sent_members = role (self) == RLX_ROLE_LEADER ? members (self)->len : 0;
      p->sent_step = applied (self);
      if (role (self) == RLX_ROLE_LEADER && self->ctx.faults.claim_members)
        p->sent_members = self->ctx.faults.claim_members;   /* a liar judges by its lies */
      if (role (self) == RLX_ROLE_LEADER && self->ctx.faults.claim_step)
        p->sent_step = self->ctx.faults.claim_step;
    }
}

const char *rlx_coordinator_get_node_id (RlxCoordinator *self) { return self->node_id; }

const char *rlx_coordinator_get_role (RlxCoordinator *self) { return rlx_role_name (role (self)); }

const char *
rlx_coordinator_get_leader (RlxCoordinator *self)
{
  return rlx_leadership_get_leader (self->lead);
}

guint64
rlx_coordinator_get_term (RlxCoordinator *self)
{
  return rlx_leadership_get_term (self->lead);
}

guint64 rlx_coordinator_get_step (RlxCoordinator *self) { return applied (self); }

void
rlx_coordinator_get_position (RlxCoordinator *self, guint *epoch, guint *pos)
{
  *epoch = rlx_replica_get_epoch (self->replica);
  *pos = rlx_replica_get_pos (self->replica);
}

double
rlx_coordinator_get_loss (RlxCoordinator *self)
{
  return rlx_replica_get_loss (self->replica);
}

GListModel *
rlx_coordinator_get_roster (RlxCoordinator *self)
{
  return G_LIST_MODEL (self->roster);
}

const char *
rlx_coordinator_get_checkpoint_path (RlxCoordinator *self)
{
  return rlx_checkpointer_get_path (self->ckpt);
}

const char *rlx_coordinator_get_cohort (RlxCoordinator *self) { return self->cohort; }

RlxPrecision rlx_coordinator_get_precision (RlxCoordinator *self) { return self->ctx.precision; }

guint64
rlx_coordinator_get_bytes_tx (RlxCoordinator *self)
{
  return rlx_peer_set_get_totals (self->peers)->tx_bytes;
}

guint64
rlx_coordinator_get_bytes_rx (RlxCoordinator *self)
{
  return rlx_peer_set_get_totals (self->peers)->rx_bytes;
}

guint64
rlx_coordinator_get_bytes_f32 (RlxCoordinator *self)
{
  const RlxWireCounters *t = rlx_peer_set_get_totals (self->peers);
  return t->tx_f32_bytes + t->rx_f32_bytes;
}

void
rlx_coordinator_set_precision (RlxCoordinator *self, RlxPrecision precision)
{
  RlxEvent *e;

  g_return_if_fail (RLX_IS_COORDINATOR (self));
  g_return_if_fail ((guint) precision < RLX_PRECISION_COUNT);

  if (self->ctx.precision == precision)
    return;
  self->ctx.precision = precision;
  e = rlx_event_new (RLX_EVENT_PRECISION);
  e->u.precision.node = g_strdup (self->node_id);
  e->u.precision.precision = g_strdup (rlx_precision_to_string (precision));
  rlx_coordinator_emit_event (self, e);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_PRECISION]);
  rlx_coordinator_roster_sync (self);
}

void
rlx_coordinator_set_silent_peers (RlxCoordinator *self, const char *const *ids, gboolean complete)
{
  g_return_if_fail (RLX_IS_COORDINATOR (self));
  g_strfreev (self->silent);
  self->silent = g_strdupv ((char **) ids);
  self->silent_complete = complete;
}

const float *
rlx_coordinator_get_params (RlxCoordinator *self, gsize *n_params)
{
  g_return_val_if_fail (RLX_IS_COORDINATOR (self), NULL);
  if (n_params)
    *n_params = self->n;
  return rlx_replica_get_params (self->replica);
}
