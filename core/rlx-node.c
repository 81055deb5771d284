/* rlx-node.c — one node of a cohort, assembled (see rlx-node.h)
 *
 * Start runs in two hops so the main loop never waits on a disk or a GPU:
 *
 *   worker thread   model, dataset (files on disk), backend resolution
 *                   (may create a Vulkan device); for a remote cohort the
 *                   identity and the cohort key (files, maybe a new key)
 *   main thread     the compute worker and the coordinator (the worker
 *                   belongs to the thread that makes it: its results come
 *                   back to that thread's context, and only that thread may
 *                   queue work on it — the coordinator does, from its
 *                   constructor on), then the local bus, the links it
 *                   already made, the remote side, and start (a node
 *                   joining by invite leaves the start to the remote side:
 *                   see rlx-node-remote.h)
 *
 * A leave that arrives while resolving is remembered; the second hop sees
 * it and drops what exists instead of going on.
 */
#include "rlx-config.h"
#include "rlx-node.h"
#include "rlx-node-faults.h"
#include "core/cohort/rlx-outer.h"
#include "core/rlx-backend.h"
#include "core/rlx-coordinator-faults.h"
#include "core/rlx-worker.h"
#include "core/p2p/rlx-local-bus.h"
#include "core/vision/rlx-cpu.h"
#include "core/vision/rlx-dataset.h"
#include "core/vision/rlx-model.h"

#include <math.h>
#include <unistd.h>
#include "core/util/rlx-fp-mode.h"

G_DEFINE_QUARK (rlx-node-error-quark, rlx_node_error)

typedef enum {
  STATE_IDLE,
  STATE_STARTING,
  STATE_RUNNING,
  STATE_LEAVING,
  STATE_STOPPED,
} NodeState;

static const char *const state_names[] = {
  "idle", "starting", "running", "leaving", "stopped",
};

struct _RlxNode
{
  GObject         parent_instance;

  /* configuration (owned copies) */
  char           *cohort;
  char           *node_id;
  char           *model;
  char           *dataset;
  char           *backend;
  guint           compute;
  guint           threads;
  /* what start_node gives the coordinator (cohort, node_id and
   * checkpoint_dir point at the strings here; the test switches' deadline
   * and heartbeat come from switches) */
  RlxCoordinatorConfig coord_config;
  char           *checkpoint_dir;
  gboolean        evaluate_at_end;
  RlxNodeTestSwitches switches;
  RlxNodeRemote  *remote;         /* NULL: the local cohort only */
  RlxNodeLinkFilter link_filter;
  gpointer        link_filter_data;

  NodeState       state;
  GTask          *start_task;     /* while starting */
  GPtrArray      *leave_tasks;    /* GTask*, completed when stopped */
  char           *leave_reason;   /* a leave asked for while starting */
  gboolean        finish_success;
  char           *finish_message;

  RlxCoordinator *coord;
  RlxLocalBus    *bus;
  RlxDataset     *test_data;      /* for evaluate_at_end */
  gboolean        evaluating;     /* the final evaluation runs */
  /* the final evaluation's thread has not returned (a leave cancels it; the
   * node is stopped only after: see rlx_node_leave_async) */
  gboolean        final_running;
  gboolean        stop_pending;   /* the leave is done, waiting for that thread */
  GCancellable   *final_cancel;

  GCancellable   *cancellable;
};

G_DEFINE_FINAL_TYPE (RlxNode, rlx_node, G_TYPE_OBJECT)

enum {
  PROP_0,
  PROP_STATE,
  PROP_COORDINATOR,
  PROP_COHORT,
  PROP_NODE_ID,
  N_PROPS
};

enum {
  SIG_EVENT,
  SIG_LINK_ADDED,
  SIG_FINISHED,
  N_SIGNALS
};

static GParamSpec *props[N_PROPS];
static guint signals[N_SIGNALS];

static void node_stop (RlxNode *self);

static void
set_state (RlxNode *self, NodeState state)
{
  if (self->state == state)
    return;
  self->state = state;
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_STATE]);
}

gboolean
rlx_node_name_is_valid (const char *name)
{
  return rlx_local_bus_name_is_valid (name);
}

/* ── configuration ──────────────────────────────────────────────────────── */

