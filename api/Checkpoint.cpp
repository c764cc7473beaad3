#include "api/Checkpoint.h"

#include "runtime/Collectives.h"
#include "support/Sharding.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <functional>
#include <numeric>
#include <mutex>
#include <csignal>
#include <cstring>
#include <set>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace tec {

namespace {

uint64_t fnv1a(const void *data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < bytes; ++i)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string hex(uint64_t v) { return llvm::utohexstr(v, /*LowerCase=*/true, /*Width=*/16); }

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Temporary folders of checkpoints whose writer is gone (a crash mid-write) are removed.
void removeAbandonedTemporaries(const std::string &dir) {
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (!name.starts_with(".step-") || !name.contains(".tmp."))
      continue;
    int pid = 0;
    if (name.rsplit(".tmp.").second.getAsInteger(10, pid) || pid == ::getpid() || (pid > 0 && ::kill(pid, 0) == 0))
      continue;
    llvm::sys::fs::remove_directories(it->path());
  }
}

/// The step a `latest` file names: "step-N", N a non-negative integer of at most 10 digits.
Result<std::pair<std::string, int64_t>> latestOf(const std::string &dir) {
  if (!llvm::sys::fs::is_directory(dir))
    return Status::error(dir + ": no checkpoint folder");
  if (!llvm::sys::fs::is_regular_file(dir + "/latest"))
    return Status::error(dir + ": no checkpoint (no regular 'latest' file)");
  auto latest = llvm::MemoryBuffer::getFile(dir + "/latest");
  if (!latest)
    return Status::error(dir + ": no checkpoint (no 'latest' file)");
  std::string name = llvm::StringRef((*latest)->getBuffer()).trim().str();
  llvm::StringRef number = llvm::StringRef(name).drop_front(name.rfind("step-", 0) == 0 ? 5 : 0);
  int64_t step = 0;
  if (name.rfind("step-", 0) != 0 || number.empty() || number.size() > 10 ||
      !llvm::all_of(number, llvm::isDigit) || number.getAsInteger(10, step) || step > 2147483647)
    return Status::error(dir + "/latest: names no checkpoint ('" + name + "'; expected step-N)");
  return std::make_pair(name, step);
}

/// Values a trained state can hold: finite params, moments and step; Adam's second moments not negative.
/// (FP8 amax histories may hold a NaN the training saw.)
std::string valueProblem(const std::string &name, const HostTensor &t) {
  if (t.dtype != plan::F32 || llvm::StringRef(name).ends_with("/amax_history"))
    return "";
  const size_t n = t.bytes.size() / 4;
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, t.bytes.data() + 4 * i, 4);
    if (!std::isfinite(v))
      return "holds a non-finite value at " + std::to_string(i) + " (the training had diverged, or the file is corrupt)";
    if (v < 0 && llvm::StringRef(name).ends_with("/adam_v"))
      return "holds a negative second moment at " + std::to_string(i);
  }
  return "";
}

} // namespace

std::vector<int64_t> wholeShape(const plan::Buffer &state) {
  return state.shard_ranks() > 0 ? std::vector<int64_t>(state.shard_of().begin(), state.shard_of().end())
                                 : std::vector<int64_t>(state.shape().begin(), state.shape().end());
}

Result<std::map<std::string, HostTensor>> wholeState(Session &s) {
  const auto &v = s.variant();
  std::map<std::string, HostTensor> state;
  for (int b = 0; b < v.buffers_size(); ++b) {
    const auto &buffer = v.buffers(b);
    if (buffer.role() != plan::STATE)
      continue;
    HostTensor &t = state[buffer.name()];
    t.dtype = buffer.dtype();
    t.shape = wholeShape(buffer);
    t.bytes.resize(buffer.bytes());
    if (Status st = s.readBuffer(b, t.bytes.data()); !st.ok())
      return st;
    if (buffer.shard_ranks() == 0)
      continue;
    auto group = ProcessGroup::get();
    if (!group.ok())
      return group.error();
    const int64_t elements = std::accumulate(t.shape.begin(), t.shape.end(), int64_t(1), std::multiplies<>());
    const int64_t k = shardElements(elements, buffer.shard_ranks());
    if ((*group)->size() != buffer.shard_ranks() || buffer.bytes() != k * 4)
      return Status::error("state '" + buffer.name() + "' is a shard over " + std::to_string(buffer.shard_ranks()) +
                           " ranks, and this run has " + std::to_string((*group)->size()));
    std::vector<float> all(k * buffer.shard_ranks());
    if (Status st = (*group)->allGather(reinterpret_cast<const float *>(t.bytes.data()), all.data(), k); !st.ok())
      return st;
    t.bytes.assign(reinterpret_cast<const uint8_t *>(all.data()), reinterpret_cast<const uint8_t *>(all.data() + elements));
  }
  return state;
}

