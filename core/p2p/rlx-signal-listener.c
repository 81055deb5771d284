/* rlx-signal-listener.c — accept, count, cap and time out until the upgrade
 *
 * See rlx-signal-listener.h. Every socket is a non-blocking GSocket with its
 * own GSource: one per listening socket (paused while an accept error backs
 * off), and per connection a read source and a deadline.
 */
#include "rlx-config.h"
#include "rlx-signal-listener.h"
#include "rlx-signal-upgrade.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>
#include <netinet/in.h>

#define ACCEPT_BURST      64
#define BACKOFF_MIN_MS    20
#define BACKOFF_MAX_MS    1000
#define LINGER_MS         1000
#define FD_RESERVE        64      /* descriptors left for the rest of the process */
#define EVENTS_PER_SECOND 5       /* refusal log lines; the rest are counted */

typedef struct {
  guint pending;
  guint total;       /* pending + upgraded */
} AddrCount;

typedef struct {
  RlxSignalListener *self;
  GSocket           *sock;
  char              *addr;
  GSource           *read_src;
  GSource           *deadline;
  GByteArray        *buf;
  gboolean           closing;  /* answered with an error: read and discard until EOF */
} Pending;

typedef struct {
  RlxSignalListener *self;
  GSocket           *sock;
  GSource           *src;
} Listen;

struct _RlxSignalListener
{
  RlxSignalListenerLimits    lim;
  RlxSignalListenerCallbacks cb;
  gpointer                   user_data;
  GMainContext              *context;
  GPtrArray                 *listens;   /* Listen* (owned) */
  GPtrArray                 *pending;   /* Pending* (owned), oldest first */
  GHashTable                *addrs;     /* key → AddrCount* (owned) */
  guint                      held;
  guint                      budget;    /* pending + held, from the descriptor limit */
  guint                      max_pending;
  GSource                   *retry;
  guint                      backoff_ms;
  gboolean                   failing;
  gint64                     events_second;
  guint                      events_n;
  guint                      events_hidden;
  guint16                    port;
};

guint64
rlx_signal_raise_fd_limit (void)
{
  struct rlimit rl;

  if (getrlimit (RLIMIT_NOFILE, &rl) != 0)
    return 1024;
  if (rl.rlim_cur < rl.rlim_max)
    {
      struct rlimit want = { rl.rlim_max, rl.rlim_max };
      if (setrlimit (RLIMIT_NOFILE, &want) == 0)
        rl.rlim_cur = rl.rlim_max;
    }
  return rl.rlim_cur == RLIM_INFINITY ? G_MAXUINT32 : (guint64) rl.rlim_cur;
}

static guint
count_open_fds (void)
{
  g_autoptr(GDir) d = g_dir_open ("/proc/self/fd", 0, NULL);
  guint n = 0;

  if (d == NULL)
    return FD_RESERVE;
  while (g_dir_read_name (d) != NULL)
    n++;
  return n;
}

char *
rlx_signal_address_key (GSocketAddress *sa)
{
  GInetAddress *ia;
  const guint8 *b;

  if (!G_IS_INET_SOCKET_ADDRESS (sa))
    return g_strdup ("?");
  ia = g_inet_socket_address_get_address (G_INET_SOCKET_ADDRESS (sa));
  if (g_inet_address_get_family (ia) == G_SOCKET_FAMILY_IPV4)
    return g_inet_address_to_string (ia);
  b = g_inet_address_to_bytes (ia);
  /* An IPv4-mapped IPv6 address is its IPv4 address. */
  if (memcmp (b, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) == 0)
    return g_strdup_printf ("%u.%u.%u.%u", b[12], b[13], b[14], b[15]);
  /* One host is handed a /64: count it as one address. */
  return g_strdup_printf ("%x:%x:%x:%x::/64", (b[0] << 8) | b[1], (b[2] << 8) | b[3],
                          (b[4] << 8) | b[5], (b[6] << 8) | b[7]);
}

static void
emit (RlxSignalListener *self, const char *what, const char *addr, const char *detail)
{
  if (self->cb.event)
    self->cb.event (what, addr, detail, self->user_data);
}

/* Refusals come in floods: a few lines a second, the rest counted. */
static void
emit_refused (RlxSignalListener *self, const char *addr, const char *why)
{
  gint64 second = g_get_monotonic_time () / G_USEC_PER_SEC;

  if (second != self->events_second)
    {
      self->events_second = second;
      self->events_n = 0;
    }
  if (++self->events_n > EVENTS_PER_SECOND)
    {
      self->events_hidden++;
      return;
    }
  if (self->events_hidden > 0)
    {
      g_autofree char *s = g_strdup_printf ("%s (and %u more refusals not shown)", why,
                                            self->events_hidden);
      self->events_hidden = 0;
      emit (self, "refused", addr, s);
      return;
    }
  emit (self, "refused", addr, why);
}

