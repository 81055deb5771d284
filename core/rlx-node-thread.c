/* rlx-node-thread.c — an RlxNode on a thread of its own (see the header)
 *
 * Two halves share one refcounted Shared:
 *
 *   node thread   owns its GMainContext and GMainLoop, the RlxNode and
 *                 (through it) the coordinator; its signal handlers turn
 *                 what happens into Items and queue them (post)
 *   owner thread  the RlxNodeThread object; one source at a time on the
 *                 owner's context takes the whole queue (flush) and
 *                 delivers it in order
 *
 * Owner → node calls (start, leave, precision, dispose) are idle sources
 * attached to the node context under the mutex, only while that context
 * exists: the node thread destroys it (with whatever is still attached)
 * before it exits, so nothing of the node's ever runs or is freed on the
 * owner thread.
 *
 * Over 1,000 lines: the two halves and the items between them are one
 * mechanism over one Shared, and the owner's public half mirrors every
 * getter of RlxNode from what the items delivered.
 */
#include "rlx-config.h"
#include "rlx-node-thread.h"
#include "core/cohort/rlx-roster.h"

#include <pthread.h>
#include <time.h>

/* The owner is woken at most this often, however fast the node reports. */
#define FLUSH_INTERVAL_MS 50
/* Dispose while a start or leave is still in flight on the node thread
 * (only through g_object_run_dispose: they hold references) waits this
 * long for them before dropping the context. */
#define ABORT_GRACE_US    (5 * G_USEC_PER_SEC)

/* ── items: what the node thread tells the owner ───────────────────────── */

typedef enum {
  ITEM_EVENT,
  ITEM_LINK,
  ITEM_STATE,
  ITEM_ROSTER,
  ITEM_STARTED,
  ITEM_FINISHED,
  ITEM_STOPPED,
} ItemKind;

typedef struct {
  RlxRosterRow *rows;   /* strings owned */
  guint         n;
  char         *role;
  guint         members;
} Snapshot;

typedef struct {
  ItemKind    kind;
  RlxEvent   *event;      /* EVENT: a reference (events are read-only, counted atomically) */
  char       *text;       /* LINK: peer id; STATE: state; FINISHED: message */
  gboolean    success;    /* FINISHED */
  GError     *error;      /* STARTED: NULL on success */
  Snapshot   *roster;     /* ROSTER */
} Item;

static void
snapshot_free (Snapshot *s)
{
  for (guint i = 0; i < s->n; i++)
    {
      RlxRosterRow *r = &s->rows[i];
      g_free ((char *) r->node_id);
      g_free ((char *) r->host);
      g_free ((char *) r->backend);
      g_free ((char *) r->device);
      g_free ((char *) r->fallback);
      g_free ((char *) r->precision);
      g_free ((char *) r->state);
      g_free ((char *) r->link);
    }
  g_free (s->rows);
  g_free (s->role);
  g_free (s);
}

static void
item_free (Item *item)
{
  g_clear_pointer (&item->event, rlx_event_unref);
  g_clear_pointer (&item->roster, snapshot_free);
  g_clear_error (&item->error);
  g_free (item->text);
  g_free (item);
}

static Item *
item_new (ItemKind kind)
{
  Item *item = g_new0 (Item, 1);

  item->kind = kind;
  return item;
}

/* ── the shared half ───────────────────────────────────────────────────── */

typedef struct {
  char               *invite, *host_address, *advertise, *cohort, *node_id, *model;
  char               *dataset, *backend, *checkpoint_dir;
  char               *stun, *turn, *turn_user, *turn_password;
  RlxNodeRemoteTuning tuning;
  RlxNodeConfig       config;   /* points into the fields above */
} ConfigCopy;

typedef struct {
  gatomicrefcount   ref;
  GMutex            lock;

  /* under lock */
  GQueue            items;          /* Item*, oldest first */
  gboolean          flush_pending;  /* a flush source is attached to the owner context */
  gint64            last_flush_us;
  GMainContext     *node_ctx;       /* NULL before the thread runs and after it is gone */
  guint64           tx, rx, f32;
  char             *invite;
  clockid_t         cpu_clock;
  gboolean          cpu_clock_valid;
  double            cpu_final_s;

  /* fixed */
  GMainContext     *owner_ctx;
  ConfigCopy       *config;
  RlxNodeThreadHook hook;
  gpointer          hook_data;

  /* node thread only */
  GMainLoop        *loop;
  RlxNode          *node;
  RlxCoordinator   *coord;
  GCancellable     *start_cancellable;
  RlxPrecision      precision;      /* the precision asked for last */
  guint             starts_in_flight, leaves_in_flight;
  gboolean          aborting;

  /* owner thread only */
  RlxNodeThread    *owner;          /* NULL once disposed */
} Shared;

