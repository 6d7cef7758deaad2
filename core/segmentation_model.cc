#include "core/segmentation_model.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <opencv2/core.hpp>

namespace vision::core {

std::vector<Sample> SegmentationModel::Predict(const Batch& batch) {
  return LabelMapsFromScores(batch, SegmentationLogits(batch.images));
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
    const Sample& sample = batch.samples[i];
    const std::vector<int64_t> region = OriginalRegion(batch, static_cast<int64_t>(i));
    const at::Tensor own = scores[static_cast<int64_t>(i)]
                               .slice(1, 0, region[0])
                               .slice(2, 0, region[1])
                               .unsqueeze(0)
                               .to(at::kFloat);
    const int64_t out_h = sample.original_height > 0 ? sample.original_height : region[0];
    const int64_t out_w = sample.original_width > 0 ? sample.original_width : region[1];
    at::Tensor resized = own;
    if (out_h != region[0] || out_w != region[1]) {
      resized = at::upsample_bilinear2d(own, {out_h, out_w}, /*align_corners=*/false);
    }
    const at::Tensor labels = resized[0].argmax(0).to(at::kByte).cpu().contiguous();
    predictions[i].id = sample.id;
    predictions[i].image_path = sample.image_path;
    predictions[i].original_height = static_cast<int>(out_h);
    predictions[i].original_width = static_cast<int>(out_w);
    predictions[i].semantic =
        cv::Mat(static_cast<int>(out_h), static_cast<int>(out_w), CV_8U, labels.data_ptr()).clone();
  }
  return predictions;
}

}  // namespace vision::core
