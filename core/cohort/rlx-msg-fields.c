/* rlx-msg-fields.c — the members of each message kind (docs/PROTOCOL.md,
 * "Messages"): name, type, where the value lives, required or not, bounds,
 * defaults and how it is written. rlx-msg.c reads and rlx-msg-build.c
 * writes every kind through these tables; tests/cohort/test-msg.c holds
 * them to an independent list.
 */
#include "rlx-config.h"
#include "rlx-msg-private.h"
#include "core/cohort/rlx-outer.h"

#define MAX_STEP RLX_MSG_MAX_STEP
#define MAX_U32  ((guint64) G_MAXINT32)
#define MAX_TEXT RLX_MSG_MAX_TEXT
#define AT(kind, member) \
  G_STRUCT_OFFSET (RlxMsg, u.kind.member), sizeof (((RlxMsg *) NULL)->u.kind.member)
#define REQ TRUE
#define OPT FALSE

const RlxMsgField rlx_msg_node_field = {
  "node", F_ID, REQ, G_STRUCT_OFFSET (RlxMsg, node), sizeof (char *), 0, 0, NULL, 0, NULL
};

static const RlxMsgField hello_fields[] = {
  { "v",          F_INT,       REQ, AT (hello, version),    0, 0, NULL, 0, NULL },
  { "cohort",     F_ID,        REQ, AT (hello, cohort),     0, 0, NULL, 0, NULL },
  { "seed",       F_STR,       REQ, AT (hello, seed),       32, 0, NULL, 0, NULL },
  { "model",      F_ID,        REQ, AT (hello, model),      0, 0, NULL, 0, NULL },
  { "dataset",    F_ID,        REQ, AT (hello, dataset),    0, 0, NULL, 0, NULL },
  { "backend",    F_STR,       REQ, AT (hello, backend),    RLX_MSG_MAX_ID, 0, NULL, 0, NULL },
  { "device",     F_STR,       REQ, AT (hello, device),     MAX_TEXT, 0, NULL, 0, NULL },
  { "fallback",   F_STR,       REQ, AT (hello, fallback),   MAX_TEXT, 0, NULL, 0, NULL },
  { "host",       F_STR,       REQ, AT (hello, host),       MAX_TEXT, 0, NULL, 0, NULL },
  { "precision",  F_PRECISION, REQ, AT (hello, precision),  0, 0, NULL, 0, NULL },
  { "batch",      F_UINT,      REQ, AT (hello, batch),      1u << 24, 0, NULL, 0, NULL },
  { "max_batch",  F_UINT,      REQ, AT (hello, max_batch),  1u << 24, 0, NULL, 0, NULL },
  { "role",       F_ROLE,      REQ, AT (hello, role),       0, 0, NULL, 0, NULL },
  { "leader",     F_ID,        OPT, AT (hello, leader),     0, 0, NULL, W_IF_SET, NULL },
  { "term",       F_UINT,      REQ, AT (hello, term),       MAX_STEP, 0, NULL, 0, NULL },
  { "step",       F_UINT,      REQ, AT (hello, step),       MAX_STEP, 0, NULL, 0, NULL },
  { "members",    F_UINT,      REQ, AT (hello, members),    RLX_MSG_MAX_MEMBERS, 0, NULL, 0, NULL },
  { "checkpoint", F_UINT,      OPT, AT (hello, checkpoint), MAX_STEP, 0, NULL, 0, NULL },
  { "join_only",  F_BOOL,      OPT, AT (hello, join_only),  0, 0, NULL, 0, NULL },
  { "lin",        F_HASH,      OPT, AT (hello, lineage.lin),  0, 0, NULL, W_IF_SET, NULL },
  { "fork",       F_HASH,      OPT, AT (hello, lineage.fork), 0, 0, NULL, 0, "lin" },
  { "fbase",      F_UINT,      OPT, AT (hello, lineage.base), MAX_STEP, 0, NULL, 0, "lin" },
};

