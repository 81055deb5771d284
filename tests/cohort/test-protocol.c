/* test-protocol.c — a real leader against a peer this test scripts
 *
 * One RlxCoordinator (the leader, computing on the CPU) and, on the other
 * end of a socketpair link, a member played by the test itself: it speaks
 * the protocol through rlx-msg (hello, join, ack, grad), keeps its own copy
 * of the parameters from the snapshot and the updates (so its acks carry
 * the right hash), and sends the buckets a broken or hostile rank would.
 * Each case checks what the leader reports and what it answers.
 */
#include "rlx-config.h"
#include "cohort-harness.h"
#include "core/rlx-coordinator.h"
#include "core/cohort/rlx-msg.h"
#include "core/cohort/rlx-split.h"
#include "core/p2p/rlx-link-stream.h"
#include "core/p2p/rlx-unix-link.h"
#include "core/vision/rlx-cpu.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 30000

typedef struct {
  RlxCoordinator *coord;
  GPtrArray      *events;    /* JsonObject* */
  char           *dir;
} Leader;

typedef struct {
  RlxLink *link;
  GQueue   inbox;            /* RlxMsg* */
  char    *id;
  float   *params;
  gsize    n;
  guint64  step, hash, term;
} Scripted;

static void
on_event (RlxCoordinator *c, RlxEvent *ev, Leader *l)
{
  g_ptr_array_add (l->events, rlx_event_to_json (ev));
}

/* A real node @id on the CPU (mnist-mlp, synthetic data, --batch 8, at
 * most @max_batch a pass); @join_only: it never founds a cohort (a member
 * of the test's scripted leader). */
static void
node_init (Leader *l, RlxPrecision precision, const char *id, guint max_batch,
           gboolean join_only)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxDataset) dataset = rlx_dataset_open ("synthetic", 0, &error);
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_MLP);
  RlxBackend *backend;
  RlxCoordinatorConfig cfg = { 0 };

  g_assert_no_error (error);
  backend = rlx_backend_resolve ("cpu", model, dataset, max_batch, &error);
  g_assert_no_error (error);
  l->dir = g_dir_make_tmp ("rlx-protocol-XXXXXX", &error);
  g_assert_no_error (error);
  l->events = g_ptr_array_new_with_free_func ((GDestroyNotify) json_object_unref);
  cfg.cohort = "protocol";
  cfg.node_id = id;
  cfg.join_only = join_only;
  cfg.precision = precision;
  cfg.error_feedback = TRUE;
  cfg.batch = 8;
  cfg.lr = 0.05;
  cfg.checkpoint_dir = l->dir;
  cfg.checkpoint_every = 0;
  cfg.wait_members = 2;
  cfg.deadline_floor_ms = 20000;
  cfg.heartbeat_timeout_ms = 60000;
  l->coord = rlx_coordinator_new (&cfg, rlx_worker_new (backend), &error);
  g_assert_no_error (error);
  g_signal_connect (l->coord, "event", G_CALLBACK (on_event), l);
}

static void
leader_init (Leader *l, RlxPrecision precision)
{
  node_init (l, precision, "lead", 64, FALSE);
}

static void
leader_clear (Leader *l)
{
  g_autofree char *ck = g_build_filename (l->dir, "checkpoint.safetensors", NULL);

  g_clear_object (&l->coord);
  g_ptr_array_unref (l->events);
  g_unlink (ck);
  g_rmdir (l->dir);
  g_free (l->dir);
}

typedef struct {
  Leader     *l;
  const char *event, *key, *word;
  gint64      min;
  int         found;
} EventWait;

static const char *
str_of (JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member (o, key);

  return n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING
         ? json_node_get_string (n) : NULL;
}

static gint64
int_of (JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member (o, key);

  return n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_INT64
         ? json_node_get_int (n) : -1;
}

static gboolean
pred_event (gpointer data)
{
  EventWait *w = data;

  for (guint i = 0; i < w->l->events->len; i++)
    {
      JsonObject *o = g_ptr_array_index (w->l->events, i);
      if (g_strcmp0 (str_of (o, "event"), w->event) != 0)
        continue;
      if (w->key && int_of (o, w->key) < w->min)
        continue;
      if (w->word && (str_of (o, "reason") == NULL || !strstr (str_of (o, "reason"), w->word)))
        continue;
      w->found = (int) i;
      return TRUE;
    }
  return FALSE;
}

