#include "runtime/PlanFile.h"

#include "runtime/StepContracts.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tec {

namespace {

constexpr char kMagic[8] = {'T', 'E', 'C', 'P', 'L', 'A', 'N', '\0'};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t headerBytes;
  uint64_t metadataOffset, metadataBytes;
  uint64_t dataOffset, dataBytes;
  uint64_t checksum;
  uint64_t reserved;
};
static_assert(sizeof(Header) == 64, "the header is 64 bytes on disk");

/// FNV-1a over 8-byte words, fed as a byte stream (pieces of any length hash as their concatenation):
/// fast enough to check a large plan at load, and any flipped bit shows.
class Checksum {
public:
  void update(const char *p, uint64_t n) {
    while (n && pendingBytes) {
      pending[pendingBytes++] = *p++;
      --n;
      if (pendingBytes == 8)
        mixPending();
    }
    for (; n >= 8; n -= 8, p += 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      mix(w);
    }
    while (n--)
      pending[pendingBytes++] = *p++;
  }
  uint64_t finish() {
    for (int i = 0; i < pendingBytes; ++i)
      hash = (hash ^ static_cast<unsigned char>(pending[i])) * kPrime;
    pendingBytes = 0;
    return hash;
  }

private:
  static constexpr uint64_t kPrime = 0x100000001b3ULL;
  void mix(uint64_t w) { hash = (hash ^ w) * kPrime; }
  void mixPending() {
    uint64_t w;
    std::memcpy(&w, pending, 8);
    mix(w);
    pendingBytes = 0;
  }
  uint64_t hash = 0xcbf29ce484222325ULL;
  char pending[8] = {};
  int pendingBytes = 0;
};

int64_t alignUp(int64_t v) { return (v + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment; }

Status ioError(const std::string &what, const std::string &path) {
  return Status::error(path + ": " + what + ": " + std::strerror(errno));
}


} // namespace

bool writeAll(int fd, const void *data, size_t bytes) {
  auto *p = static_cast<const char *>(data);
  while (bytes) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    p += n;
    bytes -= n;
  }
  return true;
}

int64_t PlanDataBuilder::add(const void *data, int64_t bytes) {
  int64_t offset = alignUp(end);
  parts.push_back({data, offset, bytes});
  end = offset + bytes;
  return offset;
}

int64_t PlanDataBuilder::addCopy(const void *data, int64_t bytes) {
  auto &copy = owned.emplace_back(static_cast<const char *>(data), static_cast<const char *>(data) + bytes);
  return add(copy.data(), bytes);
}

Status writePlanFile(const std::string &path, const plan::Plan &plan, const PlanDataBuilder &data) {
  // Deterministic: a step's attributes are a protobuf map, whose order is otherwise a per-process hash's,
  // and the same model and options must give the same plan file, byte for byte.
  std::string metadata;
  {
    google::protobuf::io::StringOutputStream stream(&metadata);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!plan.SerializeToCodedStream(&coded))
      return Status::error(path + ": cannot serialize the plan metadata");
  }
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kPlanFormatVersion;
  header.headerBytes = sizeof(Header);
  header.metadataOffset = sizeof(Header);
  header.metadataBytes = metadata.size();
  header.dataOffset = alignUp(sizeof(Header) + metadata.size());
  header.dataBytes = data.size();
  Checksum sum;
  sum.update(metadata.data(), metadata.size());
  std::vector<char> padding(kPlanAlignment, 0);
  {
    // The checksum runs over the data section exactly as written, padding included.
    int64_t at = 0;
    for (const auto &c : data.chunks()) {
      sum.update(padding.data(), c.offset - at);
      sum.update(static_cast<const char *>(c.data), c.bytes);
      at = c.offset + c.bytes;
    }
  }
  header.checksum = sum.finish();

  return writeFileAtomically(path, [&](int fd) {
    if (!writeAll(fd, &header, sizeof(header)) || !writeAll(fd, metadata.data(), metadata.size()) ||
        !writeAll(fd, padding.data(), header.dataOffset - sizeof(Header) - metadata.size()))
      return false;
    int64_t at = 0;
    for (const auto &c : data.chunks()) {
      if (!writeAll(fd, padding.data(), c.offset - at) || !writeAll(fd, c.data, c.bytes))
        return false;
      at = c.offset + c.bytes;
    }
    return true;
  });
}

