// The checkpoint loader: the input's first line is DIR/latest, the rest DIR/step-1/manifest.json, beside
// the real tensor files of a small train variant's state (two params, the step counter).
#include "FuzzFiles.h"

#include "api/Checkpoint.h"

#include <sys/stat.h>

namespace {

tec::plan::Variant stateVariant() {
  tec::plan::Variant v;
  v.set_target("cpu");
  v.set_kind("train");
  for (auto [name, n] : {std::pair{"w", 6}, std::pair{"w/adam_v", 6}, std::pair{"step", 1}}) {
    auto *b = v.add_buffers();
    b->set_name(name);
    b->set_dtype(tec::plan::F32);
    b->set_role(tec::plan::STATE);
    if (n > 1)
      b->add_shape(n);
    b->set_bytes(4 * n);
  }
  return v;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const tec::plan::Variant variant = stateVariant();
  static const std::string dir = [] {
    std::string d = tec::fuzz::scratchDir() + "/ckpt";
    mkdir(d.c_str(), 0755);
    mkdir((d + "/step-1").c_str(), 0755);
    const float w[6] = {1, 2, 3, 4, 5, 6}, v[6] = {0, 1, 0, 1, 0, 1}, step = 1;
    (void)tec::writeNpy(d + "/step-1/w.npy", tec::plan::F32, {6}, w, sizeof(w));
    (void)tec::writeNpy(d + "/step-1/w_adam_v.npy", tec::plan::F32, {6}, v, sizeof(v));
    (void)tec::writeNpy(d + "/step-1/step.npy", tec::plan::F32, {}, &step, sizeof(step));
    return d;
  }();
  const std::string text(reinterpret_cast<const char *>(data), size);
  const size_t newline = text.find('\n');
  const std::string latest = text.substr(0, newline), manifest = newline == std::string::npos ? "" : text.substr(newline + 1);
  FILE *f = std::fopen((dir + "/latest").c_str(), "wb");
  std::fwrite(latest.data(), 1, latest.size(), f);
  std::fclose(f);
  f = std::fopen((dir + "/step-1/manifest.json").c_str(), "wb");
  std::fwrite(manifest.data(), 1, manifest.size(), f);
  std::fclose(f);
  auto checkpoint = tec::loadCheckpoint(dir, variant);
  (void)checkpoint;
  return 0;
}
