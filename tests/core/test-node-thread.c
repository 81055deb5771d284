/* test-node-thread.c — RlxNodeThread: the app's node on a thread of its own
 *
 * Real nodes on the real local bus (Unix sockets in a temporary
 * XDG_RUNTIME_DIR), CPU backend, small synthetic batches. The test's main
 * thread is the owner; what runs on the node's thread is recorded there
 * (through the hook) and checked here. Every wait is on an event, with a
 * timeout.
 */
#include "node-test-utils.h"
#include "core/rlx-node-thread.h"
#include "core/wire/rlx-wire.h"

#include <glib/gstdio.h>
#include <unistd.h>

#define TIMEOUT_MS 60000
/* the owner is woken at most this often (rlx-node-thread.c) */
#define FLUSH_INTERVAL_MS 50

static GThread *main_thread;

/* ── what happens on the node thread ───────────────────────────────────── */

typedef struct {
  GMutex     lock;
  GThread   *thread;        /* the one thread node-side handlers ran on */
  pid_t      tid;           /* its kernel thread id (from the hook) */
  guint      on_main;       /* node-side handler calls on the main thread */
  guint      off_thread;    /* … on a thread other than the first one seen */
  guint      no_context;    /* … without a thread-default context of its own */
  guint      calls;
  GPtrArray *names;         /* char*: the node's events, as it emitted them */
} NodeSide;

static void
node_side_saw (NodeSide *ns)
{
  GMainContext *ctx = g_main_context_get_thread_default ();

  g_mutex_lock (&ns->lock);
  ns->calls++;
  if (ns->thread == NULL)
    ns->thread = g_thread_self ();
  if (g_thread_self () == main_thread)
    ns->on_main++;
  if (g_thread_self () != ns->thread)
    ns->off_thread++;
  if (ctx == NULL || ctx == g_main_context_default ())
    ns->no_context++;
  g_mutex_unlock (&ns->lock);
}

static void
on_node_side_event (RlxNode *node, RlxEvent *event, NodeSide *ns)
{
  node_side_saw (ns);
  g_mutex_lock (&ns->lock);
  g_ptr_array_add (ns->names, g_strdup (rlx_event_name (event)));
  g_mutex_unlock (&ns->lock);
}

static void
on_node_side_link (RlxNode *node, RlxLink *link, const char *peer_id, NodeSide *ns)
{
  node_side_saw (ns);
}

static void
on_node_side_coord_notify (RlxCoordinator *coord, GParamSpec *pspec, NodeSide *ns)
{
  /* role changes come from the coordinator's timers and handlers */
  node_side_saw (ns);
}

static void
on_node_side_coordinator (RlxNode *node, GParamSpec *pspec, NodeSide *ns)
{
  RlxCoordinator *coord = rlx_node_get_coordinator (node);

  node_side_saw (ns);
  if (coord)
    {
      g_signal_connect (coord, "notify::role", G_CALLBACK (on_node_side_coord_notify), ns);
      g_signal_connect (coord, "notify::members", G_CALLBACK (on_node_side_coord_notify), ns);
    }
}

/* RlxNodeThreadHook: on the node thread, before the node starts */
static void
node_hook (RlxNode *node, gpointer data)
{
  NodeSide *ns = data;

  node_side_saw (ns);
  g_mutex_lock (&ns->lock);
  ns->tid = gettid ();
  g_mutex_unlock (&ns->lock);
  g_signal_connect (node, "event", G_CALLBACK (on_node_side_event), ns);
  g_signal_connect (node, "link-added", G_CALLBACK (on_node_side_link), ns);
  g_signal_connect (node, "notify::state", G_CALLBACK (on_node_side_coordinator), ns);
  g_signal_connect (node, "notify::coordinator", G_CALLBACK (on_node_side_coordinator), ns);
}

/* ── the owner's side ──────────────────────────────────────────────────── */

typedef struct {
  RlxNodeThread *node;
  NodeSide       ns;
  GPtrArray     *events;        /* JsonObject*: as delivered to the owner */
  GPtrArray     *peers;         /* char* */
  GArray        *batches;       /* guint: the source id each event came with */
  guint          wrong_thread;  /* owner-side callbacks off the main thread */
  guint          n_finished;
  gboolean       success;
  char          *message;
  GPtrArray     *states;
  gboolean       start_done, started, left;
  GError        *start_error;
} Fixture;

