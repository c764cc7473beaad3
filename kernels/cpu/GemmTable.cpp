#include "kernels/cpu/GemmTable.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

namespace tec::kernels::cpu {

namespace {

constexpr const char *kMagic = "# tec GEMM table v2";

std::string librariesLine(const std::vector<std::string> &libraries) {
  std::string line = "# libraries:";
  for (const auto &l : libraries)
    line += " [" + l + "]";
  return line;
}

/// mkdir -p; false when a component cannot be made.
bool makeDirectories(const std::string &path) {
  for (size_t slash = path.find('/', 1); ; slash = path.find('/', slash + 1)) {
    std::string prefix = path.substr(0, slash);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      return false;
    if (slash == std::string::npos)
      return true;
  }
}

/// An exclusive lock on `path` + ".lock" for as long as it lives (other processes measuring wait).
class FileLock {
public:
  explicit FileLock(const std::string &path) : fd(open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd >= 0)
      flock(fd, LOCK_EX);
  }
  ~FileLock() {
    if (fd >= 0)
      close(fd); // releases the lock
  }
  bool held() const { return fd >= 0; }

private:
  int fd;
};

} // namespace

std::string cacheDirectory() {
  if (const char *dir = std::getenv("TEC_CACHE_DIR"); dir && *dir)
    return dir;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/')
    return std::string(xdg) + "/tec";
  if (const char *home = std::getenv("HOME"); home && *home == '/')
    return std::string(home) + "/.cache/tec";
  return "";
}

GemmTable::GemmTable(std::string path, std::vector<std::string> libraries, Measure measure)
    : path_(std::move(path)), libraries_(std::move(libraries)), measure_(std::move(measure)) {
  if (path_.empty() || libraries_.size() < 2)
    return;
  if (!makeDirectories(path_.substr(0, path_.rfind('/')))) {
    problem_ = "cannot create the folder of " + path_ + ": choices are measured again in every process";
    path_.clear();
    return;
  }
  readFile();
}

bool GemmTable::readFile() {
  std::ifstream in(path_);
  if (!in)
    return false;
  std::string line;
  if (!std::getline(in, line) || line != kMagic || !std::getline(in, line) || line != librariesLine(libraries_))
    return false; // another format or library set: measured anew and rewritten
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int ta, tb, constantB, library;
    GemmShape s;
    if (!(fields >> ta >> tb >> s.m >> s.n >> s.k >> constantB >> library) || library < 0 ||
        library >= static_cast<int>(libraries_.size()) || s.m <= 0 || s.n <= 0 || s.k <= 0)
      continue; // a damaged line is measured again
    s.transA = ta != 0, s.transB = tb != 0, s.constantB = constantB != 0;
    choices_.emplace(s, library);
  }
  return true;
}

void GemmTable::writeFile() {
  const std::string temp = path_ + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(temp, std::ios::trunc);
    out << kMagic << "\n" << librariesLine(libraries_) << "\n";
    for (const auto &[s, library] : choices_)
      out << s.transA << " " << s.transB << " " << s.m << " " << s.n << " " << s.k << " " << s.constantB << " "
          << library << "\n";
    out.flush();
    if (!out) {
      problem_ = "cannot write " + temp + ": choices are measured again in every process";
      std::remove(temp.c_str());
      return;
    }
  }
  if (int fd = open(temp.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    fsync(fd);
    close(fd);
  }
  if (std::rename(temp.c_str(), path_.c_str()) != 0) {
    problem_ = "cannot replace " + path_ + ": choices are measured again in every process";
    std::remove(temp.c_str());
  }
}

int GemmTable::choose(const GemmShape &shape) {
  if (libraries_.size() < 2)
    return 0;
  std::lock_guard<std::mutex> guard(mutex_);
  if (auto it = choices_.find(shape); it != choices_.end())
    return it->second;
  std::unique_ptr<FileLock> lock;
  if (!path_.empty()) {
    lock = std::make_unique<FileLock>(path_);
    readFile(); // another process may have measured it meanwhile
    if (auto it = choices_.find(shape); it != choices_.end())
      return it->second;
  }
  const std::vector<double> ms = measure_(shape);
  const int fastest = static_cast<int>(std::min_element(ms.begin(), ms.end()) - ms.begin());
  choices_.emplace(shape, fastest);
  if (lock && lock->held())
    writeFile();
  return fastest;
}

} // namespace tec::kernels::cpu
