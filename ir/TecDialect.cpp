#include "ir/TecOps.h"

#include "ir/TecOpsDialect.cpp.inc"

using namespace mlir;

void tec::TecDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ir/TecOps.cpp.inc"
      >();
}

Operation *tec::TecDialect::materializeConstant(OpBuilder &builder, Attribute value, Type type,
                                                Location loc) {
  auto elements = llvm::dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, type, elements);
}
