#include "codegen/Codegen.h"

#include "ir/TecOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mlir;

namespace tec {

namespace {

std::optional<plan::DType> dtypeOf(Type t) {
  if (t.isF32())
    return plan::F32;
  if (t.isF16())
    return plan::F16;
  if (t.isBF16())
    return plan::BF16;
  if (t.isInteger(32))
    return plan::I32;
  if (t.isInteger(64))
    return plan::I64;
  if (t.isInteger(1))
    return plan::BOOL;
  if (llvm::isa<Float8E4M3FNType>(t))
    return plan::F8E4M3FN;
  if (llvm::isa<Float8E5M2Type>(t))
    return plan::F8E5M2;
  return std::nullopt;
}

std::string locationName(Location loc) { return llvm::join(sourceNodes(loc), "+"); }

/// Elementwise ops whose kernels read each input element at the index they write: they may write their
/// result over an input of the same shape and type that nothing reads afterwards.
bool mayRunInPlace(Operation *op) {
  return llvm::isa<AddOp, SubOp, MulOp, DivOp, PowOp, ReluOp, TanhOp, SigmoidOp, ErfOp, SqrtOp, GeluOp, SiluOp,
                   HardSwishOp>(op);
}

class VariantBuilder {
public:
  VariantBuilder(func::FuncOp forward, const CodegenInputs &inputs, PlanDataBuilder &data)
      : forward(forward), inputs(inputs), data(data) {}

  llvm::Expected<plan::Variant> build();

private:
  llvm::Error fail(Operation *op, const llvm::Twine &why) {
    std::string loc;
    llvm::raw_string_ostream os(loc);
    op->getLoc().print(os);
    return llvm::createStringError(llvm::Twine("codegen: ") + why + " ('" + op->getName().getStringRef() + "' at " +
                                   loc + ")");
  }
  llvm::Expected<int> newBuffer(Value value, const std::string &name, plan::Role role, Operation *owner);
  int rootOf(int buffer) const {
    int alias = variant.buffers(buffer).alias_of();
    return alias >= 0 ? alias : buffer;
  }
  void noteUse(Value v, int position) {
    int root = rootOf(bufferOf.lookup(v));
    lastUse[root] = std::max(lastUse[root], position);
  }
  llvm::Error addConstant(ConstantOp op, int position);
  llvm::Error addStep(Operation *op, int position);
  void planArena();
  void assignKinds(int lossPosition);

