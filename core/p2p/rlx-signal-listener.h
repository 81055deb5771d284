/* rlx-signal-listener.h — the signalling server's sockets before the upgrade
 *
 * Owns the listening sockets and every connection until its WebSocket
 * upgrade, which is where a keyless client can pin resources without ever
 * saying a word. So each has a cap or a deadline:
 *   - connections before the upgrade: in total and per address;
 *   - all connections of one address, before and after the upgrade (the
 *     server reports the end of each upgraded one with _release);
 *   - the request headers: 8 KiB, and a deadline from the accept to the
 *     blank line (a client trickling a header every few seconds is closed);
 *   - descriptors: the soft RLIMIT_NOFILE is raised to the hard limit, the
 *     connection caps are cut to what the limit leaves, and an accept that
 *     fails (EMFILE, ENFILE, ENOBUFS) is retried with a backoff instead of
 *     stopping for good (what SoupServer's listener does);
 *   - when the pending table is full, a connection from a new address
 *     evicts the oldest one of the address that holds the most, so one
 *     address (an IPv4 address or an IPv6 /64) cannot starve the others.
 * A request that is not an upgrade on RLX_SIGNAL_PATH gets a plain HTTP
 * error; refusals are answered with 503 and the reason.
 *
 * Threads: create and use on one thread whose thread-default main context
 * runs; every socket is non-blocking on it.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct {
  guint max_pending;            /* connections before the upgrade; 0: 256 */
  guint max_pending_per_addr;   /* 0: 16 */
  guint max_per_addr;           /* all of one address, upgraded included; 0: 64 */
  guint header_timeout_ms;      /* accept → end of headers; 0: 5000 */
  guint max_held;               /* upgraded connections the owner may hold (to size the
                                 * descriptor budget); 0: 1024 */
} RlxSignalListenerLimits;

typedef struct _RlxSignalListener RlxSignalListener;

typedef struct {
  /* May @addr upgrade now? NULL: yes; else a reason (owned by the callee,
   * static) answered with 503. */
  const char *(*admit) (const char *addr, gpointer user_data);
  /* The 101 went out: the owner takes @conn (with @leftover bytes read past
   * the headers) and calls rlx_signal_listener_release (@addr) when it ends. */
  void        (*upgraded) (GSocketConnection *conn, GBytes *leftover, const char *addr,
                           gpointer user_data);
  /* For logs: "refused", "dropped", "accept-failed", "accepting". */
  void        (*event) (const char *what, const char *addr, const char *detail,
                        gpointer user_data);
} RlxSignalListenerCallbacks;

RlxSignalListener *rlx_signal_listener_new    (const RlxSignalListenerLimits *limits,
                                               const RlxSignalListenerCallbacks *cb,
                                               gpointer user_data);
void               rlx_signal_listener_free   (RlxSignalListener *self);
/* @address numeric or NULL (every IPv4 and IPv6 address); @port 0: any. */
gboolean           rlx_signal_listener_listen (RlxSignalListener *self, const char *address,
                                               guint16 port, GError **error);
guint16            rlx_signal_listener_get_port (RlxSignalListener *self);
void               rlx_signal_listener_release  (RlxSignalListener *self, const char *addr);
/* Connections of @addr now (before and after the upgrade). */
guint              rlx_signal_listener_count    (RlxSignalListener *self, const char *addr);
guint              rlx_signal_listener_get_n_pending (RlxSignalListener *self);
/* The per-address key of @sa: an IPv4 address, or an IPv6 /64 as "x:x:x:x::/64". */
char              *rlx_signal_address_key (GSocketAddress *sa);
/* Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now. */
guint64            rlx_signal_raise_fd_limit (void);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxSignalListener, rlx_signal_listener_free)

G_END_DECLS
