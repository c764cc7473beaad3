#!/usr/bin/env python3
"""Compiles each test model with `tec`, runs the plan with `tec run` on seeded inputs, and compares the
outputs with ONNX Runtime's on the same inputs. Also compiles each model without pattern recognition
and fusion and checks that the fused plan agrees with the unfused one within 1e-5. Exits non-zero on
any mismatch."""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

RTOL, ATOL = 1e-4, 1e-5
FUSED_TOLERANCE = 1e-5
UNFUSED = ["--disable-pass=tec-recognize-attention", "--disable-pass=tec-recognize-patterns",
           "--disable-pass=tec-fuse-linear"]


def run_plan(tec, model, plan, flags, out_dir, compile_flags=()):
    subprocess.run([tec, model, "-o", plan, *compile_flags], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([tec, "run", plan, "--iterations", "1", "--warmup", "0", "--output-dir", out_dir] + flags,
                   check=True, stdout=subprocess.DEVNULL)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", required=True)
    parser.add_argument("models", nargs="+")
    args = parser.parse_args()
    failures = checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            name = os.path.splitext(os.path.basename(model))[0]
            plan = os.path.join(tmp, name + ".tecplan")
            session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
            rng = np.random.default_rng(42)
            feeds, flags = {}, []
            for i in session.get_inputs():
                x = rng.standard_normal(i.shape).astype(np.float32)
                path = os.path.join(tmp, f"{name}.{i.name}.npy")
                np.save(path, x)
                feeds[i.name] = x
                flags += ["--input", f"{i.name}={path}"]
            out_dir = os.path.join(tmp, name + ".out")
            unfused_dir = os.path.join(tmp, name + ".unfused")
            run_plan(args.tec, model, plan, flags, out_dir)
            run_plan(args.tec, model, plan + ".unfused", flags, unfused_dir, UNFUSED)
            for o, expected in zip(session.get_outputs(), session.run(None, feeds)):
                got = np.load(os.path.join(out_dir, o.name + ".npy"))
                unfused = np.load(os.path.join(unfused_dir, o.name + ".npy"))
                checks = [("vs onnxruntime", expected, RTOL, ATOL), ("fused vs unfused", unfused, FUSED_TOLERANCE,
                                                                     FUSED_TOLERANCE)]
                for what, reference, rtol, atol in checks:
                    ok = got.shape == reference.shape and np.allclose(got, reference, rtol=rtol, atol=atol)
                    err = np.abs(got - reference).max() if got.shape == reference.shape else float("inf")
                    print(f"{'ok  ' if ok else 'FAIL'} {name}: output {o.name} {got.shape} {what}: "
                          f"max abs error {err:.3g}")
                    failures += not ok
                    checked += 1
    print(f"{checked - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
