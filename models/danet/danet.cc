#include "models/danet/danet.h"

#include <utility>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/backbone_builder.h"
#include "core/status_macros.h"
#include "core/torch_guard.h"

namespace vision::models::danet {
namespace {

namespace F = torch::nn::functional;

absl::Status FieldError(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("DANetOptions.", field, ": ", problem));
}

// The authors' repository upsamples with align_corners = true (its _up_kwargs).
at::Tensor Upsample(const at::Tensor& logits, int64_t height, int64_t width) {
  return at::upsample_bilinear2d(logits, {height, width}, /*align_corners=*/true);
}

at::Tensor CrossEntropy(const at::Tensor& logits, const at::Tensor& labels) {
  // float: under autocast the logits may be bfloat16, the loss is reduced in float.
  return F::cross_entropy(logits.to(at::kFloat), labels,
                          F::CrossEntropyFuncOptions().ignore_index(core::kIgnoreLabel));
}

// What DANet asks of its backbone, and what to suggest when the config names none.
core::BackboneNeeds BackboneRequirements() {
  return {"DANetOptions.backbone", /*levels=*/4, /*strides=*/{},
          "DANet reads the fourth level (head) and the third (auxiliary head)",
          "the paper's is backbone { type: \"ResNet101\" options { "
          "[type.googleapis.com/vision.models.backbones.ResNetOptions] { "
          "output_stride: 8 multi_grid: [1, 2, 4] } } }"};
}

}  // namespace

absl::StatusOr<DANetConfig> ConfigFromProto(const DANetOptions& options) {
  DANetConfig config;
  if (!options.has_num_classes() || options.num_classes() < 1) {
    return FieldError("num_classes", absl::StrCat("must be set to the number of classes (>= 1; "
                                                  "19 for Cityscapes), got ",
                                                  options.num_classes()));
  }
  if (options.num_classes() > core::kIgnoreLabel) {
    return FieldError("num_classes", absl::StrCat("at most ", int{core::kIgnoreLabel},
                                                  " (label ", int{core::kIgnoreLabel},
                                                  " is the ignore label), got ",
                                                  options.num_classes()));
  }
  config.num_classes = options.num_classes();
  if (options.head_channels() < 0) {
    return FieldError("head_channels", absl::StrCat("must be >= 0 (0: the backbone's channels / "
                                                    "4), got ", options.head_channels()));
  }
  config.head_channels = options.head_channels();
  if (options.attention_reduction() < 1) {
    return FieldError("attention_reduction",
                      absl::StrCat("must be >= 1, got ", options.attention_reduction()));
  }
  config.attention_reduction = options.attention_reduction();
  if (!(options.dropout() >= 0 && options.dropout() < 1)) {
    return FieldError("dropout", absl::StrCat("must be in [0, 1), got ", options.dropout()));
  }
  config.dropout = options.dropout();
  const std::pair<const char*, float> weights[] = {
      {"fused_loss_weight", options.fused_loss_weight()},
      {"position_loss_weight", options.position_loss_weight()},
      {"channel_loss_weight", options.channel_loss_weight()},
      {"aux_loss_weight", options.aux_loss_weight()}};
  for (const auto& [field, weight] : weights) {
    if (!(weight >= 0)) return FieldError(field, absl::StrCat("must be >= 0, got ", weight));
  }
  config.fused_loss_weight = options.fused_loss_weight();
  config.position_loss_weight = options.position_loss_weight();
  config.channel_loss_weight = options.channel_loss_weight();
  config.aux = options.aux();
  config.aux_loss_weight = options.aux_loss_weight();
  return config;
}

DANet::DANet(std::shared_ptr<core::Backbone> backbone, const DANetConfig& config)
    : config_(config), backbone_(std::move(backbone)) {
  register_module("backbone", backbone_);
  const std::vector<int64_t> channels = backbone_->OutChannels();
  TORCH_CHECK(channels.size() == 4, "DANet needs a backbone with four levels, got ",
              channels.size());
  head_ = register_module(
      "head", DANetHead(DANetHeadOptions(channels[3], config_.num_classes)
                            .inter_channels(config_.head_channels)
                            .reduction(config_.attention_reduction)
                            .dropout(config_.dropout)));
  if (config_.aux) {
    auxlayer_ = register_module(
        "auxlayer",
        FcnHead(FcnHeadOptions(channels[2], config_.num_classes).dropout(config_.dropout)));
  }
}

