/* rlx-dataset.c — synthetic (Philox) and Fashion-MNIST (IDX .gz) datasets */
#include "rlx-config.h"
#include "rlx-dataset.h"
#include "rlx-philox.h"
#include "rlx-model.h"

#include <gio/gio.h>
#include <string.h>

G_DEFINE_QUARK (rlx-dataset-error-quark, rlx_dataset_error)

#define SYNTHETIC_TRAIN 60000u
#define SYNTHETIC_TEST  10000u
/* Philox counter word 3 of each kind of draw, so they never coincide. */
#define DOMAIN_SAMPLE   0x53414d50u  /* "SAMP" */
#define DOMAIN_CLASS    0x434c4153u  /* "CLAS" */
#define DOMAIN_PERM     0x5045524du  /* "PERM" */
/* IDX files larger than this are refused before anything is allocated. */
#define IDX_MAX_ITEMS   1000000u
#define FASHION_PACKAGE "dataset-fashion-mnist"

struct _RlxDataset {
  gatomicrefcount ref;
  char           *slug;
  guint           size[2];
  guint8         *images[2];
  guint8         *labels[2];
};

static RlxDataset *
dataset_new (const char *slug)
{
  RlxDataset *self = g_new0 (RlxDataset, 1);

  g_atomic_ref_count_init (&self->ref);
  self->slug = g_strdup (slug);
  return self;
}

RlxDataset *
rlx_dataset_ref (RlxDataset *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_atomic_ref_count_inc (&self->ref);
  return self;
}

void
rlx_dataset_unref (RlxDataset *self)
{
  g_return_if_fail (self != NULL);
  if (!g_atomic_ref_count_dec (&self->ref))
    return;
  for (int s = 0; s < 2; s++)
    {
      g_free (self->images[s]);
      g_free (self->labels[s]);
    }
  g_free (self->slug);
  g_free (self);
}

const char *
rlx_dataset_slug (const RlxDataset *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->slug;
}

guint
rlx_dataset_size (const RlxDataset *self, RlxSplit split)
{
  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (split == RLX_SPLIT_TRAIN || split == RLX_SPLIT_TEST, 0);
  return self->size[split];
}

const guint8 *
rlx_dataset_images (const RlxDataset *self, RlxSplit split)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (split == RLX_SPLIT_TRAIN || split == RLX_SPLIT_TEST, NULL);
  return self->images[split];
}

const guint8 *
rlx_dataset_labels (const RlxDataset *self, RlxSplit split)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (split == RLX_SPLIT_TRAIN || split == RLX_SPLIT_TEST, NULL);
  return self->labels[split];
}

/* pixel / 255 exactly as PyTorch's .float().div(255) computes it: IEEE
 * division is correctly rounded in a vector lane as in a scalar one, so the
 * vectorised loop gives the same bits as the table it replaces (tested in
 * test-dataset), at a third of the time for a batch of 1024 (a shuffled
 * batch is a cohort step's gather; bench reuses one). */
__attribute__ ((optimize ("tree-vectorize")))
static void
convert_image (float *restrict dst, const guint8 *restrict src)
{
  for (guint p = 0; p < RLX_INPUT_LEN; p++)
    dst[p] = (float) src[p] / 255.0f;
}

void
rlx_dataset_gather (const RlxDataset *self, RlxSplit split,
                    const guint32 *indices, guint n,
                    float *x, guint8 *labels)
{
  const guint8 *images;

  g_return_if_fail (self != NULL);
  g_return_if_fail (split == RLX_SPLIT_TRAIN || split == RLX_SPLIT_TEST);
  g_return_if_fail (indices != NULL || n == 0);

  images = self->images[split];
  for (guint k = 0; k < n; k++)
    {
      guint i = indices[k];
      const guint8 *src;

      g_return_if_fail (i < self->size[split]);
      src = images + (gsize) i * RLX_INPUT_LEN;
      /* the samples are scattered over the split: ask for a later one's
       * lines while this one converts */
      if (k + 4 < n && indices[k + 4] < self->size[split])
        {
          const guint8 *next = images + (gsize) indices[k + 4] * RLX_INPUT_LEN;
          for (guint b = 0; b < RLX_INPUT_LEN; b += 64)
            __builtin_prefetch (next + b);
        }
      if (x != NULL)
        convert_image (x + (gsize) k * RLX_INPUT_LEN, src);
      if (labels != NULL)
        labels[k] = self->labels[split][i];
    }
}

