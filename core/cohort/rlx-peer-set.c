/* rlx-peer-set.c — links, hello, liveness and heartbeats (see rlx-peer-set.h) */
#include "rlx-config.h"
#include "core/rlx-sources.h"
#include "rlx-peer-set.h"

#include <string.h>

/* Control messages carry no array: a wire frame of them is its length and
 * a header the wire refuses over RLX_WIRE_DEFAULT_MAX_HEADER, far under the
 * control lane's cap (core/p2p/rlx-link.h). */
G_STATIC_ASSERT (4 + RLX_WIRE_DEFAULT_MAX_HEADER <= RLX_LINK_MAX_CONTROL_FRAME / 8);

#define HEARTBEAT_MS 500
/* Silence is judged this often between beats, so a peer is timed out
 * within this much of its timeout instead of within a beat (a frozen
 * leader was taken for gone 1.6–2.0 s into a 1.5 s timeout: every member
 * stood still for the difference; scripts/chaos.py, issue 29). */
#define SILENCE_CHECK_MS 100

struct _RlxPeerSet {
  GObject             parent_instance;
  char               *node_id, *cohort, *seed, *model, *dataset;
  RlxPeerSetHelloFunc hello_func;
  gpointer            hello_data;
  GPtrArray          *peers;          /* RlxPeer* */
  guint               timeout_ms;
  guint               heartbeat_id, check_id;
  gint64              last_tick, stalled_at, epoch;
  gint64              last_check;     /* when the silence check last ran */
  gint64              checks_from;    /* it judges nothing before this (our loop stood still) */
  gint64              gaps_ours_until; /* silences ending before this are our stall's */
  gint64              stall_end_ms;    /* our clock (ms from epoch) when our last stall of a
                                        * missed beat or more ended */
  RlxWireCounters     totals;
};

G_DEFINE_FINAL_TYPE (RlxPeerSet, rlx_peer_set, G_TYPE_OBJECT)

enum {
  SIG_PEER_READY, SIG_MESSAGE, SIG_PEER_STATE, SIG_PEER_LOST, SIG_REFUSED, SIG_DROPPED, SIG_SEND_FAILED,
  SIG_BAD_FRAME, N_SIGNALS
};
static guint signals[N_SIGNALS];

static void
peer_disconnect (RlxPeer *p)
{
  if (p->link == NULL)
    return;
  g_clear_signal_handler (&p->frame_id, p->link);
  g_clear_signal_handler (&p->closed_id, p->link);
  if (p->sender)
    g_clear_signal_handler (&p->dropped_id, p->sender);
}

static void
peer_free (gpointer data)
{
  RlxPeer *p = data;

  peer_disconnect (p);
  g_clear_object (&p->sender);
  g_clear_object (&p->link);
  g_free (p->id);
  g_free (p->host);
  g_free (p->backend);
  g_free (p->device);
  g_free (p->fallback);
  g_free (p->leader);
  g_free (p->hb_leader);
  g_free (p->close_reason);
  g_free (p);
}

static void
rlx_peer_set_dispose (GObject *object)
{
  RlxPeerSet *self = RLX_PEER_SET (object);

  g_clear_handle_id (&self->heartbeat_id, rlx_source_remove);
  g_clear_handle_id (&self->check_id, rlx_source_remove);
  if (self->peers)
    g_ptr_array_set_size (self->peers, 0);
  G_OBJECT_CLASS (rlx_peer_set_parent_class)->dispose (object);
}

static void
rlx_peer_set_finalize (GObject *object)
{
  RlxPeerSet *self = RLX_PEER_SET (object);

  g_clear_pointer (&self->peers, g_ptr_array_unref);
  g_free (self->node_id);
  g_free (self->cohort);
  g_free (self->seed);
  g_free (self->model);
  g_free (self->dataset);
  G_OBJECT_CLASS (rlx_peer_set_parent_class)->finalize (object);
}

