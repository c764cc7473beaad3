#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU: the CPU-vs-CUDA parity tests, the demo's plans trained
# on the GPU, and bench/gpu (tec vs PyTorch), with logs and JSON written to OUTDIR. Within 5 minutes on
# one H200. Uses gpu-bundle.tar.xz (tests/gpu/bundle.sh) where tec cannot be built there, else builds.
# Usage: tests/gpu/run.sh OUTDIR
set -uo pipefail
out=${1:?usage: tests/gpu/run.sh OUTDIR}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
log() { echo "== $*" | tee -a "$out/summary.txt"; }

if [ -f gpu-bundle.tar.xz ]; then
  root=$(mktemp -d)
  xz -dc gpu-bundle.tar.xz | tar -C "$root" -xf -
  export LD_LIBRARY_PATH="$root/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  bin=$root/bin tests=$root/bin plans=$root/plans
  export TEC_TEST_PLANS=$plans
else
  ./dev build > "$out/build.log" 2>&1 || { log "build failed (see build.log)"; exit 1; }
  bin=build/release/bin tests=build/release/tests/gpu plans=$(mktemp -d)
fi
log "$(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1

status=0
for t in tec-cuda-parity-tests tec-backend-parity-tests; do
  timeout 120 "$tests/$t" --gtest_output="json:$out/$t.json" > "$out/$t.log" 2>&1 || status=1
  log "$t: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?[,.]' "$out/$t.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$out/$t.log" | head -20 | tee -a "$out/summary.txt"
done

# The demo's student plans (examples/teacher_student), 200 training steps on the GPU and on the CPU.
for p in student_fp32 student_fp8; do
  [ -f "$plans/$p.tecplan" ] || continue
  for device in cuda cpu; do
    timeout 60 "$bin/tec-bench" "$plans/$p.tecplan" --kind train --device $device --warmup 0 --iterations 200 \
      > "$out/demo_${p}_$device.json" 2> "$out/demo_${p}_$device.err" || status=1
    log "demo $p on $device: $(cat "$out/demo_${p}_$device.json" "$out/demo_${p}_$device.err")"
  done
done

hidden=$(ls "$plans" | sed -n 's/^fp8_h\([0-9]*\)\.tecplan$/\1/p' | sort -n | tr '\n' ' ')
if [ -n "$hidden" ]; then
  timeout 200 python3 bench/gpu/bench.py --tec-bench "$bin/tec-bench" --gemm-bench "$bin/tec-gemm-bench" \
    --plans "$plans" --hidden $hidden --out "$out" > "$out/bench.log" 2>&1 || status=1
  tee -a "$out/summary.txt" < "$out/bench.log"
fi
log "done, status $status"
exit $status
