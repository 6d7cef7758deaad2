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
// clamped to it for training (COCO has boxes that end a fraction of a pixel past the border);
// farther ones are an error, since they belong to another image. Evaluation sees the file's
// own annotations instead (GroundTruth(): unclamped, double coordinates, "area"), as
// pycocotools does.
//
// Everything in the JSON is checked at Create, so that a bad annotation stops a run before
// training starts rather than hours into it; every message names the JSON file and the
// annotation (or image) id. The annotations are kept in compact form (coco_index.h), from a
// cache shared by the processes of a node when the file is large (CocoOptions.cache), and
// turned into ObjectInstances per sample at Load. Images are decoded at Load, where a missing or
// undecodable image or one whose size differs from the JSON's is an error naming the image's path.
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
#include "data/datasets/coco/coco_index.h"

namespace vision::data::datasets::coco {

class CocoDataset : public core::Dataset {
 public:
  // Reads and checks the annotation file. Samples are the images sorted by id, without the
  // empty ones under EmptyImages::SKIP.
  static absl::StatusOr<std::unique_ptr<CocoDataset>> Create(const CocoOptions& options);

  int64_t Size() const override { return static_cast<int64_t>(samples_.size()); }
  // Decodes the image (BGR) and copies its objects. Thread-safe: reads only.
  absl::StatusOr<core::Sample> Load(int64_t index) const override;
  // What COCOeval scores, as pycocotools reads the file: every annotation of the image (crowd
  // regions too, whatever keep_crowd says), boxes and polygons unclamped, the file's "area",
  // masks as RLE rasterised from the double coordinates (CocoIndex::GroundTruthObject).
  absl::StatusOr<core::Sample> GroundTruth(int64_t index, const core::Sample& loaded) const override;
  std::string Describe() const override;
  // Object instances labelled 0..K-1 by the categories sorted by id; source ids are the
  // category ids.
  std::optional<core::DatasetMetadata> Metadata() const override;
  // The image's "width" and "height" as the JSON states them (Load checks the decoded image
  // against them), without decoding: as torchvision's aspect-ratio grouping reads COCO.
  absl::StatusOr<cv::Size> ImageSize(int64_t index) const override;

  // Category names by label (categories sorted by id).
  const std::vector<std::string>& class_names() const { return class_names_; }
  // COCO category ids by label, to write predictions back in COCO's ids.
  const std::vector<int64_t>& category_ids() const { return category_ids_; }

  // The objects of sample `index` as Load returns them, without decoding the image.
  std::vector<core::ObjectInstance> Objects(int64_t index) const;
  // The COCO image id of sample `index`.
  int64_t ImageId(int64_t index) const { return index_.images()[samples_[index]].id; }

  // How the annotations were opened (cache mapped, built, or parsed into memory, and why).
  const std::string& index_report() const { return index_.report(); }

 private:
  CocoDataset(std::string annotation_file, std::string image_dir, std::string description,
              std::vector<std::string> class_names, std::vector<int64_t> category_ids,
              CocoIndex index, std::vector<uint32_t> samples, bool keep_crowd);

  const std::string annotation_file_;
  const std::string image_dir_;
  // Options, and what was read and skipped.
  const std::string description_;
  const std::vector<std::string> class_names_;
  const std::vector<int64_t> category_ids_;
  const CocoIndex index_;
  // The images (indices into index_.images()) that are samples.
  const std::vector<uint32_t> samples_;
  const bool keep_crowd_;
};

}  // namespace vision::data::datasets::coco

#endif  // VISION_DATA_DATASETS_COCO_COCO_DATASET_H_
