/* test-worker.c — the compute worker thread with the real CPU backend:
 * results on the creating thread's main context, equal to a direct call,
 * inputs copied, busy refusal, errors through the callback, free with a job
 * in flight (no callback afterwards).
 */
#include "rlx-config.h"
#include "core/rlx-worker.h"
#include "core/p2p/rlx-busy-poll.h"
#include "core/rlx-backend.h"
#include "core/vision/rlx-model.h"
#include "core/vision/rlx-dataset.h"

#include <math.h>
#include <string.h>

typedef struct {
  guint     calls;
  GThread  *thread;
  guint64   job_id;
  float     loss;
  float    *grads;
  gsize     n_grads;
  guint     n_samples;
  gint64    compute_us;
  GError   *error;
} Done;

static RlxDataset *dataset;
static const RlxModel *model;

static void
on_done (RlxWorker *worker, const RlxGradResult *result, const GError *error, gpointer user_data)
{
  Done *d = user_data;

  d->calls++;
  d->thread = g_thread_self ();
  g_clear_error (&d->error);
  g_clear_pointer (&d->grads, g_free);
  if (error != NULL)
    {
      g_assert_null (result);
      d->error = g_error_copy (error);
      return;
    }
  g_assert_nonnull (result);
  d->job_id = result->job_id;
  d->loss = result->loss;
  d->n_grads = result->n_grads;
  d->grads = g_memdup2 (result->grads, result->n_grads * sizeof (float));
  d->n_samples = result->n_samples;
  d->compute_us = result->compute_us;
}

static void
done_clear (Done *d)
{
  g_clear_error (&d->error);
  g_clear_pointer (&d->grads, g_free);
}

static void
wait_calls (Done *d, guint want)
{
  gint64 deadline = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;

  while (d->calls < want && g_get_monotonic_time () < deadline)
    g_main_context_iteration (NULL, TRUE);
  g_assert_cmpuint (d->calls, ==, want);
}

static RlxWorker *
new_worker (guint max_batch)
{
  g_autoptr(GError) error = NULL;
  RlxBackend *backend = rlx_backend_resolve ("cpu", model, dataset, max_batch, &error);

  g_assert_no_error (error);
  g_assert_nonnull (backend);
  return rlx_worker_new (backend);
}

static void
test_result_on_main_context (void)
{
  g_autoptr(RlxWorker) worker = new_worker (64);
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxBackend) direct = NULL;
  g_autofree float *params = g_new (float, model->n_params);
  g_autofree float *expect = g_new (float, model->n_params);
  guint32 indices[32];
  float expect_loss;
  guint64 id;
  Done d = { 0 };

  rlx_model_init_params (model, 7, params);
  for (guint i = 0; i < G_N_ELEMENTS (indices); i++)
    indices[i] = i * 97 + 3;

  id = rlx_worker_submit (worker, params, indices, G_N_ELEMENTS (indices), on_done, &d, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (id, >, 0);
  g_assert_true (rlx_worker_busy (worker));

  /* Inputs are copied: scribbling on them now changes nothing. */
  {
    g_autofree float *saved = g_memdup2 (params, model->n_params * sizeof (float));
    guint32 saved_idx[32];

    memcpy (saved_idx, indices, sizeof indices);
    for (gsize i = 0; i < model->n_params; i++)
      params[i] = NAN;
    memset (indices, 0xff, sizeof indices);

    /* Nothing is called back before the main context runs. */
    g_usleep (1000);
    g_assert_cmpuint (d.calls, ==, 0);
    wait_calls (&d, 1);

    memcpy (params, saved, model->n_params * sizeof (float));
    memcpy (indices, saved_idx, sizeof indices);
  }
  g_assert_no_error (d.error);
  g_assert_true (d.thread == g_thread_self ());
  g_assert_false (rlx_worker_busy (worker));
  g_assert_cmpuint (d.job_id, ==, id);
  g_assert_cmpuint (d.n_samples, ==, 32);
  g_assert_cmpuint (d.n_grads, ==, model->n_params);
  g_assert_cmpint (d.compute_us, >, 0);
  g_assert_true (isfinite (d.loss) && d.loss > 0);

  /* Bit-identical to the backend called directly. */
  direct = rlx_backend_resolve ("cpu", model, dataset, 64, &error);
  g_assert_no_error (error);
  g_assert_true (rlx_backend_grads (direct, params, indices, 32, &expect_loss, expect, &error));
  g_assert_cmpmem (&d.loss, sizeof (float), &expect_loss, sizeof (float));
  g_assert_cmpmem (d.grads, model->n_params * sizeof (float), expect, model->n_params * sizeof (float));

  /* The next job gets the next id. */
  g_assert_cmpuint (rlx_worker_submit (worker, params, indices, 8, on_done, &d, &error), ==, id + 1);
  wait_calls (&d, 2);
  g_assert_cmpuint (d.n_samples, ==, 8);
  done_clear (&d);
}

