#include "data/datasets/cityscapes/cityscapes_dataset.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

#include <opencv2/imgcodecs.hpp>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/image_io.h"
#include "core/status_macros.h"
#include "data/datasets/cityscapes/cityscapes_labels.h"
#include "data/datasets/common/file_pairing.h"

namespace vision::data::datasets::cityscapes {
namespace {

namespace fs = std::filesystem;

constexpr char kImageSuffix[] = "_leftImg8bit.png";

absl::Status CheckSplit(absl::string_view split) {
  if (split == "train" || split == "val" || split == "test") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("CityscapesOptions.split: unknown split '", split,
                                                 "'; use \"train\", \"val\" or \"test\""));
}

absl::StatusOr<LabelType> ParseLabelType(absl::string_view label_type) {
  if (label_type == "labelIds") return LabelType::kLabelIds;
  if (label_type == "labelTrainIds") return LabelType::kLabelTrainIds;
  return absl::InvalidArgumentError(
      absl::StrCat("CityscapesOptions.label_type: unknown label type '", label_type,
                   "'; use \"labelIds\" (*_gtFine_labelIds.png) or \"labelTrainIds\" "
                   "(*_gtFine_labelTrainIds.png)"));
}

const char* LabelTypeName(LabelType type) {
  return type == LabelType::kLabelIds ? "labelIds" : "labelTrainIds";
}

// `path` if absolute, else `path` under `root`.
std::string ResolveUnder(const std::string& root, const std::string& path) {
  fs::path p(path);
  return p.is_absolute() ? p.string() : (fs::path(root) / p).string();
}

absl::Status CheckDirectory(const std::string& path, absl::string_view what,
                            absl::string_view hint) {
  std::error_code error;
  if (fs::is_directory(path, error)) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(
      "Cityscapes: ", what, " directory '", path, "' ",
      fs::exists(path, error) ? "is not a directory" : "does not exist", " (", hint, ")"));
}

// Names of the entries of `dir` that pass `keep`, sorted. Regular files that fail `of_format`
// (not of a Cityscapes name: a readme.txt, Thumbs.db) go to *other as "<prefix><name>".
template <typename Keep, typename OfFormat>
absl::StatusOr<std::vector<std::string>> SortedEntries(const std::string& dir, Keep keep,
                                                       OfFormat of_format, OtherFiles* other,
                                                       absl::string_view prefix) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (keep(*it)) {
      names.push_back(it->path().filename().string());
    } else if (it->is_regular_file(error) && !of_format(it->path().filename().string())) {
      other->Add(absl::StrCat(prefix, it->path().filename().string()));
    }
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("Cityscapes: cannot list '", dir, "': ", error.message()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool IsDirectory(const fs::directory_entry& entry) {
  std::error_code error;
  return entry.is_directory(error);
}

bool OnlyKeptAreOfFormat(const std::string&) { return false; }

// Any of the files of gtFine's archive: <city>_<seq>_<frame>_gtFine_<kind>.png or .json.
bool IsGtFineName(const std::string& name) {
  return absl::StrContains(name, "_gtFine_") &&
         (absl::EndsWith(name, ".png") || absl::EndsWith(name, ".json"));
}

std::string DescribeMatType(const cv::Mat& mat) {
  const int depth = mat.depth();
  const char* depth_name = depth == CV_8U || depth == CV_8S     ? "8-bit"
                           : depth == CV_16U || depth == CV_16S ? "16-bit"
                           : depth == CV_32S || depth == CV_32F ? "32-bit"
                                                                : "64-bit";
  return absl::StrCat(mat.channels(), " channel", mat.channels() == 1 ? "" : "s", " of ",
                      depth_name);
}

}  // namespace

