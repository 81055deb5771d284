/* fuzz-frame-reader.c — libFuzzer target for the stream framing of remote links
 *
 * The input is the byte stream of a QUIC stream; its own bytes also decide
 * how it is cut into pieces. The frames delivered must be exactly those a
 * straightforward reading of the whole stream gives, the cap must hold,
 * and the buffer for an incomplete frame must never be much larger than the
 * bytes that arrived. Each input is read twice: under a small cap, and
 * under the control stream's (RLX_LINK_MAX_CONTROL_FRAME, as rlx-quic.c
 * makes that stream's reader with the default max_frame). */
#include "rlx-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <gio/gio.h>

#include "core/p2p/rlx-frame-reader.h"
#include "core/p2p/rlx-link.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

#define CAP 4096

static void
check (gboolean ok, const char *what)
{
  if (!ok)
    {
      g_printerr ("fuzz-frame-reader: invariant broken: %s\n", what);
      abort ();
    }
}

static gboolean
collect (GBytes *frame, gpointer user_data)
{
  g_ptr_array_add (user_data, g_bytes_ref (frame));
  return TRUE;
}

static void
read_with_cap (const uint8_t *data, size_t size, gsize cap)
{
  g_autoptr(GPtrArray) got = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  g_autoptr(RlxFrameReader) r = rlx_frame_reader_new (cap, collect, got);
  g_autoptr(GError) error = NULL;
  gsize pos = 0, want_frames = 0, step = 1;
  gboolean want_broken = FALSE, ok = TRUE;
  guint64 seq_before = 0;

  /* Reference: read the whole stream at once. */
  {
    gsize p = 0;
    while (p + 4 <= size)
      {
        guint32 n = (guint32) data[p] | ((guint32) data[p + 1] << 8) |
                    ((guint32) data[p + 2] << 16) | ((guint32) data[p + 3] << 24);
        if (n > cap)
          {
            want_broken = TRUE;
            break;
          }
        if (p + 4 + n > size)
          break;
        want_frames++;
        p += 4 + n;
      }
  }
  while (pos < size && ok)
    {
      gsize take = MIN (size - pos, step);
      ok = rlx_frame_reader_push (r, data + pos, take, &error);
      pos += take;
      step = 1 + (data[pos % size] % 97);
      check (rlx_frame_reader_get_allocated (r) <= 2 * rlx_frame_reader_get_buffered (r) + 65536,
             "an incomplete frame's buffer stays near the bytes received");
      if (ok)
        {
          /* what the frame deadline reads (rlx-frame-clock.h) */
          gsize bytes;
          guint64 seq;
          gboolean open = rlx_frame_reader_in_progress (r, &bytes, &seq);

          check (seq >= seq_before, "frames begun went back");
          check (!open || (bytes < cap && bytes + 4 == rlx_frame_reader_get_buffered (r)),
                 "a frame in progress holds what arrived of its body, under the cap");
          check (seq >= got->len, "fewer frames begun than delivered");
          seq_before = seq;
        }
    }
  check (ok == !want_broken, "the cap breaks the stream exactly when a frame is over it");
  if (!ok)
    check (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE), "cap error");
  check (got->len == want_frames, "the same frames as a whole read");
  {
    gsize p = 0;
    for (guint i = 0; i < got->len; i++)
      {
        gsize len;
        const guint8 *f = g_bytes_get_data (got->pdata[i], &len);
        guint32 n = (guint32) data[p] | ((guint32) data[p + 1] << 8) |
                    ((guint32) data[p + 2] << 16) | ((guint32) data[p + 3] << 24);
        check (len == n && (n == 0 || memcmp (f, data + p + 4, n) == 0), "frame contents");
        p += 4 + n;
      }
  }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  read_with_cap (data, size, CAP);
  read_with_cap (data, size, RLX_LINK_MAX_CONTROL_FRAME);
  return 0;
}
