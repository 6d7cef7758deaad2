#include "models/mask_rcnn/roi_heads.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/init.h>

#include "models/mask_rcnn/matcher.h"
#include "models/mask_rcnn/sampler.h"
#include "models/ops/boxes.h"
#include "models/ops/multi_scale_roi_align.h"
#include "models/ops/nms.h"
#include "models/ops/roi_align.h"

namespace vision::models::mask_rcnn {
namespace {

constexpr char kOp[] = "RoiHeads";

ops::BoxCoder RoiBoxCoder() {
  return ops::BoxCoder(ops::BoxCoderOptions().weights({10.0, 10.0, 5.0, 5.0}));
}

// per_class[r, classes[r], ...] for every row r of a [rows, classes, ...] tensor: one
// index_select on the [rows * classes, ...] view instead of a lookup per RoI.
at::Tensor PickPerRow(const at::Tensor& per_class, const at::Tensor& classes) {
  const int64_t rows = per_class.size(0);
  const int64_t width = per_class.size(1);
  std::vector<int64_t> flat_sizes = {rows * width};
  for (int64_t d = 2; d < per_class.dim(); ++d) flat_sizes.push_back(per_class.size(d));
  const at::Tensor index = at::arange(rows, classes.options()) * width + classes;
  return per_class.reshape(flat_sizes).index_select(0, index);
}

// One image's sampled RoIs: boxes, labels (0 background) and, for the positives among them
// (labels > 0, in RoI order), their matched ground truth and regression targets.
struct SampledRois {
  at::Tensor boxes;
  at::Tensor labels;
  at::Tensor positive;            // indices into boxes / labels
  at::Tensor positive_matched;    // ground-truth indices
  at::Tensor regression_targets;  // [positives, 4]
};

}  // namespace

RoiHeadsImpl::RoiHeadsImpl(RoiHeadsOptions options) : options_(std::move(options)) {
  TORCH_CHECK(options_.in_channels() > 0 && options_.representation_size() > 0 &&
                  options_.num_classes() > 1,
              kOp,
              ": in_channels and representation_size must be positive and num_classes >= 2 "
              "(background included), got ",
              options_.in_channels(), ", ", options_.representation_size(), ", ",
              options_.num_classes());
  const int64_t pooled = options_.in_channels() * options_.box_roi_size() * options_.box_roi_size();
  auto box_head = register_module("box_head", std::make_shared<torch::nn::Module>());
  fc6 = box_head->register_module("fc6", torch::nn::Linear(pooled, options_.representation_size()));
  fc7 = box_head->register_module(
      "fc7", torch::nn::Linear(options_.representation_size(), options_.representation_size()));
  auto box_predictor = register_module("box_predictor", std::make_shared<torch::nn::Module>());
  cls_score = box_predictor->register_module(
      "cls_score", torch::nn::Linear(options_.representation_size(), options_.num_classes()));
  bbox_pred = box_predictor->register_module(
      "bbox_pred", torch::nn::Linear(options_.representation_size(), options_.num_classes() * 4));
  if (!options_.masks()) return;

  TORCH_CHECK(!options_.mask_head_channels().empty(), kOp,
              ": mask_head_channels is empty; the mask head needs at least one convolution");
  auto mask_head = register_module("mask_head", std::make_shared<torch::nn::Module>());
  int64_t channels = options_.in_channels();
  for (size_t i = 0; i < options_.mask_head_channels().size(); ++i) {
    const int64_t out = options_.mask_head_channels()[i];
    auto conv = mask_head->register_module(
        "mask_fcn" + std::to_string(i + 1),
        torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, out, 3).padding(1)));
    // MaskRCNNHeads' initialisation.
    torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
    torch::nn::init::zeros_(conv->bias);
    mask_fcn.push_back(conv);
    channels = out;
  }
  // torchvision's MaskRCNNPredictor keeps the deconvolution as wide as its input (256 -> 256).
  auto mask_predictor = register_module("mask_predictor", std::make_shared<torch::nn::Module>());
  conv5_mask = mask_predictor->register_module(
      "conv5_mask", torch::nn::ConvTranspose2d(
                        torch::nn::ConvTranspose2dOptions(channels, channels, 2).stride(2)));
  mask_fcn_logits = mask_predictor->register_module(
      "mask_fcn_logits",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, options_.num_classes(), 1)));
  // MaskRCNNPredictor re-initialises the weights only; the biases keep PyTorch's default.
  torch::nn::init::kaiming_normal_(conv5_mask->weight, 0.0, torch::kFanOut, torch::kReLU);
  torch::nn::init::kaiming_normal_(mask_fcn_logits->weight, 0.0, torch::kFanOut, torch::kReLU);
}

