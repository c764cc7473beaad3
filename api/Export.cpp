#include "api/Export.h"

#include "api/Checkpoint.h"
#include "runtime/PlanFile.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

namespace tec {

Result<ExportSummary> exportOnnx(const std::string &planPath, const std::string &checkpointDir,
                                 const std::string &outputPath) {
  auto file = PlanFile::open(planPath);
  if (!file.ok())
    return file.error();
  const auto &plan = (*file)->plan();
  onnx::ModelProto model;
  if (plan.onnx_model().empty() || !model.ParseFromString(plan.onnx_model()))
    return Status::error(planPath + ": the plan carries no ONNX model (compiled by an older tec?)");
  // The checkpoint must fit one of the plan's train variants (verified like --resume).
  std::optional<Checkpoint> checkpoint;
  if (!checkpointDir.empty()) {
    Status why = Status::error(planPath + ": has no train variant for a checkpoint to fit");
    for (const auto &v : plan.variants()) {
      if (v.kind() != "train")
        continue;
      auto loaded = loadCheckpoint(checkpointDir, v);
      if (loaded.ok()) {
        checkpoint = loaded.take();
        break;
      }
      why = loaded.error();
    }
    if (!checkpoint)
      return why;
  }
  // A param's data: the checkpoint's trained value if there is one, else the plan's own.
  std::map<std::string, const plan::Buffer *> planParams;
  for (const auto &v : plan.variants())
    for (const auto &b : v.buffers())
      if (b.role() == plan::PARAM || b.role() == plan::STATE)
        planParams.emplace(b.name(), &b);
  ExportSummary summary;
  Status failure = Status::success();
  // Null (with `failure` saying why) when there is none or the checkpoint's shape is not the model's.
  auto paramData = [&](const std::string &name, const std::vector<int64_t> &dims) -> std::optional<std::string_view> {
    if (checkpoint && checkpoint->tensors.count(name)) {
      const auto &tensor = checkpoint->tensors.at(name);
      if (!std::equal(tensor.shape.begin(), tensor.shape.end(), dims.begin(), dims.end())) {
        failure = Status::error(checkpoint->folder + ": '" + name + "' does not have the model's shape");
        return std::nullopt;
      }
      ++summary.trained;
      return std::string_view(reinterpret_cast<const char *>(tensor.bytes.data()), tensor.bytes.size());
    }
    auto it = planParams.find(name);
    if (it == planParams.end()) {
      failure = Status::error(planPath + ": no data for initializer '" + name + "'");
      return std::nullopt;
    }
    const auto &b = *it->second;
    int64_t offset = b.role() == plan::STATE ? b.init_offset() : b.offset();
    return std::string_view((*file)->data() + offset, b.bytes());
  };
  for (auto &init : *model.mutable_graph()->mutable_initializer()) {
    if (init.has_raw_data() || init.float_data_size() || init.int64_data_size() || init.int32_data_size())
      continue; // kept in the plan's model: not a param
    std::vector<int64_t> dims(init.dims().begin(), init.dims().end());
    auto copyOf = plan.transposed_copies().find(init.name());
    const bool copy = copyOf != plan.transposed_copies().end() && dims.size() == 2;
    if (copy)
      std::swap(dims[0], dims[1]); // the param's shape
    auto data = paramData(copy ? copyOf->second : init.name(), dims);
    if (!data)
      return failure;
    if (!copy) {
      init.set_raw_data(data->data(), data->size());
      continue;
    }
    // The copy is written as the transpose of its f32 param [rows, cols]: trained weights stay tied.
    const int64_t rows = dims[0], cols = dims[1];
    if (data->size() != static_cast<size_t>(rows * cols) * 4)
      return Status::error(planPath + ": '" + copyOf->second + "' is not the f32 param '" + init.name() +
                           "' is a transposed copy of");
    std::string transposed(data->size(), '\0');
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        std::memcpy(&transposed[(c * rows + r) * 4], data->data() + (r * cols + c) * 4, 4);
    init.set_raw_data(transposed);
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return Status::error(outputPath + ": the model is too large for one protobuf (over 2 GiB)");
  if (Status st = writeFileAtomically(outputPath, bytes); !st.ok())
    return st;
  if (checkpoint)
    summary.checkpointFolder = checkpoint->folder;
  return summary;
}

} // namespace tec
