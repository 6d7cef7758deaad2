#include "models/testing/toy_segmenter/toy_segmenter.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <opencv2/imgproc.hpp>
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

at::Tensor ToySegmenter::Logits(const at::Tensor& images) {
  return classifier_->forward(at::relu(features_->forward(images)));
}

std::map<std::string, at::Tensor> ToySegmenter::Losses(const core::Batch& batch) {
  auto it = batch.targets.find("semantic");
  TORCH_CHECK(it != batch.targets.end(),
              "ToySegmenter needs label maps: the dataset gives none (Batch::targets[\"semantic\"])");
  // Padding carries the ignore label already, so it counts for nothing.
  const at::Tensor loss = F::cross_entropy(
      Logits(batch.images), it->second.to(at::kLong),
      F::CrossEntropyFuncOptions().ignore_index(core::kIgnoreLabel));
  return {{"ce", loss}};
}

std::vector<core::Sample> ToySegmenter::Predict(const core::Batch& batch) {
  const at::Tensor labels = Logits(batch.images).argmax(1).to(at::kByte).cpu().contiguous();
  std::vector<core::Sample> predictions(batch.samples.size());
  for (size_t i = 0; i < predictions.size(); ++i) {
    const core::Sample& sample = batch.samples[i];
    // The original image's region in the batch: its size times the augmentations' scale
    // (crops and pads keep the origin), within the image's own size before batch padding.
    const int64_t height = std::min<int64_t>(batch.image_sizes[i][0].item<int64_t>(),
                                             std::lround(sample.original_height * sample.scale_y));
    const int64_t width = std::min<int64_t>(batch.image_sizes[i][1].item<int64_t>(),
                                            std::lround(sample.original_width * sample.scale_x));
    const at::Tensor own = labels[i].slice(0, 0, height).slice(1, 0, width).contiguous();
    const cv::Mat current(static_cast<int>(height), static_cast<int>(width), CV_8U, own.data_ptr());
    predictions[i].id = sample.id;
    predictions[i].image_path = sample.image_path;
    // Back to the original image's pixels (labels are not interpolated).
    cv::resize(current, predictions[i].semantic,
               cv::Size(sample.original_width, sample.original_height), 0, 0, cv::INTER_NEAREST);
  }
  return predictions;
}

VISION_REGISTER_PLUGIN(core::ModelRegistry, "ToySegmenter", ToySegmenter, ToySegmenterOptions);

}  // namespace vision::models::testing