RlxNode *
rlx_node_new (const RlxNodeConfig *config, GError **error)
{
  g_autoptr(RlxNode) self = NULL;
  const char *cohort, *model;
  g_autoptr(GError) local = NULL;

  g_return_val_if_fail (config != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  g_autoptr(RlxNodeRemote) remote = NULL;

  if ((config->invite != NULL && *config->invite != '\0') || config->host_port != 0)
    {
      RlxNodeRemoteConfig rc = { 0 };

      rc.invite = config->invite;
      rc.host_port = config->host_port;
      rc.host_address = config->host_address;
      rc.advertise = config->advertise;
      rc.cohort = config->cohort;
      rc.tuning = config->remote_tuning;
      remote = rlx_node_remote_new (&rc, &local);
      if (remote == NULL)
        {
          g_set_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID, "%s", local->message);
          return NULL;
        }
    }
  cohort = remote ? rlx_node_remote_get_cohort (remote)
                  : config->cohort ? config->cohort : "default";
  if (!rlx_node_name_is_valid (cohort))
    {
      g_set_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID,
                   "“%s” is not a usable cohort name: use 1 to 64 of A–Z a–z 0–9 . _ -",
                   cohort);
      return NULL;
    }
  if (config->node_id != NULL && !rlx_node_name_is_valid (config->node_id))
    {
      g_set_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID,
                   "“%s” is not a usable node id: use 1 to 64 of A–Z a–z 0–9 . _ -",
                   config->node_id);
      return NULL;
    }
  model = config->model ? config->model : "mnist-mlp";
  if (rlx_model_lookup (model, &local) == NULL)
    {
      g_set_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID, "%s", local->message);
      return NULL;
    }
  if (config->outer_lr != 0 &&
      !rlx_outer_check_settings (config->outer_lr, config->outer_momentum, &local))
    {
      g_set_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID, "outer optimizer: %s",
                   local->message);
      return NULL;
    }
  {
    GError *bad = NULL;

    if (!rlx_sync_request_check (&config->sync, &bad))
      {
        g_set_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID, "%s", bad->message);
        g_error_free (bad);
        return NULL;
      }
  }
  if (config->lr < 0 || !isfinite (config->lr))
    {
      g_set_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID,
                   "learning rate %g is not a positive number", config->lr);
      return NULL;
    }
  if ((guint) config->precision >= RLX_PRECISION_COUNT)
    {
      g_set_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID,
                   "wire precision %d is not one of f32, f16, f8e4m3, f8e5m2",
                   (int) config->precision);
      return NULL;
    }

  self = g_object_new (RLX_TYPE_NODE, NULL);
  self->cohort = g_strdup (cohort);
  self->node_id = config->node_id
    ? g_strdup (config->node_id)
    : g_strdup_printf ("n%d-%08x", (int) getpid (), g_random_int ());
  self->model = g_strdup (model);
  self->dataset = g_strdup (config->dataset ? config->dataset : "synthetic");
  self->backend = g_strdup (config->backend ? config->backend : "auto");
  self->compute = config->compute;
  self->threads = config->threads;
  self->checkpoint_dir = g_strdup (config->checkpoint_dir);
  self->evaluate_at_end = config->evaluate_at_end;
  self->coord_config = (RlxCoordinatorConfig) {
    .cohort = self->cohort,
    .node_id = self->node_id,
    .precision = config->precision,
    .error_feedback = !config->no_error_feedback,
    .batch = config->batch ? config->batch : 32,
    .lr = config->lr > 0 ? config->lr : 0.05,
    .seed = config->seed,
    .steps = config->steps,
    .checkpoint_every = config->checkpoint_every,
    .checkpoint_dir = self->checkpoint_dir,
    .wait_members = MAX (1u, config->wait_members),
    .max_grad_norm_ratio = config->max_grad_norm_ratio,
    .evaluate_every = config->evaluate_every,
    .evaluate_threads = config->evaluate_threads,
    .join_only = config->join_only,
    .sync = config->sync,
    .outer_lr = config->outer_lr,
    .outer_momentum = config->outer_momentum,
    .inner_lr_fixed = config->inner_lr_fixed,
  };
  self->remote = g_steal_pointer (&remote);
  return g_steal_pointer (&self);
}

/* ── start ──────────────────────────────────────────────────────────────── */

