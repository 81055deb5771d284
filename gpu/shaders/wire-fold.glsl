/* wire-fold.glsl — the fold of a pass's per-workgroup partials into its
 * summary (wire-layout.h META_*): the largest |s| and |g|, the first
 * non-finite s and its bits, the loss (@loss_bits), and the scale exactly as
 * the wire computes it — target / (double) maxabs, 1.0 when maxabs is 0
 * (and for f32), and its reciprocal 1.0 / scale, both correctly rounded.
 * @prec_in ~0: the precision (and its target) of the round being finished,
 * from the control buffer. Max and min are exact, so the order of the
 * reduction does not matter.
 *
 * One workgroup of 256 runs it: wire_max.comp as a dispatch of its own, or
 * the last workgroup of the pass that wrote the partials (wire_fold_last).
 * The includer declares s[] (partials and summaries), ctl[] and the shared
 * arrays sh_s, sh_g, sh_bad of 256. */

/* The workgroup's largest |s| (@sm), largest |g| (@gm) and first
 * non-finite index (@bad) over its 256 invocations, into sh_s[0], sh_g[0]
 * and sh_bad[0]. */
void
wire_reduce3 (uint lid, uint sm, uint gm, uint bad)
{
  sh_s[lid] = sm;
  sh_g[lid] = gm;
  sh_bad[lid] = bad;
  barrier ();
  for (uint k = 128u; k > 0u; k >>= 1)
    {
      if (lid < k)
        {
          sh_s[lid] = max (sh_s[lid], sh_s[lid + k]);
          sh_g[lid] = max (sh_g[lid], sh_g[lid + k]);
          sh_bad[lid] = min (sh_bad[lid], sh_bad[lid + k]);
        }
      barrier ();
    }
}

/* ... and written by its invocation 0 as workgroup @w's partials. */
void
wire_partials (uint lid, uint part_off, uint w, uint sm, uint gm, uint bad)
{
  wire_reduce3 (lid, sm, gm, bad);
  if (lid == 0u)
    {
      s[part_off + 3u * w] = sh_s[0];
      s[part_off + 3u * w + 1u] = sh_g[0];
      s[part_off + 3u * w + 2u] = sh_bad[0];
    }
}

void
wire_fold (uint lid, uint n_groups, uint part_off, uint meta_off, uint loss_bits, uint prec_in,
           uint target_in)
{
  const uint prec = prec_in != 0xffffffffu ? prec_in : ctl[CTL_ROUND_PREC];
  const uint target = prec_in != 0xffffffffu ? target_in : ctl[CTL_TARGET + prec];
  uint sm = 0u, gm = 0u, bad = 0xffffffffu;

  for (uint w = lid; w < n_groups; w += 256u)
    {
      sm = max (sm, s[part_off + 3u * w]);
      gm = max (gm, s[part_off + 3u * w + 1u]);
      bad = min (bad, s[part_off + 3u * w + 2u]);
    }
  wire_reduce3 (lid, sm, gm, bad);
  if (lid == 0u)
    {
      uint m = sh_s[0];
      double scale = 1.0LF, inv = 1.0LF;

      if (prec != WIRE_F32 && m != 0u && m < F32_ABS_INF)
        {
          int nudge = int (ctl[CTL_DIV_NUDGE]);
          scale = f64_div (double (target), f64_from_f32 (m), nudge);
          inv = f64_div (1.0LF, scale, nudge);
        }
      s[meta_off + META_SMAX] = m;
      s[meta_off + META_GMAX] = sh_g[0];
      s[meta_off + META_BAD] = sh_bad[0];
      s[meta_off + META_BAD_BITS] = sh_bad[0] != 0xffffffffu ? s[sh_bad[0]] : 0u;
      s[meta_off + META_LOSS] = loss_bits;
      s[meta_off + META_SCALE_LO] = uint (doubleBitsToUint64 (scale));
      s[meta_off + META_SCALE_HI] = uint (doubleBitsToUint64 (scale) >> 32);
      s[meta_off + META_INV_LO] = uint (doubleBitsToUint64 (inv));
      s[meta_off + META_INV_HI] = uint (doubleBitsToUint64 (inv) >> 32);
    }
}

shared uint sh_last;

/* After a workgroup wrote its partials (invocation 0, to s[]): the last
 * workgroup of the dispatch to get here folds them all, so the pass needs
 * no dispatch of wire_max behind a barrier. s[] must be declared coherent
 * (the partials and the s values other workgroups wrote are read here);
 * s[count_off] counts the workgroups and is 0 again when the fold is done,
 * for the next pass. */
void
wire_fold_last (uint lid, uint part_off, uint meta_off, uint count_off, uint loss_bits,
                uint prec_in, uint target_in)
{
  memoryBarrierBuffer ();
  barrier ();
  if (lid == 0u)
    sh_last = atomicAdd (s[count_off], 1u) == gl_NumWorkGroups.x - 1u ? 1u : 0u;
  barrier ();
  if (sh_last == 0u)
    return;
  memoryBarrierBuffer ();
  wire_fold (lid, gl_NumWorkGroups.x, part_off, meta_off, loss_bits, prec_in, target_in);
  if (lid == 0u)
    s[count_off] = 0u;
}
