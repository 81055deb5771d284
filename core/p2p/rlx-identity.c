/* rlx-identity.c — a self-signed certificate generated at first run
 *
 * See rlx-identity.h. The PEM file holds the certificate then the PKCS#8
 * private key; both are parsed back on every load, and GnuTLS checks that
 * they belong together when the credentials are built.
 */
#include "rlx-config.h"
#include "rlx-identity.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <gnutls/crypto.h>
#include <gnutls/x509.h>

G_DEFINE_QUARK (rlx-identity-error-quark, rlx_identity_error)

#define FILE_NAME     "identity.pem"
#define VALID_YEARS   20
#define MAX_FILE_SIZE (64 * 1024)

struct _RlxIdentity
{
  GObject                          parent_instance;

  char                            *dir;
  char                            *fingerprint;
  gnutls_x509_crt_t                crt;
  gnutls_x509_privkey_t            key;
  gnutls_certificate_credentials_t cred;
};

G_DEFINE_FINAL_TYPE (RlxIdentity, rlx_identity, G_TYPE_OBJECT)

static void
rlx_identity_finalize (GObject *object)
{
  RlxIdentity *self = RLX_IDENTITY (object);

  if (self->cred)
    gnutls_certificate_free_credentials (self->cred);
  if (self->crt)
    gnutls_x509_crt_deinit (self->crt);
  if (self->key)
    gnutls_x509_privkey_deinit (self->key);
  g_free (self->dir);
  g_free (self->fingerprint);
  G_OBJECT_CLASS (rlx_identity_parent_class)->finalize (object);
}

static void
rlx_identity_class_init (RlxIdentityClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = rlx_identity_finalize;
}

static void
rlx_identity_init (RlxIdentity *self)
{
}

static gboolean
gtls_fail (GError **error, int rv, const char *what)
{
  g_set_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_CRYPTO,
               "cannot %s: %s", what, gnutls_strerror (rv));
  return FALSE;
}

char *
rlx_fingerprint_of_der (const guint8 *der, gsize len)
{
  g_return_val_if_fail (der != NULL || len == 0, NULL);
  return g_compute_checksum_for_data (G_CHECKSUM_SHA256, der, len);
}

gboolean
rlx_fingerprint_is_valid (const char *text)
{
  if (text == NULL || strlen (text) != RLX_FINGERPRINT_HEX_LEN)
    return FALSE;
  for (const char *p = text; *p; p++)
    if (!g_ascii_isxdigit (*p))
      return FALSE;
  return TRUE;
}

gboolean
rlx_fingerprint_equal (const char *a, const char *b)
{
  guint diff = 0;

  if (!rlx_fingerprint_is_valid (a) || !rlx_fingerprint_is_valid (b))
    return FALSE;
  for (guint i = 0; i < RLX_FINGERPRINT_HEX_LEN; i++)
    diff |= (guint) (g_ascii_tolower (a[i]) ^ g_ascii_tolower (b[i]));
  return diff == 0;
}

/* Builds credentials and the fingerprint from crt + key. */
static gboolean
finish (RlxIdentity *self, GError **error)
{
  gnutls_datum_t der = { NULL, 0 };
  int rv;

  rv = gnutls_certificate_allocate_credentials (&self->cred);
  if (rv < 0)
    return gtls_fail (error, rv, "allocate TLS credentials");
  rv = gnutls_certificate_set_x509_key (self->cred, &self->crt, 1, self->key);
  if (rv < 0)
    {
      g_set_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_INVALID,
                   "the certificate and the private key in %s/" FILE_NAME
                   " do not belong together (%s); move the file away and a new identity "
                   "is made at the next start",
                   self->dir ? self->dir : "(memory)", gnutls_strerror (rv));
      return FALSE;
    }
  rv = gnutls_x509_crt_export2 (self->crt, GNUTLS_X509_FMT_DER, &der);
  if (rv < 0)
    return gtls_fail (error, rv, "encode the certificate");
  self->fingerprint = rlx_fingerprint_of_der (der.data, der.size);
  gnutls_free (der.data);
  return self->fingerprint != NULL;
}

