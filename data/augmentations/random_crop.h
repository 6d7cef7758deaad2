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

#include <opencv2/core.hpp>
#include <random>
#include <vector>

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
cv::Point ChooseCropOrigin(cv::Size image, cv::Size window, const std::vector<CropExtent>& extents,
                           int max_tries, std::mt19937_64& rng);

// The window of RandomCrop's min_side_ratio mode, as MhLiao/DB's RandomCropData.crop_area draws
// it (data/processes/random_crop_data.py), draw for draw in distribution:
//  - only wanted (non-ignored) extents count; each blocks the rows and columns
//    [round(min), round(max)) of its bounding box (rounding half to even, as numpy);
//  - the free positions of an axis form runs; the reference's split_regions keeps every run but
//    the last. With more than one kept run, the two edges are one random position from each of
//    two runs drawn with replacement; otherwise two positions drawn with replacement from all
//    free positions;
//  - a window with a side under min_side_ratio of the image's is redrawn, as is one that no
//    wanted extent reaches (a box touching an edge counts);
//  - no free row or column, or no acceptable window in max_tries draws: the whole image.
// The window's sides are (max - min) positions, so a window never includes its last row/column.
cv::Rect ChooseScaledCropWindow(cv::Size image, const std::vector<CropExtent>& extents,
                                float min_side_ratio, int max_tries, std::mt19937_64& rng);

}  // namespace vision::data::augmentations

#endif  // VISION_DATA_AUGMENTATIONS_RANDOM_CROP_H_
