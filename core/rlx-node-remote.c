/* rlx-node-remote.c — the remote side of a node (see rlx-node-remote.h)
 *
 * Moved here from tools/cmd-remote.c so the app's node and `rlx-rank join`
 * share it; the option parsing stayed in tools/.
 */
#include "rlx-config.h"
#include "core/rlx-sources.h"
#include "rlx-node-remote.h"
#include "core/p2p/rlx-identity.h"
#include "core/p2p/rlx-remote-node.h"
#include "core/wire/rlx-wire.h"

#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <gnutls/crypto.h>

#define KEY_FILE        "invite-key"
/* A joining node that reaches no member in this time gives up: a node given
 * a cohort to join never founds one. */
#define JOIN_TIMEOUT_MS 30000

struct _RlxNodeRemote
{
  /* configuration (owned copies) */
  RlxInvite          *invite;          /* joining: parsed; hosting: after prepare */
  gboolean            serve;
  guint16             host_port;
  char               *host_address;
  char               *advertise;
  char               *cohort;
  char               *stun;
  char               *turn;
  char               *turn_user;
  char               *turn_password;
  gboolean            relay_only;
  gsize               quic_payload;
  RlxQuicCc           quic_cc;
  guint               connect_timeout_ms;

  /* prepared */
  RlxIdentity        *identity;

  /* running */
  RlxRemoteNode      *node;
  gboolean            coord_started;
  guint               join_timeout_id;
  char               *join_trouble;    /* the last reason a join attempt failed */
  RlxCoordinator     *coord;
  RlxLocalBus        *bus;
  RlxNodeRemoteHooks  hooks;
  gpointer            user_data;
};

/* ── helpers ────────────────────────────────────────────────────────────── */

gboolean
rlx_node_remote_is_wildcard (const char *address)
{
  return address == NULL || g_str_equal (address, "0.0.0.0") || g_str_equal (address, "::");
}

char *
rlx_node_remote_guess_host (void)
{
  struct ifaddrs *ifa = NULL;
  char *out = NULL;

  if (getifaddrs (&ifa) == 0)
    {
      for (struct ifaddrs *i = ifa; i && out == NULL; i = i->ifa_next)
        {
          char buf[INET_ADDRSTRLEN];
          if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
            continue;
          if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0)
            continue;
          if (inet_ntop (AF_INET, &((struct sockaddr_in *) i->ifa_addr)->sin_addr, buf, sizeof buf))
            out = g_strdup (buf);
        }
      freeifaddrs (ifa);
    }
  return out ? out : g_strdup (g_get_host_name ());
}

gboolean
rlx_node_remote_cohort_key (const char *cohort, guint8 key[RLX_INVITE_KEY_LEN], GError **error)
{
  g_autofree char *dir = g_build_filename (g_get_user_data_dir (), "rlx-cluster", cohort, NULL);
  g_autofree char *path = g_build_filename (dir, KEY_FILE, NULL);
  g_autofree char *text = NULL;
  g_autofree char *s = NULL;

  if (g_file_get_contents (path, &text, NULL, NULL))
    {
      g_autofree char *probe = g_strdup_printf ("rlx://h:1/%s#%s", cohort, g_strstrip (text));
      g_autoptr(RlxInvite) inv = rlx_invite_parse (probe, NULL);
      if (inv)
        {
          memcpy (key, inv->key, RLX_INVITE_KEY_LEN);
          return TRUE;
        }
      g_warning ("%s does not hold a cohort key; a new one is drawn", path);
    }
  if (gnutls_rnd (GNUTLS_RND_KEY, key, RLX_INVITE_KEY_LEN) < 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "cannot draw a random cohort key");
      return FALSE;
    }
  if (g_mkdir_with_parents (dir, 0700) != 0)
    {
      int e = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (e), "cannot create %s: %s", dir,
                   g_strerror (e));
      return FALSE;
    }
  s = rlx_invite_key_to_string (key);
  return g_file_set_contents_full (path, s, -1, G_FILE_SET_CONTENTS_CONSISTENT, 0600, error);
}

