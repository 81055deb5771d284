/* cmd-wire.c — placeholder until its module lands */
#include "rlx-cli.h"

int
rlx_cmd_wire (int argc, char **argv)
{
  return rlx_cli_fail ("wire", RLX_EXIT_FAILURE, "not built yet");
}
