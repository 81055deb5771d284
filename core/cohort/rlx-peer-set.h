/* rlx-peer-set.h — the links of one node: hello, liveness, heartbeats
 *
 * One RlxPeer per link handed to the set. Each link opens with a hello each
 * way; the set checks the peer's against ours (protocol version, cohort,
 * model, dataset, seed, a usable and unused node id) and refuses a mismatch
 * with a reason both sides report. From then on every frame is parsed once
 * into an RlxMsg (rlx-msg.h) and handed to ::message; heartbeats, byes and
 * refusals are handled here. Control messages go on the link's control lane
 * and never wait behind a bulk frame (a bucket, an update, a snapshot).
 *
 * Liveness counts any byte received (the link's "last-rx"), not whole
 * frames, so a peer busy sending a multi-megabyte bucket over a slow link is
 * alive. The heartbeat timeout adapts to each link: it is the largest of the
 * configured timeout, 4 × the longest recent silence on that link (decaying;
 * not one the peer's heartbeat clock shows was its own stall — a silence
 * counts once its later heartbeats moved that clock on by two beats without
 * a jump — nor one that ends as our own stall does) and 8 × its round-trip time (measured by echoing the peer's heartbeat
 * clock, never by comparing clocks of two hosts). A node whose own main loop
 * stood still longer than the timeout (stopped, starved) does not time its
 * peers out for it: it notes that it stalled (rlx_peer_set_stalled_recently);
 * a shorter stall (a missed beat or more) is not counted into any peer's
 * silence either.
 *
 * Threads: the main context only.
 */
#pragma once

#include <glib-object.h>
#include "core/cohort/rlx-msg.h"
#include "core/p2p/rlx-link.h"
#include "core/p2p/rlx-sender.h"

G_BEGIN_DECLS

typedef struct {
  RlxLink        *link;
  RlxSender      *sender;
  char           *id;           /* from its hello (NULL before) */
  gboolean        ready;        /* a valid hello arrived */
  gboolean        refused;      /* either side refused: nothing more is read */
  /* what its hello said (kept up to date by the coordinator as it learns) */
  char           *host, *backend, *device, *fallback;
  RlxPrecision    precision;
  guint           batch, max_batch;
  RlxRole         role;
  char           *leader;
  guint64         term, step, checkpoint;
  guint           members;
  gboolean        join_only;
  RlxMsgLineage   lineage;      /* of its state (and of its leader's announcements) */
  /* where it stands now, as its heartbeats say (hb_state: one said; its
   * hello's role, leader, members and lineage above are as the link came
   * up, and as the coordinator learned since) */
  gboolean        hb_state;
  RlxRole         hb_role;
  char           *hb_leader;    /* whom it follows as a member, or itself as leader */
  guint64         hb_term, hb_step;
  guint           hb_members;   /* the group it leads */
  RlxMsgLineage   hb_lineage;
  /* what our own first hello on this link said, for the merge rule (both
   * sides must judge with the same numbers; noted by the coordinator right
   * after rlx_peer_set_add_link) */
  gboolean        sent_noted;
  guint           sent_members;  /* our members if we led, else 0 */
  guint64         sent_step;
  /* measured */
  double          speed;        /* samples/s, as the leader measures it: from making the
                                 * assignment to the bucket's arrival */
  double          compute_us;   /* the time its share of a step took, smoothed, measured
                                 * as the speed is ("timing" events) */
  double          inner_us;     /* outer rounds: one inner step's compute as it reports it
                                 * (the grad's inner_us), never more than its share took
                                 * over H; smoothed; 0 unknown */
  guint           late_run;     /* as the leader's member: rounds in a row whose collect
                                 * deadline it missed (0: its last bucket came) */
  gint64          late_since;   /* monotonic µs of the first of them */
  guint64         late_term;    /* the leader's term they were counted in */
  gint64          quiet_rx;     /* as the leader's member: it missed a deadline without a
                                 * byte through the round; its last byte's monotonic µs
                                 * then (0: none): no slot until a later one comes */
  gint64          last_rx;      /* monotonic µs of the last byte received */
  double          gap_peak_us;  /* longest recent silence, decaying */
  double          rtt_us;       /* heartbeat round trip, smoothed; 0 unknown */
  gint64          their_t;      /* the last heartbeat clock it sent (to echo) */
  gboolean        their_stall;  /* its clock says the silence that ends now was its own
                                 * loop standing still (not the link's) */
  gint64          their_t_at;   /* monotonic µs when it arrived */
  double          gap_pending_us; /* a silence that ended, not yet judged ours, theirs or
                                   * the link's (0: none) */
  gint64          gap_judged_t; /* … judged the link's once a heartbeat of this clock or
                                 * later comes without a jump */
  RlxWireCounters counters;
  gint64          dropped_at[3]; /* monotonic µs of the last "dropped" reported, a lane
                                  * each: at most one a second (its total counts all) */
  /* private */
  char           *close_reason;
  gulong          frame_id, closed_id, dropped_id;
} RlxPeer;

/* What must match for two nodes to be in one cohort. */
typedef struct {
  const char *node_id;
  const char *cohort;
  const char *seed;       /* decimal */
  const char *model;
  const char *dataset;
} RlxPeerSetIdentity;

/* Fills the dynamic members of our hello (everything but node and the
 * identity) and of heartbeats (term, step, role, leader, members, lineage). */
