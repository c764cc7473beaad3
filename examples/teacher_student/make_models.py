#!/usr/bin/env python3
"""The teacher and the student of the demo, as ONNX models (seeded), into the folder given.

teacher.onnx      x[64, 64] -> 256 -> 256 -> 16, GELU (the function to learn)
student.onnx      x[64, 64] -> 128 -> 16, ReLU (smaller; trained by tec to imitate the teacher)
gpt_teacher.onnx  a GPT-style block (LayerNorm, causal attention, GELU MLP; x[2, 16, 64]): the test suite's
gpt_student.onnx  block (tests/models/gen_models.py) with two seeds, the student imitating the teacher
Every GEMM dim is a multiple of 16, so every layer can run in FP8.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "models"))
import gen_models  # noqa: E402  (the GPT-style block)

BATCH, D_IN, D_OUT = 64, 64, 16


def mlp(name, widths, activation, seed):
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i, (k, n) in enumerate(zip(widths[:-1], widths[1:])):
        w = (rng.standard_normal((n, k)) * np.sqrt(2.0 / k)).astype(np.float32)
        b = (rng.standard_normal(n) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"fc{i}.weight"), numpy_helper.from_array(b, f"fc{i}.bias")]
        out = "y" if i == len(widths) - 2 else f"h{i}"
        pre = out if out == "y" else f"z{i}"
        nodes.append(helper.make_node("Gemm", [prev, f"fc{i}.weight", f"fc{i}.bias"], [pre], name=f"fc{i}", transB=1))
        if out != "y":
            nodes.append(helper.make_node(activation, [pre], [out], name=f"act{i}"))
        prev = out
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, D_IN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, D_OUT])], inits)
    model = helper.make_model(graph, producer_name="tec-demo", opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    onnx.save(mlp("teacher", [D_IN, 256, 256, D_OUT], "Gelu", seed=1), os.path.join(out, "teacher.onnx"))
    onnx.save(mlp("student", [D_IN, 128, D_OUT], "Relu", seed=2), os.path.join(out, "student.onnx"))
    onnx.save(gen_models.gpt_block(decomposed=False, seed=3), os.path.join(out, "gpt_teacher.onnx"))
    onnx.save(gen_models.gpt_block(decomposed=False, seed=2), os.path.join(out, "gpt_student.onnx"))


if __name__ == "__main__":
    main()
