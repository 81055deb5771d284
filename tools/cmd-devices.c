/* cmd-devices.c — placeholder until its module lands */
#include "rlx-cli.h"

int
rlx_cmd_devices (int argc, char **argv)
{
  return rlx_cli_fail ("devices", RLX_EXIT_FAILURE, "not built yet");
}
