/* test-engine.c — the cohort engine's parts on their own: the protocol's
 * rules (successor, founder, merge), the roster model's in-place updates,
 * the messages' parse/build, the replica's hash history.
 */
#include "rlx-config.h"
#include "core/cohort/rlx-checkpointer.h"
#include "core/cohort/rlx-leadership.h"
#include "core/cohort/rlx-msg.h"
#include "core/cohort/rlx-norm-guard.h"
#include "core/wire/rlx-wire.h"
#include "core/cohort/rlx-replica.h"
#include "core/cohort/rlx-roster.h"
#include "core/rlx-coordinator.h"   /* RLX_COORDINATOR_ERROR */
#include "core/rlx-worker.h"

#include "core/rlx-safetensors.h"
#include "core/vision/rlx-dataset.h"
#include "core/vision/rlx-model.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static gboolean
alive_except_a (const char *id, gpointer data)
{
  return strcmp (id, "a") != 0;
}

static GPtrArray *
ids (const char *first, ...)
{
  GPtrArray *a = g_ptr_array_new_with_free_func (g_free);
  va_list ap;

  va_start (ap, first);
  for (const char *s = first; s; s = va_arg (ap, const char *))
    g_ptr_array_add (a, g_strdup (s));
  va_end (ap);
  return a;
}

/* Seniority is admission order: the first reachable member leads, however
 * the ids sort. */
static void
test_successor (void)
{
  g_autoptr(RlxLeadership) l = rlx_leadership_new ("c");

  rlx_leadership_set_members (l, ids ("a", "z", "c", "b", NULL));
  g_assert_cmpstr (rlx_leadership_successor (l, alive_except_a, NULL), ==, "z");
  g_assert_true (rlx_leadership_add_member (l, "y"));
  g_assert_false (rlx_leadership_add_member (l, "y"));
  g_assert_cmpstr (g_ptr_array_index (rlx_leadership_get_members (l), 4), ==, "y");
  g_assert_true (rlx_leadership_remove_member (l, "z"));
  g_assert_cmpstr (rlx_leadership_successor (l, alive_except_a, NULL), ==, "c");
  g_assert_cmpuint (rlx_leadership_set (l, RLX_ROLE_LEADER, "c", 2), ==, 7);
  g_assert_cmpuint (rlx_leadership_set (l, RLX_ROLE_LEADER, "c", 2), ==, 0);
  g_assert_cmpuint (rlx_leadership_set (l, RLX_ROLE_LEADER, "c", 3), ==, 4);
}

/* The newest checkpoint founds, then the smaller id; join-only never does. */
static void
test_founder (void)
{
  RlxFounderCandidate c[] = {
    { "m", 0, FALSE }, { "b", 0, FALSE }, { "x", 40, FALSE }, { "a", 90, TRUE },
  };

  g_assert_cmpint (rlx_leadership_pick_founder (c, 2), ==, 1);
  g_assert_cmpint (rlx_leadership_pick_founder (c, 3), ==, 2);
  g_assert_cmpint (rlx_leadership_pick_founder (c, 4), ==, 2);
  g_assert_cmpint (rlx_leadership_pick_founder (&c[3], 1), ==, -1);
  g_assert_cmpint (rlx_leadership_pick_founder (c, 0), ==, -1);
}

/* More members, then (between forks of one lineage) the older fork that
 * holds steps past the newer one's start, then more committed steps, then
 * the smaller leader id; both sides of a merge reach the same verdict. */
static void
test_merge_rule (void)
{
  RlxGroupInfo big = { "q", 3, 10 }, small = { "a", 2, 500 };
  RlxGroupInfo ahead = { "z", 2, 501 }, tie = { "b", 2, 500 };

  g_assert_cmpint (rlx_leadership_merge_compare (&big, &small), >, 0);
  g_assert_cmpint (rlx_leadership_merge_compare (&small, &big), <, 0);
  g_assert_cmpstr (rlx_leadership_merge_reason (&big, &small), ==, "more members");
  g_assert_cmpint (rlx_leadership_merge_compare (&ahead, &small), >, 0);
  g_assert_cmpint (rlx_leadership_merge_compare (&small, &ahead), <, 0);
  g_assert_cmpstr (rlx_leadership_merge_reason (&small, &ahead), ==, "more committed steps");
  g_assert_cmpint (rlx_leadership_merge_compare (&small, &tie), >, 0);
  g_assert_cmpint (rlx_leadership_merge_compare (&tie, &small), <, 0);
  g_assert_cmpstr (rlx_leadership_merge_reason (&tie, &small), ==, "smaller leader id");
  /* Between two forks of one lineage, on a tie of members: the older fork
   * when it holds steps past where the newer began (a resume never
   * outranks the lineage's newer committed steps), whatever the step
   * counts; else the steps decide (docs/PROTOCOL.md, "Lineages") */
  {
    RlxGroupInfo live = { "q", 1, 900, { 7, 1, 0 } }, resumed = { "a", 1, 5000, { 7, 2, 600 } };
    RlxGroupInfo stale = { "q", 1, 500, { 7, 1, 0 } }, other = { "q", 1, 900, { 8, 1, 0 } };
    RlxGroupInfo more = { "b", 2, 10, { 7, 2, 600 } };

    g_assert_cmpint (rlx_leadership_merge_compare (&live, &resumed), >, 0);
    g_assert_cmpint (rlx_leadership_merge_compare (&resumed, &live), <, 0);
    g_assert_cmpstr (rlx_leadership_merge_reason (&resumed, &live), ==,
                     "committed steps past where the other's fork began");
    /* nothing past the newer fork's base: the steps */
    g_assert_cmpint (rlx_leadership_merge_compare (&stale, &resumed), <, 0);
    g_assert_cmpstr (rlx_leadership_merge_reason (&stale, &resumed), ==, "more committed steps");
    /* another lineage: the steps */
    g_assert_cmpint (rlx_leadership_merge_compare (&other, &resumed), <, 0);
    /* members first */
    g_assert_cmpint (rlx_leadership_merge_compare (&more, &live), >, 0);
  }
  /* A claim counts only as far as it can be checked (issue 29, item 9):
   * members up to those seen, steps (with a follower) up to twice what a
   * follower holds plus the slack; a group of one keeps its own word. */
  {
    RlxGroupInfo liar = { "z", 256, 100000000 };
    RlxGroupInfo c = rlx_leadership_check_claim (&liar, 1, 0);
    g_assert_cmpuint (c.members, ==, 1);
    g_assert_cmpuint (c.step, ==, 100000000);
    c = rlx_leadership_check_claim (&liar, 3, 50);
    g_assert_cmpuint (c.members, ==, 3);
    g_assert_cmpuint (c.step, ==, 100 + RLX_CLAIM_STEP_SLACK);
    c = rlx_leadership_check_claim (&small, 5, 1000000);
    g_assert_cmpuint (c.members, ==, small.members);
    g_assert_cmpuint (c.step, ==, small.step);
  }
}

