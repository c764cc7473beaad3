#!/usr/bin/env python3
"""The MLP's training step against a numpy reference: forward (Gemm+Relu, MatMul+Add+Gelu, Gemm), MSE,
backward and AdamW (bias-corrected moments, decoupled weight decay, as torch.optim.AdamW), in float64.
tec compiles the model with --train, runs 3 steps with `tec train` over 3 seeded batches and checkpoints;
every param in the checkpoint must match the reference within 1e-5 relative (to the param's largest
magnitude). Also: the loss per step matches, and resuming from a checkpoint continues bit for bit.

eps is 1e-6, not torch's default 1e-8: for a gradient element much smaller than eps, Adam's first update
is about lr * g / eps, so float32 rounding of g (tec computes in float32, the reference in float64) is
amplified by lr / eps. At 1e-8 that is 1e5 and elements with |g| ~ 1e-9 differ by 1e-4 relative - the
conditioning of the update, not an error in the step; at 1e-6 the comparison is meaningful at 1e-5.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from math import erf, pi, sqrt

import numpy as np
import onnx
from onnx import numpy_helper

LR, BETA1, BETA2, EPS, WD = 1e-3, 0.9, 0.999, 1e-6, 0.01
_erf = np.vectorize(erf)


def gelu(z):
    return 0.5 * z * (1.0 + _erf(z / sqrt(2.0)))


def gelu_grad(z):
    return 0.5 * (1.0 + _erf(z / sqrt(2.0))) + z * np.exp(-0.5 * z * z) / sqrt(2.0 * pi)


def step(p, x, y):
    """Loss and gradients of the MLP (weights as the ONNX model stores them)."""
    z1 = x @ p["fc1.weight"].T + p["fc1.bias"]
    a1 = np.maximum(z1, 0.0)
    z2 = a1 @ p["fc2.weight"] + p["fc2.bias"]
    a2 = gelu(z2)
    out = a2 @ p["fc3.weight"].T + p["fc3.bias"]
    diff = out - y
    loss = np.mean(diff * diff)
    d_out = 2.0 * diff / diff.size
    g = {"fc3.weight": d_out.T @ a2, "fc3.bias": d_out.sum(0)}
    d_z2 = (d_out @ p["fc3.weight"]) * gelu_grad(z2)
    g["fc2.weight"], g["fc2.bias"] = a1.T @ d_z2, d_z2.sum(0)
    d_z1 = (d_z2 @ p["fc2.weight"].T) * (z1 > 0)
    g["fc1.weight"], g["fc1.bias"] = d_z1.T @ x, d_z1.sum(0)
    return loss, g


def adamw(p, g, m, v, t):
    for k in p:
        m[k] = BETA1 * m[k] + (1 - BETA1) * g[k]
        v[k] = BETA2 * v[k] + (1 - BETA2) * g[k] * g[k]
        m_hat, v_hat = m[k] / (1 - BETA1 ** t), v[k] / (1 - BETA2 ** t)
        p[k] = p[k] - LR * (m_hat / (np.sqrt(v_hat) + EPS) + WD * p[k])


def check_losses(tec, model_path):
    """The first step's loss of each loss function equals numpy's on ONNX Runtime's outputs."""
    import onnxruntime as ort
    rng = np.random.default_rng(9)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    out = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0].astype(np.float64)
    targets = {"mse": rng.standard_normal((64, 16)).astype(np.float32),
               "l1": rng.standard_normal((64, 16)).astype(np.float32),
               "cross-entropy": rng.integers(0, 16, (64,)).astype(np.int64)}
    logp = out - out.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    expected = {"mse": np.mean((out - targets["mse"]) ** 2), "l1": np.mean(np.abs(out - targets["l1"])),
                "cross-entropy": -np.mean(logp[np.arange(64), targets["cross-entropy"]])}
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "x.npy"), x)
        for loss, target in targets.items():
            plan = os.path.join(tmp, loss + ".tecplan")
            np.save(os.path.join(tmp, "y.npy"), target)
            subprocess.run([tec, model_path, "-o", plan, "--target", "cpu", "--train", "--loss", loss], check=True,
                           stdout=subprocess.DEVNULL)
            report = os.path.join(tmp, loss + ".json")
            subprocess.run([tec, "train", plan, "--input", f"x={tmp}/x.npy", "--target", f"y={tmp}/y.npy", "--steps",
                            "1", "--report", report], check=True, stdout=subprocess.DEVNULL)
            with open(report) as f:
                got = json.load(f)["loss"][0]
            rel = abs(got - expected[loss]) / abs(expected[loss])
            print(f"{'ok  ' if rel <= 1e-5 else 'FAIL'} {loss} loss {got:.6f} vs numpy on ONNX Runtime's output "
                  f"{expected[loss]:.6f} (relative {rel:.1e})")
            ok = ok and rel <= 1e-5
    return ok


