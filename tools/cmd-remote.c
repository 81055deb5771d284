/* cmd-remote.c — rlx-rank signal, and the remote side of rlx-rank join
 *
 *   signal  serves signalling for cohorts across machines (a standalone
 *           RlxSignalServer) until interrupted. With --cohort it also prints
 *           an invite for that cohort (a fresh key, kept in
 *           $XDG_DATA_HOME/rlx-cluster/NAME/invite-key), so every node can
 *           join with `rlx-rank join INVITE` and none has to serve.
 *   join    see cmd-remote.h: --host founds a reachable cohort, INVITE joins
 *           one; the links RlxRemoteNode makes go to the coordinator.
 */
#include "rlx-config.h"
#include "rlx-cli.h"
#include "cmd-remote.h"
#include "core/p2p/rlx-identity.h"
#include "core/p2p/rlx-invite.h"
#include "core/p2p/rlx-remote-node.h"
#include "core/p2p/rlx-signal-server.h"

#include <errno.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <glib-unix.h>
#include <gnutls/crypto.h>

#define KEY_FILE        "invite-key"
/* A joining node that reaches no member in this time starts anyway. */
#define JOIN_TIMEOUT_MS 30000

/* ── shared helpers ─────────────────────────────────────────────────────── */

/* "[ADDR:]PORT" → address (NULL: every address) and port. */
static gboolean
parse_host_port (const char *text, char **address, guint16 *port, GError **error)
{
  const char *colon;
  g_autofree char *addr = NULL;
  guint64 p;

  if (text[0] == '[')
    {
      const char *close = strchr (text, ']');
      if (close == NULL || close[1] != ':')
        goto bad;
      addr = g_strndup (text + 1, (gsize) (close - text - 1));
      colon = close + 1;
    }
  else if ((colon = strrchr (text, ':')) != NULL)
    addr = g_strndup (text, (gsize) (colon - text));
  else
    colon = text - 1;
  if (!g_ascii_string_to_unsigned (colon + 1, 10, 1, 65535, &p, NULL))
    goto bad;
  if (addr && !g_hostname_is_ip_address (addr))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "'%s': the address to listen on must be numeric (an IP of this machine, "
                   "or 0.0.0.0 for all)", text);
      return FALSE;
    }
  *address = g_steal_pointer (&addr);
  *port = (guint16) p;
  return TRUE;
bad:
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
               "'%s' is not [ADDR:]PORT (for example 7000, 0.0.0.0:7000 or [::]:7000)", text);
  return FALSE;
}

static gboolean
is_wildcard (const char *addr)
{
  return addr == NULL || g_str_equal (addr, "0.0.0.0") || g_str_equal (addr, "::");
}

/* An address others can probably reach: the first IPv4 of an interface that
 * is up and not loopback; else the host name. */
static char *
guess_advertised_host (void)
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
          if (g_str_equal (i->ifa_name, "lo"))
            continue;
          if (inet_ntop (AF_INET, &((struct sockaddr_in *) i->ifa_addr)->sin_addr, buf, sizeof buf))
            out = g_strdup (buf);
        }
      freeifaddrs (ifa);
    }
  return out ? out : g_strdup (g_get_host_name ());
}

/* The cohort's key: kept under $XDG_DATA_HOME/rlx-cluster/NAME so a founder
 * that restarts prints the same invite. */
