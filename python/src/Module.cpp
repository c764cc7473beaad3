// tec._tec: the nanobind layer over api/ that the `tec` package (python/tec/__init__.py) wraps. Arrays
// cross as NumPy arrays (C-contiguous, the tensor's dtype); the GIL is released while a plan compiles,
// runs or trains.
#include "api/Checkpoint.h"
#include "api/Compile.h"
#include "api/Export.h"
#include "api/Inspect.h"
#include "api/Runtime.h"
#include "api/Trainer.h"

#include "llvm/ADT/StringExtras.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <set>

namespace nb = nanobind;
using namespace tec;

namespace {

/// Raised as tec.Error subclasses by the package: (kind, message, and an unsupported model's operators).
struct CompileFailure {
  std::string kind, message;
  std::vector<std::pair<std::string, std::string>> operators = {};
};

std::string kindName(ErrorKind kind) {
  switch (kind) {
  case ErrorKind::BadModel: return "bad_model";
  case ErrorKind::Unsupported: return "unsupported";
  case ErrorKind::BadInput: return "bad_input";
  case ErrorKind::Internal: return "internal";
  }
  return "internal";
}

/// A runtime failure: bad data (an index out of range) is the user's input, the rest is tec's.
[[noreturn]] void raise(const Status &s, const char *kind = nullptr) {
  throw CompileFailure{kind ? kind : (s.isBadData() ? "bad_input" : "internal"), s.message()};
}


/// Each tensor's name, dtype ("f32", "i64", ...) and shape.
nb::list tensorList(const std::vector<TensorInfo> &tensors) {
  nb::list l;
  for (const auto &t : tensors) {
    nb::dict d;
    d["name"] = t.name;
    d["dtype"] = dtypeName(t.dtype);
    d["shape"] = t.shape;
    l.append(d);
  }
  return l;
}

/// Any C-contiguous CPU array (NumPy's, or a DLPack tensor such as PyTorch's), read where it lies.
using HostArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

/// A C-contiguous CUDA tensor (PyTorch's through DLPack), copied device to device.
using DeviceArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cuda>;

/// Copies `array`'s bytes into input `index` after checking their count against the tensor; the package
/// has already matched dtype and shape by name.
void bindInput(Session &s, size_t index, const HostArray &array) {
  const TensorInfo &info = s.inputs()[index];
  if (static_cast<int64_t>(array.nbytes()) != info.bytes)
    throw CompileFailure{"bad_input", "input '" + info.name + "': expected " + std::to_string(info.bytes) +
                                          " bytes, got " + std::to_string(array.nbytes())};
  if (Status st = s.setInput(index, array.data(), info.bytes); !st.ok())
    raise(st, "bad_input");
}

nb::bytes outputBytes(Session &s, size_t index) {
  return nb::bytes(static_cast<const char *>(s.outputData(index)), s.outputs()[index].bytes);
}

SessionOptions sessionOptions(const std::string &device, int threads, bool fp8Stats, bool fusion) {
  SessionOptions o;
  o.device = device;
  o.threads = threads;
  o.fp8Stats = fp8Stats;
  o.fusion = fusion;
  return o;
}

/// An inference session on `plan` with the params `params` gives (none: the plan's), its weights said.
std::unique_ptr<Session> openSession(const std::string &plan, const std::string &device, int threads, bool fusion,
                                     ParamSource params, const std::string &weights) {
  SessionOptions options = sessionOptions(device, threads, false, fusion);
  options.params = std::move(params);
  std::optional<Result<std::unique_ptr<Session>>> s;
  {
    nb::gil_scoped_release release;
    s.emplace(Session::open(plan, options));
  }
  if (!s->ok())
    raise(s->error(), "bad_input");
  (**s)->setWeightsSource(weights);
  return s->take();
}

} // namespace

