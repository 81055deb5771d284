/* test-coordinator.c — two coordinators in one process, joined by a
 * socketpair link: the GObject face the GUI binds to (properties, roster,
 * events) and bit-identical replicas, without the bus or extra processes.
 */
#include "rlx-config.h"
#include "core/rlx-coordinator.h"
#include "core/p2p/rlx-unix-link.h"
#include "core/vision/rlx-cpu.h"

#include <glib/gstdio.h>
#include <string.h>

typedef struct {
  guint64  steps;
  guint    events;
  gboolean finished;
  gboolean success;
} Seen;

static void
on_event (RlxCoordinator *c, JsonObject *ev, Seen *seen)
{
  g_assert_true (json_object_has_member (ev, "event"));
  seen->events++;
  if (g_strcmp0 (json_object_get_string_member (ev, "event"), "step") == 0)
    seen->steps++;
}

static void
on_finished (RlxCoordinator *c, gboolean success, const char *message, Seen *seen)
{
  seen->finished = TRUE;
  seen->success = success;
}

static RlxCoordinator *
make_full (const char *id, const char *dir, RlxDataset *dataset, guint wait, guint64 seed,
           guint64 steps)
{
  g_autoptr(GError) error = NULL;
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_MLP);
  RlxBackend *backend = rlx_backend_resolve ("cpu", model, dataset, 64, &error);
  RlxCoordinatorConfig cfg = { 0 };
  RlxCoordinator *c;

  g_assert_no_error (error);
  cfg.cohort = "inproc";
  cfg.node_id = id;
  cfg.precision = RLX_PRECISION_F16;
  cfg.error_feedback = TRUE;
  cfg.batch = 8;
  cfg.lr = 0.05;
  cfg.steps = steps;
  cfg.seed = seed;
  cfg.checkpoint_dir = dir;
  cfg.wait_members = wait;
  cfg.deadline_floor_ms = 5000;
  c = rlx_coordinator_new (&cfg, rlx_worker_new (backend), &error);
  g_assert_no_error (error);
  return c;
}

static RlxCoordinator *
make (const char *id, const char *dir, RlxDataset *dataset, guint wait)
{
  return make_full (id, dir, dataset, wait, 0, 12);
}

static gboolean
both_done (Seen *s)
{
  return s[0].finished && s[1].finished;
}

static gboolean
on_timeout (gpointer data)
{
  *(gboolean *) data = TRUE;
  return G_SOURCE_REMOVE;
}

static void
test_two_in_process (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("rlx-coord-XXXXXX", &error);
  g_autoptr(RlxDataset) dataset = rlx_dataset_open ("synthetic", 0, &error);
  RlxCoordinator *c[2];
  RlxLink *a = NULL, *b = NULL;
  Seen seen[2] = { { 0 } };
  gboolean timed_out = FALSE;
  guint timeout_id;
  gsize n0, n1;
  const float *p0, *p1;
  GListModel *roster;
  g_autofree char *role0 = NULL, *leader1 = NULL;
  guint64 step0 = 0, term0 = 0;
  guint members0 = 0;

  g_assert_no_error (error);
  c[0] = make ("alpha", dir, dataset, 2);
  c[1] = make ("beta", dir, dataset, 1);
  for (guint i = 0; i < 2; i++)
    {
      g_signal_connect (c[i], "event", G_CALLBACK (on_event), &seen[i]);
      g_signal_connect (c[i], "finished", G_CALLBACK (on_finished), &seen[i]);
    }
  g_assert_true (rlx_unix_link_new_pair (0, &a, &b, &error));
  g_assert_no_error (error);
  rlx_coordinator_add_link (c[0], a);
  rlx_coordinator_add_link (c[1], b);
  rlx_coordinator_start (c[0]);
  rlx_coordinator_start (c[1]);

  timeout_id = g_timeout_add (60000, on_timeout, &timed_out);
  while (!both_done (seen) && !timed_out)
    g_main_context_iteration (NULL, TRUE);
  g_assert_false (timed_out);
  g_source_remove (timeout_id);
  g_assert_true (seen[0].success && seen[1].success);

  /* alpha founded (it waited for beta), beta joined it. */
  g_object_get (c[0], "role", &role0, "step", &step0, "term", &term0, "members", &members0, NULL);
  g_object_get (c[1], "leader", &leader1, NULL);
  g_assert_cmpstr (role0, ==, "leader");
  g_assert_cmpstr (leader1, ==, "alpha");
  g_assert_cmpuint (step0, ==, 12);
  g_assert_cmpuint (term0, ==, 1);
  g_assert_cmpuint (members0, ==, 2);
  g_assert_cmpuint (rlx_coordinator_get_step (c[1]), ==, 12);
  g_assert_cmpuint (seen[0].steps, ==, 12);
  g_assert_cmpuint (seen[1].steps, ==, 12);

  /* Bit-identical replicas (f16 updates with error feedback). */
  p0 = rlx_coordinator_get_params (c[0], &n0);
  p1 = rlx_coordinator_get_params (c[1], &n1);
  g_assert_cmpuint (n0, ==, n1);
  g_assert_cmpmem (p0, n0 * sizeof (float), p1, n1 * sizeof (float));
  g_assert_cmpuint (rlx_params_hash (p0, n0), ==, rlx_params_hash (p1, n1));

  /* The roster the GUI shows. */
  roster = rlx_coordinator_get_roster (c[0]);
  g_assert_cmpuint (g_list_model_get_n_items (roster), ==, 2);
  for (guint i = 0; i < 2; i++)
    {
      g_autoptr(RlxRosterEntry) e = g_list_model_get_item (roster, i);
      g_assert_cmpstr (rlx_roster_entry_get_backend (e), ==, "cpu");
      g_assert_nonnull (rlx_roster_entry_get_host (e));
      g_assert_cmpstr (rlx_roster_entry_get_precision (e), ==, "f16");
      g_assert_true (rlx_roster_entry_get_is_leader (e) ==
                     (strcmp (rlx_roster_entry_get_node_id (e), "alpha") == 0));
    }
  {
    guint64 tx = 0, f32 = 0;
    g_object_get (c[1], "bytes-tx", &tx, "bytes-f32", &f32, NULL);
    g_assert_cmpuint (tx, >, 0);
  }

  for (guint i = 0; i < 2; i++)
    g_object_unref (c[i]);
  g_object_unref (a);
  g_object_unref (b);
  {
    g_autofree char *ck = g_build_filename (dir, "checkpoint.safetensors", NULL);
    g_assert_true (g_file_test (ck, G_FILE_TEST_EXISTS));
    g_unlink (ck);
    g_rmdir (dir);
  }
}

