#!/usr/bin/env python3
"""tec on the GPU vs PyTorch in the same run, reported as ratios (run by tests/gpu/run.sh).

1. Training step of the MLP of bench/gpu/make_models.py (hidden H, H -> H -> GELU -> H, MSE, AdamW):
   tec's FP8 plan (variant sm_90) and BF16 plan (variant sm_80) against PyTorch BF16 eager (same shapes,
   torch.optim.AdamW), each timed per step after warm-up. Ratio = PyTorch ms / tec ms (above 1: tec faster).
2. Raw GEMM throughput: tec's cuBLASLt path (tec-gemm-bench) against torch._scaled_mm (FP8 E4M3, fast
   accumulation, BF16 out) and torch.matmul (BF16), square sizes. Ratio = tec TFLOP/s / torch TFLOP/s.
Writes OUT/bench.json after every case (a run that is cut keeps what it finished) and prints each result
as it comes. tec's binaries run with TEC_LD_LIBRARY_PATH as their LD_LIBRARY_PATH; this process keeps its
own, so that PyTorch loads its own CUDA libraries.
"""
import argparse
import json
import os
import subprocess
import time

import torch


def torch_train_ms(hidden, batch, steps, warmup):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.GELU(approximate="tanh"),
                                torch.nn.Linear(hidden, hidden)).cuda().to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.rand(batch, hidden, device="cuda", dtype=torch.bfloat16) * 2 - 1
    target = torch.rand(batch, hidden, device="cuda", dtype=torch.bfloat16) * 2 - 1

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[len(times) // 2]


def torch_gemm_tflops(size, fp8, iterations=50):
    a = torch.randn(size, size, device="cuda")
    b = torch.randn(size, size, device="cuda")
    if fp8:
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()  # b column-major: TN
        one = torch.ones((), device="cuda")
        run = lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                       use_fast_accum=True)
    else:
        a16, b16 = a.bfloat16(), b.bfloat16().t()
        run = lambda: a16 @ b16
    for _ in range(5):
        run()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        run()
    stop.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(stop) / 1e3 / iterations
    return 2.0 * size ** 3 / seconds / 1e12


def tec_env():
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.environ.get("TEC_LD_LIBRARY_PATH", env.get("LD_LIBRARY_PATH", ""))
    return env


def tec_bench(tec_bench, plan, variant, steps, warmup):
    out = subprocess.run([tec_bench, plan, "--kind", "train", "--variant", variant, "--device", "cuda",
                          "--iterations", str(steps), "--warmup", str(warmup)],
                         capture_output=True, text=True, timeout=100, env=tec_env())
    if out.returncode != 0:
        return {"error": out.stderr.strip()}
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tec-bench", required=True)
    parser.add_argument("--gemm-bench", required=True)
    parser.add_argument("--plans", required=True, help="folder with fp8_hH.tecplan and bf16_hH.tecplan")
    parser.add_argument("--hidden", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cases", default="train,gemm", help="train, gemm or both (comma-separated)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "bench.json")
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "train": [], "gemm": []}
    if os.path.exists(path):  # the other cases of this run, written by an earlier call
        with open(path) as f:
            previous = json.load(f)
        result["train"], result["gemm"] = previous.get("train", []), previous.get("gemm", [])

    def save():
        with open(path + ".tmp", "w") as f:
            json.dump(result, f, indent=2)
        os.replace(path + ".tmp", path)

    print(f"GPU: {result['gpu']}, torch {result['torch']}", flush=True)
    cases = args.cases.split(",")
    if "train" in cases:
        result["train"] = []
        for h in args.hidden:
            entry = {"hidden": h, "batch": args.batch,
                     "torch_bf16_ms": torch_train_ms(h, args.batch, args.steps, 3)}
            result["train"].append(entry)
            for precision, variant in (("fp8", "sm_90"), ("bf16", "sm_80")):
                plan = os.path.join(args.plans, f"{precision}_h{h}.tecplan")
                t = entry[f"tec_{precision}"] = tec_bench(args.tec_bench, plan, variant, args.steps, 3)
                ms = t.get("median_ms")
                speedup = entry[f"speedup_{precision}_vs_torch_bf16"] = entry["torch_bf16_ms"] / ms if ms else None
                save()
                print(f"train H={h} B={args.batch}: tec {precision} {t.get('median_ms', float('nan')):.2f} ms "
                      f"({t.get('backend', t.get('error'))}), torch bf16 {entry['torch_bf16_ms']:.2f} ms, "
                      f"speedup {speedup or float('nan'):.2f}x", flush=True)
    if "gemm" in cases:
        result["gemm"] = []
        gemm = subprocess.run([args.gemm_bench, "50"], capture_output=True, text=True, timeout=100, env=tec_env())
        for line in gemm.stdout.splitlines():
            g = json.loads(line)
            if "tflops" in g:
                g["torch_tflops"] = torch_gemm_tflops(g["size"], g["gemm"].startswith("fp8"))
                g["ratio_vs_torch"] = g["tflops"] / g["torch_tflops"]
            result["gemm"].append(g)
            save()
            print(f"gemm {g['gemm']} {g['size']}^3: tec {g.get('tflops', float('nan')):.0f} TFLOP/s, "
                  f"torch {g.get('torch_tflops', float('nan')):.0f} TFLOP/s, "
                  f"ratio {g.get('ratio_vs_torch', float('nan')):.2f}", flush=True)
        if gemm.returncode != 0:
            raise SystemExit(f"tec-gemm-bench failed: {gemm.stderr.strip()}")


if __name__ == "__main__":
    main()
