#include "models/mask_rcnn/mask_rcnn.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/utils.h>

#include <algorithm>
#include <opencv2/core.hpp>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/backbone_builder.h"
#include "core/cpu_convolution.h"
#include "core/instance_targets.h"
#include "core/run_length_mask.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "core/torch_guard.h"
#include "models/backbones/resnet.pb.h"
#include "models/ops/paste_masks.h"

namespace vision::models::mask_rcnn {
namespace {

using backbones::ImportReport;
using backbones::StateDict;

absl::Status FieldError(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("MaskRCNNOptions.", field, ": ", problem));
}

std::vector<std::pair<int64_t, int64_t>> ImageSizes(const core::Batch& batch) {
  const at::Tensor sizes = batch.image_sizes.to(at::kCPU, at::kLong).contiguous();
  TORCH_CHECK(sizes.dim() == 2 && sizes.size(0) == batch.images.size(0) && sizes.size(1) == 2,
              "MaskRCNN: Batch::image_sizes must be [N, 2] for the batch's ", batch.images.size(0),
              " images, got ", sizes.sizes());
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t* p = sizes.data_ptr<int64_t>();
  for (int64_t i = 0; i < sizes.size(0); ++i) out.emplace_back(p[2 * i], p[2 * i + 1]);
  return out;
}

// Mixed precision covers the backbone and FPN (most of the arithmetic); proposals, matching,
// box coding, RoI pooling and the heads run in float, so that box coordinates and losses keep
// their precision (torchvision runs roi_align in float under autocast for the same reason).
class AutocastOff {
 public:
  explicit AutocastOff(c10::DeviceType device)
      : device_(device), was_enabled_(at::autocast::is_autocast_enabled(device)) {
    if (was_enabled_) at::autocast::set_autocast_enabled(device_, false);
  }
  ~AutocastOff() {
    if (was_enabled_) at::autocast::set_autocast_enabled(device_, true);
  }
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  c10::DeviceType device_;
  bool was_enabled_;
};

// Reduced-precision features (autocast) back to float; float and double stay as they are.
std::vector<at::Tensor> ToFloat(std::vector<at::Tensor> features) {
  for (at::Tensor& f : features) {
    if (f.scalar_type() == at::kHalf || f.scalar_type() == at::kBFloat16) f = f.to(at::kFloat);
  }
  return features;
}

// The backbone's feature pyramid (under the caller's autocast), in float. On the CPU the
// backbone runs channels-last: oneDNN's convolutions skip their reorders from and to NCHW, and
// RoIAlign samples the pyramid without converting it; but NCHW under cpu_convolution
// WINOGRAD, whose 3x3 convolutions take NCHW input only (models/ops/winograd_conv.h).
std::vector<at::Tensor> Pyramid(BackboneWithFpn& backbone, const at::Tensor& images) {
  const bool channels_last =
      images.device().is_cpu() && core::GetCpuConvolution() != core::CpuConvolution::kWinograd;
  return ToFloat(backbone->forward(
      channels_last ? images.contiguous(at::MemoryFormat::ChannelsLast) : images));
}

absl::StatusOr<RpnOptions> RpnFromProto(const MaskRCNNOptions::Rpn& r) {
  RpnOptions o;
  AnchorGeneratorOptions anchors;
  if (r.anchor_sizes_size() > 0) {
    if (r.anchor_sizes_size() != 5) {
      return FieldError(
          "rpn.anchor_sizes",
          absl::StrCat("needs one size per FPN level P2..P6 (5), got ", r.anchor_sizes_size()));
    }
    std::vector<std::vector<double>> sizes;
    for (float s : r.anchor_sizes()) {
      if (!(s > 0)) return FieldError("rpn.anchor_sizes", absl::StrCat("must be > 0, got ", s));
      sizes.push_back({s});
    }
    anchors.sizes(sizes);
  }
  if (r.aspect_ratios_size() > 0) {
    std::vector<double> ratios;
    for (float a : r.aspect_ratios()) {
      if (!(a > 0)) return FieldError("rpn.aspect_ratios", absl::StrCat("must be > 0, got ", a));
      ratios.push_back(a);
    }
    anchors.aspect_ratios({ratios});
  }
  o.anchors(anchors);
  if (!(r.bg_iou_threshold() >= 0 && r.bg_iou_threshold() <= r.fg_iou_threshold() &&
        r.fg_iou_threshold() <= 1)) {
    return FieldError("rpn.fg_iou_threshold/bg_iou_threshold",
                      absl::StrCat("need 0 <= bg <= fg <= 1, got ", r.bg_iou_threshold(), "/",
                                   r.fg_iou_threshold()));
  }
  o.fg_iou_threshold(r.fg_iou_threshold()).bg_iou_threshold(r.bg_iou_threshold());
  if (r.batch_size_per_image() < 1) {
    return FieldError("rpn.batch_size_per_image",
                      absl::StrCat("must be >= 1, got ", r.batch_size_per_image()));
  }
  if (!(r.positive_fraction() > 0 && r.positive_fraction() <= 1)) {
    return FieldError("rpn.positive_fraction",
                      absl::StrCat("must be in (0, 1], got ", r.positive_fraction()));
  }
  o.batch_size_per_image(r.batch_size_per_image()).positive_fraction(r.positive_fraction());
  if (r.pre_nms_top_n_train() < 1 || r.pre_nms_top_n_test() < 1 || r.post_nms_top_n_train() < 1 ||
      r.post_nms_top_n_test() < 1) {
    return FieldError("rpn.pre_nms_top_n_*/post_nms_top_n_*", "must be >= 1");
  }
  o.pre_nms_top_n_train(r.pre_nms_top_n_train())
      .pre_nms_top_n_test(r.pre_nms_top_n_test())
      .post_nms_top_n_train(r.post_nms_top_n_train())
      .post_nms_top_n_test(r.post_nms_top_n_test());
  if (!(r.nms_threshold() > 0 && r.nms_threshold() <= 1)) {
    return FieldError("rpn.nms_threshold",
                      absl::StrCat("must be in (0, 1], got ", r.nms_threshold()));
  }
  if (!(r.score_threshold() >= 0 && r.score_threshold() < 1) || r.min_size() < 0) {
    return FieldError("rpn.score_threshold/min_size",
                      "need 0 <= score_threshold < 1 and min_size >= 0");
  }
  o.nms_threshold(r.nms_threshold()).score_threshold(r.score_threshold()).min_size(r.min_size());
  return o;
}

absl::StatusOr<RoiHeadsOptions> RoiHeadsFromProto(const MaskRCNNOptions::RoiHeads& h) {
  RoiHeadsOptions o;
  if (h.representation_size() < 1) {
    return FieldError("roi_heads.representation_size",
                      absl::StrCat("must be >= 1, got ", h.representation_size()));
  }
  o.representation_size(h.representation_size());
  if (h.mask_head_channels_size() > 0) {
    std::vector<int64_t> channels;
    for (int32_t c : h.mask_head_channels()) {
      if (c < 1) {
        return FieldError("roi_heads.mask_head_channels", absl::StrCat("must be >= 1, got ", c));
      }
      channels.push_back(c);
    }
    o.mask_head_channels(channels);
  }
  if (!(h.bg_iou_threshold() >= 0 && h.bg_iou_threshold() <= h.fg_iou_threshold() &&
        h.fg_iou_threshold() <= 1)) {
    return FieldError("roi_heads.fg_iou_threshold/bg_iou_threshold",
                      absl::StrCat("need 0 <= bg <= fg <= 1, got ", h.bg_iou_threshold(), "/",
                                   h.fg_iou_threshold()));
  }
  o.fg_iou_threshold(h.fg_iou_threshold()).bg_iou_threshold(h.bg_iou_threshold());
  if (h.batch_size_per_image() < 1 || !(h.positive_fraction() > 0 && h.positive_fraction() <= 1)) {
    return FieldError("roi_heads.batch_size_per_image/positive_fraction",
                      absl::StrCat("need batch_size_per_image >= 1 and positive_fraction in "
                                   "(0, 1], got ",
                                   h.batch_size_per_image(), "/", h.positive_fraction()));
  }
  o.batch_size_per_image(h.batch_size_per_image()).positive_fraction(h.positive_fraction());
  if (!(h.score_threshold() >= 0 && h.score_threshold() < 1) ||
      !(h.nms_threshold() > 0 && h.nms_threshold() <= 1) || h.detections_per_image() < 1) {
    return FieldError("roi_heads.score_threshold/nms_threshold/detections_per_image",
                      "need 0 <= score_threshold < 1, 0 < nms_threshold <= 1 and "
                      "detections_per_image >= 1");
  }
  o.score_threshold(h.score_threshold())
      .nms_threshold(h.nms_threshold())
      .detections_per_image(h.detections_per_image());
  return o;
}

// What Mask R-CNN asks of its backbone, and what to suggest when the config names none.
core::BackboneNeeds BackboneRequirements() {
  return {"MaskRCNNOptions.backbone", /*levels=*/4, /*strides=*/{4, 8, 16, 32},
          "the FPN needs C2..C5 at strides 4, 8, 16, 32",
          "torchvision's maskrcnn_resnet50_fpn is backbone { type: \"ResNet50\" options { "
          "[type.googleapis.com/vision.models.backbones.ResNetOptions] { frozen_batchnorm: true "
          "frozen_stages: 1 } } }"};
}

// "a.b.<index>.0.c" with a numeric <index>: returns the index and the rest ("c").
bool SplitIndexed(const std::string& key, const std::string& prefix, int* index,
                  std::string* rest) {
  if (!absl::StartsWith(key, prefix)) return false;
  const std::string tail = key.substr(prefix.size());
  const size_t dot = tail.find('.');
  if (dot == std::string::npos || !absl::SimpleAtoi(tail.substr(0, dot), index)) return false;
  *rest = tail.substr(dot + 1);
  if (absl::StartsWith(*rest, "0.")) *rest = rest->substr(2);  // Conv2dNormActivation's conv
  return true;
}

}  // namespace

