/* rlx-ice-servers.c — STUN and TURN servers as numeric addresses
 * (rlx-ice-servers.h) */
#include "rlx-config.h"
#include "rlx-ice-servers.h"

struct _RlxIceServers {
  GObject             *owner;      /* not referenced: it owns us */
  GCancellable        *cancel;
  RlxIceServersFailed  failed;
  RlxIceServersReady   ready;
  guint                pending;    /* lookups in flight, + 1 while resolve runs */
  char                *stun_ip;
  guint16              stun_port;
  char                *turn_ip;
  guint16              turn_port;
};

typedef struct {
  RlxIceServers *self;
  GObject       *owner;            /* referenced while the lookup is in flight */
  gboolean       is_turn;
  guint16        port;
  char          *spec;
} Lookup;

RlxIceServers *
rlx_ice_servers_new (GObject *owner, GCancellable *cancel, RlxIceServersFailed failed,
                     RlxIceServersReady ready)
{
  RlxIceServers *self = g_new0 (RlxIceServers, 1);

  self->owner = owner;
  self->cancel = g_object_ref (cancel);
  self->failed = failed;
  self->ready = ready;
  return self;
}

void
rlx_ice_servers_free (RlxIceServers *self)
{
  if (self == NULL)
    return;
  g_clear_object (&self->cancel);
  g_free (self->stun_ip);
  g_free (self->turn_ip);
  g_free (self);
}

static void
set_server (RlxIceServers *self, gboolean is_turn, const char *ip, guint16 port)
{
  if (is_turn)
    {
      g_free (self->turn_ip);
      self->turn_ip = g_strdup (ip);
      self->turn_port = port;
    }
  else
    {
      g_free (self->stun_ip);
      self->stun_ip = g_strdup (ip);
      self->stun_port = port;
    }
}

static void
lookup_done (RlxIceServers *self)
{
  if (--self->pending == 0)
    self->ready (self->owner);
}

static void
on_resolved (GObject *source, GAsyncResult *res, gpointer user_data)
{
  Lookup *l = user_data;
  RlxIceServers *self = l->self;
  g_autoptr(GError) error = NULL;
  GList *addrs = g_resolver_lookup_by_name_finish (G_RESOLVER (source), res, &error);

  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    goto out;
  if (addrs == NULL)
    self->failed (self->owner, l->spec, error ? error->message : "no address");
  else
    {
      /* libnice wants a numeric address; prefer IPv4. */
      GInetAddress *pick = addrs->data;
      for (GList *a = addrs; a; a = a->next)
        if (g_inet_address_get_family (a->data) == G_SOCKET_FAMILY_IPV4)
          {
            pick = a->data;
            break;
          }
      {
        g_autofree char *ip = g_inet_address_to_string (pick);
        set_server (self, l->is_turn, ip, l->port);
      }
    }
  g_resolver_free_addresses (addrs);
  lookup_done (self);
out:
  /* last: the owner (and with it this) may go with it */
  g_object_unref (l->owner);
  g_free (l->spec);
  g_free (l);
}

static gboolean
resolve_one (RlxIceServers *self, const char *spec, gboolean is_turn, GError **error)
{
  g_autoptr(GSocketConnectable) c = NULL;
  const char *host;
  guint16 port;
  Lookup *l;

  c = g_network_address_parse (spec, 3478, error);
  if (c == NULL)
    {
      g_prefix_error (error, "%s server '%s': ", is_turn ? "TURN" : "STUN", spec);
      return FALSE;
    }
  host = g_network_address_get_hostname (G_NETWORK_ADDRESS (c));
  port = g_network_address_get_port (G_NETWORK_ADDRESS (c));
  if (g_hostname_is_ip_address (host))
    {
      set_server (self, is_turn, host, port);
      return TRUE;
    }
  l = g_new0 (Lookup, 1);
  l->self = self;
  l->owner = g_object_ref (self->owner);
  l->is_turn = is_turn;
  l->port = port;
  l->spec = g_strdup (spec);
  self->pending++;
  g_resolver_lookup_by_name_async (g_resolver_get_default (), host, self->cancel, on_resolved, l);
  return TRUE;
}

gboolean
rlx_ice_servers_resolve (RlxIceServers *self, const char *stun, const char *turn, GError **error)
{
  self->pending = 1;
  if ((stun && !resolve_one (self, stun, FALSE, error)) ||
      (turn && !resolve_one (self, turn, TRUE, error)))
    return FALSE;
  lookup_done (self);
  return TRUE;
}

const char *rlx_ice_servers_get_stun_ip (RlxIceServers *self) { return self->stun_ip; }
guint16 rlx_ice_servers_get_stun_port (RlxIceServers *self) { return self->stun_port; }
const char *rlx_ice_servers_get_turn_ip (RlxIceServers *self) { return self->turn_ip; }
guint16 rlx_ice_servers_get_turn_port (RlxIceServers *self) { return self->turn_port; }
