#!/usr/bin/env python3
"""Transformer Engine 2.x's FP8 recipes on the CPU (`tec --fp8-recipe current|block|mxfp8 --fp8-emulate`)
against a NumPy reference written from the recipes' documentation, not from tec's code:

- FP8 casts: each format's 256 codes decoded from their definition (sign, exponent, mantissa, bias; E4M3FN
  has no infinity and one NaN per sign, E5M2 is IEEE-like), a value rounded to the nearest code with ties to
  the even code, saturated to the largest finite one (NVIDIA's __NV_SATFINITE), NaN kept NaN.
- Current scaling (TE's Float8CurrentScaling, compute_scale_from_amax): scale = fp8_max / amax over the
  whole tensor, 1 where the amax is 0 or infinite, FLT_MAX where the quotient overflows; scale_inv = 1/scale.
- Block scaling (TE's Float8BlockScaling, DeepSeek-V3): the same scale per block, 1x128 along K for
  activations, 128x128 for weights, rounded down to a power of two by default (TE's power_2_scale), or FP32.
- MXFP8 (OCP Microscaling v1.0, as TE computes the shared scale): per 32 consecutive values along K, the
  scale is the smallest power of two X in E8M0's range [2^-127, 2^127] with amax / X <= fp8_max; values are
  cast as value / X.
A block or tensor holding a NaN is NaN throughout (its scale is NaN); values are multiplied by the scale in
float32 and cast; dequantization is code * scale_inv in float32.

Checks, on a GEMM y = x W (one MatMul node) with shapes that do and do not divide the blocks (K = 256 and
144, 7 rows), inputs with outliers, zeros, float32 subnormals, NaN and infinities:
1. With W the identity every weight block quantizes exactly (its amax is 1 or 0), so y is x quantized and
   dequantized, times one constant: tec's output must equal the reference bit for bit, NaN where it is NaN.
2. With a random W: y equals the emulation's definition, the f32 GEMM of the dequantized operands, to
   float32 accumulation (|error| <= K * 2^-23 * sum |x^ w^|).
3. FP8 health of a block-scaled training step (`tec train --report`): each FP8 copy by its operand's name,
   its blocks (fc1's [64, 256] input in 1x128 blocks: 128), the range of its block scales (powers of two).
4. `tec calibrate model.onnx`: on a two-layer MLP whose input has outliers (1e5 in one feature of every
   fourth row, a feature the first weight ignores: a per-tensor scale then flushes every ordinary value, 1x128
   blocks only those beside an outlier), each layer's error per recipe is measured
   independently here too (the model with that layer alone in FP8, against FP32, in NumPy), the first
   layer chooses a block recipe, every choice is the cheapest recipe within 1.25x of the layer's best, and
   the --fp8-recipe it prints compiles.
5. Training: one SGD step of a MatMul layer (MSE) under each recipe against NumPy doing the same step with the
   reference's quantization: forward x (1-D blocks along K) times W (128x128 tiles under block scaling, 32x1
   along K under MXFP8), the weight gradient from x transposed (blocks along the batch) and dY (blocks along
   the batch: the columnwise copies, each from high precision), gradients E5M2 under current scaling's
   HYBRID default. The weights' updates agree to 5e-3 in norm and all but 2% of their elements to 1e-3 (a
   dY computed in another order may land on the other side of an FP8 rounding boundary, moving a column of
   the update); under FP32 block scales, blocks laid along the wrong dim (dY's, or W's tiles) miss both
   bounds, as does a gradient in the wrong format (power-of-two scales put values on the same grid whatever
   the blocks, so there only the range's ends tell).
"""
import json
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
from onnx import TensorProto, helper, numpy_helper

FORMATS = {"e4m3": (4, 3, 7), "e5m2": (5, 2, 15)}


def code_values(fmt):
    """The value of each code 0..255 as float64, from the format's definition."""
    exp_bits, man_bits, bias = FORMATS[fmt]
    values = np.empty(256)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e = (code >> man_bits) & ((1 << exp_bits) - 1)
        m = code & ((1 << man_bits) - 1)
        if fmt == "e4m3" and e == 15 and m == 7:
            values[code] = np.nan
        elif fmt == "e5m2" and e == 31:
            values[code] = np.nan if m else sign * np.inf
        elif e == 0:
            values[code] = sign * m * 2.0 ** (1 - bias - man_bits)
        else:
            values[code] = sign * (1 + m / 2 ** man_bits) * 2.0 ** (e - bias)
    return values


