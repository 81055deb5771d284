/* test-outer-epochs.c — outer rounds that run over an epoch's end, in
 * cohorts of real `rlx-rank join` processes (cohort-harness.h)
 *
 * What docs/PROTOCOL.md, "Sync modes", promises: an outer round takes H ×
 * the members' batches wherever the epoch ends, its slots running on into
 * the next epoch's permutation, and still every sample of each epoch is
 * taken once per epoch across the cohort, in the order of the seeded
 * permutations; a checkpoint taken while a round runs over the epoch's
 * end resumes where that round began, and so does a new leader after a
 * failover. Each rank notes the slices it takes
 * (RLX_TEST_SAMPLE_LOG, core/cohort/rlx-sample-log.h); the test lays them
 * end to end (after a failover, each step's slices of its last term) and
 * checks them against rlx_dataset_permutation itself.
 *
 * The synthetic dataset at 1,000 samples (RLX_SYNTHETIC_TRAIN) and rounds
 * of 216 samples put the epoch's end inside a round, and inside different
 * ranks' slots, every few rounds; rounds of 1,152 run over one in every
 * round.
 */
#include "rlx-config.h"
#include "cohort-harness.h"
#include "core/vision/rlx-dataset.h"

#include <glib/gstdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define N_TRAIN 1000
#define SEED    3
#define SLOW_OK "5000"

typedef struct {
  char    *node;
  guint64  term, step;
  guint    epoch;
  guint64  start, count;
  guint64  at;       /* the slice's place in the sample stream: epoch × N_TRAIN + start */
  guint    seq;      /* its line in its rank's log (later: assigned later) */
  GArray  *indices;  /* guint32 */
} Slice;

static void
slice_free (gpointer p)
{
  Slice *s = p;

  g_free (s->node);
  g_array_unref (s->indices);
  g_free (s);
}

static gint
by_place (gconstpointer a, gconstpointer b)
{
  const Slice *x = *(Slice *const *) a, *y = *(Slice *const *) b;

  if (x->step != y->step)
    return x->step < y->step ? -1 : 1;
  return x->at < y->at ? -1 : x->at > y->at ? 1 : 0;
}

/* Every slice the ranks that wrote into @dir took, by step, then by place
 * in the stream. */
