"""Writes malformed ONNX models, one per class of bad node tec must refuse (exit 2) with the node named.

Usage: bad_models.py OUT_DIR   (each file's name says what is wrong with it; -oN: at opset N)
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(path, nodes, opset, inputs=(("x", [2, 3]),), outputs=(("y", None),), inits=()):
    graph = helper.make_graph(
        nodes, "bad", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for opset in (17, 19):
        save(f"{out}/reshape-one-input-o{opset}.onnx", [helper.make_node("Reshape", ["x"], ["y"], name="r")], opset)
        softmax = helper.make_node("Softmax", ["x"], ["y"], name="sm")
        softmax.attribute.append(helper.make_attribute("axis", 1.5))
        save(f"{out}/softmax-float-axis-o{opset}.onnx", [softmax], opset)
        gemm = helper.make_node("Gemm", ["x", "x"], ["y"], name="g", transB=1)
        gemm.attribute.append(helper.make_attribute("alpha", "two"))
        save(f"{out}/gemm-string-alpha-o{opset}.onnx", [gemm], opset)
        twice = helper.make_node("Softmax", ["x"], ["y"], name="twice", axis=1)
        twice.attribute.append(helper.make_attribute("axis", 0))
        save(f"{out}/duplicate-attribute-o{opset}.onnx", [twice], opset)
    for opset in (17, 19):
        save(f"{out}/unknown-attribute-o{opset}.onnx",
             [helper.make_node("Relu", ["x"], ["y"], name="relu", alpha=1.0)], opset)
        save(f"{out}/extra-output-o{opset}.onnx", [helper.make_node("Relu", ["x"], ["y", "z"], name="relu2")], opset)
    save(f"{out}/gemm-transb-2-o17.onnx", [helper.make_node("Gemm", ["x", "x"], ["y"], name="g2", transB=2)], 17)
    shape2d = numpy_helper.from_array(np.array([[3, 2]], np.int64), "shape")
    save(f"{out}/reshape-2d-shape-o17.onnx", [helper.make_node("Reshape", ["x", "shape"], ["y"], name="r2")], 17,
         inits=[shape2d])
    table = numpy_helper.from_array(np.ones((4, 3), np.float32), "table")
    ids = numpy_helper.from_array(np.array([0, 9], np.int64), "ids")
    save(f"{out}/gather-constant-index-o17.onnx", [helper.make_node("Gather", ["table", "ids"], ["y"], name="lookup")],
         17, inits=[table, ids])
    w = numpy_helper.from_array(np.ones((3, 3), np.float32), "w")
    save(f"{out}/duplicate-initializer-o17.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], 17,
         inits=[w, w])
    save(f"{out}/duplicate-input-o17.onnx", [helper.make_node("Relu", ["x"], ["y"], name="relu3")], 17,
         inputs=(("x", [2, 3]), ("x", [2, 3])))
    save(f"{out}/no-outputs-o17.onnx", [helper.make_node("Relu", ["x"], ["y"], name="relu4")], 17, outputs=())
    both = helper.make_tensor("w", TensorProto.FLOAT, [3, 3], [1.0] * 9)
    both.raw_data = b"\0" * 36
    save(f"{out}/raw-and-float-data-o17.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm2")], 17,
         inits=[both])
    # Valid ONNX whose element types tec lacks in two nodes: both are reported at once (their consumer is not).
    ints = helper.make_graph([helper.make_node("Relu", ["x"], ["a"], name="relu_i64"),
                              helper.make_node("Pow", ["x", "x"], ["b"], name="pow_i64"),
                              helper.make_node("Add", ["a", "b"], ["y"], name="add_i64")], "ints",
                             [helper.make_tensor_value_info("x", TensorProto.INT64, [2, 3])],
                             [helper.make_tensor_value_info("y", TensorProto.INT64, [2, 3])])
    onnx.save(helper.make_model(ints, opset_imports=[helper.make_opsetid("", 17)]), f"{out}/int-relu-and-pow-o17.onnx")
    # Tensors no machine holds, and a constant past --max-fold-bytes: refused at compile time naming the node
    # (folding it once aborted tec with bad_alloc).
    huge = numpy_helper.from_array(np.array([2**20, 2**20, 2**10], np.int64), "huge")
    ones = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    save(f"{out}/constant-of-shape-4pib-o17.onnx",
         [helper.make_node("ConstantOfShape", ["huge"], ["c"], name="fill", value=ones),
          helper.make_node("ReduceSum", ["c"], ["y"], name="total", keepdims=0)], 17, inits=[huge])
    wide = numpy_helper.from_array(np.array([2**20, 2**19, 3], np.int64), "wide")
    save(f"{out}/expand-6tib-o17.onnx", [helper.make_node("Expand", ["x", "wide"], ["y"], name="spread")], 17,
         inputs=(("x", [1, 3]),), inits=[wide])
    # A constant the plan would store (a Range of 2 MiB) past --max-fold-bytes 1000000, in its own folder: it
    # compiles under the default.
    os.makedirs(f"{out}/limits", exist_ok=True)
    bounds = [numpy_helper.from_array(np.array(v, np.int64), name) for v, name in ((0, "start"), (2**18, "limit"),
                                                                                  (1, "delta"))]
    save(f"{out}/limits/range-2mib-o17.onnx",
         [helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="positions"),
          helper.make_node("Cast", ["r"], ["f"], to=TensorProto.FLOAT),
          helper.make_node("Add", ["x", "f"], ["y"], name="shift")], 17, inputs=(("x", [1]),), inits=bounds)
    # Opset 19 (past ONNX 1.12's schemas, checked by tec): too many inputs, a required input left empty.
    save(f"{out}/relu-two-inputs-o19.onnx", [helper.make_node("Relu", ["x", "x", "x"], ["y"], name="relu5")], 19)
    save(f"{out}/matmul-empty-input-o19.onnx", [helper.make_node("MatMul", ["x", ""], ["y"], name="mm3")], 19)
    # Attributes that must be finite.
    scale = numpy_helper.from_array(np.ones(3, np.float32), "scale")
    bias = numpy_helper.from_array(np.zeros(3, np.float32), "bias")
    save(f"{out}/layer-norm-nan-epsilon-o17.onnx",
         [helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], name="ln", epsilon=float("nan"))], 17,
         inits=[scale, bias])
    w = numpy_helper.from_array(np.ones((3, 3), np.float32), "w")
    save(f"{out}/gemm-inf-alpha-o17.onnx", [helper.make_node("Gemm", ["x", "w"], ["y"], name="g_inf", alpha=float("inf"))],
         17, inits=[w])
    save(f"{out}/gemm-nan-beta-o17.onnx",
         [helper.make_node("Gemm", ["x", "w", "bias"], ["y"], name="g_nan", beta=float("nan"))], 17, inits=[w, bias])
    # A node name carrying a terminal escape sequence reaches no terminal raw.
    save(f"{out}/escape-in-name-o17.onnx", [helper.make_node("Frobnicate", ["x"], ["y"], name="evil\x1b[31mred")], 17)


if __name__ == "__main__":
    main()
