/* rlx-chart-export.h — the loss chart's window actions
 *
 *   win.chart-time-axis  boolean: the x axis shows the wall clock, not steps
 *   win.export-csv       a file chooser, then every step's loss, smoothed
 *                        loss, time and test accuracy written there as CSV
 *
 * The points are copied on the main thread (a memcpy) and formatted and
 * written on a worker thread, so a long run's export never blocks the
 * window. Main thread.
 */
#pragma once

#include <adwaita.h>
#include "rlx-loss-chart.h"

G_BEGIN_DECLS

void     rlx_chart_actions_install   (GtkApplicationWindow *window, RlxLossChart *chart,
                                      AdwToastOverlay *toasts);

/* What export-csv does once a file is chosen (and what tests call). */
void     rlx_chart_export_csv_async  (RlxLossChart *chart, GFile *file, GCancellable *cancellable,
                                      GAsyncReadyCallback callback, gpointer user_data);
gboolean rlx_chart_export_csv_finish (GAsyncResult *result, GError **error);

G_END_DECLS