std::string stateFingerprint(const plan::Variant &variant) {
  uint64_t h = fnv1a("tec-state", 9);
  for (const auto &b : variant.buffers()) {
    if (b.role() != plan::STATE)
      continue;
    h = fnv1a(b.name().data(), b.name().size() + 1, h);
    const int32_t dtype = b.dtype();
    h = fnv1a(&dtype, sizeof(dtype), h);
    for (int64_t d : wholeShape(b))
      h = fnv1a(&d, sizeof(d), h);
    h = fnv1a("|", 1, h);
  }
  return hex(h);
}

namespace {

/// This process, as a lock file names its holder: "pid N: the command line".
std::string holderText() {
  std::string text = "pid " + std::to_string(getpid()) + ":";
  if (auto cmdline = llvm::MemoryBuffer::getFileAsStream("/proc/self/cmdline")) { // /proc's files have no size
    llvm::SmallVector<llvm::StringRef> args;
    (*cmdline)->getBuffer().split(args, '\0', -1, false);
    for (llvm::StringRef a : args)
      text += " " + a.str();
  }
  return text + "\n";
}

} // namespace

Result<std::unique_ptr<CheckpointLock>> CheckpointLock::acquire(const std::string &dir) {
  if (auto ec = llvm::sys::fs::create_directories(dir))
    return Status::badData(dir + ": cannot create the checkpoint folder: " + ec.message());
  // Within one process the folder is shared (a trainer resuming while another object still has it); the
  // flock keeps other processes out.
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<Held>> held;
  llvm::SmallString<256> real;
  if (llvm::sys::fs::real_path(dir, real))
    real = dir;
  std::lock_guard<std::mutex> guard(mutex);
  if (auto shared = held[real.str().str()].lock())
    return std::unique_ptr<CheckpointLock>(new CheckpointLock(dir, shared));
  const std::string path = dir + "/.tec-lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::badData(path + ": cannot open the checkpoint folder's lock: " + std::strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    char holder[512] = {};
    ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    std::string who = n > 0 ? std::string(holder, n) : std::string("another process");
    while (!who.empty() && who.back() == '\n')
      who.pop_back();
    if (why == EWOULDBLOCK)
      return Status::badData(dir + ": another training run writes its checkpoints here (" + who +
                             "); wait for it, or choose another --checkpoint-dir");
    return Status::badData(path + ": cannot lock the checkpoint folder: " + std::strerror(why));
  }
  const std::string text = holderText();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    ::close(fd);
    return Status::badData(path + ": cannot write the checkpoint folder's lock: " + std::strerror(errno));
  }
  auto shared = std::make_shared<Held>(fd);
  held[real.str().str()] = shared;
  return std::unique_ptr<CheckpointLock>(new CheckpointLock(dir, shared));
}

CheckpointLock::Held::~Held() { ::close(fd); } // the flock goes with the descriptor

