#!/usr/bin/env python3
"""Generates tec's test models with onnx.helper, seeded, into the folder given (default: this one).

  mlp.onnx                  3-layer MLP: Gemm(transB)+Relu, MatMul+Add+Gelu, Gemm(transB)
  mlp_external.onnx (+.bin) the same MLP with its weights as external data
  gpt_block.onnx            GPT-style block: LayerNormalization, causal attention, MLP with Gelu
  gpt_block_decomposed.onnx the same block as exporters often write it: LayerNorm as
                            ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, GELU as the Erf formula
  gpt_block_teacher.onnx    the block with other weights: a teacher to distill into gpt_block.onnx
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 20  # Gelu is an ONNX operator from opset 20
IR_VERSION = 9


def model(graph):
    m = helper.make_model(graph, producer_name="tec-tests", opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = IR_VERSION
    onnx.checker.check_model(m)
    return m


def init(rng, name, shape, scale=None):
    scale = scale if scale is not None else 1.0 / np.sqrt(shape[-1] if len(shape) > 1 else 1.0)
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def mlp(batch=64, d_in=256, hidden=512, d_out=16):
    rng = np.random.default_rng(1)
    inits = [
        init(rng, "fc1.weight", [hidden, d_in]), init(rng, "fc1.bias", [hidden], 0.1),
        init(rng, "fc2.weight", [hidden, hidden]), init(rng, "fc2.bias", [hidden], 0.1),
        init(rng, "fc3.weight", [d_out, hidden]), init(rng, "fc3.bias", [d_out], 0.1),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h1"], name="fc1", transB=1),
        helper.make_node("Relu", ["h1"], ["a1"], name="relu1"),
        helper.make_node("MatMul", ["a1", "fc2.weight"], ["h2"], name="fc2_matmul"),
        helper.make_node("Add", ["h2", "fc2.bias"], ["h2b"], name="fc2_bias"),
        helper.make_node("Gelu", ["h2b"], ["a2"], name="gelu2"),
        helper.make_node("Gemm", ["a2", "fc3.weight", "fc3.bias"], ["y"], name="fc3", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, d_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, d_out])], inits)
    return model(graph)


def gpt_block(decomposed, batch=2, seq=16, dim=64, heads=4, seed=2, init=init):
    """`init(rng, name, shape, scale=None)` makes each weight (bench/gpu tiles a small random block)."""
    rng = np.random.default_rng(seed)
    hd = dim // heads
    inits = [
        init(rng, "ln1.weight", [dim], 0.1), init(rng, "ln1.bias", [dim], 0.1),
        init(rng, "attn.qkv.weight", [dim, 3 * dim]), init(rng, "attn.qkv.bias", [3 * dim], 0.1),
        init(rng, "attn.proj.weight", [dim, dim]), init(rng, "attn.proj.bias", [dim], 0.1),
        init(rng, "ln2.weight", [dim], 0.1), init(rng, "ln2.bias", [dim], 0.1),
        init(rng, "mlp.fc.weight", [dim, 4 * dim]), init(rng, "mlp.fc.bias", [4 * dim], 0.1),
        init(rng, "mlp.proj.weight", [4 * dim, dim]), init(rng, "mlp.proj.bias", [dim], 0.1),
        const("split_sizes", np.array([dim, dim, dim], np.int64)),
        const("heads_shape", np.array([batch, seq, heads, hd], np.int64)),
        const("merged_shape", np.array([batch, seq, dim], np.int64)),
        const("causal_mask", np.tril(np.ones((seq, seq), dtype=bool))),
        const("neg_big", np.array(-1e9, np.float32)),
        const("inv_sqrt_hd", np.array(1.0 / np.sqrt(hd), np.float32)),
    ]
    n = []

    def layer_norm(prefix, x, out):
        if not decomposed:
            n.append(helper.make_node("LayerNormalization", [x, f"{prefix}.weight", f"{prefix}.bias"], [out],
                                      name=prefix, axis=-1, epsilon=1e-5))
            return
        p = prefix + "/"
        n.extend([
            helper.make_node("ReduceMean", [x, "ln_axes"], [p + "mean"], name=p + "mean", keepdims=1),
            helper.make_node("Sub", [x, p + "mean"], [p + "centered"], name=p + "sub"),
            helper.make_node("Pow", [p + "centered", "two"], [p + "sq"], name=p + "pow"),
            helper.make_node("ReduceMean", [p + "sq", "ln_axes"], [p + "var"], name=p + "var", keepdims=1),
            helper.make_node("Add", [p + "var", "eps"], [p + "var_eps"], name=p + "add_eps"),
            helper.make_node("Sqrt", [p + "var_eps"], [p + "std"], name=p + "sqrt"),
            helper.make_node("Div", [p + "centered", p + "std"], [p + "norm"], name=p + "div"),
            helper.make_node("Mul", [p + "norm", f"{prefix}.weight"], [p + "scaled"], name=p + "mul"),
            helper.make_node("Add", [p + "scaled", f"{prefix}.bias"], [out], name=p + "add"),
        ])

    def gelu(x, out):
        if not decomposed:
            n.append(helper.make_node("Gelu", [x], [out], name="mlp/gelu"))
            return
        n.extend([
            helper.make_node("Div", [x, "sqrt2"], ["mlp/gelu/scaled"], name="mlp/gelu/div"),
            helper.make_node("Erf", ["mlp/gelu/scaled"], ["mlp/gelu/erf"], name="mlp/gelu/erf"),
            helper.make_node("Add", ["mlp/gelu/erf", "one"], ["mlp/gelu/1p"], name="mlp/gelu/add"),
            helper.make_node("Mul", [x, "mlp/gelu/1p"], ["mlp/gelu/x1p"], name="mlp/gelu/mul"),
            helper.make_node("Mul", ["mlp/gelu/x1p", "half"], [out], name="mlp/gelu/half"),
        ])

    if decomposed:
        # Scalars as Constant nodes, the way torch.onnx.export writes them.
        for name, value in [("two", 2.0), ("eps", 1e-5), ("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5)]:
            n.append(helper.make_node("Constant", [], [name], name=name,
                                      value=numpy_helper.from_array(np.array(value, np.float32))))
        n.append(helper.make_node("Constant", [], ["ln_axes"], name="ln_axes",
                                  value=numpy_helper.from_array(np.array([-1], np.int64))))

    layer_norm("ln1", "x", "ln1_out")
    n.extend([
        helper.make_node("MatMul", ["ln1_out", "attn.qkv.weight"], ["qkv_mm"], name="attn/qkv"),
        helper.make_node("Add", ["qkv_mm", "attn.qkv.bias"], ["qkv"], name="attn/qkv_bias"),
        helper.make_node("Split", ["qkv", "split_sizes"], ["q", "k", "v"], name="attn/split", axis=-1),
    ])
    for t in "qkv":
        n.append(helper.make_node("Reshape", [t, "heads_shape"], [t + "_heads"], name=f"attn/{t}_reshape"))
        n.append(helper.make_node("Transpose", [t + "_heads"], [t + "_bhtd"], name=f"attn/{t}_transpose",
                                  perm=[0, 2, 1, 3]))
    n.extend([
        helper.make_node("Transpose", ["k_bhtd"], ["k_t"], name="attn/k_t", perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q_bhtd", "k_t"], ["scores_raw"], name="attn/scores"),
        helper.make_node("Mul", ["scores_raw", "inv_sqrt_hd"], ["scores"], name="attn/scale"),
        helper.make_node("Where", ["causal_mask", "scores", "neg_big"], ["masked"], name="attn/mask"),
        helper.make_node("Softmax", ["masked"], ["probs"], name="attn/softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v_bhtd"], ["ctx"], name="attn/context"),
        helper.make_node("Transpose", ["ctx"], ["ctx_bthd"], name="attn/merge_transpose", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_bthd", "merged_shape"], ["ctx_merged"], name="attn/merge_reshape"),
        helper.make_node("MatMul", ["ctx_merged", "attn.proj.weight"], ["proj_mm"], name="attn/proj"),
        helper.make_node("Add", ["proj_mm", "attn.proj.bias"], ["attn_out"], name="attn/proj_bias"),
        helper.make_node("Add", ["x", "attn_out"], ["resid1"], name="resid1"),
    ])
    layer_norm("ln2", "resid1", "ln2_out")
    n.extend([
        helper.make_node("MatMul", ["ln2_out", "mlp.fc.weight"], ["fc_mm"], name="mlp/fc"),
        helper.make_node("Add", ["fc_mm", "mlp.fc.bias"], ["fc"], name="mlp/fc_bias"),
    ])
    gelu("fc", "act")
    n.extend([
        helper.make_node("MatMul", ["act", "mlp.proj.weight"], ["mproj_mm"], name="mlp/proj"),
        helper.make_node("Add", ["mproj_mm", "mlp.proj.bias"], ["mlp_out"], name="mlp/proj_bias"),
        helper.make_node("Add", ["resid1", "mlp_out"], ["y"], name="resid2"),
    ])
    graph = helper.make_graph(
        n, "gpt_block_decomposed" if decomposed else "gpt_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, dim])], inits)
    return model(graph)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out, exist_ok=True)
    onnx.save(mlp(), os.path.join(out, "mlp.onnx"))
    onnx.save(mlp(), os.path.join(out, "mlp_external.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="mlp_external.bin", size_threshold=0)
    onnx.save(gpt_block(decomposed=False), os.path.join(out, "gpt_block.onnx"))
    onnx.save(gpt_block(decomposed=True), os.path.join(out, "gpt_block_decomposed.onnx"))
    onnx.save(gpt_block(decomposed=False, seed=3), os.path.join(out, "gpt_block_teacher.onnx"))


if __name__ == "__main__":
    main()