typedef struct {
  guint position, removed, added, calls;
} Changes;

static void
on_items_changed (GListModel *m, guint position, guint removed, guint added, Changes *c)
{
  c->position = position;
  c->removed = removed;
  c->added = added;
  c->calls++;
}

static void
on_notify (GObject *o, GParamSpec *pspec, guint *count)
{
  (*count)++;
}

/* Rows keep their objects while their node is in the cohort; changes are
 * the smallest splice; properties notify only when they change. */
static void
test_roster (void)
{
  g_autoptr(RlxRoster) r = rlx_roster_new ();
  RlxRosterRow rows[3] = {
    { .node_id = "a", .host = "h", .state = "computing", .is_leader = TRUE },
    { .node_id = "b", .host = "h", .state = "computing" },
    { .node_id = "c", .host = "h", .state = "computing", .is_self = TRUE },
  };
  Changes c = { 0 };
  g_autoptr(RlxRosterEntry) b = NULL, b2 = NULL;
  guint speed_notes = 0;

  g_signal_connect (r, "items-changed", G_CALLBACK (on_items_changed), &c);
  rlx_roster_sync (r, rows, 3);
  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (r)), ==, 3);
  g_assert_true (g_list_model_get_item_type (G_LIST_MODEL (r)) == RLX_TYPE_ROSTER_ENTRY);
  g_assert_cmpuint (c.removed, ==, 0);
  g_assert_cmpuint (c.added, ==, 3);
  b = g_list_model_get_item (G_LIST_MODEL (r), 1);
  g_assert_cmpuint (rlx_roster_entry_get_rank (b), ==, 1);
  g_signal_connect (b, "notify::speed", G_CALLBACK (on_notify), &speed_notes);

  /* The same rows again: nothing changes. */
  rlx_roster_sync (r, rows, 3);
  g_assert_cmpuint (c.calls, ==, 1);

  /* "a" leaves: one row removed at the top, "b" keeps its object and
   * becomes rank 0 and the leader. */
  rows[1].is_leader = TRUE;
  rlx_roster_sync (r, &rows[1], 2);
  g_assert_cmpuint (c.calls, ==, 2);
  g_assert_cmpuint (c.position, ==, 0);
  g_assert_cmpuint (c.removed, ==, 1);
  g_assert_cmpuint (c.added, ==, 0);
  b2 = g_list_model_get_item (G_LIST_MODEL (r), 0);
  g_assert_true (b == b2);
  g_assert_cmpuint (rlx_roster_entry_get_rank (b), ==, 0);
  g_assert_true (rlx_roster_entry_get_is_leader (b));

  rlx_roster_set_speed (r, "b", 1234.0);
  rlx_roster_set_speed (r, "b", 1234.0);
  g_assert_cmpuint (speed_notes, ==, 1);
  g_assert_cmpfloat (rlx_roster_entry_get_speed (b), ==, 1234.0);
  rlx_roster_set_state (r, "b", "stalled");
  g_assert_cmpstr (rlx_roster_entry_get_state (b), ==, "stalled");

  /* the measured link to a rank (--sync auto), notified when it changes */
  {
    guint link_notes = 0;

    g_signal_connect (b, "notify::link", G_CALLBACK (on_notify), &link_notes);
    rows[1].link = "25 MB/s, 53 ms";
    rlx_roster_sync (r, &rows[1], 2);
    rlx_roster_sync (r, &rows[1], 2);
    g_assert_cmpstr (rlx_roster_entry_get_link (b), ==, "25 MB/s, 53 ms");
    g_assert_cmpuint (link_notes, ==, 1);
  }
}