absl::StatusOr<cv::Mat> ToTrainIds(const cv::Mat& label_map, LabelType type,
                                   absl::string_view file_name) {
  if (label_map.type() != CV_8UC1) {
    return absl::InvalidArgumentError(absl::StrCat(
        file_name, ": the label map has ", DescribeMatType(label_map),
        "; expected a single-channel 8-bit PNG of ",
        type == LabelType::kLabelIds ? "label ids (not the *_gtFine_color.png visualisation)"
                                     : "train ids"));
  }
  // Which byte values are valid; a 256-entry table keeps the check one load per pixel.
  std::array<bool, 256> valid{};
  if (type == LabelType::kLabelIds) {
    for (int id = 0; id <= kMaxLabelId; ++id) valid[id] = true;
  } else {
    for (int id = 0; id < kNumTrainClasses; ++id) valid[id] = true;
    valid[kIgnoreTrainId] = true;
  }
  for (int y = 0; y < label_map.rows; ++y) {
    const uint8_t* row = label_map.ptr<uint8_t>(y);
    for (int x = 0; x < label_map.cols; ++x) {
      if (valid[row[x]]) continue;
      return absl::InvalidArgumentError(
          type == LabelType::kLabelIds
              ? absl::StrCat(file_name, ": unknown label id ", static_cast<int>(row[x]),
                             " at (x=", x, ", y=", y, "); Cityscapes label ids are 0..",
                             kMaxLabelId, " (is this an instance or train-id map? see label_type)")
              : absl::StrCat(file_name, ": unknown train id ", static_cast<int>(row[x]),
                             " at (x=", x, ", y=", y, "); train ids are 0..", kNumTrainClasses - 1,
                             " and ", kIgnoreTrainId));
    }
  }
  if (type == LabelType::kLabelTrainIds) return label_map.clone();
  cv::Mat train_ids;
  cv::LUT(label_map, LabelIdToTrainIdLut(), train_ids);
  return train_ids;
}

std::string CityscapesDataset::LabelFileName(absl::string_view image_file_name, LabelType type) {
  absl::string_view stem = image_file_name;
  absl::ConsumeSuffix(&stem, kImageSuffix);
  return absl::StrCat(stem, "_gtFine_", LabelTypeName(type), ".png");
}

CityscapesDataset::CityscapesDataset(std::string root, std::string split, std::string image_dir,
                                     std::string label_dir, LabelType label_type, int num_cities,
                                     std::vector<Image> images, std::string unpaired_warning,
                                     std::string other_files)
    : root_(std::move(root)),
      split_(std::move(split)),
      image_dir_(std::move(image_dir)),
      label_dir_(std::move(label_dir)),
      label_type_(label_type),
      num_cities_(num_cities),
      images_(std::move(images)),
      unpaired_warning_(std::move(unpaired_warning)),
      other_files_(std::move(other_files)) {}

