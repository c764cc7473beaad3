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

For the bundled MLP the same per-layer bound is propagated: a layer's input already carries an error
bound d from the layers before, so its quantized input is off by at most d + e_x(|a| + d) (and its
scale, 448 / amax, uses an amax within d of the exact one); ReLU passes errors through unchanged
(Lipschitz 1), GELU multiplies them by at most 1.13 (its Lipschitz constant) plus 1e-7 |z| for tec's
erf, accurate to 1.5e-7. The FP8-emulated MLP must stay within the bound at its output.

For the GPT-style block (its four linear layers in FP8; attention's batched MatMuls, LayerNorm and softmax
in FP32) the bound is carried through the other ops with rules that hold for any perturbation within the
bound, not just to first order: sums add bounds; a product of perturbed matrices is off by at most
dA|B| + |A|dB + dA dB; softmax logits each off by at most delta change every probability by a factor in
[e^-2delta, e^2delta]; LayerNorm's centered input moves by at most d + mean(d) and its standard deviation by
at most the RMS of d (triangle inequality), which bounds the normalized output. Float32 rounding of the
non-FP8 ops adds a relative 1e-6.
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


def gelu(z):
    from math import erf
    return 0.5 * z * (1.0 + np.vectorize(erf)(z / np.sqrt(2.0)))


def propagated_bound(x, layers):
    """The exact float64 output and the propagated FP8 error bound for a chain of linear layers."""
    a, d = x.astype(np.float64), np.zeros_like(x, dtype=np.float64)
    for w, b, activation in layers:  # w is [K, N]
        k = w.shape[0]
        amax = np.abs(a).max() + d.max()
        ex = np.maximum(U * (np.abs(a) + d), SUBNORMAL_HALF * amax / E4M3_MAX) + d
        ew = np.maximum(U * np.abs(w), SUBNORMAL_HALF * np.abs(w).max() / E4M3_MAX)
        z = a @ w + b
        dz = (np.abs(a) + ex) @ ew + ex @ np.abs(w)
        dz += (k + 1) * 2.0 ** -24 * ((np.abs(a) + ex) @ (np.abs(w) + ew))
        if activation == "relu":
            a, d = np.maximum(z, 0.0), dz
        elif activation == "gelu":
            a, d = gelu(z), 1.13 * dz + 1e-7 * np.abs(z)
        else:
            a, d = z, dz
    return a, d


def fp8_linear(a, d, w, b):
    """Exact a @ w + b and the error bound of tec's FP8 GEMM on an input known within d (w is [K, N])."""
    k = w.shape[0]
    a2, d2 = a.reshape(-1, k), d.reshape(-1, k)
    amax = np.abs(a2).max() + d2.max()
    ex = np.maximum(U * (np.abs(a2) + d2), SUBNORMAL_HALF * amax / E4M3_MAX) + d2
    ew = np.maximum(U * np.abs(w), SUBNORMAL_HALF * np.abs(w).max() / E4M3_MAX)
    z = a2 @ w + b
    dz = (np.abs(a2) + ex) @ ew + ex @ np.abs(w) + (k + 1) * 2.0 ** -24 * ((np.abs(a2) + ex) @ (np.abs(w) + ew))
    shape = a.shape[:-1] + (w.shape[1],)
    return z.reshape(shape), dz.reshape(shape)


def layer_norm(a, d, gamma, beta, eps=1e-5):
    mu = a.mean(-1, keepdims=True)
    c = a - mu
    s0 = np.sqrt((c * c).mean(-1, keepdims=True))
    sigma = np.sqrt(s0 * s0 + eps)
    e_rms = np.sqrt((d * d).mean(-1, keepdims=True))
    s_lo, s_hi = np.maximum(s0 - e_rms, 0.0), s0 + e_rms
    sig_lo, sig_hi = np.sqrt(s_lo ** 2 + eps), np.sqrt(s_hi ** 2 + eps)
    dinv = np.maximum(1.0 / sig_lo - 1.0 / sigma, 1.0 / sigma - 1.0 / sig_hi)
    dc = d + d.mean(-1, keepdims=True)
    y = c / sigma * gamma + beta
    dy = np.abs(gamma) * (dc / sig_lo + np.abs(c) * dinv) + 1e-6 * np.abs(y)
    return y, dy


def matmul(a, da, b, db):
    k = a.shape[-1]
    y = a @ b
    return y, da @ np.abs(b) + np.abs(a) @ db + da @ db + (k + 1) * 2.0 ** -24 * (np.abs(a) @ np.abs(b))


def softmax(a, d, mask):
    z = np.where(mask, a, -1e9)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    delta = np.where(mask, d, 0.0).max(-1, keepdims=True)
    return p, p * (np.exp(2 * delta) - 1.0) + 1e-6 * p