/* The leader's first event named @event (with integer @key >= @min, with
 * @word in its reason), waiting for it. */
static JsonObject *
leader_wait (Leader *l, const char *event, const char *key, gint64 min, const char *word)
{
  EventWait w = { l, event, key, word, min, -1 };

  if (!harness_wait (pred_event, &w, WAIT_MS))
    {
      for (guint i = 0; i < l->events->len; i++)
        {
          g_autoptr(JsonNode) node = json_node_init_object (json_node_alloc (),
                                                            g_ptr_array_index (l->events, i));
          g_autofree char *line = json_to_string (node, FALSE);
          g_test_message ("leader: %s", line);
        }
      g_error ("the node reported no '%s'%s%s within %d ms", event, word ? " about " : "",
               word ? word : "", WAIT_MS);
    }
  return g_ptr_array_index (l->events, w.found);
}

/* ── the scripted member ────────────────────────────────────────────────── */

static void
on_scripted_frame (RlxLink *link, GBytes *frame, Scripted *s)
{
  RlxMsg *m = g_new0 (RlxMsg, 1);

  if (rlx_msg_parse (frame, NULL, m, NULL))
    g_queue_push_tail (&s->inbox, m);
  else
    g_free (m);
}

static void
scripted_send (Scripted *s, RlxMsg *m, const float *values, gsize n)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) frame = rlx_msg_build (m, values, n, RLX_PRECISION_F32, &error);

  g_assert_no_error (error);
  g_assert_true (rlx_link_send (s->link, frame, &error));
  g_assert_no_error (error);
  rlx_msg_clear (m);
}

typedef struct {
  Scripted  *s;
  RlxMsgKind kind;
  guint64    step;       /* step messages: this step (0: any) */
  RlxMsg    *found;
} MsgWait;

static gboolean
pred_msg (gpointer data)
{
  MsgWait *w = data;

  for (GList *l = w->s->inbox.head; l; l = l->next)
    {
      RlxMsg *m = l->data;
      if (m->kind == w->kind && (w->kind != RLX_MSG_STEP || w->step == 0 || m->u.step.step == w->step))
        {
          w->found = m;
          g_queue_delete_link (&w->s->inbox, l);
          return TRUE;
        }
    }
  return FALSE;
}

/* The next message of @kind (a step message: of step @step) the leader sent
 * us; earlier ones of other kinds stay queued. Caller clears and frees. */
static RlxMsg *
scripted_wait (Scripted *s, RlxMsgKind kind, guint64 step)
{
  MsgWait w = { s, kind, step, NULL };

  if (!harness_wait (pred_msg, &w, WAIT_MS))
    g_error ("the scripted member got no %s message%s within %d ms", rlx_msg_kind_name (kind),
             step ? " of that step" : "", WAIT_MS);
  return w.found;
}

static void
msg_free (RlxMsg *m)
{
  rlx_msg_clear (m);
  g_free (m);
}

/* A hello from @id that this cohort accepts. */
static void
hello_init (RlxMsg *m, const char *id)
{
  rlx_msg_init (m, RLX_MSG_HELLO, id);
  m->u.hello.version = RLX_MSG_PROTOCOL_VERSION;
  m->u.hello.cohort = g_strdup ("protocol");
  m->u.hello.seed = g_strdup ("0");
  m->u.hello.model = g_strdup ("mnist-mlp");
  m->u.hello.dataset = g_strdup ("synthetic");
  m->u.hello.backend = g_strdup ("cpu");
  m->u.hello.device = g_strdup ("a test");
  m->u.hello.fallback = g_strdup ("");
  m->u.hello.host = g_strdup ("here");
  m->u.hello.precision = RLX_PRECISION_F32;
  m->u.hello.batch = 8;
  m->u.hello.max_batch = 64;
  m->u.hello.role = RLX_ROLE_ALONE;
}

static void
scripted_ack (Scripted *s, guint64 hash)
{
  RlxMsg m;

  rlx_msg_init (&m, RLX_MSG_ACK, s->id);
  m.u.ack.term = s->term;
  m.u.ack.step = s->step;
  m.u.ack.hash = hash;
  scripted_send (s, &m, NULL, 0);
}