static void
owner_saw (Fixture *f)
{
  if (g_thread_self () != main_thread)
    f->wrong_thread++;
}

static void
on_event (RlxNodeThread *node, RlxEvent *event, Fixture *f)
{
  GSource *source = g_main_current_source ();
  guint id = source ? g_source_get_id (source) : 0;

  owner_saw (f);
  g_ptr_array_add (f->events, rlx_event_to_json (event));
  if (f->batches->len == 0 || g_array_index (f->batches, guint, f->batches->len - 1) != id)
    g_array_append_val (f->batches, id);
}

static void
on_link_added (RlxNodeThread *node, const char *peer_id, Fixture *f)
{
  owner_saw (f);
  g_ptr_array_add (f->peers, g_strdup (peer_id));
}

static void
on_finished (RlxNodeThread *node, gboolean success, const char *message, Fixture *f)
{
  owner_saw (f);
  f->n_finished++;
  f->success = success;
  g_free (f->message);
  f->message = g_strdup (message);
}

static void
on_state (RlxNodeThread *node, GParamSpec *pspec, Fixture *f)
{
  owner_saw (f);
  g_ptr_array_add (f->states, g_strdup (rlx_node_thread_get_state (node)));
}

static RlxNodeConfig
small_config (const char *cohort)
{
  RlxNodeConfig cfg = { 0 };

  cfg.cohort = cohort;
  cfg.model = "mnist-mlp";
  cfg.dataset = "synthetic";
  cfg.backend = "cpu";
  cfg.batch = 8;
  cfg.threads = 1;
  cfg.checkpoint_every = 0;
  return cfg;
}

static void
fixture_init (Fixture *f, const RlxNodeConfig *cfg)
{
  g_autoptr(GError) error = NULL;

  memset (f, 0, sizeof *f);
  g_mutex_init (&f->ns.lock);
  f->ns.names = g_ptr_array_new_with_free_func (g_free);
  f->events = g_ptr_array_new_with_free_func ((GDestroyNotify) json_object_unref);
  f->peers = g_ptr_array_new_with_free_func (g_free);
  f->states = g_ptr_array_new_with_free_func (g_free);
  f->batches = g_array_new (FALSE, FALSE, sizeof (guint));
  f->node = rlx_node_thread_new (cfg, &error);
  g_assert_no_error (error);
  rlx_node_thread_set_node_hook (f->node, node_hook, &f->ns);
  g_signal_connect (f->node, "event", G_CALLBACK (on_event), f);
  g_signal_connect (f->node, "link-added", G_CALLBACK (on_link_added), f);
  g_signal_connect (f->node, "finished", G_CALLBACK (on_finished), f);
  g_signal_connect (f->node, "notify::state", G_CALLBACK (on_state), f);
}

static void
fixture_clear (Fixture *f)
{
  g_clear_object (&f->node);
  g_ptr_array_unref (f->ns.names);
  g_mutex_clear (&f->ns.lock);
  g_ptr_array_unref (f->events);
  g_ptr_array_unref (f->peers);
  g_ptr_array_unref (f->states);
  g_array_unref (f->batches);
  g_free (f->message);
  g_clear_error (&f->start_error);
}

static void
on_started (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Fixture *f = user_data;

  owner_saw (f);
  f->start_done = TRUE;
  f->started = rlx_node_thread_start_finish (RLX_NODE_THREAD (source), result, &f->start_error);
}

static void
on_left (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Fixture *f = user_data;

  owner_saw (f);
  g_assert_true (rlx_node_thread_leave_finish (RLX_NODE_THREAD (source), result, NULL));
  f->left = TRUE;
}

static gboolean
start_done (gpointer data)
{
  return ((Fixture *) data)->start_done;
}

static gboolean
left (gpointer data)
{
  return ((Fixture *) data)->left;
}

static gboolean
finished (gpointer data)
{
  return ((Fixture *) data)->n_finished > 0;
}

static gboolean
stopped (gpointer data)
{
  return g_str_equal (rlx_node_thread_get_state (((Fixture *) data)->node), "stopped");
}

static void
start (Fixture *f)
{
  rlx_node_thread_start_async (f->node, NULL, on_started, f);
  g_assert_true (node_test_wait (start_done, f, TIMEOUT_MS));
  g_assert_no_error (f->start_error);
  g_assert_true (f->started);
  g_assert_cmpstr (rlx_node_thread_get_state (f->node), ==, "running");
}

