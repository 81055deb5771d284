/* rlx-outer.h — the outer mode's round arithmetic and state (`--sync outer:H`)
 *
 * In the outer mode (DESIGN.md, "Training across slow links"; after DiLoCo, arXiv 2311.08105) every rank starts an outer round from the
 * shared outer parameters θ, takes H inner SGD steps on its own samples, and
 * sends its pseudo-gradient δ = θ − local. The leader averages them weighted
 * by samples, takes an outer Nesterov step and publishes the update at wire
 * precision with error feedback; every replica (the leader's included)
 * applies the same dequantised update.
 *
 * ── What is on the wire, and why replicas agree bit for bit ───────────────
 * Only the update u is quantised (one array per round, as the step mode's
 * update). The momentum m never travels: every replica derives it from the
 * dequantised update d it applies, so θ and m are functions of the sequence
 * of d alone. With μ = momentum, η = outer lr, all in f32 without fused
 * multiply-add (this file is built with -ffp-contract=off), every product
 * and sum rounded to f32, and the constants
 *     muf = (float) μ,  lrf = (float) η,
 *     ilr = (float) (1.0 / η),  i1m = (float) (1.0 / (1.0 + μ)),
 *     inv = (float) (1.0 / samples):
 *
 *   leader (rlx_outer_make_update):
 *     Δ_i = sum_i · inv                  the sample-weighted mean of δ
 *     t_i = muf · m_i + Δ_i              Nesterov's new momentum, unquantised
 *     u_i = lrf · (Δ_i + muf · t_i)      the outer update
 *     s_i = u_i + r_i                    r: the leader's residual (error feedback)
 *     codes = rlx_wire_quantize (s, scale = rlx_wire_scale_for (s, p))
 *     d   = rlx_wire_dequantize (codes)  exactly what every member decodes
 *     r_i = finite (s_i − d_i) ? s_i − d_i : 0   (p ≠ f32 and feedback on;
 *                                                 else r stays 0)
 *   every replica (rlx_outer_apply), with that d:
 *     θ_i = θ_i − d_i
 *     m_i = (muf · m_i + d_i · ilr) · i1m
 *
 * The last line is Nesterov's momentum recovered from the applied update:
 * u = η (Δ + μ (μ m + Δ)) gives m' = μ m + Δ = (μ m + u / η) / (1 + μ). With
 * d in place of u it is the momentum of the pseudo-gradient that d actually
 * carried, Δ̂ = (d / η − μ² m) / (1 + μ); the residual r that error feedback
 * adds to the next u is, in Δ-space, exactly Δ − Δ̂ carried into the next
 * round (u is linear in Δ), so the sum of the applied Δ̂ tracks the sum of
 * the true Δ and momentum loses nothing to quantisation in the long run.
 * The residual is the leader's own (never on the wire, never hashed); a new
 * leader starts from zero, as the step mode's does.
 *
 * The hash of the outer state is rlx_outer_hash (rlx_params_hash (θ),
 * rlx_params_hash (m)): equal hashes mean equal bits of both arrays.
 *
 * ── Threads ────────────────────────────────────────────────────────────────
 * The rlx_outer_* array functions (section "arithmetic") are pure: they read
 * and write only the arrays passed in, keep no state, and may run on any
 * thread (the compute worker's); element-wise, so a caller may split them
 * into ranges — except rlx_outer_make_update, whose scale needs all of s.
 * RlxOuterState is a plain value: whoever holds it owns it (the coordinator's
 * main thread, lending its arrays to the worker for one apply at a time).
 * The serialised form (rlx_outer_state_write / _parse) is reentrant.
 */
#pragma once

#include <glib.h>
#include "core/wire/rlx-wire.h"

G_BEGIN_DECLS

#define RLX_OUTER_ERROR (rlx_outer_error_quark ())
GQuark rlx_outer_error_quark (void);

typedef enum {
  RLX_OUTER_ERROR_INVALID,     /* arguments out of range (lr, momentum, sizes) */
  RLX_OUTER_ERROR_NONFINITE,   /* an update or a state value is NaN or ±Inf   */
  RLX_OUTER_ERROR_TRUNCATED,   /* a serialised state shorter than it says      */
  RLX_OUTER_ERROR_CORRUPT,     /* a serialised state that is not one, or broken */
  RLX_OUTER_ERROR_VERSION,     /* made by a newer layout than this build reads */
  RLX_OUTER_ERROR_MISMATCH,    /* another model (element count) than expected  */
} RlxOuterError;

