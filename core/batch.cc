#include "core/batch.h"

#include <ATen/ATen.h>

namespace vision::core {

void Batch::To(const c10::Device& device) {
  auto move = [&](at::Tensor& t) {
    if (t.defined() && t.device() != device) t = t.to(device, /*non_blocking=*/t.is_pinned());
  };
  move(images);
  for (auto& [name, tensor] : targets) move(tensor);
  for (auto& image : instances) {
    for (auto& [name, tensor] : image) move(tensor);
  }
}

}  // namespace vision::core
