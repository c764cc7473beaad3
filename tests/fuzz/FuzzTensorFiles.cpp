// The tensor readers behind --input, train data and checkpoints: the same bytes as .npy, as .pb and as a
// safetensors file.
#include "FuzzFiles.h"

#include "api/TensorFiles.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (const char *name : {"tensor.npy", "tensor.pb"}) {
    auto tensor = tec::readTensorFile(tec::fuzz::writeFile(name, data, size));
    (void)tensor;
  }
  auto tensors = tec::readSafetensors(tec::fuzz::writeFile("tensors.safetensors", data, size));
  (void)tensors;
  return 0;
}