static void
test_busy (void)
{
  g_autoptr(RlxWorker) worker = new_worker (64);
  g_autoptr(GError) error = NULL;
  g_autofree float *params = g_new (float, model->n_params);
  guint32 indices[64];
  Done d = { 0 };
  Done other = { 0 };

  rlx_model_init_params (model, 1, params);
  for (guint i = 0; i < 64; i++)
    indices[i] = i;

  g_assert_cmpuint (rlx_worker_submit (worker, params, indices, 64, on_done, &d, &error), >, 0);
  /* In flight until its result is delivered on this thread, whatever the
   * worker thread is doing meanwhile. */
  g_assert_cmpuint (rlx_worker_submit (worker, params, indices, 64, on_done, &other, &error), ==, 0);
  g_assert_error (error, RLX_WORKER_ERROR, RLX_WORKER_ERROR_BUSY);
  g_clear_error (&error);
  g_usleep (200000);
  g_assert_cmpuint (rlx_worker_submit (worker, params, indices, 64, on_done, &other, &error), ==, 0);
  g_assert_error (error, RLX_WORKER_ERROR, RLX_WORKER_ERROR_BUSY);
  g_clear_error (&error);

  wait_calls (&d, 1);
  g_assert_no_error (d.error);
  /* Free again: accepted. */
  g_assert_cmpuint (rlx_worker_submit (worker, params, indices, 64, on_done, &other, &error), >, 0);
  wait_calls (&other, 1);
  g_assert_cmpuint (d.calls, ==, 1);
  done_clear (&d);
  done_clear (&other);
}

static void
test_backend_error (void)
{
  g_autoptr(RlxWorker) worker = new_worker (16);
  g_autoptr(GError) error = NULL;
  g_autofree float *params = g_new0 (float, model->n_params);
  guint32 indices[32] = { 0 };
  guint32 bad[2] = { 0, 10000000 };
  Done d = { 0 };

  /* More samples than the backend's max batch. */
  g_assert_cmpuint (rlx_worker_submit (worker, params, indices, 32, on_done, &d, &error), >, 0);
  wait_calls (&d, 1);
  g_assert_error (d.error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_BATCH);
  g_assert_null (d.grads);
  g_assert_false (rlx_worker_busy (worker));

  /* An index past the training set. */
  g_assert_cmpuint (rlx_worker_submit (worker, params, bad, 2, on_done, &d, &error), >, 0);
  wait_calls (&d, 2);
  g_assert_error (d.error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_BATCH);

  /* And the worker still works afterwards. */
  g_assert_cmpuint (rlx_worker_submit (worker, params, indices, 4, on_done, &d, &error), >, 0);
  wait_calls (&d, 3);
  g_assert_no_error (d.error);
  done_clear (&d);
}

static void
test_free_in_flight (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *params = g_new (float, model->n_params);
  guint32 indices[256];
  Done d = { 0 };
  RlxWorker *worker = new_worker (256);
  gint64 deadline;

  rlx_model_init_params (model, 3, params);
  for (guint i = 0; i < 256; i++)
    indices[i] = i * 13;

  g_assert_cmpuint (rlx_worker_submit (worker, params, indices, 256, on_done, &d, &error), >, 0);
  rlx_worker_free (worker);   /* joins after the job; its result must be dropped */
  g_assert_cmpuint (d.calls, ==, 0);

  /* The result was queued on this context before the join returned: run
   * the context a while and check it never calls back. */
  deadline = g_get_monotonic_time () + 200000;
  while (g_get_monotonic_time () < deadline)
    g_main_context_iteration (NULL, FALSE);
  g_assert_cmpuint (d.calls, ==, 0);

  /* Free right after the result was delivered, too (nothing queued). */
  worker = new_worker (8);
  g_assert_cmpuint (rlx_worker_submit (worker, params, indices, 8, on_done, &d, &error), >, 0);
  wait_calls (&d, 1);
  rlx_worker_free (worker);
  g_assert_cmpuint (d.calls, ==, 1);
  done_clear (&d);
}

/* A callback that frees its own worker (a rank shutting down on an error). */
static void
on_done_free (RlxWorker *worker, const RlxGradResult *result, const GError *error, gpointer user_data)
{
  guint *calls = user_data;

  (*calls)++;
  rlx_worker_free (worker);
}

