#!/usr/bin/env python3
"""Outer-mode (DiLoCo-style) training simulated in PyTorch, to choose defaults.

  sim-outer.py [--models mnist-mlp:2,mnist-mlp-xl:1] [--workers 2,4]
               [--H 10,20,50,100,200] [--outer-lr 0.7,0.5,0.3] [--momentum 0.9]
               [--inner-lr 0.05] [--batch 256] [--threads 1] [--seed 0]
               [--jsonl FILE] [--no-baselines]

What it simulates (the outer mode of ../shared/DESIGN.md, "Training across
slow links", as core/cohort/rlx-outer.h computes it):
  - W workers start every outer round from the shared outer parameters and
    each takes H inner SGD steps (lr --inner-lr, --batch samples a step) on
    its own contiguous slice of the sample stream; the stream is one seeded
    permutation of Fashion-MNIST's 60,000 training images per epoch, the
    epochs concatenated, so a round may cross an epoch boundary;
  - the pseudo-gradient of a worker is outer − local; the outer step averages
    them weighted by samples, m = μ·m + Δ, update = lr_o·(Δ + μ·m) (Nesterov,
    as torch.optim.SGD(nesterov=True) does it), outer −= update;
  - the run ends after EPOCHS × 60,000 samples in all (all workers together:
    "epochs of samples"); the last round is cut short so that it ends there,
    and its outer step is taken before the test.
A model's name may carry ":EPOCHS" (default 1). Baselines in the same run:
one rank of plain SGD (batch --batch) and the step mode at W ranks (every
step averages W batches: SGD with batch W × --batch), over the same samples.

Prints one markdown table per model and worker count (test accuracy; "div"
marks a run whose parameters became non-finite or that ended under 20%),
and appends one JSON object per run to --jsonl when given.
Runtime on one thread of the 2-core dev machine (shared, under nice): mnist-mlp
2-5 s and mnist-mlp-xl 35-60 s per epoch of samples per run; the default grid
took 34 minutes there.

Needs PyTorch (Debian: apt-get install python3-torch libopenblas0-pthread; run
with /usr/bin/python3) and the Fashion-MNIST files of Debian's
dataset-fashion-mnist package (--data).
"""
import argparse, gzip, json, math, struct, sys, time
import torch, torch.nn as nn, torch.nn.functional as F

TRAIN = 60000


def model(slug):
    # the same definitions as ../shared/DESIGN.md and ../shared/bench/torch_ref.py
    if slug == "mnist-mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    if slug == "mnist-mlp-xl":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(),
                             nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    raise SystemExit(f"sim-outer: unknown model {slug!r}: use mnist-mlp or mnist-mlp-xl")


def idx(path):
    with gzip.open(path) as f:
        nd = struct.unpack(">I", f.read(4))[0] & 0xff
        dims = struct.unpack(">" + "I" * nd, f.read(4 * nd))
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).reshape(dims)


def load(root):
    try:
        xs = idx(f"{root}/train-images-idx3-ubyte.gz").float().div(255).unsqueeze(1)
        ys = idx(f"{root}/train-labels-idx1-ubyte.gz").long()
        xt = idx(f"{root}/t10k-images-idx3-ubyte.gz").float().div(255).unsqueeze(1)
        yt = idx(f"{root}/t10k-labels-idx1-ubyte.gz").long()
    except OSError as e:
        raise SystemExit(f"sim-outer: cannot read Fashion-MNIST in {root} ({e}); install "
                         "Debian's dataset-fashion-mnist or pass --data DIR")
    return xs, ys, xt, yt


class Stream:
    """The sample stream: a seeded permutation per epoch, epochs concatenated."""

    def __init__(self, seed):
        self.seed, self.perms = seed, {}

    def take(self, start, n):
        out = []
        while n > 0:
            epoch, pos = divmod(start, TRAIN)
            if epoch not in self.perms:
                g = torch.Generator().manual_seed(self.seed * 1000 + epoch)
                self.perms = {epoch: torch.randperm(TRAIN, generator=g)}
            k = min(n, TRAIN - pos)
            out.append(self.perms[epoch][pos:pos + k])
            start, n = start + k, n - k
        return torch.cat(out)


def flat(m):
    return torch.nn.utils.parameters_to_vector(m.parameters()).detach().clone()


def load_flat(m, v):
    # vector_to_parameters makes the parameters views of its vector: give it a copy
    torch.nn.utils.vector_to_parameters(v.clone(), m.parameters())


def sgd_steps(m, xs, ys, idxs, batch, lr):
    """Plain SGD over @idxs in batches of @batch; False once the loss is not finite."""
    for i in range(0, len(idxs), batch):
        b = idxs[i:i + batch]
        m.zero_grad(set_to_none=True)
        loss = F.cross_entropy(m(xs[b]), ys[b])
        if not math.isfinite(loss.item()):
            return False
        loss.backward()
        with torch.no_grad():
            for p in m.parameters():
                p.sub_(p.grad, alpha=lr)
    return True


