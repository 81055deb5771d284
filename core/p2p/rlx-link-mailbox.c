/* rlx-link-mailbox.c — frames and progress between a link's I/O thread and
 * its main context (see rlx-link-mailbox.h)
 *
 * One mutex guards everything the two sides share; it is never held across
 * a signal emission. Each side has one source of ours on its context, woken
 * through an eventfd of its own: no source is created per frame, and the
 * waking thread never takes the other context's lock (waking with
 * g_source_set_ready_time does, and the woken thread then blocks on it — two
 * more context switches per wake-up; only the rare deferred progress wake
 * uses a ready time).
 */
#include "rlx-config.h"
#include "rlx-link-mailbox.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct {
  GBytes      *frame;
  RlxLinkLane  lane;
} InItem;

typedef struct {
  GSource         source;
  RlxLinkMailbox *mb;     /* not referenced: the mailbox destroys its sources */
  int             efd;    /* written to wake the source's context */
} MbSource;

struct _RlxLinkMailbox
{
  gatomicrefcount ref;
  GMutex          lock;

  /* main context only */
  RlxLink        *link;            /* NULL once detached */
  GSource        *main_source;
  guint64         handed[RLX_LINK_N_LANES];
  guint64         rx_seen, tx_seen, io_us_seen;

  /* I/O side's */
  GSource              *io_source;
  RlxLinkMailboxIoFunc  io_func;
  gpointer              io_data;

  /* shared, under lock */
  gboolean        main_signalled;  /* the main source's eventfd was written */
  GQueue          outbox[RLX_LINK_N_LANES];   /* GBytes* */
  RlxLinkMailboxClose close;
  gboolean        io_wake_pending;
  gboolean        io_ended;        /* io_done: no more io_func, sends refused */
  gboolean        io_paused;       /* push_frame said full: wake it after taking */
  GQueue          inbox;           /* InItem* */
  gsize           inbox_bytes;
  gboolean        holding;         /* in a burst: bulk frames wait for _release */
  gsize           held_bytes;      /* pushed in this burst without a wake-up */
  gboolean        closed_pushed;   /* the end is queued (or delivered) */
  gboolean        closed_queued;   /* … and not delivered yet */
  GError         *closed_error;
  guint64         rx, tx, io_us;
  gint64          last_rx_at;
  guint64         written[RLX_LINK_N_LANES];
  gint64          main_wake_at;    /* -1: not woken */
  gboolean        main_held;       /* main only: deliver nothing but ::closed yet */
};

static void
in_item_free (gpointer data)
{
  InItem *it = data;

  g_bytes_unref (it->frame);
  g_free (it);
}

static void
outbox_clear (RlxLinkMailbox *self)
{
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    g_queue_clear_full (&self->outbox[l], (GDestroyNotify) g_bytes_unref);
}

/* Wake the main context now, or (@now FALSE: only counters moved) within
 * RLX_LINK_MAILBOX_PROGRESS_US — by then a frame usually has woken it and
 * taken the counters along, so progress alone rarely costs a wake-up. */
static void
signal_source (GSource *source)
{
  eventfd_t one = 1;

  /* Fails only when the counter would overflow: it is set already. */
  (void) eventfd_write (((MbSource *) source)->efd, one);
}

static void
drain_source (GSource *source)
{
  eventfd_t value;

  (void) eventfd_read (((MbSource *) source)->efd, &value);
}

static void
wake_main_locked (RlxLinkMailbox *self, gboolean now)
{
  gint64 at;

  if (self->main_source == NULL || self->main_signalled)
    return;
  if (now)
    {
      self->main_signalled = TRUE;
      signal_source (self->main_source);
      return;
    }
  at = g_get_monotonic_time () + RLX_LINK_MAILBOX_PROGRESS_US;
  if (self->main_wake_at >= 0 && self->main_wake_at <= at)
    return;
  self->main_wake_at = at;
  g_source_set_ready_time (self->main_source, at);
}

static void
wake_io_locked (RlxLinkMailbox *self)
{
  if (self->io_ended || self->io_wake_pending || self->io_source == NULL)
    return;
  self->io_wake_pending = TRUE;
  signal_source (self->io_source);
}

