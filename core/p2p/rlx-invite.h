/* rlx-invite.h — the invite a founding node prints and other machines paste
 *
 *     rlx://HOST:PORT/COHORT#KEY
 *
 *   HOST    a DNS name, an IPv4 address, or an IPv6 address in brackets
 *           ([::1]); where the founding node serves signalling
 *   PORT    1..65535
 *   COHORT  the cohort's name: 1 to 64 of A-Z a-z 0-9 . _ - (not "." or "..")
 *   KEY     the cohort key, 128 random bits: 22 characters of URL-safe base64
 *           without padding (what rlx_invite_to_string writes) or 32 hex digits
 *
 * The key authenticates every signalling message (HMAC-SHA256), so whoever
 * holds the invite can join; the part after '#' is the secret. A malformed
 * invite is refused with RLX_INVITE_ERROR_INVALID and a message that says
 * what is wrong and shows the expected form.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define RLX_INVITE_KEY_LEN   16
#define RLX_INVITE_MAX_LEN   512
#define RLX_INVITE_FORM      "rlx://HOST:PORT/COHORT#KEY"

#define RLX_INVITE_ERROR (rlx_invite_error_quark ())
GQuark rlx_invite_error_quark (void);
typedef enum {
  RLX_INVITE_ERROR_INVALID,
} RlxInviteError;

typedef struct {
  char   *host;                      /* without brackets */
  guint16 port;
  char   *cohort;
  guint8  key[RLX_INVITE_KEY_LEN];
} RlxInvite;

/* Parse @text (surrounding white space is ignored). */
RlxInvite *rlx_invite_parse     (const char *text, GError **error);
/* A new invite with a fresh random key (GnuTLS's RNG). @host may be an IPv6
 * literal without brackets. NULL with RLX_INVITE_ERROR_INVALID if a part is
 * unusable. */
RlxInvite *rlx_invite_new       (const char *host, guint16 port, const char *cohort,
                                 GError **error);
/* Same with a given key (tests; a cohort that keeps its key). */
RlxInvite *rlx_invite_new_with_key (const char *host, guint16 port, const char *cohort,
                                    const guint8 key[RLX_INVITE_KEY_LEN], GError **error);
RlxInvite *rlx_invite_copy      (const RlxInvite *invite);
void       rlx_invite_free      (RlxInvite *invite);
/* rlx://HOST:PORT/COHORT#KEY with the key in URL-safe base64. */
char      *rlx_invite_to_string (const RlxInvite *invite);
/* HOST:PORT (IPv6 in brackets), for URLs and messages. */
char      *rlx_invite_dup_authority (const RlxInvite *invite);
/* The key in URL-safe base64 without padding (22 characters). */
char      *rlx_invite_key_to_string (const guint8 key[RLX_INVITE_KEY_LEN]);
/* @text for a message or a log: printable, at most 80 characters, and the
 * key (everything after '#') shown as "#…". */
char      *rlx_invite_redact    (const char *text);
/* TRUE if @name is usable as a cohort name (same rule as the local bus). */
gboolean   rlx_invite_cohort_is_valid (const char *name);
/* TRUE if @host is a DNS name or an IP literal (no brackets). */
gboolean   rlx_invite_host_is_valid   (const char *host);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxInvite, rlx_invite_free)

G_END_DECLS
