// The readers under fuzzing take paths (as tec's commands do): each input is written to a file in a
// private folder on tmpfs first. Shared by every target.
#ifndef TEC_TESTS_FUZZ_FUZZFILES_H
#define TEC_TESTS_FUZZ_FUZZFILES_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

namespace tec::fuzz {

/// A folder of this process's own, on /dev/shm where it exists.
inline const std::string &scratchDir() {
  static const std::string dir = [] {
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string d = base + "/tec-fuzz.XXXXXX";
    if (!mkdtemp(d.data()))
      std::abort();
    return d;
  }();
  return dir;
}

/// Writes `size` bytes to scratchDir()/name and returns its path.
inline std::string writeFile(const std::string &name, const uint8_t *data, size_t size) {
  std::string path = scratchDir() + "/" + name;
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size)
    std::abort();
  std::fclose(f);
  return path;
}

} // namespace tec::fuzz

#endif