/* @s, named @id, linked to @l's node, which is started. */
static void
scripted_link (Scripted *s, Leader *l, const char *id)
{
  RlxLink *a = NULL;
  g_autoptr(GError) error = NULL;

  g_assert_true (rlx_unix_link_new_pair (0, &a, &s->link, &error));
  g_assert_no_error (error);
  g_queue_init (&s->inbox);
  s->id = g_strdup (id);
  g_signal_connect (s->link, "frame", G_CALLBACK (on_scripted_frame), s);
  rlx_coordinator_add_link (l->coord, a);
  g_object_unref (a);
  rlx_coordinator_start (l->coord);
}

/* Join the leader: hello, join, snapshot, ack. */
static void
scripted_join (Scripted *s, Leader *l)
{
  RlxMsg m, *snap;

  scripted_link (s, l, "script");
  hello_init (&m, s->id);
  scripted_send (s, &m, NULL, 0);
  msg_free (scripted_wait (s, RLX_MSG_LEADER, 0));

  rlx_msg_init (&m, RLX_MSG_JOIN, s->id);
  m.u.join.reason = g_strdup ("join");
  scripted_send (s, &m, NULL, 0);
  snap = scripted_wait (s, RLX_MSG_SNAPSHOT, 0);
  s->n = snap->u.snapshot.params.n;
  s->params = g_new (float, s->n);
  rlx_msg_array_decode (&snap->u.snapshot.params, s->params);
  s->step = snap->u.snapshot.step;
  s->term = snap->u.snapshot.term;
  s->hash = rlx_params_hash (s->params, s->n);
  g_assert_cmpuint (s->hash, ==, snap->u.snapshot.hash);
  msg_free (snap);
  scripted_ack (s, s->hash);
}

/* The step message of @step; apply the commit it carries (and ack it with
 * the right hash, or @ack_hash when not 0). Returns it (our slot inside). */
static RlxMsg *
scripted_step (Scripted *s, guint64 step, guint64 ack_hash, guint *start, guint *count)
{
  RlxMsg *m = scripted_wait (s, RLX_MSG_STEP, step);
  RlxMsgStep *st = &m->u.step;

  if (st->commit > 0)
    {
      g_autofree float *u = g_new (float, s->n);
      g_assert_cmpuint (st->commit, ==, s->step + 1);
      g_assert_cmpuint (st->base, ==, s->hash);
      rlx_msg_array_decode (&st->update, u);
      for (gsize i = 0; i < s->n; i++)
        s->params[i] -= u[i];
      s->step = st->commit;
      s->hash = rlx_params_hash (s->params, s->n);
      scripted_ack (s, ack_hash ? ack_hash : s->hash);
    }
  *count = 0;
  for (guint i = 0; i < st->assign->len; i++)
    {
      RlxMsgSlot *slot = &g_array_index (st->assign, RlxMsgSlot, i);
      if (strcmp (slot->node, s->id) == 0)
        {
          *start = slot->start;
          *count = slot->count;
        }
    }
  g_assert_cmpuint (*count, >, 0);
  return m;
}

static void
scripted_grad (Scripted *s, guint64 step, guint samples, const float *g, gsize n)
{
  RlxMsg m;

  rlx_msg_init (&m, RLX_MSG_GRAD, s->id);
  m.u.grad.term = s->term;
  m.u.grad.step = step;
  m.u.grad.samples = samples;
  m.u.grad.loss = 2.0;
  m.u.grad.compute_us = 100;
  scripted_send (s, &m, g, n);
}

static void
scripted_clear (Scripted *s)
{
  g_signal_handlers_disconnect_by_data (s->link, s);
  rlx_link_close (s->link);
  g_clear_object (&s->link);
  g_queue_clear_full (&s->inbox, (GDestroyNotify) msg_free);
  g_free (s->id);
  g_free (s->params);
}

/* Wrong length, wrong sample count, wrong hash (the member's ack of the
 * step its bucket builds on differs from the leader's), a NaN: each bucket
 * is refused with a reason that says which, the member is told (`reject`),
 * and the step is committed without it; then a good bucket counts. */
