/* rlx-link-estimates.h — what `--sync auto` knows of each link: its round
 * trip and throughput, measured
 *
 * One estimate per peer (by node id). Nothing here is configured or read
 * from a shaping spec: every figure comes from traffic the protocol sends
 * anyway.
 *
 *   round trip   a remote link (QUIC): QUIC's own smoothed RTT; any other
 *                link: the peer set's heartbeat round trip (it echoes the
 *                peer's clock, rlx-peer-set.h), passed in with
 *                rlx_link_estimates_rtt. The estimate is the least of the
 *                last RLX_LINK_ESTIMATES_RTT_WINDOW values from one source:
 *                both are smoothed already, and both include the time a
 *                heartbeat or a packet queued behind bulk data on a busy
 *                link, which the throughput already pays for (the chooser
 *                adds the two).
 *   throughput   bytes over time of the bulk frames that arrive: when a
 *                bulk frame of S bytes completes at time t_end with the
 *                link's byte counter at B_end, its first bytes arrived at
 *                the earliest noted progress (t, B) with B > B_end − S;
 *                one sample is (B_end − B) / (t_end − t) — the bytes after
 *                that first piece over the time they took, so the time the
 *                sender sat idle before the frame never counts. Frames
 *                under RLX_LINK_ESTIMATES_MIN_FRAME bytes or that took under
 *                RLX_LINK_ESTIMATES_MIN_SPAN_US are not samples (too short
 *                to time). The estimate is the bytes of the last
 *                RLX_LINK_ESTIMATES_RATE_WINDOW samples over their time.
 *                A remote link also has QUIC's delivery rate: its
 *                estimate until a frame is timed, never after. That rate
 *                is ngtcp2's latest sample of what this side's sends
 *                achieved, read as a frame arrives — whatever was sent
 *                last, often a control frame's few packets: between two
 *                network namespaces over 200 Mbit/s (25 MB/s) it read
 *                52–75 MB/s while the bulk frames took 21–25 MB/s, and
 *                `auto` chose an H whose exchange did not hide.
 *
 * "Local" means the link stays on this host *and* behaves like it: a
 * local-bus link under RLX_LINK_SHAPE (an RlxShapedLink) models a network,
 * so it counts as remote, which is what lets the tests and benchmarks
 * drive `auto` over a slow link on one machine.
 *
 * Change: rlx_link_estimates_mark notes the figures a choice was made from;
 * rlx_link_estimates_drifted says whether a link came or went since, or a
 * round trip or throughput moved by more than a factor — the signal for
 * `auto` to choose again.
 *
 * Memory: a fixed ring of RLX_LINK_ESTIMATES_RING progress points per link
 * (points closer than RLX_LINK_ESTIMATES_COALESCE_US merge), at most
 * RLX_LINK_ESTIMATES_MAX_LINKS links.
 *
 * Threads: the main context of the links it watches (the node thread);
 * the feeding functions are plain and may be called by a test from any
 * single thread.
 */
#pragma once

#include <glib-object.h>
#include "core/cohort/rlx-sync-policy.h"
#include "core/p2p/rlx-link.h"

G_BEGIN_DECLS

#define RLX_LINK_ESTIMATES_MIN_FRAME     ((gsize) 64 * 1024)
#define RLX_LINK_ESTIMATES_MIN_SPAN_US   200
#define RLX_LINK_ESTIMATES_RATE_WINDOW   8u
#define RLX_LINK_ESTIMATES_RTT_WINDOW    16u
#define RLX_LINK_ESTIMATES_RING          128u
#define RLX_LINK_ESTIMATES_COALESCE_US   250
#define RLX_LINK_ESTIMATES_MAX_LINKS     1024u

typedef enum {
  RLX_LINK_RTT_NONE = 0,
  RLX_LINK_RTT_HEARTBEAT,      /* the peer set's heartbeat echo */
  RLX_LINK_RTT_QUIC,           /* QUIC's smoothed RTT */
} RlxLinkRttSource;

typedef struct {
  char            *id;              /* the peer's node id */
  gboolean         local;           /* on this host and unshaped */
  double           rtt_ms;          /* 0: not measured yet */
  RlxLinkRttSource rtt_source;
  double           bytes_per_s;     /* the estimate (above); 0: not yet */
  double           measured_bytes_per_s; /* from arriving frames alone; 0: none */
  double           quic_bytes_per_s;     /* QUIC's delivery rate; 0: none */
  guint            rate_samples;    /* frames timed so far */
} RlxLinkEstimate;

