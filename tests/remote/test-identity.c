/* test-identity.c — the self-signed identity: made once, stored 0600 in a
 * 0700 directory, the same fingerprint on the next load, and refusals for a
 * key others can read, a foreign-looking directory, a symlink, a corrupt
 * file, and a certificate beside someone else's key. */
#include "rlx-config.h"
#include "core/p2p/rlx-identity.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include <gnutls/x509.h>

static char *
make_tmpdir (void)
{
  g_autoptr(GError) error = NULL;
  char *dir = g_dir_make_tmp ("rlx-identity-XXXXXX", &error);

  g_assert_no_error (error);
  return dir;
}

static void
rm_rf (const char *dir)
{
  g_autofree char *cmd = g_strdup_printf ("rm -rf '%s'", dir);
  g_assert_cmpint (system (cmd), ==, 0);
}

static void
test_create_then_load (void)
{
  g_autofree char *tmp = make_tmpdir ();
  g_autofree char *dir = g_build_filename (tmp, "deep", "identity", NULL);
  g_autofree char *file = g_build_filename (dir, "identity.pem", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxIdentity) a = rlx_identity_load_or_create (dir, &error);
  g_autoptr(RlxIdentity) b = NULL;
  g_autoptr(RlxIdentity) c = NULL;
  struct stat st;

  g_assert_no_error (error);
  g_assert_true (rlx_fingerprint_is_valid (rlx_identity_get_fingerprint (a)));
  g_assert_cmpint (stat (file, &st), ==, 0);
  g_assert_cmpuint (st.st_mode & 0777, ==, 0600);
  g_assert_cmpint (stat (dir, &st), ==, 0);
  g_assert_cmpuint (st.st_mode & 0777, ==, 0700);

  b = rlx_identity_load_or_create (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (rlx_identity_get_fingerprint (a), ==, rlx_identity_get_fingerprint (b));

  /* An ephemeral identity is another one. */
  c = rlx_identity_new_ephemeral (&error);
  g_assert_no_error (error);
  g_assert_cmpstr (rlx_identity_get_fingerprint (a), !=, rlx_identity_get_fingerprint (c));
  rm_rf (tmp);
}

static void
test_fingerprint_is_sha256_of_der (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *tmp = make_tmpdir ();
  g_autoptr(RlxIdentity) a = rlx_identity_load_or_create (tmp, &error);
  g_autofree char *file = g_build_filename (tmp, "identity.pem", NULL);
  g_autofree char *pem = NULL;
  gsize len;
  gnutls_x509_crt_t crt;
  gnutls_datum_t d, der = { NULL, 0 };
  g_autofree char *want = NULL;

  g_assert_no_error (error);
  g_assert_true (g_file_get_contents (file, &pem, &len, NULL));
  g_assert_nonnull (strstr (pem, "BEGIN CERTIFICATE"));
  g_assert_nonnull (strstr (pem, "BEGIN PRIVATE KEY"));
  d.data = (unsigned char *) pem;
  d.size = (unsigned int) len;
  g_assert_cmpint (gnutls_x509_crt_init (&crt), ==, 0);
  g_assert_cmpint (gnutls_x509_crt_import (crt, &d, GNUTLS_X509_FMT_PEM), ==, 0);
  g_assert_cmpint (gnutls_x509_crt_export2 (crt, GNUTLS_X509_FMT_DER, &der), ==, 0);
  want = g_compute_checksum_for_data (G_CHECKSUM_SHA256, der.data, der.size);
  g_assert_cmpstr (rlx_identity_get_fingerprint (a), ==, want);
  /* Self-signed: issuer == subject, and the signature verifies with its own key. */
  {
    unsigned int status = 0;
    g_assert_cmpint (gnutls_x509_crt_verify (crt, &crt, 1, 0, &status), ==, 0);
    g_assert_cmpuint (status, ==, 0);
  }
  gnutls_free (der.data);
  gnutls_x509_crt_deinit (crt);
  rm_rf (tmp);
}

static void
test_refuses_readable_key (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *tmp = make_tmpdir ();
  g_autofree char *file = g_build_filename (tmp, "identity.pem", NULL);
  g_autoptr(RlxIdentity) a = rlx_identity_load_or_create (tmp, &error);
  g_autoptr(RlxIdentity) b = NULL;

  g_assert_no_error (error);
  g_assert_cmpint (chmod (file, 0644), ==, 0);
  b = rlx_identity_load_or_create (tmp, &error);
  g_assert_null (b);
  g_assert_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_PERMISSION);
  g_assert_nonnull (strstr (error->message, "chmod 600"));
  g_clear_error (&error);

  /* The file is left as it was: refused, never replaced. */
  g_assert_true (g_file_test (file, G_FILE_TEST_EXISTS));
  g_assert_cmpint (chmod (file, 0600), ==, 0);
  g_assert_cmpint (chmod (tmp, 0755), ==, 0);
  b = rlx_identity_load_or_create (tmp, &error);
  g_assert_null (b);
  g_assert_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_PERMISSION);
  g_assert_nonnull (strstr (error->message, "chmod 700"));
  rm_rf (tmp);
}

