#!/usr/bin/env python3
"""tec vs PyTorch eager training on the CPU: same model, weights, data, optimizer and threads, in one run.

Models (tests/models/gen_models.py): the test MLP (batch 64, 256 -> 512 -> 512 -> 16, ReLU and GELU) and
the GPT-style block (batch 4, seq 128, dim 256, 4 heads, causal), MSE against seeded random targets,
AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, no weight decay). PyTorch runs the same layers built from the
ONNX model's own initializers (its attention through scaled_dot_product_attention, as a user writes it),
so the first step's loss of the two must agree: the script checks it. tec trains through `tec train
--threads T --report` (its per-step times); PyTorch times forward, loss, backward, step and zero_grad
with torch.set_num_threads(T). The two alternate in rounds; each side's time is the median over rounds of
its per-round median step. Prints both and the ratio tec/PyTorch (below 1: tec is faster) and writes JSON.

PyTorch is installed into .venv for this benchmark only (the CPU wheel) when it is missing.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))
import gen_models  # noqa: E402


def import_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("installing PyTorch (CPU) into this venv for the benchmark", flush=True)
        pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "torch"]
        # The CPU wheel is small; where PyTorch's own index cannot be reached, PyPI's wheel (with CUDA's
        # libraries, unused here) times the same CPU kernels.
        if subprocess.run(pip + ["--index-url", "https://download.pytorch.org/whl/cpu", "--timeout", "20"]).returncode:
            subprocess.run(pip, check=True)
    import torch
    return torch


def torch_model(torch, name, weights):
    """The ONNX model's layers in PyTorch, with its initializers as parameters."""
    nn, F = torch.nn, torch.nn.functional
    w = {k: nn.Parameter(torch.from_numpy(v.copy())) for k, v in weights.items()}

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = nn.ParameterDict({k.replace(".", "_"): v for k, v in w.items()})

        def forward(self, x):
            p = self.p
            h = F.relu(F.linear(x, p["fc1_weight"], p["fc1_bias"]))  # Gemm transB: [out, in]
            h = F.gelu(h @ p["fc2_weight"] + p["fc2_bias"])  # MatMul: [in, out]
            return F.linear(h, p["fc3_weight"], p["fc3_bias"])

    class Block(nn.Module):
        def __init__(self, heads):
            super().__init__()
            self.p = nn.ParameterDict({k.replace(".", "_"): v for k, v in w.items()})
            self.heads = heads

        def forward(self, x):
            p, (b, t, d) = self.p, x.shape
            h = F.layer_norm(x, (d,), p["ln1_weight"], p["ln1_bias"], 1e-5)
            q, k, v = (h @ p["attn_qkv_weight"] + p["attn_qkv_bias"]).split(d, dim=-1)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + ctx @ p["attn_proj_weight"] + p["attn_proj_bias"]
            h = F.layer_norm(x, (d,), p["ln2_weight"], p["ln2_bias"], 1e-5)
            h = F.gelu(h @ p["mlp_fc_weight"] + p["mlp_fc_bias"])
            return x + h @ p["mlp_proj_weight"] + p["mlp_proj_bias"]

    return Mlp() if name.startswith("mlp") else Block(4)


def torch_step_ms(torch, model, batches, targets, threads, steps, warmup):
    """Median ms of an AdamW step over `steps` batches after `warmup`; the first step's loss."""
    import time
    torch.set_num_threads(threads)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    times, first = [], None
    for i in range(warmup + steps):
        x = torch.from_numpy(batches[i % len(batches)])
        y = torch.from_numpy(targets[i % len(targets)])
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        elapsed = (time.perf_counter() - t0) * 1e3
        if first is None:
            first = loss.item()
        if i >= warmup:
            times.append(elapsed)
    return float(np.median(times)), first


def tec_step_ms(tec, plan, x_path, y_path, threads, steps, warmup, tmp):
    """Median ms of tec's steps after `warmup` (tec train --report); the first step's loss."""
    report = os.path.join(tmp, "train.json")
    subprocess.run([tec, "train", plan, "--input", f"x={x_path}", "--target", f"y={y_path}", "--steps",
                    str(warmup + steps), "--threads", str(threads), "--report", report], check=True,
                   stdout=subprocess.DEVNULL)
    with open(report) as f:
        r = json.load(f)
    return float(np.median(r["step_ms"][warmup:])), r["loss"][0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", default=os.path.join(HERE, "..", "build", "release", "bin", "tec"))
    parser.add_argument("--steps", type=int, default=30, help="timed steps per round and side")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--only", default="", help="comma-separated model names (default: all)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "cpu_training.json"))
    args = parser.parse_args()
    torch = import_torch()
    models = {"mlp_b64": gen_models.mlp(),
              "gpt_block_b4_t128_d256": gen_models.gpt_block(decomposed=False, batch=4, seq=128, dim=256, heads=4)}
    wanted = set(filter(None, args.only.split(",")))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models.items():
            if wanted and name not in wanted:
                continue
            model_path, plan = os.path.join(tmp, name + ".onnx"), os.path.join(tmp, name + ".tecplan")
            onnx.save(model, model_path)
            subprocess.run([args.tec, model_path, "-o", plan, "--target", "cpu", "--train", "--loss", "mse",
                            "--optimizer", "adamw", "--lr", "1e-3"], check=True, stdout=subprocess.DEVNULL)
            x_shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
            y_shape = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
            rng = np.random.default_rng(0)
            batches = [rng.standard_normal(x_shape).astype(np.float32) for _ in range(4)]
            targets = [rng.standard_normal(y_shape).astype(np.float32) for _ in range(4)]
            x_path, y_path = os.path.join(tmp, name + ".x.npy"), os.path.join(tmp, name + ".y.npy")
            np.save(x_path, np.concatenate(batches))  # tec train takes the batches in order, as PyTorch does
            np.save(y_path, np.concatenate(targets))
            weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer
                       if i.data_type == onnx.TensorProto.FLOAT and i.dims and "." in i.name}
            for threads in [int(t) for t in args.threads.split(",")]:
                tec_rounds, torch_rounds, first = [], [], {}
                for _ in range(args.rounds):
                    ms, first["tec"] = tec_step_ms(args.tec, plan, x_path, y_path, threads, args.steps,
                                                   args.warmup, tmp)
                    tec_rounds.append(ms)
                    ms, first["torch"] = torch_step_ms(torch, torch_model(torch, name, weights), batches, targets,
                                                       threads, args.steps, args.warmup)
                    torch_rounds.append(ms)
                if abs(first["tec"] - first["torch"]) > 1e-3 * abs(first["torch"]):
                    raise SystemExit(f"{name}: the first losses differ (tec {first['tec']}, PyTorch {first['torch']}): "
                                     "not the same model")
                tec_ms, torch_ms = float(np.median(tec_rounds)), float(np.median(torch_rounds))
                results.append({"model": name, "threads": threads, "tec_step_ms": tec_ms, "torch_step_ms": torch_ms,
                                "ratio_tec_over_torch": tec_ms / torch_ms, "first_loss": first,
                                "tec_round_medians_ms": tec_rounds, "torch_round_medians_ms": torch_rounds})
                print(f"{name:26s} threads {threads}: tec {tec_ms:8.3f} ms   PyTorch eager {torch_ms:8.3f} ms   "
                      f"ratio {tec_ms / torch_ms:5.2f}   (first loss {first['tec']:.6f} vs {first['torch']:.6f})",
                      flush=True)
    report = {"machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()},
              "torch": torch.__version__, "steps": args.steps, "rounds": args.rounds, "warmup": args.warmup,
              "results": results}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
