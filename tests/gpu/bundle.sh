#!/usr/bin/env bash
# Packs what tests/gpu/run.sh needs on a GPU machine that has CUDA but none of tec's build dependencies
# (no MLIR, no protobuf headers, no network): the runtime-only binaries and tests, the CUDA plugin, the
# shared libraries they need beyond the CUDA toolkit, and the benchmark and demo plans compiled here.
# Usage: tests/gpu/bundle.sh [HIDDEN...]   (default 4096 8192) -> gpu-bundle.tar.xz (git-ignored)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -gt 0 ]; then hidden=("$@"); else hidden=(4096 8192); fi
build=build/release
./dev build > /dev/null
[ -f demo-out/gpt_student_bf16.tecplan ] || ./dev demo > /dev/null
stage=$(mktemp -d)
mkdir -p "$stage"/{bin,lib,plans}
cp $build/bin/tec-bench $build/bin/tec-gemm-bench $build/tests/gpu/tec-backend-parity-tests \
   $build/tests/gpu/tec-cuda-parity-tests "$stage/bin/"
cp $build/lib/libtec_cuda.so $build/runtime/libTecPlanProto.so "$stage/lib/"
# Non-system libraries the binaries load (the CUDA toolkit's own come from the GPU machine).
for lib in libprotobuf.so.32 libgomp.so.1 libgfortran.so.5 libquadmath.so.0; do
  cp -L "/lib/x86_64-linux-gnu/$lib" "$stage/lib/"
done
cp -L /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0 "$stage/lib/"
.venv/bin/python bench/gpu/make_models.py "$stage/models" --hidden "${hidden[@]}" > /dev/null
for h in "${hidden[@]}"; do
  $build/bin/tec "$stage/models/mlp_h$h.onnx" --train --loss mse --optimizer adamw --target sm_90 \
    -o "$stage/plans/fp8_h$h.tecplan" > /dev/null
  $build/bin/tec "$stage/models/mlp_h$h.onnx" --train --loss mse --optimizer adamw --target sm_80 \
    -o "$stage/plans/bf16_h$h.tecplan" > /dev/null
done
# Transformer Engine's benchmark layer (bench/gpu/bench.py --cases te), with its config and arena beside it.
.venv/bin/python bench/gpu/make_models.py "$stage/models" --hidden --gpt-layer > /dev/null
$build/bin/tec "$stage/models/gpt_layer.onnx" --train --loss mse --optimizer adamw --target sm_90 \
  -o "$stage/plans/te_gpt_fp8.tecplan" > /dev/null
# The same with FP8 attention (cuDNN's FP8 SDPA at head size 128), Transformer Engine's fp8_dpa.
$build/bin/tec "$stage/models/gpt_layer.onnx" --train --loss mse --optimizer adamw --target sm_90 --fp8-attention \
  -o "$stage/plans/te_gpt_fp8_attention.tecplan" > /dev/null
.venv/bin/python - "$stage/plans" <<'PY'
import json, subprocess, sys
sys.path.insert(0, "bench/gpu")
import make_models
plans = sys.argv[1]
info = json.loads(subprocess.run(["build/release/bin/tec", "inspect", "--json", f"{plans}/te_gpt_fp8.tecplan"],
                                 check=True, capture_output=True, text=True).stdout)
arena = next(int(v["arenaBytes"]) for v in info["variants"] if v.get("kind") == "train")
json.dump({"layer": make_models.TE_LAYER, "arena_bytes": arena}, open(f"{plans}/te_gpt_fp8.json", "w"))
PY
rm -rf "$stage/models"
# The test models' plans for tec-backend-parity-tests' ModelParity (flags as in BackendParityTest.cpp).
for model in mlp gpt_block gpt_block_decomposed; do
  $build/bin/tec tests/models/$model.onnx --target sm_90,sm_80,cpu --train --loss mse \
    -o "$stage/plans/$model.tecplan" > /dev/null
done
# The demo's GPU plans (its FP32 student is a CPU plan: nothing to run on a GPU).
cp demo-out/student_fp8.tecplan demo-out/gpt_student_fp8.tecplan demo-out/gpt_student_bf16.tecplan "$stage/plans/"
tar -C "$stage" -cf - . | xz -T2 -1 > gpu-bundle.tar.xz
rm -rf "$stage"
ls -la gpu-bundle.tar.xz