typedef struct {
  Seen       *seen;
  guint       who;
  guint64     steps;
  const char *role;
  RlxCoordinator *c;
} Until;

static gboolean
until_met (Until *u)
{
  g_autofree char *role = NULL;

  if (u->seen[u->who].steps < u->steps)
    return FALSE;
  if (u->role == NULL)
    return TRUE;
  g_object_get (u->c, "role", &role, NULL);
  return g_strcmp0 (role, u->role) == 0;
}

static void
run_until (Until *u, gboolean *flag, const char *what)
{
  gboolean timed_out = FALSE;
  guint id = g_timeout_add (60000, on_timeout, &timed_out);

  while (!(flag ? *flag : until_met (u)) && !timed_out)
    g_main_context_iteration (NULL, TRUE);
  if (timed_out)
    g_error ("timed out waiting for %s", what);
  g_source_remove (id);
}

static void
on_finished_message (RlxCoordinator *c, gboolean success, const char *message, char **out)
{
  g_free (*out);
  *out = g_strdup (message);
}

static void
on_left (gpointer user_data)
{
  *(gboolean *) user_data = TRUE;
}

/* The two coordinators, their link and their checkpoint folders. */
static void
free_groups (RlxCoordinator **c, RlxLink *a, RlxLink *b, const char *dir0, const char *dir1)
{
  const char *dirs[] = { dir0, dir1 };

  for (guint i = 0; i < 2; i++)
    g_object_unref (c[i]);
  g_object_unref (a);
  g_object_unref (b);
  for (guint i = 0; i < 2; i++)
    {
      g_autofree char *ck = g_build_filename (dirs[i], "checkpoint.safetensors", NULL);
      g_unlink (ck);
      g_rmdir (dirs[i]);
    }
}

/* Two groups of one cohort that cannot merge (their seeds differ) meet
 * after each founded: say a rank's discovery window passed before the
 * cohort's hello came. The one the merge rule keeps goes on, the other ends
 * as a refused joiner would — here the younger group (fewer committed steps),
 * though its leader id is the smaller one. Before, both refused each other
 * and both went on leading a cohort of the same name. */
