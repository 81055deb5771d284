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

/* One piece of a run on the pool. */
typedef struct {
  RlxParPieceFunc func;
  gpointer        data;
  guint           k;
  Done           *done;
} Piece;

static void
piece_run (gpointer data, gpointer user_data)
{
  Piece *p = data;
  Done *d = p->done;

  p->func (p->data, p->k);
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
rlx_par_run (guint n, RlxParPieceFunc func, gpointer data)
{
  Piece pieces[RLX_PAR_COPY_PIECES];
  Done *done;

  g_return_if_fail (n >= 1 && n <= RLX_PAR_COPY_PIECES);
  if (n == 1)
    {
      func (data, 0);
      return;
    }
  done = g_new0 (Done, 1);
  g_atomic_ref_count_init (&done->ref);
  g_mutex_init (&done->lock);
  g_cond_init (&done->cond);
  done->left = n - 1;
  for (guint k = 1; k < n; k++)
    {
      pieces[k] = (Piece) { func, data, k, done };
      g_atomic_ref_count_inc (&done->ref);
      g_thread_pool_push (shared_pool (), &pieces[k], NULL);
    }
  func (data, 0);
  /* the pieces live in this frame: wait for every one */
  g_mutex_lock (&done->lock);
  while (done->left > 0)
    g_cond_wait (&done->cond, &done->lock);
  g_mutex_unlock (&done->lock);
  done_unref (done);
}

gsize
rlx_par_pieces (gsize n, gsize *per)
{
  /* whole 64-byte lines, and RLX_PAR_COPY_PIECES of them cover n */
  *per = ((n + RLX_PAR_COPY_PIECES - 1) / RLX_PAR_COPY_PIECES + 63) & ~(gsize) 63;
  return (n + *per - 1) / *per;
}

typedef struct {
  guint8       *dst;
  const guint8 *src;
  gsize         n, per;
} Copy;

static void
copy_piece (gpointer data, guint k)
{
  Copy *c = data;
  gsize from = k * c->per;

  memcpy (c->dst + from, c->src + from, MIN (c->per, c->n - from));
}

void
rlx_par_copy_from (void *dst, const void *src, gsize n, gsize min_bytes)
{
  Copy c = { dst, src, n, 0 };

  if (n < min_bytes || n < 2 * 64)
    {
      memcpy (dst, src, n);
      return;
    }
  rlx_par_run (rlx_par_pieces (n, &c.per), copy_piece, &c);
}

void
rlx_par_copy (void *dst, const void *src, gsize n)
{
  rlx_par_copy_from (dst, src, n, rlx_par_copy_min_bytes ());
}
