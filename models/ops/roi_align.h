// RoIAlign (He et al., Mask R-CNN, 2017) with torchvision.ops.roi_align semantics, on CPU and
// CUDA, differentiable with respect to its input.
#ifndef VISION_MODELS_OPS_ROI_ALIGN_H_
#define VISION_MODELS_OPS_ROI_ALIGN_H_

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

namespace vision::models::ops {

struct RoIAlignOptions {
  RoIAlignOptions(int64_t output_height, int64_t output_width)
      : output_height_(output_height), output_width_(output_width) {}
  TORCH_ARG(int64_t, output_height);
  TORCH_ARG(int64_t, output_width);
  // Feature-map pixels per box unit (1/16 for a stride-16 map and image-pixel boxes).
  TORCH_ARG(double, spatial_scale) = 1.0;
  // Samples per bin along each axis; <= 0: ceil(bin size), adaptively per RoI.
  TORCH_ARG(int64_t, sampling_ratio) = -1;
  // Shift boxes by -0.5 pixel so pixel centres sit at integer + 0.5 (Detectron2's
  // ROIAlignV2); false keeps the original Mask R-CNN alignment and its minimum RoI size of 1.
  TORCH_ARG(bool, aligned) = false;
};

// input [B, C, H, W]; rois [K, 5] as (batch index, x1, y1, x2, y2) in box units, same dtype and
// device as input. Returns [K, C, output_height, output_width]: each bin the average of bilinear
// samples (zero beyond one pixel outside the map). Half and bfloat16 inputs are computed in
// float and the result cast back (torchvision's autocast does the same). Throws c10::Error naming
// the argument on wrong shapes, dtypes or devices, NaN or infinite RoI coordinates, batch indices
// outside [0, B) and non-positive output sizes or spatial scales.
at::Tensor RoIAlign(const at::Tensor& input, const at::Tensor& rois,
                    const RoIAlignOptions& options);

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_ROI_ALIGN_H_
