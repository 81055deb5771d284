/* rlx-coordinator.h — one node of an elastic data-parallel cohort
 *
 * The coordinator is the protocol of docs/PROTOCOL.md for one node:
 * membership (hello/refuse/join), the leader and its term, rounds (step →
 * grad → ack), snapshots, failover, rejoining after being cut off, merging
 * two groups that split, heartbeats and checkpoints. It talks to its peers
 * through RlxLinks handed to it (rlx_coordinator_add_link; the local bus's
 * ::link-added, remote links) and does not know what is underneath.
 * Gradients come from the rank's compute worker (RlxWorker). It is a thin
 * façade over core/cohort/ (the peer set, the typed messages, the
 * leadership state, the leader's round, the replica, the checkpointer, the
 * roster); every pass over parameter-sized data runs on a worker thread, so
 * the main loop only routes frames and decides.
 *
 * Everything that happens is reported twice: as an ::event signal carrying a
 * typed event (core/event/rlx-event.h; its JSON is what `rlx-rank join
 * --json` prints, one per line), and through properties the GUI binds to (role, leader, term,
 * step, loss, byte counters, and the roster as a GListModel of
 * RlxRosterEntry).
 *
 * Threads: create and use on one thread whose thread-default main context
 * runs; signals are emitted there.
 */
#pragma once

#include <gio/gio.h>
#include <json-glib/json-glib.h>
#include "core/rlx-worker.h"
#include "core/p2p/rlx-link.h"
#include "core/event/rlx-event.h"
#include "core/wire/rlx-wire.h"
#include "core/cohort/rlx-sync-policy.h"
#include "core/cohort/rlx-roster-entry.h"   /* the roster's rows (rlx_coordinator_get_roster) */

G_BEGIN_DECLS

/* What hello's "v" says (docs/PROTOCOL.md); nodes of other versions are
 * refused with the reason. */
#define RLX_PROTOCOL_VERSION 6

#define RLX_COORDINATOR_ERROR (rlx_coordinator_error_quark ())
GQuark rlx_coordinator_error_quark (void);
typedef enum {
  RLX_COORDINATOR_ERROR_INVALID,     /* a bad configuration value */
  RLX_COORDINATOR_ERROR_CHECKPOINT,  /* the cohort's checkpoint is unusable */
  RLX_COORDINATOR_ERROR_REFUSED,     /* the cohort refused this node */
} RlxCoordinatorError;

typedef struct {
  const char  *cohort;           /* cohort name (checkpoint folder); required */
  const char  *node_id;          /* NULL: a fresh random id */
  const char  *host;             /* NULL: g_get_host_name () */
  RlxPrecision precision;        /* this node's wire precision */
  gboolean     error_feedback;   /* carry the quantisation residual */
  guint        batch;            /* this node's share of the global batch (>= 1) */
  double       lr;               /* SGD learning rate (> 0) */
  guint64      seed;             /* parameter init and epoch permutations */
  guint64      steps;            /* done once this step is committed; 0: never */
  guint        checkpoint_every; /* leader checkpoints every K steps; 0: only at the end */
  const char  *checkpoint_dir;   /* NULL: $XDG_DATA_HOME/rlx-cluster/COHORT */
  guint        wait_members;     /* a founder waits for this many members (>= 1) */
  guint        deadline_floor_ms;   /* shortest collect deadline; 0: 200 */
  double       max_grad_norm_ratio; /* the leader refuses a member's bucket whose L2 norm is
                                     * over this × the median of the recent ones (and
                                     * reports it); 0: 100, < 0: never */
  guint        heartbeat_timeout_ms; /* silence that removes a peer; 0: 3000 */
  guint        evaluate_every;   /* measure test accuracy every K committed steps, off
                                  * the main loop ("evaluated" event), at most
                                  * evaluate_threads at once (one due while that many
                                  * are read or run is skipped); 0: never */
  guint        evaluate_threads; /* evaluations that may run at once (each a thread and
                                  * two parameter-sized copies); 0: 1, at most
                                  * RLX_EVALUATE_THREADS_MAX */
  gboolean     join_only;        /* a node given peers to join: it never founds a cohort
                                  * of its own, it waits until it reaches one ("waiting") */
  RlxSyncRequest sync;           /* --sync: step (zero: the default), outer:H or auto; the
                                  * cohort runs its leader's (docs/PROTOCOL.md) */
  double       outer_lr;         /* the outer optimizer's; 0: DiLoCo's 0.7 and 0.9 (then
                                  * outer_momentum is ignored) */
  double       outer_momentum;
  gboolean     inner_lr_fixed;   /* outer mode: every round's inner SGD runs at lr (FALSE,
                                  * the default: lr × √k, k the ranks the round is
                                  * assigned to; docs/PROTOCOL.md, "Sync modes") */
  /* Test faults are no part of the configuration: see the private
   * core/rlx-coordinator-faults.h. */
} RlxCoordinatorConfig;

