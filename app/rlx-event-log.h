/* rlx-event-log.h — the events of a cohort, in words a person reads
 *
 * RlxEventLog is a GListModel of RlxEventItem, oldest first. It turns the
 * node's typed events (core/event/rlx-event.h) into sentences: who
 * joined or left and why, refusals, leader changes, a rank that fell back to
 * the CPU and why, steps discarded by a merge, errors. Step events and other
 * routine traffic are not logged; evaluations (many a second) are one
 * updating line, the log's "accuracy-title" and "accuracy-detail". Items that a person
 * should see at once are marked "urgent" (the window shows them as toasts).
 * The log keeps the newest RLX_EVENT_LOG_MAX items.
 *
 * Threads: the UI thread (it is fed the typed events the node thread hands
 * over).
 */
#pragma once

#include <gio/gio.h>
#include "core/event/rlx-event.h"

G_BEGIN_DECLS

#define RLX_EVENT_LOG_MAX 2000

typedef enum {
  RLX_LOG_INFO,
  RLX_LOG_JOINED,
  RLX_LOG_LEFT,
  RLX_LOG_LEADER,
  RLX_LOG_FALLBACK,
  RLX_LOG_REFUSED,
  RLX_LOG_MERGED,
  RLX_LOG_ACCURACY,
  RLX_LOG_WARNING,
  RLX_LOG_ERROR,
} RlxLogKind;

/* What the events page shows: all, who is in the cohort and who leads
 * (joins, departures, refusals, leader changes, merges), or what went wrong
 * (warnings, errors, fallbacks, merges) — the badge counts those. */
typedef enum {
  RLX_LOG_FILTER_ALL,
  RLX_LOG_FILTER_MEMBERSHIP,
  RLX_LOG_FILTER_WARNINGS,
} RlxLogFilter;

#define RLX_TYPE_EVENT_ITEM (rlx_event_item_get_type ())
G_DECLARE_FINAL_TYPE (RlxEventItem, rlx_event_item, RLX, EVENT_ITEM, GObject)

/* Properties (read-only): "kind" (int, RlxLogKind), "time" (string,
 * local HH:MM:SS), "title", "detail" (string, "" if none), "icon-name",
 * "urgent" (boolean), "event" (string: the name of the event it tells,
 * "app" for the app's own). */
RlxLogKind rlx_event_item_get_kind      (RlxEventItem *self);
const char  *rlx_event_item_get_time      (RlxEventItem *self);
const char  *rlx_event_item_get_title     (RlxEventItem *self);
const char  *rlx_event_item_get_detail    (RlxEventItem *self);
const char  *rlx_event_item_get_icon_name (RlxEventItem *self);
const char  *rlx_event_item_get_event     (RlxEventItem *self);
gboolean     rlx_event_item_get_urgent    (RlxEventItem *self);
gboolean     rlx_event_item_is_warning    (RlxEventItem *self);
gboolean     rlx_event_item_in_filter     (RlxEventItem *self, RlxLogFilter filter);

#define RLX_TYPE_EVENT_LOG (rlx_event_log_get_type ())
G_DECLARE_FINAL_TYPE (RlxEventLog, rlx_event_log, RLX, EVENT_LOG, GObject)

RlxEventLog  *rlx_event_log_new       (void);
/* Log @event as seen by node @self_id (NULL: unknown). Returns the items it
 * added (0, 1 or 2), newest last, in @added if not NULL (transfer container:
 * free the array, not the items). */
guint         rlx_event_log_add_event (RlxEventLog *self, const RlxEvent *event,
                                       const char *self_id, GPtrArray **added);
/* Something the app itself has to say (a join that failed, a local rank that
 * exited). */
RlxEventItem *rlx_event_log_add       (RlxEventLog *self, RlxLogKind kind, gboolean urgent,
                                       const char *title, const char *detail);
void          rlx_event_log_clear     (RlxEventLog *self);
/* The last evaluation in words (NULL before one). */
const char   *rlx_event_log_get_accuracy_title  (RlxEventLog *self);
const char   *rlx_event_log_get_accuracy_detail (RlxEventLog *self);

G_END_DECLS
