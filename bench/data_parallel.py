#!/usr/bin/env python3
"""Data-parallel training on the CPU: tec on 2 ranks against tec on 1 process and against PyTorch DDP, in
one run, the same global batch, model, data and optimizer, 1 thread per process.

Models (tests/models/gen_models.py): the MLP (256 -> 512 -> 512 -> 16) at a global batch of 256 and the
GPT-style block (seq 128, dim 256, 4 heads, causal) at a global batch of 8 sequences; MSE against seeded
random targets; AdamW (lr 1e-3). Each rank takes half of every global batch.
- tec: `tec train --threads 1 --report` on one process with the global batch, and under `mpirun -np 2` with
  a plan of half the batch, unsharded and with `--shard-optimizer 2` (ZeRO-1); a step's time is rank 0's.
- PyTorch: the same layers from the ONNX model's initializers (cpu_training.py's), one process with the
  global batch, and DistributedDataParallel over gloo with 2 processes, torch.set_num_threads(1).
The sides alternate in rounds; each time is the median over rounds of the per-round median step. Prints
throughput (global samples per second), the speed-up of 2 ranks over 1 (goal >= 1.7 on 2 cores) and tec's
steps/s over DDP's (goal >= 1), and each tec plan's memory per rank; writes JSON.
"""
import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))
import cpu_training  # noqa: E402  (the PyTorch twin of each model)
import gen_models  # noqa: E402


def mpirun(ranks):
    command = [shutil.which("mpirun") or "mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
    if os.geteuid() == 0:
        command.insert(1, "--allow-run-as-root")
    return command


def tec_step_ms(tec, plan, x, y, ranks, steps, warmup, tmp):
    """Rank 0's median ms per step after `warmup` (tec train --report); the first loss."""
    report = os.path.join(tmp, "train.json")
    subprocess.run((mpirun(ranks) if ranks > 1 else []) +
                   [tec, "train", plan, "--input", f"x={x}", "--target", f"y={y}", "--steps", str(warmup + steps),
                    "--threads", "1", "--report", report], check=True, stdout=subprocess.DEVNULL)
    with open(report) as f:
        r = json.load(f)
    return float(np.median(r["step_ms"][warmup:])), r["loss"][0]


def ddp_worker(rank, ranks, port, name, weights, batches, targets, steps, warmup, queue):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if ranks > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks)
    model = cpu_training.torch_model(torch, name, weights)
    if ranks > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    import time
    times, first = [], None
    share = len(batches[0]) // ranks
    for i in range(warmup + steps):
        x = torch.from_numpy(batches[i % len(batches)][rank * share:(rank + 1) * share])
        y = torch.from_numpy(targets[i % len(targets)][rank * share:(rank + 1) * share])
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
    if ranks > 1:
        dist.destroy_process_group()
    if rank == 0:
        queue.put((float(np.median(times)), first))


def torch_step_ms(name, weights, batches, targets, ranks, steps, warmup):
    """Rank 0's median ms per step of PyTorch (DDP over gloo with several ranks); rank 0's first loss."""
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=ddp_worker, args=(r, ranks, port, name, weights, batches, targets, steps,
                                                          warmup, queue)) for r in range(ranks)]
    for w in workers:
        w.start()
    result = queue.get(timeout=600)
    for w in workers:
        w.join()
    return result