/* ── configuration ──────────────────────────────────────────────────────── */

RlxNodeRemote *
rlx_node_remote_new (const RlxNodeRemoteConfig *config, GError **error)
{
  g_autoptr(RlxNodeRemote) self = g_new0 (RlxNodeRemote, 1);
  const RlxNodeRemoteTuning *t = config->tuning;
  gboolean joining = config->invite != NULL && *config->invite != '\0';

  if (joining && config->host_port != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "give a port to found a cohort others can join, or an invite to join one, "
                   "not both");
      return NULL;
    }
  if (!joining && config->host_port == 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "neither an invite to join nor a port to serve a cohort on");
      return NULL;
    }
  if (t && (t->turn_user || t->turn_password || t->relay_only) && t->turn == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "a TURN user, password or relay-only mode needs a TURN server (HOST[:PORT])");
      return NULL;
    }
  if (joining)
    {
      self->invite = rlx_invite_parse (config->invite, error);
      if (self->invite == NULL)
        return NULL;
      if (config->cohort && !g_str_equal (config->cohort, self->invite->cohort))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "the cohort %s contradicts the invite's cohort %s (leave the cohort out)",
                       config->cohort, self->invite->cohort);
          return NULL;
        }
      self->cohort = g_strdup (self->invite->cohort);
    }
  else
    {
      self->cohort = g_strdup (config->cohort ? config->cohort : "default");
      if (!rlx_invite_cohort_is_valid (self->cohort))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "“%s” is not a usable cohort name: use 1 to 64 of A–Z a–z 0–9 . _ -",
                       self->cohort);
          return NULL;
        }
      if (config->host_address && !g_hostname_is_ip_address (config->host_address))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "“%s”: the address to listen on must be numeric (an IP of this machine, "
                       "or 0.0.0.0 for all)", config->host_address);
          return NULL;
        }
      if (config->advertise && !rlx_invite_host_is_valid (config->advertise))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "“%s” is neither a DNS name nor an IP address: the invite cannot "
                       "name it", config->advertise);
          return NULL;
        }
      self->serve = TRUE;
      self->host_port = config->host_port;
      self->host_address = g_strdup (config->host_address);
      self->advertise = g_strdup (config->advertise);
    }
  if (t)
    {
      self->stun = g_strdup (t->stun);
      self->turn = g_strdup (t->turn);
      self->turn_user = g_strdup (t->turn_user);
      self->turn_password = g_strdup (t->turn_password);
      self->relay_only = t->relay_only;
      self->quic_payload = t->quic_payload;
      self->quic_cc = t->quic_cc;
      self->connect_timeout_ms = t->connect_timeout_ms;
    }
  return g_steal_pointer (&self);
}

void
rlx_node_remote_free (RlxNodeRemote *self)
{
  if (self == NULL)
    return;
  rlx_node_remote_stop (self);
  g_clear_pointer (&self->invite, rlx_invite_free);
  g_clear_object (&self->identity);
  g_free (self->host_address);
  g_free (self->advertise);
  g_free (self->cohort);
  g_free (self->stun);
  g_free (self->turn);
  g_free (self->turn_user);
  g_free (self->turn_password);
  g_free (self);
}

gboolean
rlx_node_remote_prepare (RlxNodeRemote *self, GError **error)
{
  self->identity = rlx_identity_load_or_create (NULL, error);
  if (self->identity == NULL)
    return FALSE;
  if (self->serve)
    {
      guint8 key[RLX_INVITE_KEY_LEN];
      g_autofree char *host = self->advertise ? g_strdup (self->advertise)
                              : !rlx_node_remote_is_wildcard (self->host_address)
                                  ? g_strdup (self->host_address)
                                  : rlx_node_remote_guess_host ();

      if (!rlx_node_remote_cohort_key (self->cohort, key, error))
        return FALSE;
      self->invite = rlx_invite_new_with_key (host, self->host_port, self->cohort, key, error);
      gnutls_memset (key, 0, sizeof key);
      if (self->invite == NULL)
        return FALSE;
    }
  return TRUE;
}