/* Every kind survives build → parse with its fields; a step's assignment
 * and a snapshot's history too. */
static void
test_msg_round_trip (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) frame = NULL;
  float values[5] = { 1, -2, 0.5f, 3, 0 };
  RlxMsg m, back;
  RlxMsgSlot slot = { g_strdup ("b"), 16, 8 };
  guint64 h1 = 0x0123456789abcdefULL, h2 = 42;

  rlx_msg_init (&m, RLX_MSG_STEP, "a");
  m.u.step.term = 3;
  m.u.step.step = 11;
  m.u.step.commit = 10;
  m.u.step.base = h1;
  m.u.step.loss = 1.25;
  m.u.step.samples = 24;
  m.u.step.contributors = ids ("a", "b", NULL);
  m.u.step.lr = 0.05;
  m.u.step.pos = 16;
  m.u.step.count = 24;
  m.u.step.members = ids ("a", "b", "c", NULL);
  m.u.step.assign = rlx_msg_slots_new ();
  g_array_append_val (m.u.step.assign, slot);
  frame = rlx_msg_build (&m, values, 5, RLX_PRECISION_F8E4M3, &error);
  g_assert_no_error (error);
  rlx_msg_clear (&m);
  g_assert_true (rlx_msg_parse (frame, NULL, &back, &error));
  g_assert_no_error (error);
  g_assert_cmpint (back.kind, ==, RLX_MSG_STEP);
  g_assert_cmpstr (back.node, ==, "a");
  g_assert_cmpuint (back.u.step.term, ==, 3);
  g_assert_cmpuint (back.u.step.commit, ==, 10);
  g_assert_cmpuint (back.u.step.base, ==, h1);
  g_assert_cmpuint (back.u.step.members->len, ==, 3);
  g_assert_cmpuint (back.u.step.assign->len, ==, 1);
  g_assert_cmpstr (g_array_index (back.u.step.assign, RlxMsgSlot, 0).node, ==, "b");
  g_assert_cmpuint (g_array_index (back.u.step.assign, RlxMsgSlot, 0).start, ==, 16);
  g_assert_cmpuint (back.u.step.update.n, ==, 5);
  g_assert_cmpint (back.u.step.update.precision, ==, RLX_PRECISION_F8E4M3);
  rlx_msg_clear (&back);
  g_clear_pointer (&frame, g_bytes_unref);

  rlx_msg_init (&m, RLX_MSG_SNAPSHOT, "a");
  m.u.snapshot.term = 1;
  m.u.snapshot.leader = g_strdup ("a");
  m.u.snapshot.step = 7;
  m.u.snapshot.hash = h2;
  m.u.snapshot.seed = g_strdup ("9");
  m.u.snapshot.members = ids ("a", NULL);
  m.u.snapshot.hashes_from = 5;
  m.u.snapshot.hashes = g_array_new (FALSE, FALSE, sizeof (guint64));
  g_array_append_val (m.u.snapshot.hashes, h1);
  g_array_append_val (m.u.snapshot.hashes, h2);
  /* (the sparse hashes further back: of step 5 − 64 here) */
  m.u.snapshot.sparse = g_array_new (FALSE, FALSE, sizeof (guint64));
  g_array_append_val (m.u.snapshot.sparse, h2);
  frame = rlx_msg_build (&m, values, 5, RLX_PRECISION_F32, &error);
  rlx_msg_clear (&m);
  g_assert_true (rlx_msg_parse (frame, NULL, &back, &error));
  g_assert_cmpuint (back.u.snapshot.hashes_from, ==, 5);
  g_assert_cmpuint (back.u.snapshot.hashes->len, ==, 2);
  g_assert_cmpuint (g_array_index (back.u.snapshot.hashes, guint64, 0), ==, h1);
  g_assert_cmpuint (back.u.snapshot.sparse->len, ==, 1);
  g_assert_cmpuint (g_array_index (back.u.snapshot.sparse, guint64, 0), ==, h2);
  g_assert_nonnull (rlx_msg_array_f32 (&back.u.snapshot.params));
  g_assert_cmpmem (rlx_msg_array_f32 (&back.u.snapshot.params), sizeof values, values, sizeof values);
  rlx_msg_clear (&back);
}

