#!/usr/bin/env python3
"""gpu-f16-summary.py RESULTS.jsonl — gpu-f16.sh's results as Markdown tables:
medians of the rounds, ours against PyTorch, the f16 check, the GEMMs
alone against cuBLAS, the Fashion-MNIST accuracies."""
import json, statistics, sys
from collections import defaultdict

rows = []
for line in open(sys.argv[1]):
    try:
        rows.append(json.loads(line))
    except ValueError:
        pass

rate = defaultdict(list)
for r in rows:
    lab = r.get("label")
    sps = r.get("samples_per_s")
    if lab and (lab in ("one-f32", "one-f16", "torch-f32", "torch-amp") or lab.startswith("one-f16:")) and sps:
        rate[(r["model"], r.get("batch", r.get("batch_per_rank")), lab)].append(sps)


def med(k):
    v = rate.get(k)
    return statistics.median(v) if v else None


def m(x):
    return f"{x / 1e6:.3f} M/s" if x else "—"


def ratio(a, b):
    return f"{a / b:.2f}×" if a and b else "—"


print("## Steps (medians of the rounds; one-rank cohorts against PyTorch on one GPU)\n")
print("| model | batch | ours f32 | ours f16 | PyTorch f32 | PyTorch autocast f16 | f32/PT f32 | f16/PT amp | f16/PT f32 | f16/ours f32 | rounds |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for model, batch in sorted({(k[0], k[1]) for k in rate}):
    o32, o16 = med((model, batch, "one-f32")), med((model, batch, "one-f16"))
    t32, t16 = med((model, batch, "torch-f32")), med((model, batch, "torch-amp"))
    n = len(rate.get((model, batch, "one-f32"), []))
    print(f"| {model} | {batch} | {m(o32)} | {m(o16)} | {m(t32)} | {m(t16)} | {ratio(o32, t32)} | "
          f"{ratio(o16, t16)} | {ratio(o16, t32)} | {ratio(o16, o32)} | {n} |")

var = sorted({k for k in rate if k[2].startswith("one-f16:")})
if var:
    print("\n## --compute f16 under other settings (same rounds)\n")
    print("| model | batch | setting | ours f16 | / ours f16 default | / PyTorch f32 | / PyTorch autocast | rounds |")
    print("|---|---|---|---|---|---|---|---|")
    for model, batch, lab in var:
        v = med((model, batch, lab))
        print(f"| {model} | {batch} | {lab[8:]} | {m(v)} | {ratio(v, med((model, batch, 'one-f16')))} | "
              f"{ratio(v, med((model, batch, 'torch-f32')))} | {ratio(v, med((model, batch, 'torch-amp')))} | "
              f"{len(rate[(model, batch, lab)])} |")

chk = [r for r in rows if r.get("label") == "f16-check"]
if chk:
    print("\n## --compute f16 gradients against the CPU emulating f16 (bound: max Δg ≤ "
          f"{chk[0]['grad_bound']}·max g per tensor, Δloss ≤ {chk[0].get('loss_bound', '?')}·loss), "
          "and both distances from the f32 CPU\n")
    print("| setting | model | batch | vs emulation: max Δg / max g | Δloss / loss | within | "
          "vs f32: device | vs f32: CPU emulation |")
    print("|---|---|---|---|---|---|---|---|")
    for r in chk:
        print(f"| {r.get('setting', '-')} | {r['model']} | {r['batch']} | {r['grad_ratio']:.2e} | "
              f"{r['loss_ratio']:.2e} | {'yes' if r.get('ok') else '**no**'} | "
              f"{r.get('f32_device', float('nan')):.2e} | {r.get('f32_emulation', float('nan')):.2e} |")

gem = [r for r in rows if r.get("label") == "gemm"]
if gem:
    print("\n## The GEMMs alone (RLX_VK_PROFILE dispatch times) against cuBLAS, same shapes and layouts\n")
    print("| step | M×N×K | layout | split | ours | ours TFLOP/s | cuBLAS sgemm (TF32 off) | cuBLAS hgemm | ours / cuBLAS (same precision) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in gem:
        step = r["profile"].split(",")[0].replace("rlx-vk profile: ", "")
        print(f"| {step}{' f16' if r['f16'] else ''}{(' ' + r['variant']) if r.get('variant') else ''} | {r['M']}×{r['N']}×{r['K']} | {r['layout']} | "
              f"{r['split']} | {r['ours_us']:.1f} µs | {r['tflops_ours']:.1f} | {r['cublas_f32_us']:.1f} µs | "
              f"{r['cublas_f16_us']:.1f} µs | {r['ours_over_cublas']:.2f}× the time |")

fa = [r for r in rows if r.get("label") == "fashion"]
if fa:
    print("\n## Fashion-MNIST, 2 epochs, batch 64, lr 0.05, seed 1\n")
    print("| model | compute | test accuracy | seconds |")
    print("|---|---|---|---|")
    acc = {}
    for r in fa:
        a = r.get("test_accuracy")
        acc[(r["model"], r["compute"])] = a
        print(f"| {r['model']} | {r['compute']} | {a * 100:.2f} % | {r.get('seconds', 0):.1f} |"
              if a is not None else f"| {r['model']} | {r['compute']} | {r.get('error', '?')} | |")
    for model in sorted({k[0] for k in acc}):
        a32, a16 = acc.get((model, "f32")), acc.get((model, "f16"))
        if a32 is not None and a16 is not None:
            print(f"\n{model}: f16 − f32 = {(a16 - a32) * 100:+.2f} pt (bound ±0.3)")

bad = [r for r in rows if r.get("error") or r.get("skipped")]
if bad:
    print("\n## Failed or skipped\n")
    for r in bad:
        print(f"- {json.dumps(r)[:400]}")