absl::StatusOr<std::unique_ptr<CityscapesDataset>> CityscapesDataset::Create(
    const CityscapesOptions& options) {
  if (options.root().empty()) {
    return absl::InvalidArgumentError(
        "CityscapesOptions.root is empty: set it to the directory that holds "
        "leftImg8bit/ and "
        "gtFine/");
  }
  VISION_RETURN_IF_ERROR(CheckSplit(options.split()));
  VISION_ASSIGN_OR_RETURN(const LabelType label_type, ParseLabelType(options.label_type()));

  const std::string default_image_dir = absl::StrCat("leftImg8bit/", options.split());
  const std::string default_label_dir = absl::StrCat("gtFine/", options.split());
  const std::string image_dir = ResolveUnder(
      options.root(), options.image_dir().empty() ? default_image_dir : options.image_dir());
  const std::string label_dir = ResolveUnder(
      options.root(), options.label_dir().empty() ? default_label_dir : options.label_dir());
  const std::string where =
      absl::StrCat("split '", options.split(), "' under root '", options.root(), "'");
  VISION_RETURN_IF_ERROR(CheckDirectory(
      image_dir, "image",
      options.image_dir().empty()
          ? absl::StrCat("expected ", default_image_dir, "/ for ", where,
                         "; set image_dir to use another directory")
          : absl::StrCat("from CityscapesOptions.image_dir '", options.image_dir(), "'")));
  VISION_RETURN_IF_ERROR(CheckDirectory(
      label_dir, "label",
      options.label_dir().empty()
          ? absl::StrCat("expected ", default_label_dir, "/ for ", where,
                         "; set label_dir to use another directory")
          : absl::StrCat("from CityscapesOptions.label_dir '", options.label_dir(), "'")));

  // Only Cityscapes' own names take part in pairing (README, "Data policies"); other files are
  // counted for the summary.
  OtherFiles other_files;
  VISION_ASSIGN_OR_RETURN(
      const std::vector<std::string> cities,
      SortedEntries(image_dir, IsDirectory, OnlyKeptAreOfFormat, &other_files, ""));
  // Orphans (README, "Data policies"): label maps are paired with images city by city.
  const std::string label_suffix = absl::StrCat("_gtFine_", LabelTypeName(label_type), ".png");
  auto is_label_map = [&label_suffix](const fs::directory_entry& entry) {
    std::error_code error;
    return entry.is_regular_file(error) &&
           absl::EndsWith(entry.path().filename().string(), label_suffix);
  };
  UnpairedFiles unpaired;
  std::vector<Image> images;
  int num_cities = 0;
  for (const std::string& city : cities) {
    const std::string city_image_dir = (fs::path(image_dir) / city).string();
    VISION_ASSIGN_OR_RETURN(
        std::vector<std::string> names,
        SortedEntries(
            city_image_dir,
            [](const fs::directory_entry& entry) {
              std::error_code error;
              return entry.is_regular_file(error) &&
                     absl::EndsWith(entry.path().filename().string(), kImageSuffix);
            },
            OnlyKeptAreOfFormat, &other_files, absl::StrCat(city, "/")));
    if (names.empty()) continue;
    const std::string city_label_dir = (fs::path(label_dir) / city).string();
    VISION_RETURN_IF_ERROR(
        CheckDirectory(city_label_dir, "label",
                       absl::StrCat("the labels of the images in '", city_image_dir, "'")));
    VISION_ASSIGN_OR_RETURN(const std::vector<std::string> label_names,
                            SortedEntries(city_label_dir, is_label_map, IsGtFineName,
                                          &other_files, absl::StrCat(city, "/")));
    std::set<std::string> labels(label_names.begin(), label_names.end());
    bool paired = false;
    for (std::string& name : names) {
      if (labels.erase(LabelFileName(name, label_type)) == 0) {
        unpaired.images.push_back(absl::StrCat(city, "/", name));
      } else {
        images.push_back(Image{city, std::move(name)});
        paired = true;
      }
    }
    for (const std::string& label : labels) {
      unpaired.annotations.push_back(absl::StrCat(city, "/", label));
    }
    num_cities += paired ? 1 : 0;
  }
  if (images.empty() && unpaired.images.empty()) {
    return absl::NotFoundError(absl::StrCat("Cityscapes: no *", kImageSuffix,
                                            " images in the city directories of '", image_dir,
                                            "' (expected <city>/<city>_*", kImageSuffix, ")"));
  }
  // Label maps of cities that have no images.
  VISION_ASSIGN_OR_RETURN(
      const std::vector<std::string> label_cities,
      SortedEntries(label_dir, IsDirectory, OnlyKeptAreOfFormat, &other_files, ""));
  const std::set<std::string> image_cities(cities.begin(), cities.end());
  for (const std::string& city : label_cities) {
    if (image_cities.count(city) > 0) continue;
    VISION_ASSIGN_OR_RETURN(
        const std::vector<std::string> label_names,
        SortedEntries((fs::path(label_dir) / city).string(), is_label_map, IsGtFineName,
                      &other_files, absl::StrCat(city, "/")));
    for (const std::string& label : label_names) {
      unpaired.annotations.push_back(absl::StrCat(city, "/", label));
    }
  }
  std::string unpaired_warning;
  VISION_RETURN_IF_ERROR(ApplyPairingPolicy(
      "Cityscapes", unpaired, absl::StrCat("label map (*", label_suffix, ")"), image_dir, label_dir,
      "CityscapesOptions.allow_unpaired_files", options.allow_unpaired_files(), &unpaired_warning));
  if (images.empty()) {
    return absl::NotFoundError(absl::StrCat("Cityscapes: no image in '", image_dir,
                                            "' has its label map in '", label_dir, "'"));
  }
  if (other_files.count() > 0) {
    std::fprintf(stderr,
                 "note: Cityscapes: %s in '%s' and '%s': not <city>/<name>%s or "
                 "<city>/<name>_gtFine_*\n",
                 other_files.Describe().c_str(), image_dir.c_str(), label_dir.c_str(),
                 kImageSuffix);
  }
  return std::unique_ptr<CityscapesDataset>(new CityscapesDataset(
      options.root(), options.split(), image_dir, label_dir, label_type, num_cities,
      std::move(images), std::move(unpaired_warning), other_files.Describe()));
}

