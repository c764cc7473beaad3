#!/usr/bin/env python3
"""tec vs ONNX Runtime on the CPU, same model, same inputs, same thread count, in one run.

Models: the MLP (batch 64, hidden 1024) and the GPT-style block, made by tests/models/gen_models.py, and
the Hugging Face GPT-2, BERT, Llama, BLOOM and Falcon that tests/models/export_real.py exported with torch.onnx.export
(TorchScript exporter, dynamic axes; tiny configs: 2 layers, hidden 32), run at batch 8 x sequence 32
(their longest) with `--shape batch=8,sequence=32`: per-op overhead and the elementwise chains dominate
them, which is what the comparison measures there.
tec runs its plan through `tec run --threads T` (timed in-process); ONNX Runtime runs with
intra_op_num_threads=T, timed around session.run. The two alternate in rounds (a shared machine drifts);
each side's latency is the median over rounds of its per-round median. Prints both and the ratio tec/ORT
(below 1: tec is faster), and writes everything as JSON.

Convolutional nets (batch 1, 224x224, random init): timm's MobileNetV3-small, EfficientNet-B0,
ConvNeXt-atto and ResNet-18 and a Conv1d audio net, exported with torch.onnx.export (TorchScript, opset 17) into
bench/models/ on first use; without torch and timm installed they are skipped, and say so.

Contention ("busy"): the small test MLP (batch 64, 256 -> 512 -> 512 -> 16) with as many busy processes
beside it as it has threads (spinning Python loops), tec with --threads 1 and 2 and ONNX Runtime with 2,
alternating in rounds as above; the goal is tec's 2 threads within 1.5x of its 1 there (threads that wait
at a barrier for a descheduled peer collapse instead).
"""
import argparse
import contextlib
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

REAL_EXPORTS = os.path.join(HERE, "..", "tests", "models", "real")
CONV_MODELS = os.path.join(HERE, "models")


def conv_models():
    """(name, path, input shape) of the convolutional nets, exported now where missing; [] without torch/timm."""
    wanted = [("mobilenetv3_small_b1", "mobilenetv3_small_100", (1, 3, 224, 224)),
              ("efficientnet_b0_b1", "efficientnet_b0", (1, 3, 224, 224)),
              ("convnext_atto_b1", "convnext_atto", (1, 3, 224, 224)),
              ("resnet18_b1", "resnet18", (1, 3, 224, 224)),
              ("conv1d_audio_b1", "conv1d", (1, 1, 16000))]
    missing = [w for w in wanted if not os.path.exists(os.path.join(CONV_MODELS, w[0] + ".onnx"))]
    if missing:
        try:
            import timm
            import torch
        except ImportError:
            print("convolutional nets skipped: torch and timm are not installed (pip install torch timm)")
            return []
        os.makedirs(CONV_MODELS, exist_ok=True)
        torch.manual_seed(0)
        for name, arch, shape in missing:
            if arch == "conv1d":  # a small wav2vec-style feature encoder: strided Conv1d + GELU, pooled
                layers, channels = [], 1
                for width, kernel, stride in [(64, 10, 5), (64, 3, 2), (128, 3, 2), (128, 3, 2), (128, 2, 2)]:
                    layers += [torch.nn.Conv1d(channels, width, kernel, stride), torch.nn.GELU()]
                    channels = width
                model = torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(),
                                            torch.nn.Linear(channels, 10))
            else:
                model = timm.create_model(arch, pretrained=False)
            torch.onnx.export(model.eval(), (torch.randn(*shape),), os.path.join(CONV_MODELS, name + ".onnx"),
                              input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)
    return [(name, os.path.join(CONV_MODELS, name + ".onnx"), shape) for name, _, shape in wanted]


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