typedef void (*RlxPeerSetHelloFunc) (RlxMsgHello *hello, gpointer user_data);

#define RLX_TYPE_PEER_SET (rlx_peer_set_get_type ())
G_DECLARE_FINAL_TYPE (RlxPeerSet, rlx_peer_set, RLX, PEER_SET, GObject)

/* Signals (RlxPeer* and RlxMsg* arguments are valid for the emission):
 *   ::peer-ready   (RlxPeer *peer, RlxMsg *hello)   a valid hello arrived
 *                  (also when a peer says hello again)
 *   ::message      (RlxPeer *peer, RlxMsg *msg)     any other message of a
 *                  ready peer, except heartbeat and bye
 *   ::peer-state   (RlxPeer *peer)  its heartbeat says it stands elsewhere
 *                  than its last one (or hello) said: another role, leader,
 *                  term, group size or lineage (the hb_ members)
 *   ::peer-lost    (RlxPeer *peer, const char *reason)  a ready peer's link
 *                  closed (bye, EOF, error, heartbeat timeout); the peer is
 *                  removed right after
 *   ::refused      (const char *node, const char *reason, const char *by,
 *                   RlxMsg *hello, RlxPeer *peer)   a hello refused, by us
 *                  (by = our id, @hello theirs) or by them (@hello NULL);
 *                  @peer is the peer it was about, closed right after
 *   ::dropped      (RlxPeer *peer, const char *klass, guint64 total,
 *                   const char *reason)   the sender discarded a queued frame
 *   ::send-failed  (RlxPeer *peer, const char *reason)
 *   ::bad-frame    (RlxPeer *peer, const char *message)  undecodable bytes */
RlxPeerSet *rlx_peer_set_new          (const RlxPeerSetIdentity *me,
                                       RlxPeerSetHelloFunc hello_func, gpointer user_data);
/* The configured heartbeat timeout (the floor of the adaptive one). */
void        rlx_peer_set_set_timeout  (RlxPeerSet *self, guint timeout_ms);
guint       rlx_peer_set_get_timeout  (RlxPeerSet *self);
/* Heartbeats every 500 ms and timeouts from now on. */
void        rlx_peer_set_start        (RlxPeerSet *self);
/* No more heartbeats (leaving). */
void        rlx_peer_set_stop         (RlxPeerSet *self);
/* The new peer of @link (its hello sent), or NULL when the link is closed
 * or known already. */
RlxPeer    *rlx_peer_set_add_link     (RlxPeerSet *self, RlxLink *link);

/* @p announced that it leads @term of @lineage's fork: its role, leader
 * and term as we know them (and what its next heartbeats will say, not the
 * last one before). */
void        rlx_peer_note_leads       (RlxPeer *p, const RlxMsgLineage *lineage, guint64 term);

/* A ready, not refused peer by node id, or NULL. */
RlxPeer    *rlx_peer_set_lookup       (RlxPeerSet *self, const char *id);
guint       rlx_peer_set_size         (RlxPeerSet *self);
RlxPeer    *rlx_peer_set_nth          (RlxPeerSet *self, guint i);

/* Send a message (its array, if any, from @values at @precision). */
gboolean    rlx_peer_set_send_msg     (RlxPeerSet *self, RlxPeer *peer, RlxSendClass klass,
                                       const RlxMsg *msg);
/* Send a ready frame carrying @n_values array elements at @precision. */
gboolean    rlx_peer_set_send_frame   (RlxPeerSet *self, RlxPeer *peer, RlxSendClass klass,
                                       GBytes *frame, gsize n_values, RlxPrecision precision);
/* A control message to every ready peer. */
void        rlx_peer_set_broadcast    (RlxPeerSet *self, const RlxMsg *msg);
void        rlx_peer_set_say_hello    (RlxPeerSet *self, RlxPeer *peer);
/* Close @peer's link; ::peer-lost reports @reason. */
void        rlx_peer_set_close        (RlxPeerSet *self, RlxPeer *peer, const char *reason);
/* Nothing queued or unwritten towards @peer. */
gboolean    rlx_peer_set_is_flushed   (RlxPeerSet *self, RlxPeer *peer);
/* Our own loop stands still past the timeout, or stood still within the
 * last 1.5 s (at most 2 timeouts): a link closed now was closed on us. */
gboolean    rlx_peer_set_stalled_recently (RlxPeerSet *self);
/* The cohort took this node back since it stalled (it adopted a snapshot):
 * a link that closes from now on is a peer's doing, not the stall's. */
void        rlx_peer_set_forget_stall  (RlxPeerSet *self);
/* The current timeout for @peer, ms (see the header comment). */
guint       rlx_peer_set_timeout_for  (RlxPeerSet *self, RlxPeer *peer);
/* @peer's link has brought no bytes for two heartbeats or more (1 s: a
 * live peer beats every 0.5 s) while our own loop ran: it is most likely
 * stopped. FALSE while we may not have read what it sent (our loop stood
 * still within the last two beats). */
gboolean    rlx_peer_set_is_silent    (RlxPeerSet *self, RlxPeer *peer);
gint64      rlx_peer_set_silence_us   (RlxPeerSet *self, RlxPeer *peer);
void        rlx_peer_set_note_missed  (RlxPeerSet *self, RlxPeer *peer, gint64 since);
const RlxWireCounters *rlx_peer_set_get_totals (RlxPeerSet *self);

G_END_DECLS
