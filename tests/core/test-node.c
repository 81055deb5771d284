/* test-node.c — RlxNode: the assembled node, with real sockets and real ranks
 *
 * Nodes here run in this process on the real local bus (Unix sockets in a
 * temporary XDG_RUNTIME_DIR), on the CPU backend with small synthetic
 * batches. Every wait is on an event, with a timeout.
 */
#include "node-test-utils.h"
#include "core/rlx-node.h"
#include "core/rlx-node-faults.h"
#include "core/rlx-coordinator-faults.h"

#include <glib/gstdio.h>

#define TIMEOUT_MS 60000

typedef struct {
  RlxNode   *node;
  GPtrArray *events;     /* JsonObject* */
  GPtrArray *states;     /* char* */
  guint      n_finished;
  gboolean   success;
  char      *message;
  guint      n_links;
  gboolean   started, start_done;
  GError    *start_error;
  gboolean   left;
} Fixture;

static void
on_event (RlxNode *node, RlxEvent *event, Fixture *f)
{
  g_ptr_array_add (f->events, rlx_event_to_json (event));
}

static void
on_state (RlxNode *node, GParamSpec *pspec, Fixture *f)
{
  g_ptr_array_add (f->states, g_strdup (rlx_node_get_state (node)));
}

static void
on_finished (RlxNode *node, gboolean success, const char *message, Fixture *f)
{
  f->n_finished++;
  f->success = success;
  g_free (f->message);
  f->message = g_strdup (message);
}

static void
on_link (RlxNode *node, RlxLink *link, const char *peer_id, Fixture *f)
{
  g_assert_true (rlx_node_name_is_valid (peer_id));
  g_assert_cmpstr (peer_id, !=, rlx_node_get_node_id (node));
  f->n_links++;
}

static void
fixture_init (Fixture *f, const RlxNodeConfig *cfg)
{
  g_autoptr(GError) error = NULL;

  memset (f, 0, sizeof *f);
  f->events = g_ptr_array_new_with_free_func ((GDestroyNotify) json_object_unref);
  f->states = g_ptr_array_new_with_free_func (g_free);
  f->node = rlx_node_new (cfg, &error);
  g_assert_no_error (error);
  g_assert_nonnull (f->node);
  g_signal_connect (f->node, "event", G_CALLBACK (on_event), f);
  g_signal_connect (f->node, "notify::state", G_CALLBACK (on_state), f);
  g_signal_connect (f->node, "finished", G_CALLBACK (on_finished), f);
  g_signal_connect (f->node, "link-added", G_CALLBACK (on_link), f);
}

static void
fixture_clear (Fixture *f)
{
  g_clear_object (&f->node);
  g_ptr_array_unref (f->events);
  g_ptr_array_unref (f->states);
  g_free (f->message);
  g_clear_error (&f->start_error);
}

static void
on_started (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Fixture *f = user_data;

  f->start_done = TRUE;
  f->started = rlx_node_start_finish (RLX_NODE (source), result, &f->start_error);
}

