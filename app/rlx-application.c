/* rlx-application.c — the AdwApplication (see the header) */
#include "rlx-config.h"
#include "rlx-application.h"
#include "rlx-benchmark.h"
#include "rlx-preferences-window.h"
#include "rlx-window.h"
#include "core/rlx-node.h"

#include <glib-unix.h>
#include <glib/gi18n.h>
#include <signal.h>
#include <stdio.h>

struct _RlxApplication
{
  AdwApplication  parent_instance;

  char           *cohort;
  gboolean        join;
  int             add_ranks;
  int             benchmark_seconds;
  gboolean        benchmark_chart;
  guint           sigint_id, sigterm_id;
};

G_DEFINE_FINAL_TYPE (RlxApplication, rlx_application, ADW_TYPE_APPLICATION)

static RlxWindow *
active_window (RlxApplication *self)
{
  GtkWindow *w = gtk_application_get_active_window (GTK_APPLICATION (self));

  return RLX_IS_WINDOW (w) ? RLX_WINDOW (w) : NULL;
}

/* ── actions ───────────────────────────────────────────────────────────── */

/* Every window leaves its cohort and stops its ranks before it closes; the
 * application ends with the last window. */
static void
quit_action (GSimpleAction *action, GVariant *param, gpointer user_data)
{
  GApplication *app = user_data;
  GList *windows = g_list_copy (gtk_application_get_windows (GTK_APPLICATION (app)));

  if (windows == NULL)
    g_application_quit (app);
  for (GList *l = windows; l; l = l->next)
    gtk_window_close (l->data);
  g_list_free (windows);
}

static gboolean
transform_locked (GBinding *binding, const GValue *from, GValue *to, gpointer user_data)
{
  g_value_set_boolean (to, g_strcmp0 (g_value_get_string (from), "idle") != 0);
  return TRUE;
}

static void
preferences_action (GSimpleAction *action, GVariant *param, gpointer user_data)
{
  RlxApplication *self = user_data;
  RlxWindow *window = active_window (self);
  g_autoptr(GSettings) settings = g_settings_new (RLX_APP_ID);
  GtkWidget *prefs = rlx_preferences_window_new (settings, FALSE);

  if (window)
    {
      gtk_window_set_transient_for (GTK_WINDOW (prefs), GTK_WINDOW (window));
      g_object_bind_property_full (window, "state", prefs, "locked", G_BINDING_SYNC_CREATE,
                                   transform_locked, NULL, NULL, NULL);
    }
  gtk_window_set_modal (GTK_WINDOW (prefs), TRUE);
  gtk_window_present (GTK_WINDOW (prefs));
}

static void
about_action (GSimpleAction *action, GVariant *param, gpointer user_data)
{
  RlxApplication *self = user_data;
  const char *developers[] = { "The rlx-cluster developers", NULL };
  GtkWidget *about;

  about = g_object_new (ADW_TYPE_ABOUT_WINDOW,
                        "application-name", _("RLX Cluster"),
                        "application-icon", RLX_APP_ID,
                        "version", RLX_VERSION,
                        "comments", _("Train one model together on several processes and machines: "
                                      "an elastic data-parallel cohort, shown live."),
                        "developer-name", _("The rlx-cluster developers"),
                        "developers", developers,
                        "license-type", GTK_LICENSE_CUSTOM,
                        "license", _("MIT or Apache-2.0, at your option."),
                        "translator-credits", _("translator-credits"),
                        "website", "https://github.com/rlx/rlx-cluster",
                        "issue-url", "https://github.com/rlx/rlx-cluster/issues",
                        NULL);
  if (active_window (self))
    gtk_window_set_transient_for (GTK_WINDOW (about), GTK_WINDOW (active_window (self)));
  gtk_window_present (GTK_WINDOW (about));
}

static const GActionEntry app_actions[] = {
  { "quit", quit_action, NULL, NULL, NULL, { 0 } },
  { "preferences", preferences_action, NULL, NULL, NULL, { 0 } },
  { "about", about_action, NULL, NULL, NULL, { 0 } },
};

static gboolean
on_quit_signal (gpointer user_data)
{
  g_action_group_activate_action (G_ACTION_GROUP (user_data), "quit", NULL);
  return G_SOURCE_CONTINUE;
}

/* ── GApplication ──────────────────────────────────────────────────────── */

static int
rlx_application_handle_local_options (GApplication *app, GVariantDict *options)
{
  RlxApplication *self = RLX_APPLICATION (app);

  if (g_variant_dict_contains (options, "version"))
    {
      printf ("rlx-cluster %s\n", RLX_VERSION);
      return 0;
    }
  g_variant_dict_lookup (options, "cohort", "s", &self->cohort);
  self->join = g_variant_dict_contains (options, "join");
  g_variant_dict_lookup (options, "add-ranks", "i", &self->add_ranks);
  g_variant_dict_lookup (options, "benchmark", "i", &self->benchmark_seconds);
  self->benchmark_chart = g_variant_dict_contains (options, "benchmark-chart");

  if (self->cohort && !rlx_node_name_is_valid (self->cohort))
    {
      g_printerr ("rlx-cluster: --cohort: “%s” is not a usable name (1 to 64 of A–Z a–z 0–9 . _ -)\n",
                  self->cohort);
      return 2;
    }
  if (self->add_ranks < 0 || self->add_ranks > 64)
    {
      g_printerr ("rlx-cluster: --add-ranks: %d is not in 0..64\n", self->add_ranks);
      return 2;
    }
  if (self->benchmark_seconds < 0 || self->benchmark_seconds > 3600)
    {
      g_printerr ("rlx-cluster: --benchmark: %d is not in 1..3600 seconds\n",
                  self->benchmark_seconds);
      return 2;
    }
  return -1;
}

