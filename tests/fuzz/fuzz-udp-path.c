/* fuzz-udp-path.c — libFuzzer target for what the remote link reads itself
 *
 * The selected ICE pair's socket delivers messages the kernel may have
 * coalesced (UDP GRO, with the segment size in a control message); the link
 * cuts them back into datagrams and tells STUN from QUIC by their bytes. The
 * input is [u16 LE segment size][the message]. The datagrams must tile the
 * message exactly, none longer than the segment; a datagram called STUN
 * must carry a STUN header whose length covers exactly the rest. */
#include "rlx-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <glib.h>

#include "core/p2p/rlx-udp-path.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

#define MAX_OUT 4096

static void
check (gboolean ok, const char *what)
{
  if (!ok)
    {
      g_printerr ("fuzz-udp-path: invariant broken: %s\n", what);
      abort ();
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static RlxDatagram out[MAX_OUT];
  gsize segment, len, off = 0;
  const guint8 *msg;
  guint n;

  if (size < 2)
    return 0;
  segment = (gsize) data[0] | ((gsize) data[1] << 8);
  msg = data + 2;
  len = size - 2;
  n = rlx_udp_split (msg, len, segment, out, MAX_OUT);
  check (len == 0 ? n == 0 : n >= 1, "a message gives at least one datagram");
  for (guint i = 0; i < n; i++)
    {
      RlxUdpDatagramKind kind;

      check (out[i].data == msg + off, "datagrams are contiguous");
      check (out[i].len > 0, "no empty datagram");
      check (segment == 0 || segment >= len || out[i].len <= segment, "none over the segment size");
      check (i + 1 == n || segment == 0 || segment >= len || out[i].len == segment,
             "only the last may be short");
      kind = rlx_udp_datagram_classify (out[i].data, out[i].len);
      if (kind == RLX_UDP_DATAGRAM_STUN || kind == RLX_UDP_DATAGRAM_STUN_INDICATION)
        check (out[i].len >= 20 && (out[i].data[0] & 0xC0) == 0 &&
               (((gsize) out[i].data[2] << 8) | out[i].data[3]) + 20 == out[i].len,
               "STUN only with a header that covers the datagram");
      off += out[i].len;
    }
  check (n == MAX_OUT || off == len, "the datagrams cover the message");
  return 0;
}
