// tec's own attention, forward and backward, 16/32-bit and FP8 (where cuDNN declines).
#include "kernels/cuda/Common.cuh"

namespace tec::kernels::cuda {

namespace {

/// Attention's score of key j for query row (b, h, i): scale q.k_j, masked (support/Attention.h).
__device__ float attentionScore(const AttentionShape &a, const float *q, ConstRef k, int64_t keyRow, ConstRef mask,
                                int64_t maskRow, int64_t j) {
  float s = 0.0f;
  for (int64_t d = 0; d < a.headDim; ++d)
    s += q[d] * load(k, (keyRow + j) * a.headDim + d);
  s *= a.scale;
  if (a.mask == AttentionMask::Additive)
    s = maskedScore(s, load(mask, maskRow + j * a.maskStrides[3]), true);
  else if (a.mask == AttentionMask::Boolean)
    s = maskedScore(s, 0.0f, static_cast<const bool *>(mask.data)[maskRow + j * a.maskStrides[3]]);
  return s;
}

/// The block's amax (NaN wins) folded into *target, a grid-wide max |x|, by one atomic; none without FP8.
__device__ void publishAmax(float *target, float local, float *shared) {
  const float amax = blockCombine(local, shared, [](float a, float b) { return maxAbsNanWins(a, b); });
  if (target && threadIdx.x == 0)
    atomicMaxAbs(target, amax);
}

/// FP8 attention's scale values, read from the device scalars in tec.attention_fp8's or
/// tec.attention_fp8_grad's order; all 1 (no rounding) for 16/32-bit attention.
__device__ AttentionFp8Scales readScales(const AttentionFp8Args &f, bool grad) {
  return f.scales[0] ? attentionFp8Scales(f.scales, grad, f.grads) : AttentionFp8Scales{};
}

/// acc[d] += sum over t < width of tile[t] * x[(first + t) * cols + d], each d by one thread: a tile of
/// probabilities (or score gradients) times the rows of V (or K, Q, dout) they weigh.
__device__ void accumulateTile(float *acc, const float *tile, int64_t width, ConstRef x, int64_t first, int64_t cols) {
  for (int64_t d = threadIdx.x; d < cols; d += blockDim.x) {
    float sum = 0.0f;
    for (int64_t t = 0; t < width; ++t)
      sum += tile[t] * load(x, (first + t) * cols + d);
    acc[d] += sum;
  }
}

/// One block per query row: the keys a block's width at a time, with the online softmax of the CPU kernel.
/// Shared: the query [D], the output accumulator [Dv], a tile of probabilities, the reduction scratch.
/// FP8 (`args` set) quantizes normalized probabilities, as the CPU kernel does: the online pass only finds
/// the row's logsumexp, a second one adds p = e^(s - lse) through E4M3 times V; operands are codes.
__global__ void attentionKernel(AttentionShape a, AttentionFp8Args args, ConstRef q, ConstRef k, ConstRef v,
                                ConstRef mask, Ref out, float *lse) {
  extern __shared__ float smem[];
  float *qRow = smem, *acc = qRow + a.headDim, *tile = acc + a.valueDim, *scratch = tile + blockDim.x;
  const AttentionFp8Scales f = readScales(args, false);
  const bool fp8 = args.scales[0] != nullptr;
  a.scale *= f.descaleQ * f.descaleK; // scores from the codes
  const int64_t row = blockIdx.x, b = row / (a.heads * a.queries), h = row / a.queries % a.heads, i = row % a.queries;
  const int64_t keyRow = (b * a.kvHeads + a.kvHeadOf(h)) * a.keys, maskRow = a.maskRow(b, h, i);
  for (int64_t d = threadIdx.x; d < a.headDim; d += blockDim.x)
    qRow[d] = load(q, row * a.headDim + d);
  for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x)
    acc[d] = 0.0f;
  __syncthreads();
  float m = -INFINITY, l = 0.0f;
  const int64_t end = a.visibleKeys(i);
  for (int64_t j0 = 0; j0 < end; j0 += blockDim.x) {
    const int64_t j = j0 + threadIdx.x, width = min(int64_t(blockDim.x), end - j0);
    const float s = j < end ? attentionScore(a, qRow, k, keyRow, mask, maskRow, j) : -INFINITY;
    const float mNew = fmaxf(m, blockMax(s, scratch));
    const float p = mNew == -INFINITY ? 0.0f : expNonPositive(s - mNew);
    const float correction = mNew == -INFINITY ? 1.0f : expNonPositive(m - mNew);
    l = l * correction + blockSum(p, scratch);
    m = mNew;
    if (fp8)
      continue;
    tile[threadIdx.x] = p;
    __syncthreads();
    for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x) {
      float sum = 0.0f;
      for (int64_t t = 0; t < width; ++t)
        sum += tile[t] * load(v, (keyRow + j0 + t) * a.valueDim + d);
      acc[d] = acc[d] * correction + sum;
    }
    __syncthreads();
  }
  const float rowLse = m + logf(l); // -inf for a row with every key hidden: NaN probabilities, as on the CPU
  if (threadIdx.x == 0)
    lse[row] = rowLse;
  if (!fp8) {
    for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x)
      store(out, row * a.valueDim + d, l == 0.0f ? NAN : acc[d] / l);
    return;
  }
  float probsAmax = 0.0f;
  for (int64_t j0 = 0; j0 < end; j0 += blockDim.x) {
    const int64_t j = j0 + threadIdx.x, width = min(int64_t(blockDim.x), end - j0);
    float p = 0.0f;
    if (j < end) {
      p = expNonPositive(attentionScore(a, qRow, k, keyRow, mask, maskRow, j) - rowLse);
      probsAmax = maxAbsNanWins(probsAmax, p);
      p = throughFp8(p, f.probsScale, f.probsDescale, Fp8Format::E4M3);
    }
    tile[threadIdx.x] = p;
    __syncthreads();
    accumulateTile(acc, tile, width, v, keyRow + j0, a.valueDim);
    __syncthreads();
  }
  float outAmax = 0.0f;
  for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x) {
    const float o = acc[d] * f.descaleV;
    outAmax = maxAbsNanWins(outAmax, o);
    store(out, row * a.valueDim + d, o * f.outScale);
  }
  publishAmax(args.amaxes[0], probsAmax, scratch);
  publishAmax(args.amaxes[1], outAmax, scratch);
}

