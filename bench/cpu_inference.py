#!/usr/bin/env python3
"""tec vs ONNX Runtime on the CPU, same model, same inputs, same thread count, in one run.

Models: the MLP (batch 64, hidden 1024) and the GPT-style block, made by tests/models/gen_models.py.
tec runs its plan through `tec run --threads T` (timed in-process); ONNX Runtime runs with
intra_op_num_threads=T, timed around session.run. The two alternate in rounds (a shared machine drifts);
each side's latency is the median over rounds of its per-round median. Prints both and the ratio tec/ORT
(below 1: tec is faster), and writes everything as JSON.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))
import gen_models  # noqa: E402


def ort_session(model_path, threads):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])


def ort_median_ms(session, feeds, iterations, warmup):
    for _ in range(warmup):
        session.run(None, feeds)
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def tec_median_ms(tec, plan, inputs, threads, iterations, warmup, tmp):
    report = os.path.join(tmp, "tec.json")
    flags = sum((["--input", f"{name}={path}"] for name, path in inputs.items()), [])
    subprocess.run([tec, "run", plan, "--threads", str(threads), "--iterations", str(iterations), "--warmup",
                    str(warmup), "--json", report] + flags, check=True, stdout=subprocess.DEVNULL)
    with open(report) as f:
        return json.load(f)["latency_ms"]["median"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", default=os.path.join(HERE, "..", "build", "release", "bin", "tec"))
    parser.add_argument("--iterations", type=int, default=50, help="timed runs per round and side")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "cpu_inference.json"))
    args = parser.parse_args()

    models = {
        "mlp_b64_h1024": gen_models.mlp(batch=64, d_in=1024, hidden=1024, d_out=1024),
        "gpt_block_b4_t128_d256": gen_models.gpt_block(decomposed=False, batch=4, seq=128, dim=256, heads=4),
    }
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models.items():
            model_path = os.path.join(tmp, name + ".onnx")
            onnx.save(model, model_path)
            plan = os.path.join(tmp, name + ".tecplan")
            subprocess.run([args.tec, model_path, "-o", plan], check=True, stdout=subprocess.DEVNULL)
            rng = np.random.default_rng(0)
            feeds, inputs = {}, {}
            for i in model.graph.input:
                shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
                feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
                inputs[i.name] = os.path.join(tmp, f"{name}.{i.name}.npy")
                np.save(inputs[i.name], feeds[i.name])
            for threads in [int(t) for t in args.threads.split(",")]:
                session = ort_session(model_path, threads)
                ort_rounds, tec_rounds = [], []
                for _ in range(args.rounds):
                    ort_rounds.append(ort_median_ms(session, feeds, args.iterations, args.warmup))
                    tec_rounds.append(tec_median_ms(args.tec, plan, inputs, threads, args.iterations, args.warmup, tmp))
                ort_ms, tec_ms = float(np.median(ort_rounds)), float(np.median(tec_rounds))
                results.append({"model": name, "threads": threads, "tec_median_ms": tec_ms,
                                "onnxruntime_median_ms": ort_ms, "ratio_tec_over_ort": tec_ms / ort_ms,
                                "tec_round_medians_ms": tec_rounds, "onnxruntime_round_medians_ms": ort_rounds})
                print(f"{name:26s} threads {threads}: tec {tec_ms:8.3f} ms   onnxruntime {ort_ms:8.3f} ms   "
                      f"ratio {tec_ms / ort_ms:5.2f}", flush=True)
    report = {"machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()},
              "onnxruntime": ort.__version__, "iterations": args.iterations, "rounds": args.rounds,
              "warmup": args.warmup,
              "results": results}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