/* ── running ────────────────────────────────────────────────────────────── */

gboolean
rlx_node_remote_holds_start (RlxNodeRemote *self)
{
  return !self->serve;
}

gboolean
rlx_node_remote_is_hosting (RlxNodeRemote *self)
{
  return self->serve;
}

const char *
rlx_node_remote_get_cohort (RlxNodeRemote *self)
{
  return self->cohort;
}

char *
rlx_node_remote_dup_invite (RlxNodeRemote *self)
{
  return self->invite ? rlx_invite_to_string (self->invite) : NULL;
}

static void
emit_event (RlxNodeRemote *self, RlxEvent *event)
{
  if (self->hooks.event)
    self->hooks.event (event, self->user_data);
}

static void
start_coordinator (RlxNodeRemote *self)
{
  if (self->coord_started || self->coord == NULL || !rlx_node_remote_holds_start (self))
    return;
  self->coord_started = TRUE;
  g_clear_handle_id (&self->join_timeout_id, rlx_source_remove);
  g_clear_pointer (&self->join_trouble, g_free);
  rlx_coordinator_start (self->coord);
}

static gboolean
on_join_timeout (gpointer user_data)
{
  RlxNodeRemote *self = user_data;
  g_autofree char *message = NULL;

  self->join_timeout_id = 0;
  if (self->coord_started)
    return G_SOURCE_REMOVE;
  message = g_strdup_printf ("could not join the cohort %s at %s:%u: no member could be reached "
                             "within %d s (%s); nothing was founded — check the invite, and that "
                             "a node of that cohort runs there and is reachable from here",
                             self->invite->cohort, self->invite->host, self->invite->port,
                             JOIN_TIMEOUT_MS / 1000,
                             self->join_trouble ? self->join_trouble : "no answer");
  if (self->hooks.fail)
    self->hooks.fail (message, self->user_data);
  return G_SOURCE_REMOVE;
}

static gboolean
skip_local (const char *peer_id, gpointer user_data)
{
  RlxNodeRemote *self = user_data;

  return self->bus && rlx_local_bus_get_link (self->bus, peer_id) != NULL;
}

static void
on_remote_link_added (RlxRemoteNode *node, RlxLink *link, const char *peer_id, gpointer user_data)
{
  RlxNodeRemote *self = user_data;

  if (skip_local (peer_id, self))
    {
      rlx_remote_node_forget_peer (node, peer_id);
      return;
    }
  rlx_coordinator_add_link (self->coord, link);
  if (self->hooks.link_added)
    self->hooks.link_added (link, peer_id, self->user_data);
  start_coordinator (self);
}

void
rlx_node_remote_local_link_added (RlxNodeRemote *self, const char *peer_id)
{
  if (self->node)
    rlx_remote_node_forget_peer (self->node, peer_id);
}

void
rlx_node_remote_member_linked (RlxNodeRemote *self)
{
  start_coordinator (self);
}

static void
on_remote_event (RlxRemoteNode *node, RlxEvent *event, gpointer user_data)
{
  RlxNodeRemote *self = user_data;
  const char *trouble = NULL;

  emit_event (self, event);
  if (event->kind == RLX_EVENT_SIGNALLING)
    trouble = event->u.signalling.reason;
  else if (event->kind == RLX_EVENT_LINK_FAILED)
    trouble = event->u.link_lost.reason;
  if (!self->coord_started && trouble)
    {
      g_free (self->join_trouble);
      self->join_trouble = g_strdup (trouble);
    }
  /* Alone in the room of a standalone server: nobody to wait for, this
   * node founds the cohort — as it joins, or once every node the room had
   * left ("empty"). (Alone on the founder's own server, the key is wrong:
   * the remote node refuses it after its deadline.) */
  if (event->kind == RLX_EVENT_SIGNALLING &&
      (g_strcmp0 (event->u.signalling.state, "joined") == 0 ||
       g_strcmp0 (event->u.signalling.state, "empty") == 0) && event->u.signalling.has_room &&
      event->u.signalling.peers == 0 && !event->u.signalling.hosted)
    start_coordinator (self);
}

