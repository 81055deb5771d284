/* rlx-counting-stream.c — count the bytes written through to the base stream */
#include "rlx-config.h"
#include "rlx-counting-stream.h"

struct _RlxCountingOutputStream
{
  GFilterOutputStream parent_instance;

  guint64             written;
};

static void pollable_iface_init (GPollableOutputStreamInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (RlxCountingOutputStream, rlx_counting_output_stream,
                               G_TYPE_FILTER_OUTPUT_STREAM,
                               G_IMPLEMENT_INTERFACE (G_TYPE_POLLABLE_OUTPUT_STREAM,
                                                      pollable_iface_init))

static GOutputStream *
base (gpointer self)
{
  return g_filter_output_stream_get_base_stream (G_FILTER_OUTPUT_STREAM (self));
}

static gssize
account (RlxCountingOutputStream *self, gssize n)
{
  if (n > 0)
    self->written += (guint64) n;
  return n;
}

static gssize
counting_write (GOutputStream *stream, const void *buffer, gsize count,
                GCancellable *cancellable, GError **error)
{
  return account (RLX_COUNTING_OUTPUT_STREAM (stream),
                  g_output_stream_write (base (stream), buffer, count, cancellable, error));
}

static gboolean
counting_can_poll (GPollableOutputStream *stream)
{
  GOutputStream *b = base (stream);

  return G_IS_POLLABLE_OUTPUT_STREAM (b) &&
         g_pollable_output_stream_can_poll (G_POLLABLE_OUTPUT_STREAM (b));
}

static gboolean
counting_is_writable (GPollableOutputStream *stream)
{
  return g_pollable_output_stream_is_writable (G_POLLABLE_OUTPUT_STREAM (base (stream)));
}

static GSource *
counting_create_source (GPollableOutputStream *stream, GCancellable *cancellable)
{
  g_autoptr(GSource) inner =
    g_pollable_output_stream_create_source (G_POLLABLE_OUTPUT_STREAM (base (stream)), NULL);

  return g_pollable_source_new_full (stream, inner, cancellable);
}

static gssize
counting_write_nonblocking (GPollableOutputStream *stream, const void *buffer, gsize count,
                            GError **error)
{
  return account (RLX_COUNTING_OUTPUT_STREAM (stream),
                  g_pollable_output_stream_write_nonblocking (
                    G_POLLABLE_OUTPUT_STREAM (base (stream)), buffer, count, NULL, error));
}

static void
pollable_iface_init (GPollableOutputStreamInterface *iface)
{
  iface->can_poll = counting_can_poll;
  iface->is_writable = counting_is_writable;
  iface->create_source = counting_create_source;
  iface->write_nonblocking = counting_write_nonblocking;
}

static void
rlx_counting_output_stream_class_init (RlxCountingOutputStreamClass *klass)
{
  GOutputStreamClass *out_class = G_OUTPUT_STREAM_CLASS (klass);

  out_class->write_fn = counting_write;
}

static void
rlx_counting_output_stream_init (RlxCountingOutputStream *self)
{
}

GOutputStream *
rlx_counting_output_stream_new (GOutputStream *base_stream)
{
  g_return_val_if_fail (G_IS_OUTPUT_STREAM (base_stream), NULL);
  return g_object_new (RLX_TYPE_COUNTING_OUTPUT_STREAM, "base-stream", base_stream,
                       "close-base-stream", TRUE, NULL);
}

guint64
rlx_counting_output_stream_get_written (RlxCountingOutputStream *self)
{
  g_return_val_if_fail (RLX_IS_COUNTING_OUTPUT_STREAM (self), 0);
  return self->written;
}
