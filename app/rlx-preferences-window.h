/* rlx-preferences-window.h — what the node trains, chosen before joining
 *
 * Model, dataset, backend, batch, learning rate and seed are fixed while a
 * node is in a cohort (they are part of its hello), so the window "locks"
 * them while joined and says why; the synchronisation (`--sync`) too, as
 * it is fixed when the node starts. Everything persists in GSettings
 * (io.github.rlx.Cluster).
 *
 * Threads: the UI thread.
 */
#pragma once

#include <adwaita.h>

G_BEGIN_DECLS

#define RLX_TYPE_PREFERENCES_WINDOW (rlx_preferences_window_get_type ())
G_DECLARE_FINAL_TYPE (RlxPreferencesWindow, rlx_preferences_window, RLX, PREFERENCES_WINDOW,
                      AdwPreferencesWindow)

/* Property "locked": the training settings cannot change now. */
GtkWidget *rlx_preferences_window_new        (GSettings *settings, gboolean locked);
void       rlx_preferences_window_set_locked (RlxPreferencesWindow *self, gboolean locked);

/* One line that sums up @settings: "MLP on Fashion-MNIST · batch 32 · …". */
char      *rlx_preferences_describe_setup    (GSettings *settings);
/* The synchronisation @settings ask for, as `rlx-rank join --sync` takes it:
 * "auto", "step" or "outer:H" (rlx_sync_parse). */
char      *rlx_preferences_sync_request      (GSettings *settings);

G_END_DECLS