static void
test_refusals (void)
{
  Leader l = { 0 };
  Scripted s = { 0 };
  g_autofree float *g = NULL;
  guint start = 0, count = 0;
  JsonObject *ev;
  RlxMsg *rej;

  leader_init (&l, RLX_PRECISION_F32);
  scripted_join (&s, &l);
  g = g_new0 (float, s.n);

  /* Step 1: ten values for a model of 101,770. */
  msg_free (scripted_step (&s, 1, 0, &start, &count));
  scripted_grad (&s, 1, count, g, 10);
  ev = leader_wait (&l, "rejected", "step", 1, "values, the model has");
  g_assert_cmpstr (str_of (ev, "node"), ==, "script");
  rej = scripted_wait (&s, RLX_MSG_REJECT, 0);
  g_assert_cmpuint (rej->u.reject.step, ==, 1);
  g_assert_nonnull (strstr (rej->u.reject.reason, "values"));
  msg_free (rej);

  /* Step 2 (its frame commits step 1, which we acknowledge: only then is
   * step 1 reported committed): one sample more than assigned. */
  msg_free (scripted_step (&s, 2, 0, &start, &count));
  ev = leader_wait (&l, "step", "step", 1, NULL);
  g_assert_cmpint (int_of (ev, "contributors"), ==, 1);
  g_assert_cmpint (int_of (ev, "rejected"), ==, 1);
  scripted_grad (&s, 2, count + 1, g, s.n);
  leader_wait (&l, "rejected", "step", 2, "samples");

  /* Step 3: our ack of step 2 claims other parameters. */
  msg_free (scripted_step (&s, 3, 0x1234, &start, &count));
  ev = leader_wait (&l, "step", "step", 2, NULL);
  g_assert_cmpint (int_of (ev, "contributors"), ==, 1);
  scripted_grad (&s, 3, count, g, s.n);
  leader_wait (&l, "rejected", "step", 3, "hash differs");

  /* Step 4: a NaN in an otherwise good bucket (found while it is summed). */
  msg_free (scripted_step (&s, 4, 0, &start, &count));
  ev = leader_wait (&l, "step", "step", 3, NULL);
  g_assert_cmpint (int_of (ev, "contributors"), ==, 1);
  g[12345] = NAN;
  scripted_grad (&s, 4, count, g, s.n);
  leader_wait (&l, "rejected", "step", 4, "NaN");
  g[12345] = 0;

  /* Step 5: a good bucket is in. */
  msg_free (scripted_step (&s, 5, 0, &start, &count));
  ev = leader_wait (&l, "step", "step", 4, NULL);
  g_assert_cmpint (int_of (ev, "contributors"), ==, 1);
  scripted_grad (&s, 5, count, g, s.n);
  /* Reported committed only with our acknowledgement, and at our hash. */
  msg_free (scripted_step (&s, 6, 0, &start, &count));
  ev = leader_wait (&l, "step", "step", 5, NULL);
  g_assert_cmpint (int_of (ev, "contributors"), ==, 2);
  g_assert_cmpint (int_of (ev, "rejected"), ==, 0);
  {
    g_autofree char *mine = rlx_msg_hash_to_string (s.hash);
    g_assert_cmpstr (str_of (ev, "hash"), ==, mine);
  }

  scripted_clear (&s);
  leader_clear (&l);
}

/* One frame as the Unix link's stream carries it (one control-lane record). */
static void
write_record (int fd, GBytes *frame)
{
  gsize len;
  const guint8 *data = g_bytes_get_data (frame, &len);
  guint8 word[4];

  rlx_link_stream_put_word (word, RLX_LINK_LANE_CONTROL, len, FALSE, FALSE);
  g_assert_cmpint (write (fd, word, 4), ==, 4);
  g_assert_cmpint (write (fd, data, len), ==, (gssize) len);
}

/* A peer that stops reading: the leader's sender queues fill (test limits:
 * one frame in flight per lane, two control frames and one bulk frame
 * queued). Control frames pushed out are reported as "dropped", a bulk
 * frame that does not fit as "send-failed" — each naming the peer. */
