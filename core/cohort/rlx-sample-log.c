/* rlx-sample-log.c — see rlx-sample-log.h */
#include "rlx-config.h"
#include "rlx-sample-log.h"

#include <stdio.h>
#include <unistd.h>

static FILE *
log_file (void)
{
  static gsize once;
  static FILE *f;

  if (g_once_init_enter (&once))
    {
      const char *dir = g_getenv ("RLX_TEST_SAMPLE_LOG");

      if (dir != NULL && *dir != '\0')
        {
          g_autofree char *path = g_strdup_printf ("%s/samples-%d.tsv", dir, (int) getpid ());

          f = fopen (path, "a");
          if (f == NULL)
            g_printerr ("RLX_TEST_SAMPLE_LOG: cannot write %s\n", path);
        }
      g_once_init_leave (&once, 1);
    }
  return f;
}

void
rlx_sample_log (const char *node, guint64 term, guint64 step, guint epoch, guint64 start,
                guint count, const guint32 *indices)
{
  FILE *f = log_file ();

  if (f == NULL)
    return;
  fprintf (f, "%s\t%" G_GUINT64_FORMAT "\t%" G_GUINT64_FORMAT "\t%u\t%" G_GUINT64_FORMAT "\t%u\t",
           node, term, step, epoch, start, count);
  for (guint i = 0; i < count; i++)
    fprintf (f, i ? " %u" : "%u", indices[i]);
  fputc ('\n', f);
  fflush (f);
}
