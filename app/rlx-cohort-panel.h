/* rlx-cohort-panel.h — the dashboard's cohort card: the hash light, the
 * progress and checkpoint, the links, and the membership and leader timeline
 *
 * In the lines it always shows (a few, so that the roster below keeps its
 * rows at 800×600): the light and the checkpoint ("Checkpoint at step 400,
 * 12 s ago"), the progress ("120 steps/s · epoch 2, 40% · 1 min left in
 * the epoch"), each link's path and bytes at its precision, and the
 * ranks' late and rejected gradients (RlxProgress, rlx-progress.h, and
 * RlxTimeline make the words). The per-rank sparklines and the timeline
 * fold away in an expander, closed until opened.
 *
 * Shows an RlxTimeline (rlx-timeline.h): a light that says whether the
 * ranks' parameters agree ("3 of 3 agree at step 120", an alarm when one
 * diverged), each rank's late and rejected gradients with a straggler mark,
 * and the marks (joins, departures, terms, merges), newest first.
 * The light's step moves with every commit; the owner calls
 * rlx_cohort_panel_refresh on its UI tick (at most twenty times a second)
 * rather than on every step, so a fast cohort costs no more frames.
 *
 * Threads: the UI thread.
 */
#pragma once

#include <gtk/gtk.h>
#include "rlx-timeline.h"
#include "rlx-progress.h"

G_BEGIN_DECLS

#define RLX_TYPE_COHORT_PANEL (rlx_cohort_panel_get_type ())
G_DECLARE_FINAL_TYPE (RlxCohortPanel, rlx_cohort_panel, RLX, COHORT_PANEL, GtkWidget)

GtkWidget  *rlx_cohort_panel_new          (void);
void        rlx_cohort_panel_set_timeline (RlxCohortPanel *self, RlxTimeline *timeline);
/* Read the light again (the step moved). */
void        rlx_cohort_panel_refresh      (RlxCohortPanel *self);
/* Each rank's samples/s as a sparkline: @roster is a GListModel of
 * RlxRosterEntry (the node thread's mirror; NULL: none). Sample it with
 * rlx_cohort_panel_sample, once a second. */
void        rlx_cohort_panel_set_roster   (RlxCohortPanel *self, GListModel *roster);
void        rlx_cohort_panel_sample       (RlxCohortPanel *self);
/* The sparkline of @node_id (tests; NULL: none). */
GtkWidget  *rlx_cohort_panel_get_sparkline (RlxCohortPanel *self, const char *node_id);
/* What the light says and whether it is the alarm (tests, and the
 * accessible description). */
const char *rlx_cohort_panel_get_light_text (RlxCohortPanel *self);
gboolean    rlx_cohort_panel_get_alarm      (RlxCohortPanel *self);
/* The progress, checkpoint and links lines follow @progress (not owned: it
 * must outlive the panel or be unset); sample reads them, once a second. */
void        rlx_cohort_panel_set_progress (RlxCohortPanel *self, RlxProgress *progress);
/* What they show (tests; NULL: hidden). */
const char *rlx_cohort_panel_get_progress_text   (RlxCohortPanel *self);
const char *rlx_cohort_panel_get_checkpoint_text (RlxCohortPanel *self);
const char *rlx_cohort_panel_get_links_text      (RlxCohortPanel *self);
/* @node_id's step split into compute and wait beside its sparkline, as
 * shown (tests; NULL: not measured, or no such rank). */
const char *rlx_cohort_panel_get_timing_text     (RlxCohortPanel *self, const char *node_id);
/* The expander the sparklines and the timeline fold into. */
GtkExpander *rlx_cohort_panel_get_details        (RlxCohortPanel *self);
/* The ranks' late and rejected gradients as shown (NULL: hidden, none). */
const char *rlx_cohort_panel_get_ranks_text (RlxCohortPanel *self);

G_END_DECLS
