#include "core/batch.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"

namespace vision::core {

const at::Tensor& Batch::Target(const std::string& name, c10::IntArrayRef sizes,
                                const std::string& who, const std::string& hint) const {
  const auto it = targets.find(name);
  if (it == targets.end()) {
    std::vector<std::string> present;
    for (const auto& [key, value] : targets) present.push_back(key);
    TORCH_CHECK(false, who, ": the batch has no target '", name,
                "' (it has: ", absl::StrJoin(present, ", "), "); ", hint);
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

std::vector<Batch> SplitByCollatedSize(Batch batch) {
  const size_t n = batch.collated_sizes.size();
  std::vector<std::array<int64_t, 2>> sizes;  // in the order of their first image
  std::vector<std::vector<int64_t>> members;
  for (size_t i = 0; i < n; ++i) {
    const size_t g = std::find(sizes.begin(), sizes.end(), batch.collated_sizes[i]) - sizes.begin();
    if (g == sizes.size()) {
      sizes.push_back(batch.collated_sizes[i]);
      members.emplace_back();
    }
    members[g].push_back(static_cast<int64_t>(i));
  }
  std::vector<Batch> parts;
  if (sizes.size() <= 1) {
    parts.push_back(std::move(batch));
    return parts;
  }
  TORCH_CHECK(!batch.images.defined() || batch.images.is_cpu(),
              "SplitByCollatedSize: the batch's images must be on the host");
  TORCH_CHECK(batch.samples.size() == n && (batch.instances.empty() || batch.instances.size() == n),
              "SplitByCollatedSize: ", n, " collated sizes for ", batch.samples.size(),
              " samples and ", batch.instances.size(), " instance lists");
  for (size_t g = 0; g < sizes.size(); ++g) {
    const int64_t height = sizes[g][0], width = sizes[g][1];
    const at::Tensor index = at::tensor(members[g], at::TensorOptions().dtype(at::kLong));
    Batch part;
    // Padding is bottom and right: the top-left height x width of each image is all of it.
    part.images =
        batch.images.index_select(0, index).narrow(2, 0, height).narrow(3, 0, width).contiguous();
    part.image_sizes = batch.image_sizes.index_select(0, index);
    for (const auto& [name, tensor] : batch.targets) {
      part.targets[name] =
          tensor.index_select(0, index).narrow(1, 0, height).narrow(2, 0, width).contiguous();
    }
    for (int64_t i : members[g]) {
      if (!batch.instances.empty()) part.instances.push_back(std::move(batch.instances[i]));
      part.samples.push_back(std::move(batch.samples[i]));
      part.collated_sizes.push_back(sizes[g]);
    }
    parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace vision::core
