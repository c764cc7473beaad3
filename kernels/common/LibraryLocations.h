// Where tec looks for cuDNN 9, shared by the CUDA plugin's loader and tec doctor so both report the same
// file: the loader's search path (LD_LIBRARY_PATH), then the nvidia-cudnn wheel PyTorch installs (in a
// virtualenv, conda, the user's or the system's site-packages), then the CUDA toolkit's folder.
#ifndef TEC_KERNELS_COMMON_CUDNNLOCATIONS_H
#define TEC_KERNELS_COMMON_CUDNNLOCATIONS_H

#include <glob.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tec::kernels {

inline std::vector<std::string> cudnnCandidates() {
  std::vector<std::string> files{"libcudnn.so.9"};
  std::vector<std::string> prefixes;
  for (const char *variable : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char *prefix = std::getenv(variable); prefix && *prefix)
      prefixes.push_back(prefix);
  if (const char *home = std::getenv("HOME"); home && *home)
    prefixes.push_back(std::string(home) + "/.local");
  prefixes.insert(prefixes.end(), {"/usr/local", "/usr"});
  for (const std::string &prefix : prefixes)
    for (const char *packages : {"site-packages", "dist-packages"}) {
      const std::string pattern = prefix + "/lib/python3*/" + packages + "/nvidia/cudnn/lib/libcudnn.so.9";
      glob_t found{};
      if (glob(pattern.c_str(), 0, nullptr, &found) == 0)
        for (size_t i = 0; i < found.gl_pathc; ++i)
          files.push_back(found.gl_pathv[i]);
      globfree(&found);
    }
  files.push_back("/usr/local/cuda/lib64/libcudnn.so.9");
  return files;
}

} // namespace tec::kernels

#endif
