/* test-invite.c — rlx://HOST:PORT/COHORT#KEY: round trips, every kind of
 * malformed invite refused with a message that shows the expected form and
 * never the key, and the example in that message being a valid invite. */
#include "rlx-config.h"
#include "core/p2p/rlx-invite.h"

#include <string.h>

static void
test_round_trip (void)
{
  g_autoptr(GError) error = NULL;
  const char *hosts[] = { "192.168.1.20", "localhost", "gpu-box.lan", "::1", "fe80::1" };

  for (guint i = 0; i < G_N_ELEMENTS (hosts); i++)
    {
      g_autoptr(RlxInvite) a = rlx_invite_new (hosts[i], 7000 + i, "demo.1_x-y", &error);
      g_autoptr(RlxInvite) b = NULL;
      g_autofree char *s = NULL;

      g_assert_no_error (error);
      s = rlx_invite_to_string (a);
      g_assert_true (g_str_has_prefix (s, "rlx://"));
      if (strchr (hosts[i], ':'))
        g_assert_nonnull (strstr (s, "[")); /* IPv6 in brackets */
      b = rlx_invite_parse (s, &error);
      g_assert_no_error (error);
      g_assert_cmpstr (b->host, ==, hosts[i]);
      g_assert_cmpuint (b->port, ==, 7000 + i);
      g_assert_cmpstr (b->cohort, ==, "demo.1_x-y");
      g_assert_cmpmem (a->key, RLX_INVITE_KEY_LEN, b->key, RLX_INVITE_KEY_LEN);
      /* 22 base64url characters after '#'. */
      g_assert_cmpuint (strlen (strchr (s, '#') + 1), ==, 22);
    }
}

static void
test_keys_random (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxInvite) a = rlx_invite_new ("h", 1, "c", &error);
  g_autoptr(RlxInvite) b = rlx_invite_new ("h", 1, "c", &error);
  static const guint8 zero[RLX_INVITE_KEY_LEN];

  g_assert_no_error (error);
  g_assert_true (memcmp (a->key, b->key, RLX_INVITE_KEY_LEN) != 0);
  g_assert_true (memcmp (a->key, zero, RLX_INVITE_KEY_LEN) != 0);
}

static void
test_hex_key_and_spaces (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxInvite) inv =
    rlx_invite_parse ("  RLX://10.0.0.1:9/c#000102030405060708090A0b0c0d0e0f \n", &error);

  g_assert_no_error (error);
  for (guint i = 0; i < RLX_INVITE_KEY_LEN; i++)
    g_assert_cmpuint (inv->key[i], ==, i);
}

static void
test_known_key_encoding (void)
{
  guint8 key[RLX_INVITE_KEY_LEN];
  g_autofree char *s = NULL;

  for (guint i = 0; i < RLX_INVITE_KEY_LEN; i++)
    key[i] = (guint8) (0xf0 + i);
  s = rlx_invite_key_to_string (key);
  /* base64url of f0f1…ff, as Python's base64.urlsafe_b64encode gives it. */
  g_assert_cmpstr (s, ==, "8PHy8_T19vf4-fr7_P3-_w");
}

static void
test_example_in_message_is_valid (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxInvite) bad = rlx_invite_parse ("nonsense", &error);
  const char *msg, *ex, *end;
  g_autofree char *example = NULL;
  g_autoptr(RlxInvite) good = NULL;

  g_assert_null (bad);
  msg = error->message;
  ex = strstr (msg, "(for example ");
  g_assert_nonnull (ex);
  ex += strlen ("(for example ");
  end = strchr (ex, ')');
  example = g_strndup (ex, (gsize) (end - ex));
  g_clear_error (&error);
  good = rlx_invite_parse (example, &error);
  g_assert_no_error (error);
}

