/* test-compute-queue.c — the cohort's work on a real CPU backend's worker
 * (core/cohort/rlx-compute-queue.h): results come back on the owner's
 * thread, in order, and say whether they still matter (an assignment
 * replaced, member steps forgotten, a round abandoned).
 *
 * The worker is held by a first operation that waits on a gate, so that
 * everything a test queues is queued before any of it runs.
 */
#include "rlx-config.h"
#include "core/cohort/rlx-compute-queue.h"
#include "core/vision/rlx-model.h"

typedef struct {
  GThread         *owner;
  RlxComputeQueue *queue;
  GPtrArray       *members;   /* copies of the results: RlxMemberStep's out part */
  GPtrArray       *leaders;
  guint            done;
  /* the gate */
  GMutex           lock;
  GCond            cond;
  gboolean         open;
} Fixture;

typedef struct {
  guint64  step;
  gboolean current, applied, computed;
  gboolean has_frame;
} MemberSeen;

typedef struct {
  RlxLeaderOpKind kind;
  guint64         step;
  gboolean        current, ok;
  char           *refused;
  guint64         hash;
} LeaderSeen;

static void
leader_seen_free (gpointer p)
{
  LeaderSeen *s = p;

  g_free (s->refused);
  g_free (s);
}

static void
on_member_done (RlxMemberStep *ms, const GError *error, gpointer user_data)
{
  Fixture *f = user_data;
  MemberSeen *s = g_new0 (MemberSeen, 1);

  g_assert_no_error (error);
  g_assert_true (g_thread_self () == f->owner);
  s->step = ms->n > 0 ? ms->step : ms->commit;
  s->current = ms->current;
  s->applied = ms->applied;
  s->computed = ms->computed;
  s->has_frame = ms->frame != NULL;
  g_ptr_array_add (f->members, s);
  f->done++;
}

static void
on_leader_done (RlxLeaderOp *op, const GError *error, gpointer user_data)
{
  Fixture *f = user_data;
  LeaderSeen *s = g_new0 (LeaderSeen, 1);

  g_assert_no_error (error);
  g_assert_true (g_thread_self () == f->owner);
  s->kind = op->kind;
  s->step = op->step;
  s->current = op->current;
  s->ok = op->ok;
  s->refused = g_strdup (op->refused);
  s->hash = op->hash;
  g_ptr_array_add (f->leaders, s);
  f->done++;
}

/* Worker thread: load initial parameters, then wait at the gate. */
static gboolean
hold_run (RlxBackend *backend, gpointer data, GError **error)
{
  Fixture *f = data;
  const RlxModel *model = rlx_backend_model (backend);
  g_autofree float *params = g_new (float, model->n_params);

  rlx_model_init_params (model, 1, params);
  if (!rlx_backend_load_params (backend, params, error))
    return FALSE;
  g_mutex_lock (&f->lock);
  while (!f->open)
    g_cond_wait (&f->cond, &f->lock);
  g_mutex_unlock (&f->lock);
  return TRUE;
}

static void
hold_done (RlxWorker *worker, gpointer data, const GError *error, gpointer user_data)
{
  g_assert_no_error (error);
}

static void
fixture_set_up (Fixture *f, gconstpointer data)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxDataset) dataset = rlx_dataset_open ("synthetic", 0, &error);
  RlxBackend *backend;

  g_assert_no_error (error);
  backend = rlx_backend_resolve ("cpu", rlx_model_get (RLX_MODEL_MNIST_MLP), dataset, 64, &error);
  g_assert_no_error (error);
  f->owner = g_thread_self ();
  f->members = g_ptr_array_new_with_free_func (g_free);
  f->leaders = g_ptr_array_new_with_free_func (leader_seen_free);
  g_mutex_init (&f->lock);
  g_cond_init (&f->cond);
  f->queue = rlx_compute_queue_new (rlx_worker_new (backend),
                                    &(RlxComputeQueueCallbacks) { on_member_done, on_leader_done },
                                    f);
  rlx_worker_queue (rlx_compute_queue_get_worker (f->queue), hold_run, hold_done, f, NULL, NULL);
}

static void
fixture_tear_down (Fixture *f, gconstpointer data)
{
  rlx_compute_queue_free (f->queue);
  g_ptr_array_unref (f->members);
  g_ptr_array_unref (f->leaders);
  g_mutex_clear (&f->lock);
  g_cond_clear (&f->cond);
}

/* Open the gate and wait for @n results. */
static void
run_until (Fixture *f, guint n)
{
  gint64 until = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;

  g_mutex_lock (&f->lock);
  f->open = TRUE;
  g_cond_signal (&f->cond);
  g_mutex_unlock (&f->lock);
  while (f->done < n && g_get_monotonic_time () < until)
    g_main_context_iteration (NULL, TRUE);
  g_assert_cmpuint (f->done, ==, n);
}

static RlxMemberStep *
assignment (guint64 step, guint n)
{
  RlxMemberStep *ms = rlx_member_step_new ();

  ms->term = 1;
  ms->step = step;
  ms->n = n;
  ms->indices = g_new (guint32, n);
  for (guint i = 0; i < n; i++)
    ms->indices[i] = (guint32) (step * n + i);
  rlx_msg_init (&ms->header, RLX_MSG_GRAD, "me");
  ms->header.u.grad.term = 1;
  ms->header.u.grad.step = step;
  ms->precision = RLX_PRECISION_F16;
  ms->feedback = TRUE;
  return ms;
}