static void
on_left (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Fixture *f = user_data;

  g_assert_true (rlx_node_leave_finish (RLX_NODE (source), result, NULL));
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

static void
start (Fixture *f)
{
  rlx_node_start_async (f->node, NULL, on_started, f);
  g_assert_true (node_test_wait (start_done, f, TIMEOUT_MS));
  g_assert_no_error (f->start_error);
  g_assert_true (f->started);
  g_assert_cmpstr (rlx_node_get_state (f->node), ==, "running");
  g_assert_nonnull (rlx_node_get_coordinator (f->node));
}

static void
leave (Fixture *f)
{
  rlx_node_leave_async (f->node, "test over", on_left, f);
  g_assert_true (node_test_wait (left, f, TIMEOUT_MS));
  g_assert_cmpstr (rlx_node_get_state (f->node), ==, "stopped");
}

/* index of the first event @name with integer @key >= @min (key NULL: any) */
static int
find_event (Fixture *f, const char *name, const char *key, gint64 min)
{
  return node_test_event_index (f->events, name, key, min);
}

static const char *
node_state (gpointer data)
{
  return rlx_node_get_state (((Fixture *) data)->node);
}

static JsonObject *
wait_event (Fixture *f, const char *name, const char *key, gint64 min)
{
  return node_test_wait_event (f->events, name, key, min, TIMEOUT_MS, node_state, f);
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

/* ── cases ─────────────────────────────────────────────────────────────── */

/* The invite's form and its agreement with the rest of the configuration
 * are checked before anything is opened. */
static void
test_invite_config (void)
{
  RlxNodeConfig cfg = small_config (NULL);
  g_autoptr(GError) error = NULL;
  RlxNode *node;

  /* malformed: the message shows the expected form */
  cfg.invite = "rlx://example.org/demo";
  g_assert_null (rlx_node_new (&cfg, &error));
  g_assert_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "rlx://HOST:PORT/COHORT#KEY"));
  g_clear_error (&error);

  /* a cohort other than the invite's */
  cfg.invite = "rlx://example.org:7000/demo#0123456789abcdef0123456789abcdef";
  cfg.cohort = "other";
  g_assert_null (rlx_node_new (&cfg, &error));
  g_assert_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "other"));
  g_assert_nonnull (strstr (error->message, "demo"));
  g_clear_error (&error);

  /* hosting and joining at once */
  cfg.cohort = NULL;
  cfg.host_port = 7000;
  g_assert_null (rlx_node_new (&cfg, &error));
  g_assert_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "not both"));
  g_clear_error (&error);

  /* a good invite names the cohort; its invite is known once running */
  cfg.host_port = 0;
  node = rlx_node_new (&cfg, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (rlx_node_get_cohort (node), ==, "demo");
  g_assert_null (rlx_node_dup_invite (node));
  g_object_unref (node);

  /* an empty invite is the local cohort */
  cfg.invite = "";
  node = rlx_node_new (&cfg, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (rlx_node_get_cohort (node), ==, "default");
  g_assert_null (rlx_node_dup_invite (node));
  g_object_unref (node);
}

static void
test_bad_config (void)
{
  RlxNodeConfig cfg = small_config ("a/b");
  g_autoptr(GError) error = NULL;

  g_assert_null (rlx_node_new (&cfg, &error));
  g_assert_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "a/b"));
  g_clear_error (&error);

  cfg = small_config ("ok");
  cfg.model = "resnet-152";
  g_assert_null (rlx_node_new (&cfg, &error));
  g_assert_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "resnet-152"));
  g_clear_error (&error);

  cfg = small_config ("ok");
  cfg.node_id = "no spaces";
  g_assert_null (rlx_node_new (&cfg, &error));
  g_assert_error (error, RLX_NODE_ERROR, RLX_NODE_ERROR_INVALID);
}

/* A backend that cannot be had: the start fails with the backend's reason. */
static void
test_backend_refused (void)
{
  g_autofree char *cohort = node_test_cohort_name ("backend");
  RlxNodeConfig cfg = small_config (cohort);
  Fixture f;

  cfg.backend = "vulkan:no-such-device";
  fixture_init (&f, &cfg);
  rlx_node_start_async (f.node, NULL, on_started, &f);
  g_assert_true (node_test_wait (start_done, &f, TIMEOUT_MS));
  g_assert_false (f.started);
  g_assert_nonnull (f.start_error);
  g_assert_nonnull (strstr (f.start_error->message, "no-such-device"));
  g_assert_cmpstr (rlx_node_get_state (f.node), ==, "stopped");
  g_assert_cmpuint (f.n_finished, ==, 1);
  g_assert_false (f.success);
  fixture_clear (&f);
}