static void
test_refused_groups (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir0 = g_dir_make_tmp ("rlx-coord-XXXXXX", &error);
  g_autofree char *dir1 = g_dir_make_tmp ("rlx-coord-XXXXXX", &error);
  g_autoptr(RlxDataset) dataset = rlx_dataset_open ("synthetic", 0, &error);
  g_autofree char *why = NULL, *role0 = NULL;
  RlxCoordinator *c[2];
  RlxLink *a = NULL, *b = NULL;
  Seen seen[2] = { { 0 } };
  gboolean left = FALSE;
  Until u = { seen, 0, 20, "leader", NULL };
  guint64 steps0;

  g_assert_no_error (error);
  c[0] = make_full ("zeta", dir0, dataset, 1, 1, 0);
  c[1] = make_full ("alpha", dir1, dataset, 1, 2, 0);
  for (guint i = 0; i < 2; i++)
    {
      g_signal_connect (c[i], "event", G_CALLBACK (on_event), &seen[i]);
      g_signal_connect (c[i], "finished", G_CALLBACK (on_finished), &seen[i]);
    }
  g_signal_connect (c[1], "finished", G_CALLBACK (on_finished_message), &why);

  rlx_coordinator_start (c[0]);
  u.c = c[0];
  run_until (&u, NULL, "zeta to found and train 20 steps alone");
  rlx_coordinator_start (c[1]);
  u = (Until) { seen, 1, 1, "leader", c[1] };
  run_until (&u, NULL, "alpha to found a group of its own");
  g_assert_false (seen[0].finished || seen[1].finished);

  g_assert_true (rlx_unix_link_new_pair (0, &a, &b, &error));
  g_assert_no_error (error);
  rlx_coordinator_add_link (c[0], a);
  rlx_coordinator_add_link (c[1], b);
  run_until (NULL, &seen[1].finished, "alpha's group to give way");
  g_assert_false (seen[1].success);
  g_test_message ("alpha: %s", why);
  g_assert_nonnull (strstr (why, "cannot join cohort inproc"));
  g_assert_nonnull (strstr (why, "seed"));
  g_assert_nonnull (strstr (why, "zeta"));

  /* zeta goes on leading, and training. */
  g_assert_false (seen[0].finished);
  steps0 = seen[0].steps;
  u = (Until) { seen, 0, steps0 + 5, "leader", c[0] };
  run_until (&u, NULL, "zeta to go on training");
  g_assert_false (seen[0].finished);
  g_object_get (c[0], "role", &role0, NULL);
  g_assert_cmpstr (role0, ==, "leader");

  rlx_coordinator_leave (c[0], "test over", G_CALLBACK (on_left), &left);
  run_until (NULL, &left, "zeta to leave");
  free_groups (c, a, b, dir0, dir1);
}

/* The same with nothing to tell the groups apart: both leaders wait for a
 * member, so each hello says one member and step 0. The merge rule's last
 * word, the smaller leader id, decides, and both sides read it the same way:
 * the group that started first (the larger id) ends. */
static void
test_refused_groups_tie (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir0 = g_dir_make_tmp ("rlx-coord-XXXXXX", &error);
  g_autofree char *dir1 = g_dir_make_tmp ("rlx-coord-XXXXXX", &error);
  g_autoptr(RlxDataset) dataset = rlx_dataset_open ("synthetic", 0, &error);
  g_autofree char *why = NULL, *role1 = NULL;
  RlxCoordinator *c[2];
  RlxLink *a = NULL, *b = NULL;
  Seen seen[2] = { { 0 } };
  gboolean left = FALSE;
  Until u;
  guint64 step1 = 0;

  g_assert_no_error (error);
  c[0] = make_full ("mu", dir0, dataset, 2, 1, 0);
  c[1] = make_full ("kappa", dir1, dataset, 2, 2, 0);
  for (guint i = 0; i < 2; i++)
    {
      g_signal_connect (c[i], "event", G_CALLBACK (on_event), &seen[i]);
      g_signal_connect (c[i], "finished", G_CALLBACK (on_finished), &seen[i]);
    }
  g_signal_connect (c[0], "finished", G_CALLBACK (on_finished_message), &why);

  rlx_coordinator_start (c[0]);
  u = (Until) { seen, 0, 0, "leader", c[0] };
  run_until (&u, NULL, "mu to found and wait for a member");
  rlx_coordinator_start (c[1]);
  u = (Until) { seen, 1, 0, "leader", c[1] };
  run_until (&u, NULL, "kappa to found and wait for a member");

  g_assert_true (rlx_unix_link_new_pair (0, &a, &b, &error));
  g_assert_no_error (error);
  rlx_coordinator_add_link (c[0], a);
  rlx_coordinator_add_link (c[1], b);
  run_until (NULL, &seen[0].finished, "mu's group to give way");
  g_assert_false (seen[0].success);
  g_test_message ("mu: %s", why);
  g_assert_nonnull (strstr (why, "cannot join cohort inproc"));
  g_assert_nonnull (strstr (why, "kappa"));

  /* kappa goes on leading its own group, still waiting, nothing trained. */
  g_assert_false (seen[1].finished);
  g_object_get (c[1], "role", &role1, "step", &step1, NULL);
  g_assert_cmpstr (role1, ==, "leader");
  g_assert_cmpuint (step1, ==, 0);
  g_assert_cmpuint (seen[0].steps + seen[1].steps, ==, 0);

  rlx_coordinator_leave (c[1], "test over", G_CALLBACK (on_left), &left);
  run_until (NULL, &left, "kappa to leave");
  free_groups (c, a, b, dir0, dir1);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cohort/coordinator/two-in-process", test_two_in_process);
  g_test_add_func ("/cohort/coordinator/refused-groups", test_refused_groups);
  g_test_add_func ("/cohort/coordinator/refused-groups-tie", test_refused_groups_tie);
  return g_test_run ();
}
