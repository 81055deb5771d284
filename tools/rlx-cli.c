/* rlx-cli.c — the subcommand table and shared option handling */
#include "rlx-config.h"
#include "rlx-cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gio/gio.h>
#include <glib/gstdio.h>

const RlxCommand rlx_commands[] = {
  { "train",   rlx_cmd_train,   "train one rank and report test accuracy" },
  { "grads",   rlx_cmd_grads,   "write the loss and gradient of a batch to a file" },
  { "bench",   rlx_cmd_bench,   "samples per second of one training step" },
  { "devices", rlx_cmd_devices, "list compute devices and what auto would choose" },
  { "wire",    rlx_cmd_wire,    "encode, decode and benchmark wire frames" },
  { "join",    rlx_cmd_join,    "run one node of a cohort" },
  { "export",  rlx_cmd_export,  "export a checkpoint as .safetensors" },
  { "signal",  rlx_cmd_signal,  "serve signalling for cohorts across machines" },
  { NULL, NULL, NULL },
};

gboolean
rlx_cli_parse (GOptionContext *ctx, const char *sub, int *argc, char ***argv)
{
  g_autoptr(GError) error = NULL;

  if (!g_option_context_parse (ctx, argc, argv, &error))
    {
      g_printerr ("rlx-rank %s: %s (see rlx-rank %s --help)\n", sub, error->message, sub);
      return FALSE;
    }
  return TRUE;
}

int
rlx_cli_fail (const char *sub, int status, const char *fmt, ...)
{
  va_list ap;
  g_autofree char *msg = NULL;

  va_start (ap, fmt);
  msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_printerr ("rlx-rank %s: %s\n", sub, msg);
  return status;
}

gboolean
rlx_cli_out_is_special (const char *path)
{
  GStatBuf st;

  return g_stat (path, &st) == 0 && !S_ISREG (st.st_mode);
}

gboolean
rlx_cli_write_special (const char *path, const void *data, gsize len, GError **error)
{
  const guint8 *p = data;
  int fd = g_open (path, O_WRONLY | O_CLOEXEC, 0);

  if (fd < 0)
    {
      int e = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (e), "cannot open %s for writing: %s",
                   path, g_strerror (e));
      return FALSE;
    }
  while (len > 0)
    {
      gssize n = write (fd, p, len);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        {
          int e = n < 0 ? errno : EIO;
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (e), "writing %s: %s",
                       path, g_strerror (e));
          close (fd);
          return FALSE;
        }
      p += n;
      len -= (gsize) n;
    }
  if (close (fd) != 0)
    {
      int e = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (e), "writing %s: %s", path, g_strerror (e));
      return FALSE;
    }
  return TRUE;
}

void
rlx_cli_hide_invites (int argc, char **argv)
{
  for (int i = 1; i < argc; i++)
    {
      char *hash;
      if (argv[i] == NULL || strstr (argv[i], "rlx://") == NULL ||
          (hash = strchr (argv[i], '#')) == NULL)
        continue;
      for (char *c = hash + 1; *c; c++)
        *c = 'x';
    }
}
