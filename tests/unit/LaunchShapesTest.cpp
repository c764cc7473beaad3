// The CUDA kernels' launch shapes, decided on the host (kernels/cuda/LaunchShapes.h): checked here without
// a GPU, with cuBLASLt's epilogue rules and which convolutions cuDNN takes. The oracle for coalescing is
// brute force: every index's address before and after.
#include "kernels/cuda/Cudnn.h"
#include "kernels/cuda/CudnnAttention.h"
#include "kernels/cuda/Gemm.h"
#include "kernels/cuda/LaunchShapes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

using namespace tec::kernels;
using namespace tec::kernels::cuda;

namespace {

/// The oracle for addresses: the definition, index by index over the dims.
int64_t referenceOffset(const Extent &e, const Strided &s, int64_t i) {
  std::vector<int64_t> index(e.rank);
  for (int d = e.rank - 1; d >= 0; --d) {
    index[d] = i % e.dims[d];
    i /= e.dims[d];
  }
  int64_t offset = s.base;
  for (int d = 0; d < e.rank; ++d)
    offset += index[d] * s.strides[d];
  return offset;
}

Extent extentOf(const Shape &shape) {
  Extent e;
  EXPECT_TRUE(makeExtent(shape, e));
  return e;
}

constexpr int kH200Sms = 132;

} // namespace

TEST(LaunchShapes, CoalescingKeepsEveryAddressAndDropsDims) {
  struct Case {
    Shape out, a, b;
    int rank;       // after coalescing
    bool contiguous; // both operands, no div/mod
  };
  for (const Case &c : {Case{{4, 5, 33}, {4, 5, 33}, {4, 5, 33}, 1, true},   // same shapes: one flat dim
                        Case{{64, 32}, {64, 32}, {32}, 2, false},          // a bias row
                        Case{{2, 3, 4, 5}, {2, 3, 4, 5}, {1, 1, 4, 5}, 2, false},
                        Case{{1, 7, 1, 9}, {1, 7, 1, 9}, {7, 1, 9}, 1, true}}) {
    Extent e = extentOf(c.out);
    Strided a = broadcastOperand(c.a, c.out), b = broadcastOperand(c.b, c.out);
    const Extent before = e;
    const Strided a0 = a, b0 = b;
    coalesce(e, {&a, &b});
    EXPECT_EQ(e.rank, c.rank);
    EXPECT_EQ(count(e), count(before));
    EXPECT_EQ(isContiguous(e, a) && isContiguous(e, b), c.contiguous);
    for (int64_t i = 0; i < count(before); ++i) {
      ASSERT_EQ(offsetOf(e, a, i), referenceOffset(before, a0, i)) << i;
      ASSERT_EQ(offsetOf(e, b, i), referenceOffset(before, b0, i)) << i;
    }
  }
}

// The kernels' addressing (one definition for both compilers) at every rank up to kMaxRank, broadcast and
// permuted operands included, against the definition.
TEST(LaunchShapes, EveryRankAddressesAsTheDefinitionSays) {
  for (int rank = 1; rank <= kMaxRank; ++rank) {
    Shape out(rank);
    for (int d = 0; d < rank; ++d)
      out[d] = 2 + (d * 5 + rank) % 3; // 2..4 each: 3^8 indices at most
    Shape broadcast = out;
    for (int d = 0; d < rank; d += 2)
      broadcast[d] = 1;
    const Extent e = extentOf(out);
    Strided permuted = contiguous(out);
    std::reverse(permuted.strides, permuted.strides + rank);
    permuted.base = 7;
    for (const Strided &s : {contiguous(out), broadcastOperand(broadcast, out), broadcastOperand({1}, out), permuted})
      for (int64_t i = 0; i < count(e); ++i)
        ASSERT_EQ(offsetOf(e, s, i), referenceOffset(e, s, i)) << "rank " << rank << ", index " << i;
  }
}

