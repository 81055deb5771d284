/* test-split.c — the split of a round's batch over the members
 *
 * rlx_coordinator_split_batch is the arithmetic of the leader's assignment:
 * shares in proportion to measured speed, the remainder to the largest
 * fractions, at least one sample for everyone able, caps by max_batch;
 * rlx_split_round_count how many samples a round takes: a step ends with
 * its epoch, an outer round runs over it.
 */
#include "rlx-config.h"
#include "core/rlx-coordinator-private.h"
#include "core/cohort/rlx-split.h"

#include <string.h>

static guint
sum (const guint *c, guint k)
{
  guint s = 0;

  for (guint i = 0; i < k; i++)
    s += c[i];
  return s;
}

static void
test_proportional (void)
{
  const double w[2] = { 300.0, 100.0 };
  const guint maxb[2] = { 1024, 1024 };
  guint c[2];

  g_assert_cmpuint (rlx_coordinator_split_batch (64, w, maxb, 2, c), ==, 64);
  g_assert_cmpuint (c[0], ==, 48);
  g_assert_cmpuint (c[1], ==, 16);

  /* Equal speeds: equal shares. */
  {
    const double we[3] = { 5.0, 5.0, 5.0 };
    const guint m3[3] = { 100, 100, 100 };
    guint c3[3];
    g_assert_cmpuint (rlx_coordinator_split_batch (30, we, m3, 3, c3), ==, 30);
    for (guint i = 0; i < 3; i++)
      g_assert_cmpuint (c3[i], ==, 10);
  }
  /* Speed, not position: swapping the weights swaps the shares. */
  {
    const double ws[2] = { 100.0, 300.0 };
    g_assert_cmpuint (rlx_coordinator_split_batch (64, ws, maxb, 2, c), ==, 64);
    g_assert_cmpuint (c[0], ==, 16);
    g_assert_cmpuint (c[1], ==, 48);
  }
}

static void
test_remainder (void)
{
  /* 10 over 1:1:1 → 3.33 each: the one left over to the first largest
   * fraction (ties keep the lowest index). */
  const double w[3] = { 1.0, 1.0, 1.0 };
  const guint maxb[3] = { 100, 100, 100 };
  guint c[3];

  g_assert_cmpuint (rlx_coordinator_split_batch (10, w, maxb, 3, c), ==, 10);
  g_assert_cmpuint (c[0], ==, 4);
  g_assert_cmpuint (c[1], ==, 3);
  g_assert_cmpuint (c[2], ==, 3);

  /* 10 over 55:27:18 → shares 5.5, 2.7, 1.8, floors 5, 2, 1 (8): the two
   * left go to the fractions .8 (member 2) and .7 (member 1), not .5. */
  {
    const double w2[3] = { 55.0, 27.0, 18.0 };
    g_assert_cmpuint (rlx_coordinator_split_batch (10, w2, maxb, 3, c), ==, 10);
    g_assert_cmpuint (c[0], ==, 5);
    g_assert_cmpuint (c[1], ==, 3);
    g_assert_cmpuint (c[2], ==, 2);
  }
}

static void
test_at_least_one (void)
{
  /* A member 1000× slower would get 0 of 8; it gets 1, from the largest. */
  const double w[3] = { 1000.0, 1000.0, 1.0 };
  const guint maxb[3] = { 100, 100, 100 };
  guint c[3];

  g_assert_cmpuint (rlx_coordinator_split_batch (8, w, maxb, 3, c), ==, 8);
  g_assert_cmpuint (c[2], ==, 1);
  g_assert_cmpuint (c[0] + c[1], ==, 7);
  g_assert_cmpuint (c[0], >=, 3);
  g_assert_cmpuint (c[1], >=, 3);

  /* Fewer samples than members: no such promise, but the sum holds and the
   * slow member is the one left out. */
  g_assert_cmpuint (rlx_coordinator_split_batch (2, w, maxb, 3, c), ==, 2);
  g_assert_cmpuint (c[0], ==, 1);
  g_assert_cmpuint (c[1], ==, 1);
  g_assert_cmpuint (c[2], ==, 0);
}

