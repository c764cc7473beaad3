#!/usr/bin/env python3
"""Train a PyTorch model with tec, fed by a torch.utils.data.DataLoader: FP32 vs FP8, as the demo compares.

The model is an MLP written in PyTorch and exported with torch.onnx.export (tec.from_torch); a fixed random
teacher labels a synthetic data set; tec trains the exported student from the same initial weights twice,
with its FP32 plan and its FP8 plan (emulated on the CPU where there is no FP8 GPU), and prints each
plan's losses and step time side by side.

    .venv/bin/python examples/python/train_torch_loader.py [--steps 300]
"""
import argparse
import time

import numpy as np
import torch

import tec


class Mlp(torch.nn.Module):
    def __init__(self, width=256):
        super().__init__()
        self.fc1, self.fc2, self.head = torch.nn.Linear(256, width), torch.nn.Linear(width, width), torch.nn.Linear(width, 16)

    def forward(self, x):
        return self.head(torch.nn.functional.gelu(self.fc2(torch.relu(self.fc1(x)))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    teacher, student = Mlp(512).eval(), Mlp()
    x = torch.randn(args.batch * 64, 256)
    with torch.no_grad():
        y = teacher(x)
    def loader():  # the same shuffled batches for each plan
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=args.batch, shuffle=True,
                                           drop_last=True, generator=torch.Generator().manual_seed(0))
    train = tec.TrainOptions(loss="mse", optimizer="adamw", lr=1e-3)
    example = torch.zeros(args.batch, 256)
    runs = {
        "FP32": tec.from_torch(student, example, input_names=["x"], output_names=["y"], targets=["cpu"], train=train),
        "FP8": tec.from_torch(student, example, input_names=["x"], output_names=["y"], targets=["cpu"], train=train,
                              fp8="all", fp8_emulate=True),
    }
    results = {}
    for name, plan in runs.items():
        trainer = tec.Trainer(plan, device="auto")
        losses, start, step, batches = [], time.perf_counter(), 0, loader()
        while step < args.steps:
            for xb, yb in batches:  # PyTorch tensors go in as they are (DLPack)
                losses.append(trainer.step({"x": xb}, {"y": yb}))
                step += 1
                if step == args.steps:
                    break
        results[name] = (losses, (time.perf_counter() - start) / args.steps * 1e3, trainer)
        print(f"{name:5s} {trainer.selection_reason}")
    print(f"{'step':>6s} {'FP32 loss':>12s} {'FP8 loss':>12s}")
    for i in sorted({0, 9, args.steps // 4, args.steps // 2, args.steps - 1}):
        print(f"{i + 1:6d} {results['FP32'][0][i]:12.5f} {results['FP8'][0][i]:12.5f}")
    final32, final8 = np.mean(results["FP32"][0][-10:]), np.mean(results["FP8"][0][-10:])
    print(f"final loss (mean of the last 10 steps): FP32 {final32:.5f}, FP8 {final8:.5f} "
          f"({100 * (final8 / final32 - 1):+.1f}%); step time FP32 {results['FP32'][1]:.2f} ms, "
          f"FP8 {results['FP8'][1]:.2f} ms (emulated on the CPU unless an FP8 GPU ran it)")
    health = results["FP8"][2].fp8_report()
    print(f"FP8 health: {len(health)} quantized tensors, largest saturated share "
          f"{max((h['saturated'] for h in health if h['saturated'] == h['saturated']), default=0):.4%}")


if __name__ == "__main__":
    main()
