/* rlx-signal-upgrade.c — judge an HTTP request for the WebSocket upgrade
 *
 * See rlx-signal-upgrade.h. The header block is parsed by libsoup's own
 * soup_headers_parse_request; only the decision is ours. Extensions and
 * subprotocols are never negotiated (the server accepts none), as before.
 */
#include "rlx-config.h"
#include "rlx-signal-upgrade.h"
#include "rlx-signal-msg.h"

#include <string.h>
#include <libsoup/soup.h>

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

static const char not_here[] =
  "rlx-cluster signalling: connect a WebSocket to " RLX_SIGNAL_PATH "\n";

char *
rlx_signal_ws_accept (const char *key)
{
  g_autoptr(GChecksum) ck = g_checksum_new (G_CHECKSUM_SHA1);
  guint8 sha1[20];
  gsize sha1_len = sizeof sha1;

  g_checksum_update (ck, (const guchar *) key, -1);
  g_checksum_update (ck, (const guchar *) WS_GUID, -1);
  g_checksum_get_digest (ck, sha1, &sha1_len);
  return g_base64_encode (sha1, sha1_len);
}

static RlxSignalUpgradeVerdict
refuse (RlxSignalUpgrade *out, guint status, const char *why)
{
  out->status = status;
  out->why = g_strdup (why);
  return RLX_SIGNAL_UPGRADE_REFUSE;
}

/* The end of the header block: the first "\r\n\r\n" (or "\n\n", which
 * libsoup also takes), or 0. */
static gsize
find_end (const guint8 *buf, gsize len)
{
  for (gsize i = 0; i + 1 < len; i++)
    {
      if (buf[i] != '\n')
        continue;
      if (buf[i + 1] == '\n')
        return i + 2;
      if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
        return i + 3;
    }
  return 0;
}

static gboolean
key_is_valid (const char *key)
{
  gsize n = strlen (key);
  g_autofree guchar *raw = NULL;
  gsize raw_len = 0;

  /* 16 random bytes in base64 are 24 characters, "==" at the end. */
  if (n != 24 || key[22] != '=' || key[23] != '=')
    return FALSE;
  for (gsize i = 0; i < 22; i++)
    if (!g_ascii_isalnum (key[i]) && key[i] != '+' && key[i] != '/')
      return FALSE;
  raw = g_base64_decode (key, &raw_len);
  return raw_len == 16;
}

RlxSignalUpgradeVerdict
rlx_signal_upgrade_check (const guint8 *buf, gsize len, RlxSignalUpgrade *out)
{
  g_autoptr(SoupMessageHeaders) h = NULL;
  g_autofree char *method = NULL;
  g_autofree char *path = NULL;
  SoupHTTPVersion ver;
  guint status;
  gsize end;
  const char *v, *key;
  char *q;

  g_return_val_if_fail (out != NULL, RLX_SIGNAL_UPGRADE_REFUSE);
  memset (out, 0, sizeof *out);
  end = find_end (buf, MIN (len, RLX_SIGNAL_UPGRADE_MAX_HEADER));
  if (end == 0)
    {
      if (len < RLX_SIGNAL_UPGRADE_MAX_HEADER)
        return RLX_SIGNAL_UPGRADE_INCOMPLETE;
      return refuse (out, 431, "request headers longer than 8 KiB");
    }
  out->header_len = end;
  if (memchr (buf, '\0', end) != NULL)
    return refuse (out, 400, "a NUL byte in the request headers");
  h = soup_message_headers_new (SOUP_MESSAGE_HEADERS_REQUEST);
  status = soup_headers_parse_request ((const char *) buf, (int) end, h, &method, &path, &ver);
  if (status != SOUP_STATUS_OK)
    return refuse (out, status >= 400 && status < 600 ? status : 400, "not an HTTP request");
  if ((q = strchr (path, '?')) != NULL)
    *q = '\0';
  if (strcmp (path, RLX_SIGNAL_PATH) != 0)
    return refuse (out, 404, "not the signalling path");
  if (strcmp (method, "GET") != 0 || ver < SOUP_HTTP_1_1)
    return refuse (out, 400, "not an HTTP/1.1 GET");
  v = soup_message_headers_get_list (h, "Upgrade");
  if (v == NULL || !soup_header_contains (v, "websocket"))
    return refuse (out, 400, "no Upgrade: websocket");
  v = soup_message_headers_get_list (h, "Connection");
  if (v == NULL || !soup_header_contains (v, "upgrade"))
    return refuse (out, 400, "no Connection: Upgrade");
  v = soup_message_headers_get_one (h, "Sec-WebSocket-Version");
  if (v == NULL || strcmp (v, "13") != 0)
    return refuse (out, 400, "not WebSocket version 13");
  key = soup_message_headers_get_one (h, "Sec-WebSocket-Key");
  if (key == NULL || !key_is_valid (key))
    return refuse (out, 400, "no valid Sec-WebSocket-Key");
  out->status = 101;
  out->accept = rlx_signal_ws_accept (key);
  return RLX_SIGNAL_UPGRADE_ACCEPT;
}

void
rlx_signal_upgrade_clear (RlxSignalUpgrade *u)
{
  g_clear_pointer (&u->accept, g_free);
  g_clear_pointer (&u->why, g_free);
}

char *
rlx_signal_upgrade_error (guint status, const char *body, gsize *len)
{
  char *s = g_strdup_printf ("HTTP/1.1 %u %s\r\nServer: rlx-signal\r\n"
                             "Content-Type: text/plain\r\nContent-Length: %zu\r\n"
                             "Connection: close\r\n\r\n%s",
                             status, soup_status_get_phrase (status), strlen (body), body);
  *len = strlen (s);
  return s;
}

char *
rlx_signal_upgrade_response (const RlxSignalUpgrade *u, gsize *len)
{
  char *s;

  if (u->status != 101)
    return rlx_signal_upgrade_error (u->status, not_here, len);
  s = g_strdup_printf ("HTTP/1.1 101 Switching Protocols\r\nServer: rlx-signal\r\n"
                       "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                       "Sec-WebSocket-Accept: %s\r\n\r\n", u->accept);
  *len = strlen (s);
  return s;
}
