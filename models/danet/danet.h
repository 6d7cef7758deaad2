// The DANet model plugin ("DANet", options vision.models.danet.DANetOptions): a segmentation
// network of Fu et al. (CVPR 2019).
//
// backbone (a dilated ResNet, any registered Backbone with four levels) -> DANetHead on the
// last level (danet_head.h), optionally an FcnHead on the third; every output is upsampled
// bilinearly to the input size with align_corners = true, as the authors' repository does
// (its _up_kwargs). Training: cross-entropy (ignore label 255) on each output, weighted.
// Inference: the fused output only (SegmentationLogits; Predict and multi-scale inference
// come from core::SegmentationModel).
#ifndef VISION_MODELS_DANET_DANET_H_
#define VISION_MODELS_DANET_DANET_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/backbone.h"
#include "core/batch.h"
#include "core/segmentation_model.h"
#include "core/task_metadata.h"
#include "models/danet/danet.pb.h"
#include "models/danet/danet_head.h"

namespace vision::models::danet {

// DANetOptions without protobuf and without the backbone (built from its own spec).
struct DANetConfig {
  int64_t num_classes = 0;
  int64_t head_channels = 0;  // 0: the backbone's last channels / 4.
  int64_t attention_reduction = 8;
  double dropout = 0.1;
  double fused_loss_weight = 1.0;
  double position_loss_weight = 1.0;
  double channel_loss_weight = 1.0;
  bool aux = false;
  double aux_loss_weight = 0.4;
};

// Maps the proto to the struct; InvalidArgument naming the field when a value is unusable.
absl::StatusOr<DANetConfig> ConfigFromProto(const DANetOptions& options);

// Logits [N, num_classes, H, W] at the input's size. position, channel and aux are undefined
// when not computed (inference; aux also when the config has none).
struct DANetOutput {
  at::Tensor fused;
  at::Tensor position;
  at::Tensor channel;
  at::Tensor aux;
};

class DANet : public core::SegmentationModel {
 public:
  // `backbone` must give four levels; the head reads the last, the auxiliary head the third.
  DANet(std::shared_ptr<core::Backbone> backbone, const DANetConfig& config);

  // Builds the backbone from options.backbone (required; core/backbone_builder.h).
  static absl::StatusOr<std::unique_ptr<DANet>> Create(const DANetOptions& options);

  // `all_outputs` false computes the fused logits only.
  DANetOutput Forward(const at::Tensor& images, bool all_outputs);

  // {"loss_fused", "loss_position", "loss_channel"} and, with aux, "loss_aux": cross-entropy
  // (mean over labelled pixels; 255 ignored) already multiplied by the configured weights, so
  // the engine should sum them with weight 1. Reads batch.targets["semantic"] ([N, H, W] at
  // the images' size); throws c10::Error naming a missing or misshapen target.
  std::map<std::string, at::Tensor> Losses(const core::Batch& batch) override;

  // The fused logits at the images' size, without autograd.
  at::Tensor SegmentationLogits(const at::Tensor& images) override;
  int64_t NumClasses() const override { return config_.num_classes; }

  std::optional<core::TaskRequirements> DataRequirements() const override {
    return core::TaskRequirements{core::AnnotationKind::kLabelMaps,
                                  static_cast<int>(config_.num_classes), "num_classes"};
  }

  // "backbone.<stage>" goes to the backbone (e.g. "backbone.layer4" for a ResNet);
  // "head.sa" and "head.sc" recompute the position / channel attention in backward.
  absl::Status EnableActivationCheckpointing(const std::vector<std::string>& submodules) override;

  const DANetConfig& config() const { return config_; }

 private:
  DANetConfig config_;
  std::shared_ptr<core::Backbone> backbone_;
  DANetHead head_{nullptr};
  FcnHead auxlayer_{nullptr};
};

}  // namespace vision::models::danet

#endif  // VISION_MODELS_DANET_DANET_H_
