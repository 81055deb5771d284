/* rlx-coordinator-events.c — what the coordinator tells: events, the
 * messages it sends, the roster, checkpoints and evaluation
 * (see rlx-coordinator-private.h) */
#include "rlx-config.h"
#include "rlx-coordinator-private.h"
#include "rlx-coordinator-faults.h"
#include "core/vision/rlx-cpu.h"

#include <math.h>
#include <stdlib.h>
#include "core/util/rlx-fp-mode.h"

static void maybe_evaluate (RlxCoordinator *self, guint64 step);

typedef struct {
  RlxCoordinator *self;
  float          *params;
  guint64         step;
  guint           slow_ms;     /* the fault plan's eval_ms */
  GCancellable   *cancellable; /* the coordinator's eval_cancel */
  gboolean        done;        /* measured (not cancelled) */
  double          accuracy, loss;
} Eval;

void
rlx_coordinator_emit_simple (RlxCoordinator *self, RlxEventKind kind, const char *node,
                             const char *reason)
{
  rlx_coordinator_emit_event (self, rlx_event_note_new (kind, node, reason));
}

void
rlx_coordinator_emit_error (RlxCoordinator *self, const char *message)
{
  rlx_coordinator_emit_simple (self, RLX_EVENT_ERROR, self->node_id, message);
}

void
rlx_coordinator_emit_joined (RlxCoordinator *self)
{
  RlxBackend *b = rlx_worker_backend (self->worker);
  RlxEvent *e;
  RlxEventJoined *j;

  if (self->joined_reported)
    return;
  self->joined_reported = TRUE;
  e = rlx_event_new (RLX_EVENT_JOINED);
  j = &e->u.joined;
  j->node = g_strdup (self->node_id);
  j->cohort = g_strdup (self->cohort);
  j->role = g_strdup (rlx_role_name (role (self)));
  j->step = applied (self);
  j->hash = rlx_replica_get_hash (self->replica);
  j->backend = g_strdup (rlx_backend_name (b));
  j->device = g_strdup (rlx_backend_device (b));
  j->fallback = g_strdup (rlx_backend_fallback (b));
  j->precision = g_strdup (rlx_precision_to_string (self->ctx.precision));
  j->sync = g_strdup (rlx_sync_mode_to_string (rlx_sync_state_mode (self->ctx.sync)));
  j->has_data = TRUE;
  j->train = rlx_replica_get_n_train (self->replica);
  j->epoch = rlx_replica_get_epoch (self->replica);
  j->pos = rlx_replica_get_pos (self->replica);
  j->steps = self->ctx.steps;
  rlx_coordinator_emit_event (self, e);
  rlx_coordinator_emit_sync (self);
}

void
rlx_coordinator_emit_sync (RlxCoordinator *self)
{
  rlx_coordinator_emit_event (self, rlx_sync_state_event (self->ctx.sync));
}

void
rlx_coordinator_emit_leader (RlxCoordinator *self)
{
  RlxEvent *e = rlx_event_new (RLX_EVENT_LEADER);

  e->u.leader.node = g_strdup (rlx_leadership_get_leader (self->lead));
  e->u.leader.term = rlx_leadership_get_term (self->lead);
  e->u.leader.step = applied (self);
  rlx_coordinator_emit_event (self, e);
}

void
rlx_coordinator_emit_member (RlxCoordinator *self, RlxEventKind kind, const char *id,
                             const char *reason)
{
  RlxEvent *e = rlx_event_new (kind);
  RlxEventMember *m = &e->u.member;
  RlxPeer *p = rlx_peer_set_lookup (self->peers, id);

  g_return_if_fail (kind == RLX_EVENT_MEMBER_JOINED || kind == RLX_EVENT_MEMBER_LEFT);
  m->node = g_strdup (id);
  m->reason = g_strdup (reason);
  if (reason == NULL && p)
    {
      m->has_peer = TRUE;
      m->host = g_strdup (p->host);
      m->backend = g_strdup (p->backend);
      m->device = g_strdup (p->device);
      m->fallback = g_strdup (p->fallback);
      m->precision = g_strdup (rlx_precision_to_string (p->precision));
    }
  m->step = applied (self);
  rlx_coordinator_emit_event (self, e);
}

