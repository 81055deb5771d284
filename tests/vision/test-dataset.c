/* test-dataset.c — the Fashion-MNIST IDX loader on good and broken files
 *
 * Fixtures are written here, gzip-compressed with GIO, into a temporary
 * directory: a small valid set, then one broken file at a time. */
#include "rlx-config.h"
#include "core/vision/rlx-dataset.h"
#include "core/vision/rlx-model.h"

#include <gio/gio.h>
#include <glib/gstdio.h>
#include <string.h>

#define N_TRAIN 5
#define N_TEST  3

static const char *const names[4] = {
  "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
  "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz",
};

static void
put_be32 (GByteArray *a, guint32 v)
{
  guint8 b[4] = { v >> 24, v >> 16, v >> 8, v };
  g_byte_array_append (a, b, 4);
}

static GBytes *
gzip_bytes (const guint8 *data, gsize len)
{
  g_autoptr(GZlibCompressor) z = g_zlib_compressor_new (G_ZLIB_COMPRESSOR_FORMAT_GZIP, 6);
  g_autoptr(GOutputStream) mem = g_memory_output_stream_new_resizable ();
  g_autoptr(GOutputStream) out = g_converter_output_stream_new (mem, G_CONVERTER (z));
  g_autoptr(GError) error = NULL;
  gsize written;

  g_assert_true (g_output_stream_write_all (out, data, len, &written, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (g_output_stream_close (out, NULL, &error));
  g_assert_no_error (error);
  return g_memory_output_stream_steal_as_bytes (G_MEMORY_OUTPUT_STREAM (mem));
}

static void
write_file (const char *dir, const char *name, const guint8 *data, gsize len, gboolean gzip)
{
  g_autofree char *path = g_build_filename (dir, name, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) z = gzip ? gzip_bytes (data, len) : g_bytes_new (data, len);

  g_file_set_contents (path, g_bytes_get_data (z, NULL), g_bytes_get_size (z), &error);
  g_assert_no_error (error);
}

/* IDX images: magic, count, rows, cols; pixel p of image i = (i * 7 + p) % 256 */
static GByteArray *
idx_images (guint32 magic, guint32 count, guint32 rows, guint32 cols, guint real)
{
  GByteArray *a = g_byte_array_new ();

  put_be32 (a, magic);
  put_be32 (a, count);
  put_be32 (a, rows);
  put_be32 (a, cols);
  for (guint i = 0; i < real; i++)
    for (guint p = 0; p < rows * cols; p++)
      {
        guint8 v = (guint8) ((i * 7 + p) % 256);
        g_byte_array_append (a, &v, 1);
      }
  return a;
}

static GByteArray *
idx_labels (guint32 count, guint real, guint8 bad_label)
{
  GByteArray *a = g_byte_array_new ();

  put_be32 (a, 0x00000801);
  put_be32 (a, count);
  for (guint i = 0; i < real; i++)
    {
      guint8 v = bad_label ? bad_label : (guint8) ((i * 3) % 10);
      g_byte_array_append (a, &v, 1);
    }
  return a;
}

/* A temporary directory with a valid small set. */
static char *
make_valid_dir (void)
{
  g_autoptr(GError) error = NULL;
  char *dir = g_dir_make_tmp ("rlx-idx-XXXXXX", &error);
  const guint counts[2] = { N_TRAIN, N_TEST };

  g_assert_no_error (error);
  for (int s = 0; s < 2; s++)
    {
      g_autoptr(GByteArray) im = idx_images (0x00000803, counts[s], 28, 28, counts[s]);
      g_autoptr(GByteArray) lb = idx_labels (counts[s], counts[s], 0);

      write_file (dir, names[2 * s], im->data, im->len, TRUE);
      write_file (dir, names[2 * s + 1], lb->data, lb->len, TRUE);
    }
  return dir;
}

static void
remove_dir (char *dir)
{
  for (int i = 0; i < 4; i++)
    {
      g_autofree char *path = g_build_filename (dir, names[i], NULL);
      g_unlink (path);
    }
  g_rmdir (dir);
  g_free (dir);
}

/* Opening fails with @code and a message naming @file and the package and
 * containing @what. */
static void
assert_refused (const char *dir, int code, const char *file, const char *what)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxDataset) ds = rlx_dataset_open_fashion_mnist (dir, &error);

  g_assert_null (ds);
  g_assert_error (error, RLX_DATASET_ERROR, code);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, file));
  g_assert_nonnull (strstr (error->message, "dataset-fashion-mnist"));
  g_assert_nonnull (strstr (error->message, what));
}

