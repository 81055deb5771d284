/* rlx-frame-clock.h — how long a peer may keep a frame half-sent
 *
 * A link holds a frame in progress (its buffer, up to its lane's cap: 1 MiB
 * control, a node's 16 MiB bulk) until the frame's last byte arrives, and a
 * link that brings any bytes is alive. Without a deadline a peer that sends
 * a frame all but its last byte, then a byte now and then (or heartbeats on
 * the other lane, or nothing but QUIC's own keep-alives), makes this process
 * hold that buffer for as long as it likes.
 *
 * The rule is the minimum data rate of HTTP servers against slow request
 * bodies (ASP.NET Kestrel's MinRequestBodyDataRate, a rate with a grace
 * period; Apache's mod_reqtimeout MinRate), over a sliding window rather
 * than since the frame began: a frame in progress must come at
 * RLX_FRAME_CLOCK_MIN_RATE, and may fall behind that by at most a grace's
 * worth. It starts with a grace's worth of bytes in hand (grace × rate);
 * each tick adds the bytes that came and takes the rate × the time that
 * passed; what is in hand never exceeds a grace's worth; a frame whose
 * hand goes below zero closes the link, saying why. So a frame that brings
 * nothing, or a byte a heartbeat, is dropped a grace after it stopped
 * coming at the rate, however fast its first bytes came (a cumulative
 * average, Kestrel's, would let a peer that sent 16 MiB at once hold it
 * for 256 s); nginx's client_body_timeout (a limit between two reads)
 * would never drop a trickle. To keep a buffer, a peer must keep sending
 * at the rate into it, and a frame cannot grow past its lane's cap.
 *
 * Time counts only while the link reads: not while its inbox is full and it
 * holds the peer back (the Unix link stops reading, QUIC holds the credit),
 * and not across this process's own stalls — ticks come every
 * RLX_FRAME_CLOCK_TICK_MS and one that comes late counts as at most two
 * periods, so a node that was stopped or starved does not blame its peers
 * (as the peer set does for heartbeats).
 *
 * The grace is 15 s, above the heartbeat timeout (3 s) and the longest
 * freeze the chaos runs make (10 s): a peer whose frame stalls that long
 * is found dead by its heartbeats first. 64 KiB/s (512 kbit/s) is the
 * slowest link a cohort is expected to train over; a frame that comes
 * slower than that on average, for longer than the grace, is taken for an
 * attack.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define RLX_FRAME_CLOCK_TICK_MS    500
#define RLX_FRAME_CLOCK_GRACE_MS   15000
#define RLX_FRAME_CLOCK_MIN_RATE   ((gsize) 64 * 1024)   /* bytes/s */

typedef struct {
  gboolean timing;     /* a frame in progress was seen at the last tick */
  guint64  seq;        /* which frame (the reader's count of frames begun) */
  gsize    bytes;      /* its bytes at the last tick */
  gint64   age_us;     /* how long it has been timed */
  gint64   hand;       /* bytes in hand (see above) */
  gint64   last_us;    /* monotonic µs of the last tick */
  gint64   grace_us;
} RlxFrameClock;

/* The grace: RLX_LINK_FRAME_GRACE_MS from the environment when set (tests
 * and measurements), else RLX_FRAME_CLOCK_GRACE_MS; read at each call. */
gint64   rlx_frame_clock_grace_from_env (void);

void     rlx_frame_clock_init (RlxFrameClock *c, gint64 grace_us);

/* A tick at @now for one lane: @in_progress says whether a frame is in
 * progress there (@seq which one, @bytes its body bytes so far), @reading
 * whether the link read all along since the last tick. FALSE: the frame is
 * over its deadline (close the link; rlx_frame_clock_reason says why). */
gboolean rlx_frame_clock_tick (RlxFrameClock *c, gint64 now, gboolean in_progress, guint64 seq,
                               gsize bytes, gboolean reading);

/* "PEER kept a LANE frame half-sent: BYTES bytes in AGE s, under …;
 * link closed". Free with g_free. */
char    *rlx_frame_clock_reason (const RlxFrameClock *c, const char *peer, const char *lane,
                                 gsize bytes);

/* Whether a frame is in progress on lane @lane (0 control, 1 bulk) of a
 * link's reader, with its bytes so far and which frame it is. */
typedef gboolean (*RlxFrameInProgressFunc) (gpointer reader, guint lane, gsize *bytes,
                                            guint64 *seq);

/* A tick for a link's two lanes (@clocks[0] control, [1] bulk), @reading
 * as for rlx_frame_clock_tick. FALSE with @reason (free it) for a lane
 * over its deadline; @any says whether a frame is in progress at all (the
 * ticks can stop when not). */
gboolean rlx_frame_clocks_tick (RlxFrameClock clocks[2], gint64 now, gboolean reading,
                                RlxFrameInProgressFunc in_progress, gpointer reader,
                                const char *peer, gboolean *any, char **reason);

G_END_DECLS
