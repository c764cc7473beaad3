#include "api/TensorFiles.h"

#include "ir/TecOps.h"
#include "runtime/PlanFile.h"

#include "llvm/Support/JSON.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

namespace tec {

namespace {

const char *npyDescr(plan::DType t) {
  switch (t) {
  case plan::F32: return "<f4";
  case plan::F16: return "<f2";
  case plan::I32: return "<i4";
  case plan::I64: return "<i8";
  case plan::BOOL: return "|b1";
  case plan::BF16: return "<u2"; // numpy has no bfloat16: the raw bits
  default: return "|u1";         // FP8: the raw bits
  }
}

Result<plan::DType> dtypeFromNpy(const std::string &descr, const std::string &path) {
  if (descr == "<f4")
    return plan::F32;
  if (descr == "<f2")
    return plan::F16;
  if (descr == "<i4")
    return plan::I32;
  if (descr == "<i8")
    return plan::I64;
  if (descr == "|b1")
    return plan::BOOL;
  if (descr == "<u2")
    return plan::BF16;
  return Status::error(path + ": numpy dtype '" + descr + "' is not supported (float32, float16, int32, int64, bool)");
}

/// The whole of a regular file (a directory, a FIFO or a device is refused before it is opened, so
/// nothing blocks or throws on it).
Result<std::string> readRegularFile(const std::string &path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status))
    return Status::error(path + ": cannot open (no such file)");
  if (!std::filesystem::is_regular_file(status))
    return Status::error(path + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::error(path + ": cannot open");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad())
    return Status::error(path + ": cannot read");
  return all;
}

/// numpy's header: a Python dict literal with exactly 'descr' (a string), 'fortran_order' (True or
/// False) and 'shape' (a tuple of non-negative integers), parsed strictly: anything else is an error.
struct NpyHeader {
  std::string descr;
  bool fortranOrder = false;
  std::vector<int64_t> shape;
};

class NpyHeaderParser {
public:
  explicit NpyHeaderParser(const std::string &text) : text(text) {}
  /// Empty on success, else what is wrong.
  std::string parse(NpyHeader &h) {
    bool descr = false, order = false, shape = false;
    if (!take('{'))
      return "expected '{'";
    while (!take('}')) {
      std::string key;
      if (!string(key) || !take(':'))
        return "expected 'key': value";
      bool &seen = key == "descr" ? descr : key == "fortran_order" ? order : key == "shape" ? shape : unknown;
      if (&seen == &unknown)
        return "unknown key '" + key + "'";
      if (seen)
        return "key '" + key + "' appears twice";
      seen = true;
      if (key == "descr" && !string(h.descr))
        return "'descr' is not a string";
      if (key == "fortran_order" && !boolean(h.fortranOrder))
        return "'fortran_order' is neither True nor False";
      if (key == "shape") {
        if (std::string why = tuple(h.shape); !why.empty())
          return "'shape' " + why;
      }
      if (!take(',') && !peek('}'))
        return "expected ',' or '}'";
    }
    skipSpace();
    if (pos != text.size())
      return "text after the dict";
    if (!descr || !order || !shape)
      return "missing 'descr', 'fortran_order' or 'shape'";
    return "";
  }

private:
  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\n' || text[pos] == '\t'))
      ++pos;
  }
  bool peek(char c) {
    skipSpace();
    return pos < text.size() && text[pos] == c;
  }
  bool take(char c) {
    if (!peek(c))
      return false;
    ++pos;
    return true;
  }
  bool string(std::string &out) {
    skipSpace();
    if (pos >= text.size() || (text[pos] != '\'' && text[pos] != '"'))
      return false;
    const char quote = text[pos++];
    const size_t end = text.find(quote, pos);
    if (end == std::string::npos)
      return false;
    out = text.substr(pos, end - pos);
    pos = end + 1;
    return true;
  }
  bool word(const char *w) {
    skipSpace();
    if (text.compare(pos, std::strlen(w), w) != 0)
      return false;
    pos += std::strlen(w);
    return true;
  }
  bool boolean(bool &out) {
    if (word("True"))
      return out = true, true;
    if (word("False"))
      return out = false, true;
    return false;
  }
  std::string tuple(std::vector<int64_t> &dims) {
    if (!take('('))
      return "is not a tuple";
    while (!take(')')) {
      skipSpace();
      const size_t begin = pos;
      while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])))
        ++pos;
      if (pos == begin)
        return "holds something other than non-negative integers";
      if (pos - begin > 18)
        return "holds a dim too large for int64";
      dims.push_back(std::stoll(text.substr(begin, pos - begin)));
      if (!take(',') && !peek(')'))
        return "holds something other than non-negative integers";
    }
    return "";
  }
  const std::string &text;
  size_t pos = 0;
  bool unknown = false;
};

