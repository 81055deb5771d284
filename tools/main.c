/* main.c — rlx-rank: dispatch to a subcommand */
#include "rlx-config.h"
#include "rlx-cli.h"

#include <locale.h>
#include <stdio.h>
#include <string.h>

static void
usage (FILE *out)
{
  fprintf (out, "Usage: rlx-rank COMMAND [OPTIONS]\n\n"
                "The headless node and developer CLI of rlx-cluster %s.\n\nCommands:\n",
           RLX_VERSION);
  for (const RlxCommand *c = rlx_commands; c->name; c++)
    fprintf (out, "  %-9s %s\n", c->name, c->summary);
  fprintf (out, "\nRun 'rlx-rank COMMAND --help' for a command's options.\n");
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "");
  if (argc < 2)
    {
      usage (stderr);
      return RLX_EXIT_USAGE;
    }
  if (!strcmp (argv[1], "--help") || !strcmp (argv[1], "-h") || !strcmp (argv[1], "help"))
    {
      usage (stdout);
      return RLX_EXIT_OK;
    }
  if (!strcmp (argv[1], "--version"))
    {
      printf ("rlx-rank %s\n", RLX_VERSION);
      return RLX_EXIT_OK;
    }
  for (const RlxCommand *c = rlx_commands; c->name; c++)
    if (!strcmp (argv[1], c->name))
      return c->func (argc - 1, argv + 1);

  g_printerr ("rlx-rank: unknown command '%s' (see rlx-rank --help)\n", argv[1]);
  return RLX_EXIT_USAGE;
}