static gboolean
cohort_key (const char *cohort, guint8 key[RLX_INVITE_KEY_LEN], GError **error)
{
  g_autofree char *dir = g_build_filename (g_get_user_data_dir (), "rlx-cluster", cohort, NULL);
  g_autofree char *path = g_build_filename (dir, KEY_FILE, NULL);
  g_autofree char *text = NULL;
  g_autofree char *s = NULL;
  g_autofree char *probe = NULL;
  g_autoptr(RlxInvite) inv = NULL;

  if (g_file_get_contents (path, &text, NULL, NULL))
    {
      probe = g_strdup_printf ("rlx://h:1/%s#%s", cohort, g_strstrip (text));
      inv = rlx_invite_parse (probe, NULL);
      if (inv)
        {
          memcpy (key, inv->key, RLX_INVITE_KEY_LEN);
          return TRUE;
        }
      g_printerr ("rlx-rank: %s does not hold a key; a new one is drawn\n", path);
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

/* ── rlx-rank signal ─────────────────────────────────────────────────────── */

typedef struct {
  gboolean   json;
  GMainLoop *loop;
} SignalState;

static void
print_json (JsonObject *o)
{
  g_autoptr(JsonNode) node = json_node_init_object (json_node_alloc (), o);
  g_autofree char *line = json_to_string (node, FALSE);

  puts (line);
  fflush (stdout);
}

static void
on_server_event (RlxSignalServer *server, const char *what, const char *room, const char *node,
                 const char *detail, gpointer user_data)
{
  SignalState *st = user_data;

  if (st->json)
    {
      g_autoptr(JsonObject) o = json_object_new ();
      json_object_set_string_member (o, "event", what);
      json_object_set_string_member (o, "room", room);
      json_object_set_string_member (o, "node", node);
      json_object_set_string_member (o, "detail", detail);
      print_json (o);
    }
  else
    {
      printf ("%s %s%s%s%s%s\n", what, node, *room ? " in " : "", room, *detail ? ": " : "", detail);
      fflush (stdout);
    }
}

static gboolean
on_quit_signal (gpointer user_data)
{
  g_main_loop_quit (((SignalState *) user_data)->loop);
  return G_SOURCE_CONTINUE;
}

int
rlx_cmd_signal (int argc, char **argv)
{
  const char *sub = "signal";
  g_autofree char *port_s = NULL, *address = NULL, *cohort = NULL, *advertise = NULL;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "port", 0, 0, G_OPTION_ARG_STRING, &port_s, "the port to serve on (required)", "P" },
    { "address", 0, 0, G_OPTION_ARG_STRING, &address, "a numeric address to listen on (default: all)", "ADDR" },
    { "cohort", 0, 0, G_OPTION_ARG_STRING, &cohort, "also print an invite for this cohort", "NAME" },
    { "advertise", 0, 0, G_OPTION_ARG_STRING, &advertise, "the host name or address put in the invite", "HOST" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "one JSON object per line per event", NULL },
    { NULL }
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— serve signalling for cohorts across machines");
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxSignalServer) server = NULL;
  g_autoptr(GMainLoop) loop = NULL;
  SignalState st = { 0 };
  guint64 port;
  guint s1, s2;

  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_set_summary (ctx,
    "Serves the WebSocket signalling that nodes on different machines use to find\n"
    "each other (ws://HOST:PORT/rlx/signal). It routes sealed messages within a\n"
    "room per cohort and never sees the cohort key. With --cohort it prints an\n"
    "invite that every node can join with, so no node has to serve.\n\n"
    "Example:\n"
    "  rlx-rank signal --port 7000 --cohort demo --advertise signal.example.org");
  if (!rlx_cli_parse (ctx, sub, &argc, &argv))
    return RLX_EXIT_USAGE;
  if (argc > 1)
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "unexpected argument '%s' (see rlx-rank signal --help)", argv[1]);
  if (port_s == NULL || !g_ascii_string_to_unsigned (port_s, 10, 1, 65535, &port, NULL))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--port P is required: a number from 1 to 65535");
  if (address && !g_hostname_is_ip_address (address))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--address: '%s' is not a numeric IP address", address);
  if (cohort && !rlx_invite_cohort_is_valid (cohort))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--cohort: '%s' is not a usable name (1 to 64 of A-Z a-z 0-9 . _ -)", cohort);
  if (advertise && !rlx_invite_host_is_valid (advertise))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--advertise: '%s' is neither a DNS name nor an IP address", advertise);

  server = rlx_signal_server_new (NULL);
  if (!rlx_signal_server_listen (server, address, (guint16) port, &error))
    return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "%s", error->message);
  st.json = json;
  {
    g_autoptr(JsonObject) o = json_object_new ();
    g_autofree char *inv_s = NULL;
    if (cohort)
      {
        guint8 key[RLX_INVITE_KEY_LEN];
        g_autofree char *host = advertise ? g_strdup (advertise)
                                          : !is_wildcard (address) ? g_strdup (address)
                                                                    : guess_advertised_host ();
        g_autoptr(RlxInvite) inv = NULL;
        if (!cohort_key (cohort, key, &error) ||
            (inv = rlx_invite_new_with_key (host, (guint16) port, cohort, key, &error)) == NULL)
          return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "%s", error->message);
        inv_s = rlx_invite_to_string (inv);
      }
    if (json)
      {
        json_object_set_string_member (o, "event", "serving");
        json_object_set_string_member (o, "address", address ? address : "*");
        json_object_set_int_member (o, "port", (gint64) port);
        if (inv_s)
          json_object_set_string_member (o, "invite", inv_s);
        print_json (o);
      }
    else
      {
        printf ("serving signalling on %s port %u (ws://…:%u/rlx/signal)\n",
                address ? address : "every address", (guint) port, (guint) port);
        if (inv_s)
          printf ("invite for cohort %s: %s\n  join with: rlx-rank join '%s'\n", cohort, inv_s, inv_s);
        fflush (stdout);
      }
  }
  g_signal_connect (server, "event", G_CALLBACK (on_server_event), &st);
  loop = g_main_loop_new (NULL, FALSE);
  st.loop = loop;
  s1 = g_unix_signal_add (SIGINT, on_quit_signal, &st);
  s2 = g_unix_signal_add (SIGTERM, on_quit_signal, &st);
  signal (SIGPIPE, SIG_IGN);
  g_main_loop_run (loop);
  g_source_remove (s1);
  g_source_remove (s2);
  rlx_signal_server_stop (server);
  return RLX_EXIT_OK;
}

