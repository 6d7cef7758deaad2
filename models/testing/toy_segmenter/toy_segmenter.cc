#include "models/testing/toy_segmenter/toy_segmenter.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>

#include "absl/strings/str_cat.h"
#include "core/batch.h"

namespace vision::models::testing {

namespace F = torch::nn::functional;

absl::StatusOr<std::unique_ptr<ToySegmenter>> ToySegmenter::Create(const ToySegmenterOptions& options) {
  if (options.num_classes() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 1, got ", options.num_classes()));
  }
  return std::unique_ptr<ToySegmenter>(new ToySegmenter(options));
}

ToySegmenter::ToySegmenter(const ToySegmenterOptions& options) : num_classes_(options.num_classes()) {
  features_ = register_module(
      "features", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, options.width(), 3).padding(1)));
  classifier_ = register_module(
      "classifier", torch::nn::Conv2d(torch::nn::Conv2dOptions(options.width(), options.num_classes(), 1)));
}

at::Tensor ToySegmenter::SegmentationLogits(const at::Tensor& images) {
  return classifier_->forward(at::relu(features_->forward(images)));
}

std::map<std::string, at::Tensor> ToySegmenter::Losses(const core::Batch& batch) {
  const at::Tensor& images = batch.images;
  const at::Tensor& labels =
      batch.Target(core::kSemanticTarget, {images.size(0), images.size(2), images.size(3)},
                   "ToySegmenter::Losses", "the dataset gives no label maps; use one that does");
  // Padding carries the ignore label already, so it counts for nothing.
  const at::Tensor loss = F::cross_entropy(
      SegmentationLogits(images), labels.to(at::kLong),
      F::CrossEntropyFuncOptions().ignore_index(core::kIgnoreLabel));
  return {{"ce", loss}};
}

VISION_REGISTER_PLUGIN(core::ModelRegistry, "ToySegmenter", ToySegmenter, ToySegmenterOptions);

}  // namespace vision::models::testing