static void
on_window_state (RlxWindow *window, GParamSpec *pspec, RlxApplication *self)
{
  if (!g_str_equal (rlx_window_get_state (window), "joined"))
    return;
  g_signal_handlers_disconnect_by_func (window, on_window_state, self);
  for (int i = 0; i < self->add_ranks; i++)
    rlx_window_add_local_rank (window);
}

static void
rlx_application_activate (GApplication *app)
{
  RlxApplication *self = RLX_APPLICATION (app);
  RlxWindow *window = active_window (self);

  if (window)
    {
      gtk_window_present (GTK_WINDOW (window));
      return;
    }
  window = rlx_window_new (ADW_APPLICATION (app), self->cohort);
  gtk_window_present (GTK_WINDOW (window));

  if (self->benchmark_chart)
    rlx_benchmark_chart (window);
  else if (self->benchmark_seconds > 0)
    rlx_benchmark_ui (window, (guint) self->benchmark_seconds,
                      self->add_ranks > 0 ? (guint) self->add_ranks : 3);
  else if (self->join || self->add_ranks > 0)
    {
      if (self->add_ranks > 0)
        g_signal_connect (window, "notify::state", G_CALLBACK (on_window_state), self);
      rlx_window_join (window);
    }
}

static void
rlx_application_startup (GApplication *app)
{
  RlxApplication *self = RLX_APPLICATION (app);
  static const char *quit_accels[] = { "<Control>q", NULL };
  static const char *join_accels[] = { "<Control>j", NULL };
  static const char *add_accels[] = { "<Control><Shift>n", NULL };
  static const char *prefs_accels[] = { "<Control>comma", NULL };
  static const char *log_accels[] = { "<Control>l", NULL };
  static const char *training_accels[] = { "<Alt>1", NULL };
  static const char *events_accels[] = { "<Alt>2", NULL };

  G_APPLICATION_CLASS (rlx_application_parent_class)->startup (app);

  g_action_map_add_action_entries (G_ACTION_MAP (app), app_actions, G_N_ELEMENTS (app_actions),
                                   app);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "app.quit", quit_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "app.preferences", prefs_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "win.join", join_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "win.add-local-rank", add_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "win.log-scale", log_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "win.show-training",
                                         training_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "win.show-events", events_accels);

  /* Ctrl-C in a terminal, or a service manager: leave cleanly too. */
  self->sigint_id = g_unix_signal_add (SIGINT, on_quit_signal, app);
  self->sigterm_id = g_unix_signal_add (SIGTERM, on_quit_signal, app);
}

static void
rlx_application_shutdown (GApplication *app)
{
  RlxApplication *self = RLX_APPLICATION (app);

  g_clear_handle_id (&self->sigint_id, g_source_remove);
  g_clear_handle_id (&self->sigterm_id, g_source_remove);
  G_APPLICATION_CLASS (rlx_application_parent_class)->shutdown (app);
}

static void
rlx_application_finalize (GObject *object)
{
  RlxApplication *self = RLX_APPLICATION (object);

  g_free (self->cohort);
  G_OBJECT_CLASS (rlx_application_parent_class)->finalize (object);
}

static void
rlx_application_class_init (RlxApplicationClass *klass)
{
  GApplicationClass *app_class = G_APPLICATION_CLASS (klass);

  G_OBJECT_CLASS (klass)->finalize = rlx_application_finalize;
  app_class->handle_local_options = rlx_application_handle_local_options;
  app_class->activate = rlx_application_activate;
  app_class->startup = rlx_application_startup;
  app_class->shutdown = rlx_application_shutdown;
}

static void
rlx_application_init (RlxApplication *self)
{
  const GOptionEntry entries[] = {
    { "cohort", 0, 0, G_OPTION_ARG_STRING, NULL,
      N_("The local cohort to join (default: default)"), N_("NAME") },
    { "join", 0, 0, G_OPTION_ARG_NONE, NULL, N_("Join the cohort at start"), NULL },
    { "add-ranks", 0, 0, G_OPTION_ARG_INT, NULL,
      N_("After joining, start N local ranks"), "N" },
    { "benchmark", 0, 0, G_OPTION_ARG_INT, NULL,
      N_("Join, start the local ranks (--add-ranks, default 3), measure the UI for SECONDS, "
         "print JSON and quit"), N_("SECONDS") },
    { "benchmark-chart", 0, 0, G_OPTION_ARG_NONE, NULL,
      N_("Time chart redraws with 100,000 points, print JSON and quit"), NULL },
    { "check-display", 0, 0, G_OPTION_ARG_NONE, NULL,
      N_("Exit 0 if a window can open here; else say why and exit 3"), NULL },
    { "version", 0, 0, G_OPTION_ARG_NONE, NULL, N_("Print the version and exit"), NULL },
    { NULL }
  };

  g_application_add_main_option_entries (G_APPLICATION (self), entries);
  g_application_set_option_context_summary (G_APPLICATION (self),
    _("RLX Cluster: train one model together on several processes and machines."));
}

RlxApplication *
rlx_application_new (void)
{
  return g_object_new (RLX_TYPE_APPLICATION,
                       "application-id", RLX_APP_ID,
                       "flags", G_APPLICATION_NON_UNIQUE,
                       "resource-base-path", "/io/github/rlx/Cluster",
                       NULL);
}