static void
rlx_peer_set_class_init (RlxPeerSetClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GType t = G_TYPE_FROM_CLASS (klass);

  object_class->dispose = rlx_peer_set_dispose;
  object_class->finalize = rlx_peer_set_finalize;
  signals[SIG_PEER_READY] = g_signal_new ("peer-ready", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                          G_TYPE_NONE, 2, G_TYPE_POINTER, G_TYPE_POINTER);
  signals[SIG_MESSAGE] = g_signal_new ("message", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                       G_TYPE_NONE, 2, G_TYPE_POINTER, G_TYPE_POINTER);
  signals[SIG_PEER_STATE] = g_signal_new ("peer-state", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                          G_TYPE_NONE, 1, G_TYPE_POINTER);
  signals[SIG_PEER_LOST] = g_signal_new ("peer-lost", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                         G_TYPE_NONE, 2, G_TYPE_POINTER, G_TYPE_STRING);
  signals[SIG_REFUSED] = g_signal_new ("refused", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                       G_TYPE_NONE, 5, G_TYPE_STRING, G_TYPE_STRING,
                                       G_TYPE_STRING, G_TYPE_POINTER, G_TYPE_POINTER);
  signals[SIG_DROPPED] = g_signal_new ("dropped", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                       G_TYPE_NONE, 4, G_TYPE_POINTER, G_TYPE_STRING,
                                       G_TYPE_UINT64, G_TYPE_STRING);
  signals[SIG_SEND_FAILED] = g_signal_new ("send-failed", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                                           NULL, G_TYPE_NONE, 2, G_TYPE_POINTER, G_TYPE_STRING);
  signals[SIG_BAD_FRAME] = g_signal_new ("bad-frame", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                         G_TYPE_NONE, 2, G_TYPE_POINTER, G_TYPE_STRING);
}

static void
rlx_peer_set_init (RlxPeerSet *self)
{
  self->peers = g_ptr_array_new_with_free_func (peer_free);
  self->timeout_ms = 3000;
  self->epoch = g_get_monotonic_time ();
}

RlxPeerSet *
rlx_peer_set_new (const RlxPeerSetIdentity *me, RlxPeerSetHelloFunc hello_func, gpointer user_data)
{
  RlxPeerSet *self;

  g_return_val_if_fail (me != NULL && me->node_id != NULL, NULL);
  g_return_val_if_fail (hello_func != NULL, NULL);

  self = g_object_new (RLX_TYPE_PEER_SET, NULL);
  self->node_id = g_strdup (me->node_id);
  self->cohort = g_strdup (me->cohort);
  self->seed = g_strdup (me->seed);
  self->model = g_strdup (me->model);
  self->dataset = g_strdup (me->dataset);
  self->hello_func = hello_func;
  self->hello_data = user_data;
  return self;
}

void
rlx_peer_set_set_timeout (RlxPeerSet *self, guint timeout_ms)
{
  g_return_if_fail (RLX_IS_PEER_SET (self));
  self->timeout_ms = MAX (timeout_ms, 100u);
}

guint
rlx_peer_set_get_timeout (RlxPeerSet *self)
{
  return self->timeout_ms;
}

static RlxPeer *
peer_by_link (RlxPeerSet *self, RlxLink *link)
{
  for (guint i = 0; i < self->peers->len; i++)
    {
      RlxPeer *p = g_ptr_array_index (self->peers, i);
      if (p->link == link)
        return p;
    }
  return NULL;
}

RlxPeer *
rlx_peer_set_lookup (RlxPeerSet *self, const char *id)
{
  if (id == NULL)
    return NULL;
  for (guint i = 0; i < self->peers->len; i++)
    {
      RlxPeer *p = g_ptr_array_index (self->peers, i);
      if (p->ready && !p->refused && strcmp (p->id, id) == 0)
        return p;
    }
  return NULL;
}

guint
rlx_peer_set_size (RlxPeerSet *self)
{
  return self->peers->len;
}

RlxPeer *
rlx_peer_set_nth (RlxPeerSet *self, guint i)
{
  return i < self->peers->len ? g_ptr_array_index (self->peers, i) : NULL;
}

const RlxWireCounters *
rlx_peer_set_get_totals (RlxPeerSet *self)
{
  return &self->totals;
}

/* ── sending ────────────────────────────────────────────────────────────── */

gboolean
rlx_peer_set_send_frame (RlxPeerSet *self, RlxPeer *p, RlxSendClass klass, GBytes *frame,
                         gsize n_values, RlxPrecision precision)
{
  g_autoptr(GError) error = NULL;
  gsize len = g_bytes_get_size (frame);

  if (p->sender == NULL)
    return FALSE;
  /* Control never waits behind a bucket: its own lane. */
  if (!rlx_sender_send_lane (p->sender, klass,
                             klass == RLX_SEND_CONTROL ? RLX_LINK_LANE_CONTROL : RLX_LINK_LANE_BULK,
                             frame, &error))
    {
      if (!g_error_matches (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED))
        {
          g_autofree char *reason = g_strdup_printf ("a frame of %" G_GSIZE_FORMAT " bytes to %s "
                                                     "was not sent: %s", len,
                                                     p->id ? p->id : rlx_link_get_peer (p->link),
                                                     error->message);
          g_signal_emit (self, signals[SIG_SEND_FAILED], 0, p, reason);
        }
      return FALSE;
    }
  rlx_wire_counters_add_tx (&p->counters, &self->totals, len,
                            rlx_wire_f32_equivalent (len, n_values, precision));
  return TRUE;
}

