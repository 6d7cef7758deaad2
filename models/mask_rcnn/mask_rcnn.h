// The "MaskRCNN" model plugin: a ResNet-FPN backbone (P2..P5 plus P6 by max pooling), the
// region proposal network (rpn.h) and the box and mask heads (roi_heads.h), assembled as
// torchvision's maskrcnn_resnet50_fpn so that its state dicts load (ImportTorchvisionMaskRcnn)
// and, given the same weights and inputs, it computes the same losses and detections
// (mask_rcnn_parity_test).
//
// Data: object instances (COCO) through core::InstanceTargetGenerator (boxes, labels, masks
// rasterised in the loader's threads; crowd regions left out, as detectron2 and torchvision's
// reference scripts train). Dataset labels 0..K-1 are the model's classes 1..K; 0 is the
// background. Predict returns each image's detections in original pixels with their masks
// pasted at the original size and run-length encoded.
#ifndef VISION_MODELS_MASK_RCNN_MASK_RCNN_H_
#define VISION_MODELS_MASK_RCNN_MASK_RCNN_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "core/backbone.h"
#include "core/batch.h"
#include "core/model.h"
#include "models/backbones/torchvision_import.h"
#include "models/mask_rcnn/mask_rcnn.pb.h"
#include "models/mask_rcnn/roi_heads.h"
#include "models/mask_rcnn/rpn.h"
#include "models/necks/fpn.h"

namespace vision::models::mask_rcnn {

struct MaskRcnnConfig {
  // Dataset classes (without background).
  int64_t num_classes = 0;
  int64_t fpn_channels = 256;
  RpnOptions rpn;
  RoiHeadsOptions roi_heads;
  double mask_threshold = 0.5;
};

// Validates the options (each error names its field) and maps them to the modules' options.
absl::StatusOr<MaskRcnnConfig> ConfigFromProto(const MaskRCNNOptions& options);

// The backbone and its FPN under one name, as torchvision's BackboneWithFPN ("backbone.body",
// "backbone.fpn").
class BackboneWithFpnImpl : public torch::nn::Module {
 public:
  BackboneWithFpnImpl(std::shared_ptr<core::Backbone> body, int64_t fpn_channels);
  // P2..P6.
  std::vector<at::Tensor> forward(const at::Tensor& images);

  std::shared_ptr<core::Backbone> body;
  necks::Fpn fpn{nullptr};
};
TORCH_MODULE(BackboneWithFpn);

// The backbone of torchvision's maskrcnn_resnet50_fpn, which its weight files hold: "ResNet50"
// with frozen BatchNorm and the stem and layer1 frozen (trainable_layers = 3).
core::PluginSpec TorchvisionBackbone();

class MaskRCNN : public core::Model {
 public:
  static absl::StatusOr<std::unique_ptr<MaskRCNN>> Create(const MaskRCNNOptions& options);
  MaskRCNN(std::shared_ptr<core::Backbone> body, const MaskRcnnConfig& config);

  // "loss_objectness", "loss_rpn_box_reg", "loss_classifier", "loss_box_reg", "loss_mask".
  std::map<std::string, at::Tensor> Losses(const core::Batch& batch) override;
  std::vector<core::Sample> Predict(const core::Batch& batch) override;
  std::shared_ptr<const core::TargetGenerator> MakeTargetGenerator() const override;
  std::optional<core::TaskRequirements> DataRequirements() const override;
  std::string ImportedWeights() const override { return imported_weights_; }
  // "backbone.body.layer1".."backbone.body.layer4".
  absl::Status EnableActivationCheckpointing(const std::vector<std::string>& submodules) override;

  // Detections in batch pixels (before mapping to the original images), for tests.
  std::vector<Detections> Detect(const at::Tensor& images,
                                 const std::vector<std::pair<int64_t, int64_t>>& image_sizes);
  // Losses from explicit targets (labels 1..K), for tests; Losses(batch) calls it.
  std::map<std::string, at::Tensor> LossesFor(
      const at::Tensor& images, const std::vector<std::pair<int64_t, int64_t>>& image_sizes,
      const std::vector<InstanceTargets>& targets);

  const MaskRcnnConfig& config() const { return config_; }

 private:
  MaskRcnnConfig config_;
  BackboneWithFpn backbone_{nullptr};
  RegionProposalNetwork rpn_{nullptr};
  RoiHeads roi_heads_{nullptr};
  // Set by Create when MaskRCNNOptions.weights_path imported a torchvision state dict.
  std::string imported_weights_;
};

// torchvision's MaskRCNN state-dict key -> this model's ("backbone.fpn.inner_blocks.0.0.weight"
// -> "backbone.fpn.lateral0.weight", "rpn.head.conv.0.0.weight" -> "rpn.head.conv.weight",
// "roi_heads.mask_head.0.0.weight" -> "roi_heads.mask_head.mask_fcn1.weight"); other keys are
// unchanged.
std::string FromTorchvisionKey(const std::string& key);

// Loads a torchvision MaskRCNN state dict (file or already read) into `model`. The predictor
// layers are left at their initial values, and listed in the report's `added`, when their
// shapes differ (another number of classes); with `strict`, any other problem is an error and
// the model is unchanged.
absl::StatusOr<backbones::ImportReport> ImportTorchvisionMaskRcnn(const backbones::StateDict& state,
                                                                  MaskRCNN& model, bool strict,
                                                                  const std::string& source);

}  // namespace vision::models::mask_rcnn

#endif  // VISION_MODELS_MASK_RCNN_MASK_RCNN_H_