@contextlib.contextmanager
def busy_processes(count):
    """`count` processes spinning on the CPU for as long as the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.5)  # scheduled and spinning
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def contention(args, tmp):
    """The small MLP beside two busy processes: tec --threads 1 and 2, ONNX Runtime with 2."""
    model = gen_models.mlp()
    model_path, plan = os.path.join(tmp, "busy_mlp.onnx"), os.path.join(tmp, "busy_mlp.tecplan")
    onnx.save(model, model_path)
    subprocess.run([args.tec, model_path, "-o", plan], check=True, stdout=subprocess.DEVNULL)
    feeds = {"x": np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)}
    inputs = {"x": os.path.join(tmp, "busy_mlp.x.npy")}
    np.save(inputs["x"], feeds["x"])
    session = ort_session(model_path, 2)
    rounds = {"tec_1": [], "tec_2": [], "onnxruntime_2": []}
    with busy_processes(2):
        for _ in range(args.rounds):
            rounds["onnxruntime_2"].append(ort_median_ms(session, feeds, args.iterations, args.warmup))
            for threads in (1, 2):
                rounds[f"tec_{threads}"].append(
                    tec_median_ms(args.tec, plan, inputs, threads, args.iterations, args.warmup, tmp))
    ms = {k: float(np.median(v)) for k, v in rounds.items()}
    ratio = ms["tec_2"] / ms["tec_1"]
    print(f"{'mlp_b64_busy':26s} beside 2 busy processes: tec 1 thread {ms['tec_1']:.3f} ms, 2 threads "
          f"{ms['tec_2']:.3f} ms (x{ratio:.2f} of 1, goal <= 1.5), onnxruntime 2 threads {ms['onnxruntime_2']:.3f} ms",
          flush=True)
    return {"model": "mlp_b64_busy", "busy_processes": 2, "median_ms": ms, "round_medians_ms": rounds,
            "ratio_tec_2_over_tec_1": ratio}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", default=os.path.join(HERE, "..", "build", "release", "bin", "tec"))
    parser.add_argument("--iterations", type=int, default=50, help="timed runs per round and side")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--only", default="", help="comma-separated model names to run (default: all; "
                        "mlp_b64_busy: the contention case)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "cpu_inference.json"))
    args = parser.parse_args()

    generated = {
        "mlp_b64_h1024": gen_models.mlp(batch=64, d_in=1024, hidden=1024, d_out=1024),
        "gpt_block_b4_t128_d256": gen_models.gpt_block(decomposed=False, batch=4, seq=128, dim=256, heads=4),
    }
    exported = {"gpt2_b8_t32": "gpt2", "bert_b8_t32": "bert", "llama_b8_t32": "llama", "bloom_b8_t32": "bloom",
                "falcon_b8_t32": "falcon"}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        for name, model in generated.items():
            model_path = os.path.join(tmp, name + ".onnx")
            onnx.save(model, model_path)
            rng = np.random.default_rng(0)
            feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
                     for i in model.graph.input}
            cases.append((name, model_path, [], feeds))
        for name, model_path, shape in conv_models():
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            cases.append((name, model_path, [], {"x": x}))
        for name, arch in exported.items():
            model_path = os.path.join(REAL_EXPORTS, arch + "_ts_dynamic.onnx")
            rng = np.random.default_rng(0)
            feeds = {"input_ids": rng.integers(0, 64, size=(8, 32), dtype=np.int64)}
            cases.append((name, model_path, ["--shape", "batch=8,sequence=32"], feeds))
        wanted = set(filter(None, args.only.split(",")))
        for name, model_path, compile_flags, feeds in cases:
            if wanted and name not in wanted:
                continue
            plan = os.path.join(tmp, name + ".tecplan")
            subprocess.run([args.tec, model_path, "-o", plan] + compile_flags, check=True, stdout=subprocess.DEVNULL)
            inputs = {}
            for input_name, value in feeds.items():
                inputs[input_name] = os.path.join(tmp, f"{name}.{input_name}.npy")
                np.save(inputs[input_name], value)
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
        busy = contention(args, tmp) if not wanted or "mlp_b64_busy" in wanted else None
    report = {"machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()},
              "onnxruntime": ort.__version__, "iterations": args.iterations, "rounds": args.rounds,
              "warmup": args.warmup,
              "results": results, "contention": busy}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
