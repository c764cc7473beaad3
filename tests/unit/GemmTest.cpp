// The CPU GEMM path: tec.linear's kernel (transposes, bias and activation applied per chunk as the BLAS
// writes it) against a plain double-precision product, and the table that chooses a BLAS per GEMM shape.
#include "kernels/cpu/Blas.h"
#include "kernels/cpu/CpuKernels.h"
#include "kernels/cpu/GemmTable.h"
#include "kernels/cpu/PackedGemm.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>

using namespace tec::kernels;
using namespace tec::kernels::cpu;

namespace {

double activate(Epilogue e, double z) {
  switch (e) {
  case Epilogue::None: return z;
  case Epilogue::Relu: return z > 0 ? z : 0;
  case Epilogue::Gelu: return 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
  case Epilogue::GeluTanh: return 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
  case Epilogue::Silu: return z / (1 + std::exp(-z));
  case Epilogue::HardSwish: return z * std::max(0.0, std::min(1.0, z / 6 + 0.5));
  }
  return z;
}

std::string temporaryFolder() {
  char name[] = "/tmp/tec-gemm-XXXXXX";
  return mkdtemp(name);
}

} // namespace

struct LinearCase {
  int64_t m, n, k;
  bool transA, transB, bias;
  Epilogue epilogue;
};

class LinearKernel : public ::testing::TestWithParam<LinearCase> {};

/// out = act(op(x) op(W) + b) + r against the same in double: both transposes, with and without a bias, every
/// epilogue, GEMMs small enough to run whole and large enough to split over the pool (64 rows: by columns);
/// where oneDNN can pack the weight once, the GEMM packed for its matmul and (but for a split by columns, whose
/// strided chunks of C oneDNN convolves with its reference loops only) for its 1x1 convolution too, each
/// packed bare, with the bias in its primitive (a step run alone, --no-fusion) and with all it takes of the
/// epilogue (the step with its activation and residual add folded in): the last two in the same bits.
TEST_P(LinearKernel, MatchesADoublePrecisionProduct) {
  ASSERT_TRUE(blas().loaded) << blas().library;
  const auto c = GetParam();
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> x(c.m * c.k), w(c.k * c.n), b(c.n), r(c.m * c.n), y(c.m * c.n), out(c.m * c.n);
  for (auto *v : {&x, &w, &b, &r})
    for (float &e : *v)
      e = normal(rng);
  std::vector<double> expected(c.m * c.n);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double z = c.bias ? b[j] : 0;
      for (int64_t p = 0; p < c.k; ++p)
        z += double(c.transA ? x[p * c.m + i] : x[i * c.k + p]) * (c.transB ? w[j * c.k + p] : w[p * c.n + j]);
      expected[i * c.n + j] = activate(c.epilogue, z) + r[i * c.n + j];
    }
  struct Form {
    std::string name;
    std::unique_ptr<PackedGemm> packed;
  };
  std::vector<Form> forms;
  forms.push_back({"unpacked", nullptr});
  if (!c.transA && c.k > 0)
    for (PackedGemm::Kernel kernel : PackedGemm::kKernels) {
      const bool columns = gemmSplit(c.m, c.n, c.k).by == GemmSplit::Columns;
      for (const FusedEpilogue &fused : {FusedEpilogue{}, FusedEpilogue{c.bias}, FusedEpilogue{c.bias, c.epilogue, true}}) {
        auto packed = PackedGemm::create(kernel, c.transB, c.m, c.n, c.k, w.data(), c.transB ? c.k : c.n, {}, fused);
        EXPECT_EQ(packed != nullptr,
                  PackedGemm::unavailable().empty() && (kernel == PackedGemm::Kernel::Matmul || !columns))
            << PackedGemm::name(kernel) << ": " << PackedGemm::unavailable();
        if (packed)
          forms.push_back({std::string(PackedGemm::name(kernel)) + (fused.bias ? ", bias" : "") +
                               (fused.residual ? ", epilogue" : "") + " fused (took " +
                               (packed->fused().bias ? "bias " : "") +
                               (packed->fused().activation != Epilogue::None ? "activation " : "") +
                               (packed->fused().residual ? "residual" : "") + ")",
                           std::move(packed)});
      }
    }
  for (int threads : {1, 2}) {
    setThreads(threads);
    std::vector<std::vector<float>> results;
    for (const Form &form : forms) {
      std::fill(y.begin(), y.end(), NAN);
      std::fill(out.begin(), out.end(), NAN);
      linear(x.data(), w.data(), c.bias ? b.data() : nullptr, y.data(), c.m, c.n, c.k, c.transA, c.transB,
             c.epilogue, r.data(), out.data(), form.packed.get());
      double worst = 0;
      for (int64_t i = 0; i < c.m * c.n; ++i)
        worst = std::max(worst, std::abs(expected[i] - out[i]) / (1 + std::abs(expected[i])));
      EXPECT_LT(worst, 2e-5) << c.m << "x" << c.n << "x" << c.k << " transA " << c.transA << " transB " << c.transB
                             << " on " << threads << " threads, " << form.name;
      results.push_back(out);
    }
    for (size_t i = 3; i < forms.size(); i += 3) // each kernel's bias-fused and epilogue-fused forms
      EXPECT_EQ(results[i - 1], results[i]) << forms[i - 1].name << " and " << forms[i].name << " on " << threads
                                            << " threads";
  }
  setThreads(0);
}