// Beyond 32 bits the addressing takes its 64-bit division: indices around 2^32 in a dim of 2^33 elements.
TEST(LaunchShapes, IndicesBeyondThirtyTwoBitsAddressAsTheDefinitionSays) {
  Extent e;
  e.rank = 2, e.dims[0] = 3, e.dims[1] = int64_t(1) << 33;
  Strided s;
  s.strides[0] = 1, s.strides[1] = 5;
  for (int64_t i : {int64_t(0), (int64_t(1) << 32) - 1, int64_t(1) << 32, (int64_t(1) << 33) + 7, 3 * (int64_t(1) << 33) - 1})
    EXPECT_EQ(offsetOf(e, s, i), referenceOffset(e, s, i)) << i;
}

// A grid ending in one atomic per block: what the GPU holds at once, fewer for a small tensor, at least one.
TEST(LaunchShapes, AtomicGridsAreWhatTheGpuHoldsAtOnce) {
  EXPECT_EQ(atomicGridBlocks(int64_t(1) << 26, 256, kH200Sms), kH200Sms * 8);
  EXPECT_EQ(atomicGridBlocks(1000, 256, kH200Sms), 4);
  EXPECT_EQ(atomicGridBlocks(0, 256, kH200Sms), 1);
  EXPECT_EQ(atomicGridBlocks(int64_t(1) << 40, 1024, 1), 2);
}

TEST(LaunchShapes, ATransposeStaysTwoDimensional) {
  // y[6, 4] = x[4, 6]ᵀ: src strides {1, 6}, which no merge may flatten.
  Extent e = extentOf({6, 4});
  Strided src, dst = contiguous({6, 4});
  src.strides[0] = 1;
  src.strides[1] = 6;
  coalesce(e, {&src, &dst});
  EXPECT_EQ(e.rank, 2);
  EXPECT_FALSE(isContiguous(e, src));
}

// The MSE loss's reduce_mean over a [8192, 8192] activation (every dim reduced): not one block on one
// SM but a grid that fills the GPU, contiguous (no div/mod), with a second stage over the partials.
TEST(LaunchShapes, AFullReductionFillsTheGpu) {
  Extent kept = extentOf({}), reduced = extentOf({8192, 8192});
  Strided keptStrides, reducedStrides = contiguous({8192, 8192});
  ReductionPlan p = planReduction(kept, keptStrides, reduced, reducedStrides, kH200Sms);
  EXPECT_EQ(p.kind, ReductionPlan::Kind::Rows);
  EXPECT_EQ(p.outputs, 1);
  EXPECT_EQ(p.reducedCount, int64_t(8192) * 8192);
  EXPECT_GE(int64_t(p.gridX) * p.gridY, 2 * kH200Sms);
  EXPECT_EQ(p.partials, p.splits);
  // The global norm of gradient clipping: a few small tensors stay one block each, no partials.
  Extent k2 = extentOf({}), r2 = extentOf({300});
  Strided ks2, rs2 = contiguous({300});
  ReductionPlan small = planReduction(k2, ks2, r2, rs2, kH200Sms);
  EXPECT_EQ(small.splits, 1);
  EXPECT_EQ(small.partials, 0);
}

// A bias gradient, the sum of dY [8192, 4096] over its rows: threads along the 4096 outputs (coalesced),
// the rows split over blocks along y.
TEST(LaunchShapes, AColumnSumWalksTheOutputsCoalesced) {
  Extent kept = extentOf({4096}), reduced = extentOf({8192});
  Strided keptStrides, reducedStrides;
  keptStrides.strides[0] = 1;
  reducedStrides.strides[0] = 4096;
  ReductionPlan p = planReduction(kept, keptStrides, reduced, reducedStrides, kH200Sms);
  EXPECT_EQ(p.kind, ReductionPlan::Kind::Columns);
  EXPECT_EQ(p.columnStride, 4096);
  EXPECT_EQ(p.gridX, 4096u / kReduceThreads);
  EXPECT_GT(p.gridY, 1u);
  EXPECT_GE(int64_t(p.gridX) * p.gridY, 2 * kH200Sms);
  EXPECT_EQ(p.partials, 4096 * p.splits);
}

