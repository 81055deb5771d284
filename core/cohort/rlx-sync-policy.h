/* rlx-sync-policy.h — `--sync step|outer:H|auto`: the parser and the `auto`
 * chooser
 *
 * The chooser is a pure function of what was measured (DESIGN.md, "Training
 * across slow links"): each of the leader's links (round trip, throughput,
 * whether it stays on this host), the bytes one exchange puts on a link at
 * the chosen wire precision, the measured step time and the number of ranks.
 *
 * The rule:
 *   - one rank, or every link on this host: `step` (the seed's protocol);
 *   - else the cost of one exchange through the leader: each remote link
 *     carries its member's array in and the update out, all links at once,
 *     so the exchange is the costliest link's
 *         exchange = max over remote links of  rtt + 2 · bytes / throughput
 *     with each link's own round trip and throughput as measured (rlx-link-
 *     estimates.h). The topology is in the throughput: with each member on
 *     a link of its own (RLX_LINK_SHAPE shapes every link by itself; hosts
 *     with their own uplinks) a link measures its own rate, and links that
 *     share one pipe (the leader's uplink) each measure their share of it,
 *     since a round's arrays arrive together and each is timed over its own
 *     span. Counting every member's bytes on one pipe as well (the rule
 *     until 2026-12-02: rtt + 2 · members · bytes / throughput) counted a
 *     shared pipe twice and gave per-link links members times the exchange
 *     they had (eight ranks over 200 Mbit/s, mnist-mlp-xl: 4.2 s against
 *     0.65 s). What is assumed: a link's rate out is its rate in (the
 *     leader times what arrives, not what it sends); a leader whose uplink
 *     alone is narrow is not seen. When step mode's per-step exchange
 *     costs under RLX_SYNC_STEP_FRACTION of a step: `step`;
 *   - else `outer:H` with the smallest H whose compute hides the exchange
 *     with a margin, H · step ≥ RLX_SYNC_MARGIN · exchange, at least
 *     RLX_SYNC_MIN_H, and never more than the most H training tolerates
 *     (the model's bound, rlx_sync_max_h_for_model, from
 *     scripts/sim-outer.py: BENCHMARKS.md "Outer mode") — at that bound
 *     the reason says the link is not fully hidden;
 *   - fragments: always 1. The cohort sends each round's arrays whole
 *     (streaming them in fragments is not built), so a choice of more
 *     would only be a false claim in the reason (issue 28's 50 Mbit/s row
 *     said "in 2 fragments" and ran whole arrays).
 *   - when even the most H does not hide the exchange, and the inputs say
 *     the bytes a value takes (value_bytes), the reason names the widest
 *     narrower wire precision whose exchange, over every remote link,
 *     one round's compute would hide ("; at a wire precision of f16 its
 *     1.2 s exchange would hide"), or says that none would: the wire
 *     precision is the user's choice, and over such a link it is what
 *     decides the speed (issue 28, mnist-mlp-xl over 50 Mbit/s, two ranks:
 *     1.32× one rank at f32, 1.87× at f16 on the H100 host, 2026-12-07).
 * The round it predicts (round_ms): rounds overlap by one (docs/PROTOCOL.md,
 * "Overlap"), so the update of round k comes down, round k + 2 is computed
 * from it and its pseudo-gradient goes up before round k + 2 commits; two
 * rounds take at least exchange + H · step, and a round
 * max(H · step, (exchange + H · step) / 2): the exchange hides when it is
 * at most one round's compute, and past that each round waits half of what
 * it is over (issue 28, mnist-mlp-xl over 50 Mbit/s at f32: 2.4 s against
 * 1.2–2.1 s of compute, rounds of 1.8–2.3 s as measured on the device and
 * on dev, not the exchange's 2.4 s nor 2 × the compute).
 * A remote link without a throughput estimate yet is taken as
 * RLX_SYNC_UNKNOWN_BYTES_PER_S (a slow home uplink), so `auto` errs on the
 * side of communicating less until it has measured. With remote links and
 * no step time measured yet (step_ms 0), the choice is `outer:H` at
 * RLX_SYNC_PROVISIONAL_H (bounded by the maximum H): a remote link makes
 * the step mode slow enough (issue 28: 0.02–0.33× one rank) that measuring
 * with step rounds costs more than a few outer rounds at an H that trains
 * well; the caller chooses again once the steps are measured.
 *
 * Threads: pure functions; any thread.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define RLX_SYNC_ERROR (rlx_sync_error_quark ())
GQuark rlx_sync_error_quark (void);

typedef enum {
  RLX_SYNC_ERROR_PARSE,      /* a --sync value that is not one */
  RLX_SYNC_ERROR_INVALID,    /* inputs the chooser cannot use (named in the message) */
} RlxSyncError;

