/* rlx-kernels.h — the round arithmetic of a cohort, on every core, off the
 * main loop
 *
 * A round touches every parameter a few times: the leader sums the members'
 * buckets (dequantising them), turns the sum into an update, quantises it
 * with error feedback into the step frame and applies it; every member
 * applies the update and hashes its parameters. These kernels do each of
 * those in one pass over memory, split into cache-sized chunks that the
 * threads of a small persistent pool (RlxKernels) take in turn.
 *
 * Bits: every kernel gives exactly the bits of the plain reference built from
 * core/wire (named beside each function), for every precision, every size
 * and every thread count (tests/kernels/test-kernels.c holds them to that).
 * The arithmetic is element-wise in f32 without fused multiply-add, the
 * maximum |x| is exact, and the parameter hash is rlx_params_hash's chunked
 * tree (core/vision/rlx-model.h), whose definition does not depend on how
 * the chunks are shared out. The vector code is core/wire's kernel set (the
 * one rlx_wire_simd_path names: avx512vbmi, avx512, avx2 or portable) plus loops of this
 * file compiled for the same instruction set.
 *
 * Threads: the synchronous functions may be called from any thread except a
 * main loop's (they block until the work is done; the main loop uses the
 * _async forms). Calls on one pool from several threads at once are
 * serialised: each gets every thread of the pool in turn. Arrays passed in
 * must not be touched by anyone else until the call (or the async task)
 * completes.
 */
#pragma once

#include <gio/gio.h>
#include "core/wire/rlx-wire.h"

G_BEGIN_DECLS

/* Elements a thread takes at a time (64 KiB of f32); a whole number of
 * rlx_params_hash's chunks. */
#define RLX_KERNELS_CHUNK ((gsize) 16384)

#define RLX_KERNELS_ERROR (rlx_kernels_error_quark ())
GQuark rlx_kernels_error_quark (void);
typedef enum {
  RLX_KERNELS_ERROR_NONFINITE,   /* a NaN or ±Inf where only finite values may be */
  RLX_KERNELS_ERROR_INVALID,     /* bad arguments (sizes, precision, scale) */
} RlxKernelsError;

#define RLX_TYPE_KERNELS (rlx_kernels_get_type ())
G_DECLARE_FINAL_TYPE (RlxKernels, rlx_kernels, RLX, KERNELS, GObject)

/* A pool of @n_threads threads in all (the calling thread counts as one, so
 * @n_threads - 1 are started; 1 runs everything on the caller). 0 means the
 * default: RLX_KERNEL_THREADS from the environment when set (1..256), else
 * the number of processors. */
RlxKernels *rlx_kernels_new          (guint n_threads);
/* The process's shared pool (created on first use with the default size,
 * never freed). Transfer none. */
RlxKernels *rlx_kernels_get_default  (void);
guint       rlx_kernels_get_n_threads (RlxKernels *self);
/* Jobs over fewer than @n elements run on the calling thread alone (waking
 * the pool costs more than it saves on small arrays). The default is what
 * paid on the dev machine (524288: mnist-mlp-xl's arrays are split, smaller
 * models' are not); 0 splits everything (tests). */
void        rlx_kernels_set_min_parallel (RlxKernels *self, gsize n);

/* ── accumulate ─────────────────────────────────────────────────────────── */

/* dst[i] = src[i] + w · x[i], or dst[i] = w · x[i] when @src is NULL, where
 * x is the bucket @codes (n elements at @p with @scale, as a frame's payload
 * carries them: little-endian, no alignment needed) dequantised on the fly —
 * bit-identical to rlx_wire_dequantize into x, then `dst[i] = src[i] + w *
 * x[i]` in f32. @dst may be @src (in place).
 *
 * Non-finite x (NaN or ±Inf after dequantising) is found in the same pass:
 * then FALSE with RLX_KERNELS_ERROR_NONFINITE naming the first such element
 * (also in *@bad_index when non-NULL), and @dst is unspecified — so a caller
 * that must be able to refuse a bucket keeps @src intact by accumulating
 * out of place (RlxKernelsSum does exactly that). */
gboolean rlx_kernels_accumulate (RlxKernels   *self,
                                 float        *dst,
                                 const float  *src,
                                 const void   *codes,
                                 gsize         n,
                                 RlxPrecision  p,
                                 double        scale,
                                 float         w,
                                 gsize        *bad_index,
                                 GError      **error);

/* dst[i] = src_w · src[i] + w · x[i] (every product and the sum rounded to
 * f32): a round's first two contributions in one pass. With @src_w = 1 it
 * is rlx_kernels_accumulate, bit for bit; @dst may be @src. */
