#!/usr/bin/env bash
# tests/gpu/run.sh without a GPU, with fake nvidia-smi and fake test binaries: a GPU test that skips
# where nvidia-smi sees a GPU fails the check; no visible GPU fails it; a stage that overruns is cut to
# the budget (whose clock includes unpacking the bundle) and the script still ends in time with its partial
# results and a summary; benchmarks run strict; the stages run in order of value; a missing library stops it.
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
ln -s "$plugin" "$root/lib/"
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

# 4. The default budget, unpacking included, leaves a margin in a 600 s device call.
default=$(sed -n 's/^budget=\${TEC_GPU_BUDGET:-\([0-9]*\)}$/\1/p' "$src/tests/gpu/run.sh")
[ -n "$default" ] && [ "$default" -le 480 ] || { echo "run.sh's default budget '$default' does not fit 600 s"; exit 1; }

# 5. The budget's clock includes unpacking the bundle: a bundle that takes 4 s to unpack (a slow xz) and
# stages that hang end within the budget all the same.
mkdir -p "$work/slow-xz"
printf '#!/bin/sh
sleep 4
exec %s "$@"\n' "$(command -v xz)" > "$work/slow-xz/xz"
chmod +x "$work/slow-xz/xz"
tar -C "$work/hang" -cf - bin lib plans | xz -1 > "$work/hang.tar.xz"
start=$SECONDS
PATH="$work/slow-xz:$work/smi-gpu:$PATH" TEC_GPU_BUNDLE=$work/hang.tar.xz TEC_GPU_BUDGET=12 "$src/tests/gpu/run.sh" \
  "$work/out5" > "$work/out5.txt" 2>&1 && { echo "run.sh passed with hanging tests"; exit 1; }
took=$((SECONDS - start))
[ $took -le 20 ] || { echo "run.sh took $took s on a 12 s budget with a 4 s unpacking"; cat "$work/out5.txt"; exit 1; }
expect "unpacked $work/hang.tar.xz in [4-9] s (of the budget)" "$work/out5/summary.txt"

# Fake tec-bench for 6-8: --doctor prints a doctor report ($work/doctor.txt); a plan runs and prints a
# fallback note, unless --strict, which makes the fallback an error (as tec-bench does).
cat > "$work/fake-tec-bench" <<'SH'
#!/bin/sh
[ "$1" = --doctor ] && { cat "$(dirname "$0")/../doctor.txt"; exit 0; }
for a in "$@"; do
  if [ "$a" = --strict ]; then
    echo "error: $1: strict (--strict / TEC_STRICT): tec fell back from its fast path: step 3 (attention): cuDNN's fused attention declined (no engine); tec's attention kernel runs" >&2
    exit 1
  fi
done
echo '{"median_ms": 1.0, "notes": ["step 3 (attention): cuDNN declined"]}'
SH
chmod +x "$work/fake-tec-bench"
fake_root() { # fake_root DIR: the fake tec-bench, passing parity tests, the demo's plans
  mkdir -p "$1/bin" "$1/lib" "$1/plans"
  cp "$work/fake-tec-bench" "$1/bin/tec-bench"
  for t in tec-cuda-parity-tests tec-backend-parity-tests; do
    printf '#!/bin/sh\necho "[  PASSED  ] 3 tests."\n' > "$1/bin/$t" && chmod +x "$1/bin/$t"
  done
  touch "$1/lib/libtec_cuda.so" "$1/plans/student_fp8.tecplan" "$1/plans/fp8_h64.tecplan" "$1/plans/te_gpt_fp8.tecplan"
}
printf '#!/bin/sh\necho "python3 $*" >&2\nexit 3\n' > "$work/smi-gpu/python3" # the benchmarks fail at once
chmod +x "$work/smi-gpu/python3"

# 6. Strict: tec's benchmarks run --strict, so a declined cuDNN case fails instead of measuring the fallback.
fake_root "$work/strict"
cat > "$work/strict/doctor.txt" <<'TXT'
tec doctor
  CUDA runtime 13.0 (/usr/local/cuda/lib64/libcudart.so.13)
  cuDNN        9.19.0 (/usr/lib/libcudnn.so.9)
  NVRTC        13.0 (/usr/local/cuda/lib64/libnvrtc.so.13)
  CUDA backend loaded (/fake/libtec_cuda.so)
TXT
PATH="$work/smi-gpu:$PATH" TEC_GPU_ROOT=$work/strict "$src/tests/gpu/run.sh" "$work/out6" > "$work/out6.txt" 2>&1 &&
  { echo "run.sh passed although cuDNN declined under --strict"; cat "$work/out6.txt"; exit 1; }
expect "FAIL: demo student_fp8" "$work/out6/summary.txt"
expect "cuDNN's fused attention declined" "$work/out6/demo_student_fp8.log"
grep -q -- "--cases train --strict" "$work/out6/train.log" || { echo "bench.py ran without --strict"; exit 1; }

# 7. The stages in order of value: doctor, training step, TE layer, GEMMs, parity, demo, the step profiles,
# torch.compile last.
order=$(grep -noE 'bench train|bench te \(|bench gemm|tec-cuda-parity-tests:|demo student_fp8|profile te_gpt_fp8:|bench te_compile' \
        "$work/out6/summary.txt" | cut -d: -f2 | uniq | paste -sd, -)
[ "$order" = "bench train,bench te (,bench gemm,tec-cuda-parity-tests,demo student_fp8,profile te_gpt_fp8,bench te_compile" ] ||
  { echo "stages out of order: $order"; cat "$work/out6/summary.txt"; exit 1; }

# 8. A missing cuDNN (or NVRTC, or plugin) stops the check after the doctor, saying what is missing.
fake_root "$work/nocudnn"
sed 's/^  cuDNN .*/  cuDNN        not found/' "$work/strict/doctor.txt" > "$work/nocudnn/doctor.txt"
PATH="$work/smi-gpu:$PATH" TEC_GPU_ROOT=$work/nocudnn "$src/tests/gpu/run.sh" "$work/out8" > "$work/out8.txt" 2>&1 &&
  { echo "run.sh passed without cuDNN"; exit 1; }
expect "stopped before the GPU stages, libraries missing: cuDNN not found" "$work/out8/summary.txt"
[ ! -e "$work/out8/train.log" ] && [ ! -e "$work/out8/tec-cuda-parity-tests.log" ] ||
  { echo "run.sh went on past a missing cuDNN"; ls "$work/out8"; exit 1; }
echo "run.sh: skip policy, no-GPU policy, budget (unpacking included), strict benchmarks, stage order and the missing-library stop hold"