static void
config_copy_free (ConfigCopy *c)
{
  g_free (c->invite);
  g_free (c->host_address);
  g_free (c->advertise);
  g_free (c->cohort);
  g_free (c->node_id);
  g_free (c->model);
  g_free (c->dataset);
  g_free (c->backend);
  g_free (c->checkpoint_dir);
  g_free (c->stun);
  g_free (c->turn);
  g_free (c->turn_user);
  g_free (c->turn_password);
  g_free (c);
}

/* A deep copy of @config whose node id and cohort are the ones fixed. */
static ConfigCopy *
config_copy_new (const RlxNodeConfig *config, const char *cohort, const char *node_id)
{
  ConfigCopy *c = g_new0 (ConfigCopy, 1);

  c->config = *config;
  c->config.invite = c->invite = g_strdup (config->invite);
  c->config.host_address = c->host_address = g_strdup (config->host_address);
  c->config.advertise = c->advertise = g_strdup (config->advertise);
  c->config.cohort = c->cohort = g_strdup (cohort);
  c->config.node_id = c->node_id = g_strdup (node_id);
  c->config.model = c->model = g_strdup (config->model);
  c->config.dataset = c->dataset = g_strdup (config->dataset);
  c->config.backend = c->backend = g_strdup (config->backend);
  c->config.checkpoint_dir = c->checkpoint_dir = g_strdup (config->checkpoint_dir);
  if (config->remote_tuning)
    {
      c->tuning = *config->remote_tuning;
      c->tuning.stun = c->stun = g_strdup (config->remote_tuning->stun);
      c->tuning.turn = c->turn = g_strdup (config->remote_tuning->turn);
      c->tuning.turn_user = c->turn_user = g_strdup (config->remote_tuning->turn_user);
      c->tuning.turn_password = c->turn_password = g_strdup (config->remote_tuning->turn_password);
      c->config.remote_tuning = &c->tuning;
    }
  return c;
}

static Shared *
shared_ref (Shared *sh)
{
  g_atomic_ref_count_inc (&sh->ref);
  return sh;
}

static void
shared_unref (Shared *sh)
{
  if (!g_atomic_ref_count_dec (&sh->ref))
    return;
  g_assert (sh->node_ctx == NULL);
  g_assert (sh->node == NULL);
  g_queue_clear_full (&sh->items, (GDestroyNotify) item_free);
  g_main_context_unref (sh->owner_ctx);
  g_clear_pointer (&sh->config, config_copy_free);
  g_free (sh->invite);
  g_mutex_clear (&sh->lock);
  g_free (sh);
}

/* ── the owner object ──────────────────────────────────────────────────── */

struct _RlxNodeThread
{
  GObject       parent_instance;

  Shared       *sh;
  GThread      *thread;        /* from start until the "stopped" item is delivered */
  gboolean      started;
  char         *cohort;
  char         *node_id;
  const char   *state;         /* interned */
  GTask        *start_task;
  GCancellable *start_cancellable;   /* the caller's, forwarded to the node thread */
  gulong        start_cancelled_id;
  GPtrArray    *leave_tasks;   /* GTask*: completed once the thread is joined */
  RlxRoster    *roster;
  const char   *role;          /* interned */
  guint         members;
  guint64       step;
  RlxPrecision  precision;
};

G_DEFINE_FINAL_TYPE (RlxNodeThread, rlx_node_thread, G_TYPE_OBJECT)

enum { PROP_0, PROP_STATE, PROP_COHORT, PROP_NODE_ID, N_PROPS };
enum { SIG_EVENT, SIG_LINK_ADDED, SIG_FINISHED, N_SIGNALS };
static GParamSpec *props[N_PROPS];
static guint signals[N_SIGNALS];

static gboolean flush_cb (gpointer data);

/* Owner thread: the caller's cancellable no longer reaches the node. */
static void
forget_start_cancellable (RlxNodeThread *self)
{
  if (self->start_cancellable)
    g_cancellable_disconnect (self->start_cancellable, self->start_cancelled_id);
  self->start_cancelled_id = 0;
  g_clear_object (&self->start_cancellable);
}

static void
on_start_cancelled (GCancellable *cancellable, gpointer data)
{
  g_cancellable_cancel (data);   /* the node thread's (GCancellable is thread-safe) */
}

/* ── node thread → owner ───────────────────────────────────────────────── */

/* Node thread: queue @item for the owner, and make sure one flush is on its
 * way (at most one at a time; not sooner than FLUSH_INTERVAL_MS after the
 * last). */
