/* rlx-compute-queue.h — the cohort's work on the rank's compute worker
 *
 * The queue owns the rank's RlxWorker (and through it the worker thread
 * and the backend) and every piece of state the worker thread keeps
 * between jobs. Every operation of the protocol on the backend goes
 * through it, so they run in the order the protocol asks for them and their
 * results come back in that order:
 *
 *   a member's step   apply the commit's update, compute the gradient of
 *                     the assigned slice at the rank's wire precision with
 *                     error feedback (the codes land where the grad frame
 *                     carries them), then the parameters' hash for the ack
 *   the leader's      own (its own slice), add (each member's bucket as it
 *   round             arrives), finish (the update's codes straight into
 *                     the step frame, its scale and the parameters' hash),
 *                     with the next own slice named so that a GPU computes
 *                     it right behind the finish
 *
 * A job whose RlxOuterSettings say h > 0 is one of the outer mode's
 * (`--sync outer:H`): the same operations, done by the queue's
 * RlxOuterEngine (core/cohort/rlx-outer-engine.h) — H inner steps and a
 * pseudo-gradient instead of a gradient, the outer Nesterov step instead of
 * the SGD update, and the momentum applied beside θ. Its results also
 * carry the replica's outer hash (θ and m).
 *
 * A job is a struct of its own: everything it needs is copied into it when
 * it is queued (an update or a bucket stays inside its frame, referenced,
 * never copied), so the worker thread reads nothing of its owner. Its
 * result comes back in the same struct, through the callbacks given to
 * rlx_compute_queue_new, on the owner's main context.
 *
 * Generations say whether a result still matters: queued assignments can
 * be dropped (their updates still apply), queued member steps forgotten (a
 * snapshot replaced the state they work on), and the leader's round begun
 * anew or abandoned (its contributions are dropped by the backend before
 * the next round's first, and its finish, if not started, does not run).
 * Each result says whether it is current.
 *
 * Other users of the worker (the replica's reads and loads) queue on the
 * same RlxWorker (rlx_compute_queue_get_worker), in the same order.
 *
 * Threads: created, used and freed on one thread whose thread-default main
 * context runs (the coordinator's); the callbacks run there. The worker
 * thread touches only the queue's worker-side state and the atomic
 * generations, never the owner's.
 */
#pragma once

#include <glib.h>
#include "core/rlx-worker.h"
#include "core/cohort/rlx-fault-plan.h"
#include "core/cohort/rlx-msg.h"
#include "core/cohort/rlx-outer-engine.h"

G_BEGIN_DECLS

typedef struct _RlxComputeQueue RlxComputeQueue;

/* A member's step. The caller fills the "in" part (rlx_member_step_new
 * zeroes it), the queue fills "out". */
typedef struct {
  /* in */
  RlxMsgArray     update;         /* the commit to apply first (frame referenced), or none */
  guint64         commit;         /* its step */
  guint           epoch, pos;     /* where the next batch starts after it */
  gboolean        accept_prev;    /* the leader took our previous bucket (with feedback only) */
  guint64         term, step;     /* the assignment (n > 0) */
  guint32        *indices;        /* owned */
  guint           n;
  RlxMsg          header;         /* of the grad frame (with n > 0: kind, node, term, step) */
  RlxPrecision    precision;
  gboolean        feedback;
  RlxFault        fault;
  guint64         stall_us;
  gboolean        claim_fast;     /* test fault: report compute_us 1 */
  RlxOuterSettings outer;         /* h > 0: the assignment is an outer round's local steps */
  RlxOuterSettings commit_outer;  /* h > 0: the commit is an outer round's update */
  gboolean        perturb_momentum; /* test fault: with commit_outer, the momentum
                                     * changed after the commit (m[0] += 1) */
  RlxMsg         *msg;            /* carried for the owner (owned; may be stolen in the
                                   * callback); the worker never reads it */
  /* out */
  gboolean        current;        /* no snapshot replaced the state it worked on */
  gboolean        applied;
  guint64         hash;
  guint64         outer_hash;     /* outer: θ and m after the commit (rlx_outer_hash) */
  guint64         host_bytes;     /* rlx_backend_host_bytes after it */
  gboolean        computed;       /* the gradient was computed (not skipped as replaced) */
  GBytes         *frame;          /* the grad frame (a refusal when refused) */
  float           loss;
  gint64          compute_us;
  gint64          inner_us;       /* outer: one inner step's compute (rlx_outer_engine_inner_us) */
  char           *refused;        /* why the frame carries no bucket */
  /* private */
  RlxComputeQueue *queue;
  gint            gen;
  guint64         member_gen;
} RlxMemberStep;

