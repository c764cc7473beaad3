#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU, in order of value: what the machine and tec see
# (nvidia-smi, the plugin's ldd, tec-bench --doctor; a missing plugin, cuDNN or NVRTC stops it there), tec's
# FP8 and BF16 training steps against PyTorch (bench/gpu), Transformer Engine's GPT layer (tec FP8, tec FP8
# attention, PyTorch BF16 eager), the GEMM throughput, the CPU-vs-CUDA parity tests, the demo's plans trained
# on the GPU, and last, with its own cap, the layer under torch.compile.
# One budget for everything, unpacking the bundle included (TEC_GPU_BUDGET seconds, default 480, to fit a
# 600 s device call with a margin): each stage runs under its own cap cut to what is left, and writes its
# results to OUTDIR as it ends, so a run that is cut short leaves what it had. Where nvidia-smi sees a GPU, a
# GPU test that reports SKIPPED is a failure: the check did not run. tec's benchmarks run --strict: a number
# exists only where tec ran its fast path (any fallback fails the case, naming it), and every case's notes
# go to summary.txt.
# Uses gpu-bundle.tar.xz (tests/gpu/bundle.sh; TEC_GPU_BUNDLE names another) when present, TEC_GPU_ROOT (an unpacked bundle: bin/, lib/,
# plans/) when set, else builds. tec's libraries go on LD_LIBRARY_PATH for tec's commands only, never for
# python3, whose PyTorch brings CUDA libraries of its own.
# Usage: tests/gpu/run.sh OUTDIR
set -uo pipefail
out=${1:?usage: tests/gpu/run.sh OUTDIR}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
budget=${TEC_GPU_BUDGET:-480}
started=$SECONDS
status=0
log() { echo "== $*" | tee -a "$out/summary.txt"; }
fail() { status=1; log "FAIL: $*"; }
left() { echo $((budget - (SECONDS - started))); }

root=${TEC_GPU_ROOT:-}
bundle=${TEC_GPU_BUNDLE:-gpu-bundle.tar.xz}
if [ -z "$root" ] && [ -f "$bundle" ]; then
  root=$(mktemp -d)
  xz -T0 -dc "$bundle" | tar -C "$root" -xf - || { fail "cannot unpack $bundle"; exit 1; }
  log "unpacked $bundle in $((SECONDS - started)) s (of the budget)"
fi
if [ -n "$root" ]; then
  bin=$root/bin tests=$root/bin plans=$root/plans plugin=$root/lib/libtec_cuda.so
  tec_libs="$root/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export TEC_TEST_PLANS=$plans TEC_CUDA_PLUGIN=$plugin
else
  ./dev build > "$out/build.log" 2>&1 || { fail "build failed (see build.log)"; exit 1; }
  bin=build/release/bin tests=build/release/tests/gpu plans=$(mktemp -d) plugin=build/release/lib/libtec_cuda.so
  tec_libs=${LD_LIBRARY_PATH:-}
fi
# The CUDA libraries of PyTorch's nvidia-* wheels too (cudnn, cublas, cuda_runtime, cuda_nvrtc, or cu13 for
# CUDA 13's), where that is how the machine has them; the plugin also looks there itself.
nvidia_libs=$(python3 -c 'import os, nvidia
print(":".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in sorted(os.listdir(p))
               if os.path.isdir(os.path.join(p, d, "lib"))))' 2>/dev/null || true)
[ -n "$nvidia_libs" ] && tec_libs="${tec_libs:+$tec_libs:}$nvidia_libs"
# tec's own commands run under "${tec_env[@]}": with tec's libraries, the rest of the script without them.
tec_env=(env "LD_LIBRARY_PATH=$tec_libs")

# stage NAME CAP COMMAND...: runs COMMAND for at most CAP seconds and never past the budget; the
# command's output goes to OUTDIR/NAME.log. Returns the command's status, 124 when it was cut.
stage() {
  local name=$1 cap=$2 limit
  shift 2
  limit=$(left)
  [ "$cap" -lt "$limit" ] && limit=$cap
  if [ "$limit" -lt 5 ]; then
    log "$name: not run, the ${budget} s budget is spent"
    return 124
  fi
  timeout --kill-after=5 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && log "$name: cut after ${limit} s (partial results in $name.log)"
  return $rc
}

# 1. The machine, as nvidia-smi, the dynamic loader and tec see it.
gpu_seen=0
if nvidia-smi -L > "$out/nvidia-smi-L.txt" 2>&1 && grep -q '^GPU ' "$out/nvidia-smi-L.txt"; then
  gpu_seen=1
  log "$(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
else
  log "$(date -u +%FT%TZ): nvidia-smi sees no GPU ($(head -1 "$out/nvidia-smi-L.txt"))"