absl::StatusOr<MaskRcnnConfig> ConfigFromProto(const MaskRCNNOptions& options) {
  MaskRcnnConfig config;
  if (!options.has_num_classes() || options.num_classes() < 1) {
    return FieldError("num_classes",
                      absl::StrCat("set it to the dataset's number of classes (>= 1, without "
                                   "the background), got ",
                                   options.num_classes()));
  }
  config.num_classes = options.num_classes();
  if (options.fpn_channels() <= 0) {
    return FieldError("fpn_channels", absl::StrCat("must be > 0, got ", options.fpn_channels()));
  }
  config.fpn_channels = options.fpn_channels();
  if (!(options.mask_threshold() > 0 && options.mask_threshold() < 1)) {
    return FieldError("mask_threshold",
                      absl::StrCat("must be in (0, 1), got ", options.mask_threshold()));
  }
  config.mask_threshold = options.mask_threshold();
  VISION_ASSIGN_OR_RETURN(config.rpn, RpnFromProto(options.rpn()));
  config.rpn.in_channels(config.fpn_channels);
  VISION_ASSIGN_OR_RETURN(config.roi_heads, RoiHeadsFromProto(options.roi_heads()));
  config.roi_heads.in_channels(config.fpn_channels).num_classes(config.num_classes + 1);
  return config;
}

