#!/usr/bin/env bash
# `tec --emit=cuda` writes a host program that nvcc compiles against tec's kernels library.
# Usage: emit_cuda_test.sh TEC NVCC SOURCE_DIR KERNELS_LIBS MODELS_DIR WORK_DIR [HOST_LINK_FLAGS]
# (KERNELS_LIBS: the kernels libraries, colon-separated; $TEC_PYTHON has onnx, for the NCCL schedule check)
set -euo pipefail
tec=$1 nvcc=$2 src=$3 models=$5 work=$6
IFS=: read -ra kernels <<< "$4"
link=()
# Sanitized kernels (the asan preset) need the sanitizer runtimes at link time.
case "${7:-}" in *address*) link+=(-lasan) ;; esac
case "${7:-}" in *undefined*) link+=(-lubsan) ;; esac
# Training programs call NCCL: the toolkit's, or the nvidia-nccl wheel's ($TEC_NCCL_INCLUDE_DIR and its lib/).
nccl_include=${TEC_NCCL_INCLUDE_DIR:-/usr/local/cuda/include}
nccl=(-I"$nccl_include" -L"$nccl_include/../lib" -L"$nccl_include/../lib64" -l:libnccl.so.2)
rm -rf "$work" && mkdir -p "$work"
for model in mlp gpt_block; do
  "$tec" "$models/$model.onnx" --target all -o "$work/$model.tecplan" --emit=cuda > "$work/$model.log"
  grep -q "wrote $work/$model.cu: variant sm_100 as" "$work/$model.log"  # the best variant: Blackwell's
  # The sequence is the backend's: cuBLASLt GEMMs, FP8 quantize with fused amax (the MLP runs FP8 on
  # sm_100), softmax and layer norm (the GPT block, BF16 at this small size).
  grep -q "runGemm(\*gemms\[" "$work/$model.cu"
  case $model in
    mlp) grep -q "kc::quantizeWithAmax" "$work/$model.cu" ;;
    gpt_block) grep -q "kc::softmax" "$work/$model.cu" && grep -q "kc::layerNorm" "$work/$model.cu" ;;
  esac
  "$nvcc" -std=c++17 -I"$src" "$work/$model.cu" "${kernels[@]}" -lcublasLt "${link[@]}" -o "$work/$model"
  echo "$model: emitted and compiled"
done
# The FP8 training step: the backward GEMMs' TN operands quantized straight from their transposes, and
# every param's optimizer update in one launch.
"$tec" "$models/mlp.onnx" --target sm_90 --train --loss mse --optimizer adamw -o "$work/train.tecplan" \
  --emit=cuda > "$work/train.log"
grep -q "wrote $work/train.train.cu: variant sm_90 train step" "$work/train.log"
grep -q "kc::quantizeTransposedWithAmax" "$work/train.train.cu"
test "$(grep -c "kc::optimizerUpdate" "$work/train.train.cu")" -eq 1
"$nvcc" -std=c++17 -I"$src" "$work/train.train.cu" "${kernels[@]}" -lcublasLt "${nccl[@]}" "${link[@]}" -o "$work/train"
echo "train step: emitted and compiled"
# Data parallelism: the gradients in 0.5 MiB buckets, each all_reduce on NCCL's stream while the backward
# goes on, waited for before anything touches its result (check_collective_schedule.py says what it checks).
"$tec" "$models/mlp.onnx" --target sm_90 --train --loss mse --optimizer adamw --bucket-mb 0.5 \
  -o "$work/buckets.tecplan" --emit=cuda > "$work/buckets.log"
"${TEC_PYTHON:-python3}" "$(dirname "$0")/check_collective_schedule.py" "$work/buckets.train.cu" "$models/mlp.onnx"
# Every kernel of the GPT block's FP8 and BF16 training steps goes through the CUDA backend's compilers.
for target in sm_90 sm_80; do
  "$tec" "$models/gpt_block_decomposed.onnx" --target $target --train --loss mse --fp8=all \
    -o "$work/gpt_$target.tecplan" --emit=cuda > "$work/gpt_$target.log"
  "$nvcc" -std=c++17 -I"$src" "$work/gpt_$target.train.cu" "${kernels[@]}" -lcublasLt "${nccl[@]}" "${link[@]}" -o "$work/gpt_$target"
  echo "gpt_block_decomposed $target train step: emitted and compiled"
done
# The block-scaled recipes' training steps: Hopper's block scaling (1x128 x 128x128) and Blackwell's MXFP8
# (1x32, E8M0 scales), every operand quantized per block and every GEMM on tec's block-scaled kernel.
for recipe in block:sm_90 mxfp8:sm_100; do
  name=${recipe%:*} target=${recipe#*:}
  "$tec" "$models/mlp.onnx" --target "$target" --train --loss mse --fp8=all --fp8-recipe "$name" \
    -o "$work/$name.tecplan" --emit=cuda > "$work/$name.log"
  grep -q "wrote $work/$name.train.cu: variant $target train step" "$work/$name.log"
  grep -q "kc::quantizeBlocks" "$work/$name.train.cu"
  test "$(grep -c "kc::fp8BlockGemm" "$work/$name.train.cu")" -ge 3  # forward, dgrad, wgrad
  if grep -q "runGemm(\*gemms" "$work/$name.train.cu"; then echo "$name: a GEMM left block scaling"; exit 1; fi
  "$nvcc" -std=c++17 -I"$src" "$work/$name.train.cu" "${kernels[@]}" -lcublasLt "${nccl[@]}" "${link[@]}" -o "$work/$name"
  echo "mlp $name ($target) train step: emitted and compiled"
done
