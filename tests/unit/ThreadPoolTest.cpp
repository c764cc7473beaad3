// tec's CPU thread pool: every index exactly once, chunks fixed by the range and grain, nested loops on the
// calling thread, and the pool's GEMM split giving the same bits for any thread count.
#include "kernels/cpu/Blas.h"
#include "kernels/cpu/ThreadPool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <vector>

using namespace tec::kernels::cpu;

TEST(ThreadPool, RunsEveryIndexOnceInTheChunksItWasGiven) {
  for (int threads : {1, 2, 3}) {
    setPoolThreads(threads);
    EXPECT_EQ(poolThreads(), threads);
    for (int64_t n : {0, 1, 7, 1000, 4097})
      for (int64_t grain : {1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int64_t> badChunks{0};
        parallelFor(n, grain, [&](int64_t begin, int64_t end) {
          // A chunk starts at a multiple of the grain and ends a grain later or at n.
          if (begin % grain || end != std::min(n, begin + grain))
            ++badChunks;
          for (int64_t i = begin; i < end; ++i)
            ++hits[i];
        });
        EXPECT_EQ(badChunks, 0) << "n " << n << " grain " << grain;
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i], 1) << "index " << i << " of " << n << ", grain " << grain << ", threads " << threads;
      }
  }
  setPoolThreads(0);
}

TEST(ThreadPool, RunsANestedLoopOnTheCallingThread) {
  setPoolThreads(2);
  std::atomic<int> wrongThread{0}, inner{0};
  parallelFor(8, 1, [&](int64_t, int64_t) {
    const auto outer = std::this_thread::get_id();
    parallelFor(100, 1, [&](int64_t begin, int64_t end) {
      inner += static_cast<int>(end - begin);
      wrongThread += std::this_thread::get_id() != outer;
    });
  });
  EXPECT_EQ(inner, 800);
  EXPECT_EQ(wrongThread, 0);
  setPoolThreads(0);
}

TEST(ThreadPool, CountsTheCpusThisProcessMayUse) {
  const int cpus = availableCpus();
  EXPECT_GE(cpus, 1);
  EXPECT_LE(cpus, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

/// GEMMs split over the pool in chunks fixed by their shape: the same result, bit for bit, for 1 to 3
/// threads, for a small-M GEMM split over its columns and a tall one over its rows, both transposes.
TEST(ThreadPool, SplitGemmsGiveTheSameBitsForAnyThreadCount) {
  ASSERT_TRUE(blas().loaded) << blas().library;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (auto [m, n, k] : {std::array<int64_t, 3>{64, 1024, 512}, std::array<int64_t, 3>{2048, 96, 256}})
    for (bool transB : {false, true}) {
      std::vector<float> a(m * k), b(k * n);
      for (float &x : a)
        x = normal(rng);
      for (float &x : b)
        x = normal(rng);
      std::vector<float> reference;
      for (int threads : {1, 2, 3}) {
        setPoolThreads(threads);
        std::vector<float> c(m * n, 0.5f);
        sgemm(false, transB, m, n, k, 1.0f, a.data(), k, b.data(), transB ? k : n, 1.0f, c.data(), n);
        if (reference.empty())
          reference = c;
        else
          EXPECT_EQ(c, reference) << m << "x" << n << "x" << k << " on " << threads << " threads";
      }
    }
  setPoolThreads(0);
}

/// Two sessions on two threads: each loop covers its range once, one on the pool and the other alone.
TEST(ThreadPool, RunsLoopsFromTwoThreadsAtOnce) {
  setPoolThreads(2);
  auto loops = [](std::vector<int> &hits) {
    for (int round = 0; round < 200; ++round)
      parallelFor(static_cast<int64_t>(hits.size()), 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          ++hits[i];
      });
  };
  std::vector<int> a(1000, 0), b(777, 0);
  std::thread other([&] { loops(b); });
  loops(a);
  other.join();
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](int h) { return h == 200; }));
  EXPECT_TRUE(std::all_of(b.begin(), b.end(), [](int h) { return h == 200; }));
  setPoolThreads(0);
}
