// "ImageFolder": the images of a folder (or one image), without annotations, so that infer
// reads a user's pictures through the same dataset, loader and augmentations as evaluation.
#ifndef VISION_DATA_DATASETS_IMAGE_FOLDER_IMAGE_FOLDER_DATASET_H_
#define VISION_DATA_DATASETS_IMAGE_FOLDER_IMAGE_FOLDER_DATASET_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dataset.h"
#include "data/datasets/image_folder/image_folder.pb.h"

namespace vision::data::datasets::image_folder {

class ImageFolderDataset : public core::Dataset {
 public:
  // Lists the images; a path that is neither an image file nor a folder with images is an
  // error naming it.
  static absl::StatusOr<std::unique_ptr<ImageFolderDataset>> Create(const ImageFolderOptions& options);

  int64_t Size() const override { return static_cast<int64_t>(paths_.size()); }
  absl::StatusOr<core::Sample> Load(int64_t index) const override;
  std::string Describe() const override;

 private:
  ImageFolderDataset(std::string root, std::vector<std::string> paths)
      : root_(std::move(root)), paths_(std::move(paths)) {}

  std::string root_;
  std::vector<std::string> paths_;
};

}  // namespace vision::data::datasets::image_folder

#endif  // VISION_DATA_DATASETS_IMAGE_FOLDER_IMAGE_FOLDER_DATASET_H_