at::Tensor MaskTargets(const at::Tensor& gt_masks, const at::Tensor& positive_boxes,
                       const at::Tensor& matched, int64_t resolution) {
  TORCH_CHECK(positive_boxes.dim() == 2 && positive_boxes.size(1) == 4 &&
                  positive_boxes.is_floating_point(),
              "MaskTargets: positive_boxes must be a floating-point [P, 4] tensor, got ",
              positive_boxes.sizes(), " ", positive_boxes.scalar_type());
  TORCH_CHECK(matched.dim() == 1 && matched.size(0) == positive_boxes.size(0),
              "MaskTargets: matched must be [P] with P = ", positive_boxes.size(0), ", got ",
              matched.sizes());
  TORCH_CHECK(gt_masks.dim() == 3, "MaskTargets: gt_masks must be [G, H, W], got ",
              gt_masks.sizes());
  TORCH_CHECK(resolution > 0, "MaskTargets: resolution must be positive, got ", resolution);
  if (positive_boxes.size(0) == 0) {
    return at::zeros({0, resolution, resolution}, positive_boxes.options());
  }
  const at::Tensor rois =
      at::cat({matched.to(positive_boxes.dtype()).unsqueeze(1), positive_boxes}, 1);
  return ops::RoIAlign(gt_masks.unsqueeze(1).to(positive_boxes.options()), rois,
                       ops::RoIAlignOptions(resolution, resolution)
                           .spatial_scale(1.0)
                           .sampling_ratio(-1)
                           .aligned(false))
      .squeeze(1);
}