gboolean
rlx_peer_set_send_msg (RlxPeerSet *self, RlxPeer *p, RlxSendClass klass, const RlxMsg *msg)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) frame = rlx_msg_build (msg, NULL, 0, RLX_PRECISION_F32, &error);

  if (frame == NULL)
    {
      g_critical ("could not build a %s message: %s", rlx_msg_kind_name (msg->kind), error->message);
      return FALSE;
    }
  return rlx_peer_set_send_frame (self, p, klass, frame, 0, RLX_PRECISION_F32);
}

void
rlx_peer_set_broadcast (RlxPeerSet *self, const RlxMsg *msg)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) frame = rlx_msg_build (msg, NULL, 0, RLX_PRECISION_F32, &error);

  g_return_if_fail (frame != NULL);
  for (guint i = 0; i < self->peers->len; i++)
    {
      RlxPeer *p = g_ptr_array_index (self->peers, i);
      if (p->ready && !p->refused)
        rlx_peer_set_send_frame (self, p, RLX_SEND_CONTROL, frame, 0, RLX_PRECISION_F32);
    }
}

void
rlx_peer_set_say_hello (RlxPeerSet *self, RlxPeer *p)
{
  RlxMsg m;

  rlx_msg_init (&m, RLX_MSG_HELLO, self->node_id);
  self->hello_func (&m.u.hello, self->hello_data);
  m.u.hello.version = RLX_MSG_PROTOCOL_VERSION;
  m.u.hello.cohort = g_strdup (self->cohort);
  m.u.hello.seed = g_strdup (self->seed);
  m.u.hello.model = g_strdup (self->model);
  m.u.hello.dataset = g_strdup (self->dataset);
  rlx_peer_set_send_msg (self, p, RLX_SEND_CONTROL, &m);
  rlx_msg_clear (&m);
}

void
rlx_peer_set_close (RlxPeerSet *self, RlxPeer *p, const char *reason)
{
  if (p->close_reason == NULL)
    p->close_reason = g_strdup (reason);
  rlx_link_close (p->link);
}

gboolean
rlx_peer_set_is_flushed (RlxPeerSet *self, RlxPeer *p)
{
  return p->sender == NULL ||
         (rlx_sender_get_depth (p->sender) == 0 && rlx_link_pending_bytes (p->link) == 0);
}

#define STALL_CLOSE_WINDOW_US (G_USEC_PER_SEC * 3 / 2)

gboolean
rlx_peer_set_stalled_recently (RlxPeerSet *self)
{
  gint64 now = g_get_monotonic_time ();
  gint64 limit = (gint64) self->timeout_ms * 1000;

  /* The closes our stall caused were made while we stood still: they are
   * read at once when we run again. A close seconds later is a peer's own
   * (a member killed, a leader lost), not a sign that we were cut off. */
  return (self->last_tick > 0 && now - self->last_tick > limit) ||
         (self->stalled_at > 0 && now - self->stalled_at < MIN (2 * limit, STALL_CLOSE_WINDOW_US));
}

void
rlx_peer_set_forget_stall (RlxPeerSet *self)
{
  self->stalled_at = 0;
}

guint
rlx_peer_set_timeout_for (RlxPeerSet *self, RlxPeer *p)
{
  double t = self->timeout_ms;

  t = MAX (t, 4.0 * p->gap_peak_us / 1000.0);
  t = MAX (t, 8.0 * p->rtt_us / 1000.0);
  return (guint) MIN (t, 600000.0);
}

gboolean
rlx_peer_set_is_silent (RlxPeerSet *self, RlxPeer *p)
{
  gint64 now = g_get_monotonic_time ();
  gint64 beats = 2 * HEARTBEAT_MS * 1000;
  gint64 rx;

  g_return_val_if_fail (RLX_IS_PEER_SET (self), FALSE);
  if (p == NULL || p->link == NULL || self->last_tick <= 0 || now - self->last_tick > beats ||
      now < self->gaps_ours_until)
    return FALSE;
  rx = MAX (rlx_link_get_last_rx (p->link), p->last_rx);
  if (p->quiet_rx > 0 && rx > p->quiet_rx)
    p->quiet_rx = 0;
  return p->quiet_rx > 0 || now - rx > beats;
}

/* How long @p has been silent (µs), judged as the silence check judges:
 * -1 while our own loop may have stood still (frames may wait unread). */
gint64
rlx_peer_set_silence_us (RlxPeerSet *self, RlxPeer *p)
{
  gint64 now = g_get_monotonic_time ();

  g_return_val_if_fail (RLX_IS_PEER_SET (self), -1);
  if (p == NULL || p->link == NULL || self->last_tick <= 0 || now < self->checks_from ||
      now - self->last_check > 2 * SILENCE_CHECK_MS * 1000 ||
      now - self->last_tick > (HEARTBEAT_MS + SILENCE_CHECK_MS) * 1000 || now < self->gaps_ours_until)
    return -1;
  return now - MAX (rlx_link_get_last_rx (p->link), p->last_rx);
}

