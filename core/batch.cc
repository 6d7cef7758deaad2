#include "core/batch.h"

#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "absl/strings/str_join.h"

namespace vision::core {

const at::Tensor& Batch::Target(const std::string& name, c10::IntArrayRef sizes,
                                const std::string& who, const std::string& hint) const {
  const auto it = targets.find(name);
  if (it == targets.end()) {
    std::vector<std::string> present;
    for (const auto& [key, value] : targets) present.push_back(key);
    TORCH_CHECK(false, who, ": the batch has no target '", name, "' (it has: ",
                absl::StrJoin(present, ", "), "); ", hint);
  }
  TORCH_CHECK(it->second.sizes() == sizes, who, ": target '", name, "' has shape ",
              it->second.sizes(), ", expected [N, H, W] = ", sizes,
              " (the batch's images and their size)");
  return it->second;
}

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
