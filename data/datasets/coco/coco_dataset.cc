#include "data/datasets/coco/coco_dataset.h"

#include <algorithm>
#include <filesystem>
#include <opencv2/imgcodecs.hpp>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/image_io.h"
#include "core/status_macros.h"

namespace vision::data::datasets::coco {
namespace {

namespace fs = std::filesystem;

// `path` if absolute, else `path` under `root`.
std::string ResolveUnder(const std::string& root, const std::string& path) {
  fs::path p(path);
  return p.is_absolute() ? p.string() : (fs::path(root) / p).string();
}

absl::Status CheckAnnotationFile(const std::string& path, absl::string_view hint) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat(
        "COCO: annotation file '", path, "' ",
        fs::exists(path, error) ? "is not a regular file" : "does not exist", " (", hint, ")"));
  }
  return absl::OkStatus();
}

CocoCacheOptions CacheOptions(const CocoOptions& options) {
  CocoCacheOptions cache;
  cache.enabled = options.cache() != CocoOptions::OFF;
  cache.cache_dir = options.cache_dir();
  cache.min_source_bytes = options.cache_min_bytes();
  cache.wait_seconds = options.cache_wait_seconds();
  return cache;
}

}  // namespace

CocoDataset::CocoDataset(std::string annotation_file, std::string image_dir,
                         std::string description, std::vector<std::string> class_names,
                         std::vector<int64_t> category_ids, CocoIndex index,
                         std::vector<uint32_t> samples, bool keep_crowd)
    : annotation_file_(std::move(annotation_file)),
      image_dir_(std::move(image_dir)),
      description_(std::move(description)),
      class_names_(std::move(class_names)),
      category_ids_(std::move(category_ids)),
      index_(std::move(index)),
      samples_(std::move(samples)),
      keep_crowd_(keep_crowd) {}

absl::StatusOr<std::unique_ptr<CocoDataset>> CocoDataset::Create(const CocoOptions& options) {
  if (options.root().empty()) {
    return absl::InvalidArgumentError(
        "CocoOptions.root is empty: set it to the directory that holds the annotation file "
        "(annotation_file) and the images (image_dir)");
  }
  const std::string json_path = ResolveUnder(options.root(), options.annotation_file());
  const std::string image_dir = ResolveUnder(options.root(), options.image_dir());
  VISION_RETURN_IF_ERROR(CheckAnnotationFile(
      json_path, absl::StrCat("from CocoOptions.annotation_file '", options.annotation_file(),
                              "' under root '", options.root(), "'")));
  VISION_ASSIGN_OR_RETURN(CocoIndex index, OpenCocoIndex(json_path, CacheOptions(options)));
  // A file without "annotations" (like COCO's image_info_test2017.json) lists images only:
  // read as such only when the options say so.
  if (!index.has_annotations() && options.require_annotations()) {
    return absl::InvalidArgumentError(absl::StrCat(
        json_path,
        ": the key \"annotations\" is missing, so no image has labels; training and evaluation "
        "need them (is this an image-info file like image_info_test2017.json?). Set "
        "CocoOptions.require_annotations: false to read its images without labels"));
  }

  std::vector<std::string> class_names;
  std::vector<int64_t> category_ids;
  for (const CocoCategoryRecord& category : index.categories()) {
    class_names.emplace_back(index.Name(category));
    category_ids.push_back(category.id);
  }
  const int64_t num_annotations = static_cast<int64_t>(index.annotations().size());
  int64_t num_crowd_dropped = 0;
  if (!options.keep_crowd()) {
    for (const CocoAnnotationRecord& annotation : index.annotations()) {
      num_crowd_dropped += annotation.is_crowd;
    }
  }
  // Samples: the images sorted by id, without those that have no non-crowd object under SKIP.
  const size_t num_images = index.images().size();
  std::vector<uint32_t> samples;
  samples.reserve(num_images);
  for (size_t i = 0; i < num_images; ++i) {
    const CocoImageRecord& image = index.images()[i];
    const auto annotations = index.AnnotationsOf(image);
    if (options.empty_images() == CocoOptions::SKIP &&
        std::none_of(annotations.begin(), annotations.end(),
                     [](const CocoAnnotationRecord& a) { return a.is_crowd == 0; })) {
      continue;
    }
    samples.push_back(static_cast<uint32_t>(i));
  }
  if (samples.empty()) {
    return absl::NotFoundError(absl::StrCat(
        json_path, ": none of the ", num_images,
        " images has a non-crowd annotation, so empty_images: SKIP leaves no sample; set "
        "empty_images: KEEP to read them anyway"));
  }
  std::string description = absl::StrCat(
      "COCO(annotations=", json_path, ", images=", image_dir,
      ", empty_images=", CocoOptions::EmptyImages_Name(options.empty_images()),
      ", keep_crowd=", options.keep_crowd() ? "true" : "false", "): ", samples.size(), " samples (",
      num_images, " images, ", num_annotations, " annotations",
      num_crowd_dropped > 0 ? absl::StrCat(", ", num_crowd_dropped, " crowd dropped") : "", ", ",
      class_names.size(), " categories)");
  return std::unique_ptr<CocoDataset>(new CocoDataset(
      json_path, image_dir, std::move(description), std::move(class_names), std::move(category_ids),
      std::move(index), std::move(samples), options.keep_crowd()));
}

