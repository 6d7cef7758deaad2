// Fuzzes the reader of users' weight files (models/backbones/torchvision_import.h) on whole
// torch.save zip archives: LibTorch's zip reader (caffe2::serialize::PyTorchStreamReader),
// then our pickle interpreter and tensor checks. A downloaded .pth is untrusted input: every
// input must give a state dict or an error, never a crash, an out-of-bounds read, a huge
// allocation or a hang. Accepted tensors must be readable in full.
#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "models/backbones/torchvision_import.h"
#include "tools/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view archive(reinterpret_cast<const char*>(data), size);
  auto state = vision::models::backbones::ReadTorchStateDictFromBuffer(archive, "fuzz.pth");
  if (!state.ok()) {
    VISION_FUZZ_CHECK(!state.status().message().empty());
    return 0;
  }
  for (const auto& [key, tensor] : *state) {
    // Touches every element of the view (an out-of-bounds view would be found here).
    if (tensor.numel() > 0 && tensor.numel() <= (1 << 20)) (void)tensor.sum().item<double>();
  }
  return 0;
}
