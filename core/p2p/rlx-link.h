/* rlx-link.h — one ordered, reliable, framed, bidirectional channel to a peer
 *
 * The coordinator talks to every peer through this interface and does not
 * know which transport is underneath (a Unix socket of the local bus, or an
 * ICE/TLS link to another machine). Frames are whole wire messages (see
 * core/wire): a link delivers each one intact and in order, or closes.
 *
 * Threads: a link lives on the main context it was created on; signals are
 * emitted there, and its methods are called from there.
 */
#pragma once

#include <glib-object.h>

G_BEGIN_DECLS

#define RLX_LINK_ERROR (rlx_link_error_quark ())
GQuark rlx_link_error_quark (void);
typedef enum {
  RLX_LINK_ERROR_CLOSED,       /* closed by us or by the peer (bye, EOF) */
  RLX_LINK_ERROR_FAILED,       /* I/O error, reset */
  RLX_LINK_ERROR_TOO_LARGE,    /* a frame over the link's cap */
  RLX_LINK_ERROR_PROTOCOL,     /* bytes that are not a frame */
  RLX_LINK_ERROR_PERMISSION,   /* peer uid differs from ours */
} RlxLinkError;

#define RLX_TYPE_LINK (rlx_link_get_type ())
G_DECLARE_DERIVABLE_TYPE (RlxLink, rlx_link, RLX, LINK, GObject)

struct _RlxLinkClass
{
  GObjectClass parent_class;

  /* Queue @frame for sending; never blocks. FALSE once closed. */
  gboolean (*send)  (RlxLink *self, GBytes *frame, GError **error);
  /* Close the link; emits ::closed once (with RLX_LINK_ERROR_CLOSED). */
  void     (*close) (RlxLink *self);
  /* Bytes handed to send() but not yet written to the transport. */
  gsize    (*pending_bytes) (RlxLink *self);

  gpointer padding[8];
};

/* Signals (emitted on the link's main context):
 *   ::frame   (RlxLink *link, GBytes *frame)        a whole frame arrived
 *   ::closed  (RlxLink *link, const GError *error)  the link is gone, once
 * Properties (read-only, notify on change):
 *   "peer"     string   a name for logs: socket path or remote address
 *   "bytes-tx" uint64   bytes written to the transport, framing included
 *   "bytes-rx" uint64   bytes read from the transport, framing included
 *   "closed"   boolean
 */

gboolean    rlx_link_send          (RlxLink *self, GBytes *frame, GError **error);
void        rlx_link_close         (RlxLink *self);
gsize       rlx_link_pending_bytes (RlxLink *self);
const char *rlx_link_get_peer      (RlxLink *self);
guint64     rlx_link_get_bytes_tx  (RlxLink *self);
guint64     rlx_link_get_bytes_rx  (RlxLink *self);
gboolean    rlx_link_is_closed     (RlxLink *self);
/* Microseconds this link has spent inside the transport's system calls
 * (send/receive) so far, so a caller can tell its own overhead from I/O. */
guint64     rlx_link_get_io_us     (RlxLink *self);

/* For implementations: */
void        rlx_link_set_peer      (RlxLink *self, const char *peer);
void        rlx_link_emit_frame    (RlxLink *self, GBytes *frame);
void        rlx_link_emit_closed   (RlxLink *self, const GError *error);
void        rlx_link_add_bytes_tx  (RlxLink *self, guint64 n);
void        rlx_link_add_bytes_rx  (RlxLink *self, guint64 n);
void        rlx_link_add_io_us     (RlxLink *self, guint64 us);

G_END_DECLS
