#!/usr/bin/env python3
"""tec.attention against the decomposed graph it replaces and against ONNX Runtime.

Each model is compiled twice for the CPU, as recognized (tec.attention) and with
--disable-pass=tec-recognize-attention (MatMul, Softmax, MatMul), and must agree within 1e-5 of the output's
scale: the inference output, then 3 SGD training steps (every loss, and every trained weight exported with
`tec export --checkpoint`, within 1e-5 of the tensor's largest value). The models: GPT-style blocks generated
here with sequences longer than the kernel's blocks (causal, and grouped-query with a padding mask), the
test GPT block, and the static real exports (GPT-2, BERT, Llama, nn.TransformerEncoderLayer). The generated
blocks' recognized plans must hold no [T, T] buffer at all (the decomposed ones must: the check can fail),
and their outputs match ONNX Runtime's (relative 1e-4, absolute 1e-5). Exits non-zero on any mismatch."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import gen_models  # noqa: E402

TOLERANCE = 1e-5
DECOMPOSED = ["--disable-pass=tec-recognize-attention"]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(" ".join(os.path.basename(c) for c in cmd[:2]) + ": " + r.stderr.strip())
    return r.stdout


def grouped_block(batch=2, seq=140, dim=64, heads=4, kv_heads=2, seed=5):
    """Grouped-query attention as HF writes it (repeat_kv: Unsqueeze, Expand, Reshape), scaled by Div, with
    an additive padding mask [B, 1, 1, T] computed from an input of 0/1 flags."""
    rng = np.random.default_rng(seed)
    hd = dim // heads
    w = lambda name, shape: numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)
    c = lambda name, value, dtype=np.int64: numpy_helper.from_array(np.array(value, dtype=dtype), name)
    inits = [w("wq", [dim, dim]), w("wk", [dim, kv_heads * hd]), w("wv", [dim, kv_heads * hd]), w("wo", [dim, dim]),
             c("q_shape", [batch, seq, heads, hd]), c("kv_shape", [batch, seq, kv_heads, hd]),
             c("repeat", [batch, kv_heads, heads // kv_heads, seq, hd]), c("heads_shape", [batch, heads, seq, hd]),
             c("merge", [batch, seq, dim]), c("axis2", [2]), c("axes12", [1, 2]),
             c("root", np.sqrt(hd), np.float32), c("one", 1.0, np.float32), c("min", -3.4028234e38, np.float32)]
    n = helper.make_node
    nodes = [n("MatMul", ["x", "wq"], ["q0"]), n("Reshape", ["q0", "q_shape"], ["q1"]),
             n("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3])]
    for name in ("k", "v"):
        nodes += [n("MatMul", ["x", "w" + name], [name + "0"]), n("Reshape", [name + "0", "kv_shape"], [name + "1"]),
                  n("Transpose", [name + "1"], [name + "2"], perm=[0, 2, 1, 3]),
                  n("Unsqueeze", [name + "2", "axis2"], [name + "3"]), n("Expand", [name + "3", "repeat"], [name + "4"]),
                  n("Reshape", [name + "4", "heads_shape"], [name])]
    nodes += [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["s0"]),
              n("Div", ["s0", "root"], ["s1"]),
              n("Unsqueeze", ["keep", "axes12"], ["keep4"]), n("Sub", ["one", "keep4"], ["hidden"]),
              n("Mul", ["hidden", "min"], ["pad"]), n("Add", ["s1", "pad"], ["s2"]),
              n("Softmax", ["s2"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o0"]),
              n("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]), n("Reshape", ["o1", "merge"], ["o2"]),
              n("MatMul", ["o2", "wo"], ["y"])]
    graph = helper.make_graph(nodes, "grouped_block",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, dim]),
                               helper.make_tensor_value_info("keep", TensorProto.FLOAT, [batch, seq])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, dim])], inits)
    return gen_models.model(graph)


def generated(work):
    """(name, model path, inputs, sequence length) of the blocks made here."""
    rng = np.random.default_rng(7)
    blocks = []
    path = os.path.join(work, "gpt_block_long.onnx")
    onnx.save(gen_models.gpt_block(decomposed=False, batch=2, seq=160, dim=64, heads=2), path)
    blocks.append(("gpt_block_long", path, {"x": rng.standard_normal((2, 160, 64)).astype(np.float32)}, 160))
    path = os.path.join(work, "grouped_block.onnx")
    onnx.save(grouped_block(), path)
    keep = np.ones((2, 140), np.float32)
    keep[1, 100:] = 0  # the second sequence is padded after 100 tokens
    blocks.append(("grouped_block", path, {"x": rng.standard_normal((2, 140, 64)).astype(np.float32), "keep": keep},
                   140))
    return blocks


def attention_steps(plan_json):
    return sum(s["kernel"] == "attention" for v in plan_json["variants"] for s in v["steps"])


def square_buffers(plan_json, seq):
    """The buffers of a plan whose last two dims are [T, T]: scores, probabilities, or a mask."""
    return [b["name"] for v in plan_json["variants"] for b in v["buffers"]
            if [int(d) for d in b["shape"][-2:]] == [seq, seq]]


def scaled_error(got, want):
    return float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))


def compare(tec, name, model, inputs, work, seq=None):
    """Recognized vs decomposed (and with `seq`, the [T, T] buffers and ONNX Runtime); a list of problems."""
    problems, notes = [], []
    data = []
    for key, value in inputs.items():
        np.save(os.path.join(work, f"{name}_{key}.npy"), value)
        data += ["--input", f"{key}={os.path.join(work, name + '_' + key + '.npy')}"]
    outputs = {}
    for form, flags in (("recognized", []), ("decomposed", DECOMPOSED)):
        plan = os.path.join(work, f"{name}_{form}.tecplan")
        run([tec, model, "-o", plan, "--target", "cpu"] + flags)
        info = json.loads(run([tec, "inspect", "--json", plan]))
        count = attention_steps(info)
        if (count > 0) != (form == "recognized"):
            problems.append(f"{form} plan has {count} attention steps")
        if seq is not None:
            square = square_buffers(info, seq)
            if form == "recognized" and square:
                problems.append(f"the recognized plan holds [T, T] buffers: {', '.join(square)}")
            if form == "decomposed" and not square:
                problems.append("the decomposed plan holds no [T, T] buffer: the check cannot tell")
        out = os.path.join(work, f"{name}_{form}_out")
        run([tec, "run", plan, "--output-dir", out, "--threads", "1"] + data)
        outputs[form] = {f[:-4]: np.load(os.path.join(out, f)) for f in sorted(os.listdir(out))}
    for key, want in outputs["decomposed"].items():
        error = scaled_error(outputs["recognized"][key], want)
        notes.append(f"output {error:.1e}")
        if not error <= TOLERANCE:
            problems.append(f"output {key}: {error:.2e} from the decomposed graph's (scaled)")
    if seq is not None:
        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        for o, want in zip(session.get_outputs(), session.run(None, inputs)):
            got = outputs["recognized"][o.name]
            if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
                problems.append(f"output {o.name}: {np.abs(got - want).max():.2e} from ONNX Runtime's")
        notes.append("ONNX Runtime ok" if not problems else "")
    # Training: the same 3 SGD steps from the same weights and data.
    output = next(iter(outputs["decomposed"]))
    target = os.path.join(work, f"{name}_target.npy")
    np.save(target, np.random.default_rng(3).standard_normal(outputs["decomposed"][output].shape).astype(np.float32))
    trained, losses = {}, {}
    for form, flags in (("recognized", []), ("decomposed", DECOMPOSED)):
        plan = os.path.join(work, f"{name}_{form}_train.tecplan")
        run([tec, model, "-o", plan, "--target", "cpu", "--train", "--loss", "mse", "--optimizer", "sgd", "--lr", "0.05"]
            + flags)
        report, checkpoints = plan + ".json", plan + ".checkpoints"
        run([tec, "train", plan, "--steps", "3", "--threads", "1", "--report", report, "--checkpoint-dir", checkpoints,
             "--target", f"{output}={target}"] + data)
        with open(report) as f:
            losses[form] = np.array(json.load(f)["loss"], dtype=np.float64)
        exported = plan + ".onnx"
        run([tec, "export", plan, "--checkpoint", checkpoints, "-o", exported])
        trained[form] = {i.name: numpy_helper.to_array(i) for i in onnx.load(exported).graph.initializer}
    loss_error = float(np.abs(losses["recognized"] - losses["decomposed"]).max() / np.abs(losses["decomposed"]).max())
    if not loss_error <= TOLERANCE:
        problems.append(f"losses {losses['recognized'].tolist()} vs decomposed {losses['decomposed'].tolist()}")
    weight_error = 0.0
    for key, want in trained["decomposed"].items():
        if want.dtype.kind != "f" or key not in trained["recognized"]:
            continue
        weight_error = max(weight_error, scaled_error(trained["recognized"][key], want))
    if not weight_error <= TOLERANCE:
        problems.append(f"trained weights {weight_error:.2e} apart (scaled)")
    notes += [f"losses {loss_error:.1e}", f"{len(trained['decomposed'])} trained tensors {weight_error:.1e}"]
    return problems, ", ".join(n for n in notes if n)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", required=True)
    parser.add_argument("--models", required=True, help="tests/models/real (export_real.py's manifest)")
    parser.add_argument("--test-models", required=True, help="the generated test models (gpt_block.onnx)")
    args = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        cases = [(name, path, inputs, seq) for name, path, inputs, seq in generated(work)]
        x = np.random.default_rng(11).standard_normal((2, 16, 64)).astype(np.float32)
        cases.append(("gpt_block", os.path.join(args.test_models, "gpt_block.onnx"), {"x": x}, None))
        with open(os.path.join(args.models, "manifest.json")) as f:
            for entry in json.load(f):
                if entry["form"].endswith("_static") and entry["arch"] in ("gpt2", "bert", "llama", "encoder"):
                    inputs = np.load(os.path.join(args.models, entry["inputs"]))
                    cases.append((f"{entry['arch']}_{entry['form']}", os.path.join(args.models, entry["model"]),
                                  {k: inputs[k] for k in inputs.files}, None))
        for name, path, inputs, seq in cases:
            try:
                problems, notes = compare(args.tec, name, path, inputs, work, seq)
            except RuntimeError as e:
                problems, notes = [str(e)], ""
            failures += bool(problems)
            print(f"{'ok  ' if not problems else 'FAIL'} {name:22s} " + ("; ".join(problems) if problems else notes))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