typedef enum {
  RLX_SYNC_STEP = 0,         /* every step's gradients averaged */
  RLX_SYNC_OUTER,            /* H local steps, then outer averaging */
  RLX_SYNC_AUTO,             /* chosen from measurement (a request, never a choice) */
} RlxSyncMode;

/* The chooser's constants (see the rule above). */
#define RLX_SYNC_STEP_FRACTION        0.05
#define RLX_SYNC_MARGIN               1.5
/* The least H `auto` picks: an outer round has its own cost (the start from
 * θ, the pseudo-gradient, its codes, the apply and two hashes of n floats;
 * on the leader the sums and the finish), which at a few steps a round is a
 * large share of it — the device run of issue 28 made 1.37× one rank with
 * mnist-mlp-xl at H 5–6 over 1 Gbit/s, against 1.7–1.8× at H 25 — and with
 * more rounds per sample the outer momentum grew unstable sooner
 * (BENCHMARKS.md, "Accuracy per sample at the defaults"). */
#define RLX_SYNC_MIN_H                20u
/* The most H `auto` picks. scripts/sim-outer.py (Fashion-MNIST, inner SGD
 * 0.05 at batch 256, outer Nesterov 0.7/0.9; 104 runs, none diverged, H=200
 * included) puts it here: at 2 ranks and equal samples, H ≤ 50 stays within
 * 1 pt of one rank (mnist-mlp 2 epochs: 78.0% against 78.8%; 10 epochs:
 * 85.4% against 83.6%; mnist-mlp-xl 3 epochs: 80.3% against 78.5%) while
 * H = 100 loses 1.9 pt and H = 200 3.3 pt at 2 epochs; issue 28's own run
 * saw H = 200 diverge. */
#define RLX_SYNC_MAX_H                50u
/* mnist-mlp's own bound (rlx_sync_max_h_for_model). Its steps are short
 * (1.6 ms on the H200 host), so a link's round trip needs more of them: 50
 * left the 50 ms round trip of issue 28's 200 Mbit/s link unhidden (1.63×
 * one rank). scripts/sim-outer.py, 2 workers, 5 epochs of samples, seeds
 * 0–2 (BENCHMARKS.md, "Outer mode's defaults"): every H from 50 to 150
 * stays above the step mode (79.8–80.2 %); against one rank (82.2–82.5 %)
 * H 50 gains 0.2–0.4 pt, H 75 loses 0.3–0.6, H 150 0.7–1.3 (median 0.65),
 * H 100 0.1–1.8; at 4 workers H 150 is at the step mode (77.3 % against
 * 77.1 %). None diverged, nor in the 104 runs above, H = 200 included.
 * (mnist-mlp-xl diverged at H = 200 in issue 28's run: it keeps 50.) */
#define RLX_SYNC_MAX_H_MNIST_MLP      150u
/* The H of the outer mode before the step is measured (above): between the
 * H that hides issue 28's 200 Mbit/s link behind mnist-mlp-xl's steps (~30)
 * and the few that a slow step (a large model) should run before `auto`
 * measures and chooses again. */
#define RLX_SYNC_PROVISIONAL_H        20u
#define RLX_SYNC_UNKNOWN_BYTES_PER_S  (1.0e6)
/* The largest H `outer:H` accepts (rlx-outer.h's RLX_OUTER_MAX_H). */
#define RLX_SYNC_PARSE_MAX_H          10000u

