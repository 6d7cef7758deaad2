#include "models/mask_rcnn/sampler.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace vision::models::mask_rcnn {

BalancedSampler::BalancedSampler(int64_t batch_size_per_image, double positive_fraction)
    : batch_size_per_image_(batch_size_per_image), positive_fraction_(positive_fraction) {
  TORCH_CHECK(batch_size_per_image >= 0, "BalancedSampler: batch_size_per_image must be >= 0, got ",
              batch_size_per_image);
  TORCH_CHECK(positive_fraction >= 0 && positive_fraction <= 1,
              "BalancedSampler: positive_fraction must be in [0, 1], got ", positive_fraction);
}

std::vector<std::pair<at::Tensor, at::Tensor>> BalancedSampler::Sample(
    const std::vector<at::Tensor>& labels) const {
  // The positive quota truncated as Python's int() does: int(256 * 0.5) = 128, int(10 * 0.25) = 2.
  const auto quota = static_cast<int64_t>(static_cast<double>(batch_size_per_image_) *
                                          positive_fraction_);
  std::vector<std::pair<at::Tensor, at::Tensor>> sampled;
  sampled.reserve(labels.size());
  for (const at::Tensor& image_labels : labels) {
    TORCH_CHECK(image_labels.dim() == 1, "BalancedSampler: labels must be [P] per image, got ",
                image_labels.sizes());
    const at::Tensor positive = at::nonzero(image_labels >= 1).select(1, 0);
    const at::Tensor negative = at::nonzero(image_labels == 0).select(1, 0);
    const int64_t num_pos = std::min(positive.numel(), quota);
    const int64_t num_neg = std::min(negative.numel(), batch_size_per_image_ - num_pos);
    // One permutation per side, positives first, on the labels' device: the same draws as
    // torchvision's sampler from the same generator state.
    const auto choose = [](const at::Tensor& candidates, int64_t num) {
      const at::Tensor order = at::randperm(candidates.numel(), candidates.options());
      return candidates.index_select(0, order.slice(0, 0, num));
    };
    const at::Tensor chosen_pos = choose(positive, num_pos);
    const at::Tensor chosen_neg = choose(negative, num_neg);
    const auto mask = [&](const at::Tensor& chosen) {
      return at::zeros(image_labels.sizes(), image_labels.options().dtype(at::kBool))
          .index_fill_(0, chosen, true);
    };
    sampled.emplace_back(mask(chosen_pos), mask(chosen_neg));
  }
  return sampled;
}

}  // namespace vision::models::mask_rcnn
