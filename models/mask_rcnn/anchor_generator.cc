#include "models/mask_rcnn/anchor_generator.h"

#include <utility>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace vision::models::mask_rcnn {

AnchorGenerator::AnchorGenerator(AnchorGeneratorOptions options) : options_(std::move(options)) {
  const auto& sizes = options_.sizes();
  auto& ratios = options_.aspect_ratios();
  TORCH_CHECK(!sizes.empty(), "AnchorGenerator: sizes must name at least one level");
  TORCH_CHECK(ratios.size() == 1 || ratios.size() == sizes.size(),
              "AnchorGenerator: aspect_ratios must have one entry (for every level) or one per "
              "level (",
              sizes.size(), "), got ", ratios.size());
  if (ratios.size() == 1) ratios.assign(sizes.size(), ratios.front());
  for (size_t level = 0; level < sizes.size(); ++level) {
    TORCH_CHECK(!sizes[level].empty() && !ratios[level].empty(), "AnchorGenerator: level ", level,
                " has no sizes or no aspect ratios");
    for (const double r : ratios[level]) {
      TORCH_CHECK(r > 0, "AnchorGenerator: aspect ratios must be positive, got ", r);
    }
    // In float, as torchvision computes them, so the rounding of half-pixel corners is the same.
    const at::Tensor scales = at::tensor(sizes[level], at::kDouble).to(at::kFloat);
    const at::Tensor h_ratios = at::sqrt(at::tensor(ratios[level], at::kDouble).to(at::kFloat));
    const at::Tensor w_ratios = 1 / h_ratios;
    // Ratio-major: all sizes of the first ratio, then the next ratio's.
    const at::Tensor ws = (w_ratios.unsqueeze(1) * scales.unsqueeze(0)).reshape(-1);
    const at::Tensor hs = (h_ratios.unsqueeze(1) * scales.unsqueeze(0)).reshape(-1);
    cell_anchors_.push_back(at::round(at::stack({-ws, -hs, ws, hs}, 1) / 2));
  }
}

int64_t AnchorGenerator::NumLevels() const { return static_cast<int64_t>(cell_anchors_.size()); }

int64_t AnchorGenerator::NumAnchorsPerLocation(int64_t level) const {
  return CellAnchors(level).size(0);
}

at::Tensor AnchorGenerator::CellAnchors(int64_t level) const {
  TORCH_CHECK(level >= 0 && level < NumLevels(), "AnchorGenerator: level ", level,
              " out of range [0, ", NumLevels(), ")");
  return cell_anchors_[level];
}

at::Tensor AnchorGenerator::Anchors(int64_t batch_height, int64_t batch_width,
                                    const std::vector<at::Tensor>& features) const {
  TORCH_CHECK(static_cast<int64_t>(features.size()) == NumLevels(), "AnchorGenerator: ",
              features.size(), " feature maps for ", NumLevels(), " anchor levels");
  TORCH_CHECK(batch_height > 0 && batch_width > 0,
              "AnchorGenerator: batch size must be positive, got ", batch_height, "x", batch_width);
  const at::ScalarType dtype =
      features.front().scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  std::vector<at::Tensor> levels;
  levels.reserve(features.size());
  for (size_t level = 0; level < features.size(); ++level) {
    const at::Tensor& feature = features[level];
    TORCH_CHECK(feature.dim() == 4, "AnchorGenerator: feature map ", level,
                " must be [N, C, H, W], got ", feature.sizes());
    const int64_t height = feature.size(2);
    const int64_t width = feature.size(3);
    TORCH_CHECK(height > 0 && width > 0 && height <= batch_height && width <= batch_width,
                "AnchorGenerator: feature map ", level, " is ", height, "x", width,
                " for a batch of ", batch_height, "x", batch_width);
    const auto index = at::TensorOptions().dtype(at::kLong).device(feature.device());
    // Integer shifts (exact), added to the integer-valued float cell anchors.
    const at::Tensor shift_x = at::arange(width, index) * (batch_width / width);
    const at::Tensor shift_y = at::arange(height, index) * (batch_height / height);
    const at::Tensor sx = shift_x.unsqueeze(0).expand({height, width}).reshape(-1);
    const at::Tensor sy = shift_y.unsqueeze(1).expand({height, width}).reshape(-1);
    const at::Tensor shifts = at::stack({sx, sy, sx, sy}, 1).to(dtype);
    // Computed in float, then converted, as torchvision's set_cell_anchors does.
    const at::Tensor cell = cell_anchors_[level].to(feature.device(), dtype);
    levels.push_back((shifts.unsqueeze(1) + cell.unsqueeze(0)).reshape({-1, 4}));
  }
  return at::cat(levels, 0);
}

}  // namespace vision::models::mask_rcnn
