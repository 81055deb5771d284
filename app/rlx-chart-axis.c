/* rlx-chart-axis.c — tick positions and labels (see the header) */
#include "rlx-config.h"
#include "rlx-chart-axis.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static double
nice_step (double range, int max_ticks)
{
  double raw = range / MAX (1, max_ticks);
  double e, f;

  if (!(raw > 0))
    return 1;
  e = pow (10, floor (log10 (raw)));
  f = raw / e;
  if (f <= 1)
    return e;
  if (f <= 2)
    return 2 * e;
  if (f <= 5)
    return 5 * e;
  return 10 * e;
}

void
rlx_axis_format_value (double v, char *buf, gsize size)
{
  if (v == 0)
    g_strlcpy (buf, "0", size);
  else if (fabs (v) >= 1000 || fabs (v) < 0.001)
    g_snprintf (buf, size, "%.0e", v);
  else
    g_snprintf (buf, size, "%.3g", v);
}

static guint
push (RlxAxisTick *ticks, guint n, double value, gboolean major, const char *label)
{
  if (n >= RLX_AXIS_MAX_TICKS)
    return n;
  ticks[n].value = value;
  ticks[n].major = major;
  g_strlcpy (ticks[n].label, major && label ? label : "", sizeof ticks[n].label);
  return n + 1;
}

guint
rlx_axis_linear_ticks (double lo, double hi, int max_ticks, RlxAxisTick *ticks)
{
  double step = nice_step (hi - lo, max_ticks);
  guint n = 0;

  if (!(hi >= lo) || !isfinite (lo) || !isfinite (hi))
    return 0;
  for (double k = ceil (lo / step); k * step <= hi + 1e-9 * step && n < RLX_AXIS_MAX_TICKS; k++)
    {
      double v = k * step;
      char label[32];
      rlx_axis_format_value (fabs (v) < 1e-12 * step ? 0 : v, label, sizeof label);
      n = push (ticks, n, v, TRUE, label);
    }
  return n;
}

guint
rlx_axis_step_ticks (double lo, double hi, int max_ticks, RlxAxisTick *ticks)
{
  double step = MAX (1, nice_step (hi - lo, max_ticks));
  double top = MAX (fabs (lo), fabs (hi)), unit = 1;
  const char *suffix = "";
  int decimals;
  guint n = 0;

  if (!(hi >= lo) || !isfinite (lo) || !isfinite (hi))
    return 0;
  /* one form for the whole axis, chosen by its largest value */
  if (top >= 1e6)
    unit = 1e6, suffix = "M";
  else if (top >= 1e4)
    unit = 1e3, suffix = "k";
  decimals = MAX (0, (int) ceil (-log10 (step / unit) - 1e-9));
  for (double k = ceil (lo / step); k * step <= hi + 1e-9 && n < RLX_AXIS_MAX_TICKS; k++)
    {
      char label[32];
      g_snprintf (label, sizeof label, "%.*f%s", decimals, k * step / unit, k == 0 ? "" : suffix);
      n = push (ticks, n, k * step, TRUE, label);
    }
  return n;
}

/* labelling level of m × 10^d: decades, then 2 and 5, then the rest */
static int
log_level (int m)
{
  return m == 1 ? 0 : (m == 2 || m == 5) ? 1 : 2;
}

guint
rlx_axis_log_ticks (double lo10, double hi10, double pixels, double min_gap_px,
                    RlxAxisTick *ticks)
{
  int d0, d1, level;
  guint n = 0, n_labelled = 0;
  double span = hi10 - lo10;

  if (!(span > 0) || !isfinite (lo10) || !isfinite (hi10) || pixels <= 0)
    return 0;
  d0 = (int) floor (lo10);
  d1 = (int) ceil (hi10);
  if (d1 - d0 > 60)
    return 0;
  /* the densest labelling whose neighbours stay min_gap_px apart */
  for (level = 2; level >= 0; level--)
    {
      double last = -INFINITY, gap = INFINITY;
      guint count = 0;
      for (int d = d0; d <= d1; d++)
        for (int m = 1; m <= 9; m++)
          {
            double l = log10 (m) + d;
            if (l < lo10 || l > hi10 || log_level (m) > level)
              continue;
            gap = MIN (gap, (l - last) / span * pixels);
            last = l;
            count++;
          }
      if (gap >= min_gap_px || level == 0)
        {
          n_labelled = count;
          break;
        }
    }
  /* less than two labels within the range (a narrow one): nice linear
   * steps of the values themselves */
  if (n_labelled < 2 && level == 2)
    return rlx_axis_linear_ticks (pow (10, lo10), pow (10, hi10),
                                  MAX (2, (int) (pixels / min_gap_px)), ticks);
  /* the chosen level's labels (thinned where decades would crowd), then
   * any other tick that fits between them */
  {
    double last = -INFINITY, placed[RLX_AXIS_MAX_TICKS];
    guint n_placed = 0;
    for (int d = d0; d <= d1; d++)
      for (int m = 1; m <= 9; m++)
        {
          double l = log10 (m) + d, v = m * pow (10, d);
          gboolean labelled;
          char label[32];
          if (l < lo10 || l > hi10)
            continue;
          labelled = log_level (m) <= level && (l - last) / span * pixels >= min_gap_px;
          if (labelled)
            last = placed[n_placed++ % RLX_AXIS_MAX_TICKS] = l;
          rlx_axis_format_value (v, label, sizeof label);
          n = push (ticks, n, v, labelled, label);
        }
    for (guint i = 0; i < n; i++)
      {
        double l = log10 (ticks[i].value), gap = INFINITY;
        if (ticks[i].major)
          continue;
        for (guint j = 0; j < MIN (n_placed, RLX_AXIS_MAX_TICKS); j++)
          gap = MIN (gap, fabs (l - placed[j]) / span * pixels);
        if (gap >= min_gap_px && n_placed < RLX_AXIS_MAX_TICKS)
          {
            ticks[i].major = TRUE;
            rlx_axis_format_value (ticks[i].value, ticks[i].label, sizeof ticks[i].label);
            placed[n_placed++] = l;
          }
      }
  }
  return n;
}

guint
rlx_axis_clock_ticks (double lo_s, double hi_s, int max_ticks, RlxAxisTick *ticks)
{
  static const double steps[] = { 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
                                  3600, 7200, 10800, 21600, 43200, 86400 };
  double step = steps[G_N_ELEMENTS (steps) - 1], offset;
  g_autoptr(GDateTime) first = NULL;
  guint n = 0;

  if (!(hi_s >= lo_s) || !isfinite (lo_s) || !isfinite (hi_s))
    return 0;
  for (guint i = 0; i < G_N_ELEMENTS (steps); i++)
    if ((hi_s - lo_s) / steps[i] <= MAX (1, max_ticks))
      {
        step = steps[i];
        break;
      }
  /* aligned to the local clock, not to the Unix epoch */
  first = g_date_time_new_from_unix_local ((gint64) floor (lo_s));
  offset = first ? g_date_time_get_utc_offset (first) / (double) G_TIME_SPAN_SECOND : 0;
  for (double k = ceil ((lo_s + offset) / step); k * step - offset <= hi_s + 1e-6 &&
       n < RLX_AXIS_MAX_TICKS; k++)
    {
      double v = k * step - offset;
      g_autoptr(GDateTime) t = g_date_time_new_from_unix_local ((gint64) llround (v));
      g_autofree char *label = t ? g_date_time_format (t, step < 60 ? "%H:%M:%S" : "%H:%M")
                                 : NULL;
      n = push (ticks, n, v, TRUE, label ? label : "");
    }
  return n;
}
