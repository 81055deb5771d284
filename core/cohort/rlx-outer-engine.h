/* rlx-outer-engine.h — the outer mode's work on the rank's compute worker
 *
 * In `--sync outer:H` (docs/PROTOCOL.md, "Sync modes"; the arithmetic is
 * core/cohort/rlx-outer.h's) one protocol step is one *outer round*. The
 * engine is what the compute queue runs for it instead of the step mode's
 * gradient, sum and update:
 *
 *   local     from θ (the backend's replica, which in this mode holds the
 *             outer parameters), H inner SGD steps over the rank's slice of
 *             the round — H chunks of it, in order — on a host copy x; the
 *             pseudo-gradient δ = θ − x (rlx_outer_pseudo_gradient)
 *   wire      δ quantised at the rank's wire precision with error feedback
 *             (s = δ + r; codes = quantise (s); r' = s − decode (codes), kept
 *             aside until the leader says it took the bucket — the member
 *             stream of rlx-backend.h's grads_wire, for δ instead of g)
 *   round     the leader's: its own δ (f32, exact) and each member's decoded
 *             bucket summed weighted by samples (rlx_outer_accumulate, in
 *             the order added), then the outer Nesterov step
 *             (rlx_outer_make_update with the engine's momentum and the
 *             update stream's residual) whose codes go straight into the
 *             step frame
 *   apply     every replica's: θ −= d through the backend's apply_update of
 *             the same codes (one f32 subtraction, the step mode's apply),
 *             and the momentum from d (rlx_outer_apply_momentum); so θ and
 *             m are functions of the sequence of updates alone and are
 *             bit-identical on every replica
 *
 * The momentum m lives here (host, n floats), θ in the backend. The outer
 * hash of a replica is rlx_outer_hash (rlx_params_hash (θ), rlx_params_hash
 * (m)).
 *
 * Threads: the compute worker's alone (the compute queue's worker-side
 * state); the settings are copied into each job.
 */
#pragma once

#include <glib.h>
#include "core/rlx-backend.h"
#include "core/wire/rlx-wire.h"

G_BEGIN_DECLS

/* One outer round's settings, as the leader announced them (the step
 * frame's h, olr, omom and lr). */
typedef struct {
  guint   h;           /* inner steps per round; 0: the step mode */
  double  lr;          /* outer learning rate */
  double  momentum;    /* outer (Nesterov) momentum */
  double  inner_lr;    /* the inner SGD's learning rate */
  guint   lag;         /* 1: overlapped rounds (docs/PROTOCOL.md, "Overlap"); 0: not */
} RlxOuterSettings;

/* Called between two inner steps (on the worker thread), e.g. to run
 * urgent work of the leader's round in between. */
typedef void (*RlxOuterBetween) (gpointer data);

typedef struct _RlxOuterEngine RlxOuterEngine;

RlxOuterEngine *rlx_outer_engine_new  (gsize n);
void            rlx_outer_engine_free (RlxOuterEngine *self);

/* ── every replica ── */

/* A commit's update (@n codes at @precision, @scale) applied: the backend's
 * θ −= d and the momentum from d. Codes that decode to NaN/±Inf are refused
 * (RLX_BACKEND_ERROR_NOT_FINITE), nothing changed. */
gboolean rlx_outer_engine_apply (RlxOuterEngine *self, RlxBackend *backend, const void *codes,
                                 gsize n, RlxPrecision precision, double scale,
                                 const RlxOuterSettings *settings, GError **error);
/* The momentum back to zero (the mode begins, or a state without one was
 * loaded) and every residual forgotten. */
void     rlx_outer_engine_reset (RlxOuterEngine *self);
/* Every residual forgotten (a new leader's update stream), the momentum kept. */
void     rlx_outer_engine_reset_feedback (RlxOuterEngine *self);
/* The outer hash (θ from the backend, m from here). */
gboolean rlx_outer_engine_hash  (RlxOuterEngine *self, RlxBackend *backend, guint64 *hash,
                                 GError **error);
/* The same from θ's hash already made (rlx_backend_params_hash of the
 * backend's θ as it is now): one pass over n floats fewer a round. */