BackboneWithFpnImpl::BackboneWithFpnImpl(std::shared_ptr<core::Backbone> body_module,
                                         int64_t fpn_channels)
    : body(std::move(body_module)) {
  register_module("body", body);
  fpn = register_module(
      "fpn",
      necks::Fpn(necks::FpnOptions(body->OutChannels(), fpn_channels).extra_max_pool_level(true)));
}

std::vector<at::Tensor> BackboneWithFpnImpl::forward(const at::Tensor& images) {
  return fpn->forward(body->Forward(images));
}

MaskRCNN::MaskRCNN(std::shared_ptr<core::Backbone> body, const MaskRcnnConfig& config)
    : config_(config) {
  backbone_ = register_module("backbone", BackboneWithFpn(std::move(body), config_.fpn_channels));
  rpn_ = register_module("rpn", RegionProposalNetwork(config_.rpn));
  roi_heads_ = register_module("roi_heads", RoiHeads(config_.roi_heads));
}

absl::StatusOr<std::unique_ptr<MaskRCNN>> MaskRCNN::Create(const MaskRCNNOptions& options) {
  VISION_ASSIGN_OR_RETURN(const MaskRcnnConfig config, ConfigFromProto(options));
  VISION_ASSIGN_OR_RETURN(std::shared_ptr<core::Backbone> body,
                          core::BuildBackbone(options.backbone(), BackboneRequirements()));
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<MaskRCNN> model,
                          core::GuardTorch("MaskRCNN: building the network",
                                           [&]() -> absl::StatusOr<std::unique_ptr<MaskRCNN>> {
                                             return std::make_unique<MaskRCNN>(std::move(body),
                                                                               config);
                                           }));
  if (options.has_weights_path()) {
    const std::string context =
        absl::StrCat("MaskRCNNOptions.weights_path '", options.weights_path(), "'");
    VISION_ASSIGN_OR_RETURN(
        const StateDict state,
        core::WithContext(context, backbones::ReadTorchStateDict(options.weights_path())));
    VISION_ASSIGN_OR_RETURN(const ImportReport report,
                            core::WithContext(context, ImportTorchvisionMaskRcnn(
                                                           state, *model, options.strict_weights(),
                                                           options.weights_path())));
    if (!report.added.empty()) {
      TORCH_WARN("MaskRCNN: '", options.weights_path(), "' has another number of classes than ",
                 "num_classes = ", config.num_classes, "; its predictor layers are left newly ",
                 "initialised (fine-tuning): ", absl::StrJoin(report.added, ", "));
    }
    if (!report.complete()) {
      TORCH_WARN("MaskRCNN loaded '", options.weights_path(),
                 "' partially (strict_weights is off): ", report.ToString());
    }
    model->imported_weights_ = absl::StrCat("torchvision Mask R-CNN state dict '",
                                            options.weights_path(), "' (MaskRCNNOptions.weights_path");
    if (!report.added.empty()) {
      absl::StrAppend(&model->imported_weights_, "; predictor layers newly initialised: ",
                      absl::StrJoin(report.added, ", "));
    }
    if (!report.complete()) absl::StrAppend(&model->imported_weights_, "; loaded partially");
    model->imported_weights_ += ")";
  } else if (backbones::ResNetOptions resnet;
             options.backbone().options().UnpackTo(&resnet) && !resnet.has_weights_path() &&
             (resnet.frozen_batchnorm() || resnet.frozen_stages() > 0)) {
    // Frozen BatchNorm keeps the statistics it starts with and frozen stages their weights:
    // without pretrained weights both stay at their initial values for the whole run, which
    // trains badly and is easy to miss (the COCO recipe ships without a weights path).
    TORCH_WARN("MaskRCNN: the backbone (", options.backbone().type(), ") has ",
               resnet.frozen_batchnorm() ? "frozen BatchNorm" : "",
               resnet.frozen_batchnorm() && resnet.frozen_stages() > 0 ? " and " : "",
               resnet.frozen_stages() > 0 ? absl::StrCat(resnet.frozen_stages(), " frozen stage(s)")
                                          : std::string(),
               " but loads no weights, so they keep their initial values for the whole run. Set ",
               "the backbone's weights_path (torchvision's ImageNet file, e.g. "
               "resnet50-0676ba61.pth) or MaskRCNNOptions.weights_path, or train them "
               "(frozen_batchnorm: false, frozen_stages: 0)");
  }
  return model;
}

