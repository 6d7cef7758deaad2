// The region proposal network of Faster R-CNN with FPN (torchvision's RegionProposalNetwork):
// a shared 3x3 conv head over every pyramid level predicting objectness and box deltas per
// anchor, proposals by per-level top-k, decoding, clipping, small/low-score removal and NMS per
// level, and in training the objectness (BCE) and box (smooth L1, beta 1/9) losses over
// anchors matched 0.7/0.3 with low-quality matches and sampled 256 per image at 50% positives.
// NMS per level is ops::BatchedNms, which follows torchvision's batched_nms in both of its forms
// (the coordinate-offset one up to 1,000 boxes; above, on the CPU, one NMS per level and the kept
// boxes sorted by score with torchvision's unstable sort), so proposals of equal scores come in
// torchvision's order: the RoI sampler's draws from the same generator then pick the same ones.
// Differences from torchvision, none of which changes a float32 result:
// - anchors (and so proposals) are in the features' dtype for float and double, as in
//   torchvision, but float for half and bfloat16 features; ground-truth boxes are converted to
//   the anchors' dtype;
// - labels are in the objectness' dtype, so in double the objectness loss is double
//   (torchvision's labels are always float32, and its loss then float32);
// - the head's conv is one Conv2d named "conv" (torchvision's state dicts of RPNHead version 2
//   call it "conv.0.0"; version 1, which torchvision still loads, "conv").
#ifndef VISION_MODELS_MASK_RCNN_RPN_H_
#define VISION_MODELS_MASK_RCNN_RPN_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include "models/mask_rcnn/anchor_generator.h"

namespace vision::models::mask_rcnn {

struct RpnOptions {
  TORCH_ARG(int64_t, in_channels) = 256;
  TORCH_ARG(AnchorGeneratorOptions, anchors);
  TORCH_ARG(double, fg_iou_threshold) = 0.7;
  TORCH_ARG(double, bg_iou_threshold) = 0.3;
  TORCH_ARG(int64_t, batch_size_per_image) = 256;
  TORCH_ARG(double, positive_fraction) = 0.5;
  // Top-scoring anchors kept per level before NMS, and proposals kept per image after it.
  TORCH_ARG(int64_t, pre_nms_top_n_train) = 2000;
  TORCH_ARG(int64_t, pre_nms_top_n_test) = 1000;
  TORCH_ARG(int64_t, post_nms_top_n_train) = 2000;
  TORCH_ARG(int64_t, post_nms_top_n_test) = 1000;
  TORCH_ARG(double, nms_threshold) = 0.7;
  // Proposals with sigmoid(objectness) below this are dropped.
  TORCH_ARG(double, score_threshold) = 0.0;
  // Proposals narrower or shorter than this (pixels) are dropped.
  TORCH_ARG(double, min_size) = 1e-3;
};

// The head shared by all levels. Parameter names follow torchvision's RPNHead (conv,
// cls_logits, bbox_pred) so its state dicts map one to one; weights ~ N(0, 0.01), biases 0.
class RpnHeadImpl : public torch::nn::Module {
 public:
  RpnHeadImpl(int64_t in_channels, int64_t num_anchors);
  // Per level: {objectness [N, A, H, W], box deltas [N, 4A, H, W]}.
  std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> forward(
      const std::vector<at::Tensor>& features);

  torch::nn::Conv2d conv{nullptr};
  torch::nn::Conv2d cls_logits{nullptr};
  torch::nn::Conv2d bbox_pred{nullptr};
};
TORCH_MODULE(RpnHead);

struct RpnOutput {
  // Per image, [K_i, 4] x1, y1, x2, y2 in batch pixels, detached, best first.
  std::vector<at::Tensor> proposals;
  // Training only (gt_boxes given): "loss_objectness", "loss_rpn_box_reg".
  std::map<std::string, at::Tensor> losses;
};

class RegionProposalNetworkImpl : public torch::nn::Module {
 public:
  explicit RegionProposalNetworkImpl(RpnOptions options = {});

  // features: the pyramid levels anchors are defined on (P2..P6), [N, C, H_l, W_l];
  // batch_height/width: the padded batch size; image_sizes: each image's {height, width}
  // inside it (proposals are clipped to it). gt_boxes: per image [G_i, 4] (G_i may be 0) to
  // compute losses, or null. The pre/post NMS top-n of training apply when is_training().
  RpnOutput forward(const std::vector<at::Tensor>& features, int64_t batch_height,
                    int64_t batch_width, const std::vector<std::pair<int64_t, int64_t>>& image_sizes,
                    const std::vector<at::Tensor>* gt_boxes);

  const RpnOptions& options() const { return options_; }

  RpnHead head{nullptr};

 private:
  RpnOptions options_;
  AnchorGenerator anchor_generator_;
};
TORCH_MODULE(RegionProposalNetwork);

}  // namespace vision::models::mask_rcnn

#endif  // VISION_MODELS_MASK_RCNN_RPN_H_
