/* epilogue.glsl — what gemm.comp and gemm2.comp do to each C(m, n) before
 * storing it: × alpha, then by p.flags: 1 + d[n] (bias per column),
 * 2 + d[m] (bias per row), 4 ReLU, 8 × (d[d_off + m*ldd + n] > 0) (ReLU
 * backward mask). Include after the push constants p and buffer d. */
float epilogue (float acc, uint m, uint n)
{
  float v = acc * p.alpha;
  if ((p.flags & 1u) != 0u)
    v += d[p.d_off + n];
  if ((p.flags & 2u) != 0u)
    v += d[p.d_off + m];
  if ((p.flags & 4u) != 0u)
    v = max (v, 0.0);
  if ((p.flags & 8u) != 0u)
    v = d[p.d_off + m * p.ldd + n] > 0.0 ? v : 0.0;
  return v;
}