static void
post (Shared *sh, Item *item)
{
  gint64 wait_us = 0;
  gboolean attach;

  g_mutex_lock (&sh->lock);
  g_queue_push_tail (&sh->items, item);
  attach = !sh->flush_pending;
  if (attach)
    {
      sh->flush_pending = TRUE;
      wait_us = sh->last_flush_us + FLUSH_INTERVAL_MS * 1000 - g_get_monotonic_time ();
    }
  g_mutex_unlock (&sh->lock);

  if (attach)
    {
      g_autoptr(GSource) source = wait_us > 0
        ? g_timeout_source_new ((guint) ((wait_us + 999) / 1000))
        : g_idle_source_new ();

      g_source_set_priority (source, G_PRIORITY_DEFAULT);
      g_source_set_static_name (source, "[rlx] node thread results");
      g_source_set_callback (source, flush_cb, shared_ref (sh), (GDestroyNotify) shared_unref);
      g_source_attach (source, sh->owner_ctx);
    }
}

static void
store_invite (Shared *sh)
{
  g_autofree char *invite = rlx_node_dup_invite (sh->node);

  g_mutex_lock (&sh->lock);
  if (g_strcmp0 (invite, sh->invite) != 0)
    {
      g_free (sh->invite);
      sh->invite = g_steal_pointer (&invite);
    }
  g_mutex_unlock (&sh->lock);
}

static void
on_node_event (RlxNode *node, RlxEvent *event, Shared *sh)
{
  Item *item = item_new (ITEM_EVENT);

  if (event->kind == RLX_EVENT_INVITE || event->kind == RLX_EVENT_JOINED)
    store_invite (sh);
  item->event = rlx_event_ref (event);
  post (sh, item);
}

static void
on_node_link_added (RlxNode *node, RlxLink *link, const char *peer_id, Shared *sh)
{
  Item *item = item_new (ITEM_LINK);

  item->text = g_strdup (peer_id);
  post (sh, item);
}

static void
on_node_finished (RlxNode *node, gboolean success, const char *message, Shared *sh)
{
  Item *item = item_new (ITEM_FINISHED);

  item->success = success;
  item->text = g_strdup (message);
  post (sh, item);
}

/* The node thread's loop ends once the node stopped and nothing it
 * started is still in flight. */
static void
maybe_quit (Shared *sh)
{
  if (sh->node == NULL)
    return;   /* tearing down already */
  if (sh->starts_in_flight == 0 && sh->leaves_in_flight == 0 &&
      (sh->aborting || g_str_equal (rlx_node_get_state (sh->node), "stopped")))
    g_main_loop_quit (sh->loop);
}

static void
on_node_state (RlxNode *node, GParamSpec *pspec, Shared *sh)
{
  Item *item = item_new (ITEM_STATE);

  item->text = g_strdup (rlx_node_get_state (node));
  store_invite (sh);
  post (sh, item);
  maybe_quit (sh);
}

static void
take_snapshot (Shared *sh)
{
  GListModel *roster = rlx_coordinator_get_roster (sh->coord);
  Snapshot *s = g_new0 (Snapshot, 1);
  Item *item = item_new (ITEM_ROSTER);

  s->n = g_list_model_get_n_items (roster);
  s->rows = g_new0 (RlxRosterRow, MAX (s->n, 1));
  for (guint i = 0; i < s->n; i++)
    {
      g_autoptr(RlxRosterEntry) e = g_list_model_get_item (roster, i);
      RlxRosterRow *r = &s->rows[i];

      r->node_id = g_strdup (rlx_roster_entry_get_node_id (e));
      r->host = g_strdup (rlx_roster_entry_get_host (e));
      r->backend = g_strdup (rlx_roster_entry_get_backend (e));
      r->device = g_strdup (rlx_roster_entry_get_device (e));
      r->fallback = g_strdup (rlx_roster_entry_get_fallback (e));
      r->precision = g_strdup (rlx_roster_entry_get_precision (e));
      r->state = g_strdup (rlx_roster_entry_get_state (e));
      r->link = g_strdup (rlx_roster_entry_get_link (e));
      r->speed = rlx_roster_entry_get_speed (e);
      r->bytes_tx = rlx_roster_entry_get_bytes_tx (e);
      r->bytes_rx = rlx_roster_entry_get_bytes_rx (e);
      r->is_leader = rlx_roster_entry_get_is_leader (e);
      r->is_self = rlx_roster_entry_get_is_self (e);
    }
  s->role = g_strdup (rlx_coordinator_get_role (sh->coord));
  g_object_get (sh->coord, "members", &s->members, NULL);
  item->roster = s;
  post (sh, item);
}

static void
on_coord_roster (RlxCoordinator *coord, GParamSpec *pspec, Shared *sh)
{
  take_snapshot (sh);
}

