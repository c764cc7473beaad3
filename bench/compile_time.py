#!/usr/bin/env python3
"""How long `tec` takes to compile a 1,000-node model (issue 14's goal: at most 1 s): 250 layers of MatMul,
Add, Relu and Mul on [8, 64], for one target, three, and with --train. Median of 5 runs each; prints and
writes JSON."""
import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def deep_model(layers=250, width=64):
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        inits += [numpy_helper.from_array((rng.standard_normal((width, width)) * 0.1).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(np.zeros(width, np.float32), f"b{i}"),
                  numpy_helper.from_array(np.array(0.9, np.float32), f"s{i}")]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}"),
                  helper.make_node("Mul", [f"r{i}", f"s{i}"], [f"y{i}"], name=f"mul{i}")]
        x = f"y{i}"
    graph = helper.make_graph(nodes, "deep", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, width])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [8, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", default=os.path.join(HERE, "..", "build", "release", "bin", "tec"))
    parser.add_argument("--out", default=os.path.join(HERE, "results", "compile_time.json"))
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "deep.onnx")
        onnx.save(deep_model(), model)
        for name, flags in {"cpu": ["--target", "cpu"], "sm_90,sm_80,cpu": ["--target", "sm_90,sm_80,cpu"],
                            "cpu --train": ["--target", "cpu", "--train"]}.items():
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                subprocess.run([args.tec, model, "-o", os.path.join(tmp, "deep.tecplan")] + flags, check=True,
                               stdout=subprocess.DEVNULL)
                times.append(time.perf_counter() - t0)
            results[name] = float(np.median(times))
            print(f"1,000 nodes, {name:18s}: {results[name]:.3f} s (goal <= 1 s)", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"nodes": 1000, "seconds": results}, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
