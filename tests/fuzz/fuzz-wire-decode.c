/* fuzz-wire-decode.c — libFuzzer target for the wire decoder
 *
 * Any byte string is handed to the decoder as a frame. It must either fail
 * with a GError, or succeed with a result that holds together:
 *   - every kernel set this CPU has (avx512vbmi, avx512, avx2, portable) decodes it to
 *     the same bits;
 *   - decode_into with the announced length gives the same floats;
 *   - re-encoding the header and floats at f32 and decoding again gives the
 *     same header JSON and the same float bits;
 *   - re-encoding at the frame's own precision decodes again.
 * Built with clang -fsanitize=fuzzer,address,undefined when meson is set up
 * with -Dfuzzing=true; fuzz-replay.c replays the corpus under gcc in CI. */
#include "rlx-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire/rlx-wire.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
check (gboolean ok, const char *what)
{
  if (!ok)
    {
      g_printerr ("fuzz-wire-decode: invariant broken: %s\n", what);
      abort ();
    }
}

static gboolean
same_bits (const float *a, const float *b, gsize n)
{
  return n == 0 || memcmp (a, b, n * sizeof (float)) == 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  /* A small frame cap keeps each run fast; the limits are exercised too. */
  RlxWireLimits limits = { .max_frame = 1 << 20, .max_header = 1 << 16, .max_depth = 16 };
  g_autoptr(GBytes) frame = g_bytes_new (data, size);
  g_autoptr(GError) error = NULL;
  g_autoptr(GError) error2 = NULL;
  g_autoptr(JsonObject) header = NULL;
  g_autoptr(JsonObject) header2 = NULL;
  g_autofree float *values = NULL;
  g_autofree float *values2 = NULL;
  g_autofree float *into = NULL;
  RlxWireInfo info, info2;
  gboolean ok, ok2;

  rlx_wire_force_portable (FALSE);
  ok = rlx_wire_decode_full (frame, &limits, &info, &header, &values, &error);
  rlx_wire_force_portable (TRUE);
  ok2 = rlx_wire_decode_full (frame, &limits, &info2, &header2, &values2, &error2);
  /* the best set is avx512vbmi where the CPU has it; the others too */
  for (guint s = 0; s < 2; s++)
    if (rlx_wire_force_kernels (s == 0 ? "avx512" : "avx2") != NULL)
      {
        g_autoptr(GError) e3 = NULL;
        g_autofree float *v3 = NULL;
        RlxWireInfo i3;
        gboolean ok3 = rlx_wire_decode_full (frame, &limits, &i3, NULL, &v3, &e3);

        check (ok3 == ok, "every kernel set agrees on success");
        check (!ok || (i3.n == info.n && same_bits (v3, values, info.n)),
               "every kernel set decodes the same bits");
      }
  rlx_wire_force_portable (FALSE);

  check (ok == ok2, "both kernel paths agree on success");
  if (!ok)
    {
      check (error != NULL && error->domain == RLX_WIRE_ERROR && error->message[0] != '\0',
             "a failure carries an RLX_WIRE_ERROR with a message");
      check (header == NULL && values == NULL, "a failure leaves the outputs empty");
      return 0;
    }
  check (error == NULL, "success sets no error");
  check (info.n == info2.n && info.precision == info2.precision && info.scale == info2.scale,
         "both paths read the same info");
  check (same_bits (values, values2, info.n), "both kernel paths decode the same bits");
  check (info.frame_len == size, "frame_len");
  check (4 + info.header_len + info.n * rlx_precision_element_size (info.precision) == size,
         "lengths add up");
  check (!info.has_values ? info.n == 0 : info.field[0] != '\0', "field named when present");

  into = g_new (float, MAX (info.n, 1));
  if (info.has_values)
    {
      g_autoptr(GError) e = NULL;
      check (rlx_wire_decode_into (frame, &limits, NULL, NULL, into, info.n, &e),
             "decode_into with the announced length");
      check (same_bits (into, values, info.n), "decode_into gives the same floats");
    }

  /* Re-encode at f32: the header and the float bits survive exactly. */
  {
    static const float none[1];
    const float *v = info.has_values ? (values ? values : none) : NULL;
    g_autoptr(GError) e = NULL;
    g_autoptr(GBytes) again = rlx_wire_encode (header, v, info.n, RLX_PRECISION_F32,
                                               info.has_values ? info.field : NULL, &e);
    g_autoptr(JsonObject) h3 = NULL;
    g_autofree float *v3 = NULL;
    g_autofree char *j1 = NULL, *j3 = NULL;
    gsize n3 = 0;

    check (again != NULL, "a decoded message re-encodes");
    check (rlx_wire_decode (again, NULL, &h3, &v3, &n3, &e), "a re-encoded message decodes");
    check (n3 == info.n && same_bits (v3, values, n3), "f32 re-encode keeps the float bits");
    j1 = rlx_wire_header_to_json (header, NULL);
    j3 = rlx_wire_header_to_json (h3, NULL);
    check (j1 && j3 && strcmp (j1, j3) == 0, "header survives a re-encode");

    if (info.precision != RLX_PRECISION_F32 && info.n > 0)
      {
        g_autoptr(GBytes) q = rlx_wire_encode (header, v, info.n, info.precision, info.field, &e);
        check (q != NULL, "re-encode at the frame's precision");
        check (rlx_wire_decode (q, NULL, NULL, NULL, &n3, &e) && n3 == info.n,
               "re-encoded at the frame's precision decodes");
      }
  }
  return 0;
}
