#!/usr/bin/env bash
# tests/gpu/run.sh without a GPU, with fake nvidia-smi and fake test binaries: a GPU test that skips
# where nvidia-smi sees a GPU fails the check; no visible GPU fails it; a stage that overruns is cut to
# the budget and the script still ends in time with its partial results and a summary.
# Usage: run_script_test.sh SOURCE_DIR BIN_DIR GPU_TESTS_DIR PLUGIN WORK_DIR
set -euo pipefail
src=$1 bin=$2 gpu_tests=$3 plugin=$4 work=$5
rm -rf "$work" && mkdir -p "$work/smi-gpu" "$work/smi-none"
printf '#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"; echo "NVIDIA H200, 570.00, 143771 MiB"\n' \
  > "$work/smi-gpu/nvidia-smi"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."; exit 9\n' \
  > "$work/smi-none/nvidia-smi"
chmod +x "$work"/smi-*/nvidia-smi
expect() { grep -q "$1" "$2" || { echo "expected '$1' in $2:"; cat "$2"; exit 1; }; }

# 1. The real parity tests, which skip here: with a GPU in sight that is a failure, not a pass.
root=$work/real && mkdir -p "$root/bin" "$root/lib" "$root/plans"
ln -s "$bin/tec-bench" "$gpu_tests/tec-cuda-parity-tests" "$gpu_tests/tec-backend-parity-tests" "$root/bin/"
ln -s "$plugin" "$root/lib/"
if PATH="$work/smi-gpu:$PATH" TEC_GPU_ROOT=$root "$src/tests/gpu/run.sh" "$work/out1" > "$work/out1.txt" 2>&1; then
  echo "run.sh passed although every GPU test skipped:"; cat "$work/out1.txt"; exit 1
fi
expect "GPU tests SKIPPED on a machine where nvidia-smi sees a GPU" "$work/out1/summary.txt"
expect "tec doctor" "$work/out1/summary.txt"
test -s "$work/out1/ldd-plugin.txt"

# 2. No GPU visible: nothing was checked, which is not a success either.
if PATH="$work/smi-none:$PATH" TEC_GPU_ROOT=$root "$src/tests/gpu/run.sh" "$work/out2" > "$work/out2.txt" 2>&1; then
  echo "run.sh passed without a GPU:"; cat "$work/out2.txt"; exit 1
fi
expect "no GPU visible" "$work/out2/summary.txt"

# 3. A stage that hangs is cut at the budget; the next is not started; the script ends and says so.
root=$work/hang && mkdir -p "$root/bin" "$root/lib" "$root/plans"
ln -s "$bin/tec-bench" "$root/bin/"
for t in tec-cuda-parity-tests tec-backend-parity-tests; do
  printf '#!/bin/sh\necho "[ RUN      ] Hang.Forever"\nexec sleep 600\n' > "$root/bin/$t"
  chmod +x "$root/bin/$t"
done
start=$SECONDS
PATH="$work/smi-gpu:$PATH" TEC_GPU_ROOT=$root TEC_GPU_BUDGET=12 "$src/tests/gpu/run.sh" "$work/out3" \
  > "$work/out3.txt" 2>&1 && { echo "run.sh passed with hanging tests"; exit 1; }
took=$((SECONDS - start))
[ $took -le 30 ] || { echo "run.sh took $took s on a 12 s budget"; cat "$work/out3.txt"; exit 1; }
expect "tec-cuda-parity-tests: cut after" "$work/out3/summary.txt"
expect "tec-backend-parity-tests: not run, the 12 s budget is spent" "$work/out3/summary.txt"
expect "done in" "$work/out3/summary.txt"
expect "Hang.Forever" "$work/out3/tec-cuda-parity-tests.log"

# 4. The default budget leaves room in a 420 s device call for unpacking the bundle and a margin.
default=$(sed -n 's/^budget=\${TEC_GPU_BUDGET:-\([0-9]*\)}$/\1/p' "$src/tests/gpu/run.sh")
[ -n "$default" ] && [ "$default" -le 330 ] || { echo "run.sh's default budget '$default' does not fit 420 s"; exit 1; }
echo "run.sh: skip policy, no-GPU policy and budget hold"