def test(m, xt, yt):
    with torch.no_grad():
        if not all(torch.isfinite(p).all() for p in m.parameters()):
            return 0.0
        return (m(xt).argmax(1) == yt).float().mean().item()


def run_outer(slug, data, workers, H, olr, mu, ilr, batch, epochs, seed):
    xs, ys, xt, yt = data
    torch.manual_seed(seed)
    m = model(slug)
    outer = flat(m)
    mom = torch.zeros_like(outer)
    stream, pos, total = Stream(seed), 0, epochs * TRAIN
    rounds, finite = 0, True
    while pos < total and finite:
        per = min(H * batch, math.ceil((total - pos) / workers))  # last round cut short
        delta, weight = torch.zeros_like(outer), 0
        for w in range(workers):
            n = min(per, total - pos)
            if n <= 0:
                break
            load_flat(m, outer)
            finite = sgd_steps(m, xs, ys, stream.take(pos, n), batch, ilr) and finite
            pos += n
            delta += n * (outer - flat(m))   # pseudo-gradient, weighted by samples
            weight += n
        delta /= weight
        mom = mu * mom + delta               # outer Nesterov momentum
        outer = outer - olr * (delta + mu * mom)
        finite = finite and bool(torch.isfinite(outer).all())
        rounds += 1
    load_flat(m, outer)
    return test(m, xt, yt), rounds


def run_sgd(slug, data, batch, lr, epochs, seed):
    xs, ys, xt, yt = data
    torch.manual_seed(seed)
    m = model(slug)
    stream = Stream(seed)
    sgd_steps(m, xs, ys, stream.take(0, epochs * TRAIN), batch, lr)
    return test(m, xt, yt)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="mnist-mlp:2,mnist-mlp-xl:1")
    ap.add_argument("--workers", default="2,4")
    ap.add_argument("--H", default="10,20,50,100,200")
    ap.add_argument("--outer-lr", default="0.7,0.5,0.3")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--inner-lr", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--jsonl", default=None)
    ap.add_argument("--no-baselines", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    try:
        hs = [int(h) for h in a.H.split(",")]
        olrs = [float(x) for x in a.outer_lr.split(",")]
        ws = [int(w) for w in a.workers.split(",")]
        models = [(s.split(":")[0], int(s.split(":")[1]) if ":" in s else 1)
                  for s in a.models.split(",")]
    except ValueError as e:
        raise SystemExit(f"sim-outer: bad list ({e}): give comma-separated numbers, "
                         "models as NAME[:EPOCHS]")
    if any(h < 1 for h in hs) or any(w < 1 for w in ws):
        raise SystemExit("sim-outer: H and worker counts must be at least 1")
    data = load(a.data)
    out = open(a.jsonl, "a") if a.jsonl else None
    t_all = time.perf_counter()

    def record(obj):
        if out:
            out.write(json.dumps(obj) + "\n")
            out.flush()

    for slug, epochs in models:
        base = {}
        if not a.no_baselines:
            t0 = time.perf_counter()
            base[1] = run_sgd(slug, data, a.batch, a.inner_lr, epochs, a.seed)
            record(dict(model=slug, epochs=epochs, mode="one-rank", acc=base[1]))
            for w in ws:
                base[w] = run_sgd(slug, data, a.batch * w, a.inner_lr, epochs, a.seed)
                record(dict(model=slug, epochs=epochs, mode="step", workers=w, acc=base[w]))
            print(f"# {slug}, {epochs} epoch(s) of samples: one rank {base[1]:.2%}; step mode "
                  + ", ".join(f"{w} ranks {base[w]:.2%}" for w in ws)
                  + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
        for w in ws:
            print(f"\n{slug}, {w} workers, {epochs} epoch(s) of samples, inner SGD "
                  f"{a.inner_lr} batch {a.batch}, outer Nesterov μ {a.momentum}"
                  + (f"; one rank {base[1]:.1%}, step mode {base[w]:.1%}" if base else ""))
            print("| H | rounds | " + " | ".join(f"lr {o}" for o in olrs) + " |")
            print("|---|---|" + "---|" * len(olrs))
            for h in hs:
                cells, rounds = [], 0
                for o in olrs:
                    t0 = time.perf_counter()
                    acc, rounds = run_outer(slug, data, w, h, o, a.momentum, a.inner_lr,
                                            a.batch, epochs, a.seed)
                    record(dict(model=slug, epochs=epochs, mode="outer", workers=w, H=h,
                                outer_lr=o, momentum=a.momentum, acc=acc, rounds=rounds,
                                seconds=round(time.perf_counter() - t0, 1)))
                    cells.append("div" if acc < 0.2 else f"{acc:.1%}")
                print(f"| {h} | {rounds} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n(total {time.perf_counter() - t_all:.0f} s, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s))")


if __name__ == "__main__":
    main()