/* What the parser refuses, and says. */
static void
test_msg_refusals (void)
{
  static const struct { const char *json; const char *word; } bad[] = {
    { "{\"node\":\"a\"}", "kind" },
    { "{\"t\":\"nope\",\"node\":\"a\"}", "unknown message kind" },
    { "{\"t\":\"ack\",\"node\":\"a\",\"term\":1,\"step\":2}", "\"hash\" is missing" },
    { "{\"t\":\"ack\",\"node\":\"a\",\"term\":-1,\"step\":2,\"hash\":\"0000000000000000\"}", "outside" },
    { "{\"t\":\"ack\",\"node\":\"a\",\"term\":1,\"step\":2,\"hash\":\"00000000000000GG\"}", "hex" },
    { "{\"t\":\"step\",\"node\":\"a\",\"term\":1,\"step\":2,\"commit\":1,\"base\":\"0000000000000000\","
      "\"loss\":0,\"samples\":0,\"contributors\":[],\"late\":0,\"rejected\":0,\"lr\":0.1,\"epoch\":0,"
      "\"pos\":0,\"count\":0,\"members\":[\"a\",\"a\"],\"assign\":{}}", "twice" },
    { "{\"t\":\"step\",\"node\":\"a\",\"term\":1,\"step\":2,\"commit\":1,\"base\":\"0000000000000000\","
      "\"loss\":0,\"samples\":0,\"contributors\":[],\"late\":0,\"rejected\":0,\"lr\":0.1,\"epoch\":0,"
      "\"pos\":0,\"count\":0,\"members\":[\"a\"],\"assign\":{}}", "without its update" },
    { "{\"t\":\"grad\",\"node\":\"a\",\"term\":1,\"step\":2,\"samples\":3,\"loss\":1}", "bucket" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(JsonObject) h = rlx_wire_header_parse (bad[i].json, -1, &error);
      g_autoptr(GBytes) frame = NULL;
      RlxMsg m;

      g_assert_no_error (error);
      frame = rlx_wire_encode (h, NULL, 0, RLX_PRECISION_F32, NULL, &error);
      g_assert_no_error (error);
      g_assert_false (rlx_msg_parse (frame, NULL, &m, &error));
      g_assert_true (error->domain == RLX_MSG_ERROR);
      if (strstr (error->message, bad[i].word) == NULL)
        g_error ("%s: '%s' does not say '%s'", bad[i].json, error->message, bad[i].word);
      g_assert_null (m.node);
    }
}

static void
on_applied (RlxReplica *r, gboolean ok, gpointer data)
{
  *(guint *) data += ok ? 1 : 100;
}

static void
wait_replica (RlxReplica *r, RlxWorker *w)
{
  gint64 end = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;

  while ((rlx_replica_busy (r) || rlx_worker_busy (w)) && g_get_monotonic_time () < end)
    g_main_context_iteration (NULL, TRUE);
  g_assert_false (rlx_replica_busy (r));
}

typedef struct {
  RlxMsgArray update;
  guint64     hash;
} Apply;

static void
apply_free (gpointer p)
{
  rlx_msg_array_clear (&((Apply *) p)->update);
  g_free (p);
}

/* what a member's step does on the worker: apply the commit, hash */
static gboolean
apply_run (RlxBackend *backend, gpointer data, GError **error)
{
  Apply *a = data;

  return rlx_backend_apply_update (backend, a->update.codes, a->update.n, a->update.precision,
                                   a->update.scale, error) &&
         rlx_backend_params_hash (backend, &a->hash, error);
}

typedef struct {
  RlxReplica *r;
  guint64     step;
} Commit;

static void
apply_done (RlxWorker *w, gpointer data, const GError *error, gpointer user_data)
{
  Commit *c = user_data;

  g_assert_no_error ((GError *) error);
  rlx_replica_commit (c->r, c->step, ((Apply *) data)->hash, 0, (guint) c->step * 8);
  g_free (c);
}

/* The replica's state follows the commits its backend applies; its
 * parameters are read from the backend (after what was queued before),
 * loaded with a hash check, corrupted on purpose; it remembers the hash of
 * each step and finds where two histories part. */
static void
test_replica_history (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxDataset) dataset = rlx_dataset_open ("synthetic", 0, &error);
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_MLP);
  RlxBackend *backend = rlx_backend_resolve ("cpu", model, dataset, 8, &error);
  RlxWorker *w = rlx_worker_new (backend);
  RlxReplica *r = rlx_replica_new (w, 0);
  gsize n = model->n_params;
  g_autofree float *ref = g_new (float, n);
  g_autofree float *u = g_new (float, n);
  g_autoptr(GArray) mine = NULL, other = NULL;
  g_autoptr(GBytes) snap = NULL;
  RlxMsg snapshot;
  guint done = 0;
  guint64 from = 0, h;

  rlx_model_init_params (model, 0, ref);
  g_assert_null (rlx_replica_get_params (r));
  g_assert_cmpuint (rlx_replica_get_hash (r), ==, rlx_params_hash (ref, n));
  for (guint s = 1; s <= 5; s++)
    {
      g_autoptr(GBytes) frame = NULL;
      Apply *a = g_new0 (Apply, 1);
      Commit *c = g_new0 (Commit, 1);
      RlxMsg m, back;

      for (gsize i = 0; i < n; i++)
        u[i] = 1e-3f * (float) ((i * s) % 7) - 2e-3f;
      rlx_msg_init (&m, RLX_MSG_STEP, "a");
      m.u.step.step = s + 1;
      m.u.step.commit = s;
      m.u.step.contributors = ids (NULL);
      m.u.step.members = ids ("a", NULL);
      m.u.step.assign = rlx_msg_slots_new ();
      frame = rlx_msg_build (&m, u, n, RLX_PRECISION_F16, &error);
      rlx_msg_clear (&m);
      g_assert_true (rlx_msg_parse (frame, NULL, &back, &error));
      rlx_msg_array_copy (&a->update, &back.u.step.update);
      c->r = r;
      c->step = s;
      rlx_worker_queue (w, apply_run, apply_done, a, apply_free, c);
      /* the reference: decode, subtract */
      rlx_msg_array_decode (&back.u.step.update, u);
      for (gsize i = 0; i < n; i++)
        ref[i] -= u[i];
      rlx_msg_clear (&back);
    }
  /* a read after the applies sees all of them */
  rlx_replica_read (r, NULL, NULL, NULL, on_applied, &done);
  wait_replica (r, w);
  g_assert_cmpuint (done, ==, 1);
  g_assert_cmpuint (rlx_replica_get_step (r), ==, 5);
  g_assert_cmpuint (rlx_replica_get_pos (r), ==, 40);
  g_assert_cmpuint (rlx_replica_get_params_step (r), ==, 5);
  g_assert_cmpmem (rlx_replica_get_params (r), n * sizeof (float), ref, n * sizeof (float));
  g_assert_cmpuint (rlx_replica_get_hash (r), ==, rlx_params_hash (ref, n));
  g_assert_true (rlx_replica_hash_at (r, 5, &h));
  g_assert_cmpuint (h, ==, rlx_params_hash (ref, n));
  g_assert_true (rlx_replica_hash_at (r, 0, &h));
  g_assert_false (rlx_replica_hash_at (r, 6, &h));

  /* Another history equal up to step 3, then apart. */
  mine = rlx_replica_history (r, &from);
  g_assert_cmpuint (from, ==, 0);
  g_assert_cmpuint (mine->len, ==, 6);
  other = g_array_copy (mine);
  g_array_index (other, guint64, 4) ^= 1;
  g_array_index (other, guint64, 5) ^= 1;
  g_assert_cmpint (rlx_replica_common_step (r, 0, other), ==, 3);
  g_assert_cmpint (rlx_replica_common_step (r, 0, mine), ==, 5);
  g_array_remove_range (other, 0, 2);   /* steps 2…5 of the other */
  g_assert_cmpint (rlx_replica_common_step (r, 2, other), ==, 3);
  g_array_index (other, guint64, 0) ^= 1;
  g_array_index (other, guint64, 1) ^= 1;
  g_assert_cmpint (rlx_replica_common_step (r, 2, other), ==, -1);

  /* A snapshot whose parameters do not hash to what it says changes
   * nothing; the right one replaces the state. */
  rlx_model_init_params (model, 9, u);
  rlx_msg_init (&snapshot, RLX_MSG_SNAPSHOT, "a");
  snapshot.u.snapshot.leader = g_strdup ("a");
  snapshot.u.snapshot.seed = g_strdup ("9");
  snapshot.u.snapshot.members = ids ("a", NULL);
  snap = rlx_msg_build (&snapshot, u, n, RLX_PRECISION_F32, &error);
  g_assert_no_error (error);
  rlx_msg_clear (&snapshot);
  g_assert_true (rlx_msg_parse (snap, NULL, &snapshot, &error));
  rlx_replica_load (r, 20, &snapshot.u.snapshot.params, rlx_params_hash (u, n) ^ 1, 0, 0,
                    on_applied, &done);
  wait_replica (r, w);
  g_assert_cmpuint (done, ==, 101);
  g_assert_cmpuint (rlx_replica_get_step (r), ==, 5);
  rlx_replica_load (r, 20, &snapshot.u.snapshot.params, rlx_params_hash (u, n), 0, 16,
                    on_applied, &done);
  rlx_replica_read (r, NULL, NULL, NULL, on_applied, &done);
  wait_replica (r, w);
  g_assert_cmpuint (done, ==, 103);
  g_assert_cmpuint (rlx_replica_get_step (r), ==, 20);
  g_assert_cmpuint (rlx_replica_get_pos (r), ==, 16);
  g_assert_cmpuint (rlx_replica_get_hash (r), ==, rlx_params_hash (u, n));
  g_assert_cmpmem (rlx_replica_get_params (r), n * sizeof (float), u, n * sizeof (float));

  /* The test switch: one bit, a new hash. */
  rlx_replica_corrupt (r, on_applied, &done);
  wait_replica (r, w);
  g_assert_cmpuint (done, ==, 104);
  g_assert_cmpuint (rlx_replica_get_hash (r), !=, rlx_params_hash (u, n));
  g_assert_cmpuint (rlx_replica_get_step (r), ==, 20);

  /* A cancelled operation calls nobody and changes nothing. */
  rlx_replica_load (r, 30, &snapshot.u.snapshot.params, rlx_params_hash (u, n), 0, 0,
                    on_applied, &done);
  rlx_replica_cancel (r);
  wait_replica (r, w);
  g_assert_cmpuint (done, ==, 104);
  g_assert_cmpuint (rlx_replica_get_step (r), ==, 20);

  /* A snapshot loaded keeps our hashes up to where its history and ours
   * agree (step 23), then has its own (24), a gap, and its step (40): a
   * node that caught up from a state of its own lineage still knows the
   * steps before it (issue 29, item 13). A window of hashes never spans
   * the gap. */
  for (guint64 st = 21; st <= 25; st++)
    rlx_replica_commit (r, st, 1000 + st, 0, 0);
  {
    RlxMsgSnapshot *ss = &snapshot.u.snapshot;
    g_autoptr(GArray) win = NULL;
    guint64 want[] = { 1022, 1023, 7024 };
    gint64 sparse_common;

    ss->step = 40;
    ss->hash = rlx_params_hash (u, n);
    ss->hashes_from = 22;
    ss->hashes = g_array_new (FALSE, FALSE, sizeof (guint64));
    g_array_append_vals (ss->hashes, want, 3);
    g_assert_cmpint (rlx_replica_agrees_until (r, ss, &sparse_common), ==, 23);
    g_assert_cmpint (sparse_common, ==, -1);
    rlx_replica_load_snapshot (r, ss, 23, on_applied, &done);
    wait_replica (r, w);
    g_assert_cmpuint (done, ==, 105);
    g_assert_cmpuint (rlx_replica_get_step (r), ==, 40);
    g_assert_cmpuint (rlx_replica_history_start (r), ==, 20);
    g_assert_true (rlx_replica_hash_at (r, 21, &h));
    g_assert_cmpuint (h, ==, 1021);
    g_assert_true (rlx_replica_hash_at (r, 24, &h));
    g_assert_cmpuint (h, ==, 7024);
    g_assert_false (rlx_replica_hash_at (r, 25, &h));
    g_assert_false (rlx_replica_hash_at (r, 39, &h));
    g_assert_true (rlx_replica_hash_at (r, 40, &h));
    win = rlx_replica_history (r, &from);
    g_assert_cmpuint (from, ==, 40);
    g_assert_cmpuint (win->len, ==, 1);
    g_clear_pointer (&win, g_array_unref);
    win = rlx_replica_history_until (r, 30, 512, &from);
    g_assert_cmpuint (from, ==, 20);
    g_assert_cmpuint (win->len, ==, 5);
    g_assert_cmpuint (g_array_index (win, guint64, 4), ==, 7024);
    /* The same state again, its window ending at step 24 (the step of a
     * join that crossed the first answer): it agrees at its own step, 40,
     * not only up to the window's end — else the member reports steps
     * 25..40 discarded. Another state at 40 agrees up to 24 only. */
    g_assert_cmpint (rlx_replica_agrees_until (r, ss, &sparse_common), ==, 40);
    ss->hash ^= 1;
    g_assert_cmpint (rlx_replica_agrees_until (r, ss, &sparse_common), ==, 24);
    ss->hash ^= 1;
    /* a plain load starts the history anew */
    rlx_replica_load (r, 50, &ss->params, ss->hash, 0, 0, on_applied, &done);
    wait_replica (r, w);
    g_assert_cmpuint (rlx_replica_history_start (r), ==, 50);
    g_assert_false (rlx_replica_hash_at (r, 21, &h));
  }
  rlx_msg_clear (&snapshot);

  rlx_worker_free (w);
  g_object_unref (r);
}

