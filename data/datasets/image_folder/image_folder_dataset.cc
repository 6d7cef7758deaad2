#include "data/datasets/image_folder/image_folder_dataset.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include <opencv2/imgcodecs.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/image_io.h"

namespace vision::data::datasets::image_folder {
namespace {

namespace fs = std::filesystem;

bool IsImage(const fs::path& path) {
  const std::string ext = absl::AsciiStrToLower(path.extension().string());
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ImageFolderDataset>> ImageFolderDataset::Create(
    const ImageFolderOptions& options) {
  const std::string& where = options.path();
  if (where.empty()) return absl::InvalidArgumentError("path: required (an image or a folder)");
  std::error_code ec;
  std::vector<std::string> paths;
  if (fs::is_regular_file(where, ec)) {
    paths.push_back(where);
  } else if (fs::is_directory(where, ec)) {
    for (const auto& entry : fs::directory_iterator(where, ec)) {
      if (entry.is_regular_file(ec) && IsImage(entry.path()))
        paths.push_back(entry.path().string());
    }
    std::sort(paths.begin(), paths.end());
    if (paths.empty()) {
      return absl::NotFoundError(
          absl::StrCat("path: no .jpg, .jpeg or .png files in '", where, "'"));
    }
  } else {
    return absl::NotFoundError(absl::StrCat("path: '", where, "' is neither a file nor a folder"));
  }
  return std::unique_ptr<ImageFolderDataset>(new ImageFolderDataset(where, std::move(paths)));
}

absl::StatusOr<core::Sample> ImageFolderDataset::Load(int64_t index) const {
  core::Sample s;
  s.image_path = paths_[index];
  s.id = fs::path(s.image_path).stem().string();
  absl::StatusOr<cv::Mat> image = core::ReadImage(s.image_path);
  if (!image.ok()) return image.status();
  s.image = *std::move(image);
  s.original_height = s.image.rows;
  s.original_width = s.image.cols;
  return s;
}

std::string ImageFolderDataset::Describe() const {
  return absl::StrCat("ImageFolder ", root_, ": ", paths_.size(), " images");
}

VISION_REGISTER_PLUGIN(core::DatasetRegistry, "ImageFolder", ImageFolderDataset,
                       ImageFolderOptions);

}  // namespace vision::data::datasets::image_folder