/// dq for one query row, and its delta = dout . out (kept for attentionKeyGradKernel). With FP8 (`args`
/// set) the operands are codes scaled on the way, ds times the attention scale goes through FP8 before ds K
/// (cuDNN's dP), and dq is written
/// scaled, its amax and ds's published.
__global__ void attentionQueryGradKernel(AttentionShape a, AttentionFp8Args args, ConstRef dout, ConstRef q, ConstRef k,
                                         ConstRef v, ConstRef out, const float *lse, ConstRef mask, Ref dq,
                                         float *delta) {
  extern __shared__ float smem[];
  float *qRow = smem, *doRow = qRow + a.headDim, *acc = doRow + a.valueDim, *tile = acc + a.headDim,
        *scratch = tile + blockDim.x;
  const AttentionFp8Scales f = readScales(args, true);
  const bool fp8 = args.scales[0] != nullptr;
  AttentionShape codes = a; // scores from the codes
  codes.scale *= f.descaleQ * f.descaleK;
  const int64_t row = blockIdx.x, b = row / (a.heads * a.queries), h = row / a.queries % a.heads, i = row % a.queries;
  const int64_t keyRow = (b * a.kvHeads + a.kvHeadOf(h)) * a.keys, maskRow = a.maskRow(b, h, i);
  float dot = 0.0f;
  for (int64_t d = threadIdx.x; d < a.headDim; d += blockDim.x) {
    qRow[d] = load(q, row * a.headDim + d);
    acc[d] = 0.0f;
  }
  for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x) {
    doRow[d] = load(dout, row * a.valueDim + d) * f.descaleDout;
    dot += doRow[d] * load(out, row * a.valueDim + d) * f.descaleOut;
  }
  const float rowDelta = blockSum(dot, scratch), rowLse = lse[row];
  if (threadIdx.x == 0)
    delta[row] = rowDelta;
  float dsAmax = 0.0f;
  const int64_t end = a.visibleKeys(i);
  for (int64_t j0 = 0; j0 < end; j0 += blockDim.x) {
    const int64_t j = j0 + threadIdx.x, width = min(int64_t(blockDim.x), end - j0);
    float ds = 0.0f;
    if (j < end) {
      const float p = expNonPositive(attentionScore(codes, qRow, k, keyRow, mask, maskRow, j) - rowLse);
      float dp = 0.0f;
      for (int64_t d = 0; d < a.valueDim; ++d)
        dp += doRow[d] * load(v, (keyRow + j) * a.valueDim + d);
      ds = p * (dp * f.descaleV - rowDelta);
      if (fp8) {
        ds *= a.scale; // cuDNN's dP: the gradient of the unscaled Q K^T
        dsAmax = maxAbsNanWins(dsAmax, ds);
        ds = throughFp8(ds, f.dprobsScale, f.dprobsDescale, f.grads);
      }
    }
    tile[threadIdx.x] = ds;
    __syncthreads();
    accumulateTile(acc, tile, width, k, keyRow + j0, a.headDim);
    __syncthreads();
  }
  float dqAmax = 0.0f;
  for (int64_t d = threadIdx.x; d < a.headDim; d += blockDim.x) {
    const float g = (fp8 ? 1.0f : a.scale) * f.descaleK * acc[d];
    dqAmax = maxAbsNanWins(dqAmax, g);
    store(dq, row * a.headDim + d, g * f.dqScale);
  }
  publishAmax(args.amaxes[0], dqAmax, scratch);
  publishAmax(args.amaxes[3], dsAmax, scratch);
}