void
rlx_dataset_permutation (guint n, guint64 seed, guint epoch, guint32 *perm)
{
  const guint32 key[2] = { (guint32) seed, (guint32) (seed >> 32) };

  g_return_if_fail (perm != NULL || n == 0);

  for (guint i = 0; i < n; i++)
    perm[i] = i;
  /* Fisher–Yates from the top; the draw for position i is word 0 of
   * Philox(ctr = {i, epoch, 0, PERM}), mapped to 0..i by multiply-shift. */
  for (guint i = n; i-- > 1;)
    {
      guint32 ctr[4] = { i, epoch, 0, DOMAIN_PERM };
      guint32 out[4];
      guint32 j, tmp;

      rlx_philox4x32_10 (ctr, key, out);
      j = (guint32) (((guint64) out[0] * ((guint64) i + 1)) >> 32);
      tmp = perm[i];
      perm[i] = perm[j];
      perm[j] = tmp;
    }
}

/* ---------------------------------------------------------------- synthetic */

/* Each class is a random pattern of bright cells on a 7×7 grid of 4×4-pixel
 * cells (drawn from Philox keyed by the seed); a sample is its class's
 * pattern plus uniform noise so strong that single pixels overlap between
 * "on" and "off" — a model has to learn the pattern. Integer arithmetic only,
 * so every machine produces the same bytes. */
static void
synthetic_fill (const guint32 key[2], guint8 classes[RLX_N_CLASSES][49],
                guint32 counter, guint8 *image, guint8 *label)
{
  guint32 ctr[4] = { counter, 0, 0, DOMAIN_SAMPLE };
  guint32 out[4];
  guint c;

  /* Block 0 chooses the label; blocks 1..49 give 16 noise bytes each. */
  rlx_philox4x32_10 (ctr, key, out);
  c = out[0] % RLX_N_CLASSES;
  *label = (guint8) c;

  for (guint b = 0; b < RLX_INPUT_LEN / 16; b++)
    {
      ctr[1] = b + 1;
      rlx_philox4x32_10 (ctr, key, out);
      for (guint k = 0; k < 16; k++)
        {
          guint p = b * 16 + k;
          guint y = p / RLX_IMAGE_SIDE, x = p % RLX_IMAGE_SIDE;
          guint noise = ((out[k / 4] >> (8 * (k % 4))) & 0xff) * 160u / 256u;
          guint on = classes[c][(y / 4) * 7 + x / 4];

          image[p] = (guint8) (noise + (on ? 95u : 0u));
        }
    }
}

/* RLX_SYNTHETIC_TRAIN: the training split's size, 1,000 to 10,000,000
 * (60,000 otherwise) — an epoch long enough that rounds of many ranks are
 * not cut at its end (a benchmark's knob; its slug says the size, so every
 * rank must see the same). */
static guint
synthetic_train (void)
{
  const char *v = g_getenv ("RLX_SYNTHETIC_TRAIN");
  guint64 n;

  if (v == NULL || !g_ascii_string_to_unsigned (v, 10, 1000, 10000000, &n, NULL))
    return SYNTHETIC_TRAIN;
  return (guint) n;
}

