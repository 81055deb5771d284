/* rlx-signal-upgrade.h — the signalling server's HTTP upgrade request, by hand
 *
 * The server reads a client's request headers itself (at most
 * RLX_SIGNAL_UPGRADE_MAX_HEADER bytes, within a deadline) instead of through
 * SoupServer, so that every connection before its WebSocket upgrade is one
 * the server counts, caps and times out. This is the pure part: bytes in, a
 * verdict out (the HTTP response to write), no I/O. Any bytes are safe to
 * feed (fuzz target tests/fuzz/fuzz-signal-upgrade.c).
 *
 * Threads: no state; call from any thread.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define RLX_SIGNAL_UPGRADE_MAX_HEADER 8192

typedef enum {
  RLX_SIGNAL_UPGRADE_INCOMPLETE,   /* no blank line yet: read more */
  RLX_SIGNAL_UPGRADE_ACCEPT,       /* a WebSocket upgrade on RLX_SIGNAL_PATH */
  RLX_SIGNAL_UPGRADE_REFUSE,       /* anything else: answer with @status and close */
} RlxSignalUpgradeVerdict;

typedef struct {
  guint  status;       /* 101 on ACCEPT, the HTTP error otherwise */
  gsize  header_len;   /* bytes of @buf up to and including the blank line */
  char  *accept;       /* ACCEPT: the Sec-WebSocket-Accept value */
  char  *why;          /* REFUSE: what was wrong, for logs */
} RlxSignalUpgrade;

/* Judge the first @len bytes a client sent. INCOMPLETE while there is no
 * end of headers and @len < RLX_SIGNAL_UPGRADE_MAX_HEADER; past that cap,
 * REFUSE with 431. */
RlxSignalUpgradeVerdict rlx_signal_upgrade_check (const guint8 *buf, gsize len,
                                                  RlxSignalUpgrade *out);
void                    rlx_signal_upgrade_clear (RlxSignalUpgrade *u);
/* The whole HTTP response for @u (101 with its headers, or the error with a
 * short plain-text body that says what to do). */
char                   *rlx_signal_upgrade_response (const RlxSignalUpgrade *u, gsize *len);
/* A plain HTTP error response (503 when full, …) with @body. */
char                   *rlx_signal_upgrade_error (guint status, const char *body, gsize *len);
/* Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 §4.2.2). */
char                   *rlx_signal_ws_accept (const char *key);

G_END_DECLS