static void
notify_bytes (RlxCoordinator *self)
{
  rlx_coordinator_notify (self, PROP_BYTES_TX);
  rlx_coordinator_notify (self, PROP_BYTES_RX);
  rlx_coordinator_notify (self, PROP_BYTES_F32);
}

void
rlx_coordinator_note_assigned (RlxCoordinator *self, guint64 step, guint count)
{
  self->assigned_step[step % 4] = step;
  self->assigned_count[step % 4] = count;
}

void
rlx_coordinator_emit_step (RlxCoordinator *self, guint64 step, guint64 hash, double loss,
                           guint64 samples, GPtrArray *contributors, guint late, guint rejected,
                           guint n_members, guint agree)
{
  const RlxWireCounters *t = rlx_peer_set_get_totals (self->peers);
  RlxEvent *e = rlx_event_new (RLX_EVENT_STEP);
  RlxEventStep *s = &e->u.step;

  s->step = step;
  s->loss = loss;
  s->leader = g_strdup (rlx_leadership_get_leader (self->lead));
  s->term = rlx_leadership_get_term (self->lead);
  s->members = n_members;
  s->samples = samples;
  s->assigned = self->assigned_step[step % 4] == step ? self->assigned_count[step % 4] : 0;
  s->hash = hash;
  s->bytes_tx = t->tx_bytes;
  s->bytes_rx = t->rx_bytes;
  s->bytes_f32 = t->tx_f32_bytes + t->rx_f32_bytes;
  s->contributed = str_array_contains (contributors, self->node_id);
  s->contributors = contributors ? contributors->len : 0;
  s->late = late;
  s->rejected = rejected;
  s->time_us = g_get_monotonic_time ();
  s->has_agree = agree > 0;
  s->agree = agree;
  {
    guint h;

    if (rlx_sync_state_commit_info (self->ctx.sync, step, &h, &s->outer_hash))
      {
        s->has_outer = TRUE;
        s->sync = g_strdup ("outer");
        s->h = h;
        s->round_bytes = self->n * rlx_precision_element_size (self->ctx.precision);
      }
  }
  rlx_coordinator_emit_event (self, e);
  rlx_coordinator_notify (self, PROP_STEP);
  rlx_coordinator_notify (self, PROP_LOSS);
  notify_bytes (self);
  /* The roster's counters and speeds follow the steps at most four times a
   * second (membership and state changes sync at once, elsewhere): a view
   * bound to them redraws for each change, and at hundreds of steps a
   * second a sync every few steps kept a window drawing ~30 frames a
   * second for figures nobody can read that fast. */
  if (g_get_monotonic_time () - self->roster_synced_at >= G_USEC_PER_SEC / 4)
    rlx_coordinator_roster_sync (self);
  maybe_evaluate (self, step);
  rlx_coordinator_auto_after_commit (self, n_members);
}

gboolean
rlx_coordinator_send_msg (RlxCoordinator *self, RlxPeer *p, const RlxMsg *m)
{
  gint64 t0 = rlx_round_stats_now ();
  gboolean ok = rlx_peer_set_send_msg (self->peers, p, RLX_SEND_CONTROL, m);

  rlx_round_stats_add_send (self->stats, rlx_round_stats_now () - t0);
  return ok;
}

gboolean
rlx_coordinator_send_frame (RlxCoordinator *self, RlxPeer *p, RlxSendClass klass, GBytes *frame,
                            gsize n, RlxPrecision precision)
{
  gint64 t0 = rlx_round_stats_now ();
  gboolean ok = rlx_peer_set_send_frame (self->peers, p, klass, frame, n, precision);

  rlx_round_stats_add_send (self->stats, rlx_round_stats_now () - t0);
  return ok;
}

void
rlx_coordinator_send_join (RlxCoordinator *self, const char *reason)
{
  RlxPeer *lp = rlx_peer_set_lookup (self->peers, rlx_leadership_get_leader (self->lead));
  RlxMsg m;

  if (lp == NULL)
    return;
  rlx_msg_init (&m, RLX_MSG_JOIN, self->node_id);
  m.u.join.reason = g_strdup (reason);
  m.u.join.step = applied (self);
  m.u.join.hash = rlx_replica_get_hash (self->replica);
  m.u.join.merge = rlx_lineage_is_changing (self->lineage);
  rlx_coordinator_send_msg (self, lp, &m);
  rlx_msg_clear (&m);
}