def check_fp8_training(tec, model_path, steps=30):
    """FP8-emulated training (HYBRID: fprop E4M3, dgrad/wgrad E5M2 x E4M3, delayed scaling) ends within 5%
    of FP32 training's final loss, and FP8 really ran (the losses differ)."""
    rng = np.random.default_rng(21)
    x = rng.standard_normal((4 * 64, 256)).astype(np.float32)
    y = rng.standard_normal((4 * 64, 16)).astype(np.float32)
    final = {}
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "x.npy"), x)
        np.save(os.path.join(tmp, "y.npy"), y)
        for name, flags in [("fp32", []), ("fp8", ["--fp8=all", "--fp8-emulate"])]:
            plan = os.path.join(tmp, name + ".tecplan")
            subprocess.run([tec, model_path, "-o", plan, "--target", "cpu", "--train", "--lr", "1e-3", *flags],
                           check=True, stdout=subprocess.DEVNULL)
            report = os.path.join(tmp, name + ".json")
            subprocess.run([tec, "train", plan, "--input", f"x={tmp}/x.npy", "--target", f"y={tmp}/y.npy", "--steps",
                            str(steps), "--report", report], check=True, stdout=subprocess.DEVNULL)
            with open(report) as f:
                final[name] = json.load(f)["loss"][-1]
    rel = abs(final["fp8"] - final["fp32"]) / final["fp32"]
    ok = rel <= 0.05 and final["fp8"] != final["fp32"]
    print(f"{'ok  ' if ok else 'FAIL'} FP8-emulated training: final loss {final['fp8']:.5f} vs FP32 {final['fp32']:.5f} "
          f"after {steps} steps ({100 * rel:.2f}% apart, 5% allowed)")
    return ok


