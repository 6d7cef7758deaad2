// The Cityscapes dataset (semantic segmentation of street scenes in 50 German and Swiss cities),
// registered as "Cityscapes": 8-bit PNG images with one label map each, read in the layout of the
// official archives (see cityscapes.proto). Label maps hold the official label ids 0..33 (or, with
// label_type "labelTrainIds", train ids) and are converted to core::Sample::semantic: the 19 train
// ids of cityscapes_labels.h with 255 for ignored pixels.
#ifndef VISION_DATA_DATASETS_CITYSCAPES_CITYSCAPES_DATASET_H_
#define VISION_DATA_DATASETS_CITYSCAPES_CITYSCAPES_DATASET_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dataset.h"
#include "core/sample.h"
#include "data/datasets/cityscapes/cityscapes.pb.h"

namespace vision::data::datasets::cityscapes {

// What a label map holds.
enum class LabelType {
  kLabelIds,       // *_gtFine_labelIds.png: label ids 0..33
  kLabelTrainIds,  // *_gtFine_labelTrainIds.png: train ids 0..18 and 255
};

// Converts a decoded label map to train ids (CV_8UC1, 255 = ignore). The map must be single-channel
// 8-bit; a value that is no label id (train id) of `type` is an error naming `file_name`, the value
// and its first position.
absl::StatusOr<cv::Mat> ToTrainIds(const cv::Mat& label_map, LabelType type,
                                   absl::string_view file_name);

class CityscapesDataset : public core::Dataset {
 public:
  // Lists the split's cities and their *_leftImg8bit.png images, both in sorted order, and checks
  // that every city has a label directory; a missing directory, or an image directory without
  // images, is an error naming the expected path. Images and label maps must pair up (see
  // allow_unpaired_files in cityscapes.proto). Only Cityscapes' own names take part: other
  // files (a readme.txt, Thumbs.db) are ignored and counted in Describe().
  static absl::StatusOr<std::unique_ptr<CityscapesDataset>> Create(
      const CityscapesOptions& options);

  int64_t Size() const override { return static_cast<int64_t>(images_.size()); }
  // Decodes the image (BGR) and its label map and converts the labels to train ids. Sample::id is
  // the image's file stem ("aachen_000000_000019_leftImg8bit"). Thread-safe: reads only.
  absl::StatusOr<core::Sample> Load(int64_t index) const override;
  std::string Describe() const override;
  // Label maps of the 19 train ids, whose source ids are the official label ids (road: 7),
  // with kIgnoreTrainId ignored; the same whichever label_type is read.
  std::optional<core::DatasetMetadata> Metadata() const override;

  // The label map that belongs to an image: aachen_000000_000019_leftImg8bit.png ->
  // aachen_000000_000019_gtFine_labelIds.png.
  static std::string LabelFileName(absl::string_view image_file_name, LabelType type);

 private:
  struct Image {
    std::string city;
    std::string file_name;
  };

  CityscapesDataset(std::string root, std::string split, std::string image_dir,
                    std::string label_dir, LabelType label_type, int num_cities,
                    std::vector<Image> images, std::string unpaired_warning,
                    std::string other_files);

  const std::string root_;
  const std::string split_;
  const std::string image_dir_;
  const std::string label_dir_;
  const LabelType label_type_;
  const int num_cities_;
  // Sorted by city, then by file name.
  const std::vector<Image> images_;
  // For Describe(): what was skipped while listing.
  const std::string unpaired_warning_;
  const std::string other_files_;  // "2 other files ignored (readme.txt, aachen/Thumbs.db)" or ""
};

}  // namespace vision::data::datasets::cityscapes

#endif  // VISION_DATA_DATASETS_CITYSCAPES_CITYSCAPES_DATASET_H_
