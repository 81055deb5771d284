/* rlx-invite.c — parse and print rlx://HOST:PORT/COHORT#KEY
 *
 * The parser reads the text once, left to right, and refuses anything it
 * does not expect; every refusal names the part that is wrong and shows the
 * expected form. The key is never echoed back in a message.
 */
#include "rlx-config.h"
#include "rlx-invite.h"

#include <string.h>
#include <gio/gio.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

G_DEFINE_QUARK (rlx-invite-error-quark, rlx_invite_error)

#define SCHEME       "rlx://"
#define MAX_COHORT   64
#define MAX_HOST     253
#define KEY_B64_LEN  22
#define KEY_HEX_LEN  32

static const char b64url[] =
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

gboolean
rlx_invite_cohort_is_valid (const char *name)
{
  gsize n;

  if (name == NULL)
    return FALSE;
  n = strlen (name);
  if (n == 0 || n > MAX_COHORT || strcmp (name, ".") == 0 || strcmp (name, "..") == 0)
    return FALSE;
  for (gsize i = 0; i < n; i++)
    if (!g_ascii_isalnum (name[i]) && name[i] != '.' && name[i] != '_' && name[i] != '-')
      return FALSE;
  return TRUE;
}

static gboolean
dns_name_is_valid (const char *host)
{
  gsize n = strlen (host), label = 0;

  if (n == 0 || n > MAX_HOST)
    return FALSE;
  for (gsize i = 0; i <= n; i++)
    {
      char c = host[i];
      if (c == '.' || c == '\0')
        {
          if (label == 0 || label > 63 || host[i - 1] == '-' || host[i - label] == '-')
            return FALSE;
          label = 0;
          continue;
        }
      if (!g_ascii_isalnum (c) && c != '-')
        return FALSE;
      label++;
    }
  return TRUE;
}

gboolean
rlx_invite_host_is_valid (const char *host)
{
  if (host == NULL || *host == '\0' || strlen (host) > MAX_HOST)
    return FALSE;
  if (g_hostname_is_ip_address (host))
    return TRUE;
  /* Something that looks like an address but is not one (1.2.3.999) is a typo,
   * not a DNS name. */
  if (strspn (host, "0123456789.") == strlen (host))
    return FALSE;
  return dns_name_is_valid (host);
}

char *
rlx_invite_key_to_string (const guint8 key[RLX_INVITE_KEY_LEN])
{
  char out[KEY_B64_LEN + 1];
  guint acc = 0, bits = 0, o = 0;

  for (guint i = 0; i < RLX_INVITE_KEY_LEN; i++)
    {
      acc = (acc << 8) | key[i];
      bits += 8;
      while (bits >= 6)
        {
          bits -= 6;
          out[o++] = b64url[(acc >> bits) & 63];
        }
    }
  if (bits > 0)
    out[o++] = b64url[(acc << (6 - bits)) & 63];
  g_assert (o == KEY_B64_LEN);
  out[o] = '\0';
  return g_strdup (out);
}

static int
b64url_value (char c)
{
  const char *p = c ? strchr (b64url, c) : NULL;
  return p ? (int) (p - b64url) : -1;
}

static gboolean
parse_key (const char *text, gsize len, guint8 key[RLX_INVITE_KEY_LEN], const char **why)
{
  if (len == KEY_HEX_LEN)
    {
      gboolean all_hex = TRUE;
      for (gsize i = 0; i < len; i++)
        all_hex = all_hex && g_ascii_isxdigit (text[i]);
      if (all_hex)
        {
          for (gsize i = 0; i < RLX_INVITE_KEY_LEN; i++)
            key[i] = (guint8) (g_ascii_xdigit_value (text[2 * i]) << 4 |
                               g_ascii_xdigit_value (text[2 * i + 1]));
          return TRUE;
        }
    }
  if (len == KEY_B64_LEN)
    {
      guint acc = 0, bits = 0, o = 0;
      for (gsize i = 0; i < len; i++)
        {
          int v = b64url_value (text[i]);
          if (v < 0)
            {
              *why = "the key has a character that is not URL-safe base64 (A-Z a-z 0-9 - _)";
              return FALSE;
            }
          acc = (acc << 6) | (guint) v;
          bits += 6;
          if (bits >= 8)
            {
              bits -= 8;
              key[o++] = (guint8) (acc >> bits);
            }
        }
      /* 22 characters carry 132 bits; the last 4 must be zero, or the same
       * key would have 16 spellings. */
      if ((acc & ((1u << bits) - 1)) != 0)
        {
          *why = "the key's last character is not one a 128-bit key can end with "
                 "(the invite was changed or cut)";
          return FALSE;
        }
      g_assert (o == RLX_INVITE_KEY_LEN);
      return TRUE;
    }
  *why = len == 0 ? "the key after '#' is missing"
                  : "the key must be 22 URL-safe base64 characters or 32 hex digits (128 bits)";
  return FALSE;
}