/* ── the join hook ──────────────────────────────────────────────────────── */

struct _RlxJoinRemote
{
  /* options */
  char            *host_s;
  char            *advertise;
  char            *stun;
  char            *turn;
  char            *turn_user;
  char            *turn_password;
  gboolean         relay_only;
  char            *payload_s;
  char            *cc_s;
  char            *connect_timeout_s;

  /* configured */
  RlxInvite       *invite;
  gboolean         serve;
  char            *listen_address;
  gsize            payload;
  RlxQuicCc        cc;
  guint            connect_timeout_ms;

  /* running */
  RlxRemoteNode   *node;
  gboolean         coord_started;
  guint            join_timeout_id;
  RlxCoordinator  *coord;
  RlxLocalBus     *bus;
  RlxJoinPrintFunc print;
  RlxJoinFailFunc  fail;
  gpointer         user_data;
};

RlxJoinRemote *
rlx_join_remote_new (void)
{
  return g_new0 (RlxJoinRemote, 1);
}

void
rlx_join_remote_free (RlxJoinRemote *self)
{
  if (self == NULL)
    return;
  rlx_join_remote_stop (self);
  g_free (self->host_s);
  g_free (self->advertise);
  g_free (self->stun);
  g_free (self->turn);
  g_free (self->turn_user);
  g_free (self->turn_password);
  g_free (self->payload_s);
  g_free (self->cc_s);
  g_free (self->connect_timeout_s);
  g_free (self->listen_address);
  g_clear_pointer (&self->invite, rlx_invite_free);
  g_free (self);
}

