#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>) and the regression inputs of the crash
classes issue 11 describes (tests/fuzz/regressions/<target>): small valid inputs to start from, and each
known-bad input that once crashed tec. Run from the source root with a built tec:

    .venv/bin/python tests/fuzz/make_seeds.py --tec build/release/bin/tec
"""
import argparse
import json
import os
import struct
import subprocess
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "seed", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def onnx_seeds():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(8, np.float32), "b")
    shape = numpy_helper.from_array(np.array([2, 16], np.int64), "shape")
    seeds = {
        "relu": model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 4])], [vi("y", [2, 4])]),
        "gemm": model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], [vi("x", [4, 4])],
                      [vi("y", [4, 8])], [w, b]),
        "mlp": model([helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["y"])],
                     [vi("x", [4, 4])], [vi("y", [4, 8])], [w, b]),
        "softmax": model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [vi("x", [2, 5])], [vi("y", [2, 5])]),
        "reshape": model([helper.make_node("Reshape", ["x", "shape"], ["y"])], [vi("x", [4, 8])], [vi("y", [2, 16])],
                         [shape]),
        "layernorm": model([helper.make_node("LayerNormalization", ["x", "g"], ["y"], axis=-1)], [vi("x", [2, 8])],
                           [vi("y", [2, 8])], [numpy_helper.from_array(np.ones(8, np.float32), "g")]),
        "gelu-o20": model([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], [vi("x", [3, 4])],
                          [vi("y", [3, 4])], opset=20),
        # The operators exporters write that parse attributes or index: equations, axes, index tuples, windows.
        "einsum": model([helper.make_node("Einsum", ["q", "k"], ["y"], equation="bqhd,bkhd->bhqk")],
                        [vi("q", [1, 3, 2, 4]), vi("k", [1, 5, 2, 4])], [vi("y", [1, 2, 3, 5])], opset=18),
        "cumsum": model([helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=1, reverse=1)], [vi("x", [2, 5])],
                        [vi("y", [2, 5])], [numpy_helper.from_array(np.array(1, np.int64), "axis")]),
        "scatternd": model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="add")],
                           [vi("x", [4, 3]), vi("u", [2, 3])], [vi("y", [4, 3])],
                           [numpy_helper.from_array(np.array([[1], [-1]], np.int64), "i")], opset=18),
        "lrn": model([helper.make_node("LRN", ["x"], ["y"], size=3)], [vi("x", [1, 4, 3, 3])], [vi("y", [1, 4, 3, 3])]),
        "batchnorm-training": model(
            [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1)],
            [vi("x", [2, 3, 4, 4])], [vi("y", [2, 3, 4, 4])],
            [numpy_helper.from_array(np.full(3, c, np.float32), n) for n, c in [("s", 1), ("b", 0), ("m", 0), ("v", 1)]]),
        "conv-pool": model([helper.make_node("Conv", ["x", "cw"], ["h"], pads=[1, 1, 1, 1], strides=[2, 2], group=2),
                            helper.make_node("MaxPool", ["h"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)],
                           [vi("x", [1, 4, 8, 8])], [vi("y", [1, 4, 2, 2])],
                           [numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "cw")]),
        # FP8-eligible GEMMs (dims multiples of 16) for an sm_90 plan seed.
        "mlp16": model([helper.make_node("Gemm", ["x", "w16", "b16"], ["h"], transB=1),
                        helper.make_node("Relu", ["h"], ["y"])], [vi("x", [16, 16])], [vi("y", [16, 16])],
                       [numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w16"),
                        numpy_helper.from_array(np.zeros(16, np.float32), "b16")]),
        # Attention as exporters write it (recognized as tec.attention): scaled Q.K^T, a causal Where, softmax.
        "attention": model([helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                            helper.make_node("MatMul", ["q", "kt"], ["s"]),
                            helper.make_node("Mul", ["s", "scale"], ["ss"]),
                            helper.make_node("Where", ["causal", "ss", "fill"], ["m"]),
                            helper.make_node("Softmax", ["m"], ["p"], axis=-1),
                            helper.make_node("MatMul", ["p", "v"], ["y"])],
                           [vi("q", [1, 2, 4, 8]), vi("k", [1, 2, 4, 8]), vi("v", [1, 2, 4, 8])], [vi("y", [1, 2, 4, 8])],
                           [numpy_helper.from_array(np.array(0.35, np.float32), "scale"),
                            numpy_helper.from_array(np.tril(np.ones((4, 4), bool)), "causal"),
                            numpy_helper.from_array(np.array(-1e9, np.float32), "fill")]),
        # The operators whose import builds tables or unrolls (issue 27): a bidirectional LSTM with sequence
        # lengths, a cubic Resize by scales, a ConvTranspose with output_padding and groups.
        "lstm": model([helper.make_node("LSTM", ["x", "lw", "lr", "lb", "lens"], ["y", "h", "c"], hidden_size=3,
                                        direction="bidirectional")],
                      [vi("x", [4, 2, 5]), helper.make_tensor_value_info("lens", TensorProto.INT32, [2])],
                      [vi("y", [4, 2, 2, 3])],
                      [numpy_helper.from_array(rng.standard_normal((2, 12, 5)).astype(np.float32), "lw"),
                       numpy_helper.from_array(rng.standard_normal((2, 12, 3)).astype(np.float32), "lr"),
                       numpy_helper.from_array(np.zeros((2, 24), np.float32), "lb")]),
        "resize": model([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="cubic",
                                          coordinate_transformation_mode="align_corners")],
                        [vi("x", [1, 2, 4, 5])], [vi("y", [1, 2, 8, 7])],
                        [numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "scales")], opset=18),
        "conv-transpose": model([helper.make_node("ConvTranspose", ["x", "tw"], ["y"], strides=[2, 2], group=2,
                                                  pads=[1, 1, 1, 1], output_padding=[1, 1])],
                                [vi("x", [1, 4, 3, 3])], [vi("y", [1, 4, 6, 6])],
                                [numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "tw")]),
    }
    for name, data in seeds.items():
        write(f"{HERE}/corpus/onnx/{name}.onnx", data)
    return seeds


def npy_bytes(header, data=b"", major=1):
    h = header.encode()
    h += b" " * ((64 - (10 + len(h) + 1) % 64) % 64) + b"\n"
    size = struct.pack("<H", len(h)) if major == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes([major, 0]) + size + h + data


def tensor_seeds():
    good = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }"
    write(f"{HERE}/corpus/tensor-files/f32.npy", npy_bytes(good % "(2, 3)", b"\0" * 24))
    write(f"{HERE}/corpus/tensor-files/i64.npy",
          npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", b"\1" + b"\0" * 23))
    write(f"{HERE}/corpus/tensor-files/scalar.npy", npy_bytes(good % "()", b"\0" * 4, major=2))
    write(f"{HERE}/corpus/tensor-files/f32.pb",
          helper.make_tensor("t", TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0]).SerializeToString())
    write(f"{HERE}/corpus/tensor-files/raw.pb",
          helper.make_tensor("t", TensorProto.INT64, [2], b"\1" + b"\0" * 15, raw=True).SerializeToString())
    # A checkpoint's safetensors: two tensors and the metadata tec writes.
    header = json.dumps({"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                         "step": {"dtype": "F32", "shape": [], "data_offsets": [24, 28]}}).encode()
    header += b" " * ((8 - len(header) % 8) % 8)
    write(f"{HERE}/corpus/tensor-files/two.safetensors", len(header).to_bytes(8, "little") + header + b"\0" * 28)
    # Crash classes: non-integer, overflowing and nested header dims; a fortran_order of 1; version 9;
    # a .pb with a negative or huge dim.
    reg = f"{HERE}/regressions/tensor-files"
    write(f"{reg}/shape-not-integers.npy", npy_bytes(good % "('a', 256)"))
    write(f"{reg}/shape-23-digits.npy", npy_bytes(good % "(12345678901234567890123, 256)"))
    write(f"{reg}/shape-nested.npy", npy_bytes(good % "((64, 256))"))
    write(f"{reg}/shape-float.npy", npy_bytes(good % "(64.5, 256)", b"\0" * 64))
    write(f"{reg}/fortran-order-1.npy", npy_bytes("{'descr': '<f4', 'fortran_order': 1, 'shape': (4,), }", b"\0" * 16))
    write(f"{reg}/version-9.npy", npy_bytes(good % "(4,)", b"\0" * 16, major=9))
    write(f"{reg}/negative-dim.pb", TensorProto(data_type=TensorProto.FLOAT, dims=[-64, 256]).SerializeToString())
    write(f"{reg}/huge-dims.pb", TensorProto(data_type=TensorProto.FLOAT, dims=[1 << 40, 1 << 30]).SerializeToString())


def plan_seeds(tec, seeds):
    os.makedirs(f"{HERE}/corpus/plan", exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("relu", "mlp", "softmax", "layernorm", "attention"):
            src = os.path.join(tmp, name + ".onnx")
            write(src, seeds[name])
            for flags, suffix in (([], ""), (["--train", "--loss", "mse"], "-train")):
                out = f"{HERE}/corpus/plan/{name}{suffix}.tecplan"
                subprocess.run([tec, src, "--target", "cpu", "-o", out, *flags], check=True, stdout=subprocess.DEVNULL)
        # GPU plans, emulated on the CPU: bf16 activations and inputs given as f32 (sm_80), FP8 copies read
        # transposed (sm_90).
        for name, target in (("mlp", "sm_80"), ("attention", "sm_80"), ("mlp16", "sm_90")):
            src = os.path.join(tmp, name + ".onnx")
            write(src, seeds[name])
            out = f"{HERE}/corpus/plan/{name}-{target}-train.tecplan"
            subprocess.run([tec, src, "--target", target, "--fp8=all", "--train", "--loss", "mse", "-o", out],
                           check=True, stdout=subprocess.DEVNULL)
        # FP8 recipes in the CPU emulation: block-scaled quantizes (read transposed too) and GEMMs, MXFP8's,
        # current scaling's scale step.
        src = os.path.join(tmp, "mlp16.onnx")
        for recipe in ("block", "mxfp8", "current"):
            out = f"{HERE}/corpus/plan/mlp16-{recipe}-train.tecplan"
            subprocess.run([tec, src, "--target", "cpu", "--fp8=all", "--fp8-emulate", "--fp8-recipe", recipe, "--train",
                            "--loss", "mse", "-o", out], check=True, stdout=subprocess.DEVNULL)


def fnv1a(data, h=1469598103934665603):
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def checkpoint_seeds():
    # FuzzCheckpoint.cpp's variant: w [6], w/adam_v [6], step (scalar), all f32 (DType 0).
    state = [("w", [6], np.arange(1, 7, dtype=np.float32)), ("w/adam_v", [6], np.array([0, 1] * 3, np.float32)),
             ("step", [], np.array(1, np.float32))]
    h = fnv1a(b"tec-state")
    for name, shape, _ in state:
        h = fnv1a(name.encode() + b"\0", h)
        h = fnv1a(struct.pack("<i", 0), h)
        for d in shape:
            h = fnv1a(struct.pack("<q", d), h)
        h = fnv1a(b"|", h)
    tensors = [{"dtype": "f32", "file": name.replace("/", "_") + ".npy", "fnv1a64": f"{fnv1a(a.tobytes()):016x}",
                "name": name, "shape": shape} for name, shape, a in state]
    manifest = {"format": 2, "state": f"{h:016x}", "step": 1, "tensors": tensors}
    write(f"{HERE}/corpus/checkpoint/good", b"step-1\n" + json.dumps(manifest).encode())
    write(f"{HERE}/corpus/checkpoint/format-1", b"step-1\n" + json.dumps({"step": 1, "tensors": ["w"]}).encode())
    reg = f"{HERE}/regressions/checkpoint"
    write(f"{reg}/step-minus-1", b"step--1\n" + json.dumps(manifest).encode())
    write(f"{reg}/step-int64-max", b"step-9223372036854775807\n" + json.dumps(manifest).encode())


def regression_models():
    reg = f"{HERE}/regressions/onnx"
    for opset in (17, 19):
        write(f"{reg}/reshape-one-input-o{opset}.onnx",
              model([helper.make_node("Reshape", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [6])], opset=opset))
    softmax = helper.make_node("Softmax", ["x"], ["y"])
    softmax.attribute.append(helper.make_attribute("axis", "last"))
    write(f"{reg}/softmax-string-axis.onnx", model([softmax], [vi("x", [2, 3])], [vi("y", [2, 3])]))
    # A stride of 0 divided by zero inside ONNX's own shape inference (found by the fuzzer from conv-pool).
    conv = helper.make_node("Conv", ["x", "w"], ["y"], strides=[0, 2])
    write(f"{reg}/conv-zero-stride.onnx",
          model([conv], [vi("x", [1, 2, 8, 8])], [vi("y", [1, 2, 6, 3])],
                [numpy_helper.from_array(np.ones((2, 2, 3, 3), np.float32), "w")]))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tec", required=True)
    args = parser.parse_args()
    seeds = onnx_seeds()
    tensor_seeds()
    plan_seeds(args.tec, seeds)
    checkpoint_seeds()
    regression_models()


if __name__ == "__main__":
    main()