static void
test_start_train_leave (void)
{
  g_autofree char *cohort = node_test_cohort_name ("alone");
  g_autofree char *bus_dir = NULL;
  g_autofree char *sock = NULL;
  RlxNodeConfig cfg = small_config (cohort);
  JsonObject *joined;
  Fixture f;

  fixture_init (&f, &cfg);
  g_assert_cmpstr (rlx_node_get_state (f.node), ==, "idle");
  g_assert_null (rlx_node_get_coordinator (f.node));
  start (&f);
  joined = wait_event (&f, "joined", NULL, 0);
  g_assert_cmpstr (json_object_get_string_member (joined, "backend"), ==, "cpu");
  g_assert_cmpstr (json_object_get_string_member (joined, "node"), ==, rlx_node_get_node_id (f.node));
  wait_event (&f, "step", "step", 3);

  bus_dir = rlx_node_dup_bus_dir (f.node);
  sock = g_strdup_printf ("%s/%s.sock", bus_dir, rlx_node_get_node_id (f.node));
  g_assert_true (g_file_test (sock, G_FILE_TEST_EXISTS));

  leave (&f);
  g_assert_cmpuint (f.n_finished, ==, 1);
  g_assert_true (f.success);
  g_assert_cmpstr (f.message, ==, "test over");
  g_assert_null (rlx_node_get_coordinator (f.node));
  g_assert_false (g_file_test (sock, G_FILE_TEST_EXISTS));
  /* idle → starting → running → leaving → stopped, each once */
  g_assert_cmpuint (f.states->len, ==, 4);
  g_assert_cmpstr (g_ptr_array_index (f.states, 0), ==, "starting");
  g_assert_cmpstr (g_ptr_array_index (f.states, 1), ==, "running");
  g_assert_cmpstr (g_ptr_array_index (f.states, 2), ==, "leaving");
  g_assert_cmpstr (g_ptr_array_index (f.states, 3), ==, "stopped");

  /* leaving again completes at once; finished is not repeated */
  f.left = FALSE;
  leave (&f);
  g_assert_cmpuint (f.n_finished, ==, 1);
  fixture_clear (&f);
}

