// The ResNet stem's max pooling (3x3 window, stride 2, padding 1) with ATen's semantics and a
// faster CPU forward.
//
// ATen's CPU max_pool2d_with_indices walks each window through generic bounds and a NaN test
// per element (about 110 ms for the [2, 64, 320, 320] stem of DBNet at 640 x 640 on one
// thread, 2% of its training step). StemMaxPool computes the same outputs and indices (the
// first maximum in row-major window order, NaN taken as the maximum, as ATen does) with the
// window bounds hoisted out of the interior, and hands the indices to ATen's own backward, so
// gradients are ATen's. CUDA tensors, other dtypes than float and double, and inputs that are
// not contiguous NCHW go to at::max_pool2d unchanged.
#ifndef VISION_MODELS_OPS_MAX_POOL_H_
#define VISION_MODELS_OPS_MAX_POOL_H_

#include <ATen/ATen.h>

namespace vision::models::ops {

// at::max_pool2d(input, 3, 2, 1) for [N, C, H, W] (or [C, H, W]) input, differentiable.
at::Tensor StemMaxPool(const at::Tensor& input);

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_MAX_POOL_H_
