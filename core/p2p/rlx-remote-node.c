/* rlx-remote-node.c — signalling + pairing + RlxRemoteLinks for one node
 *
 * See rlx-remote-node.h for the protocol. One Peer per node id heard of;
 * a peer has at most one RlxRemoteLink at a time (an attempt, or live once
 * ::ready). Every message from signalling is opened by RlxSignalAuth before
 * any field of it is used; what fails is reported as a "rejected" event and
 * otherwise ignored.
 *
 * Over 1,000 lines: one object's state machine (signalling, challenges,
 * pairing, the key refusal) over one Peer table. The STUN/TURN
 * resolution is RlxIceServers (rlx-ice-servers.h); the signalling
 * messages' handlers are the part to move out next.
 */
#define G_LOG_DOMAIN "rlx-remote"
#include "rlx-config.h"
#include "rlx-remote-node.h"
#include "rlx-ice-servers.h"
#include "rlx-remote-link.h"
#include "rlx-signal-msg.h"
#include "rlx-signal-server.h"
#include "rlx-signal-client.h"

#include <string.h>
#include <gio/gio.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#define RETRY_MIN_MS        1000
#define RETRY_MAX_MS        10000
#define AUTH_DEADLINE_MS    10000
#define NOTICE_INTERVAL_US  (10 * G_USEC_PER_SEC)
#define CHALLENGE_GAP_US    G_USEC_PER_SEC
#define MAX_PEERS           256
#define CHALLENGE_HEX_LEN   32
/* Attempts in a row that failed before a session must answer a challenge
 * again (show it is alive) for the next: a process that died without a
 * bye gets no more ICE agents than this. */
#define MAX_FAILED_ATTEMPTS 3

typedef struct {
  RlxRemoteNode *node;
  char          *id;
  char          *fp;
  char          *sid;
  char          *host;
  char          *verified_sid;  /* the session that answered our challenge */
  char          *ch;            /* our challenge to this node, outstanding */
  gint64         ch_sent_at;
  gboolean       known;
  gboolean       forgotten;
  RlxRemoteLink *link;
  char          *att;
  gboolean       live;
  gboolean       dropping;      /* we are closing the link on purpose */
  gboolean       displaced;     /* a new session was announced while the link was live */
  guint          failed;        /* attempts that failed in a row */
  guint          retry_ms;
  GSource       *retry;
} Peer;

struct _RlxRemoteNode
{
  GObject           parent_instance;

  RlxInvite        *invite;
  char             *node_id;
  char             *host_name;
  RlxIdentity      *identity;
  gboolean          serve;
  char             *listen_address;
  char             *stun_spec;
  char             *turn_spec;
  char             *turn_user;
  char             *turn_password;
  gboolean          relay_only;
  RlxIceServers    *ice;          /* the STUN and TURN servers, numeric */
  gsize             max_udp_payload;
  gsize             max_frame;
  RlxQuicCc         cc;
  guint             connect_timeout_ms;
  guint             idle_timeout_ms;
  guint             auth_deadline_ms;

  RlxSignalServer  *server;
  RlxSignalClient  *client;
  RlxSignalAuth    *auth;
  GHashTable       *peers;        /* id → Peer*: authenticated senders only */
  GHashTable       *room;         /* ids the server says are in the room (hints) */
  gboolean          room_overflow; /* more than the room set holds: never "empty" */
  GHashTable       *complaints;   /* sender → gint64*: last notice/report about it */
  RlxRemoteSkipFunc skip;
  gpointer          skip_data;
  GCancellable     *cancel;
  gboolean          started;
  gboolean          stopped;
  gboolean          refused;
  gboolean          signalling_joined;   /* ever: a later loss is "lost", not "unreachable" */
  guint64           n_authentic;
  char             *bcast_ch;       /* the challenge in our broadcast hello */
  GSource          *refuse_check;
};

G_DEFINE_FINAL_TYPE (RlxRemoteNode, rlx_remote_node, G_TYPE_OBJECT)

enum {
  SIGNAL_LINK_ADDED,
  SIGNAL_LINK_REMOVED,
  SIGNAL_EVENT,
  SIGNAL_REFUSED,
  N_SIGNALS
};
static guint signals[N_SIGNALS];

static void start_attempt (RlxRemoteNode *self, Peer *p);
static void challenge (RlxRemoteNode *self, Peer *p, const char *echo);
static void schedule_retry (RlxRemoteNode *self, Peer *p);

/* ── events ─────────────────────────────────────────────────────────────── */

/* Emit @e (taken). */
static void
emit (RlxRemoteNode *self, RlxEvent *e)
{
  g_signal_emit (self, signals[SIGNAL_EVENT], 0, e);
  rlx_event_unref (e);
}

#define DUP(s) g_strdup ((s) ? (s) : "")

/* link-down or link-failed */
static void
emit_link_lost (RlxRemoteNode *self, RlxEventKind kind, const char *node, const char *reason,
                const char *code)
{
  RlxEvent *e = rlx_event_new (kind);

  e->u.link_lost.node = DUP (node);
  e->u.link_lost.reason = DUP (reason);
  e->u.link_lost.code = DUP (code);
  emit (self, e);
}

/* signalling, not in a room: @server may be NULL (left out) */
static void
emit_signalling (RlxRemoteNode *self, const char *state, const char *reason, const char *server)
{
  RlxEvent *e = rlx_event_new (RLX_EVENT_SIGNALLING);

  e->u.signalling.state = DUP (state);
  e->u.signalling.reason = DUP (reason);
  e->u.signalling.server = g_strdup (server);
  emit (self, e);
}

/* ── peers ───────────────────────────────────────────────────────────────── */

static void
clear_retry (Peer *p)
{
  if (p->retry)
    {
      g_source_destroy (p->retry);
      g_clear_pointer (&p->retry, g_source_unref);
    }
}

