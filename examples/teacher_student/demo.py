#!/usr/bin/env python3
"""tec's main job, end to end: a student learns to imitate a teacher (distillation), trained by tec with
the FP32 plan and with the FP8 plan, compared side by side - first an MLP, then a GPT-style transformer
block (LayerNorm, causal attention, GELU MLP), which also trains with the BF16 plan and with each of
Transformer Engine 2.x's other FP8 recipes: current scaling, block scaling (DeepSeek-V3's 1x128 / 128x128
blocks) and MXFP8 (1x32 blocks, E8M0 scales).

FP8 and BF16 run where the machine has them; on this CPU backend they are emulated bit for bit (E4M3/E5M2
with delayed scaling; bf16 rounding of activations; the other recipes on the cpu target with
--fp8-emulate), which shows their numerics and the memory their plans take on a GPU, not their speed. Writes OUT/report.json, OUT/loss.png, OUT/speed_memory.png and the
transformer's OUT/loss_transformer.png, OUT/speed_memory_transformer.png.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
COLORS = {"FP32": ("tab:blue", "-"), "FP8": ("tab:orange", "--"), "BF16": ("tab:green", ":"),
          "FP8 current": ("tab:red", "-."), "FP8 block": ("tab:purple", "--"), "FP8 MXFP8": ("tab:brown", ":")}
# The recipes besides delayed scaling, emulated on the cpu target (sm_90 runs current scaling natively; block
# scaling and MXFP8 lack CUDA kernels in tec so far, and the sm_90 plan would fall back to current).
RECIPES = {"FP8 current": "current", "FP8 block": "block", "FP8 MXFP8": "mxfp8"}


def tec(binary, *args):
    result = subprocess.run([binary, *args], check=True, text=True, capture_output=True)
    return result.stdout


def smooth(values, k=20):
    v = np.asarray(values)
    return np.convolve(v, np.ones(k) / k, mode="valid")


def distill(args, name, teacher, student, runs):
    """Trains `student` on `teacher`'s outputs once per run (name -> compile flags, train flags); returns
    per run its median step time, arena, losses, and the line saying how it ran."""
    common = ["--train", "--optimizer", "adamw", "--lr", "3e-3", "--schedule", "cosine", "--warmup-steps", "20",
              "--total-steps", str(args.steps)]
    rows = {}
    for run, (compile_flags, train_flags) in runs.items():
        plan = os.path.join(args.out, f"{name}_{run.lower().replace(' ', '_')}.tecplan")  # tests/gpu/bundle.sh takes these
        summary = tec(args.tec, student, "-o", plan, *common, *compile_flags)
        if run == "FP8":
            print(summary)
        report = os.path.join(args.out, f"train_{name}_{run.lower().replace(' ', '_')}.json")
        log = tec(args.tec, "train", plan, "--teacher", teacher, "--steps", str(args.steps), "--seed", "0",
                  "--report", report, *train_flags)
        with open(report) as f:
            r = json.load(f)
        rows[run] = {"step_ms": float(np.median(np.asarray(r["step_ms"][10:]))), "arena_bytes": r["peak_memory_bytes"],
                     "saved_bytes": r["memory"]["saved_activations"], "final_loss": float(np.mean(r["loss"][-20:])),
                     "loss": r["loss"], "how": log.splitlines()[0]}
    return rows


def compare(title, rows, steps):
    """Prints the table; returns each low-precision run's final-loss and curve gaps to FP32."""
    names = list(rows)
    print(f"{title}: how each student was run:")
    for n in names:
        print(f"  {n}: {rows[n]['how']}")
    print(f"{'':24s}" + "".join(f"{n:>14s}" for n in names))
    print(f"{'step time (median)':24s}" + "".join(f"{rows[n]['step_ms']:>12.3f}ms" for n in names))
    print(f"{'arena (the plan)':24s}" + "".join(f"{rows[n]['arena_bytes'] / 2**20:>11.2f}MiB" for n in names))
    print(f"{'saved for backward':24s}" + "".join(f"{rows[n]['saved_bytes'] / 2**10:>11.1f}KiB" for n in names))
    print(f"{'final loss (last 20)':24s}" + "".join(f"{rows[n]['final_loss']:>14.5f}" for n in names))
    gaps = {}
    s32 = smooth(rows["FP32"]["loss"])
    for n in names[1:]:
        final = abs(rows[n]["final_loss"] - rows["FP32"]["final_loss"]) / rows["FP32"]["final_loss"]
        curve = float(np.max(np.abs(smooth(rows[n]["loss"]) - s32) / s32))
        gaps[n] = {"final_loss_gap": final, "max_curve_gap": curve}
        print(f"{n} vs FP32: final loss {100 * final:.2f}% apart; smoothed loss curves at most {100 * curve:.2f}% "
              f"apart over {steps} steps.")
    print()
    return gaps