static void
test_max_batch (void)
{
  /* The fast member's backend takes at most 20: the excess goes to the
   * others with room. */
  const double w[3] = { 8.0, 1.0, 1.0 };
  const guint maxb[3] = { 20, 100, 100 };
  guint c[3];

  g_assert_cmpuint (rlx_coordinator_split_batch (100, w, maxb, 3, c), ==, 100);
  g_assert_cmpuint (c[0], ==, 20);
  g_assert_cmpuint (c[1] + c[2], ==, 80);
  g_assert_cmpuint (c[1], <=, 100);
  g_assert_cmpuint (c[2], <=, 100);

  /* Not enough room anywhere: everyone at its cap, the sum is what fits. */
  {
    const guint small[3] = { 10, 5, 5 };
    g_assert_cmpuint (rlx_coordinator_split_batch (100, w, small, 3, c), ==, 20);
    g_assert_cmpuint (c[0], ==, 10);
    g_assert_cmpuint (c[1], ==, 5);
    g_assert_cmpuint (c[2], ==, 5);
  }
  /* max_batch 0 (no backend): nothing, whatever its weight. */
  {
    const double w2[2] = { 1000.0, 1.0 };
    const guint m2[2] = { 0, 64 };
    guint c2[2];
    g_assert_cmpuint (rlx_coordinator_split_batch (32, w2, m2, 2, c2), ==, 32);
    g_assert_cmpuint (c2[0], ==, 0);
    g_assert_cmpuint (c2[1], ==, 32);
  }
}

static void
test_zero_weights (void)
{
  const double w[3] = { 0.0, 2.0, 0.0 };
  const guint maxb[3] = { 100, 100, 100 };
  guint c[3] = { 7, 7, 7 };

  /* Weight 0 is "unable": it gets nothing, even with count >= k. */
  g_assert_cmpuint (rlx_coordinator_split_batch (9, w, maxb, 3, c), ==, 9);
  g_assert_cmpuint (c[0], ==, 0);
  g_assert_cmpuint (c[1], ==, 9);
  g_assert_cmpuint (c[2], ==, 0);

  /* Nobody able: nothing assigned, every output written. */
  {
    const double z[3] = { 0.0, 0.0, -1.0 };
    guint d[3] = { 7, 7, 7 };
    g_assert_cmpuint (rlx_coordinator_split_batch (9, z, maxb, 3, d), ==, 0);
    g_assert_cmpuint (sum (d, 3), ==, 0);
  }
  /* No members, no samples. */
  g_assert_cmpuint (rlx_coordinator_split_batch (9, NULL, NULL, 0, NULL), ==, 0);
  g_assert_cmpuint (rlx_coordinator_split_batch (0, w, maxb, 3, c), ==, 0);
  g_assert_cmpuint (sum (c, 3), ==, 0);
}

/* Random weights, caps and counts: the sum is always count when the caps
 * leave room (else what fits), caps and zero weights hold, and without caps
 * each share stays within one (plus the at-least-one moves) of its
 * proportional value. */