static void
leave (Fixture *f)
{
  f->left = FALSE;
  rlx_node_thread_leave_async (f->node, "test over", on_left, f);
  g_assert_true (node_test_wait (left, f, TIMEOUT_MS));
  g_assert_cmpstr (rlx_node_thread_get_state (f->node), ==, "stopped");
}

static const char *
node_state (gpointer data)
{
  return rlx_node_thread_get_state (((Fixture *) data)->node);
}

static JsonObject *
wait_event (Fixture *f, const char *name, const char *key, gint64 min)
{
  return node_test_wait_event (f->events, name, key, min, TIMEOUT_MS, node_state, f);
}

/* The node thread (as its hook saw it) is a live thread of this process. */
static gboolean
node_thread_alive (Fixture *f)
{
  g_autofree char *path = NULL;
  g_autofree char *stat = NULL;
  const char *state;
  pid_t tid;

  g_mutex_lock (&f->ns.lock);
  tid = f->ns.tid;
  g_mutex_unlock (&f->ns.lock);
  g_assert_cmpint (tid, >, 0);
  path = g_strdup_printf ("/proc/self/task/%d/stat", (int) tid);
  if (!g_file_get_contents (path, &stat, NULL, NULL))
    return FALSE;
  /* "TID (comm) S …": an exiting task lingers a moment as Z or X */
  state = strrchr (stat, ')');
  return state && state[1] == ' ' && state[2] != 'Z' && state[2] != 'X';
}

static gboolean
node_thread_gone (gpointer data)
{
  return !node_thread_alive (data);
}

/* Every node-side callback ran on one thread, not the main one, with a
 * thread-default context of its own; every owner-side one on the main
 * thread. */
static void
assert_threads (Fixture *f)
{
  g_mutex_lock (&f->ns.lock);
  g_assert_cmpuint (f->ns.calls, >, 0);
  g_assert_nonnull (f->ns.thread);
  g_assert_true (f->ns.thread != main_thread);
  g_assert_cmpuint (f->ns.on_main, ==, 0);
  g_assert_cmpuint (f->ns.off_thread, ==, 0);
  g_assert_cmpuint (f->ns.no_context, ==, 0);
  g_mutex_unlock (&f->ns.lock);
  g_assert_cmpuint (f->wrong_thread, ==, 0);
}

/* ── cases ─────────────────────────────────────────────────────────────── */

/* Bad configurations fail at once, as rlx_node_new says; a good one gets
 * its node id here, before anything starts. */
static void
test_config (void)
{
  RlxNodeConfig cfg = small_config ("a/b");
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxNodeThread) node = NULL;

  g_assert_null (rlx_node_thread_new (&cfg, &error));
  g_assert_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "a/b"));
  g_clear_error (&error);

  cfg = small_config (NULL);
  cfg.invite = "rlx://example.org/demo";
  g_assert_null (rlx_node_thread_new (&cfg, &error));
  g_assert_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "rlx://HOST:PORT/COHORT#KEY"));
  g_clear_error (&error);

  cfg = small_config (NULL);
  node = rlx_node_thread_new (&cfg, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (rlx_node_thread_get_cohort (node), ==, "default");
  g_assert_true (rlx_node_name_is_valid (rlx_node_thread_get_node_id (node)));
  g_assert_cmpstr (rlx_node_thread_get_state (node), ==, "idle");
  g_assert_null (rlx_node_thread_dup_invite (node));
  g_assert_cmpuint (g_list_model_get_n_items (rlx_node_thread_get_roster (node)), ==, 0);
  g_assert_cmpfloat (rlx_node_thread_get_cpu_seconds (node), ==, 0);   /* no thread yet */
}

/* A node that trains N steps by itself: the protocol runs on the node
 * thread only, the owner gets every event in order (steps 1..N without a
 * gap) in batches no more often than the flush interval, and the thread is
 * gone once the node stopped. */