typedef struct {
  char    *model;
  char    *dataset;
  char    *backend;
  guint    compute;
  guint64  seed;
  guint    threads;
  guint    max_batch;
  RlxNodeRemote *remote;   /* the node's: prepared here, untouched meanwhile */
} ResolveJob;

typedef struct {
  RlxBackend *backend;
  RlxDataset *dataset;
} Resolved;

static void
resolve_job_free (ResolveJob *job)
{
  g_free (job->model);
  g_free (job->dataset);
  g_free (job->backend);
  g_free (job);
}

static void
resolved_free (gpointer p)
{
  Resolved *r = p;

  if (r->backend)
    rlx_backend_free (r->backend);
  g_clear_pointer (&r->dataset, rlx_dataset_unref);
  g_free (r);
}

/* Worker thread: what may touch the disk or a GPU. */
static void
resolve_thread (GTask *task, gpointer source, gpointer task_data, GCancellable *cancellable)
{
  ResolveJob *job = task_data;
  g_autoptr(RlxDataset) dataset = NULL;
  const RlxModel *model;
  RlxBackend *backend;
  Resolved *resolved;
  GError *error = NULL;

  model = rlx_model_lookup (job->model, &error);
  if (model == NULL)
    {
      g_task_return_error (task, error);
      return;
    }
  dataset = rlx_dataset_open (job->dataset, job->seed, &error);
  if (dataset == NULL)
    {
      g_task_return_error (task, error);
      return;
    }
  if (g_task_return_error_if_cancelled (task))
    return;
  if (job->threads)
    rlx_cpu_set_threads (job->threads);
  backend = rlx_backend_resolve_compute (job->backend, (RlxVkCompute) job->compute, model, dataset,
                                        job->max_batch, &error);
  if (backend == NULL)
    {
      g_task_return_error (task, error);
      return;
    }
  resolved = g_new0 (Resolved, 1);
  resolved->backend = backend;
  resolved->dataset = g_steal_pointer (&dataset);
  if (job->remote && !rlx_node_remote_prepare (job->remote, &error))
    {
      resolved_free (resolved);
      g_task_return_error (task, error);
      return;
    }
  g_task_return_pointer (task, resolved, resolved_free);
}

/* The start was abandoned (leave, cancel) or failed: report it, stop. */
static void
start_fail (RlxNode *self, GError *error)
{
  g_autoptr(GTask) task = g_steal_pointer (&self->start_task);

  if (self->finish_message == NULL)
    {
      self->finish_success = g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
      self->finish_message = g_strdup (self->leave_reason ? self->leave_reason : error->message);
    }
  node_stop (self);
  g_task_return_error (task, error);
}

/* A leave or a cancel since the last hop: give up. */
static gboolean
start_abandoned (RlxNode *self)
{
  GCancellable *cancellable = g_task_get_cancellable (self->start_task);

  if (self->leave_reason == NULL && !g_cancellable_is_cancelled (cancellable))
    return FALSE;
  start_fail (self, g_error_new (G_IO_ERROR, G_IO_ERROR_CANCELLED, "%s",
                                 self->leave_reason ? "left before the cohort was joined"
                                                    : "joining was cancelled"));
  return TRUE;
}

static void
on_coordinator_finished (RlxCoordinator *coord, gboolean success, const char *message,
                         gpointer user_data);
static void
on_link_added (RlxLocalBus *bus, RlxLink *link, const char *peer_id, gpointer user_data);

static void
on_coordinator_event (RlxCoordinator *coord, RlxEvent *event, gpointer user_data)
{
  g_signal_emit (RLX_NODE (user_data), signals[SIG_EVENT], 0, event);
}

/* The coordinator looks for peers (alone, or cut off and rejoining). */
static void
on_discover (RlxCoordinator *coord, gpointer user_data)
{
  RlxNode *self = user_data;

  if (self->bus)
    {
      g_auto(GStrv) silent = NULL;

      rlx_local_bus_rescan (self->bus);
      silent = rlx_local_bus_dup_unanswered (self->bus);
      rlx_coordinator_set_silent_peers (coord, (const char *const *) silent, self->remote == NULL);
    }
}

static void
on_remote_event (RlxEvent *event, gpointer user_data)
{
  g_signal_emit (RLX_NODE (user_data), signals[SIG_EVENT], 0, event);
}