static void
test_free_in_callback (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *params = g_new0 (float, model->n_params);
  guint32 indices[4] = { 1, 2, 3, 4 };
  RlxWorker *worker = new_worker (8);
  guint calls = 0;
  gint64 deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;

  g_assert_cmpuint (rlx_worker_submit (worker, params, indices, 4, on_done_free, &calls, &error), >, 0);
  while (calls == 0 && g_get_monotonic_time () < deadline)
    g_main_context_iteration (NULL, TRUE);
  g_assert_cmpuint (calls, ==, 1);
}

/* ── operations ─────────────────────────────────────────────────────────── */

typedef struct {
  GArray  *ran;         /* order the worker ran them in (written on the worker thread) */
  GArray  *delivered;   /* order the main context heard of them */
  guint    freed;
  GThread *main;
  gboolean free_worker; /* the third op's callback frees the worker */
} OpLog;

typedef struct {
  OpLog   *log;
  guint    k;
  gboolean fail;
  gboolean slow;
} Op;

static gboolean
op_run (RlxBackend *backend, gpointer data, GError **error)
{
  Op *op = data;

  g_assert_true (g_thread_self () != op->log->main);
  g_assert_nonnull (backend);
  if (op->slow)
    g_usleep (20000);
  g_array_append_val (op->log->ran, op->k);
  if (op->fail)
    {
      g_set_error (error, RLX_BACKEND_ERROR, RLX_BACKEND_ERROR_FAILED, "op %u failed", op->k);
      return FALSE;
    }
  return TRUE;
}

static void
op_done (RlxWorker *worker, gpointer data, const GError *error, gpointer user_data)
{
  Op *op = data;

  g_assert_true (g_thread_self () == op->log->main);
  g_assert_true (op->fail == (error != NULL));
  g_array_append_val (op->log->delivered, op->k);
  if (op->log->free_worker && op->k == 2)
    rlx_worker_free (worker);
}

static void
op_free (gpointer data)
{
  Op *op = data;

  op->log->freed++;
  g_free (op);
}

static void
queue_op (RlxWorker *worker, OpLog *log, guint k, gboolean fail, gboolean slow)
{
  Op *op = g_new0 (Op, 1);

  op->log = log;
  op->k = k;
  op->fail = fail;
  op->slow = slow;
  rlx_worker_queue (worker, op_run, op_done, op, op_free, NULL);
}

/* Operations run one after the other in the order queued, and their results
 * come back on the main context in that order, failures included, however
 * many were waiting; each op's data is freed once. While any is pending,
 * the one-at-a-time submit is refused. */
static void
test_ops_in_order (void)
{
  g_autoptr(RlxWorker) worker = new_worker (8);
  g_autoptr(GError) error = NULL;
  g_autofree float *params = g_new0 (float, model->n_params);
  guint32 indices[4] = { 1, 2, 3, 4 };
  OpLog log = { g_array_new (FALSE, FALSE, sizeof (guint)),
                g_array_new (FALSE, FALSE, sizeof (guint)), 0, g_thread_self (), FALSE };
  gint64 deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;

  for (guint k = 0; k < 50; k++)
    queue_op (worker, &log, k, k % 7 == 3, k == 0);
  g_assert_cmpuint (rlx_worker_pending (worker), ==, 50);
  g_assert_true (rlx_worker_busy (worker));
  g_assert_cmpuint (rlx_worker_submit (worker, params, indices, 4, on_done, NULL, &error), ==, 0);
  g_assert_error (error, RLX_WORKER_ERROR, RLX_WORKER_ERROR_BUSY);
  while (log.delivered->len < 50 && g_get_monotonic_time () < deadline)
    g_main_context_iteration (NULL, TRUE);
  g_assert_cmpuint (log.delivered->len, ==, 50);
  for (guint k = 0; k < 50; k++)
    {
      g_assert_cmpuint (g_array_index (log.ran, guint, k), ==, k);
      g_assert_cmpuint (g_array_index (log.delivered, guint, k), ==, k);
    }
  g_assert_cmpuint (log.freed, ==, 50);
  g_assert_cmpuint (rlx_worker_pending (worker), ==, 0);
  g_array_unref (log.ran);
  g_array_unref (log.delivered);
}

/* Freeing the worker with operations queued: the one running finishes,
 * nobody is called back afterwards, and every op's data is freed; a
 * callback may free the worker, and the results queued behind it are
 * dropped. */