/* ── the main context's source ───────────────────────────────────────── */

static gboolean
main_dispatch (GSource *source, GSourceFunc callback, gpointer user_data)
{
  RlxLinkMailbox *self = ((MbSource *) source)->mb;
  g_autoptr(GError) closed_error = NULL;
  g_autoptr(RlxLink) link = NULL;
  GQueue in = G_QUEUE_INIT;
  guint64 rx, tx, io_us;
  gint64 last_rx_at;
  gboolean closed;
  InItem *it;

  /* Drain first: a wake-up after this is for something not taken below. */
  drain_source (source);
  g_mutex_lock (&self->lock);
  self->main_signalled = FALSE;
  /* Held (rlx_link_mailbox_hold_main): frames and counters wait for
   * _release_main; only the end is delivered, with what came before it. */
  if (self->main_held && !self->closed_queued)
    {
      if (self->main_wake_at >= 0)
        {
          g_source_set_ready_time (source, -1);
          self->main_wake_at = -1;
        }
      g_mutex_unlock (&self->lock);
      return G_SOURCE_CONTINUE;
    }
  if (self->main_wake_at >= 0)
    {
      g_source_set_ready_time (source, -1);
      self->main_wake_at = -1;
    }
  in = self->inbox;
  g_queue_init (&self->inbox);
  self->inbox_bytes = 0;
  if (self->io_paused)
    {
      self->io_paused = FALSE;
      wake_io_locked (self);
    }
  rx = self->rx - self->rx_seen;
  tx = self->tx - self->tx_seen;
  io_us = self->io_us - self->io_us_seen;
  self->rx_seen = self->rx;
  self->tx_seen = self->tx;
  self->io_us_seen = self->io_us;
  last_rx_at = self->last_rx_at;
  closed = self->closed_queued;
  self->closed_queued = FALSE;
  closed_error = g_steal_pointer (&self->closed_error);
  if (self->link != NULL)
    link = g_object_ref (self->link);
  g_mutex_unlock (&self->lock);

  if (link != NULL)
    {
      if (io_us > 0)
        rlx_link_add_io_us (link, io_us);
      /* bytes-rx holds a frame's bytes by the time it is emitted */
      if (rx > 0)
        rlx_link_add_bytes_rx_at (link, rx, last_rx_at);
    }
  while ((it = g_queue_pop_head (&in)) != NULL)
    {
      /* the base class drops frames once the link is closed (also by a
       * handler of an earlier frame of this batch) */
      if (link != NULL)
        rlx_link_emit_frame_lane (link, it->lane, it->frame);
      in_item_free (it);
    }
  if (link != NULL)
    {
      /* Last but ::closed: a ::notify handler may send again (the sender
       * does). */
      if (tx > 0)
        rlx_link_add_bytes_tx (link, tx);
      if (closed)
        rlx_link_emit_closed (link, closed_error);
    }
  return G_SOURCE_CONTINUE;
}

static gboolean
io_dispatch (GSource *source, GSourceFunc callback, gpointer user_data)
{
  RlxLinkMailbox *self = ((MbSource *) source)->mb;
  gboolean run;

  drain_source (source);
  g_mutex_lock (&self->lock);
  self->io_wake_pending = FALSE;
  run = !self->io_ended;
  g_mutex_unlock (&self->lock);
  if (run)
    self->io_func (self->io_data);
  return G_SOURCE_CONTINUE;
}

static void
mb_source_finalize (GSource *source)
{
  close (((MbSource *) source)->efd);
}

static GSourceFuncs main_funcs = { .dispatch = main_dispatch, .finalize = mb_source_finalize };
static GSourceFuncs io_funcs = { .dispatch = io_dispatch, .finalize = mb_source_finalize };

/* A source woken through @efd (it takes the fd). */
static GSource *
mb_source_new (RlxLinkMailbox *self, GSourceFuncs *funcs, const char *name, GMainContext *context,
               int efd)
{
  GSource *source = g_source_new (funcs, sizeof (MbSource));
  MbSource *mbs = (MbSource *) source;

  mbs->mb = self;
  mbs->efd = efd;
  g_source_add_unix_fd (source, efd, G_IO_IN);
  g_source_set_static_name (source, name);
  g_source_attach (source, context);
  return source;
}

