/* rlx-cohort-context.c — helpers over the cohort context, and snapshots
 * out (rlx-cohort-context.h) */
#include "rlx-config.h"
#include "rlx-cohort-context.h"
#include "core/rlx-sources.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

void
rlx_cohort_emit_error (RlxCohortContext *ctx, const char *message)
{
  ctx->ops->emit (ctx->owner, rlx_event_note_new (RLX_EVENT_ERROR, ctx->node_id, message));
}

void
rlx_cohort_emit_snapshot_from (RlxCohortContext *ctx, const char *from, guint64 step,
                               guint64 hash, const char *reason)
{
  RlxEvent *e = rlx_event_new (RLX_EVENT_SNAPSHOT);

  e->u.snapshot.from = g_strdup (from);
  e->u.snapshot.step = step;
  e->u.snapshot.hash = hash;
  e->u.snapshot.reason = g_strdup (reason);
  ctx->ops->emit (ctx->owner, e);
}

void
rlx_cohort_send_leader (RlxCohortContext *ctx, RlxPeer *p)
{
  RlxMsg m;

  rlx_msg_init (&m, RLX_MSG_LEADER, ctx->node_id);
  m.u.leader.leader = g_strdup (rlx_leadership_get_leader (ctx->lead));
  m.u.leader.term = rlx_leadership_get_term (ctx->lead);
  m.u.leader.step = rlx_cohort_applied (ctx);
  m.u.leader.lineage = *rlx_lineage_id (ctx->lineage);
  if (p)
    ctx->ops->send_msg (ctx->owner, p, &m);
  else
    rlx_peer_set_broadcast (ctx->peers, &m);
  rlx_msg_clear (&m);
}

void
rlx_cohort_note_self_speed (RlxCohortContext *ctx, guint samples, gint64 compute_us)
{
  double sp;

  if (compute_us <= 0)
    return;
  sp = samples * 1e6 / compute_us;
  ctx->self_speed = ctx->self_speed > 0 ? 0.7 * ctx->self_speed + 0.3 * sp : sp;
  ctx->self_compute_us = ctx->self_compute_us > 0
                           ? 0.7 * ctx->self_compute_us + 0.3 * (double) compute_us
                           : (double) compute_us;
}

void
rlx_cohort_note_inner (double *smoothed, double inner_us)
{
  if (!(inner_us > 0))
    return;
  *smoothed = *smoothed > 0 ? 0.7 * *smoothed + 0.3 * inner_us : inner_us;
}

/* The die_at test fault: the commit @frame reaches every member but the
 * one that takes over, then this process dies (SIGKILL) once the frames
 * are written — so the new leader is behind a member, deterministically. */
static gboolean
on_die_poll (gpointer user_data)
{
  RlxCohortContext *ctx = user_data;

  for (guint i = 0; i < rlx_peer_set_size (ctx->peers); i++)
    if (!rlx_peer_set_is_flushed (ctx->peers, rlx_peer_set_nth (ctx->peers, i)))
      return G_SOURCE_CONTINUE;
  kill (getpid (), SIGKILL);
  return G_SOURCE_REMOVE;
}

void
rlx_cohort_die_after_partial_commit (RlxCohortContext *ctx, GBytes *frame)
{
  GPtrArray *ids = rlx_cohort_members (ctx);
  const char *successor = NULL;

  for (guint i = 0; i < ids->len && successor == NULL; i++)
    if (!rlx_cohort_is_self (ctx, g_ptr_array_index (ids, i)))
      successor = g_ptr_array_index (ids, i);
  for (guint i = 0; i < ids->len; i++)
    {
      const char *id = g_ptr_array_index (ids, i);
      RlxPeer *p = rlx_peer_set_lookup (ctx->peers, id);
      if (p && g_strcmp0 (id, successor) != 0)
        ctx->ops->send_frame (ctx->owner, p, RLX_SEND_STEP, frame, ctx->n, ctx->precision);
    }
  rlx_peer_set_stop (ctx->peers);
  rlx_timeout_add (1, on_die_poll, ctx);
}

/* ── snapshots out ──────────────────────────────────────────────────────── */

