/* rlx-cli.c — the subcommand table, shared option handling and printing */
#include "rlx-config.h"
#include "rlx-cli.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
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
rlx_cli_uint (const char *sub, const char *opt, const char *text, guint64 min, guint64 max,
              guint64 *out)
{
  if (text == NULL)
    return TRUE;
  if (!g_ascii_string_to_unsigned (text, 10, min, max, out, NULL))
    {
      rlx_cli_fail (sub, RLX_EXIT_USAGE, "%s: '%s' is not a whole number in %" G_GUINT64_FORMAT
                    "..%" G_GUINT64_FORMAT " (see rlx-rank %s --help)", opt, text, min, max, sub);
      return FALSE;
    }
  return TRUE;
}

gboolean
rlx_cli_positive (const char *sub, const char *opt, const char *text, double *out)
{
  char *end = NULL;
  double v;

  if (text == NULL)
    return TRUE;
  errno = 0;
  v = g_ascii_strtod (text, &end);
  if (end == text || *end != '\0' || errno != 0 || !isfinite (v) || v <= 0)
    {
      rlx_cli_fail (sub, RLX_EXIT_USAGE, "%s: '%s' is not a positive number (see rlx-rank %s --help)",
                    opt, text, sub);
      return FALSE;
    }
  *out = v;
  return TRUE;
}

gboolean
rlx_cli_no_extra_args (const char *sub, int argc, char **argv)
{
  if (argc > 1)
    {
      rlx_cli_fail (sub, RLX_EXIT_USAGE, "unexpected argument '%s' (see rlx-rank %s --help)",
                    argv[1], sub);
      return FALSE;
    }
  return TRUE;
}

gboolean
rlx_cli_require (const char *sub, const char *opt, const char *value, const char *what)
{
  if (value == NULL)
    {
      rlx_cli_fail (sub, RLX_EXIT_USAGE, "%s is required: %s (see rlx-rank %s --help)",
                    opt, what, sub);
      return FALSE;
    }
  return TRUE;
}

/* stdout's rotation (rlx_cli_limit_stdout): its file, the limit, and how
 * much is in it now */
static char   *log_path;
static guint64 log_limit, log_bytes;

gboolean
rlx_cli_limit_stdout (guint64 max_bytes, GError **error)
{
  struct stat st;
  g_autofree char *path = NULL;

  if (max_bytes == 0)
    return TRUE;
  if (fstat (STDOUT_FILENO, &st) != 0 || !S_ISREG (st.st_mode))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_REGULAR_FILE,
                   "--log-max-bytes needs standard output to be a file (redirect it: > FILE)");
      return FALSE;
    }
  /* the name the file was opened under (Linux) */
  path = g_file_read_link ("/proc/self/fd/1", error);
  if (path == NULL)
    return FALSE;
  g_free (log_path);
  log_path = g_steal_pointer (&path);
  log_limit = max_bytes;
  log_bytes = (guint64) st.st_size;
  return TRUE;
}

/* Past the limit: FILE becomes FILE.1 (the one before is dropped) and a new
 * FILE takes standard output, so the two hold at most twice the limit. */
static void
rotate_stdout (void)
{
  g_autofree char *old = g_strconcat (log_path, ".1", NULL);
  int fd;

  fflush (stdout);
  if (g_rename (log_path, old) != 0)
    {
      log_limit = 0;   /* cannot rotate: keep writing, once said */
      g_printerr ("rlx-rank: cannot rotate %s: %s; it grows from here\n", log_path,
                  g_strerror (errno));
      return;
    }
  fd = g_open (log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || dup2 (fd, STDOUT_FILENO) < 0)
    {
      log_limit = 0;
      g_printerr ("rlx-rank: cannot reopen %s: %s\n", log_path, g_strerror (errno));
    }
  if (fd >= 0)
    close (fd);
  log_bytes = 0;
}

void
rlx_cli_print_json (JsonObject *o)
{
  g_autoptr(JsonNode) node = json_node_init_object (json_node_alloc (), o);
  g_autofree char *line = json_to_string (node, FALSE);
  gsize len = strlen (line) + 1;

  if (log_limit > 0 && log_bytes + len > log_limit && log_bytes > 0)
    rotate_stdout ();
  puts (line);
  fflush (stdout);
  log_bytes += len;
}

const char *
rlx_cli_json_num (char buf[G_ASCII_DTOSTR_BUF_SIZE], double v)
{
  if (!isfinite (v))
    return "null";
  return g_ascii_formatd (buf, G_ASCII_DTOSTR_BUF_SIZE, "%.9g", v);
}

char *
rlx_cli_json_str (const char *s)
{
  GString *out = g_string_new ("\"");

  for (const char *p = s; *p; p++)
    {
      if (*p == '"' || *p == '\\')
        g_string_append_printf (out, "\\%c", *p);
      else if ((guchar) *p < 0x20)
        g_string_append_printf (out, "\\u%04x", (guchar) *p);
      else
        g_string_append_c (out, *p);
    }
  g_string_append_c (out, '"');
  return g_string_free (out, FALSE);
}

gboolean
rlx_cli_out_is_special (const char *path)
{
  GStatBuf st;

  return g_stat (path, &st) == 0 && !S_ISREG (st.st_mode);
}

gboolean
rlx_cli_write_fd (int fd, const char *name, const void *data, gsize len, GError **error)
{
  const guint8 *p = data;

  while (len > 0)
    {
      gssize n = write (fd, p, len);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        {
          int e = n < 0 ? errno : EIO;
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (e), "writing %s: %s",
                       name, g_strerror (e));
          return FALSE;
        }
      p += n;
      len -= (gsize) n;
    }
  return TRUE;
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
  if (!rlx_cli_write_fd (fd, path, p, len, error))
    {
      close (fd);
      return FALSE;
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
rlx_cli_hide_secrets (int argc, char **argv)
{
  for (int i = 1; i < argc; i++)
    {
      char *hash, *value = NULL;

      if (argv[i] == NULL)
        continue;
      if (g_str_equal (argv[i], "--turn-password") && i + 1 < argc)
        value = argv[i + 1];
      else if (g_str_has_prefix (argv[i], "--turn-password="))
        value = argv[i] + strlen ("--turn-password=");
      for (char *c = value; c && *c; c++)
        *c = 'x';
      if (argv[i] == NULL || strstr (argv[i], "rlx://") == NULL ||
          (hash = strchr (argv[i], '#')) == NULL)
        continue;
      for (char *c = hash + 1; *c; c++)
        *c = 'x';
    }
}