/* A checkpoint from before the hash's chunk size was recorded (hash of
 * 16384-element chunks, no "hash_chunk"): resumed, its hash checked the old
 * way and replaced by the current one; the same file claiming the current
 * chunk size with the old hash is refused as inconsistent. */
static void
write_checkpoint (const char *path, const RlxModel *m, const float *p, guint64 hash,
                  const char *chunk)
{
  g_autoptr(GHashTable) md = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, g_free);
  g_autoptr(GError) error = NULL;

  g_hash_table_insert (md, "model", g_strdup (m->slug));
  g_hash_table_insert (md, "dataset", g_strdup ("synthetic"));
  g_hash_table_insert (md, "step", g_strdup ("7"));
  g_hash_table_insert (md, "epoch", g_strdup ("0"));
  g_hash_table_insert (md, "pos", g_strdup ("224"));
  g_hash_table_insert (md, "seed", g_strdup ("0"));
  g_hash_table_insert (md, "hash", g_strdup_printf ("%016" G_GINT64_MODIFIER "x", hash));
  if (chunk)
    g_hash_table_insert (md, "hash_chunk", g_strdup (chunk));
  g_assert_true (rlx_safetensors_write (path, m, p, md, &error));
  g_assert_no_error (error);
}

static void
test_checkpoint_hash_chunk (void)
{
  const RlxModel *m = rlx_model_lookup ("mnist-mlp", NULL);
  g_autoptr(RlxDataset) ds = rlx_dataset_open ("synthetic", 0, NULL);
  g_autofree char *dir = g_dir_make_tmp ("rlx-ckpt-XXXXXX", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxCheckpointer) ck = NULL;
  g_autofree float *p = g_new (float, m->n_params);
  guint64 old_hash;
  RlxCheckpoint out;

  for (gsize i = 0; i < m->n_params; i++)
    p[i] = (float) ((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  old_hash = rlx_params_hash_with_chunk (p, m->n_params, RLX_PARAMS_HASH_CHUNK_V1);
  g_assert_cmphex (old_hash, !=, rlx_params_hash (p, m->n_params));
  ck = rlx_checkpointer_new (dir, "old", m, ds, &error);
  g_assert_no_error (error);

  write_checkpoint (rlx_checkpointer_get_path (ck), m, p, old_hash, NULL);
  g_assert_true (rlx_checkpointer_load (ck, &out, &error));
  g_assert_no_error (error);
  g_assert_nonnull (out.params);
  g_assert_cmpuint (out.step, ==, 7);
  g_assert_cmphex (out.hash, ==, rlx_params_hash (p, m->n_params));
  g_free (out.params);

  write_checkpoint (rlx_checkpointer_get_path (ck), m, p, old_hash, "1024");
  g_assert_false (rlx_checkpointer_load (ck, &out, &error));
  g_assert_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_CHECKPOINT);

  g_unlink (rlx_checkpointer_get_path (ck));
  g_rmdir (dir);
}

/* A replica of mnist-mlp over the synthetic set at @seed, on a CPU worker
 * (*@w: free it after the replica; the backend holds the dataset). */
static RlxReplica *
new_replica (guint64 seed, RlxWorker **w)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxDataset) dataset = rlx_dataset_open ("synthetic", 0, &error);
  RlxBackend *backend;

  g_assert_no_error (error);
  backend = rlx_backend_resolve ("cpu", rlx_model_get (RLX_MODEL_MNIST_MLP), dataset, 8, &error);
  g_assert_no_error (error);
  *w = rlx_worker_new (backend);
  return rlx_replica_new (*w, seed);
}

