/* rlx-coordinator-private.h — internals of the cohort engine
 *
 * Not part of the API: only core/ and tests/cohort include it.
 *
 * The coordinator is the façade of one node: it owns the pieces in
 * core/cohort/ and routes messages, peer events and compute results to
 * them. Its own code is split by flow, sharing the instance struct below:
 *
 *   rlx-coordinator.c          the façade: GObject, public API, properties
 *                              and signals, routing of messages, peer events
 *                              and compute results, the ops the role objects
 *                              may ask for, finishing and leaving
 *   rlx-coordinator-events.c   events, sending, the roster, checkpoints,
 *                              evaluation
 *   rlx-coordinator-roles.c    the one transition function, founding,
 *                              joining, failover, cutting off
 *   rlx-coordinator-merge.c    two groups meet: claims checked, the merge
 *                              rule, yielding, leader announcements
 *
 * and the objects it routes to (each over the narrow RlxCohortContext of
 * core/cohort/rlx-cohort-context.h, none calling another's flow):
 *
 *   cohort/rlx-leader.c        the leader: rounds, commits and
 *                              acknowledgements (cohort/rlx-commits.c),
 *                              admission, adopting a member's state
 *   cohort/rlx-follower.c      the member: step frames, the gradient to
 *                              the leader, the leader's snapshot in
 *   cohort/rlx-lineage.c       which history our steps belong to across
 *                              merges (the "merged" event)
 *   cohort/rlx-compute-queue.c the rank's compute worker and its jobs
 *   cohort/rlx-round-stats.c   what "done" says about the rounds
 *   cohort/rlx-cohort-context.c snapshots out, shared event helpers
 *   cohort/rlx-sync-state.c    the cohort's sync mode (step, outer:H, auto)
 *   cohort/rlx-outer-engine.c  the outer mode's work on the compute worker
 *
 * The batch split lives in core/cohort/rlx-split.c.
 *
 * Threads: everything here is the coordinator's thread's (its
 * thread-default main context); the worker thread sees only the compute
 * queue's jobs.
 */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>
#include <time.h>
#include "rlx-coordinator.h"
#include "rlx-coordinator-faults.h"
#include "core/cohort/rlx-checkpointer.h"
#include "core/cohort/rlx-cohort-context.h"
#include "core/cohort/rlx-leader.h"
#include "core/cohort/rlx-follower.h"
#include "core/cohort/rlx-compute-queue.h"
#include "core/cohort/rlx-leadership.h"
#include "core/cohort/rlx-msg.h"
#include "core/cohort/rlx-peer-set.h"
#include "core/cohort/rlx-replica.h"
#include "core/cohort/rlx-roster.h"
#include "core/cohort/rlx-round-stats.h"

G_BEGIN_DECLS

#include "core/cohort/rlx-split.h"
#include "core/cohort/rlx-sync-auto.h"

#define DISCOVERY_MS        250
#define FOUND_RETRY_MS      700
#define JOIN_RETRY_MS       1000
/* An alone node waits for peers that live but do not answer this many
 * heartbeat timeouts at most before it founds over them. */
#define FOUND_SILENT_CAP    10

struct _RlxCoordinator {
  GObject          parent_instance;

  /* configuration */
  char            *cohort, *node_id, *host;
  guint            checkpoint_every;
  gboolean         join_only;
  guint            evaluate_every;
  guint            evaluate_threads;  /* at once (>= 1) */
  /* what the role objects see (settings — precision, batch, lr, steps,
   * faults, … —, the pieces, shared facts, the ops below) */
  RlxCohortContext ctx;
  RlxLeader       *leader;          /* the leader's side (core/cohort/rlx-leader.h) */
  RlxFollower     *follower;        /* the member's side (core/cohort/rlx-follower.h) */

