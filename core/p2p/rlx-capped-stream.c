/* rlx-capped-stream.c — count bytes between whole messages, refuse past a cap */
#include "rlx-config.h"
#include "rlx-capped-stream.h"

#include <string.h>

struct _RlxCappedInputStream
{
  GFilterInputStream parent_instance;

  gsize              cap;
  gsize              count;
  GBytes            *prefix;
  gsize              prefix_pos;
};

static void pollable_iface_init (GPollableInputStreamInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (RlxCappedInputStream, rlx_capped_input_stream,
                               G_TYPE_FILTER_INPUT_STREAM,
                               G_IMPLEMENT_INTERFACE (G_TYPE_POLLABLE_INPUT_STREAM,
                                                      pollable_iface_init))

static GInputStream *
base (RlxCappedInputStream *self)
{
  return g_filter_input_stream_get_base_stream (G_FILTER_INPUT_STREAM (self));
}

static gboolean
over_cap (RlxCappedInputStream *self, GError **error)
{
  if (self->count <= self->cap)
    return FALSE;
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
               "the peer sent %" G_GSIZE_FORMAT " bytes without finishing a message "
               "(the cap is %" G_GSIZE_FORMAT "); connection closed", self->count, self->cap);
  return TRUE;
}

/* Bytes left from the prefix, if any: copied out first. */
static gssize
take_prefix (RlxCappedInputStream *self, void *buffer, gsize count)
{
  gsize len;
  const guint8 *p;
  gsize n;

  if (self->prefix == NULL)
    return -1;
  p = g_bytes_get_data (self->prefix, &len);
  n = MIN (count, len - self->prefix_pos);
  memcpy (buffer, p + self->prefix_pos, n);
  self->prefix_pos += n;
  if (self->prefix_pos >= len)
    g_clear_pointer (&self->prefix, g_bytes_unref);
  return (gssize) n;
}

static gssize
account (RlxCappedInputStream *self, gssize n, GError **error)
{
  if (n > 0)
    {
      self->count += (gsize) n;
      if (over_cap (self, error))
        return -1;
    }
  return n;
}

/* A read: the prefix first, then the base stream (@blocking: a plain read,
 * else a pollable one), counted against the cap. */
static gssize
read_through (RlxCappedInputStream *self, void *buffer, gsize count, gboolean blocking,
              GCancellable *cancellable, GError **error)
{
  gssize n;

  if (over_cap (self, error))
    return -1;
  n = take_prefix (self, buffer, count);
  if (n < 0 && blocking)
    n = g_input_stream_read (base (self), buffer, count, cancellable, error);
  else if (n < 0)
    n = g_pollable_input_stream_read_nonblocking (G_POLLABLE_INPUT_STREAM (base (self)),
                                                  buffer, count, NULL, error);
  return account (self, n, error);
}

static gssize
capped_read (GInputStream *stream, void *buffer, gsize count, GCancellable *cancellable,
             GError **error)
{
  return read_through (RLX_CAPPED_INPUT_STREAM (stream), buffer, count, TRUE, cancellable, error);
}

static gboolean
capped_can_poll (GPollableInputStream *stream)
{
  GInputStream *b = base (RLX_CAPPED_INPUT_STREAM (stream));

  return G_IS_POLLABLE_INPUT_STREAM (b) &&
         g_pollable_input_stream_can_poll (G_POLLABLE_INPUT_STREAM (b));
}

static gboolean
capped_is_readable (GPollableInputStream *stream)
{
  RlxCappedInputStream *self = RLX_CAPPED_INPUT_STREAM (stream);

  return self->prefix != NULL || self->count > self->cap ||
         g_pollable_input_stream_is_readable (G_POLLABLE_INPUT_STREAM (base (self)));
}

static GSource *
capped_create_source (GPollableInputStream *stream, GCancellable *cancellable)
{
  RlxCappedInputStream *self = RLX_CAPPED_INPUT_STREAM (stream);
  g_autoptr(GSource) inner = NULL;

  if (self->prefix != NULL || self->count > self->cap)
    inner = g_timeout_source_new (0);
  else
    inner = g_pollable_input_stream_create_source (G_POLLABLE_INPUT_STREAM (base (self)), NULL);
  return g_pollable_source_new_full (stream, inner, cancellable);
}

static gssize
capped_read_nonblocking (GPollableInputStream *stream, void *buffer, gsize count,
                         GError **error)
{
  return read_through (RLX_CAPPED_INPUT_STREAM (stream), buffer, count, FALSE, NULL, error);
}

static void
pollable_iface_init (GPollableInputStreamInterface *iface)
{
  iface->can_poll = capped_can_poll;
  iface->is_readable = capped_is_readable;
  iface->create_source = capped_create_source;
  iface->read_nonblocking = capped_read_nonblocking;
}

static void
rlx_capped_input_stream_finalize (GObject *object)
{
  RlxCappedInputStream *self = RLX_CAPPED_INPUT_STREAM (object);

  g_clear_pointer (&self->prefix, g_bytes_unref);
  G_OBJECT_CLASS (rlx_capped_input_stream_parent_class)->finalize (object);
}

static void
rlx_capped_input_stream_class_init (RlxCappedInputStreamClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = rlx_capped_input_stream_finalize;
  G_INPUT_STREAM_CLASS (klass)->read_fn = capped_read;
}

static void
rlx_capped_input_stream_init (RlxCappedInputStream *self)
{
}

GInputStream *
rlx_capped_input_stream_new (GInputStream *base_stream, gsize cap, GBytes *prefix)
{
  RlxCappedInputStream *self;

  g_return_val_if_fail (G_IS_INPUT_STREAM (base_stream), NULL);
  self = g_object_new (RLX_TYPE_CAPPED_INPUT_STREAM, "base-stream", base_stream,
                       "close-base-stream", TRUE, NULL);
  self->cap = cap;
  if (prefix && g_bytes_get_size (prefix) > 0)
    self->prefix = g_bytes_ref (prefix);
  return G_INPUT_STREAM (self);
}

void
rlx_capped_input_stream_reset (RlxCappedInputStream *self)
{
  g_return_if_fail (RLX_IS_CAPPED_INPUT_STREAM (self));
  self->count = 0;
}

gsize
rlx_capped_input_stream_get_count (RlxCappedInputStream *self)
{
  g_return_val_if_fail (RLX_IS_CAPPED_INPUT_STREAM (self), 0);
  return self->count;
}