/* The replica's permutations are the dataset's, whatever order the epochs
 * are asked for in, with the next epoch's made ahead on another thread
 * while the last commit's is in use, and after the seed changes. */
static void
test_replica_permutation (void)
{
  RlxWorker *w = NULL;
  RlxReplica *r = new_replica (5, &w);
  guint n = rlx_replica_get_n_train (r);
  g_autofree guint32 *want = g_new (guint32, n);
  /* (committed epoch, asked epoch): in use, ahead, back, two ahead */
  static const guint asks[][2] = {
    { 0, 0 }, { 0, 1 }, { 0, 0 }, { 0, 1 }, { 1, 1 }, { 1, 2 }, { 1, 1 }, { 1, 3 }, { 1, 1 },
    { 2, 2 }, { 2, 0 }, { 2, 2 }, { 3, 3 }, { 3, 4 }, { 4, 4 }, { 4, 5 }, { 4, 4 },
  };

  g_assert_cmpuint (n, >, 1);
  for (guint i = 0; i < G_N_ELEMENTS (asks); i++)
    {
      for (guint seed = 5; seed <= (i == G_N_ELEMENTS (asks) - 1 ? 6u : 5u); seed++)
        {
          const guint32 *got;

          rlx_replica_set_seed (r, seed);
          rlx_replica_commit (r, i + 1, 0, asks[i][0], 0);
          got = rlx_replica_permutation (r, asks[i][1]);
          rlx_dataset_permutation (n, seed, asks[i][1], want);
          if (memcmp (got, want, n * sizeof (guint32)) != 0)
            g_error ("ask %u (seed %u, committed epoch %u): the permutation of epoch %u differs",
                     i, seed, asks[i][0], asks[i][1]);
        }
    }
  g_object_unref (r);
  rlx_worker_free (w);
}