static void
peer_free (gpointer data)
{
  Peer *p = data;

  clear_retry (p);
  if (p->link)
    {
      g_signal_handlers_disconnect_by_data (p->link, p->node);
      if (!rlx_link_is_closed (RLX_LINK (p->link)))
        rlx_link_close (RLX_LINK (p->link));
      g_clear_object (&p->link);
    }
  g_free (p->id);
  g_free (p->fp);
  g_free (p->sid);
  g_free (p->host);
  g_free (p->verified_sid);
  g_free (p->ch);
  g_free (p->att);
  g_free (p);
}

static Peer *
get_peer (RlxRemoteNode *self, const char *id, gboolean create)
{
  Peer *p = g_hash_table_lookup (self->peers, id);

  if (p == NULL && create && g_hash_table_size (self->peers) < MAX_PEERS)
    {
      p = g_new0 (Peer, 1);
      p->node = self;
      p->id = g_strdup (id);
      p->retry_ms = RETRY_MIN_MS;
      g_hash_table_insert (self->peers, p->id, p);
    }
  return p;
}

static gboolean
controlling (RlxRemoteNode *self, Peer *p)
{
  return strcmp (self->node_id, p->id) < 0;
}

static gboolean
skipped (RlxRemoteNode *self, Peer *p)
{
  return p->forgotten || (self->skip && self->skip (p->id, self->skip_data));
}

static void
send_sealed (RlxRemoteNode *self, const char *to, const char *type, JsonObject *fields)
{
  g_autoptr(JsonNode) sealed = NULL;

  if (self->client == NULL || !rlx_signal_client_is_joined (self->client))
    return;
  sealed = rlx_signal_auth_seal (self->auth, to, type, fields);
  rlx_signal_client_send (self->client, to, sealed);
}

static char *
new_challenge (void)
{
  guint8 r[CHALLENGE_HEX_LEN / 2];
  GString *s = g_string_sized_new (CHALLENGE_HEX_LEN);

  (void) gnutls_rnd (GNUTLS_RND_NONCE, r, sizeof r);
  for (guint i = 0; i < sizeof r; i++)
    g_string_append_printf (s, "%02x", r[i]);
  return g_string_free (s, FALSE);
}

/* A hello: our fingerprint and host; @echo answers the challenge the
 * recipient sent us, @ch is one for it to answer. */
static void
send_hello (RlxRemoteNode *self, const char *to, const char *echo, const char *ch)
{
  g_autoptr(JsonObject) f = json_object_new ();

  json_object_set_string_member (f, "fp", rlx_identity_get_fingerprint (self->identity));
  json_object_set_string_member (f, "host", self->host_name);
  if (echo)
    json_object_set_string_member (f, "echo", echo);
  if (ch)
    json_object_set_string_member (f, "ch", ch);
  send_sealed (self, to, "hello", f);
}

/* Close whatever link the peer has (attempt or live), without a retry. */
static void
drop_link (RlxRemoteNode *self, Peer *p)
{
  RlxRemoteLink *link = p->link;

  if (link == NULL)
    return;
  /* The ::closed handler sees p->link == link: it emits ::link-removed for
   * a live link, but neither a failure nor a retry. */
  p->dropping = TRUE;
  if (!rlx_link_is_closed (RLX_LINK (link)))
    rlx_link_close (RLX_LINK (link));
  p->dropping = FALSE;
}

static gboolean
on_retry (gpointer user_data)
{
  Peer *p = user_data;

  g_clear_pointer (&p->retry, g_source_unref);
  g_debug ("pairing with %s: retry now (link %p, known %d, failed %u)", p->id, (void *) p->link,
           p->known, p->failed);
  if (p->link != NULL || !p->known || p->node->stopped)
    return G_SOURCE_REMOVE;
  if (p->failed >= MAX_FAILED_ATTEMPTS)
    {
      /* It may be a process that died without a bye: no more ICE agents
       * until it answers a challenge (one signalling message a retry). */
      challenge (p->node, p, NULL);
      schedule_retry (p->node, p);
    }
  else
    start_attempt (p->node, p);
  return G_SOURCE_REMOVE;
}

static void
schedule_retry (RlxRemoteNode *self, Peer *p)
{
  g_debug ("pairing with %s: retry? stopped %d known %d skipped %d controlling %d pending %d",
           p->id, self->stopped, p->known, skipped (self, p), controlling (self, p),
           p->retry != NULL);
  if (self->stopped || !p->known || skipped (self, p) || !controlling (self, p) || p->retry)
    return;
  p->retry = g_timeout_source_new (p->retry_ms);
  g_source_set_callback (p->retry, on_retry, p, NULL);
  g_source_attach (p->retry, g_main_context_get_thread_default ());
  p->retry_ms = MIN (p->retry_ms * 2, RETRY_MAX_MS);
}

/* ── link signals ───────────────────────────────────────────────────────── */

static Peer *
peer_of_link (RlxRemoteNode *self, RlxRemoteLink *link)
{
  Peer *p = g_hash_table_lookup (self->peers, rlx_remote_link_get_peer_id (link));

  return p && p->link == link ? p : NULL;
}

/* A trickled candidate (@cand) or the end of them (NULL), to the link's peer. */
static void
send_trickle (RlxRemoteNode *self, RlxRemoteLink *link, const char *cand)
{
  Peer *p = peer_of_link (self, link);
  g_autoptr(JsonObject) f = NULL;

  if (p == NULL)
    return;
  f = json_object_new ();
  json_object_set_string_member (f, "att", p->att);
  if (cand)
    json_object_set_string_member (f, "c", cand);
  send_sealed (self, p->id, cand ? "cand" : "eoc", f);
}

