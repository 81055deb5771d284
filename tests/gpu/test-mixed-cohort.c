/* test-mixed-cohort.c — a CPU rank and a lavapipe rank in one cohort keep
 * one hash
 *
 * Two real `rlx-rank join --local` processes (tests/cohort's harness), one
 * `--backend cpu`, one `--backend vulkan:llvmpipe`, each at its own wire
 * precision: every committed step's parameter hash is the same on both, for
 * 60 steps, with both gradients in every step (the collect deadline is
 * raised so that a slow lavapipe step is never dropped on a loaded machine).
 * The cohorts: the CPU leading at f16 with the GPU at f8e4m3 (mnist-mlp), and
 * the GPU leading — its round summed, its update made, applied and hashed
 * on the device (rlx_backend_round_*) — at f8e5m2 with the CPU at f32
 * (mnist-cnn), at f8e4m3 with the CPU at f16 and at f16 with the CPU at
 * f32 (mnist-mlp; there the hashes must agree at every one of the steps).
 * The GPU rank must hold its parameters on the device (nothing in its
 * fallback text says they stay on the host), so the replicas compared are
 * the device's. And a GPU leader alone keeps two rounds queued on the
 * device (RLX_VK_TIMELINE shows it), with the same training as without.
 * And updates in the subnormal range (a GPU leader at --lr 1e-36) keep one
 * hash although the CPU rank's worker flushes subnormals.
 */
#include "rlx-config.h"
#include "../cohort/cohort-harness.h"
#include "core/cohort/rlx-msg.h"
#include "core/rlx-safetensors.h"
#include "core/vision/rlx-model.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define STEPS 60
#define STEPS_S "60"

static const char *
str_of (JsonObject *o, const char *key)
{
  return json_object_has_member (o, key) ? json_object_get_string_member (o, key) : "";
}

static JsonObject *
event (Node *n, const char *name)
{
  int i = node_find_event (n, name, 0);

  g_assert_cmpint (i, >=, 0);
  return g_ptr_array_index (n->events, i);
}

static void
check_mixed (const char *model, const char *lead_backend, const char *lead_prec,
             const char *member_backend, const char *member_prec, guint min_common)
{
  Harness *h = harness_new ();
  Node *lead, *member, *gpu;
  guint common, both = 0;

  lead = harness_spawn (h, "lead", "join", "--local", "--json", "--cohort", "mixed",
                        "--model", model, "--batch", "16", "--steps", STEPS_S,
                        "--wait-members", "2", "--checkpoint-every", "0", "--threads", "1",
                        "--deadline-floor-ms", "120000",
                        "--backend", lead_backend, "--precision", lead_prec, NULL);
  /* the founder first, so that the second joins it */
  g_assert_cmpint (node_wait_event (lead, "joined", NULL, 0, 0, 60000), >=, 0);
  member = harness_spawn (h, "member", "join", "--local", "--json", "--cohort", "mixed",
                          "--model", model, "--batch", "16", "--steps", STEPS_S,
                          "--checkpoint-every", "0", "--threads", "1",
                          "--deadline-floor-ms", "120000",
                          "--backend", member_backend, "--precision", member_prec, NULL);
  g_assert_true (node_wait_exit (lead, 240000));
  g_assert_true (node_wait_exit (member, 240000));
  g_assert_true (node_exited_ok (lead));
  g_assert_true (node_exited_ok (member));

  /* who computed where */
  gpu = g_str_has_prefix (lead_backend, "vulkan") ? lead : member;
  g_assert_cmpstr (str_of (event (gpu, "joined"), "backend"), ==, "vulkan");
  g_assert_cmpstr (str_of (event (gpu == lead ? member : lead, "joined"), "backend"), ==, "cpu");
  g_test_message ("GPU rank's fallback: '%s'", str_of (event (gpu, "joined"), "fallback"));
  g_assert_null (strstr (str_of (event (gpu, "joined"), "fallback"), "kept on the host"));

  /* one hash at every step both committed, each with both gradients */
  g_test_message ("%s, %s at %s + %s at %s", model, lead_backend, lead_prec, member_backend,
                  member_prec);
  common = harness_same_hashes (h, lead, member, 0);
  for (guint i = 0; i < lead->events->len; i++)
    {
      JsonObject *e = g_ptr_array_index (lead->events, i);
      if (g_str_equal (str_of (e, "event"), "step") &&
          json_object_get_int_member (e, "contributors") == 2)
        both++;
    }
  g_test_message ("%s: %u steps compared, %u with both gradients", model, common, both);
  g_assert_cmpuint (common, >=, min_common);
  g_assert_cmpuint (both, >=, 50);
  g_assert_cmpint (node_max_step (lead), ==, STEPS);
  g_assert_cmpstr (str_of (event (lead, "done"), "hash"), ==, str_of (event (member, "done"), "hash"));
  harness_free (h);
}