Status writeCheckpoint(const plan::Variant &v, const std::map<std::string, HostTensor> &state, const std::string &dir,
                       int64_t step) {
  removeAbandonedTemporaries(dir);
  std::string name = "step-" + std::to_string(step);
  std::string tmp = dir + "/." + name + ".tmp." + std::to_string(::getpid());
  llvm::sys::fs::remove_directories(tmp);
  if (auto ec = llvm::sys::fs::create_directories(tmp))
    return Status::error(tmp + ": " + ec.message());
  // The params in model.safetensors (what a PyTorch module's load_state_dict takes), the rest of the state
  // (optimizer moments, FP8 scales and histories, the step) in training.safetensors.
  std::vector<std::pair<std::string, const HostTensor *>> files[2];
  llvm::json::Array tensors;
  for (const auto &buffer : v.buffers()) {
    if (buffer.role() != plan::STATE)
      continue;
    const HostTensor &t = state.at(buffer.name());
    const bool param = buffer.kind() == plan::KIND_PARAM;
    files[param ? 0 : 1].emplace_back(buffer.name(), &t);
    llvm::json::Array dims;
    for (int64_t d : t.shape)
      dims.push_back(d);
    tensors.push_back(llvm::json::Object{{"name", buffer.name()},
                                         {"file", param ? kParamsFile : kTrainingFile},
                                         {"dtype", std::string(dtypeName(buffer.dtype()))},
                                         {"shape", std::move(dims)},
                                         {"fnv1a64", hex(fnv1a(t.bytes.data(), t.bytes.size()))}});
  }
  // TEC_TEST_CRASH_IN_CHECKPOINT=N kills the process after N files, as a crash mid-write would (tests).
  const char *crashAfter = std::getenv("TEC_TEST_CRASH_IN_CHECKPOINT");
  int written = 0;
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"producer", "tec"}, {"step", std::to_string(step)}};
  for (int f = 0; f < 2; ++f) {
    if (crashAfter && written++ == std::atoi(crashAfter))
      ::_exit(86);
    if (Status st = writeSafetensors(tmp + "/" + (f == 0 ? kParamsFile : kTrainingFile), files[f], metadata); !st.ok())
      return st;
  }
  llvm::json::Object manifest{{"format", kCheckpointFormat},
                              {"step", step},
                              {"state", stateFingerprint(v)},
                              {"tensors", std::move(tensors)}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::json::Value(std::move(manifest)) << "\n";
  os.flush();
  // Every file (the tensors by writeSafetensors too) is written to a temporary, synced and renamed.
  if (Status st = writeFileAtomically(tmp + "/manifest.json", text); !st.ok())
    return st;
  std::string final = dir + "/" + name;
  llvm::sys::fs::remove_directories(final);
  if (::rename(tmp.c_str(), final.c_str()) != 0)
    return Status::error(final + ": cannot rename the checkpoint into place");
  return writeFileAtomically(dir + "/latest", name + "\n");
}

