/* rlx-signal-msg.h — what goes over the signalling WebSocket
 *
 * Two layers, both JSON text messages of at most RLX_SIGNAL_MAX_MESSAGE
 * bytes (protocol version 2):
 *
 * 1. Envelopes (RlxSignalOp), read by the signalling server, which routes
 *    them within a room (= a cohort) and knows nothing of the key. Only
 *    routing is in clear: the room id, node ids, the op.
 *      client → server  {"op":"join","v":2,"room":R,"node":N}
 *                       {"op":"send","to":N|"*","data":SEALED}
 *                       {"op":"notice","to":N,"notice":"auth-failed"}
 *                       {"op":"ping","n":K}   {"op":"pong","n":K}
 *      server → client  {"op":"welcome","room":R,"peers":[N…],"hosted":true?}
 *                       {"op":"msg","from":N,"data":SEALED}
 *                       {"op":"notice","from":N,"notice":"auth-failed"}
 *                       {"op":"peer-joined","node":N}  {"op":"peer-left","node":N}
 *                       {"op":"error","reason":TEXT,"fatal":BOOL}
 *                       {"op":"ping","n":K}   {"op":"pong","n":K}
 *    R, the room, is named by the key: R = hex of the first 16 bytes of
 *    HKDF-Expand (PRK, "rlx-signal/2 room\n" COHORT), with PRK =
 *    HKDF-Extract (salt "rlx-signal/2", cohort key), SHA-256. Whoever lacks
 *    the key cannot name (find, fill or squat) the room of a cohort; the
 *    server treats R as any other name. "hosted" in the welcome says the
 *    server is the founding node's own (rlx_signal_server_set_hosted), so
 *    its cohort's room is never empty while the cohort runs. Notices are
 *    unauthenticated: a node logs and ignores them (nothing that anyone in
 *    a room can send ends a join).
 *
 * 2. Sealed messages (RlxSignalAuth), end to end between nodes; the server
 *    passes them through untouched. SEALED = {"c":B64} where B64 is the
 *    base64 of NONCE (12 random bytes) ‖ AES-256-GCM (K, NONCE, AAD, BODY)
 *    (ciphertext and 16-byte tag), K = HKDF-Expand (PRK, "rlx-signal/2
 *    aead", 32), AAD = "rlx-signal/2\n" R. BODY is a JSON object of at
 *    most RLX_SIGNAL_MAX_BODY bytes:
 *      {"from":N,"to":N|"*","type":T,"sid":S,"seq":Q,"ts":MS, …fields of T}
 *    A listener (in the room, or on the path of ws://) sees only the
 *    envelopes' routing and the length of each message. A receiver accepts
 *    a message only if the tag is right, it is for this node (or everyone)
 *    and not from this node, and it is fresh:
 *      - per sender, a session id S (random per process) and a counter Q
 *        that must grow: a repeated or older (S, Q) is a replay;
 *      - a session older than the one the receiver settled on for that
 *        sender is refused (rlx_signal_auth_settle; newer ones are taken
 *        beside it, at most RLX_SIGNAL_SESSIONS);
 *      - ts within ± the window (default 5 minutes) of our clock.
 *    A recorded session replayed to a node that never saw it passes these
 *    checks: the remote node (rlx-remote-node.h) therefore trusts a new
 *    session only once it has answered a challenge of its own.
 *    The signalling server cannot read, forge, alter, redirect or replay
 *    anything; it can only drop messages (which ICE then notices).
 *
 * Both parsers take any bytes and fail with RLX_SIGNAL_ERROR and a message,
 * never crash (fuzz targets in tests/fuzz).
 */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

#define RLX_SIGNAL_MAX_MESSAGE   (16 * 1024)
#define RLX_SIGNAL_PATH          "/rlx/signal"
#define RLX_SIGNAL_VERSION       2
#define RLX_SIGNAL_LABEL         "rlx-signal/2"
#define RLX_SIGNAL_ROOM_LEN      32        /* hex digits of a room id */
#define RLX_SIGNAL_MAX_BODY      12000     /* a sealed body, before sealing */
#define RLX_SIGNAL_WINDOW_MS     (5 * 60 * 1000)

#define RLX_SIGNAL_ERROR (rlx_signal_error_quark ())
GQuark rlx_signal_error_quark (void);
typedef enum {
  RLX_SIGNAL_ERROR_MALFORMED,   /* not a message of this protocol */
  RLX_SIGNAL_ERROR_BAD_MAC,     /* wrong cohort key, or altered on the way (bad tag) */
  RLX_SIGNAL_ERROR_REPLAY,      /* seen before, or an older session */
  RLX_SIGNAL_ERROR_STALE,       /* outside the time window */
  RLX_SIGNAL_ERROR_NOT_FOR_US,  /* addressed to another node, or our own */
  RLX_SIGNAL_ERROR_REFUSED,     /* the server refused us (room full, …) */
  RLX_SIGNAL_ERROR_UNREACHABLE, /* cannot reach or lost the server */
} RlxSignalErrorCode;