static gboolean
have_lavapipe (void)
{
  /* the test's environment decides: RLX_RANK devices lists it or not */
  const char *argv[] = { g_getenv ("RLX_RANK"), "devices", "--backend", "vulkan:llvmpipe", NULL };
  g_autofree char *out = NULL;
  int status = 0;

  if (argv[0] == NULL)
    return FALSE;
  if (!g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL, &out,
                     NULL, &status, NULL))
    return FALSE;
  return strstr (out, "vulkan on llvmpipe") != NULL;
}

static gboolean
need_lavapipe (void)
{
  if (have_lavapipe ())
    return TRUE;
  g_test_skip ("no lavapipe device (install mesa-vulkan-drivers) or RLX_RANK unset");
  return FALSE;
}

/* The founder's checkpoint: mnist-mlp's initial parameters with every bias
 * 0, so that an update far below the weights still changes them. */
static void
write_zero_bias_checkpoint (Harness *h, const char *cohort)
{
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autofree float *params = g_new (float, model->n_params);
  g_autofree char *dir = g_build_filename (h->data_dir, "rlx-cluster", cohort, NULL);
  g_autofree char *path = g_build_filename (dir, "checkpoint.safetensors", NULL);
  g_autoptr(GHashTable) md = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, g_free);
  g_autoptr(GError) error = NULL;

  rlx_model_init_params (model, 0, params);
  for (guint t = 0; t < model->n_tensors; t++)
    if (model->tensors[t].rank == 1)
      memset (params + model->tensors[t].offset, 0, model->tensors[t].numel * sizeof (float));
  g_hash_table_insert (md, "model", g_strdup (model->slug));
  g_hash_table_insert (md, "dataset", g_strdup ("synthetic"));
  g_hash_table_insert (md, "step", g_strdup ("1"));
  g_hash_table_insert (md, "epoch", g_strdup ("0"));
  g_hash_table_insert (md, "pos", g_strdup ("0"));
  g_hash_table_insert (md, "seed", g_strdup ("0"));
  g_hash_table_insert (md, "hash",
                       rlx_msg_hash_to_string (rlx_params_hash (params, model->n_params)));
  g_hash_table_insert (md, "hash_chunk",
                       g_strdup_printf ("%" G_GSIZE_FORMAT, (gsize) RLX_PARAMS_HASH_CHUNK));
  g_assert_cmpint (g_mkdir_with_parents (dir, 0700), ==, 0);
  g_assert_true (rlx_safetensors_write (path, model, params, md, &error));
  g_assert_no_error (error);
}

/* Updates in the subnormal range: at --lr 1e-36 the GPU leader's update
 * coef · g (coef = lr / 32 ≈ 3e-38, the least normal f32 being 1.2e-38) is
 * mostly subnormal, and the biases, 0 in the checkpoint the leader founds
 * from, take it as it is. The device applies it exactly
 * (gpu/shaders/wire.glsl); the CPU member's round kernels must too, although
 * its compute worker flushes subnormals (core/util/rlx-fp-mode.h): one hash
 * at every step, and the hash moves. */