Result<Checkpoint> loadCheckpoint(const std::string &dir, const plan::Variant &variant) {
  auto latest = latestOf(dir);
  if (!latest.ok())
    return latest.error();
  Checkpoint c;
  c.folder = dir + "/" + latest->first;
  c.step = latest->second;
  const std::string manifestPath = c.folder + "/manifest.json";
  auto fail = [&](const std::string &why) { return Status::error(manifestPath + ": " + why); };
  auto text = llvm::sys::fs::is_regular_file(manifestPath)
                  ? llvm::MemoryBuffer::getFile(manifestPath)
                  : llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>>(std::make_error_code(std::errc::invalid_argument));
  if (!text)
    return Status::error(c.folder + ": no manifest.json (not a checkpoint, or one being written)");
  auto parsed = llvm::json::parse((*text)->getBuffer());
  if (!parsed) {
    std::string why = llvm::toString(parsed.takeError());
    return fail("not JSON (" + why + ")");
  }
  const auto *manifest = parsed->getAsObject();
  if (!manifest)
    return fail("not a JSON object");
  // Format 2 (a .npy file per tensor) is still read: a run resumes from checkpoints of an earlier tec.
  const auto format = manifest->getInteger("format");
  if (format != kCheckpointFormat && format != 2)
    return fail("format " + (format ? std::to_string(*format) : std::string("1 (no checksums)")) + ", expected " +
                std::to_string(kCheckpointFormat) + " (or 2): written by another version of tec");
  if (manifest->getInteger("step") != c.step)
    return fail("holds step " +
                (manifest->getInteger("step") ? std::to_string(*manifest->getInteger("step")) : std::string("?")) +
                ", but its folder says step " + std::to_string(c.step));
  if (manifest->getString("state") != llvm::StringRef(stateFingerprint(variant)))
    return fail("the checkpoint's state does not fit variant " + variant.target() +
                " of this plan (another model, or another variant or training setup)");
  const auto *list = manifest->getArray("tensors");
  if (!list)
    return fail("no tensor list");
  // Every entry names one state buffer of the variant, once: an empty, unknown or repeated name is a
  // manifest tec did not write.
  std::set<std::string> stateNames;
  for (const auto &buffer : variant.buffers())
    if (buffer.role() == plan::STATE)
      stateNames.insert(buffer.name());
  std::map<std::string, const llvm::json::Object *> entries;
  for (const auto &e : *list) {
    const auto *o = e.getAsObject();
    auto name = o ? o->getString("name") : std::nullopt;
    if (!name || name->empty())
      return fail("a tensor entry without a name");
    if (!stateNames.count(name->str()))
      return fail("an entry for '" + name->str() + "', which is no state of this plan");
    if (!entries.emplace(name->str(), o).second)
      return fail("two entries for '" + name->str() + "'");
  }
  std::map<std::string, std::map<std::string, HostTensor>> files; // format 3: each safetensors file, read once
  for (const auto &buffer : variant.buffers()) {
    if (buffer.role() != plan::STATE)
      continue;
    auto entry = entries.find(buffer.name());
    if (entry == entries.end())
      return fail("has no tensor '" + buffer.name() + "'");
    const auto *o = entry->second;
    auto file = o->getString("file");
    const std::string expected = format == 2 ? fileNameFor(buffer.name()) + ".npy"
                                 : buffer.kind() == plan::KIND_PARAM ? kParamsFile
                                                                     : kTrainingFile;
    if (!file || *file != expected)
      return fail("tensor '" + buffer.name() + "' is not in " + expected);
    std::string path = c.folder + "/" + file->str();
    Result<HostTensor> tensor = Status::error(path + ": has no tensor '" + buffer.name() + "'");
    if (format == 2) {
      tensor = readTensorFile(path);
    } else {
      auto it = files.find(expected);
      if (it == files.end()) {
        auto read = readSafetensors(path);
        if (!read.ok())
          return read.error();
        it = files.emplace(expected, read.take()).first;
      }
      if (auto t = it->second.find(buffer.name()); t != it->second.end())
        tensor = std::move(t->second);
      path += " ('" + buffer.name() + "')";
    }
    if (!tensor.ok())
      return tensor.error();
    const std::vector<int64_t> shape = wholeShape(buffer);
    if (tensor->dtype != buffer.dtype() || tensor->shape != shape)
      return Status::error(path + ": holds " + std::string(dtypeName(tensor->dtype)) + shapeText(tensor->shape) + ", expected '" +
                           buffer.name() + "' as " + std::string(dtypeName(buffer.dtype())) + shapeText(shape));
    if (o->getString("fnv1a64") != llvm::StringRef(hex(fnv1a(tensor->bytes.data(), tensor->bytes.size()))))
      return Status::error(path + ": its checksum does not match the manifest's (the file changed after it was written)");
    if (std::string why = valueProblem(buffer.name(), *tensor); !why.empty())
      return Status::error(path + ": " + why);
    c.tensors[buffer.name()] = std::move(*tensor);
  }
  // The counters the checkpoint holds must be those of the step its folder names: "step" counts optimizer
  // updates (one per `accumulate` steps), "accumulate/micro" the steps since the last one.
  const int64_t perUpdate = std::max(1, variant.accumulate());
  for (auto [name, expected] : {std::pair<std::string, int64_t>{"step", c.step / perUpdate},
                                {"accumulate/micro", c.step % perUpdate}}) {
    auto it = c.tensors.find(name);
    if (it == c.tensors.end() || it->second.bytes.size() != 4)
      continue;
    float stored;
    std::memcpy(&stored, it->second.bytes.data(), 4);
    if (stored != static_cast<float>(expected)) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", stored);
      return Status::error(c.folder + (format == 2 ? "/" + fileNameFor(name) + ".npy"
                                                   : "/" + std::string(kTrainingFile) + " ('" + name + "')") +
                           ": holds " + text + ", but the checkpoint is step " + std::to_string(c.step) +
                           (perUpdate > 1 ? llvm::formatv(" (after {0} updates of {1} steps)", c.step / perUpdate,
                                                          perUpdate).str()
                                          : std::string()));
    }
  }
  return c;
}