absl::StatusOr<cv::Size> CocoDataset::ImageSize(int64_t index) const {
  if (index < 0 || index >= Size()) {
    return absl::OutOfRangeError(
        absl::StrCat("COCO: sample index ", index, " is outside [0, ", Size(), ")"));
  }
  const CocoImageRecord& image = index_.images()[samples_[index]];
  return cv::Size(image.width, image.height);
}

absl::StatusOr<core::Sample> CocoDataset::Load(int64_t index) const {
  if (index < 0 || index >= Size()) {
    return absl::OutOfRangeError(
        absl::StrCat("COCO: sample index ", index, " is outside [0, ", Size(), ")"));
  }
  const CocoImageRecord& image = index_.images()[samples_[index]];
  const absl::string_view file_name = index_.Name(image);
  core::Sample sample;
  sample.id = absl::StrCat(file_name, " (image id ", image.id, ")");
  sample.image_path = (fs::path(image_dir_) / std::string(file_name)).string();
  const std::string source = absl::StrCat("image ", image.id, " of ", annotation_file_);

  std::error_code error;
  if (!fs::exists(sample.image_path, error)) {
    return absl::NotFoundError(absl::StrCat(sample.image_path, ": missing image (", source, ")"));
  }
  // Checks the file's structure first: a truncated JPEG or PNG is an error naming the file.
  absl::StatusOr<cv::Mat> decoded = core::ReadImage(sample.image_path);
  if (!decoded.ok()) {
    return absl::Status(decoded.status().code(),
                        absl::StrCat(decoded.status().message(), " (", source, ")"));
  }
  sample.image = *std::move(decoded);
  if (sample.image.cols != image.width || sample.image.rows != image.height) {
    return absl::InvalidArgumentError(absl::StrCat(
        sample.image_path, ": the image is ", sample.image.cols, "x", sample.image.rows, " but ",
        source, " says ", image.width, "x", image.height,
        " (width x height), so its annotations would not line up; is the JSON for another "
        "copy of the images?"));
  }
  sample.original_height = sample.image.rows;
  sample.original_width = sample.image.cols;
  sample.objects = Objects(index);
  return sample;
}

absl::StatusOr<core::Sample> CocoDataset::GroundTruth(int64_t index,
                                                      const core::Sample& loaded) const {
  if (index < 0 || index >= Size()) {
    return absl::OutOfRangeError(
        absl::StrCat("COCO: sample index ", index, " is outside [0, ", Size(), ")"));
  }
  core::Sample truth;
  truth.id = loaded.id;
  truth.image_path = loaded.image_path;
  truth.original_height = loaded.original_height;
  truth.original_width = loaded.original_width;
  const CocoImageRecord& image = index_.images()[samples_[index]];
  for (const CocoAnnotationRecord& annotation : index_.AnnotationsOf(image)) {
    truth.objects.push_back(index_.GroundTruthObject(annotation, image));
  }
  return truth;
}

std::vector<core::ObjectInstance> CocoDataset::Objects(int64_t index) const {
  const CocoImageRecord& image = index_.images()[samples_[index]];
  std::vector<core::ObjectInstance> objects;
  for (const CocoAnnotationRecord& annotation : index_.AnnotationsOf(image)) {
    if (annotation.is_crowd && !keep_crowd_) continue;
    objects.push_back(index_.Object(annotation, image));
  }
  return objects;
}

std::string CocoDataset::Describe() const { return description_; }

std::optional<core::DatasetMetadata> CocoDataset::Metadata() const {
  core::DatasetMetadata metadata;
  metadata.annotation_kind = core::AnnotationKind::kObjectInstances;
  metadata.class_names = class_names_;
  metadata.source_ids = category_ids_;
  metadata.source_id_name = "category id";
  return metadata;
}

VISION_REGISTER_PLUGIN(core::DatasetRegistry, "COCO", CocoDataset, CocoOptions);

}  // namespace vision::data::datasets::coco
