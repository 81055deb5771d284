/* rlx-philox.h — Philox4x32-10 counter-based generator (Salmon et al., SC'11)
 *
 * Every random number in rlx-cluster (parameter init, synthetic samples,
 * epoch permutations) comes from this function keyed by a seed, so every rank
 * that knows the seed agrees on every number without moving data.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* out = Philox4x32-10(ctr, key). Matches Random123's known-answer vectors. */
void rlx_philox4x32_10 (const guint32 ctr[4], const guint32 key[2], guint32 out[4]);

/* A 32-bit draw mapped to a float uniform in [0, 1) (24 significant bits). */
static inline float
rlx_philox_uniform (guint32 u)
{
  return (float) (u >> 8) * (1.0f / 16777216.0f);
}

G_END_DECLS