static void
test_subnormal_updates (void)
{
  Harness *h;
  Node *lead, *member;
  g_autoptr(GHashTable) hl = NULL;
  g_autoptr(GHashTable) distinct = g_hash_table_new (g_str_hash, g_str_equal);
  GHashTableIter it;
  gpointer k, v;
  guint common;

  if (!need_lavapipe ())
    return;
  h = harness_new ();
  write_zero_bias_checkpoint (h, "subnormal");
  lead = harness_spawn (h, "lead", "join", "--local", "--json", "--cohort", "subnormal",
                        "--model", "mnist-mlp", "--batch", "16", "--steps", "21", "--lr", "1e-36",
                        "--wait-members", "2", "--checkpoint-every", "0", "--threads", "1",
                        "--deadline-floor-ms", "120000",
                        "--backend", "vulkan:llvmpipe", "--precision", "f32", NULL);
  g_assert_cmpint (node_wait_event (lead, "joined", NULL, 0, 0, 60000), >=, 0);
  member = harness_spawn (h, "member", "join", "--local", "--json", "--cohort", "subnormal",
                          "--model", "mnist-mlp", "--batch", "16", "--steps", "21", "--lr", "1e-36",
                          "--checkpoint-every", "0", "--threads", "1",
                          "--deadline-floor-ms", "120000",
                          "--backend", "cpu", "--precision", "f32", NULL);
  g_assert_true (node_wait_exit (lead, 240000));
  g_assert_true (node_wait_exit (member, 240000));
  g_assert_true (node_exited_ok (lead));
  g_assert_true (node_exited_ok (member));
  g_assert_cmpstr (str_of (event (lead, "joined"), "backend"), ==, "vulkan");
  g_assert_null (strstr (str_of (event (lead, "joined"), "fallback"), "kept on the host"));

  common = harness_same_hashes (h, lead, member, 0);
  hl = node_step_hashes (lead);
  g_hash_table_iter_init (&it, hl);
  while (g_hash_table_iter_next (&it, &k, &v))
    g_hash_table_add (distinct, v);
  g_test_message ("%u steps compared, %u hashes", common, g_hash_table_size (distinct));
  g_assert_cmpuint (common, >=, 10);
  /* the updates were applied: the parameters changed from step to step */
  g_assert_cmpuint (g_hash_table_size (distinct), >=, common / 2);
  g_assert_cmpstr (str_of (event (lead, "done"), "hash"), ==, str_of (event (member, "done"), "hash"));
  harness_free (h);
}

static void
test_cpu_leads (void)
{
  if (!need_lavapipe ())
    return;
  check_mixed ("mnist-mlp", "cpu", "f16", "vulkan:llvmpipe", "f8e4m3", 50);
}

static void
test_gpu_leads (void)
{
  if (!need_lavapipe ())
    return;
  check_mixed ("mnist-cnn", "vulkan:llvmpipe", "f8e5m2", "cpu", "f32", 50);
}

/* the GPU's round at f8 and at f16: one hash at every step */
static void
test_gpu_leads_f8 (void)
{
  if (!need_lavapipe ())
    return;
  check_mixed ("mnist-mlp", "vulkan:llvmpipe", "f8e4m3", "cpu", "f16", STEPS);
}

static void
test_gpu_leads_f16 (void)
{
  if (!need_lavapipe ())
    return;
  check_mixed ("mnist-mlp", "vulkan:llvmpipe", "f16", "cpu", "f32", STEPS);
}

/* A lavapipe leader alone makes each next update ahead, right behind its own
 * gradient (rlx_backend_round_expect_alone): its step hashes are those of
 * the same leader with that off (RLX_VK_PRESUBMIT=0, another cohort of the
 * same name and seed), and its done event says its updates were made
 * ahead while it was alone. Then a CPU rank joins while it runs alone — the update made ahead
 * for a round that now has a member is undone — and from the joiner's first
 * step on both hold one hash at every step (300 steps: room for a slow
 * join on a loaded machine). */
