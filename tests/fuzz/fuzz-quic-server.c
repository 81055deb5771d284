/* fuzz-quic-server.c — libFuzzer target for the QUIC handshake side of a link
 *
 * The input is a run of datagrams ([u16 LE length][bytes] each) arriving at
 * a remote link's QUIC server before and during a handshake, as anyone who
 * can reach its UDP port could send them. Nothing may crash, and nothing
 * that is not a well-formed QUIC Initial may get an answer. The corpus has
 * real client Initials, two clients' in turn (corpus/quic-server/
 * two-client-initials: a second client's Initial during a handshake is
 * dropped, the first one's repeat is not). */
#include "rlx-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/p2p/rlx-quic.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static guint answered;

static guint
send_cb (const RlxDatagram *d, guint n, gpointer user_data)
{
  answered += n;
  return n;
}

static const RlxQuicCallbacks callbacks = { .send = send_cb };

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static RlxIdentity *identity;
  g_autoptr(RlxQuic) q = NULL;
  RlxQuicConfig c = { 0 };
  gboolean any_initial = FALSE;
  gsize p = 0;

  if (identity == NULL)
    identity = rlx_identity_new_ephemeral (NULL);
  c.is_client = FALSE;
  c.identity = identity;
  c.peer_fingerprint = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  q = rlx_quic_new (&c, &callbacks, NULL, NULL);
  answered = 0;
  while (p + 2 <= size)
    {
      gsize n = MIN ((gsize) (data[p] | (data[p + 1] << 8)), size - p - 2);
      const guint8 *d = data + p + 2;
      /* A long-header packet of version 1, type Initial, at least 1200 bytes. */
      if (n >= 1200 && (d[0] & 0xf0) == 0xc0 && d[1] == 0 && d[2] == 0 && d[3] == 0 && d[4] == 1)
        any_initial = TRUE;
      rlx_quic_receive (q, d, n);
      p += 2 + n;
    }
  while (g_main_context_iteration (NULL, FALSE))
    ;
  if (!any_initial && answered > 0)
    {
      g_printerr ("fuzz-quic-server: answered %u datagrams to input without an Initial\n", answered);
      abort ();
    }
  return 0;
}