static void
test_steps_in_order (void)
{
  g_autofree char *cohort = node_test_cohort_name ("steps");
  RlxNodeConfig cfg = small_config (cohort);
  const guint64 n_steps = 40;
  guint64 expect = 1;
  gint64 t0, elapsed_ms;
  JsonObject *joined;
  Fixture f;

  cfg.steps = n_steps;
  fixture_init (&f, &cfg);
  t0 = g_get_monotonic_time ();
  start (&f);
  g_assert_true (node_thread_alive (&f));
  joined = wait_event (&f, "joined", NULL, 0);
  g_assert_cmpstr (json_object_get_string_member (joined, "node"), ==,
                   rlx_node_thread_get_node_id (f.node));
  g_assert_true (node_test_wait (finished, &f, TIMEOUT_MS));
  g_assert_true (f.success);
  g_assert_true (node_test_wait (stopped, &f, TIMEOUT_MS));
  elapsed_ms = (g_get_monotonic_time () - t0) / 1000;

  /* every step, in order, none twice */
  for (guint i = 0; i < f.events->len; i++)
    {
      JsonObject *e = g_ptr_array_index (f.events, i);
      if (!g_str_equal (json_object_get_string_member (e, "event"), "step"))
        continue;
      g_assert_cmpint (json_object_get_int_member (e, "step"), ==, (gint64) expect);
      expect++;
    }
  g_assert_cmpuint (expect - 1, ==, n_steps);
  g_assert_cmpuint (rlx_node_thread_get_step (f.node), ==, n_steps);
  /* the owner got exactly what the node emitted, in the same order */
  g_mutex_lock (&f.ns.lock);
  g_assert_cmpuint (f.ns.names->len, ==, f.events->len);
  for (guint i = 0; i < f.events->len; i++)
    g_assert_cmpstr (g_ptr_array_index (f.ns.names, i), ==,
                     json_object_get_string_member (g_ptr_array_index (f.events, i), "event"));
  g_mutex_unlock (&f.ns.lock);
  /* batched: never more than one delivery per flush interval */
  g_assert_cmpuint (f.batches->len, <=, elapsed_ms / FLUSH_INTERVAL_MS + 2);
  g_assert_cmpuint (f.batches->len, <, f.events->len);

  /* idle → starting → running → leaving → stopped, in order */
  g_assert_cmpuint (f.states->len, >=, 3);
  g_assert_cmpstr (g_ptr_array_index (f.states, 0), ==, "starting");
  g_assert_cmpstr (g_ptr_array_index (f.states, 1), ==, "running");
  g_assert_cmpstr (g_ptr_array_index (f.states, f.states->len - 1), ==, "stopped");
  assert_threads (&f);

  /* the thread was joined (the kernel may take a moment to forget it); its
   * figures stay */
  g_assert_true (node_test_wait (node_thread_gone, &f, TIMEOUT_MS));
  g_assert_cmpfloat (rlx_node_thread_get_cpu_seconds (f.node), >, 0);
  /* leaving a stopped node completes at once */
  leave (&f);
  g_assert_cmpuint (f.n_finished, ==, 1);
  fixture_clear (&f);
}

/* ── a second node, plain, on the main thread ──────────────────────────── */

typedef struct {
  gint64       step;
  RlxPrecision precision;
} Seen;

typedef struct {
  RlxNode   *node;
  char      *watched;    /* the threaded node's id (a copy: the node may go first) */
  GArray    *seen;       /* Seen: bulk frames from it */
  guint      bad_frames;
  gboolean   start_done, started, left;
} Other;

static void
on_other_frame (RlxLink *link, GBytes *frame, Other *o)
{
  const char *peer = g_object_get_data (G_OBJECT (link), "test-peer-id");
  g_autoptr(JsonObject) header = NULL;
  RlxWireInfo info;
  Seen s;

  g_assert_true (g_thread_self () == main_thread);
  if (g_strcmp0 (peer, o->watched) != 0)
    return;
  if (!rlx_wire_decode_full (frame, NULL, &info, &header, NULL, NULL))
    {
      o->bad_frames++;
      return;
    }
  if (!info.has_values || info.n == 0)
    return;
  s.step = json_object_get_int_member_with_default (header, "step", -1);
  s.precision = info.precision;
  g_array_append_val (o->seen, s);
}

static void
on_other_link (RlxNode *node, RlxLink *link, const char *peer_id, Other *o)
{
  g_object_set_data_full (G_OBJECT (link), "test-peer-id", g_strdup (peer_id), g_free);
  g_signal_connect (link, "frame", G_CALLBACK (on_other_frame), o);
}

static void
on_other_started (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Other *o = user_data;
  g_autoptr(GError) error = NULL;

  o->started = rlx_node_start_finish (RLX_NODE (source), result, &error);
  g_assert_no_error (error);
  o->start_done = TRUE;
}

