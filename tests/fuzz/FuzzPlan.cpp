// Plan bytes -> load -> validate -> run every variant once on the CPU backend with zero inputs. A plan
// file is untrusted input: any outcome but a clean error or a run is a bug.
#include "FuzzFiles.h"

#include "runtime/Session.h"

#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path = tec::fuzz::writeFile("input.tecplan", data, size);
  auto file = tec::PlanFile::open(path);
  if (!file.ok())
    return 0;
  for (const auto &v : (*file)->plan().variants()) {
    // A valid plan may ask for any amount of memory; the harness runs the small ones.
    if (v.arena_bytes() > (64 << 20))
      continue;
    tec::SessionOptions options;
    options.device = "cpu";
    options.threads = 1;
    options.variant = v.target();
    options.kind = v.kind().empty() ? "inference" : v.kind();
    auto session = tec::Session::open(path, options);
    if (!session.ok())
      continue;
    for (size_t i = 0; i < (*session)->inputs().size(); ++i)
      std::memset((*session)->inputData(i), 0, (*session)->inputs()[i].bytes);
    (void)(*session)->run();
  }
  return 0;
}
