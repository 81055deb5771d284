/* rlx-timeline.h — who was in the cohort and who led it, step by step, and
 * whether the ranks' parameters agree
 *
 * RlxTimeline follows a node's typed events (core/event/rlx-event.h): each
 * join, departure, change of leader (a new term) and merge becomes a mark
 * (RlxTimelineMark: the step, the kind, the words), newest first, the last
 * RLX_TIMELINE_MAX kept. The same marks go on the loss chart.
 *
 * It also keeps the hash light: on the leader, each committed step says how
 * many ranks' acknowledged parameters hash like the commit ("3 of 3 agree at
 * step 120"); a "diverged" event turns the alarm on ("n2 diverged at step
 * 8") until a later step has every rank agreeing again. On a member, its own
 * state against the leader's: it agrees while no divergence is reported.
 *
 * And, on the leader, each rank's late and rejected gradients, with a
 * straggler mark for one whose gradient missed the deadline within the
 * last RLX_STRAGGLER_STEPS steps (it held those rounds up until the
 * deadline): "n2: 5 late, 1 rejected, holds rounds up".
 *
 * Threads: the UI thread (it is fed the events the node thread hands over).
 */
#pragma once

#include <gio/gio.h>
#include "core/event/rlx-event.h"

G_BEGIN_DECLS

#define RLX_TIMELINE_MAX 200
#define RLX_STRAGGLER_STEPS 50

typedef enum {
  RLX_MARK_JOIN,
  RLX_MARK_LEAVE,
  RLX_MARK_LEADER,
  RLX_MARK_MERGE,
} RlxMarkKind;

#define RLX_TYPE_TIMELINE_MARK (rlx_timeline_mark_get_type ())
G_DECLARE_FINAL_TYPE (RlxTimelineMark, rlx_timeline_mark, RLX, TIMELINE_MARK, GObject)

/* Properties (read-only): "step" (uint64), "kind" (int, RlxMarkKind),
 * "title" (string), "icon-name" (string). */
guint64      rlx_timeline_mark_get_step  (RlxTimelineMark *self);
RlxMarkKind  rlx_timeline_mark_get_kind  (RlxTimelineMark *self);
const char  *rlx_timeline_mark_get_title (RlxTimelineMark *self);

#define RLX_TYPE_TIMELINE (rlx_timeline_get_type ())
G_DECLARE_FINAL_TYPE (RlxTimeline, rlx_timeline, RLX, TIMELINE, GObject)

/* A GListModel of RlxTimelineMark, newest first. Properties (read-only,
 * notified on change): "hash-text" (string, NULL before a step), "hash-alarm"
 * (boolean). */
RlxTimeline *rlx_timeline_new           (void);
/* Follow @event, as seen by node @self_id. TRUE if a mark was added. */
gboolean     rlx_timeline_add_event     (RlxTimeline *self, const RlxEvent *event,
                                         const char *self_id);
void         rlx_timeline_clear         (RlxTimeline *self);
const char  *rlx_timeline_get_hash_text (RlxTimeline *self);
gboolean     rlx_timeline_get_hash_alarm (RlxTimeline *self);
/* The ranks with late or rejected gradients, in words (NULL: none); made
 * on each call (a view reads it on its tick). */
char        *rlx_timeline_dup_ranks_text (RlxTimeline *self);

G_END_DECLS
