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

class GemmTable {
public:
  /// Times one GEMM of the shape with each library: milliseconds, in the order of `libraries` (a library
  /// that cannot run the shape: infinity).
  using Measure = std::function<std::vector<double>(const GemmShape &)>;

  /// `path` empty: the table lives in memory only. `libraries` names the loaded libraries; a table written
  /// for another set (a library installed or removed since) is not read.
  GemmTable(std::string path, std::vector<std::string> libraries, Measure measure);

  /// The library for `shape` (an index into `libraries`): the table's entry, else measured now and added.
  /// Concurrent processes measuring the same shape agree: the table file is locked while one measures.
  int choose(const GemmShape &shape);

  const std::string &path() const { return path_; }
  /// Why the table is not kept on disk (the path could not be written), or empty.
  const std::string &problem() const { return problem_; }

private:
  bool readFile();
  void writeFile();

  std::string path_, problem_;
  std::vector<std::string> libraries_;
  Measure measure_;
  std::mutex mutex_;
  std::map<GemmShape, int> choices_;
};

/// Where tec keeps files of this machine: $TEC_CACHE_DIR, else $XDG_CACHE_HOME/tec, else ~/.cache/tec.
std::string cacheDirectory();

} // namespace tec::kernels::cpu

#endif
