/* rlx-cohort-math.h — the round's arithmetic on parameter-sized vectors
 *
 * Called from worker threads only (RlxSerial jobs, the compute worker): the
 * main loop never runs these. Each function makes one pass over its inputs,
 * block by block (a block of wire codes is decoded into a small buffer that
 * stays in L1), and checks what it reads for NaN and ±Inf on the way, so a
 * bad bucket costs no extra pass to find.
 */
#pragma once

#include <glib.h>
#include "core/cohort/rlx-msg.h"

G_BEGIN_DECLS

/* A vector to read: plain floats, or wire codes (in a frame). */
typedef struct {
  const float       *floats;   /* used when non-NULL */
  const RlxMsgArray *codes;
} RlxMathSrc;

/* sum = wa·a + wb·b. FALSE when a value of @a (*bad_src 0) or @b (1) is not
 * finite; *bad_index is its index; @sum is then garbage. */
gboolean rlx_math_sum2 (float *sum, const RlxMathSrc *a, float wa, const RlxMathSrc *b, float wb,
                        gsize n, guint *bad_src, gsize *bad_index);
/* sum += w·b. FALSE (and @sum garbage) when a value of @b is not finite. */
gboolean rlx_math_add  (float *sum, const RlxMathSrc *b, float w, gsize n, gsize *bad_index);
/* u = coef·src (+ r when @r). FALSE when a value of @src is not finite.
 * *maxabs_out: the largest finite |u|. */
gboolean rlx_math_scale_add (float *u, const RlxMathSrc *src, float coef, const float *r, gsize n,
                             float *maxabs_out, gsize *bad_index);
/* The wire's scale for a vector whose largest finite magnitude is @maxabs
 * (exactly rlx_wire_scale_for's). */
double   rlx_math_scale_for (float maxabs, RlxPrecision p);
/* payload = quantise (u, p, scale); with @r: r = u − dequantise (payload)
 * (0 where not finite). f32: a copy, r = 0. */
void     rlx_math_quantise (const float *u, gsize n, RlxPrecision p, double scale,
                            guint8 *payload, float *r);
/* params −= dequantise (update): the one operation every replica applies. */
void     rlx_math_apply    (float *params, const RlxMsgArray *update);
/* The index of the first value of @x that is NaN or ±Inf, or -1. */
gssize   rlx_math_first_bad (const float *x, gsize n);
/* "value 12 is NaN" / "value 3 is infinite" */
char    *rlx_math_describe_bad (float v, gsize index);

G_END_DECLS