/// count x width bytes of `dims`, or an error naming `path` when that is negative or overflows.
Result<int64_t> byteCount(const std::vector<int64_t> &dims, int64_t width, const std::string &path) {
  const auto elements = shape::elementCount(dims);
  if (!elements)
    return Status::error(path + ": dims whose element count is negative or overflows int64");
  const int64_t count = *elements;
  if (count > std::numeric_limits<int64_t>::max() / width)
    return Status::error(path + ": dims whose byte size overflows int64");
  return count * width;
}

Result<HostTensor> readNpy(const std::string &path) {
  auto file = readRegularFile(path);
  if (!file.ok())
    return file.error();
  const std::string &all = *file;
  if (all.size() < 10 || all.compare(0, 6, "\x93NUMPY") != 0)
    return Status::error(path + ": not a .npy file");
  const int major = static_cast<unsigned char>(all[6]);
  if (major < 1 || major > 3)
    return Status::error(path + ": .npy format version " + std::to_string(major) + " is not supported (1, 2 or 3)");
  size_t headerLen = 0, start = major == 1 ? 10 : 12;
  if (all.size() < start)
    return Status::error(path + ": truncated .npy header");
  for (size_t i = 8; i < start; ++i)
    headerLen |= static_cast<size_t>(static_cast<unsigned char>(all[i])) << (8 * (i - 8));
  if (headerLen > all.size() - start)
    return Status::error(path + ": truncated .npy header");
  NpyHeader h;
  if (std::string why = NpyHeaderParser(all.substr(start, headerLen)).parse(h); !why.empty())
    return Status::error(path + ": malformed .npy header: " + why);
  auto dtype = dtypeFromNpy(h.descr, path);
  if (!dtype.ok())
    return dtype.error();
  if (h.fortranOrder)
    return Status::error(path + ": Fortran-ordered arrays are not supported (use np.ascontiguousarray)");
  HostTensor t;
  t.dtype = *dtype;
  t.shape = h.shape;
  auto bytes = byteCount(t.shape, dtypeBytes(t.dtype), path);
  if (!bytes.ok())
    return bytes.error();
  const size_t data = all.size() - start - headerLen;
  if (data != static_cast<uint64_t>(*bytes))
    return Status::error(path + ": holds " + std::to_string(data) + " bytes of data, expected " + std::to_string(*bytes));
  t.bytes.assign(all.begin() + start + headerLen, all.end());
  return t;
}

