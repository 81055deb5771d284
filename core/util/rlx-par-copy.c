/* rlx-par-copy.c — see rlx-par-copy.h */
#include "rlx-config.h"
#include "rlx-par-copy.h"

#include <string.h>

/* Heap-held and counted: the last of the caller and the pieces frees it, so
 * no thread ever touches its lock after another has freed it. */
typedef struct {
  gatomicrefcount ref;
  GMutex          lock;
  GCond           cond;
  guint           left;
} Done;

static void
done_unref (Done *d)
{
  if (!g_atomic_ref_count_dec (&d->ref))
    return;
  g_mutex_clear (&d->lock);
  g_cond_clear (&d->cond);
  g_free (d);
}

typedef struct {
  void       *dst;
  const void *src;
  gsize       n;
  Done       *done;
} Piece;

static void
piece_run (gpointer data, gpointer user_data)
{
  Piece *p = data;
  Done *d = p->done;

  memcpy (p->dst, p->src, p->n);
  g_mutex_lock (&d->lock);
  if (--d->left == 0)
    g_cond_signal (&d->cond);
  g_mutex_unlock (&d->lock);
  done_unref (d);
}

static GThreadPool *
shared_pool (void)
{
  static GThreadPool *pool;

  if (g_once_init_enter (&pool))
    g_once_init_leave (&pool, g_thread_pool_new (piece_run, NULL, RLX_PAR_COPY_PIECES - 1,
                                                 FALSE, NULL));
  return pool;
}

gsize
rlx_par_copy_min_bytes (void)
{
  static gsize min;

  if (g_once_init_enter (&min))
    {
      const char *e = g_getenv ("RLX_COPY_PAR_MIN");
      guint64 v = g_get_num_processors () <= 2 ? G_MAXSIZE : RLX_PAR_COPY_MIN_BYTES;

      if (e != NULL && !g_ascii_string_to_unsigned (e, 10, 1, G_MAXSIZE, &v, NULL))
        g_warning ("RLX_COPY_PAR_MIN=%s is not a byte count; using %" G_GUINT64_FORMAT, e, v);
      g_once_init_leave (&min, (gsize) v);
    }
  return min;
}

void
rlx_par_copy_from (void *dst, const void *src, gsize n, gsize min_bytes)
{
  Piece pieces[RLX_PAR_COPY_PIECES];
  Done *done;
  gsize per;
  guint k, n_pieces;

  if (n < min_bytes || n < 2 * 64)
    {
      memcpy (dst, src, n);
      return;
    }
  /* whole 64-byte lines, and RLX_PAR_COPY_PIECES of them cover n */
  per = ((n + RLX_PAR_COPY_PIECES - 1) / RLX_PAR_COPY_PIECES + 63) & ~(gsize) 63;
  done = g_new0 (Done, 1);
  g_atomic_ref_count_init (&done->ref);
  g_mutex_init (&done->lock);
  g_cond_init (&done->cond);
  for (k = 0; k < RLX_PAR_COPY_PIECES && k * per < n; k++)
    pieces[k] = (Piece) { (char *) dst + k * per, (const char *) src + k * per,
                          MIN (per, n - k * per), done };
  n_pieces = k;
  done->left = n_pieces - 1;
  for (k = 1; k < n_pieces; k++)
    {
      g_atomic_ref_count_inc (&done->ref);
      g_thread_pool_push (shared_pool (), &pieces[k], NULL);
    }
  memcpy (pieces[0].dst, pieces[0].src, pieces[0].n);
  /* the pieces live in this frame: wait for every one */
  g_mutex_lock (&done->lock);
  while (done->left > 0)
    g_cond_wait (&done->cond, &done->lock);
  g_mutex_unlock (&done->lock);
  done_unref (done);
}

void
rlx_par_copy (void *dst, const void *src, gsize n)
{
  rlx_par_copy_from (dst, src, n, rlx_par_copy_min_bytes ());
}