struct _RlxSnapshots {
  RlxCohortContext   *ctx;
  RlxSnapshotSentFunc sent;
  gpointer            user_data;
  guint               pending;
};

typedef struct {
  RlxSnapshots   *snapshots;
  GObject        *owner;        /* referenced while the job is in flight */
  RlxMsg          header;
  char           *to;
  char           *reason;
  guint64         around;       /* the joiner's step: the hashes end there (0: newest) */
  guint8         *buf;          /* the frame's payload, with room for its header in front */
  GBytes         *frame;
  gboolean        counted;      /* in snapshots->pending */
  gboolean        outer;        /* buf holds θ then the outer momentum */
  guint64         mhash;
  gboolean        as_leader;    /* asked while this node led */
} SnapshotJob;

/* Room in front of a snapshot's parameters for its header: the member list
 * and the hash history at their longest, with room to spare. */
#define SNAPSHOT_HEADROOM (16384 + RLX_MSG_MAX_MEMBERS * (RLX_MSG_MAX_ID + 8) + \
                           RLX_MSG_MAX_HASHES * 24)

RlxSnapshots *
rlx_snapshots_new (RlxCohortContext *ctx, RlxSnapshotSentFunc sent, gpointer user_data)
{
  RlxSnapshots *self = g_new0 (RlxSnapshots, 1);

  self->ctx = ctx;
  self->sent = sent;
  self->user_data = user_data;
  return self;
}

void
rlx_snapshots_free (RlxSnapshots *self)
{
  g_free (self);
}

guint
rlx_snapshots_pending (RlxSnapshots *self)
{
  return self->pending;
}

static void
snapshot_job_free (gpointer p)
{
  SnapshotJob *j = p;

  if (j->counted)
    j->snapshots->pending--;
  rlx_msg_clear (&j->header);
  g_free (j->to);
  g_free (j->reason);
  g_free (j->buf);
  g_clear_pointer (&j->frame, g_bytes_unref);
  /* last: the owner (and with it the snapshots) may go with it */
  g_object_unref (j->owner);
  g_free (j);
}

/* On the worker thread: the parameters where the frame will carry them. */
static void
snapshot_copy (const float *params, gsize n, gpointer data)
{
  SnapshotJob *j = data;
  /* (the read runs on the worker, which holds the outer momentum of the
   * same moment: a joiner enters an outer round with both) */
  const float *m = rlx_compute_queue_momentum_w (j->snapshots->ctx->queue);

  j->outer = m != NULL;
  j->buf = g_malloc (SNAPSHOT_HEADROOM + (m ? 2 : 1) * n * sizeof (float));
  memcpy (j->buf + SNAPSHOT_HEADROOM, params, n * sizeof (float));
  if (m != NULL)
    {
      memcpy (j->buf + SNAPSHOT_HEADROOM + n * sizeof (float), m, n * sizeof (float));
      j->mhash = rlx_params_hash (m, n);
    }
}

/* The header, with the state the parameters were read at (what the replica
 * says when the read completes: the worker delivers in order). */
static void
snapshot_build (RlxCohortContext *ctx, SnapshotJob *j)
{
  RlxReplica *replica = ctx->replica;
  RlxMsgSnapshot *s = &j->header.u.snapshot;
  g_autoptr(GError) error = NULL;

  s->step = rlx_replica_get_step (replica);
  s->hash = rlx_replica_get_hash (replica);
  s->seed = g_strdup_printf ("%" G_GUINT64_FORMAT, rlx_replica_get_seed (replica));
  s->epoch = rlx_replica_get_epoch (replica);
  s->pos = rlx_replica_get_pos (replica);
  s->loss = rlx_replica_get_loss (replica);
  /* The hashes end at the joiner's step when it is behind: where it parted
   * from this history is then among them (a merge, or steps it applied that
   * the cohort never committed), and the "merged" it reports is exact. */
  s->hashes = rlx_replica_history_until (replica, j->around ? j->around : G_MAXUINT64,
                                         RLX_MSG_MAX_HASHES, &s->hashes_from);
  /* and a few further back, spaced ever wider: where a long split parted
   * (before the dense window) is found within a factor of two */
  s->sparse = g_array_new (FALSE, FALSE, sizeof (guint64));
  for (guint k = 0; k < RLX_MSG_SPARSE_MAX; k++)
    {
      guint64 back = (guint64) RLX_MSG_SPARSE_BASE << k, h;

      if (s->hashes_from < back || !rlx_replica_hash_at (replica, s->hashes_from - back, &h))
        break;
      g_array_append_val (s->sparse, h);
    }
  s->outer = j->outer;
  s->mhash = j->mhash;
  j->frame = rlx_msg_frame_wrap (&j->header, (j->outer ? 2 : 1) * ctx->n, RLX_PRECISION_F32, 1.0,
                                 g_steal_pointer (&j->buf), SNAPSHOT_HEADROOM, &error);
  if (j->frame == NULL)
    g_warning ("a snapshot could not be made: %s", error->message);
}

