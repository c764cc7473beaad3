#include "api/Trainer.h"

#include "api/Checkpoint.h"

#include <algorithm>
#include <cmath>

namespace tec {

Result<std::unique_ptr<Trainer>> Trainer::open(const std::string &planPath, SessionOptions options) {
  options.kind = "train";
  auto session = Session::open(planPath, options);
  if (!session.ok())
    return session.error();
  auto trainer = std::make_unique<Trainer>();
  trainer->session_ = session.take();
  return trainer;
}

Result<float> Trainer::step(std::vector<double> *stepMillis) {
  if (Status st = session_->run(stepMillis); !st.ok())
    return st;
  ++steps_;
  return *static_cast<const float *>(session_->outputData(0));
}

std::optional<float> Trainer::lossScale() {
  if (session_->outputs().size() < 2)
    return std::nullopt;
  return *static_cast<const float *>(session_->outputData(1));
}

Status Trainer::save(const std::string &dir) { return writeCheckpoint(*session_, dir, steps_); }

Result<int64_t> Trainer::resume(const std::string &dir) {
  auto restored = restoreCheckpoint(*session_, dir);
  if (restored.ok())
    steps_ = *restored;
  return restored;
}

std::vector<Fp8Health> Trainer::fp8Health() {
  std::vector<Fp8Health> health;
  const auto &v = session_->variant();
  auto find = [&](const std::string &name) -> int {
    for (int b = 0; b < v.buffers_size(); ++b)
      if (v.buffers(b).role() == plan::STATE && v.buffers(b).name() == name)
        return b;
    return -1;
  };
  auto add = [&](const std::string &tensor, double saturated, double flushed) {
    int history = find(tensor + "/amax_history"), scale = find(tensor + "/scale");
    // A tensor quantized in two layouts (a wgrad's transposed copy) has one scale: one entry.
    auto seen = [&](const Fp8Health &e) { return e.tensor == tensor; };
    if (history < 0 || scale < 0 || std::any_of(health.begin(), health.end(), seen))
      return;
    auto h = session_->bufferValues<float>(history), scaleValue = session_->bufferValues<float>(scale);
    int64_t length = static_cast<int64_t>(h.size());
    if (scaleValue.empty())
      return;
    Fp8Health entry{tensor, 0.0f, scaleValue[0], saturated, flushed, {}};
    // After a step slot 0 is cleared and the newest amax sits in the last slot (torch.roll by -1).
    for (int64_t i = length - 1; i >= 1 && static_cast<int64_t>(entry.recentAmax.size()) < 8; --i)
      entry.recentAmax.push_back(h[i]);
    for (int64_t i = 0; i < length; ++i)
      entry.amax = std::max(entry.amax, h[i]);
    health.push_back(entry);
  };
  for (const auto &q : session_->quantizeStats())
    add(q.tensor, q.values ? double(q.saturated) / q.values : 0.0, q.values ? double(q.flushed) / q.values : 0.0);
  // Tensors quantized inside a fused kernel (FP8 attention's probabilities, output and gradients): their
  // amax and scale, with no count of what saturated (NaN: not measured).
  for (const auto &b : v.buffers()) {
    const std::string &name = b.name();
    if (b.role() == plan::STATE && name.size() > 6 && name.compare(name.size() - 6, 6, "/scale") == 0)
      add(name.substr(0, name.size() - 6), std::nan(""), std::nan(""));
  }
  return health;
}

} // namespace tec
