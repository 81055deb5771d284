/* cmd-train.c — placeholder until its module lands */
#include "rlx-cli.h"

int
rlx_cmd_train (int argc, char **argv)
{
  return rlx_cli_fail ("train", RLX_EXIT_FAILURE, "not built yet");
}

int
rlx_cmd_grads (int argc, char **argv)
{
  return rlx_cli_fail ("grads", RLX_EXIT_FAILURE, "not built yet");
}

int
rlx_cmd_bench (int argc, char **argv)
{
  return rlx_cli_fail ("bench", RLX_EXIT_FAILURE, "not built yet");
}