static void
on_link_candidate (RlxRemoteLink *link, const char *cand, gpointer user_data)
{
  send_trickle (user_data, link, cand);
}

static void
on_link_gathered (RlxRemoteLink *link, gpointer user_data)
{
  send_trickle (user_data, link, NULL);
}

static void
on_link_ready (RlxRemoteLink *link, gpointer user_data)
{
  RlxRemoteNode *self = user_data;
  Peer *p = peer_of_link (self, link);
  g_autofree char *path = NULL;
  RlxEvent *e;

  if (p == NULL)
    return;
  if (skipped (self, p))
    {
      drop_link (self, p);
      return;
    }
  p->live = TRUE;
  p->failed = 0;
  p->retry_ms = RETRY_MIN_MS;
  clear_retry (p);
  path = rlx_remote_link_dup_path (link);
  e = rlx_event_new (RLX_EVENT_LINK_UP);
  e->u.link_up.node = g_strdup (p->id);
  e->u.link_up.host = DUP (p->host);
  e->u.link_up.path = DUP (path);
  e->u.link_up.rtt_us = rlx_remote_link_get_rtt_us (link);
  emit (self, e);
  g_signal_emit (self, signals[SIGNAL_LINK_ADDED], 0, RLX_LINK (link), p->id);
}

static void
on_link_closed (RlxLink *link, const GError *error, gpointer user_data)
{
  RlxRemoteNode *self = user_data;
  Peer *p = peer_of_link (self, RLX_REMOTE_LINK (link));
  gboolean was_live;
  const char *code;

  g_signal_handlers_disconnect_by_data (link, self);
  if (p == NULL)
    {
      g_object_unref (link);
      return;
    }
  was_live = p->live;
  p->live = FALSE;
  p->link = NULL;
  g_clear_pointer (&p->att, g_free);
  code = error->domain == RLX_REMOTE_ERROR ? rlx_remote_error_code_name (error->code) : "closed";
  if (was_live)
    {
      g_signal_emit (self, signals[SIGNAL_LINK_REMOVED], 0, link, p->id);
      emit_link_lost (self, RLX_EVENT_LINK_DOWN, p->id, error->message, code);
      /* A new session was announced while the link lived: whoever holds
       * the name now must answer a challenge drawn now, and its hello then
       * names the session and the certificate to pair with. */
      if (p->displaced && !self->stopped)
        {
          p->displaced = FALSE;
          challenge (self, p, NULL);
        }
    }
  else if (!self->stopped && !p->dropping)
    {
      emit_link_lost (self, RLX_EVENT_LINK_FAILED, p->id, error->message, code);
      p->failed++;
    }
  g_object_unref (link);   /* the node's reference */
  if (!p->dropping)
    schedule_retry (self, p);
}

static RlxRemoteLink *
new_link (RlxRemoteNode *self, Peer *p, gboolean is_controlling, const char *pin)
{
  g_autoptr(GError) error = NULL;
  RlxRemoteLinkConfig c = { 0 };
  RlxRemoteLink *link;

  c.controlling = is_controlling;
  c.identity = self->identity;
  c.peer_id = p->id;
  c.peer_fingerprint = pin;
  c.stun_ip = rlx_ice_servers_get_stun_ip (self->ice);
  c.stun_port = rlx_ice_servers_get_stun_port (self->ice);
  c.turn_ip = rlx_ice_servers_get_turn_ip (self->ice);
  c.turn_port = rlx_ice_servers_get_turn_port (self->ice);
  c.turn_user = self->turn_user;
  c.turn_password = self->turn_password;
  c.relay_only = self->relay_only;
  c.max_udp_payload = self->max_udp_payload;
  c.max_frame = self->max_frame;
  c.cc = self->cc;
  c.connect_timeout_ms = self->connect_timeout_ms;
  c.idle_timeout_ms = self->idle_timeout_ms;
  link = rlx_remote_link_new (&c, &error);
  if (link == NULL)
    {
      emit_link_lost (self, RLX_EVENT_LINK_FAILED, p->id, error->message,
                      rlx_remote_error_code_name (error->code));
      return NULL;
    }
  g_signal_connect (link, "local-candidate", G_CALLBACK (on_link_candidate), self);
  g_signal_connect (link, "gathering-done", G_CALLBACK (on_link_gathered), self);
  g_signal_connect (link, "ready", G_CALLBACK (on_link_ready), self);
  g_signal_connect (link, "closed", G_CALLBACK (on_link_closed), self);
  return link;
}

static char *
new_attempt_id (void)
{
  return g_strdup_printf ("%08x%08x", g_random_int (), g_random_int ());
}

static JsonObject *
creds_fields (RlxRemoteNode *self, RlxRemoteLink *link, const char *att)
{
  g_autofree char *ufrag = NULL, *pwd = NULL;
  JsonObject *f = json_object_new ();

  rlx_remote_link_get_local_credentials (link, &ufrag, &pwd);
  json_object_set_string_member (f, "att", att);
  json_object_set_string_member (f, "ufrag", ufrag ? ufrag : "");
  json_object_set_string_member (f, "pwd", pwd ? pwd : "");
  json_object_set_string_member (f, "fp", rlx_identity_get_fingerprint (self->identity));
  return f;
}

static void
start_attempt (RlxRemoteNode *self, Peer *p)
{
  g_autoptr(JsonObject) f = NULL;

  if (self->stopped || p->link || p->fp == NULL || skipped (self, p))
    {
      g_debug ("pairing with %s: no attempt (link %p, fingerprint %s, skipped %d)", p->id,
               (void *) p->link, p->fp ? "known" : "unknown", skipped (self, p));
      return;
    }
  clear_retry (p);
  p->link = new_link (self, p, TRUE, p->fp);
  if (p->link == NULL)
    {
      schedule_retry (self, p);
      return;
    }
  p->att = new_attempt_id ();
  f = creds_fields (self, p->link, p->att);
  send_sealed (self, p->id, "offer", f);
  rlx_remote_link_start (p->link);
}

