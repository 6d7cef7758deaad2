// Non-maximum suppression with torchvision.ops.nms / batched_nms semantics, on CPU and CUDA.
#ifndef VISION_MODELS_OPS_NMS_H_
#define VISION_MODELS_OPS_NMS_H_

#include <ATen/core/Tensor.h>

namespace vision::models::ops {

// Indices (int64, on the boxes' device) of the boxes that survive greedy suppression, in
// decreasing score order; equal scores keep their input order. A box is dropped when its IoU with
// an already kept, higher-ranked box is > iou_threshold. boxes [N, 4] as (x1, y1, x2, y2); areas
// are (x2 - x1) * (y2 - y1) as in torchvision, inverted boxes included. Half and bfloat16 inputs
// are computed in float (torchvision's autocast does the same). Throws c10::Error naming the
// argument on wrong shapes or devices, NaN or infinite box coordinates and NaN scores.
at::Tensor Nms(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold);

// Nms within each category of idxs [N] (integers): boxes of different categories never suppress
// each other. As torchvision.ops.batched_nms: up to 4000 coordinates (1000 boxes; 100000 off the
// CPU) the coordinate-offset trick (each category's boxes shifted by idx * (max coordinate + 1),
// then one Nms), so results match torchvision's including its float rounding; above that one Nms
// per category, the survivors ranked by decreasing score with torchvision's unstable sort (ATen's
// sort without stable=True), so equal scores come in its order there, not in input order.
at::Tensor BatchedNms(const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& idxs,
                      double iou_threshold);

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_NMS_H_
