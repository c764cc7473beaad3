// The .tecplan file: a 64-byte header (magic, format version, offsets, checksum), the protobuf
// metadata, and a 64-byte-aligned raw data section mapped with mmap so weights load without copies.
#ifndef TEC_RUNTIME_PLANFILE_H
#define TEC_RUNTIME_PLANFILE_H

#include "support/Status.h"
#include "runtime/plan.pb.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tec {

inline constexpr uint32_t kPlanFormatVersion = 2; // 2: state may start as a described fill (Buffer.init_fill)
inline constexpr int64_t kPlanAlignment = 64;

/// The data section being assembled: chunks are referenced, not copied, until the file is written.
class PlanDataBuilder {
public:
  /// Appends `bytes` at the next 64-byte boundary; returns its offset in the data section.
  int64_t add(const void *data, int64_t bytes);
  /// The same for data the builder keeps (small constants made while compiling).
  int64_t addCopy(const void *data, int64_t bytes);
  int64_t size() const { return end; }

  struct Chunk {
    const void *data;
    int64_t offset, bytes;
  };
  const std::vector<Chunk> &chunks() const { return parts; }

private:
  std::vector<Chunk> parts;
  std::deque<std::vector<char>> owned;
  int64_t end = 0;
};

/// Writes the plan atomically: a temporary file beside `path`, fsync, rename.
Status writePlanFile(const std::string &path, const plan::Plan &plan, const PlanDataBuilder &data);

/// How tec writes every file it produces: into a temporary file beside `path`, every write checked,
/// synced, then renamed over `path`. On any failure (a full disk, a folder that is not writable) the
/// temporary is removed, `path` is left as it was and the error names it. `write` gets the descriptor
/// and returns false when a write failed.
Status writeFileAtomically(const std::string &path, const std::function<bool(int fd)> &write);
Status writeFileAtomically(const std::string &path, const std::string &bytes);
/// Writes all of `bytes` to `fd`, retrying short writes; false on an error.
bool writeAll(int fd, const void *bytes, size_t size);

class PlanFile {
public:
  /// Maps and validates a plan file; corrupt, truncated or other-version files are refused.
  static Result<std::unique_ptr<PlanFile>> open(const std::string &path);
  ~PlanFile();
  PlanFile(const PlanFile &) = delete;
  PlanFile &operator=(const PlanFile &) = delete;

  const plan::Plan &plan() const { return metadata; }
  const char *data() const { return dataStart; }
  int64_t dataSize() const { return dataBytes; }
  const std::string &path() const { return filePath; }
  /// Lets the pages of data bytes [offset, offset + bytes) go from memory (the whole pages inside it): a
  /// later read maps them from the file again, so this costs memory, never correctness.
  void releaseData(int64_t offset, int64_t bytes) const;

private:
  PlanFile() = default;
  std::string filePath;
  void *mapping = nullptr;
  size_t mappingBytes = 0;
  plan::Plan metadata;
  const char *dataStart = nullptr;
  int64_t dataBytes = 0;
};

/// Checks what the runtime relies on before it touches memory: buffer indices, sizes, offsets.
Status validatePlan(const plan::Plan &plan, int64_t dataBytes);

const char *dtypeName(plan::DType dtype);
int64_t dtypeBytes(plan::DType dtype);

} // namespace tec

#endif