static const RlxMsgField refuse_fields[] = {
  { "reason", F_STR, REQ, AT (refuse, reason), MAX_TEXT, 0, NULL, 0, NULL },
};

static const RlxMsgField leader_fields[] = {
  { "leader", F_ID,   REQ, AT (leader, leader), 0, 0, NULL, 0, NULL },
  { "term",   F_UINT, REQ, AT (leader, term),   MAX_STEP, 0, NULL, 0, NULL },
  { "step",   F_UINT, REQ, AT (leader, step),   MAX_STEP, 0, NULL, 0, NULL },
  { "lin",    F_HASH, OPT, AT (leader, lineage.lin),  0, 0, NULL, W_IF_SET, NULL },
  { "fork",   F_HASH, OPT, AT (leader, lineage.fork), 0, 0, NULL, 0, "lin" },
  { "fbase",  F_UINT, OPT, AT (leader, lineage.base), MAX_STEP, 0, NULL, 0, "lin" },
};

static const RlxMsgField join_fields[] = {
  { "reason", F_STR,  REQ, AT (join, reason), MAX_TEXT, 0, NULL, 0, NULL },
  { "step",   F_UINT, REQ, AT (join, step),   MAX_STEP, 0, NULL, 0, NULL },
  { "hash",   F_HASH, REQ, AT (join, hash),   0, 0, NULL, 0, NULL },
  { "merge",  F_BOOL, OPT, AT (join, merge),  0, 0, NULL, W_IF_SET, NULL },
};

static const RlxMsgField snapshot_fields[] = {
  { "term",        F_UINT,   REQ, AT (snapshot, term),        MAX_STEP, 0, NULL, 0, NULL },
  { "leader",      F_ID,     REQ, AT (snapshot, leader),      0, 0, NULL, 0, NULL },
  { "step",        F_UINT,   REQ, AT (snapshot, step),        MAX_STEP, 0, NULL, 0, NULL },
  { "hash",        F_HASH,   REQ, AT (snapshot, hash),        0, 0, NULL, 0, NULL },
  { "seed",        F_STR,    REQ, AT (snapshot, seed),        32, 0, NULL, 0, NULL },
  { "epoch",       F_UINT,   REQ, AT (snapshot, epoch),       MAX_U32, 0, NULL, 0, NULL },
  { "pos",         F_UINT,   REQ, AT (snapshot, pos),         MAX_U32, 0, NULL, 0, NULL },
  { "loss",        F_NUM,    REQ, AT (snapshot, loss),        0, 0, NULL, W_FINITE, NULL },
  { "members",     F_IDS,    REQ, AT (snapshot, members),     RLX_MSG_MAX_MEMBERS, 0, NULL, 0, NULL },
  { "lin",         F_HASH,   OPT, AT (snapshot, lineage.lin),  0, 0, NULL, W_IF_SET, NULL },
  { "fork",        F_HASH,   OPT, AT (snapshot, lineage.fork), 0, 0, NULL, 0, "lin" },
  { "fbase",       F_UINT,   OPT, AT (snapshot, lineage.base), MAX_STEP, 0, NULL, 0, "lin" },
  { "tbase",       F_UINT,   OPT, AT (snapshot, tbase),       MAX_STEP, 0, NULL, 0, NULL },
  { "hashes_from", F_UINT,   OPT, AT (snapshot, hashes_from), MAX_STEP, 0, NULL, 0, "hashes" },
  { "hashes",      F_HASHES, OPT, AT (snapshot, hashes),      0, 0, NULL, W_IF_SET, NULL },
  { "sparse",      F_HASHES, OPT, AT (snapshot, sparse),      0, 0, NULL, W_IF_SET, NULL },
  { "outer",       F_BOOL,   OPT, AT (snapshot, outer),       0, 0, NULL, W_IF_SET, NULL },
  { "mhash",       F_HASH,   OPT, AT (snapshot, mhash),       0, 0, NULL, 0, "outer" },
};

