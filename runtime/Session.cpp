#include "runtime/Session.h"

namespace tec {

Result<VariantChoice> chooseVariant(const plan::Plan &plan, const CudaProbe &cuda, const SessionOptions &options) {
  // Only variants of the asked kind compete: a train step is not a forward pass.
  auto kindOf = [](const plan::Variant &v) { return v.kind().empty() ? std::string("inference") : v.kind(); };
  std::string targets;
  int cpu = -1, first = -1;
  for (int i = 0; i < plan.variants_size(); ++i) {
    if (kindOf(plan.variants(i)) != options.kind)
      continue;
    const auto &target = plan.variants(i).target();
    targets += (targets.empty() ? "" : ", ") + target;
    if (first < 0)
      first = i;
    if (target == "cpu")
      cpu = i;
  }
  if (first < 0)
    return Status::error("the plan has no " + options.kind + " variant" +
                         (options.kind == "train" ? " (compile with --train)" : ""));
  if (!options.variant.empty()) {
    for (int i = 0; i < plan.variants_size(); ++i)
      if (plan.variants(i).target() == options.variant && kindOf(plan.variants(i)) == options.kind)
        return VariantChoice{i, "cpu", "variant " + options.variant + " (asked for) on the cpu backend" +
                                           (options.variant == "cpu" ? "" : ", its GPU precisions emulated")};
    return Status::error("the plan has no variant '" + options.variant + "' (it has: " + targets + ")");
  }
  // Until the CUDA backend exists every variant runs on the CPU; a GPU is reported, not used.
  std::string gpu = cuda.usable ? "found " + cuda.name + " (" + smName(cuda.major, cuda.minor) +
                                      ") but this tec has no CUDA backend yet"
                                : cuda.reason;
  if (options.device == "cuda")
    return Status::error("--device cuda: cannot run on a GPU: " + gpu);
  if (cpu < 0)
    return VariantChoice{first, "cpu", "variant " + plan.variants(first).target() + " on the cpu backend (the plan has no "
                                       "cpu variant; its GPU precisions are emulated): " + gpu};
  return VariantChoice{cpu, "cpu", "variant cpu on the cpu backend: " + gpu};
}

Result<std::unique_ptr<Session>> Session::open(const std::string &path, const SessionOptions &options) {
  auto file = PlanFile::open(path);
  if (!file.ok())
    return file.error();
  std::unique_ptr<Session> session(new Session());
  session->file = file.take();
  const plan::Plan &p = session->file->plan();
  auto choice = chooseVariant(p, probeCuda(), options);
  if (!choice.ok())
    return Status::error(path + ": " + choice.error().message());
  session->choice = *choice;
  session->backend = createCpuBackend(options.threads, options.fp8Stats);
  const auto &variant = p.variants(session->choice.index);
  if (Status s = session->backend->prepare(variant, session->file->data()); !s.ok())
    return Status::error(path + ": variant " + variant.target() + ": " + s.message());
  auto describe = [&](const std::string &name, int buffer) {
    const auto &b = variant.buffers(buffer);
    return TensorInfo{name, b.dtype(), {b.shape().begin(), b.shape().end()}, b.bytes(), buffer};
  };
  const auto &inputNames = variant.input_names_size() ? variant.input_names() : p.input_names();
  const auto &outputNames = variant.output_names_size() ? variant.output_names() : p.output_names();
  for (int i = 0; i < variant.inputs_size(); ++i)
    session->inputInfo.push_back(describe(inputNames.Get(i), variant.inputs(i)));
  for (int i = 0; i < variant.outputs_size(); ++i)
    session->outputInfo.push_back(describe(outputNames.Get(i), variant.outputs(i)));
  return session;
}

Status Session::setInput(size_t index, const void *data, int64_t bytes) {
  if (index >= inputInfo.size())
    return Status::error("no input #" + std::to_string(index));
  const auto &info = inputInfo[index];
  if (bytes != info.bytes)
    return Status::error("input '" + info.name + "' takes " + std::to_string(info.bytes) + " bytes, got " +
                         std::to_string(bytes));
  std::memcpy(inputData(index), data, bytes);
  return Status::success();
}

} // namespace tec
