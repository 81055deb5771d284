/* rlx-event.h — what a node tells: typed events
 *
 * Everything a node reports (a rank joined, a step committed, a link went
 * down, the run is done) is an RlxEvent: a kind (RlxEventKind) and the
 * value of that kind, a plain struct in the union `u` (u.step for
 * RLX_EVENT_STEP, and so on). Consumers switch on the kind and read the
 * struct's fields; nobody compares event names as strings.
 *
 * The one JSON-lines writer (rlx_event_to_json) turns an event into the
 * object `rlx-rank join --json` prints, one per line: an "event" member
 * with the kind's name ("member-joined") and one member per field, named as
 * the field. docs/PROTOCOL.md and the scripts read those names; they do not
 * change. The reader (rlx_event_from_json) is its inverse, for a log read
 * back or an event that crossed a process boundary as JSON.
 *
 * Fields: strings are owned by the event (g_strdup them in; the event frees
 * them). A string left NULL is written as JSON null, or left out where the
 * kind's table says so (the "optional" fields below); integers are written
 * as JSON integers, hashes as 16 hex digits, `has_*` booleans say whether a
 * group of fields is present (they are never written themselves).
 *
 * Adding a kind: a value in RlxEventKind (before RLX_EVENT_N_KINDS), a
 * struct and its member in the union, and its row in the table of
 * core/event/rlx-event.c (name and fields, in the order they are written).
 * tests/cohort/test-event.c checks every kind round-trips.
 *
 * Threads: an event is filled by the thread that makes it and is read-only
 * once emitted; its reference count is atomic, so a reference may be handed
 * to any thread (the app's node thread does) without a copy.
 */
#pragma once

#include <glib-object.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

typedef enum {
  RLX_EVENT_JOINED,          /* "joined": this node joined (or founded) its cohort */
  RLX_EVENT_LEADER,          /* "leader": who leads, from which term and step */
  RLX_EVENT_MEMBER_JOINED,   /* "member-joined" */
  RLX_EVENT_MEMBER_LEFT,     /* "member-left" */
  RLX_EVENT_STEP,            /* "step": a step committed */
  RLX_EVENT_EVALUATED,       /* "evaluated": test accuracy at a step */
  RLX_EVENT_CHECKPOINT,      /* "checkpoint": written */
  RLX_EVENT_RESUMED,         /* "resumed": from a checkpoint */
  RLX_EVENT_SNAPSHOT,        /* "snapshot": taken from or sent to a rank */
  RLX_EVENT_PRECISION,       /* "precision": a rank's wire precision changed */
  RLX_EVENT_MERGED,          /* "merged": two groups met, steps discarded */
  RLX_EVENT_REFUSED,         /* "refused": a hello refused (either way) */
  RLX_EVENT_REJECTED,        /* "rejected": a gradient (or message) thrown away */
  RLX_EVENT_LATE,            /* "late": a gradient missed its step */
  RLX_EVENT_ACK_TIMEOUT,     /* "ack-timeout": a member never acknowledged (the first
                              * commit reported without it since it was last heard) */
  RLX_EVENT_DROPPED,         /* "dropped": frames to a rank not sent (queue full); at
                              * most one a second a lane, `total` counts every frame */
  RLX_EVENT_SEND_FAILED,     /* "send-failed" */
  RLX_EVENT_REJOINING,       /* "rejoining": cut off, looking for the cohort */
  RLX_EVENT_WAITING,         /* "waiting": join-only, no cohort yet, or peers alive but silent */
  RLX_EVENT_ERROR,           /* "error" */
  RLX_EVENT_DONE,            /* "done": the run ended, with its statistics */
  RLX_EVENT_INVITE,          /* "invite": this node serves an invite */
  RLX_EVENT_SIGNALLING,      /* "signalling": the invite host's server */
  RLX_EVENT_LINK_UP,         /* "link-up": a link to a remote rank */
  RLX_EVENT_LINK_DOWN,       /* "link-down" */
  RLX_EVENT_LINK_FAILED,     /* "link-failed" */
  RLX_EVENT_SYNC,            /* "sync": the cohort's sync mode as this node runs it */
  RLX_EVENT_DIVERGED,        /* "diverged": a rank's parameters differ from the commit's */
  RLX_EVENT_LINKS,           /* "links": this node's links as measured (--sync auto) */
  RLX_EVENT_TIMING,          /* "timing": a rank's step split into compute and wait (leader) */
  RLX_EVENT_N_KINDS
} RlxEventKind;

/* joined */
typedef struct {
  char   *node, *cohort, *role;
  guint64 step, hash;
  char   *backend, *device, *fallback, *precision;
  char   *sync;           /* optional: the sync mode it runs ("step", "outer") */
  gboolean has_data;      /* where training stands (left out of older logs): */
  guint64  train;         /*   training samples in an epoch */
  guint64  epoch, pos;    /*   the epoch and the position in it the next step starts at */
  guint64  steps;         /*   the run ends once this step is committed; 0: never */
} RlxEventJoined;