/* @p missed the deadline of a round that began at @since (monotonic µs):
 * if not one byte of its came through that round, it is most likely
 * stopped, and is silent (no slot) until a byte comes — not until two
 * beats have passed, which held the round after it for a whole deadline
 * more (a frozen member stood the cohort still twice the deadline; a slow
 * member's late bucket is a byte, and gives it its slot back). */
void
rlx_peer_set_note_missed (RlxPeerSet *self, RlxPeer *p, gint64 since)
{
  gint64 rx;

  g_return_if_fail (RLX_IS_PEER_SET (self));
  if (p == NULL || p->link == NULL)
    return;
  rx = MAX (rlx_link_get_last_rx (p->link), p->last_rx);
  if (rx < since)
    p->quiet_rx = MAX (rx, 1);
}

/* ── receiving ──────────────────────────────────────────────────────────── */

static void
refuse (RlxPeerSet *self, RlxPeer *p, const char *reason, RlxMsg *hello)
{
  RlxMsg m;

  rlx_msg_init (&m, RLX_MSG_REFUSE, self->node_id);
  m.u.refuse.reason = g_strdup (reason);
  rlx_peer_set_send_msg (self, p, RLX_SEND_CONTROL, &m);
  rlx_msg_clear (&m);
  p->refused = TRUE;
  g_signal_emit (self, signals[SIG_REFUSED], 0, hello && hello->node ? hello->node : "?",
                 reason, self->node_id, hello, p);
}

static char *
hello_mismatch (RlxPeerSet *self, RlxPeer *p, const RlxMsg *m)
{
  const RlxMsgHello *h = &m->u.hello;
  RlxPeer *other;

  if (g_strcmp0 (m->node, self->node_id) == 0)
    return g_strdup ("hello without a usable node id (it is ours)");
  if (h->version != RLX_MSG_PROTOCOL_VERSION)
    return g_strdup_printf ("protocol version %" G_GINT64_FORMAT " differs from this cohort's %d "
                            "(run the same rlx-cluster version on every node)",
                            h->version, RLX_MSG_PROTOCOL_VERSION);
  if (g_strcmp0 (h->cohort, self->cohort) != 0)
    return g_strdup_printf ("cohort '%s' differs from '%s'", h->cohort, self->cohort);
  if (g_strcmp0 (h->model, self->model) != 0)
    return g_strdup_printf ("model differs: %s trains %s, %s trains %s", m->node, h->model,
                            self->node_id, self->model);
  if (g_strcmp0 (h->dataset, self->dataset) != 0)
    return g_strdup_printf ("dataset differs: %s uses %s, %s uses %s", m->node, h->dataset,
                            self->node_id, self->dataset);
  if (g_strcmp0 (h->seed, self->seed) != 0)
    return g_strdup_printf ("seed %s differs from this cohort's %s (the synthetic data and the "
                            "sample order depend on it)", h->seed, self->seed);
  other = rlx_peer_set_lookup (self, m->node);
  if (other != NULL && other != p)
    return g_strdup_printf ("node id %s is already in use", m->node);
  return NULL;
}

static void
take_hello (RlxPeer *p, const RlxMsg *m)
{
  const RlxMsgHello *h = &m->u.hello;

  g_free (p->id);
  p->id = g_strdup (m->node);
  g_free (p->host);
  p->host = g_strdup (h->host);
  g_free (p->backend);
  p->backend = g_strdup (h->backend);
  g_free (p->device);
  p->device = g_strdup (h->device);
  g_free (p->fallback);
  p->fallback = g_strdup (h->fallback);
  p->precision = h->precision;
  p->batch = h->batch;
  p->max_batch = h->max_batch;
  p->role = h->role;
  g_free (p->leader);
  p->leader = g_strdup (h->leader);
  p->term = h->term;
  p->step = h->step;
  p->members = h->members;
  p->checkpoint = h->checkpoint;
  p->join_only = h->join_only;
  p->lineage = h->lineage;
  p->hb_state = FALSE;   /* (its heartbeats say where it stands from now on) */
  p->ready = TRUE;
}

/* Where @hb says its sender stands now; whether that is not what its last
 * heartbeat (or its hello, before any) said — its step alone moving on is
 * no change. */