static AddrCount *
addr_get (RlxSignalListener *self, const char *addr)
{
  AddrCount *a = g_hash_table_lookup (self->addrs, addr);

  if (a == NULL)
    {
      a = g_new0 (AddrCount, 1);
      g_hash_table_insert (self->addrs, g_strdup (addr), a);
    }
  return a;
}

static void
addr_forget_if_unused (RlxSignalListener *self, const char *addr)
{
  AddrCount *a = g_hash_table_lookup (self->addrs, addr);

  if (a && a->total == 0)
    g_hash_table_remove (self->addrs, addr);
}

/* Best effort: a short answer into an empty socket buffer goes at once. */
static gboolean
send_all_now (GSocket *sock, const char *data, gsize len)
{
  while (len > 0)
    {
      gssize n = g_socket_send (sock, data, len, NULL, NULL);
      if (n <= 0)
        return FALSE;
      data += n;
      len -= (gsize) n;
    }
  return TRUE;
}

static void
answer_error (GSocket *sock, guint status, const char *body)
{
  gsize len;
  g_autofree char *resp = rlx_signal_upgrade_error (status, body, &len);

  send_all_now (sock, resp, len);
}

static void
pending_free (Pending *p)
{
  RlxSignalListener *self = p->self;
  AddrCount *a = g_hash_table_lookup (self->addrs, p->addr);

  if (p->read_src)
    g_source_destroy (p->read_src);
  g_clear_pointer (&p->read_src, g_source_unref);
  if (p->deadline)
    g_source_destroy (p->deadline);
  g_clear_pointer (&p->deadline, g_source_unref);
  if (p->sock)
    {
      g_socket_close (p->sock, NULL);
      g_clear_object (&p->sock);
      if (a)
        {
          a->pending--;
          a->total--;
          addr_forget_if_unused (self, p->addr);
        }
    }
  g_byte_array_unref (p->buf);
  g_free (p->addr);
  g_free (p);
}

static void
pending_drop (Pending *p)
{
  g_ptr_array_remove (p->self->pending, p);   /* frees p */
}

static gboolean
on_pending_deadline (gpointer user_data)
{
  Pending *p = user_data;

  if (!p->closing)
    {
      g_autofree char *why = g_strdup_printf ("no WebSocket upgrade within %u ms",
                                              p->self->lim.header_timeout_ms);
      emit (p->self, "dropped", p->addr, why);
    }
  pending_drop (p);
  return G_SOURCE_REMOVE;
}

static void
set_deadline (Pending *p, guint ms)
{
  if (p->deadline)
    g_source_destroy (p->deadline);
  g_clear_pointer (&p->deadline, g_source_unref);
  p->deadline = g_timeout_source_new (ms);
  g_source_set_callback (p->deadline, on_pending_deadline, p, NULL);
  g_source_attach (p->deadline, p->self->context);
}

/* Answered with an error: stop reading requests, let the answer reach the
 * client (closing with unread bytes would reset it), then close. */
static gboolean on_pending_readable (GSocket *sock, GIOCondition cond, gpointer user_data);

static void
pending_watch (Pending *p)
{
  p->read_src = g_socket_create_source (p->sock, G_IO_IN | G_IO_HUP | G_IO_ERR, NULL);
  g_source_set_callback (p->read_src, (GSourceFunc) (void (*)(void)) on_pending_readable, p, NULL);
  g_source_attach (p->read_src, p->self->context);
}

static void
pending_linger (Pending *p)
{
  p->closing = TRUE;
  g_socket_shutdown (p->sock, FALSE, TRUE, NULL);
  set_deadline (p, LINGER_MS);
  if (p->read_src == NULL)
    pending_watch (p);
}

