/* rlx-msg.h — the cohort protocol's messages, parsed and validated once
 *
 * Every frame between nodes is a wire frame (core/wire): a JSON header whose
 * "t" names the kind, and at most one float array. rlx_msg_parse turns a
 * frame into one typed struct per kind (RlxMsgHello, RlxMsgStep, …): every
 * field the kind needs is checked for presence, type and range there, so the
 * protocol code never sees a missing member, a negative step or a hash that
 * is not 16 hex digits. The float array stays where it is, in the frame, as
 * wire codes (RlxMsgArray): decoding, summing and applying it is bulk work
 * for worker threads, not for the main loop that parses.
 *
 * rlx_msg_build is the inverse (every field of the struct, in a fixed
 * order); rlx_msg_frame_new builds a frame whose payload is left for the
 * caller to fill (a quantiser writes straight into it, no copy). The full
 * description of the messages and rules is docs/PROTOCOL.md.
 *
 * Threads: reentrant; a parsed RlxMsg belongs to one thread at a time.
 */
#pragma once

#include <glib.h>
#include "core/wire/rlx-wire.h"

G_BEGIN_DECLS

/* What hello's "v" says; docs/PROTOCOL.md names the same (the `protocol`
 * test checks it). 6: a lineage's identity in hello, leader and snapshot
 * (terms compare only within one founding), and where the step after a
 * commit begins in its step frame; 5: an outer round's slots run over the
 * epoch's end (a
 * slot's start at or past it is in the next epoch's permutation); 4: the
 * sync mode in step frames (outer rounds); 3: parameter hash chunks of
 * 1024 elements; 2: acknowledged
 * commits, seniority by admission, merges. */
#define RLX_MSG_PROTOCOL_VERSION 6

/* Longest node id, cohort name, model or dataset slug (bytes). */
#define RLX_MSG_MAX_ID      64
/* Most members a cohort lists. */
#define RLX_MSG_MAX_MEMBERS 1024
/* Most step hashes a snapshot carries (its sender's recent history). */
#define RLX_MSG_MAX_HASHES  512
/* A snapshot's sparse hashes: of steps hashes_from − RLX_MSG_SPARSE_BASE ×
 * 2^k, k = 0, 1, … (at most RLX_MSG_SPARSE_MAX: 64 … 65536 steps back). */
#define RLX_MSG_SPARSE_BASE 64
#define RLX_MSG_SPARSE_MAX  11
/* Longest free text (reasons, host, device, fallback), bytes. */
#define RLX_MSG_MAX_TEXT    2048

#define RLX_MSG_ERROR (rlx_msg_error_quark ())
GQuark rlx_msg_error_quark (void);
typedef enum {
  RLX_MSG_ERROR_FRAME,    /* not a wire frame (the wire error's message follows) */
  RLX_MSG_ERROR_KIND,     /* "t" missing or not a known kind */
  RLX_MSG_ERROR_FIELD,    /* a member missing, of the wrong type or out of range */
  RLX_MSG_ERROR_ARRAY,    /* an array where none belongs, or none where one must be */
} RlxMsgError;

typedef enum {
  RLX_MSG_HELLO,
  RLX_MSG_REFUSE,
  RLX_MSG_LEADER,
  RLX_MSG_JOIN,
  RLX_MSG_SNAPSHOT,
  RLX_MSG_STEP,
  RLX_MSG_GRAD,
  RLX_MSG_ACK,
  RLX_MSG_REJECT,
  RLX_MSG_HEARTBEAT,
  RLX_MSG_BYE,
  RLX_MSG_N_KINDS
} RlxMsgKind;

/* A role as nodes tell each other. */
typedef enum {
  RLX_ROLE_ALONE,     /* looking for a cohort */
  RLX_ROLE_JOINING,   /* asked a leader for admission or a snapshot */
  RLX_ROLE_MEMBER,
  RLX_ROLE_LEADER,
  RLX_ROLE_STOPPED,
  RLX_ROLE_N
} RlxRole;

const char *rlx_msg_kind_name (RlxMsgKind kind);
const char *rlx_role_name     (RlxRole role);

/* The float array of a message, still as wire codes inside its frame (a
 * reference is held on the frame). */
typedef struct {
  GBytes       *frame;      /* NULL: the message has no array */
  const void   *codes;      /* n × element size bytes inside frame */
  gsize         n;
  RlxPrecision  precision;
  double        scale;
} RlxMsgArray;

