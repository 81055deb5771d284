#!/usr/bin/env python3
"""PyTorch CUDA references for --compute f16 (issue 27), run THERE by gpu-f16.sh.

  torch-f16.py steps --models mnist-mlp-xl:8192,... [--rounds 3] [--seconds 2]
      samples/s of whole SGD steps (forward, backward, update; one GPU, no
      DDP) in FP32 (TF32 off) and under CUDA autocast f16 with a GradScaler,
      the rounds interleaved; one JSON line per model, mode and round.
  torch-f16.py gemm PROFILE [--rounds 3]
      every GEMM of an `RLX_VK_PROFILE=1 rlx-rank bench` profile (its
      "MxNxK AB tile ..." lines; A 'N': M×K row-major, 'T': stored K×M;
      B 'N': K×N, 'T': stored N×K) timed through torch.mm at that very
      shape and layout: sgemm with TF32 off (cuBLAS FP32) and hgemm (f16),
      median of ROUNDS × 50 calls (CUDA events); one JSON line per GEMM with
      ours beside it (our GEMM's own dispatch, plus its split-K reduce).

The models are torch_ref.py's (carried beside this script as
.devcarry/torch_ref.py, or from ../shared/bench).
"""
import argparse, json, os, re, statistics, sys, time

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
for d in (os.environ.get("RLX_TORCH_REF_DIR", ""), os.path.join(here, "..", "..", ".devcarry"),
          here, os.path.join(here, "..", "..", "..", "shared", "bench")):
    if d and os.path.exists(os.path.join(d, "torch_ref.py")):
        sys.path.insert(0, d)
        break
from torch_ref import model  # noqa: E402


def step_rate(slug, batch, mode, seconds):
    dev = torch.device("cuda")
    torch.manual_seed(0)
    m = model(slug).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    scaler = torch.cuda.amp.GradScaler() if mode == "amp" else None
    x = torch.rand(batch, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        if scaler is None:
            F.cross_entropy(m(x), y).backward()
            opt.step()
        else:
            with torch.autocast(device_type="cuda", dtype=torch.float16):
                loss = F.cross_entropy(m(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    steps, t0 = 0, time.perf_counter()
    while True:
        step()
        steps += 1
        if steps % 10 == 0:
            torch.cuda.synchronize()
            if time.perf_counter() - t0 >= seconds:
                break
    return steps * batch / (time.perf_counter() - t0)


def cmd_steps(a):
    cases = [(s.split(":")[0], int(s.split(":")[1])) for s in a.models.split(",")]
    for r in range(1, a.rounds + 1):
        for slug, batch in cases:
            for mode in ("f32", "amp"):
                sps = step_rate(slug, batch, mode, a.seconds)
                print(json.dumps({"label": f"torch-{mode}", "model": slug, "batch": batch,
                                  "round": r, "samples_per_s": sps}), flush=True)


LINE = re.compile(r"^\s*([0-9.]+) us\s+\S+\s+(\d+)x(\d+)x(\d+) ([NT])([NT]) tile (\d+)x(\d+) split (\d+)(.*)$")
ANY = re.compile(r"^\s*([0-9.]+) us\s+(.*)$")


def time_mm(fn, rounds):
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(50):
            fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) * 1000 / 50)
    return statistics.median(out)


def cmd_gemm(a):
    lines = open(a.profile).read().splitlines()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    header = next((l for l in lines if l.startswith("rlx-vk profile:")), "")
    for i, l in enumerate(lines):
        g = LINE.match(l)
        if not g:
            continue
        ours = float(g.group(1))
        M, N, K = int(g.group(2)), int(g.group(3)), int(g.group(4))
        am, bm, split = g.group(5), g.group(6), int(g.group(9))
        reduce_us = 0.0
        if split > 1 and i + 1 < len(lines) and ANY.match(lines[i + 1]):
            reduce_us = float(ANY.match(lines[i + 1]).group(1))
        res = {"label": "gemm", "profile": header, "M": M, "N": N, "K": K, "layout": am + bm,
               "split": split, "f16": "f16" in g.group(10), "ours_us": ours + reduce_us,
               "ours_reduce_us": reduce_us}
        for dt, key in ((torch.float32, "cublas_f32_us"), (torch.float16, "cublas_f16_us")):
            A = torch.randn(M, K, device=dev, dtype=dt) if am == "N" else torch.randn(K, M, device=dev, dtype=dt).t()
            B = torch.randn(K, N, device=dev, dtype=dt) if bm == "N" else torch.randn(N, K, device=dev, dtype=dt).t()
            res[key] = time_mm(lambda: torch.mm(A, B), a.rounds)
        ref = res["cublas_f16_us"] if res["f16"] else res["cublas_f32_us"]
        res["ours_over_cublas"] = res["ours_us"] / ref if ref > 0 else None
        res["tflops_ours"] = 2.0 * M * N * K / (res["ours_us"] * 1e6)
        print(json.dumps(res), flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("steps")
    s.add_argument("--models", default="mnist-mlp-xl:4096,mnist-mlp-xl:8192,mnist-mlp:1024,mnist-cnn:1024")
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--seconds", type=float, default=2.0)
    g = sub.add_parser("gemm")
    g.add_argument("profile")
    g.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    (cmd_steps if a.what == "steps" else cmd_gemm)(a)


if __name__ == "__main__":
    main()
