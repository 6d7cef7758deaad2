// The CUDA half of Nms (nms_cuda.cu); only nms.cc calls it, after validating the arguments.
#ifndef VISION_MODELS_OPS_NMS_CUDA_H_
#define VISION_MODELS_OPS_NMS_CUDA_H_

#include <ATen/core/Tensor.h>

namespace vision::models::ops {

// boxes [N, 4] float or double, contiguous, finite; scores [N]; both on one CUDA device, N > 0.
at::Tensor NmsCuda(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold);

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_NMS_CUDA_H_