  RlxComputeQueue *queue;          /* the rank's work on its compute worker; owns it */
  RlxWorker       *worker;          /* the queue's (for the backend's facts, the replica) */
  const RlxModel  *model;
  RlxDataset      *dataset;
  gsize            n;

  /* the pieces */
  RlxPeerSet      *peers;
  RlxLeadership   *lead;
  RlxLineage      *lineage;
  RlxReplica      *replica;
  RlxSnapshots    *snapshots;
  RlxCheckpointer *ckpt;
  RlxRoster       *roster;
  gint64           roster_synced_at; /* monotonic µs of the last sync */

  /* the checkpoint found at start, for founding */
  RlxCheckpoint    resume;
  /* the history this node discarded in its merges: steps up to
   * discarded_to, the last reported at discarded_at (real time, µs). A
   * checkpoint written before then holding one of those steps is of it
   * (rlx_coordinator_note_discarded) */
  guint64          discarded_to;
  gint64           discarded_at;
  gboolean         resume_has_momentum; /* its outer momentum is on the worker */
  guint64          resume_momentum_hash;
  GError          *checkpoint_error;

  guint64          assigned_step[4];  /* this node's share of recent steps (step % 4) */
  guint            assigned_count[4];

  /* what "done" says about the rounds (core/cohort/rlx-round-stats.h) */
  RlxRoundStats   *stats;

  /* --sync auto (core/rlx-coordinator-auto.c): this node's links as measured,
   * and when auto chooses; the "links" event last said links_text */
  RlxSyncAuto     *autosync;
  guint64          autosync_term;    /* the term auto last chose in */
  char            *links_text;
  gint64           links_emitted_at;

  /* timers */
  guint            found_id, join_id;
  guint            look_id;         /* as a leader: looks for groups it has no link to */
  guint            found_waits;
  gboolean         waiting_reported;
  gint64           rejoin_until;    /* cut off: no founding before (monotonic µs) */
  gint64           lost_at[2];      /* the last two peers lost (monotonic µs; 0: none) */
  gint64           paced_since;     /* cut off at once: paced since (monotonic µs; 0: not) */
  guint            pace_id;         /* ... until this fires */
  gint64           members_looked;  /* when we last looked for members we had no link to */
  char           **silent;          /* peers alive but not answering (set_silent_peers) */
  gboolean         silent_complete; /* ... and every peer we could have is known */
  gint64           found_blocked_since; /* alone and kept from founding since (µs; 0: not) */
  char            *found_blocked_why;   /* what the "waiting" event said */
  GHashTable      *unheard;         /* cut off: peers of ours not heard from since (ids) */
  GHashTable      *linked;          /* ids of every peer that ever said hello on a link */
  /* ids of the members that acknowledged a commit of the term this node
   * leads or last led, while it holds its own state since (cleared as it
   * joins or follows anyone, or takes another term): none holds a
   * committed step this node lacks (rlx-coordinator-founding.c) */
  GHashTable      *behind;
  /* the leader this node took over from at a failover, and the members it
   * then knew that leader to have besides the two (NULL-terminated): once
   * each of those has acknowledged a commit of this node's term, the old
   * leader can have committed on since only alone, which the merge rule
   * discards against this term whether or not this node waits for it, so
   * it is behind too (rlx_coordinator_note_led_commit) */
  char            *superseded;
  char           **superseded_with;
  /* a member whose leader was lost waits for the successor to announce
   * itself (rlx_coordinator_leader_lost); bounded by successor_id */
  gboolean         awaiting_successor;
  guint            successor_id;
  /* this node is next in line, and a member waits for it to take over
   * while our leader's silence has not yet passed the timeout here
   * (rlx_coordinator_successor_due) */
  guint            due_id;
  /* a leader whose claim (members, steps) would have made our group yield
   * but could not be checked: reported once, checked again as peers say
   * hello (rlx_coordinator_merge_with; issue 29, item 9) */
  char            *claim_doubted;
  /* a leader outside our group whose checked group had more members than
   * ours (rlx_coordinator_groups_changed): yielded to only if it still has
   * a beat later (a count can be a heartbeat old) */
  char            *outgrown_by;
  gint64           outgrown_at;
  guint            outgrown_id;
  /* the last announcement of a leader of another group that ours is kept
   * against, answered with ours (once: each side answers each announcement
   * of the other once) */
  char            *answered;
  RlxMsgLineage    answered_lineage;
  guint64          answered_term;
  GCancellable    *cancellable;
  /* the test-accuracy measurements (evaluate_every) running on threads of
   * their own, and what stops them: a leave cancels it and completes only
   * once evaluations is 0 again (they use the dataset, the model and
   * OpenBLAS, which the process takes down at exit) */
  guint            evaluations;     /* running: at most evaluate_threads (maybe_evaluate) */
  guint            eval_reads;      /* reads of the parameters for the next ones pending */
  GCancellable    *eval_cancel;
  gboolean         joined_reported;
  gboolean         finish_after_checkpoint;
  gboolean         finished;
  int              busy_poll;      /* -1: never, 1: may (a hardware GPU, cores to spare) */
  gboolean         busy_poll_held; /* rlx_busy_poll_hold is ours (training on such a GPU) */
  gboolean         busy_poll_used; /* it was, at some time (the "done" event says so) */
  gboolean         finish_success;
  gboolean         finish_reading;  /* "done" waits for the parameters to be read */
  char            *finish_message;
  gboolean         started;