/* A peer's frames now come at another precision. */
void
rlx_coordinator_note_precision (RlxCoordinator *self, RlxPeer *p, RlxPrecision precision)
{
  RlxEvent *e;

  if (p->precision == precision)
    return;
  p->precision = precision;
  e = rlx_event_new (RLX_EVENT_PRECISION);
  e->u.precision.node = g_strdup (p->id);
  e->u.precision.precision = g_strdup (rlx_precision_to_string (precision));
  rlx_coordinator_emit_event (self, e);
  rlx_coordinator_roster_sync (self);
}

void
rlx_coordinator_roster_sync (RlxCoordinator *self)
{
  GPtrArray *ids = members (self);
  g_autofree RlxRosterRow *rows = g_new0 (RlxRosterRow, MAX (ids->len, 1));
  g_autoptr(GPtrArray) links = g_ptr_array_new_with_free_func (g_free);
  RlxBackend *b = rlx_worker_backend (self->worker);
  const RlxWireCounters *t = rlx_peer_set_get_totals (self->peers);
  const char *leader = rlx_leadership_get_leader (self->lead);
  RlxRole r = role (self);

  self->roster_synced_at = g_get_monotonic_time ();
  for (guint i = 0; i < ids->len; i++)
    {
      const char *id = g_ptr_array_index (ids, i);
      RlxRosterRow *row = &rows[i];
      RlxPeer *p = rlx_peer_set_lookup (self->peers, id);

      row->node_id = id;
      row->is_self = is_self (self, id);
      row->is_leader = g_strcmp0 (id, leader) == 0;
      row->state = "computing";
      if (row->is_self)
        {
          row->host = self->host;
          row->backend = rlx_backend_name (b);
          row->device = rlx_backend_device (b);
          row->fallback = rlx_backend_fallback (b);
          row->precision = rlx_precision_to_string (self->ctx.precision);
          row->speed = self->ctx.self_speed;
          row->bytes_tx = t->tx_bytes;
          row->bytes_rx = t->rx_bytes;
          if (r == RLX_ROLE_JOINING || r == RLX_ROLE_ALONE)
            row->state = "rejoining";
          else if (r == RLX_ROLE_STOPPED)
            row->state = "leaving";
          else if (rlx_worker_pending (self->worker) == 0)
            row->state = "waiting";
        }
      else if (p)
        {
          if (self->autosync != NULL)
            {
              char *link = rlx_link_estimates_describe_one (
                  rlx_sync_auto_estimates (self->autosync), id);

              if (link)
                g_ptr_array_add (links, link);
              row->link = link;
            }
          gint64 silent = g_get_monotonic_time () - p->last_rx;
          row->host = p->host;
          row->backend = p->backend;
          row->device = p->device;
          row->fallback = p->fallback;
          row->precision = rlx_precision_to_string (p->precision);
          row->speed = p->speed;
          /* what the rank sent and received on its link with this node */
          row->bytes_tx = p->counters.rx_bytes;
          row->bytes_rx = p->counters.tx_bytes;
          if (silent > (gint64) rlx_peer_set_timeout_for (self->peers, p) * 500)
            row->state = "stalled";
          else if (p->role == RLX_ROLE_JOINING)
            row->state = "rejoining";
        }
      else
        row->state = "stalled";
    }
  rlx_roster_sync (self->roster, rows, ids->len);
  rlx_coordinator_notify (self, PROP_MEMBERS);
}

/* Replace the member list with @next (taken), reporting the difference. */
void
rlx_coordinator_members_replace (RlxCoordinator *self, GPtrArray *next)
{
  GPtrArray *cur = members (self);

  for (guint i = 0; i < cur->len; i++)
    {
      const char *id = g_ptr_array_index (cur, i);
      if (!str_array_contains (next, id) && !is_self (self, id))
        rlx_coordinator_emit_member (self, RLX_EVENT_MEMBER_LEFT, id, "removed by the leader");
    }
  for (guint i = 0; i < next->len; i++)
    {
      const char *id = g_ptr_array_index (next, i);
      if (!str_array_contains (cur, id) && !is_self (self, id))
        rlx_coordinator_emit_member (self, RLX_EVENT_MEMBER_JOINED, id, NULL);
    }
  rlx_leadership_set_members (self->lead, next);
  rlx_coordinator_roster_sync (self);
  rlx_coordinator_link_members (self);
}

