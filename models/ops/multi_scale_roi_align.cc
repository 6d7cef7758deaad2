#include "models/ops/multi_scale_roi_align.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "models/ops/boxes.h"
#include "models/ops/roi_align.h"

namespace vision::models::ops {
namespace {

constexpr char kOp[] = "MultiScaleRoIAlign";

void CheckArguments(const std::vector<at::Tensor>& features, const std::vector<at::Tensor>& boxes,
                    const std::vector<std::pair<int64_t, int64_t>>& image_sizes,
                    const MultiScaleRoIAlignOptions& options) {
  TORCH_CHECK(!features.empty(), kOp, ": features is empty; give at least one level");
  const at::Tensor& first = features[0];
  for (size_t l = 0; l < features.size(); ++l) {
    const at::Tensor& f = features[l];
    TORCH_CHECK(f.defined() && f.dim() == 4, kOp, ": features[", l, "] must be [B, C, H, W], got ",
                f.defined() ? f.sizes() : at::IntArrayRef{});
    TORCH_CHECK(f.size(0) == first.size(0) && f.size(1) == first.size(1), kOp, ": features[", l,
                "] is ", f.sizes(), " but features[0] is ", first.sizes(),
                "; batch and channels must agree");
    TORCH_CHECK(f.size(2) > 0 && f.size(3) > 0, kOp, ": features[", l,
                "] has an empty map: ", f.sizes());
    TORCH_CHECK(f.scalar_type() == first.scalar_type() && f.device() == first.device(), kOp,
                ": features[", l, "] is ", f.scalar_type(), " on ", f.device(),
                " but features[0] is ", first.scalar_type(), " on ", first.device());
  }
  TORCH_CHECK(static_cast<int64_t>(boxes.size()) == first.size(0), kOp, ": boxes has ",
              boxes.size(), " tensors but the features a batch of ", first.size(0));
  TORCH_CHECK(image_sizes.size() == boxes.size(), kOp, ": image_sizes has ", image_sizes.size(),
              " entries but boxes ", boxes.size());
  for (size_t i = 0; i < boxes.size(); ++i) {
    const std::string name = "boxes[" + std::to_string(i) + "]";
    CheckBoxes(kOp, name, boxes[i]);
    TORCH_CHECK(
        boxes[i].device() == first.device() && boxes[i].scalar_type() == first.scalar_type(), kOp,
        ": ", name, " is ", boxes[i].scalar_type(), " on ", boxes[i].device(),
        " but the features are ", first.scalar_type(), " on ", first.device());
    TORCH_CHECK(image_sizes[i].first > 0 && image_sizes[i].second > 0, kOp, ": image_sizes[", i,
                "] must be positive, got ", image_sizes[i].first, "x", image_sizes[i].second);
  }
  TORCH_CHECK(options.canonical_scale() > 0 && std::isfinite(options.canonical_scale()), kOp,
              ": canonical_scale must be positive and finite, got ", options.canonical_scale());
}

// torchvision's _infer_scale: the nearest power of two to the height ratio, rounded in float32
// (half to even) as there.
double InferScale(int64_t feature_height, int64_t image_height) {
  const float approx =
      static_cast<float>(static_cast<double>(feature_height) / static_cast<double>(image_height));
  const float log2 = at::scalar_tensor(approx, at::kFloat).log2().round().item<float>();
  return std::pow(2.0, static_cast<double>(log2));
}

// -log2(scale) in float32 truncated to an integer, as torchvision's _setup_scales does.
int64_t LevelOfScale(double scale) {
  return static_cast<int64_t>(-at::scalar_tensor(scale, at::kFloat).log2().item<float>());
}

}  // namespace

at::Tensor MultiScaleRoIAlign(const std::vector<at::Tensor>& features,
                              const std::vector<at::Tensor>& boxes,
                              const std::vector<std::pair<int64_t, int64_t>>& image_sizes,
                              const MultiScaleRoIAlignOptions& options) {
  CheckArguments(features, boxes, image_sizes, options);
  int64_t max_height = 0;
  for (const auto& size : image_sizes) max_height = std::max(max_height, size.first);
  std::vector<double> scales;
  for (const at::Tensor& f : features) scales.push_back(InferScale(f.size(2), max_height));

  std::vector<at::Tensor> rois_per_image;
  for (size_t i = 0; i < boxes.size(); ++i) {
    rois_per_image.push_back(at::cat(
        {at::full({boxes[i].size(0), 1}, static_cast<double>(i), boxes[i].options()), boxes[i]},
        1));
  }
  const at::Tensor rois = at::cat(rois_per_image);
  const auto roi_align_options = [&](double scale) {
    return RoIAlignOptions(options.output_height(), options.output_width())
        .spatial_scale(scale)
        .sampling_ratio(options.sampling_ratio())
        .aligned(false);
  };
  if (features.size() == 1) return RoIAlign(features[0], rois, roi_align_options(scales[0]));

  const int64_t k_min = LevelOfScale(scales.front());
  const int64_t k_max = LevelOfScale(scales.back());
  const at::Tensor b = rois.slice(1, 1);
  const at::Tensor area = (b.select(1, 2) - b.select(1, 0)) * (b.select(1, 3) - b.select(1, 1));
  const at::Tensor target =
      at::floor(at::log2(at::sqrt(area) / options.canonical_scale()) + options.canonical_level() +
                at::scalar_tensor(1e-6, area.options()))
          .clamp(k_min, k_max);
  // NaN (a negative area) stays NaN through clamp and matches no level below.
  const at::Tensor levels = target - k_min;

  const at::Tensor& first = features[0];
  at::Tensor result =
      at::zeros({rois.size(0), first.size(1), options.output_height(), options.output_width()},
                first.options());
  for (size_t l = 0; l < features.size(); ++l) {
    // A level without boxes still takes part (an empty RoIAlign), so its features get a zero
    // gradient rather than none, as in torchvision.
    const at::Tensor index = at::nonzero(levels == static_cast<double>(l)).select(1, 0);
    result.index_put_(
        {index}, RoIAlign(features[l], rois.index_select(0, index), roi_align_options(scales[l])));
  }
  return result;
}

}  // namespace vision::models::ops
