/* rlx-figure.h — a figure that changes while nobody touches the window,
 * shown without a relayout
 *
 * A GtkLabel whose text changes queues a resize, and in GTK 4 every resize
 * reaches the window: the window's whole layout runs again and, under X11,
 * the toplevel's size is computed afresh with round trips to the X server
 * (the monitor's work area). The dashboard's step counters and rates
 * change at every 100 ms tick, so that happened in nearly every frame. A
 * figure is a GtkInscription instead: its size comes from character counts,
 * not from its text, so new text only redraws it.
 *
 * Its accessible name follows the text (a label's does), so screen readers
 * and the AT-SPI tests read it as before.
 *
 * Threads: the UI thread (widgets).
 */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

/* A figure of @min_chars to @nat_chars characters, aligned by @xalign,
 * ellipsized at the end when it gets less room, with the "numeric" style. */
GtkWidget *rlx_figure_new      (guint min_chars, guint nat_chars, float xalign);

/* Show @text (NULL: none); nothing happens when it is the text shown. */
void       rlx_figure_set_text (GtkInscription *figure, const char *text);

G_END_DECLS