/* Every member of our cohort should have a link to every other: look for
 * one we have none to (at most once a second). A member whose links to the
 * others closed while it stood still, back through its leader's link, took
 * them for gone when the leader died and led beside the real successor
 * (chaos.py seed 64: two leaders of term 4, 2,782 steps forked). */
void
rlx_coordinator_link_members (RlxCoordinator *self)
{
  GPtrArray *cur = members (self);
  gboolean missing = FALSE;
  gint64 now = g_get_monotonic_time ();

  for (guint i = 0; i < cur->len && !missing; i++)
    missing = !is_alive (g_ptr_array_index (cur, i), self);
  if (missing && now - self->members_looked > G_USEC_PER_SEC)
    {
      self->members_looked = now;
      rlx_coordinator_emit_discover (self);
    }
}

char *
rlx_checkpoint_path_for_cohort (const char *cohort)
{
  g_return_val_if_fail (cohort != NULL, NULL);
  return g_build_filename (g_get_user_data_dir (), "rlx-cluster", cohort,
                           "checkpoint.safetensors", NULL);
}

void
rlx_coordinator_maybe_checkpoint (RlxCoordinator *self, guint64 step, gboolean force)
{
  if (!rlx_leadership_is_leader (self->lead))
    return;
  if (force || (self->checkpoint_every > 0 && step > 0 && step % self->checkpoint_every == 0))
    {
      RlxOuterSettings outer;

      /* (the outer momentum goes with it, as the mode in force describes it) */
      rlx_sync_state_settings (self->ctx.sync, self->ctx.lr, &outer);
      rlx_checkpointer_set_outer (self->ckpt, self->queue, &outer, self->ctx.precision);
      rlx_checkpointer_set_lineage (self->ckpt, rlx_lineage_id (self->lineage)->lin);
      rlx_checkpointer_save (self->ckpt, self->replica, self->ctx.lr);
    }
}

void
rlx_coordinator_on_checkpoint_written (RlxCheckpointer *ckpt, guint64 step, const char *path,
                                       gpointer user_data)
{
  RlxCoordinator *self = user_data;
  RlxEvent *e = rlx_event_new (RLX_EVENT_CHECKPOINT);

  e->u.checkpoint.step = step;
  e->u.checkpoint.path = g_strdup (path);
  rlx_coordinator_emit_event (self, e);
  if (self->finish_after_checkpoint && !self->finished && !rlx_checkpointer_busy (ckpt))
    rlx_coordinator_finish (self, TRUE, "all steps committed");
  if (self->leave_id != 0)
    self->leave_deadline = MIN (self->leave_deadline, g_get_monotonic_time () + 1000000);
}

void
rlx_coordinator_on_checkpoint_failed (RlxCheckpointer *ckpt, const char *message,
                                      gpointer user_data)
{
  RlxCoordinator *self = user_data;

  rlx_coordinator_emit_error (self, message);
  if (self->finish_after_checkpoint && !self->finished && !rlx_checkpointer_busy (ckpt))
    rlx_coordinator_finish (self, TRUE, "all steps committed");
}

static void
eval_free (gpointer p)
{
  Eval *e = p;

  g_clear_object (&e->self);
  g_clear_object (&e->cancellable);
  g_free (e->params);
  g_free (e);
}

/* The read's own Eval (the task gets a copy): one read fewer pending. */
static void
eval_read_free (gpointer p)
{
  Eval *e = p;

  e->self->eval_reads--;
  eval_free (e);
}

static void
eval_copy (const float *params, gsize n, gpointer data)
{
  ((Eval *) data)->params = g_memdup2 (params, n * sizeof (float));
}

/* Evaluations of this process handed to a thread and not yet returned
 * from it (any thread). */
static gint eval_threads_running;

/* With the slow-evaluation fault, an exit while an evaluation runs aborts
 * with a message, where it would otherwise die of SIGSEGV now and then
 * (OpenBLAS's exit handler unmaps its buffers under the evaluation): so
 * that test-stop-evaluating fails every time the leave does not wait. */
