"""Data parallelism end to end, the way the README tells users to run it: `mpirun -np 2 tec train` with a
plan of half the batch against one process with the whole batch, on the same samples. The mean of the two
ranks' gradients is the global batch's gradient, so the losses and the weights agree to rounding (the
sums are ordered differently); every rank ends with the same state (tec checks it by checksum and says
so); ranks given different plans are refused with exit 2; and a rank that hangs or dies ends the run within
--collective-timeout.

Cases: the test MLP (its batch made symbolic) with SGD + momentum and AdamW, FP32 and FP8-emulated
(delayed scaling: the amaxes are max-reduced over the ranks, so the scales agree; each rank's backward is
seeded with 1 / world_size, so its gradients, quantized, are the ones one process computes for its
samples). Batches of 32 and 16, multiples of 16 as FP8 GEMMs need: at 8 the weight-gradient GEMMs would
run in FP32 on the ranks and in FP8 alone, different plans.

Weights are compared element by element (within 1e-6 of each tensor's largest), but AdamW in FP32 in norm:
Adam scales each element's step by that element's own gradient, so an element whose gradient nearly
cancels over the batch moves by about lr whatever its size, and the rounding of that cancellation (the
sums ordered differently over two ranks) moves it differently (PyTorch's DDP alike); its largest elementwise
gap here is ~1e-5 of the largest weight while the norm agrees to ~1e-7.
Skipped (exit 77) where mpirun or tec's MPI plugin is missing."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

from train_reference import checkpoint_params

RTOL = 1e-6


def with_symbolic_batch(source, target):
    """The model with dim 0 of every input and output named `batch`, so that --shape sets it."""
    model = onnx.load(source)
    for value in list(model.graph.input) + list(model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, target)


def mpirun():
    launcher = shutil.which("mpirun")
    if not launcher:
        return None
    command = [launcher, "--oversubscribe", "-np", "2"]
    if os.geteuid() == 0:  # CI runs as root; Open MPI refuses that unless told
        command.insert(1, "--allow-run-as-root")
    return command


def run(command, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", required=True)
    parser.add_argument("--models", required=True)
    args = parser.parse_args()
    launcher = mpirun()
    if not launcher:
        print("skipped: no mpirun (./dev installs openmpi-bin)")
        return 77
    doctor = run([args.tec, "doctor"]).stdout
    if "MPI plugin" in doctor and "built without MPI" in doctor:
        print("skipped: this tec was built without MPI")
        return 77
    work = tempfile.mkdtemp(prefix="tec-dp-")
    ok = True

    def check(passed, what):
        nonlocal ok
        print(f"{'ok  ' if passed else 'FAIL'} {what}")
        ok = ok and passed

    rng = np.random.default_rng(11)
    mlp = os.path.join(work, "mlp.onnx")
    with_symbolic_batch(os.path.join(args.models, "mlp.onnx"), mlp)
    data = {"x": rng.standard_normal((256, 256)).astype(np.float32),
            "y": rng.standard_normal((256, 16)).astype(np.float32)}
    for name, array in data.items():
        np.save(os.path.join(work, name + ".npy"), array)

    cases = [("mlp sgd+momentum", ["--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9"], False),
             ("mlp adamw", ["--optimizer", "adamw", "--lr", "1e-4", "--weight-decay", "0.01"], True),
             ("mlp adamw fp8-emulated", ["--optimizer", "adamw", "--lr", "1e-4", "--fp8=all", "--fp8-emulate"], False)]
    for label, flags, adam_fp32 in cases:
        plans = {}
        for batch in (32, 16):
            plans[batch] = os.path.join(work, f"{label.replace(' ', '_')}_{batch}.tecplan")
            compiled = run([args.tec, mlp, "--train", "--target", "cpu", "--shape", f"batch={batch}", "-o", plans[batch]]
                           + flags)
            if compiled.returncode != 0:
                check(False, f"{label}: compiles at batch {batch}\n{compiled.stderr}")
                break
        else:
            outcomes = {}
            for ranks, batch in ((1, 32), (2, 16)):
                folder = os.path.join(work, f"{label.replace(' ', '_')}_{ranks}")
                command = [args.tec, "train", plans[batch], "--input", "x=" + os.path.join(work, "x.npy"),
                           "--target", "y=" + os.path.join(work, "y.npy"), "--steps", "20", "--threads", "1",
                           "--report", folder + ".json", "--checkpoint-dir", folder]
                done = run((launcher if ranks > 1 else []) + command)
                if done.returncode != 0:
                    check(False, f"{label}: {ranks} rank(s) train\n{done.stdout}\n{done.stderr}")
                    break
                outcomes[ranks] = (json.load(open(folder + ".json"))["loss"],
                                   checkpoint_params(os.path.join(folder, "step-20")), done.stdout)
            else:
                one, two = outcomes[1], outcomes[2]
                loss_gap = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(one[0], two[0]))
                if adam_fp32:  # see the module's docstring: in norm
                    weight_gap = max(float(np.linalg.norm(one[1][k] - two[1][k])) / max(float(np.linalg.norm(one[1][k])), 1e-30)
                                     for k in one[1])
                    measure = "in norm"
                else:
                    weight_gap = max(float(np.max(np.abs(one[1][k] - two[1][k]))) / max(float(np.max(np.abs(one[1][k]))), 1e-30)
                                     for k in one[1])
                    measure = "of their max"
                check(len(one[0]) == len(two[0]) == 20 and loss_gap <= RTOL,
                      f"{label}: 2 ranks x batch 16 = 1 process x batch 32, losses over 20 steps within {loss_gap:.2e} relative")
                check(weight_gap <= RTOL, f"{label}: final weights within {weight_gap:.2e} {measure}")
                check("the same state on all 2 ranks" in two[2], f"{label}: tec reports the same state on both ranks")

    # Resume under mpirun: 10 steps, then 10 more from the checkpoint rank 0 wrote, bit for bit as 20 straight.
    straight = os.path.join(work, "mlp_adamw_2")  # the 20-step run above
    split = os.path.join(work, "resumed")
    plan = os.path.join(work, "mlp_adamw_16.tecplan")
    data_flags = ["--input", "x=" + os.path.join(work, "x.npy"), "--target", "y=" + os.path.join(work, "y.npy"),
                  "--threads", "1", "--checkpoint-dir", split]
    first = run(launcher + [args.tec, "train", plan, "--steps", "10"] + data_flags)
    second = run(launcher + [args.tec, "train", plan, "--steps", "20", "--resume", split] + data_flags)
    if first.returncode == 0 and second.returncode == 0 and os.path.isdir(os.path.join(straight, "step-20")):
        a, b = checkpoint_params(os.path.join(straight, "step-20")), checkpoint_params(os.path.join(split, "step-20"))
        check(all(np.array_equal(a[k], b[k]) for k in a), "2 ranks resumed at step 10 end at step 20 bit for bit as straight")
    else:
        check(False, f"2 ranks resume (exit {first.returncode}, {second.returncode})\n{first.stderr}{second.stderr}")

    # tec.Trainer in a user's script under mpirun: each rank feeds its share; the losses are one process's.
    probe = run([sys.executable, "-c", "import tec"])
    if probe.returncode != 0:
        print("skip the Python package is not importable here (PYTHONPATH)")
    else:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_parallel_trainer.py")
        x, y = os.path.join(work, "x.npy"), os.path.join(work, "y.npy")
        two = run(launcher + [sys.executable, script, plan, x, y, "16", "10"])
        one = run([sys.executable, script, os.path.join(work, "mlp_adamw_32.tecplan"), x, y, "32", "10"])
        losses = lambda out: [float(v) for v in out.split("losses")[-1].split()] if "losses" in out else []
        l2, l1 = losses(two.stdout), losses(one.stdout)
        agree = len(l1) == len(l2) == 10 and "world 2" in two.stdout and \
            max(abs(p - q) / abs(p) for p, q in zip(l1, l2)) <= RTOL
        check(agree, "tec.Trainer under mpirun (rank, world_size) trains as one process" +
              ("" if agree else f"\n{two.stdout}{two.stderr}{one.stdout}{one.stderr}"))

    # Ranks with different plans: refused at start, exit 2, naming the rank.
    a = os.path.join(work, "mlp_sgd+momentum_16.tecplan")
    b = os.path.join(work, "mlp_adamw_16.tecplan")
    common = ["--input", "x=" + os.path.join(work, "x.npy"), "--target", "y=" + os.path.join(work, "y.npy"),
              "--steps", "2", "--threads", "1"]
    mixed = run(launcher[:-2] + ["-np", "1", args.tec, "train", a] + common + [":", "-np", "1", args.tec, "train", b]
                + common)
    check(mixed.returncode == 2 and "rank 1" in mixed.stderr and "differs from rank 0's plan" in mixed.stderr,
          f"ranks given different plans are refused with exit 2 naming the rank (exit {mixed.returncode})")

    # A rank that hangs (stopped by SIGSTOP) or is killed mid-run ends the other with a clear error within
    # --collective-timeout plus start-up, never a hang: the rank's shell stops or kills the tec it became.
    endless = f"exec {args.tec} train {a} " + " ".join(common[:-4]) + " --steps 100000000 --threads 1 --collective-timeout 3"
    for signal, expect in (("STOP", "not every rank joined within 3 s"), ("KILL", "exited on signal 9")):
        started = time.monotonic()
        ended = run(launcher + ["sh", "-c", f'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then (sleep 5; kill -{signal} $$) & fi; '
                                + endless])
        took = time.monotonic() - started
        check(ended.returncode != 0 and expect in ended.stderr + ended.stdout and took < 60,
              f"a rank that {'hangs' if signal == 'STOP' else 'is killed'} mid-run ends the run in {took:.0f} s "
              f"(exit {ended.returncode})" + ("" if expect in ended.stderr + ended.stdout else f"\n{ended.stderr}"))

    shutil.rmtree(work, ignore_errors=True)
    print("data parallel: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