RlxMemberStep *rlx_member_step_new  (void);
void           rlx_member_step_free (RlxMemberStep *ms);

/* An operation of the leader's round, as its result comes back. */
typedef enum { RLX_LEADER_OWN, RLX_LEADER_ADD, RLX_LEADER_FINISH, RLX_LEADER_RESET } RlxLeaderOpKind;
typedef struct {
  RlxLeaderOpKind kind;
  guint64         step;
  gboolean        prequeued;      /* FINISH: queued before its round was complete */
  guint32        *indices;        /* OWN: the slice; FINISH: the next own slice (NULL: unknown) */
  guint           n;
  char           *node;           /* ADD: whose bucket */
  double          max_norm;       /* ADD: refused when its L2 norm is above (0: no limit) */
  double          norm;           /* ADD, out: its L2 norm (-1: not known) */
  /* out */
  gboolean        current;        /* the round was not begun anew or abandoned since (a
                                   * finish: not abandoned) */
  guint64         host_bytes;     /* rlx_backend_host_bytes after it */
  guint64         ahead_taken;    /* rlx_backend_ahead_taken after it */
  guint64         update_ahead;   /* rlx_backend_updates_ahead after it */
  float           loss;
  gint64          compute_us;
  gint64          inner_us;       /* OWN, outer: one inner step's compute */
  char           *refused;        /* OWN/ADD: not added; FINISH: not finished */
  gboolean        ok;             /* FINISH: the update was made and applied */
  gint64          run_us;         /* the run's wall time on the worker */
  gint64          ran_at;         /* when the run ended (monotonic) */
  double          dev_finish_us;  /* FINISH: rlx_backend_device_round_us after it */
  double          dev_grad_us;
  GBytes         *frame;          /* FINISH: the step frame */
  RlxPrecision    precision;      /* FINISH: of the frame's update */
  double          scale;
  guint64         hash;
  guint64         outer_hash;     /* FINISH, outer: θ and m after it */
  RlxOuterSettings outer;         /* OWN, FINISH: h > 0 for an outer round */
  /* private: the rest of the job, the queue's */
  RlxComputeQueue *queue;
  guint64         round_gen;      /* the round it belongs to */
  gint            abandon_gen;    /* FINISH: abandon_gen when queued */
  gboolean        next_alone;     /* FINISH: rlx_backend_round_expect_alone */
  gboolean        chained;        /* FINISH: queued before the previous finish ran */
  gboolean        refuse;         /* FINISH: test fault, applies nothing (refused) */
  guint32        *after;          /* FINISH: rlx_backend_round_after */
  guint           after_n;
  RlxFault        fault;          /* OWN */
  guint64         stall_us;
  RlxMsgArray     bucket;         /* ADD */
  guint           samples;
  RlxMsg          header;         /* FINISH: the step frame's (with has_header) */
  gboolean        has_header;
  double          lr;
  gboolean        feedback;
} RlxLeaderOp;

/* A finish to queue: the round's update made (at @lr, @precision, with
 * @feedback), its codes written into the step frame of @header, applied and
 * hashed. */
typedef struct {
  guint64         step;
  RlxMsg         *header;         /* taken (cleared); NULL: no frame, nobody to send it to */
  const guint32  *next;           /* our slice of the next round (copied; NULL: none) */
  guint           next_n;
  const guint32  *after;          /* and of the round after it, both expected to be ours
                                   * alone (copied; NULL: unknown) */
  guint           after_n;
  double          lr;
  RlxPrecision    precision;
  gboolean        feedback;
  gboolean        prequeued;      /* queued before its round is complete */
  gboolean        next_alone;     /* the next round is expected to be ours alone */
  RlxOuterSettings outer;         /* h > 0: the round is an outer round */
  gboolean        refuse;         /* test fault (RlxFaultPlan's refuse_finish_at): the
                                   * finish applies nothing, as a refused one */
} RlxFinishJob;

