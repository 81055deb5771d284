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

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib-unix.h>
#include <glib/gstdio.h>
#include <gnutls/gnutls.h>

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

/* ── invites: out of the arguments, into files ─────────────────────────── */

#define INVITE_READ_MAX (RLX_INVITE_MAX_LEN + 2)

/* The first line of what @fd holds (at most INVITE_READ_MAX bytes), white
 * space stripped; NULL with a message naming @what and, when it holds
 * nothing, the @form expected. */
static char *
read_secret_fd (int fd, const char *what, const char *thing, const char *form, GError **error)
{
  char buf[INVITE_READ_MAX + 1];
  gsize n = 0;
  char *nl, *out;

  while (n < INVITE_READ_MAX)
    {
      ssize_t r = read (fd, buf + n, INVITE_READ_MAX - n);
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0)
        {
          int e = errno;
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (e), "cannot read the %s "
                       "from %s: %s", thing, what, g_strerror (e));
          return NULL;
        }
      if (r == 0)
        break;
      n += (gsize) r;
      if (memchr (buf + n - (gsize) r, '\n', (gsize) r))
        break;
    }
  buf[n] = '\0';
  if ((nl = strchr (buf, '\n')) != NULL)
    *nl = '\0';
  out = g_strdup (g_strstrip (buf));
  gnutls_memset (buf, 0, sizeof buf);
  if (*out == '\0')
    {
      g_free (out);
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "%s holds no %s (one line: %s)", what, thing, form);
      return NULL;
    }
  return out;
}

static char *
read_invite_fd (int fd, const char *what, GError **error)
{
  return read_secret_fd (fd, what, "invite", RLX_INVITE_FORM, error);
}

/* A secret's file (an invite, a TURN password) must be this user's alone:
 * refused when group or others may read it (checked on the open file, not
 * the name). @option names it in messages. */
static char *
read_secret_file (const char *option, const char *path, const char *thing, const char *form,
                  GError **error)
{
  g_autofree char *what = g_strdup_printf ("%s %s", option, path);
  struct stat st;
  char *out;
  int fd = g_open (path, O_RDONLY | O_CLOEXEC | O_NOCTTY, 0);

  if (fd < 0)
    {
      int e = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (e), "%s: %s", what, g_strerror (e));
      return NULL;
    }
  if (fstat (fd, &st) != 0)
    {
      int e = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (e), "%s: %s", what, g_strerror (e));
      close (fd);
      return NULL;
    }
  /* (a folder opens too, and is usually readable by others: say what it
   * is, not to chmod it) */
  if (S_ISDIR (st.st_mode))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_IS_DIRECTORY,
                   "%s is a folder: name the file in it that holds the %s", what, thing);
      close (fd);
      return NULL;
    }
  if ((st.st_mode & (S_IRGRP | S_IROTH)) != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
                   "%s: other users of this machine may read it (mode %04o), and the %s "
                   "in it is a secret: make it yours alone (chmod 600 %s) and run again",
                   what, (guint) (st.st_mode & 07777),
                   g_str_equal (thing, "invite") ? "cohort key" : thing, path);
      close (fd);
      return NULL;
    }
  out = read_secret_fd (fd, what, thing, form, error);
  close (fd);
  return out;
}

static char *
read_invite_file (const char *path, GError **error)
{
  return read_secret_file ("--invite-file", path, "invite", RLX_INVITE_FORM, error);
}

gboolean
rlx_write_invite_file (const char *path, const char *invite, GError **error)
{
  g_autofree char *line = g_strconcat (invite, "\n", NULL);
  gboolean ok;

  /* written 0600 from the start (a new file), and made so if it existed */
  ok = g_file_set_contents_full (path, line, -1, G_FILE_SET_CONTENTS_CONSISTENT, 0600, error) &&
       g_chmod (path, 0600) == 0;
  gnutls_memset (line, 0, strlen (line));
  if (!ok && error && *error == NULL)
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "cannot make %s private", path);
  return ok;
}

/* ── rlx-rank signal ─────────────────────────────────────────────────────── */

