/* rlx-link-ring.c — see rlx-link-ring.h */
#include "rlx-config.h"
#include "rlx-link-ring.h"
#include "core/p2p/rlx-link.h"
#include "core/util/rlx-par-copy.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define RING_ALIGN ((gsize) 64)
#define RING_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

static gsize
aligned (gsize len)
{
  return MAX (RING_ALIGN, (len + RING_ALIGN - 1) & ~(RING_ALIGN - 1));
}

/* ── sending ─────────────────────────────────────────────────────────── */

/* A block of a sending ring: a frame the peer may still be reading. */
typedef struct {
  gsize    off;
  gsize    len;
  gboolean released;
} Block;

/* One of our rings: mapped here read-write, by the peer read-only. Frames
 * are placed first-in first-out. */
typedef struct {
  guint32  id;
  guint8  *addr;
  gsize    size;
  gsize    head;      /* where the next block starts */
  GQueue   blocks;    /* Block*, oldest first */
  gboolean retired;   /* no new frames; freed once every block is released */
} TxRing;

struct _RlxRingTx {
  TxRing  *rings[RLX_RING_MAX_RINGS];   /* [0]: the current one, or NULL */
  guint32  next_id;
  gboolean broken;                      /* the kernel refused a ring */
};

static void
tx_ring_free (TxRing *t)
{
  g_queue_clear_full (&t->blocks, g_free);
  if (t->addr != NULL)
    munmap (t->addr, t->size);
  g_free (t);
}

RlxRingTx *
rlx_ring_tx_new (void)
{
  return g_new0 (RlxRingTx, 1);
}

void
rlx_ring_tx_free (RlxRingTx *tx)
{
  if (tx == NULL)
    return;
  for (guint i = 0; i < RLX_RING_MAX_RINGS; i++)
    g_clear_pointer (&tx->rings[i], tx_ring_free);
  g_free (tx);
}

/* A new ring of @size bytes, mapped here; its ATTACH (with the fd) goes to
 * @out. NULL (and no ring from now on) when the kernel refuses. */