/* ── signalling messages ────────────────────────────────────────────────── */

static const char *
member_str (JsonObject *o, const char *key, gsize max)
{
  JsonNode *n = json_object_get_member (o, key);
  const char *s;

  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    return NULL;
  s = json_node_get_string (n);
  return strlen (s) <= max ? s : NULL;
}

/* TRUE at most once per NOTICE_INTERVAL_US per sender: what anyone can send
 * through the server must not turn into a flood of events or notices. The
 * table is bounded (cleared when full), so it is no way to fill memory. */
static gboolean
complaint_due (RlxRemoteNode *self, const char *from, const char *what)
{
  g_autofree char *key = g_strconcat (what, ":", from, NULL);
  gint64 *last = g_hash_table_lookup (self->complaints, key);
  gint64 now = g_get_monotonic_time ();

  if (last && now - *last < NOTICE_INTERVAL_US)
    return FALSE;
  if (last == NULL)
    {
      if (g_hash_table_size (self->complaints) >= 4 * MAX_PEERS)
        g_hash_table_remove_all (self->complaints);
      last = g_new (gint64, 1);
      g_hash_table_insert (self->complaints, g_steal_pointer (&key), last);
    }
  *last = now;
  return TRUE;
}

static void
reject (RlxRemoteNode *self, const char *from, const char *reason)
{
  /* Keyed by the reason without its numbers: a replay and a forgery from
   * the same sender are both reported, a thousand replays once. */
  g_autoptr(GString) kind = g_string_new ("event ");

  for (const char *c = reason; *c && kind->len < 48; c++)
    if (!g_ascii_isdigit (*c))
      g_string_append_c (kind, *c);
  if (complaint_due (self, from, kind->str))
    {
      RlxEvent *e = rlx_event_new (RLX_EVENT_REJECTED);
      e->u.rejected.node = DUP (from);
      e->u.rejected.reason = DUP (reason);
      emit (self, e);
    }
}

/* Send @p our challenge (drawn once, until answered), echoing @echo: at
 * most one a second per node, whatever makes us send it. */
static void
challenge (RlxRemoteNode *self, Peer *p, const char *echo)
{
  gint64 now = g_get_monotonic_time ();

  if (p->ch == NULL)
    p->ch = new_challenge ();
  else if (now - p->ch_sent_at < CHALLENGE_GAP_US)
    return;
  p->ch_sent_at = now;
  send_hello (self, p->id, echo, p->ch);
}

/* A hello is the only message a session we have not verified may send, and
 * all it gets is a challenge: a hello recorded earlier and replayed (to a
 * node that never saw its session, within the clock window) passes every
 * check of RlxSignalAuth, but cannot answer a challenge drawn now. A
 * session is verified once a hello of it echoes our broadcast challenge or
 * the one we sent that node; until then nothing about the peer changes. */
static void
handle_hello (RlxRemoteNode *self, Peer *p, JsonObject *body)
{
  const char *fp = member_str (body, "fp", 64);
  const char *host = member_str (body, "host", 255);
  const char *sid = member_str (body, "sid", 64);
  const char *ch = member_str (body, "ch", CHALLENGE_HEX_LEN);
  const char *echo = member_str (body, "echo", CHALLENGE_HEX_LEN);
  gboolean broadcast = g_strcmp0 (member_str (body, "to", 64), "*") == 0;

  if (!rlx_fingerprint_is_valid (fp))
    {
      reject (self, p->id, "a hello without a certificate fingerprint");
      return;
    }
  if (echo && ((self->bcast_ch && strcmp (echo, self->bcast_ch) == 0) ||
               (p->ch && strcmp (echo, p->ch) == 0)))
    {
      g_free (p->verified_sid);
      p->verified_sid = g_strdup (sid);
      g_clear_pointer (&p->ch, g_free);
      p->failed = 0;   /* it is alive now: attempts may start again */
    }
  if (g_strcmp0 (p->verified_sid, sid) != 0)
    {
      g_debug ("hello from %s, session %s: not verified yet, challenged", p->id, sid);
      challenge (self, p, ch);
      return;
    }
  if (p->live && (g_strcmp0 (p->sid, sid) != 0 || !rlx_fingerprint_equal (fp, p->fp)))
    {
      /* Issue 29, item 7. A live link's TLS handshake proved the
       * certificate it pinned; a hello proves only the cohort key, which
       * every member holds. So signalling alone never tears a live link
       * down nor changes its pin: a restarted node's old link dies by
       * itself (heartbeat or idle timeout), and the name is challenged
       * again then (on_link_closed). */
      p->displaced = TRUE;
      reject (self, p->id, "a hello of a new session or certificate for a node whose link is "
                           "live: the live link is kept (a new session is taken once it closes)");
      if (broadcast || ch)
        send_hello (self, p->id, ch, NULL);
      return;
    }
  if (p->sid && g_strcmp0 (p->sid, sid) != 0)
    {
      /* The peer restarted: whatever attempt we had with it is dead. */
      drop_link (self, p);
    }
  g_free (p->sid);
  p->sid = g_strdup (sid);
  rlx_signal_auth_settle (self->auth, p->id, sid);   /* its other sessions are refused now */
  g_free (p->host);
  p->host = g_strdup (host);
  g_free (p->fp);
  p->fp = g_ascii_strdown (fp, -1);
  p->known = TRUE;
  p->forgotten = FALSE;
  if (broadcast || ch)
    send_hello (self, p->id, ch, NULL);
  if (!controlling (self, p) || p->live)
    return;
  if (p->link && broadcast)
    drop_link (self, p);   /* it (re)joined signalling: our attempt is stale */
  p->retry_ms = RETRY_MIN_MS;
  start_attempt (self, p);
}