static void
on_other_left (GObject *source, GAsyncResult *result, gpointer user_data)
{
  ((Other *) user_data)->left = rlx_node_leave_finish (RLX_NODE (source), result, NULL);
}

static gboolean
other_started (gpointer data)
{
  return ((Other *) data)->start_done;
}

static gboolean
other_left (gpointer data)
{
  return ((Other *) data)->left;
}

static void
other_start (Other *o, const char *cohort, const char *watched)
{
  RlxNodeConfig cfg = small_config (cohort);
  g_autoptr(GError) error = NULL;

  memset (o, 0, sizeof *o);
  o->watched = g_strdup (watched);
  o->seen = g_array_new (FALSE, FALSE, sizeof (Seen));
  o->node = rlx_node_new (&cfg, &error);
  g_assert_no_error (error);
  g_signal_connect (o->node, "link-added", G_CALLBACK (on_other_link), o);
  rlx_node_start_async (o->node, NULL, on_other_started, o);
  g_assert_true (node_test_wait (other_started, o, TIMEOUT_MS));
  g_assert_true (o->started);
}

static void
other_leave (Other *o)
{
  rlx_node_leave_async (o->node, "test over", on_other_left, o);
  g_assert_true (node_test_wait (other_left, o, TIMEOUT_MS));
}

static void
other_clear (Other *o)
{
  g_clear_object (&o->node);
  g_array_unref (o->seen);
  g_free (o->watched);
}

/* The entry of @model for @node_id, or NULL (transfer none: the model keeps it). */
static RlxRosterEntry *
roster_find (GListModel *model, const char *node_id)
{
  for (guint i = 0; i < g_list_model_get_n_items (model); i++)
    {
      g_autoptr(RlxRosterEntry) e = g_list_model_get_item (model, i);
      if (g_strcmp0 (rlx_roster_entry_get_node_id (e), node_id) == 0)
        return e;   /* still held by the model */
    }
  return NULL;
}

typedef struct { GListModel *model; guint n; const char *id; gboolean present; } RosterWait;

static gboolean
roster_is (gpointer data)
{
  RosterWait *w = data;
  return g_list_model_get_n_items (w->model) == w->n &&
         (roster_find (w->model, w->id) != NULL) == w->present;
}

static void
on_roster_changed (GListModel *model, guint position, guint removed, guint added, guint *changes)
{
  g_assert_true (g_thread_self () == main_thread);
  (*changes)++;
}

static void
on_entry_notify (GObject *entry, GParamSpec *pspec, guint *notifies)
{
  g_assert_true (g_thread_self () == main_thread);
  (*notifies)++;
}

/* The owner's roster follows a second node joining and leaving: a row is
 * inserted and removed, the node's own row is the same object throughout
 * and changes in place. */
static void
test_roster_follows (void)
{
  g_autofree char *cohort = node_test_cohort_name ("roster");
  RlxNodeConfig cfg = small_config (cohort);
  g_autoptr(RlxRosterEntry) mine = NULL;
  RlxRosterEntry *theirs;
  GListModel *roster;
  guint changes = 0, notifies = 0;
  RosterWait w;
  Other o;
  Fixture f;

  fixture_init (&f, &cfg);
  roster = rlx_node_thread_get_roster (f.node);
  g_signal_connect (roster, "items-changed", G_CALLBACK (on_roster_changed), &changes);
  start (&f);
  w = (RosterWait) { roster, 1, rlx_node_thread_get_node_id (f.node), TRUE };
  g_assert_true (node_test_wait (roster_is, &w, TIMEOUT_MS));
  mine = g_object_ref (roster_find (roster, rlx_node_thread_get_node_id (f.node)));
  g_assert_true (rlx_roster_entry_get_is_self (mine));
  g_assert_cmpstr (rlx_roster_entry_get_backend (mine), ==, "cpu");
  g_signal_connect (mine, "notify", G_CALLBACK (on_entry_notify), &notifies);

  /* a second node joins: its row appears, with what it reported */
  other_start (&o, cohort, rlx_node_thread_get_node_id (f.node));
  w = (RosterWait) { roster, 2, rlx_node_get_node_id (o.node), TRUE };
  g_assert_true (node_test_wait (roster_is, &w, TIMEOUT_MS));
  theirs = roster_find (roster, rlx_node_get_node_id (o.node));
  g_assert_false (rlx_roster_entry_get_is_self (theirs));
  g_assert_cmpstr (rlx_roster_entry_get_backend (theirs), ==, "cpu");
  g_assert_true (roster_find (roster, rlx_node_thread_get_node_id (f.node)) == mine);
  g_assert_cmpuint (rlx_node_thread_get_members (f.node), ==, 2);
  wait_event (&f, "step", "members", 2);
  g_assert_true (g_ptr_array_find_with_equal_func (f.peers, rlx_node_get_node_id (o.node),
                                                   g_str_equal, NULL));

  /* … and leaves: its row goes, ours stays the same object */
  other_leave (&o);
  w = (RosterWait) { roster, 1, rlx_node_get_node_id (o.node), FALSE };
  g_assert_true (node_test_wait (roster_is, &w, TIMEOUT_MS));
  g_assert_true (roster_find (roster, rlx_node_thread_get_node_id (f.node)) == mine);
  g_assert_cmpuint (changes, >=, 3);    /* first row, the second in, the second out */
  g_assert_cmpuint (notifies, >, 0);    /* our row changed in place (rank, leader, bytes…) */

  leave (&f);
  assert_threads (&f);
  g_assert_true (node_test_wait (node_thread_gone, &f, TIMEOUT_MS));
  g_signal_handlers_disconnect_by_data (roster, &changes);
  g_signal_handlers_disconnect_by_data (mine, &notifies);
  other_clear (&o);
  fixture_clear (&f);
}

