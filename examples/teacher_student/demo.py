#!/usr/bin/env python3
"""tec's main job, end to end: a student MLP learns to imitate a teacher MLP (distillation), trained by
tec twice - with the FP32 plan and with the FP8 plan - and compared side by side.

FP8 runs where the machine has it; on this CPU backend it is emulated bit for bit (E4M3/E5M2 with
delayed scaling), which shows FP8's numerics, not its speed. Writes OUT/report.json, OUT/loss.png and
OUT/speed_memory.png.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def tec(binary, *args):
    result = subprocess.run([binary, *args], check=True, text=True, capture_output=True)
    return result.stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", required=True)
    parser.add_argument("--out", default="demo-out")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--check", action="store_true", help="fail unless FP8's final loss is within 5% of FP32's")
    args = parser.parse_args()
    start = time.time()
    models = os.path.join(args.out, "models")
    subprocess.run([sys.executable, os.path.join(HERE, "make_models.py"), models], check=True)
    teacher, student = os.path.join(models, "teacher.onnx"), os.path.join(models, "student.onnx")

    runs = {"FP32": [], "FP8": ["--fp8=all", "--fp8-emulate"]}
    reports, lines = {}, {}
    common = ["--target", "cpu", "--train", "--optimizer", "adamw", "--lr", "3e-3", "--schedule", "cosine",
              "--warmup-steps", "20", "--total-steps", str(args.steps)]
    for name, flags in runs.items():
        plan = os.path.join(args.out, f"student_{name.lower()}.tecplan")
        summary = tec(args.tec, student, "-o", plan, *common, *flags)
        if name == "FP8":
            print(summary)
        report = os.path.join(args.out, f"train_{name.lower()}.json")
        log = tec(args.tec, "train", plan, "--teacher", teacher, "--steps", str(args.steps), "--seed", "0",
                  "--report", report)
        lines[name] = log.splitlines()[0]
        with open(report) as f:
            reports[name] = json.load(f)

    def smooth(values, k=20):
        v = np.asarray(values)
        return np.convolve(v, np.ones(k) / k, mode="valid")

    rows = {}
    for name, r in reports.items():
        ms = np.asarray(r["step_ms"][10:])
        rows[name] = {"step_ms": float(np.median(ms)), "peak_memory_bytes": r["peak_memory_bytes"],
                      "final_loss": float(np.mean(r["loss"][-20:])), "loss": r["loss"]}
    s32, s8 = smooth(rows["FP32"]["loss"]), smooth(rows["FP8"]["loss"])
    curve_gap = float(np.max(np.abs(s8 - s32) / s32))
    final_gap = abs(rows["FP8"]["final_loss"] - rows["FP32"]["final_loss"]) / rows["FP32"]["final_loss"]

    print("How each student was run:")
    for name, line in lines.items():
        print(f"  {name}: {line}")
    print()
    print(f"{'':22s}{'FP32':>14s}{'FP8':>14s}")
    print(f"{'step time (median)':22s}{rows['FP32']['step_ms']:>12.3f}ms{rows['FP8']['step_ms']:>12.3f}ms")
    print(f"{'peak memory (arena)':22s}{rows['FP32']['peak_memory_bytes'] / 2**20:>11.2f}MiB"
          f"{rows['FP8']['peak_memory_bytes'] / 2**20:>11.2f}MiB")
    print(f"{'final loss (last 20)':22s}{rows['FP32']['final_loss']:>14.5f}{rows['FP8']['final_loss']:>14.5f}")
    print(f"FP8 vs FP32: final loss {100 * final_gap:.2f}% apart; smoothed loss curves at most "
          f"{100 * curve_gap:.2f}% apart over {args.steps} steps.")
    print("On the CPU FP8 is emulated (quantize/dequantize around FP32 GEMMs): it shows FP8's accuracy, and "
          "costs time here; the speed-up needs an FP8 GPU.")

    report = {"steps": args.steps, "runs": {k: {kk: vv for kk, vv in v.items()} for k, v in rows.items()},
              "fp8_final_loss_gap": final_gap, "fp8_max_curve_gap": curve_gap, "how": lines}
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=2)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, color, style in [("FP32", "tab:blue", "-"), ("FP8", "tab:orange", "--")]:
        ax.plot(rows[name]["loss"], color=color, alpha=0.25, label=f"{name} per step")
        smoothed = smooth(rows[name]["loss"])
        ax.plot(np.arange(19, 19 + len(smoothed)), smoothed, color=color, linestyle=style, label=f"{name} (mean of 20)")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("distillation loss (MSE)")
    ax.set_title("Student imitating the teacher: FP32 vs FP8 training")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "loss.png"), dpi=110)
    fig, axes = plt.subplots(1, 2, figsize=(7, 3.2))
    names = list(rows)
    axes[0].bar(names, [rows[n]["step_ms"] for n in names], color=["tab:blue", "tab:orange"])
    axes[0].set_ylabel("ms per step (median)")
    axes[1].bar(names, [rows[n]["peak_memory_bytes"] / 2**20 for n in names], color=["tab:blue", "tab:orange"])
    axes[1].set_ylabel("arena MiB")
    fig.suptitle("Step time and memory (CPU; FP8 emulated)")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "speed_memory.png"), dpi=110)
    print(f"\nwrote {args.out}/report.json, {args.out}/loss.png, {args.out}/speed_memory.png "
          f"({time.time() - start:.1f} s)")
    if args.check:
        ok = final_gap <= 0.05 and rows["FP8"]["final_loss"] < rows["FP8"]["loss"][0] / 2
        print(f"{int(ok)} passed, {int(not ok)} failed")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
