// A COCO instances file shaped like instances_train2017.json, without any image: for the
// loading benchmark (benchmarks/coco_load.sh) and the COCO reader's scale tests.
//
// Shaped like the real file where a reader's cost lies: 118,287 images (ids increasing with
// gaps, 640 pixels on the long side), about 860,000 annotations (7.3 per image, about 1% of
// the images without any), the 80 categories under COCO's ids (1..90 with gaps, "person"
// about a third of the objects), polygons of 4 to 80 points with two decimals (a tenth of
// the objects in two or three parts), and about 1% crowd regions as uncompressed RLE ({"counts":
// [runs], "size": [h, w]}, as COCO writes them); optionally some of those as compressed
// strings. Keys come in the real file's order (segmentation first, id last), so a reader
// cannot rely on image_id preceding the coordinates.
//
// Deterministic: the same options give a byte-identical file (SeededRandom, fixed number
// formatting). Written to a temporary file and renamed, so a stopped run leaves no half file.
#ifndef VISION_DATA_SYNTHETIC_COCO_COCO_SCALE_H_
#define VISION_DATA_SYNTHETIC_COCO_COCO_SCALE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace vision::data::synthetic::coco {

struct CocoScaleOptions {
  int64_t num_images = 118287;
  // Mean annotations per image (COCO train2017: 860,001 / 118,287).
  double annotations_per_image = 7.27;
  double empty_image_fraction = 0.0086;
  double crowd_fraction = 0.01;
  // Fraction of the crowd regions written as compressed strings instead of run lists.
  double compressed_rle_fraction = 0.0;
  uint64_t seed = 1;
};

struct CocoScaleSummary {
  int64_t images = 0;
  int64_t annotations = 0;
  int64_t crowd = 0;
  int64_t polygons = 0;
  int64_t points = 0;
  int64_t bytes = 0;
};

// Writes the file at `path` (its directory must exist); fails on an existing file.
absl::Status WriteCocoScaleAnnotations(const CocoScaleOptions& options, const std::string& path,
                                       CocoScaleSummary* summary = nullptr);

}  // namespace vision::data::synthetic::coco

#endif  // VISION_DATA_SYNTHETIC_COCO_COCO_SCALE_H_
