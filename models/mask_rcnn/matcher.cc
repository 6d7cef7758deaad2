#include "models/mask_rcnn/matcher.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace vision::models::mask_rcnn {

Matcher::Matcher(double high_threshold, double low_threshold, bool allow_low_quality_matches)
    : high_threshold_(high_threshold),
      low_threshold_(low_threshold),
      allow_low_quality_matches_(allow_low_quality_matches) {
  TORCH_CHECK(low_threshold <= high_threshold, "Matcher: low_threshold (", low_threshold,
              ") must be <= high_threshold (", high_threshold, ")");
}

at::Tensor Matcher::Match(const at::Tensor& match_quality) const {
  TORCH_CHECK(match_quality.dim() == 2, "Matcher: match_quality must be [G, P], got ",
              match_quality.sizes());
  TORCH_CHECK(match_quality.size(0) > 0,
              "Matcher: no ground-truth boxes (match_quality is [0, P]); an image without ground "
              "truth has no matches to compute");
  TORCH_CHECK(match_quality.size(1) > 0, "Matcher: no predictions (match_quality is [G, 0])");
  // For every prediction its best ground truth; ties go to the lowest index (max's choice, as in
  // torchvision, which calls the same kernel).
  auto [best_quality, best_gt] = match_quality.max(0);
  // The thresholds are compared in match_quality's dtype (a Scalar operand is rounded to it, as
  // Python's float is in torchvision).
  const at::Tensor below = best_quality < low_threshold_;
  const at::Tensor between = (best_quality >= low_threshold_) & (best_quality < high_threshold_);
  at::Tensor matches = best_gt.masked_fill(below, kBelowLowThreshold)
                           .masked_fill(between, kBetweenThresholds);
  if (allow_low_quality_matches_) {
    // Every prediction that reaches some ground truth's highest quality (ties included) gets
    // back its pre-threshold match, which is the ground truth it overlaps most, not necessarily
    // the one whose maximum it reaches.
    const at::Tensor highest_per_gt = std::get<0>(match_quality.max(1, /*keepdim=*/true));
    const at::Tensor restore = (match_quality == highest_per_gt).any(0);
    matches = at::where(restore, best_gt, matches);
  }
  return matches;
}

}  // namespace vision::models::mask_rcnn