/* The sample stream (rlx_replica_indices, rlx_replica_advance): rounds of
 * many sizes — under an epoch, up to its end, over it, over several — each
 * cut into slots from the round's (epoch, pos), laid end to end, are the
 * epochs' seeded permutations one after another, and (epoch, pos) moves on
 * by each round's count; the replica's committed epoch (which the
 * permutation made ahead follows) moves with the rounds, as in a cohort. */
static void
test_replica_stream (void)
{
  RlxWorker *w = NULL;
  RlxReplica *r = new_replica (5, &w);
  guint n = rlx_replica_get_n_train (r);
  g_autofree guint32 *want = g_new (guint32, n);
  static const guint rounds[] = { 59999, 1, 60000, 123456, 2, 307200, 7, 60000, 76800, 3 };
  GRand *rand = g_rand_new_with_seed (28);
  guint epoch = 0, pos = 0, want_epoch = G_MAXUINT;
  guint64 at = 0;

  for (guint i = 0; i < G_N_ELEMENTS (rounds); i++)
    {
      guint cut[4] = { 0, 0, 0, rounds[i] };
      guint64 round_at = at;

      /* three slots, of any lengths (a slot may be empty: skipped) */
      cut[1] = g_rand_int_range (rand, 0, (gint32) rounds[i] + 1);
      cut[2] = g_rand_int_range (rand, (gint32) cut[1], (gint32) rounds[i] + 1);
      for (guint k = 0; k < 3; k++)
        {
          guint count = cut[k + 1] - cut[k];
          g_autofree guint32 *got = NULL;

          if (count == 0)
            continue;
          got = rlx_replica_indices (r, epoch, (guint64) pos + cut[k], count);
          for (guint j = 0; j < count; j++, at++)
            {
              if (at / n != want_epoch)
                {
                  want_epoch = (guint) (at / n);
                  rlx_dataset_permutation (n, 5, want_epoch, want);
                }
              if (got[j] != want[at % n])
                g_error ("round %u, slot %u, sample %u: index %u, the stream has %u at %"
                         G_GUINT64_FORMAT, i, k, j, got[j], want[at % n], at);
            }
        }
      g_assert_cmpuint (at, ==, round_at + rounds[i]);
      rlx_replica_advance (r, &epoch, &pos, rounds[i]);
      g_assert_cmpuint (epoch, ==, at / n);
      g_assert_cmpuint (pos, ==, at % n);
      rlx_replica_commit (r, i + 1, 0, epoch, pos);
    }
  g_rand_free (rand);
  g_object_unref (r);
  rlx_worker_free (w);
}