#define RLX_EVALUATE_THREADS_MAX 16

/* ── the coordinator ────────────────────────────────────────────────────── */

#define RLX_TYPE_COORDINATOR (rlx_coordinator_get_type ())
G_DECLARE_FINAL_TYPE (RlxCoordinator, rlx_coordinator, RLX, COORDINATOR, GObject)

/* Signals:
 *   ::event (RlxEvent *event)   one event (read-only; ref it to keep it):
 *       its kind, and the fields of that kind's struct. rlx_event_to_json
 *       makes the line `rlx-rank join --json` prints. By name and field:
 *       joined         node, cohort, role, step, hash, backend, device,
 *                      fallback, precision, sync (the mode this node runs now)
 *       sync           mode ("step", "outer"), h, requested, outer_lr,
 *                      outer_momentum, fragments (outer), reason — the
 *                      cohort's sync mode, when this node first knows it and
 *                      whenever it changes
 *       leader         node, term, step                 (the leader changed)
 *       step           step, loss, leader, term, members, samples, assigned,
 *                      hash, bytes_tx, bytes_rx, bytes_f32, contributed,
 *                      contributors, late, rejected, time_us (monotonic µs
 *                      when committed here); on the leader agree (ranks,
 *                      itself too, whose acknowledged hash is the commit's); of an outer round also sync
 *                      ("outer"), h, outer_hash (θ and momentum,
 *                      rlx_outer_hash), round_bytes (wire bytes one
 *                      exchange of the round moved at the leader's precision)
 *       member-joined  node, host, backend, device, fallback, precision, step
 *       member-left    node, reason, step
 *       refused        node, reason, by       (a hello refused, either side)
 *       rejected       node, step, reason     (a bucket thrown away)
 *       late           node, step, reason     (a bucket missed the deadline)
 *       dropped        node, class, total, reason  (the sender discarded a
 *                      queued frame to that peer)
 *       send-failed    node, reason
 *       snapshot       from or to, step, hash, reason
 *       rejoining      reason        (cut off; this node rejoins by itself)
 *       merged         node (the leader kept), discarded (steps this side
 *                      threw away), from_step, to_step, rule
 *       precision      node, precision      (a rank's wire precision changed)
 *       waiting        reason        (a join-only node found no cohort yet)
 *       diverged       node, step, hash, expected, outer?  (a rank's parameters
 *                      after step differ from the commit's: on the leader from a
 *                      member's acknowledgement, on a member of itself; outer:
 *                      true when θ agreed but the outer momentum did not, the
 *                      hashes then being outer hashes)
 *       ack-timeout    node, step    (a member that did not acknowledge a commit
 *                      in time; the step is reported committed without it)
 *       checkpoint     step, path;  resumed  step, hash, path
 *       evaluated      step, accuracy, test_loss   (config evaluate_every)
 *       error          node, reason
 *       done           success, message, step, hash, loss, late, rejected,
 *                      byte counters (and the leader's per-round timings)
 *   ::discover ()
 *       the node is looking for peers (it is alone, or was cut off and
 *       rejoins): connect what links you can (RlxLocalBus: rescan). Emitted
 *       again every few hundred ms while it looks.
 *   ::finished (gboolean success, const char *message)
 *       the node stopped: --steps reached (TRUE), a clean leave (TRUE), or it
 *       cannot go on (FALSE: refused by the cohort, unusable checkpoint,
 *       worker failure). A node cut off from its cohort does not finish: it
 *       rejoins by itself ("rejoining").
 * Properties (notify on change):
 *   "node-id"    string   read-only
 *   "cohort"     string   read-only
 *   "role"       string   "alone", "joining", "member", "leader", "stopped"
 *   "leader"     string   node id of the leader (NULL before one is known)
 *   "term"       uint64
 *   "step"       uint64   committed steps applied here
 *   "loss"       double   loss of the last committed step
 *   "members"    uint     count
 *   "bytes-tx", "bytes-rx", "bytes-f32"  uint64   this node's wire totals
 *                         (bytes-f32: what the same frames cost at f32)
 *   "precision"  string   read-write: this node's wire precision ("f32",
 *                         "f16", "f8e4m3", "f8e5m2"); a change takes effect
 *                         at the next message this node sends
 *   "roster"     GListModel of RlxRosterEntry, read-only
 */

/* Takes ownership of @worker (whose backend fixes the model and dataset),
 * also on failure. NULL with RLX_COORDINATOR_ERROR_* on a bad configuration.
 * A checkpoint of this cohort that cannot be resumed (another model, a
 * broken file) only matters if this node founds the cohort: it then finishes
 * with the reason instead. */
RlxCoordinator *rlx_coordinator_new      (const RlxCoordinatorConfig *config,
                                          RlxWorker *worker, GError **error);

