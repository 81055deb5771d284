/* test-commits.c — the leader's commits waiting for acknowledgements
 * (core/cohort/rlx-commits.h), over a cohort context whose owner is this
 * test: a commit is reported once every member acknowledged it, in order,
 * a member that left is not waited for, the last step checkpoints, and
 * each reported commit is offered for a checkpoint with its own step.
 */
#include "rlx-config.h"
#include "core/cohort/rlx-commits.h"

typedef struct {
  GObject          *owner;
  RlxCohortContext  ctx;
  RlxLeadership    *lead;
  RlxPeerSet       *peers;
  RlxRound         *round;
  RlxCommits       *commits;
  GArray           *reported;   /* guint64 steps, as ops->committed saw them */
  GArray           *checked;    /* guint64 steps, as ops->checkpoint saw them */
  guint             checkpoints, finals, timeouts;
  guint             agree;      /* as the last ops->committed saw it */
  GPtrArray        *diverged;   /* "node@step" of each "diverged" */
} Fixture;

static Fixture *current;

static void
op_emit (gpointer owner, RlxEvent *event)
{
  if (event->kind == RLX_EVENT_ACK_TIMEOUT)
    current->timeouts++;
  if (event->kind == RLX_EVENT_DIVERGED)
    {
      /* (outer hashes are step × 1000 + 1 in these tests) */
      g_assert_cmpuint (event->u.diverged.expected, ==,
                        event->u.diverged.step * 1000 + (event->u.diverged.outer ? 1 : 0));
      g_ptr_array_add (current->diverged, g_strdup_printf ("%s@%" G_GUINT64_FORMAT "%s",
                                                           event->u.diverged.node,
                                                           event->u.diverged.step,
                                                           event->u.diverged.outer ? "/outer"
                                                                                   : ""));
    }
  rlx_event_unref (event);
}

static void
op_committed (gpointer owner, guint64 step, guint64 hash, double loss, guint64 samples,
              GPtrArray *contributors, guint late, guint rejected, guint n_members, guint agree)
{
  g_assert_true (owner == current->owner);
  current->agree = agree;
  g_assert_cmpuint (hash, ==, step * 1000);
  g_array_append_val (current->reported, step);
}

static void
op_checkpoint (gpointer owner, guint64 step, gboolean final)
{
  g_array_append_val (current->checked, step);
  current->checkpoints++;
  current->finals += final ? 1 : 0;
}

static gboolean
op_finished (gpointer owner)
{
  return FALSE;
}

static void
fill_hello (RlxMsgHello *hello, gpointer user_data)
{
}

static const RlxCohortOps ops = {
  .emit = op_emit,
  .committed = op_committed,
  .checkpoint = op_checkpoint,
  .finished = op_finished,
};

static void
fixture_set_up (Fixture *f, gconstpointer data)
{
  RlxPeerSetIdentity me = { "leader", "c", "1", "mnist-mlp", "synthetic" };
  GPtrArray *members = g_ptr_array_new_with_free_func (g_free);

  current = f;
  f->owner = g_object_new (G_TYPE_OBJECT, NULL);
  f->lead = rlx_leadership_new ("leader");
  g_ptr_array_add (members, g_strdup ("leader"));
  g_ptr_array_add (members, g_strdup ("a"));
  g_ptr_array_add (members, g_strdup ("b"));
  rlx_leadership_set_members (f->lead, members);
  f->peers = rlx_peer_set_new (&me, fill_hello, NULL);
  rlx_peer_set_set_timeout (f->peers, 3000);
  f->round = rlx_round_new (10);
  f->ctx.node_id = "leader";
  f->ctx.lead = f->lead;
  f->ctx.peers = f->peers;
  f->ctx.ops = &ops;
  f->ctx.owner = f->owner;
  f->commits = rlx_commits_new (&f->ctx);
  f->reported = g_array_new (FALSE, FALSE, sizeof (guint64));
  f->checked = g_array_new (FALSE, FALSE, sizeof (guint64));
}

static void
fixture_tear_down (Fixture *f, gconstpointer data)
{
  rlx_commits_free (f->commits);
  g_array_unref (f->reported);
  g_array_unref (f->checked);
  g_object_unref (f->round);
  g_object_unref (f->peers);
  g_object_unref (f->lead);
  g_object_unref (f->owner);
  current = NULL;
}

static GPtrArray *
waiting_for (const char *a, const char *b)
{
  GPtrArray *w = g_ptr_array_new_with_free_func (g_free);

  if (a)
    g_ptr_array_add (w, g_strdup (a));
  if (b)
    g_ptr_array_add (w, g_strdup (b));
  return w;
}

static guint64
reported (Fixture *f, guint i)
{
  return g_array_index (f->reported, guint64, i);
}

/* Reported once both members acknowledged, oldest first; an
 * acknowledgement of a later step covers the earlier ones. */