static TxRing *
tx_ring_new (RlxRingTx *tx, gsize size, const char *peer, GArray *out)
{
  int fd = memfd_create ("rlx-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  RlxRingOut o = { { RLX_LINK_RING_ATTACH, 0, size, 0 }, -1 };
  TxRing *t;
  void *addr;

  if (fd < 0)
    goto fail;
  if (ftruncate (fd, size) != 0 || fcntl (fd, F_ADD_SEALS, RING_SEALS | F_SEAL_SEAL) != 0)
    goto fail;
  addr = mmap (NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (addr == MAP_FAILED)
    goto fail;
  t = g_new0 (TxRing, 1);
  t->id = o.op.ring = ++tx->next_id;
  t->addr = addr;
  t->size = size;
  g_queue_init (&t->blocks);
  o.fd = fd;
  g_array_append_val (out, o);
  return t;

fail:
  g_debug ("no shared ring of %" G_GSIZE_FORMAT " bytes for %s: %s; frames go through the "
           "socket", size, peer, g_strerror (errno));
  if (fd >= 0)
    close (fd);
  tx->broken = TRUE;
  return NULL;
}

/* Room for @len bytes in @t, first-in first-out: after the newest block, or
 * from the start when the end is too short and the oldest block leaves
 * enough before it. */
static gboolean
tx_ring_alloc (TxRing *t, gsize len, gsize *off)
{
  Block *b;
  gsize tail;

  len = aligned (len);
  if (g_queue_is_empty (&t->blocks))
    t->head = 0;
  tail = g_queue_is_empty (&t->blocks) ? 0 : ((Block *) g_queue_peek_head (&t->blocks))->off;
  if (g_queue_is_empty (&t->blocks) || t->head > tail)
    {
      if (t->size - t->head >= len)
        *off = t->head;
      else if (tail >= len)
        *off = 0;
      else
        return FALSE;
    }
  else if (tail - t->head >= len)
    *off = t->head;
  else
    return FALSE;
  b = g_new (Block, 1);
  b->off = *off;
  b->len = len;
  b->released = FALSE;
  g_queue_push_tail (&t->blocks, b);
  t->head = *off + len;
  return TRUE;
}

/* The current ring, made (or replaced by a larger one) for frames of @len
 * bytes; NULL when they go another way. */
static TxRing *
tx_ring_for (RlxRingTx *tx, gsize len, const char *peer, GArray *out)
{
  gsize need = RLX_RING_FRAMES * aligned (len);
  gsize want = RLX_RING_MIN_SIZE;
  guint free_slot = RLX_RING_MAX_RINGS;
  TxRing *cur = tx->rings[0];

  /* a power of two: frames a little larger than the last do not make a
   * new ring each time */
  while (want < need && want <= RLX_RING_MAX_SIZE)
    want *= 2;
  if (tx->broken || want > RLX_RING_MAX_SIZE)
    return NULL;
  if (cur != NULL && cur->size >= want)
    return cur;
  for (guint i = 1; i < RLX_RING_MAX_RINGS; i++)
    if (tx->rings[i] == NULL)
      free_slot = i;
  if (cur != NULL)
    {
      /* Retire the ring that is too small: the peer unmaps it once the
       * frames it holds are freed; we keep it until they are released. */
      RlxRingOut o = { { RLX_LINK_RING_DETACH, cur->id, 0, 0 }, -1 };

      if (free_slot == RLX_RING_MAX_RINGS && !g_queue_is_empty (&cur->blocks))
        return NULL;   /* too many retired rings still held: not now */
      g_array_append_val (out, o);
      if (g_queue_is_empty (&cur->blocks))
        tx_ring_free (cur);
      else
        {
          cur->retired = TRUE;
          tx->rings[free_slot] = cur;
        }
      tx->rings[0] = NULL;
    }
  tx->rings[0] = tx_ring_new (tx, want, peer, out);
  return tx->rings[0];
}

gboolean
rlx_ring_tx_place (RlxRingTx *tx, const void *data, gsize len, const char *peer, GArray *out)
{
  RlxRingOut o = { { RLX_LINK_RING_FRAME, 0, 0, len }, -1 };
  TxRing *t = tx_ring_for (tx, len, peer, out);
  gsize off;

  /* (a DETACH and ATTACH made on the way stand even when this frame finds
   * no room: the new ring is there for the next one) */
  if (t == NULL || !tx_ring_alloc (t, len, &off))
    return FALSE;
  /* the one copy of the frame: in pieces when it is large */
  rlx_par_copy (t->addr + off, data, len);
  o.op.ring = t->id;
  o.op.a = off;
  g_array_append_val (out, o);
  return TRUE;
}

gboolean
rlx_ring_tx_release (RlxRingTx *tx, guint32 ring, guint64 off, const char *peer,
                     GError **error)
{
  for (guint i = 0; i < RLX_RING_MAX_RINGS; i++)
    {
      TxRing *t = tx->rings[i];

      if (t == NULL || t->id != ring)
        continue;
      for (GList *l = t->blocks.head; l != NULL; l = l->next)
        {
          Block *b = l->data;

          if (b->off != off || b->released)
            continue;
          b->released = TRUE;
          while (!g_queue_is_empty (&t->blocks) &&
                 ((Block *) g_queue_peek_head (&t->blocks))->released)
            g_free (g_queue_pop_head (&t->blocks));
          if (t->retired && g_queue_is_empty (&t->blocks))
            g_clear_pointer (&tx->rings[i], tx_ring_free);
          return TRUE;
        }
      break;
    }
  g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
               "%s released a shared-ring frame it was not sent (ring %u, offset %"
               G_GUINT64_FORMAT "); link closed", peer, ring, off);
  return FALSE;
}

/* ── receiving ───────────────────────────────────────────────────────── */

/* A ring the peer shared, mapped read-only; each frame in it holds a
 * reference. */
typedef struct {
  gatomicrefcount ref;
  guint32         id;
  guint8         *addr;
  gsize           size;
} RxRing;

/* Counted: frames hold it too, and may outlive the link. The rings array
 * is the I/O thread's; the lock guards the rest. */
struct _RlxRingRx {
  gatomicrefcount    ref;
  RxRing            *rings[RLX_RING_MAX_RINGS];
  GMutex             lock;
  RlxRingReleaseFunc func;        /* NULL once the link ended */
  gpointer           data;
  GMainContext      *context;
  GArray            *pending;     /* RlxLinkRingOp (RELEASE) */
  gboolean           scheduled;   /* an idle source will take them */
};

/* What a frame received in a ring holds. */
typedef struct {
  RxRing    *ring;
  RlxRingRx *rx;
  guint64    off;
} Hold;

static void
rx_ring_unref (RxRing *r)
{
  if (!g_atomic_ref_count_dec (&r->ref))
    return;
  munmap (r->addr, r->size);
  g_free (r);
}

static RlxRingRx *
rx_ref (RlxRingRx *rx)
{
  g_atomic_ref_count_inc (&rx->ref);
  return rx;
}

static void
rx_unref (gpointer data)
{
  RlxRingRx *rx = data;

  if (!g_atomic_ref_count_dec (&rx->ref))
    return;
  for (guint i = 0; i < RLX_RING_MAX_RINGS; i++)
    g_clear_pointer (&rx->rings[i], rx_ring_unref);
  g_array_unref (rx->pending);
  g_main_context_unref (rx->context);
  g_mutex_clear (&rx->lock);
  g_free (rx);
}

RlxRingRx *
rlx_ring_rx_new (GMainContext *context, RlxRingReleaseFunc func, gpointer data)
{
  RlxRingRx *rx = g_new0 (RlxRingRx, 1);

  g_atomic_ref_count_init (&rx->ref);
  g_mutex_init (&rx->lock);
  rx->func = func;
  rx->data = data;
  rx->context = g_main_context_ref (context);
  rx->pending = g_array_new (FALSE, FALSE, sizeof (RlxLinkRingOp));
  return rx;
}

void
rlx_ring_rx_end (RlxRingRx *rx)
{
  if (rx == NULL)
    return;
  for (guint i = 0; i < RLX_RING_MAX_RINGS; i++)
    g_clear_pointer (&rx->rings[i], rx_ring_unref);
  g_mutex_lock (&rx->lock);
  rx->func = NULL;
  rx->data = NULL;
  g_mutex_unlock (&rx->lock);
  rx_unref (rx);
}

/* On the I/O thread: the releases other threads collected go out. */
static gboolean
on_releases (gpointer data)
{
  RlxRingRx *rx = data;
  g_autoptr(GArray) ops = NULL;
  RlxRingReleaseFunc func;
  gpointer func_data;

  g_mutex_lock (&rx->lock);
  rx->scheduled = FALSE;
  func = rx->func;
  func_data = rx->data;
  ops = rx->pending;
  rx->pending = g_array_new (FALSE, FALSE, sizeof (RlxLinkRingOp));
  g_mutex_unlock (&rx->lock);
  /* rlx_ring_rx_end runs on this thread too: a func still set is live */
  if (func != NULL && ops->len > 0)
    func (func_data, (const RlxLinkRingOp *) ops->data, ops->len);
  return G_SOURCE_REMOVE;
}

/* A frame received in a ring was freed (any thread). */
static void
hold_free (gpointer data)
{
  Hold *h = data;
  RlxRingRx *rx = h->rx;
  RlxLinkRingOp op = { RLX_LINK_RING_RELEASE, h->ring->id, h->off, 0 };

  g_mutex_lock (&rx->lock);
  if (rx->func != NULL)
    {
      g_array_append_val (rx->pending, op);
      if (!rx->scheduled)
        {
          GSource *src = g_idle_source_new ();

          rx->scheduled = TRUE;
          g_source_set_priority (src, G_PRIORITY_HIGH);
          g_source_set_callback (src, on_releases, rx_ref (rx), rx_unref);
          g_source_set_static_name (src, "rlx-link-ring releases");
          g_source_attach (src, rx->context);
          g_source_unref (src);
        }
    }
  g_mutex_unlock (&rx->lock);
  rx_ring_unref (h->ring);
  rx_unref (rx);
  g_free (h);
}

static RxRing **
rx_slot (RlxRingRx *rx, guint32 id)
{
  for (guint i = 0; i < RLX_RING_MAX_RINGS; i++)
    if (rx->rings[i] != NULL && rx->rings[i]->id == id)
      return &rx->rings[i];
  return NULL;
}

gboolean
rlx_ring_rx_attach (RlxRingRx *rx, const RlxLinkRingOp *op, int fd, const char *peer,
                    GError **error)
{
  RxRing **slot = NULL;
  struct stat st;
  int seals;
  void *addr;
  const char *bad = NULL;

  for (guint i = 0; i < RLX_RING_MAX_RINGS && slot == NULL; i++)
    if (rx->rings[i] == NULL)
      slot = &rx->rings[i];
  if (fd < 0)
    bad = "without its file descriptor";
  else if (rx_slot (rx, op->ring) != NULL)
    bad = "whose id is already attached";
  else if (slot == NULL)
    bad = "beyond the rings a link may hold";
  else if (op->a == 0 || op->a > RLX_RING_MAX_SIZE)
    bad = "of a size outside 1 byte to 256 MiB";
  else if (fstat (fd, &st) != 0 || !S_ISREG (st.st_mode))
    bad = "whose file descriptor is not a memfd";
  else if ((seals = fcntl (fd, F_GET_SEALS)) < 0 || (seals & RING_SEALS) != RING_SEALS)
    bad = "not sealed against resizing";
  else if (st.st_size < 0 || (guint64) st.st_size != op->a)
    bad = "whose memfd is not of the announced size";
  if (bad != NULL)
    {
      if (fd >= 0)
        close (fd);
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                   "%s attached a shared ring %s (ring %u, %" G_GUINT64_FORMAT " bytes); link "
                   "closed", peer, bad, op->ring, op->a);
      return FALSE;
    }
  addr = mmap (NULL, op->a, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  close (fd);
  if (addr == MAP_FAILED)
    {
      int errsv = errno;
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED,
                   "cannot map the shared ring of %" G_GUINT64_FORMAT " bytes from %s: %s",
                   op->a, peer, g_strerror (errsv));
      return FALSE;
    }
  *slot = g_new0 (RxRing, 1);
  g_atomic_ref_count_init (&(*slot)->ref);
  (*slot)->id = op->ring;
  (*slot)->addr = addr;
  (*slot)->size = op->a;
  return TRUE;
}

