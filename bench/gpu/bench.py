#!/usr/bin/env python3
"""tec on the GPU vs PyTorch in the same run, reported as ratios (run by tests/gpu/run.sh).

1. Training step of the MLP of bench/gpu/make_models.py (hidden H, H -> H -> GELU -> H, MSE, AdamW):
   tec's FP8 plan (variant sm_90) and BF16 plan (variant sm_80) against PyTorch BF16 eager (same shapes,
   torch.optim.AdamW), each timed per step after warm-up. Ratio = PyTorch ms / tec ms (above 1: tec faster).
2. Raw GEMM throughput: tec's cuBLASLt path (tec-gemm-bench) against torch._scaled_mm (FP8 E4M3, fast
   accumulation, BF16 out) and torch.matmul (BF16), square sizes. Ratio = tec TFLOP/s / torch TFLOP/s, and
   FP8 against the H100/H200 SXM's dense FP8 peak (1979 TFLOP/s; goal: 75%).
3. Transformer Engine's benchmark ("te"): the GPT-style layer of make_models.py (hidden 4096, FFN 16384, 32
   heads, seq 2048, batch 2, causal), one AdamW training step: tec's FP8 plan (variant sm_90) against the same
   layer in PyTorch BF16, eager and torch.compile'd (scaled_dot_product_attention, causal), with each one's
   peak memory (tec: the plan's arena; torch: max_memory_allocated); and tec's plan with FP8 attention
   (--fp8-attention) where the bundle has it. Goals: >= 2.2x eager (TE reports
   2.06-2.23x on H100), >= 1.2x torch.compile. The torch.compile half is its own case ("te_compile"), run
   last: compiling alone can take minutes.
Writes OUT/bench.json after every case (a run that is cut keeps what it finished) and prints each result
as it comes, with the notes tec gave (what fell back, and why). With --strict, tec-bench runs strict: a
fallback fails that case (its error recorded) instead of giving a number for the fallback. A case that
times out is recorded as such; the others still run. tec's binaries run with TEC_LD_LIBRARY_PATH as their LD_LIBRARY_PATH; this process keeps its
own, so that PyTorch loads its own CUDA libraries.
"""
import argparse
import json
import os
import subprocess
import time

import torch

FP8_PEAK_TFLOPS = 1979.0  # H100/H200 SXM, dense FP8


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

    return median_ms(step, steps, warmup)


def median_ms(step, steps, warmup):
    """The median wall time of `step` after `warmup` calls, each synchronized."""
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


