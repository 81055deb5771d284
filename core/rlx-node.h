/* rlx-node.h — one node of a cohort, assembled: dataset, backend, compute
 * worker, links and coordinator
 *
 * Every process that takes part in a cohort is a node with one rank. A node
 * is put together the same way wherever it runs (the desktop app, and later
 * `rlx-rank join`): open the dataset, resolve the backend (which may open a
 * Vulkan device and load data from disk — done on a worker thread, never on
 * the main loop), start the rank's compute worker, create the coordinator
 * and hand it every link the local bus (later: remote links) makes.
 *
 * Life cycle ("state" property):
 *   idle → starting → running → leaving → stopped
 * rlx_node_start_async moves idle → starting → running (or → stopped on an
 * error, reported by _finish). rlx_node_leave_async, or the coordinator
 * finishing by itself (refused, --steps reached, worker failure), moves
 * running → leaving → stopped; ::finished is then emitted exactly once with
 * the outcome. A node is not restarted: make a new one to join again.
 *
 * Invites: an empty invite (NULL or "") means the local cohort of this
 * machine, on the Unix-socket bus. A remote invite (rlx://HOST:PORT/COHORT#KEY)
 * joins that cohort across machines (rlx-node-remote.h): the node links to
 * the members on other machines over QUIC, and to those on this machine
 * over the local bus as always (a local link to a peer wins). With
 * host_port set instead, the node founds a cohort others can reach: it
 * serves signalling on that port and emits an "invite" event (invite,
 * cohort, port, fingerprint). Either way rlx_node_dup_invite returns the
 * invite others join with once the node runs.
 *
 * No GTK here: the app and the headless node share this code.
 *
 * Threads: create and use on one thread whose thread-default main context
 * runs; signals and callbacks come back there. That need not be the main
 * thread: `rlx-rank join` runs its node on the main loop, the desktop app
 * on a thread of its own (rlx-node-thread.h) so the node's protocol work
 * stays off the UI thread.
 */
#pragma once

#include <gio/gio.h>
#include "core/rlx-coordinator.h"
#include "core/rlx-node-remote.h"
#include "core/p2p/rlx-link.h"
#include "core/wire/rlx-wire.h"

G_BEGIN_DECLS

#define RLX_NODE_ERROR (rlx_node_error_quark ())
GQuark rlx_node_error_quark (void);
typedef enum {
  RLX_NODE_ERROR_INVALID,      /* a configuration value is unusable (message says which) */
  RLX_NODE_ERROR_UNSUPPORTED,  /* unused (remote invites were, before they worked) */
  RLX_NODE_ERROR_STATE,        /* start twice, or leave before start */
} RlxNodeError;

typedef struct {
  const char  *invite;           /* NULL or "": the local cohort of this machine;
                                  * rlx://…: join that cohort across machines */
  guint16      host_port;        /* found a cohort other machines can join: serve
                                  * signalling on this port; 0: not hosting */
  const char  *host_address;     /* with host_port: numeric address to listen on; NULL: all */
  const char  *advertise;        /* with host_port: the host put in the invite; NULL:
                                  * this machine's first IPv4 address */
  const RlxNodeRemoteTuning *remote_tuning; /* STUN/TURN, QUIC; NULL: defaults */
  const char  *cohort;           /* NULL: "default", or the invite's (which must agree) */
  const char  *node_id;          /* NULL: a fresh id */
  const char  *model;            /* NULL: "mnist-mlp" */
  const char  *dataset;          /* NULL: "synthetic" */
  const char  *backend;          /* request, NULL: "auto" */
  guint        compute;          /* RlxVkCompute (--compute): 0, f32, unless asked */
  RlxPrecision precision;        /* wire precision at start (changeable later) */
  gboolean     no_error_feedback;
  guint        batch;            /* 0: 32 */
  double       lr;               /* 0: 0.05 */
  guint64      seed;
  guint64      steps;            /* 0: run until left */
  guint        threads;          /* BLAS threads of a CPU backend; 0: its default, or 1
                                  * when evaluate_every is set (see rlx-node.c) */
  guint        wait_members;     /* 0: 1 */
  double       max_grad_norm_ratio; /* as RlxCoordinatorConfig's (0: 100, < 0: never) */
  guint        checkpoint_every; /* the leader checkpoints every K steps; 0: only at the end */
  guint        evaluate_every;   /* test accuracy every K committed steps, evaluate_threads
                                  * at once (see rlx-coordinator.h); 0: never */
  guint        evaluate_threads; /* as RlxCoordinatorConfig's (0: 1) */
  const char  *checkpoint_dir;   /* NULL: $XDG_DATA_HOME/rlx-cluster/COHORT */
  gboolean     evaluate_at_end;  /* once steps are done: test accuracy ("evaluated") */
  gboolean     join_only;        /* never found a cohort: wait until one is reachable */
  RlxSyncRequest sync;           /* --sync (zero: step), as RlxCoordinatorConfig's */
  double       outer_lr;         /* 0: DiLoCo's 0.7 and 0.9 (outer_momentum ignored) */
  double       outer_momentum;
  gboolean     inner_lr_fixed;   /* as RlxCoordinatorConfig's */
  /* (rlx-rank join's hidden test switches: core/rlx-node-faults.h) */
} RlxNodeConfig;

