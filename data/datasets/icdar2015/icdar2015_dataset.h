// The ICDAR2015 dataset (ICDAR 2015 Robust Reading Challenge 4, incidental scene text):
// JPEG images with one ground-truth text file each, registered as "ICDAR2015".
//
// Ground truth (gt_img_N.txt for img_N.jpg) has one word per line,
//
//   x1,y1,x2,y2,x3,y3,x4,y4,transcription
//
// a quadrilateral in pixel coordinates followed by the transcription, which is everything
// after the eighth comma (so it may itself contain commas). "###" marks a region that is
// neither a hit nor a miss (TextInstance::ignore). The official files are UTF-8 with a
// byte-order mark and CRLF line endings; files without the mark or with LF endings are read
// the same way.
//
// Damaged annotations (README, "Data policies"): a line that is not valid UTF-8 is an error
// naming file and line. A quadrilateral that is not a valid simple polygon
// (core::IsValidSimplePolygon) is repaired, never dropped silently: a self-intersecting one
// (a bow-tie, two vertices swapped) is replaced by its convex hull and keeps its care status;
// one with zero area (collinear or coincident points), which no repair can give a shape, becomes
// don't-care.
// Describe() counts both over the dataset, with the first file and line.
#ifndef VISION_DATA_DATASETS_ICDAR2015_ICDAR2015_DATASET_H_
#define VISION_DATA_DATASETS_ICDAR2015_ICDAR2015_DATASET_H_

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
#include "data/datasets/icdar2015/icdar2015.pb.h"

namespace vision::data::datasets::icdar2015 {

// Coordinates may lie this fraction of the image's width (height) beyond its border before a
// line is rejected as corrupt; closer ones are clamped to the image, because the official
// ground truth has words that run slightly off the picture.
inline constexpr double kMaxOutsideFraction = 0.5;

// What parsing changed in the annotations, so that no change goes unsaid.
struct GroundTruthRepairs {
  int64_t hull_repaired = 0;       // self-intersecting polygons replaced by their convex hull
  int64_t degenerate_ignored = 0;  // zero-area polygons made don't-care
  std::string first;               // "file:line" of the first change
  int64_t total() const { return hull_repaired + degenerate_ignored; }
  // "" when nothing changed, else e.g. "2 self-intersecting polygons replaced by their convex
  // hull, 1 zero-area polygon made don't-care (first: gt_img_3.txt:2)".
  std::string Describe() const;
};

// Parses the contents of one ground-truth file. `file_name` only labels errors, which name it
// and the 1-based line. With a non-empty `image_size` every point is also checked against the
// image (see kMaxOutsideFraction) and clamped to [0, width - 1] x [0, height - 1]; a word
// that clamping flattens to no area (it lay wholly off the image) is marked ignore. Invalid
// polygons are repaired as the file comment says, and counted into `repairs` when given.
absl::StatusOr<std::vector<core::TextInstance>> ParseIcdarGroundTruth(
    absl::string_view text, absl::string_view file_name, cv::Size image_size = cv::Size(),
    GroundTruthRepairs* repairs = nullptr);

// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or code points above
// U+10FFFF); on failure *bad_offset is the offset of the first bad byte.
bool IsValidUtf8(absl::string_view text, size_t* bad_offset);

// The file names that take part in pairing: img_<N>.jpg (.jpeg, .png, in any case) and
// gt_img_<N>.txt. Other files in the two directories are ignored and counted in Describe().
bool IsIcdarImageName(absl::string_view name);
bool IsIcdarGroundTruthName(absl::string_view name);

// Compares file names so that embedded numbers sort by value: img_2 < img_10.
bool NaturalLess(absl::string_view a, absl::string_view b);

class ICDAR2015Dataset : public core::Dataset {
 public:
  // Lists the split's images and checks that its ground-truth directory exists; a missing
  // directory or an image directory without images is an error naming the expected path.
  // Images and ground-truth files must pair up (see allow_unpaired_files in icdar2015.proto).
  // Reads every ground-truth file once to count the repairs of invalid polygons; lines that do
  // not parse are left to Load, so that the loader's on_bad_sample decides about them.
  static absl::StatusOr<std::unique_ptr<ICDAR2015Dataset>> Create(const ICDAR2015Options& options);

  int64_t Size() const override { return static_cast<int64_t>(image_names_.size()); }
  // Decodes img_N.jpg (BGR) and parses gt_img_N.txt. Thread-safe: reads only.
  absl::StatusOr<core::Sample> Load(int64_t index) const override;
  std::string Describe() const override;
  // Text polygons without classes: transcriptions are not labels.
  std::optional<core::DatasetMetadata> Metadata() const override;

  // The ground-truth file that belongs to an image: img_7.jpg -> gt_img_7.txt.
  static std::string GroundTruthFileName(absl::string_view image_file_name);

 private:
  ICDAR2015Dataset(std::string root, std::string split, std::string image_dir, std::string gt_dir,
                   std::vector<std::string> image_names, std::string unpaired_warning,
                   GroundTruthRepairs repairs, std::string other_files);

  const std::string root_;
  const std::string split_;
  const std::string image_dir_;
  const std::string gt_dir_;
  // File names (not paths) in natural order: img_1.jpg, img_2.jpg, ..., img_10.jpg.
  const std::vector<std::string> image_names_;
  // For Describe(): what was skipped or repaired while listing.
  const std::string unpaired_warning_;
  const GroundTruthRepairs repairs_;
  const std::string other_files_;  // "2 other files ignored (readme.txt, Thumbs.db)" or ""
};

}  // namespace vision::data::datasets::icdar2015

#endif  // VISION_DATA_DATASETS_ICDAR2015_ICDAR2015_DATASET_H_
