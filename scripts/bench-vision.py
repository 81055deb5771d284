#!/usr/bin/env python3
"""Vision figures for BENCHMARKS.md, each side by side with PyTorch in one run.

  bench-vision.py RLX_RANK TORCH_REF speed    [--reps 3] [--seconds 1]
  bench-vision.py RLX_RANK TORCH_REF cputime  [--reps 3] [--seconds 1]
  bench-vision.py RLX_RANK TORCH_REF accuracy

speed: for every model and batch 64/256/1024, `rlx-rank bench --backend cpu`
(default threads, and --threads 1 / 2) against `torch_ref.py speed` with
--threads 1 and --threads 2, interleaved, --reps times; each repetition gives
a ratio ours / PyTorch's best of its two thread settings; the table shows
medians.

cputime: the same steps, one thread each (`rlx-rank bench --threads 1`;
torch_ref.py's own model() and step with torch.set_num_threads(1) and
OPENBLAS_NUM_THREADS=1), as samples per CPU-second of the process: on a
machine that others load, a thread that is descheduled does not count, so
this figure moves much less than wall-clock samples/s.

accuracy: `rlx-rank train` on fashion-mnist, 2 epochs, batch 64, lr 0.05,
for mnist-mlp and mnist-cnn, in the seeded permutation (the default) and in
file order (what torch_ref.py does), against `torch_ref.py accuracy`.
"""
import json, os, re, statistics, subprocess, sys

MODELS = ["mnist-mlp", "mnist-mlp-xl", "mnist-cnn"]
BATCHES = [64, 256, 1024]
TORCH_PY = "/usr/bin/python3"


def ours(rank, model, batch, seconds, threads=None):
    cmd = [rank, "bench", "--model", model, "--batch", str(batch), "--backend", "cpu",
           "--seconds", str(seconds), "--json"]
    if threads:
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["samples_per_second"]


def torch_speed(ref, model, threads, seconds):
    out = subprocess.run([TORCH_PY, ref, "speed", "--models", model, "--threads", str(threads),
                          "--batches", ",".join(map(str, BATCHES)), "--seconds", str(seconds)],
                         check=True, capture_output=True, text=True).stdout
    sps = {}
    for line in out.splitlines():
        m = re.match(r"(\S+) batch (\d+) cpu: ([\d,]+) samples/s", line)
        if m:
            sps[int(m.group(2))] = float(m.group(3).replace(",", ""))
    return sps


TORCH_CPUTIME = r"""
import importlib.util, sys, time, torch, torch.nn.functional as F
spec = importlib.util.spec_from_file_location("torch_ref", sys.argv[1])
ref = importlib.util.module_from_spec(spec); spec.loader.exec_module(ref)
torch.set_num_threads(1)
slug, seconds = sys.argv[2], float(sys.argv[3])
for b in map(int, sys.argv[4].split(",")):
    torch.manual_seed(0)
    m = ref.model(slug)
    x = torch.rand(b, 1, 28, 28); y = torch.randint(0, 10, (b,))
    def step():  # torch_ref.py speed's step
        m.zero_grad(set_to_none=True)
        F.cross_entropy(m(x), y).backward()
        return [p.grad.cpu() for p in m.parameters()]
    for _ in range(10):
        step()
    n, w0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - w0 < seconds:
        step(); n += 1
    print(b, n * b / (time.process_time() - c0), flush=True)
"""


def torch_cputime(ref, model, seconds):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run([TORCH_PY, "-c", TORCH_CPUTIME, ref, model, str(seconds),
                          ",".join(map(str, BATCHES))],
                         check=True, capture_output=True, text=True, env=env).stdout
    return {int(b): float(v) for b, v in (line.split() for line in out.splitlines())}