static void
on_remote_link_added (RlxLink *link, const char *peer_id, gpointer user_data)
{
  g_signal_emit (RLX_NODE (user_data), signals[SIG_LINK_ADDED], 0, link, peer_id);
}

static void begin_leave (RlxNode *self, gboolean success, const char *message,
                         const char *reason);

/* The remote side cannot go on (the cohort key refused, or no member of
 * the invite's cohort reached): leave like a
 * refused node. */
static void
on_remote_fail (const char *message, gpointer user_data)
{
  RlxNode *self = user_data;

  if (self->state == STATE_RUNNING && !self->evaluating)
    begin_leave (self, FALSE, message, message);
}

static const RlxNodeRemoteHooks remote_hooks = {
  .event = on_remote_event,
  .link_added = on_remote_link_added,
  .fail = on_remote_fail,
};

/* Main thread: the worker, the coordinator, the bus, the remote side; then
 * start. */
static void
start_node (RlxNode *self, RlxBackend *backend)
{
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) peers = NULL;
  RlxCoordinatorConfig cfg = self->coord_config;
  RlxWorker *worker;

  cfg.deadline_floor_ms = self->switches.deadline_floor_ms;
  cfg.heartbeat_timeout_ms = self->switches.heartbeat_timeout_ms;
  worker = rlx_worker_new (backend);
  rlx_worker_set_extra_delay_us (worker, (guint64) self->switches.slow_ms * 1000);
  rlx_worker_set_inner_delay_us (worker, (guint64) self->switches.inner_ms * 1000);
  /* Takes the worker (and with it the backend), also on failure. */
  self->coord = rlx_coordinator_new (&cfg, worker, &error);
  if (self->coord == NULL)
    {
      start_fail (self, g_steal_pointer (&error));
      return;
    }
  rlx_coordinator_set_fault_plan (self->coord, &self->switches.faults);
  self->bus = rlx_local_bus_new (self->cohort, self->node_id, &error);
  if (self->bus != NULL)   /* what rlx_msg_parse takes: docs/PROTOCOL.md, "Frame caps" */
    rlx_local_bus_set_max_frame (self->bus, RLX_WIRE_DEFAULT_MAX_FRAME);
  if (self->bus == NULL || !rlx_local_bus_start (self->bus, &error))
    {
      start_fail (self, g_steal_pointer (&error));
      return;
    }
  g_signal_connect_object (self->coord, "event", G_CALLBACK (on_coordinator_event), self, 0);
  g_signal_connect_object (self->coord, "discover", G_CALLBACK (on_discover), self, 0);
  g_signal_connect_object (self->coord, "finished", G_CALLBACK (on_coordinator_finished),
                           self, 0);
  g_signal_connect_object (self->bus, "link-added", G_CALLBACK (on_link_added), self, 0);
  if (self->remote &&
      !rlx_node_remote_start (self->remote, self->coord, self->bus, self->node_id,
                              &remote_hooks, self, &error))
    {
      start_fail (self, g_steal_pointer (&error));
      return;
    }
  /* Links the bus made while starting. */
  peers = rlx_local_bus_dup_peer_ids (self->bus);
  for (guint i = 0; peers && peers[i]; i++)
    {
      RlxLink *link = rlx_local_bus_get_link (self->bus, peers[i]);
      if (link)
        on_link_added (self->bus, link, peers[i], self);
    }
  /* A node joining by invite starts its coordinator once a member is
   * reachable (the remote side starts it), not after the local discovery. */
  if (self->remote == NULL || !rlx_node_remote_holds_start (self->remote))
    rlx_coordinator_start (self->coord);
  set_state (self, STATE_RUNNING);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_COORDINATOR]);
  {
    /* the task holds the node: drop it once returned */
    g_autoptr(GTask) task = g_steal_pointer (&self->start_task);
    g_task_return_boolean (task, TRUE);
  }
}

static void
on_resolved (GObject *source, GAsyncResult *result, gpointer user_data)
{
  RlxNode *self = RLX_NODE (source);
  g_autoptr(GError) error = NULL;
  Resolved *resolved;
  RlxBackend *backend;

  resolved = g_task_propagate_pointer (G_TASK (result), &error);
  if (resolved == NULL)
    {
      start_fail (self, g_steal_pointer (&error));
      return;
    }
  if (start_abandoned (self))
    {
      resolved_free (resolved);
      return;
    }
  backend = g_steal_pointer (&resolved->backend);
  self->test_data = g_steal_pointer (&resolved->dataset);
  resolved_free (resolved);
  start_node (self, backend);
}