static void
pending_upgrade (Pending *p, const RlxSignalUpgrade *u)
{
  RlxSignalListener *self = p->self;
  const char *refused = self->cb.admit ? self->cb.admit (p->addr, self->user_data) : NULL;
  g_autofree char *resp = NULL;
  g_autoptr(GSocketConnection) conn = NULL;
  g_autoptr(GBytes) leftover = NULL;
  g_autofree char *addr = NULL;
  AddrCount *a;
  gsize len;

  if (refused)
    {
      emit_refused (self, p->addr, refused);
      answer_error (p->sock, 503, refused);
      pending_linger (p);
      return;
    }
  resp = rlx_signal_upgrade_response (u, &len);
  if (!send_all_now (p->sock, resp, len))
    {
      emit (self, "dropped", p->addr, "could not write the upgrade response");
      pending_drop (p);
      return;
    }
  leftover = g_bytes_new (p->buf->data + u->header_len, p->buf->len - u->header_len);
  conn = g_socket_connection_factory_create_connection (p->sock);
  /* From here the connection is held, not pending: the owner releases it. */
  a = addr_get (self, p->addr);
  a->pending--;
  self->held++;
  g_clear_object (&p->sock);
  addr = g_strdup (p->addr);
  pending_drop (p);
  self->cb.upgraded (conn, leftover, addr, self->user_data);
}

