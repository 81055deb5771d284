/* rlx-coordinator.h — one node of an elastic data-parallel cohort
 *
 * The coordinator is the protocol of DESIGN.md ("The cohort protocol") for
 * one node: membership (hello/refuse/join), the leader and its term, rounds
 * (step → grad → commit), snapshots, failover, heartbeats and checkpoints.
 * It talks to its peers through RlxLinks handed to it (rlx_coordinator_add_link;
 * the local bus's ::link-added, later remote links) and does not know what is
 * underneath. Gradients come from the rank's compute worker (RlxWorker); the
 * coordinator itself never blocks the main loop.
 *
 * Everything that happens is reported twice: as an ::event signal carrying a
 * JSON object with an "event" member (what `rlx-rank join --json` prints, one
 * per line), and through properties the GUI binds to (role, leader, term,
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
#include "core/wire/rlx-wire.h"

G_BEGIN_DECLS

#define RLX_PROTOCOL_VERSION 1

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
  guint        deadline_floor_ms;   /* shortest collect deadline; 0: 500 */
  guint        heartbeat_timeout_ms; /* silence that removes a peer; 0: 3000 */
  guint64      fault_nan_from;   /* test switch: NaN gradients from this step; 0: off */
} RlxCoordinatorConfig;

/* ── roster entries ─────────────────────────────────────────────────────── */

#define RLX_TYPE_ROSTER_ENTRY (rlx_roster_entry_get_type ())
G_DECLARE_FINAL_TYPE (RlxRosterEntry, rlx_roster_entry, RLX, ROSTER_ENTRY, GObject)

/* Read-only properties (notify on change): "node-id", "host", "backend",
 * "device", "fallback" (why a faster backend was passed over), "precision",
 * "speed" (samples/s, measured), "is-leader", "is-self". */
const char *rlx_roster_entry_get_node_id   (RlxRosterEntry *self);
const char *rlx_roster_entry_get_host      (RlxRosterEntry *self);
const char *rlx_roster_entry_get_backend   (RlxRosterEntry *self);
const char *rlx_roster_entry_get_device    (RlxRosterEntry *self);
const char *rlx_roster_entry_get_fallback  (RlxRosterEntry *self);
const char *rlx_roster_entry_get_precision (RlxRosterEntry *self);
double      rlx_roster_entry_get_speed     (RlxRosterEntry *self);
gboolean    rlx_roster_entry_get_is_leader (RlxRosterEntry *self);

/* ── the coordinator ────────────────────────────────────────────────────── */

#define RLX_TYPE_COORDINATOR (rlx_coordinator_get_type ())
G_DECLARE_FINAL_TYPE (RlxCoordinator, rlx_coordinator, RLX, COORDINATOR, GObject)

/* Signals:
 *   ::event (JsonObject *event)   one event; event["event"] names it:
 *       joined, leader, step, member-joined, member-left, refused, rejected,
 *       snapshot, checkpoint, resumed, late, error, done
 *   ::finished (gboolean success, const char *message)
 *       the node stopped: --steps reached (TRUE), or it cannot go on (FALSE:
 *       refused by the cohort, unusable checkpoint, worker failure).
 * Properties (read-only, notify on change): "node-id", "role" ("alone",
 *   "joining", "member", "leader", "stopped"), "leader", "term", "step"
 *   (committed steps applied here), "loss", "members" (count), "bytes-tx",
 *   "bytes-rx", "bytes-f32", "roster" (GListModel of RlxRosterEntry).
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
 * a checkpoint being written has landed. */
void            rlx_coordinator_leave    (RlxCoordinator *self, const char *reason,
                                          GCallback callback, gpointer user_data);

const char     *rlx_coordinator_get_node_id (RlxCoordinator *self);
const char     *rlx_coordinator_get_role    (RlxCoordinator *self);
const char     *rlx_coordinator_get_leader  (RlxCoordinator *self);
guint64         rlx_coordinator_get_term    (RlxCoordinator *self);
guint64         rlx_coordinator_get_step    (RlxCoordinator *self);
double          rlx_coordinator_get_loss    (RlxCoordinator *self);
GListModel     *rlx_coordinator_get_roster  (RlxCoordinator *self);
/* The current parameters (n_params floats; valid until the next commit). */
const float    *rlx_coordinator_get_params  (RlxCoordinator *self, gsize *n_params);
/* Where this cohort's checkpoint lives. */
const char     *rlx_coordinator_get_checkpoint_path (RlxCoordinator *self);

/* $XDG_DATA_HOME/rlx-cluster/COHORT/checkpoint.safetensors */
char           *rlx_checkpoint_path_for_cohort (const char *cohort);

G_END_DECLS
