// Tensors on disk for `tec run`: numpy .npy and ONNX TensorProto .pb (the format of ONNX's test data).
#ifndef TEC_API_TENSORFILES_H
#define TEC_API_TENSORFILES_H

#include "runtime/Status.h"
#include "runtime/plan.pb.h"

#include <string>
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
Status writeNpy(const std::string &path, plan::DType dtype, const std::vector<int64_t> &shape, const void *data,
                int64_t bytes);

} // namespace tec

#endif
