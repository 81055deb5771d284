/* rlx-cli.c — the subcommand table and shared option handling */
#include "rlx-config.h"
#include "rlx-cli.h"

#include <stdio.h>

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
