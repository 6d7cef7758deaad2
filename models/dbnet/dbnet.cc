#include "models/dbnet/dbnet.h"

#include <utility>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/utils.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/backbone_builder.h"
#include "core/status_macros.h"
#include "core/torch_guard.h"

namespace vision::models::dbnet {
namespace {

absl::Status FieldError(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("DBNetOptions.", field, ": ", problem));
}

at::Tensor Target(const core::Batch& batch, const char* name, const at::Tensor& like) {
  const at::Tensor& target =
      batch.Target(name, like.sizes(), "DBNet::Losses",
                   "the loader must run the generator from DBNet's MakeTargetGenerator()");
  // The binary maps arrive as bytes (label_generator.h): moved first and converted on the
  // model's device, so a host-to-GPU copy moves a quarter of the data (a single
  // to(device, kFloat) would convert on the host).
  return target.to(like.device()).to(at::kFloat);
}

// What DBNet asks of its backbone, and what to suggest when the config names none.
core::BackboneNeeds BackboneRequirements() {
  return {"DBNetOptions.backbone", /*levels=*/4, /*strides=*/{4, 8, 16, 32},
          "DBNet's FPN needs four levels at strides 4, 8, 16, 32",
          "the paper's real-time DB-ResNet-18 is backbone { type: \"ResNet18\" }"};
}

}  // namespace

absl::StatusOr<DBNetConfig> ConfigFromProto(const DBNetOptions& options) {
  DBNetConfig config;
  config.inner_channels = options.inner_channels();
  if (config.inner_channels <= 0 || config.inner_channels % 4 != 0) {
    return FieldError("inner_channels", absl::StrCat("must be a positive multiple of 4 (the "
                                                     "four fused levels), got ",
                                                     options.inner_channels()));
  }
  config.k = options.k();
  config.head_implementation = options.head_implementation() == DBNetOptions::MODULES
                                   ? DBHeadImplementation::kModules
                                   : DBHeadImplementation::kPhaseMatmul;
  if (!(options.k() > 0)) return FieldError("k", absl::StrCat("must be > 0, got ", options.k()));
  config.loss.alpha = options.alpha();
  config.loss.beta = options.beta();
  if (options.alpha() < 0 || options.beta() < 0) {
    return FieldError("alpha/beta", absl::StrCat("loss weights must be >= 0, got ", options.alpha(),
                                                 "/", options.beta()));
  }
  config.loss.ohem_negative_ratio = options.ohem_negative_ratio();
  switch (options.hard_negative_mining()) {
    case DBNetOptions::TOPK:
      config.loss.hard_negative_mining = HardNegativeMining::kTopK;
      break;
    case DBNetOptions::SORTED:
      config.loss.hard_negative_mining = HardNegativeMining::kSorted;
      break;
    default:
      config.loss.hard_negative_mining = HardNegativeMining::kAuto;
  }
  if (!(options.ohem_negative_ratio() > 0)) {
    return FieldError("ohem_negative_ratio",
                      absl::StrCat("must be > 0, got ", options.ohem_negative_ratio()));
  }

  const LabelOptions& labels = options.labels();
  config.labels.shrink_ratio = labels.shrink_ratio();
  config.labels.thresh_min = labels.thresh_min();
  config.labels.thresh_max = labels.thresh_max();
  config.labels.min_text_size = labels.min_text_size();
  if (!(labels.shrink_ratio() > 0 && labels.shrink_ratio() < 1)) {
    return FieldError("labels.shrink_ratio",
                      absl::StrCat("must be in (0, 1), got ", labels.shrink_ratio()));
  }
  if (!(labels.thresh_min() >= 0 && labels.thresh_min() < labels.thresh_max() &&
        labels.thresh_max() <= 1)) {
    return FieldError("labels.thresh_min/thresh_max",
                      absl::StrCat("need 0 <= thresh_min < thresh_max <= 1, got ",
                                   labels.thresh_min(), "/", labels.thresh_max()));
  }
  if (labels.min_text_size() < 0) {
    return FieldError("labels.min_text_size",
                      absl::StrCat("must be >= 0, got ", labels.min_text_size()));
  }

  const PostProcessOptions& post = options.post_process();
  config.post_process.binary_threshold = post.binary_threshold();
  config.post_process.box_threshold = post.box_threshold();
  config.post_process.unclip_ratio = post.unclip_ratio();
  config.post_process.max_candidates = post.max_candidates();
  config.post_process.min_box_size = post.min_box_size();
  config.post_process.output = post.output() == PostProcessOptions::POLYGON
                                   ? OutputShape::kPolygon
                                   : OutputShape::kQuadrilateral;
  if (!(post.binary_threshold() > 0 && post.binary_threshold() < 1)) {
    return FieldError("post_process.binary_threshold",
                      absl::StrCat("must be in (0, 1), got ", post.binary_threshold()));
  }
  if (!(post.box_threshold() >= 0 && post.box_threshold() <= 1)) {
    return FieldError("post_process.box_threshold",
                      absl::StrCat("must be in [0, 1], got ", post.box_threshold()));
  }
  if (!(post.unclip_ratio() > 0)) {
    return FieldError("post_process.unclip_ratio",
                      absl::StrCat("must be > 0, got ", post.unclip_ratio()));
  }
  if (post.max_candidates() <= 0) {
    return FieldError("post_process.max_candidates",
                      absl::StrCat("must be > 0, got ", post.max_candidates()));
  }
  return config;
}