static gboolean
generate (RlxIdentity *self, GError **error)
{
  guint8 serial[16];
  time_t now = time (NULL);
  int rv;

  if ((rv = gnutls_x509_privkey_init (&self->key)) < 0 ||
      (rv = gnutls_x509_privkey_generate (self->key, GNUTLS_PK_ECDSA,
                                          GNUTLS_CURVE_TO_BITS (GNUTLS_ECC_CURVE_SECP256R1),
                                          0)) < 0)
    return gtls_fail (error, rv, "generate a private key");
  if ((rv = gnutls_x509_crt_init (&self->crt)) < 0)
    return gtls_fail (error, rv, "create a certificate");
  if ((rv = gnutls_rnd (GNUTLS_RND_NONCE, serial, sizeof serial)) < 0)
    return gtls_fail (error, rv, "draw a serial number");
  serial[0] &= 0x7f;   /* a positive integer */
  serial[0] |= 0x01;   /* and no leading zero byte */
  if ((rv = gnutls_x509_crt_set_version (self->crt, 3)) < 0 ||
      (rv = gnutls_x509_crt_set_serial (self->crt, serial, sizeof serial)) < 0 ||
      (rv = gnutls_x509_crt_set_activation_time (self->crt, now - 24 * 3600)) < 0 ||
      (rv = gnutls_x509_crt_set_expiration_time (self->crt,
                                                 now + (time_t) VALID_YEARS * 365 * 24 * 3600)) < 0 ||
      (rv = gnutls_x509_crt_set_dn_by_oid (self->crt, GNUTLS_OID_X520_COMMON_NAME, 0,
                                           "rlx-cluster node", strlen ("rlx-cluster node"))) < 0 ||
      (rv = gnutls_x509_crt_set_key (self->crt, self->key)) < 0 ||
      (rv = gnutls_x509_crt_set_basic_constraints (self->crt, 0, -1)) < 0 ||
      (rv = gnutls_x509_crt_set_key_usage (self->crt, GNUTLS_KEY_DIGITAL_SIGNATURE)) < 0 ||
      (rv = gnutls_x509_crt_sign2 (self->crt, self->crt, self->key, GNUTLS_DIG_SHA256, 0)) < 0)
    return gtls_fail (error, rv, "make the self-signed certificate");
  return TRUE;
}

static gboolean
check_ours_private (const char *path, gboolean want_dir, GError **error)
{
  struct stat st;

  if (lstat (path, &st) != 0)
    {
      int e = errno;
      g_set_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_FILE,
                   "cannot look at %s: %s", path, g_strerror (e));
      return FALSE;
    }
  if (want_dir ? !S_ISDIR (st.st_mode) : !S_ISREG (st.st_mode))
    {
      g_set_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_PERMISSION,
                   "%s is not a %s (a symlink or something else is in its place); "
                   "remove it and a new identity is made at the next start",
                   path, want_dir ? "directory" : "regular file");
      return FALSE;
    }
  if (st.st_uid != getuid ())
    {
      g_set_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_PERMISSION,
                   "%s belongs to uid %u, not to us (uid %u); refusing to use another "
                   "user's identity", path, (guint) st.st_uid, (guint) getuid ());
      return FALSE;
    }
  if ((st.st_mode & 077) != 0)
    {
      g_set_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_PERMISSION,
                   "%s is readable by others (mode %04o); the private key must stay "
                   "private: run 'chmod %s %s' if nobody else could have read it, or "
                   "remove it and a new identity is made",
                   path, (guint) (st.st_mode & 07777), want_dir ? "700" : "600", path);
      return FALSE;
    }
  return TRUE;
}

