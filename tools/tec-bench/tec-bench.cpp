// tec-bench: times a compiled plan (inference or training steps) and prints one JSON object. Links the
// runtime only, no LLVM or MLIR, so that it runs where the compiler cannot be installed (bench/gpu).
#include "api/Runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>

namespace {

int usage() {
  std::fprintf(stderr, "usage: tec-bench PLAN [--kind inference|train] [--variant TARGET] [--device auto|cpu|cuda]\n"
                       "                      [--warmup N] [--iterations N] [--strict] [--profile]\n"
                       "       tec-bench --doctor [PLAN]   (tec doctor's report, without the compiler)\n");
  return 2;
}

std::string escaped(const std::string &text) {
  std::string out;
  for (char c : text)
    out += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  return out;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return usage();
  if (std::strcmp(argv[1], "--doctor") == 0) {
    auto report = tec::doctorReport(argc > 2 ? argv[2] : "");
    if (!report.ok()) {
      std::fprintf(stderr, "error: %s\n", report.error().message().c_str());
      return 2;
    }
    std::fputs(report->c_str(), stdout);
    return 0;
  }
  std::string path = argv[1];
  tec::SessionOptions options;
  int warmup = 3, iterations = 20;
  bool profile = false;
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--strict") { // no value: any fallback note fails the benchmark
      options.strict = true;
      continue;
    }
    if (flag == "--profile") { // no value: each plan step's mean time too (timed runs, one sync per step)
      profile = true;
      continue;
    }
    if (i + 1 >= argc)
      return usage();
    std::string value = argv[++i];
    if (flag == "--kind")
      options.kind = value;
    else if (flag == "--variant")
      options.variant = value;
    else if (flag == "--device")
      options.device = value;
    else if (flag == "--warmup")
      warmup = std::max(0, std::atoi(value.c_str()));
    else if (flag == "--iterations")
      iterations = std::max(1, std::atoi(value.c_str()));
    else
      return usage();
  }
  auto session = tec::Session::open(path, options);
  if (!session.ok()) {
    std::fprintf(stderr, "error: %s\n", session.error().message().c_str());
    return 2;
  }
  tec::Session &s = **session;
  std::mt19937_64 rng(0);
  for (size_t i = 0; i < s.inputs().size(); ++i)
    tec::fillRandom(s.inputData(i), s.inputs()[i], rng);
  std::vector<double> millis;
  for (int i = 0; i < warmup + iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    if (tec::Status st = s.run(); !st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      return 1;
    }
    if (i >= warmup)
      millis.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  // The profile comes from runs of its own: per-step timing syncs after every launch and captures no graph,
  // so it must not lengthen the timed runs above.
  std::vector<double> stepMillis(s.variant().steps_size());
  for (int i = 0; profile && i < iterations; ++i)
    if (tec::Status st = s.run(&stepMillis); !st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      return 1;
    }
  std::sort(millis.begin(), millis.end());
  double first = 0;
  if (!s.outputs().empty() && s.outputs()[0].dtype == tec::plan::F32)
    first = *static_cast<const float *>(s.outputData(0));
  // What ran instead of a faster path (a fused epilogue cuBLASLt lacks, a graph that could not be captured).
  std::string notes;
  for (const std::string &line : s.notes())
    notes += (notes.empty() ? "\"" : ", \"") + escaped(line) + "\"";
  // The slowest steps first, each one's mean time per run: where a step's time goes (like trtexec --dumpProfile).
  std::string steps;
  if (profile) {
    std::vector<int> order(stepMillis.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return stepMillis[a] > stepMillis[b]; });
    for (int i : order) {
      char entry[256];
      std::snprintf(entry, sizeof(entry), "%s{\"step\": %d, \"kernel\": \"%s\", \"ms\": %.4f}", steps.empty() ? "" : ", ",
                    i, escaped(s.variant().steps(i).kernel()).c_str(), stepMillis[i] / iterations);
      steps += entry;
    }
    steps = ", \"profile\": [" + steps + "]";
  }
  std::printf("{\"plan\": \"%s\", \"kind\": \"%s\", \"variant\": \"%s\", \"precision\": \"%s\", \"backend\": \"%s\", "
              "\"reason\": \"%s\", \"iterations\": %d, \"median_ms\": %.4f, \"min_ms\": %.4f, \"max_ms\": %.4f, "
              "\"first_output\": %.6g, \"notes\": [%s]%s}\n",
              escaped(path).c_str(), options.kind.c_str(), s.variant().target().c_str(), s.variant().precision().c_str(),
              s.backendName().c_str(), escaped(s.selectionReason()).c_str(), iterations, millis[millis.size() / 2],
              millis.front(), millis.back(), first, notes.c_str(), steps.c_str());
  return 0;
}
