/* rlx-sync-panel.h — how the cohort synchronises, and why
 *
 * The dashboard's view of the sync mode (`--sync`, DESIGN.md "Training
 * across slow links"), from the node's events alone:
 *   - the mode and H ("Outer every 40 steps", "Every step") and why the
 *     leader chose it (the "sync" event's reason);
 *   - each link's measured round trip and throughput (the "links" event);
 *   - progress through the outer round: the time since the last commit of
 *     an outer round over the time the last round took (the rounds commit
 *     as whole "step" events; the bar is the estimate in between);
 *   - bytes per sample: this node's wire bytes between two commits over the
 *     samples they committed.
 *
 * Threads: the UI thread (a widget).
 */
#pragma once

#include <gtk/gtk.h>
#include "core/event/rlx-event.h"

G_BEGIN_DECLS

#define RLX_TYPE_SYNC_PANEL (rlx_sync_panel_get_type ())
G_DECLARE_FINAL_TYPE (RlxSyncPanel, rlx_sync_panel, RLX, SYNC_PANEL, GtkWidget)

GtkWidget  *rlx_sync_panel_new      (void);
/* One of the node's events (sync, links, step; others are ignored) that
 * arrived at monotonic @now_us. */
void        rlx_sync_panel_add_event (RlxSyncPanel *self, const RlxEvent *event, gint64 now_us);
/* Move the round's progress on to @now_us (the window's tick). */
void        rlx_sync_panel_tick      (RlxSyncPanel *self, gint64 now_us);
/* Forget everything (a new cohort). */
void        rlx_sync_panel_reset     (RlxSyncPanel *self);

/* What it shows now (tests). */
const char *rlx_sync_panel_get_mode_text    (RlxSyncPanel *self);
const char *rlx_sync_panel_get_reason_text  (RlxSyncPanel *self);
const char *rlx_sync_panel_get_links_text   (RlxSyncPanel *self);
const char *rlx_sync_panel_get_bytes_text   (RlxSyncPanel *self);
/* The round bar's text ("Outer round 7 · 50 inner steps at lr 0.0707"). */
const char *rlx_sync_panel_get_round_text   (RlxSyncPanel *self);
/* 0..1, and whether the bar shows (outer rounds only). */
double      rlx_sync_panel_get_progress     (RlxSyncPanel *self, gboolean *visible);

G_END_DECLS
