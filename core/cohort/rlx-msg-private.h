/* rlx-msg-private.h — what the three files of the messages share; not for
 * other files.
 *
 *   rlx-msg-fields.c  the members of each kind, one table per kind
 *   rlx-msg.c         parsing: one reader walks a kind's table
 *   rlx-msg-build.c   building: one writer walks the same table
 */
#pragma once

#include "rlx-msg.h"

G_BEGIN_DECLS

/* The largest step, term or count a message carries (a JSON integer). */
#define RLX_MSG_MAX_STEP ((guint64) G_MAXINT64)

/* The name of @kind's float array ("params", "avg", "g"), NULL when it
 * carries none. */
const char *rlx_msg_array_name (RlxMsgKind kind);

/* What a member holds: how it is read (and checked) and written. */
typedef enum {
  F_STR,        /* a string of at most max bytes (char *) */
  F_ID,         /* an identifier: 1..RLX_MSG_MAX_ID bytes, no control characters (char *) */
  F_UINT,       /* an integer in 0..max (guint or guint64) */
  F_NONNEG,     /* an integer in 0..max kept in a gint64; written as 0 when negative */
  F_INT,        /* any integer (gint64) */
  F_NUM,        /* a finite number (double) */
  F_BOOL,       /* true or false, absent: false (gboolean) */
  F_NAN_UNLESS, /* true or false: present and not true turns the double at offset
                 * into NaN; written as whether that double is finite */
  F_HASH,       /* 16 lowercase hex digits (guint64) */
  F_IDS,        /* an array of at most max distinct node ids (GPtrArray of char *) */
  F_HASHES,     /* an array of at most RLX_MSG_MAX_HASHES hashes, absent: empty (GArray) */
  F_ASSIGN,     /* {node: [start, count]} of at most RLX_MSG_MAX_MEMBERS slots (GArray) */
  F_PRECISION,  /* a wire precision's name (RlxPrecision) */
  F_ROLE,       /* a role's name (RlxRole) */
} RlxMsgFieldType;

/* How a member is written (flags). */
enum {
  W_IF_SET = 1 << 0,  /* only when set: a string, a non-empty array, TRUE, an integer >= 0,
                       * a hash other than 0 */
  W_FINITE = 1 << 1,  /* a number that is not finite is written as 0 */
};

/* One member of a kind's header. Parsing reads the members in table order
 * (so the first member at fault is the one the error names), building
 * writes them in that order. */
typedef struct {
  const char     *name;
  RlxMsgFieldType type;
  gboolean        required;   /* absent (or null): "is missing"; else the default */
  gsize           offset;     /* of the value in RlxMsg */
  gsize           size;       /* of the value (F_UINT: 4 or 8 bytes) */
  guint64         max;        /* F_STR: bytes; F_UINT, F_NONNEG: largest value; F_IDS: entries */
  gint64          dflt;       /* F_INT when absent */
  const char     *dflt_str;   /* F_STR when absent or NULL (NULL: none) */
  guint           write;      /* W_* */
  const char     *with;       /* written only when this other member of the kind is */
} RlxMsgField;

/* Every message's sender. */
extern const RlxMsgField rlx_msg_node_field;

/* The members of @kind (besides "t" and "node"), *@n of them. */
const RlxMsgField *rlx_msg_fields (RlxMsgKind kind, guint *n);

G_END_DECLS