static void
test_valid (void)
{
  g_autoptr(GError) error = NULL;
  char *dir = make_valid_dir ();
  g_autoptr(RlxDataset) ds = rlx_dataset_open_fashion_mnist (dir, &error);
  const guint32 idx[2] = { 4, 1 };
  float x[2 * RLX_INPUT_LEN];
  guint8 labels[2];

  g_assert_no_error (error);
  g_assert_cmpstr (rlx_dataset_slug (ds), ==, "fashion-mnist");
  g_assert_cmpuint (rlx_dataset_size (ds, RLX_SPLIT_TRAIN), ==, N_TRAIN);
  g_assert_cmpuint (rlx_dataset_size (ds, RLX_SPLIT_TEST), ==, N_TEST);
  g_assert_cmpuint (rlx_dataset_images (ds, RLX_SPLIT_TRAIN)[3 * 784 + 10], ==, (3 * 7 + 10) % 256);
  g_assert_cmpuint (rlx_dataset_labels (ds, RLX_SPLIT_TEST)[2], ==, 6);

  rlx_dataset_gather (ds, RLX_SPLIT_TRAIN, idx, 2, x, labels);
  g_assert_cmpfloat (x[100], ==, (float) ((4 * 7 + 100) % 256) / 255.0f);
  g_assert_cmpfloat (x[784 + 200], ==, (float) ((1 * 7 + 200) % 256) / 255.0f);
  g_assert_cmpuint (labels[0], ==, 2);
  g_assert_cmpuint (labels[1], ==, 3);
  remove_dir (dir);
}

/* Every pixel value of every gathered sample (several, so the prefetch of
 * later ones runs) is the byte / 255 as PyTorch computes it, bit for bit. */
static void
test_gather_bits (void)
{
  g_autoptr(GError) error = NULL;
  char *dir = make_valid_dir ();
  g_autoptr(RlxDataset) ds = rlx_dataset_open_fashion_mnist (dir, &error);
  const guint32 idx[9] = { 4, 1, 0, 2, 3, 3, 4, 2, 0 };
  g_autofree float *x = g_new (float, G_N_ELEMENTS (idx) * RLX_INPUT_LEN);
  const guint8 *images;
  float table[256];
  guint8 labels[G_N_ELEMENTS (idx)];

  g_assert_no_error (error);
  for (guint v = 0; v < 256; v++)
    table[v] = (float) v / 255.0f;
  images = rlx_dataset_images (ds, RLX_SPLIT_TRAIN);
  rlx_dataset_gather (ds, RLX_SPLIT_TRAIN, idx, G_N_ELEMENTS (idx), x, labels);
  for (guint k = 0; k < G_N_ELEMENTS (idx); k++)
    for (guint p = 0; p < RLX_INPUT_LEN; p++)
      {
        float want = table[images[(gsize) idx[k] * RLX_INPUT_LEN + p]];
        g_assert_cmpmem (&x[(gsize) k * RLX_INPUT_LEN + p], 4, &want, 4);
      }
  remove_dir (dir);
}

static void
test_missing (void)
{
  char *dir = make_valid_dir ();
  g_autofree char *path = g_build_filename (dir, names[3], NULL);

  g_unlink (path);
  assert_refused (dir, RLX_DATASET_ERROR_MISSING, names[3], "not found");
  remove_dir (dir);

  /* A directory that does not exist at all. */
  assert_refused ("/nonexistent/rlx-fashion", RLX_DATASET_ERROR_MISSING, names[0], "apt install");
}