static GPtrArray *
read_slices (const char *dir)
{
  GPtrArray *out = g_ptr_array_new_with_free_func (slice_free);
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;

  g_assert_nonnull (d);
  while ((name = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *path = g_build_filename (dir, name, NULL);
      g_autofree char *text = NULL;
      g_auto(GStrv) lines = NULL;

      if (!g_str_has_prefix (name, "samples-"))
        continue;
      g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
      lines = g_strsplit (text, "\n", -1);
      for (guint i = 0; lines[i] != NULL; i++)
        {
          g_auto(GStrv) f = NULL;
          g_auto(GStrv) idx = NULL;
          Slice *s;

          if (*lines[i] == '\0')
            continue;
          f = g_strsplit (lines[i], "\t", -1);
          g_assert_cmpuint (g_strv_length (f), ==, 7);
          s = g_new0 (Slice, 1);
          s->node = g_strdup (f[0]);
          s->term = g_ascii_strtoull (f[1], NULL, 10);
          s->step = g_ascii_strtoull (f[2], NULL, 10);
          s->epoch = (guint) g_ascii_strtoull (f[3], NULL, 10);
          s->start = g_ascii_strtoull (f[4], NULL, 10);
          s->count = g_ascii_strtoull (f[5], NULL, 10);
          s->at = (guint64) s->epoch * N_TRAIN + s->start;
          s->seq = i;
          s->indices = g_array_new (FALSE, FALSE, sizeof (guint32));
          idx = g_strsplit (f[6], " ", -1);
          for (guint j = 0; idx[j] != NULL; j++)
            {
              guint32 v = (guint32) g_ascii_strtoull (idx[j], NULL, 10);
              g_array_append_val (s->indices, v);
            }
          g_assert_cmpuint (s->indices->len, ==, s->count);
          g_ptr_array_add (out, s);
        }
    }
  g_ptr_array_sort (out, by_place);
  return out;
}

/* Index @at of the sample stream: epoch at / N_TRAIN's permutation, made
 * here by the dataset's own function (@perm caches one epoch's). */
static guint32
stream_at (guint64 at, guint *perm_epoch, guint32 *perm)
{
  guint e = (guint) (at / N_TRAIN);

  if (e != *perm_epoch)
    {
      rlx_dataset_permutation (N_TRAIN, SEED, e, perm);
      *perm_epoch = e;
    }
  return perm[at % N_TRAIN];
}

/* The slices of steps @first..@last (from @slices; each step's slices of
 * one frame) laid end to end from stream place @from: each step's are
 * contiguous, take @per_round samples (0: any), the next step begins where
 * it ends; every index is the seeded permutations' at its place; and in
 * every epoch the stream covers, each sample is taken at most once (once
 * exactly, for the epochs it covers whole). Returns where @last ends; the
 * slices and rounds that ran over an epoch's end into *@crossing_slices,
 * *@crossing_rounds. */
static guint64
check_stream (GPtrArray *slices, guint64 first, guint64 last, guint64 from, guint per_round,
              guint *crossing_slices, guint *crossing_rounds)
{
  g_autofree guint32 *perm = g_new (guint32, N_TRAIN);
  g_autofree guint *seen = g_new0 (guint, N_TRAIN);
  guint perm_epoch = G_MAXUINT, seen_epoch = (guint) (from / N_TRAIN);
  guint64 at = from;

  *crossing_slices = *crossing_rounds = 0;
  for (guint64 step = first; step <= last; step++)
    {
      guint64 round_from = at, taken = 0;
      guint in_step = 0;

      for (guint i = 0; i < slices->len; i++)
        {
          Slice *s = g_ptr_array_index (slices, i);

          if (s->step != step)
            continue;
          in_step++;
          if (s->at != at)
            g_error ("step %" G_GUINT64_FORMAT ": %s's slice begins at %" G_GUINT64_FORMAT
                     " (epoch %u, start %" G_GUINT64_FORMAT ") of the stream; the slices before "
                     "end at %" G_GUINT64_FORMAT " (a gap or an overlap)",
                     step, s->node, s->at, s->epoch, s->start, at);
          if ((s->at + s->count - 1) / N_TRAIN != s->at / N_TRAIN)
            (*crossing_slices)++;
          for (guint j = 0; j < s->count; j++, at++)
            {
              guint32 want = stream_at (at, &perm_epoch, perm);
              guint32 got = g_array_index (s->indices, guint32, j);

              if (got != want)
                g_error ("step %" G_GUINT64_FORMAT ", %s, sample %u of its slice: index %u, "
                         "the permutation has %u at stream place %" G_GUINT64_FORMAT,
                         step, s->node, j, got, want, at);
              if ((guint) (at / N_TRAIN) != seen_epoch)
                {
                  /* an epoch ends: it was covered whole, each sample once */
                  for (guint k = 0; k < N_TRAIN && (guint64) seen_epoch * N_TRAIN >= from; k++)
                    if (seen[k] != 1)
                      g_error ("epoch %u: sample %u taken %u times", seen_epoch, k, seen[k]);
                  memset (seen, 0, N_TRAIN * sizeof (guint));
                  seen_epoch = (guint) (at / N_TRAIN);
                }
              if (++seen[got] > 1)
                g_error ("epoch %u: sample %u taken twice (step %" G_GUINT64_FORMAT ")",
                         seen_epoch, got, step);
            }
          taken += s->count;
        }
      if (in_step == 0)
        g_error ("no rank took a slice of step %" G_GUINT64_FORMAT, step);
      if (per_round > 0 && taken != per_round)
        g_error ("step %" G_GUINT64_FORMAT " took %" G_GUINT64_FORMAT " samples; an outer round "
                 "takes %u wherever the epoch ends", step, taken, per_round);
      if (round_from / N_TRAIN != (at - 1) / N_TRAIN)
        (*crossing_rounds)++;
    }
  return at;
}

/* No slice of a step outside @first..@last, and no node took one step twice. */
static void
assert_steps_within (GPtrArray *slices, guint64 first, guint64 last)
{
  for (guint i = 0; i < slices->len; i++)
    {
      Slice *s = g_ptr_array_index (slices, i);

      if (s->step < first || s->step > last)
        g_error ("%s took a slice of step %" G_GUINT64_FORMAT ", outside %" G_GUINT64_FORMAT
                 "..%" G_GUINT64_FORMAT, s->node, s->step, first, last);
      for (guint j = i + 1; j < slices->len; j++)
        {
          Slice *t = g_ptr_array_index (slices, j);
          if (t->step == s->step && g_strcmp0 (t->node, s->node) == 0)
            g_error ("%s took two slices of step %" G_GUINT64_FORMAT, s->node, s->step);
        }
    }
}

/* Of @slices, each step's of the last term that assigned it (what the
 * cohort committed after a failover); with @last_frame, of a rank that
 * took several slices of a step in that term only the last (the step was
 * assigned again). A view into @slices. */
static GPtrArray *
newest (GPtrArray *slices, gboolean last_frame)
{
  GPtrArray *kept = g_ptr_array_new ();

  for (guint i = 0; i < slices->len; i++)
    {
      Slice *s = g_ptr_array_index (slices, i);
      gboolean newest = TRUE;

      for (guint j = 0; j < slices->len && newest; j++)
        {
          Slice *t = g_ptr_array_index (slices, j);
          newest = !(t->step == s->step && t->term > s->term) &&
                   !(last_frame && t->step == s->step && t->term == s->term &&
                     g_strcmp0 (t->node, s->node) == 0 && t->seq > s->seq);
        }
      if (newest)
        g_ptr_array_add (kept, s);
    }
  return kept;
}

static GPtrArray *
newest_terms (GPtrArray *slices)
{
  return newest (slices, FALSE);
}

static GPtrArray *
newest_frames (GPtrArray *slices)
{
  return newest (slices, TRUE);
}

static char *
sample_dir (Harness *h, const char *name)
{
  char *dir = g_build_filename (h->dir, name, NULL);

  g_assert_cmpint (g_mkdir_with_parents (dir, 0700), ==, 0);
  harness_setenv (h, "RLX_TEST_SAMPLE_LOG", dir);
  return dir;
}

/* A harness whose ranks train on the N_TRAIN synthetic samples and note
 * their slices in its folder @name (*@dir). */
static Harness *
harness_with_samples (const char *name, char **dir)
{
  Harness *h = harness_new ();

  harness_setenv (h, "RLX_SYNTHETIC_TRAIN", G_STRINGIFY (N_TRAIN));
  *dir = sample_dir (h, name);
  return h;
}

/* A rank of @cohort that takes @steps outer:9 rounds at batch 8 with the
 * seed SEED, a deadline floor of SLOW_OK and no checkpoints; then ARGS…,
 * NULL-terminated. */
#define JOIN_OUTER(h, label, cohort, steps, ...)                                             \
  harness_join ((h), (label), "--cohort", (cohort), "--batch", "8", "--steps", (steps),     \
                "--seed", G_STRINGIFY (SEED), "--sync", "outer:9", "--deadline-floor-ms",   \
                SLOW_OK, "--checkpoint-every", "0", __VA_ARGS__)

/* @kept, the slices of the rounds 1..@last the cohort committed, are one
 * stream from the start, and at least two of those rounds ran over an
 * epoch's end; the samples they took. */
static guint64
assert_one_stream (GPtrArray *kept, guint64 last)
{
  guint crossing_slices, crossing_rounds;
  guint64 end;

  assert_steps_within (kept, 1, last);
  end = check_stream (kept, 1, last, 0, 0, &crossing_slices, &crossing_rounds);
  g_test_message ("%" G_GUINT64_FORMAT " samples in %" G_GUINT64_FORMAT " rounds; %u ran over "
                  "an epoch's end", end, last, crossing_rounds);
  g_assert_cmpuint (crossing_rounds, >=, 2);
  return end;
}

/* Three ranks, outer:9 at batch 8 (rounds of 216), 24 rounds: 5.2 epochs
 * of 1,000 samples, the epoch's end inside a round every 4 or 5 rounds. */
static void
test_coverage (void)
{
  g_autofree char *dir = NULL;
  Harness *h = harness_with_samples ("samples", &dir);
  g_autoptr(GPtrArray) slices = NULL;
  Node *n[3];
  guint crossing_slices, crossing_rounds;
  guint64 end;

  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *label = g_strdup_printf ("node%u", i);
      n[i] = JOIN_OUTER (h, label, "epochs", "24", "--wait-members", "3", NULL);
    }
  for (guint i = 0; i < 3; i++)
    harness_assert_exit_ok (h, n[i], 90000);
  harness_assert_outer_rounds (h, n, 3, 1, 24, 9, 3 * 8 * 9);
  slices = read_slices (dir);
  assert_steps_within (slices, 1, 24);
  end = check_stream (slices, 1, 24, 0, 3 * 8 * 9, &crossing_slices, &crossing_rounds);
  g_assert_cmpuint (end, ==, 24 * 3 * 8 * 9);
  g_test_message ("%u rounds and %u slices ran over an epoch's end", crossing_rounds,
                  crossing_slices);
  /* 5 epoch ends, each inside a round (216 does not divide 1,000) */
  g_assert_cmpuint (crossing_rounds, ==, 5);
  g_assert_cmpuint (crossing_slices, >=, 1);
  harness_free (h);
}