static void
test_drops_reported (void)
{
  Leader l = { 0 };
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxLink) link = NULL;
  int fd;
  JsonObject *ev;

  g_setenv ("RLX_TEST_SENDER_LIMITS", "1,2,1", TRUE);
  leader_init (&l, RLX_PRECISION_F32);
  /* A small socket, through which alone the link writes: the first
   * snapshot fills it. (The link writes on its own thread, and a sender
   * with one frame in flight refuses the rest of a burst of snapshots
   * while that one is being written — so with the link's large buffers,
   * or a shared ring, the socket would never fill and nothing control
   * would wait.) */
  link = harness_stalled_link ("stalled peer", &fd);
  rlx_coordinator_add_link (l.coord, link);
  rlx_coordinator_start (l.coord);

  /* The peer's side is a bare socket: write hello and 24 joins (each
   * answered with a 400 KB snapshot, more than the socket buffers hold) in
   * the link's record format, never read. */
  {
    RlxMsg m;
    g_autoptr(GBytes) hello = NULL;

    hello_init (&m, "stalled");
    hello = rlx_msg_build (&m, NULL, 0, RLX_PRECISION_F32, &error);
    rlx_msg_clear (&m);
    write_record (fd, hello);
    /* Joins go to a leader: wait until it has founded. */
    leader_wait (&l, "joined", NULL, 0, NULL);
    for (guint i = 0; i < 24; i++)
      {
        g_autoptr(GBytes) join = NULL;
        rlx_msg_init (&m, RLX_MSG_JOIN, "stalled");
        m.u.join.reason = g_strdup (i == 0 ? "join" : "resync");
        m.u.join.step = i;
        join = rlx_msg_build (&m, NULL, 0, RLX_PRECISION_F32, &error);
        rlx_msg_clear (&m);
        write_record (fd, join);
      }
  }
  /* The pushed-out control frame (a commit superseded by a newer one, class
   * "step", may be reported before it when the leader steps meanwhile). */
  ev = leader_wait (&l, "dropped", NULL, 0, "queue full");
  g_assert_cmpstr (str_of (ev, "node"), ==, "stalled");
  g_assert_cmpstr (str_of (ev, "class"), ==, "control");
  g_assert_cmpint (int_of (ev, "total"), >=, 1);
  ev = leader_wait (&l, "send-failed", NULL, 0, NULL);
  g_assert_cmpstr (str_of (ev, "node"), ==, "stalled");
  g_assert_nonnull (str_of (ev, "reason"));

  close (fd);
  g_unsetenv ("RLX_TEST_SENDER_LIMITS");
  leader_clear (&l);
}

/* Bytes that are not a message of this protocol are reported (an "error"
 * event naming the peer), not acted on, and the cohort goes on. */
static void
test_garbage_reported (void)
{
  Leader l = { 0 };
  Scripted s = { 0 };
  g_autoptr(GError) error = NULL;
  static const char junk[] = "\x08\x00\x00\x00{\"t\":1}not a payload";
  g_autoptr(GBytes) frame = g_bytes_new_static (junk, sizeof junk - 1);
  guint start = 0, count = 0;
  JsonObject *ev;

  leader_init (&l, RLX_PRECISION_F16);
  scripted_join (&s, &l);
  g_assert_true (rlx_link_send (s.link, frame, &error));
  ev = leader_wait (&l, "error", NULL, 0, "undecodable frame from script");
  g_assert_cmpstr (str_of (ev, "node"), ==, "script");
  msg_free (scripted_step (&s, 1, 0, &start, &count));
  {
    g_autofree float *g = g_new0 (float, s.n);
    scripted_grad (&s, 1, count, g, s.n);
  }
  msg_free (scripted_step (&s, 2, 0, &start, &count));
  ev = leader_wait (&l, "step", "step", 1, NULL);
  g_assert_cmpint (int_of (ev, "contributors"), ==, 2);
  scripted_clear (&s);
  leader_clear (&l);
}

/* ── a real member against a leader this test scripts ──────────────────── */

typedef struct {
  GPtrArray *events;
} MemberSeen;

static void
on_member_event (RlxCoordinator *c, RlxEvent *ev, MemberSeen *m)
{
  g_ptr_array_add (m->events, rlx_event_to_json (ev));
}

/* Our (scripted leader's) step frame: commit @commit (a zero update, so the
 * parameters stay as they are) listing @contributors, and our member's
 * slice of step @commit + 1. */