static void
test_truncated (void)
{
  char *dir = make_valid_dir ();
  /* The header announces 5 images; the file holds 4. */
  g_autoptr(GByteArray) im = idx_images (0x00000803, N_TRAIN, 28, 28, N_TRAIN - 1);
  g_autoptr(GByteArray) good = idx_images (0x00000803, N_TRAIN, 28, 28, N_TRAIN);
  g_autoptr(GBytes) z = NULL;

  write_file (dir, names[0], im->data, im->len, TRUE);
  assert_refused (dir, RLX_DATASET_ERROR_CORRUPT, names[0], "truncated");

  /* A header cut short. */
  write_file (dir, names[0], im->data, 10, TRUE);
  assert_refused (dir, RLX_DATASET_ERROR_CORRUPT, names[0], "truncated");

  /* The gzip stream itself cut in half. */
  z = gzip_bytes (good->data, good->len);
  write_file (dir, names[0], g_bytes_get_data (z, NULL), g_bytes_get_size (z) / 2, FALSE);
  assert_refused (dir, RLX_DATASET_ERROR_CORRUPT, names[0], names[0]);

  /* Not gzip at all. */
  write_file (dir, names[0], good->data, good->len, FALSE);
  assert_refused (dir, RLX_DATASET_ERROR_CORRUPT, names[0], names[0]);
  remove_dir (dir);
}

static void
test_wrong_magic (void)
{
  char *dir = make_valid_dir ();
  g_autoptr(GByteArray) im = idx_images (0x00000d03, N_TRAIN, 28, 28, N_TRAIN);
  g_autoptr(GByteArray) lb = idx_images (0x00000803, N_TEST, 28, 28, N_TEST);

  write_file (dir, names[0], im->data, im->len, TRUE);
  assert_refused (dir, RLX_DATASET_ERROR_CORRUPT, names[0], "magic");
  remove_dir (dir);

  /* An image file where the labels should be. */
  dir = make_valid_dir ();
  write_file (dir, names[3], lb->data, lb->len, TRUE);
  assert_refused (dir, RLX_DATASET_ERROR_CORRUPT, names[3], "magic");
  remove_dir (dir);
}

static void
test_wrong_dimensions (void)
{
  char *dir = make_valid_dir ();
  g_autoptr(GByteArray) im = idx_images (0x00000803, N_TEST, 32, 32, N_TEST);
  g_autoptr(GByteArray) huge = idx_images (0x00000803, 0xffffffffu, 28, 28, 0);
  g_autoptr(GByteArray) lb = idx_labels (N_TRAIN + 1, N_TRAIN + 1, 0);
  g_autoptr(GByteArray) badlb = idx_labels (N_TRAIN, N_TRAIN, 10);

  write_file (dir, names[2], im->data, im->len, TRUE);
  assert_refused (dir, RLX_DATASET_ERROR_CORRUPT, names[2], "32×32");
  remove_dir (dir);

  /* A count that would need 3 TB is refused before any allocation. */
  dir = make_valid_dir ();
  write_file (dir, names[0], huge->data, huge->len, TRUE);
  assert_refused (dir, RLX_DATASET_ERROR_CORRUPT, names[0], "4294967295 items");
  remove_dir (dir);

  /* Images and labels disagree on the count. */
  dir = make_valid_dir ();
  write_file (dir, names[1], lb->data, lb->len, TRUE);
  assert_refused (dir, RLX_DATASET_ERROR_CORRUPT, names[1], "6 labels");
  remove_dir (dir);

  /* A label outside 0..9. */
  dir = make_valid_dir ();
  write_file (dir, names[1], badlb->data, badlb->len, TRUE);
  assert_refused (dir, RLX_DATASET_ERROR_CORRUPT, names[1], "outside 0..9");
  remove_dir (dir);
}

static void
test_unknown (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxDataset) ds = rlx_dataset_open ("cifar", 0, &error);

  g_assert_null (ds);
  g_assert_error (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_UNKNOWN);
  g_assert_nonnull (strstr (error->message, "fashion-mnist"));
}