/* Rounds longer than an epoch (two ranks, outer:9 at batch 64: 1,152
 * samples a round, as eight ranks' rounds at H 150 are longer than
 * Fashion-MNIST's 60,000), every one running over an epoch's end. A
 * checkpoint is written after round 6 or so, while the next round runs
 * over the epoch's end; the ranks are killed, a new cohort resumes the
 * checkpoint of round R, and its round R + 1 begins where the first
 * cohort's did, so the state's history takes each sample once per epoch. */
#define CK_ROUND (2 * 64 * 9)

static void
test_checkpoint_across_epoch (void)
{
  g_autofree char *first_dir = NULL, *again_dir = NULL, *steps = NULL;
  Harness *h = harness_with_samples ("first", &first_dir);
  g_autoptr(GPtrArray) first_slices = NULL, again_slices = NULL, all = NULL;
  Node *first[2], *again[2], *founder;
  guint crossing_slices, crossing_rounds;
  guint64 resumed_at = 0, end;
  gint64 r;
  int e;

  for (guint i = 0; i < 2; i++)
    {
      g_autofree char *label = g_strdup_printf ("first%u", i);
      /* rounds of a few hundred ms (every inner step but the last 40 ms
       * longer): the kill lands long before round 12's checkpoint */
      first[i] = harness_join (h, label, "--cohort", "eck", "--batch", "64", "--steps", "1000",
                               "--wait-members", "2", "--seed", G_STRINGIFY (SEED),
                               "--sync", "outer:9", "--deadline-floor-ms", SLOW_OK,
                               "--checkpoint-every", "6", "--fault-inner-ms", "40", NULL);
    }
  for (guint i = 0; i < 2; i++)
    harness_wait_event (h, first[i], "joined", NULL, 0, 30000);
  founder = harness_leader (h, first, 2);
  harness_wait_event (h, founder, "checkpoint", "step", 6, 60000);
  /* the member first: the leader killed first would leave it to take
   * over, and a new leader writes a checkpoint of its own */
  node_kill (first[0] == founder ? first[1] : first[0], SIGKILL);
  node_kill (founder, SIGKILL);
  for (guint i = 0; i < 2; i++)
    g_assert_true (node_wait_exit (first[i], 30000));
  /* (the checkpoint asked for at round 6 holds the state its read found:
   * round 6's, or a round later when the worker applied one before it) */
  r = ev_int (node_ev (founder, harness_wait_event (h, founder, "checkpoint", "step", 6, 1)),
              "step");
  g_assert_cmpint (r, >=, 6);
  g_assert_cmpint (r, <, 12);

  again_dir = sample_dir (h, "again");
  steps = g_strdup_printf ("%" G_GINT64_FORMAT, r + 4);
  for (guint i = 0; i < 2; i++)
    {
      g_autofree char *label = g_strdup_printf ("again%u", i);
      again[i] = harness_join (h, label, "--cohort", "eck", "--batch", "64", "--steps", steps,
                               "--wait-members", "2", "--seed", G_STRINGIFY (SEED),
                               "--sync", "outer:9", "--deadline-floor-ms", SLOW_OK,
                               "--checkpoint-every", "0", NULL);
    }
  for (guint i = 0; i < 2; i++)
    harness_assert_exit_ok (h, again[i], 90000);
  e = node_find_event (again[0], "resumed", 0);
  founder = again[0];
  if (e < 0)
    e = node_find_event (again[1], "resumed", 0), founder = again[1];
  if (e < 0)
    {
      harness_dump (h);
      g_error ("no rank resumed the checkpoint");
    }
  g_assert_cmpint (ev_int (node_ev (founder, e), "step"), ==, r);
  harness_assert_outer_rounds (h, again, 2, r + 1, r + 4, 9, CK_ROUND);

  /* The first cohort's rounds 1..R, laid end to end from the start. */
  first_slices = read_slices (first_dir);
  end = check_stream (first_slices, 1, (guint64) r, 0, CK_ROUND, &crossing_slices,
                      &crossing_rounds);
  g_assert_cmpuint (end, ==, (guint64) r * CK_ROUND);
  g_assert_cmpuint (crossing_rounds, ==, (guint) r);
  g_assert_cmpuint (crossing_slices, >=, 1);
  /* Its round R + 1, in flight at the checkpoint, began there. */
  for (guint i = 0; i < first_slices->len; i++)
    {
      Slice *s = g_ptr_array_index (first_slices, i);
      if (s->step == (guint64) r + 1 && (resumed_at == 0 || s->at < resumed_at))
        resumed_at = s->at;
    }
  g_assert_cmpuint (resumed_at, ==, end);

  /* The resumed cohort's rounds R + 1..R + 4 go on from there; with the
   * first cohort's 1..R before them they are one stream, each sample once
   * per epoch. */
  again_slices = read_slices (again_dir);
  assert_steps_within (again_slices, (guint64) r + 1, (guint64) r + 4);
  all = g_ptr_array_new ();
  for (guint i = 0; i < first_slices->len; i++)
    if (((Slice *) g_ptr_array_index (first_slices, i))->step <= (guint64) r)
      g_ptr_array_add (all, g_ptr_array_index (first_slices, i));
  for (guint i = 0; i < again_slices->len; i++)
    g_ptr_array_add (all, g_ptr_array_index (again_slices, i));
  end = check_stream (all, 1, (guint64) r + 4, 0, CK_ROUND, &crossing_slices, &crossing_rounds);
  g_assert_cmpuint (end, ==, (guint64) (r + 4) * CK_ROUND);
  harness_free (h);
}