static void
test_ops_free (void)
{
  OpLog log = { g_array_new (FALSE, FALSE, sizeof (guint)),
                g_array_new (FALSE, FALSE, sizeof (guint)), 0, g_thread_self (), FALSE };
  RlxWorker *worker = new_worker (8);
  gint64 deadline;

  for (guint k = 0; k < 20; k++)
    queue_op (worker, &log, k, FALSE, TRUE);
  rlx_worker_free (worker);
  g_assert_cmpuint (log.freed, ==, 20);
  g_assert_cmpuint (log.ran->len, <, 20);
  deadline = g_get_monotonic_time () + 100000;
  while (g_get_monotonic_time () < deadline)
    g_main_context_iteration (NULL, FALSE);
  g_assert_cmpuint (log.delivered->len, ==, 0);

  /* the third result's callback frees the worker: the rest are dropped */
  g_array_set_size (log.ran, 0);
  log.freed = 0;
  log.free_worker = TRUE;
  worker = new_worker (8);
  for (guint k = 0; k < 6; k++)
    queue_op (worker, &log, k, FALSE, FALSE);
  deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  while (log.freed < 6 && g_get_monotonic_time () < deadline)
    g_main_context_iteration (NULL, TRUE);
  g_assert_cmpuint (log.freed, ==, 6);
  g_assert_cmpuint (log.delivered->len, ==, 3);
  deadline = g_get_monotonic_time () + 100000;
  while (g_get_monotonic_time () < deadline)
    g_main_context_iteration (NULL, FALSE);
  g_assert_cmpuint (log.delivered->len, ==, 3);
  g_array_unref (log.ran);
  g_array_unref (log.delivered);
}

static gboolean
count_tick (gpointer data)
{
  (*(guint *) data)++;
  return G_SOURCE_CONTINUE;
}

/* Busy polling: while held, a main context with the busy source iterates
 * without blocking (many iterations in 60 ms with nothing to do); released,
 * an iteration blocks until its next timeout (about three 20 ms ticks in 60
 * ms). Holds nest; the worker's spin is 0 unless held. */
static void
test_busy_poll (void)
{
  GMainContext *ctx = g_main_context_new ();
  GSource *tick = g_timeout_source_new (20);
  guint ticks = 0, iterations;
  gint64 until;

  g_assert_false (rlx_busy_poll_active ());
  g_assert_cmpint (rlx_busy_poll_spin_us (), ==, 0);
  rlx_busy_poll_attach (ctx);
  rlx_busy_poll_attach (ctx);
  g_source_set_callback (tick, count_tick, &ticks, NULL);
  g_source_attach (tick, ctx);

  iterations = 0;
  until = g_get_monotonic_time () + 60000;
  while (g_get_monotonic_time () < until)
    {
      g_main_context_iteration (ctx, TRUE);
      iterations++;
    }
  g_assert_cmpuint (iterations, <=, ticks + 2);

  rlx_busy_poll_hold ();
  rlx_busy_poll_hold ();
  rlx_busy_poll_release ();
  g_assert_true (rlx_busy_poll_active ());
  g_assert_cmpint (rlx_busy_poll_spin_us (), >, 0);
  iterations = 0;
  ticks = 0;
  until = g_get_monotonic_time () + 60000;
  while (g_get_monotonic_time () < until)
    {
      g_main_context_iteration (ctx, TRUE);
      iterations++;
    }
  g_assert_cmpuint (iterations, >, 10 * (ticks + 1));
  rlx_busy_poll_release ();
  g_assert_false (rlx_busy_poll_active ());
  g_assert_cmpint (rlx_busy_poll_spin_us (), ==, 0);

  g_source_destroy (tick);
  g_source_unref (tick);
  g_main_context_unref (ctx);
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  int ret;

  g_test_init (&argc, &argv, NULL);

  model = rlx_model_lookup ("mnist-mlp", &error);
  g_assert_no_error (error);
  dataset = rlx_dataset_open ("synthetic", 42, &error);
  g_assert_no_error (error);

  g_test_add_func ("/p2p/worker/result-on-main-context", test_result_on_main_context);
  g_test_add_func ("/p2p/worker/busy", test_busy);
  g_test_add_func ("/p2p/worker/backend-error", test_backend_error);
  g_test_add_func ("/p2p/worker/free-in-flight", test_free_in_flight);
  g_test_add_func ("/p2p/worker/free-in-callback", test_free_in_callback);
  g_test_add_func ("/p2p/worker/ops-in-order", test_ops_in_order);
  g_test_add_func ("/p2p/worker/ops-free", test_ops_free);
  g_test_add_func ("/p2p/worker/busy-poll", test_busy_poll);

  ret = g_test_run ();
  rlx_dataset_unref (dataset);
  return ret;
}