NB_MODULE(_tec, m) {
  m.doc() = "tec's C++ API (use the tec package)";
  m.attr("__version__") = TEC_VERSION;
  nb::register_exception_translator([](const std::exception_ptr &p, void *) {
    try {
      std::rethrow_exception(p);
    } catch (const CompileFailure &f) {
      nb::object tec = nb::module_::import_("tec");
      nb::object error = tec.attr("_error")(f.kind, f.message, f.operators);
      PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(error.ptr())), error.ptr());
    }
  });

  m.def(
      "compile_to_file",
      [](nb::object modelSource, bool modelIsBytes, const std::string &plan,
         const std::map<std::string, std::vector<int64_t>> &shapes,
         const std::vector<std::string> &targets, const std::map<std::string, std::string> &strings,
         const std::map<std::string, double> &numbers, bool train, const std::vector<std::string> &disabledPasses) {
        // A path (str), or the serialized model (bytes).
        std::string model;
        if (modelIsBytes) {
          nb::bytes b = nb::cast<nb::bytes>(modelSource);
          model.assign(b.c_str(), b.size());
        } else {
          model = nb::cast<std::string>(modelSource);
        }
        CompileOptions options;
        for (const auto &[name, dims] : shapes)
          options.import.shapes[name] = llvm::SmallVector<int64_t>(dims.begin(), dims.end());
        auto resolved = resolveTargets(llvm::join(targets, ","));
        if (!resolved)
          throw CompileFailure{"bad_input", llvm::toString(resolved.takeError())};
        options.targets = *resolved;
        auto &p = options.pipeline;
        p.disabledPasses.insert(disabledPasses.begin(), disabledPasses.end());
        // Each key names one option; a key no option takes (a name misspelled in tec/__init__.py, a TrainOptions
        // field without its C++ twin) is an error, not an option silently left at its default.
        std::set<std::string> unread;
        for (const auto &[key, value] : strings)
          unread.insert(key);
        for (const auto &[key, value] : numbers)
          unread.insert(key);
        auto str = [&](const char *key, std::string &field) {
          if (auto it = strings.find(key); it != strings.end())
            field = it->second, unread.erase(key);
        };
        auto num = [&](const char *key, auto &field) {
          if (auto it = numbers.find(key); it != numbers.end())
            field = static_cast<std::remove_reference_t<decltype(field)>>(it->second), unread.erase(key);
        };
        auto choice = [&](const char *key, const char *flag, auto &field) {
          if (auto it = strings.find(key); it != strings.end()) {
            unread.erase(key);
            if (std::string e = readChoiceOption(flag, it->second, field); !e.empty())
              throw CompileFailure{"bad_input", e};
          }
        };
        choice("fp8", "fp8", p.fp8.mode), choice("fp8_format", "fp8-format", p.fp8.format),
            choice("amax_algo", "amax-algo", p.fp8.algo);
        str("keep_precision", p.fp8.keepPrecision), str("fp8_recipe", p.fp8.recipe),
            str("fp8_block_scales", p.fp8.blockScales);
        if (auto it = strings.find("fp8_calibration"); it != strings.end()) {
          unread.erase("fp8_calibration");
          if (std::string e = readFp8Calibration(it->second, p.fp8.recipe); !e.empty())
            throw CompileFailure{"bad_input", e};
        }
        num("amax_history", p.fp8.amaxHistory), num("fp8_margin", p.fp8.margin), num("fast_gelu", p.fastGelu),
            num("fp8_emulate", p.fp8Emulate), num("fp8_attention", p.fp8.attention);
        auto &t = p.train;
        choice("loss", "loss", t.loss), choice("optimizer", "optimizer", t.optimizer),
            choice("schedule", "schedule", t.schedule);
        str("frozen", t.frozen), str("trainable", t.trainable);
        num("lr", t.learningRate), num("momentum", t.momentum), num("beta1", t.beta1), num("beta2", t.beta2), num("eps", t.eps),
            num("weight_decay", t.weightDecay), num("clip_norm", t.clipNorm), num("nesterov", t.nesterov),
            num("warmup_steps", t.warmupSteps), num("total_steps", t.totalSteps), num("loss_scale", t.lossScale),
            num("loss_scale_growth_interval", t.growthInterval), num("ignore_index", t.ignoreIndex), num("accumulate", t.accumulate),
            num("bucket_mb", t.bucketMb), num("shard_optimizer", t.shardOptimizer);
        if (!unread.empty())
          throw nb::type_error(("compile: unknown option '" + *unread.begin() + "'").c_str());
        options.train = train;
        std::optional<ApiError> error;
        std::string summary;
        {
          nb::gil_scoped_release release;
          error = modelIsBytes ? compileBytesToPlanFile(model, options, plan, &summary)
                               : compileToPlanFile(model, options, plan, &summary);
        }
        if (error)
          throw CompileFailure{kindName(error->kind), error->message, error->operators};
        return summary;
      },
      nb::arg("model"), nb::arg("model_is_bytes"), nb::arg("plan"), nb::arg("shapes"), nb::arg("targets"), nb::arg("strings"),
      nb::arg("numbers"), nb::arg("train"), nb::arg("disabled_passes"));

  m.def("describe_plan", [](const std::string &path, bool json) {
    auto file = PlanFile::open(path);
    if (!file.ok())
      raise(file.error(), "bad_input");
    return json ? planMetadataJson((*file)->plan()) : describePlan(**file, path);
  });

  m.def("doctor", [](const std::string &plan) {
    auto facts = doctorFacts(plan);
    if (!facts.ok())
      raise(facts.error(), "bad_input");
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const auto &f : *facts)
      pairs.emplace_back(f.key, f.value);
    return pairs;
  });

  m.def("export_onnx", [](const std::string &plan, const std::string &checkpoint, const std::string &output) {
    auto exported = exportOnnx(plan, checkpoint, output);
    if (!exported.ok())
      raise(exported.error(), "bad_input");
    return exported->trained;
  });

  nb::class_<Session>(m, "Session")
      .def_static(
          "open",
          [](const std::string &plan, const std::string &device, int threads, const std::string &checkpoint,
             bool fusion) {
            if (checkpoint.empty())
              return openSession(plan, device, threads, fusion, nullptr, "plan");
            std::string folder; // DIR/step-N, once read
            auto s = openSession(plan, device, threads, fusion, checkpointParams(checkpoint, &folder), "");
            s->setWeightsSource("checkpoint " + folder);
            return s;
          },
          nb::arg("plan"), nb::arg("device"), nb::arg("threads"), nb::arg("checkpoint") = "", nb::arg("fusion") = true)
      .def_static(
          "open_with_trainer",
          [](const std::string &plan, const std::string &device, int threads, Trainer &trainer, bool fusion) {
            auto params = trainer.currentParams();
            if (!params.ok())
              raise(params.error());
            return openSession(plan, device, threads, fusion, *params,
                               "trainer step " + std::to_string(trainer.steps()));
          },
          nb::arg("plan"), nb::arg("device"), nb::arg("threads"), nb::arg("trainer"), nb::arg("fusion") = true)
      .def("weights", [](Session &s) { return s.weightsSource(); })
      .def("inputs", [](Session &s) { return tensorList(s.inputs()); })
      .def("outputs", [](Session &s) { return tensorList(s.outputs()); })
      .def("set_input", [](Session &s, size_t index, const HostArray &a) { bindInput(s, index, a); })
      .def("set_input_device",
           [](Session &s, size_t index, const DeviceArray &a) {
             const TensorInfo &info = s.inputs()[index];
             if (static_cast<int64_t>(a.nbytes()) != info.bytes)
               throw CompileFailure{"bad_input", "input '" + info.name + "': expected " + std::to_string(info.bytes) +
                                                     " bytes, got " + std::to_string(a.nbytes())};
             if (Status st = s.setInputFromDevice(index, a.data()); !st.ok())
               raise(st, "bad_input");
           })
      .def("run",
           [](Session &s) {
             Status st = Status::success();
             {
               nb::gil_scoped_release release;
               st = s.run();
             }
             if (!st.ok())
               raise(st);
           })
      .def("output", &outputBytes)
      .def(
          "output_device",
          [](nb::handle self, size_t index) -> nb::object {
            Session &s = nb::cast<Session &>(self);
            const void *data = s.outputDevicePointer(index);
            if (!data)
              return nb::none();
            const TensorInfo &info = s.outputs()[index];
            nb::dlpack::dtype dtype;
            switch (info.dtype) {
            case plan::F32: dtype = nb::dtype<float>(); break;
            case plan::I32: dtype = nb::dtype<int32_t>(); break;
            case plan::I64: dtype = nb::dtype<int64_t>(); break;
            case plan::BOOL: dtype = nb::dtype<bool>(); break;
            case plan::F16: dtype = {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}; break;
            case plan::BF16: dtype = {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1}; break;
            default: throw CompileFailure{"bad_input", "output '" + info.name + "' has no DLPack type"};
            }
            std::vector<size_t> shape(info.shape.begin(), info.shape.end());
            // A view of the output where it lies on the GPU, keeping the session alive; the next run overwrites it.
            return nb::cast(nb::ndarray<nb::device::cuda>(const_cast<void *>(data), shape.size(), shape.data(), self,
                                                          nullptr, dtype, nb::device::cuda::value, 0));
          },
          nb::arg("index"))
      .def("selection_reason", [](Session &s) { return s.selectionReason(); })
      .def("backend", [](Session &s) { return s.backendName(); })
      .def("schedule", [](Session &s) { return describeSchedule(s); });

  nb::class_<Trainer>(m, "Trainer")
      .def_static(
          "open",
          [](const std::string &plan, const std::string &device, int threads, bool fp8Stats, bool fusion) {
            auto t = Trainer::open(plan, sessionOptions(device, threads, fp8Stats, fusion));
            if (!t.ok())
              raise(t.error(), "bad_input");
            return t.take();
          },
          nb::arg("plan"), nb::arg("device"), nb::arg("threads"), nb::arg("fp8_stats"), nb::arg("fusion") = true)
      .def("inputs", [](Trainer &t) { return tensorList(t.inputs()); })
      .def("set_input", [](Trainer &t, size_t index, const HostArray &a) { bindInput(t.session(), index, a); })
      .def("step",
           [](Trainer &t) {
             std::optional<Result<float>> loss;
             {
               nb::gil_scoped_release release;
               loss.emplace(t.step());
             }
             if (!loss->ok())
               raise(loss->error());
             return **loss;
           })
      .def("train_on",
           [](Trainer &t, const std::vector<std::string> &outputs) {
             if (Status st = t.trainOn(outputs); !st.ok())
               raise(st, "bad_input");
           })
      .def("trained_outputs", [](Trainer &t) { return t.trainedOutputs(); })
      .def("loss_scale", [](Trainer &t) { return t.lossScale(); })
      .def("learning_rate",
           [](Trainer &t) {
             auto lr = t.learningRate();
             if (!lr.ok())
               raise(lr.error(), "bad_input");
             return *lr;
           })
      .def("set_learning_rate",
           [](Trainer &t, float lr) {
             if (Status st = t.setLearningRate(lr); !st.ok())
               raise(st, "bad_input");
           })
      .def("steps", &Trainer::steps)
      .def("accumulation", &Trainer::accumulation)
      .def("process_group",
           [](Trainer &) {
             auto group = ProcessGroup::get();
             if (!group.ok())
               raise(group.error(), "bad_input");
             return std::make_pair((*group)->rank(), (*group)->size());
           })
      .def("set_collective_timeout",
           [](Trainer &, double seconds) {
             auto group = ProcessGroup::get();
             if (!group.ok())
               raise(group.error(), "bad_input");
             (*group)->setTimeout(seconds);
           })
      .def("save",
           [](Trainer &t, const std::string &dir) {
             if (Status st = t.save(dir); !st.ok())
               raise(st, "bad_input");
           })
      .def("resume",
           [](Trainer &t, const std::string &dir) {
             auto step = t.resume(dir);
             if (!step.ok())
               raise(step.error(), "bad_input");
             return *step;
           })
      .def("fp8_health",
           [](Trainer &t) {
             nb::list l;
             for (const auto &h : t.fp8Health()) {
               nb::dict d;
               d["tensor"] = h.tensor;
               d["amax"] = h.amax;
               d["scale"] = h.scale;
               d["saturated"] = h.saturated;
               d["flushed"] = h.flushed;
               d["recent_amax"] = h.recentAmax;
               if (h.blocks) {
                 d["blocks"] = h.blocks;
                 d["scale_inv_min"] = h.smallestScaleInv;
                 d["scale_inv_max"] = h.largestScaleInv;
               }
               l.append(d);
             }
             return l;
           })
      .def("selection_reason", [](Trainer &t) { return t.session().selectionReason(); });
}
