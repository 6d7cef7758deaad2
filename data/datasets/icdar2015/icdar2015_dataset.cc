#include "data/datasets/icdar2015/icdar2015_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include <opencv2/imgcodecs.hpp>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/image_io.h"
#include "core/polygon.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "data/datasets/common/file_pairing.h"

namespace vision::data::datasets::icdar2015 {
namespace {

namespace fs = std::filesystem;

constexpr char kUtf8ByteOrderMark[] = "\xEF\xBB\xBF";
constexpr char kDontCare[] = "###";
constexpr int kNumCoordinates = 8;
constexpr const char* kCoordinateNames[kNumCoordinates] = {"x1", "y1", "x2", "y2",
                                                           "x3", "y3", "x4", "y4"};

struct SplitLayout {
  const char* images;
  const char* ground_truth;
};

absl::StatusOr<SplitLayout> LayoutOf(absl::string_view split) {
  if (split == "train") {
    return SplitLayout{"ch4_training_images", "ch4_training_localization_transcription_gt"};
  }
  if (split == "test") return SplitLayout{"ch4_test_images", "Challenge4_Test_Task1_GT"};
  return absl::InvalidArgumentError(absl::StrCat("ICDAR2015Options.split: unknown split '", split,
                                                 "'; use \"train\" or \"test\""));
}

// Long lines are cut in messages so that a binary file read as text stays readable.
std::string Excerpt(absl::string_view line) {
  constexpr size_t kMax = 80;
  if (line.size() <= kMax) return std::string(line);
  return absl::StrCat(line.substr(0, kMax), "...");
}

// Whether `name` is "<prefix><digits><suffix>"; the suffix compares in any case.
bool IsNumberedName(absl::string_view name, absl::string_view prefix,
                    absl::string_view suffix) {
  if (!absl::ConsumePrefix(&name, prefix) || name.size() <= suffix.size() ||
      !absl::EqualsIgnoreCase(name.substr(name.size() - suffix.size()), suffix)) {
    return false;
  }
  name.remove_suffix(suffix.size());
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
}

}  // namespace

bool IsIcdarImageName(absl::string_view name) {
  return IsNumberedName(name, "img_", ".jpg") || IsNumberedName(name, "img_", ".jpeg") ||
         IsNumberedName(name, "img_", ".png");
}

bool IsIcdarGroundTruthName(absl::string_view name) {
  return IsNumberedName(name, "gt_img_", ".txt");
}

namespace {

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
      "ICDAR2015: ", what, " directory '", path, "' ",
      fs::exists(path, error) ? "is not a directory" : "does not exist", " (", hint, ")"));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot open the file"));
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return contents.str();
}

enum class Repair { kNone, kConvexHull, kDontCare };

// Parses one non-empty line; errors are prefixed by the caller with file and line. *repair
// says what was changed to make the polygon valid (see the header).
absl::StatusOr<core::TextInstance> ParseLine(absl::string_view line, cv::Size image_size,
                                             Repair* repair) {
  *repair = Repair::kNone;
  // The transcription is everything after the eighth comma, commas included.
  std::vector<absl::string_view> fields =
      absl::StrSplit(line, absl::MaxSplits(',', kNumCoordinates));
  if (fields.size() <= kNumCoordinates) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected 8 coordinates and a transcription (x1,y1,x2,y2,x3,y3,x4,y4,text) but found ",
        fields.size(), " comma-separated field", fields.size() == 1 ? "" : "s", " in '",
        Excerpt(line), "'"));
  }
  core::TextInstance instance;
  float values[kNumCoordinates];
  for (int i = 0; i < kNumCoordinates; ++i) {
    absl::string_view field = absl::StripAsciiWhitespace(fields[i]);
    if (!absl::SimpleAtof(field, &values[i]) || !std::isfinite(values[i])) {
      return absl::InvalidArgumentError(absl::StrCat("coordinate ", kCoordinateNames[i], " is '",
                                                     Excerpt(fields[i]), "', not a number (in '",
                                                     Excerpt(line), "')"));
    }
  }
  for (int i = 0; i < kNumCoordinates; i += 2) {
    instance.polygon.emplace_back(values[i], values[i + 1]);
  }
  const absl::string_view transcription = fields[kNumCoordinates];
  size_t bad = 0;
  if (!IsValidUtf8(transcription, &bad)) {
    const size_t column = line.size() - transcription.size() + bad + 1;
    return absl::InvalidArgumentError(absl::StrFormat(
        "the transcription is not valid UTF-8 (byte 0x%02X at column %d); ICDAR2015 ground "
        "truth is UTF-8: convert the file (e.g. iconv -f <its encoding> -t UTF-8)",
        static_cast<unsigned char>(transcription[bad]), column));
  }
  // Invalid polygons are repaired before clamping, so that Create's count (made without the
  // image's size) is the count of what Load changes.
  bool degenerate = false;
  if (!core::IsValidSimplePolygon(instance.polygon)) {
    core::Polygon hull = core::ConvexHull(instance.polygon);
    if (core::IsValidSimplePolygon(hull)) {
      instance.polygon = std::move(hull);
      *repair = Repair::kConvexHull;
    } else {
      degenerate = true;
      *repair = Repair::kDontCare;
    }
  }
  if (!image_size.empty()) {
    const float max_x = static_cast<float>(image_size.width - 1);
    const float max_y = static_cast<float>(image_size.height - 1);
    const float slack_x = static_cast<float>(kMaxOutsideFraction * image_size.width);
    const float slack_y = static_cast<float>(kMaxOutsideFraction * image_size.height);
    for (cv::Point2f& p : instance.polygon) {
      if (p.x < -slack_x || p.x > max_x + slack_x || p.y < -slack_y || p.y > max_y + slack_y) {
        return absl::InvalidArgumentError(absl::StrCat(
            "point (", p.x, ", ", p.y, ") lies far outside the ", image_size.width, "x",
            image_size.height, " image (more than ", 100 * kMaxOutsideFraction,
            "% of its size beyond the border); is this the ground truth of another image?"));
      }
      p.x = std::clamp(p.x, 0.0f, max_x);
      p.y = std::clamp(p.y, 0.0f, max_y);
    }
  }
  instance.transcription = std::string(transcription);
  // A word lying wholly off the image clamps to a line along the border: nothing of it is
  // visible, so it may be neither required nor learned.
  instance.ignore = instance.transcription == kDontCare || degenerate ||
                    (!image_size.empty() && core::PolygonArea(instance.polygon) < 1.0);
  return instance;
}

}  // namespace

