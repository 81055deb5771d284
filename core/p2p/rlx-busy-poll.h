/* rlx-busy-poll.h — hand-offs without sleeping, while a GPU cohort trains
 *
 * A round crosses about ten hand-offs between threads and processes
 * (worker → main loop → link I/O thread → socket → the peer's I/O thread →
 * main loop → worker, and back). A thread that sleeps in poll() or on a
 * condition variable takes 20–30 µs to wake on a virtual machine
 * (tests/p2p/hop-probe), one that polls about 1 µs; on a GPU, where a
 * step is a few hundred µs, the sleeps were a large part of a round.
 *
 * While the process holds busy polling (rlx_busy_poll_hold, counted), the
 * main contexts registered with rlx_busy_poll_attach iterate without
 * blocking, and rlx_busy_poll_wait lets a thread spin on its queue before it
 * sleeps. That costs those threads' CPU time, so it is meant for ranks that
 * compute on a GPU on a host with cores to spare (the coordinator decides:
 * RLX_BUSY_POLL, see rlx-coordinator.h).
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

void     rlx_busy_poll_hold     (void);
void     rlx_busy_poll_release  (void);
gboolean rlx_busy_poll_active   (void);
/* A source on @context that keeps its loop polling without a timeout while
 * busy polling is held (and wakes it when that begins). */
void     rlx_busy_poll_attach   (GMainContext *context);
/* While busy polling is held, how long a thread that found its queue empty
 * polls it before it blocks (µs; 0 when not held). */
gint64   rlx_busy_poll_spin_us  (void);

G_END_DECLS
