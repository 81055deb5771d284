/* fuzz-signal-open.c — libFuzzer target for opening sealed signalling messages
 *
 * First byte even: the rest is the SEALED JSON as a server could forward it
 * (wrapped in an envelope, so the depth and size checks run first); it must
 * be refused (no tag can match without the key) without crashing. First
 * byte odd: the rest is a message BODY that gets sealed correctly (AES-256-
 * GCM under the key HKDF derives, as a sender with the key would), so the
 * body checks and the replay bookkeeping run on arbitrary JSON; what is
 * accepted must carry a valid sender, type and counter. Two openers keep
 * state across inputs, as a long-running node would. */
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

/* The SEALED object a sender with @key would make of @body in @room's
 * room (the recipe of rlx-signal-msg.c, written out again here on purpose:
 * it pins the format). */
static JsonNode *
seal_as_sender (const char *cohort, const char *body, gsize len)
{
  static const char salt[] = "rlx-signal/2";
  static const char aead_label[] = "rlx-signal/2 aead";
  g_autofree char *room_info = g_strconcat ("rlx-signal/2 room\n", cohort, NULL);
  guint8 prk[32], k[32], id[16];
  gnutls_datum_t kd = { (unsigned char *) key, 16 }, sd = { (unsigned char *) salt, sizeof salt - 1 };
  gnutls_datum_t pd = { prk, 32 }, ad = { (unsigned char *) aead_label, sizeof aead_label - 1 };
  gnutls_datum_t rd = { (unsigned char *) room_info, (unsigned int) strlen (room_info) };
  gnutls_datum_t cd = { k, 32 };
  gnutls_aead_cipher_hd_t h;
  GString *aad = g_string_new ("rlx-signal/2\n");
  g_autofree guint8 *box = g_malloc (12 + len + 16);
  gsize ct_len = len + 16;
  g_autofree char *b64 = NULL;
  JsonObject *so = json_object_new ();
  JsonNode *out;

  gnutls_hkdf_extract (GNUTLS_MAC_SHA256, &kd, &sd, prk);
  gnutls_hkdf_expand (GNUTLS_MAC_SHA256, &pd, &ad, k, sizeof k);
  gnutls_hkdf_expand (GNUTLS_MAC_SHA256, &pd, &rd, id, sizeof id);
  for (guint i = 0; i < sizeof id; i++)
    g_string_append_printf (aad, "%02x", id[i]);
  memset (box, 0x5a, 12);   /* any nonce: the opener never sees it twice with another body */
  box[0] = (guint8) len;
  box[1] = (guint8) (len >> 8);
  check (gnutls_aead_cipher_init (&h, GNUTLS_CIPHER_AES_256_GCM, &cd) == 0, "aead init");
  check (gnutls_aead_cipher_encrypt (h, box, 12, aad->str, aad->len, 16, body, len, box + 12,
                                     &ct_len) == 0, "encrypt");
  gnutls_aead_cipher_deinit (h);
  g_string_free (aad, TRUE);
  b64 = g_base64_encode (box, 12 + ct_len);
  json_object_set_string_member (so, "c", b64);
  out = json_node_init_object (json_node_alloc (), so);
  json_object_unref (so);
  return out;
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
      /* Without the key nothing can pass, unless the input copied a real
       * sealed box, which random bytes do not. */
      check (body == NULL || error == NULL, "a result or an error");
      if (body == NULL)
        check (error && error->domain == RLX_SIGNAL_ERROR, "refusal carries an RLX_SIGNAL_ERROR");
      return 0;
    }
  {
    g_autofree char *b = g_strndup ((const char *) data + 1, size - 1);
    g_autoptr(JsonNode) sealed = seal_as_sender ("room", b, strlen (b));

    body = rlx_signal_auth_open (auth, sealed, &error);
    if (body == NULL)
      {
        check (error && error->domain == RLX_SIGNAL_ERROR, "refusal carries an RLX_SIGNAL_ERROR");
        check (!g_error_matches (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_BAD_MAC),
               "a correct tag is never refused as a bad one");
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