static gboolean
load (RlxIdentity *self, const char *path, GError **error)
{
  g_autofree char *contents = NULL;
  gsize len = 0;
  gnutls_datum_t d;
  int rv;

  if (!check_ours_private (path, FALSE, error))
    return FALSE;
  if (!g_file_get_contents (path, &contents, &len, error))
    return FALSE;
  if (len > MAX_FILE_SIZE)
    {
      g_set_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_INVALID,
                   "%s is %" G_GSIZE_FORMAT " bytes, far more than a certificate and a key; "
                   "remove it and a new identity is made", path, len);
      return FALSE;
    }
  d.data = (unsigned char *) contents;
  d.size = (unsigned int) len;
  if ((rv = gnutls_x509_crt_init (&self->crt)) < 0 ||
      (rv = gnutls_x509_privkey_init (&self->key)) < 0)
    return gtls_fail (error, rv, "set up a certificate");
  if ((rv = gnutls_x509_crt_import (self->crt, &d, GNUTLS_X509_FMT_PEM)) < 0 ||
      (rv = gnutls_x509_privkey_import2 (self->key, &d, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0)
    {
      gnutls_memset (contents, 0, len);
      g_set_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_INVALID,
                   "%s does not hold a PEM certificate and private key (%s); remove it "
                   "and a new identity is made at the next start", path, gnutls_strerror (rv));
      return FALSE;
    }
  gnutls_memset (contents, 0, len);
  return TRUE;
}

static gboolean
save (RlxIdentity *self, const char *path, GError **error)
{
  gnutls_datum_t c = { NULL, 0 }, k = { NULL, 0 };
  g_autoptr(GString) pem = g_string_new (NULL);
  gboolean ok;
  int rv;

  if ((rv = gnutls_x509_crt_export2 (self->crt, GNUTLS_X509_FMT_PEM, &c)) < 0)
    return gtls_fail (error, rv, "encode the certificate");
  rv = gnutls_x509_privkey_export2_pkcs8 (self->key, GNUTLS_X509_FMT_PEM, NULL,
                                          GNUTLS_PKCS_PLAIN, &k);
  if (rv < 0)
    {
      gnutls_free (c.data);
      return gtls_fail (error, rv, "encode the private key");
    }
  g_string_append_len (pem, (const char *) c.data, c.size);
  g_string_append_len (pem, (const char *) k.data, k.size);
  gnutls_free (c.data);
  gnutls_memset (k.data, 0, k.size);
  gnutls_free (k.data);
  ok = g_file_set_contents_full (path, pem->str, (gssize) pem->len,
                                 G_FILE_SET_CONTENTS_CONSISTENT, 0600, error);
  gnutls_memset (pem->str, 0, pem->len);
  return ok;
}

RlxIdentity *
rlx_identity_new_ephemeral (GError **error)
{
  g_autoptr(RlxIdentity) self = g_object_new (RLX_TYPE_IDENTITY, NULL);

  if (!generate (self, error) || !finish (self, error))
    return NULL;
  return g_steal_pointer (&self);
}

RlxIdentity *
rlx_identity_load_or_create (const char *dir, GError **error)
{
  g_autoptr(RlxIdentity) self = g_object_new (RLX_TYPE_IDENTITY, NULL);
  g_autofree char *path = NULL;

  self->dir = dir ? g_strdup (dir)
                  : g_build_filename (g_get_user_config_dir (), "rlx-cluster", "identity", NULL);
  if (g_mkdir_with_parents (self->dir, 0700) != 0)
    {
      int e = errno;
      g_set_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_FILE,
                   "cannot create %s for this node's identity: %s", self->dir, g_strerror (e));
      return NULL;
    }
  if (!check_ours_private (self->dir, TRUE, error))
    return NULL;
  path = g_build_filename (self->dir, FILE_NAME, NULL);
  if (g_file_test (path, G_FILE_TEST_EXISTS) || g_file_test (path, G_FILE_TEST_IS_SYMLINK))
    {
      if (!load (self, path, error))
        return NULL;
    }
  else if (!generate (self, error) || !save (self, path, error))
    return NULL;
  if (!finish (self, error))
    return NULL;
  return g_steal_pointer (&self);
}

const char *
rlx_identity_get_fingerprint (RlxIdentity *self)
{
  g_return_val_if_fail (RLX_IS_IDENTITY (self), NULL);
  return self->fingerprint;
}

const char *
rlx_identity_get_dir (RlxIdentity *self)
{
  g_return_val_if_fail (RLX_IS_IDENTITY (self), NULL);
  return self->dir;
}

gnutls_certificate_credentials_t
rlx_identity_get_credentials (RlxIdentity *self)
{
  g_return_val_if_fail (RLX_IS_IDENTITY (self), NULL);
  return self->cred;
}