static void
handle_offer (RlxRemoteNode *self, Peer *p, JsonObject *body)
{
  const char *att = member_str (body, "att", 64);
  const char *ufrag = member_str (body, "ufrag", 256);
  const char *pwd = member_str (body, "pwd", 256);
  const char *fp = member_str (body, "fp", 64);
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonObject) f = NULL;

  if (controlling (self, p))
    {
      reject (self, p->id, "an offer from a node that should answer");
      return;
    }
  if (att == NULL || ufrag == NULL || pwd == NULL || !rlx_fingerprint_is_valid (fp))
    {
      reject (self, p->id, "an offer without attempt, ICE credentials or fingerprint");
      return;
    }
  if (p->link && g_strcmp0 (p->att, att) == 0)
    return;
  if (skipped (self, p))
    return;
  if (p->live)
    {
      /* Nothing from signalling replaces a live link (see handle_hello):
       * a peer that really lost it offers again once ours has closed. */
      reject (self, p->id, "an offer for a node whose link is live: the live link is kept");
      return;
    }
  drop_link (self, p);
  g_free (p->fp);
  p->fp = g_ascii_strdown (fp, -1);
  p->known = TRUE;
  p->link = new_link (self, p, FALSE, p->fp);
  if (p->link == NULL)
    return;
  p->att = g_strdup (att);
  if (!rlx_remote_link_set_remote_credentials (p->link, ufrag, pwd, &error))
    {
      reject (self, p->id, error->message);
      drop_link (self, p);
      return;
    }
  f = creds_fields (self, p->link, att);
  send_sealed (self, p->id, "answer", f);
  rlx_remote_link_start (p->link);
}

static void
handle_answer (RlxRemoteNode *self, Peer *p, JsonObject *body)
{
  const char *att = member_str (body, "att", 64);
  const char *ufrag = member_str (body, "ufrag", 256);
  const char *pwd = member_str (body, "pwd", 256);
  const char *fp = member_str (body, "fp", 64);
  g_autoptr(GError) error = NULL;

  if (p->link == NULL || p->live || g_strcmp0 (p->att, att) != 0)
    return;   /* an answer to an attempt given up, or one for a live link */
  if (!rlx_fingerprint_equal (fp, p->fp))
    {
      reject (self, p->id, "an answer whose fingerprint is not the one its hello announced");
      drop_link (self, p);
      return;
    }
  if (ufrag == NULL || pwd == NULL ||
      !rlx_remote_link_set_remote_credentials (p->link, ufrag, pwd, &error))
    {
      reject (self, p->id, error ? error->message : "an answer without ICE credentials");
      drop_link (self, p);
    }
}

static void
handle_candidate (RlxRemoteNode *self, Peer *p, JsonObject *body, gboolean done)
{
  const char *att = member_str (body, "att", 64);
  const char *c = member_str (body, "c", 512);
  g_autoptr(GError) error = NULL;

  if (p->link == NULL || g_strcmp0 (p->att, att) != 0)
    return;
  if (done)
    rlx_remote_link_remote_gathering_done (p->link);
  else if (c == NULL || !rlx_remote_link_add_remote_candidate (p->link, c, &error))
    reject (self, p->id, error ? error->message : "a candidate message without a candidate");
}

static void
on_client_message (RlxSignalClient *client, const char *from, JsonNode *sealed, gpointer user_data)
{
  RlxRemoteNode *self = user_data;
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonObject) body = rlx_signal_auth_open (self->auth, sealed, &error);
  const char *type, *sender;
  Peer *p;

  if (body == NULL)
    {
      if (!g_error_matches (error, RLX_SIGNAL_ERROR, RLX_SIGNAL_ERROR_NOT_FOR_US))
        reject (self, from, error->message);
      return;
    }
  self->n_authentic++;
  sender = member_str (body, "from", 64);
  type = member_str (body, "type", 64);
  p = get_peer (self, sender, TRUE);
  if (p == NULL)
    {
      reject (self, sender, "too many peers");
      return;
    }
  if (g_strcmp0 (type, "hello") != 0 &&
      g_strcmp0 (p->verified_sid, member_str (body, "sid", 64)) != 0)
    {
      reject (self, sender, "a signalling message from a session that has not answered our "
                            "challenge (a recorded session replayed?)");
      /* a live sender whose answer got lost gets the challenge again */
      challenge (self, p, NULL);
      return;
    }
  if (g_strcmp0 (type, "hello") == 0)
    handle_hello (self, p, body);
  else if (g_strcmp0 (type, "offer") == 0)
    handle_offer (self, p, body);
  else if (g_strcmp0 (type, "answer") == 0)
    handle_answer (self, p, body);
  else if (g_strcmp0 (type, "cand") == 0)
    handle_candidate (self, p, body, FALSE);
  else if (g_strcmp0 (type, "eoc") == 0)
    handle_candidate (self, p, body, TRUE);
  else if (g_strcmp0 (type, "bye") == 0)
    {
      p->known = FALSE;
      clear_retry (p);
      if (!p->live)
        drop_link (self, p);
    }
  else
    reject (self, sender, "a signalling message of an unknown type");
}

/* ── the key refusal ────────────────────────────────────────────────────── */

/* Nothing anyone in a room can send ends a join: a notice is not
 * authenticated (a node with another key cannot authenticate anything to
 * us), so it is logged and ignored, and who else sits in the room (anyone
 * who read its id on the path may) proves nothing either. What tells a
 * joiner its key is wrong is the absence of anything authentic on the
 * founding node's own server ("hosted"): its founder is always in its
 * cohort's room, so a key that hears nothing authentic there for the whole
 * deadline names another room. On `rlx-rank signal` an empty room is a
 * cohort not founded yet: that joiner founds it. */
