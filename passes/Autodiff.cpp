#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"

namespace tec {
#define GEN_PASS_DEF_TECAUTODIFF
#include "passes/Passes.h.inc"
} // namespace tec

using namespace mlir;
using namespace tec;

namespace {

namespace {

/// Only floating-point values carry gradients.
bool differentiable(Value v) {
  auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
  return type && llvm::isa<FloatType>(type.getElementType());
}

} // namespace

/// The arguments gradients are taken with respect to: params (`tec.param`), graph inputs, or both.
static bool selected(func::FuncOp f, unsigned arg, StringRef wrt) {
  if (!differentiable(f.getArgument(arg)) || f.getArgAttr(arg, kStateAttrName))
    return false;
  bool isParam = static_cast<bool>(f.getArgAttr(arg, kParamAttrName));
  return wrt == "all" || (wrt == "params") == isParam;
}

/// In the user's terms: the ONNX node, not the internal op, and why when the op said (the driver turns
/// this into an unsupported-model error, exit 2).
static void noGradient(Operation *op, StringRef why) {
  if (auto opPrefix = why.find("' op "); why.starts_with("'") && opPrefix != StringRef::npos)
    why = why.drop_front(opPrefix + 5); // "'tec.slice' op expected ..." -> "expected ..."
  const auto nodes = sourceNodes(op->getLoc());
  InFlightDiagnostic d = op->emitError();
  if (nodes.empty())
    d << "'" << op->getName() << "'";
  else
    d << "node '" << llvm::join(nodes, "+") << "' (" << op->getName().stripDialect() << ")";
  d << " has no gradient: tec cannot train through it";
  if (!why.empty())
    d << " (" << why << ")";
}

} // namespace

FailureOr<func::FuncOp> tec::buildVjp(func::FuncOp forward, StringRef wrt, StringRef name) {
    OpBuilder b(forward);
    b.setInsertionPointAfter(forward);
    SmallVector<Type> argTypes(forward.getArgumentTypes());
    llvm::append_range(argTypes, forward.getResultTypes());
    auto vjp = b.create<func::FuncOp>(forward.getLoc(), name, b.getFunctionType(argTypes, {}));
    Block *body = vjp.addEntryBlock();
    IRMapping map;
    for (auto [from, to] : llvm::zip(forward.getArguments(), body->getArguments().take_front(forward.getNumArguments())))
      map.map(from, to);
    b.setInsertionPointToEnd(body);
    for (Operation &op : forward.getBody().front().without_terminator())
      b.clone(op, map);
    auto forwardReturn = llvm::cast<func::ReturnOp>(forward.getBody().front().getTerminator());

    // Activity: values that depend on a selected argument.
    llvm::SetVector<Value> active;
    for (unsigned i = 0; i < forward.getNumArguments(); ++i)
      if (selected(forward, i, wrt))
        active.insert(body->getArgument(i));
    for (Operation &op : body->getOperations())
      if (llvm::any_of(op.getOperands(), [&](Value v) { return active.contains(v); }))
        for (Value r : op.getResults())
          if (differentiable(r))
            active.insert(r);

    // Seed with the cotangents, then walk backwards, accumulating gradients by addition.
    llvm::DenseMap<Value, Value> grads;
    auto accumulate = [&](Value v, Value g) {
      if (!g || !active.contains(v))
        return;
      Value &slot = grads[v];
      slot = slot ? b.create<AddOp>(v.getLoc(), v.getType(), slot, g).getResult() : g;
    };
    for (auto [i, result] : llvm::enumerate(forwardReturn.getOperands()))
      accumulate(map.lookupOrDefault(result), body->getArgument(forward.getNumArguments() + i));
    SmallVector<Operation *> ops;
    for (Operation &op : body->getOperations())
      ops.push_back(&op);
    for (Operation *op : llvm::reverse(ops)) {
      SmallVector<Value> resultGrads;
      for (Value r : op->getResults())
        resultGrads.push_back(grads.lookup(r));
      bool needed = llvm::any_of(resultGrads, [](Value g) { return static_cast<bool>(g); }) &&
                    llvm::any_of(op->getOperands(), [&](Value v) { return active.contains(v); });
      if (!needed)
        continue;
      auto differentiableOp = llvm::dyn_cast<Differentiable>(op);
      SmallVector<Value> operandGrads;
      std::string why;
      LogicalResult built = failure();
      if (differentiableOp) { // an op that cannot differentiate this instance says why: kept for the message
        ScopedDiagnosticHandler capture(op->getContext(), [&](Diagnostic &d) {
          why = d.str();
          return success();
        });
        built = differentiableOp.buildGradients(b, resultGrads, operandGrads);
      }
      if (failed(built)) {
        noGradient(op, why);
        vjp.erase();
        return failure();
      }
      for (auto [operand, g] : llvm::zip(op->getOperands(), operandGrads))
        accumulate(operand, g);
    }

    SmallVector<Value> results;
    for (Value r : forwardReturn.getOperands())
      results.push_back(map.lookupOrDefault(r));
    SmallVector<int64_t> gradOf;
    for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
      if (!selected(forward, i, wrt))
        continue;
      Value arg = body->getArgument(i);
      Value g = grads.lookup(arg);
      if (!g) { // nothing flows back: a zero gradient
        auto type = llvm::cast<RankedTensorType>(arg.getType());
        g = b.create<ConstantOp>(forward.getLoc(), type,
                                 DenseElementsAttr::get(type, b.getFloatAttr(type.getElementType(), 0.0)));
      }
      results.push_back(g);
      gradOf.push_back(i);
    }
    b.create<func::ReturnOp>(forward.getLoc(), results);
    vjp.setType(b.getFunctionType(argTypes, TypeRange(ValueRange(results))));
    for (unsigned i = 0; i < forward.getNumArguments(); ++i)
      if (auto attrs = forward.getArgAttrDict(i))
        vjp.setArgAttrs(i, attrs);
    for (auto [k, arg] : llvm::enumerate(gradOf))
      vjp.setResultAttr(forward.getNumResults() + k, kGradOfAttrName, b.getI64IntegerAttr(arg));
    return vjp;
}

namespace {

struct TecAutodiff : tec::impl::TecAutodiffBase<TecAutodiff> {
  using TecAutodiffBase::TecAutodiffBase;

  void runOnOperation() override {
    if (wrt != "params" && wrt != "inputs" && wrt != "all") {
      getOperation().emitError("expected wrt=params|inputs|all, got '") << wrt << "'";
      return signalPassFailure();
    }
    auto forward = getOperation().lookupSymbol<func::FuncOp>(function);
    if (!forward) {
      getOperation().emitError("no function @") << function << " to differentiate";
      return signalPassFailure();
    }
    if (failed(buildVjp(forward, wrt, (forward.getName() + "_vjp").str())))
      signalPassFailure();
  }
};

} // namespace