def fp8_max(fmt):
    values = code_values(fmt)
    return np.nanmax(values[np.isfinite(values)])


def to_fp8(x, fmt):
    """float32 array -> codes: nearest, ties to the even code, saturating, NaN -> NaN's code."""
    values = code_values(fmt)
    positive = values[:0x80]
    finite = np.isfinite(positive)
    table = positive[finite]  # codes 0..max, increasing
    top = len(table) - 1
    a = np.abs(x.astype(np.float64))
    idx = np.clip(np.searchsorted(table, a), 1, top)
    lo, hi = table[idx - 1], table[idx]
    pick_hi = (a - lo > hi - a) | ((a - lo == hi - a) & ((idx - 1) % 2 == 1))
    code = np.where(pick_hi, idx, idx - 1)
    code = np.where(a >= table[top], top, code)
    code = code | np.where(np.signbit(x), 0x80, 0)
    nan_code = 0x7F
    return np.where(np.isnan(x), nan_code, code).astype(np.uint8)


def from_fp8(codes, fmt):
    return code_values(fmt)[codes].astype(np.float32)


def te_scale(amax, fmax, pow2):
    """TE's compute_scale_from_amax, float32 arithmetic."""
    amax = np.float32(amax)
    if np.isnan(amax):
        return np.float32(np.nan)
    if amax == 0 or np.isinf(amax):
        return np.float32(1.0)
    with np.errstate(over="ignore"):
        scale = np.float32(fmax) / amax
    if np.isinf(scale):
        scale = np.float32(np.finfo(np.float32).max)
    if pow2:  # the largest power of two not above the scale
        mantissa, exponent = np.frexp(np.float64(scale))
        scale = np.float32(np.ldexp(0.5, exponent))
    return scale


def mx_scale_exponent(amax, fmax):
    """The exponent e of MXFP8's scale 2^e: smallest with amax / 2^e <= fmax, within [-127, 127]."""
    if np.isnan(amax):
        return None
    if amax == 0:
        return -127
    if np.isinf(amax):
        return 127
    e = int(np.ceil(np.log2(np.float64(amax) / fmax)))
    while np.ldexp(fmax, e - 1) >= amax:  # log2's rounding, corrected exactly
        e -= 1
    while np.ldexp(fmax, e) < amax:
        e += 1
    return max(-127, min(127, e))


def quantize_blocks(x, block, fmt, kind):
    """x [rows, cols] in blocks -> (dequantized float32 values) by the reference rules; kind is
    'current' (one block: the tensor), 'pow2', 'f32' or 'e8m0'."""
    rows, cols = x.shape
    br, bc = block
    fmax = fp8_max(fmt)
    out = np.empty_like(x)
    for r0 in range(0, rows, br):
        for c0 in range(0, cols, bc):
            b = x[r0:r0 + br, c0:c0 + bc]
            amax = np.nan if np.isnan(b).any() else np.abs(b).max()
            if kind == "e8m0":
                e = mx_scale_exponent(amax, fmax)
                scale = np.float32(np.nan) if e is None else np.float32(np.ldexp(1.0, -e))
                scale_inv = np.float32(np.nan) if e is None else np.float32(np.ldexp(1.0, e))
            else:
                scale = te_scale(amax, fmax, kind == "pow2")
                scale_inv = np.float32(1.0) / scale
            with np.errstate(invalid="ignore", over="ignore"):
                codes = to_fp8((b * scale).astype(np.float32), fmt)
                out[r0:r0 + br, c0:c0 + bc] = from_fp8(codes, fmt) * scale_inv
    return out


RECIPES = {  # recipe -> (activation blocks along K of length L, weight blocks, scale kind)
    "current": (None, None, "current"),
    "block": ((1, 128), (128, 128), "pow2"),
    "block-f32": ((1, 128), (128, 128), "f32"),
    "mxfp8": ((1, 32), (32, 1), "e8m0"),
}


def reference(recipe, x, w):
    """Dequantized x [M, K] and W [K, N] as the recipe makes them."""
    x_block, w_block, kind = RECIPES[recipe]
    if kind == "current":
        return quantize_blocks(x, x.shape, "e4m3", "f32"), quantize_blocks(w, w.shape, "e4m3", "f32")
    return quantize_blocks(x, x_block, "e4m3", kind), quantize_blocks(w, w_block, "e4m3", kind)


