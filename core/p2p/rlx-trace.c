/* rlx-trace.c — see rlx-trace.h */
#include "rlx-config.h"
#include "rlx-trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CAPACITY (1u << 20)

typedef struct {
  gint64      ns;
  guint32     tid;
  const char *what;
  guint64     arg;
} Entry;

gint rlx_trace_state;
static Entry *entries;
static guint  used;
static char  *dir;

static void
trace_write (void)
{
  g_autofree char *path = NULL;
  guint n = MIN ((guint) g_atomic_int_get ((gint *) &used), CAPACITY);
  FILE *f;

  g_atomic_int_set (&rlx_trace_state, 1);
  path = g_strdup_printf ("%s/trace-%d.tsv", dir, (int) getpid ());
  f = fopen (path, "w");
  if (f == NULL)
    {
      g_printerr ("RLX_TRACE: cannot write %s\n", path);
      return;
    }
  for (guint i = 0; i < n; i++)
    if (entries[i].what != NULL)
      fprintf (f, "%" G_GINT64_FORMAT "\t%u\t%s\t%" G_GUINT64_FORMAT "\n", entries[i].ns,
               entries[i].tid, entries[i].what, entries[i].arg);
  fclose (f);
}

void
rlx_trace_slow (const char *what, guint64 arg)
{
  static gsize once;
  struct timespec ts;
  guint i;

  if (g_once_init_enter (&once))
    {
      const char *d = g_getenv ("RLX_TRACE");
      if (d != NULL && *d != '\0')
        {
          dir = g_strdup (d);
          entries = g_new0 (Entry, CAPACITY);
          atexit (trace_write);
          g_atomic_int_set (&rlx_trace_state, 2);
        }
      else
        g_atomic_int_set (&rlx_trace_state, 1);
      g_once_init_leave (&once, 1);
    }
  if (g_atomic_int_get (&rlx_trace_state) != 2)
    return;
  i = (guint) g_atomic_int_add ((gint *) &used, 1);
  if (i >= CAPACITY)
    return;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  entries[i].ns = (gint64) ts.tv_sec * 1000000000 + ts.tv_nsec;
  entries[i].tid = (guint32) syscall (SYS_gettid);
  entries[i].arg = arg;
  g_atomic_pointer_set (&entries[i].what, what);
}