/// dk and dv for one key row, over every query head of its group that sees it; one block writes each row.
/// With FP8 as attentionQueryGradKernel: p goes through E4M3 before p^T dout, ds through FP8 before ds^T q.
__global__ void attentionKeyGradKernel(AttentionShape a, AttentionFp8Args args, ConstRef dout, ConstRef q, ConstRef k,
                                       ConstRef v, const float *lse, const float *delta, ConstRef mask, Ref dk, Ref dv) {
  extern __shared__ float smem[];
  float *kRow = smem, *vRow = kRow + a.headDim, *dkAcc = vRow + a.valueDim, *dvAcc = dkAcc + a.headDim,
        *pTile = dvAcc + a.valueDim, *dsTile = pTile + blockDim.x;
  const AttentionFp8Scales f = readScales(args, true);
  const bool fp8 = args.scales[0] != nullptr;
  const int64_t keyIndex = blockIdx.x, b = keyIndex / (a.kvHeads * a.keys), kvHead = keyIndex / a.keys % a.kvHeads,
                j = keyIndex % a.keys;
  for (int64_t d = threadIdx.x; d < a.headDim; d += blockDim.x) {
    kRow[d] = load(k, keyIndex * a.headDim + d) * f.descaleK;
    dkAcc[d] = 0.0f;
  }
  for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x) {
    vRow[d] = load(v, keyIndex * a.valueDim + d) * f.descaleV;
    dvAcc[d] = 0.0f;
  }
  __syncthreads();
  const int64_t group = a.heads / a.kvHeads, first = a.causal ? min(j, a.queries) : 0;
  for (int64_t h = kvHead * group; h < (kvHead + 1) * group; ++h)
    for (int64_t i0 = first; i0 < a.queries; i0 += blockDim.x) {
      const int64_t i = i0 + threadIdx.x, width = min(int64_t(blockDim.x), a.queries - i0);
      const int64_t row = (b * a.heads + h) * a.queries + i;
      float p = 0.0f, ds = 0.0f;
      if (i < a.queries) {
        float s = 0.0f, dp = 0.0f;
        for (int64_t d = 0; d < a.headDim; ++d)
          s += load(q, row * a.headDim + d) * kRow[d];
        s *= a.scale * f.descaleQ;
        const int64_t at = a.maskRow(b, h, i) + j * a.maskStrides[3];
        if (a.mask == AttentionMask::Additive)
          s = maskedScore(s, load(mask, at), true);
        else if (a.mask == AttentionMask::Boolean)
          s = maskedScore(s, 0.0f, static_cast<const bool *>(mask.data)[at]);
        if (a.causal && j > i)
          s = -INFINITY;
        p = expNonPositive(s - lse[row]);
        for (int64_t d = 0; d < a.valueDim; ++d)
          dp += load(dout, row * a.valueDim + d) * vRow[d];
        ds = p * (dp * f.descaleDout - delta[row]);
        if (fp8) {
          ds = throughFp8(ds * a.scale, f.dprobsScale, f.dprobsDescale, f.grads);
          p = throughFp8(p, f.probsScale, f.probsDescale, Fp8Format::E4M3);
        }
      }
      pTile[threadIdx.x] = p;
      dsTile[threadIdx.x] = ds;
      __syncthreads();
      const int64_t rows = (b * a.heads + h) * a.queries + i0;
      accumulateTile(dvAcc, pTile, width, dout, rows, a.valueDim);
      accumulateTile(dkAcc, dsTile, width, q, rows, a.headDim);
      __syncthreads();
    }
  float dkAmax = 0.0f, dvAmax = 0.0f;
  for (int64_t d = threadIdx.x; d < a.headDim; d += blockDim.x) {
    const float g = (fp8 ? 1.0f : a.scale) * f.descaleQ * dkAcc[d];
    dkAmax = maxAbsNanWins(dkAmax, g);
    store(dk, keyIndex * a.headDim + d, g * f.dkScale);
  }
  for (int64_t d = threadIdx.x; d < a.valueDim; d += blockDim.x) {
    const float g = dvAcc[d] * f.descaleDout;
    dvAmax = maxAbsNanWins(dvAmax, g);
    store(dv, keyIndex * a.valueDim + d, g * f.dvScale);
  }
  publishAmax(args.amaxes[1], dkAmax, pTile);
  publishAmax(args.amaxes[2], dvAmax, pTile);
}

} // namespace

