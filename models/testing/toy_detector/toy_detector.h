// "ToyDetector": two convolutions to per-pixel logits over background and the object classes,
// trained with cross-entropy against the objects' masks painted with their labels (from the
// loader's per-image instance targets: boxes, labels, masks), and predicting one object per
// connected region of a class, with its box, score and RLE mask in original-image pixels. A
// test plugin for the instance path of the core contract.
#ifndef VISION_MODELS_TESTING_TOY_DETECTOR_TOY_DETECTOR_H_
#define VISION_MODELS_TESTING_TOY_DETECTOR_TOY_DETECTOR_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/modules/conv.h>

#include "absl/status/statusor.h"
#include "core/model.h"
#include "models/testing/toy_detector/toy_detector.pb.h"

namespace vision::models::testing {

class ToyDetector : public core::Model {
 public:
  static absl::StatusOr<std::unique_ptr<ToyDetector>> Create(const ToyDetectorOptions& options);

  std::map<std::string, at::Tensor> Losses(const core::Batch& batch) override;
  std::vector<core::Sample> Predict(const core::Batch& batch) override;
  std::optional<core::TaskRequirements> DataRequirements() const override {
    return core::TaskRequirements{core::AnnotationKind::kObjectInstances, num_classes_, "num_classes"};
  }
  // Boxes, labels and masks made in the loader's workers (core/instance_targets.h).
  std::shared_ptr<const core::TargetGenerator> MakeTargetGenerator() const override;

  // [N, 1 + num_classes, H, W].
  at::Tensor Logits(const at::Tensor& images);
  // The per-pixel training target of a batch: background 0, object pixels 1 + label, pixels
  // outside each image (batch padding) ignored.
  static at::Tensor PixelTargets(const core::Batch& batch);

 private:
  explicit ToyDetector(const ToyDetectorOptions& options);

  int num_classes_;
  torch::nn::Conv2d features_{nullptr};
  torch::nn::Conv2d classifier_{nullptr};
};

}  // namespace vision::models::testing

#endif  // VISION_MODELS_TESTING_TOY_DETECTOR_TOY_DETECTOR_H_