/* The replica remembers far more steps than a snapshot carries, and the
 * snapshot's window can end at a joiner's step far behind: a joiner that
 * applied a step the cohort never committed, then was frozen while the
 * cohort went on for thousands of steps, still finds where it parted
 * (issue 29, item 13). */
static void
test_replica_history_window (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxDataset) dataset = rlx_dataset_open ("synthetic", 0, &error);
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_MLP);
  RlxBackend *backend = rlx_backend_resolve ("cpu", model, dataset, 8, &error);
  RlxWorker *w = rlx_worker_new (backend);
  RlxReplica *leader = rlx_replica_new (w, 0), *joiner = rlx_replica_new (w, 0);
  g_autoptr(GArray) last = NULL, around = NULL, ahead = NULL;
  guint64 from = 0;

  g_assert_no_error (error);
  for (guint64 s = 1; s <= 5000; s++)
    rlx_replica_commit (leader, s, 1000 + s, 0, 0);
  /* the joiner agrees up to 1200, then applied a 1201 of its own */
  for (guint64 s = 1; s <= 1200; s++)
    rlx_replica_commit (joiner, s, 1000 + s, 0, 0);
  rlx_replica_commit (joiner, 1201, 7, 0, 0);

  /* the newest 512: they tell the joiner nothing */
  last = rlx_replica_history (leader, &from);
  g_assert_cmpuint (last->len, ==, RLX_MSG_MAX_HASHES);
  g_assert_cmpuint (from, ==, 5001 - RLX_MSG_MAX_HASHES);
  g_assert_cmpint (rlx_replica_common_step (joiner, from, last), ==, -1);
  /* 512 ending at the joiner's step: where it parted, exactly */
  around = rlx_replica_history_until (leader, 1201, RLX_MSG_MAX_HASHES, &from);
  g_assert_cmpuint (around->len, ==, RLX_MSG_MAX_HASHES);
  g_assert_cmpuint (from + around->len - 1, ==, 1201);
  g_assert_cmpuint (g_array_index (around, guint64, around->len - 1), ==, 1000 + 1201);
  g_assert_cmpint (rlx_replica_common_step (joiner, from, around), ==, 1200);
  /* a step beyond the newest: the newest */
  ahead = rlx_replica_history_until (leader, 90000, 16, &from);
  g_assert_cmpuint (ahead->len, ==, 16);
  g_assert_cmpuint (from, ==, 5000 - 15);
  g_object_unref (leader);
  g_object_unref (joiner);
  rlx_worker_free (w);
}

/* The leader's judge of a bucket's size: no limit until four norms are
 * known, then ratio × their median; another H starts afresh; the codes'
 * norm is that of what they decode to. */
static void
test_norm_guard (void)
{
  RlxNormGuard g;
  float v[3] = { 3, 0, 4 };
  guint16 h[3];

  rlx_norm_guard_init (&g, 100);
  g_assert_cmpfloat (rlx_norm_guard_limit (&g, 0), ==, 0);
  for (int i = 1; i <= 4; i++)
    rlx_norm_guard_note (&g, 0, i);
  g_assert_cmpfloat (rlx_norm_guard_limit (&g, 0), ==, 250);
  rlx_norm_guard_note (&g, 0, NAN);   /* not counted */
  g_assert_cmpfloat (rlx_norm_guard_median (&g, 0), ==, 2.5);
  g_assert_cmpfloat (rlx_norm_guard_limit (&g, 1), ==, 0);   /* the outer mode's own */
  rlx_norm_guard_init (&g, -1);
  for (int i = 1; i <= 8; i++)
    rlx_norm_guard_note (&g, 0, i);
  g_assert_cmpfloat (rlx_norm_guard_limit (&g, 0), ==, 0);   /* off */

  g_assert_cmpfloat_with_epsilon (rlx_wire_codes_norm (v, 3, RLX_PRECISION_F32, 1.0), 5.0, 1e-12);
  for (int i = 0; i < 3; i++)
    h[i] = rlx_wire_f16_from_f32 (v[i]);
  g_assert_cmpfloat_with_epsilon (rlx_wire_codes_norm (h, 3, RLX_PRECISION_F16, 1.0), 5.0, 1e-6);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cohort/engine/successor", test_successor);
  g_test_add_func ("/cohort/engine/founder", test_founder);
  g_test_add_func ("/cohort/engine/merge-rule", test_merge_rule);
  g_test_add_func ("/cohort/engine/norm-guard", test_norm_guard);
  g_test_add_func ("/cohort/engine/roster", test_roster);
  g_test_add_func ("/cohort/engine/msg-round-trip", test_msg_round_trip);
  g_test_add_func ("/cohort/engine/msg-refusals", test_msg_refusals);
  g_test_add_func ("/cohort/engine/replica-history", test_replica_history);
  g_test_add_func ("/cohort/engine/replica-history-window", test_replica_history_window);
  g_test_add_func ("/cohort/engine/replica-permutation", test_replica_permutation);
  g_test_add_func ("/cohort/engine/replica-stream", test_replica_stream);
  g_test_add_func ("/cohort/engine/checkpoint-hash-chunk", test_checkpoint_hash_chunk);
  return g_test_run ();
}