GOptionGroup *
rlx_join_remote_options (RlxJoinRemote *self)
{
  GOptionEntry entries[] = {
    { "host", 0, 0, G_OPTION_ARG_STRING, &self->host_s, "found a cohort other machines can join: serve signalling on [ADDR:]PORT and print the invite", "[ADDR:]PORT" },
    { "advertise", 0, 0, G_OPTION_ARG_STRING, &self->advertise, "with --host: the host name or address put in the invite (default: this machine's first IPv4)", "HOST" },
    { "stun", 0, 0, G_OPTION_ARG_STRING, &self->stun, "a STUN server, for a public address behind NAT", "HOST[:PORT]" },
    { "turn", 0, 0, G_OPTION_ARG_STRING, &self->turn, "a TURN server, to relay when no direct path works", "HOST[:PORT]" },
    { "turn-user", 0, 0, G_OPTION_ARG_STRING, &self->turn_user, "TURN user name", "USER" },
    { "turn-password", 0, 0, G_OPTION_ARG_STRING, &self->turn_password, "TURN password", "PASSWORD" },
    { "relay-only", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &self->relay_only, "use only TURN-relayed paths (tests)", NULL },
    { "quic-payload", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &self->payload_s, "largest UDP payload QUIC sends (default 1452)", "BYTES" },
    { "quic-cc", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &self->cc_s, "congestion control: cubic (default), bbr, bbr2, reno", "CC" },
    { "connect-timeout-ms", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &self->connect_timeout_s, "how long one pairing may take", "MS" },
    { NULL }
  };
  GOptionGroup *g = g_option_group_new ("remote", "Cohorts across machines:",
                                        "Show the options for remote peers", NULL, NULL);

  g_option_group_add_entries (g, entries);
  return g;
}

gboolean
rlx_join_remote_is_remote (RlxJoinRemote *self)
{
  return self->invite != NULL;
}

gboolean
rlx_join_remote_configure (RlxJoinRemote *self, int argc, char **argv, char **cohort,
                           GError **error)
{
  guint64 n;

  if (argc > 2)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "one invite at most ('%s' is one too many)", argv[2]);
      return FALSE;
    }
  if (argc == 2 && self->host_s)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "give --host to found a cohort, or an invite to join one, not both");
      return FALSE;
    }
  if (self->payload_s)
    {
      if (!g_ascii_string_to_unsigned (self->payload_s, 10, 1200, 65527, &n, NULL))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "--quic-payload: '%s' is not a number from 1200 to 65527", self->payload_s);
          return FALSE;
        }
      self->payload = (gsize) n;
    }
  if (self->connect_timeout_s)
    {
      if (!g_ascii_string_to_unsigned (self->connect_timeout_s, 10, 100, 600000, &n, NULL))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "--connect-timeout-ms: '%s' is not a number from 100 to 600000",
                       self->connect_timeout_s);
          return FALSE;
        }
      self->connect_timeout_ms = (guint) n;
    }
  if (self->cc_s)
    {
      static const char *names[] = { "cubic", "bbr", "bbr2", "reno" };
      static const RlxQuicCc values[] = { RLX_QUIC_CC_CUBIC, RLX_QUIC_CC_BBR, RLX_QUIC_CC_BBR2,
                                          RLX_QUIC_CC_RENO };
      guint i;
      for (i = 0; i < G_N_ELEMENTS (names) && !g_str_equal (names[i], self->cc_s); i++)
        ;
      if (i == G_N_ELEMENTS (names))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "--quic-cc: '%s' is not cubic, bbr, bbr2 or reno", self->cc_s);
          return FALSE;
        }
      self->cc = values[i];
    }
  if ((self->turn_user || self->turn_password || self->relay_only) && self->turn == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "--turn-user, --turn-password and --relay-only need --turn HOST[:PORT]");
      return FALSE;
    }
  if (argc == 2)
    {
      self->invite = rlx_invite_parse (argv[1], error);
      if (self->invite == NULL)
        return FALSE;
      if (*cohort && !g_str_equal (*cohort, self->invite->cohort))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "--cohort %s contradicts the invite's cohort %s (leave --cohort out)",
                       *cohort, self->invite->cohort);
          return FALSE;
        }
      g_free (*cohort);
      *cohort = g_strdup (self->invite->cohort);
      return TRUE;
    }
  if (self->host_s)
    {
      guint16 port;
      guint8 key[RLX_INVITE_KEY_LEN];
      g_autofree char *adv = NULL;

      if (!parse_host_port (self->host_s, &self->listen_address, &port, error))
        {
          g_prefix_error (error, "--host: ");
          return FALSE;
        }
      if (self->advertise && !rlx_invite_host_is_valid (self->advertise))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "--advertise: '%s' is neither a DNS name nor an IP address", self->advertise);
          return FALSE;
        }
      if (*cohort == NULL)
        *cohort = g_strdup ("default");
      if (!rlx_invite_cohort_is_valid (*cohort))
        return TRUE;   /* cmd-join refuses the name with its own message */
      adv = self->advertise ? g_strdup (self->advertise)
                            : !is_wildcard (self->listen_address) ? g_strdup (self->listen_address)
                                                                   : guess_advertised_host ();
      if (!cohort_key (*cohort, key, error))
        return FALSE;
      self->invite = rlx_invite_new_with_key (adv, port, *cohort, key, error);
      gnutls_memset (key, 0, sizeof key);
      if (self->invite == NULL)
        return FALSE;
      self->serve = TRUE;
      return TRUE;
    }
  if (self->advertise || self->stun || self->turn)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "--advertise, --stun and --turn are for cohorts across machines: give "
                   "--host to found one, or an invite to join one");
      return FALSE;
    }
  return TRUE;
}