/* Begin: discover peers for a moment, then join the cohort found or found
 * one (resuming its checkpoint). Call once, after connecting ::event. */
void            rlx_coordinator_start    (RlxCoordinator *self);

/* A new link to a peer (e.g. from RlxLocalBus::link-added). The coordinator
 * takes a reference, sends hello, and drops the link when it closes. */
void            rlx_coordinator_add_link (RlxCoordinator *self, RlxLink *link);

/* Leave cleanly: bye to every peer, stop computing. @callback runs (on the
 * main context) once every link has flushed or after one second, and after
 * a checkpoint being written has landed. Test-accuracy evaluations
 * (evaluate_every) still running are cancelled (no "evaluated" for them)
 * and @callback waits, with no deadline, until each has returned: the
 * process may exit after it. */
void            rlx_coordinator_leave    (RlxCoordinator *self, const char *reason,
                                          GCallback callback, gpointer user_data);
/* The node cannot go on (its cohort key refused, …): the coordinator stops
 * as a failure, so its "done" event says success false with @message. Call
 * before rlx_coordinator_leave; a coordinator that finished is left as is. */
void            rlx_coordinator_fail     (RlxCoordinator *self, const char *message);

/* The hook through which `--sync auto` (re)chooses (rlx_sync_choose, with
 * @inputs as measured: each link's round trip and throughput, the step
 * time; NULL: nothing measured, which on a cohort of one host is `step`).
 * Only the leader's choice counts: it takes effect at the next round it
 * assigns and is announced in its step frames; a member's call changes
 * nothing the cohort runs. A fixed request (step, outer:H) stays what it
 * is. Reports a "sync" event when the mode or H changed. This node calls it
 * with NULL when it takes over as leader. */
void            rlx_coordinator_rechoose_sync (RlxCoordinator *self, const RlxSyncInputs *inputs);
/* The sync mode this node runs now (as the leader chose it, or as the
 * leader's last frame announced it) and H (0 in the step mode). */
RlxSyncMode     rlx_coordinator_get_sync      (RlxCoordinator *self, guint *h);

/* Peers whose process lives but does not answer (RlxLocalBus's unanswered
 * sockets), told by whoever owns the transports when ::discover asks.
 * @complete: every peer this node could have is among its links and @ids
 * (only the local bus, no remote side), so once all of them answer and none
 * is in a cohort, nobody else may hold the cohort's state. An alone node
 * never founds over such peers (for up to ten heartbeat timeouts). */
void            rlx_coordinator_set_silent_peers (RlxCoordinator *self, const char *const *ids,
                                                  gboolean complete);

/* This node's wire precision; takes effect at the next message it sends
 * (gradients as a member, updates as the leader). Any time, any role. */
void            rlx_coordinator_set_precision (RlxCoordinator *self, RlxPrecision precision);
RlxPrecision    rlx_coordinator_get_precision (RlxCoordinator *self);

const char     *rlx_coordinator_get_cohort  (RlxCoordinator *self);
guint64         rlx_coordinator_get_bytes_tx  (RlxCoordinator *self);
guint64         rlx_coordinator_get_bytes_rx  (RlxCoordinator *self);
guint64         rlx_coordinator_get_bytes_f32 (RlxCoordinator *self);
const char     *rlx_coordinator_get_node_id (RlxCoordinator *self);
const char     *rlx_coordinator_get_role    (RlxCoordinator *self);
const char     *rlx_coordinator_get_leader  (RlxCoordinator *self);
guint64         rlx_coordinator_get_term    (RlxCoordinator *self);
guint64         rlx_coordinator_get_step    (RlxCoordinator *self);
/* Where the step after the last applied one begins in the sample stream
 * (the replica's epoch and position in its permutation). */
void            rlx_coordinator_get_position (RlxCoordinator *self, guint *epoch, guint *pos);
double          rlx_coordinator_get_loss    (RlxCoordinator *self);
GListModel     *rlx_coordinator_get_roster  (RlxCoordinator *self);
/* The parameters as this node last read them from its rank's backend,
 * where they live (in device memory on a GPU rank): for a snapshot or a
 * checkpoint it made, an evaluation, and always when it finishes — so after
 * ::finished they are the final ones. n_params floats, valid until the next
 * read; NULL if it never read them (the backend failed). Reading costs a
 * pass over the parameters, so a running node does not do it every step. */
const float    *rlx_coordinator_get_params  (RlxCoordinator *self, gsize *n_params);
/* Where this cohort's checkpoint lives. */
const char     *rlx_coordinator_get_checkpoint_path (RlxCoordinator *self);

/* $XDG_DATA_HOME/rlx-cluster/COHORT/checkpoint.safetensors */
char           *rlx_checkpoint_path_for_cohort (const char *cohort);

G_END_DECLS