/* The leader of three ranks is killed (SIGKILL) mid-run; the survivors go
 * on in a new term from the last commit they hold. The rounds the cohort
 * committed — each step's slices of the last term that assigned it — are
 * one stream from the start: the new leader assigns the round that was in
 * flight again from where it began (every replica holds where round c + 1
 * begins after commit c), so no epoch misses its samples. */
static void
test_failover (void)
{
  g_autofree char *dir = NULL;
  Harness *h = harness_with_samples ("samples", &dir);
  g_autoptr(GPtrArray) slices = NULL, kept = NULL;
  Node *n[3], *rest[2];

  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *label = g_strdup_printf ("node%u", i);
      n[i] = harness_join (h, label, "--cohort", "efo", "--batch", "8", "--steps", "20",
                           "--wait-members", "3", "--seed", G_STRINGIFY (SEED),
                           "--sync", "outer:9", "--fault-slow-ms", "20",
                           "--checkpoint-every", "0", NULL);
    }
  harness_kill_leader_at (h, n, 8, 60000, 90000, rest);
  g_assert_cmpuint (harness_same_hashes (h, rest[0], rest[1], 1), ==, 20);

  slices = read_slices (dir);
  kept = newest_terms (slices);
  assert_one_stream (kept, 20);
  harness_free (h);
}

