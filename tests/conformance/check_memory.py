#!/usr/bin/env python3
"""Memory that drops with precision (issue 13's targets), measured from the plans as `tec inspect --json`
gives them: the training step's arena of the FP8 (sm_90), BF16 (sm_80) and FP16 (sm_75) variants against
the FP32 (cpu) one, with AdamW, at 8,192 tokens, on the hidden-1024 MLP (bench/gpu/make_models.py's) and on a
2-layer GPT block (hidden 1024, seq 512, 16 heads, batch 16; tests/models/gen_models.py's block twice).
Prints each ratio and the saved activations; fails above the targets (FP8 <= 0.55, BF16 and FP16 <= 0.6)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import onnx
from onnx import compose

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "gpu"))
import gen_models  # noqa: E402
import make_models  # noqa: E402

BOUNDS = {name: {"sm_90": 0.55, "sm_80": 0.60, "sm_75": 0.60} for name in ("mlp_h1024", "gpt_2layer")}


def gpt_2layer():
    blocks = [gen_models.gpt_block(decomposed=False, batch=16, seq=512, dim=1024, heads=16, seed=s) for s in (2, 3)]
    return compose.merge_models(blocks[0], blocks[1], io_map=[("y", "x")], prefix1="l0.", prefix2="l1.")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", required=True)
    args = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        models = {"mlp_h1024": make_models.mlp(1024, 8192), "gpt_2layer": gpt_2layer()}
        for name, model in models.items():
            path, plan = os.path.join(work, name + ".onnx"), os.path.join(work, name + ".tecplan")
            onnx.save(model, path)
            subprocess.run([args.tec, path, "-o", plan, "--target", "sm_90,sm_80,sm_75,cpu", "--train", "--loss", "mse"],
                           check=True, stdout=subprocess.DEVNULL)
            info = json.loads(subprocess.run([args.tec, "inspect", "--json", plan], check=True, capture_output=True,
                                             text=True).stdout)
            arenas, saved = {}, {}
            for v in info["variants"]:
                if v.get("kind") == "train":
                    arenas[v["target"]] = int(v.get("arenaBytes", 0))
                    saved[v["target"]] = sum(int(b["bytes"]) for b in v["buffers"]
                                             if b.get("kind") == "KIND_SAVED" and b["aliasOf"] < 0)
            base = arenas["cpu"]
            for target, bound in BOUNDS[name].items():
                ratio = arenas[target] / base
                ok = ratio <= bound
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {name} {target}: arena {arenas[target] / 2**20:.1f} MiB = "
                      f"{ratio:.3f}x FP32's {base / 2**20:.1f} MiB (bound {bound}); saved activations "
                      f"{saved[target] / 2**20:.1f} MiB vs {saved['cpu'] / 2**20:.1f} MiB")
            os.remove(path)
            os.remove(plan)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