  /* leave */
  GCallback        leave_cb;
  gpointer         leave_data;
  guint            leave_id;
  gint64           leave_deadline;
};

enum {
  PROP_0, PROP_NODE_ID, PROP_ROLE, PROP_LEADER, PROP_TERM, PROP_STEP, PROP_LOSS,
  PROP_MEMBERS, PROP_BYTES_TX, PROP_BYTES_RX, PROP_BYTES_F32, PROP_ROSTER, PROP_COHORT,
  PROP_PRECISION, N_PROPS
};

/* Main-loop time of the coordinator's handlers (per round, for "done"). */
#define BUSY_BEGIN gint64 busy_t0 = rlx_round_stats_now ()
#define BUSY_END rlx_round_stats_add_busy (self->stats, rlx_round_stats_now () - busy_t0)

/* ── small helpers ──────────────────────────────────────────────────────── */

static inline void
msg_free (gpointer p)
{
  rlx_msg_clear (p);
  g_free (p);
}

static inline RlxRole
role (RlxCoordinator *self)
{
  return rlx_leadership_get_role (self->lead);
}

static inline GPtrArray *
members (RlxCoordinator *self)
{
  return rlx_leadership_get_members (self->lead);
}

static inline gboolean
is_self (RlxCoordinator *self, const char *id)
{
  return g_strcmp0 (id, self->node_id) == 0;
}

static inline gboolean
is_alive (const char *id, gpointer user_data)
{
  RlxCoordinator *self = user_data;

  return is_self (self, id) || rlx_peer_set_lookup (self->peers, id) != NULL;
}

#define str_array_contains rlx_cohort_str_array_contains
#define str_array_remove   rlx_cohort_str_array_remove
#define str_array_copy     rlx_cohort_str_array_copy

static inline guint64
applied (RlxCoordinator *self)
{
  return rlx_replica_get_step (self->replica);
}

/* A peer in a cohort (leader or member) tells who leads it. */
static inline const char *
peer_leader (RlxPeer *p)
{
  if (p->role == RLX_ROLE_LEADER)
    return p->id;
  if (p->role == RLX_ROLE_MEMBER)
    return p->leader;
  return NULL;
}

/* ── shared between the files (see the top of this header) ──────────────── */

/* facade */
void rlx_coordinator_notify (RlxCoordinator *self, guint prop);
/* the backend's counters after a step (for "done") */
void rlx_coordinator_note_backend (RlxCoordinator *self, guint64 host_bytes, guint64 ahead,
                                   guint64 update_ahead);
