#include "api/Trainer.h"

#include "api/Checkpoint.h"
#include "runtime/Collectives.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/xxhash.h"

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
  if (Status st = trainer->trainOn(trainer->outputs()); !st.ok())
    return st;
  return trainer;
}

bool Trainer::bindsInput(size_t index) const {
  return !llvm::StringRef(session_->inputs()[index].name).starts_with(kLossWeightPrefix);
}

std::vector<std::string> Trainer::outputs() const {
  std::vector<std::string> names;
  for (const auto &in : session_->inputs())
    if (llvm::StringRef(in.name).starts_with(kTargetPrefix))
      names.push_back(in.name.substr(kTargetPrefix.size()));
  return names;
}

Status Trainer::trainOn(const std::vector<std::string> &chosen) {
  const auto all = outputs();
  if (chosen.empty())
    return Status::badData("train on at least one output (the plan's: " + llvm::join(all, ", ") + ")");
  for (const auto &name : chosen)
    if (std::find(all.begin(), all.end(), name) == all.end())
      return Status::badData("'" + name + "' is not an output the plan trains on (it has: " + llvm::join(all, ", ") +
                              ")");
  const auto &ins = session_->inputs();
  const bool weighted = std::any_of(ins.begin(), ins.end(), [&](const TensorInfo &t) {
    return llvm::StringRef(t.name).starts_with(kLossWeightPrefix);
  });
  if (!weighted && chosen.size() != all.size())
    return Status::badData("this plan's training step has a loss term per output and no weights for them: give a "
                           "target for each of " + llvm::join(all, ", ") + " (or recompile it with this tec)");
  for (size_t i = 0; i < ins.size(); ++i) {
    llvm::StringRef name(ins[i].name);
    if (!name.consume_front(kLossWeightPrefix))
      continue;
    const bool on = std::find(chosen.begin(), chosen.end(), name.str()) != chosen.end();
    const float weight = on ? 1.0f : 0.0f;
    if (Status st = session_->setInput(i, &weight, sizeof weight); !st.ok())
      return st;
    // An ignored output's target is never bound: zeros, so that its (weightless) term stays finite.
    auto target = std::find_if(ins.begin(), ins.end(), [&](const TensorInfo &t) {
      return t.name == kTargetPrefix.str() + name.str();
    });
    if (!on && target != ins.end()) {
      std::vector<char> zeros(target->bytes, 0);
      if (Status st = session_->setInput(target - ins.begin(), zeros.data(), target->bytes); !st.ok())
        return st;
    }
  }
  trained_.clear();
  for (const auto &name : all) // in the plan's order
    if (std::find(chosen.begin(), chosen.end(), name) != chosen.end())
      trained_.push_back(name);
  return Status::success();
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

namespace {

/// The train variant's "lr" state buffer, or -1 (a plan compiled before the rate was state).
int learningRateBuffer(const plan::Variant &v) {
  for (int b = 0; b < v.buffers_size(); ++b)
    if (v.buffers(b).role() == plan::STATE && v.buffers(b).name() == "lr" && v.buffers(b).bytes() == 4)
      return b;
  return -1;
}

} // namespace

Result<float> Trainer::learningRate() {
  const int b = learningRateBuffer(session_->variant());
  if (b < 0)
    return Status::error("this plan's learning rate is a constant of its training step (compiled by an older tec: "
                         "compile it again to set it between steps)");
  float lr = 0;
  if (Status st = session_->readBuffer(b, &lr); !st.ok())
    return st;
  return lr;
}

Status Trainer::setLearningRate(float lr) {
  if (!std::isfinite(lr) || lr < 0)
    return Status::error("learning rate " + std::to_string(lr) + ": expected a finite value >= 0");
  const int b = learningRateBuffer(session_->variant());
  if (b < 0)
    return learningRate().error();
  return session_->writeBuffer(b, &lr);
}

Status Trainer::holdCheckpointDir(const std::string &dir) {
  if (checkpointLock_ && checkpointLock_->dir() == dir)
    return Status::success();
  checkpointLock_.reset();
  auto lock = CheckpointLock::acquire(dir);
  if (!lock.ok())
    return lock.error();
  checkpointLock_ = lock.take();
  return Status::success();
}

Status Trainer::save(const std::string &dir) {
  auto state = wholeState(*session_); // with sharded state, a collective: every rank saves
  if (!state.ok())
    return state.error();
  auto group = ProcessGroup::get();
  if (!group.ok())
    return group.error();
  if ((*group)->rank() != 0) // the ranks hold the same state: rank 0 writes the group's checkpoint
    return Status::success();
  if (Status st = holdCheckpointDir(dir); !st.ok())
    return st;
  return writeCheckpoint(session_->variant(), *state, dir, steps_);
}

Result<int64_t> Trainer::resume(const std::string &dir) {
  auto restored = restoreCheckpoint(*session_, dir);
  if (restored.ok())
    steps_ = *restored;
  return restored;
}

Result<uint64_t> Trainer::stateChecksum() {
  auto state = wholeState(*session_);
  if (!state.ok())
    return state.error();
  uint64_t hash = 0;
  for (const auto &[name, tensor] : *state)
    hash = llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(tensor.bytes.data()),
                                                      tensor.bytes.size())) ^ (hash * 0x9e3779b97f4a7c15ull);
  return hash;
}

Result<ParamSource> Trainer::currentParams() {
  const plan::Variant &train = session_->variant();
  auto trained = std::make_shared<std::map<std::string, HostTensor>>();
  for (int b = 0; b < train.buffers_size(); ++b) {
    const auto &buffer = train.buffers(b);
    if (buffer.role() != plan::STATE || buffer.kind() != plan::KIND_PARAM)
      continue;
    HostTensor &t = (*trained)[buffer.name()];
    t.dtype = buffer.dtype();
    t.shape.assign(buffer.shape().begin(), buffer.shape().end());
    t.bytes.resize(buffer.bytes());
    if (Status st = session_->readBuffer(b, t.bytes.data()); !st.ok())
      return st;
  }
  return ParamSource([trained, train](const plan::Plan &plan, const plan::Variant &inference) {
    return inferenceParams(plan, inference, train, *trained);
  });
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
  for (const auto &q : session_->quantizeStats()) {
    const double saturated = q.values ? double(q.saturated) / q.values : 0.0;
    const double flushed = q.values ? double(q.flushed) / q.values : 0.0;
    if (find(q.tensor + "/amax_history") >= 0) {
      add(q.tensor, saturated, flushed);
      continue;
    }
    // A recipe without state (current, block, MXFP8): what this step's quantize measured.
    const float nan = std::nanf("");
    health.push_back({q.tensor, nan, nan, saturated, flushed, {}, q.blocks, q.smallestScaleInv, q.largestScaleInv});
  }
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