static gboolean
on_refuse_check (gpointer user_data)
{
  RlxRemoteNode *self = user_data;
  g_autoptr(GError) error = NULL;

  g_clear_pointer (&self->refuse_check, g_source_unref);
  if (self->refused || self->serve || self->n_authentic > 0 || self->client == NULL ||
      !rlx_signal_client_is_hosted (self->client))
    return G_SOURCE_REMOVE;
  self->refused = TRUE;
  error = g_error_new (RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_KEY_REFUSED,
                       "key refused: nothing from the cohort '%s' could be authenticated "
                       "within %u s on its founding node's own server, which is always in "
                       "the cohort's room — the key in the invite is probably not the "
                       "cohort's: copy the whole invite, including the part after '#'",
                       self->invite->cohort, self->auth_deadline_ms / 1000);
  emit_signalling (self, "refused", error->message, NULL);
  g_signal_emit (self, signals[SIGNAL_REFUSED], 0, error);
  return G_SOURCE_REMOVE;
}

static void
on_client_notice (RlxSignalClient *client, const char *from, const char *notice, gpointer user_data)
{
  RlxRemoteNode *self = user_data;

  /* Logged (at most once per sender and interval), never acted on. */
  if (complaint_due (self, from, "notice"))
    g_message ("signalling: ignored an unauthenticated notice '%s' from %s", notice, from);
}

/* ── signalling connection ──────────────────────────────────────────────── */

static void
on_client_joined (RlxSignalClient *client, GStrv peers, gpointer user_data)
{
  RlxRemoteNode *self = user_data;
  g_autofree char *server = g_strdup_printf ("%s:%u", self->invite->host, self->invite->port);
  RlxEvent *e = rlx_event_new (RLX_EVENT_SIGNALLING);

  e->u.signalling.state = g_strdup ("joined");
  e->u.signalling.server = g_strdup (server);
  e->u.signalling.has_room = TRUE;
  e->u.signalling.peers = peers ? g_strv_length (peers) : 0;
  e->u.signalling.hosted = rlx_signal_client_is_hosted (client);
  self->signalling_joined = TRUE;
  g_hash_table_remove_all (self->room);
  self->room_overflow = FALSE;
  for (guint i = 0; peers && peers[i]; i++)
    if (g_strcmp0 (peers[i], self->node_id) != 0)
      {
        if (g_hash_table_size (self->room) >= 4096)
          self->room_overflow = TRUE;
        else
          g_hash_table_add (self->room, g_strdup (peers[i]));
      }
  emit (self, e);
  if (self->refuse_check == NULL && self->n_authentic == 0 && !self->serve && !self->refused)
    {
      self->refuse_check = g_timeout_source_new (self->auth_deadline_ms);
      g_source_set_callback (self->refuse_check, on_refuse_check, self, NULL);
      g_source_attach (self->refuse_check, g_main_context_get_thread_default ());
    }
  /* A fresh challenge per (re)join: whoever answers it is live now. */
  g_free (self->bcast_ch);
  self->bcast_ch = new_challenge ();
  send_hello (self, "*", NULL, self->bcast_ch);
}

static void
on_client_lost (RlxSignalClient *client, const GError *error, gpointer user_data)
{
  RlxRemoteNode *self = user_data;
  g_autofree char *server = g_strdup_printf ("%s:%u", self->invite->host, self->invite->port);

  emit_signalling (self, self->signalling_joined ? "lost" : "unreachable", error->message,
                   server);
}

static void
on_client_refused (RlxSignalClient *client, const char *reason, gpointer user_data)
{
  emit_signalling (user_data, "refused", reason, NULL);
}

static void
on_client_peer_joined (RlxSignalClient *client, const char *node, gpointer user_data)
{
  RlxRemoteNode *self = user_data;

  if (node == NULL || g_strcmp0 (node, self->node_id) == 0)
    return;
  if (g_hash_table_size (self->room) >= 4096)
    self->room_overflow = TRUE;
  else
    g_hash_table_add (self->room, g_strdup (node));
}

static void
on_client_peer_left (RlxSignalClient *client, const char *node, gpointer user_data)
{
  RlxRemoteNode *self = user_data;
  Peer *p = g_hash_table_lookup (self->peers, node);

  /* The last one the room had gone, this node is alone in it (as a welcome
   * with nobody says): the node may found rather than wait out its join
   * timeout for nodes that left (killed behind a cut link: the server
   * drops their sessions at its pong timeout, after the welcome listed
   * them; a chaos run's final resume check failed so). Not once a node
   * of the room answered us (its link goes on without signalling: the
   * server may have dropped a live node behind a cut), nor when the room
   * held more than the set counts (a second reader of 4ee822d). */
  if (node && g_hash_table_remove (self->room, node) && g_hash_table_size (self->room) == 0 &&
      !self->room_overflow && g_hash_table_size (self->peers) == 0 && !self->serve &&
      self->signalling_joined)
    {
      g_autofree char *server = g_strdup_printf ("%s:%u", self->invite->host, self->invite->port);
      RlxEvent *e = rlx_event_new (RLX_EVENT_SIGNALLING);

      e->u.signalling.state = g_strdup ("empty");
      e->u.signalling.reason = g_strdup ("every other node left the room");
      e->u.signalling.server = g_steal_pointer (&server);
      e->u.signalling.has_room = TRUE;
      e->u.signalling.peers = 0;
      e->u.signalling.hosted = rlx_signal_client_is_hosted (client);
      emit (self, e);
    }
  if (p == NULL)
    return;
  /* A hint: a live link carries on (the data path does not need signalling);
   * an attempt is hopeless without it. */
  g_debug ("signalling says %s left the room", node);
  p->known = FALSE;
  clear_retry (p);
  if (!p->live)
    drop_link (self, p);
}