/* A rank that entered by snapshot takes over before its first round is
 * in. Rank a leads; m, a member whose inner steps are slow, holds every
 * round, so a's worker is idle and its snapshots are read at once. b joins
 * while a waits for m's round c + 1: b's snapshot is of commit c, and the
 * frame that assigned round c + 2 went out before b was a member. a and m
 * are killed (SIGKILL) as soon as b applied commit c + 1; b leads on alone
 * from c + 1 and assigns round c + 2, in flight when they died, again from
 * where it began — which only the frame of c + 1 told b (cepoch, cpos).
 * The rounds committed are one stream, each sample once per epoch. */
static void
test_joiner_takes_over (void)
{
  g_autofree char *dir = NULL;
  Harness *h = harness_with_samples ("samples", &dir);
  g_autoptr(GPtrArray) slices = NULL, kept = NULL;
  gint64 at, took;
  Node *n[2], *b;
  int e;

  n[0] = JOIN_OUTER (h, "a", "ejt", "60", "--node", "a", "--wait-members", "1",
                     "--fault-inner-ms", "20", NULL);
  harness_wait_event (h, n[0], "step", "step", 1, 60000);
  n[1] = JOIN_OUTER (h, "m", "ejt", "60", "--node", "m", "--fault-inner-ms", "100", NULL);
  at = ev_int (node_ev (n[1], harness_wait_event (h, n[1], "snapshot", NULL, 0, 60000)), "step");
  harness_wait_event (h, n[1], "step", "step", at + 2, 60000);
  b = JOIN_OUTER (h, "b", "ejt", "60", "--node", "b", NULL);
  at = ev_int (node_ev (b, harness_wait_event (h, b, "snapshot", NULL, 0, 60000)), "step");
  harness_wait_event (h, b, "step", "step", at + 1, 60000);
  node_kill (n[0], SIGKILL);
  node_kill (n[1], SIGKILL);
  harness_assert_exit_ok (h, b, 90000);
  for (guint i = 0; i < 2; i++)
    node_wait_exit (n[i], 5000);
  /* b took over at the commit it applied, before the next one */
  e = harness_wait_event (h, b, "leader", "term", 2, 1);
  took = ev_int (node_ev (b, e), "step");
  g_test_message ("b's snapshot was of round %" G_GINT64_FORMAT "; it took over at %"
                  G_GINT64_FORMAT, at, took);
  if (took != at + 1)
    g_test_incomplete ("the next commit reached b before the kill");
  g_assert_cmpint (node_max_step (b), ==, 60);

  slices = read_slices (dir);
  kept = newest_terms (slices);
  g_assert_cmpuint (assert_one_stream (kept, 60), >, 0);
  harness_free (h);
}