static gboolean
take_state (RlxPeer *p, const RlxMsgHeartbeat *hb)
{
  /* what we knew: its last heartbeat's, or its hello's before any */
  gboolean known = p->hb_state;
  RlxRole role = known ? p->hb_role : p->role;
  guint members = known ? p->hb_members : p->members;
  gboolean changed = role != hb->role ||
                     g_strcmp0 (known ? p->hb_leader : p->leader, hb->leader) != 0 ||
                     (known ? p->hb_term : p->term) != hb->term ||
                     (role == RLX_ROLE_LEADER && members != hb->members) ||
                     memcmp (known ? &p->hb_lineage : &p->lineage, &hb->lineage,
                             sizeof hb->lineage) != 0;

  p->hb_state = TRUE;
  p->hb_role = hb->role;
  g_free (p->hb_leader);
  p->hb_leader = g_strdup (hb->leader);
  p->hb_term = hb->term;
  p->hb_step = hb->step;
  p->hb_members = hb->members;
  p->hb_lineage = hb->lineage;
  return changed;
}

void
rlx_peer_note_leads (RlxPeer *p, const RlxMsgLineage *lineage, guint64 term)
{
  p->role = RLX_ROLE_LEADER;
  g_free (p->leader);
  p->leader = g_strdup (p->id);
  if (rlx_msg_lineage_same_fork (&p->lineage, lineage))
    p->term = MAX (p->term, term);
  else
    {
      p->term = term;
      p->lineage = *lineage;
    }
  if (p->hb_state)
    {
      p->hb_role = RLX_ROLE_LEADER;
      g_free (p->hb_leader);
      p->hb_leader = g_strdup (p->id);
      p->hb_term = term;
      p->hb_lineage = *lineage;
    }
}

static void
on_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  RlxPeerSet *self = user_data;
  RlxPeer *p = peer_by_link (self, link);
  g_autoptr(GError) error = NULL;
  RlxMsg m;

  if (p == NULL || p->refused)
    return;
  if (!rlx_msg_parse (frame, NULL, &m, &error))
    {
      g_autofree char *msg = g_strdup_printf ("undecodable frame from %s: %s",
                                              p->id ? p->id : rlx_link_get_peer (link),
                                              error->message);
      /* Bytes that are not a frame of this protocol (a broken or hostile
       * peer) are reported, not acted on; the counters still see them. */
      rlx_wire_counters_add_rx (&p->counters, &self->totals, g_bytes_get_size (frame),
                                g_bytes_get_size (frame));
      g_signal_emit (self, signals[SIG_BAD_FRAME], 0, p, msg);
      return;
    }
  rlx_wire_counters_add_rx_info (&p->counters, &self->totals, &m.info);

  if (m.kind == RLX_MSG_HELLO)
    {
      g_autofree char *reason = hello_mismatch (self, p, &m);
      if (reason)
        {
          refuse (self, p, reason, &m);
          rlx_peer_set_close (self, p, reason);
        }
      else
        {
          take_hello (p, &m);
          g_signal_emit (self, signals[SIG_PEER_READY], 0, p, &m);
        }
    }
  else if (!p->ready || g_strcmp0 (m.node, p->id) != 0)
    ;   /* nothing before hello, nor in another's name */
  else if (m.kind == RLX_MSG_HEARTBEAT)
    {
      const RlxMsgHeartbeat *hb = &m.u.heartbeat;
      gboolean state_changed = FALSE;
      /* Its clock moved on by more than two beats since its last
       * heartbeat: its own loop stood still (stopped, starved), so the
       * silence this ends says nothing about the link. A frozen leader
       * otherwise left a 4 × freeze timeout behind (6 s of a 3 s one),
       * and the next failover took that long (issue 29, chaos.py). */
      if (p->their_t >= 0 && hb->t - p->their_t > 2 * HEARTBEAT_MS)
        {
          p->their_stall = TRUE;
          p->gap_pending_us = 0;
        }
      else if (p->gap_pending_us > 0 && hb->t >= p->gap_judged_t)
        {
          /* Its clock ran on without a jump past the silence: the link's. */
          p->gap_peak_us = MAX (p->gap_peak_us, p->gap_pending_us);
          p->gap_pending_us = 0;
        }
      p->their_t = hb->t;
      p->their_t_at = g_get_monotonic_time ();
      if (hb->role < RLX_ROLE_N)
        state_changed = take_state (p, hb);
      /* A round trip only from a beat we sent since our own loop last
       * stood still, read while it runs: the heartbeats that waited in our
       * socket while we were stopped echo a beat from before, and
       * "now − echo − age" is then how long they waited (up to the whole
       * stall) — taken as round trips they made a 3 s freeze a round trip
       * of a second, and every peer's timeout 8 × that (issue 29, item 13). */
      if (hb->echo >= 0 && hb->echo >= self->stall_end_ms &&
          !(self->last_tick > 0 &&
            g_get_monotonic_time () - self->last_tick > 2 * HEARTBEAT_MS * 1000))
        {
          gint64 now_ms = (g_get_monotonic_time () - self->epoch) / 1000;
          double rtt = (double) (now_ms - hb->echo - hb->age) * 1000.0;
          if (rtt >= 0 && rtt < 600e6)
            p->rtt_us = p->rtt_us > 0 ? 0.8 * p->rtt_us + 0.2 * rtt : rtt;
        }
      if (state_changed)
        g_signal_emit (self, signals[SIG_PEER_STATE], 0, p);
    }
  else if (m.kind == RLX_MSG_BYE)
    {
      g_autofree char *reason = g_strdup_printf ("bye (%s)", m.u.bye.reason);
      rlx_peer_set_close (self, p, reason);
    }
  else if (m.kind == RLX_MSG_REFUSE)
    {
      p->refused = TRUE;
      g_signal_emit (self, signals[SIG_REFUSED], 0, self->node_id, m.u.refuse.reason, p->id, NULL, p);
    }
  else
    g_signal_emit (self, signals[SIG_MESSAGE], 0, p, &m);
  rlx_msg_clear (&m);
}