gboolean rlx_kernels_accumulate_weighted (RlxKernels   *self,
                                          float        *dst,
                                          const float  *src,
                                          float         src_w,
                                          const void   *codes,
                                          gsize         n,
                                          RlxPrecision  p,
                                          double        scale,
                                          float         w,
                                          gsize        *bad_index,
                                          GError      **error);

/* A round's running sum that a refused bucket never touches: two buffers,
 * each add reads one and writes the other (the same memory traffic as in
 * place), and the result only becomes the sum when the whole bucket was
 * finite. Not thread-safe: one thread at a time. */
typedef struct _RlxKernelsSum RlxKernelsSum;

RlxKernelsSum *rlx_kernels_sum_new    (gsize n);
void           rlx_kernels_sum_free   (RlxKernelsSum *sum);
/* Empty the sum (the next add writes w · x). */
void           rlx_kernels_sum_reset  (RlxKernelsSum *sum);
/* Add bucket @codes (as rlx_kernels_accumulate) with weight @w. FALSE with
 * RLX_KERNELS_ERROR_NONFINITE (nothing added), or RLX_KERNELS_ERROR_INVALID
 * when @n is not the sum's size. */
gboolean       rlx_kernels_sum_add    (RlxKernels    *kernels,
                                       RlxKernelsSum *sum,
                                       const void    *codes,
                                       gsize          n,
                                       RlxPrecision   p,
                                       double         scale,
                                       float          w,
                                       GError       **error);
/* The sum (n floats, owned by @sum, valid until the next add or reset), or
 * NULL while empty. */
const float   *rlx_kernels_sum_get    (RlxKernelsSum *sum);
guint          rlx_kernels_sum_count  (RlxKernelsSum *sum);   /* buckets added */
gsize          rlx_kernels_sum_size   (RlxKernelsSum *sum);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxKernelsSum, rlx_kernels_sum_free)

/* ── finish a round: the update frame ───────────────────────────────────── */

/* The leader's update (and, with @lr = 1 and @samples = 1, any bucket sent
 * with error feedback, e.g. a member's gradient), straight into a frame:
 *
 *   u[i]  = lr · (sum[i] · (float) (1.0 / samples)) + residual[i]
 *           (no "+ residual" when @residual is NULL), all in f32
 *   frame = rlx_wire_encode (@header, u, n, @p, @field)
 *   d     = what receivers decode from that frame
 *   residual[i] = finite (u[i] − d[i]) ? u[i] − d[i] : 0   (when non-NULL)
 *   params[i]  -= d[i]                                    (when non-NULL)
 *   update[i]   = d[i]                                    (when non-NULL)
 *   *hash_out   = rlx_params_hash (params after the update)
 *
 * Bit-identical to rlx_wire_feedback_encode (x = lr · (sum · inv)) / to
 * rlx_wire_encode without a residual, then rlx_wire_decode_into and
 * `params[i] -= d[i]`. Two passes: max |u| (a parallel reduction; the scale
 * needs it), then quantise, dequantise, residual, apply and hash per chunk.
 *
 * A non-finite u is refused before anything is quantised or written: NULL
 * with RLX_KERNELS_ERROR_NONFINITE naming the element; @residual and
 * @params are untouched then. Header problems give core/wire's errors. */
GBytes  *rlx_kernels_encode_update (RlxKernels   *self,
                                    JsonObject   *header,
                                    const char   *field,
                                    const float  *sum,
                                    gsize         n,
                                    float         lr,
                                    guint64       samples,
                                    float        *residual,
                                    RlxPrecision  p,
                                    float        *params,
                                    float        *update,
                                    guint64      *hash_out,
                                    GError      **error);

/* The same update without a frame, for a caller that keeps the codes:
 *
 *   u[i] = lr · (sum[i] · inv) + r_in[i]   (no "+ r_in" when NULL), in f32
 *   codes (nullable) = u at @p with the scale rlx_wire_scale_for (u) gives
 *                      (*@scale_out)
 *   d = what decoding the codes gives (u itself at f32)
 *   r_out[i] = finite (u − d) ? u − d : 0 (nullable; may be @r_in)
 *   params[i] −= d[i] (nullable); *@hash_out = rlx_params_hash (params)
 *
 * The codes are what rlx_wire_quantize writes for u; d, r_out and params are
 * what rlx_wire_feedback_encode and an apply of those codes give. Two
 * passes: the largest |u| and the first non-finite u, then the rest — or one
 * when the caller knows the largest |u| exactly and that every u is finite
 * (@known_max: its f32 bits; RLX_KERNELS_MAX_UNKNOWN: not known). A
 * non-finite u: FALSE with RLX_KERNELS_ERROR_NONFINITE (*@bad_index: the
 * first), nothing written. */