typedef struct {
  gboolean   json;
  GMainLoop *loop;
} SignalState;

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
      rlx_cli_print_json (o);
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
  g_autofree char *invite_out = NULL;
  gboolean json = FALSE, show_invite = FALSE;
  GOptionEntry entries[] = {
    { "port", 0, 0, G_OPTION_ARG_STRING, &port_s, "the port to serve on (required)", "P" },
    { "address", 0, 0, G_OPTION_ARG_STRING, &address, "a numeric address to listen on (default: all)", "ADDR" },
    { "cohort", 0, 0, G_OPTION_ARG_STRING, &cohort, "also print an invite for this cohort", "NAME" },
    { "advertise", 0, 0, G_OPTION_ARG_STRING, &advertise, "the host name or address put in the invite", "HOST" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "one JSON object per line per event", NULL },
    { "show-invite", 0, 0, G_OPTION_ARG_NONE, &show_invite, "print the invite with its key (hidden otherwise)", NULL },
    { "invite-out", 0, 0, G_OPTION_ARG_FILENAME, &invite_out, "write the invite, key included, to FILE (mode 0600) for --invite-file", "FILE" },
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
  if (!rlx_cli_no_extra_args (sub, argc, argv))
    return RLX_EXIT_USAGE;
  if (port_s == NULL || !g_ascii_string_to_unsigned (port_s, 10, 1, 65535, &port, NULL))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--port P is required: a number from 1 to 65535");
  if (address && !g_hostname_is_ip_address (address))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--address: '%s' is not a numeric IP address", address);
  if (cohort && !rlx_invite_cohort_is_valid (cohort))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--cohort: '%s' is not a usable name (1 to 64 of A-Z a-z 0-9 . _ -)", cohort);
  if (advertise && !rlx_invite_host_is_valid (advertise))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--advertise: '%s' is neither a DNS name nor an IP address", advertise);
  if ((show_invite || invite_out) && cohort == NULL)
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--show-invite and --invite-out need --cohort NAME");

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
        if (invite_out && !rlx_write_invite_file (invite_out, inv_s, &error))
          return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "--invite-out: %s", error->message);
        if (!show_invite)
          {
            g_autofree char *full = g_steal_pointer (&inv_s);
            inv_s = rlx_invite_redact (full);
            gnutls_memset (full, 0, strlen (full));
          }
      }
    if (json)
      {
        json_object_set_string_member (o, "event", "serving");
        json_object_set_string_member (o, "address", address ? address : "*");
        json_object_set_int_member (o, "port", (gint64) port);
        if (inv_s)
          json_object_set_string_member (o, "invite", inv_s);
        rlx_cli_print_json (o);
      }
    else
      {
        printf ("serving signalling on %s port %u (ws://…:%u/rlx/signal)\n",
                address ? address : "every address", (guint) port, (guint) port);
        if (inv_s && show_invite)
          printf ("invite for cohort %s: %s\n  join with: rlx-rank join --invite - (and paste it)\n",
                  cohort, inv_s);
        else if (inv_s)
          printf ("invite for cohort %s: %s (the key is hidden: --show-invite prints it, "
                  "--invite-out FILE writes it for rlx-rank join --invite-file FILE)\n", cohort, inv_s);
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
  char                *turn_password_file;
  gboolean             relay_only;
  char                *payload_s;
  char                *cc_s;
  char                *connect_timeout_s;
  char                *invite_opt;
  char                *invite_file;

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
  if (self->turn_password)
    gnutls_memset (self->turn_password, 0, strlen (self->turn_password));
  g_free (self->turn_password);
  g_free (self->turn_password_file);
  g_free (self->payload_s);
  g_free (self->cc_s);
  g_free (self->connect_timeout_s);
  g_free (self->invite_opt);
  g_free (self->invite_file);
  if (self->invite)
    gnutls_memset (self->invite, 0, strlen (self->invite));
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
    { "invite", 0, 0, G_OPTION_ARG_STRING, &self->invite_opt, "join the cohort of INVITE; - reads it from standard input (keeps the key out of the arguments)", "INVITE|-" },
    { "invite-file", 0, 0, G_OPTION_ARG_FILENAME, &self->invite_file, "join the cohort of the invite in FILE (mode 0600: refused if others may read it)", "FILE" },
    { "stun", 0, 0, G_OPTION_ARG_STRING, &self->stun, "a STUN server, for a public address behind NAT", "HOST[:PORT]" },
    { "turn", 0, 0, G_OPTION_ARG_STRING, &self->turn, "a TURN server, to relay when no direct path works", "HOST[:PORT]" },
    { "turn-user", 0, 0, G_OPTION_ARG_STRING, &self->turn_user, "TURN user name", "USER" },
    { "turn-password-file", 0, 0, G_OPTION_ARG_FILENAME, &self->turn_password_file, "the TURN password: the first line of FILE (mode 0600: refused if others may read it); or RLX_TURN_PASSWORD", "FILE" },
    { "turn-password", 0, 0, G_OPTION_ARG_STRING, &self->turn_password, "TURN password (visible to other users while rlx-rank starts: prefer --turn-password-file or RLX_TURN_PASSWORD)", "PASSWORD" },
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

/* The invite's text from wherever it was given: INVITE or --invite (a
 * literal, with a warning, or - for standard input), --invite-file, or
 * RLX_INVITE (unless --local or --host). NULL and no error: none. */
static char *
take_invite (RlxJoinRemote *self, const char *positional, gboolean local, GError **error)
{
  const char *literal = positional ? positional : self->invite_opt;
  const char *env = g_getenv ("RLX_INVITE");
  guint given = (positional != NULL) + (self->invite_opt != NULL) + (self->invite_file != NULL);
  char *text = NULL;

  if (given > 1)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "give the invite one way: INVITE, --invite or --invite-file");
      return NULL;
    }
  if (given && self->host_s)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "give --host to found a cohort, or an invite to join one, not both");
      return NULL;
    }
  if (self->invite_file)
    text = read_invite_file (self->invite_file, error);
  else if (literal && g_str_equal (literal, "-"))
    {
      if (isatty (STDIN_FILENO))
        g_printerr ("rlx-rank join: paste the invite (rlx://…) and press Enter:\n");
      text = read_invite_fd (STDIN_FILENO, "standard input", error);
    }
  else if (literal)
    {
      const char *key = strchr (literal, '#');

      /* (only a key shown is worth the warning: a word that is no invite
       * at all is refused next, for what it is) */
      if (key != NULL && key[1] != '\0')
        g_printerr ("rlx-rank join: warning: an invite in the command line puts the cohort key "
                    "where other users of this machine can read it (/proc/PID/cmdline, ps) "
                    "while rlx-rank starts; give it with --invite-file FILE (mode 0600), "
                    "--invite - (standard input) or the RLX_INVITE environment variable\n");
      text = g_strdup (literal);
    }
  else if (env && *env && !self->host_s && !local)
    text = g_strdup (env);
  /* Read once; children of this process do not inherit it. */
  g_unsetenv ("RLX_INVITE");
  return text;
}

