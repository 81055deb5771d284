/* rlx-window-private.h — the window's parts, for tests and the benchmark */
#pragma once

#include "rlx-window.h"
#include "rlx-event-log.h"
#include "rlx-events-view.h"
#include "rlx-cohort-panel.h"
#include "rlx-local-ranks.h"
#include "rlx-loss-chart.h"
#include "rlx-roster-view.h"
#include "rlx-wire-panel.h"
#include "rlx-sync-panel.h"
#include "core/rlx-node-thread.h"

G_BEGIN_DECLS

/* The window's node (its own thread; see rlx-node-thread.h), NULL when idle. */
RlxNodeThread   *rlx_window_get_node        (RlxWindow *self);
RlxLocalRanks   *rlx_window_get_local_ranks (RlxWindow *self);
RlxLossChart    *rlx_window_get_chart       (RlxWindow *self);
RlxRosterView   *rlx_window_get_roster_view (RlxWindow *self);
RlxWirePanel *rlx_window_get_wire_panel    (RlxWindow *self);
RlxEventLog     *rlx_window_get_event_log   (RlxWindow *self);
GtkDropDown     *rlx_window_get_precision_dropdown (RlxWindow *self);

G_END_DECLS