/* The coordinator wants its peers (a leader with nodes it has no link to,
 * every 2 s; a member missing members): the remote side looks too, as the
 * local bus rescans (docs/PROTOCOL.md, "Split and merge"). */
static void
on_discover (RlxCoordinator *coord, gpointer user_data)
{
  RlxNodeRemote *self = user_data;

  if (self->node)
    rlx_remote_node_rescan (self->node);
}

static void
on_remote_refused (RlxRemoteNode *node, const GError *error, gpointer user_data)
{
  RlxNodeRemote *self = user_data;

  if (self->hooks.fail)
    self->hooks.fail (error->message, self->user_data);
}

gboolean
rlx_node_remote_start (RlxNodeRemote *self, RlxCoordinator *coord, RlxLocalBus *bus,
                       const char *node_id, const RlxNodeRemoteHooks *hooks, gpointer user_data,
                       GError **error)
{
  RlxRemoteNodeConfig c = { 0 };

  g_return_val_if_fail (self->identity != NULL && self->invite != NULL, FALSE);
  g_return_val_if_fail (self->node == NULL, FALSE);

  self->coord = coord;
  self->bus = bus;
  self->hooks = *hooks;
  self->user_data = user_data;
  c.invite = self->invite;
  c.node_id = node_id;
  c.identity = self->identity;
  c.serve = self->serve;
  c.listen_address = self->host_address;
  c.stun = self->stun;
  c.turn = self->turn;
  c.turn_user = self->turn_user;
  c.turn_password = self->turn_password;
  c.relay_only = self->relay_only;
  c.max_udp_payload = self->quic_payload;
  /* What the cohort's parser takes (rlx_msg_parse refuses larger frames),
   * so a peer cannot make this node hold more of a frame it never ends. */
  c.max_frame = RLX_WIRE_DEFAULT_MAX_FRAME;
  c.cc = self->quic_cc;
  c.connect_timeout_ms = self->connect_timeout_ms;
  self->node = rlx_remote_node_new (&c, error);
  if (self->node == NULL)
    return FALSE;
  rlx_remote_node_set_skip_func (self->node, skip_local, self);
  g_signal_connect (self->node, "link-added", G_CALLBACK (on_remote_link_added), self);
  g_signal_connect (self->node, "event", G_CALLBACK (on_remote_event), self);
  g_signal_connect (self->node, "refused", G_CALLBACK (on_remote_refused), self);
  if (!rlx_remote_node_start (self->node, error))
    {
      rlx_node_remote_stop (self);
      return FALSE;
    }
  g_signal_connect (coord, "discover", G_CALLBACK (on_discover), self);
  if (rlx_node_remote_holds_start (self))
    self->join_timeout_id = rlx_timeout_add (JOIN_TIMEOUT_MS, on_join_timeout, self);
  if (self->serve)
    {
      g_autoptr(RlxEvent) e = rlx_event_new (RLX_EVENT_INVITE);
      e->u.invite.invite = rlx_invite_to_string (self->invite);
      e->u.invite.cohort = g_strdup (self->invite->cohort);
      e->u.invite.port = rlx_remote_node_get_port (self->node);
      e->u.invite.fingerprint = g_strdup (rlx_identity_get_fingerprint (self->identity));
      emit_event (self, e);
    }
  return TRUE;
}

void
rlx_node_remote_stop (RlxNodeRemote *self)
{
  g_clear_handle_id (&self->join_timeout_id, rlx_source_remove);
  g_clear_pointer (&self->join_trouble, g_free);
  self->bus = NULL;
  if (self->coord)
    g_signal_handlers_disconnect_by_func (self->coord, on_discover, self);
  self->coord = NULL;
  if (self->node)
    {
      g_signal_handlers_disconnect_by_data (self->node, self);
      rlx_remote_node_stop (self->node);
      g_clear_object (&self->node);
    }
}
