// Training through a plan's training step: `tec train` and tec.Trainer. The step's inputs are the model's
// inputs and, for each output with a loss, "target:<output>"; a step returns the loss. Checkpoints save and
// restore every state buffer (params, optimizer moments, FP8 scales and histories, the step counter) so
// that a resumed run continues bit for bit.
#ifndef TEC_API_TRAINER_H
#define TEC_API_TRAINER_H

#include "runtime/Session.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tec {

/// One quantized tensor's FP8 state after the last step (Transformer Engine's delayed scaling).
struct Fp8Health {
  std::string tensor;
  /// The largest amax in the history, and the scale the next step quantizes with.
  float amax = 0, scale = 0;
  /// The last step's share of values that saturated or flushed to zero; NaN where a fused kernel scaled
  /// the tensor and nothing counted them.
  double saturated = 0, flushed = 0;
  /// The newest amaxes, newest first (at most 8).
  std::vector<float> recentAmax;
};

class Trainer {
public:
  /// Opens the plan's train variant (options.kind is set to "train").
  static Result<std::unique_ptr<Trainer>> open(const std::string &planPath, SessionOptions options = {});

  Session &session() { return *session_; }
  const std::vector<TensorInfo> &inputs() const { return session_->inputs(); }

  /// One training step over the inputs bound since the last one (Session::setInput / inputData): the loss.
  /// `stepMillis`, when given, gets each plan step's time added (a profile).
  Result<float> step(std::vector<double> *stepMillis = nullptr);
  /// Steps taken, counting those of a resumed checkpoint.
  int64_t steps() const { return steps_; }
  /// The dynamic loss scale the last step used (FP16 plans), if the plan keeps one.
  std::optional<float> lossScale();

  /// Writes DIR/step-N (atomically) and points DIR/latest at it.
  Status save(const std::string &dir);
  /// Restores DIR's latest checkpoint (verified against this plan's state) and its step count.
  Result<int64_t> resume(const std::string &dir);

  /// Every FP8-quantized tensor's health; the saturated/flushed shares need options.fp8Stats.
  std::vector<Fp8Health> fp8Health();

private:
  std::unique_ptr<Session> session_;
  int64_t steps_ = 0;
};

} // namespace tec

#endif