TEST(LaunchShapes, ManyOutputsTakeOneBlockEach) {
  Extent kept = extentOf({8192}), reduced = extentOf({1000});
  Strided keptStrides = contiguous({8192}), reducedStrides;
  keptStrides.strides[0] = 1000;
  reducedStrides.strides[0] = 1;
  ReductionPlan p = planReduction(kept, keptStrides, reduced, reducedStrides, kH200Sms);
  EXPECT_EQ(p.kind, ReductionPlan::Kind::Rows);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.gridX, 8192u);
  EXPECT_EQ(p.partials, 0);
}

// 3 million tokens: the row tiles go on x (limit 2^31-1), not y (limit 65,535).
TEST(LaunchShapes, TransposeTilesPutTheLongDimensionOnX) {
  TileGrid g = transposeGrid(3'000'000, 64);
  EXPECT_EQ(g.x, (3'000'000u + kTile - 1) / kTile);
  EXPECT_EQ(g.y, 2u);
  TileGrid wide = transposeGrid(64, 4'000'000);
  EXPECT_EQ(wide.y, 65535u); // the rest by the kernel's grid-stride loop
}

// The block-scaled GEMM's output tiles: partial tiles at both edges, tokens on x, a wide N grid-strided.
TEST(LaunchShapes, BlockGemmTilesCoverPartialEdges) {
  TileGrid g = blockGemmGrid(130, 1);
  EXPECT_EQ(g.x, 3u);
  EXPECT_EQ(g.y, 1u);
  TileGrid tokens = blockGemmGrid(5'000'000, 4096);
  EXPECT_EQ(tokens.x, (5'000'000u + kBlockGemmTile - 1) / kBlockGemmTile);
  EXPECT_EQ(tokens.y, 64u);
  EXPECT_EQ(blockGemmGrid(1, 8'000'000).y, 65535u);
  EXPECT_EQ(kBlockGemmTile, 4 * kBlockGemmThreads); // each thread 4x4 outputs
}

// cuBLASLt's epilogue type rules, as the CUDA backend's fusion decisions use them.
TEST(GemmRules, Fp8GemmsAreTnMultiplesOf16WithABf16Bias) {
  using tec::kernels::ElementType;
  GemmSpec spec;
  spec.m = 64, spec.n = 96, spec.k = 128;
  spec.transposeB = true;
  spec.a = spec.b = ElementType::F8E4M3;
  spec.d = ElementType::F32;
  std::string shapeWhy;
  spec.n = 7;
  EXPECT_FALSE(cublasLtSupports(spec, shapeWhy));
  EXPECT_NE(shapeWhy.find("multiples of 16"), std::string::npos) << shapeWhy;
  spec.n = 96;
  spec.transposeB = false;
  EXPECT_FALSE(cublasLtSupports(spec, shapeWhy)) << "FP8 is TN only";
  spec.transposeB = true;
  spec.bias = ElementType::F32;
  std::string why;
  for (auto e : {GemmEpilogue::Bias, GemmEpilogue::GeluBias, GemmEpilogue::GeluAuxBias}) {
    spec.epilogue = e;
    spec.bias = ElementType::F32;
    EXPECT_FALSE(cublasLtSupports(spec, why)) << epilogueName(e);
    EXPECT_NE(why.find("bf16 bias"), std::string::npos) << why;
    spec.bias = fp8BiasType(spec.d);
    EXPECT_TRUE(cublasLtSupports(spec, why)) << epilogueName(e) << ": " << why;
  }
  spec.d = ElementType::F16;
  spec.bias = ElementType::F16;
  EXPECT_EQ(fp8BiasType(ElementType::F16), ElementType::F16);
  EXPECT_TRUE(cublasLtSupports(spec, why)) << why;
  // No bias gradient with FP8 inputs; DGELU and GELU_AUX without a bias need no bias type.
  spec.epilogue = GemmEpilogue::BGradB;
  EXPECT_FALSE(cublasLtSupports(spec, why));
  spec.epilogue = GemmEpilogue::DGelu;
  EXPECT_TRUE(cublasLtSupports(spec, why)) << why;
}