static void
test_malformed (void)
{
  struct { const char *text; const char *phrase; } cases[] = {
    { "", "does not start with rlx://" },
    { "http://h:1/c#AAAAAAAAAAAAAAAAAAAAAA", "does not start with rlx://" },
    { "rlx://h:1/c", "'#KEY' part is missing" },
    { "rlx://h:1#AAAAAAAAAAAAAAAAAAAAAA", "'/COHORT' part is missing" },
    { "rlx://h/c#AAAAAAAAAAAAAAAAAAAAAA", "':PORT'" },
    { "rlx://:1/c#AAAAAAAAAAAAAAAAAAAAAA", "host is missing" },
    { "rlx://h:0/c#AAAAAAAAAAAAAAAAAAAAAA", "port must be a number" },
    { "rlx://h:65536/c#AAAAAAAAAAAAAAAAAAAAAA", "port must be a number" },
    { "rlx://h:+1/c#AAAAAAAAAAAAAAAAAAAAAA", "port must be a number" },
    { "rlx://h:1x/c#AAAAAAAAAAAAAAAAAAAAAA", "port must be a number" },
    { "rlx://h:1/#AAAAAAAAAAAAAAAAAAAAAA", "cohort name after '/' is missing" },
    { "rlx://h:1/a b#AAAAAAAAAAAAAAAAAAAAAA", "cohort name must be" },
    { "rlx://h:1/..#AAAAAAAAAAAAAAAAAAAAAA", "cohort name must be" },
    { "rlx://h:1/a/b#AAAAAAAAAAAAAAAAAAAAAA", "cohort name must be" },
    { "rlx://h:1/c#", "key after '#' is missing" },
    { "rlx://h:1/c#AAAA", "22 URL-safe base64 characters or 32 hex digits" },
    { "rlx://h:1/c#AAAAAAAAAAAAAAAAAAAAA+", "not URL-safe base64" },
    { "rlx://h:1/c#AAAAAAAAAAAAAAAAAAAAAB", "last character" },
    { "rlx://[::1/c#AAAAAAAAAAAAAAAAAAAAAA", "no closing ']'" },
    { "rlx://[nothex]:1/c#AAAAAAAAAAAAAAAAAAAAAA", "not an IPv6 address" },
    { "rlx://[::1]/c#AAAAAAAAAAAAAAAAAAAAAA", "':PORT'" },
    { "rlx://user@h:1/c#AAAAAAAAAAAAAAAAAAAAAA", "user names" },
    { "rlx://bad_host!:1/c#AAAAAAAAAAAAAAAAAAAAAA", "neither a DNS name" },
    { "rlx://1.2.3.999:1/c#AAAAAAAAAAAAAAAAAAAAAA", "neither a DNS name" },
    { "rlx://-h:1/c#AAAAAAAAAAAAAAAAAAAAAA", "neither a DNS name" },
    { "rlx://h\x01:1/c#AAAAAAAAAAAAAAAAAAAAAA", "neither a DNS name" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(RlxInvite) inv = rlx_invite_parse (cases[i].text, &error);

      g_assert_null (inv);
      g_assert_error (error, RLX_INVITE_ERROR, RLX_INVITE_ERROR_INVALID);
      if (strstr (error->message, cases[i].phrase) == NULL)
        g_error ("case %u '%s': message '%s' lacks '%s'", i, cases[i].text, error->message,
                 cases[i].phrase);
      g_assert_nonnull (strstr (error->message, RLX_INVITE_FORM));
      /* The key is a secret: never echoed. */
      g_assert_null (strstr (error->message, "#AAAAAAAAAAAAAAAAAAAAA"));
    }
}

static void
test_too_long (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *s = g_strnfill (100000, 'a');
  g_autoptr(RlxInvite) inv = rlx_invite_parse (s, &error);

  g_assert_null (inv);
  g_assert_error (error, RLX_INVITE_ERROR, RLX_INVITE_ERROR_INVALID);
  g_assert_cmpuint (strlen (error->message), <, 600);
}

static void
test_new_refuses_bad_parts (void)
{
  g_autoptr(GError) error = NULL;

  g_assert_null (rlx_invite_new ("bad host", 1, "c", &error));
  g_assert_error (error, RLX_INVITE_ERROR, RLX_INVITE_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_null (rlx_invite_new ("h", 0, "c", &error));
  g_assert_error (error, RLX_INVITE_ERROR, RLX_INVITE_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_null (rlx_invite_new ("h", 1, "no/slash", &error));
  g_assert_error (error, RLX_INVITE_ERROR, RLX_INVITE_ERROR_INVALID);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/remote/invite/round-trip", test_round_trip);
  g_test_add_func ("/remote/invite/keys-random", test_keys_random);
  g_test_add_func ("/remote/invite/hex-key-and-spaces", test_hex_key_and_spaces);
  g_test_add_func ("/remote/invite/known-key-encoding", test_known_key_encoding);
  g_test_add_func ("/remote/invite/example-in-message-is-valid", test_example_in_message_is_valid);
  g_test_add_func ("/remote/invite/malformed", test_malformed);
  g_test_add_func ("/remote/invite/too-long", test_too_long);
  g_test_add_func ("/remote/invite/new-refuses-bad-parts", test_new_refuses_bad_parts);
  return g_test_run ();
}
