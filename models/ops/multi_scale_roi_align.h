// Feature-pyramid RoIAlign (Lin et al., FPN, 2017) with the semantics of
// torchvision.ops.MultiScaleRoIAlign: each box is pooled from the one level its size selects.
#ifndef VISION_MODELS_OPS_MULTI_SCALE_ROI_ALIGN_H_
#define VISION_MODELS_OPS_MULTI_SCALE_ROI_ALIGN_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

namespace vision::models::ops {

struct MultiScaleRoIAlignOptions {
  MultiScaleRoIAlignOptions(int64_t output_height, int64_t output_width)
      : output_height_(output_height), output_width_(output_width) {}
  TORCH_ARG(int64_t, output_height);
  TORCH_ARG(int64_t, output_width);
  // As RoIAlignOptions::sampling_ratio; torchvision's Mask R-CNN uses 2.
  TORCH_ARG(int64_t, sampling_ratio) = 2;
  // A box of canonical_scale image pixels (square root of its area) maps to canonical_level
  // (the FPN paper's ImageNet-size rule: 224 px -> level 4, i.e. stride 16).
  TORCH_ARG(double, canonical_scale) = 224.0;
  TORCH_ARG(int64_t, canonical_level) = 4;
};

// features: the pyramid, finest first, each [B, C, H_l, W_l] with the same B, C, dtype and
// device, whose strides are powers of two; boxes: one [N_i, 4] tensor per image (x1, y1, x2, y2
// in image pixels, the features' dtype and device); image_sizes: (height, width) per image
// before batching. Returns [sum N_i, C, output_height, output_width] in the order of the boxes.
//
// As torchvision does, each level's scale is 2^round(log2(H_l / max image height)), and a box
// goes to level floor(canonical_level + log2(sqrt(area) / canonical_scale) + 1e-6) clamped to
// the levels present; it is pooled with RoIAlign (aligned = false). A box of negative area
// (inverted along one axis) has no level and gives zeros, as torchvision's does on x86, where
// its NaN level converts to no level index. Plain ATen ops around RoIAlign: runs on CPU and CUDA
// and is differentiable with respect to the features. Throws c10::Error naming the argument on
// wrong shapes, dtypes or devices, non-finite box coordinates and mismatched list lengths.
at::Tensor MultiScaleRoIAlign(const std::vector<at::Tensor>& features,
                              const std::vector<at::Tensor>& boxes,
                              const std::vector<std::pair<int64_t, int64_t>>& image_sizes,
                              const MultiScaleRoIAlignOptions& options);

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_MULTI_SCALE_ROI_ALIGN_H_