Status writeFileAtomically(const std::string &path, const std::function<bool(int fd)> &write) {
  std::string temp = path + ".tmp.XXXXXX";
  int fd = mkstemp(temp.data());
  if (fd < 0)
    return ioError("cannot create a temporary file beside it", path);
  auto fail = [&](const std::string &what) {
    Status s = ioError(what, path);
    ::close(fd);
    ::unlink(temp.c_str());
    return s;
  };
  if (!write(fd))
    return fail("write failed");
  if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0)
    return fail("fsync failed");
  if (::close(fd) != 0) {
    ::unlink(temp.c_str());
    return ioError("close failed", path);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    Status s = ioError("cannot rename the temporary file into place", path);
    ::unlink(temp.c_str());
    return s;
  }
  return Status::success();
}

Status writeFileAtomically(const std::string &path, const std::string &bytes) {
  return writeFileAtomically(path, [&](int fd) { return writeAll(fd, bytes.data(), bytes.size()); });
}

PlanFile::~PlanFile() {
  if (mapping)
    ::munmap(mapping, mappingBytes);
}

Result<std::unique_ptr<PlanFile>> PlanFile::open(const std::string &path) {
  // Non-blocking: opening a FIFO for reading would otherwise wait for a writer forever.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return ioError("cannot open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return ioError("cannot stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error(path + ": not a regular file");
  }
  auto refuse = [&](const std::string &why) { return Status::error(path + ": not a usable tec plan: " + why); };
  if (static_cast<uint64_t>(st.st_size) < sizeof(Header)) {
    ::close(fd);
    return refuse("the file is " + std::to_string(st.st_size) + " bytes, shorter than the 64-byte header (truncated?)");
  }
  void *mapping = ::mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED)
    return ioError("cannot mmap", path);
  std::unique_ptr<PlanFile> file(new PlanFile());
  file->filePath = path;
  file->mapping = mapping;
  file->mappingBytes = st.st_size;
  auto *base = static_cast<const char *>(mapping);
  Header header;
  std::memcpy(&header, base, sizeof(header));
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0)
    return refuse("bad magic (expected a .tecplan written by `tec model.onnx`)");
  if (header.version != kPlanFormatVersion)
    return refuse("format version " + std::to_string(header.version) + ", but this tec reads version " +
                  std::to_string(kPlanFormatVersion) + "; recompile the model with this tec");
  const uint64_t size = st.st_size;
  if (header.headerBytes != sizeof(Header) || header.metadataOffset > size ||
      header.metadataBytes > size - header.metadataOffset || header.dataOffset > size ||
      header.dataBytes > size - header.dataOffset || header.dataOffset % kPlanAlignment)
    return refuse("the header's sections do not fit in the file's " + std::to_string(size) + " bytes (truncated?)");
  // Laid out as writePlanFile writes it, and nothing else: the metadata right after the header, the data
  // section aligned after it, the file ending with the data (bytes appended, or a plan concatenated with
  // itself, would otherwise load as the first plan).
  if (header.metadataOffset != sizeof(Header) || header.dataOffset != alignUp(sizeof(Header) + header.metadataBytes) ||
      header.reserved != 0)
    return refuse("the header's layout is not the one tec writes");
  if (header.dataOffset + header.dataBytes != size)
    return refuse(std::to_string(size - header.dataOffset - header.dataBytes) +
                  " bytes follow the data section (a file appended to the plan?)");
  file->dataStart = base + header.dataOffset;
  file->dataBytes = header.dataBytes;
  Checksum sum;
  sum.update(base + header.metadataOffset, header.metadataBytes);
  // A piece at a time, each let go once hashed: the check reads every byte, but the parameters become
  // resident only when the backend reads them (a multi-GiB plan is not held twice while it is copied).
  constexpr uint64_t kPiece = uint64_t(64) << 20;
  for (uint64_t done = 0; done < header.dataBytes; done += kPiece) {
    const uint64_t piece = std::min(kPiece, header.dataBytes - done);
    sum.update(base + header.dataOffset + done, piece);
    file->releaseData(static_cast<int64_t>(done), static_cast<int64_t>(piece));
  }
  if (sum.finish() != header.checksum)
    return refuse("checksum mismatch: the file is corrupt");
  if (!file->metadata.ParseFromArray(base + header.metadataOffset, static_cast<int>(header.metadataBytes)))
    return refuse("the metadata does not parse");
  if (Status s = validatePlan(file->metadata, file->dataBytes); !s.ok())
    return refuse(s.message());
  return file;
}

