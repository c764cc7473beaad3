// Training checkpoints: DIR/step-N/model.safetensors (the trained params) and training.safetensors (the rest
// of a train variant's state), and a manifest (format, step, the variant's state-layout fingerprint, each
// tensor's file, dtype, shape and checksum) that is verified before anything is restored. Written
// atomically: a temporary folder, each file fsynced, a rename into place, then DIR/latest replaced by rename;
// a crash leaves the previous checkpoint loadable.
#ifndef TEC_API_CHECKPOINT_H
#define TEC_API_CHECKPOINT_H

#include "api/TensorFiles.h"

#include "runtime/Session.h"

#include <map>
#include <memory>
#include <string>

namespace tec {

/// The manifest's format: 3, the state in two safetensors files (kParamsFile, kTrainingFile); format 2 (a
/// .npy file per tensor) is still read; any other is refused.
inline constexpr int kCheckpointFormat = 3;
/// The trained params, by their ONNX initializer names: loadable by safetensors.torch.load_file into a
/// PyTorch module's load_state_dict, and by Hugging Face tools.
inline constexpr const char *kParamsFile = "model.safetensors";
/// The rest of the state a resume needs: optimizer moments, FP8 scales and histories, the step counter.
inline constexpr const char *kTrainingFile = "training.safetensors";

/// What the state of `variant` looks like (every state buffer's name, dtype and shape): a checkpoint
/// restores into a variant only with the same fingerprint.
std::string stateFingerprint(const plan::Variant &variant);

/// A state buffer's shape in checkpoints: its own, or for a rank's shard (optimizer sharding) the whole
/// tensor's, so that a checkpoint is the same however its run was sharded.
std::vector<int64_t> wholeShape(const plan::Buffer &state);

/// Every state tensor of the session's variant, whole: shards (optimizer sharding) are gathered from every
/// rank, so where the plan has any, every rank must call it.
Result<std::map<std::string, HostTensor>> wholeState(Session &session);

/// Writes `state` (wholeState's) as DIR/step-N, atomically, and points DIR/latest at it.
Status writeCheckpoint(const plan::Variant &variant, const std::map<std::string, HostTensor> &state,
                       const std::string &dir, int64_t step);

/// One training run's hold on a checkpoint folder: an flock on DIR/.tec-lock (holding the holder's pid and
/// command line), released when this object goes or the process ends, however it ends. A second run into
/// the same folder cannot take it and is told who holds it: two runs never interleave their checkpoints.
class CheckpointLock {
public:
  static Result<std::unique_ptr<CheckpointLock>> acquire(const std::string &dir);
  const std::string &dir() const { return dir_; }

private:
  /// The locked descriptor, shared by this process's holders of one folder.
  struct Held {
    explicit Held(int fd) : fd(fd) {}
    ~Held();
    Held(const Held &) = delete;
    Held &operator=(const Held &) = delete;
    int fd;
  };
  CheckpointLock(std::string dir, std::shared_ptr<Held> held) : dir_(std::move(dir)), held_(std::move(held)) {}
  std::string dir_;
  std::shared_ptr<Held> held_;
};

/// DIR's latest checkpoint, verified against `variant`: its step and every state tensor by name.
struct Checkpoint {
  std::string folder; // DIR/step-N
  int64_t step = 0;
  std::map<std::string, HostTensor> tensors;
};
Result<Checkpoint> loadCheckpoint(const std::string &dir, const plan::Variant &variant);

/// Restores every state buffer of the session's variant from DIR's latest checkpoint; returns its step.
Result<int64_t> restoreCheckpoint(Session &session, const std::string &dir);

/// An inference variant's params as training left them: `trained` holds the params of `train` (its state of
/// KIND_PARAM, by name: a checkpoint's tensors or a trainer's buffers). Each param of `inference` takes its
/// trained value (a transposed copy of a param, the transpose of it); params training does not update (frozen)
/// keep the plan's. An error, never a partial answer, where a trained param has no place in `inference` or
/// the shapes disagree.
Result<std::map<std::string, std::string>> inferenceParams(const plan::Plan &plan, const plan::Variant &inference,
                                                           const plan::Variant &train,
                                                           const std::map<std::string, HostTensor> &trained);

/// A Session's params from DIR's latest checkpoint (verified against one of the plan's train variants, as a
/// resume is): inference with the trained weights (`tec run --checkpoint`, tec.Session(checkpoint=)).
/// `loaded`, when given, gets the checkpoint's folder (DIR/step-N) once the session has read it.
ParamSource checkpointParams(const std::string &dir, std::string *loaded = nullptr);

} // namespace tec

#endif
