/* node-test-utils.c — see node-test-utils.h */
#include "node-test-utils.h"

#include <gio/gio.h>
#include <unistd.h>

static char *tmp_dir;

const char *
node_test_init (void)
{
  g_autofree char *run = NULL, *data = NULL, *state = NULL, *config = NULL;
  g_autoptr(GError) error = NULL;

  tmp_dir = g_dir_make_tmp ("rlx-app-test-XXXXXX", &error);
  g_assert_no_error (error);
  run = g_build_filename (tmp_dir, "run", NULL);
  data = g_build_filename (tmp_dir, "data", NULL);
  state = g_build_filename (tmp_dir, "state", NULL);
  config = g_build_filename (tmp_dir, "config", NULL);
  g_assert_cmpint (g_mkdir_with_parents (run, 0700), ==, 0);
  g_assert_cmpint (g_mkdir_with_parents (data, 0700), ==, 0);
  g_assert_cmpint (g_mkdir_with_parents (state, 0700), ==, 0);
  g_assert_cmpint (g_mkdir_with_parents (config, 0700), ==, 0);
  g_setenv ("XDG_RUNTIME_DIR", run, TRUE);
  g_setenv ("XDG_DATA_HOME", data, TRUE);
  g_setenv ("XDG_STATE_HOME", state, TRUE);
  g_setenv ("XDG_CONFIG_HOME", config, TRUE);
  g_setenv ("GSETTINGS_BACKEND", "memory", TRUE);
  return tmp_dir;
}

static void
rm_rf (GFile *file)
{
  g_autoptr(GFileEnumerator) e = g_file_enumerate_children (file, G_FILE_ATTRIBUTE_STANDARD_NAME,
                                                            G_FILE_QUERY_INFO_NOFOLLOW_SYMLINKS,
                                                            NULL, NULL);
  GFileInfo *info;
  GFile *child;

  while (e && g_file_enumerator_iterate (e, &info, &child, NULL, NULL) && info)
    {
      if (g_file_info_get_file_type (info) == G_FILE_TYPE_DIRECTORY)
        rm_rf (child);
      else
        g_file_delete (child, NULL, NULL);
    }
  g_file_delete (file, NULL, NULL);
}

void
node_test_cleanup (void)
{
  g_autoptr(GFile) dir = NULL;

  if (tmp_dir == NULL)
    return;
  dir = g_file_new_for_path (tmp_dir);
  rm_rf (dir);
  g_clear_pointer (&tmp_dir, g_free);
}

static gboolean
on_timeout (gpointer user_data)
{
  *(gboolean *) user_data = TRUE;
  return G_SOURCE_REMOVE;
}

static gboolean
on_recheck (gpointer user_data)
{
  return G_SOURCE_CONTINUE;
}

gboolean
node_test_wait (NodeTestPred pred, gpointer data, guint timeout_ms)
{
  gboolean timed_out = FALSE;
  guint id = g_timeout_add (timeout_ms, on_timeout, &timed_out);
  /* some conditions change outside the main context (a file grows, a
   * process dies): look again every 20 ms as well as on every event */
  guint recheck = g_timeout_add (20, on_recheck, NULL);
  gboolean ok;

  while (!(ok = pred (data)) && !timed_out)
    g_main_context_iteration (NULL, TRUE);
  if (!timed_out)
    g_source_remove (id);
  g_source_remove (recheck);
  return ok;
}

static gboolean
never (gpointer data)
{
  return FALSE;
}

void
node_test_spin (guint ms)
{
  node_test_wait (never, NULL, ms);
}

char *
node_test_cohort_name (const char *tag)
{
  return g_strdup_printf ("t%d-%s", (int) getpid (), tag);
}

int
node_test_event_index (GPtrArray *events, const char *name, const char *key, gint64 min)
{
  for (guint i = 0; i < events->len; i++)
    {
      JsonObject *e = g_ptr_array_index (events, i);
      if (g_strcmp0 (json_object_get_string_member_with_default (e, "event", ""), name) != 0)
        continue;
      if (key == NULL || json_object_get_int_member_with_default (e, key, G_MININT64) >= min)
        return (int) i;
    }
  return -1;
}

typedef struct { GPtrArray *events; const char *name; const char *key; gint64 min; } EventWait;

static gboolean
has_event (gpointer data)
{
  EventWait *w = data;
  return node_test_event_index (w->events, w->name, w->key, w->min) >= 0;
}

JsonObject *
node_test_wait_event (GPtrArray *events, const char *name, const char *key, gint64 min,
                     guint timeout_ms, NodeTestDescribe describe, gpointer data)
{
  EventWait w = { events, name, key, min };

  if (!node_test_wait (has_event, &w, timeout_ms))
    {
      for (guint i = 0; i < events->len; i++)
        {
          g_autoptr(JsonNode) n = json_node_init_object (json_node_alloc (),
                                                         g_ptr_array_index (events, i));
          g_autofree char *line = json_to_string (n, FALSE);
          g_printerr ("%s\n", line);
        }
      g_error ("no '%s' event (%s >= %" G_GINT64_FORMAT ") within %u ms (%u events)%s%s", name,
               key ? key : "-", min, timeout_ms, events->len, describe ? "; " : "",
               describe ? describe (data) : "");
    }
  return g_ptr_array_index (events, node_test_event_index (events, name, key, min));
}

JsonObject *
node_test_log_find (const char *path, const char *name, gint64 min_step)
{
  g_autofree char *text = NULL;
  g_auto(GStrv) lines = NULL;

  if (!g_file_get_contents (path, &text, NULL, NULL))
    return NULL;
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i]; i++)
    {
      g_autoptr(JsonParser) p = json_parser_new ();
      JsonObject *o;

      if (!*lines[i] || !json_parser_load_from_data (p, lines[i], -1, NULL) ||
          !JSON_NODE_HOLDS_OBJECT (json_parser_get_root (p)))
        continue;
      o = json_node_get_object (json_parser_get_root (p));
      if (g_strcmp0 (json_object_get_string_member_with_default (o, "event", ""), name) == 0 &&
          json_object_get_int_member_with_default (o, "step", 0) >= min_step)
        return json_object_ref (o);
    }
  return NULL;
}