bool IsValidUtf8(absl::string_view text, size_t* bad_offset) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = bytes[i];
    size_t length;
    uint32_t code_point;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      length = 2;
      code_point = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3;
      code_point = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4;
      code_point = c & 0x07;
    } else {
      *bad_offset = i;
      return false;
    }
    if (i + length > n) {
      *bad_offset = i;
      return false;
    }
    for (size_t k = 1; k < length; ++k) {
      if ((bytes[i + k] & 0xC0) != 0x80) {
        *bad_offset = i;
        return false;
      }
      code_point = (code_point << 6) | (bytes[i + k] & 0x3F);
    }
    constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (code_point < kMinForLength[length] || code_point > 0x10FFFF ||
        (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      *bad_offset = i;
      return false;
    }
    i += length;
  }
  return true;
}

std::string GroundTruthRepairs::Describe() const {
  if (total() == 0) return "";
  std::vector<std::string> parts;
  if (hull_repaired > 0) {
    parts.push_back(absl::StrCat(hull_repaired, " self-intersecting polygon",
                                 hull_repaired == 1 ? "" : "s", " replaced by the convex hull"));
  }
  if (degenerate_ignored > 0) {
    parts.push_back(absl::StrCat(degenerate_ignored, " zero-area polygon",
                                 degenerate_ignored == 1 ? "" : "s", " made don't-care"));
  }
  return absl::StrCat(absl::StrJoin(parts, ", "), " (first: ", first, ")");
}

absl::StatusOr<std::vector<core::TextInstance>> ParseIcdarGroundTruth(absl::string_view text,
                                                                      absl::string_view file_name,
                                                                      cv::Size image_size,
                                                                      GroundTruthRepairs* repairs) {
  absl::ConsumePrefix(&text, kUtf8ByteOrderMark);
  std::vector<core::TextInstance> instances;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    absl::ConsumeSuffix(&line, "\r");
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const std::string where = absl::StrCat(file_name, ":", line_number);
    Repair repair;
    VISION_ASSIGN_OR_RETURN(core::TextInstance instance,
                            core::WithContext(where, ParseLine(line, image_size, &repair)));
    if (repairs != nullptr && repair != Repair::kNone) {
      ++(repair == Repair::kConvexHull ? repairs->hull_repaired : repairs->degenerate_ignored);
      if (repairs->first.empty()) repairs->first = where;
    }
    instances.push_back(std::move(instance));
  }
  return instances;
}

