#!/usr/bin/env python3
"""Medians and ratios of a gpu-cohort.sh run, as Markdown for BENCHMARKS.md.

  summarize.py results.jsonl [ddp.txt]

Ratios are taken per round (the same round's reference) and their median is
shown; rates are medians over rounds with the range in brackets. Goals are the
issue's: one-rank cohort ≥ 0.9× bench, f16/f8 ≥ f32, two GPUs ≥ 1.8× one,
two GPUs ≥ DDP (mnist-mlp, mnist-cnn) or ≥ 0.9× DDP (mnist-mlp-xl).
"""
import json, re, statistics, sys
from collections import defaultdict


def rate(d):
    return d.get("samples_per_s") or d.get("samples_per_second")


def fmt(v):
    return "—" if v is None else f"{v / 1e6:.3f} M" if v >= 1e5 else f"{v:,.0f}"


def main():
    rows = []
    with open(sys.argv[1]) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    ddp = {}
    if len(sys.argv) > 2:
        try:
            for line in open(sys.argv[2]):
                m = re.match(r"(\S+) ddp \S+ ranks (\d+) batch/rank (\d+): ([\d,]+) samples/s", line)
                if m:
                    ddp[(m[1], int(m[2]))] = float(m[4].replace(",", ""))
        except OSError:
            pass

    by = defaultdict(dict)          # (model, label) -> round -> rate
    errors = []
    for d in rows:
        if "skipped" in d:
            errors.append(f"skipped: {d['skipped']}")
            continue
        label, model = d.get("label"), d.get("model")
        if label is None or model is None:
            continue
        if d.get("error") or (label != "bench" and not d.get("ok", True)):
            errors.append(f"{label} {model} round {d.get('round')}: {d.get('error', 'failed')}"[:300])
        r = rate(d)
        if r and "round" in d:
            by[(model, label)][d["round"]] = r
        if label != "bench" and d.get("hashes_agree") is False:
            errors.append(f"{label} {model}: ranks printed different hashes")

    def med(model, label):
        v = list(by[(model, label)].values())
        return (statistics.median(v), min(v), max(v)) if v else (None, None, None)

    def ratio(model, num, den):
        a, b = by[(model, num)], by[(model, den)]
        rs = [a[k] / b[k] for k in a if k in b and b[k]]
        return (statistics.median(rs), rs) if rs else (None, [])

    models = []
    for (m, _l) in by:
        if m not in models:
            models.append(m)
    print("| model | batch/rank | rlx-rank bench | one-rank cohort f32 | cohort/bench (goal ≥ 0.9) "
          "| f16 | f16/f32 | f8e4m3 | f8/f32 (goal ≥ 1) | two GPUs f32 | two/one (goal ≥ 1.8) "
          "| two GPUs f16 | two GPUs f8e4m3 | DDP 1 GPU | DDP 2 GPUs | two/DDP |")
    print("|" + "---|" * 16)
    for m in models:
        batch = next((d.get("batch_per_rank") or d.get("batch") for d in rows
                      if d.get("model") == m and d.get("label") != "mixed-cpu-gpu" and
                      (d.get("batch_per_rank") or d.get("batch"))), "?")
        cells = [m, str(batch)]
        for label in ("bench", "one-f32"):
            v, lo, hi = med(m, label)
            cells.append(f"{fmt(v)} ({fmt(lo)}–{fmt(hi)})" if v else "—")
        r, rs = ratio(m, "one-f32", "bench")
        cells.append(f"{r:.2f} ({', '.join(f'{x:.2f}' for x in rs)})" if r else "—")
        for label in ("one-f16", "one-f8e4m3"):
            v, _, _ = med(m, label)
            r, rs = ratio(m, label, "one-f32")
            cells += [fmt(v), f"{r:.2f}" if r else "—"]
        v, _, _ = med(m, "two-f32")
        r, _ = ratio(m, "two-f32", "one-f32")
        cells += [fmt(v), f"{r:.2f}" if r else "—"]
        for label in ("two-f16", "two-f8e4m3"):
            vp, _, _ = med(m, label)
            r, _ = ratio(m, label, "two-f32")
            cells.append(f"{fmt(vp)} ({r:.2f}× f32)" if vp and r else fmt(vp))
        d1, d2 = ddp.get((m, 1)), ddp.get((m, 2))
        cells += [fmt(d1), fmt(d2), f"{v / d2:.2f}" if v and d2 else "—"]
        print("| " + " | ".join(cells) + " |")
    # a one-rank cohort with and without its next update made ahead
    # (RLX_VK_PRESUBMIT=0: "one-f32-plain"), in the same rounds
    for m in models:
        r, rs = ratio(m, "one-f32", "one-f32-plain")
        p, ps = ratio(m, "one-f32-plain", "bench")
        if r:
            print(f"\n{m}: one-rank cohort with the next update made ahead / without: {r:.2f} "
                  f"({', '.join(f'{x:.2f}' for x in rs)}); without, cohort/bench: "
                  f"{p:.2f}" if p else "")
    for m in models:
        r, rs = ratio(m, "two-f32", "two-f32-ab")
        if r:
            print(f"\n{m}: two-rank cohort / the same with RLX_DC_AB's setting: {r:.2f} "
                  f"({', '.join(f'{x:.2f}' for x in rs)})")
    for m in models:
        r, rs = ratio(m, "one-f32", "one-f32-ab")
        if r:
            print(f"\n{m}: one-rank cohort / the same with RLX_DC_AB's setting: {r:.2f} "
                  f"({', '.join(f'{x:.2f}' for x in rs)})")
    # the path the cohort took: a leader whose GPU computes its next own
    # gradient behind the finish (own_ahead 1.0) and moves nothing
    # parameter-sized through the host but what the wire needs
    path = [d for d in rows if d.get("label", "").startswith(("one-", "two-")) and "own_ahead" in d]
    if path:
        print("\nThe leader's path (medians over rounds): own gradient computed behind the finish "
              "(fraction of steps) · parameter-sized host bytes per step · main-loop CPU per round")
        print("| model | run | own ahead | update ahead | host bytes/step | main loop ms/round | "
              "step (wall) |")
        print("|---|---|---|---|---|---|---|")
        groups = defaultdict(list)
        for d in path:
            groups[(d["model"], d["label"])].append(d)
        for (m, label), ds in groups.items():
            md = lambda k: statistics.median(x[k] for x in ds if x.get(k) is not None) \
                if any(x.get(k) is not None for x in ds) else None
            oa, ua, hb, cm, su = md("own_ahead"), md("update_ahead"), md("host_bytes_per_step"), \
                md("coordinator_ms"), md("step_us")
            f = lambda v, spec, unit="": "—" if v is None else format(v, spec) + unit
            print(f"| {m} | {label} | {f(oa, '.2f')} | {f(ua, '.2f')} | {f(hb, ',.0f')} | "
                  f"{f(cm, '.3f')} | "
                  f"{f(su, '.0f', ' µs')} |")
        print("\nWhere a step went (ms per step, medians): the worker waiting for work · its own "
              "gradient · its finish · finish → main loop · the device's finish · the device's gradient")
        print("| model | run | worker wait | own | finish | hop | device finish | device grad |")
        print("|---|---|---|---|---|---|---|---|")
        for (m, label), ds in groups.items():
            md = lambda k: statistics.median(x[k] for x in ds if x.get(k) is not None) \
                if any(x.get(k) is not None for x in ds) else None
            f = lambda v: "—" if v is None else format(v, '.3f')
            print(f"| {m} | {label} | " + " | ".join(f(md(k)) for k in (
                "worker_wait_ms", "own_run_ms", "finish_run_ms", "finish_hop_ms",
                "device_finish_ms", "device_grad_ms")) + " |")
    mixed = [d for d in rows if d.get("label") == "mixed-cpu-gpu"]
    for d in mixed:
        print(f"\nMixed CPU + GPU cohort ({d.get('model')}, {d.get('precision')}, "
              f"{d.get('steps')} steps): hashes agree: {d.get('hashes_agree')}, last hashes "
              f"{d.get('last_hash')}, ok: {d.get('ok')}; fallbacks: "
              f"{[j.get('fallback') for j in d.get('joined', [])]}")
    one = [d for d in rows if d.get("label") == "one-f32" and d.get("joined")]
    if one:
        print(f"\nGPU rank's fallback text (where the parameters live): "
              f"{one[0]['joined'][0].get('fallback')!r}")
    if errors:
        print("\nProblems:")
        for e in errors:
            print(f"- {e}")


if __name__ == "__main__":
    main()
