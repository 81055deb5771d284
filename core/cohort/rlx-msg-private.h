/* rlx-msg-private.h — what rlx-msg.c (parsing) and rlx-msg-build.c
 * (building) share; not for other files.
 */
#pragma once

#include "rlx-msg.h"

G_BEGIN_DECLS

/* The largest step, term or count a message carries (a JSON integer). */
#define RLX_MSG_MAX_STEP ((guint64) G_MAXINT64)

/* The name of @kind's float array ("params", "avg", "g"), NULL when it
 * carries none. */
const char *rlx_msg_array_name (RlxMsgKind kind);

G_END_DECLS
