// A synthetic instance-segmentation dataset in the COCO layout, for training and testing the
// instance pipeline (Mask R-CNN) without the real data.
//
// Each image has a cluttered background (gradient, colour blobs, thin lines, noise) and a few
// filled shapes of four classes with non-contiguous COCO category ids, so that readers must
// map ids to labels: circle (1), rectangle (3), triangle (7) and star (12), each in its own
// range of colours. Shapes may overlap; a shape drawn later hides what it covers, and no shape
// is placed where it would hide more than half of an earlier one. The annotations follow what
// COCO itself does:
//   - a wholly visible shape is a polygon (its drawn outline) with the polygon's extent as bbox;
//   - a partly hidden shape is a compressed RLE of its visible pixels, bbox and area from them;
//   - some images have a crowd region (iscrowd = 1): a cluster of small shapes of one class,
//     as an uncompressed RLE (like COCO's ground truth) or a compressed one;
//   - some images have no object at all.
//
// Determinism: as in synthetic_text.h, an image depends only on (options,
// ImageSeed(seed, split, index)); it draws from its own std::mt19937_64 through hand-written
// helpers, not std::uniform_*_distribution, and the JSON is written with a fixed key order and
// number formatting. The same seed gives byte-identical files with the same OpenCV and libjpeg
// builds.
#ifndef VISION_DATA_SYNTHETIC_COCO_SYNTHETIC_COCO_H_
#define VISION_DATA_SYNTHETIC_COCO_SYNTHETIC_COCO_H_

#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "absl/status/status.h"
#include "core/sample.h"

namespace vision::data::synthetic::coco {

enum class Split { kTrain, kVal };

struct SyntheticCategory {
  int64_t id;
  const char* name;
};

// The four classes, sorted by id: circle 1, rectangle 3, triangle 7, star 12.
const std::vector<SyntheticCategory>& SyntheticCategories();

struct SyntheticCocoImageOptions {
  int width = 256;
  int height = 256;
  // Shapes attempted per image (not empty); a shape that finds no place is dropped.
  int min_objects = 1;
  int max_objects = 8;
  // Fraction of the images without any object.
  double empty_fraction = 0.1;
  // Fraction of the other images that also get a crowd region.
  double crowd_fraction = 0.25;
  // A single-colour background without clutter or noise, so that tests can tell which
  // pixels the shapes changed.
  bool plain_background = false;
};

enum class MaskEncoding { kPolygon, kRleCounts, kRleString };

struct SyntheticObject {
  int64_t category_id = 0;
  bool is_crowd = false;
  MaskEncoding encoding = MaskEncoding::kPolygon;
  // The outline as drawn (kPolygon only).
  core::Polygon polygon;
  // HxW CV_8U, 1 on the visible pixels.
  cv::Mat mask;
  // COCO's bbox: the polygon's extent, or the visible pixels' bounding rectangle for RLE.
  cv::Rect2f box;
  // Visible pixels.
  int64_t area = 0;
};

struct SyntheticCocoImage {
  cv::Mat image;  // CV_8UC3, BGR
  std::vector<SyntheticObject> objects;
};

struct SyntheticCocoDatasetOptions {
  SyntheticCocoImageOptions image;
  int num_train = 1000;
  int num_val = 200;
  uint64_t seed = 1;
  int jpeg_quality = 90;
};

// Checks ranges: the image at least 64x64, object counts ordered and non-negative, ...
absl::Status ValidateOptions(const SyntheticCocoDatasetOptions& options);

// The seed of image `index` (0-based) of `split`: a hash, so that neighbouring seeds and
// indices give unrelated images and one image can be regenerated alone.
uint64_t ImageSeed(uint64_t seed, Split split, int64_t index);

// Renders one image. `options` must satisfy ValidateOptions.
SyntheticCocoImage RenderSyntheticCocoImage(const SyntheticCocoImageOptions& options,
                                            uint64_t image_seed);

// Writes <output_dir>/train2017/000000000001.jpg ... (image ids 1..num_train) with
// <output_dir>/annotations/instances_train2017.json, and val2017/ with
// instances_val2017.json. JPEG like COCO's own images: the masks come from the geometry, not
// from the pixels, so compression costs the annotations nothing and keeps the default data
// small. Refuses to write into an image directory that already holds files or over an
// existing JSON, so that no stale image survives a rerun.
absl::Status WriteSyntheticCocoDataset(const SyntheticCocoDatasetOptions& options,
                                       const std::string& output_dir);

}  // namespace vision::data::synthetic::coco

#endif  // VISION_DATA_SYNTHETIC_COCO_SYNTHETIC_COCO_H_
