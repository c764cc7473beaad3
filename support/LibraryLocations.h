// Where tec looks for the libraries it loads at run time, shared by the loaders and tec doctor so that both
// report the same file. A wheel ships OpenBLAS and oneDNN in its own folder (found next to tec's binary);
// the CUDA libraries come from the system or from the nvidia-* wheels PyTorch installs (site-packages/
// nvidia/<package>/lib: cudnn, cublas, cuda_runtime, cuda_nvrtc, or cu13 for CUDA 13's).
#ifndef TEC_SUPPORT_LIBRARYLOCATIONS_H
#define TEC_SUPPORT_LIBRARYLOCATIONS_H

#include <dlfcn.h>
#include <glob.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tec::kernels {

/// The folder of the binary (executable or shared library) that holds `address`, or "". Callers pass a
/// function of internal linkage: an exported one may resolve to another binary's copy.
inline std::string folderOf(const void *address) {
  Dl_info info{};
  if (!dladdr(address, &info) || !info.dli_fname)
    return "";
  std::string path = info.dli_fname;
  // The main executable is named by its argv[0], which a launcher may set to a bare name: ask the kernel.
  if (path.find('/') == std::string::npos) {
    char exe[4096];
    ssize_t length = readlink("/proc/self/exe", exe, sizeof exe);
    if (length > 0 && length < static_cast<ssize_t>(sizeof exe))
      path.assign(exe, length);
  }
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

/// The folder above `folder` ("/a/b" -> "/a"), spelled without "..": paths tec reports read plainly.
inline std::string parentFolder(const std::string &folder) {
  auto slash = folder.rfind('/');
  return slash == std::string::npos || slash == 0 ? folder + "/.." : folder.substr(0, slash);
}

/// The files matching a glob pattern, sorted.
inline std::vector<std::string> globFiles(const std::string &pattern) {
  std::vector<std::string> files;
  glob_t found{};
  if (glob(pattern.c_str(), 0, nullptr, &found) == 0)
    for (size_t i = 0; i < found.gl_pathc; ++i)
      files.push_back(found.gl_pathv[i]);
  globfree(&found);
  return files;
}

/// A library `soname` that tec bundles in a wheel (folder `bundle` of the package: beside the extension, or
/// one up from tec's bin/; `own` is the folder of the binary asking), then `fallbacks` (the system's).
inline std::vector<std::string> bundledLibraryCandidates(const std::string &own, const std::string &bundle,
                                                         const std::string &soname,
                                                         const std::vector<std::string> &fallbacks) {
  std::vector<std::string> files;
  if (!own.empty())
    for (const std::string &folder : {own, parentFolder(own)})
      files.push_back(folder + "/" + bundle + "/" + soname);
  files.insert(files.end(), fallbacks.begin(), fallbacks.end());
  return files;
}

/// A CUDA library by soname: the loader's search path first (LD_LIBRARY_PATH, the cache), then the nvidia-*
/// wheels in the site-packages tec is installed in (tec's package sits beside `nvidia`), in the active
/// virtualenv or conda environment, the user's and the system's, then the CUDA toolkit's folders.
inline std::vector<std::string> nvidiaLibraryCandidates(const std::string &soname, const std::string &own) {
  std::vector<std::string> files{soname};
  auto add = [&](const std::string &pattern) {
    for (std::string &f : globFiles(pattern))
      files.push_back(std::move(f));
  };
  if (!own.empty())
    for (const std::string &packages : {parentFolder(own), parentFolder(parentFolder(own))}) // tec/ or tec/bin/
      add(packages + "/nvidia/*/lib/" + soname);
  std::vector<std::string> prefixes;
  for (const char *variable : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char *prefix = std::getenv(variable); prefix && *prefix)
      prefixes.push_back(prefix);
  if (const char *home = std::getenv("HOME"); home && *home)
    prefixes.push_back(std::string(home) + "/.local");
  prefixes.insert(prefixes.end(), {"/usr/local", "/usr"});
  for (const std::string &prefix : prefixes)
    for (const char *packages : {"site-packages", "dist-packages"})
      add(prefix + "/lib/python3*/" + packages + "/nvidia/*/lib/" + soname);
  for (const char *toolkit : {"/usr/local/cuda/lib64/", "/usr/local/cuda/lib/"})
    files.push_back(toolkit + soname);
  return files;
}

/// Where one of tec's plugins (libtec_cuda.so, libtec_mpi.so) may be: the file the environment variable
/// `override` names, else next to the binary `own` is the folder of, in ../lib (installed and build trees),
/// one up (a wheel's bin/tec), then the build tree the binary came from.
inline std::vector<std::string> pluginCandidates(const char *override, const std::string &file, const std::string &own,
                                                 const std::string &buildTree) {
  if (const char *env = std::getenv(override); env && *env)
    return {env};
  std::vector<std::string> files;
  for (const std::string &folder : {own, own + "/../lib", own + "/..", buildTree})
    files.push_back(folder + "/" + file);
  return files;
}

inline std::vector<std::string> cudnnCandidates(const std::string &own) {
  return nvidiaLibraryCandidates("libcudnn.so.9", own);
}

} // namespace tec::kernels

#endif