static void
store_bytes (Shared *sh)
{
  guint64 tx = rlx_coordinator_get_bytes_tx (sh->coord);
  guint64 rx = rlx_coordinator_get_bytes_rx (sh->coord);
  guint64 f32 = rlx_coordinator_get_bytes_f32 (sh->coord);

  g_mutex_lock (&sh->lock);
  sh->tx = tx;
  sh->rx = rx;
  sh->f32 = f32;
  g_mutex_unlock (&sh->lock);
}

static void
on_coord_bytes (RlxCoordinator *coord, GParamSpec *pspec, Shared *sh)
{
  store_bytes (sh);
}

static void
drop_coordinator (Shared *sh)
{
  if (sh->coord == NULL)
    return;
  store_bytes (sh);   /* the last figures stay */
  g_signal_handlers_disconnect_by_data (sh->coord, sh);
  g_clear_object (&sh->coord);
}

static void
on_node_coordinator (RlxNode *node, GParamSpec *pspec, Shared *sh)
{
  RlxCoordinator *coord = rlx_node_get_coordinator (node);

  if (coord == sh->coord)
    return;
  drop_coordinator (sh);
  if (coord == NULL)
    return;
  sh->coord = g_object_ref (coord);
  /* "members" is notified by every roster sync */
  g_signal_connect (coord, "notify::members", G_CALLBACK (on_coord_roster), sh);
  g_signal_connect (coord, "notify::role", G_CALLBACK (on_coord_roster), sh);
  g_signal_connect (coord, "notify::bytes-tx", G_CALLBACK (on_coord_bytes), sh);
  g_signal_connect (coord, "notify::bytes-rx", G_CALLBACK (on_coord_bytes), sh);
  g_signal_connect (coord, "notify::bytes-f32", G_CALLBACK (on_coord_bytes), sh);
  /* the owner may have changed it while the backend resolved */
  rlx_coordinator_set_precision (coord, sh->precision);
  store_bytes (sh);
  take_snapshot (sh);
}

static void
on_node_started (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Shared *sh = user_data;
  Item *item = item_new (ITEM_STARTED);

  if (rlx_node_start_finish (RLX_NODE (source), result, &item->error))
    store_invite (sh);   /* before the owner hears it runs */
  post (sh, item);
  sh->starts_in_flight--;
  maybe_quit (sh);
}

static void
on_node_left (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Shared *sh = user_data;

  rlx_node_leave_finish (RLX_NODE (source), result, NULL);
  sh->leaves_in_flight--;
  maybe_quit (sh);
}