Result<std::map<std::string, std::string>> inferenceParams(const plan::Plan &plan, const plan::Variant &inference,
                                                           const plan::Variant &train,
                                                           const std::map<std::string, HostTensor> &trained) {
  std::map<std::string, std::string> params;
  std::set<std::string> placed; // trained params some inference param took
  for (const auto &b : inference.buffers()) {
    if (b.role() != plan::PARAM)
      continue;
    auto copyOf = plan.transposed_copies().find(b.name());
    const bool copy = copyOf != plan.transposed_copies().end();
    const std::string &source = copy ? copyOf->second : b.name();
    auto it = trained.find(source);
    if (it == trained.end())
      continue; // not trained: the plan's value is the value
    const HostTensor &t = it->second;
    std::vector<int64_t> shape(b.shape().begin(), b.shape().end());
    if (copy && shape.size() == 2)
      std::swap(shape[0], shape[1]);
    if (t.dtype != b.dtype() || t.shape != shape || static_cast<int64_t>(t.bytes.size()) != b.bytes())
      return Status::error("trained param '" + source + "' is " + dtypeName(t.dtype) + shapeText(t.shape) +
                           ", but variant " + inference.target() + " holds '" + b.name() + "' as " +
                           dtypeName(b.dtype()) + shapeText(shape) + (copy ? " transposed" : ""));
    std::string &bytes = params[b.name()];
    if (!copy) {
      bytes.assign(t.bytes.begin(), t.bytes.end());
    } else { // [rows, cols] -> [cols, rows], element by element
      const int64_t rows = shape[0], cols = shape[1], width = dtypeBytes(b.dtype());
      bytes.resize(t.bytes.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          std::memcpy(&bytes[(c * rows + r) * width], &t.bytes[(r * cols + c) * width], width);
    }
    placed.insert(source);
  }
  for (const auto &b : train.buffers())
    if (b.role() == plan::STATE && b.kind() == plan::KIND_PARAM && trained.count(b.name()) && !placed.count(b.name()))
      return Status::error("variant " + inference.target() + " has no param '" + b.name() +
                           "', which training updates: it cannot run the trained model (export it and compile that)");
  return params;
}

ParamSource checkpointParams(const std::string &dir, std::string *loaded) {
  return [dir, loaded](const plan::Plan &plan,
                       const plan::Variant &inference) -> Result<std::map<std::string, std::string>> {
    Status why = Status::error(dir + ": the plan has no train variant, so no checkpoint of it (compile with --train)");
    for (const auto &train : plan.variants()) {
      if (train.kind() != "train")
        continue;
      auto checkpoint = loadCheckpoint(dir, train);
      if (!checkpoint.ok()) {
        why = checkpoint.error();
        continue;
      }
      auto params = inferenceParams(plan, inference, train, checkpoint->tensors);
      if (!params.ok())
        return Status::error(checkpoint->folder + ": " + params.error().message());
      if (loaded)
        *loaded = checkpoint->folder;
      return params;
    }
    return why;
  };
}

Result<int64_t> restoreCheckpoint(Session &s, const std::string &dir) {
  const auto &v = s.variant();
  auto checkpoint = loadCheckpoint(dir, v);
  if (!checkpoint.ok())
    return checkpoint.error();
  for (int b = 0; b < v.buffers_size(); ++b) {
    const auto &buffer = v.buffers(b);
    if (buffer.role() != plan::STATE)
      continue;
    const HostTensor &whole = checkpoint->tensors.at(buffer.name());
    if (buffer.shard_ranks() == 0) {
      if (Status st = s.writeBuffer(b, whole.bytes.data()); !st.ok())
        return st;
      continue;
    }
    // This rank's shard of the whole tensor: a checkpoint is the same whatever the sharding.
    auto group = ProcessGroup::get();
    if (!group.ok())
      return group.error();
    std::vector<float> shard(buffer.bytes() / 4);
    takeShard(reinterpret_cast<const float *>(whole.bytes.data()), static_cast<int64_t>(whole.bytes.size() / 4),
              buffer.shard_ranks(), (*group)->rank(), shard.data());
    if (Status st = s.writeBuffer(b, shard.data()); !st.ok())
      return st;
  }
  return checkpoint->step;
}

} // namespace tec
