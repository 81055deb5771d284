/* rlx-sparkline.h — a rank's samples per second over the last minute, as a
 * small line
 *
 * RlxSparkline keeps the last RLX_SPARKLINE_MAX values pushed to it (one a
 * second from its owner) and draws them as a line scaled to their maximum;
 * its accessible description says the last value. Drawing is a few dozen
 * segments, only when a value came in.
 *
 * Threads: the UI thread.
 */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define RLX_SPARKLINE_MAX 60

#define RLX_TYPE_SPARKLINE (rlx_sparkline_get_type ())
G_DECLARE_FINAL_TYPE (RlxSparkline, rlx_sparkline, RLX, SPARKLINE, GtkWidget)

GtkWidget *rlx_sparkline_new      (void);
void       rlx_sparkline_push     (RlxSparkline *self, double value);
guint      rlx_sparkline_get_n    (RlxSparkline *self);
/* The @i-th value kept, oldest first. */
double     rlx_sparkline_get      (RlxSparkline *self, guint i);

G_END_DECLS