  func::FuncOp forward;
  const CodegenInputs &inputs;
  PlanDataBuilder &data;
  plan::Variant variant;
  llvm::DenseMap<Value, int> bufferOf;
  /// Per buffer (meaningful for roots): op positions of the first write and the last read.
  std::vector<int> firstDef, lastUse;
  /// Per value: the position of its last reader. Per root: the latest such position over the values
  /// stored in it so far; a root whose values are all read for the last time here may be overwritten.
  llvm::DenseMap<Value, int> valueLastUse;
  /// The state argument each returned next value updates.
  llvm::DenseMap<Value, Value> stateUpdatedBy;
  std::vector<int> finalRead;
};

llvm::Expected<int> VariantBuilder::newBuffer(Value value, const std::string &name, plan::Role role, Operation *owner) {
  auto type = llvm::cast<RankedTensorType>(value.getType());
  auto dtype = dtypeOf(type.getElementType());
  if (!dtype) {
    std::string t;
    llvm::raw_string_ostream(t) << type.getElementType();
    return fail(owner, "element type " + t + " has no plan dtype");
  }
  int index = variant.buffers_size();
  auto *b = variant.add_buffers();
  b->set_name(name);
  b->set_dtype(*dtype);
  for (int64_t d : type.getShape())
    b->add_shape(d);
  b->set_role(role);
  b->set_bytes(type.getNumElements() * dtypeBytes(*dtype));
  b->set_alias_of(-1);
  bufferOf[value] = index;
  firstDef.push_back(-1);
  lastUse.push_back(-1);
  finalRead.push_back(valueLastUse.lookup(value));
  return index;
}

/// Splats past this size are filled at run time from one stored element: a plan stores what it cannot
/// compute, and a ConstantOfShape of a GiB of zeros would otherwise write a GiB of zeros into it.
constexpr int64_t kLargestStoredSplatBytes = int64_t(1) << 20;

llvm::Error VariantBuilder::addConstant(ConstantOp op, int position) {
  auto attr = llvm::dyn_cast<DenseElementsAttr>(op.getValue());
  if (!attr)
    return fail(op, "only dense constants can be stored");
  auto buffer = newBuffer(op.getResult(), locationName(op.getLoc()), plan::CONSTANT, op);
  if (!buffer)
    return buffer.takeError();
  auto *b = variant.mutable_buffers(*buffer);
  const int64_t n = attr.getNumElements(), width = dtypeBytes(b->dtype());
  if (attr.isSplat() && b->bytes() > kLargestStoredSplatBytes) { // one element, broadcast where the constant stood
    b->set_role(plan::TEMP);
    const int element = variant.buffers_size();
    plan::Buffer *e = variant.add_buffers();
    *e = *b;
    e->set_name(b->name() + ":element");
    for (int d = 0; d < e->shape_size(); ++d)
      e->set_shape(d, 1);
    e->set_bytes(width);
    e->set_role(plan::CONSTANT);
    e->set_kind(plan::KIND_CONSTANT);
    const char one = attr.getElementType().isInteger(1) && attr.getSplatValue<bool>();
    e->set_offset(attr.getElementType().isInteger(1) ? data.addCopy(&one, 1)
                                                      : data.addCopy(attr.getRawData().data(), width));
    firstDef.push_back(-1);
    lastUse.push_back(-1);
    finalRead.push_back(-1);
    auto *step = variant.add_steps();
    step->set_kernel("expand");
    step->set_source(b->name());
    step->add_inputs(element);
    step->add_outputs(*buffer);
    firstDef[*buffer] = position;
    lastUse[*buffer] = std::max(lastUse[*buffer], position);
    return llvm::Error::success();
  }
  b->set_kind(plan::KIND_CONSTANT);
  if (attr.getElementType().isInteger(1)) {
    std::vector<char> bytes(n);
    for (auto [i, v] : llvm::enumerate(attr.getValues<bool>()))
      bytes[i] = v;
    b->set_offset(data.addCopy(bytes.data(), n));
  } else if (attr.isSplat()) {
    std::vector<char> bytes(n * width);
    ArrayRef<char> raw = attr.getRawData();
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(bytes.data() + i * width, raw.data(), width);
    b->set_offset(data.addCopy(bytes.data(), bytes.size()));
  } else {
    ArrayRef<char> raw = attr.getRawData();
    b->set_offset(data.add(raw.data(), raw.size()));
  }
  return llvm::Error::success();
}

/// Op attributes become step attributes one for one, so a new op needs no codegen change.
plan::Attr convertAttr(Attribute attr, bool &ok) {
  plan::Attr out;
  ok = true;
  if (auto b = llvm::dyn_cast<BoolAttr>(attr))
    out.set_i(b.getValue());
  else if (llvm::isa<UnitAttr>(attr)) // a flag present: absent flags read as 0
    out.set_i(1);
  else if (auto i = llvm::dyn_cast<IntegerAttr>(attr))
    out.set_i(i.getInt());
  else if (auto f = llvm::dyn_cast<FloatAttr>(attr))
    out.set_f(f.getValueAsDouble());
  else if (auto s = llvm::dyn_cast<StringAttr>(attr))
    out.set_s(s.str());
  else if (auto a = llvm::dyn_cast<DenseI64ArrayAttr>(attr))
    for (int64_t v : a.asArrayRef())
      out.mutable_ints()->add_values(v);
  else if (auto a = llvm::dyn_cast<DenseI32ArrayAttr>(attr)) // operandSegmentSizes
    for (int32_t v : a.asArrayRef())
      out.mutable_ints()->add_values(v);
  else
    ok = false;
  return out;
}

llvm::Error VariantBuilder::addStep(Operation *op, int position) {
  for (Value v : op->getOperands())
    noteUse(v, position);
  // The amax that current scaling makes a quantize's scale from lives through the quantize: a backend may
  // compute the scale inside the quantize's launch, which then reads the amax while it writes.
  if (auto quantize = llvm::dyn_cast<QuantizeOp>(op))
    if (auto current = quantize.getScale().getDefiningOp<CurrentScalingOp>())
      noteUse(current.getAmax(), position);
  // A reshape is a view: the same bytes under another shape.
  if (auto reshape = llvm::dyn_cast<ReshapeOp>(op)) {
    auto buffer = newBuffer(reshape.getResult(), locationName(op->getLoc()), plan::TEMP, op);
    if (!buffer)
      return buffer.takeError();
    int root = rootOf(bufferOf.lookup(reshape.getInput()));
    variant.mutable_buffers(*buffer)->set_alias_of(root);
    finalRead[root] = std::max(finalRead[root], finalRead[*buffer]);
    return llvm::Error::success();
  }
  auto *step = variant.add_steps();
  step->set_kernel(op->getName().stripDialect().str());
  step->set_source(locationName(op->getLoc()));
  for (const NamedAttribute &a : op->getAttrs()) {
    bool ok;
    plan::Attr converted = convertAttr(a.getValue(), ok);
    if (!ok)
      return fail(op, "attribute '" + a.getName().strref() + "' has no plan form");
    (*step->mutable_attrs())[a.getName().str()] = converted;
  }
  for (Value v : op->getOperands())
    step->add_inputs(bufferOf.lookup(v));
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    std::string name = step->source() + (op->getNumResults() > 1 ? ":" + std::to_string(i) : "");
    auto buffer = newBuffer(result, name, plan::TEMP, op);
    if (!buffer)
      return buffer.takeError();
    step->add_outputs(*buffer);
    // A state's next value is written over the state itself where this op is the state's last reader
    // and reads it element for element (an optimizer's new params and moments): no copy after the step.
    if (Value state = stateUpdatedBy.lookup(result);
        state && (mayRunInPlace(op) || llvm::isa<OptimizerUpdateOp>(op)) && llvm::is_contained(op->getOperands(), state) &&
        state.getType() == result.getType()) {
      int root = rootOf(bufferOf.lookup(state));
      if (finalRead[root] <= position) {
        variant.mutable_buffers(*buffer)->set_alias_of(root);
        finalRead[root] = finalRead[*buffer];
      }
    }
    // A collective reduces each tensor where it lies: result i over input i where that input dies here.
    // (Not where the input is passed twice: its buffer would be reduced twice.)
    if (llvm::isa<AllReduceOp>(op) && variant.buffers(*buffer).alias_of() < 0) {
      int root = rootOf(bufferOf.lookup(op->getOperand(i)));
      const bool once = llvm::count(op->getOperands(), op->getOperand(i)) == 1;
      if (once && variant.buffers(root).role() == plan::TEMP && finalRead[root] <= position) {
        variant.mutable_buffers(*buffer)->set_alias_of(root);
        finalRead[root] = finalRead[*buffer];
      }
    }
    // Write in place over an input that dies here (same shape and type, an arena temporary).
    if (mayRunInPlace(op) && variant.buffers(*buffer).alias_of() < 0)
      for (Value in : op->getOperands()) {
        int root = rootOf(bufferOf.lookup(in));
        const auto &r = variant.buffers(root);
        if (in.getType() == result.getType() && r.role() == plan::TEMP && finalRead[root] <= position) {
          variant.mutable_buffers(*buffer)->set_alias_of(root);
          finalRead[root] = finalRead[*buffer];
          break;
        }
      }
    int root = rootOf(*buffer);
    if (firstDef[root] < 0)
      firstDef[root] = position;
    lastUse[root] = std::max(lastUse[root], position);
  }
  return llvm::Error::success();
}

/// What each buffer holds: args and constants by their tags; an arena temporary computed before the loss
/// (at `lossPosition`, 0 outside training) and read after it is saved for the backward pass.
void VariantBuilder::assignKinds(int lossPosition) {
  for (int i = 0; i < variant.buffers_size(); ++i) {
    auto *b = variant.mutable_buffers(i);
    if (b->role() == plan::TEMP && b->alias_of() < 0)
      b->set_kind(lossPosition > 0 && firstDef[i] <= lossPosition && lastUse[i] > lossPosition ? plan::KIND_SAVED
                                                                                               : plan::KIND_TEMPORARY);
    else if (b->role() == plan::OUTPUT && b->alias_of() < 0)
      b->set_kind(plan::KIND_OUTPUT);
  }
  for (auto &b : *variant.mutable_buffers())
    if (b.alias_of() >= 0)
      b.set_kind(variant.buffers(b.alias_of()).kind());
}

void VariantBuilder::planArena() {
  // Greedy: largest roots first, each at the lowest 64-byte-aligned offset that no root alive at the
  // same time occupies.
  std::vector<int> roots;
  for (int i = 0; i < variant.buffers_size(); ++i) {
    const auto &b = variant.buffers(i);
    if (b.alias_of() < 0 && b.role() != plan::PARAM && b.role() != plan::CONSTANT)
      roots.push_back(i);
  }
  std::stable_sort(roots.begin(), roots.end(),
                   [&](int a, int b) { return variant.buffers(a).bytes() > variant.buffers(b).bytes(); });
  std::vector<int> placed;
  int64_t arena = 0;
  for (int r : roots) {
    auto *b = variant.mutable_buffers(r);
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (int p : placed)
      if (firstDef[p] <= lastUse[r] && firstDef[r] <= lastUse[p])
        busy.push_back({variant.buffers(p).offset(), variant.buffers(p).offset() + variant.buffers(p).bytes()});
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (auto [lo, hi] : busy) {
      if (offset + b->bytes() <= lo)
        break;
      offset = std::max(offset, (hi + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment);
    }
    b->set_offset(offset);
    arena = std::max(arena, offset + b->bytes());
    placed.push_back(r);
  }
  variant.set_arena_bytes(arena);
}

llvm::Expected<plan::Variant> VariantBuilder::build() {
  variant.set_target(inputs.target);
  variant.set_precision(inputs.precision);
  Block &body = forward.getBody().front();
  const int end = static_cast<int>(body.getOperations().size());
  int position = 0;
  for (Operation &op : body.getOperations()) {
    ++position;
    for (Value v : op.getOperands())
      valueLastUse[v] = llvm::isa<func::ReturnOp>(op) ? end + 1 : position;
  }
  SmallVector<unsigned> updatedArgs;
  auto returned = llvm::cast<func::ReturnOp>(body.getTerminator()).getOperands();
  for (unsigned r = 0; r < forward.getNumResults(); ++r)
    if (auto arg = forward.getResultAttrOfType<IntegerAttr>(r, kStateUpdateAttrName)) {
      updatedArgs.push_back(arg.getInt());
      if (arg.getInt() >= 0 && arg.getInt() < body.getNumArguments())
        stateUpdatedBy[returned[r]] = body.getArgument(arg.getInt());
    }
  for (BlockArgument arg : body.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (i >= inputs.argDataOffsets.size()) {
      auto name = forward.getArgAttrOfType<StringAttr>(i, kStateAttrName);
      auto init = forward.getArgAttrOfType<FloatAttr>(i, kStateInitAttrName);
      if (!name || !init)
        return fail(forward, "argument " + llvm::Twine(i) + " is neither an input, a param nor tagged state");
      auto buffer = newBuffer(arg, name.str(), plan::STATE, forward);
      if (!buffer)
        return buffer.takeError();
      // The initial value, every element the same, is described, not stored: a plan holds its params once.
      auto type = llvm::cast<RankedTensorType>(arg.getType());
      if (!type.getElementType().isF32())
        return fail(forward, "state '" + name.str() + "' is not f32");
      variant.mutable_buffers(*buffer)->set_init_fill(static_cast<float>(init.getValueAsDouble()));
      if (auto ranks = forward.getArgAttrOfType<IntegerAttr>(i, kStateShardRanksAttrName)) {
        auto whole = forward.getArgAttrOfType<DenseI64ArrayAttr>(i, kStateShardOfAttrName);
        if (!whole)
          return fail(forward, "state '" + name.str() + "' is a shard of no whole shape");
        variant.mutable_buffers(*buffer)->set_shard_ranks(ranks.getInt());
        for (int64_t d : whole.asArrayRef())
          variant.mutable_buffers(*buffer)->add_shard_of(d);
      }
      auto kind = forward.getArgAttrOfType<StringAttr>(i, kStateKindAttrName);
      variant.mutable_buffers(*buffer)->set_kind(!kind                         ? plan::KIND_TRAINING_STATE
                                                 : kind.getValue() == "optimizer" ? plan::KIND_OPTIMIZER_STATE
                                                 : kind.getValue() == "fp8"       ? plan::KIND_FP8_STATE
                                                                                  : plan::KIND_TRAINING_STATE);
      continue;
    }
    bool isParam = inputs.argDataOffsets[i] >= 0;
    // A param the function returns a next value of (a training step) is state: it lives in the arena
    // and starts from its data.
    bool updated = isParam && llvm::is_contained(updatedArgs, i);
    auto buffer = newBuffer(arg, inputs.argNames[i], updated ? plan::STATE : isParam ? plan::PARAM : plan::INPUT,
                            forward);
    if (!buffer)
      return buffer.takeError();
    variant.mutable_buffers(*buffer)->set_kind(isParam ? plan::KIND_PARAM : plan::KIND_INPUT);
    if (updated)
      variant.mutable_buffers(*buffer)->set_init_offset(inputs.argDataOffsets[i]);
    else if (isParam)
      variant.mutable_buffers(*buffer)->set_offset(inputs.argDataOffsets[i]);
    else
      variant.add_inputs(*buffer);
    if (forward.getArgAttr(i, kHostF32AttrName))
      variant.mutable_buffers(*buffer)->set_host_f32(true);
  }
  position = 0;
  for (Operation &op : body.getOperations()) {
    ++position;
    if (auto ret = llvm::dyn_cast<func::ReturnOp>(op)) {
      for (Value v : ret.getOperands())
        noteUse(v, end);
      continue;
    }
    if (op.getDialect() == nullptr || op.getDialect()->getNamespace() != "tec")
      return fail(&op, "no kernel for this op");
    if (auto constant = llvm::dyn_cast<ConstantOp>(op)) {
      if (auto err = addConstant(constant, position))
        return std::move(err);
      continue;
    }
    if (auto err = addStep(&op, position))
      return std::move(err);
  }
  // Outputs live in the arena to the end; one that is an input, a param or a constant is copied out.
  auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
  int lossPosition = 0;
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    if (Operation *def = v.getDefiningOp(); def && forward.getResultAttr(i, kLossAttrName))
      lossPosition = static_cast<int>(std::distance(body.begin(), def->getIterator())) + 1;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    int buffer = bufferOf.lookup(v);
    // The next value of a state argument is copied over it after every other step has read it.
    if (auto arg = forward.getResultAttrOfType<IntegerAttr>(i, kStateUpdateAttrName)) {
      if (arg.getInt() < 0 || arg.getInt() >= body.getNumArguments())
        return fail(ret, "a state update names argument " + llvm::Twine(arg.getInt()));
      int state = bufferOf.lookup(body.getArgument(arg.getInt()));
      if (rootOf(buffer) == rootOf(state)) // written in place
        continue;
      auto *step = variant.add_steps();
      step->set_kernel("copy");
      step->set_source("state update");
      step->add_inputs(buffer);
      step->add_outputs(state);
      continue;
    }
    int root = rootOf(buffer);
    if (variant.buffers(root).role() != plan::TEMP && variant.buffers(root).role() != plan::OUTPUT) {
      auto *step = variant.add_steps();
      step->set_kernel("copy");
      step->set_source("output " + std::to_string(i));
      step->add_inputs(buffer);
      auto out = newBuffer(v, "output:" + std::to_string(i), plan::OUTPUT, ret);
      if (!out)
        return out.takeError();
      bufferOf[v] = buffer; // later outputs of the same value copy again, from the original
      step->add_outputs(*out);
      buffer = root = *out;
      firstDef[root] = end;
    }
    variant.mutable_buffers(root)->set_role(plan::OUTPUT);
    lastUse[root] = end + 1;
    variant.add_outputs(buffer);
  }
  // Inputs are set once and read by every run, state carries over between runs: both hold their
  // space for the whole step.
  for (int i = 0; i < variant.buffers_size(); ++i)
    if ((variant.buffers(i).role() == plan::INPUT || variant.buffers(i).role() == plan::STATE) &&
        variant.buffers(i).alias_of() < 0) {
      firstDef[i] = -1;
      lastUse[i] = end + 1;
    }
  assignKinds(lossPosition);
  planArena();
  return variant;
}

} // namespace

llvm::Expected<plan::Variant> buildVariant(func::FuncOp forward, const CodegenInputs &inputs, PlanDataBuilder &data) {
  VariantBuilder builder(forward, inputs, data);
  return builder.build();
}

} // namespace tec
