/* test-wire-codes.c — finding codes that decode to NaN or ±Inf, and the
 * checked copy (core/wire/rlx-wire-codes.c)
 *
 * The reference is the decoded value itself (rlx_wire_f32_from_f16/_f8,
 * held to the format definitions by test-wire-formats): a code is bad
 * exactly when its value is not finite. The copies run at sizes around
 * every boundary of the 32- and 8-byte loops, from unaligned addresses,
 * and (as test-wire-codes-par, with RLX_COPY_PAR_MIN=4096) split over the
 * pool's threads, where the first bad code of the whole array must win
 * over a later piece's.
 */
#include "rlx-config.h"

#include <math.h>
#include <string.h>

#include "core/wire/rlx-wire.h"
#include "core/util/rlx-par-copy.h"

static const RlxPrecision all_p[] = {
  RLX_PRECISION_F32, RLX_PRECISION_F16, RLX_PRECISION_F8E4M3, RLX_PRECISION_F8E5M2,
};

/* Element @i of @codes at @p decodes to NaN or ±Inf: from its value. */
static gboolean
ref_bad (const guint8 *codes, gsize i, RlxPrecision p)
{
  switch (p)
    {
    case RLX_PRECISION_F32:
      {
        float f;
        memcpy (&f, codes + 4 * i, 4);
        return !isfinite (f);
      }
    case RLX_PRECISION_F16:
      return !isfinite (rlx_wire_f32_from_f16 ((guint16) (codes[2 * i] | codes[2 * i + 1] << 8)));
    default:
      return !isfinite (rlx_wire_f32_from_f8 (codes[i], p));
    }
}

/* Random codes, every one finite (a bad one gets an exponent bit cleared). */
static void
fill_finite (guint8 *codes, gsize n, RlxPrecision p, GRand *r)
{
  gsize es = rlx_precision_element_size (p);

  for (gsize b = 0; b < n * es; b++)
    codes[b] = (guint8) g_rand_int (r);
  for (gsize i = 0; i < n; i++)
    if (ref_bad (codes, i, p))
      {
        codes[i * es + es - 1] &= 0xbe;   /* below the all-ones exponent */
        g_assert_false (ref_bad (codes, i, p));
      }
}

/* Element @i becomes one of the format's non-finite codes. */
static void
plant_bad (guint8 *codes, gsize i, RlxPrecision p, guint which)
{
  static const guint32 f32[] = { 0x7f800000u, 0xff800000u, 0x7fc00001u };
  static const guint16 f16[] = { 0x7c00u, 0xfc00u, 0x7e01u };
  static const guint8 e4m3[] = { 0x7f, 0xff, 0x7f };
  static const guint8 e5m2[] = { 0x7c, 0xfc, 0x7f };

  which %= 3;
  switch (p)
    {
    case RLX_PRECISION_F32: memcpy (codes + 4 * i, &f32[which], 4); break;
    case RLX_PRECISION_F16: memcpy (codes + 2 * i, &f16[which], 2); break;
    case RLX_PRECISION_F8E4M3: codes[i] = e4m3[which]; break;
    default: codes[i] = e5m2[which]; break;
    }
  g_assert_true (ref_bad (codes, i, p));
}

/* Every f16 and f8 code, and f32 exponents and mantissa edges. */
static void
test_code_bad (void)
{
  for (guint c = 0; c < 65536; c++)
    {
      guint8 b[2] = { c & 0xff, c >> 8 };
      g_assert_cmpint (rlx_wire_code_bad (b, 0, RLX_PRECISION_F16), ==,
                       ref_bad (b, 0, RLX_PRECISION_F16));
    }
  for (guint c = 0; c < 256; c++)
    {
      guint8 b = (guint8) c;
      g_assert_cmpint (rlx_wire_code_bad (&b, 0, RLX_PRECISION_F8E4M3), ==,
                       ref_bad (&b, 0, RLX_PRECISION_F8E4M3));
      g_assert_cmpint (rlx_wire_code_bad (&b, 0, RLX_PRECISION_F8E5M2), ==,
                       ref_bad (&b, 0, RLX_PRECISION_F8E5M2));
    }
  for (guint e = 0; e < 512; e++)
    for (guint m = 0; m < 4; m++)
      {
        const guint32 mant[] = { 0, 1, 0x400000u, 0x7fffffu };
        guint32 bits = (e << 23) | mant[m];
        guint8 b[4];

        memcpy (b, &bits, 4);
        g_assert_cmpint (rlx_wire_code_bad (b, 0, RLX_PRECISION_F32), ==,
                         ref_bad (b, 0, RLX_PRECISION_F32));
      }
  /* the masks find a bad element in any lane of a word */
  for (guint k = 0; k < G_N_ELEMENTS (all_p); k++)
    {
      RlxPrecision p = all_p[k];
      const guint64 *m = rlx_wire_code_masks (p);
      gsize es = rlx_precision_element_size (p);

      for (gsize lane = 0; lane < 8 / es; lane++)
        {
          guint8 w8[8] = { 0 };
          guint64 w;

          plant_bad (w8, lane, p, (guint) lane);
          memcpy (&w, w8, 8);
          g_assert_cmpuint (((GUINT64_FROM_LE (w) & m[0]) + m[1]) & m[2], !=, 0);
        }
    }
}