static void
source_clear (GSource **source)
{
  if (*source != NULL)
    {
      g_source_destroy (*source);
      g_clear_pointer (source, g_source_unref);
    }
}

/* ── life ────────────────────────────────────────────────────────────── */

RlxLinkMailbox *
rlx_link_mailbox_new (RlxLink *link, GMainContext *io_context, RlxLinkMailboxIoFunc io_func,
                      gpointer io_data, GError **error)
{
  RlxLinkMailbox *self;
  g_autoptr(GMainContext) main_context = g_main_context_ref_thread_default ();
  int efd[2];

  g_return_val_if_fail (RLX_IS_LINK (link), NULL);
  g_return_val_if_fail (io_context != NULL && io_func != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  efd[0] = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  efd[1] = efd[0] < 0 ? -1 : eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd[1] < 0)
    {
      int errsv = errno;

      if (efd[0] >= 0)
        close (efd[0]);
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_FAILED,
                   "cannot set up the link to %s: no eventfd (%s); is the process out of file "
                   "descriptors (ulimit -n)?", rlx_link_get_peer (link) ? rlx_link_get_peer (link)
                                                                         : "peer",
                   g_strerror (errsv));
      return NULL;
    }

  self = g_new0 (RlxLinkMailbox, 1);
  g_atomic_ref_count_init (&self->ref);
  g_mutex_init (&self->lock);
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    g_queue_init (&self->outbox[l]);
  g_queue_init (&self->inbox);
  self->link = link;
  self->io_func = io_func;
  self->io_data = io_data;
  self->main_wake_at = -1;
  self->main_source = mb_source_new (self, &main_funcs, "rlx-link-mailbox main", main_context,
                                     efd[0]);
  self->io_source = mb_source_new (self, &io_funcs, "rlx-link-mailbox io", io_context, efd[1]);
  return self;
}

void
rlx_link_mailbox_hold_main (RlxLinkMailbox *self)
{
  g_mutex_lock (&self->lock);
  self->main_held = TRUE;
  g_mutex_unlock (&self->lock);
}

void
rlx_link_mailbox_release_main (RlxLinkMailbox *self)
{
  g_mutex_lock (&self->lock);
  if (self->main_held)
    {
      self->main_held = FALSE;
      self->main_signalled = FALSE;
      wake_main_locked (self, TRUE);
    }
  g_mutex_unlock (&self->lock);
}

RlxLinkMailbox *
rlx_link_mailbox_ref (RlxLinkMailbox *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_atomic_ref_count_inc (&self->ref);
  return self;
}

void
rlx_link_mailbox_unref (RlxLinkMailbox *self)
{
  g_return_if_fail (self != NULL);
  if (!g_atomic_ref_count_dec (&self->ref))
    return;
  /* Both sides let go: each destroyed its source already (detach, io_done)
   * unless it never ran. */
  source_clear (&self->main_source);
  source_clear (&self->io_source);
  outbox_clear (self);
  g_queue_clear_full (&self->inbox, in_item_free);
  g_clear_error (&self->closed_error);
  g_mutex_clear (&self->lock);
  g_free (self);
}

/* ── main ────────────────────────────────────────────────────────────── */

gboolean
rlx_link_mailbox_send (RlxLinkMailbox *self, RlxLinkLane lane, GBytes *frame, GError **error)
{
  g_return_val_if_fail (self != NULL && frame != NULL, FALSE);
  g_return_val_if_fail (lane < RLX_LINK_N_LANES, FALSE);

  g_mutex_lock (&self->lock);
  if (self->io_ended || self->closed_pushed || self->close != RLX_LINK_MAILBOX_OPEN)
    {
      g_mutex_unlock (&self->lock);
      g_set_error (error, RLX_LINK_ERROR, RLX_LINK_ERROR_CLOSED, "link to %s is closed",
                   self->link && rlx_link_get_peer (self->link) ? rlx_link_get_peer (self->link)
                                                                : "peer");
      return FALSE;
    }
  g_queue_push_tail (&self->outbox[lane], g_bytes_ref (frame));
  self->handed[lane] += g_bytes_get_size (frame);
  wake_io_locked (self);
  g_mutex_unlock (&self->lock);
  return TRUE;
}