static void
test_random (void)
{
  GRand *r = g_rand_new_with_seed (12345);

  for (guint t = 0; t < 5000; t++)
    {
      guint k = g_rand_int_range (r, 1, 9);
      double w[8], wsum = 0;
      guint maxb[8], room = 0, c[8];
      guint count = g_rand_int_range (r, 0, 600);
      gboolean capped = g_rand_boolean (r);
      guint able = 0, got;

      for (guint i = 0; i < k; i++)
        {
          w[i] = g_rand_int_range (r, 0, 4) == 0 ? 0.0 : g_rand_double_range (r, 1.0, 5000.0);
          maxb[i] = capped ? (guint) g_rand_int_range (r, 0, 200) : 65536;
          if (w[i] > 0 && maxb[i] > 0)
            {
              room += maxb[i];
              wsum += w[i];
              able++;
            }
        }
      got = rlx_coordinator_split_batch (count, w, maxb, k, c);
      g_assert_cmpuint (got, ==, sum (c, k));
      if (able == 0)
        g_assert_cmpuint (got, ==, 0);
      else if (count <= room)
        g_assert_cmpuint (got, ==, count);
      else
        g_assert_cmpuint (got, <=, room);
      for (guint i = 0; i < k; i++)
        {
          g_assert_cmpuint (c[i], <=, maxb[i]);
          if (w[i] <= 0 || maxb[i] == 0)
            g_assert_cmpuint (c[i], ==, 0);
          else if (!capped && count >= k)
            g_assert_cmpuint (c[i], >=, 1);
        }
      if (!capped && able > 0)
        for (guint i = 0; i < k; i++)
          if (w[i] > 0)
            {
              double ideal = count * w[i] / wsum;
              /* Floor plus at most one remainder, give or take the
               * at-least-one moves (at most k-1 of them). */
              g_assert_cmpfloat (c[i], <=, ideal + 1 + 1e-9);
              g_assert_cmpfloat (c[i], >=, ideal - 1 - (double) (k - 1) - 1e-9);
            }
    }
  g_rand_free (r);
}

/* The rounds of one epoch of @n samples from position 0, at @global a
 * step; their count, the smallest and the largest into *@lo, *@hi. */
static guint
walk_epoch (guint n, guint64 global, guint *lo, guint *hi)
{
  guint pos = 0, rounds = 0;

  *lo = G_MAXUINT;
  *hi = 0;
  while (pos < n)
    {
      guint c = rlx_split_round_count (global, n - pos, 1);

      g_assert_cmpuint (c, >, 0);
      g_assert_cmpuint (c, <=, n - pos);
      *lo = MIN (*lo, c);
      *hi = MAX (*hi, c);
      pos += c;
      rounds++;
    }
  g_assert_cmpuint (pos, ==, n);
  return rounds;
}

static void
test_round_count (void)
{
  guint lo, hi;

  /* A step ends with its epoch: the step mode keeps its short last step */
  g_assert_cmpuint (rlx_split_round_count (512, 608, 1), ==, 512);
  g_assert_cmpuint (rlx_split_round_count (512, 96, 1), ==, 96);
  g_assert_cmpuint (walk_epoch (60000, 512, &lo, &hi), ==, 118);
  g_assert_cmpuint (lo, ==, 96);
  g_assert_cmpuint (hi, ==, 512);

  /* An outer round takes H × the batches wherever the epoch ends:
   * eight mnist-mlp ranks at batch 256 and H 150 (307,200, five epochs
   * and more), two (76,800), mnist-mlp-xl's two at H 39 near the end */
  g_assert_cmpuint (rlx_split_round_count (307200, 60000, 150), ==, 307200);
  g_assert_cmpuint (rlx_split_round_count (76800, 60000, 150), ==, 76800);
  g_assert_cmpuint (rlx_split_round_count (76800, 1, 150), ==, 76800);
  g_assert_cmpuint (rlx_split_round_count (19968, 96, 39), ==, 19968);
  g_assert_cmpuint (rlx_split_round_count (19968, 60000 - 2 * 19968, 39), ==, 19968);
  for (guint64 g = 1000; g <= 400000; g += 997)
    for (guint left = 1; left <= 60000; left += 6007)
      g_assert_cmpuint (rlx_split_round_count (g, left, 2), ==, g);
  /* …up to what a frame can say */
  g_assert_cmpuint (rlx_split_round_count ((guint64) G_MAXUINT32 * 4, 60000, 150), ==,
                    RLX_SPLIT_MAX_ROUND);
}

/* @count samples from @start of a round of @h inner steps fit a member
 * with @max_batch and an epoch of @n_train; when not, the error names the
 * bound it passes (@why). */
