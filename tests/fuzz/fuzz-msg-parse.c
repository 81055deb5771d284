/* fuzz-msg-parse.c — libFuzzer target for the cohort's message parser
 *
 * Any byte string is handed to rlx_msg_parse as a frame from a peer. It
 * must either fail with an RLX_MSG_ERROR, or succeed with a message that
 * holds together:
 *   - its kind has a name, its sender is a non-empty id;
 *   - an array, when present, lies inside the frame and has the kind's
 *     precision rules (a snapshot is f32);
 *   - building it again (array decoded, re-encoded at f32) gives a frame
 *     that parses to the same kind and sender, and building *that* gives the
 *     same bytes (parse → build is a fixed point after one round);
 *   - clearing it leaves nothing behind (ASan / LSan check that).
 * Built with clang -fsanitize=fuzzer,address,undefined when meson is set up
 * with -Dfuzzing=true; fuzz-replay.c replays the corpus in CI. */
#include "rlx-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cohort/rlx-msg.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
check (gboolean ok, const char *what)
{
  if (!ok)
    {
      g_printerr ("fuzz-msg-parse: invariant broken: %s\n", what);
      abort ();
    }
}

static const RlxMsgArray *
array_of (const RlxMsg *m)
{
  switch (m->kind)
    {
    case RLX_MSG_SNAPSHOT: return &m->u.snapshot.params;
    case RLX_MSG_STEP: return &m->u.step.update;
    case RLX_MSG_GRAD: return &m->u.grad.grads;
    default: return NULL;
    }
}

/* The frame of @m with its array (if any) decoded and re-encoded at f32. */
static GBytes *
rebuild (const RlxMsg *m)
{
  const RlxMsgArray *a = array_of (m);
  g_autofree float *values = NULL;
  g_autoptr(GError) error = NULL;
  GBytes *frame;

  if (a && a->frame)
    {
      values = g_new (float, MAX (a->n, 1));
      rlx_msg_array_decode (a, values);
    }
  frame = rlx_msg_build (m, values, a && a->frame ? a->n : 0, RLX_PRECISION_F32, &error);
  check (frame != NULL, "a parsed message builds");
  return frame;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  RlxWireLimits limits = { .max_frame = 1 << 20, .max_header = 1 << 16, .max_depth = 16 };
  g_autoptr(GBytes) frame = g_bytes_new (data, size);
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) again = NULL, third = NULL;
  const RlxMsgArray *a;
  RlxMsg m, m2, m3;

  if (!rlx_msg_parse (frame, &limits, &m, &error))
    {
      check (error != NULL && error->domain == RLX_MSG_ERROR, "a failure says why");
      check (m.node == NULL, "a failed parse leaves the message empty");
      return 0;
    }
  check (m.kind < RLX_MSG_N_KINDS && strcmp (rlx_msg_kind_name (m.kind), "?") != 0, "a known kind");
  check (m.node != NULL && *m.node != '\0', "a sender");
  a = array_of (&m);
  if (a && a->frame)
    {
      gsize len;
      const guint8 *base = g_bytes_get_data (a->frame, &len);
      gsize bytes = a->n * rlx_precision_element_size (a->precision);
      check ((const guint8 *) a->codes >= base &&
             (const guint8 *) a->codes + bytes == base + len, "the array is the frame's tail");
      check (m.kind != RLX_MSG_SNAPSHOT || a->precision == RLX_PRECISION_F32, "snapshots are f32");
    }
  if (m.kind == RLX_MSG_STEP)
    check ((m.u.step.commit > 0) == (m.u.step.update.frame != NULL), "a commit carries its update");

  again = rebuild (&m);
  check (rlx_msg_parse (again, NULL, &m2, NULL), "a rebuilt message parses");
  check (m2.kind == m.kind && g_strcmp0 (m2.node, m.node) == 0, "the same kind and sender");
  third = rebuild (&m2);
  check (g_bytes_equal (again, third), "parse → build is a fixed point");
  check (rlx_msg_parse (third, NULL, &m3, NULL), "and parses again");
  rlx_msg_clear (&m3);
  rlx_msg_clear (&m2);
  rlx_msg_clear (&m);
  return 0;
}
