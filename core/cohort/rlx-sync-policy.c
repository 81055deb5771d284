/* rlx-sync-policy.c — see rlx-sync-policy.h */
#include "rlx-config.h"
#include "rlx-sync-policy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

G_DEFINE_QUARK (rlx-sync-error-quark, rlx_sync_error)

#define ACCEPTED "use step, outer:H (H inner steps per outer round, 1 to %u) or auto"

const char *
rlx_sync_mode_to_string (RlxSyncMode mode)
{
  switch (mode)
    {
    case RLX_SYNC_STEP: return "step";
    case RLX_SYNC_OUTER: return "outer";
    case RLX_SYNC_AUTO: return "auto";
    default: return "?";
    }
}

gboolean
rlx_sync_parse (const char *s, RlxSyncRequest *out, GError **error)
{
  const char *h;
  guint64 v = 0;

  g_return_val_if_fail (out != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (s == NULL || *s == '\0')
    {
      g_set_error (error, RLX_SYNC_ERROR, RLX_SYNC_ERROR_PARSE,
                   "--sync needs a value: " ACCEPTED, RLX_SYNC_PARSE_MAX_H);
      return FALSE;
    }
  if (strcmp (s, "step") == 0 || strcmp (s, "auto") == 0)
    {
      out->mode = s[0] == 's' ? RLX_SYNC_STEP : RLX_SYNC_AUTO;
      out->h = 0;
      return TRUE;
    }
  if (strcmp (s, "outer") == 0)
    {
      g_set_error (error, RLX_SYNC_ERROR, RLX_SYNC_ERROR_PARSE,
                   "--sync outer needs H, the inner steps per outer round: outer:H with H "
                   "from 1 to %u, e.g. outer:50", RLX_SYNC_PARSE_MAX_H);
      return FALSE;
    }
  if (!g_str_has_prefix (s, "outer:"))
    {
      g_autofree char *shown = g_strescape (s, NULL);

      g_set_error (error, RLX_SYNC_ERROR, RLX_SYNC_ERROR_PARSE,
                   "unknown sync mode \"%.40s\": " ACCEPTED, shown, RLX_SYNC_PARSE_MAX_H);
      return FALSE;
    }
  h = s + strlen ("outer:");
  /* digits only (no sign, space or exponent), at most 6 of them */
  for (const char *c = h; *c; c++)
    if (*c < '0' || *c > '9' || c - h >= 6)
      {
        v = G_MAXUINT64;
        break;
      }
    else
      v = v * 10 + (guint64) (*c - '0');
  if (*h == '\0' || v == 0 || v > RLX_SYNC_PARSE_MAX_H)
    {
      g_autofree char *shown = g_strescape (h, NULL);

      g_set_error (error, RLX_SYNC_ERROR, RLX_SYNC_ERROR_PARSE,
                   "--sync outer:%.20s: H must be a whole number of inner steps from 1 to %u, "
                   "e.g. outer:50", shown, RLX_SYNC_PARSE_MAX_H);
      return FALSE;
    }
  out->mode = RLX_SYNC_OUTER;
  out->h = (guint) v;
  return TRUE;
}

gboolean
rlx_sync_request_check (const RlxSyncRequest *request, GError **error)
{
  g_return_val_if_fail (request != NULL, FALSE);

  if (request->mode > RLX_SYNC_AUTO ||
      (request->mode == RLX_SYNC_OUTER && (request->h == 0 || request->h > RLX_SYNC_PARSE_MAX_H)))
    {
      g_set_error (error, RLX_SYNC_ERROR, RLX_SYNC_ERROR_INVALID,
                   "sync mode %d with H %u is not step, outer:H (H = 1..%u) or auto",
                   (int) request->mode, request->h, RLX_SYNC_PARSE_MAX_H);
      return FALSE;
    }
  return TRUE;
}

char *
rlx_sync_format (const RlxSyncRequest *request)
{
  g_return_val_if_fail (request != NULL, NULL);

  if (request->mode == RLX_SYNC_OUTER)
    return g_strdup_printf ("outer:%u", request->h);
  return g_strdup (rlx_sync_mode_to_string (request->mode));
}

void
rlx_sync_choice_clear (RlxSyncChoice *choice)
{
  if (choice != NULL)
    g_clear_pointer (&choice->reason, g_free);
}

guint
rlx_sync_max_h_for_model (const char *slug)
{
  return g_strcmp0 (slug, "mnist-mlp") == 0 ? RLX_SYNC_MAX_H_MNIST_MLP : RLX_SYNC_MAX_H;
}

char *
rlx_sync_format_rate (double bytes_per_s)
{
  if (bytes_per_s >= 1e9)
    return g_strdup_printf ("%.1f GB/s", bytes_per_s / 1e9);
  if (bytes_per_s >= 10e6)
    return g_strdup_printf ("%.0f MB/s", bytes_per_s / 1e6);
  if (bytes_per_s >= 1e6)
    return g_strdup_printf ("%.1f MB/s", bytes_per_s / 1e6);
  return g_strdup_printf ("%.0f kB/s", bytes_per_s / 1e3);
}

char *
rlx_sync_format_ms (double ms)
{
  if (ms >= 1000.0)
    return g_strdup_printf ("%.1f s", ms / 1000.0);
  if (ms >= 10.0)
    return g_strdup_printf ("%.0f ms", ms);
  return g_strdup_printf ("%.1f ms", ms);
}

static gboolean
bad_input (GError **error, const char *what, double v)
{
  g_set_error (error, RLX_SYNC_ERROR, RLX_SYNC_ERROR_INVALID,
               "the sync chooser got %s %g; it needs a finite value ≥ 0 (a measurement "
               "that failed must be left out, not passed on)", what, v);
  return FALSE;
}

/* The exchange through the leader (rlx-sync-policy.h) with @bytes an
 * array: the costliest of @in's remote links, each at its own round trip
 * and rate. */
static double
exchange_ms (const RlxSyncInputs *in, double bytes)
{
  double worst = 0.0;

  for (guint i = 0; i < in->n_links; i++)
    {
      const RlxSyncLink *l = &in->links[i];
      double r = l->bytes_per_s > 0.0 ? l->bytes_per_s : RLX_SYNC_UNKNOWN_BYTES_PER_S;

      if (!l->local)
        worst = MAX (worst, l->rtt_ms + 2.0 * bytes / r * 1000.0);
    }
  return worst;
}

/* When the exchange does not hide behind @compute ms: the widest wire
 * precision narrower than the inputs' (value_bytes) whose exchange, over
 * every remote link, would (rlx-sync-policy.h), as the tail of a reason;
 * NULL when the inputs do not say the value's size or it is one byte. */
static char *
narrower_precision (const RlxSyncInputs *in, double compute)
{
  static const struct { guint bytes; const char *name; } narrower[] = {
    { 2, "f16" }, { 1, "f8e4m3 or f8e5m2" },
  };

  if (in->value_bytes <= 1)
    return NULL;
  for (guint i = 0; i < G_N_ELEMENTS (narrower); i++)
    {
      double ex = exchange_ms (in, (double) in->exchange_bytes * narrower[i].bytes /
                                   in->value_bytes);

      if (narrower[i].bytes >= in->value_bytes || ex > compute)
        continue;
      {
        g_autofree char *e = rlx_sync_format_ms (ex);

        return g_strdup_printf ("; at a wire precision of %s its %s exchange would hide",
                                narrower[i].name, e);
      }
    }
  return g_strdup ("; no narrower wire precision would hide it");
}

gboolean
rlx_sync_choose (const RlxSyncInputs *in, RlxSyncChoice *out, GError **error)
{
  const RlxSyncLink *worst = NULL;
  double exchange = 0.0, worst_rate = 0.0, bytes;
  guint members, max_h, h;
  g_autofree char *rate = NULL, *rtt = NULL, *ex = NULL, *step = NULL;
  const char *name;

  g_return_val_if_fail (in != NULL && out != NULL, FALSE);
  g_return_val_if_fail (in->links != NULL || in->n_links == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (in->n_ranks == 0)
    {
      g_set_error (error, RLX_SYNC_ERROR, RLX_SYNC_ERROR_INVALID,
                   "the sync chooser got a cohort of 0 ranks; count the leader too");
      return FALSE;
    }
  if (!isfinite (in->step_ms) || in->step_ms < 0.0)
    return bad_input (error, "a step time of", in->step_ms);
  members = in->n_ranks - 1;
  bytes = (double) in->exchange_bytes;
  max_h = in->max_h ? in->max_h : RLX_SYNC_MAX_H;

  /* the exchange through the leader: the costliest of its remote links,
   * each carrying its own member's array in and the update out at the
   * rate measured on it (rlx-sync-policy.h: links that share one pipe
   * each measure their share, the arrays of a round arriving together) */
  for (guint i = 0; i < in->n_links; i++)
    {
      const RlxSyncLink *l = &in->links[i];
      double r, cost;

      if (!isfinite (l->rtt_ms) || l->rtt_ms < 0.0)
        return bad_input (error, "a round trip (ms) of", l->rtt_ms);
      if (!isfinite (l->bytes_per_s) || l->bytes_per_s < 0.0)
        return bad_input (error, "a throughput (bytes/s) of", l->bytes_per_s);
      if (l->local)
        continue;
      r = l->bytes_per_s > 0.0 ? l->bytes_per_s : RLX_SYNC_UNKNOWN_BYTES_PER_S;
      cost = l->rtt_ms + 2.0 * bytes / r * 1000.0;
      if (worst == NULL || cost > exchange)
        worst = l, exchange = cost, worst_rate = r;
    }

  out->fragments = 1;
  out->exchange_ms = exchange;
  out->round_ms = 0.0;
  out->provisional = FALSE;
  if (members == 0 || worst == NULL)
    {
      out->mode = RLX_SYNC_STEP;
      out->h = 1;
      out->reason = g_strdup (members == 0 ? "step: one rank, nothing to synchronise"
                                           : "step: every link stays on this host");
      return TRUE;
    }

  name = worst->name && *worst->name ? worst->name : "a member";
  rate = rlx_sync_format_rate (worst_rate);
  rtt = rlx_sync_format_ms (worst->rtt_ms);
  ex = rlx_sync_format_ms (exchange);
  if (in->step_ms <= 0.0)
    {
      /* no step measured yet: the outer mode at once, at an H that trains
       * well, rather than step rounds to measure with (they run at a few
       * per cent of one rank's speed over such a link) */
      out->mode = RLX_SYNC_OUTER;
      out->h = MIN (RLX_SYNC_PROVISIONAL_H, max_h);
      out->provisional = TRUE;
      out->reason = g_strdup_printf ("outer every %u steps until the steps are measured: "
                                     "link to %s %s%s, %s", out->h, name, rate,
                                     worst->bytes_per_s > 0.0 ? "" : " (assumed)",
                                     worst->rtt_ms > 0.0 ? rtt : "round trip not measured yet");
      return TRUE;
    }
  step = rlx_sync_format_ms (in->step_ms);
  if (exchange < RLX_SYNC_STEP_FRACTION * in->step_ms)
    {
      out->mode = RLX_SYNC_STEP;
      out->h = 1;
      out->reason = g_strdup_printf ("step: link to %s %s%s, %s; a step's exchange (%s) is "
                                     "%.1f%% of a %s step", name, rate,
                                     worst->bytes_per_s > 0.0 ? "" : " (assumed)", rtt, ex,
                                     100.0 * exchange / in->step_ms, step);
      return TRUE;
    }

  {
    double need = ceil (RLX_SYNC_MARGIN * exchange / in->step_ms);

    h = need >= (double) max_h ? max_h : MAX ((guint) need, RLX_SYNC_MIN_H);
    h = MIN (h, max_h);
  }
  out->mode = RLX_SYNC_OUTER;
  out->h = h;
  {
    gboolean capped = h == max_h && (double) h * in->step_ms < RLX_SYNC_MARGIN * exchange;
    double compute = (double) h * in->step_ms;
    g_autofree char *how = NULL;

    /* overlapped by one round: the update of round k comes down, round
     * k + 2 is computed from it, its pseudo-gradient goes up and round
     * k + 2 commits, so two rounds take at least the exchange and one
     * round's compute (rlx-sync-policy.h) */
    out->round_ms = MAX (compute, (exchange + compute) / 2.0);
    if (compute >= RLX_SYNC_MARGIN * exchange)
      how = g_strdup_printf ("hides behind %u steps of %s", h, step);
    else if (compute >= exchange)
      how = g_strdup_printf ("just hides behind %u steps of %s (under the %.1f× margin)", h,
                             step, RLX_SYNC_MARGIN);
    else
      {
        g_autofree char *round = rlx_sync_format_ms (out->round_ms);
        g_autofree char *busy = rlx_sync_format_ms (compute);

        g_autofree char *narrower = narrower_precision (in, compute);

        how = g_strdup_printf ("does not hide behind %u steps of %s, so rounds will wait "
                               "for it: %s a round for %s of compute%s", h, step, round, busy,
                               narrower ? narrower : "");
      }
    out->reason = g_strdup_printf ("outer every %u steps%s: link to %s %s%s, %s; the %s "
                                   "exchange %s", h,
                                   capped ? " (the most that trains well)" : "", name, rate,
                                   worst->bytes_per_s > 0.0 ? "" : " (assumed)", rtt, ex, how);
  }
  return TRUE;
}