def matmul_model(w):
    k, n = w.shape
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], "matmul",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def run_tec(tec, tmp, recipe, w, x):
    model = os.path.join(tmp, "model.onnx")
    with open(model, "wb") as f:
        f.write(matmul_model(w).SerializeToString())
    plan = os.path.join(tmp, "model.tecplan")
    name = "block" if recipe == "block-f32" else recipe
    flags = ["--fp8-block-scales", "f32"] if recipe == "block-f32" else []
    compiled = subprocess.run([tec, model, "-o", plan, "--target", "cpu", "--fp8=all", "--fp8-emulate",
                               "--fp8-recipe", name, "--shape", f"x={x.shape[0]}x{x.shape[1]}", *flags],
                              capture_output=True, text=True)
    if compiled.returncode != 0:
        sys.exit(f"compile failed for {recipe}: {compiled.stderr}")
    expected_text = {"current": "current scaling", "block": "block scaling", "block-f32": "f32 scales",
                     "mxfp8": "MXFP8"}[recipe]
    if expected_text not in compiled.stdout:
        sys.exit(f"{recipe}: the compile summary does not name the recipe:\n{compiled.stdout}")
    np.save(os.path.join(tmp, "x.npy"), x)
    out = os.path.join(tmp, "out")
    subprocess.run([tec, "run", plan, "--input", f"x={os.path.join(tmp, 'x.npy')}", "--iterations", "1",
                    "--warmup", "0", "--output-dir", out], check=True, capture_output=True)
    return np.load(os.path.join(out, "y.npy"))