Result<HostTensor> readPb(const std::string &path) {
  auto file = readRegularFile(path);
  if (!file.ok())
    return file.error();
  onnx::TensorProto proto;
  if (!proto.ParseFromString(*file))
    return Status::error(path + ": not an ONNX TensorProto");
  HostTensor t;
  switch (proto.data_type()) {
  case onnx::TensorProto::FLOAT: t.dtype = plan::F32; break;
  case onnx::TensorProto::FLOAT16: t.dtype = plan::F16; break;
  case onnx::TensorProto::BFLOAT16:
  // ONNX's test data stores bfloat16 tensors as UINT16 bit patterns (numpy has no bfloat16).
  case onnx::TensorProto::UINT16: t.dtype = plan::BF16; break;
  case onnx::TensorProto::INT32: t.dtype = plan::I32; break;
  case onnx::TensorProto::INT64: t.dtype = plan::I64; break;
  case onnx::TensorProto::BOOL: t.dtype = plan::BOOL; break;
  default: return Status::error(path + ": tensor element type " + std::to_string(proto.data_type()) + " is not supported");
  }
  if (proto.data_location() == onnx::TensorProto::EXTERNAL)
    return Status::error(path + ": a TensorProto with external data is not supported here");
  t.shape.assign(proto.dims().begin(), proto.dims().end());
  const int64_t width = dtypeBytes(t.dtype);
  auto bytes = byteCount(t.shape, width, path);
  if (!bytes.ok())
    return bytes.error();
  const int64_t count = *bytes / width;
  // The data must be there before anything is allocated for it.
  const int typedFields = (proto.float_data_size() > 0) + (proto.int32_data_size() > 0) + (proto.int64_data_size() > 0);
  if (typedFields + proto.has_raw_data() > 1)
    return Status::error(path + ": the tensor holds its data in more than one field");
  if (proto.has_raw_data()) {
    if (static_cast<int64_t>(proto.raw_data().size()) != *bytes)
      return Status::error(path + ": raw data holds " + std::to_string(proto.raw_data().size()) + " bytes, expected " +
                           std::to_string(*bytes));
    t.bytes.assign(proto.raw_data().begin(), proto.raw_data().end());
  } else if (t.dtype == plan::F32 && proto.float_data_size() == count) {
    const auto *values = reinterpret_cast<const char *>(proto.float_data().data());
    t.bytes.assign(values, values + *bytes); // (an empty tensor's field has no storage at all)
  } else if (t.dtype == plan::I64 && proto.int64_data_size() == count) {
    const auto *values = reinterpret_cast<const char *>(proto.int64_data().data());
    t.bytes.assign(values, values + *bytes);
  } else if (t.dtype != plan::F32 && t.dtype != plan::I64 && proto.int32_data_size() == count) {
    t.bytes.resize(*bytes);
    for (int64_t i = 0; i < count; ++i) {
      uint32_t v = static_cast<uint32_t>(proto.int32_data(i));
      std::memcpy(t.bytes.data() + i * width, &v, width);
    }
  } else {
    return Status::error(path + ": tensor data does not match its dims [" + std::to_string(count) + " values]");
  }
  return t;
}

} // namespace

std::string fileNameFor(const std::string &name) {
  std::string file = name;
  std::replace_if(file.begin(), file.end(), [](char c) { return c == '/' || c == '\\' || c == ':'; }, '_');
  return file;
}

Result<HostTensor> readTensorFile(const std::string &path) {
  auto endsWith = [&](const char *ext) {
    return path.size() >= std::strlen(ext) && path.compare(path.size() - std::strlen(ext), std::string::npos, ext) == 0;
  };
  if (endsWith(".npy"))
    return readNpy(path);
  if (endsWith(".pb"))
    return readPb(path);
  return Status::error(path + ": expected a .npy or .pb file");
}

Status writeNpy(const std::string &path, plan::DType dtype, const std::vector<int64_t> &shape, const void *data,
                int64_t bytes) {
  std::string dims;
  for (int64_t d : shape)
    dims += std::to_string(d) + ",";
  if (shape.size() > 1)
    dims.pop_back();
  std::string header = std::string("{'descr': '") + npyDescr(dtype) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  char preamble[10] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0,
                       static_cast<char>(header.size() & 0xFF), static_cast<char>(header.size() >> 8)};
  return writeFileAtomically(path, [&](int fd) {
    return writeAll(fd, preamble, 10) && writeAll(fd, header.data(), header.size()) && writeAll(fd, data, bytes);
  });
}

namespace {

/// safetensors' names of tec's dtypes.
const char *safetensorsDtype(plan::DType t) {
  switch (t) {
  case plan::F32: return "F32";
  case plan::F16: return "F16";
  case plan::BF16: return "BF16";
  case plan::I32: return "I32";
  case plan::I64: return "I64";
  case plan::BOOL: return "BOOL";
  case plan::F8E4M3FN: return "F8_E4M3";
  case plan::F8E5M2: return "F8_E5M2";
  default: return nullptr;
  }
}

} // namespace