/// A GEMM split by rows, its bias, ReLU and residual applied by oneDNN's 1x1 convolution as it stores each
/// chunk (a pointwise convolution's epilogue), where oneDNN is loaded.
TEST(PackedGemm, TheConvolutionTakesTheBiasReluAndResidual) {
  if (!PackedGemm::unavailable().empty())
    GTEST_SKIP() << PackedGemm::unavailable();
  std::vector<float> w(24 * 96, 0.5f);
  ASSERT_EQ(gemmSplit(3136, 96, 24).by, GemmSplit::Rows);
  auto packed = PackedGemm::create(PackedGemm::Kernel::Convolution, true, 3136, 96, 24, w.data(), 24, {},
                                   FusedEpilogue{true, Epilogue::Relu, true});
  ASSERT_NE(packed, nullptr);
  EXPECT_TRUE(packed->fused().bias);
  EXPECT_EQ(packed->fused().activation, Epilogue::Relu);
  EXPECT_TRUE(packed->fused().residual);
  auto silu = PackedGemm::create(PackedGemm::Kernel::Convolution, true, 3136, 96, 24, w.data(), 24, {},
                                 FusedEpilogue{true, Epilogue::Silu, true});
  ASSERT_NE(silu, nullptr);
  EXPECT_TRUE(silu->fused().bias);
  EXPECT_EQ(silu->fused().activation, Epilogue::None); // tec's SiLU, and so its residual add after it
  EXPECT_FALSE(silu->fused().residual);
}

/// Where oneDNN 2 is loaded (./dev installs it), a weight packs once for the GEMM of a small batch (split by
/// columns: for the matmul) and of many rows (split by rows: for either primitive), and the GEMM table names
/// both.
TEST(PackedGemm, PacksAConstantWeightWhereOneDnnIsLoaded) {
  if (!PackedGemm::unavailable().empty())
    GTEST_SKIP() << PackedGemm::unavailable();
  std::vector<float> w(1024 * 1024, 0.5f);
  ASSERT_EQ(gemmSplit(4096, 512, 1024).by, GemmSplit::Rows);
  EXPECT_NE(PackedGemm::create(PackedGemm::Kernel::Matmul, false, 64, 1024, 1024, w.data(), 1024), nullptr);
  EXPECT_NE(PackedGemm::create(PackedGemm::Kernel::Matmul, true, 8, 256, 512, w.data(), 512), nullptr);
  for (PackedGemm::Kernel kernel : PackedGemm::kKernels)
    EXPECT_NE(PackedGemm::create(kernel, false, 4096, 512, 1024, w.data(), 512), nullptr) << PackedGemm::name(kernel);
  const int libraries = static_cast<int>(blas().libraries.size());
  EXPECT_EQ(PackedGemm::ofChoice(libraries - 1), std::nullopt);
  EXPECT_EQ(PackedGemm::ofChoice(libraries), PackedGemm::Kernel::Matmul);
  EXPECT_EQ(PackedGemm::ofChoice(libraries + 1), PackedGemm::Kernel::Convolution);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearKernel,
    ::testing::Values(LinearCase{7, 5, 3, false, false, true, Epilogue::Relu},
                      LinearCase{7, 5, 3, true, false, false, Epilogue::None},
                      LinearCase{7, 5, 3, true, true, true, Epilogue::GeluTanh},
                      LinearCase{64, 1024, 48, false, true, true, Epilogue::Gelu},
                      LinearCase{64, 1024, 48, true, false, true, Epilogue::GeluTanh},
                      LinearCase{640, 96, 40, true, true, true, Epilogue::Relu},
                      LinearCase{640, 96, 40, false, false, false, Epilogue::None},
                      LinearCase{640, 96, 40, false, true, true, Epilogue::Silu},
                      LinearCase{7, 5, 3, true, false, true, Epilogue::HardSwish},
                      // Splits whose last chunk is part of a block: 196 rows, 200 columns.
                      LinearCase{196, 112, 640, false, false, true, Epilogue::Silu},
                      // Split by rows into chunks of two heights (496 and 504), as a pointwise conv's.
                      LinearCase{1000, 40, 24, false, true, true, Epilogue::HardSwish},
                      LinearCase{1000, 40, 24, false, false, true, Epilogue::Relu},
                      LinearCase{1000, 40, 24, false, true, false, Epilogue::None},
                      LinearCase{49, 200, 96, false, true, true, Epilogue::Relu},
                      LinearCase{5, 300, 0, false, true, true, Epilogue::Relu}));

