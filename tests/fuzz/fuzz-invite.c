/* fuzz-invite.c — libFuzzer target for the invite parser
 *
 * Any bytes are an invite candidate. The parser must fail with an
 * RLX_INVITE_ERROR whose message shows the expected form and never the key,
 * or succeed with parts that hold together: a valid host, port and cohort,
 * and printing then parsing again gives the same invite. */
#include "rlx-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/p2p/rlx-invite.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
check (gboolean ok, const char *what)
{
  if (!ok)
    {
      g_printerr ("fuzz-invite: invariant broken: %s\n", what);
      abort ();
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autofree char *text = g_strndup ((const char *) data, size);
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxInvite) inv = rlx_invite_parse (text, &error);
  g_autofree char *again_s = NULL;
  g_autoptr(RlxInvite) again = NULL;

  if (inv == NULL)
    {
      check (error != NULL && error->domain == RLX_INVITE_ERROR, "a refusal carries the error");
      check (strstr (error->message, RLX_INVITE_FORM) != NULL, "the message shows the form");
      return 0;
    }
  check (error == NULL, "success sets no error");
  check (rlx_invite_host_is_valid (inv->host), "host valid");
  check (inv->port > 0, "port valid");
  check (rlx_invite_cohort_is_valid (inv->cohort), "cohort valid");
  again_s = rlx_invite_to_string (inv);
  again = rlx_invite_parse (again_s, &error);
  check (again != NULL, "a printed invite parses");
  check (g_str_equal (again->host, inv->host) && again->port == inv->port &&
         g_str_equal (again->cohort, inv->cohort) &&
         memcmp (again->key, inv->key, RLX_INVITE_KEY_LEN) == 0, "round trip");
  return 0;
}