def block_scaled_mm(a8, b8, size):
    """torch._scaled_mm with Float8BlockScaling's scales (1x128 for a, 128x128 for b, all 1), in the first
    scale layout this torch takes (its blockwise layouts differ by version); raises if it takes none."""
    rows, tiles = torch.ones(size, size // 128, device="cuda"), torch.ones(size // 128, size // 128, device="cuda")
    outer_major = lambda s: s.t().contiguous().t()  # noqa: E731
    errors = []
    for scale_a, scale_b in [(outer_major(rows), tiles), (rows, tiles), (outer_major(rows), outer_major(tiles))]:
        run = lambda: torch._scaled_mm(a8, b8, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)  # noqa: E731,B023
        try:
            run()
            return run
        except (RuntimeError, ValueError) as e:
            errors.append(str(e).splitlines()[0])
    raise RuntimeError("; ".join(errors))


def torch_gemm_tflops(size, gemm, iterations=50):
    a = torch.randn(size, size, device="cuda")
    b = torch.randn(size, size, device="cuda")
    if gemm.startswith("fp8_block"):
        run = block_scaled_mm(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t(), size)
    elif gemm.startswith("fp8"):
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


class GptLayer(torch.nn.Module):
    """tests/models/gen_models.py's block in PyTorch: pre-LayerNorm, causal attention, exact GELU MLP."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.fc, self.out = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        heads = lambda z: z.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        a = torch.nn.functional.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


def torch_layer_step(layer, compiled, steps, warmup):
    """Median ms of one BF16 AdamW training step, and the peak memory allocated."""
    torch.manual_seed(0)
    model = GptLayer(layer["dim"], layer["heads"]).cuda().to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    run = torch.compile(model) if compiled else model
    shape = (layer["batch"], layer["seq"], layer["dim"])
    x = torch.rand(shape, device="cuda", dtype=torch.bfloat16) * 2 - 1
    target = torch.rand(shape, device="cuda", dtype=torch.bfloat16) * 2 - 1

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(run(x), target).backward()
        opt.step()

    for _ in range(warmup):  # compiles, and allocates the optimizer's moments, which the peak then counts
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ms = median_ms(step, steps, 0)
    peak = torch.cuda.max_memory_allocated()
    del model, opt, run
    torch.cuda.empty_cache()
    return ms, peak


def layer_gemm_flops(layer):
    """FLOPs of one training step's GEMMs (forward, dgrad, wgrad: 3x the forward's 2 * tokens * weights)."""
    d, tokens = layer["dim"], layer["batch"] * layer["seq"]
    return 3 * 2 * tokens * (3 * d * d + d * d + 8 * d * d)


def tec_env():
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.environ.get("TEC_LD_LIBRARY_PATH", env.get("LD_LIBRARY_PATH", ""))
    return env


STRICT = False  # main() sets it from --strict
TEC_TIMEOUT_S = 100
FAILED = []  # the cases that measured nothing (an error, a fallback under --strict, a GEMM that did not run)


def tec_bench(tec_bench, plan, variant, steps, warmup):
    """tec-bench's JSON for one plan, or {"error": why}; its notes printed (what fell back, and why)."""
    command = [tec_bench, plan, "--kind", "train", "--variant", variant, "--device", "cuda", "--iterations",
               str(steps), "--warmup", str(warmup)] + (["--strict"] if STRICT else [])
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=TEC_TIMEOUT_S, env=tec_env())
    except subprocess.TimeoutExpired:
        result = {"error": f"timed out after {TEC_TIMEOUT_S} s"}
    else:
        result = json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr.strip()}
    for note in result.get("notes", []):
        print(f"  note ({os.path.basename(plan)}): {note}", flush=True)
    if "error" in result:
        FAILED.append(f"{os.path.basename(plan)}: {result['error']}")
        print(f"  error ({os.path.basename(plan)}): {result['error']}", flush=True)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tec-bench", required=True)
    parser.add_argument("--gemm-bench", required=True)
    parser.add_argument("--plans", required=True, help="folder with fp8_hH.tecplan and bf16_hH.tecplan")
    parser.add_argument("--hidden", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cases", default="train,gemm", help="train, gemm, te, te_compile (comma-separated)")
    parser.add_argument("--strict", action="store_true", help="tec-bench --strict: a fallback fails the case")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    global STRICT
    STRICT = args.strict
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "bench.json")
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "train": [], "gemm": [], "te": {}}
    if os.path.exists(path):  # the other cases of this run, written by an earlier call
        with open(path) as f:
            previous = json.load(f)
        result["train"], result["gemm"] = previous.get("train", []), previous.get("gemm", [])
        result["te"] = previous.get("te", {})

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
        try:
            gemm = subprocess.run([args.gemm_bench, "50"], capture_output=True, text=True, timeout=TEC_TIMEOUT_S,
                                  env=tec_env())
        except subprocess.TimeoutExpired as cut:  # keep the sizes it finished (its output: bytes, even with text=True)
            partial = cut.stdout.decode() if isinstance(cut.stdout, bytes) else (cut.stdout or "")
            gemm = subprocess.CompletedProcess(cut.cmd, 124, partial, f"timed out after {cut.timeout} s")
        for line in gemm.stdout.splitlines():
            g = json.loads(line)
            if "tflops" in g:
                try:
                    g["torch_tflops"] = torch_gemm_tflops(g["size"], g["gemm"])
                    g["ratio_vs_torch"] = g["tflops"] / g["torch_tflops"]
                except RuntimeError as e:  # a torch without this GEMM (block scales): tec's number alone
                    g["torch_error"] = str(e)
                    print(f"gemm {g['gemm']} {g['size']}^3: torch cannot run it: {e}", flush=True)
            if g["gemm"].startswith("fp8") and "tflops" in g:
                g["share_of_fp8_peak"] = g["tflops"] / FP8_PEAK_TFLOPS
            result["gemm"].append(g)
            save()
            if not g.get("ok"):
                FAILED.append(f"gemm {g['gemm']} {g['size']} {g.get('kernel', '')}: {g.get('error', 'failed')}")
                print(f"gemm {g['gemm']} {g['size']}^3: tec failed: {g.get('error', 'no reason given')}", flush=True)
                continue
            on = f" on {g['kernel']}" if "kernel" in g else ""
            print(f"gemm {g['gemm']} {g['size']}^3: tec{on} {g.get('tflops', float('nan')):.0f} TFLOP/s, "
                  f"torch {g.get('torch_tflops', float('nan')):.0f} TFLOP/s, "
                  f"ratio {g.get('ratio_vs_torch', float('nan')):.2f}", flush=True)
        if gemm.returncode != 0:
            raise SystemExit(f"tec-gemm-bench failed: {gemm.stderr.strip()}")
    if "te" in cases:
        plan = os.path.join(args.plans, "te_gpt_fp8.tecplan")
        with open(os.path.join(args.plans, "te_gpt_fp8.json")) as f:  # tests/gpu/bundle.sh: the layer, the arena
            info = json.load(f)
        layer = info["layer"]
        te = result["te"] = {"layer": layer, "tec_fp8_arena_bytes": info["arena_bytes"]}
        tec = te["tec_fp8"] = tec_bench(args.tec_bench, plan, "sm_90", args.steps, 3)
        save()
        ms, peak = torch_layer_step(layer, False, args.steps, 3)
        te["torch_bf16_eager"] = {"median_ms": ms, "peak_memory_bytes": peak}
        if tec.get("median_ms"):
            te["speedup_vs_torch_bf16_eager"] = ms / tec["median_ms"]
        save()
        if tec.get("median_ms"):
            te["tec_gemm_tflops"] = layer_gemm_flops(layer) / (tec["median_ms"] / 1e3) / 1e12
        # With FP8 attention too (--fp8-attention), where the bundle has that plan.
        fp8_attention = os.path.join(args.plans, "te_gpt_fp8_attention.tecplan")
        if os.path.exists(fp8_attention):
            t = te["tec_fp8_attention"] = tec_bench(args.tec_bench, fp8_attention, "sm_90", args.steps, 3)
            if t.get("median_ms"):
                te["speedup_fp8_attention_vs_torch_bf16_eager"] = te["torch_bf16_eager"]["median_ms"] / t["median_ms"]
            print(f"TE layer with FP8 attention: tec {t.get('median_ms', float('nan')):.2f} ms "
                  f"({t.get('backend', t.get('error'))}), "
                  f"{te.get('speedup_fp8_attention_vs_torch_bf16_eager', float('nan')):.2f}x eager", flush=True)
        save()
        print(f"TE layer (hidden {layer['dim']}, seq {layer['seq']}, batch {layer['batch']}): tec fp8 "
              f"{tec.get('median_ms', float('nan')):.2f} ms ({tec.get('backend', tec.get('error'))}, arena "
              f"{te['tec_fp8_arena_bytes'] / 2**30:.2f} GiB), torch bf16 eager {te['torch_bf16_eager']['median_ms']:.2f} ms "
              f"({te['torch_bf16_eager']['peak_memory_bytes'] / 2**30:.2f} GiB); speedup "
              f"{te.get('speedup_vs_torch_bf16_eager', float('nan')):.2f}x eager (goal 2.2)", flush=True)
    if "te_compile" in cases:
        with open(os.path.join(args.plans, "te_gpt_fp8.json")) as f:
            layer = json.load(f)["layer"]
        te = result["te"]
        ms, peak = torch_layer_step(layer, True, args.steps, 10)
        te["torch_bf16_compile"] = {"median_ms": ms, "peak_memory_bytes": peak}
        tec_ms = te.get("tec_fp8", {}).get("median_ms")
        if tec_ms:
            te["speedup_vs_torch_bf16_compile"] = ms / tec_ms
        save()
        print(f"TE layer under torch.compile: {ms:.2f} ms ({peak / 2**30:.2f} GiB); tec fp8 "
              f"{te.get('speedup_vs_torch_bf16_compile', float('nan')):.2f}x compile (goal 1.2)", flush=True)
    if FAILED:
        raise SystemExit("cases that measured nothing: " + "; ".join(FAILED))


if __name__ == "__main__":
    main()
