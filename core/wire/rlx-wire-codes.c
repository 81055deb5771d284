/* rlx-wire-codes.c — is a payload of codes finite, and checked copies
 *
 * A frame's codes (an update, a bucket) are checked before anyone uses them:
 * one code that decodes to NaN or ±Inf would poison a replica. The check
 * reads eight bytes at a time with the masks of rlx_wire_code_masks (SWAR),
 * and rlx_wire_codes_copy_check copies and checks in the same pass — the
 * codes are read once, on their way to where they are used (the memory a
 * GPU reads) — on several threads when there are many (core/util's pool,
 * from the size rlx-par-copy.h names).
 */
#include "rlx-config.h"
#include "rlx-wire.h"
#include "core/util/rlx-par-copy.h"

#include <math.h>
#include <string.h>

/* Per precision: the exponent fields, their lowest bits and the elements'
 * top bits of a little-endian 64-bit word (E4M3 has no infinities: only
 * S.1111.111, NaN, counts). */
static const guint64 swar[RLX_PRECISION_COUNT][3] = {
  { 0x7f8000007f800000u, 0x0080000000800000u, 0x8000000080000000u },   /* f32 */
  { 0x7c007c007c007c00u, 0x0400040004000400u, 0x8000800080008000u },   /* f16 */
  { 0x7f7f7f7f7f7f7f7fu, 0x0101010101010101u, 0x8080808080808080u },   /* E4M3 */
  { 0x7c7c7c7c7c7c7c7cu, 0x0404040404040404u, 0x8080808080808080u },   /* E5M2 */
};

const guint64 *
rlx_wire_code_masks (RlxPrecision p)
{
  g_return_val_if_fail ((guint) p < RLX_PRECISION_COUNT, swar[0]);
  return swar[p];
}

gboolean
rlx_wire_code_bad (const void *codes, gsize i, RlxPrecision p)
{
  const guint8 *b = codes;

  switch (p)
    {
    case RLX_PRECISION_F32: return (b[4 * i + 3] & 0x7f) == 0x7f && (b[4 * i + 2] & 0x80);
    case RLX_PRECISION_F16: return (b[2 * i + 1] & 0x7c) == 0x7c;
    case RLX_PRECISION_F8E4M3: return (b[i] & 0x7f) == 0x7f;
    case RLX_PRECISION_F8E5M2:
    default: return (b[i] & 0x7c) == 0x7c;
    }
}

/* GCC's vector extensions, so that the loop is SIMD at any optimisation
 * level (the default build is -O2, where GCC 12 leaves it scalar). */
typedef guint64 V4q __attribute__ ((vector_size (32)));

/* Codes [@from, @to) of @src (whole elements): copied to @dst when non-NULL,
 * and checked in the same pass, 32 bytes at a time. The first code that
 * decodes to NaN or ±Inf, or -1. */
static gssize
copy_check_range (guint8 *dst, const guint8 *src, gsize from, gsize to, RlxPrecision p)
{
  gsize es = rlx_precision_element_size (p);
  const struct { guint64 field, one, top; } mm = { swar[p][0], swar[p][1], swar[p][2] }, *m = &mm;
  V4q acc = { 0 };
  guint64 tail = 0;
  gsize i = from * es, end = to * es;

  for (; i + 32 <= end; i += 32)
    {
      V4q w;
      memcpy (&w, src + i, sizeof w);
      if (dst != NULL)
        memcpy (dst + i, &w, sizeof w);
      acc |= ((w & m->field) + m->one) & m->top;
    }
  for (; i + 8 <= end; i += 8)
    {
      guint64 w;
      memcpy (&w, src + i, 8);
      if (dst != NULL)
        memcpy (dst + i, &w, 8);
      tail |= ((GUINT64_FROM_LE (w) & m->field) + m->one) & m->top;
    }
  if (i < end)
    {
      guint64 w = 0;
      memcpy (&w, src + i, end - i);   /* zero padding is a finite code */
      if (dst != NULL)
        memcpy (dst + i, src + i, end - i);
      tail |= ((GUINT64_FROM_LE (w) & m->field) + m->one) & m->top;
    }
  G_STATIC_ASSERT (G_BYTE_ORDER == G_LITTLE_ENDIAN);   /* the vector loop reads words as LE */
  if ((acc[0] | acc[1] | acc[2] | acc[3] | tail) == 0)
    return -1;
  for (gsize k = from; k < to; k++)
    if (rlx_wire_code_bad (src, k, p))
      return (gssize) k;
  g_assert_not_reached ();
}