fi
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
"${tec_env[@]}" ldd "$plugin" > "$out/ldd-plugin.txt" 2>&1
grep -q 'not found' "$out/ldd-plugin.txt" && log "plugin libraries not found: $(grep 'not found' "$out/ldd-plugin.txt" | tr -s ' \t' ' ')"
stage doctor 30 "${tec_env[@]}" "$bin/tec-bench" --doctor
sed 's/^/   /' "$out/doctor.log" | tee -a "$out/summary.txt"
# Without the plugin, cuDNN or NVRTC (cuDNN's runtime-compiled attention engines) every later number would
# measure a fallback: stop now, saying what is missing.
missing=$(grep -E '^ *(cuDNN|NVRTC|CUDA runtime|cuBLASLt) +not found|^ *CUDA backend +(cannot|this tec)' \
          "$out/doctor.log" | sed 's/^ *//; s/  */ /g' | paste -sd ';' -)
if [ "$gpu_seen" = 1 ] && [ -n "$missing" ]; then
  fail "stopped before the GPU stages, libraries missing: $missing (ldd-plugin.txt, doctor.log)"
  log "done in $((SECONDS - started)) s of ${budget}, status $status"
  exit $status
fi

# 2. The FP8 and BF16 training steps against PyTorch, each case written to bench.json as it ends.
hidden=$(ls "$plans" 2>/dev/null | sed -n 's/^fp8_h\([0-9]*\)\.tecplan$/\1/p' | sort -n | tr '\n' ' ')
bench() {
  stage "$1" "$2" env TEC_LD_LIBRARY_PATH="$tec_libs" python3 bench/gpu/bench.py --tec-bench "$bin/tec-bench" \
    --gemm-bench "$bin/tec-gemm-bench" --plans "$plans" --hidden $hidden --out "$out" --cases "$1" --strict ||
    fail "bench $1 (see $1.log)"
  tee -a "$out/summary.txt" < "$out/$1.log"
}
[ -n "$hidden" ] && bench train 120

# 3. Transformer Engine's benchmark: the GPT-style layer (hidden 4096, seq 2048), tec FP8 (and with FP8
# attention) vs PyTorch BF16 eager, with peak memory.
[ -f "$plans/te_gpt_fp8.tecplan" ] && bench te 100

# 4. Raw GEMM throughput against torch._scaled_mm and torch.matmul.
[ -n "$hidden" ] && bench gemm 60

# 5. Parity: every kernel and the test models, CPU vs CUDA, and data parallelism's NCCL path on one rank
# (CudaBackend.NcclOverOneRankEqualsTheCopies: NCCL from the toolkit or PyTorch's nvidia-nccl wheel).
for t in tec-cuda-parity-tests tec-backend-parity-tests; do
  stage "$t" 90 "${tec_env[@]}" "$tests/$t" --gtest_output="json:$out/$t.json" || status=1
  log "$t: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?[,.]' "$out/$t.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$out/$t.log" | head -20 | tee -a "$out/summary.txt"
  skipped=$(grep -E '^\[  SKIPPED \] [A-Za-z]' "$out/$t.log" | sort -u | wc -l)
  if [ "$gpu_seen" = 1 ] && [ "$skipped" -gt 0 ]; then
    fail "$t: $skipped GPU tests SKIPPED on a machine where nvidia-smi sees a GPU: the check did not run"
    grep -m3 -E 'Skipped|no CUDA' "$out/$t.log" | tee -a "$out/summary.txt"
  fi
done
[ "$gpu_seen" = 1 ] || fail "no GPU visible: nothing was checked on a GPU"

# 6. The demo's student plans (examples/teacher_student, the MLP and the GPT-style block): 200 training
# steps on the GPU, strict.
for p in student_fp8 gpt_student_fp8 gpt_student_bf16; do
  [ -f "$plans/$p.tecplan" ] || continue
  stage "demo_$p" 20 "${tec_env[@]}" "$bin/tec-bench" "$plans/$p.tecplan" --kind train --device cuda --strict \
    --warmup 1 --iterations 200 || fail "demo $p (see demo_$p.log)"
  log "demo $p on cuda: $(cat "$out/demo_$p.log")"
done

# 7. Where each benchmark's step time goes: every plan step's mean time (tec-bench --profile), for the work
# that follows a GPU run on machines without one.
for p in fp8_h4096 bf16_h4096 te_gpt_fp8 te_gpt_fp8_attention; do
  [ -f "$plans/$p.tecplan" ] || continue
  stage "profile_$p" 30 "${tec_env[@]}" "$bin/tec-bench" "$plans/$p.tecplan" --kind train --device cuda \
    --warmup 1 --iterations 5 --profile || fail "profile $p (see profile_$p.log)"
  log "profile $p: $(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
steps = ", ".join("%s #%d %.3f" % (s["kernel"], s["step"], s["ms"]) for s in r["profile"][:8])
print("%.2f ms a step; slowest: %s" % (r["median_ms"], steps))' "$out/profile_$p.log" 2>&1)"
done

# 8. Last, with its own cap: the layer under torch.compile (its compilation alone can take minutes).
[ -f "$plans/te_gpt_fp8.tecplan" ] && bench te_compile 90

log "done in $((SECONDS - started)) s of ${budget}, status $status"
exit $status