/* copy_check of @n codes (at byte offsets @src_off, @dst_off) gives @want
 * and copies every byte; so does the check alone (dst NULL). */
static void
assert_copy (const guint8 *codes, gsize n, RlxPrecision p, gssize want)
{
  gsize es = rlx_precision_element_size (p), bytes = n * es;
  g_autofree guint8 *src = g_malloc (bytes + 1);
  g_autofree guint8 *dst = g_malloc (bytes + 1);

  for (guint off = 0; off < 2; off++)
    {
      memcpy (src + off, codes, bytes);
      memset (dst, 0xa5, bytes + 1);
      g_assert_cmpint (rlx_wire_codes_copy_check (dst + (1 - off), src + off, n, p), ==, want);
      g_assert_cmpmem (dst + (1 - off), bytes, codes, bytes);
      g_assert_cmpint (rlx_wire_codes_copy_check (NULL, src + off, n, p), ==, want);
      memset (dst, 0xa5, bytes + 1);
      rlx_wire_codes_copy (dst + off, src + off, n, p);
      g_assert_cmpmem (dst + off, bytes, codes, bytes);
    }
}

static void
test_copy_check (void)
{
  const gsize sizes[] = { 0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100,
                          1023, 4099, 65536 + 13, 300007 };
  g_autoptr(GRand) r = g_rand_new_with_seed (25);

  g_test_message ("pieces from %" G_GSIZE_FORMAT " bytes on", rlx_par_copy_min_bytes ());
  for (guint k = 0; k < G_N_ELEMENTS (all_p); k++)
    for (guint s = 0; s < G_N_ELEMENTS (sizes); s++)
      {
        RlxPrecision p = all_p[k];
        gsize n = sizes[s], es = rlx_precision_element_size (p);
        g_autofree guint8 *codes = g_malloc (n * es + 1);
        gsize v32 = n * es / 32 * 32 / es, v8 = n * es / 8 * 8 / es;   /* what the loops cover */
        gssize cand[8];
        gsize at[8];
        guint n_at = 0;

        fill_finite (codes, n, p, r);
        assert_copy (codes, n, p, -1);
        if (n == 0)
          continue;
        /* one bad code: first, last, in the middle (another piece when
         * split), on either side of the 32- and 8-byte loops' ends */
        cand[0] = 0;
        cand[1] = (gssize) n - 1;
        cand[2] = (gssize) n / 2;
        cand[3] = (gssize) v32 - 1;
        cand[4] = (gssize) v32;
        cand[5] = (gssize) v8 - 1;
        cand[6] = (gssize) v8;
        cand[7] = g_rand_int_range (r, 0, (gint32) n);
        for (guint c = 0; c < G_N_ELEMENTS (cand); c++)
          if (cand[c] >= 0 && cand[c] < (gssize) n)
            at[n_at++] = (gsize) cand[c];
        for (guint a = 0; a < n_at; a++)
          {
            g_autofree guint8 *bad = g_memdup2 (codes, n * es);

            plant_bad (bad, at[a], p, a);
            assert_copy (bad, n, p, (gssize) at[a]);
            /* a later bad code (another piece when split) never hides the first */
            if (at[a] + 1 < n)
              {
                plant_bad (bad, n - 1, p, a + 1);
                assert_copy (bad, n, p, (gssize) at[a]);
              }
          }
      }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/wire/codes/bad", test_code_bad);
  g_test_add_func ("/wire/codes/copy-check", test_copy_check);
  return g_test_run ();
}