static void
check_no_evaluation_at_exit (void)
{
  int n = g_atomic_int_get (&eval_threads_running);

  if (n > 0)
    {
      g_printerr ("the process exits while %d test-accuracy evaluation(s) run\n", n);
      abort ();
    }
}

/* Evaluation thread: the whole test split, again until slow_ms passed
 * when the fault plan asks for a slow evaluation; stops at a leave. */
static void
eval_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  Eval *e = data;
  RlxCpuTrainer *trainer;
  gint64 until = g_get_monotonic_time () + (gint64) e->slow_ms * 1000;

  trainer = rlx_cpu_trainer_new (e->self->model, 1000);

  do
    e->done = rlx_cpu_evaluate_cancellable (trainer, e->params, e->self->dataset,
                                            RLX_SPLIT_TEST, e->cancellable, &e->accuracy,
                                            &e->loss);
  while (e->done && e->slow_ms > 0 && g_get_monotonic_time () < until);
  /* (freed before the return: after it, nothing here may run that the
   * coordinator's leave waits for) */
  rlx_cpu_trainer_free (trainer);
  g_atomic_int_add (&eval_threads_running, -1);
  g_task_return_boolean (task, TRUE);
}

static void
on_evaluated (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Eval *e = g_task_get_task_data (G_TASK (result));
  /* Dropped here, on the coordinator's thread: the task (and its data) may
   * be freed last on the evaluation thread, and a coordinator finalized
   * there would free its worker on the wrong thread. */
  g_autoptr(RlxCoordinator) self = g_steal_pointer (&e->self);
  RlxEvent *ev;

  g_assert (self->evaluations > 0);
  self->evaluations--;
  if (!e->done || g_cancellable_is_cancelled (self->eval_cancel))
    return;
  ev = rlx_event_new (RLX_EVENT_EVALUATED);
  ev->u.evaluated.step = e->step;
  ev->u.evaluated.accuracy = e->accuracy;
  ev->u.evaluated.test_loss = isfinite (e->loss) ? e->loss : -1;
  rlx_coordinator_emit_event (self, ev);
}

static void
on_eval_copied (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  Eval *e = user_data;
  g_autoptr(GTask) task = NULL;
  Eval *mine;

  /* left (or going away) since the copy was asked for */
  if (!ok || e->params == NULL || g_cancellable_is_cancelled (e->self->eval_cancel))
    return;
  task = g_task_new (NULL, NULL, on_evaluated, NULL);
  mine = g_new0 (Eval, 1);
  /* The replica frees @e after this: the task gets its own. */
  *mine = *e;
  g_object_ref (mine->self);
  e->params = NULL;
  mine->step = rlx_replica_get_step (replica);
  mine->slow_ms = mine->self->ctx.faults.eval_ms;
  mine->cancellable = g_object_ref (mine->self->eval_cancel);
  if (mine->slow_ms > 0)
    {
      static gsize once = 0;

      if (g_once_init_enter (&once))
        g_once_init_leave (&once, atexit (check_no_evaluation_at_exit) == 0 ? 1 : 2);
    }
  mine->self->evaluations++;
  g_atomic_int_inc (&eval_threads_running);
  g_task_set_task_data (task, mine, eval_free);
  rlx_fp_task_run_in_thread (task, eval_thread);
}

static void
maybe_evaluate (RlxCoordinator *self, guint64 step)
{
  Eval *e;

  if (self->evaluate_every == 0 || step == 0 || step % self->evaluate_every != 0 ||
      g_cancellable_is_cancelled (self->eval_cancel))
    return;
  /* At most evaluate_threads at once (1 unless asked), those whose
   * parameters are still being read included (a read waits behind the
   * compute thread's step): one due while that many are is skipped.
   * Queued, evaluations slower than the steps (mnist-mlp-xl every step)
   * piled up a thread and two parameter-sized copies each, without bound,
   * and took the cores from the training. */
  if (self->eval_reads + self->evaluations >= self->evaluate_threads)
    return;
  e = g_new0 (Eval, 1);
  e->self = g_object_ref (self);
  self->eval_reads++;
  rlx_replica_read (self->replica, eval_copy, e, eval_read_free, on_eval_copied, e);
}

