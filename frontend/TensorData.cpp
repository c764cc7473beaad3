// Initializers and constants: their element types, bytes (raw, typed or external data, checked), and
// the constant inputs operators read as integers, floats or elements.
#include "frontend/GraphImporter.h"

namespace tec::importer {

Expected<RankedTensorType> GraphImporter::tensorType(const onnx::TensorProto &t, const std::string &what) {
  Type elt = elementTypeFor(ctx, t.data_type());
  if (!elt)
    return unsupported(what + " has element type " + onnxTypeName(t.data_type()) +
                       " (supported: FLOAT, FLOAT16, BFLOAT16, INT32, INT64, BOOL, FLOAT8E4M3FN, FLOAT8E5M2)");
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  if (!shape::elementCount(dims))
    return invalid(what + " has dims [" + shape::str(dims) + "] whose element count is negative or overflows int64");
  if (storageBytes(elt) * *shape::elementCount(dims) / storageBytes(elt) != *shape::elementCount(dims))
    return invalid(what + " has dims [" + shape::str(dims) + "] whose byte size overflows int64");
  return RankedTensorType::get(dims, elt);
}

/// Resolves an external-data location inside the model's folder; a path that leaves it is refused.
static Expected<std::string> resolveExternal(llvm::StringRef modelPath, llvm::StringRef location,
                                             const std::string &what) {
  auto fail = [&](const llvm::Twine &why) {
    return makeError(ImportErrorKind::Invalid, modelPath + ": " + what + ": " + why);
  };
  if (location.empty())
    return fail("external data has no location");
  if (llvm::sys::path::is_absolute(location))
    return fail("external data location '" + location + "' is absolute; it must be relative to the model's folder");
  llvm::SmallString<256> dir(modelPath);
  llvm::sys::path::remove_filename(dir);
  if (dir.empty())
    dir = ".";
  llvm::SmallString<256> realDir, realFile, joined(dir);
  llvm::sys::path::append(joined, location);
  if (llvm::sys::fs::real_path(dir, realDir))
    return fail("cannot resolve the model's folder");
  if (llvm::sys::fs::real_path(joined, realFile))
    return fail("external data file '" + joined + "' does not exist");
  llvm::StringRef file(realFile);
  if (!file.starts_with(realDir) || file.size() <= realDir.size() ||
      !llvm::sys::path::is_separator(file[realDir.size()]))
    return fail("external data location '" + location + "' leaves the model's folder (refused)");
  return realFile.str().str();
}

Expected<ArrayRef<char>> GraphImporter::tensorBytes(const onnx::TensorProto &t, const std::string &what) {
  auto type = tensorType(t, what);
  if (!type)
    return type.takeError();
  int64_t expected = type->getNumElements() * storageBytes(type->getElementType());
  auto wrongSize = [&](int64_t got) {
    return invalid(what + " holds " + llvm::Twine(got) + " bytes of data, expected " + llvm::Twine(expected) +
                   " for " + shape::str(type->getShape()) + " " + onnxTypeName(t.data_type()));
  };
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto &kv : t.external_data()) {
      if (kv.key() == "location")
        location = kv.value();
      else if ((kv.key() == "offset" || kv.key() == "length") &&
               llvm::StringRef(kv.value()).getAsInteger(10, kv.key() == "offset" ? offset : length))
        return invalid(what + ": external data " + kv.key() + " '" + kv.value() + "' is not an integer");
    }
    auto file = resolveExternal(path, location, what);
    if (!file)
      return file.takeError();
    uint64_t fileSize = 0;
    if (!llvm::sys::fs::is_regular_file(*file) || llvm::sys::fs::file_size(*file, fileSize))
      return invalid(what + ": cannot read external data file '" + *file + "' (not a regular file)");
    if (offset < 0 || static_cast<uint64_t>(offset) > fileSize)
      return invalid(what + ": external data offset " + llvm::Twine(offset) + " is past the end of '" + *file + "'");
    int64_t available = static_cast<int64_t>(fileSize) - offset;
    if (length < 0)
      length = available;
    if (length > available)
      return invalid(what + ": external data needs " + llvm::Twine(length) + " bytes at offset " +
                     llvm::Twine(offset) + " but '" + *file + "' has " + llvm::Twine(available));
    if (length != expected)
      return wrongSize(length);
    if (expected == 0)
      return ArrayRef<char>();
    auto buffer = llvm::MemoryBuffer::getFileSlice(*file, length, offset);
    if (!buffer)
      return invalid(what + ": cannot map external data file '" + *file + "': " + buffer.getError().message());
    storage.mapped.push_back(std::move(*buffer));
    return ArrayRef<char>(storage.mapped.back()->getBufferStart(), length);
  }
  const int typedFields = (t.float_data_size() > 0) + (t.int32_data_size() > 0) + (t.int64_data_size() > 0) +
                          (t.double_data_size() > 0) + (t.uint64_data_size() > 0) + (t.string_data_size() > 0);
  if (typedFields + t.has_raw_data() > 1)
    return invalid(what + " holds its data in more than one field (raw_data and typed data)");
  if (t.has_raw_data()) {
    if (static_cast<int64_t>(t.raw_data().size()) != expected)
      return wrongSize(t.raw_data().size());
    return ArrayRef<char>(t.raw_data().data(), t.raw_data().size());
  }
  // Typed fields: float and the integer types are already laid out as raw data; the narrow types are
  // stored one per int32 and need packing.
  int64_t n = type->getNumElements();
  Type elt = type->getElementType();
  if (elt.isF32()) {
    if (t.float_data_size() != n)
      return wrongSize(int64_t(t.float_data_size()) * 4);
    return ArrayRef<char>(reinterpret_cast<const char *>(t.float_data().data()), expected);
  }
  if (elt.isInteger(64)) {
    if (t.int64_data_size() != n)
      return wrongSize(int64_t(t.int64_data_size()) * 8);
    return ArrayRef<char>(reinterpret_cast<const char *>(t.int64_data().data()), expected);
  }
  if (t.int32_data_size() != n)
    return wrongSize(int64_t(t.int32_data_size()) * storageBytes(elt));
  if (elt.isInteger(32))
    return ArrayRef<char>(reinterpret_cast<const char *>(t.int32_data().data()), expected);
  auto &packed = storage.owned.emplace_back(expected);
  int64_t width = storageBytes(elt);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t v = static_cast<uint32_t>(t.int32_data(i));
    std::memcpy(packed.data() + i * width, &v, width); // little-endian: the low bytes
  }
  return ArrayRef<char>(packed.data(), packed.size());
}