/* ── envelopes ──────────────────────────────────────────────────────────── */

typedef enum {
  RLX_SIGNAL_OP_JOIN,
  RLX_SIGNAL_OP_SEND,
  RLX_SIGNAL_OP_NOTICE,
  RLX_SIGNAL_OP_PING,
  RLX_SIGNAL_OP_PONG,
  RLX_SIGNAL_OP_WELCOME,
  RLX_SIGNAL_OP_MSG,
  RLX_SIGNAL_OP_PEER_JOINED,
  RLX_SIGNAL_OP_PEER_LEFT,
  RLX_SIGNAL_OP_ERROR,
} RlxSignalOpKind;

typedef struct {
  RlxSignalOpKind kind;
  char           *room;     /* join, welcome */
  char           *node;     /* join, peer-joined, peer-left */
  char           *to;       /* send, notice (client side) */
  char           *from;     /* msg, notice (server side) */
  char           *notice;   /* notice */
  char           *reason;   /* error */
  gboolean        fatal;    /* error */
  char          **peers;    /* welcome */
  gboolean        hosted;   /* welcome: the server is a founding node's */
  JsonNode       *data;     /* send, msg: a sealed message (an object) */
  gint64          n;        /* ping, pong */
} RlxSignalOp;

/* Parse one envelope. @from_server selects which ops are legal (a client
 * may not send "msg", a server may not send "join"). */
RlxSignalOp *rlx_signal_op_parse (const char *text, gsize len, gboolean from_server,
                                  GError **error);
void         rlx_signal_op_free  (RlxSignalOp *op);
/* Serialise; NULL fields are left out. */
char        *rlx_signal_op_to_string (const RlxSignalOp *op);

/* TRUE if @name is a usable node id or room name: 1..64 of [A-Za-z0-9._-],
 * not "." or "..". */
gboolean     rlx_signal_name_is_valid (const char *name);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxSignalOp, rlx_signal_op_free)

/* ── sealed messages ────────────────────────────────────────────────────── */

typedef struct _RlxSignalAuth RlxSignalAuth;

typedef gint64 (*RlxSignalClock) (gpointer user_data);   /* ms since the epoch */

/* The room id of @cohort under @key (see above). */
void           rlx_signal_room_for   (const guint8 key[16], const char *cohort,
                                      char out[RLX_SIGNAL_ROOM_LEN + 1]);

RlxSignalAuth *rlx_signal_auth_new   (const guint8 key[16], const char *cohort,
                                      const char *node_id);
void           rlx_signal_auth_free  (RlxSignalAuth *self);
/* Tests: another clock, another window. */
void           rlx_signal_auth_set_clock  (RlxSignalAuth *self, RlxSignalClock clock,
                                           gpointer user_data);
void           rlx_signal_auth_set_window (RlxSignalAuth *self, gint64 window_ms);
const char    *rlx_signal_auth_get_session (RlxSignalAuth *self);
/* The room to join: rlx_signal_room_for (key, cohort). */
const char    *rlx_signal_auth_get_room    (RlxSignalAuth *self);

/* Seal a message of @type to @to (a node id or "*") carrying the members of
 * @fields (may be NULL; reserved names are refused). Returns the SEALED
 * object for an envelope's "data". */
JsonNode      *rlx_signal_auth_seal  (RlxSignalAuth *self, const char *to, const char *type,
                                      JsonObject *fields);
/* Check and open a SEALED object. Returns the body (with "from", "type",
 * "to", "sid" and the type's fields) or NULL with RLX_SIGNAL_ERROR_BAD_MAC,
 * _REPLAY, _STALE, _NOT_FOR_US or _MALFORMED. */
JsonObject    *rlx_signal_auth_open  (RlxSignalAuth *self, JsonNode *sealed, GError **error);
/* Sessions of one sender. A sender's first session is its settled one; a
 * new one is taken beside it (each with its own counter: every member
 * holds the key, so a new session proves nothing about the node, and must
 * not shut its live process out) — at most RLX_SIGNAL_SESSIONS per sender,
 * the oldest retired — unless it began before the settled one (an older
 * session replayed). The receiver settles on the session it adopts (the
 * one that answered its challenge and names the certificate it pairs
 * with): every other one is retired, and refused from then on. */
#define RLX_SIGNAL_SESSIONS 4
void           rlx_signal_auth_settle (RlxSignalAuth *self, const char *from, const char *sid);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxSignalAuth, rlx_signal_auth_free)

G_END_DECLS