/* The input for a message: printable, cut at 80 characters, and without the
 * key (everything after '#' becomes "#…"). */
char *
rlx_invite_redact (const char *text)
{
  g_autoptr(GString) s = g_string_new (NULL);

  for (const char *p = text; *p && s->len < 80; p++)
    {
      if (*p == '#')
        {
          g_string_append (s, "#…");
          return g_string_free (g_steal_pointer (&s), FALSE);
        }
      if (g_ascii_isprint (*p))
        g_string_append_c (s, *p);
      else
        g_string_append_printf (s, "\\x%02x", (guint8) *p);
    }
  if (s->len >= 80)
    g_string_append (s, "…");
  return g_string_free (g_steal_pointer (&s), FALSE);
}

static gboolean
fail (GError **error, const char *text, const char *why)
{
  g_autofree char *shown = rlx_invite_redact (text);

  g_set_error (error, RLX_INVITE_ERROR, RLX_INVITE_ERROR_INVALID,
               "'%s' is not an invite: %s. An invite looks like " RLX_INVITE_FORM
               " (for example rlx://192.168.1.20:7000/demo#3q2-7wEjRWeJq83vEjRWeA), "
               "as printed by 'rlx-rank join --host PORT' on the founding machine",
               shown, why);
  return FALSE;
}