static void
leader_step (Scripted *s, guint64 commit, gboolean member_contributed, guint start, guint count)
{
  RlxMsg m;
  RlxMsgSlot slot = { g_strdup ("m"), start, count };
  g_autofree float *zero = g_new0 (float, s->n);

  rlx_msg_init (&m, RLX_MSG_STEP, "L");
  m.u.step.term = 1;
  m.u.step.step = commit + 1;
  m.u.step.commit = commit;
  m.u.step.base = s->hash;
  m.u.step.loss = 2.0;
  m.u.step.samples = 8;
  m.u.step.contributors = g_ptr_array_new_with_free_func (g_free);
  if (member_contributed)
    g_ptr_array_add (m.u.step.contributors, g_strdup ("m"));
  m.u.step.lr = 0.05;
  m.u.step.pos = start;
  m.u.step.count = count;
  m.u.step.members = g_ptr_array_new_with_free_func (g_free);
  g_ptr_array_add (m.u.step.members, g_strdup ("L"));
  g_ptr_array_add (m.u.step.members, g_strdup ("m"));
  m.u.step.assign = rlx_msg_slots_new ();
  g_array_append_val (m.u.step.assign, slot);
  scripted_send (s, &m, commit > 0 ? zero : NULL, commit > 0 ? s->n : 0);
}

/* What a grad bucket must hold: quantise (g + r) at f8e4m3. */
static void
expected_codes (RlxBackend *ref, const float *params, const guint32 *idx, guint count,
                const float *r, guint8 *codes, double *scale, float *s_out)
{
  gsize n = rlx_backend_model (ref)->n_params;
  float loss;

  g_assert_true (rlx_backend_grads (ref, params, idx, count, &loss, s_out, NULL));
  for (gsize i = 0; r && i < n; i++)
    s_out[i] += r[i];
  *scale = rlx_wire_scale_for (s_out, n, RLX_PRECISION_F8E4M3);
  rlx_wire_quantize (s_out, n, RLX_PRECISION_F8E4M3, *scale, codes);
}

/* A member's error feedback only advances with a bucket the leader took:
 * the leader (scripted) leaves the member's bucket of step 1 out of the
 * commit, and the member's next bucket carries no residual of it; it takes
 * the bucket of step 2, and the bucket of step 3 carries exactly the
 * residual step 2 left. Every bucket is compared, byte for byte, with the
 * codes computed here from the CPU reference. */