guint
rlx_coordinator_get_evaluations (RlxCoordinator *self)
{
  g_return_val_if_fail (RLX_IS_COORDINATOR (self), 0);
  return self->evaluations;
}

/* ── what the role objects may ask of the coordinator (RlxCohortOps) ──── */

static void
op_emit (gpointer owner, RlxEvent *event)
{
  rlx_coordinator_emit_event (owner, event);
}

static gboolean
op_send_msg (gpointer owner, RlxPeer *p, const RlxMsg *m)
{
  return rlx_coordinator_send_msg (owner, p, m);
}

static gboolean
op_send_frame (gpointer owner, RlxPeer *p, RlxSendClass klass, GBytes *frame, gsize n,
               RlxPrecision precision)
{
  return rlx_coordinator_send_frame (owner, p, klass, frame, n, precision);
}

static void
op_committed (gpointer owner, guint64 step, guint64 hash, double loss, guint64 samples,
              GPtrArray *contributors, guint late, guint rejected, guint n_members, guint agree)
{
  rlx_coordinator_emit_step (owner, step, hash, loss, samples, contributors, late, rejected,
                             n_members, agree);
  rlx_coordinator_note_led_commit (owner);
}

static void
op_step_changed (gpointer owner)
{
  rlx_coordinator_notify (owner, PROP_STEP);
}

static void
op_assigned (gpointer owner, guint64 step, guint count)
{
  rlx_coordinator_note_assigned (owner, step, count);
}

static void
op_member_event (gpointer owner, RlxEventKind kind, const char *id, const char *reason)
{
  rlx_coordinator_emit_member (owner, kind, id, reason);
  rlx_coordinator_roster_sync (owner);
}

static void
op_peer_precision (gpointer owner, RlxPeer *p, RlxPrecision precision)
{
  rlx_coordinator_note_precision (owner, p, precision);
}

static void
op_checkpoint (gpointer owner, guint64 step, gboolean final)
{
  RlxCoordinator *self = owner;

  if (final)
    self->finish_after_checkpoint = TRUE;
  rlx_coordinator_maybe_checkpoint (self, step, final);
}

static void
op_training (gpointer owner)
{
  rlx_coordinator_busy_poll_begin (owner);
}

static void
op_finish (gpointer owner, gboolean success, const char *message)
{
  rlx_coordinator_finish (owner, success, message);
}

static gboolean
op_finished (gpointer owner)
{
  return ((RlxCoordinator *) owner)->finished;
}

static void
op_request_snapshot (gpointer owner, const char *reason)
{
  rlx_coordinator_request_snapshot (owner, reason);
}

static void
op_transition (gpointer owner, RlxRole to, const char *leader, guint64 term, const char *reason)
{
  rlx_coordinator_transition (owner, to, leader, term, reason);
}

static void
op_replace_members (gpointer owner, GPtrArray *members)
{
  rlx_coordinator_members_replace (owner, members);
}

static void
op_joined (gpointer owner)
{
  RlxCoordinator *self = owner;

  if (self->joined_reported)
    return;
  rlx_coordinator_emit_leader (self);
  rlx_coordinator_emit_joined (self);
}

static void
op_rounds_begin (gpointer owner, guint n_members)
{
  rlx_coordinator_auto_rounds_begin (owner, n_members);
}

static void
op_drop_member (gpointer owner, const char *id, const char *reason)
{
  rlx_coordinator_drop_member (owner, id, reason);
}

const RlxCohortOps rlx_coordinator_cohort_ops = {
  .emit = op_emit,
  .send_msg = op_send_msg,
  .send_frame = op_send_frame,
  .committed = op_committed,
  .step_changed = op_step_changed,
  .assigned = op_assigned,
  .member_event = op_member_event,
  .peer_precision = op_peer_precision,
  .checkpoint = op_checkpoint,
  .training = op_training,
  .finish = op_finish,
  .finished = op_finished,
  .request_snapshot = op_request_snapshot,
  .transition = op_transition,
  .replace_members = op_replace_members,
  .joined = op_joined,
  .rounds_begin = op_rounds_begin,
  .drop_member = op_drop_member,
};