DBNet::DBNet(std::shared_ptr<core::Backbone> backbone, const DBNetConfig& config)
    : config_(config), backbone_(std::move(backbone)) {
  register_module("backbone", backbone_);
  neck_ = register_module("neck", MakeDBNeck(backbone_->OutChannels(), config_.inner_channels));
  head_ = register_module("head", DBHead(DBHeadOptions(config_.inner_channels)
                                             .k(config_.k)
                                             .implementation(config_.head_implementation)));
}

absl::StatusOr<std::unique_ptr<DBNet>> DBNet::Create(const DBNetOptions& options) {
  VISION_ASSIGN_OR_RETURN(const DBNetConfig config, ConfigFromProto(options));
  VISION_ASSIGN_OR_RETURN(std::shared_ptr<core::Backbone> backbone,
                          core::BuildBackbone(options.backbone(), BackboneRequirements()));
  return core::GuardTorch("DBNet: building the network",
                          [&]() -> absl::StatusOr<std::unique_ptr<DBNet>> {
                            return std::make_unique<DBNet>(std::move(backbone), config);
                          });
}

DBHeadOutput DBNet::Forward(const at::Tensor& images, bool with_threshold) {
  return head_->forward(FuseLevels(neck_->forward(backbone_->Forward(images))), with_threshold);
}

std::map<std::string, at::Tensor> DBNet::Losses(const core::Batch& batch) {
  const DBHeadOutput out = Forward(batch.images, /*with_threshold=*/true);
  const at::Tensor probability = out.probability.squeeze(1);
  DBTargets targets;
  targets.gt = Target(batch, kGtTarget, probability);
  targets.mask = Target(batch, kMaskTarget, probability);
  targets.thresh_map = Target(batch, kThreshMapTarget, probability);
  targets.thresh_mask = Target(batch, kThreshMaskTarget, probability);
  return DBLoss(probability, out.threshold.squeeze(1), out.binary.squeeze(1), targets,
                config_.loss);
}

std::vector<core::Sample> DBNet::Predict(const core::Batch& batch) {
  TORCH_CHECK(static_cast<int64_t>(batch.samples.size()) == batch.images.size(0),
              "DBNet::Predict: the batch has ", batch.images.size(0), " images but ",
              batch.samples.size(), " samples");
  at::Tensor probability;
  {
    torch::NoGradGuard no_grad;
    probability = Forward(batch.images, /*with_threshold=*/false)
                      .probability.squeeze(1)
                      .to(at::kCPU, at::kFloat)
                      .contiguous();
  }
  std::vector<core::Sample> predictions;
  predictions.reserve(batch.samples.size());
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const core::Sample& sample = batch.samples[i];
    const at::Tensor map = probability[static_cast<int64_t>(i)];
    const cv::Mat map_mat(static_cast<int>(map.size(0)), static_cast<int>(map.size(1)), CV_32F,
                          map.data_ptr<float>());
    core::Sample prediction;
    prediction.id = sample.id;
    prediction.image_path = sample.image_path;
    // Without a recorded original size, the current image maps back to the original.
    prediction.original_width = sample.original_width > 0
                                    ? sample.original_width
                                    : static_cast<int>(map_mat.cols / sample.scale_x + 0.5);
    prediction.original_height = sample.original_height > 0
                                     ? sample.original_height
                                     : static_cast<int>(map_mat.rows / sample.scale_y + 0.5);
    prediction.texts =
        ExtractTextRegions(map_mat, config_.post_process, sample.scale_x, sample.scale_y,
                           prediction.original_width, prediction.original_height);
    predictions.push_back(std::move(prediction));
  }
  return predictions;
}

std::shared_ptr<const core::TargetGenerator> DBNet::MakeTargetGenerator() const {
  return std::make_shared<DBTargetGenerator>(config_.labels);
}

absl::Status DBNet::EnableActivationCheckpointing(const std::vector<std::string>& submodules) {
  std::vector<std::string> in_backbone;
  for (const std::string& name : submodules) {
    if (name.rfind("backbone.", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("activation checkpointing: DBNet supports backbone stages only "
                       "('backbone.layer4'), got '",
                       name, "'"));
    }
    in_backbone.push_back(name.substr(9));
  }
  return backbone_->EnableActivationCheckpointing(in_backbone);
}

VISION_REGISTER_PLUGIN(core::ModelRegistry, "DBNet", DBNet, DBNetOptions);

}  // namespace vision::models::dbnet