/* The TURN password from one of --turn-password-file, --turn-password (a
 * literal, with a warning; rlx_cli_hide_secrets blanks it from the
 * arguments) or RLX_TURN_PASSWORD, which is read once and removed from the
 * environment so that processes this one starts do not inherit it. */
static gboolean
take_turn_password (RlxJoinRemote *self, GError **error)
{
  const char *env = g_getenv ("RLX_TURN_PASSWORD");
  char *from_env = env && *env ? g_strdup (env) : NULL;

  if (env)
    {
      /* blank the process's copy too (environ is readable in /proc/PID/environ
       * by this user only, but it would outlive its use) */
      gnutls_memset ((char *) env, 0, strlen (env));
      g_unsetenv ("RLX_TURN_PASSWORD");
    }
  if (self->turn_password_file && self->turn_password)
    {
      g_free (from_env);
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "give the TURN password one way: --turn-password-file or --turn-password");
      return FALSE;
    }
  if (self->turn_password_file)
    {
      g_free (from_env);
      self->turn_password = read_secret_file ("--turn-password-file", self->turn_password_file,
                                              "TURN password", "the password", error);
      return self->turn_password != NULL;
    }
  if (self->turn_password)
    {
      g_printerr ("rlx-rank join: warning: --turn-password puts the TURN password where other "
                  "users of this machine can read it (/proc/PID/cmdline, ps) while rlx-rank "
                  "starts; give it with --turn-password-file FILE (mode 0600) or the "
                  "RLX_TURN_PASSWORD environment variable\n");
      g_free (from_env);
      return TRUE;
    }
  self->turn_password = from_env;
  return TRUE;
}

gboolean
rlx_join_remote_configure (RlxJoinRemote *self, int argc, char **argv, gboolean local,
                           char **cohort, RlxNodeConfig *config, GError **error)
{
  g_autoptr(GError) local_error = NULL;
  g_autofree char *text = NULL;
  guint64 n;

  if (argc > 2)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "one invite at most ('%s' is one too many)", argv[2]);
      return FALSE;
    }
  text = take_invite (self, argc == 2 ? argv[1] : NULL, local, &local_error);
  if (local_error)
    {
      g_propagate_error (error, g_steal_pointer (&local_error));
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
  if (!take_turn_password (self, error))
    return FALSE;
  if ((self->turn_user || self->turn_password || self->relay_only) && self->turn == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "--turn-user, --turn-password (or its file, or RLX_TURN_PASSWORD) and "
                   "--relay-only need --turn HOST[:PORT]");
      return FALSE;
    }
  self->tuning.stun = self->stun;
  self->tuning.turn = self->turn;
  self->tuning.turn_user = self->turn_user;
  self->tuning.turn_password = self->turn_password;
  self->tuning.relay_only = self->relay_only;
  if (text)
    {
      g_autoptr(RlxInvite) invite = rlx_invite_parse (text, error);
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
      self->invite = g_steal_pointer (&text);
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
