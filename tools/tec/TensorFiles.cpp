#include "TensorFiles.h"

#include "runtime/PlanFile.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

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

Result<HostTensor> readNpy(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::error(path + ": cannot open");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (all.size() < 10 || all.compare(0, 6, "\x93NUMPY") != 0)
    return Status::error(path + ": not a .npy file");
  size_t headerLen, start;
  if (all[6] == 1) {
    headerLen = static_cast<unsigned char>(all[8]) | static_cast<unsigned char>(all[9]) << 8;
    start = 10;
  } else {
    if (all.size() < 12)
      return Status::error(path + ": truncated .npy header");
    headerLen = 0;
    for (int i = 0; i < 4; ++i)
      headerLen |= static_cast<size_t>(static_cast<unsigned char>(all[8 + i])) << (8 * i);
    start = 12;
  }
  if (start + headerLen > all.size())
    return Status::error(path + ": truncated .npy header");
  std::string header = all.substr(start, headerLen);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']+)'")))
    return Status::error(path + ": .npy header has no descr");
  auto dtype = dtypeFromNpy(m[1], path);
  if (!dtype.ok())
    return dtype.error();
  if (std::regex_search(header, m, std::regex("'fortran_order':\\s*True")))
    return Status::error(path + ": Fortran-ordered arrays are not supported (use np.ascontiguousarray)");
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")))
    return Status::error(path + ": .npy header has no shape");
  HostTensor t;
  t.dtype = *dtype;
  std::stringstream dims(m[1].str());
  std::string item;
  int64_t count = 1;
  while (std::getline(dims, item, ',')) {
    if (item.find_first_not_of(" ") == std::string::npos)
      continue;
    int64_t d = std::stoll(item);
    t.shape.push_back(d);
    count *= d;
  }
  size_t bytes = count * dtypeBytes(t.dtype);
  if (all.size() - start - headerLen != bytes)
    return Status::error(path + ": holds " + std::to_string(all.size() - start - headerLen) + " bytes of data, expected " +
                         std::to_string(bytes));
  t.bytes.assign(all.begin() + start + headerLen, all.end());
  return t;
}

Result<HostTensor> readPb(const std::string &path) {
  onnx::TensorProto proto;
  std::ifstream in(path, std::ios::binary);
  if (!in || !proto.ParseFromIstream(&in))
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
  t.shape.assign(proto.dims().begin(), proto.dims().end());
  int64_t count = 1;
  for (int64_t d : t.shape)
    count *= d;
  const int64_t width = dtypeBytes(t.dtype), bytes = count * width;
  t.bytes.resize(bytes);
  if (proto.has_raw_data()) {
    if (static_cast<int64_t>(proto.raw_data().size()) != bytes)
      return Status::error(path + ": raw data has the wrong size");
    std::memcpy(t.bytes.data(), proto.raw_data().data(), bytes);
  } else if (t.dtype == plan::F32 && proto.float_data_size() == count) {
    std::memcpy(t.bytes.data(), proto.float_data().data(), bytes);
  } else if (t.dtype == plan::I64 && proto.int64_data_size() == count) {
    std::memcpy(t.bytes.data(), proto.int64_data().data(), bytes);
  } else if (proto.int32_data_size() == count) {
    for (int64_t i = 0; i < count; ++i) {
      uint32_t v = static_cast<uint32_t>(proto.int32_data(i));
      std::memcpy(t.bytes.data() + i * width, &v, width);
    }
  } else {
    return Status::error(path + ": tensor data does not match its dims");
  }
  return t;
}

} // namespace

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
  std::ofstream out(path, std::ios::binary);
  if (!out)
    return Status::error(path + ": cannot write");
  char preamble[10] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0,
                       static_cast<char>(header.size() & 0xFF), static_cast<char>(header.size() >> 8)};
  out.write(preamble, 10);
  out.write(header.data(), header.size());
  out.write(static_cast<const char *>(data), bytes);
  if (!out)
    return Status::error(path + ": write failed");
  return Status::success();
}

} // namespace tec