RlxInvite *
rlx_invite_parse (const char *text, GError **error)
{
  g_autoptr(RlxInvite) inv = g_new0 (RlxInvite, 1);
  g_autofree char *s = NULL;
  const char *p, *host_end, *port_start, *slash, *hash;
  const char *why = NULL;
  guint64 port;

  g_return_val_if_fail (text != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (strlen (text) > RLX_INVITE_MAX_LEN)
    return fail (error, text, "it is far longer than any invite"), NULL;
  s = g_strstrip (g_strdup (text));
  if (g_ascii_strncasecmp (s, SCHEME, strlen (SCHEME)) != 0)
    return fail (error, s, "it does not start with rlx://"), NULL;
  p = s + strlen (SCHEME);

  hash = strchr (p, '#');
  if (hash == NULL)
    return fail (error, s, "the '#KEY' part is missing (copy the whole invite)"), NULL;
  slash = memchr (p, '/', (gsize) (hash - p));
  if (slash == NULL)
    return fail (error, s, "the '/COHORT' part is missing"), NULL;

  /* HOST:PORT in [p, slash) */
  if (*p == '[')
    {
      const char *close = memchr (p, ']', (gsize) (slash - p));
      if (close == NULL)
        return fail (error, s, "an IPv6 address in brackets has no closing ']'"), NULL;
      inv->host = g_strndup (p + 1, (gsize) (close - p - 1));
      if (!g_hostname_is_ip_address (inv->host) || strchr (inv->host, ':') == NULL)
        return fail (error, s, "the host in brackets is not an IPv6 address"), NULL;
      host_end = close + 1;
      if (host_end >= slash || *host_end != ':')
        return fail (error, s, "the ':PORT' after the host is missing"), NULL;
    }
  else
    {
      host_end = memchr (p, ':', (gsize) (slash - p));
      if (host_end == NULL)
        return fail (error, s, "the ':PORT' after the host is missing"), NULL;
      inv->host = g_strndup (p, (gsize) (host_end - p));
      if (*inv->host == '\0')
        return fail (error, s, "the host is missing"), NULL;
      if (strchr (inv->host, '@') != NULL)
        return fail (error, s, "user names ('user@') have no place in an invite"), NULL;
      if (!rlx_invite_host_is_valid (inv->host))
        return fail (error, s, "the host is neither a DNS name nor an IP address "
                               "(an IPv6 address goes in brackets: [::1])"), NULL;
    }
  port_start = host_end + 1;
  {
    g_autofree char *port_s = g_strndup (port_start, (gsize) (slash - port_start));
    if (*port_s == '\0' || strspn (port_s, "0123456789") != strlen (port_s) ||
        !g_ascii_string_to_unsigned (port_s, 10, 1, 65535, &port, NULL))
      return fail (error, s, "the port must be a number from 1 to 65535"), NULL;
    inv->port = (guint16) port;
  }

  inv->cohort = g_strndup (slash + 1, (gsize) (hash - slash - 1));
  if (*inv->cohort == '\0')
    return fail (error, s, "the cohort name after '/' is missing"), NULL;
  if (!rlx_invite_cohort_is_valid (inv->cohort))
    return fail (error, s, "the cohort name must be 1 to 64 of A-Z a-z 0-9 . _ -"), NULL;

  if (!parse_key (hash + 1, strlen (hash + 1), inv->key, &why))
    return fail (error, s, why), NULL;
  return g_steal_pointer (&inv);
}

RlxInvite *
rlx_invite_new_with_key (const char *host, guint16 port, const char *cohort,
                         const guint8 key[RLX_INVITE_KEY_LEN], GError **error)
{
  RlxInvite *inv;

  g_return_val_if_fail (key != NULL, NULL);
  if (!rlx_invite_host_is_valid (host))
    {
      g_set_error (error, RLX_INVITE_ERROR, RLX_INVITE_ERROR_INVALID,
                   "'%s' cannot go in an invite: it is neither a DNS name nor an IP address",
                   host ? host : "(none)");
      return NULL;
    }
  if (port == 0)
    {
      g_set_error (error, RLX_INVITE_ERROR, RLX_INVITE_ERROR_INVALID,
                   "port 0 cannot go in an invite: give the port signalling listens on");
      return NULL;
    }
  if (!rlx_invite_cohort_is_valid (cohort))
    {
      g_set_error (error, RLX_INVITE_ERROR, RLX_INVITE_ERROR_INVALID,
                   "'%s' is not a usable cohort name (1 to 64 of A-Z a-z 0-9 . _ -)",
                   cohort ? cohort : "(none)");
      return NULL;
    }
  inv = g_new0 (RlxInvite, 1);
  inv->host = g_strdup (host);
  inv->port = port;
  inv->cohort = g_strdup (cohort);
  memcpy (inv->key, key, RLX_INVITE_KEY_LEN);
  return inv;
}

RlxInvite *
rlx_invite_new (const char *host, guint16 port, const char *cohort, GError **error)
{
  guint8 key[RLX_INVITE_KEY_LEN];
  RlxInvite *inv;
  int rv = gnutls_rnd (GNUTLS_RND_KEY, key, sizeof key);

  if (rv < 0)
    {
      g_set_error (error, RLX_INVITE_ERROR, RLX_INVITE_ERROR_INVALID,
                   "cannot draw a random cohort key: %s", gnutls_strerror (rv));
      return NULL;
    }
  inv = rlx_invite_new_with_key (host, port, cohort, key, error);
  gnutls_memset (key, 0, sizeof key);
  return inv;
}

RlxInvite *
rlx_invite_copy (const RlxInvite *invite)
{
  RlxInvite *c;

  g_return_val_if_fail (invite != NULL, NULL);
  c = g_new0 (RlxInvite, 1);
  c->host = g_strdup (invite->host);
  c->port = invite->port;
  c->cohort = g_strdup (invite->cohort);
  memcpy (c->key, invite->key, RLX_INVITE_KEY_LEN);
  return c;
}

void
rlx_invite_free (RlxInvite *invite)
{
  if (invite == NULL)
    return;
  g_free (invite->host);
  g_free (invite->cohort);
  gnutls_memset (invite->key, 0, RLX_INVITE_KEY_LEN);
  g_free (invite);
}

char *
rlx_invite_dup_authority (const RlxInvite *invite)
{
  g_return_val_if_fail (invite != NULL, NULL);
  if (strchr (invite->host, ':') != NULL)
    return g_strdup_printf ("[%s]:%u", invite->host, invite->port);
  return g_strdup_printf ("%s:%u", invite->host, invite->port);
}

char *
rlx_invite_to_string (const RlxInvite *invite)
{
  g_autofree char *authority = NULL;
  g_autofree char *key = NULL;

  g_return_val_if_fail (invite != NULL, NULL);
  authority = rlx_invite_dup_authority (invite);
  key = rlx_invite_key_to_string (invite->key);
  return g_strdup_printf (SCHEME "%s/%s#%s", authority, invite->cohort, key);
}