void
rlx_node_start_async (RlxNode *self, GCancellable *cancellable, GAsyncReadyCallback callback,
                      gpointer user_data)
{
  g_autoptr(GTask) task = NULL;
  g_autoptr(GTask) resolve = NULL;
  ResolveJob *job;

  g_return_if_fail (RLX_IS_NODE (self));

  task = g_task_new (self, cancellable, callback, user_data);
  g_task_set_source_tag (task, rlx_node_start_async);
  if (self->state != STATE_IDLE)
    {
      g_task_return_new_error (task, RLX_NODE_ERROR, RLX_NODE_ERROR_STATE,
                               "this node was already started; make a new one to join again");
      return;
    }
  self->start_task = g_steal_pointer (&task);
  set_state (self, STATE_STARTING);

  job = g_new0 (ResolveJob, 1);
  job->model = g_strdup (self->model);
  job->dataset = g_strdup (self->dataset);
  job->backend = g_strdup (self->backend);
  job->compute = self->compute;
  job->seed = self->coord_config.seed;
  /* The coordinator measures test accuracy on another thread while the rank
   * computes. OpenBLAS 0.3.21 (pthreads) livelocks when two threads call it
   * at once with its thread pool in use (both spin in exec_blas; seen in the
   * app), so a node that evaluates keeps BLAS single-threaded, where
   * concurrent calls are safe. A process-wide BLAS lock in core/vision would
   * lift this. */
  job->threads = self->threads ? self->threads : self->coord_config.evaluate_every > 0 ? 1 : 0;
  /* Room for the share of a larger batch when others are slower. */
  job->max_batch = MIN (65536, MAX (self->coord_config.batch * 8, 256));
  job->remote = self->remote;
  resolve = g_task_new (self, cancellable, on_resolved, NULL);
  g_task_set_source_tag (resolve, rlx_node_start_async);
  g_task_set_check_cancellable (resolve, FALSE);
  g_task_set_task_data (resolve, job, (GDestroyNotify) resolve_job_free);
  g_task_run_in_thread (resolve, resolve_thread);
}

gboolean
rlx_node_start_finish (RlxNode *self, GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

/* ── running ────────────────────────────────────────────────────────────── */

static void
on_link_added (RlxLocalBus *bus, RlxLink *link, const char *peer_id, gpointer user_data)
{
  RlxNode *self = user_data;

  if (self->link_filter && !self->link_filter (peer_id, self->link_filter_data))
    {
      rlx_link_close (link);
      return;
    }
  /* A local link to a peer wins over a remote one: drop the remote one
   * before the coordinator gets this. */
  if (self->remote)
    rlx_node_remote_local_link_added (self->remote, peer_id);
  rlx_coordinator_add_link (self->coord, link);
  g_signal_emit (self, signals[SIG_LINK_ADDED], 0, link, peer_id);
  if (self->remote)
    rlx_node_remote_member_linked (self->remote);
}

/* Every link has flushed its bye (or a second passed). */
static void
on_left (gpointer user_data)
{
  RlxNode *self = user_data;

  if (self->final_running)
    self->stop_pending = TRUE;   /* on_final_evaluated stops */
  else
    node_stop (self);
  g_object_unref (self);
}

static void
begin_leave (RlxNode *self, gboolean success, const char *message, const char *reason)
{
  g_assert (self->state == STATE_RUNNING);

  self->evaluating = FALSE;
  g_cancellable_cancel (self->final_cancel);
  self->finish_success = success;
  self->finish_message = g_strdup (message);
  set_state (self, STATE_LEAVING);
  if (!success)
    rlx_coordinator_fail (self->coord, message);
  rlx_coordinator_leave (self->coord, reason, G_CALLBACK (on_left), g_object_ref (self));
}

/* ── the test accuracy at the end (evaluate_at_end) ─────────────────────── */

typedef struct {
  const RlxModel *model;
  RlxDataset     *dataset;
  float          *params;
  guint64         step;
  char           *message;
  guint           slow_ms;       /* the fault plan's eval_ms */
  GCancellable   *cancellable;   /* the node's final_cancel */
  double          accuracy;
  double          loss;
} FinalEval;

static void
final_eval_free (gpointer p)
{
  FinalEval *e = p;

  rlx_dataset_unref (e->dataset);
  g_clear_object (&e->cancellable);
  g_free (e->params);
  g_free (e->message);
  g_free (e);
}

static void
final_eval_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  FinalEval *e = data;
  RlxCpuTrainer *trainer = rlx_cpu_trainer_new (e->model, 1000);
  gint64 until = g_get_monotonic_time () + (gint64) e->slow_ms * 1000;
  gboolean done;

  do
    done = rlx_cpu_evaluate_cancellable (trainer, e->params, e->dataset, RLX_SPLIT_TEST,
                                         e->cancellable, &e->accuracy, &e->loss);
  while (done && e->slow_ms > 0 && g_get_monotonic_time () < until);
  rlx_cpu_trainer_free (trainer);   /* (before the return: the stop waits for it) */
  g_task_return_boolean (task, done);
}