static void
test_gpu_alone_then_joined (void)
{
  Harness *a, *b;
  Node *lead, *plain, *member;
  g_autoptr(GHashTable) ha = NULL, hb = NULL, hm = NULL;
  GHashTableIter it;
  gpointer k, v;
  guint same = 0, common = 0;

  if (!need_lavapipe ())
    return;
  a = harness_new ();
  b = harness_new ();
  harness_setenv (b, "RLX_VK_PRESUBMIT", "0");
  lead = harness_spawn (a, "lead", "join", "--local", "--json", "--cohort", "alone",
                        "--model", "mnist-mlp", "--batch", "16", "--steps", "300",
                        "--checkpoint-every", "0", "--threads", "1",
                        "--deadline-floor-ms", "120000", "--backend", "vulkan:llvmpipe",
                        "--precision", "f16", NULL);
  plain = harness_spawn (b, "plain", "join", "--local", "--json", "--cohort", "alone",
                         "--model", "mnist-mlp", "--batch", "16", "--steps", "20",
                         "--checkpoint-every", "0", "--threads", "1",
                         "--backend", "vulkan:llvmpipe", "--precision", "f16", NULL);
  harness_wait_event (a, lead, "step", "step", 20, 120000);
  member = harness_spawn (a, "member", "join", "--local", "--json", "--cohort", "alone",
                          "--model", "mnist-mlp", "--batch", "16", "--steps", "300",
                          "--checkpoint-every", "0", "--threads", "1",
                          "--deadline-floor-ms", "120000", "--backend", "cpu",
                          "--precision", "f32", NULL);
  harness_assert_exit_ok (b, plain, 240000);
  harness_assert_exit_ok (a, lead, 240000);
  harness_assert_exit_ok (a, member, 240000);

  /* alone: the same steps with and without updates made ahead */
  ha = node_step_hashes (lead);
  hb = node_step_hashes (plain);
  for (gint64 s = 1; s <= 20; s++)
    {
      const char *x = g_hash_table_lookup (ha, &s), *y = g_hash_table_lookup (hb, &s);
      if (x == NULL || g_strcmp0 (x, y) != 0)
        g_error ("step %" G_GINT64_FORMAT ": hash %s with updates made ahead, %s without",
                 s, x, y);
      same++;
    }
  /* the leader was alone for its first 20 steps at least (the member was
   * started after it reported step 20); the first 5 are not measured */
  {
    JsonObject *done = event (lead, "done");
    double ahead = json_object_get_double_member (done, "update_ahead") *
                   (double) json_object_get_int_member (done, "steps_measured");

    g_test_message ("updates made ahead: %.0f", ahead);
    g_assert_cmpfloat (ahead, >=, 8);
  }
  g_assert_cmpfloat (json_object_get_double_member (event (plain, "done"), "update_ahead"), ==, 0);
  /* joined: one hash */
  hm = node_step_hashes (member);
  g_hash_table_iter_init (&it, hm);
  while (g_hash_table_iter_next (&it, &k, &v))
    {
      const char *other = g_hash_table_lookup (ha, k);
      if (other == NULL)
        continue;
      common++;
      if (g_strcmp0 (other, v) != 0)
        g_error ("step %" G_GINT64_FORMAT ": hash %s on the GPU leader, %s on the member that "
                 "joined it", *(gint64 *) k, other, (const char *) v);
    }
  g_test_message ("%u steps alike alone, %u compared after the join", same, common);
  g_assert_cmpuint (common, >=, 20);
  g_assert_cmpstr (str_of (event (lead, "done"), "hash"), ==, str_of (event (member, "done"), "hash"));
  harness_free (a);
  harness_free (b);
}

/* The count on RLX_VK_TIMELINE's line for submissions of kind @kind (0:
 * no such line). */
static guint
timeline_count (const char *err, const char *kind)
{
  const char *line = strstr (err, kind);
  guint count = 0;

  if (line == NULL || sscanf (line + strlen (kind), " %u", &count) != 1)
    return 0;
  return count;
}