/* leader */
typedef struct {
  char   *node;
  guint64 term, step;
} RlxEventLeader;

/* member-joined, member-left: a reason (optional), else the rank's host,
 * backend, device, fallback and precision when has_peer */
typedef struct {
  char    *node, *reason;
  gboolean has_peer;
  char    *host, *backend, *device, *fallback, *precision;
  guint64  step;
} RlxEventMember;

/* step */
typedef struct {
  guint64  step;
  double   loss;
  char    *leader;
  guint64  term, members, samples, assigned, hash;
  guint64  bytes_tx, bytes_rx, bytes_f32;
  gboolean contributed;
  guint64  contributors, late, rejected;
  gint64   time_us;       /* g_get_monotonic_time () when it was committed here */
  gboolean has_outer;     /* an outer round (--sync outer:H): */
  char    *sync;          /*   "outer" */
  guint64  h;             /*   its inner steps */
  guint64  outer_hash;    /*   θ and the outer momentum (rlx_outer_hash) */
  guint64  round_bytes;   /*   one exchanged array at this node's wire precision */
  gboolean has_agree;     /* on the leader: */
  guint64  agree;         /*   ranks (itself too) whose parameters after this step had
                           *   its hash, by their acknowledgements */
} RlxEventStep;

/* diverged: @node's parameters at @step hash to @hash, not the commit's
 * @expected (the leader reports a member's acknowledgement; a member its own
 * state against the leader's; it then asks for a snapshot). @outer: the
 * hashes are outer hashes (θ and the outer momentum, rlx_outer_hash): θ
 * agreed, the momentum did not (written only when set). */
typedef struct {
  char    *node;
  guint64  step, hash, expected;
  gboolean outer;
} RlxEventDiverged;

/* sync: the mode ("step" or "outer"), H (1 in the step mode), what this
 * node asked for (--sync), why; with has_outer the outer optimizer's
 * settings and the inner SGD's rate in the round now assigned (inner_lr: --lr
 * scaled by the round's ranks, rlx_outer_inner_lr; 0 before the first) */
typedef struct {
  char    *mode;
  guint64  h;
  char    *requested, *reason;
  gboolean has_outer;
  double   outer_lr, outer_momentum, inner_lr;
  guint64  fragments;
} RlxEventSync;

/* links: each of this node's links as measured (core/cohort/rlx-link-estimates.h),
 * "host-b 24 MB/s, 51 ms; host-c local"; how many stay on this host (local)
 * and how many do not (remote) */
typedef struct {
  char    *text;
  guint64  remote, local;
} RlxEventLinks;

/* timing: on the leader, about once a second per rank (itself too): how
 * long @node's share of a step takes to compute (compute_us: its own
 * measure, but never less than the leader sees it take, from the
 * assignment to its gradient's arrival, beyond the round's first) and how
 * long a round takes (round_us: from the assignment to the commit, the
 * same for every rank); the rest of the round, round_us - compute_us, it
 * waits. Both are smoothed; @step is the commit they were read at. */
typedef struct {
  char    *node;
  guint64  step, compute_us, round_us;
} RlxEventTiming;

/* evaluated */
typedef struct {
  guint64 step;
  double  accuracy, test_loss;   /* test_loss -1 if not finite */
} RlxEventEvaluated;

/* checkpoint */
typedef struct {
  guint64 step;
  char   *path;
} RlxEventCheckpoint;

/* resumed */
typedef struct {
  guint64 step, hash;
  char   *path;
  gboolean has_outer;     /* the checkpoint carried the outer state: */
  guint64 outer_hash;     /*   θ and the momentum as resumed (rlx_outer_hash) */
} RlxEventResumed;

/* snapshot: from (taken) or to (sent), both optional; reason optional */
typedef struct {
  char   *from, *to;
  guint64 step, hash;
  char   *reason;
} RlxEventSnapshot;

/* precision */
typedef struct {
  char *node, *precision;
} RlxEventPrecision;

/* merged */
typedef struct {
  char    *node;
  guint64  discarded, from_step, to_step;
  gboolean exact;
  char    *rule;
} RlxEventMerged;

/* refused */
typedef struct {
  char *node, *reason, *by;
} RlxEventRefused;

/* rejected: step when has_step; by (who rejected it) optional */
typedef struct {
  char    *node;
  gboolean has_step;
  guint64  step;
  char    *reason, *by;
} RlxEventRejected;

/* late, ack-timeout: reason optional */
typedef struct {
  char   *node;
  guint64 step;
  char   *reason;
} RlxEventNodeStep;

/* dropped */
typedef struct {
  char   *node, *class;
  guint64 total;
  char   *reason;
} RlxEventDropped;

