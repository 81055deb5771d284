/* cmd-join.c — placeholder until its module lands */
#include "rlx-cli.h"

int
rlx_cmd_join (int argc, char **argv)
{
  return rlx_cli_fail ("join", RLX_EXIT_FAILURE, "not built yet");
}

int
rlx_cmd_export (int argc, char **argv)
{
  return rlx_cli_fail ("export", RLX_EXIT_FAILURE, "not built yet");
}
