#!/usr/bin/env python3
"""The GPU benchmark's MLP as ONNX: x[B,H] -> Linear(H,H) -> GELU -> Linear(H,H), trained with MSE.

Weights are a seeded random block of 4096 values tiled over each matrix: the GEMMs see ordinary random
data, while the compiled plans (hundreds of MB for H=8192) compress to a few MB for the trip to the GPU
machine, where the compiler is not installed (tests/gpu/bundle.sh).
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiled(shape, rng):
    block = (rng.standard_normal(4096) / np.sqrt(shape[-1])).astype(np.float32)
    return np.resize(block, shape)


def mlp(hidden, batch, seed=0):
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(tiled((hidden, hidden), rng), "fc1.weight"),
        numpy_helper.from_array(np.zeros(hidden, np.float32), "fc1.bias"),
        numpy_helper.from_array(tiled((hidden, hidden), rng), "fc2.weight"),
        numpy_helper.from_array(np.zeros(hidden, np.float32), "fc2.bias"),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1", transB=1),
        helper.make_node("Gelu", ["h"], ["a"], name="gelu", approximate="tanh"),
        helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["y"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(nodes, f"mlp_h{hidden}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, hidden])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], producer_name="tec bench/gpu")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--hidden", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--batch", type=int, default=8192)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for h in args.hidden:
        path = os.path.join(args.out, f"mlp_h{h}.onnx")
        onnx.save(mlp(h, args.batch), path)
        print(path)


if __name__ == "__main__":
    main()