gsize
rlx_link_mailbox_pending (RlxLinkMailbox *self, RlxLinkLane lane)
{
  gsize pending;

  g_return_val_if_fail (self != NULL && lane < RLX_LINK_N_LANES, 0);
  g_mutex_lock (&self->lock);
  pending = self->io_ended ? 0 : (gsize) (self->handed[lane] - self->written[lane]);
  g_mutex_unlock (&self->lock);
  return pending;
}

void
rlx_link_mailbox_close (RlxLinkMailbox *self, RlxLinkMailboxClose how)
{
  g_return_if_fail (self != NULL);
  g_mutex_lock (&self->lock);
  if (how > self->close)
    {
      self->close = how;
      wake_io_locked (self);
    }
  g_mutex_unlock (&self->lock);
}

void
rlx_link_mailbox_detach (RlxLinkMailbox *self)
{
  GSource *source;

  g_return_if_fail (self != NULL);
  g_mutex_lock (&self->lock);
  self->link = NULL;
  source = g_steal_pointer (&self->main_source);
  g_mutex_unlock (&self->lock);
  if (source != NULL)
    {
      g_source_destroy (source);
      g_source_unref (source);
    }
}

gboolean
rlx_link_mailbox_is_ended (RlxLinkMailbox *self)
{
  gboolean ended;

  g_return_val_if_fail (self != NULL, TRUE);
  g_mutex_lock (&self->lock);
  ended = self->io_ended || self->closed_pushed;
  g_mutex_unlock (&self->lock);
  return ended;
}

/* ── I/O ─────────────────────────────────────────────────────────────── */

void
rlx_link_mailbox_take (RlxLinkMailbox *self, GQueue out[RLX_LINK_N_LANES])
{
  g_return_if_fail (self != NULL);
  g_mutex_lock (&self->lock);
  for (guint l = 0; l < RLX_LINK_N_LANES; l++)
    {
      GList *head = self->outbox[l].head;

      if (head == NULL)
        continue;
      /* splice the whole list onto out[l] */
      if (out[l].tail != NULL)
        {
          out[l].tail->next = head;
          head->prev = out[l].tail;
        }
      else
        out[l].head = head;
      out[l].tail = self->outbox[l].tail;
      out[l].length += self->outbox[l].length;
      g_queue_init (&self->outbox[l]);
    }
  g_mutex_unlock (&self->lock);
}

RlxLinkMailboxClose
rlx_link_mailbox_get_close (RlxLinkMailbox *self)
{
  RlxLinkMailboxClose how;

  g_return_val_if_fail (self != NULL, RLX_LINK_MAILBOX_CLOSE_ABORT);
  g_mutex_lock (&self->lock);
  how = self->close;
  g_mutex_unlock (&self->lock);
  return how;
}

static gboolean
inbox_full_locked (RlxLinkMailbox *self)
{
  return self->inbox_bytes >= RLX_LINK_MAILBOX_INBOX_BYTES ||
         self->inbox.length >= RLX_LINK_MAILBOX_INBOX_FRAMES;
}

gboolean
rlx_link_mailbox_push_frame (RlxLinkMailbox *self, RlxLinkLane lane, GBytes *frame)
{
  InItem *it;
  gboolean room;

  g_return_val_if_fail (self != NULL && frame != NULL, FALSE);
  g_mutex_lock (&self->lock);
  if (self->closed_pushed)
    {
      g_mutex_unlock (&self->lock);
      g_bytes_unref (frame);
      return TRUE;
    }
  it = g_new (InItem, 1);
  it->frame = frame;
  it->lane = lane;
  g_queue_push_tail (&self->inbox, it);
  self->inbox_bytes += g_bytes_get_size (frame);
  room = !inbox_full_locked (self);
  if (!room)
    self->io_paused = TRUE;
  self->held_bytes += g_bytes_get_size (frame) + 1;
  if (!self->holding || lane == RLX_LINK_LANE_CONTROL || !room ||
      self->held_bytes >= RLX_LINK_MAILBOX_HOLD_BYTES)
    {
      self->held_bytes = 0;
      wake_main_locked (self, TRUE);
    }
  g_mutex_unlock (&self->lock);
  return room;
}