static void
on_final_evaluated (GObject *source, GAsyncResult *result, gpointer user_data)
{
  /* the node's reference is dropped here, on its thread (the task may be
   * freed last on the evaluation thread: it holds no node) */
  g_autoptr(RlxNode) self = user_data;
  FinalEval *e = g_task_get_task_data (G_TASK (result));
  g_autoptr(RlxEvent) ev = rlx_event_new (RLX_EVENT_EVALUATED);
  gboolean done = g_task_propagate_boolean (G_TASK (result), NULL);

  self->final_running = FALSE;
  if (self->stop_pending)
    {
      self->stop_pending = FALSE;
      node_stop (self);
      return;
    }
  /* left meanwhile (interrupted): that leave stands */
  if (self->state != STATE_RUNNING || !self->evaluating || !done)
    return;
  ev->u.evaluated.accuracy = e->accuracy;
  ev->u.evaluated.test_loss = isfinite (e->loss) ? e->loss : -1;
  ev->u.evaluated.step = e->step;
  g_signal_emit (self, signals[SIG_EVENT], 0, ev);
  begin_leave (self, TRUE, e->message, "done");
}

/* The final parameters (read back when the coordinator finished), copied
 * and evaluated on a worker thread; FALSE if there are none to evaluate. */
static gboolean
evaluate_at_end (RlxNode *self, const char *message)
{
  g_autoptr(GTask) task = NULL;
  const float *params;
  FinalEval *e;
  gsize n;

  params = rlx_coordinator_get_params (self->coord, &n);
  if (params == NULL || self->test_data == NULL)
    {
      g_autoptr(RlxEvent) ev = rlx_event_note_new (RLX_EVENT_ERROR, self->node_id,
                                                   "the parameters could not be read back from "
                                                   "the rank's backend; no test accuracy");
      g_signal_emit (self, signals[SIG_EVENT], 0, ev);
      return FALSE;
    }
  e = g_new0 (FinalEval, 1);
  e->model = rlx_model_lookup (self->model, NULL);
  g_assert (e->model != NULL && n == e->model->n_params);
  e->dataset = rlx_dataset_ref (self->test_data);
  e->params = g_memdup2 (params, n * sizeof (float));
  e->step = rlx_coordinator_get_step (self->coord);
  e->message = g_strdup (message);
  e->slow_ms = self->switches.faults.eval_ms;
  e->cancellable = g_object_ref (self->final_cancel);
  self->evaluating = TRUE;
  self->final_running = TRUE;
  task = g_task_new (NULL, NULL, on_final_evaluated, g_object_ref (self));
  g_task_set_task_data (task, e, final_eval_free);
  rlx_fp_task_run_in_thread (task, final_eval_thread);
  return TRUE;
}

/* The coordinator stopped by itself: --steps reached, refused, failure. */
static void
on_coordinator_finished (RlxCoordinator *coord, gboolean success, const char *message,
                         gpointer user_data)
{
  RlxNode *self = user_data;

  if (self->state != STATE_RUNNING || self->evaluating)
    return;
  if (success && self->evaluate_at_end && evaluate_at_end (self, message))
    return;
  begin_leave (self, success, message, success ? "done" : message);
}