static guint
count_seen (Other *o, RlxPrecision p, gint64 min_step)
{
  guint n = 0;

  for (guint i = 0; i < o->seen->len; i++)
    {
      Seen *s = &g_array_index (o->seen, Seen, i);
      if (s->precision == p && s->step >= min_step)
        n++;
    }
  return n;
}

typedef struct { Other *o; RlxPrecision p; gint64 min_step; guint count; } SeenWait;

/* Frames about a step can be encoded before the step is reported (a
 * member's next gradient, the leader's next finish and one chained behind
 * it): they keep the precision they were queued with. */
#define PIPELINE_STEPS 4

static gboolean
seen_enough (gpointer data)
{
  SeenWait *w = data;
  return count_seen (w->o, w->p, w->min_step) >= w->count;
}

typedef struct { GListModel *model; const char *id; const char *precision; } PrecisionWait;

static gboolean
row_precision_is (gpointer data)
{
  PrecisionWait *w = data;
  RlxRosterEntry *e = roster_find (w->model, w->id);
  return e && g_strcmp0 (rlx_roster_entry_get_precision (e), w->precision) == 0;
}

/* set_precision from the owner changes the frames the other node gets
 * from the next step on, and what it shows for this node. */
static void
test_precision (void)
{
  g_autofree char *cohort = node_test_cohort_name ("precision");
  RlxNodeConfig cfg = small_config (cohort);
  const char *id;
  guint64 tx, rx, f32;
  gint64 switch_step;
  PrecisionWait pw;
  SeenWait sw;
  Other o;
  Fixture f;

  fixture_init (&f, &cfg);
  start (&f);
  id = rlx_node_thread_get_node_id (f.node);
  other_start (&o, cohort, id);
  sw = (SeenWait) { &o, RLX_PRECISION_F32, 0, 3 };
  g_assert_true (node_test_wait (seen_enough, &sw, TIMEOUT_MS));

  rlx_node_thread_set_precision (f.node, RLX_PRECISION_F8E4M3);
  g_assert_cmpint (rlx_node_thread_get_precision (f.node), ==, RLX_PRECISION_F8E4M3);
  /* applied on the node thread: its own row says so, and every step event
   * from before has arrived by then */
  pw = (PrecisionWait) { rlx_node_thread_get_roster (f.node), id, "f8e4m3" };
  g_assert_true (node_test_wait (row_precision_is, &pw, TIMEOUT_MS));
  switch_step = (gint64) rlx_node_thread_get_step (f.node);

  sw = (SeenWait) { &o, RLX_PRECISION_F8E4M3, switch_step + PIPELINE_STEPS, 3 };
  g_assert_true (node_test_wait (seen_enough, &sw, TIMEOUT_MS));
  g_assert_cmpuint (count_seen (&o, RLX_PRECISION_F32, switch_step + PIPELINE_STEPS), ==, 0);
  /* frames arrive in the order they were encoded: after the first f8e4m3
   * one, no f32 one */
  {
    guint first = o.seen->len;
    for (guint i = 0; i < o.seen->len && first == o.seen->len; i++)
      if (g_array_index (o.seen, Seen, i).precision == RLX_PRECISION_F8E4M3)
        first = i;
    g_assert_cmpuint (first, <, o.seen->len);
    for (guint i = first; i < o.seen->len; i++)
      g_assert_cmpint (g_array_index (o.seen, Seen, i).precision, ==, RLX_PRECISION_F8E4M3);
  }
  g_assert_cmpuint (o.bad_frames, ==, 0);
  /* the counters the node thread keeps: both ways, and f8 costs less than f32 */
  rlx_node_thread_get_bytes (f.node, &tx, &rx, &f32);
  g_assert_cmpuint (tx, >, 0);
  g_assert_cmpuint (rx, >, 0);
  g_assert_cmpuint (f32, >, tx);
  /* the other node's roster shows it too */
  pw = (PrecisionWait) { rlx_coordinator_get_roster (rlx_node_get_coordinator (o.node)), id,
                         "f8e4m3" };
  g_assert_true (node_test_wait (row_precision_is, &pw, TIMEOUT_MS));

  other_leave (&o);
  leave (&f);
  assert_threads (&f);
  other_clear (&o);
  fixture_clear (&f);
}

