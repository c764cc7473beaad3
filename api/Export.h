// An ONNX model with a plan's weights, or a checkpoint's trained ones: `tec export` and Trainer::exportOnnx.
#ifndef TEC_API_EXPORT_H
#define TEC_API_EXPORT_H

#include "support/Status.h"

#include <string>

namespace tec {

struct ExportSummary {
  /// Params taken from the checkpoint (the rest come from the plan).
  int trained = 0;
  /// The checkpoint's folder (DIR/step-N), empty without one.
  std::string checkpointFolder;
};

/// Writes `outputPath` (atomically): the model the plan was compiled from, each initializer the plan took
/// as a param given the value from `checkpointDir`'s latest checkpoint (verified against one of the plan's
/// train variants) where one is given and holds it, else the plan's own. Errors name the file and tensor.
Result<ExportSummary> exportOnnx(const std::string &planPath, const std::string &checkpointDir,
                                 const std::string &outputPath);

} // namespace tec

#endif
