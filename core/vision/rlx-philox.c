/* rlx-philox.c — Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC'11) */
#include "rlx-config.h"
#include "rlx-philox.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void
rlx_philox4x32_10 (const guint32 ctr[4], const guint32 key[2], guint32 out[4])
{
  guint32 c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  guint32 k0 = key[0], k1 = key[1];

  for (int round = 0; round < 10; round++)
    {
      guint64 p0 = (guint64) PHILOX_M0 * c0;
      guint64 p1 = (guint64) PHILOX_M1 * c2;
      guint32 n0 = (guint32) (p1 >> 32) ^ c1 ^ k0;
      guint32 n1 = (guint32) p1;
      guint32 n2 = (guint32) (p0 >> 32) ^ c3 ^ k1;
      guint32 n3 = (guint32) p0;

      c0 = n0; c1 = n1; c2 = n2; c3 = n3;
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}