static const RlxMsgField step_fields[] = {
  { "term",         F_UINT,   REQ, AT (step, term),         MAX_STEP, 0, NULL, 0, NULL },
  { "step",         F_UINT,   REQ, AT (step, step),         MAX_STEP, 0, NULL, 0, NULL },
  { "commit",       F_UINT,   REQ, AT (step, commit),       MAX_STEP, 0, NULL, 0, NULL },
  { "base",         F_HASH,   REQ, AT (step, base),         0, 0, NULL, 0, NULL },
  { "loss",         F_NUM,    REQ, AT (step, loss),         0, 0, NULL, W_FINITE, NULL },
  { "samples",      F_UINT,   REQ, AT (step, samples),      MAX_U32, 0, NULL, 0, NULL },
  { "contributors", F_IDS,    REQ, AT (step, contributors), RLX_MSG_MAX_MEMBERS, 0, NULL, 0, NULL },
  { "late",         F_UINT,   REQ, AT (step, late),         MAX_U32, 0, NULL, 0, NULL },
  { "rejected",     F_UINT,   REQ, AT (step, rejected),     MAX_U32, 0, NULL, 0, NULL },
  { "lr",           F_NUM,    REQ, AT (step, lr),           0, 0, NULL, 0, NULL },
  { "epoch",        F_UINT,   REQ, AT (step, epoch),        MAX_U32, 0, NULL, 0, NULL },
  { "pos",          F_UINT,   REQ, AT (step, pos),          MAX_U32, 0, NULL, 0, NULL },
  { "count",        F_UINT,   REQ, AT (step, count),        MAX_U32, 0, NULL, 0, NULL },
  { "members",      F_IDS,    REQ, AT (step, members),      RLX_MSG_MAX_MEMBERS, 0, NULL, 0, NULL },
  { "assign",       F_ASSIGN, REQ, AT (step, assign),       0, 0, NULL, 0, NULL },
  { "final",        F_BOOL,   OPT, AT (step, final),        0, 0, NULL, 0, NULL },
  { "h",            F_UINT,   OPT, AT (step, h),            RLX_OUTER_MAX_H, 0, NULL, W_IF_SET, NULL },
  { "ch",           F_UINT,   OPT, AT (step, ch),           RLX_OUTER_MAX_H, 0, NULL, W_IF_SET, NULL },
  { "olr",          F_NUM,    OPT, AT (step, olr),          0, 0, NULL, W_IF_SET, NULL },
  { "omom",         F_NUM,    OPT, AT (step, omom),         0, 0, NULL, 0, "olr" },
  { "lag",          F_UINT,   OPT, AT (step, lag),          1, 0, NULL, W_IF_SET, NULL },
  { "cepoch",       F_INT,    OPT, AT (step, cepoch),       0, -1, NULL, W_IF_SET, NULL },
  { "cpos",         F_INT,    OPT, AT (step, cpos),         0, -1, NULL, W_IF_SET, NULL },
};

static const RlxMsgField grad_fields[] = {
  { "term",        F_UINT,       REQ, AT (grad, term),       MAX_STEP, 0, NULL, 0, NULL },
  { "step",        F_UINT,       REQ, AT (grad, step),       MAX_STEP, 0, NULL, 0, NULL },
  { "samples",     F_UINT,       REQ, AT (grad, samples),    MAX_U32, 0, NULL, 0, NULL },
  { "loss",        F_NUM,        REQ, AT (grad, loss),       0, 0, NULL, W_FINITE, NULL },
  { "loss_finite", F_NAN_UNLESS, OPT, AT (grad, loss),       0, 0, NULL, 0, NULL },
  { "compute_us",  F_NONNEG,     OPT, AT (grad, compute_us), MAX_STEP, 0, NULL, 0, NULL },
  { "inner_us",    F_NONNEG,     OPT, AT (grad, inner_us),   MAX_STEP, 0, NULL, W_IF_SET, NULL },
  { "refused",     F_STR,        OPT, AT (grad, refused),    MAX_TEXT, 0, NULL, W_IF_SET, NULL },
};