core::PluginSpec TorchvisionBackbone() {
  core::PluginSpec spec;
  spec.set_type("ResNet50");
  backbones::ResNetOptions resnet;
  resnet.set_frozen_batchnorm(true);
  resnet.set_frozen_stages(1);
  spec.mutable_options()->PackFrom(resnet);
  return spec;
}

std::map<std::string, at::Tensor> MaskRCNN::LossesFor(
    const at::Tensor& images, const std::vector<std::pair<int64_t, int64_t>>& image_sizes,
    const std::vector<InstanceTargets>& targets) {
  TORCH_CHECK(targets.size() == image_sizes.size() &&
                  static_cast<int64_t>(targets.size()) == images.size(0),
              "MaskRCNN: ", images.size(0), " images, ", image_sizes.size(), " sizes and ",
              targets.size(), " targets");
  const std::vector<at::Tensor> pyramid = Pyramid(backbone_, images);
  // The RPN and RoI heads in full precision (see AutocastOff).
  AutocastOff full_precision(images.device().type());
  std::vector<at::Tensor> gt_boxes;
  for (const InstanceTargets& t : targets) gt_boxes.push_back(t.boxes);
  RpnOutput rpn = rpn_->forward(pyramid, images.size(2), images.size(3), image_sizes, &gt_boxes);
  const std::vector<at::Tensor> pooled_levels(pyramid.begin(), pyramid.begin() + 4);
  RoiHeadsOutput heads = roi_heads_->forward(pooled_levels, rpn.proposals, image_sizes, &targets);
  std::map<std::string, at::Tensor> losses = std::move(rpn.losses);
  for (auto& [name, value] : heads.losses) losses[name] = value;
  return losses;
}

std::vector<Detections> MaskRCNN::Detect(
    const at::Tensor& images, const std::vector<std::pair<int64_t, int64_t>>& image_sizes) {
  const std::vector<at::Tensor> pyramid = Pyramid(backbone_, images);
  // The RPN and RoI heads in full precision (see AutocastOff).
  AutocastOff full_precision(images.device().type());
  RpnOutput rpn = rpn_->forward(pyramid, images.size(2), images.size(3), image_sizes, nullptr);
  const std::vector<at::Tensor> pooled_levels(pyramid.begin(), pyramid.begin() + 4);
  return roi_heads_->forward(pooled_levels, rpn.proposals, image_sizes, nullptr).detections;
}