typedef struct _RlxLinkEstimates RlxLinkEstimates;

RlxLinkEstimates *rlx_link_estimates_new  (void);
void              rlx_link_estimates_free (RlxLinkEstimates *self);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxLinkEstimates, rlx_link_estimates_free)

/* Start (or restart, forgetting what was measured) the estimate of @id.
 * FALSE when RLX_LINK_ESTIMATES_MAX_LINKS links are tracked already. */
gboolean rlx_link_estimates_add    (RlxLinkEstimates *self, const char *id, gboolean local);
/* Forget @id (and stop watching its link). */
void     rlx_link_estimates_remove (RlxLinkEstimates *self, const char *id);

/* Feeding (what rlx_link_estimates_watch does for a real link): */
/* A round trip of @rtt_us from @source. A heartbeat figure never replaces
 * a QUIC one (QUIC's sees every packet); a new source starts the window
 * afresh. Values ≤ 0 or not finite are ignored. */
void     rlx_link_estimates_rtt    (RlxLinkEstimates *self, const char *id, double rtt_us,
                                    RlxLinkRttSource source);
/* By monotonic time @when_us the link had received @bytes_total bytes. */
void     rlx_link_estimates_rx     (RlxLinkEstimates *self, const char *id,
                                    guint64 bytes_total, gint64 when_us);
/* A bulk frame of @frame_bytes completed; the link's counter then stood at
 * @bytes_total, its last bytes at @when_us (also noted as progress). */
void     rlx_link_estimates_frame  (RlxLinkEstimates *self, const char *id, gsize frame_bytes,
                                    guint64 bytes_total, gint64 when_us);
/* QUIC's delivery rate for @id's link, bytes/s (0: none yet). */
void     rlx_link_estimates_quic_rate (RlxLinkEstimates *self, const char *id,
                                       double bytes_per_s);

/* Watch @link for @id (rlx_link_estimates_add first, or it is added with
 * local from the link's type): its received bytes and bulk frames, and for
 * a remote link QUIC's RTT and delivery rate at each bulk frame. Until
 * rlx_link_estimates_remove or the estimates are freed. */
void     rlx_link_estimates_watch  (RlxLinkEstimates *self, const char *id, RlxLink *link);
/* The link watched for @id (NULL: none). */
RlxLink *rlx_link_estimates_get_link (RlxLinkEstimates *self, const char *id);
/* Whether @link stays on this host and unshaped (a Unix link of the local
 * bus). */
gboolean rlx_link_estimates_link_is_local (RlxLink *link);

/* Reading: */
guint                  rlx_link_estimates_size (RlxLinkEstimates *self);
const RlxLinkEstimate *rlx_link_estimates_nth  (RlxLinkEstimates *self, guint i);
const RlxLinkEstimate *rlx_link_estimates_get  (RlxLinkEstimates *self, const char *id);
/* Every link that is not local has a round trip and at least
 * @min_rate_samples timed frames (or a QUIC delivery rate). */
gboolean rlx_link_estimates_ready  (RlxLinkEstimates *self, guint min_rate_samples);
/* The links as the chooser takes them (names point into @self: valid until
 * it changes); free the array with g_free. */
RlxSyncLink *rlx_link_estimates_sync_links (RlxLinkEstimates *self, guint *n_links);
/* "host-b 24 MB/s, 51 ms; host-c local" — for the events. */
char    *rlx_link_estimates_describe (RlxLinkEstimates *self);
/* One link: "24 MB/s, 51 ms", "local" (NULL: @id unknown) — for the roster. */
char    *rlx_link_estimates_describe_one (RlxLinkEstimates *self, const char *id);

/* rlx_sync_choose over these links: @n_ranks (the leader included), one
 * exchange's @exchange_bytes, the measured @step_ms, @max_h (0: the
 * chooser's RLX_SYNC_MAX_H). The reason names the costliest link. */
gboolean rlx_link_estimates_choose (RlxLinkEstimates *self, guint n_ranks,
                                    guint64 exchange_bytes, double step_ms, guint max_h,
                                    RlxSyncChoice *out, GError **error);

/* Note the figures now (a choice was made from them); then whether a link
 * came or went, or a round trip or throughput (once measured) moved by more
 * than @factor (> 1) either way since. */
void     rlx_link_estimates_mark    (RlxLinkEstimates *self);
gboolean rlx_link_estimates_drifted (RlxLinkEstimates *self, double factor);

G_END_DECLS