/* DiLoCo's outer optimizer settings (arXiv 2311.08105), checked on our
 * models by scripts/sim-outer.py: of outer lr 0.7, 0.5 and 0.3 (μ 0.9), 0.7
 * gave the best test accuracy in 18 of the 20 settings with H ≤ 50 (mnist-mlp
 * and mnist-mlp-xl, 2 and 4 workers, 1 to 10 epochs of samples) and was
 * within 1.6 pt in the other two; none of the 104 runs diverged. */
#define RLX_OUTER_DEFAULT_LR       0.7
#define RLX_OUTER_DEFAULT_MOMENTUM 0.9

/* Whether @lr (finite, > 0, ≤ 10) and @momentum (finite, 0 ≤ μ < 1) can be
 * used; FALSE with RLX_OUTER_ERROR_INVALID saying which and what to give. */
gboolean rlx_outer_check_settings (double lr, double momentum, GError **error);

/* The inner SGD's learning rate of an outer round that @ranks ranks train:
 * @lr × √min(ranks, RLX_OUTER_LR_SCALE_RANKS) (@lr for 0 or 1). Averaging k
 * pseudo-gradients divides their noise by k, so each rank's inner steps
 * can go further; √k is the scaling rule for k times the batch (Krizhevsky,
 * arXiv 1404.5997; Hoffer et al., arXiv 1705.08741). Measured on
 * mnist-mlp-xl over 200 Mbit/s (BENCHMARKS.md, "Wall time to a target
 * accuracy"), and capped where the measurements end. The leader computes it
 * when it assigns a round and sends it in the round's frame ("lr"): every
 * rank of the round trains at the same rate. */
#define RLX_OUTER_LR_SCALE_RANKS 4u
double   rlx_outer_inner_lr       (double lr, guint ranks);

/* ── arithmetic (pure; any thread) ──────────────────────────────────────── */

/* delta[i] = outer[i] − local[i] (f32): a rank's pseudo-gradient. @delta
 * may alias either input. */
void     rlx_outer_pseudo_gradient (const float *outer, const float *local, float *delta,
                                    gsize n);

/* sum[i] = (first ? 0 : sum[i]) + w · delta[i], with w = (float) samples and
 * `first` writing w · delta[i] (no addition): one contribution to the round's
 * sum, bit-identical to rlx_kernels_accumulate of the f32 bucket @delta with
 * that weight (src NULL when @first). */
void     rlx_outer_accumulate      (float *sum, const float *delta, guint64 samples,
                                    gboolean first, gsize n);

/* The leader's outer step (the header's "leader" lines): from the round's
 * @sum over @samples samples, the momentum @momentum (read only), the
 * residual @residual (read and, when @feedback and @p ≠ f32, updated; may
 * be NULL for no error feedback) writes the codes of s at @p into @codes
 * (n × element size bytes, as a frame's payload; NULL: not wanted), the
 * scale into *@scale_out and d into @update (n floats, required: what the
 * replicas will apply with rlx_outer_apply). Nothing else changes: the
 * leader then applies @update to its own state as every member does.
 * A non-finite s refuses the round before anything is written: FALSE with
 * RLX_OUTER_ERROR_NONFINITE naming the first element (also in *@bad_index
 * when non-NULL), @residual untouched. @samples must be > 0. */
gboolean rlx_outer_make_update     (const float  *sum,
                                    guint64       samples,
                                    const float  *momentum,
                                    float        *residual,
                                    gsize         n,
                                    double        lr,
                                    double        mu,
                                    RlxPrecision  p,
                                    void         *codes,
                                    double       *scale_out,
                                    float        *update,
                                    gsize        *bad_index,
                                    GError      **error);

/* Every replica's apply (the header's "every replica" lines): θ −= d and the
 * momentum from d. @update must be finite (rlx_outer_update_check). */
void     rlx_outer_apply           (float *outer, float *momentum, const float *update,
                                    gsize n, double lr, double mu);

/* The momentum half of rlx_outer_apply alone (θ lives elsewhere, e.g. in a
 * backend that subtracts the same d): m_i = (muf · m_i + d_i · ilr) · i1m,
 * the same bits as rlx_outer_apply's. */
void     rlx_outer_apply_momentum  (float *momentum, const float *update, gsize n, double lr,
                                    double mu);

/* The first non-finite element of @update, or -1. */
gssize   rlx_outer_update_check    (const float *update, gsize n);

/* The hash of an outer state: XXH64 of the two hashes (θ's then m's, as
 * little-endian u64) with seed @n. */
guint64  rlx_outer_hash            (guint64 params_hash, guint64 momentum_hash, gsize n);

/* ── state (owned by whoever holds it) ──────────────────────────────────── */