static void
test_in_order (Fixture *f, gconstpointer data)
{
  rlx_commits_publish (f->commits, 1, 1000, 0, f->round, 3, FALSE, waiting_for ("a", "b"));
  rlx_commits_publish (f->commits, 2, 2000, 0, f->round, 3, FALSE, waiting_for ("a", "b"));
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->reported->len, ==, 0);

  rlx_commits_member_acked (f->commits, "a", 2, 2000, 0);
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->reported->len, ==, 0);

  rlx_commits_member_acked (f->commits, "b", 1, 1000, 0);
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->reported->len, ==, 1);
  g_assert_cmpuint (reported (f, 0), ==, 1);

  rlx_commits_member_acked (f->commits, "b", 2, 2000, 0);
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->reported->len, ==, 2);
  g_assert_cmpuint (reported (f, 1), ==, 2);
  g_assert_cmpuint (f->checkpoints, ==, 2);
  g_assert_cmpuint (f->finals, ==, 0);
  g_assert_cmpuint (f->timeouts, ==, 0);

  /* what each member acknowledged is kept */
  g_assert_true (rlx_commits_member (f->commits, "a")->known);
  g_assert_cmpuint (rlx_commits_member (f->commits, "a")->step, ==, 2);
  g_assert_false (rlx_commits_member (f->commits, "nobody")->known);
}

/* Each acknowledgement of a commit checks its hash: the step reports how
 * many ranks agree (the leader too), and one that differs is "diverged". */
static void
test_hash_agreement (Fixture *f, gconstpointer data)
{
  f->diverged = g_ptr_array_new_with_free_func (g_free);
  rlx_commits_publish (f->commits, 1, 1000, 0, f->round, 3, FALSE, waiting_for ("a", "b"));
  rlx_commits_publish (f->commits, 2, 2000, 0, f->round, 3, FALSE, waiting_for ("a", "b"));
  rlx_commits_member_acked (f->commits, "a", 1, 1000, 0);
  rlx_commits_member_acked (f->commits, "b", 1, 1000, 0);
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->reported->len, ==, 1);
  g_assert_cmpuint (f->agree, ==, 3);
  g_assert_cmpuint (f->diverged->len, ==, 0);

  rlx_commits_member_acked (f->commits, "a", 2, 2000, 0);
  rlx_commits_member_acked (f->commits, "b", 2, 2001, 0);
  /* the same acknowledgement again counts once */
  rlx_commits_member_acked (f->commits, "a", 2, 2000, 0);
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->reported->len, ==, 2);
  g_assert_cmpuint (f->agree, ==, 2);
  g_assert_cmpuint (f->diverged->len, ==, 1);
  g_assert_cmpstr (g_ptr_array_index (f->diverged, 0), ==, "b@2");
  g_clear_pointer (&f->diverged, g_ptr_array_unref);
}

/* After an outer round the outer hash (θ and the momentum) is checked too:
 * a member whose θ agrees but whose momentum does not is "diverged" (outer)
 * and not counted; one that sends no outer hash is only not checked; a θ
 * that differs is reported as θ's. */
static void
test_outer_hash_agreement (Fixture *f, gconstpointer data)
{
  f->diverged = g_ptr_array_new_with_free_func (g_free);
  rlx_commits_publish (f->commits, 1, 1000, 1001, f->round, 3, FALSE, waiting_for ("a", "b"));
  rlx_commits_member_acked (f->commits, "a", 1, 1000, 1001);
  rlx_commits_member_acked (f->commits, "b", 1, 1000, 1002);
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->reported->len, ==, 1);
  g_assert_cmpuint (f->agree, ==, 2);
  g_assert_cmpuint (f->diverged->len, ==, 1);
  g_assert_cmpstr (g_ptr_array_index (f->diverged, 0), ==, "b@1/outer");

  rlx_commits_publish (f->commits, 2, 2000, 2001, f->round, 3, FALSE, waiting_for ("a", "b"));
  rlx_commits_member_acked (f->commits, "a", 2, 2000, 0);
  rlx_commits_member_acked (f->commits, "b", 2, 2005, 2001);
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->reported->len, ==, 2);
  g_assert_cmpuint (f->agree, ==, 2);
  g_assert_cmpuint (f->diverged->len, ==, 2);
  g_assert_cmpstr (g_ptr_array_index (f->diverged, 1), ==, "b@2");
  g_clear_pointer (&f->diverged, g_ptr_array_unref);
}

/* A member that left is not waited for; the last step checkpoints as
 * final; clearing forgets what was not reported. */
