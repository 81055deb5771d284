/* rlx-wire-kernels.h — the codec's SIMD kernels, shared with the round
 * kernels (core/rlx-kernels.c), which quantise and dequantise buckets with
 * the same bits as the wire codec
 *
 * The rest of the codec's internals stay in rlx-wire-private.h (core/wire
 * only).
 *
 * Threads: any; the tables are immutable once chosen.
 */
#pragma once

#include "core/wire/rlx-wire.h"

G_BEGIN_DECLS

/* Elements processed per block where a pass is split into cache-sized pieces. */
#define RLX_WIRE_BLOCK 4096

/* The kernels behind the codec. Every implementation gives identical bits;
 * they differ only in speed. Payload pointers need no alignment. */
typedef struct {
  const char *name;
  /* Largest finite |x| (0 when none). */
  float (*maxabs)      (const float *x, gsize n);
  /* s[i] = x[i] + r[i] (@s may be @r); returns the largest finite |s[i]|. */
  float (*add_maxabs)  (const float *x, const float *r, float *s, gsize n);
  /* codes = seed-f16 ((float) ((double) x * scale)), little-endian. */
  void  (*quant_f16)   (const float *x, gsize n, double scale, void *out);
  /* codes = bridge (p)[seed-f16 (…)] */
  void  (*quant_f8)    (const float *x, gsize n, double scale, RlxPrecision p, void *out);
  /* out = (float) ((double) f16 (code) * inv). */
  void  (*dequant_f16) (const void *in, gsize n, double inv, float *out);
  /* out = lut[code]; @lut (256 entries) is rlx_wire_f8_lut (p, inv). */
  void  (*dequant_f8)  (const void *in, gsize n, RlxPrecision p, double inv,
                        const float *lut, float *out);
} RlxWireKernels;

const RlxWireKernels *rlx_wire_kernels (void);
const RlxWireKernels *rlx_wire_kernels_portable (void);
/* NULL when the CPU or compiler lacks AVX-512/F16C (resp. AVX2/F16C). */
const RlxWireKernels *rlx_wire_kernels_avx512 (void);
/* The AVX-512 set with VBMI's f8 table lookup; NULL without VBMI. */
const RlxWireKernels *rlx_wire_kernels_avx512vbmi (void);
const RlxWireKernels *rlx_wire_kernels_avx2 (void);

/* The seed's f16 → f8 bridge for E4M3 / E5M2 (65536 entries + 4 padding). */
const guint8 *rlx_wire_bridge (RlxPrecision p);

/* Fill @lut[256] with (float) ((double) f8 (code) * inv). */
void rlx_wire_f8_lut (RlxPrecision p, double inv, float *lut);

G_END_DECLS