typedef struct {
  guint8       *dst;
  const guint8 *src;
  gsize         from, to;
  RlxPrecision  p;
  gboolean      check;
  gssize        bad;
} CopyPiece;

static void
copy_piece (CopyPiece *c)
{
  gsize es = rlx_precision_element_size (c->p);

  if (c->check)
    c->bad = copy_check_range (c->dst, c->src, c->from, c->to, c->p);
  else
    memcpy (c->dst + c->from * es, c->src + c->from * es, (c->to - c->from) * es);
}

static void
copy_piece_k (gpointer data, guint k)
{
  copy_piece ((CopyPiece *) data + k);
}

/* The @n codes at @p of @src copied to @dst (NULL: only checked, never
 * with !@check), on several threads when there are many; @check: returns
 * the first that decodes to NaN or ±Inf, or -1 (always -1 without). */
static gssize
copy_pieces (void *dst, const void *src, gsize n, RlxPrecision p, gboolean check)
{
  gsize es = rlx_precision_element_size (p);
  CopyPiece pieces[RLX_PAR_COPY_PIECES];
  gsize per;
  gssize bad = -1;
  guint k, n_pieces;

  /* the same threshold as every large copy (rlx-par-copy.h) */
  if (n * es < rlx_par_copy_min_bytes ())
    {
      CopyPiece all = { dst, src, 0, n, p, check, -1 };

      copy_piece (&all);
      return all.bad;
    }
  /* whole 64-element lines (64-byte ones at any precision) */
  n_pieces = rlx_par_pieces (n, &per);
  for (k = 0; k < n_pieces; k++)
    pieces[k] = (CopyPiece) { dst, src, k * per, MIN (n, (k + 1) * per), p, check, -1 };
  rlx_par_run (n_pieces, copy_piece_k, pieces);
  for (k = 0; k < n_pieces; k++)
    if (pieces[k].bad >= 0 && (bad < 0 || pieces[k].bad < bad))
      bad = pieces[k].bad;
  return bad;
}

gssize
rlx_wire_codes_copy_check (void *dst, const void *src, gsize n, RlxPrecision p)
{
  g_return_val_if_fail (src != NULL || n == 0, -1);
  g_return_val_if_fail ((guint) p < RLX_PRECISION_COUNT, -1);
  return copy_pieces (dst, src, n, p, TRUE);
}

void
rlx_wire_codes_copy (void *dst, const void *src, gsize n, RlxPrecision p)
{
  g_return_if_fail ((dst != NULL && src != NULL) || n == 0);
  g_return_if_fail ((guint) p < RLX_PRECISION_COUNT);
  copy_pieces (dst, src, n, p, FALSE);
}

double
rlx_wire_codes_norm (const void *codes, gsize n, RlxPrecision p, double scale)
{
  const guint8 *b = codes;
  gsize size = rlx_precision_element_size (p);
  float chunk[4096];
  double sum = 0;

  for (gsize i = 0; i < n; i += G_N_ELEMENTS (chunk))
    {
      gsize k = MIN (G_N_ELEMENTS (chunk), n - i);

      rlx_wire_dequantize (b + i * size, k, p, scale, chunk);
      for (gsize j = 0; j < k; j++)
        sum += (double) chunk[j] * (double) chunk[j];
    }
  return sqrt (sum);
}