gboolean
rlx_join_remote_holds_start (RlxJoinRemote *self)
{
  return self->invite != NULL && !self->serve;
}

static void
start_coordinator (RlxJoinRemote *self, const char *why)
{
  g_autoptr(JsonObject) o = NULL;

  if (self->coord_started || !rlx_join_remote_holds_start (self))
    return;
  self->coord_started = TRUE;
  g_clear_handle_id (&self->join_timeout_id, g_source_remove);
  if (why)
    {
      o = json_object_new ();
      json_object_set_string_member (o, "event", "error");
      json_object_set_string_member (o, "node", "");
      json_object_set_string_member (o, "reason", why);
      self->print (o, self->user_data);
    }
  rlx_coordinator_start (self->coord);
}

static gboolean
on_join_timeout (gpointer user_data)
{
  RlxJoinRemote *self = user_data;

  self->join_timeout_id = 0;
  start_coordinator (self, "no member of the cohort could be reached within 30 s "
                           "(see the link-failed events); starting alone");
  return G_SOURCE_REMOVE;
}

static gboolean
on_local_start (gpointer user_data)
{
  start_coordinator (user_data, NULL);
  return G_SOURCE_REMOVE;
}

static gboolean
skip_local (const char *peer_id, gpointer user_data)
{
  RlxJoinRemote *self = user_data;

  return self->bus && rlx_local_bus_get_link (self->bus, peer_id) != NULL;
}

static void
on_remote_link_added (RlxRemoteNode *node, RlxLink *link, const char *peer_id, gpointer user_data)
{
  RlxJoinRemote *self = user_data;

  if (skip_local (peer_id, self))
    {
      rlx_remote_node_forget_peer (node, peer_id);
      return;
    }
  rlx_coordinator_add_link (self->coord, link);
  start_coordinator (self, NULL);
}

/* A local link to a peer wins over a remote one: drop the remote one before
 * the coordinator gets the local one (this handler runs first). */
static void
on_local_link_added (RlxLocalBus *bus, RlxLink *link, const char *peer_id, gpointer user_data)
{
  RlxJoinRemote *self = user_data;

  if (self->node)
    rlx_remote_node_forget_peer (self->node, peer_id);
  /* The link is handed to the coordinator by cmd-join's own handler, which
   * runs after this one; start the coordinator once that happened. */
  if (!self->coord_started)
    g_idle_add_full (G_PRIORITY_DEFAULT, on_local_start, self, NULL);
}