TEST(GemmRules, OtherGemmsTakeBiasAndBiasGradientOfTheOutputType) {
  using tec::kernels::ElementType;
  GemmSpec spec;
  spec.a = spec.b = spec.d = ElementType::BF16;
  spec.epilogue = GemmEpilogue::BGradB;
  spec.bias = ElementType::F32;
  std::string why;
  EXPECT_FALSE(cublasLtSupports(spec, why)); // what the BGRADB fusion asked for before: it never fused
  EXPECT_NE(why.find("output's type (bf16)"), std::string::npos) << why;
  spec.bias = ElementType::BF16;
  EXPECT_TRUE(cublasLtSupports(spec, why)) << why;
  spec.epilogue = GemmEpilogue::GeluAuxBias;
  EXPECT_TRUE(cublasLtSupports(spec, why)) << why;
  spec.a = spec.b = spec.d = spec.bias = ElementType::F32;
  spec.epilogue = GemmEpilogue::BGradB;
  EXPECT_TRUE(cublasLtSupports(spec, why)) << why;
}

// Float8BlockScaling's GEMMs on cuBLASLt's block scale modes (cuBLASLt 12.9): which blocks and layouts go
// there, and what cuBLASLt's documented limits send to tec's kernel instead.
TEST(GemmRules, BlockScaledGemmsTakeWhole128BlocksOfKMajorOperands) {
  using tec::kernels::ElementType;
  GemmScaling x = GemmScaling::Tensor, w = GemmScaling::Tensor;
  std::string why;
  ASSERT_TRUE(cublasBlockScaling({1, 128}, {128, 128}, true, x, w, why)) << why; // forward: activation x weight
  EXPECT_EQ(x, GemmScaling::Vec128);
  EXPECT_EQ(w, GemmScaling::Block128x128);
  ASSERT_TRUE(cublasBlockScaling({1, 128}, {1, 128}, true, x, w, why)) << why; // wgrad: gradient x activation
  EXPECT_EQ(w, GemmScaling::Vec128);
  EXPECT_FALSE(cublasBlockScaling({1, 128}, {128, 1}, false, x, w, why)); // a [K, N] operand
  EXPECT_NE(why.find("K-major"), std::string::npos) << why;
  EXPECT_FALSE(cublasBlockScaling({1, 128}, {128, 128}, false, x, w, why));
  EXPECT_FALSE(cublasBlockScaling({1, 32}, {1, 32}, true, x, w, why)); // MXFP8
  EXPECT_NE(why.find("1x32 x 1x32"), std::string::npos) << why;

  GemmSpec spec;
  spec.m = 64, spec.n = 96, spec.k = 384;
  spec.transposeB = true;
  spec.a = spec.b = ElementType::F8E4M3;
  spec.d = ElementType::BF16;
  spec.scalingA = GemmScaling::Vec128;
  spec.scalingB = GemmScaling::Block128x128;
  EXPECT_TRUE(cublasLtSupports(spec, why)) << why;
  spec.epilogue = GemmEpilogue::Bias;
  spec.bias = ElementType::BF16;
  EXPECT_TRUE(cublasLtSupports(spec, why)) << why;
  spec.epilogue = GemmEpilogue::GeluBias;
  EXPECT_FALSE(cublasLtSupports(spec, why));
  EXPECT_NE(why.find("plain or bias epilogue"), std::string::npos) << why;
  spec.epilogue = GemmEpilogue::Default;
  spec.k = 400; // a multiple of 16, a partial last block
  EXPECT_FALSE(cublasLtSupports(spec, why));
  EXPECT_NE(why.find("whole 128-blocks"), std::string::npos) << why;
  spec.k = 384;
  spec.fastAccumulation = true;
  EXPECT_FALSE(cublasLtSupports(spec, why));
  spec.fastAccumulation = false;
  spec.scalingA = GemmScaling::Block128x128;
  EXPECT_FALSE(cublasLtSupports(spec, why));
  EXPECT_NE(why.find("128x128 x 128x128"), std::string::npos) << why;
  spec.scalingA = GemmScaling::Tensor;
  EXPECT_FALSE(cublasLtSupports(spec, why));
  EXPECT_NE(why.find("both operands"), std::string::npos) << why;
  spec.scalingA = GemmScaling::Vec128;
  spec.transposeB = false;
  EXPECT_FALSE(cublasLtSupports(spec, why)) << "block scales are TN only, as FP8";
}