static void
on_dropped (RlxSender *sender, guint klass, guint why, const char *peer, const char *reason,
            guint64 total, gpointer user_data)
{
  RlxPeerSet *self = user_data;
  static const char *const names[] = { "control", "step", "bulk" };

  for (guint i = 0; i < self->peers->len; i++)
    {
      RlxPeer *p = g_ptr_array_index (self->peers, i);
      gint64 now = g_get_monotonic_time ();

      if (p->sender != sender)
        continue;
      /* a peer that stops reading drops a frame of every commit: the first
       * is reported at once, then one a second, each with the total */
      if (klass < 3)
        {
          if (p->dropped_at[klass] != 0 && now - p->dropped_at[klass] < G_USEC_PER_SEC)
            continue;
          p->dropped_at[klass] = now;
        }
      g_signal_emit (self, signals[SIG_DROPPED], 0, p, klass < 3 ? names[klass] : "?", total,
                     reason);
    }
}

static void
on_closed (RlxLink *link, const GError *error, gpointer user_data)
{
  RlxPeerSet *self = user_data;
  RlxPeer *p = peer_by_link (self, link);
  g_autofree char *reason = NULL;

  if (p == NULL)
    return;
  if (p->close_reason)
    reason = g_strdup (p->close_reason);
  else if (error && g_error_matches (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED))
    reason = g_strdup ("link closed");
  else
    reason = g_strdup_printf ("link failed: %s", error ? error->message : "unknown");
  peer_disconnect (p);
  {
    guint i;
    if (g_ptr_array_find (self->peers, p, &i))
      g_ptr_array_steal_index (self->peers, i);   /* out of the set while reported */
  }
  if (p->ready && !p->refused)
    g_signal_emit (self, signals[SIG_PEER_LOST], 0, p, reason);
  peer_free (p);
}

/* Up to 4 frames in flight per lane, 64 bulk frames queued. Test switch:
 * RLX_TEST_SENDER_LIMITS="IN_FLIGHT,CONTROL,BULK" (the sender's queues, so
 * that a test can make them overflow quickly). */
static RlxSender *
sender_for (RlxLink *link)
{
  const char *env = g_getenv ("RLX_TEST_SENDER_LIMITS");
  guint64 v[3] = { 4, 0, 64 };

  if (env)
    {
      g_auto(GStrv) parts = g_strsplit (env, ",", 3);
      for (guint i = 0; i < 3 && parts[i]; i++)
        if (!g_ascii_string_to_unsigned (parts[i], 10, 1, 1u << 16, &v[i], NULL))
          g_warning ("RLX_TEST_SENDER_LIMITS=%s: '%s' is not a number in 1..65536; "
                     "the default is kept", env, parts[i]);
    }
  return rlx_sender_new (link, (guint) v[0], (guint) v[1], (guint) v[2]);
}

RlxPeer *
rlx_peer_set_add_link (RlxPeerSet *self, RlxLink *link)
{
  RlxPeer *p;

  g_return_val_if_fail (RLX_IS_PEER_SET (self), NULL);
  g_return_val_if_fail (RLX_IS_LINK (link), NULL);

  if (rlx_link_is_closed (link) || peer_by_link (self, link) != NULL)
    return NULL;
  p = g_new0 (RlxPeer, 1);
  p->link = g_object_ref (link);
  p->sender = sender_for (link);
  p->last_rx = g_get_monotonic_time ();
  p->their_t = -1;
  g_ptr_array_add (self->peers, p);
  p->frame_id = g_signal_connect (link, "frame", G_CALLBACK (on_frame), self);
  p->closed_id = g_signal_connect (link, "closed", G_CALLBACK (on_closed), self);
  p->dropped_id = g_signal_connect (p->sender, "dropped", G_CALLBACK (on_dropped), self);
  rlx_peer_set_say_hello (self, p);
  return p;
}

