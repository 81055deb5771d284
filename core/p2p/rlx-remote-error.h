/* rlx-remote-error.h — why a remote link or its signalling failed
 *
 * One domain for everything between two machines, so a person (and the
 * event stream) sees the actual reason: the path (ICE), the peer's identity
 * (TLS pin), the cohort key, or silence.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define RLX_REMOTE_ERROR (rlx_remote_error_quark ())
GQuark rlx_remote_error_quark (void);
typedef enum {
  RLX_REMOTE_ERROR_ICE_FAILED,    /* no candidate pair worked (firewall, NAT, no TURN) */
  RLX_REMOTE_ERROR_PIN_MISMATCH,  /* the peer's certificate is not the one signalled */
  RLX_REMOTE_ERROR_KEY_REFUSED,   /* the cohort key does not match (wrong invite) */
  RLX_REMOTE_ERROR_TIMEOUT,       /* handshake or idle timeout: the peer went silent */
  RLX_REMOTE_ERROR_TLS,           /* another TLS/QUIC handshake failure */
  RLX_REMOTE_ERROR_PROTOCOL,      /* the peer broke the QUIC or framing rules */
  RLX_REMOTE_ERROR_CLOSED,        /* closed cleanly, by us or by the peer */
  RLX_REMOTE_ERROR_SIGNALLING,    /* the signalling server is unreachable or refused us */
  RLX_REMOTE_ERROR_INVALID,       /* a bad setting (STUN/TURN server, address) */
} RlxRemoteError;

/* A short name of @code for events ("ice-failed", "pin-mismatch", …). */
const char *rlx_remote_error_code_name (int code);

G_END_DECLS