def plot(out, suffix, title, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # Above: the curves (they lie on top of each other when low precision costs nothing); below: each
    # smoothed curve relative to FP32's, where the difference shows.
    fig, (ax, gap) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    reference = smooth(rows["FP32"]["loss"]) if "FP32" in rows else None
    for name, r in rows.items():
        color, style = COLORS[name]
        ax.plot(r["loss"], color=color, alpha=0.25, label=f"{name} per step")
        smoothed = smooth(r["loss"])
        steps = np.arange(19, 19 + len(smoothed))
        ax.plot(steps, smoothed, color=color, linestyle=style, label=f"{name} (mean of 20)")
        if reference is not None:
            gap.plot(steps, 100 * (smoothed / reference - 1), color=color, linestyle=style, label=name)
    ax.set_yscale("log")
    ax.set_ylabel("distillation loss (MSE)")
    ax.set_title(title)
    ax.legend(fontsize="small", ncol=2)
    gap.axhline(0, color="gray", linewidth=0.5)
    gap.set_xlabel("step")
    gap.set_ylabel("vs FP32 (%, mean of 20)")
    gap.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"loss{suffix}.png"), dpi=110)
    fig, axes = plt.subplots(1, 2, figsize=(7, 3.2))
    names = list(rows)
    colors = [COLORS[n][0] for n in names]
    bars = axes[0].bar(names, [rows[n]["step_ms"] for n in names], color=colors)
    axes[0].bar_label(bars, fmt="%.2f ms")
    axes[0].set_ylabel("ms per step (median)")
    bars = axes[1].bar(names, [rows[n]["arena_bytes"] / 2**20 for n in names], color=colors)
    axes[1].bar_label(bars, fmt="%.2f MiB")
    axes[1].set_ylabel("arena MiB (the plan's)")
    for a in axes:
        a.margins(y=0.15)  # room for the labels
    fig.suptitle("Step time and memory (CPU: low precision emulated)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"speed_memory{suffix}.png"), dpi=110)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", required=True)
    parser.add_argument("--out", default="demo-out")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--check", action="store_true",
                        help="fail unless each low-precision run's final loss is within 5% (MLP, the "
                             "transformer's recipes) or 10% (the transformer's FP8 and BF16 plans) of FP32's and "
                             "the losses at least halve")
    args = parser.parse_args()
    start = time.time()
    models = os.path.join(args.out, "models")
    subprocess.run([sys.executable, os.path.join(HERE, "make_models.py"), models], check=True)
    model = lambda name: os.path.join(models, name + ".onnx")  # noqa: E731

    fp8 = (["--target", "sm_90", "--fp8=all"], ["--variant", "sm_90"])  # the Hopper plan, emulated here
    mlp = distill(args, "student", model("teacher"), model("student"), {"FP32": (["--target", "cpu"], []), "FP8": fp8})
    recipes = {name: (["--target", "cpu", "--fp8=all", "--fp8-emulate", "--fp8-recipe", recipe], [])
               for name, recipe in RECIPES.items()}
    gpt = distill(args, "gpt_student", model("gpt_teacher"), model("gpt_student"),
                  {"FP32": (["--target", "cpu"], []), "FP8": fp8,
                   "BF16": (["--target", "sm_80"], ["--variant", "sm_80"]), **recipes})
    gaps = {"mlp": compare("MLP", mlp, args.steps), "transformer": compare("GPT-style block", gpt, args.steps)}
    print("On the CPU the FP8 (sm_90) and BF16 (sm_80) plans are emulated: FP8 GEMMs as quantize/dequantize "
          "around FP32 ones, bf16 tensors widened for f32 kernels. They show the accuracy and the memory the plans "
          "take on a GPU, and cost time here; the speed-up needs an FP8 (or BF16) GPU.")

    report = {"steps": args.steps, "mlp": mlp, "transformer": gpt, "gaps": gaps}
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    plot(args.out, "", "Student MLP imitating the teacher: FP32 vs FP8 training", mlp)
    plot(args.out, "_transformer", "GPT-style student imitating its teacher: FP32, BF16, FP8 recipes", gpt)
    print(f"\nwrote {args.out}/report.json, loss.png, speed_memory.png, loss_transformer.png, "
          f"speed_memory_transformer.png ({time.time() - start:.1f} s)")
    if args.check:
        checks = [(mlp, "FP8", 0.05), (gpt, "FP8", 0.10), (gpt, "BF16", 0.10)] + [(gpt, n, 0.05) for n in RECIPES]
        ok = all(abs(rows[n]["final_loss"] - rows["FP32"]["final_loss"]) <= bound * rows["FP32"]["final_loss"] and
                 rows[n]["final_loss"] < rows[n]["loss"][0] / 2 for rows, n, bound in checks)
        print(f"{int(ok)} passed, {int(not ok)} failed")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