// The scale layouts against Transformer Engine's "GEMM-ready" shapes (its Float8BlockQuantizer and the
// FP8 blockwise scaling guide): 1x128 scales of data [A, B] are [B/128, pad4(A)], 128x128 scales
// [A/128, pad4(B/128)].
TEST(GemmRules, BlockScalesTakeTransformerEnginesGemmReadyLayout) {
  // An activation [5, 384]: 3 K blocks, rows padded to 8 in each K block's run.
  EXPECT_EQ(cublasScaleCount(GemmScaling::Vec128, 5, 3), 3 * 8);
  EXPECT_EQ(cublasScaleIndex(GemmScaling::Vec128, 0, 0, 5, 3), 0);
  EXPECT_EQ(cublasScaleIndex(GemmScaling::Vec128, 4, 0, 5, 3), 4);
  EXPECT_EQ(cublasScaleIndex(GemmScaling::Vec128, 0, 1, 5, 3), 8);
  EXPECT_EQ(cublasScaleIndex(GemmScaling::Vec128, 4, 2, 5, 3), 20);
  // A weight [256, 640]: 2 bands of 5 K tiles, each band's run padded to 8.
  EXPECT_EQ(cublasScaleCount(GemmScaling::Block128x128, 2, 5), 2 * 8);
  EXPECT_EQ(cublasScaleIndex(GemmScaling::Block128x128, 0, 4, 2, 5), 4);
  EXPECT_EQ(cublasScaleIndex(GemmScaling::Block128x128, 1, 0, 2, 5), 8);
  EXPECT_EQ(cublasScaleIndex(GemmScaling::Block128x128, 1, 4, 2, 5), 12);
  // Each scale its own place inside the count, for shapes with and without padding.
  for (auto s : {GemmScaling::Vec128, GemmScaling::Block128x128})
    for (int64_t rows : {1, 4, 7, 130})
      for (int64_t kBlocks : {1, 3, 4, 9}) {
        std::vector<int> seen(cublasScaleCount(s, rows, kBlocks), 0);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t b = 0; b < kBlocks; ++b) {
            const int64_t i = cublasScaleIndex(s, r, b, rows, kBlocks);
            ASSERT_GE(i, 0);
            ASSERT_LT(i, static_cast<int64_t>(seen.size()));
            EXPECT_EQ(seen[i]++, 0) << rows << "x" << kBlocks << " (" << r << ", " << b << ")";
          }
      }
}

TEST(GemmRules, AlignmentIsTheLargestPowerOfTwoUpTo256) {
  EXPECT_EQ(alignmentOf(0), 256);
  EXPECT_EQ(alignmentOf(512), 256);
  EXPECT_EQ(alignmentOf(140), 4);
  EXPECT_EQ(alignmentOf(168), 8);
  EXPECT_EQ(alignmentOf(3), 1);
}

namespace {

/// A ResNet stem: 3 -> 8 channels, 7x7, stride 2, pad 3 on every side.
ConvSpec stem(WindowKind kind) {
  ConvSpec spec;
  spec.kind = kind;
  Window &w = spec.window;
  w.batch = 2, w.channels = 3, w.height = w.width = 32, w.outChannels = 8, w.outHeight = w.outWidth = 16;
  w.kernelH = w.kernelW = 7, w.strideH = w.strideW = 2, w.padTop = w.padBottom = w.padLeft = w.padRight = 3;
  return spec;
}

} // namespace