typedef struct {
  /* A member step's result; @ms is freed after the call. */
  void (*member_done) (RlxMemberStep *ms, const GError *error, gpointer user_data);
  /* A leader operation's result (but a reset's); @op is freed after. */
  void (*leader_done) (RlxLeaderOp *op, const GError *error, gpointer user_data);
} RlxComputeQueueCallbacks;

/* Takes @worker. */
RlxComputeQueue *rlx_compute_queue_new (RlxWorker *worker, const RlxComputeQueueCallbacks *callbacks,
                                        gpointer user_data);
/* Stops the worker (after the job it runs) and frees the backend: no
 * callback after this. */
void             rlx_compute_queue_free (RlxComputeQueue *self);
RlxWorker       *rlx_compute_queue_get_worker (RlxComputeQueue *self);

/* ── a member's steps ── */
/* Queue @ms (taken). An assignment (n > 0) replaces any queued one. */
void     rlx_compute_queue_member_step (RlxComputeQueue *self, RlxMemberStep *ms);
/* Queued assignments are skipped (their updates still apply). */
void     rlx_compute_queue_drop_assignments (RlxComputeQueue *self);
/* The results of the member steps queued so far are no longer current. */
void     rlx_compute_queue_forget_member_steps (RlxComputeQueue *self);
/* Member steps queued, not yet done; of which apply a commit. */
guint    rlx_compute_queue_member_steps (RlxComputeQueue *self);
guint    rlx_compute_queue_member_applying (RlxComputeQueue *self);

/* ── the leader's round ── */
/* A new round: contributions queued from now on belong to it. */
void     rlx_compute_queue_begin_round (RlxComputeQueue *self);
/* Drop the round in flight: its contributions are forgotten by the backend
 * before the next round's first, and its finish, if not started, does not
 * run. */
void     rlx_compute_queue_abandon_round (RlxComputeQueue *self);
/* @outer (NULL: the step mode) for an outer round's own local steps. */
void     rlx_compute_queue_own (RlxComputeQueue *self, guint64 step, const guint32 *indices,
                                guint n, RlxFault fault, guint64 stall_us,
                                const RlxOuterSettings *outer);
/* A member's bucket joins the round (in the outer mode when @outer, its
 * pseudo-gradient; with @urgent — overlapped outer rounds — between two
 * inner steps of the job the worker runs, as a finish does). */
void     rlx_compute_queue_add (RlxComputeQueue *self, const char *node, guint64 step,
                                guint samples, const RlxMsgArray *bucket, gboolean outer,
                                gboolean urgent, double max_norm);
/* A finish queued behind another not yet done runs only if that one
 * applied its update. */
void     rlx_compute_queue_finish (RlxComputeQueue *self, RlxFinishJob *job);
/* Forget the gradient's and the update's quantisation residuals (the
 * outer mode's too; its momentum stays). */
void     rlx_compute_queue_reset_feedback (RlxComputeQueue *self);
/* ── the outer mode's state beside the replica ── */
/* The outer momentum the worker holds (n floats), or NULL when the outer
 * mode never ran here. Worker thread only — for a read of the replica
 * queued on the same worker (a snapshot, a checkpoint), which sees θ and m
 * of one moment. */
const float *rlx_compute_queue_momentum_w (RlxComputeQueue *self);
/* Queue: the momentum becomes @momentum's values (n f32, e.g. a snapshot's
 * second half, its frame referenced) when their rlx_params_hash is @hash,
 * else (and with @momentum NULL: a state without one) zero. After the
 * replica's load queued before it. */
void     rlx_compute_queue_load_momentum (RlxComputeQueue *self, const RlxMsgArray *momentum,
                                          guint64 hash);
/* The same from floats (a checkpoint's; taken); @done (nullable) gets, on
 * the owner's context, whether the worker holds an outer momentum after it
 * and its rlx_params_hash. */
typedef void (*RlxMomentumLoaded) (gboolean has, guint64 hash, gpointer user_data);
void     rlx_compute_queue_load_momentum_floats (RlxComputeQueue *self, float *momentum,
                                                 RlxMomentumLoaded done, gpointer user_data);

/* Finishes queued, not yet done. */
guint    rlx_compute_queue_finishes (RlxComputeQueue *self);

G_END_DECLS
