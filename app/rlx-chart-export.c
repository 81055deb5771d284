/* rlx-chart-export.c — the chart's actions and CSV export (see the header) */
#include "rlx-config.h"
#include "rlx-chart-export.h"

#include <glib/gi18n.h>

typedef struct {
  RlxChartCsv *csv;
  GFile       *file;
} ExportJob;

static void
export_job_free (gpointer data)
{
  ExportJob *job = data;

  rlx_chart_csv_free (job->csv);
  g_object_unref (job->file);
  g_free (job);
}

static void
export_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  ExportJob *job = data;
  g_autoptr(GBytes) bytes = rlx_chart_csv_format (job->csv);
  g_autoptr(GError) error = NULL;
  gsize size;
  const char *text = g_bytes_get_data (bytes, &size);

  if (!g_file_replace_contents (job->file, text, size, NULL, FALSE,
                                G_FILE_CREATE_REPLACE_DESTINATION, NULL, cancellable, &error))
    g_task_return_error (task, g_steal_pointer (&error));
  else
    g_task_return_boolean (task, TRUE);
}

void
rlx_chart_export_csv_async (RlxLossChart *chart, GFile *file, GCancellable *cancellable,
                            GAsyncReadyCallback callback, gpointer user_data)
{
  g_autoptr(GTask) task = NULL;
  ExportJob *job;

  g_return_if_fail (RLX_IS_LOSS_CHART (chart));
  g_return_if_fail (G_IS_FILE (file));

  job = g_new0 (ExportJob, 1);
  job->csv = rlx_loss_chart_dup_csv (chart);
  job->file = g_object_ref (file);
  task = g_task_new (chart, cancellable, callback, user_data);
  g_task_set_source_tag (task, rlx_chart_export_csv_async);
  g_task_set_task_data (task, job, export_job_free);
  g_task_run_in_thread (task, export_thread);
}

gboolean
rlx_chart_export_csv_finish (GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (G_IS_TASK (result), FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

/* ── the action ────────────────────────────────────────────────────────── */

static void
on_exported (GObject *source, GAsyncResult *result, gpointer user_data)
{
  g_autoptr(AdwToastOverlay) toasts = user_data;
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;

  if (rlx_chart_export_csv_finish (result, &error))
    /* Translators: a toast after the loss was exported */
    text = g_strdup (_("The loss was exported as CSV"));
  else
    /* Translators: a toast; %s says why */
    text = g_strdup_printf (_("Could not export the loss: %s"), error->message);
  adw_toast_overlay_add_toast (toasts, adw_toast_new (text));
}

static void
on_chooser_response (GtkNativeDialog *dialog, int response, gpointer user_data)
{
  RlxLossChart *chart = g_object_get_data (G_OBJECT (dialog), "rlx-chart");
  AdwToastOverlay *toasts = user_data;

  if (response == GTK_RESPONSE_ACCEPT)
    {
      g_autoptr(GFile) file = gtk_file_chooser_get_file (GTK_FILE_CHOOSER (dialog));
      if (file && chart)
        rlx_chart_export_csv_async (chart, file, NULL, on_exported, g_object_ref (toasts));
    }
  g_object_unref (dialog);
}

static void
export_activated (GSimpleAction *action, GVariant *param, gpointer user_data)
{
  RlxLossChart *chart = user_data;
  GtkRoot *root = gtk_widget_get_root (GTK_WIDGET (chart));
  AdwToastOverlay *toasts = g_object_get_data (G_OBJECT (chart), "rlx-toasts");
  GtkFileChooserNative *dialog;

  /* GtkFileDialog is GTK 4.10; Debian 12 has 4.8 */
  dialog = gtk_file_chooser_native_new (_("Export the Loss as CSV"),
                                        GTK_IS_WINDOW (root) ? GTK_WINDOW (root) : NULL,
                                        GTK_FILE_CHOOSER_ACTION_SAVE, _("_Export"), _("_Cancel"));
  gtk_native_dialog_set_modal (GTK_NATIVE_DIALOG (dialog), TRUE);
  gtk_file_chooser_set_current_name (GTK_FILE_CHOOSER (dialog), "loss.csv");
  g_object_set_data_full (G_OBJECT (dialog), "rlx-chart", g_object_ref (chart), g_object_unref);
  g_signal_connect (dialog, "response", G_CALLBACK (on_chooser_response), toasts);
  gtk_native_dialog_show (GTK_NATIVE_DIALOG (dialog));
}

static void
update_export_enabled (RlxChartSeries *loss, GSimpleAction *action)
{
  g_simple_action_set_enabled (action, rlx_chart_series_get_n_points (loss) > 0);
}

void
rlx_chart_actions_install (GtkApplicationWindow *window, RlxLossChart *chart,
                           AdwToastOverlay *toasts)
{
  g_autoptr(GPropertyAction) time_axis = NULL;
  g_autoptr(GSimpleAction) export = NULL;
  RlxChartSeries *loss;

  g_return_if_fail (GTK_IS_APPLICATION_WINDOW (window));
  g_return_if_fail (RLX_IS_LOSS_CHART (chart));

  time_axis = g_property_action_new ("chart-time-axis", chart, "time-axis");
  g_action_map_add_action (G_ACTION_MAP (window), G_ACTION (time_axis));

  g_object_set_data (G_OBJECT (chart), "rlx-toasts", toasts);
  export = g_simple_action_new ("export-csv", NULL);
  g_signal_connect_object (export, "activate", G_CALLBACK (export_activated), chart, 0);
  loss = rlx_loss_chart_get_loss (chart);
  g_signal_connect_object (loss, "changed", G_CALLBACK (update_export_enabled), export, 0);
  update_export_enabled (loss, export);
  g_action_map_add_action (G_ACTION_MAP (window), G_ACTION (export));
}