absl::StatusOr<std::unique_ptr<DANet>> DANet::Create(const DANetOptions& options) {
  VISION_ASSIGN_OR_RETURN(const DANetConfig config, ConfigFromProto(options));
  VISION_ASSIGN_OR_RETURN(std::shared_ptr<core::Backbone> backbone,
                          core::BuildBackbone(options.backbone(), BackboneRequirements()));
  const std::vector<int64_t> channels = backbone->OutChannels();
  const int64_t inter = config.head_channels > 0 ? config.head_channels : channels[3] / 4;
  if (inter < 1 || inter % config.attention_reduction != 0) {
    return FieldError("head_channels/attention_reduction",
                      absl::StrCat("the branches' ", inter,
                                   " channels must be a positive multiple of attention_reduction ",
                                   config.attention_reduction, "; set head_channels to one"));
  }
  return core::GuardTorch("DANet: building the network",
                          [&]() -> absl::StatusOr<std::unique_ptr<DANet>> {
                            return std::make_unique<DANet>(std::move(backbone), config);
                          });
}

DANetOutput DANet::Forward(const at::Tensor& images, bool all_outputs) {
  TORCH_CHECK(images.dim() == 4, "DANet: images must be [N, 3, H, W], got ", images.sizes());
  const int64_t height = images.size(2);
  const int64_t width = images.size(3);
  const std::vector<at::Tensor> levels = backbone_->Forward(images);
  const DANetHeadOutput head = head_->forward(levels[3], all_outputs);
  DANetOutput out;
  out.fused = Upsample(head.fused, height, width);
  if (all_outputs) {
    out.position = Upsample(head.position, height, width);
    out.channel = Upsample(head.channel, height, width);
    if (auxlayer_) out.aux = Upsample(auxlayer_->forward(levels[2]), height, width);
  }
  return out;
}

std::map<std::string, at::Tensor> DANet::Losses(const core::Batch& batch) {
  const at::Tensor& images = batch.images;
  const at::Tensor labels =
      batch
          .Target(core::kSemanticTarget, {images.size(0), images.size(2), images.size(3)},
                  "DANet::Losses", "the dataset gives no label maps; use one that does")
          .to(images.device())
          .to(at::kLong);
  const DANetOutput out = Forward(images, /*all_outputs=*/true);
  std::map<std::string, at::Tensor> losses = {
      {"loss_fused", config_.fused_loss_weight * CrossEntropy(out.fused, labels)},
      {"loss_position", config_.position_loss_weight * CrossEntropy(out.position, labels)},
      {"loss_channel", config_.channel_loss_weight * CrossEntropy(out.channel, labels)}};
  if (out.aux.defined()) {
    losses["loss_aux"] = config_.aux_loss_weight * CrossEntropy(out.aux, labels);
  }
  return losses;
}

at::Tensor DANet::SegmentationLogits(const at::Tensor& images) {
  torch::NoGradGuard no_grad;
  return Forward(images, /*all_outputs=*/false).fused;
}

absl::Status DANet::EnableActivationCheckpointing(const std::vector<std::string>& submodules) {
  std::vector<std::string> in_backbone;
  bool position = false;
  bool channel = false;
  for (const std::string& name : submodules) {
    if (name.rfind("backbone.", 0) == 0) {
      in_backbone.push_back(name.substr(9));
    } else if (name == "head.sa") {
      position = true;
    } else if (name == "head.sc") {
      channel = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "activation checkpointing: DANet supports backbone stages ('backbone.layer4') and the "
          "attention modules ('head.sa', 'head.sc'), got '",
          name, "'"));
    }
  }
  if (!in_backbone.empty()) {
    VISION_RETURN_IF_ERROR(backbone_->EnableActivationCheckpointing(in_backbone));
  }
  if (position || channel) head_->CheckpointAttention(position, channel);
  return absl::OkStatus();
}

VISION_REGISTER_PLUGIN(core::ModelRegistry, "DANet", DANet, DANetOptions);

}  // namespace vision::models::danet