/* ── heartbeat ──────────────────────────────────────────────────────────── */

/* A silence of @p's of @gap_us ended (bytes came after it). It stretches
 * the peer's timeout only if it was the link's: a peer whose own loop
 * stood still says so by the jump in its heartbeat clock, but the first
 * bytes it sends as it thaws need not be a heartbeat (a leader's step
 * frames, or its heartbeat still in its I/O thread when it froze again),
 * and the gap counted before that beat was read left a 4 × freeze timeout
 * behind after all (test-forks, freeze-leaves-no-long-timeout, on a loaded
 * machine). So the gap waits for its heartbeats: a jump drops it, a clock
 * two beats past the last one read now (any stall in between would have
 * shown as a jump) counts it. A peer without a clock counts it at once. */
static void
note_gap (RlxPeer *p, double gap_us)
{
  if (p->their_t < 0)
    {
      p->gap_peak_us = MAX (p->gap_peak_us, gap_us);
      return;
    }
  p->gap_pending_us = MAX (p->gap_pending_us, gap_us);
  p->gap_judged_t = p->their_t + 2 * HEARTBEAT_MS;
}

/* Whether @p has been silent past its timeout at @now (then it says why). */
static gboolean
timed_out (RlxPeerSet *self, RlxPeer *p, gint64 now)
{
  gint64 rx = MAX (rlx_link_get_last_rx (p->link), p->last_rx);

  if (now - rx <= (gint64) rlx_peer_set_timeout_for (self, p) * 1000)
    return FALSE;
  g_free (p->close_reason);
  p->close_reason = g_strdup_printf ("heartbeat timeout (silent for %.1f s)", (now - rx) / 1e6);
  return TRUE;
}

/* Between beats: time out the peers whose silence has passed their
 * timeout since the last beat. The beat keeps the accounting (the gaps
 * that stretch a timeout, our own stalls); this only judges, and not
 * while our loop may have stood still — a check that comes late, or a beat
 * overdue, means frames may wait unread: the next beat sees the stall and
 * gives every peer its two beats (on_heartbeat). */
static gboolean
on_silence_check (gpointer user_data)
{
  RlxPeerSet *self = user_data;
  gint64 now = g_get_monotonic_time ();
  g_autoptr(GPtrArray) dead = g_ptr_array_new_with_free_func (g_object_unref);

  if (now - self->last_check > 2 * SILENCE_CHECK_MS * 1000)
    self->checks_from = now + 2 * SILENCE_CHECK_MS * 1000;
  self->last_check = now;
  if (now < self->checks_from || self->last_tick <= 0 ||
      now - self->last_tick > (HEARTBEAT_MS + SILENCE_CHECK_MS) * 1000 || now < self->gaps_ours_until)
    return G_SOURCE_CONTINUE;
  for (guint i = 0; i < self->peers->len; i++)
    {
      RlxPeer *p = g_ptr_array_index (self->peers, i);

      if (!p->refused && p->link && timed_out (self, p, now))
        g_ptr_array_add (dead, g_object_ref (p->link));
    }
  for (guint i = 0; i < dead->len; i++)
    rlx_link_close (g_ptr_array_index (dead, i));
  return G_SOURCE_CONTINUE;
}

