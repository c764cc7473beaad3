#!/usr/bin/env python3
"""tec on the GPU vs PyTorch in the same run, reported as ratios (run by tests/gpu/run.sh).

1. Training step of the MLP of bench/gpu/make_models.py (hidden H, H -> H -> GELU -> H, MSE, AdamW):
   tec's FP8 plan (variant sm_90) and BF16 plan (variant sm_80) against PyTorch BF16 eager (same shapes,
   torch.optim.AdamW), each timed per step after warm-up. Ratio = PyTorch ms / tec ms (above 1: tec faster).
2. Raw GEMM throughput: tec's cuBLASLt path (tec-gemm-bench) against torch._scaled_mm (FP8 E4M3, fast
   accumulation, BF16 out) and torch.matmul (BF16), square sizes. Ratio = tec TFLOP/s / torch TFLOP/s.
Writes OUT/bench.json and prints a table.
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


def tec_bench(tec_bench, plan, variant, steps, warmup):
    out = subprocess.run([tec_bench, plan, "--kind", "train", "--variant", variant, "--device", "cuda",
                          "--iterations", str(steps), "--warmup", str(warmup)],
                         capture_output=True, text=True, timeout=300)
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
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "train": [], "gemm": []}
    for h in args.hidden:
        entry = {"hidden": h, "batch": args.batch,
                 "torch_bf16_ms": torch_train_ms(h, args.batch, args.steps, 3)}
        for precision, variant in (("fp8", "sm_90"), ("bf16", "sm_80")):
            plan = os.path.join(args.plans, f"{precision}_h{h}.tecplan")
            entry[f"tec_{precision}"] = tec_bench(args.tec_bench, plan, variant, args.steps, 3)
            ms = entry[f"tec_{precision}"].get("median_ms")
            entry[f"speedup_{precision}_vs_torch_bf16"] = entry["torch_bf16_ms"] / ms if ms else None
        result["train"].append(entry)
    gemm = subprocess.run([args.gemm_bench, "50"], capture_output=True, text=True, timeout=300)
    for line in gemm.stdout.splitlines():
        tec = json.loads(line)
        if "tflops" in tec:
            peer = torch_gemm_tflops(tec["size"], tec["gemm"].startswith("fp8"))
            tec["torch_tflops"] = peer
            tec["ratio_vs_torch"] = tec["tflops"] / peer
        result["gemm"].append(tec)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"GPU: {result['gpu']}, torch {result['torch']}")
    for e in result["train"]:
        for p in ("fp8", "bf16"):
            t = e[f"tec_{p}"]
            print(f"train H={e['hidden']} B={e['batch']}: tec {p} {t.get('median_ms', float('nan')):.2f} ms "
                  f"({t.get('backend', t.get('error'))}), torch bf16 {e['torch_bf16_ms']:.2f} ms, "
                  f"speedup {e[f'speedup_{p}_vs_torch_bf16'] or float('nan'):.2f}x")
    for g in result["gemm"]:
        print(f"gemm {g['gemm']} {g['size']}^3: tec {g.get('tflops', float('nan')):.0f} TFLOP/s, "
              f"torch {g.get('torch_tflops', float('nan')):.0f} TFLOP/s, ratio {g.get('ratio_vs_torch', float('nan')):.2f}")


if __name__ == "__main__":
    main()