void rlx_coordinator_emit_discover (RlxCoordinator *self);

/* --sync auto (rlx-coordinator-auto.c): a ready peer's link is measured
 * from now on, a lost one's no more; after a commit, the leader chooses
 * when a choice is due, and every node reports its links ("links") */
void rlx_coordinator_auto_peer_ready   (RlxCoordinator *self, RlxPeer *p);
void rlx_coordinator_auto_peer_lost    (RlxCoordinator *self, const char *id);
void rlx_coordinator_auto_after_commit (RlxCoordinator *self, guint n_members);
/* The leader is about to assign rounds with no commit before them (the
 * first, or a restart): a choice due (a provisional one, over a remote
 * link not measured yet) is made now, so those rounds run in it. */
void rlx_coordinator_auto_rounds_begin (RlxCoordinator *self, guint n_members);

/* events */
/* what the role objects may ask of the coordinator */
extern const RlxCohortOps rlx_coordinator_cohort_ops;
/* emit @event (taken) */
void rlx_coordinator_emit_event (RlxCoordinator *self, RlxEvent *event);
/* a note kind (RLX_EVENT_ERROR, _REJOINING, …) with a node and a reason */
void     rlx_coordinator_emit_simple (RlxCoordinator *self, RlxEventKind kind, const char *node,
                                      const char *reason);
void rlx_coordinator_emit_error (RlxCoordinator *self, const char *message);
void rlx_coordinator_emit_joined (RlxCoordinator *self);
/* the "sync" event (the mode this node runs now) */
void rlx_coordinator_emit_sync (RlxCoordinator *self);
void rlx_coordinator_emit_leader (RlxCoordinator *self);
void     rlx_coordinator_emit_member (RlxCoordinator *self, RlxEventKind kind, const char *id,
                                      const char *reason);
void rlx_coordinator_note_assigned (RlxCoordinator *self, guint64 step, guint count);
void     rlx_coordinator_emit_step (RlxCoordinator *self, guint64 step, guint64 hash, double loss,
                                    guint64 samples, GPtrArray *contributors, guint late,
                                    guint rejected, guint n_members, guint agree);
gboolean rlx_coordinator_send_msg (RlxCoordinator *self, RlxPeer *p, const RlxMsg *m);
gboolean rlx_coordinator_send_frame (RlxCoordinator *self, RlxPeer *p, RlxSendClass klass,
                                     GBytes *frame, gsize n, RlxPrecision precision);
void rlx_coordinator_send_join (RlxCoordinator *self, const char *reason);
void rlx_coordinator_note_precision (RlxCoordinator *self, RlxPeer *p, RlxPrecision precision);
void rlx_coordinator_roster_sync (RlxCoordinator *self);
void rlx_coordinator_members_replace (RlxCoordinator *self, GPtrArray *next);
void rlx_coordinator_link_members (RlxCoordinator *self);
/* As the leader, write the state it holds now: when @force, or when the
 * commit of @step just reported is one of every checkpoint_every (the
 * reported step decides, not the one the replica holds by then: that may
 * be the same for two reported commits, or skip a multiple). */
void rlx_coordinator_maybe_checkpoint (RlxCoordinator *self, guint64 step, gboolean force);
void rlx_coordinator_on_checkpoint_written (RlxCheckpointer *ckpt, guint64 step, const char *path,
                                            gpointer user_data);
void rlx_coordinator_on_checkpoint_failed (RlxCheckpointer *ckpt, const char *message,
                                           gpointer user_data);

/* Busy polling (core/p2p/rlx-busy-poll.h) from the first committed step
 * of a rank allowed to (RLX_BUSY_POLL) until it finishes. */
void rlx_coordinator_busy_poll_begin (RlxCoordinator *self);
void rlx_coordinator_busy_poll_end   (RlxCoordinator *self);
void rlx_coordinator_finish (RlxCoordinator *self, gboolean success, const char *message);