static void
on_remote_event (RlxRemoteNode *node, JsonObject *event, gpointer user_data)
{
  RlxJoinRemote *self = user_data;

  self->print (event, self->user_data);
  /* Alone in the room: nobody to wait for, this node founds the cohort. */
  if (g_strcmp0 (json_object_get_string_member_with_default (event, "event", ""), "signalling") == 0 &&
      g_strcmp0 (json_object_get_string_member_with_default (event, "state", ""), "joined") == 0 &&
      json_object_get_int_member_with_default (event, "peers", 1) == 0)
    start_coordinator (self, NULL);
}

static void
on_remote_refused (RlxRemoteNode *node, const GError *error, gpointer user_data)
{
  RlxJoinRemote *self = user_data;

  self->fail (error->message, self->user_data);
}

gboolean
rlx_join_remote_start (RlxJoinRemote *self, RlxCoordinator *coord, RlxLocalBus *bus,
                       const char *node_id, RlxJoinPrintFunc print, RlxJoinFailFunc fail,
                       gpointer user_data, GError **error)
{
  g_autoptr(RlxIdentity) identity = NULL;
  RlxRemoteNodeConfig c = { 0 };

  if (self->invite == NULL)
    return TRUE;
  identity = rlx_identity_load_or_create (NULL, error);
  if (identity == NULL)
    return FALSE;
  self->coord = coord;
  self->bus = bus;
  self->print = print;
  self->fail = fail;
  self->user_data = user_data;
  c.invite = self->invite;
  c.node_id = node_id;
  c.identity = identity;
  c.serve = self->serve;
  c.listen_address = self->listen_address;
  c.stun = self->stun;
  c.turn = self->turn;
  c.turn_user = self->turn_user;
  c.turn_password = self->turn_password;
  c.relay_only = self->relay_only;
  c.max_udp_payload = self->payload;
  c.cc = self->cc;
  c.connect_timeout_ms = self->connect_timeout_ms;
  self->node = rlx_remote_node_new (&c, error);
  if (self->node == NULL)
    return FALSE;
  rlx_remote_node_set_skip_func (self->node, skip_local, self);
  g_signal_connect (self->node, "link-added", G_CALLBACK (on_remote_link_added), self);
  g_signal_connect (self->node, "event", G_CALLBACK (on_remote_event), self);
  g_signal_connect (self->node, "refused", G_CALLBACK (on_remote_refused), self);
  if (bus)
    g_signal_connect (bus, "link-added", G_CALLBACK (on_local_link_added), self);
  if (!rlx_remote_node_start (self->node, error))
    {
      rlx_join_remote_stop (self);
      return FALSE;
    }
  if (rlx_join_remote_holds_start (self))
    {
      /* Links the local bus already made count as members. */
      g_auto(GStrv) local = bus ? rlx_local_bus_dup_peer_ids (bus) : NULL;
      if (local && local[0])
        g_idle_add_full (G_PRIORITY_DEFAULT, on_local_start, self, NULL);
      self->join_timeout_id = g_timeout_add (JOIN_TIMEOUT_MS, on_join_timeout, self);
    }
  if (self->serve)
    {
      g_autoptr(JsonObject) o = json_object_new ();
      g_autofree char *inv = rlx_invite_to_string (self->invite);
      json_object_set_string_member (o, "event", "invite");
      json_object_set_string_member (o, "invite", inv);
      json_object_set_string_member (o, "cohort", self->invite->cohort);
      json_object_set_int_member (o, "port", rlx_remote_node_get_port (self->node));
      json_object_set_string_member (o, "fingerprint", rlx_identity_get_fingerprint (identity));
      print (o, user_data);
    }
  return TRUE;
}

void
rlx_join_remote_stop (RlxJoinRemote *self)
{
  g_clear_handle_id (&self->join_timeout_id, g_source_remove);
  g_idle_remove_by_data (self);
  if (self->bus)
    g_signal_handlers_disconnect_by_data (self->bus, self);
  self->bus = NULL;
  if (self->node)
    {
      g_signal_handlers_disconnect_by_data (self->node, self);
      rlx_remote_node_stop (self->node);
      g_clear_object (&self->node);
    }
}
