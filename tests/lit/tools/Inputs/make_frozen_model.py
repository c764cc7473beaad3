"""A model with every kind of initializer training must leave alone, beside two weights it trains:
BatchNormalization running statistics, an additive causal mask, a value named after the node that made
it, and a threshold used only by a comparison (no gradient reaches it). Two one-element params train like any
other (a 0-D scale and a [1] bias), while a scalar the exporter named (onnx::Mul_9) is a constant. The model
says PyTorch produced it, unless a second argument names another producer: then the one-element initializers
are scalar constants, listed by the summary."""
import sys

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

r = np.random.default_rng(0)
mask = np.triu(np.full((4, 4), -1e9, np.float32), 1)
inits = [nh.from_array(r.standard_normal((4, 4)).astype(np.float32), "proj.weight"),
         nh.from_array(np.ones(4, np.float32) + 0.1 * r.standard_normal(4).astype(np.float32), "bn.weight"),
         nh.from_array(r.standard_normal(4).astype(np.float32), "bn.bias"),
         nh.from_array(r.standard_normal(4).astype(np.float32), "bn.running_mean"),
         nh.from_array(np.ones(4, np.float32), "bn.running_var"),
         nh.from_array(mask, "causal"),
         nh.from_array(r.standard_normal((4, 4)).astype(np.float32), "/attn/Mul_output_0"),
         nh.from_array(np.full((4, 4), 0.5, np.float32), "threshold"),
         nh.from_array(np.array(1.5, np.float32), "logit_scale"),
         nh.from_array(np.array([0.25], np.float32), "head.bias"),
         nh.from_array(np.array(2.0, np.float32), "onnx::Mul_9")]
nodes = [h.make_node("MatMul", ["x", "proj.weight"], ["p"]),
         h.make_node("Add", ["p", "causal"], ["m"]),
         h.make_node("Mul", ["m", "/attn/Mul_output_0"], ["s"]),
         h.make_node("Greater", ["s", "threshold"], ["keep"]),
         h.make_node("Where", ["keep", "s", "p"], ["w0"]),
         h.make_node("Mul", ["w0", "logit_scale"], ["w1"]),
         h.make_node("Mul", ["w1", "onnx::Mul_9"], ["w2"]),
         h.make_node("Add", ["w2", "head.bias"], ["w"]),
         h.make_node("Unsqueeze", ["w", "axes"], ["w4"]),
         h.make_node("BatchNormalization", ["w4", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"], ["y"])]
inits.append(nh.from_array(np.array([0, 3], np.int64), "axes"))
g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4, 4])],
                 [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 4, 1])], inits)
model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
model.producer_name = sys.argv[2] if len(sys.argv) > 2 else "pytorch"
onnx.save(model, sys.argv[1])