size_t attentionSharedBytes(const AttentionShape &a, bool grad) {
  const int64_t floats = grad ? 2 * (a.headDim + a.valueDim) + 3 * kThreads : a.headDim + a.valueDim + 2 * kThreads;
  return static_cast<size_t>(floats) * sizeof(float);
}

void attention(const AttentionShape &a, ConstRef q, ConstRef k, ConstRef v, ConstRef mask, Ref out, float *lse,
               void *stream) {
  attentionFp8(a, AttentionFp8Args{}, q, k, v, mask, out, lse, stream);
}

void attentionFp8Grad(const AttentionShape &a, const AttentionFp8Args &f, ConstRef dout, ConstRef q, ConstRef k,
                      ConstRef v, ConstRef out, const float *lse, ConstRef mask, Ref dq, Ref dk, Ref dv, float *delta,
                      void *stream) {
  const int64_t rows = a.batch * a.heads * a.queries, keyRows = a.batch * a.kvHeads * a.keys;
  if (rows == 0 || keyRows == 0)
    return;
  const size_t shared = attentionSharedBytes(a, true);
  attentionQueryGradKernel<<<static_cast<unsigned>(rows), kThreads, shared, asStream(stream)>>>(a, f, dout, q, k, v,
                                                                                               out, lse, mask, dq, delta);
  attentionKeyGradKernel<<<static_cast<unsigned>(keyRows), kThreads, shared, asStream(stream)>>>(a, f, dout, q, k, v,
                                                                                                lse, delta, mask, dk, dv);
}

void attentionGrad(const AttentionShape &a, ConstRef dout, ConstRef q, ConstRef k, ConstRef v, ConstRef out,
                   const float *lse, ConstRef mask, Ref dq, Ref dk, Ref dv, float *delta, void *stream) {
  attentionFp8Grad(a, AttentionFp8Args{}, dout, q, k, v, out, lse, mask, dq, dk, dv, delta, stream);
}

void attentionFp8(const AttentionShape &a, const AttentionFp8Args &f, ConstRef q, ConstRef k, ConstRef v, ConstRef mask,
                  Ref out, float *lse, void *stream) {
  const int64_t rows = a.batch * a.heads * a.queries;
  if (rows == 0)
    return;
  attentionKernel<<<static_cast<unsigned>(rows), kThreads, attentionSharedBytes(a, false), asStream(stream)>>>(
      a, f, q, k, v, mask, out, lse);
}

} // namespace tec::kernels::cuda
