/* rlx-identity.h — this node's TLS identity: a self-signed certificate
 *
 * Generated with GnuTLS at first use (ECDSA P-256, SHA-256 signature, valid
 * for 20 years) and kept in
 *
 *     $XDG_CONFIG_HOME/rlx-cluster/identity/identity.pem   (0600)
 *
 * (the certificate, then the private key, PEM) in a 0700 directory. One file
 * written atomically (write, fsync, rename): two nodes starting at once
 * never leave a certificate beside another node's key. No certificate authority is involved: peers learn the
 * certificate's SHA-256 fingerprint from signalling messages authenticated
 * with the cohort key, and the QUIC/TLS handshake accepts exactly the
 * certificate with that fingerprint (pinning). A key file that others can
 * read, a directory that is not ours or not 0700, or a certificate that does
 * not match its key is refused with a message that says what to fix — never
 * silently replaced.
 *
 * Threads: load or make it on any thread; it does not change afterwards, so
 * any thread may read its fingerprint and credentials (the node's thread and
 * the remote links' I/O threads do).
 */
#pragma once

#include <glib-object.h>
#include <gnutls/gnutls.h>

G_BEGIN_DECLS

#define RLX_IDENTITY_ERROR (rlx_identity_error_quark ())
GQuark rlx_identity_error_quark (void);
typedef enum {
  RLX_IDENTITY_ERROR_FILE,       /* cannot create, read or write the files */
  RLX_IDENTITY_ERROR_PERMISSION, /* key readable by others, foreign directory */
  RLX_IDENTITY_ERROR_INVALID,    /* unreadable PEM, certificate ≠ key */
  RLX_IDENTITY_ERROR_CRYPTO,     /* GnuTLS refused to generate/sign */
} RlxIdentityError;

/* SHA-256 in lower-case hex: 64 characters. */
#define RLX_FINGERPRINT_HEX_LEN 64

#define RLX_TYPE_IDENTITY (rlx_identity_get_type ())
G_DECLARE_FINAL_TYPE (RlxIdentity, rlx_identity, RLX, IDENTITY, GObject)

/* Load the identity in @dir (NULL: $XDG_CONFIG_HOME/rlx-cluster/identity),
 * creating it (and @dir, 0700) if there is none. */
RlxIdentity *rlx_identity_load_or_create (const char *dir, GError **error);
/* A fresh identity that lives in memory only (tests, throw-away nodes). */
RlxIdentity *rlx_identity_new_ephemeral  (GError **error);

/* 64 hex digits, the SHA-256 of the certificate's DER encoding. */
const char  *rlx_identity_get_fingerprint (RlxIdentity *self);
/* The directory it was loaded from (NULL if ephemeral). */
const char  *rlx_identity_get_dir         (RlxIdentity *self);
/* Credentials carrying this certificate and key, for a TLS session (shared;
 * valid as long as @self). */
gnutls_certificate_credentials_t rlx_identity_get_credentials (RlxIdentity *self);

/* SHA-256 fingerprint (hex) of a DER certificate. */
char        *rlx_fingerprint_of_der       (const guint8 *der, gsize len);
/* TRUE if @text is 64 hex digits (either case). */
gboolean     rlx_fingerprint_is_valid     (const char *text);
/* Constant-time comparison of two fingerprints (case-insensitive). */
gboolean     rlx_fingerprint_equal        (const char *a, const char *b);

G_END_DECLS
