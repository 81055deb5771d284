/* rlx-wire-panel.h — the bytes on the wire and what the precision saves
 *
 * Four figures: bytes sent, bytes received, the current rate each way (over
 * the last few seconds), and the same traffic at f32 — what the last 30 s
 * would have cost without a narrower wire precision, and the share saved
 * (the totals since joining until there is a second sample). The widget
 * samples the node's counters twice a second while one is set (rather than
 * on every frame), so a fast cohort costs it nothing more. The counters are
 * the ones the node's thread stores (rlx_node_thread_get_bytes): reading
 * them never touches the coordinator from the UI thread.
 *
 * Threads: the UI thread.
 */
#pragma once

#include <gtk/gtk.h>
#include "core/rlx-node-thread.h"

G_BEGIN_DECLS

#define RLX_TYPE_WIRE_PANEL (rlx_wire_panel_get_type ())
G_DECLARE_FINAL_TYPE (RlxWirePanel, rlx_wire_panel, RLX, WIRE_PANEL, GtkWidget)

GtkWidget  *rlx_wire_panel_new        (void);
/* Follow @node's counters (NULL: stop; the figures stay). */
void        rlx_wire_panel_set_node      (RlxWirePanel *self, RlxNodeThread *node);
/* Sample the node's counters now. */
void        rlx_wire_panel_refresh       (RlxWirePanel *self);
/* Take one sample: totals so far (bytes) at @now_us (monotonic).
 * rlx_wire_panel_refresh calls this; tests call it directly. */
void        rlx_wire_panel_sample     (RlxWirePanel *self, guint64 tx, guint64 rx,
                                          guint64 f32, gint64 now_us);
/* Forget every sample (a new cohort). */
void        rlx_wire_panel_reset      (RlxWirePanel *self);

/* What the figures say now (tests). */
const char *rlx_wire_panel_get_sent_text   (RlxWirePanel *self);
const char *rlx_wire_panel_get_received_text (RlxWirePanel *self);
const char *rlx_wire_panel_get_rate_text   (RlxWirePanel *self);
const char *rlx_wire_panel_get_saving_text (RlxWirePanel *self);
const char *rlx_wire_panel_get_f32_text    (RlxWirePanel *self);

G_END_DECLS