bool NaturalLess(absl::string_view a, absl::string_view b) {
  size_t i = 0;
  size_t j = 0;
  while (i < a.size() && j < b.size()) {
    const bool digit_a = absl::ascii_isdigit(static_cast<unsigned char>(a[i]));
    const bool digit_b = absl::ascii_isdigit(static_cast<unsigned char>(b[j]));
    if (digit_a && digit_b) {
      // Compare the two digit runs by value: without leading zeros, shorter is smaller.
      size_t end_a = i;
      size_t end_b = j;
      while (end_a < a.size() && absl::ascii_isdigit(static_cast<unsigned char>(a[end_a]))) {
        ++end_a;
      }
      while (end_b < b.size() && absl::ascii_isdigit(static_cast<unsigned char>(b[end_b]))) {
        ++end_b;
      }
      absl::string_view run_a = a.substr(i, end_a - i);
      absl::string_view run_b = b.substr(j, end_b - j);
      while (run_a.size() > 1 && run_a[0] == '0') run_a.remove_prefix(1);
      while (run_b.size() > 1 && run_b[0] == '0') run_b.remove_prefix(1);
      if (run_a.size() != run_b.size()) return run_a.size() < run_b.size();
      if (run_a != run_b) return run_a < run_b;
      i = end_a;
      j = end_b;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  if (a.size() - i != b.size() - j) return a.size() - i < b.size() - j;
  // Equal up to leading zeros ("img_01" vs "img_1"): fall back to a strict total order.
  return a < b;
}

std::string ICDAR2015Dataset::GroundTruthFileName(absl::string_view image_file_name) {
  return absl::StrCat("gt_", fs::path(std::string(image_file_name)).stem().string(), ".txt");
}

ICDAR2015Dataset::ICDAR2015Dataset(std::string root, std::string split, std::string image_dir,
                                   std::string gt_dir, std::vector<std::string> image_names,
                                   std::string unpaired_warning, GroundTruthRepairs repairs,
                                   std::string other_files)
    : root_(std::move(root)),
      split_(std::move(split)),
      image_dir_(std::move(image_dir)),
      gt_dir_(std::move(gt_dir)),
      image_names_(std::move(image_names)),
      unpaired_warning_(std::move(unpaired_warning)),
      repairs_(std::move(repairs)),
      other_files_(std::move(other_files)) {}

absl::StatusOr<std::unique_ptr<ICDAR2015Dataset>> ICDAR2015Dataset::Create(
    const ICDAR2015Options& options) {
  if (options.root().empty()) {
    return absl::InvalidArgumentError(
        "ICDAR2015Options.root is empty: set it to the directory that holds "
        "ch4_training_images/, ch4_training_localization_transcription_gt/, ch4_test_images/ "
        "and Challenge4_Test_Task1_GT/");
  }
  VISION_ASSIGN_OR_RETURN(const SplitLayout layout, LayoutOf(options.split()));

  const std::string image_dir = ResolveUnder(
      options.root(), options.image_dir().empty() ? layout.images : options.image_dir());
  const std::string gt_dir = ResolveUnder(
      options.root(), options.gt_dir().empty() ? layout.ground_truth : options.gt_dir());
  const std::string where =
      absl::StrCat("split '", options.split(), "' under root '", options.root(), "'");
  VISION_RETURN_IF_ERROR(CheckDirectory(
      image_dir, "image",
      options.image_dir().empty()
          ? absl::StrCat("expected ", layout.images, "/ for ", where,
                         "; set image_dir to use another directory")
          : absl::StrCat("from ICDAR2015Options.image_dir '", options.image_dir(), "'")));
  VISION_RETURN_IF_ERROR(
      CheckDirectory(gt_dir, "ground-truth",
                     options.gt_dir().empty()
                         ? absl::StrCat("expected ", layout.ground_truth, "/ for ", where,
                                        "; set gt_dir to use another directory")
                         : absl::StrCat("from ICDAR2015Options.gt_dir '", options.gt_dir(), "'")));

  // Only the format's own names take part in pairing (README, "Data policies"); other files,
  // a readme.txt or Thumbs.db, are counted for the summary.
  std::vector<std::string> image_names;
  OtherFiles other_files;
  std::error_code error;
  for (fs::directory_iterator it(image_dir, error), end; !error && it != end; it.increment(error)) {
    if (!it->is_regular_file(error)) continue;
    std::string name = it->path().filename().string();
    if (IsIcdarImageName(name)) {
      image_names.push_back(std::move(name));
    } else {
      other_files.Add(std::move(name));
    }
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("ICDAR2015: cannot list '", image_dir, "': ", error.message()));
  }
  if (image_names.empty()) {
    const std::string other = other_files.Describe();
    return absl::NotFoundError(absl::StrCat("ICDAR2015: no images (img_<N>.jpg, .jpeg or .png) in '",
                                            image_dir, "'", other.empty() ? "" : "; ", other));
  }
  std::sort(image_names.begin(), image_names.end(),
            [](const std::string& a, const std::string& b) { return NaturalLess(a, b); });

  // Orphans (README, "Data policies"): every image needs its ground truth and every
  // ground-truth file its image.
  std::set<std::string> gt_names;
  for (fs::directory_iterator it(gt_dir, error), end; !error && it != end; it.increment(error)) {
    if (!it->is_regular_file(error)) continue;
    std::string name = it->path().filename().string();
    if (IsIcdarGroundTruthName(name)) {
      gt_names.insert(std::move(name));
    } else {
      other_files.Add(std::move(name));
    }
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("ICDAR2015: cannot list '", gt_dir, "': ", error.message()));
  }
  UnpairedFiles unpaired;
  std::vector<std::string> paired;
  for (std::string& name : image_names) {
    if (gt_names.erase(GroundTruthFileName(name)) == 0) {
      unpaired.images.push_back(std::move(name));
    } else {
      paired.push_back(std::move(name));
    }
  }
  unpaired.annotations.assign(gt_names.begin(), gt_names.end());
  std::sort(unpaired.annotations.begin(), unpaired.annotations.end(),
            [](const std::string& a, const std::string& b) { return NaturalLess(a, b); });
  std::string unpaired_warning;
  VISION_RETURN_IF_ERROR(ApplyPairingPolicy(
      "ICDAR2015", unpaired, "ground-truth (gt_img_<N>.txt)", image_dir, gt_dir,
      "ICDAR2015Options.allow_unpaired_files", options.allow_unpaired_files(), &unpaired_warning));
  if (paired.empty()) {
    return absl::NotFoundError(absl::StrCat("ICDAR2015: no image in '", image_dir,
                                            "' has its ground truth in '", gt_dir, "'"));
  }

  // What the polygon policy will change, counted once for the summary.
  GroundTruthRepairs repairs;
  for (const std::string& name : paired) {
    const std::string gt_path = (fs::path(gt_dir) / GroundTruthFileName(name)).string();
    absl::StatusOr<std::string> text = ReadFile(gt_path);
    if (text.ok()) ParseIcdarGroundTruth(*text, gt_path, cv::Size(), &repairs).IgnoreError();
  }
  if (repairs.total() > 0) {
    std::fprintf(stderr, "warning: ICDAR2015 '%s': %s\n", gt_dir.c_str(),
                 repairs.Describe().c_str());
  }
  if (other_files.count() > 0) {
    std::fprintf(stderr,
                 "note: ICDAR2015: %s in '%s' and '%s': not named img_<N>.<jpg|jpeg|png> or "
                 "gt_img_<N>.txt\n",
                 other_files.Describe().c_str(), image_dir.c_str(), gt_dir.c_str());
  }
  return std::unique_ptr<ICDAR2015Dataset>(new ICDAR2015Dataset(
      options.root(), options.split(), image_dir, gt_dir, std::move(paired),
      std::move(unpaired_warning), std::move(repairs), other_files.Describe()));
}