/* What --sync asked for: @h is H for RLX_SYNC_OUTER, else 0. */
typedef struct {
  RlxSyncMode mode;
  guint       h;
} RlxSyncRequest;

/* "step", "outer:H" (H = 1..RLX_SYNC_PARSE_MAX_H, decimal) or "auto". FALSE
 * with RLX_SYNC_ERROR_PARSE saying what was wrong and what is accepted;
 * @out untouched then. */
gboolean rlx_sync_parse  (const char *s, RlxSyncRequest *out, GError **error);
/* @request is one rlx_sync_parse could have made (a mode, H in range for
 * outer); FALSE with RLX_SYNC_ERROR_INVALID saying what is wrong. */
gboolean rlx_sync_request_check (const RlxSyncRequest *request, GError **error);
/* The request as --sync writes it ("outer:50"); free it. */
char    *rlx_sync_format (const RlxSyncRequest *request);
/* "step", "outer", "auto". */
const char *rlx_sync_mode_to_string (RlxSyncMode mode);

/* The most H `auto` picks for the model @slug ("mnist-mlp"; the bound its
 * simulation showed to train within 1 pt of one rank at equal samples):
 * RLX_SYNC_MAX_H_MNIST_MLP for mnist-mlp, RLX_SYNC_MAX_H for the others
 * and for NULL or an unknown slug. The chooser's max_h input. */
guint       rlx_sync_max_h_for_model (const char *slug);

/* "24 MB/s", "1.2 GB/s", "500 kB/s" (decimal units, as links are sold), and
 * "51 ms", "0.4 ms", "2.4 s": how reasons write figures. Free them. */
char       *rlx_sync_format_rate (double bytes_per_s);
char       *rlx_sync_format_ms   (double ms);

/* One of the leader's links as measured. */
typedef struct {
  const char *name;          /* the peer's name, for the reason (NULL: "a member") */
  gboolean    local;         /* stays on this host (the local bus)       */
  double      rtt_ms;        /* round trip, ms (≥ 0)                     */
  double      bytes_per_s;   /* throughput one way; 0: not measured yet  */
} RlxSyncLink;

typedef struct {
  const RlxSyncLink *links;  /* the leader's links to the members       */
  guint              n_links;
  guint              n_ranks;        /* the leader included          */
  guint64            exchange_bytes; /* one array at the wire precision */
  double             step_ms;        /* measured time of one inner step (0: not yet) */
  guint              max_h;          /* 0: RLX_SYNC_MAX_H (the model's:
                                      * rlx_sync_max_h_for_model)     */
  guint              value_bytes;    /* bytes a value at the wire precision (4 f32,
                                      * 2 f16, 1 f8); 0: not said. With it a
                                      * reason whose exchange does not hide
                                      * names the narrower precision that
                                      * would hide it (the rule above)  */
} RlxSyncInputs;

typedef struct {
  RlxSyncMode mode;          /* RLX_SYNC_STEP or RLX_SYNC_OUTER        */
  guint       h;             /* outer: inner steps per round; step: 1  */
  guint       fragments;     /* 1 (the rule above)                     */
  double      exchange_ms;   /* the estimated exchange (0 when all local) */
  char       *reason;        /* "outer every 40 steps: link to host-b 24 MB/s, 51 ms" */
  gboolean    provisional;   /* no step time measured yet (the rule above) */
  double      round_ms;      /* outer: the predicted round (the rule above); else 0 */
} RlxSyncChoice;

/* Choose (the rule above). FALSE with RLX_SYNC_ERROR_INVALID when an input
 * is out of range (a negative or non-finite time or throughput, no ranks);
 * @out is untouched then. Free the
 * choice's fields with rlx_sync_choice_clear. */
gboolean rlx_sync_choose       (const RlxSyncInputs *in, RlxSyncChoice *out, GError **error);
void     rlx_sync_choice_clear (RlxSyncChoice *choice);

G_END_DECLS