def gpt_block_bound(x, inits, heads):
    """The exact float64 GPT-style block (tests/models/gen_models.py) and the propagated FP8 bound."""
    bsz, t, dim = x.shape
    hd = dim // heads
    a, d = x.astype(np.float64), np.zeros(x.shape)
    h, dh = layer_norm(a, d, inits["ln1.weight"], inits["ln1.bias"])
    qkv, dqkv = fp8_linear(h, dh, inits["attn.qkv.weight"], inits["attn.qkv.bias"])

    def heads_of(v):
        return v.reshape(bsz, t, heads, hd).transpose(0, 2, 1, 3)

    q, k, v = (heads_of(qkv[..., i * dim:(i + 1) * dim]) for i in range(3))
    dq, dk, dv = (heads_of(dqkv[..., i * dim:(i + 1) * dim]) for i in range(3))
    scores, dscores = matmul(q, dq, k.transpose(0, 1, 3, 2), dk.transpose(0, 1, 3, 2))
    scale = 1.0 / np.sqrt(hd)
    mask = np.tril(np.ones((t, t), dtype=bool))
    p, dp = softmax(scores * scale, dscores * scale + 1e-6 * np.abs(scores * scale), mask)
    ctx, dctx = matmul(p, dp, v, dv)
    merged = ctx.transpose(0, 2, 1, 3).reshape(bsz, t, dim)
    dmerged = dctx.transpose(0, 2, 1, 3).reshape(bsz, t, dim)
    attn, dattn = fp8_linear(merged, dmerged, inits["attn.proj.weight"], inits["attn.proj.bias"])
    r1, dr1 = a + attn, dattn + 1e-6 * np.abs(a + attn)
    h2, dh2 = layer_norm(r1, dr1, inits["ln2.weight"], inits["ln2.bias"])
    z, dz = fp8_linear(h2, dh2, inits["mlp.fc.weight"], inits["mlp.fc.bias"])
    g, dg = gelu(z), 1.13 * dz + 1e-7 * np.abs(z)
    m, dm = fp8_linear(g, dg, inits["mlp.proj.weight"], inits["mlp.proj.bias"])
    return r1 + m, dr1 + dm + 1e-6 * np.abs(r1 + m)


def check_model(tec, path, x, bounded, what):
    """tec's FP8-emulated plan against `bounded(x)` = (exact float64 output, propagated bound); the FP32
    plan must match the float64 reference, so that the bound is about the same model."""
    with tempfile.TemporaryDirectory() as tmp:
        y8 = run_tec(tec, path, x, tmp, ["--fp8=all", "--fp8-emulate"]).astype(np.float64)
        y32 = run_tec(tec, path, x, tmp, ["--fp8=none"]).astype(np.float64)
    y, bound = bounded(x)
    if not np.allclose(y32, y, rtol=1e-5, atol=1e-5):
        print(f"FAIL: the float64 reference of the {what} differs from tec's FP32 plan by {np.abs(y32 - y).max():.3g}")
        return False
    ratio = (np.abs(y8 - y) / bound).max()
    rel = np.linalg.norm(y8 - y) / np.linalg.norm(y)
    print(f"fp8 emulated {what}: max error/propagated bound {ratio:.2e}, relative L2 error {rel:.4f}")
    return ratio <= 1.0 and np.abs(y8 - y).max() > 0


def initializers(path):
    from onnx import numpy_helper as nh
    return {t.name: nh.to_array(t).astype(np.float64) for t in onnx.load(path).graph.initializer}


def check_gpt_block(tec, models_dir):
    path = os.path.join(models_dir, "gpt_block.onnx")
    inits = initializers(path)
    x = np.random.default_rng(13).standard_normal((2, 16, 64)).astype(np.float32)
    return check_model(tec, path, x, lambda v: gpt_block_bound(v, inits, heads=4), "GPT-style block")


def check_mlp(tec, models_dir):
    """The bundled MLP (Gemm transB + Relu, MatMul + Add + Gelu, Gemm transB) against its propagated bound."""
    path = os.path.join(models_dir, "mlp.onnx")
    inits = initializers(path)
    layers = [(inits["fc1.weight"].T, inits["fc1.bias"], "relu"), (inits["fc2.weight"], inits["fc2.bias"], "gelu"),
              (inits["fc3.weight"].T, inits["fc3.bias"], None)]
    x = np.random.default_rng(11).standard_normal((64, 256)).astype(np.float32)
    return check_model(tec, path, x, lambda v: propagated_bound(v, layers), "MLP")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", required=True)
    parser.add_argument("--models", required=True)
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
    if not check_mlp(args.tec, args.models):
        print("FAIL: the FP8-emulated MLP exceeds its propagated bound (or FP8 was not applied)")
        failures += 1
    if not check_gpt_block(args.tec, args.models):
        print("FAIL: the FP8-emulated GPT-style block exceeds its propagated bound (or FP8 was not applied)")
        failures += 1
    print(f"{5 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