static gboolean
on_heartbeat (gpointer user_data)
{
  RlxPeerSet *self = user_data;
  gint64 now = g_get_monotonic_time ();
  g_autoptr(GPtrArray) dead = g_ptr_array_new_with_free_func (g_object_unref);
  RlxMsgHello h = { 0 };

  self->hello_func (&h, self->hello_data);
  /* Our own loop stood still (the process was stopped, or starved): the
   * silence we would see is ours, not the peers'. */
  if (self->last_tick > 0 && now - self->last_tick > 2 * HEARTBEAT_MS * 1000)
    self->stall_end_ms = (now - self->epoch) / 1000;
  if (self->last_tick > 0 && now - self->last_tick > (gint64) self->timeout_ms * 1000)
    {
      self->stalled_at = now;
      for (guint i = 0; i < self->peers->len; i++)
        ((RlxPeer *) g_ptr_array_index (self->peers, i))->last_rx = now;
    }
  else if (self->last_tick > 0 && now - self->last_tick > 2 * HEARTBEAT_MS * 1000)
    {
      /* A shorter stall (a missed beat or more): the bytes that came
       * meanwhile are counted only once this loop has read them (a link's
       * last-rx is set on the main context), so a peer's silence looks
       * longer by our stall. Each peer gets two beats from now to be heard
       * before it is timed out: a node frozen for 2.7 s of a 3 s timeout
       * timed out the live new leader as it thawed — before that leader's
       * buffered frames were read — took over itself at the same term and
       * forked the cohort (issue 29, item 13; scripts/chaos.py, seed 30).
       * A peer that is really gone is found two beats late, not a stall
       * late. The silences that end meanwhile are ours: they do not
       * stretch any peer's timeout. */
      g_debug ("peer set %s: our loop stood still %.2f s; every peer gets two beats",
               self->node_id, (now - self->last_tick) / 1e6);
      self->gaps_ours_until = now + 2 * HEARTBEAT_MS * 1000;
      for (guint i = 0; i < self->peers->len; i++)
        {
          RlxPeer *p = g_ptr_array_index (self->peers, i);
          p->last_rx = MAX (p->last_rx, now - (gint64) rlx_peer_set_timeout_for (self, p) * 1000 +
                                            2 * HEARTBEAT_MS * 1000);
        }
    }
  self->last_tick = now;
  for (guint i = 0; i < self->peers->len; i++)
    {
      RlxPeer *p = g_ptr_array_index (self->peers, i);
      RlxMsg m;

      gint64 rx;

      if (p->refused)
        continue;
      /* Any bytes count, not only whole frames: a peer in the middle of
       * sending a large bucket over a slow link is alive. */
      rx = rlx_link_get_last_rx (p->link);
      /* The longest silence that ended (bytes came after it), decaying
       * (halves in ~7 s), so one slow moment does not stretch the timeout
       * for ever — and a silence still going on never stretches it. */
      p->gap_peak_us *= 0.95;
      if (rx > p->last_rx)
        {
          if (now >= self->gaps_ours_until && !p->their_stall)
            note_gap (p, (double) (rx - p->last_rx));
          p->their_stall = FALSE;
          p->last_rx = rx;
        }
      rlx_msg_init (&m, RLX_MSG_HEARTBEAT, self->node_id);
      m.u.heartbeat.term = h.term;
      m.u.heartbeat.step = h.step;
      m.u.heartbeat.role = h.role;
      /* (whom it follows as a member or leads: not whom a joiner asks) */
      m.u.heartbeat.leader = h.role == RLX_ROLE_MEMBER || h.role == RLX_ROLE_LEADER
                                 ? g_strdup (h.leader) : NULL;
      m.u.heartbeat.members = h.role == RLX_ROLE_LEADER ? h.members : 0;
      m.u.heartbeat.lineage = h.lineage;
      m.u.heartbeat.t = (now - self->epoch) / 1000;
      m.u.heartbeat.echo = p->their_t;
      m.u.heartbeat.age = p->their_t >= 0 ? (now - p->their_t_at) / 1000 : 0;
      rlx_peer_set_send_msg (self, p, RLX_SEND_CONTROL, &m);
      rlx_msg_clear (&m);
      if (now - p->last_rx > (gint64) self->timeout_ms * 1000 &&
          now - p->last_rx <= (gint64) rlx_peer_set_timeout_for (self, p) * 1000)
        g_debug ("peer set %s: %s silent %.1f s, its timeout %u ms (gap peak %.0f ms, "
                 "round trip %.0f ms)", self->node_id, p->id ? p->id : "?",
                 (now - p->last_rx) / 1e6, rlx_peer_set_timeout_for (self, p),
                 p->gap_peak_us / 1000.0, p->rtt_us / 1000.0);
      if (timed_out (self, p, now))
        g_ptr_array_add (dead, g_object_ref (p->link));
    }
  g_free (h.leader);
  g_free (h.host);
  g_free (h.backend);
  g_free (h.device);
  g_free (h.fallback);
  for (guint i = 0; i < dead->len; i++)
    rlx_link_close (g_ptr_array_index (dead, i));
  return G_SOURCE_CONTINUE;
}

void
rlx_peer_set_start (RlxPeerSet *self)
{
  g_return_if_fail (RLX_IS_PEER_SET (self));
  if (self->heartbeat_id == 0)
    self->heartbeat_id = rlx_timeout_add (HEARTBEAT_MS, on_heartbeat, self);
  if (self->check_id == 0)
    self->check_id = rlx_timeout_add (SILENCE_CHECK_MS, on_silence_check, self);
  self->last_tick = self->last_check = g_get_monotonic_time ();
}

void
rlx_peer_set_stop (RlxPeerSet *self)
{
  g_return_if_fail (RLX_IS_PEER_SET (self));
  g_clear_handle_id (&self->heartbeat_id, rlx_source_remove);
  g_clear_handle_id (&self->check_id, rlx_source_remove);
}
