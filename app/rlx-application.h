/* rlx-application.h — RLX Cluster, the desktop app
 *
 * An AdwApplication whose window is one node of a cohort. Not unique: every
 * running app is a node with one rank, so a second launch is a second rank.
 *
 * Command line: --cohort NAME (the local cohort; default "default"),
 * --join (join at start), --add-ranks N (then start N local ranks),
 * --benchmark SECONDS (measure the UI while the ranks train, print the
 * figures as JSON and quit; see rlx-benchmark.h), --benchmark-chart (time
 * chart redraws with 100,000 points and quit).
 *
 * Quit (Ctrl+Q, the window's close button, SIGINT, SIGTERM) leaves the
 * cohort and stops the local ranks before the process exits.
 *
 * Threads: the UI thread (GTK's main thread).
 */
#pragma once

#include <adwaita.h>

G_BEGIN_DECLS

#define RLX_TYPE_APPLICATION (rlx_application_get_type ())
G_DECLARE_FINAL_TYPE (RlxApplication, rlx_application, RLX, APPLICATION, AdwApplication)

RlxApplication *rlx_application_new (void);

G_END_DECLS
