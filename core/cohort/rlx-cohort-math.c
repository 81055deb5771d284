/* rlx-cohort-math.c — see rlx-cohort-math.h */
#include "rlx-config.h"
#include "rlx-cohort-math.h"

#include <math.h>
#include <string.h>

/* The hot loops, vectorised whatever the build's -O level. */
#define HOT __attribute__ ((optimize ("O3")))

/* Elements per block: 16 KiB of floats, in L1 with its codes. */
#define BLOCK 4096

/* Block [i, i+m) of @src as floats: in place for plain or aligned f32
 * little-endian data, else decoded into @tmp. */
static const float *
src_block (const RlxMathSrc *src, gsize i, gsize m, float *tmp)
{
  const RlxMsgArray *a;
  gsize es;

  if (src->floats)
    return src->floats + i;
  a = src->codes;
  if (rlx_msg_array_f32 (a))
    return rlx_msg_array_f32 (a) + i;
  es = rlx_precision_element_size (a->precision);
  rlx_wire_dequantize ((const guint8 *) a->codes + i * es, m, a->precision, a->scale, tmp);
  return tmp;
}

/* Non-zero when a value of @x is NaN or ±Inf: an exponent test the compiler
 * vectorises. */
static guint32 HOT
block_bad (const float *x, gsize m)
{
  guint32 bad = 0;

  for (gsize j = 0; j < m; j++)
    {
      guint32 b;
      memcpy (&b, x + j, 4);
      bad |= (guint32) ((b & 0x7f800000u) == 0x7f800000u);
    }
  return bad;
}

gssize
rlx_math_first_bad (const float *x, gsize n)
{
  for (gsize i = 0; i < n; i += BLOCK)
    {
      gsize m = MIN (BLOCK, n - i);
      if (block_bad (x + i, m))
        for (gsize j = 0; j < m; j++)
          if (!isfinite (x[i + j]))
            return (gssize) (i + j);
    }
  return -1;
}

char *
rlx_math_describe_bad (float v, gsize index)
{
  return g_strdup_printf ("value %" G_GSIZE_FORMAT " is %s", index,
                          isnan (v) ? "NaN" : "infinite");
}

static gsize
bad_in_block (const float *x, gsize m)
{
  for (gsize j = 0; j < m; j++)
    if (!isfinite (x[j]))
      return j;
  return 0;
}

static void HOT
sum2_block (float *restrict s, const float *restrict a, float wa, const float *restrict b,
            float wb, gsize m)
{
  for (gsize j = 0; j < m; j++)
    s[j] = wa * a[j] + wb * b[j];
}

static void HOT
add_block (float *restrict s, const float *restrict b, float w, gsize m)
{
  for (gsize j = 0; j < m; j++)
    s[j] += w * b[j];
}

gboolean
rlx_math_sum2 (float *sum, const RlxMathSrc *a, float wa, const RlxMathSrc *b, float wb, gsize n,
               guint *bad_src, gsize *bad_index)
{
  float ta[BLOCK], tb[BLOCK];

  for (gsize i = 0; i < n; i += BLOCK)
    {
      gsize m = MIN (BLOCK, n - i);
      const float *xa = src_block (a, i, m, ta);
      const float *xb = src_block (b, i, m, tb);

      if (G_UNLIKELY (block_bad (xa, m) || block_bad (xb, m)))
        {
          gboolean in_a = block_bad (xa, m) != 0;
          *bad_src = in_a ? 0 : 1;
          *bad_index = i + bad_in_block (in_a ? xa : xb, m);
          return FALSE;
        }
      sum2_block (sum + i, xa, wa, xb, wb, m);
    }
  return TRUE;
}

gboolean
rlx_math_add (float *sum, const RlxMathSrc *b, float w, gsize n, gsize *bad_index)
{
  float tb[BLOCK];

  for (gsize i = 0; i < n; i += BLOCK)
    {
      gsize m = MIN (BLOCK, n - i);
      const float *xb = src_block (b, i, m, tb);

      if (G_UNLIKELY (block_bad (xb, m)))
        {
          *bad_index = i + bad_in_block (xb, m);
          return FALSE;
        }
      add_block (sum + i, xb, w, m);
    }
  return TRUE;
}

static float HOT
scale_add_block (float *restrict u, const float *restrict x, float coef, const float *restrict r,
                 gsize m, float mx)
{
  if (r)
    for (gsize j = 0; j < m; j++)
      u[j] = coef * x[j] + r[j];
  else
    for (gsize j = 0; j < m; j++)
      u[j] = coef * x[j];
  for (gsize j = 0; j < m; j++)
    {
      float a = fabsf (u[j]);
      /* NaN compares false; +Inf is excluded explicitly: the largest
       * *finite* magnitude, as the wire's encoder takes it. */
      mx = (a > mx && a <= G_MAXFLOAT) ? a : mx;
    }
  return mx;
}

gboolean
rlx_math_scale_add (float *u, const RlxMathSrc *src, float coef, const float *r, gsize n,
                    float *maxabs_out, gsize *bad_index)
{
  float t[BLOCK];
  float mx = 0;

  for (gsize i = 0; i < n; i += BLOCK)
    {
      gsize m = MIN (BLOCK, n - i);
      const float *x = src_block (src, i, m, t);

      if (G_UNLIKELY (block_bad (x, m)))
        {
          *bad_index = i + bad_in_block (x, m);
          return FALSE;
        }
      mx = scale_add_block (u + i, x, coef, r ? r + i : NULL, m, mx);
    }
  *maxabs_out = mx;
  return TRUE;
}

double
rlx_math_scale_for (float maxabs, RlxPrecision p)
{
  if (p == RLX_PRECISION_F32)
    return 1.0;
  /* The seed: `maxAbs > 0 ? f.target / maxAbs : 1`, in double. */
  return maxabs > 0 ? rlx_precision_target (p) / (double) maxabs : 1.0;
}

static void HOT
residual_block (float *restrict r, const float *restrict u, const float *restrict d, gsize m)
{
  for (gsize j = 0; j < m; j++)
    {
      float v = u[j] - d[j];
      r[j] = isfinite (v) ? v : 0.0f;
    }
}

void
rlx_math_quantise (const float *u, gsize n, RlxPrecision p, double scale, guint8 *payload,
                   float *r)
{
  gsize es = rlx_precision_element_size (p);
  float d[BLOCK];

  if (p == RLX_PRECISION_F32)
    {
      memcpy (payload, u, n * sizeof (float));
      if (r)
        memset (r, 0, n * sizeof (float));
      return;
    }
  for (gsize i = 0; i < n; i += BLOCK)
    {
      gsize m = MIN (BLOCK, n - i);

      rlx_wire_quantize (u + i, m, p, scale, payload + i * es);
      if (r)
        {
          rlx_wire_dequantize (payload + i * es, m, p, scale, d);
          residual_block (r + i, u + i, d, m);
        }
    }
}

static void HOT
sub_block (float *restrict params, const float *restrict d, gsize m)
{
  for (gsize j = 0; j < m; j++)
    params[j] -= d[j];
}

void
rlx_math_apply (float *params, const RlxMsgArray *update)
{
  RlxMathSrc src = { NULL, update };
  float t[BLOCK];

  for (gsize i = 0; i < update->n; i += BLOCK)
    {
      gsize m = MIN (BLOCK, update->n - i);
      sub_block (params + i, src_block (&src, i, m, t), m);
    }
}
