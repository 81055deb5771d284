/* test-stop-evaluating.c — a rank stopped while it measures test accuracy
 * exits cleanly
 *
 * `--evaluate-every K` measures the test accuracy on threads of their own,
 * inside OpenBLAS. A rank that left (SIGTERM, or its --steps reached) used
 * to report stopped and return from main with those evaluations still
 * running: exit's handlers then unmapped OpenBLAS's buffers under them and
 * the rank died of SIGSEGV after it had printed "done" and its checkpoint
 * (test-sync-auto-trains failed so, now and then). A real `rlx-rank join`
 * of mnist-mlp-xl here evaluates every step (one at a time), and
 * --fault-eval-ms keeps each evaluation passing over the test split for ten
 * minutes, inside sgemm as a real one mostly is. It must stop it, wait for
 * it, and exit 0, soon. With that fault an exit while an evaluation runs
 * aborts with a message (core/rlx-coordinator-events.c), so a rank that
 * does not wait fails here every time, not only when the SIGSEGV happens
 * to strike (tests/core/test-node.c's /app/node/leave-while-evaluating
 * shows the wait in-process).
 *
 * And /stop-evaluating/threads: --evaluate-threads N lets N evaluations
 * run at once, so that evaluations slower than the steps between them are
 * not skipped.
 */
#include "rlx-config.h"
#include "cohort-harness.h"

#include <signal.h>

#define EXIT_MS 60000

static Node *
evaluating_rank (Harness *h, const char *label, const char *steps)
{
  Node *n = harness_join (h, label, "--cohort", label, "--model", "mnist-mlp-xl",
                          "--dataset", "synthetic", "--batch", "64", "--steps", steps,
                          "--wait-members", "1", "--evaluate-every", "1",
                          "--fault-eval-ms", "600000", "--checkpoint-every", "0", NULL);

  /* Replica operations complete in order: once step 3 is committed, the
   * read for the evaluation of step 1 is done and it runs. */
  harness_wait_event (h, n, "step", "step", 3, 120000);
  return n;
}

static void
assert_stopped_ok (Harness *h, Node *n)
{
  int done;

  harness_assert_exit_ok (h, n, EXIT_MS);
  done = node_find_event (n, "done", 0);
  if (done < 0 || node_find_event (n, "evaluated", 0) >= 0)
    {
      harness_dump (h);
      g_error ("%s: want a \"done\" event and no evaluation (each was cancelled)", n->label);
    }
}

/* SIGTERM: the leave cancels the evaluations and waits for them. */
static void
test_sigterm (void)
{
  Harness *h = harness_new ();
  Node *n = evaluating_rank (h, "stop-eval-term", "100000");

  node_kill (n, SIGTERM);
  assert_stopped_ok (h, n);
  harness_free (h);
}

/* --steps reached: the same leave, without a signal. */
static void
test_steps_reached (void)
{
  Harness *h = harness_new ();
  Node *n = evaluating_rank (h, "stop-eval-steps", "4");

  assert_stopped_ok (h, n);
  harness_free (h);
}

/* How many evaluations (@threads at once) reported, in a run of 10 steps
 * where a step takes 400 ms (--fault-slow-ms) and an evaluation 1 s
 * (--fault-eval-ms): about three are due at once, and those still running
 * when the run ends are cancelled. (Each names the step it measured, the
 * replica's when its parameters were read: a read waits behind the step
 * being computed, so it may be a later step than the one it was due at.) */
static guint
evaluations_of (const char *label, const char *threads)
{
  Harness *h = harness_new ();
  Node *n = harness_join (h, label, "--cohort", label, "--dataset", "synthetic", "--batch", "8",
                          "--steps", "10", "--wait-members", "1", "--evaluate-every", "1",
                          "--evaluate-threads", threads, "--fault-eval-ms", "1000",
                          "--fault-slow-ms", "400", "--checkpoint-every", "0", NULL);
  guint count = 0;

  harness_assert_exit_ok (h, n, EXIT_MS);
  for (int i = node_find_event (n, "evaluated", 0); i >= 0;
       i = node_find_event (n, "evaluated", (guint) i + 1))
    count++;
  harness_free (h);
  return count;
}

/* Four at once: every evaluation due runs but the last few (cancelled by
 * the end: one due at step k ends about 1.4 s later). One at a time (the
 * default): those due while one runs or is read are skipped. */
static void
test_threads (void)
{
  guint four = evaluations_of ("eval-four", "4");
  guint one = evaluations_of ("eval-one", "1");

  if (four < 5 || one > 3)
    g_error ("evaluations: %u with --evaluate-threads 4 (want at least 5), %u with 1 (want "
             "at most 3)", four, one);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/stop-evaluating/sigterm", test_sigterm);
  g_test_add_func ("/stop-evaluating/steps-reached", test_steps_reached);
  g_test_add_func ("/stop-evaluating/threads", test_threads);
  return g_test_run ();
}
