#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace tec {
#define GEN_PASS_DEF_TECRECASTWEIGHTS
#include "passes/Passes.h.inc"
} // namespace tec

using namespace mlir;
using namespace tec;

namespace {

/// A 16-bit copy of a function argument (a weight) that more than one op reads.
bool sharedWeightCopy(CastOp cast) {
  return llvm::isa<BlockArgument>(cast.getInput()) && !cast.getResult().hasOneUse() &&
         cast.getType().getElementType().getIntOrFloatBitWidth() < 32;
}

struct TecRecastWeights : tec::impl::TecRecastWeightsBase<TecRecastWeights> {
  void runOnOperation() override {
    SmallVector<CastOp> shared;
    getOperation().walk([&](CastOp cast) {
      if (sharedWeightCopy(cast))
        shared.push_back(cast);
    });
    for (CastOp cast : shared) {
      for (OpOperand &use : llvm::make_early_inc_range(cast.getResult().getUses())) {
        OpBuilder b(use.getOwner());
        use.set(b.clone(*cast)->getResult(0));
      }
      cast.erase();
    }
  }
};

} // namespace
