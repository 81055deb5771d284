/* rlx-worker.h — the compute worker thread of one rank
 *
 * The worker thread owns the rank's backend (rlx-backend.h): its replica of
 * the parameters, the gradient stream's error feedback and, on a leader,
 * the round being summed. Work goes in through a queue; results come back
 * on the main context of the thread that created the worker, so the main
 * loop never waits on a fence or a gradient.
 *
 * Two kinds of work:
 *
 *   rlx_worker_submit  a gradient at parameters given with the job (copied),
 *                      for tools and tests. One at a time: a second submit
 *                      while any work is in flight is refused with
 *                      RLX_WORKER_ERROR_BUSY, never a crash.
 *   rlx_worker_queue   an operation on the backend (a function run on the
 *                      worker thread) — the cohort's steps: load or read
 *                      the parameters, apply an update and compute the next
 *                      gradient, the leader's round_own / round_add /
 *                      round_finish. Operations run one after the other in
 *                      the order queued, and their results are delivered in
 *                      that same order; the caller may queue the next one
 *                      while one runs, so the worker goes from one to the
 *                      next without waiting for the main loop (a leader
 *                      queues its next own gradient right behind the round's
 *                      finish).
 */
#pragma once

#include <glib.h>
#include "rlx-backend.h"

G_BEGIN_DECLS

#define RLX_WORKER_ERROR (rlx_worker_error_quark ())
GQuark rlx_worker_error_quark (void);
typedef enum {
  RLX_WORKER_ERROR_BUSY,
  RLX_WORKER_ERROR_CLOSED,
} RlxWorkerError;

typedef struct _RlxWorker RlxWorker;

typedef struct {
  guint64      job_id;
  float        loss;
  float       *grads;        /* n_params floats, owned by the result */
  gsize        n_grads;
  guint        n_samples;
  gint64       compute_us;   /* wall time the backend spent */
} RlxGradResult;

/* @result is NULL when @error is set; both are valid for the call only. */
typedef void (*RlxWorkerDoneFunc) (RlxWorker           *worker,
                                   const RlxGradResult *result,
                                   const GError        *error,
                                   gpointer             user_data);

/* Takes ownership of @backend. */
RlxWorker  *rlx_worker_new       (RlxBackend *backend);
/* Stops the thread (after the work in flight) and frees the backend. No
 * callback runs after this returns; the data of operations not delivered is
 * freed. */
void        rlx_worker_free      (RlxWorker *self);
/* The backend, for what any thread may ask of it (name, model, limits):
 * only the worker thread computes with it. */
RlxBackend *rlx_worker_backend   (RlxWorker *self);
/* Work was handed over and its result has not been delivered yet. */
gboolean    rlx_worker_busy      (RlxWorker *self);
/* Test switch: sleep @us on the worker thread after every gradient (counted
 * in its compute time; rlx_worker_extra_delay does it in an operation), to
 * make this rank look slower. 0: off. Any thread. */
void        rlx_worker_set_extra_delay_us (RlxWorker *self, guint64 us);
void        rlx_worker_extra_delay (RlxWorker *self);
/* A pace: after each gradient the worker thread sleeps until @us have
 * passed since the end of the one before, so it makes at most one
 * gradient per @us (a node cut off from its cohort, whose branch the merge
 * rule will discard, does not take the machine's cores from the others:
 * rlx-coordinator-founding.c). 0: none. Any thread. */
void        rlx_worker_set_pace_us (RlxWorker *self, guint64 us);
/* Test switch: sleep @us on the worker thread after every inner step of an
 * outer round but its last (rlx_worker_inner_delay, where the compute queue
 * runs its urgent work between two of them), to make this rank's outer
 * rounds long. 0: off. Any thread. */
void        rlx_worker_set_inner_delay_us (RlxWorker *self, guint64 us);
void        rlx_worker_inner_delay (RlxWorker *self);

/* Queue one gradient job; @params and @indices are copied. Returns the job
 * id (> 0), or 0 with RLX_WORKER_ERROR_BUSY if any work is in flight. */
guint64     rlx_worker_submit    (RlxWorker *self, const float *params,
                                  const guint32 *indices, guint n,
                                  RlxWorkerDoneFunc done, gpointer user_data,
                                  GError **error);

/* ── operations ───────────────────────────────────────────────────────── */

/* Runs on the worker thread with the backend; FALSE with @error set fails
 * the operation. */
typedef gboolean (*RlxWorkerOpFunc) (RlxBackend *backend, gpointer data, GError **error);
/* Runs on the creating thread's main context, in queue order; @error is
 * the run's (NULL: it succeeded). It may queue more, cancel, or free the
 * worker. */
typedef void (*RlxWorkerOpDone) (RlxWorker *worker, gpointer data, const GError *error,
                                 gpointer user_data);

/* Queue @run (@data is handed to it, then to @done, then freed with
 * @free_data, which also runs when the operation is dropped). @done may be
 * NULL. Owner thread only. */
void        rlx_worker_queue     (RlxWorker *self, RlxWorkerOpFunc run, RlxWorkerOpDone done,
                                  gpointer data, GDestroyNotify free_data, gpointer user_data);
/* Operations queued or running, or delivered late: not yet completed. */
guint       rlx_worker_pending   (RlxWorker *self);
/* µs the worker thread has spent with nothing to do, waiting for work to be
 * queued (how long the device it drives waited for the owner). Any thread. */
guint64     rlx_worker_wait_us   (RlxWorker *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxWorker, rlx_worker_free)

G_END_DECLS