Error GraphImporter::checkTensorProto(const onnx::TensorProto &t, const std::string &what) {
  return tensorBytes(t, what).takeError();
}

void GraphImporter::findTransposedCopies() {
  // 2-D float initializers by shape; a [n, m] one equal to the transpose of an [m, n] one is its copy.
  std::map<std::pair<int64_t, int64_t>, std::vector<const onnx::TensorProto *>> byShape;
  for (const auto &init : graph.initializer())
    if (init.dims_size() == 2 && init.data_type() == onnx::TensorProto::FLOAT && !constants.contains(init.name()))
      byShape[{init.dims(0), init.dims(1)}].push_back(&init);
  auto floats = [&](const onnx::TensorProto &t) -> std::optional<ArrayRef<char>> {
    auto bytes = tensorBytes(t, t.name());
    if (!bytes) {
      llvm::consumeError(bytes.takeError()); // reported when the initializer is used
      return std::nullopt;
    }
    return *bytes;
  };
  for (const auto &[shape, copies] : byShape) {
    if (shape.first == shape.second || shape.first > shape.second)
      continue; // square ones would need a value check each way; each pair is visited once
    auto sources = byShape.find({shape.second, shape.first});
    if (sources == byShape.end())
      continue;
    for (const auto *copy : copies)
      for (const auto *source : sources->second) {
        auto a = floats(*source), b = floats(*copy);
        if (!a || !b || a->size() != b->size())
          continue;
        const int64_t rows = shape.second, cols = shape.first; // source is [rows, cols]
        bool transposed = true;
        for (int64_t r = 0; r < rows && transposed; ++r)
          for (int64_t c = 0; c < cols && transposed; ++c)
            transposed = std::memcmp(a->data() + (r * cols + c) * 4, b->data() + (c * rows + r) * 4, 4) == 0;
        if (!transposed)
          continue;
        // The param keeps the model's name (a state-dict path has dots; an exporter's copy does not).
        bool copyIsModel = llvm::StringRef(copy->name()).contains('.') && !llvm::StringRef(source->name()).contains('.');
        if (copyIsModel)
          transposedCopies[source->name()] = copy->name();
        else
          transposedCopies[copy->name()] = source->name();
        break;
      }
  }
}