/* founding (rlx-coordinator-founding.c) */
void rlx_coordinator_note_led_commit (RlxCoordinator *self);
/* The members this node knows, less itself (for note_superseded). */
char **rlx_coordinator_other_members (RlxCoordinator *self);
/* This node took over from @old at a failover, which then had @with
 * (taken) besides this node (rlx_coordinator_leader_lost);
 * forget_superseded drops it (a new term, joining or following anyone). */
void rlx_coordinator_note_superseded (RlxCoordinator *self, const char *old, char **with);
void rlx_coordinator_forget_superseded (RlxCoordinator *self);
/* A peer was lost (@reason: the peer set's): cut off at once from a group
 * (every link gone, the last two within a heartbeat timeout and a second),
 * this node trains at the group's pace for RLX_CUT_PACE_MS (its branch
 * loses the merge rule to that group); pace_stop ends that (a link is up,
 * looked at every 500 ms, or the time passed). */
#define RLX_CUT_PACE_MS 30000
void rlx_coordinator_pace_lost (RlxCoordinator *self, const char *id, const char *reason);
void rlx_coordinator_pace_stop (RlxCoordinator *self, const char *why);
/* roles */
void rlx_coordinator_start_found_timer (RlxCoordinator *self, guint ms);
void rlx_coordinator_transition (RlxCoordinator *self, RlxRole to, const char *leader, guint64 term,
                                 const char *reason);
void rlx_coordinator_found (RlxCoordinator *self);
/* Alone, this node met @leader (of @term): it joins it, unless it holds
 * committed steps that the merge rule keeps against that leader's fork of
 * its lineage (a founder that resumed a checkpoint): then it leads on,
 * reporting it ("rejected"), and that group yields to its announcement. */
void rlx_coordinator_join_met_leader (RlxCoordinator *self, const char *leader, guint64 term);
void rlx_coordinator_request_snapshot (RlxCoordinator *self, const char *reason);
void rlx_coordinator_cut_off (RlxCoordinator *self, const char *why);
void rlx_coordinator_leader_lost (RlxCoordinator *self, const char *old, const char *reason);
gboolean rlx_coordinator_successor_check (RlxCoordinator *self, RlxPeer *p);
void     rlx_coordinator_successor_due   (RlxCoordinator *self);
void     rlx_coordinator_note_discarded  (RlxCoordinator *self, guint64 to_step);
gboolean rlx_coordinator_waits_for_us    (RlxCoordinator *self, RlxPeer *p);
void rlx_coordinator_merge_with (RlxCoordinator *self, RlxPeer *p, guint sent_members,
                                 guint64 sent_step);
void rlx_coordinator_on_leader_msg (RlxCoordinator *self, RlxPeer *p, RlxMsgLeader *lm);
/* Two groups that cannot merge met (@p refused, @hello its or NULL):
 * whether ours gives way, by the merge rule with its claim checked. */
gboolean rlx_coordinator_refusal_yields (RlxCoordinator *self, RlxPeer *p, const RlxMsg *hello);
/* A claim doubted earlier, checked again (a peer said hello). */
void rlx_coordinator_recheck_claim (RlxCoordinator *self);
/* A peer's heartbeat says it stands elsewhere (another leader, group size,
 * term): a doubted claim is checked again, and a leader whose group the
 * rule keeps against ours by members, as far as this node can check it
 * now, is yielded to. */
void rlx_coordinator_groups_changed (RlxCoordinator *self);
/* This node leads @term from now (@founding: a new cohort or lineage). */
void rlx_coordinator_become_leader (RlxCoordinator *self, guint64 term, gboolean founding);
/* A leader's member @id leaves its group (@reason, for member-left). */
void rlx_coordinator_drop_member (RlxCoordinator *self, const char *id, const char *reason);

G_END_DECLS
