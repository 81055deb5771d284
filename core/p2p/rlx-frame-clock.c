/* rlx-frame-clock.c — a deadline for frames in progress (see rlx-frame-clock.h) */
#include "rlx-config.h"
#include "rlx-frame-clock.h"

#include <string.h>


gint64
rlx_frame_clock_grace_from_env (void)
{
  const char *s = g_getenv ("RLX_LINK_FRAME_GRACE_MS");
  guint64 ms;

  if (s != NULL && g_ascii_string_to_unsigned (s, 10, 1, G_MAXUINT32, &ms, NULL))
    return (gint64) ms * 1000;
  return (gint64) RLX_FRAME_CLOCK_GRACE_MS * 1000;
}

/* A grace's worth of bytes at the minimum rate. */
static gint64
grace_bytes (const RlxFrameClock *c)
{
  return c->grace_us * (gint64) RLX_FRAME_CLOCK_MIN_RATE / G_USEC_PER_SEC;
}

void
rlx_frame_clock_init (RlxFrameClock *c, gint64 grace_us)
{
  memset (c, 0, sizeof *c);
  c->grace_us = grace_us;
}

gboolean
rlx_frame_clock_tick (RlxFrameClock *c, gint64 now, gboolean in_progress, guint64 seq,
                      gsize bytes, gboolean reading)
{
  gint64 dt = CLAMP (now - c->last_us, 0, 2 * (gint64) RLX_FRAME_CLOCK_TICK_MS * 1000);

  c->last_us = now;
  if (!in_progress)
    {
      c->timing = FALSE;
      return TRUE;
    }
  if (!c->timing || c->seq != seq)
    {
      /* a frame begun since the last tick: timed from now */
      c->timing = TRUE;
      c->seq = seq;
      c->bytes = bytes;
      c->age_us = 0;
      c->hand = grace_bytes (c);
      return TRUE;
    }
  if (bytes > c->bytes)
    c->hand = MIN (c->hand + (gint64) (bytes - c->bytes), grace_bytes (c));
  c->bytes = bytes;
  if (reading)
    {
      c->age_us += dt;
      c->hand -= dt * (gint64) RLX_FRAME_CLOCK_MIN_RATE / G_USEC_PER_SEC;
    }
  return c->hand >= 0;
}

char *
rlx_frame_clock_reason (const RlxFrameClock *c, const char *peer, const char *lane,
                        gsize bytes)
{
  return g_strdup_printf ("%s kept a %s frame half-sent: %" G_GSIZE_FORMAT " bytes in %.1f s, "
                          "more than %.1f s behind %" G_GSIZE_FORMAT " bytes/s; link closed",
                          peer, lane, bytes, c->age_us / 1e6, c->grace_us / 1e6,
                          RLX_FRAME_CLOCK_MIN_RATE);
}

gboolean
rlx_frame_clocks_tick (RlxFrameClock clocks[2], gint64 now, gboolean reading,
                       RlxFrameInProgressFunc in_progress, gpointer reader, const char *peer,
                       gboolean *any, char **reason)
{
  *any = FALSE;
  for (guint l = 0; l < 2; l++)
    {
      gsize bytes;
      guint64 seq;
      gboolean open = in_progress (reader, l, &bytes, &seq);

      *any |= open;
      if (!rlx_frame_clock_tick (&clocks[l], now, open, seq, bytes, reading))
        {
          *reason = rlx_frame_clock_reason (&clocks[l], peer, l == 0 ? "control" : "bulk",
                                            bytes);
          return FALSE;
        }
    }
  return TRUE;
}