/* Tear down whatever exists, report ::finished, complete pending leaves. */
/* Stop the remote side and the local bus and let go of the coordinator,
 * with none of their signals reaching this node any more. */
static void
drop_links (RlxNode *self)
{
  if (self->remote)
    rlx_node_remote_stop (self->remote);
  if (self->bus)
    {
      g_signal_handlers_disconnect_by_data (self->bus, self);
      rlx_local_bus_stop (self->bus);
      g_clear_object (&self->bus);
    }
  if (self->coord)
    g_signal_handlers_disconnect_by_data (self->coord, self);
  g_clear_object (&self->coord);
}

static void
node_stop (RlxNode *self)
{
  g_autoptr(GPtrArray) tasks = NULL;
  gboolean had_coord = self->coord != NULL;

  if (self->state == STATE_STOPPED)
    return;
  g_cancellable_cancel (self->cancellable);
  self->evaluating = FALSE;
  drop_links (self);
  g_clear_pointer (&self->test_data, rlx_dataset_unref);
  set_state (self, STATE_STOPPED);
  if (had_coord)
    g_object_notify_by_pspec (G_OBJECT (self), props[PROP_COORDINATOR]);
  g_signal_emit (self, signals[SIG_FINISHED], 0, self->finish_success,
                 self->finish_message ? self->finish_message : "stopped");

  tasks = g_steal_pointer (&self->leave_tasks);
  self->leave_tasks = g_ptr_array_new_with_free_func (g_object_unref);
  for (guint i = 0; tasks && i < tasks->len; i++)
    g_task_return_boolean (g_ptr_array_index (tasks, i), TRUE);
}

void
rlx_node_leave_async (RlxNode *self, const char *reason, GAsyncReadyCallback callback,
                      gpointer user_data)
{
  g_autoptr(GTask) task = NULL;

  g_return_if_fail (RLX_IS_NODE (self));

  task = g_task_new (self, NULL, callback, user_data);
  g_task_set_source_tag (task, rlx_node_leave_async);
  if (reason == NULL)
    reason = "left";

  switch (self->state)
    {
    case STATE_IDLE:
      self->finish_success = TRUE;
      self->finish_message = g_strdup (reason);
      node_stop (self);
      G_GNUC_FALLTHROUGH;
    case STATE_STOPPED:
      g_task_return_boolean (task, TRUE);
      return;
    case STATE_STARTING:
      if (self->leave_reason == NULL)
        self->leave_reason = g_strdup (reason);
      break;
    case STATE_RUNNING:
      g_ptr_array_add (self->leave_tasks, g_steal_pointer (&task));
      begin_leave (self, TRUE, reason, reason);
      return;
    case STATE_LEAVING:
      break;
    default:
      g_assert_not_reached ();
    }
  g_ptr_array_add (self->leave_tasks, g_steal_pointer (&task));
}

