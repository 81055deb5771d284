/* main.c — rlx-cluster, the desktop app */
#include "rlx-config.h"
#include "rlx-application.h"
#include "rlx-benchmark.h"
#include "rlx-local-ranks.h"

#include <glib/gi18n.h>
#include <locale.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>

/* Run from a build tree, the settings schema is compiled beside the app
 * (BUILD/data); elsewhere it must be installed. Say so instead of letting
 * GSettings abort. */
static gboolean
find_schema (void)
{
  g_autofree char *exe = g_file_read_link ("/proc/self/exe", NULL);
  g_autoptr(GSettingsSchema) schema = NULL;
  GSettingsSchemaSource *source;

  /* before GSettings reads the variable (it does so once) */
  if (exe)
    {
      g_autofree char *exe_dir = g_path_get_dirname (exe);
      g_autofree char *dir = g_build_filename (exe_dir, "..", "data", NULL);
      g_autofree char *compiled = g_build_filename (dir, "gschemas.compiled", NULL);
      if (g_file_test (compiled, G_FILE_TEST_IS_REGULAR))
        {
          const char *old = g_getenv ("GSETTINGS_SCHEMA_DIR");
          g_autofree char *value = old && *old ? g_strconcat (dir, ":", old, NULL) : g_strdup (dir);
          g_setenv ("GSETTINGS_SCHEMA_DIR", value, TRUE);
        }
    }
  source = g_settings_schema_source_get_default ();
  schema = source ? g_settings_schema_source_lookup (source, RLX_APP_ID, TRUE) : NULL;
  if (schema)
    return TRUE;
  g_printerr ("rlx-cluster: the settings schema %s is not installed.\n"
              "Install the app (meson install), or run it from its build folder, or set\n"
              "GSETTINGS_SCHEMA_DIR to the folder that holds its compiled schema.\n", RLX_APP_ID);
  return FALSE;
}

static gboolean
wants_no_window (int argc, char **argv)
{
  for (int i = 1; i < argc; i++)
    if (g_str_has_prefix (argv[i], "--help") || g_str_equal (argv[i], "-h") ||
        g_str_equal (argv[i], "--version"))
      return TRUE;
  return FALSE;
}

/* Why no display opened, in words a person can act on: which of the
 * variables GDK reads are set, and that none of them led to a display. */
static char *
describe_no_display (void)
{
  const char *names[] = { "WAYLAND_DISPLAY", "DISPLAY", "GDK_BACKEND" };
  g_autoptr(GString) set = g_string_new (NULL);

  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    {
      const char *value = g_getenv (names[i]);
      if (value && *value)
        g_string_append_printf (set, "%s%s=%s", set->len ? ", " : "", names[i], value);
    }
  if (set->len == 0)
    return g_strdup ("neither WAYLAND_DISPLAY nor DISPLAY is set");
  return g_strdup_printf ("GTK could not open a display with %s (is the display server "
                          "running, and may this user connect to it?)", set->str);
}

/* No display: say so, and what does the same job without one. */
static int
no_display (void)
{
  g_autofree char *rlx_rank = rlx_local_ranks_find_rlx_rank ();
  g_autofree char *why = describe_no_display ();

  g_printerr ("rlx-cluster: there is no display to open a window on: %s.\n"
              "The same job without a window, one rank of the local cohort:\n"
              "\n  %s join --local --cohort default --dataset fashion-mnist --evaluate\n\n"
              "(rlx-rank join --help lists its options; run it in more terminals to add ranks.)\n",
              why, rlx_rank);
  return 3;
}

/* --check-display: can a window open here? Exit 0 if so; else print why on
 * stdout and exit 3 (./rlx run asks this before it starts the app). */
static gboolean
wants_check_display (int argc, char **argv)
{
  for (int i = 1; i < argc; i++)
    if (g_str_equal (argv[i], "--check-display"))
      return TRUE;
  return FALSE;
}

static int
check_display (void)
{
  g_autofree char *why = NULL;

  if (gtk_init_check ())
    return 0;
  why = describe_no_display ();
  printf ("%s\n", why);
  return 3;
}

int
main (int argc, char **argv)
{
  g_autoptr(RlxApplication) app = NULL;
  const char *localedir = g_getenv ("RLX_LOCALEDIR");
  int status;

  /* As rlx-rank join: keep the per-round parameter-sized buffers in the
   * heap instead of fresh mappings that fault in on every round. */
  mallopt (M_MMAP_THRESHOLD, 256 << 20);
  mallopt (M_TRIM_THRESHOLD, 512 << 20);

  setlocale (LC_ALL, "");
  /* a local rank that is gone while the app writes it a command: an error
   * from the write, not the end of the app */
  signal (SIGPIPE, SIG_IGN);
  bindtextdomain (RLX_GETTEXT_PACKAGE, localedir && *localedir ? localedir : RLX_LOCALEDIR);
  bind_textdomain_codeset (RLX_GETTEXT_PACKAGE, "UTF-8");
  textdomain (RLX_GETTEXT_PACKAGE);

  if (wants_check_display (argc, argv))
    return check_display ();
  if (!wants_no_window (argc, argv))
    {
      if (!find_schema ())
        return 1;
      if (!gtk_init_check ())
        return no_display ();
    }
  app = rlx_application_new ();
  status = g_application_run (G_APPLICATION (app), argc, argv);
  return status == 0 && rlx_benchmark_failed () ? 1 : status;
}
