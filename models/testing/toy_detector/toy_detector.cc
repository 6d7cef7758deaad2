#include "models/testing/toy_detector/toy_detector.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <opencv2/imgproc.hpp>
#include <torch/nn/functional/loss.h>

#include "absl/strings/str_cat.h"
#include "core/batch.h"
#include "core/instance_targets.h"
#include "core/run_length_mask.h"

namespace vision::models::testing {

namespace F = torch::nn::functional;

absl::StatusOr<std::unique_ptr<ToyDetector>> ToyDetector::Create(const ToyDetectorOptions& options) {
  if (options.num_classes() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 1, got ", options.num_classes()));
  }
  return std::unique_ptr<ToyDetector>(new ToyDetector(options));
}

ToyDetector::ToyDetector(const ToyDetectorOptions& options) : num_classes_(options.num_classes()) {
  features_ = register_module(
      "features", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, options.width(), 3).padding(1)));
  classifier_ = register_module(
      "classifier",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(options.width(), 1 + options.num_classes(), 1)));
}

std::shared_ptr<const core::TargetGenerator> ToyDetector::MakeTargetGenerator() const {
  return std::make_shared<core::InstanceTargetGenerator>(core::InstanceTargetOptions());
}

at::Tensor ToyDetector::Logits(const at::Tensor& images) {
  return classifier_->forward(at::relu(features_->forward(images)));
}

at::Tensor ToyDetector::PixelTargets(const core::Batch& batch) {
  TORCH_CHECK(batch.instances.size() == batch.samples.size(),
              "ToyDetector needs per-image instance targets for every image (Batch::instances)");
  const int64_t n = batch.images.size(0);
  at::Tensor target =
      at::full({n, batch.images.size(2), batch.images.size(3)}, core::kIgnoreLabel,
               batch.images.options().dtype(at::kLong));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t height = batch.image_sizes[i][0].item<int64_t>();
    const int64_t width = batch.image_sizes[i][1].item<int64_t>();
    at::Tensor own = target[i].slice(0, 0, height).slice(1, 0, width);
    own.zero_();
    const at::Tensor& masks = batch.instances[i].at("masks");
    const at::Tensor& labels = batch.instances[i].at("labels");
    for (int64_t k = 0; k < masks.size(0); ++k) {
      own.masked_fill_(masks[k].to(at::kBool), labels[k] + 1);
    }
  }
  return target;
}

std::map<std::string, at::Tensor> ToyDetector::Losses(const core::Batch& batch) {
  const at::Tensor loss = F::cross_entropy(
      Logits(batch.images), PixelTargets(batch),
      F::CrossEntropyFuncOptions().ignore_index(core::kIgnoreLabel));
  return {{"pixel_ce", loss}};
}

std::vector<core::Sample> ToyDetector::Predict(const core::Batch& batch) {
  const at::Tensor probabilities = at::softmax(Logits(batch.images), 1).to(at::kFloat).cpu();
  const at::Tensor classes = probabilities.argmax(1).to(at::kByte).contiguous();
  std::vector<core::Sample> predictions(batch.samples.size());
  for (size_t i = 0; i < predictions.size(); ++i) {
    const core::Sample& sample = batch.samples[i];
    predictions[i].id = sample.id;
    predictions[i].image_path = sample.image_path;
    // The original image's region of the batch, mapped back to its pixels (labels and masks
    // nearest-neighbour).
    const int height = static_cast<int>(std::min<int64_t>(
        batch.image_sizes[i][0].item<int64_t>(), std::lround(sample.original_height * sample.scale_y)));
    const int width = static_cast<int>(std::min<int64_t>(
        batch.image_sizes[i][1].item<int64_t>(), std::lround(sample.original_width * sample.scale_x)));
    const at::Tensor own = classes[i].slice(0, 0, height).slice(1, 0, width).contiguous();
    cv::Mat labels;
    cv::resize(cv::Mat(height, width, CV_8U, own.data_ptr()), labels,
               cv::Size(sample.original_width, sample.original_height), 0, 0, cv::INTER_NEAREST);
    const at::Tensor own_probabilities = probabilities[i].slice(1, 0, height).slice(2, 0, width);
    for (int c = 1; c < probabilities.size(1); ++c) {
      cv::Mat regions, stats, centroids;
      const int count = cv::connectedComponentsWithStats(labels == c, regions, stats, centroids);
      for (int r = 1; r < count; ++r) {
        core::ObjectInstance object;
        object.label = c - 1;
        object.box = cv::Rect2f(stats.at<int>(r, cv::CC_STAT_LEFT), stats.at<int>(r, cv::CC_STAT_TOP),
                                stats.at<int>(r, cv::CC_STAT_WIDTH), stats.at<int>(r, cv::CC_STAT_HEIGHT));
        cv::Mat mask = regions == r;
        mask /= 255;
        object.rle = core::EncodeRle(mask);
        // The class's mean probability over the region, in the model's pixels.
        const at::Tensor p = own_probabilities[c];
        const at::Tensor in_region = (own == c);
        object.score = p.masked_select(in_region).mean().item<float>();
        predictions[i].objects.push_back(std::move(object));
      }
    }
  }
  return predictions;
}

VISION_REGISTER_PLUGIN(core::ModelRegistry, "ToyDetector", ToyDetector, ToyDetectorOptions);

}  // namespace vision::models::testing
