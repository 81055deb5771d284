/* rlx-events-view.h — the events page: newest first, filtered, with the
 * last evaluation as one updating row
 *
 * Shows an RlxEventLog newest first (the log itself is oldest first), under
 * a filter a person picks with three linked toggles: All, Membership (joins,
 * departures, refusals, leader changes, merges) and Warnings (warnings,
 * errors, fallbacks, merges; rlx-event-log.h). Above the list, one row says
 * the last test accuracy (evaluations are on the chart; they would flood a
 * list). Filtering is incremental: an event added costs one check.
 *
 * Threads: the UI thread, like every widget.
 */
#pragma once

#include <gtk/gtk.h>
#include "rlx-event-log.h"

G_BEGIN_DECLS

#define RLX_TYPE_EVENTS_VIEW (rlx_events_view_get_type ())
G_DECLARE_FINAL_TYPE (RlxEventsView, rlx_events_view, RLX, EVENTS_VIEW, GtkWidget)

GtkWidget    *rlx_events_view_new        (void);
void          rlx_events_view_set_log    (RlxEventsView *self, RlxEventLog *log);
/* Property "filter" (int, RlxLogFilter); the toggles follow it. */
void          rlx_events_view_set_filter (RlxEventsView *self, RlxLogFilter filter);
RlxLogFilter  rlx_events_view_get_filter (RlxEventsView *self);
/* What the list shows (tests): the filtered items, newest first. */
GListModel   *rlx_events_view_get_shown  (RlxEventsView *self);

/* Keep @list at its top when new items come in there while it is at the
 * top: GtkListView otherwise keeps the row it showed, and the newest scroll
 * out of sight. @model: the model just given to the list (its selection
 * model; the list must see a change before this does). */
void          rlx_list_keep_newest_visible (GtkListView *list, GListModel *model);

G_END_DECLS
