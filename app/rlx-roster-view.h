/* rlx-roster-view.h — the roster: one row per rank of the cohort
 *
 * A GtkColumnView over a roster (a GListModel of RlxRosterEntry,
 * rlx-coordinator.h; in the app, the node thread's mirror of the
 * coordinator's, rlx_node_thread_get_roster): rank (leader and this node marked),
 * host and node id, backend and device, the fallback reason in words, wire
 * precision, samples/s, state, and bytes sent and received. Cells bind to
 * the entries' properties, so they change in place; rows come and go with
 * the model. A heading says how many ranks there are (assistive technology
 * cannot count GtkColumnView rows in GTK 4.8). A fallback reason every rank
 * shares is said once, in a banner above the table; the rows then show a
 * short tag, with the full text as its tooltip. At narrow widths the
 * least needed columns give way (Received, Sent, Precision, State).
 *
 * Threads: the UI thread (the roster it shows is the node thread's mirror,
 * synced on the UI thread).
 */
#pragma once

#include <gtk/gtk.h>
#include "core/rlx-coordinator.h"

G_BEGIN_DECLS

#define RLX_TYPE_ROSTER_VIEW (rlx_roster_view_get_type ())
G_DECLARE_FINAL_TYPE (RlxRosterView, rlx_roster_view, RLX, ROSTER_VIEW, GtkWidget)

/* Property "model": the roster (GListModel of RlxRosterEntry), or NULL. */
GtkWidget  *rlx_roster_view_new       (void);
void        rlx_roster_view_set_model (RlxRosterView *self, GListModel *model);
GListModel *rlx_roster_view_get_model (RlxRosterView *self);
/* The heading's text ("3 ranks"), for tests. */
const char *rlx_roster_view_get_summary (RlxRosterView *self);

/* Cell text, as the view shows it (also used by tests). */
char       *rlx_roster_format_rank      (guint rank, gboolean is_leader, gboolean is_self);
char       *rlx_roster_format_precision (const char *precision);
char       *rlx_roster_format_speed     (double samples_per_s);
char       *rlx_roster_format_bytes     (guint64 bytes);
char       *rlx_roster_format_fallback  (const char *fallback);
/* The reason's first clause, at most RLX_ROSTER_TAG_CHARS characters: what
 * a row says when every row shares the reason (the banner says it all). */
#define RLX_ROSTER_TAG_CHARS 28
char       *rlx_roster_format_fallback_tag (const char *fallback);
/* That reason, while the banner shows it (two rows or more agreeing), or NULL. */
const char *rlx_roster_view_get_shared_reason (RlxRosterView *self);
/* A row's spoken name: "Rank 1, HOST, cpu, computing, 150 k samples/s". */
char       *rlx_roster_format_row_name  (RlxRosterEntry *entry);

G_END_DECLS