static RlxDataset *
synthetic_open (guint64 seed)
{
  const guint32 key[2] = { (guint32) seed, (guint32) (seed >> 32) };
  guint8 classes[RLX_N_CLASSES][49];
  guint n_train = synthetic_train ();
  /* Its identity (what a hello and a checkpoint compare) names a training
   * split other than the default, so ranks that were given different
   * RLX_SYNTHETIC_TRAIN values are refused instead of losing slices. */
  g_autofree char *slug = n_train == SYNTHETIC_TRAIN ? g_strdup ("synthetic")
                                                     : g_strdup_printf ("synthetic-%u", n_train);
  RlxDataset *self = dataset_new (slug);
  guint32 counter = 0;

  for (guint c = 0; c < RLX_N_CLASSES; c++)
    for (guint cell = 0; cell < 49; cell += 4)
      {
        guint32 ctr[4] = { cell / 4, c, 0, DOMAIN_CLASS };
        guint32 out[4];

        rlx_philox4x32_10 (ctr, key, out);
        for (guint k = 0; k < 4 && cell + k < 49; k++)
          classes[c][cell + k] = (out[k] >> 31) & 1;
      }

  self->size[RLX_SPLIT_TRAIN] = n_train;
  self->size[RLX_SPLIT_TEST] = SYNTHETIC_TEST;
  for (int s = 0; s < 2; s++)
    {
      self->images[s] = g_malloc ((gsize) self->size[s] * RLX_INPUT_LEN);
      self->labels[s] = g_malloc (self->size[s]);
      for (guint i = 0; i < self->size[s]; i++, counter++)
        synthetic_fill (key, classes, counter,
                        self->images[s] + (gsize) i * RLX_INPUT_LEN,
                        self->labels[s] + i);
    }
  return self;
}

/* ------------------------------------------------------------ fashion-mnist */

static gboolean
idx_read (GInputStream *in, const char *path, void *buf, gsize len,
          const char *what, GError **error)
{
  g_autoptr(GError) local = NULL;
  gsize got = 0;

  if (!g_input_stream_read_all (in, buf, len, &got, NULL, &local))
    {
      g_set_error (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_CORRUPT,
                   "%s: cannot read %s: %s (reinstall the Debian package %s)",
                   path, what, local->message, FASHION_PACKAGE);
      return FALSE;
    }
  if (got != len)
    {
      g_set_error (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_CORRUPT,
                   "%s is truncated: expected %" G_GSIZE_FORMAT " bytes for %s, found %"
                   G_GSIZE_FORMAT " (reinstall the Debian package %s)",
                   path, len, what, got, FASHION_PACKAGE);
      return FALSE;
    }
  return TRUE;
}

static guint32
be32 (const guint8 *p)
{
  return ((guint32) p[0] << 24) | ((guint32) p[1] << 16) | ((guint32) p[2] << 8) | p[3];
}

/* Reads one gzip-compressed IDX file of u8 data: images (3 dims, 28×28) or
 * labels (1 dim). Returns the data and the item count. */