static double
clock_seconds (clockid_t clock)
{
  struct timespec ts;

  if (clock_gettime (clock, &ts) != 0)
    return 0;
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static gboolean
on_abort_tick (gpointer data)
{
  return G_SOURCE_CONTINUE;   /* only wakes the iteration below */
}

static gpointer
node_thread_main (gpointer data)
{
  Shared *sh = data;
  g_autoptr(GError) error = NULL;
  GMainContext *ctx;
  clockid_t clock;

  g_mutex_lock (&sh->lock);
  ctx = g_main_context_ref (sh->node_ctx);
  sh->cpu_clock_valid = pthread_getcpuclockid (pthread_self (), &sh->cpu_clock) == 0;
  g_mutex_unlock (&sh->lock);
  g_main_context_push_thread_default (ctx);
  sh->loop = g_main_loop_new (ctx, FALSE);

  sh->node = rlx_node_new (&sh->config->config, &error);
  if (sh->node == NULL)
    {
      /* checked on the owner thread already: not expected */
      Item *item = item_new (ITEM_STARTED);
      item->error = g_steal_pointer (&error);
      post (sh, item);
    }
  else
    {
      g_signal_connect (sh->node, "event", G_CALLBACK (on_node_event), sh);
      g_signal_connect (sh->node, "link-added", G_CALLBACK (on_node_link_added), sh);
      g_signal_connect (sh->node, "finished", G_CALLBACK (on_node_finished), sh);
      g_signal_connect (sh->node, "notify::state", G_CALLBACK (on_node_state), sh);
      g_signal_connect (sh->node, "notify::coordinator", G_CALLBACK (on_node_coordinator), sh);
      if (sh->hook)
        sh->hook (sh->node, sh->hook_data);
      sh->starts_in_flight++;
      rlx_node_start_async (sh->node, sh->start_cancellable, on_node_started, sh);
      if (!sh->aborting)
        g_main_loop_run (sh->loop);

      /* Stopped (or the owner went away): drop the node here, where it lived. */
      drop_coordinator (sh);
      g_signal_handlers_disconnect_by_data (sh->node, sh);
      g_clear_object (&sh->node);
      if (sh->starts_in_flight > 0 || sh->leaves_in_flight > 0)
        {
          /* only after g_object_run_dispose: let them land, briefly */
          gint64 deadline = g_get_monotonic_time () + ABORT_GRACE_US;
          g_autoptr(GSource) tick = g_timeout_source_new (100);

          g_cancellable_cancel (sh->start_cancellable);
          g_source_set_callback (tick, on_abort_tick, NULL, NULL);
          g_source_attach (tick, ctx);
          while ((sh->starts_in_flight > 0 || sh->leaves_in_flight > 0) &&
                 g_get_monotonic_time () < deadline)
            g_main_context_iteration (ctx, TRUE);
          g_source_destroy (tick);
        }
    }
  /* what the node's teardown left to run (bounded), then nothing more comes in */
  for (guint i = 0; i < 100 && g_main_context_iteration (ctx, FALSE); i++)
    ;
  g_mutex_lock (&sh->lock);
  g_clear_pointer (&sh->node_ctx, g_main_context_unref);
  clock = sh->cpu_clock;
  if (sh->cpu_clock_valid)
    sh->cpu_final_s = clock_seconds (clock);
  sh->cpu_clock_valid = FALSE;
  g_mutex_unlock (&sh->lock);
  g_clear_object (&sh->start_cancellable);
  g_clear_pointer (&sh->loop, g_main_loop_unref);
  g_main_context_pop_thread_default (ctx);
  g_main_context_unref (ctx);   /* the last reference: anything still attached goes here */

  post (sh, item_new (ITEM_STOPPED));
  shared_unref (sh);
  return NULL;
}

/* ── owner → node thread ───────────────────────────────────────────────── */

/* Run @func (@data) on the node thread, if it still runs; else just free
 * @data. */
static void
node_invoke (Shared *sh, GSourceFunc func, gpointer data, GDestroyNotify free_data)
{
  g_mutex_lock (&sh->lock);
  if (sh->node_ctx)
    {
      g_autoptr(GSource) source = g_idle_source_new ();

      g_source_set_priority (source, G_PRIORITY_DEFAULT);
      g_source_set_static_name (source, "[rlx] node thread call");
      g_source_set_callback (source, func, data, free_data);
      g_source_attach (source, sh->node_ctx);
      data = NULL;
    }
  g_mutex_unlock (&sh->lock);
  if (data && free_data)
    free_data (data);
}

typedef struct {
  Shared *sh;
  char   *reason;
} LeaveCall;

static void
leave_call_free (LeaveCall *call)
{
  g_free (call->reason);
  g_free (call);
}

static gboolean
leave_on_node (gpointer data)
{
  LeaveCall *call = data;
  Shared *sh = call->sh;

  if (sh->node == NULL)
    return G_SOURCE_REMOVE;   /* gone already: the leave completes when the thread is */
  sh->leaves_in_flight++;
  rlx_node_leave_async (sh->node, call->reason, on_node_left, sh);
  return G_SOURCE_REMOVE;
}

typedef struct {
  Shared      *sh;
  RlxPrecision precision;
} PrecisionCall;

static gboolean
precision_on_node (gpointer data)
{
  PrecisionCall *call = data;
  Shared *sh = call->sh;

  sh->precision = call->precision;
  if (sh->coord)
    rlx_coordinator_set_precision (sh->coord, call->precision);
  return G_SOURCE_REMOVE;
}

static gboolean
abort_on_node (gpointer data)
{
  Shared *sh = data;

  sh->aborting = TRUE;
  g_cancellable_cancel (sh->start_cancellable);
  g_main_loop_quit (sh->loop);
  return G_SOURCE_REMOVE;
}

/* ── delivery on the owner thread ──────────────────────────────────────── */

static void
set_state (RlxNodeThread *self, const char *state)
{
  state = g_intern_string (state);
  if (self->state == state)
    return;
  self->state = state;
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_STATE]);
}

static void
thread_gone (RlxNodeThread *self)
{
  g_autoptr(GPtrArray) leaves = NULL;

  if (self->thread)
    g_thread_join (g_steal_pointer (&self->thread));   /* it returned already, or is about to */
  forget_start_cancellable (self);
  leaves = g_steal_pointer (&self->leave_tasks);
  self->leave_tasks = g_ptr_array_new_with_free_func (g_object_unref);
  if (self->start_task)
    {
      g_autoptr(GTask) task = g_steal_pointer (&self->start_task);
      g_task_return_new_error (task, RLX_NODE_ERROR, RLX_NODE_ERROR_STATE,
                               "the node stopped before it ran");
    }
  set_state (self, "stopped");
  for (guint i = 0; i < leaves->len; i++)
    g_task_return_boolean (g_ptr_array_index (leaves, i), TRUE);
}

