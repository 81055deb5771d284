/* rlx-coordinator-auto.c — the coordinator's side of `--sync auto`
 *
 * Every node measures its links (core/cohort/rlx-link-estimates.h: a ready
 * peer's link is watched, a lost one's forgotten) and reports them in the
 * "links" event when the figures change (at most every LINKS_EVERY_US), so
 * `--json`, the app and the logs show what auto sees. The leader, when the
 * cohort asked for auto, also notes the slowest rank's compute time of one
 * inner step after each commit (its own measured speed and each member's,
 * at their batches, or in the outer mode their inner steps alone) and,
 * when RlxSyncAuto says a choice is due — after a commit, or as the leader
 * begins its first rounds (a provisional choice over a remote link) —
 * chooses through rlx_coordinator_rechoose_sync (which announces it in the step
 * frames and reports "sync" with the reason when the mode or H changed).
 * A new leader starts from `step` (roles: rechoose with nothing measured)
 * and chooses again once it has measured its own links.
 *
 * Threads: the coordinator's.
 */
#include "rlx-config.h"
#include "rlx-coordinator-private.h"

#define LINKS_EVERY_US (2 * G_USEC_PER_SEC)

static RlxSyncAuto *
autosync (RlxCoordinator *self)
{
  if (self->autosync == NULL)
    self->autosync = rlx_sync_auto_new ();
  return self->autosync;
}

void
rlx_coordinator_auto_peer_ready (RlxCoordinator *self, RlxPeer *p)
{
  RlxLinkEstimates *est = rlx_sync_auto_estimates (autosync (self));
  const RlxLinkEstimate *known;

  if (p->id == NULL || p->link == NULL)
    return;
  known = rlx_link_estimates_get (est, p->id);
  /* a hello again on the same link changes nothing measured */
  if (known == NULL || rlx_link_estimates_get_link (est, p->id) != p->link)
    rlx_link_estimates_watch (est, p->id, p->link);
}

void
rlx_coordinator_auto_peer_lost (RlxCoordinator *self, const char *id)
{
  if (self->autosync != NULL && id != NULL)
    rlx_link_estimates_remove (rlx_sync_auto_estimates (self->autosync), id);
}

/* The slowest rank's compute time of one inner step, ms (0: nothing
 * measured yet). In the outer mode, each rank's own measure of its inner
 * steps alone (rlx_outer_engine_inner_us: a member's as its grad says,
 * bounded by what it delivers) — its samples over its speed there also
 * count the round's setup, its pseudo-gradient and, on the leader, the
 * sums and the finish run between its inner steps, which read up to twice
 * the inner step and made auto pick a smaller H than the link needs. In the
 * step mode (or before a rank's first outer round), its batch over the
 * speed it reports. */
static double
slowest_step_ms (RlxCoordinator *self)
{
  gboolean outer = rlx_sync_state_mode (self->ctx.sync) == RLX_SYNC_OUTER;
  double worst = 0.0;
  GPtrArray *ids = rlx_cohort_members (&self->ctx);

  if (outer && self->ctx.self_inner_us > 0)
    worst = self->ctx.self_inner_us / 1000.0;
  else if (self->ctx.self_speed > 0 && self->ctx.batch > 0)
    worst = self->ctx.batch / self->ctx.self_speed * 1000.0;
  for (guint i = 0; ids != NULL && i < ids->len; i++)
    {
      const char *id = g_ptr_array_index (ids, i);
      RlxPeer *p = rlx_cohort_is_self (&self->ctx, id) ? NULL
                                                       : rlx_peer_set_lookup (self->peers, id);

      if (p != NULL && outer && p->inner_us > 0)
        worst = MAX (worst, p->inner_us / 1000.0);
      else if (p != NULL && p->speed > 0 && p->batch > 0)
        worst = MAX (worst, p->batch / p->speed * 1000.0);
    }
  return worst;
}

static void
emit_links (RlxCoordinator *self, gint64 now)
{
  RlxLinkEstimates *est = rlx_sync_auto_estimates (autosync (self));
  g_autofree char *text = NULL;
  guint remote = 0, local = 0;
  RlxEvent *e;

  if (rlx_link_estimates_size (est) == 0 || now - self->links_emitted_at < LINKS_EVERY_US)
    return;
  text = rlx_link_estimates_describe (est);
  if (g_strcmp0 (text, self->links_text) == 0)
    return;
  for (guint i = 0; i < rlx_link_estimates_size (est); i++)
    {
      const RlxLinkEstimate *l = rlx_link_estimates_nth (est, i);

      if (l != NULL && l->local)
        local++;
      else
        remote++;
    }
  e = rlx_event_new (RLX_EVENT_LINKS);
  e->u.links.text = g_strdup (text);
  e->u.links.remote = remote;
  e->u.links.local = local;
  g_free (self->links_text);
  self->links_text = g_steal_pointer (&text);
  self->links_emitted_at = now;
  rlx_coordinator_emit_event (self, e);
}

/* Feed what the heartbeats measured, report the links, and as the leader
 * of an auto cohort choose when a choice is due (noting the step time of
 * the commit just made first, with @note_step). */
static void
consider (RlxCoordinator *self, guint n_members, gboolean note_step)
{
  RlxSyncAuto *a = autosync (self);
  RlxLinkEstimates *est = rlx_sync_auto_estimates (a);
  gint64 now = g_get_monotonic_time ();
  const RlxSyncRequest *request = rlx_sync_state_request (self->ctx.sync);
  RlxSyncInputs in;

  /* the heartbeats' round trips (a remote link's QUIC figure wins) */
  for (guint i = 0; i < rlx_peer_set_size (self->peers); i++)
    {
      RlxPeer *p = rlx_peer_set_nth (self->peers, i);

      if (p != NULL && p->id != NULL && p->rtt_us > 0)
        rlx_link_estimates_rtt (est, p->id, p->rtt_us, RLX_LINK_RTT_HEARTBEAT);
    }
  emit_links (self, now);
  if (request->mode != RLX_SYNC_AUTO || !rlx_leadership_is_leader (self->lead))
    return;
  if (rlx_leadership_get_term (self->lead) != self->autosync_term)
    {
      /* a new term: this node chose `step` on taking over */
      rlx_sync_auto_forget (a);
      self->autosync_term = rlx_leadership_get_term (self->lead);
    }
  if (note_step)
    rlx_sync_auto_note_step (a, slowest_step_ms (self));
  if (rlx_sync_auto_due (a, now, MAX (n_members, 1),
                         (guint64) self->n * rlx_precision_element_size (self->ctx.precision),
                         &in))
    {
      /* never beyond the H this model trains well at */
      in.max_h = rlx_sync_max_h_for_model (self->model != NULL ? self->model->slug : NULL);
      in.value_bytes = (guint) rlx_precision_element_size (self->ctx.precision);
      rlx_coordinator_rechoose_sync (self, &in);
      rlx_sync_auto_chosen (a, now);
    }
}

void
rlx_coordinator_auto_after_commit (RlxCoordinator *self, guint n_members)
{
  consider (self, n_members, TRUE);
}

void
rlx_coordinator_auto_rounds_begin (RlxCoordinator *self, guint n_members)
{
  consider (self, n_members, FALSE);
}