/* A newer assignment replaces one queued before it: the older is skipped. */
static void
test_assignment_replaced (Fixture *f, gconstpointer data)
{
  rlx_compute_queue_member_step (f->queue, assignment (1, 8));
  rlx_compute_queue_member_step (f->queue, assignment (2, 8));
  g_assert_cmpuint (rlx_compute_queue_member_steps (f->queue), ==, 2);
  run_until (f, 2);
  g_assert_cmpuint (rlx_compute_queue_member_steps (f->queue), ==, 0);
  {
    MemberSeen *a = g_ptr_array_index (f->members, 0), *b = g_ptr_array_index (f->members, 1);
    g_assert_cmpuint (a->step, ==, 1);
    g_assert_false (a->computed);
    g_assert_false (a->has_frame);
    g_assert_cmpuint (b->step, ==, 2);
    g_assert_true (b->computed);
    g_assert_true (b->has_frame);
    g_assert_true (a->current && b->current);
  }
}

/* Dropped assignments are skipped; forgotten steps come back not current. */
static void
test_dropped_and_forgotten (Fixture *f, gconstpointer data)
{
  rlx_compute_queue_member_step (f->queue, assignment (1, 8));
  rlx_compute_queue_drop_assignments (f->queue);
  rlx_compute_queue_member_step (f->queue, assignment (2, 8));
  rlx_compute_queue_forget_member_steps (f->queue);
  rlx_compute_queue_member_step (f->queue, assignment (3, 8));
  run_until (f, 3);
  {
    MemberSeen *a = g_ptr_array_index (f->members, 0), *b = g_ptr_array_index (f->members, 1),
               *c = g_ptr_array_index (f->members, 2);
    g_assert_false (a->computed);
    g_assert_false (a->current);
    /* (replaced by step 3 as well) */
    g_assert_false (b->computed);
    g_assert_false (b->current);
    g_assert_true (c->computed);
    g_assert_true (c->current);
  }
}

static void
queue_round (Fixture *f, guint64 step)
{
  g_autofree guint32 *idx = g_new (guint32, 8);
  RlxFinishJob job = { .step = step, .lr = 0.05, .precision = RLX_PRECISION_F32,
                       .feedback = TRUE };

  for (guint i = 0; i < 8; i++)
    idx[i] = (guint32) (step * 8 + i);
  rlx_compute_queue_own (f->queue, step, idx, 8, RLX_FAULT_NONE, 0, NULL);
  rlx_compute_queue_finish (f->queue, &job);
}

/* A round's own gradient and finish: the update made and applied. */
static void
test_round (Fixture *f, gconstpointer data)
{
  rlx_compute_queue_begin_round (f->queue);
  queue_round (f, 1);
  g_assert_cmpuint (rlx_compute_queue_finishes (f->queue), ==, 1);
  run_until (f, 2);
  g_assert_cmpuint (rlx_compute_queue_finishes (f->queue), ==, 0);
  {
    LeaderSeen *own = g_ptr_array_index (f->leaders, 0), *fin = g_ptr_array_index (f->leaders, 1);
    g_assert_cmpint (own->kind, ==, RLX_LEADER_OWN);
    g_assert_true (own->current);
    g_assert_null (own->refused);
    g_assert_cmpint (fin->kind, ==, RLX_LEADER_FINISH);
    g_assert_true (fin->current);
    g_assert_true (fin->ok);
    g_assert_cmpuint (fin->hash, !=, 0);
  }
}

/* An abandoned round's finish does not run, and the finish chained behind
 * it (queued before it ran) refuses too: its own gradient was computed at
 * parameters no commit holds. The next round's results are current. */
static void
test_abandoned (Fixture *f, gconstpointer data)
{
  rlx_compute_queue_begin_round (f->queue);
  queue_round (f, 1);
  rlx_compute_queue_abandon_round (f->queue);
  queue_round (f, 2);
  run_until (f, 4);
  {
    LeaderSeen *own1 = g_ptr_array_index (f->leaders, 0), *fin1 = g_ptr_array_index (f->leaders, 1),
               *own2 = g_ptr_array_index (f->leaders, 2), *fin2 = g_ptr_array_index (f->leaders, 3);
    g_assert_false (own1->current);
    g_assert_false (fin1->current);
    g_assert_false (fin1->ok);
    g_assert_cmpstr (fin1->refused, ==, "the round was abandoned");
    g_assert_true (own2->current);
    g_assert_true (fin2->current);
    g_assert_false (fin2->ok);
    g_assert_cmpstr (fin2->refused, ==, "the round before it was not committed");
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add ("/cohort/compute-queue/assignment-replaced", Fixture, NULL, fixture_set_up,
              test_assignment_replaced, fixture_tear_down);
  g_test_add ("/cohort/compute-queue/dropped-and-forgotten", Fixture, NULL, fixture_set_up,
              test_dropped_and_forgotten, fixture_tear_down);
  g_test_add ("/cohort/compute-queue/round", Fixture, NULL, fixture_set_up, test_round,
              fixture_tear_down);
  g_test_add ("/cohort/compute-queue/abandoned", Fixture, NULL, fixture_set_up, test_abandoned,
              fixture_tear_down);
  return g_test_run ();
}
