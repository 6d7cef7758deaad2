// Assigns each prediction (anchor or proposal) to the ground-truth box it overlaps most, with
// the two-threshold rule of Faster R-CNN (Ren et al., 2015) and, optionally, the RPN's
// low-quality matches (every ground truth keeps the predictions it overlaps most, even below
// the high threshold), as torchvision's and detectron2's Matcher.
#ifndef VISION_MODELS_MASK_RCNN_MATCHER_H_
#define VISION_MODELS_MASK_RCNN_MATCHER_H_

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace vision::models::mask_rcnn {

class Matcher {
 public:
  // Match values for predictions that get no ground truth.
  static constexpr int64_t kBelowLowThreshold = -1;
  static constexpr int64_t kBetweenThresholds = -2;

  // low_threshold <= high_threshold. Quality >= high: matched; < low: kBelowLowThreshold;
  // in between: kBetweenThresholds (ignored by the losses).
  Matcher(double high_threshold, double low_threshold, bool allow_low_quality_matches);

  // match_quality: [G, P] (IoU of G >= 1 ground-truth boxes with P predictions).
  // Returns [P] int64: the matched ground truth's index in [0, G), or one of the two codes.
  // A prediction's best ground truth is the lowest index among equal qualities. With low-quality
  // matches, every prediction whose quality with some ground truth equals that ground truth's
  // highest (ties included) gets back its best ground truth, which may be another one; as in
  // torchvision, a ground truth that overlaps nothing (highest quality 0) thus restores every
  // prediction. Throws c10::Error when G or P is 0, as torchvision raises.
  at::Tensor Match(const at::Tensor& match_quality) const;

 private:
  double high_threshold_;
  double low_threshold_;
  bool allow_low_quality_matches_;
};

}  // namespace vision::models::mask_rcnn

#endif  // VISION_MODELS_MASK_RCNN_MATCHER_H_