/* A GPU leader alone, as a user runs it: with RLX_VK_TIMELINE=1 its rank
 * prints, per kind of submission, the device's time and idle time, and
 * its rounds went through the path that keeps two of them queued (the
 * gradient of the round after next behind each update made in one pass),
 * which RLX_VK_EARLY=0 turns off. */
static void
test_gpu_alone_timeline (void)
{
  g_autofree char *cohort = g_strdup_printf ("timeline-%d", (int) getpid ());
  const char *argv[] = { g_getenv ("RLX_RANK"), "join", "--local", "--cohort", cohort,
                         "--backend", "vulkan:llvmpipe", "--model", "mnist-mlp", "--batch", "64",
                         "--steps", "24", "--checkpoint-every", "0", "--json", NULL };
  g_autofree char *out = NULL, *err = NULL, *out0 = NULL, *err0 = NULL;
  g_auto(GStrv) env = NULL;
  int status = -1;

  if (!need_lavapipe ())
    return;
  env = g_environ_setenv (g_get_environ (), "RLX_VK_TIMELINE", "1", TRUE);
  g_assert_true (g_spawn_sync (NULL, (char **) argv, env, G_SPAWN_DEFAULT, NULL, NULL, &out, &err,
                               &status, NULL));
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_test_message ("%s", err);
  g_assert_nonnull (strstr (err, "rlx-vk timeline: mnist-mlp on llvmpipe"));
  g_assert_cmpuint (timeline_count (err, "update made ahead, one pass"), >=, 20);
  g_assert_cmpuint (timeline_count (err, "gradient after next"), >=, 20);
  /* and without it, the same training without those */
  env = g_environ_setenv (env, "RLX_VK_EARLY", "0", TRUE);
  g_free (cohort);
  cohort = g_strdup_printf ("timeline0-%d", (int) getpid ());
  argv[4] = cohort;
  g_assert_true (g_spawn_sync (NULL, (char **) argv, env, G_SPAWN_DEFAULT, NULL, NULL, &out0,
                               &err0, &status, NULL));
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_cmpuint (timeline_count (err0, "gradient after next"), ==, 0);
  g_assert_cmpuint (timeline_count (err0, "update made ahead, one pass"), >=, 20);
  {
    /* each run's done event: the same hash */
    const char *da = strstr (out, "\"event\":\"done\""), *db = strstr (out0, "\"event\":\"done\"");
    const char *a = da ? strstr (da, "\"hash\":\"") : NULL, *b = db ? strstr (db, "\"hash\":\"") : NULL;

    g_assert_nonnull (a);
    g_assert_nonnull (b);
    g_assert_cmpint (strncmp (a, b, 8 + 16), ==, 0);
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  /* the validation layer stays off: a cohort test, not a driver test */
  g_unsetenv ("RLX_VK_VALIDATE");
  if (g_getenv ("CI") != NULL && g_getenv ("RLX_RANK") != NULL && !have_lavapipe ())
    g_error ("CI is set but rlx-rank sees no lavapipe device: install mesa-vulkan-drivers "
             "(scripts/deps.sh does)");
  g_test_add_func ("/gpu/mixed-cohort/cpu-leads-f16-gpu-f8e4m3", test_cpu_leads);
  g_test_add_func ("/gpu/mixed-cohort/gpu-leads-f8e5m2-cpu-f32", test_gpu_leads);
  g_test_add_func ("/gpu/mixed-cohort/gpu-leads-f8e4m3-cpu-f16", test_gpu_leads_f8);
  g_test_add_func ("/gpu/mixed-cohort/gpu-leads-f16-cpu-f32", test_gpu_leads_f16);
  g_test_add_func ("/gpu/mixed-cohort/gpu-alone-then-joined", test_gpu_alone_then_joined);
  g_test_add_func ("/gpu/mixed-cohort/subnormal-updates", test_subnormal_updates);
  g_test_add_func ("/gpu/mixed-cohort/gpu-alone-timeline", test_gpu_alone_timeline);
  return g_test_run ();
}