static void
test_member_left_and_final (Fixture *f, gconstpointer data)
{
  rlx_commits_publish (f->commits, 1, 1000, 0, f->round, 3, TRUE, waiting_for ("a", "b"));
  rlx_commits_member_acked (f->commits, "a", 1, 1000, 0);
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->reported->len, ==, 0);

  g_assert_true (rlx_leadership_remove_member (f->lead, "b"));
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->reported->len, ==, 1);
  g_assert_cmpuint (f->finals, ==, 1);
  g_assert_cmpuint (f->timeouts, ==, 0);

  rlx_commits_publish (f->commits, 2, 2000, 0, f->round, 2, FALSE, waiting_for ("a", NULL));
  rlx_commits_clear (f->commits);
  rlx_commits_member_acked (f->commits, "a", 2, 2000, 0);
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->reported->len, ==, 1);
}

/* Past 64 commits waiting, the oldest is reported without the member that
 * never acknowledged ("ack-timeout"). */
static void
test_too_many_waiting (Fixture *f, gconstpointer data)
{
  for (guint64 step = 1; step <= 65; step++)
    rlx_commits_publish (f->commits, step, step * 1000, 0, f->round, 3, FALSE,
                         waiting_for ("a", NULL));
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->reported->len, ==, 1);
  g_assert_cmpuint (reported (f, 0), ==, 1);
  g_assert_cmpuint (f->timeouts, ==, 1);
}

/* A member that stays silent is reported once for the stretch, not at
 * every commit reported without it, and again after it was heard from. */
static void
test_timeout_once_a_silence (Fixture *f, gconstpointer data)
{
  guint64 step;

  for (step = 1; step <= 65; step++)
    rlx_commits_publish (f->commits, step, step * 1000, 0, f->round, 3, FALSE,
                         waiting_for ("a", "b"));
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->timeouts, ==, 2);
  /* b answers (every commit up to 70), a stays silent: five more commits
   * go without a, and nobody is reported again */
  for (; step <= 70; step++)
    rlx_commits_publish (f->commits, step, step * 1000, 0, f->round, 3, FALSE,
                         waiting_for ("a", "b"));
  rlx_commits_member_acked (f->commits, "b", 70, 70000, 0);
  rlx_commits_check (f->commits);
  g_assert_cmpuint (reported (f, f->reported->len - 1), ==, 6);
  g_assert_cmpuint (f->timeouts, ==, 2);
  /* a is heard (it acknowledges step 70), then falls silent again */
  rlx_commits_member_acked (f->commits, "a", 70, 70000, 0);
  rlx_commits_check (f->commits);
  for (; step <= 135; step++)
    rlx_commits_publish (f->commits, step, step * 1000, 0, f->round, 3, FALSE,
                         waiting_for ("a", NULL));
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->timeouts, ==, 3);
}

/* Commits reported together (one acknowledgement covers several) are
 * each offered for a checkpoint with their own step, once: the owner
 * decides by them whether one is due (every K reported steps), not by the
 * step its replica holds by then, the same for all of them. */
static void
test_checkpoint_each_step (Fixture *f, gconstpointer data)
{
  for (guint64 step = 1; step <= 6; step++)
    rlx_commits_publish (f->commits, step, step * 1000, 0, f->round, 3, step == 6,
                         waiting_for ("a", "b"));
  rlx_commits_member_acked (f->commits, "a", 6, 6000, 0);
  rlx_commits_member_acked (f->commits, "b", 6, 6000, 0);
  rlx_commits_check (f->commits);
  g_assert_cmpuint (f->reported->len, ==, 6);
  g_assert_cmpuint (f->checked->len, ==, 6);
  for (guint i = 0; i < 6; i++)
    {
      g_assert_cmpuint (g_array_index (f->checked, guint64, i), ==, i + 1);
      g_assert_cmpuint (reported (f, i), ==, i + 1);
    }
  g_assert_cmpuint (f->finals, ==, 1);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add ("/cohort/commits/in-order", Fixture, NULL, fixture_set_up, test_in_order,
              fixture_tear_down);
  g_test_add ("/cohort/commits/member-left-and-final", Fixture, NULL, fixture_set_up,
              test_member_left_and_final, fixture_tear_down);
  g_test_add ("/cohort/commits/hash-agreement", Fixture, NULL, fixture_set_up,
              test_hash_agreement, fixture_tear_down);
  g_test_add ("/cohort/commits/outer-hash-agreement", Fixture, NULL, fixture_set_up,
              test_outer_hash_agreement, fixture_tear_down);
  g_test_add ("/cohort/commits/too-many-waiting", Fixture, NULL, fixture_set_up,
              test_too_many_waiting, fixture_tear_down);
  g_test_add ("/cohort/commits/timeout-once-a-silence", Fixture, NULL, fixture_set_up,
              test_timeout_once_a_silence, fixture_tear_down);
  g_test_add ("/cohort/commits/checkpoint-each-step", Fixture, NULL, fixture_set_up,
              test_checkpoint_each_step, fixture_tear_down);
  return g_test_run ();
}