/* send-failed, rejoining, waiting, error: every field optional */
typedef struct {
  char *node, *reason, *server;
} RlxEventNote;

/* done: the run's end, and the round statistics (core/cohort/rlx-round-stats.h
 * says what each means) in groups */
typedef struct {
  char    *node;
  gboolean success;
  char    *message;
  guint64  step, hash;
  double   loss;
  guint64  late, rejected;
  gboolean busy_poll;
  gboolean has_rounds;
  guint64  rounds_measured;
  double   round_ms, compute_ms, coordinator_ms, send_ms;
  gboolean has_cpu;
  double   cpu_ms;
  gboolean has_cpu_rate;
  double   samples_per_cpu_second;
  gboolean has_backend;
  guint64  steps_measured;
  double   host_bytes_per_step, own_ahead, update_ahead, worker_wait_ms, own_run_ms,
           finish_run_ms, finish_hop_ms, device_finish_ms, device_grad_ms;
  guint64  bytes_tx, bytes_rx, bytes_f32;
} RlxEventDone;

/* invite: the whole invite, key included (a log shows it redacted) */
typedef struct {
  char   *invite, *cohort;
  guint64 port;
  char   *fingerprint;
} RlxEventInvite;

/* signalling: state "joined" (server, peers, hosted when has_room),
 * "empty" (has_room, peers 0: every other node the room had left),
 * "lost", "unreachable", "refused" (reason, server optional) */
typedef struct {
  char    *state, *reason, *server;
  gboolean has_room;
  guint64  peers;
  gboolean hosted;
} RlxEventSignalling;

/* link-up */
typedef struct {
  char   *node, *host, *path;
  guint64 rtt_us;
} RlxEventLinkUp;

/* link-down, link-failed */
typedef struct {
  char *node, *reason, *code;
} RlxEventLinkLost;

typedef struct _RlxEvent RlxEvent;
struct _RlxEvent
{
  RlxEventKind kind;
  union {
    RlxEventJoined     joined;
    RlxEventLeader     leader;
    RlxEventMember     member;        /* MEMBER_JOINED, MEMBER_LEFT */
    RlxEventStep       step;
    RlxEventEvaluated  evaluated;
    RlxEventCheckpoint checkpoint;
    RlxEventResumed    resumed;
    RlxEventSnapshot   snapshot;
    RlxEventPrecision  precision;
    RlxEventMerged     merged;
    RlxEventRefused    refused;
    RlxEventRejected   rejected;
    RlxEventNodeStep   node_step;     /* LATE, ACK_TIMEOUT */
    RlxEventDropped    dropped;
    RlxEventNote       note;          /* SEND_FAILED, REJOINING, WAITING, ERROR */
    RlxEventDone       done;
    RlxEventInvite     invite;
    RlxEventSignalling signalling;
    RlxEventLinkUp     link_up;
    RlxEventLinkLost   link_lost;     /* LINK_DOWN, LINK_FAILED */
    RlxEventSync       sync;
    RlxEventDiverged   diverged;
    RlxEventLinks      links;
    RlxEventTiming     timing;
  } u;
};

#define RLX_EVENT_READ_ERROR (rlx_event_read_error_quark ())
GQuark       rlx_event_read_error_quark (void);   /* code 0: not an event */

#define RLX_TYPE_EVENT (rlx_event_get_type ())
GType        rlx_event_get_type   (void) G_GNUC_CONST;

/* A new event of @kind, every field zero or NULL (transfer full). */
RlxEvent    *rlx_event_new        (RlxEventKind kind);
/* rlx_event_note_new (RLX_EVENT_ERROR, node, reason): a note kind with its
 * node and reason copied (either may be NULL). */
RlxEvent    *rlx_event_note_new   (RlxEventKind kind, const char *node, const char *reason);
RlxEvent    *rlx_event_ref        (RlxEvent *event);
void         rlx_event_unref      (RlxEvent *event);

/* "member-joined" for RLX_EVENT_MEMBER_JOINED; NULL for no kind. */
const char  *rlx_event_kind_name  (RlxEventKind kind);
gboolean     rlx_event_kind_from_name (const char *name, RlxEventKind *kind);
static inline const char *
rlx_event_name (const RlxEvent *event)
{
  return rlx_event_kind_name (event->kind);
}

/* The JSON object of @event (transfer full), as --json prints it. */
JsonObject  *rlx_event_to_json      (const RlxEvent *event);
/* One line of JSON, no newline (transfer full). */
char        *rlx_event_to_json_line (const RlxEvent *event);
/* The event @object describes, or NULL with @error naming the member that
 * is wrong (an unknown event, a member of the wrong type). Members the kind
 * does not have are ignored; missing ones stay zero. */
RlxEvent    *rlx_event_from_json    (JsonObject *object, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxEvent, rlx_event_unref)

G_END_DECLS