static void
connect_signalling (RlxRemoteNode *self)
{
  const char *host = self->invite->host;

  if (self->stopped)
    return;
  if (self->serve)
    {
      /* Our own server: reach it over loopback unless bound to one address. */
      if (self->listen_address == NULL || g_str_equal (self->listen_address, "0.0.0.0"))
        host = "127.0.0.1";
      else if (g_str_equal (self->listen_address, "::"))
        host = "::1";
      else
        host = self->listen_address;
    }
  self->client = rlx_signal_client_new (host, self->invite->port,
                                        rlx_signal_auth_get_room (self->auth), self->node_id);
  g_signal_connect (self->client, "joined", G_CALLBACK (on_client_joined), self);
  g_signal_connect (self->client, "message", G_CALLBACK (on_client_message), self);
  g_signal_connect (self->client, "notice", G_CALLBACK (on_client_notice), self);
  g_signal_connect (self->client, "lost", G_CALLBACK (on_client_lost), self);
  g_signal_connect (self->client, "refused", G_CALLBACK (on_client_refused), self);
  g_signal_connect (self->client, "peer-left", G_CALLBACK (on_client_peer_left), self);
  g_signal_connect (self->client, "peer-joined", G_CALLBACK (on_client_peer_joined), self);
  rlx_signal_client_start (self->client);
}

/* ── STUN/TURN resolution (rlx-ice-servers.h) ──────────────────────────── */

static void
on_server_unresolved (GObject *owner, const char *spec, const char *message)
{
  RlxEvent *e = rlx_event_new (RLX_EVENT_ERROR);

  e->u.note.reason = DUP (message);
  e->u.note.server = DUP (spec);
  emit (RLX_REMOTE_NODE (owner), e);
}

static void
on_servers_ready (GObject *owner)
{
  connect_signalling (RLX_REMOTE_NODE (owner));
}

/* G_MESSAGES_DEBUG=rlx-remote: what the signalling server we serve did. */
static void
on_server_event (RlxSignalServer *server, const char *what, const char *room, const char *node,
                 const char *detail, gpointer user_data)
{
  g_debug ("signalling server: %s %s in %s%s%s", what, node, room, *detail ? ": " : "", detail);
}

/* ── GObject ────────────────────────────────────────────────────────────── */

static void
rlx_remote_node_dispose (GObject *object)
{
  rlx_remote_node_stop (RLX_REMOTE_NODE (object));
  G_OBJECT_CLASS (rlx_remote_node_parent_class)->dispose (object);
}

static void
rlx_remote_node_finalize (GObject *object)
{
  RlxRemoteNode *self = RLX_REMOTE_NODE (object);

  g_hash_table_unref (self->peers);
  g_hash_table_unref (self->room);
  g_hash_table_unref (self->complaints);
  g_clear_pointer (&self->invite, rlx_invite_free);
  g_clear_pointer (&self->auth, rlx_signal_auth_free);
  g_clear_object (&self->identity);
  g_clear_object (&self->cancel);
  g_free (self->node_id);
  g_free (self->host_name);
  g_free (self->listen_address);
  g_free (self->stun_spec);
  g_free (self->turn_spec);
  g_free (self->turn_user);
  g_free (self->turn_password);
  g_clear_pointer (&self->ice, rlx_ice_servers_free);
  g_free (self->bcast_ch);
  G_OBJECT_CLASS (rlx_remote_node_parent_class)->finalize (object);
}

static void
rlx_remote_node_class_init (RlxRemoteNodeClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GType t = G_TYPE_FROM_CLASS (klass);

  object_class->dispose = rlx_remote_node_dispose;
  object_class->finalize = rlx_remote_node_finalize;
  signals[SIGNAL_LINK_ADDED] = g_signal_new ("link-added", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                                             NULL, G_TYPE_NONE, 2, RLX_TYPE_LINK, G_TYPE_STRING);
  signals[SIGNAL_LINK_REMOVED] = g_signal_new ("link-removed", t, G_SIGNAL_RUN_LAST, 0, NULL,
                                               NULL, NULL, G_TYPE_NONE, 2, RLX_TYPE_LINK,
                                               G_TYPE_STRING);
  signals[SIGNAL_EVENT] = g_signal_new ("event", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                        G_TYPE_NONE, 1,
                                        RLX_TYPE_EVENT | G_SIGNAL_TYPE_STATIC_SCOPE);
  signals[SIGNAL_REFUSED] = g_signal_new ("refused", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                          G_TYPE_NONE, 1,
                                          G_TYPE_ERROR | G_SIGNAL_TYPE_STATIC_SCOPE);
}

static void
rlx_remote_node_init (RlxRemoteNode *self)
{
  self->peers = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, peer_free);
  self->room = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  self->complaints = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  self->cancel = g_cancellable_new ();
  self->ice = rlx_ice_servers_new (G_OBJECT (self), self->cancel, on_server_unresolved,
                                   on_servers_ready);
}