absl::StatusOr<core::Sample> CityscapesDataset::Load(int64_t index) const {
  if (index < 0 || index >= Size()) {
    return absl::OutOfRangeError(
        absl::StrCat("Cityscapes: sample index ", index, " is outside [0, ", Size(), ")"));
  }
  const Image& entry = images_[index];
  core::Sample sample;
  sample.id = fs::path(entry.file_name).stem().string();
  sample.image_path = (fs::path(image_dir_) / entry.city / entry.file_name).string();
  const std::string label_path =
      (fs::path(label_dir_) / entry.city / LabelFileName(entry.file_name, label_type_)).string();

  std::error_code error;
  if (!fs::exists(label_path, error)) {
    return absl::NotFoundError(
        absl::StrCat(label_path, ": missing label map for image ", sample.image_path));
  }
  VISION_ASSIGN_OR_RETURN(sample.image, core::ReadImage(sample.image_path));
  VISION_ASSIGN_OR_RETURN(const cv::Mat label_map,
                          core::ReadImage(label_path, cv::IMREAD_UNCHANGED, "label map"));
  sample.original_height = sample.image.rows;
  sample.original_width = sample.image.cols;
  if (label_map.size() != sample.image.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label_path, ": the label map is ", label_map.cols, "x", label_map.rows,
                     " but its image ", sample.image_path, " is ", sample.image.cols, "x",
                     sample.image.rows, " (width x height); both must have the same size"));
  }
  VISION_ASSIGN_OR_RETURN(sample.semantic, ToTrainIds(label_map, label_type_, label_path));
  return sample;
}

std::string CityscapesDataset::Describe() const {
  std::string text =
      absl::StrCat("Cityscapes(root=", root_, ", split=", split_, ", images=", image_dir_,
                   ", labels=", label_dir_, ", label_type=", LabelTypeName(label_type_),
                   "): ", Size(), " samples in ", num_cities_, " cities");
  if (!unpaired_warning_.empty()) absl::StrAppend(&text, "; ", unpaired_warning_);
  if (!other_files_.empty()) absl::StrAppend(&text, "; ", other_files_);
  return text;
}

std::optional<core::DatasetMetadata> CityscapesDataset::Metadata() const {
  core::DatasetMetadata metadata;
  metadata.annotation_kind = core::AnnotationKind::kLabelMaps;
  metadata.class_names.assign(TrainClassNames().begin(), TrainClassNames().end());
  metadata.source_ids.resize(kNumTrainClasses);
  metadata.class_categories.resize(kNumTrainClasses);
  metadata.class_colours.resize(kNumTrainClasses);
  for (const CityscapesLabel& label : CityscapesLabels()) {
    if (label.train_id == kIgnoreTrainId) continue;
    metadata.source_ids[label.train_id] = label.id;
    metadata.class_categories[label.train_id] = label.category;
    metadata.class_colours[label.train_id] = {label.rgb[0], label.rgb[1], label.rgb[2]};
  }
  metadata.source_id_name = "label id";
  metadata.ignore_label = kIgnoreTrainId;
  return metadata;
}

VISION_REGISTER_PLUGIN(core::DatasetRegistry, "Cityscapes", CityscapesDataset, CityscapesOptions);

}  // namespace vision::data::datasets::cityscapes
