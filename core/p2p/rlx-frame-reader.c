/* rlx-frame-reader.c — [u32 LE length][body] frames out of a byte stream */
#include "rlx-config.h"
#include "rlx-frame-reader.h"

#include <string.h>
#include <gio/gio.h>

/* The first allocation for a body; it doubles as bytes arrive. */
#define FIRST_CHUNK ((gsize) 64 * 1024)

struct _RlxFrameReader
{
  gsize        max_frame;
  RlxFrameFunc func;
  gpointer     user_data;

  guint8       hdr[4];
  gsize        hdr_got;
  gboolean     in_body;
  gsize        body_len;
  gsize        body_got;
  gsize        body_alloc;
  guint8      *body;
  gboolean     broken;
  guint64      begun;
};

RlxFrameReader *
rlx_frame_reader_new (gsize max_frame, RlxFrameFunc func, gpointer user_data)
{
  RlxFrameReader *self;

  g_return_val_if_fail (func != NULL, NULL);
  self = g_new0 (RlxFrameReader, 1);
  self->max_frame = max_frame;
  self->func = func;
  self->user_data = user_data;
  return self;
}

void
rlx_frame_reader_free (RlxFrameReader *self)
{
  if (self == NULL)
    return;
  g_free (self->body);
  g_free (self);
}

gsize
rlx_frame_reader_get_buffered (RlxFrameReader *self)
{
  return self->in_body ? 4 + self->body_got : self->hdr_got;
}

gboolean
rlx_frame_reader_in_progress (RlxFrameReader *self, gsize *bytes, guint64 *seq)
{
  *bytes = self->body_got;
  *seq = self->begun;
  return self->in_body;
}

gsize
rlx_frame_reader_get_allocated (RlxFrameReader *self)
{
  return self->body_alloc;
}

static gboolean
deliver (RlxFrameReader *self)
{
  GBytes *frame;
  gboolean go_on;

  if (self->body_len == 0)
    frame = g_bytes_new (NULL, 0);
  else if (self->body_alloc == self->body_len)
    frame = g_bytes_new_take (g_steal_pointer (&self->body), self->body_len);
  else
    {
      /* Shrink in place: realloc to the exact size rarely copies. */
      frame = g_bytes_new_take (g_realloc (g_steal_pointer (&self->body), self->body_len),
                                self->body_len);
    }
  self->in_body = FALSE;
  self->hdr_got = 0;
  self->body_len = self->body_got = self->body_alloc = 0;
  go_on = self->func (frame, self->user_data);
  g_bytes_unref (frame);
  return go_on;
}

gboolean
rlx_frame_reader_push (RlxFrameReader *self, const guint8 *data, gsize len, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (data != NULL || len == 0, FALSE);

  if (self->broken)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                   "the stream already broke its framing");
      return FALSE;
    }
  while (len > 0)
    {
      if (!self->in_body)
        {
          gsize take = MIN (len, 4 - self->hdr_got);
          guint32 n;

          memcpy (self->hdr + self->hdr_got, data, take);
          self->hdr_got += take;
          data += take;
          len -= take;
          if (self->hdr_got < 4)
            break;
          n = (guint32) self->hdr[0] | ((guint32) self->hdr[1] << 8) |
              ((guint32) self->hdr[2] << 16) | ((guint32) self->hdr[3] << 24);
          if (n > self->max_frame)
            {
              self->broken = TRUE;
              g_set_error (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                           "a frame of %u bytes was announced, over the cap of %"
                           G_GSIZE_FORMAT " bytes", n, self->max_frame);
              return FALSE;
            }
          self->in_body = TRUE;
          self->begun++;
          self->body_len = n;
          self->body_got = 0;
          if (n == 0)
            {
              if (!deliver (self))
                return FALSE;
              continue;
            }
          self->body_alloc = MIN ((gsize) n, FIRST_CHUNK);
          self->body = g_malloc (self->body_alloc);
        }
      else
        {
          gsize take = MIN (len, self->body_len - self->body_got);

          if (self->body_got + take > self->body_alloc)
            {
              gsize want = MAX (self->body_alloc * 2, self->body_got + take);
              self->body_alloc = MIN (want, self->body_len);
              self->body = g_realloc (self->body, self->body_alloc);
            }
          memcpy (self->body + self->body_got, data, take);
          self->body_got += take;
          data += take;
          len -= take;
          if (self->body_got == self->body_len && !deliver (self))
            return FALSE;
        }
    }
  return TRUE;
}