/// The chunks of a split cover C's split dim once, in order: an even count (two threads get equal halves),
/// whole 16-element blocks but the last, sizes within a block of each other and at least 32 wide.
TEST(GemmSplit, CutsEvenChunksOfWholeBlocks) {
  int splits = 0;
  for (int64_t m : {1, 7, 49, 64, 196, 784, 3136, 12544})
    for (int64_t n : {1, 16, 96, 192, 200, 480, 672, 1000, 1152})
      for (int64_t k : {16, 112, 1152}) {
        const GemmSplit split = gemmSplit(m, n, k);
        const int64_t along = split.by == GemmSplit::Rows ? m : n;
        EXPECT_EQ(split.along, split.by == GemmSplit::Whole ? n : along);
        if (split.by == GemmSplit::Whole) {
          EXPECT_EQ(split.count, 1);
          continue;
        }
        ++splits;
        EXPECT_EQ(split.count % 2, 0) << m << "x" << n << "x" << k;
        EXPECT_LE(split.count, 8);
        EXPECT_EQ(split.start(0), 0);
        EXPECT_EQ(split.start(split.count), along);
        int64_t smallest = along, largest = 0;
        for (int64_t c = 0; c < split.count; ++c) {
          const int64_t size = split.start(c + 1) - split.start(c);
          if (c + 1 < split.count)
            EXPECT_EQ(size % GemmSplit::kAlign, 0) << m << "x" << n << "x" << k << " chunk " << c;
          smallest = std::min(smallest, size), largest = std::max(largest, size);
        }
        EXPECT_GE(smallest, 16) << m << "x" << n << "x" << k;
        EXPECT_LE(largest - smallest, GemmSplit::kAlign) << m << "x" << n << "x" << k;
        EXPECT_GE(along / split.count, 32) << m << "x" << n << "x" << k;
      }
  EXPECT_GT(splits, 20); // the cases reach the splits
}

/// A single row or column of C (a batch of one: the matrix-vector products that a CBLAS library's SGEMV
/// runs) in every loaded library, against double: both transposes, leading dims past the shape, alpha, and
/// beta 0 over a C of NaN (ignored) or 1 (accumulated), whole and split over the pool.
TEST(Sgemm, EveryLibraryMultipliesASingleRowOrColumn) {
  ASSERT_TRUE(blas().loaded) << blas().library;
  struct Shape {
    int64_t m, n, k;
  };
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (int library = 0; library < static_cast<int>(blas().libraries.size()); ++library)
    for (Shape s : {Shape{1, 37, 19}, Shape{1, 1000, 1024}, Shape{29, 1, 17}, Shape{2000, 1, 600}, Shape{1, 1, 9}})
      for (bool transA : {false, true})
        for (bool transB : {false, true})
          for (float beta : {0.0f, 1.0f}) {
            const int64_t lda = (transA ? s.m : s.k) + 3, ldb = (transB ? s.k : s.n) + 2, ldc = s.n + 1;
            std::vector<float> a((transA ? s.k : s.m) * lda), b((transB ? s.n : s.k) * ldb), c(s.m * ldc);
            for (auto *v : {&a, &b, &c})
              for (float &e : *v)
                e = normal(rng);
            const std::vector<float> before = c;
            if (beta == 0.0f)
              std::fill(c.begin(), c.end(), NAN);
            for (int threads : {1, 2}) {
              setThreads(threads);
              std::vector<float> out = c;
              sgemm(library, transA, transB, s.m, s.n, s.k, 0.5f, a.data(), lda, b.data(), ldb, beta, out.data(), ldc);
              double worst = 0;
              for (int64_t i = 0; i < s.m; ++i)
                for (int64_t j = 0; j < s.n; ++j) {
                  double z = 0;
                  for (int64_t p = 0; p < s.k; ++p)
                    z += double(transA ? a[p * lda + i] : a[i * lda + p]) * (transB ? b[j * ldb + p] : b[p * ldb + j]);
                  z = 0.5 * z + (beta == 0.0f ? 0.0 : before[i * ldc + j]);
                  worst = std::max(worst, std::abs(z - out[i * ldc + j]) / (1 + std::abs(z)));
                }
              EXPECT_LT(worst, 2e-5) << blas().libraries[library].name << " " << s.m << "x" << s.n << "x" << s.k
                                     << " transA " << transA << " transB " << transB << " beta " << beta << " on "
                                     << threads << " threads";
            }
          }
  setThreads(0);
}