typedef struct {
  gsize         n;            /* elements of each array                       */
  guint64       round;        /* outer rounds committed                      */
  guint64       samples;      /* samples those rounds trained on, in all     */
  guint         h;            /* inner steps per round (0: not set)          */
  RlxPrecision  precision;    /* the updates' wire precision                 */
  double        lr, momentum; /* the outer optimizer's settings              */
  float        *params;       /* θ, n floats                                 */
  float        *mom;          /* m, n floats                                 */
  float        *residual;     /* the leader's residual, n floats, or NULL    */
} RlxOuterState;

/* A state of @n elements whose θ is a copy of @params (the replica's
 * parameters when the mode starts), m = 0, no residual, round 0. NULL with
 * RLX_OUTER_ERROR_INVALID for bad settings or n = 0 or n over
 * RLX_OUTER_MAX_PARAMS. */
RlxOuterState *rlx_outer_state_new   (const float *params, gsize n, double lr, double mu,
                                      RlxPrecision p, guint h, GError **error);
RlxOuterState *rlx_outer_state_copy  (const RlxOuterState *state);
void           rlx_outer_state_free  (RlxOuterState *state);

/* The leader's round on a state: rlx_outer_make_update with the state's
 * momentum, residual (allocated at the first use with @feedback), settings
 * and precision; then rlx_outer_state_commit of @update. */
gboolean       rlx_outer_state_lead  (RlxOuterState *state, const float *sum, guint64 samples,
                                      gboolean feedback, void *codes, double *scale_out,
                                      float *update, GError **error);
/* Apply a round's dequantised @update (n floats): θ, m, round += 1,
 * samples += @samples. FALSE with RLX_OUTER_ERROR_NONFINITE (nothing
 * changed) when @update holds a NaN or ±Inf. */
gboolean       rlx_outer_state_commit (RlxOuterState *state, const float *update,
                                       guint64 samples, GError **error);
/* The same from a frame's codes at @p with @scale (dequantised into
 * @scratch, n floats) — what a member does with the leader's update. */
gboolean       rlx_outer_state_commit_codes (RlxOuterState *state, const void *codes,
                                             RlxPrecision p, double scale, float *scratch,
                                             guint64 samples, GError **error);
/* rlx_outer_hash of the state's θ and m. */
guint64        rlx_outer_state_hash  (const RlxOuterState *state);

/* ── serialised form (snapshots, checkpoints) ───────────────────────────── */

/* Layout, version 1, every field little-endian, no padding:
 *   off  size
 *     0     8  magic "RLXOUTER"
 *     8     4  u32 version (1)
 *    12     4  u32 flags: bit 0 = residual present; other bits must be 0
 *    16     8  u64 n (1 .. RLX_OUTER_MAX_PARAMS)
 *    24     8  u64 round
 *    32     8  u64 samples
 *    40     4  u32 h (0 .. RLX_OUTER_MAX_H)
 *    44     4  u32 precision (RlxPrecision: 0 f32, 1 f16, 2 f8e4m3, 3 f8e5m2)
 *    48     8  f64 lr       (as rlx_outer_check_settings accepts)
 *    56     8  f64 momentum
 *    64     8  u64 rlx_params_hash (θ)
 *    72     8  u64 rlx_params_hash (m)
 *    80  4·n   θ, f32
 *     …  4·n   m, f32
 *     …  4·n   residual, f32 (only with flag bit 0)
 * and nothing after. The parser checks every field and the exact length
 * before it allocates anything, every value is finite, and both hashes
 * match (so a snapshot torn or damaged in transit is refused). */
#define RLX_OUTER_STATE_MAGIC      "RLXOUTER"
#define RLX_OUTER_STATE_VERSION    1u
#define RLX_OUTER_STATE_HEADER     ((gsize) 80)
/* Above the largest model (mnist-mlp-xl: 1,863,690) with room for others. */
#define RLX_OUTER_MAX_PARAMS       ((gsize) 64 * 1024 * 1024)
/* The largest H a state may carry (what `--sync outer:H` accepts). */
#define RLX_OUTER_MAX_H            10000u

/* Bytes rlx_outer_state_write writes for @state. */
gsize          rlx_outer_state_size  (const RlxOuterState *state);
/* The serialised state (with the residual when @with_residual and the state
 * has one). */
GBytes        *rlx_outer_state_write (const RlxOuterState *state, gboolean with_residual);
/* Parse @len bytes. @expected_n: the model's element count (0: any); a state
 * of another size is refused with RLX_OUTER_ERROR_MISMATCH naming both. NULL
 * with an RLX_OUTER_ERROR saying what was wrong and at which offset. */
RlxOuterState *rlx_outer_state_parse (const guint8 *data, gsize len, gsize expected_n,
                                      GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxOuterState, rlx_outer_state_free)

G_END_DECLS