static void
test_refuses_symlink_and_garbage (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *tmp = make_tmpdir ();
  g_autofree char *file = g_build_filename (tmp, "identity.pem", NULL);
  g_autoptr(RlxIdentity) b = NULL;

  g_assert_cmpint (symlink ("/etc/passwd", file), ==, 0);
  b = rlx_identity_load_or_create (tmp, &error);
  g_assert_null (b);
  g_assert_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_PERMISSION);
  g_clear_error (&error);
  g_assert_cmpint (unlink (file), ==, 0);

  g_assert_true (g_file_set_contents_full (file, "garbage\n", -1, 0, 0600, NULL));
  b = rlx_identity_load_or_create (tmp, &error);
  g_assert_null (b);
  g_assert_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "remove it"));
  rm_rf (tmp);
}

static void
test_refuses_mismatched_key (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *t1 = make_tmpdir ();
  g_autofree char *t2 = make_tmpdir ();
  g_autofree char *f1 = g_build_filename (t1, "identity.pem", NULL);
  g_autofree char *f2 = g_build_filename (t2, "identity.pem", NULL);
  g_autoptr(RlxIdentity) a = rlx_identity_load_or_create (t1, &error);
  g_autoptr(RlxIdentity) b = rlx_identity_load_or_create (t2, &error);
  g_autoptr(RlxIdentity) c = NULL;
  g_autofree char *p1 = NULL, *p2 = NULL, *mixed = NULL;
  char *key2;

  g_assert_no_error (error);
  g_assert_true (g_file_get_contents (f1, &p1, NULL, NULL));
  g_assert_true (g_file_get_contents (f2, &p2, NULL, NULL));
  /* certificate of 1, key of 2 */
  key2 = strstr (p2, "-----BEGIN PRIVATE KEY");
  *strstr (p1, "-----BEGIN PRIVATE KEY") = '\0';
  mixed = g_strconcat (p1, key2, NULL);
  g_assert_true (g_file_set_contents_full (f1, mixed, -1, 0, 0600, NULL));
  c = rlx_identity_load_or_create (t1, &error);
  g_assert_null (c);
  g_assert_error (error, RLX_IDENTITY_ERROR, RLX_IDENTITY_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "do not belong together"));
  rm_rf (t1);
  rm_rf (t2);
}

static void
test_fingerprint_helpers (void)
{
  const char *a = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  const char *b = "00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDDEEFF";

  g_assert_true (rlx_fingerprint_is_valid (a));
  g_assert_false (rlx_fingerprint_is_valid ("0011"));
  g_assert_false (rlx_fingerprint_is_valid (NULL));
  g_assert_true (rlx_fingerprint_equal (a, b));
  g_assert_false (rlx_fingerprint_equal (a, "10112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"));
  g_assert_false (rlx_fingerprint_equal (a, "x"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/remote/identity/create-then-load", test_create_then_load);
  g_test_add_func ("/remote/identity/fingerprint-is-sha256-of-der", test_fingerprint_is_sha256_of_der);
  g_test_add_func ("/remote/identity/refuses-readable-key", test_refuses_readable_key);
  g_test_add_func ("/remote/identity/refuses-symlink-and-garbage", test_refuses_symlink_and_garbage);
  g_test_add_func ("/remote/identity/refuses-mismatched-key", test_refuses_mismatched_key);
  g_test_add_func ("/remote/identity/fingerprint-helpers", test_fingerprint_helpers);
  return g_test_run ();
}
