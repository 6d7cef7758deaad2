// The RoI heads of Mask R-CNN (He et al., ICCV 2017) with FPN, as torchvision's RoIHeads:
// - training: proposals plus the ground-truth boxes, matched 0.5/0.5 (no low-quality matches)
//   and sampled 512 per image at 25% positives; 7x7 RoIAlign over P2-P5 (canonical level 4,
//   scale 224, sampling ratio 2), two FC layers, class scores and class-specific box deltas
//   (weights 10, 10, 5, 5); cross-entropy over the sampled RoIs and smooth L1 (beta 1/9) over
//   the positives' true-class deltas, divided by the number of sampled RoIs;
// - mask branch over the positive RoIs: 14x14 RoIAlign, four 3x3 convs with ReLU, a 2x2
//   stride-2 deconvolution with ReLU and a 1x1 conv to one 28x28 logit map per class; targets
//   are RoIAlign (28x28, aligned = false, scale 1) of each RoI's matched ground-truth mask;
//   binary cross-entropy on the true class's map (0 * sum of the logits when no RoI is
//   positive, so every parameter still gets a gradient and data-parallel ranks stay in step);
// - inference: softmax scores, per-class boxes decoded and clipped, background dropped, scores
//   above score_threshold, boxes at least 1e-2 wide and high, per-class NMS, the best
//   detections_per_image; mask probabilities (sigmoid of the predicted class's map).
#ifndef VISION_MODELS_MASK_RCNN_ROI_HEADS_H_
#define VISION_MODELS_MASK_RCNN_ROI_HEADS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace vision::models::mask_rcnn {

struct RoiHeadsOptions {
  TORCH_ARG(int64_t, in_channels) = 256;
  // Including the background class 0 (torchvision's num_classes: 91 for COCO's ids).
  TORCH_ARG(int64_t, num_classes) = 91;
  // Width of the two FC layers (TwoMLPHead).
  TORCH_ARG(int64_t, representation_size) = 1024;
  // Channels of the mask head's convolutions (four of 256 in the paper).
  TORCH_ARG(std::vector<int64_t>, mask_head_channels) = std::vector<int64_t>{256, 256, 256, 256};
  // False: a Faster R-CNN (no mask branch).
  TORCH_ARG(bool, masks) = true;
  TORCH_ARG(double, fg_iou_threshold) = 0.5;
  TORCH_ARG(double, bg_iou_threshold) = 0.5;
  TORCH_ARG(int64_t, batch_size_per_image) = 512;
  TORCH_ARG(double, positive_fraction) = 0.25;
  TORCH_ARG(double, score_threshold) = 0.05;
  TORCH_ARG(double, nms_threshold) = 0.5;
  TORCH_ARG(int64_t, detections_per_image) = 100;
  TORCH_ARG(int64_t, box_roi_size) = 7;
  TORCH_ARG(int64_t, mask_roi_size) = 14;
  TORCH_ARG(int64_t, sampling_ratio) = 2;
};

// Inference drops decoded boxes narrower or lower than this (pixels), as torchvision's
// postprocess_detections does; the ONNX export's post-processing takes the same value.
inline constexpr double kMinDetectionSize = 1e-2;

// One image's ground truth, in batch pixels.
struct InstanceTargets {
  at::Tensor boxes;   // [G, 4] float x1, y1, x2, y2
  at::Tensor labels;  // [G] int64 in [1, num_classes)
  at::Tensor masks;   // [G, H_i, W_i] uint8 {0, 1}, the image's size (unpadded); may be undefined
                      // when masks are off
};

// One image's detections, in batch pixels, best first.
struct Detections {
  at::Tensor boxes;       // [D, 4]
  at::Tensor scores;      // [D]
  at::Tensor labels;      // [D] int64 in [1, num_classes)
  at::Tensor mask_probs;  // [D, 1, M, M] (M = 2 * mask_roi_size), undefined when masks are off
};

struct RoiHeadsOutput {
  // Inference only.
  std::vector<Detections> detections;
  // Training only: "loss_classifier", "loss_box_reg", and "loss_mask" when masks are on.
  std::map<std::string, at::Tensor> losses;
};

// Submodule and parameter names follow torchvision's RoIHeads (box_head.fc6/fc7,
// box_predictor.cls_score/bbox_pred, mask_head.mask_fcn1..4, mask_predictor.conv5_mask and
// mask_fcn_logits) so its state dicts map one to one; initialisation as torchvision's.
class RoiHeadsImpl : public torch::nn::Module {
 public:
  explicit RoiHeadsImpl(RoiHeadsOptions options = {});

  // features: P2..P5, [N, C, H_l, W_l]; proposals: per image [K_i, 4] (detached);
  // image_sizes: each image's {height, width} in the padded batch (the RoI pooler's scales
  // and the clipping of detections follow them); targets: per image, for the losses, or null.
  RoiHeadsOutput forward(const std::vector<at::Tensor>& features,
                         const std::vector<at::Tensor>& proposals,
                         const std::vector<std::pair<int64_t, int64_t>>& image_sizes,
                         const std::vector<InstanceTargets>* targets);

  const RoiHeadsOptions& options() const { return options_; }

  torch::nn::Linear fc6{nullptr}, fc7{nullptr};                   // registered under box_head
  torch::nn::Linear cls_score{nullptr}, bbox_pred{nullptr};       // under box_predictor
  std::vector<torch::nn::Conv2d> mask_fcn;                        // under mask_head
  torch::nn::ConvTranspose2d conv5_mask{nullptr};                 // under mask_predictor
  torch::nn::Conv2d mask_fcn_logits{nullptr};                     // under mask_predictor

 private:
  RoiHeadsOptions options_;
};
TORCH_MODULE(RoiHeads);

// The mask targets of `positive_boxes` ([P, 4], batch pixels): RoIAlign (M x M, spatial scale
// 1, sampling ratio -1 i.e. adaptive, aligned = false) of gt_masks[matched[p]] over each box,
// [P, M, M] float in [0, 1], as torchvision's project_masks_on_boxes.
at::Tensor MaskTargets(const at::Tensor& gt_masks, const at::Tensor& positive_boxes,
                       const at::Tensor& matched, int64_t resolution);

}  // namespace vision::models::mask_rcnn

#endif  // VISION_MODELS_MASK_RCNN_ROI_HEADS_H_
