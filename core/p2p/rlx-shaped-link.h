/* rlx-shaped-link.h — an RlxLink that makes any link behave like a slow
 * network: one-way delay, a byte-rate cap and scripted stalls
 *
 * A decorator: it wraps an inner link (the Unix link, an ICE link) and shapes
 * what arrives through it. Frames the inner link delivers enter a virtual
 * pipe that moves @rate bytes per second in pieces of @chunk bytes, control
 * lane before bulk lane at every piece boundary (what a transport with a
 * priority lane does on a real network); each piece becomes visible @delay
 * after it left the pipe — its bytes count for liveness ("last-rx") then — and
 * a frame is delivered when its last piece is visible. During a stall the
 * pipe moves nothing. Frames sent through the wrapper go to the inner link
 * unchanged, so with every process shaping what it receives (RLX_LINK_SHAPE
 * in each), each direction of a link is shaped once: "delay=25ms" is 25 ms
 * each way, 50 ms round trip.
 *
 * All timing comes from a source on the link's main context (µs ready
 * times), never from sleeping; frames stay whole and in order per lane.
 * Closing: the inner link's ::closed travels through the pipe behind the
 * frames that arrived before it (a network delivers data before the FIN).
 *
 * Spec (RLX_LINK_SHAPE, `rlx_link_shape_parse`): comma-separated key=value:
 *   delay=DURATION         one-way delay (e.g. 25ms, 1.5s, 800us)
 *   rate=RATE              cap, e.g. 50MB/s, 1.5GiB/s, 100Mbit/s; 0 = none
 *   chunk=SIZE             piece size, e.g. 64KiB (default 64 KiB, ≥ 1 KiB)
 *   stall=AT+LEN[/EVERY]   nothing moves from AT after the link was made,
 *                          for LEN, repeating every EVERY if given; up to
 *                          RLX_LINK_SHAPE_MAX_STALLS of them
 * e.g. RLX_LINK_SHAPE="delay=25ms,rate=50MB/s,stall=3s+2s".
 *
 * Threads: as any RlxLink, the main context it was created on.
 */
#pragma once

#include "core/p2p/rlx-link.h"

G_BEGIN_DECLS

#define RLX_LINK_SHAPE_MAX_STALLS 8
#define RLX_LINK_SHAPE_DEFAULT_CHUNK ((gsize) 64 * 1024)

typedef struct {
  gint64 at_us;
  gint64 length_us;
  gint64 every_us;     /* 0: once */
} RlxLinkStall;

typedef struct {
  gint64       delay_us;
  guint64      rate;        /* bytes per second; 0 = no cap */
  gsize        chunk;       /* 0 = RLX_LINK_SHAPE_DEFAULT_CHUNK */
  guint        n_stalls;
  RlxLinkStall stalls[RLX_LINK_SHAPE_MAX_STALLS];
} RlxLinkShape;

/* Parse @spec (see above) into @shape (zeroed first). FALSE with
 * G_IO_ERROR_INVALID_ARGUMENT naming the part that is wrong and what is
 * accepted. An empty spec is a valid shape that changes nothing. */
gboolean rlx_link_shape_parse     (const char *spec, RlxLinkShape *shape, GError **error);
/* A shape from RLX_LINK_SHAPE: FALSE (and @shape zeroed) when it is unset or
 * empty; when it is set but wrong, a warning saying what is wrong, and FALSE
 * (links are then not shaped). */
gboolean rlx_link_shape_from_env  (RlxLinkShape *shape);
/* "delay=25ms,rate=50000000B/s,…" for logs. */
char    *rlx_link_shape_to_string (const RlxLinkShape *shape);

#define RLX_TYPE_SHAPED_LINK (rlx_shaped_link_get_type ())
G_DECLARE_FINAL_TYPE (RlxShapedLink, rlx_shaped_link, RLX, SHAPED_LINK, RlxLink)

/* Wrap @inner (a reference is taken; the wrapper closes it when closed, and
 * owns its ::frame and ::closed from now on). The stall clock starts now.
 * Use on @inner's main context. */
RlxLink *rlx_shaped_link_new       (RlxLink *inner, const RlxLinkShape *shape);
RlxLink *rlx_shaped_link_get_inner (RlxShapedLink *self);
/* Inside a ::frame handler: when the inner link delivered the frame and when
 * the pipe made it visible (monotonic µs, virtual: not late however late the
 * main loop ran). */
void     rlx_shaped_link_get_rx_times (RlxShapedLink *self, gint64 *arrived, gint64 *visible);

G_END_DECLS