static void
test_member_residual_rolls_back (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxDataset) dataset = rlx_dataset_open ("synthetic", 0, &error);
  const RlxModel *model = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autoptr(RlxBackend) ref = rlx_backend_resolve ("cpu", model, dataset, 64, &error);
  RlxBackend *backend = rlx_backend_resolve ("cpu", model, dataset, 64, &error);
  g_autofree char *dir = g_dir_make_tmp ("rlx-protocol-XXXXXX", &error);
  RlxCoordinatorConfig cfg = { 0 };
  RlxCoordinator *member;
  MemberSeen seen = { g_ptr_array_new_with_free_func ((GDestroyNotify) json_object_unref) };
  Scripted s = { 0 };
  RlxLink *a = NULL;
  guint n_train = rlx_dataset_size (dataset, RLX_SPLIT_TRAIN);
  g_autofree guint32 *perm = g_new (guint32, n_train);
  g_autofree float *params = NULL, *sum = NULL, *dq = NULL, *residual = NULL;
  g_autofree guint8 *codes = NULL;
  gsize n = model->n_params;
  RlxMsg m, *reply;

  g_assert_no_error (error);
  cfg.cohort = "protocol";
  cfg.node_id = "m";
  cfg.precision = RLX_PRECISION_F8E4M3;
  cfg.error_feedback = TRUE;
  cfg.batch = 8;
  cfg.lr = 0.05;
  cfg.checkpoint_dir = dir;
  cfg.heartbeat_timeout_ms = 60000;
  member = rlx_coordinator_new (&cfg, rlx_worker_new (backend), &error);
  g_assert_no_error (error);
  g_signal_connect (member, "event", G_CALLBACK (on_member_event), &seen);
  rlx_dataset_permutation (n_train, 0, 0, perm);
  params = g_new (float, n);
  rlx_model_init_params (model, 0, params);
  sum = g_new (float, n);
  dq = g_new (float, n);
  residual = g_new0 (float, n);
  codes = g_new (guint8, n);

  /* We lead: hello as a leader, the member asks to join, our snapshot. */
  g_assert_true (rlx_unix_link_new_pair (0, &a, &s.link, &error));
  g_queue_init (&s.inbox);
  s.id = g_strdup ("L");
  s.n = n;
  s.hash = rlx_params_hash (params, n);
  g_signal_connect (s.link, "frame", G_CALLBACK (on_scripted_frame), &s);
  rlx_coordinator_add_link (member, a);
  g_object_unref (a);
  rlx_coordinator_start (member);
  hello_init (&m, "L");
  m.u.hello.role = RLX_ROLE_LEADER;
  m.u.hello.leader = g_strdup ("L");
  m.u.hello.term = 1;
  m.u.hello.members = 1;
  scripted_send (&s, &m, NULL, 0);
  reply = scripted_wait (&s, RLX_MSG_JOIN, 0);
  msg_free (reply);
  rlx_msg_init (&m, RLX_MSG_SNAPSHOT, "L");
  m.u.snapshot.term = 1;
  m.u.snapshot.leader = g_strdup ("L");
  m.u.snapshot.hash = s.hash;
  m.u.snapshot.seed = g_strdup ("0");
  m.u.snapshot.members = g_ptr_array_new_with_free_func (g_free);
  g_ptr_array_add (m.u.snapshot.members, g_strdup ("L"));
  g_ptr_array_add (m.u.snapshot.members, g_strdup ("m"));
  scripted_send (&s, &m, params, n);
  msg_free (scripted_wait (&s, RLX_MSG_ACK, 0));

  for (guint k = 1; k <= 3; k++)
    {
      guint start = (k - 1) * 8;
      double scale;

      /* commit k - 1 (zero update): step 1's bucket not taken, step 2's
       * taken */
      leader_step (&s, k - 1, k == 3, start, 8);
      if (k > 1)
        msg_free (scripted_wait (&s, RLX_MSG_ACK, 0));
      reply = scripted_wait (&s, RLX_MSG_GRAD, 0);
      g_assert_cmpuint (reply->u.grad.step, ==, k);
      g_assert_null (reply->u.grad.refused);
      g_assert_cmpint (reply->u.grad.grads.precision, ==, RLX_PRECISION_F8E4M3);
      /* the residual carried: none at step 1, none at step 2 (step 1's
       * bucket was not taken), step 2's at step 3 */
      expected_codes (ref, params, perm + start, 8, k == 3 ? residual : NULL, codes, &scale, sum);
      g_assert_cmpfloat (reply->u.grad.grads.scale, ==, scale);
      if (memcmp (reply->u.grad.grads.codes, codes, n) != 0)
        g_error ("step %u: the member's bucket is not quantise (g%s)", k,
                 k == 3 ? " + the residual of step 2" : ", without any residual");
      if (k == 2)
        {
          /* the residual step 2 leaves: s − dequantise (codes) */
          rlx_wire_dequantize (codes, n, RLX_PRECISION_F8E4M3, scale, dq);
          for (gsize i = 0; i < n; i++)
            residual[i] = sum[i] - dq[i];
        }
      msg_free (reply);
      s.step = k - 1;
    }

  g_object_unref (member);
  scripted_clear (&s);
  g_ptr_array_unref (seen.events);
  {
    g_autofree char *ck = g_build_filename (dir, "checkpoint.safetensors", NULL);
    g_unlink (ck);
    g_rmdir (dir);
  }
}

/* A hello of protocol version 4 (before outer rounds ran over the epoch's
 * end: such a member skips a slot whose start + count passes the training
 * split) is refused, with a reason that names both versions and what to
 * do; the leader reports the refusal. */
static void
test_old_version_refused (void)
{
  Leader l = { 0 };
  Scripted s = { 0 };
  g_autofree char *want = g_strdup_printf ("protocol version 4 differs from this cohort's %d "
                                           "(run the same rlx-cluster version on every node)",
                                           RLX_MSG_PROTOCOL_VERSION);
  JsonObject *ev;
  RlxMsg m, *refuse;

  leader_init (&l, RLX_PRECISION_F32);
  scripted_link (&s, &l, "old");
  hello_init (&m, s.id);
  m.u.hello.version = 4;
  scripted_send (&s, &m, NULL, 0);
  refuse = scripted_wait (&s, RLX_MSG_REFUSE, 0);
  g_assert_cmpstr (refuse->u.refuse.reason, ==, want);
  msg_free (refuse);
  ev = leader_wait (&l, "refused", NULL, 0, "protocol version 4");
  g_assert_cmpstr (str_of (ev, "reason"), ==, want);
  scripted_clear (&s);
  leader_clear (&l);
}

