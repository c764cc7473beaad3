#!/usr/bin/env python3
"""A plan's parameters cost their memory once (issue 32, item 7): the peak resident memory of `tec run` and
of `tec train` on a generated model of 2 GiB of parameters (8 Gemms of 8192 x 8192, batch 8) stays within
1.1 x (parameters + arena), the arena as `tec inspect --json` gives it. The plan's data section is mapped
from the file; what the backend copies at prepare (weights packed for the GEMM, the training state's initial
values) lets the file's pages go as soon as it is copied, so the mapped bytes and their copies are never
both resident. The peak is the child's ru_maxrss, which counts mapped file pages it touched; the cache of GEMM choices starts
empty, so prepare also measures the libraries on these shapes, as on a new machine.

Also checks the answers: inference's output against NumPy on the same weights, and training's first loss.
Skipped (exit 77) where the machine has less than 14 GiB of memory available or 9 GiB of disk for the
model and its plans."""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LAYERS, WIDTH, BATCH = 8, 8192, 8
BOUND = 1.1


def available_memory():
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) * 1024


def weight(layer):
    """A cheap, non-constant weight (a splat would be folded): small values in a pattern per layer."""
    values = (np.arange(WIDTH * WIDTH, dtype=np.int64) * (layer + 3)) % 127
    return ((values.astype(np.float32) - 63.0) * (1.0 / (63.0 * WIDTH))).reshape(WIDTH, WIDTH)


def make_model(folder):
    """Gemms as torch.nn.Linear exports them (transB=1: the weight stored [out, in])."""
    nodes, inits, previous = [], [], "x"
    for layer in range(LAYERS):
        inits.append(numpy_helper.from_array(weight(layer).T.copy(), f"w{layer}"))
        nodes.append(helper.make_node("Gemm", [previous, f"w{layer}"], [f"h{layer}"], name=f"gemm{layer}", transB=1))
        previous = f"h{layer}"
    graph = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, WIDTH])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [BATCH, WIDTH])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(folder, "wide.onnx")
    onnx.save(model, path, save_as_external_data=True, location="wide.bin")
    return path


def peak_rss(command, env):
    """The peak resident bytes of `command`, run alone in a child of a fresh Python (RUSAGE_CHILDREN)."""
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024); sys.exit(r.returncode)")
    done = subprocess.run([sys.executable, "-c", probe] + command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed (exit {done.returncode}):\n{done.stderr}")
    return int(done.stdout.strip().splitlines()[-1])


def arena_bytes(tec, plan, kind):
    info = json.loads(subprocess.run([tec, "inspect", plan, "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    variants = [v for v in info["variants"] if (v.get("kind") or "inference") == kind] or info["variants"]
    return int(variants[-1]["arenaBytes"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", required=True)
    args = parser.parse_args()
    params = LAYERS * WIDTH * WIDTH * 4
    if available_memory() < 14 << 30:
        print(f"skipped: {available_memory() / 2**30:.1f} GiB of memory available, the check needs 14")
        return 77
    work = tempfile.mkdtemp(prefix="tec-peak-")
    try:
        if shutil.disk_usage(work).free < 9 << 30:
            print("skipped: less than 9 GiB of disk for the model and its plans")
            return 77
        model = make_model(work)
        rng = np.random.default_rng(5)
        x = rng.standard_normal((BATCH, WIDTH)).astype(np.float32)
        y = rng.standard_normal((BATCH, WIDTH)).astype(np.float32)
        for name, array in (("x", x), ("y", y)):
            np.save(os.path.join(work, name + ".npy"), array)
        run_plan, train_plan = os.path.join(work, "run.tecplan"), os.path.join(work, "train.tecplan")
        subprocess.run([args.tec, model, "--target", "cpu", "-o", run_plan], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([args.tec, model, "--target", "cpu", "--train", "--optimizer", "sgd", "--lr", "1e-3", "-o",
                        train_plan], check=True, stdout=subprocess.DEVNULL)
        os.remove(os.path.join(work, "wide.bin"))  # the plans hold the weights now

        ok = True
        # An empty cache of GEMM choices, as on a new machine: prepare measures the libraries on these shapes.
        fresh = dict(os.environ, TEC_CACHE_DIR=os.path.join(work, "cache"))
        output = os.path.join(work, "out")
        peak = peak_rss([args.tec, "run", run_plan, "--input", "x=" + os.path.join(work, "x.npy"), "--threads", "2",
                         "--output-dir", output], fresh)
        arena = arena_bytes(args.tec, run_plan, "inference")
        ratio = peak / (params + arena)
        print(f"{'ok  ' if ratio <= BOUND else 'FAIL'} tec run: peak RSS {peak / 2**30:.2f} GiB for params "
              f"{params / 2**30:.2f} GiB + arena {arena / 2**20:.1f} MiB: {ratio:.3f} x (bound {BOUND})")
        ok = ok and ratio <= BOUND
        expected = x.astype(np.float64)
        for layer in range(LAYERS):
            expected = expected @ weight(layer).astype(np.float64)
        got = np.load(os.path.join(output, f"h{LAYERS - 1}.npy"))
        gap = float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))
        print(f"{'ok  ' if gap <= 1e-4 else 'FAIL'} tec run's output against NumPy (float64): {gap:.1e} of its max")
        ok = ok and gap <= 1e-4

        report = os.path.join(work, "train.json")
        peak = peak_rss([args.tec, "train", train_plan, "--input", "x=" + os.path.join(work, "x.npy"), "--target",
                         f"h{LAYERS - 1}=" + os.path.join(work, "y.npy"), "--steps", "1", "--threads", "2",
                         "--report", report], fresh)
        arena = arena_bytes(args.tec, train_plan, "train")
        ratio = peak / arena  # training's params are state, in the arena
        print(f"{'ok  ' if ratio <= BOUND else 'FAIL'} tec train: peak RSS {peak / 2**30:.2f} GiB for an arena of "
              f"{arena / 2**30:.2f} GiB (params {params / 2**30:.2f} GiB in it): {ratio:.3f} x (bound {BOUND})")
        ok = ok and ratio <= BOUND
        loss = json.load(open(report))["loss"][0]
        reference = float(np.mean((expected - y.astype(np.float64)) ** 2))
        close = abs(loss - reference) <= 1e-4 * abs(reference)
        print(f"{'ok  ' if close else 'FAIL'} tec train's first loss {loss:.6g} against NumPy's {reference:.6g}")
        ok = ok and close
        print("peak memory: " + ("all checks passed" if ok else "FAILED"))
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
