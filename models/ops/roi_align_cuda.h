// The CUDA half of RoIAlign (roi_align_cuda.cu); only roi_align.cc calls it, after validating the
// arguments. Tensors are contiguous, float or double, on one CUDA device.
#ifndef VISION_MODELS_OPS_ROI_ALIGN_CUDA_H_
#define VISION_MODELS_OPS_ROI_ALIGN_CUDA_H_

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "models/ops/roi_align_kernel.h"

namespace vision::models::ops {

at::Tensor RoIAlignForwardCuda(const at::Tensor& input, const at::Tensor& rois,
                               const RoIAlignGeometry& geometry);

// grad_output [K, C, output_height, output_width] -> grad_input of `input_sizes`.
at::Tensor RoIAlignBackwardCuda(const at::Tensor& grad_output, const at::Tensor& rois,
                                at::IntArrayRef input_sizes, const RoIAlignGeometry& geometry);

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_ROI_ALIGN_CUDA_H_