gboolean
rlx_node_leave_finish (RlxNode *self, GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

/* ── accessors ──────────────────────────────────────────────────────────── */

const char *
rlx_node_get_state (RlxNode *self)
{
  g_return_val_if_fail (RLX_IS_NODE (self), NULL);
  return state_names[self->state];
}

const char *
rlx_node_get_cohort (RlxNode *self)
{
  g_return_val_if_fail (RLX_IS_NODE (self), NULL);
  return self->cohort;
}

const char *
rlx_node_get_node_id (RlxNode *self)
{
  g_return_val_if_fail (RLX_IS_NODE (self), NULL);
  return self->node_id;
}

RlxCoordinator *
rlx_node_get_coordinator (RlxNode *self)
{
  g_return_val_if_fail (RLX_IS_NODE (self), NULL);
  return self->coord;
}

char *
rlx_node_dup_invite (RlxNode *self)
{
  g_return_val_if_fail (RLX_IS_NODE (self), NULL);
  /* A local cohort has none; a hosted one knows its key once running. */
  if (self->remote == NULL || (self->state != STATE_RUNNING && self->state != STATE_LEAVING))
    return NULL;
  return rlx_node_remote_dup_invite (self->remote);
}

void
rlx_node_set_test_switches (RlxNode *self, const RlxNodeTestSwitches *switches)
{
  g_return_if_fail (RLX_IS_NODE (self));
  g_return_if_fail (switches != NULL);
  g_return_if_fail (self->state == STATE_IDLE);
  self->switches = *switches;
}

void
rlx_node_set_link_filter (RlxNode *self, RlxNodeLinkFilter filter, gpointer user_data)
{
  g_return_if_fail (RLX_IS_NODE (self));
  g_return_if_fail (self->state == STATE_IDLE);
  self->link_filter = filter;
  self->link_filter_data = user_data;
}

RlxLocalBus *
rlx_node_get_local_bus (RlxNode *self)
{
  g_return_val_if_fail (RLX_IS_NODE (self), NULL);
  return self->bus;
}

char *
rlx_node_dup_bus_dir (RlxNode *self)
{
  g_return_val_if_fail (RLX_IS_NODE (self), NULL);
  return rlx_local_bus_dir_for_cohort (self->cohort, NULL);
}

/* ── GObject ────────────────────────────────────────────────────────────── */

static void
rlx_node_dispose (GObject *object)
{
  RlxNode *self = RLX_NODE (object);

  /* Dropped while running (the process is going away): close links now. */
  drop_links (self);
  g_cancellable_cancel (self->cancellable);
  g_cancellable_cancel (self->final_cancel);
  G_OBJECT_CLASS (rlx_node_parent_class)->dispose (object);
}

static void
rlx_node_finalize (GObject *object)
{
  RlxNode *self = RLX_NODE (object);

  g_assert (self->start_task == NULL);
  g_clear_pointer (&self->leave_tasks, g_ptr_array_unref);
  g_clear_pointer (&self->remote, rlx_node_remote_free);
  g_clear_pointer (&self->test_data, rlx_dataset_unref);
  g_clear_object (&self->cancellable);
  g_clear_object (&self->final_cancel);
  g_free (self->leave_reason);
  g_free (self->finish_message);
  g_free (self->cohort);
  g_free (self->node_id);
  g_free (self->model);
  g_free (self->dataset);
  g_free (self->backend);
  g_free (self->checkpoint_dir);
  G_OBJECT_CLASS (rlx_node_parent_class)->finalize (object);
}

static void
rlx_node_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  RlxNode *self = RLX_NODE (object);

  switch (id)
    {
    case PROP_STATE: g_value_set_string (value, state_names[self->state]); break;
    case PROP_COORDINATOR: g_value_set_object (value, self->coord); break;
    case PROP_COHORT: g_value_set_string (value, self->cohort); break;
    case PROP_NODE_ID: g_value_set_string (value, self->node_id); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_node_class_init (RlxNodeClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags f = G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;

  object_class->dispose = rlx_node_dispose;
  object_class->finalize = rlx_node_finalize;
  object_class->get_property = rlx_node_get_property;

  props[PROP_STATE] = g_param_spec_string ("state", NULL, NULL, "idle", f);
  props[PROP_COORDINATOR] = g_param_spec_object ("coordinator", NULL, NULL,
                                                 RLX_TYPE_COORDINATOR, f);
  props[PROP_COHORT] = g_param_spec_string ("cohort", NULL, NULL, NULL, f);
  props[PROP_NODE_ID] = g_param_spec_string ("node-id", NULL, NULL, NULL, f);
  g_object_class_install_properties (object_class, N_PROPS, props);

  signals[SIG_EVENT] = g_signal_new ("event", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                     0, NULL, NULL, NULL, G_TYPE_NONE, 1,
                                     RLX_TYPE_EVENT | G_SIGNAL_TYPE_STATIC_SCOPE);
  signals[SIG_LINK_ADDED] = g_signal_new ("link-added", G_TYPE_FROM_CLASS (klass),
                                          G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                          G_TYPE_NONE, 2, RLX_TYPE_LINK, G_TYPE_STRING);
  signals[SIG_FINISHED] = g_signal_new ("finished", G_TYPE_FROM_CLASS (klass),
                                        G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                        G_TYPE_NONE, 2, G_TYPE_BOOLEAN, G_TYPE_STRING);
}

static void
rlx_node_init (RlxNode *self)
{
  self->leave_tasks = g_ptr_array_new_with_free_func (g_object_unref);
  self->cancellable = g_cancellable_new ();
  self->final_cancel = g_cancellable_new ();
}
