/* rlx-wire-counters.c — the wire's byte counters, and what the same frames
 * would have cost at f32 (rlx-wire.h, "byte counters")
 *
 * Threads: a counter belongs to whoever updates it (the coordinator's peer
 * set, on the node's thread); nothing here locks.
 */
#include "rlx-config.h"

#include <string.h>

#include "core/wire/rlx-wire.h"

gsize
rlx_wire_f32_equivalent (gsize frame_len, gsize n, RlxPrecision p)
{
  gsize es;

  g_return_val_if_fail ((guint) p < RLX_PRECISION_COUNT, frame_len);
  es = rlx_precision_element_size (p);
  if (n * es > frame_len)
    return frame_len;
  return frame_len - n * es + n * 4;
}

static void
counters_add (RlxWireCounters *c, gboolean tx, gsize frame_len, gsize f32_bytes)
{
  if (tx)
    {
      c->tx_frames++;
      c->tx_bytes += frame_len;
      c->tx_f32_bytes += f32_bytes;
    }
  else
    {
      c->rx_frames++;
      c->rx_bytes += frame_len;
      c->rx_f32_bytes += f32_bytes;
    }
}

void
rlx_wire_counters_add_tx (RlxWireCounters *link, RlxWireCounters *total, gsize frame_len,
                          gsize f32_bytes)
{
  g_return_if_fail (link != NULL);
  counters_add (link, TRUE, frame_len, f32_bytes);
  if (total && total != link)
    counters_add (total, TRUE, frame_len, f32_bytes);
}

void
rlx_wire_counters_add_rx (RlxWireCounters *link, RlxWireCounters *total, gsize frame_len,
                          gsize f32_bytes)
{
  g_return_if_fail (link != NULL);
  counters_add (link, FALSE, frame_len, f32_bytes);
  if (total && total != link)
    counters_add (total, FALSE, frame_len, f32_bytes);
}

void
rlx_wire_counters_add_rx_info (RlxWireCounters *link, RlxWireCounters *total,
                               const RlxWireInfo *info)
{
  g_return_if_fail (info != NULL);
  rlx_wire_counters_add_rx (link, total, info->frame_len,
                            rlx_wire_f32_equivalent (info->frame_len, info->n, info->precision));
}

void
rlx_wire_counters_reset (RlxWireCounters *c)
{
  g_return_if_fail (c != NULL);
  memset (c, 0, sizeof *c);
}

double
rlx_wire_counters_tx_ratio (const RlxWireCounters *c)
{
  g_return_val_if_fail (c != NULL, 1.0);
  return c->tx_bytes ? (double) c->tx_f32_bytes / (double) c->tx_bytes : 1.0;
}