static void
test_leave_while_starting (void)
{
  g_autofree char *cohort = node_test_cohort_name ("early");
  RlxNodeConfig cfg = small_config (cohort);
  Fixture f;

  fixture_init (&f, &cfg);
  rlx_node_start_async (f.node, NULL, on_started, &f);
  rlx_node_leave_async (f.node, "changed my mind", on_left, &f);
  g_assert_true (node_test_wait (start_done, &f, TIMEOUT_MS));
  g_assert_true (node_test_wait (left, &f, TIMEOUT_MS));
  g_assert_false (f.started);
  g_assert_error (f.start_error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_cmpuint (f.n_finished, ==, 1);
  g_assert_true (f.success);
  g_assert_cmpstr (f.message, ==, "changed my mind");
  g_assert_cmpstr (rlx_node_get_state (f.node), ==, "stopped");
  g_assert_cmpint (find_event (&f, "step", NULL, 0), ==, -1);
  fixture_clear (&f);
}

static gboolean
same_hash_at (gpointer data)
{
  Fixture *f = data;       /* two fixtures */
  for (guint i = 0; i < f[0].events->len; i++)
    {
      JsonObject *a = g_ptr_array_index (f[0].events, i);
      gint64 step;
      if (g_strcmp0 (json_object_get_string_member_with_default (a, "event", ""), "step") != 0 ||
          json_object_get_int_member_with_default (a, "members", 0) < 2)
        continue;
      step = json_object_get_int_member (a, "step");
      for (guint j = 0; j < f[1].events->len; j++)
        {
          JsonObject *b = g_ptr_array_index (f[1].events, j);
          if (g_strcmp0 (json_object_get_string_member_with_default (b, "event", ""), "step") == 0 &&
              json_object_get_int_member (b, "step") == step)
            {
              g_assert_cmpstr (json_object_get_string_member (a, "hash"), ==,
                               json_object_get_string_member (b, "hash"));
              return TRUE;
            }
        }
    }
  return FALSE;
}

static gboolean
roster_has_two (gpointer data)
{
  Fixture *f = data;
  RlxCoordinator *c0 = rlx_node_get_coordinator (f[0].node);
  RlxCoordinator *c1 = rlx_node_get_coordinator (f[1].node);
  return c0 && c1 && g_list_model_get_n_items (rlx_coordinator_get_roster (c0)) == 2 &&
         g_list_model_get_n_items (rlx_coordinator_get_roster (c1)) == 2;
}

/* Two nodes in one process form one cohort: links, one roster, one hash. */
static void
test_two_nodes (void)
{
  g_autofree char *cohort = node_test_cohort_name ("pair");
  RlxNodeConfig cfg = small_config (cohort);
  Fixture f[2];

  fixture_init (&f[0], &cfg);
  fixture_init (&f[1], &cfg);
  start (&f[0]);
  wait_event (&f[0], "joined", NULL, 0);
  start (&f[1]);
  g_assert_true (node_test_wait (roster_has_two, f, TIMEOUT_MS));
  g_assert_true (node_test_wait (same_hash_at, f, TIMEOUT_MS));
  g_assert_cmpuint (f[0].n_links, >=, 1);
  g_assert_cmpuint (f[1].n_links, >=, 1);

  leave (&f[1]);
  wait_event (&f[0], "member-left", NULL, 0);
  leave (&f[0]);
  fixture_clear (&f[0]);
  fixture_clear (&f[1]);
}

/* A node of another model is refused, and says why. */
static void
test_refused (void)
{
  g_autofree char *cohort = node_test_cohort_name ("refuse");
  RlxNodeConfig cfg = small_config (cohort);
  JsonObject *refused;
  Fixture a, b;

  fixture_init (&a, &cfg);
  start (&a);
  wait_event (&a, "step", "step", 1);
  cfg.model = "mnist-cnn";
  fixture_init (&b, &cfg);
  start (&b);
  refused = wait_event (&a, "refused", NULL, 0);
  g_assert_nonnull (strstr (json_object_get_string_member (refused, "reason"), "model"));
  g_assert_true (node_test_wait (finished, &b, TIMEOUT_MS));
  g_assert_false (b.success);
  g_assert_nonnull (strstr (b.message, "model"));
  g_assert_cmpuint (g_list_model_get_n_items (rlx_coordinator_get_roster (rlx_node_get_coordinator (a.node))),
                    ==, 1);
  leave (&a);
  fixture_clear (&a);
  fixture_clear (&b);
}

static gboolean
object_gone (gpointer data)
{
  return *(gpointer *) data == NULL;
}

/* Test accuracy is measured every K steps, off the main loop. */
static void
test_evaluate (void)
{
  RlxCoordinator *coord;
  g_autofree char *cohort = node_test_cohort_name ("eval");
  RlxNodeConfig cfg = small_config (cohort);
  JsonObject *e;
  Fixture f;

  cfg.evaluate_every = 5;
  fixture_init (&f, &cfg);
  start (&f);
  e = wait_event (&f, "evaluated", "step", 5);
  g_assert_cmpfloat (json_object_get_double_member (e, "accuracy"), >=, 0.0);
  g_assert_cmpfloat (json_object_get_double_member (e, "accuracy"), <=, 1.0);
  g_assert_cmpfloat (json_object_get_double_member (e, "test_loss"), >, 0.0);
  /* an evaluation in flight holds the coordinator: wait until it let go, so
   * the process never exits with the evaluation inside OpenBLAS */
  coord = rlx_node_get_coordinator (f.node);
  g_object_add_weak_pointer (G_OBJECT (coord), (gpointer *) &coord);
  leave (&f);
  fixture_clear (&f);
  g_assert_true (node_test_wait (object_gone, &coord, TIMEOUT_MS));
}

/* With evaluate_at_end, a node that finished its steps measures the test
 * accuracy of the final parameters (off the main loop) before it leaves. */
static void
test_evaluate_at_end (void)
{
  g_autofree char *cohort = node_test_cohort_name ("eval-end");
  RlxNodeConfig cfg = small_config (cohort);
  int done, evaluated;
  JsonObject *e;
  Fixture f;

  cfg.steps = 10;
  cfg.evaluate_at_end = TRUE;
  fixture_init (&f, &cfg);
  start (&f);
  g_assert_true (node_test_wait (finished, &f, TIMEOUT_MS));
  g_assert_true (f.success);
  done = find_event (&f, "done", NULL, 0);
  evaluated = find_event (&f, "evaluated", NULL, 0);
  g_assert_cmpint (done, >=, 0);
  g_assert_cmpint (evaluated, >, done);
  e = g_ptr_array_index (f.events, evaluated);
  g_assert_cmpint (json_object_get_int_member (e, "step"), ==, 10);
  g_assert_cmpfloat (json_object_get_double_member (e, "accuracy"), >=, 0.0);
  g_assert_cmpfloat (json_object_get_double_member (e, "accuracy"), <=, 1.0);
  g_assert_cmpstr (rlx_node_get_state (f.node), ==, "stopped");
  fixture_clear (&f);
}

static gboolean
evaluations_run (gpointer data)
{
  return rlx_coordinator_get_evaluations (data) > 0;
}

/* A leave while evaluations run (each made to take ten minutes, passing
 * over the test split inside BLAS) cancels them and completes only once
 * they returned: when the node says stopped, the process may exit, and
 * exit's handlers unmap OpenBLAS's buffers under a running evaluation
 * (the SIGSEGV of test-sync-auto-trains). */
static void
test_leave_while_evaluating (void)
{
  g_autofree char *cohort = node_test_cohort_name ("eval-leave");
  RlxNodeConfig cfg = small_config (cohort);
  RlxNodeTestSwitches sw = { 0 };
  RlxCoordinator *coord;
  Fixture f;

  cfg.evaluate_every = 1;
  sw.faults.eval_ms = 600000;
  fixture_init (&f, &cfg);
  rlx_node_set_test_switches (f.node, &sw);
  start (&f);
  coord = rlx_node_get_coordinator (f.node);
  g_assert_true (node_test_wait (evaluations_run, coord, TIMEOUT_MS));
  g_object_add_weak_pointer (G_OBJECT (coord), (gpointer *) &coord);
  leave (&f);
  /* every evaluation held the coordinator until it returned */
  g_assert_null (coord);
  g_assert_cmpint (find_event (&f, "evaluated", NULL, 0), ==, -1);
  fixture_clear (&f);
}

/* The same for the evaluation at the end (evaluate_at_end): a leave while
 * it runs stops it, and the node is stopped only once it returned. */
static void
test_leave_while_evaluating_at_end (void)
{
  g_autofree char *cohort = node_test_cohort_name ("eval-end-leave");
  RlxNodeConfig cfg = small_config (cohort);
  RlxNodeTestSwitches sw = { 0 };
  RlxNode *node;
  Fixture f;

  cfg.steps = 5;
  cfg.evaluate_at_end = TRUE;
  sw.faults.eval_ms = 600000;
  fixture_init (&f, &cfg);
  rlx_node_set_test_switches (f.node, &sw);
  start (&f);
  wait_event (&f, "done", NULL, 0);
  leave (&f);
  g_assert_cmpuint (f.n_finished, ==, 1);
  g_assert_cmpint (find_event (&f, "evaluated", NULL, 0), ==, -1);
  /* the evaluation's task held the node until it returned */
  node = f.node;
  g_object_add_weak_pointer (G_OBJECT (node), (gpointer *) &node);
  fixture_clear (&f);
  g_assert_null (node);
}

int
main (int argc, char **argv)
{
  int status;

  node_test_init ();
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/app/node/invite-config", test_invite_config);
  g_test_add_func ("/app/node/bad-config", test_bad_config);
  g_test_add_func ("/app/node/backend-refused", test_backend_refused);
  g_test_add_func ("/app/node/start-train-leave", test_start_train_leave);
  g_test_add_func ("/app/node/leave-while-starting", test_leave_while_starting);
  g_test_add_func ("/app/node/two-nodes", test_two_nodes);
  g_test_add_func ("/app/node/refused", test_refused);
  g_test_add_func ("/app/node/evaluate", test_evaluate);
  g_test_add_func ("/app/node/evaluate-at-end", test_evaluate_at_end);
  g_test_add_func ("/app/node/leave-while-evaluating", test_leave_while_evaluating);
  g_test_add_func ("/app/node/leave-while-evaluating-at-end",
                   test_leave_while_evaluating_at_end);
  status = g_test_run ();
  node_test_cleanup ();
  return status;
}
