"""tec.Trainer under mpirun, as a user script does it: each rank feeds its own share of every global batch
(the plan's batch), rank 0 prints the losses. Driven by check_data_parallel.py."""
import sys

import numpy as np
import tec

plan = tec.load(sys.argv[1])
t = tec.Trainer(plan, threads=1)
x = np.load(sys.argv[2]); y = np.load(sys.argv[3]); b = int(sys.argv[4]); steps = int(sys.argv[5])
batches = len(x) // (b * t.world_size)
losses = []
for step in range(steps):
    g = (step % batches) * t.world_size + t.rank
    losses.append(t.step({"x": x[g*b:(g+1)*b]}, {"y": y[g*b:(g+1)*b]}))
if t.rank == 0:
    print("world", t.world_size, "losses", " ".join("%.9e" % v for v in losses))
