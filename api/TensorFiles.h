// Tensors on disk for `tec run`: numpy .npy and ONNX TensorProto .pb (the format of ONNX's test data).
#ifndef TEC_API_TENSORFILES_H
#define TEC_API_TENSORFILES_H

#include "support/Status.h"
#include "runtime/plan.pb.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tec {

struct HostTensor {
  plan::DType dtype = plan::F32;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

/// A tensor name as a file name: path separators and colons become underscores.
std::string fileNameFor(const std::string &name);

/// Reads .npy or .pb (by extension).
Result<HostTensor> readTensorFile(const std::string &path);

/// A safetensors file (Hugging Face's: an 8-byte little-endian header size, a JSON header of each tensor's
/// dtype, shape and byte range, the data): `tensors` in order, with `metadata` as its "__metadata__".
/// Written atomically.
Status writeSafetensors(const std::string &path, const std::vector<std::pair<std::string, const HostTensor *>> &tensors,
                        const std::map<std::string, std::string> &metadata);
/// Every tensor of a safetensors file by name, checked strictly (the header's size, JSON and fields, each
/// byte range inside the data, not overlapping another and of its dtype and shape's size); errors name the
/// file and the tensor.
Result<std::map<std::string, HostTensor>> readSafetensors(const std::string &path);
Status writeNpy(const std::string &path, plan::DType dtype, const std::vector<int64_t> &shape, const void *data,
                int64_t bytes);

} // namespace tec

#endif
