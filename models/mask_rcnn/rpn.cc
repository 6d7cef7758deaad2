#include "models/mask_rcnn/rpn.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/init.h>

#include "models/mask_rcnn/matcher.h"
#include "models/mask_rcnn/sampler.h"
#include "models/ops/boxes.h"
#include "models/ops/nms.h"

namespace vision::models::mask_rcnn {
namespace {

// [N, A * C, H, W] -> [N, H * W * A, C]: location-major, the A anchors of a location together,
// the order of AnchorGenerator::Anchors.
at::Tensor FlattenLevel(const at::Tensor& x, int64_t channels) {
  const int64_t n = x.size(0);
  return x.view({n, -1, channels, x.size(2), x.size(3)})
      .permute({0, 3, 4, 1, 2})
      .reshape({n, -1, channels});
}

}  // namespace

RpnHeadImpl::RpnHeadImpl(int64_t in_channels, int64_t num_anchors) {
  TORCH_CHECK(in_channels > 0 && num_anchors > 0,
              "RpnHead: in_channels and num_anchors must be positive, got ", in_channels, " and ",
              num_anchors);
  using torch::nn::Conv2dOptions;
  conv = register_module(
      "conv", torch::nn::Conv2d(Conv2dOptions(in_channels, in_channels, 3).padding(1)));
  cls_logits =
      register_module("cls_logits", torch::nn::Conv2d(Conv2dOptions(in_channels, num_anchors, 1)));
  bbox_pred = register_module("bbox_pred",
                              torch::nn::Conv2d(Conv2dOptions(in_channels, 4 * num_anchors, 1)));
  for (torch::nn::Conv2d* layer : {&conv, &cls_logits, &bbox_pred}) {
    torch::nn::init::normal_((*layer)->weight, 0.0, 0.01);
    torch::nn::init::zeros_((*layer)->bias);
  }
}

std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> RpnHeadImpl::forward(
    const std::vector<at::Tensor>& features) {
  std::vector<at::Tensor> objectness;
  std::vector<at::Tensor> deltas;
  objectness.reserve(features.size());
  deltas.reserve(features.size());
  for (const at::Tensor& feature : features) {
    // In place, as torchvision's RPNHead (Conv2dNormActivation's ReLU(inplace=True)): the
    // convolution's backward does not read its output, and a fresh map per level is not needed.
    const at::Tensor t = conv->forward(feature).relu_();
    objectness.push_back(cls_logits->forward(t));
    deltas.push_back(bbox_pred->forward(t));
  }
  return {std::move(objectness), std::move(deltas)};
}

RegionProposalNetworkImpl::RegionProposalNetworkImpl(RpnOptions options)
    : options_(std::move(options)), anchor_generator_(options_.anchors()) {
  const int64_t num_anchors = anchor_generator_.NumAnchorsPerLocation(0);
  for (int64_t level = 1; level < anchor_generator_.NumLevels(); ++level) {
    TORCH_CHECK(anchor_generator_.NumAnchorsPerLocation(level) == num_anchors,
                "RegionProposalNetwork: the head is shared by every level, so every level needs "
                "the same number of anchors per location; level 0 has ",
                num_anchors, ", level ", level, " has ",
                anchor_generator_.NumAnchorsPerLocation(level));
  }
  TORCH_CHECK(options_.pre_nms_top_n_train() > 0 && options_.pre_nms_top_n_test() > 0 &&
                  options_.post_nms_top_n_train() > 0 && options_.post_nms_top_n_test() > 0,
              "RegionProposalNetwork: pre/post NMS top-n must be positive");
  // Checks the matching and sampling options now rather than in the first training step.
  Matcher(options_.fg_iou_threshold(), options_.bg_iou_threshold(), true);
  BalancedSampler(options_.batch_size_per_image(), options_.positive_fraction());
  head = register_module("head", RpnHead(options_.in_channels(), num_anchors));
}

RpnOutput RegionProposalNetworkImpl::forward(
    const std::vector<at::Tensor>& features, int64_t batch_height, int64_t batch_width,
    const std::vector<std::pair<int64_t, int64_t>>& image_sizes,
    const std::vector<at::Tensor>* gt_boxes) {
  TORCH_CHECK(static_cast<int64_t>(features.size()) == anchor_generator_.NumLevels(),
              "RegionProposalNetwork: ", features.size(), " feature maps for ",
              anchor_generator_.NumLevels(), " anchor levels");
  const int64_t num_images = features.front().size(0);
  TORCH_CHECK(static_cast<int64_t>(image_sizes.size()) == num_images, "RegionProposalNetwork: ",
              image_sizes.size(), " image sizes for a batch of ", num_images);
  TORCH_CHECK(gt_boxes == nullptr || static_cast<int64_t>(gt_boxes->size()) == num_images,
              "RegionProposalNetwork: ", gt_boxes == nullptr ? 0 : gt_boxes->size(),
              " ground-truth box sets for a batch of ", num_images);

  auto [objectness_maps, delta_maps] = head->forward(features);
  const at::Tensor anchors = anchor_generator_.Anchors(batch_height, batch_width, features);
  std::vector<int64_t> anchors_per_level;
  std::vector<at::Tensor> objectness_levels;
  std::vector<at::Tensor> delta_levels;
  for (size_t level = 0; level < features.size(); ++level) {
    objectness_levels.push_back(FlattenLevel(objectness_maps[level], 1));
    delta_levels.push_back(FlattenLevel(delta_maps[level], 4));
    anchors_per_level.push_back(objectness_levels.back().size(1));
  }
  const at::Tensor objectness = at::cat(objectness_levels, 1).flatten(1);  // [N, T]
  const at::Tensor deltas = at::cat(delta_levels, 1);                      // [N, T, 4]
  const int64_t num_anchors = anchors.size(0);
  TORCH_CHECK(objectness.size(1) == num_anchors, "RegionProposalNetwork: ", objectness.size(1),
              " predictions for ", num_anchors, " anchors");
  // Every image has the same anchors; the batch's, image-major, as the flattened predictions.
  const at::Tensor batch_anchors = anchors.repeat({num_images, 1});

  const ops::BoxCoder coder;  // weights (1, 1, 1, 1), torchvision's RPN box coder
  RpnOutput output;
  {
    // Proposals carry no gradient (torchvision decodes detached deltas).
    const at::Tensor scores_all = objectness.detach();
    const at::Tensor boxes_all =
        coder.Decode(deltas.detach().reshape({-1, 4}), batch_anchors).view({num_images, -1, 4});
    const int64_t pre_nms_top_n =
        is_training() ? options_.pre_nms_top_n_train() : options_.pre_nms_top_n_test();
    const int64_t post_nms_top_n =
        is_training() ? options_.post_nms_top_n_train() : options_.post_nms_top_n_test();
    // The best pre_nms_top_n anchors of every level (all of a smaller level), per image.
    std::vector<at::Tensor> top;
    std::vector<at::Tensor> top_levels;
    int64_t offset = 0;
    const auto index_options = at::TensorOptions().dtype(at::kLong).device(objectness.device());
    for (size_t level = 0; level < anchors_per_level.size(); ++level) {
      const int64_t count = anchors_per_level[level];
      const int64_t k = std::min(pre_nms_top_n, count);
      top.push_back(std::get<1>(scores_all.slice(1, offset, offset + count).topk(k, 1)) + offset);
      top_levels.push_back(at::full({k}, static_cast<int64_t>(level), index_options));
      offset += count;
    }
    const at::Tensor top_index = at::cat(top, 1);  // [N, K]
    const at::Tensor levels = at::cat(top_levels);  // [K]
    const at::Tensor scores = scores_all.gather(1, top_index).sigmoid();
    const at::Tensor boxes = boxes_all.gather(1, top_index.unsqueeze(2).expand({-1, -1, 4}));
    for (int64_t i = 0; i < num_images; ++i) {
      const auto [height, width] = image_sizes[i];
      at::Tensor b = ops::ClipBoxesToImage(boxes[i], height, width);
      at::Tensor s = scores[i];
      at::Tensor l = levels;
      const auto keep_only = [&](const at::Tensor& keep) {
        b = b.index_select(0, keep);
        s = s.index_select(0, keep);
        l = l.index_select(0, keep);
      };
      keep_only(ops::RemoveSmallBoxes(b, options_.min_size()));
      keep_only(at::nonzero(s >= options_.score_threshold()).select(1, 0));
      // NMS within each level: levels do not suppress each other.
      const at::Tensor keep =
          ops::BatchedNms(b, s, l, options_.nms_threshold()).slice(0, 0, post_nms_top_n);
      output.proposals.push_back(b.index_select(0, keep));
    }
  }
  if (gt_boxes == nullptr) return output;

  const Matcher matcher(options_.fg_iou_threshold(), options_.bg_iou_threshold(),
                        /*allow_low_quality_matches=*/true);
  std::vector<at::Tensor> labels;
  std::vector<at::Tensor> matched_gt;
  for (int64_t i = 0; i < num_images; ++i) {
    const at::Tensor gt = (*gt_boxes)[i].to(anchors.options());
    TORCH_CHECK(gt.dim() == 2 && gt.size(1) == 4, "RegionProposalNetwork: gt_boxes[", i,
                "] must be [G, 4], got ", gt.sizes());
    if (gt.size(0) == 0) {
      // No ground truth: every anchor is a negative.
      labels.push_back(at::zeros({num_anchors}, anchors.options().dtype(at::kLong)));
      matched_gt.push_back(at::zeros({num_anchors, 4}, anchors.options()));
      continue;
    }
    const at::Tensor matches = matcher.Match(ops::BoxIou(gt, anchors));
    labels.push_back(at::zeros_like(matches)
                         .masked_fill_(matches >= 0, 1)
                         .masked_fill_(matches == Matcher::kBetweenThresholds, -1));
    matched_gt.push_back(gt.index_select(0, matches.clamp_min(0)));
  }
  std::vector<at::Tensor> positive_masks;
  std::vector<at::Tensor> negative_masks;
  for (auto& [positive, negative] :
       BalancedSampler(options_.batch_size_per_image(), options_.positive_fraction())
           .Sample(labels)) {
    positive_masks.push_back(positive);
    negative_masks.push_back(negative);
  }
  const at::Tensor positive = at::nonzero(at::cat(positive_masks)).select(1, 0);
  const at::Tensor negative = at::nonzero(at::cat(negative_masks)).select(1, 0);
  const at::Tensor sampled = at::cat({positive, negative});
  output.losses["loss_objectness"] = at::binary_cross_entropy_with_logits(
      objectness.reshape(-1).index_select(0, sampled),
      at::cat(labels).index_select(0, sampled).to(objectness.scalar_type()));
  // Targets of the sampled positives only (the others are never used).
  const at::Tensor targets = coder.Encode(at::cat(matched_gt).index_select(0, positive),
                                          batch_anchors.index_select(0, positive));
  output.losses["loss_rpn_box_reg"] =
      at::smooth_l1_loss(deltas.reshape({-1, 4}).index_select(0, positive), targets,
                         at::Reduction::Sum, /*beta=*/1.0 / 9) /
      sampled.numel();
  return output;
}

}  // namespace vision::models::mask_rcnn