std::map<std::string, at::Tensor> MaskRCNN::Losses(const core::Batch& batch) {
  TORCH_CHECK(batch.instances.size() == batch.samples.size(), "MaskRCNN::Losses: the batch has ",
              batch.samples.size(), " samples but ", batch.instances.size(),
              " sets of instance targets; the loader must run MaskRCNN's target generator");
  const c10::Device device = batch.images.device();
  const std::vector<std::pair<int64_t, int64_t>> image_sizes = ImageSizes(batch);
  TORCH_CHECK(image_sizes.size() == batch.instances.size(),
              "MaskRCNN::Losses: ", image_sizes.size(), " image sizes for ", batch.instances.size(),
              " sets of instance targets");
  std::vector<InstanceTargets> targets;
  for (size_t i = 0; i < batch.instances.size(); ++i) {
    const auto& instances = batch.instances[i];
    const auto get = [&](const char* name) {
      auto it = instances.find(name);
      TORCH_CHECK(it != instances.end(), "MaskRCNN::Losses: sample '", batch.samples[i].id,
                  "' has no instance target '", name, "'");
      return it->second.to(device);
    };
    InstanceTargets t;
    t.boxes = get("boxes").to(at::kFloat);
    t.labels = get("labels").to(at::kLong) + 1;  // 0 is the background
    // The masks are rasterised at the sample's size, PadToDivisor's padding included; the mask
    // targets read the image's pixels only (InstanceTargets::masks), as torchvision's masks are
    // the resized image's size: RoIAlign's samples in the last half pixel of a mask that reaches
    // the right or bottom edge would otherwise blend in the padding where torchvision repeats
    // the edge.
    const auto [height, width] = image_sizes[i];
    t.masks = get("masks").slice(1, 0, height).slice(2, 0, width);
    auto crowd = instances.find("is_crowd");
    if (crowd != instances.end() && crowd->second.numel() > 0) {
      const at::Tensor keep = crowd->second.to(device) == 0;
      t.boxes = t.boxes.index({keep});
      t.labels = t.labels.index({keep});
      t.masks = t.masks.index({keep});
    }
    targets.push_back(std::move(t));
  }
  return LossesFor(batch.images, image_sizes, targets);
}

std::vector<core::Sample> MaskRCNN::Predict(const core::Batch& batch) {
  TORCH_CHECK(static_cast<int64_t>(batch.samples.size()) == batch.images.size(0),
              "MaskRCNN::Predict: the batch has ", batch.images.size(0), " images but ",
              batch.samples.size(), " samples");
  torch::NoGradGuard no_grad;
  const std::vector<Detections> detections = Detect(batch.images, ImageSizes(batch));
  std::vector<core::Sample> predictions;
  predictions.reserve(detections.size());
  for (size_t i = 0; i < detections.size(); ++i) {
    const core::Sample& sample = batch.samples[i];
    const Detections& d = detections[i];
    core::Sample prediction;
    prediction.id = sample.id;
    prediction.image_path = sample.image_path;
    const int64_t height =
        sample.original_height > 0
            ? sample.original_height
            : std::lround(batch.image_sizes[i][0].item<double>() / sample.scale_y);
    const int64_t width =
        sample.original_width > 0
            ? sample.original_width
            : std::lround(batch.image_sizes[i][1].item<double>() / sample.scale_x);
    prediction.original_height = static_cast<int>(height);
    prediction.original_width = static_cast<int>(width);
    // Batch pixels -> original pixels (resizing scaled the image by scale_x, scale_y; crops
    // and pads keep the origin).
    const at::Tensor scale = at::tensor(
        {sample.scale_x, sample.scale_y, sample.scale_x, sample.scale_y}, d.boxes.options());
    const at::Tensor boxes = d.boxes / scale;
    at::Tensor masks;
    if (d.mask_probs.defined() && boxes.size(0) > 0) {
      masks =
          ops::PasteMasks(d.mask_probs, boxes,
                          ops::PasteMasksOptions(height, width).threshold(config_.mask_threshold))
              .to(at::kCPU, at::kByte)
              .contiguous();
    }
    const at::Tensor boxes_cpu = boxes.to(at::kCPU, at::kFloat).contiguous();
    const at::Tensor scores = d.scores.to(at::kCPU, at::kFloat).contiguous();
    const at::Tensor labels = d.labels.to(at::kCPU, at::kLong).contiguous();
    for (int64_t k = 0; k < boxes_cpu.size(0); ++k) {
      const float* b = boxes_cpu.data_ptr<float>() + 4 * k;
      core::ObjectInstance object;
      object.box = cv::Rect2f(b[0], b[1], b[2] - b[0], b[3] - b[1]);
      object.label = static_cast<int>(labels.data_ptr<int64_t>()[k]) - 1;
      object.score = scores.data_ptr<float>()[k];
      if (masks.defined()) {
        const cv::Mat mask(static_cast<int>(height), static_cast<int>(width), CV_8U,
                           masks[k].data_ptr());
        object.rle = core::EncodeRle(mask);
      }
      prediction.objects.push_back(std::move(object));
    }
    predictions.push_back(std::move(prediction));
  }
  return predictions;
}