/* Decode @a into @out (n floats): what every receiver gets. */
void rlx_msg_array_decode (const RlxMsgArray *a, float *out);
/* f32 arrays that are aligned and little-endian can be read in place. */
const float *rlx_msg_array_f32 (const RlxMsgArray *a);
void rlx_msg_array_clear  (RlxMsgArray *a);
void rlx_msg_array_copy   (RlxMsgArray *dst, const RlxMsgArray *src);

/* Which founding a node's state and terms belong to (docs/PROTOCOL.md,
 * "Lineages"): @lin names the lineage (random, kept in checkpoints, so a
 * resume continues it), @fork the founding (random, new at every founding
 * from nothing or from a checkpoint), @base the step that founding began
 * at. Terms are comparable only between nodes of one fork (the same three);
 * all zero: none (a node that never founded or joined). */
typedef struct {
  guint64 lin, fork, base;
} RlxMsgLineage;

/* Both of one fork (terms comparable): neither is none. */
gboolean rlx_msg_lineage_same_fork (const RlxMsgLineage *a, const RlxMsgLineage *b);

/* hello: the first frame each way on every link. */
typedef struct {
  gint64       version;
  char        *cohort, *seed, *model, *dataset;
  char        *backend, *device, *fallback, *host;
  RlxPrecision precision;
  guint        batch, max_batch;
  RlxRole      role;
  char        *leader;        /* nullable: who it follows or leads */
  guint64      term, step;
  guint        members;       /* size of its cohort (leader or member), else 0 */
  guint64      checkpoint;    /* newest checkpoint step it can resume, 0: none */
  gboolean     join_only;     /* it never founds a cohort */
  RlxMsgLineage lineage;      /* of its state (none: it never founded or joined) */
} RlxMsgHello;

typedef struct { char *reason; } RlxMsgRefuse;

/* leader: @leader leads @term of @lineage's fork from @step on. */
typedef struct {
  char   *leader;
  guint64 term, step;
  RlxMsgLineage lineage;
} RlxMsgLeader;

/* join: admission, or a fresh snapshot (@reason says why). */
typedef struct {
  char   *reason;
  guint64 step, hash;         /* where the sender is */
  gboolean merge;             /* it yields to this leader after a split */
} RlxMsgJoin;

/* snapshot: full-precision parameters after @step commits. */
typedef struct {
  guint64    term;
  char      *leader;
  guint64    step, hash;
  char      *seed;
  guint      epoch, pos;
  double     loss;
  GPtrArray *members;        /* char*, seniority order */
  RlxMsgLineage lineage;      /* the sender's */
  guint64    tbase;           /* the sender's step when its term began (its term base) */
  guint64    hashes_from;     /* step of hashes[0] */
  GArray    *hashes;          /* guint64: the sender's hashes of steps hashes_from… */
  GArray    *sparse;          /* guint64: its hashes of steps hashes_from − 64 × 2^k, k = 0… */
  gboolean   outer;           /* the array is θ then the outer momentum, n_params each */
  guint64    mhash;           /* with outer: rlx_params_hash of the momentum */
  RlxMsgArray params;         /* "params", f32, n_params (the first half with outer) */
  RlxMsgArray momentum;       /* with outer: the second half (the frame referenced) */
} RlxMsgSnapshot;

typedef struct {
  char *node;
  guint start, count;
} RlxMsgSlot;

/* An empty GArray of RlxMsgSlot that frees the slots' node ids. */
GArray *rlx_msg_slots_new (void);

/* step: the commit of step @commit (its update in "avg", when commit > 0)
 * and the assignment of step @step. */
typedef struct {
  guint64    term;
  guint64    step, commit, base;  /* base: hash the commit applies to */
  double     loss;
  guint64    samples;
  GPtrArray *contributors;        /* char* */
  guint      late, rejected;
  double     lr;
  guint      epoch, pos, count;
  GPtrArray *members;             /* char*, seniority order */
  GArray    *assign;              /* RlxMsgSlot (start: absolute position) */
  gboolean   final;
  /* the sync mode (docs/PROTOCOL.md, "Sync modes"; absent: step) */
  guint      h;                   /* the assigned round is an outer round of H inner steps */
  guint      ch;                  /* the commit is an outer round's (of ch inner steps) */
  double     olr, omom;           /* the outer optimizer's lr and momentum (with h or ch) */
  guint      lag;                 /* overlap: the assignment is of step commit + 1 + lag */
  /* where step commit + 1 begins in the sample stream, when the frame names
   * another step (overlap): the position a replica holds after the commit.
   * -1: absent (the frame's epoch and pos are commit + 1's) */
  gint64     cepoch, cpos;
  RlxMsgArray update;             /* "avg" */
} RlxMsgStep;

