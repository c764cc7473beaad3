"""Data parallelism end to end, the way the README tells users to run it: `mpirun -np 2 tec train` with a
plan of half the batch against one process with the whole batch, on the same samples. The mean of the two
ranks' gradients is the global batch's gradient, so the losses and the weights agree to rounding (the
sums are ordered differently); every rank ends with the same state (tec checks it by checksum and says
so); ranks given different plans are refused with exit 2; and a rank that hangs or dies ends the run within
--collective-timeout.

Cases: the test MLP (its batch made symbolic) and the GPT block (tests/models/gen_models.py, exported at each
batch) with SGD + momentum and AdamW, FP32 and FP8-emulated (delayed scaling: the amaxes are max-reduced
over the ranks, so the scales agree; each rank's backward is seeded with 1 / world_size, so its gradients,
quantized, are the ones one process computes for its samples), and ZeRO-1 (--shard-optimizer 2), which
must equal the unsharded run and halve the optimizer state per rank. The MLP's batches are 32 and 16 and
the block's 4 and 2 sequences of 16 tokens, multiples of 16 rows as FP8 GEMMs need: at 8 rows the
weight-gradient GEMMs would run in FP32 on the ranks and in FP8 alone, different plans.

FP8: the two summation orders' ~1e-7 differences eventually put a value on the other side of an FP8 rounding
boundary (a step of 1/16 of it), and from then on the runs part by ~1e-3 (when depends on the CPU's GEMM
kernels: on one machine no flip within 20 steps, on another at step 7). So the losses agree to 1e-6 over the
first 5 steps, to 2e-3 over 20, and the final weights' gap stays under a tenth of how far they moved.

Weights are compared element by element (within 1e-6 of each tensor's largest), but AdamW in FP32 in norm:
Adam scales each element's step by that element's own gradient, so an element whose gradient nearly
cancels over the batch moves by about lr whatever its size, and the rounding of that cancellation (the
sums ordered differently over two ranks) moves it differently (PyTorch's DDP alike); its largest elementwise
gap here is ~1e-5 of the largest weight while the norm agrees to ~1e-7. The GPT block's key bias (the middle
third of attn.qkv.bias) has no gradient at all in exact arithmetic (a bias added to every key shifts a
query's scores by one constant, which softmax ignores): Adam scales the rounding noise it gets into steps
that differ between any two summation orders, so it is checked on its own (it moves by noise only, far less
than a gradient moves a weight) and left out of the comparison.
Distillation (`--teacher`): each step's inputs are drawn for the global batch and each rank labels its
slice, so 2 ranks distil as one process with the whole batch does.
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
import onnx.numpy_helper

from train_reference import checkpoint_params

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import gen_models  # noqa: E402  (tests/models: the GPT block at the batch each run needs)

RTOL = 1e-6
FP8_LOSS_RTOL = 2e-3  # FP8 cases over 20 steps: one rounding flip moves the loss ~1e-3
FP8_MOTION_RTOL = 0.1  # FP8 cases: the final weights' gap, of how far training moved them


def with_symbolic_batch(source, target):
    """The model with dim 0 of every input and output named `batch`, so that --shape sets it."""
    model = onnx.load(source)
    for value in list(model.graph.input) + list(model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, target)


def optimizer_bytes(per_rank_line):
    """The optimizer state per rank of `tec inspect`'s "per rank: ..., optimizer state 1.5 MiB (...)", in bytes."""
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    words = per_rank_line.split("optimizer state ")[-1].split()
    return float(words[0]) * units.get(words[1].rstrip(",("), 0) if len(words) > 1 else 0.0


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

    # Each model at the global batch (one process) and at half of it (each of 2 ranks), with its data.
    rng = np.random.default_rng(11)
    models = {"mlp": {}, "gpt block": {}}
    for batch in (32, 16):
        models["mlp"][batch] = os.path.join(work, f"mlp_{batch}.onnx")
        with_symbolic_batch(os.path.join(args.models, "mlp.onnx"), models["mlp"][batch])
    for batch in (4, 2):  # the block's reshapes name its batch: one export per batch, the same weights
        models["gpt block"][batch] = os.path.join(work, f"gpt_block_{batch}.onnx")
        onnx.save(gen_models.gpt_block(decomposed=False, batch=batch), models["gpt block"][batch])
    samples = {"mlp": ((256, 256), (256, 16)), "gpt block": ((32, 16, 64), (32, 16, 64))}
    for model, (x_shape, y_shape) in samples.items():
        for name, shape in (("x", x_shape), ("y", y_shape)):
            np.save(os.path.join(work, f"{model.replace(' ', '_')}_{name}.npy"), rng.standard_normal(shape).astype(np.float32))

    # The last field: flags of the 2-rank plan only (ZeRO-1 shards over exactly 2 ranks).
    sgd = ["--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9"]
    adamw = ["--optimizer", "adamw", "--lr", "1e-4", "--weight-decay", "0.01"]
    fp8 = ["--optimizer", "adamw", "--lr", "1e-4", "--fp8=all", "--fp8-emulate"]
    zero = ["--shard-optimizer", "2"]
    cases = [("mlp sgd+momentum", sgd, False, []),
             ("mlp adamw", adamw, True, []),
             ("mlp adamw fp8-emulated", fp8, False, []),
             ("mlp adamw zero-1", adamw, True, zero),
             ("mlp sgd+momentum clip zero-1", sgd + ["--clip-norm", "0.5"], False, zero),
             ("mlp adamw fp8-emulated zero-1", fp8, False, zero),
             ("gpt block sgd+momentum", sgd, False, []),
             ("gpt block adamw", adamw, True, []),
             ("gpt block adamw fp8-emulated", fp8, False, []),
             ("gpt block adamw zero-1", adamw, True, zero)]
    outcomes_by_label = {}
    for label, flags, adam_fp32, rank_flags in cases:
        model = "gpt block" if label.startswith("gpt block") else "mlp"
        global_batch, rank_batch = sorted(models[model], reverse=True)
        data = [os.path.join(work, f"{model.replace(' ', '_')}_{name}.npy") for name in "xy"]
        plans = {}
        for batch in (global_batch, rank_batch):
            plans[batch] = os.path.join(work, f"{label.replace(' ', '_')}_{batch}.tecplan")
            shape = ["--shape", f"batch={batch}"] if model == "mlp" else []  # the block's export fixes it
            compiled = run([args.tec, models[model][batch], "--train", "--target", "cpu", "-o", plans[batch]] + shape
                           + flags + (rank_flags if batch == rank_batch else []))
            if compiled.returncode != 0:
                check(False, f"{label}: compiles at batch {batch}\n{compiled.stderr}")
                break
        else:
            outcomes = {}
            for ranks, batch in ((1, global_batch), (2, rank_batch)):
                folder = os.path.join(work, f"{label.replace(' ', '_')}_{ranks}")
                command = [args.tec, "train", plans[batch], "--input", "x=" + data[0], "--target", "y=" + data[1],
                           "--steps", "20", "--threads", "1", "--report", folder + ".json", "--checkpoint-dir", folder]
                done = run((launcher if ranks > 1 else []) + command)
                if done.returncode != 0:
                    check(False, f"{label}: {ranks} rank(s) train\n{done.stdout}\n{done.stderr}")
                    break
                outcomes[ranks] = (json.load(open(folder + ".json"))["loss"],
                                   checkpoint_params(os.path.join(folder, "step-20")), done.stdout)
            else:
                one, two = outcomes[1], outcomes[2]
                if model == "gpt block" and adam_fp32:  # see the module's docstring: the keys' bias
                    start = {t.name: onnx.numpy_helper.to_array(t)
                             for t in onnx.load(models[model][global_batch]).graph.initializer}["attn.qkv.bias"][64:128]
                    drift = max(float(np.max(np.abs(p["attn.qkv.bias"][64:128] - start))) for p in (one[1], two[1]))
                    check(drift <= 1e-4, f"{label}: the keys' bias, whose gradient is 0, moves by rounding only "
                                         f"({drift:.1e}; a real gradient moves it ~{20 * 1e-4:.0e})")
                    for p in (one[1], two[1]):
                        p["attn.qkv.bias"] = np.concatenate([p["attn.qkv.bias"][:64], p["attn.qkv.bias"][128:]])
                loss_gap = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(one[0], two[0]))
                if flags is fp8:  # see the module's docstring: FP8 roundings flip after a few steps
                    early_gap = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(one[0][:5], two[0][:5]))
                    start = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(models[model][global_batch]).graph.initializer}
                    weight_gap = max(float(np.max(np.abs(one[1][k] - two[1][k]))) / max(float(np.max(np.abs(one[1][k] - start[k]))), 1e-30)
                                     for k in one[1])
                    check(len(one[0]) == len(two[0]) == 20 and early_gap <= RTOL and loss_gap <= FP8_LOSS_RTOL,
                          f"{label}: 2 ranks x batch {rank_batch} = 1 process x batch {global_batch}, losses over 5 steps "
                          f"within {early_gap:.2e} relative, over 20 within {loss_gap:.2e}")
                    check(weight_gap <= FP8_MOTION_RTOL,
                          f"{label}: final weights apart by {weight_gap:.2e} of how far they moved")
                else:
                    if adam_fp32:  # see the module's docstring: in norm
                        weight_gap = max(float(np.linalg.norm(one[1][k] - two[1][k])) / max(float(np.linalg.norm(one[1][k])), 1e-30)
                                         for k in one[1])
                        measure = "in norm"
                    else:
                        weight_gap = max(float(np.max(np.abs(one[1][k] - two[1][k]))) / max(float(np.max(np.abs(one[1][k]))), 1e-30)
                                         for k in one[1])
                        measure = "of their max"
                    check(len(one[0]) == len(two[0]) == 20 and loss_gap <= RTOL,
                          f"{label}: 2 ranks x batch {rank_batch} = 1 process x batch {global_batch}, losses over 20 steps "
                          f"within {loss_gap:.2e} relative")
                    check(weight_gap <= RTOL, f"{label}: final weights within {weight_gap:.2e} {measure}")
                check("the same state on all 2 ranks" in two[2], f"{label}: tec reports the same state on both ranks")
                outcomes_by_label[label] = outcomes

    # Distillation under mpirun: each step's inputs drawn for the global batch from the seed, each rank
    # labelling its slice with the teacher (compiled at the student's shapes): one process's run.
    teacher = os.path.join(work, "teacher.onnx")
    teacher_model = onnx.load(models["mlp"][32])
    for t in teacher_model.graph.initializer:
        t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t) * np.float32(1.2), t.name))
    onnx.save(teacher_model, teacher)
    distilled = {}
    for ranks, batch in ((1, 32), (2, 16)):
        plan = os.path.join(work, f"distill_{batch}.tecplan")
        report = os.path.join(work, f"distill_{ranks}.json")
        compiled = run([args.tec, models["mlp"][batch], "--train", "--target", "cpu", "--shape", f"batch={batch}",
                        "-o", plan] + sgd)
        done = run((launcher if ranks > 1 else []) + [args.tec, "train", plan, "--teacher", teacher, "--steps", "10",
                                                      "--threads", "1", "--report", report])
        if compiled.returncode or done.returncode:
            check(False, f"distillation on {ranks} rank(s)\n{compiled.stderr}{done.stdout}\n{done.stderr}")
            break
        distilled[ranks] = json.load(open(report))["loss"]
    else:
        gap = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(distilled[1], distilled[2]))
        check(len(distilled[1]) == len(distilled[2]) == 10 and gap <= RTOL,
              f"--teacher under mpirun: 2 ranks x batch 16 = 1 process x batch 32, losses within {gap:.2e} relative")

    # ZeRO-1 against the unsharded 2 ranks: the same sums (two ranks add in one order either way), so the
    # same run; each rank holds half of the optimizer state.
    for sharded, unsharded in (("mlp adamw zero-1", "mlp adamw"),
                               ("mlp adamw fp8-emulated zero-1", "mlp adamw fp8-emulated"),
                               ("gpt block adamw zero-1", "gpt block adamw")):
        if sharded in outcomes_by_label and unsharded in outcomes_by_label:
            a, b = outcomes_by_label[sharded][2], outcomes_by_label[unsharded][2]
            loss_gap = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a[0], b[0]))
            weight_gap = max(float(np.max(np.abs(a[1][k] - b[1][k]))) / max(float(np.max(np.abs(b[1][k]))), 1e-30)
                             for k in a[1])
            check(loss_gap <= RTOL and weight_gap <= RTOL,
                  f"{sharded} = {unsharded} on 2 ranks: losses within {loss_gap:.2e}, weights within {weight_gap:.2e}")
    per_rank = {}
    for label in ("mlp adamw", "mlp adamw zero-1"):
        text = run([args.tec, "inspect", os.path.join(work, f"{label.replace(' ', '_')}_16.tecplan")]).stdout
        line = next((l for l in text.splitlines() if "per rank:" in l), "")
        per_rank[label] = line
    sharded_bytes, whole_bytes = (optimizer_bytes(per_rank[k]) for k in ("mlp adamw zero-1", "mlp adamw"))
    check(0 < sharded_bytes <= whole_bytes / 2 * 1.001 and "1/2 of" in per_rank["mlp adamw zero-1"],
          f"ZeRO-1 halves the optimizer state per rank: {per_rank['mlp adamw zero-1'].strip()} "
          f"(unsharded: {per_rank['mlp adamw'].strip()})")

    # Resume under mpirun: 10 steps, then 10 more from the checkpoint rank 0 wrote, bit for bit as 20 straight.
    straight = os.path.join(work, "mlp_adamw_2")  # the 20-step run above
    split = os.path.join(work, "resumed")
    plan = os.path.join(work, "mlp_adamw_16.tecplan")
    data_flags = ["--input", "x=" + os.path.join(work, "mlp_x.npy"), "--target", "y=" + os.path.join(work, "mlp_y.npy"),
                  "--threads", "1", "--checkpoint-dir", split]
    first = run(launcher + [args.tec, "train", plan, "--steps", "10"] + data_flags)
    second = run(launcher + [args.tec, "train", plan, "--steps", "20", "--resume", split] + data_flags)
    if first.returncode == 0 and second.returncode == 0 and os.path.isdir(os.path.join(straight, "step-20")):
        a, b = checkpoint_params(os.path.join(straight, "step-20")), checkpoint_params(os.path.join(split, "step-20"))
        check(all(np.array_equal(a[k], b[k]) for k in a), "2 ranks resumed at step 10 end at step 20 bit for bit as straight")
    else:
        check(False, f"2 ranks resume (exit {first.returncode}, {second.returncode})\n{first.stderr}{second.stderr}")

    # Collectives on the communication thread (started where the plan puts them, waited for before their
    # first reader, while the backward goes on: what a machine with a core to spare does) give the same
    # sums in the same order: the same run, bit for bit. Small buckets, so that one travels during the backward.
    overlap_plan = os.path.join(work, "mlp_adamw_buckets.tecplan")
    compiled = run([args.tec, models["mlp"][16], "--train", "--target", "cpu", "--shape", "batch=16", "-o",
                    overlap_plan, "--bucket-mb", "0.5"] + adamw)
    threaded = {}
    for mode in ("inline", "thread"):
        folder = os.path.join(work, "progress-" + mode)
        done = run(launcher[:1] + ["-x", "TEC_MPI_PROGRESS=" + mode] + launcher[1:] +
                   [args.tec, "train", overlap_plan, "--steps", "20"] + data_flags[:-1] + [folder])
        if compiled.returncode == 0 and done.returncode == 0:
            threaded[mode] = (checkpoint_params(os.path.join(folder, "step-20")), done.stdout)
        else:
            check(False, f"2 ranks with TEC_MPI_PROGRESS={mode} (exit {compiled.returncode}, {done.returncode})\n"
                         f"{compiled.stderr}{done.stderr}")
    if len(threaded) == 2:
        (a, a_out), (b, b_out) = threaded["inline"], threaded["thread"]
        check(all(np.array_equal(a[k], b[k]) for k in a) and "communication thread" in b_out,
              "collectives overlapping on a communication thread train bit for bit as inline ones")

    # ZeRO-1 resumes too, and its checkpoint (every tensor whole) is the unsharded run's: resuming the sharded
    # plan from the unsharded 2-rank checkpoint at step 10 ends where the straight run does; tec export takes it.
    zero_plan = os.path.join(work, "mlp_adamw_zero-1_16.tecplan")
    for source, label in ((zero_plan, "its own"), (plan, "the unsharded plan's")):
        folder = os.path.join(work, "zero-resumed-" + ("own" if source == zero_plan else "unsharded"))
        first = run(launcher + [args.tec, "train", source, "--steps", "10"] + data_flags[:-1] + [folder])
        second = run(launcher + [args.tec, "train", zero_plan, "--steps", "20", "--resume", folder] + data_flags[:-1]
                     + [folder])
        if first.returncode == 0 and second.returncode == 0 and os.path.isdir(os.path.join(straight, "step-20")):
            a, b = checkpoint_params(os.path.join(straight, "step-20")), checkpoint_params(os.path.join(folder, "step-20"))
            check(all(np.array_equal(a[k], b[k]) for k in a),
                  f"ZeRO-1 on 2 ranks resumed at step 10 from {label} checkpoint ends at step 20 bit for bit as straight")
        else:
            check(False, f"ZeRO-1 resume from {label} checkpoint (exit {first.returncode}, {second.returncode})\n"
                         f"{first.stderr}{second.stderr}")
    exported = os.path.join(work, "zero.onnx")
    done = run([args.tec, "export", zero_plan, "--checkpoint", os.path.join(work, "zero-resumed-own"), "-o", exported])
    if done.returncode == 0:
        trained = checkpoint_params(os.path.join(work, "zero-resumed-own", "step-20"))
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(exported).graph.initializer}
        check(all(np.array_equal(inits[k], v) for k, v in trained.items() if k in inits) and
              set(trained) <= set(inits), "tec export writes the ZeRO-1 checkpoint's trained weights")
    else:
        check(False, f"tec export of a ZeRO-1 checkpoint (exit {done.returncode})\n{done.stderr}")

    # tec.Trainer in a user's script under mpirun: each rank feeds its share; the losses are one process's.
    probe = run([sys.executable, "-c", "import tec"])
    if probe.returncode != 0:
        print("skip the Python package is not importable here (PYTHONPATH)")
    else:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_parallel_trainer.py")
        x, y = os.path.join(work, "mlp_x.npy"), os.path.join(work, "mlp_y.npy")
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
    common = ["--input", "x=" + os.path.join(work, "mlp_x.npy"), "--target", "y=" + os.path.join(work, "mlp_y.npy"),
              "--steps", "2", "--threads", "1"]
    mixed = run(launcher[:-2] + ["-np", "1", args.tec, "train", a] + common + [":", "-np", "1", args.tec, "train", b]
                + common)
    check(mixed.returncode == 2 and "rank 1" in mixed.stderr and "differs from rank 0's plan" in mixed.stderr,
          f"ranks given different plans are refused with exit 2 naming the rank (exit {mixed.returncode})")

    # A rank that hangs (stopped by SIGSTOP) or is killed mid-run ends the other with a clear error within
    # --collective-timeout plus start-up, never a hang: the rank's shell stops or kills the tec it became.
    endless = f"exec {args.tec} train {a} " + " ".join(common[:-4]) + " --steps 100000000 --threads 1 --collective-timeout 3"
    for signal, expect, mode in (("STOP", "not every rank joined within 3 s", "inline"),
                                 ("STOP", "not every rank joined within 3 s", "thread"),
                                 ("KILL", "exited on signal 9", "inline")):
        started = time.monotonic()
        ended = run(launcher[:1] + ["-x", "TEC_MPI_PROGRESS=" + mode] + launcher[1:] +
                    ["sh", "-c", f'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then (sleep 5; kill -{signal} $$) & fi; '
                     + endless])
        took = time.monotonic() - started
        check(ended.returncode != 0 and expect in ended.stderr + ended.stdout and took < 60,
              f"a rank that {'hangs' if signal == 'STOP' else 'is killed'} mid-run ends the run in {took:.0f} s "
              f"(collectives {mode}) "
              f"(exit {ended.returncode})" + ("" if expect in ended.stderr + ended.stdout else f"\n{ended.stderr}"))

    shutil.rmtree(work, ignore_errors=True)
    print("data parallel: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