static guint8 *
idx_load (const char *dir, const char *name, gboolean images,
          guint *count_out, GError **error)
{
  g_autofree char *path = g_build_filename (dir, name, NULL);
  g_autoptr(GFile) file = g_file_new_for_path (path);
  g_autoptr(GFileInputStream) raw = NULL;
  g_autoptr(GZlibDecompressor) gunzip = NULL;
  g_autoptr(GInputStream) in = NULL;
  g_autoptr(GError) local = NULL;
  g_autofree guint8 *data = NULL;
  guint8 header[16];
  guint32 magic, count;
  guint ndim = images ? 3 : 1;
  gsize item = images ? RLX_INPUT_LEN : 1;
  guint8 extra;
  gsize got = 0;

  raw = g_file_read (file, NULL, &local);
  if (raw == NULL)
    {
      if (g_error_matches (local, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
        g_set_error (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_MISSING,
                     "%s not found: install the Debian package %s "
                     "(apt install %s)", path, FASHION_PACKAGE, FASHION_PACKAGE);
      else
        g_set_error (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_MISSING,
                     "cannot open %s: %s (it comes with the Debian package %s)",
                     path, local->message, FASHION_PACKAGE);
      return NULL;
    }
  gunzip = g_zlib_decompressor_new (G_ZLIB_COMPRESSOR_FORMAT_GZIP);
  in = g_converter_input_stream_new (G_INPUT_STREAM (raw), G_CONVERTER (gunzip));

  if (!idx_read (in, path, header, 4 + 4 * ndim, "the IDX header", error))
    return NULL;
  magic = be32 (header);
  if (magic != (0x00000800u | ndim))
    {
      g_set_error (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_CORRUPT,
                   "%s: wrong IDX magic 0x%08x, expected 0x%08x (u8 %s); reinstall the Debian package %s",
                   path, magic, 0x800u | ndim, images ? "images, 3 dimensions" : "labels, 1 dimension",
                   FASHION_PACKAGE);
      return NULL;
    }
  count = be32 (header + 4);
  if (images && (be32 (header + 8) != RLX_IMAGE_SIDE || be32 (header + 12) != RLX_IMAGE_SIDE))
    {
      g_set_error (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_CORRUPT,
                   "%s: images are %u×%u, expected %u×%u; reinstall the Debian package %s",
                   path, be32 (header + 8), be32 (header + 12),
                   RLX_IMAGE_SIDE, RLX_IMAGE_SIDE, FASHION_PACKAGE);
      return NULL;
    }
  if (count == 0 || count > IDX_MAX_ITEMS)
    {
      g_set_error (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_CORRUPT,
                   "%s: header claims %u items, expected 1..%u; reinstall the "
                   "Debian package %s", path, count, IDX_MAX_ITEMS, FASHION_PACKAGE);
      return NULL;
    }

  data = g_malloc ((gsize) count * item);
  if (!idx_read (in, path, data, (gsize) count * item,
                 images ? "the images its header announces" : "the labels its header announces",
                 error))
    return NULL;
  /* Anything after the announced data means the header is wrong. */
  if (!g_input_stream_read_all (in, &extra, 1, &got, NULL, &local))
    {
      g_set_error (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_CORRUPT,
                   "%s: %s (reinstall the Debian package %s)",
                   path, local->message, FASHION_PACKAGE);
      return NULL;
    }
  if (got != 0)
    {
      g_set_error (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_CORRUPT,
                   "%s: more data than the header's %u items; reinstall the "
                   "Debian package %s", path, count, FASHION_PACKAGE);
      return NULL;
    }
  if (!images)
    for (guint i = 0; i < count; i++)
      if (data[i] >= RLX_N_CLASSES)
        {
          g_set_error (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_CORRUPT,
                       "%s: label %u of item %u is outside 0..9; reinstall the "
                       "Debian package %s", path, data[i], i, FASHION_PACKAGE);
          return NULL;
        }
  *count_out = count;
  return g_steal_pointer (&data);
}

RlxDataset *
rlx_dataset_open_fashion_mnist (const char *dir, GError **error)
{
  static const char *const files[2][2] = {
    { "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz" },
    { "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz" },
  };
  g_autoptr(RlxDataset) self = NULL;

  g_return_val_if_fail (dir != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  self = dataset_new ("fashion-mnist");
  for (int s = 0; s < 2; s++)
    {
      guint n_images = 0, n_labels = 0;

      self->images[s] = idx_load (dir, files[s][0], TRUE, &n_images, error);
      if (self->images[s] == NULL)
        return NULL;
      self->labels[s] = idx_load (dir, files[s][1], FALSE, &n_labels, error);
      if (self->labels[s] == NULL)
        return NULL;
      if (n_images != n_labels)
        {
          g_set_error (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_CORRUPT,
                       "%s/%s has %u images but %s has %u labels; reinstall the "
                       "Debian package %s", dir, files[s][0], n_images,
                       files[s][1], n_labels, FASHION_PACKAGE);
          return NULL;
        }
      self->size[s] = n_images;
    }
  return g_steal_pointer (&self);
}

RlxDataset *
rlx_dataset_open (const char *slug, guint64 seed, GError **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (g_strcmp0 (slug, "synthetic") == 0)
    return synthetic_open (seed);
  if (g_strcmp0 (slug, "fashion-mnist") == 0)
    return rlx_dataset_open_fashion_mnist (RLX_FASHION_MNIST_DIR, error);

  g_set_error (error, RLX_DATASET_ERROR, RLX_DATASET_ERROR_UNKNOWN,
               "unknown dataset '%s'; known datasets: synthetic, fashion-mnist",
               slug ? slug : "(null)");
  return NULL;
}