std::shared_ptr<const core::TargetGenerator> MaskRCNN::MakeTargetGenerator() const {
  core::InstanceTargetOptions options;
  options.masks = config_.roi_heads.masks();
  options.crowd = false;
  return std::make_shared<core::InstanceTargetGenerator>(options);
}

std::optional<core::TaskRequirements> MaskRCNN::DataRequirements() const {
  core::TaskRequirements requirements;
  requirements.annotation_kind = core::AnnotationKind::kObjectInstances;
  requirements.num_classes = static_cast<int>(config_.num_classes);
  requirements.num_classes_option = "num_classes";
  return requirements;
}

absl::Status MaskRCNN::EnableActivationCheckpointing(const std::vector<std::string>& submodules) {
  std::vector<std::string> in_body;
  for (const std::string& name : submodules) {
    if (!absl::StartsWith(name, "backbone.body.")) {
      return absl::InvalidArgumentError(
          absl::StrCat("activation checkpointing: MaskRCNN supports backbone stages only "
                       "('backbone.body.layer4'), got '",
                       name, "'"));
    }
    in_body.push_back(name.substr(14));
  }
  return backbone_->body->EnableActivationCheckpointing(in_body);
}

std::string FromTorchvisionKey(const std::string& key) {
  int index = 0;
  std::string rest;
  if (SplitIndexed(key, "backbone.fpn.inner_blocks.", &index, &rest)) {
    return absl::StrCat("backbone.fpn.lateral", index, ".", rest);
  }
  if (SplitIndexed(key, "backbone.fpn.layer_blocks.", &index, &rest)) {
    return absl::StrCat("backbone.fpn.smooth", index, ".", rest);
  }
  if (SplitIndexed(key, "roi_heads.mask_head.", &index, &rest)) {
    return absl::StrCat("roi_heads.mask_head.mask_fcn", index + 1, ".", rest);
  }
  if (absl::StartsWith(key, "rpn.head.conv.0.0.")) {
    return absl::StrCat("rpn.head.conv.", key.substr(18));
  }
  return key;
}

absl::StatusOr<ImportReport> ImportTorchvisionMaskRcnn(const StateDict& state, MaskRCNN& model,
                                                       bool strict, const std::string& source) {
  std::map<std::string, at::Tensor> own;
  for (const auto& item : model.named_parameters()) own[item.key()] = item.value();
  for (const auto& item : model.named_buffers()) own[item.key()] = item.value();
  static const char* const kPredictors[] = {"roi_heads.box_predictor.cls_score.",
                                            "roi_heads.box_predictor.bbox_pred.",
                                            "roi_heads.mask_predictor.mask_fcn_logits."};
  StateDict renamed;
  std::vector<std::string> reinitialised;
  for (const auto& [key, tensor] : state) {
    const std::string name = FromTorchvisionKey(key);
    const bool predictor = std::any_of(std::begin(kPredictors), std::end(kPredictors),
                                       [&](const char* p) { return absl::StartsWith(name, p); });
    auto it = own.find(name);
    if (predictor && it != own.end() && it->second.sizes() != tensor.sizes()) {
      reinitialised.push_back(name);
      continue;
    }
    renamed.emplace_back(name, tensor);
  }
  return backbones::LoadStateDict(renamed, model, strict,
                                  absl::StrCat("weights file '", source, "'"), reinitialised);
}

VISION_REGISTER_PLUGIN(core::ModelRegistry, "MaskRCNN", MaskRCNN, MaskRCNNOptions);

}  // namespace vision::models::mask_rcnn