#define RLX_TYPE_NODE (rlx_node_get_type ())
G_DECLARE_FINAL_TYPE (RlxNode, rlx_node, RLX, NODE, GObject)

/* Signals:
 *   ::event (RlxEvent *event)   every event of the coordinator (see
 *       rlx-coordinator.h; "evaluated" every evaluate_every committed steps)
 *       and of the remote node (core/p2p/rlx-remote-node.h); read-only
 *   ::link-added (RlxLink *link, const char *peer_id)   a link to node
 *       @peer_id (local or remote), already handed to the coordinator
 *       (tests watch frames with it; emitted on the main context)
 *   ::finished (gboolean success, const char *message)
 *       the node stopped: once, after its links closed. @success is FALSE
 *       when it could not go on (refused, unusable checkpoint, worker
 *       failure, the cohort key refused, no member of an invite's cohort
 *       reached: such a node founds nothing); @message says why (or "left",
 *       the reason given to leave).
 * Properties (notify on change):
 *   "state"        string  "idle", "starting", "running", "leaving", "stopped"
 *   "coordinator"  RlxCoordinator, NULL until running
 *   "cohort", "node-id"  string, read-only
 */

/* Checks the names and numbers of @config (cheap, nothing opened). NULL with
 * RLX_NODE_ERROR_INVALID on a bad one (a malformed invite: the message
 * shows the expected form). @config is copied. */
RlxNode        *rlx_node_new            (const RlxNodeConfig *config, GError **error);

/* Open the dataset and resolve the backend (and, for a remote cohort, load
 * this machine's identity and the cohort key) on a worker thread, then
 * start the worker, the coordinator, the bus and the remote side on this
 * thread. Completes once the node runs (discovering its cohort). Errors
 * keep their domain (RLX_DATASET_ERROR, RLX_BACKEND_ERROR,
 * RLX_IDENTITY_ERROR, G_IO_ERROR for a port in use, …). */
void            rlx_node_start_async    (RlxNode            *self,
                                         GCancellable       *cancellable,
                                         GAsyncReadyCallback callback,
                                         gpointer            user_data);
gboolean        rlx_node_start_finish   (RlxNode      *self,
                                         GAsyncResult *result,
                                         GError      **error);

/* Leave cleanly (bye to every peer, the last checkpoint written), then stop
 * the bus. Evaluations still running (evaluate_every, evaluate_at_end) are
 * cancelled, and the node is stopped only once they have returned, so the
 * process may exit then. Completes when the node is stopped (after ::finished). Leaving a
 * node that is starting cancels the start; leaving a stopped node completes
 * at once. */
void            rlx_node_leave_async    (RlxNode            *self,
                                         const char         *reason,
                                         GAsyncReadyCallback callback,
                                         gpointer            user_data);
gboolean        rlx_node_leave_finish   (RlxNode      *self,
                                         GAsyncResult *result,
                                         GError      **error);

const char     *rlx_node_get_state      (RlxNode *self);
const char     *rlx_node_get_cohort     (RlxNode *self);
const char     *rlx_node_get_node_id    (RlxNode *self);
/* NULL before the node runs and after it stopped. Transfer none. */
RlxCoordinator *rlx_node_get_coordinator (RlxNode *self);
/* The invite that lets another machine join this node's cohort (the one it
 * joined by, or the one it hosts); NULL for a local cohort, and before the
 * node runs. */
char           *rlx_node_dup_invite     (RlxNode *self);
/* The local bus's directory ($XDG_RUNTIME_DIR/rlx-cluster/COHORT). */
char           *rlx_node_dup_bus_dir    (RlxNode *self);

/* A valid cohort name / node id: 1..64 of [A-Za-z0-9._-], not "." or "..". */
gboolean        rlx_node_name_is_valid  (const char *name);

G_END_DECLS
