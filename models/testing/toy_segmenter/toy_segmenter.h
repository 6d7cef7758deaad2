// "ToySegmenter": two convolutions to per-pixel class logits, cross-entropy on the batch's
// "semantic" label maps (ignore label skipped). A core::SegmentationModel: predictions (label
// maps at the original image size) come from the shared single-scale Predict or from the
// engine's multi-scale inference. A test plugin for the label-map path of the core contract.
#ifndef VISION_MODELS_TESTING_TOY_SEGMENTER_TOY_SEGMENTER_H_
#define VISION_MODELS_TESTING_TOY_SEGMENTER_TOY_SEGMENTER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/modules/conv.h>

#include "absl/status/statusor.h"
#include "core/segmentation_model.h"
#include "models/testing/toy_segmenter/toy_segmenter.pb.h"

namespace vision::models::testing {

class ToySegmenter : public core::SegmentationModel {
 public:
  static absl::StatusOr<std::unique_ptr<ToySegmenter>> Create(const ToySegmenterOptions& options);

  std::map<std::string, at::Tensor> Losses(const core::Batch& batch) override;
  std::optional<core::TaskRequirements> DataRequirements() const override {
    return core::TaskRequirements{core::AnnotationKind::kLabelMaps, num_classes_, "num_classes"};
  }

  // [N, num_classes, H, W] at the images' size (3x3 convolution padded by 1, then 1x1).
  at::Tensor SegmentationLogits(const at::Tensor& images) override;
  int64_t NumClasses() const override { return num_classes_; }

 private:
  explicit ToySegmenter(const ToySegmenterOptions& options);

  int num_classes_;
  torch::nn::Conv2d features_{nullptr};
  torch::nn::Conv2d classifier_{nullptr};
};

}  // namespace vision::models::testing

#endif  // VISION_MODELS_TESTING_TOY_SEGMENTER_TOY_SEGMENTER_H_
