// Box utilities for detection heads with torchvision's semantics: the IoU matrix
// (torchvision.ops.box_iou), the box coder of torchvision.models.detection._utils.BoxCoder,
// clipping to the image and removal of small boxes. Boxes are [N, 4] as (x1, y1, x2, y2). All
// are plain ATen ops, so they run on CPU and CUDA alike and autograd differentiates them.
#ifndef VISION_MODELS_OPS_BOXES_H_
#define VISION_MODELS_OPS_BOXES_H_

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

namespace vision::models::ops {

// Throws c10::Error naming `op` and `name` unless `boxes` is a floating-point [N, 4] tensor of
// finite values. Costs one device-to-host copy of a flag when N > 0.
void CheckBoxes(std::string_view op, std::string_view name, const at::Tensor& boxes);

// [N, M] IoU of every box in boxes1 [N, 4] with every box in boxes2 [M, 4], same dtype and
// device. As in torchvision, areas are (x2 - x1) * (y2 - y1) without clamping, so inverted boxes
// have negative areas, and two zero-area boxes give 0 / 0 = NaN.
at::Tensor BoxIou(const at::Tensor& boxes1, const at::Tensor& boxes2);

struct BoxCoderOptions {
  // A name without a comma, which TORCH_ARG's macro arguments cannot hold.
  using Weights = std::array<double, 4>;
  // (wx, wy, ww, wh): the RPN uses (1, 1, 1, 1), torchvision's box head (10, 10, 5, 5).
  TORCH_ARG(Weights, weights) = {1.0, 1.0, 1.0, 1.0};
  // Upper bound of the decoded log-scale deltas, so exp() stays finite for wild predictions.
  TORCH_ARG(double, bbox_xform_clip) = std::log(1000.0 / 16);
};

// Faster R-CNN's box parametrisation (torchvision's BoxCoder.encode_single/decode_single).
class BoxCoder {
 public:
  explicit BoxCoder(BoxCoderOptions options = {});

  // Regression targets [N, 4] (dx, dy, dw, dh) taking proposals [N, 4] to reference_boxes
  // [N, 4]. As in torchvision, a zero-size proposal or reference box gives inf or NaN targets.
  at::Tensor Encode(const at::Tensor& reference_boxes, const at::Tensor& proposals) const;

  // Boxes [N, 4K] from rel_codes [N, 4K] (K classes of (dx, dy, dw, dh)) applied to boxes
  // [N, 4], computed in rel_codes' dtype.
  at::Tensor Decode(const at::Tensor& rel_codes, const at::Tensor& boxes) const;

  const BoxCoderOptions& options() const { return options_; }

 private:
  BoxCoderOptions options_;
};

// boxes [..., 4K] with x clamped to [0, width] and y to [0, height].
at::Tensor ClipBoxesToImage(const at::Tensor& boxes, int64_t height, int64_t width);

// Indices (int64, ascending) of the boxes [N, 4] whose width and height are both >= min_size.
at::Tensor RemoveSmallBoxes(const at::Tensor& boxes, double min_size);

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_BOXES_H_