RlxRemoteNode *
rlx_remote_node_new (const RlxRemoteNodeConfig *config, GError **error)
{
  RlxRemoteNode *self;

  g_return_val_if_fail (config != NULL && config->invite != NULL, NULL);
  g_return_val_if_fail (RLX_IS_IDENTITY (config->identity), NULL);

  if (!rlx_signal_name_is_valid (config->node_id))
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_INVALID,
                   "'%s' is not a usable node id (1 to 64 of A-Z a-z 0-9 . _ -)",
                   config->node_id ? config->node_id : "(none)");
      return NULL;
    }
  if (config->relay_only && config->turn == NULL)
    {
      g_set_error (error, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_INVALID,
                   "relay-only needs a TURN server (--turn HOST:PORT)");
      return NULL;
    }
  self = g_object_new (RLX_TYPE_REMOTE_NODE, NULL);
  self->invite = rlx_invite_copy (config->invite);
  self->node_id = g_strdup (config->node_id);
  self->host_name = g_strdup (config->host_name ? config->host_name : g_get_host_name ());
  self->identity = g_object_ref (config->identity);
  self->serve = config->serve;
  self->listen_address = g_strdup (config->listen_address);
  self->stun_spec = g_strdup (config->stun);
  self->turn_spec = g_strdup (config->turn);
  self->turn_user = g_strdup (config->turn_user);
  self->turn_password = g_strdup (config->turn_password);
  self->relay_only = config->relay_only;
  self->max_udp_payload = config->max_udp_payload;
  self->max_frame = config->max_frame;
  self->cc = config->cc;
  self->connect_timeout_ms = config->connect_timeout_ms;
  self->idle_timeout_ms = config->idle_timeout_ms;
  self->auth_deadline_ms = config->auth_deadline_ms ? config->auth_deadline_ms : AUTH_DEADLINE_MS;
  self->auth = rlx_signal_auth_new (self->invite->key, self->invite->cohort, self->node_id);
  return self;
}

void
rlx_remote_node_set_skip_func (RlxRemoteNode *self, RlxRemoteSkipFunc func, gpointer user_data)
{
  g_return_if_fail (RLX_IS_REMOTE_NODE (self));
  self->skip = func;
  self->skip_data = user_data;
}

gboolean
rlx_remote_node_start (RlxRemoteNode *self, GError **error)
{
  g_return_val_if_fail (RLX_IS_REMOTE_NODE (self), FALSE);
  g_return_val_if_fail (!self->started, FALSE);

  self->started = TRUE;
  if (self->serve)
    {
      self->server = rlx_signal_server_new (NULL);
      rlx_signal_server_set_hosted (self->server, TRUE);
      g_signal_connect (self->server, "event", G_CALLBACK (on_server_event), self);
      if (!rlx_signal_server_listen (self->server, self->listen_address, self->invite->port, error))
        {
          g_clear_object (&self->server);
          return FALSE;
        }
      if (self->invite->port == 0)
        self->invite->port = rlx_signal_server_get_port (self->server);
    }
  if (!rlx_ice_servers_resolve (self->ice, self->stun_spec, self->turn_spec, error))
    {
      g_clear_object (&self->server);
      return FALSE;
    }
  return TRUE;
}

void
rlx_remote_node_stop (RlxRemoteNode *self)
{
  GHashTableIter it;
  gpointer v;

  g_return_if_fail (RLX_IS_REMOTE_NODE (self));
  if (self->stopped)
    return;
  self->stopped = TRUE;
  g_cancellable_cancel (self->cancel);
  if (self->refuse_check)
    {
      g_source_destroy (self->refuse_check);
      g_clear_pointer (&self->refuse_check, g_source_unref);
    }
  if (self->client)
    send_sealed (self, "*", "bye", NULL);
  g_hash_table_iter_init (&it, self->peers);
  while (g_hash_table_iter_next (&it, NULL, &v))
    {
      Peer *p = v;
      clear_retry (p);
      drop_link (self, p);
    }
  g_hash_table_remove_all (self->peers);
  if (self->client)
    {
      rlx_signal_client_stop (self->client);
      g_signal_handlers_disconnect_by_data (self->client, self);
      g_clear_object (&self->client);
    }
  if (self->server)
    {
      rlx_signal_server_stop (self->server);
      g_clear_object (&self->server);
    }
}

guint16
rlx_remote_node_get_port (RlxRemoteNode *self)
{
  g_return_val_if_fail (RLX_IS_REMOTE_NODE (self), 0);
  return self->server ? rlx_signal_server_get_port (self->server) : 0;
}

char **
rlx_remote_node_dup_peer_ids (RlxRemoteNode *self)
{
  GStrvBuilder *b = g_strv_builder_new ();
  g_autoptr(GList) keys = g_hash_table_get_keys (self->peers);
  char **out;

  keys = g_list_sort (keys, (GCompareFunc) strcmp);
  for (GList *l = keys; l; l = l->next)
    {
      Peer *p = g_hash_table_lookup (self->peers, l->data);
      if (p->live)
        g_strv_builder_add (b, p->id);
    }
  out = g_strv_builder_end (b);
  g_strv_builder_unref (b);
  return out;
}

RlxLink *
rlx_remote_node_get_link (RlxRemoteNode *self, const char *peer_id)
{
  Peer *p = g_hash_table_lookup (self->peers, peer_id);

  return p && p->live ? RLX_LINK (p->link) : NULL;
}

void
rlx_remote_node_rescan (RlxRemoteNode *self)
{
  GHashTableIter it;
  Peer *p;
  g_autoptr(GPtrArray) due = g_ptr_array_new ();

  g_return_if_fail (RLX_IS_REMOTE_NODE (self));
  /* (collected first: a retry may add to the table through a link) */
  g_hash_table_iter_init (&it, self->peers);
  while (g_hash_table_iter_next (&it, NULL, (gpointer *) &p))
    if (p->retry != NULL && p->link == NULL)
      g_ptr_array_add (due, p);
  for (guint i = 0; i < due->len; i++)
    {
      p = g_ptr_array_index (due, i);
      clear_retry (p);
      on_retry (p);
    }
}

void
rlx_remote_node_forget_peer (RlxRemoteNode *self, const char *peer_id)
{
  Peer *p = g_hash_table_lookup (self->peers, peer_id);

  if (p == NULL)
    return;
  p->forgotten = TRUE;
  clear_retry (p);
  drop_link (self, p);
}
