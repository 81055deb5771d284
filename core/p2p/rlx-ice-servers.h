/* rlx-ice-servers.h — a remote node's STUN and TURN servers, as numeric
 * addresses
 *
 * libnice takes numeric addresses only. A server is given as HOST[:PORT]
 * (3478 unless said); one named by a host name is looked up with GResolver,
 * an IPv4 address preferred, and one that does not resolve is reported
 * (@failed) and left out. @ready runs once every lookup has ended — at once,
 * inside rlx_ice_servers_resolve, when none was needed. A lookup in flight
 * holds a reference on @owner (which owns this), and a cancelled one calls
 * nothing.
 *
 * Threads: the owner's (the thread-default main context of the call).
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct _RlxIceServers RlxIceServers;

/* @spec did not resolve: @message says why. */
typedef void (*RlxIceServersFailed) (GObject *owner, const char *spec, const char *message);
typedef void (*RlxIceServersReady)  (GObject *owner);

RlxIceServers *rlx_ice_servers_new     (GObject *owner, GCancellable *cancel,
                                        RlxIceServersFailed failed, RlxIceServersReady ready);
void           rlx_ice_servers_free    (RlxIceServers *self);

/* Look up @stun and @turn (each NULL: none). FALSE, with @error naming the
 * server, when a spec is not HOST[:PORT]; then @ready never runs. */
gboolean       rlx_ice_servers_resolve (RlxIceServers *self, const char *stun, const char *turn,
                                        GError **error);

/* The numeric address and port of each (NULL and 0: none, or not yet). */
const char    *rlx_ice_servers_get_stun_ip   (RlxIceServers *self);
guint16        rlx_ice_servers_get_stun_port (RlxIceServers *self);
const char    *rlx_ice_servers_get_turn_ip   (RlxIceServers *self);
guint16        rlx_ice_servers_get_turn_port (RlxIceServers *self);

G_END_DECLS