RoiHeadsOutput RoiHeadsImpl::forward(const std::vector<at::Tensor>& features,
                                     const std::vector<at::Tensor>& proposals,
                                     const std::vector<std::pair<int64_t, int64_t>>& image_sizes,
                                     const std::vector<InstanceTargets>* targets) {
  TORCH_CHECK(!features.empty(), kOp, ": features is empty; give P2..P5");
  const size_t num_images = proposals.size();
  TORCH_CHECK(static_cast<int64_t>(num_images) == features[0].size(0), kOp, ": ", num_images,
              " proposal tensors for a batch of ", features[0].size(0));
  TORCH_CHECK(image_sizes.size() == num_images, kOp, ": ", image_sizes.size(), " image sizes for ",
              num_images, " images");
  // As the RPN: targets ask for the losses (sampling included), no targets for detections,
  // whatever the module's mode (nothing here behaves differently in training), so losses on a
  // validation set need no mode switch.
  const bool with_losses = targets != nullptr;
  TORCH_CHECK(!with_losses || targets->size() == num_images, kOp, ": ", targets->size(),
              " InstanceTargets for ", num_images, " images");
  const int64_t num_classes = options_.num_classes();
  const ops::BoxCoder coder = RoiBoxCoder();

  // With targets the RoIs are sampled from the proposals plus the ground-truth boxes.
  std::vector<SampledRois> sampled(num_images);
  std::vector<at::Tensor> rois(num_images);
  if (with_losses) {
    const Matcher matcher(options_.fg_iou_threshold(), options_.bg_iou_threshold(),
                          /*allow_low_quality_matches=*/false);
    std::vector<at::Tensor> candidates(num_images), labels(num_images), matches(num_images);
    for (size_t i = 0; i < num_images; ++i) {
      const InstanceTargets& t = (*targets)[i];
      TORCH_CHECK(t.boxes.defined() && t.boxes.dim() == 2 && t.boxes.size(1) == 4 &&
                      t.labels.defined() && t.labels.dim() == 1 &&
                      t.labels.size(0) == t.boxes.size(0),
                  kOp, ": targets[", i, "] needs boxes [G, 4] and labels [G]");
      TORCH_CHECK(!options_.masks() || (t.masks.defined() && t.masks.dim() == 3 &&
                                        t.masks.size(0) == t.boxes.size(0)),
                  kOp, ": targets[", i, "] needs masks [G, H, W] for the mask branch");
      const at::Tensor props = proposals[i].detach();
      candidates[i] = at::cat({props, t.boxes.to(props.options())});
      const int64_t count = candidates[i].size(0);
      if (t.boxes.size(0) == 0) {
        labels[i] = at::zeros({count}, props.options().dtype(at::kLong));
        matches[i] = at::zeros({count}, props.options().dtype(at::kLong));
        continue;
      }
      const at::Tensor match =
          matcher.Match(ops::BoxIou(t.boxes.to(props.options()), candidates[i]));
      matches[i] = match.clamp_min(0);
      labels[i] = t.labels.to(at::kLong).index_select(0, matches[i]);
      labels[i].masked_fill_(match == Matcher::kBelowLowThreshold, 0);
      labels[i].masked_fill_(match == Matcher::kBetweenThresholds, -1);
    }
    const auto chosen =
        BalancedSampler(options_.batch_size_per_image(), options_.positive_fraction())
            .Sample(labels);
    for (size_t i = 0; i < num_images; ++i) {
      SampledRois& s = sampled[i];
      const at::Tensor keep = at::nonzero(chosen[i].first | chosen[i].second).select(1, 0);
      s.boxes = candidates[i].index_select(0, keep);
      s.labels = labels[i].index_select(0, keep);
      s.positive = at::nonzero(s.labels > 0).select(1, 0);
      s.positive_matched = matches[i].index_select(0, keep).index_select(0, s.positive);
      const at::Tensor gt_boxes = (*targets)[i].boxes.to(s.boxes.options());
      s.regression_targets = coder.Encode(gt_boxes.index_select(0, s.positive_matched),
                                          s.boxes.index_select(0, s.positive));
      rois[i] = s.boxes;
    }
  } else {
    for (size_t i = 0; i < num_images; ++i) rois[i] = proposals[i].detach();
  }

  const at::Tensor box_features = ops::MultiScaleRoIAlign(
      features, rois, image_sizes,
      ops::MultiScaleRoIAlignOptions(options_.box_roi_size(), options_.box_roi_size())
          .sampling_ratio(options_.sampling_ratio()));
  // ReLUs in place: no layer's backward reads its output (torchvision's mask head and predictor
  // are in place too), so out-of-place copies would only cost memory and time.
  at::Tensor x = fc6->forward(box_features.flatten(1)).relu_();
  x = fc7->forward(x).relu_();
  const at::Tensor class_logits = cls_score->forward(x);
  const at::Tensor box_regression = bbox_pred->forward(x);

  // The mask branch from RoIs per image to the [R, C, M, M] features under the logits layer.
  const auto mask_features_of = [&](const std::vector<at::Tensor>& mask_rois) {
    at::Tensor m = ops::MultiScaleRoIAlign(
        features, mask_rois, image_sizes,
        ops::MultiScaleRoIAlignOptions(options_.mask_roi_size(), options_.mask_roi_size())
            .sampling_ratio(options_.sampling_ratio()));
    // On the CPU the head runs channels-last: oneDNN's convolutions (forward and backward) then
    // skip their reorders from and to NCHW, and the transposed convolution its copy back to NCHW
    // (a third of the head's time for 100 detections per image).
    if (m.device().is_cpu()) m = m.contiguous(at::MemoryFormat::ChannelsLast);
    for (auto& conv : mask_fcn) m = conv->forward(m).relu_();
    return conv5_mask->forward(m).relu_();
  };
  // [R, M, M] logits of each RoI's class only: mask_fcn_logits (a 1x1 convolution) with that
  // class's row of weights, a dot product over channels per pixel, instead of all num_classes
  // maps of which the loss and the detections read one. m is read as [R, H * W, C] rows (a view of
  // the CPU's channels-last m), so that its gradient comes back channels-last like the ReLU
  // output it meets in the backward.
  const auto class_mask_logits = [&](const at::Tensor& m, const at::Tensor& label) {
    const int64_t rows = m.size(0), channels = m.size(1);
    const at::Tensor weight =
        mask_fcn_logits->weight.view({num_classes, channels}).index_select(0, label);
    const at::Tensor bias = mask_fcn_logits->bias.index_select(0, label).view({-1, 1, 1});
    return at::baddbmm(bias,
                       m.permute({0, 2, 3, 1}).reshape({rows, m.size(2) * m.size(3), channels}),
                       weight.unsqueeze(2))
        .view({rows, m.size(2), m.size(3)});
  };

  RoiHeadsOutput output;
  if (with_losses) {
    std::vector<at::Tensor> labels, positive_rows, positive_labels, regression_targets;
    int64_t offset = 0;
    for (const SampledRois& s : sampled) {
      labels.push_back(s.labels);
      positive_rows.push_back(s.positive + offset);
      positive_labels.push_back(s.labels.index_select(0, s.positive));
      regression_targets.push_back(s.regression_targets);
      offset += s.labels.size(0);
    }
    const at::Tensor all_labels = at::cat(labels);
    const at::Tensor pos_rows = at::cat(positive_rows);
    const at::Tensor pos_labels = at::cat(positive_labels);
    output.losses["loss_classifier"] = at::cross_entropy_loss(class_logits, all_labels);
    const at::Tensor pos_deltas =
        PickPerRow(box_regression.index_select(0, pos_rows).view({-1, num_classes, 4}), pos_labels);
    output.losses["loss_box_reg"] =
        at::smooth_l1_loss(pos_deltas, at::cat(regression_targets), at::Reduction::Sum, 1.0 / 9) /
        static_cast<double>(all_labels.numel());

    if (options_.masks()) {
      std::vector<at::Tensor> mask_rois, mask_targets;
      for (size_t i = 0; i < num_images; ++i) {
        const SampledRois& s = sampled[i];
        mask_rois.push_back(s.boxes.index_select(0, s.positive));
        mask_targets.push_back(MaskTargets((*targets)[i].masks, mask_rois.back(),
                                           s.positive_matched, 2 * options_.mask_roi_size()));
      }
      const at::Tensor mask_logits = class_mask_logits(mask_features_of(mask_rois), pos_labels);
      output.losses["loss_mask"] =
          pos_labels.numel() == 0
              // Keeps every mask parameter in the graph with a zero gradient.
              ? mask_logits.sum() * 0
              : at::binary_cross_entropy_with_logits(mask_logits, at::cat(mask_targets));
    }
    return output;
  }

  const at::Tensor scores = at::softmax(class_logits, -1);
  const at::Tensor decoded = coder.Decode(box_regression, at::cat(rois));
  int64_t offset = 0;
  for (size_t i = 0; i < num_images; ++i) {
    const int64_t count = rois[i].size(0);
    const auto [height, width] = image_sizes[i];
    // Class 0 (background) dropped: [count * (num_classes - 1)] candidates.
    at::Tensor boxes =
        ops::ClipBoxesToImage(decoded.slice(0, offset, offset + count), height, width)
            .view({count, num_classes, 4})
            .slice(1, 1)
            .reshape({-1, 4});
    at::Tensor image_scores = scores.slice(0, offset, offset + count).slice(1, 1).reshape(-1);
    at::Tensor labels =
        at::arange(1, num_classes, image_scores.options().dtype(at::kLong)).repeat({count});
    offset += count;
    const auto take = [&](const at::Tensor& index) {
      boxes = boxes.index_select(0, index);
      image_scores = image_scores.index_select(0, index);
      labels = labels.index_select(0, index);
    };
    take(at::nonzero(image_scores > options_.score_threshold()).select(1, 0));
    take(ops::RemoveSmallBoxes(boxes, kMinDetectionSize));
    take(ops::BatchedNms(boxes, image_scores, labels, options_.nms_threshold())
             .slice(0, 0, options_.detections_per_image()));
    output.detections.push_back({boxes, image_scores, labels, at::Tensor()});
  }
  if (options_.masks()) {
    std::vector<at::Tensor> mask_rois, labels;
    std::vector<int64_t> counts;
    for (const Detections& d : output.detections) {
      mask_rois.push_back(d.boxes);
      labels.push_back(d.labels);
      counts.push_back(d.boxes.size(0));
    }
    const at::Tensor probs =
        class_mask_logits(mask_features_of(mask_rois), at::cat(labels)).sigmoid().unsqueeze(1);
    const std::vector<at::Tensor> per_image = probs.split_with_sizes(counts);
    for (size_t i = 0; i < num_images; ++i) output.detections[i].mask_probs = per_image[i];
  }
  return output;
}

}  // namespace vision::models::mask_rcnn
