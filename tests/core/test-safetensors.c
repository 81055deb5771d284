/* test-safetensors.c — the checkpoint/export format, in-process
 *
 * Round trip for every model, the exact byte layout PyTorch's loader expects,
 * atomic replacement, and clear errors (never a crash) for broken files.
 */
#include "rlx-config.h"
#include "core/rlx-safetensors.h"
#include "core/vision/rlx-model.h"

#include <glib/gstdio.h>
#include <string.h>

static GHashTable *
metadata (void)
{
  GHashTable *md = g_hash_table_new (g_str_hash, g_str_equal);

  g_hash_table_insert (md, "step", "42");
  g_hash_table_insert (md, "model", "x");
  return md;
}

static void
test_round_trip (void)
{
  for (RlxModelId id = 0; id < RLX_N_MODELS; id++)
    {
      const RlxModel *m = rlx_model_get (id);
      g_autofree float *p = g_new (float, m->n_params);
      g_autoptr(GHashTable) md = metadata ();
      g_autoptr(GHashTable) md2 = NULL;
      g_autoptr(GBytes) bytes = NULL;
      g_autoptr(GError) error = NULL;
      g_autofree float *back = NULL;
      const guint8 *d;
      gsize len;
      guint64 hlen;

      rlx_model_init_params (m, 7, p);
      bytes = rlx_safetensors_build (m, p, md);
      d = g_bytes_get_data (bytes, &len);
      memcpy (&hlen, d, 8);
      hlen = GUINT64_FROM_LE (hlen);
      /* Header padded with spaces to a multiple of 8, data right after. */
      g_assert_cmpuint (hlen % 8, ==, 0);
      g_assert_cmpuint (len, ==, 8 + hlen + m->n_params * 4);
      g_assert_true (d[8] == '{');
      g_assert_true (d[8 + hlen - 1] == ' ' || d[8 + hlen - 1] == '}');
      g_assert_nonnull (g_strstr_len ((const char *) d + 8, (gssize) hlen, "\"dtype\":\"F32\""));
      g_assert_nonnull (g_strstr_len ((const char *) d + 8, (gssize) hlen, "\"data_offsets\""));
      g_assert_cmpmem (d + 8 + hlen, m->n_params * 4, p, m->n_params * 4);

      back = rlx_safetensors_parse (d, len, m, &md2, &error);
      g_assert_no_error (error);
      g_assert_cmpmem (back, m->n_params * 4, p, m->n_params * 4);
      g_assert_cmpstr (g_hash_table_lookup (md2, "step"), ==, "42");
    }
}

static void
test_atomic_write (void)
{
  const RlxModel *m = rlx_model_get (RLX_MODEL_MNIST_MLP);
  g_autofree float *p = g_new (float, m->n_params);
  g_autofree float *back = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("rlx-st-XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "c.safetensors", NULL);
  g_autoptr(GDir) listing = NULL;
  guint files = 0;

  rlx_model_init_params (m, 1, p);
  g_assert_true (rlx_safetensors_write (path, m, p, NULL, &error));
  g_assert_no_error (error);
  p[0] = 123.0f;
  g_assert_true (rlx_safetensors_write (path, m, p, NULL, &error));
  back = rlx_safetensors_read (path, m, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (back[0], ==, 123.0f);
  /* No temporary file left beside it. */
  listing = g_dir_open (dir, 0, NULL);
  while (g_dir_read_name (listing))
    files++;
  g_assert_cmpuint (files, ==, 1);
  g_unlink (path);
  g_rmdir (dir);

  g_clear_pointer (&back, g_free);
  back = rlx_safetensors_read ("/nonexistent/x.safetensors", m, NULL, &error);
  g_assert_null (back);
  g_assert_error (error, RLX_SAFETENSORS_ERROR, RLX_SAFETENSORS_ERROR_NOT_FOUND);
}

static void
expect_error (const guint8 *d, gsize len, const RlxModel *m, int code)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *p = rlx_safetensors_parse (d, len, m, NULL, &error);

  g_assert_null (p);
  g_assert_error (error, RLX_SAFETENSORS_ERROR, code);
  g_assert_nonnull (error->message);
}

static void
test_broken_files (void)
{
  const RlxModel *m = rlx_model_get (RLX_MODEL_MNIST_MLP);
  const RlxModel *cnn = rlx_model_get (RLX_MODEL_MNIST_CNN);
  g_autofree float *p = g_new0 (float, m->n_params);
  g_autoptr(GBytes) bytes = rlx_safetensors_build (m, p, NULL);
  gsize len;
  const guint8 *d = g_bytes_get_data (bytes, &len);
  g_autofree guint8 *c = g_memdup2 (d, len);
  guint64 hlen, big;

  memcpy (&hlen, d, 8);
  hlen = GUINT64_FROM_LE (hlen);

  expect_error (d, 4, m, RLX_SAFETENSORS_ERROR_CORRUPT);              /* no length */
  expect_error (d, 8 + hlen / 2, m, RLX_SAFETENSORS_ERROR_CORRUPT);   /* cut header */
  expect_error (d, len - 4, m, RLX_SAFETENSORS_ERROR_CORRUPT);        /* cut data */
  expect_error (d, len, cnn, RLX_SAFETENSORS_ERROR_MISMATCH);         /* other model */

  big = GUINT64_TO_LE (G_MAXUINT64 - 3);                              /* absurd length */
  memcpy (c, &big, 8);
  expect_error (c, len, m, RLX_SAFETENSORS_ERROR_CORRUPT);
  memcpy (c, d, len);

  c[8] = '[';                                                         /* not an object */
  expect_error (c, len, m, RLX_SAFETENSORS_ERROR_CORRUPT);
  memcpy (c, d, len);

  {
    char *f = g_strstr_len ((char *) c + 8, (gssize) hlen, "F32");    /* other dtype */
    g_assert_nonnull (f);
    memcpy (f, "F64", 3);
    expect_error (c, len, m, RLX_SAFETENSORS_ERROR_MISMATCH);
    memcpy (c, d, len);
  }
  {
    char *f = g_strstr_len ((char *) c + 8, (gssize) hlen, "[128,784]"); /* other shape */
    g_assert_nonnull (f);
    memcpy (f, "[128,783]", 9);
    expect_error (c, len, m, RLX_SAFETENSORS_ERROR_MISMATCH);
    memcpy (c, d, len);
  }
  {
    char *f = g_strstr_len ((char *) c + 8, (gssize) hlen, "\"data_offsets\":[0,"); /* overlap */
    g_assert_nonnull (f);
    f[strlen ("\"data_offsets\":[")] = '4';
    expect_error (c, len, m, RLX_SAFETENSORS_ERROR_CORRUPT);
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cohort/safetensors/round-trip", test_round_trip);
  g_test_add_func ("/cohort/safetensors/atomic-write", test_atomic_write);
  g_test_add_func ("/cohort/safetensors/broken-files", test_broken_files);
  return g_test_run ();
}
