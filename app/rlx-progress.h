/* rlx-progress.h — how fast the cohort goes, where it stands, what is safe
 *
 * RlxProgress follows a node's typed events (core/event/rlx-event.h):
 *  - steps/s and samples/s over the last few seconds, from the step events'
 *    commit times (time_us) and samples;
 *  - the epoch and how far into it, from "joined" (the dataset's size, the
 *    position the next step starts at, the run's last step) and every
 *    step's samples since; and the time left: to the run's last step when
 *    it has one, else to the end of the epoch;
 *  - the checkpoint: the step of the last one written ("checkpoint") or
 *    resumed from ("resumed"), and how long ago;
 *  - each link's path: a remote link's selected ICE pair ("link-up": host
 *    or server-reflexive candidates: direct QUIC; a relayed one: TURN
 *    relay), or the local bus for a rank on this host with no remote link,
 *    with the bytes exchanged at the rank's wire precision (the roster's);
 *  - each rank's step split into compute and wait, from the leader's
 *    "timing" events (a member sees none: only the leader measures).
 * It keeps a fixed ring of points, so a step costs no allocation; the
 * texts are made when asked for (a view reads them on its UI tick).
 *
 * Threads: the UI thread (fed the events the node thread hands over).
 */
#pragma once

#include <gio/gio.h>
#include "core/event/rlx-event.h"

G_BEGIN_DECLS

typedef struct _RlxProgress RlxProgress;

RlxProgress *rlx_progress_new        (void);
void         rlx_progress_free       (RlxProgress *self);
void         rlx_progress_clear      (RlxProgress *self);
/* Follow @event as node @self_id sees it, received at @now_us
 * (g_get_monotonic_time). */
void         rlx_progress_add_event  (RlxProgress *self, const RlxEvent *event,
                                      const char *self_id, gint64 now_us);
/* 0 until two steps some time apart were seen. */
double       rlx_progress_get_steps_per_s   (RlxProgress *self);
double       rlx_progress_get_samples_per_s (RlxProgress *self);
/* Seconds left (to the run's last step, else the epoch's end); -1: not known. */
double       rlx_progress_get_seconds_left  (RlxProgress *self);
/* "120 steps/s · epoch 2, 40% · 1 min 5 s left in the epoch"; NULL before
 * a step. */
char        *rlx_progress_dup_text            (RlxProgress *self);
/* "Checkpoint at step 400, 12 s ago", "No checkpoint yet"; NULL before a step. */
char        *rlx_progress_dup_checkpoint_text (RlxProgress *self, gint64 now_us);
/* The path of @node_id's link in words ("direct QUIC", "TURN relay"), NULL
 * when there is no remote link to it. */
const char  *rlx_progress_get_link_path       (RlxProgress *self, const char *node_id);
/* Each link of the ranks in @roster (GListModel of RlxRosterEntry):
 * "n2: direct QUIC, 3.1 MB at int8; n3: local bus, 1.2 MB at f32"; NULL: none. */
char        *rlx_progress_dup_links_text      (RlxProgress *self, GListModel *roster);
/* @node_id's step as the leader last measured it: the time it computes and
 * the rest of the round, which it waits (ms). FALSE: not measured. */
gboolean     rlx_progress_get_timing          (RlxProgress *self, const char *node_id,
                                               double *compute_ms, double *wait_ms);
/* "compute 3.1 ms, wait 0.8 ms"; NULL: not measured. */
char        *rlx_progress_dup_timing_text     (RlxProgress *self, const char *node_id);
/* "1 h 5 min", "4 min 10 s", "12 s" */
char        *rlx_progress_format_duration     (double seconds);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxProgress, rlx_progress_free)

G_END_DECLS