/* kill -9 of a member in the middle of an outer round. With overlap two of
 * its slots are out when it dies: the round being collected and the one
 * after it (assigned with the last commit). The cohort loses only its
 * contributions: both slots close as its link closes — no round waits for
 * it until the deadline (none is late; the deadline floor is 5 s) —, every
 * round commits exactly the samples of the slots of those who contributed
 * (each rank's slices as it logged them), the dead member's among them
 * only while it gave; the rounds assigned after it are the two survivors'
 * whole; θ agrees on them at every round and no momentum diverged. (The
 * member acknowledged commit k, the last before the kill, only after its
 * slice of k + 1 was out; the frame of k + 1 may still have assigned it
 * k + 3.) */
static void
test_kill_member (void)
{
  g_autofree char *dir = NULL;
  Harness *h = harness_with_samples ("samples", &dir);
  g_autoptr(GPtrArray) slices = NULL;
  Node *n[3], *leader, *victim, *other;
  guint crossing_slices, crossing_rounds, short_rounds = 0;
  gint64 killed_at;

  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *label = g_strdup_printf ("node%u", i);
      n[i] = JOIN_OUTER (h, label, "ekm", "16", "--wait-members", "3", "--fault-inner-ms", "30",
                         NULL);
    }
  for (guint i = 0; i < 3; i++)
    harness_wait_event (h, n[i], "joined", NULL, 0, 30000);
  leader = harness_leader (h, n, 3);
  harness_others (n, leader, &victim, &other);
  harness_wait_event (h, leader, "step", "step", 5, 60000);
  node_kill (victim, SIGKILL);
  killed_at = node_max_step (leader);
  harness_assert_exit_ok (h, leader, 90000);
  harness_assert_exit_ok (h, other, 90000);
  node_wait_exit (victim, 5000);
  g_assert_cmpuint (harness_same_hashes (h, leader, other, 1), ==, 16);
  harness_assert_led_by (n, 3, leader, 1);
  g_assert_cmpint (node_find_event (leader, "diverged", 0), <, 0);
  g_assert_cmpint (node_find_event (other, "diverged", 0), <, 0);

  /* The slices assigned are one stream: up to the last round whose frame
   * the member surely received (it acknowledged the commit that assigned
   * it), and from the first assigned without it. */
  slices = read_slices (dir);
  assert_steps_within (slices, 1, 16);
  check_stream (slices, 1, killed_at + 2, 0, 0, &crossing_slices, &crossing_rounds);
  {
    guint64 from = G_MAXUINT64;

    for (guint i = 0; i < slices->len; i++)
      {
        Slice *sl = g_ptr_array_index (slices, i);
        if ((gint64) sl->step == killed_at + 4)
          from = MIN (from, sl->at);
      }
    check_stream (slices, killed_at + 4, 16, from, 2 * 8 * 9, &crossing_slices,
                  &crossing_rounds);
  }
  for (gint64 s = 1; s <= 16; s++)
    {
      JsonObject *o = node_ev (leader, node_step (leader, s));
      gint64 contributors = ev_int (o, "contributors"), want = 0;
      gboolean victim_assigned = FALSE;

      if (ev_int (o, "late") != 0)
        {
          harness_dump (h);
          g_error ("round %" G_GINT64_FORMAT ": %" G_GINT64_FORMAT " slot(s) left to the "
                   "deadline (the dead member's)", s, ev_int (o, "late"));
        }
      g_assert_cmpint (contributors, >=, 2);
      for (guint i = 0; i < slices->len; i++)
        {
          Slice *sl = g_ptr_array_index (slices, i);

          if ((gint64) sl->step != s)
            continue;
          if (g_strcmp0 (sl->node, node_id (victim)) == 0)
            victim_assigned = TRUE;
          if (contributors == 3 || g_strcmp0 (sl->node, node_id (victim)) != 0)
            want += (gint64) sl->count;
        }
      if (ev_int (o, "samples") != want)
        {
          harness_dump (h);
          g_error ("round %" G_GINT64_FORMAT ": %" G_GINT64_FORMAT " samples committed, the "
                   "slots of its %" G_GINT64_FORMAT " contributors hold %" G_GINT64_FORMAT,
                   s, ev_int (o, "samples"), contributors, want);
        }
      if (contributors == 2 && victim_assigned)
        short_rounds++;
      if (s <= killed_at)
        g_assert_cmpint (contributors, ==, 3);
      if (s > killed_at + 3)
        g_assert_cmpint (contributors, ==, 2);
    }
  /* its slot of a round in flight at least was lost */
  g_test_message ("killed after round %" G_GINT64_FORMAT "; %u round(s) lost its share",
                  killed_at, short_rounds);
  g_assert_cmpuint (short_rounds, >=, 1);
  harness_free (h);
}