Status writeSafetensors(const std::string &path, const std::vector<std::pair<std::string, const HostTensor *>> &tensors,
                        const std::map<std::string, std::string> &metadata) {
  llvm::json::Object header;
  llvm::json::Object meta;
  for (const auto &[key, value] : metadata)
    meta[key] = value;
  header["__metadata__"] = std::move(meta);
  int64_t offset = 0;
  for (const auto &[name, tensor] : tensors) {
    const char *dtype = safetensorsDtype(tensor->dtype);
    if (!dtype)
      return Status::error(path + ": tensor '" + name + "' has a dtype safetensors has no name for");
    llvm::json::Array shape, range{offset, offset + static_cast<int64_t>(tensor->bytes.size())};
    for (int64_t d : tensor->shape)
      shape.push_back(d);
    header[name] = llvm::json::Object{{"dtype", dtype}, {"shape", std::move(shape)}, {"data_offsets", std::move(range)}};
    offset += static_cast<int64_t>(tensor->bytes.size());
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::json::Value(std::move(header));
  os.flush();
  text.append((8 - text.size() % 8) % 8, ' '); // the data 8-byte aligned, as the format recommends
  char size[8];
  for (int i = 0; i < 8; ++i)
    size[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xFF);
  return writeFileAtomically(path, [&](int fd) {
    if (!writeAll(fd, size, 8) || !writeAll(fd, text.data(), text.size()))
      return false;
    for (const auto &[name, tensor] : tensors)
      if (!writeAll(fd, tensor->bytes.data(), tensor->bytes.size()))
        return false;
    return true;
  });
}

Result<std::map<std::string, HostTensor>> readSafetensors(const std::string &path) {
  auto file = readRegularFile(path);
  if (!file.ok())
    return file.error();
  const std::string &all = *file;
  auto fail = [&](const std::string &why) { return Status::error(path + ": " + why); };
  if (all.size() < 8)
    return fail("not a safetensors file (shorter than its 8-byte header size)");
  uint64_t headerBytes = 0;
  for (int i = 0; i < 8; ++i)
    headerBytes |= static_cast<uint64_t>(static_cast<unsigned char>(all[i])) << (8 * i);
  if (headerBytes > all.size() - 8)
    return fail("its header size " + std::to_string(headerBytes) + " passes the end of the file");
  auto parsed = llvm::json::parse(llvm::StringRef(all.data() + 8, headerBytes));
  if (!parsed) {
    std::string why = llvm::toString(parsed.takeError());
    return fail("the header is not JSON (" + why + ")");
  }
  const auto *header = parsed->getAsObject();
  if (!header)
    return fail("the header is not a JSON object");
  const uint64_t dataBytes = all.size() - 8 - headerBytes;
  const char *data = all.data() + 8 + headerBytes;
  std::map<std::string, HostTensor> tensors;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const auto &[key, value] : *header) {
    const std::string name = key.str();
    if (name == "__metadata__")
      continue;
    auto bad = [&](const std::string &why) { return fail("tensor '" + name + "' " + why); };
    const auto *entry = value.getAsObject();
    const auto dtype = entry ? entry->getString("dtype") : std::nullopt;
    const auto *shape = entry ? entry->getArray("shape") : nullptr;
    const auto *range = entry ? entry->getArray("data_offsets") : nullptr;
    if (!dtype || !shape || !range || range->size() != 2)
      return bad("lacks a dtype, shape or two data_offsets");
    HostTensor t;
    bool known = false;
    for (plan::DType d : {plan::F32, plan::F16, plan::BF16, plan::I32, plan::I64, plan::BOOL, plan::F8E4M3FN, plan::F8E5M2})
      if (*dtype == safetensorsDtype(d))
        t.dtype = d, known = true;
    if (!known)
      return bad("has dtype '" + dtype->str() + "', which tec does not hold");
    for (const auto &d : *shape) {
      auto dim = d.getAsInteger();
      if (!dim || *dim < 0)
        return bad("has a shape of other than non-negative integers");
      t.shape.push_back(*dim);
    }
    auto begin = (*range)[0].getAsInteger(), end = (*range)[1].getAsInteger();
    if (!begin || !end || *begin < 0 || *end < *begin || static_cast<uint64_t>(*end) > dataBytes)
      return bad("has data_offsets outside the file's data");
    auto bytes = byteCount(t.shape, dtypeBytes(t.dtype), path);
    if (!bytes.ok())
      return bytes.error();
    if (*end - *begin != *bytes)
      return bad("has " + std::to_string(*end - *begin) + " bytes, but its dtype and shape take " + std::to_string(*bytes));
    ranges.emplace_back(*begin, *end);
    t.bytes.assign(data + *begin, data + *end);
    tensors[name] = std::move(t);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      return fail("two tensors' data_offsets overlap");
  return tensors;
}

} // namespace tec