Expected<std::vector<int64_t>> GraphImporter::constInts(const onnx::NodeProto &node, int i) {
  if (!hasInput(node, i))
    return nodeInvalid(node, "missing required input #" + llvm::Twine(i));
  const std::string &name = node.input(i);
  const onnx::TensorProto *t = nullptr;
  if (auto it = constants.find(name); it != constants.end())
    t = it->second;
  else if (auto it = initializers.find(name); it != initializers.end())
    t = it->second;
  if (auto it = values.find(name); !t && it != values.end())
    if (auto folded = it->second.getDefiningOp<ConstantOp>()) // computed from shapes and constants
      if (auto ints = llvm::dyn_cast<DenseIntElementsAttr>(folded.getValue());
          ints && (ints.getElementType().isInteger(64) || ints.getElementType().isInteger(32)))
      {
        std::vector<int64_t> result;
        for (const APInt &v : ints.getValues<APInt>())
          result.push_back(v.getSExtValue());
        return result;
      }
  if (!t)
    return nodeUnsupported(node, "input '" + name + "' must be a constant or an initializer (it decides a shape)");
  if (t->data_type() != onnx::TensorProto::INT64 && t->data_type() != onnx::TensorProto::INT32)
    return nodeInvalid(node, "input '" + name + "' must be INT64, got " + onnxTypeName(t->data_type()));
  auto bytes = tensorBytes(*t, "tensor '" + name + "'");
  if (!bytes)
    return bytes.takeError();
  // Element by element: an empty tensor has no storage to copy from.
  const bool wide = t->data_type() == onnx::TensorProto::INT64;
  std::vector<int64_t> result(bytes->size() / (wide ? 8 : 4));
  for (size_t i = 0; i < result.size(); ++i) {
    if (wide) {
      std::memcpy(&result[i], bytes->data() + 8 * i, 8);
    } else {
      int32_t v;
      std::memcpy(&v, bytes->data() + 4 * i, 4);
      result[i] = v;
    }
  }
  return result;
}

Expected<std::vector<float>> GraphImporter::constFloats(const onnx::NodeProto &node, int i) {
  const std::string &name = node.input(i);
  const onnx::TensorProto *t = nullptr;
  if (auto it = constants.find(name); it != constants.end())
    t = it->second;
  else if (auto it = initializers.find(name); it != initializers.end())
    t = it->second;
  std::vector<float> result;
  if (auto it = values.find(name); !t && it != values.end())
    if (auto folded = it->second.getDefiningOp<ConstantOp>())
      if (auto floats = llvm::dyn_cast<DenseFPElementsAttr>(folded.getValue())) {
        for (const APFloat &v : floats.getValues<APFloat>())
          result.push_back(v.convertToFloat());
        return result;
      }
  if (!t)
    return nodeUnsupported(node, "input '" + name + "' must be a constant or an initializer (it decides a shape)");
  if (t->data_type() != onnx::TensorProto::FLOAT)
    return nodeInvalid(node, "input '" + name + "' must be FLOAT, got " + onnxTypeName(t->data_type()));
  auto bytes = tensorBytes(*t, "tensor '" + name + "'");
  if (!bytes)
    return bytes.takeError();
  result.resize(bytes->size() / 4);
  if (!result.empty())
    std::memcpy(result.data(), bytes->data(), bytes->size());
  return result;
}

Expected<DenseElementsAttr> GraphImporter::constElements(const onnx::NodeProto &n, int i) {
  TRY_ASSIGN(v, value(n, i));
  if (auto constant = v.getDefiningOp<ConstantOp>())
    if (auto dense = llvm::dyn_cast<DenseElementsAttr>(constant.getValue()))
      return dense;
  return nodeUnsupported(n, "input '" + n.input(i) + "' must be a constant or an initializer (it decides a shape)");
}

} // namespace tec::importer