static gboolean
on_pending_readable (GSocket *sock, GIOCondition cond, gpointer user_data)
{
  Pending *p = user_data;
  guint8 tmp[2048];
  g_autoptr(GError) error = NULL;
  RlxSignalUpgrade u;
  RlxSignalUpgradeVerdict v;
  gssize n;
  gsize room;

  room = p->closing ? sizeof tmp : MIN (sizeof tmp, RLX_SIGNAL_UPGRADE_MAX_HEADER - p->buf->len);
  n = g_socket_receive (sock, (char *) tmp, room, NULL, &error);
  if (n < 0 && g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
    return G_SOURCE_CONTINUE;
  if (n <= 0)
    {
      g_clear_pointer (&p->read_src, g_source_unref);
      pending_drop (p);
      return G_SOURCE_REMOVE;
    }
  if (p->closing)
    return G_SOURCE_CONTINUE;
  g_byte_array_append (p->buf, tmp, (guint) n);
  v = rlx_signal_upgrade_check (p->buf->data, p->buf->len, &u);
  if (v == RLX_SIGNAL_UPGRADE_INCOMPLETE)
    return G_SOURCE_CONTINUE;
  /* Either way this source is done; the pending goes to lingering or away. */
  g_clear_pointer (&p->read_src, g_source_unref);
  if (v == RLX_SIGNAL_UPGRADE_REFUSE)
    {
      gsize len;
      g_autofree char *resp = rlx_signal_upgrade_response (&u, &len);

      emit (p->self, "dropped", p->addr, u.why);
      send_all_now (p->sock, resp, len);
      rlx_signal_upgrade_clear (&u);
      pending_linger (p);   /* reads (and discards) on a new source */
      return G_SOURCE_REMOVE;
    }
  pending_upgrade (p, &u);
  rlx_signal_upgrade_clear (&u);
  return G_SOURCE_REMOVE;
}

/* The oldest pending connection of the address with the most of them, if
 * it holds more than @addr would after one more. */
static Pending *
pick_victim (RlxSignalListener *self, const char *addr)
{
  AddrCount *mine = g_hash_table_lookup (self->addrs, addr);
  guint have = mine ? mine->pending : 0;
  Pending *best = NULL;
  guint best_n = have + 1;

  for (guint i = 0; i < self->pending->len; i++)
    {
      Pending *p = self->pending->pdata[i];
      AddrCount *a = g_hash_table_lookup (self->addrs, p->addr);
      if (a->pending > best_n)
        {
          best = p;
          best_n = a->pending;
        }
    }
  return best;
}

static const char *
admit_pending (RlxSignalListener *self, const char *addr)
{
  AddrCount *a = g_hash_table_lookup (self->addrs, addr);

  if (a && a->total >= self->lim.max_per_addr)
    return "too many connections from your address";
  if (a && a->pending >= self->lim.max_pending_per_addr)
    return "too many connections from your address still to finish their upgrade";
  if (self->pending->len >= self->max_pending || self->pending->len + self->held >= self->budget)
    {
      Pending *victim = pick_victim (self, addr);
      if (victim == NULL)
        return "this signalling server is full; try again later";
      emit_refused (self, victim->addr, "evicted: its address holds the most connections "
                                        "still to finish their upgrade");
      pending_drop (victim);
    }
  return NULL;
}

static void
take_socket (RlxSignalListener *self, GSocket *sock)
{
  g_autoptr(GSocketAddress) sa = g_socket_get_remote_address (sock, NULL);
  g_autofree char *addr = sa ? rlx_signal_address_key (sa) : g_strdup ("?");
  const char *refused = admit_pending (self, addr);
  AddrCount *a;
  Pending *p;

  if (refused)
    {
      emit_refused (self, addr, refused);
      answer_error (sock, 503, refused);
      g_socket_close (sock, NULL);
      return;
    }
  a = addr_get (self, addr);
  a->pending++;
  a->total++;
  p = g_new0 (Pending, 1);
  p->self = self;
  p->sock = g_object_ref (sock);
  p->addr = g_steal_pointer (&addr);
  p->buf = g_byte_array_new ();
  g_socket_set_blocking (sock, FALSE);
  pending_watch (p);
  set_deadline (p, self->lim.header_timeout_ms);
  g_ptr_array_add (self->pending, p);
}

static gboolean on_listen_readable (GSocket *sock, GIOCondition cond, gpointer user_data);

static void
listens_watch (RlxSignalListener *self, gboolean on)
{
  for (guint i = 0; i < self->listens->len; i++)
    {
      Listen *l = self->listens->pdata[i];
      if (l->src)
        g_source_destroy (l->src);
      g_clear_pointer (&l->src, g_source_unref);
      if (on)
        {
          l->src = g_socket_create_source (l->sock, G_IO_IN, NULL);
          g_source_set_callback (l->src, (GSourceFunc) (void (*)(void)) on_listen_readable, l, NULL);
          g_source_attach (l->src, self->context);
        }
    }
}

static gboolean
on_retry (gpointer user_data)
{
  RlxSignalListener *self = user_data;

  g_clear_pointer (&self->retry, g_source_unref);
  listens_watch (self, TRUE);
  return G_SOURCE_REMOVE;
}

/* accept() failed, most likely for want of descriptors: the connection
 * stays in the backlog and the socket stays readable, so stop watching for
 * a while instead of spinning, or giving up as SoupServer's listener does. */
static void
back_off (RlxSignalListener *self, const GError *error)
{
  self->backoff_ms = CLAMP (self->backoff_ms * 2, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
  if (!self->failing)
    {
      g_autofree char *why = g_strdup_printf ("%s; retrying with a backoff of up to %u ms",
                                              error->message, BACKOFF_MAX_MS);
      self->failing = TRUE;
      emit (self, "accept-failed", "", why);
    }
  /* Out of descriptors with connections still pending: give one back, from
   * the address that holds the most. */
  if (self->pending->len > 0)
    {
      Pending *victim = pick_victim (self, "");
      if (victim)
        pending_drop (victim);
    }
  listens_watch (self, FALSE);
  self->retry = g_timeout_source_new (self->backoff_ms);
  g_source_set_callback (self->retry, on_retry, self, NULL);
  g_source_attach (self->retry, self->context);
}

static gboolean
on_listen_readable (GSocket *sock, GIOCondition cond, gpointer user_data)
{
  Listen *l = user_data;
  RlxSignalListener *self = l->self;

  for (guint i = 0; i < ACCEPT_BURST; i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(GSocket) s = g_socket_accept (sock, NULL, &error);

      if (s == NULL)
        {
          if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
            return G_SOURCE_CONTINUE;
          back_off (self, error);   /* destroys this source */
          return G_SOURCE_REMOVE;
        }
      if (self->failing)
        {
          self->failing = FALSE;
          emit (self, "accepting", "", "accepting connections again");
        }
      self->backoff_ms = 0;
      take_socket (self, s);
    }
  return G_SOURCE_CONTINUE;
}

static void
listen_free (Listen *l)
{
  if (l->src)
    g_source_destroy (l->src);
  g_clear_pointer (&l->src, g_source_unref);
  g_socket_close (l->sock, NULL);
  g_object_unref (l->sock);
  g_free (l);
}

RlxSignalListener *
rlx_signal_listener_new (const RlxSignalListenerLimits *limits,
                         const RlxSignalListenerCallbacks *cb, gpointer user_data)
{
  RlxSignalListener *self = g_new0 (RlxSignalListener, 1);

  g_return_val_if_fail (cb != NULL && cb->upgraded != NULL, NULL);
  if (limits)
    self->lim = *limits;
#define DEF(f, v) if (self->lim.f == 0) self->lim.f = (v)
  DEF (max_pending, 256);
  DEF (max_pending_per_addr, 16);
  DEF (max_per_addr, 64);
  DEF (header_timeout_ms, 5000);
  DEF (max_held, 1024);
#undef DEF
  self->cb = *cb;
  self->user_data = user_data;
  self->context = g_main_context_ref_thread_default ();
  self->listens = g_ptr_array_new_with_free_func ((GDestroyNotify) listen_free);
  self->pending = g_ptr_array_new_with_free_func ((GDestroyNotify) pending_free);
  self->addrs = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  return self;
}

void
rlx_signal_listener_free (RlxSignalListener *self)
{
  if (self == NULL)
    return;
  if (self->retry)
    g_source_destroy (self->retry);
  g_clear_pointer (&self->retry, g_source_unref);
  g_ptr_array_unref (self->listens);
  g_ptr_array_unref (self->pending);
  g_hash_table_unref (self->addrs);
  g_main_context_unref (self->context);
  g_free (self);
}

static gboolean
listen_one (RlxSignalListener *self, GInetAddress *ia, guint16 port, gboolean v6only,
            GError **error)
{
  g_autoptr(GSocket) sock = NULL;
  g_autoptr(GSocketAddress) sa = NULL;
  g_autoptr(GSocketAddress) bound = NULL;
  Listen *l;

  sock = g_socket_new (g_inet_address_get_family (ia), G_SOCKET_TYPE_STREAM,
                       G_SOCKET_PROTOCOL_TCP, error);
  if (sock == NULL)
    return FALSE;
  if (v6only && !g_socket_set_option (sock, IPPROTO_IPV6, IPV6_V6ONLY, 1, error))
    return FALSE;
  sa = g_inet_socket_address_new (ia, port);
  g_socket_set_blocking (sock, FALSE);
  g_socket_set_listen_backlog (sock, 128);
  if (!g_socket_bind (sock, sa, TRUE, error) || !g_socket_listen (sock, error))
    return FALSE;
  bound = g_socket_get_local_address (sock, error);
  if (bound == NULL)
    return FALSE;
  self->port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
  l = g_new0 (Listen, 1);
  l->self = self;
  l->sock = g_steal_pointer (&sock);
  g_ptr_array_add (self->listens, l);
  return TRUE;
}

gboolean
rlx_signal_listener_listen (RlxSignalListener *self, const char *address, guint16 port,
                            GError **error)
{
  guint64 fds;
  guint64 open_now, avail;
  guint budget;

  g_return_val_if_fail (self->listens->len == 0, FALSE);
  if (address)
    {
      g_autoptr(GInetAddress) ia = g_inet_address_new_from_string (address);
      if (ia == NULL)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "'%s' is not a numeric IP address to listen on", address);
          return FALSE;
        }
      if (!listen_one (self, ia, port, FALSE, error))
        return FALSE;
    }
  else
    {
      g_autoptr(GInetAddress) any4 = g_inet_address_new_any (G_SOCKET_FAMILY_IPV4);
      g_autoptr(GInetAddress) any6 = g_inet_address_new_any (G_SOCKET_FAMILY_IPV6);
      g_autoptr(GError) v6_error = NULL;

      if (!listen_one (self, any4, port, FALSE, error))
        return FALSE;
      /* IPv6 where the host has it; IPv4 alone is still a server. */
      if (!listen_one (self, any6, self->port, TRUE, &v6_error))
        g_debug ("signalling: no IPv6 listener: %s", v6_error->message);
    }
  /* Descriptors: as many as we may have, then caps that fit in them. */
  fds = rlx_signal_raise_fd_limit ();
  open_now = count_open_fds ();
  avail = fds > open_now ? fds - open_now : 0;
  budget = (guint) MIN (avail > 2 * FD_RESERVE ? avail - FD_RESERVE : MAX (avail / 2, 8), G_MAXUINT32);
  self->budget = MIN (budget, self->lim.max_pending + self->lim.max_held);
  self->max_pending = MIN (self->lim.max_pending, MAX (4u, self->budget / 2));
  listens_watch (self, TRUE);
  return TRUE;
}

guint16
rlx_signal_listener_get_port (RlxSignalListener *self)
{
  return self->port;
}

void
rlx_signal_listener_release (RlxSignalListener *self, const char *addr)
{
  AddrCount *a = g_hash_table_lookup (self->addrs, addr);

  g_return_if_fail (a != NULL && a->total > 0 && self->held > 0);
  a->total--;
  self->held--;
  addr_forget_if_unused (self, addr);
}

guint
rlx_signal_listener_count (RlxSignalListener *self, const char *addr)
{
  AddrCount *a = g_hash_table_lookup (self->addrs, addr);

  return a ? a->total : 0;
}

guint
rlx_signal_listener_get_n_pending (RlxSignalListener *self)
{
  return self->pending->len;
}