def hard_inputs(rng, m, k):
    """Rows: normal values; outliers; zeros with one block of values; float32 subnormals and tiny normals;
    a NaN; +-infinity; a wide dynamic range (2^-30 .. 2^30)."""
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[1, rng.choice(k, 3, replace=False)] = np.float32(3e4)
    x[2] = 0
    x[2, : k // 4] = rng.standard_normal(k // 4).astype(np.float32)
    x[3] = (rng.standard_normal(k) * 1e-39).astype(np.float32)
    x[3, ::7] = np.float32(2e-30)
    x[4, k // 2] = np.nan
    x[5, 5] = np.inf
    x[5, k - 3] = -np.inf
    x[6] = (np.sign(rng.standard_normal(k)) * np.exp2(rng.uniform(-30, 30, k))).astype(np.float32)
    return x


def check_block_health(tec, models, tmp, rng):
    plan = os.path.join(tmp, "train.tecplan")
    subprocess.run([tec, os.path.join(models, "mlp.onnx"), "--train", "--target", "cpu", "--fp8=all", "--fp8-emulate",
                    "--fp8-recipe", "block", "-o", plan], check=True, capture_output=True)
    for name, shape in (("x", (64, 256)), ("y", (64, 16))):
        np.save(os.path.join(tmp, f"{name}.npy"), rng.standard_normal(shape).astype(np.float32))
    report = os.path.join(tmp, "report.json")
    subprocess.run([tec, "train", plan, "--input", f"x={tmp}/x.npy", "--target", f"y={tmp}/y.npy", "--steps", "2",
                    "--report", report], check=True, capture_output=True)
    with open(report) as f:
        health = {e["tensor"]: e for e in json.load(f)["fp8"]}
    entry = health.get("fc1/input:0", {})
    print(f"block health of fc1/input: {entry}")
    failures = []
    if entry.get("blocks") != 128 or entry.get("amax") is not None:
        failures.append(f"fc1/input: expected 128 blocks and no amax history, got {entry}")
    for name, e in health.items():
        low, high = e.get("scale_inv_min"), e.get("scale_inv_max")
        power_of_two = lambda v: abs(np.log2(v) - round(np.log2(v))) < 1e-6  # noqa: E731 (JSON keeps 10 digits)
        if not e.get("blocks") or not 0 < low <= high or not power_of_two(low) or not power_of_two(high):
            failures.append(f"{name}: expected blocks with power-of-two scales, low <= high, got {e}")
    return failures


def check_calibration(tec, tmp, rng):
    w1 = (rng.standard_normal((256, 256)) / 16).astype(np.float32)
    w1[0] = 0
    w2 = (rng.standard_normal((256, 64)) / 16).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
                               helper.make_node("Relu", ["h"], ["r"], name="relu"),
                               helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")], "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(tmp, "outliers.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    x = rng.standard_normal((64, 256)).astype(np.float32)
    x[::4, 0] = np.float32(1e5)
    np.save(os.path.join(tmp, "rows.npy"), x)
    report = os.path.join(tmp, "calibration.json")
    done = subprocess.run([tec, "calibrate", path, "--input", f"x={tmp}/rows.npy", "--target", "cpu", "--steps", "2",
                           "--json", report], capture_output=True, text=True)
    print(done.stdout)
    if done.returncode != 0:
        return [f"tec calibrate exited {done.returncode}: {done.stderr}"]
    with open(report) as f:
        calibration = json.load(f)
    failures = []
    by_layer = {entry["layer"].split("+")[0]: entry for entry in calibration["layers"]}
    cost_order = ["delayed", "current", "block", "mxfp8"]
    for entry in calibration["layers"]:
        errors = entry["errors"]
        best = min(errors.values())
        expected = next(r for r in cost_order if r in errors and errors[r] <= 1.25 * best)
        if entry["chosen"] != expected:
            failures.append(f"calibrate: {entry['layer']} chose {entry['chosen']}, the rule gives {expected}: {errors}")
    # fc1 alone in FP8, independently: the reference's quantization of x and W1, then FP32 for the rest.
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    exact = relu(x.astype(np.float64) @ w1) @ w2
    for recipe in ("current", "block", "mxfp8"):
        xq, wq = reference(recipe, x, w1)
        alone = relu(xq.astype(np.float64) @ wq) @ w2
        ours = np.linalg.norm(alone - exact) / np.linalg.norm(exact)
        theirs = by_layer.get("fc1", {}).get("errors", {}).get(recipe)
        print(f"fc1 alone under {recipe}: error {ours:.3e} here, {theirs} from tec calibrate")
        if theirs is None or not abs(theirs - ours) <= 0.05 * ours + 1e-6:
            failures.append(f"calibrate: fc1 under {recipe}: {theirs}, the reference gives {ours:.3e}")
    if by_layer.get("fc1", {}).get("chosen") not in ("block", "mxfp8"):
        failures.append(f"calibrate: outliers should make fc1 block-scaled: {by_layer.get('fc1')}")
    compiled = subprocess.run([tec, path, "--target", "cpu", "--fp8=all", "--fp8-emulate", "--fp8-recipe",
                               calibration["fp8_recipe"], "-o", os.path.join(tmp, "calibrated.tecplan")],
                              capture_output=True, text=True)
    if compiled.returncode != 0:
        failures.append(f"calibrate's --fp8-recipe '{calibration['fp8_recipe']}' does not compile: {compiled.stderr}")
    return failures


def check_training_step(tec, tmp, rng):
    from train_reference import checkpoint_params  # tests/conformance: the safetensors reader
    m, k, n, lr = 256, 256, 128, 0.5
    w = (rng.standard_normal((k, n)) / 16).astype(np.float32)
    # Rows of very different sizes (2^-8 .. 2^8): blocks along a row and along a column get different scales.
    x = (rng.standard_normal((m, k)) * np.exp2(rng.uniform(-8, 8, (m, 1)))).astype(np.float32)
    t = (rng.standard_normal((m, n)) * np.exp2(rng.uniform(-8, 8, (m, 1)))).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], "layer",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(tmp, "layer.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    np.save(os.path.join(tmp, "lx.npy"), x)
    np.save(os.path.join(tmp, "lt.npy"), t)
    failures = []
    # x, W, the wgrad operands' blocks. Power-of-two scales round values on the same grid whatever the blocks
    # (only the range's ends differ), so block scaling's FP32 scales are what shows the blocks' orientation.
    blocks = {"block": ((1, 128), (128, 128), (128, 1), "pow2", "e4m3"),
              "block-f32": ((1, 128), (128, 128), (128, 1), "f32", "e4m3"),
              "mxfp8": ((1, 32), (32, 1), (32, 1), "e8m0", "e4m3"),
              "current": (None, None, None, "current", "e5m2")}
    for recipe, (x_block, w_block, column, kind, grad_format) in blocks.items():
        plan = os.path.join(tmp, f"layer_{recipe}.tecplan")
        folder = os.path.join(tmp, f"layer_{recipe}")
        flags = ["--fp8-recipe", "block", "--fp8-block-scales", "f32"] if recipe == "block-f32" else ["--fp8-recipe", recipe]
        compiled = subprocess.run([tec, path, "--train", "--target", "cpu", "--fp8=all", "--fp8-emulate", *flags,
                                   "--loss", "mse", "--optimizer", "sgd", "--lr", str(lr), "-o", plan],
                                  capture_output=True, text=True)
        trained = subprocess.run([tec, "train", plan, "--input", f"x={tmp}/lx.npy", "--target", f"y={tmp}/lt.npy",
                                  "--steps", "1", "--checkpoint-dir", folder], capture_output=True, text=True)
        if compiled.returncode or trained.returncode:
            failures.append(f"training under {recipe}: {compiled.stderr}{trained.stderr}")
            continue
        step = checkpoint_params(os.path.join(folder, "step-1"))["w"].astype(np.float64) - w

        def q(v, block, fmt="e4m3"):
            return quantize_blocks(v, v.shape if block is None else block, fmt, "f32" if kind == "current" else kind)
        y = (q(x, x_block).astype(np.float64) @ q(w, w_block)).astype(np.float32)
        dy = (2.0 * (y.astype(np.float64) - t) / (m * n)).astype(np.float32)
        xt = np.ascontiguousarray(x.T)
        dw = q(xt, None if column is None else (1, column[0])).astype(np.float64) @ q(dy, column, grad_format)
        expected = -lr * dw
        gap = np.linalg.norm(step - expected) / np.linalg.norm(expected)
        # Element by element too: the norm is the large rows', which any blocking quantizes well.
        off = float(np.mean(np.abs(step - expected) > 1e-3 * np.abs(expected) + 1e-12))
        print(f"one SGD step under {recipe}: the update within {gap:.2e} of NumPy's in norm, "
              f"{100 * off:.2f}% of its elements off by more than 1e-3")
        if not (gap <= 5e-3 and off <= 0.02):
            failures.append(f"training under {recipe}: the weight update is {gap:.2e} from NumPy's in norm, "
                            f"{100 * off:.2f}% of its elements off by more than 1e-3")
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", required=True)
    parser.add_argument("--models", required=True)
    args = parser.parse_args()
    rng = np.random.default_rng(20261206)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in (256, 144):
            hard = hard_inputs(rng, 7, k)
            for recipe in RECIPES:
                # 1. The identity: y is x's quantization, bit for bit: on every kind of row, and on the finite
                # ones alone (under current scaling one NaN makes the whole tensor NaN).
                eye = np.eye(k, dtype=np.float32)
                for rows, x in (("all rows", hard), ("finite rows", hard[[0, 1, 2, 3]])):
                    xq, wq = reference(recipe, x, eye)
                    with np.errstate(invalid="ignore"):
                        expected = (xq.astype(np.float64) @ wq.astype(np.float64)).astype(np.float32)
                    got = run_tec(args.tec, tmp, recipe, eye, x)
                    same = np.array_equal(got, expected, equal_nan=True)
                    print(f"{recipe:9s} K={k} identity, {rows}: {'bit-exact' if same else 'DIFFERS'} "
                          f"({int(np.isnan(expected).sum())} NaN, {int((expected == 0).sum())} zeros, "
                          f"{len(np.unique(expected[np.isfinite(expected)]))} distinct values of {expected.size})")
                    if not same:
                        bad = np.argwhere(~((got == expected) | (np.isnan(got) & np.isnan(expected))))
                        i, j = bad[0]
                        failures.append(f"{recipe} K={k} {rows}: {len(bad)} elements differ, first [{i},{j}]: tec "
                                        f"{got[i, j]!r}, reference {expected[i, j]!r} (x {x[i, j]!r})")
                x = hard
                # 2. A random weight: the f32 GEMM of the dequantized operands.
                w = (rng.standard_normal((k, 48)) / np.sqrt(k)).astype(np.float32)
                xf = x[[0, 1, 2, 3, 6]]  # finite rows
                xq, wq = reference(recipe, xf, w)
                expected = xq.astype(np.float64) @ wq.astype(np.float64)
                got = run_tec(args.tec, tmp, recipe, w, xf)
                bound = k * 2.0 ** -23 * (np.abs(xq).astype(np.float64) @ np.abs(wq).astype(np.float64)) + 1e-30
                excess = np.max(np.abs(got - expected) / bound)
                plain = np.max(np.abs(xf.astype(np.float64) @ w.astype(np.float64) - expected))
                print(f"{recipe:9s} K={k} random W: error / accumulation bound {excess:.3f} (FP8's own error {plain:.3g})")
                if not excess <= 1.0:
                    failures.append(f"{recipe} K={k}: the GEMM is {excess:.3g} x its float32 accumulation bound "
                                    "from the dequantized operands' product")
                if not plain > 0:
                    failures.append(f"{recipe} K={k}: no FP8 rounding at all")
        failures += check_block_health(args.tec, args.models, tmp, rng)
        failures += check_calibration(args.tec, tmp, rng)
        failures += check_training_step(args.tec, tmp, rng)
    if failures:
        print("\n".join(["FAILED:"] + failures))
        return 1
    print("every recipe equals the NumPy reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