absl::StatusOr<core::Sample> ICDAR2015Dataset::Load(int64_t index) const {
  if (index < 0 || index >= Size()) {
    return absl::OutOfRangeError(
        absl::StrCat("ICDAR2015: sample index ", index, " is outside [0, ", Size(), ")"));
  }
  const std::string& name = image_names_[index];
  core::Sample sample;
  sample.id = name;
  sample.image_path = (fs::path(image_dir_) / name).string();
  const std::string gt_path = (fs::path(gt_dir_) / GroundTruthFileName(name)).string();

  std::error_code error;
  if (!fs::exists(gt_path, error)) {
    return absl::NotFoundError(
        absl::StrCat(gt_path, ": missing ground truth for image ", sample.image_path));
  }
  VISION_ASSIGN_OR_RETURN(sample.image, core::ReadImage(sample.image_path));
  sample.original_height = sample.image.rows;
  sample.original_width = sample.image.cols;

  VISION_ASSIGN_OR_RETURN(const std::string text, ReadFile(gt_path));
  VISION_ASSIGN_OR_RETURN(sample.texts, ParseIcdarGroundTruth(text, gt_path, sample.image.size()));
  return sample;
}

std::string ICDAR2015Dataset::Describe() const {
  std::string text =
      absl::StrCat("ICDAR2015(root=", root_, ", split=", split_, ", images=", image_dir_,
                   ", gt=", gt_dir_, "): ", Size(), " samples");
  if (!unpaired_warning_.empty()) absl::StrAppend(&text, "; ", unpaired_warning_);
  if (repairs_.total() > 0) absl::StrAppend(&text, "; ", repairs_.Describe());
  if (!other_files_.empty()) absl::StrAppend(&text, "; ", other_files_);
  return text;
}

std::optional<core::DatasetMetadata> ICDAR2015Dataset::Metadata() const {
  core::DatasetMetadata metadata;
  metadata.annotation_kind = core::AnnotationKind::kTextPolygons;
  return metadata;
}

VISION_REGISTER_PLUGIN(core::DatasetRegistry, "ICDAR2015", ICDAR2015Dataset, ICDAR2015Options);

}  // namespace vision::data::datasets::icdar2015
