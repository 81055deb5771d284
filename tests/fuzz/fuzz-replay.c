/* fuzz-replay.c — runs a libFuzzer target's LLVMFuzzerTestOneInput over
 * files and folders (a corpus) without libFuzzer, so CI can replay the corpus
 * with gcc. Exits 0 when every input ran; an input that breaks an invariant
 * aborts the process (the test fails, naming the file on stderr first). */
#include "rlx-config.h"

#include <stdint.h>
#include <stdio.h>

#include <glib.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static guint count;

static void
run_file (const char *path)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *data = NULL;
  gsize len = 0;

  if (!g_file_get_contents (path, &data, &len, &error))
    {
      g_printerr ("fuzz-replay: %s\n", error->message);
      exit (1);
    }
  g_printerr ("%s\n", path);
  LLVMFuzzerTestOneInput ((const uint8_t *) data, len);
  count++;
}

/* GPtrArray's sort hands the compare function pointers to its elements. */
static gint
by_name (gconstpointer a, gconstpointer b)
{
  return g_strcmp0 (*(const char *const *) a, *(const char *const *) b);
}

static void
run_path (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(GDir) dir = g_dir_open (path, 0, &error);
      g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
      const char *name;

      if (dir == NULL)
        {
          g_printerr ("fuzz-replay: %s\n", error->message);
          exit (1);
        }
      while ((name = g_dir_read_name (dir)))
        g_ptr_array_add (names, g_build_filename (path, name, NULL));
      /* by name: targets keep state across inputs, so the order is part of
       * the corpus (a replay seed after the message it repeats) */
      g_ptr_array_sort (names, by_name);
      for (guint i = 0; i < names->len; i++)
        run_path (names->pdata[i]);
    }
  else
    run_file (path);
}

int
main (int argc, char **argv)
{
  if (argc < 2)
    {
      g_printerr ("usage: %s FILE|DIR…\n", argv[0]);
      return 2;
    }
  for (int i = 1; i < argc; i++)
    run_path (argv[i]);
  printf ("replayed %u inputs\n", count);
  /* An empty corpus would make this test pass without testing anything. */
  return count > 0 ? 0 : 1;
}
