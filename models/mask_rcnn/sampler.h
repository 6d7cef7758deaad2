// Samples a fixed number of training examples per image with at most a given fraction of
// positives (Faster R-CNN's minibatch sampling; torchvision's
// BalancedPositiveNegativeSampler): all positives up to the quota, negatives fill the rest.
#ifndef VISION_MODELS_MASK_RCNN_SAMPLER_H_
#define VISION_MODELS_MASK_RCNN_SAMPLER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace vision::models::mask_rcnn {

class BalancedSampler {
 public:
  BalancedSampler(int64_t batch_size_per_image, double positive_fraction);

  // labels: per image, [P] int64 with >= 1 positive, 0 negative, < 0 ignored. Returns per
  // image {positive, negative}: [P] bool masks of the chosen examples. Which positives and
  // negatives are chosen when there are more than the quota is drawn with at::randperm from
  // the default generator (seeded by the engine); when every candidate fits the quota all are
  // taken, so the result is deterministic. The draws are torchvision's (one randperm of the
  // positives, then one of the negatives, per image, on the labels' device), so the same seed
  // picks the same examples. The positive quota is int(batch_size_per_image *
  // positive_fraction), truncated as in Python.
  std::vector<std::pair<at::Tensor, at::Tensor>> Sample(const std::vector<at::Tensor>& labels) const;

 private:
  int64_t batch_size_per_image_;
  double positive_fraction_;
};

}  // namespace vision::models::mask_rcnn

#endif  // VISION_MODELS_MASK_RCNN_SAMPLER_H_