static void
deliver (RlxNodeThread *self, Item *item)
{
  switch (item->kind)
    {
    case ITEM_EVENT:
      if (item->event->kind == RLX_EVENT_STEP)
        self->step = item->event->u.step.step;
      g_signal_emit (self, signals[SIG_EVENT], 0, item->event);
      break;
    case ITEM_LINK:
      g_signal_emit (self, signals[SIG_LINK_ADDED], 0, item->text);
      break;
    case ITEM_STATE:
      set_state (self, item->text);
      break;
    case ITEM_ROSTER:
      self->role = g_intern_string (item->roster->role);
      self->members = item->roster->members;
      rlx_roster_sync (self->roster, item->roster->rows, item->roster->n);
      break;
    case ITEM_STARTED:
      forget_start_cancellable (self);
      if (self->start_task)
        {
          g_autoptr(GTask) task = g_steal_pointer (&self->start_task);
          if (item->error)
            g_task_return_error (task, g_steal_pointer (&item->error));
          else
            g_task_return_boolean (task, TRUE);
        }
      break;
    case ITEM_FINISHED:
      g_signal_emit (self, signals[SIG_FINISHED], 0, item->success, item->text);
      break;
    case ITEM_STOPPED:
      thread_gone (self);
      break;
    default:
      g_assert_not_reached ();
    }
}

/* Owner thread: take everything queued and deliver it in order. */
static gboolean
flush_cb (gpointer data)
{
  Shared *sh = data;
  g_autoptr(RlxNodeThread) owner = sh->owner ? g_object_ref (sh->owner) : NULL;
  GQueue items = G_QUEUE_INIT;
  Item *last_roster = NULL;
  Item *item;

  g_mutex_lock (&sh->lock);
  items = sh->items;
  g_queue_init (&sh->items);
  sh->flush_pending = FALSE;
  sh->last_flush_us = g_get_monotonic_time ();
  g_mutex_unlock (&sh->lock);

  /* only the newest roster snapshot of a batch matters */
  for (GList *l = items.head; l; l = l->next)
    if (((Item *) l->data)->kind == ITEM_ROSTER)
      last_roster = l->data;
  while ((item = g_queue_pop_head (&items)))
    {
      /* a handler may dispose the owner: then the rest is only freed */
      if (owner && sh->owner == owner && (item->kind != ITEM_ROSTER || item == last_roster))
        deliver (owner, item);
      item_free (item);
    }
  return G_SOURCE_REMOVE;
}

/* ── public ────────────────────────────────────────────────────────────── */