def per_rank_line(tec, plan):
    """The training variant's arena and `per rank:` line of `tec inspect`."""
    lines = subprocess.run([tec, "inspect", plan], capture_output=True, text=True, check=True).stdout.splitlines()
    at = next((i for i, l in enumerate(lines) if l.strip().startswith("per rank:")), None)
    if at is None:
        return "?"
    arena = next(l.split("arena ")[1].split(",")[0] for l in reversed(lines[:at]) if "memory: arena" in l)
    return f"arena {arena}; {lines[at].strip()}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", default=os.path.join(HERE, "..", "build", "release", "bin", "tec"))
    parser.add_argument("--steps", type=int, default=30, help="timed steps per round and side")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated model names (default: all)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "data_parallel.json"))
    args = parser.parse_args()
    if not shutil.which("mpirun"):
        raise SystemExit("no mpirun: ./dev installs openmpi-bin")
    cpu_training.import_torch()
    import torch
    models = {"mlp_b256": lambda b: gen_models.mlp(batch=b),
              "gpt_block_b8_t128_d256": lambda b: gen_models.gpt_block(decomposed=False, batch=b, seq=128, dim=256,
                                                                       heads=4)}
    global_batch = {"mlp_b256": 256, "gpt_block_b8_t128_d256": 8}
    wanted = set(filter(None, args.only.split(",")))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in models.items():
            if wanted and name not in wanted:
                continue
            batch = global_batch[name]
            plans = {}
            for label, b, extra in (("1 process", batch, []), ("2 ranks", batch // 2, []),
                                    ("2 ranks zero-1", batch // 2, ["--shard-optimizer", "2"])):
                model_path, plans[label] = os.path.join(tmp, f"{name}_{b}.onnx"), os.path.join(tmp, f"{name}_{label}.tecplan")
                onnx.save(make(b), model_path)
                subprocess.run([args.tec, model_path, "-o", plans[label], "--target", "cpu", "--train", "--loss", "mse",
                                "--optimizer", "adamw", "--lr", "1e-3"] + extra, check=True, stdout=subprocess.DEVNULL)
            model = make(batch)
            x_shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
            y_shape = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
            rng = np.random.default_rng(0)
            batches = [rng.standard_normal(x_shape).astype(np.float32) for _ in range(4)]
            targets = [rng.standard_normal(y_shape).astype(np.float32) for _ in range(4)]
            x_path, y_path = os.path.join(tmp, name + ".x.npy"), os.path.join(tmp, name + ".y.npy")
            np.save(x_path, np.concatenate(batches))
            np.save(y_path, np.concatenate(targets))
            weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer
                       if i.data_type == onnx.TensorProto.FLOAT and i.dims and "." in i.name}
            rounds = {k: [] for k in ("tec 1", "tec 2", "tec 2 zero-1", "torch 1", "ddp 2")}
            first = {}
            for _ in range(args.rounds):
                for key, plan, ranks in (("tec 1", plans["1 process"], 1), ("tec 2", plans["2 ranks"], 2),
                                         ("tec 2 zero-1", plans["2 ranks zero-1"], 2)):
                    ms, first[key] = tec_step_ms(args.tec, plan, x_path, y_path, ranks, args.steps, args.warmup, tmp)
                    rounds[key].append(ms)
                for key, ranks in (("torch 1", 1), ("ddp 2", 2)):
                    ms, first[key] = torch_step_ms(name, weights, batches, targets, ranks, args.steps, args.warmup)
                    rounds[key].append(ms)
            # The same model: one process's first losses agree (a rank's is its half's, so not compared).
            if abs(first["tec 1"] - first["torch 1"]) > 1e-3 * abs(first["torch 1"]):
                raise SystemExit(f"{name}: the first losses differ (tec {first['tec 1']}, PyTorch {first['torch 1']})")
            ms = {k: float(np.median(v)) for k, v in rounds.items()}
            rate = {k: batch / v * 1e3 for k, v in ms.items()}
            memory = {label: per_rank_line(args.tec, plan) for label, plan in plans.items()}
            entry = {"model": name, "global_batch": batch, "step_ms": ms, "samples_per_s": rate,
                     "speedup_tec_2_over_1": ms["tec 1"] / ms["tec 2"],
                     "speedup_ddp_2_over_torch_1": ms["torch 1"] / ms["ddp 2"],
                     "ratio_tec_2_over_ddp_2_steps_per_s": ms["ddp 2"] / ms["tec 2"],
                     "ratio_tec_zero1_over_tec_2_time": ms["tec 2 zero-1"] / ms["tec 2"],
                     "memory_per_rank": memory, "first_loss": first, "round_medians_ms": rounds}
            results.append(entry)
            print(f"{name} (global batch {batch}), ms per step (samples/s):")
            for k in rounds:
                print(f"  {k:14s} {ms[k]:9.3f} ms  ({rate[k]:9.1f} samples/s)")
            print(f"  tec 2 ranks / 1 process: {entry['speedup_tec_2_over_1']:.2f}x   DDP 2 / PyTorch 1: "
                  f"{entry['speedup_ddp_2_over_torch_1']:.2f}x   tec 2 ranks vs DDP 2 ranks (steps/s): "
                  f"{entry['ratio_tec_2_over_ddp_2_steps_per_s']:.2f}   ZeRO-1 time / unsharded: "
                  f"{entry['ratio_tec_zero1_over_tec_2_time']:.2f}")
            for label, line in memory.items():
                print(f"  memory per rank, {label}: {line}")
            sys.stdout.flush()
    report = {"machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()},
              "torch": torch.__version__, "steps": args.steps, "rounds": args.rounds, "warmup": args.warmup,
              "results": results}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