void
rlx_link_mailbox_hold (RlxLinkMailbox *self)
{
  g_return_if_fail (self != NULL);
  g_mutex_lock (&self->lock);
  self->holding = TRUE;
  g_mutex_unlock (&self->lock);
}

void
rlx_link_mailbox_release (RlxLinkMailbox *self)
{
  g_return_if_fail (self != NULL);
  g_mutex_lock (&self->lock);
  self->holding = FALSE;
  if (self->held_bytes > 0)
    {
      self->held_bytes = 0;
      wake_main_locked (self, TRUE);
    }
  g_mutex_unlock (&self->lock);
}

gboolean
rlx_link_mailbox_inbox_full (RlxLinkMailbox *self)
{
  gboolean full;

  g_return_val_if_fail (self != NULL, TRUE);
  g_mutex_lock (&self->lock);
  full = inbox_full_locked (self);
  if (full)
    self->io_paused = TRUE;
  g_mutex_unlock (&self->lock);
  return full;
}

void
rlx_link_mailbox_push_closed (RlxLinkMailbox *self, GError *error)
{
  g_return_if_fail (self != NULL);
  g_mutex_lock (&self->lock);
  if (self->closed_pushed)
    {
      g_mutex_unlock (&self->lock);
      g_clear_error (&error);
      return;
    }
  self->closed_pushed = TRUE;
  self->closed_queued = TRUE;
  self->closed_error = error;
  wake_main_locked (self, TRUE);
  g_mutex_unlock (&self->lock);
}

void
rlx_link_mailbox_add_rx (RlxLinkMailbox *self, guint64 n, gint64 when)
{
  g_return_if_fail (self != NULL);
  if (n == 0)
    return;
  g_mutex_lock (&self->lock);
  self->rx += n;
  self->last_rx_at = MAX (self->last_rx_at, when);
  wake_main_locked (self, FALSE);
  g_mutex_unlock (&self->lock);
}

void
rlx_link_mailbox_add_tx (RlxLinkMailbox *self, RlxLinkLane lane, guint64 frame_bytes,
                         guint64 wire_bytes, guint frames_done)
{
  g_return_if_fail (self != NULL && lane < RLX_LINK_N_LANES);
  if (frame_bytes == 0 && wire_bytes == 0 && frames_done == 0)
    return;
  g_mutex_lock (&self->lock);
  self->written[lane] += frame_bytes;
  self->tx += wire_bytes;
  /* Written frames do not wake the main context at once: pending_bytes is
   * exact without it, and a sender looks again whenever it is given a frame
   * (a leader sending one step per round would pay a wake-up per member). */
  wake_main_locked (self, FALSE);
  g_mutex_unlock (&self->lock);
}

void
rlx_link_mailbox_add_io_us (RlxLinkMailbox *self, guint64 us)
{
  g_return_if_fail (self != NULL);
  g_mutex_lock (&self->lock);
  self->io_us += us;
  g_mutex_unlock (&self->lock);
}

void
rlx_link_mailbox_set_io_priority (RlxLinkMailbox *self, gint priority)
{
  g_return_if_fail (self != NULL);
  g_mutex_lock (&self->lock);
  if (self->io_source != NULL)
    g_source_set_priority (self->io_source, priority);
  g_mutex_unlock (&self->lock);
}

void
rlx_link_mailbox_io_done (RlxLinkMailbox *self)
{
  GSource *source;

  g_return_if_fail (self != NULL);
  g_mutex_lock (&self->lock);
  self->io_ended = TRUE;
  source = g_steal_pointer (&self->io_source);
  outbox_clear (self);
  /* pending_bytes drops to 0: tell the sender */
  wake_main_locked (self, TRUE);
  g_mutex_unlock (&self->lock);
  if (source != NULL)
    {
      g_source_destroy (source);
      g_source_unref (source);
    }
}
