// The pre-index COCO reader (see the .cc), for tests and the benchmark's nlohmann figure only.
#ifndef VISION_DATA_DATASETS_COCO_COCO_REFERENCE_READER_H_
#define VISION_DATA_DATASETS_COCO_COCO_REFERENCE_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sample.h"
#include "data/datasets/coco/coco.pb.h"

namespace vision::data::datasets::coco {

struct ReferenceImage {
  int64_t id = 0;
  std::string file_name;
  int width = 0;
  int height = 0;
  std::vector<core::ObjectInstance> objects;
};

struct ReferenceCoco {
  std::vector<std::string> class_names;
  std::vector<int64_t> category_ids;
  // Sorted by id, without the empty ones under EmptyImages::SKIP.
  std::vector<ReferenceImage> images;
  int64_t num_annotations = 0;
  int64_t num_crowd_dropped = 0;
};

// What CocoDataset::Create read before the compact index, with the same messages.
absl::StatusOr<ReferenceCoco> ReadCocoReference(const CocoOptions& options);

}  // namespace vision::data::datasets::coco

#endif  // VISION_DATA_DATASETS_COCO_COCO_REFERENCE_READER_H_