guint64  rlx_outer_engine_hash_with (RlxOuterEngine *self, guint64 theta_hash);
/* The momentum (n floats), for a snapshot or checkpoint, and its load. */
const float *rlx_outer_engine_momentum (RlxOuterEngine *self);
void     rlx_outer_engine_load_momentum (RlxOuterEngine *self, const float *m);
/* Test fault (RlxFaultPlan's momentum_at): m[0] raised by 1. */
void     rlx_outer_engine_perturb_momentum (RlxOuterEngine *self);

/* ── the rank's round ── */

/* Round @step's H inner steps over @indices[0..n) (1 ≤ n; min (H, n)
 * chunks of near-equal size, each at most the backend's max_batch) from
 * the start s: θ, or — with @settings->lag and the last local being round
 * @step − 1's — θ minus the outer step that round's own δ would make with
 * the replica's momentum (the overlap's eager start, docs/PROTOCOL.md). δ = s − x is kept for
 * rlx_outer_engine_delta_wire or _round_own. @between (nullable) runs
 * between inner steps. *@loss: the mean inner loss, weighted by chunk size.
 * A non-finite δ fails with RLX_BACKEND_ERROR_NOT_FINITE. */
gboolean rlx_outer_engine_local (RlxOuterEngine *self, RlxBackend *backend, guint64 step,
                                 const guint32 *indices, guint n,
                                 const RlxOuterSettings *settings, RlxOuterBetween between,
                                 gpointer between_data, float *loss, GError **error);
/* The last successful rlx_outer_engine_local's compute of one inner step
 * (its gradient and SGD step, mean over the round's inner steps), µs, wall
 * time — without the round's setup, its pseudo-gradient or what @between
 * ran: what `--sync auto` weighs the link against. 0: none yet. */
double   rlx_outer_engine_inner_us (RlxOuterEngine *self);
/* δ at @precision into @codes (n × element size), the scale into
 * *@scale_out, with the member stream's error feedback when @feedback. */
void     rlx_outer_engine_delta_wire (RlxOuterEngine *self, RlxPrecision precision,
                                      gboolean feedback, void *codes, double *scale_out);
/* The last delta_wire's bucket was taken: its residual is carried. */
void     rlx_outer_engine_accept_feedback (RlxOuterEngine *self);

/* ── the leader's round ──
 * Rounds are named by @step and @gen (the caller's generation: a round
 * abandoned and begun again under the same step is another); two may be
 * open at once (round k finishing while round k+1 fills). */

/* The own δ of the last rlx_outer_engine_local joins round @step with
 * weight @samples. */
void     rlx_outer_engine_round_own  (RlxOuterEngine *self, guint64 step, guint gen,
                                      guint samples);
/* A member's bucket joins with weight @samples; a wrong length, a bad scale
 * (RLX_BACKEND_ERROR_FAILED) or a NaN/±Inf (RLX_BACKEND_ERROR_NOT_FINITE)
 * leaves the round as it was. */
gboolean rlx_outer_engine_round_add  (RlxOuterEngine *self, guint64 step, guint gen,
                                      const void *codes, gsize n,
                                      RlxPrecision precision, double scale, guint samples,
                                      GError **error);
/* The outer step: codes of the update at @precision into @codes (NULL: not
 * wanted), *@scale_out, applied to the backend's θ and to m as every
 * replica's rlx_outer_engine_apply does, *@hash_out rlx_params_hash of θ
 * after it. No contribution: RLX_BACKEND_ERROR_FAILED; a non-finite update:
 * RLX_BACKEND_ERROR_NOT_FINITE, nothing changed. The round is over either
 * way. */
gboolean rlx_outer_engine_round_finish (RlxOuterEngine *self, RlxBackend *backend, guint64 step,
                                        guint gen, const RlxOuterSettings *settings,
                                        RlxPrecision precision,
                                        gboolean feedback, void *codes, double *scale_out,
                                        guint64 *hash_out, GError **error);
/* Every open round dropped. */
void     rlx_outer_engine_round_cancel (RlxOuterEngine *self);

G_END_DECLS
