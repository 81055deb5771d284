/* fuzz-signal-upgrade.c — libFuzzer target for the signalling server's
 * judgement of an HTTP upgrade request (rlx-signal-upgrade.c)
 *
 * The bytes are what a client sends before its WebSocket upgrade. A
 * verdict is INCOMPLETE only below the header cap; ACCEPT says 101 with a
 * 28-character Sec-WebSocket-Accept; REFUSE an HTTP error with a reason;
 * the verdict of the header block alone is the same as with more bytes
 * after it; every verdict's response can be built. */
#include "rlx-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/p2p/rlx-signal-upgrade.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
check (gboolean ok, const char *what)
{
  if (!ok)
    {
      g_printerr ("fuzz-signal-upgrade: invariant broken: %s\n", what);
      abort ();
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  RlxSignalUpgrade u, again;
  RlxSignalUpgradeVerdict v, v2;
  g_autofree char *resp = NULL;
  gsize len = 0;

  v = rlx_signal_upgrade_check (data, size, &u);
  if (v == RLX_SIGNAL_UPGRADE_INCOMPLETE)
    {
      check (size < RLX_SIGNAL_UPGRADE_MAX_HEADER, "incomplete only below the cap");
      rlx_signal_upgrade_clear (&u);
      return 0;
    }
  if (v == RLX_SIGNAL_UPGRADE_ACCEPT)
    {
      check (u.status == 101 && u.accept != NULL && strlen (u.accept) == 28,
             "an accept is a 101 with its digest");
      check (u.header_len > 0 && u.header_len <= size, "the header block is inside the input");
    }
  else
    check (u.status >= 400 && u.status < 600 && u.why != NULL && u.why[0],
           "a refusal is an HTTP error with a reason");
  if (u.header_len > 0)
    {
      v2 = rlx_signal_upgrade_check (data, u.header_len, &again);
      check (v2 == v && again.status == u.status, "bytes after the headers change nothing");
      rlx_signal_upgrade_clear (&again);
    }
  resp = rlx_signal_upgrade_response (&u, &len);
  check (resp != NULL && len == strlen (resp) && g_str_has_prefix (resp, "HTTP/1.1 "),
         "a response can be built");
  rlx_signal_upgrade_clear (&u);
  return 0;
}
