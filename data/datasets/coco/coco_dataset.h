// The COCO object-instances dataset (https://cocodataset.org/#format-data): one JSON file of
// images, annotations and categories plus a directory of images, registered as "COCO".
//
// Each annotation becomes a core::ObjectInstance of its image's sample:
//   - bbox [x, y, width, height] -> box;
//   - segmentation as polygons ([[x1, y1, x2, y2, ...], ...]) -> polygons;
//   - segmentation as RLE, uncompressed ({"counts": [runs], "size": [h, w]}) or compressed
//     ({"counts": "string", "size": [h, w]}, see coco_rle.h) -> rle;
//   - an empty segmentation ([]) -> a box without a mask;
//   - category_id -> label, the category's index among the JSON's categories sorted by id,
//     so that the ids 1..90 of COCO (with gaps) become the labels 0..79;
//   - iscrowd -> is_crowd; id -> annotation_id.
// Coordinates may lie up to kMaxOutsideFraction of the image's size beyond its border and are
// clamped to it (COCO has boxes that end a fraction of a pixel past the border); farther ones
// are an error, since they belong to another image.
//
// Everything in the JSON is checked at Create, so that a bad annotation stops a run before
// training starts rather than hours into it; every message names the JSON file and the
// annotation (or image) id. Images are decoded at Load, where a missing or undecodable image
// or one whose size differs from the JSON's is an error naming the image's path.
#ifndef VISION_DATA_DATASETS_COCO_COCO_DATASET_H_
#define VISION_DATA_DATASETS_COCO_COCO_DATASET_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dataset.h"
#include "core/sample.h"
#include "data/datasets/coco/coco.pb.h"

namespace vision::data::datasets::coco {

// See the header comment; the same rule as ICDAR2015's.
inline constexpr double kMaxOutsideFraction = 0.5;

class CocoDataset : public core::Dataset {
 public:
  // Reads and checks the annotation file. Samples are the images sorted by id, without the
  // empty ones under EmptyImages::SKIP.
  static absl::StatusOr<std::unique_ptr<CocoDataset>> Create(const CocoOptions& options);

  int64_t Size() const override { return static_cast<int64_t>(images_.size()); }
  // Decodes the image (BGR) and copies its objects. Thread-safe: reads only.
  absl::StatusOr<core::Sample> Load(int64_t index) const override;
  std::string Describe() const override;
  // Object instances labelled 0..K-1 by the categories sorted by id; source ids are the
  // category ids.
  std::optional<core::DatasetMetadata> Metadata() const override;

  // Category names by label (categories sorted by id).
  const std::vector<std::string>& class_names() const { return class_names_; }
  // COCO category ids by label, to write predictions back in COCO's ids.
  const std::vector<int64_t>& category_ids() const { return category_ids_; }

  // One image of the JSON with its checked objects.
  struct Image {
    int64_t id = 0;
    std::string file_name;
    int width = 0;
    int height = 0;
    std::vector<core::ObjectInstance> objects;
  };

 private:
  CocoDataset(std::string annotation_file, std::string image_dir, std::string description,
              std::vector<std::string> class_names, std::vector<int64_t> category_ids,
              std::vector<Image> images);

  const std::string annotation_file_;
  const std::string image_dir_;
  // Options, and what was read and skipped.
  const std::string description_;
  const std::vector<std::string> class_names_;
  const std::vector<int64_t> category_ids_;
  const std::vector<Image> images_;
};

}  // namespace vision::data::datasets::coco

#endif  // VISION_DATA_DATASETS_COCO_COCO_DATASET_H_
