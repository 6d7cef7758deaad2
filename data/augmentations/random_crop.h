// The window search behind "RandomCrop", exposed so tests can check its guarantees.
//
// A window edge "cuts" an instance when it passes through the instance's bounding box. The
// search first collects, per axis, every window position whose two edges lie in gaps between
// instances' projections on that axis (as EAST's and DBNet's random crops do): a window built
// from such positions on both axes cuts nothing. An axis without such positions falls back to
// uniform positions. Up to `max_tries` windows are drawn; the first one that cuts nothing and
// wholly contains a wanted instance (or cuts nothing, when there is nothing wanted) is taken,
// otherwise the drawn window that cuts the fewest instances, preferring ones holding a wanted
// instance. So whenever a cut-free window exists along both axes' gaps, the chosen one is
// cut-free.
#ifndef VISION_DATA_AUGMENTATIONS_RANDOM_CROP_H_
#define VISION_DATA_AUGMENTATIONS_RANDOM_CROP_H_

#include <random>
#include <vector>

#include <opencv2/core.hpp>

#include "core/sample.h"

namespace vision::data::augmentations {

struct CropExtent {
  cv::Rect2f box;
  // A non-ignored instance, which a useful window should contain.
  bool wanted = true;
};

// Bounding boxes of every text (ignored ones are not wanted but must not be cut either) and
// every object.
std::vector<CropExtent> CropExtents(const core::Sample& sample);

// The top-left corner of a `window` (no larger than `image`) inside `image`.
cv::Point ChooseCropOrigin(cv::Size image, cv::Size window,
                           const std::vector<CropExtent>& extents, int max_tries,
                           std::mt19937_64& rng);

}  // namespace vision::data::augmentations

#endif  // VISION_DATA_AUGMENTATIONS_RANDOM_CROP_H_
