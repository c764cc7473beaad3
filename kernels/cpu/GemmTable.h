// Which BLAS runs a GEMM of a given shape, by measurement: with more than one BLAS loaded (OpenBLAS, MKL),
// the first GEMM of each shape times every library once and the fastest is kept in a table on disk, per
// machine and library set, so later runs and processes choose the same library without measuring again.
// The same library for a shape in every process matters beyond speed: training resumes bit for bit.
#ifndef TEC_KERNELS_CPU_GEMMTABLE_H
#define TEC_KERNELS_CPU_GEMMTABLE_H

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace tec::kernels::cpu {

struct GemmShape {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  /// B is the same on every call (a weight during inference): it may be packed once (PackedGemm.h).
  bool constantB = false;
  auto key() const { return std::tuple(transA, transB, m, n, k, constantB); }
  bool operator<(const GemmShape &o) const { return key() < o.key(); }
};

/// Choices among named candidates (libraries, kernels) measured once per key (a shape as text) and kept in
/// a file per machine and candidate set, so that later runs and processes choose alike without measuring.
class ChoiceTable {
public:
  /// `kind` names the table in its first line ("GEMM table v4"); a file of another kind or candidate set (a
  /// library installed or removed since) is not read. `path` empty: the table lives in memory only.
  ChoiceTable(std::string path, std::string kind, std::vector<std::string> candidates);

  /// The candidate for `key` (an index into the candidates): the table's entry, else `measure` (each
  /// candidate's milliseconds, infinity where it cannot run) now, the fastest added. Concurrent processes
  /// measuring the same key agree: the file is locked while one measures.
  int choose(const std::string &key, const std::function<std::vector<double>()> &measure);

  const std::string &path() const { return path_; }
  /// Why the table is not kept on disk (the path could not be written), or empty.
  const std::string &problem() const { return problem_; }

private:
  bool readFile();
  void writeFile();

  std::string path_, kind_, problem_;
  std::vector<std::string> candidates_;
  std::mutex mutex_;
  std::map<std::string, int> choices_;
};

class GemmTable {
public:
  /// Times one GEMM of the shape with each library: milliseconds, in the order of `libraries` (a library
  /// that cannot run the shape: infinity).
  using Measure = std::function<std::vector<double>(const GemmShape &)>;

  /// `path` empty: the table lives in memory only. `libraries` names the loaded libraries; a table written
  /// for another set (a library installed or removed since) is not read.
  GemmTable(std::string path, std::vector<std::string> libraries, Measure measure)
      : table_(std::move(path), "GEMM table v4", std::move(libraries)), measure_(std::move(measure)) {}

  /// The library for `shape` (an index into `libraries`): the table's entry, else measured now and added.
  int choose(const GemmShape &shape);

  const std::string &path() const { return table_.path(); }
  const std::string &problem() const { return table_.problem(); }

private:
  ChoiceTable table_;
  Measure measure_;
};

/// Where tec keeps files of this machine: $TEC_CACHE_DIR, else $XDG_CACHE_HOME/tec, else ~/.cache/tec.
std::string cacheDirectory();

} // namespace tec::kernels::cpu

#endif
