#include "core/segmentation_model.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <opencv2/core.hpp>

#include "absl/strings/str_cat.h"

namespace vision::core {

std::vector<Sample> SegmentationModel::Predict(const Batch& batch) {
  return LabelMapsFromScores(batch, SegmentationLogits(batch.images));
}

absl::StatusOr<SegmentationModel*> SegmentationModelForInference(Model* model) {
  auto* segmentation = dynamic_cast<SegmentationModel*>(model);
  if (segmentation != nullptr) return segmentation;
  return absl::InvalidArgumentError(absl::StrCat(
      "evaluation.segmentation_inference is set, but the model (",
      model == nullptr ? std::string("none") : model->name(),
      ") is not a semantic segmentation model (core::SegmentationModel): multi-scale, flip and "
      "sliding-window inference need its per-pixel class scores. Remove "
      "evaluation.segmentation_inference from the config, or evaluate a model that implements "
      "core::SegmentationModel"));
}

std::vector<int64_t> OriginalRegion(const Batch& batch, int64_t i) {
  const Sample& sample = batch.samples[static_cast<size_t>(i)];
  const int64_t height = std::min<int64_t>(batch.image_sizes[i][0].item<int64_t>(),
                                           std::lround(sample.original_height * sample.scale_y));
  const int64_t width = std::min<int64_t>(batch.image_sizes[i][1].item<int64_t>(),
                                          std::lround(sample.original_width * sample.scale_x));
  return {std::max<int64_t>(height, 1), std::max<int64_t>(width, 1)};
}

std::vector<Sample> LabelMapsFromScores(const Batch& batch, const at::Tensor& scores) {
  TORCH_CHECK(scores.dim() == 4 && scores.size(0) == static_cast<int64_t>(batch.samples.size()),
              "LabelMapsFromScores: scores must be [N, C, H, W] for the batch's ", batch.samples.size(),
              " images, got ", scores.sizes());
  std::vector<Sample> predictions(batch.samples.size());
  for (size_t i = 0; i < predictions.size(); ++i) {
    const std::vector<int64_t> region = OriginalRegion(batch, static_cast<int64_t>(i));
    predictions[i] = LabelMapFromScores(
        batch.samples[i],
        scores[static_cast<int64_t>(i)].slice(1, 0, region[0]).slice(2, 0, region[1]));
  }
  return predictions;
}

Sample LabelMapFromScores(const Sample& sample, const at::Tensor& scores) {
  TORCH_CHECK(scores.dim() == 3, "LabelMapFromScores: scores must be [C, H, W], got ",
              scores.sizes());
  const at::Tensor own = scores.unsqueeze(0).to(at::kFloat);
  const int64_t out_h = sample.original_height > 0 ? sample.original_height : scores.size(1);
  const int64_t out_w = sample.original_width > 0 ? sample.original_width : scores.size(2);
  at::Tensor resized = own;
  if (out_h != scores.size(1) || out_w != scores.size(2)) {
    resized = at::upsample_bilinear2d(own, {out_h, out_w}, /*align_corners=*/false);
  }
  const at::Tensor labels = resized[0].argmax(0).to(at::kByte).cpu().contiguous();
  Sample prediction;
  prediction.id = sample.id;
  prediction.image_path = sample.image_path;
  prediction.original_height = static_cast<int>(out_h);
  prediction.original_width = static_cast<int>(out_w);
  prediction.semantic =
      cv::Mat(static_cast<int>(out_h), static_cast<int>(out_w), CV_8U, labels.data_ptr()).clone();
  return prediction;
}

}  // namespace vision::core
