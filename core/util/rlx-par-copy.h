/* rlx-par-copy.h — large host copies spread over a few threads
 *
 * One core copies about 10 GB/s; mnist-mlp-xl's buckets and updates are
 * 7.45 MB at f32 and cross several copies on a round's serial path (out of
 * a GPU's readback buffer, into a shared ring, into the next GPU's upload
 * buffer). rlx_par_copy splits a copy of at least rlx_par_copy_min_bytes()
 * into RLX_PAR_COPY_PIECES pieces of whole 64-byte lines that together cover
 * it, the caller's thread doing the first, a process-wide pool of threads
 * the rest; smaller ones are one memcpy. rlx_par_run gives other work in
 * pieces (the backend's checked copies) the same pool. Thread-safe: any number of threads
 * may copy at once (their pieces queue on the same pool).
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define RLX_PAR_COPY_PIECES 8u
/* From this size on, on more than two cores. With the socket between ranks,
 * splitting from 1 MiB gained nothing over 4 MiB; with the shared ring it
 * did: two ranks of mnist-mlp-xl on one H200, f16 (3.7 MB codes) 1.12×,
 * f8 1.09× (BENCHMARKS.md, "The shared ring"). */
#define RLX_PAR_COPY_MIN_BYTES ((gsize) 1 << 20)

/* RLX_COPY_PAR_MIN=BYTES when set (any machine: a small value makes tests
 * reach the split copies, a huge one turns them off); otherwise
 * RLX_PAR_COPY_MIN_BYTES, or never on two cores or fewer, where the ranks
 * have every core already. Read once. */
gsize rlx_par_copy_min_bytes (void);

/* Runs @func (@data, k) for every k in [0, @n) (@n ≤ RLX_PAR_COPY_PIECES):
 * k = 0 on the caller's thread, the others on the pool; returns when all
 * are done. */
typedef void (*RlxParPieceFunc) (gpointer data, guint k);
void  rlx_par_run (guint n, RlxParPieceFunc func, gpointer data);

/* How @n elements split into pieces of whole 64-element lines (@per each,
 * the last shorter) that RLX_PAR_COPY_PIECES of cover them: the number of
 * pieces. */
gsize rlx_par_pieces (gsize n, gsize *per);

/* memcpy (@dst, @src, @n), in pieces when @n ≥ rlx_par_copy_min_bytes (). */
void  rlx_par_copy (void *dst, const void *src, gsize n);

/* The same with pieces from @min_bytes on (the caller's own threshold). */
void  rlx_par_copy_from (void *dst, const void *src, gsize n, gsize min_bytes);

G_END_DECLS