/* RLX_SYNTHETIC_TRAIN sizes the synthetic train split; its samples are
 * the default's, the test split follows them. */
static void
test_synthetic_train (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxDataset) small = NULL, big = NULL, bad = NULL;

  g_setenv ("RLX_SYNTHETIC_TRAIN", "2000", TRUE);
  small = rlx_dataset_open ("synthetic", 7, &error);
  g_assert_no_error (error);
  g_setenv ("RLX_SYNTHETIC_TRAIN", "70000", TRUE);
  big = rlx_dataset_open ("synthetic", 7, &error);
  g_assert_no_error (error);
  g_setenv ("RLX_SYNTHETIC_TRAIN", "12", TRUE);   /* out of range: the default */
  bad = rlx_dataset_open ("synthetic", 7, &error);
  g_assert_no_error (error);
  g_unsetenv ("RLX_SYNTHETIC_TRAIN");
  g_assert_cmpuint (rlx_dataset_size (small, RLX_SPLIT_TRAIN), ==, 2000);
  g_assert_cmpuint (rlx_dataset_size (big, RLX_SPLIT_TRAIN), ==, 70000);
  g_assert_cmpuint (rlx_dataset_size (bad, RLX_SPLIT_TRAIN), ==, 60000);
  /* the identity a hello compares names a size other than the default */
  g_assert_cmpstr (rlx_dataset_slug (small), ==, "synthetic-2000");
  g_assert_cmpstr (rlx_dataset_slug (big), ==, "synthetic-70000");
  g_assert_cmpstr (rlx_dataset_slug (bad), ==, "synthetic");
  g_assert_cmpuint (rlx_dataset_size (big, RLX_SPLIT_TEST), ==, 10000);
  g_assert_cmpmem (rlx_dataset_images (small, RLX_SPLIT_TRAIN), 2000 * RLX_INPUT_LEN,
                   rlx_dataset_images (big, RLX_SPLIT_TRAIN), 2000 * RLX_INPUT_LEN);
  g_assert_cmpmem (rlx_dataset_labels (small, RLX_SPLIT_TRAIN), 2000,
                   rlx_dataset_labels (big, RLX_SPLIT_TRAIN), 2000);
}

/* The installed package, where it is installed. */
static void
test_installed (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxDataset) ds = NULL;
  g_autofree char *probe = g_build_filename (RLX_FASHION_MNIST_DIR, names[0], NULL);
  guint counts[RLX_N_CLASSES] = { 0 };

  if (!g_file_test (probe, G_FILE_TEST_EXISTS))
    {
      g_test_skip ("dataset-fashion-mnist is not installed");
      return;
    }
  ds = rlx_dataset_open ("fashion-mnist", 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (rlx_dataset_size (ds, RLX_SPLIT_TRAIN), ==, 60000);
  g_assert_cmpuint (rlx_dataset_size (ds, RLX_SPLIT_TEST), ==, 10000);
  for (guint i = 0; i < 10000; i++)
    counts[rlx_dataset_labels (ds, RLX_SPLIT_TEST)[i]]++;
  for (guint k = 0; k < RLX_N_CLASSES; k++)
    g_assert_cmpuint (counts[k], ==, 1000);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/vision/idx/valid", test_valid);
  g_test_add_func ("/vision/idx/gather-bits", test_gather_bits);
  g_test_add_func ("/vision/idx/missing", test_missing);
  g_test_add_func ("/vision/idx/truncated", test_truncated);
  g_test_add_func ("/vision/idx/wrong-magic", test_wrong_magic);
  g_test_add_func ("/vision/idx/wrong-dimensions", test_wrong_dimensions);
  g_test_add_func ("/vision/idx/unknown-dataset", test_unknown);
  g_test_add_func ("/vision/idx/installed", test_installed);
  g_test_add_func ("/vision/synthetic/train-size", test_synthetic_train);
  return g_test_run ();
}