def ours_cputime(rank, model, batch, seconds):
    out = subprocess.run([rank, "bench", "--model", model, "--batch", str(batch), "--backend", "cpu",
                          "--seconds", str(seconds), "--threads", "1", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["samples_per_cpu_second"]


def cputime(rank, ref, reps, seconds):
    rows = {(m, b): {"ours": [], "torch": [], "ratio": []} for m in MODELS for b in BATCHES}
    for rep in range(reps):
        for m in MODELS:
            t = torch_cputime(ref, m, seconds)
            for b in BATCHES:
                r = rows[(m, b)]
                r["ours"].append(ours_cputime(rank, m, b, seconds))
                r["torch"].append(t[b])
                r["ratio"].append(r["ours"][-1] / t[b])
            print(f"# cputime rep {rep + 1}/{reps} {m} done", file=sys.stderr, flush=True)
    med = statistics.median
    print("| model | batch | rlx-rank --threads 1 | PyTorch, 1 thread | ratio |")
    print("|---|---|---|---|---|")
    for m in MODELS:
        for b in BATCHES:
            r = rows[(m, b)]
            print(f"| {m} | {b} | {med(r['ours']):,.0f} | {med(r['torch']):,.0f} | "
                  f"**{med(r['ratio']):.2f}×** |")
    print(f"\nsamples per CPU-second of the process, one thread each, medians of {reps} "
          f"interleaved repetitions of {seconds} s.")


def speed(rank, ref, reps, seconds):
    rows = {(m, b): {"ours": [], "ours1": [], "ours2": [], "t1": [], "t2": [], "ratio": [],
                     "ratio_best": []} for m in MODELS for b in BATCHES}
    for rep in range(reps):
        for m in MODELS:
            t1 = torch_speed(ref, m, 1, seconds)
            for b in BATCHES:
                r = rows[(m, b)]
                r["ours"].append(ours(rank, m, b, seconds))
                r["ours1"].append(ours(rank, m, b, seconds, 1))
                r["ours2"].append(ours(rank, m, b, seconds, 2))
            t2 = torch_speed(ref, m, 2, seconds)
            for b in BATCHES:
                r = rows[(m, b)]
                r["t1"].append(t1[b])
                r["t2"].append(t2[b])
                best_torch = max(t1[b], t2[b])
                r["ratio"].append(r["ours"][-1] / best_torch)
                r["ratio_best"].append(max(r["ours1"][-1], r["ours2"][-1]) / best_torch)
            print(f"# rep {rep + 1}/{reps} {m} done", file=sys.stderr, flush=True)

    med = statistics.median
    print("| model | batch | rlx-rank (default threads) | rlx-rank --threads 1 / 2 | "
          "PyTorch --threads 1 / 2 | ratio (default) | ratio (best of 1/2) |")
    print("|---|---|---|---|---|---|---|")
    for m in MODELS:
        for b in BATCHES:
            r = rows[(m, b)]
            print(f"| {m} | {b} | {med(r['ours']):,.0f} | {med(r['ours1']):,.0f} / "
                  f"{med(r['ours2']):,.0f} | {med(r['t1']):,.0f} / {med(r['t2']):,.0f} | "
                  f"**{med(r['ratio']):.2f}×** | {med(r['ratio_best']):.2f}× |")
    print(f"\nsamples/s, medians of {reps} interleaved repetitions of {seconds} s each; "
          "ratios are per repetition against PyTorch's best thread setting.")


def accuracy(rank, ref):
    torch_acc = {}
    out = subprocess.run([TORCH_PY, ref, "accuracy", "--models", "mnist-mlp,mnist-cnn",
                          "--epochs", "2", "--batch", "64", "--lr", "0.05"],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.match(r"(\S+): test accuracy ([\d.]+)", line)
        if m:
            torch_acc[m.group(1)] = float(m.group(2))
    print("| model | rlx-rank, seeded permutation | rlx-rank, file order | PyTorch (file order) |"
          " difference (file order) |")
    print("|---|---|---|---|---|")
    for model in ["mnist-mlp", "mnist-cnn"]:
        acc = {}
        for order in ["permuted", "file"]:
            out = subprocess.run([rank, "train", "--model", model, "--dataset", "fashion-mnist",
                                  "--batch", "64", "--lr", "0.05", "--epochs", "2", "--seed", "0",
                                  "--backend", "cpu", "--order", order, "--json"],
                                 check=True, capture_output=True, text=True).stdout
            done = json.loads(out.strip().splitlines()[-1])
            acc[order] = done["test_accuracy"]
        t = torch_acc[model]
        print(f"| {model} | {100 * acc['permuted']:.2f}% | {100 * acc['file']:.2f}% | "
              f"{100 * t:.2f}% | {100 * (acc['file'] - t):+.2f} points |")


def main():
    if len(sys.argv) < 4 or sys.argv[3] not in ("speed", "cputime", "accuracy"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    rank, ref, what = sys.argv[1:4]
    args = sys.argv[4:]
    reps = int(args[args.index("--reps") + 1]) if "--reps" in args else 3
    seconds = float(args[args.index("--seconds") + 1]) if "--seconds" in args else 1.0
    if what == "speed":
        speed(rank, ref, reps, seconds)
    elif what == "cputime":
        cputime(rank, ref, reps, seconds)
    else:
        accuracy(rank, ref)


if __name__ == "__main__":
    main()