gboolean
rlx_ring_rx_detach (RlxRingRx *rx, const RlxLinkRingOp *op, const char *peer, GError **error)
{
  RxRing **slot = rx_slot (rx, op->ring);

  if (slot == NULL)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                   "%s retired shared ring %u, which it never attached; link closed", peer,
                   op->ring);
      return FALSE;
    }
  g_clear_pointer (slot, rx_ring_unref);
  return TRUE;
}

GBytes *
rlx_ring_rx_frame (RlxRingRx *rx, const RlxLinkRingOp *op, const char *peer, GError **error)
{
  RxRing **slot = rx_slot (rx, op->ring);
  Hold *h;

  if (slot == NULL || op->a > (*slot)->size || op->b > (*slot)->size - op->a)
    {
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_PROTOCOL,
                   "%s sent a frame of %" G_GUINT64_FORMAT " bytes at offset %" G_GUINT64_FORMAT
                   " of shared ring %u, %s; link closed", peer, op->b, op->a, op->ring,
                   slot == NULL ? "which it never attached" : "beyond the ring's end");
      return NULL;
    }
  h = g_new (Hold, 1);
  g_atomic_ref_count_inc (&(*slot)->ref);
  h->ring = *slot;
  h->rx = rx_ref (rx);
  h->off = op->a;
  return g_bytes_new_with_free_func ((*slot)->addr + op->a, op->b, hold_free, h);
}