/* The test as the leader of a real member "mem" (max_batch 2,048): its
 * hello, the member's join, a snapshot of zeros at step 0, the member's
 * ack; then a step frame assigning the member an outer slot of @count
 * samples at H @h. */
static void
lead_member (Scripted *s, Leader *m, guint h, guint count)
{
  gsize n = rlx_model_get (RLX_MODEL_MNIST_MLP)->n_params;
  g_autofree float *zeros = g_new0 (float, n);
  guint64 hash = rlx_params_hash (zeros, n);
  RlxMsg msg, *ack;
  RlxMsgSlot slot = { NULL, 0, count };

  node_init (m, RLX_PRECISION_F32, "mem", 2048, TRUE);
  scripted_link (s, m, "boss");
  msg_free (scripted_wait (s, RLX_MSG_HELLO, 0));
  hello_init (&msg, s->id);
  msg.u.hello.role = RLX_ROLE_LEADER;
  msg.u.hello.leader = g_strdup (s->id);
  msg.u.hello.term = 1;
  msg.u.hello.members = 1;
  scripted_send (s, &msg, NULL, 0);
  msg_free (scripted_wait (s, RLX_MSG_JOIN, 0));

  rlx_msg_init (&msg, RLX_MSG_SNAPSHOT, s->id);
  msg.u.snapshot.term = 1;
  msg.u.snapshot.leader = g_strdup (s->id);
  msg.u.snapshot.hash = hash;
  msg.u.snapshot.seed = g_strdup ("0");
  msg.u.snapshot.members = g_ptr_array_new_with_free_func (g_free);
  g_ptr_array_add (msg.u.snapshot.members, g_strdup (s->id));
  g_ptr_array_add (msg.u.snapshot.members, g_strdup ("mem"));
  scripted_send (s, &msg, zeros, n);
  ack = scripted_wait (s, RLX_MSG_ACK, 0);
  g_assert_cmpuint (ack->u.ack.hash, ==, hash);
  msg_free (ack);

  rlx_msg_init (&msg, RLX_MSG_STEP, s->id);
  msg.u.step.term = 1;
  msg.u.step.step = 1;
  msg.u.step.base = hash;
  msg.u.step.lr = 0.05;
  msg.u.step.count = count;
  msg.u.step.members = g_ptr_array_new_with_free_func (g_free);
  g_ptr_array_add (msg.u.step.members, g_strdup (s->id));
  g_ptr_array_add (msg.u.step.members, g_strdup ("mem"));
  msg.u.step.assign = rlx_msg_slots_new ();
  slot.node = g_strdup ("mem");
  g_array_append_val (msg.u.step.assign, slot);
  msg.u.step.h = h;
  msg.u.step.olr = 0.7;
  msg.u.step.omom = 0.9;
  scripted_send (s, &msg, NULL, 0);
}

/* A step frame that gives a member an outer slot of more than any slot may
 * hold (RLX_SPLIT_MAX_SLOT; H 10,000 times its max_batch of 2,048 would
 * allow 20 million) is refused, with an error event saying so. */
static void
test_oversized_slot_refused (void)
{
  Leader m = { 0 };
  Scripted s = { 0 };
  JsonObject *ev;

  lead_member (&s, &m, 10000, RLX_SPLIT_MAX_SLOT + 1);
  ev = leader_wait (&m, "error", NULL, 0, "more than any slot may hold");
  g_assert_nonnull (strstr (str_of (ev, "reason"), "step 1's frame (term 1) refused"));
  scripted_clear (&s);
  leader_clear (&m);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cohort/protocol/refusals", test_refusals);
  g_test_add_func ("/cohort/protocol/old-version-refused", test_old_version_refused);
  g_test_add_func ("/cohort/protocol/oversized-slot-refused", test_oversized_slot_refused);
  g_test_add_func ("/cohort/protocol/drops-reported", test_drops_reported);
  g_test_add_func ("/cohort/protocol/garbage-reported", test_garbage_reported);
  g_test_add_func ("/cohort/protocol/member-residual-rolls-back", test_member_residual_rolls_back);
  return g_test_run ();
}
