"""Checks the NCCL schedule of an emitted training program (`tec --train --emit=cuda`), which is the CUDA
backend's launch sequence, against the rules that make data parallelism right and overlapped:
  - each collective is one NCCL group on the collectives' stream, after that stream waited for an event
    the work stream recorded at that point, and ends by recording an event on the collectives' stream;
  - the work stream waits for that end before any later launch touches the reduced buffers (nothing reads
    or overwrites a gradient in flight), and for every collective before the step synchronizes;
  - the gradients' all_reduces sum exactly the model's trainable parameters (the ONNX file's float
    initializers), each once, in more than one bucket, and at least one bucket overlaps the backward (a
    GEMM runs while it travels).
Usage: check_collective_schedule.py PROGRAM.cu MODEL.onnx"""
import re
import sys

import numpy as np
import onnx
from onnx import numpy_helper

program, model = sys.argv[1], sys.argv[2]
lines = open(program).read().splitlines()
record = re.compile(r"cudaEventRecord\(events\[(\d+)\], (stream|commStream)\)")
wait = re.compile(r"cudaStreamWaitEvent\((stream|commStream), events\[(\d+)\], 0\)")
reduce_ = re.compile(r"ncclAllReduce\(\(float \*\)P\((\d+)\), \(float \*\)P\((\d+)\), (\d+), ncclFloat, (\w+), comm, commStream\)")
pointer = re.compile(r"P\((\d+)\)")


def fail(line, why):
    sys.exit(f"FAIL: {program}:{line + 1}: {why}\n  {lines[line].strip()}")


body = next(i for i, l in enumerate(lines) if "CHECK_NCCL(ncclCommInitAll" in l)
sync = next(i for i, l in enumerate(lines) if i > body and "cudaStreamSynchronize(stream)" in l)
collectives = []  # (first line, end event, [(offset, count, op)], line of the end record)
i = body
while i < sync:
    if "ncclGroupStart" not in lines[i]:
        i += 1
        continue
    started, joined = record.search(lines[i - 2]), wait.search(lines[i - 1])
    if not (started and started.group(2) == "stream" and joined and joined.group(1) == "commStream"
            and joined.group(2) == started.group(1)):
        fail(i, "a collective not preceded by the work stream's event and the collectives' stream's wait for it")
    reduced = []
    i += 1
    while "ncclGroupEnd" not in lines[i]:
        m = reduce_.search(lines[i])
        if not m or m.group(1) != m.group(2):
            fail(i, "expected an in-place ncclAllReduce inside the group")
        reduced.append((int(m.group(1)), int(m.group(3)), m.group(4)))
        i += 1
    ended = record.search(lines[i + 1])
    if not (ended and ended.group(2) == "commStream"):
        fail(i + 1, "a collective whose end is not recorded on the collectives' stream")
    collectives.append((i - len(reduced) - 3, int(ended.group(1)), reduced, i + 1))
    i += 2

for first, event, reduced, end in collectives:
    waited = next((j for j in range(end + 1, sync) if (m := wait.search(lines[j])) and m.group(1) == "stream"
                   and int(m.group(2)) == event), None)
    if waited is None:
        fail(end, f"the work stream never waits for events[{event}] before it synchronizes")
    for j in range(end + 1, waited):
        if "cudaEvent" in lines[j] or "ncclAllReduce" in lines[j]:
            continue
        for p in map(int, pointer.findall(lines[j])):
            for offset, count, _ in reduced:
                if offset <= p < offset + 4 * count:
                    fail(j, f"touches P({offset}) while its all_reduce (ending with events[{event}]) is in flight")

trainable = sorted(numpy_helper.to_array(t).size for t in onnx.load(model).graph.initializer
                   if t.data_type == onnx.TensorProto.FLOAT)
gradient_buckets = [c for c in collectives if all(op == "ncclSum" for _, _, op in c[2])]
summed = sorted(count for c in gradient_buckets for _, count, _ in c[2])
if summed != trainable:
    sys.exit(f"FAIL: the gradient all_reduces sum {summed}, the model's parameters are {trainable}")
if len(gradient_buckets) < 2:
    sys.exit(f"FAIL: expected the gradients in several buckets, got {len(gradient_buckets)}")
overlapped = [c for c in gradient_buckets
              if any("runGemm" in lines[j] for j in range(c[3] + 1, next(k for k in range(c[3], sync)
                                                                          if f"events[{c[1]}], 0)" in lines[k])))]
if not overlapped:
    sys.exit("FAIL: no gradient bucket overlaps a GEMM of the backward")
print(f"{program}: {len(collectives)} collectives, {len(gradient_buckets)} gradient buckets "
      f"({np.sum(summed)} floats, {len(overlapped)} overlapping the backward)")
