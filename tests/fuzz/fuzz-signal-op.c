/* fuzz-signal-op.c — libFuzzer target for the signalling envelope parser
 *
 * The server parses what clients send and clients parse what the (untrusted)
 * server sends. The first byte picks the direction; the rest is the
 * message. A refusal carries an RLX_SIGNAL_ERROR; a success serialises back
 * to text that parses to the same kind of envelope. */
#include "rlx-config.h"

#include <stdint.h>
#include <stdlib.h>

#include "core/p2p/rlx-signal-msg.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
check (gboolean ok, const char *what)
{
  if (!ok)
    {
      g_printerr ("fuzz-signal-op: invariant broken: %s\n", what);
      abort ();
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxSignalOp) op = NULL;
  g_autoptr(RlxSignalOp) op2 = NULL;
  g_autofree char *text = NULL;
  gboolean from_server;

  if (size == 0)
    return 0;
  from_server = data[0] & 1;
  op = rlx_signal_op_parse ((const char *) data + 1, size - 1, from_server, &error);
  if (op == NULL)
    {
      check (error != NULL && error->domain == RLX_SIGNAL_ERROR && error->message[0],
             "a refusal carries an RLX_SIGNAL_ERROR");
      return 0;
    }
  text = rlx_signal_op_to_string (op);
  op2 = rlx_signal_op_parse (text, strlen (text), from_server, &error);
  check (op2 != NULL, "a serialised envelope parses again");
  check (op2->kind == op->kind, "same kind after a round trip");
  check (g_strcmp0 (op2->room, op->room) == 0 && g_strcmp0 (op2->node, op->node) == 0 &&
         g_strcmp0 (op2->to, op->to) == 0 && g_strcmp0 (op2->from, op->from) == 0,
         "same names after a round trip");
  return 0;
}