/* grad: a member's bucket for @step, or its refusal to send one. */
typedef struct {
  guint64  term, step;
  guint    samples;
  double   loss;                  /* NaN when the member's loss was not finite */
  gint64   compute_us;
  gint64   inner_us;              /* outer round: one inner step's compute, µs (0: absent) */
  char    *refused;               /* nullable: why no bucket (a non-finite gradient) */
  RlxMsgArray grads;              /* "g"; absent when refused */
} RlxMsgGrad;

/* ack: the sender applied commit @step; its parameters hash to @hash.
 * After an outer round's commit, @ohash is rlx_outer_hash of its θ and
 * outer momentum (0: absent, as in the step mode). */
typedef struct {
  guint64 term, step, hash;
  guint64 ohash;
} RlxMsgAck;

typedef struct {
  guint64 step;
  char   *reason;
} RlxMsgReject;

/* heartbeat: @t ("clock") is the sender's own clock (ms), only ever echoed
 * back. @role, @leader, @members and @lineage say where the sender stands
 * now (its hello said it only when the link came up): @role RLX_ROLE_N when
 * the heartbeat did not say; @leader whom it follows as a member, or itself
 * as leader (NULL otherwise); @members the size of the group it leads. */
typedef struct {
  guint64 term, step;
  gint64  t, echo;                /* echo: the last t received from the addressee, or -1 */
  gint64  age;                    /* ms between receiving that t and sending this */
  RlxRole role;
  char   *leader;
  guint   members;
  RlxMsgLineage lineage;
} RlxMsgHeartbeat;

typedef struct { char *reason; } RlxMsgBye;

typedef struct {
  RlxMsgKind kind;
  char      *node;                /* the sender */
  union {
    RlxMsgHello     hello;
    RlxMsgRefuse    refuse;
    RlxMsgLeader    leader;
    RlxMsgJoin      join;
    RlxMsgSnapshot  snapshot;
    RlxMsgStep      step;
    RlxMsgGrad      grad;
    RlxMsgAck       ack;
    RlxMsgReject    reject;
    RlxMsgHeartbeat heartbeat;
    RlxMsgBye       bye;
  } u;
  RlxWireInfo info;               /* of the frame it was parsed from */
} RlxMsg;

/* Parse and validate @frame into @msg (zeroed first; clear it after). FALSE
 * with RLX_MSG_ERROR_* naming the kind and the member at fault; @msg is
 * then empty. @limits: NULL for the wire's defaults. */
gboolean rlx_msg_parse (GBytes *frame, const RlxWireLimits *limits, RlxMsg *msg,
                        GError **error);
void     rlx_msg_clear (RlxMsg *msg);
/* Move @src into @dst (@src is left empty): a handler keeps a message it
 * was lent. */
void     rlx_msg_steal (RlxMsg *dst, RlxMsg *src);
/* A zeroed message of @kind from @node. */
void     rlx_msg_init  (RlxMsg *msg, RlxMsgKind kind, const char *node);

/* The frame of @msg; its array (snapshot params, step update, grad bucket)
 * from @values (n floats) encoded at @precision. NULL values: no array.
 * NULL on an encoding error (a bug: the struct is the caller's). */
GBytes  *rlx_msg_build (const RlxMsg *msg, const float *values, gsize n,
                        RlxPrecision precision, GError **error);

/* The header of @msg as a JSON object (without the wire's `_` members), as
 * rlx_msg_build writes it: for encoders that take a header (rlx-kernels). */
JsonObject *rlx_msg_header (const RlxMsg *msg);

/* A frame for @msg whose array of @n elements at @precision and @scale is
 * left uninitialised at *@payload_out for the caller to fill before the
 * frame is sent (e.g. a quantiser writing straight into it). The returned
 * buffer is g_malloc'd, @len_out bytes; wrap it with g_bytes_new_take. */
guint8  *rlx_msg_frame_new (const RlxMsg *msg, gsize n, RlxPrecision precision,
                            double scale, gsize *len_out, guint8 **payload_out,
                            GError **error);

/* The frame of @msg whose array (@n elements at @precision and @scale) is
 * already in @buf at offset @headroom: the header is written into the
 * headroom in front of it, so the array is never copied. @buf (g_malloc'd)
 * is taken and freed with the frame. NULL (and @buf freed) when the header
 * does not fit in @headroom − 4 bytes. */
GBytes  *rlx_msg_frame_wrap (const RlxMsg *msg, gsize n, RlxPrecision precision, double scale,
                             guint8 *buf, gsize headroom, GError **error);

/* 16 lowercase hex digits. */
char    *rlx_msg_hash_to_string (guint64 hash);
gboolean rlx_msg_hash_parse      (const char *s, guint64 *out);

G_END_DECLS