RlxNodeThread *
rlx_node_thread_new (const RlxNodeConfig *config, GError **error)
{
  g_autoptr(RlxNode) check = NULL;
  RlxNodeThread *self;
  Shared *sh;

  g_return_val_if_fail (config != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  /* the same checks, the same errors; and the node id it would take */
  check = rlx_node_new (config, error);
  if (check == NULL)
    return NULL;

  self = g_object_new (RLX_TYPE_NODE_THREAD, NULL);
  self->cohort = g_strdup (rlx_node_get_cohort (check));
  self->node_id = g_strdup (rlx_node_get_node_id (check));
  self->precision = config->precision;
  sh = self->sh;
  /* an invite names the cohort itself: leave it to the invite */
  sh->config = config_copy_new (config, config->invite && *config->invite ? config->cohort
                                                                           : self->cohort,
                                self->node_id);
  sh->precision = config->precision;
  return self;
}

void
rlx_node_thread_set_node_hook (RlxNodeThread *self, RlxNodeThreadHook hook, gpointer user_data)
{
  g_return_if_fail (RLX_IS_NODE_THREAD (self));
  g_return_if_fail (!self->started);

  self->sh->hook = hook;
  self->sh->hook_data = user_data;
}

void
rlx_node_thread_start_async (RlxNodeThread      *self,
                             GCancellable       *cancellable,
                             GAsyncReadyCallback callback,
                             gpointer            user_data)
{
  g_autoptr(GTask) task = NULL;
  g_autoptr(GError) error = NULL;
  Shared *sh;

  g_return_if_fail (RLX_IS_NODE_THREAD (self));

  task = g_task_new (self, cancellable, callback, user_data);
  g_task_set_source_tag (task, rlx_node_thread_start_async);
  if (self->started)
    {
      g_task_return_new_error (task, RLX_NODE_ERROR, RLX_NODE_ERROR_STATE,
                               "this node was started already: make a new one to join again");
      return;
    }
  self->started = TRUE;
  sh = self->sh;
  sh->start_cancellable = g_cancellable_new ();
  g_mutex_lock (&sh->lock);
  sh->node_ctx = g_main_context_new ();
  g_mutex_unlock (&sh->lock);
  self->thread = g_thread_try_new ("rlx-node", node_thread_main, shared_ref (sh), &error);
  if (self->thread == NULL)
    {
      g_mutex_lock (&sh->lock);
      g_clear_pointer (&sh->node_ctx, g_main_context_unref);
      g_mutex_unlock (&sh->lock);
      g_clear_object (&sh->start_cancellable);
      shared_unref (sh);
      set_state (self, "stopped");
      g_task_return_new_error (task, RLX_NODE_ERROR, RLX_NODE_ERROR_STATE,
                               "could not start the node's thread: %s", error->message);
      return;
    }
  self->start_task = g_steal_pointer (&task);
  if (cancellable)
    {
      self->start_cancellable = g_object_ref (cancellable);
      self->start_cancelled_id = g_cancellable_connect (cancellable,
                                                        G_CALLBACK (on_start_cancelled),
                                                        g_object_ref (sh->start_cancellable),
                                                        g_object_unref);
    }
}

gboolean
rlx_node_thread_start_finish (RlxNodeThread *self, GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

void
rlx_node_thread_leave_async (RlxNodeThread      *self,
                             const char         *reason,
                             GAsyncReadyCallback callback,
                             gpointer            user_data)
{
  g_autoptr(GTask) task = NULL;
  LeaveCall *call;

  g_return_if_fail (RLX_IS_NODE_THREAD (self));

  task = g_task_new (self, NULL, callback, user_data);
  g_task_set_source_tag (task, rlx_node_thread_leave_async);
  if (self->thread == NULL)
    {
      set_state (self, "stopped");
      g_task_return_boolean (task, TRUE);
      return;
    }
  g_ptr_array_add (self->leave_tasks, g_steal_pointer (&task));
  call = g_new0 (LeaveCall, 1);
  call->sh = self->sh;
  call->reason = g_strdup (reason ? reason : "left");
  node_invoke (self->sh, leave_on_node, call, (GDestroyNotify) leave_call_free);
}

gboolean
rlx_node_thread_leave_finish (RlxNodeThread *self, GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

const char *
rlx_node_thread_get_state (RlxNodeThread *self)
{
  g_return_val_if_fail (RLX_IS_NODE_THREAD (self), NULL);
  return self->state;
}

const char *
rlx_node_thread_get_cohort (RlxNodeThread *self)
{
  g_return_val_if_fail (RLX_IS_NODE_THREAD (self), NULL);
  return self->cohort;
}

const char *
rlx_node_thread_get_node_id (RlxNodeThread *self)
{
  g_return_val_if_fail (RLX_IS_NODE_THREAD (self), NULL);
  return self->node_id;
}

char *
rlx_node_thread_dup_invite (RlxNodeThread *self)
{
  char *invite;

  g_return_val_if_fail (RLX_IS_NODE_THREAD (self), NULL);
  g_mutex_lock (&self->sh->lock);
  invite = g_strdup (self->sh->invite);
  g_mutex_unlock (&self->sh->lock);
  return invite;
}

GListModel *
rlx_node_thread_get_roster (RlxNodeThread *self)
{
  g_return_val_if_fail (RLX_IS_NODE_THREAD (self), NULL);
  return G_LIST_MODEL (self->roster);
}

const char *
rlx_node_thread_get_role (RlxNodeThread *self)
{
  g_return_val_if_fail (RLX_IS_NODE_THREAD (self), NULL);
  return self->role;
}

guint
rlx_node_thread_get_members (RlxNodeThread *self)
{
  g_return_val_if_fail (RLX_IS_NODE_THREAD (self), 0);
  return self->members;
}

guint64
rlx_node_thread_get_step (RlxNodeThread *self)
{
  g_return_val_if_fail (RLX_IS_NODE_THREAD (self), 0);
  return self->step;
}

void
rlx_node_thread_set_precision (RlxNodeThread *self, RlxPrecision precision)
{
  PrecisionCall *call;

  g_return_if_fail (RLX_IS_NODE_THREAD (self));
  g_return_if_fail ((guint) precision < RLX_PRECISION_COUNT);

  self->precision = precision;
  if (!self->started)
    {
      self->sh->precision = precision;   /* the thread reads it once it runs */
      return;
    }
  call = g_new0 (PrecisionCall, 1);
  call->sh = self->sh;
  call->precision = precision;
  node_invoke (self->sh, precision_on_node, call, g_free);
}

RlxPrecision
rlx_node_thread_get_precision (RlxNodeThread *self)
{
  g_return_val_if_fail (RLX_IS_NODE_THREAD (self), RLX_PRECISION_F32);
  return self->precision;
}

void
rlx_node_thread_get_bytes (RlxNodeThread *self, guint64 *tx, guint64 *rx, guint64 *f32)
{
  g_return_if_fail (RLX_IS_NODE_THREAD (self));

  g_mutex_lock (&self->sh->lock);
  if (tx)
    *tx = self->sh->tx;
  if (rx)
    *rx = self->sh->rx;
  if (f32)
    *f32 = self->sh->f32;
  g_mutex_unlock (&self->sh->lock);
}

double
rlx_node_thread_get_cpu_seconds (RlxNodeThread *self)
{
  double s;

  g_return_val_if_fail (RLX_IS_NODE_THREAD (self), 0);

  g_mutex_lock (&self->sh->lock);
  s = self->sh->cpu_clock_valid ? clock_seconds (self->sh->cpu_clock) : self->sh->cpu_final_s;
  g_mutex_unlock (&self->sh->lock);
  return s;
}

/* ── GObject ───────────────────────────────────────────────────────────── */

static void
rlx_node_thread_dispose (GObject *object)
{
  RlxNodeThread *self = RLX_NODE_THREAD (object);

  if (self->sh)
    {
      self->sh->owner = NULL;   /* queued items are freed, not delivered */
      if (self->thread)
        {
          /* dropped while running: the node goes on its own thread (its
           * links close, as when a process goes away), then the thread */
          node_invoke (self->sh, abort_on_node, self->sh, NULL);
          g_thread_join (g_steal_pointer (&self->thread));
        }
      g_clear_pointer (&self->sh, shared_unref);
    }
  forget_start_cancellable (self);
  if (self->start_task)
    {
      g_autoptr(GTask) task = g_steal_pointer (&self->start_task);
      g_task_return_new_error (task, G_IO_ERROR, G_IO_ERROR_CANCELLED, "the node was dropped");
    }
  G_OBJECT_CLASS (rlx_node_thread_parent_class)->dispose (object);
}

static void
rlx_node_thread_finalize (GObject *object)
{
  RlxNodeThread *self = RLX_NODE_THREAD (object);

  g_clear_pointer (&self->leave_tasks, g_ptr_array_unref);
  g_clear_object (&self->roster);
  g_free (self->cohort);
  g_free (self->node_id);
  G_OBJECT_CLASS (rlx_node_thread_parent_class)->finalize (object);
}

static void
rlx_node_thread_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  RlxNodeThread *self = RLX_NODE_THREAD (object);

  switch (id)
    {
    case PROP_STATE: g_value_set_string (value, self->state); break;
    case PROP_COHORT: g_value_set_string (value, self->cohort); break;
    case PROP_NODE_ID: g_value_set_string (value, self->node_id); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_node_thread_class_init (RlxNodeThreadClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags f = G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;

  object_class->dispose = rlx_node_thread_dispose;
  object_class->finalize = rlx_node_thread_finalize;
  object_class->get_property = rlx_node_thread_get_property;

  props[PROP_STATE] = g_param_spec_string ("state", NULL, NULL, "idle", f);
  props[PROP_COHORT] = g_param_spec_string ("cohort", NULL, NULL, NULL, f);
  props[PROP_NODE_ID] = g_param_spec_string ("node-id", NULL, NULL, NULL, f);
  g_object_class_install_properties (object_class, N_PROPS, props);

  signals[SIG_EVENT] = g_signal_new ("event", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
                                     NULL, NULL, NULL, G_TYPE_NONE, 1,
                                     RLX_TYPE_EVENT | G_SIGNAL_TYPE_STATIC_SCOPE);
  signals[SIG_LINK_ADDED] = g_signal_new ("link-added", G_TYPE_FROM_CLASS (klass),
                                          G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL, G_TYPE_NONE,
                                          1, G_TYPE_STRING);
  signals[SIG_FINISHED] = g_signal_new ("finished", G_TYPE_FROM_CLASS (klass),
                                        G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL, G_TYPE_NONE, 2,
                                        G_TYPE_BOOLEAN, G_TYPE_STRING);
}

static void
rlx_node_thread_init (RlxNodeThread *self)
{
  Shared *sh = g_new0 (Shared, 1);

  g_atomic_ref_count_init (&sh->ref);
  g_mutex_init (&sh->lock);
  g_queue_init (&sh->items);
  sh->owner_ctx = g_main_context_ref_thread_default ();
  sh->owner = self;
  self->sh = sh;
  self->state = g_intern_static_string ("idle");
  self->role = g_intern_static_string ("alone");
  self->leave_tasks = g_ptr_array_new_with_free_func (g_object_unref);
  self->roster = rlx_roster_new ();
}
