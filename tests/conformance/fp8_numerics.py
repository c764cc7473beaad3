#!/usr/bin/env python3
"""FP8 numerics on the CPU: a plan compiled with --fp8=all --fp8-emulate agrees with the FP32 result
within a bound derived from E4M3's precision.

The bound, per output element of y = x W^T + b with per-tensor scales sx, sw (delayed scaling, history
filled by one warm-up run on the same input, so no value saturates):
  E4M3 has 3 mantissa bits: a normal value is rounded with relative error at most u = 2^-4; a value
  below the smallest normal (2^-6 after scaling) with absolute error at most 2^-10 (half the subnormal
  spacing 2^-9), i.e. 2^-10 / s before scaling. So each quantized operand carries
      e_x[k] = max(u |x[k]|, 2^-10 / sx),   e_w[k] = max(u |w[k]|, 2^-10 / sw),
  and |x^ w^ - x w| <= |x| e_w + |w| e_x + e_x e_w per product. Summed over K, plus float32
  accumulation (K * 2^-24 * sum |x^ w^|) and the bias add (2^-24 |y|):
      |y_fp8 - y| <= sum_k (|x_k| e_w,k + |w_k| e_x,k + e_x,k e_w,k) + (K + 1) 2^-24 sum_k |x^_k w^_k|.
Every element must satisfy it, and the error must not be zero (FP8 was really applied).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

U = 2.0 ** -4
SUBNORMAL_HALF = 2.0 ** -10
E4M3_MAX = 448.0


def gemm_model(m, n, k, rng):
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    b = (rng.standard_normal(n) * 0.1).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, w, b


def run_tec(tec, model_path, x, tmp, compile_flags, calibrate=False):
    plan = os.path.join(tmp, "plan.tecplan")
    subprocess.run([tec, model_path, "-o", plan, "--target", "cpu", *compile_flags], check=True,
                   stdout=subprocess.DEVNULL)
    np.save(os.path.join(tmp, "x.npy"), x)
    out = os.path.join(tmp, "out")
    if calibrate:
        # `tec calibrate` fills the histories from the sample and freezes the scales: no warm-up needed.
        subprocess.run([tec, "calibrate", plan, "--input", f"x={tmp}/x.npy", "--steps", "2"], check=True,
                       stdout=subprocess.DEVNULL)
        warmup = "0"
    else:
        # One warm-up run fills the amax histories; the timed run then quantizes with calibrated scales.
        warmup = "1"
    subprocess.run([tec, "run", plan, "--input", f"x={tmp}/x.npy", "--warmup", warmup, "--iterations", "1",
                    "--output-dir", out], check=True, stdout=subprocess.DEVNULL)
    return np.load(os.path.join(out, "y.npy"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", required=True)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    m, n, k = 64, 128, 256
    model, w, b = gemm_model(m, n, k, rng)
    # Small activations: with the initial scale of 1 they would all be E4M3 subnormals or zero, so the
    # bound only holds if delayed scaling really scaled them up (448 / amax).
    x = (rng.standard_normal((m, k)) * 1e-3).astype(np.float32)
    x[0, :8] *= 1e-4  # some values deep in E4M3's subnormal range even after scaling
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gemm.onnx")
        onnx.save(model, path)
        y8 = run_tec(args.tec, path, x, tmp, ["--fp8=all", "--fp8-emulate"]).astype(np.float64)
        y8_frozen = run_tec(args.tec, path, x, tmp, ["--fp8=all", "--fp8-emulate"], calibrate=True)
        y32 = run_tec(args.tec, path, x, tmp, ["--fp8=none"]).astype(np.float64)

    xd, wd = x.astype(np.float64), w.astype(np.float64)
    y = xd @ wd.T + b
    sx, sw = E4M3_MAX / np.abs(x).max(), E4M3_MAX / np.abs(w).max()
    ex = np.maximum(U * np.abs(xd), SUBNORMAL_HALF / sx)
    ew = np.maximum(U * np.abs(wd), SUBNORMAL_HALF / sw)
    products = np.abs(xd) @ ew.T + ex @ np.abs(wd).T + ex @ ew.T
    accumulation = (k + 1) * 2.0 ** -24 * ((np.abs(xd) + ex) @ (np.abs(wd) + ew).T)
    bound = products + accumulation

    err8, err32 = np.abs(y8 - y), np.abs(y32 - y)
    ratio = (err8 / bound).max()
    rel = np.linalg.norm(y8 - y) / np.linalg.norm(y)
    print(f"fp8 emulated GEMM {m}x{n}x{k}: max |error| {err8.max():.4g}, max error/bound {ratio:.3f}, "
          f"relative L2 error {rel:.4f} (E4M3 unit roundoff {U})")
    print(f"fp32 plan: max |error| {err32.max():.3g}")
    failures = 0
    if not np.array_equal(y8_frozen, y8.astype(np.float32)):
        print("FAIL: the calibrated plan (frozen scales) differs from the plan calibrated by a warm-up run")
        failures += 1
    if ratio > 1.0:
        print("FAIL: the FP8 error exceeds the derived bound")
        failures += 1
    if err8.max() == 0.0 or err8.max() <= 10 * err32.max():
        print("FAIL: the FP8 plan is as exact as FP32: FP8 was not applied")
        failures += 1
    print(f"{3 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