const char *dtypeName(plan::DType dtype) {
  switch (dtype) {
  case plan::F32: return "f32";
  case plan::F16: return "f16";
  case plan::BF16: return "bf16";
  case plan::I32: return "i32";
  case plan::I64: return "i64";
  case plan::BOOL: return "bool";
  case plan::F8E4M3FN: return "f8e4m3fn";
  case plan::F8E5M2: return "f8e5m2";
  default: return "?";
  }
}

int64_t dtypeBytes(plan::DType dtype) {
  switch (dtype) {
  case plan::F32:
  case plan::I32: return 4;
  case plan::F16:
  case plan::BF16: return 2;
  case plan::I64: return 8;
  case plan::BOOL:
  case plan::F8E4M3FN:
  case plan::F8E5M2: return 1;
  default: return 0;
  }
}

void PlanFile::releaseData(int64_t offset, int64_t bytes) const {
  if (offset < 0 || bytes <= 0 || offset > dataBytes || bytes > dataBytes - offset)
    return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(dataStart + offset) + page - 1) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(dataStart + offset + bytes) / page * page;
  if (end > begin) // a private, read-only file mapping: dropped pages are read from the file again if touched
    ::madvise(reinterpret_cast<void *>(begin), end - begin, MADV_DONTNEED);
}

Status validatePlan(const plan::Plan &plan, int64_t dataBytes) {
  if (plan.variants().empty())
    return Status::error("the plan has no variants");
  for (const auto &v : plan.variants()) {
    const std::string where = "variant '" + v.target() + "'";
    const int n = v.buffers_size();
    for (int i = 0; i < n; ++i) {
      const auto &b = v.buffers(i);
      int64_t count = 1;
      for (int64_t d : b.shape()) {
        if (d < 0 || (d && count > (int64_t(1) << 50) / d))
          return Status::error(where + ": buffer '" + b.name() + "' has an invalid shape");
        count *= d;
      }
      if (dtypeBytes(b.dtype()) == 0 || b.bytes() != count * dtypeBytes(b.dtype()))
        return Status::error(where + ": buffer '" + b.name() + "' has a size that does not match its shape");
      if (b.alias_of() >= n || b.alias_of() == i || (b.alias_of() >= 0 && v.buffers(b.alias_of()).alias_of() >= 0))
        return Status::error(where + ": buffer '" + b.name() + "' aliases an invalid buffer");
      const auto &root = b.alias_of() >= 0 ? v.buffers(b.alias_of()) : b;
      bool inData = root.role() == plan::PARAM || root.role() == plan::CONSTANT;
      int64_t limit = inData ? dataBytes : v.arena_bytes();
      if (root.offset() < 0 || b.bytes() > root.bytes() || root.offset() > limit - root.bytes())
        return Status::error(where + ": buffer '" + b.name() + "' lies outside the " +
                             (inData ? "data section" : "arena"));
      if (b.role() == plan::STATE && b.has_init_fill() && b.dtype() != plan::F32)
        return Status::error(where + ": state '" + b.name() + "' starts as a fill but is not f32");
      if (b.role() == plan::STATE && !b.has_init_fill() &&
          (b.init_offset() < 0 || b.init_offset() > dataBytes - b.bytes()))
        return Status::error(where + ": state '" + b.name() + "' has its initial value outside the data section");
    }
    for (const auto &s : v.steps())
      for (const auto &list : {s.inputs(), s.outputs()})
        for (int idx : list)
          if (idx < 0 || idx >= n)
            return Status::error(where + ": step '" + s.kernel() + "' refers to buffer " + std::to_string(idx) +
                                 " of " + std::to_string(n));
    for (const auto &list : {v.inputs(), v.outputs()})
      for (int idx : list)
        if (idx < 0 || idx >= n)
          return Status::error(where + ": an input/output refers to buffer " + std::to_string(idx));
    for (const auto &s : v.steps())
      if (Status st = checkStepContract(v, s); !st.ok())
        return st;
    int inputNames = v.input_names_size() ? v.input_names_size() : plan.input_names_size();
    int outputNames = v.output_names_size() ? v.output_names_size() : plan.output_names_size();
    if (v.inputs_size() != inputNames || v.outputs_size() != outputNames)
      return Status::error(where + ": its inputs/outputs do not match the model's names");
  }
  return Status::success();
}

} // namespace tec
