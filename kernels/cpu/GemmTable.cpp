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

ChoiceTable::ChoiceTable(std::string path, std::string kind, std::vector<std::string> candidates)
    : path_(std::move(path)), kind_("# tec " + std::move(kind)), candidates_(std::move(candidates)) {
  if (path_.empty() || candidates_.size() < 2)
    return;
  if (!makeDirectories(path_.substr(0, path_.rfind('/')))) {
    problem_ = "cannot create the folder of " + path_ + ": choices are measured again in every process";
    path_.clear();
    return;
  }
  readFile();
}

bool ChoiceTable::readFile() {
  std::ifstream in(path_);
  if (!in)
    return false;
  std::string line;
  if (!std::getline(in, line) || line != kind_ || !std::getline(in, line) || line != librariesLine(candidates_))
    return false; // another format or candidate set: measured anew and rewritten
  while (std::getline(in, line)) {
    const size_t space = line.rfind(' ');
    if (space == std::string::npos || space == 0)
      continue; // a damaged line is measured again
    char *end = nullptr;
    const long choice = std::strtol(line.c_str() + space + 1, &end, 10);
    if (end == line.c_str() + space + 1 || *end != '\0' || choice < 0 || choice >= static_cast<long>(candidates_.size()))
      continue;
    choices_.emplace(line.substr(0, space), static_cast<int>(choice));
  }
  return true;
}

void ChoiceTable::writeFile() {
  const std::string temp = path_ + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(temp, std::ios::trunc);
    out << kind_ << "\n" << librariesLine(candidates_) << "\n";
    for (const auto &[key, choice] : choices_)
      out << key << " " << choice << "\n";
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

int ChoiceTable::choose(const std::string &key, const std::function<std::vector<double>()> &measure) {
  if (candidates_.size() < 2)
    return 0;
  std::lock_guard<std::mutex> guard(mutex_);
  if (auto it = choices_.find(key); it != choices_.end())
    return it->second;
  std::unique_ptr<FileLock> lock;
  if (!path_.empty()) {
    lock = std::make_unique<FileLock>(path_);
    readFile(); // another process may have measured it meanwhile
    if (auto it = choices_.find(key); it != choices_.end())
      return it->second;
  }
  const std::vector<double> ms = measure();
  const int fastest = static_cast<int>(std::min_element(ms.begin(), ms.end()) - ms.begin());
  choices_.emplace(key, fastest);
  if (lock && lock->held())
    writeFile();
  return fastest;
}

int GemmTable::choose(const GemmShape &s) {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0)
    return 0;
  std::ostringstream key;
  key << s.transA << " " << s.transB << " " << s.m << " " << s.n << " " << s.k << " " << s.constantB;
  return table_.choose(key.str(), [&] { return measure_(s); });
}

} // namespace tec::kernels::cpu