TEST(ConvRules, CudnnTakesConvolutionsOfFloatTypesWithSymmetricPads) {
  std::string why;
  for (WindowKind kind : {WindowKind::Conv, WindowKind::ConvInputGrad, WindowKind::ConvWeightGrad})
    for (ElementType type : {ElementType::F32, ElementType::F16, ElementType::BF16}) {
      ConvSpec spec = stem(kind);
      spec.type = type;
      EXPECT_TRUE(cudnnTakes(spec, why)) << why;
    }
  ConvSpec grouped = stem(WindowKind::Conv);
  grouped.window.channels = 4, grouped.window.groups = 2, grouped.window.dilationH = 2;
  EXPECT_TRUE(cudnnTakes(grouped, why)) << why;
}

TEST(ConvRules, TecKernelsRunWhatCudnnCannotExpress) {
  std::string why;
  ConvSpec asymmetric = stem(WindowKind::Conv); // ONNX auto_pad SAME_UPPER with an even kernel
  asymmetric.window.padBottom = 4;
  EXPECT_FALSE(cudnnTakes(asymmetric, why));
  EXPECT_NE(why.find("pads differ"), std::string::npos) << why;
  ConvSpec integer = stem(WindowKind::Conv);
  integer.type = ElementType::I32;
  EXPECT_FALSE(cudnnTakes(integer, why));
  ConvSpec pool = stem(WindowKind::MaxPool);
  EXPECT_FALSE(cudnnTakes(pool, why));
  EXPECT_EQ(why, "not a convolution");
  ConvSpec uneven = stem(WindowKind::Conv);
  uneven.window.groups = 2; // 3 channels do not split in two
  EXPECT_FALSE(cudnnTakes(uneven, why));
}

namespace {

AttentionSpec gptAttention(ElementType type, bool grad) {
  AttentionSpec spec;
  spec.shape.batch = 2, spec.shape.heads = 16, spec.shape.kvHeads = 4, spec.shape.queries = 512,
  spec.shape.keys = 512, spec.shape.headDim = 64, spec.shape.valueDim = 64, spec.shape.causal = true;
  spec.type = type;
  spec.grad = grad;
  return spec;
}

} // namespace

TEST(AttentionRules, CudnnTakesSixteenBitAttentionWithAFullBias) {
  std::string why;
  for (ElementType type : {ElementType::BF16, ElementType::F16})
    for (bool grad : {false, true})
      EXPECT_TRUE(cudnnAttentionTakes(gptAttention(type, grad), why)) << why;
  AttentionSpec biased = gptAttention(ElementType::BF16, true);
  biased.shape.mask = AttentionMask::Additive;
  biased.shape.maskStrides[0] = 512 * 512, biased.shape.maskStrides[2] = 512, biased.shape.maskStrides[3] = 1;
  EXPECT_TRUE(cudnnAttentionTakes(biased, why)) << why; // [B, 1, Tq, Tk]: broadcast over heads
}

TEST(AttentionRules, TecKernelsRunWhatCudnnDoesNotTake) {
  std::string why;
  EXPECT_FALSE(cudnnAttentionTakes(gptAttention(ElementType::F32, false), why));
  EXPECT_NE(why.find("bf16 or f16"), std::string::npos) << why;
  AttentionSpec wide = gptAttention(ElementType::BF16, true);
  wide.shape.headDim = wide.shape.valueDim = 192; // forward only up to 256, backward up to 128
  EXPECT_FALSE(cudnnAttentionTakes(wide, why));
  wide.grad = false;
  EXPECT_TRUE(cudnnAttentionTakes(wide, why)) << why;
  AttentionSpec odd = gptAttention(ElementType::BF16, false);
  odd.shape.headDim = 20;
  EXPECT_FALSE(cudnnAttentionTakes(odd, why));
  AttentionSpec padding = gptAttention(ElementType::BF16, false); // HF's [B, 1, 1, Tk] padding mask
  padding.shape.mask = AttentionMask::Additive;
  padding.shape.maskStrides[0] = 512, padding.shape.maskStrides[3] = 1;
  EXPECT_FALSE(cudnnAttentionTakes(padding, why));
  EXPECT_NE(why.find("spans queries and keys"), std::string::npos) << why;
  AttentionSpec boolean = gptAttention(ElementType::BF16, false);
  boolean.shape.mask = AttentionMask::Boolean;
  EXPECT_FALSE(cudnnAttentionTakes(boolean, why));
}

