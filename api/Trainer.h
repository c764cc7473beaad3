// Training through a plan's training step: `tec train` and tec.Trainer. The step's inputs are the model's
// inputs and, for each output with a loss, "target:<output>"; a step returns the loss. Checkpoints save and
// restore every state buffer (params, optimizer moments, FP8 scales and histories, the step counter) so
// that a resumed run continues bit for bit.
#ifndef TEC_API_TRAINER_H
#define TEC_API_TRAINER_H

#include "api/Checkpoint.h"
#include "runtime/Session.h"

#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tec {

/// A training step's input "target:<output>" is that output's target; "loss-weight:<output>" (multi-output
/// models) weighs its loss term, set by the trainer from the outputs it trains on.
inline constexpr llvm::StringLiteral kTargetPrefix = "target:";
inline constexpr llvm::StringLiteral kLossWeightPrefix = "loss-weight:";

/// One quantized tensor's FP8 state after the last step (Transformer Engine's delayed scaling).
struct Fp8Health {
  std::string tensor;
  /// The largest amax in the history, and the scale the next step quantizes with (NaN under the recipes
  /// without state: current scaling, block scaling, MXFP8).
  float amax = 0, scale = 0;
  /// The last step's share of values that saturated or flushed to zero; NaN where a fused kernel scaled
  /// the tensor and nothing counted them.
  double saturated = 0, flushed = 0;
  /// The newest amaxes, newest first (at most 8).
  std::vector<float> recentAmax;
  /// Block scaling and MXFP8: the tensor's blocks and the range of their dequantization factors (the
  /// spread of the block scales); 0 blocks for a per-tensor scale.
  int64_t blocks = 0;
  float smallestScaleInv = 0, largestScaleInv = 0;
};

class Trainer {
public:
  /// Opens the plan's train variant (options.kind is set to "train").
  static Result<std::unique_ptr<Trainer>> open(const std::string &planPath, SessionOptions options = {});

  Session &session() { return *session_; }
  const std::vector<TensorInfo> &inputs() const { return session_->inputs(); }
  /// Whether the user binds input `index` (a model input or a target), rather than the trainer (a loss weight).
  bool bindsInput(size_t index) const;

  /// The model outputs the plan can train on (one target each), and those the loss covers now: all of them
  /// until trainOn says otherwise.
  std::vector<std::string> outputs() const;
  const std::vector<std::string> &trainedOutputs() const { return trained_; }
  /// Trains on these outputs only (at least one; their targets must be bound before each step): the others'
  /// loss terms weigh 0 and their targets are zeros nobody reads. A single-output plan takes only its output.
  Status trainOn(const std::vector<std::string> &outputs);

  /// One training step over the inputs bound since the last one (Session::setInput / inputData): the loss.
  /// `stepMillis`, when given, gets each plan step's time added (a profile).
  Result<float> step(std::vector<double> *stepMillis = nullptr);
  /// Steps taken, counting those of a resumed checkpoint.
  int64_t steps() const { return steps_; }
  /// The steps (micro-batches) whose mean gradient one optimizer update applies (`--accumulate`): the
  /// update comes with every accumulation()-th step; 1 where every step updates.
  int64_t accumulation() const { return std::max<int64_t>(1, session_->variant().accumulate()); }
  /// The dynamic loss scale the last step used (FP16 plans), if the plan keeps one.
  std::optional<float> lossScale();
  /// The base learning rate the next steps use (the schedule scales it): the compiled --lr until set. It is
  /// training state, kept in checkpoints. Setting it takes a finite, non-negative value.
  Result<float> learningRate();
  Status setLearningRate(float lr);

  /// Writes DIR/step-N (atomically) and points DIR/latest at it. The first save into DIR takes the folder
  /// (holdCheckpointDir). Under mpirun rank 0 writes the group's checkpoint and the others return at once;
  /// with optimizer sharding every rank must call it (it gathers the shards).
  Status save(const std::string &dir);
  /// Takes DIR for this trainer's checkpoints until it goes or takes another (CheckpointLock): an error
  /// naming the holder where another run writes there.
  Status holdCheckpointDir(const std::string &dir);
  /// Restores DIR's latest checkpoint (verified against this plan's state) and its step count.
  Result<int64_t> resume(const std::string &dir);

  /// The params as they are now, for a Session that infers with them (SessionOptions::params): a snapshot,
  /// taken now; a session opened after more steps needs another.
  Result<ParamSource> currentParams();

  /// A hash of the whole training state (params, optimizer moments, FP8 scales, the step counter), bit for
  /// bit: data-parallel ranks compare it to show they hold the same (with optimizer sharding, a collective:
  /// the moments gathered whole).
  Result<uint64_t> stateChecksum();

  /// Every FP8-quantized tensor's health; the saturated/flushed shares need options.fp8Stats.
  std::vector<Fp8Health> fp8Health();

private:
  std::unique_ptr<Session> session_;
  int64_t steps_ = 0;
  std::vector<std::string> trained_;
  std::unique_ptr<CheckpointLock> checkpointLock_;
};

} // namespace tec

#endif
