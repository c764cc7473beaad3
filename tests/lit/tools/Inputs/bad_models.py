"""Writes malformed ONNX models, one per class of bad node tec must refuse (exit 2) with the node named.

Usage: bad_models.py OUT_DIR   (each file's name says what is wrong with it; -oN: at opset N)
"""
import os
import sys

import onnx
from onnx import TensorProto, helper


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
    save(f"{out}/unknown-attribute-o17.onnx", [helper.make_node("Relu", ["x"], ["y"], name="relu", alpha=1.0)], 17)
    save(f"{out}/extra-output-o17.onnx", [helper.make_node("Relu", ["x"], ["y", "z"], name="relu2")], 17)
    # A node name carrying a terminal escape sequence reaches no terminal raw.
    save(f"{out}/escape-in-name-o17.onnx", [helper.make_node("Frobnicate", ["x"], ["y"], name="evil\x1b[31mred")], 17)


if __name__ == "__main__":
    main()