#define RLX_KERNELS_MAX_UNKNOWN G_MAXUINT32
gboolean rlx_kernels_make_update (RlxKernels   *self,
                                  const float  *sum,
                                  gsize         n,
                                  float         lr,
                                  float         inv,
                                  const float  *r_in,
                                  float        *r_out,
                                  RlxPrecision  p,
                                  guint32       known_max,
                                  void         *codes,
                                  double       *scale_out,
                                  float        *params,
                                  guint64      *hash_out,
                                  gsize        *bad_index,
                                  GError      **error);

/* ── apply, hash ────────────────────────────────────────────────────────── */

/* params[i] -= x[i], x = @codes dequantised (as rlx_kernels_accumulate):
 * bit-identical to rlx_wire_dequantize then `params[i] -= x[i]`. With
 * @hash_out, the hash of the parameters afterwards, computed chunk by chunk
 * while each is still in cache. */
void     rlx_kernels_apply  (RlxKernels   *self,
                             float        *params,
                             const void   *codes,
                             gsize         n,
                             RlxPrecision  p,
                             double        scale,
                             guint64      *hash_out);

/* The largest |x[i]| as f32 bits without the sign (ordered like |x| for
 * finite values): ≥ 0x7f800000 when some x is NaN or ±Inf. One read-only
 * pass, on all threads — the check a gradient gets before it is used. */
guint32  rlx_kernels_max_abs_bits (RlxKernels   *self,
                                   const float  *x,
                                   gsize         n);

/* The first of the @n codes at @p (as a frame's payload carries them) that
 * decodes to NaN or ±Inf, or -1: one read-only pass, on all threads — the
 * check an update gets before it is applied. */
gssize   rlx_kernels_codes_check  (RlxKernels   *self,
                                   const void   *codes,
                                   gsize         n,
                                   RlxPrecision  p);

/* rlx_params_hash (params, n), on all threads. */
guint64  rlx_kernels_hash   (RlxKernels   *self,
                             const float  *params,
                             gsize         n);

/* ── async ──────────────────────────────────────────────────────────────── */

/* Run @func (self, @data, @cancellable, &error) off the calling thread,
 * where it may call any synchronous function above on @self (they use every
 * thread of the pool), then complete on the thread-default main context of
 * the caller (GTask). @func returns FALSE and sets the error to fail the
 * task. @data is freed with @data_free on the context after completion. */
typedef gboolean (*RlxKernelsFunc) (RlxKernels    *self,
                                    gpointer       data,
                                    GCancellable  *cancellable,
                                    GError       **error);

void     rlx_kernels_run_async  (RlxKernels          *self,
                                 RlxKernelsFunc       func,
                                 gpointer             data,
                                 GDestroyNotify       data_free,
                                 GCancellable        *cancellable,
                                 GAsyncReadyCallback  callback,
                                 gpointer             user_data);
gboolean rlx_kernels_run_finish (RlxKernels          *self,
                                 GAsyncResult        *result,
                                 GError             **error);

/* The member's step, typed: apply @codes to @params and hash them, off the
 * main loop. @codes must stay valid until completion: pass the frame it
 * lives in as @keep (a reference is held until completion). The hash comes
 * back from rlx_kernels_apply_finish. */
void     rlx_kernels_apply_async  (RlxKernels          *self,
                                   float               *params,
                                   GBytes              *keep,
                                   const void          *codes,
                                   gsize                n,
                                   RlxPrecision         p,
                                   double               scale,
                                   GCancellable        *cancellable,
                                   GAsyncReadyCallback  callback,
                                   gpointer             user_data);
gboolean rlx_kernels_apply_finish (RlxKernels          *self,
                                   GAsyncResult        *result,
                                   guint64             *hash_out,
                                   GError             **error);

/* ── plain references, for tests and benchmarks ─────────────────────────── */

/* Single-threaded scalar loops over core/wire's public functions, the
 * definitions the kernels are held to (and the benchmark's baseline). They
 * allocate a temporary n-float array. */
gboolean rlx_kernels_ref_accumulate (float *dst, const float *src, const void *codes, gsize n,
                                     RlxPrecision p, double scale, float w, gsize *bad_index);
void     rlx_kernels_ref_apply      (float *params, const void *codes, gsize n,
                                     RlxPrecision p, double scale);

G_END_DECLS
