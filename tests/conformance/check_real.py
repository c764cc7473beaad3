#!/usr/bin/env python3
"""Every real export in tests/models/real (see export_real.py) through tec: compile (binding a dynamic
export's symbolic dims with --shape), run on the CPU, and compare with ONNX Runtime's committed outputs
(relative 1e-4, with an absolute floor of 1e-5 for values near zero). Prints one line per export; any
compile error, run error or mismatch fails."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

RTOL, ATOL = 1e-4, 1e-5


def check(tec, folder, entry, work):
    base = os.path.join(work, entry["model"][:-5])
    plan = base + ".tecplan"
    cmd = [tec, os.path.join(folder, entry["model"]), "-o", plan, "--target", "cpu"]
    if entry["shape"]:
        cmd += ["--shape", entry["shape"]]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        return "compile failed: " + r.stderr.strip().splitlines()[0] if r.stderr.strip() else "compile failed"
    inputs = np.load(os.path.join(folder, entry["inputs"]))
    args = []
    for name in inputs.files:
        path = f"{base}_{name}.npy"
        np.save(path, inputs[name])
        args += ["--input", f"{name}={path}"]
    outputs = base + "_out"
    r = subprocess.run([tec, "run", plan, "--output-dir", outputs, "--threads", "1"] + args, capture_output=True,
                       text=True)
    if r.returncode:
        return "run failed: " + r.stderr.strip()
    reference = np.load(os.path.join(folder, entry["reference"]))
    worst = 0.0
    for name in reference.files:
        want = reference[name]
        got = np.load(os.path.join(outputs, name + ".npy"))
        if got.shape != want.shape:
            return f"output {name}: shape {got.shape}, ONNX Runtime's {want.shape}"
        excess = np.abs(got - want) / (ATOL + RTOL * np.abs(want))
        worst = max(worst, float(excess.max()))
        if worst > 1.0:
            i = np.unravel_index(np.argmax(excess), want.shape)
            return f"output {name}{list(i)}: {got[i]!r} vs ONNX Runtime's {want[i]!r}"
    return f"ok (worst error {worst:.2f} of the tolerance)"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", required=True)
    parser.add_argument("--models", required=True, help="the folder export_real.py wrote")
    args = parser.parse_args()
    with open(os.path.join(args.models, "manifest.json")) as f:
        manifest = json.load(f)
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        for entry in manifest:
            result = check(args.tec, args.models, entry, work)
            failures += not result.startswith("ok")
            print(f"{entry['arch']:10s} {entry['form']:15s} {result}")
    print(f"{len(manifest) - failures} of {len(manifest)} exports compile and match ONNX Runtime")
    return 1 if failures or not manifest else 0


if __name__ == "__main__":
    sys.exit(main())