/// The fastest library by measurement, measured once per shape and then read back, in this process and the
/// next (a new table on the same file measures nothing it already has).
TEST(GemmTable, KeepsTheFastestLibraryPerShape) {
  const std::string path = temporaryFolder() + "/sub/gemm.tsv";
  int measured = 0;
  auto measure = [&](const GemmShape &s) {
    ++measured;
    return s.m == 64 ? std::vector<double>{2.0, 1.0} : std::vector<double>{1.0, 3.0};
  };
  {
    GemmTable table(path, {"OpenBLAS 0.3", "MKL 2025"}, measure);
    EXPECT_TRUE(table.problem().empty()) << table.problem();
    EXPECT_EQ(table.choose({false, true, 64, 1024, 1024}), 1);
    EXPECT_EQ(table.choose({false, false, 512, 256, 1024}), 0);
    EXPECT_EQ(table.choose({false, true, 64, 1024, 1024}), 1);
    EXPECT_EQ(measured, 2);
  }
  GemmTable again(path, {"OpenBLAS 0.3", "MKL 2025"}, [](const GemmShape &) -> std::vector<double> {
    ADD_FAILURE() << "measured a shape the table has";
    return {1.0, 1.0};
  });
  EXPECT_EQ(again.choose({false, true, 64, 1024, 1024}), 1);
  EXPECT_EQ(again.choose({false, false, 512, 256, 1024}), 0);

  // Another set of libraries (MKL updated) measures anew; so does a damaged line.
  measured = 0;
  GemmTable updated(path, {"OpenBLAS 0.3", "MKL 2026"}, measure);
  EXPECT_EQ(updated.choose({false, true, 64, 1024, 1024}), 1);
  EXPECT_EQ(measured, 1);
  {
    std::ofstream damage(path, std::ios::app);
    damage << "0 1 64 x 7 0 1\n1 0 32 32 32 0 9\n";
  }
  measured = 0;
  GemmTable damaged(path, {"OpenBLAS 0.3", "MKL 2026"}, measure);
  EXPECT_EQ(damaged.choose({true, false, 32, 32, 32}), 0); // the line naming library 9 was not believed
  EXPECT_EQ(measured, 1);
}

/// With one library there is nothing to measure; a folder that cannot be made keeps the table in memory.
TEST(GemmTable, MeasuresOnlyWhenThereIsAChoice) {
  GemmTable single("/tmp/unused.tsv", {"OpenBLAS"}, [](const GemmShape &) -> std::vector<double> {
    ADD_FAILURE() << "measured with one library";
    return {1.0};
  });
  EXPECT_EQ(single.choose({false, false, 8, 8, 8}), 0);
  int measured = 0;
  GemmTable nowhere("/proc/tec-cannot/gemm.tsv", {"A", "B"}, [&](const GemmShape &) {
    ++measured;
    return std::vector<double>{5.0, 4.0};
  });
  EXPECT_NE(nowhere.problem().find("cannot create"), std::string::npos) << nowhere.problem();
  EXPECT_EQ(nowhere.choose({false, false, 8, 8, 8}), 1);
  EXPECT_EQ(nowhere.choose({false, false, 8, 8, 8}), 1);
  EXPECT_EQ(measured, 1);
}

/// Two threads asking for the same new shape at once measure it once and agree.
TEST(GemmTable, AgreesAcrossThreads) {
  const std::string path = temporaryFolder() + "/gemm.tsv";
  std::atomic<int> measured{0};
  GemmTable table(path, {"A", "B"}, [&](const GemmShape &) {
    ++measured;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return std::vector<double>{3.0, 2.0};
  });
  int first = -1, second = -1;
  std::thread other([&] { second = table.choose({false, false, 16, 16, 16}); });
  first = table.choose({false, false, 16, 16, 16});
  other.join();
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 1);
  EXPECT_EQ(measured, 1);
}

/// A residual added in the epilogue: the sum written over the residual itself (an in-place add) equals the
/// GEMM's output plus the residual, and the GEMM's own output is left as X · W.
TEST(LinearKernel, AddsAResidualInTheEpilogue) {
  ASSERT_TRUE(blas().loaded) << blas().library;
  const int64_t m = 64, n = 640, k = 32;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> x(m * k), w(n * k), b(n), residual(m * n), y(m * n), plain(m * n);
  for (auto *v : {&x, &w, &b, &residual})
    for (float &e : *v)
      e = normal(rng);
  linear(x.data(), w.data(), b.data(), plain.data(), m, n, k, false, true, Epilogue::Relu);
  std::vector<float> sum = residual;
  linear(x.data(), w.data(), b.data(), y.data(), m, n, k, false, true, Epilogue::Relu, sum.data(), sum.data());
  for (int64_t i = 0; i < m * n; ++i)
    ASSERT_EQ(sum[i], plain[i] + residual[i]) << i;
}
