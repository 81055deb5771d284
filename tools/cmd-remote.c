/* cmd-remote.c — rlx-rank signal, and the remote side of rlx-rank join
 *
 *   signal  serves signalling for cohorts across machines (a standalone
 *           RlxSignalServer) until interrupted. With --cohort it also prints
 *           an invite for that cohort (a fresh key, kept in
 *           $XDG_DATA_HOME/rlx-cluster/NAME/invite-key), so every node can
 *           join with `rlx-rank join INVITE` and none has to serve.
 *   join    the options of cmd-remote.h: --host founds a reachable cohort,
 *           INVITE joins one (the node's remote side is core/rlx-node-remote.c).
 */
#include "rlx-config.h"
#include "rlx-cli.h"
#include "cmd-remote.h"
#include "core/rlx-node-remote.h"
#include "core/p2p/rlx-invite.h"
#include "core/p2p/rlx-signal-server.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <glib-unix.h>

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
                                          : !rlx_node_remote_is_wildcard (address) ? g_strdup (address)
                                                                    : rlx_node_remote_guess_host ();
        g_autoptr(RlxInvite) inv = NULL;
        if (!rlx_node_remote_cohort_key (cohort, key, &error) ||
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

/* ── rlx-rank join's options for cohorts across machines ────────────────── */

struct _RlxJoinRemote
{
  /* options */
  char                *host_s;
  char                *advertise;
  char                *stun;
  char                *turn;
  char                *turn_user;
  char                *turn_password;
  gboolean             relay_only;
  char                *payload_s;
  char                *cc_s;
  char                *connect_timeout_s;

  /* configured */
  char                *invite;
  char                *listen_address;
  guint16              port;
  RlxNodeRemoteTuning  tuning;
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
  g_free (self->host_s);
  g_free (self->advertise);
  g_free (self->stun);
  g_free (self->turn);
  g_free (self->turn_user);
  g_free (self->turn_password);
  g_free (self->payload_s);
  g_free (self->cc_s);
  g_free (self->connect_timeout_s);
  g_free (self->invite);
  g_free (self->listen_address);
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
    { "quic-cc", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &self->cc_s, "congestion control: " RLX_QUIC_CC_NAMES, "CC" },
    { "connect-timeout-ms", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &self->connect_timeout_s, "how long one pairing may take", "MS" },
    { NULL }
  };
  GOptionGroup *g = g_option_group_new ("remote", "Cohorts across machines:",
                                        "Show the options for remote peers", NULL, NULL);

  g_option_group_add_entries (g, entries);
  return g;
}

gboolean
rlx_join_remote_configure (RlxJoinRemote *self, int argc, char **argv, char **cohort,
                           RlxNodeConfig *config, GError **error)
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
      self->tuning.quic_payload = (gsize) n;
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
      self->tuning.connect_timeout_ms = (guint) n;
    }
  if (self->cc_s && !rlx_quic_cc_from_name (self->cc_s, &self->tuning.quic_cc))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "--quic-cc: '%s' is not " RLX_QUIC_CC_NAMES, self->cc_s);
      return FALSE;
    }
  if ((self->turn_user || self->turn_password || self->relay_only) && self->turn == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "--turn-user, --turn-password and --relay-only need --turn HOST[:PORT]");
      return FALSE;
    }
  self->tuning.stun = self->stun;
  self->tuning.turn = self->turn;
  self->tuning.turn_user = self->turn_user;
  self->tuning.turn_password = self->turn_password;
  self->tuning.relay_only = self->relay_only;
  if (argc == 2)
    {
      g_autoptr(RlxInvite) invite = rlx_invite_parse (argv[1], error);
      if (invite == NULL)
        return FALSE;
      if (*cohort && !g_str_equal (*cohort, invite->cohort))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "--cohort %s contradicts the invite's cohort %s (leave --cohort out)",
                       *cohort, invite->cohort);
          return FALSE;
        }
      g_free (*cohort);
      *cohort = g_strdup (invite->cohort);
      self->invite = g_strdup (argv[1]);
      config->invite = self->invite;
      config->remote_tuning = &self->tuning;
      return TRUE;
    }
  if (self->host_s)
    {
      if (!parse_host_port (self->host_s, &self->listen_address, &self->port, error))
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
      config->host_port = self->port;
      config->host_address = self->listen_address;
      config->advertise = self->advertise;
      config->remote_tuning = &self->tuning;
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