static void
assert_fits (guint64 start, guint count, guint h, guint n_train, guint max_batch,
             const char *why)
{
  g_autoptr(GError) error = NULL;
  gboolean fits = rlx_split_slot_fits (start, count, h, n_train, max_batch, &error);

  if (why == NULL)
    {
      g_assert_no_error (error);
      g_assert_true (fits);
      return;
    }
  g_assert_false (fits);
  g_assert_error (error, RLX_MSG_ERROR, RLX_MSG_ERROR_FIELD);
  if (strstr (error->message, why) == NULL)
    g_error ("slot of %u from %" G_GUINT64_FORMAT " at H %u: \"%s\" does not say \"%s\"",
             count, start, h, error->message, why);
}

static void
test_slot_fits (void)
{
  /* a step's slot lies within its epoch */
  assert_fits (990, 10, 0, 1000, 256, NULL);
  assert_fits (990, 11, 0, 1000, 256, "passes the epoch's end");
  assert_fits ((guint64) G_MAXUINT32 * 2, 1, 0, 1000, 256, "passes the epoch's end");
  /* an outer round's runs on into the next epochs, up to H × max_batch or
   * an epoch, whichever is more */
  assert_fits (990, 1152, 9, 1000, 128, NULL);
  assert_fits (990, 1153, 9, 1000, 128, "H 9 times this rank's max_batch 128");
  assert_fits (5000, 1000, 2, 1000, 64, NULL);
  assert_fits (5000, 1001, 2, 1000, 64, "or an epoch (1000)");
}

/* A frame's H (≤ RLX_OUTER_MAX_H) times a max_batch of 65,536 would let a
 * slot hold 655 million samples (2.6 GB of indices): no slot holds more
 * than RLX_SPLIT_MAX_SLOT, whatever its H. */
static void
test_slot_oversized (void)
{
  assert_fits (0, RLX_SPLIT_MAX_SLOT, 10000, 60000, 65536, NULL);
  assert_fits (0, RLX_SPLIT_MAX_SLOT + 1, 10000, 60000, 65536, "more than any slot may hold");
  assert_fits (0, 10000u * 65536u, 10000, 60000, 65536, "more than any slot may hold (16777216)");
  assert_fits (0, G_MAXUINT32, 10000, 10000000, 65536, "more than any slot may hold");
  /* an epoch of the largest synthetic split still fits */
  assert_fits (0, 10000000, 1, 10000000, 256, NULL);
}

/* The ranks a round's slots give samples to: each node once, however many
 * slots it has, and none whose slots are all empty. */
static void
test_ranks (void)
{
  g_autoptr(GArray) slots = rlx_msg_slots_new ();
  static const struct { const char *node; guint count; } s[] = {
    { "a", 8 }, { "b", 0 }, { "c", 4 }, { "a", 8 }, { "d", 0 }, { "d", 0 },
  };

  g_assert_cmpuint (rlx_split_ranks (NULL), ==, 0);
  g_assert_cmpuint (rlx_split_ranks (slots), ==, 0);
  for (guint i = 0; i < G_N_ELEMENTS (s); i++)
    {
      RlxMsgSlot slot = { .node = g_strdup (s[i].node), .count = s[i].count };
      g_array_append_val (slots, slot);
    }
  g_assert_cmpuint (rlx_split_ranks (slots), ==, 2);
  g_array_index (slots, RlxMsgSlot, 1).count = 1;
  g_assert_cmpuint (rlx_split_ranks (slots), ==, 3);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/split/proportional", test_proportional);
  g_test_add_func ("/split/remainder-largest-fraction", test_remainder);
  g_test_add_func ("/split/at-least-one", test_at_least_one);
  g_test_add_func ("/split/max-batch", test_max_batch);
  g_test_add_func ("/split/zero-weights", test_zero_weights);
  g_test_add_func ("/split/random", test_random);
  g_test_add_func ("/split/round-count", test_round_count);
  g_test_add_func ("/split/slot-fits", test_slot_fits);
  g_test_add_func ("/split/slot-oversized", test_slot_oversized);
  g_test_add_func ("/split/ranks", test_ranks);
  return g_test_run ();
}