/* Leave while the node is still starting: both complete, the thread goes. */
static void
test_leave_while_starting (void)
{
  g_autofree char *cohort = node_test_cohort_name ("early");
  RlxNodeConfig cfg = small_config (cohort);
  Fixture f;

  fixture_init (&f, &cfg);
  rlx_node_thread_start_async (f.node, NULL, on_started, &f);
  rlx_node_thread_leave_async (f.node, "changed my mind", on_left, &f);
  g_assert_true (node_test_wait (left, &f, TIMEOUT_MS));
  g_assert_true (f.start_done);   /* the start's answer came first */
  g_assert_cmpstr (rlx_node_thread_get_state (f.node), ==, "stopped");
  g_assert_true (node_test_wait (node_thread_gone, &f, TIMEOUT_MS));
  assert_threads (&f);
  fixture_clear (&f);
}

/* Dropping a training node stops it on its thread and joins the thread;
 * nothing reaches the dropped owner afterwards. */
static void
test_dispose_while_training (void)
{
  g_autofree char *cohort = node_test_cohort_name ("dispose");
  RlxNodeConfig cfg = small_config (cohort);
  guint n_events;
  Other o;
  Fixture f;

  fixture_init (&f, &cfg);
  start (&f);
  other_start (&o, cohort, rlx_node_thread_get_node_id (f.node));
  wait_event (&f, "step", "members", 2);
  g_assert_true (node_thread_alive (&f));

  g_clear_object (&f.node);   /* joins the thread */
  g_assert_true (node_test_wait (node_thread_gone, &f, TIMEOUT_MS));
  n_events = f.events->len;
  /* a flush already on its way (at most one interval off) finds no owner */
  node_test_spin (FLUSH_INTERVAL_MS * 4);
  g_assert_cmpuint (f.events->len, ==, n_events);
  assert_threads (&f);

  /* the other node sees it go and trains on alone */
  {
    g_autoptr(RlxCoordinator) coord = g_object_ref (rlx_node_get_coordinator (o.node));
    RosterWait w = { rlx_coordinator_get_roster (coord), 1, rlx_node_get_node_id (o.node), TRUE };
    g_assert_true (node_test_wait (roster_is, &w, TIMEOUT_MS));
  }
  other_leave (&o);
  other_clear (&o);
  fixture_clear (&f);
}

int
main (int argc, char **argv)
{
  int status;

  node_test_init ();
  g_test_init (&argc, &argv, NULL);
  main_thread = g_thread_self ();
  g_test_add_func ("/app/node-thread/config", test_config);
  g_test_add_func ("/app/node-thread/steps-in-order", test_steps_in_order);
  g_test_add_func ("/app/node-thread/roster-follows", test_roster_follows);
  g_test_add_func ("/app/node-thread/precision", test_precision);
  g_test_add_func ("/app/node-thread/leave-while-starting", test_leave_while_starting);
  g_test_add_func ("/app/node-thread/dispose-while-training", test_dispose_while_training);
  status = g_test_run ();
  node_test_cleanup ();
  return status;
}
