/* fuzz-signal-open.c — libFuzzer target for opening sealed signalling messages
 *
 * First byte even: the rest is the SEALED JSON as a server could forward it
 * (wrapped in an envelope, so the depth and size checks run first); it must
 * be refused (no MAC can match without the key) without crashing. First byte
 * odd: the rest is a message BODY that gets a correct MAC, so the body
 * checks and the replay bookkeeping run on arbitrary JSON; what is accepted
 * must carry a valid sender, type and counter. Two openers keep state
 * across inputs, as a long-running node would. */
#include "rlx-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <gnutls/crypto.h>

#include "core/p2p/rlx-signal-msg.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static const guint8 key[16] = { 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7 };

static void
check (gboolean ok, const char *what)
{
  if (!ok)
    {
      g_printerr ("fuzz-signal-open: invariant broken: %s\n", what);
      abort ();
    }
}

static gint64
fixed_clock (gpointer user_data)
{
  return 1700000000000;
}

/* The MAC a sender with @key would compute (same recipe as rlx-signal-msg.c,
 * written out again here on purpose: it pins the format). */
static char *
mac_of (const char *room, const char *body, gsize len)
{
  static const char label[] = "rlx-signal/1 key";
  static const char prefix[] = "rlx-signal/1\n";
  guint8 k[32], d[32];
  gnutls_hmac_hd_t h;
  GString *s = g_string_new (NULL);

  gnutls_hmac_fast (GNUTLS_MAC_SHA256, key, 16, label, sizeof label - 1, k);
  gnutls_hmac_init (&h, GNUTLS_MAC_SHA256, k, sizeof k);
  gnutls_hmac (h, prefix, sizeof prefix - 1);
  gnutls_hmac (h, room, strlen (room));
  gnutls_hmac (h, "\n", 1);
  gnutls_hmac (h, body, len);
  gnutls_hmac_deinit (h, d);
  for (guint i = 0; i < sizeof d; i++)
    g_string_append_printf (s, "%02x", d[i]);
  return g_string_free (s, FALSE);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static RlxSignalAuth *auth;
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonObject) body = NULL;

  if (auth == NULL)
    {
      auth = rlx_signal_auth_new (key, "room", "me");
      rlx_signal_auth_set_clock (auth, fixed_clock, NULL);
    }
  if (size == 0)
    return 0;
  if ((data[0] & 1) == 0)
    {
      g_autofree char *text = g_strdup_printf ("{\"op\":\"msg\",\"from\":\"x\",\"data\":%.*s}",
                                               (int) (size - 1), (const char *) data + 1);
      g_autoptr(RlxSignalOp) op = rlx_signal_op_parse (text, strlen (text), TRUE, NULL);
      if (op == NULL)
        return 0;
      body = rlx_signal_auth_open (auth, op->data, &error);
      /* Without the key nothing can pass, unless the input copied a real MAC
       * of a real body, which random bytes do not. */
      check (body == NULL || error == NULL, "a result or an error");
      if (body == NULL)
        check (error && error->domain == RLX_SIGNAL_ERROR, "refusal carries an RLX_SIGNAL_ERROR");
      return 0;
    }
  {
    g_autofree char *b = g_strndup ((const char *) data + 1, size - 1);
    g_autofree char *m = mac_of ("room", b, strlen (b));
    g_autoptr(JsonObject) so = json_object_new ();
    g_autoptr(JsonNode) sealed = NULL;

    json_object_set_string_member (so, "b", b);
    json_object_set_string_member (so, "m", m);
    sealed = json_node_init_object (json_node_alloc (), so);
    body = rlx_signal_auth_open (auth, sealed, &error);
    if (body == NULL)
      {
        check (error && error->domain == RLX_SIGNAL_ERROR, "refusal carries an RLX_SIGNAL_ERROR");
        check (!g_error_matches (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_BAD_MAC),
               "a correct MAC is never refused as a bad one");
        return 0;
      }
    check (rlx_signal_name_is_valid (json_object_get_string_member (body, "from")), "sender");
    check (!g_str_equal (json_object_get_string_member (body, "from"), "me"), "not our own");
    check (json_object_get_int_member (body, "seq") > 0, "counter");
    /* The same message again is a replay. */
    {
      g_autoptr(GError) e2 = NULL;
      g_autoptr(JsonObject) twice = rlx_signal_auth_open (auth, sealed, &e2);
      check (twice == NULL && g_error_matches (e2, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_REPLAY),
             "the same message twice is a replay");
    }
  }
  return 0;
}
