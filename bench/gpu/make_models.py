#!/usr/bin/env python3
"""The GPU benchmark's models as ONNX: the MLP x[B,H] -> Linear(H,H) -> GELU -> Linear(H,H), and the
GPT-style layer of Transformer Engine's benchmark (tests/models/gen_models.py's block: LayerNorm, causal
attention, GELU MLP; hidden 4096, FFN 16384, 32 heads, seq 2048), both trained with MSE.

Weights are a seeded random block of 4096 values tiled over each matrix: the GEMMs see ordinary random
data, while the compiled plans (hundreds of MB for H=8192) compress to a few MB for the trip to the GPU
machine, where the compiler is not installed (tests/gpu/bundle.sh).
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "models"))
import gen_models  # noqa: E402


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


def tiled_init(rng, name, shape, scale=None):
    """gen_models.gpt_block's initializer with a tiled random block: compressible plans, ordinary GEMM data."""
    values = tiled(shape, rng) if len(shape) > 1 else np.resize((rng.standard_normal(4096) * 0.1).astype(np.float32),
                                                                 shape)
    return numpy_helper.from_array(values.astype(np.float32), name)


# Transformer Engine's benchmark layer (its GPT configuration); batch 2 x seq 2048 tokens fits the budget.
TE_LAYER = {"dim": 4096, "heads": 32, "seq": 2048, "batch": 2}


def gpt_layer(dim, heads, seq, batch):
    return gen_models.gpt_block(decomposed=False, batch=batch, seq=seq, dim=dim, heads=heads, seed=7, init=tiled_init)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--hidden", type=int, nargs="*", default=[4096, 8192])
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--gpt-layer", action="store_true", help="also gpt_layer.onnx, TE's configuration")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for h in args.hidden:
        path = os.path.join(args.out, f"mlp_h{h}.onnx")
        onnx.save(mlp(h, args.batch), path)
        print(path)
    if args.gpt_layer:
        path = os.path.join(args.out, "gpt_layer.onnx")
        onnx.save(gpt_layer(**TE_LAYER), path, save_as_external_data=True, location="gpt_layer.onnx.data")
        print(path)


if __name__ == "__main__":
    main()
