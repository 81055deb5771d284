/* fuzz-outer-state.c — libFuzzer target for the outer mode's serialised
 * state (core/cohort/rlx-outer.h: snapshots and checkpoints carry it)
 *
 * Any byte string is parsed as a state from a peer or a file, once for any
 * size and once for a fixed model size. It must either fail with an
 * RLX_OUTER_ERROR, or give a state that holds together:
 *   - n is 1 .. RLX_OUTER_MAX_PARAMS and the input is exactly its size;
 *   - every array value is finite, the settings are ones the mode accepts;
 *   - writing it again gives the input back, byte for byte;
 *   - a copy hashes as the original, and freeing leaves nothing behind
 *     (ASan / LSan check that).
 * Built with clang -fsanitize=fuzzer,address,undefined when meson is set up
 * with -Dfuzzing=true; fuzz-replay.c replays the corpus in CI. */
#include "rlx-config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cohort/rlx-outer.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
check (gboolean ok, const char *what)
{
  if (!ok)
    {
      g_printerr ("fuzz-outer-state: invariant broken: %s\n", what);
      abort ();
    }
}

static void
one (const uint8_t *data, size_t size, gsize expected_n)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxOuterState) s = rlx_outer_state_parse (data, size, expected_n, &error);
  g_autoptr(RlxOuterState) copy = NULL;
  g_autoptr(GBytes) again = NULL;

  if (s == NULL)
    {
      check (error != NULL && error->domain == RLX_OUTER_ERROR, "a failure without an error");
      check (error->message != NULL && *error->message, "an error without a message");
      return;
    }
  check (error == NULL, "success with an error set");
  check (s->n >= 1 && s->n <= RLX_OUTER_MAX_PARAMS, "n out of range");
  check (expected_n == 0 || s->n == expected_n, "another size than asked for");
  check (rlx_outer_state_size (s) == size, "size is not the input's");
  check (rlx_outer_check_settings (s->lr, s->momentum, NULL), "settings out of range");
  check ((guint) s->precision < RLX_PRECISION_COUNT, "precision out of range");
  for (gsize i = 0; i < s->n; i++)
    check (isfinite (s->params[i]) && isfinite (s->mom[i])
           && (s->residual == NULL || isfinite (s->residual[i])), "a non-finite value");
  again = rlx_outer_state_write (s, TRUE);
  check (g_bytes_get_size (again) == size
         && memcmp (g_bytes_get_data (again, NULL), data, size) == 0,
         "writing the state again does not give the input");
  copy = rlx_outer_state_copy (s);
  check (rlx_outer_state_hash (copy) == rlx_outer_state_hash (s), "a copy hashes differently");
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  one (data, size, 0);
  one (data, size, 5);
  return 0;
}
