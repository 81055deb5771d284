/* rlx-worker.h — the compute worker thread of one rank
 *
 * The worker thread owns the rank's backend. Jobs go in through a
 * GAsyncQueue (inputs are copied); the result comes back on the main context
 * of the thread that created the worker, so the main loop never waits on a
 * fence or a gradient. A second job while one is in flight is refused with
 * RLX_WORKER_ERROR_BUSY, never a crash.
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
  guint64  job_id;
  float    loss;
  float   *grads;        /* n_params floats, owned by the result */
  gsize    n_grads;
  guint    n_samples;
  gint64   compute_us;   /* wall time the backend spent */
} RlxGradResult;

/* @result is NULL when @error is set; both are valid for the call only. */
typedef void (*RlxWorkerDoneFunc) (RlxWorker           *worker,
                                   const RlxGradResult *result,
                                   const GError        *error,
                                   gpointer             user_data);

/* Takes ownership of @backend. */
RlxWorker  *rlx_worker_new       (RlxBackend *backend);
/* Stops the thread (after the job in flight) and frees the backend. No
 * callback runs after this returns. */
void        rlx_worker_free      (RlxWorker *self);
RlxBackend *rlx_worker_backend   (RlxWorker *self);
gboolean    rlx_worker_busy      (RlxWorker *self);
/* Test switch: sleep @us on the worker thread after every gradient (counted
 * in compute_us), to make this rank look slower. 0: off. Any thread. */
void        rlx_worker_set_extra_delay_us (RlxWorker *self, guint64 us);

/* Queue one gradient job; @params and @indices are copied. Returns the job
 * id (> 0), or 0 with RLX_WORKER_ERROR_BUSY if a job is in flight. */
guint64     rlx_worker_submit    (RlxWorker *self, const float *params,
                                  const guint32 *indices, guint n,
                                  RlxWorkerDoneFunc done, gpointer user_data,
                                  GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxWorker, rlx_worker_free)

G_END_DECLS