/* The leader commits round 8 to one member only and dies
 * (--fault-die-at): b, next in seniority, takes over one round behind c.
 * c hands b its state — θ, the momentum and where round 9 begins, all of
 * commit 8 — b adopts it and leads on from there: round 8 as c committed
 * it is kept, θ and the momentum agree on both at every round, and the
 * rounds committed are one stream, each sample once per epoch. Before the
 * adoption b restarts from its own round 7, assigning rounds 8 and 9 from
 * there; c, which holds 8, takes no slot of that 9 (the frame's base is not
 * its state), so b's round 9 after the adoption counts c's slice of its own
 * assignment, not one of b's stale one. */
static void
test_member_ahead_of_new_leader (void)
{
  g_autofree char *dir = NULL;
  Harness *h = harness_with_samples ("samples", &dir);
  g_autoptr(GPtrArray) slices = NULL, kept = NULL;
  Node *n[3];
  const char *name[3] = { "a", "b", "c" };
  int e = -1;

  /* a founds; b is admitted before c, so b takes over */
  for (guint i = 0; i < 3; i++)
    {
      n[i] = JOIN_OUTER (h, name[i], "eah", "24", "--node", name[i], "--wait-members", "3",
                         "--fault-inner-ms", "20", i == 0 ? "--fault-die-at" : NULL, "8", NULL);
      harness_wait_event (h, n[i], "joined", NULL, 0, 30000);
    }
  harness_assert_exit_ok (h, n[1], 90000);
  harness_assert_exit_ok (h, n[2], 90000);
  g_assert_true (node_wait_exit (n[0], 5000));
  g_assert_true (n[0]->signaled);

  /* c committed 8 from a, b adopted it from c */
  g_assert_cmpint (node_step (n[2], 8), >=, 0);
  for (guint i = 0; i < n[1]->events->len && e < 0; i++)
    {
      JsonObject *o = node_ev (n[1], i);
      if (g_strcmp0 (ev_str (o, "event"), "snapshot") == 0 &&
          g_strcmp0 (ev_str (o, "from"), node_id (n[2])) == 0)
        e = (int) i;
    }
  if (e < 0)
    {
      harness_dump (h);
      g_error ("the new leader did not adopt the state of the member ahead of it");
    }
  g_assert_cmpint (ev_int (node_ev (n[1], e), "step"), ==, 8);
  g_assert_cmpstr (ev_str (node_ev (n[1], e), "hash"), ==,
                   ev_str (node_ev (n[2], node_step (n[2], 8)), "hash"));
  /* (b took over at round 7, the last it had) */
  g_assert_cmpint (ev_int (node_ev (n[1], harness_wait_event (h, n[1], "leader", "term", 2, 1)),
                           "step"), ==, 7);
  /* θ and the momentum agree wherever both report a round */
  g_assert_cmpuint (harness_same_hashes (h, n[1], n[2], 1), >=, 20);
  for (gint64 s = 1; s <= 24; s++)
    {
      int eb = node_step (n[1], s), ec = node_step (n[2], s);
      if (eb >= 0 && ec >= 0 &&
          g_strcmp0 (ev_str (node_ev (n[1], eb), "outer_hash"),
                     ev_str (node_ev (n[2], ec), "outer_hash")) != 0)
        {
          harness_dump (h);
          g_error ("round %" G_GINT64_FORMAT ": the momentum differs", s);
        }
    }
  for (guint i = 1; i < 3; i++)
    g_assert_cmpint (node_find_event (n[i], "diverged", 0), <, 0);

  /* no bucket came too late (had c sent one of round 9 from b's stale
   * assignment, b would have taken it for the round's slot and dropped
   * c's right one as late) */
  g_assert_cmpint (ev_int (node_ev (n[1], harness_wait_event (h, n[1], "done", NULL, 0, 1)),
                           "late"), ==, 0);
  /* c computed each round of b's term once: not the round after its own
   * state as b assigned it from b's state before the adoption (b's own
   * slice of it was dropped with that round) */
  slices = read_slices (dir);
  for (guint i = 0; i < slices->len; i++)
    for (guint j = i + 1; j < slices->len; j++)
      {
        Slice *x = g_ptr_array_index (slices, i), *y = g_ptr_array_index (slices, j);

        if (x->term == 2 && y->term == 2 && x->step == y->step &&
            g_strcmp0 (x->node, node_id (n[2])) == 0 && g_strcmp0 (y->node, x->node) == 0)
          {
            harness_dump (h);
            g_error ("c computed two slices of round %" G_GUINT64_FORMAT " in term 2 (at %"
                     G_GUINT64_FORMAT " and %" G_GUINT64_FORMAT ")", x->step, x->at, y->at);
          }
      }
  /* The committed rounds: 1..8 as term 1 assigned them (b's restart of 8
   * was dropped with the adoption), then term 2's, each rank's last slice
   * of a round (b's own of 9 was assigned again after the adoption). */
  kept = newest_frames (slices);
  for (guint i = kept->len; i > 0; i--)
    {
      Slice *sl = g_ptr_array_index (kept, i - 1);
      if (sl->step <= 8)
        g_ptr_array_remove_index (kept, i - 1);
    }
  for (guint i = 0; i < slices->len; i++)
    {
      Slice *sl = g_ptr_array_index (slices, i);
      if (sl->step <= 8 && sl->term == 1)
        g_ptr_array_add (kept, sl);
    }
  assert_one_stream (kept, 24);
  harness_free (h);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/outer-epochs/coverage", test_coverage);
  g_test_add_func ("/outer-epochs/checkpoint-across-epoch", test_checkpoint_across_epoch);
  g_test_add_func ("/outer-epochs/failover", test_failover);
  g_test_add_func ("/outer-epochs/joiner-takes-over", test_joiner_takes_over);
  g_test_add_func ("/outer-epochs/kill-member", test_kill_member);
  g_test_add_func ("/outer-epochs/member-ahead-of-new-leader", test_member_ahead_of_new_leader);
  return g_test_run ();
}
