/* rlx-worker.h — the compute worker thread of one rank
 *
 * The worker thread owns the rank's backend. Jobs go in through a
 * GAsyncQueue; the result comes back on the main context of the thread that
 * created the worker, so the main loop never waits on a fence or a
 * gradient. A second job while one is in flight is refused with
 * RLX_WORKER_ERROR_BUSY, never a crash.
 *
 * Two kinds of job:
 *
 *   rlx_worker_submit       a gradient at parameters given with the job
 *                           (copied): for tools and tests.
 *   rlx_worker_submit_step  the cohort's step: the rank keeps its own
 *                           resident copy of the parameters between jobs
 *                           (loaded once, then changed only by applying the
 *                           committed updates, exactly as every replica
 *                           applies them), so a step moves the update in and
 *                           the gradient out, nothing parameter-sized more.
 *                           A job is "load these parameters" and/or "apply
 *                           this update (wire codes)", then optionally "the
 *                           gradient over these samples", delivered either
 *                           as floats (the leader folds its own bucket in
 *                           place) or as a finished `grad` frame at the
 *                           rank's wire precision, with the rank's error
 *                           feedback, ready for the link.
 *
 * Error feedback of the gradient stream (frames only, kept by the backend):
 * the bucket sent is quantise (g + r); the residual that bucket leaves is
 * kept *pending* until the next job says whether the leader accepted it
 * (accepted_prev → rlx_backend_accept_feedback): only then does it replace
 * r, else r stays as it was — a bucket the leader dropped or rejected
 * leaves no trace in the stream. A gradient holding NaN or ±Inf is never
 * quantised (at f8 an Inf would saturate to a plausible finite value): the
 * frame then carries the refusal ("refused") instead of a bucket, the
 * residual is untouched, and @refused says why (floats too).
 */
#pragma once

#include <glib.h>
#include "rlx-backend.h"
#include "core/cohort/rlx-msg.h"

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
  float       *grads;        /* rlx_worker_submit: n_params floats, owned by the result;
                              * submit_step (floats): the worker's buffer, valid until
                              * the next submit */
  gsize        n_grads;
  guint        n_samples;
  gint64       compute_us;   /* wall time the backend spent */
  GBytes      *frame;        /* submit_step (frames): the grad frame, owned by the result */
  const char  *refused;      /* submit_step (frames): why the frame carries no bucket */
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

typedef enum {
  RLX_WORKER_FAULT_NONE,
  RLX_WORKER_FAULT_NAN,      /* every gradient value NaN */
  RLX_WORKER_FAULT_INF,      /* values 0 and 1 +Inf and −Inf */
} RlxWorkerFault;

/* One cohort step for the rank (see the header comment). */
typedef struct {
  const float       *load;          /* nullable: new resident parameters (copied) */
  const RlxMsgArray *load_array;    /* nullable: or these (f32; frame referenced) */
  const RlxMsgArray *update;        /* nullable: then apply this update (frame referenced) */
  const guint32     *indices;       /* then the gradient over these samples (copied) */
  guint              n;             /* 0: no gradient */
  /* Output. NULL header: floats. Else a grad frame from @header (its node,
   * term and step; samples, loss and compute time are filled in) at
   * @precision, with error feedback when @feedback. */
  const RlxMsg      *header;
  RlxPrecision       precision;
  gboolean           feedback;
  gboolean           accepted_prev; /* the leader took the previous bucket */
  RlxWorkerFault     fault;         /* test switch (rlx_backend_poison_gradient) */
  guint64            stall_us;      /* test switch: this gradient takes that much longer */
} RlxWorkerStep;

guint64     rlx_worker_submit_step (RlxWorker *self, const RlxWorkerStep *step,
                                    RlxWorkerDoneFunc done, gpointer user_data,
                                    GError **error);
/* Forget the gradient stream's residual (after a snapshot). Applies to the
 * next step job. */
void        rlx_worker_reset_feedback (RlxWorker *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxWorker, rlx_worker_free)

G_END_DECLS
