#include "tools/fuzz/state_dict_check.h"

#include <ATen/ATen.h>

#include "models/backbones/torchvision_import.h"
#include "tools/fuzz/fuzz_util.h"

namespace vision::fuzz {

void CheckStateDictReader(absl::string_view archive) {
  auto state = vision::models::backbones::ReadTorchStateDictFromBuffer(archive, "fuzz.pth");
  if (!state.ok()) {
    VISION_FUZZ_CHECK(!state.status().message().empty());
    return;
  }
  for (const auto& [key, tensor] : *state) {
    if (tensor.numel() > 0 && tensor.numel() <= (1 << 20)) (void)tensor.sum().item<double>();
  }
}

}  // namespace vision::fuzz