static const RlxMsgField ack_fields[] = {
  { "term", F_UINT, REQ, AT (ack, term), MAX_STEP, 0, NULL, 0, NULL },
  { "step", F_UINT, REQ, AT (ack, step), MAX_STEP, 0, NULL, 0, NULL },
  { "hash", F_HASH, REQ, AT (ack, hash), 0, 0, NULL, 0, NULL },
  { "ohash", F_HASH, OPT, AT (ack, ohash), 0, 0, NULL, W_IF_SET, NULL },
};

static const RlxMsgField reject_fields[] = {
  { "step",   F_UINT, REQ, AT (reject, step),   MAX_STEP, 0, NULL, 0, NULL },
  { "reason", F_STR,  REQ, AT (reject, reason), MAX_TEXT, 0, NULL, 0, NULL },
};

static const RlxMsgField heartbeat_fields[] = {
  { "term",  F_UINT,   REQ, AT (heartbeat, term), MAX_STEP, 0, NULL, 0, NULL },
  { "step",  F_UINT,   REQ, AT (heartbeat, step), MAX_STEP, 0, NULL, 0, NULL },
  { "clock", F_INT,    OPT, AT (heartbeat, t),    0, -1, NULL, W_IF_SET, NULL },
  { "echo",  F_INT,    OPT, AT (heartbeat, echo), 0, -1, NULL, W_IF_SET, NULL },
  { "age",   F_NONNEG, OPT, AT (heartbeat, age),  MAX_STEP, 0, NULL, 0, "echo" },
  { "role",    F_ROLE,   OPT, AT (heartbeat, role),    0, 0, NULL, W_IF_SET, NULL },
  { "leader",  F_ID,     OPT, AT (heartbeat, leader),  0, 0, NULL, W_IF_SET, NULL },
  { "members", F_UINT,   OPT, AT (heartbeat, members), RLX_MSG_MAX_MEMBERS, 0, NULL, W_IF_SET, NULL },
  { "lin",     F_HASH,   OPT, AT (heartbeat, lineage.lin),  0, 0, NULL, W_IF_SET, NULL },
  { "fork",    F_HASH,   OPT, AT (heartbeat, lineage.fork), 0, 0, NULL, 0, "lin" },
  { "fbase",   F_UINT,   OPT, AT (heartbeat, lineage.base), MAX_STEP, 0, NULL, 0, "lin" },
};

static const RlxMsgField bye_fields[] = {
  { "reason", F_STR, OPT, AT (bye, reason), MAX_TEXT, 0, "left", 0, NULL },
};

#define KIND(fields) { fields, G_N_ELEMENTS (fields) }

static const struct {
  const RlxMsgField *fields;
  guint              n;
} kind_fields[RLX_MSG_N_KINDS] = {
  [RLX_MSG_HELLO]     = KIND (hello_fields),
  [RLX_MSG_REFUSE]    = KIND (refuse_fields),
  [RLX_MSG_LEADER]    = KIND (leader_fields),
  [RLX_MSG_JOIN]      = KIND (join_fields),
  [RLX_MSG_SNAPSHOT]  = KIND (snapshot_fields),
  [RLX_MSG_STEP]      = KIND (step_fields),
  [RLX_MSG_GRAD]      = KIND (grad_fields),
  [RLX_MSG_ACK]       = KIND (ack_fields),
  [RLX_MSG_REJECT]    = KIND (reject_fields),
  [RLX_MSG_HEARTBEAT] = KIND (heartbeat_fields),
  [RLX_MSG_BYE]       = KIND (bye_fields),
};

const RlxMsgField *
rlx_msg_fields (RlxMsgKind kind, guint *n)
{
  g_assert (kind < RLX_MSG_N_KINDS);
  *n = kind_fields[kind].n;
  return kind_fields[kind].fields;
}