static void
on_snapshot_built (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  SnapshotJob *j = user_data;
  RlxSnapshots *self = j->snapshots;
  RlxCohortContext *ctx = self->ctx;
  RlxPeer *p = rlx_peer_set_lookup (ctx->peers, j->to);
  gint64 t0 = rlx_round_stats_now ();
  RlxEvent *e;

  self->pending--;
  j->counted = FALSE;
  if (ok && j->buf != NULL)
    snapshot_build (ctx, j);
  rlx_round_stats_add_busy (ctx->stats, rlx_round_stats_now () - t0);
  if (p == NULL || j->frame == NULL || rlx_leadership_get_role (ctx->lead) == RLX_ROLE_STOPPED)
    return;
  /* Asked as leader, and it stepped down while the worker read the state:
   * the read may hold an update of a round it gave up leading, which the
   * header's step and hash (the replica's, never committed) do not say, and
   * the joiner would refuse it as not matching its hash — or load the state
   * of a node that leads nobody (the chaos run at 35550f8: a leader that
   * thawed served one and rejoined in the same turn of its loop). */
  if (j->as_leader && !rlx_leadership_is_leader (ctx->lead))
    return;
  ctx->ops->send_frame (ctx->owner, p, RLX_SEND_BULK, j->frame, (j->outer ? 2 : 1) * ctx->n,
                        RLX_PRECISION_F32);
  e = rlx_event_new (RLX_EVENT_SNAPSHOT);
  e->u.snapshot.to = g_strdup (j->to);
  e->u.snapshot.step = j->header.u.snapshot.step;
  e->u.snapshot.hash = j->header.u.snapshot.hash;
  e->u.snapshot.reason = g_strdup (j->reason);
  self->sent (j->to, j->header.u.snapshot.step, j->header.u.snapshot.hash, e, self->user_data);
}

void
rlx_snapshots_send (RlxSnapshots *self, RlxPeer *p, const char *reason)
{
  rlx_snapshots_send_around (self, p, reason, 0);
}

void
rlx_snapshots_send_around (RlxSnapshots *self, RlxPeer *p, const char *reason, guint64 around)
{
  RlxCohortContext *ctx = self->ctx;
  SnapshotJob *j = g_new0 (SnapshotJob, 1);
  const char *leader = rlx_leadership_get_leader (ctx->lead);

  j->around = around;
  j->snapshots = self;
  j->owner = g_object_ref (ctx->owner);
  j->to = g_strdup (p->id);
  j->reason = g_strdup (reason);
  rlx_msg_init (&j->header, RLX_MSG_SNAPSHOT, ctx->node_id);
  j->header.u.snapshot.term = rlx_leadership_get_term (ctx->lead);
  j->header.u.snapshot.leader = g_strdup (leader ? leader : ctx->node_id);
  j->header.u.snapshot.members = rlx_cohort_str_array_copy (rlx_cohort_members (ctx));
  j->header.u.snapshot.lineage = *rlx_lineage_id (ctx->lineage);
  j->header.u.snapshot.tbase = rlx_lineage_term_base (ctx->lineage);
  j->as_leader = rlx_leadership_is_leader (ctx->lead);
  self->pending++;
  j->counted = TRUE;
  rlx_replica_read (ctx->replica, snapshot_copy, j, snapshot_job_free, on_snapshot_built, j);
}