def check_accumulation(tec, model_path, params):
    """--accumulate 4 at batch 64 equals the reference's AdamW over batches of 256 (the mean gradient of the 4
    micro-batches is the 256-row batch's, the loss being a mean); the 3 steps before an update leave the params
    exactly as they were; a run resumed in the middle of a window ends bit for bit where an uninterrupted one
    does."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((8 * 64, 256)).astype(np.float32)
    y = rng.standard_normal((8 * 64, 16)).astype(np.float32)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "accumulate.tecplan")
        subprocess.run([tec, model_path, "-o", plan, "--target", "cpu", "--train", "--optimizer", "adamw", "--lr",
                        str(LR), "--eps", str(EPS), "--weight-decay", str(WD), "--accumulate", "4"], check=True,
                       stdout=subprocess.DEVNULL)
        np.save(os.path.join(tmp, "x.npy"), x)
        np.save(os.path.join(tmp, "y.npy"), y)
        data = ["--input", f"x={tmp}/x.npy", "--target", f"y={tmp}/y.npy"]
        full, part = os.path.join(tmp, "full"), os.path.join(tmp, "part")
        said = subprocess.run([tec, "train", plan, *data, "--steps", "8", "--checkpoint-dir", full,
                               "--checkpoint-every", "3"], check=True, capture_output=True, text=True).stdout
        subprocess.run([tec, "train", plan, *data, "--steps", "6", "--checkpoint-dir", part], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([tec, "train", plan, *data, "--steps", "8", "--resume", part, "--checkpoint-dir", part],
                       check=True, stdout=subprocess.DEVNULL)
        before_update = checkpoint_params(os.path.join(full, "step-3"))
        got, resumed = checkpoint_params(os.path.join(full, "step-8")), checkpoint_params(os.path.join(part, "step-8"))
    reference = {k: v.copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v2 = {k: np.zeros_like(v) for k, v in params.items()}
    for t in range(1, 3):
        batch = slice((t - 1) * 256, t * 256)
        _, grads = step(reference, x[batch].astype(np.float64), y[batch].astype(np.float64))
        adamw(reference, grads, m, v2, t)
    rel = max(np.abs(got[k] - reference[k]).max() / np.abs(reference[k]).max() for k in params)
    unmoved = all(np.array_equal(before_update[k], params[k].astype(np.float32)) for k in params)
    exact = all(np.array_equal(got[k], resumed[k]) for k in params)
    for passed, what in [(rel <= 1e-5, f"--accumulate 4: 8 steps of 64 equal 2 AdamW steps of 256 rows "
                                       f"(max relative difference {rel:.2e})"),
                         (unmoved, "--accumulate 4: the params after step 3 are the initial ones, bit for bit"),
                         (exact, "--accumulate 4: resumed at step 6 (mid-window), step 8 bit for bit equal"),
                         ("an optimizer update every 4" in said, "tec train says it accumulates")]:
        print(f"{'ok  ' if passed else 'FAIL'} {what}")
        ok = ok and passed
    return ok


def checkpoint_params(step_folder):
    """The params of a checkpoint (its model.safetensors), read as the format describes it: an 8-byte
    little-endian header size, a JSON header of dtype, shape and byte range, the data."""
    raw = open(os.path.join(step_folder, "model.safetensors"), "rb").read()
    size = int.from_bytes(raw[:8], "little")
    header, data = json.loads(raw[8:8 + size]), raw[8 + size:]
    return {name: np.frombuffer(data[e["data_offsets"][0]:e["data_offsets"][1]], dtype=np.float32).reshape(e["shape"])
            for name, e in header.items() if name != "__metadata__"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", required=True)
    parser.add_argument("--models", required=True)
    args = parser.parse_args()
    model_path = os.path.join(args.models, "mlp.onnx")
    params = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in onnx.load(model_path).graph.initializer}
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3 * 64, 256)).astype(np.float32)
    y = rng.standard_normal((3 * 64, 16)).astype(np.float32)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "mlp.tecplan")
        subprocess.run([args.tec, model_path, "-o", plan, "--target", "cpu", "--train", "--optimizer", "adamw",
                        "--lr", str(LR), "--eps", str(EPS), "--weight-decay", str(WD)], check=True, stdout=subprocess.DEVNULL)
        np.save(os.path.join(tmp, "x.npy"), x)
        np.save(os.path.join(tmp, "y.npy"), y)
        data = ["--input", f"x={tmp}/x.npy", "--target", f"y={tmp}/y.npy"]
        full, part = os.path.join(tmp, "full"), os.path.join(tmp, "part")
        subprocess.run([args.tec, "train", plan, *data, "--steps", "3", "--checkpoint-dir", full, "--report",
                        os.path.join(tmp, "report.json")], check=True, stdout=subprocess.DEVNULL)
        # Interrupted after 2 steps, then resumed for the third: must equal the uninterrupted run exactly.
        subprocess.run([args.tec, "train", plan, *data, "--steps", "2", "--checkpoint-dir", part], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([args.tec, "train", plan, *data, "--steps", "3", "--resume", part, "--checkpoint-dir", part],
                       check=True, stdout=subprocess.DEVNULL)
        # A crash while the third checkpoint is being written leaves the second one loadable.
        crashed = os.path.join(tmp, "crashed")
        env = dict(os.environ, TEC_TEST_CRASH_IN_CHECKPOINT="1")  # after model.safetensors, before the rest
        run = subprocess.run([args.tec, "train", plan, *data, "--steps", "2", "--checkpoint-dir", crashed],
                             stdout=subprocess.DEVNULL)
        assert run.returncode == 0
        run = subprocess.run([args.tec, "train", plan, *data, "--steps", "3", "--resume", crashed, "--checkpoint-dir",
                              crashed], env=env, stdout=subprocess.DEVNULL)
        crash_ok = run.returncode == 86 and open(os.path.join(crashed, "latest")).read().strip() == "step-2"
        subprocess.run([args.tec, "train", plan, *data, "--steps", "3", "--resume", crashed, "--checkpoint-dir",
                        crashed], check=True, stdout=subprocess.DEVNULL)
        after_crash = checkpoint_params(os.path.join(crashed, "step-3"))
        # tec export: the trained weights back into ONNX, for ONNX Runtime.
        exported = os.path.join(tmp, "trained.onnx")
        subprocess.run([args.tec, "export", plan, "--checkpoint", full, "-o", exported], check=True,
                       stdout=subprocess.DEVNULL)
        import onnxruntime as ort
        probe = rng.standard_normal((64, 256)).astype(np.float32)
        exported_out = ort.InferenceSession(exported, providers=["CPUExecutionProvider"]).run(None, {"x": probe})[0]
        with open(os.path.join(tmp, "report.json")) as f:
            tec_losses = json.load(f)["loss"]
        got = checkpoint_params(os.path.join(full, "step-3"))
        resumed = checkpoint_params(os.path.join(part, "step-3"))

    m = {k: np.zeros_like(v) for k, v in params.items()}
    v2 = {k: np.zeros_like(v) for k, v in params.items()}
    losses = []
    for t in range(1, 4):
        batch = slice((t - 1) * 64, t * 64)
        loss, grads = step(params, x[batch].astype(np.float64), y[batch].astype(np.float64))
        losses.append(loss)
        adamw(params, grads, m, v2, t)
    for k in params:
        rel = np.abs(got[k] - params[k]).max() / np.abs(params[k]).max()
        ok = rel <= 1e-5
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {k}: max |tec - numpy| / max |param| = {rel:.2e} after 3 AdamW steps")
    loss_rel = max(abs(a - b) / abs(b) for a, b in zip(tec_losses, losses))
    print(f"{'ok  ' if loss_rel <= 1e-5 else 'FAIL'} losses {['%.6f' % l for l in tec_losses]}, "
          f"max relative difference {loss_rel:.2e}")
    failures += loss_rel > 1e-5
    exact = all(np.array_equal(got[k], resumed[k]) for k in params)
    print(f"{'ok  ' if exact else 'FAIL'} resumed after 2 steps: params after step 3 bit for bit equal")
    failures += not exact
    recovered = crash_ok and all(np.array_equal(got[k], after_crash[k]) for k in params)
    print(f"{'ok  ' if recovered else 'FAIL'} a crash while writing checkpoint 3 left checkpoint 2 loadable, "
          "and resuming from it reaches the same step-3 params")
    failures += not recovered
    # The exported model, run by ONNX Runtime, computes the reference forward with the reference's params.
    z1 = probe @ params["fc1.weight"].T + params["fc1.bias"]
    z2 = np.maximum(z1, 0.0) @ params["fc2.weight"] + params["fc2.bias"]
    expected_out = gelu(z2) @ params["fc3.weight"].T + params["fc3.bias"]
    export_ok = np.allclose(exported_out, expected_out, rtol=1e-4, atol=1e-4)
    print(f"{'ok  ' if export_ok else 'FAIL'} tec export: ONNX Runtime on the exported model matches the reference "
          f"(max abs error {np.abs(exported_out - expected_out).max():.2e})")
    failures += not export_ok
    loss_ok = check_losses(args.tec, model_path)
    failures += not loss_ok
    fp8_ok = check_fp8_training(args.tec, model_path)
    failures += not fp8_ok
    accumulation_ok = check_accumulation(args.tec, model_path,
                                         {t.name: numpy_helper.to_array(t).astype(np.float64)
                                          for t in onnx.load(model_path).graph.initializer})
    failures += not accumulation_ok
    checks = len(params) + 7
    print(f"{checks - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