TEST(AttentionRules, CudnnTakesFp8AttentionWithoutMasks) {
  std::string why;
  for (bool grad : {false, true}) {
    AttentionSpec fp8 = gptAttention(ElementType::F8E4M3, grad);
    fp8.fp8 = true;
    fp8.shape.headDim = fp8.shape.valueDim = 128; // TE's GPT layer: 4096 / 32 heads
    EXPECT_TRUE(cudnnAttentionTakes(fp8, why)) << why;
    fp8.shape.mask = AttentionMask::Additive; // cuDNN's FP8 attention has no bias
    fp8.shape.maskStrides[2] = 512, fp8.shape.maskStrides[3] = 1;
    EXPECT_FALSE(cudnnAttentionTakes(fp8, why));
    EXPECT_NE(why.find("no mask but the causal one"), std::string::npos) << why;
  }
  AttentionSpec wide = gptAttention(ElementType::F8E4M3, true);
  wide.fp8 = true;
  wide.shape.headDim = wide.shape.valueDim = 192; // FP8's backward up to 128
  EXPECT_FALSE(cudnnAttentionTakes(wide, why));
  wide.grad = false;
  EXPECT_TRUE(cudnnAttentionTakes(wide, why)) << why;
  AttentionSpec odd = gptAttention(ElementType::F8E4M3, false);
  odd.fp8 = true;
  odd.shape.headDim = 24; // FP8 needs multiples of 16
  EXPECT_FALSE(cudnnAttentionTakes(odd, why));
}

// cuDNN frontend's sdpa_fp8_bwd: on Hopper the FP8 backward takes head size 128 alone (a GPT-2 head of 64
// runs tec's kernels there), from Blackwell on multiples of 16 up to 128; Ada has no FP8 attention at all.
TEST(AttentionRules, Fp8AttentionLimitsArePerArchitecture) {
  std::string why;
  AttentionSpec gpt2 = gptAttention(ElementType::F8E4M3, true);
  gpt2.fp8 = true;
  gpt2.shape.headDim = gpt2.shape.valueDim = 64;
  gpt2.sm = 90;
  EXPECT_FALSE(cudnnAttentionTakes(gpt2, why));
  EXPECT_NE(why.find("backward on sm_90 takes head size 128 only, not 64"), std::string::npos) << why;
  gpt2.grad = false; // the forward takes it
  EXPECT_TRUE(cudnnAttentionTakes(gpt2, why)) << why;
  gpt2.grad = true;
  gpt2.sm = 100;
  EXPECT_TRUE(cudnnAttentionTakes(gpt2, why)) << why;
  AttentionSpec mla = gpt2; // DeepSeek's 192-wide queries and keys with 128-wide values
  mla.shape.headDim = 192, mla.shape.valueDim = 128;
  EXPECT_TRUE(cudnnAttentionTakes(mla, why)) << why;
  mla.sm = 90;
  EXPECT_FALSE(cudnnAttentionTakes(mla, why));
  AttentionSpec ada = gptAttention(ElementType::F8E4M3, false);
  ada.fp8 = true;
  ada.shape.headDim = ada.shape.valueDim = 128;
  ada.sm = 89;
  EXPECT_FALSE(cudnnAttentionTakes(ada, why));
  EXPECT_NE(why.find("needs Hopper"), std::string::npos) << why;
}
